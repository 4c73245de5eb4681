//! Driving an external agent over ACP from Neovim: the `acp` notification connects one, prompts
//! go to it until `new`, and its requests are answered through the same chat, picker and buffers
//! as the built-in agent's (the host below).

use std::sync::Arc;

use super::adapters::{NvimEditor, NvimHost};
use super::bridge::Bridge;
use super::protocol::{AcpStart, UiEvent};
use crate::acp::{self, AcpSpec};
use crate::conversation::{Conversation, Unavailable};
use crate::session;

impl Bridge {
    /// `acp {name}`: ends the conversation prompts go to, then connects the named agent in the
    /// background; prompts are answered "still starting" until it is connected, and go back to
    /// the built-in conversation when it cannot be.
    pub(super) async fn start_external(&self, start: AcpStart) {
        let (workspace, auto_approve, nvim, native, checkpoints, store) =
            match self.state.session.lock().await.as_ref() {
                Some(s) => (
                    s.workspace.clone(),
                    s.auto_approve,
                    s.nvim.clone(),
                    s.native.clone(),
                    s.checkpoints.clone(),
                    s.store.clone(),
                ),
                None => return self.error("agent: the backend was not started; run :Agent again"),
            };
        let command = match start.cmd.filter(|c| !c.is_empty()).or_else(|| acp::preset(&start.name)) {
            Some(command) => command,
            None => {
                return self.error(format!(
                    "agent: no ACP agent named '{}'; use {}, or configure it in setup({{ acp = {{ agents = ... }} }})",
                    start.name,
                    acp::preset_names().join(", ")
                ))
            }
        };
        self.cancel_turn();
        let bridge = self.clone();
        tokio::spawn(async move {
            bridge.idle().await;
            bridge.switch_to(Arc::new(starting(&start.name))).await;
            let mut spec = AcpSpec::new(start.name.clone(), command, workspace.clone());
            spec.env = start.env.unwrap_or_default().into_iter().collect();
            spec.auto_approve = auto_approve;
            spec.checkpoints = checkpoints.clone();
            if let Some(secs) = start.connect_timeout.filter(|s| s.is_finite() && *s > 0.0) {
                spec.connect_timeout = std::time::Duration::from_secs_f64(secs);
            }
            let host = Arc::new(NvimHost {
                bridge: bridge.clone(),
                nvim: nvim.clone(),
                editor: NvimEditor { nvim },
                cwd: workspace.root().display().to_string(),
            });
            tracing::info!(name = %start.name, "connecting to an external agent");
            let next: Arc<dyn Conversation> = match acp::connect(spec, host).await {
                Ok(session) => {
                    bridge.send(UiEvent::AcpStarted {
                        name: start.name.clone(),
                    });
                    // Saved and checkpointed like the built-in one (it cannot be resumed yet).
                    session::decorate(Arc::new(session), store.as_ref(), checkpoints.as_ref())
                }
                Err(err) => {
                    bridge.error(format!("agent: {err}"));
                    native
                }
            };
            bridge.switch_to(next).await;
        });
    }
}

/// What prompts go to while the agent `name` connects (npx may take a while).
fn starting(name: &str) -> Unavailable {
    Unavailable::new(
        name,
        format!("agent: still starting {name}; send the prompt again in a moment"),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::acp::AgentUpdate;
    use crate::agent::{Event, Outcome};
    use crate::approval::Decision;
    use crate::conversation::{ConversationEvent, Events};
    use crate::front::nvim::protocol::{Decide, Prompt};
    use futures::future::BoxFuture;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    /// A conversation of either kind as the bridge sees it: reports an update, asks one question
    /// through the bridge's registry, and ends its turn with the answer's option.
    struct Scripted {
        name: &'static str,
        bridge: Bridge,
        ended: AtomicBool,
    }

    impl Conversation for Scripted {
        fn name(&self) -> &str {
            self.name
        }

        fn prompt<'a>(
            &'a self,
            text: String,
            events: &'a Events,
            _cancel: &'a CancellationToken,
        ) -> BoxFuture<'a, Outcome> {
            Box::pin(async move {
                let send = |event| events.send(event).unwrap();
                send(ConversationEvent::Turn(Event::TurnStarted));
                send(ConversationEvent::Agent(AgentUpdate::Thought { text }));
                let (id, answer) = self.bridge.state.pending.open(self.name);
                self.bridge
                    .ask_lua(UiEvent::decided(id, self.name.into(), Decision::AllowOnce));
                let picked = answer.await.unwrap().option.unwrap_or_default();
                send(ConversationEvent::Turn(Event::TurnDone {
                    input: 0,
                    output: 0,
                    outcome: Outcome::Done,
                    message: picked,
                }));
                Outcome::Done
            })
        }

        fn end(self: Arc<Self>) -> BoxFuture<'static, ()> {
            self.ended.store(true, Ordering::SeqCst);
            Box::pin(async {})
        }
    }

    /// The next event the bridge hands the pump.
    async fn next(ui: &mut mpsc::UnboundedReceiver<UiEvent>) -> UiEvent {
        ui.recv().await.unwrap()
    }

    #[tokio::test]
    async fn while_an_agent_starts_a_prompt_is_answered_still_starting_and_ends_no_turn() {
        let bridge = Bridge::new(CancellationToken::new());
        let mut ui = bridge.state.ui_rx.lock().await.take().unwrap();
        bridge.switch_to(Arc::new(starting("claude"))).await;
        bridge.prompt(Prompt { text: "hi".into() }).await;
        assert_eq!(
            next(&mut ui).await,
            UiEvent::error("agent: still starting claude; send the prompt again in a moment")
        );
        bridge.idle().await;
        assert!(ui.try_recv().is_err());
    }

    #[tokio::test]
    async fn prompts_go_to_the_one_conversation_held_and_a_switch_ends_the_old_one() {
        let bridge = Bridge::new(CancellationToken::new());
        let mut ui = bridge.state.ui_rx.lock().await.take().unwrap();
        let scripted = |name| {
            Arc::new(Scripted {
                name,
                bridge: bridge.clone(),
                ended: AtomicBool::new(false),
            })
        };
        let (first, second) = (scripted("built-in"), scripted("claude"));
        bridge.switch_to(first.clone()).await;
        for (conversation, answer) in [(&first, "a"), (&second, "b")] {
            bridge
                .prompt(Prompt {
                    text: conversation.name.into(),
                })
                .await;
            assert_eq!(next(&mut ui).await, UiEvent::Agent(Event::TurnStarted));
            assert_eq!(
                next(&mut ui).await,
                UiEvent::Update(AgentUpdate::Thought {
                    text: conversation.name.into()
                })
            );
            let UiEvent::Decided { id, .. } = next(&mut ui).await else {
                panic!("expected the question");
            };
            bridge
                .decide(Decide {
                    id,
                    decision: Decision::AllowOnce,
                    option: Some(answer.into()),
                })
                .await;
            assert_eq!(
                next(&mut ui).await,
                UiEvent::decided(id, conversation.name.into(), Decision::AllowOnce)
            );
            let UiEvent::Agent(Event::TurnDone { message, .. }) = next(&mut ui).await else {
                panic!("expected the end of the turn");
            };
            assert_eq!(message, answer);
            bridge.idle().await;
            assert!(!second.ended.load(Ordering::SeqCst));
            bridge.switch_to(second.clone()).await;
            // Switching to the conversation already held ends nothing.
            assert!(!second.ended.load(Ordering::SeqCst));
        }
        assert!(first.ended.load(Ordering::SeqCst));
        bridge.end_conversation().await;
        assert!(second.ended.load(Ordering::SeqCst));
    }
}
