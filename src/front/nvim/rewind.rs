//! `:Agent rewind`'s one step: the code put back through [`Checkpoints::restore`] and the
//! conversation cut through [`Conversation::rewind`], each only when asked. The code goes first:
//! when it is refused (unsaved buffers), the conversation is left as it is too. [`undo`] puts
//! the code back as it was before the last rewind (the snapshot that restore took).

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::protocol::RewindMode as What;
use crate::checkpoint::Checkpoints;
use crate::conversation::{prompt_start, Conversation};
use crate::editor::Editor;
use crate::llm::Message;

/// What a rewind did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    /// For the person: `agent: rewound to before prompt 2: 1 file put back, the conversation cut`.
    pub message: String,
    /// Whether the history was cut.
    pub cut: bool,
    /// The cut prompt's text, to put back in the input; None when nothing was cut, or the
    /// conversation's history is not ours to read.
    pub prompt: Option<String>,
}

/// Rewinds to before prompt `turn`, whose checkpoint is `id`. Ok: what was done; Err: why
/// nothing was restored (or, when the conversation could not be cut after the code was put
/// back, that only the code was), as the person reads it (`agent: ...`).
pub async fn rewind(
    what: What,
    turn: usize,
    id: &str,
    checkpoints: Option<&Checkpoints>,
    conversation: &dyn Conversation,
    editor: &dyn Editor,
    spare: &BTreeSet<PathBuf>,
) -> Result<Done, String> {
    let mut done = Vec::new();
    if what.code() {
        let Some(checkpoints) = checkpoints else {
            return Err(OFF.into());
        };
        done.push(put_back(checkpoints, id, editor, spare).await?);
    }
    let mut prompt = None;
    if what.conversation() {
        let view = conversation.model_view(0).await.unwrap_or_default();
        prompt = prompt_start(&view, turn).and_then(|at| match &view[at] {
            Message::User(prompt) => Some(prompt.text.clone()),
            _ => None,
        });
        if let Err(err) = conversation.rewind(turn).await {
            return Err(match done.first() {
                Some(code) => format!(
                    "agent: rewound the code to before prompt {turn} ({code}) but not the conversation: {err}"
                ),
                None => format!("agent: {err}"),
            });
        }
        done.push("the conversation cut".to_string());
    }
    Ok(Done {
        message: format!(
            "agent: rewound to before prompt {turn}: {}",
            done.join(", ")
        ),
        cut: what.conversation(),
        prompt,
    })
}

/// Why the code cannot be rewound without checkpoints.
const OFF: &str = "agent: checkpoints are off, so the code cannot be rewound";

/// Restores checkpoint `id`, leaving the files of `spare` as they are: `3 files put back`
/// (`, 1 kept as another conversation left it`), or why nothing was.
async fn put_back(
    checkpoints: &Checkpoints,
    id: &str,
    editor: &dyn Editor,
    spare: &BTreeSet<PathBuf>,
) -> Result<String, String> {
    let restored = checkpoints
        .restore_sparing(id, editor, spare)
        .await
        .map_err(|err| format!("agent: {err}"))?;
    let put = match restored.files.len() {
        1 => "1 file put back".to_string(),
        n => format!("{n} files put back"),
    };
    Ok(match restored.spared.len() {
        0 => put,
        1 => format!("{put} (1 kept as another conversation left it)"),
        n => format!("{put} ({n} kept as other conversations left them)"),
    })
}

