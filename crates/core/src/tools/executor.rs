//! The executor: runs a call by name in two phases, and is the only code that can let a tool
//! change anything.
//!
//! A tool's [`Tool::propose`] does every check that can fail and either finishes the call (a read,
//! a failed check) or returns a [`Plan`]: the question a person will be asked and the step that
//! does the work. Only this module asks the gate about a plan, turns a refusal or a cancel into
//! the result once, and on an allow runs the plan's step, handing it the one thing the step
//! needs to write a file or start a command: an [`Approved`], which only this file and two other
//! places in the core mint (see [`crate::approved`]), so a tool has no way to reach its own
//! effect but through its plan.

use std::future::Future;

use futures::future::BoxFuture;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::{
    Args, EditFile, ListFiles, Progress, ReadFile, RunBash, Tool, ToolContext, ToolResult,
    ToolSpec, CANCELLED,
};
use crate::approval::{Gate, Verdict};
use crate::approved::Approved;
use crate::checkpoint::{Checkpoints, Kind};
use agent_nvim_vocab::approval::ApprovalRequest;

/// The step a plan runs once allowed: with the proof, and the person's version of the proposal
/// when they edited it first ([`agent_nvim_vocab::approval::Decision::Edited`]).
type Apply<'a> = Box<dyn FnOnce(Approved, Option<String>) -> BoxFuture<'a, ToolResult> + Send + 'a>;

/// A mutating call, checked and ready: what the person is asked, the summary rows for when it does
/// not run, and the step that does it. Only the executor can run the step.
pub struct Plan<'a> {
    question: ApprovalRequest,
    declined: String,
    cancelled: String,
    apply: Apply<'a>,
}

impl<'a> Plan<'a> {
    /// A plan asking `question`; `declined` and `cancelled` are the summary rows of a refusal and
    /// of a cancel while the question is open; `apply` is run only after an allow, and does the
    /// checks that must hold after the wait (the file did not change meanwhile) itself. Its
    /// second argument is the person's version of [`ApprovalRequest::proposal`], when they
    /// edited it before allowing (only ever Some when the question has a proposal).
    pub fn new<F, Fut>(
        question: ApprovalRequest,
        declined: String,
        cancelled: String,
        apply: F,
    ) -> Self
    where
        F: FnOnce(Approved, Option<String>) -> Fut + Send + 'a,
        Fut: Future<Output = ToolResult> + Send + 'a,
    {
        Plan {
            question,
            declined,
            cancelled,
            apply: Box::new(move |approved, edited| Box::pin(apply(approved, edited))),
        }
    }

    /// What the gate will be asked.
    pub fn question(&self) -> &ApprovalRequest {
        &self.question
    }
}

/// What the first phase of a call produced.
pub enum Proposal<'a> {
    /// The call is over: a read's result, or a check that failed.
    Done(ToolResult),
    /// A mutating call that passed its checks and waits for the gate.
    Plan(Plan<'a>),
}

impl From<ToolResult> for Proposal<'_> {
    fn from(result: ToolResult) -> Self {
        Proposal::Done(result)
    }
}

