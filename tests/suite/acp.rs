//! The ACP client against a real agent process: `acp-test-agent` (tests/bin/acp_test_agent.rs), a
//! scripted agent speaking ACP on stdio, started as a child in its own process group exactly as
//! Claude Code's or Gemini's adapter would be.

use crate::support::process::{alive, marked_survivors, unique_marker, with_marker};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_nvim::acp::{
    self, AcpEvent, AcpSession, AcpSpec, AgentUpdate, PermissionAsk, PermissionChoice, PlanEntry,
};
use agent_nvim::agent::{Event, Outcome};
use agent_nvim::workspace::Workspace;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const SECRET: &str = "the secret outside the workspace";

use crate::support::fake_host::{Answer, FakeHost as Host};

/// A workspace `ws` inside a temporary directory that also holds `outside.txt`, and the agent's
/// log file.
pub(crate) struct Fixture {
    _dir: tempfile::TempDir,
    pub(crate) workspace: Workspace,
    pub(crate) log: PathBuf,
}

impl Fixture {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(dir.path().join("outside.txt"), SECRET).unwrap();
        std::fs::write(root.join("inside.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(root.join("dirty.txt"), "original").unwrap();
        std::fs::write(root.join("open.txt"), "on disk").unwrap();
        std::fs::write(root.join("notes.txt"), "a\n").unwrap();
        let workspace = Workspace::new(&root).unwrap();
        let log = dir.path().join("agent.log");
        Fixture {
            _dir: dir,
            workspace,
            log,
        }
    }

    pub(crate) fn root(&self) -> &Path {
        self.workspace.root()
    }

    pub(crate) fn spec(&self, mode: &str) -> AcpSpec {
        let mut spec = AcpSpec::new(
            "test",
            vec![
                env!("CARGO_BIN_EXE_acp-test-agent").to_string(),
                mode.to_string(),
            ],
            self.workspace.clone(),
        );
        spec.env
            .push(("ACP_TEST_AGENT_LOG".into(), self.log.display().to_string()));
        spec.connect_timeout = Duration::from_secs(20);
        spec
    }

    /// Every entry the agent logged.
    pub(crate) fn log(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    fn logged_pid(&self, key: &str) -> i32 {
        self.log()
            .iter()
            .find_map(|entry| entry[key].as_i64())
            .unwrap_or_else(|| panic!("no {key} in the agent's log")) as i32
    }

    pub(crate) async fn connect(&self, host: &Arc<Host>, mode: &str) -> AcpSession {
        acp::connect(self.spec(mode), host.clone()).await.unwrap()
    }
}

/// Runs one prompt, bounded so that a hang fails the test instead of stalling the suite.
pub(crate) async fn prompt(session: &AcpSession, text: &str) -> Outcome {
    tokio::time::timeout(
        Duration::from_secs(20),
        session.prompt(text.into(), &CancellationToken::new()),
    )
    .await
    .expect("the turn hung")
}

async fn gone(pid: i32) -> bool {
    crate::support::process::all_gone(&[pid], Duration::from_secs(3)).await
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

fn row(id: &str, title: &str, status: &str, kind: &str, output: &str) -> AcpEvent {
    AcpEvent::Agent(AgentUpdate::ToolUpdated {
        id: id.into(),
        title: title.into(),
        status: status.into(),
        kind: kind.into(),
        output: output.into(),
        running: false,
    })
}

#[tokio::test]
async fn a_turn_streams_thoughts_text_a_plan_and_a_tool_row_updated_in_place() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = fx.connect(&host, "normal").await;
    assert_eq!(prompt(&session, "chat").await, Outcome::Done);
    let entry = |content: &str, priority: &str, status: &str| PlanEntry {
        content: content.into(),
        status: status.into(),
        priority: priority.into(),
    };
    let output = "1 line\n[terminal term-1]";
    assert_eq!(
        host.events(),
        vec![
            AcpEvent::Turn(Event::TurnStarted),
            AcpEvent::Agent(AgentUpdate::Thought {
                text: "Thinking about it.".into()
            }),
            AcpEvent::Turn(Event::Text {
                text: "Hello".into()
            }),
            AcpEvent::Turn(Event::Text {
                text: ", world".into()
            }),
            AcpEvent::Agent(AgentUpdate::Plan {
                entries: vec![
                    entry("Read the notes", "high", "completed"),
                    entry("Answer", "medium", "in_progress"),
                ]
            }),
            AcpEvent::Turn(Event::ToolStarted {
                id: "t1".into(),
                name: "Read notes.txt".into(),
                args: json!({"path": "notes.txt"}),
            }),
            row("t1", "Read notes.txt", "pending", "read", ""),
            row("t1", "Read notes.txt", "in_progress", "read", ""),
            row("t1", "Read notes.txt", "completed", "read", output),
            AcpEvent::Turn(Event::ToolFinished {
                id: "t1".into(),
                name: "Read notes.txt".into(),
                ok: true,
                summary: "Read notes.txt".into(),
                output: output.into(),
                diff: None,
            }),
            // The agent's (empty) list of slash commands, for the input's completion.
            AcpEvent::Agent(AgentUpdate::Commands { commands: vec![] }),
            done(Outcome::Done, "done (end_turn)"),
        ]
    );
    // The junk lines on the agent's stdout were skipped, not answered.
    assert!(fx
        .log()
        .iter()
        .all(|entry| !entry["received"].as_str().unwrap_or("").contains("-32700")));
    session.shutdown().await;
}

#[tokio::test]
async fn file_access_goes_through_the_path_check_and_the_editor() {
    let fx = Fixture::new();
    let mut host = Host::new(true, Answer::Never);
    host.unsaved.push(fx.root().join("dirty.txt"));
    host.buffers
        .push((fx.root().join("open.txt"), "in the buffer".into()));
    let host = Arc::new(host);
    let session = fx.connect(&host, "normal").await;
    assert_eq!(prompt(&session, "fs").await, Outcome::Done);

    assert_eq!(
        host.report("read inside.txt"),
        json!({"result": {"content": "two\n"}})
    );
    let refused = |path: &str| {
        json!({"error": {"code": -32602,
            "message": format!("Refused: '{path}' resolves outside the workspace root.")}})
    };
    assert_eq!(
        host.report("read ../outside.txt"),
        refused("../outside.txt")
    );
    let absolute = fx.root().parent().unwrap().join("outside.txt");
    assert_eq!(
        host.report("read absolute outside"),
        refused(&absolute.display().to_string())
    );
    assert_eq!(
        host.report("read open.txt"),
        json!({"result": {"content": "in the buffer"}})
    );
    assert_eq!(
        host.report("write made/by/agent.txt"),
        json!({"result": {}})
    );
    assert_eq!(
        std::fs::read_to_string(fx.root().join("made/by/agent.txt")).unwrap(),
        "written\n"
    );
    let dirty = host.report("write dirty.txt");
    assert_eq!(dirty["error"]["code"], -32603);
    assert_eq!(
        dirty["error"]["message"],
        "Refused: 'dirty.txt' has unsaved changes in the editor; the user must save or \
         discard them before it can be written."
    );
    assert_eq!(
        std::fs::read_to_string(fx.root().join("dirty.txt")).unwrap(),
        "original"
    );
    assert_eq!(host.report("write ../escape.txt"), refused("../escape.txt"));
    assert!(!fx.root().parent().unwrap().join("escape.txt").exists());
    assert_eq!(host.report("unknown request")["error"]["code"], -32601);
    // Reloaded once, for the one write that happened.
    assert_eq!(
        *host.written.lock().unwrap(),
        vec![fx.root().join("made/by/agent.txt")]
    );
    // Not a byte of the file outside reached the agent.
    let received = std::fs::read_to_string(&fx.log).unwrap();
    assert!(received.contains("resolves outside"), "{received}");
    assert!(!received.contains(SECRET));
    session.shutdown().await;
}

#[tokio::test]
async fn permission_is_asked_with_the_agents_options_and_a_diff_preview() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Kind("allow_always")));
    let session = fx.connect(&host, "normal").await;
    assert_eq!(prompt(&session, "permission").await, Outcome::Done);
    let choice = |id: &str, name: &str, kind: &str| PermissionChoice {
        id: id.into(),
        name: name.into(),
        kind: kind.into(),
    };
    assert_eq!(
        *host.asks.lock().unwrap(),
        vec![PermissionAsk {
            tool_call_id: "p1".into(),
            title: "Edit notes.txt".into(),
            options: vec![
                choice("allow-once", "Allow", "allow_once"),
                choice("always", "Always allow", "allow_always"),
                choice("reject", "Reject", "reject_once"),
            ],
            diff: Some("--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n-a\n+b\n".into()),
            command: None,
            cwd: None,
            timeout: None,
            edit: None,
        }]
    );
    assert_eq!(
        host.report("permission"),
        json!({"result": {"outcome": {"outcome": "selected", "optionId": "always"}}})
    );
    session.shutdown().await;
}

