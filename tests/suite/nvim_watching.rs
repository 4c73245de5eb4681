//! Watching the agent work, in a real Neovim with a UI against the mock model: a
//! running command's newest lines under its row and in the status, its whole output on demand,
//! and follow mode opening what the agent reads and edits.

use rmpv::Value;
use serde_json::json;

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{mock_options, Nvim, Options};

const CHAT: &str = "agent: chat";

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

/// A model that runs `command` as call `t1`, then answers `Ran it.`.
fn one_command(command: &str) -> MockLlm {
    MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![call("t1", "run_bash", json!({ "command": command }))]),
            turn(vec![Part::Text("Ran it.".into())]),
        ],
    )
}

async fn start(mock: &MockLlm, extra: &str) -> Nvim {
    start_at(mock, (100, 30), extra).await
}

/// [`start`] on an 80x24 screen, where the chat gets 40 columns.
async fn start_small(mock: &MockLlm, extra: &str) -> Nvim {
    start_at(mock, (80, 24), extra).await
}

async fn start_at(mock: &MockLlm, ui: (i64, i64), extra: &str) -> Nvim {
    Nvim::start(Options {
        ui: Some(ui),
        ..mock_options(mock, extra)
    })
    .await
}

/// The chat's lines from the row that starts with `row` on, `n` of them.
fn from_row(lines: &[String], row: &str, n: usize) -> Vec<String> {
    let at = lines
        .iter()
        .position(|l| l.starts_with(row))
        .unwrap_or_else(|| panic!("no row {row:?} in:\n{}", lines.join("\n")));
    lines[at..(at + n).min(lines.len())].to_vec()
}

