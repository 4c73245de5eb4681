//! Child processes' lifetime: run_bash's commands, with a timeout and a process tree that is
//! killed as a whole, and [`spawn_tree`], the one way the backend starts a process (a command,
//! an ACP agent) as the root of its own tree.
//!
//! The shape (SPEC section 1, run_bash): `{shell} -c COMMAND` in its own process group, stdin
//! `/dev/null`, pagers and prompts off; stdout and stderr drained concurrently, each into a
//! `Capture` (the pure half, `capture.rs`: bounded decoding and the clamp); then one text,
//! clamped to 20,000 characters (the beginning and, larger, the end), with the timeout or cancel
//! note and the `[exit N]` trailer appended after the clamp so they are never cut.
//!
//! Nothing a command starts outlives it: when the shell exits, whatever it left running
//! (`sleep 1000 &`, a server started with `&`, a daemon that moved to its own session with
//! `setsid`, `tmux new -d`, a double fork) is killed too, through its [`reaper::Tree`]. Otherwise
//! those processes would hold the output pipes open and the call would never finish.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::approved::Approved;
use crate::reaper::{self, Tree};
use crate::sandbox::{self, Policy};

mod capture;
pub mod live;

use capture::{compose, Capture};

/// Bytes a drain reads at a time.
const READ_CHUNK: usize = 256 * 1024;
/// The pipe buffer asked for (see [`widen_pipe`]).
#[cfg(target_os = "linux")]
const PIPE_BYTES: libc::c_int = 1024 * 1024;
/// How long the pipes may stay open once the tree is dead. What is buffered in them is read at
/// once; only a process outside the tree (one the pipe was handed to) can still write, and it is
/// not waited for past this.
const DRAIN_GRACE: Duration = Duration::from_millis(250);
/// The exit code reported after a timeout, as coreutils' `timeout` does.
const TIMEOUT_EXIT: i32 = 124;

/// One command to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// The command line, passed whole as the one argument after `-c`.
    pub command: String,
    /// The shell; None picks [`default_shell`].
    pub shell: Option<PathBuf>,
    /// The working directory.
    pub cwd: PathBuf,
    /// How long the command may run before its process tree is killed.
    pub timeout: Duration,
    /// Variables of this process's environment the command does not inherit (the API keys and
    /// the session's sockets: [`hidden_env`]).
    pub env_remove: Vec<std::ffi::OsString>,
    /// The sandbox the command and its children run in ([`crate::sandbox`]); None: none.
    pub sandbox: Option<Policy>,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The shell exited by itself, with any code.
    Exited,
    /// The shell was killed by this signal (not by us).
    Signalled(i32),
    /// The timeout passed; the process tree was killed.
    TimedOut,
    /// The cancel token fired; the process tree was killed.
    Cancelled,
}

/// What a command produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    /// stdout, then `[stderr]` and stderr, clamped; then the timeout or cancel note and
    /// `[exit N]`. This is what the model reads.
    pub text: String,
    /// The exit code: the shell's own, 128+signal when a signal ended it, 124 after a timeout.
    pub exit_code: i32,
    /// How it ended.
    pub ending: Ending,
}

