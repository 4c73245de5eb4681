//! A new user's first hour, in a real Neovim against the mock model: nothing typed is
//! lost or typed into the wrong window, and the layout survives the screen being resized.

use rmpv::Value;
use serde_json::json;

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{mock_options, Nvim, Options};

const CHAT: &str = "agent: chat";

fn turn(parts: Vec<Part>) -> Reply {
    Reply::Turn {
        parts,
        usage: (10, 2),
    }
}

fn text(s: &str) -> Reply {
    turn(vec![Part::Text(s.into())])
}

/// A reply whose one tool call is `name` with `args`.
fn call(name: &str, args: serde_json::Value) -> Reply {
    turn(vec![Part::ToolCall {
        id: "t1".into(),
        name: name.into(),
        args: args.to_string(),
    }])
}

/// A model that runs `command`, then answers `answer`.
fn one_command(command: &str, answer: &str) -> MockLlm {
    MockLlm::start(
        Wire::Anthropic,
        vec![
            call("run_bash", json!({ "command": command })),
            text(answer),
        ],
    )
}

fn with_ui(mock: &MockLlm, size: (i64, i64)) -> Options {
    Options {
        ui: Some(size),
        ..mock_options(mock, "")
    }
}

/// The current window's buffer name and the mode, as the person is left with them.
async fn where_am_i(nvim: &Nvim) -> (String, String) {
    let value = nvim
        .lua(
            "return { vim.fn.bufname('%'), vim.api.nvim_get_mode().mode }",
            vec![],
        )
        .await;
    let pair = value.as_array().unwrap();
    (
        pair[0].as_str().unwrap().to_string(),
        pair[1].as_str().unwrap().to_string(),
    )
}

