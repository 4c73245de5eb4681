//! Looking at processes from tests: is it still running, which children does it have.

use std::time::{Duration, Instant};

/// True while `pid` runs. A zombie (killed, not yet reaped by whoever inherited it) counts as gone.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Waits up to `limit` for all of `pids` to be gone; true when they are.
pub async fn all_gone(pids: &[i32], limit: Duration) -> bool {
    let start = Instant::now();
    while pids.iter().any(|p| alive(*p)) {
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// Pids of `parent`'s children whose program is `name`.
pub fn children_named(parent: i32, name: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid: i32 = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == parent && cmd.split('\0').next().unwrap_or_default().ends_with(name) {
            found.push(pid);
        }
    }
    found
}

/// Running processes with `marker` anywhere in their arguments (a zombie's are empty).
pub fn with_marker(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// A marker no other process has in its arguments: the test's name, this process, the time.
pub fn unique_marker(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("agentnvim{name}x{}x{nanos}", std::process::id())
}

/// Waits up to `limit` for no process to carry `marker`; returns those still there, SIGKILLed so
/// a failing test leaves nothing behind.
pub async fn marked_survivors(marker: &str, limit: Duration) -> Vec<i32> {
    let start = Instant::now();
    loop {
        let left = with_marker(marker);
        if left.is_empty() || start.elapsed() > limit {
            for pid in &left {
                // SAFETY: a plain signal to a process this test started.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
