//! A slot: one live conversation, the one its chat's prompts go to, the session it belongs to,
//! and the turn machinery around it (the busy claim, the running turn's cancel token, the count
//! of cancels). One Neovim holds several ([`Slots`], by the number Lua gave each). The ACP
//! switching code ([`super::acp`]) is functions on it, and the bridge drives it; neither the
//! pump nor the adapters know it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};

use futures::future::BoxFuture;
use rmpv::Value;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::protocol::UiEvent;
use super::ui::Ui;
use super::Nvim;
use crate::conversation::Conversation;
use crate::session;
use crate::sessions::Store;
use crate::workspace::Workspace;

/// The most conversations one backend holds at once. The plugin's own limit
/// (`max_conversations`) is lower and says so first; this one bounds what a plugin bug could
/// start.
pub(super) const MAX_CONVERSATIONS: usize = 64;

/// Every live conversation's slot, by the number Lua gave it.
pub(super) struct Slots {
    /// The way to Lua they share (each slot speaks for its own conversation through it).
    ui: Ui,
    shutdown: CancellationToken,
    live: SyncMutex<BTreeMap<u64, Arc<Slot>>>,
}

impl Slots {
    pub(super) fn new(ui: Ui, shutdown: CancellationToken) -> Slots {
        Slots {
            ui,
            shutdown,
            live: SyncMutex::new(BTreeMap::new()),
        }
    }

    /// The way to Lua every conversation shares.
    pub(super) fn ui(&self) -> &Ui {
        &self.ui
    }

