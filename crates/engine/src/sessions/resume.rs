//! Resuming a saved conversation, the same for every front end: which file it is, whether the
//! conversation at hand can continue it, and continuing it. A front end adds only how it shows
//! the conversation while it is read (Neovim's chat) and its own words for the errors.

use super::{Conversation as Saved, Header, Store, StoreError};
use crate::conversation::{Conversation, ConversationError};

/// Why a saved conversation was not resumed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// There is no state directory, so nothing is saved.
    #[error("conversations are not saved here (no state directory), so none can be resumed")]
    NoStore,
    /// No id was given and nothing is saved in this workspace.
    #[error("no saved conversation in this workspace to resume")]
    NoneSaved,
    /// The file could not be found or read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// It was with another agent, which the conversation at hand is not.
    #[error("conversation '{id}' was with {agent}; only the built-in agent's can be resumed")]
    OtherAgent { id: String, agent: String },
    /// The conversation could not take it (it started over instead).
    #[error("the conversation cannot be continued ({0}); the next prompt starts a new one")]
    NotContinued(#[source] ConversationError),
}

/// The header of the conversation to resume from `store`: `id`, or the latest one saved.
pub fn header(store: Option<&Store>, id: Option<&str>) -> Result<Header, ResumeError> {
    let store = store.ok_or(ResumeError::NoStore)?;
    let id = match id {
        Some(id) => id.to_string(),
        None => store.latest().ok_or(ResumeError::NoneSaved)?,
    };
    Ok(store.header(&id)?)
}

/// Whether `conversation` can continue the conversation `header` saved: one of its own kind.
pub fn continues(conversation: &dyn Conversation, header: &Header) -> Result<(), ResumeError> {
    if header.conversation == conversation.name() {
        return Ok(());
    }
    Err(ResumeError::OtherAgent {
        id: header.id.clone(),
        agent: header.conversation.clone(),
    })
}

/// Continues `saved` in `conversation`. When it cannot, `conversation` starts over: whatever it
/// held before is not what the person was shown, and the next prompt must not go on with a
/// history nobody sees.
pub async fn continue_in(
    conversation: &dyn Conversation,
    saved: &Saved,
) -> Result<(), ResumeError> {
    tracing::info!(id = %saved.header.id, records = saved.records.len(), "resuming a conversation");
    let Err(err) = conversation.resume(saved).await else {
        return Ok(());
    };
    if let Err(reset) = conversation.reset().await {
        tracing::warn!(%reset, "the conversation did not start over");
    }
    Err(ResumeError::NotContinued(err))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::conversation::fake::Fake;
    use std::path::Path;

    #[test]
    fn the_header_is_the_id_given_or_the_latest_and_none_without_a_store() {
        let state = tempfile::tempdir().unwrap();
        let store = Store::new(state.path(), Path::new("/w"));
        assert!(matches!(header(None, None), Err(ResumeError::NoStore)));
        assert!(matches!(
            header(Some(&store), None),
            Err(ResumeError::NoneSaved)
        ));
        let writer = store.create("built-in").unwrap();
        writer.write(super::super::Record::Prompt { text: "hi".into() });
        writer.flush();
        let id = writer.id().to_string();
        assert_eq!(header(Some(&store), None).unwrap().id, id);
        assert_eq!(header(Some(&store), Some(&id)).unwrap().id, id);
        assert!(matches!(
            header(Some(&store), Some("20200101-000000-ffff")),
            Err(ResumeError::Store(StoreError::Missing(_)))
        ));
    }

    #[tokio::test]
    async fn another_agents_conversation_is_refused_and_one_that_cannot_go_on_starts_over() {
        let state = tempfile::tempdir().unwrap();
        let store = Store::new(state.path(), Path::new("/w"));
        let writer = store.create("claude").unwrap();
        writer.flush();
        let saved = store.load(writer.id()).unwrap();
        let builtin = Fake::new("built-in");
        assert_eq!(
            continues(&builtin, &saved.header).unwrap_err().to_string(),
            format!(
                "conversation '{}' was with claude; only the built-in agent's can be resumed",
                saved.header.id
            )
        );
        // A conversation of the same kind that cannot take it starts over.
        let claude = Fake::new("claude").with_history(Vec::new());
        continues(&claude, &saved.header).unwrap();
        let err = continue_in(&claude, &saved).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "the conversation cannot be continued (claude cannot resume a session); the next \
             prompt starts a new one"
        );
        assert_eq!(claude.resets(), 1);
    }
}
