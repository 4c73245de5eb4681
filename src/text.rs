//! Character-counted clamps shared by the tools. Limits count Unicode scalar values, never bytes,
//! so a model reading Japanese gets as much text as one reading ASCII.

/// The most characters a tool result carries (markers aside).
pub const MAX_CHARS: usize = 20_000;

/// Keeps the first `limit` characters of `text`. Returns the kept text and whether anything was cut.
pub fn clamp_head(text: &str, limit: usize) -> (&str, bool) {
    match text.char_indices().nth(limit) {
        Some((byte, _)) => (&text[..byte], true),
        None => (text, false),
    }
}

/// The marker read_file and list_files append when they cut at [`MAX_CHARS`].
pub fn head_marker() -> String {
    format!("\n[... truncated at {MAX_CHARS} chars]")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn clamp_head_counts_characters_not_bytes() {
        let text = "é".repeat(5);
        assert_eq!(clamp_head(&text, 3), ("ééé", true));
        assert_eq!(clamp_head(&text, 5), (text.as_str(), false));
        assert_eq!(clamp_head("", 0), ("", false));
    }
}
