//! What an external agent lets a person choose (modes, config options) and what it reports of
//! its session (usage, title), against `acp-test-agent`.

use std::sync::Arc;

use agent_nvim::acp::{self, AcpEvent, AgentCost, AgentUpdate};
use agent_nvim::agent::Outcome;
use agent_nvim::conversation::Choice;
use serde_json::{json, Value};

use super::acp::{prompt, Fixture};
use crate::support::fake_host::{Answer, FakeHost as Host};

/// What the agent received with `method`, in order.
fn received(fx: &Fixture, method: &str) -> Vec<Value> {
    fx.log()
        .iter()
        .filter_map(|e| e["received"].as_str())
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|m| m["method"] == method)
        .map(|m| m["params"].clone())
        .collect()
}

/// The last modes event: (current, ids).
fn modes(host: &Host) -> (String, Vec<String>) {
    host.events()
        .into_iter()
        .rev()
        .find_map(|e| match e {
            AcpEvent::Agent(AgentUpdate::Modes { current, modes }) => {
                Some((current, modes.into_iter().map(|m| m.id).collect()))
            }
            _ => None,
        })
        .expect("no modes event")
}

/// The current values of the last options event, by id.
fn options(host: &Host) -> Vec<(String, Value)> {
    host.events()
        .into_iter()
        .rev()
        .find_map(|e| match e {
            AcpEvent::Agent(AgentUpdate::Options { options }) => {
                Some(options.into_iter().map(|o| (o.id, o.current)).collect())
            }
            _ => None,
        })
        .expect("no options event")
}

#[tokio::test]
async fn modes_and_options_are_shown_and_switched_with_the_ids_chosen() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = fx.connect(&host, "choices").await;
    assert_eq!(
        modes(&host),
        ("ask".into(), vec!["ask".into(), "code".into()])
    );
    assert_eq!(
        options(&host),
        [
            ("model".into(), json!("fast")),
            ("web".into(), json!(false))
        ]
    );

    session.choose(Choice::Mode("code".into())).await.unwrap();
    assert_eq!(
        received(&fx, "session/set_mode"),
        [json!({"sessionId": "s-1", "modeId": "code"})]
    );
    assert_eq!(modes(&host).0, "code");

    session
        .choose(Choice::Option {
            id: "model".into(),
            value: json!("smart"),
        })
        .await
        .unwrap();
    session
        .choose(Choice::Option {
            id: "web".into(),
            value: json!(true),
        })
        .await
        .unwrap();
    assert_eq!(
        received(&fx, "session/set_config_option"),
        [
            json!({"sessionId": "s-1", "configId": "model", "value": "smart"}),
            json!({"sessionId": "s-1", "configId": "web", "value": true, "type": "boolean"}),
        ]
    );
    assert_eq!(
        options(&host),
        [
            ("model".into(), json!("smart")),
            ("web".into(), json!(true))
        ]
    );

    // What is not offered is refused here, saying what is, and never sent.
    let err = session
        .choose(Choice::Mode("yolo".into()))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(err, "test has no mode 'yolo'; its modes: ask, code");
    let err = session
        .choose(Choice::Option {
            id: "model".into(),
            value: json!("huge"),
        })
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "Model (model) has no value \"huge\"; its values: fast, smart"
    );
    let err = session
        .choose(Choice::Option {
            id: "web".into(),
            value: json!("yes"),
        })
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(err, "Web search (web) is on or off");
    assert_eq!(received(&fx, "session/set_mode").len(), 1);
    assert_eq!(received(&fx, "session/set_config_option").len(), 2);
    session.shutdown().await;

    // An agent that offers neither says so.
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = fx.connect(&host, "normal").await;
    assert_eq!(
        session
            .choose(Choice::Mode("code".into()))
            .await
            .unwrap_err()
            .to_string(),
        "test offers no modes"
    );
    session.shutdown().await;
}

#[tokio::test]
async fn usage_and_a_title_reported_by_the_agent_are_events() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = fx.connect(&host, "normal").await;
    assert_eq!(prompt(&session, "info").await, Outcome::Done);
    let events = host.events();
    assert!(
        events.contains(&AcpEvent::Agent(AgentUpdate::ContextUsage {
            used: 45200,
            size: 200000,
            cost: Some(AgentCost {
                amount: 0.42,
                currency: "USD".into()
            }),
        })),
        "{events:?}"
    );
    assert!(events.contains(&AcpEvent::Agent(AgentUpdate::Title {
        title: Some("Fix the failing test".into())
    })));
    session.shutdown().await;
}

