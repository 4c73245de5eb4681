//! The terminal front ends: `agent-nvim tool` (one tool by hand) and the approval question asked
//! on a TTY. stdout carries only the results; questions and notes go to stderr.

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::agent::Native;
use crate::approval::Asker;
use crate::conversation::{Checkpointed, Conversation, Events};
use crate::display::{self, Layout};
use crate::editor::NoEditor;
use crate::front::cli::{RunArgs, SandboxArgs, ToolArgs};
use crate::session::{self, SessionConfig};
use crate::sessions::resume::{self, ResumeError};
use crate::sessions::{Recorded, Store};
use crate::tools::Executor;
use crate::{Error, Result};
use agent_nvim_vocab::approval::{Action, ApprovalRequest, Decision};
use agent_nvim_vocab::conversation::ConversationEvent;
use agent_nvim_vocab::events::{Event, Outcome};

/// Asks on the controlling terminal, one key: `1`/`y` allow once, `3`/`a` allow everything this
/// session, `4`/`n`/Esc refuse.
pub struct TerminalAsker;

impl TerminalAsker {
    /// An asker when stdin is a terminal; None otherwise (nobody can answer, so the gate refuses).
    pub fn if_interactive() -> Option<Arc<dyn Asker>> {
        std::io::stdin()
            .is_terminal()
            .then(|| Arc::new(TerminalAsker) as Arc<dyn Asker>)
    }
}

impl Asker for TerminalAsker {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, Option<Decision>> {
        Box::pin(async move {
            tokio::task::spawn_blocking(move || prompt(&request).ok())
                .await
                .ok()
                .flatten()
        })
    }
}

/// The decision a key stands for; None for keys that mean nothing (the prompt waits on).
pub fn decision_for_key(key: u8) -> Option<Decision> {
    match key {
        b'1' | b'y' | b'Y' | b'\r' | b'\n' => Some(Decision::AllowOnce),
        b'3' => Some(Decision::AllowAll),
        b'a' | b'A' => Some(Decision::AllowProject),
        b'4' | b'n' | b'N' | 0x1b | 0x03 | 0x04 => Some(Decision::Refuse { reason: None }),
        _ => None,
    }
}

/// Whether `decision` grants more than the call it answers (and so takes a second key).
fn lasting(decision: &Decision) -> bool {
    match decision {
        Decision::AllowSession | Decision::AllowProject | Decision::AllowAll => true,
        Decision::AllowOnce | Decision::Edited { .. } | Decision::Refuse { .. } => false,
    }
}

/// The question as the terminal shows it: the title, then every line of a command that the
/// title does not show whole, then the diff; all of it made visible (crates/text/src/escape.rs), so nothing
/// in the request can move the cursor, erase the line or reorder what is read.
fn question_lines(request: &ApprovalRequest) -> Vec<String> {
    let is_command = matches!(request.action, Action::Command { .. });
    let title = display::approval_title(request.tool, &request.detail, is_command);
    let tool = display::visible(request.tool, Layout::OneLine);
    let mut lines = vec![format!("agent: {tool} wants to: {title}")];
    if is_command {
        let preview = display::preview_lines(&request.detail);
        if preview != [title] {
            lines.extend(preview.into_iter().map(|line| format!("  │ {line}")));
        }
    }
    if let Some(diff) = &request.diff {
        lines.extend(
            display::diff_lines(diff)
                .into_iter()
                .map(|line| format!("  {line}")),
        );
    }
    lines
}

/// Whether a running command's live line is on the terminal (stdout), for whoever writes next.
/// The question takes it off before it is asked and none is drawn while it is open
/// ([`ASKING`]): the live line is rewritten with `\r\x1b[K`, which would rub out the question's
/// last line (the keys to answer with) were the two ever on one line.
static LIVE_LINE: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// How many questions are on the terminal.
static ASKING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// True while a question is on the terminal.
fn asking() -> bool {
    ASKING.load(std::sync::atomic::Ordering::SeqCst) > 0
}

