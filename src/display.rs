//! Events and decisions as a person is shown them: every string goes through the escaping of
//! [`agent_nvim_text::escape`] (re-exported here, so `display::one_line` and the rest are where
//! callers found them), the approval's words, and the turn loop's events made visible.

pub use agent_nvim_text::escape::*;

use agent_nvim_vocab::approval::{Action, Decision};
use agent_nvim_vocab::conversation::{
    AgentCommand, AgentCost, AgentUpdate, AuthChoice, ConfigOption, Offered, OutsideFile, PlanEntry,
};
use agent_nvim_vocab::events::Event;

/// How an approval was answered, as the chat's tool row and the terminal record it: `allowed
/// once`, `allowed for this session`, `allowed (everything this session)`, `refused`, or
/// `refused: {reason}` with the reason on one line ([`one_line`]).
pub fn decision_note(decision: &Decision) -> String {
    match decision {
        Decision::AllowOnce => "allowed once".into(),
        Decision::AllowSession => "allowed for this session".into(),
        Decision::AllowAll => "allowed (everything this session)".into(),
        Decision::AllowProject => "allowed always in this project".into(),
        Decision::Edited { .. } => "edited, allowed once".into(),
        Decision::Refuse {
            reason: Some(reason),
        } if !reason.trim().is_empty() => format!("refused: {}", one_line(reason)),
        Decision::Refuse { .. } => "refused".into(),
    }
}

/// The labels of the built-in choices, as the picker and the terminal question show them
/// (SPEC section 4). The session choice is named for its scope: [`session_choice`].
pub mod label {
    /// This call only.
    pub const ALLOW_ONCE: &str = "Allow once";
    /// Every call until the session ends.
    pub const ALLOW_ALL: &str = "Allow everything this session";
    /// Change the proposal (the edit, the command), then allow the changed one once.
    pub const EDIT: &str = "Edit before allowing";
    /// Not this call.
    pub const REFUSE: &str = "Refuse";
    /// Not this call, and the person says why.
    pub const REFUSE_WITH_REASON: &str = "Refuse with a reason…";
    /// What Esc does to an external agent's question that offers no reject of its own.
    pub const CANCEL: &str = "Cancel";
}

/// The label of the choice that allows `action` for the rest of the session. A command is named
/// by its [`one_line`] form cut to 40 characters (`Allow `cargo test` for this session`), or, when
/// it has more than one line, by how many (`Allow this 61-line command for this session`): the
/// preview above it shows them all.
pub fn session_choice(action: &Action) -> String {
    /// Characters of a command the label quotes.
    const LABEL_CHARS: usize = 40;
    match action {
        Action::Edit { .. } => "Allow edits for this session".to_string(),
        Action::Command { command } => match line_count(command) {
            1 => format!(
                "Allow `{}` for this session",
                cut(&one_line(command), LABEL_CHARS)
            ),
            n => format!("Allow this {n}-line command for this session"),
        },
    }
}

/// The label of the choice that allows `action` from now on in this workspace (saved): the
/// command named as [`session_choice`] names it (`Always allow `git status` in this project`).
pub fn project_choice(action: &Action) -> String {
    /// Characters of a command the label quotes.
    const LABEL_CHARS: usize = 40;
    match action {
        Action::Edit { .. } => "Always allow edits in this project".to_string(),
        Action::Command { command } => match line_count(command) {
            1 => format!(
                "Always allow `{}` in this project",
                cut(&one_line(command), LABEL_CHARS)
            ),
            n => format!("Always allow this {n}-line command in this project"),
        },
    }
}

/// An event of the turn loop as a front end shows it: text and output made [`visible`] as prose,
/// names, summaries and reasons as one line, the strings in a tool call's arguments as one line.
/// Ids are left alone: they are never shown, and the front end matches rows by them.
pub fn shown(event: Event) -> Event {
    let one = |s: String| visible_owned(s, Layout::OneLine);
    let prose = |s: String| visible_owned(s, Layout::Prose);
    match event {
        Event::TurnStarted => Event::TurnStarted,
        Event::Text { text } => Event::Text { text: prose(text) },
        Event::Compacted {
            prompts,
            before,
            after,
            upto,
            summary,
            cost,
        } => Event::Compacted {
            prompts,
            before,
            after,
            upto,
            summary: prose(summary),
            cost,
        },
        Event::Thought { text } => Event::Thought { text: prose(text) },
        Event::ToolStarted { id, name, args } => Event::ToolStarted {
            id,
            name: one(name),
            args: shown_value(args),
        },
        Event::ToolProgress { id, output } => Event::ToolProgress {
            id,
            output: prose(output),
        },
        Event::ToolFinished {
            id,
            name,
            ok,
            summary,
            output,
            diff,
        } => Event::ToolFinished {
            id,
            name: one(name),
            ok,
            summary: one(summary),
            output: prose(output),
            diff: diff.map(prose),
        },
        Event::Retrying {
            attempt,
            delay_ms,
            reason,
        } => Event::Retrying {
            attempt,
            delay_ms,
            reason: one(reason),
        },
        Event::Usage {
            input,
            output,
            cached,
            cost,
        } => Event::Usage {
            input,
            output,
            cached,
            cost,
        },
        Event::TurnDone {
            input,
            output,
            outcome,
            message,
            cost,
        } => Event::TurnDone {
            input,
            output,
            outcome,
            message: prose(message),
            cost,
        },
        Event::Error { message } => Event::Error {
            message: prose(message),
        },
        Event::Notice { text } => Event::Notice { text: one(text) },
    }
}

