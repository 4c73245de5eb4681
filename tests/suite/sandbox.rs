//! The command sandbox (Landlock) end to end: `agent-nvim tool run_bash` with its flags, `agent-nvim
//! sandbox`, the system prompt the model gets, and an external agent started inside it. The
//! workspaces are in cargo's scratch directory for tests, not under /tmp, which the sandbox lets
//! commands write.

#![allow(clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_nvim::acp::{self, AcpEvent, AcpSpec};
use agent_nvim::agent::{Agent, Event, Outcome};
use agent_nvim::approval::Gate;
use agent_nvim::editor::NoEditor;
use agent_nvim::llm::{ApiKey, Client, Key, ProviderConfig, ProviderKind};
use agent_nvim::sandbox::{self, Policy, Sandbox, Support};
use agent_nvim::tools::{Executor, Settings, ToolContext};
use agent_nvim::workspace::Workspace;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::fake_host::{Answer, FakeHost};
use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::{bin, json, tool};

/// Whether this kernel has Landlock; says so when the test cannot run.
fn landlock_here() -> bool {
    match sandbox::support() {
        Support::Abi(_) => true,
        other => {
            eprintln!("skipped: no Landlock here ({other:?})");
            false
        }
    }
}

/// A workspace and a directory beside it, both outside every place the sandbox lets commands
/// write.
struct Dirs {
    _base: tempfile::TempDir,
    workspace: PathBuf,
    outside: PathBuf,
}

impl Dirs {
    fn new() -> Dirs {
        let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let workspace = base.path().join("ws");
        let outside = base.path().join("outside");
        std::fs::create_dir(&workspace).unwrap();
        std::fs::create_dir(&outside).unwrap();
        Dirs {
            _base: base,
            workspace,
            outside,
        }
    }
}

