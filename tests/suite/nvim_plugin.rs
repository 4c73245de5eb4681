//! The plugin in a real Neovim (`nvim --embed`), against the mock model server: what a person
//! would see in the chat buffer, their windows and their files.

use std::time::Duration;

use rmpv::Value;
use serde_json::json;

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{setup_lua, Nvim, Options};
use crate::support::process::{alive, all_gone, children_named};
use crate::support::tool_result;

const CHAT: &str = "agent: chat";

fn turn(parts: Vec<Part>) -> Reply {
    Reply::Turn {
        parts,
        usage: (321, 12),
    }
}

fn text(s: &str) -> Part {
    Part::Text(s.into())
}

fn call(id: &str, name: &str, args: serde_json::Value) -> Part {
    Part::ToolCall {
        id: id.into(),
        name: name.into(),
        args: args.to_string(),
    }
}

fn env(mock: &MockLlm) -> Vec<(String, String)> {
    vec![
        ("ANTHROPIC_API_KEY".into(), "test-key".into()),
        ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
    ]
}

async fn start(mock: &MockLlm, ui: Option<(i64, i64)>, extra_setup: &str) -> Nvim {
    Nvim::start(Options {
        ui,
        env: env(mock),
        setup: setup_lua(extra_setup),
    })
    .await
}

#[tokio::test]
async fn setup_validates_fields_by_dotted_path_and_warns_about_unknown_keys() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: String::new(),
    })
    .await;
    nvim.lua("require('agent').setup({ window = { side = 'up' }, colour = 'red', \
              thinking = { budget = 10 }, reasoning = { effort = 'max' }, openai = { api = 'soap' }, \
              models = { m = { price = { input = 'x', output = 1 } } }, \
              acp = { agents = { x = { directories = { { path = 3 } } } } }, notify_command = 'notify-send', \
              live_lines = 2.5, follow = 'yes', keymaps = { ask = 3, chat = { output = 1 } } })", vec![]).await;
    let messages = nvim.messages().await;
    for path in [
        "live_lines",
        "follow",
        "keymaps.chat.output",
        "thinking",
        "reasoning",
        "openai.api",
        "models",
        "acp.agents.x.directories",
    ] {
        assert!(
            messages.contains(&format!("agent: `{path}` should be")),
            "{path}: {messages}"
        );
    }
    assert!(
        messages.contains("agent: `keymaps.ask` should be"),
        "{messages}"
    );
    assert!(
        messages.contains("agent: `window.side` should be"),
        "{messages}"
    );
    assert!(messages.contains("colour"), "{messages}");
    // Bad fields fall back to their defaults; good ones are kept.
    let options = nvim
        .lua(
            "local o = require('agent.config').options return {o.keymaps.ask, o.window.side}",
            vec![],
        )
        .await;
    assert_eq!(
        options,
        Value::Array(vec![Value::from("<leader>aa"), Value::from("right")])
    );
    // The defaults are there without setup() too.
    let defaults = nvim.lua("local c = require('agent.config').defaults() return {c.auto_approve, c.command_timeout, c.keymaps.ask}", vec![]).await;
    assert_eq!(
        defaults,
        Value::Array(vec![
            Value::from(false),
            Value::from(120),
            Value::from("<leader>aa")
        ])
    );
}

