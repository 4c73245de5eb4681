//! Driving an external agent over ACP from Neovim: the `acp` notification connects one, prompts
//! go to it until `new`, and its requests are answered through the same chat, picker and buffers
//! as the built-in agent's (the host below).

use std::sync::Arc;

use super::adapters::{NvimEditor, NvimHost};
use super::slot::Slot;
use serde_json::json;

use super::protocol::{AcpStart, UiEvent};
use crate::acp::{self, AcpSpec};
use crate::conversation::{Conversation, Events, Unavailable};
use crate::sessions::{AgentNote, Header, Store};
use crate::{display, session};
use agent_nvim_vocab::conversation::ConversationEvent;
use agent_nvim_vocab::events::{Event, Outcome};
use std::collections::HashSet;

impl Slot {
    /// `acp {name}`: ends the conversation prompts go to, then connects the named agent in the
    /// background; prompts are answered "still starting" until it is connected, and go back to
    /// the built-in conversation when it cannot be.
    pub(super) async fn start_external(self: &Arc<Self>, start: AcpStart) {
        let (workspace, auto_approve, nvim, native, checkpoints, store, sandbox, terminal) =
            match self.session.lock().await.as_ref() {
                Some(s) => (
                    s.workspace.clone(),
                    s.auto_approve,
                    s.nvim.clone(),
                    s.native.clone(),
                    s.checkpoints.clone(),
                    s.store.clone(),
                    s.sandbox.clone(),
                    s.terminal.clone(),
                ),
                None => {
                    return self
                        .ui
                        .error("agent: the backend was not started; run :Agent again")
                }
            };
        let command = match start.cmd.filter(|c| !c.is_empty()).or_else(|| acp::preset(&start.name)) {
            Some(command) => command,
            None => {
                return self.ui.error(format!(
                    "agent: no ACP agent named '{}'; use {}, or configure it in setup({{ acp = {{ agents = ... }} }})",
                    start.name,
                    acp::preset_names().join(", ")
                ))
            }
        };
        self.cancel_turn();
        let slot = self.clone();
        tokio::spawn(async move {
            slot.idle().await;
            slot.switch_to(Arc::new(starting(&start.name))).await;
            let mut spec = AcpSpec::new(start.name.clone(), command, workspace.clone());
            spec.env = start.env.unwrap_or_default().into_iter().collect();
            spec.auto_approve = auto_approve;
            spec.checkpoints = checkpoints.clone();
            spec.terminal = terminal;
            for dir in start.directories.clone().unwrap_or_default() {
                match extra_root(workspace.root(), &dir) {
                    Ok(extra) => spec.directories.push(extra),
                    // Never a failure: the agent runs without it, and the person is told why.
                    Err(why) => slot.ui.error(format!(
                        "agent: {}'s directory {} is left out: {why}",
                        start.name,
                        display::one_line(&dir.path)
                    )),
                }
            }
            for conf in start.mcp_servers.clone().unwrap_or_default() {
                match mcp_server(&conf, workspace.root()) {
                    Ok(server) => spec.mcp_servers.push(server),
                    // Never a failure: the agent runs without it, and the person is told why.
                    Err(why) => slot.ui.error(format!(
                        "agent: MCP server {} is left out for {}: {why}",
                        display::one_line(&conf.name),
                        start.name,
                    )),
                }
            }
            // This agent's editor tools, when asked for (the previous agent's closed with it).
            let editor = if start.editor_tools {
                let opened =
                    super::editor::Channel::open(nvim.clone(), workspace.clone(), &slot.shutdown)
                        .and_then(|channel| Ok((channel.server()?, channel)));
                match opened {
                    Ok((server, channel)) => {
                        spec.mcp_servers.push(server);
                        Some(channel)
                    }
                    Err(err) => {
                        slot.ui.error(format!(
                            "agent: the editor tools are left out for {}: {err}",
                            start.name
                        ));
                        None
                    }
                }
            } else {
                None
            };
            if start.sandbox {
                spec.sandbox = sandbox.policy(workspace.root());
                if spec.sandbox.is_none() {
                    // Never a failure: the agent runs, and the person is told it is not confined.
                    let report = sandbox.report(workspace.root());
                    slot.ui.error(format!(
                        "agent: {} runs without a sandbox: the sandbox is {}",
                        start.name, report.summary
                    ));
                }
            }
            if let Some(secs) = start.connect_timeout.filter(|s| s.is_finite() && *s > 0.0) {
                spec.connect_timeout = std::time::Duration::from_secs_f64(secs);
            }
            let host = Arc::new(NvimHost {
                ui: slot.ui.clone(),
                nvim: nvim.clone(),
                editor: NvimEditor { nvim },
                cwd: workspace.root().display().to_string(),
            });
            tracing::info!(name = %start.name, "connecting to an external agent");
            let next: Arc<dyn Conversation> = match acp::connect(spec, host).await {
                Ok(session) => {
                    slot.ui.send(UiEvent::AcpStarted {
                        name: start.name.clone(),
                    });
                    // Saved and checkpointed like the built-in one.
                    session::decorate(Arc::new(session), store.as_ref(), checkpoints.as_ref())
                }
                Err(err) => {
                    slot.ui.error(format!("agent: {err}"));
                    native
                }
            };
            let connected = next.agent().is_some();
            slot.switch_to(next).await;
            // Held while this agent is the conversation's: switching away closes it (a failed
            // start drops it here).
            if connected {
                if let Ok(mut slot_editor) = slot.editor.lock() {
                    *slot_editor = editor;
                }
            }
            // A fork of another conversation's session (`:Agent fork`): loaded at once.
            if let (true, Some(session)) = (connected, start.load) {
                slot.resume_external(agent_session_id(&start.name, &session));
            }
        });
    }
}

