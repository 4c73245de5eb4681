//! Every message that crosses the Rust/Lua boundary, declared once. Lua's side of it is
//! `lua/agent/rpc/` (`wire.lua` sends, `init.lua` receives, `buffers.lua` answers the queries);
//! keep the two in step (and bump [`PROTOCOL`] when a shape changes).
//!
//! Direction Lua → Rust: msgpack-RPC notifications on the job channel (`vim.rpcnotify`), so
//! Neovim's loop never waits on the backend. Method names are [`method`]'s constants; each takes
//! one map argument, decoded into the struct named beside it. Every map carries `conversation`,
//! the number Lua gave the conversation it is for (one backend serves them all; a map without
//! it is for conversation 1), except `decide` and `proposal`, whose question knows its own.
//!
//! Direction Rust → Lua: `nvim_exec_lua` of one of [`lua`]'s entry points: [`lua::RECEIVE`] with
//! a batch of [`UiEvent`] maps at most once a frame, each with the `conversation` whose chat
//! shows it, and the buffer queries.
//!
//! Maps sent to Lua never hold nil: a field that is absent is left out (an `Option` that is None
//! is skipped, and the pump drops any null left in a map), so Lua reads `nil`, never `vim.NIL`.

use serde::{Deserialize, Serialize};

use crate::acp::PermissionChoice;
use crate::display::{self, Layout};
use agent_nvim_vocab::approval::{Action, Decision};
use agent_nvim_vocab::conversation::AgentUpdate;
use agent_nvim_vocab::events::Event;

/// Decodes the one map argument of a message.
pub(super) fn arg<T: serde::de::DeserializeOwned>(
    args: Vec<rmpv::Value>,
) -> std::result::Result<T, String> {
    let first = args.into_iter().next().unwrap_or(rmpv::Value::Nil);
    rmpv::ext::from_value(first).map_err(|e| e.to_string())
}

/// An event on its way to Lua, and the conversation whose chat shows it (the pump adds it to
/// the event's map as `conversation`).
#[derive(Debug, Clone, PartialEq)]
pub struct Addressed {
    pub to: u64,
    pub event: UiEvent,
}

/// Bumped whenever a message below changes shape; Lua refuses a backend with another number and
/// says how to rebuild it.
pub const PROTOCOL: u32 = 14;

/// The Lua functions Rust calls, as the code given to `nvim_exec_lua` (`...` are its arguments).
/// Each lives in `agent.rpc` (the module Lua users and tests `require`).
pub mod lua {
    /// `receive(events)`: one frame's [`super::UiEvent`]s, in order. Returns nothing.
    pub const RECEIVE: &str = "return require('agent.rpc').receive(...)";
    /// `buffer_state(path)` → [`super::BufferState`]: whether a buffer holds the file at the
    /// resolved absolute `path`, and whether it has unsaved changes.
    pub const BUFFER_STATE: &str = "return require('agent.rpc').buffer_state(...)";
    /// `buffer_text(path)` → string or nil: the text of the loaded buffer holding `path`, unsaved
    /// changes included (an external agent's `fs/read_text_file`).
    pub const BUFFER_TEXT: &str = "return require('agent.rpc').buffer_text(...)";
    /// `reload(path)`: re-read the unmodified buffer of a file the backend wrote.
    pub const RELOAD: &str = "return require('agent.rpc').reload(...)";
    /// `checktime()`: re-read every unmodified buffer whose file changed (after a command).
    pub const CHECKTIME: &str = "return require('agent.rpc').checktime()";
    /// `files_found(seq, found)`: the answer to the `files` notification numbered `seq`.
    pub const FILES_FOUND: &str = "return require('agent.rpc').files_found(...)";
    /// `inline_text(inline)` → `{ text, stamp }` or nil: the text of the buffer inline edit
    /// `inline` works on, as it is now (saved or not), and a stamp of that version, which an
    /// `inline_proposal` carries back; nil when the buffer is gone or the edit was stopped.
    pub const INLINE_TEXT: &str = "return require('agent.inline').text(...)";
    /// `call(tool, args, root)` → string, or `{ error }`: one of the editor tools' read-only
    /// answers (`agent-nvim mcp`, `editor_tools`), its `path` already checked and absolute.
    pub const EDITOR_TOOLS: &str = "return require('agent.editor_tools').call(...)";
    /// Every entry point above, for the test that checks Lua has each one.
    pub const ALL: [&str; 8] = [
        EDITOR_TOOLS,
        RECEIVE,
        BUFFER_STATE,
        BUFFER_TEXT,
        RELOAD,
        CHECKTIME,
        FILES_FOUND,
        INLINE_TEXT,
    ];
}

/// Notification names Lua sends.
pub mod method {
    /// [`super::Start`]: configure a conversation's session. Sent first for each conversation.
    pub const START: &str = "start";
    /// [`super::Prompt`]: run a turn.
    pub const PROMPT: &str = "prompt";
    /// Only `conversation`: cancel the running turn.
    pub const CANCEL: &str = "cancel";
    /// Only `conversation`: cancel, then start a fresh conversation (history and grants
    /// forgotten).
    pub const NEW: &str = "new";
    /// [`super::Decide`]: the answer to an approval request.
    pub const DECIDE: &str = "decide";
    /// [`super::AcpStart`]: drive an external agent over ACP; prompts go to it until `new`.
    pub const ACP: &str = "acp";
    /// [`super::Files`]: the workspace's files matching what follows an `@` in the chat's input
    /// (`.gitignore` respected, fuzzy, best first; [`crate::workspace::files`]). Answered with
    /// [`super::lua::FILES_FOUND`]`(seq, found)`: a map of `files`, an array of paths relative
    /// to the root, `total`, how many files there are, and `partial`, true while the first
    /// listing is still under way (the files found so far); or of `error`. A notification,
    /// not a request: typing never waits for the backend, and a query a later one replaced
    /// (a greater `seq`) is not answered.
    pub const FILES: &str = "files";
    /// [`super::Resume`]: continue a saved conversation of this workspace with the built-in
    /// agent, or the running external agent's own session (`session/load`); the chat is sent
    /// its events again (Lua clears it first), then `resumed`.
    pub const RESUME: &str = "resume";
    /// [`super::Rewind`]: go back to before a prompt of the current conversation (its code, its
    /// history or both); answered with `rewound`, or an error saying why nothing changed.
    pub const REWIND: &str = "rewind";
    /// Only `conversation`: compact the conversation now (`:Agent compact`), as a turn of its own
    /// (refused while one runs; `cancel` stops it): a `compacted` event, or an error saying
    /// why nothing was compacted, then `idle`.
    pub const COMPACT: &str = "compact";
    /// [`super::Choose`]: choose one of the external agent's modes or a config option's
    /// value (`:Agent mode`, `:Agent option`, `:Agent model`); the agent's new state comes back
    /// as a `modes` or `options` event, or an error saying what can be chosen.
    pub const CHOOSE: &str = "choose";
    /// `{conversation}`: the conversation's turn stopped, its agent ended, and it is forgotten
    /// (its saved file and checkpoints stay, to resume).
    pub const CLOSE: &str = "close";
    /// [`super::Inline`]: an inline edit of some lines of a buffer (`:Agent edit`), a turn of
    /// its own outside the conversation's history; its proposals come back as
    /// `inline_proposal`, what it does as `inline_status`, its end as `inline_done`.
    pub const INLINE: &str = "inline";
    /// `{conversation, inline}`: stop inline edit `inline` (its open proposal ends unapplied).
    pub const INLINE_STOP: &str = "inline_stop";
    /// [`super::InlineAnswer`]: what the person did with each hunk of an `inline_proposal`.
    /// Like `decide`, it names its question, which knows its conversation.
    pub const INLINE_ANSWER: &str = "inline_answer";
    /// `{conversation, title}`: the person named the conversation (`:Agent name`): its saved
    /// file is listed by that title from now on.
    pub const RENAME: &str = "rename";
    /// [`super::Btw`]: a side question (`:Agent btw`), answered apart from the conversation:
    /// its answer comes as `btw_text` events, then `btw_done`.
    pub const BTW: &str = "btw";
    /// [`super::BranchSwitch`]: at a prompt of the current conversation, switch to another of
    /// its branches (`[` / `]` in the chat, `:help agent-branches`): the chat is drawn again as
    /// that branch (`clear`, its events, `branches`), or an error says why nothing changed.
    /// Refused while a turn runs.
    pub const BRANCH: &str = "branch";
    /// [`super::ElicitAnswer`]: the person's answer to an `elicitation` (an external agent's
    /// form or URL). Like `decide`, it names its question, which knows its conversation.
    pub const ELICIT_ANSWER: &str = "elicit_answer";
    /// Every method above, for the test that checks Lua sends each one.
    pub const ALL: [&str; 19] = [
        START,
        PROMPT,
        CANCEL,
        NEW,
        DECIDE,
        ACP,
        RESUME,
        REWIND,
        FILES,
        COMPACT,
        CHOOSE,
        CLOSE,
        INLINE,
        INLINE_STOP,
        INLINE_ANSWER,
        BTW,
        RENAME,
        BRANCH,
        ELICIT_ANSWER,
    ];
}

