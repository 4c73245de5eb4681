//! The sandbox's tests: commands run under Landlock (on this kernel: the tests say so and stop
//! where it has none), and what the report says for each kernel.

use super::*;
use crate::approved::Approved;
use crate::process::{self, CommandOutput, CommandSpec};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Whether this kernel can run the tests that need Landlock; says why not when it cannot.
fn landlock_here() -> bool {
    match support() {
        Support::Abi(_) => true,
        other => {
            eprintln!("skipped: no Landlock here ({other:?})");
            false
        }
    }
}

/// A workspace and a directory beside it, neither under a directory the sandbox lets commands
/// write (the tests give the policy no temp directories, since both are in /tmp).
struct Dirs {
    workspace: tempfile::TempDir,
    outside: tempfile::TempDir,
}

impl Dirs {
    fn new() -> Dirs {
        Dirs {
            workspace: tempfile::tempdir().unwrap(),
            outside: tempfile::tempdir().unwrap(),
        }
    }

    fn outside(&self, name: &str) -> PathBuf {
        self.outside.path().join(name)
    }
}

/// Runs `command` in `dirs`' workspace under `sandbox` (no temp directories granted).
async fn run_in(dirs: &Dirs, sandbox: &Sandbox, command: &str) -> CommandOutput {
    let spec = CommandSpec {
        command: command.to_string(),
        shell: None,
        cwd: dirs.workspace.path().to_path_buf(),
        timeout: Duration::from_secs(30),
        env_remove: Vec::new(),
        sandbox: sandbox.policy_with(dirs.workspace.path(), &[]),
    };
    process::run(&spec, &Approved::for_tests(), &CancellationToken::new())
        .await
        .unwrap()
}

fn workspace_write() -> Sandbox {
    Sandbox::new()
}

#[tokio::test]
async fn a_write_outside_the_workspace_fails_and_leaves_nothing_while_one_inside_works() {
    if !landlock_here() {
        return;
    }
    let dirs = Dirs::new();
    let outside = dirs.outside("f");
    let output = run_in(
        &dirs,
        &workspace_write(),
        &format!("echo x > '{}'", outside.display()),
    )
    .await;
    assert_eq!(output.exit_code, 1, "{}", output.text);
    assert!(output.text.contains("Permission denied"), "{}", output.text);
    assert!(!outside.exists());
    // Neither a new directory nor a removal outside.
    let kept = dirs.outside("kept");
    std::fs::write(&kept, "still here").unwrap();
    let output = run_in(
        &dirs,
        &workspace_write(),
        &format!(
            "mkdir '{dir}/d'; rm -f '{kept}'; mv '{kept}' inside.txt",
            dir = dirs.outside.path().display(),
            kept = kept.display()
        ),
    )
    .await;
    assert_ne!(output.exit_code, 0, "{}", output.text);
    assert!(!dirs.outside("d").exists());
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "still here");

    let output = run_in(
        &dirs,
        &workspace_write(),
        "echo x > inside.txt && cat inside.txt",
    )
    .await;
    assert_eq!(output.text, "x\n\n[exit 0]");
    assert_eq!(
        std::fs::read_to_string(dirs.workspace.path().join("inside.txt")).unwrap(),
        "x\n"
    );
}

#[tokio::test]
async fn a_link_in_the_workspace_to_a_directory_outside_grants_nothing() {
    if !landlock_here() {
        return;
    }
    let dirs = Dirs::new();
    std::os::unix::fs::symlink(dirs.outside.path(), dirs.workspace.path().join("link")).unwrap();
    let output = run_in(&dirs, &workspace_write(), "echo x > link/f").await;
    assert!(
        output.text.contains("link/f: Permission denied"),
        "{}",
        output.text
    );
    assert!(!dirs.outside("f").exists());
}

