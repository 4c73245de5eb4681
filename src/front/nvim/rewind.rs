//! `:Agent rewind`'s one step: the code put back through [`Checkpoints::restore`] and the
//! conversation cut through [`Conversation::rewind`], each only when asked. The code goes first:
//! when it is refused (unsaved buffers), the conversation is left as it is too.

use serde::Deserialize;

use crate::checkpoint::Checkpoints;
use crate::conversation::Conversation;
use crate::editor::Editor;

/// What a rewind restores (`Code and conversation`, `Code only`, `Conversation only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum What {
    Both,
    Code,
    Conversation,
}

impl What {
    fn code(self) -> bool {
        matches!(self, What::Both | What::Code)
    }
    fn conversation(self) -> bool {
        matches!(self, What::Both | What::Conversation)
    }
}

/// Rewinds to before prompt `turn`, whose checkpoint is `id`. Ok: what was done, for the chat;
/// Err: why nothing (or, when the conversation could not be cut, only the code) was restored,
/// as shown after nothing else (`agent: ...`).
pub async fn rewind(
    what: What,
    turn: usize,
    id: &str,
    checkpoints: Option<&Checkpoints>,
    conversation: &dyn Conversation,
    editor: &dyn Editor,
) -> Result<String, String> {
    let mut done = Vec::new();
    if what.code() {
        let Some(checkpoints) = checkpoints else {
            return Err("agent: checkpoints are off, so the code cannot be rewound".into());
        };
        let restored = checkpoints
            .restore(id, editor)
            .await
            .map_err(|err| format!("agent: {err}"))?;
        done.push(match restored.files.len() {
            1 => "1 file put back".to_string(),
            n => format!("{n} files put back"),
        });
    }
    if what.conversation() {
        conversation
            .rewind(turn)
            .await
            .map_err(|err| format!("agent: {err}"))?;
        done.push("the conversation cut".to_string());
    }
    Ok(format!(
        "agent: rewound to before prompt {turn}: {}",
        done.join(", ")
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Mutex};

    use futures::future::BoxFuture;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::agent::Outcome;
    use crate::checkpoint::Kind;
    use crate::conversation::{ConversationError, Events};
    use crate::workspace::Workspace;

    /// A conversation that only notes the rewinds asked of it.
    #[derive(Default)]
    struct Notes(Mutex<Vec<usize>>);

    impl Conversation for Notes {
        fn name(&self) -> &str {
            "notes"
        }
        fn prompt<'a>(
            &'a self,
            _text: String,
            _events: &'a Events,
            _cancel: &'a CancellationToken,
        ) -> BoxFuture<'a, Outcome> {
            Box::pin(async { Outcome::Failed })
        }
        fn rewind(&self, turn: usize) -> BoxFuture<'_, Result<(), ConversationError>> {
            self.0.lock().unwrap().push(turn);
            Box::pin(async { Ok(()) })
        }
        fn end(self: Arc<Self>) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }
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
        let notes = Notes::default();
        let said = rewind(
            What::Conversation,
            2,
            &point.id,
            Some(&checkpoints),
            &notes,
            &clean,
        )
        .await
        .unwrap();
        assert_eq!(
            said,
            "agent: rewound to before prompt 2: the conversation cut"
        );
        assert_eq!(read(), "after\n", "conversation only leaves the code");
        assert_eq!(*notes.0.lock().unwrap(), [2]);

        let notes = Notes::default();
        let said = rewind(What::Code, 2, &point.id, Some(&checkpoints), &notes, &clean)
            .await
            .unwrap();
        assert_eq!(said, "agent: rewound to before prompt 2: 1 file put back");
        assert_eq!(read(), "before\n");
        assert!(
            notes.0.lock().unwrap().is_empty(),
            "code only leaves the conversation"
        );

        std::fs::write(&file, "after\n").unwrap();
        let dirty = Buffers(vec![ws.path().canonicalize().unwrap().join("a.txt")]);
        let refused = rewind(What::Both, 2, &point.id, Some(&checkpoints), &notes, &dirty).await;
        assert_eq!(
            refused,
            Err("agent: nothing was restored: a.txt has unsaved changes in Neovim; save or discard them first".into())
        );
        assert_eq!(read(), "after\n");
        assert!(notes.0.lock().unwrap().is_empty(), "nothing changes");

        assert_eq!(
            rewind(What::Code, 1, &point.id, None, &notes, &clean).await,
            Err("agent: checkpoints are off, so the code cannot be rewound".into())
        );
    }
}
