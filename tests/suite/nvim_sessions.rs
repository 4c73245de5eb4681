//! Saved conversations in a real Neovim, against the mock server: saved as they happen, listed
//! and resumed after Neovim restarts, with the model seeing the whole history again.

use rmpv::Value;

use crate::support::mock_llm::MockLlm;
use crate::support::nvim::{mock_options, Nvim, Options};

const CHAT: &str = "agent: chat";

fn options(mock: &MockLlm) -> Options {
    mock_options(mock, "")
}

/// The one session file under Neovim's state directory.
fn session_file(nvim: &Nvim) -> std::path::PathBuf {
    let sessions = nvim._home.path().join("state/nvim/agent/sessions");
    let folders: Vec<_> = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(folders.len(), 1, "{folders:?}");
    let files: Vec<_> = std::fs::read_dir(&folders[0])
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

#[tokio::test]
async fn a_conversation_saved_before_neovim_quit_is_resumed_as_it_looked_and_the_model_sees_it_all()
{
    let mock = crate::support::read_then_resume_mock((321, 12));
    let nvim = Nvim::start(options(&mock)).await;
    nvim.write("a.txt", "alpha\n");
    nvim.cmd("Agent what is in a.txt?").await;
    let before = nvim
        .wait_for_line(CHAT, "done · 642 in / 24 out tokens")
        .await;
    let file = session_file(&nvim);
    let nvim = nvim.restart(options(&mock)).await;
    // A crash while a line was being written leaves part of it: it is skipped.
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap()
        .write_all(br#"{"t":"event","event":{"type":"text","text":"LOST"#)
        .unwrap();

    // Completing `:Agent resume ` in a Neovim whose backend has not started does not start it.
    let completed = nvim
        .lua(
            "local c = vim.fn.getcompletion('Agent resume ', 'cmdline') \
             return { #c, require('agent.rpc').running() }",
            vec![],
        )
        .await;
    assert_eq!(
        completed,
        Value::Array(vec![Value::from(0), Value::from(false)])
    );

    // The picker lists it; choosing it resumes it.
    nvim.lua(
        "vim.ui.select = function(items, opts, on_choice) \
           _G.listed = vim.tbl_map(opts.format_item, items) on_choice(items[1]) end",
        vec![],
    )
    .await;
    nvim.cmd("Agent resume").await;
    let after = nvim.wait_for_line(CHAT, "resumed: what is in a.txt?").await;
    // With the backend running, completing `:Agent resume ` offers the saved ids.
    let completed = nvim
        .lua(
            "return vim.fn.getcompletion('Agent resume ', 'cmdline')",
            vec![],
        )
        .await;
    let id = file.file_stem().unwrap().to_string_lossy().to_string();
    assert_eq!(completed, Value::Array(vec![Value::from(id.as_str())]));
    let listed = nvim.lua("return _G.listed", vec![]).await;
    let listed: Vec<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    // One conversation, then the rows that rename or delete one.
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(
        listed[1..],
        ["✎ rename one of them…", "✗ delete one of them…"]
    );
    assert!(
        listed[0].starts_with("what is in a.txt? · ")
            && listed[0].ends_with(" · 1 prompt · 666 tokens"),
        "{listed:?}"
    );
    // The chat shows what it showed before, then the note.
    assert_eq!(after[..before.len()], before[..], "{after:#?}");
    assert!(!after.join("\n").contains("LOST"), "{after:#?}");
    // The tool row's output is folded as it was.
    let folded = nvim
        .lua(
            "local b = vim.fn.bufnr('agent: chat') local w = vim.fn.win_findbuf(b)[1] \
             local row = vim.fn.match(vim.api.nvim_buf_get_lines(b, 0, -1, false), '^▸ read a.txt') + 1 \
             return { row, vim.api.nvim_win_call(w, function() return vim.fn.foldclosed(row) end) }",
            vec![],
        )
        .await;
    let folded: Vec<i64> = folded
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert!(folded[0] > 0 && folded[1] == folded[0], "{folded:?}");

    nvim.cmd("Agent and now?").await;
    nvim.wait_for_line(CHAT, "Still alpha.").await;
    let sent = &mock.requests()[2].body["messages"];
    let sent = sent.as_array().unwrap();
    // The first prompt, the call, its result, the answer, the new prompt.
    assert_eq!(sent.len(), 5, "{sent:#?}");
    assert_eq!(sent[0]["content"][0]["text"], "what is in a.txt?");
    assert_eq!(sent[1]["content"][0]["name"], "read_file");
    assert!(sent[2].to_string().contains("alpha"), "{}", sent[2]);
    assert_eq!(sent[3]["content"][0]["text"], "It says alpha.");
    assert_eq!(sent[4]["content"][0]["text"], "and now?");
    // It went on in the same file, which now holds both prompts.
    assert_eq!(session_file(&nvim), file);
    let ids = nvim
        .lua(
            "return vim.tbl_map(function(s) return s.prompts end, require('agent').sessions())",
            vec![],
        )
        .await;
    assert_eq!(ids, Value::Array(vec![Value::from(2)]));
}

/// Tool call ids repeat across turns (a server that sends none gets `call_0` for each reply's
/// first call): a resumed conversation still gives each call its own row, as it was live.
#[tokio::test]
async fn a_tool_id_used_again_in_a_later_turn_is_resumed_as_its_own_row() {
    use crate::support::mock_llm::{Part, Reply, Wire};
    let turn = |parts| Reply::Turn {
        parts,
        usage: (1, 1),
    };
    let read = |path: &str| {
        turn(vec![Part::ToolCall {
            id: "call_0".into(),
            name: "read_file".into(),
            args: serde_json::json!({ "path": path }).to_string(),
        }])
    };
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            read("a.txt"),
            turn(vec![Part::Text("It says alpha.".into())]),
            read("b.txt"),
            turn(vec![Part::Text("It says beta.".into())]),
        ],
    );
    let nvim = Nvim::start(options(&mock)).await;
    nvim.write("a.txt", "alpha\n");
    nvim.write("b.txt", "beta\n");
    nvim.cmd("Agent what is in a.txt?").await;
    nvim.wait_for_line(CHAT, "It says alpha.").await;
    nvim.cmd("Agent and b.txt?").await;
    nvim.wait_for_line(CHAT, "It says beta.").await;
    let before = nvim.wait_for_line(CHAT, "done · 2 in / 2 out tokens").await;
    let nvim = nvim.restart(options(&mock)).await;
    nvim.choose_first().await;
    nvim.cmd("Agent resume").await;
    let after = nvim.wait_for_line(CHAT, "resumed: what is in a.txt?").await;
    assert_eq!(
        after[..before.len()],
        before[..],
        "live {before:#?}\nresumed {after:#?}"
    );
}

