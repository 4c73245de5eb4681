//! What goes with a prompt, in a real Neovim against the mock model: the code around the
//! cursor, the project's instructions, prompts queued behind a turn, and the model switched for
//! the following prompts. Each asserts on the request the mock recorded, which is what the model
//! reads.

use std::time::Duration;

use serde_json::json;

use crate::support::mock_llm::{MockLlm, Part, Recorded, Reply, Wire};
use crate::support::nvim::{setup_lua, Nvim, Options};

const CHAT: &str = "agent: chat";
const WAIT: Duration = Duration::from_secs(30);

fn answer(s: &str) -> Reply {
    Reply::Turn {
        parts: vec![Part::Text(s.into())],
        usage: (10, 2),
    }
}

async fn start(mock: &MockLlm, extra_setup: &str) -> Nvim {
    Nvim::start(Options {
        ui: Some((120, 40)),
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "test-key".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua(extra_setup),
    })
    .await
}

/// The text of the last user message of `request` (Anthropic's shape: after a cancelled
/// call the prompt follows the tool results in the same message).
fn prompt_of(request: &Recorded) -> String {
    let messages = request.body["messages"].as_array().unwrap();
    let content = messages.last().unwrap()["content"].as_array().unwrap();
    let text = content.iter().rev().find(|block| block["type"] == "text");
    text.unwrap()["text"].as_str().unwrap().to_string()
}

fn system_of(request: &Recorded) -> String {
    request.body["system"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn the_ask_mapping_in_normal_mode_sends_the_cursor_line_and_the_lines_around_it() {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("It adds.")]);
    let nvim = start(&mock, "ask = { context_lines = 2 }").await;
    nvim.write(
        "calc.py",
        "import os\n\ndef add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n",
    );
    nvim.cmd("edit calc.py").await;
    // An unsaved change is sent as the buffer shows it.
    nvim.lua(
        "vim.api.nvim_buf_set_lines(0, 3, 4, false, { '    return a + b  # sum' })",
        vec![],
    )
    .await;
    nvim.lua(
        "vim.ui.input = function(_, on_confirm) on_confirm('why?') end",
        vec![],
    )
    .await;
    nvim.api.input("4G").await.unwrap();
    nvim.lua(
        "vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<Plug>(agent-ask)', true, false, true), 'x', false)",
        vec![],
    )
    .await;
    let requests = mock.wait_for_requests(1, WAIT);
    let sent = prompt_of(&requests[0]);
    assert!(
        sent.starts_with("why?\n\n(I am in calc.py, at line 4.)"),
        "{sent}"
    );
    assert!(
        sent.contains("lines 2-6, around line 4, of calc.py:\n```python\n"),
        "{sent}"
    );
    assert!(sent.contains("4:     return a + b  # sum\n"), "{sent}");
    assert!(sent.contains("3: def add(a, b):\n"), "{sent}");
    assert!(sent.contains("6: def sub(a, b):\n```"), "{sent}");
    // Clamped to ask.context_lines: nothing further than two lines away.
    assert!(!sent.contains("1: import os"), "{sent}");
    assert!(!sent.contains("7:"), "{sent}");
    nvim.wait_for_line(CHAT, "It adds.").await;

    // Long lines around the cursor are dropped before the cursor line is.
    nvim.write(
        "min.js",
        &format!(
            "{}\nvar cursor = 1;\n{}\n",
            "x".repeat(30_000),
            "y".repeat(30_000)
        ),
    );
    nvim.cmd("edit min.js").await;
    nvim.api.input("2G").await.unwrap();
    let context = nvim.lua("return require('agent')._context()", vec![]).await;
    let context = context.as_str().unwrap().to_string();
    assert!(
        context.contains("\n2: var cursor = 1;\n"),
        "{}",
        &context[..200]
    );
    assert!(context.contains("[... truncated at 20000 chars]"));
    assert!(
        context.chars().count() < 20_300,
        "{}",
        context.chars().count()
    );

    // At the top of a file, the lines before it are clamped to the file.
    let mock2 = MockLlm::start(Wire::Anthropic, vec![answer("ok")]);
    let nvim2 = start(&mock2, "").await;
    nvim2.write("one.txt", "only line\n");
    nvim2.cmd("edit one.txt").await;
    nvim2
        .lua(
            "vim.ui.input = function(_, on_confirm) on_confirm('what?') end",
            vec![],
        )
        .await;
    nvim2
        .lua(
            "vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<Plug>(agent-ask)', true, false, true), 'x', false)",
            vec![],
        )
        .await;
    let sent = prompt_of(&mock2.wait_for_requests(1, WAIT)[0]);
    assert!(
        sent.ends_with("line 1 of one.txt:\n```text\n1: only line\n```"),
        "{sent}"
    );
}

