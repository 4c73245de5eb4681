//! `:Agent rewind` in a real Neovim, against the mock server: the code put back (files edited,
//! created and deleted, by edit_file and by run_bash) with the user's `.git` untouched, and
//! undone again; the conversation cut (the model no longer sees it, the chat shows it cut and
//! the prompt is back in the input, after a resume too); each only when asked, and nothing at
//! all when a file to restore has unsaved changes.

use std::path::PathBuf;

use agent_nvim::test_support::user_repo::{differing, entries, git as user_git};
use rmpv::Value;
use serde_json::json;

use super::checkpoints::{call, four_changes, users_repo};
use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{mock_options, Nvim, Options};

const CHAT: &str = "agent: chat";

fn turn(parts: Vec<Part>) -> Reply {
    Reply::Turn {
        parts,
        usage: (10, 2),
    }
}

fn text(text: &str) -> Reply {
    turn(vec![Part::Text(text.into())])
}

fn options(mock: &MockLlm) -> Options {
    mock_options(mock, "auto_approve = true")
}

/// The user prompts the `n`-th request to the mock carried, in order.
fn prompts_sent(mock: &MockLlm, n: usize) -> Vec<String> {
    let requests = mock.wait_for_requests(n + 1, std::time::Duration::from_secs(20));
    requests[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| {
            let content = &m["content"];
            let text = content.as_str().or_else(|| content[0]["text"].as_str());
            text.map(String::from)
        })
        .collect()
}

/// Whether the chat's line holding `text` starts a closed fold, in the chat's window.
async fn folded_at(nvim: &Nvim, text: &str) -> bool {
    let closed = nvim
        .lua(
            "local b = vim.fn.bufnr('agent: chat') local w = vim.fn.win_findbuf(b)[1] \
             local row = vim.fn.match(vim.api.nvim_buf_get_lines(b, 0, -1, false), '^' .. ...) + 1 \
             return row > 0 and vim.api.nvim_win_call(w, function() return vim.fn.foldclosed(row) end) == row",
            vec![Value::from(text)],
        )
        .await;
    closed == Value::from(true)
}

/// The rows `require("agent").rewind_points()` gives, as :Agent rewind lists them.
async fn rows(nvim: &Nvim) -> Vec<String> {
    let rows = nvim
        .lua(
            "return vim.tbl_map(function(p) return p.row end, require('agent').rewind_points())",
            vec![],
        )
        .await;
    let rows = rows.as_array().unwrap().iter();
    rows.map(|row| row.as_str().unwrap().to_string()).collect()
}

/// The input buffer's text.
async fn input(nvim: &Nvim) -> String {
    nvim.buffer_lines("agent: input").await.join("\n")
}

/// Waits until `:messages` holds `text`.
async fn wait_for_message(nvim: &Nvim, text: &str) {
    nvim.wait_for(&format!(
        "vim.fn.execute('messages'):find({text:?}, 1, true)"
    ))
    .await;
}

