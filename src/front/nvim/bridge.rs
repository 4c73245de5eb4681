//! The bridge: the nvim-rs handler. It decodes each message ([`super::protocol::method`]),
//! finds the conversation it is addressed to (its `conversation` field: a [`Target`]) and hands
//! it off. It holds every live conversation's slot ([`Slots`]), and answers what belongs to no
//! one conversation: `decide` and `proposal` (a question knows its conversation), `version`.

use std::sync::Arc;

use async_trait::async_trait;
use nvim_rs::compat::tokio::Compat;
use nvim_rs::Handler;
use rmpv::Value;
use tokio::sync::{mpsc, Mutex};
use tokio_util::sync::CancellationToken;

use super::protocol::Addressed;
use super::protocol::{self, method, Decide, UiEvent};
use super::slot::Slots;
use super::target::Target;
use super::ui::Ui;
use super::Nvim;
use agent_nvim_vocab::approval::Decision;

/// The nvim-rs handler: decodes each message and hands it off to the conversation it is for.
#[derive(Clone)]
pub struct Bridge {
    /// Every live conversation, by the number Lua gave it.
    pub(super) slots: Arc<Slots>,
    /// What the pump takes: the receiving end of every conversation's way to Lua, until the
    /// pump starts.
    pub(super) ui_rx: Arc<Mutex<Option<mpsc::UnboundedReceiver<Addressed>>>>,
    /// Shared by every conversation's `files` queries (see [`Target`]).
    files_latest: Arc<std::sync::atomic::AtomicU64>,
}

impl Bridge {
    pub(super) fn new(shutdown: CancellationToken) -> Self {
        let (ui, ui_rx) = Ui::new(0);
        Bridge {
            slots: Arc::new(Slots::new(ui, shutdown)),
            ui_rx: Arc::new(Mutex::new(Some(ui_rx))),
            files_latest: Arc::default(),
        }
    }

    /// The way to Lua shared by every conversation (for the pump's count of events shown).
    pub(super) fn ui(&self) -> &Ui {
        self.slots.ui()
    }

    /// Conversation `to`, when it was started.
    pub(super) fn target(&self, to: u64) -> Option<Target> {
        self.slots.get(to).map(|slot| self.aim(slot))
    }

    fn aim(&self, slot: Arc<super::slot::Slot>) -> Target {
        Target {
            slot,
            slots: self.slots.clone(),
            files_latest: self.files_latest.clone(),
        }
    }

    /// `decide`: the answer goes to whoever asked question `id`, and is recorded in the
    /// conversation that asked it, whichever chat is shown.
    pub(super) async fn decide(&self, decide: Decide) {
        let decide = match self.kept_hunks(decide) {
            Ok(decide) => decide,
            // The picker has closed: never a silent yes, so the question is refused, saying why.
            Err((owner, mut decide, message)) => {
                self.ui().for_conversation(owner).error(message.clone());
                decide.decision = Decision::Refuse {
                    reason: Some(message),
                };
                // An external agent is answered by the option picked: none is a refusal.
                decide.option = None;
                decide
            }
        };
        // An unknown or late id is logged by the registry and ignored.
        if let Some(waiter) = self.ui().pending().take(decide.id) {
            // The chat and the saved conversation record that it was edited, not the person's
            // whole file again: the tool's result says what they changed.
            let recorded = match &decide.decision {
                Decision::Edited { .. } => Decision::Edited {
                    text: String::new(),
                },
                other => other.clone(),
            };
            let decided = UiEvent::decided(decide.id, waiter.about.clone(), recorded.clone());
            let asker = self.slots.get(waiter.owner);
            if let (UiEvent::Decided { tool, note, .. }, Some(asker)) = (&decided, &asker) {
                let conversation = asker.conversation.lock().await.clone();
                if let Some(conversation) = conversation {
                    conversation.decided(tool, &recorded, note);
                }
            }
            self.ui().for_conversation(waiter.owner).send(decided);
            waiter.answer(decide);
        }
    }

