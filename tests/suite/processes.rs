//! The `agent-nvim` binary and its process trees: killing the backend kills its children
//! (PR_SET_PDEATHSIG), and a process that hides its tree is still ended (the binary claims its
//! orphans; see src/reaper.rs).

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::bin;
use crate::support::process::{marked_survivors, unique_marker, with_marker};

/// The parent pid in `/proc/PID/stat`.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[tokio::test]
async fn killing_the_backend_kills_the_command_it_is_running() {
    let dir = tempfile::tempdir().unwrap();
    let marker = unique_marker("pdeathsig");
    // The shell execs into the marked sleep: the backend's direct child carries the marker.
    let args = serde_json::json!({ "command": format!("exec -a {marker} sleep 1000") });
    let mut backend = bin()
        .current_dir(dir.path())
        .args(["tool", "run_bash", &args.to_string(), "--auto-approve"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let backend_pid = i32::try_from(backend.id()).unwrap();
    let start = Instant::now();
    let child = loop {
        let found = with_marker(&marker);
        if let Some(pid) = found
            .iter()
            .find(|pid| parent_of(**pid) == Some(backend_pid))
        {
            break *pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the command never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    backend.kill().unwrap();
    backend.wait().unwrap();
    // Nothing of the backend runs to kill it: only the signal armed in the child can.
    let left = marked_survivors(&marker, Duration::from_secs(3)).await;
    assert_eq!(left, Vec::<i32>::new(), "{child} outlived its backend");
}

#[test]
fn a_process_that_clears_its_environment_and_double_forks_is_still_ended() {
    let dir = tempfile::tempdir().unwrap();
    let marker = unique_marker("envcleared");
    // No AGENT_NVIM_TREE, a session of its own, its parent gone at once: only the binary's
    // claim on every orphan it adopts finds it.
    let command = format!("env -i setsid -f /bin/bash -c 'exec -a {marker} sleep 1000'; sleep 0.3");
    let args = serde_json::json!({ "command": command });
    let out = crate::support::tool(
        dir.path(),
        "run_bash",
        &args.to_string(),
        &["--auto-approve"],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let left = with_marker(&marker);
    for pid in &left {
        // SAFETY: a plain signal to a process this test started.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert_eq!(left, Vec::<i32>::new());
}
