//! The chat writes a batch of events into a document first and puts it into the buffer at the
//! batch's end (lua/agent/chat/render.lua). What a person sees must not depend on how the events
//! were cut into batches: one event a batch (a slow live stream), a few a batch, or all of them
//! in one (a resumed conversation) give the same lines, highlights and folds.

use agent_nvim::acp::{AgentUpdate, PlanEntry};
use agent_nvim::agent::{Event, Outcome};
use agent_nvim::approval::Decision;
use agent_nvim::front::nvim::for_lua;
use agent_nvim::front::nvim::protocol::{lua, UiEvent};
use rmpv::Value;

use crate::support::nvim::{setup_lua, Nvim, Options};

fn tool_started(id: &str, name: &str) -> UiEvent {
    UiEvent::Agent(Event::ToolStarted {
        id: id.into(),
        name: name.into(),
        args: serde_json::json!({ "path": "a.txt" }),
    })
}

fn tool_finished(id: &str, ok: bool, output: &str) -> UiEvent {
    UiEvent::Agent(Event::ToolFinished {
        id: id.into(),
        name: "read_file".into(),
        ok,
        summary: format!("read_file {id}"),
        output: output.into(),
        diff: None,
    })
}

fn text(s: &str) -> UiEvent {
    UiEvent::Agent(Event::Text { text: s.into() })
}

/// Two turns with the rows a chat holds: text around tool rows (one refused, one failed, one
/// without output), a decision, an external agent's tool call updated after later text (its
/// row is then no longer the last thing written), a thought that grows over several events, a
/// plan replaced by a newer one, a retry, an error and the turns' ends; then a rewind's cut and
/// a turn after it.
fn conversation() -> Vec<UiEvent> {
    vec![
        UiEvent::Prompt {
            text: "read the files\nand tell me".into(),
        },
        UiEvent::Agent(Event::TurnStarted),
        text("Let me look"),
        text(" at **them**:\n\n```lua\nlocal x = 1\n"),
        text("```\n"),
        tool_started("t1", "read_file"),
        UiEvent::decided(0, "read_file".into(), Decision::AllowOnce),
        tool_finished("t1", true, "line one\n\nline three\r\nline four\n"),
        tool_started("t2", "edit_file"),
        UiEvent::decided(
            0,
            "edit_file".into(),
            Decision::Refuse {
                reason: Some("not that one".into()),
            },
        ),
        tool_finished("t2", false, "refused: not that one"),
        tool_started("t3", "list_files"),
        tool_finished("t3", true, ""),
        text("Done with the `first` part."),
        UiEvent::Agent(Event::Usage {
            input: 120,
            output: 30,
            cached: 0,
            cost: None,
        }),
        UiEvent::Agent(Event::TurnDone {
            input: 120,
            output: 30,
            outcome: Outcome::Done,
            message: "done".into(),
            cost: None,
        }),
        // Its done row offers the diff of what it changed (a key and a hint after the row).
        UiEvent::Reviewable {
            checkpoint: "0123456789abcdef".into(),
            files: 2,
            prompt: None,
            of: None,
        },
        UiEvent::Prompt {
            text: "now the agent".into(),
        },
        UiEvent::Agent(Event::TurnStarted),
        UiEvent::Update(AgentUpdate::Thought {
            text: "First I think".into(),
        }),
        UiEvent::Update(AgentUpdate::Thought {
            text: " about it,\nthen".into(),
        }),
        UiEvent::Update(AgentUpdate::Thought {
            text: " decide.".into(),
        }),
        tool_started("a1", "run_bash"),
        UiEvent::Update(AgentUpdate::ToolUpdated {
            id: "a1".into(),
            title: "Run ls".into(),
            status: "in_progress".into(),
            kind: "execute".into(),
            output: "a\nb".into(),
            running: false,
        }),
        text("While it runs: "),
        UiEvent::Update(AgentUpdate::ToolUpdated {
            id: "a1".into(),
            title: "Run ls".into(),
            status: "completed".into(),
            kind: "execute".into(),
            output: "a\nb\nc\nd".into(),
            running: false,
        }),
        text("more text.\n"),
        UiEvent::Update(AgentUpdate::Plan {
            entries: vec![PlanEntry {
                content: "Read".into(),
                status: "in_progress".into(),
                priority: "high".into(),
            }],
        }),
        UiEvent::Update(AgentUpdate::Plan {
            entries: vec![
                PlanEntry {
                    content: "Read".into(),
                    status: "completed".into(),
                    priority: "high".into(),
                },
                PlanEntry {
                    content: "Write".into(),
                    status: "pending".into(),
                    priority: "low".into(),
                },
            ],
        }),
        UiEvent::Agent(Event::Retrying {
            attempt: 1,
            delay_ms: 500,
            reason: "overloaded".into(),
        }),
        tool_started("t4", "read_file"),
        tool_finished("t4", true, "x\ny\n"),
        UiEvent::error("agent: the server hung up"),
        UiEvent::Agent(Event::TurnDone {
            input: 300,
            output: 60,
            outcome: Outcome::Failed,
            message: "agent: the server hung up".into(),
            cost: None,
        }),
        // A resumed conversation's cut (the handler reads the buffer back), then a new turn.
        UiEvent::Rewound {
            turn: 2,
            cut: true,
            message: None,
            prompt: None,
        },
        UiEvent::Prompt {
            text: "again".into(),
        },
        UiEvent::Agent(Event::TurnStarted),
        text("Fresh start."),
        UiEvent::Agent(Event::TurnDone {
            input: 1,
            output: 1,
            outcome: Outcome::Done,
            message: "done".into(),
            cost: None,
        }),
    ]
}

