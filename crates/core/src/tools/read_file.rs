//! read_file: a text file's contents, clamped at 20,000 characters.
//!
//! It reads only the bytes that can appear in the answer (at most 4 bytes a character, plus one
//! character to know whether to cut), so a 10 GB file costs what a 30 KB one does.

use std::io::Read;

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{blocking, fs_failure, Args, Proposal, Tool, ToolContext, ToolResult};
use crate::text::{clamp_marked, Clamped, MAX_CHARS};
use crate::workspace::beneath::{FsError, Root};

/// How many leading bytes are searched for NUL to tell a binary file.
const SNIFF_BYTES: usize = 8 * 1024;

/// Reads a text file inside the workspace.
pub struct ReadFile;

/// What was read from disk.
pub enum Contents {
    Binary,
    Text(String),
}

impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        "read_file"
    }

    fn description(&self) -> &'static str {
        "Read a text file in the workspace. Returns its contents (the first 20000 characters; a \
         marker says when it was cut). Paths are relative to the workspace root. Read a file \
         before editing it."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root."}
            },
            "required": ["path"]
        })
    }

    fn propose<'a>(
        &'a self,
        args: Args<'a>,
        cx: &'a ToolContext,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Proposal<'a>> {
        Box::pin(async move { read(args, cx).await.into() })
    }
}

/// One call: the file's text, clamped, with a note when its buffer has unsaved changes.
async fn read(args: Args<'_>, cx: &ToolContext) -> ToolResult {
    let given = match args.required("path") {
        Ok(given) => given,
        Err(fail) => return fail,
    };
    let target = match cx.workspace.resolve(given) {
        Ok(target) => target,
        Err(refusal) => return ToolResult::fail(refusal.to_string()),
    };
    let text = match from_disk(&cx.workspace, &target, given).await {
        Ok(text) => text,
        Err(Unread::NoFile) => return ToolResult::fail(format!("No such file: {given}")),
        Err(Unread::Failed(failed)) => return failed,
    };
    let Clamped {
        text: mut out,
        chars,
        truncated,
    } = clamp_marked(&text);
    if cx.editor.has_unsaved_changes(&target.path).await {
        out.push_str(&format!(
                "\n[note: {} is open in Neovim with unsaved changes; the buffer differs from this text on disk]",
                target.rel
            ));
    }
    let summary = if truncated {
        format!("read {} ({chars} chars, truncated)", target.rel)
    } else {
        format!("read {} ({chars} chars)", target.rel)
    };
    ToolResult::ok(out, summary)
}

/// A file a prompt attaches (`@path` in the chat's input), read as read_file reads it: through
/// the path check, clamped at [`MAX_CHARS`], with the unsaved text of its buffer when it has
/// one (the person means what they see).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attachment {
    /// The file's text (clamped, the marker added), its path relative to the root, how many
    /// characters were kept, whether it was cut, and whether it is a buffer's unsaved text.
    File {
        rel: String,
        text: String,
        chars: usize,
        truncated: bool,
        unsaved: bool,
    },
    /// No such file (or a directory): the `@` was not a path, nothing is attached.
    Missing,
    /// Refused or unreadable: the message, as read_file words it.
    Problem(String),
}

/// Reads `given` (a name as the person wrote it, taken literally) for a prompt.
pub async fn attachment(
    workspace: &crate::workspace::Workspace,
    editor: &dyn crate::editor::Editor,
    given: &str,
) -> Attachment {
    let target = match workspace.resolve_literal(given) {
        Ok(target) => target,
        Err(refusal) => return Attachment::Problem(refusal.to_string()),
    };
    let (text, unsaved) = match editor.unsaved_text(&target.path).await {
        Some(text) => (text, true),
        None => match from_disk(workspace, &target, given).await {
            Ok(text) => (text, false),
            Err(Unread::NoFile) => return Attachment::Missing,
            Err(Unread::Failed(failed)) => return Attachment::Problem(failed.text),
        },
    };
    let Clamped {
        text,
        chars,
        truncated,
    } = clamp_marked(&text);
    Attachment::File {
        rel: target.rel,
        text,
        chars,
        truncated,
        unsaved,
    }
}

