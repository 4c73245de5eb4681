//! The chat input's context requests (issue 13): `files`, the workspace's files matching what
//! follows an `@` ([`crate::workspace::files`]), and `attach`, what a prompt's `@path`,
//! `#buffer`, `#selection`, ... attach, read through the path check and clamped as read_file
//! clamps ([`crate::tools::read_file::attachment`]). Lua formats the prompt from the answers.

use rmpv::Value;
use serde::Deserialize;

use super::protocol::{Attach, AttachItem, Files};
use crate::display::{self, Layout};
use crate::editor::Editor;
use crate::text::clamp_marked;
use crate::tools::{attachment, Attachment};
use crate::workspace::files::FileIndex;
use crate::workspace::Workspace;

/// How many matches `files` answers when Lua asks for no number.
const DEFAULT_LIMIT: usize = 50;

/// The one map argument of a request, decoded (an error string Lua shows when it is not one).
pub(super) fn decode<T: for<'de> Deserialize<'de>>(args: &[Value]) -> Result<T, Value> {
    let first = args.first().cloned().unwrap_or(Value::Nil);
    rmpv::ext::from_value(first).map_err(|err| Value::from(format!("agent: bad request ({err})")))
}

/// `files`: the best matches of `query`, best first, and how many files there are.
pub(super) async fn files(index: &std::sync::Arc<FileIndex>, files: Files) -> Value {
    let limit = files.limit.map_or(DEFAULT_LIMIT, |n| n.clamp(1, 1000));
    let found = index.find(&files.query, limit).await;
    Value::Map(vec![
        (
            Value::from("files"),
            Value::Array(found.files.into_iter().map(Value::from).collect()),
        ),
        (Value::from("total"), Value::from(found.total as u64)),
        (Value::from("partial"), Value::from(found.partial)),
    ])
}

/// `attach`: each item as the prompt attaches it, in order.
pub(super) async fn attach(workspace: &Workspace, editor: &dyn Editor, attach: Attach) -> Value {
    let mut answers = Vec::with_capacity(attach.items.len());
    for item in attach.items {
        answers.push(match item {
            AttachItem::Path { path } => match attachment(workspace, editor, &path).await {
                Attachment::File {
                    rel,
                    text,
                    chars,
                    truncated,
                    unsaved,
                } => attached(
                    format!("@ {}", display::one_line(&rel)),
                    &text,
                    chars,
                    truncated,
                    unsaved,
                ),
                Attachment::Missing => Value::Map(vec![(Value::from("missing"), true.into())]),
                Attachment::Problem(problem) => Value::Map(vec![
                    (
                        Value::from("label"),
                        Value::from(format!("@ {}", display::one_line(&path))),
                    ),
                    (
                        Value::from("problem"),
                        Value::from(crate::secrets::redact(&display::one_line(&problem)).as_ref()),
                    ),
                ]),
            },
            AttachItem::Text { label, text } => {
                let clamped = clamp_marked(&text);
                let label = crate::secrets::redact(&display::one_line(&label)).into_owned();
                attached(
                    label,
                    &clamped.text,
                    clamped.chars,
                    clamped.truncated,
                    false,
                )
            }
        });
    }
    Value::Array(answers)
}

