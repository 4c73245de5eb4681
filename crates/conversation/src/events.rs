//! [`Events`]: the stream a prompt's events go to, and the [`Recorder`] that may tap it.

use std::sync::Arc;

use tokio::sync::mpsc::error::SendError;
use tokio::sync::mpsc::UnboundedSender;

use agent_nvim_vocab::conversation::{AgentUpdate, ConversationEvent};
use agent_nvim_vocab::events::Event;

/// What keeps a record of a conversation's events (the engine's session file). It queues each
/// event in the call that passes it on, and never waits on the disk there.
pub trait Recorder: Send + Sync {
    /// Queues `event` for the record.
    fn record(&self, event: &ConversationEvent);
}

/// The stream a prompt's events go to. Every conversation reports on the one it is given, so a
/// front end (and a recorder) sees every kind of conversation the same way. A recorded stream
/// queues each event for the record in the same call that passes it on, so recording adds no
/// hop (and no reordering) on an event's way to the screen.
#[derive(Clone)]
pub struct Events {
    sender: UnboundedSender<ConversationEvent>,
    record: Option<Arc<dyn Recorder>>,
}

impl Events {
    /// The stream that passes each event to `sender`.
    pub fn new(sender: UnboundedSender<ConversationEvent>) -> Self {
        Events {
            sender,
            record: None,
        }
    }

    /// This stream, also recording each event to `recorder`.
    pub fn recorded_to(&self, recorder: Arc<dyn Recorder>) -> Self {
        Events {
            sender: self.sender.clone(),
            record: Some(recorder),
        }
    }

    /// Passes `event` on (and records it, unless it is of the moment only: a running command's
    /// live output, which its finished row replaces, or the files a call works on, for follow
    /// mode); an error when the receiver has gone, holding the event, as
    /// [`UnboundedSender::send`] does (the ACP session shows it elsewhere then).
    #[allow(clippy::result_large_err)]
    pub fn send(&self, event: ConversationEvent) -> Result<(), SendError<ConversationEvent>> {
        let passing = matches!(
            event,
            ConversationEvent::Turn(Event::ToolProgress { .. })
                | ConversationEvent::Agent(AgentUpdate::Locations { .. })
        );
        if let Some(recorder) = self.record.as_ref().filter(|_| !passing) {
            recorder.record(&event);
        }
        self.sender.send(event)
    }

    /// Passes a turn's `event` on; a receiver that has gone is not an error here (the turn ends
    /// on its own).
    pub fn report(&self, event: Event) {
        let _ = self.send(ConversationEvent::Turn(event));
    }
}

impl From<UnboundedSender<ConversationEvent>> for Events {
    fn from(sender: UnboundedSender<ConversationEvent>) -> Self {
        Events::new(sender)
    }
}
