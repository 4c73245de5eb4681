//! edit_file: replace one exact occurrence of old_str with new_str, or create a file.
//!
//! Checks run in SPEC section 1's order before the plan is made, so nobody approves a call that
//! would fail anyway; the checks that must hold after the wait (no unsaved buffer, the same file
//! with the same bytes, where it was) run again in the plan's step, under the edit lock. The file
//! is handled as bytes: only the replaced span changes, whatever the encoding, line endings or
//! final newline of the rest. All I/O goes through the root's handle
//! ([`crate::workspace::beneath`]). The write keeps what the file was (mode, owner, extended
//! attributes, hard links), and it happens only if the file on disk is still exactly what the
//! user was shown, where it was shown.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::{
    blocking, fs_failure, Approved, Args, Plan, Proposal, Settings, Tool, ToolContext, ToolResult,
    CANCELLED, MAX_ARGUMENT_CHARS,
};
use crate::diff;
use crate::workspace::beneath::{self, FsError, Identity, Locked};
use crate::workspace::{Resolved, Workspace};
use agent_nvim_vocab::approval::{Action, ApprovalRequest, Proposed};

/// Edits or creates a file inside the workspace.
pub struct EditFile;

impl Tool for EditFile {
    fn name(&self) -> &'static str {
        "edit_file"
    }

    /// Its texts may be as large as the edit size limit (`max_edit_mb`: a file that large can be
    /// edited); its path as large as any argument.
    fn oversized(&self, args: &Map<String, Value>, settings: &Settings) -> Option<String> {
        let limit = settings.max_edit_bytes();
        for name in ["old_str", "new_str"] {
            let Some(text) = args.get(name).and_then(Value::as_str) else {
                continue;
            };
            if text.len() as u64 > limit {
                return Some(format!(
                    "edit_file: {name} is {} bytes, over the edit size limit of {} MB (max_edit_mb). Make the change in smaller edits.",
                    crate::text::grouped(text.len()),
                    settings.max_edit_mb
                ));
            }
        }
        let path = args.get("path").and_then(Value::as_str)?;
        let chars = crate::text::chars_over(path, MAX_ARGUMENT_CHARS)?;
        Some(format!(
            "edit_file: the path is {} characters long, over the limit of {}.",
            crate::text::grouped(chars),
            crate::text::grouped(MAX_ARGUMENT_CHARS)
        ))
    }

    fn cancelled(&self, args: Args<'_>, cx: &ToolContext) -> ToolResult {
        let Ok(path) = args.required("path") else {
            return ToolResult::fail(CANCELLED);
        };
        let rel = match cx.workspace.resolve(path) {
            Ok(target) => target.rel,
            Err(_) => agent_nvim_text::escape::one_line(path),
        };
        ToolResult::fail_with(CANCELLED, cancelled_row(&rel))
    }

    fn description(&self) -> &'static str {
        "Edit a file by replacing one exact occurrence of old_str with new_str. old_str must \
         appear exactly once in the file: include enough surrounding lines to make it unique, \
         copied exactly (whitespace included) from read_file's output. To create a new file, pass \
         an empty old_str and the whole content as new_str. The user approves each edit."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root."},
                "old_str": {"type": "string", "description": "Exact text to replace; must occur exactly once. Empty to create a new file."},
                "new_str": {"type": "string", "description": "Replacement text (the whole content when creating)."}
            },
            "required": ["path", "old_str", "new_str"]
        })
    }

    fn propose<'a>(
        &'a self,
        args: Args<'a>,
        cx: &'a ToolContext,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Proposal<'a>> {
        Box::pin(async move {
            let (given, old, new) = match arguments(&args) {
                Ok(three) => three,
                Err(fail) => return fail.into(),
            };
            propose(cx, given, old, new, cancel).await
        })
    }
}

/// An edit's three arguments (path, old_str, new_str), or the failure naming the first missing.
pub(super) fn arguments<'a>(args: &Args<'a>) -> Result<(&'a str, &'a str, &'a str), ToolResult> {
    match (
        args.required("path"),
        args.required("old_str"),
        args.required("new_str"),
    ) {
        (Ok(p), Ok(o), Ok(n)) => Ok((p, o, n)),
        (Err(fail), _, _) | (_, Err(fail), _) | (_, _, Err(fail)) => Err(fail),
    }
}

/// What the user is shown and asked about: the file as it was, and which file it was.
struct Snapshot {
    identity: Identity,
    bytes: Vec<u8>,
    /// How many names (hard links) the file has.
    links: u64,
}

