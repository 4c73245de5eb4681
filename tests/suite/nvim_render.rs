//! How the chat looks, in a real Neovim with a UI, against the mock
//! model: markdown highlighted by treesitter (a code block in its own language), headers told
//! apart, tool rows that say what happened (a failed result, a non-zero exit, a running
//! command's seconds, an edit's diff in its fold), and the highlighting's cost kept to the part
//! of the message that may still change.

use rmpv::Value;
use serde_json::json;

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{mock_options, Nvim, Options};

const CHAT: &str = "agent: chat";
const UI: Option<(i64, i64)> = Some((80, 24));

fn turn(parts: Vec<Part>) -> Reply {
    Reply::Turn {
        parts,
        usage: (10, 2),
    }
}

fn call(id: &str, name: &str, args: serde_json::Value) -> Part {
    Part::ToolCall {
        id: id.into(),
        name: name.into(),
        args: args.to_string(),
    }
}

async fn start(mock: &MockLlm, extra: &str) -> Nvim {
    Nvim::start(Options {
        ui: UI,
        ..mock_options(mock, extra)
    })
    .await
}

/// A Neovim with a UI and the plugin, no model: the chat is written through its handlers.
async fn without_model() -> Nvim {
    Nvim::start(Options {
        ui: UI,
        env: vec![],
        setup: crate::support::nvim::setup_lua(""),
    })
    .await
}

/// The highlight groups at (0-based) `row`, `col` of the chat, as vim.inspect_pos reports
/// them: extmarks' groups (ours and the markdown ones) and treesitter's, if it ran on the buffer.
async fn groups_at(nvim: &Nvim, row: usize, col: usize) -> Vec<String> {
    let groups = nvim
        .lua(
            "local buf = vim.fn.bufnr('agent: chat') \
             local row, col = ... local pos = vim.inspect_pos(buf, row, col, { extmarks = true, treesitter = true, syntax = true }) \
             local out = {} \
             for _, m in ipairs(pos.extmarks) do out[#out + 1] = m.opts.hl_group end \
             for _, t in ipairs(pos.treesitter) do out[#out + 1] = 'ts:' .. t.hl_group end \
             for _, s in ipairs(pos.syntax) do out[#out + 1] = 'syn:' .. s.hl_group end \
             return out",
            vec![Value::from(row as u64), Value::from(col as u64)],
        )
        .await;
    groups
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g.as_str().map(str::to_string))
        .collect()
}

/// The row of the first chat line equal to `line`.
fn row_of(lines: &[String], line: &str) -> usize {
    lines
        .iter()
        .position(|l| l == line)
        .unwrap_or_else(|| panic!("{line:?} not in {lines:#?}"))
}

/// `answer` (ASCII) cut into deltas of `size` bytes.
fn deltas(answer: &str, size: usize) -> Vec<String> {
    answer
        .as_bytes()
        .chunks(size)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect()
}

