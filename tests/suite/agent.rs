//! The turn loop over the real HTTP stack against the mock server, in both wire formats.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_nvim::agent::{Agent, Event, Outcome};
use agent_nvim::approval::Gate;
use agent_nvim::editor::NoEditor;
use agent_nvim::llm::{ApiKey, Client, Key, OpenAiApi, ProviderConfig, ProviderKind, Tuning};
use agent_nvim::tools::{Executor, Settings, ToolContext};
use agent_nvim::workspace::Workspace;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::support::mock_llm::{MockLlm, Pace, Part, Recorded, Reply, Wire};
use crate::support::process::alive;

/// The wire formats every turn-loop test runs in (Ollama's, which has no call ids, has its own).
const WIRES: [Wire; 3] = [Wire::Anthropic, Wire::OpenAi, Wire::Responses];

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
    agent_tuned(mock, wire, root, max_turns, Tuning::default())
}

/// [`agent`] with the model tuned (thinking, effort, model table); the Responses wire is chosen
/// for [`Wire::Responses`].
fn agent_tuned(mock: &MockLlm, wire: Wire, root: &Path, max_turns: u32, tuning: Tuning) -> Agent {
    let key = Key::Given {
        key: ApiKey::new("test-key".into()),
        from: "ANTHROPIC_API_KEY".into(),
    };
    agent_keyed(mock, wire, root, max_turns, tuning, key)
}

/// [`agent_tuned`] with the key had as `key` says.
fn agent_keyed(
    mock: &MockLlm,
    wire: Wire,
    root: &Path,
    max_turns: u32,
    mut tuning: Tuning,
    key: Key,
) -> Agent {
    if wire == Wire::Responses {
        tuning.api = OpenAiApi::Responses;
    }
    let kind = match wire {
        Wire::Anthropic => ProviderKind::Anthropic,
        Wire::Ollama => ProviderKind::Ollama,
        Wire::OpenAi | Wire::OpenAiOllamaStyle | Wire::Responses => ProviderKind::OpenAi,
    };
    let config = ProviderConfig {
        kind,
        model: "test-model".into(),
        base_url: mock.base_url(),
        key,
        tuning,
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
        .prompt(text.into(), &tx, &CancellationToken::new())
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

/// The tool results a recorded request sends back, as (id, ok, text), in any wire format.
fn results_sent(request: &Recorded) -> Vec<(String, bool, String)> {
    if request.path.ends_with("/responses") {
        let input = request.body["input"].as_array().unwrap();
        let last_call = input
            .iter()
            .rposition(|m| m["type"] == "function_call")
            .unwrap();
        return input[last_call + 1..]
            .iter()
            .filter(|m| m["type"] == "function_call_output")
            .map(|m| {
                let output = m["output"].as_str().unwrap();
                (
                    m["call_id"].as_str().unwrap().to_string(),
                    !output.starts_with("ERROR: "),
                    output.trim_start_matches("ERROR: ").to_string(),
                )
            })
            .collect();
    }
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
                message: "max_tokens: Field required".into(),
                retry_after: None,
            }],
        );
        let mut agent = agent(&mock, wire, dir.path(), 40);
        let (outcome, events) = prompt(&mut agent, "hi").await;
        assert_eq!(outcome, Outcome::Failed);
        let message = last_message(&events);
        assert!(message.starts_with("API error 400: "), "{message}");
        assert!(message.contains("max_tokens: Field required"), "{message}");
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
async fn a_reply_stopped_at_the_output_limit_is_kept_and_said_in_every_wire() {
    for wire in [Wire::Anthropic, Wire::OpenAi, Wire::Responses, Wire::Ollama] {
        let dir = tempfile::tempdir().unwrap();
        let mock = MockLlm::start(
            wire,
            vec![
                Reply::Limited {
                    parts: vec![text("the first half of a long ans")],
                    usage: (10, 4096),
                },
                turn(vec![text("a whole answer")]),
            ],
        );
        let mut agent = agent(&mock, wire, dir.path(), 40);
        let (outcome, events) = prompt(&mut agent, "write a lot").await;
        assert_eq!(outcome, Outcome::Done, "{wire:?}");
        assert_eq!(streamed_text(&events), "the first half of a long ans");
        let said: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                Event::Notice { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(said, [agent_nvim::agent::CUT_NOTICE], "{wire:?}");
        // A reply that ended as usual says nothing of it.
        let (_, events) = prompt(&mut agent, "again").await;
        assert!(
            !events.iter().any(|e| matches!(e, Event::Notice { .. })),
            "{wire:?}: {events:?}"
        );
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

fn thoughts(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Thought { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_thinking_turn_sends_its_signed_and_redacted_thinking_back_in_place_before_the_tool_use()
{
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "A\n").unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![
                Part::Thinking {
                    text: "The file may hold the answer.".into(),
                    signature: "sig-EqQBCgIYAhIM".into(),
                },
                Part::Redacted {
                    data: "EmwKAhgBEgy3va3p".into(),
                },
                text("Reading it."),
                call("t1", "read_file", json!({"path": "a.txt"})),
            ]),
            turn(vec![
                Part::Thinking {
                    text: "It says A.".into(),
                    signature: "sig-2".into(),
                },
                text("It says A."),
            ]),
        ],
    );
    let tuning = Tuning {
        thinking: agent_nvim::llm::Thinking::Budget(4000),
        ..Tuning::default()
    };
    let mut agent = agent_tuned(&mock, Wire::Anthropic, dir.path(), 40, tuning);
    let (outcome, events) = prompt(&mut agent, "what is in a.txt?").await;
    assert_eq!(outcome, Outcome::Done);
    // The thinking streamed apart from the answer.
    assert_eq!(thoughts(&events), "The file may hold the answer.It says A.");
    assert_eq!(streamed_text(&events), "Reading it.It says A.");

    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        let body = &request.body;
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 4000})
        );
        assert!(body["max_tokens"].as_u64().unwrap() > 4000, "{body}");
        for forbidden in ["temperature", "top_k", "top_p", "tool_choice"] {
            assert!(body.get(forbidden).is_none(), "{forbidden} sent: {body}");
        }
        assert_eq!(
            request.header("anthropic-beta"),
            Some("interleaved-thinking-2025-05-14")
        );
    }
    // The second request's assistant message: the thinking block with its signature and the
    // redacted block exactly as received, in their place before the text and the tool_use.
    let assistant = &requests[1].body["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["content"],
        json!([
            {"type": "thinking", "thinking": "The file may hold the answer.",
             "signature": "sig-EqQBCgIYAhIM"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3p"},
            {"type": "text", "text": "Reading it."},
            {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a.txt"}}
        ])
    );
    // And the reply that ended the turn keeps its thinking for the next prompt's requests.
    let last = agent.history().last().unwrap();
    let agent_nvim::llm::Message::Assistant { reasoning, .. } = last else {
        panic!("the last message should be the answer: {last:?}");
    };
    assert_eq!(reasoning[0].item["signature"], "sig-2");
}

#[tokio::test]
async fn without_thinking_no_thinking_setting_or_beta_header_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Wire::Anthropic, vec![turn(vec![text("hi")])]);
    let tuning = Tuning {
        thinking: agent_nvim::llm::Thinking::Off,
        ..Tuning::default()
    };
    let mut agent = agent_tuned(&mock, Wire::Anthropic, dir.path(), 40, tuning);
    prompt(&mut agent, "hi").await;
    let request = &mock.requests()[0];
    assert!(request.body.get("thinking").is_none());
    assert_eq!(request.body["max_tokens"], 16_000);
    assert_eq!(request.header("anthropic-beta"), None);
}

