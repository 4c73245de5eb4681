//! The conversation a message from Lua is addressed to ([`Target`]): its slot, and what the
//! handler shares with it. Every message but `decide` and `proposal` (which name a question,
//! and questions know their conversation) is for one conversation, and is carried out here:
//! its session started, its turns run, resumed, rewound, its model switched, its saved
//! conversations and checkpoints listed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmpv::Value;

use super::adapters::{NvimAsker, NvimEditor};
use super::protocol::{self, lua, method, Prompt, Resume, Rewind, Start, UiEvent, PROTOCOL};
use super::slot::{Session, Slot};
use super::Nvim;
use crate::agent::DEFAULT_MAX_TURNS;
use crate::approval::Asker;
use crate::conversation::{ConversationError, Events};
use crate::display;
use crate::llm::ProviderChoice;
use crate::session::{self, SessionConfig};
use crate::sessions::resume::{self, ResumeError};
use crate::sessions::Store;
use agent_nvim_vocab::conversation::ConversationEvent;

/// The conversation a message is for: its slot, and what the handler shares with every
/// conversation.
#[derive(Clone)]
pub(super) struct Target {
    pub(super) slot: Arc<Slot>,
    /// Every live conversation (a rewind asks what the others changed).
    pub(super) slots: Arc<super::slot::Slots>,
    /// The greatest `seq` of a `files` query Lua sent: an older one still waiting is not
    /// answered.
    pub(super) files_latest: Arc<std::sync::atomic::AtomicU64>,
}

/// A prompt sent as a new branch: from before prompt `turn` of the current branch, and for
/// `again` that prompt sent again (the answer regenerated).
#[derive(Debug, Clone, Copy)]
struct BranchFrom {
    turn: usize,
    again: bool,
}

impl Target {
    pub(super) fn send(&self, event: UiEvent) {
        self.slot.ui.send(event);
    }

    pub(super) fn error(&self, message: impl Into<String>) {
        self.slot.ui.error(message);
    }

