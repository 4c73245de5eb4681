//! `:Agent edit`'s own turn: the `inline` message checked and run as an agent of its own over
//! the conversation's tools ([`crate::inline`]), outside its history; edit_file on the file asked
//! about shown in that buffer ([`NvimBuffer`]: `inline_proposal`, answered by `inline_answer`),
//! what it does told to its pending area (`inline_status`), and its end (`inline_done`).

use std::sync::{Arc, Mutex as SyncMutex};

use futures::future::BoxFuture;
use rmpv::Value;

use super::protocol::{self, lua, InlineHunk, UiEvent};
use super::slot::Slot;
use super::target::Target;
use super::ui::Ui;
use super::Nvim;
use crate::agent::Report;
use crate::tools::inline::{Buffer, Kept, Shown};
use agent_nvim_vocab::events::{Event, Outcome};

impl Target {
    /// `inline`: checks the path, builds the edit's agent and runs its turn in a task of its own
    /// (a conversation's turn may run meanwhile); `inline_stop` or `cancel` stops it.
    pub(super) async fn inline(&self, inline: protocol::Inline, nvim: Nvim) {
        let id = inline.inline;
        let ui = self.slot.ui.clone();
        let done = |message: String| {
            ui.send(UiEvent::InlineDone {
                inline: id,
                ok: false,
                message,
                cost: None,
            })
        };
        let built = self
            .slot
            .of_session(|session| {
                let base = &session.inline;
                let target =
                    base.tools
                        .workspace
                        .resolve_literal(&inline.path)
                        .map_err(|refusal| {
                            format!(
                                "agent: {refusal}; :Agent edit edits files inside the workspace"
                            )
                        })?;
                let ask = crate::inline::Ask {
                    rel: target.rel.clone(),
                    first: inline.first,
                    last: inline.last,
                    filetype: inline.filetype.clone(),
                    excerpt: inline.excerpt.clone(),
                    diagnostics: inline.diagnostics.clone(),
                    instruction: inline.instruction.clone(),
                };
                let buffer = Arc::new(NvimBuffer {
                    nvim: nvim.clone(),
                    ui: ui.clone(),
                    inline: id,
                });
                let choice = chosen(
                    &base.choice,
                    inline.provider.as_deref(),
                    inline.model.as_deref(),
                );
                crate::inline::agent(
                    &choice,
                    base.tools.clone(),
                    target.path,
                    buffer,
                    base.max_turns,
                    base.instructions.clone(),
                )
                .map(|agent| {
                    let agent = agent
                        .with_max_cost(base.max_cost)
                        .spending_apart(base.spend.clone());
                    (agent, ask)
                })
                .map_err(|err| super::target::no_provider(&err))
            })
            .await;
        let (mut agent, ask) = match built {
            Ok(Ok(built)) => built,
            Ok(Err(message)) => return done(message),
            Err(_) => return done(super::bridge::NOT_STARTED.to_string()),
        };
        let token = self.slot.shutdown.child_token();
        if let Ok(mut inlines) = self.slot.inlines.lock() {
            inlines.insert(id, token.clone());
        }
        let slot = self.slot.clone();
        tracing::info!(inline = id, rel = %ask.rel, first = ask.first, last = ask.last, "inline edit");
        tokio::spawn(async move {
            let report = Told {
                ui: slot.ui.clone(),
                inline: id,
                said: SyncMutex::default(),
                error: SyncMutex::default(),
            };
            let outcome = agent
                .prompt(crate::inline::prompt(&ask).into(), &report, &token)
                .await;
            tracing::info!(inline = id, ?outcome, "inline edit ended");
            forget(&slot, id);
        });
    }
}

/// The provider choice of an inline edit: the conversation's, with `setup({ inline = ... })`'s
/// provider and model over it. Another provider than the conversation's keeps none of its
/// endpoint or key (they are that provider's).
fn chosen(
    base: &crate::llm::ProviderChoice,
    provider: Option<&str>,
    model: Option<&str>,
) -> crate::llm::ProviderChoice {
    let mut choice = base.clone();
    let provider = provider.filter(|p| !p.is_empty());
    if let Some(provider) = provider {
        if choice.provider.as_deref() != Some(provider) {
            choice.provider = Some(provider.to_string());
            choice.base_url = None;
            choice.api_key = None;
            choice.api_key_cmd = None;
            choice.model = None;
        }
    }
    if let Some(model) = model.filter(|m| !m.is_empty()) {
        choice.model = Some(model.to_string());
    }
    choice
}

/// Forgets inline edit `id`'s cancel token.
fn forget(slot: &Arc<Slot>, id: u64) {
    if let Ok(mut inlines) = slot.inlines.lock() {
        inlines.remove(&id);
    }
}

impl Slot {
    /// `inline_stop`: stops inline edit `id`, if it runs.
    pub(super) fn stop_inline(&self, id: u64) {
        if let Ok(inlines) = self.inlines.lock() {
            if let Some(token) = inlines.get(&id) {
                token.cancel();
            }
        }
    }
}