#[tokio::test]
async fn reasoning_effort_goes_in_the_chat_completions_body_and_the_responses_reasoning() {
    for wire in [Wire::OpenAi, Wire::Responses] {
        let dir = tempfile::tempdir().unwrap();
        let mock = MockLlm::start(wire, vec![turn(vec![text("hi")])]);
        let tuning = Tuning {
            effort: Some("high".into()),
            ..Tuning::default()
        };
        let mut agent = agent_tuned(&mock, wire, dir.path(), 40, tuning);
        prompt(&mut agent, "hi").await;
        let body = &mock.requests()[0].body;
        match wire {
            Wire::OpenAi => assert_eq!(body["reasoning_effort"], "high", "{body}"),
            _ => assert_eq!(body["reasoning"], json!({"effort": "high"}), "{body}"),
        }
    }
    // Not chosen: not sent.
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Wire::OpenAi, vec![turn(vec![text("hi")])]);
    prompt(&mut agent(&mock, Wire::OpenAi, dir.path(), 40), "hi").await;
    assert!(mock.requests()[0].body.get("reasoning_effort").is_none());
}

#[tokio::test]
async fn the_responses_api_runs_a_call_in_pieces_and_sends_its_output_and_reasoning_back() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    let mock = MockLlm::start(
        Wire::Responses,
        vec![
            turn(vec![
                Part::Reasoning {
                    id: "rs_1".into(),
                    summary: "Reading the file first.".into(),
                    encrypted: "gAAAAB-enc-1".into(),
                },
                text("Let me read."),
                call("call_7", "read_file", json!({"path": "a.txt"})),
            ]),
            turn(vec![text("It says alpha.")]),
        ],
    );
    let mut agent = agent(&mock, Wire::Responses, dir.path(), 40);
    let (outcome, events) = prompt(&mut agent, "read a.txt").await;
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(streamed_text(&events), "Let me read.It says alpha.");
    assert_eq!(thoughts(&events), "Reading the file first.");
    let requests = mock.requests();
    assert!(requests[0].path.ends_with("/v1/responses"));
    let first = &requests[0].body;
    assert_eq!(first["store"], false);
    assert_eq!(first["stream"], true);
    assert_eq!(first["include"], json!(["reasoning.encrypted_content"]));
    assert!(first["instructions"]
        .as_str()
        .unwrap()
        .contains("coding agent"));
    let input = requests[1].body["input"].as_array().unwrap();
    assert_eq!(
        input[1],
        json!({"id": "rs_1", "type": "reasoning",
               "summary": [{"type": "summary_text", "text": "Reading the file first."}],
               "encrypted_content": "gAAAAB-enc-1"}),
        "the reasoning item goes back as it came, first"
    );
    assert_eq!(input[2]["type"], "message");
    assert_eq!(
        input[3],
        json!({"type": "function_call", "call_id": "call_7", "name": "read_file",
               "arguments": json!({"path": "a.txt"}).to_string()})
    );
    assert_eq!(input[4]["type"], "function_call_output");
    assert_eq!(input[4]["call_id"], "call_7");
    assert!(input[4]["output"].as_str().unwrap().contains("alpha"));
}

