//! The turn loop (SPEC section 4). It knows nothing of Neovim or terminals: it takes a prompt,
//! talks to the model through [`crate::llm::Client`], runs tool calls through the
//! [`crate::tools::Executor`], and reports what happens as [`Event`]s for a front end to show.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

pub(crate) mod native;
mod spend;

pub use native::Native;
pub use spend::Spend;

use crate::instructions;
use crate::llm::{CallResult, Client, LlmError, Message, Progress, Prompt, Request, Usage};
use crate::tools::{Executor, CANCELLED};
use agent_nvim_vocab::tools::ToolResult;

/// The default cap on model calls per prompt.
pub const DEFAULT_MAX_TURNS: u32 = 40;

/// The share of the context window the last request's input may reach before the older part of
/// the conversation is compacted.
pub const DEFAULT_COMPACT_AT: f64 = 0.8;

/// How many of the latest prompt-answer pairs a compaction keeps as they are.
pub const DEFAULT_KEEP_TURNS: usize = 4;

/// What the summary request asks, after the part of the conversation to summarize.
const SUMMARY_REQUEST: &str = "Summarize the conversation so far, to carry on the work from \
the summary alone: what the user asked for and why; what was done (the files read and changed, \
the commands run and what they showed); the decisions made; what is still to do; and every \
exact name, path, error message and value that will matter. Do not call any tool. Write only \
the summary.";

pub use agent_nvim_vocab::events::Compaction;

/// The message the model is sent in place of what `compaction` stands for.
fn compaction_message(compaction: &Compaction) -> Message {
    let noun = if compaction.prompts == 1 {
        "prompt"
    } else {
        "prompts"
    };
    Message::User(
        format!(
            "[The earlier part of this conversation ({} {noun}) was replaced by this summary \
             of it.]\n\n{}",
            compaction.prompts, compaction.summary
        )
        .into(),
    )
}

/// What a conversation's next request sends of `history` under `compactions` (oldest first):
/// the last one's summary and what follows it, or the whole history.
pub fn sent_view(history: &[Message], compactions: &[Compaction]) -> Vec<Message> {
    match compactions.iter().rev().find(|c| c.upto <= history.len()) {
        Some(last) => {
            let mut view = Vec::with_capacity(history.len() - last.upto + 1);
            view.push(compaction_message(last));
            view.extend_from_slice(&history[last.upto..]);
            view
        }
        None => history.to_vec(),
    }
}

/// Why a compaction runs: it decides what is said when there is nothing to compact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The last request's input reached `compact_at` of the window.
    Full,
    /// The provider refused the request as too long.
    TooLong,
    /// The person asked (`:Agent compact`).
    Asked,
}

/// True for the providers' refusal of a prompt longer than the model's window.
pub fn too_long(err: &LlmError) -> bool {
    let text = match err {
        LlmError::Status {
            status: 400 | 413,
            message,
            ..
        } => message,
        LlmError::Api(message) => message,
        _ => return false,
    };
    let text = text.to_ascii_lowercase();
    [
        "prompt is too long",
        "context_length_exceeded",
        "maximum context length",
        "exceeds the context window",
        "context window",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

pub use agent_nvim_vocab::events::{Event, Outcome};

/// Where a turn reports its [`Event`]s: a channel of them (the terminal), or a conversation's
/// event stream ([`crate::conversation::Events`]).
pub trait Report: Send + Sync {
    /// Passes one event on; a receiver that has gone is not an error (nobody is watching).
    fn report(&self, event: Event);
}

impl Report for UnboundedSender<Event> {
    fn report(&self, event: Event) {
        let _ = self.send(event);
    }
}

impl Report for agent_nvim_conversation::Events {
    fn report(&self, event: Event) {
        agent_nvim_conversation::Events::report(self, event);
    }
}

/// Why [`Agent::compact`] compacted nothing.
#[derive(Debug, thiserror::Error)]
pub enum NotCompacted {
    /// Too few prompts to fold: what the conversation has and what is kept.
    #[error("{0}")]
    Nothing(String),
    /// The prompt being answered is too long by itself.
    #[error("this prompt alone is too long for the model")]
    PromptTooLong,
    /// Stopped while the summary was written.
    #[error("cancelled")]
    Cancelled,
    /// The summary request failed.
    #[error("the summary request failed: {0}")]
    Failed(#[source] LlmError),
    /// The model answered with no text.
    #[error("the model wrote no summary")]
    NoSummary,
    /// The conversation has cost its `max_cost` already ([`Agent::with_max_cost`]).
    #[error("{0}")]
    OverBudget(String),
}

/// What a side question's request says before the question.
const ASIDE_PREFACE: &str = "[A side question, answered apart: neither it nor your answer \
becomes part of the conversation. Answer briefly from what the conversation holds. Do not call \
any tool.]";

/// A side question's answer ([`Agent::aside`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Aside {
    pub text: String,
    pub usage: Usage,
    /// In dollars; None for a model without a price.
    pub cost: Option<f64>,
    /// The model called a tool anyway (none ran).
    pub called_tools: bool,
}

/// Said when a reply stopped at the model's output limit: what was written so far is kept (a
/// call cut short fails as invalid JSON, which the model reads), and the person knows why it
/// ends where it does.
pub const CUT_NOTICE: &str =
    "the model stopped at its output limit: this reply may be incomplete (ask it to go on)";

/// A tool call's progress, reported as [`Event::ToolProgress`] for its row.
struct Watching<'a, R> {
    id: &'a str,
    events: &'a R,
}

impl<R: Report> crate::tools::Progress for Watching<'_, R> {
    fn output(&self, newest: String) {
        self.events.report(Event::ToolProgress {
            id: self.id.to_string(),
            output: newest,
        });
    }
}

