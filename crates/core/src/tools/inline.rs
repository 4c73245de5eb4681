//! edit_file for an inline edit (`:Agent edit`): the file the person asked about is changed in
//! their buffer, not on disk. The model's replacement is found in the buffer's text as it is now
//! (saved or not), the change is shown there hunk by hunk ([`Buffer::review`]), and the person
//! keeps or drops each; the front end applies the kept ones to the buffer, and the person saves
//! when they choose. Nothing here writes a file or starts a process, so nothing here needs an
//! [`super::Approved`]: an edit_file of any other path is [`EditFile`]'s, through the gate as
//! always.

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::{Args, EditFile, Proposal, Settings, Tool, ToolContext, ToolResult, CANCELLED};

/// The buffer an inline edit works on, as the front end holds it.
pub trait Buffer: Send + Sync {
    /// The buffer's text now (each line ended by `\n`) and a stamp of this version, which
    /// [`Buffer::review`] is handed back; None when the buffer is gone.
    fn text(&self) -> BoxFuture<'_, Option<(String, u64)>>;
    /// Shows `shown` in the buffer and waits for the person: what became of each hunk, in
    /// order. None when nobody answered (the buffer was closed).
    fn review(&self, shown: Shown) -> BoxFuture<'_, Option<Vec<Kept>>>;
}

/// A change as the buffer shows it: the version of the text it was computed from, and its hunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// [`Buffer::text`]'s stamp of the text the hunks are of.
    pub stamp: u64,
    pub hunks: Vec<ShownHunk>,
}

/// One hunk: the lines removed at `at` (0-based, in the text the change was computed from) and
/// the lines put in their place, without their newlines. An insertion removes none and goes
/// before line `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownHunk {
    pub at: usize,
    pub removed: Vec<String>,
    pub added: Vec<String>,
}

/// What the person did with one hunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Applied to the buffer.
    Kept,
    /// Left out.
    Dropped,
    /// Not applied: the person had changed those lines while the proposal was open.
    Stale,
    /// Not applied: the buffer could not be changed (made unmodifiable meanwhile, say).
    Failed,
}

/// The edit_file of an inline edit of one file.
pub struct InlineEdit {
    /// The file being edited, resolved (absolute, symlinks resolved).
    path: PathBuf,
    buffer: Arc<dyn Buffer>,
}

impl InlineEdit {
    /// edit_file where `path` (resolved, as [`crate::workspace::Workspace::resolve`] gives it)
    /// is edited in `buffer`; any other path as [`EditFile`] edits it.
    pub fn new(path: PathBuf, buffer: Arc<dyn Buffer>) -> Self {
        InlineEdit { path, buffer }
    }
}

impl Tool for InlineEdit {
    fn name(&self) -> &'static str {
        EditFile.name()
    }

    fn oversized(&self, args: &Map<String, Value>, settings: &Settings) -> Option<String> {
        EditFile.oversized(args, settings)
    }

    fn cancelled(&self, args: Args<'_>, cx: &ToolContext) -> ToolResult {
        EditFile.cancelled(args, cx)
    }

    fn description(&self) -> &'static str {
        EditFile.description()
    }

    fn schema(&self) -> Value {
        EditFile.schema()
    }

    fn propose<'a>(
        &'a self,
        args: Args<'a>,
        cx: &'a ToolContext,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Proposal<'a>> {
        Box::pin(async move {
            let (given, old, new) = match super::edit_file::arguments(&args) {
                Ok(three) => three,
                Err(fail) => return fail.into(),
            };
            let target = match cx.workspace.resolve(given) {
                Ok(target) => target,
                Err(refusal) => return ToolResult::fail(refusal.to_string()).into(),
            };
            if target.path != self.path {
                return EditFile.propose(args, cx, cancel).await;
            }
            self.in_buffer(&target.rel, old, new, cancel).await.into()
        })
    }
}