/// The live line's state, when stdout is a terminal (else there is none to guard: a pipe that
/// blocks must not hold up the question on stderr).
fn live_state(tty: bool) -> Option<std::sync::MutexGuard<'static, bool>> {
    tty.then(|| {
        LIVE_LINE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    })
}

/// Writes `text` as the live line: the line rubbed out and written again, dimmed.
fn draw_live_line(out: &mut impl Write, lead: &str, text: &str) -> std::io::Result<()> {
    write!(out, "{lead}\r\x1b[K  \x1b[2m{text}\x1b[0m")
}

/// Rubs out the live line if it is shown.
fn clear_live_line(shown: &mut bool, out: &mut impl Write) -> std::io::Result<()> {
    if std::mem::take(shown) {
        out.write_all(b"\r\x1b[K")?;
        out.flush()?;
    }
    Ok(())
}

/// Open while the question is: no live line is drawn until it is dropped.
struct Asking;

impl Asking {
    fn start() -> Self {
        ASKING.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Some(mut shown) = live_state(std::io::stdout().is_terminal()) {
            let _ = clear_live_line(&mut shown, &mut std::io::stdout());
        }
        Asking
    }

    /// The question was answered: an allowed call says it runs on the live line again (the
    /// question took it off, and a quiet command would leave the screen blank).
    fn answered(self, decision: &Decision, tool: &str) {
        let allowed = !matches!(decision, Decision::Refuse { .. });
        drop(self);
        if let Some(mut shown) = live_state(allowed && std::io::stdout().is_terminal()) {
            let mut out = std::io::stdout().lock();
            let tool = display::visible(tool, Layout::OneLine);
            if draw_live_line(&mut out, "", &format!("… running {tool}"))
                .and_then(|()| out.flush())
                .is_ok()
            {
                *shown = true;
            }
        }
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        ASKING.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn prompt(request: &ApprovalRequest) -> std::io::Result<Decision> {
    let asking = Asking::start();
    let raw = RawMode::enter();
    let stdin = std::io::stdin();
    // Keys typed before the question is on screen were meant for something else: dropped,
    // never read as an answer (dropped before it is written, so none typed after is lost).
    // Keys are read from the descriptor itself, one at a time: a buffered reader would keep
    // what follows a key for the next question.
    let _ = rustix::termios::tcflush(&stdin, rustix::termios::QueueSelector::IFlush);
    let mut err = std::io::stderr().lock();
    writeln!(err)?;
    for line in question_lines(request) {
        writeln!(err, "{line}")?;
    }
    write!(
        err,
        "  [1] {}  [a] {}  [3] {}  [4/Esc] {} > ",
        display::label::ALLOW_ONCE,
        display::project_choice(&request.action),
        display::label::ALLOW_ALL,
        display::label::REFUSE
    )?;
    err.flush()?;
    let key = || -> std::io::Result<Option<u8>> {
        let mut key = [0u8; 1];
        loop {
            match rustix::io::read(&stdin, &mut key) {
                Ok(0) => return Ok(None),
                Ok(_) => return Ok(Some(key[0])),
                Err(rustix::io::Errno::INTR) => continue,
                Err(errno) => return Err(errno.into()),
            }
        }
    };
    let mut pressed = key()?;
    let decision = loop {
        let Some(first) = pressed else {
            break Decision::Refuse { reason: None };
        };
        let Some(decision) = decision_for_key(first) else {
            pressed = key()?;
            continue;
        };
        if !lasting(&decision) {
            break decision;
        }
        // A grant that outlasts this call takes the same key again; another key is read as a
        // choice of its own.
        let label = match decision {
            Decision::AllowProject => display::project_choice(&request.action),
            _ => display::label::ALLOW_ALL.to_string(),
        };
        // The confirmation is a key pressed after it is asked for, not one typed ahead.
        let _ = rustix::termios::tcflush(&stdin, rustix::termios::QueueSelector::IFlush);
        write!(
            err,
            "\r\n  {label}: press {} again to confirm > ",
            char::from(first)
        )?;
        err.flush()?;
        pressed = key()?;
        if pressed == Some(first) {
            break decision;
        }
    };
    drop(raw);
    writeln!(err, "{}", display::decision_note(&decision))?;
    drop(err);
    asking.answered(&decision, request.tool);
    Ok(decision)
}

/// Puts the terminal in no-echo, key-at-a-time mode while alive, so one key answers; restores on
/// drop. Signals stay on: Ctrl-C still interrupts.
struct RawMode {
    saved: Option<libc::termios>,
}

impl RawMode {
    fn enter() -> Self {
        // SAFETY: termios is plain data; tcgetattr fills it or fails and we keep the terminal as is.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut saved) } != 0 {
            return RawMode { saved: None };
        }
        let mut raw = saved;
        raw.c_lflag &= !(libc::ICANON | libc::ECHO);
        raw.c_cc[libc::VMIN] = 1;
        raw.c_cc[libc::VTIME] = 0;
        // SAFETY: raw is a valid termios derived from the current one.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw) };
        RawMode { saved: Some(saved) }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            // SAFETY: restores the settings read in enter().
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, saved) };
        }
    }
}

