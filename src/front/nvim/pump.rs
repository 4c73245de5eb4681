//! The pump: the one task that sends Lua what turns produce, in batches at most once a frame
//! (a flood, such as a resumed conversation, in bounded batches back to back), each event made
//! visible and redacted on the way ([`for_lua`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmpv::Value;
use tokio::sync::mpsc;

use super::protocol::{lua, Addressed, UiEvent};
use super::Nvim;
use crate::display::{self, Layout};
use agent_nvim_vocab::conversation::ConversationEvent;
use agent_nvim_vocab::events::{Event, Outcome};

/// How long the pump gathers events before it sends a batch: 33 a second. Each batch costs
/// Neovim a redraw however little it holds (doc/decisions/0012-pump-one-batch-a-frame.md), so a slow stream is not
/// sent at a screen's 60; a fast one fills its batches sooner and goes out as fast as Lua takes
/// it.
pub(super) const FRAME: Duration = Duration::from_millis(30);

impl From<Event> for UiEvent {
    fn from(event: Event) -> Self {
        UiEvent::Agent(with_prefix(event))
    }
}

impl From<ConversationEvent> for UiEvent {
    fn from(event: ConversationEvent) -> Self {
        match event {
            ConversationEvent::Turn(event) => UiEvent::Agent(with_prefix(event)),
            ConversationEvent::Agent(update) => UiEvent::Update(update),
        }
    }
}

/// What went wrong, as a front end says it: the lower crates say what happened, the chat adds
/// `agent: ` ([`crate::display::said`]).
fn with_prefix(mut event: Event) -> Event {
    if let Event::Error { message }
    | Event::TurnDone {
        outcome: Outcome::Failed,
        message,
        ..
    } = &mut event
    {
        *message = crate::display::said(std::mem::take(message));
    }
    event
}

/// The most events, and roughly the most bytes of text, one batch carries: Lua shows a full one
/// in a few milliseconds, so Neovim still answers its other requests between two of them.
/// Events are counted as Lua gets them, consecutive text joined ([`join_text`]): a burst of
/// small deltas is one event, bounded by its bytes, so a backlog of 1,000 deltas waiting while
/// Neovim was busy goes out in one batch, not in many round trips.
pub(super) const BATCH_EVENTS: usize = 120;
pub(super) const BATCH_BYTES: usize = 80 * 1024;

/// How many events the pump has handed to Lua so far, for a task that must wait until the chat
/// shows what it sent ([`Shown::reach`]).
#[derive(Default)]
pub(super) struct Shown {
    count: AtomicU64,
    changed: tokio::sync::Notify,
}

impl Shown {
    fn add(&self, events: u64) {
        self.count.fetch_add(events, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Resolves once Lua has taken the first `events` events ever sent.
    pub(super) async fn reach(&self, events: u64) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.count.load(Ordering::SeqCst) >= events {
                return;
            }
            changed.await;
        }
    }
}

/// Keeps a sender of many events (a resume) at most `ahead` events ahead of Lua: before each
/// event, [`Pace::wait`] waits until Lua has taken all but `ahead` of those sent. A Lua that
/// takes nothing for [`PACE_GIVE_UP`] (Neovim busy in a `:!` command, or suspended) is sent
/// the next events unpaced, so a stuck chat cannot hold the sender for ever, until it has
/// caught up again.
pub(super) struct Pace {
    ahead: u64,
    paced: bool,
}

/// See [`Pace`].
const PACE_GIVE_UP: Duration = Duration::from_secs(2);

impl Pace {
    pub(super) fn new(ahead: u64) -> Pace {
        Pace { ahead, paced: true }
    }

    /// Waits before the event after the first `sent` ones is sent.
    pub(super) async fn wait(&mut self, shown: &Shown, sent: u64) {
        let taken = sent.saturating_sub(self.ahead);
        if !self.paced {
            // Paced again once Lua is within `ahead` again.
            self.paced = shown.count.load(Ordering::SeqCst) >= taken;
            return;
        }
        self.paced = tokio::time::timeout(PACE_GIVE_UP, shown.reach(taken))
            .await
            .is_ok();
    }
}

