//! The one place a session is assembled, for every front end: workspace → settings → gate →
//! executor → provider → client → agent, from one [`SessionConfig`] plus what only the front end
//! has (who can be asked, which editor holds the files). The terminal and Neovim differ only in
//! those two and in where the configuration comes from (the command line, the `start` message).
//! With a state directory the session has checkpoints ([`Checkpoints`]): one handle, given to
//! the executor (before each allowed change) and returned for the front end to wrap its
//! conversations in ([`crate::conversation::Checkpointed`]) and hand to an external agent.

use std::path::PathBuf;
use std::sync::Arc;

use crate::agent::Native;
use crate::agent::{Agent, DEFAULT_MAX_TURNS};
use crate::approval::{Asker, Gate};
use crate::checkpoint::Checkpoints;
use crate::conversation::{Checkpointed, Conversation, Unavailable};
use crate::editor::Editor;
use crate::llm::{ProviderChoice, ProviderError, ProviderKind};
use crate::permissions::saved::{Project, Saved};
use crate::permissions::Rules;
use crate::sandbox::Report;
use crate::sessions::{Recorded, Store};
use crate::tools::{Executor, Settings, ToolContext};
use crate::workspace::{RootError, Workspace};

/// Everything a front end configures about a session.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The workspace root (the tools never reach outside it).
    pub workspace: PathBuf,
    /// Allow every tool call without asking.
    pub auto_approve: bool,
    /// Run run_bash's commands without asking while the sandbox is in force (whole: see
    /// [`sandbox_report`]); edits are still asked about and the rules still apply.
    pub auto_allow_sandboxed: bool,
    /// The tools' settings (timeout, shell, `pass_env`, `max_edit_mb`, the sandbox).
    pub settings: Settings,
    /// Which provider and model, as the user chose them (unset parts come from the environment).
    pub provider: ProviderChoice,
    /// The cap on model calls per prompt.
    pub max_turns: u32,
    /// The most the built-in conversation may cost, in dollars by the model table's prices; None:
    /// no limit ([`Agent::with_max_cost`]).
    pub max_cost: Option<f64>,
    /// Where what outlives the backend is kept (sessions, checkpoints); None: nothing is.
    /// Neovim sends its `stdpath("state") .. "/agent"`; the terminal uses [`state_dir`].
    pub state_dir: Option<PathBuf>,
    /// The person's permission rules, judged before anyone is asked.
    pub rules: Rules,
    /// The state directory whose `permissions.json` holds the rules saved by "Allow always in
    /// this project" ([`crate::permissions::saved`]); None: none are read or saved. Apart from
    /// `state_dir` because a one-call `agent-nvim tool` keeps no checkpoints but honours them.
    pub saved_rules: Option<PathBuf>,
    /// The file names the project's instructions are looked for under at the root, the first
    /// found used ([`crate::instructions`]); empty: none.
    pub instructions: Vec<String>,
    /// The share of the model's window the last request's input may reach before the older
    /// part of the conversation is compacted; 0: only when asked or refused as too long.
    pub compact_at: f64,
    /// The prompt-answer pairs a compaction keeps as they are.
    pub keep_turns: usize,
}

impl SessionConfig {
    /// A session in `workspace` with every other setting at its default.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        SessionConfig {
            workspace: workspace.into(),
            auto_approve: false,
            auto_allow_sandboxed: false,
            settings: Settings::default(),
            provider: ProviderChoice::default(),
            max_turns: DEFAULT_MAX_TURNS,
            max_cost: None,
            state_dir: None,
            rules: Rules::default(),
            saved_rules: None,
            instructions: crate::instructions::DEFAULT_FILES
                .iter()
                .map(|name| name.to_string())
                .collect(),
            compact_at: crate::agent::DEFAULT_COMPACT_AT,
            keep_turns: crate::agent::DEFAULT_KEEP_TURNS,
        }
    }
}

