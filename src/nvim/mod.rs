//! The Neovim front end: `agent-nvim nvim`, started by the plugin as an RPC child on stdio.
//!
//! The [`Bridge`] handler only decodes and hands off: nvim-rs awaits notifications one at a time,
//! so a turn run inside `handle_notify` would deadlock the moment it waited for an approval that
//! arrives as another notification. Turns run in spawned tasks; what they produce goes through
//! one pump task that sends Lua at most one batch a frame (SPEC section 6).

mod acp;
pub mod protocol;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use nvim_rs::compat::tokio::Compat;
use nvim_rs::{Handler, Neovim};
use rmpv::Value;
use tokio::sync::{mpsc, Mutex};
use tokio_util::sync::CancellationToken;

use crate::agent::{Event, DEFAULT_MAX_TURNS};
use crate::approval::{Action, ApprovalRequest, Asker, Decision};
use crate::conversation::{Conversation, ConversationEvent, Native, Unavailable};
use crate::editor::Editor;
use crate::llm::ProviderChoice;
use crate::questions::Questions;
use crate::session::{self, SessionConfig};
use crate::workspace::Workspace;
use crate::{Error, Result};
use protocol::{
    lua, method, BufferState, Choice, Choices, Decide, Preview, Prompt, Start, UiEvent, PROTOCOL,
};

/// The handle to the Neovim that started us.
type Nvim = Neovim<Compat<tokio::fs::File>>;

/// How long the pump gathers events before it sends a batch: one frame at 60 Hz.
const FRAME: Duration = Duration::from_millis(16);

/// `agent-nvim nvim`: serve the plugin until Neovim closes the channel or asks us to stop.
pub fn run(log: Option<PathBuf>) -> Result<u8> {
    crate::secrets::protect_env_keys();
    init_log(log.as_deref());
    let runtime = session::runtime()?;
    runtime.block_on(serve());
    // A blocked call must not keep the process alive once Neovim has gone.
    runtime.shutdown_timeout(Duration::from_millis(200));
    Ok(0)
}

