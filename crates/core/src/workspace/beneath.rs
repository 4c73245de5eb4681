//! I/O beneath the root's directory handle, so that what [`super::Workspace::resolve`] checked is
//! what is used.
//!
//! The check resolves a path to a relative path with no links left in it. Every open here starts
//! from the handle of the root opened when the workspace was, never from a path name, and
//! resolves that relative path again inside the kernel with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS)`: if a directory or file was swapped for a link to the outside after the
//! check (or while an approval was pending), the open fails instead of following it. Where
//! openat2 is missing (Linux before 5.6, some seccomp filters, other Unixes) the same relative
//! path is walked one component at a time with `openat(O_NOFOLLOW)`, and any link met on the way
//! fails the open: the checked path has none, so a link there is a swap.
//!
//! Writes stay beneath too: a file is replaced through a temporary file created in its parent's
//! handle and renamed within it; parents are created one `mkdirat` at a time from the root.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::approved::Approved;
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, Stat};
use rustix::io::Errno;

/// How often an openat2 that saw a concurrent rename (EAGAIN) is tried again.
const AGAIN_TRIES: usize = 64;
/// Bytes compared or copied at a time.
const CHUNK: usize = 256 * 1024;
/// Prefix of the temporary files a replace writes next to the file.
pub const TEMP_PREFIX: &str = ".agent-edit-";

/// Why an operation beneath the root did not happen.
#[derive(Debug)]
pub enum FsError {
    /// Nothing is at the path.
    NotFound,
    /// A component before the last is not a directory, or a directory was required.
    NotADirectory,
    /// The path now leads outside the root, or through a link that was not there when it was
    /// checked: the tree changed under us.
    Moved,
    /// Too many levels of symbolic links.
    Loop,
    /// A name or the whole path is too long.
    TooLong,
    /// It is a directory, and a file was wanted.
    IsDirectory,
    /// It exists but is not a regular file (a FIFO, a device, a socket).
    NotRegular,
    /// Anything else the system said.
    Io(io::Error),
}

impl From<Errno> for FsError {
    fn from(errno: Errno) -> Self {
        match errno {
            Errno::NOENT => FsError::NotFound,
            Errno::NOTDIR => FsError::NotADirectory,
            Errno::XDEV => FsError::Moved,
            Errno::LOOP => FsError::Loop,
            Errno::NAMETOOLONG => FsError::TooLong,
            Errno::NXIO => FsError::NotRegular,
            other => FsError::Io(other.into()),
        }
    }
}

impl From<io::Error> for FsError {
    fn from(err: io::Error) -> Self {
        match err.raw_os_error() {
            Some(raw) => Errno::from_raw_os_error(raw).into(),
            None => FsError::Io(err),
        }
    }
}

/// The root's handle, and how to open things beneath it.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    /// openat2 is not available: walk components instead.
    walk: bool,
}

/// A regular file opened for reading, with what fstat said about it.
#[derive(Debug)]
pub struct Opened {
    /// The open file (its type checked on the handle).
    pub file: File,
    /// Its metadata at open.
    pub stat: Stat,
}

/// Which inode a file was, to tell whether a path still names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    dev: u64,
    ino: u64,
}

impl Identity {
    /// The identity in `stat`.
    // The fields' types differ between targets (u64 here, c_ulong on others).
    #[allow(clippy::useless_conversion)]
    pub fn of(stat: &Stat) -> Self {
        Identity {
            dev: u64::from(stat.st_dev),
            ino: u64::from(stat.st_ino),
        }
    }
}

/// What [`InDir::lock_named`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locked {
    /// The lock is ours and the path still names the file.
    Held,
    /// Another holder kept the lock past the wait (or the caller cancelled).
    Busy,
    /// The lock is ours, but another file now stands at the path.
    Replaced,
}

/// An existing regular file in its parent directory's handle: what an edit reads, locks and
/// replaces.
#[derive(Debug)]
pub struct InDir {
    dir: OwnedFd,
    name: CString,
    /// The file, opened for reading.
    pub opened: Opened,
}

