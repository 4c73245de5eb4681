//! The rule check: a 2,000-character command line split into its simple commands
//! and matched against 100 rules (`Rules::judge`), timed over many runs. Target: under 1 ms.
//!
//! `cargo bench --locked --bench permissions`; the figures go in BENCHMARKS.md. Not a test: the
//! machines are shared, so a person reads the numbers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use agent_nvim::approval::Action;
use agent_nvim::permissions::{Judgement, Rules};

fn main() {
    // 100 rules: 60 allow (`cd` and `cargo test` last), 20 ask, 20 deny, none of them matching the line's first commands
    // early, so every simple command is tried against most of them.
    let allow: Vec<String> = (0..58)
        .map(|i| format!("run_bash(tool{i} --flag *)"))
        .chain([
            "run_bash(cd *)".to_string(),
            "run_bash(cargo test *)".to_string(),
        ])
        .collect();
    let ask: Vec<String> = (0..20).map(|i| format!("run_bash(deploy{i} *)")).collect();
    let deny: Vec<String> = (0..20).map(|i| format!("run_bash(danger{i} *)")).collect();
    let rules = Rules::parse(&allow, &ask, &deny).expect("the rules read");
    // Simple commands joined by operators, quoted words and a subshell, 2,000 characters.
    let mut line = String::new();
    let mut i = 0;
    while line.len() < 2_000 {
        if !line.is_empty() {
            line.push_str([" && ", " | ", "; ", " || "][i % 4]);
        }
        line.push_str(&format!("cargo test --lib \"case {i}\" -- --nocapture"));
        i += 1;
    }
    let line = format!("(cd crate && {line})");
    let action = Action::Command {
        command: line.clone(),
    };
    assert_eq!(rules.judge(&action), Judgement::Allow, "{line}");
    let mut took: Vec<Duration> = (0..2_000)
        .map(|_| {
            let at = Instant::now();
            let judged = rules.judge(&action);
            let took = at.elapsed();
            std::hint::black_box(judged);
            took
        })
        .collect();
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let at = Instant::now();
    for _ in 0..200 {
        std::hint::black_box(agent_nvim::permissions::shell::split(&line));
    }
    let split = at.elapsed() / 200;
    println!(
        "rule check: a {}-character line of {} simple commands against {} rules: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (2,000 runs); the split alone {:.3} ms",
        line.len(),
        i,
        rules.all().len(),
        ms(took[took.len() / 2]),
        ms(took[took.len() * 99 / 100]),
        ms(took[took.len() - 1]),
        ms(split),
    );
}