#[tokio::test]
async fn the_commands_children_are_confined_too_and_reading_is_not() {
    if !landlock_here() {
        return;
    }
    let dirs = Dirs::new();
    std::fs::write(dirs.outside("readable"), "read me").unwrap();
    let outside = dirs.outside("from-a-child");
    let output = run_in(
        &dirs,
        &workspace_write(),
        &format!(
            "cat '{readable}'; echo; bash -c \"echo x > '{outside}'\" & wait $!; echo child-exit $?",
            readable = dirs.outside("readable").display(),
            outside = outside.display()
        ),
    )
    .await;
    assert!(
        output.text.starts_with("read me\nchild-exit 1\n"),
        "{}",
        output.text
    );
    assert!(!outside.exists());
}

#[tokio::test]
async fn a_sandboxed_command_has_no_new_privileges_and_may_write_dev_null_and_its_pipes() {
    if !landlock_here() {
        return;
    }
    let dirs = Dirs::new();
    let output = run_in(
        &dirs,
        &Sandbox {
            mode: Mode::ReadOnly,
            ..Sandbox::new()
        },
        "grep NoNewPrivs /proc/self/status; echo gone > /dev/null; echo err > /dev/stderr",
    )
    .await;
    assert_eq!(output.text, "NoNewPrivs:\t1\n[stderr]\nerr\n\n[exit 0]");
    // Unsandboxed, as before: no_new_privs is not set.
    let output = run_in(&dirs, &Sandbox::off(), "grep NoNewPrivs /proc/self/status").await;
    assert_eq!(output.text, "NoNewPrivs:\t0\n\n[exit 0]");
}

#[tokio::test]
async fn read_only_blocks_writes_in_the_workspace_too() {
    if !landlock_here() {
        return;
    }
    let dirs = Dirs::new();
    std::fs::write(dirs.workspace.path().join("old.txt"), "old").unwrap();
    let read_only = Sandbox {
        mode: Mode::ReadOnly,
        ..Sandbox::new()
    };
    let output = run_in(
        &dirs,
        &read_only,
        "cat old.txt; echo; echo x > new.txt; echo y >> old.txt; rm old.txt; mkdir d",
    )
    .await;
    assert!(
        output.text.starts_with("old\n[stderr]\n"),
        "{}",
        output.text
    );
    assert!(
        output.text.contains("new.txt: Permission denied"),
        "{}",
        output.text
    );
    assert!(output.text.ends_with("[exit 1]"), "{}", output.text);
    assert!(!dirs.workspace.path().join("new.txt").exists());
    assert!(!dirs.workspace.path().join("d").exists());
    assert_eq!(
        std::fs::read_to_string(dirs.workspace.path().join("old.txt")).unwrap(),
        "old"
    );
}

#[tokio::test]
async fn a_writable_place_is_granted_and_nothing_else_is() {
    if !landlock_here() {
        return;
    }
    let dirs = Dirs::new();
    let granted = tempfile::tempdir().unwrap();
    let sandbox = Sandbox {
        writable: vec![granted.path().to_path_buf()],
        ..Sandbox::new()
    };
    let output = run_in(
        &dirs,
        &sandbox,
        &format!(
            "mkdir -p '{granted}/cache' && echo x > '{granted}/cache/f' && echo x > '{outside}'",
            granted = granted.path().display(),
            outside = dirs.outside("f").display()
        ),
    )
    .await;
    assert_eq!(output.exit_code, 1, "{}", output.text);
    assert!(granted.path().join("cache/f").exists());
    assert!(!dirs.outside("f").exists());
}

/// Runs `connect` (bash's `/dev/tcp`) against a listener of the test's own on loopback under
/// `sandbox`; returns the command's exit code and whether the listener saw the connection.
async fn connect_to_loopback(sandbox: &Sandbox) -> (i32, bool, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let dirs = Dirs::new();
    let output = run_in(
        &dirs,
        sandbox,
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"),
    )
    .await;
    // The command has ended: a connection it made is queued on the listener by now.
    let accepted = listener.accept().is_ok();
    (output.exit_code, accepted, output.text)
}