/// Request names Lua may send (`vim.rpcrequest`, which Neovim waits for: the plugin sends only
/// those answered at once, `sessions` and `rewind_points`, and those a person is waiting on
/// anyway, the review's `changes` and `file_at`).
pub mod request {
    /// No argument; answers the backend's version (`CARGO_PKG_VERSION`).
    pub const VERSION: &str = "version";
    /// No argument, or `{ids = true}` (below); answers this workspace's saved conversations, the
    /// most recent first: an
    /// array of [`crate::sessions::Listed`] maps (`id`, `title` made visible, `updated` in
    /// seconds since the epoch, `prompts`, `tokens`, and `problem` when it cannot be resumed),
    /// and the running external agent's own sessions: maps of `id` (`agent:{name}:{its id}`),
    /// `agent` (its name), `session` (its id), `title` (empty when it gave none) and `updated`
    /// (when it gave one), or one map of `id`, `agent` and `problem` when it could not list them.
    /// `require("agent").sessions()` sends it, after `start`. With `{ids = true}`, answers
    /// only our own files' ids, most recent first, from the directory alone (no file read, no
    /// agent asked): what completing `:Agent resume ` offers.
    pub const SESSIONS: &str = "sessions";
    /// No argument; answers the current conversation's prompts a rewind can go back to, the
    /// newest first: an array of maps of `turn` (from 1), `id` (the checkpoint) and `row`
    /// (`3 · fix the failing test · 2 files changed · 4 min ago`, made visible), and first,
    /// when the last rewind of the code can be undone, a map with `undo` true, `turn` 0, `id`
    /// and `row` (`undo · the code before the last rewind · 2 files changed · just now`). An
    /// error string when checkpoints are off.
    pub const REWIND_POINTS: &str = "rewind_points";
    /// `{since}`: `prompt` (the last prompt), `all` (the conversation's first checkpoint) or a
    /// prompt checkpoint's id (a `done` row's [`super::UiEvent::Reviewable`]); answers what
    /// changed in the workspace since: a map of `checkpoint` (the id compared with now),
    /// `since` (`prompt 2 · fix the test` or `the conversation began`, made visible) and
    /// `files`, an array of maps of `path` (as on disk), `shown` (made visible), `status`
    /// (`A`, `M`, `D`) and `added`/`removed` line counts, or `binary = true`. An error string
    /// when checkpoints are off or nothing can be counted from.
    pub const CHANGES: &str = "changes";
    /// `{checkpoint, path}`: the text `path` had at the checkpoint, `{text}` (its bytes, at most
    /// 1 MiB), or `{missing = true}` when it had no such file; an error string for a binary or
    /// larger file.
    pub const FILE_AT: &str = "file_at";
    /// No argument, or `{remove = RULE}`. Answers the rules in force for this workspace: a map
    /// of `rules`, an array of maps of `rule` (as written, made visible), `origin`
    /// (`permissions.allow` / `.ask` / `.deny` for `setup()`'s, `saved` for those "Allow always
    /// in this project" saved) and `removable` (true for saved ones), and `file`, where saved
    /// rules are kept (absent without a state directory). With `remove`, first removes that
    /// saved rule (an error string when it is not a saved rule of this workspace).
    pub const PERMISSIONS: &str = "permissions";
    /// `{id}`: what the open approval `id` lets the person change before allowing ("Edit before
    /// allowing"): for an edit, a map of `kind = "file"`, `rel` (made visible), `now` (the file
    /// as it is; absent for a create) and `proposed` (the whole file as the edit leaves it);
    /// for a command, `kind = "command"` and `command`. The texts are exact, not made visible:
    /// they go into buffers, never to the screen raw. An error string once the question is
    /// answered or cancelled.
    pub const PROPOSAL: &str = "proposal";
    /// `{name}`: the model the following prompts use (`:Agent model NAME`), set at once, even
    /// while a turn runs (which finishes on the model it began with). Answers `name`; an error
    /// string for a conversation that chooses its own (an external agent) or a name that is
    /// empty or more than one line.
    pub const MODEL: &str = "model";
    /// No argument; answers the models `:Agent model` offers for the built-in conversation's
    /// provider: a map of `models`, the names of the model table's entries for it and, for
    /// Ollama, those the local server lists (`GET /api/tags`), and `problem` when that server
    /// could not be asked (made visible). An error string before `start` or without a provider.
    pub const MODELS: &str = "models";
    /// [`super::Attach`]: what a prompt attaches, one answer per item in order: a map of
    /// `label` (`@ src/calc.py`, made visible), `text` (what the model reads: clamped as
    /// read_file clamps, keys redacted), `shown` (that text made visible, for the chat),
    /// `chars`, and `truncated` / `unsaved` (a buffer's unsaved text) when true; `{missing =
    /// true}` for a path that is no file (nothing is attached); `{label, problem}` for a path
    /// refused or unreadable, as read_file words it, or left out once the attachments before
    /// it hold 100,000 characters (`context::MAX_TOTAL_CHARS`).
    pub const ATTACH: &str = "attach";
    /// `{action, force?}` about the conversation's own worktree (`:Agent new --worktree`):
    /// `changes` answers `{branch, base, dir, top, files}` (each file `{status, path}`, what it
    /// changed since the commit it started from, paths from its top, made visible); `merge`
    /// brings those changes into the main working tree's files and answers `{branch, files}`,
    /// or why nothing was merged (files that changed there too, or that have unsaved changes in
    /// Neovim, are named); `remove` deletes it (its branch stays) and answers `{removed =
    /// true}`, or `{unmerged = N}` without `force` when it holds changes not merged.
    pub const WORKTREE: &str = "worktree";
    /// No argument; answers every live conversation's age, as `:Agent list` shows it: an array
    /// of `{conversation, age}` (`4 min ago`, worded as every age is, [`crate::display::age_at`]).
    pub const CONVERSATIONS: &str = "conversations";
    /// No argument but `conversation`: the conversation as markdown (`:Agent export`),
    /// `{ id, markdown }`, from its saved file; an error saying why when it has none.
    pub const EXPORT: &str = "export";
    /// `{id, title}`: names saved conversation `id` `title` (the resume list's rename);
    /// answers the title.
    pub const SESSION_RENAME: &str = "session_rename";
    /// `{id}`: deletes saved conversation `id`: its file, its note and its checkpoints' refs
    /// (refused while it is open); answers what was done.
    pub const SESSION_DELETE: &str = "session_delete";
    /// `{conversation, turn?, title, code?}`: a fork of the conversation's saved file, holding
    /// what came before prompt `turn` (all of it without one), named `title`; answers
    /// `{ id }`, the new file's id, which Lua resumes in a new conversation, and with `code`
    /// `checkpoint`, the files then (that prompt's checkpoint, or a snapshot of now), for the
    /// new conversation's worktree to `adopt`. The original goes on unchanged.
    pub const FORK: &str = "fork";
    /// [`super::Adopt`]: conversation `from`'s checkpoint restored into this conversation's own
    /// worktree (`fork with code`); answers what was done.
    pub const ADOPT: &str = "adopt";
    /// `{conversation, turn}`: the text prompt `turn` of the current branch was sent with
    /// (attachments included), for editing it into a new branch (`e` in the chat); an error
    /// string for a conversation whose history is not agent.nvim's or a prompt it lacks.
    pub const PROMPT_TEXT: &str = "prompt_text";
    /// `{checkpoint, paths}`: undoes what an external agent changed by itself (an
    /// `outside_changes` row's `u`): those files alone (relative to the root, as on disk) put
    /// back as the checkpoint had them; answers the message to show (`agent: 2 files put back
    /// as they were before the turn`), or why nothing was (a file with unsaved changes).
    pub const UNDO_OUTSIDE: &str = "undo_outside";
}

