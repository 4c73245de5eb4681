//! External agents over ACP in a real Neovim: `:Agent acp {name}` with the project's own test
//! agent (tests' `acp-test-agent`), the same chat, picker, path check and buffers.

use std::path::PathBuf;
use std::time::Duration;

use rmpv::Value;

use crate::support::nvim::{setup_lua, Nvim, Options};
use crate::support::process::{alive, all_gone};

const CHAT: &str = "agent: chat";

/// A Neovim whose config names the test agent `test` (in `mode`), started and connected.
async fn connected(ui: Option<(i64, i64)>, mode: &str, extra: &str) -> Nvim {
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let nvim = Nvim::start(Options {
        ui,
        env: vec![("ANTHROPIC_API_KEY".into(), "unused".into())],
        setup: setup_lua(&format!(
            "acp = {{ agents = {{ test = {{ cmd = {{ '{agent}', '{mode}' }} }} }} }}, {extra}"
        )),
    })
    .await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    nvim
}

/// The JSON the test agent reported for `label` (it reports each reply it got as a chat line).
fn reported(lines: &[String], label: &str) -> serde_json::Value {
    let prefix = format!("{label}: ");
    let line = lines
        .iter()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no report for {label} in:\n{}", lines.join("\n")));
    serde_json::from_str(&line[prefix.len()..]).unwrap()
}

/// A Neovim connected to the test agent in `spawn-child` mode, and the pids of the agent and
/// the `sleep` it started (read from the log the agent keeps).
async fn connected_with_a_child() -> (Nvim, Vec<i32>) {
    let log = tempfile::NamedTempFile::new().unwrap();
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![(
            "ACP_TEST_AGENT_LOG".into(),
            log.path().display().to_string(),
        )],
        setup: setup_lua(&format!(
            "acp = {{ agents = {{ test = {{ cmd = {{ '{agent}', 'spawn-child' }} }} }} }}"
        )),
    })
    .await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    let text = std::fs::read_to_string(log.path()).unwrap();
    let pids = ["pid", "grandchild"]
        .iter()
        .map(|key| {
            text.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find_map(|v| v[*key].as_i64())
                .unwrap_or_else(|| panic!("no {key} in the agent's log:\n{text}"))
                as i32
        })
        .collect();
    (nvim, pids)
}

#[tokio::test]
async fn completion_lists_configured_agents_and_the_presets() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: setup_lua("acp = { agents = { mine = { cmd = { 'my-agent' } } } }"),
    })
    .await;
    let names = nvim
        .lua(
            "return vim.fn.getcompletion('Agent acp ', 'cmdline')",
            vec![],
        )
        .await;
    let names: Vec<&str> = names
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(names, ["claude", "codex", "gemini", "mine", "opencode"]);
    let subs = nvim
        .lua("return vim.fn.getcompletion('Agent ', 'cmdline')", vec![])
        .await;
    assert!(
        subs.as_array().unwrap().contains(&Value::from("acp")),
        "{subs:?}"
    );
}

#[tokio::test]
async fn chat_shows_thoughts_messages_plans_and_tool_rows_updated_in_place() {
    let nvim = connected(None, "normal", "").await;
    nvim.cmd("Agent chat").await;
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    let body = lines.join("\n");
    assert!(
        body.contains("… thought (1 line)\n  Thinking about it."),
        "{body}"
    );
    assert!(body.contains("Hello, world"), "{body}");
    assert!(
        body.contains("Plan\n- [x] Read the notes\n- [~] Answer"),
        "{body}"
    );
    assert!(
        body.contains("▸ Read notes.txt\n  1 line\n  [terminal term-1]"),
        "{body}"
    );
    assert!(!body.contains("stray line"), "{body}");
}

#[tokio::test]
async fn fs_requests_go_through_the_path_check_and_the_buffers() {
    let nvim = connected(None, "normal", "").await;
    nvim.write("inside.txt", "one\ntwo\nthree\n");
    nvim.write("open.txt", "on disk\n");
    nvim.write("dirty.txt", "mine\n");
    std::fs::write(
        nvim.workspace.path().parent().unwrap().join("outside.txt"),
        "secret outside",
    )
    .unwrap();
    // open.txt is loaded with unsaved text: the agent reads the buffer. dirty.txt too: never written.
    nvim.cmd("edit open.txt").await;
    nvim.lua(
        "vim.api.nvim_buf_set_lines(0, 0, -1, false, {'unsaved buffer text'})",
        vec![],
    )
    .await;
    nvim.cmd("hide edit dirty.txt").await;
    nvim.lua(
        "vim.api.nvim_buf_set_lines(0, 0, -1, false, {'my unsaved work'})",
        vec![],
    )
    .await;
    nvim.cmd("Agent fs").await;
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    assert_eq!(
        reported(&lines, "read inside.txt")["result"]["content"],
        "two\n"
    );
    for label in ["read ../outside.txt", "read absolute outside"] {
        let error = &reported(&lines, label)["error"];
        assert_eq!(error["code"], -32602, "{label}");
        assert!(
            error["message"].as_str().unwrap().starts_with("Refused: '"),
            "{label}: {error}"
        );
    }
    assert!(!lines.join("\n").contains("secret outside"));
    assert_eq!(
        reported(&lines, "read open.txt")["result"]["content"],
        "unsaved buffer text\n"
    );
    assert_eq!(nvim.read("made/by/agent.txt"), "written\n");
    assert!(reported(&lines, "write dirty.txt").get("error").is_some());
    assert_eq!(nvim.read("dirty.txt"), "mine\n");
    let buffer = nvim
        .lua(
            "return vim.api.nvim_buf_get_lines(vim.fn.bufnr('dirty.txt'), 0, -1, false)",
            vec![],
        )
        .await;
    assert_eq!(buffer, Value::Array(vec![Value::from("my unsaved work")]));
    assert_eq!(
        reported(&lines, "write ../escape.txt")["error"]["code"],
        -32602
    );
    assert!(!nvim
        .workspace
        .path()
        .parent()
        .unwrap()
        .join("escape.txt")
        .exists());
    assert_eq!(reported(&lines, "unknown request")["error"]["code"], -32601);
}

#[tokio::test]
async fn a_permission_request_opens_the_picker_with_the_agents_options_and_diff() {
    let nvim = connected(Some((100, 34)), "normal", "").await;
    nvim.cmd("Agent permission").await;
    let screen = nvim.wait_for_screen("Always allow").await;
    for expected in [
        "Edit notes.txt",
        "1/y/<CR>   Allow",
        "2          Always allow",
        "3/n        Reject",
        "-a",
        "+b",
    ] {
        assert!(
            screen.contains(expected),
            "{expected:?} should be on screen:\n{screen}"
        );
    }
    nvim.api.input("1").await.unwrap();
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    assert_eq!(
        reported(&lines, "permission")["result"]["outcome"],
        serde_json::json!({"outcome": "selected", "optionId": "allow-once"})
    );
}

#[tokio::test]
async fn an_agents_permission_title_command_and_option_names_are_shown_escaped() {
    let nvim = connected(Some((100, 34)), "normal", "").await;
    nvim.cmd("Agent spoof").await;
    let screen = nvim.wait_for_screen("Always allow").await;
    for expected in [
        r" Run touch PWNED #\r\e[2Kls -la ",
        r"│touch PWNED #\r\e[2Kls -la",
        r"1/y/<CR>   Allow \u{202e}ti",
    ] {
        assert!(
            screen.contains(expected),
            "{expected:?} should be on screen:\n{screen}"
        );
    }
    assert!(
        !screen.contains('\u{1b}') && !screen.contains('\u{202e}'),
        "{screen}"
    );
    nvim.api.input("n").await.unwrap();
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    assert_eq!(
        reported(&lines, "permission")["result"]["outcome"],
        serde_json::json!({"outcome": "selected", "optionId": "reject"})
    );
    assert!(lines
        .iter()
        .any(|l| l.contains(r"Run touch PWNED #\r\e[2Kls -la")));
}

/// An agent's shell command is previewed as a command (where it runs, no diff colours), not as
/// a diff: the request says which, rather than Lua guessing from the tool's name.
#[tokio::test]
async fn an_agents_execute_permission_shows_the_command_preview_not_a_diff() {
    let nvim = connected(Some((80, 24)), "normal", "").await;
    nvim.cmd("Agent cancel").await;
    let screen = nvim.wait_for_screen("Always allow").await;
    assert!(screen.contains("│sleep 100"), "{screen}");
    assert!(screen.contains(" in "), "{screen}");
    assert!(!screen.contains("timeout"), "{screen}");
    assert!(!screen.contains("(no preview)"), "{screen}");
    let kind = nvim
        .lua(
            "return vim.b[vim.fn.bufnr('agent://approval-preview')].agent_preview",
            vec![],
        )
        .await;
    assert_eq!(kind, Value::from("command"));
    nvim.api.input("n").await.unwrap();
    let lines = nvim.wait_for_line(CHAT, "permission: ").await;
    assert_eq!(
        reported(&lines, "permission")["result"]["outcome"],
        serde_json::json!({"outcome": "selected", "optionId": "reject"})
    );
}

#[tokio::test]
async fn headless_the_permission_is_cancelled_and_auto_approve_picks_allow_always() {
    let nvim = connected(None, "normal", "").await;
    nvim.cmd("Agent permission").await;
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    assert_eq!(
        reported(&lines, "permission")["result"]["outcome"],
        serde_json::json!({"outcome": "cancelled"})
    );

    let nvim = connected(None, "normal", "auto_approve = true").await;
    nvim.cmd("Agent permission").await;
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    assert_eq!(
        reported(&lines, "permission")["result"]["outcome"],
        serde_json::json!({"outcome": "selected", "optionId": "always"})
    );
}

#[tokio::test]
async fn agent_stop_cancels_a_pending_permission_and_the_turn() {
    let nvim = connected(Some((100, 34)), "normal", "").await;
    nvim.cmd("Agent cancel").await;
    nvim.wait_for_screen("Run sleep 100").await;
    nvim.cmd("Agent stop").await;
    let lines = nvim.wait_for_line(CHAT, "cancelled").await;
    assert_eq!(
        reported(&lines, "permission")["result"]["outcome"],
        serde_json::json!({"outcome": "cancelled"})
    );
    nvim.wait_for("require('agent.approval').pending() == 0")
        .await;
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
}

#[tokio::test]
async fn an_agent_that_crashes_mid_turn_gives_a_clear_message_and_the_ui_stays_usable() {
    let nvim = connected(None, "normal", "").await;
    nvim.cmd("Agent crash").await;
    let lines = nvim.wait_for_line(CHAT, "exited").await;
    let body = lines.join("\n");
    assert!(body.contains("agent: test exited"), "{body}");
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
    // :Agent new goes back to the built-in agent; the chat works.
    nvim.cmd("Agent new here").await;
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
}

#[tokio::test]
async fn a_command_that_is_not_installed_says_so() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: setup_lua("acp = { agents = { ghost = { cmd = { 'no-such-agent-binary-xyz' } } } }"),
    })
    .await;
    nvim.cmd("Agent acp ghost").await;
    let lines = nvim
        .wait_for_line(CHAT, "could not start 'no-such-agent-binary-xyz'")
        .await;
    assert!(
        lines.join("\n").contains("is it installed and on PATH?"),
        "{lines:?}"
    );
}

