//! Context and commands in the chat's input in a real Neovim: `@path`
//! and `#diagnostics` attach what they name to the request the mock records, the chat folds
//! each attachment under the prompt, completion offers the workspace's files (not the ignored
//! ones), the `#` items and the `/` commands, `/new` clears the conversation, and an external
//! agent's own commands are completed and sent to it as typed.

use rmpv::Value;

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{setup_lua, Nvim, Options};

const CHAT: &str = "agent: chat";
const CALC: &str = "def add(a, b):\n    return a + b\n\nprint(add(1, 2)\n";

fn answer(text: &str) -> Reply {
    Reply::Turn {
        parts: vec![Part::Text(text.into())],
        usage: (10, 2),
    }
}

async fn start(mock: &MockLlm, ui: Option<(i64, i64)>) -> Nvim {
    Nvim::start(Options {
        ui,
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "test-key".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua(""),
    })
    .await
}

/// The text of the last user message of request `n` the mock recorded.
fn prompt_sent(mock: &MockLlm, n: usize) -> String {
    let body = &mock.requests()[n].body;
    let messages = body["messages"].as_array().unwrap();
    messages.last().unwrap()["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The words of the completion menu, once it shows some.
async fn menu(nvim: &Nvim) -> Vec<String> {
    nvim.wait_for("vim.fn.pumvisible() == 1 and #vim.fn.complete_info({'items'}).items > 0")
        .await;
    let words = nvim
        .lua(
            "return vim.tbl_map(function(i) return i.word end, vim.fn.complete_info({'items'}).items)",
            vec![],
        )
        .await;
    words
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn explain_at_calc_py_sends_its_text_and_the_chat_folds_it_under_the_prompt() {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("It adds.")]);
    let nvim = start(&mock, None).await;
    nvim.write("calc.py", CALC);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "s3cret").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        nvim.workspace.path().join("link.txt"),
    )
    .unwrap();
    nvim.cmd("Agent explain @calc.py, not @../../etc/passwd or @link.txt or @nobody")
        .await;
    let lines = nvim
        .wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;
    let sent = prompt_sent(&mock, 0);
    assert_eq!(
        sent,
        format!(
            "explain @calc.py, not @../../etc/passwd or @link.txt or @nobody\n\n\
             [attached: @ calc.py (49 chars)]\n```\n{CALC}```\n\n\
             [attached: @ ../../etc/passwd: Refused: '../../etc/passwd' resolves outside the workspace root.]\n\n\
             [attached: @ link.txt: Refused: 'link.txt' resolves outside the workspace root.]\n\n\
             [attached: @ nobody: no such file in the workspace]"
        )
    );
    assert!(!sent.contains("s3cret"), "{sent}");
    // Under the prompt: the rows, the file's text folded under its own.
    let row = lines
        .iter()
        .position(|l| l == "@ calc.py (49 chars)")
        .unwrap_or_else(|| panic!("no attachment row in:\n{}", lines.join("\n")));
    assert_eq!(lines[row + 1], "  def add(a, b):");
    assert_eq!(
        lines[row + 5],
        "@ ../../etc/passwd: Refused: '../../etc/passwd' resolves outside the workspace root."
    );
    let folded = nvim
        .lua(
            &format!(
                "local win = vim.fn.bufwinid('{CHAT}') return vim.api.nvim_win_call(win, function() \
                 return {{ vim.fn.foldclosed({a}), vim.fn.foldclosedend({a}), vim.fn.foldclosed({b}) }} end)",
                a = row + 2,
                b = row + 6
            ),
            vec![],
        )
        .await;
    assert_eq!(
        folded,
        Value::Array(vec![
            Value::from(row as i64 + 1),
            Value::from(row as i64 + 5),
            Value::from(-1)
        ])
    );
    let hl = nvim
        .lua(
            &format!(
                "local buf = vim.fn.bufnr('{CHAT}') local marks = vim.api.nvim_buf_get_extmarks(buf, \
                 vim.api.nvim_create_namespace('agent.chat'), {{ {row}, 0 }}, {{ {row}, -1 }}, {{ details = true }}) \
                 return marks[1] and marks[1][4].hl_group"
            ),
            vec![],
        )
        .await;
    assert_eq!(hl, Value::from("AgentAttachment"));
}

