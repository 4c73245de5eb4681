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

const CHAT: &str = "agent://chat";

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
    assert!(
        report.contains(&format!(
            "sandbox in force: workspace-write, network allowed (Landlock ABI {abi})"
        )),
        "{report}"
    );
    assert!(report.contains("commands may write in: "), "{report}");
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
    let messages = nvim.messages().await;
    assert_eq!(messages.matches(warning).count(), 1, "{messages}");
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