async fn statusline(nvim: &Nvim) -> String {
    nvim.lua("return require('agent').statusline()", vec![])
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_running_command_shows_its_newest_lines_under_its_row_then_its_exit() {
    // A line, then a wait for this test's go-ahead, three times over; stderr interleaved.
    let command = "for i in 1 2 3 4 5 6; do echo \"line $i\"; [ $i = 2 ] && echo \"warn $i\" >&2; \
                   while [ ! -e go$i ]; do sleep 0.02; done; done; exit 4";
    let mock = one_command(command);
    let nvim = start(&mock, "auto_approve = true, live_lines = 3").await;
    nvim.cmd("Agent run the tests").await;

    let lines = nvim.wait_for_line(CHAT, "  line 1").await;
    assert_eq!(
        from_row(&lines, "… running run_bash", 2)[1],
        "  line 1",
        "{lines:?}"
    );
    // What a person sees: the line on the screen, under the row, not folded away.
    nvim.wait_for_screen("  line 1").await;
    assert!(statusline(&nvim).await.ends_with(" · line 1"));

    nvim.write("go1", "");
    let lines = nvim.wait_for_line(CHAT, "  warn 2").await;
    let live = from_row(&lines, "… running run_bash", 4);
    assert_eq!(live[1..], ["  line 1", "  line 2", "  warn 2"], "{lines:?}");

    for i in 2..=4 {
        nvim.write(&format!("go{i}"), "");
    }
    // Only the newest `live_lines` (3) are shown: line 1 has gone.
    let lines = nvim.wait_for_line(CHAT, "  line 5").await;
    let live = from_row(&lines, "… running run_bash", 4);
    assert_eq!(live[1..], ["  line 3", "  line 4", "  line 5"], "{lines:?}");
    nvim.wait_for_screen("  line 5").await;
    assert!(
        statusline(&nvim)
            .await
            .starts_with("agent: running for i in"),
        "{}",
        statusline(&nvim).await
    );
    assert!(statusline(&nvim).await.ends_with(" · line 5"));
    let winbar = nvim
        .lua(
            "return vim.wo[vim.fn.bufwinid('agent: chat')].winbar",
            vec![],
        )
        .await;
    assert!(
        winbar.as_str().unwrap_or_default().contains(" · line 5"),
        "{winbar:?}"
    );

    nvim.write("go5", "");
    nvim.write("go6", "");
    let lines = nvim.wait_for_line(CHAT, "Ran it.").await;
    // The live lines gave way to the finished row and its whole output, folded under it.
    let row = from_row(&lines, "▸ $ for i in", 1);
    assert!(row[0].ends_with("-> exit 4"), "{lines:?}");
    let screen = nvim.wait_for_screen("Ran it.").await;
    assert!(!screen.contains("  line 5"), "{screen}");
    let output = from_row(&lines, "▸ $ for i in", 10);
    assert!(output.contains(&"  line 6".to_string()), "{lines:?}");
    assert!(output.contains(&"  warn 2".to_string()), "{lines:?}");
    assert!(statusline(&nvim).await.starts_with("agent: idle"));
    // The model read the whole output once, not the live lines.
    let (result, _) = crate::support::tool_result(&mock, 1, "t1");
    assert!(
        result.contains("line 1\n") && result.contains("line 6\n"),
        "{result}"
    );
    assert!(result.contains("[exit 4]"), "{result}");
    // Nothing of the live lines is saved: the session file, once it holds the answer, holds
    // the finished row and no tool_progress.
    let saved = "table.concat(vim.fn.readfile(vim.fn.glob(vim.env.XDG_STATE_HOME .. '/**/sessions/**/*.jsonl', true, true)[1] or '/nonexistent'), '\\n')";
    nvim.wait_for(&format!(
        "pcall(function() return {saved} end) and ({saved}):find('Ran it.', 1, true)"
    ))
    .await;
    let saved = nvim.lua(&format!("return {saved}"), vec![]).await;
    let saved = saved.as_str().unwrap_or_default().to_string();
    assert!(saved.contains("tool_finished"), "{saved}");
    assert!(!saved.contains("tool_progress"), "{saved}");
}

#[tokio::test]
async fn the_output_key_opens_a_finished_commands_whole_output_as_the_model_read_it() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![
                call(
                    "t1",
                    "run_bash",
                    json!({ "command": "seq 1 8000; echo oops >&2; exit 2" }),
                ),
                call("t2", "run_bash", json!({ "command": "true" })),
            ]),
            turn(vec![Part::Text("Counted.".into())]),
        ],
    );
    let nvim = start(&mock, "auto_approve = true").await;
    nvim.cmd("Agent count").await;
    let lines = nvim.wait_for_line(CHAT, "Counted.").await;
    let (model_read, _) = crate::support::tool_result(&mock, 1, "t1");
    assert!(model_read.contains(" chars cut ...]"), "{model_read}");

    // Off a row (on the answer): said, and nothing opens.
    let empty = lines.iter().position(|l| l == "Counted.").unwrap();
    nvim.lua(
        "local win = vim.fn.bufwinid('agent: chat') vim.api.nvim_set_current_win(win) \
         vim.api.nvim_win_set_cursor(win, { ..., 0 })",
        vec![Value::from(empty as i64 + 1)],
    )
    .await;
    nvim.lua("vim.api.nvim_feedkeys('gO', 'x', false)", vec![])
        .await;
    let said = nvim.messages().await;
    assert!(
        said.contains("agent: `gO` works on a finished row (▸ or ✗)"),
        "{said:?}"
    );
    assert_eq!(current_name(&nvim).await, CHAT);

    let row = lines
        .iter()
        .position(|l| l.starts_with("▸ $ seq 1 8000"))
        .unwrap();
    nvim.lua(
        "vim.api.nvim_win_set_cursor(0, { ..., 0 })",
        vec![Value::from(row as i64 + 1)],
    )
    .await;
    nvim.lua("vim.api.nvim_feedkeys('gO', 'x', false)", vec![])
        .await;
    assert_eq!(current_name(&nvim).await, "agent://output/1");
    let shown = nvim.buffer_lines("agent://output/1").await.join("\n");
    assert_eq!(shown, model_read.trim_end_matches('\n'));
    let flags = nvim
        .lua(
            "return { vim.bo.modifiable, vim.bo.readonly, vim.bo.buftype, \
                      vim.fn.bufwinid('agent: chat') ~= vim.api.nvim_get_current_win() }",
            vec![],
        )
        .await;
    assert_eq!(
        flags,
        Value::Array(vec![
            false.into(),
            true.into(),
            "nofile".into(),
            true.into()
        ])
    );
    // Searchable: `/` finds the cut marker and the command's stderr.
    nvim.lua(
        "vim.fn.setreg('/', 'chars cut') vim.cmd('normal! gg0n')",
        vec![],
    )
    .await;
    let at = nvim.lua("return vim.fn.getline('.')", vec![]).await;
    assert!(
        at.as_str().unwrap_or_default().contains(" chars cut ...]"),
        "{at:?}"
    );
    assert!(
        shown.ends_with("8000\n[stderr]\noops\n\n[exit 2]"),
        "{shown}"
    );
}

