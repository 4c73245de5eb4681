//! `:Agent btw`: a side question about the conversation, answered apart from it. The model is
//! sent what the conversation's next request would send (as saved at its last finished turn,
//! or its history when nothing is saved) and the question; nothing is added to the
//! conversation, no tool runs, and the answer streams to Lua as `btw_text`, then `btw_done`.

use super::protocol::{self, UiEvent};
use super::target::Target;
use super::ui::Ui;
use crate::agent::Report;
use crate::llm::Message;
use agent_nvim_vocab::events::Event;

impl Target {
    /// `btw`: runs the side question in a task of its own (the conversation's turn may run
    /// meanwhile); a `cancel` of the conversation does not stop it (it is one request).
    pub(super) async fn btw(&self, btw: protocol::Btw) {
        let ui = self.slot.ui.clone();
        let id = btw.id;
        let done = move |ui: &Ui, ok: bool, message: String| {
            ui.send(UiEvent::BtwDone {
                id,
                ok,
                message,
                cost: None,
            });
        };
        let conversation = self.slot.conversation.lock().await.clone();
        let Some(conversation) = conversation else {
            return done(&ui, false, super::bridge::NOT_STARTED.to_string());
        };
        if conversation.agent().is_some() {
            // The agent's history is its own: asked in a fork of its session, where offered.
            let token = self.slot.shutdown.child_token();
            tokio::spawn(async move {
                let (text, mut told) = tokio::sync::mpsc::unbounded_channel();
                let streamed = ui.clone();
                let forward = tokio::spawn(async move {
                    while let Some(piece) = told.recv().await {
                        streamed.send(UiEvent::BtwText { id, text: piece });
                    }
                });
                let Some(agent) = conversation.agent() else {
                    return;
                };
                let answered = agent.aside(&btw.question, text, &token).await;
                let _ = forward.await;
                match answered {
                    Ok(()) => done(
                        &ui,
                        true,
                        format!(
                            "answered by {} in a fork of its session",
                            conversation.name()
                        ),
                    ),
                    Err(err) => done(&ui, false, format!("agent: {err}")),
                }
            });
            return;
        }
        let built = self
            .slot
            .of_session(|session| {
                let base = &session.inline;
                crate::inline::side_agent(
                    &base.choice,
                    base.tools.clone(),
                    base.instructions.clone(),
                )
                .map(|agent| {
                    let agent = agent
                        .with_max_cost(base.max_cost)
                        .spending_apart(base.spend.clone());
                    (agent, session.store.clone())
                })
                .map_err(|err| super::target::no_provider(&err))
            })
            .await;
        let (mut agent, store) = match built {
            Ok(Ok(built)) => built,
            Ok(Err(message)) => return done(&ui, false, message),
            Err(_) => return done(&ui, false, super::bridge::NOT_STARTED.to_string()),
        };
        let token = self.slot.shutdown.child_token();
        // A turn running now is left out: the view is as of the last one that ended.
        let running = self.slot.busy.try_lock().is_err();
        tokio::spawn(async move {
            let mut view = view(conversation.as_ref(), store).await;
            if running {
                if let Some(last) = view.iter().rposition(|m| matches!(m, Message::User(_))) {
                    view.truncate(last);
                }
            }
            let told = Streamed { ui: ui.clone(), id };
            let answer = agent.aside(&view, &btw.question, &told, &token).await;
            match answer {
                Ok(aside) => {
                    let mut line = crate::agent::done_line(aside.usage, aside.cost);
                    if aside.called_tools {
                        line.push_str(" · the model asked for a tool, and none ran");
                    }
                    ui.send(UiEvent::BtwDone {
                        id,
                        ok: true,
                        message: line,
                        cost: aside.cost,
                    });
                }
                Err(why) => done(
                    &ui,
                    false,
                    format!("agent: the side question failed: {why}"),
                ),
            }
        });
    }
}

/// What the conversation's next request would send: as saved at its last finished turn (the
/// conversation itself may be in the middle of one), else its history.
async fn view(
    conversation: &dyn crate::conversation::Conversation,
    store: Option<crate::sessions::Store>,
) -> Vec<Message> {
    if let (Some(store), Some(id)) = (store, conversation.id()) {
        // Read and rebuilt off the runtime's threads: a long conversation is megabytes.
        let loaded = tokio::task::spawn_blocking(move || {
            store
                .load(&id)
                .map(|saved| crate::agent::sent_view(&saved.model_view(), &saved.compactions()))
        })
        .await;
        if let Ok(Ok(view)) = loaded {
            return view;
        }
    }
    conversation.model_view(0).await.unwrap_or_default()
}

/// A side question's text, streamed to Lua.
struct Streamed {
    ui: Ui,
    id: u64,
}

impl Report for Streamed {
    fn report(&self, event: Event) {
        if let Event::Text { text } = event {
            self.ui.send(UiEvent::BtwText { id: self.id, text });
        }
    }
}