/// Why an edit stopped short of writing.
enum Stop {
    /// What the user approved is no longer what is on disk, or no longer where it was.
    Changed,
    /// Another edit holds the file's lock.
    Busy,
    /// The user cancelled while the edit waited for the lock.
    Cancelled,
    /// Larger than the limit, with its size in bytes.
    TooBig(u64),
    /// No write permission.
    ReadOnly,
    /// Opening or reading beneath the root failed.
    Fs(FsError),
    /// The write itself failed.
    Write(std::io::Error),
}

impl From<FsError> for Stop {
    fn from(err: FsError) -> Self {
        Stop::Fs(err)
    }
}

impl From<std::io::Error> for Stop {
    fn from(err: std::io::Error) -> Self {
        Stop::Write(err)
    }
}

/// How long an edit waits for another edit of the same file to finish.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Every check of SPEC section 1 that can fail before anyone is asked, then the plan: the
/// question with its diff, and the write.
async fn propose<'a>(
    cx: &'a ToolContext,
    given: &'a str,
    old: &'a str,
    new: &'a str,
    cancel: &'a CancellationToken,
) -> Proposal<'a> {
    if old == new {
        return ToolResult::fail("edit_file: old_str and new_str are identical — nothing to do.")
            .into();
    }
    let target = match cx.workspace.resolve(given) {
        Ok(target) => target,
        Err(refusal) => return ToolResult::fail(refusal.to_string()).into(),
    };
    let rel = target.rel.as_str();
    let limit = cx.settings.max_edit_bytes();
    let workspace = cx.workspace.clone();
    let path = workspace.relative(&target).to_path_buf();
    let snapshot = blocking(move || snapshot(&workspace, &path, limit)).await;
    let snapshot = match snapshot {
        Ok(snapshot) => snapshot,
        Err(stop) => return stopped(cx, given, &target, stop).into(),
    };
    let Some(snapshot) = snapshot else {
        if !old.is_empty() {
            return ToolResult::fail(format!(
                "No such file: {given} (pass an empty old_str to create it)."
            ))
            .into();
        }
        if target.dir_only {
            return ToolResult::fail(format!("No such file: {given}")).into();
        }
        return propose_create(cx, given, target, new).await;
    };
    if target.dir_only {
        return ToolResult::fail(format!("No such directory: {given}")).into();
    }

    let finder = memchr::memmem::Finder::new(old.as_bytes());
    let mut found = finder.find_iter(&snapshot.bytes);
    let at = match (old.is_empty(), found.next(), found.next()) {
        (true, _, _) | (false, None, _) => {
            return ToolResult::fail(format!("edit_file: old_str not found in {rel}.")).into()
        }
        (false, Some(at), None) => at,
        (false, Some(_), Some(_)) => {
            let n = 2 + found.count();
            return ToolResult::fail(format!(
                "edit_file: old_str appears {n} times in {rel} — include more surrounding context so it is unique."
            ))
            .into();
        }
    };
    if cx.editor.has_unsaved_changes(&target.path).await {
        return unsaved(rel).into();
    }

    let detail = format!(
        "edit {rel} (replace {} chars with {})",
        old.chars().count(),
        new.chars().count()
    );
    let mut preview = diff::replacement(rel, &snapshot.bytes, at, old.len(), new);
    if snapshot.links > 1 {
        // The same file may have a name outside the workspace; the person should know that the
        // edit reaches every one of them.
        preview.insert_str(
            0,
            &format!(
                "[{rel} has {} names (hard links): the edit changes the file under every name]\n",
                snapshot.links
            ),
        );
    }
    let rel = rel.to_string();
    // What the person may change before allowing: the whole file as the edit leaves it (only
    // for a file that is text; Neovim's buffer could not hold other bytes faithfully).
    let proposal = std::str::from_utf8(&snapshot.bytes).ok().and_then(|now| {
        let (before, after) = (now.get(..at)?, now.get(at + old.len()..)?);
        Some(Proposed::File {
            now: Some(Arc::from(now)),
            proposed: Arc::from([before, new, after].concat()),
        })
    });
    let replacement = Replacement {
        given,
        target,
        snapshot,
        at,
        old_len: old.len(),
        new,
    };
    plan(&rel, detail, preview, proposal, move |approved, edited| {
        apply_edit(cx, replacement, approved, edited, cancel)
    })
}