#[tokio::test]
async fn without_a_ui_permission_is_cancelled_and_auto_approve_picks_allow_always() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(false, Answer::Kind("allow_once")));
    let session = fx.connect(&host, "normal").await;
    assert_eq!(prompt(&session, "permission").await, Outcome::Done);
    assert_eq!(
        host.report("permission"),
        json!({"result": {"outcome": {"outcome": "cancelled"}}})
    );
    session.shutdown().await;

    let host = Arc::new(Host::new(true, Answer::Kind("reject_once")));
    let mut spec = fx.spec("normal");
    spec.auto_approve = true;
    let session = acp::connect(spec, host.clone()).await.unwrap();
    assert_eq!(prompt(&session, "permission").await, Outcome::Done);
    assert_eq!(
        host.report("permission"),
        json!({"result": {"outcome": {"outcome": "selected", "optionId": "always"}}})
    );
    assert!(host.asks.lock().unwrap().is_empty());
    session.shutdown().await;
}

#[tokio::test]
async fn cancel_mid_turn_answers_the_open_question_cancelled() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = fx.connect(&host, "normal").await;
    let cancel = CancellationToken::new();
    let canceller = async {
        while host.asks.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
    };
    let (outcome, ()) = tokio::time::timeout(
        Duration::from_secs(20),
        futures::future::join(session.prompt("cancel".into(), &cancel), canceller),
    )
    .await
    .unwrap();
    assert_eq!(outcome, Outcome::Cancelled);
    assert_eq!(
        host.asks.lock().unwrap()[0].command.as_deref(),
        Some("sleep 100")
    );
    assert_eq!(
        host.report("permission"),
        json!({"result": {"outcome": {"outcome": "cancelled"}}})
    );
    let received: Vec<Value> = fx
        .log()
        .iter()
        .filter_map(|e| e["received"].as_str())
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(
        received
            .iter()
            .any(|m| m["method"] == "session/cancel" && m.get("id").is_none()),
        "{received:?}"
    );
    assert_eq!(host.last(), done(Outcome::Cancelled, "cancelled"));
    // The session is still usable.
    assert_eq!(prompt(&session, "usage").await, Outcome::Done);
    session.shutdown().await;
}