/// The resume list shows each conversation's age as the backend words it (the one formatter,
/// `agent_nvim::display::age_at`), never one Lua works out again from `updated`.
#[tokio::test]
async fn the_resume_list_shows_the_age_the_backend_gave() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: String::new(),
    })
    .await;
    let rows = nvim
        .lua(
            "local item = require('agent.pickers').session_item \
             return { \
               item({ id = 'a', title = 'fix the tests', updated = 0, age = '5 min ago', prompts = 1, tokens = 2 }), \
               item({ id = 'agent:gemini:s1', agent = 'gemini', session = 's1', title = '', updated = 0, age = '2 h ago' }), \
               item({ id = 'b', title = '', updated = 0, problem = 'unreadable' }), \
             }",
            vec![],
        )
        .await;
    assert_eq!(
        rows,
        Value::Array(vec![
            Value::from("fix the tests · 5 min ago · 1 prompt · 2 tokens"),
            Value::from("gemini: s1 · 2 h ago"),
            Value::from("b (unreadable)"),
        ])
    );
}

/// `:Agent name`, `:Agent export` and the resume list's rename and delete.
#[tokio::test]
async fn a_conversation_is_renamed_exported_as_markdown_without_its_key_and_deleted_when_closed() {
    use crate::support::mock_llm::{Part, Reply, Wire};
    let turn = |parts| Reply::Turn {
        parts,
        usage: (10, 5),
    };
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![Part::ToolCall {
                id: "t1".into(),
                name: "run_bash".into(),
                args: r#"{"command": "echo test-key and more"}"#.into(),
            }]),
            turn(vec![Part::Text("Fixed.".into())]),
        ],
    );
    let nvim = Nvim::start(mock_options(&mock, "auto_approve = true")).await;
    nvim.cmd("Agent fix the test").await;
    nvim.wait_for_line(CHAT, "Fixed.").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    nvim.cmd("Agent name the test fix").await;
    // Saved by the backend's writer, a moment later.
    nvim.wait_for("require('agent.rpc').sessions()[1].title == 'the test fix'")
        .await;
    let listed = nvim
        .lua(
            "local list = require('agent.rpc').sessions() return { list[1].title, list[1].id }",
            vec![],
        )
        .await;
    let listed = listed.as_array().unwrap().clone();
    assert_eq!(listed[0], Value::from("the test fix"));
    let id = listed[1].as_str().unwrap().to_string();

    // Into a buffer of its own, and into a file (never over one).
    nvim.cmd("Agent export").await;
    let md = nvim
        .lua(
            "return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')",
            vec![],
        )
        .await;
    let md = md.as_str().unwrap();
    assert!(md.starts_with("# the test fix\n"), "{md}");
    assert!(md.contains("## You\n\nfix the test\n"), "{md}");
    assert!(
        md.contains("<details><summary>▸ $ echo [redacted] and more"),
        "{md}"
    );
    assert!(md.contains("Fixed."), "{md}");
    assert!(!md.contains("test-key"), "{md}");
    let out = nvim._home.path().join("out.md");
    let path = out.display().to_string();
    nvim.lua(
        "require('agent').export(...)",
        vec![Value::from(path.as_str())],
    )
    .await;
    let written = std::fs::read_to_string(&out).unwrap();
    assert_eq!(written.trim_end(), md.trim_end());
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o600
    );
    std::fs::write(&out, "mine").unwrap();
    nvim.lua(
        "require('agent').export(...)",
        vec![Value::from(path.as_str())],
    )
    .await;
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "mine");
    // Nor through a link that points nowhere (yet).
    let link = nvim._home.path().join("link.md");
    let target = nvim._home.path().join("target.md");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    nvim.lua(
        "require('agent').export(...)",
        vec![Value::from(link.display().to_string())],
    )
    .await;
    assert!(!target.exists());

    // The list's rename; a delete is refused while the conversation is open, then done.
    let renamed = nvim
        .lua(
            "return require('agent.rpc').session_rename(...)",
            vec![Value::from(id.as_str()), Value::from("renamed again")],
        )
        .await;
    assert_eq!(renamed, Value::from("renamed again"));
    let refused = nvim
        .lua(
            "local ok, err = require('agent.rpc').session_delete(...) return { ok or false, err or '' }",
            vec![Value::from(id.as_str())],
        )
        .await;
    assert!(
        refused.as_array().unwrap()[1]
            .as_str()
            .unwrap()
            .contains("that conversation is open here"),
        "{refused:?}"
    );
    // Closed (in its own tab page: the export opened another), it can go.
    nvim.cmd("tabfirst").await;
    nvim.cmd("Agent close").await;
    nvim.lua("require('agent').open({ focus = false })", vec![])
        .await;
    nvim.wait_for(&format!(
        "(function() _G.deleted = require('agent.rpc').session_delete('{id}') return _G.deleted ~= nil end)()"
    ))
    .await;
    let deleted = nvim.lua("return _G.deleted", vec![]).await;
    let deleted = deleted.as_str().unwrap_or_default().to_string();
    assert!(
        deleted.starts_with(&format!("agent: deleted conversation {id}")),
        "{deleted}"
    );
    assert!(!deleted.contains("(0 checkpoints"), "{deleted}");
    let left = nvim
        .lua("return #(require('agent.rpc').sessions() or {})", vec![])
        .await;
    assert_eq!(left, Value::from(0));
}

