//! Checkpoints: the workspace as it was before each prompt and before each change a person
//! allowed, kept in a shadow git repository of the backend's own, so that a rewind can put every
//! file back, what shell commands did included.
//!
//! The repository lives in `{state_dir}/checkpoints/{workspace}/`, outside the workspace; the
//! workspace is its work tree. Only the `git` binary is needed, run as [`git`] describes: the
//! user's `.git` (index, refs, hooks, config, locks) is never opened, their git configuration
//! never read, and nothing in the workspace can make git run a command. The workspace's
//! `.gitignore` rules are honoured; a file over [`MAX_FILE_BYTES`] is skipped and listed; a
//! nested repository (a directory with its own `.git`, a submodule) is skipped and listed too,
//! as git would otherwise record it as a commit id and read its refs.
//!
//! A snapshot is a commit on `refs/agent/{conversation}/{n}`; the commit says what it was taken
//! before (`prompt: fix the test`). [`Checkpoints::restore`] first takes a snapshot of the
//! present (so a rewind can be rewound), then writes every file that differs beneath the root
//! through the workspace's handle ([`restore`]).

mod git;
mod modes;
pub mod points;
mod restore;
pub mod review;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::hash::Hasher;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::editor::Editor;
use crate::workspace::Workspace;
use git::Git;

pub use restore::Restored;

/// The token for a checkpoint's own work: git on the shadow repository, and a restore the
/// person asked for.
fn token() -> crate::approved::Approved {
    crate::approved::Approved::for_checkpoints()
}

/// The largest file a snapshot records (10 MB); larger ones are skipped and listed.
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// How often a snapshot is attempted when files change under it.
const TRIES: usize = 8;

/// How long an operation waits for another backend's to finish with the repository.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a snapshot or a restore could not do. Its text follows `checkpoints are off: ` or
/// `agent: ` where it is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// There is no `git` on PATH.
    #[error("git was not found on PATH; install git to be able to rewind")]
    NoGit,
    /// A git command failed; what it said.
    #[error("{0}")]
    Git(String),
    /// The shadow repository could not be made.
    #[error("cannot use {path}: {message}")]
    Store {
        /// The shadow directory.
        path: PathBuf,
        /// What the system said.
        message: String,
    },
    /// A conversation id that cannot name a ref.
    #[error("'{0}' cannot name a conversation's checkpoints")]
    Conversation(String),
    /// No checkpoint with this id in this workspace.
    #[error("no checkpoint {0}")]
    Unknown(String),
    /// Files to restore have unsaved changes in the editor: nothing was restored.
    #[error("nothing was restored: {} unsaved changes in Neovim; save or discard them first", names(.0))]
    Unsaved(Vec<String>),
}

/// `a.txt has` / `a.txt and b.txt have`.
fn names(paths: &[String]) -> String {
    match paths {
        [one] => format!("{one} has"),
        [init @ .., last] => format!("{} and {last} have", init.join(", ")),
        [] => "no file has".to_string(),
    }
}

/// What a checkpoint was taken before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A prompt (the rewind points).
    Prompt,
    /// An edit_file call the person allowed.
    Edit,
    /// A run_bash call the person allowed.
    Command,
    /// An external agent's permission answer.
    Permission,
    /// An external agent's fs/write_text_file.
    Write,
    /// A restore (so it can be undone).
    Rewind,
    /// The conversation was cut to before a prompt (its number is the checkpoint's turn): the
    /// prompts from there on leave the rewind points.
    Cut,
}

impl Kind {
    /// The word a commit's subject starts with.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Prompt => "prompt",
            Kind::Edit => "edit",
            Kind::Command => "command",
            Kind::Permission => "permission",
            Kind::Write => "write",
            Kind::Rewind => "rewind",
            Kind::Cut => "cut",
        }
    }

    fn from_word(word: &str) -> Option<Self> {
        [
            Kind::Prompt,
            Kind::Edit,
            Kind::Command,
            Kind::Permission,
            Kind::Write,
            Kind::Rewind,
            Kind::Cut,
        ]
        .into_iter()
        .find(|kind| kind.word() == word)
    }
}

/// One snapshot taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The commit id: what [`Checkpoints::restore`], [`Checkpoints::changes`] and
    /// [`Checkpoints::file_at`] take.
    pub id: String,
    /// Its number in its conversation (`refs/agent/{conversation}/{n}`), from 1.
    pub n: u64,
    /// Files that changed since the snapshot before it in this workspace, relative to the root.
    pub changed: Vec<PathBuf>,
    /// Files not recorded because they are larger than [`MAX_FILE_BYTES`].
    pub skipped: Vec<PathBuf>,
    /// Nested repositories not recorded (`vendor/lib/`).
    pub nested: Vec<PathBuf>,
}

/// A checkpoint of a conversation, as [`Checkpoints::list`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The commit id.
    pub id: String,
    /// Its number in the conversation.
    pub n: u64,
    /// What it was taken before.
    pub kind: Kind,
    /// The prompt's first line, the file, the command (as given; make it visible to show it).
    pub label: String,
    /// When, in seconds since the epoch.
    pub time: u64,
    /// For a prompt: its number in the conversation's history when it was sent (from 1); for a
    /// cut: the prompt the history was cut before. None for the other kinds, and for prompts
    /// checkpointed before the number was recorded.
    pub turn: Option<usize>,
}