#[tokio::test]
async fn an_agent_that_exits_mid_turn_fails_the_turn_and_the_session_without_hanging() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = fx.connect(&host, "normal").await;
    assert_eq!(prompt(&session, "crash").await, Outcome::Failed);
    let message = "test exited (exit code 3): fatal: test agent crashed on purpose";
    let events = host.events();
    assert_eq!(host.text(), "about to crash");
    assert_eq!(
        events[events.len() - 2..],
        [
            AcpEvent::Turn(Event::Error {
                message: message.into()
            }),
            done(Outcome::Failed, message),
        ]
    );
    host.events.lock().unwrap().clear();
    assert_eq!(prompt(&session, "chat").await, Outcome::Failed);
    assert_eq!(host.last(), done(Outcome::Failed, message));
    session.shutdown().await;
}

#[tokio::test]
async fn usage_reported_by_the_agent_reaches_the_turn_end() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = fx.connect(&host, "normal").await;
    assert_eq!(prompt(&session, "usage").await, Outcome::Done);
    assert_eq!(
        host.events()[1..],
        [
            AcpEvent::Turn(Event::Usage {
                input: 12,
                output: 34,
                cached: 0,
                cost: None,
            }),
            AcpEvent::Turn(Event::TurnDone {
                input: 12,
                output: 34,
                outcome: Outcome::Done,
                message: "done (end_turn)".into(),
                cost: None,
            }),
        ]
    );
    session.shutdown().await;
}

#[tokio::test]
async fn an_agent_that_never_answers_initialize_is_given_up_and_killed() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let mut spec = fx.spec("silent");
    spec.connect_timeout = Duration::from_millis(500);
    let command = spec.command.join(" ");
    let started = Instant::now();
    let err = acp::connect(spec, host).await.err().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        format!("agent: {err}"),
        format!("agent: test did not answer initialize within 0.5 s; is `{command}` an ACP agent?")
    );
    assert!(gone(fx.logged_pid("pid")).await);
}

