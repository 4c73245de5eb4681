//! The one registry of questions waiting for a person: every question a front end shows (the
//! gate's approvals, an external agent's permission requests) gets its id here and waits here
//! for its answer, so ids come from one counter and never collide, whoever asked. Each question
//! belongs to the conversation that asked it (its owner): a conversation's cancel drops its own
//! questions, never another's.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::oneshot;

/// Open questions, each with the sender its asker waits on.
pub struct Questions<A> {
    inner: Mutex<Inner<A>>,
}

struct Inner<A> {
    next: u64,
    open: HashMap<u64, Waiter<A>>,
}

/// The asker of one open question, taken out of the registry by its answer.
pub struct Waiter<A> {
    /// The conversation that asked it.
    pub owner: u64,
    /// What the question was about, as its asker named it (the tool, the agent's call title).
    pub about: String,
    reply: oneshot::Sender<A>,
}

impl<A> Waiter<A> {
    /// Hands the answer to the asker (which may have stopped waiting: a cancelled turn).
    pub fn answer(self, answer: A) {
        let _ = self.reply.send(answer);
    }
}

impl<A> Default for Questions<A> {
    fn default() -> Self {
        Questions {
            inner: Mutex::new(Inner {
                next: 1,
                open: HashMap::new(),
            }),
        }
    }
}

impl<A> Questions<A> {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner<A>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a question of conversation `owner` about `about`: its id (unique for the life of
    /// the registry, whoever asked) and the receiver its answer arrives on. The receiver fails
    /// when the question is dropped ([`Questions::clear`]).
    pub fn open(&self, owner: u64, about: impl Into<String>) -> (u64, oneshot::Receiver<A>) {
        let (reply, answer) = oneshot::channel();
        let mut inner = self.inner();
        let id = inner.next;
        inner.next += 1;
        let about = about.into();
        inner.open.insert(
            id,
            Waiter {
                owner,
                about,
                reply,
            },
        );
        (id, answer)
    }

    /// Takes the asker of question `id` out, to answer it. None, with a log line, when nobody
    /// waits for it (an unknown id, or a question already answered or dropped).
    pub fn take(&self, id: u64) -> Option<Waiter<A>> {
        let waiter = self.inner().open.remove(&id);
        if waiter.is_none() {
            tracing::warn!(id, "an answer to a question nobody waits for");
        }
        waiter
    }

    /// The conversation that asked open question `id`.
    pub fn owner(&self, id: u64) -> Option<u64> {
        self.inner().open.get(&id).map(|waiter| waiter.owner)
    }

    /// Drops question `id` if it is still open (its asker stopped waiting: a cancel), without
    /// a word when it was answered already.
    pub fn forget(&self, id: u64) {
        self.inner().open.remove(&id);
    }

    /// Drops every open question of conversation `owner`: each of its askers sees its question
    /// end unanswered; the ids dropped.
    pub fn clear(&self, owner: u64) -> Vec<u64> {
        let mut inner = self.inner();
        let dropped: Vec<u64> = inner
            .open
            .iter()
            .filter(|(_, waiter)| waiter.owner == owner)
            .map(|(id, _)| *id)
            .collect();
        for id in &dropped {
            inner.open.remove(id);
        }
        dropped
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The log records written while `run` runs.
    fn logged(run: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, run);
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn the_gate_and_an_agent_share_one_id_space_and_each_answer_reaches_its_asker() {
        let questions = Questions::<&str>::default();
        // The gate's approvals and an ACP agent's permission requests, interleaved.
        let (gate_1, mut gate_1_answer) = questions.open(1, "run_bash");
        let (agent_1, mut agent_1_answer) = questions.open(1, "Edit src/a.rs");
        let (gate_2, mut gate_2_answer) = questions.open(1, "edit_file");
        let ids = [gate_1, agent_1, gate_2];
        assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
        let agent = questions.take(agent_1).unwrap();
        assert_eq!(agent.about, "Edit src/a.rs");
        agent.answer("allow");
        assert_eq!(agent_1_answer.try_recv().unwrap(), "allow");
        assert!(gate_1_answer.try_recv().is_err() && gate_2_answer.try_recv().is_err());
        questions.take(gate_2).unwrap().answer("refuse");
        assert_eq!(gate_2_answer.try_recv().unwrap(), "refuse");
        // Ids are not handed out again once answered.
        let (next, _) = questions.open(1, "run_bash");
        assert!(!ids.contains(&next));
    }

    #[test]
    fn an_unknown_or_late_answer_is_ignored_with_a_log_line() {
        let questions = Questions::<&str>::default();
        let (id, _answer) = questions.open(1, "run_bash");
        questions.take(id).unwrap().answer("allow");
        let log = logged(|| {
            assert!(questions.take(id).is_none());
            assert!(questions.take(id + 100).is_none());
        });
        assert_eq!(
            log.matches("an answer to a question nobody waits for")
                .count(),
            2,
            "{log}"
        );
    }

    #[test]
    fn clearing_ends_every_open_question_of_its_conversation_unanswered_and_no_other() {
        let questions = Questions::<&str>::default();
        let (gate, mut gate_answer) = questions.open(1, "run_bash");
        let (other, mut other_answer) = questions.open(2, "edit_file");
        let (agent, mut agent_answer) = questions.open(1, "Run ls");
        let mut dropped = questions.clear(1);
        dropped.sort_unstable();
        assert_eq!(dropped, [gate, agent]);
        // Conversation 2's question is still open, and its answer reaches it.
        let waiter = questions.take(other).unwrap();
        assert_eq!((waiter.owner, waiter.about.as_str()), (2, "edit_file"));
        waiter.answer("allow");
        assert_eq!(other_answer.try_recv().unwrap(), "allow");
        assert!(matches!(
            gate_answer.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        assert!(matches!(
            agent_answer.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        let late =
            logged(|| assert!(questions.take(gate).is_none() && questions.take(agent).is_none()));
        assert!(late.contains("nobody waits"), "{late}");
    }
}