#[tokio::test]
async fn agent_prompt_streams_the_answer_into_the_chat_split() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![turn(vec![text(
            "Hello from the **mock** model.\nSecond line.",
        )])],
    );
    let nvim = start(&mock, None, "").await;
    nvim.lua(
        "vim.g.agent_events = {} for _, p in ipairs({'AgentTurnStart', 'AgentTurnDone'}) do \
         vim.api.nvim_create_autocmd('User', { pattern = p, callback = function(a) \
           local e = vim.g.agent_events table.insert(e, p .. ':' .. tostring(a.data.outcome)) vim.g.agent_events = e end }) end",
        vec![],
    )
    .await;
    nvim.cmd("Agent hello there").await;
    let lines = nvim
        .wait_for_line(CHAT, "done · 321 in / 12 out tokens")
        .await;
    let body = lines.join("\n");
    assert!(body.contains("hello there"), "{body}");
    assert!(
        body.contains("Hello from the **mock** model.\nSecond line."),
        "{body}"
    );
    let request = &mock.requests()[0];
    assert_eq!(
        request.body["messages"][0]["content"][0]["text"],
        "hello there"
    );
    nvim.wait_for("#vim.g.agent_events == 2").await;
    assert_eq!(
        nvim.lua("return vim.g.agent_events", vec![]).await,
        Value::Array(vec![
            Value::from("AgentTurnStart:nil"),
            Value::from("AgentTurnDone:done")
        ])
    );
    let status = nvim
        .lua(
            "local s = require('agent').status() return {s.state, s.input, s.output}",
            vec![],
        )
        .await;
    assert_eq!(
        status,
        Value::Array(vec![Value::from("idle"), Value::from(321), Value::from(12)])
    );
    // The split is a named markdown scratch buffer in its own window.
    let info = nvim
        .lua("local b = vim.fn.bufnr('agent: chat') return {vim.bo[b].filetype, vim.bo[b].buftype, #vim.fn.win_findbuf(b)}", vec![])
        .await;
    assert_eq!(
        info,
        Value::Array(vec![
            Value::from("markdown"),
            Value::from("nofile"),
            Value::from(1)
        ])
    );
}

#[tokio::test]
async fn tool_calls_show_as_rows_with_their_summaries() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![
                call("t1", "read_file", json!({"path": "a.txt"})),
                call("t2", "list_files", json!({})),
            ]),
            turn(vec![text("Both read.")]),
        ],
    );
    let nvim = start(&mock, None, "").await;
    nvim.write("a.txt", "alpha\n");
    nvim.cmd("Agent look").await;
    let lines = nvim.wait_for_line(CHAT, "Both read.").await;
    assert!(
        lines.iter().any(|l| l.contains("read a.txt (6 chars)")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("list . (1 entries)")),
        "{lines:?}"
    );
    assert_eq!(tool_result(&mock, 1, "t1"), ("alpha\n".to_string(), true));
}

#[tokio::test]
async fn headless_without_auto_approve_refuses_edits_and_commands() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![
                call(
                    "t1",
                    "edit_file",
                    json!({"path": "a.txt", "old_str": "alpha", "new_str": "beta"}),
                ),
                call("t2", "run_bash", json!({"command": "touch ran"})),
            ]),
            turn(vec![text("Refused, fine.")]),
        ],
    );
    let nvim = start(&mock, None, "").await;
    nvim.write("a.txt", "alpha\n");
    nvim.cmd("Agent change it").await;
    nvim.wait_for_line(CHAT, "Refused, fine.").await;
    assert_eq!(nvim.read("a.txt"), "alpha\n");
    assert!(!nvim.workspace.path().join("ran").exists());
    let declined = "The user declined to run edit_file. Ask what they would like to do instead.";
    assert_eq!(tool_result(&mock, 1, "t1"), (declined.to_string(), false));
}

#[tokio::test]
async fn auto_approve_edits_the_file_and_the_loaded_buffer_shows_it() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![call(
                "t1",
                "edit_file",
                json!({"path": "a.txt", "old_str": "alpha", "new_str": "beta"}),
            )]),
            turn(vec![text("Edited.")]),
        ],
    );
    let nvim = start(&mock, None, "auto_approve = true").await;
    nvim.write("a.txt", "alpha\nkeep\n");
    nvim.cmd("edit a.txt").await;
    nvim.cmd("Agent change it").await;
    nvim.wait_for_line(CHAT, "Edited.").await;
    assert_eq!(nvim.read("a.txt"), "beta\nkeep\n");
    nvim.wait_for("vim.api.nvim_buf_get_lines(vim.fn.bufnr('a.txt'), 0, 1, false)[1] == 'beta'")
        .await;
}

#[tokio::test]
async fn a_buffer_with_unsaved_changes_is_never_overwritten() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![call(
                "t1",
                "edit_file",
                json!({"path": "a.txt", "old_str": "alpha", "new_str": "beta"}),
            )]),
            turn(vec![text("Could not.")]),
        ],
    );
    let nvim = start(&mock, None, "auto_approve = true").await;
    nvim.write("a.txt", "alpha\n");
    nvim.cmd("edit a.txt").await;
    nvim.lua(
        "vim.api.nvim_buf_set_lines(0, 0, -1, false, {'my unsaved work'})",
        vec![],
    )
    .await;
    nvim.cmd("Agent change it").await;
    nvim.wait_for_line(CHAT, "Could not.").await;
    assert_eq!(nvim.read("a.txt"), "alpha\n");
    let buffer = nvim
        .lua(
            "return vim.api.nvim_buf_get_lines(vim.fn.bufnr('a.txt'), 0, -1, false)",
            vec![],
        )
        .await;
    assert_eq!(buffer, Value::Array(vec![Value::from("my unsaved work")]));
    let (text, ok) = tool_result(&mock, 1, "t1");
    assert!(!ok);
    assert_eq!(text, "edit_file: a.txt has unsaved changes in Neovim; ask the user to save or discard them first.");
}