/// The variables that lead a program to the person's editor, terminal, multiplexer and session
/// services: the editor's server socket (`NVIM`), tmux's, screen's and zellij's sessions, the
/// ssh and gpg agents, D-Bus, Docker and Podman, X11 and Wayland, the terminals' and window
/// managers' control sockets. A command started for the model (run_bash, an agent's terminal)
/// does not get them unless `pass_env` names them, sandboxed or not: with them, a command
/// could drive the editor (answer its own approval, write the person's rules) without a
/// question. The sandbox refuses the sockets themselves; this keeps an unsandboxed command
/// from finding them handed over.
pub const SESSION_VARS: &[&str] = &[
    "NVIM",
    "NVIM_LISTEN_ADDRESS",
    "TMUX",
    "TMUX_PANE",
    "STY",
    "ZELLIJ",
    "ZELLIJ_SESSION_NAME",
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "DBUS_SYSTEM_BUS_ADDRESS",
    "DOCKER_HOST",
    "CONTAINER_HOST",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "KITTY_LISTEN_ON",
    "WEZTERM_UNIX_SOCKET",
    "ALACRITTY_SOCKET",
    "SWAYSOCK",
    "I3SOCK",
    "HYPRLAND_INSTANCE_SIGNATURE",
    "NIRI_SOCKET",
    "PULSE_SERVER",
    "PIPEWIRE_REMOTE",
    "WAYLAND_SOCKET",
    "GNOME_KEYRING_CONTROL",
    "VSCODE_IPC_HOOK_CLI",
    "VSCODE_GIT_IPC_HANDLE",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "EMACS_SOCKET_NAME",
    "KONSOLE_DBUS_SERVICE",
];

/// The variables a command started for the model must not inherit: the keys
/// ([`crate::secrets::hidden_env`]) and [`SESSION_VARS`], less those `pass_env` names.
pub fn hidden_env(pass_env: &[String]) -> Vec<std::ffi::OsString> {
    let mut hidden = crate::secrets::hidden_env(pass_env);
    for name in SESSION_VARS {
        if !pass_env.iter().any(|p| p == name) {
            hidden.push((*name).into());
        }
    }
    hidden
}

/// bash when it is on PATH, else `/bin/sh`. Only absolute PATH entries are searched, so a `bash`
/// file in the workspace cannot stand in for the shell.
pub fn default_shell() -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .filter(|dir| dir.is_absolute())
                .map(|dir| dir.join("bash"))
                .find(|candidate| is_executable(candidate))
        })
        .unwrap_or_else(|| PathBuf::from("/bin/sh"))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Runs `spec` to its end, its timeout, or `cancel`, whichever comes first, and returns the text
/// the model reads. Errors only when the shell cannot be started or its exit status cannot be
/// read; everything else (a non-zero exit, a timeout, a cancel) is in the [`CommandOutput`].
///
/// When `cancel` has already fired, nothing is started. Only a step the gate allowed can call it
/// (the [`Approved`] the executor hands run_bash's plan).
pub async fn run(
    spec: &CommandSpec,
    approved: &Approved,
    cancel: &CancellationToken,
) -> io::Result<CommandOutput> {
    run_seen(spec, approved, cancel, None).await
}

/// [`run`], also passing every chunk of output, as it arrives, to `seen` (a live view of the
/// command: run_bash's row while it runs). What the model reads is the same either way.
pub async fn run_seen(
    spec: &CommandSpec,
    approved: &Approved,
    cancel: &CancellationToken,
    seen: Option<&live::Seen>,
) -> io::Result<CommandOutput> {
    if cancel.is_cancelled() {
        return Ok(CommandOutput {
            text: "\n[cancelled before it started]\n[exit 130]".to_string(),
            exit_code: 130,
            ending: Ending::Cancelled,
        });
    }
    let Shell {
        mut child,
        tree,
        stdout,
        stderr,
    } = Shell::start(
        spec.shell.as_deref(),
        &spec.command,
        &spec.cwd,
        &spec.env_remove,
        spec.sandbox.as_ref(),
        approved,
    )
    .await?;
    let mut out = Capture::default();
    let mut err = Capture::default();

    let (stop, status) = {
        let drains =
            futures::future::join(drain(stdout, &mut out, seen), drain(stderr, &mut err, seen));
        tokio::pin!(drains);
        let deadline = tokio::time::sleep(spec.timeout);
        tokio::pin!(deadline);
        let mut drained = false;
        let (stop, exited) = loop {
            tokio::select! {
                status = child.wait() => break (Stop::Exited, Some(status)),
                () = &mut deadline => break (Stop::TimedOut, None),
                () = cancel.cancelled() => break (Stop::Cancelled, None),
                ((), ()) = &mut drains, if !drained => drained = true,
            }
        };
        // After a normal exit this ends the background jobs the shell left (see the module doc);
        // after a timeout or cancel it ends the whole tree, shell included. It returns once they
        // are gone, so nothing of the tree still holds the pipes.
        tree.end().await;
        let status = match exited {
            Some(status) => status,
            None => child.wait().await,
        };
        if !drained {
            // Whatever is still buffered in the pipes is read; a writer outside the tree (one it
            // handed the pipe to) is not waited for past the grace.
            let _ = tokio::time::timeout(DRAIN_GRACE, &mut drains).await;
        }
        (stop, status?)
    };
    out.finish();
    err.finish();

    let (ending, exit_code) = match stop {
        Stop::Exited => match status.signal() {
            Some(signal) => (Ending::Signalled(signal), 128 + signal),
            None => (Ending::Exited, status_code(status)),
        },
        Stop::TimedOut => (Ending::TimedOut, TIMEOUT_EXIT),
        Stop::Cancelled => (Ending::Cancelled, status_code(status)),
    };
    let mut text = compose(&out, &err);
    match ending {
        Ending::TimedOut => text.push_str(&format!(
            "\n[timed out after {}s - process tree killed]",
            spec.timeout.as_secs_f64()
        )),
        Ending::Cancelled => text.push_str("\n[cancelled - process tree killed]"),
        Ending::Exited | Ending::Signalled(_) => {}
    }
    text.push_str(&format!("\n[exit {exit_code}]"));
    Ok(CommandOutput {
        text,
        exit_code,
        ending,
    })
}

