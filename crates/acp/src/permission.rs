//! session/request_permission: what the picker shows, and how it is answered.
//!
//! Options are chosen by their `kind`, never by their id: agents name them differently
//! (`allow-once`, `once`, `allow_for_session`, ...). The preview comes from whatever the tool
//! call carries: `diff` content items, a unified diff in `rawInput`, or the command of a shell
//! tool (SPEC section 5). Nothing there is required.

use agent_client_protocol::v1::schema::{
    RequestPermissionOutcome, RequestPermissionResponse, SelectedPermissionOutcome,
};
use serde_json::Value;

use super::update::{diff_text, str_field, Call};
use super::{PermissionAsk, PermissionChoice};
use crate::workspace::Workspace;

/// Keys under which agents put a unified diff in `rawInput`.
const DIFF_KEYS: [&str; 4] = ["diff", "patch", "unified_diff", "unifiedDiff"];
/// How deep into `rawInput` a diff is looked for (Codex nests it under `changes.{path}`).
const DIFF_DEPTH: usize = 4;

/// The options of a request, in the agent's order; options without an id are dropped.
pub(super) fn options(params: &Value) -> Vec<PermissionChoice> {
    params
        .get("options")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|option| {
            let id = str_field(option, "optionId")?;
            Some(PermissionChoice {
                name: str_field(option, "name").unwrap_or_else(|| id.clone()),
                kind: str_field(option, "kind").unwrap_or_default(),
                id,
            })
        })
        .collect()
}

/// The question for the user about `fields` (the request's `toolCall`), filled in from what the
/// call reported earlier (`known`) where the request leaves something out.
pub(super) fn ask(
    fields: &Value,
    options: Vec<PermissionChoice>,
    known: Option<&Call>,
    workspace: &Workspace,
) -> PermissionAsk {
    let content: Vec<Value> = match fields.get("content").and_then(Value::as_array) {
        Some(content) => content.clone(),
        None => known.map(|call| call.content.clone()).unwrap_or_default(),
    };
    let raw_input = fields
        .get("rawInput")
        .filter(|raw| !raw.is_null())
        .or_else(|| known.and_then(|call| call.raw_input.as_ref()));
    let diffs: Vec<String> = content
        .iter()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("diff"))
        .filter_map(|item| diff_text(item, workspace))
        .collect();
    let diff = if diffs.is_empty() {
        raw_input.and_then(|raw| raw_diff(raw, workspace))
    } else {
        Some(diffs.join(""))
    };
    PermissionAsk {
        tool_call_id: super::update::id_of(&fields["toolCallId"]).unwrap_or_default(),
        title: super::update::titled(
            &str_field(fields, "title")
                .or_else(|| known.map(|call| call.title.clone()))
                .unwrap_or_else(|| "tool call".into()),
            str_field(fields, "name")
                .or_else(|| known.and_then(|call| call.name.clone()))
                .as_deref(),
        ),
        options,
        diff,
        command: raw_input.and_then(raw_command),
        cwd: None,
        timeout: None,
        edit: None,
    }
}

/// The edit a person may change before allowing: the call's one `diff` item (with a path in
/// the workspace and its `newText`); None when it has none, or more than one.
pub(super) fn edit(
    fields: &Value,
    known: Option<&Call>,
    workspace: &Workspace,
) -> Option<super::AgentEdit> {
    let content = match fields.get("content").and_then(Value::as_array) {
        Some(content) => content.clone(),
        None => known.map(|call| call.content.clone()).unwrap_or_default(),
    };
    let mut diffs = content
        .iter()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("diff"));
    let (item, None) = (diffs.next()?, diffs.next()) else {
        return None;
    };
    let path = item.get("path").and_then(Value::as_str)?;
    let resolved = workspace.resolve_literal(path).ok()?;
    Some(super::AgentEdit {
        path: resolved.path,
        rel: resolved.rel,
        now: item
            .get("oldText")
            .and_then(Value::as_str)
            .map(str::to_string),
        proposed: item.get("newText").and_then(Value::as_str)?.to_string(),
    })
}