async fn wait_for_file(path: &std::path::Path) -> String {
    for _ in 0..800 {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{} never appeared", path.display());
}

#[tokio::test]
async fn agent_stop_during_a_long_command_kills_its_process_tree() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![call(
                "t1",
                "run_bash",
                json!({"command": "sleep 1000 & echo $! > bg.pid; sleep 1000"}),
            )]),
            turn(vec![text("after")]),
        ],
    );
    let nvim = start(&mock, None, "auto_approve = true").await;
    nvim.cmd("Agent wait a while").await;
    let bg: i32 = wait_for_file(&nvim.workspace.path().join("bg.pid"))
        .await
        .trim()
        .parse()
        .unwrap();
    assert!(alive(bg));
    nvim.cmd("Agent stop").await;
    assert!(
        all_gone(&[bg], Duration::from_secs(3)).await,
        "the command's background job survived :Agent stop"
    );
    let (text, ok) = {
        // The cancelled call is answered; once the turn has ended, the next prompt carries it to
        // the model.
        nvim.wait_for("require('agent').status().state == 'idle'")
            .await;
        nvim.cmd("Agent next").await;
        tool_result(&mock, 1, "t1")
    };
    assert!(!ok);
    assert!(text.contains("[cancelled - process tree killed]"), "{text}");
}

#[tokio::test]
async fn quitting_neovim_mid_turn_leaves_no_backend_and_no_child_behind() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![turn(vec![call(
            "t1",
            "run_bash",
            json!({"command": "sleep 1000 & echo $! > bg.pid; echo $$ > sh.pid; sleep 1000"}),
        )])],
    );
    let mut nvim = start(&mock, None, "auto_approve = true").await;
    nvim.cmd("Agent wait").await;
    let bg: i32 = wait_for_file(&nvim.workspace.path().join("bg.pid"))
        .await
        .trim()
        .parse()
        .unwrap();
    let sh: i32 = wait_for_file(&nvim.workspace.path().join("sh.pid"))
        .await
        .trim()
        .parse()
        .unwrap();
    let nvim_pid = nvim.child.id().unwrap() as i32;
    let backend = children_named(nvim_pid, "agent-nvim");
    assert_eq!(backend.len(), 1, "one backend runs under Neovim");
    let backend = backend[0];
    assert!(alive(backend) && alive(bg) && alive(sh));
    let _ = nvim.api.command("qa!").await;
    let _ = tokio::time::timeout(Duration::from_secs(10), nvim.child.wait()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (name, pid) in [
        ("agent-nvim", backend),
        ("the command's shell", sh),
        ("its background job", bg),
    ] {
        assert!(
            !alive(pid),
            "{name} (pid {pid}) is still alive 2 s after Neovim quit"
        );
    }
}

