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

/// Neovim with a `size` UI, talking to `mock`.
async fn start_sized(mock: &MockLlm, size: (i64, i64)) -> Nvim {
    Nvim::start(Options {
        ui: Some(size),
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "k".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua(""),
    })
    .await
}

/// Neovim at 100x30 with calc.py open.
async fn start(mock: &MockLlm) -> Nvim {
    let nvim = start_sized(mock, (100, 30)).await;
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
                 for row = m[2], d.end_row do out[#out + 1] = { row, 'removed' } end
               end
               for _, line in ipairs(d.virt_lines or {}) do
                 out[#out + 1] = { m[2], 'virt: ' .. line[1][1]:gsub('%s+$', '') .. ' (' .. line[1][2] .. ')' }
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
    // What it cost is the conversation's: two requests of 10 in and 5 out at Sonnet's price.
    nvim.wait_for("require('agent.chat.status').cost() ~= nil")
        .await;
    let cost = nvim
        .lua("return require('agent.chat.status').cost()", vec![])
        .await
        .as_f64()
        .unwrap();
    assert!(
        (cost - 2.0 * (10.0 * 3.0 + 5.0 * 15.0) / 1e6).abs() < 1e-12,
        "{cost}"
    );
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
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![done("never seen"), done("never seen either")],
    )
    .with_pace(Pace {
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
    // `:Agent stop` in the buffer stops an edit too.
    nvim.cmd("Agent edit name them x and y").await;
    nvim.wait_for_screen("agent: writing").await;
    nvim.cmd("Agent stop").await;
    nvim.wait_for("require('agent.inline').running() == 0")
        .await;
    assert!(marks(&nvim).await.is_empty());
}

/// WCAG contrast of each part of a proposal against the window's background, in the default
/// scheme (dark and light) and in a light scheme of Neovim's own, as a Lua function returning
/// the parts below `min` as `scheme: group fg/bg ratio`.
const CONTRAST: &str = r#"
local function lum(rgb)
  local function c(v) v = v / 255 return v <= 0.03928 and v / 12.92 or ((v + 0.055) / 1.055) ^ 2.4 end
  local r, g, b = math.floor(rgb / 65536) % 256, math.floor(rgb / 256) % 256, rgb % 256
  return 0.2126 * c(r) + 0.7152 * c(g) + 0.0722 * c(b)
end
local function ratio(a, b)
  local x, y = lum(a), lum(b)
  return (math.max(x, y) + 0.05) / (math.min(x, y) + 0.05)
end
local function hl(name) return vim.api.nvim_get_hl(0, { name = name, link = false }) end
local scheme, bad = ..., {}
local normal = hl('Normal')
local back = normal.bg or (vim.o.background == 'dark' and 0x000000 or 0xffffff)
local front = normal.fg or (vim.o.background == 'dark' and 0xffffff or 0x000000)
-- Text drawn on a group's own background where it has one, on the window's where not.
for group, min in pairs({ AgentInlineSpinner = 3, AgentInlineStale = 3, AgentInlineHint = 2,
  AgentInlineSign = 2, AgentInlineAdded = 3, AgentInlineRemoved = 3 }) do
  local h = hl(group)
  local r = ratio(h.fg or front, h.bg or back)
  if r < min then bad[#bad + 1] = ('%s: %s text %.1f'):format(scheme, group, r) end
end
-- The removed and added lines stand out from the lines around them by their background.
for _, group in ipairs({ 'AgentInlineRemoved', 'AgentInlineAdded' }) do
  local h = hl(group)
  if not h.bg or h.bg == back then bad[#bad + 1] = ('%s: %s has no background of its own'):format(scheme, group) end
end
return bad
"#;

#[tokio::test]
async fn the_proposal_reads_in_the_default_scheme_and_a_light_one_at_80_columns_wrapped_and_folded()
{
    let long = format!(
        "    # {}",
        "the area is pi times the radius squared; ".repeat(3)
    );
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            edit("    x = r * r\n", &format!("    x = r * r\n{long}\n")),
            done("Done."),
        ],
    );
    let nvim = start_sized(&mock, (80, 24)).await;
    let mut bad = Vec::new();
    for (scheme, command) in [
        ("default dark", "set background=dark"),
        ("default light", "set background=light"),
        ("shine", "colorscheme shine"),
    ] {
        nvim.cmd(command).await;
        let found = nvim.lua(CONTRAST, vec![Value::from(scheme)]).await;
        bad.extend(
            found
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string()),
        );
    }
    assert!(bad.is_empty(), "{bad:#?}");
    // At 80 columns, the lines the hunk goes after folded away by the person.
    nvim.write("calc.py", CALC);
    nvim.cmd("edit calc.py").await;
    nvim.cmd("set wrap foldmethod=manual").await;
    nvim.cmd("5,7fold").await;
    assert_eq!(
        nvim.lua("return vim.fn.foldclosed(6)", vec![]).await,
        Value::from(5)
    );
    nvim.cmd("4,7Agent edit explain the area").await;
    proposal_open(&nvim).await;
    // The fold over the hunk is opened: nothing is kept unseen.
    assert_eq!(
        nvim.lua("return vim.fn.foldclosed(6)", vec![]).await,
        Value::from(-1)
    );
    // The long added line is cut to the window's text width, and shown whole.
    let drawn = marks(&nvim).await;
    let pieces: Vec<&str> = drawn
        .iter()
        .filter_map(|(_, m)| m.strip_prefix("virt: "))
        .map(|m| m.trim_end_matches(" (AgentInlineAdded)"))
        .collect();
    assert!(pieces.len() >= 2, "{drawn:#?}");
    assert_eq!(pieces.concat(), long.trim_end());
    let screen = nvim.wait_for_screen("hunk 1/1").await;
    let joined: String = screen
        .lines()
        .map(|l| l.trim_start_matches([' ', '+']))
        .collect();
    assert!(
        joined.contains("the area is pi times the radius squared; the area is pi"),
        "{screen}"
    );
    for line in screen.lines() {
        assert!(line.chars().count() <= 80, "{line}");
    }
}

#[tokio::test]
async fn the_persons_own_keys_come_back_to_their_buffer_and_no_other_is_touched() {
    let mock =
        MockLlm::start(Wire::Anthropic, vec![two_hunk_edit(), done("Done.")]).with_pace(Pace {
            chunk_bytes: Some(32),
            delay: Duration::from_millis(40),
        });
    let nvim = start(&mock).await;
    // calc.py has its own `]h`; another buffer has its own `?`.
    nvim.lua(
        "vim.keymap.set('n', ']h', '<Nop>', { buffer = 0, desc = 'my hunks' })
         vim.cmd('split other.txt')
         vim.keymap.set('n', '?', '<Nop>', { buffer = 0, desc = 'my search' })
         vim.cmd('wincmd p')",
        vec![],
    )
    .await;
    nvim.cmd("4,7Agent edit use math.pi").await;
    // The person goes to the other buffer while the model writes; the proposal comes meanwhile.
    nvim.cmd("wincmd p").await;
    nvim.wait_for("require('agent.inline').proposal(vim.fn.bufnr('calc.py')) ~= nil")
        .await;
    nvim.cmd("wincmd p").await;
    nvim.api.input("gS").await.unwrap();
    nvim.wait_for("require('agent.inline').running() == 0")
        .await;
    let maps = nvim
        .lua(
            "local function desc(buf, lhs)
               for _, m in ipairs(vim.api.nvim_buf_get_keymap(buf, 'n')) do
                 if m.lhs == lhs then return m.desc or '' end
               end
               return ''
             end
             local calc, other = vim.fn.bufnr('calc.py'), vim.fn.bufnr('other.txt')
             return { desc(calc, ']h'), desc(calc, '?'), desc(calc, '<C-C>'), desc(other, '?'), desc(other, ']h') }",
            vec![],
        )
        .await;
    assert_eq!(
        maps,
        Value::Array(
            ["my hunks", "", "", "my search", ""]
                .iter()
                .map(|s| Value::from(*s))
                .collect()
        )
    );
    assert_eq!(lines(&nvim).await.join("\n") + "\n", CALC);
}
