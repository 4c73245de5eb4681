//! An external agent's own sessions: what it offers at initialize ([`Offers`]),
//! `session/list` ([`AcpSession::list_sessions`]: this workspace's sessions, paged, bounded in
//! pages, rows and time) and `session/load` ([`AcpSession::load_session`]: the agent replays the
//! session as `session/update`s, which reach the chat through the same mapping as a live turn's;
//! its user messages come out whole, as the prompts they were).
//!
//! Both methods are stable in what the crate speaks (agent-client-protocol 5, schema 1.17:
//! `ListSessionsRequest`, `LoadSessionRequest`), so no `unstable` feature is needed.

use std::path::Path;
use std::sync::PoisonError;
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    AgentCapabilities, ListSessionsRequest, LoadSessionRequest, SessionId,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{closed, update, AcpEvent, AcpSession, AgentUpdate, Shared};
use agent_nvim_vocab::events::Event;

/// How long listing may take, all pages together: Neovim waits for the list (a request).
const LIST_TIMEOUT: Duration = Duration::from_secs(5);
/// At most this many pages are asked for.
const LIST_PAGES: usize = 20;
/// At most this many sessions are listed.
const LIST_MAX: usize = 200;

/// What an agent said at initialize it offers beyond a session of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offers {
    /// `agentCapabilities.loadSession`: `session/load` works.
    pub load: bool,
    /// `agentCapabilities.sessionCapabilities.list`: `session/list` works.
    pub list: bool,
    /// `sessionCapabilities.close`: `session/close` works (sent when the session ends).
    pub close: bool,
    /// `sessionCapabilities.additionalDirectories`: session/new takes more roots.
    pub directories: bool,
    /// `agentCapabilities.auth.logout`: `logout` works.
    pub logout: bool,
    /// `promptCapabilities.image`: a prompt may hold images.
    pub images: bool,
    /// `promptCapabilities.audio`: a prompt may hold audio clips.
    pub audio: bool,
    /// `promptCapabilities.embeddedContext`: attached files go as `resource` blocks.
    pub embedded_context: bool,
    /// `sessionCapabilities.fork` (unstable in the protocol): `session/fork` works.
    pub fork: bool,
    /// `sessionCapabilities.delete`: `session/delete` works.
    pub delete: bool,
    /// `sessionCapabilities.resume`: `session/resume` works (a session continued without
    /// its replay).
    pub resume: bool,
    /// `mcpCapabilities`: the remote MCP transports it takes.
    pub(super) mcp: super::mcp::Takes,
}

impl Offers {
    pub(super) fn of(capabilities: &AgentCapabilities) -> Self {
        let session = &capabilities.session_capabilities;
        Offers {
            load: capabilities.load_session,
            list: session.list.is_some(),
            close: session.close.is_some(),
            directories: session.additional_directories.is_some(),
            logout: capabilities.auth.logout.is_some(),
            images: capabilities.prompt_capabilities.image,
            audio: capabilities.prompt_capabilities.audio,
            embedded_context: capabilities.prompt_capabilities.embedded_context,
            fork: session.fork.is_some(),
            delete: session.delete.is_some(),
            resume: session.resume.is_some(),
            mcp: super::mcp::Takes {
                http: capabilities.mcp_capabilities.http,
                sse: capabilities.mcp_capabilities.sse,
            },
        }
    }
}

pub use agent_nvim_vocab::conversation::AgentSession;

/// Why listing or loading an agent's sessions failed. The texts are what the user reads after
/// `agent: `.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SessionsError {
    /// It did not say at initialize that it offers `method`.
    #[error("{name} does not offer {method}")]
    NotOffered { name: String, method: &'static str },
    /// It answered `method` with a JSON-RPC error, or with an answer that could not be read.
    #[error("{name} failed {method}: {message} ({code})")]
    Failed {
        name: String,
        method: &'static str,
        message: String,
        code: i32,
    },
    /// It did not answer `method` in time.
    #[error("{name} did not answer {method} within {secs} s")]
    TimedOut {
        name: String,
        method: &'static str,
        secs: f64,
    },
    /// The user cancelled (`:Agent stop`) while it replayed.
    #[error("loading {name}'s session was cancelled")]
    Cancelled { name: String },
    /// The agent has gone: how ([`AcpSession::ended`]).
    #[error("{0}")]
    Ended(String),
}

