//! Inline edits (`:'<,'>Agent edit`) in a real Neovim with a UI, against the scripted model: the
//! proposal drawn in the buffer (extmarks, virtual lines, the screen), hunks kept and dropped as
//! one undo step, what the model is told, the person typing while the model writes, stale hunks,
//! unsaved buffers, and stopping.

use std::time::Duration;

use rmpv::Value;
use serde_json::json;

use crate::support::mock_llm::{MockLlm, Pace, Part, Reply, Wire};
use crate::support::nvim::{setup_lua, Nvim, Options};
use crate::support::tool_result;

const CALC: &str = "import math


def area(r):
    # the area of a circle
    x = r * r
    return 3.14 * x


def main():
    print(area(2))
";

/// The model's reply: edit_file `t1` of calc.py, `old` to `new`.
fn edit(old: &str, new: &str) -> Reply {
    Reply::Turn {
        parts: vec![Part::ToolCall {
            id: "t1".into(),
            name: "edit_file".into(),
            args: json!({"path": "calc.py", "old_str": old, "new_str": new}).to_string(),
        }],
        usage: (10, 5),
    }
}

/// The model's edit of `area`: a docstring for the comment (line 5) and math.pi (line 7), two
/// hunks with line 6 between them.
fn two_hunk_edit() -> Reply {
    edit(
        "    # the area of a circle\n    x = r * r\n    return 3.14 * x\n",
        "    \"\"\"The area of a circle of radius r.\"\"\"\n    x = r * r\n    return math.pi * x\n",
    )
}

fn done(text: &str) -> Reply {
    Reply::Turn {
        parts: vec![Part::Text(text.into())],
        usage: (10, 5),
    }
}

async fn start(mock: &MockLlm) -> Nvim {
    let nvim = Nvim::start(Options {
        ui: Some((100, 30)),
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "k".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua(""),
    })
    .await;
    nvim.write("calc.py", CALC);
    nvim.cmd("edit calc.py").await;
    nvim
}

/// The buffer's lines.
async fn lines(nvim: &Nvim) -> Vec<String> {
    let value = nvim
        .lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)", vec![])
        .await;
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect()
}