#[tokio::test]
async fn quitting_neovim_kills_the_agents_process_tree() {
    let (mut nvim, pids) = connected_with_a_child().await;
    assert!(pids.iter().all(|p| alive(*p)));
    let _ = nvim.api.command("qa!").await;
    let _ = tokio::time::timeout(Duration::from_secs(10), nvim.child.wait()).await;
    assert!(
        all_gone(&pids, Duration::from_secs(5)).await,
        "the agent or its child ({pids:?}) outlived Neovim"
    );
}

#[tokio::test]
async fn an_agent_that_never_answers_initialize_times_out_with_a_clear_message() {
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: setup_lua(&format!("acp = {{ connect_timeout = 0.5, agents = {{ mute = {{ cmd = {{ '{agent}', 'silent' }} }} }} }}")),
    })
    .await;
    nvim.cmd("Agent acp mute").await;
    let lines = nvim.wait_for_line(CHAT, "did not answer initialize").await;
    assert!(
        lines
            .join("\n")
            .contains("agent: mute did not answer initialize"),
        "{lines:?}"
    );
    // Prompts go back to the built-in agent's path (here: no key configured, a clear error).
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
}

#[tokio::test]
async fn agent_new_ends_the_external_agent_and_its_process_tree() {
    let (nvim, pids) = connected_with_a_child().await;
    assert!(pids.iter().all(|p| alive(*p)));
    nvim.cmd("Agent new here").await;
    assert!(
        all_gone(&pids, Duration::from_secs(5)).await,
        "the agent or its child ({pids:?}) outlived :Agent new"
    );
}

/// fs/read_text_file serves a loaded buffer's text for the path the backend resolved inside the
/// workspace. If the buffer lookup resolved that path again, a directory swapped for a link to
/// the outside after the check would hand over the text of a buffer of an outside file (here
/// one with unsaved text, as a user editing a credentials file has).
#[tokio::test]
async fn the_buffer_of_a_checked_path_is_not_looked_up_again_through_a_link_swapped_in() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: String::new(),
    })
    .await;
    let root = std::fs::canonicalize(nvim.workspace.path()).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let outside = std::fs::canonicalize(outside.path()).unwrap();
    std::fs::write(outside.join("creds"), "on disk\n").unwrap();
    nvim.cmd(&format!("edit {}", outside.join("creds").display()))
        .await;
    nvim.lua(
        "vim.api.nvim_buf_set_lines(0, 0, -1, false, {'aws secret outside'})",
        vec![],
    )
    .await;
    // What the backend checked while `d` was a directory; `d` is now a link to the outside.
    std::os::unix::fs::symlink(&outside, root.join("d")).unwrap();
    let checked = root.join("d/creds").to_str().unwrap().to_string();
    let lookup = |what: &str| format!("return require('agent.rpc').{what}(...)");
    assert_eq!(
        nvim.lua(&lookup("buffer_text"), vec![Value::from(checked.clone())])
            .await,
        Value::Nil
    );
    // Nor is the outside buffer's unsaved state what decides whether the path may be edited.
    let modified = nvim
        .lua(
            "return require('agent.rpc').buffer_state(...).modified",
            vec![Value::from(checked)],
        )
        .await;
    assert_eq!(modified, Value::from(false));
}

/// `:Agent resume`, the picker choosing the first row for which Lua expression `pick` (of
/// `item`) is true, until the test agent's replayed session is resumed: the chat's lines then,
/// and every row as the picker showed it.
async fn resume_picking(nvim: &Nvim, pick: &str) -> (Vec<String>, Vec<String>) {
    resume_picking_until(nvim, pick, "resumed: Fix the parser").await
}

/// [`resume_picking`], waiting for the chat line `until`.
async fn resume_picking_until(nvim: &Nvim, pick: &str, until: &str) -> (Vec<String>, Vec<String>) {
    nvim.lua(
        &format!(
            "vim.ui.select = function(items, opts, on_choice) \
               _G.listed = vim.tbl_map(opts.format_item, items) \
               for _, item in ipairs(items) do \
                 if {pick} then return on_choice(item) end \
               end end"
        ),
        vec![],
    )
    .await;
    nvim.cmd("Agent resume").await;
    let lines = nvim.wait_for_line(CHAT, until).await;
    let listed = nvim.lua("return _G.listed", vec![]).await;
    let listed = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    (lines, listed)
}

#[tokio::test]
async fn resume_lists_the_agents_own_sessions_by_its_name_and_loads_one_into_the_chat() {
    let nvim = connected(None, "normal", "").await;
    // The picker lists every row and picks the agent's `earlier-1`.
    let (lines, listed) = resume_picking(&nvim, "item.session == 'earlier-1'").await;
    // The agent's sessions, then the row that deletes one (the agent deletes it).
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(listed[2], "✗ delete one of them…");
    assert!(
        listed[0].starts_with("test: Fix the parser · ") && listed[0].ends_with(" ago"),
        "{listed:?}"
    );
    assert_eq!(listed[1], "test: earlier-2");
    let rows = nvim
        .lua(
            "return vim.tbl_map(function(s) return s.id .. ' ' .. s.agent end, \
             require('agent').sessions())",
            vec![],
        )
        .await;
    assert_eq!(
        rows,
        Value::Array(vec![
            Value::from("agent:test:earlier-1 test"),
            Value::from("agent:test:earlier-2 test"),
        ])
    );
    // The replayed prompt, the answer and the tool row, as a live turn shows them.
    let body = lines.join("\n");
    assert!(body.contains("## You\n\nFix the parser\n"), "{body}");
    assert!(body.contains("## Agent\n\nThe parser is fixed."), "{body}");
    assert!(body.contains("▸ Edit parser.rs"), "{body}");
    assert!(!body.contains("connected to test"), "{body}");
    // The next prompt goes to the loaded session.
    nvim.cmd("Agent which session").await;
    nvim.wait_for_line(CHAT, "prompted in: \"earlier-1\"").await;
}

#[tokio::test]
async fn an_agent_that_cannot_list_is_resumed_from_our_saved_file_through_session_load() {
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let options = |session: &str| Options {
        ui: None,
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "unused".into()),
            ("ACP_TEST_AGENT_SESSION".into(), session.into()),
        ],
        setup: setup_lua(&format!(
            "acp = {{ agents = {{ test = {{ cmd = {{ '{agent}', 'load-only' }} }} }} }}"
        )),
    };
    let nvim = Nvim::start(options("first")).await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    nvim.cmd("Agent which session").await;
    nvim.wait_for_line(CHAT, "prompted in: \"first\"").await;
    // Another Neovim, another process of the agent, in a session of its own.
    let nvim = nvim.restart(options("second")).await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    let (lines, listed) = resume_picking(&nvim, "true").await;
    // One conversation, then the rows that rename or delete one.
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(
        listed[1..],
        ["✎ rename one of them…", "✗ delete one of them…"]
    );
    assert!(
        listed[0].starts_with("test: which session · ")
            && listed[0].ends_with(" · 1 prompt · 0 tokens"),
        "{listed:?}"
    );
    assert!(
        lines.join("\n").contains("The parser is fixed."),
        "{lines:#?}"
    );
    // The next prompt goes to the session loaded, and on in the same file.
    nvim.cmd("Agent which session").await;
    nvim.wait_for_line(CHAT, "prompted in: \"first\"").await;
    let rows = nvim
        .lua(
            "return vim.tbl_map(function(s) return s.agent .. ' ' .. s.prompts end, \
             require('agent').sessions())",
            vec![],
        )
        .await;
    assert_eq!(rows, Value::Array(vec![Value::from("test 2")]));
}

#[tokio::test]
async fn an_agents_write_is_undone_by_a_rewind_of_the_code() {
    let nvim = connected(None, "normal", "").await;
    nvim.write("inside.txt", "one\ntwo\nthree\n");
    nvim.cmd("Agent fs").await;
    nvim.wait_for_line(CHAT, "done (end_turn)").await;
    assert_eq!(nvim.read("made/by/agent.txt"), "written\n");
    // No buffer holds dirty.txt here, so the agent wrote it too.
    assert_eq!(nvim.read("dirty.txt"), "clobbered");
    // The prompt is this conversation's rewind point; its code goes back to before the write.
    let points = nvim
        .lua(
            "return vim.tbl_map(function(p) return p.row end, require('agent').rewind_points() or {})",
            vec![],
        )
        .await;
    let rows: Vec<&str> = points
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row.as_str().unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(
        rows[0].starts_with("1 · fs · 2 files changed · "),
        "{rows:?}"
    );
    nvim.lua("require('agent').rewind(1, 'code')", vec![]).await;
    let made = nvim.workspace.path().join("made/by/agent.txt");
    nvim.wait_for(&format!("vim.fn.filereadable('{}') == 0", made.display()))
        .await;
    assert!(!nvim.workspace.path().join("dirty.txt").exists());
    assert_eq!(nvim.read("inside.txt"), "one\ntwo\nthree\n");
}

#[tokio::test]
async fn an_agents_edit_changed_before_allowing_is_written_as_the_person_wrote_it_and_the_agent_is_told(
) {
    let nvim = connected(Some((120, 36)), "chat", "").await;
    nvim.write("notes.txt", "a\nb\n");
    nvim.cmd("Agent editwrite").await;
    nvim.wait_for_screen("Edit before allowing").await;
    nvim.api.input("e").await.unwrap();
    nvim.wait_for_screen("proposal · :w allows it · :q goes back")
        .await;
    nvim.api
        .input("2GccB, said the person<Esc>:w<CR>")
        .await
        .unwrap();
    nvim.wait_for_line(CHAT, "edit write: ").await;
    assert_eq!(nvim.read("notes.txt"), "a\nB, said the person\n");
    nvim.wait_for_line(CHAT, "edited, allowed once").await;
    // The agent hears of it at the start of its next prompt (once this turn is over).
    nvim.wait_for("not require('agent.chat').busy()").await;
    nvim.cmd("Agent usage").await;
    let lines = nvim.wait_for_line(CHAT, "prompt: ").await;
    let prompt = reported(&lines, "prompt");
    let prompt = prompt.as_str().unwrap();
    assert!(
        prompt.starts_with("The user changed your edit of notes.txt before it was written; their changes to your proposal:\n"),
        "{prompt}"
    );
    assert!(prompt.contains("-B\n+B, said the person\n"), "{prompt}");
    assert!(prompt.ends_with("\n\nusage"), "{prompt}");
}

#[tokio::test]
async fn an_agent_that_never_wrote_through_the_client_is_not_offered_the_edit() {
    let nvim = connected(Some((120, 36)), "chat", "").await;
    nvim.write("notes.txt", "a\n");
    nvim.cmd("Agent permission").await;
    let screen = nvim.wait_for_screen("Always allow").await;
    assert!(!screen.contains("Edit before allowing"), "{screen}");
}

/// Sends `prompt` as typed in the input (no command-line parsing of its `;` or `$`).
async fn ask(nvim: &Nvim, prompt: &str) {
    nvim.lua("require('agent').ask(...)", vec![Value::from(prompt)])
        .await;
}