/// `agent-nvim tool run_bash` of `command` in `dirs`' workspace, allowed, with `flags`; the
/// result's text.
fn run_bash(dirs: &Dirs, command: &str, flags: &[&str]) -> String {
    let mut all = vec!["--auto-approve"];
    all.extend_from_slice(flags);
    let out = tool(
        &dirs.workspace,
        "run_bash",
        &json!({ "command": command }).to_string(),
        &all,
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    json(&out)["text"].as_str().unwrap().to_string()
}

#[test]
fn by_default_a_write_outside_the_workspace_fails_and_leaves_nothing_while_one_inside_works() {
    if !landlock_here() {
        return;
    }
    let dirs = Dirs::new();
    let outside = dirs.outside.join("f");
    let text = run_bash(&dirs, &format!("echo x > '{}'", outside.display()), &[]);
    assert!(text.contains("Permission denied"), "{text}");
    assert!(text.ends_with("[exit 1]"), "{text}");
    assert!(!outside.exists());

    let text = run_bash(&dirs, "echo x > inside.txt && cat inside.txt", &[]);
    assert_eq!(text, "x\n\n[exit 0]");
    assert!(dirs.workspace.join("inside.txt").exists());

    // --sandbox off: as before the sandbox.
    let text = run_bash(
        &dirs,
        &format!("echo x > '{}'", outside.display()),
        &["--sandbox", "off"],
    );
    assert_eq!(text, "\n[exit 0]");
    assert!(outside.exists());
}

#[test]
fn read_only_blocks_writes_in_the_workspace() {
    if !landlock_here() {
        return;
    }
    let dirs = Dirs::new();
    let text = run_bash(
        &dirs,
        "echo x > inside.txt; mkdir made",
        &["--sandbox", "read-only"],
    );
    assert!(text.contains("inside.txt: Permission denied"), "{text}");
    assert!(!dirs.workspace.join("inside.txt").exists());
    assert!(!dirs.workspace.join("made").exists());
    // A --writable place is still not writable in read-only mode.
    let text = run_bash(
        &dirs,
        &format!("echo x > '{}/f'", dirs.outside.display()),
        &[
            "--sandbox",
            "read-only",
            "--writable",
            dirs.outside.to_str().unwrap(),
        ],
    );
    assert!(text.contains("Permission denied"), "{text}");
    // In workspace-write, it is.
    let text = run_bash(
        &dirs,
        &format!("echo x > '{}/f'", dirs.outside.display()),
        &["--writable", dirs.outside.to_str().unwrap()],
    );
    assert_eq!(text, "\n[exit 0]");
}

#[test]
fn no_network_makes_a_connect_to_a_loopback_port_fail() {
    if !landlock_here() || sandbox::support().abi() < 4 {
        eprintln!("skipped: no Landlock network rules here");
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let dirs = Dirs::new();
    let text = run_bash(&dirs, &connect, &["--no-network"]);
    assert!(text.contains("Permission denied"), "{text}");
    assert!(
        listener.accept().is_err(),
        "a connection got through: {text}"
    );
    let text = run_bash(&dirs, &connect, &[]);
    assert_eq!(text, "connected\n\n[exit 0]");
    assert!(listener.accept().is_ok());
}

#[test]
fn agent_nvim_sandbox_reports_the_abi_and_what_is_in_force() {
    let dirs = Dirs::new();
    let out = bin()
        .args(["sandbox", "--json", "--no-network", "--workspace"])
        .arg(&dirs.workspace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report = json(&out);
    let abi = sandbox::support().abi();
    assert_eq!(report["abi"], abi);
    assert_eq!(report["configured"], "workspace-write");
    if abi >= 3 && sandbox::seccomp() {
        assert_eq!(report["mode"], "workspace-write");
        assert_eq!(report["network_blocked"], true);
        assert_eq!(report["sockets_blocked"], true);
        assert_eq!(report["whole"], true);
        assert_eq!(
            report["summary"],
            format!("workspace-write, network blocked, local sockets blocked (Landlock ABI {abi}, seccomp)")
        );
        assert_eq!(report["warnings"], json!([]));
        let root = std::fs::canonicalize(&dirs.workspace).unwrap();
        assert_eq!(report["writable"][0], root.to_str().unwrap());
    }
    // Text for a person.
    let out = bin()
        .args(["sandbox", "--sandbox", "read-only", "--workspace"])
        .arg(&dirs.workspace)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!("Landlock ABI: {abi}\nsandbox: ")),
        "{text}"
    );
    if abi > 0 {
        // What is refused and what is not, each on its own line.
        assert!(
            text.contains(
                "\nnot refused:\n  - reading files: every file you can read, a command can\n"
            ),
            "{text}"
        );
        if sandbox::seccomp() {
            assert!(
                text.contains("\nrefused:\n  - writing anywhere but the temp directory\n  - unix sockets, abstract ones too"),
                "{text}"
            );
        }
    }
}

/// A tmux server of the test's own, outside the workspace, with its socket at `socket`;
/// killed when dropped.
struct Tmux(PathBuf);

impl Tmux {
    fn start(socket: &Path) -> Option<Tmux> {
        let started = std::process::Command::new("tmux")
            .arg("-S")
            .arg(socket)
            .args(["new-session", "-d", "-x", "80", "-y", "24", "sleep 600"])
            .env_remove("TMUX")
            .status()
            .ok()?;
        started.success().then(|| Tmux(socket.to_path_buf()))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.0)
            .arg("kill-server")
            .status();
    }
}