#[tokio::test]
async fn a_streamed_answer_has_lua_highlights_in_its_code_block_and_markdown_on_its_heading() {
    let answer = "## Plan\n\nCall `setup` from **init.lua**:\n\n```lua\nlocal agent = require(\"agent\")\nagent.setup({})\n```\n\n- done\n";
    // Cut into small deltas, so the block is highlighted while it is being written too.
    let deltas = deltas(answer, 5);
    let mock = MockLlm::start(Wire::Anthropic, vec![turn(vec![Part::Deltas(deltas)])]);
    let nvim = start(&mock, "").await;
    nvim.cmd("Agent show me").await;
    let lines = nvim
        .wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;

    let heading = row_of(&lines, "## Plan");
    assert!(
        groups_at(&nvim, heading, 3)
            .await
            .contains(&"@markup.heading.2.markdown".to_string()),
        "{:?}",
        groups_at(&nvim, heading, 3).await
    );
    let code = row_of(&lines, "local agent = require(\"agent\")");
    let keyword = groups_at(&nvim, code, 1).await;
    assert!(keyword.contains(&"@keyword.lua".to_string()), "{keyword:?}");
    let call = groups_at(&nvim, code + 1, 7).await; // `setup` in `agent.setup({})`
    assert!(
        call.iter()
            .any(|g| g.starts_with("@function") && g.ends_with(".lua")),
        "{call:?}"
    );
    let inline = row_of(&lines, "Call `setup` from **init.lua**:");
    assert!(groups_at(&nvim, inline, 6)
        .await
        .contains(&"@markup.raw.markdown_inline".to_string()));
    assert!(groups_at(&nvim, inline, 20)
        .await
        .contains(&"@markup.strong.markdown_inline".to_string()));
    let item = row_of(&lines, "- done");
    assert!(groups_at(&nvim, item, 0)
        .await
        .contains(&"@markup.list.markdown".to_string()));

    // The two headers are told apart.
    let you = groups_at(&nvim, row_of(&lines, "## You"), 0).await;
    let agent = groups_at(&nvim, row_of(&lines, "## Agent"), 0).await;
    assert!(you.contains(&"AgentUserHeader".to_string()), "{you:?}");
    assert!(agent.contains(&"AgentAgentHeader".to_string()), "{agent:?}");

    // Our highlighting, not Neovim's: the filetype stays markdown for the user's plugins, but
    // no treesitter highlighter or regex syntax re-parses the growing buffer.
    let state = nvim
        .lua(
            "local buf = vim.fn.bufnr('agent: chat') \
             local hl = package.loaded['vim.treesitter.highlighter'] \
             return { vim.bo[buf].filetype, vim.bo[buf].syntax, hl ~= nil and hl.active[buf] ~= nil }",
            vec![],
        )
        .await;
    assert_eq!(
        state,
        Value::Array(vec!["markdown".into(), "OFF".into(), false.into()])
    );
    // And the screen shows it.
    nvim.wait_for_screen("agent.setup({})").await;
}

#[tokio::test]
async fn a_code_block_in_a_language_without_a_parser_stays_plain_and_render_false_turns_it_all_off()
{
    let answer = "# Title\n\n```nosuchlanguage\nlocal x = 1\n```\n";
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![Part::Text(answer.into())]),
            turn(vec![Part::Text(answer.into())]),
        ],
    );
    let nvim = start(&mock, "").await;
    nvim.cmd("Agent one").await;
    let lines = nvim
        .wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;
    let code = row_of(&lines, "local x = 1");
    let groups = groups_at(&nvim, code, 1).await;
    assert!(
        groups.contains(&"@markup.raw.block.markdown".to_string())
            && !groups.iter().any(|g| g.ends_with(".lua")),
        "{groups:?}"
    );

    let off = start(&mock, "render = false").await;
    off.cmd("Agent two").await;
    off.wait_for_line(CHAT, "done · 10 in / 2 out tokens").await;
    let marks = off
        .lua(
            "local ns = vim.api.nvim_create_namespace('agent.chat.markdown') \
             return #vim.api.nvim_buf_get_extmarks(vim.fn.bufnr('agent: chat'), ns, 0, -1, {})",
            vec![],
        )
        .await;
    assert_eq!(marks, Value::from(0));
}

