//! `:Agent diff` in a real Neovim, against the mock server: the quickfix list of what a prompt
//! (or the whole conversation) changed, the diff of a file against its checkpoint with the old
//! side read-only, `:diffget` (and `gs`) taking a hunk back, the chat's `done` row offering the
//! same, `u` on an edit's row undoing it, and the messages when there is nothing to show.

use rmpv::Value;
use serde_json::json;

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{field, setup_lua, Nvim, Options};

const CHAT: &str = "agent: chat";

fn turn(parts: Vec<Part>) -> Reply {
    Reply::Turn {
        parts,
        usage: (10, 5),
    }
}

fn edit(id: &str, path: &str, old: &str, new: &str) -> Part {
    Part::ToolCall {
        id: id.into(),
        name: "edit_file".into(),
        args: json!({"path": path, "old_str": old, "new_str": new}).to_string(),
    }
}

fn text(s: &str) -> Reply {
    turn(vec![Part::Text(s.into())])
}

async fn start(
    mock: &MockLlm,
    ui: Option<(i64, i64)>,
    extra: &str,
    env: Vec<(String, String)>,
) -> Nvim {
    let mut all = vec![
        ("ANTHROPIC_API_KEY".into(), "test-key".into()),
        ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
    ];
    all.extend(env);
    let nvim = Nvim::start(Options {
        ui,
        env: all,
        setup: setup_lua(extra),
    })
    .await;
    // What the plugin tells the person, kept for the assertions.
    nvim.keep_notes().await;
    nvim
}

/// The quickfix list's title and each entry's text.
async fn quickfix(nvim: &Nvim) -> (String, Vec<String>) {
    let list = nvim
        .lua(
            "local l = vim.fn.getqflist({ title = 1, items = 1 }) \
             return { l.title, vim.tbl_map(function(i) return i.text end, l.items) }",
            vec![],
        )
        .await;
    let list = list.as_array().unwrap();
    let texts = list[1]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    (list[0].as_str().unwrap().to_string(), texts)
}

