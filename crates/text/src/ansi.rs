//! Command output as a terminal would finally show it, for the model: ANSI escape sequences
//! (CSI, OSC, DCS, plain ESC ones) removed, carriage-return progress lines collapsed, so a
//! progress bar costs the model one line instead of thousands and colour codes cost nothing.
//!
//! The parsing is the `vte` crate's (Alacritty's parser, the DEC ANSI state machine), built
//! without its `std` feature so an unterminated OSC string is buffered in 1,024 bytes rather than
//! without bound. What it reports is played onto one line of cells, the way a terminal would:
//! - printable characters overwrite the cell under the cursor, or extend the line;
//! - `\r` moves the cursor to the start of the line, `\b` one cell back, CSI `G`/`C`/`D` to a
//!   column, forward, back; CSI `K` erases (0: to the end, 1: to the cursor, 2: the line);
//! - `\n` ends the line: its cells are the text, and `\r\n` is just a newline;
//! - `\t` is kept as a character; every other control, and every other sequence, is dropped.
//!
//! So `a\rb` is `b`, `50%\r100%\n` is `100%\n`, and `abcdef\rxy` is `xycdef`. Cells count
//! characters, not display columns. Memory is bounded: a line holds at most [`LINE_BYTES`] bytes
//! (or [`LINE_CHARS`] cells once redrawn); a longer one is passed on in pieces of that size, as a
//! terminal wraps a long line, after which a `\r` only reaches back to the start of the last piece.

use vte::{Params, Parser, Perform};

/// The most characters one line keeps in cells (after a carriage return) before it is passed on.
pub const LINE_CHARS: usize = crate::text::MAX_CHARS;
/// The most bytes one line keeps while it is only appended to (as many characters of four bytes).
pub const LINE_BYTES: usize = 4 * LINE_CHARS;

/// A streaming filter: feed it text in pieces of any size, then [`TermText::finish`].
///
/// Plain text is appended a run at a time while the parser is known to be in its ground state;
/// only controls and escape sequences go through `vte`, one byte at a time, its callbacks telling
/// when a sequence has ended. That keeps a 250 MB flood of plain output as cheap as copying it.
#[derive(Default)]
pub struct TermText {
    parser: Parser,
    line: Line,
    /// The parser is between sequences (false until a byte proves it: at the start, and after
    /// a byte whose effect does not show where the parser is).
    ground: bool,
}

impl std::fmt::Debug for TermText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TermText")
            .field("line_bytes", &self.line.text.len())
            .field("ground", &self.ground)
            .finish_non_exhaustive()
    }
}

impl TermText {
    /// Feeds the next piece of the stream; appends to `out` the text that is final (every line
    /// ended by a newline, and pieces of over-long lines).
    pub fn feed(&mut self, text: &str, out: &mut String) {
        let bytes = text.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            if self.ground {
                let run = plain_run(&bytes[at..]);
                if run > 0 {
                    self.line.print_str(&text[at..at + run], out);
                    at += run;
                    continue;
                }
                if matches!(bytes[at], b'\n' | b'\r' | b'\t' | 0x08) {
                    self.line.control(bytes[at], out);
                    at += 1;
                    continue;
                }
            }
            let mut sink = Sink {
                line: &mut self.line,
                out,
                ground: false,
            };
            self.parser.advance(&mut sink, &bytes[at..at + 1]);
            self.ground = sink.ground;
            at += 1;
        }
    }

    /// Ends the stream: appends the last, unterminated line. A sequence cut off by the end is
    /// dropped.
    pub fn finish(&mut self, out: &mut String) {
        self.line.take_into(out);
        self.parser = Parser::default();
        self.ground = false;
    }
}