/// The directory Neovim's `stdpath("state") .. "/agent"` names, for a front end that is not
/// Neovim, so the terminal and the plugin keep their state in one place:
/// `$XDG_STATE_HOME/$NVIM_APPNAME/agent`, with `~/.local/state` and `nvim` for what is unset or
/// not absolute. None without a home directory.
pub fn state_dir(env: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let set = |name: &str| env(name).filter(|value| !value.is_empty());
    let base = match set("XDG_STATE_HOME").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        _ => PathBuf::from(set("HOME")?).join(".local/state"),
    };
    let app = set("NVIM_APPNAME").unwrap_or_else(|| "nvim".into());
    Some(base.join(app).join("agent"))
}

/// The sandbox a session's commands get in `root`, as the front ends report it (at start, in
/// `:checkhealth agent`), and whether `auto_allow_sandboxed` is in force: only when the sandbox
/// enforces everything configured (otherwise the gate says why in the first prompt of each
/// conversation: [`crate::approval::Gate::sandbox_note`]).
pub fn sandbox_report(config: &SessionConfig, root: &std::path::Path) -> (Report, bool) {
    let report = config.settings.sandbox.report(root);
    let whole = report.whole;
    (report, config.auto_allow_sandboxed && whole)
}

/// Why `auto_allow_sandboxed` is set but not in force, or None (in force, or not set).
fn not_in_force(config: &SessionConfig, report: &Report) -> Option<String> {
    if !config.auto_allow_sandboxed || report.whole {
        return None;
    }
    let why = if config.settings.sandbox.mode == crate::sandbox::Mode::Off {
        "sandbox.mode is \"off\"".to_string()
    } else if !report.is_on() {
        "there is no Landlock here, so the sandbox is off".to_string()
    } else if !report.sockets_blocked {
        "this kernel has no seccomp filters, so the sandbox cannot keep commands from local sockets (Neovim's among them)".to_string()
    } else if report.abi < 3 {
        format!(
            "Landlock ABI {} cannot stop a command from truncating files",
            report.abi
        )
    } else {
        "the sandbox cannot enforce all it was asked here".to_string()
    };
    Some(format!(
        "auto_allow_sandboxed is not in force: {why}; each command is asked about (:checkhealth agent)"
    ))
}

/// Who answers the gate's questions, built once the workspace is known (Neovim's picker shows
/// the root). None: nobody can be asked, and the gate refuses.
pub type AskerFor<'a> = Box<dyn FnOnce(&Workspace, &Settings) -> Option<Arc<dyn Asker>> + 'a>;

/// The tools of a session: the workspace opened, the gate over `asker`, the editor view.
/// Errors when the root cannot be used.
pub fn executor(
    config: &SessionConfig,
    asker: AskerFor<'_>,
    editor: Arc<dyn Editor>,
) -> Result<Executor, RootError> {
    crate::secrets::protect_env_keys();
    let workspace = Workspace::new(&config.workspace)?;
    let asker = asker(&workspace, &config.settings);
    let report = config.settings.sandbox.report(workspace.root());
    let sandbox_note = not_in_force(config, &report);
    let sandboxed_commands = config.auto_allow_sandboxed && report.whole;
    let checkpoints = config.state_dir.as_deref().map(|state_dir| {
        Checkpoints::new(
            state_dir,
            workspace.clone(),
            Checkpoints::new_conversation_id(),
        )
    });
    let project = config
        .saved_rules
        .as_deref()
        .map(|dir| Project::new(Saved::new(dir), workspace.root()));
    Ok(Executor::new(ToolContext {
        workspace,
        gate: Arc::new(
            Gate::new(config.auto_approve, asker)
                .with_rules(config.rules.clone())
                .with_project(project)
                .with_sandboxed_commands(sandboxed_commands)
                .with_sandbox_note(sandbox_note),
        ),
        editor,
        settings: config.settings.clone(),
        checkpoints,
    }))
}

/// The built-in agent over `executor`, talking to the provider `config` chooses (its key read
/// from the environment).
pub fn agent(
    config: &SessionConfig,
    executor: Executor,
) -> std::result::Result<Agent, ProviderError> {
    Ok(crate::inline::over(
        &config.provider,
        executor,
        config.max_turns,
        config.instructions.clone(),
    )?
    .with_compaction(config.compact_at, config.keep_turns)
    .with_max_cost(config.max_cost))
}

