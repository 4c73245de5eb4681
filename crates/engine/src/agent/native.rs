//! [`Native`]: the built-in turn loop as a [`Conversation`].

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::Agent;
use crate::llm::Message;
use agent_nvim_conversation::{prompt_start, Cause, Conversation, ConversationError, Events};
use agent_nvim_vocab::events::Outcome;

/// The built-in turn loop as a [`Conversation`].
pub struct Native {
    agent: Mutex<Agent>,
    /// The agent's [`Agent::model_switch`], reached without waiting for a running turn.
    next_model: super::ModelSwitch,
}

impl Native {
    /// The conversation `agent` holds.
    pub fn new(agent: Agent) -> Self {
        Native {
            next_model: agent.model_switch(),
            agent: Mutex::new(agent),
        }
    }
}

impl Conversation for Native {
    fn name(&self) -> &str {
        "built-in"
    }

    fn prompt<'a>(
        &'a self,
        prompt: agent_nvim_llm::Prompt,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move { self.agent.lock().await.prompt(prompt, events, cancel).await })
    }

    fn reset(&self) -> BoxFuture<'_, Result<(), ConversationError>> {
        Box::pin(async move {
            self.agent.lock().await.reset();
            Ok(())
        })
    }

    fn resume<'a>(
        &'a self,
        saved: &'a agent_nvim_conversation::saved::Conversation,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async move {
            let mut agent = self.agent.lock().await;
            let view = heavy(|| saved.model_view());
            agent.restore(view, saved.compactions(), saved.cost());
            Ok(())
        })
    }

    fn follow<'a>(
        &'a self,
        saved: &'a agent_nvim_conversation::saved::Conversation,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async move {
            let mut agent = self.agent.lock().await;
            let view = heavy(|| saved.model_view());
            agent.follow(view, saved.compactions());
            Ok(())
        })
    }

    fn model_view(&self, from: usize) -> BoxFuture<'_, Option<Vec<Message>>> {
        Box::pin(async move {
            let agent = self.agent.lock().await;
            Some(agent.history().get(from..).unwrap_or_default().to_vec())
        })
    }

    fn prompts(&self) -> BoxFuture<'_, Option<usize>> {
        Box::pin(async move {
            let agent = self.agent.lock().await;
            let users = agent.history().iter();
            Some(users.filter(|m| matches!(m, Message::User(_))).count())
        })
    }

    fn rewind(&self, turn: usize) -> BoxFuture<'_, Result<(), ConversationError>> {
        Box::pin(async move {
            let mut agent = self.agent.lock().await;
            let history = agent.history();
            let Some(cut) = prompt_start(history, turn) else {
                return Err(ConversationError::NoSuchPrompt(turn));
            };
            agent.truncate(cut);
            Ok(())
        })
    }

    fn compact<'a>(
        &'a self,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async move {
            let mut agent = self.agent.lock().await;
            agent
                .compact(super::Why::Asked, events, cancel)
                .await
                .map(|_| ())
                .map_err(|err| ConversationError::NotCompacted(Cause::new(err)))
        })
    }

    fn switch_model(&self, model: &str) -> Result<(), ConversationError> {
        if let Ok(mut next) = self.next_model.lock() {
            *next = Some(model.to_string());
        }
        Ok(())
    }

    fn end(self: Arc<Self>) -> BoxFuture<'static, ()> {
        // Nothing runs between turns; its history stays for whoever still holds it.
        Box::pin(async {})
    }
}

