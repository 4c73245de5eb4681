//! Unified diffs for approval previews (edit_file, ACP diffs), computed with `similar`, and
//! their hunks: what each `@@` section replaces, so a person can keep some and drop the others
//! ([`apply`]).
//!
//! Only the changed region is diffed: the common head and tail are skipped by comparing bytes, so
//! a one-line change in a 50 MB file costs two memcmp passes and a newline count, not a line diff
//! of the whole file. Hunk headers still carry the file's real line numbers.

use similar::{ChangeTag, TextDiff};

/// Lines of context around each change.
const CONTEXT: usize = 3;

/// How long the search for the smallest diff may take.
const DIFF_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(20);

/// One hunk of a change, as the byte ranges of the two texts it covers: `old` in the text before
/// is replaced by `new` in the text after. Only the changed lines, not the context. The hunks of
/// a diff are the `@@` sections of its [`unified`] form (changes within six lines of each other
/// are one hunk), in order, from the same computation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    pub old: std::ops::Range<usize>,
    pub new: std::ops::Range<usize>,
}

/// `before` with only the hunks `keep` says yes to (by their place, from 0) applied: what a
/// person who dropped the others gets. `hunks` are those of `before` -> `after`
/// ([`unified_hunks`]); all kept is `after`, none is `before`.
pub fn apply(before: &str, after: &str, hunks: &[Hunk], keep: impl Fn(usize) -> bool) -> String {
    let mut out = String::with_capacity(after.len().max(before.len()));
    let mut at = 0;
    for (i, hunk) in hunks.iter().enumerate() {
        out.push_str(&before[at..hunk.old.start]);
        if keep(i) {
            out.push_str(&after[hunk.new.clone()]);
        } else {
            out.push_str(&before[hunk.old.clone()]);
        }
        at = hunk.old.end;
    }
    out.push_str(&before[at..]);
    out
}

/// One change between two texts by lines, with no context around it: lines `old` of the text
/// before (0-based, end excluded) become lines `new` of the text after. An insertion has an empty
/// `old` (the lines go before line `old.start`); a deletion an empty `new`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineHunk {
    pub old: std::ops::Range<usize>,
    pub new: std::ops::Range<usize>,
}

/// The changes of `before` -> `after` line by line, each run of changed lines its own hunk (no
/// context joins two), in order: what an edit shown in the buffer itself is made of, where a
/// person keeps or drops each. Empty when nothing differs.
pub fn line_hunks(before: &str, after: &str) -> Vec<LineHunk> {
    if before == after {
        return Vec::new();
    }
    let diff = TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines(before, after);
    diff.grouped_ops(0)
        .iter()
        .filter_map(|group| {
            let changed: Vec<_> = group
                .iter()
                .filter(|op| op.tag() != similar::DiffTag::Equal)
                .collect();
            let (a, b) = (changed.first()?, changed.last()?);
            Some(LineHunk {
                old: a.old_range().start..b.old_range().end,
                new: a.new_range().start..b.new_range().end,
            })
        })
        .collect()
}

/// A unified diff of `before` -> `after` with `a/{rel}` and `b/{rel}` headers; `before` None means
/// the file is being created (`--- /dev/null`). Empty when nothing differs.
pub fn unified(rel: &str, before: Option<&str>, after: &str) -> String {
    unified_hunks(rel, before, after).0
}

/// [`unified`], and its hunks (byte ranges of `before` and `after`), from one computation: the
/// i-th hunk is the i-th `@@` section.
pub fn unified_hunks(rel: &str, before: Option<&str>, after: &str) -> (String, Vec<Hunk>) {
    let old = before.unwrap_or("");
    if before.is_some() && old == after {
        return (String::new(), Vec::new());
    }
    let head = common_prefix(old.as_bytes(), after.as_bytes());
    let tail = common_suffix(old.as_bytes(), after.as_bytes(), head);
    // Widen to whole lines, then by CONTEXT lines each way (the diff below only sees the window).
    let start = back_lines(old.as_bytes(), line_start(old.as_bytes(), head), CONTEXT);
    let old_end = forward_lines(
        old.as_bytes(),
        line_end(old.as_bytes(), old.len() - tail),
        CONTEXT,
    );
    let new_end = forward_lines(
        after.as_bytes(),
        line_end(after.as_bytes(), after.len() - tail),
        CONTEXT,
    );
    let offset = memchr::memchr_iter(b'\n', &old.as_bytes()[..start]).count();
    let header = match before {
        Some(_) => format!("--- a/{rel}\n"),
        None => "--- /dev/null\n".to_string(),
    };
    render(
        header,
        rel,
        offset,
        start,
        &old[start..old_end],
        &after[start..new_end],
    )
}