/// Sends Lua the events in batches, at most one a frame, with consecutive text joined, in one
/// `exec_lua` call. An approval is sent at once. A full batch ([`BATCH_EVENTS`], [`BATCH_BYTES`])
/// is followed by the next at once: a flood goes out as fast as Lua takes it, each `exec_lua`
/// awaited, so requests from elsewhere are answered between two batches. The next batch is
/// gathered and turned into msgpack while Lua shows the current one.
pub(super) async fn pump(
    nvim: Nvim,
    events: Option<mpsc::UnboundedReceiver<Addressed>>,
    shown: std::sync::Arc<Shown>,
) {
    let Some(mut events) = events else {
        return;
    };
    // One batch ready while another is with Lua, with how many events it holds.
    let (ready, mut to_send) = mpsc::channel::<(Vec<Value>, u64)>(1);
    let gathering = async move {
        // The frame is counted from the last batch: an event after a quiet spell goes out at
        // once, a stream of them goes out at most once a frame.
        let mut last_send = tokio::time::Instant::now() - FRAME;
        let mut full = false;
        while let Some(first) = events.recv().await {
            let deadline = if full {
                tokio::time::Instant::now()
            } else {
                last_send + FRAME
            };
            let batch;
            (batch, full) = gather(first, &mut events, deadline).await;
            last_send = tokio::time::Instant::now();
            let count = batch.len() as u64;
            if ready.send((addressed_for_lua(batch), count)).await.is_err() {
                break;
            }
        }
    };
    let sending = async move {
        while let Some((values, count)) = to_send.recv().await {
            if let Err(err) = nvim
                .exec_lua(lua::RECEIVE, vec![Value::Array(values)])
                .await
            {
                tracing::warn!(%err, "Lua did not take a batch of events");
            }
            shown.add(count);
        }
    };
    tokio::join!(gathering, sending);
}

/// What the pump gathers: an event, addressed to a conversation's chat or not.
trait Batched {
    fn event(&self) -> &UiEvent;
    /// Whether `self` and `other` go to the same chat (text is joined only within one).
    fn same_chat(&self, other: &Self) -> bool;
}

impl Batched for UiEvent {
    fn event(&self) -> &UiEvent {
        self
    }
    fn same_chat(&self, _: &Self) -> bool {
        true
    }
}

impl Batched for Addressed {
    fn event(&self) -> &UiEvent {
        &self.event
    }
    fn same_chat(&self, other: &Self) -> bool {
        self.to == other.to
    }
}

/// One batch: `first` and what else comes before `deadline`, up to an approval (sent at once)
/// or until the batch is full; true when it is full (more may be waiting).
async fn gather<T: Batched>(
    first: T,
    events: &mut mpsc::UnboundedReceiver<T>,
    deadline: tokio::time::Instant,
) -> (Vec<T>, bool) {
    let mut bytes = size_of_text(first.event());
    let mut batch = vec![first];
    // Events as Lua gets them: text joined to the text before it is not one more.
    let mut joined = 1;
    while !batch
        .last()
        .is_some_and(|last| goes_at_once(last.event(), events.is_empty()))
    {
        if joined >= BATCH_EVENTS || bytes >= BATCH_BYTES {
            return (batch, true);
        }
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(event)) => {
                bytes += size_of_text(event.event());
                if !batch.last().is_some_and(|last| {
                    last.same_chat(&event) && joins(last.event(), event.event())
                }) {
                    joined += 1;
                }
                batch.push(event);
            }
            Ok(None) | Err(_) => break,
        }
    }
    (batch, false)
}

/// Whether [`join_text`] joins `next` to `previous` (text to text, thoughts to thoughts); a
/// live output replacing the one before it still counts, as it is sent whole each time.
fn joins(previous: &UiEvent, next: &UiEvent) -> bool {
    matches!(
        (previous, next),
        (
            UiEvent::Agent(Event::Text { .. }),
            UiEvent::Agent(Event::Text { .. })
        ) | (
            UiEvent::Agent(Event::Thought { .. }),
            UiEvent::Agent(Event::Thought { .. })
        ) | (
            UiEvent::Update(agent_nvim_vocab::conversation::AgentUpdate::Thought { .. }),
            UiEvent::Update(agent_nvim_vocab::conversation::AgentUpdate::Thought { .. })
        )
    )
}

