//! Permission rules in a real Neovim (`setup({ permissions = ... })`), with the mock server: what
//! runs without a picker, what is refused under auto_approve and with which words, what is still
//! asked about, and what a planted file or a bad rule does.

use rmpv::Value;
use serde_json::json;

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{setup_lua, Nvim, Options};
use crate::support::tool_result;

const CHAT: &str = "agent: chat";

fn turn(parts: Vec<Part>) -> Reply {
    Reply::Turn {
        parts,
        usage: (10, 5),
    }
}

fn bash(id: &str, command: &str) -> Part {
    Part::ToolCall {
        id: id.into(),
        name: "run_bash".into(),
        args: json!({ "command": command }).to_string(),
    }
}

fn done(text: &str) -> Reply {
    turn(vec![Part::Text(text.into())])
}

/// A Neovim with a UI whose plugin is set up with `extra` (Lua table fields), against `mock`.
fn options(mock: &MockLlm, extra: &str) -> Options {
    Options {
        ui: Some((100, 34)),
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "k".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua(extra),
    }
}

async fn start(mock: &MockLlm, extra: &str) -> Nvim {
    Nvim::start(options(mock, extra)).await
}

async fn picker_open(nvim: &Nvim) -> bool {
    nvim.lua("return require('agent.approval').pending() > 0", vec![])
        .await
        == Value::from(true)
}

/// A mock whose model runs `command` (call `t1`), then says `OK.`.
fn one_command(command: &str) -> MockLlm {
    MockLlm::start(
        Wire::Anthropic,
        vec![turn(vec![bash("t1", command)]), done("OK.")],
    )
}

/// Sends a prompt, waits for the picker to ask, refuses, and checks nothing was planted.
async fn asked_and_refused(nvim: &Nvim) {
    nvim.cmd("Agent go").await;
    nvim.wait_for_screen("Refuse with a reason").await;
    assert!(picker_open(nvim).await);
    nvim.api.input("4").await.unwrap();
    nvim.wait_for_line(CHAT, "OK.").await;
    assert!(!nvim.workspace.path().join("PLANTED").exists());
}

const ALLOW: &str =
    "permissions = { allow = { 'run_bash(echo *)', 'run_bash(cargo test *)', 'run_bash(git status)' } }";

#[tokio::test]
async fn allowed_commands_run_without_a_picker_and_a_line_with_another_is_asked() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![bash(
                "t1",
                "echo allowed-ran && git status || cargo test --version",
            )]),
            turn(vec![bash("t2", "echo fine && touch PLANTED")]),
            done("OK."),
        ],
    );
    let nvim = start(&mock, ALLOW).await;
    nvim.cmd("Agent go").await;
    // The first line runs with nobody asked: its result reaches the model.
    let (result, _) = tool_result(&mock, 1, "t1");
    assert!(result.contains("allowed-ran"), "{result}");
    // The second holds a command no rule allows: the picker asks.
    nvim.wait_for_screen("Refuse with a reason").await;
    assert!(picker_open(&nvim).await);
    nvim.api.input("4").await.unwrap();
    nvim.wait_for_line(CHAT, "OK.").await;
    assert!(!nvim.workspace.path().join("PLANTED").exists());
}

#[tokio::test]
async fn a_deny_rule_refuses_under_auto_approve_with_the_rules_words() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![bash("t1", "touch made && rm -f made")]),
            done("OK."),
        ],
    );
    let nvim = start(
        &mock,
        "auto_approve = true, permissions = { deny = { 'run_bash(rm *)' } }",
    )
    .await;
    nvim.cmd("Agent go").await;
    let (result, ok) = tool_result(&mock, 1, "t1");
    assert_eq!(
        result,
        "Refused by the rule 'run_bash(rm *)' in permissions.deny."
    );
    assert!(!ok, "a refusal is an error result");
    // The chat's row says which rule refused it.
    nvim.wait_for_line(
        CHAT,
        "$ touch made && rm -f made -> declined by the rule 'run_bash(rm *)' in permissions.deny",
    )
    .await;
    nvim.wait_for_line(CHAT, "OK.").await;
    // Nothing of the line ran, not even its allowed part.
    assert!(!nvim.workspace.path().join("made").exists());
}

#[tokio::test]
async fn a_command_substitution_is_asked_about_even_when_its_words_are_allowed() {
    let mock = one_command("echo $(touch PLANTED)");
    let nvim = start(&mock, ALLOW).await;
    asked_and_refused(&nvim).await;
}