/// What a person sees of the chat: its lines, its highlights (row, column, end row, end column,
/// group; the markdown's too) and, for each line of the chat window, where the closed fold around it starts and
/// ends (-1 when it is not folded).
const SEEN: &str = r#"
local buf = vim.fn.bufnr('agent: chat')
local win = vim.fn.win_findbuf(buf)[1]
local hls = {}
local marks = vim.api.nvim_buf_get_extmarks(buf, vim.api.nvim_create_namespace('agent.chat'), 0, -1, { details = true })
vim.list_extend(marks, vim.api.nvim_buf_get_extmarks(buf, vim.api.nvim_create_namespace('agent.chat.markdown'), 0, -1, { details = true }))
for _, m in ipairs(marks) do
  local d = m[4]
  if d.virt_text then
    hls[#hls + 1] = ('%d:%d virt %s'):format(m[2], m[3], d.virt_text[1][1])
  else
    hls[#hls + 1] = ('%d:%d-%d:%d %s'):format(m[2], m[3], d.end_row, d.end_col, d.hl_group)
  end
end
table.sort(hls)
local folds = vim.api.nvim_win_call(win, function()
  local out = {}
  for lnum = 1, vim.api.nvim_buf_line_count(buf) do
    out[#out + 1] = ('%d:%d,%d'):format(lnum, vim.fn.foldclosed(lnum), vim.fn.foldclosedend(lnum))
  end
  return out
end)
return { lines = vim.api.nvim_buf_get_lines(buf, 0, -1, true), hls = hls, folds = folds }
"#;

/// Sends the chat `events` in batches of `size`, the way the pump does.
async fn receive_in_batches(nvim: &Nvim, events: &[UiEvent], size: usize) {
    for batch in events.chunks(size) {
        nvim.lua(lua::RECEIVE, vec![Value::Array(for_lua(batch.to_vec()))])
            .await;
    }
}

/// Empties the chat, sends it `events` in batches of `size` the way the pump does, and reads back
/// what it shows.
async fn shown_in_batches(nvim: &Nvim, events: &[UiEvent], size: usize) -> Value {
    nvim.lua(
        "require('agent.chat').clear(true) require('agent.chat').open()",
        vec![],
    )
    .await;
    receive_in_batches(nvim, events, size).await;
    let problems = nvim
        .lua("return require('agent.rpc').problems()", vec![])
        .await;
    assert_eq!(problems, Value::Array(vec![]), "the chat raised");
    nvim.lua(SEEN, vec![]).await
}

#[tokio::test]
async fn the_chat_looks_the_same_however_its_events_were_batched() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: setup_lua(""),
    })
    .await;
    let events = conversation();
    let one_by_one = shown_in_batches(&nvim, &events, 1).await;
    let lines = one_by_one["lines"].as_array().unwrap();
    let text: Vec<&str> = lines.iter().map(|l| l.as_str().unwrap()).collect();
    // What the person reads, one event a batch (each written to the buffer as it comes).
    for expected in [
        "## You",
        "read the files",
        "▸ read_file t1 · allowed once",
        "  line one",
        "  line three",
        "✗ read_file t2 · refused: not that one",
        "▸ read_file t3",
        "… thought (2 lines)",
        "  First I think about it,",
        "… Run ls (completed)",
        "  d",
        "- [x] Read",
        "- [ ] Write",
        "agent: the server hung up",
        "rewound to before prompt 2: the model no longer sees what follows",
        "Fresh start.",
    ] {
        assert!(text.contains(&expected), "{expected:?} not in {text:#?}");
    }
    // The first turn's done row offers its diff.
    let done = text.iter().position(|l| *l == "done").unwrap();
    let hint = format!("{done}:0 virt   d: diff (2 files changed)");
    assert!(
        one_by_one["hls"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h.as_str() == Some(&hint)),
        "{hint:?} not in {:#?}",
        one_by_one["hls"]
    );
    // The empty line in t1's output stays empty, not two spaces.
    let at = text.iter().position(|l| *l == "  line one").unwrap();
    assert_eq!(text[at + 1], "");
    // The tool rows with output are folded closed, their output hidden under the row.
    let folds: Vec<&str> = one_by_one["folds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    let row = text
        .iter()
        .position(|l| *l == "▸ read_file t1 · allowed once")
        .unwrap()
        + 1;
    assert_eq!(folds[row - 1], format!("{row}:{row},{}", row + 4));
    for size in [2, 3, 7, events.len()] {
        let batched = shown_in_batches(&nvim, &events, size).await;
        assert_eq!(
            batched["lines"], one_by_one["lines"],
            "lines differ with batches of {size}"
        );
        assert_eq!(
            batched["hls"], one_by_one["hls"],
            "highlights differ with batches of {size}"
        );
        assert_eq!(
            batched["folds"], one_by_one["folds"],
            "folds differ with batches of {size}"
        );
    }
}

/// A resumed conversation comes in two passes (src/front/nvim/replay.rs): each tool as one
/// `tool_finished` row carrying its decision, every row first, then the outputs, each put
/// under its row. The chat ends up as the live one looked, however the passes were batched (a
/// row folded live may sit right below one whose output comes later).
#[tokio::test]
async fn a_resumed_chat_with_outputs_after_its_rows_looks_as_the_live_one_did() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: setup_lua(""),
    })
    .await;
    let turn = |rows: Vec<UiEvent>| {
        let mut events = vec![
            UiEvent::Prompt {
                text: "read the files".into(),
            },
            UiEvent::Agent(Event::TurnStarted),
            text("Let me look.\n"),
        ];
        events.extend(rows);
        events.push(text("Done."));
        events.push(UiEvent::Agent(Event::TurnDone {
            input: 1,
            output: 1,
            outcome: Outcome::Done,
            message: "done".into(),
            cost: None,
        }));
        events
    };
    let live = turn(vec![
        tool_started("t1", "read_file"),
        UiEvent::decided(0, "read_file".into(), Decision::AllowOnce),
        tool_finished("t1", true, "line one\n\nline three\n"),
        tool_started("t2", "read_file"),
        tool_finished("t2", false, "no such file"),
        tool_started("t3", "list_files"),
        tool_finished("t3", true, ""),
    ]);
    let replayed = |id: &str, ok, note: Option<&str>, later| UiEvent::Replayed {
        id: id.into(),
        name: "read_file".into(),
        ok,
        summary: format!("read_file {id}"),
        started: true,
        note: note.map(str::to_string),
        later,
    };
    // t2 as a live row, already folded when t1's output goes in right above it (lines put just
    // before a fold would join it).
    let mut resumed = turn(vec![
        replayed("t1", true, Some("allowed once"), Some(0)),
        tool_started("t2", "read_file"),
        tool_finished("t2", false, "no such file"),
        replayed("t3", true, None, None),
    ]);
    let rows = resumed.len();
    resumed.push(UiEvent::ToolOutput {
        later: 0,
        output: "line one\n\nline three\n".into(),
        diff: None,
    });
    let seen_live = shown_in_batches(&nvim, &live, 1).await;

    // Between the passes: every row is there, t1's without its output yet.
    let between = shown_in_batches(&nvim, &resumed[..rows], rows).await;
    let lines: Vec<&str> = between["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let t1 = lines
        .iter()
        .position(|l| *l == "▸ read_file t1 · allowed once")
        .unwrap();
    assert_eq!(lines[t1 + 1], "✗ read_file t2", "{lines:#?}");
    assert!(lines.contains(&"▸ read_file t3") && lines.contains(&"done"));

    for size in [1, 2, rows, resumed.len()] {
        let seen = shown_in_batches(&nvim, &resumed, size).await;
        for what in ["lines", "hls", "folds"] {
            assert_eq!(
                seen[what], seen_live[what],
                "{what} differ with batches of {size}"
            );
        }
    }
}

