//! One output stream's text in bounded memory, and the text the model reads built from two of
//! them. Pure: bytes in, text out, no processes (those are the parent module's).
//!
//! A [`Capture`] decodes a stream lossily as it arrives, passes it through [`TermText`], and
//! keeps only its first and last [`MAX_CHARS`] characters and the count of the rest; [`compose`]
//! joins stdout and stderr and clamps the join exactly as if both had been kept whole.

use crate::ansi::TermText;
use crate::text::{clamp_head, MAX_CHARS};

/// Characters kept from the beginning of a clamped text.
const KEEP_HEAD: usize = 8_000;
/// Characters kept from the end of a clamped text: more than the beginning, because the end is
/// where the failing test and the compiler error are.
const KEEP_TAIL: usize = MAX_CHARS - KEEP_HEAD;
/// Bytes of a stream's tail kept after trimming: at least [`MAX_CHARS`] characters of at most four
/// bytes each, plus slack for moving the cut forward to a character boundary.
const TAIL_BYTES: usize = 4 * MAX_CHARS + 4;

/// One output stream, decoded lossily as it arrives and passed through [`TermText`] (escape
/// sequences out, progress redraws collapsed), in bounded memory: the first [`MAX_CHARS`]
/// characters of what is left, a suffix of the rest holding at least its last [`MAX_CHARS`]
/// characters, and the count of all of them. That is enough for [`compose`] to build any clamped
/// text exactly.
#[derive(Debug, Default)]
pub(super) struct Capture {
    /// What a terminal would finally show of the decoded text.
    screen: TermText,
    /// The text `screen` let through, reused from read to read.
    shown: String,
    /// The first characters, up to [`MAX_CHARS`].
    head: String,
    head_chars: usize,
    /// A suffix of everything after `head`, at most `2 * TAIL_BYTES` bytes.
    tail: String,
    tail_chars: usize,
    /// Characters seen in all.
    chars: usize,
    /// The start of a UTF-8 sequence split across reads (at most 3 bytes).
    pending: [u8; 4],
    pending_len: usize,
}

impl Capture {
    /// Decodes `data` as the continuation of everything pushed before, exactly as
    /// `String::from_utf8_lossy` would decode the whole stream.
    pub(super) fn push_bytes(&mut self, mut data: &[u8]) {
        // Complete a split sequence one byte at a time; it never needs more than three.
        while self.pending_len > 0 {
            let Some((&byte, rest)) = data.split_first() else {
                return;
            };
            data = rest;
            let mut joined = self.pending;
            joined[self.pending_len] = byte;
            let len = self.pending_len + 1;
            self.pending_len = 0;
            let left = self.decode(&joined[..len]);
            self.keep_pending(&joined[len - left..len]);
        }
        let left = self.decode(data);
        self.keep_pending(&data[data.len() - left..]);
    }