#[tokio::test]
async fn a_rules_file_planted_in_the_workspace_grants_nothing() {
    let mock = one_command("touch PLANTED");
    let nvim = start(&mock, "").await;
    // Where a cloned repository might try to grant itself permissions.
    let grant_all =
        r#"{"allow": ["run_bash(*)", "edit_file(**)"], "permissions": {"allow": ["run_bash(*)"]}}"#;
    for file in [
        "permissions.json",
        ".agent/permissions.json",
        ".nvim/agent/permissions.json",
        ".agent-nvim.json",
    ] {
        nvim.write(file, grant_all);
    }
    nvim.write(
        ".nvim.lua",
        "require('agent').setup({ permissions = { allow = { 'run_bash(*)' } } })",
    );
    asked_and_refused(&nvim).await;
}

#[tokio::test]
async fn a_bad_rule_is_named_at_setup_and_nothing_runs_until_it_is_fixed() {
    let mock = one_command("touch PLANTED");
    // Headless: with a UI, the error at setup waits for Enter (as it would for a person).
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "k".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua(
            "auto_approve = true, permissions = { deny = { 'run_bash(rm *)', 'Bash(curl *)' } }",
        ),
    })
    .await;
    let messages = nvim.messages().await;
    assert!(
        messages.contains(
            "agent: the rule 'Bash(curl *)' in permissions.deny: there is no tool 'Bash'; rules are for run_bash and edit_file"
        ),
        "{messages}"
    );
    assert!(
        messages.contains("nothing runs until the rules are fixed"),
        "{messages}"
    );
    nvim.cmd("Agent go").await;
    nvim.wait_for_line(CHAT, "Nothing runs until it is fixed")
        .await;
    assert!(mock.requests().is_empty(), "a prompt went to the model");
    assert!(!nvim.workspace.path().join("PLANTED").exists());
}

#[tokio::test]
async fn allow_always_saves_a_rule_a_restarted_neovim_honours_until_agent_permissions_removes_it() {
    const LINE: &str = "touch made && echo saved-ran";
    let mock = one_command(LINE);
    let nvim = start(&mock, "").await;
    nvim.cmd("Agent go").await;
    nvim.wait_for_screen("Always allow `touch made && echo saved-ran` in this project")
        .await;
    // A grant that lasts: its key twice.
    nvim.api.input("a").await.unwrap();
    nvim.wait_for_screen("press a again to confirm").await;
    nvim.api.input("a").await.unwrap();
    let (result, _) = tool_result(&mock, 1, "t1");
    assert!(result.contains("saved-ran"), "{result}");
    nvim.wait_for_line(CHAT, "allowed always in this project")
        .await;
    nvim.wait_for_line(CHAT, "OK.").await;
    let saved =
        std::fs::read_to_string(nvim._home.path().join("state/nvim/agent/permissions.json"))
            .unwrap();
    assert!(saved.contains(LINE), "{saved}");
    std::fs::remove_file(nvim.workspace.path().join("made")).unwrap();

    // A new Neovim in the same workspace runs the same line with nobody asked.
    let mock = one_command(LINE);
    let nvim = nvim
        .restart(options(
            &mock,
            "permissions = { deny = { 'run_bash(curl *)' } }",
        ))
        .await;
    nvim.cmd("Agent go").await;
    let (result, _) = tool_result(&mock, 1, "t1");
    assert!(result.contains("saved-ran"), "{result}");
    nvim.wait_for_line(CHAT, "OK.").await;
    assert!(!picker_open(&nvim).await);
    assert!(nvim.workspace.path().join("made").exists());

    // :Agent permissions lists both rules with where they came from; choosing the saved one
    // removes it.
    // Typed, not called: the list waits for a choice, as it does for a person.
    nvim.api.input(":Agent permissions<CR>").await.unwrap();
    nvim.wait_for_screen("run_bash(curl *)  (setup() · permissions.deny)")
        .await;
    let screen = nvim
        .wait_for_screen(
            "run_bash(touch made && echo saved-ran)  (saved for this project · remove)",
        )
        .await;
    let choice = screen
        .lines()
        .find(|l| l.contains("saved for this project"))
        .and_then(|l| l.trim_start().split(':').next())
        .unwrap()
        .to_string();
    nvim.api.input(&format!("{choice}<CR>")).await.unwrap();
    nvim.wait_for_screen("removed the saved rule").await;
    // The message waits for Enter, as it would for a person.
    nvim.api.input("<CR>").await.unwrap();
    let saved =
        std::fs::read_to_string(nvim._home.path().join("state/nvim/agent/permissions.json"))
            .unwrap();
    assert!(!saved.contains(LINE), "{saved}");

    // And the line is asked about again.
    let mock = one_command(LINE);
    let nvim = nvim.restart(options(&mock, "")).await;
    nvim.cmd("Agent go").await;
    nvim.wait_for_screen("Refuse with a reason").await;
    assert!(picker_open(&nvim).await);
}