/// One of `mcp_servers` as the agent is sent it: a stdio server's command found (absolute, as
/// the protocol wants it: a bare name on PATH, a relative path from the workspace root), a
/// remote one's transport known.
fn mcp_server(
    conf: &super::protocol::McpConf,
    root: &std::path::Path,
) -> Result<acp::mcp::McpServer, String> {
    let pairs = |map: &std::collections::BTreeMap<String, String>| {
        map.iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    match (&conf.command, &conf.url) {
        (Some(command), None) => Ok(acp::mcp::McpServer::Stdio {
            name: conf.name.clone(),
            command: find_command(command, root).ok_or_else(|| {
                format!(
                    "its command '{}' is not found{}",
                    display::one_line(command),
                    if command.contains('/') {
                        ""
                    } else {
                        " on PATH"
                    }
                )
            })?,
            args: conf.args.clone(),
            env: pairs(&conf.env),
        }),
        (None, Some(url)) => {
            let transport = match conf.transport.as_deref() {
                None | Some("http") => acp::mcp::Transport::Http,
                Some("sse") => acp::mcp::Transport::Sse,
                Some(other) => {
                    return Err(format!(
                        "its type '{}' is neither http nor sse",
                        display::one_line(other)
                    ))
                }
            };
            Ok(acp::mcp::McpServer::Remote {
                name: conf.name.clone(),
                transport,
                url: url.clone(),
                headers: pairs(&conf.headers),
            })
        }
        _ => Err("it needs either a command or a url".into()),
    }
}

/// `command` as an absolute path to an executable file: a bare name looked up on PATH, a path
/// with a slash taken from `root` (`~/` the home directory); None when there is none.
fn find_command(command: &str, root: &std::path::Path) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |path: &std::path::Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        let path = match command.strip_prefix("~/") {
            Some(rest) => std::env::var_os("HOME")
                .map(std::path::PathBuf::from)?
                .join(rest),
            None => root.join(command),
        };
        return runnable(&path).then_some(path);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(command))
        .find(|path| path.is_absolute() && runnable(path))
}

/// One of `acp.agents.NAME.directories` as a root of its own: `~/` the home directory, a
/// relative path the workspace root's; it must be a directory, and not the workspace itself.
fn extra_root(
    root: &std::path::Path,
    dir: &super::protocol::AcpDirectory,
) -> Result<acp::ExtraRoot, String> {
    let given = std::path::Path::new(&dir.path);
    let path = match (dir.path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::PathBuf::from(home).join(rest),
        _ if given.is_absolute() => given.to_path_buf(),
        _ => root.join(given),
    };
    let workspace = crate::workspace::Workspace::new(&path).map_err(|err| err.to_string())?;
    if workspace.root().starts_with(root) {
        // The agent reads and writes it already as part of the workspace, where no second
        // root's read-only rule could hold (a relative path, a link, a `..` reach it).
        return Err("it is inside the workspace, which the agent can already use".into());
    }
    Ok(acp::ExtraRoot {
        workspace,
        writable: dir.writable,
    })
}

