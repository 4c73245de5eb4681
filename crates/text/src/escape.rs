//! What a person is shown. Every string a front end shows to someone deciding (the terminal
//! question, the picker's title, preview and choices) or recording a decision (chat rows, tool
//! summaries, log lines) goes through [`visible`] first, so text from the model, an external agent,
//! a file name or a command's output cannot steer the screen: a carriage return, an escape
//! sequence or a bidi override is shown as an escape instead of acting.
//!
//! The escape form: `\0`, `\t`, `\n`, `\r` and `\e` (ESC) for those five; `\u{hex}` (lower-case
//! hex, no padding: `\u{7}`, `\u{9b}`, `\u{202e}`) for every other hidden character. Hidden are the
//! C0 and C1 controls, DEL, the bidi controls (U+061C, U+200E, U+200F, U+202A–U+202E,
//! U+2066–U+2069), line and paragraph separators, and the invisible format characters Unicode
//! calls default-ignorable (zero-width spaces and joiners, word joiners, U+FEFF, soft hyphen,
//! Hangul fillers, tag characters, variation selectors other than a text or emoji selector right
//! after the character it modifies). A backslash is shown as it is: a displayed `\e` may be an
//! ESC or the two characters `\e`, and both are in plain sight, which is what matters.
//!
//! Only what is shown changes: the command that runs and the action a session grant covers are
//! never taken from here.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Which layout characters a piece of text keeps; everything else hidden is escaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One line: titles, summaries, choice labels, log lines. Newlines and tabs are escaped too.
    OneLine,
    /// Lines of a preview a person approves: newlines separate lines, a tab is shown as `\t`.
    Lines,
    /// Prose and output (the model's text, a tool's output): newlines and tabs kept, and a
    /// carriage return right before a newline dropped (it moves nothing a person could miss).
    Prose,
}

/// `text` with every hidden character (see the module doc) replaced by its escape. Borrowed when
/// nothing needed escaping, which is the usual case. Idempotent: what it returns has nothing
/// left to escape.
pub fn visible(text: &str, layout: Layout) -> Cow<'_, str> {
    // Printable ASCII, and the layout characters the layout keeps, are never hidden: a run of
    // them (most of any text) is taken whole, not a character at a time.
    let plain = |b: u8| match b {
        0x20..=0x7e => true,
        b'\n' => layout != Layout::OneLine,
        b'\t' => layout == Layout::Prose,
        _ => false,
    };
    let bytes = text.as_bytes();
    let mut prev: Option<char> = None;
    let mut out: Option<String> = None;
    let mut at = 0;
    while at < text.len() {
        let run = bytes[at..]
            .iter()
            .position(|&b| !plain(b))
            .unwrap_or(text.len() - at);
        if run > 0 {
            if let Some(s) = &mut out {
                s.push_str(&text[at..at + run]);
            }
            prev = Some(char::from(bytes[at + run - 1]));
            at += run;
            continue;
        }
        let mut rest = text[at..].chars();
        let Some(c) = rest.next() else {
            break;
        };
        let next = rest.next();
        let hide = hidden(c, prev, layout);
        match (&mut out, hide) {
            (None, false) => {}
            (None, true) => {
                let mut s = String::with_capacity(text.len() + 16);
                s.push_str(&text[..at]);
                push_escape(&mut s, c, next, layout);
                out = Some(s);
            }
            (Some(s), false) => s.push(c),
            (Some(s), true) => push_escape(s, c, next, layout),
        }
        prev = Some(c);
        at += c.len_utf8();
    }
    match out {
        Some(s) => Cow::Owned(s),
        None => Cow::Borrowed(text),
    }
}

/// [`visible`] of an owned string: the same string back when nothing needed escaping.
pub fn visible_owned(text: String, layout: Layout) -> String {
    let escaped = match visible(&text, layout) {
        Cow::Owned(shown) => Some(shown),
        Cow::Borrowed(_) => None,
    };
    escaped.unwrap_or(text)
}

