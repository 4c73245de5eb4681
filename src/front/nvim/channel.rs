//! The msgpack channel to the Neovim that started us: our stdin and stdout. Neovim's jobs get a
//! socket pair on each (a pipe from elsewhere), so both are read and written by the runtime's
//! reactor, a batch of events going out with one `write` and a reply read as soon as it comes.
//! tokio's stdin and `fs::File` would hand each read and each write to a thread of the blocking
//! pool, two thread switches a round trip, which a busy machine stretches into milliseconds a
//! batch. Anything else (a file, a terminal) falls back to those.

use std::fs::File;
use std::io;
use std::os::fd::AsFd as _;
use std::os::unix::fs::FileTypeExt as _;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::unix::pipe;
use tokio::net::UnixStream;

/// Our end of the channel, for reading (stdin) or writing (stdout).
pub enum End {
    Socket(UnixStream),
    PipeIn(pipe::Receiver),
    PipeOut(pipe::Sender),
    Stdin(tokio::io::Stdin),
    File(tokio::fs::File),
}

impl End {
    /// Our stdin, to read Neovim's messages from.
    pub(super) fn stdin() -> io::Result<End> {
        let (file, kind) = ours(io::stdin().as_fd())?;
        Ok(if kind.is_socket() {
            End::Socket(socket(file)?)
        } else if kind.is_fifo() {
            End::PipeIn(pipe::Receiver::from_file(file)?)
        } else {
            End::Stdin(tokio::io::stdin())
        })
    }

    /// Our stdout, to write messages to Neovim on (and nothing else).
    pub(super) fn stdout() -> io::Result<End> {
        let (file, kind) = ours(io::stdout().as_fd())?;
        Ok(if kind.is_socket() {
            End::Socket(socket(file)?)
        } else if kind.is_fifo() {
            End::PipeOut(pipe::Sender::from_file(file)?)
        } else {
            End::File(tokio::fs::File::from_std(file))
        })
    }
}

/// A descriptor of our own for `fd`, and what it is.
fn ours(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<(File, std::fs::FileType)> {
    let file = File::from(fd.try_clone_to_owned()?);
    let kind = file.metadata()?.file_type();
    Ok((file, kind))
}

fn socket(file: File) -> io::Result<UnixStream> {
    let socket = std::os::unix::net::UnixStream::from(std::os::fd::OwnedFd::from(file));
    socket.set_nonblocking(true)?;
    UnixStream::from_std(socket)
}

impl AsyncRead for End {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            End::Socket(s) => Pin::new(s).poll_read(cx, buf),
            End::PipeIn(p) => Pin::new(p).poll_read(cx, buf),
            End::Stdin(s) => Pin::new(s).poll_read(cx, buf),
            End::File(f) => Pin::new(f).poll_read(cx, buf),
            End::PipeOut(_) => Poll::Ready(Err(io::ErrorKind::Unsupported.into())),
        }
    }
}

impl AsyncWrite for End {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            End::Socket(s) => Pin::new(s).poll_write(cx, buf),
            End::PipeOut(p) => Pin::new(p).poll_write(cx, buf),
            End::File(f) => Pin::new(f).poll_write(cx, buf),
            End::PipeIn(_) | End::Stdin(_) => Poll::Ready(Err(io::ErrorKind::Unsupported.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            End::Socket(s) => Pin::new(s).poll_flush(cx),
            End::PipeOut(p) => Pin::new(p).poll_flush(cx),
            End::File(f) => Pin::new(f).poll_flush(cx),
            End::PipeIn(_) | End::Stdin(_) => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            End::Socket(s) => Pin::new(s).poll_shutdown(cx),
            End::PipeOut(p) => Pin::new(p).poll_shutdown(cx),
            End::File(f) => Pin::new(f).poll_shutdown(cx),
            End::PipeIn(_) | End::Stdin(_) => Poll::Ready(Ok(())),
        }
    }
}