async fn notes(nvim: &Nvim) -> Vec<String> {
    let notes = nvim.lua("return _G.notes", vec![]).await;
    notes
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Answers the open approval with "allow once".
async fn allow(nvim: &Nvim) {
    nvim.wait_for("require('agent.approval').pending() > 0")
        .await;
    nvim.api.input("1").await.unwrap();
    nvim.wait_for("require('agent.approval').pending() == 0")
        .await;
}

#[tokio::test]
async fn agent_diff_fills_the_quickfix_list_with_the_right_files_and_opens_a_read_only_diff() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![
                edit("t1", "a.lua", "two", "2"),
                edit("t2", "notes/new.txt", "", "hello\n"),
                Part::ToolCall {
                    id: "t3".into(),
                    name: "run_bash".into(),
                    args: json!({"command": "rm gone.txt"}).to_string(),
                },
            ]),
            text("Changed both."),
        ],
    );
    let nvim = start(&mock, Some((120, 40)), "", vec![]).await;
    nvim.write("a.lua", "one\ntwo\nthree\n");
    nvim.write("gone.txt", "x\ny\n");
    nvim.cmd("Agent change things").await;
    allow(&nvim).await;
    allow(&nvim).await;
    allow(&nvim).await;
    nvim.wait_for_line(CHAT, "done · 20 in / 10 out tokens")
        .await;
    assert_eq!(nvim.read("notes/new.txt"), "hello\n");

    nvim.cmd("Agent diff").await;
    assert_eq!(
        quickfix(&nvim).await,
        (
            "agent: changes since prompt 1 · change things".to_string(),
            vec![
                "M a.lua +1 -1".to_string(),
                "D gone.txt +0 -2".to_string(),
                "A notes/new.txt +1 -0".to_string()
            ]
        )
    );
    // The list is shown, each line the entry's text alone.
    nvim.wait_for_screen("M a.lua +1 -1").await;
    assert_eq!(
        nvim.lua(
            "return vim.api.nvim_buf_get_lines(vim.fn.getqflist({ qfbufnr = 1 }).qfbufnr, 0, -1, false)",
            vec![]
        )
        .await,
        Value::Array(vec![
            Value::from("M a.lua +1 -1"),
            Value::from("D gone.txt +0 -2"),
            Value::from("A notes/new.txt +1 -0")
        ])
    );

    // <CR> on the first entry: the checkpoint's a.lua beside the file now, both in diff mode.
    nvim.lua("vim.api.nvim_win_set_cursor(0, { 1, 0 })", vec![])
        .await;
    assert_eq!(
        nvim.lua("return vim.bo.buftype", vec![]).await,
        Value::from("quickfix")
    );
    nvim.api.input("<CR>").await.unwrap();
    nvim.wait_for("vim.fn.bufnr('^agent://checkpoint/') > 0 and vim.wo.diff")
        .await;
    let views = nvim
        .lua(
            "local old = vim.fn.bufnr('^agent://checkpoint/') \
             local ow = vim.fn.win_findbuf(old)[1] \
             local bo = vim.bo[old] \
             return { \
               name = vim.api.nvim_buf_get_name(old), \
               old = vim.api.nvim_buf_get_lines(old, 0, -1, false), \
               modifiable = bo.modifiable, buftype = bo.buftype, readonly = bo.readonly, \
               filetype = bo.filetype, old_diff = vim.wo[ow].diff, \
               current = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(0), ':t'), \
               now = vim.api.nvim_buf_get_lines(0, 0, -1, false), \
               diff = vim.wo.diff, line = vim.fn.line('.') }",
            vec![],
        )
        .await;
    let field = |name: &str| -> Value { field(&views, name).unwrap() };
    let lines = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_string())
            .collect()
    };
    let name = field("name");
    let name = name.as_str().unwrap();
    assert!(
        name.starts_with("agent://checkpoint/") && name.ends_with("/a.lua"),
        "{name}"
    );
    assert_eq!(lines(field("old")), ["one", "two", "three"]);
    assert_eq!(field("modifiable"), Value::from(false));
    assert_eq!(field("buftype"), Value::from("nofile"));
    assert_eq!(field("readonly"), Value::from(true));
    assert_eq!(field("filetype"), Value::from("lua"));
    assert_eq!(field("old_diff"), Value::from(true));
    assert_eq!(field("current"), Value::from("a.lua"));
    assert_eq!(lines(field("now")), ["one", "2", "three"]);
    assert_eq!(field("diff"), Value::from(true));
    // The cursor is on the first change.
    assert_eq!(field("line"), Value::from(2));

    // `gs` (keymaps.diff.revert) in the file's window takes the change under the cursor back
    // (into the buffer, not yet saved); on an unchanged line it says so and changes nothing.
    nvim.api.input("gggs").await.unwrap();
    nvim.wait_for("vim.tbl_contains(vim.tbl_map(function(n) return n:find('no change under the cursor') ~= nil end, _G.notes), true)")
        .await;
    assert_eq!(nvim.buffer_lines("a.lua").await, ["one", "2", "three"]);
    nvim.lua("_G.notes = {}", vec![]).await;
    nvim.api.input("jgs").await.unwrap();
    nvim.wait_for("vim.api.nvim_buf_get_lines(0, 1, 2, false)[1] == 'two'")
        .await;
    assert_eq!(nvim.buffer_lines("a.lua").await, ["one", "two", "three"]);
    assert_eq!(nvim.read("a.lua"), "one\n2\nthree\n");

    // The created file: an empty old side.
    nvim.cmd("write").await;
    nvim.cmd("copen").await;
    nvim.lua("vim.api.nvim_win_set_cursor(0, { 3, 0 })", vec![])
        .await;
    nvim.api.input("<CR>").await.unwrap();
    nvim.wait_for("vim.fn.expand('%:t') == 'new.txt' and vim.wo.diff")
        .await;
    let sides = nvim
        .lua(
            "local old = vim.fn.bufnr('^agent://checkpoint/') \
             return { #vim.fn.getbufinfo({ bufloaded = 1 }) > 0, \
                      vim.api.nvim_buf_get_lines(old, 0, -1, false), \
                      vim.api.nvim_buf_get_lines(0, 0, -1, false), \
                      #vim.tbl_filter(function(b) return vim.api.nvim_buf_get_name(b):find('^agent://checkpoint/') ~= nil end, vim.api.nvim_list_bufs()) }",
            vec![],
        )
        .await;
    let sides = sides.as_array().unwrap();
    // a.lua's view is gone, and its revert key with it.
    assert_eq!(
        nvim.lua(
            "return vim.api.nvim_buf_call(vim.fn.bufnr('a.lua'), function() return vim.fn.maparg('gs', 'n') end)",
            vec![]
        )
        .await,
        Value::from("")
    );
    assert_eq!(lines(sides[1].clone()), [""]);
    assert_eq!(lines(sides[2].clone()), ["hello"]);
    // The earlier diff's checkpoint buffer is gone: one at a time.
    assert_eq!(sides[3], Value::from(1));

    // The deleted file: its old text alone, not in diff mode.
    nvim.cmd("copen").await;
    nvim.lua("vim.api.nvim_win_set_cursor(0, { 2, 0 })", vec![])
        .await;
    nvim.api.input("<CR>").await.unwrap();
    nvim.wait_for("vim.api.nvim_buf_get_name(0):find('/gone.txt$') ~= nil")
        .await;
    assert_eq!(
        nvim.lua(
            "return { vim.api.nvim_buf_get_name(0):find('^agent://checkpoint/') ~= nil, \
                      vim.api.nvim_buf_get_lines(0, 0, -1, false), vim.wo.diff, vim.bo.modifiable }",
            vec![]
        )
        .await,
        Value::Array(vec![
            Value::from(true),
            Value::Array(vec![Value::from("x"), Value::from("y")]),
            Value::from(false),
            Value::from(false),
        ])
    );
    assert!(notes(&nvim).await.is_empty(), "{:?}", notes(&nvim).await);
}