/// The ids of the saved conversations, newest first.
async fn saved_ids(nvim: &Nvim) -> Vec<String> {
    let ids = nvim
        .lua(
            "return vim.tbl_map(function(s) return s.id end, require('agent').sessions())",
            vec![],
        )
        .await;
    ids.as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_prompt_sent_at_once_after_a_resume_is_queued_then_sent_and_the_input_has_focus_in_insert_mode(
) {
    let mock = crate::support::read_then_resume_mock((10, 2));
    let nvim = Nvim::start(mock_options(&mock, "")).await;
    nvim.write("a.txt", "alpha\n");
    nvim.cmd("Agent what is in a.txt?").await;
    nvim.wait_for_line(CHAT, "It says alpha.").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    let nvim = nvim.restart(mock_options(&mock, "")).await;
    // Reading a file, in Normal mode, as a person coming back to a project is.
    nvim.cmd("edit a.txt").await;
    nvim.lua("assert(require('agent.rpc').ensure())", vec![])
        .await;
    let id = saved_ids(&nvim).await.remove(0);
    nvim.cmd(&format!("Agent resume {id}")).await;
    // The next words typed go to the agent, not into a.txt (Insert mode starts once the
    // command has ended).
    nvim.wait_for("vim.api.nvim_get_mode().mode == 'i'").await;
    assert_eq!(
        where_am_i(&nvim).await,
        ("agent: input".to_string(), "i".to_string())
    );
    // Sent while the conversation is still being shown again: queued, never refused.
    nvim.cmd("Agent second prompt").await;
    nvim.wait_for_line(CHAT, "Still alpha.").await;
    let requests = mock.requests();
    assert_eq!(requests.len(), 3, "{requests:#?}");
    let last = requests[2].body["messages"].as_array().unwrap().clone();
    assert_eq!(
        last.last().unwrap()["content"][0]["text"],
        "second prompt",
        "{last:#?}"
    );
    // It comes after the conversation shown again, never in the middle of it.
    let chat = nvim.buffer_lines(CHAT).await;
    let resumed = chat
        .iter()
        .position(|l| l.starts_with("resumed: "))
        .unwrap();
    let sent = chat.iter().position(|l| l == "second prompt").unwrap();
    assert!(resumed < sent, "{chat:#?}");
    assert_eq!(
        chat.iter().filter(|l| *l == "## You").count(),
        2,
        "{chat:#?}"
    );
    assert_eq!(nvim.read("a.txt"), "alpha\n");
}

#[tokio::test]
async fn slash_resume_from_normal_mode_leaves_the_input_in_insert_mode() {
    let mock = crate::support::read_then_resume_mock((10, 2));
    let nvim = Nvim::start(mock_options(&mock, "")).await;
    nvim.write("a.txt", "alpha\n");
    nvim.cmd("Agent what is in a.txt?").await;
    nvim.wait_for_line(CHAT, "It says alpha.").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    let id = saved_ids(&nvim).await.remove(0);
    nvim.cmd("Agent new here").await;
    nvim.cmd("Agent").await;
    nvim.api
        .input(&format!("<Esc>S/resume {id}<Esc>"))
        .await
        .unwrap();
    nvim.wait_for("vim.api.nvim_get_mode().mode == 'n'").await;
    nvim.api.input("<CR>").await.unwrap();
    nvim.wait_for_line(CHAT, "resumed: what is in a.txt?").await;
    assert_eq!(
        where_am_i(&nvim).await,
        ("agent: input".to_string(), "i".to_string())
    );
}

#[tokio::test]
async fn agent_opens_the_input_in_insert_mode_so_the_first_letters_typed_are_kept() {
    let mock = MockLlm::start(Wire::Anthropic, vec![text("An overview.")]);
    let nvim = Nvim::start(mock_options(&mock, "")).await;
    nvim.cmd("Agent").await;
    nvim.api.input("Give me an overview<C-s>").await.unwrap();
    nvim.wait_for_line(CHAT, "An overview.").await;
    let sent = &mock.requests()[0].body["messages"][0]["content"][0]["text"];
    assert_eq!(sent, "Give me an overview");
}

#[tokio::test]
async fn after_e_and_w_focus_returns_to_the_input_in_the_mode_it_had() {
    let mock = one_command("echo model-said", "OK.");
    let nvim = Nvim::start(with_ui(&mock, (120, 36))).await;
    nvim.cmd("Agent").await;
    // Typing, and still in Insert mode when the question comes: it waits beside the input.
    nvim.api.input("go<C-s>").await.unwrap();
    nvim.wait_for("require('agent.approval').pending() == 1")
        .await;
    nvim.wait_for_screen(":Agent approve to answer").await;
    nvim.api.input("<M-a>").await.unwrap();
    nvim.wait_for("vim.bo.filetype == 'agent-approval'").await;
    nvim.api.input("e").await.unwrap();
    nvim.wait_for_screen(":w or <C-s> runs it").await;
    nvim.api
        .input("ccecho person-said<Esc>:w<CR>")
        .await
        .unwrap();
    nvim.wait_for_line(CHAT, "OK.").await;
    nvim.wait_for("vim.api.nvim_get_mode().mode == 'i'").await;
    assert_eq!(
        where_am_i(&nvim).await,
        ("agent: input".to_string(), "i".to_string())
    );
}

/// The chat window's width and the widest other window's, in the current tab page.
async fn widths(nvim: &Nvim) -> (i64, i64) {
    let value = nvim
        .lua(
            "local chat = vim.fn.bufwinid('agent: chat') local other = 0 \
             for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do \
               local name = vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(w)) \
               if not vim.b[vim.api.nvim_win_get_buf(w)].agent_buffer then other = math.max(other, vim.api.nvim_win_get_width(w)) end \
             end \
             return { vim.api.nvim_win_get_width(chat), other }",
            vec![],
        )
        .await;
    let pair = value.as_array().unwrap();
    (pair[0].as_i64().unwrap(), pair[1].as_i64().unwrap())
}

async fn resize(nvim: &Nvim, columns: i64, lines: i64, chat: i64) {
    nvim.api.ui_try_resize(columns, lines).await.unwrap();
    nvim.wait_for(&format!(
        "vim.o.columns == {columns} and vim.api.nvim_win_get_width(vim.fn.bufwinid('agent: chat')) == {chat}"
    ))
    .await;
}

#[tokio::test]
async fn the_chat_width_rule_is_applied_again_when_the_screen_shrinks_and_grows() {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    // Opened wide, then shrunk to 80x24: the code window keeps its share.
    let nvim = Nvim::start(with_ui(&mock, (200, 50))).await;
    nvim.cmd("Agent").await;
    assert_eq!(widths(&nvim).await, (80, 119));
    resize(&nvim, 80, 24, 40).await;
    assert_eq!(widths(&nvim).await, (40, 39));
    resize(&nvim, 200, 50, 80).await;
    assert_eq!(widths(&nvim).await, (80, 119));
    drop(nvim);
    // Opened narrow, then grown: the chat is as wide as the rule says for 200 columns.
    let nvim = Nvim::start(with_ui(&mock, (80, 24))).await;
    nvim.cmd("Agent").await;
    assert_eq!(widths(&nvim).await, (40, 39));
    resize(&nvim, 200, 50, 80).await;
    assert_eq!(widths(&nvim).await, (80, 119));
}

#[tokio::test]
async fn the_input_keeps_its_height_when_the_quickfix_list_closes() {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = Nvim::start(with_ui(&mock, (200, 50))).await;
    nvim.write("a.txt", "alpha\n");
    nvim.cmd("edit a.txt").await;
    nvim.cmd("Agent").await;
    let height = "vim.api.nvim_win_get_height(vim.fn.bufwinid('agent: input'))";
    assert_eq!(
        nvim.lua(&format!("return {height}"), vec![]).await,
        Value::from(5)
    );
    nvim.lua(
        "vim.fn.setqflist({ { filename = 'a.txt', lnum = 1, text = 'alpha' } })",
        vec![],
    )
    .await;
    nvim.cmd("stopinsert | botright copen | cc 1").await;
    nvim.cmd("cclose").await;
    nvim.wait_for(&format!("{height} == 5")).await;
    // Still 5 a moment later, once everything scheduled has run.
    nvim.lua("vim.wait(50)", vec![]).await;
    assert_eq!(
        nvim.lua(&format!("return {height}"), vec![]).await,
        Value::from(5)
    );
    // A height the person gives it, in it, is kept; a float closing changes nothing.
    nvim.cmd("call win_gotoid(bufwinid('agent: input')) | resize 9")
        .await;
    nvim.wait_for(&format!("{height} == 9")).await;
    nvim.lua(
        "local w = vim.api.nvim_open_win(vim.api.nvim_create_buf(false, true), false,          { relative = 'editor', row = 1, col = 1, width = 10, height = 2 })          vim.api.nvim_win_close(w, true)",
        vec![],
    )
    .await;
    nvim.cmd("botright copen | wincmd p | cclose").await;
    nvim.lua("vim.wait(50)", vec![]).await;
    assert_eq!(
        nvim.lua(&format!("return {height}"), vec![]).await,
        Value::from(9)
    );
}

#[tokio::test]
async fn at_80x24_the_choices_float_shows_its_last_choice() {
    let mock = one_command("echo hello", "OK.");
    let nvim = Nvim::start(with_ui(&mock, (80, 24))).await;
    nvim.cmd("Agent go").await;
    let screen = nvim.wait_for_screen("Allow once").await;
    assert!(screen.contains("Refuse with a reason"), "{screen}");
}

#[tokio::test]
async fn an_at_or_hash_word_that_attaches_nothing_says_why_in_the_chat_and_the_prompt_still_goes() {
    let mock = MockLlm::start(Wire::Anthropic, vec![text("Nothing to read.")]);
    let nvim = Nvim::start(with_ui(&mock, (120, 36))).await;
    nvim.write("notes.txt", "a note\n");
    nvim.cmd("edit notes.txt").await;
    std::fs::remove_file(nvim.workspace.path().join("notes.txt")).unwrap();
    nvim.cmd("Agent summarise #buffer and @nothing.txt").await;
    let chat = nvim.wait_for_line(CHAT, "Nothing to read.").await;
    assert!(
        chat.iter()
            .any(|l| l.contains("#buffer: notes.txt no longer exists")),
        "{chat:#?}"
    );
    assert!(
        chat.iter()
            .any(|l| l.contains("@ nothing.txt: no such file in the workspace")),
        "{chat:#?}"
    );
    let sent = mock.requests()[0].body["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        sent.starts_with("summarise #buffer and @nothing.txt\n\n")
            && sent.contains("[attached: #buffer: notes.txt no longer exists]"),
        "{sent}"
    );
}

/// The rows of the open keys float, read back from the screen.
async fn keys_float(nvim: &Nvim, title: &str) -> String {
    let screen = nvim.wait_for_screen(title).await;
    assert!(screen.contains("q, <Esc> or ? closes this"), "{screen}");
    screen
}

#[tokio::test]
async fn question_mark_lists_the_keys_of_the_chat_the_input_and_the_picker_and_slash_help_lists_both(
) {
    let mock = one_command("echo hello", "OK.");
    let nvim = Nvim::start(with_ui(&mock, (160, 45))).await;
    nvim.cmd("Agent").await;
    // The placeholder says so.
    nvim.wait_for_screen("<C-s> sends · ? keys").await;
    nvim.api.input("<Esc>?").await.unwrap();
    let screen = keys_float(&nvim, "Keys in the input").await;
    assert!(screen.contains("<C-S> (also insert)"), "{screen}");
    assert!(screen.contains("send the prompt"), "{screen}");
    assert!(screen.contains("stop the running turn"), "{screen}");
    nvim.api.input("q").await.unwrap();
    nvim.wait_for("vim.bo.filetype ~= 'agent-keys'").await;
    assert_eq!(where_am_i(&nvim).await.0, "agent: input");
    // In the chat.
    nvim.cmd("wincmd k").await;
    nvim.api.input("?").await.unwrap();
    let screen = keys_float(&nvim, "Keys in the chat").await;
    assert!(
        screen.contains("show or hide the tool output under the cursor"),
        "{screen}"
    );
    nvim.api.input("<Esc>").await.unwrap();
    nvim.wait_for("vim.bo.filetype ~= 'agent-keys'").await;
    // /help: the commands and both windows' keys.
    nvim.cmd("wincmd j").await;
    nvim.api.input("S/help<Esc><CR>").await.unwrap();
    let screen = keys_float(&nvim, "Commands (typed in the input").await;
    for shown in [
        "/resume",
        "Keys in the input",
        "Keys in the chat",
        "the keys of this window",
    ] {
        assert!(screen.contains(shown), "{shown}: {screen}");
    }
    nvim.api.input("q").await.unwrap();
    nvim.wait_for("vim.bo.filetype ~= 'agent-keys'").await;
    // In the picker: its choices and its keys.
    nvim.cmd("Agent go").await;
    nvim.wait_for("require('agent.approval').pending() == 1")
        .await;
    nvim.cmd("Agent approve").await;
    nvim.wait_for("vim.bo.filetype == 'agent-approval'").await;
    nvim.api.input("?").await.unwrap();
    let screen = keys_float(&nvim, "Keys in the approval picker").await;
    assert!(screen.contains("Allow once"), "{screen}");
    assert!(screen.contains("scroll the preview down"), "{screen}");
    nvim.api.input("q").await.unwrap();
    nvim.wait_for("vim.bo.filetype == 'agent-approval'").await;
    nvim.wait_for("require('agent.approval').waiting().armed")
        .await;
    nvim.api.input("4").await.unwrap();
    nvim.wait_for_line(CHAT, "OK.").await;
    // Answered after a look at the keys: back where the question first took focus from.
    nvim.wait_for("vim.bo.filetype ~= 'agent-approval'").await;
    assert_eq!(where_am_i(&nvim).await.0, "agent: input");
}

#[tokio::test]
async fn a_call_run_with_nobody_asked_says_why_in_its_row_and_a_refusal_says_so_once() {
    let bash = |id: &str, command: &str| Part::ToolCall {
        id: id.into(),
        name: "run_bash".into(),
        args: json!({ "command": command }).to_string(),
    };
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![bash("t1", "echo one")]),
            turn(vec![bash("t2", "touch two")]),
            turn(vec![bash("t3", "touch two")]),
            turn(vec![bash("t4", "touch three")]),
            text("OK."),
        ],
    );
    let nvim = Nvim::start(Options {
        ui: Some((160, 45)),
        ..mock_options(&mock, "permissions = { allow = { 'run_bash(echo *)' } }")
    })
    .await;
    nvim.cmd("Agent go").await;
    nvim.wait_for_line(CHAT, "$ echo one -> exit 0 · allowed by run_bash(echo *)")
        .await;
    // Allowed for the session (a lasting grant takes its key twice), then run unasked.
    nvim.wait_for("require('agent.approval').pending() == 1")
        .await;
    nvim.cmd("Agent approve").await;
    nvim.api.input("22").await.unwrap();
    // The asked row says what was answered; the next one, unasked, why it ran.
    nvim.wait_for(
        "#vim.tbl_filter(function(l) return l == '▸ $ touch two -> exit 0 · allowed for this session' end,          vim.api.nvim_buf_get_lines(vim.fn.bufnr('agent: chat'), 0, -1, false)) == 2",
    )
    .await;
    // Refused: said once, not "declined · refused".
    nvim.wait_for("require('agent.approval').pending() == 1")
        .await;
    nvim.cmd("Agent approve").await;
    nvim.api.input("4").await.unwrap();
    let chat = nvim.wait_for_line(CHAT, "OK.").await;
    assert!(
        chat.iter()
            .any(|l| l.ends_with("✗ $ touch three · refused")),
        "{chat:#?}"
    );
    assert!(!chat.join("\n").contains("declined · refused"));
}