/// Asks the gate about `plan`, and runs its step only on an allow. A refusal and a cancel are
/// results here and nowhere else, so every tool's are worded alike. An allowed step runs after
/// a checkpoint of the workspace (when `checkpoints` is on), so what it does can be rewound; a
/// checkpoint that fails is reported once by the handle and never stops the step.
async fn settle(
    plan: Plan<'_>,
    gate: &Gate,
    checkpoints: Option<&Checkpoints>,
    cancel: &CancellationToken,
) -> (ToolResult, Option<String>) {
    let Plan {
        question,
        declined,
        cancelled,
        apply,
    } = plan;
    let tool = question.tool;
    let mut detail = question.detail.clone();
    let mut diff = question.diff.clone();
    let verdict = gate.check(question, cancel).await;
    let mut unasked = None;
    let edited = match verdict {
        Verdict::Allowed => None,
        Verdict::AllowedUnasked { why } => {
            unasked = Some(why);
            None
        }
        Verdict::Edited { text } => Some(text),
        Verdict::Refused { reason } => {
            let text = Verdict::refusal_text(tool, reason.as_deref());
            return (ToolResult::fail_with(text, declined), None);
        }
        Verdict::Denied { text, why } => {
            return (
                ToolResult::fail_with(text, format!("{declined} {why}")),
                None,
            )
        }
        Verdict::Cancelled => return (ToolResult::fail_with(CANCELLED, cancelled), None),
    };
    if edited.is_some() {
        diff = None; // the proposal's diff is not what was written; the result says what was
    }
    // An allowed step is not cut off by a cancel: an edit is never left half done, and a
    // command ends at a cancel through its own process tree.
    if let Some(checkpoints) = checkpoints {
        let kind = match tool {
            "run_bash" => Kind::Command,
            _ => Kind::Edit,
        };
        if let (Kind::Command, Some(command)) = (kind, &edited) {
            detail.clone_from(command);
        }
        checkpoints.checkpoint(kind, &detail).await;
    }
    let mut result = apply(Approved::by_gate(), edited).await;
    // Said in the row: why it ran with nobody asked.
    if let Some(why) = unasked {
        result.summary = format!("{} · {why}", result.summary);
    }
    if let Some(notice) = gate.take_notice() {
        result.summary = format!("{} · {notice}", result.summary);
    }
    let diff = diff.filter(|_| result.ok);
    (result, diff)
}

/// Characters of an edit's diff its row's fold shows at most.
pub const SHOWN_DIFF_CHARS: usize = 20_000;

/// An edit's diff as its row shows it: at most [`SHOWN_DIFF_CHARS`], then a line saying how
/// many lines were left out.
fn clamp_diff(diff: String) -> String {
    let (kept, cut) = crate::text::clamp_head(&diff, SHOWN_DIFF_CHARS);
    if !cut {
        return diff;
    }
    let rest = diff[kept.len()..].lines().count();
    format!(
        "{}\n[... the diff goes on for {rest} more lines]\n",
        kept.trim_end_matches('\n')
    )
}

/// A call's progress, redacted on its way: a key a command prints never reaches the screen.
struct Redacted<'a>(&'a dyn Progress);

impl Progress for Redacted<'_> {
    fn output(&self, newest: String) {
        self.0.output(crate::secrets::redact_owned(newest));
    }
}

/// Runs tool calls by name against one context.
pub struct Executor {
    tools: Vec<Box<dyn Tool>>,
    cx: ToolContext,
}

impl Executor {
    /// The four tools, in catalogue order, over `cx`.
    pub fn new(cx: ToolContext) -> Self {
        let tools: Vec<Box<dyn Tool>> = vec![
            Box::new(ReadFile),
            Box::new(ListFiles),
            Box::new(EditFile),
            Box::new(RunBash),
        ];
        Executor { tools, cx }
    }

    /// The same catalogue with `tool` in place of the one of its name (the inline edit's
    /// edit_file, [`super::inline::InlineEdit`]). A tool put in has no way to change anything
    /// but through a [`Plan`] this executor settles: only the executor mints the
    /// [`Approved`] a write or a spawn takes.
    pub fn with_tool(mut self, tool: Box<dyn Tool>) -> Self {
        match self.tools.iter_mut().find(|t| t.name() == tool.name()) {
            Some(place) => *place = tool,
            None => self.tools.push(tool),
        }
        self
    }

    /// The context the tools run in.
    pub fn context(&self) -> &ToolContext {
        &self.cx
    }

