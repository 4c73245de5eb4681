//! One interface for every conversation a front end drives: the built-in turn loop
//! ([`Native`], over [`crate::agent::Agent`]) and an external agent over ACP
//! ([`crate::acp::AcpSession`]). A front end holds an `Arc<dyn Conversation>` and never asks
//! which kind it has; a feature written against this trait (saving a session, rewinding it)
//! works for both, or says it is not supported with a typed error.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::mpsc::error::SendError;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, Report};
use crate::llm::Message;
use crate::sessions::{self, Record};
use agent_nvim_vocab::approval::Decision;
use agent_nvim_vocab::events::{Event, Outcome};

pub use agent_nvim_vocab::conversation::ConversationEvent;

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

    /// Passes `event` on (and records it, unless it is of the moment only: a running command's
    /// live output, which its finished row replaces, or the files a call works on, for follow
    /// mode); an error when the receiver has gone, holding the event, as
    /// [`UnboundedSender::send`] does (the ACP session shows it elsewhere then).
    #[allow(clippy::result_large_err)]
    pub fn send(&self, event: ConversationEvent) -> Result<(), SendError<ConversationEvent>> {
        let passing = matches!(
            event,
            ConversationEvent::Turn(Event::ToolProgress { .. })
                | ConversationEvent::Agent(
                    agent_nvim_vocab::conversation::AgentUpdate::Locations { .. }
                )
        );
        if let Some(writer) = self.record.as_ref().filter(|_| !passing) {
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
    /// A rewind named a prompt the conversation does not have (they count from 1).
    #[error("there is no prompt {0} to rewind to")]
    NoSuchPrompt(usize),
    /// An external agent could not list or load its sessions (`acp::SessionsError`'s text).
    #[error("{0}")]
    Agent(String),
    /// A compaction asked for could not be done: why.
    #[error("not compacted: {0}")]
    NotCompacted(String),
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

    /// How many prompts its history holds (what the next prompt's number follows); None for a
    /// conversation whose history is not ours (an external agent's).
    fn prompts(&self) -> BoxFuture<'_, Option<usize>> {
        Box::pin(async { None })
    }

    /// The id of the saved conversation it is (`20261201-123456-ab12`), once it has one: for
    /// what is kept beside a conversation (checkpoints). None when it is not saved.
    fn id(&self) -> Option<String> {
        None
    }

    /// The id a prompt about to run will be saved under: a saved conversation that has no file
    /// yet opens it now, so what is kept beside the prompt (its checkpoint) can name it before
    /// the prompt runs. The same as [`Conversation::id`] by default.
    fn id_for_prompt(&self) -> Option<String> {
        self.id()
    }

    /// Tells it how a question of its turn was answered (`note` is what the tool row shows),
    /// for the record. Nothing by default.
    fn decided(&self, _tool: &str, _decision: &Decision, _note: &str) {}

    /// Goes back to before its `turn`-th prompt (counting from 1): that prompt and all after it
    /// are forgotten, so the next request no longer carries them. The built-in one can.
    fn rewind(&self, _turn: usize) -> BoxFuture<'_, Result<(), ConversationError>> {
        Box::pin(async { Err(self.unsupported("rewind")) })
    }

    /// The sessions the agent keeps itself (ACP `session/list`), for the resume list; none for
    /// a conversation that keeps none or does not list them.
    fn agent_sessions(
        &self,
    ) -> BoxFuture<'_, Result<Vec<crate::acp::AgentSession>, ConversationError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Continues one of the agent's own sessions (ACP `session/load`): what the agent replays
    /// is reported on `events` as it comes (its user messages as prompts), and prompts go to
    /// that session from then on. Answers its title (the first line of its first user message,
    /// empty when there was none).
    fn load<'a>(
        &'a self,
        _id: &'a str,
        _events: &'a Events,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<String, ConversationError>> {
        Box::pin(async { Err(self.unsupported("load an agent's session")) })
    }

    /// The external agent's own id for the session prompts go to, when the agent can load it
    /// again (ACP `loadSession`): what a saved conversation notes to be resumed through it.
    fn agent_session_id(&self) -> Option<String> {
        None
    }

    /// Compacts now (`:Agent compact`): the older part of what the model is sent is replaced by
    /// a summary it writes, reported as a `Compacted` event on `events`. The built-in one can.
    fn compact<'a>(
        &'a self,
        _events: &'a Events,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async { Err(self.unsupported("compact its conversation")) })
    }

    /// Sends `model` from its next prompt on (`:Agent model`), even while a turn runs. The
    /// built-in one can; an external agent chooses its own (its config options, issue 15).
    fn switch_model(&self, _model: &str) -> Result<(), ConversationError> {
        Err(self.unsupported("switch the model"))
    }

    /// Chooses one of the modes or config options an external agent offers (`:Agent mode`,
    /// `:Agent option`, `:Agent model`); the new state is reported as an event once the agent
    /// has taken it. The built-in one has none.
    fn choose(&self, _choice: Choice) -> BoxFuture<'_, Result<(), ConversationError>> {
        Box::pin(async { Err(self.unsupported("choose a mode or an option")) })
    }

    /// `:Agent stop` beyond the running turn: kills what the conversation still runs (an
    /// external agent's terminals, which outlive the turn that made them). Nothing by default.
    fn stop(&self) {}

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