#[test]
fn a_sandboxed_command_cannot_make_a_tmux_server_outside_run_a_command() {
    if !landlock_here() || !sandbox::seccomp() {
        eprintln!("skipped: no Landlock or no seccomp filters here");
        return;
    }
    let dirs = Dirs::new();
    let socket = dirs.outside.join("tmux.sock");
    let Some(_tmux) = Tmux::start(&socket) else {
        eprintln!("skipped: tmux cannot start here");
        return;
    };
    let owned = dirs.outside.join("owned");
    let attack = format!(
        "tmux -S '{socket}' run-shell 'touch {owned}'; echo \"tmux $?\"",
        socket = socket.display(),
        owned = owned.display()
    );
    let text = run_bash(&dirs, &attack, &[]);
    assert!(text.contains("tmux 1"), "{text}");
    // The server runs its commands after the client has gone: give it the time.
    std::thread::sleep(Duration::from_millis(500));
    assert!(!owned.exists(), "the tmux server ran the command: {text}");
    // The control: unsandboxed, the same line makes the server outside write the file.
    let text = run_bash(&dirs, &attack, &["--sandbox", "off"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !owned.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(owned.exists(), "{text}");
}

#[test]
fn without_landlock_a_command_runs_unconfined_with_a_warning_never_a_failure() {
    let dirs = Dirs::new();
    let outside = dirs.outside.join("f");
    let out = bin()
        .current_dir(&dirs.workspace)
        .env("AGENT_NVIM_TEST_NO_LANDLOCK", "1")
        .args([
            "tool",
            "run_bash",
            &json!({ "command": format!("echo x > '{}'", outside.display()) }).to_string(),
            "--auto-approve",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(json(&out)["text"], "\n[exit 0]");
    assert!(outside.exists());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr,
        "agent: the sandbox is off: this kernel has no Landlock (it needs Linux 5.13 or later); commands run without it. Set sandbox.mode to \"off\" (--sandbox off) to say you know (see :help agent-sandbox)\n"
    );
    // Said in the report too, and nothing to say once it is off on purpose.
    let report = |flags: &[&str]| {
        let out = bin()
            .env("AGENT_NVIM_TEST_NO_LANDLOCK", "1")
            .args(["sandbox", "--json"])
            .args(flags)
            .arg("--workspace")
            .arg(&dirs.workspace)
            .output()
            .unwrap();
        json(&out)
    };
    let got = report(&[]);
    assert_eq!(
        (got["abi"].clone(), got["mode"].clone()),
        (json!(0), json!("off"))
    );
    assert_eq!(
        got["summary"],
        "off: this kernel has no Landlock (it needs Linux 5.13 or later)"
    );
    assert_eq!(report(&["--sandbox", "off"])["warnings"], json!([]));
}

/// The system prompt of the first request an agent with `sandbox` sends for a prompt.
async fn system_prompt_with(sandbox: Sandbox) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![Reply::Turn {
            parts: vec![Part::Text("ok".into())],
            usage: (1, 1),
        }],
    );
    let executor = Executor::new(ToolContext {
        workspace: Workspace::new(dir.path()).unwrap(),
        gate: Arc::new(Gate::new(true, None)),
        editor: Arc::new(NoEditor),
        settings: Settings {
            sandbox,
            ..Settings::default()
        },
        checkpoints: None,
    });
    let config = ProviderConfig {
        kind: ProviderKind::Anthropic,
        model: "test-model".into(),
        base_url: mock.base_url(),
        key: Key::Given {
            key: ApiKey::new("test-key".into()),
            from: "ANTHROPIC_API_KEY".into(),
        },
        tuning: Default::default(),
    };
    let client = Client::new(config, &executor.catalogue()).unwrap();
    let mut agent = Agent::new(client, executor, 4);
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let outcome = agent
        .prompt("hi".into(), &tx, &CancellationToken::new())
        .await;
    assert_eq!(outcome, Outcome::Done);
    let requests = mock.requests();
    requests[0].body["system"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn the_system_prompt_says_the_sandbox_is_on_what_it_blocks_and_to_report_a_refusal() {
    if !landlock_here() {
        return;
    }
    let offline = Sandbox {
        network: false,
        ..Sandbox::new()
    };
    let system = system_prompt_with(offline).await;
    assert!(
        system.contains("- run_bash commands run in a sandbox (Landlock): a command can read any file but write only in "),
        "{system}"
    );
    if sandbox::seccomp() {
        assert!(
            system.contains("Every network socket (TCP and UDP) and every unix socket is refused."),
            "{system}"
        );
    }
    assert!(
        system.contains("comes from the sandbox: do not try to work around it"),
        "{system}"
    );
    assert!(
        system.contains("tell the user what was blocked"),
        "{system}"
    );
    let system = system_prompt_with(Sandbox::off()).await;
    assert!(!system.contains("sandbox"), "{system}");
}

/// What the scripted agent says it managed when its prompt is `write`, started with `policy`.
async fn agent_writes(root: &Path, policy: Option<Policy>) -> String {
    let workspace = Workspace::new(root).unwrap();
    let mut spec = AcpSpec::new(
        "test",
        vec![env!("CARGO_BIN_EXE_acp-test-agent").to_string()],
        workspace,
    );
    spec.connect_timeout = Duration::from_secs(20);
    spec.sandbox = policy;
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let session = acp::connect(spec, host.clone()).await.unwrap();
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        session.prompt("write".into(), &CancellationToken::new()),
    )
    .await
    .unwrap();
    assert_eq!(outcome, Outcome::Done);
    session.shutdown().await;
    host.events()
        .into_iter()
        .filter_map(|event| match event {
            AcpEvent::Turn(Event::Text { text }) => Some(text),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_external_agent_started_in_the_sandbox_cannot_write_outside_the_workspace() {
    if !landlock_here() {
        return;
    }
    let dirs = Dirs::new();
    let root = std::fs::canonicalize(&dirs.workspace).unwrap();
    let policy = Sandbox::new().policy(&root);
    assert!(policy.is_some());
    let said = agent_writes(&root, policy).await;
    assert_eq!(
        said,
        "inside: written\noutside: Permission denied (os error 13)\n"
    );
    assert!(root.join("written-by-agent.txt").exists());
    let outside = root.parent().unwrap().join("written-by-agent.txt");
    assert!(!outside.exists());
    // Without `sandbox = true`, as before.
    let said = agent_writes(&root, None).await;
    assert_eq!(said, "inside: written\noutside: written\n");
    assert!(outside.exists());
}

/// An external agent's terminal for `line`, allowed (auto_approve) and run with run_bash's
/// sandbox `policy`; the exit code it reported.
async fn terminal_exit(root: &Path, line: &str, policy: Option<Policy>) -> serde_json::Value {
    let workspace = Workspace::new(root).unwrap();
    let mut spec = AcpSpec::new(
        "test",
        vec![env!("CARGO_BIN_EXE_acp-test-agent").to_string()],
        workspace,
    );
    spec.connect_timeout = Duration::from_secs(20);
    spec.auto_approve = true;
    spec.terminal.sandbox = policy;
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let session = acp::connect(spec, host.clone()).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(20),
        session.prompt(
            format!("terminal-unasked {line}").into(),
            &CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    session.shutdown().await;
    host.report("exit")["result"]["exitCode"].clone()
}

#[tokio::test]
async fn an_agents_terminal_runs_in_run_bashs_sandbox_when_it_is_on() {
    if !landlock_here() {
        return;
    }
    let dirs = Dirs::new();
    let root = std::fs::canonicalize(&dirs.workspace).unwrap();
    let outside = root.parent().unwrap().join("written-by-terminal.txt");
    let line = format!("touch inside.txt && touch {}", outside.display());
    let policy = Sandbox::new().policy(&root);
    assert!(policy.is_some());
    assert_eq!(terminal_exit(&root, &line, policy).await, json!(1));
    assert!(root.join("inside.txt").exists());
    assert!(!outside.exists());
    // With the sandbox off, the same line writes outside.
    assert_eq!(terminal_exit(&root, &line, None).await, json!(0));
    assert!(outside.exists());
}
