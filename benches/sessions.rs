//! Saved conversations: what saving adds to an event's way to the screen, and a
//! resume of a big conversation (2,000 tool rows, 5 MB of text) in a real Neovim with a UI
//! attached: how soon every row is shown, then every output in its fold, and how long Neovim
//! takes to answer an RPC request while it is drawn and while a new answer streams into it
//! afterwards.
//! Run with `cargo bench --bench sessions`; figures go in BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use agent_nvim::agent::{Event, Outcome};
use agent_nvim::conversation::{ConversationEvent, Events};
use agent_nvim::sessions::{Record, Saved, SavedCall, SavedResult, Store};
use agent_nvim::test_support::mock_llm::{MockLlm, Part, Reply, Wire};
use agent_nvim::test_support::nvim::{setup_lua_for, Nvim, Options, Probe};

const ROWS: usize = 2_000;
/// Bytes of each tool's output and of the text between two calls: 2,000 x 2,500 = 5 MB.
const OUTPUT: usize = 2_000;
const TEXT: usize = 500;

fn main() {
    saving_cost();
    if std::env::var_os("AGENT_NVIM_TEST_NVIM").is_none() {
        println!("resume: skipped (set AGENT_NVIM_TEST_NVIM to a Neovim)");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(resume());
}

/// The CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the calling thread's CPU clock into `now`.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn quantile(v: &[Duration], q: f64) -> Duration {
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn text(n: usize, seed: usize) -> String {
    let line = format!("line {seed} of the conversation, some words to fill it up.\n");
    line.repeat(n / line.len() + 1)[..n].to_string()
}

/// The events of the big conversation, as a turn reports them.
fn events() -> Vec<ConversationEvent> {
    let mut out = vec![ConversationEvent::Turn(Event::TurnStarted)];
    for i in 0..ROWS {
        out.push(ConversationEvent::Turn(Event::Text {
            text: text(TEXT, i),
        }));
        out.push(ConversationEvent::Turn(Event::ToolStarted {
            id: format!("c{i}"),
            name: "read_file".into(),
            args: serde_json::json!({"path": format!("src/f{i}.rs")}),
        }));
        out.push(ConversationEvent::Turn(Event::ToolFinished {
            id: format!("c{i}"),
            name: "read_file".into(),
            ok: true,
            summary: format!("read src/f{i}.rs ({OUTPUT} chars)"),
            output: text(OUTPUT, i),
            diff: None,
        }));
    }
    out.push(ConversationEvent::Turn(Event::TurnDone {
        input: 1,
        output: 1,
        outcome: Outcome::Done,
        message: "done · 1 in / 1 out tokens".into(),
        cost: None,
    }));
    out
}

/// 1. The time of `Events::send` per event, not recorded and recorded.
fn saving_cost() {
    let events = events();
    let state = tempfile::tempdir().unwrap();
    let store = Store::new(state.path(), Path::new("/bench"));
    for recorded in [false, true] {
        let (sender, mut received) = tokio::sync::mpsc::unbounded_channel();
        let mut stream = Events::new(sender);
        let writer = store.create("built-in").unwrap();
        if recorded {
            stream = stream.recorded_to(std::sync::Arc::new(writer.clone()));
        }
        // Each send's wall time, and the CPU time the sending thread spent in it: a send that
        // took long while using little CPU was preempted (by the writer's thread, another
        // process or the hypervisor), which the CPU time tells apart from what it cost.
        let mut took = Vec::with_capacity(events.len());
        for event in &events {
            let event = event.clone();
            let (at, cpu) = (Instant::now(), thread_cpu());
            stream.send(event).unwrap();
            took.push((at.elapsed(), thread_cpu() - cpu));
            let _ = received.try_recv();
        }
        let at = Instant::now();
        writer.flush();
        let drained = at.elapsed();
        let mut wall: Vec<Duration> = took.iter().map(|(wall, _)| *wall).collect();
        let mut cpu: Vec<Duration> = took.iter().map(|(_, cpu)| *cpu).collect();
        wall.sort();
        cpu.sort();
        let over: Vec<String> = took
            .iter()
            .filter(|(wall, _)| *wall > Duration::from_millis(1))
            .map(|(wall, cpu)| format!("{:.1} ms ({:.3} ms of CPU)", ms(*wall), ms(*cpu)))
            .collect();
        println!(
            "send ({}): {} events, p50 {:.4} ms, p99 {:.4} ms, max {:.3} ms; CPU p99 {:.4} ms, max {:.3} ms; over 1 ms: [{}]; writer done {:.1} ms after the last",
            if recorded { "recorded" } else { "not recorded" },
            took.len(),
            ms(quantile(&wall, 0.5)),
            ms(quantile(&wall, 0.99)),
            ms(*wall.last().unwrap()),
            ms(quantile(&cpu, 0.99)),
            ms(*cpu.last().unwrap()),
            over.join(", "),
            ms(drained),
        );
    }
}

/// 2. `:Agent resume {id}` of the big conversation, then a new answer streamed into it.
async fn resume() {
    let deltas: Vec<String> = (0..5_000).map(|i| format!("delta {i:05} ")).collect();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![Reply::Spread {
            parts: vec![Part::Deltas(deltas)],
            over: Duration::from_secs(2),
        }],
    );
    let nvim = Nvim::start(Options {
        ui: Some((120, 40)),
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "bench-key".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua_for(env!("CARGO_BIN_EXE_agent-nvim"), ""),
    })
    .await;
    let root = nvim.workspace.path().canonicalize().unwrap();
    let store = Store::new(&nvim._home.path().join("state/nvim/agent"), &root);
    let writer = store.create("built-in").unwrap();
    writer.write(Record::Prompt {
        text: "read every file".into(),
    });
    let mut bytes = 0;
    for event in events() {
        if let ConversationEvent::Turn(
            Event::Text { text } | Event::ToolFinished { output: text, .. },
        ) = &event
        {
            bytes += text.len();
        }
        writer.write(Record::Event { event });
    }
    let mut messages = vec![Saved::User {
        text: "read every file".into(),
        images: Vec::new(),
    }];
    for i in 0..ROWS {
        messages.push(Saved::Assistant {
            text: text(TEXT, i),
            calls: vec![SavedCall {
                id: format!("c{i}"),
                name: "read_file".into(),
                args: format!(r#"{{"path":"src/f{i}.rs"}}"#),
            }],
            reasoning: Vec::new(),
        });
        messages.push(Saved::Results {
            results: vec![SavedResult {
                id: format!("c{i}"),
                ok: true,
                text: text(OUTPUT, i),
            }],
        });
    }
    writer.write(Record::Model { messages });
    writer.flush();
    let id = writer.id().to_string();
    let size = std::fs::metadata(store.dir().join(format!("{id}.jsonl")))
        .unwrap()
        .len();

    nvim.cmd("Agent").await;
    nvim.wait_for("require('agent.rpc').info() ~= nil").await;
    nvim.cmd("wincmd p").await;

    let probe = Probe::start(&nvim);
    let started = Instant::now();
    nvim.cmd(&format!("Agent resume {id}")).await;
    // Every row is on screen once the last turn's done row is: the outputs follow.
    nvim.wait_for(
        "vim.fn.match(vim.api.nvim_buf_get_lines(vim.fn.bufnr('agent: chat'), -4, -1, false), \
         '^done · 1 in') >= 0",
    )
    .await;
    let rows = Instant::now();
    nvim.wait_for(
        "vim.fn.match(vim.api.nvim_buf_get_lines(vim.fn.bufnr('agent: chat'), -4, -1, false), \
         '^resumed: read every file') >= 0",
    )
    .await;
    let shown = Instant::now();
    nvim.cmd("Agent and one more").await;
    let asked = shown.elapsed();
    // The new answer's last delta (the replayed conversation already holds a `done` line).
    // Read from the chat's last lines only: fetching all 92,000 would itself stall Neovim.
    nvim.wait_for(
        "vim.fn.match(vim.api.nvim_buf_get_lines(vim.fn.bufnr('agent: chat'), -6, -1, false), \
         'delta 04999') >= 0",
    )
    .await;
    let streamed = Instant::now();
    let probes = probe.stop().await;
    let window = |from: Instant, to: Instant| {
        let mut v: Vec<Duration> = probes
            .iter()
            .filter(|(at, _)| *at >= from && *at <= to)
            .map(|(_, d)| *d)
            .collect();
        v.sort();
        v
    };
    let (drawing, streaming) = (window(started, shown), window(shown, streamed));
    for (at, took) in probes
        .iter()
        .filter(|(_, d)| *d > Duration::from_millis(100))
    {
        let when = if *at < shown {
            format!("{:.0} ms into the resume", ms(*at - started))
        } else {
            format!("{:.0} ms after it was shown", ms(*at - shown))
        };
        println!("  slow probe: {:.0} ms, {when}", ms(*took));
    }
    println!("  `:Agent and one more` itself took {:.0} ms", ms(asked));
    let lines = nvim
        .lua(
            "return vim.api.nvim_buf_line_count(vim.fn.bufnr('agent: chat'))",
            vec![],
        )
        .await;
    println!(
        "resume: {ROWS} tool rows, {:.1} MB of text, file {:.1} MB: every row shown {:.0} ms after :Agent resume, the outputs in their folds {:.0} ms ({} lines)",
        bytes as f64 / 1e6,
        size as f64 / 1e6,
        ms(rows - started),
        ms(shown - started),
        lines.as_i64().unwrap_or(-1),
    );
    for (what, v) in [
        ("while drawn", &drawing),
        ("while streaming after", &streaming),
    ] {
        if v.is_empty() {
            println!("  rpc {what}: no probe");
            continue;
        }
        println!(
            "  rpc {what}: {} probes, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            v.len(),
            ms(quantile(v, 0.5)),
            ms(quantile(v, 0.99)),
            ms(*v.last().unwrap()),
        );
    }
}