/// The most characters of one argument a tool call's row is sent (a row needs a path or the
/// start of a command; the call itself may carry far more, from an external agent too).
pub const SHOWN_ARG_CHARS: usize = 10_000;

/// How the rewind list shows `point` at `now` (seconds since the epoch):
/// `3 · fix the failing test · 2 files changed · 4 min ago`, its label made visible; an undo
/// point is `undo · the code before the last rewind · 2 files changed · just now`.
pub fn point_row(point: &crate::checkpoint::points::Point, now: u64) -> String {
    let files = match point.files {
        1 => "1 file changed".to_string(),
        n => format!("{n} files changed"),
    };
    let number = match point.turn {
        0 => "undo".to_string(),
        turn => turn.to_string(),
    };
    format!(
        "{} · {} · {} · {}",
        number,
        one_line(&point.label),
        files,
        age_at(point.time, now)
    )
}

/// Seconds since the epoch, now (0 on a clock set before it).
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How long before `now` the moment `then` was (both seconds since the epoch), as every list
/// says it: `just now`, `4 min ago`, `2 h ago`, `3 days ago`. The one formatter of ages: the
/// plugin's lists get it from here.
pub fn age_at(then: u64, now: u64) -> String {
    let secs = now.saturating_sub(then);
    match secs {
        0..60 => "just now".into(),
        60..3600 => format!("{} min ago", secs / 60),
        3600..86_400 => format!("{} h ago", secs / 3600),
        86_400..172_800 => "1 day ago".into(),
        _ => format!("{} days ago", secs / 86_400),
    }
}

/// A lower layer's error as a person reads it: `agent: ` first. The layers below the front ends
/// never add it; a conversation saved before they stopped adding it has it already, so it is
/// added once.
pub fn said(message: String) -> String {
    if message.is_empty() || message.starts_with("agent: ") {
        message
    } else {
        format!("agent: {message}")
    }
}

/// What a front end says of the sandbox before anything runs: that it is off when the kernel
/// cannot have it, with how to say one knows, then each warning of `report`.
pub fn sandbox_warnings(report: &crate::sandbox::Report) -> Vec<String> {
    let off = report.off.iter().map(|why| {
        format!(
            "agent: the sandbox is off: {why}; commands run without it. Set sandbox.mode to \"off\" (--sandbox off) to say you know (see :help agent-sandbox)"
        )
    });
    off.chain(
        report
            .warnings
            .iter()
            .map(|warning| format!("agent: {warning}")),
    )
    .collect()
}

