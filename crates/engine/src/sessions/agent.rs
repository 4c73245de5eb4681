//! Which external agent's own session a saved conversation is: a `{id}.agent` note beside its
//! file, `{"agent":"claude","session":"0f3c9a"}`, written when an agent that can load its
//! sessions again (ACP `loadSession`) starts the file. With it, a conversation of ours can be
//! resumed through that agent (`session/load`) even when the agent cannot list its sessions.
//! The session format itself is unchanged: the list reads `.jsonl` files only.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use serde::{Deserialize, Serialize};

use super::{valid_id, Store, StoreError};

/// What a `{id}.agent` note holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AgentNote {
    /// The agent's name ([`crate::conversation::Conversation::name`]).
    pub agent: String,
    /// The agent's own id for the session.
    pub session: String,
}

/// How long a note may be: anything longer was not written by us.
const MAX_NOTE: u64 = 4096;

impl Store {
    /// Notes that conversation `id` is `note.agent`'s session `note.session` (mode 0600,
    /// replacing an earlier note).
    pub fn note_agent_session(&self, id: &str, note: &AgentNote) -> Result<(), StoreError> {
        let path = self.note_path(id)?;
        let io_error = |source| StoreError::Io {
            context: format!("cannot write {}", path.display()),
            source,
        };
        let mut line = serde_json::to_string(note).unwrap_or_default();
        line.push('\n');
        crate::workspace::rewrite_private(&path)
            .and_then(|mut file| file.write_all(line.as_bytes()))
            .map_err(io_error)
    }

    /// The note of conversation `id`, when it has one that can be read.
    pub fn agent_session(&self, id: &str) -> Option<AgentNote> {
        let path = self.note_path(id).ok()?;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .ok()?;
        let mut text = String::new();
        use std::io::Read;
        file.take(MAX_NOTE).read_to_string(&mut text).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// The conversation noted as `note`'s session, the most recently written when there are
    /// several.
    pub fn noted(&self, note: &AgentNote) -> Option<String> {
        self.list()
            .into_iter()
            .filter(|listed| listed.problem.is_none())
            .map(|listed| listed.id)
            .find(|id| self.agent_session(id).as_ref() == Some(note))
    }

    pub(crate) fn note_path(&self, id: &str) -> Result<std::path::PathBuf, StoreError> {
        if !valid_id(id) {
            return Err(StoreError::BadId(id.to_string()));
        }
        Ok(self.dir.join(format!("{id}.agent")))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::conversation::fake::Fake;
    use crate::conversation::{Conversation, Events};
    use crate::sessions::Recorded;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;
    use tokio_util::sync::CancellationToken;

    /// An agent that can load its sessions again: prompts go to the one last loaded.
    fn loads() -> Fake {
        Fake::new("fake").as_agent(Ok(Vec::new()), Some("s-1"))
    }

    #[tokio::test]
    async fn a_recorded_agent_session_is_noted_and_a_load_of_it_goes_on_in_its_file() {
        let state = tempfile::tempdir().unwrap();
        let store = Store::new(state.path(), std::path::Path::new("/w"));
        let recorded = Arc::new(Recorded::new(Arc::new(loads()), store.clone()));
        // Checkpointed over it, as a session decorates it: the checkpoints follow the file.
        let work = tempfile::tempdir().unwrap();
        let workspace = crate::workspace::Workspace::new(work.path()).unwrap();
        let checkpoints =
            crate::checkpoint::Checkpoints::new(state.path(), workspace, "start".into());
        let decorated =
            crate::conversation::Checkpointed::wrap(recorded.clone(), Some(&checkpoints));
        let decorated = &decorated;
        let prompt = |text| crate::conversation::fake::prompt(decorated.as_ref(), text);
        let load = |id| async move {
            let (events, _seen) = tokio::sync::mpsc::unbounded_channel();
            let events = Events::new(events);
            decorated
                .load(id, &events, &CancellationToken::new())
                .await
                .unwrap();
        };
        prompt("one").await;
        let first = recorded.id().unwrap();
        load("s-2").await;
        assert_eq!(recorded.id(), None);
        assert_ne!(checkpoints.conversation(), first);
        prompt("two").await;
        let second = recorded.id().unwrap();
        load("s-1").await;
        assert_eq!(recorded.id(), Some(first.clone()));
        assert_eq!(
            checkpoints.conversation(),
            first,
            "the review and rewind follow the file"
        );
        prompt("three").await;
        recorded.flush();
        let note = |session: &str| AgentNote {
            agent: "fake".into(),
            session: session.into(),
        };
        assert_eq!(store.agent_session(&first), Some(note("s-1")));
        assert_eq!(store.agent_session(&second), Some(note("s-2")));
        let prompts = |id: &str| {
            store
                .list()
                .into_iter()
                .find(|listed| listed.id == id)
                .unwrap()
                .prompts
        };
        assert_eq!((prompts(&first), prompts(&second)), (2, 1));
    }

    #[test]
    fn a_note_is_read_back_found_by_its_session_and_left_out_of_the_list() {
        let state = tempfile::tempdir().unwrap();
        let store = Store::new(state.path(), std::path::Path::new("/w"));
        let first = store.create("claude").unwrap();
        first.flush();
        let second = store.create("claude").unwrap();
        second.flush();
        let note = |session: &str| AgentNote {
            agent: "claude".into(),
            session: session.into(),
        };
        assert_eq!(store.agent_session(first.id()), None);
        store.note_agent_session(first.id(), &note("s-1")).unwrap();
        store.note_agent_session(second.id(), &note("s-2")).unwrap();
        assert_eq!(store.agent_session(first.id()), Some(note("s-1")));
        assert_eq!(store.noted(&note("s-2")), Some(second.id().to_string()));
        assert_eq!(store.noted(&note("s-3")), None);
        let other = AgentNote {
            agent: "gemini".into(),
            ..note("s-1")
        };
        assert_eq!(store.noted(&other), None);
        let path = store.dir().join(format!("{}.agent", first.id()));
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // The list shows conversations only.
        assert_eq!(store.list().len(), 2);
        // A note that is not ours reads as none; a bad id is refused.
        std::fs::write(&path, "not json").unwrap();
        assert_eq!(store.agent_session(first.id()), None);
        assert!(matches!(
            store.note_agent_session("../x", &note("s")),
            Err(StoreError::BadId(_))
        ));
    }
}