#[tokio::test]
async fn a_terminals_newest_lines_show_under_its_row_while_it_runs_then_its_exit_code() {
    let nvim = connected(None, "normal", "auto_approve = true").await;
    ask(
        &nvim,
        "terminal-unasked for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.4; done; exit 2",
    )
    .await;
    let running = nvim.wait_for_line(CHAT, "  line 6").await;
    // While it runs: the row, then its newest five lines, unfolded; nothing older.
    let at = running
        .iter()
        .position(|l| l.starts_with("… Run something"))
        .unwrap_or_else(|| panic!("no running row in:\n{}", running.join("\n")));
    assert_eq!(
        running[at + 1..at + 6],
        ["  line 2", "  line 3", "  line 4", "  line 5", "  line 6"],
        "{}",
        running.join("\n")
    );
    assert!(!running.contains(&"  line 1".to_string()));
    // Once it has ended: the whole output under the finished row, then the exit code.
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    let body = lines.join("\n");
    assert!(
        body.contains("▸ Run something\n  line 1\n  line 2"),
        "{body}"
    );
    assert!(body.contains("  line 8\n  [exit 2]"), "{body}");
    assert_eq!(reported(&lines, "exit")["result"]["exitCode"], 2);
}

#[tokio::test]
async fn a_terminal_nobody_allowed_opens_the_picker_and_when_refused_never_runs() {
    let nvim = connected(Some((100, 34)), "normal", "").await;
    ask(&nvim, "terminal-unasked touch ran.txt").await;
    let screen = nvim.wait_for_screen("Run touch ran.txt").await;
    assert!(screen.contains("│touch ran.txt"), "{screen}");
    assert!(
        screen.contains("3/n ") || screen.contains("2/n "),
        "{screen}"
    );
    nvim.api.input("n").await.unwrap();
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    assert_eq!(
        reported(&lines, "create")["error"]["message"],
        "the user refused to run `touch ran.txt`"
    );
    assert!(!nvim.workspace.path().join("ran.txt").exists());
}

#[tokio::test]
async fn agent_stop_kills_the_agents_running_terminals() {
    let nvim = connected(None, "normal", "auto_approve = true").await;
    let marker = crate::support::process::unique_marker("nvim-acp-terminal-stop");
    ask(
        &nvim,
        &format!("terminal-unasked echo begun; exec -a {marker} sleep 1000"),
    )
    .await;
    nvim.wait_for_line(CHAT, "  begun").await;
    assert!(!crate::support::process::with_marker(&marker).is_empty());
    nvim.cmd("Agent stop").await;
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
    assert!(
        crate::support::process::marked_survivors(&marker, Duration::from_secs(3))
            .await
            .is_empty()
    );
}

/// Options for a Neovim whose test agent `test` runs in `mode` and logs what it receives to
/// `log`.
fn logged_agent(mode: &str, log: &std::path::Path, ui: Option<(i64, i64)>) -> Options {
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    Options {
        ui,
        env: vec![("ACP_TEST_AGENT_LOG".into(), log.display().to_string())],
        setup: setup_lua(&format!(
            "acp = {{ agents = {{ test = {{ cmd = {{ '{agent}', '{mode}' }} }} }} }}"
        )),
    }
}

/// The params of every `method` request the test agent logged.
fn logged(log: &std::path::Path, method: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|e| e["received"].as_str().map(str::to_string))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
        .filter(|m| m["method"] == method)
        .map(|m| m["params"].clone())
        .collect()
}

async fn completions(nvim: &Nvim, line: &str) -> Vec<String> {
    let got = nvim
        .lua(
            "return vim.fn.getcompletion(..., 'cmdline')",
            vec![Value::from(line)],
        )
        .await;
    got.as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn an_agents_modes_and_options_are_shown_completed_switched_and_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let nvim = Nvim::start(logged_agent("choices", &log, Some((120, 30)))).await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    nvim.wait_for_screen("Ask · test Fast model").await;
    assert_eq!(completions(&nvim, "Agent mode ").await, ["ask", "code"]);
    assert_eq!(completions(&nvim, "Agent option ").await, ["model", "web"]);
    assert_eq!(completions(&nvim, "Agent option web ").await, ["on", "off"]);
    assert_eq!(completions(&nvim, "Agent model ").await, ["fast", "smart"]);

    nvim.cmd("Agent mode code").await;
    nvim.wait_for_screen("Code · test Fast model").await;
    nvim.cmd("Agent model smart").await;
    nvim.wait_for_screen("Code · test Smart model").await;
    nvim.cmd("Agent option web on").await;
    nvim.wait_for_screen("Code · test Smart model").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while logged(&log, "session/set_config_option").len() < 2 {
        assert!(std::time::Instant::now() < deadline, "web was never set");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        logged(&log, "session/set_mode"),
        [serde_json::json!({"sessionId": "s-1", "modeId": "code"})]
    );
    let set = logged(&log, "session/set_config_option");
    assert_eq!(
        set.iter().map(|p| p["value"].clone()).collect::<Vec<_>>(),
        [serde_json::json!("smart"), serde_json::json!(true)],
        "{set:?}"
    );
    // Not offered: said, nothing sent.
    nvim.lua("pcall(vim.cmd, 'Agent mode yolo')", vec![]).await;
    let messages = nvim.messages().await;
    assert!(
        messages.contains("agent: test has no mode 'yolo'; its modes: ask, code"),
        "{messages}"
    );
    assert_eq!(logged(&log, "session/set_mode").len(), 1);

    // The next session of this agent gets the same choices without being asked.
    std::fs::remove_file(&log).unwrap();
    let nvim = nvim
        .restart(logged_agent("choices", &log, Some((120, 30))))
        .await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_screen("Code · test Smart model").await;
    assert_eq!(
        logged(&log, "session/set_mode"),
        [serde_json::json!({"sessionId": "s-1", "modeId": "code"})]
    );
    let mut values: Vec<String> = logged(&log, "session/set_config_option")
        .iter()
        .map(|p| format!("{}={}", p["configId"].as_str().unwrap(), p["value"]))
        .collect();
    values.sort();
    assert_eq!(values, ["model=\"smart\"", "web=true"]);
}

#[tokio::test]
async fn usage_and_the_title_an_agent_reports_show_in_the_winbar() {
    let nvim = connected(Some((120, 30)), "normal", "").await;
    nvim.cmd("Agent info").await;
    // Once the turn has ended (during it the winbar says thinking).
    let screen = nvim.wait_for_screen("idle · Fix the failing test").await;
    assert!(screen.contains("45.2k/200.0k ctx"), "{screen}");
    assert!(screen.contains("$0.42"), "{screen}");
}

/// The names of the slash commands the input's completion offers now.
async fn slash_names(nvim: &Nvim) -> Vec<String> {
    let names = nvim
        .lua(
            "return vim.tbl_map(function(c) return c.name end, require('agent.slash').commands())",
            vec![],
        )
        .await;
    names
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn the_slash_commands_offered_are_those_that_apply_to_the_agent_connected() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let nvim = Nvim::start(logged_agent("choices", &log, None)).await;
    let native = slash_names(&nvim).await;
    for name in ["compact", "model", "new"] {
        assert!(native.contains(&name.to_string()), "{native:?}");
    }
    assert!(!native.contains(&"mode".to_string()) && !native.contains(&"option".to_string()));
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    nvim.wait_for("#require('agent.choices').options() > 0")
        .await;
    let agent = slash_names(&nvim).await;
    for name in ["mode", "option", "model", "new", "rewind"] {
        assert!(agent.contains(&name.to_string()), "{agent:?}");
    }
    // Its context is the agent's: our /compact would summarise nothing.
    assert!(!agent.contains(&"compact".to_string()), "{agent:?}");
    // Typed, /mode goes to the agent as :Agent mode does.
    nvim.lua(
        "require('agent.slash').run('/mode code', require('agent'))",
        vec![],
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while logged(&log, "session/set_mode").is_empty() {
        assert!(std::time::Instant::now() < deadline, "set_mode never sent");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn an_agent_that_wants_a_login_is_logged_in_with_agent_login_and_its_session_retried() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let nvim = Nvim::start(logged_agent("login", &log, None)).await;
    nvim.cmd("Agent acp test").await;
    let lines = nvim.wait_for_line(CHAT, "needs you to log in first").await;
    assert!(
        lines.contains(&"  Log in with a key (key, by the agent)".to_string()),
        "{}",
        lines.join("\n")
    );
    assert!(lines.contains(&"  Log in in a terminal (tty, in a terminal)".to_string()));
    assert_eq!(completions(&nvim, "Agent login ").await, ["key", "tty"]);
    // vim.ui.select picks the first: the agent's own method.
    nvim.choose_first().await;
    nvim.cmd("Agent login").await;
    nvim.wait_for_line(CHAT, "logged in to test").await;
    assert_eq!(
        logged(&log, "authenticate"),
        [serde_json::json!({"methodId": "key"})]
    );
    assert_eq!(logged(&log, "session/new").len(), 2);
    nvim.cmd("Agent usage").await;
    nvim.wait_for_line(CHAT, "done (end_turn)").await;
}

#[tokio::test]
async fn a_terminal_login_runs_the_agents_command_in_a_terminal_and_starts_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let auth = dir.path().join("auth");
    let mut options = logged_agent("login", &log, None);
    options
        .env
        .push(("ACP_TEST_AGENT_AUTH".into(), auth.display().to_string()));
    let nvim = Nvim::start(options).await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "needs you to log in first").await;
    // What runs is asked about first, shown whole; "Run it" is the first choice.
    nvim.lua(
        "vim.ui.select = function(items, opts, done) _G.asked = opts.prompt done(items[1]) end",
        vec![],
    )
    .await;
    nvim.cmd("Agent login tty").await;
    let asked = nvim.lua("return _G.asked", vec![]).await;
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    assert_eq!(
        asked.as_str().unwrap(),
        format!(
            "agent: log in to test by running `ACP_TEST_LOGIN=1 {agent} login login-terminal` in a terminal (outside any sandbox)?"
        )
    );
    // The terminal ran `acp-test-agent login login-terminal`, which wrote the proof and exited
    // 0; the agent was started again and no longer wants a login.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let lines = nvim.buffer_lines(CHAT).await;
        if lines
            .iter()
            .filter(|l| l.contains("connected to test (ACP)"))
            .count()
            >= 2
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never started again:\n{}",
            lines.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(auth.exists());
    nvim.cmd("Agent usage").await;
    nvim.wait_for_line(CHAT, "done (end_turn)").await;
}

