//! The sandbox in a real Neovim (`setup({ sandbox = ..., auto_allow_sandboxed = ... })`), with
//! the mock server: a sandboxed command runs with no picker while an edit still asks, a write
//! outside the workspace fails, read-only holds in the workspace, `:checkhealth agent` shows the
//! ABI and the sandbox in force, and a machine without Landlock gets a warning, not a failure.

#![allow(clippy::print_stderr)]

use rmpv::Value;
use serde_json::json;

use agent_nvim::sandbox::{self, Support};

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{setup_lua, Nvim, Options};
use crate::support::tool_result;

const CHAT: &str = "agent: chat";

fn landlock_here() -> bool {
    match sandbox::support() {
        Support::Abi(_) => true,
        other => {
            eprintln!("skipped: no Landlock here ({other:?})");
            false
        }
    }
}

fn turn(parts: Vec<Part>) -> Reply {
    Reply::Turn {
        parts,
        usage: (10, 5),
    }
}

fn call(id: &str, name: &str, args: serde_json::Value) -> Part {
    Part::ToolCall {
        id: id.into(),
        name: name.into(),
        args: args.to_string(),
    }
}

fn bash(id: &str, command: &str) -> Part {
    call(id, "run_bash", json!({ "command": command }))
}

fn done(text: &str) -> Reply {
    turn(vec![Part::Text(text.into())])
}

/// A Neovim set up with `extra` (Lua table fields) against `mock`, with `env` added; with a UI
/// when `ui`.
async fn start(mock: &MockLlm, extra: &str, ui: bool, env: &[(&str, &str)]) -> Nvim {
    let mut all = vec![
        ("ANTHROPIC_API_KEY".to_string(), "k".to_string()),
        ("ANTHROPIC_BASE_URL".to_string(), mock.base_url()),
    ];
    all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Nvim::start(Options {
        ui: ui.then_some((100, 34)),
        env: all,
        setup: setup_lua(extra),
    })
    .await
}

async fn picker_open(nvim: &Nvim) -> bool {
    nvim.lua("return require('agent.approval').pending() > 0", vec![])
        .await
        == Value::from(true)
}

/// A directory outside the temp directory (which the sandbox lets commands write).
fn outside_temp() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

#[tokio::test]
async fn auto_allow_sandboxed_runs_commands_with_no_picker_but_an_edit_is_still_asked_about() {
    if !landlock_here() {
        return;
    }
    let outside = outside_temp();
    let escape = outside.path().join("f");
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![bash("t1", "echo x > inside.txt && cat inside.txt")]),
            turn(vec![bash(
                "t2",
                &format!("echo x > '{}'", escape.display()),
            )]),
            turn(vec![call(
                "t3",
                "edit_file",
                json!({"path": "new.txt", "old_str": "", "new_str": "hi"}),
            )]),
            done("OK."),
        ],
    );
    let nvim = start(&mock, "auto_allow_sandboxed = true", true, &[]).await;
    nvim.cmd("Agent go").await;
    // Neither command waited for a person: both results reached the model.
    let (result, ok) = tool_result(&mock, 1, "t1");
    assert_eq!((result.as_str(), ok), ("x\n\n[exit 0]", true));
    assert_eq!(nvim.read("inside.txt"), "x\n");
    let (result, _) = tool_result(&mock, 2, "t2");
    assert!(result.contains("Permission denied"), "{result}");
    assert!(result.ends_with("[exit 1]"), "{result}");
    assert!(!escape.exists());
    // The edit asks.
    nvim.wait_for_screen("Refuse with a reason").await;
    assert!(picker_open(&nvim).await);
    nvim.api.input("4").await.unwrap();
    nvim.wait_for_line(CHAT, "OK.").await;
    assert!(!nvim.workspace.path().join("new.txt").exists());
}

#[tokio::test]
async fn without_auto_allow_sandboxed_a_sandboxed_command_is_still_asked_about() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![turn(vec![bash("t1", "touch made")]), done("OK.")],
    );
    let nvim = start(&mock, "", true, &[]).await;
    nvim.cmd("Agent go").await;
    nvim.wait_for_screen("Refuse with a reason").await;
    assert!(picker_open(&nvim).await);
    nvim.api.input("4").await.unwrap();
    nvim.wait_for_line(CHAT, "OK.").await;
    assert!(!nvim.workspace.path().join("made").exists());
}

