//! fs/read_text_file and fs/write_text_file: the agent reading and writing through the editor.
//!
//! Every path goes through [`Workspace::resolve_literal`], the one path check taking the agent's
//! names as they are (no quoted form: agents never saw list_files); a refusal is JSON-RPC
//! error -32602 with its text, and nothing about a path outside (not even whether it exists) is
//! sent. Reads serve the buffer's text when the file is loaded in the editor (that is what the
//! capability is for), else the disk. Writes refuse a buffer with unsaved changes, create missing
//! parents, replace the file atomically keeping its mode, and reload the buffer once. Agents may
//! write a file they already wrote themselves (SPEC section 5), so writing the same content again
//! changes nothing.

use agent_client_protocol::{Error, ErrorCode};

use super::AcpHost;
use crate::external::{read_file, write_file, Failure, MAX_BYTES};
use crate::workspace::beneath::FsError;
use crate::workspace::blocking;
use crate::workspace::{Refusal, Workspace};

/// The text of `path`, from line `line` (1-based) for `limit` lines when given.
pub(super) async fn read_text_file(
    workspace: &Workspace,
    host: &dyn AcpHost,
    path: &str,
    line: Option<u32>,
    limit: Option<u32>,
) -> Result<String, Error> {
    let resolved = workspace.resolve_literal(path).map_err(refused)?;
    let text = match host.buffer_text(&resolved.path).await {
        Some(text) => text,
        None => {
            let (ws, target) = (workspace.clone(), resolved.clone());
            let bytes = blocking(move || read_file(&ws, &target))
                .await
                .map_err(|failure| error_for(path, "read", failure))?;
            crate::text::lossy(&bytes).into_owned()
        }
    };
    Ok(slice_lines(&text, line, limit).to_string())
}

/// Writes `content` to `path` (see the module doc), then tells the editor once.
pub(super) async fn write_text_file(
    authority: &crate::external::AgentAuthority,
    workspace: &Workspace,
    host: &dyn AcpHost,
    path: &str,
    content: String,
) -> Result<(), Error> {
    let resolved = workspace.resolve_literal(path).map_err(refused)?;
    let editor = host.editor();
    if editor.has_unsaved_changes(&resolved.path).await {
        return Err(Error::new(
            ErrorCode::INTERNAL_ERROR,
            format!(
                "Refused: '{path}' has unsaved changes in the editor; the user must save or \
                 discard them before it can be written."
            ),
        ));
    }
    let (ws, target, authority) = (workspace.clone(), resolved.clone(), authority.clone());
    blocking(move || write_file(&authority, &ws, &target, content.as_bytes()))
        .await
        .map_err(|failure| error_for(path, "write", failure))?;
    editor.file_written(&resolved.path).await;
    Ok(())
}

/// The JSON-RPC error for a read or write of `path` that did not happen.
fn error_for(path: &str, verb: &str, failure: Failure) -> Error {
    let invalid = |message: String| Error::new(ErrorCode::INVALID_PARAMS, message);
    match failure {
        Failure::Fs(err) => {
            if let Some(refusal) = Refusal::for_fs(path, &err) {
                return refused(refusal);
            }
            match err {
                FsError::NotFound => Error::new(
                    ErrorCode::RESOURCE_NOT_FOUND,
                    format!("No such file: '{path}'."),
                ),
                FsError::IsDirectory => invalid(format!("'{path}' is a directory, not a file.")),
                FsError::NotRegular => invalid(format!("Not a regular file: {path}")),
                FsError::NotADirectory => invalid(format!("No such directory: {path}")),
                other => Error::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!("Could not {verb} '{path}': {}", describe(other)),
                ),
            }
        }
        Failure::TooBig(size) => invalid(format!(
            "'{path}' is {} MB, more than the {} MB the client reads or writes.",
            agent_nvim_text::text::megabytes(size),
            agent_nvim_text::text::megabytes(MAX_BYTES)
        )),
        Failure::ReadOnly => invalid(format!("Refused: '{path}' is read-only.")),
        Failure::Busy => Error::new(
            ErrorCode::INTERNAL_ERROR,
            format!("Could not {verb} '{path}': another edit of it is under way; try again."),
        ),
    }
}

