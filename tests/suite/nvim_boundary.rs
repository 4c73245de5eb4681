//! The Rust/Lua boundary in a real Neovim: every event Rust can send has a Lua handler that shows
//! it without an error, every message Lua sends decodes into the struct `protocol.rs` names for
//! it, and every Lua entry point Rust calls exists.

use agent_nvim::acp::{AgentUpdate, PermissionChoice, PlanEntry};
use agent_nvim::agent::{Event, Outcome};
use agent_nvim::approval::{Action, Decision};
use agent_nvim::front::nvim::for_lua;
use agent_nvim::front::nvim::protocol::{
    lua, method, AcpStart, Choice, Choices, Decide, Preview, Prompt, Resume, Rewind, RewindMode,
    Start, UiEvent, PROTOCOL,
};
use rmpv::Value;

use crate::support::nvim::{field, setup_lua, Nvim, Options};

/// The example that follows `previous` (None: the first); None after the last. The match has no
/// wildcard: a variant added to `UiEvent`, `Event`, `AgentUpdate` or `Preview` does not compile
/// here until its arm says what follows it, which is where its own example goes into the chain.
fn example_after(previous: Option<&UiEvent>) -> Option<UiEvent> {
    let approval = |id, preview, choices| UiEvent::Approval {
        id,
        tool: "run_bash".into(),
        title: "run_bash `ls`".into(),
        preview,
        choices,
    };
    let next = match previous {
        None => UiEvent::Started {
            version: "0.0.0".into(),
            protocol: PROTOCOL,
            provider: "anthropic".into(),
            model: "m".into(),
            default_model: "m0".into(),
            base_url: "http://127.0.0.1:9".into(),
            models: vec!["m0".into(), "m1".into()],
            unavailable: Some("agent: no API key".into()),
            workspace: "/w".into(),
            worktree: Some("agent/fix\u{1b}[2J".into()),
            sandbox: "workspace-write, network allowed (Landlock ABI 7)".into(),
            sandbox_warnings: vec!["agent: /w/x (sandbox.writable) does not exist".into()],
        },
        // Drawn again before anything is shown (it clears the chat), with a mark for a prompt
        // not there (nothing is marked).
        Some(UiEvent::Started { .. }) => UiEvent::Clear,
        Some(UiEvent::Clear) => UiEvent::Branches {
            at: vec![agent_nvim::front::nvim::protocol::BranchMark {
                turn: 1,
                index: 2,
                count: 2,
            }],
        },
        Some(UiEvent::Branches { .. }) => UiEvent::AcpStarted {
            name: "test".into(),
        },
        Some(UiEvent::AcpStarted { .. }) => UiEvent::Agent(Event::TurnStarted),
        Some(UiEvent::Agent(Event::TurnStarted)) => UiEvent::Agent(Event::Text {
            text: "Hello\u{1b}[2J".into(),
        }),
        Some(UiEvent::Agent(Event::Text { .. })) => UiEvent::Agent(Event::Thought {
            text: "weighing it\u{1b}[2J".into(),
        }),
        Some(UiEvent::Agent(Event::Thought { .. })) => UiEvent::Agent(Event::Compacted {
            prompts: 3,
            before: 84_100,
            after: 6_200,
            upto: 6,
            summary: "the user asked\u{1b}[31m for X".into(),
            cost: Some(0.01),
        }),
        Some(UiEvent::Agent(Event::Compacted { .. })) => UiEvent::Agent(Event::ToolStarted {
            id: "t1".into(),
            name: "run_bash".into(),
            args: serde_json::json!({"command": "ls", "nothing": null}),
        }),
        Some(UiEvent::Agent(Event::ToolStarted { .. })) => approval(
            1,
            Preview::Command {
                command: "ls".into(),
                cwd: "/w".into(),
                timeout: Some(120.0),
            },
            Choices::Builtin {
                choices: Choice::builtin(
                    &Action::Command {
                        command: "ls".into(),
                    },
                    true,
                ),
            },
        ),
        Some(UiEvent::Approval { preview, .. }) => match preview {
            Preview::Command { .. } => approval(
                2,
                Preview::Diff {
                    path: "a.txt".into(),
                    unified: "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+b\n".into(),
                },
                Choices::agent(
                    vec![PermissionChoice {
                        id: "allow".into(),
                        name: "Allow".into(),
                        kind: "allow_once".into(),
                    }],
                    false,
                ),
            ),
            Preview::Diff { .. } => approval(3, Preview::None, Choices::agent(vec![], false)),
            Preview::None => UiEvent::decided(
                1,
                "run_bash".into(),
                Decision::Refuse {
                    reason: Some("not now".into()),
                },
            ),
        },
        Some(UiEvent::Decided { .. }) => UiEvent::Update(AgentUpdate::ToolUpdated {
            id: "t1".into(),
            title: "Run ls".into(),
            status: "in_progress".into(),
            kind: "execute".into(),
            output: "a\nb".into(),
            running: true,
        }),
        Some(UiEvent::Update(AgentUpdate::ToolUpdated { .. })) => {
            UiEvent::Update(AgentUpdate::Locations {
                id: "t1".into(),
                kind: "read".into(),
                locations: vec![agent_nvim::acp::Location {
                    path: "/nonexistent/a.rs".into(),
                    line: Some(3),
                }],
            })
        }
        Some(UiEvent::Update(AgentUpdate::Locations { .. })) => {
            UiEvent::Update(AgentUpdate::Thought {
                text: "Let me think.".into(),
            })
        }
        Some(UiEvent::Update(AgentUpdate::Thought { .. })) => UiEvent::Update(AgentUpdate::Plan {
            entries: vec![PlanEntry {
                content: "Read".into(),
                status: "completed".into(),
                priority: "high".into(),
            }],
        }),
        Some(UiEvent::Update(AgentUpdate::Plan { .. })) => {
            UiEvent::Update(AgentUpdate::PlanUpdated {
                id: "plan-a".into(),
                entries: vec![PlanEntry {
                    content: "Fix it\u{202e}".into(),
                    status: "pending".into(),
                    priority: "high".into(),
                }],
                text: Some("1. Ship it\u{1b}[2J".into()),
            })
        }
        Some(UiEvent::Update(AgentUpdate::PlanUpdated { .. })) => {
            UiEvent::Update(AgentUpdate::PlanRemoved {
                id: "plan-a".into(),
            })
        }
        Some(UiEvent::Update(AgentUpdate::PlanRemoved { .. })) => {
            UiEvent::Update(AgentUpdate::Compaction {
                id: "c-1".into(),
                status: "failed".into(),
                summary: "kept\u{1b}[2J".into(),
                error: Some("too small\u{202e}".into()),
            })
        }
        Some(UiEvent::Update(AgentUpdate::Compaction { .. })) => {
            UiEvent::Update(AgentUpdate::Message { id: "m-2".into() })
        }
        Some(UiEvent::Update(AgentUpdate::Message { .. })) => {
            UiEvent::Update(AgentUpdate::UserMessage {
                text: "a replayed prompt\u{1b}[2J".into(),
            })
        }
        Some(UiEvent::Update(AgentUpdate::UserMessage { .. })) => {
            UiEvent::Update(AgentUpdate::Commands {
                commands: vec![agent_nvim::acp::AgentCommand {
                    name: "web".into(),
                    description: "search the web\u{1b}".into(),
                    hint: Some("query".into()),
                }],
            })
        }
        Some(UiEvent::Update(AgentUpdate::Commands { .. })) => {
            UiEvent::Update(AgentUpdate::Modes {
                current: "ask".into(),
                modes: vec![agent_nvim::acp::Offered {
                    id: "ask".into(),
                    name: "Ask\u{1b}".into(),
                    description: Some("asks first".into()),
                }],
            })
        }
        Some(UiEvent::Update(AgentUpdate::Modes { .. })) => UiEvent::Update(AgentUpdate::Options {
            options: vec![agent_nvim::acp::ConfigOption {
                id: "model".into(),
                name: "Model".into(),
                description: None,
                category: Some("model".into()),
                kind: "select".into(),
                current: serde_json::json!("fast"),
                values: vec![agent_nvim::acp::Offered {
                    id: "fast".into(),
                    name: "Fast".into(),
                    description: None,
                }],
            }],
        }),
        Some(UiEvent::Update(AgentUpdate::Options { .. })) => {
            UiEvent::Update(AgentUpdate::ContextUsage {
                used: 45_000,
                size: 200_000,
                cost: Some(agent_nvim::acp::AgentCost {
                    amount: 0.42,
                    currency: "USD".into(),
                }),
            })
        }
        Some(UiEvent::Update(AgentUpdate::ContextUsage { .. })) => {
            UiEvent::Update(AgentUpdate::Title {
                title: Some("Fix the test\u{1b}".into()),
            })
        }
        Some(UiEvent::Update(AgentUpdate::Title { .. })) => UiEvent::Update(AgentUpdate::Notice {
            severity: "warning".into(),
            title: "MCP server unavailable\u{1b}[2J".into(),
            description: Some("it did not start".into()),
        }),
        Some(UiEvent::Update(AgentUpdate::Notice { .. })) => {
            UiEvent::Update(AgentUpdate::OutsideChanges {
                agent: "claude\u{1b}[2J".into(),
                checkpoint: "abc123".into(),
                files: vec![agent_nvim::acp::OutsideFile {
                    path: "a\u{1b}.py".into(),
                    shown: "a\u{1b}.py".into(),
                    status: "M".into(),
                }],
                sandboxed: false,
            })
        }
        Some(UiEvent::Update(AgentUpdate::OutsideChanges { .. })) => {
            UiEvent::Update(AgentUpdate::Login {
                needed: true,
                message: "test needs you to log in first".into(),
                methods: vec![agent_nvim::acp::AuthChoice {
                    id: "key".into(),
                    name: "Log in\u{1b}".into(),
                    description: None,
                    terminal: false,
                    args: Vec::new(),
                    env: Vec::new(),
                }],
            })
        }
        Some(UiEvent::Update(AgentUpdate::Login { .. })) => UiEvent::Agent(Event::Retrying {
            attempt: 1,
            delay_ms: 500,
            reason: "overloaded".into(),
        }),
        Some(UiEvent::Agent(Event::Retrying { .. })) => UiEvent::Agent(Event::Usage {
            input: 10,
            output: 5,
            cached: 4,
            cost: None,
        }),
        Some(UiEvent::Agent(Event::Usage { .. })) => UiEvent::Agent(Event::ToolProgress {
            id: "t1".into(),
            output: "compiling\u{1b}[2J\nrunning 3 tests\n".into(),
        }),
        Some(UiEvent::Agent(Event::ToolProgress { .. })) => UiEvent::Agent(Event::ToolFinished {
            id: "t1".into(),
            name: "run_bash".into(),
            ok: true,
            summary: "$ ls -> exit 0".into(),
            output: "a\nb\n".into(),
            diff: None,
        }),
        Some(UiEvent::Agent(Event::ToolFinished { .. })) => UiEvent::error("agent: boom"),
        Some(UiEvent::Agent(Event::Error { .. })) => UiEvent::Agent(Event::TurnDone {
            input: 10,
            output: 5,
            outcome: Outcome::Done,
            message: "done".into(),
            cost: None,
        }),
        Some(UiEvent::Agent(Event::TurnDone { .. })) => UiEvent::Reviewable {
            checkpoint: "0123456789abcdef".into(),
            files: 2,
            prompt: Some(1),
            of: Some(1),
        },
        Some(UiEvent::Reviewable { .. }) => UiEvent::Prompt {
            text: "a saved prompt\u{202e}".into(),
        },
        Some(UiEvent::Prompt { .. }) => UiEvent::Pictures {
            files: vec![String::new(), "/nowhere/0000000000000000-1.png".into()],
        },
        Some(UiEvent::Pictures { .. }) => UiEvent::Replayed {
            id: "r1".into(),
            name: "read_file".into(),
            ok: true,
            summary: "read replayed.txt".into(),
            started: true,
            note: Some("allowed once\u{202e}".into()),
            later: Some(0),
        },
        Some(UiEvent::Replayed { .. }) => UiEvent::ToolOutput {
            later: 0,
            output: "replayed output\u{1b}[2J\n".into(),
            diff: None,
        },
        Some(UiEvent::ToolOutput { .. }) => UiEvent::Resumed {
            id: "20261201-123456-ab12".into(),
            title: "a saved prompt".into(),
        },
        Some(UiEvent::Resumed { .. }) => UiEvent::Rewound {
            turn: 1,
            cut: true,
            message: Some("agent: rewound to before prompt 1: the conversation cut".into()),
            prompt: Some("a saved prompt".into()),
        },
        Some(UiEvent::Rewound { .. }) => UiEvent::RewindAsk {
            turn: 2,
            mode: "both".into(),
            files: vec!["b\u{1b}[2J.txt".into(), "c.txt".into()],
            by: vec![2],
        },
        Some(UiEvent::RewindAsk { .. }) => UiEvent::Agent(Event::Notice {
            text: "instructions: AGENTS.md\u{202e}".into(),
        }),
        Some(UiEvent::Agent(Event::Notice { .. })) => UiEvent::InlineStatus {
            inline: 9,
            text: "reading a.py\u{1b}[2J".into(),
        },
        Some(UiEvent::InlineStatus { .. }) => UiEvent::InlineProposal {
            inline: 9,
            question: 9,
            stamp: 1,
            hunks: vec![agent_nvim::front::nvim::protocol::InlineHunk {
                at: 0,
                removed: vec!["a".into()],
                added: vec!["b\u{202e}".into()],
                shown: Vec::new(),
            }],
        },
        Some(UiEvent::InlineProposal { .. }) => UiEvent::InlineDone {
            inline: 9,
            ok: true,
            message: "agent: done".into(),
            cost: Some(0.01),
        },
        Some(UiEvent::InlineDone { .. }) => UiEvent::BtwText {
            id: 3,
            text: "an answer\u{1b}[2J".into(),
        },
        Some(UiEvent::BtwText { .. }) => UiEvent::BtwDone {
            id: 3,
            ok: true,
            message: "10 in / 5 out tokens".into(),
            cost: Some(0.01),
        },
        Some(UiEvent::BtwDone { .. }) => UiEvent::Elicitation {
            id: 4,
            asked: agent_nvim::acp::elicit::Elicitation {
                agent: "test".into(),
                message: "Which one?\u{1b}[2J".into(),
                ask: agent_nvim::acp::elicit::Ask::Form {
                    title: None,
                    description: None,
                    fields: vec![agent_nvim::acp::elicit::Field {
                        name: "pick".into(),
                        title: "Pick\u{202e}".into(),
                        description: None,
                        required: true,
                        default: Some(serde_json::json!("a")),
                        kind: agent_nvim::acp::elicit::Kind::Choice {
                            options: vec![agent_nvim::acp::elicit::Choice {
                                value: "a".into(),
                                title: "A".into(),
                            }],
                        },
                    }],
                },
            },
        },
        Some(UiEvent::Elicitation { .. }) => UiEvent::ElicitationClosed { id: 4 },
        Some(UiEvent::ElicitationClosed { .. }) => UiEvent::Idle,
        Some(UiEvent::Idle) => return None,
    };
    Some(next)
}