#[tokio::test]
async fn an_unsaved_buffer_is_attached_as_the_person_sees_it_and_hash_diagnostics_lists_its_diagnostics(
) {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("One."), answer("Two.")]);
    let nvim = start(&mock, None).await;
    nvim.write("calc.py", CALC);
    nvim.cmd("edit calc.py").await;
    nvim.lua(
        "vim.api.nvim_buf_set_lines(0, 0, 1, false, { 'def add(a, b, c):' }) \
         local ns = vim.api.nvim_create_namespace('test') \
         vim.diagnostic.set(ns, 0, { \
           { lnum = 3, col = 0, severity = vim.diagnostic.severity.ERROR, message = 'unclosed (' }, \
           { lnum = 0, col = 4, severity = vim.diagnostic.severity.WARN, message = 'unused c' } })",
        vec![],
    )
    .await;
    nvim.cmd("Agent fix #diagnostics in @calc.py").await;
    let lines = nvim
        .wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;
    let sent = prompt_sent(&mock, 0);
    assert!(
        sent.contains(
            "[attached: # diagnostics calc.py (58 chars)]\n```\n\
             calc.py:1:5: WARN: unused c\ncalc.py:4:1: ERROR: unclosed (\n```"
        ),
        "{sent}"
    );
    assert!(
        sent.contains("[attached: @ calc.py (52 chars, unsaved buffer)]\n```\ndef add(a, b, c):\n"),
        "{sent}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l == "@ calc.py (52 chars, unsaved buffer)"),
        "{}",
        lines.join("\n")
    );
    // From the input, "the current buffer" is the one the person came from.
    nvim.cmd("Agent").await;
    nvim.lua(
        "vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'and #buffer' })",
        vec![],
    )
    .await;
    nvim.api.input("<Esc><CR>").await.unwrap();
    nvim.wait_for(&format!(
        "#vim.fn.getbufline('{CHAT}', 1, '$') > {}",
        lines.len() + 3
    ))
    .await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    let sent = prompt_sent(&mock, 1);
    assert!(
        sent.starts_with("and #buffer\n\n[attached: @ calc.py (52 chars, unsaved buffer)]"),
        "{sent}"
    );
}

#[tokio::test]
async fn slash_new_in_the_input_clears_the_conversation_and_an_unknown_command_is_not_sent() {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("First."), answer("Second.")]);
    let nvim = start(&mock, Some((120, 40))).await;
    nvim.cmd("Agent remember 42").await;
    nvim.wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;
    nvim.cmd("Agent").await;
    let submit = |text: &'static str| {
        let nvim = &nvim;
        async move {
            nvim.lua(
                "vim.api.nvim_buf_set_lines(0, 0, -1, false, { ... })",
                vec![Value::from(text)],
            )
            .await;
            nvim.api.input("<Esc><CR>").await.unwrap();
        }
    };
    submit("/nosuch thing").await;
    nvim.wait_for_screen("agent: no command /nosuch; /help lists them")
        .await;
    assert_eq!(mock.requests().len(), 1);
    submit("/new").await;
    // Only the new conversation's first line is left.
    nvim.wait_for(&format!(
        "table.concat(vim.fn.getbufline('{CHAT}', 1, '$'), '') == \
         'new conversation with anthropic · claude-sonnet-4-5 · ? for keys'"
    ))
    .await;
    assert_eq!(
        nvim.lua("return vim.api.nvim_get_current_line()", vec![])
            .await,
        Value::from("")
    );
    submit("what was the number").await;
    nvim.wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;
    // The history was forgotten: the second request holds only the new prompt.
    let messages = mock.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(messages, 1);
    assert_eq!(prompt_sent(&mock, 1), "what was the number");
}