/// Logs go to a file (stdout is the msgpack channel), each record redacted; without one, nowhere.
fn init_log(path: Option<&Path>) {
    let Some(path) = path else {
        return;
    };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let Ok(file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    else {
        return;
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENT_NVIM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_writer(crate::secrets::RedactedLog::new(OneLineLog(file)))
        .with_ansi(false)
        .with_env_filter(filter)
        .try_init();
}

/// The log file, written one record per line with everything in it made visible
/// ([`crate::display::visible`]): a command, an agent's stderr or an API error quoted in a record
/// can neither forge a line of its own nor send escapes to the terminal `:Agent log` runs in.
/// [`crate::secrets::RedactedLog`] hands it each record whole, redacted.
struct OneLineLog<W>(W);

impl<W: std::io::Write> std::io::Write for OneLineLog<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use crate::display::{visible, Layout};
        let text = crate::text::lossy(buf);
        let (record, end) = match text.strip_suffix('\n') {
            Some(record) => (record, "\n"),
            None => (text.as_ref(), ""),
        };
        let line = visible(record, Layout::OneLine);
        self.0.write_all(line.as_bytes())?;
        self.0.write_all(end.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

async fn serve() {
    let shutdown = CancellationToken::new();
    let bridge = Bridge::new(shutdown.clone());
    let (nvim, io) = match nvim_rs::create::tokio::new_parent(bridge.clone()).await {
        Ok(connected) => connected,
        Err(err) => {
            tracing::error!(%err, "cannot talk to Neovim on stdio");
            return;
        }
    };
    tokio::spawn(pump(nvim.clone(), bridge.state.ui_rx.lock().await.take()));
    let signals = stop_signals();
    tokio::select! {
        ended = io => tracing::info!(?ended, "Neovim closed the channel"),
        () = signals => tracing::info!("asked to stop by a signal"),
    }
    // Neovim is gone or going: cancel the turn (its commands' process trees are killed) and give
    // it a moment to finish doing so.
    shutdown.cancel();
    bridge.cancel_turn();
    let _ = tokio::time::timeout(Duration::from_secs(1), bridge.idle()).await;
    // An external agent's process tree goes with us.
    let _ = tokio::time::timeout(Duration::from_secs(3), bridge.end_conversation()).await;
}

/// Resolves on SIGTERM, SIGHUP or SIGINT (Neovim stops its jobs with SIGTERM when it quits).
async fn stop_signals() {
    use tokio::signal::unix::{signal, SignalKind};
    let kinds = [
        SignalKind::terminate(),
        SignalKind::hangup(),
        SignalKind::interrupt(),
    ];
    let mut streams: Vec<_> = kinds.into_iter().filter_map(|k| signal(k).ok()).collect();
    if streams.is_empty() {
        return futures::future::pending().await;
    }
    let waits = streams.iter_mut().map(|s| Box::pin(s.recv()));
    futures::future::select_all(waits).await;
}

/// The session the `start` notification configured.
struct Session {
    /// The built-in conversation (one that answers with the reason when the provider could not
    /// be configured): where prompts go until an external agent is started, and after `new`.
    native: Arc<dyn Conversation>,
    /// The root, for an external agent's session.
    workspace: Workspace,
    /// Whether everything is allowed without asking (external agents too).
    auto_approve: bool,
    /// The handle to Neovim, for an external agent's host.
    nvim: Nvim,
}

/// Shared state of the front end.
struct State {
    session: Mutex<Option<Session>>,
    /// The conversation prompts go to: the built-in one or an external agent's (connected, or
    /// one that answers "still starting"). None until `start`.
    conversation: Mutex<Option<Arc<dyn Conversation>>>,
    /// Every question waiting for Lua's `decide`: the gate's and an external agent's.
    pending: Questions<Decide>,
    /// The running turn's cancel token.
    turn: SyncMutex<Option<CancellationToken>>,
    /// Held by a running turn; taking it waits for the turn to end.
    busy: Arc<Mutex<()>>,
    ui: mpsc::UnboundedSender<UiEvent>,
    ui_rx: Mutex<Option<mpsc::UnboundedReceiver<UiEvent>>>,
    /// The running built-in turn's path to Lua for its approval questions ([`Bridge::ask_lua`]).
    questions: SyncMutex<Option<mpsc::UnboundedSender<UiEvent>>>,
    shutdown: CancellationToken,
}

/// The nvim-rs handler: decodes each notification and hands it off.
#[derive(Clone)]
pub struct Bridge {
    state: Arc<State>,
}

impl Bridge {
    fn new(shutdown: CancellationToken) -> Self {
        let (ui, ui_rx) = mpsc::unbounded_channel();
        Bridge {
            state: Arc::new(State {
                session: Mutex::new(None),
                conversation: Mutex::new(None),
                pending: Questions::default(),
                turn: SyncMutex::new(None),
                busy: Arc::new(Mutex::new(())),
                ui,
                ui_rx: Mutex::new(Some(ui_rx)),
                questions: SyncMutex::new(None),
                shutdown,
            }),
        }
    }

    fn send(&self, event: UiEvent) {
        let _ = self.state.ui.send(event);
    }

    fn error(&self, message: impl Into<String>) {
        self.send(UiEvent::error(message));
    }

    /// The path a turn's events take to Lua: the sender the conversation reports on, and the
    /// task that hands what it reports to the pump. The turn's questions ([`Bridge::ask_lua`])
    /// go the same way, so a question never overtakes the `tool_started` reported before it
    /// (the status would say `running` while the picker is open).
    fn turn_path<E: Into<UiEvent> + Send + 'static>(
        &self,
    ) -> (
        mpsc::UnboundedSender<E>,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let (events, received) = mpsc::unbounded_channel();
        let (questions, asked) = mpsc::unbounded_channel();
        if let Ok(mut slot) = self.state.questions.lock() {
            *slot = Some(questions);
        }
        (events, forward(self.clone(), received, asked))
    }

    /// Sends an approval question to Lua after everything the running turn reported before it.
    fn ask_lua(&self, question: UiEvent) {
        let path = self
            .state
            .questions
            .lock()
            .ok()
            .and_then(|slot| slot.clone());
        match path {
            Some(path) => {
                if let Err(unsent) = path.send(question) {
                    self.send(unsent.0);
                }
            }
            None => self.send(question),
        }
    }

    fn cancel_turn(&self) {
        if let Ok(turn) = self.state.turn.lock() {
            if let Some(token) = turn.as_ref() {
                token.cancel();
            }
        }
        // Every open question is answered: the picker may be closed by the Lua side.
        self.state.pending.clear();
    }

    /// Resolves when no turn is running.
    async fn idle(&self) {
        let _ = self.state.busy.lock().await;
    }

    async fn start(&self, start: Start, nvim: Nvim) {
        let auto_approve = start.auto_approve;
        let config = session_config(start);
        let bridge = self.clone();
        let asker_nvim = nvim.clone();
        let asker: session::AskerFor<'_> = Box::new(move |workspace, settings| {
            Some(Arc::new(NvimAsker {
                nvim: asker_nvim,
                bridge,
                cwd: workspace.root().display().to_string(),
                timeout: settings.command_timeout.as_secs_f64(),
            }) as Arc<dyn Asker>)
        });
        let editor = Arc::new(NvimEditor { nvim: nvim.clone() });
        let built = match session::build(&config, asker, editor) {
            Ok(built) => built,
            Err(err) => return self.error(err.to_string()),
        };
        let root = built.workspace.root().display().to_string();
        let (provider, model, native): (_, _, Arc<dyn Conversation>) = match built.agent {
            Ok(agent) => {
                let cfg = agent.client().config();
                let (provider, model) = (cfg.kind.name().to_string(), cfg.model.clone());
                (provider, model, Arc::new(Native::new(agent)))
            }
            // A missing key is reported when a prompt needs the provider, not now: a session
            // that only drives an external agent (ACP) never does.
            Err(err) => (
                String::new(),
                String::new(),
                Arc::new(Unavailable::new("built-in", format!("agent: {err}"))),
            ),
        };
        tracing::info!(%root, %provider, %model, auto_approve, "session started");
        *self.state.session.lock().await = Some(Session {
            native: native.clone(),
            workspace: built.workspace,
            auto_approve,
            nvim,
        });
        // Not awaited here: an external agent takes seconds to end, and notifications wait.
        if let Some(ended) = self.replace_conversation(native).await {
            tokio::spawn(ended);
        }
        self.send(UiEvent::Started {
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: PROTOCOL,
            provider,
            model,
            workspace: root,
        });
    }

    /// Makes `next` the conversation prompts go to, and ends the one it replaces.
    async fn switch_to(&self, next: Arc<dyn Conversation>) {
        if let Some(replaced) = self.replace_conversation(next).await {
            replaced.await;
        }
    }

    /// Makes `next` the conversation prompts go to; the end of the one it replaces (if another)
    /// is left to the caller, to await or to spawn.
    async fn replace_conversation(
        &self,
        next: Arc<dyn Conversation>,
    ) -> Option<BoxFuture<'static, ()>> {
        let replaced = self.state.conversation.lock().await.replace(next.clone());
        let replaced = replaced.filter(|old| !Arc::ptr_eq(old, &next))?;
        tracing::info!(name = replaced.name(), "ending a conversation");
        Some(replaced.end())
    }

    /// Ends the conversation prompts go to (Neovim is going): an external agent's stdin is
    /// closed, and its process tree killed 2 s later.
    async fn end_conversation(&self) {
        let ended = self.state.conversation.lock().await.take();
        if let Some(ended) = ended {
            tracing::info!(name = ended.name(), "ending a conversation");
            ended.end().await;
        }
    }

    async fn prompt(&self, prompt: Prompt) {
        let conversation = self.state.conversation.lock().await.clone();
        let Some(conversation) = conversation else {
            return self.error("agent: the backend was not started; run :Agent again");
        };
        let Some((busy, token)) = self.begin_turn() else {
            return;
        };
        let bridge = self.clone();
        let (events, forwarder) = self.turn_path::<ConversationEvent>();
        tokio::spawn(async move {
            let forwarder = tokio::spawn(forwarder);
            let outcome = conversation.prompt(prompt.text, &events, &token).await;
            drop(events);
            let _ = forwarder.await;
            tracing::info!(name = conversation.name(), ?outcome, "turn ended");
            bridge.end_turn();
            // The turn lets go of the conversation before it is idle, so whoever waits for that
            // to end the conversation holds the last handle.
            drop(conversation);
            drop(busy);
        });
    }

    /// Claims the turn: the busy guard (held until the turn ends) and its cancel token. None,
    /// with a message to the user, when a turn is already running.
    fn begin_turn(&self) -> Option<(tokio::sync::OwnedMutexGuard<()>, CancellationToken)> {
        let Ok(busy) = self.state.busy.clone().try_lock_owned() else {
            self.error("agent: a turn is already running; wait for it or :Agent stop");
            return None;
        };
        let token = self.state.shutdown.child_token();
        if let Ok(mut turn) = self.state.turn.lock() {
            *turn = Some(token.clone());
        }
        Some((busy, token))
    }

    /// Forgets the finished turn's cancel token and its path for questions.
    fn end_turn(&self) {
        if let Ok(mut turn) = self.state.turn.lock() {
            *turn = None;
        }
        if let Ok(mut questions) = self.state.questions.lock() {
            *questions = None;
        }
    }

    /// `new`: cancels the turn, ends an external agent, and starts the built-in conversation
    /// over (history and session grants forgotten).
    fn new_conversation(&self) {
        self.cancel_turn();
        let bridge = self.clone();
        tokio::spawn(async move {
            bridge.idle().await;
            let native = bridge
                .state
                .session
                .lock()
                .await
                .as_ref()
                .map(|s| s.native.clone());
            let Some(native) = native else {
                return;
            };
            bridge.switch_to(native.clone()).await;
            if let Err(err) = native.reset().await {
                tracing::warn!(%err, "the conversation did not start over");
            }
        });
    }

    fn decide(&self, decide: Decide) {
        // An unknown or late id is logged by the registry and ignored.
        if let Some(waiter) = self.state.pending.take(decide.id) {
            self.send(UiEvent::decided(
                decide.id,
                waiter.about.clone(),
                decide.decision.clone(),
            ));
            waiter.answer(decide);
        }
    }
}