#[tokio::test]
async fn a_failed_response_is_shown_with_its_message_and_the_next_prompt_works() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Wire::Responses,
        vec![
            Reply::Failed {
                message: "The model could not finish.".into(),
            },
            turn(vec![text("fine now")]),
        ],
    );
    let mut agent = agent(&mock, Wire::Responses, dir.path(), 40);
    let (outcome, events) = prompt(&mut agent, "hi").await;
    assert_eq!(outcome, Outcome::Failed);
    let error = events
        .iter()
        .find_map(|e| match e {
            Event::Error { message } => Some(message.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        error,
        "API error during the reply: server_error: The model could not finish."
    );
    let (outcome, events) = prompt(&mut agent, "again").await;
    assert_eq!(
        (outcome, streamed_text(&events)),
        (Outcome::Done, "fine now".into())
    );
}

#[tokio::test]
async fn ollama_gets_num_ctx_from_the_model_table_and_a_model_without_tools_is_named_plainly() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "A\n").unwrap();
    let mock = MockLlm::start(
        Wire::Ollama,
        vec![
            turn(vec![call("ignored", "read_file", json!({"path": "a.txt"}))]),
            turn(vec![text("read it")]),
        ],
    );
    let mut tuning = Tuning::default();
    tuning.models.insert(
        "test-model".into(),
        agent_nvim::llm::models::ModelEntry {
            context: Some(32_768),
            price: None,
            images: None,
        },
    );
    let mut tuned = agent_tuned(&mock, Wire::Ollama, dir.path(), 40, tuning);
    let (outcome, events) = prompt(&mut tuned, "read a.txt").await;
    assert_eq!(outcome, Outcome::Done);
    assert!(finished(&events)[0].1, "{events:?}");
    let requests = mock.requests();
    assert_eq!(requests[0].path, "/api/chat");
    assert_eq!(requests[0].body["options"], json!({"num_ctx": 32768}));
    // The result goes back under its tool's name, with the file's text.
    let tool = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(tool["role"], "tool");
    assert_eq!(tool["tool_name"], "read_file");
    assert!(tool["content"].as_str().unwrap().contains('A'));

    // An unknown model assumes a 128k window; Ollama's refusal of a model without tools says
    // which model to take instead.
    let mock = MockLlm::start(
        Wire::Ollama,
        vec![Reply::Status {
            code: 400,
            message: "registry.ollama.ai/library/test-model:latest does not support tools".into(),
            retry_after: None,
        }],
    );
    let mut untuned = agent(&mock, Wire::Ollama, dir.path(), 40);
    let (outcome, events) = prompt(&mut untuned, "hi").await;
    assert_eq!(outcome, Outcome::Failed);
    // (32k for a local model the table does not know: Ollama reserves memory for all of it.)
    assert_eq!(mock.requests()[0].body["options"]["num_ctx"], 32_768);
    let message = last_message(&events);
    assert!(
        message.contains("test-model has no tool support")
            && message.contains("ollama pull qwen3-coder"),
        "{message}"
    );
}

#[tokio::test]
async fn the_turns_cost_shows_with_a_configured_price_and_never_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let replies = || vec![turn(vec![text("hi")])];
    // Unknown price: no cost anywhere.
    let mock = MockLlm::start(Wire::Anthropic, replies());
    let (_, events) = prompt(&mut agent(&mock, Wire::Anthropic, dir.path(), 40), "hi").await;
    assert_eq!(last_message(&events), "done · 100 in / 20 out tokens");
    assert!(events.iter().all(|e| !matches!(
        e,
        Event::Usage { cost: Some(_), .. } | Event::TurnDone { cost: Some(_), .. }
    )));
    // Nor `$0.00` for a turn that failed before any reply.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![Reply::Status {
            code: 400,
            message: "bad".into(),
            retry_after: None,
        }],
    );
    let (_, events) = prompt(&mut agent(&mock, Wire::Anthropic, dir.path(), 40), "hi").await;
    assert!(
        matches!(events.last(), Some(Event::TurnDone { cost: None, .. })),
        "{events:?}"
    );
    // A price: 100 in × $3000 + 20 out × $6000 per million = $0.42.
    let mock = MockLlm::start(Wire::Anthropic, replies());
    let mut agent = agent_tuned(&mock, Wire::Anthropic, dir.path(), 40, priced());
    let (_, events) = prompt(&mut agent, "hi").await;
    assert_eq!(
        last_message(&events),
        "done · 100 in / 20 out tokens · $0.42"
    );
    let Some(Event::TurnDone {
        cost: Some(cost), ..
    }) = events.last()
    else {
        panic!("{events:?}");
    };
    assert!((cost - 0.42).abs() < 1e-9, "{cost}");
}

/// A model priced so that each reply of the mock (100 in, 20 out) costs $0.42.
fn priced() -> Tuning {
    let mut tuning = Tuning::default();
    tuning.models.insert(
        "test-model".into(),
        agent_nvim::llm::models::ModelEntry {
            context: None,
            price: Some(agent_nvim::llm::Price {
                input: 3000.0,
                output: 6000.0,
                cache_write: 3000.0,
                cache_read: 300.0,
            }),
            images: None,
        },
    );
    tuning
}

#[tokio::test]
async fn max_cost_stops_the_conversation_before_a_request_that_would_start_past_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    // Across prompts: $0.42 each; the third would start at $0.84, past $0.50.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![text("one")]),
            turn(vec![text("two")]),
            turn(vec![text("three")]),
        ],
    );
    let mut limited =
        agent_tuned(&mock, Wire::Anthropic, dir.path(), 40, priced()).with_max_cost(Some(0.5));
    assert_eq!(prompt(&mut limited, "first").await.0, Outcome::Done);
    assert_eq!(prompt(&mut limited, "second").await.0, Outcome::Done);
    let (outcome, events) = prompt(&mut limited, "third").await;
    assert_eq!(outcome, Outcome::Failed);
    assert_eq!(mock.requests().len(), 2, "no request after the limit");
    let message = last_message(&events);
    assert_eq!(
        message,
        "stopped before the next request: this conversation has cost $0.84 and its max_cost is $0.50; raise max_cost or start a new conversation"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Error { message: m } if *m == message)),
        "{events:?}"
    );
    assert!((limited.cost() - 0.84).abs() < 1e-9, "{}", limited.cost());

    // Inside one turn: the request after two tool calls would start at $0.84.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![call("c1", "read_file", json!({"path": "a.txt"}))]),
            turn(vec![call("c2", "read_file", json!({"path": "a.txt"}))]),
            turn(vec![text("never sent")]),
        ],
    );
    let mut limited =
        agent_tuned(&mock, Wire::Anthropic, dir.path(), 40, priced()).with_max_cost(Some(0.5));
    let (outcome, events) = prompt(&mut limited, "read it twice").await;
    assert_eq!(outcome, Outcome::Failed);
    assert_eq!(mock.requests().len(), 2);
    assert_eq!(finished(&events).len(), 2, "both calls got their results");
    assert!(
        last_message(&events).contains("has cost $0.84"),
        "{events:?}"
    );

    // No price: nothing can be held to, and the first prompt says so, once.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![turn(vec![text("one")]), turn(vec![text("two")])],
    );
    let mut unpriced = agent(&mock, Wire::Anthropic, dir.path(), 40).with_max_cost(Some(0.01));
    let notices = |events: &[Event]| {
        events
            .iter()
            .filter(|e| matches!(e, Event::Notice { text } if text.contains("max_cost")))
            .count()
    };
    let (outcome, events) = prompt(&mut unpriced, "first").await;
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(notices(&events), 1, "{events:?}");
    let (outcome, events) = prompt(&mut unpriced, "second").await;
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(notices(&events), 0, "{events:?}");
}

