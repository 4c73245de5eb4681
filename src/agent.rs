//! The turn loop (SPEC section 4). It knows nothing of Neovim or terminals: it takes a prompt,
//! talks to the model through [`crate::llm::Client`], runs tool calls through the
//! [`crate::tools::Executor`], and reports what happens as [`Event`]s for a front end to show.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::instructions;
use crate::llm::{CallResult, Client, Message, Progress, Request, Usage};
use crate::tools::{Executor, ToolResult, CANCELLED};

/// The default cap on model calls per prompt.
pub const DEFAULT_MAX_TURNS: u32 = 40;

/// What the loop reports to its front end, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Turn started (the prompt was accepted).
    TurnStarted,
    /// More of the assistant's text.
    Text { text: String },
    /// A tool call is about to run (it may still wait for approval).
    ToolStarted {
        id: String,
        name: String,
        args: Value,
    },
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
    },
    /// The turn ended; the line to show (`done · ...`, cancelled, stopped after N turns).
    TurnDone {
        input: u64,
        output: u64,
        outcome: Outcome,
        message: String,
    },
    /// Something went wrong; the message says what to do.
    Error { message: String },
    /// A line the person should know about that is neither text nor a tool
    /// (`instructions: AGENTS.md`).
    Notice { text: String },
}

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

/// The line shown when a turn completes.
pub fn done_line(usage: Usage) -> String {
    format!("done · {} in / {} out tokens", usage.input, usage.output)
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
    history: Vec<Message>,
    max_turns: u32,
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
            max_turns: max_turns.max(1),
        }
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
    /// records); the session grants start empty, as in any new session.
    pub fn restore(&mut self, history: Vec<Message>) {
        self.history = history;
        self.told = false;
        self.executor.context().gate.reset();
    }

    /// Rewinds: only the first `len` messages of the history are kept. The session grants stay
    /// (it is the same session).
    pub fn truncate(&mut self, len: usize) {
        self.history.truncate(len);
    }

    /// Starts a new conversation: history and session grants are forgotten.
    pub fn reset(&mut self) {
        self.history.clear();
        self.told = false;
        self.executor.context().gate.reset();
    }

    /// Runs one prompt to the end of its turn. The conversation stays valid whatever happens
    /// (every tool call gets a result), so the next prompt works after a cancel or an error.
    pub async fn prompt(
        &mut self,
        text: String,
        events: &impl Report,
        cancel: &CancellationToken,
    ) -> Outcome {
        let send = |event: Event| events.report(event);
        send(Event::TurnStarted);
        let switched = self.next_model.lock().ok().and_then(|mut next| next.take());
        if let Some(model) = switched {
            self.client.set_model(model);
        }
        // A read stuck on a hung file system must not keep the turn from being stopped.
        let notice = tokio::select! {
            notice = self.refresh_instructions() => notice,
            () = cancel.cancelled() => None,
        };
        if let Some(notice) = notice {
            send(Event::Notice { text: notice });
        }
        self.history.push(Message::User(text));
        let mut total = Usage::default();
        for _ in 0..self.max_turns {
            let request = Request {
                system: &self.system,
                messages: &self.history,
            };
            let mut progress = |p: Progress| match p {
                Progress::Text(text) => send(Event::Text { text }),
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
                () = cancel.cancelled() => return finish(&send, total, Outcome::Cancelled, "cancelled".into()),
            };
            let reply = match reply {
                Ok(reply) => reply,
                Err(err) => {
                    let message = format!("agent: {err}");
                    tracing::warn!(%message, "model request failed");
                    send(Event::Error {
                        message: message.clone(),
                    });
                    return finish(&send, total, Outcome::Failed, message);
                }
            };
            total.add(reply.usage);
            send(Event::Usage {
                input: total.input,
                output: total.output,
                cached: total.cache_read,
            });
            let calls = reply.calls;
            if calls.is_empty() {
                if !reply.text.is_empty() {
                    self.history.push(Message::Assistant {
                        text: reply.text,
                        calls,
                    });
                }
                return finish(&send, total, Outcome::Done, done_line(total));
            }
            let mut results = Vec::with_capacity(calls.len());
            for call in &calls {
                let (result, diff) = if cancel.is_cancelled() {
                    (ToolResult::fail(CANCELLED), None)
                } else {
                    let args = call.args.clone().unwrap_or(Value::Null);
                    send(Event::ToolStarted {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        args,
                    });
                    match &call.args {
                        Ok(args) => self.executor.call_with_diff(&call.name, args, cancel).await,
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
            self.history.push(Message::Assistant {
                text: reply.text,
                calls,
            });
            self.history.push(Message::Results(results));
            if cancel.is_cancelled() {
                return finish(&send, total, Outcome::Cancelled, "cancelled".into());
            }
        }
        let message = format!(
            "Stopped after {} model turns without finishing.",
            self.max_turns
        );
        finish(&send, total, Outcome::MaxTurns, message)
    }
}

fn finish(send: &impl Fn(Event), total: Usage, outcome: Outcome, message: String) -> Outcome {
    send(Event::TurnDone {
        input: total.input,
        output: total.output,
        outcome,
        message,
    });
    outcome
}
