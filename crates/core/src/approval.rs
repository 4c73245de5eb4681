//! The approval gate: every mutating tool call is asked about here first (by the executor, from
//! the tool's plan), and this is the only place that decides whether it may go ahead. Front ends
//! only show the question and carry the answer back.
//!
//! Session memory lives here too, so "Allow for this session" means the same thing in Neovim and
//! in the terminal. (An external ACP agent keeps its own: its permission requests carry its own
//! options, answered by the person or by auto_approve, never from these grants.)

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::permissions::saved::Project;
use crate::permissions::{Judgement, Rules};

pub use agent_nvim_vocab::approval::{Action, ApprovalRequest, Decision, Proposed};

/// The gate's verdict on one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Go ahead: the person said so.
    Allowed,
    /// Go ahead, with nobody asked; `why` is what the chat's row says of it (`allowed by
    /// run_bash(git status *)`, `allowed for this session`, `sandboxed, auto-allowed`).
    AllowedUnasked { why: String },
    /// Go ahead with the person's version of the proposal ([`Decision::Edited`]).
    Edited { text: String },
    /// Do not; the result the model reads says so.
    Refused { reason: Option<String> },
    /// Refused by the person's permission rules, not by a person: `text` is the whole result
    /// the model reads (`Refused by the rule 'run_bash(rm *)' in permissions.deny.`), `why` what
    /// the chat's row adds to its `declined` (`by the rule 'run_bash(rm *)' in permissions.deny`).
    Denied { text: String, why: String },
    /// The turn was cancelled while the question was open.
    Cancelled,
}

/// [`Verdict::AllowedUnasked`] saying `why`.
fn unasked(why: String) -> Verdict {
    Verdict::AllowedUnasked { why }
}

impl Verdict {
    /// The text a tool returns when refused (SPEC section 3).
    pub fn refusal_text(tool: &str, reason: Option<&str>) -> String {
        let mut text =
            format!("The user declined to run {tool}. Ask what they would like to do instead.");
        if let Some(reason) = reason.map(str::trim).filter(|r| !r.is_empty()) {
            text.push_str(" The user said: ");
            text.push_str(reason);
        }
        text
    }
}

/// Shows a request to a person and waits for their answer. Returns None when there is no one to
/// ask (no UI attached, stdin not a terminal): the gate then refuses.
pub trait Asker: Send + Sync {
    /// Asks; resolves when the person answers.
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, Option<Decision>>;
}

/// What this session has already allowed.
#[derive(Debug, Default)]
struct Grants {
    all: bool,
    edits: bool,
    commands: HashSet<String>,
}

impl Grants {
    fn covers(&self, action: &Action) -> bool {
        self.all
            || match action {
                Action::Edit { .. } => self.edits,
                Action::Command { command } => self.commands.contains(command),
            }
    }

    fn remember(&mut self, decision: &Decision, action: &Action) {
        match decision {
            Decision::AllowAll => self.all = true,
            Decision::AllowSession => match action {
                Action::Edit { .. } => self.edits = true,
                Action::Command { command } => {
                    self.commands.insert(command.clone());
                }
            },
            // Saved in the workspace's rules, which are read again at each question; kept
            // here only when saving failed ([`Gate::check`]).
            Decision::AllowProject
            | Decision::AllowOnce
            | Decision::Edited { .. }
            | Decision::Refuse { .. } => {}
        }
    }
}

/// The most characters of diff a question shows (about 20,000 lines): a larger change is
/// refused rather than drawn, since nobody reads it whole and drawing it stalls the editor.
pub const MAX_DIFF_CHARS: usize = 1_000_000;

/// The gate. One per session; cheap to share behind an `Arc`.
pub struct Gate {
    auto_approve: bool,
    asker: Option<Arc<dyn Asker>>,
    grants: Mutex<Grants>,
    rules: Rules,
    project: Option<Project>,
    notice: Mutex<Option<String>>,
    sandboxed_commands: bool,
    /// Why `auto_allow_sandboxed` is set but not in force, said once per conversation.
    sandbox_note: Option<String>,
    /// Whether [`Gate::sandbox_note`] was said in this conversation.
    sandbox_said: std::sync::atomic::AtomicBool,
}