impl Root {
    /// Opens the handle of `root` (a canonical directory) and learns whether openat2 works here.
    pub fn open(root: &Path) -> io::Result<Self> {
        let fd = rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let walk = !openat2_works(fd.as_fd());
        Ok(Root { fd, walk })
    }

    /// The same root, forced to walk components (tests of the fallback).
    #[cfg(test)]
    pub fn walking(root: &Path) -> io::Result<Self> {
        let mut root = Root::open(root)?;
        root.walk = true;
        Ok(root)
    }

    /// Opens `rel` (relative to the root, no links, no `..`) with `flags`; CLOEXEC is added.
    pub fn open_at(&self, rel: &Path, flags: OFlags) -> Result<OwnedFd, FsError> {
        open_beneath(self.fd.as_fd(), rel, flags | OFlags::CLOEXEC, self.walk)
    }

    /// Opens `rel` as a regular file for reading, never blocking: the type is checked on an
    /// O_PATH handle (which opens no device and waits on no FIFO) and again on the real one.
    /// `dir_only` (the path ended in `/`) makes a file a "not a directory".
    pub fn open_regular(&self, rel: &Path, dir_only: bool) -> Result<Opened, FsError> {
        let mut probe = OFlags::PATH;
        if dir_only {
            probe |= OFlags::DIRECTORY;
        }
        let path_fd = self.open_at(rel, probe)?;
        let stat = rustix::fs::fstat(&path_fd)?;
        regular(&stat)?;
        let fd = self.open_at(rel, read_flags())?;
        checked_open(fd, Identity::of(&stat))
    }

    /// Opens `rel` as a directory for listing.
    pub fn open_dir(&self, rel: &Path) -> Result<OwnedFd, FsError> {
        self.open_at(rel, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK)
    }

