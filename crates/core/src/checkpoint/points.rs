//! The rewind points of a conversation (`:Agent rewind`): its prompts' checkpoints, newest
//! first, each numbered as the conversation counts its prompts and with how many files its turn
//! changed.

use super::{Checkpoint, CheckpointError, Checkpoints, Kind};

/// One prompt a rewind can go back to (or, numbered 0, the undo of the last rewind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// The prompt's number in the conversation, from 1 (what `Conversation::rewind` takes); 0
    /// for [`Checkpoints::undo_point`].
    pub turn: usize,
    /// The checkpoint taken just before it (what `Checkpoints::restore` takes).
    pub id: String,
    /// The prompt's first line, as given (made visible by [`row`]).
    pub label: String,
    /// How many files changed from its checkpoint to the next prompt's on the live line (or
    /// to now, for the newest).
    pub files: usize,
    /// When it was taken, in seconds since the epoch.
    pub time: u64,
}

impl Checkpoints {
    /// The prompts of `conversation` a rewind can go back to, newest first: the live line of
    /// its history. Walked oldest first, a prompt numbered `t` (the history's number when it
    /// was sent) replaces whatever was `t` or later, and a cut to before `t` drops those, so
    /// the prompts a conversation rewind took out of the history leave the list, and the
    /// prompts sent after it take their numbers. A prompt checkpointed without a number (an
    /// older shadow repository) follows the one before it.
    pub async fn points(&self, conversation: &str) -> Result<Vec<Point>, CheckpointError> {
        let all = self.list(conversation).await?;
        // Indexed by prompt number less one; a prompt whose checkpoint was never taken (git
        // failed then) is a gap, so the prompts after it keep their own numbers: a rewind must
        // put back the code and cut the history at the same prompt.
        let mut live: Vec<Option<&Checkpoint>> = Vec::new();
        for checkpoint in &all {
            match (checkpoint.kind, checkpoint.turn) {
                (Kind::Prompt, turn) => {
                    let turn = turn.unwrap_or(live.len() + 1).max(1);
                    live.truncate(turn - 1);
                    live.resize(turn - 1, None);
                    live.push(Some(checkpoint));
                }
                (Kind::Cut, Some(turn)) => live.truncate(turn.saturating_sub(1)),
                _ => {}
            }
        }
        // Each prompt's changes run to the next prompt that has a checkpoint (the last's to now).
        let taken: Vec<(usize, &Checkpoint)> = live
            .iter()
            .enumerate()
            .filter_map(|(at, checkpoint)| checkpoint.map(|c| (at + 1, c)))
            .collect();
        let ids: Vec<&str> = taken.iter().map(|(_, c)| c.id.as_str()).collect();
        let files = self.files_changed(&ids).await?;
        let mut points: Vec<Point> = taken
            .iter()
            .zip(files)
            .map(|((turn, checkpoint), files)| Point {
                turn: *turn,
                id: checkpoint.id.clone(),
                label: checkpoint.label.clone(),
                files,
                time: checkpoint.time,
            })
            .collect();
        points.reverse();
        Ok(points)
    }
}

/// What an undo point is called in the list.
pub const UNDO_LABEL: &str = "the code before the last rewind";

impl Checkpoints {
    /// The undo of the last rewind of `conversation`'s code: the snapshot its restore took of
    /// the workspace just before, while no prompt came since and the workspace differs from it
    /// (a restore refused for unsaved buffers changed nothing, so its snapshot is passed over;
    /// after an undo, the snapshot the undo took is the redo). Numbered 0, labelled
    /// [`UNDO_LABEL`].
    pub async fn undo_point(&self, conversation: &str) -> Result<Option<Point>, CheckpointError> {
        let all = self.list(conversation).await?;
        let since_prompt = all
            .iter()
            .rev()
            .take_while(|checkpoint| checkpoint.kind != Kind::Prompt);
        for checkpoint in since_prompt.filter(|c| c.kind == Kind::Rewind) {
            let files = self.changes(&checkpoint.id).await?.len();
            if files > 0 {
                return Ok(Some(Point {
                    turn: 0,
                    id: checkpoint.id.clone(),
                    label: UNDO_LABEL.into(),
                    files,
                    time: checkpoint.time,
                }));
            }
        }
        Ok(None)
    }
}