#[tokio::test]
async fn the_ask_mapping_in_visual_mode_sends_the_selection_with_line_numbers() {
    let mock = MockLlm::start(Wire::Anthropic, vec![turn(vec![text("It adds.")])]);
    let nvim = start(&mock, None, "keymaps = { ask = '<leader>aa' }").await;
    nvim.write(
        "src/calc.rs",
        "fn one() {}\nfn add(a: i32, b: i32) -> i32 {\n    a + b\n}\nfn two() {}\n",
    );
    nvim.cmd("edit src/calc.rs").await;
    // vim.ui.input answered by a stub, as a person typing the question would.
    nvim.lua(
        "vim.ui.input = function(_, on_confirm) on_confirm('what does this do?') end",
        vec![],
    )
    .await;
    nvim.lua("vim.g.mapleader = ' '", vec![]).await;
    nvim.api.input("2GVj").await.unwrap();
    nvim.lua("vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<Plug>(agent-ask)', true, false, true), 'x', false)", vec![]).await;
    let requests = mock.wait_for_requests(1, Duration::from_secs(20));
    let sent = requests[0].body["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(sent.contains("what does this do?"), "{sent}");
    assert!(sent.contains("src/calc.rs"), "{sent}");
    assert!(
        sent.contains("2: fn add(a: i32, b: i32) -> i32 {"),
        "{sent}"
    );
    assert!(sent.contains("3:     a + b"), "{sent}");
    assert!(!sent.contains("1: fn one"), "{sent}");
    nvim.wait_for_line(CHAT, "It adds.").await;
}

#[tokio::test]
async fn the_users_cursor_and_window_are_unchanged_by_a_streamed_answer() {
    let long: String = (1..=200)
        .map(|i| format!("line {i} of a long answer\n"))
        .collect();
    let mock = MockLlm::start(Wire::Anthropic, vec![turn(vec![text(&long)])]);
    let nvim = start(&mock, Some((120, 40)), "").await;
    nvim.write("notes.txt", &"text\n".repeat(50));
    nvim.cmd("edit notes.txt").await;
    nvim.cmd("Agent").await;
    nvim.cmd("wincmd p").await;
    nvim.cmd("normal! 20G3|").await;
    let before = nvim.lua("return {vim.api.nvim_get_current_win(), vim.api.nvim_win_get_cursor(0), vim.fn.mode()}", vec![]).await;
    nvim.lua("require('agent').ask('write a lot')", vec![])
        .await;
    nvim.wait_for_line(CHAT, "done · ").await;
    let after = nvim.lua("return {vim.api.nvim_get_current_win(), vim.api.nvim_win_get_cursor(0), vim.fn.mode()}", vec![]).await;
    assert_eq!(before, after);
    let lines = nvim.buffer_lines(CHAT).await;
    assert!(
        lines.iter().any(|l| l == "line 200 of a long answer"),
        "{lines:?}"
    );
    // On screen: the user's file on the left, the conversation beside it following the answer
    // to its end, and the state back to idle.
    let screen = nvim.wait_for_screen("line 200 of a long answer").await;
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with("text ") && l.ends_with("│line 200 of a long answer")),
        "{screen}"
    );
    assert!(
        screen.lines().next().unwrap().contains("│ idle"),
        "{screen}"
    );
}

#[tokio::test]
async fn help_agent_finds_its_tags() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: String::new(),
    })
    .await;
    let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("doc");
    nvim.cmd(&format!("helptags {}", doc.display())).await;
    for tag in [
        "agent",
        ":Agent",
        "agent-config",
        "agent-tools",
        "agent-approval",
        "agent-approval-keys",
        "agent-approval-hunks",
        "agent-inline",
        "agent-inline-keys",
        "agent-undo-edit",
        "agent-btw",
        "agent-images",
        "agent-branches",
        "agent-export",
        "agent-fork",
        "<Plug>(agent-edit)",
        "agent-processes",
        "agent-acp",
        "agent-acp-terminals",
        "agent-acp-choices",
        "agent-acp-login",
        "agent-acp-conformance",
        "agent-acp-outside",
        "agent-acp-mcp",
        "agent-acp-elicitation",
        "agent-acp-editor-tools",
        "agent-acp-audio",
        "agent-rewind",
        "agent-conversations",
        "agent-worktrees",
        "agent-models",
        "agent-compact",
        "agent-health",
    ] {
        nvim.cmd(&format!("help {tag}")).await;
        let at = nvim
            .lua(
                "return {vim.fn.expand('%:t'), vim.api.nvim_get_current_line()}",
                vec![],
            )
            .await;
        let at = at.as_array().unwrap();
        assert_eq!(at[0], Value::from("agent.txt"), "{tag}");
        assert!(
            at[1].as_str().unwrap().contains(&format!("*{tag}*")),
            "{tag}: {:?}",
            at[1]
        );
        nvim.cmd("helpclose").await;
    }
}

#[tokio::test]
async fn checkhealth_reports_the_backend_and_which_keys_are_set_never_their_values() {
    let secret = "sk-ant-health-SECRET-77";
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![("ANTHROPIC_API_KEY".into(), secret.into())],
        setup: setup_lua(""),
    })
    .await;
    let report = nvim.checkhealth().await;
    let report = report.as_str();
    assert!(
        report.contains(&format!("agent-nvim {}", env!("CARGO_PKG_VERSION"))),
        "{report}"
    );
    assert!(report.contains("ANTHROPIC_API_KEY"), "{report}");
    assert!(report.contains("OPENAI_API_KEY"), "{report}");
    assert!(
        !report.contains(secret),
        "the key's value leaked into :checkhealth:\n{report}"
    );
    assert!(!report.contains("ERROR"), "{report}");
}

