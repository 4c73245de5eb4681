//! Bounded child processes: run_bash's commands, with a timeout, a process tree that is killed
//! as a whole, and output whose memory stays bounded however much a command prints.
//!
//! The shape (SPEC section 1, run_bash): `{shell} -c COMMAND` in its own process group, stdin
//! `/dev/null`, pagers and prompts off; stdout and stderr drained concurrently, each into a
//! [`Capture`] that keeps only its first and last [`MAX_CHARS`] characters and counts the rest;
//! then one text, clamped to [`MAX_CHARS`] characters (the beginning and, larger, the end), with
//! the timeout or cancel note and the `[exit N]` trailer appended after the clamp so they are never
//! cut.
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
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use crate::ansi::TermText;
use crate::reaper;
use crate::text::{clamp_head, MAX_CHARS};
use crate::tools::Approved;

/// Characters kept from the beginning of a clamped text.
const KEEP_HEAD: usize = 8_000;
/// Characters kept from the end of a clamped text: more than the beginning, because the end is
/// where the failing test and the compiler error are.
const KEEP_TAIL: usize = MAX_CHARS - KEEP_HEAD;
/// Bytes a drain reads at a time.
const READ_CHUNK: usize = 256 * 1024;
/// The pipe buffer asked for (see [`widen_pipe`]).
#[cfg(target_os = "linux")]
const PIPE_BYTES: libc::c_int = 1024 * 1024;
/// Bytes of a stream's tail kept after trimming: at least [`MAX_CHARS`] characters of at most four
/// bytes each, plus slack for moving the cut forward to a character boundary.
const TAIL_BYTES: usize = 4 * MAX_CHARS + 4;
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
    /// Variables of this process's environment the command does not inherit (the API keys).
    pub env_remove: Vec<std::ffi::OsString>,
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
    _approved: &Approved,
    cancel: &CancellationToken,
) -> io::Result<CommandOutput> {
    if cancel.is_cancelled() {
        return Ok(CommandOutput {
            text: "\n[cancelled before it started]\n[exit 130]".to_string(),
            exit_code: 130,
            ending: Ending::Cancelled,
        });
    }
    let shell = spec.shell.clone().unwrap_or_else(default_shell);
    let mut command = Command::new(&shell);
    for name in &spec.env_remove {
        command.env_remove(name);
    }
    command
        .arg("-c")
        .arg(&spec.command)
        .current_dir(&spec.cwd)
        .env("PAGER", "cat")
        .env("GIT_PAGER", "cat")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: a Ctrl-C at the terminal reaches the backend (which cancels), not it.
        .process_group(0)
        .kill_on_drop(true);
    // The tree ends every process the command started, wherever it moved (see src/reaper.rs).
    let (mut child, tree) = reaper::spawn(command).await.map_err(|err| {
        io::Error::new(
            err.kind(),
            format!(
                "cannot start {} in {}: {err}",
                shell.display(),
                spec.cwd.display()
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
    let mut out = Capture::default();
    let mut err = Capture::default();

    let (stop, status) = {
        let drains = futures::future::join(drain(stdout, &mut out), drain(stderr, &mut err));
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

/// Reads `reader` to EOF into `capture`. A read error ends the stream like EOF: what was read is
/// still worth showing.
async fn drain<R: AsyncRead + Unpin>(reader: Option<R>, capture: &mut Capture) {
    let Some(mut reader) = reader else {
        return;
    };
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => capture.push_bytes(&buf[..n]),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// One output stream, decoded lossily as it arrives and passed through [`TermText`] (escape
/// sequences out, progress redraws collapsed), in bounded memory: the first [`MAX_CHARS`]
/// characters of what is left, a suffix of the rest holding at least its last [`MAX_CHARS`]
/// characters, and the count of all of them. That is enough for [`compose`] to build any clamped
/// text exactly.
#[derive(Debug, Default)]
struct Capture {
    /// What a terminal would finally show of the decoded text.
    screen: TermText,
    /// The text `screen` let through, reused from read to read.
    shown: String,
    /// The first characters, up to [`MAX_CHARS`].
    head: String,
    head_chars: usize,
    /// A suffix of everything after `head`, at most `2 * TAIL_BYTES` bytes.
    tail: String,
    tail_chars: usize,
    /// Characters seen in all.
    chars: usize,
    /// The start of a UTF-8 sequence split across reads (at most 3 bytes).
    pending: [u8; 4],
    pending_len: usize,
}

impl Capture {
    /// Decodes `data` as the continuation of everything pushed before, exactly as
    /// `String::from_utf8_lossy` would decode the whole stream.
    fn push_bytes(&mut self, mut data: &[u8]) {
        // Complete a split sequence one byte at a time; it never needs more than three.
        while self.pending_len > 0 {
            let Some((&byte, rest)) = data.split_first() else {
                return;
            };
            data = rest;
            let mut joined = self.pending;
            joined[self.pending_len] = byte;
            let len = self.pending_len + 1;
            self.pending_len = 0;
            let left = self.decode(&joined[..len]);
            self.keep_pending(&joined[len - left..len]);
        }
        let left = self.decode(data);
        self.keep_pending(&data[data.len() - left..]);
    }

    /// Pushes the text in `bytes`, with U+FFFD for each invalid sequence. Returns how many
    /// trailing bytes are the unfinished start of a sequence, left for the next read.
    fn decode(&mut self, bytes: &[u8]) -> usize {
        // Fast path: std's validator is word-at-a-time on ASCII, Utf8Chunks is byte-at-a-time.
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                self.push_str(text);
                return 0;
            }
            Err(err) if err.error_len().is_none() => {
                let (valid, unfinished) = bytes.split_at(err.valid_up_to());
                self.push_str(std::str::from_utf8(valid).unwrap_or_default());
                return unfinished.len();
            }
            Err(_) => {}
        }
        let mut chunks = bytes.utf8_chunks().peekable();
        while let Some(chunk) = chunks.next() {
            self.push_str(chunk.valid());
            let invalid = chunk.invalid();
            if invalid.is_empty() {
                continue;
            }
            let unfinished = chunks.peek().is_none()
                && std::str::from_utf8(invalid).is_err_and(|e| e.error_len().is_none());
            if unfinished {
                return invalid.len();
            }
            self.push_str("\u{FFFD}");
        }
        0
    }

    fn keep_pending(&mut self, bytes: &[u8]) {
        self.pending[..bytes.len()].copy_from_slice(bytes);
        self.pending_len = bytes.len();
    }

    /// Ends the stream: an unfinished sequence at EOF is one U+FFFD, as lossy decoding has it.
    fn finish(&mut self) {
        if self.pending_len > 0 {
            self.pending_len = 0;
            self.push_str("\u{FFFD}");
        }
        let mut shown = std::mem::take(&mut self.shown);
        self.screen.finish(&mut shown);
        self.keep(&shown);
    }

    /// Passes decoded text through the terminal filter and keeps what it lets through.
    fn push_str(&mut self, s: &str) {
        let mut shown = std::mem::take(&mut self.shown);
        self.screen.feed(s, &mut shown);
        self.keep(&shown);
        shown.clear();
        self.shown = shown;
    }

    fn keep(&mut self, mut s: &str) {
        if s.is_empty() {
            return;
        }
        self.chars += s.chars().count();
        if self.head_chars < MAX_CHARS {
            let (taken, _) = clamp_head(s, MAX_CHARS - self.head_chars);
            self.head.push_str(taken);
            self.head_chars += taken.chars().count();
            s = &s[taken.len()..];
            if s.is_empty() {
                return;
            }
        }
        if s.len() >= TAIL_BYTES {
            let kept = &s[ceil_boundary(s, s.len() - TAIL_BYTES)..];
            self.tail.clear();
            self.tail.push_str(kept);
            self.tail_chars = kept.chars().count();
            return;
        }
        self.tail.push_str(s);
        self.tail_chars += s.chars().count();
        // Trimming only when twice the bound is reached keeps the cost per byte constant.
        if self.tail.len() > 2 * TAIL_BYTES {
            let cut = ceil_boundary(&self.tail, self.tail.len() - TAIL_BYTES);
            self.tail_chars -= self.tail[..cut].chars().count();
            self.tail.drain(..cut);
        }
    }

    /// Whether nothing was dropped between head and tail.
    fn is_whole(&self) -> bool {
        self.head_chars + self.tail_chars == self.chars
    }

    fn last_char(&self) -> Option<char> {
        self.tail
            .chars()
            .next_back()
            .or_else(|| self.head.chars().next_back())
    }

    /// The first `n` characters. Exact while `n` is at most [`MAX_CHARS`] or nothing was dropped.
    fn prefix(&self, n: usize) -> String {
        if n <= self.head_chars {
            return clamp_head(&self.head, n).0.to_string();
        }
        let (from_tail, _) = clamp_head(&self.tail, n - self.head_chars);
        [self.head.as_str(), from_tail].concat()
    }

    /// The last `n` characters. Exact while `n` is at most [`MAX_CHARS`] or nothing was dropped.
    fn suffix(&self, n: usize) -> String {
        if n <= self.tail_chars {
            return last_chars(&self.tail, n).to_string();
        }
        [
            last_chars(&self.head, n - self.tail_chars),
            self.tail.as_str(),
        ]
        .concat()
    }
}

/// The smallest character boundary of `s` at or after `at`.
fn ceil_boundary(s: &str, mut at: usize) -> usize {
    while at < s.len() && !s.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// The last `n` characters of `s` (all of it when it is shorter).
fn last_chars(s: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    match s.char_indices().nth_back(n - 1) {
        Some((byte, _)) => &s[byte..],
        None => s,
    }
}

/// One part of the combined text: a fixed string or a captured stream.
enum Part<'a> {
    Text(&'a str),
    Stream(&'a Capture),
}

impl Part<'_> {
    fn chars(&self) -> usize {
        match self {
            Part::Text(s) => s.chars().count(),
            Part::Stream(c) => c.chars,
        }
    }

    fn prefix(&self, n: usize) -> String {
        match self {
            Part::Text(s) => clamp_head(s, n).0.to_string(),
            Part::Stream(c) => c.prefix(n),
        }
    }

    fn suffix(&self, n: usize) -> String {
        match self {
            Part::Text(s) => last_chars(s, n).to_string(),
            Part::Stream(c) => c.suffix(n),
        }
    }
}

/// stdout; when stderr is not empty, a newline if stdout does not end in one, `[stderr]\n` and
/// stderr. Past [`MAX_CHARS`] characters, the first [`KEEP_HEAD`] and the last [`KEEP_TAIL`] of
/// that, with a marker saying exactly how many were cut between them.
fn compose(out: &Capture, err: &Capture) -> String {
    let has_err = err.chars > 0;
    let newline = has_err && out.chars > 0 && out.last_char() != Some('\n');
    let parts = [
        Part::Stream(out),
        Part::Text(if newline { "\n" } else { "" }),
        Part::Text(if has_err { "[stderr]\n" } else { "" }),
        Part::Stream(err),
    ];
    let total: usize = parts.iter().map(Part::chars).sum();
    if total <= MAX_CHARS {
        // Every stream is at most MAX_CHARS characters, so each is whole.
        debug_assert!(out.is_whole() && err.is_whole());
        return parts.iter().map(|part| part.prefix(part.chars())).collect();
    }
    let mut head = String::new();
    let mut want = KEEP_HEAD;
    for part in &parts {
        let take = want.min(part.chars());
        head.push_str(&part.prefix(take));
        want -= take;
    }
    let mut tail_parts = Vec::new();
    let mut want = KEEP_TAIL;
    for part in parts.iter().rev() {
        let take = want.min(part.chars());
        tail_parts.push(part.suffix(take));
        want -= take;
    }
    let tail: String = tail_parts.into_iter().rev().collect();
    let cut = total - MAX_CHARS;
    format!("{head}\n[... truncated at {MAX_CHARS} chars: {cut} chars cut ...]\n{tail}")
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

    /// What compose must produce, built the obvious way from whole strings.
    fn reference(out: &str, err: &str) -> String {
        let mut all = out.to_string();
        if !err.is_empty() {
            if !out.is_empty() && !out.ends_with('\n') {
                all.push('\n');
            }
            all.push_str("[stderr]\n");
            all.push_str(err);
        }
        let chars: Vec<char> = all.chars().collect();
        if chars.len() <= MAX_CHARS {
            return all;
        }
        let head: String = chars[..KEEP_HEAD].iter().collect();
        let tail: String = chars[chars.len() - KEEP_TAIL..].iter().collect();
        let cut = chars.len() - MAX_CHARS;
        format!("{head}\n[... truncated at 20000 chars: {cut} chars cut ...]\n{tail}")
    }

    /// Feeds `text` to a capture in reads of `step` bytes, splitting characters anywhere.
    fn captured(text: &[u8], step: usize) -> Capture {
        let mut capture = Capture::default();
        for piece in text.chunks(step.max(1)) {
            capture.push_bytes(piece);
        }
        capture.finish();
        capture
    }

    #[test]
    fn decoding_split_reads_matches_lossy_decoding_of_the_whole() {
        let mut bytes = "aé€😀z".as_bytes().to_vec();
        bytes.extend_from_slice(&[0xE2, 0x82, b'x', 0xFF, 0xC3, 0xC3, 0xA9, 0x80, 0xF0, 0x9F]);
        let want = String::from_utf8_lossy(&bytes).into_owned();
        for step in 1..=bytes.len() {
            let capture = captured(&bytes, step);
            assert_eq!(capture.prefix(capture.chars), want, "reads of {step} bytes");
            assert_eq!(capture.chars, want.chars().count());
        }
    }

    #[test]
    fn compose_matches_the_reference_around_the_limit_and_far_past_it() {
        let cases: Vec<(String, String)> = vec![
            (String::new(), String::new()),
            ("hi\n".into(), String::new()),
            ("a".into(), "b".into()),
            ("a\n".into(), "b".into()),
            (String::new(), "b".into()),
            // exactly at the limit, and one past it
            ("x".repeat(MAX_CHARS), String::new()),
            ("x".repeat(MAX_CHARS + 1), String::new()),
            ("é".repeat(MAX_CHARS - 11), "ü".into()),
            ("é".repeat(MAX_CHARS - 10), "ü".into()),
            // the head ends inside the `[stderr]` line
            ("a".repeat(7_995), "b".repeat(20_000)),
            // the tail reaches back into stdout
            ("😀".repeat(50_000), "short error\n".into()),
            ("é".repeat(100_000), "ü".repeat(100_000)),
            (String::new(), "€".repeat(45_000)),
        ];
        for (out, err) in cases {
            for step in [1, 7, READ_CHUNK] {
                let text = compose(
                    &captured(out.as_bytes(), step),
                    &captured(err.as_bytes(), step),
                );
                assert!(
                    text == reference(&out, &err),
                    "stdout {} chars, stderr {} chars, reads of {step}",
                    out.chars().count(),
                    err.chars().count()
                );
            }
        }
    }

    #[test]
    fn a_capture_keeps_bounded_memory() {
        let mut capture = Capture::default();
        let chunk = "é".repeat(READ_CHUNK / 2);
        for _ in 0..200 {
            capture.push_bytes(chunk.as_bytes());
            assert!(capture.tail.len() <= 2 * TAIL_BYTES);
            assert!(capture.head.len() <= 4 * MAX_CHARS);
        }
        capture.finish();
        assert_eq!(capture.chars, 200 * READ_CHUNK / 2);
        assert_eq!(capture.suffix(3), "ééé");
    }

    #[test]
    fn escapes_and_progress_lines_split_across_reads_are_filtered_the_same() {
        let text =
            "\u{1b}[1;32mok\u{1b}[0m \u{1b}]0;title\u{7}é\n 10%\r 50%\r100%\r\nend\r\u{1b}[2Kfin";
        for step in 1..=text.len() {
            let capture = captured(text.as_bytes(), step);
            assert_eq!(
                capture.prefix(capture.chars),
                "ok é\n100%\nfin",
                "reads of {step} bytes"
            );
        }
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
