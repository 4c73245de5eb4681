//! The four tools the model gets, in catalogue order, and the executor that runs a call by name.
//!
//! Every failure is a [`ToolResult`] with `ok: false` that the model reads and can recover from;
//! nothing here ends a turn or panics. Each tool applies the path check ([`crate::workspace`])
//! and its own checks, in the order SPEC section 1 gives, and proposes; the approval gate
//! ([`crate::approval`]) is asked by the [`Executor`] alone, about the tool's [`Plan`].

#[cfg(test)]
mod attacks;
mod edit_file;
mod executor;
pub mod inline;
mod list_files;
mod read_file;
mod run_bash;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::approval::Gate;
use crate::editor::Editor;
use crate::workspace::beneath::FsError;
use crate::workspace::Workspace;

pub use crate::approved::Approved;
pub use edit_file::EditFile;
pub use executor::{Executor, Plan, Proposal};
pub use list_files::ListFiles;
pub use read_file::{attachment, image_bytes, Attachment, ImageBytes, ReadFile};
pub use read_file::{read_prefix, Contents};
pub use run_bash::RunBash;

pub(crate) use crate::workspace::blocking;
pub use agent_nvim_text::text::megabytes;
pub use agent_nvim_vocab::tools::{ToolResult, ToolSpec};

/// The text of a call that did not run because the user cancelled the turn.
pub const CANCELLED: &str = "Cancelled by the user before it ran.";

/// Settings the tools read; front ends fill them from their configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// run_bash's timeout.
    pub command_timeout: Duration,
    /// The shell run_bash uses (`{shell} -c COMMAND`); None picks bash, else /bin/sh.
    pub shell: Option<PathBuf>,
    /// Key and session variables run_bash's commands get anyway (the user's `pass_env`); every
    /// other key variable, any variable holding a key, and the session's sockets
    /// ([`crate::process::SESSION_VARS`]: `NVIM`, `TMUX`, `SSH_AUTH_SOCK`, ...) are left out of
    /// their environment.
    pub pass_env: Vec<String>,
    /// The largest file edit_file (and an ACP agent's fs requests) will read whole, in MB
    /// (MiB); `max_edit_mb` in the configuration.
    pub max_edit_mb: u64,
    /// The sandbox run_bash's commands run in (`sandbox` in the configuration; Landlock where
    /// the kernel has it, see [`crate::sandbox`]).
    pub sandbox: crate::sandbox::Sandbox,
}

/// edit_file's default size limit, in MB.
pub const DEFAULT_MAX_EDIT_MB: u64 = 64;

impl Settings {
    /// [`Settings::max_edit_mb`] in bytes.
    pub fn max_edit_bytes(&self) -> u64 {
        self.max_edit_mb.saturating_mul(1024 * 1024)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            command_timeout: Duration::from_secs(120),
            shell: None,
            pass_env: Vec::new(),
            max_edit_mb: DEFAULT_MAX_EDIT_MB,
            sandbox: crate::sandbox::Sandbox::default(),
        }
    }
}

/// Everything a tool needs besides its arguments.
#[derive(Clone)]
pub struct ToolContext {
    /// The root and its path check.
    pub workspace: Workspace,
    /// The approval gate.
    pub gate: Arc<Gate>,
    /// Open buffers, when an editor is attached.
    pub editor: Arc<dyn Editor>,
    /// Timeouts and shell.
    pub settings: Settings,
    /// Where the workspace is snapshotted before each allowed change; None: checkpoints off.
    pub checkpoints: Option<crate::checkpoint::Checkpoints>,
}

/// Where a running call reports what it has done so far, for the person watching (a command's
/// newest output); the model never reads it. Called at most once a frame.
pub trait Progress: Send + Sync {
    /// The newest output so far, whole (each call replaces the one before).
    fn output(&self, newest: String);
}

/// Nobody watches.
#[derive(Debug, Default, Clone, Copy)]
pub struct Unwatched;

impl Progress for Unwatched {
    fn output(&self, _newest: String) {}
}

