//! The command sandbox (issue 12): what a run_bash command, or an external agent started with
//! `sandbox = true`, may write and connect to. On Linux it is Landlock, through the Landlock
//! project's own `landlock` crate; elsewhere, or on a kernel without Landlock, it is off, and
//! [`Report::warnings`] says so (never an error).
//!
//! Three steps, each in one place:
//! - [`Sandbox`] is what the person configured (`sandbox = { mode, network, writable }`,
//!   `--sandbox`, `--no-network`, `--writable`);
//! - [`Sandbox::policy`] resolves it for one workspace into a [`Policy`]: the places a command may
//!   write and whether TCP is blocked, or None when nothing is enforced (mode `off`, no
//!   Landlock);
//! - [`confine`] builds the Landlock ruleset in the parent (the path handles opened, the ruleset
//!   created and filled) and leaves the child only `prctl(PR_SET_NO_NEW_PRIVS)` and
//!   `landlock_restrict_self`, run between fork and exec (see [`confine`] for why that is safe).
//!
//! [`Report`] is what the person and the model are told: the ABI, the mode in force, what the
//! kernel cannot enforce (`:checkhealth agent`, the `started` event, `agent-nvim sandbox`, the
//! system prompt).

use std::path::{Path, PathBuf};

use serde::Serialize;

/// What a sandboxed command may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Write in the workspace, the temp directory and the `writable` places; read everywhere.
    #[default]
    WorkspaceWrite,
    /// Write nowhere but `/dev/null` and the temp directory; read everywhere.
    ReadOnly,
    /// No sandbox: commands run as they always did.
    Off,
}

impl Mode {
    /// The names [`Mode::parse`] takes, for messages.
    pub const NAMES: &'static str = "\"workspace-write\", \"read-only\" or \"off\"";

    /// The mode named `name`, as written in the configuration and on the command line.
    pub fn parse(name: &str) -> Option<Mode> {
        match name {
            "workspace-write" => Some(Mode::WorkspaceWrite),
            "read-only" => Some(Mode::ReadOnly),
            "off" => Some(Mode::Off),
            _ => None,
        }
    }

    /// The mode's name, as [`Mode::parse`] reads it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::WorkspaceWrite => "workspace-write",
            Mode::ReadOnly => "read-only",
            Mode::Off => "off",
        }
    }
}

/// The sandbox as the person configured it. The default is what the issue asks for:
/// `workspace-write`, network allowed, no extra writable places.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// What commands may write.
    pub mode: Mode,
    /// Whether commands may connect and listen over TCP (false blocks both, on Landlock ABI 4
    /// and later).
    pub network: bool,
    /// More places commands may write in `workspace-write` mode (`~` is the home directory, a
    /// relative path is the workspace's); ignored in `read-only`.
    pub writable: Vec<PathBuf>,
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox::new()
    }
}

impl Sandbox {
    /// The default sandbox: workspace-write, network allowed.
    pub fn new() -> Self {
        Sandbox {
            mode: Mode::WorkspaceWrite,
            network: true,
            writable: Vec::new(),
        }
    }

    /// No sandbox at all.
    pub fn off() -> Self {
        Sandbox {
            mode: Mode::Off,
            ..Sandbox::new()
        }
    }

    /// The rules for a command run in the workspace `root`, or None when nothing would be
    /// enforced (mode `off`, or no Landlock here).
    pub fn policy(&self, root: &Path) -> Option<Policy> {
        match support() {
            Support::Abi(_) => self.policy_with(root, &temp_dirs()),
            Support::NotEnabled | Support::NotInKernel | Support::NotLinux => None,
        }
    }

    /// [`Sandbox::policy`] with the temp directories given (the tests leave `/tmp` out, where
    /// their directories are).
    pub(crate) fn policy_with(&self, root: &Path, temp: &[PathBuf]) -> Option<Policy> {
        let mut writable: Vec<PathBuf> = match self.mode {
            Mode::Off => return None,
            Mode::WorkspaceWrite => std::iter::once(root.to_path_buf())
                .chain(temp.iter().cloned())
                .chain(self.writable.iter().map(|path| expand(path, root)))
                .collect(),
            Mode::ReadOnly => temp.to_vec(),
        };
        writable.push(PathBuf::from(DEV_NULL));
        let mut seen = std::collections::HashSet::new();
        writable.retain(|path| seen.insert(path.clone()));
        Some(Policy {
            writable,
            block_network: !self.network,
        })
    }

    /// What is enforced of this sandbox here, for the workspace `root`.
    pub fn report(&self, root: &Path) -> Report {
        Report::new(self, support(), root, &temp_dirs())
    }
}

