//! The ACP conformance suite: the client driven through every method and notification it
//! implements against `acp-test-agent`, with the JSON-RPC traffic recorded, and for each
//! capability whether it was offered (by the side that must say so), used (it went over the
//! wire) and handled (answered with a result, or shown). The table it makes is written to
//! `target/acp-conformance/test-agent.md` and must be the README's; the real agents the README
//! names are run too where they are installed (only initialize and session/new: they need an
//! account for more), and their tables written beside it.

// The tables are printed too, for whoever runs the suite by hand.
#![allow(clippy::print_stderr)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_nvim::acp::elicit::Elicited;
use agent_nvim::acp::{self, AcpEvent, AcpSpec, AgentUpdate, Flow, Tap};
use agent_nvim::agent::Event;
use agent_nvim::conversation::{AgentSessions, Choice, Conversation, Events};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::acp::{prompt, Fixture};
use crate::support::fake_host::{Answer, FakeHost as Host};
use crate::support::process::unique_marker;

/// Every line each way, in order.
#[derive(Default)]
struct Recording {
    lines: Mutex<Vec<(Flow, Value)>>,
}

impl Recording {
    fn tap(self: &Arc<Self>) -> Tap {
        let me = self.clone();
        Tap(Arc::new(move |flow, line| {
            if let Ok(value) = serde_json::from_str(line) {
                me.lines.lock().unwrap().push((flow, value));
            }
        }))
    }

    fn lines(&self) -> Vec<(Flow, Value)> {
        self.lines.lock().unwrap().clone()
    }

    /// Requests (with an id) and notifications of `method` that went `flow`.
    fn calls(&self, flow: Flow, method: &str) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|(f, m)| *f == flow && m["method"] == method)
            .map(|(_, m)| m)
            .collect()
    }

    /// Whether some `method` request that went `flow` was answered with a result.
    fn answered(&self, flow: Flow, method: &str) -> bool {
        let back = match flow {
            Flow::Sent => Flow::Received,
            Flow::Received => Flow::Sent,
        };
        let lines = self.lines();
        self.calls(flow, method).iter().any(|call| {
            lines.iter().any(|(f, m)| {
                *f == back
                    && m.get("method").is_none()
                    && m["id"] == call["id"]
                    && m.get("result").is_some()
            })
        })
    }

    /// Whether some request that went `flow` was answered with error `code`.
    fn answered_error(&self, flow: Flow, method: &str, code: i64) -> bool {
        let back = match flow {
            Flow::Sent => Flow::Received,
            Flow::Received => Flow::Sent,
        };
        let lines = self.lines();
        self.calls(flow, method).iter().any(|call| {
            lines
                .iter()
                .any(|(f, m)| *f == back && m["id"] == call["id"] && m["error"]["code"] == code)
        })
    }

    /// The session/update kinds the agent sent.
    fn updates(&self) -> Vec<String> {
        self.calls(Flow::Received, "session/update")
            .iter()
            .filter_map(|m| {
                m["params"]["update"]["sessionUpdate"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect()
    }

    /// What we said at the first initialize, and every answer the agent gave one (a
    /// recording spans several connections: an answer follows its request).
    fn initialize(&self) -> (Value, Vec<Value>) {
        let lines = self.lines();
        let ours = self
            .calls(Flow::Sent, "initialize")
            .first()
            .map(|m| m["params"].clone())
            .unwrap_or(Value::Null);
        let mut answers = Vec::new();
        let mut waiting = None;
        for (flow, m) in &lines {
            if *flow == Flow::Sent && m["method"] == "initialize" {
                waiting = Some(m["id"].clone());
            } else if *flow == Flow::Received
                && m.get("method").is_none()
                && Some(&m["id"]) == waiting.as_ref()
            {
                answers.push(m["result"].clone());
                waiting = None;
            }
        }
        (ours, answers)
    }
}

/// One row of the table.
struct Row {
    name: String,
    way: &'static str,
    offered: Option<bool>,
    used: bool,
    handled: bool,
}

fn mark(value: Option<bool>) -> &'static str {
    match value {
        Some(true) => "yes",
        Some(false) => "no",
        None => "—",
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| Capability | Direction | Offered | Used | Handled |\n|---|---|---|---|---|\n",
    );
    for row in rows {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            row.name,
            row.way,
            mark(row.offered),
            mark(Some(row.used)),
            mark(Some(row.handled))
        ));
    }
    out
}