/// One example of every event, in the order of the chain above.
fn every_event() -> Vec<UiEvent> {
    let mut events: Vec<UiEvent> = Vec::new();
    while let Some(next) = example_after(events.last()) {
        events.push(next);
    }
    events
}

async fn headless() -> Nvim {
    Nvim::start(Options {
        ui: None,
        env: vec![],
        setup: setup_lua(""),
    })
    .await
}

/// Sends `events` to Lua the way the pump does; returns what `agent.rpc` found wrong once the
/// pickers the approvals open (scheduled) have opened.
async fn receive(nvim: &Nvim, events: Vec<UiEvent>) -> Vec<String> {
    nvim.lua(lua::RECEIVE, vec![Value::Array(for_lua(events))])
        .await;
    // A scheduled callback runs before this request is answered.
    nvim.lua("vim.schedule(function() end)", vec![]).await;
    let problems = nvim
        .lua("return require('agent.rpc').problems()", vec![])
        .await;
    problems
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn every_event_rust_sends_has_a_lua_handler_that_shows_it_without_an_error() {
    let events = every_event();
    let kinds: std::collections::BTreeSet<String> = events
        .iter()
        .map(|e| {
            serde_json::to_value(e).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(kinds.len(), 48, "{kinds:?}");
    let nvim = headless().await;
    // With the chat open, an `error` event is shown there only: any error message is a problem.
    nvim.lua("require('agent.chat').open() vim.v.errmsg = ''", vec![])
        .await;
    assert_eq!(
        nvim.lua("return require('agent.rpc').PROTOCOL", vec![])
            .await,
        Value::from(PROTOCOL)
    );
    let problems = receive(&nvim, events).await;
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(
        nvim.lua("return vim.v.errmsg", vec![]).await,
        Value::from("")
    );
    // The approvals opened the picker, each with its kind of preview.
    assert_eq!(
        nvim.lua("return require('agent.approval').pending()", vec![])
            .await,
        Value::from(3)
    );
    let chat = nvim.buffer_lines("agent: chat").await.join("\n");
    for shown in [
        "connected to test (ACP)",
        "Hello\\e[2J",
        "Plan",
        "done",
        "a saved prompt\\u{202e}",
        "▸ read replayed.txt · allowed once\\u{202e}",
        "  replayed output\\e[2J",
        "resumed: a saved prompt",
        "rewound to before prompt 1: the model no longer sees what follows",
    ] {
        assert!(chat.contains(shown), "{shown}:\n{chat}");
    }
}

/// The check above can fail: an event without a handler, and a handler that raises, are named.
#[tokio::test]
async fn an_event_lua_cannot_handle_or_that_raises_is_reported() {
    let nvim = headless().await;
    nvim.lua(
        "local handlers = require('agent.chat.handlers').handlers \
         handlers.plan = nil \
         handlers.usage = function() error('broken usage') end",
        vec![],
    )
    .await;
    let problems = receive(
        &nvim,
        vec![
            UiEvent::Update(AgentUpdate::Plan { entries: vec![] }),
            UiEvent::Agent(Event::Usage {
                input: 1,
                output: 1,
                cached: 0,
                cost: None,
            }),
            UiEvent::Agent(Event::Text { text: "ok".into() }),
        ],
    )
    .await;
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems[0].starts_with("`plan`: no handler"),
        "{problems:#?}"
    );
    assert!(
        problems[1].starts_with("`usage`:") && problems[1].contains("broken usage"),
        "{problems:#?}"
    );
}

#[tokio::test]
async fn every_lua_entry_point_rust_calls_exists() {
    let nvim = headless().await;
    let path = Value::from("/nonexistent/a.txt");
    for code in lua::ALL {
        let args = match code {
            lua::RECEIVE => vec![Value::Array(vec![])],
            lua::CHECKTIME => vec![],
            _ => vec![path.clone()],
        };
        // A missing function is an error, and Nvim::lua panics on one.
        nvim.lua(code, args).await;
    }
    let state = nvim.lua(lua::BUFFER_STATE, vec![path.clone()]).await;
    assert_eq!(
        rmpv::ext::from_value::<agent_nvim::front::nvim::protocol::BufferState>(state).unwrap(),
        Default::default()
    );
    assert_eq!(nvim.lua(lua::BUFFER_TEXT, vec![path]).await, Value::Nil);
}

/// What Lua sent, as `wire.recorded` kept it: (method, its argument if any).
async fn recorded(nvim: &Nvim) -> Vec<(String, Option<Value>)> {
    let value = nvim
        .lua("return require('agent.rpc.wire').recorded", vec![])
        .await;
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            let field = |name: &str| field(entry, name);
            let method = field("method").unwrap().as_str().unwrap().to_string();
            (method, field("arg"))
        })
        .collect()
}