async fn current_name(nvim: &Nvim) -> String {
    nvim.lua("return vim.fn.bufname('%')", vec![])
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `n` lines `line 1` … `line n`.
fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

/// The cursor (row, col) and top line of window `win` (a Lua expression), and its buffer's name.
async fn view(nvim: &Nvim, win: &str) -> (Value, String) {
    let at = nvim
        .lua(
            &format!(
                "local win = {win} return {{ vim.api.nvim_win_get_cursor(win)[1], \
                 vim.api.nvim_win_get_cursor(win)[2], vim.fn.getwininfo(win)[1].topline }}"
            ),
            vec![],
        )
        .await;
    let name = nvim
        .lua(
            &format!("return vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf({win}))"),
            vec![],
        )
        .await;
    (at, name.as_str().unwrap_or_default().to_string())
}

const INPUT_WIN: &str = "vim.fn.bufwinid('agent: input')";
/// The window that is neither the chat's nor the input's.
const CODE_WIN: &str = "(function() for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do \
    local name = vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(w)) \
    if not name:find('agent://', 1, true) then return w end end end)()";

#[tokio::test]
async fn follow_mode_opens_a_read_file_at_its_top_and_an_edit_at_its_change_without_moving_the_persons_cursor(
) {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![call("t1", "read_file", json!({ "path": "a.txt" }))]),
            turn(vec![Part::Text("Read.".into())]),
            turn(vec![call(
                "t2",
                "edit_file",
                json!({ "path": "b.txt", "old_str": "line 30\n", "new_str": "LINE 30\nLINE 30b\n" }),
            )]),
            turn(vec![Part::Text("Edited.".into())]),
            turn(vec![call("t3", "read_file", json!({ "path": "a.txt" }))]),
            turn(vec![Part::Text("Read again.".into())]),
        ],
    );
    let nvim = start(&mock, "auto_approve = true, follow = true").await;
    nvim.write("a.txt", &numbered(60));
    nvim.write("b.txt", &numbered(60));
    // The person has a.txt open far down, then types in the input.
    nvim.cmd("edit a.txt | 45").await;
    nvim.cmd("Agent").await;
    nvim.lua(
        &format!(
            "vim.api.nvim_set_current_win({INPUT_WIN}) \
             vim.api.nvim_buf_set_lines(0, 0, -1, false, {{ 'half a thought' }}) \
             vim.api.nvim_win_set_cursor(0, {{ 1, 6 }})"
        ),
        vec![],
    )
    .await;
    let (before, _) = view(&nvim, CODE_WIN).await;
    assert_eq!(before.as_array().unwrap()[0], Value::from(45));

    nvim.lua("require('agent').ask('read a.txt')", vec![]).await;
    nvim.wait_for_line(CHAT, "Read.").await;
    let (code, name) = view(&nvim, CODE_WIN).await;
    assert!(name.ends_with("/a.txt"), "{name}");
    assert_eq!(code, Value::Array(vec![1.into(), 0.into(), 1.into()]));
    // The person's window and cursor are where they were.
    let (input, name) = view(&nvim, "vim.api.nvim_get_current_win()").await;
    assert!(name.ends_with("/agent: input"), "{name}");
    assert_eq!(
        input.as_array().unwrap()[..2],
        [Value::from(1), Value::from(6)]
    );

    nvim.lua("require('agent').ask('edit b.txt')", vec![]).await;
    nvim.wait_for_line(CHAT, "Edited.").await;
    let (code, name) = view(&nvim, CODE_WIN).await;
    assert!(name.ends_with("/b.txt"), "{name}");
    // At the first changed line, at the top of the window, the two new lines highlighted.
    assert_eq!(code, Value::Array(vec![30.into(), 0.into(), 30.into()]));
    let marks = "#vim.api.nvim_buf_get_extmarks(vim.api.nvim_win_get_buf(CODE), \
                 vim.api.nvim_create_namespace('agent.follow'), 0, -1, {})"
        .replace("CODE", CODE_WIN);
    let flash = nvim
        .lua(
            &format!(
                "local m = vim.api.nvim_buf_get_extmarks(vim.api.nvim_win_get_buf({CODE_WIN}), \
                 vim.api.nvim_create_namespace('agent.follow'), 0, -1, {{ details = true }})[1] \
                 return {{ m[2], m[4].end_row, m[4].hl_group }}"
            ),
            vec![],
        )
        .await;
    assert_eq!(
        flash,
        Value::Array(vec![29.into(), 31.into(), "AgentFollowed".into()])
    );
    let lines = nvim
        .lua(
            &format!("return vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf({CODE_WIN}), 28, 32, false)"),
            vec![],
        )
        .await;
    assert_eq!(
        lines,
        Value::Array(vec![
            "line 29".into(),
            "LINE 30".into(),
            "LINE 30b".into(),
            "line 31".into()
        ])
    );
    // For a moment only.
    nvim.wait_for(&format!("{marks} == 0")).await;
    let (input, name) = view(&nvim, "vim.api.nvim_get_current_win()").await;
    assert!(name.ends_with("/agent: input"), "{name}");
    assert_eq!(
        input.as_array().unwrap()[..2],
        [Value::from(1), Value::from(6)]
    );

    // Off (:Agent follow toggles it): a read opens nothing.
    nvim.cmd("Agent follow").await;
    assert!(nvim.messages().await.contains("agent: follow off"));
    nvim.lua("require('agent').ask('read a.txt again')", vec![])
        .await;
    nvim.wait_for_line(CHAT, "Read again.").await;
    let (_, name) = view(&nvim, CODE_WIN).await;
    assert!(name.ends_with("/b.txt"), "{name}");
}