/// How a file differs between a checkpoint and now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Created since.
    Added,
    /// Changed since.
    Modified,
    /// Deleted since.
    Deleted,
}

impl Status {
    /// `A`, `M`, `D`.
    pub fn letter(self) -> char {
        match self {
            Status::Added => 'A',
            Status::Modified => 'M',
            Status::Deleted => 'D',
        }
    }
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// A, M or D.
    pub status: Status,
    /// Relative to the root.
    pub path: PathBuf,
    /// Lines added and removed; None for a binary file.
    pub lines: Option<(u64, u64)>,
}

/// The checkpoints of one workspace: cheap to clone, shared by the executor, the conversation
/// decorator and an ACP session. Git commands run one at a time.
#[derive(Clone)]
pub struct Checkpoints {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Checkpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoints")
            .field("dir", &self.inner.git.dir)
            .finish_non_exhaustive()
    }
}

struct Inner {
    git: Git,
    workspace: Workspace,
    /// The conversation whose refs new snapshots go on.
    conversation: Mutex<String>,
    /// Set once the repository is known to work (or why it cannot).
    state: tokio::sync::Mutex<State>,
    /// What to tell the person, once: the first failure.
    notice: Mutex<Notice>,
    /// The last prompt checkpoint this handle took (a turn's `done` row offers its changes).
    last_prompt: Mutex<Option<String>>,
}

#[derive(Default)]
struct State {
    ready: Option<Result<(), CheckpointError>>,
    /// The next number of each conversation seen.
    next: HashMap<String, u64>,
    /// The tree the index was last written as, once known, and the index file as it was then:
    /// another conversation of the workspace (another handle, another backend) may have
    /// written it since, and then the tree is written again.
    tree: Option<(String, Option<IndexStamp>)>,
}

/// What identifies one version of the index file: its inode, size and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IndexStamp {
    ino: u64,
    size: u64,
    modified: Option<std::time::SystemTime>,
}

impl IndexStamp {
    fn of(git_dir: &Path) -> Option<IndexStamp> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(git_dir.join("index")).ok()?;
        Some(IndexStamp {
            ino: meta.ino(),
            size: meta.size(),
            modified: meta.modified().ok(),
        })
    }
}

#[derive(Default)]
struct Notice {
    pending: Option<String>,
    given: bool,
}

impl Checkpoints {
    /// The checkpoints of `workspace`, kept under `{state_dir}/checkpoints/`, on the refs of
    /// `conversation`. Nothing runs until the first snapshot (which learns whether git is there).
    pub fn new(state_dir: &Path, workspace: Workspace, conversation: String) -> Self {
        let dir = state_dir
            .join("checkpoints")
            .join(shadow_name(workspace.root()));
        Checkpoints {
            inner: Arc::new(Inner {
                git: Git {
                    program: PathBuf::from("git"),
                    dir,
                    work_tree: workspace.root().to_path_buf(),
                },
                workspace,
                conversation: Mutex::new(conversation),
                state: tokio::sync::Mutex::new(State::default()),
                notice: Mutex::new(Notice::default()),
                last_prompt: Mutex::new(None),
            }),
        }
    }

    /// Checkpoints that look for a `git` that is not there (tests of a machine without git).
    #[cfg(any(test, feature = "test-support"))]
    pub fn without_git(state_dir: &Path, workspace: Workspace) -> Self {
        let mut checkpoints = Checkpoints::new(state_dir, workspace, "c1".into());
        if let Some(inner) = Arc::get_mut(&mut checkpoints.inner) {
            inner.git.program = PathBuf::from("/nonexistent/git");
        }
        checkpoints
    }