/// The diff of replacing the `old_len` bytes at `at` in `before` with `new`, computed from a
/// window of whole lines around the change: neither side of the file is copied whole, so an
/// edit of a 60 MB file costs its one copy in memory, not three. The same diff as [`unified`]
/// of the whole texts.
pub fn replacement(rel: &str, before: &[u8], at: usize, old_len: usize, new: &str) -> String {
    let start = back_lines(before, line_start(before, at), CONTEXT);
    let end = forward_lines(before, line_end(before, at + old_len), CONTEXT);
    let offset = memchr::memchr_iter(b'\n', &before[..start]).count();
    let old_window = crate::text::lossy(&before[start..end]);
    // Decoded once joined, as the file will hold them: stray bytes on either side of the span
    // may join into a character (the halves of U+202E) that each piece alone decodes to U+FFFD.
    let mut new_bytes = Vec::with_capacity(end - start - old_len + new.len());
    new_bytes.extend_from_slice(&before[start..at]);
    new_bytes.extend_from_slice(new.as_bytes());
    new_bytes.extend_from_slice(&before[at + old_len..end]);
    let new_window = crate::text::lossy(&new_bytes);
    if old_window == new_window {
        return String::new();
    }
    render(
        format!("--- a/{rel}\n"),
        rel,
        offset,
        start,
        &old_window,
        &new_window,
    )
    .0
}

/// The headers and hunks for two windows that start at line `offset` of their files.
fn render(
    header: String,
    rel: &str,
    offset: usize,
    base: usize,
    old_window: &str,
    new_window: &str,
) -> (String, Vec<Hunk>) {
    let mut out = header;
    let mut hunks = Vec::new();
    // Where each line of the two windows starts (and where the last ends), in bytes.
    let starts = |window: &str| -> Vec<usize> {
        let mut at = vec![0];
        at.extend(memchr::memchr_iter(b'\n', window.as_bytes()).map(|i| i + 1));
        if at.last() != Some(&window.len()) {
            at.push(window.len());
        }
        at
    };
    let (old_lines, new_lines) = (starts(old_window), starts(new_window));
    out.push_str(&format!("+++ b/{rel}\n"));
    // Past the deadline similar stops looking for the smallest diff and returns a correct, larger
    // one: a preview must not take seconds when every line of a big file changed.
    let diff = TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines(old_window, new_window);
    for group in diff.grouped_ops(CONTEXT) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let old_range = first.old_range().start..last.old_range().end;
        let new_range = first.new_range().start..last.new_range().end;
        // The changed lines alone: from the first op that is not context to the last.
        let changed: Vec<_> = group
            .iter()
            .filter(|op| op.tag() != similar::DiffTag::Equal)
            .collect();
        if let (Some(a), Some(b)) = (changed.first(), changed.last()) {
            let byte = |lines: &[usize], line: usize| base + lines[line.min(lines.len() - 1)];
            hunks.push(Hunk {
                old: byte(&old_lines, a.old_range().start)..byte(&old_lines, b.old_range().end),
                new: byte(&new_lines, a.new_range().start)..byte(&new_lines, b.new_range().end),
            });
        }
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            hunk_range(offset + old_range.start, old_range.len()),
            hunk_range(offset + new_range.start, new_range.len())
        ));
        for op in &group {
            for change in diff.iter_changes(op) {
                let sign = match change.tag() {
                    ChangeTag::Equal => ' ',
                    ChangeTag::Delete => '-',
                    ChangeTag::Insert => '+',
                };
                out.push(sign);
                let line = change.value();
                out.push_str(line);
                if !line.ends_with('\n') {
                    out.push_str("\n\\ No newline at end of file\n");
                }
            }
        }
    }
    (out, hunks)
}