#[tokio::test]
async fn an_agents_configured_directories_are_read_only_roots_unless_writable() {
    let extra = tempfile::tempdir().unwrap();
    let extra_root = std::fs::canonicalize(extra.path()).unwrap();
    std::fs::write(extra_root.join("x.txt"), "beside\n").unwrap();
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: setup_lua(&format!(
            "acp = {{ agents = {{ test = {{ cmd = {{ '{agent}' }}, directories = {{ '{}', 'nowhere/at/all', 'sub' }} }} }} }}",
            extra_root.display()
        )),
    })
    .await;
    nvim.write("sub/kept.txt", "x\n");
    nvim.cmd("Agent acp test").await;
    let lines = nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    // One inside the workspace could not stay read-only: left out, and said.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("test's directory sub is left out: it is inside the workspace")),
        "{}",
        lines.join("\n")
    );
    // A directory that is not there is left out, and said.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("test's directory nowhere/at/all is left out")),
        "{}",
        lines.join("\n")
    );
    ask(&nvim, &format!("fs-extra {}", extra_root.display())).await;
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    assert_eq!(
        reported(&lines, "extra read")["result"]["content"],
        "beside\n"
    );
    assert_eq!(reported(&lines, "extra write")["error"]["code"], -32602);
    assert!(!extra_root.join("y.txt").exists());
}

/// Neovim connected to the test agent with notes.txt of 30 lines, the agent's `scenario` sent
/// and its question armed; the file's text.
async fn hunk_question(scenario: &str) -> (Nvim, String) {
    let nvim = connected(Some((120, 40)), "chat", "").await;
    let before: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    nvim.write("notes.txt", &before);
    nvim.cmd(&format!("Agent {scenario}")).await;
    nvim.wait_for(
        "require('agent.approval').waiting() ~= nil and require('agent.approval').waiting().armed",
    )
    .await;
    (nvim, before)
}

#[tokio::test]
async fn an_agents_edit_with_a_hunk_dropped_writes_the_others_and_the_agent_is_told() {
    let (nvim, before) = hunk_question("hunkwrite").await;
    // The second hunk dropped, then the agent's Allow (1).
    nvim.api.input("]x").await.unwrap();
    nvim.wait_for_screen("1 of 2 hunks").await;
    nvim.api.input("1").await.unwrap();
    nvim.wait_for_line(CHAT, "edit write: ").await;
    assert_eq!(
        nvim.read("notes.txt"),
        before.replace("line 2\n", "line TWO\n")
    );
    // The agent hears of it at the start of its next prompt.
    nvim.wait_for("not require('agent.chat').busy()").await;
    nvim.cmd("Agent usage").await;
    let lines = nvim.wait_for_line(CHAT, "prompt: ").await;
    let prompt = reported(&lines, "prompt");
    let prompt = prompt.as_str().unwrap();
    assert!(
        prompt.starts_with("The user changed your edit of notes.txt before it was written"),
        "{prompt}"
    );
    assert!(
        prompt.contains("-line TWENTY-EIGHT\n+line 28\n"),
        "{prompt}"
    );
}

#[tokio::test]
async fn an_agents_edit_it_writes_itself_offers_no_hunk_keys_and_every_hunk_dropped_selects_no_allow(
) {
    // Writing on its own, what the agent writes cannot be cut to the hunks kept: no hunk keys.
    let (nvim, before) = hunk_question("hunkself").await;
    let screen = nvim.wait_for_screen("Reject").await;
    assert!(!screen.contains("hunk keys"), "{screen}");
    nvim.api.input("n").await.unwrap();
    nvim.wait_for_line(CHAT, "permission: ").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    // Through the client, every hunk dropped: the agent is not given its Allow.
    nvim.cmd("Agent hunkwrite").await;
    nvim.wait_for(
        "require('agent.approval').waiting() ~= nil and require('agent.approval').waiting().armed",
    )
    .await;
    nvim.api.input("x]x").await.unwrap();
    nvim.wait_for_screen("0 of 2 hunks").await;
    nvim.api.input("1").await.unwrap();
    let lines = nvim.wait_for_line(CHAT, "permission: ").await;
    let answered = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("permission: "))
        .unwrap();
    // Its own reject option, not a cancel of the turn.
    assert!(
        !answered.contains("\"once\"") && answered.contains("\"reject\""),
        "{answered}"
    );
    assert_eq!(nvim.read("notes.txt"), before);
}

#[tokio::test]
async fn an_image_goes_to_an_agent_that_takes_images_and_one_that_does_not_is_told_why() {
    use agent_nvim_fixtures::pictures;
    let nvim = connected(None, "normal", "").await;
    let shot = pictures::png(20, 10, 3);
    std::fs::write(nvim.workspace.path().join("shot.png"), &shot).unwrap();
    nvim.cmd("Agent look at @shot.png\nchat").await;
    let lines = nvim.wait_for_line(CHAT, "images: ").await;
    assert_eq!(
        reported(&lines, "images"),
        serde_json::json!([{"mimeType": "image/png", "base64": pictures::base64(&shot).len()}])
    );
    drop(nvim);

    let nvim = connected(None, "load-only", "").await;
    std::fs::write(nvim.workspace.path().join("shot.png"), &shot).unwrap();
    nvim.cmd("Agent look at @shot.png").await;
    nvim.wait_for_line(
        CHAT,
        "agent: test does not take images (its promptCapabilities.image is not set), so nothing was sent",
    )
    .await;
}

#[tokio::test]
async fn an_audio_clip_goes_to_an_agent_that_takes_audio_and_one_that_does_not_is_told_why() {
    use agent_nvim_fixtures::{pictures, sounds};
    let nvim = connected(None, "normal", "").await;
    let clip = sounds::wav(8);
    std::fs::write(nvim.workspace.path().join("note.wav"), &clip).unwrap();
    // Named as audio, holding text: refused as what it is, and the prompt still goes.
    std::fs::write(nvim.workspace.path().join("fake.mp3"), "not a sound").unwrap();
    nvim.cmd("Agent listen to @note.wav and @fake.mp3\nchat")
        .await;
    let lines = nvim.wait_for_line(CHAT, "heard: ").await;
    assert_eq!(
        reported(&lines, "heard"),
        serde_json::json!([{"mimeType": "audio/wav", "base64": pictures::base64(&clip).len(),
            "start": "UklGRjQA"}])
    );
    let text = lines.join("\n");
    assert!(text.contains("audio: note.wav · 60 B"), "{text}");
    assert!(
        text.contains(
            "@ fake.mp3: fake.mp3 is not an audio clip agent.nvim sends (wav, mp3, ogg, flac, m4a, aac or aiff)"
        ),
        "{text}"
    );
    drop(nvim);

    let nvim = connected(None, "load-only", "").await;
    std::fs::write(nvim.workspace.path().join("note.wav"), &clip).unwrap();
    nvim.cmd("Agent listen to @note.wav").await;
    nvim.wait_for_line(
        CHAT,
        "agent: test does not take audio (its promptCapabilities.audio is not set), so nothing was sent",
    )
    .await;
}

#[tokio::test]
async fn an_agent_offering_session_fork_is_forked_into_a_conversation_of_its_own() {
    let nvim = connected(None, "normal", "").await;
    nvim.cmd("Agent which session").await;
    nvim.wait_for_line(CHAT, "prompted in: \"s-1\"").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    // A prompt number is ours to cut, not the agent's: refused with the reason.
    nvim.keep_notes().await;
    nvim.cmd("Agent fork 1").await;
    nvim.wait_for("#_G.notes > 0").await;
    let said = nvim.lua("return _G.notes[1]", vec![]).await;
    assert_eq!(
        said.as_str(),
        Some("agent: test forks its whole conversation (session/fork): :Agent fork, without a prompt number or code")
    );
    // The whole conversation: the agent forks its session, a new tab page loads the fork, and
    // its prompts go to the new session while the original's go to its own.
    nvim.cmd("Agent fork").await;
    nvim.wait_for("vim.fn.tabpagenr('$') == 2").await;
    nvim.wait_for_line("agent: chat 2", "resumed: Fix the parser")
        .await;
    nvim.cmd("Agent which session").await;
    nvim.wait_for_line("agent: chat 2", "prompted in: \"s-1-fork\"")
        .await;
    nvim.cmd("tabnext 1").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    nvim.cmd("Agent which session").await;
    let count = "#vim.tbl_filter(function(l) return l:find('^prompted in:') end, \
                 vim.api.nvim_buf_get_lines(require('agent.chat.window').buf, 0, -1, false))";
    nvim.wait_for(&format!("{count} == 2")).await;
    let lines = nvim
        .lua(
            "return vim.api.nvim_buf_get_lines(require('agent.chat.window').buf, 0, -1, false)",
            vec![],
        )
        .await;
    let prompted: Vec<String> = lines
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str())
        .filter(|l| l.starts_with("prompted in:"))
        .map(String::from)
        .collect();
    assert_eq!(prompted, ["prompted in: \"s-1\"", "prompted in: \"s-1\""]);
}

#[tokio::test]
async fn a_side_question_to_an_agent_goes_to_a_fork_of_its_session_that_may_do_nothing() {
    let nvim = connected(Some((120, 40)), "normal", "").await;
    nvim.cmd("Agent chat").await;
    nvim.wait_for_line(CHAT, "done (end_turn)").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    let before = nvim.buffer_lines(CHAT).await;
    nvim.cmd("Agent btw what did you say?").await;
    let screen = nvim
        .wait_for_screen("side answer to \"what did you say?\"")
        .await;
    // Asked in the fork: its write and its permission question were refused, nothing written.
    assert!(
        screen.contains("write: refused; permission: cancelled"),
        "{screen}"
    );
    nvim.wait_for_screen("answered by test in a fork of its session")
        .await;
    assert!(!nvim.workspace.path().join("side.txt").exists());
    // The conversation shows nothing of it, and its next prompt goes to its own session.
    assert_eq!(nvim.buffer_lines(CHAT).await, before);
    nvim.cmd("Agent which session").await;
    nvim.wait_for_line(CHAT, "prompted in: \"s-1\"").await;

    // An agent that does not offer session/fork says so.
    drop(nvim);
    let nvim = connected(Some((120, 40)), "load-only", "").await;
    nvim.cmd("Agent btw anything?").await;
    nvim.wait_for_screen("test does not offer session/fork, so a side question cannot be asked")
        .await;
}

#[tokio::test]
async fn an_agents_notices_are_chat_rows_and_notifications_at_their_severity() {
    let nvim = connected(None, "normal", "").await;
    nvim.lua(
        "_G.notes = {} vim.notify = function(m, level) table.insert(_G.notes, { m, level }) end",
        vec![],
    )
    .await;
    nvim.cmd("Agent notice").await;
    let lines = nvim.wait_for_line(CHAT, "info: Something odd").await;
    let text = lines.join("\n");
    assert!(
        text.contains("warning: MCP server unavailable\nsaid by the test agent"),
        "{text}"
    );
    nvim.wait_for("#_G.notes >= 2").await;
    let notes = nvim.lua("return _G.notes", vec![]).await;
    let notes: Vec<(String, i64)> = notes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let pair = n.as_array().unwrap();
            (
                pair[0].as_str().unwrap().to_string(),
                pair[1].as_i64().unwrap(),
            )
        })
        .filter(|(m, _)| m.contains("said by the test agent"))
        .collect();
    assert_eq!(
        notes,
        [
            (
                "agent: MCP server unavailable: said by the test agent".to_string(),
                3
            ),
            (
                "agent: Something odd: said by the test agent".to_string(),
                2
            )
        ]
    );
}