/// The line shown when a turn completes (`done · 1.2k in / 300 out tokens · $0.01`).
pub fn done_line(usage: Usage, cost: Option<f64>) -> String {
    let mut line = format!(
        "done · {} in / {} out tokens",
        count(usage.input),
        count(usage.output)
    );
    if let Some(cost) = cost {
        line.push_str(" · ");
        line.push_str(&dollars(cost));
    }
    line
}

/// The row a compaction is shown as: `compacted 12 prompts (84.1k → 6.2k tokens)`.
pub fn compacted_line(prompts: usize, before: u64, after: u64) -> String {
    let noun = if prompts == 1 { "prompt" } else { "prompts" };
    format!(
        "compacted {prompts} {noun} ({} → {} tokens)",
        count(before),
        count(after)
    )
}

/// A token count as the chat shows it: `800`, `12.3k`, `1.2M`.
pub fn count(n: u64) -> String {
    if n < 1000 {
        n.to_string()
    } else if n < 999_950 {
        format!("{:.1}k", n as f64 / 1e3)
    } else {
        format!("{:.1}M", n as f64 / 1e6)
    }
}

/// A cost as the chat shows it: `$0.42`, and `<$0.01` for less than a cent (never `$0.00` for
/// something that cost money).
pub fn dollars(cost: f64) -> String {
    if cost > 0.0 && cost < 0.005 {
        "<$0.01".to_string()
    } else {
        format!("${cost:.2}")
    }
}

/// The running cost of a turn: None as soon as one request's price is unknown.
#[derive(Debug, Clone, Copy)]
struct Spent(Option<f64>);

impl Spent {
    fn add(&mut self, cost: Option<f64>) {
        self.0 = match (self.0, cost) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
}

/// The system prompt. It asks for good habits; it enforces nothing (the executor does). With
/// the sandbox in force, `sandbox` is its paragraph ([`crate::sandbox::Report::prompt_note`]):
/// what it blocks, and that a refusal from it is the user's to hear about.
pub fn system_prompt(root: &std::path::Path, sandbox: Option<&str>) -> String {
    let mut prompt = format!(
        "You are a coding agent working in the workspace at {root}. You have four tools: \
read_file, list_files, edit_file and run_bash.\n\
- Paths are relative to the workspace root. Paths outside it are refused by the tools; when that \
happens, tell the user instead of trying another way around.\n\
- Read a file before editing it. edit_file replaces old_str, which must appear exactly once: \
copy it exactly from the file, with enough surrounding lines to be unique. An empty old_str \
creates a new file.\n\
- run_bash is not interactive: stdin is empty, and commands that wait for input or open an \
editor or pager will not work. Commands have a timeout.\n\
- The user approves every edit and command, and may decline; if they do, ask what they would \
like instead.\n\
- After changing code, verify the change (build, run the tests) before saying it is done.\n\
- Be brief. Say what you changed and why.",
        root = root.display()
    );
    if let Some(note) = sandbox {
        prompt.push('\n');
        prompt.push_str(note);
    }
    prompt
}

/// One conversation with the model.
pub struct Agent {
    client: Client,
    executor: Executor,
    /// The system prompt without the project's instructions.
    base: String,
    /// The system prompt sent: `base` and the instructions' section.
    system: String,
    /// The file names the project's instructions are looked for under, in order.
    instruction_files: Vec<String>,
    /// The instructions `system` holds.
    instructions: instructions::Found,
    /// The instructions were said in the chat since the conversation began.
    told: bool,
    /// The model the next prompt uses, when the person switched it ([`Agent::model_switch`]).
    next_model: ModelSwitch,
    /// Every message of the conversation (what is saved and what a rewind counts in).
    history: Vec<Message>,
    /// The compactions in force, oldest first: the last one decides what is sent.
    compactions: Vec<Compaction>,
    /// What the model is sent when a compaction is in force: its summary and the history from
    /// its `upto` on (kept in step with `history`, so a request never copies the history).
    view: Option<Vec<Message>>,
    /// The input of the last request, in tokens (0: none since the last compaction).
    last_input: u64,
    /// What a summary request that failed after its reply cost, for the turn to count.
    unbilled: Usage,
    /// Which version of what is sent this is: a new one each time it is cut or rewritten, not
    /// appended to (so the client knows which messages it rendered still stand).
    epoch: u64,
    /// The share of the window that starts a compaction; 0: never by itself.
    compact_at: f64,
    /// The prompt-answer pairs a compaction keeps as they are.
    keep_turns: usize,
    max_turns: u32,
    /// The most this conversation may cost, in dollars ([`Agent::with_max_cost`]).
    max_cost: Option<f64>,
    /// What this conversation's turns have cost so far, in dollars (what could be priced).
    cost: f64,
    /// Whether the person was told that `max_cost` cannot be held to (no price is known).
    told_unpriced: bool,
    /// The conversation's spending, shared with the agents of its side questions and inline
    /// edits ([`Agent::with_spend`], [`Agent::spending_apart`]).
    spend: Spend,
    /// This agent makes requests apart from a conversation's turns: its costs are that
    /// conversation's (the one counted when it was made, [`Spend::generation`]), and its
    /// `max_cost` is held against all the conversation has spent.
    apart: bool,
    apart_generation: u64,
}

/// What a conversation stopped by its `max_cost` says: what it has cost, its limit, and what to
/// do. The turn ends before the request that would start past the limit.
fn over_budget(cost: f64, max: f64) -> String {
    format!(
        "stopped before the next request: this conversation has cost {} and its max_cost is {}; raise max_cost or start a new conversation",
        dollars(cost),
        dollars(max)
    )
}

/// Passes a turn's events on and keeps what the turn cost (its `TurnDone`'s), for the
/// conversation's running cost.
struct Costed<'a, R: Report> {
    inner: &'a R,
    cost: std::sync::Mutex<Option<f64>>,
}