#[tokio::test]
async fn a_missing_backend_says_how_to_build_it() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: "require('agent').setup({ backend = '/nonexistent/agent-nvim' })".into(),
    })
    .await;
    // The error is shown to the user (over RPC it comes back as the command's error).
    let shown = match nvim.api.command("Agent hello").await {
        Ok(()) => nvim.messages().await,
        Err(err) => err.to_string(),
    };
    assert!(shown.contains("cargo build --release"), "{shown}");
    let health = {
        nvim.cmd("checkhealth agent").await;
        nvim.lua(
            "return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')",
            vec![],
        )
        .await
    };
    assert!(
        health.as_str().unwrap().contains("cargo build --release"),
        "{health}"
    );
}

#[tokio::test]
async fn agent_log_opens_the_backends_log_file() {
    let mock = MockLlm::start(Wire::Anthropic, vec![turn(vec![text("hi")])]);
    let nvim = start(&mock, None, "").await;
    nvim.cmd("Agent hello").await;
    nvim.wait_for_line(CHAT, "done · ").await;
    nvim.cmd("Agent log").await;
    let name = nvim.lua("return vim.fn.expand('%:t')", vec![]).await;
    assert_eq!(name, Value::from("agent.log"));
    let log = nvim
        .lua(
            "return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')",
            vec![],
        )
        .await;
    assert!(log.as_str().unwrap().contains("session started"), "{log}");
    assert!(
        !log.as_str().unwrap().contains("test-key"),
        "the API key is in the log"
    );
}

#[tokio::test]
async fn an_external_agents_thoughts_plans_and_tool_updates_render_in_place() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: String::new(),
    })
    .await;
    nvim.lua("require('agent').open({ focus = false })", vec![])
        .await;
    let receive = |events: &str| format!("require('agent.rpc').receive({events})");
    nvim.lua(&receive("{ {type='turn_started'}, {type='thought', text='Let me '}, {type='thought', text='think.\\nSecond thought.'} }"), vec![]).await;
    nvim.lua(&receive("{ {type='plan', entries={ {content='Read the file', status='completed'}, {content='Fix it', status='in_progress'}, {content='Test', status='pending'} }} }"), vec![]).await;
    nvim.lua(
        &receive("{ {type='tool_started', id='c1', name='Read a.txt', args=vim.NIL} }"),
        vec![],
    )
    .await;
    nvim.lua(&receive("{ {type='tool_updated', id='c1', title='Read a.txt (10 lines)', status='in_progress', output='partial'} }"), vec![]).await;
    nvim.lua(&receive("{ {type='text', text='Done thinking.'} }"), vec![])
        .await;
    nvim.lua(&receive("{ {type='plan', entries={ {content='Read the file', status='completed'}, {content='Fix it', status='completed'}, {content='Test', status='completed'} }} }"), vec![]).await;
    nvim.lua(&receive("{ {type='tool_finished', id='c1', name='Read a.txt', ok=true, summary='Read a.txt (10 lines)', output='one\\ntwo'} }"), vec![]).await;
    let lines = nvim.buffer_lines(CHAT).await;
    let body = lines.join("\n");
    // The thought is one folded block that grew; its text is under its row.
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("… thought")).count(),
        1,
        "{body}"
    );
    assert!(
        body.contains("… thought (2 lines)\n  Let me think.\n  Second thought."),
        "{body}"
    );
    // The first plan, then the tool row updated in place and finished, then a second plan block.
    assert!(
        body.contains("Plan\n- [x] Read the file\n- [~] Fix it\n- [ ] Test"),
        "{body}"
    );
    assert!(
        body.contains("▸ Read a.txt (10 lines)\n  one\n  two"),
        "{body}"
    );
    assert!(
        !body.contains("partial"),
        "the update's output was replaced: {body}"
    );
    assert!(
        body.contains("Plan\n- [x] Read the file\n- [x] Fix it\n- [x] Test"),
        "{body}"
    );
    // Thoughts are folded closed in the chat window.
    let folded = nvim
        .lua("local w = vim.fn.win_findbuf(vim.fn.bufnr('agent: chat'))[1] local row = vim.fn.match(vim.api.nvim_buf_get_lines(vim.fn.bufnr('agent: chat'), 0, -1, false), '^… thought') + 1 return vim.api.nvim_win_call(w, function() return vim.fn.foldclosed(row) end)", vec![])
        .await;
    assert!(folded.as_i64().unwrap() > 0, "{folded:?}");
}

