//! A command that keeps running while others ask after it: an external agent's terminal
//! (`terminal/create`). It starts the way run_bash's commands do (`{shell} -c LINE` as the root
//! of its own process tree, stdin `/dev/null`, the key variables left out, the sandbox when one
//! is given, the command timeout), but its output is kept as it arrives, stdout and stderr
//! interleaved, in a [`Tail`] bounded from the front, and its end is a value anyone can wait for.

use std::collections::VecDeque;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Shell, DRAIN_GRACE, READ_CHUNK};
use crate::approved::Approved;
use crate::sandbox::Policy;

/// The most output kept for one command, whatever it asks for: 16 MiB.
pub const MAX_KEPT: usize = 16 * 1024 * 1024;

/// What to start.
#[derive(Debug, Clone)]
pub struct LiveSpec {
    /// The command line, passed whole after `-c`: exactly what the person was shown.
    pub line: String,
    /// The shell; None picks [`default_shell`].
    pub shell: Option<PathBuf>,
    /// The working directory (already checked to be inside the workspace).
    pub cwd: PathBuf,
    /// Variables of this process's environment the command does not inherit (the API keys).
    pub env_remove: Vec<std::ffi::OsString>,
    /// How long it may run before its tree is killed.
    pub timeout: Duration,
    /// The sandbox it runs in; None: none.
    pub sandbox: Option<Policy>,
    /// How many bytes of output to keep (the newest), at most [`MAX_KEPT`].
    pub keep: usize,
}

/// How a live command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// Its exit code; None when a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it (`SIGKILL`), when one did.
    pub signal: Option<String>,
    /// It ran past its timeout (and was killed).
    pub timed_out: bool,
    /// It was killed on request (terminal/kill, a cancelled turn, release).
    pub killed: bool,
}

impl Exit {
    /// The trailer the chat and the model read: `[exit 0]`, `[killed: SIGKILL]`,
    /// `[timed out after 120s - process tree killed]`.
    pub fn trailer(&self, timeout: Duration) -> String {
        if self.timed_out {
            return format!(
                "[timed out after {}s - process tree killed]",
                timeout.as_secs_f64()
            );
        }
        match (&self.code, &self.signal) {
            (Some(code), _) => format!("[exit {code}]"),
            (None, Some(signal)) if self.killed => format!("[killed: {signal}]"),
            (None, Some(signal)) => format!("[ended by {signal}]"),
            (None, None) => "[ended]".into(),
        }
    }
}

/// The newest bytes of a command's output, at most `keep` of them, cut at a character boundary.
#[derive(Debug)]
pub struct Tail {
    bytes: VecDeque<u8>,
    keep: usize,
    /// Bytes were dropped from the front.
    truncated: bool,
}

impl Tail {
    /// An empty tail keeping at most `keep` bytes (and never more than [`MAX_KEPT`]).
    pub fn new(keep: usize) -> Tail {
        Tail {
            bytes: VecDeque::new(),
            keep: keep.min(MAX_KEPT),
            truncated: false,
        }
    }

    /// Appends `chunk`, dropping the oldest bytes past the limit, and then any continuation
    /// bytes left at the front, so what is kept starts at a character.
    pub fn push(&mut self, chunk: &[u8]) {
        let chunk = if chunk.len() > self.keep {
            self.truncated = true;
            self.bytes.clear();
            &chunk[chunk.len() - self.keep..]
        } else {
            chunk
        };
        self.bytes.extend(chunk);
        if self.bytes.len() > self.keep {
            let over = self.bytes.len() - self.keep;
            self.bytes.drain(..over);
            self.truncated = true;
        }
        if self.truncated {
            // A UTF-8 character is at most 4 bytes: at most 3 continuation bytes to drop.
            let mut dropped = 0;
            while dropped < 3 && self.bytes.front().is_some_and(|b| b & 0xC0 == 0x80) {
                self.bytes.pop_front();
                dropped += 1;
            }
        }
    }