#[tokio::test]
async fn only_the_end_of_a_long_answer_is_parsed_again_and_a_long_code_block_keeps_its_language() {
    // 300 paragraphs, then a lua block of 1,000 lines still being written: the part parsed
    // again at each frame starts at the last block, and inside the block (past the limit) at
    // its last line, with the fence carried over.
    let mut answer = String::new();
    for i in 0..300 {
        answer.push_str(&format!("Paragraph {i} with `code` and *emphasis*.\n\n"));
    }
    answer.push_str("```lua\n");
    for i in 0..1000 {
        answer.push_str(&format!("local v{i} = {i}\n"));
    }
    let nvim = without_model().await;
    nvim.lua(
        "local answer = ... \
         local chat = require('agent.chat') \
         chat.open() \
         local function batch(e) chat.begin_batch() chat.handle(e) chat.end_batch() end \
         batch({ type = 'turn_started' }) \
         for i = 1, #answer, 4000 do \
           batch({ type = 'text', text = answer:sub(i, i + 3999) }) \
           vim.wait(20) \
         end",
        vec![Value::from(answer.as_str())],
    )
    .await;
    // Highlighted a part a frame (a bounded amount each), it catches up with the text.
    nvim.wait_for("not require('agent.chat.markdown').behind()")
        .await;
    let unsettled = nvim
        .lua(
            "local buf = vim.fn.bufnr('agent: chat') \
             local ns = vim.api.nvim_get_namespaces()['agent.chat.markdown.start'] \
             local marks = vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, {}) \
             return { #marks, marks[1] and marks[1][2] or -1, vim.api.nvim_buf_line_count(buf) }",
            vec![],
        )
        .await;
    let v: Vec<i64> = unsettled
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let (marks, start, count) = (v[0], v[1], v[2]);
    assert_eq!(marks, 1, "one open region");
    // The buffer: `## Agent`, a blank line, 600 lines of paragraphs, the fence, 1,000 lines and
    // the empty line being written. What is parsed again is at most the limit (400 lines).
    assert!(count > 1600, "{count}");
    assert!(
        count - start <= 401,
        "parsed again from row {start} of {count}"
    );
    // A line near the end of the block is still highlighted as lua.
    let groups = groups_at(&nvim, (count - 3) as usize, 0).await;
    assert!(groups.contains(&"@keyword.lua".to_string()), "{groups:?}");
    // And so is the first paragraph, highlighted once and kept.
    let first = groups_at(&nvim, 2, 18).await;
    assert!(
        first.contains(&"@markup.raw.markdown_inline".to_string()),
        "{first:?}"
    );
}

#[tokio::test]
async fn an_ended_answers_backlog_is_highlighted_only_where_a_window_shows_it() {
    // 2,000 paragraphs and a lua block of 200 lines, written in one batch and ended in the
    // next: the region ends with all of it still plain. Only what the window shows (the end,
    // inside the block) is highlighted, from the block's fence; the top, once scrolled to.
    let mut answer = String::new();
    for i in 0..2000 {
        answer.push_str(&format!("Paragraph {i} with `code` and *emphasis*.\n\n"));
    }
    answer.push_str("```lua\n");
    for i in 0..200 {
        answer.push_str(&format!("local v{i} = {i}\n"));
    }
    answer.push_str("```\n");
    let nvim = without_model().await;
    nvim.lua(
        "local answer = ... \
         local chat = require('agent.chat') \
         chat.open() \
         local function batch(e) chat.begin_batch() for _, x in ipairs(e) do chat.handle(x) end chat.end_batch() end \
         batch({ { type = 'turn_started' }, { type = 'text', text = answer } }) \
         batch({ { type = 'turn_done', outcome = 'done', message = 'done · 1 in / 1 out tokens', input = 1, output = 1 } })",
        vec![Value::from(answer.as_str())],
    )
    .await;
    let lines = nvim.wait_for_line(CHAT, "done · 1 in / 1 out tokens").await;
    nvim.wait_for("not require('agent.chat.markdown').behind()")
        .await;
    let marks_in = |from: usize, to: usize| {
        format!(
            "local ns = vim.api.nvim_create_namespace('agent.chat.markdown') \
             return #vim.api.nvim_buf_get_extmarks(vim.fn.bufnr('agent: chat'), ns, {{ {from}, 0 }}, {{ {to}, 0 }}, {{}})"
        )
    };
    // Near the end, inside the block: lua, so the part began at the fence, not inside it.
    let last = row_of(&lines, "local v195 = 195");
    nvim.wait_for(&format!(
        "(function() local pos = vim.inspect_pos(vim.fn.bufnr('agent: chat'), {last}, 0) \
         for _, m in ipairs(pos.extmarks) do if m.opts.hl_group == '@keyword.lua' then return true end end \
         return false end)()"
    ))
    .await;
    // Past the first run's budget (1,500 bytes, ~70 rows, parsed while it was open) the
    // answer was never parsed: no window showed it.
    assert_eq!(nvim.lua(&marks_in(200, 3900), vec![]).await, Value::from(0));
    // Scrolled to its middle, that part is highlighted, and not all that is above it.
    nvim.lua(
        "local win = vim.fn.win_findbuf(vim.fn.bufnr('agent: chat'))[1] \
         vim.api.nvim_win_set_cursor(win, { 2001, 0 }) vim.api.nvim_win_call(win, function() vim.cmd('normal! zt') end)",
        vec![],
    )
    .await;
    nvim.wait_for(
        "#vim.api.nvim_buf_get_extmarks(vim.fn.bufnr('agent: chat'), \
         vim.api.nvim_create_namespace('agent.chat.markdown'), { 2000, 0 }, { 2020, 0 }, {}) > 0",
    )
    .await;
    let middle = groups_at(&nvim, 2000, 20).await; // `code` in paragraph 999
    assert!(
        middle.contains(&"@markup.raw.markdown_inline".to_string()),
        "{middle:?}"
    );
    assert_eq!(nvim.lua(&marks_in(200, 1800), vec![]).await, Value::from(0));
}

