//! An external agent's terminals (`terminal/*`) against `acp-test-agent`: what runs is what a
//! person allowed, where the path check lets it, bounded, killable, and shown in its row.

use std::sync::Arc;
use std::time::Duration;

use agent_nvim::acp::{self, AcpEvent, AgentUpdate};
use agent_nvim::agent::Outcome;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::acp::{prompt, Fixture};
use crate::support::fake_host::{Answer, FakeHost as Host};
use crate::support::process::{marked_survivors, unique_marker, with_marker};

/// The rows the turn showed for tool call `id`: (output, running).
fn rows(host: &Host, id: &str) -> Vec<(String, bool)> {
    host.events()
        .into_iter()
        .filter_map(|event| match event {
            AcpEvent::Agent(AgentUpdate::ToolUpdated {
                id: row,
                output,
                running,
                ..
            }) if row == id => Some((output, running)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_allowed_command_runs_in_a_terminal_shown_in_its_row_and_release_frees_it() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Kind("allow_once")));
    let session = fx.connect(&host, "normal").await;
    let line = r"printf 'one\ntwo\n'; exit 3";
    assert_eq!(
        prompt(&session, &format!("terminal {line}")).await,
        Outcome::Done
    );
    // One question: the agent's own, showing the command; its allow covers the terminal.
    let asks = host.asks.lock().unwrap().clone();
    assert_eq!(asks.len(), 1, "{asks:?}");
    assert_eq!(asks[0].command.as_deref(), Some(line));
    let id = host.report("create")["result"]["terminalId"].clone();
    assert!(id.is_string(), "{id}");
    assert_eq!(
        host.report("exit"),
        json!({"result": {"exitCode": 3, "signal": null}})
    );
    assert_eq!(
        host.report("output"),
        json!({"result": {"output": "one\ntwo\n", "truncated": false,
            "exitStatus": {"exitCode": 3, "signal": null}}})
    );
    assert_eq!(host.report("release"), json!({"result": {}}));
    assert_eq!(host.report("after release")["error"]["code"], -32602);
    // The row that embeds the terminal shows its output and exit code, and is not left live.
    let rows = rows(&host, "x1");
    assert!(
        rows.contains(&("one\ntwo\n[exit 3]".to_string(), false)),
        "{rows:?}"
    );
    assert_eq!(rows.last().map(|r| r.1), Some(false));
    session.shutdown().await;
}

#[tokio::test]
async fn a_terminal_nobody_allowed_is_asked_about_and_when_refused_never_runs() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Kind("reject_once")));
    let session = fx.connect(&host, "normal").await;
    assert_eq!(
        prompt(&session, "terminal-unasked touch ran.txt").await,
        Outcome::Done
    );
    let asks = host.asks.lock().unwrap().clone();
    assert_eq!(asks.len(), 1, "{asks:?}");
    assert_eq!(asks[0].title, "Run touch ran.txt");
    assert_eq!(asks[0].command.as_deref(), Some("touch ran.txt"));
    assert_eq!(
        asks[0].cwd.as_deref(),
        Some(fx.root().display().to_string().as_str())
    );
    let created = host.report("create");
    assert_eq!(
        created["error"]["message"],
        "the user refused to run `touch ran.txt`"
    );
    assert!(!fx.root().join("ran.txt").exists());
    session.shutdown().await;

    // The person allowed `ls` when the agent asked; its terminal runs something else: that is
    // asked about on its own (and refused here), never covered by the allow.
    let host = Arc::new(Host::new(
        true,
        Answer::Kinds(&["allow_once", "reject_once"]),
    ));
    let session = fx.connect(&host, "normal").await;
    prompt(&session, "terminal-swap ls ;; touch ran.txt").await;
    let asks = host.asks.lock().unwrap().clone();
    assert_eq!(asks.len(), 2, "{asks:?}");
    assert_eq!(asks[1].command.as_deref(), Some("touch ran.txt"));
    assert!(!fx.root().join("ran.txt").exists());
    session.shutdown().await;

    // Nobody to ask: refused without a question.
    let host = Arc::new(Host::new(false, Answer::Kind("allow_once")));
    let session = fx.connect(&host, "normal").await;
    prompt(&session, "terminal-unasked touch ran.txt").await;
    assert!(host.asks.lock().unwrap().is_empty());
    let message = host.report("create")["error"]["message"].clone();
    assert!(
        message.as_str().unwrap().contains("nobody can be asked"),
        "{message}"
    );
    assert!(!fx.root().join("ran.txt").exists());
    session.shutdown().await;
}