/// The one file every mode may write: where output is thrown away.
const DEV_NULL: &str = "/dev/null";

/// A sandbox resolved for one workspace: what [`confine`] turns into Landlock rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The directories (and files) a command may write, with what is below them; it may read
    /// and run everything.
    pub writable: Vec<PathBuf>,
    /// Whether TCP connect and bind are refused.
    pub block_network: bool,
}

/// `~` and `~/...` under `$HOME`; a relative path under the workspace `root`.
fn expand(path: &Path, root: &Path) -> PathBuf {
    let home = || std::env::var_os("HOME").filter(|home| !home.is_empty());
    if let Ok(rest) = path.strip_prefix("~") {
        if let Some(home) = home() {
            return PathBuf::from(home).join(rest);
        }
        return path.to_path_buf();
    }
    if path.is_relative() {
        return root.join(path);
    }
    path.to_path_buf()
}

/// The temp directory: `$TMPDIR`, else `/tmp` (as [`std::env::temp_dir`] reads it). Only
/// that one: with `TMPDIR` set elsewhere, `/tmp` is not the commands' to write (it may hold the
/// workspace's neighbours, a checkout in /tmp among them).
fn temp_dirs() -> Vec<PathBuf> {
    vec![std::env::temp_dir()]
}

/// Whether the kernel has Landlock, and which ABI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Landlock with this ABI version (1 or more).
    Abi(u32),
    /// The kernel has Landlock but it was not enabled at boot (it is not in `lsm=`).
    NotEnabled,
    /// The kernel has no Landlock (before Linux 5.13, or built without it).
    NotInKernel,
    /// Not Linux: Landlock is Linux's.
    NotLinux,
}

impl Support {
    /// The ABI version, 0 without Landlock.
    pub fn abi(self) -> u32 {
        match self {
            Support::Abi(abi) => abi,
            Support::NotEnabled | Support::NotInKernel | Support::NotLinux => 0,
        }
    }

    /// Why there is no sandbox, when there is none.
    fn missing(self) -> Option<&'static str> {
        match self {
            Support::Abi(_) => None,
            Support::NotEnabled => Some(
                "Landlock is built into this kernel but not enabled (add landlock to the lsm= boot parameter)",
            ),
            Support::NotInKernel => Some("this kernel has no Landlock (it needs Linux 5.13 or later)"),
            Support::NotLinux => Some("Landlock is Linux's, and this system is not Linux"),
        }
    }
}

/// The running kernel's Landlock support, asked once.
pub fn support() -> Support {
    static SUPPORT: std::sync::OnceLock<Support> = std::sync::OnceLock::new();
    *SUPPORT.get_or_init(|| {
        #[cfg(feature = "test-support")]
        if std::env::var_os("AGENT_NVIM_TEST_NO_LANDLOCK").is_some() {
            // The tests' way to see what a machine without Landlock shows; never in a build
            // without the feature.
            return Support::NotInKernel;
        }
        probe()
    })
}

/// Asks the kernel for its Landlock ABI version. The crate keeps its own probe private (its
/// rulesets adapt to the kernel by themselves); this one is for telling the person which
/// version they have and what it cannot enforce, and it needs the kernel's own answer.
#[cfg(target_os = "linux")]
fn probe() -> Support {
    /// `LANDLOCK_CREATE_RULESET_VERSION`: return the ABI version instead of a ruleset.
    const VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute, size 0 and this flag the call reads and writes no memory;
    // it returns the version or -1 with errno.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            VERSION,
        )
    };
    if version >= 1 {
        return Support::Abi(u32::try_from(version).unwrap_or(u32::MAX));
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EOPNOTSUPP) => Support::NotEnabled,
        _ => Support::NotInKernel,
    }
}

#[cfg(not(target_os = "linux"))]
fn probe() -> Support {
    Support::NotLinux
}

/// What is enforced of a [`Sandbox`] on this machine: what `:checkhealth agent`, the `started`
/// event, `agent-nvim sandbox` and the system prompt say. Serialized as `agent-nvim sandbox
/// --json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The Landlock ABI version; 0 without Landlock.
    pub abi: u32,
    /// The mode configured.
    pub configured: Mode,
    /// The mode in force: `off` when there is no Landlock.
    pub mode: Mode,
    /// Whether TCP connect and bind are refused.
    pub network_blocked: bool,
    /// Where commands may write (the configured places, resolved; those that do not exist are
    /// left out and named in `warnings`). Empty when the sandbox is off.
    pub writable: Vec<PathBuf>,
    /// One line: `workspace-write, network allowed (Landlock ABI 7)`.
    pub summary: String,
    /// What the person should know: no Landlock, a rule the kernel cannot enforce, a writable
    /// place that does not exist. Each starts with `agent: `.
    pub warnings: Vec<String>,
    /// Whether everything configured is enforced: the sandbox is on and the kernel can do all
    /// it was asked (the network rule, truncation). `auto_allow_sandboxed` needs this.
    pub whole: bool,
}

