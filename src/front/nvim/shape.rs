//! What a person does to saved conversations besides resuming them: `:Agent export` (the
//! conversation as markdown), `:Agent name` (its saved title), and the resume list's rename and
//! delete ([`crate::sessions::shape`]).

use rmpv::Value;

use super::protocol;
use super::target::Target;
use crate::display;

impl Target {
    /// `rename`: the live conversation's saved file is listed as `title` from now on.
    pub(super) async fn renamed(&self, title: &str) {
        let title = title.trim();
        if title.is_empty() {
            return;
        }
        if let Some(conversation) = self.slot.conversation.lock().await.clone() {
            conversation.named(title);
        }
    }

    /// `export`: the conversation's saved file as markdown.
    pub(super) async fn export(&self) -> std::result::Result<Value, Value> {
        let store = self.slot.of_session(|s| s.store.clone()).await?;
        let conversation = self.slot.conversation.lock().await.clone();
        let id = conversation.and_then(|c| c.id());
        let (Some(store), Some(id)) = (store, id) else {
            return Err(Value::from(
                "agent: nothing to export yet: the conversation is saved from its first prompt (and only with a state directory, stdpath(\"state\"))",
            ));
        };
        let loading = id.clone();
        // Off the runtime's threads: the list reads every saved conversation.
        let (saved, title) = tokio::task::spawn_blocking(move || {
            let title = store
                .list()
                .into_iter()
                .find(|listed| listed.id == loading)
                .map(|listed| listed.title)
                .unwrap_or_default();
            store.load(&loading).map(|saved| (saved, title))
        })
        .await
        .map_err(|err| Value::from(format!("agent: the export stopped: {err}")))?
        .map_err(|err| Value::from(format!("agent: cannot export: {err}")))?;
        let markdown = crate::sessions::shape::markdown(&saved, &title);
        Ok(Value::Map(vec![
            (Value::from("id"), Value::from(id)),
            (Value::from("markdown"), Value::from(markdown)),
        ]))
    }

    /// `fork {turn?, title}`: the conversation's saved file forked ([`crate::sessions::Store::fork`]).
    pub(super) async fn fork(&self, args: Vec<Value>) -> std::result::Result<Value, Value> {
        let fork = protocol::arg::<protocol::Fork>(args)
            .map_err(|err| Value::from(format!("agent: bad fork message ({err})")))?;
        let conversation = self.slot.conversation.lock().await.clone();
        let Some(conversation) = conversation else {
            return Err(Value::from(super::bridge::NOT_STARTED));
        };
        if let Some(agent) = conversation.agent() {
            // Its history is the agent's: forked by the agent (`session/fork`), all of it (a
            // prompt number or the files are ours to cut, not the agent's).
            if fork.turn.is_some() || fork.code {
                return Err(Value::from(format!(
                    "agent: {} forks its whole conversation (session/fork): :Agent fork, without a prompt number or code",
                    conversation.name()
                )));
            }
            let session = agent
                .fork()
                .await
                .map_err(|err| Value::from(format!("agent: not forked: {err}")))?;
            let name = conversation.name().to_string();
            return Ok(Value::Map(vec![
                (
                    Value::from("id"),
                    Value::from(super::acp::agent_session_id(&name, &session)),
                ),
                (Value::from("agent"), Value::from(name)),
                (Value::from("session"), Value::from(session)),
            ]));
        }
        let Some(id) = conversation.id() else {
            return Err(Value::from(
                "agent: nothing to fork yet: the conversation is saved from its first prompt (and only with a state directory)",
            ));
        };
        let store = self.store().await?;
        // The files then, for `fork with code`: that prompt's checkpoint, or now's.
        let checkpoint = if fork.code {
            let checkpoints = self.slot.of_session(|s| s.checkpoints.clone()).await?;
            let Some(checkpoints) = checkpoints else {
                return Err(Value::from(
                    "agent: not forked with code: checkpoints are off (no state directory)",
                ));
            };
            let failed = |err: crate::checkpoint::CheckpointError| {
                Value::from(format!("agent: not forked with code: {err}"))
            };
            Some(match fork.turn {
                Some(turn) => checkpoints
                    .points(&checkpoints.conversation())
                    .await
                    .map_err(failed)?
                    .into_iter()
                    .find(|point| point.turn == turn)
                    .map(|point| point.id)
                    .ok_or_else(|| {
                        Value::from(format!(
                            "agent: not forked with code: prompt {turn} has no checkpoint"
                        ))
                    })?,
                None => {
                    return Err(Value::from(
                        "agent: fork with code needs the prompt to fork before (:Agent fork with code 2): its files are that prompt's checkpoint",
                    ))
                }
            })
        } else {
            None
        };
        let title = fork.title.trim().to_string();
        let forked = tokio::task::spawn_blocking(move || store.fork(&id, fork.turn, &title))
            .await
            .map_err(|err| Value::from(format!("agent: the fork stopped: {err}")))?
            .map_err(|err| Value::from(format!("agent: not forked: {err}")))?;
        let mut answer = vec![(Value::from("id"), Value::from(forked))];
        if let Some(checkpoint) = checkpoint {
            answer.push((Value::from("checkpoint"), Value::from(checkpoint)));
        }
        Ok(Value::Map(answer))
    }