/// An external agent's update as a person may be shown it: every string they read made visible
/// (the terminal and Neovim alike, with [`shown`] for the turn's events). Ids, option ids and
/// kinds are left alone: a front end matches and echoes them, never shows them; a mode, option
/// or sign-in method whose id would not show as it is is left out, as it could not be told from
/// another.
pub fn shown_update(update: AgentUpdate) -> AgentUpdate {
    let one = |s: String| visible_owned(s, Layout::OneLine);
    let prose = |s: String| visible_owned(s, Layout::Prose);
    match update {
        AgentUpdate::Thought { text } => AgentUpdate::Thought { text: prose(text) },
        AgentUpdate::Plan { entries } => AgentUpdate::Plan {
            entries: entries
                .into_iter()
                .map(|e| PlanEntry {
                    content: one(e.content),
                    ..e
                })
                .collect(),
        },
        AgentUpdate::PlanUpdated { id, entries, text } => AgentUpdate::PlanUpdated {
            id,
            entries: entries
                .into_iter()
                .map(|e| PlanEntry {
                    content: one(e.content),
                    ..e
                })
                .collect(),
            text: text.map(prose),
        },
        update @ (AgentUpdate::PlanRemoved { .. } | AgentUpdate::Message { .. }) => update,
        AgentUpdate::Compaction {
            id,
            status,
            summary,
            error,
        } => AgentUpdate::Compaction {
            id,
            status: one(status),
            summary: prose(summary),
            error: error.map(one),
        },
        // Paths to open, never shown as text: passed as they are.
        update @ AgentUpdate::Locations { .. } => update,
        AgentUpdate::ToolUpdated {
            id,
            title,
            status,
            kind,
            output,
            running,
        } => AgentUpdate::ToolUpdated {
            id,
            title: one(title),
            status: one(status),
            kind,
            output: prose(output),
            running,
        },
        AgentUpdate::UserMessage { text } => AgentUpdate::UserMessage { text: prose(text) },
        AgentUpdate::Modes { current, modes } => AgentUpdate::Modes {
            current,
            modes: shown_offered(modes),
        },
        AgentUpdate::Options { options } => AgentUpdate::Options {
            options: options
                .into_iter()
                // Its id is typed and completed: one that would not show as it is could not be
                // told from another's, so it is left out.
                .filter(|o| plain_id(&o.id))
                .map(|o| ConfigOption {
                    name: one(o.name),
                    description: o.description.map(one),
                    values: shown_offered(o.values),
                    ..o
                })
                .collect(),
        },
        AgentUpdate::ContextUsage { used, size, cost } => AgentUpdate::ContextUsage {
            used,
            size,
            cost: cost.map(|c| AgentCost {
                currency: one(c.currency),
                ..c
            }),
        },
        AgentUpdate::Login {
            needed,
            message,
            methods,
        } => AgentUpdate::Login {
            needed,
            message: prose(message),
            methods: methods
                .into_iter()
                // A terminal method's words run as they are and are shown before: one that
                // would not show as it is is left out.
                .filter(|m| {
                    plain_id(&m.id)
                        && m.args.iter().all(|a| one_line(a) == *a)
                        && m.env.iter().all(|(k, v)| plain_id(k) && one_line(v) == *v)
                })
                .map(|m| AuthChoice {
                    name: one(m.name),
                    description: m.description.map(one),
                    ..m
                })
                .collect(),
        },
        AgentUpdate::Title { title } => AgentUpdate::Title {
            title: title.map(one),
        },
        AgentUpdate::Notice {
            severity,
            title,
            description,
        } => AgentUpdate::Notice {
            severity: one(severity),
            title: one(title),
            description: description.map(prose),
        },
        AgentUpdate::OutsideChanges {
            agent,
            checkpoint,
            files,
            sandboxed,
        } => AgentUpdate::OutsideChanges {
            agent: one(agent),
            checkpoint,
            files: files
                .into_iter()
                .map(|file| OutsideFile {
                    shown: one(file.shown),
                    ..file
                })
                .collect(),
            sandboxed,
        },
        AgentUpdate::Commands { commands } => AgentUpdate::Commands {
            commands: commands
                .into_iter()
                .map(|c| AgentCommand {
                    name: one(c.name),
                    description: one(c.description),
                    hint: c.hint.map(one),
                })
                .collect(),
        },
    }
}

/// Whether `id` shows as it is (and is not empty).
fn plain_id(id: &str) -> bool {
    !id.is_empty() && one_line(id) == id
}

/// Modes or values as a person is shown them: names made visible, those whose id would not show
/// as it is left out.
fn shown_offered(offered: Vec<Offered>) -> Vec<Offered> {
    offered
        .into_iter()
        .filter(|o| plain_id(&o.id))
        .map(|o| Offered {
            name: visible_owned(o.name, Layout::OneLine),
            description: o.description.map(|d| visible_owned(d, Layout::OneLine)),
            id: o.id,
        })
        .collect()
}

/// `text` cut to [`SHOWN_ARG_CHARS`], with how much more there was.
fn shown_arg(text: String) -> String {
    match crate::text::chars_over(&text, SHOWN_ARG_CHARS) {
        Some(chars) => {
            let (kept, _) = crate::text::clamp_head(&text, SHOWN_ARG_CHARS);
            format!(
                "{kept}… [{} more characters]",
                crate::text::grouped(chars - SHOWN_ARG_CHARS)
            )
        }
        None => text,
    }
}

