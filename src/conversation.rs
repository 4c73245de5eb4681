//! One interface for every conversation a front end drives: the built-in turn loop
//! ([`Native`], over [`crate::agent::Agent`]) and an external agent over ACP
//! ([`crate::acp::AcpSession`]). A front end holds an `Arc<dyn Conversation>` and never asks
//! which kind it has; a feature written against this trait (saving a session, rewinding it)
//! works for both, or says it is not supported with a typed error.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::acp::AgentUpdate;
use crate::agent::{Agent, Event, Outcome, Report};

/// What a conversation reports while it runs a prompt, in order: the turn loop's own
/// [`Event`]s, plus what only an external agent reports. Serialized flat either way, as a map
/// with a `type` field (`{"type":"text","text":"Hi"}`, `{"type":"thought","text":"..."}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ConversationEvent {
    /// Turn started and done, message text, tool started and finished, usage, errors.
    Turn(Event),
    /// Thoughts, plans, tool rows updated in place.
    Agent(AgentUpdate),
}

/// The stream a prompt's events go to. Every conversation reports on the one it is given, so a
/// front end (or, later, a session recorder) sees every kind of conversation the same way.
pub type Events = UnboundedSender<ConversationEvent>;

impl Report for Events {
    fn report(&self, event: Event) {
        let _ = self.send(ConversationEvent::Turn(event));
    }
}

/// What a conversation could not do. Shown after `agent: ` by the front end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversationError {
    /// This kind of conversation has no such operation.
    #[error("{name} cannot {what}")]
    Unsupported {
        /// The conversation's name ([`Conversation::name`]).
        name: String,
        /// What was asked: `start over`, `resume a session`, `rewind`.
        what: &'static str,
    },
}

/// A conversation: prompts in, events out.
///
/// Cancel is the token given to [`Conversation::prompt`]: the front end fires it (`:Agent
/// stop`, Ctrl-C), and each kind ends its turn its own way (the HTTP stream dropped and the
/// command tree killed; `session/cancel` for an external agent), always with a `TurnDone`.
pub trait Conversation: Send + Sync {
    /// What to call it in messages and logs (`built-in`, `claude`).
    fn name(&self) -> &str;

    /// Runs one prompt to the end of its turn, reporting on `events` (`TurnStarted` first,
    /// `TurnDone` last), or a single `Error` when no turn could start (an [`Unavailable`]
    /// conversation). The conversation stays usable whatever the outcome.
    fn prompt<'a>(
        &'a self,
        text: String,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Outcome>;

    /// Starts over: history and session grants forgotten.
    fn reset(&self) -> BoxFuture<'_, Result<(), ConversationError>> {
        Box::pin(async { Err(self.unsupported("start over")) })
    }

    /// Continues a saved session (issue 11). None of today's conversations can.
    fn resume<'a>(&'a self, _session: &'a str) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async { Err(self.unsupported("resume a session")) })
    }

    /// Goes back to before the `turn`-th prompt (issue 11). None of today's conversations can.
    fn rewind(&self, _turn: usize) -> BoxFuture<'_, Result<(), ConversationError>> {
        Box::pin(async { Err(self.unsupported("rewind")) })
    }

    /// Stops whatever it runs (an external agent's process tree) once the front end lets go of
    /// it. A turn still holding it keeps it until the turn ends.
    fn end(self: Arc<Self>) -> BoxFuture<'static, ()>;

    /// The error for an operation this conversation does not have.
    fn unsupported(&self, what: &'static str) -> ConversationError {
        ConversationError::Unsupported {
            name: self.name().to_string(),
            what,
        }
    }
}

/// The built-in turn loop as a [`Conversation`].
pub struct Native {
    agent: Mutex<Agent>,
}

impl Native {
    /// The conversation `agent` holds.
    pub fn new(agent: Agent) -> Self {
        Native {
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
        text: String,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move { self.agent.lock().await.prompt(text, events, cancel).await })
    }

    fn reset(&self) -> BoxFuture<'_, Result<(), ConversationError>> {
        Box::pin(async move {
            self.agent.lock().await.reset();
            Ok(())
        })
    }

    fn end(self: Arc<Self>) -> BoxFuture<'static, ()> {
        // Nothing runs between turns; its history stays for whoever still holds it.
        Box::pin(async {})
    }
}

/// A conversation that cannot take prompts yet: each prompt is answered with one error event
/// (the provider is not configured; an external agent is still starting).
pub struct Unavailable {
    name: String,
    message: String,
}

impl Unavailable {
    /// Answers every prompt with `message`, as the user reads it (`agent: ...`).
    pub fn new(name: impl Into<String>, message: impl Into<String>) -> Self {
        Unavailable {
            name: name.into(),
            message: message.into(),
        }
    }
}

impl Conversation for Unavailable {
    fn name(&self) -> &str {
        &self.name
    }

    fn prompt<'a>(
        &'a self,
        _text: String,
        events: &'a Events,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            events.report(Event::Error {
                message: self.message.clone(),
            });
            Outcome::Failed
        })
    }

    fn reset(&self) -> BoxFuture<'_, Result<(), ConversationError>> {
        // Nothing to forget.
        Box::pin(async { Ok(()) })
    }

    fn end(self: Arc<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::test_support::mock_llm::{MockLlm, Part, Reply, Wire};

    /// Runs one prompt and returns what it reported.
    async fn prompt(conversation: &dyn Conversation, text: &str) -> Vec<ConversationEvent> {
        let (events, mut reported) = tokio::sync::mpsc::unbounded_channel();
        conversation
            .prompt(text.into(), &events, &CancellationToken::new())
            .await;
        drop(events);
        let mut seen = Vec::new();
        while let Some(event) = reported.recv().await {
            seen.push(event);
        }
        seen
    }

    #[tokio::test]
    async fn the_native_conversation_reports_on_its_stream_and_starts_over_on_reset() {
        let dir = tempfile::tempdir().unwrap();
        let reply = |text: &str| Reply::Turn {
            parts: vec![Part::Text(text.into())],
            usage: (1, 1),
        };
        let mock = MockLlm::start(Wire::OpenAi, vec![reply("one"), reply("two")]);
        let mut config = crate::session::SessionConfig::new(dir.path());
        config.provider = crate::llm::ProviderChoice {
            provider: Some("ollama".into()),
            model: Some("m".into()),
            base_url: Some(mock.base_url()),
        };
        let built = crate::session::build(
            &config,
            Box::new(|_, _| None),
            Arc::new(crate::editor::NoEditor),
        )
        .unwrap();
        let native = Native::new(built.agent.unwrap());
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
        assert_eq!(
            native.resume("s1").await,
            Err(ConversationError::Unsupported {
                name: "built-in".into(),
                what: "resume a session"
            })
        );
    }

    #[tokio::test]
    async fn an_unavailable_conversation_answers_each_prompt_with_its_message() {
        let waiting = Unavailable::new("claude", "agent: still starting claude");
        assert_eq!(
            prompt(&waiting, "hi").await,
            vec![ConversationEvent::Turn(Event::Error {
                message: "agent: still starting claude".into()
            })]
        );
        assert_eq!(waiting.reset().await, Ok(()));
    }
}