/// A terminal session's configuration: the workspace (the current directory unless given),
/// the command-line choices, everything else at its default.
fn terminal_config(
    workspace: Option<std::path::PathBuf>,
    auto_approve: bool,
    timeout: Option<std::time::Duration>,
    pass_env: Vec<String>,
    sandbox: crate::sandbox::Sandbox,
) -> Result<SessionConfig> {
    let root = match workspace {
        Some(dir) => dir,
        None => std::env::current_dir().map_err(|source| Error::Io {
            context: "cannot read the current directory",
            source,
        })?,
    };
    let mut config = SessionConfig::new(root);
    config.auto_approve = auto_approve;
    if let Some(timeout) = timeout {
        config.settings.command_timeout = timeout;
    }
    config.settings.pass_env = pass_env;
    config.settings.sandbox = sandbox;
    config.state_dir = session::state_dir(&|name| std::env::var_os(name));
    config.saved_rules = config.state_dir.clone();
    Ok(config)
}

/// The tools of a terminal session: a gate that asks on the terminal when stdin is one, no
/// editor. A root that cannot be used is a usage error (exit 2).
fn terminal_executor(config: &SessionConfig) -> Result<Executor> {
    session::executor(
        config,
        Box::new(|_, _| TerminalAsker::if_interactive()),
        Arc::new(NoEditor),
    )
    .map_err(|err| Error::Usage(Error::from(err).to_string()))
}

/// Says on stderr what the person should know about the sandbox of `executor`'s commands (no
/// Landlock here, a rule this kernel cannot enforce): never an error.
fn warn_about_sandbox(config: &SessionConfig, executor: &Executor) {
    let (report, _) = session::sandbox_report(config, executor.context().workspace.root());
    let mut err = std::io::stderr().lock();
    for warning in display::sandbox_warnings(&report) {
        let _ = writeln!(err, "{warning}");
    }
}

/// `agent-nvim tool`: runs one tool and prints `{"ok", "text", "summary"}` on stdout. Exit 0 when
/// the tool ran, whatever its result.
pub fn run_tool(args: ToolArgs) -> Result<u8> {
    let mut config = terminal_config(
        args.workspace,
        args.auto_approve,
        args.timeout,
        args.pass_env,
        args.sandbox.sandbox(),
    )?;
    // One call for a script: no conversation to rewind, so no checkpoints.
    config.state_dir = None;
    let executor = terminal_executor(&config)?;
    if args.name == "run_bash" {
        warn_about_sandbox(&config, &executor);
    }
    let runtime = super::runtime_single()?;
    let call_args = serde_json::Value::Object(args.args);
    let result = runtime.block_on(executor.call(&args.name, &call_args, &CancellationToken::new()));
    let json = serde_json::to_string(&result).map_err(|err| Error::Io {
        context: "cannot encode the result",
        source: err.into(),
    })?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{json}")
        .and_then(|()| out.flush())
        .map_err(|source| Error::Io {
            context: "cannot write the result",
            source,
        })?;
    Ok(0)
}

