//! Helpers shared by the integration tests.

pub use agent_nvim::test_support::{fake_host, mock_llm};
pub mod nvim;
pub mod process;
pub mod pty;

use std::path::Path;
use std::process::{Command, Output};

/// The agent-nvim binary cargo built for these tests, saving its conversations in a state
/// directory of the test process's own (never the user's).
pub fn bin() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-nvim"));
    command.env("XDG_STATE_HOME", state_home());
    command
}

/// The state directory [`bin`] gives the binary, shared by the tests of this process.
pub fn state_home() -> &'static Path {
    static HOME: std::sync::OnceLock<Option<tempfile::TempDir>> = std::sync::OnceLock::new();
    HOME.get_or_init(|| tempfile::tempdir().ok())
        .as_ref()
        .map_or(Path::new("/nonexistent/agent-nvim-test-state"), |dir| {
            dir.path()
        })
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

/// The tool result for call `id` in request `n` (0-based) to the mock, Anthropic format, as
/// (content, ok). Waits for that request.
pub fn tool_result(mock: &mock_llm::MockLlm, n: usize, id: &str) -> (String, bool) {
    let requests = mock.wait_for_requests(n + 1, std::time::Duration::from_secs(20));
    for message in requests[n].body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
    {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" && block["tool_use_id"] == id {
                let content = block["content"].as_str().unwrap_or_default().to_string();
                return (content, block.get("is_error").is_none());
            }
        }
    }
    panic!("no tool_result for {id} in request {n}");
}

/// A PATH with a shell and nothing else (no git): a machine where checkpoints cannot work.
pub fn path_without_git() -> (tempfile::TempDir, String) {
    let bin = tempfile::tempdir().unwrap();
    for name in ["bash", "sh"] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|dir| std::path::Path::new(dir).join(name))
            .find(|path| path.exists())
            .unwrap();
        std::os::unix::fs::symlink(found, bin.path().join(name)).unwrap();
    }
    let path = bin.path().display().to_string();
    (bin, path)
}

/// A mock Anthropic server for the resume tests: a turn that reads `a.txt`, its answer
/// `It says alpha.`, then `Still alpha.` for the prompt after the resume; each reply reports
/// `usage` (input, output tokens).
pub fn read_then_resume_mock(usage: (u64, u64)) -> mock_llm::MockLlm {
    use mock_llm::{MockLlm, Part, Reply, Wire};
    let turn = |parts| Reply::Turn { parts, usage };
    MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![Part::ToolCall {
                id: "t1".into(),
                name: "read_file".into(),
                args: serde_json::json!({"path": "a.txt"}).to_string(),
            }]),
            turn(vec![Part::Text("It says alpha.".into())]),
            turn(vec![Part::Text("Still alpha.".into())]),
        ],
    )
}

/// Every file beneath `dir`, at any depth.
pub fn files_beneath(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_beneath(&path));
        } else {
            out.push(path);
        }
    }
    out
}