/// A session as [`build`] assembles it.
pub struct Session {
    /// The workspace, resolved (external agents start in it).
    pub workspace: Workspace,
    /// Its checkpoints, shared by the tools, the conversation and an external agent; None
    /// without a state directory.
    pub checkpoints: Option<Checkpoints>,
    /// Where its conversations are saved ([`crate::sessions`]); None without a state directory.
    pub store: Option<Store>,
    /// The built-in agent, or why the provider could not be configured (a session that only
    /// drives an external agent needs no provider, so this is not an error yet).
    pub agent: std::result::Result<Agent, ProviderError>,
    /// The tools' context (workspace, gate, editor, settings, checkpoints), shared with the
    /// agent: an inline edit's own agent runs over it ([`crate::inline::agent`]).
    pub tools: ToolContext,
    /// What the built-in conversation has spent, shared with the agents of its side questions
    /// and inline edits so its `max_cost` holds them too ([`Agent::spending_apart`]).
    pub spend: crate::agent::Spend,
}

/// Builds a session: [`executor`], then [`agent`] over it.
pub fn build(
    config: &SessionConfig,
    asker: AskerFor<'_>,
    editor: Arc<dyn Editor>,
) -> Result<Session, RootError> {
    let executor = executor(config, asker, editor)?;
    let tools = executor.context().clone();
    let workspace = executor.context().workspace.clone();
    let checkpoints = executor.context().checkpoints.clone();
    let store = config
        .state_dir
        .as_deref()
        .map(|dir| Store::new(dir, workspace.root()));
    let spend = crate::agent::Spend::default();
    Ok(Session {
        workspace,
        checkpoints,
        store,
        agent: agent(config, executor).map(|agent| agent.with_spend(spend.clone())),
        tools,
        spend,
    })
}

/// What every conversation a session drives is wrapped in, the built-in one and an external
/// agent's alike, in this order: saved as it happens ([`Recorded`], when there is a store), then
/// checkpointed before each prompt ([`Checkpointed`], on the saved conversation's id).
pub fn decorate(
    inner: Arc<dyn Conversation>,
    store: Option<&Store>,
    checkpoints: Option<&Checkpoints>,
) -> Arc<dyn Conversation> {
    let saved: Arc<dyn Conversation> = match store {
        Some(store) => Arc::new(Recorded::new(inner, store.clone())),
        None => inner,
    };
    Checkpointed::wrap(saved, checkpoints)
}

/// The provider a built-in conversation talks to, as `started` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderInfo {
    /// Which provider (its name, default model and models offered come with it).
    pub kind: ProviderKind,
    /// The model.
    pub model: String,
    /// Where requests go.
    pub base_url: String,
}