impl<R: Report> Report for Costed<'_, R> {
    fn report(&self, event: Event) {
        if let Event::TurnDone { cost, .. } = &event {
            if let Ok(mut kept) = self.cost.lock() {
                *kept = *cost;
            }
        }
        self.inner.report(event);
    }
}

/// Where a model switch waits for the next prompt: shared, so it is set while a turn runs.
pub type ModelSwitch = Arc<std::sync::Mutex<Option<String>>>;

impl Agent {
    /// An agent over `executor`, talking through `client`.
    pub fn new(client: Client, executor: Executor, max_turns: u32) -> Self {
        let cx = executor.context();
        let root = cx.workspace.root();
        let sandbox = cx.settings.sandbox.report(root).prompt_note();
        let base = system_prompt(root, sandbox.as_deref());
        Agent {
            client,
            executor,
            system: base.clone(),
            base,
            instruction_files: Vec::new(),
            instructions: instructions::Found::default(),
            told: false,
            next_model: ModelSwitch::default(),
            history: Vec::new(),
            compactions: Vec::new(),
            view: None,
            last_input: 0,
            unbilled: Usage::default(),
            epoch: 0,
            compact_at: DEFAULT_COMPACT_AT,
            keep_turns: DEFAULT_KEEP_TURNS,
            max_turns: max_turns.max(1),
            max_cost: None,
            cost: 0.0,
            told_unpriced: false,
            spend: Spend::default(),
            apart: false,
            apart_generation: 0,
        }
    }

    /// Stops the conversation before a request once its turns have cost `max_cost` dollars or
    /// more, by the model table's prices (None: no limit). A model without a price cannot be
    /// held to it: the first prompt says so.
    pub fn with_max_cost(mut self, max_cost: Option<f64>) -> Self {
        self.max_cost = max_cost.filter(|max| max.is_finite() && *max >= 0.0);
        self
    }

    /// What this conversation's turns have cost so far, in dollars, where a price was known.
    pub fn cost(&self) -> f64 {
        self.cost
    }

    /// Shares this conversation's spending with the agents of its side questions and inline
    /// edits (each made [`Agent::spending_apart`] over the same `spend`): what they cost counts
    /// against this agent's `max_cost`, and they are held to it too.
    pub fn with_spend(mut self, spend: Spend) -> Self {
        spend.set_turns(self.cost);
        self.spend = spend;
        self.apart = false;
        self
    }

    /// Makes this agent's requests part of the conversation whose spending `spend` is (a side
    /// question, an inline edit): each is refused once the conversation as a whole has cost
    /// this agent's `max_cost`, and what each costs is added to the conversation's.
    pub fn spending_apart(mut self, spend: Spend) -> Self {
        self.apart_generation = spend.generation();
        self.spend = spend;
        self.apart = true;
        self
    }

    /// What the conversation will have spent with `now` more: this agent's and everything the
    /// shared spending holds besides it.
    fn spent_with(&self, now: f64) -> f64 {
        if self.apart {
            self.spend.total() + now
        } else {
            self.cost + now + self.spend.apart()
        }
    }

    /// What the conversation is stopped with before its next request, when with `now` more it
    /// has spent its `max_cost` ([`over_budget`]).
    fn over_limit(&self, now: f64) -> Option<String> {
        let spent = self.spent_with(now);
        self.max_cost
            .filter(|max| spent >= *max)
            .map(|max| over_budget(spent, max))
    }