/// A shell started for a command line, with its output pipes.
struct Shell {
    child: Child,
    tree: Tree,
    stdout: Option<tokio::process::ChildStdout>,
    stderr: Option<tokio::process::ChildStderr>,
}

impl Shell {
    /// Starts `{shell} -c LINE` (None: [`default_shell`]) in `cwd` as every command the backend
    /// runs for someone starts ([`shell_command`]), confined by `sandbox` when given, as the
    /// root of its own tree, its pipes widened. The error names the shell and the directory.
    async fn start(
        shell: Option<&Path>,
        line: &str,
        cwd: &Path,
        env_remove: &[std::ffi::OsString],
        sandbox: Option<&Policy>,
        approved: &Approved,
    ) -> io::Result<Shell> {
        let shell = shell.map_or_else(default_shell, Path::to_path_buf);
        let mut command = shell_command(&shell, line, cwd, env_remove);
        if let Some(policy) = sandbox {
            sandbox::confine(&mut command, policy).map_err(io::Error::other)?;
        }
        let (mut child, tree) = spawn_tree(command, approved).await.map_err(|err| {
            io::Error::new(
                err.kind(),
                format!(
                    "cannot start {} in {}{}: {err}",
                    shell.display(),
                    cwd.display(),
                    if sandbox.is_some() {
                        " under the sandbox"
                    } else {
                        ""
                    }
                ),
            )
        })?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        for fd in [
            stdout.as_ref().map(|p| p.as_raw_fd()),
            stderr.as_ref().map(|p| p.as_raw_fd()),
        ]
        .into_iter()
        .flatten()
        {
            widen_pipe(fd);
        }
        Ok(Shell {
            child,
            tree,
            stdout,
            stderr,
        })
    }
}