/// Whether any host was shown an event for update kind `kind`.
fn shown(events: &[AcpEvent], kind: &str) -> bool {
    events.iter().any(|event| {
        matches!(
            (kind, event),
            ("agent_message_chunk", AcpEvent::Turn(Event::Text { .. }))
                | (
                    "agent_thought_chunk",
                    AcpEvent::Agent(AgentUpdate::Thought { .. })
                )
                | (
                    "user_message_chunk",
                    AcpEvent::Agent(AgentUpdate::UserMessage { .. })
                )
                | ("tool_call", AcpEvent::Turn(Event::ToolStarted { .. }))
                | (
                    "tool_call_update",
                    AcpEvent::Agent(AgentUpdate::ToolUpdated { .. })
                )
                | ("plan", AcpEvent::Agent(AgentUpdate::Plan { .. }))
                | (
                    "plan_update",
                    AcpEvent::Agent(AgentUpdate::PlanUpdated { .. })
                )
                | (
                    "plan_removed",
                    AcpEvent::Agent(AgentUpdate::PlanRemoved { .. })
                )
                | (
                    "compaction_update" | "compaction_summary_chunk",
                    AcpEvent::Agent(AgentUpdate::Compaction { .. })
                )
                | (
                    "available_commands_update",
                    AcpEvent::Agent(AgentUpdate::Commands { .. })
                )
                | (
                    "current_mode_update",
                    AcpEvent::Agent(AgentUpdate::Modes { .. })
                )
                | (
                    "config_option_update",
                    AcpEvent::Agent(AgentUpdate::Options { .. })
                )
                | (
                    "session_info_update",
                    AcpEvent::Agent(AgentUpdate::Title { .. })
                )
                | (
                    "usage_update",
                    AcpEvent::Agent(AgentUpdate::ContextUsage { .. })
                )
                | ("notice", AcpEvent::Agent(AgentUpdate::Notice { .. }))
        )
    })
}

