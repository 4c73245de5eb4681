//! Review in Neovim (`:Agent diff`): the bridge's answers to the `changes` and `file_at`
//! requests ([`super::protocol::request`]), and the note that lets a turn's `done` row offer the
//! diff of what the turn changed ([`UiEvent::Reviewable`]). The work is
//! [`crate::checkpoint::review`]'s; this module shapes it for Lua, with every path a person
//! reads made visible.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rmpv::Value;

use super::protocol::UiEvent;
use crate::checkpoint::review::{OldText, Review, Since, MAX_TEXT_BYTES};
use crate::checkpoint::{Checkpoint, CheckpointError, Checkpoints};
use crate::display;

/// What Lua shows when there are no checkpoints to compare with.
const OFF: &str = "agent: checkpoints are off (no state directory), so there is nothing to review";

/// `changes {since}`: the files that changed since `since` (`prompt`, `all`, or a prompt
/// checkpoint's id) in `conversation`, as a map of `checkpoint` (the id compared with now),
/// `since` (`prompt 2 · fix the test` or `the conversation began`, made visible) and `files`
/// (`path` as it is on disk, `shown` made visible, `status` A/M/D, `added` and `removed`, or
/// `binary`). An error string when checkpoints are off or there is nothing to count from.
pub(super) async fn changes(
    checkpoints: Option<&Checkpoints>,
    conversation: &str,
    args: &[Value],
) -> Result<Value, Value> {
    let checkpoints = checkpoints.ok_or_else(|| Value::from(OFF))?;
    let since_arg = text(args, "since").unwrap_or_default();
    let since = Since::parse(&String::from_utf8_lossy(&since_arg));
    let review = checkpoints
        .review(conversation, &since)
        .await
        .map_err(|err| {
            Value::from(match err {
                CheckpointError::NoGit | CheckpointError::Store { .. } => {
                    format!("agent: checkpoints are off: {err}")
                }
                other => format!("agent: cannot list what changed: {other}"),
            })
        })?;
    let Some(review) = review else {
        return Err(Value::from(match since {
            Since::Prompt(_) => {
                "agent: that prompt is not in this conversation's checkpoints; nothing to review"
            }
            Since::LastPrompt | Since::Start => {
                "agent: no prompt has been sent in this conversation yet; nothing to review"
            }
        }));
    };
    Ok(answer(&review))
}

/// The `changes` answer for `review`.
fn answer(review: &Review) -> Value {
    let since = match &review.prompt {
        // A prompt's text is redacted as the chat's copy is (this answer does not go through
        // the pump).
        Some((n, label)) => format!(
            "prompt {n} · {}",
            display::cut(&display::one_line(&crate::secrets::redact(label)), 60)
        ),
        None => "the conversation began".to_string(),
    };
    let files = review
        .changes
        .iter()
        .map(|change| {
            let mut row = vec![
                (Value::from("path"), path_value(&change.path)),
                (
                    Value::from("shown"),
                    Value::from(display::one_line(&change.path.to_string_lossy())),
                ),
                (
                    Value::from("status"),
                    Value::from(change.status.letter().to_string()),
                ),
            ];
            match change.lines {
                Some((added, removed)) => row.extend([
                    (Value::from("added"), Value::from(added)),
                    (Value::from("removed"), Value::from(removed)),
                ]),
                None => row.push((Value::from("binary"), Value::from(true))),
            }
            Value::Map(row)
        })
        .collect();
    Value::Map(vec![
        (
            Value::from("checkpoint"),
            Value::from(review.checkpoint.clone()),
        ),
        (Value::from("since"), Value::from(since)),
        (Value::from("files"), Value::Array(files)),
    ])
}

