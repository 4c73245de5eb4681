//! session/update, as the chat shows it: message and thought chunks, tool call rows updated in
//! place, plans.
//!
//! Parsed leniently from the raw JSON rather than through the schema's types: agents differ in
//! what they put in a tool call (SPEC section 5), and one unexpected field must cost at most that
//! field, never the whole update.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

use super::terminal::{Shown, Terminals};
use super::{AcpEvent, AgentUpdate, PlanEntry};
use crate::text::{clamp_head, head_marker, MAX_CHARS};
use crate::workspace::Workspace;
use agent_nvim_vocab::events::Event;

/// The tool calls of the current turn, by id, as last reported.
#[derive(Default)]
pub(super) struct Tools {
    calls: HashMap<String, Call>,
    /// Ids in the order they started, to close them in order.
    order: Vec<String>,
    /// The session's terminals, whose output the rows embedding them show (None: shown as
    /// `[terminal ID]`).
    terminals: Option<Arc<Mutex<Terminals>>>,
    /// The agent's context compactions, by id: their status, summary and error so far
    /// (`compaction_update` patches them, `compaction_summary_chunk` adds to the summary). At
    /// most [`COMPACTIONS`] are kept.
    compactions: HashMap<String, Compaction>,
    /// The id of the agent's message being streamed (`messageId`), when it gave one.
    message: Option<String>,
}

/// How many compactions a session keeps track of (the oldest forgotten first, by id order).
const COMPACTIONS: usize = 64;

/// One compaction as shown so far.
#[derive(Debug, Clone, Default, PartialEq)]
struct Compaction {
    status: String,
    summary: String,
    error: Option<String>,
}

/// One tool call's current state (fields the agent has not sent yet keep their defaults).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Call {
    pub(super) title: String,
    /// The agent's name for the tool (`name`, `Bash`, `mcp__files__read`), when it gave one.
    pub(super) name: Option<String>,
    pub(super) kind: String,
    pub(super) status: String,
    pub(super) content: Vec<Value>,
    pub(super) raw_input: Option<Value>,
    pub(super) raw_output: Option<Value>,
    /// The files it works on, as last reported ([`AgentUpdate::Locations`]).
    pub(super) locations: Vec<super::Location>,
    /// ToolFinished was sent.
    pub(super) finished: bool,
}

/// `title`, with `name` after it when there is one the title does not hold.
pub(super) fn titled(title: &str, name: Option<&str>) -> String {
    match name.map(str::trim) {
        Some(name) if !name.is_empty() && !title.contains(name) => format!("{title} · {name}"),
        _ => title.to_string(),
    }
}

impl Default for Call {
    fn default() -> Self {
        Call {
            title: "tool".into(),
            name: None,
            kind: "other".into(),
            status: "pending".into(),
            content: Vec::new(),
            raw_input: None,
            raw_output: None,
            locations: Vec::new(),
            finished: false,
        }
    }
}

impl Tools {
    /// A `compaction_update` (patching: an absent field stays, `null` clears it) or a
    /// `compaction_summary_chunk` (more of the summary), as the whole compaction to show.
    fn compaction(&mut self, update: &Value) -> Option<AcpEvent> {
        let id = id_of(&update["compactionId"])?;
        if !self.compactions.contains_key(&id) && self.compactions.len() >= COMPACTIONS {
            let oldest = self.compactions.keys().min().cloned();
            if let Some(oldest) = oldest {
                self.compactions.remove(&oldest);
            }
        }
        let compaction = self
            .compactions
            .entry(id.clone())
            .or_insert_with(|| Compaction {
                status: "in_progress".into(),
                ..Compaction::default()
            });
        if update["sessionUpdate"] == "compaction_summary_chunk" {
            compaction
                .summary
                .push_str(&block_text(&update["content"]).unwrap_or_default());
        } else {
            if let Some(status) = update.get("status").and_then(Value::as_str) {
                compaction.status = status.to_string();
            }
            match update.get("summary") {
                Some(Value::Array(blocks)) => {
                    compaction.summary = blocks.iter().filter_map(block_text).collect();
                }
                Some(Value::Null) => compaction.summary.clear(),
                _ => {}
            }
            match update.get("error") {
                Some(Value::String(error)) => compaction.error = Some(error.clone()),
                Some(Value::Null) => compaction.error = None,
                _ => {}
            }
        }
        Some(AcpEvent::Agent(AgentUpdate::Compaction {
            id,
            status: compaction.status.clone(),
            summary: compaction.summary.clone(),
            error: compaction.error.clone(),
        }))
    }