/// Every `{label}: {json}` line the test agent reported, read from the agent message text its
/// hosts were shown.
fn reported(events: &[AcpEvent], label: &str) -> Vec<Value> {
    let text: String = events
        .iter()
        .filter_map(|event| match event {
            AcpEvent::Turn(Event::Text { text }) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    // A turn's text need not end its line: a report may follow the last turn's on one line.
    let prefix = format!("{label}: ");
    text.lines()
        .filter_map(|line| line.find(&prefix).map(|at| &line[at + prefix.len()..]))
        .filter_map(|json| serde_json::from_str(json).ok())
        .collect()
}

/// Our answers to the agent's `elicitation/create` questions in `mode`.
fn elicitation_answers(recording: &Recording, mode: &str) -> Vec<Value> {
    let lines = recording.lines();
    recording
        .calls(Flow::Received, "elicitation/create")
        .iter()
        .filter(|ask| ask["params"]["mode"] == mode)
        .filter_map(|ask| {
            lines.iter().find_map(|(f, m)| {
                (*f == Flow::Sent && m.get("method").is_none() && m["id"] == ask["id"])
                    .then(|| m["result"].clone())
            })
        })
        .collect()
}

/// The rows for one agent's recording and the events its hosts were shown.
fn rows(recording: &Recording, events: &[AcpEvent]) -> Vec<Row> {
    let (ours, theirs) = recording.initialize();
    let client = &ours["clientCapabilities"];
    // Offered when any connection's initialize answer said so.
    let said = |pick: &dyn Fn(&Value) -> bool| theirs.iter().any(pick);
    let mut rows = Vec::new();
    let agent_to_client = "agent → client";
    let client_to_agent = "client → agent";
    for (method, offered) in [
        ("fs/read_text_file", client["fs"]["readTextFile"] == true),
        ("fs/write_text_file", client["fs"]["writeTextFile"] == true),
        ("session/request_permission", true),
        ("terminal/create", client["terminal"] == true),
        ("terminal/output", client["terminal"] == true),
        ("terminal/wait_for_exit", client["terminal"] == true),
        ("terminal/kill", client["terminal"] == true),
        ("terminal/release", client["terminal"] == true),
        (
            "elicitation/create",
            client["elicitation"]["form"].is_object() && client["elicitation"]["url"].is_object(),
        ),
    ] {
        rows.push(Row {
            name: method.into(),
            way: agent_to_client,
            offered: Some(offered),
            used: !recording.calls(Flow::Received, method).is_empty(),
            handled: recording.answered(Flow::Received, method),
        });
    }
    let has = |v: &Value| !v.is_null();
    let session_cap =
        |key: &str| said(&|t: &Value| has(&t["agentCapabilities"]["sessionCapabilities"][key]));
    let auth_methods =
        said(&|t: &Value| t["authMethods"].as_array().is_some_and(|m| !m.is_empty()));
    let new_answers = recording.lines();
    let offers_in_session = |key: &str| {
        new_answers.iter().any(|(f, m)| {
            *f == Flow::Received && m.get("method").is_none() && has(&m["result"][key])
        })
    };
    for (method, offered) in [
        ("initialize", Some(true)),
        ("authenticate", Some(auth_methods)),
        ("session/new", Some(true)),
        (
            "session/load",
            Some(said(&|t: &Value| {
                t["agentCapabilities"]["loadSession"] == true
            })),
        ),
        ("session/list", Some(session_cap("list"))),
        ("session/prompt", Some(true)),
        ("session/set_mode", Some(offers_in_session("modes"))),
        (
            "session/set_config_option",
            Some(offers_in_session("configOptions")),
        ),
        ("session/close", Some(session_cap("close"))),
        ("session/fork", Some(session_cap("fork"))),
        ("session/delete", Some(session_cap("delete"))),
        ("session/resume", Some(session_cap("resume"))),
        (
            "logout",
            Some(said(&|t: &Value| {
                has(&t["agentCapabilities"]["auth"]["logout"])
            })),
        ),
    ] {
        rows.push(Row {
            name: method.into(),
            way: client_to_agent,
            offered,
            used: !recording.calls(Flow::Sent, method).is_empty(),
            handled: recording.answered(Flow::Sent, method),
        });
    }
    let cancels = recording.calls(Flow::Sent, "session/cancel");
    rows.push(Row {
        name: "session/cancel".into(),
        way: "client → agent (notification)",
        offered: Some(true),
        used: !cancels.is_empty(),
        handled: !cancels.is_empty(),
    });
    // A request of ours the person stopped: cancelled on the wire, and answered -32800.
    let cancelled_requests = recording.calls(Flow::Sent, "$/cancel_request");
    let lines = recording.lines();
    rows.push(Row {
        name: "$/cancel_request".into(),
        way: "client → agent (notification)",
        offered: Some(true),
        used: !cancelled_requests.is_empty(),
        handled: cancelled_requests.iter().any(|cancel| {
            lines.iter().any(|(f, m)| {
                *f == Flow::Received
                    && m["id"] == cancel["params"]["requestId"]
                    && m["error"]["code"] == -32800
            })
        }),
    });
    let resources = recording
        .calls(Flow::Sent, "session/prompt")
        .iter()
        .any(|m| {
            m["params"]["prompt"]
                .as_array()
                .is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "resource"))
        });
    rows.push(Row {
        name: "session/prompt: resource content (attached files)".into(),
        way: client_to_agent,
        offered: Some(said(&|t: &Value| {
            t["agentCapabilities"]["promptCapabilities"]["embeddedContext"] == true
        })),
        used: resources,
        handled: resources && recording.answered(Flow::Sent, "session/prompt"),
    });
    for (kind, capability) in [("image", "image"), ("audio", "audio")] {
        let sent = recording
            .calls(Flow::Sent, "session/prompt")
            .iter()
            .any(|m| {
                m["params"]["prompt"]
                    .as_array()
                    .is_some_and(|blocks| blocks.iter().any(|b| b["type"] == kind))
            });
        rows.push(Row {
            name: format!("session/prompt: {kind} content"),
            way: client_to_agent,
            offered: Some(said(&|t: &Value| {
                t["agentCapabilities"]["promptCapabilities"][capability] == true
            })),
            used: sent,
            handled: sent && recording.answered(Flow::Sent, "session/prompt"),
        });
    }
    let directories = recording
        .calls(Flow::Sent, "session/new")
        .iter()
        .any(|m| m["params"]["additionalDirectories"].is_array());
    rows.push(Row {
        name: "additionalDirectories".into(),
        way: client_to_agent,
        offered: Some(session_cap("additionalDirectories")),
        used: directories,
        handled: directories && recording.answered(Flow::Sent, "session/new"),
    });
    // MCP servers, sent in session/new, session/load and session/resume: stdio to every agent,
    // http and sse only to one whose mcpCapabilities (in its own initialize answer: the
    // connections are recorded one after another) take them.
    let mut sent_servers = Vec::new();
    let mut takes = Value::Null;
    for (f, m) in recording.lines() {
        if f == Flow::Received && m["result"]["agentCapabilities"].is_object() {
            takes = m["result"]["agentCapabilities"]["mcpCapabilities"].clone();
        }
        let session_method = matches!(
            m["method"].as_str(),
            Some("session/new" | "session/load" | "session/resume")
        );
        if f == Flow::Sent && session_method {
            for server in m["params"]["mcpServers"].as_array().into_iter().flatten() {
                sent_servers.push((server.clone(), takes.clone()));
            }
        }
    }
    let stdio = sent_servers
        .iter()
        .any(|(server, _)| server.get("type").is_none() && server["command"].is_string());
    rows.push(Row {
        name: "mcpServers: stdio".into(),
        way: client_to_agent,
        offered: Some(true),
        used: stdio,
        handled: stdio && recording.answered(Flow::Sent, "session/new"),
    });
    let remote: Vec<&(Value, Value)> = sent_servers
        .iter()
        .filter(|(server, _)| server.get("type").is_some())
        .collect();
    rows.push(Row {
        name: "mcpServers: http and sse (only where mcpCapabilities take them)".into(),
        way: client_to_agent,
        offered: Some(
            said(&|t: &Value| t["agentCapabilities"]["mcpCapabilities"]["http"] == true)
                || said(&|t: &Value| t["agentCapabilities"]["mcpCapabilities"]["sse"] == true),
        ),
        used: !remote.is_empty(),
        handled: !remote.is_empty()
            && remote.iter().all(|(server, takes)| {
                server["type"]
                    .as_str()
                    .is_some_and(|kind| takes[kind] == true)
            }),
    });
    // The editor's tools: our own stdio server, started by the agent and listing every tool.
    let editor = sent_servers
        .iter()
        .any(|(server, _)| server["name"] == agent_nvim::front::mcp::SERVER_NAME);
    let ours: Value = agent_nvim::front::mcp::tools()
        .iter()
        .map(|(name, _, _)| Value::from(*name))
        .collect();
    rows.push(Row {
        name: "mcpServers: the editor's tools (agent-nvim mcp)".into(),
        way: client_to_agent,
        offered: None,
        used: editor,
        handled: reported(events, "mcp-tools").contains(&ours),
    });
    let updates = recording.updates();
    for kind in [
        "agent_message_chunk",
        "agent_thought_chunk",
        "user_message_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "plan_update",
        "plan_removed",
        "compaction_update",
        "compaction_summary_chunk",
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
        "usage_update",
        "notice",
    ] {
        // The updates a client must advertise before an agent sends them.
        let offered = match kind {
            "notice" => Some(client["session"]["notices"].is_object()),
            "compaction_update" | "compaction_summary_chunk" => {
                Some(client["session"]["compaction"].is_object())
            }
            "plan_update" | "plan_removed" => Some(client["plan"].is_object()),
            _ => None,
        };
        rows.push(Row {
            name: format!("session/update: {kind}"),
            way: "agent → client (notification)",
            offered,
            used: updates.iter().any(|u| u == kind),
            handled: shown(events, kind),
        });
    }
    let lines = recording.lines();
    let answered_call = |call: &Value| {
        lines.iter().any(|(f, m)| {
            *f == Flow::Received
                && m.get("method").is_none()
                && m["id"] == call["id"]
                && m.get("result").is_some()
        })
    };
    // A boolean config option switched: advertised, sent with its type, answered.
    let booleans: Vec<Value> = recording
        .calls(Flow::Sent, "session/set_config_option")
        .into_iter()
        .filter(|m| m["params"]["value"].is_boolean() && m["params"]["type"] == "boolean")
        .collect();
    rows.push(Row {
        name: "session/set_config_option: boolean".into(),
        way: client_to_agent,
        offered: Some(client["session"]["configOptions"]["boolean"].is_object()),
        used: !booleans.is_empty(),
        handled: booleans.iter().any(answered_call),
    });
    // A tool call's `name`, shown after a title that does not hold it.
    let update_of = |m: &Value| m["params"]["update"].clone();
    let named = recording
        .calls(Flow::Received, "session/update")
        .iter()
        .map(update_of)
        .filter(|u| u["sessionUpdate"] == "tool_call" && u["name"].is_string())
        .filter_map(|u| u["name"].as_str().map(str::to_string))
        .collect::<Vec<_>>();
    rows.push(Row {
        name: "session/update: tool_call name (shown)".into(),
        way: "agent → client (notification)",
        offered: None,
        used: !named.is_empty(),
        handled: events.iter().any(|event| {
            matches!(event, AcpEvent::Turn(Event::ToolStarted { name, .. })
                if named.iter().any(|n| name.ends_with(&format!(" · {n}"))))
        }),
    });
    // Messages told apart by their ids.
    let ids: Vec<String> = recording
        .calls(Flow::Received, "session/update")
        .iter()
        .map(update_of)
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["messageId"].as_str().map(str::to_string))
        .collect();
    rows.push(Row {
        name: "session/update: messageId (messages kept apart)".into(),
        way: "agent → client (notification)",
        offered: None,
        used: !ids.is_empty(),
        handled: ids.iter().all(|id| {
            events.iter().any(|event| {
                matches!(event, AcpEvent::Agent(AgentUpdate::Message { id: shown }) if shown == id)
            })
        }),
    });
    // The token counts a prompt's answer gives, counted at the end of the turn.
    let counted: Vec<(u64, u64)> = recording
        .calls(Flow::Sent, "session/prompt")
        .iter()
        .filter_map(|call| {
            lines.iter().find_map(|(f, m)| {
                let usage = &m["result"]["usage"];
                (*f == Flow::Received && m["id"] == call["id"] && usage.is_object()).then(|| {
                    (
                        usage["inputTokens"].as_u64().unwrap_or(0),
                        usage["outputTokens"].as_u64().unwrap_or(0),
                    )
                })
            })
        })
        .collect();
    rows.push(Row {
        name: "session/prompt: usage (counted at the end of the turn)".into(),
        way: client_to_agent,
        offered: None,
        used: !counted.is_empty(),
        handled: counted.iter().all(|&(input, output)| {
            events.iter().any(|event| {
                matches!(event, AcpEvent::Turn(Event::Usage { input: i, output: o, .. })
                    if (*i, *o) == (input, output))
            })
        }),
    });
    // A URL question the agent completes by itself: closed, and answered `cancel`.
    let completes = recording.calls(Flow::Received, "elicitation/complete");
    rows.push(Row {
        name: "elicitation/complete".into(),
        way: "agent → client (notification)",
        offered: None,
        used: !completes.is_empty(),
        handled: !completes.is_empty() && recording.answered(Flow::Received, "elicitation/create"),
    });
    // Each answer a person can give: sent as the protocol has it, and read back by the agent.
    // (`elicit-complete` reports the result itself, the others the whole answer.)
    let agent_read: Vec<Value> = reported(events, "elicited")
        .into_iter()
        .map(|read| read.get("result").cloned().unwrap_or(read))
        .collect();
    for (mode, action, name) in [
        (
            "form",
            "accept",
            "elicitation/create: form accepted (values sent)",
        ),
        ("form", "decline", "elicitation/create: form declined"),
        ("form", "cancel", "elicitation/create: form cancelled"),
        (
            "url",
            "accept",
            "elicitation/create: URL opened once allowed",
        ),
    ] {
        let sent: Vec<Value> = elicitation_answers(recording, mode)
            .into_iter()
            .filter(|answer| answer["action"] == action)
            .filter(|answer| (mode, action) != ("form", "accept") || answer["content"].is_object())
            .collect();
        rows.push(Row {
            name: name.into(),
            way: agent_to_client,
            offered: Some(client["elicitation"][mode].is_object()),
            used: !sent.is_empty(),
            handled: sent.iter().any(|answer| agent_read.contains(answer)),
        });
    }
    let unknown_notice = recording.lines().iter().any(|(f, m)| {
        *f == Flow::Received
            && m.get("id").is_none()
            && m["method"].as_str().is_some_and(|n| n.starts_with('_'))
    });
    rows.push(Row {
        name: "unknown notification (ignored)".into(),
        way: "agent → client (notification)",
        offered: None,
        used: unknown_notice,
        handled: unknown_notice,
    });
    // Files the agent changed by itself: listed, while what it wrote through the client is not.
    let outside: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            AcpEvent::Agent(AgentUpdate::OutsideChanges { files, .. }) => Some(files),
            _ => None,
        })
        .flatten()
        .map(|file| file.path.as_str())
        .collect();
    rows.push(Row {
        name: "writes made outside fs/write_text_file (listed)".into(),
        way: "agent → disk",
        offered: None,
        used: !outside.is_empty(),
        handled: outside.contains(&"a.py") && !outside.contains(&"through.py"),
    });
    let unknown_request = recording.answered_error(Flow::Received, "_custom/thing", -32601);
    rows.push(Row {
        name: "unknown request (-32601)".into(),
        way: agent_to_client,
        offered: None,
        used: !recording.calls(Flow::Received, "_custom/thing").is_empty(),
        handled: unknown_request,
    });
    rows
}

