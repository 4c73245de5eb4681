//! Every message that crosses the Rust/Lua boundary, declared once. Lua's side of it is
//! `lua/agent/rpc.lua`; keep the two in step (and bump [`PROTOCOL`] when a shape changes).
//!
//! Direction Lua → Rust: msgpack-RPC notifications on the job channel (`vim.rpcnotify`), so
//! Neovim's loop never waits on the backend. Method names are [`method`]'s constants; each takes
//! one map argument, decoded into the struct named beside it.
//!
//! Direction Rust → Lua: `nvim_exec_lua("return require('agent.rpc').receive(...)", {events})`,
//! a batch of [`UiEvent`] maps at most once a frame, and a few small queries about buffers
//! (`buffer_state`, `reload`, `checktime`) answered by `agent.rpc`.

use serde::{Deserialize, Serialize};

use crate::acp::{AgentUpdate, PlanEntry};
use crate::agent::Event;
use crate::approval::{Action, Decision};
use crate::display::{self, Layout};

/// Bumped whenever a message below changes shape; Lua refuses a backend with another number and
/// says how to rebuild it.
pub const PROTOCOL: u32 = 2;

/// Notification names Lua sends.
pub mod method {
    /// [`super::Start`]: configure the session. Sent once, first.
    pub const START: &str = "start";
    /// [`super::Prompt`]: run a turn.
    pub const PROMPT: &str = "prompt";
    /// No argument: cancel the running turn.
    pub const CANCEL: &str = "cancel";
    /// No argument: cancel, then start a fresh conversation (history and grants forgotten).
    pub const NEW: &str = "new";
    /// [`super::Decide`]: the answer to an approval request.
    pub const DECIDE: &str = "decide";
    /// [`super::AcpStart`]: drive an external agent over ACP; prompts go to it until `new`.
    pub const ACP: &str = "acp";
}

/// `start`: the session's settings, from `require("agent").setup()`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Start {
    /// Absolute workspace root.
    pub workspace: String,
    /// `anthropic` | `openai` | `ollama`; nil picks the first provider whose key is set.
    #[serde(default)]
    pub provider: Option<String>,
    /// Model name; nil for the provider's default.
    #[serde(default)]
    pub model: Option<String>,
    /// Endpoint; nil for the environment's or the vendor's.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Allow every edit and command without asking.
    #[serde(default)]
    pub auto_approve: bool,
    /// run_bash timeout in seconds.
    #[serde(default)]
    pub command_timeout: Option<f64>,
    /// Shell for run_bash; nil picks bash, else /bin/sh.
    #[serde(default)]
    pub shell: Option<String>,
    /// Cap on model calls per prompt.
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// Key variables run_bash's commands get anyway; nil or empty: none.
    #[serde(default)]
    pub pass_env: Option<Vec<String>>,
    /// The largest file edit_file handles, in MB; nil: 64.
    #[serde(default)]
    pub max_edit_mb: Option<u64>,
}

/// `prompt`: what the user asked, context included.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Prompt {
    /// The text sent to the model.
    pub text: String,
}

/// `decide`: answers the approval request with the same id.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Decide {
    /// The request's id.
    pub id: u64,
    /// The answer.
    #[serde(flatten)]
    pub decision: Decision,
    /// For an external agent's own options (ACP): the id of the option picked.
    #[serde(default)]
    pub option: Option<String>,
}

/// `acp`: which external agent to start.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AcpStart {
    /// A configured name or a preset (claude, gemini, codex, opencode).
    pub name: String,
    /// The configured command; None uses the preset for `name`.
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    /// Extra environment for the agent.
    #[serde(default)]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// Seconds the agent may take to answer `initialize`.
    #[serde(default)]
    pub connect_timeout: Option<f64>,
}

/// One of an external agent's permission options, shown by its own name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentOption {
    /// The agent's id for it (echoed in `decide.option`).
    pub id: String,
    /// The agent's label.
    pub name: String,
    /// `allow_once` | `allow_always` | `reject_once` | `reject_always`.
    pub kind: String,
}

