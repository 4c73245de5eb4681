//! The ACP client: drives an external agent (Claude Code, Gemini CLI, Codex, opencode, ...) over
//! the Agent Client Protocol from the same UI as the built-in turn loop (SPEC section 5).
//!
//! [`connect`] starts the agent in the workspace, as the root of its own process tree
//! (`transport.rs`), initializes it and opens a session; [`AcpSession::prompt`] runs one turn and
//! streams `session/update` to the front end as [`AcpEvent`]s (`update.rs`);
//! [`AcpSession::shutdown`] ends it. `AcpSession` is a [`crate::conversation::Conversation`], so a
//! front end drives it as it drives the built-in agent. The agent calls back for file reads and writes (`fs.rs`, through the one path check)
//! and for permission (`permission.rs`, through the front end's picker), and runs commands
//! through us (`terminal.rs`, through our gate and process trees); what it lets a person choose
//! (modes, config options) is `choices.rs`. JSON-RPC itself is the
//! `agent-client-protocol` crate's.
//!
//! That crate runs the handlers of incoming messages one at a time, in order, in one dispatch
//! loop. A handler that waits for something the loop must deliver deadlocks it, so a permission
//! request, which waits for a person, is answered from a spawned task through its responder.
//! Session updates are handled in the loop, which keeps them in order with the prompt's answer.

// The layers below, where the modules of this crate find them.
use agent_nvim_conversation as conversation;
use agent_nvim_core::{
    approval, checkpoint, editor, external, permissions, process, reaper, sandbox, tools, workspace,
};
use agent_nvim_text::{diff, text};

mod attached;
mod choices;
pub mod elicit;
#[cfg(any(test, feature = "test-support"))]
pub mod fake_host;
mod fs;
mod inflight;
mod load;
pub mod mcp;
mod outside;
mod permission;
mod terminal;
mod transport;
mod update;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AudioContent, CancelNotification, ClientCapabilities, ContentBlock, FileSystemCapabilities,
    ImageContent, Implementation, InitializeRequest, NewSessionRequest, PromptRequest,
    ReadTextFileRequest, ReadTextFileResponse, SessionId, TextContent, WriteTextFileRequest,
    WriteTextFileResponse,
};
use agent_client_protocol::v1::{ConnectionTo, Dispatch, Responder};
use agent_client_protocol::{
    Agent, Client, ErrorCode, HandleDispatchFrom, Handled, UntypedMessage,
};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::checkpoint::{Checkpoints, Kind};
use crate::conversation::{Conversation, Events};
use crate::editor::Editor;
use crate::workspace::Workspace;
use agent_nvim_vocab::events::{Event, Outcome};
use transport::Process;
use update::Tools;

pub use choices::{ConfigOption, Offered};
pub use load::{AgentSession, Offers, SessionsError};
pub use terminal::TerminalSettings;

/// How long [`connect`] waits for initialize and session/new unless told otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long shutdown waits for the agent to exit after its stdin closes, before killing it.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long shutdown lets the connection flush what is queued before dropping it.
const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// How long a cancelled prompt waits for the agent to answer it (stop reason `cancelled`).
const CANCEL_GRACE: Duration = Duration::from_secs(10);
/// The least time `authenticate` is given: the person may be logging in in a browser.
const LOGIN_GRACE: Duration = Duration::from_secs(300);
/// How long the agent has to answer `session/close` at the end.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// How long a closed connection waits to learn how the agent exited.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// What the ACP client needs from its front end (Neovim implements it; tests use a fake).
pub trait AcpHost: Send + Sync {
    /// Something to show in the chat, in order.
    fn event(&self, event: AcpEvent);
    /// Asks the user to pick one of the agent's options; resolves to the picked option's id, or
    /// None when the question was dismissed or cannot be shown. Called from a spawned task, never
    /// from the dispatch loop, and dropped (the question should close) when the turn is cancelled.
    fn ask_permission(&self, request: PermissionAsk) -> BoxFuture<'_, Option<Picked>>;
    /// Asks the person what the agent's `elicitation/create` asks (a form to fill in, a URL to
    /// open); resolves to their answer, or None when it was dismissed or cannot be shown (the
    /// agent is answered `cancel`). Like a permission question it is dropped (and should close)
    /// when its turn is cancelled or the agent says it is complete.
    fn elicit(&self, asked: elicit::Elicitation) -> BoxFuture<'_, Option<elicit::Elicited>>;
    /// The text of the buffer holding `path` (absolute, resolved), when one is loaded.
    fn buffer_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Option<String>>;
    /// Unsaved-changes check before a write, and reload after it.
    fn editor(&self) -> &dyn Editor;
    /// Whether someone can be asked (false: permission is answered `cancelled` unless auto_approve).
    fn can_ask(&self) -> BoxFuture<'_, bool>;
}

/// What an ACP session shows, in order: a conversation's events
/// ([`agent_nvim_vocab::conversation::ConversationEvent`]).
pub use agent_nvim_vocab::conversation::ConversationEvent as AcpEvent;

pub use agent_nvim_vocab::conversation::{
    AgentCommand, AgentCost, AgentUpdate, AuthChoice, Location, OutsideFile, PlanEntry,
};

/// The person's answer to a permission question: the option picked, and their own version of
/// the agent's edit when they edited it before allowing ([`PermissionAsk::edit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picked {
    /// The agent's id of the option picked.
    pub option: String,
    /// The whole file as the person wants it written, instead of the agent's `newText`.
    pub edited: Option<String>,
}

/// An agent's proposed edit a person may change before allowing: offered only once the agent
/// has written through fs/write_text_file in this connection, since only then is the person's
/// version sure to be what gets written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentEdit {
    /// The file, resolved beneath the root.
    #[serde(skip)]
    pub path: PathBuf,
    /// Relative to the root, as shown.
    pub rel: String,
    /// The file as the agent says it is (`oldText`); None for a new file.
    pub now: Option<String>,
    /// The whole file as the agent would write it (`newText`).
    pub proposed: String,
}

/// A permission question, with the agent's own options.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PermissionAsk {
    /// The tool call it is about (its row in the chat).
    pub tool_call_id: String,
    /// The tool call's title (`Edit src/a.rs`, `Run cargo test`).
    pub title: String,
    /// The agent's options, in its order.
    pub options: Vec<PermissionChoice>,
    /// A unified diff for the preview, when the call carries one.
    pub diff: Option<String>,
    /// The command line, for a shell tool.
    pub command: Option<String>,
    /// Where the command runs, when it is not the workspace root's (a terminal's `cwd`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// How long the command may run, in seconds, when we run it (a terminal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
    /// The edit a person may change first ("Edit before allowing"); None: not offered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edit: Option<AgentEdit>,
}

/// One of the agent's permission options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PermissionChoice {
    /// The agent's id for it: echoed back when picked; never interpreted.
    pub id: String,
    /// The agent's label, to show.
    pub name: String,
    /// `allow_once` | `allow_always` | `reject_once` | `reject_always`.
    pub kind: String,
}

/// How to start an agent.
#[derive(Debug, Clone)]
pub struct AcpSpec {
    /// What to call it in messages (`claude`, or the user's name for a configured command).
    pub name: String,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// The agent's working directory and the root its file access is confined to.
    pub workspace: Workspace,
    /// Answer permission requests with allow_always / allow_once without asking.
    pub auto_approve: bool,
    /// How long initialize and session/new may take.
    pub connect_timeout: Duration,
    /// The workspace's checkpoints: taken before each permission answer and each
    /// fs/write_text_file, so the agent's changes can be rewound. None: off.
    pub checkpoints: Option<Checkpoints>,
    /// The sandbox the agent and everything it runs start in (`acp.agents.NAME.sandbox`);
    /// None: none.
    pub sandbox: Option<crate::sandbox::Policy>,
    /// How the agent's terminals run (timeout, shell, `pass_env`, the person's rules).
    pub terminal: TerminalSettings,
    /// Sees every JSON-RPC line sent and received (the conformance suite records the traffic
    /// with it); None: nothing does. The plugin never sets it: lines hold file contents.
    pub tap: Option<Tap>,
    /// More roots for the session (`acp.agents.NAME.directories`): sent as
    /// `additionalDirectories` where the agent takes them, and open to its fs requests through
    /// each one's own path check, read-only unless writable.
    pub directories: Vec<ExtraRoot>,
    /// MCP servers for the agent's sessions (`mcp_servers`, in setup and per agent): sent in
    /// session/new, load, resume and fork, a remote one only where the agent takes its
    /// transport (`mcp.rs`).
    pub mcp_servers: Vec<mcp::McpServer>,
}

/// Which way a line went, for a [`Tap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// From us to the agent.
    Sent,
    /// From the agent to us.
    Received,
}

/// What a [`Tap`] calls with each line.
pub type TapFn = dyn Fn(Flow, &str) + Send + Sync;

/// See [`AcpSpec::tap`].
#[derive(Clone)]
pub struct Tap(pub Arc<TapFn>);

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tap")
    }
}

/// A root beside the workspace, for an external agent's session.
#[derive(Debug, Clone)]
pub struct ExtraRoot {
    /// The directory, checked as a workspace of its own.
    pub workspace: Workspace,
    /// Its files may be written through the client.
    pub writable: bool,
}

impl AcpSpec {
    /// A spec with no extra environment, asking for permission, and the default timeout.
    pub fn new(name: impl Into<String>, command: Vec<String>, workspace: Workspace) -> Self {
        AcpSpec {
            name: name.into(),
            command,
            env: Vec::new(),
            workspace,
            auto_approve: false,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            checkpoints: None,
            sandbox: None,
            terminal: TerminalSettings::default(),
            directories: Vec::new(),
            mcp_servers: Vec::new(),
            tap: None,
        }
    }
}