    /// Opens the parent of `rel` and, in it, the existing regular file `rel` names. None when
    /// there is no such file.
    pub fn open_in_dir(&self, rel: &Path) -> Result<Option<InDir>, FsError> {
        let (parent, name) = split(rel)?;
        let dir = match self.open_at(parent, OFlags::PATH | OFlags::DIRECTORY) {
            Ok(dir) => dir,
            Err(FsError::NotFound) => return Ok(None),
            Err(err) => return Err(err),
        };
        match open_in(dir.as_fd(), &name) {
            Ok(opened) => Ok(Some(InDir { dir, name, opened })),
            Err(FsError::NotFound) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Creates the missing directories above `rel`, one `mkdirat` at a time from the root, and
    /// returns the parent's handle and the file's name. A link met on the way fails: the checked
    /// path had none.
    pub fn make_parents(
        &self,
        rel: &Path,
        approved: &Approved,
    ) -> Result<(OwnedFd, CString), FsError> {
        self.make_parents_with(rel, &|_| None, approved)
    }

    /// [`Root::make_parents`], giving each directory it creates the permission bits
    /// `mode_of(its path)` says, when it says (a rewind brings a `0700` directory back `0700`).
    /// The mode is set through the new directory's own descriptor, never by name.
    pub fn make_parents_with(
        &self,
        rel: &Path,
        mode_of: &dyn Fn(&Path) -> Option<u32>,
        _approved: &Approved,
    ) -> Result<(OwnedFd, CString), FsError> {
        let (parent, name) = split(rel)?;
        let mut walked = PathBuf::new();
        let mut dir = rustix::fs::openat(
            &self.fd,
            c".",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        for component in parent.components() {
            let Component::Normal(part) = component else {
                continue;
            };
            walked.push(part);
            let part = cstring(part)?;
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let next = match rustix::fs::openat(&dir, &part, flags, Mode::empty()) {
                Err(Errno::NOENT) => {
                    let wanted = mode_of(&walked);
                    // A private directory is made private from the start (no moment at the
                    // umask's mode), then given its exact bits.
                    let first = wanted.map_or(0o777, |mode| mode & 0o700);
                    match rustix::fs::mkdirat(&dir, &part, Mode::from_raw_mode(first)) {
                        Ok(()) => {
                            if let Some(mode) = wanted {
                                let made = rustix::fs::openat(
                                    &dir,
                                    &part,
                                    OFlags::RDONLY
                                        | OFlags::DIRECTORY
                                        | OFlags::NOFOLLOW
                                        | OFlags::CLOEXEC,
                                    Mode::empty(),
                                )?;
                                rustix::fs::fchmod(&made, Mode::from_raw_mode(mode & 0o7777))?;
                            }
                        }
                        Err(Errno::EXIST) => {}
                        Err(errno) => return Err(errno.into()),
                    }
                    rustix::fs::openat(&dir, &part, flags, Mode::empty())
                }
                other => other,
            };
            dir = next.map_err(|errno| link_or(dir.as_fd(), &part, errno))?;
        }
        Ok((dir, name))
    }
}

impl InDir {
    /// Whether the path still names this file (nothing renamed over it, nothing swapped).
    pub fn still_named(&self) -> Result<bool, FsError> {
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.dir, &self.name, flags, Mode::empty()) {
            Ok(fd) => Ok(Identity::of(&rustix::fs::fstat(&fd)?) == self.identity()),
            Err(Errno::NOENT) => Ok(false),
            Err(errno) => Err(errno.into()),
        }
    }

    /// How many names (hard links) the file has.
    // The field's type differs between targets (u64 here, u32 on others).
    #[allow(clippy::useless_conversion)]
    pub fn links(&self) -> u64 {
        u64::from(self.opened.stat.st_nlink)
    }

    /// The file's identity.
    pub fn identity(&self) -> Identity {
        Identity::of(&self.opened.stat)
    }

    /// Whether the user may not write the file: no write bit at all (for root too), or
    /// access(W_OK) says no.
    pub fn read_only(&self) -> bool {
        if self.opened.stat.st_mode & 0o222 == 0 {
            return true;
        }
        matches!(
            rustix::fs::accessat(
                &self.dir,
                &self.name,
                rustix::fs::Access::WRITE_OK,
                AtFlags::EACCESS
            ),
            Err(Errno::ACCESS | Errno::ROFS | Errno::PERM)
        )
    }

    /// Reads the whole file, refusing to read more than `limit` bytes.
    pub fn read_all(&self, limit: u64) -> io::Result<Vec<u8>> {
        let size = u64::try_from(self.opened.stat.st_size).unwrap_or(0);
        let mut bytes = Vec::with_capacity(size.min(limit) as usize + 1);
        (&self.opened.file)
            .take(limit + 1)
            .read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    /// Takes the advisory lock every edit of ours holds from its last check to its write, waiting
    /// up to `wait` for another holder, and no longer once `cancelled` says so. False when it
    /// could not be had.
    pub fn lock(&self, wait: Duration, cancelled: &dyn Fn() -> bool) -> io::Result<bool> {
        let start = Instant::now();
        loop {
            match rustix::fs::flock(&self.opened.file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(true),
                Err(Errno::WOULDBLOCK | Errno::INTR) => {
                    if start.elapsed() >= wait || cancelled() {
                        return Ok(false);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(errno) => return Err(errno.into()),
            }
        }
    }

    /// Takes the edit lock ([`InDir::lock`]), then checks that the path still names this file:
    /// an edit that held the lock before us may have renamed a new file over it.
    pub fn lock_named(
        &self,
        wait: Duration,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Locked, FsError> {
        if !self.lock(wait, cancelled)? {
            return Ok(Locked::Busy);
        }
        if !self.still_named()? {
            return Ok(Locked::Replaced);
        }
        Ok(Locked::Held)
    }

    /// Whether the file holds exactly `bytes` now, compared a chunk at a time (no second copy).
    pub fn holds(&self, bytes: &[u8]) -> io::Result<bool> {
        let now = rustix::fs::fstat(&self.opened.file)?;
        if u64::try_from(now.st_size).ok() != Some(bytes.len() as u64) {
            return Ok(false);
        }
        let mut buf = vec![0u8; CHUNK.min(bytes.len().max(1))];
        let mut at = 0;
        while at < bytes.len() {
            let want = buf.len().min(bytes.len() - at);
            let n = self.opened.file.read_at(&mut buf[..want], at as u64)?;
            if n == 0 || buf[..n] != bytes[at..at + n] {
                return Ok(false);
            }
            at += n;
        }
        let mut probe = [0u8; 1];
        Ok(self.opened.file.read_at(&mut probe, at as u64)? == 0)
    }

    /// Replaces the file's content with what `write` produces, keeping what the file was: mode,
    /// owner and group (where this process may set them), extended attributes (ACLs included).
    /// A file with one name is replaced atomically (a temporary file in the same directory,
    /// renamed over it). A file with several hard links is written in place, after the new
    /// content is staged in full in a temporary file, so that every name sees the edit.
    pub fn replace(
        &self,
        write: &dyn Fn(&mut dyn Write) -> io::Result<()>,
        _approved: &Approved,
    ) -> io::Result<()> {
        let (temp_name, mut temp) = temp_file(self.dir.as_fd())?;
        let staged = (|| {
            let mut out = io::BufWriter::with_capacity(CHUNK, &mut temp);
            write(&mut out)?;
            out.flush()?;
            drop(out);
            if self.opened.stat.st_nlink > 1 {
                self.write_in_place(&mut temp)
            } else {
                self.keep_metadata(&temp)?;
                rustix::fs::renameat(&self.dir, &temp_name, &self.dir, &self.name)?;
                Ok(())
            }
        })();
        if staged.is_err() || self.opened.stat.st_nlink > 1 {
            let _ = rustix::fs::unlinkat(&self.dir, &temp_name, AtFlags::empty());
        }
        staged
    }

    /// Copies the staged content over the file itself (the inode every hard link shares).
    fn write_in_place(&self, staged: &mut File) -> io::Result<()> {
        let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let target: File = rustix::fs::openat(&self.dir, &self.name, flags, Mode::empty())?.into();
        if Identity::of(&rustix::fs::fstat(&target)?) != self.identity() {
            return Err(io::Error::other(
                "the file was replaced while it was being written",
            ));
        }
        let len = staged.metadata()?.len();
        let mut buf = vec![0u8; CHUNK];
        let mut at = 0u64;
        while at < len {
            let n = staged.read_at(&mut buf, at)?;
            if n == 0 {
                break;
            }
            target.write_all_at(&buf[..n], at)?;
            at += n as u64;
        }
        target.set_len(len)?;
        Ok(())
    }

    /// Gives `temp` the file's owner, group, mode and extended attributes. Setting the owner is
    /// skipped where the process may not (EPERM); so are attributes of namespaces it may not
    /// write (`trusted.*`, `security.*` without the capability).
    ///
    /// Where the owner could not be kept the new file is this user's, so it does not get the
    /// setuid bit (it would run as this user, not as the owner it had); likewise setgid where the
    /// group could not be kept. `cp -p` drops them the same way.
    fn keep_metadata(&self, temp: &File) -> io::Result<()> {
        let stat = &self.opened.stat;
        let gid = Some(rustix::fs::Gid::from_raw(stat.st_gid));
        let (owner_kept, group_kept) =
            match rustix::fs::fchown(temp, Some(rustix::fs::Uid::from_raw(stat.st_uid)), gid) {
                Ok(()) => (true, true),
                // A user may still give the file a group they are in.
                Err(Errno::PERM) => (false, rustix::fs::fchown(temp, None, gid).is_ok()),
                Err(errno) => return Err(errno.into()),
            };
        let mut mode = stat.st_mode & 0o7777;
        if !owner_kept {
            mode &= !0o4000;
        }
        if !group_kept {
            mode &= !0o2000;
        }
        rustix::fs::fchmod(temp, Mode::from_raw_mode(mode))?;
        copy_xattrs(&self.opened.file, temp)
    }
}

/// Creates `name` in `dir` (it must not exist) with `bytes`, mode 0666 less the umask.
pub fn create_new(
    dir: BorrowedFd<'_>,
    name: &CString,
    bytes: &[u8],
    approved: &Approved,
) -> Result<(), FsError> {
    create_new_with(dir, name, bytes, None, approved)
}

/// [`create_new`], with exactly the permission bits `mode` when given: the file is created
/// readable and writable by its owner alone, written, then given `mode` through its
/// descriptor (a `0600` file brought back is never readable by others, not for a moment).
pub fn create_new_with(
    dir: BorrowedFd<'_>,
    name: &CString,
    bytes: &[u8],
    mode: Option<u32>,
    _approved: &Approved,
) -> Result<(), FsError> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let first = if mode.is_some() { 0o600 } else { 0o666 };
    let fd = rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(first))?;
    let mut file = File::from(fd);
    file.write_all(bytes)?;
    if let Some(mode) = mode {
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode & 0o7777))?;
    }
    Ok(())
}

/// Opens the existing regular file `name` in `dir` for reading, type-checked as
/// [`Root::open_regular`] does, never following a link in the last component.
pub fn open_in(dir: BorrowedFd<'_>, name: &CString) -> Result<Opened, FsError> {
    let probe = rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let stat = rustix::fs::fstat(&probe)?;
    if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink {
        return Err(FsError::Moved);
    }
    regular(&stat)?;
    let fd = rustix::fs::openat(
        dir,
        name,
        read_flags() | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    checked_open(fd, Identity::of(&stat))
}

/// The flags every read opens with: never blocking (a FIFO), never taking a terminal.
fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY
}

/// A directory is not a file; neither is anything else that is not regular.
fn regular(stat: &Stat) -> Result<(), FsError> {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(()),
        FileType::Directory => Err(FsError::IsDirectory),
        _ => Err(FsError::NotRegular),
    }
}

/// The real handle, checked to be the regular file the probe saw.
fn checked_open(fd: OwnedFd, want: Identity) -> Result<Opened, FsError> {
    let stat = rustix::fs::fstat(&fd)?;
    regular(&stat)?;
    if Identity::of(&stat) != want {
        return Err(FsError::Moved);
    }
    Ok(Opened {
        file: File::from(fd),
        stat,
    })
}

/// Whether openat2 with RESOLVE_BENEATH works on this kernel and under this seccomp filter.
#[cfg(target_os = "linux")]
fn openat2_works(root: BorrowedFd<'_>) -> bool {
    rustix::fs::openat2(
        root,
        c".",
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        beneath(),
    )
    .is_ok()
}

#[cfg(not(target_os = "linux"))]
fn openat2_works(_root: BorrowedFd<'_>) -> bool {
    false
}

#[cfg(target_os = "linux")]
fn beneath() -> rustix::fs::ResolveFlags {
    rustix::fs::ResolveFlags::BENEATH | rustix::fs::ResolveFlags::NO_MAGICLINKS
}

fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    walk: bool,
) -> Result<OwnedFd, FsError> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    if walk {
        return walk_beneath(root, rel, flags);
    }
    #[cfg(target_os = "linux")]
    {
        // EAGAIN: a rename somewhere on the system raced the lookup; the kernel asks for a retry
        // rather than risk a wrong answer.
        for _ in 0..AGAIN_TRIES {
            match rustix::fs::openat2(root, rel, flags, Mode::empty(), beneath()) {
                Err(Errno::AGAIN) => std::thread::yield_now(),
                other => return other.map_err(FsError::from),
            }
        }
        Err(FsError::Io(io::Error::other(
            "the directory tree kept changing while it was being opened",
        )))
    }
    #[cfg(not(target_os = "linux"))]
    walk_beneath(root, rel, flags)
}

