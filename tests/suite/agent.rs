//! The turn loop over the real HTTP stack against the mock server, in both wire formats.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_nvim::agent::{Agent, Event, Outcome};
use agent_nvim::approval::Gate;
use agent_nvim::editor::NoEditor;
use agent_nvim::llm::{ApiKey, Client, ProviderConfig, ProviderKind};
use agent_nvim::tools::{Executor, Settings, ToolContext};
use agent_nvim::workspace::Workspace;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::support::mock_llm::{MockLlm, Pace, Part, Recorded, Reply, Wire};
use crate::support::process::alive;

const WIRES: [Wire; 2] = [Wire::Anthropic, Wire::OpenAi];

fn text(s: &str) -> Part {
    Part::Text(s.to_string())
}

fn call(id: &str, name: &str, args: Value) -> Part {
    Part::ToolCall {
        id: id.into(),
        name: name.into(),
        args: args.to_string(),
    }
}

fn turn(parts: Vec<Part>) -> Reply {
    Reply::Turn {
        parts,
        usage: (100, 20),
    }
}

fn agent(mock: &MockLlm, wire: Wire, root: &Path, max_turns: u32) -> Agent {
    let kind = match wire {
        Wire::Anthropic => ProviderKind::Anthropic,
        Wire::OpenAi | Wire::OpenAiOllamaStyle => ProviderKind::OpenAi,
    };
    let config = ProviderConfig {
        kind,
        model: "test-model".into(),
        base_url: mock.base_url(),
        api_key: Some(ApiKey::new("test-key".into())),
    };
    let executor = Executor::new(ToolContext {
        workspace: Workspace::new(root).unwrap(),
        gate: Arc::new(Gate::new(true, None)),
        editor: Arc::new(NoEditor),
        settings: Settings {
            command_timeout: Duration::from_secs(30),
            shell: None,
            ..Settings::default()
        },
        checkpoints: None,
    });
    let client = Client::new(config, &executor.catalogue())
        .unwrap()
        .with_retry_base(Duration::from_millis(10));
    Agent::new(client, executor, max_turns)
}

/// Runs one prompt and returns its outcome and every event it produced.
async fn prompt(agent: &mut Agent, text: &str) -> (Outcome, Vec<Event>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let outcome = agent
        .prompt(text.to_string(), &tx, &CancellationToken::new())
        .await;
    drop(tx);
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push(e);
    }
    (outcome, events)
}

fn streamed_text(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| {
            if let Event::Text { text } = e {
                Some(text.as_str())
            } else {
                None
            }
        })
        .collect()
}

fn finished(events: &[Event]) -> Vec<(String, bool, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ToolFinished {
                name, ok, summary, ..
            } => Some((name.clone(), *ok, summary.clone())),
            _ => None,
        })
        .collect()
}

fn last_message(event: &[Event]) -> String {
    match event.last() {
        Some(Event::TurnDone { message, .. }) => message.clone(),
        other => panic!("the last event should be turn_done, got {other:?}"),
    }
}

