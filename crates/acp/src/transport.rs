//! The agent's process and the line transport over its stdio.
//!
//! The agent runs in the workspace as the root of a [`Tree`], started by the same
//! [`crate::process::spawn_tree`] as run_bash's commands, so that quitting kills what it started
//! too: `npx` wrappers, the real agent behind them, its language servers, and anything it
//! detached (`setsid`, a double fork). With `AcpSpec::sandbox` (`acp.agents.NAME.sandbox`) it
//! starts under the same Landlock rules as run_bash's commands ([`crate::sandbox::confine`]).
//! Its stderr goes to the log, never to our stdout (which is Neovim's msgpack channel in RPC
//! mode); the last lines are kept to explain a crash. Its stdout is read a line at a time and
//! anything that is not a JSON object (a banner, a debugger notice, stray bytes) is skipped and
//! logged instead of being answered as a parse error.

use std::collections::VecDeque;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_client_protocol::Lines;
use futures::{Sink, Stream};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

use super::inflight::Outline;
use super::{AcpSpec, ConnectError};
use crate::reaper::Tree;

/// Lines of the agent's stderr kept to explain how it ended.
const STDERR_TAIL_LINES: usize = 20;
/// The longest stderr line kept or logged, in bytes; the rest of the line is dropped.
const STDERR_LINE_BYTES: usize = 2_000;
/// How much of a skipped stdout line the log shows, in characters.
const JUNK_PREVIEW_CHARS: usize = 200;

/// The running agent: its process tree, how it ended once it has, and its last stderr lines.
/// Dropping it kills the tree.
pub(super) struct Process {
    tree: Arc<Tree>,
    exit: watch::Receiver<Option<String>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// What starting it gave: the authority to write and run for it.
    authority: crate::external::AgentAuthority,
}

impl Process {
    /// The authority to write files and start terminals for this agent.
    pub(super) fn authority(&self) -> crate::external::AgentAuthority {
        self.authority.clone()
    }

    /// How the process ended (`exit code 3`, `killed by signal 9`), once it has.
    pub(super) fn exit_status(&self) -> Option<String> {
        self.exit.borrow().clone()
    }

    /// Waits up to `grace` for the process to end; returns how it ended, if it did.
    pub(super) async fn wait_exit(&self, grace: Duration) -> Option<String> {
        let mut exit = self.exit.clone();
        let ended = tokio::time::timeout(grace, exit.wait_for(Option::is_some)).await;
        match ended {
            Ok(Ok(status)) => status.clone(),
            Ok(Err(_)) | Err(_) => self.exit_status(),
        }
    }

    /// The last line the agent wrote to stderr, if any.
    pub(super) fn last_stderr(&self) -> Option<String> {
        let tail = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        tail.back().cloned()
    }

    /// Kills the whole process tree without waiting (the tree also ends when this drops).
    pub(super) fn kill(&self) {
        self.tree.end_soon();
    }

