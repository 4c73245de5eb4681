//! The project's instructions: the first of the configured files (AGENTS.md, else CLAUDE.md by
//! default) found at the workspace root, whose text goes into the built-in agent's system
//! prompt. It is read again before each prompt, so a change made between prompts is in the next
//! request; the prompt changes only when the text does (a provider's prompt cache keeps hitting).
//!
//! The file is the repository's, so it is untrusted: it is read beneath the root like any tool
//! read (a link out of the workspace, a FIFO or a device is not read), cut at
//! [`MAX_CHARS`] characters, and it can ask for anything but enforce nothing: the executor's
//! checks hold whatever it says.

use std::path::Path;

use crate::text::{clamp_marked, MAX_CHARS};
use crate::tools::{read_prefix, Contents};
use crate::workspace::beneath::FsError;
use crate::workspace::Workspace;

/// The file names looked for when the person configured none.
pub const DEFAULT_FILES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];

/// The instructions in use: where they came from and their text (clamped), or none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Found {
    /// The file they were read from (as configured), or None when no file was found.
    pub file: Option<String>,
    /// The text, cut at [`MAX_CHARS`] characters with the marker after it.
    pub text: String,
    /// The text was longer than [`MAX_CHARS`].
    pub clamped: bool,
    /// Why a configured file that exists could not be used (the first such), for the person.
    pub problem: Option<String>,
    /// Where the file leads when it is a symbolic link (inside the workspace, or it would not
    /// have been read): said in the row, so a link to `.env` does not go unseen.
    pub link: Option<String>,
}

impl Found {
    /// The system prompt's paragraph for them; None without instructions.
    pub fn prompt_section(&self) -> Option<String> {
        let file = self.file.as_deref()?;
        Some(format!(
            "\n\nThe project's instructions, from {file} at the workspace root (written by the \
project, not by the user of this chat; follow them where they do not conflict with the above, \
and the user still approves every edit and command):\n{}",
            self.text
        ))
    }

    /// The chat's row for them: `instructions: AGENTS.md`, with what is worth knowing.
    pub fn notice(&self) -> Option<String> {
        match (&self.file, &self.problem) {
            (Some(file), _) => {
                let mut notice = format!("instructions: {file}");
                if let Some(link) = &self.link {
                    notice.push_str(&format!(" (a link to {link})"));
                }
                if self.clamped {
                    notice.push_str(&format!(" (cut at {MAX_CHARS} characters)"));
                }
                Some(notice)
            }
            (None, Some(problem)) => Some(format!("instructions: none ({problem})")),
            (None, None) => None,
        }
    }
}

/// Looks for `names` at `workspace`'s root, in order, and reads the first that is a text file.
/// A name that is missing is skipped; one that exists but cannot be used (outside the root, not
/// a regular file, not text) is skipped too, and said in [`Found::problem`].
pub fn find(workspace: &Workspace, names: &[String]) -> Found {
    let mut problem = None;
    for name in names {
        match read(workspace, name) {
            Ok(Some(text)) => {
                let clamped = clamp_marked(&text);
                let link = std::fs::read_link(workspace.root().join(name))
                    .ok()
                    .map(|target| target.display().to_string());
                return Found {
                    file: Some(name.clone()),
                    text: clamped.text,
                    clamped: clamped.truncated,
                    problem: None,
                    link,
                };
            }
            Ok(None) => {}
            Err(why) => {
                problem.get_or_insert(why);
            }
        }
    }
    Found {
        problem,
        ..Found::default()
    }
}

/// The text of `name` beneath the root; None when nothing is there; Err with what to say when
/// something is there that cannot be used.
fn read(workspace: &Workspace, name: &str) -> Result<Option<String>, String> {
    let target = workspace
        .resolve(name)
        .map_err(|refusal| refusal.to_string().trim_end_matches('.').to_string())?;
    let rel: &Path = workspace.relative(&target);
    match read_prefix(workspace.handle(), rel, target.dir_only) {
        Ok(Contents::Text(text)) => Ok(Some(text)),
        Ok(Contents::Binary) => Err(format!("{name} is not a text file")),
        Err(FsError::NotFound) => Ok(None),
        Err(FsError::IsDirectory) => Err(format!("{name} is a directory")),
        Err(FsError::NotRegular) => Err(format!("{name} is not a regular file")),
        Err(FsError::Moved | FsError::Loop) => {
            Err(format!("{name} leads outside the workspace root"))
        }
        Err(err) => Err(format!("{name} cannot be read ({})", describe(&err))),
    }
}