/// `files`: what to match.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Files {
    /// The query's number, greater for each query Lua sends; the answer carries it.
    pub seq: u64,
    /// What follows the `@` (empty: the first files).
    #[serde(default)]
    pub query: String,
    /// How many matches to answer; nil: 50.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `attach`: the items a prompt attaches, each decoded on its own ([`AttachItem::decode`]), so
/// one that is not what it should be (text that is not UTF-8) spoils only itself.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Attach {
    pub items: Vec<rmpv::Value>,
    /// The chat draws pictures (snacks.nvim, image.nvim): an image is saved as it is attached,
    /// and its answer says where (`file`).
    #[serde(default)]
    pub preview: bool,
}

/// One item of [`Attach`]: a file by its path (`@path`, `#buffer`'s file), read through the
/// path check, or text Lua gathered (`#selection`, `#diagnostics`, `#quickfix`) with its label.
#[derive(Debug, Clone, PartialEq)]
pub enum AttachItem {
    Path {
        path: String,
    },
    Text {
        label: String,
        text: String,
    },
    /// The clipboard's image, read by running `argv` (`wl-paste --type image/png`, ...: Lua
    /// picks the tool that is there).
    Clipboard {
        argv: Vec<String>,
    },
    /// An image attached earlier (pasted into the input), by the number its answer gave.
    Held {
        image: u64,
    },
}

impl AttachItem {
    /// A map of `path`, or of `label` and `text`; bytes that are not UTF-8 (a Latin-1 buffer)
    /// become U+FFFD. None for anything else.
    pub fn decode(value: &rmpv::Value) -> Option<AttachItem> {
        let field = |name: &str| {
            // A string that is not UTF-8 reaches here as a string, or (through serde, as the
            // request's argument is decoded) as bytes.
            value.as_map()?.iter().find_map(|(k, v)| match v {
                rmpv::Value::String(s) if k.as_str() == Some(name) => {
                    Some(String::from_utf8_lossy(s.as_bytes()).into_owned())
                }
                rmpv::Value::Binary(b) if k.as_str() == Some(name) => {
                    Some(String::from_utf8_lossy(b).into_owned())
                }
                _ => None,
            })
        };
        let map = value.as_map()?;
        let entry = |name: &str| {
            map.iter()
                .find(|(k, _)| k.as_str() == Some(name))
                .map(|(_, v)| v)
        };
        if let Some(argv) = entry("clipboard").and_then(rmpv::Value::as_array) {
            let argv: Option<Vec<String>> =
                argv.iter().map(|a| a.as_str().map(String::from)).collect();
            return argv
                .filter(|argv| !argv.is_empty())
                .map(|argv| AttachItem::Clipboard { argv });
        }
        if let Some(image) = entry("image").and_then(rmpv::Value::as_u64) {
            return Some(AttachItem::Held { image });
        }
        match (field("path"), field("label"), field("text")) {
            (Some(path), _, _) => Some(AttachItem::Path { path }),
            (None, Some(label), Some(text)) => Some(AttachItem::Text { label, text }),
            _ => None,
        }
    }
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
    /// `setup({ api_key = ... })`: the provider's key, over its environment variable.
    #[serde(default)]
    pub api_key: Option<crate::llm::ApiKey>,
    /// `setup({ api_key_cmd = { ... } })`: the program and arguments that print the key, run by
    /// the backend when the first request needs it.
    #[serde(default)]
    pub api_key_cmd: Option<Vec<String>>,
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
    /// The most the conversation may cost, in dollars; nil: no limit.
    #[serde(default)]
    pub max_cost: Option<f64>,
    /// Key variables run_bash's commands get anyway; nil or empty: none.
    #[serde(default)]
    pub pass_env: Option<Vec<String>>,
    /// The largest file edit_file handles, in MB; nil: 64.
    #[serde(default)]
    pub max_edit_mb: Option<u64>,
    /// Where the backend keeps what outlives it (sessions, checkpoints): Neovim's
    /// `stdpath("state") .. "/agent"`; nil: nothing is kept.
    #[serde(default)]
    pub state_dir: Option<String>,
    /// `setup({ permissions = ... })`: the rules, as the person wrote them. Each entry is kept
    /// as sent (a rule that is not a string is refused by name, not dropped).
    #[serde(default)]
    pub permissions: Option<Permissions>,
    /// `setup({ sandbox = ... })`: run_bash's sandbox; nil: the default (workspace-write,
    /// network allowed).
    #[serde(default)]
    pub sandbox: Option<SandboxOptions>,
    /// Run commands without asking while the sandbox is in force.
    #[serde(default)]
    pub auto_allow_sandboxed: bool,
    /// `setup({ instructions = ... })`: the file names the project's instructions are looked
    /// for under, in order; empty (`false` in setup): none; nil: AGENTS.md, then CLAUDE.md.
    #[serde(default)]
    pub instructions: Option<Vec<String>>,
    /// `setup({ thinking = ... })`: the Anthropic thinking budget in tokens, 0 for off
    /// (`false`); nil: on for the models that think.
    #[serde(default)]
    pub thinking: Option<u32>,
    /// `setup({ reasoning = { effort = ... } })`: OpenAI's reasoning effort; nil: not sent.
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// `setup({ openai = { api = ... } })`: `chat` or `responses`; nil: Chat Completions except
    /// for the models served only through the Responses API.
    #[serde(default)]
    pub openai_api: Option<String>,
    /// `setup({ models = { [name] = { ... } } })`: the entries by name (the list of names
    /// stays in Lua, for `:Agent model`).
    #[serde(default)]
    pub models: Option<std::collections::BTreeMap<String, ModelOptions>>,
    /// `setup({ compact_at = ... })`: the share of the window that starts a compaction, 0
    /// (`false`) for never by itself; nil: 0.8.
    #[serde(default)]
    pub compact_at: Option<f64>,
    /// `setup({ keep_turns = ... })`: the prompt-answer pairs a compaction keeps; nil: 4.
    #[serde(default)]
    pub keep_turns: Option<u32>,
    /// `:Agent new --worktree [BRANCH]`: the conversation works in a git worktree of its own
    /// (made now, on a new branch) instead of the workspace; absent: in the workspace.
    #[serde(default)]
    pub worktree: Option<WorktreeStart>,
}