/// `file_at {checkpoint, path}`: the file's text at the checkpoint, `{text = bytes}`, or
/// `{missing = true}` when it had no such file; an error string for a binary or too large one.
pub(super) async fn file_at(
    checkpoints: Option<&Checkpoints>,
    args: &[Value],
) -> Result<Value, Value> {
    let checkpoints = checkpoints.ok_or_else(|| Value::from(OFF))?;
    let (Some(id), Some(path)) = (text(args, "checkpoint"), text(args, "path")) else {
        return Err(Value::from(
            "agent: file_at needs a checkpoint and a path (strings)",
        ));
    };
    let id = String::from_utf8_lossy(&id);
    let path = Path::new(std::ffi::OsStr::from_bytes(&path));
    let shown = display::one_line(&path.to_string_lossy());
    let old = checkpoints
        .text_at(&id, path)
        .await
        .map_err(|err| Value::from(format!("agent: {err}")))?;
    match old {
        OldText::Text(bytes) => Ok(Value::Map(vec![(
            Value::from("text"),
            Value::Binary(bytes),
        )])),
        OldText::Missing => Ok(Value::Map(vec![(
            Value::from("missing"),
            Value::from(true),
        )])),
        OldText::Binary => Err(Value::from(format!(
            "agent: {shown} is a binary file; there is no text to compare"
        ))),
        OldText::TooLarge(size) => Err(Value::from(format!(
            "agent: {shown} was {} MB at that checkpoint, more than the {} MB a diff view is given",
            agent_nvim_text::text::megabytes(size),
            MAX_TEXT_BYTES / (1024 * 1024)
        ))),
    }
}

/// `undo_outside {checkpoint, paths}`: puts back the files an external agent changed by
/// itself ([`Checkpoints::restore_only`]), as the checkpoint before its turn had them; the rest
/// of the workspace stays. Answers what to tell the person.
pub(super) async fn undo_outside(
    checkpoints: Option<&Checkpoints>,
    editor: &dyn crate::editor::Editor,
    args: &[Value],
) -> Result<Value, Value> {
    #[derive(serde::Deserialize)]
    struct Undo {
        checkpoint: String,
        paths: Vec<String>,
    }
    let checkpoints = checkpoints.ok_or_else(|| Value::from(OFF))?;
    let undo: Undo = super::context::decode(args)?;
    let only: std::collections::BTreeSet<std::path::PathBuf> =
        undo.paths.iter().map(std::path::PathBuf::from).collect();
    if only.is_empty() {
        return Err(Value::from("agent: no file to put back"));
    }
    let restored = checkpoints
        .restore_only(&undo.checkpoint, editor, &only)
        .await
        .map_err(|err| Value::from(format!("agent: nothing was put back: {err}")))?;
    let put = match restored.files.len() {
        0 => "nothing needed putting back (the files are as they were before the turn)".to_string(),
        1 => "1 file put back as it was before the turn".to_string(),
        n => format!("{n} files put back as they were before the turn"),
    };
    let mut said = vec![put];
    if !restored.kept.is_empty() {
        said.push(format!(
            "{} too large for a checkpoint left as they are",
            restored.kept.len()
        ));
    }
    for (path, why) in &restored.failed {
        said.push(format!(
            "{} not put back: {}",
            display::one_line(&path.to_string_lossy()),
            display::one_line(why)
        ));
    }
    Ok(Value::from(format!("agent: {}", said.join("; "))))
}

/// The note for the `done` row of the turn whose prompt checkpoint is `prompt`: how many
/// files changed since, when any did.
pub(super) async fn reviewable(checkpoints: &Checkpoints, prompt: &str) -> Option<UiEvent> {
    let files = checkpoints.changes(prompt).await.ok()?.len();
    (files > 0).then(|| UiEvent::Reviewable {
        checkpoint: prompt.to_string(),
        files: files as u64,
        prompt: None,
        of: None,
    })
}

/// How many of a resumed chat's older `done` rows get their diff offered (a git diff each, made
/// after the chat is shown): the newest ones.
pub(super) const RESUMED_ROWS: usize = 20;