#[tokio::test]
async fn network_false_refuses_a_connection_to_a_loopback_port_and_network_true_allows_it() {
    if !landlock_here() {
        return;
    }
    if support().abi() < 4 {
        eprintln!(
            "skipped: Landlock ABI {} has no network rules",
            support().abi()
        );
        return;
    }
    let blocked = Sandbox {
        network: false,
        ..Sandbox::new()
    };
    let (code, accepted, text) = connect_to_loopback(&blocked).await;
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("Permission denied"), "{text}");
    assert!(!accepted, "the listener saw a connection: {text}");

    let (code, accepted, text) = connect_to_loopback(&Sandbox::new()).await;
    assert_eq!((code, accepted), (0, true), "{text}");
    assert!(text.starts_with("connected\n"), "{text}");
}

/// Whether this kernel can run the tests that need the seccomp layer too.
fn filter_here() -> bool {
    landlock_here()
        && (seccomp() || {
            eprintln!("skipped: no seccomp filters here");
            false
        })
}

/// A Python program run as a command (`python3 -c`, the program shell-quoted).
fn python(program: &str) -> String {
    format!("python3 -c '{}'", program.replace('\'', "'\\''"))
}

#[tokio::test]
async fn a_unix_socket_outside_is_out_of_reach_named_or_abstract_and_a_socketpair_works() {
    if !filter_here() {
        return;
    }
    let dirs = Dirs::new();
    // A service of the person's outside the workspace: a named socket and an abstract one.
    let path = dirs.outside("service.sock");
    let named = std::os::unix::net::UnixListener::bind(&path).unwrap();
    named.set_nonblocking(true).unwrap();
    // A datagram service beside it (syslog's /dev/log is one).
    let datagrams =
        std::os::unix::net::UnixDatagram::bind(format!("{}.dgram", path.display())).unwrap();
    datagrams.set_nonblocking(true).unwrap();
    let abstract_name = format!("agent-nvim-test-{}", std::process::id());
    let abstract_listener = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(&abstract_name).unwrap();
        std::os::unix::net::UnixListener::bind_addr(&addr).unwrap()
    };
    abstract_listener.set_nonblocking(true).unwrap();
    let attack = python(&format!(
        r#"
import socket
for name, address in [("named", "{path}"), ("abstract", "\0{abstract_name}")]:
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(address)
        print("connected", name)
    except OSError as e:
        print("refused", e.errno)
a, b = socket.socketpair()
a.send(b"pair")
print(b.recv(4).decode())
try:
    d, _ = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    d.sendto(b"x", "{path}.dgram")
    print("datagram sent")
except OSError as e:
    print("datagram", e.errno)
"#,
        path = path.display()
    ));
    let output = run_in(&dirs, &workspace_write(), &attack).await;
    let refused = format!("refused {}\n", libc::EACCES);
    assert_eq!(
        output.text,
        format!(
            "{refused}{refused}pair\ndatagram {}\n\n[exit 0]",
            libc::EACCES
        ),
        "{}",
        output.text
    );
    assert!(named.accept().is_err(), "the named socket saw a connection");
    assert!(
        datagrams.recv(&mut [0u8; 8]).is_err(),
        "the datagram socket got a datagram"
    );
    assert!(
        abstract_listener.accept().is_err(),
        "the abstract socket saw a connection"
    );
    // The same program unconfined reaches both: the test's attack is real.
    let output = run_in(&dirs, &Sandbox::off(), &attack).await;
    assert_eq!(
        output.text, "connected named\nconnected abstract\npair\ndatagram sent\n\n[exit 0]",
        "{}",
        output.text
    );
}