#[tokio::test]
async fn the_resume_lists_delete_has_the_agent_delete_its_own_session() {
    let nvim = connected(None, "normal", "").await;
    // Each question answered as a person would: delete, that session, yes.
    nvim.lua(
        "_G.notes = {} vim.notify = function(m) table.insert(_G.notes, m) end \
         vim.ui.select = function(items, opts, on_choice) \
           local want = ({ ['Resume a conversation'] = function(i) return i.action == 'delete' end, \
             ['Delete which conversation?'] = function(i) return i.session == 'earlier-1' end })[opts.prompt] \
             or function(i) return i == 'Delete it' end \
           for _, item in ipairs(items) do if want(item) then return on_choice(item) end end \
           on_choice(nil) \
         end",
        vec![],
    )
    .await;
    nvim.cmd("Agent resume").await;
    nvim.wait_for("#_G.notes > 0").await;
    let said = nvim.lua("return _G.notes[#_G.notes]", vec![]).await;
    assert_eq!(
        said.as_str(),
        Some("agent: test deleted its session earlier-1")
    );
    nvim.wait_for_line(CHAT, "deleted: \"earlier-1\"").await;
}

#[tokio::test]
async fn files_an_agent_writes_by_itself_are_listed_with_their_diff_and_u_puts_back_those_alone() {
    let nvim = connected(None, "normal", "").await;
    let ws = nvim.workspace.path().to_path_buf();
    std::fs::write(ws.join("a.py"), "original\n").unwrap();
    std::fs::write(ws.join("mine.txt"), "the person's\n").unwrap();
    nvim.keep_notes().await;
    nvim.cmd("Agent outside").await;
    // Its own write before the tool call completed is listed then; the file it made after,
    // when the turn ended. What it wrote through fs/write_text_file is in no row.
    let lines = nvim
        .wait_for_line(
            CHAT,
            "1 file changed by test without asking agent.nvim: new.py · d: diff · u: undo",
        )
        .await;
    assert_eq!(
        reported(&lines, "write through.py"),
        serde_json::json!({"result": {}})
    );
    let rows: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("without asking agent.nvim"))
        .collect();
    assert_eq!(
        rows,
        [
            "1 file changed by test without asking agent.nvim: a.py · d: diff · u: undo",
            "1 file changed by test without asking agent.nvim: new.py · d: diff · u: undo",
        ]
    );
    assert!(
        lines.iter().any(|l| l
            == "only the sandbox stops an agent writing by itself, outside the workspace too: acp.agents.test.sandbox = true"),
        "{lines:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("through.py")).unwrap(),
        "asked for\n"
    );
    // The person changes a file of their own meanwhile: not the agent's, kept by the undo.
    std::fs::write(ws.join("mine.txt"), "changed since\n").unwrap();
    let on_row = |text: &str| {
        format!(
            "local b = vim.fn.bufnr('agent: chat') local w = vim.fn.win_findbuf(b)[1] \
             vim.api.nvim_set_current_win(w) \
             local row = vim.fn.match(vim.api.nvim_buf_get_lines(b, 0, -1, false), '{text}') + 1 \
             vim.api.nvim_win_set_cursor(w, {{ row, 0 }})"
        )
    };
    // `d`: the diff of that row's files alone.
    nvim.lua(
        &on_row("^1 file changed by test without asking agent.nvim: a.py"),
        vec![],
    )
    .await;
    nvim.api.input("d").await.unwrap();
    nvim.wait_for("#vim.fn.getqflist() > 0").await;
    let listed = nvim
        .lua(
            "return vim.tbl_map(function(i) return i.text end, vim.fn.getqflist())",
            vec![],
        )
        .await;
    assert_eq!(listed, Value::Array(vec![Value::from("M a.py +1 -1")]));
    // `u`: a.py as it was before the turn; nothing else touched.
    nvim.lua(
        &on_row("^1 file changed by test without asking agent.nvim: a.py"),
        vec![],
    )
    .await;
    nvim.api.input("u").await.unwrap();
    nvim.wait_for("#_G.notes > 0").await;
    let notes = nvim.lua("return _G.notes", vec![]).await;
    assert_eq!(
        notes,
        Value::Array(vec![Value::from(
            "agent: 1 file put back as it was before the turn"
        )])
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("a.py")).unwrap(),
        "original\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("new.py")).unwrap(),
        "made by the agent\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("through.py")).unwrap(),
        "asked for\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("mine.txt")).unwrap(),
        "changed since\n"
    );
    // The new file's row: `u` removes it, as it was not there before the turn.
    nvim.lua(
        &on_row("^1 file changed by test without asking agent.nvim: new.py"),
        vec![],
    )
    .await;
    nvim.api.input("u").await.unwrap();
    nvim.wait_for("#_G.notes > 1").await;
    assert!(!ws.join("new.py").exists());
    // Once is enough.
    nvim.api.input("u").await.unwrap();
    nvim.wait_for("#_G.notes > 2").await;
    let notes = nvim.lua("return _G.notes[3]", vec![]).await;
    assert_eq!(
        notes,
        Value::from("agent: those files were put back already; :Agent rewind offers undoing that")
    );
}

#[tokio::test]
async fn several_files_an_agent_changed_by_itself_are_one_row_and_one_undo() {
    let nvim = connected(None, "normal", "").await;
    let ws = nvim.workspace.path().to_path_buf();
    for name in ["a.py", "b.py", "d.py"] {
        std::fs::write(ws.join(name), format!("{name} before\n")).unwrap();
    }
    nvim.keep_notes().await;
    nvim.cmd("Agent outside-three").await;
    nvim.wait_for_line(
        CHAT,
        "4 files changed by test without asking agent.nvim: a.py, b.py, c.py, d.py · d: diff · u: undo",
    )
    .await;
    nvim.lua(
        "local b = vim.fn.bufnr('agent: chat') local w = vim.fn.win_findbuf(b)[1] \
         vim.api.nvim_set_current_win(w) \
         local row = vim.fn.match(vim.api.nvim_buf_get_lines(b, 0, -1, false), '^4 files changed') + 1 \
         vim.api.nvim_win_set_cursor(w, { row, 0 })",
        vec![],
    )
    .await;
    nvim.api.input("u").await.unwrap();
    nvim.wait_for("#_G.notes > 0").await;
    assert_eq!(
        nvim.lua("return _G.notes[1]", vec![]).await,
        Value::from("agent: 4 files put back as they were before the turn")
    );
    for name in ["a.py", "b.py", "d.py"] {
        assert_eq!(
            std::fs::read_to_string(ws.join(name)).unwrap(),
            format!("{name} before\n")
        );
    }
    assert!(!ws.join("c.py").exists());
}

/// A Neovim whose setup hands the test agent (in `mode`) a stdio MCP server with a secret in
/// its environment and an HTTP one with a secret header, and logs at debug level.
/// Its second part is the agent's own log of every line it received.
async fn with_mcp_servers(mode: &str) -> (Nvim, tempfile::NamedTempFile) {
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let received = tempfile::NamedTempFile::new().unwrap();
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "unused".into()),
            ("AGENT_NVIM_LOG".into(), "debug".into()),
            (
                "ACP_TEST_AGENT_LOG".into(),
                received.path().display().to_string(),
            ),
        ],
        setup: setup_lua(&format!(
            "mcp_servers = {{ \
               files = {{ command = 'sh', args = {{ '-c', 'true' }}, env = {{ TOKEN = 's3cret-env-41' }} }}, \
               docs = {{ url = 'https://docs.example/mcp', headers = {{ Authorization = 'Bearer s3cret-hdr-42' }} }}, \
             }}, \
             acp = {{ agents = {{ test = {{ cmd = {{ '{agent}', '{mode}' }}, \
               mcp_servers = {{ own = {{ command = 'cat' }} }} }} }} }}"
        )),
    })
    .await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    (nvim, received)
}