/// A Neovim with an 80x24 UI whose chat shows a resumed turn of 40 rows (`File {i}:`, then
/// `read f{i}.txt`) and its end, in one batch; and the rows' outputs of 30 lines each, to send.
async fn forty_rows_shown() -> (Nvim, Vec<UiEvent>) {
    let nvim = Nvim::start(Options {
        ui: Some((80, 24)),
        env: vec![],
        setup: setup_lua(""),
    })
    .await;
    let mut events = vec![
        UiEvent::Prompt {
            text: "read them all".into(),
        },
        UiEvent::Agent(Event::TurnStarted),
    ];
    for i in 0..40 {
        events.push(text(&format!("File {i}:\n")));
        events.push(UiEvent::Replayed {
            id: format!("r{i}"),
            name: "read_file".into(),
            ok: true,
            summary: format!("read f{i}.txt"),
            started: true,
            note: None,
            later: Some(i),
        });
    }
    events.push(UiEvent::Agent(Event::TurnDone {
        input: 1,
        output: 1,
        outcome: Outcome::Done,
        message: "done".into(),
        cost: None,
    }));
    shown_in_batches(&nvim, &events, events.len()).await;
    let outputs = (0..40)
        .map(|i| UiEvent::ToolOutput {
            later: i,
            output: "a line of output\n".repeat(30),
            diff: None,
        })
        .collect();
    (nvim, outputs)
}