/// Runs `work`, which may take a while (a long conversation's history rebuilt, its images read
/// back): on a multi-threaded runtime the thread is handed over first
/// ([`tokio::task::block_in_place`]), so the other tasks on it (other conversations' streams)
/// move to another; elsewhere (a test's runtime) it just runs.
fn heavy<T>(work: impl FnOnce() -> T) -> T {
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use super::*;
    use agent_nvim_conversation::fake::prompt;
    use agent_nvim_conversation::ConversationEvent;
    use agent_nvim_fixtures::mock_llm::{MockLlm, Part, Reply, Wire};
    use agent_nvim_vocab::events::Event;

    /// The built-in conversation in `dir`, talking to the mock at `base_url`, asking nobody.
    pub(crate) fn native(dir: &std::path::Path, base_url: String) -> Native {
        native_keeping(dir, base_url, crate::agent::DEFAULT_KEEP_TURNS)
    }

    /// [`native`], its compactions keeping `keep_turns` prompts as they are.
    pub(crate) fn native_keeping(
        dir: &std::path::Path,
        base_url: String,
        keep_turns: usize,
    ) -> Native {
        let mut config = crate::session::SessionConfig::new(dir);
        config.keep_turns = keep_turns;
        config.provider = crate::llm::ProviderChoice {
            provider: Some("ollama".into()),
            model: Some("m".into()),
            base_url: Some(base_url),
            tuning: Default::default(),
            api_key: None,
            api_key_cmd: None,
        };
        let built = crate::session::build(
            &config,
            Box::new(|_, _| None),
            Arc::new(crate::editor::NoEditor),
        )
        .unwrap();
        Native::new(built.agent.unwrap())
    }

    #[tokio::test]
    async fn the_native_conversation_reports_on_its_stream_and_starts_over_on_reset() {
        let dir = tempfile::tempdir().unwrap();
        let reply = |text: &str| Reply::Turn {
            parts: vec![Part::Text(text.into())],
            usage: (1, 1),
        };
        let mock = MockLlm::start(Wire::Ollama, vec![reply("one"), reply("two")]);
        let native = native(dir.path(), mock.base_url());
        let seen = prompt(&native, "hi").await;
        assert_eq!(
            seen.first(),
            Some(&ConversationEvent::Turn(Event::TurnStarted))
        );
        let text: String = seen
            .iter()
            .filter_map(|event| match event {
                ConversationEvent::Turn(Event::Text { text }) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "one");
        assert_eq!(native.agent.lock().await.history().len(), 2);
        native.reset().await.unwrap();
        assert!(native.agent.lock().await.history().is_empty());
        prompt(&native, "again").await;
        // The second request carries only the prompt after the reset.
        let sent = &mock.requests()[1].body;
        assert_eq!(sent["messages"].as_array().unwrap().len(), 2, "{sent}");
    }

    #[tokio::test]
    async fn after_a_conversation_rewind_the_rewind_points_follow_the_history() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let reply = |text: &str| Reply::Turn {
            parts: vec![Part::Text(text.into())],
            usage: (1, 1),
        };
        let replies = ["1", "2", "3", "2 again", "2 once more"]
            .map(reply)
            .to_vec();
        let mock = MockLlm::start(Wire::Ollama, replies);
        let native = Arc::new(native(ws.path(), mock.base_url()));
        let workspace = crate::workspace::Workspace::new(ws.path()).unwrap();
        let checkpoints =
            crate::checkpoint::Checkpoints::new(state.path(), workspace, "first".into());
        let conversation =
            agent_nvim_conversation::Checkpointed::new(native.clone(), checkpoints.clone());
        let points = || async {
            let points = checkpoints.points(&checkpoints.conversation()).await;
            let points = points.unwrap().into_iter();
            points.map(|p| (p.turn, p.label)).collect::<Vec<_>>()
        };
        for text in ["one", "two", "three"] {
            prompt(&conversation, text).await;
        }
        assert_eq!(
            points().await,
            [(3, "three".into()), (2, "two".into()), (1, "one".into())]
        );
        conversation.rewind(2).await.unwrap();
        assert_eq!(points().await, [(1, "one".to_string())]);
        prompt(&conversation, "two again").await;
        assert_eq!(
            points().await,
            [(2, "two again".into()), (1, "one".to_string())]
        );
        // A cut that left no record (its checkpoint could not be written): the next prompt's
        // number, the history's, still puts the list right.
        native.rewind(2).await.unwrap();
        prompt(&conversation, "two once more").await;
        assert_eq!(
            points().await,
            [(2, "two once more".into()), (1, "one".to_string())]
        );
    }
}
