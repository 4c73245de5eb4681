//! [`Recorded`]: any conversation, saved as it happens. It records each prompt, taps the
//! conversation's event stream (each event is queued for the file as it is passed on, in the
//! same call, so nothing is reordered on its way to the screen), records the decision of each
//! question, and after each turn what the model's view gained.

use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{
    AgentNote, Conversation as SavedConversation, Record, Saved, SavedImage, Store, Writer,
};
use crate::conversation::{Cause, Conversation, ConversationError, Events};
use agent_nvim_vocab::approval::Decision;
use agent_nvim_vocab::events::Outcome;

/// The file a conversation is saved to, and how many of its model messages are saved.
struct File {
    writer: Writer,
    saved: usize,
}

/// A conversation saved to a [`Store`]: one file a conversation, created at its first prompt
/// (an empty conversation leaves no file), a new one after [`Conversation::reset`], the saved
/// one again after [`Conversation::resume`].
pub struct Recorded {
    inner: Arc<dyn Conversation>,
    store: Store,
    file: Mutex<Option<File>>,
    /// A name the person gave before there was a file: written once there is one.
    title: Mutex<Option<String>>,
    /// The file holds branches (`branched`, `switched`): the chat marks them after each turn.
    branched: std::sync::atomic::AtomicBool,
}

/// Why a conversation without a file keeps no branches.
fn unsaved() -> ConversationError {
    ConversationError::Refused(
        "branches are kept in the saved conversation, and this one is not saved (no state folder, or nothing sent yet)"
            .into(),
    )
}