#[tokio::test]
async fn read_only_blocks_a_write_in_the_workspace() {
    if !landlock_here() {
        return;
    }
    // The workspace is set outside the temp directory, which read-only still lets commands write.
    let workspace = outside_temp();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![bash("t1", "cat kept.txt; echo x > kept.txt")]),
            done("OK."),
        ],
    );
    std::fs::write(workspace.path().join("kept.txt"), "as it was").unwrap();
    let extra = format!(
        "auto_approve = true, workspace = '{}', sandbox = {{ mode = 'read-only' }}",
        workspace.path().display()
    );
    let nvim = start(&mock, &extra, false, &[]).await;
    nvim.cmd("Agent go").await;
    let (result, _) = tool_result(&mock, 1, "t1");
    assert!(result.starts_with("as it was\n[stderr]\n"), "{result}");
    assert!(result.contains("kept.txt: Permission denied"), "{result}");
    nvim.wait_for_line(CHAT, "OK.").await;
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("kept.txt")).unwrap(),
        "as it was"
    );
}

#[tokio::test]
async fn checkhealth_shows_the_landlock_abi_and_the_sandbox_in_force() {
    if !landlock_here() {
        return;
    }
    let abi = sandbox::support().abi();
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![("ANTHROPIC_API_KEY".into(), "k".into())],
        setup: setup_lua("sandbox = { writable = { '/nonexistent/cache' } }"),
    })
    .await;
    let report = nvim.checkhealth().await;
    let report = report.as_str();
    assert!(report.contains(&format!("Landlock ABI {abi}")), "{report}");
    let (sockets, layers) = if sandbox::seccomp() {
        ("blocked", format!("Landlock ABI {abi}, seccomp"))
    } else {
        ("open", format!("Landlock ABI {abi}"))
    };
    assert!(
        report.contains(&format!(
            "sandbox in force: workspace-write, network allowed, local sockets {sockets} ({layers})"
        )),
        "{report}"
    );
    assert!(report.contains("commands may write in: "), "{report}");
    // What is refused and what is not, each said.
    if sandbox::seccomp() {
        assert!(
            report
                .contains("refused to commands: unix sockets, abstract ones too (Neovim's server"),
            "{report}"
        );
    }
    assert!(
        report.contains("not refused: reading files: every file you can read, a command can"),
        "{report}"
    );
    assert!(
        report.contains("not refused: the network: TCP and UDP, loopback services included"),
        "{report}"
    );
    assert!(
        report.contains("/nonexistent/cache (sandbox.writable) does not exist"),
        "{report}"
    );
    assert!(!report.contains("ERROR"), "{report}");
}

#[tokio::test]
async fn without_landlock_the_sandbox_is_off_with_a_warning_at_start_and_in_health() {
    let outside = outside_temp();
    let escape = outside.path().join("f");
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![bash(
                "t1",
                &format!("echo x > '{}'", escape.display()),
            )]),
            done("OK."),
        ],
    );
    let nvim = start(
        &mock,
        "auto_approve = true",
        false,
        &[("AGENT_NVIM_TEST_NO_LANDLOCK", "1")],
    )
    .await;
    nvim.cmd("Agent go").await;
    nvim.wait_for_line(CHAT, "OK.").await;
    // The command ran as it did before the sandbox: nothing failed.
    let (result, _) = tool_result(&mock, 1, "t1");
    assert_eq!(result, "\n[exit 0]");
    assert!(escape.exists());
    let warning = "agent: the sandbox is off: this kernel has no Landlock (it needs Linux 5.13 or later); commands run without it.";
    // Said once, in the chat (not as a message, which would stop the screen at a hit-enter
    // prompt while the prompt waits).
    let chat = nvim.buffer_lines(CHAT).await.join("\n");
    assert_eq!(chat.matches(warning).count(), 1, "{chat}");
    let report = nvim.checkhealth().await;
    let report = report.as_str();
    assert!(
        report.contains("Landlock is not available: commands run without a sandbox"),
        "{report}"
    );
    assert!(report.contains(warning), "{report}");
    assert!(!report.contains("ERROR"), "{report}");
}

