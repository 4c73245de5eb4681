//! [`Checkpointed`]: the decorator that checkpoints the workspace before each prompt.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::{Conversation, ConversationError, Events};
use agent_nvim_core::checkpoint::{Checkpoints, Kind};
use agent_nvim_vocab::events::{Event, Outcome};

/// A conversation whose every prompt is preceded by a checkpoint of the workspace
/// ([`agent_nvim_core::checkpoint`]), whatever kind it wraps: the built-in turn loop and an external agent
/// get the same rewind points without the front end asking which it has. A checkpoint that
/// cannot be taken never stops the prompt: the first failure is said once in the chat
/// (`checkpoints are off: ...`, right after `TurnStarted`) and logged.
pub struct Checkpointed {
    inner: Arc<dyn Conversation>,
    checkpoints: Checkpoints,
}

impl Checkpointed {
    /// `inner`, checkpointed before each prompt. A new conversation begins: its checkpoints go
    /// on refs of a new id.
    pub fn new(inner: Arc<dyn Conversation>, checkpoints: Checkpoints) -> Self {
        checkpoints.set_conversation(Checkpoints::new_conversation_id());
        Checkpointed { inner, checkpoints }
    }

    /// `inner` checkpointed when there are checkpoints, else `inner` as it is.
    pub fn wrap(
        inner: Arc<dyn Conversation>,
        checkpoints: Option<&Checkpoints>,
    ) -> Arc<dyn Conversation> {
        match checkpoints {
            Some(checkpoints) => Arc::new(Checkpointed::new(inner, checkpoints.clone())),
            None => inner,
        }
    }
}

impl Checkpointed {
    /// After a resume or a load, another conversation: its checkpoints go on the refs of the
    /// saved file it goes on in (so the review and the rewind list follow it), or on new ones
    /// when it has none.
    fn follow_inner(&self) {
        let conversation = self
            .inner
            .id()
            .unwrap_or_else(Checkpoints::new_conversation_id);
        self.checkpoints.set_conversation(conversation);
    }
}

impl Conversation for Checkpointed {
    fn decorates(&self) -> Option<&Arc<dyn Conversation>> {
        Some(&self.inner)
    }

    fn prompt<'a>(
        &'a self,
        prompt: agent_nvim_llm::Prompt,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            // A saved conversation's checkpoints go on its own id, so they are found beside it.
            if let Some(id) = self.inner.id_for_prompt() {
                self.checkpoints.set_conversation(id);
            }
            // The prompt's number in the history, so the rewind points follow the history
            // after a conversation rewind (`Checkpoints::points`).
            let turn = self.inner.prompts().await.map(|prompts| prompts + 1);
            self.checkpoints
                .checkpoint_at(Kind::Prompt, &prompt.text, turn)
                .await;
            let Some(notice) = self.checkpoints.take_notice() else {
                return self.inner.prompt(prompt, events, cancel).await;
            };
            // The notice goes right after the turn's first event, so `TurnStarted` stays first.
            let (inner_events, mut reported) = tokio::sync::mpsc::unbounded_channel();
            let inner_events = Events::new(inner_events);
            let run = async move {
                let outcome = self.inner.prompt(prompt, &inner_events, cancel).await;
                drop(inner_events);
                outcome
            };
            let forward = async {
                let mut notice = Some(notice);
                while let Some(event) = reported.recv().await {
                    let _ = events.send(event);
                    if let Some(message) = notice.take() {
                        events.report(Event::Error { message });
                    }
                }
            };
            let (outcome, ()) = futures::join!(run, forward);
            outcome
        })
    }

    fn reset(&self) -> BoxFuture<'_, Result<(), ConversationError>> {
        Box::pin(async move {
            self.inner.reset().await?;
            self.checkpoints
                .set_conversation(Checkpoints::new_conversation_id());
            Ok(())
        })
    }

    fn resume<'a>(
        &'a self,
        saved: &'a crate::saved::Conversation,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async move {
            self.inner.resume(saved).await?;
            // Its rewind points are those kept beside it, before its next prompt too.
            self.follow_inner();
            Ok(())
        })
    }

    fn rewind(&self, turn: usize) -> BoxFuture<'_, Result<(), ConversationError>> {
        Box::pin(async move {
            self.inner.rewind(turn).await?;
            // Recorded, so the prompts cut leave the rewind points (a failure is logged: the
            // next prompt numbered `turn` replaces them anyway).
            self.checkpoints
                .checkpoint_at(Kind::Cut, &format!("before prompt {turn}"), Some(turn))
                .await;
            Ok(())
        })
    }

    fn load<'a>(
        &'a self,
        id: &'a str,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<String, ConversationError>> {
        Box::pin(async move {
            let title = self.inner.load(id, events, cancel).await?;
            // Another conversation from here on, as after a resume.
            self.follow_inner();
            Ok(title)
        })
    }

    fn resume_agent_session<'a>(
        &'a self,
        id: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async move {
            self.inner.resume_agent_session(id, cancel).await?;
            self.follow_inner();
            Ok(())
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::fake::{prompt, Fake};
    use crate::ConversationEvent;

    /// A conversation whose prompt writes `after.txt` in `dir`, as a turn's tools would.
    fn writes(dir: std::path::PathBuf) -> Fake {
        Fake::new("writes").on_prompt(move |_text, events| {
            let dir = dir.clone();
            async move {
                events.report(Event::TurnStarted);
                std::fs::write(dir.join("after.txt"), "written\n").unwrap();
                Outcome::Done
            }
        })
    }

    #[tokio::test]
    async fn each_prompt_is_preceded_by_a_checkpoint_on_the_conversations_refs() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let workspace = agent_nvim_core::workspace::Workspace::new(ws.path()).unwrap();
        let checkpoints = Checkpoints::new(state.path(), workspace.clone(), "first".into());
        let conversation = Checkpointed::new(
            Arc::new(writes(workspace.root().to_path_buf())),
            checkpoints.clone(),
        );
        let id = checkpoints.conversation();
        assert_ne!(id, "first");
        let seen = prompt(&conversation, "make after.txt\nplease").await;
        assert_eq!(seen, vec![ConversationEvent::Turn(Event::TurnStarted)]);
        let listed = checkpoints.list(&id).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (listed[0].kind, listed[0].label.as_str()),
            (Kind::Prompt, "make after.txt")
        );
        // The checkpoint is of the workspace before the prompt ran.
        assert_eq!(
            checkpoints
                .file_at(&listed[0].id, std::path::Path::new("after.txt"))
                .await
                .unwrap(),
            None
        );
        conversation.reset().await.unwrap_err();
        assert_eq!(
            checkpoints.conversation(),
            id,
            "a failed reset keeps the id"
        );
    }

    #[tokio::test]
    async fn without_git_the_prompt_runs_and_says_once_that_checkpoints_are_off() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let workspace = agent_nvim_core::workspace::Workspace::new(ws.path()).unwrap();
        let checkpoints = Checkpoints::without_git(state.path(), workspace.clone());
        let conversation = Checkpointed::new(
            Arc::new(writes(workspace.root().to_path_buf())),
            checkpoints,
        );
        let off = "checkpoints are off: git was not found on PATH; install git to be \
                   able to rewind";
        assert_eq!(
            prompt(&conversation, "one").await,
            vec![
                ConversationEvent::Turn(Event::TurnStarted),
                ConversationEvent::Turn(Event::Error {
                    message: off.into()
                }),
            ]
        );
        assert!(ws.path().join("after.txt").exists());
        assert_eq!(
            prompt(&conversation, "two").await,
            vec![ConversationEvent::Turn(Event::TurnStarted)]
        );
    }
}
