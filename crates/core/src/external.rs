//! What the core does for an external agent the person started (over the Agent Client Protocol):
//! write a file beneath the root, start the agent's own process, start a terminal for it. These
//! are governed by the agent's own permission flow, not by our gate (SPEC section 5), so the ACP
//! client above asks the core for the operation and never holds the write token itself.
//! Every path is still one the workspace resolved, and every process still runs in its own
//! process tree, under the sandbox the caller's policy names.

use std::io::{self, Read};
use std::os::fd::AsFd;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::approved::Approved;
use crate::process::live::{Live, LiveSpec};
use crate::reaper::Tree;
use crate::workspace::beneath::{self, FsError, Locked};
use crate::workspace::{Resolved, Workspace};

/// The largest file an agent may read or write through the client: 64 MB, the edit limit's
/// default (a test holds the two together).
pub const MAX_BYTES: u64 = 64 * 1024 * 1024;
/// How long a write waits for an edit of the same file to finish.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// The token for what the core does here, under the agent's own permission flow.
fn approved() -> Approved {
    Approved::for_external_agent()
}

/// What starting an external agent gives whoever started it: the authority to write files and
/// start terminals on that agent's behalf ([`write_file`], [`start_terminal`]). Only
/// [`start_agent`] makes one, so code that never started an agent the person chose cannot write
/// or run anything through this module. Outside the core it can be held and passed on, not made:
///
/// ```compile_fail,E0451
/// let authority = agent_nvim_core::external::AgentAuthority { _started: () };
/// ```
///
/// (`for_tests` exists only with the `test-support` feature, for in-process test agents.)
#[derive(Debug, Clone)]
pub struct AgentAuthority {
    _started: (),
}

impl AgentAuthority {
    /// One for a test's in-process agent, which has no process to start.
    #[cfg(any(test, feature = "test-support"))]
    pub fn for_tests() -> AgentAuthority {
        AgentAuthority { _started: () }
    }
}

/// Why a read or write for the agent did not happen.
#[derive(Debug)]
pub enum Failure {
    /// The file system said no (the path check's refusals among them).
    Fs(FsError),
    /// The file is this many bytes, over [`MAX_BYTES`].
    TooBig(u64),
    /// The file is read-only.
    ReadOnly,
    /// Another edit of the file holds its lock.
    Busy,
}

impl From<FsError> for Failure {
    fn from(err: FsError) -> Self {
        Failure::Fs(err)
    }
}

impl From<io::Error> for Failure {
    fn from(err: io::Error) -> Self {
        Failure::Fs(err.into())
    }
}

/// The whole file, read beneath the root; only a regular file, and at most [`MAX_BYTES`].
pub fn read_file(workspace: &Workspace, target: &Resolved) -> Result<Vec<u8>, Failure> {
    let opened = workspace
        .handle()
        .open_regular(workspace.relative(target), target.dir_only)?;
    let size = u64::try_from(opened.stat.st_size).unwrap_or(0);
    if size > MAX_BYTES {
        return Err(Failure::TooBig(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    (&opened.file).take(MAX_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(Failure::TooBig(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Replaces (or creates) the file with `bytes`, beneath the root: an existing file is replaced
/// as edit_file replaces one (atomically, or in place when it has several hard links, keeping
/// its mode, owner and extended attributes, under the edit lock); a new one is created with its
/// parents, with the mode the umask gives. Identical content is left alone.
pub fn write_file(
    _authority: &AgentAuthority,
    workspace: &Workspace,
    target: &Resolved,
    bytes: &[u8],
) -> Result<(), Failure> {
    if bytes.len() as u64 > MAX_BYTES {
        return Err(Failure::TooBig(bytes.len() as u64));
    }
    if target.dir_only {
        return Err(Failure::Fs(FsError::IsDirectory));
    }
    let rel = workspace.relative(target);
    let approved = approved();
    // Twice at most: a file that appears between the look and the create is then replaced.
    for _ in 0..2 {
        if let Some(file) = workspace.handle().open_in_dir(rel)? {
            if file.holds(bytes)? {
                return Ok(());
            }
            if file.read_only() {
                return Err(Failure::ReadOnly);
            }
            return match file.lock_named(LOCK_WAIT, &|| false)? {
                Locked::Held => Ok(file.replace(&|out| out.write_all(bytes), &approved)?),
                Locked::Busy | Locked::Replaced => Err(Failure::Busy),
            };
        }
        let (dir, name) = workspace.handle().make_parents(rel, &approved)?;
        match beneath::create_new(dir.as_fd(), &name, bytes, &approved) {
            Err(FsError::Io(err)) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            other => return Ok(other?),
        }
    }
    Err(Failure::Busy)
}

/// Starts the agent the person chose, `command` as the caller built it (its environment, its
/// sandbox), in a process tree of its own; with it, the authority to act for it.
pub async fn start_agent(command: Command) -> io::Result<(Child, Tree, AgentAuthority)> {
    let (child, tree) = crate::process::spawn_tree(command, &approved()).await?;
    Ok((child, tree, AgentAuthority { _started: () }))
}

/// Starts a terminal the agent asked for (`terminal/create`), after the agent's permission flow
/// and the person's rules allowed its line.
pub async fn start_terminal(_authority: &AgentAuthority, spec: &LiveSpec) -> io::Result<Live> {
    Live::start(spec, &approved()).await
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_agent_reads_and_writes_files_as_large_as_edit_file_does_by_default() {
        assert_eq!(
            super::MAX_BYTES,
            crate::tools::DEFAULT_MAX_EDIT_MB * 1024 * 1024
        );
    }
}