#[tokio::test]
async fn max_cost_counts_an_asked_compaction_and_a_resumed_conversations_spending_and_a_new_one_starts_at_zero(
) {
    let dir = tempfile::tempdir().unwrap();
    // $0.42 a request: two prompts and a summary asked for are $1.26.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![text("one")]),
            turn(vec![text("two")]),
            turn(vec![text("SUMMARY")]),
            turn(vec![text("after a new start")]),
        ],
    );
    let mut limited = agent_tuned(&mock, Wire::Anthropic, dir.path(), 40, priced())
        .with_compaction(0.8, 1)
        .with_max_cost(Some(1.0));
    prompt(&mut limited, "first").await;
    prompt(&mut limited, "second").await;
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    limited
        .compact(agent_nvim::agent::Why::Asked, &tx, &cancel)
        .await
        .unwrap();
    assert!((limited.cost() - 1.26).abs() < 1e-9, "{}", limited.cost());
    // Past the limit, a compaction asked for is refused before its request.
    let refused = limited
        .compact(agent_nvim::agent::Why::Asked, &tx, &cancel)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("this conversation has cost $1.26 and its max_cost is $1.00"),
        "{refused}"
    );
    assert_eq!(mock.requests().len(), 3);
    // A new conversation has cost nothing yet.
    limited.reset();
    assert_eq!(limited.cost(), 0.0);
    assert_eq!(prompt(&mut limited, "again").await.0, Outcome::Done);
    assert_eq!(mock.requests().len(), 4);

    // A resumed conversation goes on from what it had cost.
    let mock = MockLlm::start(Wire::Anthropic, vec![turn(vec![text("never sent")])]);
    let mut resumed =
        agent_tuned(&mock, Wire::Anthropic, dir.path(), 40, priced()).with_max_cost(Some(0.5));
    resumed.restore(Vec::new(), Vec::new(), 0.6);
    let (outcome, events) = prompt(&mut resumed, "more").await;
    assert_eq!(outcome, Outcome::Failed);
    assert!(
        last_message(&events).contains("has cost $0.60"),
        "{events:?}"
    );
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn max_cost_holds_side_questions_and_inline_edits_to_the_conversations_spending() {
    let dir = tempfile::tempdir().unwrap();
    // $0.42 a request, one conversation with a $1.00 limit: its turn, an inline edit's turn
    // and a side question are $1.26; then its next turn and another side question are refused.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![text("one")]),
            turn(vec![text("edited")]),
            turn(vec![text("an aside")]),
            turn(vec![text("after a new start")]),
        ],
    );
    let spend = agent_nvim::agent::Spend::default();
    let limited = |agent: Agent| agent.with_max_cost(Some(1.0));
    let mut conversation = limited(agent_tuned(
        &mock,
        Wire::Anthropic,
        dir.path(),
        40,
        priced(),
    ))
    .with_spend(spend.clone());
    let apart = || {
        limited(agent_tuned(
            &mock,
            Wire::Anthropic,
            dir.path(),
            40,
            priced(),
        ))
        .spending_apart(spend.clone())
    };
    let (events, _seen) = tokio::sync::mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let aside = |mut agent: Agent| {
        let (events, cancel) = (events.clone(), cancel.clone());
        async move { agent.aside(&[], "and?", &events, &cancel).await }
    };

    assert_eq!(prompt(&mut conversation, "first").await.0, Outcome::Done);
    let mut inline = apart();
    assert_eq!(prompt(&mut inline, "edit it").await.0, Outcome::Done);
    assert!((spend.total() - 0.84).abs() < 1e-9, "{}", spend.total());
    aside(apart()).await.unwrap();
    assert!((spend.total() - 1.26).abs() < 1e-9, "{}", spend.total());
    // Past the limit: the conversation's own turn, a side question and an inline edit.
    let (outcome, events_seen) = prompt(&mut conversation, "second").await;
    assert_eq!(outcome, Outcome::Failed);
    assert!(
        last_message(&events_seen)
            .contains("this conversation has cost $1.26 and its max_cost is $1.00"),
        "{events_seen:?}"
    );
    let refused = aside(apart()).await.unwrap_err();
    assert!(refused.contains("has cost $1.26"), "{refused}");
    let (outcome, _) = prompt(&mut apart(), "edit again").await;
    assert_eq!(outcome, Outcome::Failed);
    assert_eq!(mock.requests().len(), 3, "nothing sent past the limit");
    // A new conversation has spent nothing, apart or not.
    conversation.reset();
    assert_eq!(spend.total(), 0.0);
    aside(apart()).await.unwrap();
    assert_eq!(mock.requests().len(), 4);
}