    /// No calls yet; rows embedding one of `terminals` show its output.
    pub(super) fn showing(terminals: Arc<Mutex<Terminals>>) -> Tools {
        Tools {
            terminals: Some(terminals),
            ..Tools::default()
        }
    }

    /// The events one `session/update` notification's `update` object produces. Unknown kinds of
    /// update (modes, session info, usage) produce none.
    pub(super) fn apply(&mut self, update: &Value, workspace: &Workspace) -> Vec<AcpEvent> {
        let kind = update.get("sessionUpdate").and_then(Value::as_str);
        match kind {
            Some("agent_message_chunk") => {
                let mut events = Vec::new();
                if let Some(id) = id_of(&update["messageId"]) {
                    if self.message.as_ref() != Some(&id) {
                        self.message = Some(id.clone());
                        events.push(AcpEvent::Agent(AgentUpdate::Message { id }));
                    }
                }
                events.extend(
                    block_text(&update["content"]).map(|text| AcpEvent::Turn(Event::Text { text })),
                );
                events
            }
            Some("agent_thought_chunk") => block_text(&update["content"])
                .map(|text| AcpEvent::Agent(AgentUpdate::Thought { text }))
                .into_iter()
                .collect(),
            Some("tool_call") | Some("tool_call_update") => self.update(update, workspace),
            Some("plan") => vec![AcpEvent::Agent(AgentUpdate::Plan {
                entries: plan_entries(&update["entries"]),
            })],
            Some("plan_update") => plan_update(&update["plan"]).into_iter().collect(),
            Some("compaction_update") | Some("compaction_summary_chunk") => {
                self.compaction(update).into_iter().collect()
            }
            Some("plan_removed") => match id_of(&update["planId"]) {
                Some(id) => vec![AcpEvent::Agent(AgentUpdate::PlanRemoved { id })],
                None => Vec::new(),
            },
            Some("available_commands_update") => vec![AcpEvent::Agent(AgentUpdate::Commands {
                commands: commands(&update["availableCommands"]),
            })],
            Some("usage_update") => {
                let count = |key: &str| update.get(key).and_then(Value::as_u64);
                let (Some(used), Some(size)) = (count("used"), count("size")) else {
                    tracing::debug!("ignored a usage_update without used and size");
                    return Vec::new();
                };
                let cost = update.get("cost").and_then(|cost| {
                    Some(super::AgentCost {
                        amount: cost.get("amount")?.as_f64()?,
                        currency: str_field(cost, "currency")?,
                    })
                });
                vec![AcpEvent::Agent(AgentUpdate::ContextUsage {
                    used,
                    size,
                    cost,
                })]
            }
            // A notice (the client advertises `session.notices`): an empty title is no notice.
            Some("notice") => {
                let Some(title) = str_field(update, "title").filter(|t| !t.trim().is_empty())
                else {
                    tracing::debug!("ignored a notice without a title");
                    return Vec::new();
                };
                let severity = match update.get("severity").and_then(Value::as_str) {
                    Some(known @ ("info" | "warning" | "error")) => known.to_string(),
                    _ => "info".to_string(),
                };
                vec![AcpEvent::Agent(AgentUpdate::Notice {
                    severity,
                    title,
                    description: str_field(update, "description").filter(|d| !d.trim().is_empty()),
                })]
            }
            // Only when it says something of the title: null clears it, absent leaves it.
            Some("session_info_update") => match update.get("title") {
                Some(Value::String(title)) => vec![AcpEvent::Agent(AgentUpdate::Title {
                    title: Some(title.clone()).filter(|t| !t.trim().is_empty()),
                })],
                Some(Value::Null) => vec![AcpEvent::Agent(AgentUpdate::Title { title: None })],
                _ => Vec::new(),
            },
            other => {
                tracing::debug!(kind = ?other, "ignored a session/update");
                Vec::new()
            }
        }
    }