/// The component walk used where openat2 is missing: each directory opened with O_NOFOLLOW
/// from the one before, the last component too. `rel` holds no `..` and no links, so any link
/// met is a swap.
fn walk_beneath(root: BorrowedFd<'_>, rel: &Path, flags: OFlags) -> Result<OwnedFd, FsError> {
    let parts: Vec<&OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part),
            _ => None,
        })
        .collect();
    let Some((last, dirs)) = parts.split_last() else {
        return Ok(rustix::fs::openat(root, c".", flags, Mode::empty())?);
    };
    let mut held: Option<OwnedFd> = None;
    for part in dirs {
        let part = cstring(part)?;
        let at = held.as_ref().map_or(root, |fd| fd.as_fd());
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let next = rustix::fs::openat(at, &part, flags, Mode::empty())
            .map_err(|errno| link_or(at, &part, errno))?;
        held = Some(next);
    }
    let at = held.as_ref().map_or(root, |fd| fd.as_fd());
    let last = cstring(last)?;
    let fd = rustix::fs::openat(at, &last, flags | OFlags::NOFOLLOW, Mode::empty())
        .map_err(|errno| link_or(at, &last, errno))?;
    if flags.contains(OFlags::PATH)
        && FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) == FileType::Symlink
    {
        return Err(FsError::Moved);
    }
    Ok(fd)
}