/// What auto_approve picks: allow_always, else allow_once, never a reject option.
/// Why a permission request is too large to be shown (a command over
/// [`crate::tools::MAX_ARGUMENT_CHARS`], a diff over [`crate::approval::MAX_DIFF_CHARS`]), or
/// None.
pub(super) fn too_large(ask: &PermissionAsk) -> Option<String> {
    let over = |text: &Option<String>, limit: usize, what: &str| {
        let chars = crate::text::chars_over(text.as_deref()?, limit)?;
        Some(format!(
            "its {what} is {} characters long, over the {} a question shows",
            crate::text::grouped(chars),
            crate::text::grouped(limit)
        ))
    };
    over(&ask.command, crate::tools::MAX_ARGUMENT_CHARS, "command")
        .or_else(|| over(&ask.diff, crate::approval::MAX_DIFF_CHARS, "diff"))
}

pub(super) fn auto_choice(options: &[PermissionChoice]) -> Option<&str> {
    ["allow_always", "allow_once"].iter().find_map(|kind| {
        options
            .iter()
            .find(|option| option.kind == *kind)
            .map(|option| option.id.as_str())
    })
}

/// The response selecting `option_id`.
pub(super) fn selected(option_id: &str) -> Value {
    response(RequestPermissionOutcome::Selected(
        SelectedPermissionOutcome::new(option_id.to_string()),
    ))
}

/// The response `cancelled`.
pub(super) fn cancelled() -> Value {
    response(RequestPermissionOutcome::Cancelled)
}

fn response(outcome: RequestPermissionOutcome) -> Value {
    serde_json::to_value(RequestPermissionResponse::new(outcome)).unwrap_or(Value::Null)
}

/// A unified diff the agent put in `rawInput` (under `diff`, `patch`, ... at any depth up to
/// [`DIFF_DEPTH`]), or one made from an `old_string`/`new_string` edit of `file_path`.
fn raw_diff(raw: &Value, workspace: &Workspace) -> Option<String> {
    let mut found = Vec::new();
    collect_diffs(raw, DIFF_DEPTH, &mut found);
    if !found.is_empty() {
        return Some(found.join("\n"));
    }
    let path = str_field(raw, "file_path").or_else(|| str_field(raw, "path"))?;
    let old = raw.get("old_string").and_then(Value::as_str)?;
    let new = raw.get("new_string").and_then(Value::as_str)?;
    let diff = crate::diff::unified(
        &workspace.display(std::path::Path::new(&path)),
        Some(old),
        new,
    );
    (!diff.is_empty()).then_some(diff)
}

fn collect_diffs(value: &Value, depth: usize, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match value {
                    Value::String(text)
                        if DIFF_KEYS.contains(&key.as_str()) && !text.trim().is_empty() =>
                    {
                        found.push(text.clone())
                    }
                    _ if depth > 0 => collect_diffs(value, depth - 1, found),
                    _ => {}
                }
            }
        }
        Value::Array(items) if depth > 0 => {
            for item in items {
                collect_diffs(item, depth - 1, found);
            }
        }
        _ => {}
    }
}