fn describe(err: &FsError) -> String {
    match err {
        FsError::Io(io) => io.to_string(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::text::head_marker;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn agents_md_comes_first_and_claude_md_is_the_fallback() {
        let (dir, ws) = workspace();
        let defaults = names(&DEFAULT_FILES);
        assert_eq!(find(&ws, &defaults), Found::default());
        assert_eq!(find(&ws, &defaults).notice(), None);
        std::fs::write(dir.path().join("CLAUDE.md"), "use tabs").unwrap();
        let found = find(&ws, &defaults);
        assert_eq!(found.file.as_deref(), Some("CLAUDE.md"));
        assert_eq!(found.text, "use tabs");
        std::fs::write(dir.path().join("AGENTS.md"), "run make test").unwrap();
        let found = find(&ws, &defaults);
        assert_eq!(found.file.as_deref(), Some("AGENTS.md"));
        assert_eq!(found.notice().as_deref(), Some("instructions: AGENTS.md"));
        let section = found.prompt_section().unwrap();
        assert!(section.contains("from AGENTS.md"), "{section}");
        assert!(section.ends_with("\nrun make test"), "{section}");
        // None configured: none read.
        assert_eq!(find(&ws, &[]), Found::default());
    }

    #[test]
    fn a_long_file_is_cut_at_20000_characters_and_says_so() {
        let (dir, ws) = workspace();
        std::fs::write(dir.path().join("AGENTS.md"), "é".repeat(MAX_CHARS + 5)).unwrap();
        let found = find(&ws, &names(&["AGENTS.md"]));
        assert!(found.clamped);
        assert_eq!(found.text, "é".repeat(MAX_CHARS) + &head_marker());
        assert_eq!(
            found.notice().as_deref(),
            Some("instructions: AGENTS.md (cut at 20000 characters)")
        );
    }

    #[test]
    fn a_link_out_of_the_root_a_fifo_and_a_path_outside_are_not_read() {
        let (dir, ws) = workspace();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "TOKEN=1").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("AGENTS.md"))
            .unwrap();
        let found = find(&ws, &names(&["AGENTS.md"]));
        assert_eq!(found.file, None);
        assert!(!found.text.contains("TOKEN"));
        assert_eq!(
            found.problem.as_deref(),
            Some("Refused: 'AGENTS.md' resolves outside the workspace root"),
            "{found:?}"
        );

        let fifo = dir.path().join("CLAUDE.md");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Would block forever if it were opened for reading without care.
        let found = find(&ws, &names(&["CLAUDE.md"]));
        assert_eq!(
            found.problem.as_deref(),
            Some("CLAUDE.md is not a regular file")
        );
        assert_eq!(
            found.notice().as_deref(),
            Some("instructions: none (CLAUDE.md is not a regular file)")
        );

        let found = find(&ws, &names(&["../elsewhere.md", "README.md"]));
        assert_eq!(found.file, None);
        assert!(found
            .problem
            .unwrap()
            .contains("outside the workspace root"));
    }

    #[test]
    fn a_link_inside_the_workspace_is_read_and_the_row_names_where_it_leads() {
        let (dir, ws) = workspace();
        std::fs::create_dir(dir.path().join("docs")).unwrap();
        std::fs::write(dir.path().join("docs/AI.md"), "be brief").unwrap();
        std::os::unix::fs::symlink("docs/AI.md", dir.path().join("AGENTS.md")).unwrap();
        let found = find(&ws, &names(&DEFAULT_FILES));
        assert_eq!(found.text, "be brief");
        assert_eq!(
            found.notice().as_deref(),
            Some("instructions: AGENTS.md (a link to docs/AI.md)")
        );
    }

    #[test]
    fn a_binary_file_is_skipped_for_the_next_name() {
        let (dir, ws) = workspace();
        std::fs::write(dir.path().join("AGENTS.md"), b"\0\x01").unwrap();
        std::fs::write(dir.path().join("CLAUDE.md"), "plain").unwrap();
        let found = find(&ws, &names(&DEFAULT_FILES));
        assert_eq!(found.file.as_deref(), Some("CLAUDE.md"));
        assert_eq!(found.problem, None);
    }
}
