//! A conversation's own git worktree of the person's repository: made on a new branch from the
//! commit the main working tree is on, what it changed since that commit, those changes brought
//! into the main working tree when the person asks (`:Agent merge`), and its removal.
//!
//! The person's repository is touched only by `git worktree add` and `git worktree remove`, and
//! by the merge they ask for, which writes the main working tree's files (never its index or its
//! branch). What the worktree changed is read through a temporary index of our own, so the
//! worktree's index is not touched either (its files' objects are added to the store). Git runs as the person would run it (their config
//! and hooks: a checkout through Git LFS needs its hook), without the keys and session sockets
//! a command for the model does not get, never asking for a password, with a timeout.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

/// How long one git command may take.
const TIMEOUT: Duration = Duration::from_secs(120);

/// What went wrong with a worktree, as the person reads it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorktreeError {
    /// The workspace is not in a git repository, or git is missing.
    #[error("a worktree needs a git repository, and {workspace} is not in one ({why})")]
    NotARepository { workspace: String, why: String },
    /// The repository has no commit to start from.
    #[error(
        "the repository at {top} has no commit yet to start a worktree from; commit once first"
    )]
    NoCommit { top: String },
    /// The branch name is not one git takes, or is taken.
    #[error("cannot use the branch name {branch}: {why}")]
    Branch { branch: String, why: String },
    /// A git command failed.
    #[error("git {command} failed: {why}")]
    Git { command: String, why: String },
    /// The merge would conflict with the main working tree: nothing was written.
    #[error("nothing was merged: {} changed in the main working tree too ({}); commit or undo them there, or merge by hand from branch {branch}", plural(files.len()), files.join(", "))]
    Conflicts { files: Vec<String>, branch: String },
}

fn plural(n: usize) -> String {
    if n == 1 {
        "1 file".into()
    } else {
        format!("{n} files")
    }
}

/// One conversation's worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// The main working tree's top directory.
    pub top: PathBuf,
    /// The worktree's top directory.
    pub dir: PathBuf,
    /// Its branch.
    pub branch: String,
    /// The commit it started from.
    pub base: String,
}

/// One file the worktree changed since its base: `A`, `M` or `D`, and its path from the top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub status: char,
    pub path: PathBuf,
}

impl Worktree {
    /// Makes a worktree of the repository `workspace` is in, on a new branch (`branch`, else
    /// `agent/<date>-<time>`) from the commit its main working tree is on, in a directory under
    /// `under`. Also the root the conversation gets: the same place inside it as `workspace`
    /// is inside the repository.
    pub async fn create(
        workspace: &Path,
        branch: Option<&str>,
        under: &Path,
    ) -> Result<(Worktree, PathBuf), WorktreeError> {
        let not_a_repo = |why: String| WorktreeError::NotARepository {
            workspace: workspace.display().to_string(),
            why,
        };
        let top = git(workspace, &["rev-parse", "--show-toplevel"], None)
            .await
            .map_err(|err| not_a_repo(err.to_string()))?;
        let top = PathBuf::from(String::from_utf8_lossy(&top).trim());
        let base = git(
            &top,
            &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
            None,
        )
        .await
        .map_err(|_| WorktreeError::NoCommit {
            top: top.display().to_string(),
        })?;
        let base = String::from_utf8_lossy(&base).trim().to_string();
        let branch = match branch.map(str::trim).filter(|b| !b.is_empty()) {
            Some(branch) => branch.to_string(),
            None => default_branch(),
        };
        let checked = git(&top, &["check-ref-format", "--branch", &branch], None).await;
        if let Err(err) = checked {
            return Err(WorktreeError::Branch {
                branch,
                why: err.to_string(),
            });
        }
        let name = top
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "repository".into());
        let dir = under.join(format!("{}-{}", safe(&name), safe(&branch)));
        std::fs::create_dir_all(under).map_err(|err| WorktreeError::Git {
            command: "worktree add".into(),
            why: format!("cannot make {}: {err}", under.display()),
        })?;
        let dir_arg = dir.as_os_str().to_string_lossy().into_owned();
        git(
            &top,
            &["worktree", "add", "-b", &branch, "--", &dir_arg, &base],
            None,
        )
        .await
        .map_err(|err| match err {
            WorktreeError::Git { why, .. } if why.contains("already exists") => {
                WorktreeError::Branch {
                    branch: branch.clone(),
                    why,
                }
            }
            other => other,
        })?;
        let dir = dir.canonicalize().unwrap_or(dir);
        let inside = workspace
            .canonicalize()
            .ok()
            .and_then(|ws| {
                let top = top.canonicalize().ok()?;
                ws.strip_prefix(&top).ok().map(Path::to_path_buf)
            })
            .unwrap_or_default();
        let root = dir.join(inside);
        let root = if root.is_dir() { root } else { dir.clone() };
        Ok((
            Worktree {
                top,
                dir,
                branch,
                base,
            },
            root,
        ))
    }

    /// What the worktree changed since its base: its files now (untracked ones included,
    /// ignored ones not) against the base commit, sorted by path.
    pub async fn changes(&self) -> Result<Vec<Changed>, WorktreeError> {
        let index = self.staged().await?;
        let out = git(
            &self.dir,
            &[
                "diff",
                "--cached",
                "--name-status",
                "-z",
                "--no-renames",
                &self.base,
            ],
            Some(index.path()),
        )
        .await?;
        let mut fields = out.split(|b| *b == 0).filter(|f| !f.is_empty());
        let mut changed = Vec::new();
        while let (Some(status), Some(path)) = (fields.next(), fields.next()) {
            let status = status.first().map(|b| *b as char).unwrap_or('M');
            changed.push(Changed {
                status,
                path: PathBuf::from(OsStr::new(&*String::from_utf8_lossy(path))),
            });
        }
        changed.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(changed)
    }

    /// The patch that takes the base to the worktree now (binary, new files included).
    pub async fn patch(&self) -> Result<Vec<u8>, WorktreeError> {
        let index = self.staged().await?;
        git(
            &self.dir,
            &["diff", "--cached", "--binary", "--no-renames", &self.base],
            Some(index.path()),
        )
        .await
    }

    /// Brings what the worktree changed into the main working tree: its files written there
    /// (never its index or branch). Refuses, writing nothing, when a file it changes changed in
    /// the main working tree too, naming them. The files written, from the top.
    pub async fn merge(&self) -> Result<Vec<Changed>, WorktreeError> {
        let changes = self.changes().await?;
        if changes.is_empty() {
            return Ok(changes);
        }
        let patch = self.patch().await?;
        let checked = git_input(&self.top, &["apply", "--check", "--binary", "-"], &patch).await;
        if let Err(err) = checked {
            let said = match &err {
                WorktreeError::Git { why, .. } => why.clone(),
                other => other.to_string(),
            };
            let mut files = conflicting(&said);
            if files.is_empty() {
                files.push(said);
            }
            return Err(WorktreeError::Conflicts {
                files,
                branch: self.branch.clone(),
            });
        }
        git_input(&self.top, &["apply", "--binary", "-"], &patch).await?;
        Ok(changes)
    }

    /// Removes the worktree's directory (`git worktree remove`; `force` also when it holds
    /// changes). Its branch stays, so nothing committed there is lost.
    pub async fn remove(&self, force: bool) -> Result<(), WorktreeError> {
        let dir = self.dir.as_os_str().to_string_lossy().into_owned();
        let mut args = vec!["worktree", "remove"];
        if force {
            args.push("--force");
        }
        args.extend(["--", dir.as_str()]);
        git(&self.top, &args, None).await.map(|_| ())
    }

    /// A temporary index holding the worktree's files as they are now (from the base, every
    /// file added), so no index of the person's (the worktree's own included) is written: only
    /// objects are added to the repository's store, as `git add` adds them.
    async fn staged(&self) -> Result<tempfile::NamedTempFile, WorktreeError> {
        let index = tempfile::NamedTempFile::new().map_err(|err| WorktreeError::Git {
            command: "diff".into(),
            why: format!("no temporary index: {err}"),
        })?;
        let path = index.path();
        git(&self.dir, &["read-tree", &self.base], Some(path)).await?;
        git(&self.dir, &["add", "-A", "--", "."], Some(path)).await?;
        Ok(index)
    }
}

