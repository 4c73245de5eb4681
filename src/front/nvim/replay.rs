//! A saved conversation sent to the chat again (`:Agent resume`): each record as the event it
//! was, in two passes. The rows come first, each finished tool as one event and without its
//! output; the outputs (most of a long conversation's text, hidden in closed folds) follow,
//! each put under its row. So the chat a person reads is on screen after a fifth of the data,
//! and Neovim still answers between the batches of either pass.

use tokio::sync::{mpsc, oneshot};

use crate::sessions::{self, Record, Store, StoreError};
use agent_nvim_vocab::conversation::ConversationEvent;
use agent_nvim_vocab::events::Event;

use super::protocol::UiEvent;

/// What a resumed conversation's file holds, once it is read (or why it could not be).
pub(super) type Loaded = oneshot::Receiver<Result<sessions::Conversation, StoreError>>;

/// How many events of a resume may be on their way to Lua, not yet taken: four batches of rows,
/// enough for the pump to have its next ones ready (one with Lua, one made, one being
/// gathered). Outputs, which the pump cuts at [`super::pump::BATCH_BYTES`], are more batches:
/// by then the file is read, and only the pump's own work is left.
const AHEAD: u64 = 4 * super::pump::BATCH_EVENTS as u64;

/// How a resume shows a file that holds branches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Branches {
    /// Everything in the file, in order.
    AsWritten,
    /// Up to the first branch only: the caller draws the current branch whole after
    /// ([`branch_events`]), so the rest would be drawn only to be cleared.
    DrawnAfter,
}

/// Sends saved conversation `id` to the chat (Lua has cleared it), paced to what Neovim shows:
/// its content, and how many events had been sent by its last row (the outputs after it fill
/// folds nobody reads yet). Why not, as the error to show.
pub(super) async fn show(
    ui: &super::ui::Ui,
    store: Store,
    id: String,
    branches: Branches,
) -> Result<(sessions::Conversation, u64), String> {
    let (mut to_show, loading) = read(store, id, branches)
        .map_err(|err| format!("agent: reading the conversation failed: {err}"))?;
    let mut rows = ui.sent();
    let mut pace = super::pump::Pace::new(AHEAD);
    while let Some(event) = to_show.recv().await {
        let row = !matches!(event, UiEvent::ToolOutput { .. });
        pace.wait(ui.shown(), ui.sent()).await;
        ui.send(event);
        if row {
            rows = ui.sent();
        }
    }
    match loading.await {
        Ok(Ok(saved)) => Ok((saved, rows)),
        Ok(Err(err)) => Err(format!("agent: {err}")),
        Err(_) => Err("agent: reading the conversation stopped half way; see :Agent log".into()),
    }
}

/// Reads conversation `id` of `store` on a thread of its own while the chat shows it: its
/// events come on the receiver as each record is parsed (through a bounded channel: the thread
/// waits while the chat is behind, and runs at a lower priority, so it does not take the core
/// Neovim draws on), then the file's whole content on [`Loaded`]. A panic while reading is
/// logged and drops [`Loaded`]'s sender.
pub(super) fn read(
    store: Store,
    id: String,
    branches: Branches,
) -> std::io::Result<(mpsc::Receiver<UiEvent>, Loaded)> {
    let (shown, to_show) = mpsc::channel(super::pump::BATCH_EVENTS);
    let (done, loaded) = oneshot::channel();
    std::thread::Builder::new()
        .name("agent-resume".into())
        .spawn(move || {
            sessions::lower_priority();
            let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut replay = Replay::with_images(Some(store.images_dir()));
                let send = |events: Vec<UiEvent>| {
                    events.into_iter().all(|e| shown.blocking_send(e).is_ok())
                };
                let mut branched = false;
                let loaded = store.load_with(&id, |record| {
                    branched |= branches == Branches::DrawnAfter
                        && matches!(record, Record::Branched { .. } | Record::Switched { .. });
                    // Read on to the end (the caller needs the whole file), shown no further.
                    branched || send(replay.events(record))
                });
                // Every row is shown: now the outputs, each under its row.
                if !branched {
                    send(replay.finish());
                }
                loaded
            }));
            match read {
                Ok(loaded) => {
                    let _ = done.send(loaded);
                }
                Err(panic) => tracing::error!(
                    id,
                    panic = panic
                        .downcast_ref::<&str>()
                        .copied()
                        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                        .unwrap_or("(no message)"),
                    "reading a conversation to resume panicked"
                ),
            }
        })?;
    Ok((to_show, loaded))
}

