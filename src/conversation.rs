//! One interface for every conversation a front end drives: the built-in turn loop
//! ([`Native`], over [`crate::agent::Agent`]) and an external agent over ACP
//! ([`crate::acp::AcpSession`]). A front end holds an `Arc<dyn Conversation>` and never asks
//! which kind it has; a feature written against this trait (saving a session, rewinding it)
//! works for both, or says it is not supported with a typed error.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::error::SendError;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::acp::AgentUpdate;
use crate::agent::{Agent, Event, Outcome, Report};
use crate::approval::Decision;
use crate::llm::Message;
use crate::sessions::{self, Record};

/// What a conversation reports while it runs a prompt, in order: the turn loop's own
/// [`Event`]s, plus what only an external agent reports. Serialized flat either way, as a map
/// with a `type` field (`{"type":"text","text":"Hi"}`, `{"type":"thought","text":"..."}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ConversationEvent {
    /// Turn started and done, message text, tool started and finished, usage, errors.
    Turn(Event),
    /// Thoughts, plans, tool rows updated in place.
    Agent(AgentUpdate),
}

/// The stream a prompt's events go to. Every conversation reports on the one it is given, so a
/// front end (and the session recorder, [`sessions::Recorded`]) sees every kind of conversation
/// the same way. A recorded stream queues each event for the session file in the same call that
/// passes it on, so recording adds no hop (and no reordering) on an event's way to the screen.
#[derive(Clone)]
pub struct Events {
    sender: UnboundedSender<ConversationEvent>,
    record: Option<sessions::Writer>,
}

impl Events {
    /// The stream that passes each event to `sender`.
    pub fn new(sender: UnboundedSender<ConversationEvent>) -> Self {
        Events {
            sender,
            record: None,
        }
    }

    /// This stream, also recording each event to `writer`.
    pub fn recorded_to(&self, writer: sessions::Writer) -> Self {
        Events {
            sender: self.sender.clone(),
            record: Some(writer),
        }
    }

    /// Passes `event` on (and records it); an error when the receiver has gone, holding the
    /// event, as [`UnboundedSender::send`] does (the ACP session shows it elsewhere then).
    #[allow(clippy::result_large_err)]
    pub fn send(&self, event: ConversationEvent) -> Result<(), SendError<ConversationEvent>> {
        if let Some(writer) = &self.record {
            writer.write(Record::Event {
                event: event.clone(),
            });
        }
        self.sender.send(event)
    }
}

impl From<UnboundedSender<ConversationEvent>> for Events {
    fn from(sender: UnboundedSender<ConversationEvent>) -> Self {
        Events::new(sender)
    }
}

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
    /// A saved conversation could not be read or written (`sessions::StoreError`'s text).
    #[error("{0}")]
    Store(String),
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
    /// `TurnDone` last). The conversation stays usable whatever the outcome.
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

    /// Continues a saved conversation: its model's view becomes this one's history (the
    /// session grants start empty). The built-in one can; an external agent cannot (yet).
    fn resume<'a>(
        &'a self,
        _saved: &'a sessions::Conversation,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async { Err(self.unsupported("resume a session")) })
    }

    /// The model's view of the conversation from its `from`-th message on, as the next request
    /// would send it; None for a conversation whose history is not ours (an external agent's).
    fn model_view(&self, _from: usize) -> BoxFuture<'_, Option<Vec<Message>>> {
        Box::pin(async { None })
    }

    /// The id of the saved conversation it is (`20261201-123456-ab12`), once it has one: for
    /// what is kept beside a conversation (checkpoints). None when it is not saved.
    fn id(&self) -> Option<String> {
        None
    }

    /// Tells it how a question of its turn was answered (`note` is what the tool row shows),
    /// for the record. Nothing by default.
    fn decided(&self, _tool: &str, _decision: &Decision, _note: &str) {}

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

    fn resume<'a>(
        &'a self,
        saved: &'a sessions::Conversation,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async move {
            self.agent.lock().await.restore(saved.model_view());
            Ok(())
        })
    }

    fn model_view(&self, from: usize) -> BoxFuture<'_, Option<Vec<Message>>> {
        Box::pin(async move {
            let agent = self.agent.lock().await;
            Some(agent.history().get(from..).unwrap_or_default().to_vec())
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
pub(crate) mod tests {
    use super::*;
    use crate::test_support::mock_llm::{MockLlm, Part, Reply, Wire};

    /// The built-in conversation in `dir`, talking to the mock at `base_url`, asking nobody.
    pub(crate) fn native(dir: &std::path::Path, base_url: String) -> Native {
        let mut config = crate::session::SessionConfig::new(dir);
        config.provider = crate::llm::ProviderChoice {
            provider: Some("ollama".into()),
            model: Some("m".into()),
            base_url: Some(base_url),
        };
        let built = crate::session::build(
            &config,
            Box::new(|_, _| None),
            Arc::new(crate::editor::NoEditor),
        )
        .unwrap();
        Native::new(built.agent.unwrap())
    }

    /// Runs one prompt and returns what it reported.
    pub(crate) async fn prompt(
        conversation: &dyn Conversation,
        text: &str,
    ) -> Vec<ConversationEvent> {
        let (events, mut reported) = tokio::sync::mpsc::unbounded_channel();
        let events = Events::new(events);
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
    async fn an_unavailable_conversation_answers_each_prompt_with_its_message() {
        let waiting = Unavailable::new("claude", "agent: still starting claude");
        assert_eq!(
            prompt(&waiting, "hi").await,
            vec![ConversationEvent::Turn(Event::Error {
                message: "agent: still starting claude".into()
            })]
        );
        assert_eq!(waiting.reset().await, Ok(()));
        let saved = crate::sessions::Conversation {
            header: crate::sessions::Header {
                agent_nvim_session: crate::sessions::FORMAT,
                id: "20261201-000000-0000".into(),
                workspace: "/w".into(),
                created: "2026-12-01T00:00:00Z".into(),
                conversation: "claude".into(),
            },
            records: Vec::new(),
        };
        assert_eq!(
            waiting.resume(&saved).await,
            Err(ConversationError::Unsupported {
                name: "claude".into(),
                what: "resume a session"
            })
        );
        assert_eq!(waiting.id(), None);
    }
}
