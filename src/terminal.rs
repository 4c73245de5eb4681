//! The terminal front ends: `agent-nvim tool` (one tool by hand) and the approval question asked
//! on a TTY. stdout carries only the results; questions and notes go to stderr.

use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::approval::{ApprovalRequest, Asker, Decision, Gate};
use crate::cli::ToolArgs;
use crate::editor::NoEditor;
use crate::tools::{Executor, Settings, ToolContext};
use crate::workspace::Workspace;
use crate::{Error, Result};

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
        b'3' | b'a' | b'A' => Some(Decision::AllowAll),
        b'4' | b'n' | b'N' | 0x1b | 0x03 | 0x04 => Some(Decision::Refuse { reason: None }),
        _ => None,
    }
}

fn prompt(request: &ApprovalRequest) -> std::io::Result<Decision> {
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "\nagent: {} wants to: {}",
        request.tool, request.detail
    )?;
    if let Some(diff) = &request.diff {
        for line in diff.lines() {
            writeln!(err, "  {line}")?;
        }
    }
    write!(
        err,
        "  [1] Allow once  [3] Allow everything this session  [4/Esc] Refuse > "
    )?;
    err.flush()?;
    let raw = RawMode::enter();
    let mut stdin = std::io::stdin().lock();
    let mut key = [0u8; 1];
    let decision = loop {
        if stdin.read(&mut key)? == 0 {
            break Decision::Refuse { reason: None };
        }
        if let Some(decision) = decision_for_key(key[0]) {
            break decision;
        }
    };
    drop(raw);
    let label = match &decision {
        Decision::AllowOnce => "allowed once",
        Decision::AllowSession => "allowed for this session",
        Decision::AllowAll => "allowed (everything this session)",
        Decision::Refuse { .. } => "refused",
    };
    writeln!(err, "{label}")?;
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

/// `agent-nvim tool`: runs one tool and prints `{"ok", "text", "summary"}` on stdout. Exit 0 when
/// the tool ran, whatever its result.
pub fn run_tool(args: ToolArgs) -> Result<u8> {
    let root = match args.workspace {
        Some(dir) => dir,
        None => std::env::current_dir().map_err(|source| Error::Io {
            context: "cannot read the current directory",
            source,
        })?,
    };
    let workspace = Workspace::new(&root).map_err(|err| Error::Usage(err.to_string()))?;
    let mut settings = Settings::default();
    if let Some(timeout) = args.timeout {
        settings.command_timeout = timeout;
    }
    let executor = Executor::new(ToolContext {
        workspace,
        gate: Arc::new(Gate::new(
            args.auto_approve,
            TerminalAsker::if_interactive(),
        )),
        editor: Arc::new(NoEditor),
        settings,
    });
    let runtime = runtime()?;
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

/// The multi-threaded runtime every front end runs on.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            context: "cannot start the async runtime",
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_the_three_terminal_choices_and_others_are_ignored() {
        let once = Some(Decision::AllowOnce);
        let all = Some(Decision::AllowAll);
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
                all.clone(),
                all,
                refuse.clone(),
                refuse.clone(),
                refuse,
                None,
                None
            ]
        );
    }
}