/// The tool results a recorded request sends back, as (id, ok, text), in either wire format.
fn results_sent(request: &Recorded) -> Vec<(String, bool, String)> {
    let messages = request.body["messages"].as_array().unwrap();
    if request.path.ends_with("/v1/messages") {
        let last = messages.last().unwrap();
        assert_eq!(last["role"], "user");
        last["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| {
                (
                    b["tool_use_id"].as_str().unwrap().to_string(),
                    b.get("is_error").is_none(),
                    b["content"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    } else {
        let last_assistant = messages
            .iter()
            .rposition(|m| m["role"] == "assistant")
            .unwrap();
        messages[last_assistant + 1..]
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| {
                let content = m["content"].as_str().unwrap();
                let ok = !content.starts_with("ERROR: ");
                (
                    m["tool_call_id"].as_str().unwrap().to_string(),
                    ok,
                    content.trim_start_matches("ERROR: ").to_string(),
                )
            })
            .collect()
    }
}

#[tokio::test]
async fn text_streams_as_it_arrives_even_split_byte_by_byte() {
    for wire in WIRES {
        let mock = MockLlm::start(wire, vec![turn(vec![text("Héllo, wörld — ünïcode ✓")])])
            .with_pace(Pace {
                chunk_bytes: Some(1),
                delay: Duration::ZERO,
            });
        let dir = tempfile::tempdir().unwrap();
        let mut agent = agent(&mock, wire, dir.path(), 40);
        let (outcome, events) = prompt(&mut agent, "hi").await;
        assert_eq!(outcome, Outcome::Done, "{wire:?}");
        assert_eq!(
            streamed_text(&events),
            "Héllo, wörld — ünïcode ✓",
            "{wire:?}"
        );
        assert!(
            events
                .iter()
                .filter(|e| matches!(e, Event::Text { .. }))
                .count()
                > 1,
            "{wire:?}: text should come in pieces"
        );
        assert_eq!(
            last_message(&events),
            "done · 100 in / 20 out tokens",
            "{wire:?}"
        );
        let request = &mock.requests()[0];
        assert_eq!(request.body["model"], "test-model");
        assert_eq!(request.body["stream"], true);
    }
}

#[tokio::test]
async fn several_tool_calls_run_in_order_and_all_results_go_back_in_one_message() {
    for wire in [Wire::Anthropic, Wire::OpenAi, Wire::OpenAiOllamaStyle] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let mock = MockLlm::start(
            wire,
            vec![
                turn(vec![
                    text("Looking."),
                    call(
                        "c1",
                        "read_file",
                        json!({"path": "a.txt", "padding": "x".repeat(300)}),
                    ),
                    call("c2", "list_files", json!({})),
                    call("c3", "read_file", json!({"path": "missing.txt"})),
                ]),
                turn(vec![text("All read.")]),
            ],
        )
        .with_pace(Pace {
            chunk_bytes: Some(7),
            delay: Duration::ZERO,
        });
        let mut agent = agent(&mock, wire, dir.path(), 40);
        let (outcome, events) = prompt(&mut agent, "look around").await;
        assert_eq!(outcome, Outcome::Done, "{wire:?}");
        assert_eq!(
            finished(&events),
            vec![
                ("read_file".into(), true, "read a.txt (6 chars)".into()),
                ("list_files".into(), true, "list . (2 entries)".into()),
                (
                    "read_file".into(),
                    false,
                    "No such file: missing.txt".into()
                ),
            ],
            "{wire:?}"
        );
        let requests = mock.requests();
        assert_eq!(requests.len(), 2, "{wire:?}");
        assert_eq!(
            results_sent(&requests[1]),
            vec![
                ("c1".into(), true, "alpha\n".into()),
                ("c2".into(), true, "src/\na.txt".into()),
                ("c3".into(), false, "No such file: missing.txt".into()),
            ],
            "{wire:?}"
        );
        assert_eq!(streamed_text(&events), "Looking.All read.");
    }
}

#[tokio::test]
async fn a_refused_path_reaches_the_model_as_the_refused_text() {
    for wire in WIRES {
        let dir = tempfile::tempdir().unwrap();
        let mock = MockLlm::start(
            wire,
            vec![
                turn(vec![call(
                    "c1",
                    "read_file",
                    json!({"path": "../../.ssh/id_rsa"}),
                )]),
                turn(vec![text("Refused.")]),
            ],
        );
        let mut agent = agent(&mock, wire, dir.path(), 40);
        let (outcome, _) = prompt(&mut agent, "read my key").await;
        assert_eq!(outcome, Outcome::Done);
        assert_eq!(
            results_sent(&mock.requests()[1]),
            vec![(
                "c1".into(),
                false,
                "Refused: '../../.ssh/id_rsa' resolves outside the workspace root.".into()
            )],
            "{wire:?}"
        );
    }
}

#[tokio::test]
async fn overloaded_and_rate_limited_requests_are_retried_then_succeed() {
    for wire in WIRES {
        let dir = tempfile::tempdir().unwrap();
        let mock = MockLlm::start(
            wire,
            vec![
                Reply::Status {
                    code: 529,
                    message: "Overloaded".into(),
                    retry_after: Some(0),
                },
                Reply::Status {
                    code: 429,
                    message: "Slow down".into(),
                    retry_after: None,
                },
                turn(vec![text("finally")]),
            ],
        );
        let mut agent = agent(&mock, wire, dir.path(), 40);
        let (outcome, events) = prompt(&mut agent, "hi").await;
        assert_eq!(outcome, Outcome::Done, "{wire:?}");
        assert_eq!(streamed_text(&events), "finally");
        let retries: Vec<u32> = events
            .iter()
            .filter_map(|e| {
                if let Event::Retrying { attempt, .. } = e {
                    Some(*attempt)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(retries, vec![1, 2]);
        assert_eq!(mock.requests().len(), 3);
    }
}

#[tokio::test]
async fn a_non_retryable_error_shows_status_message_and_request_id() {
    for wire in WIRES {
        let dir = tempfile::tempdir().unwrap();
        let mock = MockLlm::start(
            wire,
            vec![Reply::Status {
                code: 400,
                message: "prompt is too long".into(),
                retry_after: None,
            }],
        );
        let mut agent = agent(&mock, wire, dir.path(), 40);
        let (outcome, events) = prompt(&mut agent, "hi").await;
        assert_eq!(outcome, Outcome::Failed);
        let message = last_message(&events);
        assert!(message.starts_with("agent: API error 400: "), "{message}");
        assert!(message.contains("prompt is too long"), "{message}");
        assert!(message.ends_with("(request id req_mock_1)"), "{message}");
    }
}

#[tokio::test]
async fn a_cut_stream_is_a_clear_error_and_the_next_prompt_works() {
    for wire in WIRES {
        let dir = tempfile::tempdir().unwrap();
        let mock = MockLlm::start(
            wire,
            vec![
                Reply::CutAfter {
                    bytes: 200,
                    parts: vec![text("this reply will be cut off somewhere in the middle")],
                },
                turn(vec![text("second try")]),
            ],
        );
        let mut agent = agent(&mock, wire, dir.path(), 40);
        let (outcome, events) = prompt(&mut agent, "first").await;
        assert_eq!(outcome, Outcome::Failed, "{wire:?}");
        assert!(
            last_message(&events).contains("the model's reply broke off"),
            "{}",
            last_message(&events)
        );
        let (outcome, events) = prompt(&mut agent, "again").await;
        assert_eq!(outcome, Outcome::Done, "{wire:?}");
        assert_eq!(streamed_text(&events), "second try");
    }
}

#[tokio::test]
async fn malformed_tool_json_is_a_failed_result_not_a_crash() {
    for wire in WIRES {
        let dir = tempfile::tempdir().unwrap();
        let mock = MockLlm::start(
            wire,
            vec![
                turn(vec![Part::ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    args: r#"{"path": "a.txt""#.into(),
                }]),
                turn(vec![text("ok")]),
            ],
        );
        let mut agent = agent(&mock, wire, dir.path(), 40);
        let (outcome, events) = prompt(&mut agent, "hi").await;
        assert_eq!(outcome, Outcome::Done);
        let sent = results_sent(&mock.requests()[1]);
        assert_eq!(sent.len(), 1);
        assert!(!sent[0].1);
        assert!(
            sent[0]
                .2
                .starts_with("read_file: the arguments are not valid JSON"),
            "{}",
            sent[0].2
        );
        assert!(!finished(&events)[0].1);
    }
}

#[tokio::test]
async fn an_unknown_tool_is_answered_and_the_turn_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![call("c1", "write_file", json!({}))]),
            turn(vec![text("ok")]),
        ],
    );
    let mut agent = agent(&mock, Wire::Anthropic, dir.path(), 40);
    assert_eq!(prompt(&mut agent, "hi").await.0, Outcome::Done);
    assert_eq!(
        results_sent(&mock.requests()[1]),
        vec![("c1".into(), false, "Unknown tool 'write_file'.".into())]
    );
}