/// The error for a failed open of `name` in `dir`: a link there means the tree moved.
fn link_or(dir: BorrowedFd<'_>, name: &CString, errno: Errno) -> FsError {
    if matches!(errno, Errno::NOTDIR | Errno::LOOP) {
        if let Ok(stat) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink {
                return FsError::Moved;
            }
        }
    }
    errno.into()
}

/// `rel`'s parent (empty for the root) and last component.
fn split(rel: &Path) -> Result<(&Path, CString), FsError> {
    let name = rel.file_name().ok_or(FsError::IsDirectory)?;
    Ok((rel.parent().unwrap_or(Path::new("")), cstring(name)?))
}

fn cstring(part: &OsStr) -> Result<CString, FsError> {
    CString::new(part.as_bytes()).map_err(|_| FsError::NotFound)
}

/// A new temporary file in `dir`, mode 0600 until the real mode is set.
fn temp_file(dir: BorrowedFd<'_>) -> io::Result<(CString, File)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "{TEMP_PREFIX}{}-{}-{nanos:x}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let name = CString::new(name).map_err(io::Error::other)?;
        match rustix::fs::openat(dir, &name, flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => return Ok((name, File::from(fd))),
            Err(Errno::EXIST) => continue,
            Err(errno) => return Err(errno.into()),
        }
    }
}