/// Why a mode, an option, a sign-in or a sign-out was not taken ([`AcpSession::choose`]): what
/// went wrong and what can be chosen, as the person reads it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ChoiceError(pub String);

/// Why [`connect`] gave up. The texts are what the user reads after `agent: `, which the front
/// end adds where it shows them.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The spec has an empty command.
    #[error("no command to start '{name}'; set the agent's command")]
    NoCommand { name: String },
    /// The program could not be started.
    #[error("could not start '{program}': {source} — is it installed and on PATH?")]
    NotStarted {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// Its sandbox (`acp.agents.NAME.sandbox`) could not be set up, so it was not started.
    #[error("could not start '{program}' in the sandbox: {source}")]
    Sandbox {
        program: String,
        #[source]
        source: crate::sandbox::SandboxError,
    },
    /// It started without the pipes it was given.
    #[error("could not start '{program}': its stdio is missing")]
    NoPipes { program: String },
    /// The JSON-RPC connection never came up.
    #[error("{name}: the connection did not start")]
    NoConnection { name: String },
    /// It asked for a login during `step` (JSON-RPC error `auth_required`).
    #[error(
        "{name} needs you to log in first ({step}: {message}); log in with the agent's own \
         command, then start it again"
    )]
    LoginRequired {
        name: String,
        step: &'static str,
        message: String,
    },
    /// It answered `step` with a JSON-RPC error.
    #[error("{name} refused {step}: {message} ({code})")]
    Refused {
        name: String,
        step: &'static str,
        message: String,
        code: i32,
    },
    /// It did not get through `step` within the connect timeout.
    #[error("{name} did not {step} within {secs} s; is `{command}` an ACP agent?")]
    TimedOut {
        name: String,
        step: &'static str,
        secs: f64,
        command: String,
    },
    /// It exited or closed its output during setup: how ([`AcpSession::ended`]).
    #[error("{0}")]
    Ended(String),
}

/// The preset agents a user can name (SPEC section 5): the one list, which the plugin reads too
/// (`:Agent acp` completion), so it lives beside the Lua: `[{ "name": .., "cmd": [..] }]`.
const PRESETS: &str = include_str!("../../../lua/agent/acp_presets.json");

/// One entry of [`PRESETS`].
#[derive(Deserialize)]
struct Preset {
    name: String,
    cmd: Vec<String>,
}

fn presets() -> Vec<Preset> {
    // The file is part of the binary; a test parses it, so this never comes out empty.
    serde_json::from_str(PRESETS).unwrap_or_default()
}

/// The command of a preset agent a user can name, or None.
pub fn preset(name: &str) -> Option<Vec<String>> {
    presets()
        .into_iter()
        .find(|preset| preset.name == name)
        .map(|preset| preset.cmd)
}

/// The preset names, in the list's order.
pub fn preset_names() -> Vec<String> {
    presets().into_iter().map(|preset| preset.name).collect()
}

/// `session/update`, kept as JSON (see `update.rs` for why).
#[derive(Debug, Clone, Serialize, Deserialize, agent_client_protocol::JsonRpcNotification)]
#[notification(method = "session/update")]
#[serde(transparent)]
struct SessionUpdate(Value);

/// `session/request_permission`, kept as JSON and answered with JSON.
#[derive(Debug, Clone, Serialize, Deserialize, agent_client_protocol::JsonRpcRequest)]
#[request(method = "session/request_permission", response = Value)]
#[serde(transparent)]
struct PermissionRequest(Value);

/// `session/prompt`, its answer kept as JSON: an unknown stop reason must not fail the turn.
#[derive(Debug, Clone, Serialize, Deserialize, agent_client_protocol::JsonRpcRequest)]
#[request(method = "session/prompt", response = Value)]
#[serde(transparent)]
struct Prompt(PromptRequest);

/// Declares a client request the agent sends, kept as JSON and answered with JSON.
macro_rules! json_request {
    ($name:ident, $method:literal) => {
        #[derive(Debug, Clone, Serialize, Deserialize, agent_client_protocol::JsonRpcRequest)]
        #[request(method = $method, response = Value)]
        #[serde(transparent)]
        struct $name(Value);
    };
}

json_request!(NewSession, "session/new");
json_request!(Authenticate, "authenticate");
json_request!(Logout, "logout");
json_request!(CloseSession, "session/close");
json_request!(ForkSession, "session/fork");
json_request!(DeleteSession, "session/delete");
json_request!(ElicitationCreate, "elicitation/create");

/// The most elicitations of one agent open at once; more are answered `cancel`.
const MAX_OPEN_ELICITATIONS: usize = 4;

/// One open elicitation counted while it is asked ([`MAX_OPEN_ELICITATIONS`]).
struct OpenQuestion<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> OpenQuestion<'a> {
    fn enter(count: &'a std::sync::atomic::AtomicUsize) -> Option<Self> {
        use std::sync::atomic::Ordering;
        count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_OPEN_ELICITATIONS).then_some(n + 1)
            })
            .ok()
            .map(|_| OpenQuestion(count))
    }
}

impl Drop for OpenQuestion<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `elicitation/complete`, kept as JSON.
#[derive(Debug, Clone, Serialize, Deserialize, agent_client_protocol::JsonRpcNotification)]
#[notification(method = "elicitation/complete")]
#[serde(transparent)]
struct ElicitationComplete(Value);

/// What a side question asked of an agent starts with.
const ASIDE_PREFACE: &str = "[A side question, asked apart from the conversation: answer it from what you know of the conversation, briefly. Do not use tools or change anything.]";
json_request!(SetMode, "session/set_mode");
json_request!(SetConfigOption, "session/set_config_option");
json_request!(TerminalCreate, "terminal/create");
json_request!(TerminalOutput, "terminal/output");
json_request!(TerminalWait, "terminal/wait_for_exit");
json_request!(TerminalKill, "terminal/kill");
json_request!(TerminalRelease, "terminal/release");

/// Sends a handler's answer: its result, or its error.
fn answer(responder: Responder<Value>, result: Result<Value, agent_client_protocol::Error>) {
    let sent = match result {
        Ok(value) => responder.respond(value),
        Err(err) => responder.respond_with_error(err),
    };
    if let Err(err) = sent {
        tracing::debug!(%err, "an answer to the agent was not delivered");
    }
}

/// What the handlers share with the session.
struct Shared {
    /// What starting the agent gave: the authority to write files and start terminals for it.
    authority: external::AgentAuthority,
    name: String,
    workspace: Workspace,
    auto_approve: bool,
    host: Arc<dyn AcpHost>,
    /// The current turn's token: cancelling it answers its open permission questions `cancelled`.
    turn: Mutex<CancellationToken>,
    tools: Mutex<Tools>,
    /// Where the running turn reports ([`Conversation::prompt`]'s stream); between turns, and
    /// for a turn run by [`AcpSession::prompt`] itself, the host's [`AcpHost::event`].
    reports: Mutex<Option<Events>>,
    /// See [`AcpSpec::checkpoints`].
    checkpoints: Option<Checkpoints>,
    /// While a `session/load` replays a session: the user's message being gathered
    /// (`load.rs`). None otherwise, when a user message chunk is not shown.
    replay: Mutex<Option<load::Replay>>,
    /// Whether the agent has written through fs/write_text_file (then "Edit before allowing"
    /// is offered on its edits).
    writes_through_client: std::sync::atomic::AtomicBool,
    /// Edits the person changed before allowing, by file: the agent's `newText`, and what is
    /// written instead when the agent writes exactly that.
    edited: Mutex<std::collections::HashMap<PathBuf, (AgentEdit, String)>>,
    /// What the agent is told at the start of its next prompt (the protocol's permission answer
    /// carries no text): the person's changes to its edits.
    notes: Mutex<Vec<String>>,
    /// The session's terminals (`terminal.rs`), shared with [`Tools`] for the rows showing them.
    terminals: Arc<Mutex<terminal::Terminals>>,
    /// Command lines the person allowed through the agent's permission questions.
    allowances: Mutex<Vec<terminal::Allowance>>,
    /// See [`AcpSpec::terminal`].
    terminal: TerminalSettings,
    /// See [`AcpSpec::sandbox`]: the agent's terminals run in it too.
    sandbox: Option<crate::sandbox::Policy>,
    /// The session's modes and config options (`choices.rs`).
    choices: Mutex<choices::Choices>,
    /// See [`AcpSpec::directories`].
    extra: Vec<ExtraRoot>,
    /// A side question's forked session, while it is answered ([`AcpSession::aside`]): its
    /// id, and where its text goes. Its updates go there only; it may not write, run or be
    /// allowed anything.
    side: Mutex<Option<(String, tokio::sync::mpsc::UnboundedSender<String>)>>,
    /// What the running turn changed by itself, outside our checks (`outside.rs`).
    outside: tokio::sync::Mutex<outside::Watch>,
    /// How many elicitations are being asked now ([`MAX_OPEN_ELICITATIONS`] at most).
    open_elicitations: std::sync::atomic::AtomicUsize,
    /// The URL elicitations being asked, by the agent's id: `elicitation/complete` cancels one
    /// (or, when it came first, the question about to be asked: a token already cancelled).
    elicitations: Mutex<std::collections::HashMap<String, CancellationToken>>,
    /// Our requests the agent has not answered yet: a request-scoped elicitation belongs to one.
    inflight: Arc<inflight::InFlight>,
}

impl Shared {
    /// Whether `params` (a request's or notification's) are of the side question's session.
    fn of_side(&self, params: &Value) -> bool {
        let session = params.get("sessionId").and_then(Value::as_str);
        let side = self.side.lock().unwrap_or_else(PoisonError::into_inner);
        matches!((session, side.as_ref()), (Some(s), Some((id, _))) if s == id)
    }

