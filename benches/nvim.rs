//! Neovim front-end benchmarks: a 1 MB answer streamed in 50,000 deltas into the chat
//! of a real Neovim with a UI attached (is all of it shown, does Neovim keep answering, how soon
//! after the last delta is the chat complete), the plugin's start-up cost, and how long the first
//! `:Agent` takes to be ready. Run with `cargo bench --bench nvim`; figures go in BENCHMARKS.md.
//!
//! Neovim comes from scripts/ensure-nvim.sh (or $AGENT_NVIM_TEST_NVIM); the backend is the binary
//! `cargo bench` builds (the release profile). Like benches/agent.rs the model is the tests' mock
//! server (`agent_nvim::test_support::mock_llm`, Anthropic format), which records the send time
//! of every delta. Times taken inside Neovim (`vim.uv.hrtime()`) and here (`CLOCK_MONOTONIC`) are
//! on the same clock.
//!
//! The chat highlights its markdown, and the stream is measured twice: into an
//! empty chat, and appended to a chat that already holds AGENT_NVIM_BENCH_PRIOR_MB of earlier
//! conversation (default 10, written through the chat's own handlers, highlighted as a live one
//! is); then a trickle of 100 deltas a second for AGENT_NVIM_BENCH_TRICKLE_SECS (default 60),
//! for Neovim's share of a core.
//!
//! Knobs: AGENT_NVIM_BENCH_STREAM_SECS (how long the server takes to send the 50,000 deltas,
//! default 5; 0 sends them as fast as it can, a burst), AGENT_NVIM_BENCH_CODE (the answer's
//! code blocks: `lua`, highlighted as lua, by default; `rust`, plain in a Neovim without that
//! parser, the answer as it was before code blocks were highlighted), AGENT_NVIM_BENCH_RUNS (start-up and first-`:Agent` samples, default 20 and 10),
//! AGENT_NVIM_BENCH_PRIOR_MB, AGENT_NVIM_BENCH_TRICKLE_SECS, AGENT_NVIM_BENCH_RENDER=0 (the
//! chat without markdown highlighting: `render = false`), and
//! AGENT_NVIM_BENCH_ONLY (a comma list of `startup`, `ready`, `stream`, `prior`, `trickle`,
//! `live`, `huge`; all by default).
//!
//! `live`: a command run_bash runs prints AGENT_NVIM_BENCH_FLOOD_MB (default 100) of
//! output while Neovim is probed (its RPC latency while the chat row shows the live tail), then
//! a command prints a line stamped with the wall clock every 200 ms, 50 times, and Neovim
//! records when each first appears in the chat (print to chat, the latest-line latency).
//!
//! `huge`: the model sends a tool call with a 50 MB argument (a run_bash command; an
//! edit_file creating a 50 MB file, within max_edit_mb, whose diff no question can show), and
//! then an edit whose diff is just under what a question shows, with no auto_approve and a UI:
//! Neovim's RPC latency from the prompt until the turn is done, or the question is on screen.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent_nvim::test_support::mock_llm::{MockLlm, Part, Reply, Wire};
use agent_nvim::test_support::nvim::{
    self as nvim_support, children, setup_lua_for, Nvim, Options, Probe,
};
use rmpv::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Deltas in the streamed answer, and the bytes of each (ASCII): 50,000 x 20 B = 1 MB.
const DELTAS: usize = 50_000;
const DELTA_BYTES: usize = 20;
/// The last delta: a line the screen can be searched for.
const LAST: &str = "\nZZ END OF ANSWER ZZ";
const UI: (i64, i64) = (120, 40);