fn describe(err: FsError) -> String {
    match err {
        FsError::Io(err) => err.to_string(),
        other => format!("{other:?}"),
    }
}

fn refused(refusal: Refusal) -> Error {
    Error::new(ErrorCode::INVALID_PARAMS, refusal.to_string())
}

/// Lines `line..line+limit` (1-based, line endings kept) of `text`; all of it when neither is
/// given, nothing past its end.
pub(super) fn slice_lines(text: &str, line: Option<u32>, limit: Option<u32>) -> &str {
    let skip = line.map_or(0, |line| (line as usize).saturating_sub(1));
    let limit = limit.map(|limit| limit as usize);
    let mut offset = 0;
    let mut start = None;
    for (index, piece) in text.split_inclusive('\n').enumerate() {
        if index == skip {
            start = Some(offset);
        }
        if let (Some(first), Some(limit)) = (start, limit) {
            if index - skip >= limit {
                return &text[first..offset];
            }
        }
        offset += piece.len();
    }
    start.map_or("", |first| &text[first..])
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::external::AgentAuthority;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn lines_are_one_based_and_keep_their_endings() {
        let text = "one\ntwo\r\nthree\nfour";
        assert_eq!(slice_lines(text, None, None), text);
        assert_eq!(slice_lines(text, Some(2), None), "two\r\nthree\nfour");
        assert_eq!(slice_lines(text, Some(2), Some(2)), "two\r\nthree\n");
        assert_eq!(slice_lines(text, Some(0), Some(1)), "one\n");
        assert_eq!(slice_lines(text, None, Some(1)), "one\n");
        assert_eq!(slice_lines(text, Some(4), Some(9)), "four");
        assert_eq!(slice_lines(text, Some(5), None), "");
        assert_eq!(slice_lines(text, Some(1), Some(0)), "");
        assert_eq!(slice_lines("", None, None), "");
    }

    #[test]
    fn a_write_creates_parents_and_keeps_an_existing_mode() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let write = |path: &std::path::Path, bytes: &[u8]| {
            let target = ws.resolve(path.to_str().unwrap()).unwrap();
            write_file(&AgentAuthority::for_tests(), &ws, &target, bytes)
                .map_err(|f| error_for("x", "write", f))
        };
        let new = dir.path().join("a/b/new.txt");
        write(&new, b"hello\n").unwrap();
        assert_eq!(std::fs::read_to_string(&new).unwrap(), "hello\n");

        let script = dir.path().join("run.sh");
        std::fs::write(&script, "old").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o751)).unwrap();
        write(&script, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&script).unwrap(), "new");
        assert_eq!(
            std::fs::metadata(&script).unwrap().permissions().mode() & 0o777,
            0o751
        );
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(
            names.iter().all(|n| !n.starts_with(".agent-write-")),
            "{names:?}"
        );
    }

    #[test]
    fn writing_the_same_content_again_leaves_the_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let write = |path: &std::path::Path, bytes: &[u8]| {
            let target = ws.resolve(path.to_str().unwrap()).unwrap();
            write_file(&AgentAuthority::for_tests(), &ws, &target, bytes)
                .map_err(|f| error_for("x", "write", f))
        };
        let file = dir.path().join("same.txt");
        std::fs::write(&file, "x").unwrap();
        let before = std::fs::metadata(&file).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        write(&file, b"x").unwrap();
        let after = std::fs::metadata(&file).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (before.ino(), before.mtime_nsec()),
            (after.ino(), after.mtime_nsec())
        );
    }

    #[test]
    fn a_new_file_gets_the_umask_mode_not_the_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let write = |path: &std::path::Path, bytes: &[u8]| {
            let target = ws.resolve(path.to_str().unwrap()).unwrap();
            write_file(&AgentAuthority::for_tests(), &ws, &target, bytes)
                .map_err(|f| error_for("x", "write", f))
        };
        let file = dir.path().join("n.txt");
        write(&file, b"x").unwrap();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        // Whatever the umask, group/other bits beyond the owner's are possible; 0600 is the
        // temp file's mode and would mean the umask was ignored (unless the umask is 077).
        let probe = dir.path().join("probe");
        std::fs::write(&probe, "").unwrap();
        let expected = std::fs::metadata(&probe).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, expected);
    }
}