    /// A side question's update: its text goes to the float; nothing else is shown.
    fn side_update(&self, update: &Value) {
        let side = self.side.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((_, text)) = side.as_ref() else {
            return;
        };
        if update["sessionUpdate"] == "agent_message_chunk" && update["content"]["type"] == "text" {
            if let Some(piece) = update["content"]["text"].as_str() {
                let _ = text.send(piece.to_string());
            }
        }
    }

    fn tools(&self) -> MutexGuard<'_, Tools> {
        self.tools.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn turn(&self) -> CancellationToken {
        self.turn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The agent's `path` relative to the workspace root, as a checkpoint names it; None for
    /// one elsewhere (an extra directory is in no checkpoint of the workspace).
    fn relative(&self, path: &str) -> Option<PathBuf> {
        let resolved = self.workspace.resolve_literal(path).ok()?;
        resolved
            .path
            .strip_prefix(self.workspace.root())
            .ok()
            .map(Path::to_path_buf)
    }

    /// The answer to `elicitation/create`: the person's, checked against the form; `cancel`
    /// when nobody can be asked, for a side question, when the turn it belongs to ends, or when
    /// the agent says it is complete; an error when it cannot be asked at all (a schema not
    /// known here, a URL other than http or https: the chat says why).
    async fn elicit(&self, params: &Value) -> Result<Value, agent_client_protocol::Error> {
        use elicit::{Ask, Elicited};
        if self.of_side(params) {
            return Ok(elicit::answer(&Elicited::Cancel));
        }
        let (asked, scope) = match elicit::read(&self.name, params) {
            Ok(read) => read,
            Err(why) => {
                self.report(AcpEvent::Turn(Event::Notice {
                    text: format!(
                        "{} asked for something that cannot be shown: {why}",
                        self.name
                    ),
                }));
                return Err(agent_client_protocol::Error::invalid_params().data(Value::from(why)));
            }
        };
        // A session's question ends with its turn; one about a request of ours (a sign-in
        // during session/new) when that request is answered, and is not asked once it has been
        // (or when it names none of ours).
        let ends = match scope {
            elicit::Scope::Session => self.turn(),
            elicit::Scope::Request(id) => match self.inflight.open(&id) {
                Some(answered) => answered,
                None => {
                    tracing::info!(agent = %self.name, %id, "elicitation answered `cancel`: it names no request of ours still waiting");
                    return Ok(elicit::answer(&Elicited::Cancel));
                }
            },
        };
        let can_ask = tokio::select! {
            can_ask = self.host.can_ask() => can_ask,
            () = ends.cancelled() => false,
        };
        if !can_ask {
            tracing::info!(agent = %self.name, "elicitation answered `cancel`: nobody can be asked");
            return Ok(elicit::answer(&Elicited::Cancel));
        }
        // A few questions open at once, no more: an agent cannot bury the person in floats.
        let asking = OpenQuestion::enter(&self.open_elicitations);
        if asking.is_none() {
            tracing::info!(agent = %self.name, "elicitation answered `cancel`: too many are open");
            return Ok(elicit::answer(&Elicited::Cancel));
        }
        let completed = CancellationToken::new();
        let url_id = match &asked.ask {
            Ask::Url { elicitation_id, .. } => Some(elicitation_id.clone()),
            Ask::Form { .. } => None,
        };
        if let Some(id) = &url_id {
            let mut open = self
                .elicitations
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match open.get(id) {
                // Completed before it was asked: not shown at all.
                Some(done) if done.is_cancelled() => {
                    open.remove(id);
                    return Ok(elicit::answer(&Elicited::Cancel));
                }
                _ => {
                    open.insert(id.clone(), completed.clone());
                }
            }
        }
        let fields = match &asked.ask {
            Ask::Form { fields, .. } => fields.clone(),
            Ask::Url { .. } => Vec::new(),
        };
        let answered = tokio::select! {
            answered = self.host.elicit(asked) => answered,
            () = ends.cancelled() => None,
            () = completed.cancelled() => None,
        };
        if let Some(id) = &url_id {
            self.elicitations
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(id);
        }
        // The chat's row of the answer, once it is what goes to the agent (none when the values
        // did not fit: that is said instead).
        let mut row = Some(match &answered {
            Some(Elicited::Accept(_)) if url_id.is_some() => "opened",
            Some(Elicited::Accept(_)) => "sent",
            Some(Elicited::Decline) => "declined",
            Some(Elicited::Cancel) => "cancelled",
            None => "closed unanswered",
        });
        let elicited = match answered {
            Some(Elicited::Accept(content)) if url_id.is_some() => {
                // A URL's accept carries nothing: the person agreed to open it.
                drop(content);
                Elicited::Accept(serde_json::Map::new())
            }
            Some(Elicited::Accept(content)) => match elicit::check(&fields, content) {
                Ok(checked) => Elicited::Accept(checked),
                Err(why) => {
                    tracing::warn!(%why, "an elicitation answer that does not fit its form: cancelled");
                    // Said where the person looks: what went is not what the form showed.
                    self.report(AcpEvent::Turn(Event::Notice {
                        text: format!(
                            "{}'s form was answered `cancel`: the values did not fit it ({why})",
                            self.name
                        ),
                    }));
                    row = None;
                    Elicited::Cancel
                }
            },
            Some(other) => other,
            None => Elicited::Cancel,
        };
        if let Some(row) = row {
            self.report(AcpEvent::Turn(Event::Notice {
                text: format!("{}: {row}", self.name),
            }));
        }
        Ok(elicit::answer(&elicited))
    }

    /// `elicitation/complete`: the URL question it names is closed (answered `cancel` if the
    /// person had not answered it yet).
    fn elicitation_complete(&self, params: &Value) {
        let Some(id) = params.get("elicitationId").and_then(Value::as_str) else {
            return;
        };
        let mut open = self
            .elicitations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match open.remove(id) {
            Some(token) => token.cancel(),
            // Its question may be on its way (the request is answered off the dispatch loop):
            // it finds this and is not asked. Kept bounded: past 64, the markers of questions
            // never asked (cancelled tokens) go first.
            None => {
                if open.len() >= 64 {
                    open.retain(|_, token| !token.is_cancelled());
                }
                if open.len() < 64 {
                    let done = CancellationToken::new();
                    done.cancel();
                    open.insert(id.to_string(), done);
                }
            }
        }
    }

    /// Reports what the running turn changed by itself since its checkpoint and was not listed
    /// yet (`outside.rs`).
    async fn look_outside(&self) {
        let Some(checkpoints) = &self.checkpoints else {
            return;
        };
        let update = self
            .outside
            .lock()
            .await
            .look(
                checkpoints,
                self.workspace.root(),
                &self.name,
                self.sandbox.is_some(),
            )
            .await;
        if let Some(update) = update {
            self.report(AcpEvent::Agent(update));
        }
    }

    /// The turn is over: a last look, then nothing more is looked for until the next.
    async fn end_outside(&self) {
        self.look_outside().await;
        self.outside.lock().await.end();
    }

    /// A checkpoint before the agent may change the workspace (when checkpoints are on).
    async fn checkpoint(&self, kind: Kind, label: &str) {
        if let Some(checkpoints) = &self.checkpoints {
            checkpoints.checkpoint(kind, label).await;
        }
    }

    /// What to write for the agent's fs/write_text_file of `path`: the person's version when
    /// they edited this very proposal before allowing it (or dropped some of its hunks; the
    /// note for the agent's next prompt is kept then), else the agent's `content`. Refused when
    /// the person's version waits for this file and the agent writes other content than it
    /// proposed: writing it would write what the person left out.
    fn persons_version(
        &self,
        path: &str,
        content: String,
    ) -> Result<String, agent_client_protocol::Error> {
        let Ok(resolved) = self.workspace.resolve_literal(path) else {
            return Ok(content);
        };
        let found = self
            .edited
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&resolved.path);
        let Some((edit, theirs)) = found else {
            return Ok(content);
        };
        if content != edit.proposed {
            tracing::warn!(rel = %edit.rel, "the agent wrote other content than it proposed, with the person's version waiting: refused");
            let said = format!(
                "agent: {}'s write of {} was refused: it was not the edit you allowed (you had changed it or dropped some of its hunks)",
                self.name, edit.rel
            );
            self.emit(Event::Error { message: said });
            return Err(agent_client_protocol::Error::new(
                agent_client_protocol::ErrorCode::INTERNAL_ERROR,
                format!(
                    "Refused: the user allowed a different version of this edit of {} (they changed it or dropped some of its hunks); write exactly what you proposed, or propose the edit again.",
                    edit.rel
                ),
            ));
        }
        let diff = crate::diff::unified(&edit.rel, Some(&edit.proposed), &theirs);
        if !diff.is_empty() {
            self.notes.lock().unwrap_or_else(PoisonError::into_inner).push(format!(
                "The user changed your edit of {} before it was written; their changes to your proposal:\n{diff}",
                edit.rel
            ));
        }
        Ok(theirs)
    }

    /// Which root's path check an fs request for `path` goes through: the workspace's, or an
    /// extra root's when `path` is absolute and lies in it (the deepest root that holds it). A
    /// write to a read-only extra root is refused here; anything else is the chosen root's
    /// check to refuse (a path outside every root is refused by the workspace's).
    fn workspace_for(
        &self,
        path: &str,
        write: bool,
    ) -> Result<Workspace, agent_client_protocol::Error> {
        let given = Path::new(path);
        if !given.is_absolute() || self.extra.is_empty() {
            return Ok(self.workspace.clone());
        }
        // Matched as written, component by component: a `..` in it is the chosen root's check
        // to refuse, never a way from one root to another.
        let depth = |root: &Path| given.starts_with(root).then(|| root.components().count());
        let main = depth(self.workspace.root());
        let extra = self
            .extra
            .iter()
            .filter_map(|extra| Some((depth(extra.workspace.root())?, extra)))
            .max_by_key(|(depth, _)| *depth);
        match extra {
            Some((deep, extra)) if main.is_none_or(|main| deep > main) => {
                if write && !extra.writable {
                    return Err(agent_client_protocol::Error::new(
                        ErrorCode::INVALID_PARAMS,
                        format!(
                            "Refused: '{path}' is in {}, a read-only directory of this session \
                             (acp.agents.{}.directories); it can be read, not written.",
                            extra.workspace.root().display(),
                            self.name
                        ),
                    ));
                }
                Ok(extra.workspace.clone())
            }
            _ => Ok(self.workspace.clone()),
        }
    }