    pub(super) async fn start(&self, mut start: Start, nvim: Nvim) {
        let auto_approve = start.auto_approve;
        // A conversation of its own worktree: made first, and the workspace is in it.
        let worktree = match start.worktree.take() {
            Some(asked) => match make_worktree(&start, asked).await {
                Ok((worktree, root)) => {
                    tracing::info!(branch = %worktree.branch, dir = %worktree.dir.display(), "a worktree was made");
                    start.workspace = root.display().to_string();
                    Some(worktree)
                }
                Err(message) => return self.error(message),
            },
            None => None,
        };
        // Rules that cannot be read start no session: running without the deny rules a person
        // wrote would be worse than not running. So does a sandbox that cannot be read.
        let config = match session_config(start) {
            Ok(config) => config,
            Err(err) => {
                tracing::warn!(%err, "the start message's settings cannot be read");
                return self.error(err);
            }
        };
        let ui = self.slot.ui.clone();
        let asker_nvim = nvim.clone();
        let asker: session::AskerFor<'_> = Box::new(move |workspace, settings| {
            Some(Arc::new(NvimAsker {
                nvim: asker_nvim,
                ui: ui.clone(),
                cwd: workspace.root().display().to_string(),
                timeout: settings.command_timeout.as_secs_f64(),
            }) as Arc<dyn Asker>)
        });
        let editor = Arc::new(NvimEditor { nvim: nvim.clone() });
        let built = match session::build(&config, asker, editor) {
            Ok(built) => built,
            Err(err) => return self.error(err.to_string()),
        };
        if let Some(checkpoints) = built.checkpoints.clone() {
            tokio::spawn(async move { checkpoints.warm().await });
        }
        let checkpoints = built.checkpoints.clone();
        let store = built.store.clone();
        let rules = config.rules.clone();
        let project = config.saved_rules.as_deref().map(|dir| {
            crate::permissions::saved::Project::new(
                crate::permissions::saved::Saved::new(dir),
                built.workspace.root(),
            )
        });
        let inline = super::slot::InlineBase {
            tools: built.tools.clone(),
            choice: config.provider.clone(),
            max_turns: config.max_turns,
            instructions: config.instructions.clone(),
            max_cost: config.max_cost,
            spend: built.spend.clone(),
        };
        // A missing key is reported when a prompt needs the provider, not now: a session that
        // only drives an external agent (ACP) never does.
        let (workspace, native, provider) = built.into_conversation(&no_provider);
        let provider = provider.map_err(|err| no_provider(&err));
        let root = workspace.root().display().to_string();
        let terminal_sandbox = config.settings.sandbox.policy(workspace.root());
        let (sandbox_report, _) = session::sandbox_report(&config, workspace.root());
        tracing::info!(sandbox = %sandbox_report.summary, "sandbox");
        let sandbox_warnings = display::sandbox_warnings(&sandbox_report);
        let branch = worktree.as_ref().map(|w| w.branch.clone());
        let started = match &provider {
            Ok(p) => UiEvent::Started {
                version: env!("CARGO_PKG_VERSION").to_string(),
                protocol: PROTOCOL,
                provider: p.kind.name().to_string(),
                model: p.model.clone(),
                default_model: p.kind.default_model().to_string(),
                base_url: p.base_url.clone(),
                models: crate::llm::models::offered(p.kind),
                unavailable: None,
                workspace: root.clone(),
                worktree: branch.clone(),
                sandbox: sandbox_report.summary,
                sandbox_warnings,
            },
            Err(why) => UiEvent::Started {
                version: env!("CARGO_PKG_VERSION").to_string(),
                protocol: PROTOCOL,
                provider: String::new(),
                model: String::new(),
                default_model: String::new(),
                base_url: String::new(),
                models: Vec::new(),
                unavailable: Some(why.clone()),
                workspace: root.clone(),
                worktree: branch.clone(),
                sandbox: sandbox_report.summary,
                sandbox_warnings,
            },
        };
        // Listed now, so the first `@` in the input does not wait for the walk.
        let files = crate::workspace::files::FileIndex::new(workspace.root());
        let warming = files.clone();
        tokio::spawn(async move { warming.warm().await });
        match &provider {
            Ok(p) => {
                tracing::info!(%root, provider = p.kind.name(), model = %p.model, auto_approve, "session started")
            }
            Err(_) => tracing::info!(%root, auto_approve, "session started without a provider"),
        }
        *self.slot.session.lock().await = Some(Session {
            native: native.clone(),
            workspace,
            auto_approve,
            store,
            nvim,
            checkpoints,
            rules,
            project,
            sandbox: config.settings.sandbox.clone(),
            files,
            terminal: crate::acp::TerminalSettings {
                timeout: config.settings.command_timeout,
                shell: config.settings.shell.clone(),
                pass_env: config.settings.pass_env.clone(),
                rules: config.rules.clone(),
                sandbox: terminal_sandbox,
            },
            provider,
            worktree: worktree.map(|w| (w, Arc::default())),
            inline,
        });
        // Not awaited here: an external agent takes seconds to end, and notifications wait.
        if let Some(ended) = self.slot.replace_conversation(native).await {
            tokio::spawn(ended);
        }
        self.send(started);
    }

    pub(super) async fn prompt(&self, prompt: Prompt) {
        let (mut images, mut audio) = (Vec::new(), Vec::new());
        for id in prompt.images {
            match self.slot.images.get(id) {
                Some(super::context::Media::Image(image)) => images.push(image),
                Some(super::context::Media::Audio(clip)) => audio.push(clip),
                None => {
                    return self.error(
                        "agent: an image or audio clip of this prompt is no longer held (the backend restarted?); attach it again and send the prompt again",
                    )
                }
            }
        }
        let branch = prompt.branch.map(|turn| BranchFrom {
            turn,
            again: prompt.again,
        });
        self.turn_from(
            Some(crate::llm::Prompt {
                text: prompt.text,
                images,
                audio,
            }),
            branch,
        )
        .await
    }

    /// Starts the new branch a prompt asked for, before it runs (the conversation claimed):
    /// the branch cut kept, the chat drawn again as the new one, and the prompt shown. Answers
    /// the prompt to send: `prompt`, or for `again` the one sent there before.
    async fn branched(
        &self,
        conversation: &Arc<dyn crate::conversation::Conversation>,
        from: BranchFrom,
        prompt: crate::llm::Prompt,
    ) -> std::result::Result<crate::llm::Prompt, String> {
        let prompt = if from.again {
            let view = conversation.model_view(0).await.ok_or_else(|| {
                format!(
                    "agent: {} keeps its own history; its answers cannot be regenerated here",
                    conversation.name()
                )
            })?;
            match crate::conversation::prompt_start(&view, from.turn).and_then(|at| view.get(at)) {
                Some(crate::llm::Message::User(sent)) => sent.clone(),
                _ => {
                    return Err(format!(
                        "agent: there is no prompt {} to send again",
                        from.turn
                    ))
                }
            }
        } else {
            prompt
        };
        let saved = conversation
            .branch(from.turn)
            .await
            .map_err(|err| format!("agent: no new branch: {err}"))?;
        let images = self.slot.images_dir().await;
        for event in super::replay::branch_events(&saved, images) {
            self.send(event);
        }
        self.send(UiEvent::Prompt {
            text: prompt.text.clone(),
        });
        Ok(prompt)
    }

    /// `branch`: the current conversation switched to another branch at a prompt, and the chat
    /// drawn again as it. Refused while a turn runs.
    pub(super) fn switch_branch(&self, switch: protocol::BranchSwitch) {
        let Ok(busy) = self.slot.busy.clone().try_lock_owned() else {
            return self.error(
                "agent: a turn is running; wait for it or stop it (:Agent stop) before switching branches",
            );
        };
        let bridge = self.clone();
        tokio::spawn(async move {
            // The turn before may still be sending its done row's note: it goes first.
            drop(bridge.slot.settling.lock().await);
            let conversation = bridge.slot.conversation.lock().await.clone();
            let Some(conversation) = conversation else {
                return bridge.error("agent: the backend was not started; run :Agent again");
            };
            match conversation.switch_branch(switch.turn, switch.step).await {
                Ok(saved) => {
                    let images = bridge.slot.images_dir().await;
                    for event in super::replay::branch_events(&saved, images) {
                        bridge.send(event);
                    }
                    bridge.send(UiEvent::Idle);
                }
                Err(err) => bridge.error(format!("agent: {err}")),
            }
            drop(busy);
        });
    }

    /// `prompt_text`: the text prompt `turn` of the current branch was sent with.
    async fn prompt_text(&self, args: &[Value]) -> Result<Value, Value> {
        #[derive(serde::Deserialize)]
        struct Asked {
            turn: usize,
        }
        let asked: Asked = super::context::decode(args)?;
        // Neovim waits for this answer: never behind a running turn (which holds the history).
        let _busy = self.slot.busy.clone().try_lock_owned().map_err(|_| {
            Value::from("agent: a turn is running; edit a prompt once it has ended")
        })?;
        let conversation = self.slot.conversation.lock().await.clone();
        let conversation = conversation
            .ok_or_else(|| Value::from("agent: the backend was not started; run :Agent again"))?;
        let view = conversation.model_view(0).await.ok_or_else(|| {
            Value::from(format!(
                "agent: {} keeps its own history; its prompts cannot be edited into branches here",
                conversation.name()
            ))
        })?;
        match crate::conversation::prompt_start(&view, asked.turn).and_then(|at| view.get(at)) {
            Some(crate::llm::Message::User(sent)) => Ok(Value::from(sent.text.as_str())),
            _ => Err(Value::from(format!(
                "agent: there is no prompt {} in this conversation",
                asked.turn
            ))),
        }
    }

    /// Runs a turn: the prompt `text`, or a compaction (`:Agent compact`) without one. Either
    /// holds `busy` to its end, can be stopped with `cancel`, and ends with `idle`.
    async fn turn(&self, text: Option<crate::llm::Prompt>) {
        self.turn_from(text, None).await
    }

    /// [`Target::turn`], a prompt sent as a new branch when `branch` says so.
    async fn turn_from(&self, text: Option<crate::llm::Prompt>, branch: Option<BranchFrom>) {
        match self.slot.busy.clone().try_lock_owned() {
            Ok(busy) => self.run_turn(busy, text, branch).await,
            // Something else has the conversation (a resume replaying, a rewind, a turn the
            // chat did not know of yet): the prompt waits for it, as a queued one does, and is
            // never dropped. The lock is fair, so prompts go in the order they came.
            Err(_) => {
                tracing::info!("a prompt waits for the conversation to be free");
                let bridge = self.clone();
                let busy = self.slot.busy.clone();
                let before = self.slot.cancels();
                tokio::spawn(async move {
                    let busy = busy.lock_owned().await;
                    if bridge.slot.cancels() == before {
                        return bridge.run_turn(busy, text, branch).await;
                    }
                    // Stopped (or started over) while it waited: it never starts, and its row
                    // ends as a cancelled turn does.
                    drop(busy);
                    bridge.send(UiEvent::Agent(agent_nvim_vocab::events::Event::TurnDone {
                        input: 0,
                        output: 0,
                        outcome: agent_nvim_vocab::events::Outcome::Cancelled,
                        message: "cancelled".into(),
                        cost: None,
                    }));
                    bridge.send(UiEvent::Idle);
                });
            }
        }
    }

    /// [`Bridge::turn`] with the conversation claimed.
    async fn run_turn(
        &self,
        busy: tokio::sync::OwnedMutexGuard<()>,
        text: Option<crate::llm::Prompt>,
        branch: Option<BranchFrom>,
    ) {
        let conversation = self.slot.conversation.lock().await.clone();
        let Some(conversation) = conversation else {
            return self.error("agent: the backend was not started; run :Agent again");
        };
        let token = self.slot.begin_turn();
        let bridge = self.clone();
        let (events, forwarder) = self.slot.ui.turn_path::<ConversationEvent>();
        let events = Events::new(events);
        tokio::spawn(async move {
            let forwarder = tokio::spawn(forwarder);
            // The turn before may still be sending its done row's note.
            drop(bridge.slot.settling.lock().await);
            let checkpoints = bridge.slot.of_session(|s| s.checkpoints.clone()).await;
            let checkpoints = checkpoints.ok().flatten();
            let before = checkpoints.as_ref().and_then(|c| c.last_prompt());
            let outcome = match (text, branch) {
                (Some(text), None) => conversation.prompt(text, &events, &token).await,
                (Some(text), Some(from)) => {
                    match bridge.branched(&conversation, from, text).await {
                        Ok(text) => conversation.prompt(text, &events, &token).await,
                        Err(message) => {
                            // A turn that never started: said, and ended as one (the chat
                            // puts the typed text back).
                            let report = |event| crate::agent::Report::report(&events, event);
                            report(agent_nvim_vocab::events::Event::Error {
                                message: message.clone(),
                            });
                            report(agent_nvim_vocab::events::Event::TurnDone {
                                input: 0,
                                output: 0,
                                outcome: agent_nvim_vocab::events::Outcome::Failed,
                                message,
                                cost: None,
                            });
                            agent_nvim_vocab::events::Outcome::Failed
                        }
                    }
                }
                (None, _) => match conversation.compact(&events, &token).await {
                    Ok(()) => agent_nvim_vocab::events::Outcome::Done,
                    Err(err) => {
                        crate::agent::Report::report(
                            &events,
                            agent_nvim_vocab::events::Event::Error {
                                message: format!("agent: {err}"),
                            },
                        );
                        agent_nvim_vocab::events::Outcome::Failed
                    }
                },
            };
            drop(events);
            let _ = forwarder.await;
            tracing::info!(name = conversation.name(), ?outcome, "turn ended");
            // Where the branch now has siblings: the chat marks those prompts.
            if let Some(at) = conversation.branches().await {
                bridge.send(UiEvent::Branches {
                    at: at.into_iter().map(Into::into).collect(),
                });
            }
            // Read while still busy, so it cannot be the next prompt's.
            let taken = checkpoints
                .as_ref()
                .and_then(|c| c.last_prompt())
                .filter(|id| Some(id) != before.as_ref());
            bridge.slot.end_turn();
            // Taken before `busy` is let go, so no next turn can start in between.
            let settling = bridge.slot.settling.clone().lock_owned().await;
            // The turn lets go of the conversation before it is idle, so whoever waits for that
            // to end the conversation holds the last handle.
            drop(conversation);
            drop(busy);
            // Only now is the next prompt taken: the chat sends its queued one on this.
            bridge.send(UiEvent::Idle);
            // After the turn is over: the next prompt is accepted at once, and its turn waits
            // for git only to start.
            if let (Some(checkpoints), Some(id)) = (checkpoints, taken) {
                if let Some(note) = super::review::reviewable(&checkpoints, &id).await {
                    bridge.send(note);
                }
            }
            drop(settling);
        });
    }

    /// `choose`: hands the choice to the conversation, off the notification loop (the agent
    /// may take its time); what it could not do is shown as an error.
    pub(super) async fn choose(&self, choose: protocol::Choose) {
        let choice = match (choose.kind.as_str(), choose.value) {
            ("mode", _) => crate::conversation::Choice::Mode(choose.id),
            ("login", _) => crate::conversation::Choice::Login(choose.id),
            ("logout", _) => crate::conversation::Choice::Logout,
            ("option", Some(value)) => crate::conversation::Choice::Option {
                id: choose.id,
                value,
            },
            (kind, _) => {
                return self.error(format!(
                    "agent: bad choose message (kind {kind:?} without what it needs)"
                ))
            }
        };
        let Some(conversation) = self.slot.conversation.lock().await.clone() else {
            return self.error("agent: the backend was not started; run :Agent again");
        };
        let bridge = self.clone();
        tokio::spawn(async move {
            if let Err(err) = conversation.choose(choice).await {
                bridge.error(format!("agent: {err}"));
            }
        });
    }

    /// `new`: cancels the turn, ends an external agent, and starts the built-in conversation
    /// over (history and session grants forgotten).
    pub(super) fn new_conversation(&self) {
        self.slot.cancel_turn();
        let bridge = self.clone();
        tokio::spawn(async move {
            bridge.slot.idle().await;
            let native = bridge
                .slot
                .session
                .lock()
                .await
                .as_ref()
                .map(|s| s.native.clone());
            let Some(native) = native else {
                return;
            };
            bridge.slot.switch_to(native.clone()).await;
            if let Err(err) = native.reset().await {
                tracing::warn!(%err, "the conversation did not start over");
            }
        });
    }

    /// `resume {id}`: cancels the turn, makes the built-in conversation the current one again,
    /// sends the chat every saved event as the file is read (Lua has cleared it), gives the
    /// conversation the saved history, then sends `resumed`. No prompt runs meanwhile.
    pub(super) fn resume(&self, resume: Resume) {
        if super::acp::is_agent_session(&resume.id) {
            return self.slot.resume_external(resume.id);
        }
        self.slot.cancel_turn();
        let others = self.slots.others(self.slot.id);
        self.slot.claimed(move |slot| async move {
            // One conversation, one file: a conversation open in another tab page is gone to
            // there, never resumed twice (both would append to its file).
            for other in others {
                let open = other.conversation.lock().await.clone();
                if open.and_then(|c| c.id()).as_deref() == Some(resume.id.as_str()) {
                    return slot.ui.error(format!(
                        "agent: that conversation is open already (conversation {}); go to it with :Agent list",
                        other.id
                    ));
                }
            }
            let session = slot.session.lock().await;
            let Some((native, store)) = session
                .as_ref()
                .map(|s| (s.native.clone(), s.store.clone()))
            else {
                return slot.ui.error("agent: the backend was not started; run :Agent again");
            };
            drop(session);
            let header = match resume::header(store.as_ref(), Some(&resume.id)) {
                Ok(header) => header,
                Err(err) => return slot.ui.error(format!("agent: {err}")),
            };
            let Some(store) = store else {
                return;
            };
            if let Err(err) = resume::continues(native.as_ref(), &header) {
                if slot.resume_noted(&store, &header).await {
                    return;
                }
                return slot.ui.error(format!("agent: {err}"));
            }
            slot.switch_to(native.clone()).await;
            let (saved, rows) = match super::replay::show(
                &slot.ui,
                store,
                resume.id.clone(),
                super::replay::Branches::DrawnAfter,
            )
            .await {
                Ok(shown) => shown,
                Err(err) => return slot.ui.error(err),
            };
            // The history the model gets is a copy of megabytes: made once the rows are on
            // screen, so it does not take the cores they are drawn with (bounded: a Neovim
            // that has stopped taking events must not hold the resume).
            let _ =
                tokio::time::timeout(Duration::from_secs(2), slot.ui.shown().reach(rows)).await;
            if let Err(err) = resume::continue_in(native.as_ref(), &saved).await {
                let err = match err {
                    ResumeError::NotContinued(err) => err.to_string(),
                    other => other.to_string(),
                };
                return slot.ui.error(format!(
                    "agent: the conversation is shown but cannot be continued ({err}); the next prompt starts a new one"
                ));
            }
            // The last turn's done row offers its diff as it did live; the older rows' notes
            // (a git diff each) come once the chat is shown, from a task of their own.
            let checkpoints = slot.of_session(|s| s.checkpoints.clone()).await;
            if let Some(checkpoints) = checkpoints.ok().flatten() {
                let prompts = super::review::prompt_points(&checkpoints).await;
                if let Some(last) = prompts.last() {
                    if let Some(note) = super::review::reviewable(&checkpoints, &last.id).await {
                        slot.ui.send(note);
                    }
                }
                let notes = slot.ui.clone();
                tokio::spawn(async move {
                    for note in super::review::older_reviewable(&checkpoints, &prompts).await {
                        notes.send(note);
                    }
                });
            }
            // A conversation with branches is drawn again as the one last used (the rows above
            // are the whole file, every branch in it).
            if saved.has_branches() {
                let images = slot.images_dir().await;
                for event in super::replay::branch_events(&saved, images) {
                    slot.ui.send(event);
                }
            }
            slot.ui.send(UiEvent::Resumed {
                id: saved.header.id.clone(),
                title: saved.title(),
            });
        });
    }

    /// `rewind`: goes back to before a prompt of the current conversation, as
    /// `front/nvim/rewind.rs` does it, and tells the chat (`rewound`) or says why nothing
    /// changed. Refused while a turn runs; no prompt runs meanwhile.
    pub(super) fn rewind(&self, rewind: Rewind) {
        let Ok(busy) = self.slot.busy.clone().try_lock_owned() else {
            return self.error(
                "agent: a turn is running; wait for it or cancel it (:Agent stop) before rewinding",
            );
        };
        let bridge = self.clone();
        tokio::spawn(async move {
            match bridge.rewound(&rewind).await {
                Ok(Some(done)) => bridge.send(UiEvent::Rewound {
                    turn: rewind.turn,
                    cut: done.cut,
                    message: Some(done.message),
                    prompt: done.prompt,
                }),
                // The person is asked about other conversations' changes first.
                Ok(None) => {}
                Err(message) => bridge.error(message),
            }
            drop(busy);
        });
    }

    /// The rewind itself: the point found among the current conversation's, then the step.
    /// None when nothing was done yet: the code would undo what other live conversations of
    /// the workspace changed since, and the person is asked first (`rewind_ask`).
    async fn rewound(
        &self,
        rewind: &Rewind,
    ) -> std::result::Result<Option<super::rewind::Done>, String> {
        let session = self.slot.session.lock().await;
        let Some((checkpoints, nvim)) = session
            .as_ref()
            .map(|s| (s.checkpoints.clone(), s.nvim.clone()))
        else {
            return Err("agent: the backend was not started; run :Agent again".into());
        };
        drop(session);
        let conversation = self.slot.conversation.lock().await.clone();
        let Some(conversation) = conversation else {
            return Err("agent: the backend was not started; run :Agent again".into());
        };
        let editor = NvimEditor { nvim };
        if rewind.mode == protocol::RewindMode::Undo {
            return super::rewind::undo(checkpoints.as_ref(), &editor)
                .await
                .map(Some);
        }
        let id = match &checkpoints {
            Some(checkpoints) => match checkpoints.points(&checkpoints.conversation()).await {
                Ok(points) => match points.into_iter().find(|point| point.turn == rewind.turn) {
                    Some(point) => point.id,
                    // Cutting the history needs no checkpoint (the conversation says whether
                    // it has that prompt).
                    None if !rewind.mode.code() => String::new(),
                    None => {
                        let no_such = ConversationError::NoSuchPrompt(rewind.turn);
                        return Err(format!("agent: {no_such}"));
                    }
                },
                // Without the checkpoints, the history can still be cut.
                Err(err) if rewind.mode.code() => return Err(format!("agent: {err}")),
                Err(_) => String::new(),
            },
            None => String::new(),
        };
        let mut spare = std::collections::BTreeSet::new();
        if let (Some(checkpoints), true) = (&checkpoints, rewind.mode.code()) {
            let (theirs, by) = self.others_changes(checkpoints, &id).await;
            match rewind.others {
                _ if theirs.is_empty() => {}
                None => {
                    self.send(UiEvent::RewindAsk {
                        turn: rewind.turn,
                        mode: rewind.mode.word().to_string(),
                        files: theirs
                            .iter()
                            .map(|path| path.display().to_string())
                            .collect(),
                        by,
                    });
                    return Ok(None);
                }
                Some(protocol::Others::Keep) => spare = theirs,
                Some(protocol::Others::Restore) => {}
            }
        }
        super::rewind::rewind(
            rewind.mode,
            rewind.turn,
            &id,
            checkpoints.as_ref(),
            conversation.as_ref(),
            &editor,
            &spare,
        )
        .await
        .map(Some)
    }

    /// What restoring checkpoint `id` would undo of other live conversations' work: the files
    /// they changed since it (their own allowed changes, [`Checkpoints::changed_by`]) that the
    /// restore would put back, and the numbers of those conversations. Only conversations of
    /// the same workspace (the same shadow repository) count; one whose changes cannot be read
    /// is logged and left out.
    async fn others_changes(
        &self,
        checkpoints: &crate::checkpoint::Checkpoints,
        id: &str,
    ) -> (std::collections::BTreeSet<PathBuf>, Vec<u64>) {
        let mut files = std::collections::BTreeSet::new();
        let mut by = Vec::new();
        let others = self.slots.others(self.slot.id);
        if others.is_empty() {
            return (files, by);
        }
        let restored: std::collections::BTreeSet<PathBuf> = match checkpoints.changes(id).await {
            Ok(changes) => changes.into_iter().map(|change| change.path).collect(),
            Err(err) => {
                tracing::warn!(%err, "what a rewind restores could not be listed");
                return (files, by);
            }
        };
        for other in others {
            let theirs = other.of_session(|s| s.checkpoints.clone()).await;
            let Some(theirs) = theirs.ok().flatten() else {
                continue;
            };
            if theirs.dir() != checkpoints.dir() {
                continue;
            }
            match checkpoints.changed_by(&theirs.conversation(), id).await {
                Ok(changed) => {
                    let undone: Vec<PathBuf> = changed.intersection(&restored).cloned().collect();
                    if !undone.is_empty() {
                        by.push(other.id);
                        files.extend(undone);
                    }
                }
                Err(err) => {
                    tracing::warn!(%err, "another conversation's changes could not be read")
                }
            }
        }
        (files, by)
    }

    /// `sessions`: this workspace's saved conversations and the running external agent's own
    /// sessions, the most recent first, for Lua.
    async fn sessions(&self) -> std::result::Result<Value, Value> {
        let store = self.slot.of_session(|s| s.store.clone()).await?;
        // Off the runtime's threads: the list reads every saved conversation of the workspace.
        let listed = match store.clone() {
            Some(store) => tokio::task::spawn_blocking(move || store.list())
                .await
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let now = display::now();
        let mut noted = std::collections::HashSet::new();
        let mut listed: Vec<(u64, serde_json::Value)> = listed
            .into_iter()
            .map(|mut listed| {
                listed.title = display::one_line(&listed.title);
                listed.problem = listed.problem.map(|p| display::one_line(&p));
                let updated = listed.updated;
                // An agent's session saved here is marked with the agent's name.
                let note = listed
                    .problem
                    .is_none()
                    .then(|| store.as_ref()?.agent_session(&listed.id))
                    .flatten();
                let mut row = serde_json::to_value(listed).unwrap_or_default();
                if row.get("problem").is_none() {
                    row["age"] = serde_json::Value::from(display::age_at(updated, now));
                }
                if let Some(note) = note {
                    row["agent"] = serde_json::Value::from(display::one_line(&note.agent));
                    noted.insert(note);
                }
                (updated, row)
            })
            .collect();
        listed.extend(self.slot.agent_session_rows(&noted, now).await);
        listed.sort_by_key(|(updated, _)| std::cmp::Reverse(*updated));
        Ok(Value::Array(
            listed
                .into_iter()
                .map(|(_, row)| super::pump::to_msgpack(row))
                .collect(),
        ))
    }
}

