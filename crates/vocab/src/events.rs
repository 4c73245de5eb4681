//! What a turn reports, in order, to whoever shows it: the built-in loop's events and how a turn
//! ended. Data only: the loop that makes them and the front ends that show them know this crate,
//! not each other.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the loop reports to its front end, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Turn started (the prompt was accepted).
    TurnStarted,
    /// More of the assistant's text.
    Text { text: String },
    /// More of the model's thinking (Anthropic extended thinking, a reasoning summary): shown
    /// dimmed and folded, as an external agent's thoughts are.
    Thought { text: String },
    /// A tool call is about to run (it may still wait for approval).
    ToolStarted {
        id: String,
        name: String,
        args: Value,
    },
    /// A running call's newest output (run_bash's command as it prints): what its row shows
    /// live until ToolFinished. At most once a frame, a few thousand characters; never saved
    /// and never read by the model.
    ToolProgress { id: String, output: String },
    /// A tool call finished.
    ToolFinished {
        id: String,
        name: String,
        ok: bool,
        summary: String,
        output: String,
        /// The unified diff an applied edit wrote (clamped): what the row's fold shows under
        /// the output. Absent for every other call (and in conversations saved before it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<String>,
    },
    /// The request failed and will be retried.
    Retrying {
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
    /// Tokens used so far in this turn: `cached` of the `input` were read from the provider's
    /// prompt cache (absent in conversations saved before it was counted).
    Usage {
        input: u64,
        output: u64,
        #[serde(default)]
        cached: u64,
        /// What the turn has cost so far in dollars; absent when a price is unknown.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<f64>,
    },
    /// The turn ended; the line to show (`done · ...`, cancelled, stopped after N turns).
    TurnDone {
        input: u64,
        output: u64,
        outcome: Outcome,
        message: String,
        /// What the turn cost in dollars; absent when a price is unknown.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<f64>,
    },
    /// Something went wrong; the message says what to do.
    Error { message: String },
    /// A line the person should know about that is neither text nor a tool
    /// (`instructions: AGENTS.md`).
    Notice { text: String },
    /// The older part of the conversation was replaced, in what the model is sent, by a
    /// summary the model wrote: the history's messages before `upto` (`prompts` prompts in all
    /// by now), about `before` tokens of input then `after`. The history itself is kept (a
    /// saved conversation has it all); a rewind to before `upto` undoes the compaction.
    Compacted {
        prompts: usize,
        before: u64,
        after: u64,
        upto: usize,
        summary: String,
        /// What the summary request cost, for a compaction outside a turn (`:Agent compact`;
        /// a turn's own are in its cost); absent when that is unknown.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<f64>,
    },
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The model finished.
    Done,
    /// The user cancelled.
    Cancelled,
    /// max_turns model calls without finishing.
    MaxTurns,
    /// An API or network error ended it.
    Failed,
}

/// A compaction in force: the history's messages before `upto` are sent as `summary`.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    /// The first message of the history still sent as it is (a prompt).
    pub upto: usize,
    /// What the model wrote of everything before it.
    pub summary: String,
    /// The prompts it stands for.
    pub prompts: usize,
}
