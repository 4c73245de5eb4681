//! One interface for every conversation a front end drives, knowing none of its
//! implementations: the built-in turn loop (the engine's) and an external agent over ACP (the
//! ACP client's) each implement [`Conversation`]; a front end holds an `Arc<dyn Conversation>`
//! and never asks which kind it has. A feature written against this trait (saving a session,
//! rewinding it) works for both, or says it is not supported with a typed error.
//!
//! - [`Events`]: the stream a prompt's events go to, which a [`Recorder`] may tap;
//! - [`saved`]: what a saved conversation holds;
//! - [`Unavailable`] and [`Checkpointed`]: a conversation that cannot take prompts yet, and the
//!   decorator that checkpoints the workspace before each prompt;
//! - `fake` (with the `test-support` feature): the one scripted conversation tests use.

mod checkpointed;
mod events;
#[cfg(any(test, feature = "test-support"))]
pub mod fake;
pub mod saved;
mod unavailable;

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use agent_nvim_llm::Message;
use agent_nvim_vocab::approval::Decision;
use agent_nvim_vocab::events::Outcome;

/// What a prompt holds (its text and images), for the conversations that take one.
pub use agent_nvim_llm::{Audio, Image, Prompt};
pub use agent_nvim_vocab::conversation::{AgentSession, ConversationEvent};
pub use checkpointed::Checkpointed;
pub use events::{Events, Recorder};
pub use unavailable::Unavailable;

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
    /// A saved conversation could not be read or written (the engine's store's error).
    #[error(transparent)]
    Store(Cause),
    /// A rewind named a prompt the conversation does not have (they count from 1).
    #[error("there is no prompt {0} to rewind to")]
    NoSuchPrompt(usize),
    /// An external agent could not list or load its sessions, or take a choice (the ACP
    /// client's error).
    #[error(transparent)]
    Agent(Cause),
    /// A compaction asked for could not be done: why (the turn loop's error).
    #[error("not compacted: {0}")]
    NotCompacted(#[source] Cause),
    /// What was asked cannot be done now; the text says why (no such branch, not saved).
    #[error("{0}")]
    Refused(String),
}

/// The error of a layer this interface does not know (the engine's store, the ACP client, the
/// turn loop), kept whole with its sources. Two are equal when they say the same.
#[derive(Debug, Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync>);