/// The current conversation's prompt checkpoints, oldest first (none when they cannot be
/// listed): a resumed chat's `done` rows, in order.
pub(super) async fn prompt_points(checkpoints: &Checkpoints) -> Vec<Checkpoint> {
    let listed = checkpoints.list(&checkpoints.conversation()).await;
    let mut listed = listed.unwrap_or_default();
    listed.retain(|c| c.kind == crate::checkpoint::Kind::Prompt);
    listed
}

/// The notes for a resumed chat's older `done` rows: each of the newest [`RESUMED_ROWS`]
/// `prompts` ([`prompt_points`]) before the last whose files changed since, placed by its
/// number among them.
pub(super) async fn older_reviewable(
    checkpoints: &Checkpoints,
    prompts: &[Checkpoint],
) -> Vec<UiEvent> {
    let of = prompts.len() as u64;
    let mut notes = Vec::new();
    let older = prompts.len().saturating_sub(1);
    for (i, point) in prompts
        .iter()
        .enumerate()
        .take(older)
        .skip(older.saturating_sub(RESUMED_ROWS))
    {
        if let Some(UiEvent::Reviewable {
            checkpoint, files, ..
        }) = reviewable(checkpoints, &point.id).await
        {
            notes.push(UiEvent::Reviewable {
                checkpoint,
                files,
                prompt: Some(i as u64 + 1),
                of: Some(of),
            });
        }
    }
    notes
}

/// The string field `name` of the one map argument, as bytes (Lua sends a path that is not
/// UTF-8 as it is).
fn text(args: &[Value], name: &str) -> Option<Vec<u8>> {
    let Some(Value::Map(map)) = args.first() else {
        return None;
    };
    map.iter()
        .find(|(key, _)| key.as_str() == Some(name))
        .and_then(|(_, value)| match value {
            Value::String(s) => Some(s.as_bytes().to_vec()),
            Value::Binary(bytes) => Some(bytes.clone()),
            _ => None,
        })
}