/// An edit as it was shown: the file as read, and which bytes of it the new text replaces.
struct Replacement<'a> {
    given: &'a str,
    target: Resolved,
    snapshot: Snapshot,
    at: usize,
    old_len: usize,
    new: &'a str,
}

/// The row of an edit or create of `rel` that was cancelled before it ran.
fn cancelled_row(rel: &str) -> String {
    format!("edit {rel}: cancelled")
}

/// The plan for an edit or a create of `rel`: the question, its summary rows, the step.
fn plan<'a, F, Fut>(
    rel: &str,
    detail: String,
    preview: String,
    proposal: Option<Proposed>,
    apply: F,
) -> Proposal<'a>
where
    F: FnOnce(Approved, Option<String>) -> Fut + Send + 'a,
    Fut: std::future::Future<Output = ToolResult> + Send + 'a,
{
    let question = ApprovalRequest {
        tool: "edit_file",
        detail,
        diff: Some(preview),
        action: Action::Edit {
            rel: rel.to_string(),
        },
        proposal,
    };
    Proposal::Plan(Plan::new(
        question,
        format!("edit {rel}: declined"),
        cancelled_row(rel),
        apply,
    ))
}

/// The approved edit: the checks that must still hold after the wait, then the write.
async fn apply_edit(
    cx: &ToolContext,
    edit: Replacement<'_>,
    approved: Approved,
    edited: Option<String>,
    cancel: &CancellationToken,
) -> ToolResult {
    let Replacement {
        given,
        target,
        snapshot,
        at,
        old_len,
        new,
    } = edit;
    let rel = target.rel.as_str();
    let workspace = cx.workspace.clone();
    let (owned_given, shown, new) = (given.to_string(), target.clone(), new.to_string());
    let unsaved_now = cx.editor.has_unsaved_changes(&target.path).await;
    let waiting = cancel.clone();
    let (person, diff_rel) = (edited.clone(), rel.to_string());
    let (written, diff) = blocking(move || {
        let proposed = snapshot.proposed(at, old_len, &new);
        let diff = person
            .as_deref()
            .and_then(|theirs| persons_diff(&diff_rel, &proposed, theirs));
        if unsaved_now {
            return Ok((Err(None), diff));
        }
        let write = |out: &mut dyn Write| match &person {
            Some(theirs) => out.write_all(theirs.as_bytes()),
            None => out.write_all(&proposed),
        };
        let written = replace(
            &approved,
            &workspace,
            &owned_given,
            &shown,
            &snapshot,
            &waiting,
            &write,
        );
        Ok::<_, Stop>((written.map_err(Some), diff))
    })
    .await
    .unwrap_or_else(|stop| (Err(Some(stop)), None));
    match written {
        Ok(()) => {}
        Err(None) => return not_written(unsaved(rel), diff),
        Err(Some(stop)) => return not_written(stopped(cx, given, &target, stop), diff),
    }
    cx.editor.file_written(&target.path).await;
    ToolResult::ok(
        with_persons_changes(format!("Edited {rel}."), diff),
        format!("edit {rel}"),
    )
}

/// Characters of the person's diff the model reads at most.
const PERSONS_DIFF_CHARS: usize = crate::text::MAX_CHARS;

/// What the person changed in the proposal before it was written, as a unified diff from the
/// proposal to their version; None when they changed nothing. Cut to [`PERSONS_DIFF_CHARS`]
/// characters, saying so: a change to every line of a large file must not fill the history.
fn persons_diff(rel: &str, proposed: &[u8], theirs: &str) -> Option<String> {
    if theirs.as_bytes() == proposed {
        return None;
    }
    let proposed = crate::text::lossy(proposed);
    let diff = crate::diff::unified(rel, Some(&proposed), theirs);
    let (kept, cut) = crate::text::clamp_head(&diff, PERSONS_DIFF_CHARS);
    if !cut {
        return Some(diff);
    }
    let rest = diff[kept.len()..].lines().count();
    Some(format!(
        "{kept}\n[the diff goes on for {rest} more lines; read {rel} for the rest]\n"
    ))
}

/// The result's text after a write: `done`, then, when the person changed the proposal before
/// it was written, what they changed.
fn with_persons_changes(done: String, diff: Option<String>) -> String {
    match diff {
        None => done,
        Some(diff) => format!(
            "{done} The user changed your edit before it was written; their changes to your proposal:\n{diff}"
        ),
    }
}