/// `start,len` in unified-diff form: 1-based, and for an empty range the line before it.
fn hunk_range(start: usize, len: usize) -> String {
    if len == 0 {
        format!("{start},0")
    } else if len == 1 {
        format!("{}", start + 1)
    } else {
        format!("{},{len}", start + 1)
    }
}

/// Length of the common prefix, compared a block at a time so the compiler's memcmp does the work.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 4096;
    let max = a.len().min(b.len());
    let mut i = 0;
    while i + BLOCK <= max && a[i..i + BLOCK] == b[i..i + BLOCK] {
        i += BLOCK;
    }
    while i < max && a[i] == b[i] {
        i += 1;
    }
    i
}

/// Length of the common suffix that does not reach into the first `prefix` bytes of either side.
fn common_suffix(a: &[u8], b: &[u8], prefix: usize) -> usize {
    const BLOCK: usize = 4096;
    let max = a.len().min(b.len()) - prefix;
    let mut n = 0;
    while n + BLOCK <= max
        && a[a.len() - n - BLOCK..a.len() - n] == b[b.len() - n - BLOCK..b.len() - n]
    {
        n += BLOCK;
    }
    while n < max && a[a.len() - n - 1] == b[b.len() - n - 1] {
        n += 1;
    }
    n
}

/// The start of the line holding byte `at`.
fn line_start(text: &[u8], at: usize) -> usize {
    memchr::memrchr(b'\n', &text[..at]).map_or(0, |i| i + 1)
}

/// The end (after its newline) of the line holding byte `at - 1`; `at` itself when at a line start.
fn line_end(text: &[u8], at: usize) -> usize {
    if at == 0 || text[at - 1] == b'\n' {
        return at;
    }
    memchr::memchr(b'\n', &text[at..]).map_or(text.len(), |i| at + i + 1)
}

/// Moves a line start back by `n` lines.
fn back_lines(text: &[u8], mut at: usize, n: usize) -> usize {
    for _ in 0..n {
        if at == 0 {
            break;
        }
        at = line_start(text, at - 1);
    }
    at
}

