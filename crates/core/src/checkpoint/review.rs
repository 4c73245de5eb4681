//! Review (`:Agent diff`): what changed since a point of a conversation (its last prompt, its
//! first checkpoint, or a given prompt's checkpoint), and a file's text at a checkpoint, bounded
//! so that a diff view never pulls megabytes or a binary file over the RPC channel.
//!
//! The comparison is always from a checkpoint to the workspace now: the new side of a diff is
//! the file as it is on the disk (and in its buffer), which is the side `:diffget` changes.

use std::path::Path;

use super::{Change, Checkpoint, CheckpointError, Checkpoints, Kind};

/// The largest file text [`Checkpoints::text_at`] gives (1 MiB): a diff view of more is not
/// worth what it costs to send and to diff.
pub const MAX_TEXT_BYTES: u64 = 1024 * 1024;

/// How much of a file is looked at for a NUL byte to call it binary (as read_file does).
const SNIFF_BYTES: usize = 8 * 1024;

/// From where the changes are counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Since {
    /// The last prompt's checkpoint (`:Agent diff`).
    LastPrompt,
    /// The conversation's first checkpoint (`:Agent diff all`).
    Start,
    /// The checkpoint of a given prompt (its `done` row in the chat).
    Prompt(String),
}

impl Since {
    /// `prompt`, `all`, or a prompt checkpoint's id.
    pub fn parse(text: &str) -> Since {
        match text {
            "prompt" | "" => Since::LastPrompt,
            "all" => Since::Start,
            id => Since::Prompt(id.to_string()),
        }
    }
}

/// What changed since a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    /// The checkpoint compared with now.
    pub checkpoint: String,
    /// The prompt it was taken before: its number in the conversation (from 1) and its first
    /// line as given (make it visible to show it). None for [`Since::Start`].
    pub prompt: Option<(usize, String)>,
    /// The files that differ, sorted by path.
    pub changes: Vec<Change>,
}

/// A file as a checkpoint has it, for the old side of a diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldText {
    /// The checkpoint has no such file (it was created since).
    Missing,
    /// Its bytes, at most [`MAX_TEXT_BYTES`].
    Text(Vec<u8>),
    /// A NUL byte in its first 8 KiB.
    Binary,
    /// Larger than [`MAX_TEXT_BYTES`]: its size.
    TooLarge(u64),
}

impl Checkpoints {
    /// What changed in the workspace since `since` in `conversation`; None when the
    /// conversation has no checkpoint to count from (no prompt yet, or an unknown one).
    pub async fn review(
        &self,
        conversation: &str,
        since: &Since,
    ) -> Result<Option<Review>, CheckpointError> {
        let all = self.list(conversation).await?;
        let prompts: Vec<&Checkpoint> = all.iter().filter(|c| c.kind == Kind::Prompt).collect();
        // Numbered as the history counted it when the prompt was sent (its `Turn` trailer), so
        // after a conversation rewind the review and the rewind list agree; an older checkpoint
        // without one is counted by its place.
        let numbered = |at: usize| {
            let prompt = prompts[at];
            (prompt.turn.unwrap_or(at + 1), prompt.label.clone())
        };
        let (checkpoint, prompt) = match since {
            Since::Start => match all.first() {
                Some(first) => (first.id.clone(), None),
                None => return Ok(None),
            },
            Since::LastPrompt => match prompts.len().checked_sub(1) {
                Some(last) => (prompts[last].id.clone(), Some(numbered(last))),
                None => return Ok(None),
            },
            Since::Prompt(id) => match prompts.iter().position(|c| &c.id == id) {
                Some(at) => (id.clone(), Some(numbered(at))),
                None => return Ok(None),
            },
        };
        let changes = self.changes(&checkpoint).await?;
        Ok(Some(Review {
            checkpoint,
            prompt,
            changes,
        }))
    }