/// How many bytes at the start of `bytes` are plain text: no C0 control, DEL, ESC or C1 control
/// (U+0080–U+009F, `C2 80`–`C2 9F` in UTF-8). Never ends inside a character.
fn plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    /// Whether any byte of `word` is below `n` (n ≤ 0x80).
    fn any_below(word: u64, n: u8) -> bool {
        word.wrapping_sub(ONES * u64::from(n)) & !word & HIGHS != 0
    }
    // Eight bytes at a time while none can be a control (or the 0xC2 that may start a C1).
    let mut i = 0;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_ne_bytes(word);
        if any_below(word, 0x20)
            || any_below(word ^ (ONES * 0x7f), 1)
            || any_below(word ^ (ONES * 0xc2), 1)
        {
            break;
        }
        i += 8;
    }
    while i < bytes.len() {
        match bytes[i] {
            0x00..=0x1f | 0x7f => return i,
            0xc2 if bytes.get(i + 1).is_some_and(|b| (0x80..=0x9f).contains(b)) => return i,
            _ => i += 1,
        }
    }
    i
}

/// The line being drawn.
#[derive(Default)]
struct Line {
    /// The characters while the cursor is at the end (the usual case: plain output), at most
    /// [`LINE_BYTES`] bytes.
    text: String,
    /// The characters once the cursor moved back into the line; `text` is then empty.
    cells: Option<Vec<char>>,
    /// The cursor's cell, in `cells` mode.
    cursor: usize,
    /// A carriage return came while the line was still `text`: the cursor is at its start.
    returned: bool,
}

impl Line {
    /// Appends the line's text to `out` and starts an empty one.
    fn take_into(&mut self, out: &mut String) {
        match self.cells.take() {
            Some(cells) => out.extend(cells),
            None => out.push_str(&self.text),
        }
        self.text.clear();
        self.cursor = 0;
        self.returned = false;
    }

    /// The cells, switching to cells mode if not in it yet, with the cursor at the end (or at the
    /// start after a carriage return).
    fn cells(&mut self) -> &mut Vec<char> {
        if self.cells.is_none() {
            let cells: Vec<char> = self.text.chars().collect();
            self.cursor = if std::mem::take(&mut self.returned) {
                0
            } else {
                cells.len()
            };
            self.text.clear();
            self.cells = Some(cells);
        }
        self.cells.get_or_insert_with(Vec::new)
    }

    fn print(&mut self, c: char, out: &mut String) {
        if self.returned {
            self.cells();
        }
        if self.cells.is_some() && self.cursor >= LINE_CHARS {
            self.take_into(out);
        }
        let cursor = self.cursor;
        let Some(cells) = &mut self.cells else {
            if self.text.len() + c.len_utf8() > LINE_BYTES {
                self.take_into(out);
            }
            self.text.push(c);
            return;
        };
        if cursor < cells.len() {
            cells[cursor] = c;
        } else {
            cells.resize(cursor, ' ');
            cells.push(c);
        }
        self.cursor += 1;
    }

    /// Prints a run of plain text: appended whole in the usual case, cell by cell after the
    /// cursor moved back.
    fn print_str(&mut self, s: &str, out: &mut String) {
        if self.cells.is_some() || self.returned {
            for c in s.chars() {
                self.print(c, out);
            }
            return;
        }
        let mut rest = s;
        while !rest.is_empty() {
            if self.text.len() >= LINE_BYTES {
                self.take_into(out);
            }
            let mut cut = rest.len().min(LINE_BYTES - self.text.len());
            while !rest.is_char_boundary(cut) {
                cut -= 1;
            }
            if cut == 0 {
                // Less room than one character: start the next piece.
                self.take_into(out);
                continue;
            }
            self.text.push_str(&rest[..cut]);
            rest = &rest[cut..];
        }
    }

    /// The controls that move on the line: newline, carriage return, tab, backspace. Others
    /// draw nothing.
    fn control(&mut self, byte: u8, out: &mut String) {
        match byte {
            b'\n' => {
                self.take_into(out);
                out.push('\n');
            }
            // Not played onto cells yet: a `\r\n` line ending then costs nothing.
            b'\r' if self.cells.is_none() => self.returned = true,
            b'\r' => self.move_to(0),
            b'\t' => self.print('\t', out),
            0x08 => {
                self.cells();
                let back = self.cursor.saturating_sub(1);
                self.move_to(back);
            }
            _ => {}
        }
    }

