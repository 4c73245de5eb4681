//! The sandbox's tests: commands run under Landlock (on this kernel: the tests say so and stop
//! where it has none), and what the report says for each kernel.

use super::*;
use crate::process::{self, CommandOutput, CommandSpec};
use crate::tools::Approved;
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

/// The report for `sandbox` on a kernel with `support`, in a workspace that exists.
fn report(sandbox: &Sandbox, support: Support) -> Report {
    let root = tempfile::tempdir().unwrap();
    Report::new(sandbox, support, root.path(), &[])
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
        assert_eq!(
            got.warnings,
            vec![format!(
                "agent: the sandbox is off: {why}; commands run without it. Set sandbox.mode to \"off\" (--sandbox off) to say you know (see :help agent-sandbox)"
            )]
        );
        assert_eq!(got.prompt_note(), None);
    }
    // Turned off on purpose: nothing to warn about.
    let got = report(&Sandbox::off(), Support::NotInKernel);
    assert_eq!(got.warnings, Vec::<String>::new());
}

#[test]
fn what_an_older_kernel_cannot_enforce_is_said() {
    let offline = Sandbox {
        network: false,
        ..Sandbox::new()
    };
    let got = report(&offline, Support::Abi(3));
    assert!(got.is_on());
    assert!(!got.network_blocked);
    assert_eq!(
        got.summary,
        "workspace-write, network allowed (Landlock ABI 3)"
    );
    assert_eq!(
        got.warnings,
        vec!["agent: network = false is not enforced: Landlock ABI 3 has no network rules (ABI 4, Linux 6.7, has them); commands can still connect and listen".to_string()]
    );
    assert!(!got.whole);
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
        "workspace-write, network blocked (Landlock ABI 7)"
    );
    assert_eq!(got.warnings, Vec::<String>::new());
    assert!(got.whole);
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
        vec!["agent: /nonexistent/cache (sandbox.writable) does not exist, so commands cannot write there; create it first".to_string()]
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
    let got = Report::new(&offline, Support::Abi(7), root.path(), &[]);
    let note = got.prompt_note().unwrap();
    assert_eq!(
        note,
        format!(
            "- run_bash commands run in a sandbox (Landlock): a command can read any file but write only in {}, /dev/null. TCP connections and listening are blocked too. A `Permission denied` or `Operation not permitted` for a write outside those places, or for a connection, comes from the sandbox: do not try to work around it (another path, another tool, sudo); tell the user what was blocked, so they can allow it (sandbox.writable) or run it themselves.",
            root.path().display()
        )
    );
    let read_only = Sandbox {
        mode: Mode::ReadOnly,
        ..Sandbox::new()
    };
    let note = Report::new(&read_only, Support::Abi(7), root.path(), &[])
        .prompt_note()
        .unwrap();
    assert!(
        note.contains("it is read-only: a command can read any file but write only to /dev/null (not in the workspace)."),
        "{note}"
    );
    assert!(!note.contains("TCP"), "{note}");
}

mod gate {
    //! `auto_allow_sandboxed` at the gate: which calls it lets through without a person.

    use crate::approval::{Action, ApprovalRequest, Asker, Decision, Gate, Verdict};
    use crate::permissions::Rules;
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
        assert_eq!(check(&gate, command("cargo test")).await, Verdict::Allowed);
        assert_eq!(
            check(&gate, command("rm -rf x")).await,
            Verdict::Denied {
                text: "Refused by the rule 'run_bash(rm *)' in permissions.deny.".into(),
                why: "by the rule 'run_bash(rm *)' in permissions.deny".into(),
            }
        );
        let refused = Verdict::Refused { reason: None };
        assert_eq!(check(&gate, command("git push origin")).await, refused);
        // A line the deny rules cannot see into goes to the person.
        assert_eq!(check(&gate, command("echo $(rm -rf x)")).await, refused);
        let edit = Action::Edit { rel: "a.rs".into() };
        assert_eq!(check(&gate, edit).await, refused);
        assert_eq!(
            *asker.0.lock().unwrap(),
            vec!["git push origin", "echo $(rm -rf x)", "edit a.rs"]
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
        assert_eq!(check(&gate, command("cargo test")).await, Verdict::Allowed);
    }
}