    /// What is kept, as text (invalid UTF-8 shown as U+FFFD), and whether the front was cut.
    pub fn text(&mut self) -> (String, bool) {
        let bytes = self.bytes.make_contiguous();
        (String::from_utf8_lossy(bytes).into_owned(), self.truncated)
    }

    /// The newest `chars` characters or so of what is kept, as text, and whether anything
    /// before them is gone: only the last `4 × chars` bytes are decoded (a character is at most
    /// four), so a live row of a 16 MiB tail costs as much as one of a short output.
    pub fn last_text(&self, chars: usize) -> (String, bool) {
        let take = chars.saturating_mul(4).min(self.bytes.len());
        let mut bytes: Vec<u8> = self
            .bytes
            .range(self.bytes.len() - take..)
            .copied()
            .collect();
        let cut = self.truncated || take < self.bytes.len();
        if take < self.bytes.len() {
            let start = bytes
                .iter()
                .take(3)
                .take_while(|b| *b & 0xC0 == 0x80)
                .count();
            bytes.drain(..start);
        }
        let text = String::from_utf8_lossy(&bytes);
        let count = text.chars().count();
        let text = match count.checked_sub(chars) {
            Some(skip) if skip > 0 => text.chars().skip(skip).collect(),
            _ => text.into_owned(),
        };
        (text, cut || count > chars)
    }

    /// How many bytes are kept.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Bytes of a command's newest output a [`Seen`] keeps: far more than the few lines a live row
/// shows, and nothing like the whole of a flood.
pub const SEEN_BYTES: usize = 64 * 1024;

/// A command's newest output as it arrives, stdout and stderr interleaved, for a person to watch
/// while it runs (run_bash's live row). Bounded: [`SEEN_BYTES`] of it at most, whatever the
/// command prints; every chunk tells [`Seen::changes`]. The model never reads it: that is the
/// clamped capture.
#[derive(Debug)]
pub struct Seen {
    tail: Mutex<Tail>,
    bump: watch::Sender<u64>,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            tail: Mutex::new(Tail::new(SEEN_BYTES)),
            bump: watch::channel(0).0,
        }
    }
}

impl Seen {
    /// Keeps `chunk` as the newest output, and tells whoever watches.
    pub fn push(&self, chunk: &[u8]) {
        self.tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(chunk);
        self.bump.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A receiver told of every chunk.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.bump.subscribe()
    }

    /// The newest `chars` characters or so as a terminal would show them (escape sequences
    /// out, carriage-return redraws collapsed, [`crate::ansi::TermText`]) and redacted, starting
    /// at a whole line when anything before was left out and a newline allows, so no line is
    /// shown from its middle (or from inside an escape sequence); a last line longer than
    /// `chars` is shown from its middle. [`KEY_MARGIN`] more is read than can be shown and
    /// redacted with it, then left out: a key cut in two by the start of what is kept is
    /// never half shown. (A key that only a terminal's redraws put together is redacted by
    /// the executor, which redacts every report.)
    pub fn newest(&self, chars: usize) -> String {
        let (raw, cut) = self
            .tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last_text(chars.saturating_add(KEY_MARGIN));
        let raw = crate::secrets::redact_owned(raw);
        // Where the kept part begins: past the margin when anything came before it.
        let (skip, at_line_start) = match raw.char_indices().nth(KEY_MARGIN) {
            Some((at, _)) if cut => (at, raw[..at].ends_with('\n')),
            _ => (0, !cut),
        };
        let mut screen = crate::ansi::TermText::default();
        let mut shown = String::with_capacity(raw.len() - skip);
        screen.feed(&raw[skip..], &mut shown);
        screen.finish(&mut shown);
        let count = shown.chars().count();
        let (kept, whole_line) = if count > chars {
            let start = shown
                .char_indices()
                .nth(count - chars)
                .map_or(0, |(at, _)| at);
            (&shown[start..], shown[..start].ends_with('\n'))
        } else {
            (shown.as_str(), at_line_start)
        };
        if whole_line {
            return kept.to_string();
        }
        match kept.find('\n') {
            Some(newline) if newline + 1 < kept.len() => kept[newline + 1..].to_string(),
            _ => kept.to_string(),
        }
    }
}