impl Target {
    /// `{remove = RULE}` names, when it does.
    async fn permissions(&self, args: &[Value]) -> std::result::Result<Value, Value> {
        let (rules, project) = self
            .slot
            .of_session(|s| (s.rules.clone(), s.project.clone()))
            .await?;
        let remove = match args.first() {
            Some(Value::Map(opts)) => opts
                .iter()
                .find(|(k, _)| k.as_str() == Some("remove"))
                .and_then(|(_, v)| v.as_str().map(str::to_string)),
            _ => None,
        };
        if let Some(rule) = remove {
            let Some(project) = &project else {
                return Err(Value::from(
                    "agent: no rules are saved without a state directory",
                ));
            };
            match project.remove(&rule) {
                Ok(true) => tracing::info!("a saved rule was removed"),
                Ok(false) => {
                    return Err(Value::from(format!(
                        "agent: {} is not a rule saved for this project",
                        display::one_line(&rule)
                    )))
                }
                Err(err) => return Err(Value::from(format!("agent: {err}"))),
            }
        }
        let row = |rule: &str, origin: &str, removable: bool| {
            serde_json::json!({
                "rule": display::one_line(rule),
                "raw": rule,
                "origin": origin,
                "removable": removable,
            })
        };
        let mut rows: Vec<serde_json::Value> = rules
            .all()
            .iter()
            .map(|rule| row(&rule.text, rule.list.name(), false))
            .collect();
        let mut answer = serde_json::json!({});
        if let Some(project) = &project {
            match project.rules() {
                Ok(saved) => rows.extend(saved.iter().map(|rule| row(rule, "saved", true))),
                Err(err) => {
                    answer["problem"] =
                        serde_json::Value::from(display::one_line(&format!("agent: {err}")))
                }
            }
            answer["file"] = serde_json::Value::from(project.path().display().to_string());
        }
        answer["rules"] = serde_json::Value::Array(rows);
        Ok(super::pump::to_msgpack(answer))
    }