    /// An allow-once with hunks dropped becomes the edit with only the others (the
    /// person's version, as "Edit before allowing" gives it), from the question's proposal;
    /// every hunk dropped is a refusal. Err (the asking conversation, the answer, why) when the
    /// hunks are not the ones the preview showed, or the question offers none to drop.
    #[allow(clippy::result_large_err)]
    fn kept_hunks(&self, mut decide: Decide) -> std::result::Result<Decide, (u64, Decide, String)> {
        let dropped = decide.dropped.take().unwrap_or_default();
        if dropped.is_empty() {
            return Ok(decide);
        }
        let owner = self.ui().pending().owner(decide.id).unwrap_or(1);
        let refuse = |decide: Decide, why: &str| {
            Err((owner, decide, format!("agent: nothing was written: {why}")))
        };
        if decide.decision != Decision::AllowOnce {
            return refuse(decide, "hunks can be dropped only when allowing once");
        }
        let Some(super::ui::Editable::File { rel, now, proposed }) = self.ui().proposal(decide.id)
        else {
            return refuse(decide, "this request has no diff to drop hunks from");
        };
        let (_, hunks) = crate::diff::unified_hunks(&rel, now.as_deref(), &proposed);
        if decide.hunks != Some(hunks.len()) || dropped.iter().any(|i| *i >= hunks.len()) {
            return refuse(decide, "the hunks are not the ones the preview showed");
        }
        decide.decision = if dropped.len() == hunks.len() {
            // Not the agent's allow option either: nothing of the edit is to be written.
            decide.option = None;
            Decision::Refuse {
                reason: Some("the person dropped every hunk of this edit".into()),
            }
        } else {
            let before = now.as_deref().unwrap_or("");
            Decision::Edited {
                text: crate::diff::apply(before, &proposed, &hunks, |i| !dropped.contains(&i)),
            }
        };
        Ok(decide)
    }

    /// `proposal`: what the open question `{id}` lets the person change.
    fn proposal(&self, args: &[Value]) -> std::result::Result<Value, Value> {
        let id = match args.first() {
            Some(Value::Map(opts)) => opts
                .iter()
                .find(|(k, _)| k.as_str() == Some("id"))
                .and_then(|(_, v)| v.as_u64()),
            _ => None,
        };
        let found = id.and_then(|id| self.ui().proposal(id));
        match found {
            Some(editable) => Ok(editable.to_msgpack()),
            None => Err(Value::from(
                "agent: this request can no longer be edited (it was answered or cancelled)",
            )),
        }
    }

    /// `conversations`: every live conversation's age.
    fn ages(&self) -> Value {
        let now = crate::display::now();
        Value::Array(
            self.slots
                .all()
                .iter()
                .map(|slot| {
                    Value::Map(vec![
                        (Value::from("conversation"), Value::from(slot.id)),
                        (
                            Value::from("age"),
                            Value::from(crate::display::age_at(slot.started, now)),
                        ),
                    ])
                })
                .collect(),
        )
    }

    /// `close`: conversation `to`'s turn stopped, its agent ended, and its slot let go.
    fn close(&self, to: u64) {
        let Some(slot) = self.slots.close(to) else {
            return;
        };
        slot.cancel_turn();
        slot.stop_inlines();
        tokio::spawn(async move {
            slot.idle().await;
            slot.end_conversation().await;
            tracing::info!(conversation = to, "a conversation was closed");
        });
    }
}

/// The conversation a message is addressed to: its `conversation` field (1 when it has none:
/// the first one).
fn addressed_to(args: &[Value]) -> u64 {
    match args.first() {
        Some(Value::Map(fields)) => fields
            .iter()
            .find(|(k, _)| k.as_str() == Some("conversation"))
            .and_then(|(_, v)| v.as_u64())
            .unwrap_or(1),
        _ => 1,
    }
}

#[async_trait]
impl Handler for Bridge {
    type Writer = Compat<super::channel::End>;

