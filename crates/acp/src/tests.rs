//! The ACP client against an in-process fake agent speaking raw JSON lines over in-memory pipes:
//! the wire as a real agent writes it (ids from 0, junk lines, unknown methods), with every step
//! under the test's control.

use std::sync::Mutex;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};

use super::*;

use crate::fake_host::{Answer, FakeHost};

/// The agent's end of the pipes.
struct FakeAgent {
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    out: WriteHalf<DuplexStream>,
}

impl FakeAgent {
    async fn send(&mut self, message: Value) {
        self.raw(&message.to_string()).await;
    }
    async fn raw(&mut self, line: &str) {
        self.out
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .expect("the client said nothing")
            .unwrap()
            .expect("the client closed the pipe");
        serde_json::from_str(&line).unwrap()
    }
    /// Receives a request or notification, checks its method, returns (id, params).
    async fn expect(&mut self, method: &str) -> (Value, Value) {
        let message = self.recv().await;
        assert_eq!(message["method"], method, "{message}");
        (message["id"].clone(), message["params"].clone())
    }
    async fn respond(&mut self, id: Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await;
    }
    async fn update(&mut self, update: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": "s", "update": update}}))
            .await;
    }
    /// Answers initialize (with `capabilities` as its `agentCapabilities`) and session/new,
    /// checking what the client asked for.
    async fn handshake_offering(&mut self, root: &Path, capabilities: Value) {
        let (id, params) = self.expect("initialize").await;
        assert_eq!(params["protocolVersion"], 1);
        assert_eq!(
            params["clientCapabilities"]["fs"],
            json!({"readTextFile": true, "writeTextFile": true})
        );
        assert_eq!(params["clientCapabilities"]["terminal"], true);
        self.respond(
            id,
            json!({"protocolVersion": 1, "agentCapabilities": capabilities}),
        )
        .await;
        let (id, params) = self.expect("session/new").await;
        assert_eq!(params["cwd"], json!(root));
        assert_eq!(params["mcpServers"], json!([]));
        self.respond(id, json!({"sessionId": "s"})).await;
    }
}

/// A client session and its fake agent, in a fresh workspace.
async fn pair(
    host: Arc<FakeHost>,
    auto_approve: bool,
) -> (tempfile::TempDir, AcpSession, FakeAgent) {
    pair_offering(host, auto_approve, json!({})).await
}

/// [`pair`] with an agent whose `agentCapabilities` are `capabilities`.
async fn pair_offering(
    host: Arc<FakeHost>,
    auto_approve: bool,
    capabilities: Value,
) -> (tempfile::TempDir, AcpSession, FakeAgent) {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::new(dir.path()).unwrap();
    let (client_side, agent_side) = tokio::io::duplex(64 * 1024);
    let (client_in, client_out) = tokio::io::split(client_side);
    let (agent_read, agent_write) = tokio::io::split(agent_side);
    let mut agent = FakeAgent {
        lines: BufReader::new(agent_read).lines(),
        out: agent_write,
    };
    let mut spec = AcpSpec::new("fake", vec!["fake".into()], workspace.clone());
    spec.auto_approve = auto_approve;
    let (session, ()) = tokio::join!(
        start(
            spec,
            host,
            client_in,
            client_out,
            None,
            crate::external::AgentAuthority::for_tests()
        ),
        agent.handshake_offering(workspace.root(), capabilities)
    );
    (dir, session.unwrap(), agent)
}

