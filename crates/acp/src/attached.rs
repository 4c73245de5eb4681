//! A prompt's `@file` attachments as an agent that takes embedded context
//! (`promptCapabilities.embeddedContext`) is sent them: each a `resource` block of its own
//! (the file's URI and the text the model would read) instead of a fenced block in the text.
//!
//! The plugin writes attachments into the prompt's text (`lua/agent/context/format.lua`): after
//! the typed text, each as `[attached: @ PATH (N chars...)]`, a fence of backticks longer than
//! any run in its text, the text, and the fence again, separated by blank lines. [`split`] reads
//! exactly that back; a prompt in any other shape, or with an attachment that is not a text
//! file of the workspace, is sent as the text it is.

use crate::workspace::Workspace;

/// One text attachment: the file (absolute, inside the workspace) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attached {
    pub(crate) path: std::path::PathBuf,
    pub(crate) text: String,
}

const MARK: &str = "\n\n[attached: @ ";

/// The typed text and the attachments after it; None when the text holds none, or any part of
/// it is not in the plugin's shape (then it all goes as text).
pub(crate) fn split(text: &str, workspace: &Workspace) -> Option<(String, Vec<Attached>)> {
    let start = text.find(MARK)?;
    let typed = text[..start].to_string();
    let mut rest = &text[start..];
    let mut attached = Vec::new();
    while !rest.is_empty() {
        let after = rest.strip_prefix(MARK)?;
        let (header, after) = after.split_once("]\n")?;
        // `PATH (N chars, ...)`: the path is what comes before the last ` (`.
        let path = &header[..header.rfind(" (")?];
        let fence_len = after.bytes().take_while(|b| *b == b'`').count();
        if fence_len < 3 {
            return None;
        }
        let fence = &after[..fence_len];
        let body_start = after[fence_len..].strip_prefix('\n')?;
        // The closing fence: the first line that is the fence alone (the text has no run of
        // backticks that long).
        let close = format!("\n{fence}");
        let mut search = 0;
        let end = loop {
            let at = search + body_start[search..].find(&close)?;
            let next = body_start.as_bytes().get(at + close.len());
            if next.is_none_or(|b| *b == b'\n') {
                break at;
            }
            search = at + 1;
        };
        let body = &body_start[..end + 1];
        let resolved = workspace.resolve_literal(path).ok()?;
        attached.push(Attached {
            path: resolved.path,
            text: body.to_string(),
        });
        rest = &body_start[end + close.len()..];
    }
    Some((typed, attached))
}

/// A file URI for `path`.
pub(crate) fn uri(path: &std::path::Path) -> String {
    url::Url::from_file_path(path)
        .map(String::from)
        .unwrap_or_else(|()| format!("file://{}", path.display()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/calc.py"), "x").unwrap();
        std::fs::write(dir.path().join("notes.md"), "y").unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn the_plugins_attachments_are_read_back_whole() {
        let (_dir, ws) = workspace();
        let text = "explain these\n\n[attached: @ src/calc.py (12 chars)]\n```\ndef f():\n  ``\n```\n\n[attached: @ notes.md (9 chars, unsaved buffer)]\n````\na ``` b\n\n````";
        let (typed, attached) = split(text, &ws).unwrap();
        assert_eq!(typed, "explain these");
        assert_eq!(attached.len(), 2);
        assert!(attached[0].path.ends_with("src/calc.py"));
        assert_eq!(attached[0].text, "def f():\n  ``\n");
        assert!(attached[1].path.ends_with("notes.md"));
        assert_eq!(attached[1].text, "a ``` b\n\n");
        assert!(uri(&attached[0].path).starts_with("file:///"));
    }

    #[test]
    fn anything_else_goes_as_text() {
        let (_dir, ws) = workspace();
        for text in [
            "no attachment at all",
            // An image, a refusal: no fence.
            "look\n\n[attached: @ shot.png: not a text file]",
            // A file outside the workspace.
            "x\n\n[attached: @ ../secret (1 chars)]\n```\ns\n```",
            // No closing fence.
            "x\n\n[attached: @ notes.md (1 chars)]\n```\ny\n",
            // Something after the attachments that is not one.
            "x\n\n[attached: @ notes.md (1 chars)]\n```\ny\n```\n\nmore words",
        ] {
            assert_eq!(split(text, &ws), None, "{text:?}");
        }
    }
}
