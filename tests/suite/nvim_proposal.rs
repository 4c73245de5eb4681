//! "Edit before allowing" in a real Neovim with the mock: the person changes an edit in the
//! proposal tab or a command in its float, writes it, and the model reads exactly what they
//! changed; closing the proposal without writing goes back to the request.

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

fn call(name: &str, args: serde_json::Value) -> Reply {
    turn(vec![Part::ToolCall {
        id: "t1".into(),
        name: name.into(),
        args: args.to_string(),
    }])
}

fn done() -> Reply {
    turn(vec![Part::Text("OK.".into())])
}

async fn start(mock: &MockLlm) -> Nvim {
    Nvim::start(Options {
        ui: Some((120, 36)),
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "k".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua(""),
    })
    .await
}

async fn lua(nvim: &Nvim, code: &str) -> Value {
    nvim.lua(code, vec![]).await
}

/// The model edits `two` to `TWO` in a.txt; the picker asks; the person presses `e`.
async fn editing(mock: &MockLlm) -> Nvim {
    let nvim = start(mock).await;
    nvim.write("a.txt", "one\ntwo\nthree\n");
    nvim.cmd("Agent go").await;
    nvim.wait_for_screen("Edit before allowing").await;
    nvim.api.input("e").await.unwrap();
    nvim.wait_for_screen("proposal · :w allows it · :q goes back")
        .await;
    nvim
}

fn edit_two() -> Vec<Reply> {
    vec![
        call(
            "edit_file",
            json!({"path": "a.txt", "old_str": "two", "new_str": "TWO"}),
        ),
        done(),
    ]
}

#[tokio::test]
async fn a_changed_proposal_is_what_gets_written_and_the_model_reads_the_persons_diff() {
    let mock = MockLlm::start(Wire::Anthropic, edit_two());
    let nvim = editing(&mock).await;
    // A tab with the file as it is (read-only) beside the proposal.
    assert_eq!(
        lua(&nvim, "return vim.fn.tabpagenr('$')").await,
        Value::from(2)
    );
    assert_eq!(
        lua(&nvim, "return vim.api.nvim_buf_get_name(0)").await,
        Value::from("agent://proposal/a.txt")
    );
    assert_eq!(
        lua(
            &nvim,
            "return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '|')"
        )
        .await,
        Value::from("one|TWO|three")
    );
    assert_eq!(
        lua(&nvim, "return vim.bo[vim.fn.winbufnr(1)].modifiable").await,
        Value::from(false)
    );
    assert_eq!(lua(&nvim, "return vim.wo.diff").await, Value::from(true));
    // The person changes the third line and writes.
    nvim.api
        .input("3Gccthree, said the person<Esc>:w<CR>")
        .await
        .unwrap();
    let (result, ok) = tool_result(&mock, 1, "t1");
    assert!(ok, "{result}");
    assert_eq!(nvim.read("a.txt"), "one\nTWO\nthree, said the person\n");
    let head = "Edited a.txt. The user changed your edit before it was written; their changes to your proposal:\n";
    assert!(result.starts_with(head), "{result}");
    let diff = &result[head.len()..];
    assert!(diff.contains("-three\n"), "{diff}");
    assert!(diff.contains("+three, said the person\n"), "{diff}");
    assert!(
        !diff.contains("-TWO"),
        "the model's own change is not the person's: {diff}"
    );
    nvim.wait_for_line(CHAT, "edited, allowed once").await;
    nvim.wait_for_line(CHAT, "OK.").await;
    // The tab is gone, and no proposal buffer is left.
    assert_eq!(
        lua(&nvim, "return vim.fn.tabpagenr('$')").await,
        Value::from(1)
    );
    assert_eq!(
        lua(&nvim, "return vim.fn.bufexists('agent://proposal/a.txt')").await,
        Value::from(0)
    );
}

#[tokio::test]
async fn a_proposal_written_unchanged_is_the_usual_edit() {
    let mock = MockLlm::start(Wire::Anthropic, edit_two());
    let nvim = editing(&mock).await;
    nvim.api.input(":w<CR>").await.unwrap();
    let (result, ok) = tool_result(&mock, 1, "t1");
    assert!(ok);
    assert_eq!(result, "Edited a.txt.");
    assert_eq!(nvim.read("a.txt"), "one\nTWO\nthree\n");
}

#[tokio::test]
async fn quitting_the_proposal_returns_to_the_picker_with_the_request_still_open() {
    let mock = MockLlm::start(Wire::Anthropic, edit_two());
    let nvim = editing(&mock).await;
    nvim.api.input("3Gccnot kept<Esc>:q!<CR>").await.unwrap();
    nvim.wait_for_screen("Refuse with a reason").await;
    assert_eq!(
        lua(&nvim, "return require('agent.approval').pending()").await,
        Value::from(1)
    );
    assert_eq!(
        lua(&nvim, "return vim.fn.tabpagenr('$')").await,
        Value::from(1)
    );
    // Nothing was written meanwhile, and allowing now writes the model's version.
    assert_eq!(nvim.read("a.txt"), "one\ntwo\nthree\n");
    nvim.api.input("1").await.unwrap();
    let (result, _) = tool_result(&mock, 1, "t1");
    assert_eq!(result, "Edited a.txt.");
    assert_eq!(nvim.read("a.txt"), "one\nTWO\nthree\n");
}

