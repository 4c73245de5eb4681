//! A scripted model server for trying the plugin by hand (in tmux, say): the tests' mock
//! (`agent_nvim::test_support::mock_llm`) on a free loopback port, speaking Anthropic's SSE,
//! answering each request with the next reply of a JSON script.
//!
//! ```sh
//! cargo run --example mock_model -- script.json [chunk_bytes delay_ms]
//! ANTHROPIC_API_KEY=k ANTHROPIC_BASE_URL=<printed url> scripts/dev.sh
//! ```
//!
//! The script is a list of replies; each is a list of parts: `{"text": "..."}`,
//! `{"bash": "command"}`, `{"edit": ["path", "old", "new"]}`, `{"read": "path"}`, or
//! `{"tool": "name", "args": "raw JSON text"}`. With `chunk_bytes` and `delay_ms`, bodies are
//! written in pieces that size, that far apart (a slow stream, to type while it runs).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::time::Duration;

use agent_nvim::test_support::mock_llm::{MockLlm, Pace, Part, Reply, Wire};
use serde_json::{json, Value};

fn part(n: usize, value: &Value) -> Part {
    let id = format!("call_{n}");
    let call = |name: &str, args: Value| Part::ToolCall {
        id: id.clone(),
        name: name.into(),
        args: args.to_string(),
    };
    if let Some(text) = value["text"].as_str() {
        Part::Text(text.into())
    } else if let Some(command) = value["bash"].as_str() {
        call("run_bash", json!({ "command": command }))
    } else if let Some(path) = value["read"].as_str() {
        call("read_file", json!({ "path": path }))
    } else if let Some([path, old, new]) = value["edit"].as_array().map(Vec::as_slice) {
        call(
            "edit_file",
            json!({ "path": path, "old_str": old, "new_str": new }),
        )
    } else if let Some(name) = value["tool"].as_str() {
        Part::ToolCall {
            id,
            name: name.into(),
            args: value["args"].as_str().unwrap_or("{}").into(),
        }
    } else {
        panic!("mock_model: a part it does not know: {value}")
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: mock_model SCRIPT.json [chunk_bytes delay_ms]");
        std::process::exit(2);
    };
    let script: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut n = 0;
    let replies = script
        .as_array()
        .expect("mock_model: the script is a list of replies")
        .iter()
        .map(|reply| Reply::Turn {
            parts: reply
                .as_array()
                .expect("mock_model: a reply is a list of parts")
                .iter()
                .map(|p| {
                    n += 1;
                    part(n, p)
                })
                .collect(),
            usage: (100, 20),
        })
        .collect();
    let mut mock = MockLlm::start(Wire::Anthropic, replies);
    if let (Some(chunk), Some(delay)) = (args.get(1), args.get(2)) {
        mock = mock.with_pace(Pace {
            chunk_bytes: Some(chunk.parse().unwrap()),
            delay: Duration::from_millis(delay.parse().unwrap()),
        });
    }
    println!("{}", mock.base_url());
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