/// How the resume list names an external agent's own session: `agent:{name}:{its id}`, apart
/// from our saved conversations' ids (`20261201-123456-ab12`, which never start so).
const AGENT_SESSION: &str = "agent:";

impl Slot {
    /// The rows the resume list gets from the running external agent, each with the time it
    /// sorts by: its own sessions in this workspace (`session/list`), each marked with its name
    /// (`agent`) and named `agent:{name}:{id}`; or one row with the `problem` when it could not
    /// list them. None when the conversation is not an agent that lists its sessions. A session
    /// whose id would not show as it is (a control or invisible character) is left out, as its
    /// row could not be told from another's.
    pub(super) async fn agent_session_rows(
        &self,
        noted: &HashSet<AgentNote>,
        now: u64,
    ) -> Vec<(u64, serde_json::Value)> {
        let conversation = self.conversation.lock().await.clone();
        let Some(conversation) = conversation else {
            return Vec::new();
        };
        let name = conversation.name().to_string();
        let agent = display::one_line(&name);
        match conversation.agent_sessions().await {
            Ok(listed) => listed
                .into_iter()
                .filter(|session| {
                    let plain = display::one_line(&session.id) == session.id;
                    if !plain {
                        tracing::info!(agent = %name, "left out a session whose id is not plain text");
                    }
                    // A session saved in a file of ours is that file's row.
                    let note = AgentNote {
                        agent: name.clone(),
                        session: session.id.clone(),
                    };
                    plain && !noted.contains(&note)
                })
                .map(|session| {
                    let mut row = json!({
                        "id": format!("{AGENT_SESSION}{name}:{}", session.id),
                        "agent": agent,
                        "session": session.id,
                        "title": session.title.as_deref().map(display::one_line).unwrap_or_default(),
                    });
                    if let Some(updated) = session.updated {
                        row["updated"] = json!(updated);
                        row["age"] = json!(display::age_at(updated, now));
                    }
                    (session.updated.unwrap_or(0), row)
                })
                .collect(),
            Err(err) => vec![(
                0,
                json!({
                    "id": format!("{AGENT_SESSION}{name}"),
                    "agent": agent,
                    "title": "",
                    "problem": display::one_line(&err.to_string()),
                }),
            )],
        }
    }

    /// `resume agent:{name}:{id}`: cancels the turn and has the running agent `name` load its
    /// session `id` ([`Slot::load_agent_session`]).
    pub(super) fn resume_external(self: &Arc<Self>, id: String) {
        self.cancel_turn();
        self.claimed(move |slot| async move {
            let conversation = slot.conversation.lock().await.clone();
            let Some(conversation) = conversation else {
                return slot.ui.error("agent: the backend was not started; run :Agent again");
            };
            let Some(session) = agent_session(&id, conversation.name()) else {
                return slot.ui.error(format!(
                    "agent: '{}' is not a session of {}; start its agent with :Agent acp, then resume it",
                    display::one_line(&id),
                    display::one_line(conversation.name())
                ));
            };
            slot.load_agent_session(&conversation, &id, session).await;
        });
    }

    /// Resuming our saved conversation `header` of an external agent: when its note says which
    /// of the agent's sessions it is and that agent runs, the agent loads it
    /// ([`Slot::load_agent_session`]); when the agent is not the running one, the user is told
    /// to start it. False, having done nothing, when there is no note.
    pub(super) async fn resume_noted(&self, store: &Store, header: &Header) -> bool {
        let Some(note) = store.agent_session(&header.id) else {
            return false;
        };
        let conversation = self.conversation.lock().await.clone();
        match conversation {
            Some(conversation) if conversation.name() == note.agent => {
                if !self
                    .resume_without_replay(&conversation, store, header, &note.session)
                    .await
                {
                    self.load_agent_session(&conversation, &header.id, &note.session)
                        .await;
                }
            }
            _ => self.ui.error(format!(
                "agent: conversation '{}' was with {}; start it with :Agent acp {}, then resume it",
                header.id,
                display::one_line(&note.agent),
                display::one_line(&note.agent)
            )),
        }
        true
    }

