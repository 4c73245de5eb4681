//! [`Unavailable`]: a conversation that cannot take prompts yet.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::{Conversation, ConversationError, Events};
use agent_nvim_vocab::events::{Event, Outcome};

/// A conversation that cannot take prompts yet: each prompt is answered with one error event
/// (the provider is not configured; an external agent is still starting).
pub struct Unavailable {
    name: String,
    message: String,
}

impl Unavailable {
    /// Answers every prompt with `message`, as the user reads it (`agent: ...`).
    pub fn new(name: impl Into<String>, message: impl Into<String>) -> Self {
        Unavailable {
            name: name.into(),
            message: message.into(),
        }
    }
}

impl Conversation for Unavailable {
    fn name(&self) -> &str {
        &self.name
    }

    fn prompt<'a>(
        &'a self,
        _prompt: agent_nvim_llm::Prompt,
        events: &'a Events,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            events.report(Event::Error {
                message: self.message.clone(),
            });
            Outcome::Failed
        })
    }

    fn reset(&self) -> BoxFuture<'_, Result<(), ConversationError>> {
        // Nothing to forget.
        Box::pin(async { Ok(()) })
    }

    fn end(self: Arc<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::fake::prompt;
    use crate::ConversationEvent;

    #[tokio::test]
    async fn an_unavailable_conversation_answers_each_prompt_with_its_message() {
        let waiting = Unavailable::new("claude", "agent: still starting claude");
        assert_eq!(
            prompt(&waiting, "hi").await,
            vec![ConversationEvent::Turn(Event::Error {
                message: "agent: still starting claude".into()
            })]
        );
        assert_eq!(waiting.reset().await, Ok(()));
        let saved = crate::saved::Conversation {
            images: None,
            header: crate::saved::Header {
                agent_nvim_session: crate::saved::FORMAT,
                id: "20261201-000000-0000".into(),
                workspace: "/w".into(),
                created: "2026-12-01T00:00:00Z".into(),
                conversation: "claude".into(),
            },
            records: Vec::new(),
        };
        assert_eq!(
            waiting.resume(&saved).await,
            Err(ConversationError::Unsupported {
                name: "claude".into(),
                what: "resume a session"
            })
        );
        assert_eq!(waiting.id(), None);
    }
}