    /// Applies the fields of a tool_call or tool_call_update (or a permission request's
    /// `toolCall`): a call not seen before starts (ToolStarted), every change is reported whole
    /// (ToolUpdated), and the first completed or failed status finishes it (ToolFinished).
    pub(super) fn update(&mut self, fields: &Value, workspace: &Workspace) -> Vec<AcpEvent> {
        let Some(id) = id_of(&fields["toolCallId"]) else {
            tracing::debug!("ignored a tool call without an id");
            return Vec::new();
        };
        let mut events = Vec::new();
        if !self.calls.contains_key(&id) {
            let call = Call {
                raw_input: fields.get("rawInput").cloned(),
                title: str_field(fields, "title").unwrap_or_else(|| "tool".into()),
                name: str_field(fields, "name"),
                ..Call::default()
            };
            events.push(AcpEvent::Turn(Event::ToolStarted {
                id: id.clone(),
                name: call.shown(),
                args: call.raw_input.clone().unwrap_or(Value::Null),
            }));
            self.order.push(id.clone());
            self.calls.insert(id.clone(), call);
        }
        let Some(call) = self.calls.get_mut(&id) else {
            return events;
        };
        if let Some(title) = str_field(fields, "title") {
            call.title = title;
        }
        if let Some(name) = str_field(fields, "name") {
            call.name = Some(name);
        }
        if let Some(kind) = str_field(fields, "kind") {
            call.kind = kind;
        }
        if let Some(status) = str_field(fields, "status") {
            call.status = status;
        }
        if let Some(content) = fields.get("content").and_then(Value::as_array) {
            call.content = content.clone();
        }
        if let Some(raw) = fields.get("rawInput").filter(|raw| !raw.is_null()) {
            call.raw_input = Some(raw.clone());
        }
        if let Some(raw) = fields.get("rawOutput").filter(|raw| !raw.is_null()) {
            call.raw_output = Some(raw.clone());
        }
        if let Some(given) = fields.get("locations").and_then(Value::as_array) {
            let locations = locations_inside(given, workspace);
            if locations != call.locations {
                call.locations = locations.clone();
                events.push(AcpEvent::Agent(AgentUpdate::Locations {
                    id: id.clone(),
                    kind: call.kind.clone(),
                    locations,
                }));
            }
        }
        let (output, running) = call.output(workspace, self.terminals.as_deref());
        events.push(AcpEvent::Agent(AgentUpdate::ToolUpdated {
            id: id.clone(),
            title: call.shown(),
            status: call.status.clone(),
            kind: call.kind.clone(),
            output: output.clone(),
            running,
        }));
        let done = matches!(call.status.as_str(), "completed" | "failed");
        if done && !call.finished {
            call.finished = true;
            events.push(AcpEvent::Turn(Event::ToolFinished {
                id,
                name: call.shown(),
                ok: call.status == "completed",
                summary: call.shown(),
                output,
                diff: None,
            }));
        }
        events
    }

    /// The rows of the calls whose content embeds terminal `terminal`, redrawn: those not
    /// finished (a finished row was drawn whole with its output; redrawn as an update it would
    /// look running again).
    pub(super) fn embedding(&self, terminal: &str, workspace: &Workspace) -> Vec<AcpEvent> {
        self.order
            .iter()
            .filter_map(|id| Some((id, self.calls.get(id)?)))
            .filter(|(_, call)| !call.finished)
            .filter(|(_, call)| call.content.iter().any(|item| embeds(item, terminal)))
            .map(|(id, call)| {
                let (output, running) = call.output(workspace, self.terminals.as_deref());
                AcpEvent::Agent(AgentUpdate::ToolUpdated {
                    id: id.clone(),
                    title: call.title.clone(),
                    status: call.status.clone(),
                    kind: call.kind.clone(),
                    output,
                    running,
                })
            })
            .collect()
    }

    /// The call with this id, if it was reported.
    pub(super) fn get(&self, id: &str) -> Option<&Call> {
        self.calls.get(id)
    }