    /// Takes what a session offers to choose (session/new, session/load) and shows it.
    fn offered(&self, choices: choices::Choices) {
        let events = choices.events();
        *self.choices.lock().unwrap_or_else(PoisonError::into_inner) = choices;
        for event in events {
            self.report(event);
        }
    }

    /// The choices as they are now.
    fn choices(&self) -> MutexGuard<'_, choices::Choices> {
        self.choices.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The notes for the agent's next prompt, taken.
    fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Starts a turn: a fresh token for its permission questions; an "allow once" of a command
    /// line the last turn never ran is forgotten.
    fn new_turn(&self) -> CancellationToken {
        self.forget_allowed_once();
        let token = CancellationToken::new();
        *self.turn.lock().unwrap_or_else(PoisonError::into_inner) = token.clone();
        token
    }

    fn emit(&self, event: Event) {
        self.report(AcpEvent::Turn(event));
    }

    /// Shows `event`: on the running turn's stream, else through the host.
    fn report(&self, event: AcpEvent) {
        let unsent = match &*self.reports.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(events) => events.send(event).err().map(|unsent| unsent.0),
            None => Some(event),
        };
        if let Some(event) = unsent {
            self.host.event(event);
        }
    }
}

/// A running agent with one open session.
pub struct AcpSession {
    shared: Arc<Shared>,
    cx: ConnectionTo<Agent>,
    /// The session prompts go to: the one `session/new` opened, or the one last loaded.
    session_id: Mutex<SessionId>,
    /// What the agent said it offers at initialize (`session/load`, `session/list`).
    offers: Offers,
    /// How long a `session/load` may take (the connect timeout).
    load_timeout: Duration,
    /// Dropping or firing it ends the connection (and so closes the agent's stdin).
    stop: Option<oneshot::Sender<()>>,
    driver: Option<JoinHandle<()>>,
    /// None when the agent is not a child process (tests over in-memory pipes).
    process: Option<Process>,
    /// Why the session is unusable, once it is.
    dead: Mutex<Option<String>>,
    /// How the agent lets a person log in (its initialize answer's `authMethods`).
    auth: Vec<AuthChoice>,
    /// What the agent said when it wanted a login first; None once it has one.
    needs_login: Mutex<Option<String>>,
    /// session/new's params, to open a session again after a login.
    new_params: Value,
    /// Held while a choice is sent and its answer applied: each answer carries every option as
    /// it is then, so answers applied out of order would leave an older state shown.
    choosing: tokio::sync::Mutex<()>,
}

/// Starts the agent in the workspace, initializes it (protocol 1; fs.readTextFile and
/// fs.writeTextFile, terminals, terminal logins) and opens a session at the workspace root.
///
/// Errors, as the user should read them: the command cannot be started
/// (`could not start 'gemini': ... — is it installed and on PATH?`), the agent exits or refuses
/// during setup, or it does not answer within `spec.connect_timeout`.
pub async fn connect(spec: AcpSpec, host: Arc<dyn AcpHost>) -> Result<AcpSession, ConnectError> {
    let (process, stdin, stdout) = transport::spawn(&spec).await?;
    tracing::info!(agent = %spec.name, command = ?spec.command, "started ACP agent");
    let authority = process.authority();
    start(spec, host, stdout, stdin, Some(process), authority).await
}

/// [`connect`] over any pair of streams: the agent's stdout and stdin.
async fn start<R, W>(
    spec: AcpSpec,
    host: Arc<dyn AcpHost>,
    reader: R,
    writer: W,
    process: Option<Process>,
    authority: external::AgentAuthority,
) -> Result<AcpSession, ConnectError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let terminals = Arc::new(Mutex::new(terminal::Terminals::default()));
    let shared = Arc::new(Shared {
        authority,
        name: spec.name.clone(),
        workspace: spec.workspace.clone(),
        auto_approve: spec.auto_approve,
        host,
        // Cancelled until a prompt starts a turn: nothing is asked or run outside one.
        turn: Mutex::new({
            let outside = CancellationToken::new();
            outside.cancel();
            outside
        }),
        tools: Mutex::new(Tools::showing(terminals.clone())),
        side: Mutex::new(None),
        outside: tokio::sync::Mutex::new(outside::Watch::default()),
        elicitations: Mutex::new(std::collections::HashMap::new()),
        open_elicitations: std::sync::atomic::AtomicUsize::new(0),
        inflight: Arc::default(),
        reports: Mutex::new(None),
        checkpoints: spec.checkpoints.clone(),
        replay: Mutex::new(None),
        writes_through_client: std::sync::atomic::AtomicBool::new(false),
        edited: Mutex::new(std::collections::HashMap::new()),
        notes: Mutex::new(Vec::new()),
        terminals,
        allowances: Mutex::new(Vec::new()),
        terminal: spec.terminal.clone(),
        sandbox: spec.sandbox.clone(),
        choices: Mutex::new(choices::Choices::default()),
        // One inside the workspace could not stay read-only: the workspace's paths reach it.
        extra: spec
            .directories
            .iter()
            .filter(|extra| {
                let inside = extra.workspace.root().starts_with(spec.workspace.root());
                if inside {
                    tracing::warn!(dir = %extra.workspace.root().display(), "left out a directory inside the workspace");
                }
                !inside
            })
            .cloned()
            .collect(),
    });
    let lines = transport::lines(
        reader,
        writer,
        spec.name.clone(),
        spec.tap.clone(),
        shared.inflight.clone(),
    );
    let (cx_tx, cx_rx) = oneshot::channel();
    let (stop, stopped) = oneshot::channel::<()>();
    let builder = client(shared.clone());
    let name = spec.name.clone();
    let driver = tokio::spawn(async move {
        let result = builder
            .connect_with(lines, async move |cx: ConnectionTo<Agent>| {
                let _ = cx_tx.send(cx);
                // Until the session is shut down or dropped.
                let _ = stopped.await;
                Ok(())
            })
            .await;
        match result {
            Ok(()) => tracing::debug!(agent = %name, "ACP connection closed"),
            Err(err) => tracing::info!(agent = %name, %err, "ACP connection ended"),
        }
    });
    let mut session = AcpSession {
        shared,
        cx: match cx_rx.await {
            Ok(cx) => cx,
            Err(_) => {
                return Err(ConnectError::NoConnection {
                    name: spec.name.clone(),
                })
            }
        },
        session_id: Mutex::new(SessionId::new("")),
        offers: Offers::default(),
        load_timeout: spec.connect_timeout,
        stop: Some(stop),
        driver: Some(driver),
        process,
        dead: Mutex::new(None),
        auth: Vec::new(),
        needs_login: Mutex::new(None),
        new_params: serde_json::to_value(NewSessionRequest::new(spec.workspace.root()))
            .unwrap_or_default(),
        choosing: tokio::sync::Mutex::new(()),
    };
    let initialized = std::sync::atomic::AtomicBool::new(false);
    // What initialize said, for a session/new that wants a login first, and session/new's
    // params.
    let said: Mutex<Option<(Offers, Vec<AuthChoice>, Value)>> = Mutex::new(None);
    let setup = async {
        let init = InitializeRequest::new(ProtocolVersion::V1)
            .client_capabilities(
                ClientCapabilities::new()
                    .fs(FileSystemCapabilities::new()
                        .read_text_file(true)
                        .write_text_file(true))
                    // terminal/*: run through our gate, process trees and sandbox.
                    .terminal(true)
                    // A terminal login method: Neovim runs the agent's command in a terminal.
                    .auth(agent_client_protocol::v1::schema::AuthCapabilities::new().terminal(true))
                    // `notice` updates: shown as a chat row and a notification.
                    .session(
                        agent_client_protocol::v1::schema::ClientSessionCapabilities::new()
                            .notices(agent_client_protocol::v1::schema::NoticeCapabilities::new())
                            // Boolean config options: an on/off entry in `:Agent option`.
                            .config_options(
                                agent_client_protocol::v1::schema::SessionConfigOptionsCapabilities::new()
                                    .boolean(
                                        agent_client_protocol::v1::schema::BooleanConfigOptionCapabilities::new(),
                                    ),
                            )
                            // compaction updates: a `compacted` row like the built-in agent's.
                            .compaction(
                                agent_client_protocol::v1::schema::CompactionCapabilities::new(),
                            ),
                    )
                    // plan_update and plan_removed (unstable): several plans, each its own row.
                    .plan(agent_client_protocol::v1::schema::PlanCapabilities::new())
                    // elicitation/create: a form in a float, or a URL opened once allowed.
                    .elicitation(
                        agent_client_protocol::v1::schema::ElicitationCapabilities::new()
                            .form(
                                agent_client_protocol::v1::schema::ElicitationFormCapabilities::new(
                                ),
                            )
                            .url(
                                agent_client_protocol::v1::schema::ElicitationUrlCapabilities::new(
                                ),
                            ),
                    ),
            )
            .client_info(Implementation::new("agent.nvim", env!("CARGO_PKG_VERSION")));
        let info = session
            .cx
            .send_request(init)
            .block_task()
            .await
            .map_err(|err| ("initialize", err))?;
        tracing::info!(agent = %spec.name, info = ?info.agent_info, "ACP agent initialized");
        initialized.store(true, std::sync::atomic::Ordering::SeqCst);
        let offers = Offers::of(&info.agent_capabilities);
        let mut params = session.new_params.clone();
        let (servers, left) = mcp::for_agent(&spec.mcp_servers, offers.mcp);
        params["mcpServers"] = servers;
        if !left.is_empty() {
            // Said once, in the chat, as the session opens.
            session.shared.report(AcpEvent::Turn(Event::Notice {
                text: mcp::left_out_message(&spec.name, &left),
            }));
        }
        if offers.directories && !spec.directories.is_empty() {
            params["additionalDirectories"] = session
                .shared
                .extra
                .iter()
                .map(|extra| Value::from(extra.workspace.root().display().to_string()))
                .collect();
        }
        *said.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((offers, auth_choices(&info.auth_methods), params.clone()));
        let opened = session
            .cx
            .send_request(NewSession(params))
            .block_task()
            .await
            .map_err(|err| ("session/new", err))?;
        Ok::<_, (&str, agent_client_protocol::Error)>((opened, offers))
    };
    let outcome = tokio::time::timeout(spec.connect_timeout, setup).await;
    if let Some((offers, auth, params)) = said.into_inner().unwrap_or_else(PoisonError::into_inner)
    {
        session.offers = offers;
        session.auth = auth;
        session.new_params = params;
    }
    let failure = match outcome {
        Ok(Ok((opened, _))) => match session.opened(&opened) {
            Ok(()) => return Ok(session),
            Err(message) => ConnectError::Refused {
                name: spec.name,
                step: "session/new",
                message,
                code: ErrorCode::INVALID_PARAMS.value(),
            },
        },
        // It wants a login and says how: connected, waiting for :Agent login.
        Ok(Err(("session/new", err)))
            if err.code == ErrorCode::AUTH_REQUIRED && !session.auth.is_empty() =>
        {
            session.wants_login(err.message);
            return Ok(session);
        }
        Ok(Err((_, err))) if closed(&err) => ConnectError::Ended(session.ended().await),
        Ok(Err((step, err))) if err.code == ErrorCode::AUTH_REQUIRED => {
            ConnectError::LoginRequired {
                name: spec.name,
                step,
                message: err.message,
            }
        }
        Ok(Err((step, err))) => ConnectError::Refused {
            name: spec.name,
            step,
            message: err.message,
            code: err.code.value(),
        },
        Err(_) => ConnectError::TimedOut {
            name: spec.name,
            step: if initialized.load(std::sync::atomic::Ordering::SeqCst) {
                "open a session"
            } else {
                "answer initialize"
            },
            secs: spec.connect_timeout.as_secs_f64(),
            command: spec.command.join(" "),
        },
    };
    session.kill();
    Err(failure)
}