#[tokio::test]
async fn a_failed_command_and_a_non_zero_exit_are_highlighted_and_a_running_command_counts_seconds()
{
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![
                call(
                    "t1",
                    "run_bash",
                    json!({"command": "while [ ! -e go ]; do sleep 0.05; done"}),
                ),
                call("t2", "run_bash", json!({"command": "exit 3"})),
                call("t3", "run_bash", json!({"command": "  "})),
                call("t4", "read_file", json!({"path": "missing.txt"})),
            ]),
            turn(vec![Part::Text("Looked.".into())]),
        ],
    );
    let nvim = start(&mock, "auto_approve = true").await;
    nvim.cmd("Agent run them").await;
    // The first command waits for the file this test writes once its row shows its seconds.
    let lines = nvim.wait_for_line(CHAT, "… running run_bash (1s)").await;
    let running = groups_at(&nvim, row_of(&lines, "… running run_bash (1s)"), 0).await;
    assert!(
        running.contains(&"AgentToolRunning".to_string()),
        "{running:?}"
    );
    nvim.write("go", "");
    let lines = nvim.wait_for_line(CHAT, "Looked.").await;

    let passed = groups_at(
        &nvim,
        row_of(
            &lines,
            "▸ $ while [ ! -e go ]; do sleep 0.05; done -> exit 0",
        ),
        0,
    )
    .await;
    assert!(passed.contains(&"AgentToolRow".to_string()), "{passed:?}");
    let exit = groups_at(&nvim, row_of(&lines, "▸ $ exit 3 -> exit 3"), 0).await;
    assert!(exit.contains(&"AgentToolExit".to_string()), "{exit:?}");
    // A command that could not run: a failed result.
    let blank = groups_at(&nvim, row_of(&lines, "✗ run_bash: empty command."), 0).await;
    assert!(blank.contains(&"AgentToolFailed".to_string()), "{blank:?}");
    let failed = groups_at(&nvim, row_of(&lines, "✗ No such file: missing.txt"), 0).await;
    assert!(
        failed.contains(&"AgentToolFailed".to_string()),
        "{failed:?}"
    );
    // The default links go to diagnostic groups.
    let links = nvim
        .lua(
            "return { vim.api.nvim_get_hl(0, { name = 'AgentToolFailed' }).link, \
                      vim.api.nvim_get_hl(0, { name = 'AgentToolExit' }).link }",
            vec![],
        )
        .await;
    assert_eq!(
        links,
        Value::Array(vec!["DiagnosticError".into(), "DiagnosticWarn".into()])
    );
    // The clock stopped with the command: no timer is left rewriting the row.
    let clock = nvim
        .lua(
            "return vim.api.nvim_buf_get_lines(vim.fn.bufnr('agent: chat'), 0, -1, false)",
            vec![],
        )
        .await;
    assert!(
        !format!("{clock:?}").contains("… running"),
        "a row still runs: {clock:?}"
    );
}