/// The buffer of one inline edit, as the plugin holds it.
pub(super) struct NvimBuffer {
    nvim: Nvim,
    ui: Ui,
    inline: u64,
}

impl Buffer for NvimBuffer {
    fn text(&self) -> BoxFuture<'_, Option<(String, u64)>> {
        Box::pin(async move {
            let value = self
                .nvim
                .exec_lua(lua::INLINE_TEXT, vec![Value::from(self.inline)])
                .await;
            let map = match value {
                Ok(Value::Map(map)) => map,
                Ok(_) => return None,
                Err(err) => {
                    tracing::warn!(%err, "the inline edit's buffer text could not be read");
                    return None;
                }
            };
            let field = |name: &str| {
                map.iter()
                    .find(|(k, _)| k.as_str() == Some(name))
                    .map(|(_, v)| v.clone())
            };
            let text = field("text")?.as_str()?.to_string();
            let stamp = field("stamp")?.as_u64()?;
            Some((text, stamp))
        })
    }

    fn review(&self, shown: Shown) -> BoxFuture<'_, Option<Vec<Kept>>> {
        Box::pin(async move {
            let (question, answer) = self.ui.open_inline();
            // Dropped unanswered (a cancel): the question goes with it.
            let _forget = Forget {
                ui: &self.ui,
                question,
            };
            self.ui.send(UiEvent::InlineProposal {
                inline: self.inline,
                question,
                stamp: shown.stamp,
                hunks: shown
                    .hunks
                    .into_iter()
                    .map(|hunk| InlineHunk {
                        at: hunk.at,
                        removed: hunk.removed,
                        added: hunk.added,
                        shown: Vec::new(),
                    })
                    .collect(),
            });
            answer.await.ok()
        })
    }
}

struct Forget<'a> {
    ui: &'a Ui,
    question: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.ui.inline_questions().forget(self.question);
    }
}

/// An inline edit's turn, told to its pending area: each tool it runs as its status, and its
/// end with the model's last words or the error.
struct Told {
    ui: Ui,
    inline: u64,
    /// The model's text since its last tool call.
    said: SyncMutex<String>,
    error: SyncMutex<Option<String>>,
}

impl Report for Told {
    fn report(&self, event: Event) {
        match event {
            Event::Text { text } => {
                if let Ok(mut said) = self.said.lock() {
                    said.push_str(&text);
                }
            }
            Event::ToolStarted { name, args, .. } => {
                if let Ok(mut said) = self.said.lock() {
                    said.clear();
                }
                let about = args
                    .get("path")
                    .or_else(|| args.get("command"))
                    .and_then(serde_json::Value::as_str)
                    .map(|s| s.lines().next().unwrap_or_default().to_string())
                    .unwrap_or_default();
                let about = crate::text::clamp_head(&about, 60).0.to_string();
                self.ui.send(UiEvent::InlineStatus {
                    inline: self.inline,
                    text: format!("{name} {about}").trim_end().to_string(),
                });
            }
            Event::Error { message } => {
                if let Ok(mut error) = self.error.lock() {
                    *error = Some(message);
                }
            }
            Event::TurnDone {
                outcome,
                message,
                cost,
                ..
            } => {
                let said = self
                    .said
                    .lock()
                    .map(|said| said.trim().to_string())
                    .unwrap_or_default();
                let error = self.error.lock().ok().and_then(|e| e.clone());
                let message = match (outcome, error) {
                    (Outcome::Done, _) if said.is_empty() => format!("agent: edit: {message}"),
                    (Outcome::Done, _) => format!("agent: {said} ({message})"),
                    (Outcome::Cancelled, _) => "agent: the edit was stopped".to_string(),
                    (_, Some(error)) => format!("agent: the edit failed: {error}"),
                    (_, None) => format!("agent: the edit failed: {message}"),
                };
                self.ui.send(UiEvent::InlineDone {
                    inline: self.inline,
                    ok: outcome == Outcome::Done,
                    message,
                    cost,
                });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn another_provider_for_inline_edits_keeps_none_of_the_conversations_endpoint_or_key() {
        let base = crate::llm::ProviderChoice {
            provider: Some("anthropic".into()),
            model: Some("claude-opus-4-1".into()),
            base_url: Some("http://127.0.0.1:1".into()),
            ..Default::default()
        };
        let same = chosen(&base, None, Some("claude-haiku-4-5"));
        assert_eq!(same.model.as_deref(), Some("claude-haiku-4-5"));
        assert_eq!(same.base_url.as_deref(), Some("http://127.0.0.1:1"));
        let other = chosen(&base, Some("openai"), None);
        assert_eq!(other.provider.as_deref(), Some("openai"));
        assert_eq!((other.model, other.base_url), (None, None));
        assert_eq!(chosen(&base, Some(""), Some("")), base);
    }
}