/// The proposal's extmarks as `(row, what)`: `removed` over the lines a hunk removes, `virt: ...`
/// for each virtual line, `hint: ...` for each hint.
async fn marks(nvim: &Nvim) -> Vec<(u64, String)> {
    let value = nvim
        .lua(
            "local ns = vim.api.nvim_get_namespaces()['agent.inline']
             local out = {}
             for _, m in ipairs(vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })) do
               local d = m[4]
               if d.hl_group == 'AgentInlineRemoved' then
                 for row = m[2], d.end_row - 1 do out[#out + 1] = { row, 'removed' } end
               end
               for _, line in ipairs(d.virt_lines or {}) do
                 out[#out + 1] = { m[2], 'virt: ' .. line[1][1] .. ' (' .. line[1][2] .. ')' }
               end
               for _, chunk in ipairs(d.virt_text or {}) do
                 out[#out + 1] = { m[2], 'hint:' .. chunk[1] }
               end
             end
             return out",
            vec![],
        )
        .await;
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| {
            let pair = pair.as_array().unwrap();
            (
                pair[0].as_u64().unwrap(),
                pair[1].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn proposal_open(nvim: &Nvim) {
    nvim.wait_for("require('agent.inline').proposal() ~= nil")
        .await;
}

#[tokio::test]
async fn a_selected_function_gets_a_two_hunk_proposal_in_the_buffer_one_kept_one_dropped_one_undo()
{
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![two_hunk_edit(), done("Used math.pi and a docstring.")],
    );
    let nvim = start(&mock).await;
    // A person selects the function and types the command.
    nvim.api.input("4GV7G").await.unwrap();
    nvim.api
        .input(":Agent edit use math.pi and a docstring<CR>")
        .await
        .unwrap();
    proposal_open(&nvim).await;
    let screen = nvim.wait_for_screen("hunk 1/2").await;
    assert!(
        screen.contains("\"\"\"The area of a circle of radius r.\"\"\""),
        "{screen}"
    );
    assert!(screen.contains("return math.pi * x"), "{screen}");
    assert!(screen.contains("hunk 2/2"), "{screen}");
    // The buffer itself is unchanged while the person looks.
    assert_eq!(lines(&nvim).await.join("\n") + "\n", CALC);
    let drawn = marks(&nvim).await;
    for expected in [
        (4, "removed".to_string()),
        (
            4,
            "virt:     \"\"\"The area of a circle of radius r.\"\"\" (AgentInlineAdded)"
                .to_string(),
        ),
        (6, "removed".to_string()),
        (
            6,
            "virt:     return math.pi * x (AgentInlineAdded)".to_string(),
        ),
    ] {
        assert!(drawn.contains(&expected), "{expected:?} in {drawn:#?}");
    }
    assert!(
        drawn
            .iter()
            .any(|(row, m)| *row == 4 && m.contains("hunk 1/2 · ga keep · gs drop · ? more")),
        "{drawn:#?}"
    );
    // The model's request carried the file, the range, the lines and the instruction.
    let asked = mock.requests()[0].body["messages"][0]["content"].to_string();
    assert!(asked.contains("Edit lines 4-7 of calc.py"), "{asked}");
    assert!(asked.contains("7:     return 3.14 * x"), "{asked}");
    assert!(
        asked.contains("The request: use math.pi and a docstring"),
        "{asked}"
    );
    // Keep the first hunk (the cursor goes to the second), drop the second.
    nvim.api.input("5G").await.unwrap();
    nvim.api.input("ga").await.unwrap();
    nvim.wait_for("require('agent.inline').proposal().states[1] == 'kept'")
        .await;
    nvim.api.input("gs").await.unwrap();
    nvim.wait_for("require('agent.inline').proposal() == nil")
        .await;
    let kept = CALC.replace(
        "    # the area of a circle\n",
        "    \"\"\"The area of a circle of radius r.\"\"\"\n",
    );
    assert_eq!(lines(&nvim).await.join("\n") + "\n", kept);
    // In the buffer only: the file is written when the person saves.
    assert_eq!(nvim.read("calc.py"), CALC);
    assert_eq!(
        nvim.lua("return vim.bo.modified", vec![]).await,
        Value::from(true)
    );
    // The model reads which hunk was dropped, with its lines.
    let (said, ok) = tool_result(&mock, 1, "t1");
    assert!(ok, "{said}");
    assert!(said.contains("they kept hunk 1."), "{said}");
    assert!(said.contains("They dropped hunk 2."), "{said}");
    assert!(
        said.contains("hunk 2 (line 7):\n-    return 3.14 * x\n+    return math.pi * x"),
        "{said}"
    );
    nvim.wait_for("require('agent.inline').running() == 0")
        .await;
    assert!(nvim
        .messages()
        .await
        .contains("Used math.pi and a docstring."));
    // One `u` takes the whole kept change back; nothing of the proposal is left on screen.
    nvim.api.input("u").await.unwrap();
    nvim.wait_for("not vim.bo.modified").await;
    assert_eq!(lines(&nvim).await.join("\n") + "\n", CALC);
    assert!(marks(&nvim).await.is_empty());
    // The conversation's own history holds none of it: its chat was never written to.
    let chat = nvim.buffer_lines("agent: chat").await.join("\n");
    assert!(!chat.contains("math.pi"), "{chat}");
}

#[tokio::test]
async fn a_hunk_whose_lines_the_person_changed_is_stale_and_never_applied() {
    let mock = MockLlm::start(Wire::Anthropic, vec![two_hunk_edit(), done("Done.")]);
    let nvim = start(&mock).await;
    nvim.cmd("4,7Agent edit use math.pi").await;
    proposal_open(&nvim).await;
    // The person changes line 7 (the second hunk's) while the proposal is open.
    nvim.lua(
        "vim.api.nvim_buf_set_lines(0, 6, 7, false, { '    return 3 * x' })",
        vec![],
    )
    .await;
    nvim.wait_for("require('agent.inline').proposal().states[2] == 'stale'")
        .await;
    nvim.wait_for_screen("stale: you changed these lines").await;
    // Keep all: the first is applied, the stale one is not, over the person's line.
    nvim.api.input("gA").await.unwrap();
    nvim.wait_for("require('agent.inline').proposal() == nil")
        .await;
    let now = lines(&nvim).await;
    assert_eq!(now[4], "    \"\"\"The area of a circle of radius r.\"\"\"");
    assert_eq!(now[6], "    return 3 * x");
    let (said, _) = tool_result(&mock, 1, "t1");
    assert!(
        said.contains("Not applied: hunk 2, because the person changed those lines"),
        "{said}"
    );
}

#[tokio::test]
async fn typing_above_while_the_model_writes_lands_the_proposal_on_the_moved_lines_and_unsaved_text_is_kept(
) {
    // A slow stream: the person types while it arrives.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            edit("    return 3.14 * x\n", "    return math.pi * x\n"),
            done("Done."),
        ],
    )
    .with_pace(Pace {
        chunk_bytes: Some(24),
        delay: Duration::from_millis(60),
    });
    let nvim = start(&mock).await;
    // Unsaved work of the person's own, then the edit mapping on line 7 (no treesitter parser
    // for Python here: the line), its instruction asked for.
    nvim.api.input("1GA, sys<Esc>").await.unwrap();
    nvim.api.input("7G").await.unwrap();
    nvim.api.input("\\ae").await.unwrap();
    nvim.wait_for_screen("agent: edit line 7 of calc.py:").await;
    nvim.api.input("use math.pi<CR>").await.unwrap();
    nvim.wait_for_screen("agent: writing").await;
    // Typed above while the model writes: nothing takes the keys.
    nvim.api.input("ggOimport os<Esc>").await.unwrap();
    nvim.wait_for("vim.api.nvim_buf_get_lines(0, 0, 1, false)[1] == 'import os'")
        .await;
    proposal_open(&nvim).await;
    let drawn = marks(&nvim).await;
    assert!(drawn.contains(&(7, "removed".to_string())), "{drawn:#?}");
    assert!(
        drawn.contains(&(
            7,
            "virt:     return math.pi * x (AgentInlineAdded)".to_string()
        )),
        "{drawn:#?}"
    );
    nvim.api.input("ga").await.unwrap();
    nvim.wait_for("require('agent.inline').proposal() == nil")
        .await;
    let now = lines(&nvim).await;
    assert_eq!(&now[..2], ["import os", "import math, sys"]);
    assert_eq!(now[7], "    return math.pi * x");
    // Never written: the disk has the file as it was.
    assert_eq!(nvim.read("calc.py"), CALC);
    let (said, ok) = tool_result(&mock, 1, "t1");
    assert!(
        ok && said.contains("they kept your whole edit (1 hunk)"),
        "{said}"
    );
}

#[tokio::test]
async fn the_function_around_the_cursor_is_the_range_and_ctrl_c_stops_the_edit() {
    let mock = MockLlm::start(Wire::Anthropic, vec![done("never seen")]).with_pace(Pace {
        chunk_bytes: Some(8),
        delay: Duration::from_millis(200),
    });
    let nvim = start(&mock).await;
    nvim.write(
        "m.lua",
        "local M = {}\n\nfunction M.add(a, b)\n  return a + b\nend\n\nreturn M\n",
    );
    nvim.cmd("edit m.lua").await;
    nvim.api.input("4G").await.unwrap();
    nvim.cmd("Agent edit name the arguments x and y").await;
    nvim.wait_for_screen("agent: writing").await;
    let request = mock.wait_for_requests(1, Duration::from_secs(20));
    let asked = request[0].body["messages"][0]["content"].to_string();
    assert!(asked.contains("Edit lines 3-5 of m.lua"), "{asked}");
    // The edit's own key stops it; its spinner goes, the buffer is as it was. (Typed: the API's
    // input takes <C-c> as an interrupt before any mapping, where a terminal's does not.)
    nvim.lua(
        "vim.api.nvim_feedkeys(vim.keycode('<C-c>'), 'mt', false)",
        vec![],
    )
    .await;
    nvim.wait_for("require('agent.inline').running() == 0")
        .await;
    assert!(marks(&nvim).await.is_empty());
    assert!(!nvim.screen().contains("agent: writing"));
    assert_eq!(
        lines(&nvim).await,
        [
            "local M = {}",
            "",
            "function M.add(a, b)",
            "  return a + b",
            "end",
            "",
            "return M"
        ]
    );
    assert!(nvim
        .messages()
        .await
        .contains("agent: the edit was stopped"));
    // The key is the person's again.
    assert_eq!(
        nvim.lua("return vim.fn.maparg('<C-c>', 'n')", vec![]).await,
        Value::from("")
    );
}