/// Undoes the last rewind of the current conversation's code ([`Checkpoints::undo_point`]):
/// the files as they were just before it. The history is left as it is.
pub async fn undo(checkpoints: Option<&Checkpoints>, editor: &dyn Editor) -> Result<Done, String> {
    let Some(checkpoints) = checkpoints else {
        return Err(OFF.into());
    };
    let point = checkpoints
        .undo_point(&checkpoints.conversation())
        .await
        .map_err(|err| format!("agent: {err}"))?
        .ok_or("agent: there is no rewind of the code to undo since the last prompt")?;
    let files = put_back(checkpoints, &point.id, editor, &BTreeSet::new()).await?;
    Ok(Done {
        message: format!("agent: the code is back as it was before the last rewind: {files}"),
        cut: false,
        prompt: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::{Path, PathBuf};

    use futures::future::BoxFuture;

    use super::*;
    use crate::checkpoint::Kind;
    use crate::conversation::fake::Fake;
    use crate::workspace::Workspace;
    use agent_nvim_vocab::events::Outcome;

    /// A conversation of two prompts that only notes the rewinds asked of it.
    fn two_prompts() -> Fake {
        Fake::new("notes")
            .with_history(history())
            .on_prompt(|_text, _events| async { Outcome::Failed })
    }

    /// The history [`two_prompts`] shows.
    fn history() -> Vec<Message> {
        vec![
            Message::User("first".into()),
            Message::Assistant {
                text: "ok".into(),
                calls: vec![],
                reasoning: Vec::new(),
            },
            Message::User("second\nwith more".into()),
        ]
    }

    /// An editor whose buffers for `unsaved` have unsaved changes.
    struct Buffers(Vec<PathBuf>);

    impl Editor for Buffers {
        fn has_unsaved_changes<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, bool> {
            let dirty = self.0.iter().any(|p| p == path);
            Box::pin(async move { dirty })
        }
        fn file_written<'a>(&'a self, _path: &'a Path) -> BoxFuture<'a, ()> {
            Box::pin(async {})
        }
        fn command_finished(&self) -> BoxFuture<'_, ()> {
            Box::pin(async {})
        }
    }

    #[tokio::test]
    async fn conversation_only_and_code_only_do_only_that_and_a_dirty_buffer_blocks_both() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let checkpoints = Checkpoints::new(
            state.path(),
            Workspace::new(ws.path()).unwrap(),
            "c1".into(),
        );
        let file = ws.path().join("a.txt");
        std::fs::write(&file, "before\n").unwrap();
        let point = checkpoints.snapshot(Kind::Prompt, "p").await.unwrap();
        let read = || std::fs::read_to_string(&file).unwrap();
        let clean = Buffers(Vec::new());

        std::fs::write(&file, "after\n").unwrap();
        let notes = two_prompts();
        let said = rewind(
            What::Conversation,
            2,
            &point.id,
            Some(&checkpoints),
            &notes,
            &clean,
            &BTreeSet::new(),
        )
        .await
        .unwrap();
        assert_eq!(
            said,
            Done {
                message: "agent: rewound to before prompt 2: the conversation cut".into(),
                cut: true,
                prompt: Some("second\nwith more".into()),
            }
        );
        assert_eq!(read(), "after\n", "conversation only leaves the code");
        assert_eq!(notes.rewinds(), [2]);

        let notes = two_prompts();
        let said = rewind(
            What::Code,
            2,
            &point.id,
            Some(&checkpoints),
            &notes,
            &clean,
            &BTreeSet::new(),
        )
        .await
        .unwrap();
        assert_eq!(
            said,
            Done {
                message: "agent: rewound to before prompt 2: 1 file put back".into(),
                cut: false,
                prompt: None,
            }
        );
        assert_eq!(read(), "before\n");
        assert!(
            notes.rewinds().is_empty(),
            "code only leaves the conversation"
        );

        std::fs::write(&file, "after\n").unwrap();
        let dirty = Buffers(vec![ws.path().canonicalize().unwrap().join("a.txt")]);
        let refused = rewind(
            What::Both,
            2,
            &point.id,
            Some(&checkpoints),
            &notes,
            &dirty,
            &BTreeSet::new(),
        )
        .await;
        assert_eq!(
            refused,
            Err("agent: nothing was restored: a.txt has unsaved changes in Neovim; save or discard them first".into())
        );
        assert_eq!(read(), "after\n");
        assert!(notes.rewinds().is_empty(), "nothing changes");

        assert_eq!(
            rewind(
                What::Code,
                1,
                &point.id,
                None,
                &notes,
                &clean,
                &BTreeSet::new()
            )
            .await,
            Err("agent: checkpoints are off, so the code cannot be rewound".into())
        );

        // A conversation that cannot be cut (an external agent's): the code was put back, and
        // the message says that only the code was.
        let external = crate::conversation::Unavailable::new("claude", "agent: -");
        assert_eq!(
            rewind(
                What::Both,
                2,
                &point.id,
                Some(&checkpoints),
                &external,
                &clean,
                &BTreeSet::new(),
            )
            .await,
            Err(
                "agent: rewound the code to before prompt 2 (1 file put back) but not the \
                 conversation: claude cannot rewind"
                    .into()
            )
        );
        assert_eq!(read(), "before\n");
    }
}