    /// Why `prompt` is not sent at all: media this agent's model cannot take, or more images
    /// than one request carries. What the person is told, and the line the history keeps in
    /// their place.
    fn refused_media(&self, prompt: &Prompt) -> Option<(String, String)> {
        let images_size: usize = prompt
            .images
            .iter()
            .map(crate::llm::Image::base64_len)
            .sum();
        if !prompt.audio.is_empty() {
            Some((
                crate::llm::audio::refused_by_builtin(),
                format!(
                    "[{} audio clip(s) attached here were not sent: the built-in agent takes no audio]",
                    prompt.audio.len()
                ),
            ))
        } else if !prompt.images.is_empty() && !self.client.config().model_info().images {
            let model = self.client.config().model.clone();
            Some((
                crate::llm::image::refused_for(&model),
                format!(
                    "[{} image(s) attached here were not sent: {model} does not take images]",
                    prompt.images.len()
                ),
            ))
        } else if prompt.images.len() > crate::llm::image::REQUEST_IMAGE_COUNT {
            Some((
                crate::llm::image::too_many_images(prompt.images.len()),
                format!(
                    "[{} image(s) attached here were not sent: more than one request carries]",
                    prompt.images.len()
                ),
            ))
        } else if images_size > crate::llm::image::REQUEST_IMAGES {
            Some((
                crate::llm::image::too_many_for_one_request(images_size),
                format!(
                    "[{} image(s) attached here were not sent: together more than one request carries]",
                    prompt.images.len()
                ),
            ))
        } else {
            None
        }
    }

    /// Counts `cost` as spent by this agent (and by the conversation it shares its spending
    /// with).
    fn count(&mut self, cost: f64) {
        self.cost += cost;
        if self.apart {
            self.spend.add_apart(cost, self.apart_generation);
        } else {
            self.spend.set_turns(self.cost);
        }
    }

    /// Compacts when the last request's input reached `compact_at` (0 < it ≤ 1; 0: only when
    /// asked or refused as too long) of the model's window, keeping `keep_turns` (at least 1)
    /// prompt-answer pairs as they are.
    pub fn with_compaction(mut self, compact_at: f64, keep_turns: usize) -> Self {
        self.compact_at = if compact_at.is_finite() {
            compact_at.clamp(0.0, 1.0)
        } else {
            DEFAULT_COMPACT_AT
        };
        self.keep_turns = keep_turns.max(1);
        self
    }

    /// What the next request sends: the history, or the compaction's summary and what follows it.
    pub fn messages(&self) -> &[Message] {
        self.view.as_deref().unwrap_or(&self.history)
    }

    /// The compactions in force, oldest first.
    pub fn compactions(&self) -> &[Compaction] {
        &self.compactions
    }

    /// Sends the model the person switched to, if they did, from now on.
    fn take_model_switch(&mut self) {
        let switched = self.next_model.lock().ok().and_then(|mut next| next.take());
        if let Some(model) = switched {
            self.client.set_model(model);
        }
    }

    fn push(&mut self, message: Message) {
        if let Some(view) = &mut self.view {
            view.push(message.clone());
        }
        self.history.push(message);
    }

    /// Makes `view` what the last compaction says.
    fn rebuild_view(&mut self) {
        self.epoch += 1;
        self.view = self.compactions.last().map(|c| {
            let mut view = Vec::with_capacity(self.history.len() - c.upto + 1);
            view.push(compaction_message(c));
            view.extend_from_slice(&self.history[c.upto..]);
            view
        });
    }