/// Characters read before what [`Seen::newest`] shows, redacted with it and then left out:
/// longer than any key.
const KEY_MARGIN: usize = 1024;

/// A started command: its output so far, its end once it has ended, and a way to kill it.
#[derive(Debug)]
pub struct Live {
    tail: Arc<Mutex<Tail>>,
    /// Bumped on every chunk of output and once at the end (for whoever shows it live).
    version: watch::Receiver<u64>,
    exit: watch::Receiver<Option<Exit>>,
    kill: CancellationToken,
    timeout: Duration,
}

impl Live {
    /// Starts `spec` as the root of its own process tree. Only a step someone allowed can call
    /// it (the [`Approved`]). Errors when the shell cannot be started (or the sandbox set up).
    pub async fn start(spec: &LiveSpec, approved: &Approved) -> io::Result<Live> {
        let Shell {
            mut child,
            tree,
            stdout,
            stderr,
        } = Shell::start(
            spec.shell.as_deref(),
            &spec.line,
            &spec.cwd,
            &spec.env_remove,
            spec.sandbox.as_ref(),
            approved,
        )
        .await?;
        let tail = Arc::new(Mutex::new(Tail::new(spec.keep)));
        let (bump, version) = watch::channel(0u64);
        let (ended, exit) = watch::channel(None);
        let kill = CancellationToken::new();
        let timeout = spec.timeout;
        let (task_tail, task_kill) = (tail.clone(), kill.clone());
        tokio::spawn(async move {
            let drains = futures::future::join(
                drain(stdout, &task_tail, &bump),
                drain(stderr, &task_tail, &bump),
            );
            tokio::pin!(drains);
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            let mut drained = false;
            let (status, timed_out, killed) = loop {
                tokio::select! {
                    status = child.wait() => break (status, false, false),
                    () = &mut deadline => break (Err(io::Error::other("timed out")), true, false),
                    () = task_kill.cancelled() => break (Err(io::Error::other("killed")), false, true),
                    ((), ()) = &mut drains, if !drained => drained = true,
                }
            };
            // What the shell left running dies with it; after a timeout or kill, all of it.
            tree.end().await;
            let status = match status {
                Ok(status) => Ok(status),
                Err(_) => child.wait().await,
            };
            if !drained {
                let _ = tokio::time::timeout(DRAIN_GRACE, &mut drains).await;
            }
            let exit = match status {
                Ok(status) => Exit {
                    code: if timed_out || killed {
                        None
                    } else {
                        status.code()
                    },
                    signal: status
                        .signal()
                        .map(signal_name)
                        .or_else(|| (timed_out || killed).then(|| "SIGKILL".to_string())),
                    timed_out,
                    killed,
                },
                Err(err) => {
                    tracing::warn!(%err, "a live command's status could not be read");
                    Exit {
                        code: None,
                        signal: None,
                        timed_out,
                        killed,
                    }
                }
            };
            let _ = ended.send(Some(exit));
            bump.send_modify(|v| *v += 1);
        });
        Ok(Live {
            tail,
            version,
            exit,
            kill,
            timeout,
        })
    }

    /// The output so far and whether its front was cut.
    pub fn output(&self) -> (String, bool) {
        self.tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .text()
    }

    /// The newest `chars` characters of the output ([`Tail::last_text`]).
    pub fn output_tail(&self, chars: usize) -> (String, bool) {
        self.tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last_text(chars)
    }

    /// How it ended, once it has.
    pub fn exit(&self) -> Option<Exit> {
        self.exit.borrow().clone()
    }