/// [`Start::worktree`].
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct WorktreeStart {
    /// The new branch's name; absent: `agent/<date>-<time>`.
    #[serde(default)]
    pub branch: Option<String>,
    /// Where worktrees are made (`worktrees.dir`); absent: `<state_dir>/worktrees`.
    #[serde(default)]
    pub dir: Option<String>,
}

/// One entry of [`Start::models`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ModelOptions {
    /// The context window in tokens.
    #[serde(default)]
    pub context: Option<u64>,
    /// Dollars per million tokens.
    #[serde(default)]
    pub price: Option<PriceOptions>,
    /// Whether it takes images (false: a prompt with images is refused before sending).
    #[serde(default)]
    pub images: Option<bool>,
}

/// [`ModelOptions::price`]: the cache prices default to the input price.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PriceOptions {
    pub input: f64,
    pub output: f64,
    #[serde(default)]
    pub cache_write: Option<f64>,
    #[serde(default)]
    pub cache_read: Option<f64>,
}

impl Start {
    /// The model tuning these settings ask for.
    pub fn tuning(&self) -> crate::llm::Tuning {
        use crate::llm::{models::ModelEntry, OpenAiApi, Price, Thinking};
        let thinking = match self.thinking {
            None => Thinking::Auto,
            Some(0) => Thinking::Off,
            Some(n) => Thinking::Budget(n),
        };
        let models = self
            .models
            .iter()
            .flatten()
            .map(|(name, entry)| {
                let price = entry.price.as_ref().map(|p| Price {
                    input: p.input,
                    output: p.output,
                    cache_write: p.cache_write.unwrap_or(p.input),
                    cache_read: p.cache_read.unwrap_or(p.input),
                });
                let entry = ModelEntry {
                    context: entry.context.filter(|c| *c > 0),
                    price,
                    images: entry.images,
                };
                (name.clone(), entry)
            })
            .collect();
        crate::llm::Tuning {
            thinking,
            effort: self.reasoning_effort.clone().filter(|e| !e.is_empty()),
            api: self
                .openai_api
                .as_deref()
                .and_then(OpenAiApi::parse)
                .unwrap_or_default(),
            models,
        }
    }
}

/// [`Start::sandbox`], as sent: a mode that is not one of the three is refused by name (Lua
/// checks it too), never taken for another.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct SandboxOptions {
    /// `workspace-write`, `read-only` or `off`; nil: `workspace-write`.
    #[serde(default)]
    pub mode: Option<String>,
    /// false: TCP connect and bind are blocked; nil: allowed.
    #[serde(default)]
    pub network: Option<bool>,
    /// More places commands may write; nil or empty: none.
    #[serde(default)]
    pub writable: Option<Vec<String>>,
}

impl SandboxOptions {
    /// The sandbox, or the error naming a mode that is not one.
    pub fn sandbox(&self) -> Result<crate::sandbox::Sandbox, OptionError> {
        use crate::sandbox::{Mode, Sandbox};
        let mode = match self.mode.as_deref() {
            None => Mode::default(),
            Some(name) => Mode::parse(name).ok_or_else(|| OptionError::SandboxMode {
                got: name.to_string(),
            })?,
        };
        Ok(Sandbox {
            mode,
            network: self.network.unwrap_or(true),
            writable: self
                .writable
                .iter()
                .flatten()
                .map(std::path::PathBuf::from)
                .collect(),
        })
    }
}

/// The `allow`, `ask` and `deny` lists of [`Start::permissions`], as sent: what is not a list of
/// strings is refused by name, never dropped.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct Permissions {
    #[serde(default)]
    pub allow: serde_json::Value,
    #[serde(default)]
    pub ask: serde_json::Value,
    #[serde(default)]
    pub deny: serde_json::Value,
}

impl Permissions {
    /// The rules, or the error naming the first that cannot be read.
    pub fn rules(&self) -> Result<crate::permissions::Rules, OptionError> {
        let texts =
            |list: &serde_json::Value, name: &'static str| -> Result<Vec<String>, OptionError> {
                let items = match list {
                    serde_json::Value::Null => return Ok(Vec::new()),
                    serde_json::Value::Array(items) => items,
                    // An empty Lua table may arrive as a map.
                    serde_json::Value::Object(map) if map.is_empty() => return Ok(Vec::new()),
                    other => {
                        return Err(OptionError::NotAList {
                            list: name,
                            got: other.clone(),
                        })
                    }
                };
                items
                    .iter()
                    .map(|rule| match rule.as_str() {
                        Some(text) => Ok(text.to_string()),
                        None => Err(OptionError::NotARule {
                            list: name,
                            rule: rule.clone(),
                        }),
                    })
                    .collect()
            };
        Ok(crate::permissions::Rules::parse(
            &texts(&self.allow, "allow")?,
            &texts(&self.ask, "ask")?,
            &texts(&self.deny, "deny")?,
        )?)
    }
}

/// Why a `sandbox` or `permissions` option `start` sent cannot be used, as the person reads it.
#[derive(Debug, thiserror::Error)]
pub enum OptionError {
    /// `sandbox.mode` names no mode.
    #[error(
        "agent: `sandbox.mode` should be {}, got {got:?}",
        crate::sandbox::Mode::NAMES
    )]
    SandboxMode { got: String },
    /// `permissions.{list}` is not a list.
    #[error("agent: permissions.{list} should be a list of rules, got {got}")]
    NotAList {
        list: &'static str,
        got: serde_json::Value,
    },
    /// `permissions.{list}` holds something other than a string.
    #[error(
        "agent: permissions.{list} holds {rule}, which is not a rule: write run_bash(PATTERN) or edit_file(GLOB)"
    )]
    NotARule {
        list: &'static str,
        rule: serde_json::Value,
    },
    /// A rule's text cannot be read.
    #[error("agent: {0}")]
    Rule(#[from] crate::permissions::RuleError),
}

/// One prompt's branches ([`UiEvent::Branches`]): prompt `turn` of the current branch is
/// branch `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BranchMark {
    pub turn: u64,
    pub index: u64,
    pub count: u64,
}

impl From<crate::sessions::BranchAt> for BranchMark {
    fn from(at: crate::sessions::BranchAt) -> Self {
        BranchMark {
            turn: at.turn as u64,
            index: at.index as u64,
            count: at.count as u64,
        }
    }
}

/// `prompt`: what the user asked, context included.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Prompt {
    /// The text sent to the model.
    pub text: String,
    /// The images and audio clips it holds, by the numbers `attach` answered for them.
    #[serde(default)]
    pub images: Vec<u64>,
    /// Sent as a new branch from before the current branch's prompt this number
    /// (`:help agent-branches`): the branch there is kept, the chat drawn again as the new one.
    #[serde(default)]
    pub branch: Option<usize>,
    /// With `branch`: that prompt is sent again as it was (`text` and `images` unused): the
    /// answer regenerated.
    #[serde(default)]
    pub again: bool,
}

/// `branch`: switch, at prompt `turn` of the current branch, to the branch `step` places after
/// it (before it when negative).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BranchSwitch {
    pub turn: usize,
    pub step: i64,
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
    /// With `allow_once` on a file's edit: the hunks of its diff the person dropped (their
    /// places in the preview, from 0), and how many the preview showed. Only the others are
    /// written, and the model is told what was left out.
    #[serde(default)]
    pub dropped: Option<Vec<usize>>,
    #[serde(default)]
    pub hunks: Option<usize>,
}

