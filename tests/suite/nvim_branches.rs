//! Edit-and-resend and regenerate as branches in a real Neovim, against the mock server
//! (`:help agent-branches`): `e` on a prompt puts it in the input and sending it starts a new
//! branch (the old one kept, the model no longer sent its later messages), the prompt is marked
//! `branch 2 of 2`, `[` / `]` switch back and forth (the chat and the history the branch's),
//! `r` asks again for the last answer, and a resume shows the branch last used.

use rmpv::Value;

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{mock_options, Nvim};

const CHAT: &str = "agent: chat";

/// True once the chat marks a prompt as having branches.
const MARKED: &str = "#vim.api.nvim_buf_get_extmarks(vim.fn.bufnr('agent: chat'), \
    vim.api.nvim_create_namespace('agent.chat.branches'), 0, -1, {}) == 1";

fn answer(text: &str) -> Reply {
    Reply::Turn {
        parts: vec![Part::Text(text.into())],
        usage: (10, 2),
    }
}

/// The user and assistant texts of request `n`, in order (`you: ...`, `agent: ...`).
fn said(mock: &MockLlm, n: usize) -> Vec<String> {
    mock.requests()[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let text = match &m["content"] {
                serde_json::Value::String(text) => text.clone(),
                blocks => blocks[0]["text"].as_str().unwrap_or("").to_string(),
            };
            let who = if m["role"] == "user" { "you" } else { "agent" };
            format!("{who}: {text}")
        })
        .collect()
}

/// Puts the cursor on the `n`-th `## You` of the chat (or on its last line for 0), in the
/// chat's window, and presses `keys` there.
async fn press_on_prompt(nvim: &Nvim, n: usize, keys: &str) {
    nvim.lua(
        "local buf = vim.fn.bufnr('agent: chat') local win = vim.fn.bufwinid(buf) \
         vim.api.nvim_set_current_win(win) \
         local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false) \
         local n, row = ..., #lines \
         if n > 0 then local seen = 0 \
           for i, line in ipairs(lines) do if line == '## You' then seen = seen + 1 \
             if seen == n then row = i end end end end \
         vim.api.nvim_win_set_cursor(win, { row, 0 })",
        vec![Value::from(n as u64)],
    )
    .await;
    nvim.api.input(keys).await.unwrap();
}

/// The marks on the chat's prompts, `row: text` (0-based rows).
async fn marks(nvim: &Nvim) -> Vec<String> {
    let found = nvim
        .lua(
            "local buf = vim.fn.bufnr('agent: chat') \
             local ns = vim.api.nvim_create_namespace('agent.chat.branches') \
             local out = {} \
             for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do \
               out[#out + 1] = vim.api.nvim_buf_get_lines(buf, m[2], m[2] + 1, false)[1] .. ' |' .. m[4].virt_text[1][1] \
             end return out",
            vec![],
        )
        .await;
    found
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn an_edited_prompt_starts_a_branch_the_keys_switch_and_r_asks_again() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            answer("first answer"),
            answer("old second answer"),
            answer("better second answer"),
            answer("regenerated second answer"),
        ],
    );
    let nvim = Nvim::start(mock_options(&mock, "")).await;
    nvim.cmd("Agent one").await;
    nvim.wait_for_line(CHAT, "first answer").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    nvim.cmd("Agent two").await;
    nvim.wait_for_line(CHAT, "old second answer").await;
    nvim.wait_for("not require('agent.chat').busy()").await;

    // While a turn runs, `e` waits for nothing: refused with the reason, Neovim free.
    nvim.lua(
        "_G.notes = {} local notify = vim.notify \
         vim.notify = function(m, ...) table.insert(_G.notes, m) return notify(m, ...) end \
         require('agent.chat.status').set('thinking')",
        vec![],
    )
    .await;
    press_on_prompt(&nvim, 2, "e").await;
    nvim.wait_for(
        "vim.tbl_contains(_G.notes, 'agent: a turn is running; edit a prompt once it has ended')",
    )
    .await;
    nvim.lua("require('agent.chat.status').set('idle')", vec![])
        .await;

    // `e` on the second prompt: its text in the input, to edit.
    press_on_prompt(&nvim, 2, "e").await;
    nvim.wait_for(
        "vim.api.nvim_buf_get_lines(require('agent.chat.window').input_buf, 0, -1, false)[1] == 'two'",
    )
    .await;
    nvim.lua(
        "local w = require('agent.chat.window') \
         vim.api.nvim_buf_set_lines(w.input_buf, 0, -1, false, { 'two, better' })",
        vec![],
    )
    .await;
    nvim.api.input("<C-s>").await.unwrap();
    let lines = nvim.wait_for_line(CHAT, "better second answer").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    let text = lines.join("\n");
    assert!(
        !text.contains("old second answer"),
        "the chat is the new branch:\n{text}"
    );
    assert!(text.contains("two, better"), "{text}");
    assert_eq!(
        said(&mock, 2),
        ["you: one", "agent: first answer", "you: two, better"],
        "the old branch's later messages are not sent"
    );
    nvim.wait_for(MARKED).await;
    assert_eq!(marks(&nvim).await, ["## You |  branch 2 of 2 · [ / ]"]);

    // `[` on that prompt: the first branch again, chat and history.
    press_on_prompt(&nvim, 2, "[").await;
    let lines = nvim.wait_for_line(CHAT, "old second answer").await;
    nvim.wait_for(MARKED).await;
    let text = lines.join("\n");
    assert!(!text.contains("better second answer"), "{text}");
    assert_eq!(marks(&nvim).await, ["## You |  branch 1 of 2 · [ / ]"]);

    // `r` on the last answer: asked again, as a third branch of prompt 2.
    press_on_prompt(&nvim, 0, "r").await;
    let lines = nvim.wait_for_line(CHAT, "regenerated second answer").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    assert_eq!(
        said(&mock, 3),
        ["you: one", "agent: first answer", "you: two"]
    );
    let text = lines.join("\n");
    assert!(!text.contains("old second answer"), "{text}");
    nvim.wait_for(MARKED).await;
    assert_eq!(marks(&nvim).await, ["## You |  branch 3 of 3 · [ / ]"]);

    // A resume shows the branch last used, marked.
    let nvim = nvim.restart(mock_options(&mock, "")).await;
    nvim.lua(
        "vim.ui.select = function(items, opts, on_choice) on_choice(items[1]) end",
        vec![],
    )
    .await;
    nvim.cmd("Agent resume").await;
    let lines = nvim.wait_for_line(CHAT, "resumed: one").await;
    nvim.wait_for(MARKED).await;
    let text = lines.join("\n");
    assert!(text.contains("regenerated second answer"), "{text}");
    assert!(
        !text.contains("old second answer") && !text.contains("better second"),
        "{text}"
    );
    assert_eq!(marks(&nvim).await, ["## You |  branch 3 of 3 · [ / ]"]);

    // A branch that cannot start (a prompt it does not have): said, and the text typed goes
    // back in the input, never lost.
    nvim.lua(
        "require('agent.chat').branching('from a prompt that is gone') \
         require('agent.rpc').prompt('from a prompt that is gone', nil, { turn = 9 })",
        vec![],
    )
    .await;
    nvim.wait_for_line(CHAT, "agent: no new branch: there is no prompt 9")
        .await;
    nvim.wait_for(
        "vim.api.nvim_buf_get_lines(require('agent.chat.window').input_buf, 0, -1, false)[1] \
         == 'from a prompt that is gone'",
    )
    .await;
    nvim.wait_for("not require('agent.chat').busy()").await;
}