/// The attacks a review found on `deny = { "run_bash(rm *)" }` under auto_approve: builtins that
/// evaluate their words and programs that run others. Each line would delete its file; each
/// must be refused (with the reason) and the file kept. (Run with the sandbox off: the deny
/// rule alone must hold.)
const PAST_A_DENY_RULE: &[(&str, &str)] = &[
    ("v1", "printf -v v 'a[\\x24(rm v1)]'; printf -v \"$v\" x"),
    ("v2", "printf -v v 'a[\\x24(rm v2)]'; declare -i n; n=$v"),
    ("v3", "printf -v v 'a[\\x24(rm v3)]'; read -r \"$v\" <<< x"),
    ("v4", "printf -v v 'a[\\x24(rm v4)]'; test -v \"$v\""),
    ("v5", "mapfile -C 'rm v5 #' -c 1 arr < in.txt"),
    ("v6", "compgen -C 'rm v6 #' x"),
    ("w1", "/usr/bin/time rm w1"),
    ("w2", "setpriv --reuid=0 rm w2"),
    ("w3", "prlimit --nofile=1024 rm w3"),
    ("w4", "fakeroot rm w4"),
    ("w5", "setarch x86_64 rm w5"),
    ("w6", "timeout 5 rm w6"),
    ("w7", "git -c alias.zz='!rm w7' zz"),
    ("w8", "awk 'BEGIN{system(\"rm w8\")}'"),
    ("w9", "sed -n '1e rm w9' in.txt"),
    ("w10", "bash -c 'rm w10'"),
    ("w11", "echo w11 | xargs rm"),
    ("w12", "find . -name w12 -exec rm {} +"),
];

#[tokio::test]
async fn under_auto_approve_a_deny_rule_holds_against_builtins_and_programs_that_run_others() {
    let replies: Vec<Reply> = PAST_A_DENY_RULE
        .iter()
        .map(|(file, line)| turn(vec![bash(file, line)]))
        .chain([done("OK.")])
        .collect();
    let mock = MockLlm::start(Wire::Anthropic, replies);
    let nvim = Nvim::start(Options {
        ui: None,
        ..options(
            &mock,
            "auto_approve = true, sandbox = { mode = 'off' }, permissions = { deny = { 'run_bash(rm *)' } }",
        )
    })
    .await;
    let ws = nvim.workspace.path().to_path_buf();
    std::fs::write(ws.join("in.txt"), "line\n").unwrap();
    for (file, _) in PAST_A_DENY_RULE {
        std::fs::write(ws.join(file), "keep").unwrap();
    }
    nvim.cmd("Agent go").await;
    nvim.wait_for_line(CHAT, "OK.").await;
    let mut ran = Vec::new();
    for (n, (file, line)) in PAST_A_DENY_RULE.iter().enumerate() {
        let (result, ok) = tool_result(&mock, n + 1, file);
        assert!(!ok, "{line}: {result}");
        assert!(
            result.starts_with("Refused"),
            "{line} was not refused: {result}"
        );
        if !ws.join(file).exists() {
            ran.push(*line);
        }
    }
    assert!(ran.is_empty(), "deleted past the deny rule: {ran:?}");
}

#[tokio::test]
async fn an_allow_rule_for_printf_and_ls_does_not_run_a_workspace_program_through_path() {
    let line = "printf -v PATH %s \"$PWD/bin\"; ls";
    let mock = one_command(line);
    let nvim = Nvim::start(Options {
        ui: None,
        ..options(
            &mock,
            "permissions = { allow = { 'run_bash(printf *)', 'run_bash(ls *)' } }",
        )
    })
    .await;
    let ws = nvim.workspace.path().to_path_buf();
    std::fs::create_dir(ws.join("bin")).unwrap();
    std::fs::write(ws.join("bin/ls"), "#!/bin/sh\ntouch PLANTED\n").unwrap();
    std::fs::set_permissions(
        ws.join("bin/ls"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    nvim.cmd("Agent go").await;
    nvim.wait_for_line(CHAT, "OK.").await;
    let (result, ok) = tool_result(&mock, 1, "t1");
    assert!(!ok, "{result}");
    assert!(!ws.join("PLANTED").exists(), "{result}");
}