#[tokio::test]
async fn agents_md_goes_into_the_system_prompt_and_its_change_is_read_at_the_next_prompt() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            answer("one"),
            answer("two"),
            answer("three"),
            answer("four"),
        ],
    );
    let nvim = start(&mock, "").await;
    nvim.write(
        "AGENTS.md",
        "Run `make check` before saying you are done.\n",
    );
    nvim.write("CLAUDE.md", "Not this one while AGENTS.md is there.\n");
    nvim.cmd("Agent first").await;
    nvim.wait_for_line(CHAT, "instructions: AGENTS.md").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    let system = system_of(&mock.requests()[0]);
    assert!(
        system.contains("from AGENTS.md at the workspace root"),
        "{system}"
    );
    assert!(
        system.ends_with("\nRun `make check` before saying you are done.\n"),
        "{system}"
    );
    assert!(!system.contains("Not this one"), "{system}");

    nvim.write("AGENTS.md", "Use tabs, never spaces.\n");
    nvim.cmd("Agent second").await;
    nvim.wait_for_line(CHAT, "instructions: AGENTS.md (changed; read again)")
        .await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    let system = system_of(&mock.requests()[1]);
    assert!(system.ends_with("\nUse tabs, never spaces.\n"), "{system}");
    assert!(!system.contains("make check"), "{system}");

    // Unchanged: the same prompt, nothing said again.
    nvim.cmd("Agent third").await;
    nvim.wait_for_line(CHAT, "three").await;
    assert_eq!(system_of(&mock.requests()[2]), system);
    let chat = nvim.buffer_lines(CHAT).await.join("\n");
    assert_eq!(chat.matches("instructions: ").count(), 2, "{chat}");

    // Removed: said, and gone from the prompt.
    nvim.wait_for("not require('agent.chat').busy()").await;
    std::fs::remove_file(nvim.workspace.path().join("AGENTS.md")).unwrap();
    nvim.cmd("Agent fourth").await;
    nvim.wait_for_line(CHAT, "instructions: CLAUDE.md").await;
    let system = system_of(&mock.wait_for_requests(4, WAIT)[3]);
    assert!(
        system.ends_with("\nNot this one while AGENTS.md is there.\n"),
        "{system}"
    );
}

#[tokio::test]
async fn instructions_false_sends_none_and_claude_md_is_read_when_agents_md_is_missing() {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("a")]);
    let nvim = start(&mock, "instructions = false").await;
    nvim.write("AGENTS.md", "SECRET-RULE-1\n");
    nvim.cmd("Agent hi").await;
    nvim.wait_for_line(CHAT, "done · ").await;
    assert!(!system_of(&mock.requests()[0]).contains("SECRET-RULE-1"));
    let chat = nvim.buffer_lines(CHAT).await.join("\n");
    assert!(!chat.contains("instructions:"), "{chat}");

    let mock = MockLlm::start(Wire::Anthropic, vec![answer("b")]);
    let nvim = start(&mock, "").await;
    nvim.write("CLAUDE.md", "CLAUDE-RULE-2\n");
    nvim.cmd("Agent hi").await;
    nvim.wait_for_line(CHAT, "instructions: CLAUDE.md").await;
    assert!(system_of(&mock.wait_for_requests(1, WAIT)[0]).contains("CLAUDE-RULE-2"));
}

/// A first turn that runs a command for a few seconds (auto_approve), so prompts can be sent
/// while it works.
fn slow_first_turn() -> Vec<Reply> {
    vec![
        Reply::Turn {
            parts: vec![Part::ToolCall {
                id: "t1".into(),
                name: "run_bash".into(),
                args: json!({"command": "sleep 3"}).to_string(),
            }],
            usage: (1, 1),
        },
        answer("first answered"),
        answer("second answered"),
        answer("third answered"),
    ]
}

