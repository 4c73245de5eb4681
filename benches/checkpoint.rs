//! Checkpoint benchmarks: a snapshot of a workspace of 10,000 files (100 MB), unchanged
//! and after changing 10 files. Run with `cargo bench --bench checkpoint`; the figures go in
//! BENCHMARKS.md. Not a test: the machines are shared, so a person reads the numbers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use agent_nvim::checkpoint::{Checkpoints, Kind};
use agent_nvim::workspace::Workspace;

const FILES: usize = 10_000;
const FILE_BYTES: usize = 10 * 1024;
const RUNS: usize = 11;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let path = |i: usize| ws.path().join(format!("d{:03}/f{i:05}.txt", i % 100));
    for i in 0..FILES {
        let file = path(i);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let line = format!("file {i} line\n");
        std::fs::write(&file, line.repeat(FILE_BYTES / line.len() + 1)).unwrap();
    }
    let checkpoints = Checkpoints::new(
        state.path(),
        Workspace::new(ws.path()).unwrap(),
        "bench".into(),
    );
    runtime.block_on(async {
        let start = Instant::now();
        let first = checkpoints.snapshot(Kind::Prompt, "first").await.unwrap();
        println!(
            "first snapshot of {FILES} files ({} MB): {:.0} ms ({} files recorded)",
            FILES * FILE_BYTES / 1_000_000,
            ms(start.elapsed()),
            first.changed.len()
        );
        let mut unchanged = Vec::new();
        for _ in 0..RUNS {
            let start = Instant::now();
            let snapshot = checkpoints.snapshot(Kind::Prompt, "again").await.unwrap();
            unchanged.push(start.elapsed());
            assert!(snapshot.changed.is_empty());
        }
        println!("unchanged: median {:.1} ms", median(&mut unchanged));
        let mut changed = Vec::new();
        for run in 0..RUNS {
            for i in 0..10 {
                std::fs::write(path(i * 997 % FILES), format!("run {run} changed {i}\n")).unwrap();
            }
            let start = Instant::now();
            let snapshot = checkpoints.snapshot(Kind::Edit, "ten").await.unwrap();
            changed.push(start.elapsed());
            assert_eq!(snapshot.changed.len(), 10);
        }
        println!(
            "after changing 10 files: median {:.1} ms",
            median(&mut changed)
        );
    });
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn median(runs: &mut [Duration]) -> f64 {
    runs.sort();
    ms(runs[runs.len() / 2])
}