/// A call's arguments, with the tool's name for error messages, and where the call reports its
/// progress.
pub struct Args<'a> {
    tool: &'static str,
    map: &'a Map<String, Value>,
    progress: &'a dyn Progress,
}

impl<'a> Args<'a> {
    /// Wraps `map` as `tool`'s arguments, with nobody watching.
    pub fn new(tool: &'static str, map: &'a Map<String, Value>) -> Self {
        Args {
            tool,
            map,
            progress: &Unwatched,
        }
    }

    /// Wraps `map` as `tool`'s arguments, its progress reported to `progress`.
    pub fn watched(
        tool: &'static str,
        map: &'a Map<String, Value>,
        progress: &'a dyn Progress,
    ) -> Self {
        Args {
            tool,
            map,
            progress,
        }
    }

    /// Where the call reports its progress.
    pub fn progress(&self) -> &'a dyn Progress {
        self.progress
    }

    /// A required string argument, or the failure the model reads.
    pub fn required(&self, name: &str) -> Result<&'a str, ToolResult> {
        match self.map.get(name) {
            Some(Value::String(s)) => Ok(s),
            _ => Err(ToolResult::fail(format!(
                "{}: missing string argument '{name}'.",
                self.tool
            ))),
        }
    }

    /// An optional string argument: absent or null is None; any other non-string is a failure.
    pub fn optional(&self, name: &str) -> Result<Option<&'a str>, ToolResult> {
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ToolResult::fail(format!(
                "{}: missing string argument '{name}'.",
                self.tool
            ))),
        }
    }
}

/// One tool: its catalogue entry and the first phase of a call.
pub trait Tool: Send + Sync {
    /// The name the model calls it by.
    fn name(&self) -> &'static str;
    /// What the model is told it does.
    fn description(&self) -> &'static str;
    /// JSON Schema of its arguments.
    fn schema(&self) -> Value;
    /// Checks one call and either finishes it (a read; any check that failed) or plans it (a
    /// change, with the question the gate will ask). Changes nothing: what changes the disk or
    /// starts a command is in the plan's step, which only the executor can run. Never panics;
    /// every failure is a failed result.
    fn propose<'a>(
        &'a self,
        args: Args<'a>,
        cx: &'a ToolContext,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Proposal<'a>>;

    /// Why this call's arguments are too large to be shown or run (checked before anything of
    /// the call reaches a front end: a 50 MB command drawn in Neovim froze it), or None. By
    /// default, any string argument over [`MAX_ARGUMENT_CHARS`] characters.
    fn oversized(&self, args: &Map<String, Value>, _settings: &Settings) -> Option<String> {
        args.iter().find_map(|(name, value)| {
            let chars = crate::text::chars_over(value.as_str()?, MAX_ARGUMENT_CHARS)?;
            Some(format!(
                "{}: the argument '{name}' is {} characters long, over the limit of {}. Put long content in a file with edit_file, in parts, and refer to the file.",
                self.name(),
                crate::text::grouped(chars),
                crate::text::grouped(MAX_ARGUMENT_CHARS),
            ))
        })
    }

    /// The result of a call cancelled before its proposal was ready: for a read, [`CANCELLED`];
    /// a tool that changes things gives the row its plan would have given for a cancel.
    fn cancelled(&self, _args: Args<'_>, _cx: &ToolContext) -> ToolResult {
        ToolResult::fail(CANCELLED)
    }
}

/// The most characters a string argument of a tool may have (edit_file's texts: the edit size
/// limit instead): a run_bash command of 100,000 characters is already 1,250 screen lines to
/// read before allowing it.
pub const MAX_ARGUMENT_CHARS: usize = 100_000;