#[tokio::test]
async fn prompts_sent_during_a_turn_are_queued_shown_and_sent_in_order_when_it_ends() {
    let mock = MockLlm::start(Wire::Anthropic, slow_first_turn());
    let nvim = start(&mock, "auto_approve = true").await;
    nvim.cmd("Agent first").await;
    nvim.wait_for_line(CHAT, "… running run_bash").await;
    // Typed into the input and sent, as a person does while the agent works.
    for prompt in ["second", "third"] {
        nvim.lua(
            "local w = require('agent.chat.window') \
             vim.api.nvim_buf_set_lines(w.input_buf, 0, -1, false, { ... }) \
             vim.api.nvim_set_current_win(vim.fn.bufwinid(w.input_buf))",
            vec![prompt.into()],
        )
        .await;
        nvim.api.input("<C-s>").await.unwrap();
    }
    nvim.wait_for("#require('agent').queue() == 2").await;
    // Shown under the chat, and the input was emptied.
    nvim.wait_for_screen("queued: second · +1 more").await;
    let input = nvim
        .lua(
            "return vim.api.nvim_buf_get_lines(require('agent.chat.window').input_buf, 0, -1, false)",
            vec![],
        )
        .await;
    assert_eq!(input, rmpv::Value::Array(vec!["".into()]));
    nvim.wait_for_line(CHAT, "third answered").await;
    let requests = mock.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(prompt_of(&requests[2]), "second");
    assert_eq!(prompt_of(&requests[3]), "third");
    // In the chat in the order they went, each after the answer before it.
    let chat = nvim.buffer_lines(CHAT).await.join("\n");
    let at = |s: &str| chat.find(s).unwrap_or_else(|| panic!("{s} in {chat}"));
    assert!(at("first answered") < at("\nsecond\n"), "{chat}");
    assert!(at("second answered") < at("\nthird\n"), "{chat}");
    nvim.wait_for("#require('agent').queue() == 0").await;
    let bar = nvim
        .lua(
            "return vim.wo[vim.fn.bufwinid(require('agent.chat.window').input_buf)].winbar",
            vec![],
        )
        .await;
    assert_eq!(bar.as_str(), Some(""));
}

#[tokio::test]
async fn agent_stop_with_a_queue_asks_and_drops_it_or_sends_it() {
    let mock = MockLlm::start(Wire::Anthropic, slow_first_turn());
    let nvim = start(&mock, "auto_approve = true").await;
    nvim.cmd("Agent first").await;
    nvim.wait_for_line(CHAT, "… running run_bash").await;
    nvim.lua("require('agent').ask('second')", vec![]).await;
    nvim.lua("require('agent').ask('third')", vec![]).await;
    // The question, answered as a person picking the first choice would.
    nvim.lua(
        "vim.ui.select = function(items, opts, on_choice) \
           vim.g.asked = opts.prompt .. ' | ' .. opts.format_item(items[1]) .. ' | ' .. opts.format_item(items[2]) \
           on_choice(items[1]) end",
        vec![],
    )
    .await;
    nvim.api.input(":Agent stop<CR>").await.unwrap();
    nvim.wait_for_line(CHAT, "cancelled").await;
    let asked = nvim.lua("return vim.g.asked", vec![]).await;
    assert_eq!(
        asked.as_str(),
        Some("agent: stopped; prompts are queued behind it | Stop, and drop the 2 queued prompts | Stop, then send the 2 queued prompts")
    );
    nvim.wait_for("not require('agent.chat').busy()").await;
    // Dropped: nothing more is sent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(mock.requests().len(), 1);
    assert_eq!(
        nvim.lua("return #require('agent').queue()", vec![]).await,
        rmpv::Value::from(0)
    );
}

#[tokio::test]
async fn a_stop_answered_after_the_turn_ended_keeps_the_queue_and_sends_it_then() {
    let mock = MockLlm::start(Wire::Anthropic, slow_first_turn());
    let nvim = start(&mock, "auto_approve = true").await;
    nvim.cmd("Agent first").await;
    nvim.wait_for_line(CHAT, "… running run_bash").await;
    nvim.lua("require('agent').ask('second')", vec![]).await;
    // An asynchronous picker (as dressing.nvim's): the answer comes later.
    nvim.lua(
        "vim.ui.select = function(items, _, on_choice) vim.g.answer = function() on_choice(items[2]) end end",
        vec![],
    )
    .await;
    nvim.api.input(":Agent stop<CR>").await.unwrap();
    nvim.wait_for_line(CHAT, "cancelled").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    // While the question is open, nothing is sent from the queue, and a new prompt goes behind.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(mock.requests().len(), 1);
    nvim.lua("require('agent').ask('third')", vec![]).await;
    assert_eq!(
        nvim.lua("return require('agent').queue()", vec![]).await,
        rmpv::Value::Array(vec!["second".into(), "third".into()])
    );
    nvim.lua("vim.g.answer()", vec![]).await;
    // Kept: sent in order, each once the turn before it is over (the cancelled turn made one
    // request, so the mock's answers run one behind).
    nvim.wait_for_line(CHAT, "second answered").await;
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(prompt_of(&requests[1]), "second");
    assert_eq!(prompt_of(&requests[2]), "third");
}