/// Moves a line end forward by `n` lines.
fn forward_lines(text: &[u8], mut at: usize, n: usize) -> usize {
    for _ in 0..n {
        if at >= text.len() {
            break;
        }
        at = memchr::memchr(b'\n', &text[at..]).map_or(text.len(), |i| at + i + 1);
    }
    at
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn line_hunks_part_changes_by_runs_of_lines_without_context() {
        let before: String = (1..=10).map(|i| format!("{i}\n")).collect();
        // A change at 2, an insertion after 4 and a deletion of 6: three hunks, however close.
        let after = before
            .replace("2\n", "two\n")
            .replace("4\n", "4\nfour and a half\n")
            .replace("6\n", "");
        let hunks = line_hunks(&before, &after);
        assert_eq!(
            hunks,
            vec![
                LineHunk {
                    old: 1..2,
                    new: 1..2
                },
                LineHunk {
                    old: 4..4,
                    new: 4..5
                },
                LineHunk {
                    old: 5..6,
                    new: 6..6
                },
            ]
        );
        assert!(line_hunks(&before, &before).is_empty());
    }

    #[test]
    fn each_hunk_is_one_at_at_section_and_any_of_them_can_be_kept_alone() {
        let before: String = (1..=40).map(|i| format!("{i}\n")).collect();
        // Three changes: two within six lines of each other (one hunk), one far off.
        let after = before
            .replace("\n5\n", "\nfive\n")
            .replace("\n9\n", "\n9\nnine and a half\n")
            .replace("\n30\n", "\n");
        let (diff, hunks) = unified_hunks("n", Some(&before), &after);
        assert_eq!(
            diff.matches("\n@@ ").count() + usize::from(diff.starts_with("@@")),
            2
        );
        assert_eq!(hunks.len(), 2);
        assert_eq!(&before[hunks[0].old.clone()], "5\n6\n7\n8\n9\n");
        assert_eq!(
            &after[hunks[0].new.clone()],
            "five\n6\n7\n8\n9\nnine and a half\n"
        );
        assert_eq!(&before[hunks[1].old.clone()], "30\n");
        assert_eq!(&after[hunks[1].new.clone()], "");
        assert_eq!(apply(&before, &after, &hunks, |_| true), after);
        assert_eq!(apply(&before, &after, &hunks, |_| false), before);
        let first_only = apply(&before, &after, &hunks, |i| i == 0);
        assert!(first_only.contains("\nfive\n") && first_only.contains("\n30\n"));
        let second_only = apply(&before, &after, &hunks, |i| i == 1);
        assert!(second_only.contains("\n5\n") && !second_only.contains("\n30\n"));
        // A create is one hunk of the whole text; a file without a final newline keeps its end.
        let (_, created) = unified_hunks("c", None, "a\nb\n");
        assert_eq!(
            created,
            [Hunk {
                old: 0..0,
                new: 0..4
            }]
        );
        let (_, tail) = unified_hunks("t", Some("a\nb"), "a\nc");
        assert_eq!(apply("a\nb", "a\nc", &tail, |_| true), "a\nc");
        assert_eq!(apply("a\nb", "a\nc", &tail, |_| false), "a\nb");
    }

    proptest::proptest! {
        /// Whatever the texts: as many hunks as `@@` sections, in order, holding every
        /// difference; all kept gives the text after, none the text before, one kept alone
        /// changes only its own lines, and some kept change the length by what they change.
        #[test]
        fn hunks_applied_give_back_the_texts(
            lines in proptest::collection::vec(0u8..6, 0..40),
            edits in proptest::collection::vec((0usize..40, 0u8..3, 0u8..6), 0..6),
            keep in proptest::collection::vec(proptest::bool::ANY, 0..8),
        ) {
            let before: String = lines.iter().map(|n| format!("line {n}\n")).collect();
            let mut after_lines: Vec<String> = lines.iter().map(|n| format!("line {n}\n")).collect();
            for (at, kind, n) in edits {
                let at = at.min(after_lines.len());
                match kind {
                    0 => after_lines.insert(at, format!("new {n}\n")),
                    1 if at < after_lines.len() => { after_lines.remove(at); }
                    _ if at < after_lines.len() => after_lines[at] = format!("changed {n}\n"),
                    _ => after_lines.push(format!("end {n}\n")),
                }
            }
            let after: String = after_lines.concat();
            let (diff, hunks) = unified_hunks("p", Some(&before), &after);
            proptest::prop_assert_eq!(diff.lines().filter(|l| l.starts_with("@@ ")).count(), hunks.len());
            proptest::prop_assert_eq!(apply(&before, &after, &hunks, |_| true), after.clone());
            proptest::prop_assert_eq!(apply(&before, &after, &hunks, |_| false), before.clone());
            // Between the hunks (and before the first, after the last) the two texts are the
            // same: the hunks hold every difference, so any choice of them is well defined.
            let (mut old_at, mut new_at) = (0, 0);
            for hunk in &hunks {
                proptest::prop_assert_eq!(&before[old_at..hunk.old.start], &after[new_at..hunk.new.start]);
                old_at = hunk.old.end;
                new_at = hunk.new.end;
            }
            proptest::prop_assert_eq!(&before[old_at..], &after[new_at..]);
            // One kept alone: the text before, but that hunk's lines, which are the text after's.
            for (i, hunk) in hunks.iter().enumerate() {
                let one = apply(&before, &after, &hunks, |j| j == i);
                let end = hunk.old.start + hunk.new.len();
                proptest::prop_assert_eq!(&one[..hunk.old.start], &before[..hunk.old.start]);
                proptest::prop_assert_eq!(&one[hunk.old.start..end], &after[hunk.new.clone()]);
                proptest::prop_assert_eq!(&one[end..], &before[hunk.old.end..]);
            }
            // Some kept: as long as the text before and what the kept hunks add or take away.
            let kept = |i: usize| keep.get(i).copied().unwrap_or(false);
            let some = apply(&before, &after, &hunks, kept);
            let grown: isize = hunks
                .iter()
                .enumerate()
                .filter(|(i, _)| kept(*i))
                .map(|(_, h)| h.new.len() as isize - h.old.len() as isize)
                .sum();
            proptest::prop_assert_eq!(some.len() as isize, before.len() as isize + grown);
            for pair in hunks.windows(2) {
                proptest::prop_assert!(pair[0].old.end <= pair[1].old.start);
                proptest::prop_assert!(pair[0].new.end <= pair[1].new.start);
            }
        }
    }

    #[test]
    fn a_replacement_diffs_as_the_whole_texts_would() {
        let before: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let cases = [
            ("line 10\n", "line ten\n"),
            ("line 1\n", ""),
            ("line 30\n", "line 30\nline 31"),
            ("5\nline 6\nline 7", "5\nsix\nline 7"),
            ("line 12\nline 13\n", "line 12\nline 13\n"),
        ];
        for (old, new) in cases {
            let at = before.find(old).unwrap();
            let after = before.replacen(old, new, 1);
            assert_eq!(
                replacement("a.txt", before.as_bytes(), at, old.len(), new),
                unified("a.txt", Some(&before), &after),
                "{old:?} -> {new:?}"
            );
        }
    }

    #[test]
    fn a_change_in_the_middle_has_real_line_numbers_and_three_lines_of_context() {
        let before: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        let after = before.replace("line 10\n", "line ten\n");
        assert_eq!(
            unified("src/a.txt", Some(&before), &after),
            "--- a/src/a.txt\n+++ b/src/a.txt\n@@ -7,7 +7,7 @@\n line 7\n line 8\n line 9\n-line 10\n+line ten\n line 11\n line 12\n line 13\n"
        );
    }

    #[test]
    fn two_distant_changes_make_two_hunks() {
        let before: String = (1..=30).map(|i| format!("{i}\n")).collect();
        let after = before
            .replace("\n2\n", "\ntwo\n")
            .replace("\n28\n", "\nX\nY\n");
        assert_eq!(
            unified("n", Some(&before), &after),
            "--- a/n\n+++ b/n\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n@@ -25,6 +25,7 @@\n 25\n 26\n 27\n-28\n+X\n+Y\n 29\n 30\n"
        );
    }

    #[test]
    fn a_create_diffs_against_dev_null() {
        assert_eq!(
            unified("new.txt", None, "a\nb\n"),
            "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n"
        );
    }

    #[test]
    fn a_missing_final_newline_is_marked() {
        assert_eq!(
            unified("f", Some("a\nb"), "a\nc"),
            "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
        );
    }

    #[test]
    fn an_edit_inside_a_line_shows_the_whole_line() {
        assert_eq!(
            unified(
                "f",
                Some("keep\nfoo bar baz\nkeep\n"),
                "keep\nfoo BAR baz\nkeep\n"
            ),
            "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n keep\n-foo bar baz\n+foo BAR baz\n keep\n"
        );
    }

    #[test]
    fn a_file_where_every_line_changed_still_diffs_quickly_and_correctly() {
        let before: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        let after: String = (0..20_000).map(|i| format!("LINE {i}\n")).collect();
        let diff = unified("f", Some(&before), &after);
        let removed: Vec<&str> = diff
            .lines()
            .filter(|l| l.starts_with('-') && !l.starts_with("---"))
            .collect();
        let added: Vec<&str> = diff
            .lines()
            .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
            .collect();
        assert_eq!((removed.len(), added.len()), (20_000, 20_000));
        assert_eq!((removed[0], added[19_999]), ("-line 0", "+LINE 19999"));
    }

    #[test]
    fn identical_texts_have_no_diff() {
        assert_eq!(unified("f", Some("same\n"), "same\n"), "");
    }

    #[test]
    fn a_big_file_diff_matches_a_full_line_diff() {
        let before: String = (0..5000).map(|i| format!("row {i}\n")).collect();
        let after = before.replace("row 2500\n", "row 2500 changed\nextra\n");
        let full = TextDiff::from_lines(before.as_str(), after.as_str())
            .unified_diff()
            .context_radius(3)
            .header("a/big", "b/big")
            .to_string();
        assert_eq!(unified("big", Some(&before), &after), full);
    }
}