/// Answers the picker's open question with `keys` and waits for it to close.
async fn answer(nvim: &Nvim, keys: &str, left: i64) {
    nvim.api.input(keys).await.unwrap();
    nvim.wait_for(&format!("require('agent.approval').pending() == {left}"))
        .await;
    if left > 0 {
        // The next question is shown once the answer is handled, as a person sees it.
        nvim.wait_for("not require('agent.approval').waiting().unseen")
            .await;
    }
}

#[tokio::test]
async fn every_message_lua_sends_decodes_into_the_struct_protocol_names() {
    let agent = env!("CARGO_BIN_EXE_acp-test-agent");
    let nvim = headless().await;
    nvim.lua(
        "require('agent.rpc.wire').recorded = {} assert(require('agent.rpc').ensure())",
        vec![],
    )
    .await;
    // The picker's answers, as a person gives them: each built-in choice, then an agent's option.
    let builtin = |id| UiEvent::Approval {
        id,
        tool: "run_bash".into(),
        title: "run_bash `ls`".into(),
        preview: Preview::Command {
            command: "ls".into(),
            cwd: "/w".into(),
            timeout: Some(1.0),
        },
        choices: Choices::Builtin {
            choices: Choice::builtin(
                &Action::Command {
                    command: "ls".into(),
                },
                true,
            ),
        },
    };
    let mut questions: Vec<UiEvent> = (1..=5).map(builtin).collect();
    questions.push(UiEvent::Approval {
        id: 6,
        tool: "Edit a".into(),
        title: "Edit a".into(),
        preview: Preview::None,
        choices: Choices::agent(
            vec![PermissionChoice {
                id: "opt-1".into(),
                name: "Allow".into(),
                kind: "allow_once".into(),
            }],
            false,
        ),
    });
    assert!(receive(&nvim, questions).await.is_empty());
    // The lasting grants (2, 3) take their key twice.
    for (i, keys) in ["1", "22", "33", "4"].iter().enumerate() {
        answer(&nvim, keys, 5 - i as i64).await;
    }
    nvim.api.input("r").await.unwrap();
    nvim.api.input("not now<CR>").await.unwrap();
    nvim.wait_for("require('agent.approval').pending() == 1")
        .await;
    // Shown once the answer is handled: a key typed before that is a count in Normal mode.
    nvim.wait_for("not require('agent.approval').waiting().unseen")
        .await;
    answer(&nvim, "1", 0).await;
    nvim.lua(
        &format!(
            "local rpc = require('agent.rpc') \
             rpc.prompt('hi') rpc.cancel() rpc.new() \
             rpc.acp('test', {{ '{agent}' }}, {{ A = '1' }}) \
             rpc.resume('20261201-123456-ab12') rpc.rewind(2, 'code') \
             rpc.files('calc', 5, function() end) rpc.compact() \
             rpc.choose('option', 'web', true) rpc.choose('mode', 'code') \
             vim.cmd.edit(vim.fn.tempname() .. '.txt') \
             vim.api.nvim_buf_set_lines(0, 0, -1, false, {{ 'a' }}) \
             local inline = require('agent.inline') \
             inline.edit({{ instruction = 'x', first = 1, last = 1 }}, {{ ensure = rpc.ensure, \
               buffer_path = require('agent.context.ask').buffer_path }}) inline.stop() \
             inline.on_event({{ type = 'inline_proposal', inline = 999, question = 77, stamp = 1, \
               hunks = {{ {{ at = 0, removed = {{ 'a' }}, added = {{ 'b' }} }} }} }}) \
             require('agent.side').ask('why?', {{ ensure = rpc.ensure, to_input = function() end }}) \
             rpc.renamed('my name') \
             rpc.branch(2, -1) \
             rpc.elicit_answer(78, 'accept', {{ name = 'db', port = 5432, tls = false }}) \
             rpc.close(1)"
        ),
        vec![],
    )
    .await;

    let sent = recorded(&nvim).await;
    let methods: Vec<&str> = sent.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        methods,
        [
            "start",
            "decide",
            "decide",
            "decide",
            "decide",
            "decide",
            "decide",
            "prompt",
            "cancel",
            "new",
            "acp",
            "resume",
            "rewind",
            "files",
            "compact",
            "choose",
            "choose",
            "inline",
            "inline_stop",
            "inline_answer",
            "btw",
            "rename",
            "branch",
            "elicit_answer",
            "close"
        ]
    );
    for name in method::ALL {
        assert!(methods.contains(&name), "Lua never sent {name}");
    }
    let arg = |i: usize| sent[i].1.clone().unwrap_or_else(|| panic!("{:?}", sent[i]));
    let start: Start = rmpv::ext::from_value(arg(0)).unwrap();
    assert!(
        !start.workspace.is_empty() && !start.auto_approve,
        "{start:?}"
    );
    // The test's XDG_STATE_HOME is a temporary directory: Neovim's stdpath("state") under it.
    assert!(
        start
            .state_dir
            .as_deref()
            .is_some_and(|dir| dir.ends_with("/state/nvim/agent")),
        "{start:?}"
    );
    let decides: Vec<Decide> = (1..=6)
        .map(|i| rmpv::ext::from_value(arg(i)).unwrap())
        .collect();
    let decide = |id, decision, option: Option<&str>| Decide {
        id,
        decision,
        option: option.map(String::from),
        dropped: None,
        hunks: None,
    };
    assert_eq!(
        decides,
        [
            decide(1, Decision::AllowOnce, None),
            decide(2, Decision::AllowSession, None),
            decide(3, Decision::AllowAll, None),
            decide(4, Decision::Refuse { reason: None }, None),
            decide(
                5,
                Decision::Refuse {
                    reason: Some("not now".into())
                },
                None
            ),
            decide(6, Decision::AllowOnce, Some("opt-1")),
        ]
    );
    let prompt: Prompt = rmpv::ext::from_value(arg(7)).unwrap();
    assert_eq!(prompt.text, "hi");
    // Every message but `decide` names the conversation it is for: the first one here. Those
    // that carry nothing else carry that.
    let conversation = |value: &Value| {
        agent_nvim_fixtures::nvim::field(value, "conversation").and_then(|v| v.as_u64())
    };
    for (method, arg) in &sent {
        let named = arg.as_ref().and_then(conversation);
        if method == "decide" || method == "inline_answer" || method == "elicit_answer" {
            assert_eq!(named, None, "{method}: {arg:?}");
        } else {
            assert_eq!(named, Some(1), "{method}: {arg:?}");
        }
    }
    for i in [8, 9, 14, 24] {
        assert_eq!(
            arg(i),
            Value::Map(vec![(Value::from("conversation"), Value::from(1))]),
            "{}",
            sent[i].0
        );
    }
    let acp: AcpStart = rmpv::ext::from_value(arg(10)).unwrap();
    assert_eq!(
        (acp.name.as_str(), acp.cmd, acp.env.map(|e| e.len())),
        ("test", Some(vec![agent.to_string()]), Some(1))
    );
    let resume: Resume = rmpv::ext::from_value(arg(11)).unwrap();
    assert_eq!(resume.id, "20261201-123456-ab12");
    let rewind: Rewind = rmpv::ext::from_value(arg(12)).unwrap();
    assert_eq!(
        rewind,
        Rewind {
            turn: 2,
            mode: RewindMode::Code,
            others: None,
        }
    );
    let files: agent_nvim::front::nvim::protocol::Files = rmpv::ext::from_value(arg(13)).unwrap();
    assert_eq!(
        (files.seq, files.query.as_str(), files.limit),
        (1, "calc", Some(5))
    );
    let choose =
        |i| -> agent_nvim::front::nvim::protocol::Choose { rmpv::ext::from_value(arg(i)).unwrap() };
    let (option, mode) = (choose(15), choose(16));
    assert_eq!(
        (option.kind.as_str(), option.id.as_str(), option.value),
        ("option", "web", Some(serde_json::json!(true)))
    );
    assert_eq!(
        (mode.kind.as_str(), mode.id.as_str(), mode.value),
        ("mode", "code", None)
    );
    use agent_nvim::front::nvim::protocol::{Inline, InlineAnswer, InlineStop};
    let inline: Inline = rmpv::ext::from_value(arg(17)).unwrap();
    assert_eq!(
        (
            inline.first,
            inline.last,
            inline.instruction.as_str(),
            inline.excerpt.as_str()
        ),
        (1, 1, "x", "1: a")
    );
    assert!(inline.path.ends_with(".txt"), "{inline:?}");
    let stop: InlineStop = rmpv::ext::from_value(arg(18)).unwrap();
    assert_eq!(stop.inline, inline.inline);
    let btw: agent_nvim::front::nvim::protocol::Btw = rmpv::ext::from_value(arg(20)).unwrap();
    assert_eq!(btw.question, "why?");
    let rename: agent_nvim::front::nvim::protocol::Rename = rmpv::ext::from_value(arg(21)).unwrap();
    assert_eq!((rename.id, rename.title.as_str()), (None, "my name"));
    let branch: agent_nvim::front::nvim::protocol::BranchSwitch =
        rmpv::ext::from_value(arg(22)).unwrap();
    assert_eq!((branch.turn, branch.step), (2, -1));
    let elicited: agent_nvim::front::nvim::protocol::ElicitAnswer =
        rmpv::ext::from_value(arg(23)).unwrap();
    assert_eq!(elicited.question, 78);
    assert_eq!(
        elicited.elicited(),
        Some(agent_nvim::acp::elicit::Elicited::Accept(
            serde_json::json!({"name": "db", "port": 5432, "tls": false})
                .as_object()
                .unwrap()
                .clone()
        ))
    );
    // A proposal for an edit that is gone is answered at once: nothing applied.
    let answer: InlineAnswer = rmpv::ext::from_value(arg(19)).unwrap();
    assert_eq!(
        answer,
        InlineAnswer {
            question: 77,
            hunks: vec!["stale".into()]
        }
    );
}