/// The chat of conversation `saved` as its current branch holds it (`:help agent-branches`):
/// [`UiEvent::Clear`], the events of the branch's records as [`Replay`] makes them, and where
/// its prompts have other branches ([`UiEvent::Branches`]).
pub(super) fn branch_events(
    saved: &sessions::Conversation,
    images: Option<std::path::PathBuf>,
) -> Vec<UiEvent> {
    let tree = saved.tree();
    let mut replay = Replay::with_images(images);
    let mut events = vec![UiEvent::Clear];
    for record in tree.path().iter().filter_map(|&at| saved.records.get(at)) {
        events.extend(replay.events(record));
    }
    events.extend(replay.finish());
    events.push(UiEvent::Branches {
        at: tree.branches().into_iter().map(Into::into).collect(),
    });
    events
}

/// What the chat is sent for the saved records of one conversation: a prompt as
/// [`UiEvent::Prompt`], a cut as [`UiEvent::Rewound`], a tool's start, decision and end as one
/// [`UiEvent::Replayed`] (its output kept for [`Replay::finish`]), every other event as itself
/// (a decision as [`UiEvent::Decided`]); nothing for what only the model reads. Each still
/// goes through the pump, so it is made visible and redacted like a live one.
#[derive(Default)]
pub(super) struct Replay {
    /// Which messages of the model's view so far are prompts, to number a cut's prompt.
    view: sessions::View<sessions::IsPrompt>,
    /// The tool started last and its decision, until its end comes (or something else does).
    started: Option<(Event, Option<UiEvent>)>,
    /// The outputs (and edits' diffs) of the rows sent without theirs, not yet sent, by their
    /// `later` number.
    outputs: Vec<(u64, String, Option<String>)>,
    /// How many rows were sent without their output.
    deferred: u64,
    /// Where the conversation's images are saved: its prompts' pictures are drawn from there.
    images: Option<std::path::PathBuf>,
}

impl Replay {
    /// A replay whose prompts' saved images are in `images` (None: no pictures).
    pub(super) fn with_images(images: Option<std::path::PathBuf>) -> Replay {
        Replay {
            images,
            ..Replay::default()
        }
    }