#[tokio::test]
async fn shared_memory_keyrings_capabilities_and_inherited_descriptors_stay_out() {
    if !filter_here() {
        return;
    }
    let dirs = Dirs::new();
    // A descriptor of ours without close-on-exec, as a careless parent would leave one.
    let mut fds = [0; 2];
    // SAFETY: pipe fills two descriptors, closed below.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let program = python(&format!(
        r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
segment = libc.syscall({shmget}, 0x5a5a, 4096, 0o1600)
print("shmget", segment, ctypes.get_errno())
if segment >= 0:
    libc.syscall({shmctl}, segment, 0, None)  # IPC_RMID: nothing left behind
key = libc.syscall({add_key}, b"user", b"agent-nvim-test", b"v", 1, -4)
print("add_key", key, ctypes.get_errno())
if key >= 0:
    libc.syscall({keyctl}, 9, key, -4)  # KEYCTL_UNLINK from the user keyring
caps = dict(l.split(":") for l in open("/proc/self/status") if l.startswith("Cap"))
print("effective", caps["CapEff"].strip(), "root bounding", caps["CapBnd"].strip() if os.geteuid() == 0 else "-")
print("inherited", {leak} in [int(n) for n in os.listdir("/proc/self/fd")])
"#,
        shmget = libc::SYS_shmget,
        shmctl = libc::SYS_shmctl,
        add_key = libc::SYS_add_key,
        keyctl = libc::SYS_keyctl,
        leak = fds[1],
    ));
    let output = run_in(&dirs, &workspace_write(), &program).await;
    let unconfined = run_in(&dirs, &Sandbox::off(), &program).await;
    // SAFETY: our own descriptors, closed once.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    let eperm = libc::EPERM;
    // SAFETY: geteuid only reads.
    let bounding = if unsafe { libc::geteuid() } == 0 {
        "0000000000000000"
    } else {
        "-"
    };
    assert_eq!(
        output.text,
        format!(
            "shmget -1 {eperm}\nadd_key -1 {eperm}\neffective 0000000000000000 root bounding {bounding}\ninherited False\n\n[exit 0]"
        ),
        "{}",
        output.text
    );
    // Unconfined, the calls get further (the descriptor is closed for every command).
    assert!(
        !unconfined.text.starts_with(&format!("shmget -1 {eperm}")),
        "{}",
        unconfined.text
    );
}

/// Sends one UDP datagram to a listener of the test's own on `host` under `sandbox`; the
/// command's text and whether the listener got it. None where the host has no such address.
async fn udp_to(host: &str, sandbox: &Sandbox) -> Option<(String, bool)> {
    let listener = std::net::UdpSocket::bind((host, 0)).ok()?;
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let family = if host.contains(':') {
        "AF_INET6"
    } else {
        "AF_INET"
    };
    let dirs = Dirs::new();
    let output = run_in(
        &dirs,
        sandbox,
        &python(&format!(
            r#"
import socket
try:
    socket.socket(socket.{family}, socket.SOCK_DGRAM).sendto(b"leak", ("{host}", {port}))
    print("sent")
except OSError as e:
    print("refused", e.errno)
"#
        )),
    )
    .await;
    let mut buf = [0u8; 8];
    let got = listener.recv(&mut buf).is_ok();
    Some((output.text, got))
}

#[tokio::test]
async fn network_false_refuses_udp_on_ipv4_and_ipv6_and_network_true_sends() {
    if !filter_here() {
        return;
    }
    let blocked = Sandbox {
        network: false,
        ..Sandbox::new()
    };
    for host in ["127.0.0.1", "::1"] {
        let Some((text, got)) = udp_to(host, &blocked).await else {
            eprintln!("skipped {host}: no such address here");
            continue;
        };
        assert_eq!(
            text,
            format!("refused {}\n\n[exit 0]", libc::EACCES),
            "{host}"
        );
        assert!(!got, "{host}: the listener got the datagram");
        let (text, got) = udp_to(host, &Sandbox::new()).await.unwrap();
        assert_eq!((text.as_str(), got), ("sent\n\n[exit 0]", true), "{host}");
    }
}

/// A terminal of the test's own: the main side's descriptor and the other side's path.
fn terminal() -> (std::os::fd::OwnedFd, String) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain calls on a descriptor this function owns; ptsname's buffer is copied at
    // once (the tests run this on one thread each, but nothing else here calls ptsname).
    unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0);
        assert_eq!(libc::grantpt(fd), 0);
        assert_eq!(libc::unlockpt(fd), 0);
        let name = std::ffi::CStr::from_ptr(libc::ptsname(fd))
            .to_string_lossy()
            .into_owned();
        (std::os::fd::OwnedFd::from_raw_fd(fd), name)
    }
}