/// Whether `c` (after `prev`) must not reach the screen as it is.
fn hidden(c: char, prev: Option<char>, layout: Layout) -> bool {
    match c {
        '\n' => layout == Layout::OneLine,
        '\t' => layout != Layout::Prose,
        // In prose a carriage return before a newline is dropped (by push_escape).
        '\r' => true,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        // A text or emoji presentation selector right after a visible character only picks how
        // that character is drawn (`⚠️`); anywhere else it is invisible padding.
        '\u{fe0e}' | '\u{fe0f}' => !prev.is_some_and(|p| !is_invisible(p) && !p.is_control()),
        _ => is_invisible(c),
    }
}

/// Bidi controls, separators and default-ignorable format characters (Unicode's
/// DerivedCoreProperties), presentation selectors included.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{ad}' | '\u{34f}' | '\u{61c}' | '\u{115f}' | '\u{1160}' | '\u{17b4}' | '\u{17b5}'
        | '\u{180b}'..='\u{180f}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}'
        | '\u{3164}'
        | '\u{fe00}'..='\u{fe0f}'
        | '\u{feff}' | '\u{ffa0}'
        | '\u{fff0}'..='\u{fffb}'
        | '\u{1bca0}'..='\u{1bca3}'
        | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0000}'..='\u{e0fff}')
}

/// Writes the escape for `c`, or nothing for a carriage return the layout drops.
fn push_escape(out: &mut String, c: char, next: Option<char>, layout: Layout) {
    match c {
        '\0' => out.push_str("\\0"),
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' if layout == Layout::Prose && next == Some('\n') => {}
        '\r' => out.push_str("\\r"),
        '\u{1b}' => out.push_str("\\e"),
        other => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(other));
        }
    }
}

/// A preview shows at most this many blank characters in a row; a longer run is one marker.
const BLANK_RUN: usize = 32;

/// The lines of a command (or any text a person approves) as the preview shows them: each made
/// [`visible`], a run of two or more blank lines shown as one marker line
/// `[… 60 blank lines …]`, and a run of more than [`BLANK_RUN`] blank characters within a line as
/// `[… 200 spaces …]`, so nothing can be pushed out of sight by padding. A final newline ends the
/// last line rather than starting an empty one.
pub fn preview_lines(text: &str) -> Vec<String> {
    squeezed_lines(text.strip_suffix('\n').unwrap_or(text))
}

/// The lines of `text` (split at every newline) made [`visible`], with the markers of
/// [`preview_lines`].
fn squeezed_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut blanks = 0usize;
    for line in text.split('\n') {
        if is_blank_line(line) {
            blanks += 1;
            continue;
        }
        flush_blanks(&mut lines, blanks);
        blanks = 0;
        lines.push(shell_blanks(&squeeze_blanks(&visible(line, Layout::Lines))));
    }
    flush_blanks(&mut lines, blanks);
    lines
}

/// Whether `line` (as it is, before escaping) is blank to the shell: only spaces and tabs. So
/// `"  \t "` is blank, and a line holding a no-break space, an ideographic space or the braille
/// blank is not: bash reads those as part of a word (a line of them runs a command of that
/// name), so the preview shows that line, with those characters escaped ([`shell_blanks`]).
fn is_blank_line(line: &str) -> bool {
    line.chars().all(|c| c == ' ' || c == '\t')
}

/// `line` with every blank character that is not blank to the shell (no-break spaces, the
/// Unicode spaces, the braille blank) shown as an escape, so what reads as space in a command
/// is space when it runs.
fn shell_blanks(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        if is_blank(c) && c != ' ' && c != '\t' {
            push_escape(&mut out, c, None, Layout::Lines);
        } else {
            out.push(c);
        }
    }
    out
}

fn flush_blanks(lines: &mut Vec<String>, blanks: usize) {
    match blanks {
        0 => {}
        1 => lines.push(String::new()),
        n => lines.push(format!("[… {n} blank lines …]")),
    }
}

/// Draws as empty space: whitespace, and the braille blank that is not whitespace to Unicode.
fn is_blank(c: char) -> bool {
    c.is_whitespace() || c == '\u{2800}'
}