/// The session `start` configures: the plugin's options, anything unset or out of range at its
/// default.
fn session_config(start: Start) -> SessionConfig {
    let mut config = SessionConfig::new(start.workspace);
    config.auto_approve = start.auto_approve;
    let settings = &mut config.settings;
    if let Some(secs) = start.command_timeout.filter(|s| s.is_finite() && *s > 0.0) {
        settings.command_timeout = Duration::from_secs_f64(secs);
    }
    settings.shell = start
        .shell
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(PathBuf::from);
    settings.pass_env = start.pass_env.unwrap_or_default();
    if let Some(mb) = start.max_edit_mb.filter(|mb| *mb > 0) {
        settings.max_edit_mb = mb;
    }
    config.provider = ProviderChoice {
        provider: start.provider.filter(|p| !p.is_empty()),
        model: start.model.filter(|m| !m.is_empty()),
        base_url: start.base_url.filter(|u| !u.is_empty()),
    };
    config.max_turns = start.max_turns.unwrap_or(DEFAULT_MAX_TURNS);
    config
}

/// Decodes the one map argument of a notification.
fn arg<T: serde::de::DeserializeOwned>(args: Vec<Value>) -> std::result::Result<T, String> {
    let first = args.into_iter().next().unwrap_or(Value::Nil);
    rmpv::ext::from_value(first).map_err(|e| e.to_string())
}