/// What a `session/load` gathers while the agent replays the session.
#[derive(Debug, Default)]
pub(super) struct Replay {
    /// The user's message so far (its chunks joined), shown once something else comes.
    user: String,
    /// The first line of the first user message: the loaded session's title.
    title: Option<String>,
}

impl Replay {
    /// The user's message gathered so far, when there is one.
    fn take_user(&mut self) -> Option<String> {
        if self.user.is_empty() {
            return None;
        }
        let text = std::mem::take(&mut self.user);
        if self.title.is_none() {
            self.title = Some(agent_nvim_text::text::title_of(&text));
        }
        Some(text)
    }
}

impl Shared {
    /// Shows one `session/update` (live or replayed) through the tool rows' mapping. While a
    /// session is replayed, a user's message is gathered and shown whole as the prompt it was,
    /// followed by the start of the turn that answered it; live turns ignore user messages (the
    /// chat already shows the prompt).
    pub(super) fn on_update(&self, update: &Value) {
        let user_chunk =
            update.get("sessionUpdate").and_then(Value::as_str) == Some("user_message_chunk");
        let (gathered, replaying) = {
            let mut replay = self.replay.lock().unwrap_or_else(PoisonError::into_inner);
            match replay.as_mut() {
                Some(replay) if user_chunk => {
                    if let Some(text) = update::block_text(&update["content"]) {
                        replay.user.push_str(&text);
                    }
                    return;
                }
                Some(replay) => (replay.take_user(), true),
                None => (None, false),
            }
        };
        if let Some(text) = gathered {
            self.replayed_prompt(text);
            self.emit(Event::TurnStarted);
        }
        let chosen = self.choices().apply(update);
        let events = chosen.unwrap_or_else(|| self.tools().apply(update, &self.workspace));
        for event in events {
            // A replayed call's files are history: follow mode opens what is worked on now.
            if replaying && matches!(event, AcpEvent::Agent(AgentUpdate::Locations { .. })) {
                continue;
            }
            self.report(event);
        }
    }

    /// A replayed user message: the rows the turn before it left open are closed, then it is
    /// shown as a prompt.
    fn replayed_prompt(&self, text: String) {
        self.close_rows();
        self.report(AcpEvent::Agent(AgentUpdate::UserMessage { text }));
    }

    /// Closes the tool rows still open (a replay has no turn end to close them).
    fn close_rows(&self) {
        let closed = self.tools().close(true, "", &self.workspace);
        for event in closed {
            self.report(event);
        }
    }
}

/// `session/resume`, kept as JSON (its answer may carry modes and config options).
#[derive(Debug, Clone, Serialize, Deserialize, agent_client_protocol::JsonRpcRequest)]
#[request(method = "session/resume", response = Value)]
#[serde(transparent)]
struct Resume(Value);

/// `session/load`, its answer kept as JSON: a null or unusual answer to a load the agent did must
/// not fail it.
#[derive(Debug, Clone, Serialize, Deserialize, agent_client_protocol::JsonRpcRequest)]
#[request(method = "session/load", response = Value)]
#[serde(transparent)]
struct Load(LoadSessionRequest);

impl AcpSession {
    /// What the agent said it offers at initialize.
    pub fn offers(&self) -> Offers {
        self.offers
    }

    /// The agent's sessions in this workspace (`session/list` with the root as `cwd`; rows of
    /// another directory are left out, should the agent not filter), following its cursor for at
    /// most [`LIST_PAGES`] pages and [`LIST_MAX`] rows, all within [`LIST_TIMEOUT`].
    pub async fn list_sessions(&self) -> Result<Vec<AgentSession>, SessionsError> {
        if !self.offers.list {
            return Err(self.not_offered("session/list"));
        }
        self.alive().await?;
        let root = self.shared.workspace.root().to_path_buf();
        match tokio::time::timeout(LIST_TIMEOUT, self.pages(&root)).await {
            Ok(listed) => listed,
            Err(_) => Err(SessionsError::TimedOut {
                name: self.shared.name.clone(),
                method: "session/list",
                secs: LIST_TIMEOUT.as_secs_f64(),
            }),
        }
    }