#[tokio::test]
async fn enter_in_agent_diff_opens_a_tab_of_its_own_and_closing_it_returns_with_the_layout_kept() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            call(
                "edit_file",
                json!({"path": "a.txt", "old_str": "one", "new_str": "ONE"}),
            ),
            text("Changed."),
        ],
    );
    let nvim = Nvim::start(Options {
        ui: Some((200, 50)),
        ..mock_options(&mock, "auto_approve = true")
    })
    .await;
    nvim.write("a.txt", "one\ntwo\n");
    nvim.cmd("edit a.txt").await;
    nvim.cmd("Agent change it").await;
    nvim.wait_for_line(CHAT, "Changed.").await;
    let layout = "return vim.fn.winlayout(1)";
    let heights = "local h = {} for _, w in ipairs(vim.api.nvim_tabpage_list_wins(vim.api.nvim_list_tabpages()[1])) do \
                   h[#h + 1] = vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(w)):match('[^/]*$') .. '=' .. vim.api.nvim_win_get_height(w) \
                   end return table.concat(h, ' ')";
    nvim.cmd("stopinsert | Agent diff").await;
    nvim.wait_for("vim.bo.buftype == 'quickfix'").await;
    let before = (
        nvim.lua(layout, vec![]).await,
        nvim.lua(heights, vec![]).await,
    );
    nvim.api.input("<CR>").await.unwrap();
    nvim.wait_for("#vim.api.nvim_list_tabpages() == 2 and vim.wo.diff")
        .await;
    // The person's tab page is as it was.
    assert_eq!(
        (
            nvim.lua(layout, vec![]).await,
            nvim.lua(heights, vec![]).await
        ),
        before
    );
    // Closing one side closes the view and goes back to the list.
    nvim.cmd("quit").await;
    nvim.wait_for("#vim.api.nvim_list_tabpages() == 1 and vim.bo.buftype == 'quickfix'")
        .await;
    nvim.cmd("cclose").await;
    nvim.wait_for("vim.api.nvim_win_get_height(vim.fn.bufwinid('agent: input')) == 5")
        .await;
}

