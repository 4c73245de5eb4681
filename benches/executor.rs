//! Executor benchmarks (its speed and memory). Run with `cargo bench --bench executor`;
//! the figures go in BENCHMARKS.md. Not a test: these machines are shared, so the numbers are read
//! by a person, never asserted.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::zombie_processes
)]

use std::io::Write;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_nvim::approval::Gate;
use agent_nvim::editor::NoEditor;
use agent_nvim::tools::{Executor, Settings, ToolContext};
use agent_nvim::workspace::Workspace;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const RUNS: usize = 5;

fn main() {
    let only = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    let want = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    if want("run_bash") {
        run_bash_output_flood();
    }
    if want("read_file") {
        read_file_huge();
    }
    if want("edit_file") {
        edit_file_large();
    }
}

/// Wall time and peak RSS (KiB) of a child, from wait4's rusage. The RSS is the largest in the
/// child's tree, so it bounds agent-nvim's own from above.
fn measure(mut command: Command) -> (Duration, i64) {
    let start = Instant::now();
    let child = command.stdout(std::process::Stdio::null()).spawn().unwrap();
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid);
    (start.elapsed(), usage.ru_maxrss)
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn run_bash_output_flood() {
    let bin = env!("CARGO_BIN_EXE_agent-nvim");
    let script =
        "head -c 200000000 /dev/zero | tr '\\0' a; head -c 50000000 /dev/zero | tr '\\0' b >&2";
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Vec::new();
    let mut direct = Vec::new();
    let mut peak = 0;
    for _ in 0..RUNS {
        let mut c = Command::new(bin);
        c.current_dir(dir.path()).args([
            "tool",
            "run_bash",
            &json!({ "command": script }).to_string(),
            "--auto-approve",
        ]);
        let (t, rss) = measure(c);
        agent.push(t);
        peak = peak.max(rss);
        let mut c = Command::new("bash");
        c.arg("-c").arg(format!("{{ {script}; }} >/dev/null 2>&1"));
        direct.push(measure(c).0);
    }
    let (a, d) = (median(agent), median(direct));
    println!(
        "run_bash, 200 MB stdout + 50 MB stderr: agent-nvim {:.0} ms, same command to /dev/null {:.0} ms, ratio {:.2}x, peak RSS {:.1} MB (median of {RUNS})",
        a.as_secs_f64() * 1e3,
        d.as_secs_f64() * 1e3,
        a.as_secs_f64() / d.as_secs_f64(),
        peak as f64 / 1024.0
    );
}

fn executor(root: &std::path::Path) -> Executor {
    Executor::new(ToolContext {
        workspace: Workspace::new(root).unwrap(),
        gate: Arc::new(Gate::new(true, None)),
        editor: Arc::new(NoEditor),
        settings: Settings::default(),
        checkpoints: None,
    })
}

/// This process's resident set size now, in KiB.
fn rss_kib() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn read_file_huge() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.log");
    let mut file =
        std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).unwrap());
    let line = "2026-12-01T00:00:00Z INFO request served in 3 ms, status 200, path /api/items\n";
    let mut written = 0u64;
    while written < 2 * 1024 * 1024 * 1024 {
        file.write_all(line.as_bytes()).unwrap();
        written += line.len() as u64;
    }
    file.flush().unwrap();
    drop(file);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ex = executor(dir.path());
    let cancel = CancellationToken::new();
    let mut times = Vec::new();
    let mut growth = 0;
    // A read takes a tenth of a millisecond: many runs, so the median is the call, not the noise.
    let runs = 101;
    for _ in 0..runs {
        let before = rss_kib();
        let start = Instant::now();
        let result = runtime.block_on(ex.call("read_file", &json!({"path": "huge.log"}), &cancel));
        times.push(start.elapsed());
        growth = growth.max(rss_kib() - before);
        assert!(result.ok && result.summary.ends_with("truncated)"));
    }
    println!(
        "read_file on a {:.1} GB text file: {:.3} ms, extra RSS {:.1} MB (median of {runs}; largest growth)",
        written as f64 / 1e9,
        median(times).as_secs_f64() * 1e3,
        growth as f64 / 1024.0
    );
}

fn edit_file_large() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.rs");
    let mut text = String::with_capacity(51 << 20);
    let mut i = 0;
    while text.len() < 50 * 1024 * 1024 {
        text.push_str(&format!("    let value_{i} = compute({i}); // line {i}\n"));
        i += 1;
    }
    std::fs::write(&path, &text).unwrap();
    let size = text.len();
    // Dropped before anything is measured: a child forked from a process holding 50 MB would
    // count those pages in its own peak until it execs.
    drop(text);
    // Peak memory of a whole `agent-nvim tool edit_file` process on the same file.
    let mut peaks = Vec::new();
    for run in 0..RUNS {
        let (old, new) = if run % 2 == 0 {
            ("compute(400000);", "compute_fast(400000);")
        } else {
            ("compute_fast(400000);", "compute(400000);")
        };
        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-nvim"));
        command.current_dir(dir.path()).args([
            "tool",
            "edit_file",
            &json!({"path": "big.rs", "old_str": old, "new_str": new}).to_string(),
            "--auto-approve",
        ]);
        peaks.push(measure(command).1);
    }
    peaks.sort();
    let peak = peaks[peaks.len() / 2] as f64 / 1024.0;
    println!(
        "edit_file on the same file in `agent-nvim tool`: peak RSS {peak:.0} MB, {:.2}x the file (median of {RUNS})",
        peak * 1024.0 * 1024.0 / size as f64
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ex = executor(dir.path());
    let cancel = CancellationToken::new();
    let mut times = Vec::new();
    for run in 0..RUNS {
        let (old, new) = if run % 2 == 0 {
            ("compute(500000);", "compute_fast(500000);")
        } else {
            ("compute_fast(500000);", "compute(500000);")
        };
        let start = Instant::now();
        let result = runtime.block_on(ex.call(
            "edit_file",
            &json!({"path": "big.rs", "old_str": old, "new_str": new}),
            &cancel,
        ));
        times.push(start.elapsed());
        assert!(result.ok, "{result:?}");
    }
    println!(
        "edit_file on a {:.0} MB file (one replacement, diff, atomic write): {:.0} ms (median of {RUNS})",
        size as f64 / 1e6,
        median(times).as_secs_f64() * 1e3
    );
}