/// `request::VERSION`, the one request the backend answers, over a real RPC channel from Neovim.
#[tokio::test]
async fn the_version_request_answers_the_backends_version() {
    let nvim = headless().await;
    let version = nvim
        .lua(
            "local method = ...
             local job = vim.fn.jobstart({ require('agent.rpc').backend(), 'nvim' }, { rpc = true })
             local ok, answer = pcall(vim.rpcrequest, job, method)
             vim.fn.jobstop(job)
             return ok and answer or ('error: ' .. tostring(answer))",
            vec![Value::from(
                agent_nvim::front::nvim::protocol::request::VERSION,
            )],
        )
        .await;
    assert_eq!(version.as_str(), Some(env!("CARGO_PKG_VERSION")));
}

/// `lua::ALL` and `method::ALL` name every constant of their modules, so a new entry point or
/// notification cannot escape the tests above by being left out of the list.
#[test]
fn the_all_lists_name_every_constant_of_their_module() {
    let source = include_str!("../../src/front/nvim/protocol.rs");
    let constants = |module: &str| -> usize {
        let start = source
            .find(&format!("pub mod {module} {{"))
            .unwrap_or_else(|| panic!("no module {module}"));
        let body = &source[start..];
        let body = &body[..body.find("\n}").unwrap()];
        body.lines()
            .filter(|l| l.trim_start().starts_with("pub const ") && !l.contains(" ALL:"))
            .count()
    };
    assert_eq!(constants("lua"), lua::ALL.len());
    assert_eq!(constants("method"), method::ALL.len());
}