    /// A conversation id for a caller that has none yet: the time and the process.
    pub fn new_conversation_id() -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        format!("c{}-{}", now.as_millis(), std::process::id())
    }

    /// The shadow git directory.
    pub fn dir(&self) -> &Path {
        &self.inner.git.dir
    }

    /// New snapshots go on `conversation`'s refs from now on.
    pub fn set_conversation(&self, conversation: String) {
        *lock(&self.inner.conversation) = conversation;
    }

    /// The conversation new snapshots go on.
    pub fn conversation(&self) -> String {
        lock(&self.inner.conversation).clone()
    }

    /// Takes a snapshot before `kind` (`label`: the prompt, the file, the command) for the
    /// current conversation. A failure is logged and kept for [`Checkpoints::take_notice`] (the
    /// first one only): a checkpoint never fails the prompt or the tool it precedes.
    pub async fn checkpoint(&self, kind: Kind, label: &str) -> Option<Snapshot> {
        self.checkpoint_at(kind, label, None).await
    }

    /// [`Checkpoints::checkpoint`], recording `turn` with it (a prompt's number in the
    /// history, the prompt a cut goes back to).
    pub async fn checkpoint_at(
        &self,
        kind: Kind,
        label: &str,
        turn: Option<usize>,
    ) -> Option<Snapshot> {
        match self.snapshot_at(kind, label, turn).await {
            Ok(snapshot) => {
                if !snapshot.skipped.is_empty() || !snapshot.nested.is_empty() {
                    tracing::info!(
                        skipped = ?snapshot.skipped,
                        nested = ?snapshot.nested,
                        "checkpoint left files out"
                    );
                }
                Some(snapshot)
            }
            Err(err) => {
                tracing::warn!(%err, kind = kind.word(), "no checkpoint");
                let mut notice = lock(&self.inner.notice);
                if !notice.given {
                    notice.given = true;
                    notice.pending = Some(format!("checkpoints are off: {err}"));
                }
                None
            }
        }
    }

    /// Brings the shadow repository up to the workspace without taking a checkpoint: the first
    /// one hashes every file (seconds in a large workspace), so a front end starts this when the
    /// session starts, and the first prompt's checkpoint only has what changed since. A failure
    /// is left for that checkpoint to report.
    pub async fn warm(&self) {
        let warmed = match self.ready().await {
            Ok(mut state) => self.tree_now(&mut state).await.map(|_| ()),
            Err(err) => Err(err),
        };
        if let Err(err) = warmed {
            tracing::debug!(%err, "checkpoints not warmed");
        }
    }

    /// The id of the last prompt checkpoint taken through this handle (or a clone of it), if
    /// any: compared before and after a turn, it says whether the turn took one, and which.
    pub fn last_prompt(&self) -> Option<String> {
        lock(&self.inner.last_prompt).clone()
    }

    /// The first failure's message (`checkpoints are off: ...`), once; None after that and
    /// while nothing failed.
    pub fn take_notice(&self) -> Option<String> {
        lock(&self.inner.notice).pending.take()
    }

    /// Takes a snapshot before `kind` for the current conversation.
    pub async fn snapshot(&self, kind: Kind, label: &str) -> Result<Snapshot, CheckpointError> {
        self.snapshot_at(kind, label, None).await
    }

    /// [`Checkpoints::snapshot`], recording `turn` with it (as a `Turn: N` trailer of the
    /// commit's message, which [`Checkpoints::list`] reads back).
    pub async fn snapshot_at(
        &self,
        kind: Kind,
        label: &str,
        turn: Option<usize>,
    ) -> Result<Snapshot, CheckpointError> {
        let conversation = self.conversation();
        let mut state = self.ready().await?;
        self.commit(&mut state, &conversation, kind, label, turn)
            .await
    }

    /// Makes `from`'s checkpoint `id` (a commit of its shadow repository, another workspace's)
    /// one of this workspace's, to [`Checkpoints::restore`] here: its objects fetched, with its
    /// files' permission bits, under `refs/agent-adopted/{id}`. A fork with code puts a
    /// conversation's files as they were at one of its prompts into a worktree this way. The
    /// commit's full id, to restore (an abbreviated one could name another commit here).
    pub async fn adopt(&self, from: &Checkpoints, id: &str) -> Result<String, CheckpointError> {
        let source = from.commit_of(id).await?;
        let _state = self.ready().await?;
        let dir = from.dir().display().to_string();
        let adopted = format!("+{source}:refs/agent-adopted/{source}");
        self.inner
            .git
            .run(
                &["fetch", "--no-tags", "--quiet", "--", &dir, &adopted],
                b"",
            )
            .await?;
        // Its permission bits, where it has them (a checkpoint taken without them has none).
        let modes = format!("+refs/agent-modes/{source}:refs/agent-modes/{source}");
        let _ = self
            .inner
            .git
            .run(&["fetch", "--no-tags", "--quiet", "--", &dir, &modes], b"")
            .await;
        Ok(source)
    }

    /// Forgets `conversation`'s checkpoints (its refs, `refs/agent/{conversation}/*`), when its
    /// saved file is deleted: the snapshots stay on the shared line of history, reachable from
    /// the other conversations' checkpoints that came after them. How many refs went.
    pub async fn forget(&self, conversation: &str) -> Result<usize, CheckpointError> {
        let points = self.list(conversation).await?;
        if points.is_empty() {
            return Ok(0);
        }
        let _state = self.ready().await?;
        let deletes: String = points
            .iter()
            .map(|point| format!("delete refs/agent/{conversation}/{}\n", point.n))
            .collect();
        self.inner
            .git
            .run(&["update-ref", "--stdin"], deletes.as_bytes())
            .await?;
        Ok(points.len())
    }

    /// The checkpoints of `conversation`, oldest first.
    pub async fn list(&self, conversation: &str) -> Result<Vec<Checkpoint>, CheckpointError> {
        check_conversation(conversation)?;
        let _state = self.ready().await?;
        let prefix = format!("refs/agent/{conversation}/");
        let out = self
            .inner
            .git
            .run(
                &[
                    "for-each-ref",
                    "--format=%(refname)%00%(objectname)%00%(creatordate:unix)%00%(contents:subject)%00%(trailers:key=Turn,valueonly,separator=%x2C)",
                    &prefix,
                ],
                b"",
            )
            .await?;
        let mut found: Vec<Checkpoint> = String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|line| {
                let mut fields = line.split('\0');
                let n = fields.next()?.strip_prefix(&prefix)?.parse().ok()?;
                let id = fields.next()?.to_string();
                let time = fields.next()?.parse().unwrap_or(0);
                let (word, label) = fields.next()?.split_once(": ").unwrap_or(("", ""));
                let turn = fields.next().and_then(|turn| turn.trim().parse().ok());
                Some(Checkpoint {
                    id,
                    n,
                    kind: Kind::from_word(word)?,
                    label: label.to_string(),
                    time,
                    turn,
                })
            })
            .collect();
        found.sort_by_key(|checkpoint| checkpoint.n);
        Ok(found)
    }

    /// What changed between checkpoint `since` and the workspace now: each file's status and
    /// line counts, sorted by path.
    pub async fn changes(&self, since: &str) -> Result<Vec<Change>, CheckpointError> {
        let mut state = self.ready().await?;
        let from = self.tree_of(since).await?;
        let now = self.tree_now(&mut state).await?;
        self.diff(&from, &now.tree).await
    }

    /// What changed from checkpoint `from` to checkpoint `to` (what one prompt did: from its
    /// checkpoint to the next prompt's).
    pub async fn changes_between(
        &self,
        from: &str,
        to: &str,
    ) -> Result<Vec<Change>, CheckpointError> {
        let _state = self.ready().await?;
        match self.trees_of(&[from, to]).await?.as_slice() {
            [from, to] => self.diff(from, to).await,
            _ => Err(CheckpointError::Unknown(format!("{from} {to}"))),
        }
    }

    /// How many files changed from each checkpoint of `ids` to the next, and from the last to
    /// now: the counts a rewind list shows, with one git process for all the trees and one diff
    /// a prompt.
    async fn files_changed(&self, ids: &[&str]) -> Result<Vec<usize>, CheckpointError> {
        let Some((last, _)) = ids.split_last() else {
            return Ok(Vec::new());
        };
        let mut counts = {
            let _state = self.ready().await?;
            let trees = self.trees_of(ids).await?;
            let mut counts = Vec::with_capacity(ids.len());
            for pair in trees.windows(2) {
                counts.push(self.diff(&pair[0], &pair[1]).await?.len());
            }
            counts
        };
        counts.push(self.changes(last).await?.len());
        Ok(counts)
    }

    /// The changes from tree `from` to tree `to`.
    async fn diff(&self, from: &str, to: &str) -> Result<Vec<Change>, CheckpointError> {
        let out = self
            .inner
            .git
            .run(
                &[
                    // Line counts for every recorded file (all are under 10 MB), not only for
                    // those under the streaming threshold.
                    "-c",
                    "core.bigFileThreshold=16m",
                    "diff-tree",
                    "-r",
                    "-z",
                    "--no-renames",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--raw",
                    "--numstat",
                    from,
                    to,
                ],
                b"",
            )
            .await?;
        Ok(parse_changes(&out))
    }

    /// The bytes `path` (relative to the root) had at checkpoint `id`; None when it had no such
    /// file.
    pub async fn file_at(&self, id: &str, path: &Path) -> Result<Option<Vec<u8>>, CheckpointError> {
        let _state = self.ready().await?;
        let commit = self.commit_of(id).await?;
        let entries = self.entries(&commit, &[path]).await?;
        // The entry of that very path: `ls-tree` given a directory lists what is in it.
        match entries.into_iter().find(|(_, _, at)| at == path) {
            Some((mode, blob, _)) if mode != "160000" && mode != "040000" => Ok(Some(
                self.inner
                    .git
                    .run(&["cat-file", "blob", &blob], b"")
                    .await?,
            )),
            _ => Ok(None),
        }
    }

    /// The files conversation `other`'s own changes touched after checkpoint `since` (of any
    /// conversation of this workspace): each change it was allowed (an edit, a command, an
    /// external agent's write or permission) counted from the snapshot taken just before it to
    /// the next snapshot of the workspace, whoever took it, or to the workspace now for the
    /// latest. What restoring `since` would undo of `other`'s work. Every snapshot of every
    /// conversation is on one line of history (HEAD's), so the next one is found there.
    pub async fn changed_by(
        &self,
        other: &str,
        since: &str,
    ) -> Result<std::collections::BTreeSet<PathBuf>, CheckpointError> {
        let theirs = self.list(other).await?;
        let mut state = self.ready().await?;
        let since = self.commit_of(since).await?;
        let history = self
            .inner
            .git
            .run(&["rev-list", "--reverse", "--first-parent", "HEAD"], b"")
            .await?;
        let history = String::from_utf8_lossy(&history);
        let order: Vec<&str> = history.lines().collect();
        let place: HashMap<&str, usize> = order.iter().enumerate().map(|(i, c)| (*c, i)).collect();
        let mut files = std::collections::BTreeSet::new();
        let Some(&from) = place.get(since.as_str()) else {
            return Ok(files);
        };
        // Each change of theirs after `since`: the snapshot before it, and the next one (None:
        // the workspace now).
        let spans: Vec<(&str, Option<&str>)> = theirs
            .iter()
            .filter(|checkpoint| {
                matches!(
                    checkpoint.kind,
                    Kind::Edit | Kind::Command | Kind::Write | Kind::Permission
                )
            })
            .filter_map(|before| {
                let i = *place.get(before.id.as_str()).filter(|i| **i > from)?;
                Some((before.id.as_str(), order.get(i + 1).copied()))
            })
            .collect();
        if spans.is_empty() {
            return Ok(files);
        }
        // Every tree in one git process.
        let ids: Vec<&str> = spans
            .iter()
            .flat_map(|(before, after)| std::iter::once(*before).chain(*after))
            .collect();
        let trees = self.trees_of(&ids).await?;
        let mut trees = trees.iter();
        for (_, after) in &spans {
            let (Some(before), after) = (trees.next(), after.and_then(|_| trees.next())) else {
                break;
            };
            // Only the latest change has no snapshot after it: the workspace now.
            let after = match after {
                Some(tree) => tree.clone(),
                None => self.tree_now(&mut state).await?.tree,
            };
            for change in self.diff(before, &after).await? {
                files.insert(change.path);
            }
        }
        Ok(files)
    }

    /// Puts every file back as it was at checkpoint `id`: changed files restored, files created
    /// since removed, deleted ones brought back. A snapshot of the present is taken first (the
    /// returned [`Restored::undo`]), so the restore can itself be undone. Refuses, restoring
    /// nothing, when a file to restore has unsaved changes in `editor`; tells `editor` of each
    /// file written.
    pub async fn restore(
        &self,
        id: &str,
        editor: &dyn Editor,
    ) -> Result<Restored, CheckpointError> {
        self.restore_sparing(id, editor, &std::collections::BTreeSet::new())
            .await
    }

    /// [`Checkpoints::restore`], leaving the files of `spare` as they are (another
    /// conversation's later changes the person chose to keep): listed in
    /// [`Restored::spared`] when the restore would have changed them.
    pub async fn restore_sparing(
        &self,
        id: &str,
        editor: &dyn Editor,
        spare: &std::collections::BTreeSet<PathBuf>,
    ) -> Result<Restored, CheckpointError> {
        self.restore_scoped(id, editor, restore::Scope::Sparing(spare))
            .await
    }

    /// Puts back only the files of `only` as checkpoint `id` had them (an external agent's
    /// writes made outside agent.nvim's checks, undone alone): the rest of the workspace stays
    /// as it is. Otherwise as [`Checkpoints::restore`]: a snapshot first, refused while one of
    /// them has unsaved changes in `editor`.
    pub async fn restore_only(
        &self,
        id: &str,
        editor: &dyn Editor,
        only: &std::collections::BTreeSet<PathBuf>,
    ) -> Result<Restored, CheckpointError> {
        self.restore_scoped(id, editor, restore::Scope::Only(only))
            .await
    }

    async fn restore_scoped(
        &self,
        id: &str,
        editor: &dyn Editor,
        scope: restore::Scope<'_>,
    ) -> Result<Restored, CheckpointError> {
        let conversation = self.conversation();
        let mut state = self.ready().await?;
        let target = self.commit_of(id).await?;
        let undo = self
            .commit(
                &mut state,
                &conversation,
                Kind::Rewind,
                &short(&target),
                None,
            )
            .await?;
        let restored = restore::restore(self, &undo, &target, editor, scope).await;
        if matches!(restored, Err(CheckpointError::Unsaved(_))) {
            // Nothing was restored, so the snapshot is no undo: were it kept, saving one of the
            // buffers would make it look like one, undoing the person's own change.
            let name = format!("refs/agent/{conversation}/{}", undo.n);
            // Only while it is still this snapshot (another backend may share the repository).
            let delete = ["update-ref", "-d", name.as_str(), undo.id.as_str()];
            if let Err(err) = self.inner.git.run(&delete, b"").await {
                tracing::warn!(%err, "the snapshot of a refused restore was kept");
            }
            // Its permission bits too, where it had any (a missing ref is no error here).
            let modes = format!("refs/agent-modes/{}", undo.id);
            let _ = self.inner.git.run(&["update-ref", "-d", &modes], b"").await;
        }
        restored
    }

    /// Makes the shadow repository on first use; the state, held for one operation.
    /// Another backend in the same workspace (a second Neovim) shares the repository: the lock
    /// file keeps their git commands apart, and while it is held no git of either runs, so an
    /// `index.lock` left then is one a killed git left behind (a timeout), and is removed.
    async fn ready(&self) -> Result<Held<'_>, CheckpointError> {
        let mut state = self.inner.state.lock().await;
        if state.ready.is_none() {
            // Git and the directory first (the lock file lives in it)...
            if let Err(err) = self.prepare().await {
                state.ready = Some(Err(err));
            }
        }
        if let Some(Err(err)) = &state.ready {
            return Err(err.clone());
        }
        let dir = &self.inner.git.dir;
        let store = |err: std::io::Error| CheckpointError::Store {
            path: dir.clone(),
            message: err.to_string(),
        };
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("agent.lock"))
            .map_err(store)?;
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        loop {
            match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(errno) => return Err(store(errno.into())),
            }
        }
        // ...then the repository, under the lock: two conversations (or two backends) starting
        // on a fresh workspace at once must not both run `git init`.
        if state.ready.is_none() {
            state.ready = Some(self.init().await);
        }
        if let Some(Err(err)) = &state.ready {
            return Err(err.clone());
        }
        match std::fs::remove_file(dir.join("index.lock")) {
            Ok(()) => tracing::warn!("removed a stale index.lock from the checkpoints"),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(store(err)),
        }
        Ok(Held { state, _lock: lock })
    }

    /// Checks for git and makes the shadow directory (mode 0700: it will hold copies of the
    /// user's files), where the lock file goes.
    async fn prepare(&self) -> Result<(), CheckpointError> {
        git::version(&self.inner.git.program).await?;
        let git = &self.inner.git;
        let store = |err: std::io::Error| CheckpointError::Store {
            path: git.dir.clone(),
            message: err.to_string(),
        };
        if let Some(parent) = git.dir.parent() {
            std::fs::create_dir_all(parent).map_err(store)?;
        }
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(&git.dir) {
            Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => Err(store(err)),
            _ => Ok(()),
        }
    }

    /// Makes the repository in the shadow directory when it has none (under the lock), and
    /// (again on every start) its settings and attributes.
    async fn init(&self) -> Result<(), CheckpointError> {
        let git = &self.inner.git;
        let store = |err: std::io::Error| CheckpointError::Store {
            path: git.dir.clone(),
            message: err.to_string(),
        };
        if !git.dir.join("HEAD").exists() {
            git.run(&["init", "--quiet", "--template="], b"").await?;
            git.run(&["symbolic-ref", "HEAD", "refs/heads/checkpoints"], b"")
                .await?;
        }
        std::fs::create_dir_all(git.dir.join("info")).map_err(store)?;
        std::fs::write(git.dir.join("info/attributes"), git::ATTRIBUTES).map_err(store)?;
        Ok(())
    }

    /// Records the workspace as a commit on the conversation's next ref.
    async fn commit(
        &self,
        state: &mut State,
        conversation: &str,
        kind: Kind,
        label: &str,
        turn: Option<usize>,
    ) -> Result<Snapshot, CheckpointError> {
        check_conversation(conversation)?;
        let git = &self.inner.git;
        let n = match state.next.get(conversation) {
            Some(n) => *n,
            None => {
                let prefix = format!("refs/agent/{conversation}/");
                let refs = git
                    .line(&["for-each-ref", "--format=%(refname)", &prefix])
                    .await?;
                refs.lines()
                    .filter_map(|name| name.strip_prefix(&prefix)?.parse::<u64>().ok())
                    .max()
                    .unwrap_or(0)
                    + 1
            }
        };
        let now = self.tree_now(state).await?;
        // A commit per checkpoint, even when the tree is the last one's: its subject says what
        // this checkpoint was taken before (a commit of an unchanged tree costs one object).
        let mut args = vec![
            "commit-tree".to_string(),
            now.tree.clone(),
            "-m".into(),
            subject(kind, label),
        ];
        if let Some(turn) = turn {
            args.extend(["-m".to_string(), format!("Turn: {turn}")]);
        }
        // HEAD read again each time (under the lock): another conversation of the workspace,
        // in this backend or another, may have committed since, and every snapshot stays on
        // one line of history.
        if let Ok(parent) = git
            .line(&["rev-parse", "--verify", "--quiet", "HEAD"])
            .await
        {
            args.extend(["-p".to_string(), parent]);
        }
        let id = git.line(&args).await?;
        let mut refs = format!("update HEAD {id}\nupdate refs/agent/{conversation}/{n} {id}\n");
        if let Some(blob) = self.modes_now().await {
            refs.push_str(&format!("update refs/agent-modes/{id} {blob}\n"));
        }
        git.run(&["update-ref", "--stdin"], refs.as_bytes()).await?;
        state.next.insert(conversation.to_string(), n + 1);
        if kind == Kind::Prompt {
            *lock(&self.inner.last_prompt) = Some(id.clone());
        }
        Ok(Snapshot {
            id,
            n,
            changed: now.changed,
            skipped: now.skipped,
            nested: now.nested,
        })
    }

    /// The permission bits of what the shadow index records that a restore would not make by
    /// itself ([`modes::Modes`]), stored as a blob: its id, or None when there are none (or they
    /// could not be read, which is logged: a restore then makes the defaults, as before).
    async fn modes_now(&self) -> Option<String> {
        let git = &self.inner.git;
        let listed = match git.run(&["ls-files", "-z"], b"").await {
            Ok(listed) => listed,
            Err(err) => {
                tracing::warn!(%err, "the snapshot's permission bits were not recorded");
                return None;
            }
        };
        let files: Vec<PathBuf> = listed
            .split(|byte| *byte == 0)
            .filter(|name| !name.is_empty())
            .map(|name| PathBuf::from(std::ffi::OsStr::from_bytes(name)))
            .collect();
        let root = self.inner.workspace.root().to_path_buf();
        let scanned =
            tokio::task::spawn_blocking(move || modes::Modes::scan(&root, &files, modes::umask()))
                .await;
        let found = match scanned {
            Ok(found) if !found.is_empty() => found,
            Ok(_) => return None,
            Err(err) => {
                tracing::warn!(%err, "the snapshot's permission bits were not recorded");
                return None;
            }
        };
        match git
            .run(&["hash-object", "-w", "--stdin"], &found.encode())
            .await
        {
            Ok(out) => Some(String::from_utf8_lossy(&out).trim().to_string()),
            Err(err) => {
                tracing::warn!(%err, "the snapshot's permission bits were not recorded");
                None
            }
        }
    }

    /// The permission bits recorded with the commit `target` (none for a snapshot taken before
    /// they were, or of a workspace where nothing differs from the defaults).
    async fn modes_of(&self, target: &str) -> modes::Modes {
        let name = format!("refs/agent-modes/{target}");
        let git = &self.inner.git;
        match git.line(&["rev-parse", "--verify", "--quiet", &name]).await {
            Ok(blob) if !blob.is_empty() => {
                match git.run(&["cat-file", "blob", &blob], b"").await {
                    Ok(bytes) => modes::Modes::decode(&bytes),
                    Err(err) => {
                        tracing::warn!(%err, "a checkpoint's permission bits could not be read");
                        modes::Modes::default()
                    }
                }
            }
            Ok(_) | Err(_) => modes::Modes::default(),
        }
    }

    /// Brings the shadow index up to the workspace and writes its tree, trying again when git
    /// gives up on a file that changed while it was read (a command still writing it).
    async fn tree_now(&self, state: &mut State) -> Result<Now, CheckpointError> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.tree_once(state).await {
                Err(CheckpointError::Git(message)) if tries < TRIES => {
                    tracing::debug!(%message, "a snapshot is tried again");
                    // Longer each time (10 ms, 20 ms, ... up to 200 ms): a file rewritten without
                    // pause is caught between two writes sooner or later.
                    let wait = (10u64 << (tries - 1)).min(200);
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                }
                other => return other,
            }
        }
    }

    /// One attempt of [`Checkpoints::tree_now`]. Only what `git status` reports as changed is
    /// looked at, so an unchanged workspace costs one status.
    async fn tree_once(&self, state: &mut State) -> Result<Now, CheckpointError> {
        let git = &self.inner.git;
        let status = git
            .run(
                &[
                    "status",
                    "--porcelain=v1",
                    "-z",
                    "--untracked-files=all",
                    "--no-renames",
                    "--ignore-submodules=all",
                ],
                b"",
            )
            .await?;
        // Each reported path looked at on the disk, off the runtime's threads: the first
        // snapshot of a big workspace reports every file.
        let root = self.inner.workspace.root().to_path_buf();
        let (mut now, dropped, present) =
            tokio::task::spawn_blocking(move || sort_status(&root, &status))
                .await
                .map_err(|err| {
                    CheckpointError::Git(format!("looking at the changed files failed: {err}"))
                })?;
        if !present.is_empty() {
            git.run(
                &[
                    "update-index",
                    "--add",
                    "--remove",
                    "--replace",
                    "-z",
                    "--stdin",
                ],
                &git::nul_separated(present.iter().map(PathBuf::as_path)),
            )
            .await?;
        }
        if !dropped.is_empty() {
            git.run(
                &["update-index", "--force-remove", "-z", "--stdin"],
                &git::nul_separated(dropped.iter().map(PathBuf::as_path)),
            )
            .await?;
        }
        let stamp = IndexStamp::of(&git.dir);
        now.tree = match &state.tree {
            // Nothing changed since this handle last wrote the index, and nobody else wrote it
            // since: the same tree.
            Some((tree, written))
                if present.is_empty()
                    && dropped.is_empty()
                    && stamp.is_some()
                    && *written == stamp =>
            {
                tree.clone()
            }
            _ => git.line(&["write-tree"]).await?,
        };
        state.tree = Some((now.tree.clone(), IndexStamp::of(&git.dir)));
        Ok(now)
    }

    /// The commit `id` names, verified to be one.
    async fn commit_of(&self, id: &str) -> Result<String, CheckpointError> {
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CheckpointError::Unknown(id.to_string()));
        }
        self.inner
            .git
            .line(&[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{id}^{{commit}}"),
            ])
            .await
            .map_err(|_| CheckpointError::Unknown(id.to_string()))
    }

    /// The tree of checkpoint `id`.
    async fn tree_of(&self, id: &str) -> Result<String, CheckpointError> {
        let mut trees = self.trees_of(&[id]).await?;
        trees
            .pop()
            .ok_or_else(|| CheckpointError::Unknown(id.to_string()))
    }

    /// The trees of checkpoints `ids`, in their order, found by one git process (a rewind list
    /// wants one for every prompt); when one is not a checkpoint, the error names it.
    async fn trees_of(&self, ids: &[&str]) -> Result<Vec<String>, CheckpointError> {
        if let Some(bad) = ids
            .iter()
            .find(|id| id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(CheckpointError::Unknown(bad.to_string()));
        }
        let mut args = vec!["rev-parse".to_string()];
        args.extend(ids.iter().map(|id| format!("{id}^{{commit}}^{{tree}}")));
        let found = self.inner.git.line(&args).await;
        let trees: Vec<String> = found
            .as_deref()
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        if found.is_ok() && trees.len() == ids.len() {
            return Ok(trees);
        }
        // Which one: the first that is not a commit.
        for id in ids {
            self.commit_of(id).await?;
        }
        Err(CheckpointError::Unknown(ids.join(" ")))
    }

    /// `(mode, blob, path)` of each of `paths` in `commit` that it has.
    async fn entries(
        &self,
        commit: &str,
        paths: &[&Path],
    ) -> Result<Vec<(String, String, PathBuf)>, CheckpointError> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "ls-tree".into(),
            "-z".into(),
            "--full-tree".into(),
            commit.into(),
            "--".into(),
        ];
        args.extend(paths.iter().map(|path| path.as_os_str().to_os_string()));
        let out = self.inner.git.run(&args, b"").await?;
        Ok(out
            .split(|byte| *byte == 0)
            .filter_map(|entry| {
                let tab = entry.iter().position(|byte| *byte == b'\t')?;
                let (meta, path) = (&entry[..tab], &entry[tab + 1..]);
                let meta = String::from_utf8_lossy(meta);
                let mut fields = meta.split(' ');
                let mode = fields.next()?.to_string();
                let _kind = fields.next()?;
                let blob = fields.next()?.to_string();
                Some((mode, blob, PathBuf::from(std::ffi::OsStr::from_bytes(path))))
            })
            .collect())
    }
}

