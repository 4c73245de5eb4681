//! What a conversation reports besides the built-in loop's events: an external agent's own
//! updates (thoughts, plans, tool rows in place, modes and options, cost, commands) and the one
//! stream both make, [`ConversationEvent`]. Data only.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events::Event;

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

/// What only an ACP agent reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentUpdate {
    /// More of the agent's reasoning (shown apart from its answer, consecutive chunks joined).
    Thought { text: String },
    /// The agent's plan, whole: each update replaces the previous one.
    Plan { entries: Vec<PlanEntry> },
    /// One of the agent's several plans (ACP `plan_update`, unstable), whole: an update of plan
    /// `id` replaces that plan only. `text` is a plan given as markdown, or where its file is,
    /// instead of entries.
    PlanUpdated {
        id: String,
        entries: Vec<PlanEntry>,
        text: Option<String>,
    },
    /// The agent's next message begins, its id `id` (ACP `messageId`, sent when it changes):
    /// kept in the saved conversation, and the chat starts a paragraph for it.
    Message { id: String },
    /// Plan `id` is gone (ACP `plan_removed`).
    PlanRemoved { id: String },
    /// The agent compacted (or is compacting) its context (ACP `compaction_update`), whole as
    /// it stands: `status` `in_progress`, `completed`, `failed`, `cancelled` or one of the
    /// agent's own; the summary it kept so far; why it failed.
    Compaction {
        id: String,
        status: String,
        summary: String,
        error: Option<String>,
    },
    /// The files a tool call works on (its `locations`), when they changed: what follow mode
    /// opens. Only files inside the workspace are kept.
    Locations {
        /// The tool call's id.
        id: String,
        /// Its kind (`read`, `edit`, ...), as in ToolUpdated.
        kind: String,
        /// The files, first the one to show.
        locations: Vec<Location>,
    },
    /// A tool call's row, as it is now (sent on every change; replaces the row with this `id`).
    ToolUpdated {
        /// The tool call's id (the row ToolStarted opened).
        id: String,
        /// Its title as the agent last sent it.
        title: String,
        /// `pending` | `in_progress` | `completed` | `failed`.
        status: String,
        /// `read` | `edit` | `delete` | `move` | `search` | `execute` | `think` | `fetch` |
        /// `switch_mode` | `other`.
        kind: String,
        /// The call's content as text: text blocks, diffs as unified diffs, a terminal's output
        /// so far (`[terminal ID]` for one we never made).
        output: String,
        /// A terminal it embeds still runs: the chat shows the output's last lines under the
        /// row, unfolded, until it ends.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        running: bool,
    },
    /// A user message of a session the agent replays for `session/load`, whole: shown as the
    /// prompt it was, so it is named `prompt` on the wire, as the Neovim protocol's
    /// own prompt of a resumed conversation is. A live turn reports none.
    #[serde(rename = "prompt")]
    UserMessage { text: String },
    /// The session's modes (`modes`, `current_mode_update`), whole: the current one's id and
    /// every mode offered. `:Agent mode` chooses one.
    Modes {
        current: String,
        modes: Vec<Offered>,
    },
    /// The session's config options (`configOptions`, `config_option_update`), whole.
    /// `:Agent option` chooses a value; `:Agent model` one of the option about the model.
    Options { options: Vec<ConfigOption> },
    /// How full the agent's context is and what the session has cost (`usage_update`).
    ContextUsage {
        /// Tokens in the context now.
        used: u64,
        /// The context window's size in tokens.
        size: u64,
        /// The session's cost so far, when the agent says.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<AgentCost>,
    },
    /// The conversation's title as the agent names it (`session_info_update`); None clears it.
    Title { title: Option<String> },
    /// Something the agent wants the person to know now (`notice`): `severity` is `info`,
    /// `warning` or `error` (another one is kept as `info`), `title` stands alone, and
    /// `description` says more when there is more.
    #[serde(rename = "agent_notice")]
    Notice {
        severity: String,
        title: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    /// Files the agent changed, created or deleted by itself during the turn, not through
    /// `fs/write_text_file` (so no path check or picker saw them): each listed once a turn,
    /// compared with `checkpoint`, the checkpoint taken before the turn, whose versions of
    /// these files an undo restores. `sandboxed`: the agent runs in the sandbox (otherwise the
    /// chat recommends it).
    OutsideChanges {
        agent: String,
        checkpoint: String,
        files: Vec<OutsideFile>,
        #[serde(default)]
        sandboxed: bool,
    },
    /// The agent wants a login (`needed`, with the methods it offers: `:Agent login` picks one),
    /// or has one now, or none any more (`needed` false, `message` saying which).
    Login {
        needed: bool,
        message: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        methods: Vec<AuthChoice>,
    },
    /// The agent's own slash commands (`available_commands_update`), the whole list each time:
    /// the chat's input completes them after `/`, and sends `/name args` to the agent as typed.
    Commands { commands: Vec<AgentCommand> },
}