/// The text blocks of every message of an Anthropic request, joined.
fn sent_text(request: &Recorded) -> String {
    request.body["messages"].to_string()
}

/// Every tool_use of an Anthropic request has its tool_result in the next message.
fn every_call_has_its_result(request: &Recorded) -> bool {
    let messages = request.body["messages"].as_array().unwrap();
    messages.iter().enumerate().all(|(i, m)| {
        let blocks = m["content"].as_array().unwrap();
        blocks
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .all(|call| {
                messages.get(i + 1).is_some_and(|next| {
                    next["content"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|b| b["type"] == "tool_result" && b["tool_use_id"] == call["id"])
                })
            })
    })
}

fn compacting_agent(mock: &MockLlm, root: &Path, context: u64) -> Agent {
    let mut tuning = Tuning::default();
    tuning.models.insert(
        "test-model".into(),
        agent_nvim::llm::models::ModelEntry {
            context: Some(context),
            price: None,
            images: None,
        },
    );
    agent_tuned(mock, Wire::Anthropic, root, 40, tuning).with_compaction(0.8, 1)
}

fn compacted(events: &[Event]) -> Vec<(usize, u64, u64, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Compacted {
                prompts,
                before,
                after,
                summary,
                ..
            } => Some((*prompts, *before, *after, summary.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_request_over_compact_at_of_the_window_compacts_the_older_turns_before_the_next() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.txt"),
        "A line of the file.\n".repeat(200),
    )
    .unwrap();
    let full = |parts| Reply::Turn {
        parts,
        usage: (900, 10),
    };
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            // Prompt 1: a tool call and its answer; the answer's request used 900 of 1,000.
            turn(vec![call("t1", "read_file", json!({"path": "a.txt"}))]),
            full(vec![text("first answer")]),
            // Prompt 2: keep_turns = 1 keeps prompt 1 whole (nothing to compact yet).
            full(vec![text("second answer")]),
            // Before prompt 3's request: the summary request, of prompt 1 only.
            turn(vec![text("SUMMARY: the user read a.txt, which says A.")]),
            turn(vec![text("third answer")]),
        ],
    );
    let mut agent = compacting_agent(&mock, dir.path(), 1000);
    let (_, first) = prompt(&mut agent, "PROMPT-ONE read a.txt").await;
    assert!(
        compacted(&first).is_empty(),
        "nothing to compact in one prompt"
    );
    let (_, second) = prompt(&mut agent, "PROMPT-TWO and now?").await;
    assert!(
        compacted(&second).is_empty(),
        "keep_turns = 1 keeps the one prompt answered before: {second:?}"
    );
    assert_eq!(mock.requests().len(), 3);
    let (outcome, events) = prompt(&mut agent, "PROMPT-THREE and then?").await;
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(
        streamed_text(&events),
        "third answer",
        "the summary is not the answer"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 5);
    // The summary request: the oldest turn, then the ask.
    let summary = &requests[3];
    assert!(sent_text(summary).contains("PROMPT-ONE"));
    assert!(sent_text(summary).contains("Summarize the conversation so far"));
    assert!(!sent_text(summary).contains("PROMPT-TWO"));
    assert!(!sent_text(summary).contains("PROMPT-THREE"));
    // The request after it: the summary instead of the oldest turn, the last prompt answered
    // whole (keep_turns = 1), shorter, every call paired.
    let after = &requests[4];
    assert!(sent_text(after).contains("SUMMARY: the user read a.txt"));
    assert!(sent_text(after).contains("PROMPT-TWO"));
    assert!(sent_text(after).contains("second answer"));
    assert!(sent_text(after).contains("PROMPT-THREE"));
    assert!(!sent_text(after).contains("PROMPT-ONE"));
    assert!(after.body.to_string().len() < requests[2].body.to_string().len());
    assert!(every_call_has_its_result(after));
    let shown = compacted(&events);
    assert_eq!(shown.len(), 1, "{events:?}");
    let (prompts, before, after_tokens, text) = &shown[0];
    assert_eq!((*prompts, *before), (1, 900));
    assert!(after_tokens < before, "{after_tokens}");
    assert_eq!(text, "SUMMARY: the user read a.txt, which says A.");
    assert_eq!(
        agent_nvim::agent::compacted_line(*prompts, *before, 84_100),
        "compacted 1 prompt (900 → 84.1k tokens)"
    );
    // The history is whole; only what is sent is compacted.
    assert_eq!(agent.history().len(), 8);
    assert_eq!(agent.messages().len(), 5);
}

#[tokio::test]
async fn a_request_refused_as_too_long_is_compacted_and_sent_again_once() {
    let dir = tempfile::tempdir().unwrap();
    let too_long = || Reply::Status {
        code: 400,
        message: "prompt is too long: 210000 tokens > 200000 maximum".into(),
        retry_after: None,
    };
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![text("one")]),
            too_long(),
            turn(vec![text("SUMMARY of one")]),
            turn(vec![text("two")]),
        ],
    );
    let mut agent = compacting_agent(&mock, dir.path(), 200_000);
    prompt(&mut agent, "PROMPT-ONE").await;
    let (outcome, events) = prompt(&mut agent, "PROMPT-TWO").await;
    assert_eq!(outcome, Outcome::Done, "{events:?}");
    assert_eq!(streamed_text(&events), "two");
    let requests = mock.requests();
    assert_eq!(requests.len(), 4);
    assert!(sent_text(&requests[3]).contains("SUMMARY of one"));
    assert!(!sent_text(&requests[3]).contains("PROMPT-ONE"));
    assert_eq!(compacted(&events).len(), 1);

    // Still too long after compacting: said plainly, once, and no loop.
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![text("one")]),
            too_long(),
            turn(vec![text("SUMMARY")]),
            too_long(),
        ],
    );
    let mut agent = compacting_agent(&mock, dir.path(), 200_000);
    prompt(&mut agent, "PROMPT-ONE").await;
    let (outcome, events) = prompt(&mut agent, "PROMPT-TWO").await;
    assert_eq!(outcome, Outcome::Failed);
    assert_eq!(mock.requests().len(), 4);
    let message = last_message(&events);
    assert!(
        message.contains("prompt is too long") && message.contains("even after compacting"),
        "{message}"
    );
    // A first prompt too long by itself: nothing to compact, and the message says so.
    let mock = MockLlm::start(Wire::Anthropic, vec![too_long()]);
    let mut agent = compacting_agent(&mock, dir.path(), 200_000);
    let (outcome, events) = prompt(&mut agent, "HUGE").await;
    assert_eq!(outcome, Outcome::Failed);
    let message = last_message(&events);
    assert!(
        message.contains("this prompt alone is too long") && message.contains(":Agent new"),
        "{message}"
    );
}

