//! The way to Lua every part of the front end that shows something or asks holds: a [`Ui`],
//! not the whole bridge. Each conversation has its own (its events are addressed to its chat,
//! [`Addressed`]); all share one pump, one count of events sent (for [`Shown`]), one registry
//! of open questions (one approval queue, ids from one counter) and what each question offers
//! to edit. A conversation's Ui gives its turn a path (events and questions in order,
//! [`Ui::turn_path`]) and drops only its own questions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};

use rmpv::Value;
use tokio::sync::mpsc;

use super::protocol::{Addressed, Decide, UiEvent};
use super::pump::Shown;
use crate::questions::Questions;
use agent_nvim_vocab::approval::{Action, ApprovalRequest, Proposed};

/// One conversation's handle on the way to Lua; clones share it.
#[derive(Clone)]
pub(super) struct Ui {
    shared: Arc<Shared>,
    /// The conversation this handle speaks for.
    to: u64,
    /// Its running built-in turn's path to Lua for its approval questions ([`Ui::ask_lua`]).
    questions: Arc<SyncMutex<Option<mpsc::UnboundedSender<UiEvent>>>>,
}

struct Shared {
    sender: mpsc::UnboundedSender<Addressed>,
    /// How many events were sent to the pump, and how many it has handed to Lua.
    sent: AtomicU64,
    shown: Arc<Shown>,
    /// Every question waiting for Lua's `decide`, of every conversation: the gate's and an
    /// external agent's.
    pending: Questions<Decide>,
    /// What "Edit before allowing" gives the person to change, by question id, while the
    /// question is open: Lua asks for it (`proposal`) only when the person picks it.
    proposals: SyncMutex<HashMap<u64, Editable>>,
    /// Every inline edit's proposal waiting for the person's `inline_answer`: each hunk's fate.
    inline: Questions<Vec<crate::tools::inline::Kept>>,
    /// Every external agent's elicitation waiting for the person's `elicit_answer`.
    elicitations: Questions<crate::acp::elicit::Elicited>,
}

impl Ui {
    /// A way to Lua for conversation `to`, and the receiving end the pump takes.
    pub(super) fn new(to: u64) -> (Ui, mpsc::UnboundedReceiver<Addressed>) {
        let (sender, received) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            sender,
            sent: AtomicU64::new(0),
            shown: Arc::default(),
            pending: Questions::default(),
            proposals: SyncMutex::new(HashMap::new()),
            inline: Questions::default(),
            elicitations: Questions::default(),
        });
        (Ui::speaking(shared, to), received)
    }

    fn speaking(shared: Arc<Shared>, to: u64) -> Ui {
        Ui {
            shared,
            to,
            questions: Arc::default(),
        }
    }

    /// The same way to Lua, for conversation `to`.
    pub(super) fn for_conversation(&self, to: u64) -> Ui {
        Ui::speaking(self.shared.clone(), to)
    }

    pub(super) fn send(&self, event: UiEvent) {
        let addressed = Addressed { to: self.to, event };
        if self.shared.sender.send(addressed).is_ok() {
            self.shared.sent.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub(super) fn error(&self, message: impl Into<String>) {
        self.send(UiEvent::error(message));
    }

    /// How many events have been sent to the pump so far (see [`Shown`]).
    pub(super) fn sent(&self) -> u64 {
        self.shared.sent.load(Ordering::SeqCst)
    }

    /// How many the pump has handed to Lua.
    pub(super) fn shown(&self) -> &Arc<Shown> {
        &self.shared.shown
    }

    /// The registry of open questions, every conversation's.
    pub(super) fn pending(&self) -> &Questions<Decide> {
        &self.shared.pending
    }

    /// The registry of inline proposals waiting for the person, every conversation's.
    pub(super) fn inline_questions(&self) -> &Questions<Vec<crate::tools::inline::Kept>> {
        &self.shared.inline
    }

    /// The registry of elicitations waiting for the person, every conversation's.
    pub(super) fn elicitations(&self) -> &Questions<crate::acp::elicit::Elicited> {
        &self.shared.elicitations
    }

    /// Opens an elicitation of this conversation.
    pub(super) fn open_elicitation(
        &self,
    ) -> (
        u64,
        tokio::sync::oneshot::Receiver<crate::acp::elicit::Elicited>,
    ) {
        self.shared.elicitations.open(self.to, "elicitation")
    }

    /// Opens an inline proposal's question for this conversation.
    pub(super) fn open_inline(
        &self,
    ) -> (
        u64,
        tokio::sync::oneshot::Receiver<Vec<crate::tools::inline::Kept>>,
    ) {
        self.shared.inline.open(self.to, "inline edit")
    }

    /// Opens a question of this conversation about `about` (see [`Questions::open`]).
    pub(super) fn open_question(
        &self,
        about: impl Into<String>,
    ) -> (u64, tokio::sync::oneshot::Receiver<Decide>) {
        self.shared.pending.open(self.to, about)
    }

    /// The path a turn's events take to Lua: the sender the conversation reports on, and the
    /// task that hands what it reports to the pump. The turn's questions ([`Ui::ask_lua`])
    /// go the same way, so a question never overtakes the `tool_started` reported before it
    /// (the status would say `running` while the picker is open).
    pub(super) fn turn_path<E: Into<UiEvent> + Send + 'static>(
        &self,
    ) -> (
        mpsc::UnboundedSender<E>,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let (events, received) = mpsc::unbounded_channel();
        let (questions, asked) = mpsc::unbounded_channel();
        if let Ok(mut slot) = self.questions.lock() {
            *slot = Some(questions);
        }
        (events, forward(self.clone(), received, asked))
    }

    /// Forgets the finished turn's path for questions.
    pub(super) fn end_turn_path(&self) {
        if let Ok(mut questions) = self.questions.lock() {
            *questions = None;
        }
    }

    /// Sends an approval question to Lua after everything the running turn reported before it.
    pub(super) fn ask_lua(&self, question: UiEvent) {
        let path = self.questions.lock().ok().and_then(|slot| slot.clone());
        match path {
            Some(path) => {
                if let Err(unsent) = path.send(question) {
                    self.send(unsent.0);
                }
            }
            None => self.send(question),
        }
    }

    /// Keeps `editable` for question `id` while it is open (Lua asks for it with `proposal`),
    /// forgotten however the question ends: answered, or dropped by a cancel. Whether there is
    /// one to offer, and the guard that forgets it.
    pub(super) fn offer(&self, id: u64, editable: Option<Editable>) -> (bool, Forget<'_>) {
        let offered = editable.is_some();
        if let (Some(editable), Ok(mut proposals)) = (editable, self.shared.proposals.lock()) {
            proposals.insert(id, editable);
        }
        (offered, Forget { ui: self, id })
    }

    /// What question `id` offers to edit, while it is open.
    pub(super) fn proposal(&self, id: u64) -> Option<Editable> {
        self.shared.proposals.lock().ok()?.get(&id).cloned()
    }

    /// Every open question of this conversation answered (the picker may be closed by the Lua
    /// side) and what they offered forgotten: a cancel. Another conversation's stay open.
    pub(super) fn drop_questions(&self) {
        let dropped = self.shared.pending.clear(self.to);
        if let Ok(mut proposals) = self.shared.proposals.lock() {
            for id in dropped {
                proposals.remove(&id);
            }
        }
    }
}