#[tokio::test]
async fn the_input_completes_workspace_files_fuzzily_without_ignored_ones_the_hash_items_and_commands(
) {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = start(&mock, Some((100, 30))).await;
    nvim.write(".gitignore", "build/\n");
    nvim.write("src/calc.py", CALC);
    nvim.write("src/other.rs", "");
    nvim.write("build/calc.py", CALC);
    nvim.cmd("Agent").await;
    nvim.api.input("@clcpy").await.unwrap();
    assert_eq!(menu(&nvim).await, ["@src/calc.py"]);
    nvim.api.input("<C-n><C-y> #dia").await.unwrap();
    assert_eq!(menu(&nvim).await, ["#diagnostics"]);
    nvim.api.input("<C-n><C-y>").await.unwrap();
    nvim.wait_for("vim.fn.pumvisible() == 0").await;
    assert_eq!(
        nvim.lua("return vim.api.nvim_get_current_line()", vec![])
            .await,
        Value::from("@src/calc.py #diagnostics")
    );
    // A `/` completes commands only where a command can be: at the start of the input.
    nvim.api.input("<Esc>ggcc/re").await.unwrap();
    assert_eq!(menu(&nvim).await, ["/resume", "/rewind"]);
    // After an opening bracket, as the prompt reads `(@src/other.rs)`.
    nvim.api.input("<Esc>ggccsee (@othr").await.unwrap();
    assert_eq!(menu(&nvim).await, ["@src/other.rs"]);
    // The blink.cmp and nvim-cmp sources answer the same, with an edit over the word.
    // Each answers when the items are there: `@` files once the backend found them.
    nvim.lua(
        "_G.got = {} \
         local blink = require('agent.cmp.blink').new() \
         blink:get_completions({ line = 'see @other', cursor = { 1, 10 } }, function(r) got.blink = r end) \
         local cmp = require('agent.cmp.nvim_cmp').new() \
         cmp:complete({ context = { cursor_line = 'x #quick', cursor = { row = 1, col = 9 } } }, function(r) got.cmp = r end)",
        vec![],
    )
    .await;
    nvim.wait_for("_G.got.blink ~= nil and _G.got.cmp ~= nil")
        .await;
    let sources = nvim
        .lua(
            "local blink = require('agent.cmp.blink').new() \
             local b, c = got.blink.items[1], got.cmp.items[1] \
             return { b.label, b.textEdit.range.start.character, b.textEdit.range['end'].character, \
                      got.blink.is_incomplete_forward, c.label, c.textEdit.range.start.character, got.cmp.isIncomplete, \
                      blink:enabled(), vim.tbl_contains(blink:get_trigger_characters(), '@') }",
            vec![],
        )
        .await;
    assert_eq!(
        sources,
        Value::Array(vec![
            Value::from("@src/other.rs"),
            Value::from(4),
            Value::from(10),
            Value::from(true),
            Value::from("#quickfix"),
            Value::from(2),
            Value::from(true),
            Value::from(true),
            Value::from(true),
        ])
    );
}