/// `:Agent fork N`: a new conversation in a tab page of its own, holding the history before
/// prompt N; the original goes on unchanged.
#[tokio::test]
async fn a_fork_holds_the_history_before_its_prompt_and_the_original_goes_on_unchanged() {
    use crate::support::mock_llm::{Part, Reply, Wire};
    let text = |t: &str| Reply::Turn {
        parts: vec![Part::Text(t.into())],
        usage: (10, 5),
    };
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            text("one answered"),
            text("two answered"),
            text("fork answered"),
            text("original answered"),
        ],
    );
    let nvim = Nvim::start(mock_options(&mock, "")).await;
    nvim.cmd("Agent one").await;
    nvim.wait_for_line(CHAT, "one answered").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    nvim.cmd("Agent two").await;
    nvim.wait_for_line(CHAT, "two answered").await;
    nvim.wait_for("not require('agent.chat').busy()").await;
    nvim.cmd("Agent fork 2").await;
    // The fork's chat, in its own tab page: the first prompt and its answer, not the second.
    let forked = nvim.wait_for_line("agent: chat 2", "one answered").await;
    assert!(!forked.iter().any(|l| l.contains("two")), "{forked:?}");
    let name = nvim
        .lua(
            "return require('agent.conversations').label(require('agent.conversations').in_tab())",
            vec![],
        )
        .await;
    assert_eq!(name, Value::from("fork of one"));
    nvim.wait_for("not require('agent.chat').busy()").await;
    nvim.cmd("Agent in the fork").await;
    nvim.wait_for_line("agent: chat 2", "fork answered").await;
    let sent = mock.requests()[2].body["messages"].to_string();
    assert!(
        sent.contains("one") && sent.contains("one answered"),
        "{sent}"
    );
    assert!(!sent.contains("two"), "{sent}");
    // The original, in its own tab page, goes on with all of its history.
    nvim.cmd("tabfirst").await;
    nvim.cmd("Agent in the original").await;
    nvim.wait_for_line(CHAT, "original answered").await;
    let sent = mock.requests()[3].body["messages"].to_string();
    assert!(
        sent.contains("two answered") && !sent.contains("in the fork"),
        "{sent}"
    );
}