    /// Replaces the older part of what is sent by a summary the model writes in a request of
    /// its own; the latest `keep_turns` prompts answered (and the one being answered) and what
    /// followed them stay as they are (the cut
    /// is at a prompt, so a tool call is never parted from its result). Reports `Compacted`,
    /// and answers the summary request's usage, or why nothing was compacted.
    pub async fn compact(
        &mut self,
        why: Why,
        events: &impl Report,
        cancel: &CancellationToken,
    ) -> Result<Usage, NotCompacted> {
        let start = self.compactions.last().map_or(0, |c| c.upto);
        let prompts: Vec<usize> = self.history[start..]
            .iter()
            .enumerate()
            .filter(|(_, m)| matches!(m, Message::User(_)))
            .map(|(i, _)| start + i)
            .collect();
        // Refused as too long, everything but the prompt being answered goes into the summary.
        // Otherwise the latest keep_turns prompts answered stay whole: mid-turn (Full) the
        // prompt being answered is in the history too, and is not one of them.
        let answering = usize::from(why != Why::Asked);
        let keep = match why {
            Why::TooLong => 1,
            Why::Full | Why::Asked => self.keep_turns + answering,
        };
        if why == Why::Asked {
            self.take_model_switch();
            // A turn checks its own requests; one asked for outside a turn is checked here.
            if let Some(over) = self.over_limit(0.0) {
                return Err(NotCompacted::OverBudget(over));
            }
        }
        if prompts.len() <= keep {
            let has = match prompts.len() - answering {
                1 => "1 prompt".to_string(),
                n => format!("{n} prompts"),
            };
            let since = if self.compactions.is_empty() {
                ""
            } else {
                " since the last compaction"
            };
            let kept = match self.keep_turns {
                1 => "the latest prompt is kept as it is".to_string(),
                n => format!("the latest {n} prompts are kept as they are"),
            };
            let said = format!(
                "nothing to compact yet: the conversation has {has}{since}, and {kept} \
                 (keep_turns)"
            );
            return Err(match why {
                Why::TooLong => NotCompacted::PromptTooLong,
                Why::Full | Why::Asked => NotCompacted::Nothing(said),
            });
        }
        let upto = prompts[prompts.len() - keep];
        let sent_before = self.messages().len() - (self.history.len() - upto);
        let mut asked: Vec<Message> = self.messages()[..sent_before].to_vec();
        asked.push(Message::User(SUMMARY_REQUEST.into()));
        let request = Request {
            system: &self.system,
            messages: &asked,
            history: None,
        };
        let send = |event: Event| events.report(event);
        let mut progress = |p: Progress| {
            if let Progress::Retrying {
                attempt,
                delay,
                reason,
            } = p
            {
                send(Event::Retrying {
                    attempt,
                    delay_ms: delay.as_millis() as u64,
                    reason,
                });
            }
        };
        let reply = tokio::select! {
            reply = self.client.complete(&request, &mut progress) => reply,
            () = cancel.cancelled() => return Err(NotCompacted::Cancelled),
        };
        let reply = reply.map_err(NotCompacted::Failed)?;
        let summary = reply.text.trim().to_string();
        if summary.is_empty() {
            // Paid for all the same: the turn counts it.
            self.unbilled.add(reply.usage);
            return Err(NotCompacted::NoSummary);
        }
        let folded = self.compactions.last().map_or(0, |c| c.prompts) + (prompts.len() - keep);
        let old_size = size(self.messages());
        let before = if self.last_input > 0 {
            self.last_input
        } else {
            estimate(&self.system, old_size)
        };
        self.compactions.push(Compaction {
            upto,
            summary: summary.clone(),
            prompts: folded,
        });
        self.rebuild_view();
        let after = (before as f64 * size(self.messages()) as f64 / old_size.max(1) as f64) as u64;
        self.last_input = 0;
        tracing::info!(
            upto,
            folded,
            before,
            after,
            "the conversation was compacted"
        );
        let price = self.client.config().model_info().price;
        // A turn's own compaction is in the turn's cost; one asked for is counted here.
        let cost = price
            .filter(|_| why == Why::Asked)
            .map(|p| p.cost(&reply.usage));
        self.count(cost.unwrap_or(0.0));
        send(Event::Compacted {
            prompts: folded,
            before,
            after,
            upto,
            summary,
            cost,
        });
        Ok(reply.usage)
    }

    /// A side question (`:Agent btw`): one request with `view` (a conversation's messages as
    /// its next request would send them) and `question` after it, answered apart: nothing is
    /// added to this agent's history, no tool runs (the model is asked to call none, and a call
    /// it makes anyway is left out), and the answer's text is reported as it comes. Its usage
    /// and cost (None for a model without a price), or why it failed.
    pub async fn aside(
        &mut self,
        view: &[Message],
        question: &str,
        events: &impl Report,
        cancel: &CancellationToken,
    ) -> Result<Aside, String> {
        self.take_model_switch();
        if let Some(over) = self.over_limit(0.0) {
            return Err(over);
        }
        let _ = self.refresh_instructions().await;
        let mut messages = view.to_vec();
        messages.push(Message::User(
            format!("{ASIDE_PREFACE}\n\n{}", question.trim()).into(),
        ));
        let request = Request {
            system: &self.system,
            messages: &messages,
            history: None,
        };
        let mut progress = |p: Progress| {
            if let Progress::Text(text) = p {
                events.report(Event::Text { text });
            }
        };
        let reply = tokio::select! {
            reply = self.client.complete(&request, &mut progress) => reply,
            () = cancel.cancelled() => return Err("cancelled".into()),
        };
        let reply = reply.map_err(|err| match self.client.next_step(&err) {
            Some(step) => format!("{err}; {step}"),
            None => err.to_string(),
        })?;
        let price = self.client.config().model_info().price;
        let cost = price.map(|p| p.cost(&reply.usage));
        self.count(cost.unwrap_or(0.0));
        Ok(Aside {
            text: reply.text,
            usage: reply.usage,
            cost,
            called_tools: !reply.calls.is_empty(),
        })
    }

    /// Looks for the project's instructions under `files` (in order, the first found) before
    /// each prompt ([`crate::instructions`]).
    pub fn with_instructions(mut self, files: Vec<String>) -> Self {
        self.instruction_files = files;
        self
    }

    /// Where a switch of model is left for the next prompt (the chat's `:Agent model`).
    pub fn model_switch(&self) -> ModelSwitch {
        self.next_model.clone()
    }

    /// The system prompt the next request sends (tests).
    pub fn system(&self) -> &str {
        &self.system
    }

