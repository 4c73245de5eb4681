//! What an agent changes in the workspace by itself, outside agent.nvim's checks.
//!
//! An agent may write files with its own tools instead of asking us through
//! `fs/write_text_file`: such a write never met the path check or the picker. So each turn is
//! compared with the checkpoint taken before it (the prompt checkpoint the conversation's
//! decorator takes), when one of the agent's tool calls completes and when the turn ends; every
//! file changed, created or deleted since, other than one whose content is exactly what we
//! wrote for the agent, is reported once per turn ([`AgentUpdate::OutsideChanges`]). The front
//! end lists them with their diff and an undo that restores the checkpoint's versions of those
//! files only.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use agent_nvim_core::checkpoint::{Checkpoints, Status};
use agent_nvim_vocab::conversation::{AgentUpdate, OutsideFile};

/// A file read back to be compared with what we wrote is read whole up to this size; a larger
/// one counts as changed.
const MAX_COMPARED_BYTES: u64 = 16 * 1024 * 1024;

/// The running turn's watch.
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// The checkpoint the turn is compared with; None between turns and without checkpoints.
    baseline: Option<String>,
    /// The baseline of the turn before: a turn whose own checkpoint could not be taken finds
    /// the same id again, and is not compared (that would list an older turn's changes).
    previous: Option<String>,
    /// Files already listed this turn.
    listed: BTreeSet<PathBuf>,
    /// What we wrote through `fs/write_text_file` this turn: each file (relative to the root)
    /// and a hash of the bytes written.
    ours: HashMap<PathBuf, u64>,
}

impl Watch {
    /// A turn begins: compared from here with `checkpoint` (the prompt checkpoint just taken).
    pub(super) fn begin(&mut self, checkpoint: Option<String>) {
        self.listed.clear();
        self.ours.clear();
        self.baseline = match checkpoint {
            Some(id) if self.previous.as_ref() != Some(&id) => {
                self.previous = Some(id.clone());
                Some(id)
            }
            Some(_) => {
                tracing::info!(
                    "no new prompt checkpoint: this turn's own writes are not looked for"
                );
                None
            }
            None => None,
        };
    }

    /// The turn is over: nothing more is looked for until the next.
    pub(super) fn end(&mut self) {
        self.baseline = None;
    }

    /// We wrote bytes of `digest` ([`digest`]) to `relative` for the agent, through the path
    /// check and the picker.
    pub(super) fn wrote(&mut self, relative: PathBuf, digest: u64) {
        self.ours.insert(relative, digest);
    }

    /// Compares the workspace with the turn's checkpoint: the files changed since that were
    /// not listed yet this turn and are not exactly as we wrote them, as an update naming
    /// `agent`; None when there are none (or nothing to compare with).
    pub(super) async fn look(
        &mut self,
        checkpoints: &Checkpoints,
        root: &Path,
        agent: &str,
        sandboxed: bool,
    ) -> Option<AgentUpdate> {
        let baseline = self.baseline.clone()?;
        let changes = match checkpoints.changes(&baseline).await {
            Ok(changes) => changes,
            Err(err) => {
                tracing::warn!(%err, "could not compare the workspace with the turn's checkpoint");
                return None;
            }
        };
        let mut files = Vec::new();
        for change in changes {
            if self.listed.contains(&change.path) {
                continue;
            }
            if let Some(hash) = self.ours.get(&change.path) {
                if change.status != Status::Deleted {
                    // Read off the runtime's threads: up to MAX_COMPARED_BYTES.
                    let at = root.join(&change.path);
                    let now = tokio::task::spawn_blocking(move || now_digest(&at))
                        .await
                        .ok()
                        .flatten();
                    if now == Some(*hash) {
                        continue;
                    }
                }
            }
            self.listed.insert(change.path.clone());
            let path = change.path.to_string_lossy().into_owned();
            files.push(OutsideFile {
                shown: path.clone(),
                path,
                status: change.status.letter().to_string(),
            });
        }
        if files.is_empty() {
            return None;
        }
        Some(AgentUpdate::OutsideChanges {
            agent: agent.to_string(),
            checkpoint: baseline,
            files,
            sandboxed,
        })
    }
}

/// Whether `update` (a `session/update`'s) says one of the agent's tool calls completed or
/// failed: what it did may be on disk now.
pub(super) fn completes_a_call(update: &serde_json::Value) -> bool {
    matches!(
        update["sessionUpdate"].as_str(),
        Some("tool_call" | "tool_call_update")
    ) && matches!(update["status"].as_str(), Some("completed" | "failed"))
}