#[tokio::test]
async fn compaction_on_demand_and_a_rewind_before_it_undoes_it() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![text("one")]),
            turn(vec![text("two")]),
            turn(vec![text("SUMMARY of one")]),
            turn(vec![text("three")]),
        ],
    );
    let mut agent = compacting_agent(&mock, dir.path(), 200_000);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    // One prompt: nothing to compact, said.
    prompt(&mut agent, "PROMPT-ONE").await;
    let why = agent
        .compact(agent_nvim::agent::Why::Asked, &tx, &cancel)
        .await
        .unwrap_err()
        .to_string();
    assert!(why.contains("nothing to compact yet"), "{why}");
    prompt(&mut agent, "PROMPT-TWO").await;
    agent
        .compact(agent_nvim::agent::Why::Asked, &tx, &cancel)
        .await
        .unwrap();
    drop(tx);
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push(e);
    }
    assert_eq!(compacted(&events)[0].0, 1);
    prompt(&mut agent, "PROMPT-THREE").await;
    let last = mock.requests().last().unwrap().clone();
    assert!(!sent_text(&last).contains("PROMPT-ONE"));
    assert!(sent_text(&last).contains("SUMMARY of one"));
    // Back to before prompt 3: the compaction stood for prompt 1 only, so it stays; back to
    // before prompt 1, it goes with what it stood for.
    agent.truncate(4);
    assert_eq!(agent.compactions().len(), 1);
    assert_eq!(agent.messages().len(), 3);
    agent.truncate(0);
    assert!(agent.compactions().is_empty());
    assert!(agent.messages().is_empty());
}

#[tokio::test]
async fn provider_ollama_against_a_server_without_ollamas_api_says_to_use_openai() {
    let dir = tempfile::tempdir().unwrap();
    // An OpenAI-compatible server (llama.cpp, LM Studio): no /api/chat.
    let mock = MockLlm::start(Wire::OpenAi, vec![turn(vec![text("unused")])]);
    let mut agent = agent(&mock, Wire::Ollama, dir.path(), 40);
    let (outcome, events) = prompt(&mut agent, "hi").await;
    assert_eq!(outcome, Outcome::Failed);
    let message = last_message(&events);
    assert!(
        message.starts_with("API error 404: ")
            && message.contains("is not Ollama's chat API")
            && message.contains("provider = \"openai\""),
        "{message}"
    );
}

#[tokio::test]
async fn refused_as_too_long_right_after_a_compaction_everything_but_the_prompt_is_summarized() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![text("one")]),
            Reply::Status {
                code: 400,
                message: "prompt is too long: 210000 tokens > 200000 maximum".into(),
                retry_after: None,
            },
            turn(vec![text("SUMMARY of one")]),
            turn(vec![text("two")]),
        ],
    );
    // keep_turns 4: the usual rule would find nothing to compact in two prompts.
    let mut tuning = Tuning::default();
    tuning.models.insert(
        "test-model".into(),
        agent_nvim::llm::models::ModelEntry {
            context: Some(200_000),
            price: None,
            images: None,
        },
    );
    let mut agent =
        agent_tuned(&mock, Wire::Anthropic, dir.path(), 40, tuning).with_compaction(0.8, 4);
    prompt(&mut agent, "PROMPT-ONE").await;
    let (outcome, events) = prompt(&mut agent, "PROMPT-TWO").await;
    assert_eq!(outcome, Outcome::Done, "{events:?}");
    let last = mock.requests().last().unwrap().clone();
    assert!(sent_text(&last).contains("SUMMARY of one"));
    assert!(!sent_text(&last).contains("PROMPT-ONE"));
}

#[tokio::test]
async fn stopping_during_the_too_long_compaction_ends_the_turn_as_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![text("one")]),
            Reply::Status {
                code: 400,
                message: "prompt is too long".into(),
                retry_after: None,
            },
            turn(vec![text("SUMMARY")]),
        ],
    );
    let mut agent = compacting_agent(&mock, dir.path(), 200_000);
    prompt(&mut agent, "PROMPT-ONE").await;
    // The summary's stream is slow; the turn is stopped while it comes.
    let mock = mock.with_pace(Pace {
        chunk_bytes: Some(64),
        delay: Duration::from_millis(200),
    });
    let cancel = CancellationToken::new();
    let stopper = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            cancel.cancel();
        })
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let outcome = agent.prompt("PROMPT-TWO".into(), &tx, &cancel).await;
    stopper.await.unwrap();
    drop(tx);
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push(e);
    }
    assert_eq!(outcome, Outcome::Cancelled, "{events:?}");
    assert_eq!(
        mock.requests().len(),
        3,
        "the summary request was under way"
    );
    assert!(
        !events.iter().any(|e| matches!(e, Event::Error { .. })),
        "{events:?}"
    );
}