#[tokio::test]
async fn a_file_deleted_under_its_buffer_is_said_once_in_our_words_and_never_as_e211() {
    let mock = one_command("rm notes.txt", "Deleted.");
    let nvim = Nvim::start(Options {
        ui: Some((160, 45)),
        ..mock_options(&mock, "auto_approve = true")
    })
    .await;
    nvim.write("notes.txt", "keep me\n");
    nvim.cmd("edit notes.txt").await;
    nvim.cmd("Agent delete it").await;
    let chat = nvim.wait_for_line(CHAT, "Deleted.").await;
    let said: Vec<&String> = chat
        .iter()
        .filter(|l| {
            l.contains("agent: notes.txt no longer exists on disk; its buffer keeps the text")
        })
        .collect();
    assert_eq!(said.len(), 1, "{chat:#?}");
    // Neovim's own checks (focus coming back, :checktime) stay quiet about it.
    nvim.cmd("checktime").await;
    nvim.cmd("wincmd p").await;
    assert!(!nvim.messages().await.contains("E211"));
    assert_eq!(nvim.buffer_lines("notes.txt").await, ["keep me"]);
    // Written back, it is a file like any other again.
    nvim.cmd("write").await;
    assert_eq!(nvim.read("notes.txt"), "keep me\n");
}

