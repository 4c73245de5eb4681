//! The rewind points of a conversation (`:Agent rewind`): its prompts' checkpoints, newest
//! first, each numbered as the conversation counts its prompts and with how many files its turn
//! changed.

use super::{CheckpointError, Checkpoints, Kind};
use crate::display;

/// One prompt a rewind can go back to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// The prompt's number in the conversation, from 1 (what `Conversation::rewind` takes).
    pub turn: usize,
    /// The checkpoint taken just before it (what `Checkpoints::restore` takes).
    pub id: String,
    /// The prompt's first line, as given (made visible by [`row`]).
    pub label: String,
    /// How many files its turn changed: up to the next prompt's checkpoint, or to now.
    pub files: usize,
    /// When it was taken, in seconds since the epoch.
    pub time: u64,
}

impl Checkpoints {
    /// The prompts of `conversation` a rewind can go back to, newest first.
    pub async fn points(&self, conversation: &str) -> Result<Vec<Point>, CheckpointError> {
        let all = self.list(conversation).await?;
        let prompts: Vec<_> = all.iter().filter(|c| c.kind == Kind::Prompt).collect();
        let mut points = Vec::with_capacity(prompts.len());
        for (at, checkpoint) in prompts.iter().enumerate() {
            let changes = match prompts.get(at + 1) {
                Some(next) => self.changes_between(&checkpoint.id, &next.id).await?,
                None => self.changes(&checkpoint.id).await?,
            };
            points.push(Point {
                turn: at + 1,
                id: checkpoint.id.clone(),
                label: checkpoint.label.clone(),
                files: changes.len(),
                time: checkpoint.time,
            });
        }
        points.reverse();
        Ok(points)
    }
}

/// How the list shows `point` at `now` (seconds since the epoch):
/// `3 · fix the failing test · 2 files changed · 4 min ago`, its label made visible.
pub fn row(point: &Point, now: u64) -> String {
    let files = match point.files {
        1 => "1 file changed".to_string(),
        n => format!("{n} files changed"),
    };
    format!(
        "{} · {} · {} · {}",
        point.turn,
        display::one_line(&point.label),
        files,
        crate::sessions::age(now.saturating_sub(point.time))
    )
}