#[tokio::test]
async fn a_person_allowed_terminal_runs_and_deny_rules_refuse_even_with_auto_approve() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Kind("allow_once")));
    let session = fx.connect(&host, "normal").await;
    prompt(&session, "terminal-unasked touch ran.txt").await;
    assert_eq!(host.asks.lock().unwrap().len(), 1);
    assert!(fx.root().join("ran.txt").exists());
    session.shutdown().await;

    let host = Arc::new(Host::new(true, Answer::Kind("allow_once")));
    let mut spec = fx.spec("normal");
    spec.auto_approve = true;
    spec.terminal.rules =
        agent_nvim::permissions::Rules::parse(&[], &[], &["run_bash(rm *)".into()]).unwrap();
    let session = acp::connect(spec, host.clone()).await.unwrap();
    prompt(&session, "terminal-unasked rm ran.txt").await;
    assert_eq!(
        host.report("create")["error"]["message"],
        "Refused by the rule 'run_bash(rm *)' in permissions.deny."
    );
    assert!(fx.root().join("ran.txt").exists());
    assert!(host.asks.lock().unwrap().is_empty());
    session.shutdown().await;
}

#[tokio::test]
async fn a_terminal_outside_the_workspace_is_refused_without_asking() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Kind("allow_once")));
    let session = fx.connect(&host, "normal").await;
    let outside = fx.root().parent().unwrap().display().to_string();
    prompt(&session, &format!("terminal-cwd {outside}")).await;
    let created = host.report("create");
    assert_eq!(created["error"]["code"], -32602, "{created}");
    assert!(
        created["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is refused"),
        "{created}"
    );
    assert!(host.asks.lock().unwrap().is_empty());
    session.shutdown().await;
}

#[tokio::test]
async fn output_byte_limit_keeps_the_newest_output_from_a_character_boundary() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let mut spec = fx.spec("normal");
    spec.auto_approve = true;
    let session = acp::connect(spec, host.clone()).await.unwrap();
    prompt(&session, "terminal-limit").await;
    // "ééé" is 6 bytes; the newest 5 start inside the first "é", which is dropped whole.
    assert_eq!(
        host.report("output"),
        json!({"result": {"output": "éé", "truncated": true,
            "exitStatus": {"exitCode": 0, "signal": null}}})
    );
    session.shutdown().await;
}

#[tokio::test]
async fn terminal_kill_ends_the_commands_whole_tree() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let mut spec = fx.spec("normal");
    spec.auto_approve = true;
    let session = acp::connect(spec, host.clone()).await.unwrap();
    let marker = unique_marker("acp-terminal-kill");
    prompt(&session, &format!("terminal-kill {marker}")).await;
    assert_eq!(host.report("running"), json!(true));
    assert_eq!(host.report("kill"), json!({"result": {}}));
    assert_eq!(
        host.report("exit"),
        json!({"result": {"exitCode": null, "signal": "SIGKILL"}})
    );
    assert_eq!(host.report("release"), json!({"result": {}}));
    assert!(marked_survivors(&marker, Duration::from_secs(3))
        .await
        .is_empty());
    session.shutdown().await;
}

#[tokio::test]
async fn stopping_the_turn_kills_the_running_terminals() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let mut spec = fx.spec("normal");
    spec.auto_approve = true;
    let session = acp::connect(spec, host.clone()).await.unwrap();
    let marker = unique_marker("acp-terminal-stop");
    let line = format!("echo begun; exec -a {marker} sleep 1000");
    let cancel = CancellationToken::new();
    let canceller = async {
        // Once the row shows the command running and printing.
        while !rows(&host, "u1")
            .iter()
            .any(|(output, running)| *running && output.contains("begun"))
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!with_marker(&marker).is_empty());
        cancel.cancel();
    };
    let (outcome, ()) = tokio::time::timeout(
        Duration::from_secs(20),
        futures::future::join(
            session.prompt(format!("terminal-unasked {line}").into(), &cancel),
            canceller,
        ),
    )
    .await
    .unwrap();
    assert_eq!(outcome, Outcome::Cancelled);
    assert!(marked_survivors(&marker, Duration::from_secs(3))
        .await
        .is_empty());
    session.shutdown().await;
}