#[tokio::test]
async fn follow_mode_opens_an_external_agents_location_and_nothing_outside_the_workspace() {
    use agent_nvim::acp::{AgentUpdate, Location};
    use agent_nvim::agent::Event;
    use agent_nvim::front::nvim::for_lua;
    use agent_nvim::front::nvim::protocol::{lua, UiEvent};

    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = start(&mock, "follow = true").await;
    nvim.write("src/lib.rs", &numbered(50));
    let root = nvim
        .lua("return vim.uv.fs_realpath(vim.fn.getcwd())", vec![])
        .await;
    let root = root.as_str().unwrap().to_string();
    nvim.cmd("Agent").await;
    nvim.wait_for("require('agent.rpc').info() ~= nil").await;
    nvim.lua(
        &format!("vim.api.nvim_set_current_win({INPUT_WIN})"),
        vec![],
    )
    .await;
    let located = |path: String, line| {
        UiEvent::Update(AgentUpdate::Locations {
            id: "c1".into(),
            kind: "edit".into(),
            locations: vec![Location { path, line }],
        })
    };
    let events = vec![
        UiEvent::Agent(Event::TurnStarted),
        located("/etc/hostname".into(), None),
        located(format!("{root}/src/lib.rs"), Some(20)),
    ];
    nvim.lua(lua::RECEIVE, vec![Value::Array(for_lua(events))])
        .await;
    let (code, name) = view(&nvim, CODE_WIN).await;
    assert_eq!(name, format!("{root}/src/lib.rs"));
    assert_eq!(code, Value::Array(vec![20.into(), 0.into(), 20.into()]));
    let (_, name) = view(&nvim, "vim.api.nvim_get_current_win()").await;
    assert!(name.ends_with("/agent: input"), "{name}");
    // A path outside the workspace, and a FIFO inside it (its read would block Neovim), are
    // not opened.
    let fifo = format!("{root}/pipe");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    nvim.lua(
        lua::RECEIVE,
        vec![Value::Array(for_lua(vec![
            located("/etc/hostname".into(), None),
            located(fifo, None),
        ]))],
    )
    .await;
    let (_, name) = view(&nvim, CODE_WIN).await;
    assert_eq!(name, format!("{root}/src/lib.rs"));
    // A window whose buffer has unsaved changes is never replaced (with 'autowrite' that would
    // write them): nothing opens, and the change is still there, unsaved.
    nvim.write("other.rs", &numbered(5));
    nvim.lua(
        &format!(
            "vim.o.autowrite = true vim.o.hidden = false              vim.api.nvim_buf_set_lines(vim.api.nvim_win_get_buf({CODE_WIN}), 0, 1, false, {{ 'unsaved' }})"
        ),
        vec![],
    )
    .await;
    nvim.lua(
        lua::RECEIVE,
        vec![Value::Array(for_lua(vec![located(
            format!("{root}/other.rs"),
            Some(2),
        )]))],
    )
    .await;
    let (_, name) = view(&nvim, CODE_WIN).await;
    assert_eq!(name, format!("{root}/src/lib.rs"));
    assert_eq!(nvim.read("src/lib.rs"), numbered(50));
    let modified = nvim
        .lua(
            &format!("return vim.bo[vim.api.nvim_win_get_buf({CODE_WIN})].modified"),
            vec![],
        )
        .await;
    assert_eq!(modified, Value::from(true));
    // And the buffer it would have opened was not left behind.
    let listed = nvim
        .lua(&format!("return vim.fn.bufnr('{root}/other.rs')"), vec![])
        .await;
    assert_eq!(listed, Value::from(-1));
}