#[tokio::test]
async fn a_bad_sandbox_option_is_named_and_commands_get_the_strictest_sandbox_until_fixed() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: setup_lua("sandbox = { mode = 'readonly', writable = { '~/.cache' } }"),
    })
    .await;
    let messages = nvim.messages().await;
    assert!(
        messages.contains(
            "agent: `sandbox.mode` should be \"workspace-write\", \"read-only\" or \"off\", got \"readonly\""
        ),
        "{messages}"
    );
    assert!(
        messages.contains("commands run in the strictest sandbox (read-only, no network"),
        "{messages}"
    );
    let sandbox = nvim
        .lua(
            "local s = require('agent.config').options.sandbox
             return { s.mode, s.network, #s.writable }",
            vec![],
        )
        .await;
    assert_eq!(
        sandbox,
        Value::Array(vec!["read-only".into(), false.into(), 0.into()])
    );
}

#[tokio::test]
async fn an_external_agent_configured_with_sandbox_true_runs_inside_the_sandbox() {
    if !landlock_here() {
        return;
    }
    // The workspace's parent is where the agent tries to write: not a temp directory.
    let base = outside_temp();
    let workspace = base.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![("ANTHROPIC_API_KEY".into(), "unused".into())],
        setup: setup_lua(&format!(
            "workspace = '{}', acp = {{ agents = {{ test = {{ cmd = {{ '{agent}' }}, sandbox = true }} }} }}",
            workspace.display()
        )),
    })
    .await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    nvim.cmd("Agent write").await;
    nvim.wait_for_line(CHAT, "outside: Permission denied (os error 13)")
        .await;
    assert!(workspace.join("written-by-agent.txt").exists());
    assert!(!base.path().join("written-by-agent.txt").exists());
}

/// The attack a review found: a command the sandbox allows without a question reaches the Neovim
/// that shows the question, through its server socket, and makes it do what the gate would
/// have asked about (here: write a file outside the workspace, set a global). `commands` are
/// run as the model's run_bash calls with `extra` in setup(); the Neovim also listens on a
/// socket in a directory of its own, which the second command finds by listing it. Returns the
/// tool results, whether the marker was written and whether `g:owned` was set.
async fn drive_neovim_through_its_socket(extra: &str) -> (Vec<String>, bool, bool) {
    let outside = outside_temp();
    let marker = outside.path().join("owned");
    let sockets = outside.path().join("run");
    std::fs::create_dir(&sockets).unwrap();
    let nvim_bin = crate::support::nvim::nvim_binary();
    let write = format!(
        "'{nvim}' --server \"$NVIM\" --remote-expr \"luaeval('vim.fn.writefile({{[[owned]]}}, [[{marker}]])')\"; echo \"[$NVIM]\"",
        nvim = nvim_bin.display(),
        marker = marker.display(),
    );
    let listed = format!(
        "for s in '{dir}'/*; do '{nvim}' --server \"$s\" --remote-expr \"execute('let g:owned = 1')\"; done; echo listed",
        dir = sockets.display(),
        nvim = nvim_bin.display(),
    );
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![bash("t1", &write)]),
            turn(vec![bash("t2", &listed)]),
            done("OK."),
        ],
    );
    let nvim = start(&mock, extra, true, &[]).await;
    let socket = sockets.join("nvim.sock");
    nvim.lua(
        "vim.fn.serverstart(...)",
        vec![Value::from(socket.to_str().unwrap())],
    )
    .await;
    nvim.cmd("Agent go").await;
    let (first, _) = tool_result(&mock, 1, "t1");
    let (second, _) = tool_result(&mock, 2, "t2");
    nvim.wait_for_line(CHAT, "OK.").await;
    let owned = nvim.lua("return vim.g.owned == 1", vec![]).await == Value::from(true);
    (vec![first, second], marker.exists(), owned)
}