impl InlineEdit {
    /// The replacement of `old` by `new` in the buffer, shown and answered.
    async fn in_buffer(
        &self,
        rel: &str,
        old: &str,
        new: &str,
        cancel: &CancellationToken,
    ) -> ToolResult {
        if old == new {
            return ToolResult::fail(
                "edit_file: old_str and new_str are identical — nothing to do.",
            );
        }
        let text = tokio::select! {
            text = self.buffer.text() => text,
            () = cancel.cancelled() => return ToolResult::fail_with(CANCELLED, format!("edit {rel}: cancelled")),
        };
        let Some((text, stamp)) = text else {
            return ToolResult::fail(format!(
                "edit_file: the buffer of {rel} was closed; nothing was changed."
            ));
        };
        // An empty old_str fills a buffer that holds nothing yet; in any other it names no place.
        if old.is_empty() && !text.trim().is_empty() {
            return ToolResult::fail(format!(
                "edit_file: {rel} exists and is open for this edit: old_str must be text from it (an empty old_str creates a new file)."
            ));
        }
        let mut found = memchr::memmem::find_iter(text.as_bytes(), old.as_bytes());
        let at = match (old.is_empty(), found.next(), found.next()) {
            (true, _, _) => return self.review_change(rel, &text, stamp, new.to_string(), cancel).await,
            (false, None, _) => {
                return ToolResult::fail(format!(
                    "edit_file: old_str not found in the buffer of {rel} (its text in Neovim, saved or not, which the person may have changed); copy it exactly from the lines you were given, or read the file again."
                ))
            }
            (false, Some(at), None) => at,
            (false, Some(_), Some(_)) => {
                let n = 2 + found.count();
                return ToolResult::fail(format!(
                    "edit_file: old_str appears {n} times in the buffer of {rel} — include more surrounding context so it is unique."
                ));
            }
        };
        let after = [&text[..at], new, &text[at + old.len()..]].concat();
        self.review_change(rel, &text, stamp, after, cancel).await
    }

    /// `text` (the buffer's, with `stamp`) -> `after`, shown hunk by hunk and answered.
    async fn review_change(
        &self,
        rel: &str,
        text: &str,
        stamp: u64,
        after: String,
        cancel: &CancellationToken,
    ) -> ToolResult {
        let hunks = agent_nvim_text::diff::line_hunks(text, &after);
        if hunks.is_empty() {
            return ToolResult::fail("edit_file: the edit changes no line — nothing to do.");
        }
        let lines = |text: &str, range: std::ops::Range<usize>| -> Vec<String> {
            // Split at `\n` alone: a line's own `\r` is the buffer's, and goes back as it was.
            text.split_terminator('\n')
                .skip(range.start)
                .take(range.len())
                .map(str::to_string)
                .collect()
        };
        let shown = Shown {
            stamp,
            hunks: hunks
                .iter()
                .map(|h| ShownHunk {
                    at: h.old.start,
                    removed: lines(text, h.old.clone()),
                    added: lines(&after, h.new.clone()),
                })
                .collect(),
        };
        let answer = tokio::select! {
            answer = self.buffer.review(shown.clone()) => answer,
            () = cancel.cancelled() => return ToolResult::fail_with(CANCELLED, format!("edit {rel}: cancelled")),
        };
        match answer {
            None => ToolResult::fail_with(
                format!("edit_file: the proposal for {rel} was closed without an answer; the buffer is unchanged."),
                format!("edit {rel}: closed"),
            ),
            Some(kept) if kept.len() != shown.hunks.len() => ToolResult::fail_with(
                format!("edit_file: the answer for {rel} was not about the hunks shown; the buffer is unchanged."),
                format!("edit {rel}: not applied"),
            ),
            Some(kept) => told(rel, &shown.hunks, &kept),
        }
    }
}