#[tokio::test]
async fn the_statusline_shows_a_percent_sign_a_command_printed_as_text_never_as_format() {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = start(&mock, "").await;
    // What a running command's row would leave in the status: its command and last line.
    let shown = nvim
        .lua(
            "local s = require('agent.chat.status') \
             s.current.prompted, s.current.state = true, 'running' \
             s.current.command, s.current.since = 'echo 100%', vim.uv.now() \
             s.current.last_line = \"50%{execute('qa!')}\" \
             local line = require('agent').statusline() \
             return { line, vim.api.nvim_eval_statusline(line, {}).str }",
            vec![],
        )
        .await;
    let shown = shown.as_array().unwrap();
    assert_eq!(
        shown[0],
        Value::from("agent: running echo 100%% 0s · 50%%{execute('qa!')}")
    );
    assert_eq!(
        shown[1],
        Value::from("agent: running echo 100% 0s · 50%{execute('qa!')}")
    );
}

#[tokio::test]
async fn a_chat_following_the_end_shows_its_top_again_when_the_live_lines_give_way() {
    let mock = one_command("seq -f 'l%g' 1 20; while [ ! -e go ]; do sleep 0.02; done");
    let nvim = start_small(&mock, "auto_approve = true, live_lines = 20").await;
    nvim.cmd("Agent count").await;
    nvim.wait_for_line(CHAT, "  l20").await;
    let top = "vim.fn.getwininfo(vim.fn.bufwinid('agent: chat'))[1].topline";
    // Twenty live lines do not fit: the chat follows their end, its top scrolled away.
    nvim.wait_for(&format!("{top} > 1")).await;
    nvim.write("go", "");
    nvim.wait_for_line(CHAT, "Ran it.").await;
    // Folded, the turn fits again, and the window shows it from its top, not rows of nothing.
    nvim.wait_for(&format!("{top} == 1")).await;
    nvim.wait_for_screen("## You").await;
}