#[tokio::test]
async fn after_a_rewind_in_a_long_chat_the_window_shows_the_cut_row_and_the_end() {
    let long = (1..=30)
        .map(|i| format!("line {i} of a long answer"))
        .collect::<Vec<_>>()
        .join("\n\n");
    let mock = MockLlm::start(Wire::Anthropic, (0..8).map(|_| text(&long)).collect());
    let nvim = Nvim::start(with_ui(&mock, (120, 40))).await;
    for i in 1..=8 {
        nvim.cmd(&format!("Agent prompt {i}")).await;
        nvim.wait_for("not require('agent.chat').busy()").await;
        nvim.wait_for(&format!(
            "#vim.tbl_filter(function(l) return l:find('^done') end, \
             vim.api.nvim_buf_get_lines(vim.fn.bufnr('agent: chat'), 0, -1, false)) == {i}"
        ))
        .await;
    }
    nvim.cmd("Agent rewind 1 conversation").await;
    nvim.wait_for_line(CHAT, "rewound to before prompt 1").await;
    let view = nvim
        .lua(
            "local w = vim.fn.bufwinid('agent: chat') return vim.api.nvim_win_call(w, function() \
             return { vim.fn.line('w0'), vim.fn.line('w$'), vim.fn.line('$'), \
                      vim.fn.search('^rewound to before prompt 1', 'nw') } end)",
            vec![],
        )
        .await;
    let view: Vec<i64> = view
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let (top, bottom, last, cut) = (view[0], view[1], view[2], view[3]);
    assert!(cut > 0, "{view:?}");
    // The end of the chat at the bottom, the cut row on screen above it.
    assert_eq!(bottom, last, "{view:?}");
    assert!(top <= cut, "{view:?}");
}

