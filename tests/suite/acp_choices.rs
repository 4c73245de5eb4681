//! What an external agent lets a person choose (modes, config options) and what it reports of
//! its session (usage, title), against `acp-test-agent`.

use std::sync::Arc;

use agent_nvim::acp::{AcpEvent, AgentCost, AgentUpdate};
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
        .unwrap_err();
    assert_eq!(err, "test has no mode 'yolo'; its modes: ask, code");
    let err = session
        .choose(Choice::Option {
            id: "model".into(),
            value: json!("huge"),
        })
        .await
        .unwrap_err();
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
        .unwrap_err();
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
            .unwrap_err(),
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