/// `agent-nvim run`: the agent on one prompt. The assistant's text streams to stdout, a line per
/// tool call, then `done · ...`. Exit 0 when the turn completes, 1 on an API or configuration
/// error, 130 after Ctrl-C (which cancels the turn and kills a running command's tree first).
pub fn run_agent(args: RunArgs) -> Result<u8> {
    let mut config = terminal_config(
        args.workspace,
        args.auto_approve,
        args.timeout,
        args.pass_env,
        args.sandbox.sandbox(),
    )?;
    config.provider = args.choice;
    if let Some(max_turns) = args.max_turns {
        config.max_turns = max_turns;
    }
    config.max_cost = args.max_cost;
    if let Some(files) = args.instructions {
        config.instructions = files;
    }
    let executor = terminal_executor(&config)?;
    warn_about_sandbox(&config, &executor);
    let store = config
        .state_dir
        .as_deref()
        .map(|dir| Store::new(dir, executor.context().workspace.root()));
    let resumed = match (args.resume, &store) {
        (None, _) => None,
        (Some(id), _) => {
            let header =
                resume::header(store.as_ref(), id.as_deref()).map_err(|err| match err {
                    ResumeError::NoStore => Error::Session(
                        "--resume needs a state directory: set HOME or XDG_STATE_HOME".into(),
                    ),
                    other => Error::Session(other.to_string()),
                })?;
            let store = store
                .as_ref()
                .ok_or(Error::Session(ResumeError::NoStore.to_string()))?;
            Some(
                store
                    .load(&header.id)
                    .map_err(|err| Error::Session(err.to_string()))?,
            )
        }
    };
    let checkpoints = executor.context().checkpoints.clone();
    let native: Arc<dyn Conversation> = Arc::new(Native::new(session::agent(&config, executor)?));
    let recorded = store.map(|store| Arc::new(Recorded::new(native.clone(), store)));
    let saved: Arc<dyn Conversation> = match &recorded {
        Some(recorded) => recorded.clone(),
        None => native,
    };
    // Checkpointed before the prompt as in Neovim (session::decorate's order), so a rewind from
    // Neovim after `--resume` can go back to before it.
    let conversation = Checkpointed::wrap(saved, checkpoints.as_ref());
    let runtime = super::runtime()?;
    let code = runtime.block_on(async {
        if let Some(saved) = &resumed {
            resume::continues(conversation.as_ref(), &saved.header)
                .map_err(|err| Error::Session(err.to_string()))?;
            resume::continue_in(conversation.as_ref(), saved)
                .await
                .map_err(|err| match err {
                    ResumeError::NotContinued(err) => Error::Session(err.to_string()),
                    other => Error::Session(other.to_string()),
                })?;
            let _ = writeln!(
                std::io::stderr(),
                "agent: resumed {} · {}",
                saved.header.id,
                display::one_line(&crate::secrets::redact(&saved.title()))
            );
        }
        let (events, received) = tokio::sync::mpsc::unbounded_channel();
        let events = Events::new(events);
        let cancel = CancellationToken::new();
        let on_interrupt = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_interrupt.cancel();
            }
        });
        let printer = tokio::spawn(print_events(received));
        let outcome = conversation
            .prompt(args.prompt.into(), &events, &cancel)
            .await;
        drop(events);
        let _ = printer.await;
        Ok::<u8, Error>(match outcome {
            Outcome::Done => 0,
            Outcome::Failed | Outcome::MaxTurns => 1,
            Outcome::Cancelled => 130,
        })
    });
    // Everything recorded is on the disk before the process ends.
    if let Some(recorded) = &recorded {
        recorded.flush();
    }
    // A question still waiting for a key must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    code
}

