//! The command sandbox: what a run_bash command, or an external agent
//! started with `sandbox = true`, may write and connect to. On Linux it is two layers applied in
//! the child before exec: Landlock (the Landlock project's own `landlock` crate) for files, TCP
//! ports, abstract unix sockets and signals, and a seccomp filter (`seccompiler`, rust-vmm's
//! BPF compiler) for what Landlock cannot see: every unix-domain socket (the editor's server
//! socket, tmux, ssh-agent, D-Bus, Docker, X11, wherever their paths are), every socket at all
//! with `network = false` (UDP included), io_uring (which makes sockets without the `socket`
//! call), taking another process's descriptors, and typing into the terminal (`TIOCSTI`).
//! Elsewhere, or on a kernel without Landlock, it is off, and [`Report::warnings`] says so
//! (never an error); a kernel without seccomp filters gets Landlock alone, said likewise.
//!
//! Three steps, each in one place:
//! - [`Sandbox`] is what the person configured (`sandbox = { mode, network, writable }`,
//!   `--sandbox`, `--no-network`, `--writable`);
//! - [`Sandbox::policy`] resolves it for one workspace into a [`Policy`]: the places a command may
//!   write, whether the network is blocked and whether the seccomp filter applies, or None when
//!   nothing is enforced (mode `off`, no Landlock);
//! - [`confine`] builds the Landlock ruleset and the seccomp programs in the parent (the path
//!   handles opened, the ruleset created and filled, the BPF compiled) and leaves the child only
//!   `prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self` and `seccomp(SET_MODE_FILTER)`, run
//!   between fork and exec (see [`confine`] for why that is safe).
//!
//! [`Report`] is what the person and the model are told: the ABI, the mode in force, what is
//! and is not enforced (`:checkhealth agent`, the `started` event, `agent-nvim sandbox`, the
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

/// The sandbox as the person configured it. The default is `workspace-write`, network
/// allowed, no extra writable places.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// What commands may write.
    pub mode: Mode,
    /// Whether commands may use the network (false refuses every socket but a socketpair:
    /// TCP and UDP, IPv4 and IPv6; with seccomp, else TCP alone on Landlock ABI 4 and later).
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
        self.policy_on(root, temp, seccomp())
    }

    /// [`Sandbox::policy_with`] on a kernel that has seccomp filters (`filter`) or not.
    fn policy_on(&self, root: &Path, temp: &[PathBuf], filter: bool) -> Option<Policy> {
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
            filter,
        })
    }

    /// What is enforced of this sandbox here, for the workspace `root`.
    pub fn report(&self, root: &Path) -> Report {
        Report::new(self, support(), seccomp(), root, &temp_dirs())
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
    /// Whether the network is refused: every socket but a socketpair (with [`Policy::filter`]),
    /// and TCP connect and bind (Landlock ABI 4).
    pub block_network: bool,
    /// Whether the seccomp filter applies (the kernel has seccomp filters): no unix-domain
    /// socket, no io_uring, no other process's descriptors, no `TIOCSTI`.
    pub filter: bool,
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

/// Whether the kernel has seccomp filters that can return an errno, for an architecture the
/// filter is compiled for; asked once.
pub fn seccomp() -> bool {
    static SECCOMP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SECCOMP.get_or_init(|| {
        #[cfg(feature = "test-support")]
        if std::env::var_os("AGENT_NVIM_TEST_NO_SECCOMP").is_some() {
            // The tests' way to see a kernel without seccomp filters; never in a build without
            // the feature.
            return false;
        }
        filter::available()
    })
}

/// What is enforced of a [`Sandbox`] on this machine: what `:checkhealth agent`, the `started`
/// event, `agent-nvim sandbox` and the system prompt say. Serialized as `agent-nvim sandbox
/// --json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The Landlock ABI version; 0 without Landlock.
    pub abi: u32,
    /// Whether the kernel has seccomp filters (the second layer: sockets, io_uring, TIOCSTI).
    pub seccomp: bool,
    /// The mode configured.
    pub configured: Mode,
    /// The mode in force: `off` when there is no Landlock.
    pub mode: Mode,
    /// Whether the network is refused whole: every IP socket, TCP and UDP (needs seccomp).
    pub network_blocked: bool,
    /// Whether commands are kept from every unix-domain socket, abstract ones included (the
    /// editor's, tmux's, ssh-agent's, D-Bus, Docker, X11; needs seccomp).
    pub sockets_blocked: bool,
    /// Where commands may write (the configured places, resolved; those that do not exist are
    /// left out and named in `warnings`). Empty when the sandbox is off.
    pub writable: Vec<PathBuf>,
    /// One line: `workspace-write, network allowed, local sockets blocked (Landlock ABI 7,
    /// seccomp)`.
    pub summary: String,
    /// What a sandboxed command cannot do here, one short phrase each.
    pub enforced: Vec<String>,
    /// What it still can, that a person might think it cannot, one short phrase each.
    pub not_enforced: Vec<String>,
    /// Why the sandbox is off though it was asked for (the kernel has no Landlock): what the
    /// person must be told first, with how to say they know (a front end's words).
    pub off: Option<String>,
    /// What else the person should know: a rule the kernel cannot enforce, a writable place
    /// that does not exist. A front end adds its own prefix.
    pub warnings: Vec<String>,
    /// Whether everything configured is enforced: the sandbox is on and the kernel can do all
    /// it was asked (local sockets, the network rule, truncation). `auto_allow_sandboxed` needs
    /// this.
    pub whole: bool,
}

