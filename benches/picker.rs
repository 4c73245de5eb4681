//! Approval picker benchmark: the diff preview of a 20,000-line file with changes,
//! computed in Rust and shown in Neovim's float. Run with `cargo bench --bench picker`; the
//! figures go in BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use agent_nvim::test_support::nvim::{Nvim, Options};
use rmpv::Value;

const RUNS: usize = 7;

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    // A 20,000-line file; every 100th line changes (200 hunks), then every line changes.
    for every in [100, 1] {
        bench(every);
    }
}

fn bench(every: usize) {
    let before: String = (0..20_000)
        .map(|i| format!("    let value_{i} = compute({i}); // line {i}\n"))
        .collect();
    let after: String = before
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i % every == every / 2 {
                format!("{}  // changed\n", l)
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let mut compute = Vec::new();
    let mut diff = String::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        diff = agent_nvim::diff::unified("src/big.rs", Some(&before), &after);
        compute.push(start.elapsed());
    }
    let diff_lines = diff.lines().count();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let show = runtime.block_on(async {
        let nvim = Nvim::start(Options {
            ui: Some((160, 50)),
            env: vec![],
            setup: format!("require('agent').setup({{ backend = '{}' }})", env!("CARGO_BIN_EXE_agent-nvim")),
        })
        .await;
        let mut shown = Vec::new();
        for id in 0..RUNS {
            // Timed inside Neovim: from the request's arrival to the float drawn on screen.
            let ms = nvim
                .lua(
                    "local diff, id = ... \
                     local t = vim.uv.hrtime() \
                     require('agent.approval').ask({ id = id, tool = 'edit_file', \
                       title = 'edit src/big.rs (replace 1 chars with 2)', \
                       preview = { kind = 'diff', path = 'src/big.rs', unified = diff }, \
                       choices = { kind = 'builtin', choices = { { key = 'allow_once', label = 'Allow once' } } } }, function() end) \
                     vim.cmd.redraw() \
                     local ms = (vim.uv.hrtime() - t) / 1e6 \
                     require('agent.approval').dismiss_all() \
                     return ms",
                    vec![Value::from(diff.as_str()), Value::from(id as i64)],
                )
                .await
                .as_f64()
                .unwrap();
            shown.push(Duration::from_secs_f64(ms / 1000.0));
        }
        median(shown)
    });
    let compute = median(compute);
    println!(
        "approval preview of a 20,000-line file with {} changed lines ({diff_lines} diff lines): diff computed in {:.2} ms, float shown in {:.2} ms, {:.2} ms in all (median of {RUNS})",
        20_000 / every,
        compute.as_secs_f64() * 1e3,
        show.as_secs_f64() * 1e3,
        (compute + show).as_secs_f64() * 1e3
    );
}