    /// What `pick` takes from the session, for a request; the error Lua shows before `start`.
    /// `model`: the following prompts use the named model.
    async fn switch_model(&self, args: &[Value]) -> std::result::Result<Value, Value> {
        let name = match args.first() {
            Some(Value::Map(opts)) => opts
                .iter()
                .find(|(k, _)| k.as_str() == Some("name"))
                .and_then(|(_, v)| v.as_str()),
            _ => None,
        }
        .map(str::trim)
        .unwrap_or_default();
        if name.is_empty()
            || name.chars().count() > 200
            || name.chars().any(char::is_whitespace)
            || display::one_line(name) != name
        {
            return Err(Value::from(
                "agent: :Agent model needs one model name, without spaces (:Agent model claude-sonnet-4-5)",
            ));
        }
        let conversation = self.slot.conversation.lock().await.clone();
        let Some(conversation) = conversation else {
            return Err(Value::from(
                "agent: the backend was not started; run :Agent again",
            ));
        };
        conversation
            .switch_model(name)
            .map_err(|err| Value::from(format!("agent: {err}")))?;
        // Side questions and inline edits (unless `inline.model` names one) follow it too.
        if let Some(session) = self.slot.session.lock().await.as_mut() {
            session.inline.choice.model = Some(name.to_string());
        }
        tracing::info!(model = name, "the model was switched");
        Ok(Value::from(name))
    }