fn main() {
    ensure_nvim();
    let runs = |default: usize| {
        std::env::var("AGENT_NVIM_BENCH_RUNS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let knob = |name: &str, default: f64| -> f64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let stream_secs = knob("AGENT_NVIM_BENCH_STREAM_SECS", 5.0);
    let prior_mb = knob("AGENT_NVIM_BENCH_PRIOR_MB", 10.0);
    let trickle_secs = knob("AGENT_NVIM_BENCH_TRICKLE_SECS", 60.0);
    let render = std::env::var("AGENT_NVIM_BENCH_RENDER").map_or(true, |v| v != "0");
    let only = std::env::var("AGENT_NVIM_BENCH_ONLY").unwrap_or_default();
    let part = |name: &str| only.is_empty() || only.split(',').any(|p| p.trim() == name);
    println!(
        "markdown highlighting: {}",
        if render { "on" } else { "off (render = false)" }
    );
    if part("startup") {
        startup_cost(runs(20));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if part("ready") {
        runtime.block_on(first_agent_ready(runs(10)));
    }
    let over = Duration::from_secs_f64(stream_secs);
    if part("stream") {
        runtime.block_on(stream(over, 0, render));
    }
    if part("prior") {
        let prior = (prior_mb * 1e6) as usize;
        runtime.block_on(stream(over, prior, render));
    }
    if part("trickle") {
        runtime.block_on(trickle(Duration::from_secs_f64(trickle_secs), render));
    }
    if part("huge") {
        runtime.block_on(huge());
    }
    if part("live") {
        let flood_mb = knob("AGENT_NVIM_BENCH_FLOOD_MB", 100.0);
        runtime.block_on(live_flood((flood_mb * 1e6) as u64, render));
        runtime.block_on(live_latency(50, render));
    }
}

/// A mock model that runs `command` (auto_approve) and then says it is done.
fn running(command: &str) -> MockLlm {
    MockLlm::start(
        Wire::Anthropic,
        vec![
            Reply::Turn {
                parts: vec![Part::ToolCall {
                    id: "t1".into(),
                    name: "run_bash".into(),
                    args: serde_json::json!({ "command": command }).to_string(),
                }],
                usage: (10, 2),
            },
            Reply::Turn {
                parts: vec![Part::Text("Ran it.".into())],
                usage: (10, 2),
            },
        ],
    )
}

/// A command printing `bytes` of 64-byte lines, a megabyte at a time with 20 ms between (so
/// the flood lasts seconds, hundreds of frames, not a blink), with Neovim probed every 10 ms
/// while it runs.
async fn live_flood(bytes: u64, render: bool) {
    let megabytes = bytes.div_ceil(1_000_000);
    let command = format!(
        "for i in $(seq {megabytes}); do \
           yes 'a line of output from a command that prints far too much: 0123' | head -c 1000000; \
           sleep 0.02; done"
    );
    let mock = running(&command);
    let setup = format!("auto_approve = true, {}", extra(render));
    let (nvim, nvim_pid, backend_pid) = started_with(&mock, &setup).await;
    nvim.lua("require('agent').ask('Flood.')", vec![]).await;
    nvim.wait_for("require('agent').status().state == 'running'")
        .await;
    let (began, cpu_before) = (
        Instant::now(),
        (cpu_secs(nvim_pid), backend_pid.map_or(f64::NAN, cpu_secs)),
    );
    let probe = Probe::start(&nvim);
    nvim.wait_for("require('agent').status().state ~= 'running'")
        .await;
    let took = began.elapsed().as_secs_f64();
    let probes = probe.stop().await;
    let cpu_after = (cpu_secs(nvim_pid), backend_pid.map_or(f64::NAN, cpu_secs));
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
    let mut rtt: Vec<Duration> = probes.iter().map(|p| p.1).collect();
    rtt.sort();
    let row = nvim
        .lua(
            "for _, l in ipairs(vim.api.nvim_buf_get_lines(vim.fn.bufnr('agent: chat'), 0, -1, false)) do \
               if l:find('-> exit', 1, true) then return l end end return ''",
            vec![],
        )
        .await;
    println!(
        "live flood: {megabytes} MB printed in {took:.1} s, UI {}x{}; Neovim RPC over {} probes: \
         p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; nvim {:.2} s of CPU, backend {:.2} s; row: {}",
        UI.0,
        UI.1,
        rtt.len(),
        ms(quantile(&rtt, 0.5)),
        ms(quantile(&rtt, 0.99)),
        ms(*rtt.last().unwrap()),
        cpu_after.0 - cpu_before.0,
        cpu_after.1 - cpu_before.1,
        row.as_str().unwrap_or_default(),
    );
    let _ = nvim.api.command("qa!").await;
}

/// In Neovim: records, for each `  tick {ns}` line the chat shows, how long after `{ns}` (the
/// wall clock when the command printed it) it first appeared, in `_G.tick_latency` (ms).
const TICKS_LUA: &str = r#"
_G.tick_latency = {}
local seen = {}
vim.api.nvim_buf_attach(vim.fn.bufnr('agent: chat'), false, {
  on_lines = function(_, buf, _, first, _, last)
    local now_s, now_us = vim.uv.gettimeofday()
    for _, line in ipairs(vim.api.nvim_buf_get_lines(buf, first, last, false)) do
      local ns = line:match('^  tick (%d+)$')
      if ns and not seen[ns] then
        seen[ns] = true
        local printed = tonumber(ns) / 1e6
        _G.tick_latency[#_G.tick_latency + 1] = now_s * 1e3 + now_us / 1e3 - printed
      end
    end
  end,
})
"#;

/// A command printing a line stamped with the wall clock every 200 ms, `lines` times: how long
/// each takes to reach the chat.
async fn live_latency(lines: usize, render: bool) {
    let command =
        format!("for i in $(seq {lines}); do echo \"tick $(date +%s%N)\"; sleep 0.2; done");
    let mock = running(&command);
    let setup = format!("auto_approve = true, {}", extra(render));
    let (nvim, _, _) = started_with(&mock, &setup).await;
    nvim.lua(TICKS_LUA, vec![]).await;
    nvim.lua("require('agent').ask('Tick.')", vec![]).await;
    nvim.wait_for("require('agent').status().state == 'idle' and #_G.tick_latency > 0")
        .await;
    let got = nvim.lua("return _G.tick_latency", vec![]).await;
    let mut latency: Vec<f64> = got.as_array().unwrap().iter().map(num).collect();
    latency.sort_by(f64::total_cmp);
    println!(
        "live latency: {} of {lines} lines printed 200 ms apart reached the chat; print to chat \
         p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        latency.len(),
        quantile(&latency, 0.5),
        quantile(&latency, 0.99),
        latency.last().unwrap(),
    );
    let _ = nvim.api.command("qa!").await;
}

/// One call `name` with `args` from the model, then a last word.
fn calling(name: &str, args: serde_json::Value) -> MockLlm {
    MockLlm::start(
        Wire::Anthropic,
        vec![
            Reply::Turn {
                parts: vec![Part::ToolCall {
                    id: "h1".into(),
                    name: name.into(),
                    args: args.to_string(),
                }],
                usage: (10, 2),
            },
            Reply::Turn {
                parts: vec![Part::Text("Done.".into())],
                usage: (10, 2),
            },
        ],
    )
}

/// Huge arguments from the model (see the module doc): each case's RPC latency while it runs.
async fn huge() {
    let mb50 = 50 * 1024 * 1024;
    let lines = |total: usize| "a line of the file that is being created\n".repeat(total / 41);
    let cases = [
        (
            "run_bash, a 50 MB command",
            calling(
                "run_bash",
                serde_json::json!({ "command": format!("echo {}", "x".repeat(mb50)) }),
            ),
            "require('agent').status().state == 'idle'",
        ),
        (
            "edit_file, a 50 MB new file",
            calling(
                "edit_file",
                serde_json::json!({ "path": "big.txt", "old_str": "", "new_str": lines(mb50) }),
            ),
            "require('agent').status().state == 'idle'",
        ),
        (
            "edit_file, 900,000 characters of diff (shown)",
            calling(
                "edit_file",
                serde_json::json!({ "path": "big.txt", "old_str": "", "new_str": lines(880_000) }),
            ),
            "require('agent.approval').pending() > 0",
        ),
    ];
    for (what, mock, done) in cases {
        let (nvim, _, _) = started_with(&mock, "").await;
        let began = Instant::now();
        let probe = Probe::start(&nvim);
        nvim.lua("require('agent').ask('Go.')", vec![]).await;
        // The first request is answered once the mock has streamed the call: wait for it.
        nvim.wait_for("require('agent').status().state ~= 'idle'")
            .await;
        nvim.wait_for(done).await;
        let took = began.elapsed().as_secs_f64();
        let probes = probe.stop().await;
        let mut rtt: Vec<Duration> = probes.iter().map(|p| p.1).collect();
        rtt.sort();
        println!(
            "huge: {what}: {took:.2} s from the prompt; Neovim RPC over {} probes: p50 {:.2} ms, \
             p99 {:.2} ms, max {:.2} ms",
            rtt.len(),
            ms(quantile(&rtt, 0.5)),
            ms(quantile(&rtt, 0.99)),
            ms(*rtt.last().unwrap()),
        );
        let _ = nvim.api.command("qa!").await;
    }
}

/// The setup options for `render`.
fn extra(render: bool) -> &'static str {
    if render {
        ""
    } else {
        "render = false"
    }
}

/// A Neovim with a UI whose plugin talks to `mock`, its backend started, the cursor out of the
/// chat; and the pids of Neovim and of the backend.
async fn started(mock: &MockLlm, render: bool) -> (Nvim, u32, Option<u32>) {
    started_with(mock, extra(render)).await
}

/// [`started`], set up with `extra` options.
async fn started_with(mock: &MockLlm, extra: &str) -> (Nvim, u32, Option<u32>) {
    let nvim = Nvim::start(Options {
        ui: Some(UI),
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "bench-key".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua_for(env!("CARGO_BIN_EXE_agent-nvim"), extra),
    })
    .await;
    nvim.cmd("Agent").await;
    nvim.wait_for("require('agent.rpc').info() ~= nil").await;
    nvim.cmd("wincmd p").await;
    let nvim_pid = nvim.child.id().unwrap();
    let backend_pid = children(nvim_pid).into_iter().next();
    (nvim, nvim_pid, backend_pid)
}

/// Points the support code at the Neovim scripts/ensure-nvim.sh prints (installing it if needed).
fn ensure_nvim() {
    if std::env::var_os("AGENT_NVIM_TEST_NVIM").is_some() {
        return;
    }
    let out = Command::new(Path::new(ROOT).join("scripts/ensure-nvim.sh"))
        .output()
        .expect("run scripts/ensure-nvim.sh");
    assert!(out.status.success(), "scripts/ensure-nvim.sh failed");
    let path = String::from_utf8(out.stdout).unwrap().trim().to_string();
    std::env::set_var("AGENT_NVIM_TEST_NVIM", path);
}

/// CLOCK_MONOTONIC in nanoseconds: the clock `vim.uv.hrtime()` reads.
fn mono_ns() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The value at fraction `q` of sorted `v`.
fn quantile<T: Copy>(v: &[T], q: f64) -> T {
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn num(v: &Value) -> f64 {
    v.as_f64()
        .or_else(|| v.as_i64().map(|i| i as f64))
        .or_else(|| v.as_u64().map(|u| u as f64))
        .unwrap_or(f64::NAN)
}

/// Utime + stime of a process, in seconds.
fn cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    let Some(after) = stat.rsplit_once(") ").map(|(_, rest)| rest) else {
        return f64::NAN;
    };
    let fields: Vec<&str> = after.split(' ').collect();
    // Fields 14 and 15 of the whole line; the first one after ") " is field 3.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

// 2. Plugin start-up cost ---------------------------------------------------------------------

fn startup_cost(runs: usize) {
    let nvim = nvim_support::nvim_binary();
    let dir = tempfile::tempdir().unwrap();
    let mut plugin = Vec::new();
    let mut total = Vec::new();
    for i in 0..runs {
        let file = dir.path().join(format!("startup-{i}.log"));
        let status = Command::new(&nvim)
            .args(["--headless", "--clean", "--cmd"])
            .arg(format!("set rtp^={ROOT}"))
            .arg("--startuptime")
            .arg(&file)
            .arg("+q")
            .current_dir(dir.path())
            .status()
            .unwrap();
        assert!(status.success());
        let log = std::fs::read_to_string(&file).unwrap();
        // "clock  self+sourced  self:  sourcing FILE"
        let line = log
            .lines()
            .find(|l| l.ends_with("/plugin/agent.lua") && l.contains("sourcing"))
            .unwrap_or_else(|| panic!("no plugin/agent.lua line in:\n{log}"));
        let cols: Vec<f64> = line
            .split(':')
            .next()
            .unwrap()
            .split_whitespace()
            .map(|c| c.parse().unwrap())
            .collect();
        plugin.push(cols[1]);
        let started = log
            .lines()
            .find(|l| l.contains("--- NVIM STARTED ---"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|c| c.parse::<f64>().ok())
            .unwrap_or(f64::NAN);
        total.push(started);
    }
    plugin.sort_by(f64::total_cmp);
    total.sort_by(f64::total_cmp);
    println!(
        "plugin start-up: `nvim --headless --clean --cmd 'set rtp^={ROOT}' --startuptime FILE +q`, \
         plugin/agent.lua self+sourced over {runs} runs: median {:.3} ms, max {:.3} ms \
         (all of Neovim's start-up: median {:.1} ms)",
        quantile(&plugin, 0.5),
        plugin[runs - 1],
        quantile(&total, 0.5),
    );
}

// 3. First `:Agent` ready ---------------------------------------------------------------------

/// Runs `:Agent` and wraps `rpc.receive` so that the handling of `started` is timed in Neovim.
const AGENT_READY_LUA: &str = r#"
local t0 = vim.uv.hrtime()
vim.cmd('Agent')
local t1 = vim.uv.hrtime()
local rpc = require('agent.rpc')
local receive = rpc.receive
_G.bench_ready = nil
rpc.receive = function(events)
  local out = receive(events)
  for _, e in ipairs(events) do
    if e.type == 'started' and not _G.bench_ready then
      _G.bench_ready = vim.uv.hrtime()
    end
  end
  return out
end
_G.bench_t0 = t0
return (t1 - t0) / 1e6
"#;

async fn first_agent_ready(runs: usize) {
    let mut ready = Vec::new();
    let mut command = Vec::new();
    for _ in 0..runs {
        let nvim = Nvim::start(Options {
            ui: Some(UI),
            env: vec![
                ("ANTHROPIC_API_KEY".into(), "bench-key".into()),
                ("ANTHROPIC_BASE_URL".into(), "http://127.0.0.1:9".into()),
            ],
            setup: setup_lua_for(env!("CARGO_BIN_EXE_agent-nvim"), ""),
        })
        .await;
        let sync_ms = num(&nvim.lua(AGENT_READY_LUA, vec![]).await);
        let deadline = Instant::now() + Duration::from_secs(10);
        let elapsed = loop {
            let v = nvim
                .lua(
                    "return _G.bench_ready and (_G.bench_ready - _G.bench_t0) / 1e6 or -1",
                    vec![],
                )
                .await;
            let v = num(&v);
            if v >= 0.0 {
                break v;
            }
            assert!(Instant::now() < deadline, "the backend never started");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        ready.push(elapsed);
        command.push(sync_ms);
        let _ = nvim.api.command("qa!").await;
    }
    let first = ready[0];
    ready.sort_by(f64::total_cmp);
    command.sort_by(f64::total_cmp);
    println!(
        "first `:Agent` ready (command run to `started` handled in Lua, release backend, UI {}x{}), \
         {runs} fresh Neovims: first {first:.1} ms, median {:.1} ms, max {:.1} ms; \
         of which the `:Agent` command itself (modules, split, jobstart): median {:.1} ms",
        UI.0,
        UI.1,
        quantile(&ready, 0.5),
        ready[runs - 1],
        quantile(&command, 0.5),
    );
}

// 1. Streaming 1 MB in 50,000 deltas ----------------------------------------------------------

/// An answer that looks like a model's: paragraphs of words, bullets, headings and code blocks,
/// ASCII (so that it cuts into 20-byte deltas anywhere), exactly DELTAS * DELTA_BYTES bytes,
/// ending with LAST.
fn answer() -> String {
    const WORDS: &[&str] = &[
        "the",
        "buffer",
        "stream",
        "function",
        "returns",
        "a",
        "value",
        "when",
        "each",
        "call",
        "to",
        "`nvim_buf_set_text`",
        "appends",
        "**text**",
        "and",
        "Neovim",
        "redraws",
        "window",
        "of",
        "lines",
        "with",
        "its",
        "cursor",
        "in",
        "this",
        "plugin",
        "backend",
        "frame",
        "delta",
        "model",
        "chat",
        "is",
        "for",
        "that",
        "so",
        "we",
        "can",
        "keep",
        "highlighting",
    ];
    // Code blocks in lua (a parser Neovim ships: the block is parsed and highlighted as lua, the
    // costly path) unless AGENT_NVIM_BENCH_CODE=rust (no parser in a plain Neovim: plain text).
    let lua = std::env::var("AGENT_NVIM_BENCH_CODE").map_or(true, |v| v != "rust");
    let total = DELTAS * DELTA_BYTES - LAST.len();
    let mut out = String::with_capacity(total + LAST.len());
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) as usize) % n
    };
    let mut paragraph = 0;
    while out.len() < total {
        paragraph += 1;
        match paragraph % 7 {
            0 => out.push_str(&format!("## Section {paragraph}\n\n")),
            3 if lua => {
                out.push_str("```lua\n");
                for i in 0..(3 + next(6)) {
                    out.push_str(&format!(
                        "local value_{i} = vim.api.nvim_buf_get_lines(0, {}, -1, false) -- {}\n",
                        next(1000),
                        WORDS[next(WORDS.len())]
                    ));
                }
                out.push_str("```\n\n");
            }
            3 => {
                out.push_str("```rust\n");
                for i in 0..(3 + next(6)) {
                    out.push_str(&format!(
                        "    let value_{i} = buffer.line({}).map(|l| l.len());\n",
                        next(1000)
                    ));
                }
                out.push_str("```\n\n");
            }
            5 => {
                for _ in 0..(2 + next(4)) {
                    out.push_str("- ");
                    for _ in 0..(4 + next(8)) {
                        out.push_str(WORDS[next(WORDS.len())]);
                        out.push(' ');
                    }
                    out.push('\n');
                }
                out.push('\n');
            }
            _ => {
                let mut col = 0;
                for _ in 0..(30 + next(60)) {
                    let word = WORDS[next(WORDS.len())];
                    out.push_str(word);
                    col += word.len() + 1;
                    if col > 70 + next(30) {
                        out.push('\n');
                        col = 0;
                    } else {
                        out.push(' ');
                    }
                }
                out.push_str(".\n\n");
            }
        }
    }
    out.truncate(total);
    out.push_str(LAST);
    assert_eq!(out.len(), DELTAS * DELTA_BYTES);
    out
}

/// Wraps `rpc.receive`: per batch, when it began (hrtime), how long it took and its text bytes;
/// and when the chat held all `target` bytes of the answer.
const RECORD_LUA: &str = r#"
local target = ...
local rpc = require('agent.rpc')
local receive = rpc.receive
local B = { starts = {}, took = {}, cpu = {}, bytes = {}, total = 0, complete = nil }
_G.bench = B
rpc.receive = function(events)
  local t0, c0 = vim.uv.hrtime(), os.clock()
  local text = 0
  for _, e in ipairs(events) do
    if e.type == 'text' then text = text + #e.text end
  end
  local out = receive(events)
  local t1, c1 = vim.uv.hrtime(), os.clock()
  local n = #B.starts + 1
  B.starts[n], B.took[n], B.cpu[n], B.bytes[n] = t0, t1 - t0, (c1 - c0) * 1e9, text
  B.total = B.total + text
  if B.total >= target and not B.complete then B.complete = t1 end
  return out
end
local trace = os.getenv('AGENT_NVIM_BENCH_TRACE')
if trace then
  local md = require('agent.chat.markdown')
  md.log = {}
  B.gaps = {}
  local timer, last = vim.uv.new_timer(), vim.uv.hrtime()
  timer:start(5, 5, function()
    local now = vim.uv.hrtime()
    if now - last > 25e6 then B.gaps[#B.gaps + 1] = { last, now - last } end
    last = now
  end)
  B.dump = function()
    timer:stop()
    local out = {}
    for _, r in ipairs(md.log) do
      out[#out + 1] = ('run %.3f %.3f %d %.3f'):format(r[1] / 1e6, r[2] / 1e6, r[3], r[4] / 1e6)
    end
    for i = 1, #B.starts do
      out[#out + 1] = ('recv %.3f %.3f %d'):format(B.starts[i] / 1e6, B.took[i] / 1e6, B.bytes[i])
    end
    for _, g in ipairs(B.gaps) do
      out[#out + 1] = ('gap %.3f %.3f'):format(g[1] / 1e6, g[2] / 1e6)
    end
    vim.fn.writefile(out, trace)
  end
end
"#;

/// Fills the chat with earlier turns through its own handlers, in batches of the pump's largest
/// size (80 KB of text), as a resumed or long conversation would have written them: prompt, the
/// answer's text (`text`, as many copies as make `bytes`), the turn's end.
const PRIOR_LUA: &str = r#"
local text, bytes = ...
local chat = require('agent.chat')
local function batch(events)
  chat.begin_batch()
  for _, e in ipairs(events) do chat.handle(e) end
  chat.end_batch()
end
local written, turn = 0, 0
while written < bytes do
  turn = turn + 1
  batch({ { type = 'prompt', text = 'An earlier question, number ' .. turn }, { type = 'turn_started' } })
  for i = 1, #text, 80000 do
    batch({ { type = 'text', text = text:sub(i, i + 79999) } })
  end
  written = written + #text
  batch({ { type = 'turn_done', outcome = 'done', message = 'done · 1 in / 1 out tokens', input = 1, output = 1 } })
end
local buf = vim.fn.bufnr('agent: chat')
return { turn, vim.api.nvim_buf_line_count(buf) }
"#;

async fn stream(over: Duration, prior: usize, render: bool) {
    let text = answer();
    let deltas: Vec<String> = text
        .as_bytes()
        .chunks(DELTA_BYTES)
        .map(|c| std::str::from_utf8(c).unwrap().to_string())
        .collect();
    assert_eq!(deltas.len(), DELTAS);
    // Delta i is due i * over / DELTAS after the first; each is its own SSE event and HTTP chunk.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![Reply::Spread {
            parts: vec![Part::Deltas(deltas)],
            over,
        }],
    );
    // Instant is CLOCK_MONOTONIC too: one reading of both converts the mock's times.
    let (clock_at, clock_ns) = (Instant::now(), mono_ns());

    // Start the backend first, so that the stream is all that is measured.
    let (nvim, nvim_pid, backend_pid) = started(&mock, render).await;
    if prior > 0 {
        // The earlier answers must not end with the line the screen is searched for.
        let earlier = text.replace(LAST.trim(), "an earlier answer ends here");
        let all = std::env::var("AGENT_NVIM_BENCH_PRIOR_ALL").is_ok_and(|v| v == "1");
        if all {
            // As if a person had scrolled through all of it: every part highlighted.
            nvim.lua("require('agent.chat.markdown').everywhere = true", vec![])
                .await;
        }
        let filled = Instant::now();
        let shape = nvim
            .lua(
                PRIOR_LUA,
                vec![Value::from(earlier.as_str()), Value::from(prior as u64)],
            )
            .await;
        let filled_in = filled.elapsed();
        let highlighted = if all {
            caught_up_all(&nvim).await
        } else {
            caught_up(&nvim).await
        };
        nvim.lua("require('agent.chat.markdown').everywhere = false", vec![])
            .await;
        let marks = nvim
            .lua(
                "local ns = vim.api.nvim_create_namespace('agent.chat.markdown') \
                 return #vim.api.nvim_buf_get_extmarks(vim.fn.bufnr('agent: chat'), ns, 0, -1, {})",
                vec![],
            )
            .await;
        println!(
            "prior chat: {:.1} MB in {} turns, {} lines, written in {:.1} s; its {} markdown \
             highlights done {:.1} s later (a part a frame)",
            prior as f64 / 1e6,
            num(&shape[0]),
            num(&shape[1]),
            filled_in.as_secs_f64(),
            num(&marks),
            highlighted.duration_since(filled + filled_in).as_secs_f64(),
        );
    }
    nvim.lua(RECORD_LUA, vec![Value::from(text.len() as u64)])
        .await;

    // The probe: an RPC request every 10 ms, timed (test_support::nvim::Probe).
    let probe = Probe::start(&nvim);

    let cpu_before = (cpu_secs(nvim_pid), backend_pid.map_or(f64::NAN, cpu_secs));
    nvim.lua("require('agent').ask('Write a long answer.')", vec![])
        .await;
    // The screen shows the last line.
    let marker = LAST.trim();
    let deadline = Instant::now() + over + Duration::from_secs(60);
    // Screen changes seen (sampled every millisecond), and the longest time without one.
    let (mut screen_changes, mut last_change, mut longest_still) =
        (0, Instant::now(), Duration::ZERO);
    let mut previous = nvim.screen();
    let shown = loop {
        let now_screen = nvim.screen();
        if now_screen != previous {
            let now = Instant::now();
            if mock.text_sent_count() > 0 {
                screen_changes += 1;
                longest_still = longest_still.max(now.duration_since(last_change));
            }
            last_change = now;
            previous = now_screen;
        }
        if previous.contains(marker) {
            break Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "the end never showed:\n{}",
            nvim.screen()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let cpu_after = (cpu_secs(nvim_pid), backend_pid.map_or(f64::NAN, cpu_secs));
    let probes = probe.stop().await;
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
    // The markdown highlighted to the end (a bounded part a frame: a flood is highlighted a
    // little behind its text).
    let highlighted = caught_up(&nvim).await;

    // The chat holds exactly what was sent, after the headers and before the closing notice.
    let chat = nvim
        .lua(
            "return table.concat(vim.api.nvim_buf_get_lines(vim.fn.bufnr('agent: chat'), 0, -1, false), '\\n')",
            vec![],
        )
        .await;
    let chat = chat.as_str().unwrap();
    let head = "## Agent\n\n";
    let at = chat.rfind(head).expect("no agent header") + head.len();
    let shows_all = chat[at..].starts_with(&text);
    assert!(shows_all, "the chat does not hold the answer as sent");
    let screen = nvim.screen();
    if std::env::var_os("AGENT_NVIM_BENCH_TRACE").is_some() {
        nvim.lua("bench.dump()", vec![]).await;
    }

    let stats = nvim
        .lua(
            "return { bench.starts, bench.took, bench.bytes, bench.complete, bench.cpu }",
            vec![],
        )
        .await;
    let stats = stats.as_array().unwrap();
    let list = |i: usize| -> Vec<f64> { stats[i].as_array().unwrap().iter().map(num).collect() };
    let (starts, took, bytes) = (list(0), list(1), list(2));
    let complete_ns = num(&stats[3]);
    let cpu = list(4);

    let sent = mock.text_sent();
    let (first_at, last_at, events) = (sent[0], sent[sent.len() - 1], sent.len());
    let last_ns = clock_ns + last_at.duration_since(clock_at).as_nanos() as f64;
    let sending = last_at.duration_since(first_at);

    // Probes during the stream: from the first delta sent to the end shown.
    let mut during: Vec<Duration> = probes
        .iter()
        .filter(|(at, _)| *at >= first_at && *at <= shown)
        .map(|(_, d)| *d)
        .collect();
    during.sort();
    if let Some(trace) = std::env::var_os("AGENT_NVIM_BENCH_TRACE") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(trace)
            .unwrap();
        for (at, d) in &probes {
            let t = clock_ns + at.duration_since(clock_at).as_nanos() as f64;
            writeln!(f, "probe {:.3} {:.3}", t / 1e6, ms(*d)).unwrap();
        }
        writeln!(f, "last {:.3}", last_ns / 1e6).unwrap();
    }

    // Batches carrying text: count, and how the cost of one grows with the chat.
    let text_batches: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] > 0.0).collect();
    let n = text_batches.len();
    let tenth = (n / 10).max(1);
    let mean_ms =
        |idx: &[usize]| idx.iter().map(|&i| took[i]).sum::<f64>() / idx.len() as f64 / 1e6;
    let slowest = *text_batches
        .iter()
        .max_by(|&&a, &&b| took[a].total_cmp(&took[b]))
        .unwrap();
    let max_took = took[slowest] / 1e6;
    let max_cpu = text_batches.iter().map(|&i| cpu[i]).fold(0.0, f64::max) / 1e6;
    let busy: f64 = text_batches.iter().map(|&i| took[i]).sum::<f64>() / 1e9;
    let span = (starts[*text_batches.last().unwrap()] - starts[text_batches[0]]) / 1e9;

    println!(
        "stream{}: {DELTAS} text_delta events of {DELTA_BYTES} B (1 MB), sent over {:.2} s \
         ({:.0} deltas/s, {} events written one by one), UI {}x{}",
        if prior > 0 {
            format!(" after a {:.0} MB chat", prior as f64 / 1e6)
        } else {
            String::new()
        },
        sending.as_secs_f64(),
        (DELTAS - 1) as f64 / sending.as_secs_f64(),
        events,
        UI.0,
        UI.1,
    );
    println!(
        "  chat buffer holds exactly the {} bytes sent: {shows_all}; the screen shows the last line: {}",
        text.len(),
        screen.contains(marker)
    );
    println!(
        "  screen updates seen during the stream: {screen_changes} ({:.0} a second), longest \
         time without one {:.1} ms",
        screen_changes as f64 / shown.duration_since(first_at).as_secs_f64(),
        ms(longest_still),
    );
    println!(
        "  chat complete after the last delta was sent: buffer {:.1} ms, screen {:.1} ms; \
         markdown highlighted to the end {:.0} ms after it",
        (complete_ns - last_ns) / 1e6,
        ms(shown.duration_since(last_at)),
        ms(highlighted.duration_since(last_at)),
    );
    println!(
        "  RPC probe (nvim_eval(\"1\") every 10 ms) during the stream: {} probes, median {:.2} ms, \
         p99 {:.2} ms, max {:.2} ms",
        during.len(),
        ms(quantile(&during, 0.5)),
        ms(quantile(&during, 0.99)),
        ms(*during.last().unwrap()),
    );
    println!(
        "  Lua batches with text: {n} ({:.1} a second, {:.0} B each on average); receive() \
         took mean {:.2} ms in the first tenth, {:.2} ms in the last tenth, max {max_took:.2} ms \
         (batch {} of {n}, {:.0} B), CPU time at most {max_cpu:.2} ms; {busy:.2} s busy in \
         {span:.2} s",
        n as f64 / span,
        text.len() as f64 / n as f64,
        mean_ms(&text_batches[..tenth]),
        mean_ms(&text_batches[n - tenth..]),
        text_batches.iter().position(|&i| i == slowest).unwrap() + 1,
        bytes[slowest],
    );
    println!(
        "  CPU from the prompt to the end shown: nvim {:.2} s, backend {:.2} s",
        cpu_after.0 - cpu_before.0,
        cpu_after.1 - cpu_before.1,
    );
    let _ = nvim.api.command("qa!").await;
}

/// When the chat's markdown is highlighted to its end (waiting up to 10 minutes).
async fn caught_up(nvim: &Nvim) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let behind = nvim
            .lua("return require('agent.chat.markdown').behind()", vec![])
            .await;
        if behind.as_bool() == Some(false) {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "the highlighting never caught up"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// When no region is left with text to highlight, shown or not (waiting up to 10 minutes).
async fn caught_up_all(nvim: &Nvim) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let behind = nvim
            .lua("return require('agent.chat.markdown').pending()", vec![])
            .await;
        if behind.as_u64() == Some(0) {
            return caught_up(nvim).await;
        }
        assert!(
            Instant::now() < deadline,
            "the highlighting never caught up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// 4. A trickle: 100 deltas a second ------------------------------------------------------------

/// Neovim's CPU while a model streams slowly (100 deltas of 20 B a second for `over`), the
/// markdown highlighted as it comes: its share of one core from the first delta to the last.
async fn trickle(over: Duration, render: bool) {
    let count = ((over.as_secs_f64() * 100.0) as usize).max(2);
    let text = answer();
    let deltas: Vec<String> = text
        .as_bytes()
        .chunks(DELTA_BYTES)
        .take(count)
        .map(|c| std::str::from_utf8(c).unwrap().to_string())
        .collect();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![Reply::Spread {
            parts: vec![Part::Deltas(deltas)],
            over,
        }],
    );
    let (nvim, nvim_pid, backend_pid) = started(&mock, render).await;
    let trace = std::env::var_os("AGENT_NVIM_BENCH_TRACE");
    if trace.is_some() {
        nvim.lua("require('agent.chat.markdown').log = {}", vec![])
            .await;
    }
    nvim.lua("require('agent').ask('Write slowly.')", vec![])
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while mock.text_sent_count() == 0 {
        assert!(Instant::now() < deadline, "the stream never began");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (began, cpu_before) = (
        Instant::now(),
        (cpu_secs(nvim_pid), backend_pid.map_or(f64::NAN, cpu_secs)),
    );
    while mock.text_sent_count() < count {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = began.elapsed().as_secs_f64();
    let cpu_after = (cpu_secs(nvim_pid), backend_pid.map_or(f64::NAN, cpu_secs));
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
    if let Some(trace) = trace {
        // Each markdown run: start and wall time (ms), bytes parsed, CPU time (ms).
        let dump = "local out = {} \
            for _, r in ipairs(require('agent.chat.markdown').log) do \
              out[#out + 1] = ('run %.3f %.3f %d %.3f'):format(r[1] / 1e6, r[2] / 1e6, r[3], r[4] / 1e6) \
            end vim.fn.writefile(out, ...)";
        nvim.lua(dump, vec![trace.to_string_lossy().as_ref().into()])
            .await;
    }
    println!(
        "trickle: {count} deltas of {DELTA_BYTES} B at 100 a second ({took:.1} s), UI {}x{}: \
         nvim {:.2} s of CPU ({:.1}% of a core), backend {:.2} s ({:.1}%)",
        UI.0,
        UI.1,
        cpu_after.0 - cpu_before.0,
        (cpu_after.0 - cpu_before.0) / took * 100.0,
        cpu_after.1 - cpu_before.1,
        (cpu_after.1 - cpu_before.1) / took * 100.0,
    );
    let _ = nvim.api.command("qa!").await;
}