/// One file of [`AgentUpdate::OutsideChanges`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutsideFile {
    /// Relative to the workspace root, as on disk: what an undo names (never put on screen).
    pub path: String,
    /// The path as a person reads it (made visible by the front end).
    pub shown: String,
    /// `A` created, `M` changed, `D` deleted.
    pub status: String,
}

/// One way to log in that the agent offers (`authMethods` of its initialize answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthChoice {
    /// The agent's id for it.
    pub id: String,
    /// Its label.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A terminal method: the front end runs the agent's own command with `args` and `env` in
    /// a terminal, and starts the agent again once that exits 0. Otherwise the agent logs in
    /// itself when told to (`authenticate`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminal: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<(String, String)>,
}

/// What a session has cost, as the agent counts it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentCost {
    /// The total so far.
    pub amount: f64,
    /// Its unit: `USD`, `EUR`, or another such as `credits`.
    pub currency: String,
}

/// One of the agent's slash commands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCommand {
    /// Its name, without the `/`.
    pub name: String,
    /// What it does, as the agent says.
    pub description: String,
    /// What to type after it, when it takes input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// A file a tool call works on ([`AgentUpdate::Locations`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// Absolute, links resolved, inside the workspace.
    pub path: String,
    /// The line (1-based), when the agent named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanEntry {
    /// What the step is.
    pub content: String,
    /// `pending` | `in_progress` | `completed`.
    pub status: String,
    /// `high` | `medium` | `low`.
    pub priority: String,
}

/// One value a person can pick (a mode, or one value of a select option).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offered {
    /// The agent's id for it: sent back when chosen.
    pub id: String,
    /// Its label.
    pub name: String,
    /// What it does, when the agent says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// One of the session's config options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigOption {
    /// The agent's id for it.
    pub id: String,
    /// Its label.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `model`, `mode`, `thought_level`, ... (what it is about; the chat shows a model option
    /// as the model, a mode option as the mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// `select` or `boolean`.
    pub kind: String,
    /// Its value now: a value's id (select) or true/false (boolean).
    pub current: Value,
    /// A select option's values, groups flattened in order; none for a boolean.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<Offered>,
}

impl ConfigOption {
    /// Whether `value` is one this option takes.
    pub fn takes(&self, value: &Value) -> bool {
        match self.kind.as_str() {
            "boolean" => value.is_boolean(),
            _ => value
                .as_str()
                .is_some_and(|id| self.values.iter().any(|offered| offered.id == id)),
        }
    }
}

/// One of the agent's own sessions in this workspace, as `session/list` gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentSession {
    /// The agent's id for it, what `session/load` takes.
    pub id: String,
    /// Its title, when the agent gave one.
    pub title: Option<String>,
    /// When it was last active, in seconds since the epoch, when the agent gave a time in the
    /// ISO 8601 form the protocol names.
    pub updated: Option<u64>,
}