    /// Pushes the text in `bytes`, with U+FFFD for each invalid sequence. Returns how many
    /// trailing bytes are the unfinished start of a sequence, left for the next read.
    fn decode(&mut self, bytes: &[u8]) -> usize {
        // Fast path: std's validator is word-at-a-time on ASCII, Utf8Chunks is byte-at-a-time.
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                self.push_str(text);
                return 0;
            }
            Err(err) if err.error_len().is_none() => {
                let (valid, unfinished) = bytes.split_at(err.valid_up_to());
                self.push_str(std::str::from_utf8(valid).unwrap_or_default());
                return unfinished.len();
            }
            Err(_) => {}
        }
        let mut chunks = bytes.utf8_chunks().peekable();
        while let Some(chunk) = chunks.next() {
            self.push_str(chunk.valid());
            let invalid = chunk.invalid();
            if invalid.is_empty() {
                continue;
            }
            let unfinished = chunks.peek().is_none()
                && std::str::from_utf8(invalid).is_err_and(|e| e.error_len().is_none());
            if unfinished {
                return invalid.len();
            }
            self.push_str("\u{FFFD}");
        }
        0
    }

    fn keep_pending(&mut self, bytes: &[u8]) {
        self.pending[..bytes.len()].copy_from_slice(bytes);
        self.pending_len = bytes.len();
    }

    /// Ends the stream: an unfinished sequence at EOF is one U+FFFD, as lossy decoding has it.
    pub(super) fn finish(&mut self) {
        if self.pending_len > 0 {
            self.pending_len = 0;
            self.push_str("\u{FFFD}");
        }
        let mut shown = std::mem::take(&mut self.shown);
        self.screen.finish(&mut shown);
        self.keep(&shown);
    }

    /// Passes decoded text through the terminal filter and keeps what it lets through.
    fn push_str(&mut self, s: &str) {
        let mut shown = std::mem::take(&mut self.shown);
        self.screen.feed(s, &mut shown);
        self.keep(&shown);
        shown.clear();
        self.shown = shown;
    }

    fn keep(&mut self, mut s: &str) {
        if s.is_empty() {
            return;
        }
        self.chars += s.chars().count();
        if self.head_chars < MAX_CHARS {
            let (taken, _) = clamp_head(s, MAX_CHARS - self.head_chars);
            self.head.push_str(taken);
            self.head_chars += taken.chars().count();
            s = &s[taken.len()..];
            if s.is_empty() {
                return;
            }
        }
        if s.len() >= TAIL_BYTES {
            let kept = &s[ceil_boundary(s, s.len() - TAIL_BYTES)..];
            self.tail.clear();
            self.tail.push_str(kept);
            self.tail_chars = kept.chars().count();
            return;
        }
        self.tail.push_str(s);
        self.tail_chars += s.chars().count();
        // Trimming only when twice the bound is reached keeps the cost per byte constant.
        if self.tail.len() > 2 * TAIL_BYTES {
            let cut = ceil_boundary(&self.tail, self.tail.len() - TAIL_BYTES);
            self.tail_chars -= self.tail[..cut].chars().count();
            self.tail.drain(..cut);
        }
    }

    /// Whether nothing was dropped between head and tail.
    fn is_whole(&self) -> bool {
        self.head_chars + self.tail_chars == self.chars
    }

    fn last_char(&self) -> Option<char> {
        self.tail
            .chars()
            .next_back()
            .or_else(|| self.head.chars().next_back())
    }

    /// The first `n` characters. Exact while `n` is at most [`MAX_CHARS`] or nothing was dropped.
    fn prefix(&self, n: usize) -> String {
        if n <= self.head_chars {
            return clamp_head(&self.head, n).0.to_string();
        }
        let (from_tail, _) = clamp_head(&self.tail, n - self.head_chars);
        [self.head.as_str(), from_tail].concat()
    }

    /// The last `n` characters. Exact while `n` is at most [`MAX_CHARS`] or nothing was dropped.
    fn suffix(&self, n: usize) -> String {
        if n <= self.tail_chars {
            return last_chars(&self.tail, n).to_string();
        }
        [
            last_chars(&self.head, n - self.tail_chars),
            self.tail.as_str(),
        ]
        .concat()
    }
}