#[tokio::test]
async fn a_live_line_wider_than_the_chat_is_cut_to_it_and_whole_once_the_command_ends() {
    let mock =
        one_command("printf 'w%.0s' $(seq 300); echo; while [ ! -e go ]; do sleep 0.02; done");
    let nvim = start(&mock, "auto_approve = true").await;
    nvim.cmd("Agent wide").await;
    let lines = nvim.wait_for_line(CHAT, "  www").await;
    let live = from_row(&lines, "… running run_bash", 2)[1].clone();
    let width = nvim
        .lua(
            "return vim.api.nvim_win_get_width(vim.fn.bufwinid('agent: chat'))",
            vec![],
        )
        .await
        .as_i64()
        .unwrap() as usize;
    assert!(live.ends_with('…'), "{live}");
    assert!(live.chars().count() < width, "{live} in {width}");
    nvim.write("go", "");
    let lines = nvim.wait_for_line(CHAT, "Ran it.").await;
    let output = from_row(&lines, "▸ $ printf", 2);
    assert_eq!(output[1], format!("  {}", "w".repeat(300)));
}

#[tokio::test]
async fn a_narrow_chat_still_shows_how_a_long_command_ended() {
    let mock = one_command("echo 'a command line long enough to be wider than the chat'; exit 3");
    // 80 columns: the chat gets 40 (the other windows keep 40).
    let nvim = start_small(&mock, "auto_approve = true").await;
    nvim.cmd("Agent go").await;
    nvim.wait_for_line(CHAT, "Ran it.").await;
    let width = nvim
        .lua(
            "return vim.api.nvim_win_get_width(vim.fn.bufwinid('agent: chat'))",
            vec![],
        )
        .await;
    assert_eq!(width, Value::from(40));
    // The closed fold keeps the row's end, the exit code, and cuts its middle.
    let screen = nvim.wait_for_screen("… -> exit 3").await;
    assert!(screen.contains("▸ $ echo 'a command"), "{screen}");
    let highlight = nvim
        .lua(
            "local win = vim.fn.bufwinid('agent: chat') \
             return vim.api.nvim_win_call(win, function() \
               for row = 1, vim.api.nvim_buf_line_count(0) do \
                 if vim.fn.foldclosed(row) == row then \
                   vim.v.foldstart = row return require('agent.chat.render').foldtext()[1][2] end end end)",
            vec![],
        )
        .await;
    assert_eq!(highlight, Value::from("AgentToolExit"));
}

#[tokio::test]
async fn a_narrow_chats_winbar_quotes_less_of_the_command_to_show_its_last_line() {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = start_small(&mock, "").await;
    nvim.cmd("Agent").await;
    let winbar = nvim
        .lua(
            "local s = require('agent.chat.status') \
             s.current.prompted, s.current.state = true, 'running' \
             s.current.command = 'cargo test --workspace --all-features -- --nocapture' \
             s.current.since, s.current.last_line = vim.uv.now(), 'test parse ... ok' \
             s.render() \
             return vim.wo[vim.fn.bufwinid('agent: chat')].winbar",
            vec![],
        )
        .await;
    let winbar = winbar.as_str().unwrap_or_default().to_string();
    assert!(
        winbar.starts_with(" running `cargo test -…` 0s · test parse"),
        "{winbar}"
    );
}