/// Removes question `id`'s proposal when dropped ([`Ui::offer`]).
pub(super) struct Forget<'a> {
    ui: &'a Ui,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if let Ok(mut proposals) = self.ui.shared.proposals.lock() {
            proposals.remove(&self.id);
        }
    }
}

/// Hands a built-in turn's events to the pump, wrapped for Lua, and its approval questions in
/// their place among them: a question is sent only after every event the turn reported before
/// asking it (its `tool_started` above all), which the turn loop sent first, so those are already
/// waiting when the question arrives. Ends when the turn drops its sender.
async fn forward<E: Into<UiEvent>>(
    ui: Ui,
    mut events: mpsc::UnboundedReceiver<E>,
    mut questions: mpsc::UnboundedReceiver<UiEvent>,
) {
    loop {
        tokio::select! {
            biased;
            event = events.recv() => match event {
                Some(event) => ui.send(event.into()),
                None => break,
            },
            Some(question) = questions.recv() => {
                while let Ok(event) = events.try_recv() {
                    ui.send(event.into());
                }
                ui.send(question);
            }
        }
    }
}

/// What "Edit before allowing" hands Lua for one question ([`protocol::request::PROPOSAL`]).
#[derive(Debug, Clone)]
pub(super) enum Editable {
    /// An edit or a create of `rel`.
    File {
        rel: String,
        now: Option<Arc<str>>,
        proposed: Arc<str>,
    },
    /// A command line.
    Command { command: String },
}

impl Editable {
    /// What `request` lets a person change; None when it cannot be changed.
    pub(super) fn of(request: &ApprovalRequest) -> Option<Editable> {
        match (&request.proposal, &request.action) {
            (Some(Proposed::File { now, proposed }), Action::Edit { rel }) => {
                Some(Editable::File {
                    rel: crate::display::one_line(rel),
                    now: now.clone(),
                    proposed: proposed.clone(),
                })
            }
            (Some(Proposed::Command), Action::Command { command }) => Some(Editable::Command {
                command: command.clone(),
            }),
            _ => None,
        }
    }

    /// The map Lua reads.
    pub(super) fn to_msgpack(&self) -> Value {
        let pair = |k: &str, v: &str| (Value::from(k), Value::from(v));
        match self {
            Editable::File { rel, now, proposed } => {
                let mut map = vec![
                    pair("kind", "file"),
                    pair("rel", rel),
                    pair("proposed", proposed),
                ];
                if let Some(now) = now {
                    map.push(pair("now", now));
                }
                Value::Map(map)
            }
            Editable::Command { command } => {
                Value::Map(vec![pair("kind", "command"), pair("command", command)])
            }
        }
    }
}