/// The JSON Schema of what we send for `method`: a request's or notification's params when
/// `answer` is false, our result for the agent's request when true. None for a method this
/// client never sends nor answers.
fn schema_of(method: &str, answer: bool) -> Option<schemars::Schema> {
    use agent_client_protocol_schema::v1 as s;
    use schemars::schema_for;
    Some(match (method, answer) {
        ("initialize", false) => schema_for!(s::InitializeRequest),
        ("authenticate", false) => schema_for!(s::AuthenticateRequest),
        ("logout", false) => schema_for!(s::LogoutRequest),
        ("session/new", false) => schema_for!(s::NewSessionRequest),
        ("session/load", false) => schema_for!(s::LoadSessionRequest),
        ("session/fork", false) => schema_for!(s::ForkSessionRequest),
        ("session/resume", false) => schema_for!(s::ResumeSessionRequest),
        ("session/close", false) => schema_for!(s::CloseSessionRequest),
        ("session/list", false) => schema_for!(s::ListSessionsRequest),
        ("session/delete", false) => schema_for!(s::DeleteSessionRequest),
        ("session/set_mode", false) => schema_for!(s::SetSessionModeRequest),
        ("session/set_config_option", false) => schema_for!(s::SetSessionConfigOptionRequest),
        ("session/prompt", false) => schema_for!(s::PromptRequest),
        ("session/cancel", false) => schema_for!(s::CancelNotification),
        ("$/cancel_request", false) => schema_for!(s::CancelRequestNotification),
        ("fs/read_text_file", true) => schema_for!(s::ReadTextFileResponse),
        ("fs/write_text_file", true) => schema_for!(s::WriteTextFileResponse),
        ("session/request_permission", true) => schema_for!(s::RequestPermissionResponse),
        ("terminal/create", true) => schema_for!(s::CreateTerminalResponse),
        ("terminal/output", true) => schema_for!(s::TerminalOutputResponse),
        ("terminal/wait_for_exit", true) => schema_for!(s::WaitForTerminalExitResponse),
        ("terminal/kill", true) => schema_for!(s::KillTerminalResponse),
        ("terminal/release", true) => schema_for!(s::ReleaseTerminalResponse),
        ("elicitation/create", true) => schema_for!(s::CreateElicitationResponse),
        _ => return None,
    })
}