    /// The events for `record`, in order.
    pub(super) fn events(&mut self, record: &Record) -> Vec<UiEvent> {
        self.view.take(record);
        let mut events = Vec::new();
        match record {
            Record::Event {
                event: ConversationEvent::Turn(event @ Event::ToolStarted { .. }),
            } => {
                events.extend(self.unfinished());
                self.started = Some((event.clone(), None));
            }
            Record::Decided {
                tool,
                decision,
                note,
            } => {
                let decided = UiEvent::Decided {
                    id: 0,
                    tool: tool.clone(),
                    decision: decision.clone(),
                    note: note.clone(),
                };
                match &mut self.started {
                    Some((_, slot @ None)) => *slot = Some(decided),
                    _ => {
                        // Another decision: the tool held goes first, as it did live.
                        events.extend(self.unfinished());
                        events.push(decided);
                    }
                }
            }
            Record::Event {
                event:
                    ConversationEvent::Turn(Event::ToolFinished {
                        id,
                        name,
                        ok,
                        summary,
                        output,
                        diff,
                    }),
            } => {
                let (started, note) = match self.started.take() {
                    Some((Event::ToolStarted { id: started, .. }, decided)) if started == *id => {
                        let note = decided.and_then(|d| match d {
                            UiEvent::Decided { note, .. } => Some(note),
                            _ => None,
                        });
                        (true, note)
                    }
                    other => {
                        self.started = other;
                        events.extend(self.unfinished());
                        (false, None)
                    }
                };
                let later = (!output.is_empty() || diff.is_some()).then(|| {
                    let later = self.deferred;
                    self.deferred += 1;
                    self.outputs.push((later, output.clone(), diff.clone()));
                    later
                });
                events.push(UiEvent::Replayed {
                    id: id.clone(),
                    name: name.clone(),
                    ok: *ok,
                    summary: summary.clone(),
                    started,
                    note,
                    later,
                });
            }
            // A switch is followed by the chat drawn again as the branch it went to
            // ([`branch_events`]).
            Record::Switched { .. } => {}
            Record::Rewound { .. } | Record::Branched { .. } => {
                // The chat folds what the cut left behind as it is in the buffer then: the
                // outputs so far go in first.
                events.extend(self.finish());
                events.push(UiEvent::Rewound {
                    turn: self.view.prompts() + 1,
                    cut: true,
                    message: None,
                    prompt: None,
                });
            }
            Record::Prompt { text } => {
                events.extend(self.unfinished());
                events.push(UiEvent::Prompt { text: text.clone() });
            }
            Record::Event { event } => {
                events.extend(self.unfinished());
                events.push(event.clone().into());
            }
            // The prompt's text names its images in its `[attached: image: ...]` rows; where
            // each is saved comes after it, for its picture.
            Record::Images { images } => {
                if let Some(dir) = &self.images {
                    // In order, one for each image row: "" for what is not an image agent.nvim
                    // saved there.
                    let files: Vec<String> = images
                        .iter()
                        .map(|image| {
                            if sessions::is_saved_image(dir, &image.file) {
                                dir.join(&image.file).display().to_string()
                            } else {
                                String::new()
                            }
                        })
                        .collect();
                    if files.iter().any(|file| !file.is_empty()) {
                        events.push(UiEvent::Pictures { files });
                    }
                }
            }
            Record::Model { .. } => {}
        }
        events
    }

    /// What is still held back: a tool that never finished (as it was, running), then the
    /// outputs, each as the [`UiEvent::ToolOutput`] for its row.
    pub(super) fn finish(&mut self) -> Vec<UiEvent> {
        let mut events = self.unfinished();
        events.extend(
            self.outputs
                .drain(..)
                .map(|(later, output, diff)| UiEvent::ToolOutput {
                    later,
                    output,
                    diff,
                }),
        );
        events
    }

