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
        let title = store
            .list()
            .into_iter()
            .find(|listed| listed.id == id)
            .map(|listed| listed.title)
            .unwrap_or_default();
        let loading = id.clone();
        let saved = tokio::task::spawn_blocking(move || store.load(&loading))
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
        if conversation.agent().is_some() {
            return Err(Value::from(format!(
                "agent: {} cannot be forked here: its conversation is its own (it would take session/fork, which agent.nvim does not use yet)",
                conversation.name()
            )));
        }
        let Some(id) = conversation.id() else {
            return Err(Value::from(
                "agent: nothing to fork yet: the conversation is saved from its first prompt (and only with a state directory)",
            ));
        };
        let store = self.store().await?;
        let title = fork.title.trim().to_string();
        let forked = tokio::task::spawn_blocking(move || store.fork(&id, fork.turn, &title))
            .await
            .map_err(|err| Value::from(format!("agent: the fork stopped: {err}")))?
            .map_err(|err| Value::from(format!("agent: not forked: {err}")))?;
        Ok(Value::from(forked))
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