#[tokio::test]
async fn rewinding_code_and_conversation_puts_back_four_files_cuts_the_chat_and_leaves_the_users_git_alone(
) {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![turn(four_changes()), text("Changed."), text("Fresh start.")],
    );
    let nvim = Nvim::start(options(&mock)).await;
    let root = nvim.workspace.path().to_path_buf();
    let (status_before, git_before) = users_repo(&root);
    nvim.cmd("edit a.txt").await;

    nvim.cmd("Agent change things").await;
    nvim.wait_for_line(CHAT, "Changed.").await;
    assert_eq!(nvim.read("a.txt"), "two, not yet committed\n");
    assert!(root.join("made.txt").exists() && !root.join("old.txt").exists());

    // The list, then what to restore: each picker's items as shown, the first chosen.
    nvim.lua(
        "_G.shown = {} vim.ui.select = function(items, opts, on_choice) \
           table.insert(_G.shown, { prompt = opts.prompt, items = vim.tbl_map(opts.format_item, items) }) \
           on_choice(items[1]) end",
        vec![],
    )
    .await;
    nvim.cmd("Agent rewind").await;
    let cut = "rewound to before prompt 1: the model no longer sees what follows";
    let before = nvim.wait_for_line(CHAT, cut).await;
    let shown = nvim
        .lua(
            "local expected = { \
               { prompt = 'Rewind to before', items = { '1 · change things · 4 files changed · just now' } }, \
               { prompt = 'Rewind to before prompt 1: restore', \
                 items = { 'Code and conversation', 'Code only', 'Conversation only' } } } \
             return vim.deep_equal(_G.shown, expected) or vim.inspect(_G.shown)",
            vec![],
        )
        .await;
    assert_eq!(shown, Value::from(true));

    // The code: all four files as they were, the loaded buffer reloaded, the user's git as it was.
    assert_eq!(nvim.read("a.txt"), "one, not yet committed\n");
    assert_eq!(nvim.read("old.txt"), "old\n");
    assert!(!root.join("made.txt").exists());
    assert!(!root.join("src/new.rs").exists());
    assert_eq!(
        nvim.buffer_lines("a.txt").await,
        ["one, not yet committed"],
        "the unmodified buffer is reloaded"
    );
    assert_eq!(
        differing(&git_before, &entries(&root.join(".git"))),
        Vec::<PathBuf>::new(),
        "the user's .git changed"
    );
    assert_eq!(user_git(&root, &["status", "--porcelain"]), status_before);
    // The conversation: the chat shows the turn cut (folded under the row), the prompt is back
    // in the input, and what was done is said.
    assert!(folded_at(&nvim, cut).await, "{before:#?}");
    assert_eq!(input(&nvim).await, "change things");
    wait_for_message(
        &nvim,
        "agent: rewound to before prompt 1: 4 files put back, the conversation cut",
    )
    .await;

    // The rewind is itself checkpointed: the list offers its undo (the prompt is gone from it,
    // the conversation being cut), which puts the four files back as the turn left them.
    assert_eq!(
        rows(&nvim).await,
        ["undo · the code before the last rewind · 4 files changed · just now"]
    );
    nvim.cmd("Agent rewind undo").await;
    wait_for_message(
        &nvim,
        "agent: the code is back as it was before the last rewind: 4 files put back",
    )
    .await;
    assert_eq!(nvim.read("a.txt"), "two, not yet committed\n");
    assert!(root.join("made.txt").exists() && root.join("src/new.rs").exists());
    assert!(!root.join("old.txt").exists());

    // A resumed conversation looks the same, cut included.
    let nvim = nvim.restart(options(&mock)).await;
    nvim.choose_first().await;
    nvim.cmd("Agent resume").await;
    let after = nvim.wait_for_line(CHAT, "resumed: change things").await;
    let live: Vec<&String> = before.iter().filter(|l| !l.is_empty()).collect();
    let replayed: Vec<&String> = after.iter().filter(|l| !l.is_empty()).collect();
    assert_eq!(replayed[..live.len()], live[..], "{after:#?}");
    assert!(folded_at(&nvim, cut).await, "{after:#?}");
    // Its last done row offers the diff of what changed since its prompt, as it did live.
    let hint = nvim
        .lua(
            "local b = vim.fn.bufnr('agent: chat') \
             local ns = vim.api.nvim_create_namespace('agent.chat') \
             for _, m in ipairs(vim.api.nvim_buf_get_extmarks(b, ns, 0, -1, { details = true })) do \
               if m[4].virt_text then return m[4].virt_text[1][1] end \
             end \
             return ''",
            vec![],
        )
        .await;
    assert_eq!(hint, Value::from("  d: diff (4 files changed)"));
    // Its rewind points are its own before its next prompt: the undo's own snapshot (the redo).
    assert_eq!(
        rows(&nvim).await,
        ["undo · the code before the last rewind · 4 files changed · just now"]
    );

    // The model no longer sees the prompt.
    nvim.cmd("Agent start over").await;
    nvim.wait_for_line(CHAT, "Fresh start.").await;
    assert_eq!(prompts_sent(&mock, 2), ["start over"]);
}