    /// The text `path` (relative to the root) had at checkpoint `id`, for a diff view: refused
    /// as binary or too large rather than sent whole.
    pub async fn text_at(&self, id: &str, path: &Path) -> Result<OldText, CheckpointError> {
        let _state = self.ready().await?;
        let commit = self.commit_of(id).await?;
        // The entry of that very path: `ls-tree` given a directory lists what is in it.
        let entries = self.entries(&commit, &[path]).await?;
        let blob = match entries.into_iter().find(|(_, _, at)| at == path) {
            Some((mode, blob, _)) if mode != "160000" && mode != "040000" => blob,
            _ => return Ok(OldText::Missing),
        };
        let git = &self.inner.git;
        let size: u64 = git
            .line(&["cat-file", "-s", &blob])
            .await?
            .parse()
            .map_err(|_| CheckpointError::Git(format!("git cat-file -s {blob}: not a size")))?;
        if size > MAX_TEXT_BYTES {
            return Ok(OldText::TooLarge(size));
        }
        let bytes = git.run(&["cat-file", "blob", &blob], b"").await?;
        if bytes[..bytes.len().min(SNIFF_BYTES)].contains(&0) {
            return Ok(OldText::Binary);
        }
        Ok(OldText::Text(bytes))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::checkpoint::Status;
    use crate::workspace::Workspace;
    use std::path::PathBuf;

    fn write(root: &Path, rel: &str, bytes: &[u8]) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    /// A change as its letter, its path and its line counts.
    type Row = (char, PathBuf, Option<(u64, u64)>);

    fn listed(review: &Review) -> Vec<Row> {
        review
            .changes
            .iter()
            .map(|c| (c.status.letter(), c.path.clone(), c.lines))
            .collect()
    }

    #[tokio::test]
    async fn the_last_prompt_the_start_and_a_given_prompt_count_from_their_own_checkpoints() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = ws.path();
        let checkpoints =
            Checkpoints::new(state.path(), Workspace::new(root).unwrap(), "c1".into());
        assert_eq!(checkpoints.review("c1", &Since::LastPrompt).await, Ok(None));
        assert_eq!(checkpoints.review("c1", &Since::Start).await, Ok(None));

        write(root, "a.txt", b"one\ntwo\n");
        write(root, "gone.txt", b"x\ny\nz\n");
        let first = checkpoints
            .snapshot(Kind::Prompt, "first prompt\nmore")
            .await
            .unwrap();
        write(root, "a.txt", b"one\n2\n");
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        checkpoints.snapshot(Kind::Edit, "a.txt").await.unwrap();
        let second = checkpoints.snapshot(Kind::Prompt, "second").await.unwrap();
        write(root, "src/new.rs", b"fn x() {}\n");

        let last = checkpoints
            .review("c1", &Since::LastPrompt)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(last.checkpoint, second.id);
        assert_eq!(last.prompt, Some((2, "second".to_string())));
        assert_eq!(
            listed(&last),
            [('A', PathBuf::from("src/new.rs"), Some((1, 0)))]
        );

        let all = checkpoints
            .review("c1", &Since::Start)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (all.checkpoint.as_str(), &all.prompt),
            (first.id.as_str(), &None)
        );
        assert_eq!(
            listed(&all),
            [
                ('M', PathBuf::from("a.txt"), Some((1, 1))),
                ('D', PathBuf::from("gone.txt"), Some((0, 3))),
                ('A', PathBuf::from("src/new.rs"), Some((1, 0))),
            ]
        );
        assert_eq!(all.changes[1].status, Status::Deleted);

        let given = checkpoints
            .review("c1", &Since::Prompt(first.id.clone()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(given.prompt, Some((1, "first prompt".to_string())));
        assert_eq!(given.changes, all.changes);
        // Not one of this conversation's prompts: nothing to count from.
        assert_eq!(
            checkpoints
                .review("c1", &Since::Prompt("0123abcd".into()))
                .await,
            Ok(None)
        );
        // After a conversation rewind the history counts again from the cut: a prompt sent as
        // the history's first is called prompt 1, as the rewind list calls it.
        checkpoints
            .snapshot_at(Kind::Prompt, "again", Some(1))
            .await
            .unwrap();
        let last = checkpoints
            .review("c1", &Since::LastPrompt)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(last.prompt, Some((1, "again".to_string())));
    }

    #[tokio::test]
    async fn a_files_old_text_is_given_missing_or_refused_when_binary_or_too_large() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = ws.path();
        let checkpoints =
            Checkpoints::new(state.path(), Workspace::new(root).unwrap(), "c1".into());
        write(root, "a.txt", b"caf\xe9\nline\n");
        write(root, "img.bin", b"\x89PNG\0\0data");
        let big = vec![b'x'; MAX_TEXT_BYTES as usize + 1];
        write(root, "big.txt", &big);
        write(root, "src/lib.rs", b"fn inner() {}\n");
        let at = checkpoints.snapshot(Kind::Prompt, "p").await.unwrap();
        std::fs::remove_file(root.join("a.txt")).unwrap();

        let text = |rel: &'static str| {
            let checkpoints = checkpoints.clone();
            let id = at.id.clone();
            async move { checkpoints.text_at(&id, Path::new(rel)).await.unwrap() }
        };
        assert_eq!(
            text("a.txt").await,
            OldText::Text(b"caf\xe9\nline\n".to_vec())
        );
        assert_eq!(text("img.bin").await, OldText::Binary);
        assert_eq!(text("big.txt").await, OldText::TooLarge(MAX_TEXT_BYTES + 1));
        assert_eq!(text("new.txt").await, OldText::Missing);
        // A directory is no file: not the text of the first file in it.
        assert_eq!(text("src/").await, OldText::Missing);
        assert_eq!(text("src").await, OldText::Missing);
        assert_eq!(
            checkpoints.file_at(&at.id, Path::new("src/")).await,
            Ok(None)
        );
        assert_eq!(
            checkpoints.text_at("nothex", Path::new("a.txt")).await,
            Err(CheckpointError::Unknown("nothex".into()))
        );
    }
}