/// `line` with each run of more than [`BLANK_RUN`] whitespace characters replaced by a marker
/// saying how long it was.
fn squeeze_blanks(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut run = String::new();
    let flush = |out: &mut String, run: &mut String| {
        let n = run.chars().count();
        if n > BLANK_RUN {
            let what = if run.chars().all(|c| c == ' ') {
                "spaces"
            } else {
                "blank characters"
            };
            let _ = write!(out, "[… {n} {what} …]");
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in line.chars() {
        if is_blank(c) {
            run.push(c);
        } else {
            flush(&mut out, &mut run);
            out.push(c);
        }
    }
    flush(&mut out, &mut run);
    out
}

/// The title of an approval question. A command of more than one line says how many
/// (`run_bash · 62 lines`), and so does one too long to read in a title (`run_bash · 1 line,
/// 300 chars`): its preview shows it whole. Anything else is its one line, made visible.
pub fn approval_title(tool: &str, detail: &str, is_command: bool) -> String {
    /// Characters a command title may have before it only says how long the command is.
    const TITLE_CHARS: usize = 60;
    if is_command {
        let lines = preview_lines(detail);
        let count = line_count(detail);
        if count > 1 {
            return format!("{tool} · {count} lines");
        }
        let one = lines.first().map(String::as_str).unwrap_or_default();
        if detail.contains('\n') || one.chars().count() > TITLE_CHARS {
            return format!("{tool} · 1 line, {} chars", detail.chars().count());
        }
        return one.to_string();
    }
    one_line(detail)
}

/// `text` made [`visible`] on one line: its lines as a preview shows them (a run of blank lines
/// and a long run of blank characters each one marker) joined by `\n`, so neither padding nor
/// a newline can push part of it out of sight or make two lines read as one command. Every
/// newline is kept, a final one too (`ls\n`).
pub fn one_line(text: &str) -> String {
    squeezed_lines(text).join("\\n")
}

/// `line` (a [`one_line`] form) cut to at most `max` characters, the last of which is `…` when
/// anything was cut. The cut falls between escapes and markers, never inside one: half an escape
/// (`\u{2…`) or half a marker would read as something else.
pub fn cut(line: &str, max: usize) -> String {
    if line.chars().count() <= max {
        return line.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    let mut rest = line;
    while !rest.is_empty() {
        let atom = &rest[..unit_len(rest)];
        let n = atom.chars().count();
        if used + n + 1 > max {
            break;
        }
        out.push_str(atom);
        used += n;
        rest = &rest[atom.len()..];
    }
    out.push('…');
    out
}

/// The byte length of the first unit of `text` (not empty) that a cut keeps whole: an escape
/// (`\e`, `\u{202e}`), a marker (`[… 60 blank lines …]`), or else one character.
fn unit_len(text: &str) -> usize {
    if let Some(after) = text.strip_prefix('\\') {
        if let Some(hex) = after.strip_prefix("u{") {
            if let Some(end) = hex.find('}') {
                if end > 0 && hex[..end].chars().all(|c| c.is_ascii_hexdigit()) {
                    return "\\u{".len() + end + 1;
                }
            }
        }
        if after.starts_with(['0', 't', 'n', 'r', 'e']) {
            return 2;
        }
    }
    if let Some(inner) = text.strip_prefix("[… ") {
        if let Some(end) = inner.find(" …]") {
            let marker = inner[..end].split_once(' ').is_some_and(|(n, what)| {
                !n.is_empty()
                    && n.chars().all(|c| c.is_ascii_digit())
                    && matches!(what, "blank lines" | "spaces" | "blank characters")
            });
            if marker {
                return "[… ".len() + end + " …]".len();
            }
        }
    }
    text.chars().next().map_or(0, char::len_utf8)
}

/// How many lines a command has; a final newline ends the last one rather than starting another.
pub fn line_count(command: &str) -> usize {
    command
        .strip_suffix('\n')
        .unwrap_or(command)
        .split('\n')
        .count()
}

/// A diff's preview shows a run of at most this many blank lines as they are (code has two
/// between functions); a longer run is one marker line.
const DIFF_BLANK_RUN: usize = 3;

/// The lines of a unified diff as the preview shows them: each made [`visible`], a long run of
/// blank characters squeezed, and a run of more than [`DIFF_BLANK_RUN`] lines that are blank but
/// for the same prefix (`+`, `-`, ` `) shown as one marker line with that prefix
/// (`+[… 60 blank lines …]`), so padding cannot push a line out of sight. A command's preview
/// ([`preview_lines`]) marks every run of two: a blank line means nothing to a shell.
pub fn diff_lines(diff: &str) -> Vec<String> {
    let body = diff.strip_suffix('\n').unwrap_or(diff);
    let mut lines = Vec::new();
    let mut run: Option<(char, usize)> = None;
    let flush = |lines: &mut Vec<String>, run: Option<(char, usize)>| match run {
        Some((prefix, n)) if n <= DIFF_BLANK_RUN => {
            lines.extend(std::iter::repeat_n(prefix.to_string(), n));
        }
        Some((prefix, n)) => lines.push(format!("{prefix}[… {n} blank lines …]")),
        None => {}
    };
    for line in body.split('\n') {
        let mut raw = line.chars();
        let prefix = raw.next();
        let blank = is_blank_line(raw.as_str());
        match (prefix, blank, run) {
            (Some(p @ ('+' | '-' | ' ')), true, Some((q, n))) if p == q => run = Some((q, n + 1)),
            (Some(p @ ('+' | '-' | ' ')), true, _) => {
                flush(&mut lines, run.take());
                run = Some((p, 1));
            }
            _ => {
                flush(&mut lines, run.take());
                lines.push(squeeze_blanks(&visible(line, Layout::Lines)));
            }
        }
    }
    flush(&mut lines, run);
    lines
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// `visible` a character at a time, as it was before runs of plain ASCII were taken whole.
    fn one_char_at_a_time(text: &str, layout: Layout) -> String {
        let mut out = String::new();
        let mut prev = None;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if hidden(c, prev, layout) {
                push_escape(&mut out, c, chars.peek().copied(), layout);
            } else {
                out.push(c);
            }
            prev = Some(c);
        }
        out
    }

    #[test]
    fn runs_of_plain_ascii_change_nothing_that_is_shown() {
        let texts = [
            "",
            "plain text",
            "x\u{fe0f} after ascii, \u{fe0f} after a space, \u{fe0f}",
            "\u{fe0f}first",
            "\u{26a0}\u{fe0f} warning\u{200b}joined",
            "line one\r\nline two\rover\n\ttabbed\tend\n",
            "\u{1b}[31mred\u{1b}[0m and \u{202e}reversed\u{202c}",
            "caf\u{e9} \u{9b}c1 \u{7f}del \0nul",
            "ends with a return\r",
            "\r\n",
        ];
        for text in texts {
            for layout in [Layout::OneLine, Layout::Lines, Layout::Prose] {
                assert_eq!(
                    visible(text, layout),
                    one_char_at_a_time(text, layout),
                    "{text:?} {layout:?}"
                );
                assert_eq!(
                    visible_owned(text.to_string(), layout),
                    one_char_at_a_time(text, layout)
                );
            }
        }
        assert!(matches!(
            visible("all plain\n", Layout::Prose),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn the_payload_from_the_issue_shows_its_carriage_return_and_escape() {
        assert_eq!(
            visible("touch PWNED #\r\u{1b}[2Kls -la", Layout::OneLine),
            "touch PWNED #\\r\\e[2Kls -la"
        );
    }

    #[test]
    fn every_class_of_hidden_character_has_its_escape() {
        let cases = [
            ("\0", "\\0"),
            ("\t", "\\t"),
            ("\n", "\\n"),
            ("\r", "\\r"),
            ("\u{1b}", "\\e"),
            ("\u{7}", "\\u{7}"),
            ("\u{8}", "\\u{8}"),
            ("\u{1f}", "\\u{1f}"),
            ("\u{7f}", "\\u{7f}"),
            ("\u{80}", "\\u{80}"),
            ("\u{9b}", "\\u{9b}"),
            ("\u{9f}", "\\u{9f}"),
            ("\u{202a}", "\\u{202a}"),
            ("\u{202e}", "\\u{202e}"),
            ("\u{2066}", "\\u{2066}"),
            ("\u{2069}", "\\u{2069}"),
            ("\u{200b}", "\\u{200b}"),
            ("\u{200d}", "\\u{200d}"),
            ("\u{200f}", "\\u{200f}"),
            ("\u{2060}", "\\u{2060}"),
            ("\u{feff}", "\\u{feff}"),
            ("\u{2028}", "\\u{2028}"),
            ("\u{ad}", "\\u{ad}"),
            ("\u{3164}", "\\u{3164}"),
            ("\u{e0041}", "\\u{e0041}"),
            ("\u{fe01}", "\\u{fe01}"),
        ];
        for (raw, want) in cases {
            assert_eq!(visible(raw, Layout::OneLine), want, "{raw:?}");
            assert_eq!(
                visible(&format!("a{raw}b"), Layout::OneLine),
                format!("a{want}b")
            );
        }
    }

    #[test]
    fn a_bidi_override_cannot_reorder_what_is_shown() {
        assert_eq!(
            visible("rm -rf ~ #\u{202e} gnp.tac", Layout::Lines),
            "rm -rf ~ #\\u{202e} gnp.tac"
        );
        assert_eq!(
            visible("ls \u{2067}x\u{2069}", Layout::Prose),
            "ls \\u{2067}x\\u{2069}"
        );
    }

    #[test]
    fn each_layout_keeps_only_its_own_layout_characters() {
        let text = "a\tb\r\nc\rd\n";
        assert_eq!(visible(text, Layout::OneLine), "a\\tb\\r\\nc\\rd\\n");
        assert_eq!(visible(text, Layout::Lines), "a\\tb\\r\nc\\rd\n");
        assert_eq!(visible(text, Layout::Prose), "a\tb\nc\\rd\n");
    }

    #[test]
    fn plain_text_is_borrowed_and_printable_unicode_is_left_alone() {
        for text in [
            "ls -la",
            "héllo wörld 日本語 😀",
            "printf '%s\\n' \\e",
            "⚠️ careful",
        ] {
            assert!(
                matches!(visible(text, Layout::OneLine), Cow::Borrowed(_)),
                "{text}"
            );
        }
        // A presentation selector that follows nothing visible is padding.
        assert_eq!(visible("\u{fe0f}x", Layout::OneLine), "\\u{fe0f}x");
        assert_eq!(
            visible("\u{200b}\u{fe0f}", Layout::OneLine),
            "\\u{200b}\\u{fe0f}"
        );
    }

    #[test]
    fn escaping_twice_changes_nothing_more() {
        let raw = "a\u{1b}[31m\r\n\u{202e}\t\u{0}\u{9b}z";
        for layout in [Layout::OneLine, Layout::Lines, Layout::Prose] {
            let once = visible(raw, layout).into_owned();
            assert_eq!(visible(&once, layout), once, "{layout:?}");
        }
    }

    #[test]
    fn a_run_of_blank_lines_is_one_marker_so_a_payload_after_it_is_on_screen() {
        let command = format!("ls -la{}touch PWNED", "\n".repeat(61));
        assert_eq!(
            preview_lines(&command),
            vec!["ls -la", "[… 60 blank lines …]", "touch PWNED"]
        );
        // Whitespace-only lines are blank too, tabs included; a single blank line stays one.
        assert_eq!(
            preview_lines("a\n  \n\t\nb\n\nc\n\t\nd"),
            vec!["a", "[… 2 blank lines …]", "b", "", "c", "", "d"]
        );
        assert_eq!(
            preview_lines("a\n \n  \n"),
            vec!["a", "[… 2 blank lines …]"]
        );
        assert_eq!(preview_lines(""), vec![""]);
    }

    #[test]
    fn lines_of_spaces_and_tabs_are_a_blank_run_tested_before_escaping() {
        let command = format!("ls -la\n{}touch PWNED", "  \t \n".repeat(60));
        assert_eq!(
            preview_lines(&command),
            vec!["ls -la", "[… 60 blank lines …]", "touch PWNED"]
        );
        let diff = format!("@@ -1 +1,61 @@\n{}+touch PWNED\n", "+  \t \n".repeat(60));
        assert_eq!(
            diff_lines(&diff),
            vec!["@@ -1 +1,61 @@", "+[… 60 blank lines …]", "+touch PWNED"]
        );
        // A line holding a control that the shell reads as a word is not blank: it is shown.
        assert_eq!(
            preview_lines("a\n\r\n \u{b}\n\u{2028}\nb"),
            vec!["a", "\\r", " \\u{b}", "\\u{2028}", "b"]
        );
    }

    #[test]
    fn one_line_shows_newlines_and_squeezes_blank_runs() {
        let spread = format!("make{}rm -rf ~", "\n \t".repeat(5));
        assert_eq!(
            one_line(&spread),
            "make\\n[… 4 blank lines …]\\n \\trm -rf ~"
        );
        let padded = format!("make{}&& rm -rf ~", "\u{3000}".repeat(40));
        assert_eq!(
            one_line(&padded),
            "make[… 40 blank characters …]&& rm -rf ~"
        );
        assert_eq!(one_line("a\tb\r\n  c\n"), "a\\tb\\r\\n  c\\n");
        assert_eq!(one_line("ls"), "ls");
    }

    #[test]
    fn a_cut_never_splits_an_escape_or_a_marker() {
        assert_eq!(cut("short", 60), "short");
        assert_eq!(cut(&"b".repeat(60), 60), "b".repeat(60));
        assert_eq!(cut(&"b".repeat(61), 60), format!("{}…", "b".repeat(59)));
        // The escape would start at the 57th character: it is left out whole.
        let line = one_line(&format!("{}\u{202e}x", "a".repeat(56)));
        assert_eq!(cut(&line, 60), format!("{}…", "a".repeat(56)));
        let line = one_line(&format!("{}\u{1b}[2K", "a".repeat(58)));
        assert_eq!(cut(&line, 60), format!("{}…", "a".repeat(58)));
        let line = one_line(&format!("echo{}", "\n".repeat(61)));
        assert_eq!(
            cut(&format!("{}{line}", "a".repeat(40)), 60),
            format!("{}echo\\n…", "a".repeat(40))
        );
        // Wherever a hidden character falls, what is kept is whole units of the full form.
        for at in 0..70 {
            let line = one_line(&format!("{}\u{202e}\t{}", "x".repeat(at), "y".repeat(30)));
            let mut boundaries = vec![0];
            let mut rest = line.as_str();
            while !rest.is_empty() {
                let len = unit_len(rest);
                boundaries.push(boundaries.last().unwrap() + len);
                rest = &rest[len..];
            }
            let shown = cut(&line, 60);
            let kept = shown.strip_suffix('…').unwrap_or(&shown);
            assert!(shown.chars().count() <= 60, "{shown}");
            assert!(line.starts_with(kept), "{shown}");
            assert!(boundaries.contains(&kept.len()), "{shown}");
            assert!(!shown.contains("\\u{2…"), "{shown}");
        }
    }

    #[test]
    fn a_long_run_of_blanks_within_a_line_is_one_marker() {
        let line = format!("ls -la{}; touch PWNED", " ".repeat(300));
        assert_eq!(
            preview_lines(&line),
            vec!["ls -la[… 300 spaces …]; touch PWNED"]
        );
        let wide = format!("ls{}x", "\u{3000}".repeat(40));
        assert_eq!(preview_lines(&wide), vec!["ls[… 40 blank characters …]x"]);
        let braille = format!("ls{}\n{}x", "\u{2800}".repeat(40), "\u{2800}\n".repeat(3));
        // A line of braille blanks is a word to the shell, not a blank line: shown, escaped.
        assert_eq!(
            preview_lines(&braille),
            vec![
                "ls[… 40 blank characters …]",
                "\\u{2800}",
                "\\u{2800}",
                "\\u{2800}",
                "x"
            ]
        );
        let short = format!("a{}b", " ".repeat(BLANK_RUN));
        assert_eq!(preview_lines(&short), vec![short.clone()]);
    }

    /// bash reads a no-break space as part of a word: `PATH=.:$PATH` then a line of them runs a
    /// program of that name. Such a line must not be folded into the blank-line marker.
    #[test]
    fn spaces_the_shell_does_not_split_on_are_shown_not_folded_away() {
        let command = "PATH=.:$PATH\n  \n\u{a0}\u{a0}\n \n\necho done";
        assert_eq!(
            preview_lines(command),
            vec![
                "PATH=.:$PATH",
                "",
                "\\u{a0}\\u{a0}",
                "[… 2 blank lines …]",
                "echo done"
            ]
        );
        assert_eq!(one_line("ls\u{3000}-la"), "ls\\u{3000}-la");
    }

    #[test]
    fn a_diff_shows_every_line_and_collapses_runs_of_blank_added_lines() {
        let diff = format!(
            "--- a/x\n+++ b/x\n@@ -1 +1,62 @@\n one\n{}+rm -rf ~\r\n+\n",
            "+\n".repeat(60)
        );
        assert_eq!(
            diff_lines(&diff),
            vec![
                "--- a/x",
                "+++ b/x",
                "@@ -1 +1,62 @@",
                " one",
                "+[… 60 blank lines …]",
                "+rm -rf ~\\r",
                "+"
            ]
        );
        assert_eq!(
            diff_lines(" a\n \n-\n-\n-\n-\n"),
            vec![" a", " ", "-[… 4 blank lines …]"]
        );
    }

    #[test]
    fn a_diff_shows_two_and_three_blank_lines_as_they_are() {
        assert_eq!(
            diff_lines("@@ -1,2 +1,7 @@\n def a():\n+\n+\n+def b():\n \n \n \n-x\n"),
            vec![
                "@@ -1,2 +1,7 @@",
                " def a():",
                "+",
                "+",
                "+def b():",
                " ",
                " ",
                " ",
                "-x"
            ]
        );
    }

    #[test]
    fn a_command_title_says_how_many_lines_or_shows_the_one_line() {
        assert_eq!(approval_title("run_bash", "ls -la", true), "ls -la");
        assert_eq!(
            approval_title("run_bash", "touch PWNED #\r\u{1b}[2Kls -la", true),
            "touch PWNED #\\r\\e[2Kls -la"
        );
        let long = format!("ls -la\n{}\ntouch PWNED", "\n".repeat(59));
        assert_eq!(
            approval_title("run_bash", &long, true),
            "run_bash · 62 lines"
        );
        assert_eq!(
            approval_title("run_bash", "ls\n", true),
            "run_bash · 1 line, 3 chars"
        );
        let wide = format!("ls -la{}; touch PWNED", " ".repeat(300));
        assert_eq!(
            approval_title("run_bash", &wide, true),
            "ls -la[… 300 spaces …]; touch PWNED"
        );
        let long = format!("echo {}", "x".repeat(60));
        assert_eq!(
            approval_title("run_bash", &long, true),
            "run_bash · 1 line, 65 chars"
        );
        assert_eq!(
            approval_title(
                "edit_file",
                "edit a\u{1b}b.rs (replace 1 chars with 2)",
                false
            ),
            "edit a\\eb.rs (replace 1 chars with 2)"
        );
        assert_eq!(approval_title("Run\nrm", "Run\nrm", false), "Run\\nrm");
        let padded = format!("Allow{}\u{1b}x", " ".repeat(40));
        assert_eq!(one_line(&padded), "Allow[… 40 spaces …]\\ex");
    }
}