    /// Reads the project's instructions again; the system prompt changes when they did. Returns
    /// what to tell the person: the instructions at a conversation's first prompt, and any
    /// change after it.
    async fn refresh_instructions(&mut self) -> Option<String> {
        let workspace = self.executor.context().workspace.clone();
        let files = self.instruction_files.clone();
        let found = tokio::task::spawn_blocking(move || instructions::find(&workspace, &files))
            .await
            .unwrap_or_default();
        let changed = found != self.instructions;
        let notice = if !self.told {
            found.notice()
        } else if changed {
            match (&found.file, &self.instructions.file, &found.problem) {
                (Some(now), Some(old), _) if now == old => {
                    found.notice().map(|n| n + " (changed; read again)")
                }
                (Some(_), _, _) | (None, _, Some(_)) => found.notice(),
                (None, Some(old), None) => Some(format!("instructions: none ({old} is gone)")),
                (None, None, None) => None,
            }
        } else {
            None
        };
        if changed {
            self.system = match found.prompt_section() {
                Some(section) => format!("{}{section}", self.base),
                None => self.base.clone(),
            };
            self.instructions = found;
        }
        self.told = true;
        notice
    }

    /// The conversation so far.
    pub fn history(&self) -> &[Message] {
        &self.history
    }

    /// The client (and through it the provider and model).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The executor (and through it the workspace and gate).
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// Continues a saved conversation: `history` is what the model saw (a session's `model`
    /// records), under the `compactions` it recorded; the session grants start empty, as in any
    /// new session.
    /// `cost` is what the saved conversation had cost, which its `max_cost` goes on from.
    pub fn restore(&mut self, history: Vec<Message>, compactions: Vec<Compaction>, cost: f64) {
        self.follow(history, compactions);
        self.cost = cost;
        if !self.apart {
            self.spend.start_over(cost);
        }
        self.told = false;
        self.executor.context().gate.reset();
    }

    /// Switches to another branch of the conversation: `history` under `compactions` is what
    /// the model is sent from now on. The session grants and what it cost stay (it is the same
    /// session).
    pub fn follow(&mut self, history: Vec<Message>, compactions: Vec<Compaction>) {
        self.history = history;
        let len = self.history.len();
        self.compactions = compactions.into_iter().filter(|c| c.upto <= len).collect();
        self.rebuild_view();
        self.last_input = 0;
    }

    /// Rewinds: only the first `len` messages of the history are kept, and the compactions of
    /// what is gone are undone. The session grants stay (it is the same session).
    pub fn truncate(&mut self, len: usize) {
        self.history.truncate(len);
        self.compactions.retain(|c| c.upto <= len);
        self.rebuild_view();
        self.last_input = 0;
    }

    /// Starts a new conversation: history, session grants and what it has cost are forgotten.
    pub fn reset(&mut self) {
        self.cost = 0.0;
        if !self.apart {
            self.spend.start_over(0.0);
        }
        self.told_unpriced = false;
        self.history.clear();
        self.compactions.clear();
        self.view = None;
        self.epoch += 1;
        self.last_input = 0;
        self.told = false;
        self.executor.context().gate.reset();
    }

    /// Runs one prompt to the end of its turn. The conversation stays valid whatever happens
    /// (every tool call gets a result), so the next prompt works after a cancel or an error.
    pub async fn prompt(
        &mut self,
        prompt: Prompt,
        events: &impl Report,
        cancel: &CancellationToken,
    ) -> Outcome {
        let costed = Costed {
            inner: events,
            cost: std::sync::Mutex::new(None),
        };
        let outcome = self.turn(prompt, &costed, cancel).await;
        if let Some(cost) = costed.cost.lock().ok().and_then(|kept| *kept) {
            self.count(cost);
        }
        outcome
    }