/// The Login events the host was shown: (needed, message, method ids).
fn logins(host: &Host) -> Vec<(bool, String, Vec<String>)> {
    host.events()
        .into_iter()
        .filter_map(|e| match e {
            AcpEvent::Agent(AgentUpdate::Login {
                needed,
                message,
                methods,
            }) => Some((needed, message, methods.into_iter().map(|m| m.id).collect())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_agent_that_wants_a_login_is_logged_in_through_its_method_and_the_session_retried() {
    let fx = Fixture::new();
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = fx.connect(&host, "login").await;
    let said = "test needs you to log in first (Authentication required); :Agent login picks one of its ways";
    assert_eq!(
        logins(&host),
        [(true, said.to_string(), vec!["key".into(), "tty".into()])]
    );
    let methods = host.events().into_iter().find_map(|e| match e {
        AcpEvent::Agent(AgentUpdate::Login { methods, .. }) => Some(methods),
        _ => None,
    });
    let tty = methods.unwrap()[1].clone();
    assert!(tty.terminal);
    assert_eq!(tty.args, ["login-terminal"]);
    assert_eq!(tty.env, [("ACP_TEST_LOGIN".to_string(), "1".to_string())]);
    // A prompt before the login is not sent, and says what to do.
    assert_eq!(prompt(&session, "usage").await, Outcome::Failed);
    assert!(received(&fx, "session/prompt").is_empty());

    session.choose(Choice::Login("key".into())).await.unwrap();
    assert_eq!(received(&fx, "authenticate"), [json!({"methodId": "key"})]);
    assert_eq!(received(&fx, "session/new").len(), 2);
    assert_eq!(
        logins(&host).last().unwrap(),
        &(false, "logged in to test".to_string(), vec![])
    );
    assert_eq!(prompt(&session, "usage").await, Outcome::Done);

    // A terminal method is the front end's to run.
    let err = session
        .choose(Choice::Login("tty".into()))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("terminal login"), "{err}");
    // Logged out, the next prompt's auth_required asks for a login again.
    session.choose(Choice::Logout).await.unwrap();
    assert_eq!(received(&fx, "logout").len(), 1);
    assert_eq!(prompt(&session, "usage").await, Outcome::Failed);
    assert!(logins(&host).last().unwrap().0);
    session.shutdown().await;
    // The session is closed as it ends, since the agent offers session/close.
    assert_eq!(
        received(&fx, "session/close"),
        [json!({"sessionId": "s-1"})]
    );
}

#[tokio::test]
async fn another_root_is_read_only_unless_writable_and_sent_as_additional_directories() {
    let fx = Fixture::new();
    let extra_dir = tempfile::tempdir().unwrap();
    std::fs::write(extra_dir.path().join("x.txt"), "in the other root\n").unwrap();
    let extra = agent_nvim::workspace::Workspace::new(extra_dir.path()).unwrap();
    let root = extra.root().to_path_buf();
    for writable in [false, true] {
        let host = Arc::new(Host::new(true, Answer::Never));
        let mut spec = fx.spec("normal");
        spec.directories = vec![acp::ExtraRoot {
            workspace: extra.clone(),
            writable,
        }];
        let session = acp::connect(spec, host.clone()).await.unwrap();
        prompt(&session, &format!("fs-extra {}", root.display())).await;
        assert_eq!(
            host.report("extra read"),
            json!({"result": {"content": "in the other root\n"}})
        );
        let written = host.report("extra write");
        if writable {
            assert_eq!(written, json!({"result": {}}));
            assert_eq!(std::fs::read_to_string(root.join("y.txt")).unwrap(), "y\n");
        } else {
            assert_eq!(written["error"]["code"], -32602, "{written}");
            assert!(
                written["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("a read-only directory of this session"),
                "{written}"
            );
            assert!(!root.join("y.txt").exists());
        }
        // The other root's own check: `..` does not lead out of it.
        assert_eq!(host.report("extra escape")["error"]["code"], -32602);
        session.shutdown().await;
    }
    let news = received(&fx, "session/new");
    assert_eq!(
        news[0]["additionalDirectories"],
        json!([root.display().to_string()])
    );
}