#[tokio::test]
async fn io_uring_another_process_descriptors_and_typing_into_a_terminal_are_refused() {
    if !filter_here() {
        return;
    }
    let dirs = Dirs::new();
    // A terminal can be opened for reading (Landlock lets commands read everything), and
    // TIOCSTI needs no more: the sandbox must refuse the ioctl itself.
    let (_main, side) = terminal();
    let program = python(&format!(
        r#"
import ctypes, fcntl, os, termios
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
print("io_uring", libc.syscall({uring}, 4, params), ctypes.get_errno())
pidfd = libc.syscall({pidfd_open}, os.getpid(), 0)
print("pidfd_getfd", libc.syscall({getfd}, pidfd, 1, 0), ctypes.get_errno())
tty = os.open("{side}", os.O_RDONLY | os.O_NOCTTY)
try:
    fcntl.ioctl(tty, termios.TIOCSTI, b"x")
    print("typed")
except OSError as e:
    print("TIOCSTI", e.errno)
"#,
        uring = libc::SYS_io_uring_setup,
        pidfd_open = libc::SYS_pidfd_open,
        getfd = libc::SYS_pidfd_getfd,
    ));
    let output = run_in(&dirs, &workspace_write(), &program).await;
    let eperm = libc::EPERM;
    assert_eq!(
        output.text,
        format!("io_uring -1 {eperm}\npidfd_getfd -1 {eperm}\nTIOCSTI {eperm}\n\n[exit 0]"),
        "{}",
        output.text
    );
    // Unconfined, the same calls get further (io_uring makes a ring; as root TIOCSTI types):
    // the refusals above are the sandbox's.
    let output = run_in(&dirs, &Sandbox::off(), &program).await;
    assert!(
        !output.text.starts_with(&format!(
            "io_uring -1 {eperm}\npidfd_getfd -1 {eperm}\nTIOCSTI {eperm}"
        )),
        "{}",
        output.text
    );
}

#[tokio::test]
async fn a_signal_to_a_process_outside_the_sandbox_is_refused_where_landlock_scopes_them() {
    if !landlock_here() {
        return;
    }
    if support().abi() < 6 {
        eprintln!("skipped: Landlock ABI {} has no scopes", support().abi());
        return;
    }
    let dirs = Dirs::new();
    // Signal 0 only asks whether a signal could be sent: to the test process (outside), then
    // to the command's own child (inside).
    let line = format!(
        "kill -0 {}; echo outside $?; sleep 5 & kill -0 $!; echo inside $?; kill $!",
        std::process::id()
    );
    let output = run_in(&dirs, &workspace_write(), &line).await;
    assert!(
        output.text.starts_with("outside 1\ninside 0\n"),
        "{}",
        output.text
    );
    assert!(
        output.text.contains("Operation not permitted"),
        "{}",
        output.text
    );
    let output = run_in(&dirs, &Sandbox::off(), &line).await;
    assert!(
        output.text.starts_with("outside 0\ninside 0\n"),
        "{}",
        output.text
    );
}

#[test]
fn the_policy_grants_the_workspace_temp_writable_and_dev_null_and_read_only_only_temp() {
    let root = Path::new("/w");
    let temp = [PathBuf::from("/tmp")];
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let sandbox = Sandbox {
        writable: vec![
            PathBuf::from("~/.cache"),
            PathBuf::from("../shared"),
            PathBuf::from("/tmp"),
        ],
        ..Sandbox::new()
    };
    let mut want = vec![PathBuf::from("/w"), PathBuf::from("/tmp")];
    want.push(match &home {
        Some(home) => home.join(".cache"),
        None => PathBuf::from("~/.cache"),
    });
    want.extend([PathBuf::from("/w/../shared"), PathBuf::from("/dev/null")]);
    assert_eq!(
        sandbox.policy_with(root, &temp),
        Some(Policy {
            writable: want,
            block_network: false,
            filter: seccomp(),
        })
    );
    let read_only = Sandbox {
        mode: Mode::ReadOnly,
        network: false,
        ..sandbox.clone()
    };
    assert_eq!(
        read_only.policy_with(root, &temp),
        Some(Policy {
            writable: vec![PathBuf::from("/tmp"), PathBuf::from("/dev/null")],
            block_network: true,
            filter: seccomp(),
        })
    );
    assert_eq!(Sandbox::off().policy_with(root, &temp), None);
}