impl Cause {
    /// `err`, kept as the cause.
    pub fn new(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Cause(Arc::from(err.into()))
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Cause {}

/// A conversation: prompts in, events out.
///
/// Cancel is the token given to [`Conversation::prompt`]: the front end fires it (`:Agent
/// stop`, Ctrl-C), and each kind ends its turn its own way (the HTTP stream dropped and the
/// command tree killed; `session/cancel` for an external agent), always with a `TurnDone`.
///
/// A decorator (a conversation wrapping another to add to it: saving, checkpoints) answers
/// [`Conversation::decorates`] with the one it wraps, and every method it does not write itself
/// passes to that one: it writes only what it adds. An implementation of its own answers None,
/// and the methods it does not write are the defaults each names (mostly "not supported").
pub trait Conversation: Send + Sync {
    /// What to call it in messages and logs (`built-in`, `claude`).
    fn name(&self) -> &str {
        self.decorates()
            .map_or("conversation", |inner| inner.name())
    }

    /// Runs one prompt to the end of its turn, reporting on `events` (`TurnStarted` first,
    /// `TurnDone` last), or a single `Error` when no turn could start (an [`Unavailable`]
    /// conversation). The conversation stays usable whatever the outcome.
    fn prompt<'a>(
        &'a self,
        prompt: agent_nvim_llm::Prompt,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Outcome>;

    /// The conversation this one decorates, when it is a decorator.
    fn decorates(&self) -> Option<&Arc<dyn Conversation>> {
        None
    }

    /// Starts over: history and session grants forgotten. Not supported by default.
    fn reset(&self) -> BoxFuture<'_, Result<(), ConversationError>> {
        match self.decorates() {
            Some(inner) => inner.reset(),
            None => Box::pin(async { Err(self.unsupported("start over")) }),
        }
    }

    /// Continues a saved conversation: its model's view becomes this one's history (the
    /// session grants start empty). The built-in one can; an external agent cannot (yet).
    fn resume<'a>(
        &'a self,
        saved: &'a saved::Conversation,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        match self.decorates() {
            Some(inner) => inner.resume(saved),
            None => Box::pin(async { Err(self.unsupported("resume a session")) }),
        }
    }

    /// Continues one of the agent's own sessions (ACP `session/load`): what the agent replays
    /// is reported on `events` as it comes (its user messages as prompts), and prompts go to
    /// that session from then on. Answers its title (the first line of its first user message,
    /// empty when there was none). Not supported by default.
    fn load<'a>(
        &'a self,
        id: &'a str,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<String, ConversationError>> {
        match self.decorates() {
            Some(inner) => inner.load(id, events, cancel),
            None => Box::pin(async { Err(self.unsupported("load an agent's session")) }),
        }
    }

    /// Continues one of the agent's own sessions without its replay (ACP `session/resume`),
    /// for a caller that shows the conversation itself (our saved file of it): prompts go to
    /// that session from then on. Unsupported where the agent does not offer it (the caller
    /// loads it instead) and by default.
    fn resume_agent_session<'a>(
        &'a self,
        id: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        match self.decorates() {
            Some(inner) => inner.resume_agent_session(id, cancel),
            None => Box::pin(async { Err(self.unsupported("resume an agent's session")) }),
        }
    }

    /// The model's view of the conversation from its `from`-th message on, as the next request
    /// would send it; None (the default) for a conversation whose history is not ours (an
    /// external agent's).
    fn model_view(&self, from: usize) -> BoxFuture<'_, Option<Vec<Message>>> {
        match self.decorates() {
            Some(inner) => inner.model_view(from),
            None => Box::pin(async { None }),
        }
    }

    /// How many prompts its history holds (what the next prompt's number follows); None (the
    /// default) for a conversation whose history is not ours (an external agent's).
    fn prompts(&self) -> BoxFuture<'_, Option<usize>> {
        match self.decorates() {
            Some(inner) => inner.prompts(),
            None => Box::pin(async { None }),
        }
    }

    /// The id of the saved conversation it is (`20261201-123456-ab12`), once it has one: for
    /// what is kept beside a conversation (checkpoints). None (the default) when it is not
    /// saved.
    fn id(&self) -> Option<String> {
        self.decorates().and_then(|inner| inner.id())
    }

    /// The id a prompt about to run will be saved under: a saved conversation that has no file
    /// yet opens it now, so what is kept beside the prompt (its checkpoint) can name it before
    /// the prompt runs. The same as [`Conversation::id`] by default.
    fn id_for_prompt(&self) -> Option<String> {
        match self.decorates() {
            Some(inner) => inner.id_for_prompt(),
            None => self.id(),
        }
    }

    /// Tells it how a question of its turn was answered (`note` is what the tool row shows),
    /// for the record. Nothing by default.
    fn decided(&self, tool: &str, decision: &Decision, note: &str) {
        if let Some(inner) = self.decorates() {
            inner.decided(tool, decision, note);
        }
    }

    /// The person named it `title` (`:Agent name`): what its saved file is listed as from now
    /// on. Nothing by default.
    fn named(&self, title: &str) {
        if let Some(inner) = self.decorates() {
            inner.named(title);
        }
    }

    /// Goes back to before its `turn`-th prompt (counting from 1): that prompt and all after it
    /// are forgotten, so the next request no longer carries them. The built-in one can; not
    /// supported by default.
    fn rewind(&self, turn: usize) -> BoxFuture<'_, Result<(), ConversationError>> {
        match self.decorates() {
            Some(inner) => inner.rewind(turn),
            None => Box::pin(async { Err(self.unsupported("rewind")) }),
        }
    }

    /// Starts a new branch before its `turn`-th prompt (`:help agent-branches`): the history is
    /// cut there as a rewind cuts it, and the branch cut is kept to switch back to. Answers the
    /// saved conversation as it is now, to draw the chat from. A saved built-in conversation
    /// can; not supported by default.
    fn branch(&self, turn: usize) -> BoxFuture<'_, Result<saved::Conversation, ConversationError>> {
        match self.decorates() {
            Some(inner) => inner.branch(turn),
            None => Box::pin(async { Err(self.unsupported("keep branches")) }),
        }
    }

    /// Switches, at its `turn`-th prompt, to the branch `step` places after the current one
    /// (before it when negative), as that branch was left: the history becomes that branch's.
    /// Answers the saved conversation as it is now. Not supported by default.
    fn switch_branch(
        &self,
        turn: usize,
        step: i64,
    ) -> BoxFuture<'_, Result<saved::Conversation, ConversationError>> {
        match self.decorates() {
            Some(inner) => inner.switch_branch(turn, step),
            None => Box::pin(async { Err(self.unsupported("keep branches")) }),
        }
    }

    /// The prompts of its current branch that have other branches; None (the default) when it
    /// never branched or is not saved.
    fn branches(&self) -> BoxFuture<'_, Option<Vec<saved::BranchAt>>> {
        match self.decorates() {
            Some(inner) => inner.branches(),
            None => Box::pin(async { None }),
        }
    }

    /// Its history becomes `saved`'s current branch (the model's view there, its
    /// compactions); unlike a resume, the session's grants and what it cost stay. The built-in
    /// one can; not supported by default.
    fn follow<'a>(
        &'a self,
        saved: &'a saved::Conversation,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        match self.decorates() {
            Some(inner) => inner.follow(saved),
            None => Box::pin(async { Err(self.unsupported("keep branches")) }),
        }
    }

    /// Compacts now (`:Agent compact`): the older part of what the model is sent is replaced by
    /// a summary it writes, reported as a `Compacted` event on `events`. The built-in one can;
    /// not supported by default.
    fn compact<'a>(
        &'a self,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        match self.decorates() {
            Some(inner) => inner.compact(events, cancel),
            None => Box::pin(async { Err(self.unsupported("compact its conversation")) }),
        }
    }

    /// Sends `model` from its next prompt on (`:Agent model`), even while a turn runs. The
    /// built-in one can; an external agent chooses its own (its config options). Not supported
    /// by default.
    fn switch_model(&self, model: &str) -> Result<(), ConversationError> {
        match self.decorates() {
            Some(inner) => inner.switch_model(model),
            None => Err(self.unsupported("switch the model")),
        }
    }

    /// `:Agent stop` beyond the running turn: kills what the conversation still runs (an
    /// external agent's terminals, which outlive the turn that made them). Nothing by default.
    fn stop(&self) {
        if let Some(inner) = self.decorates() {
            inner.stop();
        }
    }

    /// Stops whatever it runs (an external agent's process tree) once the front end lets go of
    /// it. A turn still holding it keeps it until the turn ends. Nothing by default.
    fn end(self: Arc<Self>) -> BoxFuture<'static, ()> {
        match self.decorates() {
            Some(inner) => inner.clone().end(),
            None => Box::pin(async {}),
        }
    }

    /// What it does beyond the common interface as an external agent's session (its own
    /// sessions, modes and options): an [`AgentSessions`] when it is one. None by default.
    fn agent(&self) -> Option<&dyn AgentSessions> {
        self.decorates().and_then(|inner| inner.agent())
    }

    /// The error for an operation this conversation does not have.
    fn unsupported(&self, what: &'static str) -> ConversationError {
        ConversationError::Unsupported {
            name: self.name().to_string(),
            what,
        }
    }
}