/// The state, held for one operation, and the repository's lock file, locked.
struct Held<'a> {
    state: tokio::sync::MutexGuard<'a, State>,
    _lock: std::fs::File,
}

impl std::ops::Deref for Held<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

/// The index brought up to the workspace.
#[derive(Debug, Default)]
struct Now {
    tree: String,
    changed: Vec<PathBuf>,
    skipped: Vec<PathBuf>,
    nested: Vec<PathBuf>,
}

/// `git status --porcelain=v1 -z` output sorted by what is on the disk under `root`: the
/// snapshot so far (changed, skipped and nested paths), the paths to drop from the index, and
/// the ones to add or update in it.
fn sort_status(root: &Path, status: &[u8]) -> (Now, Vec<PathBuf>, Vec<PathBuf>) {
    let mut now = Now::default();
    // Paths to drop from the index: gone, no longer a file or a link (a FIFO, a path that
    // now passes through a link), or grown past the limit.
    let mut dropped = Vec::new();
    let mut present = Vec::new();
    for entry in status.split(|byte| *byte == 0).filter(|e| e.len() > 3) {
        let (code, path) = entry.split_at(3);
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(path));
        if path.as_os_str().as_bytes().ends_with(b"/") {
            now.nested.push(path);
            continue;
        }
        let recordable = on_disk(root, &path)
            .filter(|meta| meta.file_type().is_file() || meta.file_type().is_symlink());
        match recordable {
            Some(meta) if meta.file_type().is_file() && meta.len() > MAX_FILE_BYTES => {
                if !code.starts_with(b"??") {
                    dropped.push(path.clone());
                }
                now.skipped.push(path);
            }
            Some(_) => {
                present.push(path.clone());
                now.changed.push(path);
            }
            None => {
                dropped.push(path.clone());
                now.changed.push(path);
            }
        }
    }
    (now, dropped, present)
}