#[async_trait]
impl Handler for Bridge {
    type Writer = Compat<tokio::fs::File>;

    async fn handle_notify(&self, name: String, args: Vec<Value>, nvim: Nvim) {
        tracing::debug!(%name, "notification");
        match name.as_str() {
            method::START => match arg::<Start>(args) {
                Ok(start) => self.start(start, nvim).await,
                Err(err) => self.error(format!(
                    "agent: bad start message ({err}); update the plugin and rebuild"
                )),
            },
            method::PROMPT => match arg::<Prompt>(args) {
                Ok(prompt) => self.prompt(prompt).await,
                Err(err) => self.error(format!("agent: bad prompt message ({err})")),
            },
            method::ACP => match arg::<protocol::AcpStart>(args) {
                Ok(start) => self.start_external(start).await,
                Err(err) => self.error(format!("agent: bad acp message ({err})")),
            },
            method::CANCEL => self.cancel_turn(),
            method::NEW => self.new_conversation(),
            method::DECIDE => match arg::<Decide>(args) {
                Ok(decide) => self.decide(decide),
                Err(err) => tracing::warn!(%err, "bad decide message"),
            },
            other => tracing::warn!(method = other, "unknown notification"),
        }
    }

    async fn handle_request(
        &self,
        name: String,
        _args: Vec<Value>,
        _nvim: Nvim,
    ) -> std::result::Result<Value, Value> {
        match name.as_str() {
            protocol::request::VERSION => Ok(Value::from(env!("CARGO_PKG_VERSION"))),
            other => Err(Value::from(format!("agent: unknown request '{other}'"))),
        }
    }
}

/// Hands a built-in turn's events to the pump, wrapped for Lua, and its approval questions in
/// their place among them: a question is sent only after every event the turn reported before
/// asking it (its `tool_started` above all), which the turn loop sent first, so those are already
/// waiting when the question arrives. Ends when the turn drops its sender.
async fn forward<E: Into<UiEvent>>(
    bridge: Bridge,
    mut events: mpsc::UnboundedReceiver<E>,
    mut questions: mpsc::UnboundedReceiver<UiEvent>,
) {
    loop {
        tokio::select! {
            biased;
            event = events.recv() => match event {
                Some(event) => bridge.send(event.into()),
                None => break,
            },
            Some(question) = questions.recv() => {
                while let Ok(event) = events.try_recv() {
                    bridge.send(event.into());
                }
                bridge.send(question);
            }
        }
    }
}