impl Session {
    /// The session as a front end drives it: the workspace, the built-in conversation (the turn
    /// loop, checkpointed before each prompt when checkpoints are on, or, when the provider could not be configured, one that answers each prompt with
    /// why: a session that only drives an external agent needs no provider), and the provider
    /// it talks to, or, when it is not configured, why. Each prompt is answered with `explain`'s
    /// words for that error (each front end says what to set in its own terms).
    pub fn into_conversation(
        self,
        explain: &dyn Fn(&ProviderError) -> String,
    ) -> (
        Workspace,
        Arc<dyn Conversation>,
        std::result::Result<ProviderInfo, ProviderError>,
    ) {
        match self.agent {
            Ok(agent) => {
                let config = agent.client().config();
                let provider = ProviderInfo {
                    kind: config.kind,
                    model: config.model.clone(),
                    base_url: config.base_url.clone(),
                };
                let native = Arc::new(Native::new(agent));
                let native = decorate(native, self.store.as_ref(), self.checkpoints.as_ref());
                (self.workspace, native, Ok(provider))
            }
            Err(err) => {
                let unavailable = Arc::new(Unavailable::new("built-in", explain(&err)));
                (self.workspace, unavailable, Err(err))
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::Mutex;

    use futures::future::BoxFuture;
    use tokio_util::sync::CancellationToken;

    use agent_nvim_fixtures::mock_llm::{MockLlm, Part, Reply, Wire};
    use agent_nvim_vocab::approval::{ApprovalRequest, Decision};
    use agent_nvim_vocab::events::{Event, Outcome};

    /// Allows every question once and remembers what it was asked.
    #[derive(Default)]
    struct Allowing(Mutex<Vec<String>>);

    #[test]
    fn the_terminal_keeps_its_state_where_neovim_does() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        let dir = |pairs| state_dir(&env(pairs));
        assert_eq!(
            dir(&[("HOME", "/home/u")]),
            Some(PathBuf::from("/home/u/.local/state/nvim/agent"))
        );
        assert_eq!(
            dir(&[
                ("HOME", "/home/u"),
                ("XDG_STATE_HOME", "/s"),
                ("NVIM_APPNAME", "lazy")
            ]),
            Some(PathBuf::from("/s/lazy/agent"))
        );
        assert_eq!(
            dir(&[
                ("HOME", "/home/u"),
                ("XDG_STATE_HOME", "rel"),
                ("NVIM_APPNAME", "")
            ]),
            Some(PathBuf::from("/home/u/.local/state/nvim/agent"))
        );
        assert_eq!(dir(&[]), None);
    }

    impl Asker for Allowing {
        fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, Option<Decision>> {
            self.0.lock().unwrap().push(request.detail);
            Box::pin(async { Some(Decision::AllowOnce) })
        }
    }

    /// Remembers the files it was told were written.
    #[derive(Default)]
    struct Watching(Mutex<Vec<PathBuf>>);

    impl Editor for Watching {
        fn has_unsaved_changes<'a>(&'a self, _path: &'a Path) -> BoxFuture<'a, bool> {
            Box::pin(async { false })
        }
        fn file_written<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, ()> {
            self.0.lock().unwrap().push(path.to_path_buf());
            Box::pin(async {})
        }
        fn command_finished(&self) -> BoxFuture<'_, ()> {
            Box::pin(async {})
        }
    }

    #[tokio::test]
    async fn a_built_session_runs_a_tool_call_through_its_asker_and_editor() {
        let dir = tempfile::tempdir().unwrap();
        let mock = MockLlm::start(
            Wire::Ollama,
            vec![
                Reply::Turn {
                    parts: vec![Part::ToolCall {
                        id: "c1".into(),
                        name: "edit_file".into(),
                        args: r#"{"path": "new.txt", "old_str": "", "new_str": "hi\n"}"#.into(),
                    }],
                    usage: (1, 1),
                },
                Reply::Turn {
                    parts: vec![Part::Text("made it".into())],
                    usage: (1, 1),
                },
            ],
        );
        let mut config = SessionConfig::new(dir.path());
        config.provider = ProviderChoice {
            provider: Some("ollama".into()),
            model: Some("m".into()),
            base_url: Some(mock.base_url()),
            tuning: Default::default(),
            api_key: None,
            api_key_cmd: None,
        };
        let asker = Arc::new(Allowing::default());
        let editor = Arc::new(Watching::default());
        let for_gate = asker.clone();
        let session = build(
            &config,
            Box::new(move |_, _| Some(for_gate as Arc<dyn Asker>)),
            editor.clone(),
        )
        .unwrap();
        let mut agent = session.agent.unwrap();
        let (events, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let outcome = agent
            .prompt("make a file".into(), &events, &CancellationToken::new())
            .await;
        assert_eq!(outcome, Outcome::Done);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("new.txt")).unwrap(),
            "hi\n"
        );
        assert_eq!(asker.0.lock().unwrap().len(), 1);
        let root = session.workspace.root().to_path_buf();
        assert_eq!(*editor.0.lock().unwrap(), vec![root.join("new.txt")]);
        drop(events);
        let mut finished = Vec::new();
        while let Some(event) = seen.recv().await {
            if let Event::ToolFinished { ok, .. } = event {
                finished.push(ok);
            }
        }
        assert_eq!(finished, [true]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_conversation_is_saved_and_its_checkpoints_are_kept_under_its_saved_id() {
        let dir = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let mock = MockLlm::start(
            Wire::Ollama,
            vec![Reply::Turn {
                parts: vec![Part::Text("hello".into())],
                usage: (1, 1),
            }],
        );
        let mut config = SessionConfig::new(dir.path());
        config.state_dir = Some(state.path().to_path_buf());
        config.provider = ProviderChoice {
            provider: Some("ollama".into()),
            model: Some("m".into()),
            base_url: Some(mock.base_url()),
            tuning: Default::default(),
            api_key: None,
            api_key_cmd: None,
        };
        let built = build(
            &config,
            Box::new(|_, _| None),
            Arc::new(crate::editor::NoEditor),
        )
        .unwrap();
        let (checkpoints, store) = (
            built.checkpoints.clone().unwrap(),
            built.store.clone().unwrap(),
        );
        let (_, conversation, _) = built.into_conversation(&|err| err.to_string());
        let (events, _seen) = tokio::sync::mpsc::unbounded_channel();
        let events = crate::conversation::Events::new(events);
        let outcome = conversation
            .prompt("first prompt".into(), &events, &CancellationToken::new())
            .await;
        assert_eq!(outcome, Outcome::Done);
        let id = conversation.id().expect("a saved conversation has an id");
        let listed = store.list();
        assert_eq!(
            listed
                .iter()
                .map(|entry| entry.id.clone())
                .collect::<Vec<_>>(),
            vec![id.clone()]
        );
        let taken = checkpoints.list(&id).await.unwrap();
        assert_eq!(
            taken
                .iter()
                .map(|c| (c.kind, c.label.as_str()))
                .collect::<Vec<_>>(),
            [(crate::checkpoint::Kind::Prompt, "first prompt")]
        );
    }

    #[tokio::test]
    async fn the_session_a_front_end_drives_is_one_conversation_of_either_kind() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = SessionConfig::new(dir.path());
        config.provider = ProviderChoice {
            provider: Some("ollama".into()),
            model: Some("m".into()),
            base_url: Some("http://127.0.0.1:9".into()),
            tuning: Default::default(),
            api_key: None,
            api_key_cmd: None,
        };
        let none = || -> AskerFor<'static> { Box::new(|_, _| None) };
        let editor = || Arc::new(crate::editor::NoEditor);
        let built = build(&config, none(), editor()).unwrap();
        let explain = |err: &ProviderError| format!("agent: {err}");
        let (_, native, provider) = built.into_conversation(&explain);
        assert_eq!(native.name(), "built-in");
        assert_eq!(
            provider.ok(),
            Some(ProviderInfo {
                kind: ProviderKind::Ollama,
                model: "m".into(),
                base_url: "http://127.0.0.1:9".into(),
            })
        );
        config.provider.provider = Some("nope".into());
        let (_, unavailable, provider) = build(&config, none(), editor())
            .unwrap()
            .into_conversation(&explain);
        assert_eq!(
            provider.map_err(|err| explain(&err)),
            Err("agent: unknown provider 'nope'; use anthropic, openai or ollama".into())
        );
        let (events, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let events = crate::conversation::Events::new(events);
        unavailable
            .prompt("hi".into(), &events, &CancellationToken::new())
            .await;
        let Some(agent_nvim_vocab::conversation::ConversationEvent::Turn(Event::Error { message })) =
            seen.recv().await
        else {
            panic!("expected one error");
        };
        assert!(
            message.starts_with("agent: ") && message.contains("nope"),
            "{message}"
        );
    }

    #[test]
    fn a_provider_that_cannot_be_configured_leaves_the_tools_usable() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = SessionConfig::new(dir.path());
        config.provider.provider = Some("nope".into());
        let session = build(
            &config,
            Box::new(|_, _| None),
            Arc::new(crate::editor::NoEditor),
        )
        .unwrap();
        assert!(matches!(
            session.agent,
            Err(ProviderError::UnknownProvider(ref name)) if name == "nope"
        ));
        assert_eq!(session.workspace.root(), dir.path().canonicalize().unwrap());
        config.workspace = dir.path().join("missing");
        assert!(matches!(
            build(
                &config,
                Box::new(|_, _| None),
                Arc::new(crate::editor::NoEditor)
            ),
            Err(RootError { .. })
        ));
    }
}