/// What [`AgentSessions::choose`] chooses.
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

/// What an external agent's session offers beyond [`Conversation`] ([`Conversation::agent`]):
/// the sessions the agent keeps itself, its id for the one prompts go to, and its modes and
/// options.
pub trait AgentSessions: Send + Sync {
    /// The sessions the agent keeps itself (ACP `session/list`), for the resume list; none for
    /// a conversation that keeps none or does not list them.
    fn agent_sessions(&self) -> BoxFuture<'_, Result<Vec<AgentSession>, ConversationError>>;

    /// The external agent's own id for the session prompts go to, when the agent can load it
    /// again (ACP `loadSession`): what a saved conversation notes to be resumed through it.
    fn agent_session_id(&self) -> Option<String>;

    /// Chooses one of the modes or config options an external agent offers (`:Agent mode`,
    /// `:Agent option`, `:Agent model`); the new state is reported as an event once the agent
    /// has taken it. The built-in one has none.
    fn choose(&self, choice: Choice) -> BoxFuture<'_, Result<(), ConversationError>>;

    /// Asks `question` apart from the conversation (`:Agent btw`), the answer's text sent on
    /// `text` as it comes: an agent's in a fork of its session. Not supported by default.
    fn aside<'a>(
        &'a self,
        _question: &'a str,
        _text: tokio::sync::mpsc::UnboundedSender<String>,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async {
            Err(ConversationError::Refused(
                "this agent cannot be asked a side question".into(),
            ))
        })
    }

    /// Deletes the agent's own session `session` (ACP `session/delete`). Not supported by
    /// default.
    fn delete<'a>(&'a self, _session: &'a str) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async {
            Err(ConversationError::Refused(
                "this agent's sessions cannot be deleted from here".into(),
            ))
        })
    }

    /// Forks the agent's session (ACP `session/fork`): the agent's id for the new one, holding
    /// this one's history, to load in a conversation of its own. Not supported by default.
    fn fork(&self) -> BoxFuture<'_, Result<String, ConversationError>> {
        Box::pin(async {
            Err(ConversationError::Refused(
                "this agent's sessions cannot be forked".into(),
            ))
        })
    }
}

/// The [`AgentSessions`] operations on any conversation: what a conversation that is not an
/// external agent's session answers (no sessions of its own, no agent id, no modes).
impl dyn Conversation + '_ {
    /// The agent's own sessions ([`AgentSessions::agent_sessions`]); none for a conversation
    /// that keeps none.
    pub fn agent_sessions(&self) -> BoxFuture<'_, Result<Vec<AgentSession>, ConversationError>> {
        match self.agent() {
            Some(agent) => agent.agent_sessions(),
            None => Box::pin(async { Ok(Vec::new()) }),
        }
    }

    /// The agent's id for its session ([`AgentSessions::agent_session_id`]).
    pub fn agent_session_id(&self) -> Option<String> {
        self.agent().and_then(|agent| agent.agent_session_id())
    }

    /// Chooses a mode or an option ([`AgentSessions::choose`]); unsupported but for an agent.
    pub fn choose(&self, choice: Choice) -> BoxFuture<'_, Result<(), ConversationError>> {
        match self.agent() {
            Some(agent) => agent.choose(choice),
            None => Box::pin(async { Err(self.unsupported("choose a mode or an option")) }),
        }
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