    /// The tool started and not finished, with its decision, as the live events were.
    fn unfinished(&mut self) -> Vec<UiEvent> {
        let Some((started, decided)) = self.started.take() else {
            return Vec::new();
        };
        std::iter::once(UiEvent::Agent(started))
            .chain(decided)
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use agent_nvim_vocab::approval::Decision;

    fn turn(event: Event) -> Record {
        Record::Event {
            event: ConversationEvent::Turn(event),
        }
    }

    fn started(id: &str) -> Event {
        Event::ToolStarted {
            id: id.into(),
            name: "run_bash".into(),
            args: serde_json::json!({"command": "ls"}),
        }
    }

    fn finished(id: &str, output: &str) -> Record {
        turn(Event::ToolFinished {
            id: id.into(),
            name: "run_bash".into(),
            ok: true,
            summary: format!("ran {id}"),
            output: output.into(),
            diff: None,
        })
    }

    fn decided() -> Record {
        Record::Decided {
            tool: "run_bash".into(),
            decision: Decision::AllowOnce,
            note: "allowed once".into(),
        }
    }

    fn row(id: &str, note: Option<&str>, later: Option<u64>) -> UiEvent {
        UiEvent::Replayed {
            id: id.into(),
            name: "run_bash".into(),
            ok: true,
            summary: format!("ran {id}"),
            started: true,
            note: note.map(str::to_string),
            later,
        }
    }

    /// A finished tool whose start was not just before it: it finishes a row of the id.
    fn unstarted(id: &str, later: Option<u64>) -> UiEvent {
        match row(id, None, later) {
            UiEvent::Replayed {
                id,
                name,
                ok,
                summary,
                note,
                later,
                ..
            } => UiEvent::Replayed {
                id,
                name,
                ok,
                summary,
                started: false,
                note,
                later,
            },
            other => other,
        }
    }

    fn output(later: u64, output: &str) -> UiEvent {
        UiEvent::ToolOutput {
            later,
            output: output.into(),
            diff: None,
        }
    }

    fn replayed(records: &[Record]) -> Vec<UiEvent> {
        let mut replay = Replay::default();
        let mut sent: Vec<UiEvent> = records.iter().flat_map(|r| replay.events(r)).collect();
        sent.extend(replay.finish());
        assert!(replay.finish().is_empty());
        sent
    }

    #[test]
    fn an_edits_diff_comes_back_with_its_rows_output_even_when_it_has_no_other() {
        let edit = |id: &str, output: &str| {
            turn(Event::ToolFinished {
                id: id.into(),
                name: "run_bash".into(),
                ok: true,
                summary: format!("ran {id}"),
                output: output.into(),
                diff: Some("-a\n+b\n".into()),
            })
        };
        let sent = replayed(&[
            turn(started("a")),
            edit("a", "Edited x."),
            turn(started("b")),
            edit("b", ""),
        ]);
        let with_diff = |later: u64, output: &str| UiEvent::ToolOutput {
            later,
            output: output.into(),
            diff: Some("-a\n+b\n".into()),
        };
        assert_eq!(
            sent,
            [
                row("a", None, Some(0)),
                row("b", None, Some(1)),
                with_diff(0, "Edited x."),
                with_diff(1, ""),
            ]
        );
    }

    #[test]
    fn a_tool_is_one_row_and_the_outputs_follow_every_row_or_go_in_before_a_cut() {
        let sent = replayed(&[
            Record::Prompt { text: "one".into() },
            turn(started("a")),
            decided(),
            finished("a", "alpha"),
            turn(started("b")),
            finished("b", ""),
            finished("c", "gamma"),
            Record::Rewound { kept: 0 },
            Record::Prompt { text: "two".into() },
            turn(started("d")),
            finished("d", "delta"),
        ]);
        let cut = UiEvent::Rewound {
            turn: 1,
            cut: true,
            message: None,
            prompt: None,
        };
        assert_eq!(
            sent,
            [
                UiEvent::Prompt { text: "one".into() },
                row("a", Some("allowed once"), Some(0)),
                row("b", None, None),
                // Finished with no start before it: a row all the same.
                unstarted("c", Some(1)),
                output(0, "alpha"),
                output(1, "gamma"),
                cut,
                UiEvent::Prompt { text: "two".into() },
                row("d", None, Some(2)),
                output(2, "delta"),
            ]
        );
    }

    #[test]
    fn a_tool_that_never_finished_is_sent_as_it_was_running() {
        let decided_event = UiEvent::Decided {
            id: 0,
            tool: "run_bash".into(),
            decision: Decision::AllowOnce,
            note: "allowed once".into(),
        };
        // Cut off by a crash, then a new prompt; and cut off at the end of the file.
        let sent = replayed(&[
            turn(started("a")),
            decided(),
            Record::Prompt { text: "two".into() },
            turn(started("b")),
            turn(Event::Text { text: "hi".into() }),
            turn(started("c")),
            finished("d", "other"),
            turn(started("e")),
        ]);
        assert_eq!(
            sent,
            [
                UiEvent::Agent(started("a")),
                decided_event,
                UiEvent::Prompt { text: "two".into() },
                UiEvent::Agent(started("b")),
                UiEvent::Agent(Event::Text { text: "hi".into() }),
                UiEvent::Agent(started("c")),
                unstarted("d", Some(0)),
                UiEvent::Agent(started("e")),
                output(0, "other"),
            ]
        );
    }

    #[test]
    fn a_file_with_branches_is_shown_up_to_its_first_branch_when_the_branch_is_drawn_after() {
        let state = tempfile::tempdir().unwrap();
        let store = Store::new(state.path(), std::path::Path::new("/w"));
        let writer = store.create("built-in").unwrap();
        let prompt = |text: &str| Record::Prompt { text: text.into() };
        for record in [
            prompt("first"),
            Record::Branched { kept: 0 },
            prompt("second, on a branch"),
        ] {
            writer.write(record);
        }
        writer.flush();
        let prompts = |branches| {
            let (mut shown, loaded) =
                read(store.clone(), writer.id().to_string(), branches).unwrap();
            let mut texts = Vec::new();
            while let Some(event) = shown.blocking_recv() {
                if let UiEvent::Prompt { text } = event {
                    texts.push(text);
                }
            }
            // The whole file is read either way.
            let saved = loaded.blocking_recv().unwrap().unwrap();
            assert_eq!(saved.records.len(), 3);
            texts
        };
        assert_eq!(
            prompts(Branches::AsWritten),
            ["first", "second, on a branch"]
        );
        assert_eq!(prompts(Branches::DrawnAfter), ["first"]);
    }

    #[test]
    fn a_prompts_saved_images_follow_it_as_pictures_and_what_is_not_one_is_not_drawn() {
        let saved = |file: &str| crate::sessions::SavedImage {
            name: "shot.png".into(),
            media_type: "image/png".into(),
            width: 1,
            height: 1,
            file: file.into(),
        };
        let state = tempfile::tempdir().unwrap();
        let dir = state.path().to_path_buf();
        let png = b"\x89PNG\r\n\x1a\n0123";
        let gif = b"GIF89a-";
        std::fs::write(dir.join("00000000000000ab-12.png"), png).unwrap();
        std::fs::write(dir.join("00000000000000cd-7.gif"), gif).unwrap();
        // Named as an image, holding something else (a viewer may decode by the content).
        std::fs::write(dir.join("00000000000000ef-12.png"), b"<svg></svg>\n").unwrap();
        std::os::unix::fs::symlink(
            dir.join("00000000000000ab-12.png"),
            dir.join("0000000000000011-12.png"),
        )
        .unwrap();
        let images = Record::Images {
            images: vec![
                saved("00000000000000ab-12.png"),
                saved("../../etc/passwd"),
                saved("00000000000000ef-12.png"),
                saved("0000000000000011-12.png"),
                saved("00000000000000cd-7.gif"),
            ],
        };
        let mut replay = Replay::with_images(Some(dir.clone()));
        let at = |name: &str| dir.join(name).display().to_string();
        assert_eq!(
            replay.events(&images),
            [UiEvent::Pictures {
                files: vec![
                    at("00000000000000ab-12.png"),
                    String::new(),
                    String::new(),
                    String::new(),
                    at("00000000000000cd-7.gif"),
                ]
            }]
        );
        // Without a folder of images (no state directory): none.
        assert!(Replay::default().events(&images).is_empty());
    }

    #[test]
    fn a_second_decision_comes_after_the_tool_it_is_for() {
        let second = Record::Decided {
            tool: "run_bash".into(),
            decision: Decision::AllowOnce,
            note: "second".into(),
        };
        let sent = replayed(&[turn(started("a")), decided(), second, finished("a", "")]);
        let decided = |note: &str| UiEvent::Decided {
            id: 0,
            tool: "run_bash".into(),
            decision: Decision::AllowOnce,
            note: note.into(),
        };
        assert_eq!(
            sent,
            [
                UiEvent::Agent(started("a")),
                decided("allowed once"),
                decided("second"),
                unstarted("a", None),
            ]
        );
    }
}