/// Every file under Neovim's state directory (the log, the saved sessions) holding `secret`.
async fn files_holding(nvim: &Nvim, secret: &str) -> Vec<String> {
    let state = nvim.lua("return vim.fn.stdpath('state')", vec![]).await;
    let mut found = Vec::new();
    let mut dirs = vec![PathBuf::from(state.as_str().unwrap())];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if std::fs::read(&path)
                .is_ok_and(|bytes| bytes.windows(secret.len()).any(|w| w == secret.as_bytes()))
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[tokio::test]
async fn mcp_servers_go_in_session_new_and_load_remote_ones_only_where_taken_and_no_secret_is_kept()
{
    // An agent without mcpCapabilities.http: the stdio servers only, and the chat says once
    // which were left out.
    let (nvim, received) = with_mcp_servers("normal").await;
    let lines = nvim
        .wait_for_line(
            CHAT,
            "test does not take these MCP servers' transports (its mcpCapabilities), so they were left out: docs (http)",
        )
        .await;
    assert_eq!(lines.join("\n").matches("so they were left out").count(), 1);
    resume_picking(&nvim, "item.session == 'earlier-1'").await;
    nvim.cmd("Agent mcp").await;
    let lines = nvim.wait_for_line(CHAT, "mcp: ").await;
    let sent = reported(&lines, "mcp");
    let which = |method: &str| -> Vec<(String, String)> {
        sent[method]
            .as_array()
            .unwrap_or_else(|| panic!("no {method} in {sent}"))
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap().to_string(),
                    s["type"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let stdio = vec![
        ("files".to_string(), "stdio".to_string()),
        ("own".to_string(), "stdio".to_string()),
    ];
    assert_eq!(which("session/new"), stdio);
    assert_eq!(which("session/load"), stdio);
    // A command is sent absolute, found on PATH; its variables with their values (the agent's
    // own log shows the value went), which are never shown or kept here.
    let got = std::fs::read_to_string(received.path()).unwrap();
    assert!(got.contains("s3cret-env-41"), "{got}");
    assert!(!got.contains("s3cret-hdr-42"), "{got}");
    let files = &sent["session/new"][0];
    assert!(
        files["command"].as_str().unwrap().ends_with("/sh"),
        "{files}"
    );
    assert_eq!(files["args"], serde_json::json!(["-c", "true"]));
    assert_eq!(files["env"], serde_json::json!(["TOKEN"]));
    let chat = lines.join("\n");
    assert!(!chat.contains("left out"), "{chat}");
    for secret in ["s3cret-env-41", "s3cret-hdr-42"] {
        assert!(!chat.contains(secret), "{chat}");
        assert_eq!(files_holding(&nvim, secret).await, Vec::<String>::new());
    }

    // An agent that takes HTTP: the remote server too, its header by name.
    let (nvim, received) = with_mcp_servers("mcp-http").await;
    nvim.cmd("Agent mcp").await;
    let lines = nvim.wait_for_line(CHAT, "mcp: ").await;
    let sent = reported(&lines, "mcp");
    let names: Vec<&str> = sent["session/new"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["docs", "files", "own"]);
    assert_eq!(
        sent["session/new"][0],
        serde_json::json!({"name": "docs", "type": "http", "command": null, "args": null,
            "url": "https://docs.example/mcp", "env": null, "headers": ["Authorization"]})
    );
    assert!(!lines.join("\n").contains("left out"));
    let got = std::fs::read_to_string(received.path()).unwrap();
    assert!(got.contains("Bearer s3cret-hdr-42"), "{got}");
    for secret in ["s3cret-env-41", "s3cret-hdr-42"] {
        assert_eq!(files_holding(&nvim, secret).await, Vec::<String>::new());
    }
}

/// Every report of `label`, in order (the test agent reports each answer it got).
fn all_reported(lines: &[String], label: &str) -> Vec<serde_json::Value> {
    let prefix = format!("{label}: ");
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|json| serde_json::from_str(json).unwrap())
        .collect()
}

/// Waits until the test agent has reported `label` `count` times; returns those reports.
async fn reports(nvim: &Nvim, label: &str, count: usize) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let lines = nvim.buffer_lines(CHAT).await;
        let got = all_reported(&lines, label);
        if got.len() >= count {
            return got;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{count} reports of {label} never came:\n{}",
            lines.join("\n")
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_agents_form_is_shown_whole_filled_in_and_sent_only_when_complete_and_one_is_declined() {
    let nvim = connected(Some((100, 34)), "normal", "").await;
    ask(&nvim, "elicit-form").await;
    // Once it takes keys (its footer says which then).
    nvim.wait_for("(require('agent.elicit').shown() or {}).armed == true")
        .await;
    let screen = nvim
        .wait_for_screen("<CR>: change · a: accept · d: decline · q: cancel")
        .await;
    for expected in [
        " test asks ",
        "│ Which database should I set up?",
        "Engine *   —",
        "one of: PostgreSQL, MySQL",
        "Name *     —",
        "what the database is called",
        "Port       5432",
        "1 to 65535",
        "Use TLS    yes",
        "<CR>: change · a: accept · d: decline · q: cancel",
    ] {
        assert!(
            screen.contains(expected),
            "{expected:?} should be on screen:\n{screen}"
        );
    }
    nvim.wait_for("(require('agent.elicit').shown() or {}).armed == true")
        .await;
    // Sent only once every required field has a value: nothing goes yet.
    nvim.api.input("a").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(all_reported(&nvim.buffer_lines(CHAT).await, "elicited").is_empty());
    assert_eq!(
        nvim.lua("return require('agent.elicit').waiting()", vec![])
            .await,
        Value::from(true)
    );
    // The engine from its list, the name typed, TLS turned off.
    nvim.api.input("<CR>").await.unwrap();
    nvim.wait_for_screen("2: MySQL").await;
    nvim.api.input("1<CR>").await.unwrap();
    nvim.wait_for_screen("Engine *   PostgreSQL").await;
    nvim.api.input("jj<CR>").await.unwrap();
    nvim.wait_for_screen("Name:").await;
    nvim.api.input("orders<CR>").await.unwrap();
    nvim.wait_for_screen("Name *     orders").await;
    nvim.api.input("jjjj<CR>").await.unwrap();
    nvim.wait_for_screen("Use TLS    no").await;
    nvim.api.input("a").await.unwrap();
    let sent = reports(&nvim, "elicited", 1).await;
    assert_eq!(
        sent[0]["result"],
        serde_json::json!({"action": "accept",
            "content": {"engine": "pg", "name": "orders", "port": 5432, "tls": false}})
    );
    assert_eq!(
        nvim.lua("return require('agent.elicit').shown() == nil", vec![])
            .await,
        Value::from(true)
    );
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    for row in [
        "test asks: Which database should I set up? (a form of 4 fields)",
        "test: sent",
    ] {
        assert!(
            lines.iter().any(|l| l == row),
            "{row:?} in:\n{}",
            lines.join("\n")
        );
    }
    // The next one declined: the agent is told so, and nothing of the form is sent.
    ask(&nvim, "elicit-form").await;
    nvim.wait_for_screen("Which database should I set up?")
        .await;
    nvim.wait_for("(require('agent.elicit').shown() or {}).armed == true")
        .await;
    nvim.api.input("d").await.unwrap();
    let sent = reports(&nvim, "elicited", 2).await;
    assert_eq!(sent[1]["result"], serde_json::json!({"action": "decline"}));
    nvim.wait_for_line(CHAT, "test: declined").await;
}

#[tokio::test]
async fn an_agents_form_waits_beside_a_person_typing_and_takes_none_of_their_keys() {
    let nvim = connected(Some((100, 34)), "normal", "").await;
    nvim.cmd("Agent").await;
    nvim.wait_for("vim.api.nvim_get_mode().mode == 'i'").await;
    ask(&nvim, "elicit-form").await;
    let screen = nvim
        .wait_for_screen("<M-a> or :Agent approve: go to it")
        .await;
    assert!(
        screen.contains("Which database should I set up?"),
        "{screen}"
    );
    // The form's own keys (accept, decline, cancel, change) typed into the input: they stay
    // there, and the agent is told nothing.
    nvim.api.input("a d q<CR>").await.unwrap();
    nvim.wait_for("vim.api.nvim_buf_get_lines(0, 0, -1, false)[2] == ''")
        .await;
    assert_eq!(
        nvim.lua("return vim.api.nvim_get_mode().mode", vec![])
            .await,
        Value::from("i")
    );
    assert_eq!(
        nvim.buffer_lines("agent: input").await,
        vec!["a d q".to_string(), String::new()]
    );
    assert_eq!(
        nvim.lua("return require('agent.elicit').shown().focused", vec![])
            .await,
        Value::from(false)
    );
    assert!(all_reported(&nvim.buffer_lines(CHAT).await, "elicited").is_empty());
    // Gone to on purpose, then cancelled: the agent hears cancel, and the person is back in
    // the input with their text.
    nvim.api.input("<M-a>").await.unwrap();
    nvim.wait_for("(require('agent.elicit').shown() or {}).armed == true")
        .await;
    nvim.api.input("q").await.unwrap();
    let sent = reports(&nvim, "elicited", 1).await;
    assert_eq!(sent[0]["result"], serde_json::json!({"action": "cancel"}));
    nvim.wait_for("vim.api.nvim_get_mode().mode == 'i'").await;
    assert_eq!(
        nvim.buffer_lines("agent: input").await,
        vec!["a d q".to_string(), String::new()]
    );
}

#[tokio::test]
async fn an_agents_url_waits_beside_a_person_typing_and_opens_only_when_they_say_so() {
    let nvim = connected(Some((100, 34)), "normal", "").await;
    nvim.lua(
        "_G.opened = {}; vim.ui.open = function(url) table.insert(_G.opened, url); return {}, nil end",
        vec![],
    )
    .await;
    // :Agent leaves the person typing in the input when the question comes.
    nvim.cmd("Agent").await;
    nvim.wait_for("vim.api.nvim_get_mode().mode == 'i'").await;
    ask(&nvim, "elicit-url").await;
    let screen = nvim
        .wait_for_screen("<M-a> or :Agent approve: go to it")
        .await;
    for expected in [
        "Sign in to the example service",
        "opens a page on  login.example.com",
        "https://login.example.com/device?code=WXYZ",
    ] {
        assert!(
            screen.contains(expected),
            "{expected:?} should be on screen:\n{screen}"
        );
    }
    // It took nothing: still typing in the input, and what they type goes there.
    nvim.api.input("o d q").await.unwrap();
    nvim.wait_for("vim.api.nvim_get_current_line() == 'o d q'")
        .await;
    assert_eq!(
        nvim.lua("return vim.api.nvim_get_mode().mode", vec![])
            .await,
        Value::from("i")
    );
    assert_eq!(nvim.lua("return #_G.opened", vec![]).await, Value::from(0));
    assert!(all_reported(&nvim.buffer_lines(CHAT).await, "elicited").is_empty());
    // Gone to, then opened: the page and the agent's accept, and back to typing.
    nvim.api.input("<M-a>").await.unwrap();
    nvim.wait_for("(require('agent.elicit').shown() or {}).armed == true")
        .await;
    let screen = nvim
        .wait_for_screen("o: open it · y: copy · d: decline · q: cancel")
        .await;
    assert!(screen.contains("login.example.com"), "{screen}");
    nvim.api.input("o").await.unwrap();
    let sent = reports(&nvim, "elicited", 1).await;
    assert_eq!(sent[0]["result"], serde_json::json!({"action": "accept"}));
    nvim.wait_for_line(CHAT, "test: opened").await;
    assert_eq!(
        nvim.lua("return _G.opened", vec![]).await,
        Value::Array(vec![Value::from(
            "https://login.example.com/device?code=WXYZ"
        )])
    );
    nvim.wait_for("vim.api.nvim_get_mode().mode == 'i'").await;
    assert_eq!(
        nvim.buffer_lines("agent: input").await,
        vec!["o d q".to_string()]
    );
    // Refused: nothing opened.
    nvim.wait_for_line(CHAT, "done (end_turn)").await;
    // Not typing at all now: a URL question still never takes focus by itself (its `o` would
    // open a page on a key pressed without looking).
    nvim.api.input("<Esc>").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    ask(&nvim, "elicit-url").await;
    nvim.wait_for("require('agent.elicit').shown() ~= nil")
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        nvim.lua("return require('agent.elicit').shown().focused", vec![])
            .await,
        Value::from(false)
    );
    nvim.api.input("<M-a>").await.unwrap();
    nvim.wait_for("(require('agent.elicit').shown() or {}).armed == true")
        .await;
    nvim.api.input("d").await.unwrap();
    let sent = reports(&nvim, "elicited", 2).await;
    assert_eq!(sent[1]["result"], serde_json::json!({"action": "decline"}));
    assert_eq!(nvim.lua("return #_G.opened", vec![]).await, Value::from(1));
}

#[tokio::test]
async fn a_question_the_agent_completes_closes_and_without_a_screen_none_is_asked() {
    let nvim = connected(Some((100, 34)), "normal", "").await;
    ask(&nvim, "elicit-complete").await;
    let sent = reports(&nvim, "elicited", 1).await;
    assert_eq!(sent[0], serde_json::json!({"action": "cancel"}));
    nvim.wait_for("require('agent.elicit').shown() == nil")
        .await;
    let screen = nvim.wait_for_screen("done (end_turn)").await;
    assert!(
        screen.contains("test asks: Approve on your phone") && !screen.contains("o: open it"),
        "the chat row stays, the float is gone:\n{screen}"
    );
    // Headless: nobody to ask, so the agent is answered cancel and nothing waits.
    let headless = connected(None, "normal", "").await;
    ask(&headless, "elicit-form").await;
    let sent = reports(&headless, "elicited", 1).await;
    assert_eq!(sent[0]["result"], serde_json::json!({"action": "cancel"}));
}

/// Our own saved file of an agent's session, resumed while an agent that offers
/// `session/resume` runs: the chat shows our file (the agent replays nothing), the agent is sent
/// `session/resume` with the MCP servers of setup, never `session/load`, and the next prompt
/// goes on in that session and in the same file.
#[tokio::test]
async fn an_agent_offering_resume_continues_our_saved_file_without_a_replay() {
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let log = tempfile::NamedTempFile::new().unwrap();
    let options = |session: &str| {
        Options {
        ui: None,
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "unused".into()),
            ("ACP_TEST_AGENT_SESSION".into(), session.into()),
            ("ACP_TEST_AGENT_LOG".into(), log.path().display().to_string()),
        ],
        setup: setup_lua(&format!(
            "mcp_servers = {{ files = {{ command = '/bin/true', env = {{ TOKEN = 'kept-out-of-logs' }} }} }}, \
             acp = {{ agents = {{ test = {{ cmd = {{ '{agent}', 'resume' }} }} }} }}"
        )),
    }
    };
    let nvim = Nvim::start(options("first")).await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    nvim.cmd("Agent which session").await;
    nvim.wait_for_line(CHAT, "prompted in: \"first\"").await;
    let nvim = nvim.restart(options("second")).await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    let (lines, listed) = resume_picking_until(&nvim, "true", "resumed: which session").await;
    assert!(
        listed[0].starts_with("test: which session · "),
        "{listed:?}"
    );
    // Our file, not a replay: its prompt and answer, and nothing the agent replays.
    let text = lines.join("\n");
    assert!(
        text.contains("which session") && text.contains("prompted in: \"first\""),
        "{lines:#?}"
    );
    assert!(!text.contains("The parser is fixed."), "{lines:#?}");
    assert!(logged(log.path(), "session/load").is_empty());
    let resumed = logged(log.path(), "session/resume");
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert_eq!(resumed[0]["sessionId"], "first");
    assert_eq!(resumed[0]["mcpServers"][0]["name"], "files");
    assert_eq!(
        resumed[0]["mcpServers"][0]["env"],
        serde_json::json!([{"name": "TOKEN", "value": "kept-out-of-logs"}])
    );
    nvim.cmd("Agent which session").await;
    nvim.wait_for(
        "#vim.tbl_filter(function(l) return l == 'prompted in: \"first\"' end, \
         vim.api.nvim_buf_get_lines(vim.fn.bufnr('agent: chat'), 0, -1, false)) == 2",
    )
    .await;
    let rows = nvim
        .lua(
            "return vim.tbl_map(function(s) return s.agent .. ' ' .. s.prompts end, \
             require('agent').sessions())",
            vec![],
        )
        .await;
    assert_eq!(rows, Value::Array(vec![Value::from("test 2")]));
}

