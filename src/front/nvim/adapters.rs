//! The core's views of Neovim, each a call into the plugin's Lua ([`super::protocol::lua`]):
//! the asker that shows the gate's questions in the picker, the editor view of open buffers, and
//! an external agent's host.

use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use rmpv::Value;

use super::protocol::{lua, BufferState, Choice, Choices, Preview, UiEvent};
use super::ui::{Editable, Ui};
use super::Nvim;
use crate::acp::{AcpEvent, AcpHost, PermissionAsk, Picked};
use crate::approval::Asker;
use crate::editor::Editor;
use crate::Error;
use agent_nvim_vocab::approval::{Action, ApprovalRequest, Decision};

/// Asks through the plugin's picker; nobody to ask when no UI is attached (headless Neovim).
pub(super) struct NvimAsker {
    pub(super) nvim: Nvim,
    pub(super) ui: Ui,
    pub(super) cwd: String,
    pub(super) timeout: f64,
}

impl Asker for NvimAsker {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, Option<Decision>> {
        Box::pin(async move {
            match self.nvim.list_uis().await {
                Ok(uis) if !uis.is_empty() => {}
                Ok(_) => {
                    tracing::info!(detail = %request.detail, "no UI attached: refusing");
                    return None;
                }
                Err(err) => {
                    tracing::warn!(%err, "cannot list UIs: refusing");
                    return None;
                }
            }
            // The question's id is the registry's, shared with an external agent's questions.
            let (id, answer) = self.ui.open_question(request.tool.to_string());
            let (can_edit, _forget) = self.ui.offer(id, Editable::of(&request));
            let is_command = matches!(request.action, Action::Command { .. });
            let preview = match (&request.action, request.diff) {
                (Action::Command { command }, _) => Preview::Command {
                    command: command.clone(),
                    cwd: self.cwd.clone(),
                    timeout: Some(self.timeout),
                },
                (Action::Edit { rel }, Some(unified)) => Preview::Diff {
                    path: rel.clone(),
                    unified,
                },
                (Action::Edit { .. }, None) => Preview::None,
            };
            self.ui.ask_lua(UiEvent::Approval {
                id,
                title: crate::display::approval_title(request.tool, &request.detail, is_command),
                choices: Choices::Builtin {
                    choices: Choice::builtin(&request.action, can_edit),
                },
                tool: request.tool.to_string(),
                preview,
            });
            answer.await.ok().map(|decide| decide.decision)
        })
    }
}

/// Open buffers, asked of the plugin.
#[derive(Clone)]
pub(super) struct NvimEditor {
    pub(super) nvim: Nvim,
}

impl NvimEditor {
    async fn lua(&self, code: &str, path: Option<&Path>) -> Option<Value> {
        let args = path
            .map(|p| vec![Value::from(p.display().to_string())])
            .unwrap_or_default();
        match self.nvim.exec_lua(code, args).await {
            Ok(value) => Some(value),
            Err(err) => {
                tracing::warn!(%err, code, "buffer query failed");
                None
            }
        }
    }
}

impl Editor for NvimEditor {
    fn has_unsaved_changes<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            self.lua(lua::BUFFER_STATE, Some(path))
                .await
                .and_then(|v| rmpv::ext::from_value::<BufferState>(v).ok())
                .is_some_and(|state| state.loaded && state.modified)
        })
    }

    fn file_written<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.lua(lua::RELOAD, Some(path)).await;
        })
    }

    fn command_finished(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.lua(lua::CHECKTIME, None).await;
        })
    }

    fn unsaved_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            if !self.has_unsaved_changes(path).await {
                return None;
            }
            match self.lua(lua::BUFFER_TEXT, Some(path)).await {
                Some(Value::String(text)) => text.into_str(),
                _ => None,
            }
        })
    }
}

impl From<Box<nvim_rs::error::CallError>> for Error {
    fn from(err: Box<nvim_rs::error::CallError>) -> Self {
        Error::Io {
            context: "Neovim did not answer",
            source: std::io::Error::other(err.to_string()),
        }
    }
}

/// Closes elicitation `id`'s float when its asker stops waiting before the person answered.
struct CloseElicitation<'a> {
    ui: &'a Ui,
    id: u64,
    answered: bool,
}

impl Drop for CloseElicitation<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.ui.elicitations().forget(self.id);
            self.ui.send(UiEvent::ElicitationClosed { id: self.id });
        }
    }
}

/// The external agent's view of Neovim.
pub(super) struct NvimHost {
    pub(super) ui: Ui,
    pub(super) nvim: Nvim,
    pub(super) editor: NvimEditor,
    pub(super) cwd: String,
}

impl AcpHost for NvimHost {
    fn event(&self, event: AcpEvent) {
        self.ui.send(event.into());
    }

    fn ask_permission(&self, request: PermissionAsk) -> BoxFuture<'_, Option<Picked>> {
        Box::pin(async move {
            let (id, answer) = self.ui.open_question(request.title.clone());
            let editable = request.edit.as_ref().map(|edit| Editable::File {
                rel: crate::display::one_line(&edit.rel),
                now: edit.now.as_deref().map(Arc::from),
                proposed: Arc::from(edit.proposed.as_str()),
            });
            let (can_edit, _forget) = self.ui.offer(id, editable);
            // The preview is what the request carries: a diff, else a command, else nothing.
            let preview = match (request.diff, request.command) {
                (Some(unified), _) => Preview::Diff {
                    path: request.title.clone(),
                    unified,
                },
                (None, Some(command)) => Preview::Command {
                    command,
                    cwd: request.cwd.unwrap_or_else(|| self.cwd.clone()),
                    timeout: request.timeout,
                },
                (None, None) => Preview::None,
            };
            let reject = request
                .options
                .iter()
                .find(|o| o.kind.starts_with("reject"))
                .map(|o| o.id.clone());
            // After the agent's updates the turn reported before asking (its tool row).
            self.ui.ask_lua(UiEvent::Approval {
                id,
                title: crate::display::approval_title(&request.title, &request.title, false),
                tool: request.title,
                preview,
                choices: Choices::agent(request.options, can_edit),
            });
            let decide = answer.await.ok()?;
            // A refusal without one of the agent's options (the backend's own, every hunk
            // dropped) is the agent's first reject option; with none, a cancel.
            let option = match (&decide.decision, decide.option) {
                (Decision::Refuse { .. }, None) => reject,
                (_, option) => option,
            };
            let edited = match decide.decision {
                Decision::Edited { text } => Some(text),
                _ => None,
            };
            option.map(|option| Picked { option, edited })
        })
    }

    fn elicit(
        &self,
        asked: crate::acp::elicit::Elicitation,
    ) -> BoxFuture<'_, Option<crate::acp::elicit::Elicited>> {
        Box::pin(async move {
            let (id, answer) = self.ui.open_elicitation();
            // Dropped unanswered (its turn ended, the agent said it is complete): the float
            // closes and the question is forgotten.
            let closer = CloseElicitation {
                ui: &self.ui,
                id,
                answered: false,
            };
            self.ui.ask_lua(UiEvent::Elicitation { id, asked });
            let elicited = answer.await.ok();
            let mut closer = closer;
            closer.answered = elicited.is_some();
            elicited
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