/// `inline`: edit some lines of a file in its buffer (`:Agent edit`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Inline {
    /// The number Lua gave this edit; its events carry it.
    pub inline: u64,
    /// The file's absolute path (checked to be inside the workspace here).
    pub path: String,
    /// The lines asked about, 1-based, inclusive.
    pub first: u64,
    pub last: u64,
    /// What to change.
    pub instruction: String,
    /// Those lines and some around them, each as `12: text`, from the buffer.
    pub excerpt: String,
    #[serde(default)]
    pub filetype: String,
    /// The diagnostics on those lines, each as `line 12: error: message`.
    #[serde(default)]
    pub diagnostics: Vec<String>,
    /// `setup({ inline = { provider, model } })`: another provider or model for these edits;
    /// nil: the conversation's.
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
}

/// `rename` and `session_rename`: a conversation's new title (and for the latter, which saved
/// one).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Rename {
    #[serde(default)]
    pub id: Option<String>,
    pub title: String,
}

/// `fork`: from before which prompt, the fork's title, and whether its files go too (`fork
/// with code`: the answer then names the checkpoint to `adopt`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Fork {
    #[serde(default)]
    pub turn: Option<usize>,
    pub title: String,
    #[serde(default)]
    pub code: bool,
}

/// `adopt`: conversation `from`'s checkpoint `checkpoint`, restored into this conversation's
/// worktree.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Adopt {
    pub from: u64,
    pub checkpoint: String,
    /// The fork's saved file, moved to this conversation's store (a worktree's conversations
    /// are listed apart).
    #[serde(default)]
    pub session: Option<String>,
}

/// `btw`: a side question about the conversation, numbered by Lua.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Btw {
    pub id: u64,
    pub question: String,
}

/// `inline_stop`: which inline edit to stop.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InlineStop {
    pub inline: u64,
}

/// An elicitation as Lua may show it: its message, titles, descriptions, choice titles, string
/// defaults and URL made visible.
fn shown_elicitation(asked: crate::acp::elicit::Elicitation) -> crate::acp::elicit::Elicitation {
    use crate::acp::elicit::{Ask, Choice, Field, Kind};
    let one = |s: String| display::visible_owned(s, Layout::OneLine);
    let prose = |s: String| display::visible_owned(s, Layout::Prose);
    let choices = |options: Vec<Choice>| -> Vec<Choice> {
        options
            .into_iter()
            .map(|c| Choice {
                title: display::one_line(&c.title),
                ..c
            })
            .collect()
    };
    let ask = match asked.ask {
        Ask::Form {
            title,
            description,
            fields,
        } => Ask::Form {
            title: title.map(one),
            description: description.map(prose),
            fields: fields
                .into_iter()
                .map(|field| Field {
                    title: display::one_line(&field.title),
                    // One line: the form draws it under its field.
                    description: field.description.map(one),
                    default: field.default.map(|value| match value {
                        serde_json::Value::String(text) => serde_json::Value::String(one(text)),
                        other => other,
                    }),
                    kind: match field.kind {
                        Kind::Choice { options } => Kind::Choice {
                            options: choices(options),
                        },
                        Kind::Many { options, min, max } => Kind::Many {
                            options: choices(options),
                            min,
                            max,
                        },
                        other => other,
                    },
                    ..field
                })
                .collect(),
        },
        Ask::Url {
            url,
            host,
            elicitation_id,
        } => Ask::Url {
            url: one(url),
            host: one(host),
            elicitation_id,
        },
    };
    crate::acp::elicit::Elicitation {
        agent: display::one_line(&asked.agent),
        message: prose(asked.message),
        ask,
    }
}

/// `elicit_answer`: the person's answer to the `elicitation` with the same `question`:
/// `accept` (with `content`, the form's values by field name; nothing for a URL), `decline` or
/// `cancel`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ElicitAnswer {
    pub question: u64,
    pub action: String,
    #[serde(default)]
    pub content: Option<serde_json::Value>,
}

impl ElicitAnswer {
    /// As the ACP client takes it; None for an action it does not know (the agent is then
    /// answered `cancel`). An empty list is Lua's empty map.
    pub fn elicited(self) -> Option<crate::acp::elicit::Elicited> {
        use crate::acp::elicit::Elicited;
        match self.action.as_str() {
            "accept" => match self.content {
                Some(serde_json::Value::Object(content)) => Some(Elicited::Accept(content)),
                None | Some(serde_json::Value::Array(_)) => {
                    Some(Elicited::Accept(serde_json::Map::new()))
                }
                Some(_) => None,
            },
            "decline" => Some(Elicited::Decline),
            "cancel" => Some(Elicited::Cancel),
            _ => None,
        }
    }
}

/// `inline_answer`: the person's answer to the `inline_proposal` with the same `question`:
/// `kept`, `dropped`, `stale` or `failed` (could not be applied) for each of its hunks, in order.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InlineAnswer {
    pub question: u64,
    pub hunks: Vec<String>,
}

impl InlineAnswer {
    /// Each hunk's fate; None for any word but `kept`, `dropped`, `stale` and `failed` (the answer is
    /// then about no hunk, and nothing is applied).
    pub fn kept(&self) -> Option<Vec<crate::tools::inline::Kept>> {
        use crate::tools::inline::Kept;
        self.hunks
            .iter()
            .map(|word| match word.as_str() {
                "kept" => Some(Kept::Kept),
                "dropped" => Some(Kept::Dropped),
                "stale" => Some(Kept::Stale),
                "failed" => Some(Kept::Failed),
                _ => None,
            })
            .collect()
    }
}

/// One hunk of an `inline_proposal`: at line `at` (0-based, of the text with the proposal's
/// `stamp`) the lines `removed` are replaced by `added`; `shown` is `added` made visible, what
/// the buffer's virtual lines show.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InlineHunk {
    pub at: usize,
    pub removed: Vec<String>,
    pub added: Vec<String>,
    pub shown: Vec<String>,
}

/// `resume`: which saved conversation to continue.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Resume {
    /// Its id (`20261201-123456-ab12`, or `agent:{name}:{its id}` for an external agent's own
    /// session), as `sessions` listed it.
    pub id: String,
}

/// `choose`: a mode (`kind` `mode`, `id` the mode's), a config option's value (`kind`
/// `option`, `id` the option's, `value` a value's id or a boolean), a login (`kind` `login`,
/// `id` the agent's method) or a logout (`kind` `logout`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Choose {
    pub kind: String,
    pub id: String,
    #[serde(default)]
    pub value: Option<serde_json::Value>,
}

/// `rewind`: which prompt to go back to, and what to restore.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Rewind {
    /// The prompt's number, as `rewind_points` listed it (from 1); not read for `undo`.
    pub turn: usize,
    /// What to restore.
    pub mode: RewindMode,
    /// What to do with the files other live conversations of the workspace changed since that
    /// prompt, once the person was asked (`rewind_ask`): `keep` (leave them as those left
    /// them) or `restore` (put them back too). Absent: ask first when there are any.
    #[serde(default)]
    pub others: Option<Others>,
}

/// The person's answer about other conversations' later changes (`Rewind::others`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum Others {
    Keep,
    Restore,
}

impl TryFrom<String> for Others {
    type Error = String;
    fn try_from(word: String) -> std::result::Result<Self, String> {
        match word.as_str() {
            "keep" => Ok(Others::Keep),
            "restore" => Ok(Others::Restore),
            other => Err(format!("others should be keep or restore, not {other:?}")),
        }
    }
}

/// What a rewind restores (the choices `Code and conversation`, `Code only`, `Conversation
/// only`), or `undo`: the string `both`, `code`, `conversation` or `undo` (read through a
/// `String`, since rmpv decodes no enum from a bare string).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum RewindMode {
    /// The files and the history.
    Both,
    /// The files only: the history goes on.
    Code,
    /// The history only: the files stay as they are.
    Conversation,
    /// The files as they were before the last rewind of the code (`rewind_points`' `undo`
    /// row): the rewind undone. The history is not put back.
    Undo,
}