/// Every message we sent checked against the v1 JSON Schema (the one the protocol publishes is
/// generated from the same types, `agent-client-protocol-schema` 1.17, by schemars): each
/// request's and notification's params, and each result we gave the agent's requests, by the
/// method it answered. What failed, one line each.
fn schema_failures(recording: &Recording) -> Vec<String> {
    let lines = recording.lines();
    let mut asked = std::collections::HashMap::new();
    for (flow, m) in &lines {
        if *flow == Flow::Received {
            if let (Some(method), Some(id)) = (m["method"].as_str(), m.get("id")) {
                asked.insert(id.to_string(), method.to_string());
            }
        }
    }
    let mut failures = Vec::new();
    let mut checked = 0;
    for (_, m) in lines.iter().filter(|(flow, _)| *flow == Flow::Sent) {
        let (method, answer, instance) = match m["method"].as_str() {
            Some(method) => (method.to_string(), false, m["params"].clone()),
            None if m.get("result").is_some() => match asked.get(&m["id"].to_string()) {
                Some(method) => (method.clone(), true, m["result"].clone()),
                None => continue,
            },
            // An error answer: its shape is JSON-RPC's, checked by the crate that sends it.
            None => continue,
        };
        let Some(schema) = schema_of(&method, answer) else {
            failures.push(format!("{method}: no schema known for what we sent"));
            continue;
        };
        checked += 1;
        if let Err(err) = validate(&schema, &instance) {
            failures.push(format!(
                "{method}{}: {err} in {instance}",
                if answer { " (our answer)" } else { "" }
            ));
        }
    }
    assert!(checked > 20, "only {checked} messages checked");
    failures
}