/// What `@shot.png` reads ([`image_bytes`]): the file's bytes with its path relative to the
/// root, no such file, or why it cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageBytes {
    File { rel: String, bytes: Vec<u8> },
    Missing,
    Problem(String),
}

/// Reads at most `limit` bytes of the image (or audio clip) `given` names (taken literally),
/// through the path check as read_file reads: opened beneath the root, a regular file only (a
/// FIFO is refused, never waited on). A file over `limit` is refused unread past it.
pub async fn image_bytes(
    workspace: &crate::workspace::Workspace,
    given: &str,
    limit: u64,
) -> ImageBytes {
    let target = match workspace.resolve_literal(given) {
        Ok(target) => target,
        Err(refusal) => return ImageBytes::Problem(refusal.to_string()),
    };
    let ws = workspace.clone();
    let rel = ws.relative(&target).to_path_buf();
    let dir_only = target.dir_only;
    let read = blocking(move || -> Result<Vec<u8>, FsError> {
        let opened = ws.handle().open_regular(&rel, dir_only)?;
        let mut bytes = Vec::new();
        opened.file.take(limit + 1).read_to_end(&mut bytes)?;
        Ok(bytes)
    })
    .await;
    match read {
        Ok(bytes) if bytes.len() as u64 > limit => ImageBytes::Problem(format!(
            "{given} is larger than {} MB; files that large are not attached",
            limit / 1024 / 1024
        )),
        Ok(bytes) => ImageBytes::File {
            rel: target.rel,
            bytes,
        },
        Err(FsError::NotFound | FsError::IsDirectory) => ImageBytes::Missing,
        Err(err) => ImageBytes::Problem(fs_failure("cannot read", given, &target, err).text),
    }
}

/// Why [`from_disk`] has no text: no such file (or a directory), or read_file's failure.
enum Unread {
    NoFile,
    Failed(ToolResult),
}

/// The text of the resolved `target` on disk, as read_file reads it (its failures worded for
/// `given`, the name as written).
async fn from_disk(
    workspace: &crate::workspace::Workspace,
    target: &crate::workspace::Resolved,
    given: &str,
) -> Result<String, Unread> {
    let ws = workspace.clone();
    let rel = ws.relative(target).to_path_buf();
    let dir_only = target.dir_only;
    match blocking(move || read_prefix(ws.handle(), &rel, dir_only)).await {
        Ok(Contents::Text(text)) => Ok(text),
        Ok(Contents::Binary) => Err(Unread::Failed(ToolResult::fail(format!(
            "Not a text file: {given}"
        )))),
        Err(FsError::NotFound | FsError::IsDirectory) => Err(Unread::NoFile),
        Err(err) => Err(Unread::Failed(fs_failure(
            "read_file: cannot read",
            given,
            target,
            err,
        ))),
    }
}