/// The smallest character boundary of `s` at or after `at`.
fn ceil_boundary(s: &str, mut at: usize) -> usize {
    while at < s.len() && !s.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// The last `n` characters of `s` (all of it when it is shorter).
fn last_chars(s: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    match s.char_indices().nth_back(n - 1) {
        Some((byte, _)) => &s[byte..],
        None => s,
    }
}

/// One part of the combined text: a fixed string or a captured stream.
enum Part<'a> {
    Text(&'a str),
    Stream(&'a Capture),
}

impl Part<'_> {
    fn chars(&self) -> usize {
        match self {
            Part::Text(s) => s.chars().count(),
            Part::Stream(c) => c.chars,
        }
    }

    fn prefix(&self, n: usize) -> String {
        match self {
            Part::Text(s) => clamp_head(s, n).0.to_string(),
            Part::Stream(c) => c.prefix(n),
        }
    }

    fn suffix(&self, n: usize) -> String {
        match self {
            Part::Text(s) => last_chars(s, n).to_string(),
            Part::Stream(c) => c.suffix(n),
        }
    }
}

/// stdout; when stderr is not empty, a newline if stdout does not end in one, `[stderr]\n` and
/// stderr. Past [`MAX_CHARS`] characters, the first [`KEEP_HEAD`] and the last [`KEEP_TAIL`] of
/// that, with a marker saying exactly how many were cut between them.
pub(super) fn compose(out: &Capture, err: &Capture) -> String {
    let has_err = err.chars > 0;
    let newline = has_err && out.chars > 0 && out.last_char() != Some('\n');
    let parts = [
        Part::Stream(out),
        Part::Text(if newline { "\n" } else { "" }),
        Part::Text(if has_err { "[stderr]\n" } else { "" }),
        Part::Stream(err),
    ];
    let total: usize = parts.iter().map(Part::chars).sum();
    if total <= MAX_CHARS {
        // Every stream is at most MAX_CHARS characters, so each is whole.
        debug_assert!(out.is_whole() && err.is_whole());
        return parts.iter().map(|part| part.prefix(part.chars())).collect();
    }
    let mut head = String::new();
    let mut want = KEEP_HEAD;
    for part in &parts {
        let take = want.min(part.chars());
        head.push_str(&part.prefix(take));
        want -= take;
    }
    let mut tail_parts = Vec::new();
    let mut want = KEEP_TAIL;
    for part in parts.iter().rev() {
        let take = want.min(part.chars());
        tail_parts.push(part.suffix(take));
        want -= take;
    }
    let tail: String = tail_parts.into_iter().rev().collect();
    let cut = total - MAX_CHARS;
    format!("{head}\n[... truncated at {MAX_CHARS} chars: {cut} chars cut ...]\n{tail}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::process::READ_CHUNK;

    /// What compose must produce, built the obvious way from whole strings.
    fn reference(out: &str, err: &str) -> String {
        let mut all = out.to_string();
        if !err.is_empty() {
            if !out.is_empty() && !out.ends_with('\n') {
                all.push('\n');
            }
            all.push_str("[stderr]\n");
            all.push_str(err);
        }
        let chars: Vec<char> = all.chars().collect();
        if chars.len() <= MAX_CHARS {
            return all;
        }
        let head: String = chars[..KEEP_HEAD].iter().collect();
        let tail: String = chars[chars.len() - KEEP_TAIL..].iter().collect();
        let cut = chars.len() - MAX_CHARS;
        format!("{head}\n[... truncated at 20000 chars: {cut} chars cut ...]\n{tail}")
    }

    /// Feeds `text` to a capture in reads of `step` bytes, splitting characters anywhere.
    fn captured(text: &[u8], step: usize) -> Capture {
        let mut capture = Capture::default();
        for piece in text.chunks(step.max(1)) {
            capture.push_bytes(piece);
        }
        capture.finish();
        capture
    }

    #[test]
    fn decoding_split_reads_matches_lossy_decoding_of_the_whole() {
        let mut bytes = "aé€😀z".as_bytes().to_vec();
        bytes.extend_from_slice(&[0xE2, 0x82, b'x', 0xFF, 0xC3, 0xC3, 0xA9, 0x80, 0xF0, 0x9F]);
        let want = String::from_utf8_lossy(&bytes).into_owned();
        for step in 1..=bytes.len() {
            let capture = captured(&bytes, step);
            assert_eq!(capture.prefix(capture.chars), want, "reads of {step} bytes");
            assert_eq!(capture.chars, want.chars().count());
        }
    }

    #[test]
    fn compose_matches_the_reference_around_the_limit_and_far_past_it() {
        let cases: Vec<(String, String)> = vec![
            (String::new(), String::new()),
            ("hi\n".into(), String::new()),
            ("a".into(), "b".into()),
            ("a\n".into(), "b".into()),
            (String::new(), "b".into()),
            // exactly at the limit, and one past it
            ("x".repeat(MAX_CHARS), String::new()),
            ("x".repeat(MAX_CHARS + 1), String::new()),
            ("é".repeat(MAX_CHARS - 11), "ü".into()),
            ("é".repeat(MAX_CHARS - 10), "ü".into()),
            // the head ends inside the `[stderr]` line
            ("a".repeat(7_995), "b".repeat(20_000)),
            // the tail reaches back into stdout
            ("😀".repeat(50_000), "short error\n".into()),
            ("é".repeat(100_000), "ü".repeat(100_000)),
            (String::new(), "€".repeat(45_000)),
        ];
        for (out, err) in cases {
            for step in [1, 7, READ_CHUNK] {
                let text = compose(
                    &captured(out.as_bytes(), step),
                    &captured(err.as_bytes(), step),
                );
                assert!(
                    text == reference(&out, &err),
                    "stdout {} chars, stderr {} chars, reads of {step}",
                    out.chars().count(),
                    err.chars().count()
                );
            }
        }
    }

    #[test]
    fn a_capture_keeps_bounded_memory() {
        let mut capture = Capture::default();
        let chunk = "é".repeat(READ_CHUNK / 2);
        for _ in 0..200 {
            capture.push_bytes(chunk.as_bytes());
            assert!(capture.tail.len() <= 2 * TAIL_BYTES);
            assert!(capture.head.len() <= 4 * MAX_CHARS);
        }
        capture.finish();
        assert_eq!(capture.chars, 200 * READ_CHUNK / 2);
        assert_eq!(capture.suffix(3), "ééé");
    }

    #[test]
    fn escapes_and_progress_lines_split_across_reads_are_filtered_the_same() {
        let text =
            "\u{1b}[1;32mok\u{1b}[0m \u{1b}]0;title\u{7}é\n 10%\r 50%\r100%\r\nend\r\u{1b}[2Kfin";
        for step in 1..=text.len() {
            let capture = captured(text.as_bytes(), step);
            assert_eq!(
                capture.prefix(capture.chars),
                "ok é\n100%\nfin",
                "reads of {step} bytes"
            );
        }
    }
}