#[tokio::test]
async fn agent_queue_takes_prompts_back_into_the_input_in_order() {
    let mock = MockLlm::start(Wire::Anthropic, slow_first_turn());
    let nvim = start(&mock, "auto_approve = true").await;
    nvim.cmd("Agent first").await;
    nvim.wait_for_line(CHAT, "… running run_bash").await;
    for prompt in ["one", "two 50% done", "three"] {
        nvim.lua("require('agent').ask(...)", vec![prompt.into()])
            .await;
    }
    // A `%` in a prompt does not break the winbar.
    nvim.wait_for_screen("queued: one · +2 more").await;
    // "Remove them all", the last choice.
    nvim.lua(
        "vim.ui.select = function(items, opts, on_choice) \
           vim.g.rows = vim.tbl_map(opts.format_item, items) on_choice(items[#items]) end",
        vec![],
    )
    .await;
    nvim.api.input(":Agent queue<CR>").await.unwrap();
    nvim.wait_for("#require('agent').queue() == 0").await;
    assert_eq!(
        nvim.lua("return vim.g.rows", vec![]).await,
        rmpv::Value::Array(vec![
            "1. one".into(),
            "2. two 50% done".into(),
            "3. three".into(),
            "Remove them all".into()
        ])
    );
    let input = nvim
        .lua(
            "return vim.api.nvim_buf_get_lines(require('agent.chat.window').input_buf, 0, -1, false)",
            vec![],
        )
        .await;
    assert_eq!(
        input,
        rmpv::Value::Array(vec![
            "one".into(),
            "".into(),
            "two 50% done".into(),
            "".into(),
            "three".into()
        ])
    );
    nvim.wait_for_line(CHAT, "first answered").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(mock.requests().len(), 2, "nothing queued was sent");
}

#[tokio::test]
async fn agent_model_switches_the_model_of_the_following_prompts_and_the_status_line_shows_it() {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("a"), answer("b")]);
    let nvim = start(&mock, "models = { 'claude-opus-4-1', 'claude-haiku-4-5' }").await;
    nvim.cmd("Agent hi").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    let first = mock.requests()[0].body["model"]
        .as_str()
        .unwrap()
        .to_string();
    // Completion offers setup()'s models and the one in use (the provider's default).
    let completion = nvim
        .lua(
            "return vim.fn.getcompletion('Agent model ', 'cmdline')",
            vec![],
        )
        .await;
    let offered: Vec<&str> = completion
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(offered.contains(&"claude-opus-4-1"), "{offered:?}");
    assert!(offered.contains(&"claude-haiku-4-5"), "{offered:?}");
    assert!(offered.contains(&first.as_str()), "{offered:?}");
    nvim.api
        .input(":Agent model claude-opus-4-1<CR>")
        .await
        .unwrap();
    nvim.wait_for_screen("claude-opus-4-1 · ").await;
    nvim.cmd("Agent again").await;
    nvim.wait_for_line(CHAT, "b").await;
    let requests = mock.wait_for_requests(2, WAIT);
    assert_eq!(requests[1].body["model"], "claude-opus-4-1");
    assert_ne!(first, "claude-opus-4-1");
    // Words after `:Agent model` are refused, not taken for a model, and so is a newline.
    for bad in ["this as a struct", "a\nb"] {
        nvim.lua(
            "local ok, err = require('agent.rpc').model(...) vim.g.refused = err",
            vec![bad.into()],
        )
        .await;
        let refused = nvim.lua("return vim.g.refused", vec![]).await;
        assert!(
            refused
                .as_str()
                .unwrap()
                .contains("needs one model name, without spaces"),
            "{refused:?}"
        );
    }
    assert_eq!(
        nvim.lua("return require('agent').status().model", vec![])
            .await,
        rmpv::Value::from("claude-opus-4-1")
    );
}

#[tokio::test]
async fn a_files_own_at_and_hash_words_around_the_cursor_attach_nothing() {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("ok")]);
    let nvim = start(&mock, "").await;
    nvim.write(".env", "DB_PASSWORD=hunter2-XYZ\n");
    nvim.write(
        "notes.md",
        "# Notes\nsee @.env and #buffers for the config\n",
    );
    nvim.cmd("edit notes.md").await;
    nvim.lua(
        "vim.ui.input = function(_, on_confirm) on_confirm('what is this?') end",
        vec![],
    )
    .await;
    nvim.api.input("2G").await.unwrap();
    nvim.lua(
        "vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<Plug>(agent-ask)', true, false, true), 'x', false)",
        vec![],
    )
    .await;
    let sent = prompt_of(&mock.wait_for_requests(1, WAIT)[0]);
    // The repository's lines go as they are; only the person's words are read for @ and #.
    assert!(
        sent.contains("2: see @.env and #buffers for the config"),
        "{sent}"
    );
    assert!(!sent.contains("hunter2-XYZ"), "{sent}");
    assert!(!sent.contains("[attached:"), "{sent}");
}

