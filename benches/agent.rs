//! Turn-loop benchmarks (issue 3): how many read_file round trips a second the loop sustains when
//! the model answers at once, and how soon a streamed text delta reaches `agent-nvim run`'s stdout
//! after the server sent it. Run with `cargo bench --bench agent`; figures go in BENCHMARKS.md.
//!
//! The model is the tests' mock server (`agent_nvim::test_support::mock_llm`, Anthropic format),
//! which records the send time of every text delta on the same clock as the time its text is
//! read back.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_nvim::agent::{Agent, Outcome};
use agent_nvim::approval::Gate;
use agent_nvim::editor::NoEditor;
use agent_nvim::llm::{ApiKey, Client, ProviderConfig, ProviderKind};
use agent_nvim::test_support::mock_llm::{MockLlm, Part, Reply, Wire};
use agent_nvim::tools::{Executor, Settings, ToolContext};
use agent_nvim::workspace::Workspace;
use tokio_util::sync::CancellationToken;

fn main() {
    round_trips(40);
    round_trips(200);
    round_trips(1000);
    delta_latency();
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

/// One prompt whose model asks for read_file `turns` times before it finishes.
fn round_trips(turns: usize) {
    let mock = MockLlm::start(Wire::Anthropic, tool_calls(turns)).without_bodies();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n".repeat(50)).unwrap();
    let executor = Executor::new(ToolContext {
        workspace: Workspace::new(dir.path()).unwrap(),
        gate: Arc::new(Gate::new(true, None)),
        editor: Arc::new(NoEditor),
        settings: Settings::default(),
        checkpoints: None,
    });
    let config = ProviderConfig {
        kind: ProviderKind::Anthropic,
        model: "bench".into(),
        base_url: mock.base_url(),
        api_key: Some(ApiKey::new("k".into())),
    };
    let client = Client::new(config, &executor.catalogue()).unwrap();
    let mut agent = Agent::new(client, executor, (turns + 1) as u32);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
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