/// Several plans (ACP `plan_update`, `plan_removed`): each a checklist of its own, updated in
/// place, a removed one said so, one given as markdown shown as written.
#[tokio::test]
async fn an_agents_several_plans_are_kept_apart_and_each_updated_in_place() {
    let nvim = connected(None, "normal", "").await;
    ask(&nvim, "plans").await;
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    let at = lines.iter().position(|l| l == "plans").unwrap();
    let shown: Vec<&str> = lines[at..]
        .iter()
        .map(String::as_str)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        shown,
        [
            "plans",
            "Plan",
            "- [x] Read the parser",
            "- [~] Fix it",
            "Plan (removed)",
            "Plan",
            "1. Ship it",
            "2. Tell people",
            "done (end_turn)",
        ],
        "{lines:#?}"
    );
}

/// An agent's compaction (ACP `compaction_update`, `compaction_summary_chunk`): a row like the
/// built-in agent's `compacted` one, rewritten as it goes on, its summary folded under it; a
/// failed one says why.
#[tokio::test]
async fn an_agents_compaction_is_one_row_updated_until_done_with_its_summary_under_it() {
    let nvim = connected(None, "normal", "").await;
    ask(&nvim, "compaction").await;
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    let at = lines.iter().position(|l| l == "compaction").unwrap();
    let shown: Vec<&str> = lines[at..]
        .iter()
        .map(String::as_str)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        shown,
        [
            "compaction",
            "compacted the conversation",
            "  Fixed the parser; tests pass.",
            "compacting the conversation failed: context too small",
            "done (end_turn)",
        ],
        "{lines:#?}"
    );
}

/// An agent's messages told apart by their ids (ACP `messageId`): a paragraph each in the chat,
/// and the ids kept in the saved conversation, as is what a resume shows.
#[tokio::test]
async fn an_agents_message_ids_part_its_messages_and_are_kept_in_the_saved_conversation() {
    let nvim = connected(None, "normal", "").await;
    ask(&nvim, "messages").await;
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    let at = lines.iter().position(|l| l == "messages").unwrap();
    assert_eq!(
        lines[at..at + 8],
        [
            "messages",
            "",
            "## Agent",
            "",
            "First. Still first.",
            "",
            "Second.",
            ""
        ],
        "{lines:#?}"
    );
    let read = "table.concat(vim.fn.readfile(vim.fn.glob(vim.env.XDG_STATE_HOME .. \
                '/**/sessions/**/*.jsonl', true, true)[1] or '/nonexistent'), '\\n')";
    // Written by the writer thread as the turn ends.
    nvim.wait_for(&format!("({read}):find('m-2', 1, true) ~= nil"))
        .await;
    let saved = nvim.lua(&format!("return {read}"), vec![]).await;
    let saved = saved.as_str().unwrap_or_default();
    for id in ["\"m-1\"", "\"m-2\""] {
        assert_eq!(saved.matches(id).count(), 1, "{id} in:\n{saved}");
    }
}

/// The text of a tool call's answer.
fn tool_text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| match block {
            rmcp::model::ContentBlock::Text(text) => Some(text.text.clone()),
            _ => None,
        })
        .collect()
}

/// `editor_tools = true`: the agent is handed `agent-nvim mcp` in `mcpServers`; a real MCP client
/// started as the agent would start it initializes, lists the read-only tools, and reads a
/// diagnostic set in Neovim; a path outside the workspace is refused, and a process given the
/// socket without the token gets nothing.
#[tokio::test]
async fn the_editor_tools_answer_a_real_mcp_client_from_neovim_inside_the_workspace() {
    use rmcp::model::CallToolRequestParams;
    let (nvim, _log, server) = editor_tools_server().await;
    let file = nvim.workspace.path().join("a.py");
    std::fs::write(&file, "x = 1\n").unwrap();
    assert!(server["env"].as_array().unwrap().is_empty(), "{server}");
    let args = server_args(&server);
    nvim.lua(
        "local buf = vim.fn.bufadd(...) vim.fn.bufload(buf) \
         vim.diagnostic.set(vim.api.nvim_create_namespace('test'), buf, {{ lnum = 0, col = 0, \
           message = 'x is never used', severity = vim.diagnostic.severity.WARN, source = 'lint' }})",
        vec![Value::from(file.display().to_string())],
    )
    .await;
    let client = mcp_client(&server, args.clone()).await;
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|tool| {
            assert_eq!(
                tool.annotations.as_ref().and_then(|a| a.read_only_hint),
                Some(true)
            );
            tool.name.to_string()
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "definition",
            "diagnostics",
            "document_symbols",
            "hover",
            "open_buffers",
            "references",
            "selection"
        ]
    );
    let call = |tool: &str, args: serde_json::Value| {
        CallToolRequestParams::new(tool.to_string())
            .with_arguments(args.as_object().unwrap().clone())
    };
    let found = client
        .call_tool(call("diagnostics", serde_json::json!({"path": "a.py"})))
        .await
        .unwrap();
    assert_ne!(found.is_error, Some(true), "{found:?}");
    assert_eq!(
        tool_text(&found),
        "a.py:1:1: warning: x is never used [lint]"
    );
    let everywhere = client
        .call_tool(call("diagnostics", serde_json::json!({})))
        .await
        .unwrap();
    assert!(
        tool_text(&everywhere).contains("a.py:1:1: warning"),
        "{everywhere:?}"
    );
    let outside = client
        .call_tool(call(
            "diagnostics",
            serde_json::json!({"path": "../outside.py"}),
        ))
        .await
        .unwrap();
    assert_eq!(outside.is_error, Some(true));
    assert!(
        tool_text(&outside).contains("outside the workspace"),
        "{outside:?}"
    );
    let lsp = client
        .call_tool(call(
            "definition",
            serde_json::json!({"path": "a.py", "line": 1, "column": 1}),
        ))
        .await
        .unwrap();
    assert_eq!(lsp.is_error, Some(true));
    assert_eq!(tool_text(&lsp), "no language server is attached to a.py");
    // A language server (in-process, as vim.lsp takes one): its answers, a place outside the
    // workspace counted and not named.
    nvim.lua(
        "local buf = vim.fn.bufnr(...) \
         local function range(line) return { start = { line = line, character = 0 }, \
           ['end'] = { line = line, character = 1 } } end \
         local answers = { \
           ['textDocument/definition'] = function(p) return { { uri = p.textDocument.uri, range = range(4) } } end, \
           ['textDocument/references'] = function(p) return { { uri = p.textDocument.uri, range = range(0) }, \
             { uri = 'file:///etc/passwd', range = range(0) } } end, \
           ['textDocument/hover'] = function() return { contents = { kind = 'markdown', value = 'x: int' } } end, \
           ['textDocument/documentSymbol'] = function() return { { name = 'main', kind = 12, range = range(2), \
             selectionRange = range(2), children = { { name = 'x', kind = 13, range = range(3), selectionRange = range(3) } } } } end, \
         } \
         local function server(dispatchers) \
           local closing = false \
           return { \
             request = function(method, params, callback) \
               if method == 'initialize' then callback(nil, { capabilities = { definitionProvider = true, \
                 referencesProvider = true, hoverProvider = true, documentSymbolProvider = true } }) \
               elseif answers[method] then callback(nil, answers[method](params)) \
               else callback(nil, nil) end \
               return true, 1 \
             end, \
             notify = function() return true end, \
             is_closing = function() return closing end, \
             terminate = function() closing = true end, \
           } \
         end \
         vim.lsp.start({ name = 'fake', cmd = server, root_dir = vim.fn.getcwd() }, { bufnr = buf })",
        vec![Value::from(file.display().to_string())],
    )
    .await;
    nvim.wait_for(&format!(
        "(function() local c = vim.lsp.get_clients({{ bufnr = vim.fn.bufnr('{}') }})[1] \
         return c ~= nil and c.initialized == true end)()",
        file.display()
    ))
    .await;
    let at = serde_json::json!({"path": "a.py", "line": 1, "column": 1});
    for (tool, args, expected) in [
        ("definition", at.clone(), "a.py:5:1"),
        (
            "references",
            at.clone(),
            "a.py:1:1\n(1 outside the workspace left out)",
        ),
        ("hover", at.clone(), "x: int"),
        (
            "document_symbols",
            serde_json::json!({"path": "a.py"}),
            "Function main :3\n  Variable x :4",
        ),
    ] {
        let answered = client.call_tool(call(tool, args)).await.unwrap();
        assert_ne!(answered.is_error, Some(true), "{tool}: {answered:?}");
        assert_eq!(tool_text(&answered), expected, "{tool}");
    }
    // What the person has not saved, which the agent cannot read from the disk.
    nvim.lua(
        "vim.api.nvim_buf_set_lines(vim.fn.bufnr(...), 0, -1, false, { 'x = 2  # unsaved' })",
        vec![Value::from(file.display().to_string())],
    )
    .await;
    let open = client
        .call_tool(call("open_buffers", serde_json::json!({})))
        .await
        .unwrap();
    assert_eq!(
        tool_text(&open),
        "a.py (unsaved changes):\nx = 2  # unsaved"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "x = 1\n",
        "nothing is written"
    );
    client.cancel().await.unwrap();
    // The socket without the token: refused.
    let mut forged = args.clone();
    let at = forged.iter().position(|a| a == "--token").unwrap() + 1;
    forged[at] = "0".repeat(32);
    let intruder = mcp_client(&server, forged).await;
    let refused = intruder
        .call_tool(call("open_buffers", serde_json::json!({})))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(tool_text(&refused), "this channel is not yours");
    intruder.cancel().await.unwrap();
}