/// The attribute that holds a file's capabilities. The kernel removes it whenever the file is
/// written (for root too), so new content never inherits the old content's privileges.
const CAPABILITY_XATTR: &[u8] = b"security.capability";

/// Copies every extended attribute of `from` to `to` (POSIX ACLs are the `system.posix_acl_*`
/// ones) but the file's capabilities. Attributes this process may not set are skipped, as
/// `cp --preserve=xattr` does.
fn copy_xattrs(from: &File, to: &File) -> io::Result<()> {
    let size = match rustix::fs::flistxattr_query(from) {
        Ok(0) => return Ok(()),
        Ok(size) => size,
        Err(Errno::NOTSUP) => return Ok(()),
        Err(errno) => return Err(errno.into()),
    };
    let mut names = vec![0u8; size];
    let len = rustix::fs::flistxattr(from, &mut names[..])?;
    for name in names[..len.min(names.len())].split(|b| *b == 0) {
        if name.is_empty() || name == CAPABILITY_XATTR {
            continue;
        }
        let name = CString::new(name).map_err(io::Error::other)?;
        let value_len = match rustix::fs::fgetxattr_query(from, &name) {
            Ok(len) => len,
            Err(Errno::NODATA) => continue,
            Err(errno) => return Err(errno.into()),
        };
        let mut value = vec![0u8; value_len];
        let got = rustix::fs::fgetxattr(from, &name, &mut value[..])?;
        match rustix::fs::fsetxattr(
            to,
            &name,
            &value[..got.min(value.len())],
            rustix::fs::XattrFlags::empty(),
        ) {
            Ok(()) | Err(Errno::PERM | Errno::ACCESS | Errno::NOTSUP) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}
