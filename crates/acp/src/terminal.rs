//! `terminal/*`: commands an external agent runs through us, so that a person sees them, allows
//! them, and can stop them.
//!
//! `terminal/create` runs nothing nobody allowed: the person's deny rules refuse it; an allow
//! rule, auto_approve, or the person's own "allow" to the agent's permission question for exactly
//! this command line covers it; otherwise the picker asks, showing the line and its directory.
//! The line is what runs (`{shell} -c LINE`), so what the picker shows is what happens: the
//! agent's `command`, or, with `args`, the command and its arguments each quoted for the shell.
//! The working directory goes through the one path check. Before it starts, a checkpoint. It
//! runs as run_bash's commands do ([`crate::process::live`]): its own process tree, the command
//! timeout, the agent's sandbox or else run_bash's when either is on, no key variables. Its output (both streams, as
//! they arrive) is kept up to `outputByteLimit`, at most 16 MiB, and every tool call row that
//! embeds it shows it live. A cancelled turn (`:Agent stop`) kills every terminal; release kills
//! it and frees its output, keeping only what its rows show.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use agent_client_protocol::{Error, ErrorCode};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{PermissionAsk, PermissionChoice, Shared};
use crate::checkpoint::Kind;
use crate::permissions::{Judgement, Rules};
use crate::process::live::{Live, LiveSpec, MAX_KEPT};
use crate::text::MAX_CHARS;
use agent_nvim_vocab::approval::Action;

/// How long a live row waits after a change before it is redrawn: one frame, so a command
/// printing fast costs one update per frame, not one per chunk.
const FRAME: Duration = Duration::from_millis(33);
/// How many terminals an agent may hold unreleased at once (each may keep 16 MiB).
const MAX_TERMINALS: usize = 32;

/// How terminals run (from the person's configuration, as run_bash's commands do).
#[derive(Debug, Clone)]
pub struct TerminalSettings {
    /// How long a terminal's command may run before its tree is killed.
    pub timeout: Duration,
    /// The shell; None picks bash, else /bin/sh.
    pub shell: Option<PathBuf>,
    /// Key variables the command gets anyway (`pass_env`).
    pub pass_env: Vec<String>,
    /// The person's permission rules.
    pub rules: Rules,
    /// run_bash's sandbox (`sandbox` in the configuration), for a terminal of an agent not
    /// started in one of its own; None: off.
    pub sandbox: Option<crate::sandbox::Policy>,
}

impl Default for TerminalSettings {
    fn default() -> Self {
        TerminalSettings {
            timeout: Duration::from_secs(120),
            shell: None,
            pass_env: Vec::new(),
            rules: Rules::default(),
            sandbox: None,
        }
    }
}

/// A command line the person allowed through the agent's own permission question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Allowance {
    pub(super) line: String,
    /// `allow_always`: it covers every later terminal with this line, not just the next.
    pub(super) always: bool,
}

/// One terminal.
struct Terminal {
    live: Arc<Live>,
    line: String,
}

/// The session's terminals, by id.
#[derive(Default)]
pub(super) struct Terminals {
    running: HashMap<String, Terminal>,
    /// What the rows of a released terminal keep showing (at most [`MAX_CHARS`] each).
    released: HashMap<String, String>,
    next: u64,
}

/// What a tool call row shows of a terminal it embeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Shown {
    /// Its output so far (the newest [`MAX_CHARS`] characters) and, once ended, the exit line.
    pub(super) text: String,
    /// It still runs.
    pub(super) running: bool,
}

impl Terminals {
    /// What a row shows of terminal `id`; None for an id we never made.
    pub(super) fn shown(&self, id: &str) -> Option<Shown> {
        if let Some(text) = self.released.get(id) {
            return Some(Shown {
                text: text.clone(),
                running: false,
            });
        }
        let terminal = self.running.get(id)?;
        Some(shown(&terminal.live))
    }

    /// Kills every terminal still running (`:Agent stop`, the session's end).
    pub(super) fn kill_all(&self) {
        for terminal in self.running.values() {
            terminal.live.kill();
        }
    }

    fn get(&self, id: &str) -> Result<Arc<Live>, Error> {
        self.running
            .get(id)
            .map(|terminal| terminal.live.clone())
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::INVALID_PARAMS,
                    format!("no terminal '{id}': it was released or never created"),
                )
            })
    }
}

/// A row's view of a live command: the newest [`MAX_CHARS`] characters (only those decoded).
fn shown(live: &Live) -> Shown {
    let (output, cut) = live.output_tail(MAX_CHARS);
    let mut text = last_chars(&output, MAX_CHARS, cut);
    let exit = live.exit();
    if let Some(exit) = &exit {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&exit.trailer(live.timeout()));
    }
    Shown {
        text,
        running: exit.is_none(),
    }
}