#[tokio::test]
async fn an_external_agents_commands_are_completed_with_their_descriptions_and_sent_as_typed() {
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let nvim = Nvim::start(Options {
        ui: Some((100, 30)),
        env: vec![("ANTHROPIC_API_KEY".into(), "unused".into())],
        setup: setup_lua(&format!(
            "acp = {{ agents = {{ test = {{ cmd = {{ '{agent}', 'commands' }} }} }} }}"
        )),
    })
    .await;
    nvim.cmd("Agent acp test").await;
    nvim.wait_for_line(CHAT, "connected to test (ACP)").await;
    nvim.wait_for("#require('agent.rpc').agent_commands() == 3")
        .await;
    nvim.cmd("Agent").await;
    nvim.api.input("/").await.unwrap();
    let words = menu(&nvim).await;
    // The agent's /compact, not ours: the agent holds the context it summarises.
    assert!(
        words.ends_with(&[
            "/web".to_string(),
            "/init".to_string(),
            "/compact".to_string()
        ]),
        "{words:?}"
    );
    assert_eq!(words.iter().filter(|w| *w == "/compact").count(), 1);
    assert!(words.contains(&"/new".to_string()), "{words:?}");
    let info = nvim
        .lua(
            "local infos = {} for _, i in ipairs(vim.fn.complete_info({'items'}).items) do \
             infos[i.word] = i.info end return { infos['/web'], infos['/compact'] }",
            vec![],
        )
        .await;
    assert_eq!(
        info,
        Value::Array(vec![
            Value::from("Search the web (query)"),
            Value::from("Summarise the session")
        ])
    );
    nvim.api
        .input("<C-e>web rust @nothing.txt<Esc><CR>")
        .await
        .unwrap();
    let lines = nvim.wait_for_line(CHAT, "done (end_turn)").await;
    assert!(
        lines
            .iter()
            .any(|l| l == r#"slash: "/web rust @nothing.txt""#),
        "{}",
        lines.join("\n")
    );
    nvim.wait_for("not require('agent.chat').busy()").await;
    nvim.api.input("i/compact<Esc><CR>").await.unwrap();
    nvim.wait_for_line(CHAT, r#"slash: "/compact""#).await;
}

#[tokio::test]
async fn hash_selection_and_quickfix_attach_their_lines_and_a_resumed_chat_shows_the_same_rows() {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("Seen.")]);
    let nvim = start(&mock, None).await;
    nvim.write("calc.py", CALC);
    nvim.cmd("edit calc.py").await;
    nvim.api.input("2GVj<Esc>").await.unwrap();
    nvim.lua(
        "vim.fn.setqflist({ { filename = 'calc.py', lnum = 4, col = 1, text = 'SyntaxError' } })",
        vec![],
    )
    .await;
    nvim.cmd("Agent look at #selection and #quickfix").await;
    let before = nvim
        .wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;
    let sent = prompt_sent(&mock, 0);
    assert_eq!(
        sent,
        "look at #selection and #quickfix\n\n\
         [attached: # selection calc.py:2-3 (43 chars)]\n```\n\
         calc.py, lines 2-3:\n2:     return a + b\n3: \n```\n\n\
         [attached: # quickfix (24 chars)]\n```\ncalc.py:4:1: SyntaxError\n```"
    );
    // /model is :Agent model (the status line shows the new one); /compact is :Agent compact,
    // which has nothing to compact in one prompt and says so.
    nvim.lua(
        "require('agent.slash').run('/model fast-model', require('agent'))",
        vec![],
    )
    .await;
    nvim.wait_for("require('agent').status().model == 'fast-model'")
        .await;
    nvim.lua(
        "require('agent.slash').run('/compact', require('agent'))",
        vec![],
    )
    .await;
    nvim.wait_for_line(CHAT, "agent: not compacted: nothing to compact yet")
        .await;
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
    // Resumed, the prompt shows as typed with the same rows, their text folded again.
    let id = nvim
        .lua("return require('agent').sessions()[1].id", vec![])
        .await;
    nvim.cmd("Agent new here").await;
    nvim.lua("require('agent').resume(...)", vec![id]).await;
    let after = nvim
        .wait_for_line(CHAT, "resumed: look at #selection and #quickfix")
        .await;
    let rows = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l.starts_with("# ") || l.starts_with("look at"))
            .cloned()
            .collect()
    };
    assert_eq!(rows(&after), rows(&before));
    assert_eq!(
        rows(&after),
        [
            "look at #selection and #quickfix",
            "# selection calc.py:2-3 (43 chars)",
            "# quickfix (24 chars)"
        ]
    );
    let row = after
        .iter()
        .position(|l| l == "# quickfix (24 chars)")
        .unwrap();
    let folded = nvim
        .lua(
            &format!(
                "local win = vim.fn.bufwinid('{CHAT}') return vim.api.nvim_win_call(win, function() \
                 return vim.fn.foldclosed({}) end)",
                row + 2
            ),
            vec![],
        )
        .await;
    assert_eq!(folded, Value::from(row as i64 + 1));
}

#[tokio::test]
async fn with_input_completion_off_the_menu_waits_for_ctrl_x_ctrl_o() {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = Nvim::start(Options {
        ui: Some((100, 30)),
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "test-key".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua("input = { completion = false }"),
    })
    .await;
    nvim.write("src/calc.py", CALC);
    nvim.cmd("Agent").await;
    nvim.wait_for("require('agent.rpc').info() ~= nil").await;
    nvim.api.input("@clcpy").await.unwrap();
    // The keys (and the autocommands they fire) are done before Neovim answers this.
    assert_eq!(
        nvim.lua(
            "return { vim.api.nvim_get_current_line(), vim.fn.pumvisible() }",
            vec![]
        )
        .await,
        Value::Array(vec![Value::from("@clcpy"), Value::from(0)])
    );
    // One match: Neovim's default 'completeopt' puts it in at once.
    nvim.api.input("<C-x><C-o>").await.unwrap();
    nvim.wait_for("vim.api.nvim_get_current_line() == '@src/calc.py'")
        .await;
}