/// What [`Conversation::choose`] chooses.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// A mode, by its id.
    Mode(String),
    /// A config option's value: a value's id (select) or a boolean.
    Option {
        id: String,
        value: serde_json::Value,
    },
    /// Log in with one of the agent's own methods (`authenticate`), then open the session it
    /// would not open before (`:Agent login`).
    Login(String),
    /// Log out (`logout`, where the agent offers it: `:Agent logout`).
    Logout,
}

/// The built-in turn loop as a [`Conversation`].
pub struct Native {
    agent: Mutex<Agent>,
    /// The agent's [`Agent::model_switch`], reached without waiting for a running turn.
    next_model: crate::agent::ModelSwitch,
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
            self.agent
                .lock()
                .await
                .restore(saved.model_view(), saved.compactions());
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
                .compact(crate::agent::Why::Asked, events, cancel)
                .await
                .map(|_| ())
                .map_err(ConversationError::NotCompacted)
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

/// Where the `turn`-th prompt (counting from 1) begins in `history`: the index of its user
/// message. None when there are fewer prompts.
pub fn prompt_start(history: &[Message], turn: usize) -> Option<usize> {
    let nth = turn.checked_sub(1)?;
    history
        .iter()
        .enumerate()
        .filter(|(_, message)| matches!(message, Message::User(_)))
        .nth(nth)
        .map(|(at, _)| at)
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

// --- Checkpoints before each prompt (issue 11) ------------------------------------------------

/// A conversation whose every prompt is preceded by a checkpoint of the workspace
/// ([`crate::checkpoint`]), whatever kind it wraps: the built-in turn loop and an external agent
/// get the same rewind points without the front end asking which it has. A checkpoint that
/// cannot be taken never stops the prompt: the first failure is said once in the chat
/// (`agent: checkpoints are off: ...`, right after `TurnStarted`) and logged.
pub struct Checkpointed {
    inner: Arc<dyn Conversation>,
    checkpoints: crate::checkpoint::Checkpoints,
}

impl Checkpointed {
    /// `inner`, checkpointed before each prompt. A new conversation begins: its checkpoints go
    /// on refs of a new id.
    pub fn new(inner: Arc<dyn Conversation>, checkpoints: crate::checkpoint::Checkpoints) -> Self {
        checkpoints.set_conversation(crate::checkpoint::Checkpoints::new_conversation_id());
        Checkpointed { inner, checkpoints }
    }

    /// `inner` checkpointed when there are checkpoints, else `inner` as it is.
    pub fn wrap(
        inner: Arc<dyn Conversation>,
        checkpoints: Option<&crate::checkpoint::Checkpoints>,
    ) -> Arc<dyn Conversation> {
        match checkpoints {
            Some(checkpoints) => Arc::new(Checkpointed::new(inner, checkpoints.clone())),
            None => inner,
        }
    }
}

/// Writes, inside a decorator's `impl Conversation`, the methods it passes to `self.inner`
/// unchanged, named in the call: `forward_to_inner!(name, id, end);`. A decorator writes by hand
/// only what it adds to; the rest cannot drift from the trait's list.
macro_rules! forward_to_inner {
    ($($method:ident),* $(,)?) => { $( $crate::conversation::forward_to_inner!(@one $method); )* };
    (@one name) => {
        fn name(&self) -> &str {
            self.inner.name()
        }
    };
    (@one model_view) => {
        fn model_view(
            &self,
            from: usize,
        ) -> ::futures::future::BoxFuture<'_, Option<Vec<$crate::llm::Message>>> {
            self.inner.model_view(from)
        }
    };
    (@one prompts) => {
        fn prompts(&self) -> ::futures::future::BoxFuture<'_, Option<usize>> {
            self.inner.prompts()
        }
    };
    (@one id) => {
        fn id(&self) -> Option<String> {
            self.inner.id()
        }
    };
    (@one id_for_prompt) => {
        fn id_for_prompt(&self) -> Option<String> {
            self.inner.id_for_prompt()
        }
    };
    (@one decided) => {
        fn decided(&self, tool: &str, decision: &::agent_nvim_vocab::approval::Decision, note: &str) {
            self.inner.decided(tool, decision, note)
        }
    };
    (@one agent_sessions) => {
        fn agent_sessions(
            &self,
        ) -> ::futures::future::BoxFuture<
            '_,
            Result<Vec<$crate::acp::AgentSession>, $crate::conversation::ConversationError>,
        > {
            self.inner.agent_sessions()
        }
    };
    (@one agent_session_id) => {
        fn agent_session_id(&self) -> Option<String> {
            self.inner.agent_session_id()
        }
    };
    (@one compact) => {
        fn compact<'a>(
            &'a self,
            events: &'a $crate::conversation::Events,
            cancel: &'a ::tokio_util::sync::CancellationToken,
        ) -> ::futures::future::BoxFuture<'a, Result<(), $crate::conversation::ConversationError>> {
            self.inner.compact(events, cancel)
        }
    };
    (@one switch_model) => {
        fn switch_model(&self, model: &str) -> Result<(), $crate::conversation::ConversationError> {
            self.inner.switch_model(model)
        }
    };
    (@one choose) => {
        fn choose(
            &self,
            choice: $crate::conversation::Choice,
        ) -> ::futures::future::BoxFuture<'_, Result<(), $crate::conversation::ConversationError>> {
            self.inner.choose(choice)
        }
    };
    (@one stop) => {
        fn stop(&self) {
            self.inner.stop()
        }
    };
    (@one end) => {
        fn end(self: ::std::sync::Arc<Self>) -> ::futures::future::BoxFuture<'static, ()> {
            self.inner.clone().end()
        }
    };
}
pub(crate) use forward_to_inner;