impl Report {
    fn new(
        sandbox: &Sandbox,
        support: Support,
        seccomp: bool,
        root: &Path,
        temp: &[PathBuf],
    ) -> Report {
        let abi = support.abi();
        let mode = if support.missing().is_some() {
            Mode::Off
        } else {
            sandbox.mode
        };
        let on = mode != Mode::Off;
        let filter = on && seccomp;
        let network_blocked = filter && !sandbox.network;
        let tcp_blocked = on && !sandbox.network && abi >= 4;
        let mut warnings = Vec::new();
        let off = support
            .missing()
            .filter(|_| sandbox.mode != Mode::Off)
            .map(str::to_string);
        if on && !seccomp {
            warnings.push(
                "this kernel has no seccomp filters, so the sandbox cannot keep commands from local sockets (Neovim's, tmux's, ssh-agent's, D-Bus): a command could drive them, so auto_allow_sandboxed asks about each command".to_string(),
            );
        }
        if on && !sandbox.network && !seccomp {
            warnings.push(if tcp_blocked {
                "network = false blocks TCP only: without seccomp filters, UDP and other sockets still work".to_string()
            } else {
                format!("network = false is not enforced: Landlock ABI {abi} has no network rules (ABI 4, Linux 6.7, has them) and there are no seccomp filters; commands can still connect and listen")
            });
        }
        if sandbox.mode == Mode::Off && !sandbox.network {
            warnings.push("network = false does nothing while sandbox.mode is \"off\"".to_string());
        }
        if on && abi < 3 {
            warnings.push(format!(
                "Landlock ABI {abi} cannot stop a command from truncating files it may not write (ABI 3, Linux 6.2, can)"
            ));
        }
        if on && abi < 2 {
            warnings.push(
                "Landlock ABI 1 refuses every move or link of a file into another directory, inside the workspace too (ABI 2, Linux 5.19, allows them)".to_string(),
            );
        }
        let mut writable = Vec::new();
        if on {
            if let Some(policy) = sandbox.policy_on(root, temp, seccomp) {
                writable = policy.writable.into_iter().filter(|p| p.exists()).collect();
            }
            if sandbox.mode == Mode::WorkspaceWrite {
                for path in sandbox.writable.iter().map(|path| expand(path, root)) {
                    if !path.exists() {
                        warnings.push(format!(
                            "{} (sandbox.writable) does not exist, so commands cannot write there; create it first",
                            path.display()
                        ));
                    }
                }
            }
        }
        let (enforced, not_enforced) = if on {
            Self::phrases(sandbox, abi, filter, tcp_blocked)
        } else {
            (
                Vec::new(),
                vec!["anything: commands run as you do".to_string()],
            )
        };
        let network = if network_blocked {
            "network blocked"
        } else if tcp_blocked {
            "TCP blocked"
        } else {
            "network allowed"
        };
        let layers = if filter {
            format!("Landlock ABI {abi}, seccomp")
        } else {
            format!("Landlock ABI {abi}")
        };
        let summary = match (mode, support.missing()) {
            (Mode::Off, Some(why)) => format!("off: {why}"),
            (Mode::Off, None) => format!("off (sandbox.mode = \"off\"; Landlock ABI {abi})"),
            (Mode::WorkspaceWrite | Mode::ReadOnly, _) if filter => {
                format!(
                    "{}, {network}, local sockets blocked ({layers})",
                    mode.name()
                )
            }
            (Mode::WorkspaceWrite | Mode::ReadOnly, _) => {
                format!("{}, {network}, local sockets open ({layers})", mode.name())
            }
        };
        Report {
            abi,
            seccomp,
            configured: sandbox.mode,
            mode,
            network_blocked,
            sockets_blocked: filter,
            writable,
            summary,
            enforced,
            not_enforced,
            off,
            warnings,
            whole: filter && (sandbox.network || network_blocked) && abi >= 3,
        }
    }