/// True for an event after which the batch goes out without waiting for the frame's end: a
/// question for the person (an approval, an inline proposal), always; what ends a model's reply (its usage, a tool it calls, the
/// turn's end) when nothing else is waiting (`idle`), so an answer's last words are on screen
/// as soon as they come, while a flood (a resumed conversation replays every reply's end)
/// still goes out in full batches.
fn goes_at_once(event: &UiEvent, idle: bool) -> bool {
    match event {
        UiEvent::Approval { .. } | UiEvent::InlineProposal { .. } => true,
        UiEvent::Idle
        | UiEvent::InlineDone { .. }
        | UiEvent::Agent(
            Event::Usage { .. } | Event::ToolStarted { .. } | Event::TurnDone { .. },
        ) => idle,
        _ => false,
    }
}

/// A batch of events as [`lua::RECEIVE`] takes it: each made visible ([`UiEvent::shown`]) and
/// written as a msgpack map ([`to_msgpack`]). Public for the tests that send Lua every kind of
/// event the way the pump does.
pub fn for_lua(batch: Vec<UiEvent>) -> Vec<Value> {
    batch
        .into_iter()
        .map(|event| {
            // Whether an edit's diff reaches Lua as it is (nothing in it made visible): only
            // such a diff may be taken back from its row (`keymaps.chat.undo`).
            let exact = diff_of(&event).map(|diff| display::visible(diff, Layout::Prose) == diff);
            (event.shown(), exact)
        })
        .filter_map(|(event, exact)| {
            let mut value = serde_json::to_value(event).ok()?;
            if let (Some(exact), Some(map)) = (exact, value.as_object_mut()) {
                map.insert("diff_exact".into(), serde_json::Value::Bool(exact));
            }
            Some(value)
        })
        .map(to_msgpack)
        .collect()
}

/// The diff an event carries for an edit's row, if any.
fn diff_of(event: &UiEvent) -> Option<&str> {
    match event {
        UiEvent::Agent(Event::ToolFinished { diff, .. }) | UiEvent::ToolOutput { diff, .. } => {
            diff.as_deref()
        }
        _ => None,
    }
}

/// A batch of events for the chats of one or more conversations, as [`lua::RECEIVE`] takes it:
/// each conversation's events together and in the order they came (the order between two
/// conversations does not matter: each chat shows only its own), text joined within each, and
/// every map carrying the `conversation` it is for.
fn addressed_for_lua(batch: Vec<Addressed>) -> Vec<Value> {
    let mut chats: Vec<(u64, Vec<UiEvent>)> = Vec::new();
    for Addressed { to, event } in batch {
        match chats.iter_mut().find(|(chat, _)| *chat == to) {
            Some((_, events)) => events.push(event),
            None => chats.push((to, vec![event])),
        }
    }
    chats
        .into_iter()
        .flat_map(|(to, events)| {
            for_lua(join_text(events))
                .into_iter()
                .map(move |value| match value {
                    Value::Map(mut fields) => {
                        fields.push((Value::from("conversation"), Value::from(to)));
                        Value::Map(fields)
                    }
                    other => other,
                })
        })
        .collect()
}

/// A JSON value as msgpack, objects as maps with string keys (what Lua tables need; rmpv's serde
/// support would write structs as arrays). A null in an object is left out, so Lua never reads
/// `vim.NIL` for an absent field. Every string (keys too) is redacted: this is the one way
/// events reach the chat. The strings are moved, not copied: a resumed conversation's are
/// megabytes.
pub(super) fn to_msgpack(value: serde_json::Value) -> Value {
    use crate::secrets::redact_owned;
    match value {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::from(b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::from(i),
            (None, Some(u), _) => Value::from(u),
            (None, None, f) => Value::from(f.unwrap_or_default()),
        },
        serde_json::Value::String(s) => Value::from(redact_owned(s)),
        serde_json::Value::Array(items) => {
            Value::Array(items.into_iter().map(to_msgpack).collect())
        }
        serde_json::Value::Object(map) => Value::Map(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (Value::from(redact_owned(k)), to_msgpack(v)))
                .collect(),
        ),
    }
}