impl Report {
    fn new(sandbox: &Sandbox, support: Support, root: &Path, temp: &[PathBuf]) -> Report {
        let abi = support.abi();
        let mode = if support.missing().is_some() {
            Mode::Off
        } else {
            sandbox.mode
        };
        let on = mode != Mode::Off;
        let network_blocked = on && !sandbox.network && abi >= 4;
        let mut warnings = Vec::new();
        match support.missing() {
            Some(why) if sandbox.mode != Mode::Off => warnings.push(format!(
                "agent: the sandbox is off: {why}; commands run without it. Set sandbox.mode to \"off\" (--sandbox off) to say you know (see :help agent-sandbox)"
            )),
            Some(_) | None => {}
        }
        if on && !sandbox.network && abi < 4 {
            warnings.push(format!(
                "agent: network = false is not enforced: Landlock ABI {abi} has no network rules (ABI 4, Linux 6.7, has them); commands can still connect and listen"
            ));
        }
        if sandbox.mode == Mode::Off && !sandbox.network {
            warnings.push(
                "agent: network = false does nothing while sandbox.mode is \"off\"".to_string(),
            );
        }
        if on && abi < 3 {
            warnings.push(format!(
                "agent: Landlock ABI {abi} cannot stop a command from truncating files it may not write (ABI 3, Linux 6.2, can)"
            ));
        }
        if on && abi < 2 {
            warnings.push(
                "agent: Landlock ABI 1 refuses every move or link of a file into another directory, inside the workspace too (ABI 2, Linux 5.19, allows them)".to_string(),
            );
        }
        let mut writable = Vec::new();
        if on {
            if let Some(policy) = sandbox.policy_with(root, temp) {
                writable = policy.writable.into_iter().filter(|p| p.exists()).collect();
            }
            if sandbox.mode == Mode::WorkspaceWrite {
                for path in sandbox.writable.iter().map(|path| expand(path, root)) {
                    if !path.exists() {
                        warnings.push(format!(
                            "agent: {} (sandbox.writable) does not exist, so commands cannot write there; create it first",
                            path.display()
                        ));
                    }
                }
            }
        }
        let network = if network_blocked {
            "network blocked"
        } else {
            "network allowed"
        };
        let summary = match (mode, support.missing()) {
            (Mode::Off, Some(why)) => format!("off: {why}"),
            (Mode::Off, None) => format!("off (sandbox.mode = \"off\"; Landlock ABI {abi})"),
            (Mode::WorkspaceWrite | Mode::ReadOnly, _) => {
                format!("{}, {network} (Landlock ABI {abi})", mode.name())
            }
        };
        Report {
            abi,
            configured: sandbox.mode,
            mode,
            network_blocked,
            writable,
            summary,
            warnings,
            whole: on && (sandbox.network || network_blocked) && abi >= 3,
        }
    }

    /// Whether the sandbox is in force.
    pub fn is_on(&self) -> bool {
        self.mode != Mode::Off
    }