#[tokio::test]
async fn an_unknown_slash_word_is_not_sent_and_stays_in_the_input() {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("ok")]);
    let nvim = start(&mock, "").await;
    nvim.cmd("Agent").await;
    nvim.lua(
        "local w = require('agent.chat.window') \
         vim.api.nvim_buf_set_lines(w.input_buf, 0, -1, false, { '/tmp is full, why?' }) \
         vim.api.nvim_set_current_win(vim.fn.bufwinid(w.input_buf))",
        vec![],
    )
    .await;
    nvim.api.input("<C-s>").await.unwrap();
    // In the chat, above the input being typed in: said once, where `-- INSERT --` cannot
    // draw over it.
    nvim.wait_for_line(CHAT, "agent: no command /tmp").await;
    let screen = nvim.wait_for_screen("agent: no command /tmp").await;
    assert_eq!(
        screen.matches("agent: no command /tmp").count(),
        1,
        "{screen}"
    );
    let input = nvim
        .lua(
            "return vim.api.nvim_buf_get_lines(require('agent.chat.window').input_buf, 0, -1, false)",
            vec![],
        )
        .await;
    assert_eq!(input, rmpv::Value::Array(vec!["/tmp is full, why?".into()]));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(mock.requests().is_empty());
}

/// The queue's line fits the input window in screen cells (a wide character is two), and is
/// fitted again when the window's width changes.
#[tokio::test]
async fn the_queue_line_fits_wide_characters_and_is_fitted_again_on_resize() {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = start(&mock, "window = { width = 60 }").await;
    nvim.cmd("Agent").await;
    nvim.lua(
        "local queue = require('agent.chat.queue') \
         table.insert(queue.items, string.rep('日本語の質問', 20)) queue.show()",
        vec![],
    )
    .await;
    // The bar's own width, as Neovim draws it, against the window's.
    let fits = "local win = vim.fn.bufwinid(require('agent.chat.window').input_buf) \
        local bar = vim.api.nvim_eval_statusline(vim.wo[win].winbar, { winid = win, use_winbar = true }) \
        return { bar.width <= vim.api.nvim_win_get_width(win), bar.str:find(':Agent queue', 1, true) ~= nil, \
                 vim.api.nvim_win_get_width(win) }";
    let before = nvim.lua(fits, vec![]).await;
    assert_eq!(
        before.as_array().unwrap()[..2],
        [true.into(), true.into()],
        "{before:?}"
    );
    nvim.cmd("vertical resize 90").await;
    nvim.wait_for(
        "vim.api.nvim_win_get_width(vim.fn.bufwinid(require('agent.chat.window').input_buf)) == 90",
    )
    .await;
    let after = nvim.lua(fits, vec![]).await;
    assert_eq!(
        after.as_array().unwrap()[..2],
        [true.into(), true.into()],
        "{after:?}"
    );
    // Refitted: more of the prompt shows in the wider window.
    let shown = nvim
        .lua(
            "local win = vim.fn.bufwinid(require('agent.chat.window').input_buf) \
             return vim.api.nvim_eval_statusline(vim.wo[win].winbar, { winid = win, use_winbar = true }).str",
            vec![],
        )
        .await;
    assert!(
        shown.as_str().unwrap().matches('日').count() > 4,
        "{shown:?}"
    );
}