/// What is at `rel` beneath `root`, not following a link anywhere on the way (a path through
/// a link is not there, for git); None when nothing is.
fn on_disk(root: &Path, rel: &Path) -> Option<std::fs::Metadata> {
    let mut at = root.to_path_buf();
    let mut parts = rel.components().peekable();
    while let Some(part) = parts.next() {
        at.push(part);
        let meta = std::fs::symlink_metadata(&at).ok()?;
        if parts.peek().is_none() {
            return Some(meta);
        }
        if !meta.file_type().is_dir() {
            return None;
        }
    }
    None
}

/// `diff-tree --raw --numstat -z` output as changes, sorted by path.
fn parse_changes(out: &[u8]) -> Vec<Change> {
    let mut statuses: Vec<(Status, PathBuf)> = Vec::new();
    let mut lines: HashMap<PathBuf, Option<(u64, u64)>> = HashMap::new();
    let mut fields = out.split(|byte| *byte == 0);
    while let Some(field) = fields.next() {
        if field.first() == Some(&b':') {
            let Some(path) = fields.next() else { break };
            let path = PathBuf::from(std::ffi::OsStr::from_bytes(path));
            let status = match field.last() {
                Some(b'A') => Status::Added,
                Some(b'D') => Status::Deleted,
                _ => Status::Modified,
            };
            statuses.push((status, path));
        } else if !field.is_empty() {
            let mut parts = field.splitn(3, |byte| *byte == b'\t');
            let (Some(added), Some(removed), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let count = |text: &[u8]| std::str::from_utf8(text).ok()?.parse::<u64>().ok();
            let counts = count(added).zip(count(removed));
            lines.insert(PathBuf::from(std::ffi::OsStr::from_bytes(path)), counts);
        }
    }
    let mut changes: Vec<Change> = statuses
        .into_iter()
        .map(|(status, path)| Change {
            status,
            lines: lines.get(&path).copied().flatten(),
            path,
        })
        .collect();
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    changes
}

/// A commit's subject: the kind, then the label's first line (at most 200 characters).
fn subject(kind: Kind, label: &str) -> String {
    // Redacted: the shadow repository keeps it on disk, like a saved conversation.
    let label = crate::secrets::redact(label);
    let first: String = label
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect();
    format!("{}: {first}", kind.word())
}

/// The first 12 characters of a commit id.
fn short(id: &str) -> String {
    id.chars().take(12).collect()
}

/// The shadow directory's name for `root`: its last component (made safe) and a hash of the
/// whole path, so two `src` directories never share one and the name still says whose it is.
/// FNV-1a, a fixed function (std's hasher may change between releases, which would orphan
/// every repository).
fn shadow_name(root: &Path) -> String {
    let mut hash = fnv::FnvHasher::default();
    hash.write(root.as_os_str().as_bytes());
    let base: String = root
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("{base}-{:016x}", hash.finish())
}

/// A conversation id is one ref component of letters, digits, `-`, `_` and `.`, not starting
/// with `.` or `-` and not ending in `.lock`.
fn check_conversation(id: &str) -> Result<(), CheckpointError> {
    let fine = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with(['.', '-'])
        && !id.ends_with(".lock")
        && !id.contains("..")
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if fine {
        Ok(())
    } else {
        Err(CheckpointError::Conversation(id.to_string()))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