#[tokio::test]
async fn a_command_that_is_not_installed_says_so() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let spec = AcpSpec::new(
        "nope",
        vec!["agent-nvim-no-such-agent".into(), "--acp".into()],
        fx.workspace.clone(),
    );
    let err = acp::connect(spec, host).await.err().unwrap();
    assert_eq!(
        err.to_string(),
        "could not start 'agent-nvim-no-such-agent': No such file or directory (os error 2) \
         — is it installed and on PATH?"
    );
}

#[tokio::test]
async fn shutdown_kills_the_agents_process_tree() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = fx.connect(&host, "spawn-child").await;
    let (pid, grandchild) = (fx.logged_pid("pid"), fx.logged_pid("grandchild"));
    assert!(alive(pid) && alive(grandchild));
    let started = Instant::now();
    session.shutdown().await;
    // It exits on its own when its stdin closes: no waiting out the grace period.
    assert!(started.elapsed() < Duration::from_millis(1900));
    assert!(gone(pid).await);
    assert!(gone(grandchild).await);
}

#[tokio::test]
async fn shutdown_kills_what_the_agent_detached_into_a_session_of_its_own() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let marker = unique_marker("acpdetached");
    let mut spec = fx.spec("spawn-detached");
    spec.env
        .push(("ACP_TEST_AGENT_MARKER".into(), marker.clone()));
    let session = acp::connect(spec, host.clone()).await.unwrap();
    // Started by the agent as it comes up: on a loaded machine, a moment after the handshake.
    let deadline = Instant::now() + Duration::from_secs(10);
    while with_marker(&marker).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        with_marker(&marker).len(),
        1,
        "the detached process is running"
    );
    session.shutdown().await;
    // shutdown returns once the tree is gone: no waiting needed.
    assert_eq!(
        marked_survivors(&marker, Duration::ZERO).await,
        Vec::<i32>::new()
    );
}

#[tokio::test]
async fn an_agent_that_crashes_takes_what_it_detached_with_it() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let marker = unique_marker("acpcrash");
    let mut spec = fx.spec("spawn-detached");
    spec.env
        .push(("ACP_TEST_AGENT_MARKER".into(), marker.clone()));
    let session = acp::connect(spec, host.clone()).await.unwrap();
    // The detached process holds the agent's stdout: until it is killed, the connection cannot
    // see the agent go and the turn would not end.
    let started = Instant::now();
    assert_eq!(prompt(&session, "crash").await, Outcome::Failed);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        marked_survivors(&marker, Duration::from_secs(3)).await,
        Vec::<i32>::new()
    );
    session.shutdown().await;
}

#[tokio::test]
async fn an_agent_that_ignores_its_closed_stdin_is_killed_after_two_seconds() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = fx.connect(&host, "ignore-eof").await;
    let pid = fx.logged_pid("pid");
    let started = Instant::now();
    session.shutdown().await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(gone(pid).await);
}

#[tokio::test]
async fn dropping_a_session_kills_the_agent() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = fx.connect(&host, "spawn-child").await;
    let (pid, grandchild) = (fx.logged_pid("pid"), fx.logged_pid("grandchild"));
    drop(session);
    assert!(gone(pid).await);
    assert!(gone(grandchild).await);
}

#[tokio::test]
async fn an_agent_that_exits_at_once_reports_how_it_ended() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let spec = AcpSpec::new(
        "broken",
        vec![
            "sh".into(),
            "-c".into(),
            "echo 'Error: not logged in' >&2; exit 7".into(),
        ],
        fx.workspace.clone(),
    );
    let err = tokio::time::timeout(Duration::from_secs(10), acp::connect(spec, host))
        .await
        .unwrap()
        .err()
        .unwrap();
    assert_eq!(
        format!("agent: {err}"),
        "agent: broken exited (exit code 7): Error: not logged in"
    );
}