    async fn pages(&self, root: &Path) -> Result<Vec<AgentSession>, SessionsError> {
        let mut listed = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..LIST_PAGES {
            let request = ListSessionsRequest::new()
                .cwd(root.to_path_buf())
                .cursor(cursor.clone());
            let page = match self.cx.send_request(request).block_task().await {
                Ok(page) => page,
                Err(err) => return Err(self.failed("session/list", err).await),
            };
            let (mine, others): (Vec<_>, Vec<_>) =
                page.sessions.into_iter().partition(|info| info.cwd == root);
            if !others.is_empty() {
                tracing::info!(agent = %self.shared.name, count = others.len(), "left out sessions of other directories");
            }
            listed.extend(mine.into_iter().map(|info| AgentSession {
                id: info.session_id.0.to_string(),
                title: info.title.filter(|title| !title.trim().is_empty()),
                updated: info.updated_at.as_deref().and_then(epoch_of),
            }));
            if listed.len() >= LIST_MAX {
                listed.truncate(LIST_MAX);
                break;
            }
            match page.next_cursor {
                // A cursor that does not move would page forever.
                Some(next) if !next.is_empty() && cursor.as_ref() != Some(&next) => {
                    cursor = Some(next);
                }
                _ => break,
            }
        }
        Ok(listed)
    }

    /// `request` with what session/new was sent besides its cwd: the MCP servers and the
    /// additional directories.
    fn reopen(&self, request: LoadSessionRequest) -> LoadSessionRequest {
        let servers = serde_json::from_value(self.new_params["mcpServers"].clone());
        let directories: Vec<std::path::PathBuf> =
            serde_json::from_value(self.new_params["additionalDirectories"].clone())
                .unwrap_or_default();
        request
            .mcp_servers(servers.unwrap_or_default())
            .additional_directories(directories)
    }

    /// Loads the agent's session `id` (`session/load`, with the workspace root as its `cwd`,
    /// whatever the agent said the session's was): the updates it replays are shown as they
    /// come, and prompts go to that session from then on. Answers the session's title (the
    /// first line of its first user message; empty when it replayed none). On an error the
    /// session prompts went to stays the current one.
    pub async fn load_session(
        &self,
        id: &str,
        cancel: &CancellationToken,
    ) -> Result<String, SessionsError> {
        if !self.offers.load && self.offers.resume {
            // Continued, though nothing of it can be shown: said once in the chat.
            self.resume_session(id, cancel).await?;
            self.shared.emit(Event::Notice {
                text: format!(
                    "{} continues that session without replaying it: its earlier messages are not shown",
                    self.shared.name
                ),
            });
            return Ok(String::new());
        }
        if !self.offers.load {
            return Err(self.not_offered("session/load"));
        }
        self.alive().await?;
        *self.shared.tools() = super::Tools::default();
        *self
            .shared
            .replay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Replay::default());
        let request = Load(self.reopen(LoadSessionRequest::new(
            SessionId::new(id),
            self.shared.workspace.root().to_path_buf(),
        )));
        let answer = self.cx.send_request(request).block_task();
        let answer = tokio::select! {
            answer = tokio::time::timeout(self.load_timeout, answer) => Some(answer),
            () = cancel.cancelled() => None,
        };
        // What it replayed last is shown whatever the answer.
        let mut replay = self
            .shared
            .replay
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_default();
        if let Some(text) = replay.take_user() {
            self.shared.replayed_prompt(text);
        }
        self.shared.close_rows();
        self.settled("session/load", answer).await?;
        tracing::info!(agent = %self.shared.name, session = id, "loaded the agent's session");
        *self
            .session_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = SessionId::new(id);
        Ok(replay.title.unwrap_or_default())
    }

    /// The answer to a load or a resume, bounded by the load timeout and stopped by the
    /// person (None): its result, or why there is none.
    async fn settled(
        &self,
        method: &'static str,
        answer: Option<
            Result<Result<Value, agent_client_protocol::Error>, tokio::time::error::Elapsed>,
        >,
    ) -> Result<Value, SessionsError> {
        match answer {
            Some(Ok(Ok(answer))) => Ok(answer),
            Some(Ok(Err(err))) => Err(self.failed(method, err).await),
            Some(Err(_)) => Err(SessionsError::TimedOut {
                name: self.shared.name.clone(),
                method,
                secs: self.load_timeout.as_secs_f64(),
            }),
            None => Err(SessionsError::Cancelled {
                name: self.shared.name.clone(),
            }),
        }
    }

    /// Continues the agent's session `id` without a replay (`session/resume`, with the
    /// workspace root as its `cwd` and what session/new was sent besides): prompts go to it
    /// from then on, and its modes and options are what it answers. The caller shows the
    /// conversation so far, if anything (our own saved file of it). On an error the session
    /// prompts went to stays the current one.
    pub async fn resume_session(
        &self,
        id: &str,
        cancel: &CancellationToken,
    ) -> Result<(), SessionsError> {
        if !self.offers.resume {
            return Err(self.not_offered("session/resume"));
        }
        self.alive().await?;
        let mut params = serde_json::json!({
            "sessionId": id,
            "cwd": self.shared.workspace.root(),
            "mcpServers": self.new_params["mcpServers"],
        });
        if let Some(directories) = self.new_params.get("additionalDirectories") {
            params["additionalDirectories"] = directories.clone();
        }
        let answer = self.cx.send_request(Resume(params)).block_task();
        let answer = tokio::select! {
            answer = tokio::time::timeout(self.load_timeout, answer) => Some(answer),
            () = cancel.cancelled() => None,
        };
        let answer = self.settled("session/resume", answer).await?;
        tracing::info!(agent = %self.shared.name, session = id, "resumed the agent's session");
        *self.shared.tools() = super::Tools::default();
        *self
            .session_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = SessionId::new(id);
        self.shared
            .offered(super::choices::Choices::of_session(&answer));
        Ok(())
    }

    fn not_offered(&self, method: &'static str) -> SessionsError {
        SessionsError::NotOffered {
            name: self.shared.name.clone(),
            method,
        }
    }

    /// Ok while the agent runs; how it went away otherwise.
    async fn alive(&self) -> Result<(), SessionsError> {
        match self.dead_reason().await {
            Some(reason) => Err(SessionsError::Ended(reason)),
            None => Ok(()),
        }
    }

    /// The error for an answer to `method` that was not a result.
    async fn failed(
        &self,
        method: &'static str,
        err: agent_client_protocol::Error,
    ) -> SessionsError {
        if closed(&err) {
            return SessionsError::Ended(self.ended().await);
        }
        SessionsError::Failed {
            name: self.shared.name.clone(),
            method,
            message: err.message,
            code: err.code.value(),
        }
    }
}