fn text(events: &[AcpEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            AcpEvent::Turn(Event::Text { text }) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn done(outcome: Outcome, message: &str) -> AcpEvent {
    AcpEvent::Turn(Event::TurnDone {
        input: 0,
        output: 0,
        outcome,
        message: message.into(),
        cost: None,
    })
}

#[test]
fn presets_resolve_to_the_specs_commands() {
    let words = |name| preset(name).map(|c| c.join(" "));
    assert_eq!(
        words("claude").as_deref(),
        Some("npx -y @agentclientprotocol/claude-agent-acp")
    );
    assert_eq!(words("gemini").as_deref(), Some("gemini --acp"));
    assert_eq!(
        words("codex").as_deref(),
        Some("npx -y @agentclientprotocol/codex-acp")
    );
    assert_eq!(words("opencode").as_deref(), Some("opencode acp"));
    assert_eq!(words("aider"), None);
    assert_eq!(preset_names(), ["claude", "gemini", "codex", "opencode"]);
}

#[test]
fn events_serialize_flat_with_a_type() {
    let thought = AcpEvent::Agent(AgentUpdate::Thought { text: "t".into() });
    let text = AcpEvent::Turn(Event::Text { text: "x".into() });
    let row = AcpEvent::Agent(AgentUpdate::ToolUpdated {
        id: "1".into(),
        title: "Read".into(),
        status: "completed".into(),
        kind: "read".into(),
        output: "ok".into(),
        running: false,
    });
    let plan = AcpEvent::Agent(AgentUpdate::Plan {
        entries: vec![PlanEntry {
            content: "c".into(),
            status: "pending".into(),
            priority: "high".into(),
        }],
    });
    assert_eq!(
        serde_json::to_value([thought, text, row, plan]).unwrap(),
        json!([
            {"type": "thought", "text": "t"},
            {"type": "text", "text": "x"},
            {"type": "tool_updated", "id": "1", "title": "Read", "status": "completed",
             "kind": "read", "output": "ok"},
            {"type": "plan", "entries": [{"content": "c", "status": "pending", "priority": "high"}]},
        ])
    );
}

#[tokio::test]
async fn requests_from_id_zero_unknown_methods_and_junk_lines_are_handled() {
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let (dir, session, mut agent) = pair(host.clone(), false).await;
    std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
    let agent_side = async {
        let (id, params) = agent.expect("session/prompt").await;
        assert_eq!(params["sessionId"], "s");
        assert_eq!(params["prompt"], json!([{"type": "text", "text": "hi"}]));
        agent.raw("Debugger attached.").await;
        agent.raw("{broken").await;
        agent.raw("").await;
        agent
            .send(json!({"jsonrpc": "2.0", "method": "_auth/status_update", "params": {"sessionId": "s"}}))
            .await;
        agent
            .send(json!({"jsonrpc": "2.0", "id": 0, "method": "_custom/thing", "params": {"sessionId": "s"}}))
            .await;
        let reply = agent.recv().await;
        assert_eq!(reply["id"], 0);
        assert_eq!(reply["error"]["code"], -32601);
        agent
            .send(
                json!({"jsonrpc": "2.0", "id": 1, "method": "fs/read_text_file",
                "params": {"sessionId": "s", "path": "a.txt", "line": 2}}),
            )
            .await;
        let reply = agent.recv().await;
        assert_eq!(
            reply,
            json!({"jsonrpc": "2.0", "id": 1, "result": {"content": "two\n"}})
        );
        agent
            .update(json!({"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "hello"}}))
            .await;
        agent.respond(id, json!({"stopReason": "end_turn"})).await;
    };
    let never = CancellationToken::new();
    let (outcome, ()) = tokio::join!(session.prompt("hi".into(), &never), agent_side);
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(
        host.events(),
        vec![
            AcpEvent::Turn(Event::TurnStarted),
            AcpEvent::Turn(Event::Text {
                text: "hello".into()
            }),
            done(Outcome::Done, "done (end_turn)"),
        ]
    );
}

#[tokio::test]
async fn as_a_conversation_a_turn_reports_on_the_stream_it_is_given_and_then_the_host_again() {
    use crate::conversation::Conversation;
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let (_dir, session, mut agent) = pair(host.clone(), false).await;
    let agent_side = async {
        let (id, _) = agent.expect("session/prompt").await;
        agent
            .update(json!({"sessionUpdate": "agent_thought_chunk",
                "content": {"type": "text", "text": "hm"}}))
            .await;
        agent
            .update(json!({"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "hello"}}))
            .await;
        agent.respond(id, json!({"stopReason": "end_turn"})).await;
    };
    let (events, mut reported) = tokio::sync::mpsc::unbounded_channel();
    let events = crate::conversation::Events::new(events);
    let never = CancellationToken::new();
    let conversation: &dyn Conversation = &session;
    let (outcome, ()) = tokio::join!(
        conversation.prompt("hi".into(), &events, &never),
        agent_side
    );
    assert_eq!(outcome, Outcome::Done);
    drop(events);
    let mut seen = Vec::new();
    while let Some(event) = reported.recv().await {
        seen.push(event);
    }
    assert_eq!(
        seen,
        vec![
            AcpEvent::Turn(Event::TurnStarted),
            AcpEvent::Agent(AgentUpdate::Thought { text: "hm".into() }),
            AcpEvent::Turn(Event::Text {
                text: "hello".into()
            }),
            done(Outcome::Done, "done (end_turn)"),
        ]
    );
    assert_eq!(host.events(), vec![]);
    // Between turns, what the agent sends goes to the host.
    agent
        .update(json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "late"}}))
        .await;
    for _ in 0..1000 {
        if !host.events().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(text(&host.events()), "late");
    assert_eq!(
        conversation.rewind(1).await,
        Err(crate::conversation::ConversationError::Unsupported {
            name: "fake".into(),
            what: "rewind"
        })
    );
}

#[tokio::test]
async fn a_path_outside_is_refused_with_invalid_params_and_no_content() {
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let (dir, session, mut agent) = pair(host.clone(), false).await;
    let agent_side = async {
        let (id, _) = agent.expect("session/prompt").await;
        agent
            .send(
                json!({"jsonrpc": "2.0", "id": 0, "method": "fs/read_text_file",
                "params": {"sessionId": "s", "path": "../../etc/passwd"}}),
            )
            .await;
        let reply = agent.recv().await;
        agent.respond(id, json!({"stopReason": "end_turn"})).await;
        reply
    };
    let never = CancellationToken::new();
    let (_, reply) = tokio::join!(session.prompt("go".into(), &never), agent_side);
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 0, "error": {"code": -32602,
            "message": "Refused: '../../etc/passwd' resolves outside the workspace root."}})
    );
    drop(dir);
}

#[tokio::test]
async fn a_buffer_is_read_instead_of_the_disk_and_a_write_reloads_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::new(dir.path()).unwrap();
    let file = workspace.root().join("b.txt");
    std::fs::write(&file, "disk").unwrap();
    let mut host = FakeHost::new(true, Answer::Never);
    host.buffers.push((file.clone(), "buffer\n".into()));
    assert_eq!(
        fs::read_text_file(&workspace, &host, "b.txt", None, None)
            .await
            .unwrap(),
        "buffer\n"
    );
    fs::write_text_file(
        &crate::external::AgentAuthority::for_tests(),
        &workspace,
        &host,
        "b.txt",
        "new".into(),
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");
    assert_eq!(*host.written.lock().unwrap(), vec![file.clone()]);

    host.unsaved.push(file.clone());
    let refused = fs::write_text_file(
        &crate::external::AgentAuthority::for_tests(),
        &workspace,
        &host,
        "b.txt",
        "clobber".into(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        refused.message,
        "Refused: 'b.txt' has unsaved changes in the editor; the user must save or discard \
         them before it can be written."
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");
    assert_eq!(host.written.lock().unwrap().len(), 1);

    let missing = fs::read_text_file(&workspace, &host, "nope.txt", None, None)
        .await
        .unwrap_err();
    assert_eq!(
        (missing.code, missing.message.as_str()),
        (ErrorCode::RESOURCE_NOT_FOUND, "No such file: 'nope.txt'.")
    );
}

fn shared(host: Arc<FakeHost>, auto_approve: bool) -> (tempfile::TempDir, Shared) {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared {
        side: Mutex::new(None),
        outside: tokio::sync::Mutex::new(crate::outside::Watch::default()),
        elicitations: Mutex::new(std::collections::HashMap::new()),
        open_elicitations: std::sync::atomic::AtomicUsize::new(0),
        inflight: Arc::default(),
        authority: crate::external::AgentAuthority::for_tests(),
        name: "fake".into(),
        workspace: Workspace::new(dir.path()).unwrap(),
        auto_approve,
        host,
        turn: Mutex::new(CancellationToken::new()),
        tools: Mutex::new(Tools::default()),
        reports: Mutex::new(None),
        checkpoints: None,
        replay: Mutex::new(None),
        writes_through_client: std::sync::atomic::AtomicBool::new(false),
        edited: Mutex::new(std::collections::HashMap::new()),
        notes: Mutex::new(Vec::new()),
        terminals: Arc::new(Mutex::new(super::terminal::Terminals::default())),
        allowances: Mutex::new(Vec::new()),
        terminal: super::TerminalSettings::default(),
        sandbox: None,
        choices: Mutex::new(super::choices::Choices::default()),
        extra: Vec::new(),
    };
    (dir, shared)
}

fn ask() -> PermissionAsk {
    let choice = |id: &str, kind: &str| PermissionChoice {
        id: id.into(),
        name: id.into(),
        kind: kind.into(),
    };
    PermissionAsk {
        tool_call_id: "t".into(),
        title: "Edit".into(),
        options: vec![
            choice("yes", "allow_once"),
            choice("always", "allow_always"),
            choice("no", "reject_once"),
        ],
        diff: None,
        command: None,
        cwd: None,
        timeout: None,
        edit: None,
    }
}

#[tokio::test]
async fn permission_is_decided_by_kind_and_cancelled_without_a_ui() {
    let cases = [
        // (can ask, user's answer, auto_approve) -> response
        (
            true,
            Answer::Kind("reject_once"),
            true,
            json!({"outcome": {"outcome": "selected", "optionId": "always"}}),
        ),
        (
            false,
            Answer::Kind("allow_once"),
            false,
            json!({"outcome": {"outcome": "cancelled"}}),
        ),
        (
            true,
            Answer::Kind("allow_once"),
            false,
            json!({"outcome": {"outcome": "selected", "optionId": "yes"}}),
        ),
        (
            true,
            Answer::Kind("reject_once"),
            false,
            json!({"outcome": {"outcome": "selected", "optionId": "no"}}),
        ),
        (
            true,
            Answer::Bogus,
            false,
            json!({"outcome": {"outcome": "cancelled"}}),
        ),
    ];
    for (can_ask, answer, auto, want) in cases {
        let host = Arc::new(FakeHost::new(can_ask, answer));
        let (_dir, shared) = shared(host.clone(), auto);
        assert_eq!(
            decide(&shared, ask(), &CancellationToken::new()).await,
            want
        );
        // Nobody is asked under auto_approve or without a UI.
        assert_eq!(
            host.asks.lock().unwrap().len(),
            usize::from(can_ask && !auto)
        );
    }
}

#[tokio::test]
async fn auto_approve_without_an_allow_option_is_cancelled() {
    let host = Arc::new(FakeHost::new(true, Answer::Kind("allow_once")));
    let (_dir, shared) = shared(host, true);
    let mut only_reject = ask();
    only_reject.options.retain(|o| o.kind.starts_with("reject"));
    assert_eq!(
        decide(&shared, only_reject, &CancellationToken::new()).await,
        json!({"outcome": {"outcome": "cancelled"}})
    );
}

#[tokio::test]
async fn cancel_sends_session_cancel_and_answers_the_open_question_cancelled() {
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let (_dir, session, mut agent) = pair(host.clone(), false).await;
    let cancel = CancellationToken::new();
    let agent_side = async {
        let (prompt_id, _) = agent.expect("session/prompt").await;
        agent
            .update(
                json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Run it",
                "kind": "execute", "rawInput": {"command": "make"}}),
            )
            .await;
        agent
            .send(
                json!({"jsonrpc": "2.0", "id": 0, "method": "session/request_permission",
                "params": {"sessionId": "s", "toolCall": {"toolCallId": "c1"}, "options": [
                    {"optionId": "ok", "name": "Allow", "kind": "allow_once"}]}}),
            )
            .await;
        while host.asks.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The open question does not hold up the agent's other requests.
        agent
            .send(
                json!({"jsonrpc": "2.0", "id": 1, "method": "fs/read_text_file",
                "params": {"sessionId": "s", "path": "missing.txt"}}),
            )
            .await;
        let reply = agent.recv().await;
        assert_eq!(
            (&reply["id"], &reply["error"]["code"]),
            (&json!(1), &json!(-32002))
        );
        cancel.cancel();
        let (_, params) = agent.expect("session/cancel").await;
        assert_eq!(params, json!({"sessionId": "s"}));
        let reply = agent.recv().await;
        assert_eq!(
            reply,
            json!({"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "cancelled"}}})
        );
        agent
            .respond(prompt_id, json!({"stopReason": "cancelled"}))
            .await;
    };
    let (outcome, ()) = tokio::join!(session.prompt("go".into(), &cancel), agent_side);
    assert_eq!(outcome, Outcome::Cancelled);
    assert_eq!(
        *host.asks.lock().unwrap(),
        vec![PermissionAsk {
            tool_call_id: "c1".into(),
            title: "Run it".into(),
            options: vec![PermissionChoice {
                id: "ok".into(),
                name: "Allow".into(),
                kind: "allow_once".into()
            }],
            diff: None,
            command: Some("make".into()),
            cwd: None,
            timeout: None,
            edit: None,
        }]
    );
    let events = host.events();
    assert_eq!(
        &events[events.len() - 2..],
        [
            AcpEvent::Turn(Event::ToolFinished {
                id: "c1".into(),
                name: "Run it".into(),
                ok: false,
                summary: "Run it".into(),
                output: "cancelled".into(),
                diff: None,
            }),
            done(Outcome::Cancelled, "cancelled"),
        ]
    );
}

#[tokio::test]
async fn a_closed_connection_fails_the_turn_and_every_later_one() {
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let (_dir, session, mut agent) = pair(host.clone(), false).await;
    let agent_side = async {
        agent.expect("session/prompt").await;
        agent
            .update(json!({"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "partial"}}))
            .await;
        drop(agent);
    };
    let never = CancellationToken::new();
    let (outcome, ()) = tokio::join!(session.prompt("go".into(), &never), agent_side);
    assert_eq!(outcome, Outcome::Failed);
    let failed = |message: &str| {
        vec![
            AcpEvent::Turn(Event::Error {
                message: message.into(),
            }),
            done(Outcome::Failed, message),
        ]
    };
    let events = host.events();
    assert_eq!(text(&events), "partial");
    assert_eq!(events[2..], failed("fake closed the connection")[..]);
    host.events.lock().unwrap().clear();
    let again = tokio::time::timeout(
        Duration::from_secs(5),
        session.prompt("more".into(), &CancellationToken::new()),
    )
    .await
    .unwrap();
    assert_eq!(again, Outcome::Failed);
    let mut want = vec![AcpEvent::Turn(Event::TurnStarted)];
    want.extend(failed("fake closed the connection"));
    assert_eq!(host.events(), want);
}

#[tokio::test]
async fn an_agent_that_never_answers_initialize_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::new(dir.path()).unwrap();
    let (client_side, _agent_side) = tokio::io::duplex(1024);
    let (client_in, client_out) = tokio::io::split(client_side);
    let mut spec = AcpSpec::new("mute", vec!["mute".into(), "--acp".into()], workspace);
    spec.connect_timeout = Duration::from_millis(200);
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let started = std::time::Instant::now();
    let err = start(
        spec,
        host,
        client_in,
        client_out,
        None,
        crate::external::AgentAuthority::for_tests(),
    )
    .await
    .err()
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(
        format!("agent: {err}"),
        "agent: mute did not answer initialize within 0.2 s; is `mute --acp` an ACP agent?"
    );
}

#[tokio::test]
async fn usage_in_the_answer_is_reported() {
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let (_dir, session, mut agent) = pair(host.clone(), false).await;
    let agent_side = async {
        let (id, _) = agent.expect("session/prompt").await;
        agent
            .respond(
                id,
                json!({"stopReason": "max_tokens",
                "usage": {"inputTokens": 5, "outputTokens": 7, "totalTokens": 12,
                          "cachedReadTokens": 3}}),
            )
            .await;
    };
    let never = CancellationToken::new();
    let (outcome, ()) = tokio::join!(session.prompt("go".into(), &never), agent_side);
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(
        host.events()[1..],
        [
            AcpEvent::Turn(Event::Usage {
                input: 5,
                output: 7,
                cached: 3,
                cost: None,
            }),
            AcpEvent::Turn(Event::TurnDone {
                input: 5,
                output: 7,
                outcome: Outcome::Done,
                message: "done (max_tokens)".into(),
                cost: None,
            }),
        ]
    );
}

#[tokio::test]
async fn an_agent_gone_between_turns_fails_the_next_prompt_at_once() {
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let (_dir, session, agent) = pair(host.clone(), false).await;
    drop(agent);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let never = CancellationToken::new();
    let outcome = tokio::time::timeout(Duration::from_secs(5), session.prompt("hi".into(), &never))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Failed);
    assert_eq!(
        host.events().last(),
        Some(&done(Outcome::Failed, "fake closed the connection"))
    );
}

#[tokio::test]
async fn a_fifo_is_refused_without_blocking_and_writes_keep_the_file_beneath_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::new(dir.path()).unwrap();
    let host = FakeHost::new(true, Answer::Never);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        workspace.root().join("p"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let bounded = Duration::from_secs(20);
    let read = tokio::time::timeout(
        bounded,
        fs::read_text_file(&workspace, &host, "p", None, None),
    )
    .await
    .expect("fs/read_text_file blocked on a FIFO")
    .unwrap_err();
    let write = tokio::time::timeout(
        bounded,
        fs::write_text_file(
            &crate::external::AgentAuthority::for_tests(),
            &workspace,
            &host,
            "p",
            "x".into(),
        ),
    )
    .await
    .expect("fs/write_text_file blocked on a FIFO")
    .unwrap_err();
    assert_eq!(
        (read.message, write.message),
        (
            "Not a regular file: p".to_string(),
            "Not a regular file: p".to_string()
        )
    );
    // A link to the outside is refused as the path check refuses it.
    std::os::unix::fs::symlink("/etc", workspace.root().join("etc")).unwrap();
    let refused = fs::write_text_file(
        &crate::external::AgentAuthority::for_tests(),
        &workspace,
        &host,
        "etc/agent-test",
        "x".into(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        refused.message,
        "Refused: 'etc/agent-test' resolves outside the workspace root."
    );
}

#[tokio::test]
async fn an_agents_path_names_files_as_they_are_not_in_the_quoted_form() {
    // Agents see real names, never list_files' quoted form: `"x"` is the file with the quotes
    // in its name. Read as the quoted form, a write to it clobbered `x`.
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::new(dir.path()).unwrap();
    std::fs::write(workspace.root().join("x"), "plain").unwrap();
    std::fs::write(workspace.root().join("\"x\""), "quoted").unwrap();
    let host = FakeHost::new(true, Answer::Never);
    let quoted = workspace.root().join("\"x\"").to_str().unwrap().to_string();
    assert_eq!(
        fs::read_text_file(&workspace, &host, &quoted, None, None)
            .await
            .unwrap(),
        "quoted"
    );
    fs::write_text_file(
        &crate::external::AgentAuthority::for_tests(),
        &workspace,
        &host,
        "\"x\"",
        "new".into(),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            std::fs::read_to_string(workspace.root().join("x")).unwrap(),
            std::fs::read_to_string(workspace.root().join("\"x\"")).unwrap()
        ),
        ("plain".to_string(), "new".to_string())
    );
}

/// What an agent that lists and loads its sessions says at initialize.
fn offering_sessions() -> Value {
    json!({"loadSession": true, "sessionCapabilities": {"list": {}}})
}

/// Runs `load` as the bridge does and returns what it reported.
async fn loaded(
    session: &AcpSession,
    id: &str,
    agent_side: impl std::future::Future<Output = ()>,
) -> (
    Result<String, crate::conversation::ConversationError>,
    Vec<AcpEvent>,
) {
    use crate::conversation::Conversation;
    let (events, mut reported) = tokio::sync::mpsc::unbounded_channel();
    let events = crate::conversation::Events::new(events);
    let never = CancellationToken::new();
    let conversation: &dyn Conversation = session;
    let (answer, ()) = tokio::join!(conversation.load(id, &events, &never), agent_side);
    drop(events);
    let mut seen = Vec::new();
    while let Some(event) = reported.recv().await {
        seen.push(event);
    }
    (answer, seen)
}

#[tokio::test]
async fn an_agents_sessions_are_listed_for_this_workspace_over_its_pages() {
    use crate::conversation::AgentSessions;
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let (dir, session, mut agent) = pair_offering(host, false, offering_sessions()).await;
    assert_eq!(
        session.offers(),
        Offers {
            load: true,
            list: true,
            ..Offers::default()
        }
    );
    let root = Workspace::new(dir.path()).unwrap().root().to_path_buf();
    let agent_side = async {
        let (id, params) = agent.expect("session/list").await;
        assert_eq!(params, json!({"cwd": root}));
        agent
            .respond(
                id,
                json!({"sessions": [
                    {"sessionId": "a", "cwd": root, "title": "Fix the parser",
                     "updatedAt": "2026-12-01T12:00:00Z"},
                    {"sessionId": "elsewhere", "cwd": "/somewhere/else", "title": "Not here"},
                    {"cwd": root, "title": "no id: skipped"}],
                  "nextCursor": "page-2"}),
            )
            .await;
        let (id, params) = agent.expect("session/list").await;
        assert_eq!(params, json!({"cwd": root, "cursor": "page-2"}));
        // A cursor that does not move ends the listing.
        agent
            .respond(
                id,
                json!({"sessions": [{"sessionId": "b", "cwd": root, "title": "  ",
                    "updatedAt": "yesterday"}], "nextCursor": "page-2"}),
            )
            .await;
    };
    let (listed, ()) = tokio::join!(session.agent_sessions(), agent_side);
    assert_eq!(
        listed,
        Ok(vec![
            AgentSession {
                id: "a".into(),
                title: Some("Fix the parser".into()),
                updated: Some(1_796_126_400),
            },
            AgentSession {
                id: "b".into(),
                title: None,
                updated: None,
            },
        ])
    );
}

#[tokio::test]
async fn a_loaded_session_is_replayed_as_prompts_and_turns_and_the_next_prompt_goes_to_it() {
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let (dir, session, mut agent) = pair_offering(host.clone(), false, offering_sessions()).await;
    let root = Workspace::new(dir.path()).unwrap().root().to_path_buf();
    let agent_side = async {
        let (id, params) = agent.expect("session/load").await;
        assert_eq!(
            params,
            json!({"sessionId": "old-1", "cwd": root, "mcpServers": []})
        );
        for update in [
            json!({"sessionUpdate": "user_message_chunk",
                "content": {"type": "text", "text": "Fix "}}),
            json!({"sessionUpdate": "user_message_chunk",
                "content": {"type": "text", "text": "the bug\nin parse.rs"}}),
            json!({"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "Reading it."}}),
            // Its files are history: no Locations for follow mode.
            json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read parse.rs",
                "kind": "read", "status": "pending",
                "locations": [{"path": format!("{}/parse.rs", root.display())}]}),
            json!({"sessionUpdate": "user_message_chunk",
                "content": {"type": "text", "text": "thanks"}}),
        ] {
            agent.update(update).await;
        }
        agent.respond(id, Value::Null).await;
    };
    let (answer, seen) = loaded(&session, "old-1", agent_side).await;
    assert_eq!(answer, Ok("Fix the bug".to_string()));
    let row = |status: &str| {
        AcpEvent::Agent(AgentUpdate::ToolUpdated {
            id: "t1".into(),
            title: "Read parse.rs".into(),
            status: status.into(),
            kind: "read".into(),
            output: String::new(),
            running: false,
        })
    };
    assert_eq!(
        seen,
        vec![
            AcpEvent::Agent(AgentUpdate::UserMessage {
                text: "Fix the bug\nin parse.rs".into()
            }),
            AcpEvent::Turn(Event::TurnStarted),
            AcpEvent::Turn(Event::Text {
                text: "Reading it.".into()
            }),
            AcpEvent::Turn(Event::ToolStarted {
                id: "t1".into(),
                name: "Read parse.rs".into(),
                args: Value::Null,
            }),
            row("pending"),
            // The row a replayed turn left open is closed before the next prompt.
            AcpEvent::Turn(Event::ToolFinished {
                id: "t1".into(),
                name: "Read parse.rs".into(),
                ok: true,
                summary: "Read parse.rs".into(),
                output: String::new(),
                diff: None,
            }),
            AcpEvent::Agent(AgentUpdate::UserMessage {
                text: "thanks".into()
            }),
        ]
    );
    assert_eq!(host.events(), vec![]);
    // Prompts go to the loaded session; a live user message chunk is not shown.
    let agent_side = async {
        let (id, params) = agent.expect("session/prompt").await;
        assert_eq!(params["sessionId"], "old-1");
        agent
            .update(json!({"sessionUpdate": "user_message_chunk",
                "content": {"type": "text", "text": "echo"}}))
            .await;
        agent.respond(id, json!({"stopReason": "end_turn"})).await;
    };
    let never = CancellationToken::new();
    let (outcome, ()) = tokio::join!(session.prompt("go on".into(), &never), agent_side);
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(
        host.events(),
        vec![
            AcpEvent::Turn(Event::TurnStarted),
            done(Outcome::Done, "done (end_turn)")
        ]
    );
}

#[tokio::test]
async fn a_refused_load_is_a_clear_error_and_prompts_stay_with_the_session_before() {
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let (_dir, session, mut agent) = pair_offering(host.clone(), false, offering_sessions()).await;
    let agent_side = async {
        let (id, _) = agent.expect("session/load").await;
        agent
            .send(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32002, "message": "no such session"}}))
            .await;
    };
    let (answer, seen) = loaded(&session, "gone", agent_side).await;
    assert_eq!(
        answer,
        Err(crate::conversation::ConversationError::Agent(
            crate::conversation::Cause::new("fake failed session/load: no such session (-32002)")
        ))
    );
    assert_eq!(seen, vec![]);
    let agent_side = async {
        let (id, params) = agent.expect("session/prompt").await;
        assert_eq!(params["sessionId"], "s");
        agent.respond(id, json!({"stopReason": "end_turn"})).await;
    };
    let never = CancellationToken::new();
    let (outcome, ()) = tokio::join!(session.prompt("hi".into(), &never), agent_side);
    assert_eq!(outcome, Outcome::Done);
    // A list answer that is no list is an error too, never a panic.
    let (_dir, session, mut agent) = pair_offering(host, false, offering_sessions()).await;
    let agent_side = async {
        let (id, _) = agent.expect("session/list").await;
        agent.respond(id, json!("nonsense")).await;
    };
    let (listed, ()) = tokio::join!(session.list_sessions(), agent_side);
    assert!(
        matches!(
            &listed,
            Err(SessionsError::Failed {
                method: "session/list",
                ..
            })
        ),
        "{listed:?}"
    );
}

#[tokio::test]
async fn without_the_offers_nothing_is_listed_or_loaded_and_a_gone_agent_says_so() {
    use crate::conversation::AgentSessions;
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let (_dir, session, agent) = pair(host.clone(), false).await;
    assert_eq!(session.offers(), Offers::default());
    assert_eq!(session.agent_sessions().await, Ok(vec![]));
    assert_eq!(
        session.list_sessions().await.map_err(|err| err.to_string()),
        Err("fake does not offer session/list".to_string())
    );
    let (answer, seen) = loaded(&session, "x", async {}).await;
    assert_eq!(
        answer,
        Err(crate::conversation::ConversationError::Agent(
            crate::conversation::Cause::new("fake does not offer session/load")
        ))
    );
    assert_eq!(seen, vec![]);
    drop(agent);
    let (_dir, session, agent) = pair_offering(host, false, offering_sessions()).await;
    drop(agent);
    let gone = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match session.list_sessions().await {
                Err(SessionsError::Ended(reason)) => break reason,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(gone, "fake closed the connection");
}

#[test]
fn times_are_read_in_the_iso_forms_agents_send() {
    assert_eq!(load::epoch_of("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(load::epoch_of("2026-12-01T12:00:00Z"), Some(1_796_126_400));
    assert_eq!(
        load::epoch_of("2026-12-01T12:00:00.123456Z"),
        Some(1_796_126_400)
    );
    assert_eq!(
        load::epoch_of("2026-12-01T13:30:00+01:30"),
        Some(1_796_126_400)
    );
    assert_eq!(
        load::epoch_of("2026-12-01T10:00:00-02:00"),
        Some(1_796_126_400)
    );
    assert_eq!(load::epoch_of("2024-02-29T00:00:00"), Some(1_709_164_800));
    for bad in [
        "",
        "yesterday",
        "2026-13-01T00:00:00Z",
        "2026-12-01",
        "2026-12-01T25:00:00Z",
        "2026-12-01T12:00:00+0100",
        "1969-12-31T23:59:59Z",
        "２０２６-12-01T12:00:00Z",
    ] {
        assert_eq!(load::epoch_of(bad), None, "{bad}");
    }
}

#[test]
fn a_replayed_user_message_is_named_prompt_on_the_wire_as_a_resumed_prompt_is() {
    let replayed = AcpEvent::Agent(AgentUpdate::UserMessage { text: "hi".into() });
    assert_eq!(
        serde_json::to_value(&replayed).unwrap(),
        json!({"type": "prompt", "text": "hi"})
    );
    let read: AcpEvent = serde_json::from_value(json!({"type": "prompt", "text": "hi"})).unwrap();
    assert_eq!(read, replayed);
}

/// A prompt holding one small image (its bytes need not decode: they are only carried).
fn with_image() -> agent_nvim_conversation::Prompt {
    agent_nvim_conversation::Prompt {
        text: "what is this?".into(),
        images: vec![agent_nvim_conversation::Image {
            name: "shot.png".into(),
            media_type: "image/png".into(),
            width: 2,
            height: 1,
            scaled_from: None,
            data: vec![0x89, b'P', b'N', b'G'].into(),
            file: None,
        }],
        audio: Vec::new(),
    }
}

/// The `prompt` of the `session/prompt` an agent offering `capabilities` is sent for `prompt`.
async fn prompt_as_sent(capabilities: Value, prompt: agent_nvim_conversation::Prompt) -> Value {
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let (_dir, session, mut agent) = pair_offering(host.clone(), false, capabilities).await;
    let agent_side = async {
        let (id, params) = agent.expect("session/prompt").await;
        agent.respond(id, json!({"stopReason": "end_turn"})).await;
        params
    };
    let never = CancellationToken::new();
    let (outcome, params) = tokio::join!(session.prompt(prompt, &never), agent_side);
    assert_eq!(outcome, Outcome::Done);
    params["prompt"].clone()
}

#[tokio::test]
async fn an_image_goes_as_image_content_to_an_agent_whose_prompt_capabilities_take_it() {
    let capabilities = json!({"promptCapabilities": {"image": true}});
    assert_eq!(
        prompt_as_sent(capabilities, with_image()).await,
        json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image", "mimeType": "image/png", "data": "iVBORw=="}
        ])
    );
}

/// A prompt holding one audio clip (its bytes are only carried: a WAV's first four).
fn with_audio() -> agent_nvim_conversation::Prompt {
    agent_nvim_conversation::Prompt {
        text: "what is said here?".into(),
        images: Vec::new(),
        audio: vec![agent_nvim_conversation::Audio {
            name: "note.wav".into(),
            media_type: "audio/wav".into(),
            data: b"RIFF".to_vec().into(),
        }],
    }
}

#[tokio::test]
async fn an_audio_clip_goes_as_audio_content_to_an_agent_whose_prompt_capabilities_take_it() {
    let capabilities = json!({"promptCapabilities": {"audio": true}});
    assert_eq!(
        prompt_as_sent(capabilities, with_audio()).await,
        json!([
            {"type": "text", "text": "what is said here?"},
            {"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="}
        ])
    );
}

/// `prompt` refused by an agent offering `capabilities`, the person told `why`; the next prompt
/// is the first thing the agent hears.
async fn refused_before_sending(
    capabilities: Value,
    prompt: agent_nvim_conversation::Prompt,
    why: &str,
) {
    let host = Arc::new(FakeHost::new(true, Answer::Never));
    let (_dir, session, mut agent) = pair_offering(host.clone(), false, capabilities).await;
    let never = CancellationToken::new();
    assert_eq!(session.prompt(prompt, &never).await, Outcome::Failed);
    let said = format!("{:?}", host.events());
    assert!(said.contains(why), "{said}");
    let agent_side = async {
        let (id, params) = agent.expect("session/prompt").await;
        agent.respond(id, json!({"stopReason": "end_turn"})).await;
        params
    };
    let (_, params) = tokio::join!(session.prompt("hi".into(), &never), agent_side);
    assert_eq!(params["prompt"], json!([{"type": "text", "text": "hi"}]));
}

#[tokio::test]
async fn an_agent_that_takes_no_audio_is_sent_nothing_and_the_person_is_told_why() {
    // Images taken, audio not: the clip alone decides.
    refused_before_sending(
        json!({"promptCapabilities": {"image": true}}),
        with_audio(),
        "agent: fake does not take audio (its promptCapabilities.audio is not set), so nothing was sent",
    )
    .await;
}

#[tokio::test]
async fn an_agent_that_takes_no_images_is_sent_nothing_and_the_person_is_told_why() {
    refused_before_sending(
        json!({}),
        with_image(),
        "agent: fake does not take images (its promptCapabilities.image is not set), so nothing was sent",
    )
    .await;
}