fn status(code: u16, message: &str) -> Reply {
    Reply::Status {
        code,
        message: message.into(),
        retry_after: None,
    }
}

#[tokio::test]
async fn a_refused_key_names_where_it_came_from_and_the_base_url_and_a_404_names_the_model_and_url()
{
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            status(401, "invalid x-api-key"),
            status(403, "forbidden"),
            status(404, "model: test-model"),
        ],
    );
    let base = mock.base_url();
    let mut agent = agent(&mock, Wire::Anthropic, dir.path(), 4);
    let (outcome, events) = prompt(&mut agent, "hi").await;
    assert_eq!(outcome, Outcome::Failed);
    assert_eq!(
        last_message(&events),
        format!(
            "API error 401: authentication_error: invalid x-api-key (request id req_mock_1); check the key, \
             ANTHROPIC_API_KEY, and the base URL in use, {base} (base_url, else ANTHROPIC_BASE_URL)"
        )
    );
    let (_, events) = prompt(&mut agent, "hi").await;
    assert!(
        last_message(&events).starts_with("API error 403: permission_error: forbidden (request id req_mock_2); check the key, ANTHROPIC_API_KEY, and the base URL in use"),
        "{events:?}"
    );
    let (_, events) = prompt(&mut agent, "hi").await;
    assert_eq!(
        last_message(&events),
        format!(
            "API error 404: not_found_error: model: test-model (request id req_mock_3); check the model, \
             test-model (:Agent model picks another), and the URL, {base}/v1/messages"
        )
    );
}

#[tokio::test]
async fn api_key_cmd_runs_once_when_the_first_request_needs_it_and_a_failure_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![turn(vec![text("one")]), turn(vec![text("two")])],
    );
    let argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!(
            "echo run >> '{}'; printf '  sk-from-pass-161803\\nlogin: me\\n'",
            runs.display()
        ),
    ];
    let mut agent = agent_keyed(
        &mock,
        Wire::Anthropic,
        dir.path(),
        4,
        Tuning::default(),
        Key::Command(argv),
    );
    assert!(!runs.exists(), "run before any request needed the key");
    let (outcome, events) = prompt(&mut agent, "hi").await;
    assert_eq!(outcome, Outcome::Done, "{events:?}");
    let (outcome, _) = prompt(&mut agent, "again").await;
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "run\n");
    let requests = mock.requests();
    let keys: Vec<_> = requests.iter().map(|r| r.header("x-api-key")).collect();
    assert_eq!(
        keys,
        vec![Some("sk-from-pass-161803"), Some("sk-from-pass-161803")]
    );
    assert_eq!(
        agent_nvim::secrets::redact("sk-from-pass-161803"),
        "[redacted]"
    );

    // A command that fails sends nothing, and says what to do.
    let failing = vec![
        "sh".into(),
        "-c".into(),
        "echo 'gpg: decryption failed' >&2; exit 2".into(),
    ];
    let mut agent = agent_keyed(
        &mock,
        Wire::Anthropic,
        dir.path(),
        4,
        Tuning::default(),
        Key::Command(failing),
    );
    let (outcome, events) = prompt(&mut agent, "hi").await;
    assert_eq!(outcome, Outcome::Failed);
    assert_eq!(
        last_message(&events),
        "api_key_cmd (sh -c echo 'gpg: decryption failed' >&2; exit 2) exited 2: gpg: \
         decryption failed; fix the command in setup({ api_key_cmd = ... }) so that it prints the \
         key, or remove api_key_cmd and export ANTHROPIC_API_KEY before starting Neovim"
    );
    assert_eq!(mock.requests().len(), 2);
}

/// The images of the last user message of `body`, as base64, in the shape `wire` sends them.
fn images_sent(wire: Wire, body: &Value) -> Vec<String> {
    let (messages, key) = match wire {
        Wire::Responses => (body["input"].as_array().unwrap(), "content"),
        _ => (body["messages"].as_array().unwrap(), "content"),
    };
    let last = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
    match wire {
        Wire::Anthropic => last[key]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "image")
            .map(|b| {
                assert_eq!(b["source"]["type"], "base64", "{b}");
                assert_eq!(b["source"]["media_type"], "image/png", "{b}");
                b["source"]["data"].as_str().unwrap().to_string()
            })
            .collect(),
        Wire::OpenAi | Wire::OpenAiOllamaStyle => last[key]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "image_url")
            .map(|b| {
                let url = b["image_url"]["url"].as_str().unwrap();
                url.strip_prefix("data:image/png;base64,")
                    .unwrap()
                    .to_string()
            })
            .collect(),
        Wire::Responses => last[key]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "input_image")
            .map(|b| {
                let url = b["image_url"].as_str().unwrap();
                url.strip_prefix("data:image/png;base64,")
                    .unwrap()
                    .to_string()
            })
            .collect(),
        Wire::Ollama => last["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_str().unwrap().to_string())
            .collect(),
    }
}