    /// One turn of [`Agent::prompt`].
    async fn turn(
        &mut self,
        prompt: Prompt,
        events: &impl Report,
        cancel: &CancellationToken,
    ) -> Outcome {
        let send = |event: Event| events.report(event);
        send(Event::TurnStarted);
        self.take_model_switch();
        // Refused before anything is sent. The prompt's text is kept in the history, as a
        // failed turn's is (so prompts are numbered as the chat and the file number them), with
        // a line saying what was left out, never sent.
        if let Some((message, left_out)) = self.refused_media(&prompt) {
            self.push(Message::User(Prompt::from(format!(
                "{}\n\n{left_out}",
                prompt.text
            ))));
            send(Event::Error {
                message: message.clone(),
            });
            return finish(
                &send,
                Usage::default(),
                Spent(None),
                Outcome::Failed,
                message,
            );
        }
        // A read stuck on a hung file system must not keep the turn from being stopped.
        let notice = tokio::select! {
            notice = self.refresh_instructions() => notice,
            () = cancel.cancelled() => None,
        };
        if let Some(notice) = notice {
            send(Event::Notice { text: notice });
        }
        if let Some(note) = self.executor.context().gate.sandbox_note() {
            send(Event::Notice { text: note });
        }
        self.push(Message::User(prompt));
        let mut total = Usage::default();
        // None from the start for a model without a price: never `$0.00` for an unknown one.
        let mut spent = Spent(self.client.config().model_info().price.map(|_| 0.0));
        if self.max_cost.is_some() && spent.0.is_none() && !self.told_unpriced {
            self.told_unpriced = true;
            send(Event::Notice {
                text: format!(
                    "max_cost is not held to: {} has no price in the model table",
                    self.client.config().model
                ),
            });
        }
        let mut compacted_for_length = false;
        for _ in 0..self.max_turns {
            if let (Some(now), false) = (spent.0, self.apart) {
                // What the turn has cost so far, for a side question asked meanwhile.
                self.spend.set_turns(self.cost + now);
            }
            // (Unpriced, nothing can be held to: said once above.)
            if let Some(message) = spent.0.and_then(|now| self.over_limit(now)) {
                send(Event::Error {
                    message: message.clone(),
                });
                return finish(&send, total, spent, Outcome::Failed, message);
            }
            let window = self.client.config().model_info().context;
            if self.compact_at > 0.0 && self.last_input as f64 >= self.compact_at * window as f64 {
                let compacted = self.compact(Why::Full, events, cancel).await;
                let unbilled = std::mem::take(&mut self.unbilled);
                self.bill(&mut total, &mut spent, unbilled);
                match compacted {
                    Ok(usage) => self.bill(&mut total, &mut spent, usage),
                    Err(why) if cancel.is_cancelled() => {
                        tracing::info!(%why, "compaction cancelled");
                        return finish(&send, total, spent, Outcome::Cancelled, "cancelled".into());
                    }
                    Err(why) => {
                        // Not again before the next request says how full it is.
                        self.last_input = 0;
                        send(Event::Notice {
                            text: format!("not compacted: {why}"),
                        });
                    }
                }
            }
            let request = Request {
                system: &self.system,
                messages: self.view.as_deref().unwrap_or(&self.history),
                history: Some(self.epoch),
            };
            let mut progress = |p: Progress| match p {
                Progress::Text(text) => send(Event::Text { text }),
                Progress::Thinking(text) => send(Event::Thought { text }),
                Progress::Retrying {
                    attempt,
                    delay,
                    reason,
                } => send(Event::Retrying {
                    attempt,
                    delay_ms: delay.as_millis() as u64,
                    reason,
                }),
            };
            let reply = tokio::select! {
                reply = self.client.complete(&request, &mut progress) => reply,
                () = cancel.cancelled() => return finish(&send, total, spent, Outcome::Cancelled, "cancelled".into()),
            };
            let reply = match reply {
                Ok(reply) => reply,
                Err(err) if too_long(&err) && !compacted_for_length => {
                    compacted_for_length = true;
                    tracing::info!(%err, "the prompt is too long: compacting");
                    let compacted = self.compact(Why::TooLong, events, cancel).await;
                    let unbilled = std::mem::take(&mut self.unbilled);
                    self.bill(&mut total, &mut spent, unbilled);
                    match compacted {
                        Ok(usage) => {
                            self.bill(&mut total, &mut spent, usage);
                            continue;
                        }
                        Err(_) if cancel.is_cancelled() => {
                            return finish(
                                &send,
                                total,
                                spent,
                                Outcome::Cancelled,
                                "cancelled".into(),
                            );
                        }
                        Err(why) => {
                            let message = format!(
                                "{err}; not compacted: {why}; send less (fewer or \
                                 smaller @files), or start over with :Agent new"
                            );
                            send(Event::Error {
                                message: message.clone(),
                            });
                            return finish(&send, total, spent, Outcome::Failed, message);
                        }
                    }
                }
                Err(err) => {
                    let err = if compacted_for_length && too_long(&err) {
                        format!("{err} (even after compacting the conversation: start a new one with :Agent new)")
                    } else {
                        match self.client.next_step(&err) {
                            Some(step) => format!("{err}; {step}"),
                            None => err.to_string(),
                        }
                    };
                    let message = err.to_string();
                    tracing::warn!(%message, "model request failed");
                    send(Event::Error {
                        message: message.clone(),
                    });
                    return finish(&send, total, spent, Outcome::Failed, message);
                }
            };
            self.last_input = reply.usage.input;
            total.add(reply.usage);
            let price = self.client.config().model_info().price;
            spent.add(price.map(|p| p.cost(&reply.usage)));
            send(Event::Usage {
                input: total.input,
                output: total.output,
                cached: total.cache_read,
                cost: spent.0,
            });
            if reply.cut {
                send(Event::Notice {
                    text: CUT_NOTICE.to_string(),
                });
            }
            let calls = reply.calls;
            if calls.is_empty() {
                if !reply.text.is_empty() || !reply.reasoning.is_empty() {
                    self.push(Message::Assistant {
                        text: reply.text,
                        calls,
                        reasoning: reply.reasoning,
                    });
                }
                let line = done_line(total, spent.0);
                return finish(&send, total, spent, Outcome::Done, line);
            }
            let mut results = Vec::with_capacity(calls.len());
            let mut too_large = Vec::new();
            for call in &calls {
                let oversized = call
                    .args
                    .as_ref()
                    .ok()
                    .and_then(|args| self.executor.oversized(&call.name, args));
                let (result, diff) = if cancel.is_cancelled() {
                    (ToolResult::fail(CANCELLED), None)
                } else if let Some(result) = oversized {
                    // Decided here, before the call reaches a front end: its row shows no
                    // argument, never a 50 MB value.
                    too_large.push(call.id.clone());
                    send(Event::ToolStarted {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        args: Value::Null,
                    });
                    (result, None)
                } else {
                    let args = call.args.clone().unwrap_or(Value::Null);
                    send(Event::ToolStarted {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        args,
                    });
                    match &call.args {
                        Ok(args) => {
                            let watching = Watching {
                                id: &call.id,
                                events,
                            };
                            self.executor
                                .call_with_diff(&call.name, args, cancel, &watching)
                                .await
                        }
                        Err(err) => (
                            ToolResult::fail(format!(
                                "{}: the arguments are not valid JSON ({err}); send them again as one JSON object.",
                                call.name
                            )),
                            None,
                        ),
                    }
                };
                send(Event::ToolFinished {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    ok: result.ok,
                    summary: result.summary,
                    output: result.text.clone(),
                    diff,
                });
                results.push(CallResult {
                    id: call.id.clone(),
                    ok: result.ok,
                    text: result.text,
                });
            }
            self.push(Message::Assistant {
                text: reply.text,
                // A refused call's huge value is not sent back with every later request.
                calls: calls
                    .into_iter()
                    .map(|call| {
                        if too_large.contains(&call.id) {
                            shrunk(call)
                        } else {
                            call
                        }
                    })
                    .collect(),
                reasoning: reply.reasoning,
            });
            self.push(Message::Results(results));
            if cancel.is_cancelled() {
                return finish(&send, total, spent, Outcome::Cancelled, "cancelled".into());
            }
        }
        let message = format!(
            "Stopped after {} model turns without finishing.",
            self.max_turns
        );
        finish(&send, total, spent, Outcome::MaxTurns, message)
    }
}