/// A write that stopped after the person changed the proposal: the failure, and their version,
/// so it is not lost (the model can apply it once the file is read again; the chat shows it).
fn not_written(mut result: ToolResult, diff: Option<String>) -> ToolResult {
    if let Some(diff) = diff {
        result.text = format!(
            "{}\nThe user had changed your edit, and their version was not written either; their changes to your proposal:\n{diff}",
            result.text
        );
    }
    result
}

impl Snapshot {
    /// The file as the edit leaves it: `new` in place of the `old_len` bytes at `at`.
    fn proposed(&self, at: usize, old_len: usize, new: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes.len() + new.len());
        out.extend_from_slice(&self.bytes[..at]);
        out.extend_from_slice(new.as_bytes());
        out.extend_from_slice(&self.bytes[at + old_len..]);
        out
    }
}

/// The file at `path` (relative to the root) as the user will be shown it; None when there is
/// none. Refuses what is not a regular file, what is larger than `limit` bytes, and what the
/// user may not write, before anyone is asked.
fn snapshot(workspace: &Workspace, path: &Path, limit: u64) -> Result<Option<Snapshot>, Stop> {
    let Some(file) = workspace.handle().open_in_dir(path)? else {
        return Ok(None);
    };
    let size = u64::try_from(file.opened.stat.st_size).unwrap_or(0);
    if size > limit {
        return Err(Stop::TooBig(size));
    }
    if file.read_only() {
        return Err(Stop::ReadOnly);
    }
    let bytes = file.read_all(limit).map_err(|err| Stop::Fs(err.into()))?;
    if bytes.len() as u64 > limit {
        return Err(Stop::TooBig(bytes.len() as u64));
    }
    Ok(Some(Snapshot {
        identity: file.identity(),
        bytes,
        links: file.links(),
    }))
}

/// Whether `given` still resolves to where `shown` was (an approval can take minutes, and a
/// directory on the way may have been swapped for a link meanwhile).
fn still_resolves(workspace: &Workspace, given: &str, shown: &Resolved) -> bool {
    workspace.resolve(given).is_ok_and(|now| now == *shown)
}

/// Writes the approved edit, if the file is still the one the user saw: resolved to the same
/// place, the same inode, the same bytes, checked under the edit lock that is held to the
/// rename, so two edits of one file never both succeed with one of them lost. A cancel ends the
/// wait for the lock (nothing is written then). Only an approved plan's step can call it.
fn replace(
    approved: &Approved,
    workspace: &Workspace,
    given: &str,
    shown: &Resolved,
    snapshot: &Snapshot,
    cancel: &CancellationToken,
    write: &dyn Fn(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), Stop> {
    if !still_resolves(workspace, given, shown) {
        return Err(Stop::Changed);
    }
    let file = match workspace.handle().open_in_dir(workspace.relative(shown)) {
        Ok(Some(file)) if file.identity() == snapshot.identity => file,
        Ok(_) | Err(FsError::Moved | FsError::NotFound | FsError::NotADirectory) => {
            return Err(Stop::Changed)
        }
        Err(err) => return Err(Stop::Fs(err)),
    };
    match file.lock_named(LOCK_WAIT, &|| cancel.is_cancelled())? {
        Locked::Held => {}
        Locked::Busy if cancel.is_cancelled() => return Err(Stop::Cancelled),
        Locked::Busy => return Err(Stop::Busy),
        Locked::Replaced => return Err(Stop::Changed),
    }
    if !file.holds(&snapshot.bytes).map_err(Stop::Write)? {
        return Err(Stop::Changed);
    }
    file.replace(write, approved).map_err(Stop::Write)
}

/// The plan for creating `target` with `content` (the file does not exist yet).
async fn propose_create<'a>(
    cx: &'a ToolContext,
    given: &'a str,
    target: Resolved,
    content: &'a str,
) -> Proposal<'a> {
    let rel = target.rel.as_str();
    if cx.editor.has_unsaved_changes(&target.path).await {
        return unsaved(rel).into();
    }
    let detail = format!("create {rel} ({} chars)", content.chars().count());
    let preview = diff::unified(rel, None, content);
    let rel = rel.to_string();
    let proposal = Some(Proposed::File {
        now: None,
        proposed: Arc::from(content),
    });
    plan(&rel, detail, preview, proposal, move |approved, edited| {
        apply_create(cx, given, target, content, approved, edited)
    })
}