    /// Ends the turn: every call that never finished gets its ToolFinished (so no row is left
    /// spinning), with `ok` and `note` saying why; then the calls are forgotten.
    pub(super) fn close(&mut self, ok: bool, note: &str, workspace: &Workspace) -> Vec<AcpEvent> {
        let mut events = Vec::new();
        for id in self.order.drain(..) {
            let Some(call) = self.calls.remove(&id) else {
                continue;
            };
            if call.finished {
                continue;
            }
            let (mut output, _) = call.output(workspace, self.terminals.as_deref());
            if !note.is_empty() {
                if !output.is_empty() {
                    output.push('\n');
                }
                output.push_str(note);
            }
            events.push(AcpEvent::Turn(Event::ToolFinished {
                id,
                name: call.title.clone(),
                ok,
                summary: call.title,
                output,
                diff: None,
            }));
        }
        self.calls.clear();
        events
    }
}

impl Call {
    /// Its title as shown: with the agent's name for the tool after it, when it gave one that
    /// the title does not say already (`Run cargo test · Bash`).
    pub(super) fn shown(&self) -> String {
        titled(&self.title, self.name.as_deref())
    }

    /// The call's content as text: content blocks, diffs rendered as unified diffs, terminals
    /// as their output so far; the raw output when there is no content. Clamped to
    /// [`MAX_CHARS`]. True when a terminal it embeds still runs.
    fn output(
        &self,
        workspace: &Workspace,
        terminals: Option<&Mutex<Terminals>>,
    ) -> (String, bool) {
        let mut running = false;
        let mut text = {
            let terminals = terminals.map(|t| t.lock().unwrap_or_else(PoisonError::into_inner));
            let lookup = |id: &str| {
                let shown = terminals.as_ref().and_then(|t| t.shown(id));
                running |= shown.as_ref().is_some_and(|s: &Shown| s.running);
                shown.map(|s| s.text)
            };
            render(&self.content, workspace, lookup)
        };
        if text.is_empty() {
            text = match &self.raw_output {
                Some(Value::String(raw)) => raw.clone(),
                Some(raw) => serde_json::to_string_pretty(raw).unwrap_or_default(),
                None => String::new(),
            };
        }
        let text = match clamp_head(&text, MAX_CHARS) {
            (_, false) => text,
            (head, true) => format!("{head}{}", head_marker()),
        };
        (text, running)
    }
}