    /// `models`: the model table's entries for the built-in conversation's provider and, for
    /// Ollama, the models the local server lists.
    async fn models(&self) -> std::result::Result<Value, Value> {
        let provider = self
            .slot
            .of_session(|s| s.provider.clone())
            .await?
            .map_err(Value::from)?;
        let mut models = crate::llm::models::offered(provider.kind);
        let mut answer = serde_json::json!({});
        if provider.kind == crate::llm::ProviderKind::Ollama {
            match crate::llm::ollama::list_models(&provider.base_url).await {
                Ok(listed) => models.extend(listed),
                Err(err) => {
                    let said = crate::secrets::redact_owned(err.to_string());
                    answer["problem"] = serde_json::Value::from(display::visible_owned(
                        format!("agent: the Ollama server did not list its models: {said}"),
                        display::Layout::OneLine,
                    ));
                }
            }
        }
        answer["models"] = serde_json::Value::from(models);
        Ok(super::pump::to_msgpack(answer))
    }

    /// `files`: finds the matches in a task of its own and answers with
    /// [`lua::FILES_FOUND`], unless a later query came meanwhile.
    async fn find_files(&self, files: protocol::Files, nvim: Nvim) {
        use std::sync::atomic::Ordering;
        let seq = files.seq;
        let latest = self.files_latest.clone();
        latest.fetch_max(seq, Ordering::SeqCst);
        let index = self.slot.of_session(|s| s.files.clone()).await;
        tokio::spawn(async move {
            let found = match index {
                Ok(index) => {
                    if latest.load(Ordering::SeqCst) > seq {
                        return;
                    }
                    super::context::files(&index, files).await
                }
                Err(err) => Value::Map(vec![(Value::from("error"), err)]),
            };
            if latest.load(Ordering::SeqCst) > seq {
                return;
            }
            if let Err(err) = nvim
                .exec_lua(lua::FILES_FOUND, vec![Value::from(seq), found])
                .await
            {
                tracing::warn!(%err, "Lua did not take the files found");
            }
        });
    }