#[tokio::test]
async fn without_an_api_key_a_prompt_says_which_variables_to_set() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: format!(
            "require('agent').setup({{ backend = '{}' }})",
            env!("CARGO_BIN_EXE_agent-nvim")
        ),
    })
    .await;
    nvim.cmd("Agent").await;
    // The new conversation's first line says it, as advice (an ACP-only user needs no key)...
    let lines = nvim.wait_for_line(CHAT, "? for keys").await;
    assert_eq!(
        lines,
        vec![
            "agent: no model provider: neither ANTHROPIC_API_KEY nor OPENAI_API_KEY is set. \
             Export one in the shell and start Neovim again, or set api_key_cmd (a command that \
             prints the key, such as { \"pass\", \"show\", \"anthropic\" }) or api_key in \
             setup() (with provider = \"openai\" for OpenAI); provider = \"ollama\" needs no key \
             · ? for keys",
            ""
        ]
    );
    // ...and a prompt for the built-in agent is answered with it.
    nvim.cmd("Agent hello").await;
    nvim.wait_for(
        "#vim.tbl_filter(function(l) return l:find('nor OPENAI_API_KEY is set', 1, true) end, \
         vim.api.nvim_buf_get_lines(vim.fn.bufnr('agent: chat'), 0, -1, false)) == 2",
    )
    .await;
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
}

#[tokio::test]
async fn the_backend_starts_on_first_use_never_at_start_up() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: setup_lua(""),
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let nvim_pid = nvim.child.id().unwrap() as i32;
    assert!(
        children_named(nvim_pid, "agent-nvim").is_empty(),
        "a backend started with Neovim"
    );
    nvim.cmd("Agent").await;
    nvim.wait_for("require('agent').status().state ~= 'off'")
        .await;
    assert_eq!(children_named(nvim_pid, "agent-nvim").len(), 1);
}

#[tokio::test]
async fn a_backend_speaking_another_protocol_is_refused_with_how_to_rebuild() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: setup_lua(""),
    })
    .await;
    nvim.cmd("Agent").await;
    nvim.lua(
        "require('agent.rpc').receive({ { type = 'started', version = '0.0.1', protocol = 999, provider = '', model = '', workspace = '/' } })",
        vec![],
    )
    .await;
    let lines = nvim.wait_for_line(CHAT, "protocol 999").await;
    assert!(
        lines.join("\n").contains("cargo build --release"),
        "{lines:?}"
    );
}

#[tokio::test]
async fn without_git_the_chat_works_says_once_that_checkpoints_are_off_and_checkhealth_says_why() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![turn(vec![text("first")]), turn(vec![text("second")])],
    );
    let (_bin, path) = crate::support::path_without_git();
    let mut env = env(&mock);
    env.push(("PATH".into(), path));
    let nvim = Nvim::start(Options {
        ui: None,
        env,
        setup: setup_lua(""),
    })
    .await;
    nvim.cmd("Agent hello").await;
    nvim.wait_for_line(CHAT, "first").await;
    nvim.cmd("Agent again").await;
    let lines = nvim.wait_for_line(CHAT, "second").await;
    let off = "agent: checkpoints are off: git was not found on PATH; install git to be able to \
               rewind";
    let said: Vec<&String> = lines.iter().filter(|line| line.contains(off)).collect();
    assert_eq!(said.len(), 1, "{lines:#?}");

    let report = nvim.checkhealth().await;
    let report = report.as_str();
    assert!(
        report.contains("git was not found on PATH: checkpoints are off"),
        "{report}"
    );
}

#[tokio::test]
async fn checkhealth_says_checkpoints_are_on_where_git_is() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: setup_lua(""),
    })
    .await;
    let report = nvim.checkhealth().await;
    let report = report.as_str();
    assert!(report.contains("checkpoints on, kept in "), "{report}");
}