/// `agent-nvim sandbox`: what the sandbox would enforce for run_bash's commands in the
/// workspace, as text (the summary, where commands may write, the warnings) or, with `--json`,
/// as one [`crate::sandbox::Report`] object (what `:checkhealth agent` reads).
pub fn sandbox_info(args: SandboxArgs) -> Result<u8> {
    let config = terminal_config(
        args.workspace,
        false,
        None,
        Vec::new(),
        args.sandbox.sandbox(),
    )?;
    let workspace = crate::workspace::Workspace::new(&config.workspace)
        .map_err(|err| Error::Usage(Error::from(err).to_string()))?;
    let report = config.settings.sandbox.report(workspace.root());
    let text = if args.json {
        // The warnings as a person reads them anywhere else (`:checkhealth agent` shows these).
        let shown = crate::sandbox::Report {
            warnings: display::sandbox_warnings(&report),
            ..report.clone()
        };
        serde_json::to_string(&shown).map_err(|err| Error::Io {
            context: "cannot encode the report",
            source: err.into(),
        })? + "\n"
    } else {
        let mut text = format!(
            "Landlock ABI: {}\nsandbox: {}\n",
            report.abi, report.summary
        );
        if report.is_on() {
            let places: Vec<String> = report
                .writable
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            text.push_str(&format!("writable: {}\n", places.join(", ")));
        }
        for (heading, phrases) in [
            ("refused", &report.enforced),
            ("not refused", &report.not_enforced),
        ] {
            if !phrases.is_empty() {
                text.push_str(heading);
                text.push_str(":\n");
                for phrase in phrases.iter() {
                    text.push_str(&format!("  - {phrase}\n"));
                }
            }
        }
        for warning in display::sandbox_warnings(&report) {
            text.push_str(&warning);
            text.push('\n');
        }
        text
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|source| Error::Io {
            context: "cannot write the report",
            source,
        })?;
    Ok(0)
}

/// `agent-nvim sessions`: the workspace's saved conversations, the most recent first, one a
/// line: id, age, prompts, tokens, title (or why it cannot be resumed).
pub fn list_sessions(workspace: Option<std::path::PathBuf>) -> Result<u8> {
    let config = terminal_config(
        workspace,
        false,
        None,
        Vec::new(),
        crate::sandbox::Sandbox::default(),
    )?;
    let executor = terminal_executor(&config)?;
    let Some(state_dir) = config.state_dir.as_deref() else {
        return Err(Error::Session(
            "no state directory: set HOME or XDG_STATE_HOME".into(),
        ));
    };
    let store = Store::new(state_dir, executor.context().workspace.root());
    let now = display::now();
    let mut out = std::io::stdout().lock();
    for listed in store.list() {
        let line = match &listed.problem {
            Some(problem) => format!("{}  ({problem})", listed.id),
            None => format!(
                "{}  {}  {} prompt{}  {} tokens  {}",
                listed.id,
                display::age_at(listed.updated, now),
                listed.prompts,
                if listed.prompts == 1 { "" } else { "s" },
                listed.tokens,
                display::one_line(&listed.title)
            ),
        };
        writeln!(out, "{line}").map_err(|source| Error::Io {
            context: "cannot write the list",
            source,
        })?;
    }
    Ok(0)
}