    /// The checkpoints and the id of the conversation a review looks at: the current one's saved
    /// id (a resumed conversation's, before its next prompt too), else the checkpoints' own.
    async fn reviewed(
        &self,
    ) -> std::result::Result<(Option<crate::checkpoint::Checkpoints>, String), Value> {
        let checkpoints = self.slot.of_session(|s| s.checkpoints.clone()).await?;
        let current = self.slot.conversation.lock().await.clone();
        let id = current
            .and_then(|c| c.id())
            .or_else(|| checkpoints.as_ref().map(|c| c.conversation()))
            .unwrap_or_default();
        Ok((checkpoints, id))
    }

    /// `rewind_points`: the current conversation's prompts a rewind can go back to, for Lua.
    async fn rewind_points(&self) -> std::result::Result<Value, Value> {
        let checkpoints = self.slot.of_session(|s| s.checkpoints.clone()).await?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        rewind_points(checkpoints.as_ref(), now).await
    }
}

/// The rewind points of `checkpoints`' current conversation, newest first, as Lua gets them:
/// maps of `turn`, `id` and `row` (the line the list shows, made visible).
pub(super) async fn rewind_points(
    checkpoints: Option<&crate::checkpoint::Checkpoints>,
    now: u64,
) -> std::result::Result<Value, Value> {
    let Some(checkpoints) = checkpoints else {
        return Err(Value::from(
            "agent: checkpoints are off (no state directory), so there is nothing to rewind to",
        ));
    };
    let conversation = checkpoints.conversation();
    let failed = |err: crate::checkpoint::CheckpointError| Value::from(format!("agent: {err}"));
    let points = checkpoints.points(&conversation).await.map_err(failed)?;
    let undo = checkpoints
        .undo_point(&conversation)
        .await
        .map_err(failed)?;
    let listed = undo
        .iter()
        .chain(&points)
        .map(|point| {
            let mut fields = vec![
                (Value::from("turn"), Value::from(point.turn as u64)),
                (Value::from("id"), Value::from(point.id.clone())),
                (
                    // Redacted as the chat's copy of the prompt is (answers skip the pump).
                    Value::from("row"),
                    Value::from(crate::secrets::redact(&display::point_row(point, now)).as_ref()),
                ),
            ];
            if point.turn == 0 {
                fields.push((Value::from("undo"), Value::from(true)));
            }
            Value::Map(fields)
        })
        .collect();
    Ok(Value::Array(listed))
}

/// The session `start` configures: the plugin's options, anything unset or out of range at its
/// default.
fn session_config(start: Start) -> std::result::Result<SessionConfig, String> {
    let tuning = start.tuning();
    let rules = start
        .permissions
        .as_ref()
        .map(protocol::Permissions::rules)
        .transpose()
        .map_err(|err| {
            format!(
                "{err}. Nothing runs until it is fixed in setup({{ permissions = ... }}) (see :help agent-permissions)"
            )
        })?
        .unwrap_or_default();
    let sandbox = start
        .sandbox
        .as_ref()
        .map(protocol::SandboxOptions::sandbox)
        .transpose()
        .map_err(|err| {
            format!(
                "{err}. Nothing runs until it is fixed in setup({{ sandbox = ... }}) (see :help agent-sandbox)"
            )
        })?
        .unwrap_or_default();
    let mut config = SessionConfig::new(start.workspace);
    config.rules = rules;
    config.auto_approve = start.auto_approve;
    config.auto_allow_sandboxed = start.auto_allow_sandboxed;
    let settings = &mut config.settings;
    settings.sandbox = sandbox;
    if let Some(secs) = start.command_timeout.filter(|s| s.is_finite() && *s > 0.0) {
        settings.command_timeout = Duration::from_secs_f64(secs);
    }
    settings.shell = start
        .shell
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(PathBuf::from);
    settings.pass_env = start.pass_env.unwrap_or_default();
    if let Some(mb) = start.max_edit_mb.filter(|mb| *mb > 0) {
        settings.max_edit_mb = mb;
    }
    config.state_dir = start
        .state_dir
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from);
    config.saved_rules = config.state_dir.clone();
    config.provider = ProviderChoice {
        tuning,
        provider: start.provider.filter(|p| !p.is_empty()),
        model: start.model.filter(|m| !m.is_empty()),
        base_url: start.base_url.filter(|u| !u.is_empty()),
        api_key: start.api_key,
        api_key_cmd: start.api_key_cmd.filter(|argv| !argv.is_empty()),
    };
    config.max_turns = start.max_turns.unwrap_or(DEFAULT_MAX_TURNS);
    config.max_cost = start.max_cost.filter(|max| max.is_finite() && *max > 0.0);
    if let Some(at) = start
        .compact_at
        .filter(|a| a.is_finite() && (0.0..=1.0).contains(a))
    {
        config.compact_at = at;
    }
    if let Some(keep) = start.keep_turns.filter(|k| *k > 0) {
        config.keep_turns = keep as usize;
    }
    if let Some(files) = start.instructions {
        config.instructions = files.into_iter().filter(|f| !f.is_empty()).collect();
    }
    Ok(config)
}

