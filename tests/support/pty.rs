//! A pseudo-terminal for tests of what a person at a terminal sees and types.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A child whose stdin and stderr are a terminal, with the terminal's other end to type and read.
pub struct Pty {
    pub child: Child,
    writer: File,
    screen: mpsc::Receiver<u8>,
    seen: String,
}

impl Pty {
    /// Starts `command` with stdin and stderr on a new pty; stdout stays a pipe.
    pub fn spawn(command: Command) -> Pty {
        Pty::start(command, false)
    }

    /// Starts `command` with stdin, stdout and stderr all on a new pty, as in a terminal.
    pub fn spawn_terminal(command: Command) -> Pty {
        Pty::start(command, true)
    }

    fn start(mut command: Command, stdout_too: bool) -> Pty {
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty writes two fds; null name/termios/winsize are allowed.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty failed");
        // SAFETY: both fds were just opened and are owned here.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let slave_err = slave.try_clone().unwrap();
        let stdout = if stdout_too {
            Stdio::from(slave.try_clone().unwrap())
        } else {
            Stdio::piped()
        };
        command
            .stdin(Stdio::from(slave))
            .stderr(Stdio::from(slave_err))
            .stdout(stdout);
        let child = command.spawn().unwrap();
        let writer = File::from(master.try_clone().unwrap());
        let mut reader = File::from(master);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                for &b in &buf[..n] {
                    let _ = tx.send(b);
                }
            }
        });
        Pty {
            child,
            writer,
            screen: rx,
            seen: String::new(),
        }
    }

    /// Waits until the terminal has shown `text`; returns everything shown so far.
    pub fn expect(&mut self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut bytes = Vec::new();
        while !self.seen.contains(text) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.screen.recv_timeout(left) {
                Ok(b) => {
                    bytes.push(b);
                    self.seen = String::from_utf8_lossy(&bytes).into_owned();
                }
                Err(_) => panic!("terminal never showed {text:?}; it showed:\n{}", self.seen),
            }
        }
        self.seen.clone()
    }

    /// Types `keys` into the terminal.
    pub fn send(&mut self, keys: &[u8]) {
        self.writer.write_all(keys).unwrap();
        self.writer.flush().unwrap();
    }
}