    /// With the busy lock held, where the running agent offers `session/resume`: it continues
    /// its session `session` without replaying it, and the chat shows our own saved file of it
    /// (`header`) instead, then `resumed`. False, having done nothing, where it does not offer
    /// it (the caller has it load the session).
    async fn resume_without_replay(
        &self,
        conversation: &Arc<dyn Conversation>,
        store: &Store,
        header: &Header,
        session: &str,
    ) -> bool {
        let token = self.begin_turn();
        let resumed = conversation.resume_agent_session(session, &token).await;
        self.end_turn();
        match resumed {
            Err(crate::conversation::ConversationError::Unsupported { .. }) => false,
            Err(err) => {
                self.ui.error(format!("agent: {err}"));
                true
            }
            Ok(()) => {
                tracing::info!(name = conversation.name(), "resumed an agent's session");
                match super::replay::show(
                    &self.ui,
                    store.clone(),
                    header.id.clone(),
                    super::replay::Branches::AsWritten,
                )
                .await
                {
                    Ok((saved, _)) => self.ui.send(UiEvent::Resumed {
                        id: header.id.clone(),
                        title: saved.title(),
                    }),
                    // The agent goes on in its session; only our record of it is missing.
                    Err(err) => self.ui.error(format!(
                        "{err}; {} continues the session, whose earlier messages are not shown",
                        display::one_line(conversation.name())
                    )),
                }
                true
            }
        }
    }

    /// With the busy lock held: has `conversation` (the running agent) load its session
    /// `session` (`session/load`): what it replays takes a turn's path to the chat (Lua has
    /// cleared it), then `resumed` with `id`, the list's name for it; prompts go to that session
    /// from then on. `:Agent stop` ends the wait.
    async fn load_agent_session(
        &self,
        conversation: &Arc<dyn Conversation>,
        id: &str,
        session: &str,
    ) {
        let token = self.begin_turn();
        let (events, forwarder) = self.ui.turn_path::<ConversationEvent>();
        let events = Events::new(events);
        let forwarder = tokio::spawn(forwarder);
        let loaded = conversation.load(session, &events, &token).await;
        drop(events);
        let _ = forwarder.await;
        self.end_turn();
        match loaded {
            Ok(title) => {
                tracing::info!(name = conversation.name(), "loaded an agent's session");
                let title = if title.is_empty() {
                    session.to_string()
                } else {
                    title
                };
                self.ui.send(UiEvent::Resumed {
                    id: id.to_string(),
                    title,
                });
            }
            Err(err) => {
                // Shown once, and the end of the replayed turn it may have cut short.
                let message = format!("agent: {err}");
                self.ui.error(message.clone());
                self.ui.send(UiEvent::Agent(Event::TurnDone {
                    input: 0,
                    output: 0,
                    outcome: Outcome::Failed,
                    message,
                    cost: None,
                }));
            }
        }
    }
}

/// The agent's own id in `id` (`agent:{name}:{its id}`) when `name` is the running agent's.
pub(super) fn agent_session<'a>(id: &'a str, name: &str) -> Option<&'a str> {
    id.strip_prefix(AGENT_SESSION)?
        .strip_prefix(name)?
        .strip_prefix(':')
        .filter(|session| !session.is_empty())
}

/// The resume list's id for session `session` of agent `name` (`agent:{name}:{session}`).
pub(super) fn agent_session_id(name: &str, session: &str) -> String {
    format!("{AGENT_SESSION}{name}:{session}")
}

/// Whether `id` names an external agent's session rather than one of our saved conversations.
pub(super) fn is_agent_session(id: &str) -> bool {
    id.starts_with(AGENT_SESSION)
}