/// The last `limit` characters of `text`, after a marker when anything before them is gone.
fn last_chars(text: &str, limit: usize, truncated: bool) -> String {
    let count = text.chars().count();
    if count <= limit && !truncated {
        return text.to_string();
    }
    let skip = count.saturating_sub(limit);
    let start = text.char_indices().nth(skip).map_or(text.len(), |(i, _)| i);
    format!("[… earlier output cut …]\n{}", &text[start..])
}

/// `word` as the shell reads it back: as it is when it holds only safe characters, else in
/// single quotes (a quote inside written `'\''`).
fn quoted(word: &str) -> String {
    let safe = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The line a terminal runs: `command` alone, or it and `args` each quoted; the agent's
/// variables first, as an `export` the person reads with the rest.
pub(super) fn line_of(command: &str, args: &[String], env: &[(String, String)]) -> String {
    let run = if args.is_empty() {
        command.to_string()
    } else {
        std::iter::once(command)
            .chain(args.iter().map(String::as_str))
            .map(quoted)
            .collect::<Vec<_>>()
            .join(" ")
    };
    if env.is_empty() {
        return run;
    }
    let sets: Vec<String> = env
        .iter()
        .map(|(name, value)| format!("{name}={}", quoted(value)))
        .collect();
    format!("export {}; {run}", sets.join(" "))
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::INVALID_PARAMS, message.into())
}

fn terminal_id(params: &Value) -> Result<String, Error> {
    params
        .get("terminalId")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| invalid("terminalId is missing"))
}

impl Shared {
    fn terminals(&self) -> std::sync::MutexGuard<'_, Terminals> {
        self.terminals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Kills every running terminal of the session.
    pub(super) fn kill_terminals(&self) {
        self.terminals().kill_all();
    }

    /// What a row shows of terminal `id`.
    pub(super) fn terminal_shown(&self, id: &str) -> Option<Shown> {
        self.terminals().shown(id)
    }

    /// Remembers a line the person allowed through the agent's question.
    pub(super) fn allow_line(&self, line: String, always: bool) {
        let mut allowances = self
            .allowances
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !allowances.iter().any(|a| a.line == line && a.always) {
            allowances.push(Allowance { line, always });
        }
    }