/// A tool call of megabytes is refused in Rust, before its row, its status or its
/// question reaches Neovim; the model reads why; the history keeps only its start.
#[tokio::test]
async fn huge_tool_arguments_are_refused_before_anything_reaches_neovim() {
    use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};
    use crate::support::tool_result;
    let command = format!("true {}", "x".repeat(20_000_000));
    let new_str = "y".repeat(2 * 1024 * 1024 + 1);
    let call = |id: &str, name: &str, args: serde_json::Value| Part::ToolCall {
        id: id.into(),
        name: name.into(),
        args: args.to_string(),
    };
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            Reply::Turn {
                parts: vec![
                    call("t1", "run_bash", serde_json::json!({ "command": command })),
                    call(
                        "t2",
                        "edit_file",
                        serde_json::json!({ "path": "big.txt", "old_str": "", "new_str": new_str }),
                    ),
                ],
                usage: (1, 1),
            },
            Reply::Turn {
                parts: vec![Part::Text("OK.".into())],
                usage: (1, 1),
            },
        ],
    );
    let nvim = Nvim::start(Options {
        ui: Some((120, 40)),
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "k".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua("auto_approve = true, max_edit_mb = 2"),
    })
    .await;
    // Every string an event brings to Lua, measured as it arrives.
    nvim.lua(
        "local chat = require('agent.chat') local handle = chat.handle \
         vim.g.longest = 0 \
         chat.handle = function(e) \
           local function walk(v) \
             if type(v) == 'string' then vim.g.longest = math.max(vim.g.longest, #v) \
             elseif type(v) == 'table' then for _, x in pairs(v) do walk(x) end end \
           end \
           walk(e) return handle(e) end",
        vec![],
    )
    .await;
    nvim.cmd("Agent go").await;
    let (ran, ok) = tool_result(&mock, 1, "t1");
    assert!(!ok);
    assert_eq!(
        ran,
        "run_bash: the argument 'command' is 20,000,005 characters long, over the limit of 100,000. Put long content in a file with edit_file, in parts, and refer to the file."
    );
    let (edited, ok) = tool_result(&mock, 1, "t2");
    assert!(!ok);
    assert_eq!(
        edited,
        "edit_file: new_str is 2,097,153 bytes, over the edit size limit of 2 MB (max_edit_mb). Make the change in smaller edits."
    );
    nvim.wait_for_line("agent: chat", "OK.").await;
    assert!(!nvim.workspace.path().join("big.txt").exists());
    let longest = nvim.lua("return vim.g.longest", vec![]).await;
    assert!(
        longest.as_u64().unwrap() < 20_000,
        "an event brought Lua a string of {longest} bytes"
    );
    // The history sent back keeps the start of the refused values, not the megabytes.
    let second = &mock.requests()[1];
    let size = second.body.to_string().len();
    assert!(size < 100_000, "the second request is {size} bytes");
    nvim.wait_for_screen("arguments too large").await;
}