    async fn handle_notify(&self, name: String, args: Vec<Value>, nvim: Nvim) {
        tracing::debug!(%name, "notification");
        let to = addressed_to(&args);
        match name.as_str() {
            method::DECIDE => match protocol::arg::<Decide>(args) {
                Ok(decide) => self.decide(decide).await,
                Err(err) => tracing::warn!(%err, "bad decide message"),
            },
            method::INLINE_ANSWER => match protocol::arg::<protocol::InlineAnswer>(args) {
                Ok(answer) => {
                    // An unknown or late question is logged by the registry and ignored; words
                    // it does not know make an answer about no hunk: nothing is applied.
                    let kept = answer.kept().unwrap_or_default();
                    if let Some(waiter) = self.ui().inline_questions().take(answer.question) {
                        waiter.answer(kept);
                    }
                }
                Err(err) => tracing::warn!(%err, "bad inline_answer message"),
            },
            method::ELICIT_ANSWER => match protocol::arg::<protocol::ElicitAnswer>(args) {
                Ok(answer) => {
                    let question = answer.question;
                    // An action it does not know is a cancel; a late answer is logged and
                    // ignored by the registry.
                    let elicited = answer
                        .elicited()
                        .unwrap_or(crate::acp::elicit::Elicited::Cancel);
                    if let Some(waiter) = self.ui().elicitations().take(question) {
                        waiter.answer(elicited);
                    }
                }
                Err(err) => tracing::warn!(%err, "bad elicit_answer message"),
            },
            method::CLOSE => self.close(to),
            method::START => match self.slots.open(to) {
                Some(slot) => self.aim(slot).notify(&name, args, nvim).await,
                None => self.ui().for_conversation(to).error(format!(
                    "agent: {} conversations are live, the most one Neovim holds; close one (:Agent close) first",
                    super::slot::MAX_CONVERSATIONS
                )),
            },
            _ => match self.target(to) {
                Some(target) => target.notify(&name, args, nvim).await,
                // Stopping or starting over a conversation that never started changes nothing.
                None if matches!(name.as_str(), method::CANCEL | method::NEW) => {}
                // A completion waits for its answer: it gets one.
                None if name == method::FILES => {
                    if let Ok(files) = protocol::arg::<protocol::Files>(args) {
                        let found = Value::Map(vec![(Value::from("error"), Value::from(NOT_STARTED))]);
                        tokio::spawn(async move {
                            let answer = vec![Value::from(files.seq), found];
                            if let Err(err) = nvim.exec_lua(protocol::lua::FILES_FOUND, answer).await {
                                tracing::warn!(%err, "Lua did not take the files found");
                            }
                        });
                    }
                }
                None => self.ui().for_conversation(to).error(NOT_STARTED),
            },
        }
    }

    async fn handle_request(
        &self,
        name: String,
        args: Vec<Value>,
        nvim: Nvim,
    ) -> std::result::Result<Value, Value> {
        match name.as_str() {
            protocol::request::VERSION => Ok(Value::from(env!("CARGO_PKG_VERSION"))),
            protocol::request::PROPOSAL => self.proposal(&args),
            protocol::request::CONVERSATIONS => Ok(self.ages()),
            _ => match self.target(addressed_to(&args)) {
                Some(target) => target.request(&name, args, nvim).await,
                None => Err(Value::from(NOT_STARTED)),
            },
        }
    }
}

#[cfg(test)]
impl Bridge {
    /// Conversation 1, its slot made (no session: `start` was not sent), for a test.
    #[allow(clippy::expect_used)]
    pub(super) fn first(&self) -> Target {
        self.aim(self.slots.open(1).expect("room for one conversation"))
    }
}