/// `{shell} -c LINE` in `cwd` as every command the backend runs for someone starts: without
/// the variables in `env_remove` (the keys), pagers and git's prompts off, stdin `/dev/null`,
/// stdout and stderr piped.
fn shell_command(
    shell: &Path,
    line: &str,
    cwd: &Path,
    env_remove: &[std::ffi::OsString],
) -> Command {
    let mut command = Command::new(shell);
    for name in env_remove {
        command.env_remove(name);
    }
    command
        .arg("-c")
        .arg(line)
        .current_dir(cwd)
        .env("PAGER", "cat")
        .env("GIT_PAGER", "cat")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Starts `command` as the root of its own process tree ([`reaper::spawn`]): in its own session
/// and process group, so a Ctrl-C at the terminal reaches the backend (which cancels) and not
/// it, with no controlling terminal and no inherited descriptor but its stdio, and killed
/// when its `Child` is dropped. The [`Tree`] ends every process it started, wherever it moved,
/// when it is ended or dropped. run_bash's commands and ACP agents both start here.
pub async fn spawn_tree(mut command: Command, _approved: &Approved) -> io::Result<(Child, Tree)> {
    command.kill_on_drop(true);
    // SAFETY: the closure makes two async-signal-safe system calls and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            // A session of its own (so also a process group of its own, led by it): no
            // controlling terminal, so nothing it runs can read the keys typed into the
            // person's terminal, set its size (a signal to what runs there) or take its
            // foreground.
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            // Nothing this process holds open but its three standard streams reaches it: a
            // descriptor inherited without close-on-exec (a socket of whoever started us)
            // is closed by the exec.
            #[cfg(target_os = "linux")]
            if libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            ) != 0
            {
                // Before Linux 5.11: each descriptor up to the limit, one call each.
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                    libc::c_int::try_from(limit.rlim_cur.min(65_536)).unwrap_or(65_536)
                } else {
                    1024
                };
                for fd in 3..top {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                }
            }
            Ok(())
        });
    }
    reaper::spawn(command).await
}

/// Asks for a 1 MiB pipe buffer (Linux; the default is 64 KiB): a command that prints hundreds of
/// megabytes then blocks and wakes us 16 times less often. Failure only costs speed.
fn widen_pipe(fd: std::os::fd::RawFd) {
    #[cfg(target_os = "linux")]
    // SAFETY: F_SETPIPE_SZ on a pipe fd we own; an error leaves the pipe as it was.
    unsafe {
        libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_BYTES);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = fd;
}

/// Why the wait for the shell stopped.
#[derive(Debug, Clone, Copy)]
enum Stop {
    Exited,
    TimedOut,
    Cancelled,
}

/// The shell's exit code, or 128+signal when a signal ended it (as shells report it).
fn status_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => -1,
    }
}