#[tokio::test]
async fn code_only_and_conversation_only_do_only_that_and_a_dirty_buffer_blocks_the_rewind() {
    let create = |id: &str, path: &str| {
        turn(vec![call(
            id,
            "edit_file",
            json!({"path": path, "old_str": "", "new_str": "new\n"}),
        )])
    };
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            create("c1", "b.txt"),
            text("Made b."),
            create("c2", "c.txt"),
            text("Made c."),
            text("Third."),
        ],
    );
    let nvim = Nvim::start(options(&mock)).await;
    nvim.cmd("Agent write b").await;
    nvim.wait_for_line(CHAT, "Made b.").await;

    // A file to restore has unsaved changes: nothing changes, and the message names it.
    nvim.cmd("edit b.txt").await;
    nvim.lua(
        "vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'mine' })",
        vec![],
    )
    .await;
    nvim.lua("require('agent').rewind(1, 'both')", vec![]).await;
    let chat = nvim
        .wait_for_line(
            CHAT,
            "agent: nothing was restored: b.txt has unsaved changes in Neovim; save or discard them first",
        )
        .await;
    assert_eq!(nvim.read("b.txt"), "new\n");
    assert!(!chat.iter().any(|l| l.starts_with("rewound")), "{chat:#?}");
    assert_eq!(input(&nvim).await, "");
    nvim.cmd("bwipeout!").await;

    // Code only: the file created goes, the conversation stays.
    nvim.lua("require('agent').rewind(1, 'code')", vec![]).await;
    wait_for_message(&nvim, "agent: rewound to before prompt 1: 1 file put back").await;
    assert!(!nvim.workspace.path().join("b.txt").exists());
    let chat = nvim.buffer_lines(CHAT).await;
    assert!(!chat.iter().any(|l| l.starts_with("rewound")), "{chat:#?}");
    assert_eq!(input(&nvim).await, "");
    nvim.cmd("Agent second").await;
    nvim.wait_for_line(CHAT, "Made c.").await;
    assert_eq!(
        prompts_sent(&mock, 2),
        ["write b", "second"],
        "the blocked rewind and the code-only one left the history"
    );

    // Conversation only: the history is cut before "second", the files stay.
    nvim.lua("require('agent').rewind(2, 'conversation')", vec![])
        .await;
    let cut = "rewound to before prompt 2: the model no longer sees what follows";
    nvim.wait_for_line(CHAT, cut).await;
    assert!(folded_at(&nvim, cut).await);
    assert_eq!(input(&nvim).await, "second");
    assert_eq!(nvim.read("c.txt"), "new\n");
    assert!(!nvim.workspace.path().join("b.txt").exists());
    // The list follows the history: "second" is gone from it.
    let rows = nvim
        .lua(
            "return vim.tbl_map(function(p) return p.turn end, require('agent').rewind_points())",
            vec![],
        )
        .await;
    assert_eq!(rows, Value::Array(vec![Value::from(1)]));
    nvim.cmd("Agent third").await;
    nvim.wait_for_line(CHAT, "Third.").await;
    assert_eq!(prompts_sent(&mock, 4), ["write b", "third"]);

    // "third" is prompt 2 now; the numbers and the modes complete; a prompt the list does not
    // have is refused.
    let completed = nvim
        .lua(
            "local agent = require('agent') \
             return { agent._complete('', 'Agent rewind '), agent._complete('c', 'Agent rewind 2 c') }",
            vec![],
        )
        .await;
    let strings = |v: &Value| -> Vec<String> {
        let v = v.as_array().unwrap().iter();
        v.map(|s| s.as_str().unwrap().to_string()).collect()
    };
    let completed = completed.as_array().unwrap();
    assert_eq!(strings(&completed[0]), ["2", "1"]);
    assert_eq!(strings(&completed[1]), ["code", "conversation"]);
    nvim.cmd("Agent rewind 7 code").await;
    nvim.wait_for_line(CHAT, "agent: there is no prompt 7 to rewind to")
        .await;
}

#[tokio::test]
async fn a_rewind_brings_a_private_file_and_directory_back_as_private_as_they_were() {
    use std::os::unix::fs::PermissionsExt;
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![call(
                "r1",
                "run_bash",
                json!({"command": "rm -rf .env private"}),
            )]),
            text("Removed."),
        ],
    );
    let nvim = Nvim::start(options(&mock)).await;
    let ws = nvim.workspace.path().to_path_buf();
    let set = |rel: &str, mode: u32| {
        std::fs::set_permissions(ws.join(rel), std::fs::Permissions::from_mode(mode)).unwrap()
    };
    std::fs::write(ws.join(".env"), "KEY=secret\n").unwrap();
    set(".env", 0o600);
    std::fs::create_dir(ws.join("private")).unwrap();
    std::fs::write(ws.join("private/id_key"), "key\n").unwrap();
    set("private/id_key", 0o600);
    set("private", 0o700);
    nvim.cmd("Agent clean up").await;
    nvim.wait_for_line(CHAT, "Removed.").await;
    assert!(!ws.join(".env").exists());
    nvim.lua("require('agent').rewind(1, 'code')", vec![]).await;
    wait_for_message(&nvim, "agent: rewound to before prompt 1").await;
    let mode = |rel: &str| {
        std::fs::metadata(ws.join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(
        [mode(".env"), mode("private"), mode("private/id_key")],
        [0o600, 0o700, 0o600]
    );
    assert_eq!(nvim.read(".env"), "KEY=secret\n");
}