impl TryFrom<String> for RewindMode {
    type Error = NotARewindMode;

    fn try_from(mode: String) -> Result<Self, NotARewindMode> {
        match mode.as_str() {
            "both" => Ok(RewindMode::Both),
            "code" => Ok(RewindMode::Code),
            "conversation" => Ok(RewindMode::Conversation),
            "undo" => Ok(RewindMode::Undo),
            _ => Err(NotARewindMode(mode)),
        }
    }
}

/// A `rewind` whose mode is none of [`RewindMode`]'s.
#[derive(Debug, thiserror::Error)]
#[error("mode should be both, code, conversation or undo, not '{0}'")]
pub struct NotARewindMode(String);

impl RewindMode {
    /// The word Lua sends for it.
    pub fn word(self) -> &'static str {
        match self {
            RewindMode::Both => "both",
            RewindMode::Code => "code",
            RewindMode::Conversation => "conversation",
            RewindMode::Undo => "undo",
        }
    }

    /// Whether the files are put back.
    pub fn code(self) -> bool {
        matches!(self, RewindMode::Both | RewindMode::Code)
    }

    /// Whether the history is cut.
    pub fn conversation(self) -> bool {
        matches!(self, RewindMode::Both | RewindMode::Conversation)
    }
}

/// `acp`: which external agent to start.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AcpStart {
    /// A configured name or a preset (`lua/agent/acp_presets.json`).
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
    /// `acp.agents.NAME.sandbox = true`: start the agent inside the session's sandbox.
    #[serde(default)]
    pub sandbox: bool,
    /// `acp.agents.NAME.directories`: more roots for the agent's session, each read-only unless
    /// `writable`. A relative path is the workspace root's; `~/` is the home directory.
    #[serde(default)]
    pub directories: Option<Vec<AcpDirectory>>,
    /// Once connected, load the agent's session of this id (`session/load`): a fork's.
    #[serde(default)]
    pub load: Option<String>,
    /// `mcp_servers` (setup's, and the agent's own over them by name): handed to the agent.
    #[serde(default)]
    pub mcp_servers: Option<Vec<McpConf>>,
    /// `editor_tools`: the agent is handed `agent-nvim mcp`, the editor's read-only tools.
    #[serde(default)]
    pub editor_tools: bool,
}

/// One of [`AcpStart::mcp_servers`]: a stdio server (`command`, `args`, `env`) or a remote one
/// (`url`, `headers`, `type` `http` (the default) or `sse`). The values of `env` and `headers`
/// are never logged: its `Debug` shows their names only.
#[derive(Clone, PartialEq, Eq, Deserialize)]
pub struct McpConf {
    pub name: String,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    #[serde(default, rename = "type")]
    pub transport: Option<String>,
}

impl std::fmt::Debug for McpConf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConf")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env (names)", &self.env.keys().collect::<Vec<_>>())
            .field("url", &self.url)
            .field("headers (names)", &self.headers.keys().collect::<Vec<_>>())
            .field("type", &self.transport)
            .finish()
    }
}

/// One of [`AcpStart::directories`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AcpDirectory {
    pub path: String,
    #[serde(default)]
    pub writable: bool,
}

/// What an approval's preview shows. Serialized with a `kind` field.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Preview {
    /// An edit: the file and its diff.
    Diff {
        /// The file, relative to the workspace (an external agent's request names none: its
        /// tool call's title).
        path: String,
        /// The diff's preview lines ([`display::diff_lines`]) joined by newlines.
        unified: String,
    },
    /// A command: its preview lines ([`display::preview_lines`]) joined by newlines, where it
    /// runs, and its timeout in seconds (absent for an external agent's command, whose timeout
    /// is the agent's business).
    Command {
        command: String,
        cwd: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        timeout: Option<f64>,
    },
    /// Nothing to show but the title.
    None,
}

/// Who offers the choices of an approval. Serialized with a `kind` field.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Choices {
    /// The built-in tools' five choices ([`Choice::builtin`]), in order.
    Builtin { choices: Vec<Choice> },
    /// An external agent's own options (ACP), in the agent's order; the picked one's id is
    /// echoed in `decide.option`. `cancel` labels the choice the picker adds for Esc when the
    /// agent offers no reject of its own.
    Agent {
        options: Vec<PermissionChoice>,
        cancel: String,
        /// The label of "Edit before allowing" (`e`), when the agent's edit can be changed.
        #[serde(skip_serializing_if = "Option::is_none")]
        edit: Option<String>,
    },
}

impl Choices {
    /// An external agent's `options`, with the cancel label for when none of them rejects, and
    /// whether "Edit before allowing" is offered (its label, when it is).
    pub fn agent(options: Vec<PermissionChoice>, editable: bool) -> Self {
        Choices::Agent {
            options,
            cancel: display::label::CANCEL.into(),
            edit: editable.then(|| display::label::EDIT.to_string()),
        }
    }
}

/// One of the built-in choices: the entry of `keymaps.approval` that picks it, and its label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Choice {
    /// `allow_once` | `allow_session` | `allow_project` | `allow_all` | `edit` | `refuse` | `refuse_with_reason` (a refusal
    /// that asks for the reason first).
    pub key: String,
    /// What the picker shows.
    pub label: String,
}

impl Choice {
    /// The built-in choices for a request whose session grant would cover `action`, in the
    /// picker's order (SPEC section 4); the session one is named for its scope
    /// ([`display::session_choice`]).
    pub fn builtin(action: &Action, editable: bool) -> Vec<Choice> {
        let session = display::session_choice(action);
        let project = display::project_choice(action);
        [
            ("allow_once", display::label::ALLOW_ONCE),
            ("allow_session", session.as_str()),
            ("allow_project", project.as_str()),
            ("allow_all", display::label::ALLOW_ALL),
            ("edit", display::label::EDIT),
            ("refuse", display::label::REFUSE),
            ("refuse_with_reason", display::label::REFUSE_WITH_REASON),
        ]
        .into_iter()
        .filter(|(key, _)| editable || *key != "edit")
        .map(|(key, label)| Choice {
            key: key.into(),
            label: label.into(),
        })
        .collect()
    }
}