/// Each request marks its last block for the prompt cache, so a tool loop reads the history
/// from the cache; the chat's status line shows the cached part of the input.
#[tokio::test]
async fn a_tool_loop_reads_its_history_from_the_prompt_cache_and_the_status_line_says_so() {
    let read = |id: &str| Reply::Turn {
        parts: vec![Part::ToolCall {
            id: id.into(),
            name: "read_file".into(),
            args: json!({"path": "big.txt"}).to_string(),
        }],
        usage: (1, 1),
    };
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![read("t1"), read("t2"), read("t3"), answer("read")],
    )
    .with_cache();
    let nvim = start(&mock, "").await;
    nvim.write("big.txt", &"the same long line of the file\n".repeat(200));
    nvim.cmd("Agent read big.txt three times").await;
    nvim.wait_for_line(CHAT, "read").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    let requests = mock.requests();
    assert_eq!(requests.len(), 4);
    for request in &requests {
        let messages = request.body["messages"].as_array().unwrap();
        let last = messages.last().unwrap()["content"].as_array().unwrap();
        assert!(
            last.last().unwrap().get("cache_control").is_some(),
            "{:?}",
            request.body
        );
    }
    let status = nvim.lua("return require('agent').status()", vec![]).await;
    let field = |name: &str| {
        status
            .as_map()
            .unwrap()
            .iter()
            .find(|(k, _)| k.as_str() == Some(name))
            .and_then(|(_, v)| v.as_u64())
            .unwrap()
    };
    // Most of what the last three requests sent was the one before them.
    assert!(field("cached") * 2 > field("input"), "{status:?}");
    let bar = nvim.wait_for_screen(" cached) / ").await;
    assert!(bar.contains("k in ("), "{bar}");
    // A new turn starts from nothing cached, and the bar says nothing of a cache at 0.
    nvim.lua(
        "require('agent.rpc').receive({ { type = 'turn_started' }, \
           { type = 'usage', input = 40, output = 2, cached = 0 } })",
        vec![],
    )
    .await;
    nvim.wait_for_screen("40 in / 2 out").await;
    assert!(!nvim.screen().contains("cached)"), "{}", nvim.screen());
    assert_eq!(
        nvim.lua("return require('agent').status().cached", vec![])
            .await,
        rmpv::Value::from(0)
    );
}

#[tokio::test]
async fn a_thinking_models_thoughts_fold_in_the_chat_and_a_priced_conversation_shows_its_cost() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            Reply::Turn {
                parts: vec![
                    Part::Thinking {
                        text: "First I will look.\nThen answer.".into(),
                        signature: "sig-nvim-1".into(),
                    },
                    Part::ToolCall {
                        id: "t1".into(),
                        name: "read_file".into(),
                        args: json!({"path": "a.txt"}).to_string(),
                    },
                ],
                usage: (1, 1),
            },
            answer("It is small."),
        ],
    );
    // 11 in × $3000 + 3 out × $6000 per million: $0.051.
    let nvim = start(
        &mock,
        "thinking = { budget = 2048 }, models = { ['claude-sonnet-4-5'] = { price = { input = 3000, output = 6000 } } }",
    )
    .await;
    nvim.write("a.txt", "tiny\n");
    nvim.cmd("Agent how big is a.txt?").await;
    let lines = nvim.wait_for_line(CHAT, "done · ").await;
    let body = lines.join("\n");
    assert!(
        body.contains("… thought (2 lines)\n  First I will look.\n  Then answer."),
        "{body}"
    );
    assert!(
        body.contains("done · 11 in / 3 out tokens · $0.05"),
        "{body}"
    );
    // Folded closed, dimmed.
    let (folded, hl) = {
        let v = nvim
            .lua(
                "local buf = vim.fn.bufnr('agent: chat') local w = vim.fn.win_findbuf(buf)[1] \
                 local row = vim.fn.match(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '^… thought') \
                 local marks = vim.api.nvim_buf_get_extmarks(buf, -1, { row, 0 }, { row, -1 }, { details = true }) \
                 local hl = '' for _, m in ipairs(marks) do hl = hl .. ' ' .. tostring(m[4].hl_group) end \
                 return { vim.api.nvim_win_call(w, function() return vim.fn.foldclosed(row + 1) end), hl }",
                vec![],
            )
            .await;
        let items = v.as_array().unwrap().clone();
        (
            items[0].as_i64().unwrap(),
            items[1].as_str().unwrap().to_string(),
        )
    };
    assert!(folded > 0, "the thought is folded closed");
    assert!(hl.contains("AgentThought"), "{hl}");
    // setup()'s budget reached the request, and the thinking went back signed.
    let requests = mock.requests();
    assert_eq!(requests[0].body["thinking"]["budget_tokens"], 2048);
    assert_eq!(
        requests[1].body["messages"][1]["content"][0],
        json!({"type": "thinking", "thinking": "First I will look.\nThen answer.",
               "signature": "sig-nvim-1"})
    );
    // The winbar shows the conversation's cost.
    let bar = nvim.wait_for_screen("$0.05").await;
    assert!(bar.contains("11 in / 3 out · $0.05"), "{bar}");
    assert_eq!(
        nvim.lua("return require('agent').status().cost > 0.05", vec![])
            .await,
        rmpv::Value::from(true)
    );
}

