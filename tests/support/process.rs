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