/// What Rust tells Lua, in order. Serialized as a map with a `type` field: the variants below,
/// plus the turn loop's own [`Event`]s (`turn_started`, `text`, `tool_started`, `tool_finished`,
/// `retrying`, `usage`, `turn_done`, `error`) and an external agent's [`AgentUpdate`]s (`thought`,
/// `plan`, `tool_updated`), each written as its own map.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum UiEvent {
    /// `start` succeeded. `sandbox`: what run_bash's sandbox enforces
    /// ([`crate::sandbox::Report::summary`]); `sandbox_warnings`: what the person should know
    /// about it (no Landlock, a rule this kernel cannot enforce), shown once as a warning.
    Started {
        version: String,
        protocol: u32,
        provider: String,
        model: String,
        /// The provider's default model (empty without a provider).
        default_model: String,
        /// The base URL requests go to (empty without a provider).
        base_url: String,
        /// The model table's entries for the provider, what `:Agent model` offers.
        models: Vec<String>,
        /// Why there is no provider (what to set, and where), absent when there is one: the
        /// chat of a new conversation says it.
        #[serde(skip_serializing_if = "Option::is_none")]
        unavailable: Option<String>,
        workspace: String,
        /// The branch of the conversation's own worktree (`workspace` is in it), when it has one.
        #[serde(skip_serializing_if = "Option::is_none")]
        worktree: Option<String>,
        sandbox: String,
        sandbox_warnings: Vec<String>,
    },
    /// The prompt's turn has wholly ended (saved, checkpointed): the next prompt is taken now.
    /// Sent after `turn_done`; the chat sends a queued prompt on it.
    Idle,
    /// An approval is needed: show the picker, answer with `decide`. Every string in it is a
    /// display string (made visible by [`UiEvent::shown`]): it is only shown, never used to run
    /// or grant anything.
    Approval {
        id: u64,
        /// The tool asking (`edit_file`, `run_bash`), or an external agent's tool call title.
        tool: String,
        /// The float's title: the detail on one line, or `run_bash · 62 lines`
        /// ([`display::approval_title`]).
        title: String,
        /// What the preview shows.
        preview: Preview,
        /// The choices, in the picker's order, with their labels.
        choices: Choices,
    },
    /// How an approval was answered: `decision`, `reason` with a refusal that gave one, and
    /// `note`, what the tool row records ([`display::decision_note`]). Built by
    /// [`UiEvent::decided`].
    Decided {
        id: u64,
        tool: String,
        #[serde(flatten)]
        decision: Decision,
        note: String,
    },
    /// An external agent (ACP) is connected; prompts go to it until `new`.
    AcpStarted { name: String },
    /// A prompt of a resumed conversation, shown as the user sent it (under `## You`).
    Prompt { text: String },
    /// The saved images of the prompt just shown ([`UiEvent::Prompt`]), one for each of its
    /// image rows in order ("" for one not to draw): each drawn as a picture under its row
    /// where the chat can draw pictures.
    Pictures { files: Vec<String> },
    /// A resumed conversation has been sent whole; prompts continue it. `title` is its first
    /// prompt's first line.
    Resumed { id: String, title: String },
    /// A rewind to before prompt `turn` was done. `cut`: the history was cut there (the chat
    /// shows the turns from that prompt on as cut off; a resumed conversation's replay sends
    /// this too). `message`: what was done, to tell the person (absent in a replay).
    /// `prompt`: the cut prompt's text, put back in the input (absent in a replay).
    Rewound {
        turn: usize,
        cut: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
    },
    /// A rewind of the code to before prompt `turn` (`mode`) would undo what other live
    /// conversations of the workspace changed since: `files` (relative to the root, made
    /// visible), changed by the conversations numbered `by`. Nothing was done; Lua asks the
    /// person and sends the rewind again with `others`.
    RewindAsk {
        turn: usize,
        mode: String,
        files: Vec<String>,
        by: Vec<u64>,
    },
    /// The turn just ended changed `files` files since its prompt's checkpoint `checkpoint`:
    /// its `done` row offers their diff (`changes` with that id as `since`). Sent after
    /// `turn_done`, only when something changed. For a resumed chat's older rows, `prompt` is
    /// the turn's place among the conversation's `of` prompt checkpoints (from 1): its `done`
    /// row is the one after that prompt, when the chat shows `of` prompts.
    Reviewable {
        checkpoint: String,
        files: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        of: Option<u64>,
    },
    /// A resumed conversation's finished tool row, in one event where the live one took three
    /// (`tool_started`, `decided`, `tool_finished`): `started` when its start is in it (a row
    /// of its own, as `tool_started` makes, whatever rows had the same id before), `note` what
    /// its decision recorded, and when it has output, that comes after every row is shown, in
    /// the `tool_output` with the same `later` ([`super::replay`]). Otherwise a
    /// `tool_finished`, and named so.
    #[serde(rename = "tool_finished")]
    Replayed {
        id: String,
        name: String,
        ok: bool,
        summary: String,
        started: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        later: Option<u64>,
    },
    /// The output of resumed tool row `later` (and an edit's diff), put under the row and
    /// folded with it.
    ToolOutput {
        later: u64,
        output: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<String>,
    },
    /// The chat is drawn again from here (a branch switched to, `:help agent-branches`): what
    /// it shows of the conversation is cleared; the branch's events follow.
    Clear,
    /// The prompts of the current branch that have other branches: the chat marks each
    /// (`branch 2 of 3 · [ / ]`); none clears the marks.
    Branches { at: Vec<BranchMark> },
    /// Side question `id`'s answer so far: the next piece of its text.
    BtwText { id: u64, text: String },
    /// Side question `id` is answered (`ok`), or why not; `message` is the done line
    /// (`120 in / 40 out tokens · $0.01`) or the error; `cost` what it cost in dollars, counted
    /// in the conversation's (absent when the price is unknown).
    BtwDone {
        id: u64,
        ok: bool,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<f64>,
    },
    /// Inline edit `inline` proposes `hunks` of the buffer's text with stamp `stamp`; the
    /// person keeps or drops each, and Lua answers with `inline_answer` and `question`.
    InlineProposal {
        inline: u64,
        question: u64,
        stamp: u64,
        hunks: Vec<InlineHunk>,
    },
    /// What inline edit `inline` is doing now (`reading src/a.py`), for its pending area.
    InlineStatus { inline: u64, text: String },
    /// Inline edit `inline` ended: `ok`, what to tell the person (the model's last words
    /// and the done line, or the error), and what it cost (counted in its conversation's cost;
    /// absent when unknown).
    InlineDone {
        inline: u64,
        ok: bool,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        cost: Option<f64>,
    },
    /// An external agent asks the person something (`elicitation/create`): a form to fill in
    /// (`mode = "form"`, its `fields`) or a URL to open (`mode = "url"`, its `host`); Lua
    /// answers with `elicit_answer` and `id`. Every string a person reads in it is made
    /// visible; field names and choice values, echoed back, are left alone.
    Elicitation {
        id: u64,
        #[serde(flatten)]
        asked: crate::acp::elicit::Elicitation,
    },
    /// Elicitation `id` is over without the person's answer (its turn ended, or the agent
    /// said it is complete): its float closes.
    ElicitationClosed { id: u64 },
    /// What the turn loop (or an external agent's turn) reports.
    #[serde(untagged)]
    Agent(Event),
    /// What only an external agent reports.
    #[serde(untagged)]
    Update(AgentUpdate),
}

impl UiEvent {
    /// The event that says how approval `id` of `tool` was answered.
    pub fn decided(id: u64, tool: String, decision: Decision) -> Self {
        UiEvent::Decided {
            id,
            tool,
            note: display::decision_note(&decision),
            decision,
        }
    }

    /// An error to show; `message` starts with `agent:` and says what to do.
    pub fn error(message: impl Into<String>) -> Self {
        UiEvent::Agent(Event::Error {
            message: message.into(),
        })
    }