/// The approved create: the path must still lead where it did, and nothing may have appeared
/// there meanwhile.
async fn apply_create(
    cx: &ToolContext,
    given: &str,
    target: Resolved,
    content: &str,
    approved: Approved,
    edited: Option<String>,
) -> ToolResult {
    let rel = target.rel.as_str();
    let workspace = cx.workspace.clone();
    let (owned_given, shown) = (given.to_string(), target.clone());
    let bytes = edited.as_deref().unwrap_or(content).as_bytes().to_vec();
    let (proposed, diff_rel) = (content.to_string(), rel.to_string());
    let (created, diff) = blocking(move || {
        let diff = edited
            .as_deref()
            .and_then(|theirs| persons_diff(&diff_rel, proposed.as_bytes(), theirs));
        if !still_resolves(&workspace, &owned_given, &shown) {
            return Ok((Err(Stop::Changed), diff));
        }
        Ok::<_, Stop>((write_new(&approved, &workspace, &shown, &bytes), diff))
    })
    .await
    .unwrap_or_else(|stop| (Err(stop), None));
    if let Err(stop) = created {
        return not_written(stopped(cx, given, &target, stop), diff);
    }
    cx.editor.file_written(&target.path).await;
    let text = with_persons_changes(format!("Created {rel}."), diff);
    ToolResult::ok(text, format!("create {rel}"))
}

/// Creates the file `target` names, and its parents, beneath the root. Something that appeared
/// there while the user was deciding, or a link met on the way, is a change. Only an approved
/// plan's step can call it.
fn write_new(
    approved: &Approved,
    workspace: &Workspace,
    target: &Resolved,
    bytes: &[u8],
) -> Result<(), Stop> {
    let (dir, name) = match workspace
        .handle()
        .make_parents(workspace.relative(target), approved)
    {
        Ok(parent) => parent,
        Err(FsError::Moved) => return Err(Stop::Changed),
        Err(err) => return Err(Stop::Fs(err)),
    };
    match beneath::create_new(dir.as_fd(), &name, bytes, approved) {
        Ok(()) => Ok(()),
        Err(FsError::Io(err)) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(Stop::Changed)
        }
        Err(FsError::Moved) => Err(Stop::Changed),
        Err(err) => Err(Stop::Fs(err)),
    }
}

/// The failed result for an edit that stopped.
fn stopped(cx: &ToolContext, given: &str, target: &Resolved, stop: Stop) -> ToolResult {
    let rel = target.rel.as_str();
    match stop {
        Stop::Changed => changed(rel),
        Stop::Busy => ToolResult::fail(format!(
            "edit_file: {rel} is being edited by another process; read it again and retry."
        )),
        Stop::Cancelled => ToolResult::fail_with(CANCELLED, cancelled_row(rel)),
        Stop::TooBig(size) => ToolResult::fail(format!(
            "edit_file: {rel} is {} MB, more than the {} MB edit_file handles.",
            super::megabytes(size),
            cx.settings.max_edit_mb
        )),
        Stop::ReadOnly => ToolResult::fail(format!("edit_file: {rel} is read-only.")),
        Stop::Fs(FsError::IsDirectory) => ToolResult::fail(format!("Not a regular file: {given}")),
        Stop::Fs(err) => fs_failure("edit_file: cannot read", given, target, err),
        Stop::Write(err) => ToolResult::fail(format!("edit_file: cannot write {rel}: {err}")),
    }
}

fn changed(rel: &str) -> ToolResult {
    ToolResult::fail(format!(
        "edit_file: {rel} changed while waiting for approval; read it again."
    ))
}