/// Shows the agent's events: text and tool rows on stdout, problems on stderr. Each is made
/// visible first (crates/text/src/escape.rs), so the model's text cannot hide, repaint or move anything on
/// the terminal, the question included; every text is redacted; and a failed turn's closing
/// line is not printed again when it repeats the error just shown.
async fn print_events(mut events: tokio::sync::mpsc::UnboundedReceiver<ConversationEvent>) {
    use crate::secrets::redact;
    let mut at_line_start = true;
    let mut last_error: Option<String> = None;
    let tty = std::io::stdout().is_terminal();
    while let Some(event) = events.recv().await {
        // The built-in agent reports no external agent's updates.
        let ConversationEvent::Turn(event) = event else {
            continue;
        };
        let event = display::shown(event);
        // A running command's live line (LIVE_LINE) is rubbed out before anything else is
        // written, and none is drawn while a question is open.
        let drawn = matches!(
            event,
            Event::ToolProgress { .. } | Event::ToolStarted { .. }
        );
        if drawn && tty && asking() {
            continue;
        }
        let mut guard = live_state(tty);
        let mut none = false;
        let live: &mut bool = match guard.as_mut() {
            Some(shown) => shown,
            None => &mut none,
        };
        let mut out = std::io::stdout().lock();
        if !drawn && clear_live_line(live, &mut out).is_err() {
            return;
        }
        let mut line = |text: &str, out: &mut std::io::StdoutLock<'_>| {
            let lead = if at_line_start { "" } else { "\n" };
            at_line_start = true;
            writeln!(out, "{lead}{}", redact(text))
        };
        let written = match event {
            Event::Text { text } => {
                at_line_start = text.ends_with('\n');
                out.write_all(redact(&text).as_bytes())
            }
            // Thinking is not the answer: dimmed on a terminal's stderr, else not shown.
            Event::Thought { text } => {
                let mut err = std::io::stderr();
                if err.is_terminal() {
                    write!(err, "\x1b[2m{}\x1b[0m", redact(&text))
                } else {
                    Ok(())
                }
            }
            Event::Compacted {
                prompts,
                before,
                after,
                ..
            } => writeln!(
                std::io::stderr(),
                "agent: {}",
                crate::agent::compacted_line(prompts, before, after)
            ),
            // Beside the answer, not in it: stdout is the model's text and the tool rows.
            Event::Notice { text } => writeln!(std::io::stderr(), "agent: {}", redact(&text)),
            Event::ToolFinished { ok, summary, .. } => line(
                &format!("{} {summary}", if ok { "▸" } else { "✗" }),
                &mut out,
            ),
            Event::TurnDone {
                outcome: Outcome::Done,
                message,
                ..
            } => line(&message, &mut out),
            Event::TurnDone { message, .. } if last_error.as_ref() == Some(&message) => Ok(()),
            Event::TurnDone { message, .. } | Event::Error { message } => {
                let _ = line("", &mut out).and_then(|()| out.flush());
                let shown = writeln!(
                    std::io::stderr(),
                    "agent: {}",
                    redact(message.trim_start_matches("agent: "))
                );
                last_error = Some(message);
                shown
            }
            Event::Retrying {
                attempt,
                delay_ms,
                reason,
            } => writeln!(
                std::io::stderr(),
                "agent: {}; retrying in {:.1}s (attempt {attempt})",
                redact(&reason),
                delay_ms as f64 / 1000.0
            ),
            // One line, rewritten: the newest line a running command printed.
            Event::ToolProgress { output, .. } if tty => {
                let lead = if at_line_start { "" } else { "\n" };
                at_line_start = true;
                *live = true;
                // A terminal that says no size (0 columns, as a bare pty does): 80.
                let width = rustix::termios::tcgetwinsize(&out)
                    .map(|size| size.ws_col)
                    .ok()
                    .filter(|&columns| columns > 0)
                    .unwrap_or(80);
                let columns = usize::from(width).saturating_sub(3);
                draw_live_line(&mut out, lead, &live_line(&redact(&output), columns))
            }
            // Until it prints (or asks), a started call says so on the live line: a quiet
            // command is not a hung screen.
            Event::ToolStarted { name, .. } if tty => {
                let lead = if at_line_start { "" } else { "\n" };
                at_line_start = true;
                *live = true;
                draw_live_line(&mut out, lead, &format!("… running {}", redact(&name)))
            }
            Event::TurnStarted
            | Event::ToolStarted { .. }
            | Event::ToolProgress { .. }
            | Event::Usage { .. } => Ok(()),
        };
        if written.and_then(|()| out.flush()).is_err() {
            // stdout is gone (a closed pipe): nothing more can be shown.
            return;
        }
    }
}