    /// Waits until it has ended.
    pub async fn wait(&self) -> Exit {
        let mut exit = self.exit.clone();
        loop {
            if let Some(done) = exit.borrow_and_update().clone() {
                return done;
            }
            if exit.changed().await.is_err() {
                // The task is gone without a word: it cannot run any more.
                return exit.borrow().clone().unwrap_or(Exit {
                    code: None,
                    signal: None,
                    timed_out: false,
                    killed: true,
                });
            }
        }
    }

    /// Kills its whole tree (nothing happens when it has ended already).
    pub fn kill(&self) {
        self.kill.cancel();
    }

    /// A receiver told of every change (output or end), for a live display.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.version.clone()
    }

    /// Its timeout (for [`Exit::trailer`]).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.kill.cancel();
    }
}

/// Reads `reader` to EOF into the shared tail, telling watchers after each chunk.
async fn drain<R: AsyncRead + Unpin>(
    reader: Option<R>,
    tail: &Mutex<Tail>,
    bump: &watch::Sender<u64>,
) {
    let Some(mut reader) = reader else {
        return;
    };
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => {
                tail.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(&buf[..n]);
                bump.send_modify(|v| *v += 1);
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// `SIGTERM` for 15, and so on; `signal 42` for one without a common name.
fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn seen_keeps_a_bounded_tail_and_shows_whole_lines_as_a_terminal_would() {
        let seen = Seen::default();
        let changes = seen.changes();
        for i in 0..20_000 {
            seen.push(format!("line {i:05}\n").as_bytes());
        }
        assert!(changes.has_changed().unwrap());
        assert!(seen.tail.lock().unwrap().last_text(usize::MAX).0.len() <= SEEN_BYTES);
        let newest = seen.newest(30);
        assert!(newest.ends_with("line 19999\n"), "{newest:?}");
        assert!(newest.starts_with("line "), "{newest:?}");
        // A progress bar redrawn with carriage returns, and colours: what a terminal leaves.
        seen.push(b"\x1b[32mok\x1b[0m 10%\r\x1b[32mok\x1b[0m 99%\n");
        assert!(
            seen.newest(60).ends_with("line 19999\nok 99%\n"),
            "{:?}",
            seen.newest(60)
        );
        // A last line longer than asked for is shown (from its middle), not left out.
        seen.push(&[b'x'; 100]);
        assert_eq!(seen.newest(30), "x".repeat(30));
    }

    #[test]
    fn a_key_cut_by_the_start_of_the_newest_output_is_not_half_shown() {
        let key = "sk-live-progress-cut-KEY-0123456789abcdefghij";
        crate::secrets::protect(key);
        // The key just inside what is read, and cut by the start of what is read.
        for after in [3990, 4000 + KEY_MARGIN - 20] {
            let seen = Seen::default();
            seen.push(&[b'a'; 5000]);
            seen.push(key.as_bytes());
            seen.push(&vec![b'b'; after]);
            let newest = seen.newest(4000);
            assert!(newest.chars().count() <= 4000, "{after}");
            assert!(!newest.contains(&key[key.len() - 8..]), "{after}: {newest}");
            assert!(newest.chars().all(|c| c == 'b'), "{after}: {newest}");
            assert!(newest.len() > 3900, "{after}: {}", newest.len());
        }
    }

    #[test]
    fn the_newest_lines_start_at_a_whole_line_and_keep_one_that_starts_there() {
        let seen = Seen::default();
        seen.push(&[b'x'; 3000]);
        seen.push(b"\nfirst\nsecond\n");
        // Whatever was cut, `first` begins a line: it is kept, whole, whether the cut falls
        // just before it or on the newline before that.
        assert_eq!(seen.newest(13), "first\nsecond\n");
        assert_eq!(seen.newest(14), "first\nsecond\n");
    }

    fn spec(line: &str) -> LiveSpec {
        LiveSpec {
            line: line.into(),
            shell: None,
            cwd: std::env::temp_dir(),
            env_remove: Vec::new(),
            timeout: Duration::from_secs(30),
            sandbox: None,
            keep: MAX_KEPT,
        }
    }

    #[test]
    fn a_tail_keeps_the_newest_bytes_and_starts_at_a_character() {
        let mut tail = Tail::new(5);
        tail.push(b"abc");
        assert_eq!(tail.text(), ("abc".to_string(), false));
        // "é" is two bytes: cutting "abcdé" to 5 would start inside nothing, cutting "bcdéf"
        // to 5 leaves "cdéf" (5 bytes).
        tail.push("dé".as_bytes());
        assert_eq!(tail.text(), ("bcdé".to_string(), true));
        tail.push(b"f");
        assert_eq!(tail.text(), ("cdéf".to_string(), true));
        tail.push(b"gh");
        assert_eq!(tail.text(), ("éfgh".to_string(), true));
        // The cut falls in the middle of "é": its second byte is dropped too.
        tail.push(b"i");
        assert_eq!(tail.text(), ("fghi".to_string(), true));
        assert_eq!(tail.len(), 4);
        // A chunk larger than the limit keeps its own end.
        let mut tail = Tail::new(4);
        tail.push("xx€yy".as_bytes());
        // (bytes 78 78 e2 82 ac 79 79: the last four start inside the euro sign)
        assert_eq!(tail.text(), ("yy".to_string(), true));
    }

    #[test]
    fn the_last_characters_are_decoded_from_the_end_only() {
        let mut tail = Tail::new(MAX_KEPT);
        tail.push("ab€cd".as_bytes());
        assert_eq!(tail.last_text(10), ("ab€cd".to_string(), false));
        // Eight bytes for 2 characters: the cut lands inside the euro sign, whose remaining
        // bytes are dropped before the last two are kept.
        assert_eq!(tail.last_text(2), ("cd".to_string(), true));
        assert_eq!(tail.last_text(3), ("€cd".to_string(), true));
        let mut big = Tail::new(MAX_KEPT);
        big.push(&vec![b'x'; 1 << 20]);
        big.push(b"\nend");
        assert_eq!(big.last_text(4), ("\nend".to_string(), true));
    }

    #[test]
    fn a_tail_never_keeps_more_than_sixteen_megabytes() {
        let tail = Tail::new(usize::MAX);
        assert_eq!(tail.keep, MAX_KEPT);
        assert!(tail.is_empty());
    }

    #[tokio::test]
    async fn output_exit_code_and_environment_are_reported() {
        let live = Live::start(
            &spec("LIVE_TEST=set; echo out; echo err >&2; echo $LIVE_TEST; exit 3"),
            &Approved::for_tests(),
        )
        .await
        .unwrap();
        let exit = live.wait().await;
        assert_eq!(exit.code, Some(3));
        assert!(!exit.killed && !exit.timed_out);
        let (text, truncated) = live.output();
        assert!(!truncated);
        for line in ["out", "err", "set"] {
            assert!(text.lines().any(|l| l == line), "{line} in {text:?}");
        }
        assert_eq!(exit.trailer(live.timeout()), "[exit 3]");
    }

    #[tokio::test]
    async fn kill_ends_a_running_command_and_says_so() {
        let live = Live::start(&spec("echo started; sleep 1000"), &Approved::for_tests())
            .await
            .unwrap();
        let mut changes = live.changes();
        while !live.output().0.contains("started") {
            changes.changed().await.unwrap();
        }
        assert!(live.exit().is_none());
        live.kill();
        let exit = live.wait().await;
        assert!(exit.killed);
        assert_eq!(exit.code, None);
        assert_eq!(exit.trailer(live.timeout()), "[killed: SIGKILL]");
    }

    #[tokio::test]
    async fn a_command_past_its_timeout_is_killed() {
        let mut spec = spec("sleep 1000");
        spec.timeout = Duration::from_millis(200);
        let live = Live::start(&spec, &Approved::for_tests()).await.unwrap();
        let exit = live.wait().await;
        assert!(exit.timed_out);
        assert_eq!(
            exit.trailer(live.timeout()),
            "[timed out after 0.2s - process tree killed]"
        );
    }
}