/// What [`Watch::wrote`] takes for `bytes`.
pub(super) fn digest(bytes: &[u8]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

/// The digest of the file at `path` now, not following a link; None for anything but a
/// regular file of at most [`MAX_COMPARED_BYTES`]. Opened without waiting (a FIFO put there
/// meanwhile is seen for what it is, never read), and read no further than the limit.
fn now_digest(path: &Path) -> Option<u64> {
    use std::io::Read;
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::NONBLOCK
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_COMPARED_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_COMPARED_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    (bytes.len() as u64 <= MAX_COMPARED_BYTES).then(|| digest(&bytes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use agent_nvim_core::checkpoint::Kind;
    use agent_nvim_core::workspace::Workspace;

    #[test]
    fn only_a_regular_file_is_read_for_its_digest_never_a_fifo_or_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.py");
        std::fs::write(&file, "x = 1\n").unwrap();
        assert_eq!(now_digest(&file), Some(digest(b"x = 1\n")));
        let link = dir.path().join("link.py");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(now_digest(&link), None);
        // A FIFO nobody writes to: answered at once, not waited on.
        let fifo = dir.path().join("fifo.py");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        )
        .unwrap();
        assert_eq!(now_digest(&fifo), None);
        assert_eq!(now_digest(&dir.path().join("gone.py")), None);
    }

    #[test]
    fn a_file_swapped_for_a_fifo_while_it_is_looked_at_never_holds_the_look() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.py");
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let swapper = {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let _ = std::fs::remove_file(&path);
                    let _ = std::fs::write(&path, "y = 2\n");
                    let _ = std::fs::remove_file(&path);
                    let _ = rustix::fs::mkfifoat(
                        rustix::fs::CWD,
                        &path,
                        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
                    );
                }
            })
        };
        // Each look answers (a file's digest, or nothing): none waits for a FIFO's writer.
        for _ in 0..3000 {
            let seen = now_digest(&path);
            // (Empty when caught between the file's creation and its write.)
            let file = [None, Some(digest(b"")), Some(digest(b"y = 2\n"))];
            assert!(file.contains(&seen), "{seen:?}");
        }
        stop.store(true, Ordering::SeqCst);
        swapper.join().unwrap();
    }

    fn fixture() -> (tempfile::TempDir, tempfile::TempDir, Checkpoints) {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let checkpoints = Checkpoints::new(
            state.path(),
            Workspace::new(ws.path()).unwrap(),
            "c1".into(),
        );
        (ws, state, checkpoints)
    }

    fn paths(update: &AgentUpdate) -> Vec<(String, String)> {
        match update {
            AgentUpdate::OutsideChanges { files, .. } => files
                .iter()
                .map(|f| (f.status.clone(), f.path.clone()))
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_turn_lists_what_changed_by_itself_once_and_never_what_we_wrote_as_written() {
        let (ws, _state, checkpoints) = fixture();
        let root = ws.path().canonicalize().unwrap();
        std::fs::write(root.join("a.py"), "a 0\n").unwrap();
        std::fs::write(root.join("ours.py"), "ours 0\n").unwrap();
        std::fs::write(root.join("later.py"), "later 0\n").unwrap();
        let point = checkpoints.snapshot(Kind::Prompt, "go").await.unwrap();
        let mut watch = Watch::default();
        watch.begin(Some(point.id.clone()));
        // The agent writes a.py itself; we write ours.py for it.
        std::fs::write(root.join("a.py"), "a 1\n").unwrap();
        std::fs::write(root.join("ours.py"), "ours 1\n").unwrap();
        watch.wrote(PathBuf::from("ours.py"), digest(b"ours 1\n"));
        let update = watch
            .look(&checkpoints, &root, "claude", false)
            .await
            .unwrap();
        assert_eq!(paths(&update), [("M".to_string(), "a.py".to_string())]);
        // Listed once a turn: a later look lists only what is new, and the file we wrote,
        // changed again by the agent, is listed now.
        std::fs::write(root.join("ours.py"), "ours 2\n").unwrap();
        std::fs::remove_file(root.join("later.py")).unwrap();
        std::fs::write(root.join("b.py"), "b\n").unwrap();
        let update = watch
            .look(&checkpoints, &root, "claude", true)
            .await
            .unwrap();
        assert_eq!(
            paths(&update),
            [
                ("A".to_string(), "b.py".to_string()),
                ("D".to_string(), "later.py".to_string()),
                ("M".to_string(), "ours.py".to_string()),
            ]
        );
        assert!(
            matches!(update, AgentUpdate::OutsideChanges { sandboxed: true, ref checkpoint, .. } if *checkpoint == point.id)
        );
        assert_eq!(watch.look(&checkpoints, &root, "claude", false).await, None);
        // After the turn, nothing is looked for.
        watch.end();
        std::fs::write(root.join("c.py"), "c\n").unwrap();
        assert_eq!(watch.look(&checkpoints, &root, "claude", false).await, None);
        // A turn without a checkpoint of its own (the same id as before) is not compared.
        watch.begin(Some(point.id.clone()));
        assert_eq!(watch.look(&checkpoints, &root, "claude", false).await, None);
    }
}