/// What Rust tells Lua, in order. Serialized as a map with a `type` field: the variants below,
/// plus the turn loop's own [`Event`]s (`turn_started`, `text`, `tool_started`, `tool_finished`,
/// `retrying`, `usage`, `turn_done`, `error`) and an external agent's [`AgentUpdate`]s (`thought`,
/// `plan`, `tool_updated`), each written as its own map.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum UiEvent {
    /// `start` succeeded.
    Started {
        version: String,
        protocol: u32,
        provider: String,
        model: String,
        workspace: String,
    },
    /// An approval is needed: show the picker, answer with `decide`. Every string in it is a
    /// display string (made visible by [`UiEvent::shown`]): it is only shown, never used to run
    /// or grant anything.
    Approval {
        id: u64,
        tool: String,
        /// The float's title: the detail on one line, or `run_bash · 62 lines`
        /// ([`display::approval_title`]).
        title: String,
        /// For a command, its preview lines ([`display::preview_lines`]) joined by newlines;
        /// otherwise one line.
        detail: String,
        /// The diff's preview lines ([`display::diff_lines`]) joined by newlines.
        diff: Option<String>,
        /// What a session grant would cover.
        action: Action,
        /// The label of the choice that allows it for the session
        /// ([`display::session_choice`]); None for an external agent's request, whose options
        /// have their own names.
        session_choice: Option<String>,
        /// The directory commands run in (for run_bash's preview).
        cwd: String,
        /// The command timeout in seconds (for run_bash's preview).
        timeout: f64,
        /// An external agent's own choices (ACP); None for the built-in tools.
        options: Option<Vec<AgentOption>>,
        /// An external agent's shell command, for the preview (ACP).
        command: Option<String>,
    },
    /// How an approval was answered (to record on the tool row).
    Decided {
        id: u64,
        tool: String,
        decision: Decision,
    },
    /// An external agent (ACP) is connected; prompts go to it until `new`.
    AcpStarted { name: String },
    /// What the turn loop (or an external agent's turn) reports.
    #[serde(untagged)]
    Agent(Event),
    /// What only an external agent reports.
    #[serde(untagged)]
    Update(AgentUpdate),
}

impl UiEvent {
    /// An error to show; `message` starts with `agent:` and says what to do.
    pub fn error(message: impl Into<String>) -> Self {
        UiEvent::Agent(Event::Error {
            message: message.into(),
        })
    }

    /// The event as Lua may show it: every string a person reads made visible
    /// ([`display::visible`]), so Lua needs no escaping of its own. Ids, option ids and kinds
    /// are left alone: Lua matches and echoes them, never shows them.
    pub fn shown(self) -> Self {
        let one = |s: String| display::visible(&s, Layout::OneLine).into_owned();
        let prose = |s: String| display::visible(&s, Layout::Prose).into_owned();
        match self {
            UiEvent::Started { .. } => self,
            UiEvent::Approval {
                id,
                tool,
                title,
                detail,
                diff,
                action,
                session_choice,
                cwd,
                timeout,
                options,
                command,
            } => {
                let detail = match &action {
                    Action::Command { .. } => display::preview_lines(&detail).join("\n"),
                    Action::Edit { .. } => one(detail),
                };
                let action = match action {
                    Action::Edit { rel } => Action::Edit { rel: one(rel) },
                    Action::Command { command } => Action::Command {
                        command: display::one_line(&command),
                    },
                };
                UiEvent::Approval {
                    id,
                    tool: one(tool),
                    title: one(title),
                    detail,
                    diff: diff.map(|d| display::diff_lines(&d).join("\n")),
                    action,
                    session_choice: session_choice.map(one),
                    cwd: one(cwd),
                    timeout,
                    options: options.map(|options| {
                        options
                            .into_iter()
                            .map(|o| AgentOption {
                                name: display::one_line(&o.name),
                                ..o
                            })
                            .collect()
                    }),
                    command: command.map(|c| display::preview_lines(&c).join("\n")),
                }
            }
            UiEvent::Decided { id, tool, decision } => UiEvent::Decided {
                id,
                tool: one(tool),
                decision: match decision {
                    Decision::Refuse { reason } => Decision::Refuse {
                        reason: reason.map(one),
                    },
                    other => other,
                },
            },
            UiEvent::AcpStarted { name } => UiEvent::AcpStarted { name: one(name) },
            UiEvent::Agent(event) => UiEvent::Agent(display::shown(event)),
            UiEvent::Update(AgentUpdate::Thought { text }) => {
                UiEvent::Update(AgentUpdate::Thought { text: prose(text) })
            }
            UiEvent::Update(AgentUpdate::Plan { entries }) => UiEvent::Update(AgentUpdate::Plan {
                entries: entries
                    .into_iter()
                    .map(|e| PlanEntry {
                        content: one(e.content),
                        ..e
                    })
                    .collect(),
            }),
            UiEvent::Update(AgentUpdate::ToolUpdated {
                id,
                title,
                status,
                kind,
                output,
            }) => UiEvent::Update(AgentUpdate::ToolUpdated {
                id,
                title: one(title),
                status: one(status),
                kind,
                output: prose(output),
            }),
        }
    }
}

/// What `agent.rpc.buffer_state(path)` returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct BufferState {
    /// A buffer holds the file.
    #[serde(default)]
    pub loaded: bool,
    /// That buffer has unsaved changes.
    #[serde(default)]
    pub modified: bool,
}