impl Agent {
    /// Counts a summary request's usage in the turn's (its cost included) and says so.
    fn bill(&self, total: &mut Usage, spent: &mut Spent, usage: Usage) {
        total.add(usage);
        spent.add(
            self.client
                .config()
                .model_info()
                .price
                .map(|p| p.cost(&usage)),
        );
    }
}

/// The characters an image is counted as in [`size`]: about what 1,600 tokens of text hold.
const IMAGE_CHARS: usize = 6_400;

/// The characters of what `messages` send (their text, calls and results): to scale a token
/// count by, when the provider's count is all there is.
fn size(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| match m {
            // An image counts as what a large one costs (some 1,600 tokens).
            Message::User(prompt) => prompt.text.len() + prompt.images.len() * IMAGE_CHARS,
            Message::Assistant {
                text,
                calls,
                reasoning,
            } => {
                text.len()
                    + calls
                        .iter()
                        .map(|c| c.raw_args.len() + c.name.len())
                        .sum::<usize>()
                    + reasoning
                        .iter()
                        .map(|r| r.item.to_string().len())
                        .sum::<usize>()
            }
            Message::Results(results) => results.iter().map(|r| r.text.len()).sum(),
        })
        .sum()
}

/// About how many tokens `chars` characters of conversation and the system prompt are (four
/// characters a token), for when no request has said.
fn estimate(system: &str, chars: usize) -> u64 {
    ((system.len() + chars) / 4) as u64
}

/// How many characters of a refused, oversized argument the history keeps.
const SHRUNK_CHARS: usize = 1_000;

/// A call refused for its size, as the history keeps it: each long string cut to its first
/// [`SHRUNK_CHARS`] characters and a note of how many more there were (the model reads why in
/// the result; its provider needs the call to pair with the result).
fn shrunk(mut call: crate::llm::ToolCall) -> crate::llm::ToolCall {
    if let Ok(Value::Object(map)) = &mut call.args {
        for value in map.values_mut() {
            if let Value::String(text) = value {
                if let Some(chars) = crate::text::chars_over(text, SHRUNK_CHARS) {
                    let (kept, _) = crate::text::clamp_head(text, SHRUNK_CHARS);
                    *text = format!(
                        "{kept}[... {} more characters not kept]",
                        crate::text::grouped(chars - SHRUNK_CHARS)
                    );
                }
            }
        }
        if let Ok(args) = &call.args {
            call.raw_args = args.to_string();
        }
    }
    call
}

fn finish(
    send: &impl Fn(Event),
    total: Usage,
    spent: Spent,
    outcome: Outcome,
    message: String,
) -> Outcome {
    send(Event::TurnDone {
        input: total.input,
        output: total.output,
        outcome,
        message,
        cost: spent.0,
    });
    outcome
}