#[test]
fn modes_are_read_by_their_names_only() {
    for mode in [Mode::WorkspaceWrite, Mode::ReadOnly, Mode::Off] {
        assert_eq!(Mode::parse(mode.name()), Some(mode));
    }
    assert_eq!(Mode::parse("workspace_write"), None);
    assert_eq!(Mode::parse(""), None);
}

/// The report for `sandbox` on a kernel with `support` and seccomp filters, in a workspace
/// that exists.
fn report(sandbox: &Sandbox, support: Support) -> Report {
    report_on(sandbox, support, true)
}

/// [`report`] on a kernel with seccomp filters or not.
fn report_on(sandbox: &Sandbox, support: Support, seccomp: bool) -> Report {
    let root = tempfile::tempdir().unwrap();
    Report::new(sandbox, support, seccomp, root.path(), &[])
}

#[test]
fn without_landlock_the_sandbox_is_off_with_a_warning_that_says_what_to_do() {
    for (support, why) in [
        (
            Support::NotInKernel,
            "this kernel has no Landlock (it needs Linux 5.13 or later)",
        ),
        (
            Support::NotEnabled,
            "Landlock is built into this kernel but not enabled (add landlock to the lsm= boot parameter)",
        ),
        (
            Support::NotLinux,
            "Landlock is Linux's, and this system is not Linux",
        ),
    ] {
        let got = report(&Sandbox::new(), support);
        assert_eq!(got.mode, Mode::Off);
        assert!(!got.is_on());
        assert_eq!(got.summary, format!("off: {why}"));
        assert_eq!(got.off.as_deref(), Some(why));
        assert_eq!(got.warnings, Vec::<String>::new());
        assert_eq!(got.prompt_note(), None);
    }
    // Turned off on purpose: nothing to warn about.
    let got = report(&Sandbox::off(), Support::NotInKernel);
    assert_eq!(got.off, None);
    assert_eq!(got.warnings, Vec::<String>::new());
}

#[test]
fn what_an_older_kernel_cannot_enforce_is_said() {
    let offline = Sandbox {
        network: false,
        ..Sandbox::new()
    };
    // Seccomp blocks every socket whatever Landlock's ABI.
    let got = report(&offline, Support::Abi(3));
    assert!(got.is_on());
    assert!(got.network_blocked);
    assert!(got.sockets_blocked);
    assert_eq!(
        got.summary,
        "workspace-write, network blocked, local sockets blocked (Landlock ABI 3, seccomp)"
    );
    assert_eq!(got.warnings, Vec::<String>::new());
    assert!(got.whole);
    assert!(
        got.not_enforced
            .iter()
            .any(|p| p.starts_with("signals to your other processes (Landlock ABI 3")),
        "{:?}",
        got.not_enforced
    );
    let got = report(&Sandbox::new(), Support::Abi(1));
    assert_eq!(got.warnings.len(), 2, "{:?}", got.warnings);
    assert!(got.warnings[0].contains("truncating"), "{:?}", got.warnings);
    assert!(
        got.warnings[1].contains("move or link"),
        "{:?}",
        got.warnings
    );
    assert!(!got.whole);

    let got = report(&offline, Support::Abi(7));
    assert_eq!(
        got.summary,
        "workspace-write, network blocked, local sockets blocked (Landlock ABI 7, seccomp)"
    );
    assert_eq!(got.warnings, Vec::<String>::new());
    assert_eq!(
        got.enforced,
        [
            "writing outside the workspace, the temp directory and sandbox.writable",
            "unix sockets, abstract ones too (Neovim's server, tmux, ssh-agent, D-Bus, Docker, X11, Wayland)",
            "typing into the terminal (TIOCSTI) and io_uring",
            "System V shared memory, queues and semaphores, and the kernel's keyrings",
            "privileges: a command keeps no capability, not even one started by root",
            "signals to processes outside the sandbox",
            "every IP socket: TCP and UDP, IPv4 and IPv6",
        ]
    );
    assert_eq!(
        got.not_enforced,
        [
            "reading files: every file you can read, a command can",
            "the mode, owner, times and extended attributes of files outside that you own (Landlock has no rule for them; their contents are safe)",
        ]
    );
    assert!(got.whole);
}