impl Target {
    /// `worktree {action, force?}`: the conversation's own worktree's changes, merged into the
    /// main working tree, or removed ([`protocol::request::WORKTREE`]).
    async fn worktree(&self, args: &[Value], nvim: Nvim) -> std::result::Result<Value, Value> {
        use crate::editor::Editor as _;
        use crate::worktree::{Changed, WorktreeError};
        let field = |name: &str| match args.first() {
            Some(Value::Map(opts)) => opts
                .iter()
                .find(|(k, _)| k.as_str() == Some(name))
                .map(|(_, v)| v.clone()),
            _ => None,
        };
        let action = field("action")
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let force = field("force").and_then(|v| v.as_bool()) == Some(true);
        let (worktree, merged) = self
            .slot
            .of_session(|s| s.worktree.clone())
            .await?
            .ok_or_else(|| {
                Value::from(
                    "agent: this conversation has no worktree; :Agent new --worktree starts one that has",
                )
            })?;
        let failed = |err: WorktreeError| Value::from(format!("agent: {err}"));
        let rows = |files: &[Changed]| -> Vec<serde_json::Value> {
            files
                .iter()
                .map(|file| {
                    serde_json::json!({
                        "status": file.status.to_string(),
                        "path": display::one_line(&file.path.display().to_string()),
                    })
                })
                .collect()
        };
        let shown = |path: &std::path::Path| display::one_line(&path.display().to_string());
        let answer = match action.as_str() {
            "changes" => {
                let files = worktree.changes().await.map_err(failed)?;
                serde_json::json!({
                    "branch": display::one_line(&worktree.branch),
                    "base": worktree.base.chars().take(12).collect::<String>(),
                    "dir": shown(&worktree.dir),
                    "top": shown(&worktree.top),
                    "files": rows(&files),
                })
            }
            "merge" => {
                let files = worktree.changes().await.map_err(failed)?;
                let editor = NvimEditor { nvim };
                let mut unsaved = Vec::new();
                for file in &files {
                    if editor
                        .has_unsaved_changes(&worktree.top.join(&file.path))
                        .await
                    {
                        unsaved.push(shown(&file.path));
                    }
                }
                if !unsaved.is_empty() {
                    return Err(Value::from(format!(
                        "agent: nothing was merged: {} {} unsaved changes in Neovim; save or discard them first",
                        unsaved.join(", "),
                        if unsaved.len() == 1 { "has" } else { "have" }
                    )));
                }
                let patch = worktree.patch().await.map_err(failed)?;
                let done = worktree.merge().await.map_err(failed)?;
                if let Ok(mut merged) = merged.lock() {
                    *merged = Some(digest(&patch));
                }
                for file in done.iter().filter(|file| file.status != 'D') {
                    editor.file_written(&worktree.top.join(&file.path)).await;
                }
                editor.command_finished().await;
                tracing::info!(files = done.len(), branch = %worktree.branch, "a worktree was merged");
                serde_json::json!({
                    "branch": display::one_line(&worktree.branch),
                    "files": rows(&done),
                })
            }
            "remove" => {
                let patch = worktree.patch().await.map_err(failed)?;
                let last_merged = merged.lock().ok().and_then(|m| *m);
                let unmerged = !patch.is_empty() && last_merged != Some(digest(&patch));
                if unmerged && !force {
                    let count = worktree.changes().await.map_err(failed)?.len();
                    serde_json::json!({ "unmerged": count })
                } else {
                    // Nothing runs in it any more: its turn stopped first.
                    self.slot.cancel_turn();
                    let _ = tokio::time::timeout(Duration::from_secs(5), self.slot.idle()).await;
                    worktree.remove(true).await.map_err(failed)?;
                    tracing::info!(branch = %worktree.branch, "a worktree was removed");
                    serde_json::json!({ "removed": true })
                }
            }
            other => {
                return Err(Value::from(format!(
                    "agent: bad worktree request (action {other:?})"
                )))
            }
        };
        Ok(super::pump::to_msgpack(answer))
    }
}

/// A digest of a patch, to know whether what a worktree holds was merged.
fn digest(patch: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    patch.hash(&mut hasher);
    hasher.finish()
}

/// Makes the worktree `start` asks for, under its `dir` (else `<state_dir>/worktrees`); the
/// worktree and the conversation's root in it, or why not, as the person reads it.
async fn make_worktree(
    start: &Start,
    asked: protocol::WorktreeStart,
) -> std::result::Result<(crate::worktree::Worktree, PathBuf), String> {
    let under = match (asked.dir.filter(|d| !d.is_empty()), &start.state_dir) {
        (Some(dir), _) => PathBuf::from(dir),
        (None, Some(state)) if !state.is_empty() => PathBuf::from(state).join("worktrees"),
        _ => {
            return Err(
                "agent: a worktree needs a folder to go in: set worktrees.dir in setup()".into(),
            )
        }
    };
    crate::worktree::Worktree::create(
        std::path::Path::new(&start.workspace),
        asked.branch.as_deref(),
        &under,
    )
    .await
    .map_err(|err| format!("agent: {err}"))
}

/// Why the built-in conversation has no provider, in Neovim's terms: the variable to export
/// (Neovim started again, since it reads its environment once) or the setup() keys to set.
pub(super) fn no_provider(err: &crate::llm::ProviderError) -> String {
    use crate::llm::ProviderError;
    let setup = "or set api_key_cmd (a command that prints the key, such as { \"pass\", \"show\", \"anthropic\" }) or api_key in setup()";
    match err {
        ProviderError::MissingKey { var } => format!(
            "agent: no API key: {var} is not set. Export it in the shell and start Neovim again, {setup}"
        ),
        ProviderError::NoProvider => format!(
            "agent: no model provider: neither ANTHROPIC_API_KEY nor OPENAI_API_KEY is set. Export one in the shell and start Neovim again, {setup} (with provider = \"openai\" for OpenAI); provider = \"ollama\" needs no key"
        ),
        ProviderError::UnknownProvider(_) | ProviderError::Http(_) => format!("agent: {err}"),
    }
}