#[tokio::test]
async fn diff_all_and_diff_differ_when_two_prompts_changed_different_files_and_done_rows_offer_theirs(
) {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![edit("t1", "one.txt", "", "1\n")]),
            text("Made one."),
            turn(vec![
                edit("t2", "two.txt", "", "2\n2\n"),
                Part::ToolCall {
                    id: "t3".into(),
                    name: "run_bash".into(),
                    args: json!({"command": "printf 'a\\0b' > pic.bin"}).to_string(),
                },
            ]),
            text("Made two."),
            text("Nothing to change."),
        ],
    );
    let nvim = start(&mock, None, "auto_approve = true", vec![]).await;
    nvim.cmd("Agent make one").await;
    nvim.wait_for_line(CHAT, "Made one.").await;
    nvim.wait_for_line(CHAT, "done · ").await;
    nvim.cmd("Agent make two").await;
    nvim.wait_for_line(CHAT, "Made two.").await;
    // The done row of each prompt says how many files it changed, and that `d` lists them.
    nvim.wait_for(
        "#vim.tbl_filter(function(m) return m[4].virt_text ~= nil and m[4].ns_id ~= vim.api.nvim_get_namespaces()['agent.chat.below'] end, \
           vim.api.nvim_buf_get_extmarks(vim.fn.bufnr('agent: chat'), -1, 0, -1, { details = true })) == 2",
    )
    .await;
    let hints = nvim
        .lua(
            "local b = vim.fn.bufnr('agent: chat') local out = {} \
             for _, m in ipairs(vim.api.nvim_buf_get_extmarks(b, -1, 0, -1, { details = true })) do \
               if m[4].virt_text then \
                 out[#out + 1] = vim.api.nvim_buf_get_lines(b, m[2], m[2] + 1, true)[1] .. m[4].virt_text[1][1] \
               end \
             end return out",
            vec![],
        )
        .await;
    assert_eq!(
        hints,
        Value::Array(vec![
            Value::from("done · 20 in / 10 out tokens · <$0.01  d: diff (1 file changed)"),
            Value::from("done · 20 in / 10 out tokens · <$0.01  d: diff (2 files changed)"),
        ])
    );
    // The built-in agent's edits and commands all went through the executor: none of its
    // changes is listed as made outside agent.nvim's checks (only an external agent's are).
    let chat = nvim.buffer_lines(CHAT).await.join("\n");
    assert!(!chat.contains("without asking agent.nvim"), "{chat}");

    nvim.cmd("Agent diff").await;
    assert_eq!(
        quickfix(&nvim).await,
        (
            "agent: changes since prompt 2 · make two".to_string(),
            vec![
                "A pic.bin (binary)".to_string(),
                "A two.txt +2 -0".to_string()
            ]
        )
    );
    // A binary file has no text to put beside it: a message, and no diff.
    nvim.lua("vim.api.nvim_win_set_cursor(0, { 1, 0 })", vec![])
        .await;
    nvim.api.input("<CR>").await.unwrap();
    nvim.wait_for("#_G.notes > 0").await;
    assert_eq!(
        notes(&nvim).await,
        ["agent: pic.bin is a binary file; there is no text to compare"]
    );
    assert_eq!(
        nvim.lua("return vim.fn.bufnr('^agent://checkpoint/')", vec![])
            .await,
        Value::from(-1)
    );
    nvim.lua("_G.notes = {}", vec![]).await;
    nvim.cmd("Agent diff all").await;
    assert_eq!(
        quickfix(&nvim).await,
        (
            "agent: changes since the conversation began".to_string(),
            vec![
                "A one.txt +1 -0".to_string(),
                "A pic.bin (binary)".to_string(),
                "A two.txt +2 -0".to_string()
            ]
        )
    );

    // `d` on the first prompt's done row: what changed since that prompt began.
    nvim.lua(
        "local b = vim.fn.bufnr('agent: chat') local w = vim.fn.win_findbuf(b)[1] \
         vim.api.nvim_set_current_win(w) \
         local row = vim.fn.match(vim.api.nvim_buf_get_lines(b, 0, -1, false), '^done · ') + 1 \
         vim.api.nvim_win_set_cursor(w, { row, 0 })",
        vec![],
    )
    .await;
    nvim.api.input("d").await.unwrap();
    nvim.wait_for("vim.fn.getqflist({ title = 1 }).title:find('prompt 1') ~= nil")
        .await;
    assert_eq!(
        quickfix(&nvim).await,
        (
            "agent: changes since prompt 1 · make one".to_string(),
            vec![
                "A one.txt +1 -0".to_string(),
                "A pic.bin (binary)".to_string(),
                "A two.txt +2 -0".to_string()
            ]
        )
    );

    // A prompt that changed nothing: a message, no hint, and the list left as it was.
    nvim.cmd("Agent just talk").await;
    nvim.wait_for_line(CHAT, "Nothing to change.").await;
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
    nvim.cmd("Agent diff").await;
    assert_eq!(
        notes(&nvim).await,
        ["agent: nothing changed since prompt 3 · just talk"]
    );
    assert_eq!(
        quickfix(&nvim).await.0,
        "agent: changes since prompt 1 · make one"
    );
    assert_eq!(
        nvim.lua(
            "return #vim.tbl_filter(function(m) return m[4].virt_text ~= nil and m[4].ns_id ~= vim.api.nvim_get_namespaces()['agent.chat.below'] end, \
               vim.api.nvim_buf_get_extmarks(vim.fn.bufnr('agent: chat'), -1, 0, -1, { details = true }))",
            vec![],
        )
        .await,
        Value::from(2)
    );
}