    /// The event as Lua may show it: every string a person reads made visible
    /// ([`display::visible`]), so Lua needs no escaping of its own. Ids, option ids and kinds
    /// are left alone: Lua matches and echoes them, never shows them. A conversation's events
    /// are made visible by the walk every front end shares ([`display::shown`],
    /// [`display::shown_update`]); this adds only the front end's own messages.
    pub fn shown(self) -> Self {
        let one = |s: String| display::visible_owned(s, Layout::OneLine);
        let prose = |s: String| display::visible_owned(s, Layout::Prose);
        match self {
            UiEvent::Started {
                version,
                protocol,
                provider,
                model,
                default_model,
                base_url,
                models,
                unavailable,
                workspace,
                worktree,
                sandbox,
                sandbox_warnings,
            } => UiEvent::Started {
                version,
                protocol,
                provider,
                model,
                default_model,
                base_url: one(base_url),
                models,
                unavailable: unavailable.map(prose),
                workspace,
                worktree: worktree.map(one),
                sandbox: one(sandbox),
                sandbox_warnings: sandbox_warnings.into_iter().map(one).collect(),
            },
            UiEvent::Reviewable { .. }
            | UiEvent::Idle
            | UiEvent::ElicitationClosed { .. }
            | UiEvent::Clear
            | UiEvent::Branches { .. }
            // Files of the state folder, named as agent.nvim names saved images.
            | UiEvent::Pictures { .. } => self,
            // What is applied goes as it is; what is shown is made visible, line by line.
            UiEvent::InlineProposal {
                inline,
                question,
                stamp,
                hunks,
            } => UiEvent::InlineProposal {
                inline,
                question,
                stamp,
                hunks: hunks
                    .into_iter()
                    .map(|hunk| InlineHunk {
                        // Tabs kept (the buffer's own layout, which Lua expands).
                        shown: hunk.added.iter().cloned().map(prose).collect(),
                        ..hunk
                    })
                    .collect(),
            },
            UiEvent::BtwText { id, text } => UiEvent::BtwText {
                id,
                text: prose(text),
            },
            UiEvent::BtwDone {
                id,
                ok,
                message,
                cost,
            } => UiEvent::BtwDone {
                id,
                ok,
                message: prose(message),
                cost,
            },
            UiEvent::InlineStatus { inline, text } => UiEvent::InlineStatus {
                inline,
                text: one(text),
            },
            UiEvent::InlineDone {
                inline,
                ok,
                message,
                cost,
            } => UiEvent::InlineDone {
                inline,
                ok,
                message: prose(message),
                cost,
            },
            UiEvent::Elicitation { id, asked } => UiEvent::Elicitation {
                id,
                asked: shown_elicitation(asked),
            },
            UiEvent::Approval {
                id,
                tool,
                title,
                preview,
                choices,
            } => UiEvent::Approval {
                id,
                tool: one(tool),
                title: one(title),
                preview: match preview {
                    Preview::Diff { path, unified } => Preview::Diff {
                        path: one(path),
                        unified: display::diff_lines(&unified).join("\n"),
                    },
                    Preview::Command {
                        command,
                        cwd,
                        timeout,
                    } => Preview::Command {
                        command: display::preview_lines(&command).join("\n"),
                        cwd: one(cwd),
                        timeout,
                    },
                    Preview::None => Preview::None,
                },
                choices: match choices {
                    Choices::Builtin { choices } => Choices::Builtin {
                        choices: choices
                            .into_iter()
                            .map(|c| Choice {
                                label: one(c.label),
                                ..c
                            })
                            .collect(),
                    },
                    Choices::Agent {
                        options,
                        cancel,
                        edit,
                    } => Choices::Agent {
                        cancel: one(cancel),
                        edit: edit.map(one),
                        options: options
                            .into_iter()
                            .map(|o| PermissionChoice {
                                name: display::one_line(&o.name),
                                ..o
                            })
                            .collect(),
                    },
                },
            },
            UiEvent::Decided {
                id,
                tool,
                decision,
                note,
            } => UiEvent::Decided {
                id,
                tool: one(tool),
                note: one(note),
                decision: match decision {
                    Decision::Refuse { reason } => Decision::Refuse {
                        reason: reason.map(one),
                    },
                    other => other,
                },
            },
            UiEvent::AcpStarted { name } => UiEvent::AcpStarted { name: one(name) },
            UiEvent::Prompt { text } => UiEvent::Prompt { text: prose(text) },
            UiEvent::Resumed { id, title } => UiEvent::Resumed {
                id: one(id),
                title: one(title),
            },
            UiEvent::RewindAsk {
                turn,
                mode,
                files,
                by,
            } => UiEvent::RewindAsk {
                turn,
                mode,
                files: files.into_iter().map(one).collect(),
                by,
            },
            UiEvent::Rewound {
                turn,
                cut,
                message,
                prompt,
            } => UiEvent::Rewound {
                turn,
                cut,
                message: message.map(one),
                prompt: prompt.map(prose),
            },
            UiEvent::Replayed {
                id,
                name,
                ok,
                summary,
                started,
                note,
                later,
            } => UiEvent::Replayed {
                id,
                name: one(name),
                ok,
                summary: one(summary),
                started,
                note: note.map(one),
                later,
            },
            UiEvent::ToolOutput {
                later,
                output,
                diff,
            } => UiEvent::ToolOutput {
                later,
                output: prose(output),
                diff: diff.map(prose),
            },
            UiEvent::Agent(event) => UiEvent::Agent(display::shown(event)),
            UiEvent::Update(update) => UiEvent::Update(display::shown_update(update)),
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_elicitations_field_descriptions_are_one_line_each_and_its_strings_visible() {
        use crate::acp::elicit::{Ask, Elicitation, Field, Kind};
        let asked = UiEvent::Elicitation {
            id: 1,
            asked: Elicitation {
                agent: "a".into(),
                message: "two\nlines\u{1b}[2J".into(),
                ask: Ask::Form {
                    title: None,
                    description: None,
                    fields: vec![Field {
                        name: "n".into(),
                        title: "T\u{202e}".into(),
                        description: Some("first\nsecond".into()),
                        required: false,
                        default: Some(serde_json::json!("d\u{1b}")),
                        kind: Kind::Boolean,
                    }],
                },
            },
        }
        .shown();
        let UiEvent::Elicitation { asked, .. } = asked else {
            panic!("an elicitation");
        };
        let Ask::Form { fields, .. } = asked.ask else {
            panic!("a form");
        };
        let description = fields[0].description.clone().unwrap();
        assert!(!description.contains('\n'), "{description:?}");
        assert!(!fields[0].title.contains('\u{202e}'));
        assert!(!asked.message.contains('\u{1b}') && asked.message.contains('\n'));
        assert_eq!(fields[0].name, "n", "names are echoed back as they came");
    }

    #[test]
    fn an_inline_answer_with_a_word_it_does_not_know_is_about_no_hunk() {
        use crate::tools::inline::Kept;
        let answer = |words: &[&str]| InlineAnswer {
            question: 1,
            hunks: words.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(
            answer(&["kept", "dropped", "stale"]).kept(),
            Some(vec![Kept::Kept, Kept::Dropped, Kept::Stale])
        );
        assert_eq!(answer(&["kept", "yes"]).kept(), None);
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
            choices: Choices::agent(
                vec![crate::acp::PermissionChoice {
                    id: "al\u{1b}low".into(),
                    name: "Allow \u{202e}".into(),
                    kind: "allow_once".into(),
                }],
                false,
            ),
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
                choices: Choices::agent(
                    vec![crate::acp::PermissionChoice {
                        id: "al\u{1b}low".into(),
                        name: "Allow \\u{202e}".into(),
                        kind: "allow_once".into(),
                    }],
                    false
                ),
            }
        );
    }
    #[test]
    fn the_builtin_choices_come_in_the_pickers_order_with_the_session_one_named_for_its_scope() {
        let labels = |action: Action| -> Vec<(String, String)> {
            Choice::builtin(&action, true)
                .into_iter()
                .map(|c| (c.key, c.label))
                .collect()
        };
        let pairs = |list: [(&str, &str); 7]| -> Vec<(String, String)> {
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
                ("allow_project", "Always allow `cargo test` in this project"),
                ("allow_all", "Allow everything this session"),
                ("edit", "Edit before allowing"),
                ("refuse", "Refuse"),
                ("refuse_with_reason", "Refuse with a reason…"),
            ])
        );
        assert_eq!(
            labels(Action::Edit { rel: "a".into() })[1].1,
            "Allow edits for this session"
        );
        assert_eq!(
            labels(Action::Edit { rel: "a".into() })[2].1,
            "Always allow edits in this project"
        );
        // Without a proposal to change, there is no edit choice.
        let plain = Choice::builtin(&Action::Edit { rel: "a".into() }, false);
        assert!(plain.iter().all(|c| c.key != "edit"), "{plain:?}");
    }
}