impl From<Event> for UiEvent {
    fn from(event: Event) -> Self {
        UiEvent::Agent(event)
    }
}

impl From<ConversationEvent> for UiEvent {
    fn from(event: ConversationEvent) -> Self {
        match event {
            ConversationEvent::Turn(event) => UiEvent::Agent(event),
            ConversationEvent::Agent(update) => UiEvent::Update(update),
        }
    }
}

/// Sends Lua the events in batches, at most one a frame, with consecutive text joined, in one
/// `exec_lua` call. An approval is sent at once.
async fn pump(nvim: Nvim, events: Option<mpsc::UnboundedReceiver<UiEvent>>) {
    let Some(mut events) = events else {
        return;
    };
    // The frame is counted from the last send: an event after a quiet spell goes out at once, a
    // stream of them goes out at most once a frame.
    let mut last_send = tokio::time::Instant::now() - FRAME;
    while let Some(first) = events.recv().await {
        let mut batch = vec![first];
        let deadline = last_send + FRAME;
        while !matches!(batch.last(), Some(UiEvent::Approval { .. })) {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(event)) => batch.push(event),
                Ok(None) | Err(_) => break,
            }
        }
        last_send = tokio::time::Instant::now();
        let values = for_lua(join_text(batch));
        if let Err(err) = nvim
            .exec_lua(lua::RECEIVE, vec![Value::Array(values)])
            .await
        {
            tracing::warn!(%err, "Lua did not take a batch of events");
        }
    }
}

/// A batch of events as [`lua::RECEIVE`] takes it: each made visible ([`UiEvent::shown`]) and
/// written as a msgpack map ([`to_msgpack`]). Public for the tests that send Lua every kind of
/// event the way the pump does.
pub fn for_lua(batch: Vec<UiEvent>) -> Vec<Value> {
    batch
        .into_iter()
        .map(UiEvent::shown)
        .filter_map(|e| serde_json::to_value(e).ok())
        .map(|v| to_msgpack(&v))
        .collect()
}

/// A JSON value as msgpack, objects as maps with string keys (what Lua tables need; rmpv's serde
/// support would write structs as arrays). A null in an object is left out, so Lua never reads
/// `vim.NIL` for an absent field. Every string is redacted: this is the one way events reach the
/// chat.
fn to_msgpack(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::from(i),
            (None, Some(u), _) => Value::from(u),
            (None, None, f) => Value::from(f.unwrap_or_default()),
        },
        serde_json::Value::String(s) => Value::from(crate::secrets::redact(s).as_ref()),
        serde_json::Value::Array(items) => Value::Array(items.iter().map(to_msgpack).collect()),
        serde_json::Value::Object(map) => Value::Map(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (Value::from(k.as_str()), to_msgpack(v)))
                .collect(),
        ),
    }
}

/// Joins consecutive text events so a frame's deltas are appended with one buffer call.
fn join_text(batch: Vec<UiEvent>) -> Vec<UiEvent> {
    let mut out: Vec<UiEvent> = Vec::with_capacity(batch.len());
    for event in batch {
        match (out.last_mut(), event) {
            (
                Some(UiEvent::Agent(Event::Text { text })),
                UiEvent::Agent(Event::Text { text: more }),
            ) => text.push_str(&more),
            (_, event) => out.push(event),
        }
    }
    out
}

/// Asks through the plugin's picker; nobody to ask when no UI is attached (headless Neovim).
struct NvimAsker {
    nvim: Nvim,
    bridge: Bridge,
    cwd: String,
    timeout: f64,
}

impl Asker for NvimAsker {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, Option<Decision>> {
        Box::pin(async move {
            match self.nvim.list_uis().await {
                Ok(uis) if !uis.is_empty() => {}
                Ok(_) => {
                    tracing::info!(detail = %request.detail, "no UI attached: refusing");
                    return None;
                }
                Err(err) => {
                    tracing::warn!(%err, "cannot list UIs: refusing");
                    return None;
                }
            }
            // The question's id is the registry's, shared with an external agent's questions.
            let (id, answer) = self.bridge.state.pending.open(request.tool.clone());
            let request = ApprovalRequest { id, ..request };
            let is_command = matches!(request.action, Action::Command { .. });
            let preview = match (&request.action, request.diff) {
                (Action::Command { command }, _) => Preview::Command {
                    command: command.clone(),
                    cwd: self.cwd.clone(),
                    timeout: Some(self.timeout),
                },
                (Action::Edit { rel }, Some(unified)) => Preview::Diff {
                    path: rel.clone(),
                    unified,
                },
                (Action::Edit { .. }, None) => Preview::None,
            };
            self.bridge.ask_lua(UiEvent::Approval {
                id: request.id,
                title: crate::display::approval_title(&request.tool, &request.detail, is_command),
                choices: Choices::Builtin {
                    choices: Choice::builtin(&request.action),
                },
                tool: request.tool,
                preview,
            });
            answer.await.ok().map(|decide| decide.decision)
        })
    }
}