#[tokio::test]
async fn an_agents_write_and_what_it_did_after_a_permission_are_undone_by_a_restore() {
    use agent_nvim::checkpoint::{Checkpoints, Kind};
    let fx = Fixture::new();
    let state = tempfile::tempdir().unwrap();
    let checkpoints = Checkpoints::new(state.path(), fx.workspace.clone(), "acp".into());
    let host = Arc::new(Host::new(true, Answer::Kind("allow_once")));
    let mut spec = fx.spec("normal");
    spec.checkpoints = Some(checkpoints.clone());
    let session = acp::connect(spec, host.clone()).await.unwrap();
    assert_eq!(prompt(&session, "fs").await, Outcome::Done);
    assert!(fx.root().join("made/by/agent.txt").exists());
    assert_eq!(prompt(&session, "permission").await, Outcome::Done);
    session.shutdown().await;

    let listed = checkpoints.list("acp").await.unwrap();
    let kinds: Vec<(Kind, &str)> = listed.iter().map(|c| (c.kind, c.label.as_str())).collect();
    assert_eq!(
        kinds,
        [
            (Kind::Write, "made/by/agent.txt"),
            (Kind::Write, "dirty.txt"),
            (Kind::Write, "../escape.txt"),
            (Kind::Permission, "Edit notes.txt"),
        ]
    );
    let restored = checkpoints
        .restore(&listed[0].id, &agent_nvim::editor::NoEditor)
        .await
        .unwrap();
    // The agent's two writes undone (the host has no unsaved buffer, so dirty.txt was written).
    assert!(!fx.root().join("made/by/agent.txt").exists());
    assert_eq!(
        std::fs::read_to_string(fx.root().join("dirty.txt")).unwrap(),
        "original"
    );
    assert_eq!(restored.files.len(), 2, "{restored:?}");
}

/// What the person answers an agent's form is checked against the form before it is sent: an
/// answer that does not fit (a number for a name, a choice it does not offer) is a `cancel`, and
/// one that fits goes as it is, fields the form does not have left out.
#[tokio::test]
async fn an_elicitation_answer_is_checked_against_its_form_before_it_is_sent() {
    use agent_nvim::acp::elicit::Elicited;
    let fx = Fixture::new();
    let content = |value: serde_json::Value| value.as_object().unwrap().clone();
    for (answer, sent) in [
        (
            Elicited::Accept(content(json!({"name": 5, "engine": "pg"}))),
            json!({"action": "cancel"}),
        ),
        (
            Elicited::Accept(content(json!({"name": "db", "engine": "oracle"}))),
            json!({"action": "cancel"}),
        ),
        (
            Elicited::Accept(content(
                json!({"name": "db", "engine": "my", "extra": true}),
            )),
            json!({"action": "accept", "content": {"name": "db", "engine": "my"}}),
        ),
        (Elicited::Decline, json!({"action": "decline"})),
    ] {
        let host = Arc::new(Host::new(true, Answer::Never));
        *host.elicit_with.lock().unwrap() = Some(answer);
        let session = acp::connect(fx.spec("normal"), host.clone()).await.unwrap();
        prompt(&session, "elicit-form").await;
        assert_eq!(host.report("elicited")["result"], sent);
        // A cancel the person did not choose is said in the chat.
        let said = host.events().iter().any(
            |e| matches!(e, AcpEvent::Turn(Event::Notice { text }) if text.contains("did not fit")),
        );
        assert_eq!(
            said,
            sent == json!({"action": "cancel"}),
            "{:?}",
            host.events()
        );
        // The chat's row says what went, never `sent` for values that did not.
        let notices: Vec<String> = host
            .events()
            .iter()
            .filter_map(|e| match e {
                AcpEvent::Turn(Event::Notice { text }) if !text.contains("did not fit") => {
                    Some(text.clone())
                }
                _ => None,
            })
            .collect();
        let row = match sent["action"].as_str().unwrap() {
            "accept" => vec!["test: sent".to_string()],
            "decline" => vec!["test: declined".to_string()],
            _ => Vec::new(),
        };
        assert_eq!(notices, row);
        let asked = host.elicited.lock().unwrap().clone();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].message, "Which database should I set up?");
        session.shutdown().await;
    }
    // Nobody to ask: cancel, and nothing was shown.
    let host = Arc::new(Host::new(false, Answer::Never));
    let session = acp::connect(fx.spec("normal"), host.clone()).await.unwrap();
    prompt(&session, "elicit-form").await;
    assert_eq!(
        host.report("elicited")["result"],
        json!({"action": "cancel"})
    );
    assert!(host.elicited.lock().unwrap().is_empty());
    session.shutdown().await;
}