impl Gate {
    /// A gate that asks `asker` (None: nobody can be asked) unless `auto_approve` allows all.
    pub fn new(auto_approve: bool, asker: Option<Arc<dyn Asker>>) -> Self {
        Gate {
            auto_approve,
            asker,
            grants: Mutex::new(Grants::default()),
            rules: Rules::default(),
            project: None,
            notice: Mutex::new(None),
            sandboxed_commands: false,
            sandbox_note: None,
            sandbox_said: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The same gate, allowing what the workspace's saved rules allow, and saving there what a
    /// person allows always in this project.
    pub fn with_project(mut self, project: Option<Project>) -> Self {
        self.project = project;
        self
    }

    /// What went wrong with the last decision that the person should hear of (an "Allow always
    /// in this project" that could not be saved), once.
    pub fn take_notice(&self) -> Option<String> {
        self.notice.lock().ok().and_then(|mut n| n.take())
    }

    /// The same gate, judging each call by `rules` first.
    pub fn with_rules(mut self, rules: Rules) -> Self {
        self.rules = rules;
        self
    }

    /// The same gate, allowing run_bash's commands without asking when `sandboxed` (the
    /// sandbox is in force and `auto_allow_sandboxed` is set; see [`Gate::sandbox_allows`]).
    pub fn with_sandboxed_commands(mut self, sandboxed: bool) -> Self {
        self.sandboxed_commands = sandboxed;
        self
    }

    /// The same gate, with `note` saying why `auto_allow_sandboxed` is set but not in force
    /// (the kernel cannot enforce the whole sandbox): [`Gate::sandbox_note`] says it once per
    /// conversation.
    pub fn with_sandbox_note(mut self, note: Option<String>) -> Self {
        self.sandbox_note = note;
        self
    }

    /// Why commands are asked about although `auto_allow_sandboxed` is set, the first time it
    /// is asked in a conversation (None after, and when it is in force or not set).
    pub fn sandbox_note(&self) -> Option<String> {
        let note = self.sandbox_note.as_ref()?;
        let said = self
            .sandbox_said
            .swap(true, std::sync::atomic::Ordering::Relaxed);
        (!said).then(|| note.clone())
    }

    /// Forgets every session grant (a new conversation is a new session).
    pub fn reset(&self) {
        if let Ok(mut grants) = self.grants.lock() {
            *grants = Grants::default();
        }
        self.sandbox_said
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Decides on one call. The permission rules come first: a deny refuses (auto_approve
    /// too), an allow allows, an ask goes to the person even when a grant covers the call.
    /// Then a rule saved for this workspace, or the sandbox with auto_allow_sandboxed (for
    /// commands), allows; then auto_approve or an earlier grant; otherwise the asker is asked,
    /// and its answer is remembered when it grants more than once (saved, for "Allow always
    /// in this project"), or carries the person's own version of the proposal (once). A
    /// command line no rule can judge is not auto-approved while deny rules for commands exist
    /// (one could be inside it).
    pub async fn check(&self, request: ApprovalRequest, cancel: &CancellationToken) -> Verdict {
        let judged = self.rules.judge(&request.action);
        match &judged {
            Judgement::Deny { rule } => {
                return Verdict::Denied {
                    text: Judgement::refusal(rule),
                    why: format!("by the rule {rule}"),
                }
            }
            Judgement::Allow => {
                return unasked(format!(
                    "allowed by {}",
                    self.rules.allowed_by(&request.action)
                ))
            }
            Judgement::Ask { .. } | Judgement::Undecided | Judgement::Opaque { .. } => {}
        }
        // A rule the person saved for this workspace: the exact line they saw, or every edit.
        let asks = matches!(judged, Judgement::Ask { .. });
        if !asks
            && self
                .project
                .as_ref()
                .is_some_and(|p| p.allows(&request.action))
        {
            return unasked("allowed always in this project".into());
        }
        // A command the sandbox confines, with auto_allow_sandboxed (not one an ask rule asks
        // about, nor an opaque line while deny rules exist).
        if self.sandbox_allows(&request.action, &judged) {
            return unasked("sandboxed, auto-allowed".into());
        }
        if self.auto_approve {
            if self.rules.auto_approvable(&judged) {
                // Every call is, so no row says so (the person chose it for all of them).
                return Verdict::Allowed;
            }
            // Refused, person or not: under auto_approve nobody is asked, and what the deny
            // rules cannot see into does not run unseen.
            let why = match &judged {
                Judgement::Opaque { why } => why,
                _ => "it cannot be judged",
            };
            return Verdict::Denied {
                text: format!(
                    "Refused: this command cannot be checked against permissions.deny ({why}), and auto_approve does not run what the deny rules cannot see. Run its parts as plain commands instead."
                ),
                why: "(the deny rules cannot see into it)".into(),
            };
        } else if !asks {
            if let Some(why) = self.granted(&request.action) {
                return unasked(why.into());
            }
        }
        let Some(asker) = &self.asker else {
            return Verdict::Refused { reason: None };
        };
        // A question nobody can read whole is not asked: refused, saying why.
        if let Some(chars) = request
            .diff
            .as_deref()
            .and_then(|diff| crate::text::chars_over(diff, MAX_DIFF_CHARS))
        {
            return Verdict::Denied {
                text: format!(
                    "{}: the change is too large to show for approval ({} characters of diff, over {}). Make it in smaller edits.",
                    request.tool,
                    crate::text::grouped(chars),
                    crate::text::grouped(MAX_DIFF_CHARS)
                ),
                why: "(too large to show)".into(),
            };
        }
        let action = request.action.clone();
        let editable = request.proposal.is_some();
        let answer = tokio::select! {
            answer = asker.ask(request) => answer,
            () = cancel.cancelled() => return Verdict::Cancelled,
        };
        match answer {
            None => Verdict::Refused { reason: None },
            Some(Decision::Refuse { reason }) => Verdict::Refused { reason },
            // The person's own version runs once; nothing is remembered. A front end that
            // answers with an edit of what could not be edited is refused, not believed.
            Some(Decision::Edited { text }) if editable => Verdict::Edited { text },
            Some(Decision::Edited { .. }) => {
                tracing::warn!("an edited answer to a request that cannot be edited");
                Verdict::Refused { reason: None }
            }
            Some(Decision::AllowProject) => {
                let saved = match &self.project {
                    Some(project) => project.save(&action).map_err(|err| err.to_string()),
                    None => Err(
                        "no state directory to save rules in (set HOME or XDG_STATE_HOME)".into(),
                    ),
                };
                if let Err(err) = saved {
                    tracing::warn!(%err, "a rule for this project was not saved");
                    // Still allowed as asked, for the rest of the session at least.
                    if let Ok(mut grants) = self.grants.lock() {
                        grants.remember(&Decision::AllowSession, &action);
                    }
                    if let Ok(mut notice) = self.notice.lock() {
                        *notice = Some(format!("not saved for this project: {err}"));
                    }
                }
                Verdict::Allowed
            }
            Some(decision) => {
                if let Ok(mut grants) = self.grants.lock() {
                    grants.remember(&decision, &action);
                }
                Verdict::Allowed
            }
        }
    }

    /// `auto_allow_sandboxed`: a command the rules left to a person runs without one when the
    /// sandbox is in force. An ask rule still asks, edits are still asked about, and a line the
    /// deny rules cannot see into is not let through while deny rules for commands exist (as
    /// under auto_approve).
    fn sandbox_allows(&self, action: &Action, judged: &Judgement) -> bool {
        self.sandboxed_commands
            && matches!(action, Action::Command { .. })
            && !matches!(judged, Judgement::Ask { .. })
            && self.rules.auto_approvable(judged)
    }

    /// Whether this session's grants cover `action`: how the row says so.
    fn granted(&self, action: &Action) -> Option<&'static str> {
        let grants = self.grants.lock().ok()?;
        if !grants.covers(action) {
            return None;
        }
        Some(if grants.all {
            "allowed (everything this session)"
        } else {
            "allowed for this session"
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Answers from a script and records what it was asked.
    struct Scripted {
        answers: Mutex<VecDeque<Option<Decision>>>,
        asked: Mutex<Vec<ApprovalRequest>>,
    }

    impl Scripted {
        fn new(answers: Vec<Option<Decision>>) -> Arc<Self> {
            Arc::new(Scripted {
                answers: Mutex::new(answers.into()),
                asked: Mutex::new(Vec::new()),
            })
        }
        fn asked(&self) -> Vec<String> {
            self.asked
                .lock()
                .unwrap()
                .iter()
                .map(|r| r.detail.clone())
                .collect()
        }
    }

    impl Asker for Scripted {
        fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, Option<Decision>> {
            self.asked.lock().unwrap().push(request);
            let answer = self.answers.lock().unwrap().pop_front().flatten();
            Box::pin(async move { answer })
        }
    }

    fn edit(rel: &str) -> Action {
        Action::Edit {
            rel: rel.to_string(),
        }
    }
    fn cmd(command: &str) -> Action {
        Action::Command {
            command: command.to_string(),
        }
    }

    async fn ask(gate: &Gate, tool: &'static str, action: Action) -> Verdict {
        let detail = match &action {
            Action::Edit { rel } => format!("edit {rel}"),
            Action::Command { command } => command.clone(),
        };
        let question = ApprovalRequest {
            tool,
            detail,
            diff: None,
            action,
            proposal: None,
        };
        gate.check(question, &CancellationToken::new()).await
    }

    fn rules(allow: &[&str], ask: &[&str], deny: &[&str]) -> Rules {
        let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Rules::parse(&owned(allow), &owned(ask), &owned(deny)).unwrap()
    }

    #[tokio::test]
    async fn a_deny_rule_refuses_even_under_auto_approve_with_the_rules_words() {
        let gate = Gate::new(true, None).with_rules(rules(&[], &[], &["run_bash(rm *)"]));
        assert_eq!(
            ask(&gate, "run_bash", cmd("ls && rm -rf x")).await,
            Verdict::Denied {
                text: "Refused by the rule 'run_bash(rm *)' in permissions.deny.".into(),
                why: "by the rule 'run_bash(rm *)' in permissions.deny".into(),
            }
        );
        assert_eq!(ask(&gate, "run_bash", cmd("ls")).await, Verdict::Allowed);
    }

    #[tokio::test]
    async fn an_allow_rule_needs_nobody_and_anything_else_is_still_asked() {
        let asker = Scripted::new(vec![None, None]);
        let gate = Gate::new(false, Some(asker.clone())).with_rules(rules(
            &["run_bash(git status)", "run_bash(cargo test *)"],
            &[],
            &[],
        ));
        // The row names the rules that allowed it.
        for (line, rules) in [
            ("git status", "run_bash(git status)"),
            ("cargo test --lib", "run_bash(cargo test *)"),
            (
                "git status && cargo test",
                "run_bash(git status), run_bash(cargo test *)",
            ),
        ] {
            assert_eq!(
                ask(&gate, "run_bash", cmd(line)).await,
                unasked(format!("allowed by {rules}"))
            );
        }
        for line in ["git status && rm -rf x", "echo $(id)"] {
            assert_eq!(
                ask(&gate, "run_bash", cmd(line)).await,
                Verdict::Refused { reason: None }
            );
        }
        assert_eq!(asker.asked(), vec!["git status && rm -rf x", "echo $(id)"]);
    }

    #[tokio::test]
    async fn an_ask_rule_asks_even_when_the_session_granted_the_call() {
        let asker = Scripted::new(vec![Some(Decision::AllowAll), None]);
        let gate = Gate::new(false, Some(asker.clone())).with_rules(rules(
            &[],
            &["run_bash(git push *)"],
            &[],
        ));
        assert_eq!(ask(&gate, "run_bash", cmd("ls")).await, Verdict::Allowed);
        // Everything is granted now, but the ask rule still asks (and this answer refuses).
        assert_eq!(
            ask(&gate, "run_bash", cmd("pwd")).await,
            unasked("allowed (everything this session)".into())
        );
        assert_eq!(
            ask(&gate, "run_bash", cmd("git push origin")).await,
            Verdict::Refused { reason: None }
        );
        assert_eq!(asker.asked(), vec!["ls", "git push origin"]);
    }

    #[tokio::test]
    async fn what_deny_rules_cannot_see_into_is_not_auto_approved() {
        let denying = rules(&[], &[], &["run_bash(rm *)"]);
        // Nobody to ask: refused, saying why.
        let gate = Gate::new(true, None).with_rules(denying.clone());
        let Verdict::Denied { text, .. } = ask(&gate, "run_bash", cmd("echo $(rm -rf x)")).await
        else {
            panic!("an opaque line ran under auto_approve with deny rules");
        };
        assert!(
            text.contains("cannot be checked against permissions.deny"),
            "{text}"
        );
        assert!(text.contains("command substitution"), "{text}");
        // A person there: refused all the same (auto_approve asks nobody), and not asked.
        let asker = Scripted::new(vec![Some(Decision::AllowOnce)]);
        let gate = Gate::new(true, Some(asker.clone())).with_rules(denying);
        assert!(matches!(
            ask(&gate, "run_bash", cmd("echo $(rm -rf x)")).await,
            Verdict::Denied { .. }
        ));
        assert!(asker.asked().is_empty());
        // Without deny rules, auto_approve runs it as before.
        let gate = Gate::new(true, None);
        assert_eq!(
            ask(&gate, "run_bash", cmd("echo $(id)")).await,
            Verdict::Allowed
        );
    }

    #[tokio::test]
    async fn allow_once_allows_only_the_call_it_answers() {
        let asker = Scripted::new(vec![Some(Decision::AllowOnce), None]);
        let gate = Gate::new(false, Some(asker.clone()));
        assert_eq!(
            ask(&gate, "edit_file", edit("a.rs")).await,
            Verdict::Allowed
        );
        assert_eq!(
            ask(&gate, "edit_file", edit("a.rs")).await,
            Verdict::Refused { reason: None }
        );
        assert_eq!(asker.asked(), vec!["edit a.rs", "edit a.rs"]);
    }

    #[tokio::test]
    async fn an_edit_session_grant_covers_every_file_but_never_commands() {
        let asker = Scripted::new(vec![Some(Decision::AllowSession), None]);
        let gate = Gate::new(false, Some(asker.clone()));
        assert_eq!(
            ask(&gate, "edit_file", edit("a.rs")).await,
            Verdict::Allowed
        );
        assert_eq!(
            ask(&gate, "edit_file", edit("b/c.rs")).await,
            unasked("allowed for this session".into())
        );
        assert_eq!(
            ask(&gate, "run_bash", cmd("ls")).await,
            Verdict::Refused { reason: None }
        );
        assert_eq!(asker.asked(), vec!["edit a.rs", "ls"]);
    }

    #[tokio::test]
    async fn a_command_session_grant_covers_only_that_exact_command_line() {
        let asker = Scripted::new(vec![Some(Decision::AllowSession), None, None, None]);
        let gate = Gate::new(false, Some(asker.clone()));
        assert_eq!(
            ask(&gate, "run_bash", cmd("cargo test")).await,
            Verdict::Allowed
        );
        assert_eq!(
            ask(&gate, "run_bash", cmd("cargo test")).await,
            unasked("allowed for this session".into())
        );
        assert_eq!(
            ask(&gate, "run_bash", cmd("cargo test ")).await,
            Verdict::Refused { reason: None }
        );
        assert_eq!(
            ask(&gate, "run_bash", cmd("cargo test; rm -rf x")).await,
            Verdict::Refused { reason: None }
        );
        assert_eq!(
            ask(&gate, "edit_file", edit("a.rs")).await,
            Verdict::Refused { reason: None }
        );
        assert_eq!(
            asker.asked(),
            vec![
                "cargo test",
                "cargo test ",
                "cargo test; rm -rf x",
                "edit a.rs"
            ]
        );
    }

    #[tokio::test]
    async fn allow_everything_lasts_for_the_session_until_reset() {
        let asker = Scripted::new(vec![Some(Decision::AllowAll), None]);
        let gate = Gate::new(false, Some(asker.clone()));
        assert_eq!(ask(&gate, "run_bash", cmd("make")).await, Verdict::Allowed);
        for _ in 0..3 {
            assert_eq!(
                ask(&gate, "edit_file", edit("x")).await,
                unasked("allowed (everything this session)".into())
            );
            assert_eq!(
                ask(&gate, "run_bash", cmd("rm x")).await,
                unasked("allowed (everything this session)".into())
            );
        }
        assert_eq!(asker.asked(), vec!["make"]);
        gate.reset();
        assert_eq!(
            ask(&gate, "run_bash", cmd("rm x")).await,
            Verdict::Refused { reason: None }
        );
    }

    #[tokio::test]
    async fn refuse_with_a_reason_carries_the_reason_and_grants_nothing() {
        let asker = Scripted::new(vec![
            Some(Decision::Refuse {
                reason: Some("use make".into()),
            }),
            Some(Decision::Refuse { reason: None }),
        ]);
        let gate = Gate::new(false, Some(asker.clone()));
        assert_eq!(
            ask(&gate, "run_bash", cmd("cargo b")).await,
            Verdict::Refused {
                reason: Some("use make".into())
            }
        );
        assert_eq!(
            ask(&gate, "run_bash", cmd("cargo b")).await,
            Verdict::Refused { reason: None }
        );
        assert_eq!(asker.asked().len(), 2);
    }

    #[tokio::test]
    async fn without_anyone_to_ask_the_gate_refuses_unless_auto_approve() {
        let gate = Gate::new(false, None);
        assert_eq!(
            ask(&gate, "run_bash", cmd("ls")).await,
            Verdict::Refused { reason: None }
        );
        let gate = Gate::new(true, None);
        assert_eq!(ask(&gate, "run_bash", cmd("ls")).await, Verdict::Allowed);
        assert_eq!(ask(&gate, "edit_file", edit("a")).await, Verdict::Allowed);
    }

    #[tokio::test]
    async fn an_asker_with_no_ui_counts_as_refusal() {
        let asker = Scripted::new(vec![None]);
        let gate = Gate::new(false, Some(asker.clone()));
        assert_eq!(
            ask(&gate, "edit_file", edit("a")).await,
            Verdict::Refused { reason: None }
        );
    }

    /// Never answers, like a person who walked away.
    struct Silent;

    impl Asker for Silent {
        fn ask(&self, _request: ApprovalRequest) -> BoxFuture<'_, Option<Decision>> {
            Box::pin(futures::future::pending())
        }
    }

    #[tokio::test]
    async fn cancelling_the_turn_ends_an_open_question() {
        let gate = Gate::new(false, Some(Arc::new(Silent)));
        let cancel = CancellationToken::new();
        let later = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            later.cancel();
        });
        let question = ApprovalRequest {
            tool: "run_bash",
            detail: "ls".into(),
            diff: None,
            action: cmd("ls"),
            proposal: None,
        };
        let verdict = gate.check(question, &cancel).await;
        assert_eq!(verdict, Verdict::Cancelled);
    }

    #[test]
    fn refusal_text_matches_the_spec_with_and_without_a_reason() {
        assert_eq!(
            Verdict::refusal_text("run_bash", None),
            "The user declined to run run_bash. Ask what they would like to do instead."
        );
        assert_eq!(
            Verdict::refusal_text("edit_file", Some("not that file")),
            "The user declined to run edit_file. Ask what they would like to do instead. The user said: not that file"
        );
        assert_eq!(
            Verdict::refusal_text("edit_file", Some("  ")),
            Verdict::refusal_text("edit_file", None)
        );
    }

    #[test]
    fn requests_and_decisions_have_a_stable_wire_shape() {
        let d: Decision = serde_json::from_str(r#"{"decision":"refuse","reason":"no"}"#).unwrap();
        assert_eq!(
            d,
            Decision::Refuse {
                reason: Some("no".into())
            }
        );
        let d: Decision = serde_json::from_str(r#"{"decision":"allow_session"}"#).unwrap();
        assert_eq!(d, Decision::AllowSession);
    }

    fn project(state: &std::path::Path, workspace: &std::path::Path) -> Option<Project> {
        use crate::permissions::saved::Saved;
        Some(Project::new(Saved::new(state), workspace))
    }

    #[tokio::test]
    async fn allow_always_saves_the_exact_line_for_the_workspace_and_a_new_gate_honours_it() {
        let (state, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let asker = Scripted::new(vec![Some(Decision::AllowProject)]);
        let gate = Gate::new(false, Some(asker.clone()))
            .with_project(project(state.path(), workspace.path()));
        assert_eq!(
            ask(&gate, "run_bash", cmd("cargo test")).await,
            Verdict::Allowed
        );
        assert_eq!(gate.take_notice(), None);

        // A later session: the same line is allowed with nobody asked; another line is asked.
        let later = Scripted::new(vec![None, None, None]);
        let gate = Gate::new(false, Some(later.clone()))
            .with_rules(rules(&[], &["run_bash(cargo *)"], &[]))
            .with_project(project(state.path(), workspace.path()));
        // An ask rule still asks: it beats what was saved.
        assert_eq!(
            ask(&gate, "run_bash", cmd("cargo test")).await,
            Verdict::Refused { reason: None }
        );
        let gate = Gate::new(false, Some(later.clone()))
            .with_rules(rules(&[], &[], &["run_bash(rm *)"]))
            .with_project(project(state.path(), workspace.path()));
        assert_eq!(
            ask(&gate, "run_bash", cmd("cargo test")).await,
            unasked("allowed always in this project".into())
        );
        assert_eq!(
            ask(&gate, "run_bash", cmd("cargo test --lib")).await,
            Verdict::Refused { reason: None }
        );
        assert_eq!(later.asked(), ["cargo test", "cargo test --lib"]);
        // Another workspace has nothing saved.
        let other = tempfile::tempdir().unwrap();
        let gate = Gate::new(false, None).with_project(project(state.path(), other.path()));
        assert_eq!(
            ask(&gate, "run_bash", cmd("cargo test")).await,
            Verdict::Refused { reason: None }
        );
    }

    #[tokio::test]
    async fn allow_always_for_an_edit_saves_every_edit_but_a_deny_rule_still_refuses() {
        let (state, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let asker = Scripted::new(vec![Some(Decision::AllowProject)]);
        let gate = Gate::new(false, Some(asker.clone()))
            .with_rules(rules(&[], &[], &["edit_file(.env)"]))
            .with_project(project(state.path(), workspace.path()));
        assert_eq!(
            ask(&gate, "edit_file", edit("src/a.rs")).await,
            Verdict::Allowed
        );
        assert_eq!(
            ask(&gate, "edit_file", edit("b/c.md")).await,
            unasked("allowed always in this project".into())
        );
        assert!(matches!(
            ask(&gate, "edit_file", edit(".env")).await,
            Verdict::Denied { .. }
        ));
        assert_eq!(asker.asked(), ["edit src/a.rs"]);
    }

    #[tokio::test]
    async fn an_allow_always_that_cannot_be_saved_allows_for_the_session_and_says_why_once() {
        let (state, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        // The state directory is a file: nothing can be saved in it.
        let blocked = state.path().join("file");
        std::fs::write(&blocked, "").unwrap();
        let asker = Scripted::new(vec![Some(Decision::AllowProject)]);
        let gate =
            Gate::new(false, Some(asker.clone())).with_project(project(&blocked, workspace.path()));
        assert_eq!(ask(&gate, "run_bash", cmd("make")).await, Verdict::Allowed);
        let notice = gate.take_notice().unwrap();
        assert!(
            notice.starts_with("not saved for this project: cannot"),
            "{notice}"
        );
        assert_eq!(gate.take_notice(), None);
        // This session remembers it.
        assert_eq!(
            ask(&gate, "run_bash", cmd("make")).await,
            unasked("allowed for this session".into())
        );
        assert_eq!(asker.asked(), ["make"]);
    }

    #[tokio::test]
    async fn an_edited_answer_runs_once_and_only_where_the_request_could_be_edited() {
        let edited = || {
            Some(Decision::Edited {
                text: "ls -l".into(),
            })
        };
        let asker = Scripted::new(vec![edited(), edited(), None]);
        let gate = Gate::new(false, Some(asker.clone()));
        let question = |proposal| ApprovalRequest {
            tool: "run_bash",
            detail: "ls".into(),
            diff: None,
            action: cmd("ls"),
            proposal,
        };
        let verdict = gate
            .check(question(Some(Proposed::Command)), &CancellationToken::new())
            .await;
        assert_eq!(
            verdict,
            Verdict::Edited {
                text: "ls -l".into()
            }
        );
        // Nothing was remembered: the next one is asked.
        let verdict = gate.check(question(None), &CancellationToken::new()).await;
        assert_eq!(verdict, Verdict::Refused { reason: None });
        assert_eq!(asker.asked().len(), 2);
    }
}