/// What a person sees of the chat window's view: the text of its top line and of the cursor's
/// line, and the cursor's column.
const VIEW: &str = "local win = vim.fn.win_findbuf(vim.fn.bufnr('agent: chat'))[1] \
    return vim.api.nvim_win_call(win, function() \
      local view = vim.fn.winsaveview() \
      return { vim.fn.getline(view.topline), vim.fn.getline(view.lnum), view.col } \
    end)";

/// The outputs of a resumed chat go in above what a window following the chat shows: the
/// window must still end with the chat's last line at its bottom, not keep its old top line
/// (which the new folds would pull up to the end, leaving the window nearly empty).
#[tokio::test]
async fn a_window_following_a_resumed_chat_still_ends_at_its_bottom_once_the_outputs_are_in() {
    // The rows in one batch, the outputs in batches of 8, as the pump would cut them.
    let (nvim, outputs) = forty_rows_shown().await;
    receive_in_batches(&nvim, &outputs, 8).await;
    let seen = nvim
        .lua(
            "local win = vim.fn.win_findbuf(vim.fn.bufnr('agent: chat'))[1] \
             return vim.api.nvim_win_call(win, function() \
               local info = vim.fn.getwininfo(win)[1] \
               return { vim.fn.winline(), info.height, \
                        vim.fn.line('.') == vim.fn.line('$'), vim.fn.foldclosed(vim.fn.line('$') - 2) } \
             end)",
            vec![],
        )
        .await;
    let seen: Vec<i64> = seen
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap_or(v.as_bool().map_or(-9, i64::from)))
        .collect();
    // The cursor (on the last line) is on the window's last screen line, the window full.
    assert_eq!(seen[0], seen[1], "{seen:?}");
    assert_eq!(seen[2], 1, "{seen:?}");
    let screen = nvim.wait_for_screen("read f39.txt").await;
    assert!(screen.contains("read f34.txt"), "{screen}");
}