/// A `session/load` the person stops (`:Agent stop`) is cancelled on the wire too: the agent
/// gets `$/cancel_request` naming that request (and this one stops only when it does).
#[tokio::test]
async fn a_load_the_person_stops_sends_cancel_request_for_it() {
    use agent_nvim::acp::{Flow, Tap};
    use agent_nvim::conversation::Conversation;
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let sent: Arc<std::sync::Mutex<Vec<serde_json::Value>>> = Arc::default();
    let mut spec = fx.spec("normal");
    let seen = sent.clone();
    spec.tap = Some(Tap(Arc::new(move |flow, line| {
        if flow == Flow::Sent {
            seen.lock()
                .unwrap()
                .push(serde_json::from_str(line).unwrap());
        }
    })));
    let session = acp::connect(spec, host.clone()).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let stopper = {
        let stop = stop.clone();
        async move {
            // Once the replay has begun: the agent is working on the load.
            let _ = rx.recv().await;
            stop.cancel();
        }
    };
    let (loaded, ()) = tokio::time::timeout(
        Duration::from_secs(20),
        futures::future::join(
            session.load("slow", &agent_nvim::conversation::Events::new(tx), &stop),
            stopper,
        ),
    )
    .await
    .expect("the load hung");
    assert!(loaded.is_err(), "{loaded:?}");
    // The notification is written by the connection's own task, just after.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline
        && !sent
            .lock()
            .unwrap()
            .iter()
            .any(|m| m["method"] == "$/cancel_request")
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sent = sent.lock().unwrap().clone();
    let load = sent
        .iter()
        .find(|m| m["method"] == "session/load")
        .expect("a session/load");
    let cancels: Vec<&serde_json::Value> = sent
        .iter()
        .filter(|m| m["method"] == "$/cancel_request")
        .collect();
    assert_eq!(cancels.len(), 1, "{sent:#?}");
    assert_eq!(cancels[0]["params"]["requestId"], load["id"]);
    // The agent answered it cancelled (it does only on the notification), and still works.
    assert_eq!(prompt(&session, "chat").await, Outcome::Done);
    session.shutdown().await;
}

/// An agent that resumes its sessions but cannot load them: picked from its list, the session
/// is continued (`session/resume`), the chat says its earlier messages cannot be shown, and
/// prompts go to it.
#[tokio::test]
async fn a_session_of_an_agent_that_only_resumes_is_continued_and_the_chat_says_nothing_is_shown() {
    use agent_nvim::conversation::Conversation;
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = fx.connect(&host, "resume-only").await;
    assert!(session.offers().resume && !session.offers().load);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let title = session
        .load(
            "earlier-1",
            &agent_nvim::conversation::Events::new(tx),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(title, "");
    let mut said = Vec::new();
    while let Ok(event) = rx.try_recv() {
        said.push(event);
    }
    assert_eq!(
        said,
        vec![AcpEvent::Turn(Event::Notice {
            text: "test continues that session without replaying it: its earlier messages are not shown".into()
        })]
    );
    assert_eq!(prompt(&session, "which session").await, Outcome::Done);
    assert!(
        host.text().contains("prompted in: \"earlier-1\""),
        "{}",
        host.text()
    );
    session.shutdown().await;
}

/// A question about one of our requests (`requestId`) is asked while that request waits and
/// closed (`cancel`) once the agent answers it; one naming no request of ours waiting is
/// answered `cancel` without being shown.
#[tokio::test]
async fn a_request_scoped_question_lives_as_long_as_its_request() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    *host.elicit_with.lock().unwrap() = None;
    let session = fx.connect(&host, "normal").await;
    prompt(&session, "elicit-request").await;
    assert_eq!(host.report("stale")["result"], json!({"action": "cancel"}));
    prompt(&session, "elicit-closed").await;
    assert_eq!(host.report("closed"), json!({"action": "cancel"}));
    let asked = host.elicited.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].message, "About this prompt?");
    session.shutdown().await;
}

/// An agent that asks six questions at once: four are shown, the rest answered `cancel` at once
/// (a flood of floats is no way to ask a person anything).
#[tokio::test]
async fn an_agent_has_at_most_four_questions_open_at_once() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    *host.elicit_with.lock().unwrap() = None;
    let session = fx.connect(&host, "normal").await;
    prompt(&session, "elicit-flood").await;
    let early = host.report("early");
    let actions: Vec<&Value> = early
        .as_array()
        .unwrap()
        .iter()
        .map(|answer| &answer["action"])
        .collect();
    assert_eq!(actions, [&json!("cancel"), &json!("cancel")], "{early}");
    assert_eq!(host.elicited.lock().unwrap().len(), 4);
    session.shutdown().await;
}