    fn live(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Slot>>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Conversation `id`'s slot, when it was started.
    pub(super) fn get(&self, id: u64) -> Option<Arc<Slot>> {
        self.live().get(&id).cloned()
    }

    /// Conversation `id`'s slot, an empty one made for it when it has none; None when
    /// [`MAX_CONVERSATIONS`] are live.
    pub(super) fn open(&self, id: u64) -> Option<Arc<Slot>> {
        let mut live = self.live();
        if let Some(slot) = live.get(&id) {
            return Some(slot.clone());
        }
        if live.len() >= MAX_CONVERSATIONS {
            return None;
        }
        let slot = Arc::new(Slot::new(
            id,
            self.ui.for_conversation(id),
            self.shutdown.child_token(),
        ));
        live.insert(id, slot.clone());
        Some(slot)
    }

    /// Takes conversation `id`'s slot out (`close`).
    pub(super) fn close(&self, id: u64) -> Option<Arc<Slot>> {
        self.live().remove(&id)
    }

    /// Every live conversation's slot.
    pub(super) fn all(&self) -> Vec<Arc<Slot>> {
        self.live().values().cloned().collect()
    }

    /// Every live conversation's slot but `id`'s.
    pub(super) fn others(&self, id: u64) -> Vec<Arc<Slot>> {
        self.live()
            .iter()
            .filter(|(other, _)| **other != id)
            .map(|(_, slot)| slot.clone())
            .collect()
    }
}

/// The session the `start` notification configured.
pub(super) struct Session {
    /// The built-in conversation (one that answers with the reason when the provider could not
    /// be configured): where prompts go until an external agent is started, and after `new`.
    pub(super) native: Arc<dyn Conversation>,
    /// The root, for an external agent's session.
    pub(super) workspace: Workspace,
    /// Whether everything is allowed without asking (external agents too).
    pub(super) auto_approve: bool,
    /// Where this workspace's conversations are saved; None without a state directory.
    pub(super) store: Option<Store>,
    /// The handle to Neovim, for an external agent's host.
    pub(super) nvim: Nvim,
    /// The workspace's checkpoints, for an external agent's session; None: off.
    pub(super) checkpoints: Option<crate::checkpoint::Checkpoints>,
    /// The rules of `setup({ permissions = ... })`, for `:Agent permissions`.
    pub(super) rules: crate::permissions::Rules,
    /// The rules saved for this workspace; None without a state directory.
    pub(super) project: Option<crate::permissions::saved::Project>,
    /// run_bash's sandbox, for an external agent started with `sandbox = true`.
    pub(super) sandbox: crate::sandbox::Sandbox,
    /// The workspace's files, for `@` completion (`files`).
    pub(super) files: Arc<crate::workspace::files::FileIndex>,
    /// How an external agent's terminals run: run_bash's timeout, shell, `pass_env` and rules.
    pub(super) terminal: crate::acp::TerminalSettings,
    /// The built-in conversation's provider, or why there is none (for `models`).
    pub(super) provider: std::result::Result<session::ProviderInfo, String>,
    /// The conversation's own git worktree (the workspace is in it), when it has one, and a
    /// digest of the patch last merged from it (`:Agent worktree remove` asks when what it
    /// holds now was not merged).
    pub(super) worktree: Option<(crate::worktree::Worktree, Arc<SyncMutex<Option<u64>>>)>,
    /// What an inline edit's own agent is built from ([`super::inline`]).
    pub(super) inline: InlineBase,
}

/// What an inline edit's agent is built from: the session's tools and provider choice.
pub(super) struct InlineBase {
    pub(super) tools: crate::tools::ToolContext,
    pub(super) choice: crate::llm::ProviderChoice,
    pub(super) max_turns: u32,
    pub(super) instructions: Vec<String>,
    /// The conversation's `max_cost`, and what it has spent (side questions and inline edits
    /// are held to it and counted in it).
    pub(super) max_cost: Option<f64>,
    pub(super) spend: crate::agent::Spend,
}

/// The conversation slot and its turns.
pub(super) struct Slot {
    /// The number Lua gave the conversation.
    pub(super) id: u64,
    /// When it was started, in seconds since the epoch (its age in `:Agent list`).
    pub(super) started: u64,
    /// The way to Lua.
    pub(super) ui: Ui,
    pub(super) session: Mutex<Option<Session>>,
    /// The conversation prompts go to: the built-in one or an external agent's (connected, or
    /// one that answers "still starting"). None until `start`.
    pub(super) conversation: Mutex<Option<Arc<dyn Conversation>>>,
    /// The running turn's cancel token.
    turn: SyncMutex<Option<CancellationToken>>,
    /// The running inline edits' cancel tokens, by the number Lua gave each.
    pub(super) inlines: SyncMutex<std::collections::HashMap<u64, CancellationToken>>,
    /// The images attached for its prompts (`attach`), until a prompt takes them.
    pub(super) images: super::context::Held,
    /// How many times the turn was cancelled (`cancel`, `new`, `resume`): a prompt waiting for
    /// the conversation compares it to drop itself when the person stopped meanwhile.
    cancels: AtomicU64,
    /// Held by a running turn; taking it waits for the turn to end.
    pub(super) busy: Arc<Mutex<()>>,
    /// Held by a turn that has ended while it works out what its prompt changed (the done
    /// row's `Reviewable` note, after `busy` is let go); the next turn waits for it before it
    /// starts, so the note reaches the chat before that turn's events, for the row it belongs to.
    pub(super) settling: Arc<Mutex<()>>,
    pub(super) shutdown: CancellationToken,
    /// The private channel of the external agent's editor tools (`editor_tools`), while it
    /// runs: closed when replaced or dropped.
    pub(super) editor: SyncMutex<Option<super::editor::Channel>>,
}

impl Slot {
    /// An empty slot sending to Lua through `ui`; its turns stop at `shutdown`.
    pub(super) fn new(id: u64, ui: Ui, shutdown: CancellationToken) -> Self {
        Slot {
            id,
            started: crate::display::now(),
            ui,
            session: Mutex::new(None),
            conversation: Mutex::new(None),
            turn: SyncMutex::new(None),
            inlines: SyncMutex::default(),
            images: super::context::Held::default(),
            cancels: AtomicU64::new(0),
            busy: Arc::new(Mutex::new(())),
            settling: Arc::new(Mutex::new(())),
            shutdown,
            editor: SyncMutex::new(None),
        }
    }

    /// Stops the running turn (`cancel`, `new`, `resume`): its token fired, what the
    /// conversation runs beyond it stopped, and every open question answered.
    pub(super) fn cancel_turn(self: &Arc<Self>) {
        self.cancels.fetch_add(1, Ordering::SeqCst);
        if let Ok(turn) = self.turn.lock() {
            if let Some(token) = turn.as_ref() {
                token.cancel();
            }
        }
        // What the conversation runs beyond the turn (an external agent's terminals) stops too.
        if tokio::runtime::Handle::try_current().is_ok() {
            let slot = self.clone();
            tokio::spawn(async move {
                let conversation = slot.conversation.lock().await.clone();
                if let Some(conversation) = conversation {
                    conversation.stop();
                }
            });
        }
        // Every open question is answered: the picker may be closed by the Lua side.
        self.ui.drop_questions();
    }