#[tokio::test]
async fn without_checkpoints_agent_diff_says_they_are_off_and_leaves_the_quickfix_list_alone() {
    let mock = MockLlm::start(Wire::Anthropic, vec![text("hi")]);
    let (_bin, path) = crate::support::path_without_git();
    let nvim = start(&mock, None, "", vec![("PATH".into(), path)]).await;
    nvim.cmd("Agent hello").await;
    nvim.wait_for_line(CHAT, "hi").await;
    nvim.cmd("Agent diff").await;
    assert_eq!(
        notes(&nvim).await,
        ["agent: checkpoints are off: git was not found on PATH; install git to be able to rewind"]
    );
    assert_eq!(quickfix(&nvim).await, (String::new(), vec![]));
    // `all` and `base` complete after `diff`, and `diff` after `:Agent`.
    assert_eq!(
        nvim.lua(
            "return { require('agent')._complete('', 'Agent diff '), \
                      vim.tbl_contains(require('agent')._complete('di', 'Agent di'), 'diff') }",
            vec![]
        )
        .await,
        Value::Array(vec![
            Value::Array(vec![Value::from("all"), Value::from("base")]),
            Value::from(true)
        ])
    );
}

#[tokio::test]
async fn a_file_turned_into_a_link_out_of_the_workspace_is_never_opened_for_editing() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![Part::ToolCall {
                id: "t1".into(),
                name: "run_bash".into(),
                args: json!({
                    "command": "rm notes.md && ln -s ../outside.txt notes.md \
                                && rm -r docs && ln -s ../outdir docs"
                })
                .to_string(),
            }]),
            text("Linked."),
        ],
    );
    let nvim = start(&mock, Some((120, 40)), "", vec![]).await;
    nvim.write("notes.md", "the repo's own notes\n");
    nvim.write("docs/a.md", "a doc\n");
    let outside = nvim.workspace.path().parent().unwrap().join("outside.txt");
    std::fs::write(&outside, "someone's dotfile\n").unwrap();
    std::fs::create_dir_all(nvim.workspace.path().parent().unwrap().join("outdir")).unwrap();
    nvim.cmd("Agent link it").await;
    allow(&nvim).await;
    nvim.wait_for_line(CHAT, "done · 20 in / 10 out tokens")
        .await;

    nvim.cmd("Agent diff").await;
    let (_, rows) = quickfix(&nvim).await;
    // The link that replaced a directory, the file gone from under it (its path now leads out
    // through the link), and the file turned into a link.
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(
        rows.iter()
            .all(|row| row.ends_with(" (a link: not opened)")),
        "{rows:?}"
    );
    // No file to jump to: `:cnext` cannot open what they point at.
    let bufnrs = nvim
        .lua(
            "return vim.tbl_map(function(i) return i.bufnr end, vim.fn.getqflist())",
            vec![],
        )
        .await;
    assert_eq!(
        bufnrs,
        Value::Array(vec![Value::from(0), Value::from(0), Value::from(0)])
    );

    nvim.cmd("copen").await;
    nvim.lua("vim.api.nvim_win_set_cursor(0, { 3, 0 })", vec![])
        .await;
    nvim.api.input("<CR>").await.unwrap();
    nvim.wait_for("#_G.notes > 0").await;
    let notes = notes(&nvim).await;
    assert_eq!(
        notes,
        ["agent: notes.md is a symbolic link (to ../outside.txt); it is not opened, so nothing is written through it"]
    );
    // The old side alone, read-only; the file it points at is in no buffer.
    let seen = nvim
        .lua(
            &format!(
                "return {{ vim.api.nvim_buf_get_lines(0, 0, -1, false), vim.bo.modifiable, \
                           vim.fn.bufexists('{}') }}",
                outside.display()
            ),
            vec![],
        )
        .await;
    assert_eq!(
        seen,
        Value::Array(vec![
            Value::Array(vec![Value::from("the repo's own notes")]),
            Value::from(false),
            Value::from(0),
        ])
    );
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "someone's dotfile\n"
    );
}