/// One attachment's answer: `label`, `text` (what the model reads, keys redacted as a tool's
/// result is), `shown` (the same made visible, for the chat's fold), `chars`, and `truncated` /
/// `unsaved` when true.
fn attached(label: String, text: &str, chars: usize, truncated: bool, unsaved: bool) -> Value {
    let text = crate::secrets::redact(text);
    let shown = display::visible(&text, Layout::Prose).into_owned();
    let mut fields = vec![
        (Value::from("label"), Value::from(label)),
        (Value::from("text"), Value::from(text.as_ref())),
        (Value::from("shown"), Value::from(shown)),
        (Value::from("chars"), Value::from(chars as u64)),
    ];
    if truncated {
        fields.push((Value::from("truncated"), true.into()));
    }
    if unsaved {
        fields.push((Value::from("unsaved"), true.into()));
    }
    Value::Map(fields)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::text::MAX_CHARS;
    use futures::future::BoxFuture;
    use std::path::{Path, PathBuf};

    /// A buffer with unsaved changes holding one file.
    struct Unsaved(PathBuf, String);

    impl Editor for Unsaved {
        fn has_unsaved_changes<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, bool> {
            Box::pin(async move { path == self.0 })
        }
        fn file_written<'a>(&'a self, _path: &'a Path) -> BoxFuture<'a, ()> {
            Box::pin(async {})
        }
        fn command_finished(&self) -> BoxFuture<'_, ()> {
            Box::pin(async {})
        }
        fn unsaved_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Option<String>> {
            Box::pin(async move { (path == self.0).then(|| self.1.clone()) })
        }
    }

    fn field<'a>(answer: &'a Value, name: &str) -> Option<&'a Value> {
        answer
            .as_map()?
            .iter()
            .find(|(k, _)| k.as_str() == Some(name))
            .map(|(_, v)| v)
    }

    #[tokio::test]
    async fn attachments_are_read_through_the_path_check_clamped_and_from_unsaved_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s3cret").unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(
            root.join("src/calc.py"),
            "def add(a, b):\n    return a + b\n",
        )
        .unwrap();
        std::fs::write(root.join("src/open.py"), "on disk\n").unwrap();
        std::fs::write(root.join("long.txt"), "x".repeat(MAX_CHARS + 5)).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("link")).unwrap();
        let workspace = Workspace::new(&root).unwrap();
        let editor = Unsaved(root.join("src/open.py"), "in the buffer\u{1b}\n".into());
        let items = [
            "src/calc.py",
            "../../etc/passwd",
            "link",
            "nothing",
            "src",
            "src/open.py",
            "long.txt",
        ]
        .into_iter()
        .map(|path| AttachItem::Path { path: path.into() })
        .chain([AttachItem::Text {
            label: "# diagnostics calc.py".into(),
            text: "calc.py:1:1: ERROR: bad".into(),
        }])
        .collect();
        let answer = attach(&workspace, &editor, Attach { items }).await;
        let answers = answer.as_array().unwrap();
        let calc = &answers[0];
        assert_eq!(
            field(calc, "label").unwrap().as_str(),
            Some("@ src/calc.py")
        );
        assert_eq!(
            field(calc, "text").unwrap().as_str(),
            Some("def add(a, b):\n    return a + b\n")
        );
        assert_eq!(field(calc, "chars").unwrap().as_u64(), Some(32));
        assert_eq!(
            field(&answers[1], "problem").unwrap().as_str(),
            Some("Refused: '../../etc/passwd' resolves outside the workspace root.")
        );
        assert_eq!(
            field(&answers[2], "problem").unwrap().as_str(),
            Some("Refused: 'link' resolves outside the workspace root.")
        );
        assert_eq!(field(&answers[3], "missing").unwrap().as_bool(), Some(true));
        assert_eq!(field(&answers[4], "missing").unwrap().as_bool(), Some(true));
        let open = &answers[5];
        assert_eq!(
            field(open, "text").unwrap().as_str(),
            Some("in the buffer\u{1b}\n")
        );
        assert_eq!(
            field(open, "shown").unwrap().as_str(),
            Some("in the buffer\\e\n")
        );
        assert_eq!(field(open, "unsaved").unwrap().as_bool(), Some(true));
        let long = &answers[6];
        assert_eq!(
            field(long, "chars").unwrap().as_u64(),
            Some(MAX_CHARS as u64)
        );
        assert_eq!(field(long, "truncated").unwrap().as_bool(), Some(true));
        assert!(field(long, "text")
            .unwrap()
            .as_str()
            .unwrap()
            .ends_with("x\n[... truncated at 20000 chars]"));
        let diagnostics = &answers[7];
        assert_eq!(
            field(diagnostics, "label").unwrap().as_str(),
            Some("# diagnostics calc.py")
        );
        assert_eq!(field(diagnostics, "chars").unwrap().as_u64(), Some(23));
    }
}