    /// `adopt {from, checkpoint}`: conversation `from`'s checkpoint restored into this
    /// conversation's own worktree (never into a workspace the person works in).
    pub(super) async fn adopt(
        &self,
        args: Vec<Value>,
        nvim: super::Nvim,
    ) -> std::result::Result<Value, Value> {
        let adopt = protocol::arg::<protocol::Adopt>(args)
            .map_err(|err| Value::from(format!("agent: bad adopt message ({err})")))?;
        if adopt.from == self.slot.id {
            return Err(Value::from(
                "agent: a fork's files go into the fork's own worktree, not the conversation forked from",
            ));
        }
        let source = self
            .slots
            .get(adopt.from)
            .ok_or_else(|| Value::from("agent: the conversation forked from was closed"))?;
        let from = source
            .of_session(|s| s.checkpoints.clone())
            .await?
            .ok_or_else(|| Value::from("agent: checkpoints are off (no state directory)"))?;
        // The fork's `start` (its worktree made) may still be under way.
        for _ in 0..200 {
            if self.slot.session.lock().await.is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let (here, branch) = self
            .slot
            .of_session(|s| {
                (
                    s.checkpoints.clone(),
                    s.worktree.as_ref().map(|(w, _)| w.branch.clone()),
                )
            })
            .await?;
        let Some(branch) = branch else {
            return Err(Value::from(
                "agent: the files are restored only into a worktree of the fork's own",
            ));
        };
        let here =
            here.ok_or_else(|| Value::from("agent: checkpoints are off (no state directory)"))?;
        let failed = |err: crate::checkpoint::CheckpointError| Value::from(format!("agent: {err}"));
        let adopted = here.adopt(&from, &adopt.checkpoint).await.map_err(failed)?;
        let editor = super::adapters::NvimEditor { nvim };
        here.restore(&adopted, &editor).await.map_err(failed)?;
        if let Some(id) = &adopt.session {
            let theirs = source.of_session(|s| s.store.clone()).await?;
            let ours = self.slot.of_session(|s| s.store.clone()).await?;
            if let (Some(theirs), Some(ours)) = (theirs, ours) {
                theirs
                    .move_to(&ours, id)
                    .map_err(|err| Value::from(format!("agent: {err}")))?;
            }
        }
        Ok(Value::from(format!(
            "the files as they were then, in worktree {}",
            display::one_line(&branch)
        )))
    }

    /// `session_rename {id, title}`.
    pub(super) async fn session_rename(
        &self,
        args: Vec<Value>,
    ) -> std::result::Result<Value, Value> {
        let rename = protocol::arg::<protocol::Rename>(args)
            .map_err(|err| Value::from(format!("agent: bad session_rename message ({err})")))?;
        let title = rename.title.trim().to_string();
        let Some(id) = rename.id.filter(|_| !title.is_empty()) else {
            return Err(Value::from(
                "agent: a rename needs a conversation and a title",
            ));
        };
        // One open here is named through its own writer (its title follows it too).
        for slot in self.slots.all() {
            let open = slot.conversation.lock().await.clone();
            if let Some(open) = open.filter(|c| c.id().as_deref() == Some(id.as_str())) {
                open.named(&title);
                return Ok(Value::from(display::one_line(&title)));
            }
        }
        let store = self.store().await?;
        store
            .rename(&id, &title)
            .map_err(|err| Value::from(format!("agent: not renamed: {err}")))?;
        Ok(Value::from(display::one_line(&title)))
    }

    /// `session_delete {id}`: refused while a conversation of this Neovim has it open.
    pub(super) async fn session_delete(&self, args: &[Value]) -> std::result::Result<Value, Value> {
        let id = match args.first() {
            Some(Value::Map(fields)) => fields
                .iter()
                .find(|(k, _)| k.as_str() == Some("id"))
                .and_then(|(_, v)| v.as_str())
                .map(str::to_string),
            _ => None,
        }
        .ok_or_else(|| Value::from("agent: a delete needs a conversation"))?;
        if super::acp::is_agent_session(&id) {
            // The agent's own session: the agent deletes it (`session/delete`).
            let conversation = self.slot.conversation.lock().await.clone();
            let conversation =
                conversation.ok_or_else(|| Value::from(super::bridge::NOT_STARTED))?;
            let name = conversation.name().to_string();
            let (Some(agent), Some(session)) =
                (conversation.agent(), super::acp::agent_session(&id, &name))
            else {
                return Err(Value::from(format!(
                    "agent: '{}' is not a session of {}; connect its agent (:Agent acp) to delete it",
                    crate::display::one_line(&id),
                    crate::display::one_line(&name)
                )));
            };
            agent
                .delete(session)
                .await
                .map_err(|err| Value::from(format!("agent: not deleted: {err}")))?;
            return Ok(Value::from(format!(
                "agent: {name} deleted its session {}",
                crate::display::one_line(session)
            )));
        }
        for slot in self.slots.all() {
            let open = slot.conversation.lock().await.clone();
            if open.and_then(|c| c.id()).as_deref() == Some(id.as_str()) {
                return Err(Value::from(
                    "agent: not deleted: that conversation is open here; close it first (:Agent close in its tab page)",
                ));
            }
        }
        let store = self.store().await?;
        store
            .delete(&id)
            .map_err(|err| Value::from(format!("agent: not deleted: {err}")))?;
        let checkpoints = self.slot.of_session(|s| s.checkpoints.clone()).await?;
        let forgotten = match checkpoints {
            Some(checkpoints) => checkpoints.forget(&id).await.unwrap_or_else(|err| {
                tracing::warn!(%err, "a deleted conversation's checkpoints were kept");
                0
            }),
            None => 0,
        };
        Ok(Value::from(format!(
            "agent: deleted conversation {id} ({forgotten} checkpoint{} forgotten)",
            if forgotten == 1 { "" } else { "s" }
        )))
    }

    async fn store(&self) -> std::result::Result<crate::sessions::Store, Value> {
        self.slot
            .of_session(|s| s.store.clone())
            .await?
            .ok_or_else(|| {
                Value::from("agent: conversations are not saved here (no state directory)")
            })
    }
}