/// The client side of the connection: what we answer and how.
fn client(
    shared: Arc<Shared>,
) -> agent_client_protocol::v1::Builder<Client, impl HandleDispatchFrom<Agent> + 'static> {
    let updates = shared.clone();
    let reads = shared.clone();
    let writes = shared.clone();
    let (creates, outputs, waits, kills, releases) = (
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
    );
    let (elicits, completes) = (shared.clone(), shared.clone());
    let asks = shared;
    Client
        .v1()
        .name("agent.nvim")
        .on_receive_notification(
            async move |update: SessionUpdate, _cx| {
                if updates.of_side(&update.0) {
                    updates.side_update(&update.0["update"]);
                } else {
                    updates.on_update(&update.0["update"]);
                    if outside::completes_a_call(&update.0["update"]) {
                        // Off the dispatch loop: it runs git.
                        let shared = updates.clone();
                        tokio::spawn(async move { shared.look_outside().await });
                    }
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: ReadTextFileRequest,
                        responder: Responder<ReadTextFileResponse>,
                        _cx| {
                let path = request.path.to_string_lossy();
                let workspace = match reads.workspace_for(&path, false) {
                    Ok(workspace) => workspace,
                    Err(err) => return responder.respond_with_error(err),
                };
                let read = fs::read_text_file(
                    &workspace,
                    reads.host.as_ref(),
                    &path,
                    request.line,
                    request.limit,
                )
                .await;
                match read {
                    Ok(content) => responder.respond(ReadTextFileResponse::new(content)),
                    Err(err) => responder.respond_with_error(err),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: WriteTextFileRequest,
                        responder: Responder<WriteTextFileResponse>,
                        _cx| {
                if writes.of_side(&serde_json::json!({"sessionId": request.session_id.0.to_string()})) {
                    return responder.respond_with_error(agent_client_protocol::Error::invalid_request().data(
                        "a side question is answered without changing files",
                    ));
                }
                let path = request.path.to_string_lossy();
                let workspace = match writes.workspace_for(&path, true) {
                    Ok(workspace) => workspace,
                    Err(err) => return responder.respond_with_error(err),
                };
                writes.checkpoint(Kind::Write, &path).await;
                writes
                    .writes_through_client
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                let content = match writes.persons_version(&path, request.content) {
                    Ok(content) => content,
                    Err(err) => return responder.respond_with_error(err),
                };
                let digest = outside::digest(content.as_bytes());
                // Held over the write: a look at the workspace meanwhile (a tool call that
                // completed) would find the file written and not yet known as ours.
                let mut watch = writes.outside.lock().await;
                let written = fs::write_text_file(
                    &writes.authority,
                    &workspace,
                    writes.host.as_ref(),
                    &path,
                    content,
                )
                .await;
                match written {
                    Ok(()) => {
                        if let Some(relative) = writes.relative(&path) {
                            watch.wrote(relative, digest);
                        }
                        drop(watch);
                        responder.respond(WriteTextFileResponse::new())
                    }
                    Err(err) => responder.respond_with_error(err),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PermissionRequest,
                        responder: Responder<Value>,
                        cx: ConnectionTo<Agent>| {
                if asks.of_side(&request.0) {
                    // Nothing is allowed for a side question: it is asked to use no tools.
                    return responder.respond(serde_json::json!({"outcome": {"outcome": "cancelled"}}));
                }
                let fields = request.0.get("toolCall").cloned().unwrap_or(Value::Null);
                let options = permission::options(&request.0);
                let (events, ask) = {
                    let mut tools = asks.tools();
                    // The call's row, for agents that ask about a call they never announced.
                    let events = tools.update(&fields, &asks.workspace);
                    let known = update::id_of(&fields["toolCallId"])
                        .and_then(|id| tools.get(&id).cloned());
                    let mut ask =
                        permission::ask(&fields, options, known.as_ref(), &asks.workspace);
                    if asks
                        .writes_through_client
                        .load(std::sync::atomic::Ordering::Relaxed)
                    {
                        ask.edit = permission::edit(&fields, known.as_ref(), &asks.workspace);
                    }
                    (events, ask)
                };
                for event in events {
                    asks.report(event);
                }
                let shared = asks.clone();
                let turn = asks.turn();
                // Off the dispatch loop: the answer waits for a person.
                cx.spawn(async move {
                    let label = ask.title.clone();
                    let answer = decide(&shared, ask, &turn).await;
                    // The agent writes the disk itself once allowed: what it changes from here
                    // can be rewound.
                    shared.checkpoint(Kind::Permission, &label).await;
                    if let Err(err) = responder.respond(answer) {
                        tracing::debug!(%err, "a permission answer was not delivered");
                    }
                    Ok(())
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: TerminalCreate,
                        responder: Responder<Value>,
                        cx: ConnectionTo<Agent>| {
                let shared = creates.clone();
                if shared.of_side(&request.0) {
                    return responder.respond_with_error(agent_client_protocol::Error::invalid_request().data(
                        "a side question is answered without running commands",
                    ));
                }
                let turn = shared.turn();
                // Off the dispatch loop: it may wait for a person.
                cx.spawn(async move {
                    answer(responder, shared.create_terminal(&request.0, &turn).await);
                    Ok(())
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: TerminalOutput, responder: Responder<Value>, _cx| {
                answer(responder, outputs.terminal_output(&request.0));
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: TerminalWait,
                        responder: Responder<Value>,
                        cx: ConnectionTo<Agent>| {
                let shared = waits.clone();
                // Off the dispatch loop: it waits for the command.
                cx.spawn(async move {
                    answer(responder, shared.terminal_wait(&request.0).await);
                    Ok(())
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: TerminalKill, responder: Responder<Value>, _cx| {
                answer(responder, kills.terminal_kill(&request.0));
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: TerminalRelease, responder: Responder<Value>, _cx| {
                answer(responder, releases.terminal_release(&request.0));
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ElicitationCreate,
                        responder: Responder<Value>,
                        cx: ConnectionTo<Agent>| {
                let shared = elicits.clone();
                // Off the dispatch loop: the answer waits for a person.
                cx.spawn(async move {
                    answer(responder, shared.elicit(&request.0).await);
                    Ok(())
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |done: ElicitationComplete, _cx| {
                completes.elicitation_complete(&done.0);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_dispatch(
            async move |message: Dispatch<UntypedMessage, UntypedMessage>, _cx| {
                Ok(match message {
                    Dispatch::Request(request, responder) => {
                        tracing::info!(method = %request.method, "answered an unknown request -32601");
                        let method = Value::from(request.method.clone());
                        responder.respond_with_error(
                            agent_client_protocol::Error::method_not_found().data(method),
                        )?;
                        Handled::Yes
                    }
                    Dispatch::Notification(notification) => {
                        tracing::debug!(method = %notification.method, "ignored an unknown notification");
                        Handled::Yes
                    }
                    response @ Dispatch::Response(..) => Handled::No {
                        message: response,
                        retry: false,
                    },
                })
            },
            agent_client_protocol::on_receive_dispatch!(),
        )
}

/// The answer to one permission request (SPEC section 5): auto_approve picks allow_always, then
/// allow_once, never a reject option; nobody to ask means `cancelled`; else the user picks, and
/// a cancelled turn answers `cancelled` at once.
async fn decide(shared: &Shared, ask: PermissionAsk, turn: &CancellationToken) -> Value {
    if turn.is_cancelled() {
        return permission::cancelled();
    }
    if shared.auto_approve {
        return permission::auto_choice(&ask.options)
            .map_or_else(permission::cancelled, permission::selected);
    }
    let can_ask = tokio::select! {
        can_ask = shared.host.can_ask() => can_ask,
        () = turn.cancelled() => false,
    };
    if !can_ask {
        tracing::info!(agent = %shared.name, "permission answered `cancelled`: nobody can be asked");
        return permission::cancelled();
    }
    if let Some(why) = permission::too_large(&ask) {
        // Refused, not drawn: a question nobody can read whole is no question.
        shared
            .host
            .event(AcpEvent::Turn(agent_nvim_vocab::events::Event::Notice {
                text: format!("{} was refused without asking: {why}", ask.title),
            }));
        return ask
            .options
            .iter()
            .find(|o| o.kind == "reject_once")
            .map_or_else(permission::cancelled, |o| permission::selected(&o.id));
    }
    let allows: Vec<String> = ask
        .options
        .iter()
        .filter(|o| o.kind.starts_with("allow"))
        .map(|option| option.id.clone())
        .collect();
    let ids: Vec<String> = ask.options.iter().map(|option| option.id.clone()).collect();
    // Only the exact allow kinds (the picker's own test), and only when the picker showed the
    // command (a question with a diff previews the diff, whatever else it carries).
    let exact: Vec<(String, bool)> = ask
        .options
        .iter()
        .filter(|o| o.kind == "allow_once" || o.kind == "allow_always")
        .map(|option| (option.id.clone(), option.kind == "allow_always"))
        .collect();
    let command = ask.command.clone().filter(|_| ask.diff.is_none());
    let edit = ask.edit.clone();
    let picked = tokio::select! {
        picked = shared.host.ask_permission(ask) => picked,
        () = turn.cancelled() => None,
    };
    match picked {
        Some(Picked {
            option,
            edited: Some(theirs),
        }) => match edit {
            // The person's version is written when the agent writes its proposal.
            Some(edit) if allows.contains(&option) => {
                shared
                    .edited
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(edit.path.clone(), (edit, theirs));
                permission::selected(&option)
            }
            _ => {
                tracing::warn!("an edited answer to a request that could not be edited");
                permission::cancelled()
            }
        },
        Some(Picked { option, .. }) if ids.contains(&option) => {
            // The person saw this command line and allowed it: a terminal for exactly it runs.
            let allowed = exact.iter().find(|(id, _)| *id == option);
            if let (Some(line), Some((_, always))) = (command, allowed) {
                shared.allow_line(line, *always);
            }
            permission::selected(&option)
        }
        Some(Picked { option, .. }) => {
            tracing::warn!(id = %option, "the front end picked an option the agent did not offer");
            permission::cancelled()
        }
        None => permission::cancelled(),
    }
}

/// The initialize answer's `authMethods`, as the front end offers them.
fn auth_choices(methods: &[agent_client_protocol::v1::schema::AuthMethod]) -> Vec<AuthChoice> {
    use agent_client_protocol::v1::schema::AuthMethod;
    methods
        .iter()
        .filter_map(|method| match method {
            AuthMethod::Agent(agent) => Some(AuthChoice {
                id: agent.id.0.to_string(),
                name: agent.name.clone(),
                description: agent.description.clone(),
                terminal: false,
                args: Vec::new(),
                env: Vec::new(),
            }),
            AuthMethod::Terminal(terminal) => Some(AuthChoice {
                id: terminal.id.0.to_string(),
                name: terminal.name.clone(),
                description: terminal.description.clone(),
                terminal: true,
                args: terminal.args.clone(),
                env: {
                    let mut env: Vec<(String, String)> = terminal
                        .env
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    env.sort();
                    env
                },
            }),
            #[allow(unreachable_patterns)]
            _ => None,
        })
        .collect()
}

/// True when `err` means the connection is gone (the agent exited or closed its output).
fn closed(err: &agent_client_protocol::Error) -> bool {
    agent_client_protocol::is_incoming_transport_closed(err)
        || agent_client_protocol::is_connection_terminated(err)
}

impl AcpSession {
    /// Sends `text` as one prompt and streams the agent's updates until it answers. Emits
    /// TurnStarted first and TurnDone last, like the turn loop. On `cancel`: session/cancel is
    /// sent, open permission questions are answered `cancelled`, and the prompt's answer (stop
    /// reason `cancelled`) is waited for. An agent that exits mid-turn fails the turn with an
    /// Error event, and the session stays unusable.
    pub async fn prompt(
        &self,
        prompt: agent_nvim_conversation::Prompt,
        cancel: &CancellationToken,
    ) -> Outcome {
        self.shared.emit(Event::TurnStarted);
        if let Some(message) = self.dead_reason().await {
            return self.fail(message);
        }
        if let Some(message) = self.login_needed() {
            return self.fail(message);
        }
        if !prompt.images.is_empty() && !self.offers.images {
            // Refused before anything is sent, as for a model that reads text only.
            return self.fail(format!(
                "agent: {} does not take images (its promptCapabilities.image is not set), so nothing was sent; send the prompt without the image, or use an agent that takes them",
                self.shared.name
            ));
        }
        if !prompt.audio.is_empty() && !self.offers.audio {
            return self.fail(format!(
                "agent: {} does not take audio (its promptCapabilities.audio is not set), so nothing was sent; send the prompt without the clip, or use an agent that takes audio",
                self.shared.name
            ));
        }
        let agent_nvim_conversation::Prompt {
            text,
            images,
            audio,
        } = prompt;
        let turn = self.shared.new_turn();
        // Compared with the checkpoint taken just before this prompt (the conversation's
        // decorator takes it), for what the agent changes by itself.
        let baseline = self
            .shared
            .checkpoints
            .as_ref()
            .and_then(Checkpoints::last_prompt);
        self.shared.outside.lock().await.begin(baseline);
        // What the person changed in the agent's edits since its last prompt, said first.
        let notes = self.shared.take_notes();
        let text = if notes.is_empty() {
            text
        } else {
            format!("{}\n\n{text}", notes.join("\n"))
        };
        // An agent that takes embedded context gets each attached file as a resource of its own.
        let (text, files) = match self
            .offers
            .embedded_context
            .then(|| attached::split(&text, &self.shared.workspace))
            .flatten()
        {
            Some((typed, files)) => (typed, files),
            None => (text, Vec::new()),
        };
        let mut content = vec![ContentBlock::Text(TextContent::new(text))];
        content.extend(files.into_iter().map(|file| {
            use agent_client_protocol::v1::schema::{
                EmbeddedResource, EmbeddedResourceResource, TextResourceContents,
            };
            ContentBlock::Resource(EmbeddedResource::new(
                EmbeddedResourceResource::TextResourceContents(TextResourceContents::new(
                    file.text,
                    attached::uri(&file.path),
                )),
            ))
        }));
        content.extend(images.iter().map(|image| {
            if image.present() {
                ContentBlock::Image(ImageContent::new(image.base64(), image.media_type.clone()))
            } else {
                ContentBlock::Text(TextContent::new(image.lost_line()))
            }
        }));
        content.extend(audio.iter().map(|clip| {
            ContentBlock::Audio(AudioContent::new(clip.base64(), clip.media_type.clone()))
        }));
        let request = Prompt(PromptRequest::new(self.session_id(), content));
        let answer = self.cx.send_request(request).block_task();
        tokio::pin!(answer);
        let answer = tokio::select! {
            answer = &mut answer => answer,
            () = cancel.cancelled() => {
                let notice = CancelNotification::new(self.session_id());
                if let Err(err) = self.cx.send_notification(notice) {
                    tracing::debug!(%err, "session/cancel not sent");
                }
                turn.cancel();
                // `:Agent stop` stops what the agent runs through us too.
                self.shared.kill_terminals();
                match tokio::time::timeout(CANCEL_GRACE, &mut answer).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        tracing::warn!(agent = %self.shared.name, "no answer to a cancelled prompt");
                        self.shared.end_outside().await;
                        return self.finish(Outcome::Cancelled, "cancelled".into(), None);
                    }
                }
            }
        };
        // Nothing of a finished turn stays open.
        turn.cancel();
        self.shared.end_outside().await;
        match answer {
            Ok(answer) => {
                let stop = answer
                    .get("stopReason")
                    .and_then(Value::as_str)
                    .unwrap_or("end_turn");
                let (outcome, message) = match stop {
                    _ if cancel.is_cancelled() => (Outcome::Cancelled, "cancelled".to_string()),
                    "cancelled" => (Outcome::Cancelled, "cancelled".to_string()),
                    "max_turn_requests" => (Outcome::MaxTurns, format!("stopped ({stop})")),
                    _ => (Outcome::Done, format!("done ({stop})")),
                };
                self.finish(outcome, message, usage(&answer))
            }
            Err(err) if closed(&err) => {
                let message = self.ended().await;
                *self.dead.lock().unwrap_or_else(PoisonError::into_inner) = Some(message.clone());
                self.fail(message)
            }
            Err(err) if err.code == ErrorCode::AUTH_REQUIRED && !self.auth.is_empty() => {
                self.wants_login(err.message);
                let message = self.login_needed().unwrap_or_default();
                self.fail(message)
            }
            Err(err) => self.fail(format!(
                "{} failed the prompt: {} ({})",
                self.shared.name,
                err.message,
                err.code.value()
            )),
        }
    }

    /// Chooses a mode or a config option's value (see [`choices`]): checked against what the
    /// agent offers, sent, and, once the agent has answered, reported as the new state. A mode
    /// goes through the agent's mode option when it has one (it supersedes `modes`). The error
    /// says what went wrong and what can be chosen.
    pub async fn choose(&self, choice: crate::conversation::Choice) -> Result<(), ChoiceError> {
        self.choose_one(choice).await.map_err(ChoiceError)
    }

    async fn choose_one(&self, choice: crate::conversation::Choice) -> Result<(), String> {
        use crate::conversation::Choice;
        // One at a time, in the order they came.
        let _turn = self.choosing.lock().await;
        let name = self.shared.name.clone();
        let (option, value) = match choice {
            Choice::Login(method) => return self.login(method).await,
            Choice::Logout => return self.logout().await,
            Choice::Mode(id) => {
                let mode_option = self.shared.choices().mode_option().map(|o| o.id.clone());
                match mode_option {
                    Some(option) => (option, Value::String(id)),
                    None => return self.set_mode(id).await,
                }
            }
            Choice::Option { id, value } => (id, value),
        };
        let boolean = {
            let choices = self.shared.choices();
            let Some(known) = choices.options.iter().find(|o| o.id == option) else {
                let ids: Vec<&str> = choices.options.iter().map(|o| o.id.as_str()).collect();
                return Err(if ids.is_empty() {
                    format!("{name} offers no options")
                } else {
                    format!(
                        "{name} has no option '{option}'; its options: {}",
                        ids.join(", ")
                    )
                });
            };
            if !known.takes(&value) {
                let values: Vec<&str> = known.values.iter().map(|v| v.id.as_str()).collect();
                return Err(match known.kind.as_str() {
                    "boolean" => format!("{} ({option}) is on or off", known.name),
                    _ => format!(
                        "{} ({option}) has no value {value}; its values: {}",
                        known.name,
                        values.join(", ")
                    ),
                });
            }
            known.kind == "boolean"
        };
        let mut params = serde_json::json!({
            "sessionId": self.session_id().0.to_string(),
            "configId": option,
            "value": value,
        });
        if boolean {
            params["type"] = Value::from("boolean");
        }
        let answer = self
            .ask_agent(SetConfigOption(params), "session/set_config_option")
            .await?;
        // The answer holds every option as it is now; an agent that leaves it out is taken at
        // its word for this one.
        let events = {
            let mut choices = self.shared.choices();
            match answer.get("configOptions") {
                Some(list) if list.is_array() => {
                    choices.options = choices::Choices::of_session(&answer).options;
                }
                _ => {
                    if let Some(known) = choices.options.iter_mut().find(|o| o.id == option) {
                        known.current = value;
                    }
                }
            }
            choices.events()
        };
        for event in events {
            self.shared.report(event);
        }
        Ok(())
    }

    /// `session/set_mode`, for an agent whose modes are not a config option.
    async fn set_mode(&self, id: String) -> Result<(), String> {
        let name = &self.shared.name;
        {
            let choices = self.shared.choices();
            let Some((_, modes)) = &choices.modes else {
                return Err(format!("{name} offers no modes"));
            };
            if !modes.iter().any(|mode| mode.id == id) {
                let ids: Vec<&str> = modes.iter().map(|m| m.id.as_str()).collect();
                return Err(format!(
                    "{name} has no mode '{id}'; its modes: {}",
                    ids.join(", ")
                ));
            }
        }
        let params = serde_json::json!({
            "sessionId": self.session_id().0.to_string(),
            "modeId": id,
        });
        self.ask_agent(SetMode(params), "session/set_mode").await?;
        let events = {
            let mut choices = self.shared.choices();
            if let Some((current, _)) = &mut choices.modes {
                *current = id;
            }
            choices.events()
        };
        for event in events.into_iter().take(1) {
            self.shared.report(event);
        }
        Ok(())
    }

    /// Sends one request, bounded by the connect timeout; the error as the person reads it.
    /// A fork of the current session (`session/fork`, unstable in the protocol): the agent's
    /// id for the new session, which holds this one's history; this one goes on unchanged.
    /// Loaded in a conversation of its own (`session/load`), so the agent must offer that too.
    pub async fn fork_session(&self) -> Result<String, String> {
        let name = &self.shared.name;
        if !self.offers.fork {
            return Err(format!(
                "{name} does not offer session/fork, so its conversation cannot be forked here"
            ));
        }
        if !self.offers.load {
            return Err(format!(
                "{name} offers session/fork but not session/load, so the fork could not be opened here"
            ));
        }
        self.forked().await
    }

    /// Deletes the agent's session `session` (`session/delete`), never the one prompts go to.
    pub async fn delete_session(&self, session: &str) -> Result<(), String> {
        let name = &self.shared.name;
        if !self.offers.delete {
            return Err(format!("{name} does not offer session/delete"));
        }
        if session == self.session_id().0.as_ref() {
            return Err(format!(
                "that is the session {name} works in now; start another (:Agent new) first"
            ));
        }
        let params = serde_json::json!({ "sessionId": session });
        self.ask_agent(DeleteSession(params), "session/delete")
            .await
            .map(|_| ())
    }

    /// `session/fork` of the current session: the new session's id.
    async fn forked(&self) -> Result<String, String> {
        let name = &self.shared.name;
        let mut params = serde_json::json!({
            "sessionId": self.session_id().0.to_string(),
            "cwd": self.new_params["cwd"],
            "mcpServers": self.new_params["mcpServers"],
        });
        if let Some(directories) = self.new_params.get("additionalDirectories") {
            params["additionalDirectories"] = directories.clone();
        }
        let answer = self.ask_agent(ForkSession(params), "session/fork").await?;
        answer
            .get("sessionId")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map(String::from)
            .ok_or_else(|| format!("{name} answered session/fork without a sessionId"))
    }

    /// A side question (`:Agent btw`): asked in a fork of the current session
    /// (`session/fork`), so the conversation gains nothing; the answer's text goes to `text` as
    /// it comes. The fork may not write, run or be allowed anything (each is refused), and is
    /// closed after where the agent offers `session/close`. The conversation may run a turn
    /// meanwhile.
    pub async fn aside(
        &self,
        question: &str,
        text: tokio::sync::mpsc::UnboundedSender<String>,
        cancel: &CancellationToken,
    ) -> Result<(), String> {
        let name = self.shared.name.clone();
        if !self.offers.fork {
            return Err(format!(
                "{name} does not offer session/fork, so a side question cannot be asked of it apart from its conversation; ask it in the conversation"
            ));
        }
        if self
            .shared
            .side
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
        {
            return Err("another side question is being answered; ask once it is".into());
        }
        let forked = self.forked().await?;
        *self
            .shared
            .side
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((forked.clone(), text));
        let question = format!("{ASIDE_PREFACE}\n\n{}", question.trim());
        let request = Prompt(PromptRequest::new(
            SessionId::new(forked.clone()),
            vec![ContentBlock::Text(TextContent::new(question))],
        ));
        let answer = self.cx.send_request(request).block_task();
        let answer = tokio::select! {
            answer = answer => answer.map(|_| ()).map_err(|err| format!("{name} refused the side question: {}", err.message)),
            () = cancel.cancelled() => {
                let _ = self.cx.send_notification(CancelNotification::new(SessionId::new(forked.clone())));
                Err("cancelled".to_string())
            }
        };
        *self
            .shared
            .side
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        if self.offers.close {
            let params = serde_json::json!({ "sessionId": forked });
            let _ = self
                .ask_agent_within(
                    CloseSession(params),
                    "session/close",
                    Duration::from_secs(5),
                )
                .await;
        }
        answer
    }

    async fn ask_agent<R>(&self, request: R, method: &str) -> Result<Value, String>
    where
        R: agent_client_protocol::JsonRpcRequest<Response = Value>,
    {
        self.ask_agent_within(request, method, self.load_timeout)
            .await
    }

    /// [`AcpSession::ask_agent`] bounded by `timeout`.
    async fn ask_agent_within<R>(
        &self,
        request: R,
        method: &str,
        timeout: Duration,
    ) -> Result<Value, String>
    where
        R: agent_client_protocol::JsonRpcRequest<Response = Value>,
    {
        let name = &self.shared.name;
        if let Some(dead) = self.dead_reason().await {
            return Err(dead);
        }
        let sent = self.cx.send_request(request).block_task();
        match tokio::time::timeout(timeout, sent).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(err)) => Err(format!(
                "{name} refused {method}: {} ({})",
                err.message,
                err.code.value()
            )),
            Err(_) => Err(format!(
                "{name} did not answer {method} within {} s",
                timeout.as_secs_f64()
            )),
        }
    }

    /// Ends the session: closes the agent's stdin, gives it [`SHUTDOWN_GRACE`] to exit, then
    /// kills its process tree.
    pub async fn shutdown(mut self) {
        self.shared.turn().cancel();
        self.shared.kill_terminals();
        // The agent frees what it holds for the session, where it offers to.
        if self.offers.close && !self.session_id().0.is_empty() {
            let params = serde_json::json!({ "sessionId": self.session_id().0.to_string() });
            if let Err(err) = self
                .ask_agent_within(CloseSession(params), "session/close", CLOSE_GRACE)
                .await
            {
                tracing::info!(agent = %self.shared.name, %err, "session/close");
            }
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut driver) = self.driver.take() {
            // The connection flushes what is queued and drops the agent's stdin as it ends.
            if tokio::time::timeout(DRAIN_GRACE, &mut driver)
                .await
                .is_err()
            {
                driver.abort();
                let _ = driver.await;
            }
        }
        if let Some(process) = self.process.take() {
            if process.wait_exit(SHUTDOWN_GRACE).await.is_none() {
                tracing::info!(agent = %self.shared.name, "did not exit after its stdin closed; killing it");
            }
            process.end().await;
        }
    }

    /// Takes a session/new answer: its id, and what it offers to choose.
    fn opened(&self, answer: &Value) -> Result<(), String> {
        let id = answer
            .get("sessionId")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| "its answer has no sessionId".to_string())?;
        *self
            .session_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = SessionId::new(id.to_string());
        self.shared.offered(choices::Choices::of_session(answer));
        Ok(())
    }

    /// The agent asked for a login first: said in the chat, with its methods; prompts answer
    /// so until `:Agent login` has worked.
    fn wants_login(&self, message: String) {
        tracing::info!(agent = %self.shared.name, "the agent wants a login first");
        let said = format!(
            "{} needs you to log in first ({message}); :Agent login picks one of its ways",
            self.shared.name
        );
        *self
            .needs_login
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(said.clone());
        self.shared.report(AcpEvent::Agent(AgentUpdate::Login {
            needed: true,
            message: said,
            methods: self.auth.clone(),
        }));
    }

    /// Why a prompt cannot go to the agent yet: it wants a login.
    fn login_needed(&self) -> Option<String> {
        self.needs_login
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// `:Agent login {method}`: `authenticate`, then the session session/new refused (when it
    /// did). A terminal method is the front end's to run; it starts the agent again after.
    async fn login(&self, method: String) -> Result<(), String> {
        let name = self.shared.name.clone();
        let Some(choice) = self.auth.iter().find(|m| m.id == method) else {
            let ids: Vec<&str> = self.auth.iter().map(|m| m.id.as_str()).collect();
            return Err(if ids.is_empty() {
                format!("{name} offers no way to log in from here")
            } else {
                format!(
                    "{name} has no login method '{method}'; its methods: {}",
                    ids.join(", ")
                )
            });
        };
        if choice.terminal {
            return Err(format!(
                "'{method}' is a terminal login: :Agent login runs it in a terminal"
            ));
        }
        let params = serde_json::json!({ "methodId": method });
        // A person may be finishing it in a browser: bounded, but generously.
        let timeout = self.load_timeout.max(LOGIN_GRACE);
        self.ask_agent_within(Authenticate(params), "authenticate", timeout)
            .await?;
        tracing::info!(agent = %name, "logged in");
        if self.session_id().0.is_empty() {
            let answer = self
                .ask_agent(NewSession(self.new_params.clone()), "session/new")
                .await?;
            self.opened(&answer)?;
        }
        *self
            .needs_login
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        self.shared.report(AcpEvent::Agent(AgentUpdate::Login {
            needed: false,
            message: format!("logged in to {name}"),
            methods: Vec::new(),
        }));
        Ok(())
    }

    /// `:Agent logout`, where the agent offers it.
    async fn logout(&self) -> Result<(), String> {
        let name = self.shared.name.clone();
        if !self.offers.logout {
            return Err(format!(
                "{name} offers no logout; log out with its own command"
            ));
        }
        self.ask_agent(Logout(serde_json::json!({})), "logout")
            .await?;
        self.shared.report(AcpEvent::Agent(AgentUpdate::Login {
            needed: false,
            message: format!("logged out of {name}"),
            methods: Vec::new(),
        }));
        Ok(())
    }

    /// The session prompts go to now.
    fn session_id(&self) -> SessionId {
        self.session_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Why the session cannot take a prompt, if it cannot.
    async fn dead_reason(&self) -> Option<String> {
        let known = self
            .dead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if known.is_some() {
            return known;
        }
        if !self.cx.is_incoming_closed() && self.cx.termination().is_none() {
            return None;
        }
        let message = self.ended().await;
        *self.dead.lock().unwrap_or_else(PoisonError::into_inner) = Some(message.clone());
        Some(message)
    }

    /// How the agent went away: `claude exited (exit code 1): {its last stderr line}`.
    async fn ended(&self) -> String {
        let name = &self.shared.name;
        let Some(process) = &self.process else {
            return format!("{name} closed the connection");
        };
        let mut message = match process.wait_exit(EXIT_GRACE).await {
            Some(status) => format!("{name} exited ({status})"),
            None => format!("{name} closed its output and stopped answering"),
        };
        if let Some(line) = process.last_stderr() {
            message.push_str(": ");
            message.push_str(&line);
        }
        message
    }

    /// Ends the turn with an error.
    fn fail(&self, message: String) -> Outcome {
        tracing::warn!(agent = %self.shared.name, %message, "ACP turn failed");
        self.shared.emit(Event::Error {
            message: message.clone(),
        });
        self.finish(Outcome::Failed, message, None)
    }

    /// Closes the turn's open tool rows, reports usage, and sends TurnDone.
    fn finish(&self, outcome: Outcome, message: String, usage: Option<(u64, u64, u64)>) -> Outcome {
        let note = match outcome {
            Outcome::Done | Outcome::MaxTurns => "",
            Outcome::Cancelled => "cancelled",
            Outcome::Failed => "the agent stopped",
        };
        let closed =
            self.shared
                .tools()
                .close(outcome == Outcome::Done, note, &self.shared.workspace);
        for event in closed {
            self.shared.report(event);
        }
        let (input, output, cached) = usage.unwrap_or_default();
        if usage.is_some() {
            self.shared.emit(Event::Usage {
                input,
                output,
                cached,
                cost: None,
            });
        }
        self.shared.emit(Event::TurnDone {
            input,
            output,
            outcome,
            message,
            cost: None,
        });
        outcome
    }

    /// Kills the agent now (failed setup).
    fn kill(&mut self) {
        if let Some(driver) = self.driver.take() {
            driver.abort();
        }
        if let Some(process) = self.process.take() {
            process.kill();
        }
    }
}

impl Conversation for AcpSession {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn prompt<'a>(
        &'a self,
        prompt: agent_nvim_conversation::Prompt,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            *self
                .shared
                .reports
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(events.clone());
            let outcome = AcpSession::prompt(self, prompt, cancel).await;
            // A version of the person's the agent never wrote is not kept for a later proposal.
            self.shared
                .edited
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
            *self
                .shared
                .reports
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = None;
            outcome
        })
    }

    fn load<'a>(
        &'a self,
        id: &'a str,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<String, crate::conversation::ConversationError>> {
        Box::pin(async move {
            *self
                .shared
                .reports
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(events.clone());
            let loaded = self.load_session(id, cancel).await;
            *self
                .shared
                .reports
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = None;
            loaded.map_err(|err| {
                crate::conversation::ConversationError::Agent(crate::conversation::Cause::new(err))
            })
        })
    }

    fn resume_agent_session<'a>(
        &'a self,
        id: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<(), crate::conversation::ConversationError>> {
        Box::pin(async move {
            if !self.offers.resume {
                return Err(crate::conversation::ConversationError::Unsupported {
                    name: self.shared.name.clone(),
                    what: "resume a session without its replay",
                });
            }
            self.resume_session(id, cancel).await.map_err(|err| {
                crate::conversation::ConversationError::Agent(crate::conversation::Cause::new(err))
            })
        })
    }

    fn stop(&self) {
        self.shared.kill_terminals();
    }

    fn agent(&self) -> Option<&dyn crate::conversation::AgentSessions> {
        Some(self)
    }

    fn end(self: Arc<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            match Arc::try_unwrap(self) {
                Ok(session) => session.shutdown().await,
                // A turn still holds it: dropping the last handle kills the process tree.
                Err(shared) => drop(shared),
            }
        })
    }
}

impl crate::conversation::AgentSessions for AcpSession {
    fn agent_sessions(
        &self,
    ) -> BoxFuture<'_, Result<Vec<AgentSession>, crate::conversation::ConversationError>> {
        Box::pin(async move {
            if !self.offers.list {
                return Ok(Vec::new());
            }
            self.list_sessions().await.map_err(|err| {
                crate::conversation::ConversationError::Agent(crate::conversation::Cause::new(err))
            })
        })
    }

    fn agent_session_id(&self) -> Option<String> {
        (self.offers.load || self.offers.resume).then(|| self.session_id().0.to_string())
    }

    fn aside<'a>(
        &'a self,
        question: &'a str,
        text: tokio::sync::mpsc::UnboundedSender<String>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<(), crate::conversation::ConversationError>> {
        Box::pin(async move {
            self.aside(question, text, cancel).await.map_err(|err| {
                crate::conversation::ConversationError::Agent(crate::conversation::Cause::new(err))
            })
        })
    }

    fn delete<'a>(
        &'a self,
        session: &'a str,
    ) -> BoxFuture<'a, Result<(), crate::conversation::ConversationError>> {
        Box::pin(async move {
            self.delete_session(session).await.map_err(|err| {
                crate::conversation::ConversationError::Agent(crate::conversation::Cause::new(err))
            })
        })
    }

    fn fork(&self) -> BoxFuture<'_, Result<String, crate::conversation::ConversationError>> {
        Box::pin(async move {
            self.fork_session().await.map_err(|err| {
                crate::conversation::ConversationError::Agent(crate::conversation::Cause::new(err))
            })
        })
    }

    fn choose(
        &self,
        choice: crate::conversation::Choice,
    ) -> BoxFuture<'_, Result<(), crate::conversation::ConversationError>> {
        Box::pin(async move {
            self.choose(choice).await.map_err(|err| {
                crate::conversation::ConversationError::Agent(crate::conversation::Cause::new(err))
            })
        })
    }
}

impl Drop for AcpSession {
    fn drop(&mut self) {
        // Quitting without shutdown still leaves nothing running: the process tree is killed
        // as `process` drops.
        if let Some(driver) = &self.driver {
            driver.abort();
        }
    }
}

/// Token counts from a prompt answer's `usage` (`inputTokens`, `outputTokens`, and the
/// optional `cachedReadTokens`), when sent.
fn usage(answer: &Value) -> Option<(u64, u64, u64)> {
    let usage = answer.get("usage")?;
    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    Some((
        count("inputTokens"),
        count("outputTokens"),
        count("cachedReadTokens"),
    ))
}