/// The diff lines under the edit's row and the group each is highlighted with.
const DIFF_ROWS: &str = r#"
local buf = vim.fn.bufnr('agent: chat')
local ns = vim.api.nvim_create_namespace('agent.chat')
local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
local row = vim.fn.match(lines, '^▸ edit a.txt')
local out = {}
for r = row + 1, row + 6 do
  local groups = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, { r, 0 }, { r, 0 }, { details = true })) do
    if m[4].hl_group ~= 'AgentToolOutput' then groups[#groups + 1] = m[4].hl_group end
  end
  out[#out + 1] = (lines[r + 1] or '') .. ' | ' .. table.concat(groups, ',')
end
local win = vim.fn.win_findbuf(buf)[1]
out[#out + 1] = 'folded: ' .. tostring(vim.api.nvim_win_call(win, function() return vim.fn.foldclosed(row + 1) end) == row + 1)
return out
"#;

#[tokio::test]
async fn an_edits_fold_holds_its_diff_highlighted_as_a_diff_live_and_resumed() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![call(
                "t1",
                "edit_file",
                json!({"path": "a.txt", "old_str": "alpha", "new_str": "beta"}),
            )]),
            turn(vec![Part::Text("Edited.".into())]),
        ],
    );
    let nvim = start(&mock, "auto_approve = true").await;
    nvim.write("a.txt", "alpha\nkeep\n");
    nvim.cmd("Agent make the edit").await;
    nvim.wait_for_line(CHAT, "Edited.").await;
    let live = nvim.lua(DIFF_ROWS, vec![]).await;
    let rows: Vec<String> = live
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        rows,
        [
            "  Edited a.txt. | ",
            "  --- a/a.txt | AgentDiffHeader",
            "  +++ b/a.txt | AgentDiffHeader",
            "  @@ -1,2 +1,2 @@ | AgentDiffHeader",
            "  -alpha | AgentDiffDelete",
            "  +beta | AgentDiffAdd",
            "folded: true",
        ],
        "{rows:#?}"
    );

    // Resumed after a restart, the row's fold holds the same diff.
    let nvim = nvim
        .restart(Options {
            ui: UI,
            ..mock_options(&mock, "auto_approve = true")
        })
        .await;
    nvim.lua(
        "vim.ui.select = function(items, opts, on_choice) on_choice(items[1]) end",
        vec![],
    )
    .await;
    nvim.cmd("Agent resume").await;
    nvim.wait_for_line(CHAT, "resumed: make the edit").await;
    let resumed = nvim.lua(DIFF_ROWS, vec![]).await;
    assert_eq!(resumed, live);
}

// The chat reads well.