/// Roughly how much text an event carries to the chat.
pub(super) fn size_of_text(event: &UiEvent) -> usize {
    match event {
        UiEvent::Prompt { text } | UiEvent::Agent(Event::Text { text }) => text.len(),
        UiEvent::Agent(Event::ToolFinished { output, .. } | Event::ToolProgress { output, .. })
        | UiEvent::ToolOutput { output, .. } => output.len(),
        UiEvent::Update(agent_nvim_vocab::conversation::AgentUpdate::ToolUpdated {
            output,
            ..
        }) => output.len(),
        _ => 64,
    }
}

/// Joins consecutive text events (and thinking's) so a frame's deltas are appended with one
/// buffer call, and keeps only the newest of consecutive live outputs of one call (each is the
/// whole of it).
fn join_text(batch: Vec<UiEvent>) -> Vec<UiEvent> {
    let mut out: Vec<UiEvent> = Vec::with_capacity(batch.len());
    for event in batch {
        match (out.last_mut(), event) {
            (
                Some(UiEvent::Agent(Event::Text { text })),
                UiEvent::Agent(Event::Text { text: more }),
            )
            | (
                Some(UiEvent::Agent(Event::Thought { text })),
                UiEvent::Agent(Event::Thought { text: more }),
            )
            | (
                Some(UiEvent::Update(agent_nvim_vocab::conversation::AgentUpdate::Thought {
                    text,
                })),
                UiEvent::Update(agent_nvim_vocab::conversation::AgentUpdate::Thought {
                    text: more,
                }),
            ) => text.push_str(&more),
            (
                Some(UiEvent::Agent(Event::ToolProgress { id, output })),
                UiEvent::Agent(Event::ToolProgress {
                    id: newer,
                    output: newest,
                }),
            ) if *id == newer => *output = newest,
            (_, event) => out.push(event),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::front::nvim::protocol::{Choices, Preview};
    use agent_nvim_vocab::approval::Decision;

    fn text(s: &str) -> UiEvent {
        UiEvent::Agent(Event::Text { text: s.into() })
    }

    fn thought(s: &str) -> UiEvent {
        UiEvent::Agent(Event::Thought { text: s.into() })
    }

    #[tokio::test]
    async fn a_burst_of_text_deltas_is_one_event_to_lua_and_fills_a_batch_by_its_bytes() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let delta = "d".repeat(20);
        let per_batch = BATCH_BYTES.div_ceil(delta.len());
        for _ in 0..per_batch + 10 {
            tx.send(text(&delta)).unwrap();
        }
        let later = tokio::time::Instant::now() + Duration::from_secs(60);
        let first = rx.recv().await.unwrap();
        let (batch, full) = gather(first, &mut rx, later).await;
        assert_eq!((batch.len(), full), (per_batch, true));
        assert_eq!(
            join_text(batch),
            vec![text(&delta.repeat(per_batch))],
            "one event for Lua"
        );
        let first = rx.recv().await.unwrap();
        let (batch, full) = gather(first, &mut rx, tokio::time::Instant::now()).await;
        assert_eq!((batch.len(), full), (10, false));
    }

    #[tokio::test]
    async fn a_flood_goes_out_in_bounded_batches_a_trickle_once_a_frame() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        // A flood (a resumed conversation): full batches; after a full one the next is
        // gathered with a deadline already past, so it takes only what is waiting. Text and
        // thoughts in turn: none joins the one before it.
        for i in 0..BATCH_EVENTS * 2 + 5 {
            tx.send(if i % 2 == 0 { text("x") } else { thought("t") })
                .unwrap();
        }
        let later = tokio::time::Instant::now() + Duration::from_secs(60);
        let first = rx.recv().await.unwrap();
        let (batch, full) = gather(first, &mut rx, later).await;
        assert_eq!((batch.len(), full), (BATCH_EVENTS, true));
        let first = rx.recv().await.unwrap();
        let (batch, full) = gather(first, &mut rx, tokio::time::Instant::now()).await;
        assert_eq!((batch.len(), full), (BATCH_EVENTS, true));
        let first = rx.recv().await.unwrap();
        let (batch, full) = gather(first, &mut rx, tokio::time::Instant::now()).await;
        assert_eq!((batch.len(), full), (5, false));

        // Big outputs fill a batch by their size.
        let big = "y".repeat(BATCH_BYTES / 2 + 1);
        for _ in 0..3 {
            tx.send(text(&big)).unwrap();
        }
        let first = rx.recv().await.unwrap();
        let (batch, full) = gather(first, &mut rx, later).await;
        assert_eq!((batch.len(), full), (2, true));
        let first = rx.recv().await.unwrap();
        let (batch, _) = gather(first, &mut rx, tokio::time::Instant::now()).await;
        assert_eq!(batch.len(), 1);

        // A trickle: what comes before the deadline joins the batch (here until the sender is
        // gone), and an approval goes out at once with what came before it.
        let sender = tx.clone();
        drop(tx);
        tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(2)).await;
                sender.send(text("z")).unwrap();
            }
            sender.send(UiEvent::error("e")).unwrap();
        });
        let (batch, full) = gather(text("z"), &mut rx, later).await;
        assert_eq!((batch.len(), full), (5, false));
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(text("after")).unwrap();
        let approval = UiEvent::Approval {
            id: 1,
            tool: "t".into(),
            title: "t".into(),
            preview: Preview::None,
            choices: Choices::agent(vec![], false),
        };
        let (batch, full) = gather(approval, &mut rx, later).await;
        assert_eq!(
            (batch.len(), full),
            (1, false),
            "an approval waits for nothing"
        );

        // The end of a reply takes the text before it out at once, not a frame later.
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(UiEvent::Agent(Event::Usage {
            input: 1,
            output: 2,
            cached: 0,
            cost: None,
        }))
        .unwrap();
        let (batch, full) = gather(text("last words"), &mut rx, later).await;
        assert_eq!((batch.len(), full), (2, false), "{batch:?}");
        let (batch, _) = gather(UiEvent::Idle, &mut rx, later).await;
        assert_eq!(batch, vec![UiEvent::Idle]);
        // A replayed flood: a reply's end with more waiting behind it does not cut the batch.
        let (tx, mut rx) = mpsc::unbounded_channel();
        for _ in 0..10 {
            tx.send(UiEvent::Agent(Event::Usage {
                input: 1,
                output: 1,
                cached: 0,
                cost: None,
            }))
            .unwrap();
            tx.send(text("reply")).unwrap();
        }
        drop(tx);
        let (batch, _) = gather(text("first"), &mut rx, later).await;
        assert_eq!(batch.len(), 21, "{batch:?}");
    }

    #[test]
    fn absent_fields_are_left_out_of_what_lua_reads() {
        let values = for_lua(vec![
            UiEvent::Approval {
                id: 1,
                tool: "t".into(),
                title: "t".into(),
                preview: Preview::Command {
                    command: "ls".into(),
                    cwd: "/w".into(),
                    timeout: None,
                },
                choices: Choices::agent(vec![], false),
            },
            UiEvent::decided(1, "t".into(), Decision::Refuse { reason: None }),
            UiEvent::Agent(Event::ToolStarted {
                id: "c".into(),
                name: "n".into(),
                args: serde_json::Value::Null,
            }),
        ]);
        assert_eq!(
            values.into_iter().map(sorted).collect::<Vec<_>>(),
            vec![
                sorted(Value::Map(vec![
                    (Value::from("type"), Value::from("approval")),
                    (Value::from("id"), Value::from(1)),
                    (Value::from("tool"), Value::from("t")),
                    (Value::from("title"), Value::from("t")),
                    (
                        Value::from("preview"),
                        Value::Map(vec![
                            (Value::from("kind"), Value::from("command")),
                            (Value::from("command"), Value::from("ls")),
                            (Value::from("cwd"), Value::from("/w")),
                        ])
                    ),
                    (
                        Value::from("choices"),
                        Value::Map(vec![
                            (Value::from("kind"), Value::from("agent")),
                            (Value::from("cancel"), Value::from("Cancel")),
                            (Value::from("options"), Value::Array(vec![])),
                        ])
                    ),
                ])),
                sorted(Value::Map(vec![
                    (Value::from("type"), Value::from("decided")),
                    (Value::from("id"), Value::from(1)),
                    (Value::from("tool"), Value::from("t")),
                    (Value::from("decision"), Value::from("refuse")),
                    (Value::from("note"), Value::from("refused")),
                ])),
                sorted(Value::Map(vec![
                    (Value::from("type"), Value::from("tool_started")),
                    (Value::from("id"), Value::from("c")),
                    (Value::from("name"), Value::from("n")),
                ])),
            ]
        );
    }
    #[tokio::test]
    async fn two_conversations_streaming_at_once_each_get_their_own_text_in_one_batch() {
        let to = |to, text: &str| Addressed {
            to,
            event: UiEvent::Agent(Event::Text { text: text.into() }),
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        for event in [to(2, "b"), to(1, "A"), to(2, "b"), to(1, "B")] {
            tx.send(event).unwrap();
        }
        let first = rx.recv().await.unwrap();
        let later = tokio::time::Instant::now() + Duration::from_millis(50);
        let (batch, full) = gather(first, &mut rx, later).await;
        assert_eq!((batch.len(), full), (4, false));
        let shown: Vec<(String, u64)> = addressed_for_lua(batch)
            .iter()
            .map(|event| {
                let field = |name| crate::test_support::nvim::field(event, name).unwrap();
                (
                    field("text").as_str().unwrap().to_string(),
                    field("conversation").as_u64().unwrap(),
                )
            })
            .collect();
        // Each conversation's deltas joined, never one's text into the other's.
        assert_eq!(shown, [("bb".to_string(), 2), ("AB".to_string(), 1)]);
    }

    #[test]
    fn a_frame_of_deltas_becomes_one_text_event() {
        let batch = vec![
            UiEvent::Agent(Event::Text { text: "a".into() }),
            UiEvent::Agent(Event::Text { text: "b".into() }),
            UiEvent::Agent(Event::Usage {
                input: 1,
                output: 2,
                cached: 0,
                cost: None,
            }),
            UiEvent::Agent(Event::Text { text: "c".into() }),
        ];
        assert_eq!(
            join_text(batch),
            vec![
                UiEvent::Agent(Event::Text { text: "ab".into() }),
                UiEvent::Agent(Event::Usage {
                    input: 1,
                    output: 2,
                    cached: 0,
                    cost: None,
                }),
                UiEvent::Agent(Event::Text { text: "c".into() })
            ]
        );
    }
    #[test]
    fn a_frame_of_thinking_deltas_becomes_one_event_each_kind_apart() {
        let thought = |s: &str| UiEvent::Agent(Event::Thought { text: s.into() });
        let acp = |s: &str| {
            UiEvent::Update(agent_nvim_vocab::conversation::AgentUpdate::Thought { text: s.into() })
        };
        let batch = vec![
            thought("a"),
            thought("b"),
            UiEvent::Agent(Event::Text { text: "x".into() }),
            acp("c"),
            acp("d"),
            thought("e"),
        ];
        assert_eq!(
            join_text(batch),
            vec![
                thought("ab"),
                UiEvent::Agent(Event::Text { text: "x".into() }),
                acp("cd"),
                thought("e"),
            ]
        );
    }

    #[test]
    fn a_frame_of_one_calls_live_output_keeps_only_the_newest() {
        let progress = |id: &str, output: &str| {
            UiEvent::Agent(Event::ToolProgress {
                id: id.into(),
                output: output.into(),
            })
        };
        let batch = vec![
            progress("a", "1"),
            progress("a", "1\n2"),
            progress("b", "x"),
            progress("a", "1\n2\n3"),
            progress("a", "1\n2\n3\n4"),
        ];
        assert_eq!(
            join_text(batch),
            vec![
                progress("a", "1\n2"),
                progress("b", "x"),
                progress("a", "1\n2\n3\n4")
            ]
        );
    }
    /// A map's entries sorted by key: key order is serde_json's business (it depends on its
    /// `preserve_order` feature), not part of what Lua reads.
    fn sorted(value: Value) -> Value {
        match value {
            Value::Map(mut entries) => {
                entries.sort_by(|a, b| a.0.as_str().cmp(&b.0.as_str()));
                Value::Map(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
            }
            other => other,
        }
    }
    #[test]
    fn every_kind_of_event_reaches_lua_as_one_flat_map_with_its_type() {
        let kinds = |events: Vec<UiEvent>| -> Vec<String> {
            events
                .into_iter()
                .map(|e| {
                    serde_json::to_value(e).unwrap()["type"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect()
        };
        assert_eq!(
            kinds(vec![
                UiEvent::AcpStarted { name: "x".into() },
                UiEvent::error("agent: boom"),
                UiEvent::Agent(Event::TurnStarted),
                UiEvent::Update(agent_nvim_vocab::conversation::AgentUpdate::Thought {
                    text: "hm".into()
                }),
            ]),
            ["acp_started", "error", "turn_started", "thought"]
        );
        let error = serde_json::to_value(UiEvent::error("agent: boom")).unwrap();
        assert_eq!(
            error,
            serde_json::json!({"type": "error", "message": "agent: boom"})
        );
    }

    #[tokio::test]
    async fn a_wait_for_the_chat_ends_once_lua_has_taken_that_many_events() {
        let shown = std::sync::Arc::new(Shown::default());
        shown.reach(0).await;
        let waiting = tokio::spawn({
            let shown = shown.clone();
            async move { shown.reach(5).await }
        });
        shown.add(3);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        shown.add(2);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_paced_sender_waits_for_lua_and_stops_waiting_for_one_that_takes_nothing() {
        let shown = std::sync::Arc::new(Shown::default());
        let mut pace = Pace::new(4);
        // Up to `ahead` events on their way: no wait.
        tokio::time::timeout(Duration::from_millis(1), pace.wait(&shown, 4))
            .await
            .expect("no wait within the allowance");
        // One more needs Lua to have taken one.
        let waiting = tokio::spawn({
            let shown = shown.clone();
            async move {
                let mut pace = Pace::new(4);
                pace.wait(&shown, 5).await;
                pace.paced
            }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiting.is_finished(), "sent before Lua took anything");
        shown.add(1);
        assert!(waiting.await.unwrap(), "still paced after Lua took one");
        // Lua takes nothing more: the wait gives up after PACE_GIVE_UP, then never waits again.
        let started = tokio::time::Instant::now();
        pace.wait(&shown, 10).await;
        assert_eq!(started.elapsed(), PACE_GIVE_UP);
        assert!(!pace.paced);
        tokio::time::timeout(Duration::from_millis(1), pace.wait(&shown, 1_000))
            .await
            .expect("unpaced after giving up");
        // Once Lua has caught up, the sender is paced again.
        shown.add(995);
        pace.wait(&shown, 1_000).await;
        assert!(pace.paced, "paced again once Lua caught up");
        let waiting = tokio::spawn({
            let shown = shown.clone();
            async move { pace.wait(&shown, 1_005).await }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiting.is_finished(), "sent before Lua took the next one");
        shown.add(5);
        waiting.await.unwrap();
    }

    #[test]
    fn every_string_to_lua_is_redacted_keys_included() {
        crate::secrets::protect("sk-pump-test-5a1b2c3d4e");
        let value = to_msgpack(serde_json::json!({
            "text": "the key is sk-pump-test-5a1b2c3d4e",
            "args": {"sk-pump-test-5a1b2c3d4e": ["also sk-pump-test-5a1b2c3d4e"]}
        }));
        let mut shown = Vec::new();
        rmpv::encode::write_value(&mut shown, &value).unwrap();
        let shown = String::from_utf8_lossy(&shown);
        assert!(!shown.contains("sk-pump-test"), "{shown}");
        assert_eq!(
            shown.matches(crate::secrets::REDACTED).count(),
            3,
            "{shown}"
        );
    }

    #[test]
    fn events_to_lua_are_maps_with_a_type() {
        let value = to_msgpack(
            serde_json::to_value(UiEvent::Agent(Event::Text { text: "hi".into() })).unwrap(),
        );
        assert_eq!(
            sorted(value),
            Value::Map(vec![
                (Value::from("text"), Value::from("hi")),
                (Value::from("type"), Value::from("text"))
            ])
        );
        let value = to_msgpack(serde_json::json!({"n": -3, "f": 1.5, "list": [true, null]}));
        assert_eq!(
            sorted(value),
            Value::Map(vec![
                (Value::from("f"), Value::from(1.5)),
                (
                    Value::from("list"),
                    Value::Array(vec![Value::from(true), Value::Nil])
                ),
                (Value::from("n"), Value::from(-3)),
            ])
        );
    }
}