impl Target {
    /// A notification for this conversation (all but `decide` and `close`).
    pub(super) async fn notify(&self, name: &str, args: Vec<Value>, nvim: Nvim) {
        match name {
            method::START => match protocol::arg::<Start>(args) {
                Ok(start) => self.start(start, nvim).await,
                Err(err) => self.error(format!(
                    "agent: bad start message ({err}); update the plugin and rebuild"
                )),
            },
            method::PROMPT => match protocol::arg::<Prompt>(args) {
                Ok(prompt) => self.prompt(prompt).await,
                Err(err) => self.error(format!("agent: bad prompt message ({err})")),
            },
            method::COMPACT => self.turn(None).await,
            method::CHOOSE => match protocol::arg::<protocol::Choose>(args) {
                Ok(choose) => self.choose(choose).await,
                Err(err) => self.error(format!("agent: bad choose message ({err})")),
            },
            method::ACP => match protocol::arg::<protocol::AcpStart>(args) {
                Ok(start) => self.slot.start_external(start).await,
                Err(err) => self.error(format!("agent: bad acp message ({err})")),
            },
            method::FILES => match protocol::arg::<protocol::Files>(args) {
                Ok(files) => self.find_files(files, nvim).await,
                Err(err) => tracing::warn!(%err, "bad files message"),
            },
            method::CANCEL => self.slot.cancel_turn(),
            method::BRANCH => match protocol::arg::<protocol::BranchSwitch>(args) {
                Ok(switch) => self.switch_branch(switch),
                Err(err) => self.error(format!("agent: bad branch message ({err})")),
            },
            method::INLINE => match protocol::arg::<protocol::Inline>(args) {
                Ok(inline) => self.inline(inline, nvim).await,
                Err(err) => self.error(format!("agent: bad inline message ({err})")),
            },
            method::RENAME => match protocol::arg::<protocol::Rename>(args) {
                Ok(rename) => self.renamed(&rename.title).await,
                Err(err) => tracing::warn!(%err, "bad rename message"),
            },
            method::BTW => match protocol::arg::<protocol::Btw>(args) {
                Ok(btw) => self.btw(btw).await,
                Err(err) => self.error(format!("agent: bad btw message ({err})")),
            },
            method::INLINE_STOP => match protocol::arg::<protocol::InlineStop>(args) {
                Ok(stop) => self.slot.stop_inline(stop.inline),
                Err(err) => tracing::warn!(%err, "bad inline_stop message"),
            },
            method::NEW => self.new_conversation(),
            method::RESUME => match protocol::arg::<Resume>(args) {
                Ok(resume) => self.resume(resume),
                Err(err) => self.error(format!("agent: bad resume message ({err})")),
            },
            method::REWIND => match protocol::arg::<Rewind>(args) {
                Ok(rewind) => self.rewind(rewind),
                Err(err) => self.error(format!("agent: bad rewind message ({err})")),
            },
            other => tracing::warn!(method = other, "unknown notification"),
        }
    }

    /// A request for this conversation (all but `version` and `proposal`).
    pub(super) async fn request(
        &self,
        name: &str,
        args: Vec<Value>,
        nvim: Nvim,
    ) -> std::result::Result<Value, Value> {
        match name {
            protocol::request::SESSIONS => match args.first() {
                Some(Value::Map(opts))
                    if opts
                        .iter()
                        .any(|(k, v)| k.as_str() == Some("ids") && v.as_bool() == Some(true)) =>
                {
                    let store = self.slot.of_session(|s| s.store.clone()).await?;
                    let ids = store.as_ref().map(Store::ids).unwrap_or_default();
                    Ok(Value::Array(ids.into_iter().map(Value::from).collect()))
                }
                _ => self.sessions().await,
            },
            protocol::request::REWIND_POINTS => self.rewind_points().await,
            protocol::request::CHANGES => {
                let (checkpoints, conversation) = self.reviewed().await?;
                super::review::changes(checkpoints.as_ref(), &conversation, &args).await
            }
            protocol::request::FILE_AT => {
                let checkpoints = self.slot.of_session(|s| s.checkpoints.clone()).await?;
                super::review::file_at(checkpoints.as_ref(), &args).await
            }
            protocol::request::PERMISSIONS => self.permissions(&args).await,
            protocol::request::WORKTREE => self.worktree(&args, nvim).await,
            protocol::request::EXPORT => self.export().await,
            protocol::request::FORK => self.fork(args).await,
            protocol::request::ADOPT => self.adopt(args, nvim).await,
            protocol::request::PROMPT_TEXT => self.prompt_text(&args).await,
            protocol::request::UNDO_OUTSIDE => {
                let checkpoints = self.slot.of_session(|s| s.checkpoints.clone()).await?;
                let editor = NvimEditor { nvim: nvim.clone() };
                super::review::undo_outside(checkpoints.as_ref(), &editor, &args).await
            }
            protocol::request::SESSION_RENAME => self.session_rename(args).await,
            protocol::request::SESSION_DELETE => self.session_delete(&args).await,
            protocol::request::MODEL => self.switch_model(&args).await,
            protocol::request::MODELS => self.models().await,
            protocol::request::ATTACH => {
                let attach = super::context::decode(&args)?;
                let (workspace, store) = self
                    .slot
                    .of_session(|s| (s.workspace.clone(), s.store.clone()))
                    .await?;
                let editor = NvimEditor { nvim: nvim.clone() };
                // Neovim waits for this answer (the prompt is sent with it), so it is bounded.
                tokio::time::timeout(
                    super::context::ATTACH_TIMEOUT,
                    super::context::attach(
                        &workspace,
                        &editor,
                        &self.slot.images,
                        store.as_ref(),
                        attach,
                    ),
                )
                .await
                .map_err(|_| {
                    Value::from(format!(
                        "reading them took more than {} s (a slow disk or a network mount?); \
                         the prompt goes without them",
                        super::context::ATTACH_TIMEOUT.as_secs()
                    ))
                })
            }
            other => Err(Value::from(format!("agent: unknown request '{other}'"))),
        }
    }
}