    /// Kills the whole process tree and returns once it is gone.
    pub(super) async fn end(&self) {
        self.tree.end().await;
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts the agent in the workspace root, as the root of its own tree, with piped stdio.
pub(super) async fn spawn(
    spec: &AcpSpec,
) -> Result<(Process, ChildStdin, ChildStdout), ConnectError> {
    let Some((program, args)) = spec.command.split_first() else {
        return Err(ConnectError::NoCommand {
            name: spec.name.clone(),
        });
    };
    let mut command = Command::new(program);
    // The agent has no business with this Neovim's server: without the variables, what the
    // agent runs by itself cannot find the socket through them (its `env` may still set them).
    for name in ["NVIM", "NVIM_LISTEN_ADDRESS"] {
        command.env_remove(name);
    }
    command
        .args(args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(spec.workspace.root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(policy) = &spec.sandbox {
        crate::sandbox::confine(&mut command, policy).map_err(|source| ConnectError::Sandbox {
            program: program.clone(),
            source,
        })?;
    }
    // The agent the user started; what it does is governed by its own permission flow.
    let (mut child, tree, authority) =
        crate::external::start_agent(command)
            .await
            .map_err(|source| ConnectError::NotStarted {
                program: program.clone(),
                source,
            })?;
    let tree = Arc::new(tree);
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(ConnectError::NoPipes {
            program: program.clone(),
        });
    };
    let (exit_tx, exit) = watch::channel(None);
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    tokio::spawn(drain_stderr(stderr, spec.name.clone(), tail.clone()));
    let name = spec.name.clone();
    let agent_tree = tree.clone();
    tokio::spawn(async move {
        let status = match child.wait().await {
            Ok(status) => describe(status),
            Err(err) => format!("status unknown: {err}"),
        };
        tracing::info!(agent = %name, %status, "ACP agent exited");
        // Whatever it left running could hold the pipes open; nothing should outlive the agent.
        agent_tree.end().await;
        let _ = exit_tx.send(Some(status));
    });
    Ok((
        Process {
            tree,
            exit,
            stderr: tail,
            authority,
        },
        stdin,
        stdout,
    ))
}

/// `exit code 3`, `killed by signal 9`.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}

/// Logs the agent's stderr a line at a time and keeps the last lines.
async fn drain_stderr(
    stderr: impl AsyncRead + Unpin,
    name: String,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    let mut reader = BufReader::new(stderr);
    let mut chunk = [0u8; 8 * 1024];
    let mut line: Vec<u8> = Vec::new();
    let emit = |line: &mut Vec<u8>| {
        let text = String::from_utf8_lossy(line).trim_end().to_string();
        line.clear();
        if text.is_empty() {
            return;
        }
        tracing::info!(agent = %name, "stderr: {text}");
        let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(text);
    };
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for piece in chunk[..n].split_inclusive(|b| *b == b'\n') {
            let room = STDERR_LINE_BYTES.saturating_sub(line.len());
            let (body, ends) = match piece.split_last() {
                Some((b'\n', body)) => (body, true),
                _ => (piece, false),
            };
            line.extend_from_slice(&body[..body.len().min(room)]);
            if ends {
                emit(&mut line);
            }
        }
    }
    emit(&mut line);
}

/// The JSON-RPC line transport over the agent's stdio: one JSON object a line each way.
pub(super) fn lines<R, W>(
    reader: R,
    writer: W,
    name: String,
    tap: Option<super::Tap>,
    inflight: Arc<super::inflight::InFlight>,
) -> Lines<
    impl Sink<String, Error = io::Error> + Send + 'static,
    impl Stream<Item = io::Result<String>> + Send + 'static,
>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let sent_tap = tap.clone();
    let sent_inflight = inflight.clone();
    let outgoing = futures::sink::unfold(writer, move |mut writer, line: String| {
        let tap = sent_tap.clone();
        let inflight = sent_inflight.clone();
        async move {
            if let Some(tap) = &tap {
                (tap.0)(super::Flow::Sent, &line);
            }
            inflight.sent(&line);
            let mut bytes = line.into_bytes();
            bytes.push(b'\n');
            writer.write_all(&bytes).await?;
            writer.flush().await?;
            Ok::<_, io::Error>(writer)
        }
    });
    let incoming = futures::stream::unfold(
        (BufReader::new(reader), name, tap, inflight),
        |(mut reader, name, tap, inflight)| async move {
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf).await {
                    Ok(0) => return None,
                    Ok(_) => {
                        if let Some((frame, outline)) = frame(&buf, &name) {
                            if let Some(tap) = &tap {
                                (tap.0)(super::Flow::Received, &frame);
                            }
                            inflight.received(outline);
                            return Some((Ok(frame), (reader, name, tap, inflight)));
                        }
                    }
                    Err(err) => return Some((Err(err), (reader, name, tap, inflight))),
                }
            }
        },
    );
    Lines::new(outgoing, incoming)
}

/// The JSON object on one stdout line, with its outline (read in the same pass), or None for
/// anything else (logged and skipped: agents and their wrappers print banners and warnings to
/// stdout, and answering each with a parse error would only confuse them).
fn frame(line: &[u8], name: &str) -> Option<(String, Outline)> {
    let text = match std::str::from_utf8(line) {
        Ok(text) => text.trim(),
        Err(_) => {
            tracing::warn!(agent = %name, "skipped a stdout line that is not UTF-8");
            return None;
        }
    };
    if text.is_empty() {
        return None;
    }
    // An object whose outline does not read (a field twice) is still passed on, outlined as
    // nothing: the protocol's own reader decides what it is.
    let outline = text
        .starts_with('{')
        .then(|| Outline::of(text))
        .and_then(|outline| {
            outline.or_else(|| {
                serde_json::from_str::<serde::de::IgnoredAny>(text)
                    .ok()
                    .map(|_| Outline::default())
            })
        });
    let Some(outline) = outline else {
        let preview: String = text.chars().take(JUNK_PREVIEW_CHARS).collect();
        tracing::warn!(agent = %name, "skipped a stdout line that is not JSON-RPC: {preview}");
        return None;
    };
    Some((text.to_string(), outline))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn only_json_objects_are_frames() {
        assert_eq!(
            frame(b"{\"jsonrpc\":\"2.0\",\"id\":0}\r\n", "t").map(|(f, _)| f),
            Some("{\"jsonrpc\":\"2.0\",\"id\":0}".to_string())
        );
        // An object whose outline does not read (a field twice) is still a frame.
        assert!(frame(b"{\"id\":1,\"id\":2}\n", "t").is_some());
        for junk in [
            &b"Debugger listening on ws://127.0.0.1\n"[..],
            b"\n",
            b"   \n",
            b"[1,2]\n",
            b"{not json\n",
            b"\xff\xfe{}\n",
            b"42\n",
        ] {
            assert!(frame(junk, "t").is_none(), "{junk:?}");
        }
    }

    #[test]
    fn statuses_read_as_words() {
        assert_eq!(describe(ExitStatus::from_raw(3 << 8)), "exit code 3");
        assert_eq!(describe(ExitStatus::from_raw(9)), "killed by signal 9");
    }

    #[tokio::test]
    async fn stderr_lines_are_kept_bounded() {
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let mut text = String::new();
        for i in 0..30 {
            text.push_str(&format!("line {i}\n"));
        }
        text.push_str(&"x".repeat(5_000));
        drain_stderr(text.as_bytes(), "t".into(), tail.clone()).await;
        let tail = tail.lock().unwrap();
        assert_eq!(tail.len(), STDERR_TAIL_LINES);
        assert_eq!(tail[0], "line 11");
        assert_eq!(tail[STDERR_TAIL_LINES - 1], "x".repeat(STDERR_LINE_BYTES));
    }
}
