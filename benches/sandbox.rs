//! The sandbox's cost: a sandboxed `true` against an unsandboxed one. Run with
//! `cargo bench --bench sandbox`; the figures go in BENCHMARKS.md. Not a test: these machines
//! are shared, so the numbers are read by a person, never asserted.
//!
//! Each run is run_bash's whole path through the executor (an auto-approving gate): `true` in
//! a temporary workspace, with the default sandbox (workspace-write) and with `mode = "off"`,
//! the two alternated so that neither gets the warmer caches. Apart, the part the sandbox adds
//! in the parent: building the ruleset (`sandbox::confine`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_nvim::approval::Gate;
use agent_nvim::editor::NoEditor;
use agent_nvim::sandbox::{self, Sandbox};
use agent_nvim::tools::{Executor, Settings, ToolContext};
use agent_nvim::workspace::Workspace;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const RUNS: usize = 500;
const WARM_UP: usize = 20;

fn main() {
    let support = sandbox::support();
    println!("Landlock: {support:?}");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let executor = |sandbox: Sandbox| {
        Executor::new(ToolContext {
            workspace: Workspace::new(dir.path()).unwrap(),
            gate: Arc::new(Gate::new(true, None)),
            editor: Arc::new(NoEditor),
            settings: Settings {
                sandbox,
                ..Settings::default()
            },
            checkpoints: None,
        })
    };
    let sandboxed = executor(Sandbox::new());
    let plain = executor(Sandbox::off());
    let args = json!({ "command": "true" });
    let run = |executor: &Executor| {
        let start = Instant::now();
        let result = runtime.block_on(executor.call("run_bash", &args, &CancellationToken::new()));
        let took = start.elapsed();
        assert_eq!(result.text, "\n[exit 0]");
        took
    };
    for _ in 0..WARM_UP {
        run(&sandboxed);
        run(&plain);
    }
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for i in 0..RUNS {
        if i % 2 == 0 {
            with.push(run(&sandboxed));
            without.push(run(&plain));
        } else {
            without.push(run(&plain));
            with.push(run(&sandboxed));
        }
    }
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let policy = Sandbox::new().policy(&root);
    let mut building = Vec::new();
    if let Some(policy) = &policy {
        for _ in 0..RUNS {
            let mut command = tokio::process::Command::new("true");
            let start = Instant::now();
            sandbox::confine(&mut command, policy).unwrap();
            building.push(start.elapsed());
        }
    }
    println!("run_bash `true`, {RUNS} runs each, alternated:");
    let (with, without) = (stats(with), stats(without));
    println!("  sandboxed    {with}");
    println!("  unsandboxed  {without}");
    println!(
        "  difference   median {:+.2} ms, p99 {:+.2} ms",
        ms(with.median) - ms(without.median),
        ms(with.p99) - ms(without.p99)
    );
    if !building.is_empty() {
        println!(
            "building the ruleset (sandbox::confine): {}",
            stats(building)
        );
    }
}

struct Stats {
    median: Duration,
    p99: Duration,
    mean: Duration,
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "median {:.2} ms, p99 {:.2} ms, mean {:.2} ms",
            ms(self.median),
            ms(self.p99),
            ms(self.mean)
        )
    }
}

fn stats(mut xs: Vec<Duration>) -> Stats {
    xs.sort();
    let at = |q: f64| xs[((xs.len() as f64 - 1.0) * q).round() as usize];
    Stats {
        median: at(0.5),
        p99: at(0.99),
        mean: xs.iter().sum::<Duration>() / xs.len() as u32,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
