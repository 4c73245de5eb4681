//! Turn-loop benchmarks: how many read_file round trips a second the loop sustains when
//! the model answers at once, and how soon a streamed text delta reaches `agent-nvim run`'s stdout
//! after the server sent it; and the input tokens a 40-turn loop of 2,000-token tool
//! results pays at full price with the prompt cache (the mock answers as a cache would,
//! `MockLlm::with_cache`). Run with `cargo bench --bench agent`; figures go in BENCHMARKS.md.
//!
//! The model is the tests' mock server (`agent_nvim::test_support::mock_llm`, Anthropic format),
//! which records the send time of every text delta on the same clock as the time its text is
//! read back.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_nvim::agent::Outcome;
use agent_nvim::editor::NoEditor;
use agent_nvim::llm::ProviderChoice;
use agent_nvim::session::{self, SessionConfig};
use agent_nvim::test_support::mock_llm::{MockLlm, Part, Reply, Wire};
use tokio_util::sync::CancellationToken;

fn main() {
    // The session builder reads the key from the environment, as the front ends' does.
    std::env::set_var("ANTHROPIC_API_KEY", "k");
    round_trips(40);
    round_trips(200);
    round_trips(1000);
    delta_latency();
    cached_loop(40);
}

/// A loop of `turns` read_file calls of an 8,000-byte file (2,000 tokens at the mock's 4 bytes
/// a token) against the mock's prompt cache: the input sent in all, what was read from the
/// cache, and what was billed at full price (the rest).
fn cached_loop(turns: usize) {
    let mock = MockLlm::start(Wire::Anthropic, tool_calls(turns)).with_cache();
    let (_dir, mut agent) = loop_agent(&mock, turns, &"0123456789abcdef\n".repeat(470));
    let runtime = agent_nvim::front::runtime().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let totals = runtime.spawn(async move {
        let mut last = (0, 0);
        while let Some(event) = rx.recv().await {
            if let agent_nvim::agent::Event::Usage { input, cached, .. } = event {
                last = (input, cached);
            }
        }
        last
    });
    let outcome = runtime.block_on(agent.prompt("go".into(), &tx, &CancellationToken::new()));
    assert_eq!(outcome, Outcome::Done);
    drop(tx);
    drop(agent);
    let (input, cached) = runtime.block_on(totals).unwrap();
    // At Anthropic's prices, a read costs 0.1 and a write 1.25 of an input token: counting
    // every token not read as a write gives the most the input can cost.
    let at_most = 1.25 * (input - cached) as f64 + 0.1 * cached as f64;
    println!(
        "prompt cache, {turns} read_file turns of 2,000-token results: {input} input tokens sent, {cached} read from the cache, {} not ({:.1}%); the input's cost at most {:.1}% of its price uncached",
        input - cached,
        (input - cached) as f64 * 100.0 / input as f64,
        at_most * 100.0 / input as f64
    );
}

/// `turns` responses that each call read_file, then one that ends the turn.
fn tool_calls(turns: usize) -> Vec<Reply> {
    let call = |n: usize| Reply::Turn {
        parts: vec![Part::ToolCall {
            id: format!("t{n}"),
            name: "read_file".into(),
            args: r#"{"path":"a.txt"}"#.into(),
        }],
        usage: (10, 5),
    };
    let done = Reply::Turn {
        parts: vec![Part::Text("done".into())],
        usage: (10, 5),
    };
    (1..=turns).map(call).chain([done]).collect()
}

/// An agent on `mock` allowed `turns` tool turns, in a workspace whose a.txt holds `text`.
fn loop_agent(
    mock: &MockLlm,
    turns: usize,
    text: &str,
) -> (tempfile::TempDir, agent_nvim::agent::Agent) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), text).unwrap();
    let mut config = SessionConfig::new(dir.path());
    config.auto_approve = true;
    config.max_turns = (turns + 1) as u32;
    config.provider = ProviderChoice {
        provider: Some("anthropic".into()),
        model: Some("bench".into()),
        base_url: Some(mock.base_url()),
        ..Default::default()
    };
    let executor = session::executor(&config, Box::new(|_, _| None), Arc::new(NoEditor)).unwrap();
    (dir, session::agent(&config, executor).unwrap())
}

/// One prompt whose model asks for read_file `turns` times before it finishes.
fn round_trips(turns: usize) {
    let mock = MockLlm::start(Wire::Anthropic, tool_calls(turns)).without_bodies();
    let (_dir, mut agent) = loop_agent(&mock, turns, &"alpha\n".repeat(50));
    let runtime = agent_nvim::front::runtime().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    runtime.spawn(async move {
        while let Some(event) = rx.recv().await {
            if let agent_nvim::agent::Event::TurnDone { message, .. } = event {
                println!("  (turn ended: {message})");
            }
        }
    });
    let start = Instant::now();
    let outcome = runtime.block_on(agent.prompt("go".into(), &tx, &CancellationToken::new()));
    let elapsed = start.elapsed();
    assert_eq!(outcome, Outcome::Done);
    println!(
        "turn loop, {turns} read_file round trips against an instant local server: {:.0} round trips/s ({:.2} ms each; the request body grows with the history)",
        turns as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e3 / turns as f64
    );
}

fn delta_latency() {
    const DELTAS: usize = 200;
    // One line per delta, so the reader can tell them apart.
    let deltas = (0..DELTAS).map(|i| format!("delta {i}\n")).collect();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![Reply::Spread {
            parts: vec![Part::Deltas(deltas)],
            over: Duration::from_millis(10) * DELTAS as u32,
        }],
    );
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-nvim"))
        .current_dir(dir.path())
        .args(["run", "hi"])
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", mock.base_url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut received = Vec::new();
    for _ in 0..DELTAS {
        lines.next().unwrap().unwrap();
        received.push(Instant::now());
    }
    child.wait().unwrap();
    let sent = mock.text_sent();
    let mut latency: Vec<Duration> = received
        .iter()
        .zip(sent.iter())
        .map(|(r, s)| r.duration_since(*s))
        .collect();
    latency.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "text delta, server write to `agent-nvim run` stdout ({DELTAS} deltas, 10 ms apart): median {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(latency[DELTAS / 2]),
        ms(latency[DELTAS * 99 / 100]),
        ms(latency[DELTAS - 1])
    );
}