/// Seconds since the epoch of an ISO 8601 time (`2026-12-01T12:34:56Z`, with or without
/// fractions, with `Z`, an offset or no zone, which is read as UTC). None when it is not one.
pub(super) fn epoch_of(time: &str) -> Option<u64> {
    let time = time.trim();
    let number = |text: Option<&str>, digits: usize| -> Option<i64> {
        let text = text?;
        (text.len() == digits && text.bytes().all(|b| b.is_ascii_digit()))
            .then(|| text.parse().ok())
            .flatten()
    };
    let date = time.get(..10)?;
    let mut ymd = date.split('-');
    let (year, month, day) = (
        number(ymd.next(), 4)?,
        number(ymd.next(), 2)?,
        number(ymd.next(), 2)?,
    );
    let rest = time.get(10..)?.strip_prefix(['T', 't', ' '])?;
    let mut hms = rest.get(..8)?.split(':');
    let (hours, minutes, seconds) = (
        number(hms.next(), 2)?,
        number(hms.next(), 2)?,
        number(hms.next(), 2)?,
    );
    let mut zone = rest.get(8..)?;
    if let Some(fraction) = zone.strip_prefix('.') {
        zone = fraction.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match zone {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = match zone.get(..1)? {
                "+" => 1,
                "-" => -1,
                _ => return None,
            };
            let mut hm = zone.get(1..)?.split(':');
            let (h, m) = (number(hm.next(), 2)?, number(hm.next(), 2)?);
            if hm.next().is_some() || h > 23 || m > 59 {
                return None;
            }
            sign * (h * 3600 + m * 60)
        }
    };
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hours > 23
        || minutes > 59
        || seconds > 60
    {
        return None;
    }
    let secs =
        days_from_civil(year, month, day) * 86_400 + hours * 3600 + minutes * 60 + seconds - offset;
    u64::try_from(secs).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days-from-civil, the
/// inverse of what `sessions` uses to write its times).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
