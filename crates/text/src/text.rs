//! Character-counted clamps shared by the tools. Limits count Unicode scalar values, never bytes,
//! so a model reading Japanese gets as much text as one reading ASCII.

/// The most characters a tool result carries (markers aside).
pub const MAX_CHARS: usize = 20_000;

/// Keeps the first `limit` characters of `text`. Returns the kept text and whether anything was cut.
/// `n` with its thousands grouped by commas (`52,428,800`), as the messages write counts.
pub fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The number of characters of `text` when it is over `limit` characters, else None; a text
/// of no more bytes than `limit` is not counted (it cannot hold more characters than bytes).
pub fn chars_over(text: &str, limit: usize) -> Option<usize> {
    if text.len() <= limit {
        return None;
    }
    let chars = text.chars().count();
    (chars > limit).then_some(chars)
}

pub fn clamp_head(text: &str, limit: usize) -> (&str, bool) {
    match text.char_indices().nth(limit) {
        Some((byte, _)) => (&text[..byte], true),
        None => (text, false),
    }
}

/// Decodes `bytes` as UTF-8, replacing invalid sequences with U+FFFD. The same result as
/// `String::from_utf8_lossy`, but valid text (the usual case) goes through std's fast validator
/// instead of the byte-at-a-time lossy decoder: on a large file that is most of an edit's cost.
pub fn lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// The marker read_file and list_files append when they cut at [`MAX_CHARS`].
pub fn head_marker() -> String {
    format!("\n[... truncated at {MAX_CHARS} chars]")
}

/// A text as read_file gives it: its first [`MAX_CHARS`] characters, with [`head_marker`] after
/// them when it was longer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clamped {
    /// The kept text, the marker after it when cut.
    pub text: String,
    /// Characters kept (the marker not counted).
    pub chars: usize,
    /// Something was cut.
    pub truncated: bool,
}

/// `text` clamped as read_file clamps a file (read_file, attachments, the project's
/// instructions).
pub fn clamp_marked(text: &str) -> Clamped {
    let (kept, truncated) = clamp_head(text, MAX_CHARS);
    let mut out = kept.to_string();
    if truncated {
        out.push_str(&head_marker());
    }
    Clamped {
        chars: kept.chars().count(),
        text: out,
        truncated,
    }
}

/// A conversation's title: the first line of its first prompt.
pub fn title_of(prompt: &str) -> String {
    prompt.lines().next().unwrap_or_default().trim().to_string()
}

/// A size in MB (MiB) as a message shows it: whole when it is whole, else rounded up to a tenth,
/// so a file just over a limit never reads as the limit itself.
pub fn megabytes(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes.is_multiple_of(MIB) {
        return (bytes / MIB).to_string();
    }
    let tenths = bytes.saturating_mul(10).div_ceil(MIB);
    format!("{}.{}", tenths / 10, tenths % 10)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn lossy_matches_std_on_valid_and_invalid_text() {
        for bytes in [&b"plain"[..], "héllo".as_bytes(), b"caf\xe9 \xf0\x9f", b""] {
            assert_eq!(lossy(bytes), String::from_utf8_lossy(bytes));
        }
    }

    #[test]
    fn clamp_head_counts_characters_not_bytes() {
        let text = "é".repeat(5);
        assert_eq!(clamp_head(&text, 3), ("ééé", true));
        assert_eq!(clamp_head(&text, 5), (text.as_str(), false));
        assert_eq!(clamp_head("", 0), ("", false));
    }
}