/// What the model reads of the person's answer: kept whole, dropped, or kept in part with the
/// hunks left out (their lines, as a diff of what was not applied), so its next request starts
/// from what the buffer holds.
pub fn told(rel: &str, hunks: &[ShownHunk], kept: &[Kept]) -> ToolResult {
    let total = hunks.len();
    let count = |which: Kept| kept.iter().filter(|k| **k == which).count();
    let numbers = |which: Kept| -> Vec<String> {
        kept.iter()
            .enumerate()
            .filter(|(_, k)| **k == which)
            .map(|(i, _)| (i + 1).to_string())
            .collect()
    };
    let of = |n: usize| if n == 1 { "hunk" } else { "hunks" };
    let unsaved = "It is not saved: the person saves the file when they choose.";
    if count(Kept::Kept) == total {
        return ToolResult::ok(
            format!("Edited {rel} in the person's buffer: they kept your whole edit ({total} {}). {unsaved}", of(total)),
            format!("edit {rel} · kept"),
        );
    }
    let mut text = if count(Kept::Kept) == 0 {
        format!("The person did not take your edit of {rel}: the buffer is unchanged.")
    } else {
        format!(
            "Edited {rel} in the person's buffer, in part: of your edit's {total} hunks (numbered from the top) they kept {} {}. {unsaved}",
            of(count(Kept::Kept)),
            numbers(Kept::Kept).join(", "),
        )
    };
    let dropped = numbers(Kept::Dropped);
    if !dropped.is_empty() {
        text.push_str(&format!(
            "\nThey dropped {} {}.",
            of(dropped.len()),
            dropped.join(", ")
        ));
    }
    let stale = numbers(Kept::Stale);
    if !stale.is_empty() {
        text.push_str(&format!(
            "\nNot applied: {} {}, because the person changed those lines while your proposal was open.",
            of(stale.len()),
            stale.join(", ")
        ));
    }
    let failed = numbers(Kept::Failed);
    if !failed.is_empty() {
        text.push_str(&format!(
            "\nNot applied: {} {}, because the buffer could not be changed (the person was told why).",
            of(failed.len()),
            failed.join(", ")
        ));
    }
    text.push_str("\nWhat was not applied (as you proposed it):");
    for (i, (hunk, k)) in hunks.iter().zip(kept).enumerate() {
        if *k == Kept::Kept {
            continue;
        }
        text.push_str(&format!("\nhunk {} (line {}):\n", i + 1, hunk.at + 1));
        for line in &hunk.removed {
            text.push_str(&format!("-{line}\n"));
        }
        for line in &hunk.added {
            text.push_str(&format!("+{line}\n"));
        }
    }
    let summary = if count(Kept::Kept) == 0 {
        format!("edit {rel} · dropped")
    } else {
        format!("edit {rel} · kept {} of {total}", count(Kept::Kept))
    };
    if count(Kept::Kept) == 0 {
        ToolResult::fail_with(text, summary)
    } else {
        ToolResult::ok(text, summary)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::tools::testing::{call, executor};
    use agent_nvim_vocab::approval::Decision;
    use serde_json::json;
    use std::sync::Mutex;

    /// A buffer holding `text`, answering each review with `answer`, keeping what it was shown.
    struct Fake {
        text: Mutex<Option<String>>,
        answer: Option<Vec<Kept>>,
        shown: Mutex<Vec<Shown>>,
    }

    impl Buffer for Fake {
        fn text(&self) -> BoxFuture<'_, Option<(String, u64)>> {
            let text = self.text.lock().unwrap().clone();
            Box::pin(async move { text.map(|t| (t, 7)) })
        }
        fn review(&self, shown: Shown) -> BoxFuture<'_, Option<Vec<Kept>>> {
            self.shown.lock().unwrap().push(shown);
            let answer = self.answer.clone();
            Box::pin(async move { answer })
        }
    }

    const TEXT: &str = "def f():\n    a = 1\n    b = 2\n    return a + b\n";

    /// An executor whose edit_file edits `a.py` (on disk: "disk\n") in a buffer holding TEXT.
    fn inline(
        answer: Option<Vec<Kept>>,
    ) -> (
        tempfile::TempDir,
        crate::tools::Executor,
        Arc<Fake>,
        Arc<crate::tools::testing::Recorder>,
    ) {
        let (dir, ex, asked) = executor(Some(Decision::AllowOnce));
        std::fs::write(dir.path().join("a.py"), "disk\n").unwrap();
        let buffer = Arc::new(Fake {
            text: Mutex::new(Some(TEXT.to_string())),
            answer,
            shown: Mutex::new(Vec::new()),
        });
        let path = ex.context().workspace.resolve("a.py").unwrap().path;
        let ex = ex.with_tool(Box::new(InlineEdit::new(path, buffer.clone())));
        (dir, ex, buffer, asked)
    }

    fn two_hunks() -> serde_json::Value {
        json!({"path": "a.py", "old_str": "    a = 1\n    b = 2\n    return", "new_str": "    a = 10\n    b = 2\n    # sum\n    return"})
    }

    #[tokio::test]
    async fn the_buffers_text_is_edited_and_shown_hunk_by_hunk_never_the_disk_nor_the_gate() {
        let (dir, ex, buffer, asked) = inline(Some(vec![Kept::Kept, Kept::Kept]));
        let result = call(&ex, "edit_file", two_hunks()).await;
        assert!(result.ok, "{}", result.text);
        assert!(
            result.text.contains("kept your whole edit (2 hunks)"),
            "{}",
            result.text
        );
        let shown = buffer.shown.lock().unwrap().clone();
        assert_eq!(
            shown,
            vec![Shown {
                stamp: 7,
                hunks: vec![
                    ShownHunk {
                        at: 1,
                        removed: vec!["    a = 1".into()],
                        added: vec!["    a = 10".into()]
                    },
                    ShownHunk {
                        at: 3,
                        removed: vec![],
                        added: vec!["    # sum".into()]
                    },
                ],
            }]
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.py")).unwrap(),
            "disk\n"
        );
        assert!(asked.asked.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_dropped_hunk_is_named_with_its_lines_and_all_dropped_is_a_failure() {
        let (_dir, ex, _, _) = inline(Some(vec![Kept::Kept, Kept::Dropped]));
        let result = call(&ex, "edit_file", two_hunks()).await;
        assert!(result.ok);
        assert!(result.text.contains("they kept hunk 1."), "{}", result.text);
        assert!(
            result.text.contains("They dropped hunk 2."),
            "{}",
            result.text
        );
        assert!(
            result.text.contains("hunk 2 (line 4):\n+    # sum\n"),
            "{}",
            result.text
        );
        assert_eq!(result.summary, "edit a.py · kept 1 of 2");

        let (_dir, ex, _, _) = inline(Some(vec![Kept::Dropped, Kept::Stale]));
        let result = call(&ex, "edit_file", two_hunks()).await;
        assert!(!result.ok);
        assert!(
            result.text.contains("the buffer is unchanged"),
            "{}",
            result.text
        );
        assert!(
            result
                .text
                .contains("Not applied: hunk 2, because the person changed those lines"),
            "{}",
            result.text
        );
        assert!(
            result
                .text
                .contains("hunk 1 (line 2):\n-    a = 1\n+    a = 10\n"),
            "{}",
            result.text
        );
    }

    #[tokio::test]
    async fn a_wrong_answer_a_closed_buffer_and_a_missing_old_str_change_nothing() {
        let (_dir, ex, _, _) = inline(Some(vec![Kept::Kept]));
        let result = call(&ex, "edit_file", two_hunks()).await;
        assert!(
            !result.ok && result.text.contains("not about the hunks shown"),
            "{}",
            result.text
        );

        let (_dir, ex, buffer, _) = inline(None);
        let result = call(&ex, "edit_file", two_hunks()).await;
        assert!(
            !result.ok && result.text.contains("closed without an answer"),
            "{}",
            result.text
        );
        *buffer.text.lock().unwrap() = None;
        let result = call(&ex, "edit_file", two_hunks()).await;
        assert!(
            !result.ok && result.text.contains("buffer of a.py was closed"),
            "{}",
            result.text
        );

        // The disk's text is not the buffer's: old_str is looked for in what the person sees.
        let (_dir, ex, buffer, _) = inline(Some(vec![Kept::Kept]));
        let result = call(
            &ex,
            "edit_file",
            json!({"path": "a.py", "old_str": "disk", "new_str": "x"}),
        )
        .await;
        assert!(
            !result.ok && result.text.contains("not found in the buffer of a.py"),
            "{}",
            result.text
        );
        assert!(buffer.shown.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_empty_buffer_is_filled_by_an_empty_old_str_and_a_failed_hunk_is_named() {
        let (_dir, ex, buffer, _) = inline(Some(vec![Kept::Failed]));
        *buffer.text.lock().unwrap() = Some("\n".into());
        let result = call(
            &ex,
            "edit_file",
            json!({"path": "a.py", "old_str": "", "new_str": "x = 1\n"}),
        )
        .await;
        assert!(!result.ok);
        assert!(
            result
                .text
                .contains("Not applied: hunk 1, because the buffer could not be changed"),
            "{}",
            result.text
        );
        let shown = buffer.shown.lock().unwrap().clone();
        assert_eq!(
            shown[0].hunks,
            vec![ShownHunk {
                at: 0,
                removed: vec!["".into()],
                added: vec!["x = 1".into()]
            }]
        );
        // In a buffer with text, an empty old_str names no place.
        let (_dir, ex, _, _) = inline(Some(vec![Kept::Kept]));
        let result = call(
            &ex,
            "edit_file",
            json!({"path": "a.py", "old_str": "", "new_str": "x"}),
        )
        .await;
        assert!(
            !result.ok && result.text.contains("old_str must be text from it"),
            "{}",
            result.text
        );
    }

    #[tokio::test]
    async fn another_files_edit_goes_through_the_gate_and_is_written() {
        let (dir, ex, buffer, asked) = inline(Some(vec![Kept::Kept]));
        std::fs::write(dir.path().join("b.txt"), "one\n").unwrap();
        let result = call(
            &ex,
            "edit_file",
            json!({"path": "b.txt", "old_str": "one", "new_str": "two"}),
        )
        .await;
        assert!(result.ok, "{}", result.text);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
            "two\n"
        );
        assert_eq!(asked.asked.lock().unwrap().len(), 1);
        assert!(buffer.shown.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_cancel_while_the_person_looks_ends_the_call() {
        struct Never;
        impl Buffer for Never {
            fn text(&self) -> BoxFuture<'_, Option<(String, u64)>> {
                Box::pin(async { Some((TEXT.to_string(), 1)) })
            }
            fn review(&self, _: Shown) -> BoxFuture<'_, Option<Vec<Kept>>> {
                Box::pin(futures::future::pending())
            }
        }
        let (_dir, ex, _) = executor(None);
        std::fs::write(ex.context().workspace.root().join("a.py"), TEXT).unwrap();
        let path = ex.context().workspace.resolve("a.py").unwrap().path;
        let ex = ex.with_tool(Box::new(InlineEdit::new(path, Arc::new(Never))));
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            stop.cancel();
        });
        let result = ex.call("edit_file", &two_hunks(), &cancel).await;
        assert!(!result.ok);
        assert_eq!(result.text, CANCELLED);
    }
}