/// Reads at most what the answer can hold: MAX_CHARS characters of up to 4 bytes, plus one more.
/// The file is opened beneath the root, checked to be a regular file before it is read.
pub fn read_prefix(
    root: &Root,
    rel: &std::path::Path,
    dir_only: bool,
) -> Result<Contents, FsError> {
    let opened = root.open_regular(rel, dir_only)?;
    let limit = (MAX_CHARS + 1) * 4;
    let mut bytes = Vec::with_capacity(limit.min(64 * 1024));
    opened.file.take(limit as u64).read_to_end(&mut bytes)?;
    if memchr::memchr(0, &bytes[..bytes.len().min(SNIFF_BYTES)]).is_some() {
        return Ok(Contents::Binary);
    }
    Ok(Contents::Text(crate::text::lossy(&bytes).into_owned()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::tools::testing::{call, executor};

    #[tokio::test]
    async fn reads_a_file_with_its_summary() {
        let (dir, ex, _) = executor(None);
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.rs"), "fn main() {}\n").unwrap();
        assert_eq!(
            call(&ex, "read_file", json!({"path": "src/a.rs"})).await,
            ToolResult::ok("fn main() {}\n", "read src/a.rs (13 chars)")
        );
    }

    #[tokio::test]
    async fn cuts_at_exactly_20000_characters_counting_characters_not_bytes() {
        let (dir, ex, _) = executor(None);
        let text = "é".repeat(MAX_CHARS) + "ü";
        std::fs::write(dir.path().join("long.txt"), &text).unwrap();
        let result = call(&ex, "read_file", json!({"path": "long.txt"})).await;
        assert_eq!(
            result,
            ToolResult::ok(
                "é".repeat(MAX_CHARS) + "\n[... truncated at 20000 chars]",
                "read long.txt (20000 chars, truncated)"
            )
        );

        let exact = "日".repeat(MAX_CHARS);
        std::fs::write(dir.path().join("exact.txt"), &exact).unwrap();
        assert_eq!(
            call(&ex, "read_file", json!({"path": "exact.txt"})).await,
            ToolResult::ok(exact, "read exact.txt (20000 chars)")
        );
    }

    #[tokio::test]
    async fn a_huge_file_reads_only_its_head() {
        let (dir, ex, _) = executor(None);
        let file = std::fs::File::create(dir.path().join("big.log")).unwrap();
        // A sparse 10 GB file whose first bytes are text: reading it all would take minutes.
        use std::io::Write;
        (&file).write_all(&b"x\n".repeat(20_000)).unwrap();
        file.set_len(10 * 1024 * 1024 * 1024).unwrap();
        let result = call(&ex, "read_file", json!({"path": "big.log"})).await;
        assert!(result.ok);
        assert_eq!(result.summary, "read big.log (20000 chars, truncated)");
        assert!(result.text.ends_with("x\n\n[... truncated at 20000 chars]"));
    }

    #[tokio::test]
    async fn missing_files_and_directories_are_no_such_file() {
        let (dir, ex, _) = executor(None);
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        assert_eq!(
            call(&ex, "read_file", json!({"path": "nope.txt"})).await,
            ToolResult::fail("No such file: nope.txt")
        );
        assert_eq!(
            call(&ex, "read_file", json!({"path": "sub"})).await,
            ToolResult::fail("No such file: sub")
        );
    }

    #[tokio::test]
    async fn a_nul_byte_in_the_first_8_kib_means_not_text() {
        let (dir, ex, _) = executor(None);
        std::fs::write(dir.path().join("bin"), b"ELF\0\x01\x02").unwrap();
        assert_eq!(
            call(&ex, "read_file", json!({"path": "bin"})).await,
            ToolResult::fail("Not a text file: bin")
        );
        // A NUL after the first 8 KiB is read as text.
        let mut late = vec![b'a'; SNIFF_BYTES];
        late.push(0);
        std::fs::write(dir.path().join("late"), &late).unwrap();
        assert!(call(&ex, "read_file", json!({"path": "late"})).await.ok);
    }

    #[tokio::test]
    async fn invalid_utf8_is_decoded_lossily() {
        let (dir, ex, _) = executor(None);
        std::fs::write(dir.path().join("latin1.txt"), b"caf\xe9\n").unwrap();
        assert_eq!(
            call(&ex, "read_file", json!({"path": "latin1.txt"})).await,
            ToolResult::ok("caf\u{fffd}\n", "read latin1.txt (5 chars)")
        );
    }

    #[tokio::test]
    async fn a_path_outside_is_refused_with_the_path_as_given() {
        let (_dir, ex, _) = executor(None);
        assert_eq!(
            call(&ex, "read_file", json!({"path": "../../.ssh/id_rsa"})).await,
            ToolResult::fail("Refused: '../../.ssh/id_rsa' resolves outside the workspace root.")
        );
    }
}