    /// What is and is not enforced by a sandbox in force, in words a person reads.
    fn phrases(
        sandbox: &Sandbox,
        abi: u32,
        filter: bool,
        tcp_blocked: bool,
    ) -> (Vec<String>, Vec<String>) {
        let mut enforced = vec![match sandbox.mode {
            Mode::ReadOnly => "writing anywhere but the temp directory".to_string(),
            Mode::WorkspaceWrite | Mode::Off => {
                "writing outside the workspace, the temp directory and sandbox.writable".to_string()
            }
        }];
        let mut not_enforced = vec![
            "reading files: every file you can read, a command can".to_string(),
            "the mode, owner, times and extended attributes of files outside that you own (Landlock has no rule for them; their contents are safe)".to_string(),
        ];
        if filter {
            enforced.push(
                "unix sockets, abstract ones too (Neovim's server, tmux, ssh-agent, D-Bus, Docker, X11, Wayland)".to_string(),
            );
            enforced.push("typing into the terminal (TIOCSTI) and io_uring".to_string());
            enforced.push(
                "System V shared memory, queues and semaphores, and the kernel's keyrings"
                    .to_string(),
            );
        } else {
            not_enforced.push("unix sockets (no seccomp filters here)".to_string());
        }
        enforced.push(
            "privileges: a command keeps no capability, not even one started by root".to_string(),
        );
        if abi >= 6 {
            enforced.push("signals to processes outside the sandbox".to_string());
        } else {
            not_enforced.push(format!(
                "signals to your other processes (Landlock ABI {abi}; ABI 6, Linux 6.12, scopes them)"
            ));
        }
        match (sandbox.network, filter, tcp_blocked) {
            (true, _, _) => not_enforced.push(
                "the network: TCP and UDP, loopback services included (set sandbox.network = false to block it)".to_string(),
            ),
            (false, true, _) => enforced.push("every IP socket: TCP and UDP, IPv4 and IPv6".to_string()),
            (false, false, true) => {
                enforced.push("TCP connect and listen".to_string());
                not_enforced.push("UDP and other sockets (no seccomp filters here)".to_string());
            }
            (false, false, false) => not_enforced.push(format!(
                "the network (Landlock ABI {abi} has no network rules and there are no seccomp filters)"
            )),
        }
        (enforced, not_enforced)
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
        let network = match (self.network_blocked, self.sockets_blocked) {
            (true, _) => " Every network socket (TCP and UDP) and every unix socket is refused.",
            (false, true) => {
                " Unix sockets are refused (the editor's, tmux's, ssh-agent's and other local services')."
            }
            (false, false) => "",
        };
        Some(format!(
            "- run_bash commands run in a sandbox (Landlock): {writes}.{network} A `Permission denied` or \
`Operation not permitted` for a write outside those places{net} comes from the sandbox: do not try to \
work around it (another path, another tool, sudo); tell the user what was blocked, so they can allow \
it (sandbox.writable) or run it themselves.",
            net = if self.network_blocked || self.sockets_blocked {
                ", or for a socket,"
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

/// Makes `command` start under `policy`: the Landlock ruleset and the seccomp programs are built
/// now, in this process, and applied in the child between fork and exec, together with
/// `no_new_privs`.
///
/// Why this is safe in a child forked from a threaded process: the closure given to `pre_exec`
/// only calls the crate's `RulesetCreated::restrict_self`, which makes two system calls
/// (`prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self` on the ruleset's descriptor), then
/// closes that descriptor, and then `seccompiler::apply_filter` for each program, which makes
/// `prctl(PR_SET_NO_NEW_PRIVS)` and `seccomp(SECCOMP_SET_MODE_FILTER)` with a `sock_fprog` on
/// its stack pointing into the program compiled here. None of them allocates (their statuses
/// and errors are plain values, the errno read with `io::Error::last_os_error`), takes a lock or
/// touches state another thread could hold. Everything that allocates or opens files (each
/// path's `O_PATH` handle, the ruleset, its rules, the BPF) happens here, before the fork. The
/// ruleset's descriptor is close-on-exec (the kernel makes it so), so no other child inherits
/// it, and the parent's copy is closed when `command` is dropped after the spawn. Landlock goes
/// first, so the filter (which refuses no call Landlock's step makes) cannot stand in its way.
#[cfg(target_os = "linux")]
pub fn confine(command: &mut tokio::process::Command, policy: &Policy) -> Result<(), SandboxError> {
    let ruleset = rules::build(policy).map_err(|err| SandboxError(err.to_string()))?;
    let programs = if policy.filter {
        Some(filter::build(policy.block_network).map_err(|err| SandboxError(err.to_string()))?)
    } else {
        None
    };
    let mut ruleset = Some(ruleset);
    // SAFETY: see the function's doc: the closure makes async-signal-safe system calls and
    // allocates nothing.
    unsafe {
        command.pre_exec(move || {
            match ruleset.take() {
                Some(ruleset) => rules::restrict(ruleset)?,
                // Only one spawn per command: a second fork would run unconfined, so it fails.
                None => return Err(std::io::Error::from_raw_os_error(libc::EBUSY)),
            }
            if let Some(programs) = &programs {
                filter::apply(programs)?;
            }
            privileges::drop_all()
        });
    }
    Ok(())
}

#[cfg(target_os = "linux")]
mod privileges {
    //! A sandboxed command keeps no capability: root's would reach around Landlock and the
    //! filter (loading a kernel module, reading any process's memory and environment, the
    //! backend's key among them). Runs in the child, last; allocates nothing.

    /// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit sets of each kind.
    const VERSION_3: u32 = 0x2008_0522;

    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }

    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }

    /// Empties the bounding set (so no exec gives a capability back, root's included), the
    /// ambient set, and the effective, permitted and inheritable sets. A process without
    /// CAP_SETPCAP (not root) cannot touch its bounding set and has nothing to lose there:
    /// `no_new_privs` keeps it from gaining any.
    pub(super) fn drop_all() -> std::io::Result<()> {
        for cap in 0..64 {
            // SAFETY: a prctl with plain integer arguments.
            if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
                // EINVAL: past the kernel's last capability; EPERM: not ours to drop.
                break;
            }
        }
        // SAFETY: as above; EINVAL on a kernel without ambient capabilities is nothing to lose.
        unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            );
        }
        let header = Header {
            version: VERSION_3,
            pid: 0,
        };
        let data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        // SAFETY: capset reads the header and two data structs, which live across the call.
        let done = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
        if done != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
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
        RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, ABI,
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

    /// Every right handled, reading granted beneath `/`, writing beneath the policy's places;
    /// abstract unix sockets and signals scoped to the sandbox (ABI 6: a command cannot
    /// connect to an abstract socket made outside it, nor signal a process outside it; on an
    /// older kernel the crate leaves the scopes out and the seccomp filter still refuses every
    /// unix socket).
    pub(super) fn build(policy: &Policy) -> Result<RulesetCreated, RulesetError> {
        let mut ruleset = landlock::Ruleset::default()
            .handle_access(AccessFs::from_all(FS))?
            .scope(Scope::AbstractUnixSocket | Scope::Signal)?;
        if policy.block_network {
            // No rule names a port, so every TCP connect and bind is refused.
            ruleset = ruleset.handle_access(AccessNet::from_all(NET))?;
        }
        ruleset
            .create()?
            .add_rules(path_beneath_rules(["/"], AccessFs::from_read(FS)))?
            // A path that cannot be opened is left out (it does not exist: nothing to write);
            // a file gets the rights a file can have. Device nodes are made nowhere: a
            // command has no business with a copy of a disk's.
            .add_rules(path_beneath_rules(
                &policy.writable,
                AccessFs::from_all(FS) & !(AccessFs::MakeChar | AccessFs::MakeBlock),
            ))
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

#[cfg(target_os = "linux")]
mod filter {
    //! The seccomp layer: what Landlock cannot see, refused by system call and argument.
    //!
    //! - `socket(AF_UNIX, ..)`: no unix-domain socket, named or abstract, so nothing outside
    //!   can be reached through one (Landlock ABI 7 has no rule for connecting to a socket's
    //!   path). A `socketpair` stays allowed: it is connected only to itself. With the network
    //!   blocked, `socket` of every family is refused (UDP too, which Landlock does not see).
    //!   `EACCES`, as Landlock answers a refused connect.
    //! - `socketpair` of datagrams (`SOCK_DGRAM`, and `SOCK_RAW`, which a unix socket takes for
    //!   one): such a socket can `sendto` any named socket, or be connected to one, and so
    //!   reaches the person's datagram services (`/dev/log`, journald). Stream and seqpacket
    //!   pairs stay allowed: they are connected to each other for good.
    //! - io_uring's three calls: its `SOCKET` and `CONNECT` operations make and connect sockets
    //!   without the calls above. `pidfd_getfd`: another process's descriptors (a socket
    //!   among them). `ioctl(TIOCSTI)` and `ioctl(TIOCLINUX)`: typing into the terminal the
    //!   editor reads. System V shared memory, message queues and semaphores, and the kernel's
    //!   keyrings: state shared with processes outside, which Landlock does not scope. `bpf`,
    //!   `userfaultfd` and `perf_event_open`: kernel interfaces no command here needs. `EPERM`;
    //!   programs that use io_uring fall back to plain calls.
    //!
    //! A call of another architecture (32-bit code on a 64-bit kernel) kills the process, as
    //! the compiler's architecture check does; the x32 numbers of these calls on x86_64 are
    //! listed beside the native ones.

    use std::collections::BTreeMap;

    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };

    /// The two programs, applied in order: sockets (`EACCES`), then the rest (`EPERM`).
    pub(super) struct Programs([BpfProgram; 2]);

    /// Why a program could not be made.
    #[derive(Debug, thiserror::Error)]
    pub(super) enum FilterError {
        /// This architecture has no filter here.
        #[error("no seccomp filter for the {0} architecture")]
        Arch(&'static str),
        /// The compiler refused the rules.
        #[error("the seccomp filter cannot be compiled: {0}")]
        Compile(#[from] seccompiler::BackendError),
    }

    /// The architecture this binary runs on, as the compiler names it.
    fn arch() -> Result<TargetArch, FilterError> {
        std::env::consts::ARCH
            .try_into()
            .map_err(|_| FilterError::Arch(std::env::consts::ARCH))
    }

    /// The number of `call` and, on x86_64, its x32 number too.
    fn numbers(call: libc::c_long, x32: Option<libc::c_long>) -> Vec<i64> {
        let mut out = vec![call];
        #[cfg(target_arch = "x86_64")]
        {
            /// The bit x32 system calls carry on x86_64 (same `AUDIT_ARCH`, other numbers).
            const X32: libc::c_long = 0x4000_0000;
            out.push(X32 | x32.unwrap_or(call));
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = x32;
        out
    }

    /// `arg` (32 bits) equal to `value`.
    fn equal(arg: u8, value: u64) -> Result<SeccompRule, FilterError> {
        let condition =
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)?;
        Ok(SeccompRule::new(vec![condition])?)
    }

    /// Compiles the programs for `block_network`.
    pub(super) fn build(block_network: bool) -> Result<Programs, FilterError> {
        let arch = arch()?;
        let mut sockets = BTreeMap::new();
        let socket_rules = if block_network {
            Vec::new() // every family
        } else {
            vec![equal(0, libc::AF_UNIX as u64)?]
        };
        for number in numbers(libc::SYS_socket, None) {
            sockets.insert(number, socket_rules.clone());
        }
        // The type's low bits, whatever flags (SOCK_CLOEXEC, SOCK_NONBLOCK) ride above them.
        let datagrams = [libc::SOCK_DGRAM, libc::SOCK_RAW]
            .into_iter()
            .map(|kind| {
                let condition = SeccompCondition::new(
                    1,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::MaskedEq(0xf),
                    kind as u64,
                )?;
                Ok(SeccompRule::new(vec![condition])?)
            })
            .collect::<Result<Vec<_>, FilterError>>()?;
        for number in numbers(libc::SYS_socketpair, None) {
            sockets.insert(number, datagrams.clone());
        }
        let mut rest = BTreeMap::new();
        for (call, x32) in [
            (libc::SYS_io_uring_setup, None),
            (libc::SYS_io_uring_enter, None),
            (libc::SYS_io_uring_register, None),
            (libc::SYS_pidfd_getfd, None),
            (libc::SYS_shmget, None),
            (libc::SYS_shmat, None),
            (libc::SYS_shmctl, None),
            (libc::SYS_msgget, None),
            (libc::SYS_msgsnd, None),
            (libc::SYS_msgrcv, None),
            (libc::SYS_msgctl, None),
            (libc::SYS_semget, None),
            (libc::SYS_semop, None),
            (libc::SYS_semtimedop, None),
            (libc::SYS_semctl, None),
            (libc::SYS_add_key, None),
            (libc::SYS_keyctl, None),
            (libc::SYS_request_key, None),
            (libc::SYS_bpf, None),
            (libc::SYS_userfaultfd, None),
            (libc::SYS_perf_event_open, None),
        ] {
            for number in numbers(call, x32) {
                rest.insert(number, Vec::new());
            }
        }
        // The request's type differs by target (an unsigned long here, an int on musl).
        #[allow(clippy::unnecessary_cast)]
        let typing = vec![
            equal(1, libc::TIOCSTI as u64)?,
            equal(1, libc::TIOCLINUX as u64)?,
        ];
        // x32's ioctl is its own call (514), not the 64-bit one with the bit set.
        for number in numbers(libc::SYS_ioctl, Some(514)) {
            rest.insert(number, typing.clone());
        }
        let compile = |rules, errno: libc::c_int| -> Result<BpfProgram, FilterError> {
            let filter = SeccompFilter::new(
                rules,
                SeccompAction::Allow,
                SeccompAction::Errno(errno as u32),
                arch,
            )?;
            Ok(filter.try_into()?)
        };
        Ok(Programs([
            compile(sockets, libc::EACCES)?,
            compile(rest, libc::EPERM)?,
        ]))
    }

    /// Runs in the child, after Landlock: installs both programs. Allocates nothing.
    pub(super) fn apply(programs: &Programs) -> std::io::Result<()> {
        for program in &programs.0 {
            if let Err(err) = seccompiler::apply_filter(program) {
                return Err(match err {
                    seccompiler::Error::Prctl(io) | seccompiler::Error::Seccomp(io) => io,
                    _ => std::io::Error::from_raw_os_error(libc::EINVAL),
                });
            }
        }
        Ok(())
    }

    /// Whether the kernel takes filters that return an errno, and the programs compile here.
    pub(super) fn available() -> bool {
        /// `SECCOMP_GET_ACTION_AVAIL`: whether an action is known to the kernel.
        const GET_ACTION_AVAIL: libc::c_uint = 2;
        let action: u32 = libc::SECCOMP_RET_ERRNO;
        // SAFETY: the call reads one u32 through the pointer, which lives across the call.
        let known = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                GET_ACTION_AVAIL,
                0,
                &action as *const u32,
            )
        };
        known == 0 && build(true).is_ok()
    }
}

#[cfg(not(target_os = "linux"))]
mod filter {
    //! No seccomp off Linux.
    pub(super) fn available() -> bool {
        false
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]
mod tests;