#[tokio::test]
async fn hash_buffers_attaches_every_workspace_file_buffer_and_nothing_of_another_projects() {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("ok")]);
    let nvim = start(&mock, None).await;
    nvim.write("calc.py", CALC);
    nvim.write("notes.txt", "remember the milk\n");
    let outside = tempfile::tempdir().unwrap();
    let other = outside.path().join("other-project-secret.txt");
    std::fs::write(&other, "OTHER-PROJECT-TEXT").unwrap();
    nvim.cmd("edit calc.py").await;
    nvim.cmd("edit notes.txt").await;
    nvim.cmd(&format!("edit {}", other.display())).await;
    nvim.cmd("Agent compare #buffers").await;
    nvim.wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;
    let sent = prompt_sent(&mock, 0);
    assert!(
        sent.contains(&format!("[attached: @ calc.py (49 chars)]\n```\n{CALC}```")),
        "{sent}"
    );
    assert!(
        sent.contains("[attached: @ notes.txt (18 chars)]\n```\nremember the milk\n```"),
        "{sent}"
    );
    // Neither its text nor its path.
    assert!(!sent.contains("OTHER-PROJECT"), "{sent}");
    assert!(!sent.contains("other-project-secret"), "{sent}");
}

/// With our blink.cmp (or nvim-cmp) source in use, the default `completion = "auto"` leaves the
/// menu to that plugin: typing `@` opens none of ours, <C-x><C-o> still completes, mid-line
/// too. The files come as an answer
/// to a notification, and a query typed over is never answered: only the latest one is.
#[tokio::test]
async fn a_loaded_completion_plugin_keeps_our_menu_closed_and_only_the_latest_file_query_is_answered(
) {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = start(&mock, Some((100, 30))).await;
    nvim.write("src/calc.py", CALC);
    nvim.write("src/other.rs", "");
    nvim.lua("require('agent.cmp.blink')", vec![]).await;
    nvim.cmd("Agent").await;
    nvim.wait_for("require('agent.rpc').info() ~= nil").await;
    nvim.api.input("see @clcpy").await.unwrap();
    // Time for the files to come, were they asked for (they come in milliseconds).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        nvim.lua(
            "return { vim.api.nvim_get_current_line(), vim.fn.pumvisible() }",
            vec![]
        )
        .await,
        Value::Array(vec![Value::from("see @clcpy"), Value::from(0)])
    );
    nvim.api.input("<C-x><C-o>").await.unwrap();
    assert_eq!(menu(&nvim).await, ["@src/calc.py"]);
    nvim.api.input("<C-n><C-y>").await.unwrap();
    nvim.wait_for("vim.api.nvim_get_current_line() == 'see @src/calc.py'")
        .await;

    nvim.lua(
        "_G.answers = {} local rpc = require('agent.rpc') \
         rpc.files('calc', 5, function(f) table.insert(answers, f and 'the first answered' or 'the first told') end) \
         rpc.files('other', 5, function(f) table.insert(answers, f.files[1]) end)",
        vec![],
    )
    .await;
    nvim.wait_for("#_G.answers > 1").await;
    // The first query's answer, were it sent, would come before the second's.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        nvim.lua("return _G.answers", vec![]).await,
        Value::Array(vec![
            Value::from("the first told"),
            Value::from("src/other.rs")
        ])
    );
}

/// `(@calc.py)` and `@calc.py:2` (a compiler's way to name a line) attach calc.py, once; and
/// `@calc.py` with `#buffer` on the same file attach it once too.
#[tokio::test]
async fn a_file_named_in_brackets_with_a_line_number_and_as_the_buffer_is_attached_once() {
    let mock = MockLlm::start(Wire::Anthropic, vec![answer("It adds."), answer("Yes.")]);
    let nvim = start(&mock, None).await;
    nvim.write("calc.py", CALC);
    nvim.cmd("edit calc.py").await;
    nvim.cmd("Agent look (@calc.py) at @calc.py:2").await;
    nvim.wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;
    let attached = format!("[attached: @ calc.py (49 chars)]\n```\n{CALC}```");
    assert_eq!(
        prompt_sent(&mock, 0),
        format!("look (@calc.py) at @calc.py:2\n\n{attached}")
    );
    nvim.wait_for("not require('agent.chat').busy()").await;
    nvim.cmd("Agent and @calc.py in #buffer").await;
    nvim.wait_for(&format!(
        "#vim.tbl_filter(function(l) return l:find('done ·', 1, true) end, \
         vim.api.nvim_buf_get_lines(vim.fn.bufnr('{CHAT}'), 0, -1, false)) == 2"
    ))
    .await;
    assert_eq!(
        prompt_sent(&mock, 1),
        format!("and @calc.py in #buffer\n\n{attached}")
    );
}
