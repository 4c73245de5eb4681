//! Helpers shared by the integration tests.

pub mod mock_llm;
pub mod nvim;
pub mod pty;

use std::path::Path;
use std::process::{Command, Output};

/// The agent-nvim binary cargo built for these tests.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agent-nvim"))
}

/// Runs `agent-nvim tool NAME JSON` in `dir` with extra flags, stdin empty (not a terminal).
pub fn tool(dir: &Path, name: &str, json: &str, flags: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .arg("tool")
        .arg(name)
        .arg(json)
        .args(flags)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// Parses the one JSON object `agent-nvim tool` prints.
pub fn json(output: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim_end()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout:?}"))
}