#[tokio::test]
async fn a_code_block_without_a_parser_says_once_how_to_install_one() {
    let answer = "First:\n\n```python\nprint(1)\n```\n\nAgain:\n\n```python\nprint(2)\n```\n\n```lua\nlocal x = 1\n```\n\n```text\nplain\n```\n";
    // Cut small: a fence's language is half written at times (`pyt`), and says nothing then.
    let deltas = deltas(answer, 4);
    let mock = MockLlm::start(Wire::Anthropic, vec![turn(vec![Part::Deltas(deltas)])]);
    // Tall enough for the whole chat.
    let nvim = Nvim::start(Options {
        ui: Some((80, 44)),
        ..mock_options(&mock, "")
    })
    .await;
    nvim.cmd("Agent code").await;
    nvim.wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;
    nvim.lua(
        "vim.api.nvim_win_set_cursor(vim.fn.bufwinid('agent: chat'), { 1, 0 })",
        vec![],
    )
    .await;
    // The whole screen drawn again: the support's grid, kept from scrolls, can miss a virtual
    // line that a real terminal shows (seen in tmux).
    nvim.cmd("redraw!").await;
    let screen = nvim.wait_for_screen("no parser for").await;
    assert!(
        screen.contains("## You") && screen.contains("```text"),
        "{screen}"
    );
    let note = "no parser for python: :TSInstall python";
    assert_eq!(screen.matches(note).count(), 1, "{screen}");
    assert!(
        !screen.replacen(note, "", 1).contains("no parser for"),
        "{screen}"
    );
    // On a line of its own, right above the first python block's fence.
    let rows: Vec<&str> = screen.lines().collect();
    let at = rows.iter().position(|r| r.contains(note)).unwrap();
    assert!(rows[at + 1].contains("```python"), "{screen}");
    // Not a line of the buffer: the text is what the model wrote.
    let lines = nvim.buffer_lines(CHAT).await;
    assert!(!lines.iter().any(|l| l.contains("no parser")), "{lines:#?}");
}

#[tokio::test]
async fn bold_and_backticks_are_concealed_while_reading_and_shown_in_visual_mode_or_conceallevel_0()
{
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![turn(vec![Part::Text(
            "Use **bold** and `code` here.\n".into(),
        )])],
    );
    let nvim = start(&mock, "").await;
    nvim.cmd("Agent markup").await;
    nvim.wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;
    nvim.wait_for("not require('agent.chat.markdown').behind()")
        .await;
    nvim.wait_for_screen("Use bold and code here.").await;

    // On the cursor's line in the chat too, while reading (Normal mode)…
    nvim.lua(
        "local win = vim.fn.bufwinid('agent: chat') vim.api.nvim_set_current_win(win) \
         vim.fn.search('Use ') ",
        vec![],
    )
    .await;
    nvim.wait_for_screen("Use bold and code here.").await;
    // …but not while selecting it, for copying.
    nvim.api.input("V").await.unwrap();
    nvim.wait_for_screen("Use **bold** and `code` here.").await;
    nvim.api.input("<Esc>").await.unwrap();
    nvim.wait_for_screen("Use bold and code here.").await;

    // 'conceallevel' 0 shows the markup everywhere.
    nvim.lua(
        "vim.wo[vim.fn.bufwinid('agent: chat')].conceallevel = 0",
        vec![],
    )
    .await;
    nvim.api.input("gg").await.unwrap();
    let screen = nvim.wait_for_screen("Use **bold** and `code` here.").await;
    assert!(!screen.contains("Use bold and code here."), "{screen}");
}

#[tokio::test]
async fn a_wrapped_list_item_continues_under_its_text() {
    let item = "- alpha beta gamma delta epsilon zeta eta theta iota kappa lambda";
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![turn(vec![Part::Text(format!("A list:\n\n{item}\n"))])],
    );
    let nvim = start(&mock, "").await;
    nvim.cmd("Agent make a list").await;
    nvim.wait_for_line(CHAT, "done · 10 in / 2 out tokens")
        .await;
    let screen = nvim.wait_for_screen("- alpha beta").await;
    let rows: Vec<Vec<char>> = screen.lines().map(|r| r.chars().collect()).collect();
    let at = screen
        .lines()
        .position(|r| r.contains("- alpha beta"))
        .unwrap();
    let col = rows[at]
        .windows(7)
        .position(|w| w == ['-', ' ', 'a', 'l', 'p', 'h', 'a'])
        .unwrap();
    // The 40-column chat wraps the item; its next screen row starts under `alpha`, not under `-`.
    let next: String = rows[at + 1][col..].iter().collect();
    assert!(
        next.starts_with("  ")
            && !next.starts_with("   ")
            && next
                .trim_start()
                .starts_with(|c: char| c.is_ascii_lowercase()),
        "{screen}"
    );
}