/// Tool call content items as text, one item after another; a terminal as `terminal(id)` gives
/// it (its output), or `[terminal ID]` for one we never made.
pub(super) fn render(
    content: &[Value],
    workspace: &Workspace,
    mut terminal: impl FnMut(&str) -> Option<String>,
) -> String {
    // A terminal listed again is shown once: its output, however often it is named.
    let mut seen = std::collections::HashSet::new();
    content
        .iter()
        .filter_map(|item| match item.get("type").and_then(Value::as_str) {
            Some("content") => block_text(&item["content"]),
            Some("diff") => diff_text(item, workspace),
            Some("terminal") => {
                let id = item
                    .get("terminalId")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                if !seen.insert(id) {
                    return None;
                }
                Some(terminal(id).unwrap_or_else(|| format!("[terminal {id}]")))
            }
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether a content item is terminal `id`.
fn embeds(item: &Value, id: &str) -> bool {
    item.get("type").and_then(Value::as_str) == Some("terminal")
        && item.get("terminalId").and_then(Value::as_str) == Some(id)
}

/// A `diff` content item (path, oldText, newText) as a unified diff; None when it has no new
/// text or changes nothing.
pub(super) fn diff_text(item: &Value, workspace: &Workspace) -> Option<String> {
    let path = item.get("path").and_then(Value::as_str)?;
    let new = item.get("newText").and_then(Value::as_str)?;
    let old = item.get("oldText").and_then(Value::as_str);
    let diff = crate::diff::unified(&workspace.display(Path::new(path)), old, new);
    (!diff.is_empty()).then_some(diff)
}

/// A content block as text: text as it is, other kinds as a short placeholder.
pub(super) fn block_text(block: &Value) -> Option<String> {
    let text = match block.get("type").and_then(Value::as_str)? {
        "text" => block.get("text").and_then(Value::as_str)?.to_string(),
        "image" => "[image]".into(),
        "audio" => "[audio]".into(),
        "resource_link" => format!(
            "[{}]",
            str_field(block, "uri").unwrap_or_else(|| "link".into())
        ),
        "resource" => match block["resource"].get("text").and_then(Value::as_str) {
            Some(text) => text.to_string(),
            None => format!(
                "[{}]",
                str_field(&block["resource"], "uri").unwrap_or_else(|| "resource".into())
            ),
        },
        _ => return None,
    };
    (!text.is_empty()).then_some(text)
}

/// The agent's slash commands, each with a name; one without is left out, a missing
/// description is empty, and `input.hint` is what to type after it.
/// At most this many of an agent's commands are kept, each name at most [`COMMAND_NAME`]
/// characters and its description and hint cut at [`COMMAND_TEXT`]: the list is the agent's,
/// so untrusted, and it is searched at every key typed after `/`.
const COMMANDS: usize = 200;
const COMMAND_NAME: usize = 64;
const COMMAND_TEXT: usize = 200;

fn commands(list: &Value) -> Vec<super::AgentCommand> {
    let cut = |text: &str| crate::text::clamp_head(text, COMMAND_TEXT).0.to_string();
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|command| {
            let name = command.get("name")?.as_str()?.trim_start_matches('/');
            // A name a person can type after `/`: a letter or digit, then those and `_-.:`.
            let typable = name.chars().next().is_some_and(char::is_alphanumeric)
                && name.chars().count() <= COMMAND_NAME
                && name
                    .chars()
                    .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
            typable.then(|| super::AgentCommand {
                name: name.to_string(),
                description: cut(command
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()),
                hint: command
                    .pointer("/input/hint")
                    .and_then(Value::as_str)
                    .map(cut),
            })
        })
        .take(COMMANDS)
        .collect()
}

fn plan_entries(entries: &Value) -> Vec<PlanEntry> {
    entries
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|entry| PlanEntry {
            content: str_field(entry, "content").unwrap_or_default(),
            status: str_field(entry, "status").unwrap_or_else(|| "pending".into()),
            priority: str_field(entry, "priority").unwrap_or_else(|| "medium".into()),
        })
        .collect()
}

/// A `plan_update`'s plan: its entries, its markdown, or where its file is. None without a
/// plan id or of a kind not known here (logged).
fn plan_update(plan: &Value) -> Option<AcpEvent> {
    let id = id_of(&plan["planId"])?;
    let (entries, text) = match plan["type"].as_str() {
        Some("items") => (plan_entries(&plan["entries"]), None),
        Some("markdown") => (Vec::new(), str_field(plan, "content")),
        Some("file") => (
            Vec::new(),
            str_field(plan, "uri").map(|uri| format!("in {uri}")),
        ),
        other => {
            tracing::debug!(kind = ?other, "ignored a plan_update of a kind not known here");
            return None;
        }
    };
    Some(AcpEvent::Agent(AgentUpdate::PlanUpdated {
        id,
        entries,
        text,
    }))
}

/// A tool call id: a string, or a number written as one.
pub(super) fn id_of(value: &Value) -> Option<String> {
    match value {
        Value::String(id) => Some(id.clone()),
        Value::Number(id) => Some(id.to_string()),
        _ => None,
    }
}

/// How many of a tool call's `locations` are resolved: each costs a few system calls, and an
/// agent may send hundreds.
const LOCATIONS: usize = 16;

/// The `locations` of a tool call that name a file inside the workspace (an absolute path, as
/// ACP has it), resolved; the others left out. A line of 0 is taken as the first. At most
/// [`LOCATIONS`] are looked at: follow mode opens the first.
fn locations_inside(given: &[Value], workspace: &Workspace) -> Vec<super::Location> {
    given
        .iter()
        .take(LOCATIONS)
        .filter_map(|location| {
            let path = location.get("path")?.as_str()?;
            if !path.starts_with('/') {
                return None;
            }
            let resolved = workspace.resolve_literal(path).ok()?;
            Some(super::Location {
                path: resolved.path.to_str()?.to_string(),
                line: location
                    .get("line")
                    .and_then(Value::as_u64)
                    .map(|line| line.max(1)),
            })
        })
        .collect()
}

/// A string field, if present and a string.
pub(super) fn str_field(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_string)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_calls_name_is_shown_after_its_title_once() {
        let (_dir, ws) = workspace();
        let mut tools = Tools::default();
        let events = tools.apply(
            &json!({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Run cargo test",
                    "name": "Bash", "status": "completed"}),
            &ws,
        );
        let names: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                AcpEvent::Turn(Event::ToolStarted { name, .. })
                | AcpEvent::Turn(Event::ToolFinished { name, .. })
                | AcpEvent::Agent(AgentUpdate::ToolUpdated { title: name, .. }) => {
                    Some(name.clone())
                }
                _ => None,
            })
            .collect();
        assert_eq!(names, ["Run cargo test · Bash"; 3]);
        assert_eq!(titled("Bash: ls", Some("Bash")), "Bash: ls");
        assert_eq!(titled("Read a.py", Some(" ")), "Read a.py");
        assert_eq!(titled("Read a.py", None), "Read a.py");
    }

    #[test]
    fn a_compaction_is_patched_field_by_field_and_its_summary_gathered() {
        let (_dir, ws) = workspace();
        let mut tools = Tools::default();
        let mut apply = |update: Value| match tools.apply(&update, &ws).as_slice() {
            [AcpEvent::Agent(AgentUpdate::Compaction {
                status,
                summary,
                error,
                ..
            })] => (status.clone(), summary.clone(), error.clone()),
            other => panic!("one compaction: {other:?}"),
        };
        let chunk = |text: &str| {
            json!({"sessionUpdate": "compaction_summary_chunk", "compactionId": "c",
                   "content": {"type": "text", "text": text}})
        };
        assert_eq!(apply(chunk("a")), ("in_progress".into(), "a".into(), None));
        assert_eq!(apply(chunk("b")).1, "ab");
        // An absent field stays; a new value replaces; null clears.
        let failed = apply(
            json!({"sessionUpdate": "compaction_update", "compactionId": "c",
            "status": "failed", "error": "full"}),
        );
        assert_eq!(failed, ("failed".into(), "ab".into(), Some("full".into())));
        let cleared = apply(
            json!({"sessionUpdate": "compaction_update", "compactionId": "c",
            "status": "completed", "summary": null, "error": null}),
        );
        assert_eq!(cleared, ("completed".into(), String::new(), None));
        let replaced = apply(
            json!({"sessionUpdate": "compaction_update", "compactionId": "c",
            "summary": [{"type": "text", "text": "new"}]}),
        );
        assert_eq!(replaced, ("completed".into(), "new".into(), None));
        // A flood of ids keeps a bounded number.
        for i in 0..500 {
            apply(
                json!({"sessionUpdate": "compaction_update", "compactionId": format!("x{i}"),
                "status": "in_progress"}),
            );
        }
        assert!(tools.compactions.len() <= COMPACTIONS);
    }

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    fn updated(id: &str, title: &str, status: &str, kind: &str, output: &str) -> AcpEvent {
        AcpEvent::Agent(AgentUpdate::ToolUpdated {
            id: id.into(),
            title: title.into(),
            status: status.into(),
            kind: kind.into(),
            output: output.into(),
            running: false,
        })
    }

    #[test]
    fn the_agents_commands_become_one_event_with_their_descriptions_and_hints() {
        let (_dir, ws) = workspace();
        let update = json!({"sessionUpdate": "available_commands_update", "availableCommands": [
            {"name": "web", "description": "Search the web", "input": {"hint": "query"}},
            {"name": "/plan", "description": "Make a plan"},
            {"description": "no name"},
            {"name": "init"},
            {"name": "two words"},
            {"name": "-dash"},
            {"name": "x".repeat(65)},
        ]});
        let command =
            |name: &str, description: &str, hint: Option<&str>| super::super::AgentCommand {
                name: name.into(),
                description: description.into(),
                hint: hint.map(str::to_string),
            };
        assert_eq!(
            Tools::default().apply(&update, &ws),
            vec![AcpEvent::Agent(AgentUpdate::Commands {
                commands: vec![
                    command("web", "Search the web", Some("query")),
                    command("plan", "Make a plan", None),
                    command("init", "", None),
                ]
            })]
        );
        // A long description is cut, and a flood of commands is kept to 200.
        let many: Vec<Value> = (0..500)
            .map(|i| json!({"name": format!("c{i}"), "description": "d".repeat(1000)}))
            .collect();
        let update =
            json!({"sessionUpdate": "available_commands_update", "availableCommands": many});
        let events = Tools::default().apply(&update, &ws);
        let [AcpEvent::Agent(AgentUpdate::Commands { commands })] = events.as_slice() else {
            panic!("one commands event: {events:?}");
        };
        assert_eq!(commands.len(), 200);
        assert_eq!(commands[0].description.chars().count(), 200);
    }

    #[test]
    fn chunks_become_text_and_thoughts() {
        let (_dir, ws) = workspace();
        let mut tools = Tools::default();
        let text = json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hi"}});
        let thought = json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}});
        let empty = json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": ""}});
        let odd = json!({"sessionUpdate": "current_mode_update", "currentModeId": "ask"});
        assert_eq!(
            [text, thought, empty, odd]
                .iter()
                .flat_map(|u| tools.apply(u, &ws))
                .collect::<Vec<_>>(),
            vec![
                AcpEvent::Turn(Event::Text { text: "Hi".into() }),
                AcpEvent::Agent(AgentUpdate::Thought { text: "hmm".into() }),
            ]
        );
    }

    #[test]
    fn a_calls_locations_inside_the_workspace_are_reported_when_they_change() {
        let (dir, ws) = workspace();
        std::fs::write(dir.path().join("a.rs"), "x\n").unwrap();
        let root = ws.root().to_str().unwrap().to_string();
        let mut tools = Tools::default();
        let start = json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Edit",
            "kind": "edit", "status": "pending", "locations": [
                {"path": "/etc/passwd"}, {"path": "a.rs"}, {"path": format!("{root}/../x")},
                {"path": format!("{root}/a.rs"), "line": 0}, {"path": format!("{root}/new.rs"), "line": 7}]});
        let same = json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1",
            "locations": [{"path": format!("{root}/a.rs"), "line": 0}, {"path": format!("{root}/new.rs"), "line": 7}]});
        let located = |events: Vec<AcpEvent>| -> Vec<AcpEvent> {
            events
                .into_iter()
                .filter(|e| matches!(e, AcpEvent::Agent(AgentUpdate::Locations { .. })))
                .collect()
        };
        assert_eq!(
            located(tools.apply(&start, &ws)),
            vec![AcpEvent::Agent(AgentUpdate::Locations {
                id: "t1".into(),
                kind: "edit".into(),
                locations: vec![
                    agent_nvim_vocab::conversation::Location {
                        path: format!("{root}/a.rs"),
                        line: Some(1),
                    },
                    agent_nvim_vocab::conversation::Location {
                        path: format!("{root}/new.rs"),
                        line: Some(7),
                    },
                ],
            })]
        );
        // The same files again: nothing new to follow.
        assert_eq!(located(tools.apply(&same, &ws)), vec![]);
    }

    #[test]
    fn a_tool_call_is_updated_in_place_and_finished_once() {
        let (_dir, ws) = workspace();
        let mut tools = Tools::default();
        let start = json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read a.txt",
            "kind": "read", "status": "pending", "rawInput": {"path": "a.txt"}});
        let running = json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "in_progress"});
        let done = json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "hello"}},
                        {"type": "terminal", "terminalId": "term-9"}]});
        let again =
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"});
        let events: Vec<_> = [start, running, done, again]
            .iter()
            .flat_map(|u| tools.apply(u, &ws))
            .collect();
        assert_eq!(
            events,
            vec![
                AcpEvent::Turn(Event::ToolStarted {
                    id: "t1".into(),
                    name: "Read a.txt".into(),
                    args: json!({"path": "a.txt"}),
                }),
                updated("t1", "Read a.txt", "pending", "read", ""),
                updated("t1", "Read a.txt", "in_progress", "read", ""),
                updated(
                    "t1",
                    "Read a.txt",
                    "completed",
                    "read",
                    "hello\n[terminal term-9]"
                ),
                AcpEvent::Turn(Event::ToolFinished {
                    id: "t1".into(),
                    name: "Read a.txt".into(),
                    ok: true,
                    summary: "Read a.txt".into(),
                    output: "hello\n[terminal term-9]".into(),
                    diff: None,
                }),
                updated(
                    "t1",
                    "Read a.txt",
                    "completed",
                    "read",
                    "hello\n[terminal term-9]"
                ),
            ]
        );
    }

    #[test]
    fn an_update_for_an_unknown_call_starts_it_and_a_failure_is_not_ok() {
        let (_dir, ws) = workspace();
        let mut tools = Tools::default();
        let update = json!({"sessionUpdate": "tool_call_update", "toolCallId": 7, "title": "Run ls",
            "kind": "execute", "status": "failed", "rawOutput": "ls: boom"});
        assert_eq!(
            tools.apply(&update, &ws),
            vec![
                AcpEvent::Turn(Event::ToolStarted {
                    id: "7".into(),
                    name: "Run ls".into(),
                    args: Value::Null,
                }),
                updated("7", "Run ls", "failed", "execute", "ls: boom"),
                AcpEvent::Turn(Event::ToolFinished {
                    id: "7".into(),
                    name: "Run ls".into(),
                    ok: false,
                    summary: "Run ls".into(),
                    output: "ls: boom".into(),
                    diff: None,
                }),
            ]
        );
    }

    #[test]
    fn a_diff_item_is_rendered_as_a_unified_diff_relative_to_the_root() {
        let (_dir, ws) = workspace();
        let path = ws.root().join("src/a.rs");
        let item =
            json!({"type": "diff", "path": path, "oldText": "one\ntwo\n", "newText": "one\nTWO\n"});
        assert_eq!(
            diff_text(&item, &ws).unwrap(),
            "--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n"
        );
        let created = json!({"type": "diff", "path": "/elsewhere/n.txt", "newText": "x\n"});
        assert!(diff_text(&created, &ws)
            .unwrap()
            .starts_with("--- /dev/null\n+++ b//elsewhere/n.txt\n"));
        let same = json!({"type": "diff", "path": "a", "oldText": "x", "newText": "x"});
        assert_eq!(diff_text(&same, &ws), None);
    }

    #[test]
    fn plans_keep_every_entry_with_defaults() {
        let (_dir, ws) = workspace();
        let mut tools = Tools::default();
        let plan = json!({"sessionUpdate": "plan", "entries": [
            {"content": "Read", "priority": "high", "status": "completed"},
            {"content": "Write"}]});
        assert_eq!(
            tools.apply(&plan, &ws),
            vec![AcpEvent::Agent(AgentUpdate::Plan {
                entries: vec![
                    PlanEntry {
                        content: "Read".into(),
                        status: "completed".into(),
                        priority: "high".into()
                    },
                    PlanEntry {
                        content: "Write".into(),
                        status: "pending".into(),
                        priority: "medium".into()
                    },
                ]
            })]
        );
    }

    #[test]
    fn closing_a_turn_finishes_open_calls_only() {
        let (_dir, ws) = workspace();
        let mut tools = Tools::default();
        for update in [
            json!({"sessionUpdate": "tool_call", "toolCallId": "a", "title": "A", "status": "completed"}),
            json!({"sessionUpdate": "tool_call", "toolCallId": "b", "title": "B"}),
        ] {
            tools.apply(&update, &ws);
        }
        assert_eq!(
            tools.close(false, "cancelled", &ws),
            vec![AcpEvent::Turn(Event::ToolFinished {
                id: "b".into(),
                name: "B".into(),
                ok: false,
                summary: "B".into(),
                output: "cancelled".into(),
                diff: None,
            })]
        );
        assert_eq!(tools.get("a"), None);
    }
}