#[tokio::test]
async fn max_turns_stops_a_model_that_never_finishes() {
    for wire in WIRES {
        let dir = tempfile::tempdir().unwrap();
        let replies = (0..3)
            .map(|i| turn(vec![call(&format!("c{i}"), "list_files", json!({}))]))
            .collect();
        let mock = MockLlm::start(wire, replies);
        let mut agent = agent(&mock, wire, dir.path(), 3);
        let (outcome, events) = prompt(&mut agent, "loop forever").await;
        assert_eq!(outcome, Outcome::MaxTurns);
        assert_eq!(
            last_message(&events),
            "Stopped after 3 model turns without finishing."
        );
        assert_eq!(mock.requests().len(), 3);
        assert_eq!(agent.history().len(), 7, "prompt + 3 x (reply, results)");
    }
}

#[tokio::test]
async fn cancel_during_a_long_command_kills_its_tree_and_the_conversation_stays_valid() {
    for wire in WIRES {
        let dir = tempfile::tempdir().unwrap();
        let mock = MockLlm::start(
            wire,
            vec![
                turn(vec![
                    call(
                        "c1",
                        "run_bash",
                        json!({"command": "sleep 1000 & echo $! > bg.pid; echo $$ > sh.pid; sleep 1000"}),
                    ),
                    call("c2", "list_files", json!({})),
                ]),
                turn(vec![text("after cancel")]),
            ],
        );
        let mut agent = agent(&mock, wire, dir.path(), 40);
        let cancel = CancellationToken::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let root = dir.path().to_path_buf();
        let canceller = cancel.clone();
        tokio::spawn(async move {
            for _ in 0..200 {
                if root.join("bg.pid").exists() && root.join("sh.pid").exists() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            canceller.cancel();
        });
        let outcome = tokio::time::timeout(
            Duration::from_secs(20),
            agent.prompt("run it".into(), &tx, &cancel),
        )
        .await
        .unwrap();
        assert_eq!(outcome, Outcome::Cancelled, "{wire:?}");
        drop(tx);
        let mut events = Vec::new();
        while let Some(e) = rx.recv().await {
            events.push(e);
        }
        let rows = finished(&events);
        assert_eq!(rows.len(), 2, "every call answered: {rows:?}");
        assert!(!rows[0].1 && !rows[1].1);
        let pids: Vec<i32> = ["bg.pid", "sh.pid"]
            .iter()
            .map(|f| {
                std::fs::read_to_string(dir.path().join(f))
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap()
            })
            .collect();
        for _ in 0..100 {
            if pids.iter().all(|p| !alive(*p)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            pids.iter().all(|p| !alive(*p)),
            "{wire:?}: a process of the cancelled command survived"
        );
        // The next prompt works: the history answers every call.
        let (outcome, events) = prompt(&mut agent, "next").await;
        assert_eq!(outcome, Outcome::Done);
        assert_eq!(streamed_text(&events), "after cancel");
        let sent = results_sent(&mock.requests()[1]);
        assert_eq!(
            sent.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
            vec!["c1", "c2"]
        );
        assert!(
            sent[0].2.contains("[cancelled - process tree killed]"),
            "{}",
            sent[0].2
        );
        assert_eq!(sent[1].2, "Cancelled by the user before it ran.");
    }
}

#[tokio::test]
async fn the_system_prompt_and_tools_are_byte_identical_across_requests() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![call("c1", "list_files", json!({}))]),
            turn(vec![text("ok")]),
        ],
    );
    let mut agent = agent(&mock, Wire::Anthropic, dir.path(), 40);
    prompt(&mut agent, "hi").await;
    let requests = mock.requests();
    assert_eq!(
        requests[0].body["tools"].to_string(),
        requests[1].body["tools"].to_string()
    );
    assert_eq!(requests[0].body["system"], requests[1].body["system"]);
    let tools = requests[0].body["tools"].as_array().unwrap();
    let names: Vec<_> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["read_file", "list_files", "edit_file", "run_bash"]);
    assert_eq!(tools[3]["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(
        requests[0].body["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(requests[0].header("x-api-key"), Some("test-key"));
    assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
}
