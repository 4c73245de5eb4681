//! The API key in Neovim: never in the chat or the log, even when the API echoes it, and never
//! in run_bash's environment unless `pass_env` lists it.

use serde_json::json;

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
use crate::support::nvim::{setup_lua, Nvim, Options};
use crate::support::tool_result;

const CHAT: &str = "agent: chat";
const KEY: &str = "sk-ant-nvim-test-7f7f7f";

async fn start(mock: &MockLlm, extra_setup: &str) -> Nvim {
    Nvim::start(Options {
        ui: None,
        env: vec![
            ("ANTHROPIC_API_KEY".into(), KEY.into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua(extra_setup),
    })
    .await
}

async fn wait_idle(nvim: &Nvim) {
    nvim.wait_for("require('agent').status().state == 'idle'")
        .await;
}

#[tokio::test]
async fn a_401_and_a_500_that_echo_the_key_show_it_redacted_in_the_chat_and_the_log() {
    let echo = |code| Reply::Status {
        code,
        message: format!("invalid x-api-key: {KEY}"),
        retry_after: Some(0),
    };
    // The 401 once; the 500 with its four retries.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            echo(401),
            echo(500),
            echo(500),
            echo(500),
            echo(500),
            echo(500),
        ],
    );
    let nvim = start(&mock, "").await;
    nvim.cmd("Agent first").await;
    nvim.wait_for_line(CHAT, "API error 401").await;
    wait_idle(&nvim).await;
    nvim.cmd("Agent second").await;
    nvim.wait_for_line(CHAT, "(attempt 4)").await;
    wait_idle(&nvim).await;
    assert_eq!(mock.requests().len(), 6);
    let chat = nvim.buffer_lines(CHAT).await.join("\n");
    assert!(!chat.contains(KEY), "the key is in the chat:\n{chat}");
    assert_eq!(
        chat.matches("invalid x-api-key: [redacted]").count(),
        6,
        "each error once, each retry once:\n{chat}"
    );
    let log_path = nvim
        .lua("return require('agent.rpc').logfile()", vec![])
        .await;
    let log = std::fs::read_to_string(log_path.as_str().unwrap()).unwrap();
    assert!(!log.contains(KEY), "the key is in the log:\n{log}");
    assert!(log.contains("invalid x-api-key: [redacted]"), "{log}");
}

#[tokio::test]
async fn run_bash_gets_no_key_unless_pass_env_lists_it() {
    for (setup, want) in [
        ("auto_approve = true", "KEYS:\n"),
        (
            "auto_approve = true, pass_env = { 'ANTHROPIC_API_KEY' }",
            "KEYS:\nANTHROPIC_API_KEY=[redacted]\n",
        ),
    ] {
        let mock = MockLlm::start(
            Wire::Anthropic,
            vec![
                Reply::Turn {
                    parts: vec![Part::ToolCall {
                        id: "t1".into(),
                        name: "run_bash".into(),
                        args: json!({"command": "echo KEYS:; env | grep -E '^(ANTHROPIC|OPENAI)_API_KEY=' | sort"})
                            .to_string(),
                    }],
                    usage: (1, 1),
                },
                Reply::Turn {
                    parts: vec![Part::Text("ok".into())],
                    usage: (1, 1),
                },
            ],
        );
        let nvim = start(&mock, setup).await;
        nvim.cmd("Agent go").await;
        let (content, ok) = tool_result(&mock, 1, "t1");
        assert!(ok);
        assert_eq!(content, format!("{want}\n[exit 0]"), "with {setup}");
        wait_idle(&nvim).await;
    }
}

#[tokio::test]
async fn pass_env_must_be_a_list_of_variable_names() {
    let nvim = Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: String::new(),
    })
    .await;
    nvim.lua(
        "require('agent').setup({ pass_env = { 'OPENAI_API_KEY', 'A B' } })",
        vec![],
    )
    .await;
    let messages = nvim.messages().await;
    assert!(
        messages.contains("agent: `pass_env` should be a list of environment variable names, got"),
        "{messages}"
    );
    let kept = nvim
        .lua("return #require('agent.config').options.pass_env", vec![])
        .await;
    assert_eq!(kept, rmpv::Value::from(0), "the default is used instead");
    nvim.lua(
        "require('agent').setup({ pass_env = { 'OPENAI_API_KEY' } })",
        vec![],
    )
    .await;
    let kept = nvim
        .lua("return require('agent.config').options.pass_env", vec![])
        .await;
    assert_eq!(
        kept,
        rmpv::Value::Array(vec![rmpv::Value::from("OPENAI_API_KEY")])
    );
    let report = nvim.checkhealth().await;
    assert!(
        report.contains("run_bash's commands get OPENAI_API_KEY (pass_env)"),
        "{report}"
    );
}

#[tokio::test]
async fn max_edit_mb_reaches_the_backend() {
    let edit = || Reply::Turn {
        parts: vec![Part::ToolCall {
            id: "e1".into(),
            name: "edit_file".into(),
            args: json!({"path": "big.txt", "old_str": "x", "new_str": "y"}).to_string(),
        }],
        usage: (1, 1),
    };
    let done = || Reply::Turn {
        parts: vec![Part::Text("ok".into())],
        usage: (1, 1),
    };
    let mock = MockLlm::start(Wire::Anthropic, vec![edit(), done()]);
    let nvim = start(&mock, "auto_approve = true, max_edit_mb = 1").await;
    std::fs::write(
        nvim.workspace.path().join("big.txt"),
        format!("x{}", "-".repeat(2 * 1024 * 1024)),
    )
    .unwrap();
    nvim.cmd("Agent go").await;
    assert_eq!(
        tool_result(&mock, 1, "e1"),
        (
            "edit_file: big.txt is 2.1 MB, more than the 1 MB edit_file handles.".to_string(),
            false
        )
    );
    wait_idle(&nvim).await;
}