#[tokio::test]
async fn a_file_with_crlf_line_ends_differs_only_where_it_changed() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![edit("t1", "dos.txt", "two", "2")]),
            text("Edited."),
        ],
    );
    let nvim = start(&mock, Some((120, 40)), "", vec![]).await;
    nvim.write("dos.txt", "one\r\ntwo\r\nthree\r\n");
    nvim.cmd("Agent make the edit").await;
    allow(&nvim).await;
    nvim.wait_for_line(CHAT, "done · 20 in / 10 out tokens")
        .await;
    assert_eq!(nvim.read("dos.txt"), "one\r\n2\r\nthree\r\n");
    nvim.cmd("Agent diff").await;
    nvim.cmd("copen").await;
    nvim.api.input("<CR>").await.unwrap();
    nvim.wait_for("vim.wo.diff and vim.api.nvim_buf_get_name(0):find('/dos.txt$') ~= nil")
        .await;
    // The old side reads as the file does; only line 2 differs.
    let seen = nvim
        .lua(
            "local old = vim.fn.bufnr('^agent://checkpoint/') \
             local w = vim.fn.win_findbuf(old)[1] \
             return { vim.api.nvim_buf_get_lines(old, 0, -1, false), \
                      vim.api.nvim_win_call(w, function() \
                        return { vim.fn.diff_hlID(1, 1), vim.fn.diff_hlID(2, 1), vim.fn.diff_hlID(3, 1) } end) }",
            vec![],
        )
        .await;
    let seen = seen.as_array().unwrap();
    assert_eq!(
        seen[0],
        Value::Array(vec![
            Value::from("one"),
            Value::from("two"),
            Value::from("three")
        ])
    );
    let ids: Vec<i64> = seen[1]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!((ids[0], ids[2]), (0, 0), "{ids:?}");
    assert_ne!(ids[1], 0, "{ids:?}");
    // `:diffget` takes the old line back without a CR; written, the file keeps its CRLF ends.
    nvim.cmd("2diffget").await;
    nvim.cmd("write").await;
    assert_eq!(nvim.read("dos.txt"), "one\r\ntwo\r\nthree\r\n");
}

