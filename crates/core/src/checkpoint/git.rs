//! The `git` binary, run on the shadow repository and nothing else.
//!
//! Every run starts from an empty environment (no `GIT_*` variable of the user's, no `HOME`
//! holding their `~/.gitconfig`, no `XDG_CONFIG_HOME` holding `git/attributes` or `git/ignore`),
//! reads no system or global configuration, and gets on its command line the settings that keep
//! it from running anything of anyone's: no hooks, no fsmonitor, no pager, no external diff, no
//! line-ending conversion. `GIT_DIR` is the shadow directory and `GIT_WORK_TREE` the workspace,
//! so the user's `.git` is never opened; paths travel on stdin, NUL-separated, and are taken
//! literally (`GIT_LITERAL_PATHSPECS`), so no file name can be read as an option or as pathspec
//! magic. Each run is a process tree of its own ([`crate::process::spawn_tree`]) with a timeout.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::CheckpointError;

/// How long one git command may take before its tree is killed.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The settings every run gets, overriding whatever the shadow repository's own config says (a
/// process that wrote it cannot turn a hook or a monitor on for the next snapshot).
const SETTINGS: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.symlinks=true",
    "core.fileMode=true",
    "core.quotePath=false",
    "core.untrackedCache=true",
    "core.excludesFile=/dev/null",
    "core.attributesFile=/dev/null",
    "core.pager=cat",
    "core.sparseCheckout=false",
    // Files over 32 KiB are hashed by reading, not mapped: git maps a file to hash it, and one
    // that shrinks meanwhile (a command still writing it) kills git with SIGBUS, leaving its
    // index lock behind. Read, it fails cleanly, or records what it read.
    "core.bigFileThreshold=32k",
    "gc.auto=0",
    "maintenance.auto=false",
    "commit.gpgSign=false",
    "status.showUntrackedFiles=all",
    "diff.external=",
    "user.name=agent.nvim",
    "user.email=checkpoints@agent.nvim",
];

/// The attributes the shadow repository gives every path (`info/attributes` outranks the
/// workspace's `.gitattributes`): no filter, no line-ending or encoding conversion, no
/// keyword expansion, and diff and merge drivers back to git's own. A `.gitattributes` in the
/// workspace naming a filter or textconv driver therefore runs nothing.
pub(super) const ATTRIBUTES: &str =
    "* -filter -text -eol -ident -working-tree-encoding !diff !merge\n";

/// The shadow repository of one workspace.
#[derive(Debug, Clone)]
pub(super) struct Git {
    /// The program (`git`, found on PATH; tests name one that is missing).
    pub program: PathBuf,
    /// The shadow git directory.
    pub dir: PathBuf,
    /// The workspace root (its work tree).
    pub work_tree: PathBuf,
}

impl Git {
    /// `git ARGS` with `input` on stdin; its stdout, or an error naming the command and what git
    /// said on stderr.
    pub async fn run<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        input: &[u8],
    ) -> Result<Vec<u8>, CheckpointError> {
        let mut command = Command::new(&self.program);
        command.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        command
            .env("HOME", &self.dir)
            .env("XDG_CONFIG_HOME", &self.dir)
            .env("LC_ALL", "C")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_LITERAL_PATHSPECS", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            // The one transport a shadow repository uses is a local path (a fork with code
            // fetches another's checkpoint): whatever its config says (`url.*.insteadOf`,
            // `protocol.*.allow`), no other runs, and nothing a URL could name.
            .env("GIT_ALLOW_PROTOCOL", "file")
            .env("GIT_PROTOCOL_FROM_USER", "0")
            .env("GIT_DIR", &self.dir)
            .env("GIT_WORK_TREE", &self.work_tree)
            .current_dir(&self.work_tree)
            .arg("--no-pager");
        for setting in SETTINGS {
            command.arg("-c").arg(setting);
        }
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let what = || {
            let first = args
                .first()
                .map(|a| a.as_ref().to_string_lossy().into_owned());
            format!("git {}", first.unwrap_or_default())
        };
        let (mut child, tree) = crate::process::spawn_tree(command, &super::token())
            .await
            .map_err(|err| CheckpointError::Git(format!("cannot start git: {err}")))?;
        let mut stdin = child.stdin.take();
        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let feed = async {
            if let Some(pipe) = stdin.as_mut() {
                // A git that exits without reading (an error) closes the pipe: its status says why.
                let _ = pipe.write_all(input).await;
            }
            drop(stdin.take());
        };
        let read = |pipe: Option<tokio::process::ChildStdout>| async move {
            let mut out = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut out).await;
            }
            out
        };
        let read_err = async {
            let mut out = Vec::new();
            if let Some(pipe) = stderr.as_mut() {
                let _ = pipe.read_to_end(&mut out).await;
            }
            out
        };
        let all = async {
            let ((), out, err) = tokio::join!(feed, read(stdout.take()), read_err);
            let status = child.wait().await;
            (out, err, status)
        };
        let finished = tokio::time::timeout(TIMEOUT, all).await;
        tree.end().await;
        let Ok((out, err, status)) = finished else {
            return Err(CheckpointError::Git(format!(
                "{} took more than {}s",
                what(),
                TIMEOUT.as_secs()
            )));
        };
        let status = status.map_err(|err| CheckpointError::Git(format!("{}: {err}", what())))?;
        if status.success() {
            return Ok(out);
        }
        let said = String::from_utf8_lossy(&err);
        Err(CheckpointError::Git(format!(
            "{} failed: {}",
            what(),
            said.trim()
        )))
    }

    /// The output of `git ARGS` as text, its last newline dropped.
    pub async fn line<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<String, CheckpointError> {
        let out = self.run(args, b"").await?;
        let text = String::from_utf8_lossy(&out);
        Ok(text.trim_end_matches('\n').to_string())
    }
}

/// The installed git's version line (`git version 2.47.3`), or why there is none.
pub(super) async fn version(program: &Path) -> Result<String, CheckpointError> {
    let scratch = Git {
        program: program.to_path_buf(),
        dir: PathBuf::from("/nonexistent"),
        work_tree: std::env::temp_dir(),
    };
    scratch.line(&["--version"]).await.map_err(|err| match err {
        CheckpointError::Git(message) if message.starts_with("cannot start git") => {
            CheckpointError::NoGit
        }
        other => other,
    })
}

/// Paths as git's NUL-separated input wants them.
pub(super) fn nul_separated<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    for path in paths {
        out.extend_from_slice(path.as_os_str().as_bytes());
        out.push(0);
    }
    out
}