/// `instance` checked against `schema`; why not, when it fails.
fn validate(schema: &schemars::Schema, instance: &Value) -> Result<(), String> {
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    let url = "urn:acp-v1";
    compiler
        .add_resource(url, serde_json::to_value(schema).unwrap())
        .unwrap();
    let index = compiler.compile(url, &mut schemas).unwrap();
    schemas
        .validate(instance, index)
        .map_err(|err| format!("{err:#}"))
}

#[test]
fn the_schema_check_refuses_what_v1_does_not_allow() {
    let cases = [
        ("session/prompt", false, serde_json::json!({"prompt": []})),
        (
            "initialize",
            false,
            serde_json::json!({"protocolVersion": "one"}),
        ),
        (
            "elicitation/create",
            true,
            serde_json::json!({"action": "accept", "content": {"a": {"b": 1}}}),
        ),
        (
            "session/request_permission",
            true,
            serde_json::json!({"outcome": {"outcome": "maybe"}}),
        ),
    ];
    for (method, answer, bad) in cases {
        let schema = schema_of(method, answer).unwrap();
        assert!(validate(&schema, &bad).is_err(), "{method}: {bad} passed");
    }
    let good = serde_json::json!({"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]});
    assert_eq!(
        validate(&schema_of("session/prompt", false).unwrap(), &good),
        Ok(())
    );
}

fn out_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/acp-conformance");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A spec for the test agent in `mode`, recorded.
fn spec(fx: &Fixture, mode: &str, recording: &Arc<Recording>) -> AcpSpec {
    let mut spec = fx.spec(mode);
    spec.tap = Some(recording.tap());
    spec
}

#[tokio::test]
async fn the_client_handles_every_method_and_notification_of_the_test_agent() {
    let fx = Fixture::new();
    let recording = Arc::new(Recording::default());
    let mut events = Vec::new();

    // Chat, files, permission, terminals, usage and title, list and load, and the close.
    let host = Arc::new(Host::new(true, Answer::Kind("allow_once")));
    let mut normal = spec(&fx, "normal", &recording);
    let extra = tempfile::tempdir().unwrap();
    normal.directories = vec![acp::ExtraRoot {
        workspace: agent_nvim::workspace::Workspace::new(extra.path()).unwrap(),
        writable: false,
    }];
    // One stdio MCP server (every agent takes it) and one HTTP one (the test agent's normal
    // mode does not: it is left out).
    normal.mcp_servers = vec![
        acp::mcp::McpServer::Stdio {
            name: "files".into(),
            command: PathBuf::from("/bin/true"),
            args: vec!["--serve".into()],
            env: vec![("TOKEN".into(), "t".into())],
        },
        acp::mcp::McpServer::Remote {
            name: "remote".into(),
            transport: acp::mcp::Transport::Http,
            url: "http://127.0.0.1:9/mcp".into(),
            headers: Vec::new(),
        },
        // The editor's tools, as `editor_tools = true` hands them (no Neovim here: the agent
        // only lists the tools, which needs no channel).
        agent_nvim::front::mcp::server(
            PathBuf::from(env!("CARGO_BIN_EXE_agent-nvim")),
            &fx.workspace.root().join("no-channel"),
            "conformance",
        ),
    ];
    let session = acp::connect(normal, host.clone()).await.unwrap();
    for text in [
        "chat",
        "fs",
        "permission",
        "terminal printf hi",
        "info",
        "updates",
        "notice",
        "elicit-form",
        "elicit-complete",
        "plans",
        "compaction",
        "named-tool",
        "messages",
        "usage",
        "mcp-tools",
    ] {
        prompt(&session, text).await;
    }
    // A form filled in and accepted, one declined, a URL opened once allowed (the cancel of
    // each comes above, the host's default).
    let filled: serde_json::Map<String, Value> = serde_json::from_value(serde_json::json!(
        {"name": "main", "engine": "pg", "port": 5433, "tls": false}
    ))
    .unwrap();
    for (answer, text) in [
        (Elicited::Accept(filled), "elicit-form"),
        (Elicited::Decline, "elicit-form"),
        (Elicited::Accept(serde_json::Map::new()), "elicit-url"),
    ] {
        *host.elicit_with.lock().unwrap() = Some(answer);
        prompt(&session, text).await;
    }
    *host.elicit_with.lock().unwrap() = Some(Elicited::Cancel);
    prompt(
        &session,
        &format!("terminal-kill {}", unique_marker("conformance")),
    )
    .await;
    // A file attached as the plugin writes it: a resource block for this agent.
    std::fs::write(fx.workspace.root().join("notes.md"), "y\n").unwrap();
    prompt(
        &session,
        "chat\n\n[attached: @ notes.md (2 chars)]\n```\ny\n```",
    )
    .await;
    // An image and an audio clip, as `@shot.png` and `@note.wav` attach them.
    let media = agent_nvim::llm::Prompt {
        text: "chat".into(),
        images: vec![agent_nvim::llm::Image::prepare(
            "shot.png",
            agent_nvim_fixtures::pictures::png(4, 4, 1),
        )
        .unwrap()],
        audio: vec![agent_nvim::llm::Audio::prepare(
            "note.wav",
            agent_nvim_fixtures::sounds::wav(8),
        )
        .unwrap()],
    };
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        session.prompt(media, &CancellationToken::new()),
    )
    .await
    .unwrap();
    session.agent_sessions().await.unwrap();
    session.delete_session("earlier-2").await.unwrap();
    session.fork_session().await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    session
        .load("earlier-1", &Events::new(tx), &CancellationToken::new())
        .await
        .unwrap();
    // A load the person stops once it has begun: `$/cancel_request`.
    let (slow_tx, mut slow_rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let stopper = async {
        let _ = slow_rx.recv().await;
        stop.cancel();
    };
    let (stopped, ()) =
        futures::future::join(session.load("slow", &Events::new(slow_tx), &stop), stopper).await;
    assert!(stopped.is_err());
    // Its answer comes back once the agent reads the notification.
    prompt(&session, "chat").await;
    session.shutdown().await;
    events.extend(host.events());
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }

    // A cancelled turn.
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = acp::connect(spec(&fx, "normal", &recording), host.clone())
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let canceller = async {
        while host.asks.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
    };
    futures::future::join(session.prompt("cancel".into(), &cancel), canceller).await;
    session.shutdown().await;
    events.extend(host.events());

    // Modes and options.
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = acp::connect(spec(&fx, "choices", &recording), host.clone())
        .await
        .unwrap();
    session.choose(Choice::Mode("code".into())).await.unwrap();
    session
        .choose(Choice::Option {
            id: "model".into(),
            value: Value::from("smart"),
        })
        .await
        .unwrap();
    session
        .choose(Choice::Option {
            id: "web".into(),
            value: Value::Bool(true),
        })
        .await
        .unwrap();
    session.shutdown().await;
    events.extend(host.events());

    // An agent that takes MCP over HTTP: the remote server (with a header) goes to it.
    let host = Arc::new(Host::new(true, Answer::Never));
    let mut remote = spec(&fx, "mcp-http", &recording);
    remote.mcp_servers = vec![acp::mcp::McpServer::Remote {
        name: "remote".into(),
        transport: acp::mcp::Transport::Http,
        url: "http://127.0.0.1:9/mcp".into(),
        headers: vec![("Authorization".into(), "Bearer t".into())],
    }];
    let session = acp::connect(remote, host.clone()).await.unwrap();
    prompt(&session, "chat").await;
    session.shutdown().await;
    events.extend(host.events());

    // A session continued without its replay, from an agent that only resumes.
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = acp::connect(spec(&fx, "resume-only", &recording), host.clone())
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    session
        .load("earlier-1", &Events::new(tx), &CancellationToken::new())
        .await
        .unwrap();
    prompt(&session, "chat").await;
    session.shutdown().await;
    events.extend(host.events());
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }

    // Sign-in and sign-out.
    let host = Arc::new(Host::new(true, Answer::Never));
    let session = acp::connect(spec(&fx, "login", &recording), host.clone())
        .await
        .unwrap();
    session.choose(Choice::Login("key".into())).await.unwrap();
    session.choose(Choice::Logout).await.unwrap();
    session.shutdown().await;
    events.extend(host.events());

    // An agent that writes a file itself, beside one it writes through the client, in a turn
    // compared with the checkpoint before it.
    let host = Arc::new(Host::new(true, Answer::Never));
    let state = tempfile::tempdir().unwrap();
    let mut checked = spec(&fx, "normal", &recording);
    let checkpoints = agent_nvim::checkpoint::Checkpoints::new(
        state.path(),
        fx.workspace.clone(),
        "conformance".into(),
    );
    checked.checkpoints = Some(checkpoints.clone());
    let session = acp::connect(checked, host.clone()).await.unwrap();
    checkpoints
        .checkpoint(agent_nvim::checkpoint::Kind::Prompt, "outside")
        .await
        .unwrap();
    prompt(&session, "outside").await;
    session.shutdown().await;
    events.extend(host.events());

    let failures = schema_failures(&recording);
    assert!(
        failures.is_empty(),
        "messages we sent that do not validate against the v1 schema:\n{}",
        failures.join("\n")
    );
    let rows = rows(&recording, &events);
    let made = table(&rows);
    std::fs::write(out_dir().join("test-agent.md"), &made).unwrap();
    eprintln!("{made}");
    let missing: Vec<&str> = rows
        .iter()
        .filter(|row| !(row.used && row.handled && row.offered != Some(false)))
        .map(|row| row.name.as_str())
        .collect();
    assert!(
        missing.is_empty(),
        "not exercised or not handled: {missing:?}\n{made}"
    );
    // The README's table is this one: it says what the suite saw.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(
        readme.contains(&made),
        "README.md's ACP table differs from the suite's; put target/acp-conformance/test-agent.md in it:\n{made}"
    );
}