    /// Forgets the `allow_once` lines (a new turn starts).
    pub(super) fn forget_allowed_once(&self) {
        self.allowances
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|a| a.always);
    }

    /// Whether the person allowed `line` through the agent's question: an `allow_once` is used
    /// up by the terminal it covers.
    fn take_allowance(&self, line: &str) -> bool {
        let mut allowances = self
            .allowances
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(at) = allowances.iter().position(|a| a.line == line) else {
            return false;
        };
        if !allowances[at].always {
            allowances.remove(at);
        }
        true
    }

    /// `terminal/create`: checked, allowed, checkpointed, started. The answer's result or error.
    pub(super) async fn create_terminal(
        self: &Arc<Self>,
        params: &Value,
        turn: &CancellationToken,
    ) -> Result<Value, Error> {
        let command = params
            .get("command")
            .and_then(Value::as_str)
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| invalid("terminal/create needs a command"))?;
        let args: Vec<String> = match params.get("args") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|a| a.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| invalid("terminal/create: args must be strings"))?,
            Some(_) => return Err(invalid("terminal/create: args must be a list")),
        };
        let mut env: Vec<(String, String)> = Vec::new();
        for var in params
            .get("env")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let (Some(name), Some(value)) = (
                var.get("name").and_then(Value::as_str),
                var.get("value").and_then(Value::as_str),
            ) else {
                return Err(invalid(
                    "terminal/create: each env entry needs a name and a value",
                ));
            };
            // Only what the shell's `export` takes, so the line shows it as it is.
            let identifier = name
                .chars()
                .next()
                .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
                && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric());
            if !identifier || value.contains('\0') {
                return Err(invalid(format!(
                    "terminal/create: the variable {name:?} cannot be set (a name of letters, \
                     digits and _, a value without NUL)"
                )));
            }
            env.push((name.to_string(), value.to_string()));
        }
        let root = self.workspace.root().to_path_buf();
        let cwd = match params.get("cwd").and_then(Value::as_str) {
            None => root.clone(),
            Some(dir) => {
                let resolved = self.workspace.resolve_literal(dir).map_err(|err| {
                    invalid(format!(
                        "terminal/create: the directory '{dir}' is refused: {err}"
                    ))
                })?;
                if !resolved.path.is_dir() {
                    return Err(invalid(format!(
                        "terminal/create: '{dir}' is not a directory in the workspace"
                    )));
                }
                resolved.path
            }
        };
        let keep = params
            .get("outputByteLimit")
            .and_then(Value::as_u64)
            .map_or(MAX_KEPT, |limit| {
                usize::try_from(limit).unwrap_or(usize::MAX).min(MAX_KEPT)
            });
        if command.contains('\0') || args.iter().any(|a| a.contains('\0')) {
            return Err(invalid("terminal/create: a command cannot hold a NUL byte"));
        }
        let line = line_of(command, &args, &env);
        if self.terminals().running.len() >= MAX_TERMINALS {
            return Err(Error::new(
                ErrorCode::INTERNAL_ERROR,
                format!(
                    "terminal/create: {MAX_TERMINALS} terminals are held already; release one \
                     (terminal/release) first"
                ),
            ));
        }
        self.allow_terminal(&line, &cwd, turn).await?;
        self.checkpoint(Kind::Command, &line).await;
        let spec = LiveSpec {
            line: line.clone(),
            shell: self.terminal.shell.clone(),
            // The agent's variables are in the line, where the person saw them, never in the
            // shell's own environment (where BASH_ENV, ENV or PATH would act unseen).
            cwd,
            env_remove: crate::process::hidden_env(&self.terminal.pass_env),
            timeout: self.terminal.timeout,
            // The agent's own sandbox, else run_bash's: a terminal is confined as either is.
            sandbox: self
                .sandbox
                .clone()
                .or_else(|| self.terminal.sandbox.clone()),
            keep,
        };
        let live = crate::external::start_terminal(&self.authority, &spec)
            .await
            .map_err(|err| {
                Error::new(ErrorCode::INTERNAL_ERROR, format!("terminal/create: {err}"))
            })?;
        let live = Arc::new(live);
        let id = {
            let mut terminals = self.terminals();
            terminals.next += 1;
            let id = format!("term-{}", terminals.next);
            terminals.running.insert(
                id.clone(),
                Terminal {
                    live: live.clone(),
                    line: line.clone(),
                },
            );
            id
        };
        tracing::info!(agent = %self.name, terminal = %id, "started a terminal");
        // A turn cancelled while it started: it does not outlive the cancel.
        if turn.is_cancelled() {
            live.kill();
        }
        tokio::spawn(watch_rows(Arc::downgrade(self), id.clone(), live));
        Ok(json!({ "terminalId": id }))
    }

    /// Whether `line` may run (see the module doc); Err with the refusal the agent reads.
    async fn allow_terminal(
        &self,
        line: &str,
        cwd: &std::path::Path,
        turn: &CancellationToken,
    ) -> Result<(), Error> {
        let refused = |why: String| Error::new(ErrorCode::INTERNAL_ERROR, why);
        if turn.is_cancelled() {
            return Err(refused("the turn was cancelled; nothing was run".into()));
        }
        // Refused before anything judges or shows it, as run_bash's own commands are.
        if let Some(chars) = crate::text::chars_over(line, crate::tools::MAX_ARGUMENT_CHARS) {
            return Err(refused(format!(
                "the command is {} characters long, over the limit of {}; it was not run",
                crate::text::grouped(chars),
                crate::text::grouped(crate::tools::MAX_ARGUMENT_CHARS)
            )));
        }
        let judgement = self.terminal.rules.judge(&Action::Command {
            command: line.to_string(),
        });
        if let Judgement::Deny { rule } = &judgement {
            return Err(refused(Judgement::refusal(rule)));
        }
        // The agent's question showed the workspace root as where it runs: elsewhere, asked.
        let covered = cwd == self.workspace.root() && self.take_allowance(line);
        if covered || judgement == Judgement::Allow {
            return Ok(());
        }
        if self.auto_approve && self.terminal.rules.auto_approvable(&judgement) {
            return Ok(());
        }
        let can_ask = tokio::select! {
            can_ask = self.host.can_ask() => can_ask,
            () = turn.cancelled() => false,
        };
        if !can_ask {
            return Err(refused(format!(
                "nobody can be asked to allow `{line}`, so it was not run"
            )));
        }
        let ask = PermissionAsk {
            tool_call_id: String::new(),
            title: format!("Run {line}"),
            options: vec![
                PermissionChoice {
                    id: "allow".into(),
                    name: "Allow".into(),
                    kind: "allow_once".into(),
                },
                PermissionChoice {
                    id: "reject".into(),
                    name: "Reject".into(),
                    kind: "reject_once".into(),
                },
            ],
            diff: None,
            command: Some(line.to_string()),
            cwd: Some(cwd.display().to_string()),
            timeout: Some(self.terminal.timeout.as_secs_f64()),
            edit: None,
        };
        let picked = tokio::select! {
            picked = self.host.ask_permission(ask) => picked,
            () = turn.cancelled() => None,
        };
        match picked {
            Some(picked) if picked.option == "allow" => Ok(()),
            _ => Err(refused(format!("the user refused to run `{line}`"))),
        }
    }

    /// `terminal/output`.
    pub(super) fn terminal_output(&self, params: &Value) -> Result<Value, Error> {
        let live = self.terminals().get(&terminal_id(params)?)?;
        let (output, truncated) = live.output();
        let mut answer = json!({ "output": output, "truncated": truncated });
        if let Some(exit) = live.exit() {
            answer["exitStatus"] = exit_status(&exit);
        }
        Ok(answer)
    }

    /// `terminal/wait_for_exit` (answered from a spawned task: it may wait long).
    pub(super) async fn terminal_wait(&self, params: &Value) -> Result<Value, Error> {
        let live = self.terminals().get(&terminal_id(params)?)?;
        Ok(exit_status(&live.wait().await))
    }

    /// `terminal/kill`: the command dies; the terminal stays for output and wait.
    pub(super) fn terminal_kill(&self, params: &Value) -> Result<Value, Error> {
        let live = self.terminals().get(&terminal_id(params)?)?;
        live.kill();
        Ok(json!({}))
    }

    /// `terminal/release`: killed if it runs, its output freed; its rows keep their last view.
    pub(super) fn terminal_release(&self, params: &Value) -> Result<Value, Error> {
        let id = terminal_id(params)?;
        let terminal = {
            let mut terminals = self.terminals();
            let terminal = terminals.running.remove(&id).ok_or_else(|| {
                invalid(format!(
                    "no terminal '{id}': it was released or never created"
                ))
            })?;
            terminal.live.kill();
            let mut last = shown(&terminal.live).text;
            if terminal.live.exit().is_none() {
                last.push_str("\n[released]");
            }
            terminals.released.insert(id.clone(), last);
            terminal
        };
        tracing::info!(agent = %self.name, terminal = %id, line = %terminal.line.len(), "released a terminal");
        drop(terminal);
        self.refresh_rows(&id);
        Ok(json!({}))
    }

    /// Redraws every tool call row that embeds terminal `id`.
    fn refresh_rows(&self, id: &str) {
        let events = {
            let tools = self.tools();
            tools.embedding(id, &self.workspace)
        };
        for event in events {
            self.report(event);
        }
    }
}