#[test]
fn without_seccomp_local_sockets_are_open_said_and_the_sandbox_is_not_whole() {
    let got = report_on(&Sandbox::new(), Support::Abi(7), false);
    assert!(got.is_on());
    assert!(!got.sockets_blocked);
    assert!(!got.whole);
    assert_eq!(
        got.summary,
        "workspace-write, network allowed, local sockets open (Landlock ABI 7)"
    );
    assert_eq!(
        got.warnings,
        ["this kernel has no seccomp filters, so the sandbox cannot keep commands from local sockets (Neovim's, tmux's, ssh-agent's, D-Bus): a command could drive them, so auto_allow_sandboxed asks about each command"]
    );
    assert!(got
        .not_enforced
        .contains(&"unix sockets (no seccomp filters here)".to_string()));

    // network = false: Landlock ABI 4 blocks TCP, and says UDP is not.
    let offline = Sandbox {
        network: false,
        ..Sandbox::new()
    };
    let got = report_on(&offline, Support::Abi(4), false);
    assert!(!got.network_blocked);
    assert_eq!(
        got.summary,
        "workspace-write, TCP blocked, local sockets open (Landlock ABI 4)"
    );
    assert_eq!(
        got.warnings[1],
        "network = false blocks TCP only: without seccomp filters, UDP and other sockets still work"
    );
    // ABI 3: nothing of the network is enforced.
    let got = report_on(&offline, Support::Abi(3), false);
    assert_eq!(
        got.warnings[1],
        "network = false is not enforced: Landlock ABI 3 has no network rules (ABI 4, Linux 6.7, has them) and there are no seccomp filters; commands can still connect and listen"
    );
    assert!(!got.whole);
}

#[test]
fn a_writable_place_that_does_not_exist_is_named() {
    let sandbox = Sandbox {
        writable: vec![PathBuf::from("/nonexistent/cache")],
        ..Sandbox::new()
    };
    let got = report(&sandbox, Support::Abi(7));
    assert_eq!(
        got.warnings,
        vec!["/nonexistent/cache (sandbox.writable) does not exist, so commands cannot write there; create it first".to_string()]
    );
    assert!(!got.writable.contains(&PathBuf::from("/nonexistent/cache")));
}

#[test]
fn the_prompt_says_what_the_sandbox_blocks_and_to_report_a_refusal() {
    let root = tempfile::tempdir().unwrap();
    let offline = Sandbox {
        network: false,
        ..Sandbox::new()
    };
    let got = Report::new(&offline, Support::Abi(7), true, root.path(), &[]);
    let note = got.prompt_note().unwrap();
    assert_eq!(
        note,
        format!(
            "- run_bash commands run in a sandbox (Landlock): a command can read any file but write only in {}, /dev/null. Every network socket (TCP and UDP) and every unix socket is refused. A `Permission denied` or `Operation not permitted` for a write outside those places, or for a socket, comes from the sandbox: do not try to work around it (another path, another tool, sudo); tell the user what was blocked, so they can allow it (sandbox.writable) or run it themselves.",
            root.path().display()
        )
    );
    let read_only = Sandbox {
        mode: Mode::ReadOnly,
        ..Sandbox::new()
    };
    let note = Report::new(&read_only, Support::Abi(7), true, root.path(), &[])
        .prompt_note()
        .unwrap();
    assert!(
        note.contains("it is read-only: a command can read any file but write only to /dev/null (not in the workspace)."),
        "{note}"
    );
    assert!(!note.contains("TCP"), "{note}");
    assert!(note.contains(" Unix sockets are refused"), "{note}");
}