/// `u` on an edit's chat row takes that edit back (the file written again), and refuses,
/// saying which line, once the file changed since.
#[tokio::test]
async fn u_on_an_edits_row_undoes_it_and_refuses_once_the_file_changed() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![edit("t1", "a.txt", "two", "TWO")]),
            turn(vec![edit("t2", "b.txt", "red", "blue")]),
            turn(vec![edit("t3", "c.txt", "plain", "pla\u{202e}in")]),
            text("Edited both."),
        ],
    );
    let nvim = start(&mock, Some((100, 30)), "auto_approve = true", vec![]).await;
    nvim.write("a.txt", "one\ntwo\nthree\n");
    nvim.write("b.txt", "red\ngreen\n");
    nvim.write("c.txt", "plain\n");
    nvim.cmd("Agent change both files").await;
    let lines = nvim.wait_for_line(CHAT, "Edited both.").await;
    assert_eq!(nvim.read("a.txt"), "one\nTWO\nthree\n");
    // The person changes b.txt's edited line afterwards.
    nvim.write("b.txt", "purple\ngreen\n");
    let press_u_on = |row: usize| {
        format!(
            "local win = vim.fn.bufwinid('{CHAT}') vim.api.nvim_set_current_win(win) \
             vim.api.nvim_win_set_cursor(win, {{ {}, 0 }}) \
             vim.api.nvim_feedkeys('u', 'x', false)",
            row + 1
        )
    };
    let row = |start: &str| lines.iter().position(|l| l.starts_with(start)).unwrap();
    nvim.lua(&press_u_on(row("▸ edit a.txt")), vec![]).await;
    assert_eq!(nvim.read("a.txt"), "one\ntwo\nthree\n");
    nvim.lua(&press_u_on(row("▸ edit b.txt")), vec![]).await;
    assert_eq!(nvim.read("b.txt"), "purple\ngreen\n");
    // A diff with a hidden character shows it as an escape: not what the file holds.
    nvim.lua(&press_u_on(row("▸ edit c.txt")), vec![]).await;
    assert_eq!(nvim.read("c.txt"), "pla\u{202e}in\n");
    let said = notes(&nvim).await.join("\n");
    assert!(said.contains("agent: undid the edit of a.txt"), "{said}");
    assert!(
        said.contains(
            "agent: not undone: b.txt changed since this edit (line 1 is no longer what it wrote)"
        ),
        "{said}"
    );
    assert!(
        said.contains("agent: not undone: this edit's diff shows characters as escapes"),
        "{said}"
    );
}