    /// The catalogue, in order: read_file, list_files, edit_file, run_bash.
    pub fn catalogue(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name(),
                description: t.description(),
                schema: t.schema(),
            })
            .collect()
    }

    /// Runs one call. Unknown names and non-object arguments are failed results. The result is
    /// redacted: a key the tool came across (a `.env` file, a command's output) never reaches the
    /// model or the user's screen.
    pub async fn call(&self, name: &str, args: &Value, cancel: &CancellationToken) -> ToolResult {
        self.call_with_diff(name, args, cancel, &super::Unwatched)
            .await
            .0
    }

    /// [`Executor::call`], its progress reported to `progress` as it runs (a command's newest
    /// output, redacted), and for an edit that was written, the diff the person was shown for it
    /// (clamped to [`SHOWN_DIFF_CHARS`], redacted): the row's fold shows it.
    pub async fn call_with_diff(
        &self,
        name: &str,
        args: &Value,
        cancel: &CancellationToken,
        progress: &dyn Progress,
    ) -> (ToolResult, Option<String>) {
        let progress = Redacted(progress);
        let (result, diff) = self.dispatch(name, args, cancel, &progress).await;
        let redact = |text: String| match crate::secrets::redact(&text) {
            std::borrow::Cow::Borrowed(_) => text,
            std::borrow::Cow::Owned(clean) => clean,
        };
        let result = ToolResult {
            ok: result.ok,
            text: redact(result.text),
            summary: redact(result.summary),
        };
        (result, diff.map(|d| redact(clamp_diff(d))))
    }

    /// The failed result for a call whose arguments are too large to show or run
    /// ([`Tool::oversized`]), or None. The turn loop asks before the call reaches a front end.
    pub fn oversized(&self, name: &str, args: &Value) -> Option<ToolResult> {
        let tool = self.tools.iter().find(|t| t.name() == name)?;
        let why = tool.oversized(args.as_object()?, &self.cx.settings)?;
        let summary = format!("{name}: arguments too large");
        Some(ToolResult::fail_with(why, summary))
    }

    async fn dispatch(
        &self,
        name: &str,
        args: &Value,
        cancel: &CancellationToken,
        progress: &dyn Progress,
    ) -> (ToolResult, Option<String>) {
        let Some(tool) = self.tools.iter().find(|t| t.name() == name) else {
            return (ToolResult::fail(format!("Unknown tool '{name}'.")), None);
        };
        if let Some(result) = self.oversized(name, args) {
            return (result, None);
        }
        let empty = Map::new();
        let map = match args {
            Value::Object(map) => map,
            Value::Null => &empty,
            _ => {
                return (
                    ToolResult::fail(format!("{}: arguments must be a JSON object.", tool.name())),
                    None,
                )
            }
        };
        self.run(
            tool.as_ref(),
            Args::watched(tool.name(), map, progress),
            cancel,
        )
        .await
    }

    /// The two phases of one call. Proposing changes nothing, so a cancel ends it at once,
    /// whatever it was waiting on (a read of a huge file, a buffer query).
    async fn run<'a>(
        &'a self,
        tool: &'a dyn Tool,
        args: Args<'a>,
        cancel: &'a CancellationToken,
    ) -> (ToolResult, Option<String>) {
        let again = Args::new(args.tool, args.map);
        let proposal = tokio::select! {
            // A proposal that is ready wins over a cancel that came meanwhile: the gate then
            // sees the cancel, and the row is the plan's own.
            biased;
            proposal = tool.propose(args, &self.cx, cancel) => proposal,
            () = cancel.cancelled() => return (tool.cancelled(again, &self.cx), None),
        };
        match proposal {
            Proposal::Done(result) => (result, None),
            Proposal::Plan(plan) => {
                settle(plan, &self.cx.gate, self.cx.checkpoints.as_ref(), cancel).await
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::approval::Asker;
    use crate::tools::testing::executor;
    use agent_nvim_vocab::approval::{Action, Decision};
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    /// A mutating test tool whose plan counts the times its step ran.
    struct Probe {
        applied: Arc<AtomicUsize>,
    }

    impl Tool for Probe {
        fn name(&self) -> &'static str {
            "probe"
        }
        fn description(&self) -> &'static str {
            "test tool"
        }
        fn schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn propose<'a>(
            &'a self,
            _args: Args<'a>,
            _cx: &'a ToolContext,
            _cancel: &'a CancellationToken,
        ) -> BoxFuture<'a, Proposal<'a>> {
            let applied = self.applied.clone();
            let question = ApprovalRequest {
                tool: "probe",
                detail: "probe the disk".into(),
                diff: None,
                action: Action::Command {
                    command: "probe".into(),
                },
                proposal: None,
            };
            let plan = Plan::new(
                question,
                "probe: declined".into(),
                "probe: cancelled".into(),
                move |_approved: Approved, _edited| async move {
                    applied.fetch_add(1, Ordering::SeqCst);
                    ToolResult::ok("probed", "probe")
                },
            );
            Box::pin(async move { Proposal::Plan(plan) })
        }
    }

    /// A probe, and the count of its step's runs.
    fn probe_tool() -> (Probe, Arc<AtomicUsize>) {
        let applied = Arc::new(AtomicUsize::new(0));
        let probe = Probe {
            applied: applied.clone(),
        };
        (probe, applied)
    }

    /// The probe's plan (it always plans), proposed in `cx`.
    async fn plan_of<'a>(
        probe: &'a Probe,
        cx: &'a ToolContext,
        cancel: &'a CancellationToken,
    ) -> Plan<'a> {
        static NO_ARGS: std::sync::LazyLock<Map<String, Value>> =
            std::sync::LazyLock::new(Map::new);
        match probe
            .propose(Args::new("probe", &NO_ARGS), cx, cancel)
            .await
        {
            Proposal::Plan(plan) => plan,
            Proposal::Done(result) => panic!("the probe finished: {result:?}"),
        }
    }

    /// Settles the probe's plan once with a gate that answers `answer` (None: nobody to ask);
    /// returns the result and how often its step ran.
    async fn probe(answer: Option<Decision>) -> (ToolResult, usize) {
        let (_dir, ex, _) = executor(answer);
        let (tool, applied) = probe_tool();
        let cancel = CancellationToken::new();
        let plan = plan_of(&tool, ex.context(), &cancel).await;
        let result = settle(plan, &ex.cx.gate, None, &cancel).await.0;
        (result, applied.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn a_plan_is_applied_once_on_an_allow_and_never_otherwise() {
        assert_eq!(
            probe(Some(Decision::AllowOnce)).await,
            (ToolResult::ok("probed", "probe"), 1)
        );
        assert_eq!(
            probe(Some(Decision::Refuse {
                reason: Some("no".into())
            }))
            .await,
            (
                ToolResult::fail_with(
                    "The user declined to run probe. Ask what they would like to do instead. \
                     The user said: no",
                    "probe: declined"
                ),
                0
            )
        );
        assert_eq!(
            probe(None).await,
            (
                ToolResult::fail_with(
                    "The user declined to run probe. Ask what they would like to do instead.",
                    "probe: declined"
                ),
                0
            )
        );
    }

    /// A person who walks away: never answers, and the turn is cancelled while the question is
    /// open (the token in `turn` is cancelled as the question is asked).
    #[derive(Default)]
    struct WalksAway {
        turn: Mutex<CancellationToken>,
        asked: Mutex<usize>,
    }

    impl WalksAway {
        /// A fresh turn's token, cancelled when the next question is asked.
        fn next_turn(&self) -> CancellationToken {
            let cancel = CancellationToken::new();
            *self.turn.lock().unwrap() = cancel.clone();
            cancel
        }
    }

    impl Asker for WalksAway {
        fn ask(
            &self,
            _request: agent_nvim_vocab::approval::ApprovalRequest,
        ) -> BoxFuture<'_, Option<Decision>> {
            *self.asked.lock().unwrap() += 1;
            self.turn.lock().unwrap().cancel();
            Box::pin(futures::future::pending())
        }
    }

    #[tokio::test]
    async fn a_cancel_while_the_question_is_open_ends_the_call_without_applying() {
        let (_dir, ex, _) = executor(None);
        let person = Arc::new(WalksAway::default());
        let gate = Gate::new(false, Some(person.clone()));
        let (tool, applied) = probe_tool();
        let cancel = person.next_turn();
        let plan = plan_of(&tool, ex.context(), &cancel).await;
        assert_eq!(
            settle(plan, &gate, None, &cancel).await.0,
            ToolResult::fail_with(CANCELLED, "probe: cancelled")
        );
        assert_eq!(applied.load(Ordering::SeqCst), 0);
        assert_eq!(*person.asked.lock().unwrap(), 1);
    }

    #[tokio::test]
    async fn an_allowed_plan_is_applied_even_when_the_turn_was_cancelled_meanwhile() {
        // Auto-approve answers without looking at the cancel; the step then runs whole, as an
        // approved edit always has.
        let (_dir, mut ex, recorder) = executor(Some(Decision::AllowOnce));
        ex.cx.gate = Arc::new(Gate::new(true, Some(recorder.clone())));
        let (tool, applied) = probe_tool();
        let cancel = CancellationToken::new();
        let plan = plan_of(&tool, ex.context(), &cancel).await;
        cancel.cancel();
        assert_eq!(
            settle(plan, &ex.cx.gate, None, &cancel).await.0,
            ToolResult::ok("probed", "probe")
        );
        assert_eq!(applied.load(Ordering::SeqCst), 1);
        assert!(recorder.asked.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_gate_is_asked_the_plans_question_through_a_call_by_name() {
        let (_dir, mut ex, recorder) = executor(Some(Decision::AllowOnce));
        let (tool, applied) = probe_tool();
        ex.tools.push(Box::new(tool));
        assert_eq!(
            ex.call("probe", &json!({}), &CancellationToken::new())
                .await,
            ToolResult::ok("probed", "probe")
        );
        let asked: Vec<_> = recorder
            .asked
            .lock()
            .unwrap()
            .iter()
            .map(|r| (r.tool.to_string(), r.detail.clone()))
            .collect();
        assert_eq!(asked, [("probe".to_string(), "probe the disk".to_string())]);
        assert_eq!(applied.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_cancel_while_the_question_is_open_ends_each_tool_with_its_own_summary() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "old").unwrap();
        let person = Arc::new(WalksAway::default());
        let ex = Executor::new(ToolContext {
            workspace: crate::workspace::Workspace::new(dir.path()).unwrap(),
            gate: Arc::new(Gate::new(false, Some(person.clone()))),
            editor: Arc::new(crate::editor::NoEditor),
            settings: crate::tools::Settings::default(),
            checkpoints: None,
        });
        let calls = [
            (
                "edit_file",
                json!({"path": "a.txt", "old_str": "old", "new_str": "new"}),
                "edit a.txt: cancelled",
            ),
            (
                "edit_file",
                json!({"path": "b.txt", "old_str": "", "new_str": "new"}),
                "edit b.txt: cancelled",
            ),
            (
                "run_bash",
                json!({"command": "touch ran"}),
                "$ touch ran -> cancelled",
            ),
        ];
        for (tool, args, summary) in calls {
            let cancel = person.next_turn();
            assert_eq!(
                ex.call(tool, &args, &cancel).await,
                ToolResult::fail_with(CANCELLED, summary)
            );
        }
        assert_eq!(*person.asked.lock().unwrap(), 3);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "old"
        );
        assert!(!dir.path().join("b.txt").exists());
        assert!(!dir.path().join("ran").exists());
    }

    #[tokio::test]
    async fn an_allowed_change_is_checkpointed_before_it_runs_and_a_refused_one_is_not() {
        let state = tempfile::tempdir().unwrap();
        let (dir, mut ex, _) = executor(Some(Decision::AllowOnce));
        std::fs::write(dir.path().join("a.txt"), "old").unwrap();
        let checkpoints = Checkpoints::new(state.path(), ex.cx.workspace.clone(), "c".into());
        ex.cx.checkpoints = Some(checkpoints.clone());
        let edit = json!({"path": "a.txt", "old_str": "old", "new_str": "new"});
        assert!(
            ex.call("edit_file", &edit, &CancellationToken::new())
                .await
                .ok
        );
        let command = json!({"command": "echo made > b.txt"});
        assert!(
            ex.call("run_bash", &command, &CancellationToken::new())
                .await
                .ok
        );
        let listed = checkpoints.list("c").await.unwrap();
        let kinds: Vec<(Kind, &str)> = listed.iter().map(|c| (c.kind, c.label.as_str())).collect();
        assert_eq!(
            kinds,
            [
                (Kind::Edit, "edit a.txt (replace 3 chars with 3)"),
                (Kind::Command, "echo made > b.txt")
            ]
        );
        let before_edit = checkpoints.file_at(&listed[0].id, "a.txt".as_ref()).await;
        assert_eq!(before_edit.unwrap(), Some(b"old".to_vec()));
        let before_command = checkpoints.file_at(&listed[1].id, "b.txt".as_ref()).await;
        assert_eq!(before_command.unwrap(), None);

        let (_dir, mut refusing, _) = executor(Some(Decision::Refuse { reason: None }));
        let refused = Checkpoints::new(state.path(), refusing.cx.workspace.clone(), "r".into());
        refusing.cx.checkpoints = Some(refused.clone());
        assert!(
            !refusing
                .call("run_bash", &command, &CancellationToken::new())
                .await
                .ok
        );
        assert_eq!(refused.list("r").await.unwrap(), []);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod cancelled_while_proposing {
    use super::*;
    use crate::editor::Editor;
    use crate::tools::{Settings, ToolContext};
    use serde_json::json;
    use std::path::Path;
    use std::sync::Arc;

    /// An editor whose buffer query cancels the turn and then never answers, so the cancel
    /// lands while edit_file is still proposing.
    struct CancelsWhileAsked(CancellationToken);

    impl Editor for CancelsWhileAsked {
        fn has_unsaved_changes<'a>(&'a self, _path: &'a Path) -> BoxFuture<'a, bool> {
            self.0.cancel();
            Box::pin(futures::future::pending())
        }
        fn file_written<'a>(&'a self, _path: &'a Path) -> BoxFuture<'a, ()> {
            Box::pin(async {})
        }
        fn command_finished(&self) -> BoxFuture<'_, ()> {
            Box::pin(async {})
        }
    }

    #[tokio::test]
    async fn a_cancel_before_the_plan_is_ready_gives_the_tools_own_row_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "old").unwrap();
        let cancel = CancellationToken::new();
        // Even with everything allowed, nothing is written: nothing had been proposed yet.
        let ex = Executor::new(ToolContext {
            workspace: crate::workspace::Workspace::new(dir.path()).unwrap(),
            gate: Arc::new(Gate::new(true, None)),
            editor: Arc::new(CancelsWhileAsked(cancel.clone())),
            settings: Settings::default(),
            checkpoints: None,
        });
        let edit = json!({"path": "./a.txt", "old_str": "old", "new_str": "new"});
        assert_eq!(
            ex.call("edit_file", &edit, &cancel).await,
            ToolResult::fail_with(CANCELLED, "edit a.txt: cancelled")
        );
        let create = json!({"path": "b.txt", "old_str": "", "new_str": "new"});
        assert_eq!(
            ex.call("edit_file", &create, &cancel).await,
            ToolResult::fail_with(CANCELLED, "edit b.txt: cancelled")
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "old"
        );
        assert!(!dir.path().join("b.txt").exists());
        // A read keeps the plain cancel.
        assert_eq!(
            ex.call("read_file", &json!({"path": "a.txt"}), &cancel)
                .await,
            ToolResult::fail(CANCELLED)
        );
    }
}