    /// The system prompt's paragraph about the sandbox, when it is on: what it blocks, and that
    /// a `Permission denied` outside the writable places is for the user to hear about.
    pub fn prompt_note(&self) -> Option<String> {
        if !self.is_on() {
            return None;
        }
        let places = self
            .writable
            .iter()
            .map(|path| path.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let writes = match self.mode {
            Mode::ReadOnly => format!(
                "it is read-only: a command can read any file but write only to {places} (not in the workspace)"
            ),
            Mode::WorkspaceWrite | Mode::Off => {
                format!("a command can read any file but write only in {places}")
            }
        };
        let network = if self.network_blocked {
            " TCP connections and listening are blocked too."
        } else {
            ""
        };
        Some(format!(
            "- run_bash commands run in a sandbox (Landlock): {writes}.{network} A `Permission denied` or \
`Operation not permitted` for a write outside those places{net} comes from the sandbox: do not try to \
work around it (another path, another tool, sudo); tell the user what was blocked, so they can allow \
it (sandbox.writable) or run it themselves.",
            net = if self.network_blocked {
                ", or for a connection,"
            } else {
                ""
            },
        ))
    }
}

/// Why a command could not be confined; the command is not started.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the sandbox: {0}")]
pub struct SandboxError(String);

/// Makes `command` start under `policy`: the Landlock ruleset is built now, in this process, and
/// applied in the child between fork and exec, together with `no_new_privs`.
///
/// Why this is safe in a child forked from a threaded process: the closure given to `pre_exec`
/// only calls the crate's `RulesetCreated::restrict_self`, which makes two system calls
/// (`prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self` on the ruleset's descriptor), then
/// closes that descriptor; it allocates nothing (its status and its errors are plain values, the
/// errno read with `io::Error::last_os_error`), takes no lock and touches no state another thread
/// could hold. Everything that allocates or opens files (each path's `O_PATH` handle, the
/// ruleset, its rules) happens here, before the fork. The ruleset's descriptor is close-on-exec
/// (the kernel makes it so), so no other child inherits it, and the parent's copy is closed when
/// `command` is dropped after the spawn.
#[cfg(target_os = "linux")]
pub fn confine(command: &mut tokio::process::Command, policy: &Policy) -> Result<(), SandboxError> {
    let ruleset = rules::build(policy).map_err(|err| SandboxError(err.to_string()))?;
    let mut ruleset = Some(ruleset);
    // SAFETY: see the function's doc: the closure makes two async-signal-safe system calls and
    // allocates nothing.
    unsafe {
        command.pre_exec(move || match ruleset.take() {
            Some(ruleset) => rules::restrict(ruleset),
            // Only one spawn per command: a second fork would run unconfined, so it fails.
            None => Err(std::io::Error::from_raw_os_error(libc::EBUSY)),
        });
    }
    Ok(())
}

/// Without Landlock there is no policy to apply ([`Sandbox::policy`] is None off Linux).
#[cfg(not(target_os = "linux"))]
pub fn confine(
    _command: &mut tokio::process::Command,
    _policy: &Policy,
) -> Result<(), SandboxError> {
    Err(SandboxError("Landlock is Linux's".into()))
}

#[cfg(target_os = "linux")]
mod rules {
    //! The Landlock ruleset of a [`Policy`], and its one step in the child.

    use landlock::{
        path_beneath_rules, Access, AccessFs, AccessNet, RulesetAttr, RulesetCreated,
        RulesetCreatedAttr, RulesetError, RulesetStatus, ABI,
    };

    use super::Policy;

    /// The file-system rights the ruleset handles: those of ABI 3, reading (read, list, run)
    /// and every kind of write up to truncation. A kernel with an older ABI enforces what it
    /// knows (the crate's best effort; [`super::Report`] names what is left out). Device ioctls
    /// (ABI 5) are not handled: a write needs a descriptor opened for writing, which these
    /// rights already govern.
    const FS: ABI = ABI::V3;
    /// The network rights handled when TCP is blocked: connect and bind (ABI 4).
    const NET: ABI = ABI::V4;

    /// Every right handled, reading granted beneath `/`, writing beneath the policy's places.
    pub(super) fn build(policy: &Policy) -> Result<RulesetCreated, RulesetError> {
        let mut ruleset = landlock::Ruleset::default().handle_access(AccessFs::from_all(FS))?;
        if policy.block_network {
            // No rule names a port, so every TCP connect and bind is refused.
            ruleset = ruleset.handle_access(AccessNet::from_all(NET))?;
        }
        ruleset
            .create()?
            .add_rules(path_beneath_rules(["/"], AccessFs::from_read(FS)))?
            // A path that cannot be opened is left out (it does not exist: nothing to write);
            // a file gets the rights a file can have.
            .add_rules(path_beneath_rules(&policy.writable, AccessFs::from_all(FS)))
    }

    /// Runs in the child: `no_new_privs`, then the ruleset. A ruleset the kernel would not
    /// enforce at all fails the spawn rather than run the command unconfined.
    pub(super) fn restrict(ruleset: RulesetCreated) -> std::io::Result<()> {
        match ruleset.restrict_self() {
            Ok(status) if status.ruleset != RulesetStatus::NotEnforced => Ok(()),
            Ok(_) => Err(std::io::Error::from_raw_os_error(libc::ENOSYS)),
            Err(err) => Err(std::io::Error::from_raw_os_error(errno(&err))),
        }
    }

    /// The errno inside a crate error (its source chain ends in the system call's), without
    /// allocating.
    fn errno(err: &RulesetError) -> i32 {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
        while let Some(current) = source {
            if let Some(code) = current
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::raw_os_error)
            {
                return code;
            }
            source = current.source();
        }
        libc::EPERM
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]
mod tests;