    /// Moves the cursor to `column` (0-based), at most to the last cell (as a terminal stops at
    /// its last column).
    fn move_to(&mut self, column: usize) {
        self.cells();
        self.cursor = column.min(LINE_CHARS - 1);
    }

    fn erase(&mut self, mode: u16) {
        self.cells();
        let cursor = self.cursor;
        let cells = self.cells();
        match mode {
            0 => cells.truncate(cursor),
            1 => {
                let end = (cursor + 1).min(cells.len());
                cells[..end].fill(' ');
            }
            2 => {
                cells.truncate(cursor);
                cells.fill(' ');
            }
            _ => {}
        }
    }
}

/// What the parser reports, played onto the line.
struct Sink<'a> {
    line: &'a mut Line,
    out: &'a mut String,
    /// Set by the callbacks that leave the parser in its ground state: a character printed, a
    /// sequence dispatched.
    ground: bool,
}

impl Perform for Sink<'_> {
    fn print(&mut self, c: char) {
        self.ground = true;
        // DEL and the C1 controls draw nothing on a terminal (vte hands a C1 control that arrives
        // as a UTF-8 pair to print, not to execute).
        if !matches!(c, '\u{7f}'..='\u{9f}') {
            self.line.print(c, self.out);
        }
    }

    fn execute(&mut self, byte: u8) {
        self.line.control(byte, self.out);
    }

    fn esc_dispatch(&mut self, _intermediates: &[u8], _ignore: bool, _byte: u8) {
        self.ground = true;
    }

    fn osc_dispatch(&mut self, _params: &[&[u8]], bell_terminated: bool) {
        // An OSC ended by ESC leaves the parser reading that ESC's sequence.
        self.ground = bell_terminated;
    }

    fn csi_dispatch(&mut self, params: &Params, intermediates: &[u8], ignore: bool, action: char) {
        self.ground = true;
        if ignore || !intermediates.is_empty() {
            return;
        }
        let first = params
            .iter()
            .next()
            .and_then(|p| p.first().copied())
            .unwrap_or(0);
        let count = usize::from(first.max(1));
        match action {
            'K' => self.line.erase(first),
            'G' => self.line.move_to(count - 1),
            'C' => {
                self.line.cells();
                let to = self.line.cursor.saturating_add(count);
                self.line.move_to(to);
            }
            'D' => {
                self.line.cells();
                let to = self.line.cursor.saturating_sub(count);
                self.line.move_to(to);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The whole of `text` through one filter, in pieces of `step` bytes (cut on character
    /// boundaries, as the capture delivers them).
    fn filtered(text: &str, step: usize) -> String {
        let mut filter = TermText::default();
        let mut out = String::new();
        let mut rest = text;
        while !rest.is_empty() {
            let mut cut = step.min(rest.len());
            while !rest.is_char_boundary(cut) {
                cut += 1;
            }
            filter.feed(&rest[..cut], &mut out);
            rest = &rest[cut..];
        }
        filter.finish(&mut out);
        out
    }

    fn check(text: &str, want: &str) {
        for step in [1, 2, 3, 5, 4096] {
            assert_eq!(filtered(text, step), want, "{text:?} in pieces of {step}");
        }
    }

    #[test]
    fn carriage_returns_collapse_to_what_the_terminal_finally_shows() {
        check("a\rb", "b");
        check("50%\r100%\n", "100%\n");
        check("one\r\ntwo\r\n", "one\ntwo\n");
        check("abcdef\rxy\n", "xycdef\n");
        check("  1%\r 50%\r100%\rdone\n", "done\n");
        check("spin |\u{8}/\u{8}-\u{8}\\\n", "spin \\\n");
        check("ends with a return\r", "ends with a return");
    }

    #[test]
    fn a_crlf_line_ending_never_turns_the_line_into_cells() {
        let mut filter = TermText::default();
        let mut out = String::new();
        filter.feed("one line\r", &mut out);
        assert!(filter.line.cells.is_none());
        filter.feed("\nnext\rN", &mut out);
        assert_eq!(out, "one line\n");
        assert_eq!(filter.line.cells, Some("Next".chars().collect()));
    }

    #[test]
    fn escape_sequences_are_removed() {
        check("\u{1b}[1;31merror\u{1b}[0m: bad\n", "error: bad\n");
        check("\u{1b}]8;;http://x\u{7}link\u{1b}]8;;\u{1b}\\\n", "link\n");
        check("\u{1b}]0;title\u{1b}\\ok\n", "ok\n");
        check("a\u{1b}(Bb\u{1b}7c\n", "abc\n");
        check("\u{1b}Pq#0;1;2\u{1b}\\x\n", "x\n");
        check("\u{1b}[?25lhidden cursor\u{1b}[?25h\n", "hidden cursor\n");
        check("bell\u{7} and del\u{7f}\n", "bell and del\n");
        // C1 controls arrive as UTF-8 pairs, which vte hands to print: they are dropped too.
        check("x\u{1b}[31m\u{85}y\n", "xy\n");
        check("a\u{9b}31mb\n", "a31mb\n");
        check("tab\tkept\n", "tab\tkept\n");
        check("é😀 日本\n", "é😀 日本\n");
    }

    #[test]
    fn erase_and_cursor_moves_redraw_the_line() {
        // The payload from the issue: what a terminal finally shows is `ls -la`.
        check("touch PWNED #\r\u{1b}[2Kls -la\n", "ls -la\n");
        check("downloading 50%\r\u{1b}[Kdone\n", "done\n");
        check("downloading\u{1b}[4D\u{1b}[K\n", "downloa\n");
        check("abc\u{1b}[1GX\n", "Xbc\n");
        check("a\u{1b}[3Cb\n", "a   b\n");
        check("abcd\u{1b}[2D\u{1b}[1K!\n", "  !d\n");
    }

    #[test]
    fn a_plain_run_stops_at_the_first_control_wherever_it_is() {
        let text = "abcdefghijklmnopqrstuvwxyzé€😀 plain text that goes on".repeat(3);
        assert_eq!(plain_run(text.as_bytes()), text.len());
        for stop in ["\u{1b}", "\n", "\r", "\u{0}", "\u{7f}", "\u{85}", "\u{9b}"] {
            for at in 0..40 {
                let probe = format!("{}{stop}{}", &"x".repeat(at), "y".repeat(20));
                assert_eq!(plain_run(probe.as_bytes()), at, "{stop:?} at {at}");
            }
        }
        // 0xC2 starting a printable character (U+00A0..) is plain.
        assert_eq!(plain_run("a\u{a0}b\u{bf}cdefghij".as_bytes()), 14);
    }

    #[test]
    fn a_line_without_end_is_passed_on_in_bounded_pieces() {
        let mut filter = TermText::default();
        let mut out = String::new();
        let piece = "x".repeat(1000);
        for _ in 0..100 {
            filter.feed(&piece, &mut out);
            assert!(filter.line.text.len() <= LINE_BYTES);
        }
        assert_eq!(out.len(), 100_000 - 100_000 % LINE_BYTES);
        filter.finish(&mut out);
        assert_eq!(out, "x".repeat(100_000));
        // Moving the cursor far right cannot grow a line past the bound either.
        let mut filter = TermText::default();
        let mut out = String::new();
        filter.feed("\u{1b}[65535C\u{1b}[65535Cx", &mut out);
        filter.finish(&mut out);
        assert_eq!(out, format!("{}x", " ".repeat(LINE_CHARS - 1)));
    }
}