#[tokio::test]
async fn a_sandboxed_command_cannot_drive_neovim_through_its_socket_even_with_nvim_passed() {
    if !landlock_here() || !sandbox::seccomp() {
        eprintln!("skipped: no Landlock or no seccomp filters here");
        return;
    }
    // NVIM passed on purpose, so the command knows the socket: the sandbox must refuse it.
    let (results, marker, owned) =
        drive_neovim_through_its_socket("auto_allow_sandboxed = true, pass_env = { 'NVIM' }").await;
    assert!(
        !results[0].contains("[]"),
        "NVIM was passed, so the command saw it: {}",
        results[0]
    );
    assert!(!marker, "the command wrote through Neovim: {results:?}");
    assert!(
        !owned,
        "the command set a global through Neovim: {results:?}"
    );
    assert!(results[1].contains("listed"), "{}", results[1]);
}

#[tokio::test]
async fn without_the_sandbox_the_same_commands_drive_neovim_so_the_attack_is_real() {
    // The control: unsandboxed and auto-approved, NVIM passed, the attack works. (Without
    // pass_env the first command gets no NVIM at all: see the test below.)
    let (results, marker, owned) = drive_neovim_through_its_socket(
        "auto_approve = true, sandbox = { mode = 'off' }, pass_env = { 'NVIM' }",
    )
    .await;
    assert!(marker, "{results:?}");
    assert!(owned, "{results:?}");
}

#[tokio::test]
async fn commands_get_no_editor_or_session_socket_variables_unless_pass_env_names_them() {
    let line = "echo \"[$NVIM][$NVIM_LISTEN_ADDRESS][$TMUX][$SSH_AUTH_SOCK][$DBUS_SESSION_BUS_ADDRESS][$DOCKER_HOST][$DISPLAY]\"";
    // (NVIM_LISTEN_ADDRESS is not set for Neovim: it would listen there itself.)
    let env = [
        ("TMUX", "/tmp/tmux-0/default,1,0"),
        ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"),
        ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/0/bus"),
        ("DOCKER_HOST", "unix:///run/docker.sock"),
        ("DISPLAY", ":0"),
    ];
    for (extra, want) in [
        // Unsandboxed, so only the environment keeps them out.
        (
            "auto_approve = true, sandbox = { mode = 'off' }",
            "[][][][][][][]\n\n[exit 0]".to_string(),
        ),
        (
            "auto_approve = true, sandbox = { mode = 'off' }, pass_env = { 'TMUX', 'DISPLAY' }",
            "[][][/tmp/tmux-0/default,1,0][][][][:0]\n\n[exit 0]".to_string(),
        ),
    ] {
        let mock = MockLlm::start(
            Wire::Anthropic,
            vec![turn(vec![bash("t1", line)]), done("OK.")],
        );
        let nvim = start(&mock, extra, false, &env).await;
        // Neovim gives its jobs NVIM (its own server): the backend has it.
        nvim.cmd("Agent go").await;
        let (result, ok) = tool_result(&mock, 1, "t1");
        assert!(ok);
        assert_eq!(result, want, "{extra}");
    }
}

#[tokio::test]
async fn where_the_kernel_cannot_keep_commands_from_sockets_auto_allow_sandboxed_asks_and_says_why_once(
) {
    if !landlock_here() {
        return;
    }
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![bash("t1", "touch one")]),
            done("First."),
            turn(vec![bash("t2", "touch two")]),
            done("Second."),
        ],
    );
    let nvim = start(
        &mock,
        "auto_allow_sandboxed = true",
        true,
        &[("AGENT_NVIM_TEST_NO_SECCOMP", "1")],
    )
    .await;
    nvim.cmd("Agent go").await;
    // Asked about, though auto_allow_sandboxed is set.
    nvim.wait_for_screen("Refuse with a reason").await;
    assert!(picker_open(&nvim).await);
    nvim.api.input("y").await.unwrap();
    nvim.wait_for_line(CHAT, "First.").await;
    nvim.cmd("Agent again").await;
    nvim.wait_for_screen("Refuse with a reason").await;
    nvim.api.input("y").await.unwrap();
    nvim.wait_for_line(CHAT, "Second.").await;
    let note = "auto_allow_sandboxed is not in force: this kernel has no seccomp filters, so the sandbox cannot keep commands from local sockets (Neovim's among them); each command is asked about (:checkhealth agent)";
    let chat = nvim.buffer_lines(CHAT).await.join("\n");
    assert_eq!(chat.matches(note).count(), 1, "{chat}");
    assert!(nvim.workspace.path().join("two").exists());
}