/// Open buffers, asked of the plugin.
#[derive(Clone)]
struct NvimEditor {
    nvim: Nvim,
}

impl NvimEditor {
    async fn lua(&self, code: &str, path: Option<&Path>) -> Option<Value> {
        let args = path
            .map(|p| vec![Value::from(p.display().to_string())])
            .unwrap_or_default();
        match self.nvim.exec_lua(code, args).await {
            Ok(value) => Some(value),
            Err(err) => {
                tracing::warn!(%err, code, "buffer query failed");
                None
            }
        }
    }
}

impl Editor for NvimEditor {
    fn has_unsaved_changes<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            self.lua(lua::BUFFER_STATE, Some(path))
                .await
                .and_then(|v| rmpv::ext::from_value::<BufferState>(v).ok())
                .is_some_and(|state| state.loaded && state.modified)
        })
    }

    fn file_written<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.lua(lua::RELOAD, Some(path)).await;
        })
    }

    fn command_finished(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.lua(lua::CHECKTIME, None).await;
        })
    }
}

impl From<Box<nvim_rs::error::CallError>> for Error {
    fn from(err: Box<nvim_rs::error::CallError>) -> Self {
        Error::Io {
            context: "Neovim did not answer",
            source: std::io::Error::other(err.to_string()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_log_record_stays_one_line_with_its_controls_visible() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.log");
        let log =
            crate::secrets::RedactedLog::new(OneLineLog(std::fs::File::create(&path).unwrap()));
        let mut record = tracing_subscriber::fmt::MakeWriter::make_writer(&log);
        record
            .write_all(b"INFO detail=touch PWNED #\r\x1b[2Kls\nINFO forged \xe2\x80\xae\n")
            .unwrap();
        drop(record);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "INFO detail=touch PWNED #\\r\\e[2Kls\\nINFO forged \\u{202e}\n"
        );
    }

    #[test]
    fn approvals_reach_lua_as_display_strings_and_keep_their_ids() {
        let command = "a\n\n\n\nb\u{1b}";
        let approval = UiEvent::Approval {
            id: 3,
            tool: "run_bash".into(),
            title: crate::display::approval_title("run_bash", command, true),
            preview: Preview::Command {
                command: command.into(),
                cwd: "/w\u{1b}".into(),
                timeout: Some(5.0),
            },
            choices: Choices::Builtin {
                choices: vec![Choice {
                    key: "allow_session".into(),
                    label: "Allow `\u{1b}` for this session".into(),
                }],
            },
        };
        assert_eq!(
            approval.shown(),
            UiEvent::Approval {
                id: 3,
                tool: "run_bash".into(),
                title: "run_bash · 5 lines".into(),
                preview: Preview::Command {
                    command: "a\n[… 3 blank lines …]\nb\\e".into(),
                    cwd: "/w\\e".into(),
                    timeout: Some(5.0),
                },
                choices: Choices::Builtin {
                    choices: vec![Choice {
                        key: "allow_session".into(),
                        label: "Allow `\\e` for this session".into(),
                    }],
                },
            }
        );
        let agent = UiEvent::Approval {
            id: 4,
            tool: "Edit \u{202e}".into(),
            title: "Edit \u{202e}".into(),
            preview: Preview::Diff {
                path: "Edit \u{202e}".into(),
                unified: "+x\ry\n".into(),
            },
            choices: Choices::Agent {
                options: vec![crate::acp::PermissionChoice {
                    id: "al\u{1b}low".into(),
                    name: "Allow \u{202e}".into(),
                    kind: "allow_once".into(),
                }],
            },
        };
        assert_eq!(
            agent.shown(),
            UiEvent::Approval {
                id: 4,
                tool: "Edit \\u{202e}".into(),
                title: "Edit \\u{202e}".into(),
                preview: Preview::Diff {
                    path: "Edit \\u{202e}".into(),
                    unified: "+x\\ry".into(),
                },
                choices: Choices::Agent {
                    options: vec![crate::acp::PermissionChoice {
                        id: "al\u{1b}low".into(),
                        name: "Allow \\u{202e}".into(),
                        kind: "allow_once".into(),
                    }],
                },
            }
        );
    }

    #[test]
    fn the_builtin_choices_come_in_the_pickers_order_with_the_session_one_named_for_its_scope() {
        let labels = |action: Action| -> Vec<(String, String)> {
            Choice::builtin(&action)
                .into_iter()
                .map(|c| (c.key, c.label))
                .collect()
        };
        let pairs = |list: [(&str, &str); 5]| -> Vec<(String, String)> {
            list.iter()
                .map(|(k, l)| (k.to_string(), l.to_string()))
                .collect()
        };
        assert_eq!(
            labels(Action::Command {
                command: "cargo test".into()
            }),
            pairs([
                ("allow_once", "Allow once"),
                ("allow_session", "Allow `cargo test` for this session"),
                ("allow_all", "Allow everything this session"),
                ("refuse", "Refuse"),
                ("refuse_with_reason", "Refuse with a reason…"),
            ])
        );
        assert_eq!(
            labels(Action::Edit { rel: "a".into() })[1].1,
            "Allow edits for this session"
        );
    }

    #[test]
    fn absent_fields_are_left_out_of_what_lua_reads() {
        let values = for_lua(vec![
            UiEvent::Approval {
                id: 1,
                tool: "t".into(),
                title: "t".into(),
                preview: Preview::Command {
                    command: "ls".into(),
                    cwd: "/w".into(),
                    timeout: None,
                },
                choices: Choices::Agent { options: vec![] },
            },
            UiEvent::decided(1, "t".into(), Decision::Refuse { reason: None }),
            UiEvent::Agent(Event::ToolStarted {
                id: "c".into(),
                name: "n".into(),
                args: serde_json::Value::Null,
            }),
        ]);
        assert_eq!(
            values.into_iter().map(sorted).collect::<Vec<_>>(),
            vec![
                sorted(Value::Map(vec![
                    (Value::from("type"), Value::from("approval")),
                    (Value::from("id"), Value::from(1)),
                    (Value::from("tool"), Value::from("t")),
                    (Value::from("title"), Value::from("t")),
                    (
                        Value::from("preview"),
                        Value::Map(vec![
                            (Value::from("kind"), Value::from("command")),
                            (Value::from("command"), Value::from("ls")),
                            (Value::from("cwd"), Value::from("/w")),
                        ])
                    ),
                    (
                        Value::from("choices"),
                        Value::Map(vec![
                            (Value::from("kind"), Value::from("agent")),
                            (Value::from("options"), Value::Array(vec![])),
                        ])
                    ),
                ])),
                sorted(Value::Map(vec![
                    (Value::from("type"), Value::from("decided")),
                    (Value::from("id"), Value::from(1)),
                    (Value::from("tool"), Value::from("t")),
                    (Value::from("decision"), Value::from("refuse")),
                    (Value::from("note"), Value::from("refused")),
                ])),
                sorted(Value::Map(vec![
                    (Value::from("type"), Value::from("tool_started")),
                    (Value::from("id"), Value::from("c")),
                    (Value::from("name"), Value::from("n")),
                ])),
            ]
        );
    }

    /// What the bridge has handed the pump so far.
    fn handed_on(ui: &mut mpsc::UnboundedReceiver<UiEvent>) -> Vec<UiEvent> {
        std::iter::from_fn(|| ui.try_recv().ok()).collect()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_approval_reaches_lua_after_the_events_the_turn_reported_before_asking() {
        let bridge = Bridge::new(CancellationToken::new());
        let mut ui = bridge.state.ui_rx.lock().await.take().unwrap();
        let started = |id: &str| {
            UiEvent::Agent(Event::ToolStarted {
                id: id.into(),
                name: "run_bash".into(),
                args: serde_json::json!({"command": "ls"}),
            })
        };
        let question = |id: u64| UiEvent::decided(id, "run_bash".into(), Decision::AllowOnce);
        let report = |events: &mpsc::UnboundedSender<Event>, event: UiEvent| match event {
            UiEvent::Agent(event) => events.send(event).unwrap(),
            other => panic!("{other:?}"),
        };
        // The forwarder has not run yet when the turn reports and then asks.
        let (events, forwarder) = bridge.turn_path();
        report(&events, started("t1"));
        bridge.ask_lua(question(1));
        let forwarder = tokio::spawn(forwarder);
        tokio::task::yield_now().await;
        assert_eq!(handed_on(&mut ui), vec![started("t1"), question(1)]);
        // The forwarder is waiting when both arrive.
        report(&events, started("t2"));
        bridge.ask_lua(question(2));
        tokio::task::yield_now().await;
        assert_eq!(handed_on(&mut ui), vec![started("t2"), question(2)]);
        drop(events);
        forwarder.await.unwrap();
        // With no turn running, a question goes straight to the pump.
        bridge.end_turn();
        bridge.ask_lua(question(3));
        assert_eq!(handed_on(&mut ui), vec![question(3)]);
    }

    #[test]
    fn a_frame_of_deltas_becomes_one_text_event() {
        let batch = vec![
            UiEvent::Agent(Event::Text { text: "a".into() }),
            UiEvent::Agent(Event::Text { text: "b".into() }),
            UiEvent::Agent(Event::Usage {
                input: 1,
                output: 2,
            }),
            UiEvent::Agent(Event::Text { text: "c".into() }),
        ];
        assert_eq!(
            join_text(batch),
            vec![
                UiEvent::Agent(Event::Text { text: "ab".into() }),
                UiEvent::Agent(Event::Usage {
                    input: 1,
                    output: 2
                }),
                UiEvent::Agent(Event::Text { text: "c".into() })
            ]
        );
    }

    #[test]
    fn messages_from_lua_decode_from_msgpack_maps() {
        let start = Value::Map(vec![
            (Value::from("workspace"), Value::from("/w")),
            (Value::from("auto_approve"), Value::from(true)),
            (Value::from("command_timeout"), Value::from(30)),
            (Value::from("provider"), Value::Nil),
        ]);
        let start: Start = arg(vec![start]).unwrap();
        assert_eq!(
            (
                start.workspace.as_str(),
                start.auto_approve,
                start.command_timeout
            ),
            ("/w", true, Some(30.0))
        );
        let decide = Value::Map(vec![
            (Value::from("id"), Value::from(7)),
            (Value::from("decision"), Value::from("refuse")),
            (Value::from("reason"), Value::from("not now")),
        ]);
        let decide: Decide = arg(vec![decide]).unwrap();
        assert_eq!(
            decide,
            Decide {
                id: 7,
                decision: Decision::Refuse {
                    reason: Some("not now".into())
                },
                option: None,
            }
        );
    }

    /// A map's entries sorted by key: key order is serde_json's business (it depends on its
    /// `preserve_order` feature), not part of what Lua reads.
    fn sorted(value: Value) -> Value {
        match value {
            Value::Map(mut entries) => {
                entries.sort_by(|a, b| a.0.as_str().cmp(&b.0.as_str()));
                Value::Map(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
            }
            other => other,
        }
    }

    #[test]
    fn every_kind_of_event_reaches_lua_as_one_flat_map_with_its_type() {
        let kinds = |events: Vec<UiEvent>| -> Vec<String> {
            events
                .into_iter()
                .map(|e| {
                    serde_json::to_value(e).unwrap()["type"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect()
        };
        assert_eq!(
            kinds(vec![
                UiEvent::AcpStarted { name: "x".into() },
                UiEvent::error("agent: boom"),
                UiEvent::Agent(Event::TurnStarted),
                UiEvent::Update(crate::acp::AgentUpdate::Thought { text: "hm".into() }),
            ]),
            ["acp_started", "error", "turn_started", "thought"]
        );
        let error = serde_json::to_value(UiEvent::error("agent: boom")).unwrap();
        assert_eq!(
            error,
            serde_json::json!({"type": "error", "message": "agent: boom"})
        );
    }

    #[test]
    fn events_to_lua_are_maps_with_a_type() {
        let value = to_msgpack(
            &serde_json::to_value(UiEvent::Agent(Event::Text { text: "hi".into() })).unwrap(),
        );
        assert_eq!(
            sorted(value),
            Value::Map(vec![
                (Value::from("text"), Value::from("hi")),
                (Value::from("type"), Value::from("text"))
            ])
        );
        let value = to_msgpack(&serde_json::json!({"n": -3, "f": 1.5, "list": [true, null]}));
        assert_eq!(
            sorted(value),
            Value::Map(vec![
                (Value::from("f"), Value::from(1.5)),
                (
                    Value::from("list"),
                    Value::Array(vec![Value::from(true), Value::Nil])
                ),
                (Value::from("n"), Value::from(-3)),
            ])
        );
    }
}