#[tokio::test]
async fn a_prompts_images_go_as_base64_image_content_in_every_wire_format_and_again_next_turn() {
    use agent_nvim::llm::{Image, Prompt};
    use agent_nvim_fixtures::pictures;
    let shot = pictures::png(64, 40, 1);
    let pasted = pictures::png(30, 30, 2);
    for wire in [Wire::Anthropic, Wire::OpenAi, Wire::Responses, Wire::Ollama] {
        let dir = tempfile::tempdir().unwrap();
        let mock = MockLlm::start(
            wire,
            vec![turn(vec![text("a chart")]), turn(vec![text("yes")])],
        );
        let mut agent = agent(&mock, wire, dir.path(), 5);
        let asked = Prompt {
            text: "what is in these?".into(),
            images: vec![
                Image::prepare("shot.png", shot.clone()).unwrap(),
                Image::prepare("clipboard", pasted.clone()).unwrap(),
            ],
            audio: Vec::new(),
        };
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let outcome = agent.prompt(asked, &tx, &CancellationToken::new()).await;
        assert_eq!(outcome, Outcome::Done, "{wire:?}");
        let (outcome, _) = prompt(&mut agent, "and now?").await;
        assert_eq!(outcome, Outcome::Done, "{wire:?}");
        let requests = mock.requests();
        let expected = vec![pictures::base64(&shot), pictures::base64(&pasted)];
        assert_eq!(images_sent(wire, &requests[0].body), expected, "{wire:?}");
        // The next request holds the same prompt, its images with it.
        let again = &requests[1].body;
        let first_user = match wire {
            Wire::Responses => again["input"].as_array().unwrap().clone(),
            _ => again["messages"].as_array().unwrap().clone(),
        };
        let with_images: Vec<&Value> = first_user
            .iter()
            .filter(|m| m["role"] == "user" && m.to_string().contains(&expected[0]))
            .collect();
        assert_eq!(with_images.len(), 1, "{wire:?}: {again}");
        assert!(again.to_string().contains(&expected[1]), "{wire:?}");
    }
}

/// Runs `asked` to the end of its turn: its outcome and the errors it reported.
async fn errors_of(agent: &mut Agent, asked: agent_nvim::llm::Prompt) -> (Outcome, Vec<String>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let outcome = agent.prompt(asked, &tx, &CancellationToken::new()).await;
    drop(tx);
    let mut errors = Vec::new();
    while let Some(event) = rx.recv().await {
        if let Event::Error { message } = event {
            errors.push(message);
        }
    }
    (outcome, errors)
}

#[tokio::test]
async fn a_prompt_whose_images_are_more_than_one_request_carries_is_refused_before_sending() {
    // By their size, then by their number.
    use agent_nvim::llm::{Image, Prompt};
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Wire::Anthropic, vec![turn(vec![text("ok")])]);
    let mut agent = agent(&mock, Wire::Anthropic, dir.path(), 5);
    // Five of 4 MB: 26.7 MB in base64, over the 24 MB one request carries.
    let big = Image {
        name: "shot.png".into(),
        media_type: "image/png".into(),
        width: 1568,
        height: 1568,
        scaled_from: None,
        data: vec![7u8; 4 * 1024 * 1024].into(),
        file: None,
    };
    let asked = Prompt {
        text: "compare these".into(),
        images: vec![big; 5],
        audio: Vec::new(),
    };
    let (outcome, errors) = errors_of(&mut agent, asked).await;
    assert_eq!(outcome, Outcome::Failed);
    assert_eq!(
        errors,
        vec!["agent: the images of this prompt come to 26.7 MB to send, more than the 24 MB one request carries; nothing was sent: attach fewer or smaller images".to_string()]
    );
    // 101 small ones: more than one request carries, by their number.
    let dot = Image {
        name: "dot.png".into(),
        media_type: "image/png".into(),
        width: 1,
        height: 1,
        scaled_from: None,
        data: vec![1u8; 30].into(),
        file: None,
    };
    let asked = Prompt {
        text: "count these".into(),
        images: vec![dot; 101],
        audio: Vec::new(),
    };
    let (outcome, errors) = errors_of(&mut agent, asked).await;
    assert_eq!(outcome, Outcome::Failed);
    assert_eq!(
        errors,
        vec!["agent: this prompt attaches 101 images, more than the 100 one request carries; nothing was sent: attach fewer".to_string()]
    );
    assert!(mock.requests().is_empty(), "nothing reached the model");
}

#[tokio::test]
async fn a_model_known_to_read_text_only_is_refused_images_before_anything_is_sent() {
    use agent_nvim::llm::{Image, Prompt};
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Wire::OpenAi, vec![turn(vec![text("ok")])]);
    let mut tuning = Tuning::default();
    tuning.models.insert(
        "test-model".into(),
        agent_nvim::llm::models::ModelEntry {
            images: Some(false),
            ..Default::default()
        },
    );
    let mut agent = agent_tuned(&mock, Wire::OpenAi, dir.path(), 5, tuning);
    let asked = Prompt {
        text: "what is this?".into(),
        images: vec![
            Image::prepare("shot.png", agent_nvim_fixtures::pictures::png(8, 8, 3)).unwrap(),
        ],
        audio: Vec::new(),
    };
    let (outcome, errors) = errors_of(&mut agent, asked).await;
    assert_eq!(outcome, Outcome::Failed);
    assert_eq!(
        errors,
        vec!["agent: test-model does not take images, so nothing was sent; pick a model that does with :Agent model, or send the prompt without the image".to_string()]
    );
    assert!(mock.requests().is_empty(), "nothing reached the model");
    // The refused prompt's text stays in the history (prompts are counted as the chat counts
    // them), its image never sent.
    let (outcome, _) = prompt(&mut agent, "hello").await;
    assert_eq!(outcome, Outcome::Done);
    let body = mock.requests()[0].body.clone();
    let messages = body["messages"].as_array().unwrap().clone();
    let users: Vec<&Value> = messages.iter().filter(|m| m["role"] == "user").collect();
    assert_eq!(users.len(), 2, "{body}");
    assert!(users[0]["content"]
        .to_string()
        .contains("[1 image(s) attached here were not sent: test-model does not take images]"));
    assert!(!body.to_string().contains("image_url"), "{body}");
    // The built-in table knows gpt-3.5-turbo reads text only, and every model it lists reads
    // images.
    let table = Tuning::default();
    assert!(!table.model("gpt-3.5-turbo").images);
    assert!(table.model("claude-sonnet-4-5").images && table.model("gpt-5").images);
}