fn unsaved(rel: &str) -> ToolResult {
    ToolResult::fail(format!(
        "edit_file: {rel} has unsaved changes in Neovim; ask the user to save or discard them first."
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::approval::{Asker, Gate};
    use crate::editor::Editor;
    use crate::tools::testing::{call, executor};
    use crate::tools::{Executor, Settings, ToolContext};
    use crate::workspace::Workspace;
    use agent_nvim_vocab::approval::{ApprovalRequest, Decision};
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};

    fn args(path: &str, old: &str, new: &str) -> Value {
        json!({"path": path, "old_str": old, "new_str": new})
    }

    fn asked(rec: &crate::tools::testing::Recorder) -> Vec<(String, Option<String>)> {
        rec.asked
            .lock()
            .unwrap()
            .iter()
            .map(|r| (r.detail.clone(), r.diff.clone()))
            .collect()
    }

    #[tokio::test]
    async fn identical_strings_are_rejected_before_any_io_even_outside_the_root() {
        let (_dir, ex, rec) = executor(Some(Decision::AllowOnce));
        assert_eq!(
            call(&ex, "edit_file", args("../../etc/passwd", "x", "x")).await,
            ToolResult::fail("edit_file: old_str and new_str are identical — nothing to do.")
        );
        assert!(asked(&rec).is_empty());
    }

    #[tokio::test]
    async fn a_path_outside_is_refused_before_the_gate() {
        let (_dir, ex, rec) = executor(Some(Decision::AllowOnce));
        assert_eq!(
            call(&ex, "edit_file", args("../x.txt", "", "hi")).await,
            ToolResult::fail("Refused: '../x.txt' resolves outside the workspace root.")
        );
        assert!(asked(&rec).is_empty());
    }

    #[tokio::test]
    async fn replaces_the_single_occurrence_after_asking_with_detail_and_diff() {
        let (dir, ex, rec) = executor(Some(Decision::AllowOnce));
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "one\ntwo\nthree\n").unwrap();
        assert_eq!(
            call(&ex, "edit_file", args("a.txt", "two", "deux")).await,
            ToolResult::ok("Edited a.txt.", "edit a.txt")
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "one\ndeux\nthree\n"
        );
        assert_eq!(
            asked(&rec),
            vec![(
                "edit a.txt (replace 3 chars with 4)".to_string(),
                Some(
                    "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+deux\n three\n"
                        .to_string()
                )
            )]
        );
    }

    #[tokio::test]
    async fn the_diff_shown_for_an_applied_edit_comes_back_for_its_row_and_a_refused_one_has_none()
    {
        let (dir, ex, _rec) = executor(Some(Decision::AllowOnce));
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
        let cancel = CancellationToken::new();
        let (result, diff) = ex
            .call_with_diff(
                "edit_file",
                &args("a.txt", "two", "deux"),
                &cancel,
                &crate::tools::Unwatched,
            )
            .await;
        assert_eq!(result, ToolResult::ok("Edited a.txt.", "edit a.txt"));
        assert_eq!(
            diff.as_deref(),
            Some("--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+deux\n")
        );
        let (dir, ex, _rec) = executor(Some(Decision::Refuse { reason: None }));
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
        let (result, diff) = ex
            .call_with_diff(
                "edit_file",
                &args("a.txt", "two", "deux"),
                &cancel,
                &crate::tools::Unwatched,
            )
            .await;
        assert!(!result.ok);
        assert_eq!(diff, None);
    }

    #[tokio::test]
    async fn the_detail_counts_characters() {
        let (dir, ex, rec) = executor(Some(Decision::AllowOnce));
        std::fs::write(dir.path().join("j.txt"), "日本語\n").unwrap();
        call(&ex, "edit_file", args("j.txt", "日本", "にほんご")).await;
        assert_eq!(asked(&rec)[0].0, "edit j.txt (replace 2 chars with 4)");
    }

    #[tokio::test]
    async fn occurrences_are_counted_without_overlap() {
        let (dir, ex, rec) = executor(Some(Decision::AllowOnce));
        std::fs::write(dir.path().join("a.txt"), "aaaa").unwrap();
        assert_eq!(
            call(&ex, "edit_file", args("a.txt", "aa", "b")).await,
            ToolResult::fail("edit_file: old_str appears 2 times in a.txt — include more surrounding context so it is unique.")
        );
        std::fs::write(dir.path().join("b.txt"), "aaa").unwrap();
        assert_eq!(
            call(&ex, "edit_file", args("b.txt", "aa", "b")).await,
            ToolResult::ok("Edited b.txt.", "edit b.txt")
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
            "ba"
        );
        assert_eq!(asked(&rec).len(), 1);
    }

    #[tokio::test]
    async fn not_found_and_an_empty_old_str_on_an_existing_file() {
        let (dir, ex, rec) = executor(Some(Decision::AllowOnce));
        std::fs::write(dir.path().join("a.txt"), "hello").unwrap();
        assert_eq!(
            call(&ex, "edit_file", args("a.txt", "bye", "x")).await,
            ToolResult::fail("edit_file: old_str not found in a.txt.")
        );
        assert_eq!(
            call(&ex, "edit_file", args("a.txt", "", "x")).await,
            ToolResult::fail("edit_file: old_str not found in a.txt.")
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "hello"
        );
        assert!(asked(&rec).is_empty());
    }

    #[tokio::test]
    async fn a_missing_file_with_old_str_says_how_to_create_it() {
        let (_dir, ex, _) = executor(Some(Decision::AllowOnce));
        assert_eq!(
            call(&ex, "edit_file", args("src/new.rs", "x", "y")).await,
            ToolResult::fail("No such file: src/new.rs (pass an empty old_str to create it).")
        );
    }

    #[tokio::test]
    async fn an_empty_old_str_creates_the_file_and_its_parents() {
        let (dir, ex, rec) = executor(Some(Decision::AllowOnce));
        assert_eq!(
            call(&ex, "edit_file", args("notes/day/1.txt", "", "héllo\n")).await,
            ToolResult::ok("Created notes/day/1.txt.", "create notes/day/1.txt")
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("notes/day/1.txt")).unwrap(),
            "héllo\n"
        );
        assert_eq!(
            asked(&rec),
            vec![(
                "create notes/day/1.txt (6 chars)".to_string(),
                Some("--- /dev/null\n+++ b/notes/day/1.txt\n@@ -0,0 +1 @@\n+héllo\n".to_string())
            )]
        );
    }

    #[tokio::test]
    async fn a_refusal_writes_nothing_and_tells_the_model() {
        let (dir, ex, _) = executor(Some(Decision::Refuse {
            reason: Some("keep it".into()),
        }));
        std::fs::write(dir.path().join("a.txt"), "x").unwrap();
        assert_eq!(
            call(&ex, "edit_file", args("a.txt", "x", "y")).await,
            ToolResult::fail_with(
                "The user declined to run edit_file. Ask what they would like to do instead. The user said: keep it",
                "edit a.txt: declined"
            )
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "x"
        );
        let (dir, ex, _) = executor(None);
        call(&ex, "edit_file", args("new.txt", "", "y")).await;
        assert!(!dir.path().join("new.txt").exists());
    }

    #[tokio::test]
    async fn the_write_keeps_the_mode_line_endings_and_untouched_bytes() {
        let (dir, ex, _) = executor(Some(Decision::AllowOnce));
        let file = dir.path().join("run.sh");
        let original = b"#!/bin/sh\r\necho \xff old\r\nno final newline".to_vec();
        std::fs::write(&file, &original).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o751)).unwrap();
        assert!(
            call(&ex, "edit_file", args("run.sh", "old", "new"))
                .await
                .ok
        );
        assert_eq!(
            std::fs::read(&file).unwrap(),
            b"#!/bin/sh\r\necho \xff new\r\nno final newline"
        );
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o751
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("run.sh")]);
    }

    /// An asker that changes the file on disk while "the user is deciding", then allows.
    struct Meddler {
        path: PathBuf,
        content: &'static str,
    }

    impl Asker for Meddler {
        fn ask(&self, _request: ApprovalRequest) -> BoxFuture<'_, Option<Decision>> {
            std::fs::write(&self.path, self.content).unwrap();
            Box::pin(async { Some(Decision::AllowOnce) })
        }
    }

    fn executor_with(dir: &Path, asker: Arc<dyn Asker>, editor: Arc<dyn Editor>) -> Executor {
        Executor::new(ToolContext {
            workspace: Workspace::new(dir).unwrap(),
            gate: Arc::new(Gate::new(false, Some(asker))),
            editor,
            settings: Settings::default(),
            checkpoints: None,
        })
    }

    /// Edits the proposal (as "Edit before allowing" would), after the file changed meanwhile
    /// when `meddle` says so.
    struct Editor2 {
        meddle: Option<PathBuf>,
        theirs: &'static str,
    }

    impl Asker for Editor2 {
        fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, Option<Decision>> {
            assert!(request.proposal.is_some());
            if let Some(path) = &self.meddle {
                std::fs::write(path, "someone else's\n").unwrap();
            }
            let text = self.theirs.to_string();
            Box::pin(async move { Some(Decision::Edited { text }) })
        }
    }

    #[tokio::test]
    async fn the_persons_version_is_written_and_their_changes_are_what_the_model_reads() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "one\ntwo\n").unwrap();
        let asker = Arc::new(Editor2 {
            meddle: None,
            theirs: "one\nTWO!\nthree\n",
        });
        let ex = executor_with(dir.path(), asker, Arc::new(crate::editor::NoEditor));
        let result = call(&ex, "edit_file", args("a.txt", "two", "TWO")).await;
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "one\nTWO!\nthree\n"
        );
        assert!(result.ok);
        assert_eq!(
            result.text,
            "Edited a.txt. The user changed your edit before it was written; their changes to your proposal:\n\
             --- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,3 @@\n one\n-TWO\n+TWO!\n+three\n"
        );
    }

    #[tokio::test]
    async fn a_persons_version_that_cannot_be_written_is_given_back_not_lost() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "one\ntwo\n").unwrap();
        let asker = Arc::new(Editor2 {
            meddle: Some(file.clone()),
            theirs: "one\nmine\n",
        });
        let ex = executor_with(dir.path(), asker, Arc::new(crate::editor::NoEditor));
        let result = call(&ex, "edit_file", args("a.txt", "two", "TWO")).await;
        assert!(!result.ok);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "someone else's\n");
        assert!(
            result.text.starts_with(
                "edit_file: a.txt changed while waiting for approval; read it again.\nThe user had changed your edit, and their version was not written either; their changes to your proposal:\n"
            ),
            "{}",
            result.text
        );
        assert!(result.text.contains("-TWO\n+mine\n"), "{}", result.text);
    }

    #[test]
    fn the_persons_diff_of_a_huge_change_is_cut_and_says_so() {
        let proposed: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        let theirs: String = (0..20_000).map(|i| format!("LINE {i}\n")).collect();
        let diff = persons_diff("big.txt", proposed.as_bytes(), &theirs).unwrap();
        assert!(
            diff.chars().count() < PERSONS_DIFF_CHARS + 200,
            "{}",
            diff.len()
        );
        assert!(
            diff.contains("more lines; read big.txt for the rest]"),
            "{}",
            &diff[diff.len() - 200..]
        );
        assert_eq!(persons_diff("a", b"same", "same"), None);
    }

    #[tokio::test]
    async fn a_file_changed_while_approval_was_pending_is_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "v1 old").unwrap();
        let meddler = Arc::new(Meddler {
            path: file.clone(),
            content: "v2 old",
        });
        let ex = executor_with(dir.path(), meddler, Arc::new(crate::editor::NoEditor));
        assert_eq!(
            call(&ex, "edit_file", args("a.txt", "old", "new")).await,
            ToolResult::fail("edit_file: a.txt changed while waiting for approval; read it again.")
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "v2 old");

        let created = dir.path().join("c.txt");
        let meddler = Arc::new(Meddler {
            path: created.clone(),
            content: "theirs",
        });
        let ex = executor_with(dir.path(), meddler, Arc::new(crate::editor::NoEditor));
        assert_eq!(
            call(&ex, "edit_file", args("c.txt", "", "mine")).await,
            ToolResult::fail("edit_file: c.txt changed while waiting for approval; read it again.")
        );
        assert_eq!(std::fs::read_to_string(&created).unwrap(), "theirs");
    }

    /// An editor with one modified buffer, recording reloads.
    #[derive(Default)]
    struct FakeEditor {
        modified: Option<PathBuf>,
        reloaded: Mutex<Vec<PathBuf>>,
    }

    impl Editor for FakeEditor {
        fn has_unsaved_changes<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, bool> {
            let hit = self.modified.as_deref() == Some(path);
            Box::pin(async move { hit })
        }
        fn file_written<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, ()> {
            self.reloaded.lock().unwrap().push(path.to_path_buf());
            Box::pin(async {})
        }
        fn command_finished(&self) -> BoxFuture<'_, ()> {
            Box::pin(async {})
        }
    }

    #[tokio::test]
    async fn a_buffer_with_unsaved_changes_is_never_edited_and_nobody_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root.join("a.txt"), "old").unwrap();
        let rec = Arc::new(crate::tools::testing::Recorder {
            answer: Some(Decision::AllowOnce),
            asked: Mutex::new(Vec::new()),
        });
        let editor = Arc::new(FakeEditor {
            modified: Some(root.join("a.txt")),
            ..Default::default()
        });
        let ex = executor_with(&root, rec.clone(), editor.clone());
        assert_eq!(
            call(&ex, "edit_file", args("a.txt", "old", "new")).await,
            ToolResult::fail("edit_file: a.txt has unsaved changes in Neovim; ask the user to save or discard them first.")
        );
        assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "old");
        assert!(rec.asked.lock().unwrap().is_empty());

        // An unmodified buffer is reloaded after the write.
        std::fs::write(root.join("b.txt"), "old").unwrap();
        assert!(call(&ex, "edit_file", args("b.txt", "old", "new")).await.ok);
        assert_eq!(*editor.reloaded.lock().unwrap(), vec![root.join("b.txt")]);
    }
}
