//! Driving an external agent over ACP from Neovim: the `acp` notification connects one, prompts
//! go to it until `new`, and its requests are answered through the same chat, picker and buffers
//! as the built-in agent's (the host below).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use rmpv::Value;
use tokio::sync::oneshot;

use super::protocol::{lua, AcpStart, Choices, Preview, Prompt, UiEvent};
use super::{Bridge, Nvim, NvimEditor};
use crate::acp::{self, AcpEvent, AcpHost, AcpSession, AcpSpec, PermissionAsk};

/// Which external agent, if any, the prompts go to.
pub(super) enum Slot {
    /// None: the built-in agent answers.
    Empty,
    /// One is starting (npx may take a while); prompts wait for it.
    Connecting(String),
    /// One is connected.
    Ready {
        name: String,
        session: Arc<AcpSession>,
    },
}

/// Ids for permission questions, apart from the gate's (which count from 1).
static NEXT_QUESTION: AtomicU64 = AtomicU64::new(1 << 40);

impl Bridge {
    /// `acp {name}`: ends any external agent, then connects the named one in the background.
    pub(super) async fn start_external(&self, start: AcpStart) {
        let (workspace, auto_approve, nvim) = match self.state.session.lock().await.as_ref() {
            Some(s) => (s.workspace.clone(), s.auto_approve, s.nvim.clone()),
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
            bridge.end_external().await;
            *bridge.state.acp.lock().await = Slot::Connecting(start.name.clone());
            let mut spec = AcpSpec::new(start.name.clone(), command, workspace.clone());
            spec.env = start.env.unwrap_or_default().into_iter().collect();
            spec.auto_approve = auto_approve;
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
            let slot = match acp::connect(spec, host).await {
                Ok(session) => {
                    bridge.send(UiEvent::AcpStarted {
                        name: start.name.clone(),
                    });
                    Slot::Ready {
                        name: start.name,
                        session: Arc::new(session),
                    }
                }
                Err(message) => {
                    let message = if message.starts_with("agent:") {
                        message
                    } else {
                        format!("agent: {message}")
                    };
                    bridge.error(message);
                    Slot::Empty
                }
            };
            *bridge.state.acp.lock().await = slot;
        });
    }

    /// Sends `prompt` to the external agent when one is connected (true), else leaves it to the
    /// built-in agent (false).
    pub(super) async fn prompt_external(&self, prompt: &Prompt) -> bool {
        let session = match &*self.state.acp.lock().await {
            Slot::Empty => return false,
            Slot::Connecting(name) => {
                self.error(format!(
                    "agent: still starting {name}; send the prompt again in a moment"
                ));
                return true;
            }
            Slot::Ready { session, .. } => session.clone(),
        };
        let Some((busy, token)) = self.begin_turn() else {
            return true;
        };
        let bridge = self.clone();
        let text = prompt.text.clone();
        tokio::spawn(async move {
            let _busy = busy;
            let outcome = session.prompt(text, &token).await;
            tracing::info!(?outcome, "external turn ended");
            bridge.end_turn();
        });
        true
    }

    /// Ends the external agent, if any: close its stdin, wait 2 s, kill its process tree.
    pub(super) async fn end_external(&self) {
        let slot = std::mem::replace(&mut *self.state.acp.lock().await, Slot::Empty);
        if let Slot::Ready { name, session } = slot {
            tracing::info!(%name, "ending the external agent");
            match Arc::try_unwrap(session) {
                Ok(session) => session.shutdown().await,
                // A turn still holds it: dropping the last handle kills the process group.
                Err(shared) => drop(shared),
            }
        }
    }
}

/// The external agent's view of Neovim.
struct NvimHost {
    bridge: Bridge,
    nvim: Nvim,
    editor: NvimEditor,
    cwd: String,
}

impl AcpHost for NvimHost {
    fn event(&self, event: AcpEvent) {
        self.bridge.send(match event {
            AcpEvent::Turn(event) => UiEvent::Agent(event),
            AcpEvent::Agent(update) => UiEvent::Update(update),
        });
    }

    fn ask_permission(&self, request: PermissionAsk) -> BoxFuture<'_, Option<String>> {
        Box::pin(async move {
            let id = NEXT_QUESTION.fetch_add(1, Ordering::Relaxed);
            let (reply, answer) = oneshot::channel();
            if let Ok(mut pending) = self.bridge.state.pending.lock() {
                pending.insert(id, (request.title.clone(), reply));
            }
            // The preview is what the request carries: a diff, else a command, else nothing.
            let preview = match (request.diff, request.command) {
                (Some(unified), _) => Preview::Diff {
                    path: request.title.clone(),
                    unified,
                },
                (None, Some(command)) => Preview::Command {
                    command,
                    cwd: self.cwd.clone(),
                    timeout: None,
                },
                (None, None) => Preview::None,
            };
            self.bridge.send(UiEvent::Approval {
                id,
                title: crate::display::approval_title(&request.title, &request.title, false),
                tool: request.title,
                preview,
                choices: Choices::Agent {
                    options: request.options,
                },
            });
            // A refusal without one of the agent's options (Esc when it offered no reject) is a
            // cancel.
            answer.await.ok().and_then(|decide| decide.option)
        })
    }

    fn buffer_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            let args = vec![Value::from(path.display().to_string())];
            match self.nvim.exec_lua(lua::BUFFER_TEXT, args).await {
                Ok(Value::String(text)) => text.into_str(),
                Ok(_) => None,
                Err(err) => {
                    tracing::warn!(%err, "cannot read a buffer's text");
                    None
                }
            }
        })
    }

    fn editor(&self) -> &dyn crate::editor::Editor {
        &self.editor
    }

    fn can_ask(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move { self.nvim.list_uis().await.is_ok_and(|uis| !uis.is_empty()) })
    }
}