/// The last line of `output` that is not blank, cut to fit `columns` terminal columns (a
/// character outside ASCII counted as two, so a wide one never wraps it) with tabs as spaces:
/// a line that wrapped could not be rewritten in place.
fn live_line(output: &str, columns: usize) -> String {
    let last = output
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("");
    let mut shown = String::new();
    let mut used = 0;
    for c in last.chars() {
        let c = if c == '\t' { ' ' } else { c };
        let wide = if c.is_ascii() { 1 } else { 2 };
        if used + wide > columns {
            // The last column or two say it goes on.
            while used + 1 > columns {
                match shown.pop() {
                    Some(gone) => used -= if gone.is_ascii() { 1 } else { 2 },
                    None => break,
                }
            }
            if columns > 0 {
                shown.push('…');
            }
            break;
        }
        used += wide;
        shown.push(c);
    }
    shown
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_live_line_is_the_last_printed_line_cut_to_the_terminal() {
        assert_eq!(live_line("one\ntwo\n\n  \n", 20), "two");
        assert_eq!(live_line("", 20), "");
        assert_eq!(live_line("abcdefghij", 10), "abcdefghij");
        assert_eq!(live_line("abcdefghijk", 10), "abcdefghi…");
        assert_eq!(live_line("a\tb", 10), "a b");
        // Wide characters count two columns: five of them fill ten.
        assert_eq!(live_line("日本語日本", 10), "日本語日本");
        assert_eq!(live_line("日本語日本語", 10), "日本語日…");
    }

    fn command(command: &str) -> ApprovalRequest {
        ApprovalRequest {
            tool: "run_bash",
            detail: command.into(),
            diff: None,
            action: Action::Command {
                command: command.into(),
            },
            proposal: None,
        }
    }

    #[test]
    fn the_question_shows_every_line_of_a_long_command_and_no_raw_control() {
        assert_eq!(
            question_lines(&command("touch PWNED #\r\u{1b}[2Kls -la")),
            vec!["agent: run_bash wants to: touch PWNED #\\r\\e[2Kls -la"]
        );
        let long = format!("ls -la{}touch PWNED", "\n".repeat(61));
        assert_eq!(
            question_lines(&command(&long)),
            vec![
                "agent: run_bash wants to: run_bash · 62 lines",
                "  │ ls -la",
                "  │ [… 60 blank lines …]",
                "  │ touch PWNED"
            ]
        );
        let mut edit = command("edit a\u{202e}b.txt (replace 1 chars with 2)");
        edit.tool = "edit_file";
        edit.action = Action::Edit { rel: "x".into() };
        edit.diff = Some("-a\n+\u{1b}[8mb\n".into());
        assert_eq!(
            question_lines(&edit),
            vec![
                "agent: edit_file wants to: edit a\\u{202e}b.txt (replace 1 chars with 2)",
                "  -a",
                "  +\\e[8mb"
            ]
        );
    }

    #[test]
    fn keys_map_to_the_four_terminal_choices_and_others_are_ignored() {
        let once = Some(Decision::AllowOnce);
        let all = Some(Decision::AllowAll);
        let project = Some(Decision::AllowProject);
        let refuse = Some(Decision::Refuse { reason: None });
        let got: Vec<_> = [b'1', b'y', b'\r', b'3', b'a', b'4', b'n', 0x1b, b'2', b'x']
            .into_iter()
            .map(decision_for_key)
            .collect();
        assert_eq!(
            got,
            vec![
                once.clone(),
                once.clone(),
                once,
                all,
                project,
                refuse.clone(),
                refuse.clone(),
                refuse,
                None,
                None
            ]
        );
    }
}