/// While the outputs go in, the chat's windows have their cursors moved out of the way (so
/// Neovim does not work out each one's top line again after every output): a person reading
/// the middle of the chat must still see the same lines, with the cursor where it was, even on a
/// row whose own output goes in under it.
#[tokio::test]
async fn a_window_reading_the_middle_of_a_resumed_chat_keeps_its_view_while_the_outputs_go_in() {
    let (nvim, outputs) = forty_rows_shown().await;
    // The cursor on row f20, three columns in, with "File 18:" at the window's top.
    nvim.lua(
        "local win = vim.fn.win_findbuf(vim.fn.bufnr('agent: chat'))[1] \
         vim.api.nvim_win_call(win, function() \
           local lines = vim.api.nvim_buf_get_lines(0, 0, -1, true) \
           local top, row \
           for i, line in ipairs(lines) do \
             if line == 'File 18:' then top = i end \
             if line:find('read f20.txt', 1, true) then row = i end \
           end \
           vim.fn.winrestview({ topline = top, lnum = row, col = 3 }) \
         end)",
        vec![],
    )
    .await;
    let before = nvim.lua(VIEW, vec![]).await;
    assert_eq!(before[0].as_str(), Some("File 18:"), "{before:?}");
    assert!(
        before[1]
            .as_str()
            .unwrap_or_default()
            .contains("read f20.txt"),
        "{before:?}"
    );
    receive_in_batches(&nvim, &outputs, 8).await;
    let after = nvim.lua(VIEW, vec![]).await;
    assert_eq!(after, before, "the reading window moved");
    // Every output went in (folded under its row), and nothing of the moving was left behind.
    let left = nvim
        .lua(
            "local buf = vim.fn.bufnr('agent: chat') \
             local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, true) \
             local outputs = 0 \
             for _, line in ipairs(lines) do \
               if line == '  a line of output' then outputs = outputs + 1 end \
             end \
             local ns = vim.api.nvim_get_namespaces()['agent.chat.parked'] \
             return { outputs, #vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, {}) }",
            vec![],
        )
        .await;
    assert_eq!(left, Value::Array(vec![1200.into(), 0.into()]));
    let screen = nvim.wait_for_screen("File 18:").await;
    assert!(screen.contains("read f20.txt"), "{screen}");
}

/// An error while the outputs go in (here Neovim refusing a put) still gives every window its
/// cursor and top line back, and leaves none of the marks they were kept with.
#[tokio::test]
async fn a_window_gets_its_view_back_when_putting_the_outputs_in_fails() {
    let (nvim, outputs) = forty_rows_shown().await;
    nvim.lua(
        "local win = vim.fn.win_findbuf(vim.fn.bufnr('agent: chat'))[1] \
         vim.api.nvim_win_call(win, function() vim.fn.winrestview({ topline = 30, lnum = 33, col = 2 }) end) \
         local set_text, puts = vim.api.nvim_buf_set_text, 0 \
         vim.api.nvim_buf_set_text = function(...) \
           puts = puts + 1 \
           if puts == 3 then error('refused') end \
           return set_text(...) \
         end",
        vec![],
    )
    .await;
    let before = nvim.lua(VIEW, vec![]).await;
    let failed = nvim
        .lua(
            "local ok, err = pcall(require('agent.rpc').receive, ...) return ok",
            vec![Value::Array(for_lua(outputs[..8].to_vec()))],
        )
        .await;
    assert_eq!(failed, Value::from(false), "the stubbed put did not fail");
    let after = nvim.lua(VIEW, vec![]).await;
    assert_eq!(
        after, before,
        "the window was left where the outputs were put"
    );
    let marks = nvim
        .lua(
            "local ns = vim.api.nvim_get_namespaces()['agent.chat.parked'] \
             return #vim.api.nvim_buf_get_extmarks(vim.fn.bufnr('agent: chat'), ns, 0, -1, {})",
            vec![],
        )
        .await;
    assert_eq!(marks, Value::from(0));
}