#[tokio::test]
async fn the_tab_label_names_the_chat_s_buffers_readably() {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = Nvim::start(with_ui(&mock, (120, 30))).await;
    nvim.cmd("Agent").await;
    nvim.cmd("stopinsert | tabnew | tabprevious | cd /").await;
    // The tabline is the screen's first row once it is drawn.
    nvim.wait_for("vim.o.showtabline > 0 and #vim.api.nvim_list_tabpages() == 2")
        .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let tabline = loop {
        let screen = nvim.screen();
        let first = screen.lines().next().unwrap_or_default().to_string();
        if first.contains("agent: input") || std::time::Instant::now() > deadline {
            break first;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    };
    assert!(
        tabline.contains("agent: input") && !tabline.contains("a//"),
        "{tabline}"
    );
}

#[tokio::test]
async fn every_done_row_of_a_resumed_chat_that_changed_files_offers_its_diff() {
    let edit = |id: &str, path: &str| Part::ToolCall {
        id: id.into(),
        name: "edit_file".into(),
        args: json!({"path": path, "old_str": "", "new_str": "new\n"}).to_string(),
    };
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![edit("t1", "one.txt")]),
            text("Made one."),
            turn(vec![edit("t2", "two.txt")]),
            text("Made two."),
        ],
    );
    let options = || mock_options(&mock, "auto_approve = true");
    let nvim = Nvim::start(options()).await;
    for (prompt, answer) in [("make one", "Made one."), ("make two", "Made two.")] {
        nvim.cmd(&format!("Agent {prompt}")).await;
        nvim.wait_for_line(CHAT, answer).await;
        nvim.wait_for("not require('agent.chat').busy()").await;
    }
    let nvim = nvim.restart(options()).await;
    nvim.lua("assert(require('agent.rpc').ensure())", vec![])
        .await;
    let id = saved_ids(&nvim).await.remove(0);
    nvim.cmd(&format!("Agent resume {id}")).await;
    nvim.wait_for_line(CHAT, "resumed: make one").await;
    let hints = "local b = vim.fn.bufnr('agent: chat') local out = {} \
         for _, m in ipairs(vim.api.nvim_buf_get_extmarks(b, -1, 0, -1, { details = true })) do \
           local line = vim.api.nvim_buf_get_lines(b, m[2], m[2] + 1, true)[1] \
           if m[4].virt_text and line:find('^done') then out[#out + 1] = m[4].virt_text[1][1] end \
         end return out";
    nvim.wait_for(&format!("#(function() {hints} end)() == 2"))
        .await;
    // Counted from each prompt to now: the first prompt's row counts both files.
    assert_eq!(
        nvim.lua(hints, vec![]).await,
        Value::Array(vec![
            Value::from("  d: diff (2 files changed)"),
            Value::from("  d: diff (1 file changed)"),
        ])
    );
}