/// `agent/20261205-142501` (now, in UTC).
fn default_branch() -> String {
    let (y, m, d, hh, mm, ss) = agent_nvim_text::time::civil(std::time::SystemTime::now());
    format!("agent/{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}")
}

/// `name` with everything but letters, digits, `-`, `_` and `.` made `-`.
fn safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The files `git apply --check` said do not apply.
fn conflicting(said: &str) -> Vec<String> {
    let mut files: Vec<String> = said
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("error: patch failed: ") {
                return Some(
                    rest.rsplit_once(':')
                        .map_or(rest, |(path, _)| path)
                        .to_string(),
                );
            }
            let rest = line.strip_prefix("error: ")?;
            let (path, why) = rest.split_once(": ")?;
            (why.contains("already exists")
                || why.contains("does not exist")
                || why.contains("does not apply"))
            .then(|| path.to_string())
        })
        .collect();
    files.sort();
    files.dedup();
    files
}

/// Runs git in `dir` with `args` (and `index` as its index file), as the person would, without
/// the keys and session sockets; its stdout, or what it said on failure.
async fn git(dir: &Path, args: &[&str], index: Option<&Path>) -> Result<Vec<u8>, WorktreeError> {
    run(dir, args, index, None).await
}

/// [`git`] with `input` on stdin.
async fn git_input(dir: &Path, args: &[&str], input: &[u8]) -> Result<Vec<u8>, WorktreeError> {
    run(dir, args, None, Some(input)).await
}

async fn run(
    dir: &Path,
    args: &[&str],
    index: Option<&Path>,
    input: Option<&[u8]>,
) -> Result<Vec<u8>, WorktreeError> {
    let command_name = args.first().copied().unwrap_or("").to_string();
    let failed = |why: String| WorktreeError::Git {
        command: command_name.clone(),
        why,
    };
    let mut command = tokio::process::Command::new("git");
    command.arg("-C").arg(dir).args(args);
    for name in crate::process::hidden_env(&[]) {
        command.env_remove(name);
    }
    // The person's own repository, but none of a caller's GIT_* redirections.
    for name in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
    ] {
        command.env_remove(name);
    }
    if let Some(index) = index {
        command.env("GIT_INDEX_FILE", index);
    }
    command
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|err| failed(format!("cannot run git: {err}")))?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(input)
            .await
            .map_err(|err| failed(format!("writing to git: {err}")))?;
    }
    let output = tokio::time::timeout(TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| failed(format!("it took more than {} s", TIMEOUT.as_secs())))?
        .map_err(|err| failed(err.to_string()))?;
    if output.status.success() {
        Ok(output.stdout)
    } else {
        let said = String::from_utf8_lossy(&output.stderr).trim().to_string();
        Err(failed(if said.is_empty() {
            format!("exit {}", output.status.code().unwrap_or(-1))
        } else {
            said
        }))
    }
}

#[cfg(test)]
mod tests;