/// What a message for a conversation that was not started is answered.
pub(super) const NOT_STARTED: &str = "agent: the backend was not started; run :Agent again";

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::replay::Replay;
    use super::*;
    use crate::conversation::fake::Fake;
    use crate::conversation::Events;
    use crate::conversation::{Conversation, Unavailable};
    use crate::front::nvim::protocol::{arg, Prompt, Rewind, Start};
    use crate::front::nvim::target::rewind_points;
    use crate::sessions::Recorded;
    use crate::sessions::Store;
    use crate::sessions::{self, Record};
    use crate::workspace::Workspace;
    use agent_nvim_vocab::approval::Decision;
    use agent_nvim_vocab::conversation::ConversationEvent;
    use agent_nvim_vocab::events::Event;
    use agent_nvim_vocab::events::Outcome;
    use std::time::Duration;

    #[tokio::test]
    async fn rewind_points_reach_lua_as_rows_newest_first_and_say_when_checkpoints_are_off() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let checkpoints = crate::checkpoint::Checkpoints::new(
            state.path(),
            Workspace::new(ws.path()).unwrap(),
            "c1".into(),
        );
        use crate::checkpoint::Kind;
        checkpoints.snapshot(Kind::Prompt, "first").await.unwrap();
        std::fs::write(ws.path().join("a.txt"), "a\n").unwrap();
        // A key the person pasted into a prompt is redacted in the list as in the chat.
        let key = "sk-rewind-test-0123456789abcdef";
        crate::secrets::protect(key);
        checkpoints
            .snapshot(Kind::Prompt, &format!("second {key}"))
            .await
            .unwrap();
        let listed = rewind_points(Some(&checkpoints), 0).await.unwrap();
        assert!(!format!("{listed:?}").contains(key), "{listed:?}");
        // Nor is it kept in the shadow repository's commit.
        let subjects = checkpoints.list("c1").await.unwrap();
        assert!(
            subjects.iter().all(|c| !c.label.contains(key)),
            "{subjects:?}"
        );
        let rows: Vec<(u64, String)> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|point| {
                let field = |name| crate::test_support::nvim::field(point, name).unwrap();
                (
                    field("turn").as_u64().unwrap(),
                    field("row").as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (
                    2,
                    format!(
                        "2 · second {} · 0 files changed · just now",
                        crate::secrets::REDACTED
                    )
                ),
                (1, "1 · first · 1 file changed · just now".to_string()),
            ]
        );
        assert_eq!(
            rewind_points(None, 0).await,
            Err(Value::from(
                "agent: checkpoints are off (no state directory), so there is nothing to rewind to"
            ))
        );
    }

    #[tokio::test]
    async fn a_replayed_cut_reaches_the_chat_numbered_as_the_history_was_and_a_busy_turn_refuses_a_rewind(
    ) {
        let bridge = Bridge::new(CancellationToken::new());
        let mut ui = bridge.ui_rx.lock().await.take().unwrap();
        let user = |text: &str| sessions::Saved::User {
            text: text.into(),
            images: Vec::new(),
        };
        let answer = || sessions::Saved::Assistant {
            text: "ok".into(),
            calls: vec![],
            reasoning: Vec::new(),
        };
        let prompt = |text: &str| Record::Prompt { text: text.into() };
        let model = |messages| Record::Model { messages };
        let saved = sessions::Conversation {
            images: None,
            header: sessions::Header {
                agent_nvim_session: sessions::FORMAT,
                id: "20261201-000000-0000".into(),
                workspace: "/w".into(),
                created: "2026-12-01T00:00:00Z".into(),
                conversation: "built-in".into(),
            },
            records: vec![
                prompt("one"),
                model(vec![user("one"), answer()]),
                prompt("two"),
                model(vec![user("two"), answer()]),
                prompt("three"),
                model(vec![user("three"), answer()]),
                // Cut to before "two", then "two again" is prompt 2, then cut to before it.
                Record::Rewound { kept: 2 },
                prompt("two again"),
                model(vec![user("two again"), answer()]),
                Record::Rewound { kept: 2 },
            ],
        };
        let mut replay = Replay::default();
        let cuts: Vec<UiEvent> = saved
            .records
            .iter()
            .flat_map(|record| replay.events(record))
            .filter(|event| matches!(event, UiEvent::Rewound { .. }))
            .collect();
        let cut = |turn| UiEvent::Rewound {
            turn,
            cut: true,
            message: None,
            prompt: None,
        };
        assert_eq!(cuts, [cut(2), cut(2)]);

        let running = bridge.first().slot.busy.clone().try_lock_owned().unwrap();
        bridge.first().rewind(Rewind {
            turn: 1,
            mode: protocol::RewindMode::Both,
            others: None,
        });
        assert_eq!(
            handed_on(&mut ui),
            [UiEvent::error(
                "agent: a turn is running; wait for it or cancel it (:Agent stop) before rewinding"
            )]
        );
        drop(running);
    }

    #[tokio::test]
    async fn a_prompt_that_finds_the_conversation_busy_waits_and_a_stop_meanwhile_cancels_it() {
        let bridge = Bridge::new(CancellationToken::new());
        let mut ui = bridge.ui_rx.lock().await.take().unwrap();
        let running = bridge.first().slot.busy.clone().try_lock_owned().unwrap();
        bridge
            .first()
            .prompt(protocol::Prompt {
                text: "typed during a resume".into(),
                images: Vec::new(),
                branch: None,
                again: false,
            })
            .await;
        // Not refused: nothing is said while it waits.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(handed_on(&mut ui), []);
        // :Agent stop meanwhile: when the conversation is free it ends as cancelled, unsent.
        bridge.first().slot.cancel_turn();
        drop(running);
        let ended = [
            ui.recv().await.unwrap().event,
            ui.recv().await.unwrap().event,
        ];
        assert_eq!(
            ended,
            [
                UiEvent::Agent(agent_nvim_vocab::events::Event::TurnDone {
                    input: 0,
                    output: 0,
                    outcome: agent_nvim_vocab::events::Outcome::Cancelled,
                    message: "cancelled".into(),
                    cost: None,
                }),
                UiEvent::Idle
            ]
        );
        // Without a stop it goes on once the conversation is free (here: none was started).
        let running = bridge.first().slot.busy.clone().try_lock_owned().unwrap();
        bridge
            .first()
            .prompt(protocol::Prompt {
                text: "waits".into(),
                images: Vec::new(),
                branch: None,
                again: false,
            })
            .await;
        drop(running);
        assert_eq!(
            ui.recv().await.unwrap().event,
            UiEvent::error("agent: the backend was not started; run :Agent again")
        );
    }

    /// What the bridge has handed the pump so far.
    pub(super) fn handed_on(ui: &mut mpsc::UnboundedReceiver<Addressed>) -> Vec<UiEvent> {
        std::iter::from_fn(|| ui.try_recv().ok().map(|sent| sent.event)).collect()
    }
    #[tokio::test(flavor = "current_thread")]
    pub(super) async fn an_approval_reaches_lua_after_the_events_the_turn_reported_before_asking() {
        let bridge = Bridge::new(CancellationToken::new());
        let mut ui = bridge.ui_rx.lock().await.take().unwrap();
        let started = |id: &str| {
            UiEvent::Agent(Event::ToolStarted {
                id: id.into(),
                name: "run_bash".into(),
                args: serde_json::json!({"command": "ls"}),
            })
        };
        let question = |id: u64| UiEvent::decided(id, "run_bash".into(), Decision::AllowOnce);
        let report = |events: &mpsc::UnboundedSender<Event>, event: UiEvent| match event {
            UiEvent::Agent(event) => events.send(event).unwrap(),
            other => panic!("{other:?}"),
        };
        // The forwarder has not run yet when the turn reports and then asks.
        let (events, forwarder) = bridge.first().slot.ui.turn_path();
        report(&events, started("t1"));
        bridge.first().slot.ui.ask_lua(question(1));
        let forwarder = tokio::spawn(forwarder);
        tokio::task::yield_now().await;
        assert_eq!(handed_on(&mut ui), vec![started("t1"), question(1)]);
        // The forwarder is waiting when both arrive.
        report(&events, started("t2"));
        bridge.first().slot.ui.ask_lua(question(2));
        tokio::task::yield_now().await;
        assert_eq!(handed_on(&mut ui), vec![started("t2"), question(2)]);
        drop(events);
        forwarder.await.unwrap();
        // With no turn running, a question goes straight to the pump.
        bridge.first().slot.end_turn();
        bridge.first().slot.ui.ask_lua(question(3));
        assert_eq!(handed_on(&mut ui), vec![question(3)]);
    }
    #[tokio::test]
    async fn a_decision_is_recorded_in_the_conversation_it_was_asked_in() {
        let bridge = Bridge::new(CancellationToken::new());
        let mut ui = bridge.ui_rx.lock().await.take().unwrap();
        let state = tempfile::tempdir().unwrap();
        let store = Store::new(state.path(), std::path::Path::new("/w"));
        let recorded = Arc::new(Recorded::new(
            Arc::new(Unavailable::new("built-in", "agent: no provider")),
            store.clone(),
        ));
        // A prompt creates its file.
        let (events, _seen) = mpsc::unbounded_channel();
        recorded
            .prompt("hi".into(), &Events::new(events), &CancellationToken::new())
            .await;
        *bridge.first().slot.conversation.lock().await = Some(recorded.clone());
        let (id, answer) = bridge.first().slot.ui.open_question("run_bash");
        bridge
            .decide(Decide {
                id,
                decision: Decision::Refuse {
                    reason: Some("not now".into()),
                },
                option: None,
                dropped: None,
                hunks: None,
            })
            .await;
        assert!(answer.await.is_ok());
        assert!(matches!(handed_on(&mut ui)[..], [UiEvent::Decided { .. }]));
        recorded.flush();
        let saved = store.load(&recorded.id().unwrap()).unwrap();
        assert_eq!(
            saved.records.last(),
            Some(&Record::Decided {
                tool: "run_bash".into(),
                decision: Decision::Refuse {
                    reason: Some("not now".into())
                },
                note: crate::display::decision_note(&Decision::Refuse {
                    reason: Some("not now".into())
                }),
            })
        );
    }

    /// A conversation that reports its name, asks one question through its own slot's way to
    /// Lua, and ends its turn with the option it was answered.
    fn asking(name: &'static str, slot: Arc<super::super::slot::Slot>) -> Fake {
        Fake::new(name).on_prompt(move |_, events| {
            let slot = slot.clone();
            async move {
                let send = |event| events.send(event).unwrap();
                send(ConversationEvent::Turn(Event::Text { text: name.into() }));
                let (id, answer) = slot.ui.open_question(name);
                slot.ui
                    .ask_lua(UiEvent::decided(id, name.into(), Decision::AllowOnce));
                let picked = match answer.await {
                    Ok(decide) => decide.option.unwrap_or_default(),
                    Err(_) => "dropped".into(),
                };
                send(ConversationEvent::Turn(Event::Text { text: picked }));
                Outcome::Done
            }
        })
    }

    #[tokio::test]
    async fn two_conversations_run_at_once_each_heard_in_its_own_chat_and_a_stop_ends_only_its_own()
    {
        let bridge = Bridge::new(CancellationToken::new());
        let mut ui = bridge.ui_rx.lock().await.take().unwrap();
        let one = bridge.aim(bridge.slots.open(1).unwrap());
        let two = bridge.aim(bridge.slots.open(2).unwrap());
        let (fix, docs) = (
            Arc::new(asking("fix tests", one.slot.clone())),
            Arc::new(asking("write docs", two.slot.clone())),
        );
        one.slot.switch_to(fix.clone()).await;
        two.slot.switch_to(docs.clone()).await;
        let prompt = || Prompt {
            text: "go".into(),
            images: Vec::new(),
            branch: None,
            again: false,
        };
        one.prompt(prompt()).await;
        two.prompt(prompt()).await;
        // Both turns run: each one's text and question come addressed to its own chat.
        let mut questions = std::collections::BTreeMap::new();
        let mut heard = Vec::new();
        while questions.len() < 2 {
            let Addressed { to, event } = ui.recv().await.unwrap();
            match event {
                UiEvent::Decided { id, tool, .. } => {
                    questions.insert(to, (id, tool));
                }
                UiEvent::Agent(Event::Text { text }) => heard.push((to, text)),
                other => panic!("{other:?}"),
            }
        }
        heard.sort();
        assert_eq!(
            heard,
            [(1, "fix tests".to_string()), (2, "write docs".to_string())]
        );
        assert_eq!(questions[&1].1, "fix tests");
        assert_eq!(questions[&2].1, "write docs");
        // Stopping conversation 1 drops its question, never conversation 2's.
        one.slot.cancel_turn();
        let mut ended = Vec::new();
        while ended.len() < 2 {
            let Addressed { to, event } = ui.recv().await.unwrap();
            match event {
                UiEvent::Agent(Event::Text { text }) => ended.push((to, text)),
                UiEvent::Idle => ended.push((to, "idle".into())),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(ended, [(1, "dropped".into()), (1, "idle".into())]);
        assert!(
            bridge.ui().proposal(questions[&2].0).is_none()
                && bridge.ui().pending().take(questions[&1].0).is_none()
        );
        // Conversation 2's question is still open: its answer is said in its own chat, and
        // its turn goes on with it.
        bridge
            .decide(Decide {
                id: questions[&2].0,
                decision: Decision::AllowOnce,
                option: Some("allowed".into()),
                dropped: None,
                hunks: None,
            })
            .await;
        let Addressed { to, event } = ui.recv().await.unwrap();
        assert_eq!(
            (to, event),
            (
                2,
                UiEvent::decided(questions[&2].0, "write docs".into(), Decision::AllowOnce)
            )
        );
        let Addressed { to, event } = ui.recv().await.unwrap();
        assert_eq!(
            (to, event),
            (
                2,
                UiEvent::Agent(Event::Text {
                    text: "allowed".into()
                })
            )
        );
        two.slot.idle().await;
        // Closing conversation 2 ends its agent and forgets it; a prompt for it afterwards, or
        // for one never started, is told so in that chat.
        bridge.close(2);
        tokio::time::timeout(Duration::from_secs(5), async {
            while !docs.ended() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
        assert!(!fix.ended());
        assert!(bridge.target(2).is_none() && bridge.target(1).is_some());
    }

    #[tokio::test]
    async fn a_message_for_a_conversation_never_started_is_answered_in_its_chat() {
        let bridge = Bridge::new(CancellationToken::new());
        let mut ui = bridge.ui_rx.lock().await.take().unwrap();
        assert_eq!(
            addressed_to(&[Value::Map(vec![
                (Value::from("conversation"), Value::from(7)),
                (Value::from("text"), Value::from("hi")),
            ])]),
            7
        );
        assert_eq!(addressed_to(&[Value::Map(vec![])]), 1);
        // What the handler does with a prompt for conversation 7, which was never started.
        match bridge.target(7) {
            Some(_) => panic!("conversation 7 was never started"),
            None => bridge.ui().for_conversation(7).error(NOT_STARTED),
        }
        let Addressed { to, event } = ui.recv().await.unwrap();
        assert_eq!((to, event), (7, UiEvent::error(NOT_STARTED)));
        // No more than MAX_CONVERSATIONS are held.
        for id in 1..=super::super::slot::MAX_CONVERSATIONS as u64 {
            assert!(bridge.slots.open(id).is_some());
        }
        assert!(bridge.slots.open(1000).is_none());
        assert!(bridge.slots.open(1).is_some(), "an open one is found again");
    }

    #[tokio::test]
    async fn allowing_once_with_a_hunk_dropped_writes_the_others_and_a_mismatch_is_refused() {
        let bridge = Bridge::new(CancellationToken::new());
        let mut ui = bridge.ui_rx.lock().await.take().unwrap();
        let one = bridge.first();
        let now: String = (1..=30).map(|i| format!("{i}\n")).collect();
        let proposed = now.replace("\n2\n", "\ntwo\n").replace("\n28\n", "\nX\n");
        // A question about that edit, offering it to change.
        let ask = || {
            let (id, answer) = one.slot.ui.open_question("edit_file");
            let editable = super::super::ui::Editable::File {
                rel: "n.txt".into(),
                now: Some(now.clone().into()),
                proposed: proposed.clone().into(),
            };
            let (_, forget) = one.slot.ui.offer(id, Some(editable));
            std::mem::forget(forget);
            (id, answer)
        };
        let (id, answer) = ask();
        let decide = |dropped: Vec<usize>, hunks| Decide {
            id,
            decision: Decision::AllowOnce,
            option: None,
            dropped: Some(dropped),
            hunks: Some(hunks),
        };
        // The second dropped: the edit is the first hunk alone.
        bridge.decide(decide(vec![1], 2)).await;
        let answered = answer.await.unwrap();
        assert_eq!(
            answered.decision,
            Decision::Edited {
                text: now.replace("\n2\n", "\ntwo\n")
            }
        );
        // A preview that showed three hunks where there are two: never a silent yes, the
        // question is refused, and the chat says why.
        let (id, answer) = ask();
        let _ = handed_on(&mut ui);
        bridge
            .decide(Decide {
                id,
                ..decide(vec![1], 3)
            })
            .await;
        let said = "agent: nothing was written: the hunks are not the ones the preview showed";
        assert_eq!(handed_on(&mut ui)[0], UiEvent::error(said));
        assert_eq!(
            answer.await.unwrap().decision,
            Decision::Refuse {
                reason: Some(said.into())
            }
        );
    }

    #[test]
    pub(super) fn messages_from_lua_decode_from_msgpack_maps() {
        let start = Value::Map(vec![
            (Value::from("workspace"), Value::from("/w")),
            (Value::from("auto_approve"), Value::from(true)),
            (Value::from("command_timeout"), Value::from(30)),
            (Value::from("provider"), Value::Nil),
        ]);
        let start: Start = arg(vec![start]).unwrap();
        assert_eq!(
            (
                start.workspace.as_str(),
                start.auto_approve,
                start.command_timeout
            ),
            ("/w", true, Some(30.0))
        );
        let decide = Value::Map(vec![
            (Value::from("id"), Value::from(7)),
            (Value::from("decision"), Value::from("refuse")),
            (Value::from("reason"), Value::from("not now")),
        ]);
        let decide: Decide = arg(vec![decide]).unwrap();
        assert_eq!(
            decide,
            Decide {
                id: 7,
                decision: Decision::Refuse {
                    reason: Some("not now".into())
                },
                option: None,
                dropped: None,
                hunks: None,
            }
        );
    }
}