/// The command line of a shell tool: `rawInput.command` (a string, or argv joined by spaces) or
/// `rawInput.cmd`.
fn raw_command(raw: &Value) -> Option<String> {
    let command = raw.get("command").or_else(|| raw.get("cmd"))?;
    match command {
        Value::String(line) => Some(line.clone()),
        Value::Array(argv) => {
            let words: Vec<&str> = argv.iter().filter_map(Value::as_str).collect();
            (!words.is_empty()).then(|| words.join(" "))
        }
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn choice(id: &str, kind: &str) -> PermissionChoice {
        PermissionChoice {
            id: id.into(),
            name: id.into(),
            kind: kind.into(),
        }
    }

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn auto_approve_prefers_always_then_once_and_never_rejects() {
        let all = [
            choice("reject", "reject_once"),
            choice("once", "allow_once"),
            choice("always", "allow_always"),
        ];
        assert_eq!(auto_choice(&all), Some("always"));
        assert_eq!(auto_choice(&all[..2]), Some("once"));
        assert_eq!(
            auto_choice(&[
                choice("no", "reject_once"),
                choice("never", "reject_always")
            ]),
            None
        );
    }

    #[test]
    fn options_keep_the_agents_ids_names_and_kinds() {
        let params = json!({"options": [
            {"optionId": "allow-once", "name": "Allow", "kind": "allow_once"},
            {"optionId": "cancel", "name": "Cancel", "kind": "reject_once"},
            {"name": "no id"}]});
        assert_eq!(
            options(&params),
            vec![
                PermissionChoice {
                    id: "allow-once".into(),
                    name: "Allow".into(),
                    kind: "allow_once".into()
                },
                PermissionChoice {
                    id: "cancel".into(),
                    name: "Cancel".into(),
                    kind: "reject_once".into()
                },
            ]
        );
    }

    #[test]
    fn responses_have_the_wire_shape() {
        assert_eq!(
            selected("x"),
            json!({"outcome": {"outcome": "selected", "optionId": "x"}})
        );
        assert_eq!(cancelled(), json!({"outcome": {"outcome": "cancelled"}}));
    }

    #[test]
    fn the_preview_comes_from_a_diff_item_else_raw_input_else_nothing() {
        let (_dir, ws) = workspace();
        let with_item = json!({"toolCallId": "t", "title": "Edit a", "content": [
            {"type": "diff", "path": ws.root().join("a"), "oldText": "1\n", "newText": "2\n"}]});
        let ask1 = ask(&with_item, Vec::new(), None, &ws);
        assert_eq!(
            ask1.diff.as_deref(),
            Some("--- a/a\n+++ b/a\n@@ -1 +1 @@\n-1\n+2\n")
        );
        assert_eq!(ask1.title, "Edit a");
        assert_eq!(ask1.command, None);

        let nested = json!({"toolCallId": "t", "rawInput": {"changes": {"x.rs": {"unified_diff": "@@ -1 +1 @@\n-a\n+b\n"}}}});
        assert_eq!(
            ask(&nested, Vec::new(), None, &ws).diff.as_deref(),
            Some("@@ -1 +1 @@\n-a\n+b\n")
        );

        let edit = json!({"toolCallId": "t", "rawInput": {"file_path": "f.txt", "old_string": "a\n", "new_string": "b\n"}});
        assert_eq!(
            ask(&edit, Vec::new(), None, &ws).diff.as_deref(),
            Some("--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-a\n+b\n")
        );

        let shell = json!({"toolCallId": "t", "rawInput": {"command": ["bash", "-lc", "ls -la"]}});
        let ask4 = ask(&shell, Vec::new(), None, &ws);
        assert_eq!(ask4.command.as_deref(), Some("bash -lc ls -la"));
        assert_eq!(ask4.diff, None);
        assert_eq!(ask4.title, "tool call");

        let bare = json!({"toolCallId": 3});
        let ask5 = ask(&bare, Vec::new(), None, &ws);
        assert_eq!(
            (ask5.tool_call_id.as_str(), ask5.diff, ask5.command),
            ("3", None, None)
        );
    }

    #[test]
    fn what_the_call_reported_earlier_fills_the_gaps() {
        let (_dir, ws) = workspace();
        let known = Call {
            title: "Run tests".into(),
            name: Some("Bash".into()),
            raw_input: Some(json!({"command": "cargo test"})),
            ..Call::default()
        };
        let ask = ask(&json!({"toolCallId": "t"}), Vec::new(), Some(&known), &ws);
        assert_eq!(ask.title, "Run tests · Bash");
        assert_eq!(ask.command.as_deref(), Some("cargo test"));
    }
}
