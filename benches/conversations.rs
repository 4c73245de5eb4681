//! Several conversations in one Neovim (issue 33): two answers of 1 MB streamed at once into two
//! conversations, one shown and one in another tab page (does Neovim keep answering, how soon is
//! each chat complete); eight idle conversations, four built-in and four driving the test ACP
//! agent (the backend's memory, Neovim's growth); and showing a conversation that holds a 5 MB
//! chat. Run with `cargo bench --bench conversations`; figures go in BENCHMARKS.md.
//!
//! As in benches/nvim.rs: a real Neovim with a 120x40 UI, the release backend, the tests' mock
//! model (Anthropic SSE). Knobs: AGENT_NVIM_BENCH_STREAM_SECS (how long each answer takes to
//! send, default 5), AGENT_NVIM_BENCH_ONLY (a comma list of `two`, `idle`, `switch`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent_nvim::test_support::mock_llm::{MockLlm, Part, Reply, Wire};
use agent_nvim::test_support::nvim::{children, setup_lua_for, Nvim, Options, Probe};
use rmpv::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const UI: (i64, i64) = (120, 40);
/// Each answer: 50,000 deltas of 20 B.
const DELTAS: usize = 50_000;
const DELTA_BYTES: usize = 20;

fn main() {
    if std::env::var_os("AGENT_NVIM_TEST_NVIM").is_none() {
        let out = Command::new(Path::new(ROOT).join("scripts/ensure-nvim.sh"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let path = String::from_utf8(out.stdout).unwrap();
        std::env::set_var("AGENT_NVIM_TEST_NVIM", path.trim());
    }
    let secs = std::env::var("AGENT_NVIM_BENCH_STREAM_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5.0);
    let only = std::env::var("AGENT_NVIM_BENCH_ONLY").unwrap_or_default();
    let part = |name: &str| only.is_empty() || only.split(',').any(|p| p.trim() == name);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if part("two") {
        runtime.block_on(two_at_once(Duration::from_secs_f64(secs)));
    }
    if part("idle") {
        runtime.block_on(eight_idle());
    }
    if part("switch") {
        runtime.block_on(switch_to_a_big_chat());
    }
}

/// 1 MB of markdown-ish ASCII ending with `last`, in deltas of 20 B.
fn answer(last: &str) -> Vec<String> {
    let paragraph = "The buffer holds the stream; each function returns **what** it read, \
                     and the `parser` keeps its place.\n\n- one item of a list\n- another one\n\n";
    let mut text = String::new();
    while text.len() < DELTAS * DELTA_BYTES - last.len() {
        text.push_str(paragraph);
    }
    text.truncate(DELTAS * DELTA_BYTES - last.len());
    text.push_str(last);
    text.as_bytes()
        .chunks(DELTA_BYTES)
        .map(|c| std::str::from_utf8(c).unwrap().to_string())
        .collect()
}

async fn start(mock: &MockLlm, extra: &str) -> Nvim {
    Nvim::start(Options {
        ui: Some(UI),
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "bench-key".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua_for(env!("CARGO_BIN_EXE_agent-nvim"), extra),
    })
    .await
}

/// Whether each of the two chats holds its last line (one RPC call).
async fn complete(nvim: &Nvim) -> (bool, bool) {
    let done = nvim
        .lua(
            "local function has(name, mark) \
               local b = vim.fn.bufnr(name) \
               if b < 0 then return false end \
               local n = vim.api.nvim_buf_line_count(b) \
               for _, l in ipairs(vim.api.nvim_buf_get_lines(b, math.max(0, n - 6), n, false)) do \
                 if l:find(mark, 1, true) then return true end \
               end \
               return false \
             end \
             return { has('agent: chat', 'ZZ END') , has('agent: chat 2', 'ZZ END') }",
            vec![],
        )
        .await;
    let done = done.as_array().unwrap();
    (
        done[0].as_bool().unwrap_or(false),
        done[1].as_bool().unwrap_or(false),
    )
}

async fn two_at_once(over: Duration) {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            Reply::Spread {
                parts: vec![Part::Deltas(answer("\nZZ END ONE ZZ"))],
                over,
            },
            Reply::Spread {
                parts: vec![Part::Deltas(answer("\nZZ END TWO ZZ"))],
                over,
            },
        ],
    );
    let nvim = start(&mock, "").await;
    // Conversation 1 in tab page 1, conversation 2 in tab page 2 (shown), both started.
    nvim.cmd("Agent").await;
    nvim.wait_for("require('agent.rpc').info() ~= nil").await;
    nvim.cmd("Agent new").await;
    nvim.wait_for("require('agent.rpc').info() ~= nil").await;
    nvim.api.input("<Esc>").await.unwrap();
    let probe = Probe::start(&nvim);
    // Both prompts at once: the first into the conversation not shown.
    nvim.lua(
        "local c = require('agent.conversations') \
         c.acting(1, require('agent').ask, 'Write a long answer.') \
         require('agent').ask('Write another long answer.')",
        vec![],
    )
    .await;
    let deadline = Instant::now() + over + Duration::from_secs(120);
    let (mut first, mut second) = (None, None);
    while first.is_none() || second.is_none() {
        let (one, two) = complete(&nvim).await;
        let now = Instant::now();
        if one && first.is_none() {
            first = Some(now);
        }
        if two && second.is_none() {
            second = Some(now);
        }
        assert!(now < deadline, "the answers never completed");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (first, second) = (first.unwrap(), second.unwrap());
    let probes = probe.stop().await;
    let mut sent = mock.text_sent();
    sent.sort();
    // Each answer's last delta is one of the last two sent (each answer's deltas are 100 µs
    // apart, the two streams start within a few ms): the earlier of the two is taken for both,
    // so the figure can only overstate.
    let last = sent[sent.len() - 2];
    let first_sent = sent[0];
    let mut during: Vec<Duration> = probes
        .iter()
        .filter(|(at, _)| *at >= first_sent && *at <= first.max(second))
        .map(|(_, d)| *d)
        .collect();
    during.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let q = |p: f64| ms(during[((during.len() - 1) as f64 * p).round() as usize]);
    println!(
        "two: two answers of 1 MB ({DELTAS} deltas each) over {:.1} s at once, one shown, one \
         in another tab page",
        over.as_secs_f64()
    );
    println!(
        "  complete after their last delta: the one not shown {:.0} ms, the one shown {:.0} ms",
        ms(first.saturating_duration_since(last)),
        ms(second.saturating_duration_since(last)),
    );
    println!(
        "  RPC probe (nvim_eval(\"1\") every 10 ms): {} probes, median {:.2} ms, p99 {:.2} ms, \
         max {:.2} ms",
        during.len(),
        q(0.5),
        q(0.99),
        ms(*during.last().unwrap())
    );
    let _ = nvim.api.command("qa!").await;
}

/// The resident set of process `pid`, in MB.
fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

async fn eight_idle() {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let nvim = start(
        &mock,
        &format!("acp = {{ agents = {{ test = {{ cmd = {{ '{agent}' }} }} }} }}"),
    )
    .await;
    let nvim_pid = nvim.child.id().unwrap();
    nvim.cmd("Agent").await;
    nvim.wait_for("require('agent.rpc').info() ~= nil").await;
    let backend = children(nvim_pid)[0];
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (nvim_one, backend_one) = (rss_mb(nvim_pid), rss_mb(backend));
    // Seven more: three built-in, then four to the test ACP agent.
    for i in 2..=8 {
        nvim.cmd("Agent new").await;
        nvim.wait_for("require('agent.rpc').info() ~= nil").await;
        if i > 4 {
            nvim.cmd("Agent acp test").await;
            nvim.wait_for("require('agent.choices').connected()").await;
        }
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let count = nvim
        .lua("return #require('agent').conversations()", vec![])
        .await;
    let (nvim_eight, backend_eight) = (rss_mb(nvim_pid), rss_mb(backend));
    println!(
        "idle: {} conversations open (4 built-in, 4 to the test ACP agent)",
        count.as_u64().unwrap()
    );
    println!(
        "  backend RSS {backend_eight:.1} MB (with one: {backend_one:.1} MB); Neovim RSS \
         {nvim_eight:.1} MB, {:.1} MB more than with one",
        nvim_eight - nvim_one
    );
    let _ = nvim.api.command("qa!").await;
}

/// Fills the chat of the conversation acted for with `bytes` of earlier turns, through its own
/// handlers (as a resumed conversation is shown).
const FILL_LUA: &str = r#"
local bytes = ...
local chat = require('agent.chat')
local text = string.rep("A line of an earlier answer, with `code` and **bold** in it.\n", 1000)
local written, turn = 0, 0
while written < bytes do
  turn = turn + 1
  chat.begin_batch()
  chat.handle({ type = 'prompt', text = 'An earlier question, number ' .. turn })
  chat.handle({ type = 'turn_started' })
  chat.handle({ type = 'text', text = text })
  chat.handle({ type = 'turn_done', outcome = 'done', message = 'done', input = 1, output = 1 })
  chat.end_batch()
  written = written + #text
end
chat.begin_batch()
chat.handle({ type = 'prompt', text = 'ZZ LAST QUESTION ZZ' })
chat.end_batch()
return turn
"#;

async fn switch_to_a_big_chat() {
    let mock = MockLlm::start(Wire::Anthropic, vec![]);
    let nvim = start(&mock, "").await;
    nvim.cmd("Agent").await;
    nvim.wait_for("require('agent.rpc').info() ~= nil").await;
    nvim.lua(FILL_LUA, vec![Value::from(5_000_000u64)]).await;
    nvim.cmd("Agent new").await;
    nvim.wait_for("require('agent.rpc').info() ~= nil").await;
    nvim.api.input("<Esc>").await.unwrap();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    // To its tab page (it is shown there), and into this one (its tab page closed first); the
    // screen is sampled every millisecond.
    let shown = |nvim: &Nvim, at: Instant| {
        let screen = nvim.screen();
        assert!(
            at.elapsed() < Duration::from_secs(20),
            "never shown:\n{screen}"
        );
        screen.contains("ZZ LAST QUESTION ZZ")
    };
    let mut to_tab = Vec::new();
    let mut here = Vec::new();
    for _ in 0..5 {
        let at = Instant::now();
        nvim.lua("require('agent').show(1)", vec![]).await;
        while !shown(&nvim, at) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        to_tab.push(at.elapsed());
        nvim.cmd("tabnext").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    nvim.cmd("1tabclose").await;
    for _ in 0..5 {
        let at = Instant::now();
        nvim.lua("require('agent').show(1)", vec![]).await;
        while !shown(&nvim, at) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        here.push(at.elapsed());
        nvim.lua("require('agent').show(2)", vec![]).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    to_tab.sort();
    here.sort();
    println!("switch: to a conversation holding a 5 MB chat (its last line on screen)");
    println!(
        "  to its tab page: median {:.1} ms, max {:.1} ms; shown in the current tab page: \
         median {:.1} ms, max {:.1} ms (5 each)",
        ms(to_tab[2]),
        ms(to_tab[4]),
        ms(here[2]),
        ms(here[4]),
    );
    let _ = nvim.api.command("qa!").await;
}