/// A path as Lua gets it: a string, or its bytes when it is not UTF-8 (a Lua string either way).
fn path_value(path: &Path) -> Value {
    match path.to_str() {
        Some(path) => Value::from(path),
        None => Value::Binary(path.as_os_str().as_bytes().to_vec()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::checkpoint::Kind;
    use crate::workspace::Workspace;

    fn map(pairs: &[(&str, Value)]) -> Value {
        Value::Map(
            pairs
                .iter()
                .map(|(k, v)| (Value::from(*k), v.clone()))
                .collect(),
        )
    }

    #[tokio::test]
    async fn changes_come_as_rows_with_visible_paths_and_the_old_text_as_bytes() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = ws.path();
        let checkpoints =
            Checkpoints::new(state.path(), Workspace::new(root).unwrap(), "c1".into());
        std::fs::write(root.join("a.txt"), "one\n").unwrap();
        std::fs::write(root.join("pic.bin"), b"\0\x01").unwrap();
        let turn = checkpoints
            .snapshot(Kind::Prompt, "fix\u{1b}[2J it")
            .await
            .unwrap();
        std::fs::write(root.join("a.txt"), "two\n").unwrap();
        std::fs::write(root.join("pic.bin"), b"\0\x02").unwrap();
        std::fs::write(root.join("new\u{1b}.txt"), "x\ny\n").unwrap();

        let since = |s: &str| vec![map(&[("since", Value::from(s))])];
        let answer = changes(Some(&checkpoints), "c1", &since("prompt"))
            .await
            .unwrap();
        assert_eq!(
            answer,
            map(&[
                ("checkpoint", Value::from(turn.id.clone())),
                ("since", Value::from("prompt 1 · fix\\e[2J it")),
                (
                    "files",
                    Value::Array(vec![
                        map(&[
                            ("path", Value::from("a.txt")),
                            ("shown", Value::from("a.txt")),
                            ("status", Value::from("M")),
                            ("added", Value::from(1)),
                            ("removed", Value::from(1)),
                        ]),
                        map(&[
                            ("path", Value::from("new\u{1b}.txt")),
                            ("shown", Value::from("new\\e.txt")),
                            ("status", Value::from("A")),
                            ("added", Value::from(2)),
                            ("removed", Value::from(0)),
                        ]),
                        map(&[
                            ("path", Value::from("pic.bin")),
                            ("shown", Value::from("pic.bin")),
                            ("status", Value::from("M")),
                            ("binary", Value::from(true)),
                        ]),
                    ])
                ),
            ])
        );
        // The same checkpoint named by its id, as a done row does.
        assert_eq!(
            changes(Some(&checkpoints), "c1", &since(&turn.id)).await,
            Ok(answer)
        );
        assert_eq!(
            changes(Some(&checkpoints), "c2", &since("all")).await,
            Err(Value::from(
                "agent: no prompt has been sent in this conversation yet; nothing to review"
            ))
        );
        assert_eq!(
            changes(None, "c1", &since("all")).await,
            Err(Value::from(OFF))
        );
        assert_eq!(
            changes(Some(&checkpoints), "bad id", &since("all")).await,
            Err(Value::from(
                "agent: cannot list what changed: 'bad id' cannot name a conversation's checkpoints"
            ))
        );
        let no_git = Checkpoints::without_git(state.path(), Workspace::new(root).unwrap());
        assert_eq!(
            changes(Some(&no_git), "c1", &since("prompt")).await,
            Err(Value::from(
                "agent: checkpoints are off: git was not found on PATH; install git to be able to rewind"
            ))
        );

        let at = |path: Value| {
            vec![map(&[
                ("checkpoint", Value::from(turn.id.clone())),
                ("path", path),
            ])]
        };
        assert_eq!(
            file_at(Some(&checkpoints), &at(Value::from("a.txt"))).await,
            Ok(map(&[("text", Value::Binary(b"one\n".to_vec()))]))
        );
        assert_eq!(
            file_at(
                Some(&checkpoints),
                &at(Value::Binary(b"new\x1b.txt".to_vec()))
            )
            .await,
            Ok(map(&[("missing", Value::from(true))]))
        );
        assert_eq!(
            file_at(Some(&checkpoints), &at(Value::from("pic.bin"))).await,
            Err(Value::from(
                "agent: pic.bin is a binary file; there is no text to compare"
            ))
        );
    }

    #[tokio::test]
    async fn a_turn_that_changed_files_gets_a_note_naming_its_prompts_checkpoint() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = ws.path();
        let checkpoints =
            Checkpoints::new(state.path(), Workspace::new(root).unwrap(), "c1".into());
        assert_eq!(checkpoints.last_prompt(), None);
        let quiet = checkpoints.snapshot(Kind::Prompt, "look").await.unwrap();
        assert_eq!(checkpoints.last_prompt(), Some(quiet.id.clone()));
        assert_eq!(reviewable(&checkpoints, &quiet.id).await, None);
        let busy = checkpoints.snapshot(Kind::Prompt, "change").await.unwrap();
        std::fs::write(root.join("a.txt"), "a\n").unwrap();
        checkpoints.snapshot(Kind::Edit, "a.txt").await.unwrap();
        std::fs::write(root.join("b.txt"), "b\n").unwrap();
        // Another kind of checkpoint is not a prompt's.
        assert_eq!(checkpoints.clone().last_prompt(), Some(busy.id.clone()));
        assert_eq!(
            reviewable(&checkpoints, &busy.id).await,
            Some(UiEvent::Reviewable {
                checkpoint: busy.id.clone(),
                files: 2,
                prompt: None,
                of: None,
            })
        );
        assert_eq!(agent_nvim_text::text::megabytes(1024 * 1024 + 1), "1.1");
    }
}