/// Reads `reader` to EOF into `capture` (and `seen`, when watched). A read error ends the stream
/// like EOF: what was read is still worth showing.
async fn drain<R: AsyncRead + Unpin>(
    reader: Option<R>,
    capture: &mut Capture,
    seen: Option<&live::Seen>,
) {
    let Some(mut reader) = reader else {
        return;
    };
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => {
                capture.push_bytes(&buf[..n]);
                if let Some(seen) = seen {
                    seen.push(&buf[..n]);
                }
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// [`super::run`] as run_bash's approved step calls it.
    async fn run(spec: &CommandSpec, cancel: &CancellationToken) -> io::Result<CommandOutput> {
        super::run(spec, &Approved::for_tests(), cancel).await
    }

    fn spec(command: &str, timeout: Duration) -> CommandSpec {
        CommandSpec {
            command: command.to_string(),
            shell: None,
            cwd: std::env::temp_dir(),
            timeout,
            env_remove: Vec::new(),
            sandbox: None,
        }
    }

    async fn run_text(command: &str) -> CommandOutput {
        run(
            &spec(command, Duration::from_secs(30)),
            &CancellationToken::new(),
        )
        .await
        .unwrap()
    }

    /// Alive and not a zombie: a killed orphan stays a zombie until whoever adopted it reaps it,
    /// which is not ours to wait for (some containers' init never does).
    fn alive(pid: i32) -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        if unsafe { libc::kill(pid, 0) } != 0 {
            return false;
        }
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state follows the parenthesised name, which may itself contain ')'.
            Ok(stat) => stat
                .rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
                .unwrap_or(true),
            Err(_) => false,
        }
    }

    /// Waits up to three seconds for every pid to be gone; returns the survivors.
    async fn survivors(pids: &[i32]) -> Vec<i32> {
        let start = Instant::now();
        loop {
            let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
            if left.is_empty() || start.elapsed() > Duration::from_secs(3) {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn pids_in(text: &str) -> Vec<i32> {
        text.lines().filter_map(|l| l.trim().parse().ok()).collect()
    }

    /// Every pid in the group as /proc shows it, zombies excluded.
    fn group_members(pgid: i32) -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|stat| {
                        let rest = stat.rsplit_once(')')?.1.to_string();
                        let fields: Vec<&str> = rest.split_whitespace().collect();
                        // state ppid pgrp ...
                        Some(fields.first()? != &"Z" && fields.get(2)?.parse::<i32>().ok()? == pgid)
                    })
                    .unwrap_or(false)
            })
            .collect()
    }

    fn vm_rss_kib() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[tokio::test]
    async fn the_model_reads_output_without_escapes_or_progress_redraws() {
        assert_eq!(
            run_text("printf '\\033[31mred\\033[0m\\n'; printf '50%%\\r100%%\\n' >&2")
                .await
                .text,
            "red\n[stderr]\n100%\n\n[exit 0]"
        );
        // 15,000 coloured characters are 15,000 characters: nothing is cut.
        let output =
            run_text("for i in $(seq 1500); do printf '\\033[1;31mxxxxxxxxxx\\033[0m'; done").await;
        assert_eq!(output.text, format!("{}\n[exit 0]", "x".repeat(15_000)));
    }

    #[tokio::test]
    async fn cat_reads_an_empty_stdin_and_returns_at_once() {
        let start = Instant::now();
        let output = run_text("cat").await;
        assert_eq!(
            output,
            CommandOutput {
                text: "\n[exit 0]".into(),
                exit_code: 0,
                ending: Ending::Exited
            }
        );
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn stdout_then_stderr_with_a_newline_only_where_needed() {
        assert_eq!(run_text("echo hi").await.text, "hi\n\n[exit 0]");
        assert_eq!(
            run_text("printf a; printf b >&2").await.text,
            "a\n[stderr]\nb\n[exit 0]"
        );
        // stderr written first still comes after stdout
        assert_eq!(
            run_text("echo err >&2; sleep 0.1; echo out").await.text,
            "out\n[stderr]\nerr\n\n[exit 0]"
        );
        assert_eq!(run_text("printf b >&2").await.text, "[stderr]\nb\n[exit 0]");
    }

    #[tokio::test]
    async fn a_non_zero_exit_is_reported_not_an_error() {
        assert_eq!(
            run_text("exit 3").await,
            CommandOutput {
                text: "\n[exit 3]".into(),
                exit_code: 3,
                ending: Ending::Exited
            }
        );
    }

    #[tokio::test]
    async fn an_exit_by_signal_is_128_plus_the_signal() {
        assert_eq!(
            run_text("kill -TERM $$").await,
            CommandOutput {
                text: "\n[exit 143]".into(),
                exit_code: 143,
                ending: Ending::Signalled(libc::SIGTERM)
            }
        );
    }

    #[tokio::test]
    async fn pagers_and_prompts_are_off_in_the_environment() {
        assert_eq!(
            run_text("echo $PAGER $GIT_PAGER $GIT_TERMINAL_PROMPT")
                .await
                .text,
            "cat cat 0\n\n[exit 0]"
        );
    }

    #[tokio::test]
    async fn the_command_is_one_argument_to_the_shell() {
        assert_eq!(
            run_text("set -- a b; echo \"$# $1\"\necho 'two words'")
                .await
                .text,
            "2 a\ntwo words\n\n[exit 0]"
        );
    }

    #[tokio::test]
    async fn a_configured_shell_is_used() {
        let mut sh = spec("echo $0", Duration::from_secs(30));
        sh.shell = Some(PathBuf::from("/bin/sh"));
        let output = run(&sh, &CancellationToken::new()).await.unwrap();
        assert_eq!(output.text, "/bin/sh\n\n[exit 0]");
        let missing = CommandSpec {
            shell: Some(PathBuf::from("/nonexistent/shell")),
            ..sh
        };
        let err = run(&missing, &CancellationToken::new()).await.unwrap_err();
        assert!(err.to_string().contains("/nonexistent/shell"), "{err}");
    }

    #[tokio::test]
    async fn a_removed_variable_is_not_inherited() {
        let mut spec = spec(
            "echo \"${HOME-unset} ${PATH:+path}\"",
            Duration::from_secs(30),
        );
        spec.env_remove = vec!["HOME".into()];
        let output = run(&spec, &CancellationToken::new()).await.unwrap();
        assert_eq!(output.text, "unset path\n\n[exit 0]");
    }

    #[test]
    fn the_default_shell_is_bash_when_it_is_on_path() {
        let shell = default_shell();
        let bash_on_path = std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|dir| is_executable(&dir.join("bash")))
        });
        if bash_on_path {
            assert_eq!(shell.file_name().unwrap(), "bash");
        } else {
            assert_eq!(shell, PathBuf::from("/bin/sh"));
        }
    }

    #[tokio::test]
    async fn the_clamp_keeps_head_and_tail_and_counts_the_cut_exactly() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("out"), "é".repeat(15_000)).unwrap();
        std::fs::write(dir.path().join("err"), "ü".repeat(15_000)).unwrap();
        let output = run(
            &CommandSpec {
                command: "cat out; cat err >&2; exit 1".into(),
                shell: None,
                cwd: dir.path().to_path_buf(),
                timeout: Duration::from_secs(30),
                env_remove: Vec::new(),
                sandbox: None,
            },
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        // 15000 + "\n" + "[stderr]\n" + 15000 = 30010 characters: 10010 cut
        let want = format!(
            "{}\n[... truncated at 20000 chars: 10010 chars cut ...]\n{}\n[exit 1]",
            "é".repeat(8_000),
            "ü".repeat(12_000)
        );
        assert_eq!(output.text, want);
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_tree_and_keeps_the_note_and_trailer() {
        let command = "echo $$; sleep 1000 & echo $!; (sleep 1000; true) & echo $!; \
                       sh -c 'sleep 1000 & echo $!; sleep 1000' & \
                       sleep 0.2; yes | head -c 100000; echo; sleep 1000";
        let start = Instant::now();
        let output = run(
            &spec(command, Duration::from_secs(1)),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(output.ending, Ending::TimedOut);
        assert_eq!(output.exit_code, 124);
        assert!(
            output
                .text
                .ends_with("\n[timed out after 1s - process tree killed]\n[exit 124]"),
            "{}",
            &output.text[output.text.len() - 200..]
        );
        // 100000 bytes of "y\n" were clamped, yet the note and trailer are whole.
        assert!(output.text.contains(" chars cut ...]\n"));
        let pids = pids_in(&output.text[..2_000]);
        assert_eq!(pids.len(), 4, "{}", &output.text[..200]);
        assert_eq!(survivors(&pids).await, Vec::<i32>::new());
        assert_eq!(group_members(pids[0]), Vec::<i32>::new());
    }

    #[tokio::test]
    async fn a_cancel_kills_the_whole_tree() {
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            trigger.cancel();
        });
        let command = "echo $$; sleep 1000 & echo $!; (sleep 1000; true) & echo $!; sleep 1000";
        let start = Instant::now();
        let output = run(&spec(command, Duration::from_secs(60)), &cancel)
            .await
            .unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(output.ending, Ending::Cancelled);
        assert!(
            output
                .text
                .ends_with("\n\n[cancelled - process tree killed]\n[exit 137]"),
            "{}",
            output.text
        );
        let pids = pids_in(&output.text);
        assert_eq!(pids.len(), 3, "{}", output.text);
        assert_eq!(survivors(&pids).await, Vec::<i32>::new());
        assert_eq!(group_members(pids[0]), Vec::<i32>::new());
    }

    #[tokio::test]
    async fn an_already_cancelled_token_starts_nothing() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let dir = tempfile::tempdir().unwrap();
        let output = run(
            &CommandSpec {
                command: "touch ran".into(),
                shell: None,
                cwd: dir.path().to_path_buf(),
                timeout: Duration::from_secs(30),
                env_remove: Vec::new(),
                sandbox: None,
            },
            &cancel,
        )
        .await
        .unwrap();
        assert_eq!(output.ending, Ending::Cancelled);
        assert!(!dir.path().join("ran").exists());
    }

    #[tokio::test]
    async fn background_jobs_do_not_outlive_the_command() {
        let start = Instant::now();
        let output = run_text("sleep 1000 & echo $!; echo $$").await;
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(output.ending, Ending::Exited);
        let pids = pids_in(&output.text);
        assert_eq!(output.text, format!("{}\n{}\n\n[exit 0]", pids[0], pids[1]));
        assert_eq!(survivors(&pids[..1]).await, Vec::<i32>::new());
        assert_eq!(group_members(pids[1]), Vec::<i32>::new());
    }

    #[tokio::test]
    async fn a_writer_that_left_the_group_is_killed_and_does_not_hold_the_call_open() {
        let start = Instant::now();
        let output = run_text("setsid sleep 1000 & sleep 0.3; echo $!").await;
        // The old group kill missed it, and the call waited the 2 s grace for its pipe.
        assert!(start.elapsed() < Duration::from_millis(1_900));
        let pids = pids_in(&output.text);
        assert_eq!(output.text, format!("{}\n\n[exit 0]", pids[0]));
        assert!(!alive(pids[0]), "{} survived", pids[0]);
    }

    #[tokio::test]
    async fn a_dropped_run_kills_its_tree() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        // A background job: kill_on_drop alone reaches only the shell, never this one.
        let command = format!("sleep 1000 & echo $$ > '{}'; wait", pidfile.display());
        let spec = spec(&command, Duration::from_secs(60));
        let cancel = CancellationToken::new();
        let _ = tokio::time::timeout(Duration::from_millis(500), run(&spec, &cancel)).await;
        let pgid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let start = Instant::now();
        while !group_members(pgid).is_empty() && start.elapsed() < Duration::from_secs(3) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(group_members(pgid), Vec::<i32>::new());
    }

    /// Runs `command` while sampling this process's RSS; returns its output and the peak growth.
    async fn run_measuring_rss(command: &str) -> (CommandOutput, usize) {
        // One measurement at a time: two at once would count each other's memory.
        static MEASURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _one = MEASURING.lock().await;
        let before = vm_rss_kib();
        let done = CancellationToken::new();
        let sampler = {
            let done = done.clone();
            tokio::spawn(async move {
                let mut peak = 0;
                while !done.is_cancelled() {
                    peak = peak.max(vm_rss_kib());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                peak.max(vm_rss_kib())
            })
        };
        let output = run(
            &spec(command, Duration::from_secs(120)),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        done.cancel();
        let peak = sampler.await.unwrap();
        (output, peak.saturating_sub(before))
    }

    #[tokio::test]
    async fn a_hundred_megabytes_of_output_does_not_grow_memory() {
        let (output, growth_kib) =
            run_measuring_rss("head -c 100000000 /dev/zero | tr '\\0' a").await;
        let want = format!(
            "{}\n[... truncated at 20000 chars: 99980000 chars cut ...]\n{}\n[exit 0]",
            "a".repeat(8_000),
            "a".repeat(12_000)
        );
        assert!(output.text == want, "unexpected text");
        assert!(growth_kib < 20 * 1024, "grew by {growth_kib} KiB");
    }

    #[tokio::test]
    async fn an_unterminated_osc_string_does_not_grow_memory() {
        let (output, growth_kib) =
            run_measuring_rss("printf '\\033]0;'; head -c 30000000 /dev/zero | tr '\\0' a").await;
        assert_eq!(output.text, "\n[exit 0]");
        assert!(growth_kib < 15 * 1024, "grew by {growth_kib} KiB");
    }
}