#[tokio::test]
async fn the_agents_variables_are_shown_in_the_line_and_never_set_unseen() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Kind("allow_once")));
    let session = fx.connect(&host, "normal").await;
    prompt(&session, "terminal-env").await;
    let asks = host.asks.lock().unwrap().clone();
    assert_eq!(
        asks[0].command.as_deref(),
        Some("export GREETING='hi there' BASH_ENV=/nonexistent/rc; echo $GREETING")
    );
    assert_eq!(host.report("output")["result"]["output"], "hi there\n");
    let bad = host.report("bad env");
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    // The bad one was refused before anyone was asked.
    assert_eq!(asks.len(), 1);
    session.shutdown().await;
}

#[tokio::test]
async fn an_agent_holds_at_most_thirty_two_terminals_until_it_releases_one() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let mut spec = fx.spec("normal");
    spec.auto_approve = true;
    let session = acp::connect(spec, host.clone()).await.unwrap();
    prompt(&session, "terminal-many").await;
    let refused = host.report("33rd");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("32 terminals are held already"),
        "{refused}"
    );
    assert!(host.report("after release")["result"]["terminalId"].is_string());
    session.shutdown().await;
}

/// A session of the test agent with a host answering with `kinds` in turn.
async fn with_answers(
    fx: &Fixture,
    kinds: &'static [&'static str],
) -> (Arc<Host>, acp::AcpSession) {
    let host = Arc::new(Host::new(true, Answer::Kinds(kinds)));
    let session = fx.connect(&host, "normal").await;
    (host, session)
}

#[tokio::test]
async fn an_allow_covers_a_terminal_only_when_the_picker_showed_that_command() {
    let fx = Fixture::new();
    // The question previewed a diff: the command it also carried was not what the person saw.
    let (host, session) = with_answers(&fx, &["allow_once", "reject_once"]).await;
    prompt(&session, "terminal-diff touch ran.txt").await;
    let asks = host.asks.lock().unwrap().clone();
    assert!(asks[0].diff.is_some());
    assert_eq!(asks.len(), 2, "the terminal was asked about: {asks:?}");
    assert!(!fx.root().join("ran.txt").exists());
    session.shutdown().await;

    // The option picked is not an exact allow kind (the picker's refuse key takes it).
    let (host, session) = with_answers(&fx, &["allow", "reject_once"]).await;
    prompt(&session, "terminal-oddkind touch ran.txt").await;
    assert_eq!(
        host.report("permission")["result"]["outcome"]["optionId"],
        "no"
    );
    assert_eq!(host.asks.lock().unwrap().len(), 2);
    assert!(!fx.root().join("ran.txt").exists());
    session.shutdown().await;

    // An allow once the agent did not use in its turn is gone at the next.
    let (host, session) = with_answers(&fx, &["allow_once", "reject_once"]).await;
    prompt(&session, "ask-only touch ran.txt").await;
    prompt(&session, "terminal-unasked touch ran.txt").await;
    assert_eq!(host.asks.lock().unwrap().len(), 2);
    assert!(!fx.root().join("ran.txt").exists());
    session.shutdown().await;
}

#[tokio::test]
async fn agent_stop_between_turns_kills_a_terminal_left_running() {
    use agent_nvim::conversation::Conversation;
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let mut spec = fx.spec("normal");
    spec.auto_approve = true;
    let session = acp::connect(spec, host.clone()).await.unwrap();
    let marker = unique_marker("acp-terminal-between");
    prompt(
        &session,
        &format!("terminal-bg exec -a {marker} sleep 1000"),
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while with_marker(&marker).is_empty() {
        assert!(std::time::Instant::now() < deadline, "it never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Conversation::stop(&session);
    assert!(marked_survivors(&marker, Duration::from_secs(3))
        .await
        .is_empty());
    session.shutdown().await;
}