/// A Neovim with `editor_tools = true` connected to the test agent, the agent's log, and the
/// `agent-nvim-editor` server it was handed in `session/new`.
async fn editor_tools_server() -> (Nvim, tempfile::NamedTempFile, serde_json::Value) {
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let log = tempfile::NamedTempFile::new().unwrap();
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "unused".into()),
            ("ACP_TEST_AGENT_LOG".into(), log.path().display().to_string()),
        ],
        setup: setup_lua(&format!(
            "editor_tools = true, acp = {{ agents = {{ test = {{ cmd = {{ '{agent}', 'normal' }} }} }} }}"
        )),
    })
    .await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    let opened = logged(log.path(), "session/new");
    let server = opened[0]["mcpServers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "agent-nvim-editor")
        .unwrap_or_else(|| panic!("no editor tools in {opened:?}"))
        .clone();
    (nvim, log, server)
}

/// The arguments of a handed MCP server.
fn server_args(server: &serde_json::Value) -> Vec<String> {
    server["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// A real MCP client of `server`'s command started with `args`, as the agent would start it.
async fn mcp_client(
    server: &serde_json::Value,
    args: Vec<String>,
) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    use rmcp::ServiceExt;
    let command = server["command"].as_str().unwrap().to_string();
    ().serve(
        TokioChildProcess::new(tokio::process::Command::new(command).configure(|c| {
            c.args(args);
        }))
        .unwrap(),
    )
    .await
    .unwrap()
}

/// [`editor_tools_server`] with a client of it started.
async fn editor_tools_client() -> (
    Nvim,
    tempfile::NamedTempFile,
    rmcp::service::RunningService<rmcp::RoleClient, ()>,
) {
    let (nvim, log, server) = editor_tools_server().await;
    let client = mcp_client(&server, server_args(&server)).await;
    (nvim, log, client)
}

/// One editor tool's answer: its text, and whether it is an error.
async fn editor_tool(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &str,
) -> (String, bool) {
    let answer = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new(tool.to_string())
                .with_arguments(serde_json::Map::new()),
        )
        .await
        .unwrap();
    (tool_text(&answer), answer.is_error == Some(true))
}

/// The `selection` tool answers with the lines the person selected last, with their file
/// (relative to the root) and line range, also once they have gone back to the chat (the window
/// they worked in last); a workspace file with no selection says so, and a selection in a file
/// outside the workspace is not given.
#[tokio::test]
async fn the_selection_tool_gives_the_lines_last_selected_in_a_workspace_file() {
    let (nvim, _log, client) = editor_tools_client().await;
    let src = nvim.workspace.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let file = src.join("sel.py");
    std::fs::write(&file, "one = 1\ntwo = 2\nthree = 3\nfour = 4\n").unwrap();
    let other = nvim.workspace.path().join("other.py");
    std::fs::write(&other, "nothing = 0\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.py");
    std::fs::write(&secret, "kept = 'outside'\n").unwrap();
    let open = |path: &std::path::Path| vec![Value::from(path.display().to_string())];

    // A workspace file shown in the current window, nothing ever selected in it.
    nvim.lua(
        "vim.cmd('botright split ' .. vim.fn.fnameescape(...))",
        open(&other),
    )
    .await;
    assert_eq!(
        editor_tool(&client, "selection").await,
        ("nothing was selected in other.py".to_string(), false)
    );

    // Lines 2 and 3 selected (linewise), the selection left: the marks stay.
    nvim.lua(
        "vim.cmd('edit ' .. vim.fn.fnameescape(...)) vim.cmd('normal! 2GVj\\27')",
        open(&file),
    )
    .await;
    let expected = ("src/sel.py:2-3\ntwo = 2\nthree = 3".to_string(), false);
    assert_eq!(editor_tool(&client, "selection").await, expected);

    // The person goes back to the window they came from (the chat's, or one showing no file of
    // the workspace): the selection is the one of the window they worked in last.
    nvim.cmd("wincmd p").await;
    let here = nvim
        .lua("return vim.api.nvim_buf_get_name(0)", vec![])
        .await;
    assert!(
        !here.as_str().unwrap_or_default().ends_with("sel.py"),
        "{here:?}"
    );
    assert_eq!(editor_tool(&client, "selection").await, expected);

    // A selection in a file outside the workspace, in the window worked in last: not given.
    nvim.lua(
        "vim.cmd('wincmd p') vim.cmd('edit ' .. vim.fn.fnameescape(...)) \
         vim.cmd('normal! 1GV\\27') vim.cmd('wincmd p')",
        open(&secret),
    )
    .await;
    assert_eq!(
        editor_tool(&client, "selection").await,
        ("no file of the workspace is shown".to_string(), false)
    );
    client.cancel().await.unwrap();
}

/// The editor tools leave out a buffer opened through a link in the workspace to a file outside
/// it (outside by the path check, whatever its name says), and a buffer's huge unsaved
/// text is never given whole.
#[tokio::test]
async fn the_editor_tools_leave_out_a_buffer_reached_through_a_link_and_bound_a_huge_one() {
    let (nvim, _log, client) = editor_tools_client().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.py"), "kept = 'outside'\n").unwrap();
    // A file link: Neovim names its buffer by the link (a folder link it resolves itself).
    let through = nvim.workspace.path().join("leak.py");
    std::os::unix::fs::symlink(outside.path().join("secret.py"), &through).unwrap();
    std::fs::write(nvim.workspace.path().join("big.txt"), "x\n").unwrap();
    nvim.lua(
        "vim.cmd('edit ' .. vim.fn.fnameescape(...)) \
         vim.api.nvim_buf_set_lines(0, 0, -1, false, {'changed = 1'})",
        vec![Value::from(through.display().to_string())],
    )
    .await;
    nvim.lua(
        "vim.cmd('split ' .. vim.fn.fnameescape(...)) \
         local lines = {} for i = 1, 30000 do lines[i] = ('line %05d of a big buffer'):format(i) end \
         vim.api.nvim_buf_set_lines(0, 0, -1, false, lines)",
        vec![Value::from(
            nvim.workspace.path().join("big.txt").display().to_string(),
        )],
    )
    .await;
    // Both open and changed (the linked one is there to be left out).
    assert_eq!(
        nvim.lua(
            "local n = 0 for _, b in ipairs(vim.api.nvim_list_bufs()) do \
             if vim.bo[b].modified then n = n + 1 end end return n",
            vec![]
        )
        .await,
        Value::from(2)
    );
    let (text, error) = editor_tool(&client, "open_buffers").await;
    assert!(!error, "{text}");
    assert!(
        !text.contains("leak") && !text.contains("changed = 1"),
        "{text}"
    );
    assert!(
        text.starts_with("big.txt (unsaved changes):\nline 00001"),
        "{}",
        &text[..80]
    );
    // Clamped as read_file clamps a file: far fewer than the 30000 lines.
    assert!(!text.contains("line 30000"), "the whole buffer was given");
    assert!(
        text.chars().count() <= agent_nvim::text::MAX_CHARS + 200,
        "{}",
        text.chars().count()
    );
    client.cancel().await.unwrap();
}

/// The editor tools close with their agent: once `:Agent new here` goes back to the built-in
/// agent, the MCP server the agent was handed reaches nothing, and its socket's folder is gone.
#[tokio::test]
async fn the_editor_tools_close_when_the_conversation_leaves_their_agent() {
    let (nvim, _log, server) = editor_tools_server().await;
    let args = server_args(&server);
    let client = mcp_client(&server, args.clone()).await;
    let (_, error) = editor_tool(&client, "open_buffers").await;
    assert!(!error);
    let at = args.iter().position(|a| a == "--socket").unwrap() + 1;
    let socket = std::path::PathBuf::from(&args[at]);
    assert!(socket.exists(), "{socket:?}");
    nvim.cmd("Agent new here").await;
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
    let (text, error) = editor_tool(&client, "open_buffers").await;
    assert!(error, "{text}");
    assert!(text.contains("not reachable"), "{text}");
    assert!(!socket.parent().unwrap().exists(), "{socket:?}");
    client.cancel().await.unwrap();
}

/// `:checkhealth agent` names the MCP servers (never their env or headers), says which stdio
/// command is missing, and whether the editor tools are handed to agents.
#[tokio::test]
async fn checkhealth_lists_mcp_servers_by_name_only_and_the_editor_tools() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![("ANTHROPIC_API_KEY".into(), "unused".into())],
        setup: setup_lua(
            "editor_tools = true, mcp_servers = { \
               files = { command = '/bin/true', env = { TOKEN = 'health-secret-1' } }, \
               gone = { command = 'no-such-mcp-server-here' }, \
               docs = { url = 'https://docs.example/mcp', headers = { Authorization = 'health-secret-2' } } }",
        ),
    })
    .await;
    nvim.cmd("checkhealth agent").await;
    let health = nvim
        .lua(
            "return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')",
            vec![],
        )
        .await;
    let health = health.as_str().unwrap();
    for expected in [
        "MCP server files (setup, stdio): its command is there",
        "MCP server gone (setup, stdio): its command no-such-mcp-server-here is not found",
        "MCP server docs (setup, http): handed to agents that take http",
        "editor_tools: external agents are handed agent-nvim-editor",
    ] {
        assert!(health.contains(expected), "{expected:?} in:\n{health}");
    }
    assert!(!health.contains("health-secret"), "{health}");
}

/// A file attached with `@` goes to an agent that takes embedded context as a `resource` block
/// of its own (its URI and text), the typed text alone as the prompt's text; to one that does
/// not, inside the text as for the built-in agent.
#[tokio::test]
async fn an_attached_file_goes_as_a_resource_to_an_agent_that_takes_embedded_context() {
    let nvim = connected(None, "normal", "").await;
    std::fs::write(nvim.workspace.path().join("notes.md"), "keep it short\n").unwrap();
    nvim.cmd("Agent read @notes.md").await;
    let lines = nvim.wait_for_line(CHAT, "typed: ").await;
    assert_eq!(
        reported(&lines, "resources"),
        serde_json::json!([{"file": "notes.md", "scheme": "file", "text": "keep it short\n"}])
    );
    assert_eq!(
        reported(&lines, "typed"),
        serde_json::json!("read @notes.md")
    );
    drop(nvim);

    let nvim = connected(None, "load-only", "").await;
    std::fs::write(nvim.workspace.path().join("notes.md"), "keep it short\n").unwrap();
    nvim.cmd("Agent read @notes.md\nchat").await;
    let lines = nvim.wait_for_line(CHAT, "prompt: ").await;
    let prompt = reported(&lines, "prompt");
    let prompt = prompt.as_str().unwrap();
    assert!(
        prompt.contains("[attached: @ notes.md") && prompt.contains("keep it short"),
        "{prompt}"
    );
    assert!(!lines.iter().any(|l| l.starts_with("resources: ")));
}