#[tokio::test]
async fn agent_compact_folds_the_summary_in_the_chat_and_the_next_prompt_is_sent_it() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            answer("first answer"),
            answer("second answer"),
            answer("SUMMARY: asked twice.\nBoth answered."),
            answer("third answer"),
        ],
    );
    let nvim = start(&mock, "keep_turns = 1").await;
    nvim.cmd("Agent PROMPT-ONE").await;
    nvim.wait_for_line(CHAT, "first answer").await;
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
    nvim.cmd("Agent PROMPT-TWO").await;
    nvim.wait_for_line(CHAT, "second answer").await;
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
    nvim.cmd("Agent compact").await;
    let lines = nvim.wait_for_line(CHAT, "compacted 1 prompt (").await;
    let body = lines.join("\n");
    assert!(
        body.contains("  SUMMARY: asked twice.\n  Both answered."),
        "{body}"
    );
    let row = lines
        .iter()
        .find(|l| l.starts_with("compacted 1 prompt ("))
        .unwrap();
    assert!(row.ends_with(" tokens)") && row.contains(" → "), "{row}");
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
    let folded = nvim
        .lua(
            "local buf = vim.fn.bufnr('agent: chat') local w = vim.fn.win_findbuf(buf)[1] \
             local row = vim.fn.match(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '^compacted') + 1 \
             return vim.api.nvim_win_call(w, function() return vim.fn.foldclosed(row) end)",
            vec![],
        )
        .await;
    assert!(
        folded.as_i64().unwrap() > 0,
        "the summary is folded: {folded:?}"
    );
    nvim.cmd("Agent PROMPT-THREE").await;
    nvim.wait_for_line(CHAT, "third answer").await;
    let requests = mock.requests();
    assert!(requests[2].body["messages"]
        .to_string()
        .contains("Summarize the conversation so far"));
    let sent = requests[3].body["messages"].to_string();
    assert!(sent.contains("SUMMARY: asked twice."), "{sent}");
    assert!(!sent.contains("PROMPT-ONE"), "{sent}");
    assert!(
        sent.contains("PROMPT-TWO") && sent.contains("PROMPT-THREE"),
        "{sent}"
    );
    // A compaction whose summary request was retried still ends idle (no turn_done ends it).
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
    nvim.lua(
        "require('agent.chat').compacting() \
         require('agent.rpc').receive({ { type = 'retrying', attempt = 1, delay_ms = 10, reason = 'overloaded' } }) \
         require('agent.rpc').receive({ { type = 'idle' } })",
        vec![],
    )
    .await;
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
}

/// `require("agent").statusline()` now.
async fn statusline(nvim: &Nvim) -> String {
    nvim.lua("return require('agent').statusline()", vec![])
        .await
        .as_str()
        .unwrap()
        .to_string()
}