/// The terminal's exit as the protocol says it: `{exitCode, signal}`.
fn exit_status(exit: &crate::process::live::Exit) -> Value {
    json!({ "exitCode": exit.code, "signal": exit.signal })
}

/// Keeps the rows embedding a terminal up to date while it runs: after each change, one frame
/// later, every such row is redrawn; once more when it has ended. Stops when the session or the
/// terminal is gone.
async fn watch_rows(shared: Weak<Shared>, id: String, live: Arc<Live>) {
    let mut changes = live.changes();
    // Only the receiver: the session's map holds the terminal, not this task.
    drop(live);
    loop {
        let ended = changes.changed().await.is_err();
        if !ended {
            tokio::time::sleep(FRAME).await;
            // What came during the frame is drawn with it.
            changes.borrow_and_update();
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.refresh_rows(&id);
        let done = shared
            .terminal_shown(&id)
            .is_none_or(|shown| !shown.running);
        if ended || done {
            return;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_line_with_args_quotes_each_word_that_needs_it() {
        assert_eq!(line_of("cargo test", &[], &[]), "cargo test");
        assert_eq!(
            line_of("cargo", &["test".into(), "--".into(), "a b".into()], &[]),
            "cargo test -- 'a b'"
        );
        assert_eq!(line_of("echo", &["it's".into()], &[]), r"echo 'it'\''s'");
        assert_eq!(
            line_of("echo", &["".into(), "$HOME".into()], &[]),
            "echo '' '$HOME'"
        );
        // The agent's variables are part of what is shown and run.
        assert_eq!(
            line_of(
                "make",
                &[],
                &[
                    ("CI".into(), "1".into()),
                    ("BASH_ENV".into(), "/tmp/x y".into())
                ]
            ),
            "export CI=1 BASH_ENV='/tmp/x y'; make"
        );
    }

    #[test]
    fn a_row_keeps_the_newest_characters_after_a_marker() {
        assert_eq!(last_chars("abc", 5, false), "abc");
        assert_eq!(
            last_chars("abcdef", 3, false),
            "[… earlier output cut …]\ndef"
        );
        assert_eq!(last_chars("abc", 5, true), "[… earlier output cut …]\nabc");
    }
}
