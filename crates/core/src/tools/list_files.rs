//! list_files: one level of a directory, directories first, each group in byte order.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use futures::future::BoxFuture;
use rustix::fs::{AtFlags, FileType, OFlags};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{blocking, fs_failure, Args, Proposal, Tool, ToolContext, ToolResult};
use crate::text::{clamp_head, head_marker, MAX_CHARS};
use crate::workspace::beneath::FsError;
use crate::workspace::{names, Resolved, Workspace};

/// Lists a directory inside the workspace.
pub struct ListFiles;

impl Tool for ListFiles {
    fn name(&self) -> &'static str {
        "list_files"
    }

    fn description(&self) -> &'static str {
        "List one level of a directory in the workspace: subdirectories first (each ending in /), \
         then files, one per line. Hidden entries are included. Without a path, lists the \
         workspace root."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory, relative to the workspace root. Defaults to the root."}
            }
        })
    }

    fn propose<'a>(
        &'a self,
        args: Args<'a>,
        cx: &'a ToolContext,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Proposal<'a>> {
        Box::pin(async move { list(args, cx).await.into() })
    }
}

/// One call: the directory's entries, clamped.
async fn list(args: Args<'_>, cx: &ToolContext) -> ToolResult {
    let given = match args.optional("path") {
        Ok(given) => given.unwrap_or("."),
        Err(fail) => return fail,
    };
    let target = match cx.workspace.resolve(given) {
        Ok(target) => target,
        Err(refusal) => return ToolResult::fail(refusal.to_string()),
    };
    let workspace = cx.workspace.clone();
    let listed = target.clone();
    let entries = match blocking(move || entries(&workspace, &listed)).await {
        Ok(entries) => entries,
        Err(FsError::NotFound | FsError::NotADirectory) => {
            return ToolResult::fail(format!("No such directory: {given}"))
        }
        Err(err) => return fs_failure("list_files: cannot list", given, &target, err),
    };
    let count = entries.len();
    let listing = if entries.is_empty() {
        "(empty directory)".to_string()
    } else {
        entries.join("\n")
    };
    let (kept, truncated) = clamp_head(&listing, MAX_CHARS);
    let mut text = kept.to_string();
    if truncated {
        text.push_str(&head_marker());
    }
    ToolResult::ok(text, format!("list {} ({count} entries)", target.rel))
}

/// The directory's entries as display lines (`name/` for directories; names that are not simple
/// in the quoted form of [`names`]), read through a handle opened beneath the root. A link to a
/// directory inside the workspace is listed as a directory, like `ls` does; a link that leads
/// outside is listed as a plain name (nothing about its target is looked at).
fn entries(workspace: &Workspace, target: &Resolved) -> Result<Vec<String>, FsError> {
    let fd = workspace.handle().open_dir(workspace.relative(target))?;
    let lookup = fd.try_clone()?;
    let mut dir = rustix::fs::Dir::new(fd)?;
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string();
        if name == "." || name == ".." {
            continue;
        }
        let mut kind = entry.file_type();
        if kind == FileType::Unknown {
            kind = rustix::fs::statat(&lookup, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                .map_or(FileType::Unknown, |stat| {
                    FileType::from_raw_mode(stat.st_mode)
                });
        }
        let is_dir = match kind {
            FileType::Directory => true,
            FileType::Symlink => leads_to_directory(workspace, &target.path.join(&name)),
            _ => false,
        };
        if is_dir {
            dirs.push(name);
        } else {
            files.push(name);
        }
    }
    dirs.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    files.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let lines = dirs
        .iter()
        .map(|d| format!("{}/", names::show(d)))
        .chain(files.iter().map(|f| names::show(f).into_owned()))
        .collect();
    Ok(lines)
}

/// Whether the link at `path` leads to a directory inside the workspace.
fn leads_to_directory(workspace: &Workspace, path: &std::path::Path) -> bool {
    let Ok(resolved) = workspace.resolve_os(path.as_os_str(), "") else {
        return false;
    };
    workspace
        .handle()
        .open_at(
            workspace.relative(&resolved),
            OFlags::PATH | OFlags::DIRECTORY,
        )
        .is_ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::tools::testing::{call, executor};

    #[tokio::test]
    async fn directories_first_then_files_each_in_byte_order_hidden_included() {
        let (dir, ex, _) = executor(None);
        for d in ["src", "Zeta", ".git", "b"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        for f in ["b.txt", "a.txt", ".env", "B.md", "é.txt"] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        assert_eq!(
            call(&ex, "list_files", json!({})).await,
            ToolResult::ok(
                ".git/\nZeta/\nb/\nsrc/\n.env\nB.md\na.txt\nb.txt\né.txt",
                "list . (9 entries)"
            )
        );
    }

    #[tokio::test]
    async fn a_subdirectory_is_named_by_its_relative_path() {
        let (dir, ex, _) = executor(None);
        std::fs::create_dir_all(dir.path().join("src/tools")).unwrap();
        std::fs::write(dir.path().join("src/main.rs"), "").unwrap();
        assert_eq!(
            call(&ex, "list_files", json!({"path": "src"})).await,
            ToolResult::ok("tools/\nmain.rs", "list src (2 entries)")
        );
    }

    #[tokio::test]
    async fn an_empty_directory_says_so() {
        let (dir, ex, _) = executor(None);
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        assert_eq!(
            call(&ex, "list_files", json!({"path": "empty"})).await,
            ToolResult::ok("(empty directory)", "list empty (0 entries)")
        );
    }

    #[tokio::test]
    async fn a_file_or_a_missing_path_is_no_such_directory() {
        let (dir, ex, _) = executor(None);
        std::fs::write(dir.path().join("f.txt"), "").unwrap();
        assert_eq!(
            call(&ex, "list_files", json!({"path": "f.txt"})).await,
            ToolResult::fail("No such directory: f.txt")
        );
        assert_eq!(
            call(&ex, "list_files", json!({"path": "gone"})).await,
            ToolResult::fail("No such directory: gone")
        );
    }

    #[tokio::test]
    async fn a_long_listing_is_clamped_like_read_file() {
        let (dir, ex, _) = executor(None);
        for i in 0..3000 {
            std::fs::write(dir.path().join(format!("file-{i:05}.txt")), "").unwrap();
        }
        let result = call(&ex, "list_files", json!({"path": "."})).await;
        assert_eq!(result.summary, "list . (3000 entries)");
        let (body, marker) = result
            .text
            .split_at(result.text.len() - head_marker().len());
        assert_eq!(marker, "\n[... truncated at 20000 chars]");
        assert_eq!(body.chars().count(), MAX_CHARS);
        assert!(body.starts_with("file-00000.txt\nfile-00001.txt\n"));
    }

    #[tokio::test]
    async fn outside_the_root_is_refused() {
        let (_dir, ex, _) = executor(None);
        assert_eq!(
            call(&ex, "list_files", json!({"path": ".."})).await,
            ToolResult::fail("Refused: '..' resolves outside the workspace root.")
        );
    }
}