/// What prompts go to while the agent `name` connects (npx may take a while).
fn starting(name: &str) -> Unavailable {
    Unavailable::new(
        name,
        format!("agent: still starting {name}; send the prompt again in a moment"),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::conversation::fake::Fake;
    use crate::conversation::{AgentSession, ConversationError};
    use crate::front::nvim::bridge::Bridge;
    use crate::front::nvim::protocol::{Decide, Prompt, Resume};
    use agent_nvim_vocab::approval::Decision;
    use agent_nvim_vocab::conversation::AgentUpdate;
    use agent_nvim_vocab::conversation::ConversationEvent;
    use agent_nvim_vocab::events::{Event, Outcome};
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    /// A conversation of either kind as the bridge sees it: reports an update, asks one question
    /// through the bridge's registry, and ends its turn with the answer's option.
    fn scripted(name: &'static str, bridge: &Bridge) -> Fake {
        let bridge = bridge.clone();
        Fake::new(name).on_prompt(move |text, events| {
            let bridge = bridge.clone();
            async move {
                let send = |event| events.send(event).unwrap();
                send(ConversationEvent::Turn(Event::TurnStarted));
                send(ConversationEvent::Agent(AgentUpdate::Thought { text }));
                let (id, answer) = bridge.first().slot.ui.open_question(name);
                bridge.first().slot.ui.ask_lua(UiEvent::decided(
                    id,
                    name.into(),
                    Decision::AllowOnce,
                ));
                let picked = answer.await.unwrap().option.unwrap_or_default();
                send(ConversationEvent::Turn(Event::TurnDone {
                    input: 0,
                    output: 0,
                    outcome: Outcome::Done,
                    message: picked,
                    cost: None,
                }));
                Outcome::Done
            }
        })
    }

    /// An agent that keeps sessions of its own: lists three (one whose id is not plain text),
    /// or fails to; a load reports a replayed prompt and answer.
    fn keeps(fails: bool) -> Fake {
        let session = |id: &str, title: Option<&str>, updated| AgentSession {
            id: id.into(),
            title: title.map(Into::into),
            updated,
        };
        let listed = if fails {
            Err(ConversationError::Agent(crate::conversation::Cause::new(
                "test failed session/list: no\u{1b} (-1)",
            )))
        } else {
            Ok(vec![
                session("a", Some("Fix\u{1b}[2J it"), Some(5)),
                session("b\u{202e}", Some("hidden"), Some(9)),
                session("c", None, None),
            ])
        };
        Fake::new("test")
            .as_agent(listed, None)
            .on_load(move |id, events| async move {
                if fails {
                    return Err(ConversationError::Agent(crate::conversation::Cause::new(
                        "test failed session/load: gone (-32002)",
                    )));
                }
                let send = |event| events.send(event).unwrap();
                send(ConversationEvent::Agent(AgentUpdate::UserMessage {
                    text: "Fix it".into(),
                }));
                send(ConversationEvent::Turn(Event::Text {
                    text: "Fixed.".into(),
                }));
                Ok(format!("title of {id}"))
            })
    }

    #[tokio::test]
    async fn an_agents_sessions_are_rows_marked_with_its_name_and_resuming_one_loads_it() {
        let bridge = Bridge::new(CancellationToken::new());
        let mut ui = bridge.ui_rx.lock().await.take().unwrap();
        let none = HashSet::new();
        assert_eq!(
            bridge
                .first()
                .slot
                .agent_session_rows(&none, 5 + 4 * 60)
                .await,
            vec![]
        );
        bridge.first().slot.switch_to(Arc::new(keeps(false))).await;
        // `c` is saved in a file of ours: that file is its row.
        let noted = HashSet::from([AgentNote {
            agent: "test".into(),
            session: "c".into(),
        }]);
        assert_eq!(
            bridge
                .first()
                .slot
                .agent_session_rows(&noted, 5 + 4 * 60)
                .await
                .len(),
            1
        );
        assert_eq!(
            bridge
                .first()
                .slot
                .agent_session_rows(&none, 5 + 4 * 60)
                .await,
            vec![
                (
                    5,
                    json!({"id": "agent:test:a", "agent": "test", "session": "a",
                        "title": display::one_line("Fix\u{1b}[2J it"), "updated": 5,
                        "age": "4 min ago"})
                ),
                (
                    0,
                    json!({"id": "agent:test:c", "agent": "test", "session": "c", "title": ""})
                ),
            ]
        );
        bridge.first().resume(Resume {
            id: "agent:test:a".into(),
        });
        assert_eq!(
            next(&mut ui).await,
            UiEvent::Update(AgentUpdate::UserMessage {
                text: "Fix it".into()
            })
        );
        assert_eq!(
            next(&mut ui).await,
            UiEvent::Agent(Event::Text {
                text: "Fixed.".into()
            })
        );
        assert_eq!(
            next(&mut ui).await,
            UiEvent::Resumed {
                id: "agent:test:a".into(),
                title: "title of a".into()
            }
        );
        // The conversation is free again: the chat sends what was queued meanwhile.
        assert_eq!(next(&mut ui).await, UiEvent::Idle);
        bridge.first().resume(Resume {
            id: "agent:claude:a".into(),
        });
        assert_eq!(
            next(&mut ui).await,
            UiEvent::error(
                "agent: 'agent:claude:a' is not a session of test; start its agent with :Agent \
                 acp, then resume it"
            )
        );
        assert_eq!(next(&mut ui).await, UiEvent::Idle);
        bridge.first().slot.switch_to(Arc::new(keeps(true))).await;
        assert_eq!(
            bridge
                .first()
                .slot
                .agent_session_rows(&none, 5 + 4 * 60)
                .await,
            vec![(
                0,
                json!({"id": "agent:test", "agent": "test", "title": "",
                    "problem": display::one_line("test failed session/list: no\u{1b} (-1)")})
            )]
        );
        // A failed load is said once, and ends the turn it may have cut short.
        bridge.first().resume(Resume {
            id: "agent:test:a".into(),
        });
        let failed = "agent: test failed session/load: gone (-32002)";
        assert_eq!(next(&mut ui).await, UiEvent::error(failed));
        assert_eq!(
            next(&mut ui).await,
            UiEvent::Agent(Event::TurnDone {
                input: 0,
                output: 0,
                outcome: Outcome::Failed,
                message: failed.into(),
                cost: None,
            })
        );
    }

    /// The next event the bridge hands the pump.
    async fn next(ui: &mut mpsc::UnboundedReceiver<super::super::protocol::Addressed>) -> UiEvent {
        ui.recv().await.unwrap().event
    }

    #[tokio::test]
    async fn while_an_agent_starts_a_prompt_is_answered_still_starting_and_ends_no_turn() {
        let bridge = Bridge::new(CancellationToken::new());
        let mut ui = bridge.ui_rx.lock().await.take().unwrap();
        bridge
            .first()
            .slot
            .switch_to(Arc::new(starting("claude")))
            .await;
        bridge
            .first()
            .prompt(Prompt {
                text: "hi".into(),
                images: Vec::new(),
                branch: None,
                again: false,
            })
            .await;
        assert_eq!(
            next(&mut ui).await,
            UiEvent::error("agent: still starting claude; send the prompt again in a moment")
        );
        bridge.first().slot.idle().await;
        // No turn ran: the chat only hears that the next prompt is taken.
        assert_eq!(next(&mut ui).await, UiEvent::Idle);
        assert!(ui.try_recv().is_err());
    }

    #[tokio::test]
    async fn prompts_go_to_the_one_conversation_held_and_a_switch_ends_the_old_one() {
        let bridge = Bridge::new(CancellationToken::new());
        let mut ui = bridge.ui_rx.lock().await.take().unwrap();
        let scripted = |name| Arc::new(scripted(name, &bridge));
        let (first, second) = (scripted("built-in"), scripted("claude"));
        bridge.first().slot.switch_to(first.clone()).await;
        for (conversation, answer) in [(&first, "a"), (&second, "b")] {
            bridge
                .first()
                .prompt(Prompt {
                    text: conversation.name().into(),
                    images: Vec::new(),
                    branch: None,
                    again: false,
                })
                .await;
            assert_eq!(next(&mut ui).await, UiEvent::Agent(Event::TurnStarted));
            assert_eq!(
                next(&mut ui).await,
                UiEvent::Update(AgentUpdate::Thought {
                    text: conversation.name().into()
                })
            );
            let UiEvent::Decided { id, .. } = next(&mut ui).await else {
                panic!("expected the question");
            };
            bridge
                .decide(Decide {
                    id,
                    decision: Decision::AllowOnce,
                    option: Some(answer.into()),
                    dropped: None,
                    hunks: None,
                })
                .await;
            assert_eq!(
                next(&mut ui).await,
                UiEvent::decided(id, conversation.name().into(), Decision::AllowOnce)
            );
            let UiEvent::Agent(Event::TurnDone { message, .. }) = next(&mut ui).await else {
                panic!("expected the end of the turn");
            };
            assert_eq!(message, answer);
            bridge.first().slot.idle().await;
            assert_eq!(next(&mut ui).await, UiEvent::Idle);
            assert!(!second.ended());
            bridge.first().slot.switch_to(second.clone()).await;
            // Switching to the conversation already held ends nothing.
            assert!(!second.ended());
        }
        assert!(first.ended());
        bridge.first().slot.end_conversation().await;
        assert!(second.ended());
    }
}