/// The preset agents' commands, when installed here (never fetched: no network in tests).
fn installed_agents() -> Vec<(String, Vec<String>)> {
    let on_path = |program: &str| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
    };
    let npm_global = std::process::Command::new("npm")
        .args(["root", "-g"])
        .output()
        .ok()
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    acp::preset_names()
        .into_iter()
        .filter_map(|name| {
            let mut cmd = acp::preset(&name)?;
            if cmd[0] == "npx" {
                // `npx -y PKG`: only a package already installed globally, run without npx.
                let package = cmd.iter().find(|w| w.starts_with('@'))?.clone();
                let root = npm_global.as_ref()?.join(&package);
                let bin = package.rsplit('/').next()?.to_string();
                if !root.is_dir() || !on_path(&bin) {
                    return None;
                }
                cmd = vec![bin];
            } else if !on_path(&cmd[0]) {
                return None;
            }
            Some((name, cmd))
        })
        .collect()
}

#[tokio::test]
async fn the_real_agents_installed_here_are_recorded_at_initialize() {
    let agents = installed_agents();
    if agents.is_empty() {
        eprintln!(
            "no real ACP agent is installed here (claude, gemini, codex, opencode): none recorded"
        );
        return;
    }
    for (name, cmd) in agents {
        let fx = Fixture::new();
        let recording = Arc::new(Recording::default());
        let host = Arc::new(Host::new(false, Answer::Never));
        let mut spec = AcpSpec::new(name.clone(), cmd, fx.workspace.clone());
        spec.tap = Some(recording.tap());
        spec.connect_timeout = Duration::from_secs(60);
        let connected = acp::connect(spec, host.clone()).await;
        let note = match &connected {
            Ok(_) => "connected".to_string(),
            Err(err) => format!("did not connect: {err}"),
        };
        if let Ok(session) = connected {
            session.shutdown().await;
        }
        let made = table(&rows(&recording, &host.events()));
        std::fs::write(
            out_dir().join(format!("{name}.md")),
            format!("{note}\n\n{made}"),
        )
        .unwrap();
        eprintln!("{name}: {note}\n{made}");
        // What we offered is the same to every agent.
        let (ours, _) = recording.initialize();
        assert_eq!(ours["clientCapabilities"]["terminal"], true, "{name}");
    }
}