/// Waits until the statusline starts with `start`; returns it.
async fn statusline_starting(nvim: &Nvim, start: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let line = statusline(nvim).await;
        if line.starts_with(start) {
            return line;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the statusline never started {start:?}; it says {line:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_statusline_says_writing_running_waiting_and_idle_with_the_cost() {
    let text: Vec<Part> = (0..30).map(|i| Part::Text(format!("word{i} "))).collect();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            Reply::Spread {
                parts: text
                    .into_iter()
                    .chain([Part::ToolCall {
                        id: "t1".into(),
                        name: "run_bash".into(),
                        args: json!({"command": "sleep 2"}).to_string(),
                    }])
                    .collect(),
                over: Duration::from_secs(2),
            },
            answer("Slept."),
        ],
    );
    let nvim = start(
        &mock,
        "models = { ['claude-sonnet-4-5'] = { price = { input = 3000, output = 6000 } } }",
    )
    .await;
    // No conversation yet: nothing to say.
    assert_eq!(statusline(&nvim).await, "");
    nvim.cmd("Agent sleep for me").await;
    // While the answer streams: writing, not thinking.
    statusline_starting(&nvim, "agent: writing").await;
    assert_eq!(
        nvim.lua("return require('agent').status().state", vec![])
            .await
            .as_str(),
        Some("writing")
    );
    statusline_starting(&nvim, "agent: waiting for approval").await;
    // A key before the picker is armed answers nothing (on a loaded machine that moment is
    // longer): the person's "y" comes once it takes keys.
    nvim.wait_for(
        "require('agent.approval').waiting() ~= nil and require('agent.approval').waiting().armed",
    )
    .await;
    nvim.api.input("y").await.unwrap();
    let running = statusline_starting(&nvim, "agent: running sleep 2 ").await;
    assert!(running.ends_with('s'), "{running}");
    let idle = statusline_starting(&nvim, "agent: idle").await;
    assert!(idle.starts_with("agent: idle · $"), "{idle}");
    // A fresh conversation has nothing to say again.
    nvim.cmd("Agent new here").await;
    assert_eq!(statusline(&nvim).await, "");
}

#[tokio::test]
async fn a_person_scrolled_up_keeps_their_line_and_is_told_of_new_output_below() {
    let lines: Vec<Part> = (0..120)
        .map(|i| Part::Text(format!("line {i}\n")))
        .collect();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![Reply::Spread {
            parts: lines,
            over: Duration::from_secs(4),
        }],
    );
    let nvim = start(&mock, "").await;
    nvim.cmd("Agent write many lines").await;
    nvim.wait_for_line(CHAT, "line 5").await;
    let chat_win = "vim.fn.win_findbuf(vim.fn.bufnr('agent: chat'))[1]";
    // The person goes to the top of the chat while it streams.
    nvim.lua(
        &format!("vim.api.nvim_win_set_cursor({chat_win}, {{ 1, 0 }})"),
        vec![],
    )
    .await;
    let screen = nvim.wait_for_screen("↓ new output").await;
    assert!(!screen.contains("line 100"), "{screen}");
    nvim.wait_for_line(CHAT, "line 119").await;
    let cursor = nvim
        .lua(
            &format!("return vim.api.nvim_win_get_cursor({chat_win})[1]"),
            vec![],
        )
        .await;
    assert_eq!(cursor.as_i64(), Some(1), "their line is kept");
    // Back at the end: the marker goes.
    nvim.lua(
        &format!(
            "vim.api.nvim_win_set_cursor({chat_win}, {{ vim.api.nvim_buf_line_count(vim.fn.bufnr('agent: chat')), 0 }})"
        ),
        vec![],
    )
    .await;
    nvim.wait_for(&format!(
        "not require('agent.chat.render').new_output_below({chat_win})"
    ))
    .await;
    assert!(!nvim.screen().contains("↓ new output"));
}

#[tokio::test]
async fn a_turn_that_ends_unseen_is_noticed_and_notify_command_gets_the_message() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            answer("Fixed."),
            answer("Seen."),
            // Slow enough to leave the chat's tab before the approval comes.
            Reply::Spread {
                parts: vec![
                    Part::Text("a ".into()),
                    Part::Text("moment".into()),
                    Part::ToolCall {
                        id: "t1".into(),
                        name: "run_bash".into(),
                        args: json!({"command": "true"}).to_string(),
                    },
                ],
                over: Duration::from_millis(1500),
            },
            answer("Ran."),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let said = dir.path().join("said.txt");
    let nvim = start(
        &mock,
        &format!(
            "notify_command = {{ 'sh', '-c', 'printf \"%s\\\\n\" \"$1\" >> {}', 'notify' }}",
            said.display()
        ),
    )
    .await;
    // Neovim lost the focus: the end of the turn is noticed, with the prompt's first words.
    nvim.cmd("doautocmd FocusLost").await;
    nvim.cmd("Agent fix the failing test in calc.py please now")
        .await;
    nvim.wait_for_line(CHAT, "Fixed.").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    // The whole line: the shell makes the file (`>>`) before it writes to it.
    while !std::fs::read_to_string(&said).is_ok_and(|text| text.ends_with('\n')) {
        assert!(
            std::time::Instant::now() < deadline,
            "notify_command never ran"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let text = std::fs::read_to_string(&said).unwrap();
    assert!(
        text.starts_with("agent: done · fix the failing test in calc.py ("),
        "{text:?}"
    );
    assert!(text.trim_end().ends_with(" s)"), "{text:?}");
    let messages = nvim.messages().await;
    assert!(
        messages.contains("agent: done · fix the failing test in calc.py"),
        "{messages}"
    );
    // Back in focus with the chat in view: nothing is said.
    nvim.cmd("doautocmd FocusGained").await;
    nvim.cmd("Agent look again").await;
    nvim.wait_for_line(CHAT, "Seen.").await;
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(std::fs::read_to_string(&said).unwrap().lines().count(), 1);
    // The chat out of view (another tab): an approval is noticed as it opens the picker.
    nvim.cmd("Agent run true").await;
    nvim.cmd("tabnew").await;
    nvim.wait_for("require('agent.approval').pending() == 1")
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&said).unwrap();
        if text
            .lines()
            .any(|l| l == "agent: waiting for approval · run true")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no approval notice: {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