mod gate {
    //! `auto_allow_sandboxed` at the gate: which calls it lets through without a person.

    use crate::approval::{Asker, Gate, Verdict};
    use crate::permissions::Rules;
    use agent_nvim_vocab::approval::{Action, ApprovalRequest, Decision};
    use futures::future::BoxFuture;
    use std::sync::{Arc, Mutex};
    use tokio_util::sync::CancellationToken;

    /// Refuses every question, recording its detail.
    #[derive(Default)]
    struct Refusing(Mutex<Vec<String>>);

    impl Asker for Refusing {
        fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, Option<Decision>> {
            self.0.lock().unwrap().push(request.detail);
            Box::pin(async { Some(Decision::Refuse { reason: None }) })
        }
    }

    async fn check(gate: &Gate, action: Action) -> Verdict {
        let detail = match &action {
            Action::Edit { rel } => format!("edit {rel}"),
            Action::Command { command } => command.clone(),
        };
        let tool = match action {
            Action::Edit { .. } => "edit_file",
            Action::Command { .. } => "run_bash",
        };
        let request = ApprovalRequest {
            tool,
            detail,
            diff: None,
            action,
            proposal: None,
        };
        gate.check(request, &CancellationToken::new()).await
    }

    fn command(line: &str) -> Action {
        Action::Command {
            command: line.to_string(),
        }
    }

    fn rules(ask: &[&str], deny: &[&str]) -> Rules {
        let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Rules::parse(&[], &owned(ask), &owned(deny)).unwrap()
    }

    #[tokio::test]
    async fn sandboxed_commands_run_unasked_but_edits_ask_rules_and_deny_rules_are_as_before() {
        let asker = Arc::new(Refusing::default());
        let gate = Gate::new(false, Some(asker.clone()))
            .with_rules(rules(&["run_bash(git push *)"], &["run_bash(rm *)"]))
            .with_sandboxed_commands(true);
        assert_eq!(
            check(&gate, command("ls -la")).await,
            Verdict::AllowedUnasked {
                why: "sandboxed, auto-allowed".into()
            }
        );
        assert_eq!(
            check(&gate, command("rm -rf x")).await,
            Verdict::Denied {
                text: "Refused by the rule 'run_bash(rm *)' in permissions.deny.".into(),
                why: "by the rule 'run_bash(rm *)' in permissions.deny".into(),
            }
        );
        let refused = Verdict::Refused { reason: None };
        assert_eq!(check(&gate, command("git push origin")).await, refused);
        // A line the deny rules cannot see into goes to the person, and so does one that
        // runs the project's code (a build script could run rm).
        assert_eq!(check(&gate, command("echo $(rm -rf x)")).await, refused);
        assert_eq!(check(&gate, command("cargo test")).await, refused);
        let edit = Action::Edit { rel: "a.rs".into() };
        assert_eq!(check(&gate, edit).await, refused);
        assert_eq!(
            *asker.0.lock().unwrap(),
            vec![
                "git push origin",
                "echo $(rm -rf x)",
                "cargo test",
                "edit a.rs"
            ]
        );
    }

    #[tokio::test]
    async fn without_the_sandbox_in_force_a_command_is_asked_about() {
        let asker = Arc::new(Refusing::default());
        let gate = Gate::new(false, Some(asker.clone())).with_sandboxed_commands(false);
        assert_eq!(
            check(&gate, command("cargo test")).await,
            Verdict::Refused { reason: None }
        );
        assert_eq!(*asker.0.lock().unwrap(), vec!["cargo test"]);
        // With nobody to ask, a sandboxed command still runs: the sandbox is the answer.
        let gate = Gate::new(false, None).with_sandboxed_commands(true);
        assert_eq!(
            check(&gate, command("cargo test")).await,
            Verdict::AllowedUnasked {
                why: "sandboxed, auto-allowed".into()
            }
        );
    }
}