/// The failed result for an I/O beneath the root that did not happen: the refusals the path
/// check would have given (the tree changed under us, a loop, a name too long), `No such
/// directory` for a non-directory where one was needed, `Not a regular file` for FIFOs, devices
/// and sockets, and otherwise `{what} {rel}: {error}`. Missing files and directories are each
/// tool's own message.
pub(crate) fn fs_failure(
    what: &str,
    given: &str,
    target: &crate::workspace::Resolved,
    err: FsError,
) -> ToolResult {
    if let Some(refusal) = crate::workspace::Refusal::for_fs(given, &err) {
        return ToolResult::fail(refusal.to_string());
    }
    ToolResult::fail(match err {
        FsError::NotADirectory => format!("No such directory: {given}"),
        FsError::NotRegular => format!("Not a regular file: {given}"),
        FsError::NotFound => format!("No such file: {given}"),
        FsError::IsDirectory => format!("{what} {}: it is a directory", target.rel),
        FsError::Io(err) => format!("{what} {}: {err}", target.rel),
        FsError::Moved | FsError::Loop | FsError::TooLong => {
            format!(
                "{what} {}: the path changed while it was opened",
                target.rel
            )
        }
    })
}

/// Test helpers shared by the tools' own tests.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod testing {
    use super::*;
    use crate::approval::Asker;
    use crate::editor::NoEditor;
    use agent_nvim_vocab::approval::{ApprovalRequest, Decision};
    use std::sync::Mutex;

    /// Answers every request with one decision and records the requests.
    pub struct Recorder {
        pub answer: Option<Decision>,
        pub asked: Mutex<Vec<ApprovalRequest>>,
    }

    impl Asker for Recorder {
        fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, Option<Decision>> {
            self.asked.lock().unwrap().push(request);
            let answer = self.answer.clone();
            Box::pin(async move { answer })
        }
    }

    /// A temporary workspace and an executor over it whose gate answers `answer`.
    pub fn executor(answer: Option<Decision>) -> (tempfile::TempDir, Executor, Arc<Recorder>) {
        let dir = tempfile::tempdir().unwrap();
        let recorder = Arc::new(Recorder {
            answer,
            asked: Mutex::new(Vec::new()),
        });
        let cx = ToolContext {
            workspace: Workspace::new(dir.path()).unwrap(),
            gate: Arc::new(Gate::new(false, Some(recorder.clone()))),
            editor: Arc::new(NoEditor),
            settings: Settings::default(),
            checkpoints: None,
        };
        (dir, Executor::new(cx), recorder)
    }

    /// Calls `tool` with JSON `args`.
    pub async fn call(ex: &Executor, tool: &str, args: Value) -> ToolResult {
        ex.call(tool, &args, &CancellationToken::new()).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::testing::*;
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn the_catalogue_has_exactly_the_four_tools_in_order() {
        let (dir, ex, _) = executor(None);
        let names: Vec<_> = ex.catalogue().iter().map(|t| t.name).collect();
        assert_eq!(names, ["read_file", "list_files", "edit_file", "run_bash"]);
        // Mutating is what a tool's first phase is: a read finishes the call, a change plans it.
        std::fs::write(dir.path().join("a.txt"), "x").unwrap();
        let calls = [
            ("read_file", json!({"path": "a.txt"})),
            ("list_files", json!({})),
            (
                "edit_file",
                json!({"path": "a.txt", "old_str": "x", "new_str": "y"}),
            ),
            ("run_bash", json!({"command": "true"})),
        ];
        let cancel = CancellationToken::new();
        let mut mutating = Vec::new();
        for (name, args) in &calls {
            let tool = [&ReadFile as &dyn Tool, &ListFiles, &EditFile, &RunBash]
                .into_iter()
                .find(|t| t.name() == *name)
                .unwrap();
            let map = args.as_object().unwrap();
            let proposal = tool
                .propose(Args::new(name, map), ex.context(), &cancel)
                .await;
            mutating.push(matches!(proposal, Proposal::Plan(_)));
        }
        assert_eq!(mutating, [false, false, true, true]);
    }

    #[tokio::test]
    async fn a_key_in_a_result_is_redacted_in_its_text_and_summary() {
        crate::secrets::protect("sk-tool-result-0123456");
        let (dir, ex, _) = executor(None);
        std::fs::write(dir.path().join(".env"), "KEY=sk-tool-result-0123456\n").unwrap();
        assert_eq!(
            call(&ex, "read_file", json!({"path": ".env"})).await,
            ToolResult::ok("KEY=[redacted]\n", "read .env (27 chars)")
        );
        let missing = call(&ex, "read_file", json!({"path": "sk-tool-result-0123456"})).await;
        assert_eq!(missing, ToolResult::fail("No such file: [redacted]"));
    }

    #[tokio::test]
    async fn an_unknown_tool_is_a_failed_result() {
        let (_dir, ex, _) = executor(None);
        assert_eq!(
            call(&ex, "write_file", json!({})).await,
            ToolResult::fail_with("Unknown tool 'write_file'.", "Unknown tool 'write_file'.")
        );
    }

    #[tokio::test]
    async fn a_missing_or_non_string_argument_is_named() {
        let (_dir, ex, _) = executor(None);
        let missing = call(&ex, "read_file", json!({})).await;
        assert_eq!(missing.text, "read_file: missing string argument 'path'.");
        assert!(!missing.ok);
        let number = call(
            &ex,
            "edit_file",
            json!({"path": "a", "old_str": 1, "new_str": "x"}),
        )
        .await;
        assert_eq!(number.text, "edit_file: missing string argument 'old_str'.");
        let not_object = call(&ex, "run_bash", json!(["ls"])).await;
        assert_eq!(
            not_object.text,
            "run_bash: arguments must be a JSON object."
        );
    }

    /// The calls that change the disk or start a process, as a tool's source would spell them:
    /// the project's own (each of which takes an `Approved`, so the compiler holds that line too)
    /// and the standard library's and the system's, which a tool must never call at all.
    const EFFECTS: &[&str] = &[
        ".replace(",
        "create_new(",
        "make_parents(",
        "spawn_tree(",
        "reaper::spawn(",
        "process::run(",
        "process::run_seen(",
        "fs::write(",
        "File::create(",
        "OpenOptions",
        "remove_file(",
        "remove_dir",
        "fs::rename(",
        "create_dir",
        "set_permissions(",
        "Command::new(",
        ".spawn(",
        "unlinkat(",
        "renameat(",
        "mkdirat(",
        "libc::",
    ];

    /// The top-level items of `source` (its tests left out) that spell one of [`EFFECTS`], each as
    /// its header (the text before its first `{`), whitespace squeezed. An item runs from a line
    /// that starts with a letter (`fn`, `impl`, `async fn`) to the next one.
    fn items_with_effects(source: &str) -> Vec<String> {
        let code = source.split("\n#[cfg(test)]").next().unwrap();
        let mut items: Vec<String> = Vec::new();
        for line in code.lines() {
            let starts_item = line.starts_with(|c: char| c.is_ascii_alphabetic());
            match items.last_mut() {
                Some(item) if !starts_item => {
                    item.push_str(line);
                    item.push('\n');
                }
                _ => items.push(format!("{line}\n")),
            }
        }
        items
            .into_iter()
            .filter(|item| EFFECTS.iter().any(|effect| item.contains(effect)))
            .map(|item| {
                let header = item.split('{').next().unwrap_or_default();
                header.split_whitespace().collect::<Vec<_>>().join(" ")
            })
            .collect()
    }

    #[test]
    fn the_tools_reach_writes_and_spawns_only_through_functions_that_take_an_approved() {
        let sources = [
            ("read_file", include_str!("read_file.rs")),
            ("list_files", include_str!("list_files.rs")),
            ("edit_file", include_str!("edit_file.rs")),
            ("run_bash", include_str!("run_bash.rs")),
        ];
        let places: Vec<(&str, String)> = sources
            .iter()
            .flat_map(|(tool, source)| {
                items_with_effects(source)
                    .into_iter()
                    .map(move |header| (*tool, header))
            })
            .collect();
        let names: Vec<(&str, &str)> = places
            .iter()
            .map(|(tool, header)| (*tool, header.split('(').next().unwrap_or_default()))
            .collect();
        assert_eq!(
            names,
            [
                ("edit_file", "fn replace"),
                ("edit_file", "fn write_new"),
                ("run_bash", "async fn run"),
            ]
        );
        for (tool, header) in &places {
            assert!(header.contains("Approved"), "{tool}: {header}");
        }
    }
}