impl Recorded {
    /// `inner`, saved in `store`.
    pub fn new(inner: Arc<dyn Conversation>, store: Store) -> Self {
        Recorded {
            inner,
            store,
            file: Mutex::new(None),
            title: Mutex::new(None),
            branched: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The saved conversation as its file holds it now (what was recorded flushed first).
    async fn saved_now(&self) -> Result<SavedConversation, ConversationError> {
        let writer = self.writer().ok_or_else(unsaved)?;
        let store = self.store.clone();
        // Off the runtime's threads: waiting for the writer and reading a long file would hold
        // up every other conversation's streaming.
        tokio::task::spawn_blocking(move || {
            writer.flush();
            store.load(writer.id())
        })
        .await
        .map_err(|err| ConversationError::Store(Cause::new(err)))?
        .map_err(|err| ConversationError::Store(Cause::new(err)))
    }

    /// The conversation it saves.
    pub fn inner(&self) -> &Arc<dyn Conversation> {
        &self.inner
    }

    /// Waits until everything recorded so far is on the disk.
    pub fn flush(&self) {
        if let Some(writer) = self.writer() {
            writer.flush();
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<File>> {
        self.file.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn writer(&self) -> Option<Writer> {
        self.slot().as_ref().map(|file| file.writer.clone())
    }

    /// What the note of a file of the agent's session `session` says.
    fn note_of(&self, session: String) -> AgentNote {
        AgentNote {
            agent: self.inner.name().to_string(),
            session,
        }
    }

    /// Notes beside file `id` which session of the agent it is, when the agent can load it
    /// again.
    fn note(&self, id: &str) {
        let Some(session) = self.inner.agent_session_id() else {
            return;
        };
        if let Err(err) = self.store.note_agent_session(id, &self.note_of(session)) {
            tracing::warn!(%err, "the agent's session id is not noted");
        }
    }

    /// The current file's writer, the file created first when there is none. None when it
    /// cannot be (logged): the conversation goes on unsaved.
    fn writer_or_create(&self) -> Option<(Writer, usize)> {
        let mut slot = self.slot();
        if let Some(file) = slot.as_ref() {
            return Some((file.writer.clone(), file.saved));
        }
        match self.store.create(self.inner.name()) {
            Ok(writer) => {
                self.note(writer.id());
                let title = self
                    .title
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                if let Some(title) = title {
                    writer.write(super::shape::title_record(&title));
                }
                *slot = Some(File {
                    writer: writer.clone(),
                    saved: 0,
                });
                Some((writer, 0))
            }
            Err(err) => {
                tracing::warn!(%err, "this conversation is not saved");
                None
            }
        }
    }

    /// After the agent took up another of its sessions (a load or a resume): the file that
    /// session was saved in, when one was, goes on (once what was queued for the file before is
    /// on the disk, as it may be that file); else the next prompt starts a file of its own.
    async fn go_on_in_noted_file(&self) {
        let writer = self.writer();
        let store = self.store.clone();
        let note = self
            .inner
            .agent_session_id()
            .map(|session| self.note_of(session));
        // Off the runtime's threads: the flush waits for the writer, and finding the note
        // lists the saved conversations.
        let found = tokio::task::spawn_blocking(move || {
            if let Some(writer) = writer {
                writer.flush();
            }
            note.and_then(|note| store.noted(&note))
                .map(|noted| store.append(&noted))
        })
        .await
        .ok()
        .flatten();
        *self.slot() = match found {
            Some(Ok(writer)) => Some(File { writer, saved: 0 }),
            Some(Err(err)) => {
                tracing::warn!(%err, "the continued session's file cannot be appended to");
                None
            }
            None => None,
        };
    }
}

impl Conversation for Recorded {
    fn decorates(&self) -> Option<&Arc<dyn Conversation>> {
        Some(&self.inner)
    }

    fn prompt<'a>(
        &'a self,
        prompt: agent_nvim_llm::Prompt,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let Some((writer, from)) = self.writer_or_create() else {
                return self.inner.prompt(prompt, events, cancel).await;
            };
            let mut prompt = prompt;
            if !prompt.images.is_empty() {
                let store = self.store.clone();
                let mut images = prompt.images.clone();
                // Saved off the async threads; should that fail, they go unsaved, never lost.
                if let Ok(kept) = tokio::task::spawn_blocking(move || {
                    store.keep_images(&mut images);
                    images
                })
                .await
                {
                    prompt.images = kept;
                }
            }
            writer.write(Record::Prompt {
                text: prompt.text.clone(),
            });
            if !prompt.images.is_empty() {
                writer.write(Record::Images {
                    images: prompt.images.iter().map(SavedImage::from).collect(),
                });
            }
            let tapped = events.recorded_to(Arc::new(writer.clone()));
            let outcome = self.inner.prompt(prompt, &tapped, cancel).await;
            if let Some(gained) = self.inner.model_view(from).await {
                if let Some(file) = self.slot().as_mut() {
                    file.saved = from + gained.len();
                }
                // Written even when the turn gained nothing (it failed at once): a prompt with
                // no `model` record after it is a turn the session ended in the middle of.
                writer.write(Record::Model {
                    messages: gained.iter().map(Saved::from).collect(),
                });
            }
            outcome
        })
    }

    fn compact<'a>(
        &'a self,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async move {
            // Recorded, so a resumed conversation is sent what this one is sent.
            match self.writer() {
                Some(writer) => {
                    let tapped = events.recorded_to(Arc::new(writer));
                    self.inner.compact(&tapped, cancel).await
                }
                None => self.inner.compact(events, cancel).await,
            }
        })
    }

    fn reset(&self) -> BoxFuture<'_, Result<(), ConversationError>> {
        Box::pin(async move {
            self.inner.reset().await?;
            *self.slot() = None;
            self.branched
                .store(false, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        })
    }

    fn resume<'a>(
        &'a self,
        saved: &'a SavedConversation,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async move {
            // The file first: a resume that cannot be saved changes nothing, so the next prompt
            // never writes this history into the file held before.
            let writer = self
                .store
                .append(&saved.header.id)
                .map_err(|err| ConversationError::Store(Cause::new(err)))?;
            self.inner.resume(saved).await?;
            *self.slot() = Some(File {
                writer,
                saved: saved.model_len(),
            });
            self.branched
                .store(saved.has_branches(), std::sync::atomic::Ordering::SeqCst);
            Ok(())
        })
    }

    fn rewind(&self, turn: usize) -> BoxFuture<'_, Result<(), ConversationError>> {
        Box::pin(async move {
            self.inner.rewind(turn).await?;
            // The file says where the view was cut, so a resume sends only what is left.
            let Some(kept) = self.inner.model_view(0).await.map(|view| view.len()) else {
                return Ok(());
            };
            if let Some(file) = self.slot().as_mut() {
                file.saved = kept;
                file.writer.write(Record::Rewound { kept });
            }
            Ok(())
        })
    }

    fn branch(&self, turn: usize) -> BoxFuture<'_, Result<SavedConversation, ConversationError>> {
        Box::pin(async move {
            if self.writer().is_none() {
                return Err(unsaved());
            }
            self.inner.rewind(turn).await?;
            let Some(kept) = self.inner.model_view(0).await.map(|view| view.len()) else {
                return Err(self.unsupported("keep branches"));
            };
            if let Some(file) = self.slot().as_mut() {
                file.saved = kept;
                file.writer.write(Record::Branched { kept });
            }
            self.branched
                .store(true, std::sync::atomic::Ordering::SeqCst);
            self.saved_now().await
        })
    }

    fn switch_branch(
        &self,
        turn: usize,
        step: i64,
    ) -> BoxFuture<'_, Result<SavedConversation, ConversationError>> {
        Box::pin(async move {
            let mut saved = self.saved_now().await?;
            let Some(to) = saved.tree().switch_target(turn, step) else {
                return Err(ConversationError::Refused(format!(
                    "prompt {turn} has no {} branch",
                    if step < 0 { "earlier" } else { "later" }
                )));
            };
            let switched = Record::Switched { to };
            saved.records.push(switched.clone());
            self.inner.follow(&saved).await?;
            if let Some(file) = self.slot().as_mut() {
                file.saved = saved.model_len();
                file.writer.write(switched);
            }
            self.branched
                .store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(saved)
        })
    }

    fn branches(&self) -> BoxFuture<'_, Option<Vec<agent_nvim_conversation::saved::BranchAt>>> {
        Box::pin(async move {
            if !self.branched.load(std::sync::atomic::Ordering::SeqCst) {
                return None;
            }
            let saved = self.saved_now().await.ok()?;
            Some(saved.tree().branches())
        })
    }

    fn id(&self) -> Option<String> {
        self.slot()
            .as_ref()
            .map(|file| file.writer.id().to_string())
    }

    fn id_for_prompt(&self) -> Option<String> {
        self.writer_or_create()
            .map(|(writer, _)| writer.id().to_string())
    }

    fn named(&self, title: &str) {
        match self.writer() {
            Some(writer) => writer.write(super::shape::title_record(title)),
            None => {
                *self
                    .title
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(title.to_string());
            }
        }
    }

    fn decided(&self, tool: &str, decision: &Decision, note: &str) {
        if let Some(writer) = self.writer() {
            writer.write(Record::Decided {
                tool: tool.to_string(),
                decision: decision.clone(),
                note: note.to_string(),
            });
        }
    }

    fn load<'a>(
        &'a self,
        id: &'a str,
        events: &'a Events,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<String, ConversationError>> {
        Box::pin(async move {
            let title = self.inner.load(id, events, cancel).await?;
            self.go_on_in_noted_file().await;
            Ok(title)
        })
    }

    fn resume_agent_session<'a>(
        &'a self,
        id: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<(), ConversationError>> {
        Box::pin(async move {
            self.inner.resume_agent_session(id, cancel).await?;
            self.go_on_in_noted_file().await;
            Ok(())
        })
    }

    fn end(self: Arc<Self>) -> BoxFuture<'static, ()> {
        // What was recorded reaches the disk before the process may end (Neovim quitting),
        // waited for off the runtime's threads.
        let writer = self.writer();
        let inner = self.inner.clone();
        drop(self);
        Box::pin(async move {
            if let Some(writer) = writer {
                let _ = tokio::task::spawn_blocking(move || writer.flush()).await;
            }
            inner.end().await
        })
    }
}