impl Checkpointed {
    /// After a resume or a load, another conversation: its checkpoints go on the refs of the
    /// saved file it goes on in (so the review and the rewind list follow it), or on new ones
    /// when it has none.
    fn follow_inner(&self) {
        let conversation = self
            .inner
            .id()
            .unwrap_or_else(crate::checkpoint::Checkpoints::new_conversation_id);
        self.checkpoints.set_conversation(conversation);
    }
}

impl Conversation for Checkpointed {
    forward_to_inner!(
        name,
        model_view,
        prompts,
        id,
        id_for_prompt,
        decided,
        agent_sessions,
        agent_session_id,
        switch_model,
        compact,
        choose,
        stop,
        end,
    );

    fn prompt<'a>(
        &'a self,
        text: String,
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
                .checkpoint_at(crate::checkpoint::Kind::Prompt, &text, turn)
                .await;
            let Some(notice) = self.checkpoints.take_notice() else {
                return self.inner.prompt(text, events, cancel).await;
            };
            // The notice goes right after the turn's first event, so `TurnStarted` stays first.
            let (inner_events, mut reported) = tokio::sync::mpsc::unbounded_channel();
            let inner_events = Events::new(inner_events);
            let run = async move {
                let outcome = self.inner.prompt(text, &inner_events, cancel).await;
                drop(inner_events);
                outcome
            };
            let forward = async {
                let mut notice = Some(notice);
                while let Some(event) = reported.recv().await {
                    let _ = events.send(event);
                    if let Some(message) = notice.take() {
                        events.report(Event::Error {
                            message: format!("agent: {message}"),
                        });
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
                .set_conversation(crate::checkpoint::Checkpoints::new_conversation_id());
            Ok(())
        })
    }

    fn resume<'a>(
        &'a self,
        saved: &'a sessions::Conversation,
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
                .checkpoint_at(
                    crate::checkpoint::Kind::Cut,
                    &format!("before prompt {turn}"),
                    Some(turn),
                )
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
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod checkpointed_tests {
    use super::tests::prompt;
    use super::*;
    use crate::checkpoint::{Checkpoints, Kind};

    /// A conversation whose prompt writes `after.txt`, as a turn's tools would.
    struct Writes(std::path::PathBuf);

    impl Conversation for Writes {
        fn name(&self) -> &str {
            "writes"
        }
        fn prompt<'a>(
            &'a self,
            _text: String,
            events: &'a Events,
            _cancel: &'a CancellationToken,
        ) -> BoxFuture<'a, Outcome> {
            Box::pin(async move {
                events.report(Event::TurnStarted);
                std::fs::write(self.0.join("after.txt"), "written\n").unwrap();
                Outcome::Done
            })
        }
        fn end(self: Arc<Self>) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }
    }

    #[tokio::test]
    async fn each_prompt_is_preceded_by_a_checkpoint_on_the_conversations_refs() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let workspace = crate::workspace::Workspace::new(ws.path()).unwrap();
        let checkpoints = Checkpoints::new(state.path(), workspace.clone(), "first".into());
        let conversation = Checkpointed::new(
            Arc::new(Writes(workspace.root().to_path_buf())),
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
    async fn after_a_conversation_rewind_the_rewind_points_follow_the_history() {
        use crate::test_support::mock_llm::{MockLlm, Part, Reply, Wire};
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
        let native = Arc::new(super::tests::native(ws.path(), mock.base_url()));
        let workspace = crate::workspace::Workspace::new(ws.path()).unwrap();
        let checkpoints = Checkpoints::new(state.path(), workspace, "first".into());
        let conversation = Checkpointed::new(native.clone(), checkpoints.clone());
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

    #[tokio::test]
    async fn without_git_the_prompt_runs_and_says_once_that_checkpoints_are_off() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let workspace = crate::workspace::Workspace::new(ws.path()).unwrap();
        let checkpoints = Checkpoints::without_git(state.path(), workspace.clone());
        let conversation = Checkpointed::new(
            Arc::new(Writes(workspace.root().to_path_buf())),
            checkpoints,
        );
        let off = "agent: checkpoints are off: git was not found on PATH; install git to be \
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