#[tokio::test]
async fn an_edited_command_runs_instead_and_the_model_is_told_what_ran() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            call(
                "run_bash",
                json!({"command": "echo model-said > model.txt"}),
            ),
            done(),
        ],
    );
    let nvim = start(&mock).await;
    nvim.cmd("Agent go").await;
    nvim.wait_for_screen("Edit before allowing").await;
    nvim.api.input("e").await.unwrap();
    nvim.wait_for_screen("Edit the command").await;
    let screen = nvim.wait_for_screen(":w or <C-s> runs it").await;
    assert!(screen.contains("echo model-said > model.txt"), "{screen}");
    nvim.api
        .input("ccecho person-said<Esc>:w<CR>")
        .await
        .unwrap();
    let (result, ok) = tool_result(&mock, 1, "t1");
    assert!(ok, "{result}");
    assert_eq!(
        result,
        "The user edited the command before running it. What ran:\necho person-said\n\nperson-said\n\n[exit 0]"
    );
    assert!(!nvim.workspace.path().join("model.txt").exists());
    nvim.wait_for_line(CHAT, "$ echo person-said -> exit 0")
        .await;
    nvim.wait_for_line(CHAT, "edited, allowed once").await;
}

#[tokio::test]
async fn ctrl_s_runs_the_edited_command_and_q_goes_back() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![call("run_bash", json!({"command": "echo first"})), done()],
    );
    let nvim = start(&mock).await;
    nvim.cmd("Agent go").await;
    nvim.wait_for_screen("Edit before allowing").await;
    nvim.api.input("e").await.unwrap();
    nvim.wait_for_screen("Edit the command").await;
    nvim.api.input(":q<CR>").await.unwrap();
    nvim.wait_for_screen("Refuse with a reason").await;
    nvim.api.input("e").await.unwrap();
    nvim.wait_for_screen("Edit the command").await;
    nvim.api.input("A second<C-s>").await.unwrap();
    let (result, _) = tool_result(&mock, 1, "t1");
    assert!(
        result.starts_with("The user edited the command before running it. What ran:\necho first second\n\nfirst second\n"),
        "{result}"
    );
}

#[tokio::test]
async fn e_bang_puts_the_proposal_back_and_a_write_elsewhere_allows_nothing() {
    let mock = MockLlm::start(Wire::Anthropic, edit_two());
    let nvim = editing(&mock).await;
    nvim.api.input("ggccscribble<Esc>:e!<CR>").await.unwrap();
    nvim.wait_for(
        "table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '|') == 'one|TWO|three'",
    )
    .await;
    // A write aimed somewhere else is refused and allows nothing.
    nvim.api
        .input(":w /tmp/agent-proposal-copy<CR>")
        .await
        .unwrap();
    nvim.wait_for_screen("write the proposal with :w in its own window")
        .await;
    assert!(mock.requests().len() < 2, "the edit was allowed");
    assert_eq!(nvim.read("a.txt"), "one\ntwo\nthree\n");
    nvim.api.input(":w<CR>").await.unwrap();
    let (result, _) = tool_result(&mock, 1, "t1");
    assert_eq!(result, "Edited a.txt.");
}

#[tokio::test]
async fn a_turn_stopped_while_the_person_edits_keeps_their_version_in_a_buffer() {
    let mock = MockLlm::start(Wire::Anthropic, edit_two());
    let nvim = editing(&mock).await;
    nvim.api.input("3GCcarefully typed<Esc>").await.unwrap();
    // Typed: the warning that follows waits for Enter, as it would for a person.
    nvim.api.input(":Agent stop<CR>").await.unwrap();
    nvim.wait_for_screen("your edited proposal is kept in agent://discarded-proposal")
        .await;
    nvim.api.input("<CR>").await.unwrap();
    assert_eq!(
        lua(
            &nvim,
            "return table.concat(vim.api.nvim_buf_get_lines(vim.fn.bufnr('agent://discarded-proposal'), 0, -1, false), '|')"
        )
        .await,
        Value::from("one|TWO|carefully typed")
    );
    assert_eq!(nvim.read("a.txt"), "one\ntwo\nthree\n");
}

#[tokio::test]
async fn in_the_diff_tab_padding_cannot_push_a_change_out_of_sight() {
    // `hello`, 5,000 spaces, then the change that matters.
    let padded = format!("hello{}evil()", " ".repeat(5_000));
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            call(
                "edit_file",
                json!({"path": "a.txt", "old_str": "two", "new_str": padded}),
            ),
            done(),
        ],
    );
    let nvim = editing(&mock).await;
    // Both sides wrap, so scrolling down (never sideways) brings it on screen.
    let wraps = lua(
        &nvim,
        "local t = {} for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do t[#t + 1] = vim.wo[w].wrap end return t",
    )
    .await;
    assert_eq!(
        wraps,
        Value::from(vec![Value::from(true), Value::from(true)])
    );
    let mut seen = nvim.screen().contains("evil()");
    for _ in 0..20 {
        if seen {
            break;
        }
        nvim.api.input("<C-d>").await.unwrap();
        nvim.wait_for("true").await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        seen = nvim.screen().contains("evil()");
    }
    assert!(seen, "evil() never came on screen:\n{}", nvim.screen());
    nvim.api.input(":q!<CR>").await.unwrap();
}