    /// Stops every inline edit of this conversation (`close`): Lua stops one with
    /// `inline_stop`, and a cancel of the conversation's turn (`:Agent stop`, `new`, `resume`)
    /// leaves them running in their buffers.
    pub(super) fn stop_inlines(&self) {
        if let Ok(inlines) = self.inlines.lock() {
            for token in inlines.values() {
                token.cancel();
            }
        }
    }

    /// Resolves when no turn is running.
    pub(super) async fn idle(&self) {
        let _ = self.busy.lock().await;
    }

    /// Makes `next` the conversation prompts go to, and ends the one it replaces.
    pub(super) async fn switch_to(&self, next: Arc<dyn Conversation>) {
        if let Some(replaced) = self.replace_conversation(next).await {
            replaced.await;
        }
    }

    /// Makes `next` the conversation prompts go to; the end of the one it replaces (if another)
    /// is left to the caller, to await or to spawn.
    pub(super) async fn replace_conversation(
        &self,
        next: Arc<dyn Conversation>,
    ) -> Option<BoxFuture<'static, ()>> {
        let replaced = self.conversation.lock().await.replace(next.clone());
        let replaced = replaced.filter(|old| !Arc::ptr_eq(old, &next))?;
        tracing::info!(name = replaced.name(), "ending a conversation");
        // An external agent's conversation spends nothing of the built-in one's: its inline
        // edits are counted from $0 (the built-in one, switched back to, is reset or resumed).
        if next.agent().is_some() {
            if let Ok(spend) = self
                .of_session(|session| session.inline.spend.clone())
                .await
            {
                spend.start_over(0.0);
            }
        }
        // Its editor tools (an external agent's) close with it.
        self.close_editor_tools();
        Some(replaced.end())
    }

    /// Closes the editor tools' channel, if open: its socket stops answering, its folder goes.
    fn close_editor_tools(&self) {
        let closed = self.editor.lock().ok().and_then(|mut editor| editor.take());
        drop(closed);
    }

    /// Ends the conversation prompts go to (Neovim is going): an external agent's stdin is
    /// closed, and its process tree killed 2 s later.
    pub(super) async fn end_conversation(&self) {
        let ended = self.conversation.lock().await.take();
        self.close_editor_tools();
        if let Some(ended) = ended {
            tracing::info!(name = ended.name(), "ending a conversation");
            ended.end().await;
        }
    }

    /// How many times the turn has been cancelled so far.
    pub(super) fn cancels(&self) -> u64 {
        self.cancels.load(Ordering::SeqCst)
    }

    /// The cancel token of the turn starting now (`busy` is held), which `cancel` stops.
    pub(super) fn begin_turn(&self) -> CancellationToken {
        let token = self.shutdown.child_token();
        if let Ok(mut turn) = self.turn.lock() {
            *turn = Some(token.clone());
        }
        token
    }

    /// Runs `work` with the conversation claimed (`busy`), then lets it go and sends `idle`:
    /// the chat sends a prompt queued meanwhile on that, and one that came anyway has waited
    /// for the claim (the bridge's `turn`).
    pub(super) fn claimed<F>(self: &Arc<Self>, work: impl FnOnce(Arc<Slot>) -> F + Send + 'static)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let slot = self.clone();
        tokio::spawn(async move {
            let busy = slot.busy.clone().lock_owned().await;
            work(slot.clone()).await;
            drop(busy);
            slot.ui.send(UiEvent::Idle);
        });
    }

    /// Forgets the finished turn's cancel token and its path for questions.
    pub(super) fn end_turn(&self) {
        if let Ok(mut turn) = self.turn.lock() {
            *turn = None;
        }
        self.ui.end_turn_path();
    }

    /// Where this conversation's images are saved (None without a state directory).
    pub(super) async fn images_dir(&self) -> Option<std::path::PathBuf> {
        self.of_session(|session| session.store.as_ref().map(|store| store.images_dir()))
            .await
            .ok()
            .flatten()
    }

    /// What `pick` takes of the session; the error Lua shows when there is none yet.
    pub(super) async fn of_session<T>(
        &self,
        pick: impl FnOnce(&Session) -> T,
    ) -> std::result::Result<T, Value> {
        self.session
            .lock()
            .await
            .as_ref()
            .map(pick)
            .ok_or_else(|| Value::from("agent: the backend was not started; run :Agent again"))
    }
}