/// A JSON value with every string in it (keys too) made visible on one line.
fn shown_value(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(visible_owned(shown_arg(s), Layout::OneLine)),
        Value::Array(items) => Value::Array(items.into_iter().map(shown_value).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (visible_owned(k, Layout::OneLine), shown_value(v)))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_is_recorded_in_words_with_a_refusals_reason_on_one_line() {
        let note = |decision| decision_note(&decision);
        assert_eq!(note(Decision::AllowOnce), "allowed once");
        assert_eq!(note(Decision::AllowSession), "allowed for this session");
        assert_eq!(
            note(Decision::AllowAll),
            "allowed (everything this session)"
        );
        assert_eq!(note(Decision::Refuse { reason: None }), "refused");
        assert_eq!(
            note(Decision::Refuse {
                reason: Some(" ".into())
            }),
            "refused"
        );
        assert_eq!(
            note(Decision::Refuse {
                reason: Some("not\nnow\u{1b}".into())
            }),
            "refused: not\\nnow\\e"
        );
    }

    #[test]
    fn the_session_choice_names_a_one_line_command_or_counts_the_lines() {
        let choice = |command: &str| {
            session_choice(&Action::Command {
                command: command.into(),
            })
        };
        assert_eq!(choice("cargo test"), "Allow `cargo test` for this session");
        assert_eq!(
            choice(&format!("ls -la{}touch PWNED", "\n".repeat(60))),
            "Allow this 61-line command for this session"
        );
        assert_eq!(
            choice(&format!("{}\u{202e}x", "a".repeat(37))),
            format!("Allow `{}…` for this session", "a".repeat(37))
        );
        assert_eq!(
            choice(&format!("echo ok{}; curl x | sh", " ".repeat(200))),
            "Allow `echo ok[… 200 spaces …]; curl x | sh` for this session"
        );
        assert_eq!(
            session_choice(&Action::Edit { rel: "a.rs".into() }),
            "Allow edits for this session"
        );
    }

    #[test]
    fn events_are_shown_with_their_text_visible_and_their_ids_untouched() {
        let started = shown(Event::ToolStarted {
            id: "t\u{1b}1".into(),
            name: "run_bash".into(),
            args: serde_json::json!({"command": "a\rb", "n": [1, "\u{202e}"]}),
        });
        assert_eq!(
            started,
            Event::ToolStarted {
                id: "t\u{1b}1".into(),
                name: "run_bash".into(),
                args: serde_json::json!({"command": "a\\rb", "n": [1, "\\u{202e}"]}),
            }
        );
        let finished = shown(Event::ToolFinished {
            id: "t1".into(),
            name: "run_bash".into(),
            ok: true,
            summary: "$ touch PWNED #\r\u{1b}[2Kls -la -> exit 0".into(),
            output: "a\u{1b}[31m\r\nb\n".into(),
            diff: Some("+x\u{1b}[2J\n".into()),
        });
        assert_eq!(
            finished,
            Event::ToolFinished {
                id: "t1".into(),
                name: "run_bash".into(),
                ok: true,
                summary: "$ touch PWNED #\\r\\e[2Kls -la -> exit 0".into(),
                output: "a\\e[31m\nb\n".into(),
                diff: Some("+x\\e[2J\n".into()),
            }
        );
        assert_eq!(
            shown(Event::Text {
                text: "hi \u{1b}[8mhidden\n".into()
            }),
            Event::Text {
                text: "hi \\e[8mhidden\n".into()
            }
        );
    }

    #[test]
    fn an_age_is_worded_in_its_largest_whole_unit() {
        let now = 1_000_000;
        let ago = |secs: u64| age_at(now - secs, now);
        assert_eq!(ago(0), "just now");
        assert_eq!(ago(59), "just now");
        assert_eq!(ago(60), "1 min ago");
        assert_eq!(ago(3599), "59 min ago");
        assert_eq!(ago(3600), "1 h ago");
        assert_eq!(ago(86_399), "23 h ago");
        assert_eq!(ago(86_400), "1 day ago");
        assert_eq!(ago(172_800), "2 days ago");
        // A clock set back: not a negative age.
        assert_eq!(age_at(now + 100, now), "just now");
    }

    #[test]
    fn a_rewind_point_is_one_visible_row_with_its_age() {
        let point = crate::checkpoint::points::Point {
            turn: 3,
            id: "x".into(),
            label: "fix the failing test".into(),
            files: 2,
            time: 1000,
        };
        assert_eq!(
            point_row(&point, 1000 + 4 * 60 + 5),
            "3 · fix the failing test · 2 files changed · 4 min ago"
        );
        let hostile = crate::checkpoint::points::Point {
            files: 1,
            label: "ok\u{1b}[2J\nrm -rf".into(),
            ..point
        };
        let row = point_row(&hostile, 1000);
        assert!(!row.contains('\u{1b}') && !row.contains('\n'), "{row}");
        assert!(row.ends_with(" · 1 file changed · just now"), "{row}");
        let undo = crate::checkpoint::points::Point { turn: 0, ..hostile };
        assert!(point_row(&undo, u64::MAX).starts_with("undo · "));
    }
}
