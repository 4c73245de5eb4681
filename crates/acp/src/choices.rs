//! What an agent lets a person choose for its session: its modes (`modes` in the session/new
//! answer, `session/set_mode`, `current_mode_update`) and its config options (`configOptions`,
//! `session/set_config_option`, `config_option_update`: a model, a mode, a reasoning level, a
//! switch). Kept here as the agent last said them, and reported whole on every change, so the
//! front end can show and complete them without asking.
//!
//! Parsed leniently from JSON, like session/update: an option of a kind we do not know is left
//! out, never the whole list.

use serde_json::Value;

use super::update::str_field;
use super::{AcpEvent, AgentUpdate};

pub use agent_nvim_vocab::conversation::{ConfigOption, Offered};

/// The session's modes and options as the agent last reported them.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Choices {
    /// The current mode's id and the modes offered; None when the agent has no modes.
    pub(super) modes: Option<(String, Vec<Offered>)>,
    pub(super) options: Vec<ConfigOption>,
}

impl Choices {
    /// What a session/new (or session/load) answer offers.
    pub(super) fn of_session(answer: &Value) -> Choices {
        Choices {
            modes: modes(&answer["modes"]),
            options: options(&answer["configOptions"]),
        }
    }

    /// The events that show every choice as it is now (none for what is not offered).
    pub(super) fn events(&self) -> Vec<AcpEvent> {
        let mut events = Vec::new();
        if let Some((current, modes)) = &self.modes {
            events.push(AcpEvent::Agent(AgentUpdate::Modes {
                current: current.clone(),
                modes: modes.clone(),
            }));
        }
        if !self.options.is_empty() {
            events.push(AcpEvent::Agent(AgentUpdate::Options {
                options: self.options.clone(),
            }));
        }
        events
    }

    /// Applies a session/update about a choice; None when the update is about something else.
    pub(super) fn apply(&mut self, update: &Value) -> Option<Vec<AcpEvent>> {
        match update.get("sessionUpdate").and_then(Value::as_str)? {
            "current_mode_update" => {
                let id = str_field(update, "currentModeId")?;
                match &mut self.modes {
                    Some((current, _)) => *current = id,
                    // A mode never offered: shown as its id.
                    None => {
                        self.modes = Some((
                            id.clone(),
                            vec![Offered {
                                name: id.clone(),
                                id,
                                description: None,
                            }],
                        ))
                    }
                }
                Some(self.mode_event())
            }
            "config_option_update" => {
                self.options = options(&update["configOptions"]);
                Some(vec![AcpEvent::Agent(AgentUpdate::Options {
                    options: self.options.clone(),
                })])
            }
            _ => None,
        }
    }

    fn mode_event(&self) -> Vec<AcpEvent> {
        self.modes
            .as_ref()
            .map(|(current, modes)| {
                AcpEvent::Agent(AgentUpdate::Modes {
                    current: current.clone(),
                    modes: modes.clone(),
                })
            })
            .into_iter()
            .collect()
    }

    /// The option that chooses the mode, when the agent offers one (it supersedes `modes`).
    pub(super) fn mode_option(&self) -> Option<&ConfigOption> {
        self.options
            .iter()
            .find(|option| option.category.as_deref() == Some("mode"))
    }
}

/// `modes`: `{ currentModeId, availableModes: [{ id, name, description? }] }`.
fn modes(value: &Value) -> Option<(String, Vec<Offered>)> {
    let current = str_field(value, "currentModeId")?;
    let offered = value
        .get("availableModes")
        .and_then(Value::as_array)
        .map(|modes| modes.iter().filter_map(offered).collect())
        .unwrap_or_default();
    Some((current, offered))
}

fn offered(value: &Value) -> Option<Offered> {
    let id = str_field(value, "id").or_else(|| str_field(value, "value"))?;
    Some(Offered {
        name: str_field(value, "name").unwrap_or_else(|| id.clone()),
        description: str_field(value, "description"),
        id,
    })
}

/// `configOptions`: a list of select and boolean options; others are left out.
fn options(value: &Value) -> Vec<ConfigOption> {
    value
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|option| {
            let id = str_field(option, "id")?;
            let kind = str_field(option, "type").unwrap_or_else(|| "select".into());
            let (current, values) = match kind.as_str() {
                "boolean" => (
                    Value::Bool(option.get("currentValue")?.as_bool()?),
                    Vec::new(),
                ),
                "select" => {
                    let current = Value::String(str_field(option, "currentValue")?);
                    let mut values = Vec::new();
                    for item in option
                        .get("options")
                        .and_then(Value::as_array)
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                    {
                        match item.get("group") {
                            // A group: its values, in order.
                            Some(_) => values.extend(
                                item.get("options")
                                    .and_then(Value::as_array)
                                    .map(Vec::as_slice)
                                    .unwrap_or_default()
                                    .iter()
                                    .filter_map(offered),
                            ),
                            None => values.extend(offered(item)),
                        }
                    }
                    (current, values)
                }
                other => {
                    tracing::debug!(kind = other, "left out a config option of an unknown kind");
                    return None;
                }
            };
            Some(ConfigOption {
                name: str_field(option, "name").unwrap_or_else(|| id.clone()),
                description: str_field(option, "description"),
                category: str_field(option, "category"),
                id,
                kind,
                current,
                values,
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn modes_and_options_are_read_leniently_groups_flattened_unknown_kinds_left_out() {
        let choices = Choices::of_session(&json!({
            "sessionId": "s",
            "modes": {"currentModeId": "ask", "availableModes": [
                {"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code", "description": "Writes"},
                {"name": "no id"}]},
            "configOptions": [
                {"id": "model", "name": "Model", "category": "model", "type": "select",
                    "currentValue": "fast", "options": [
                        {"group": "a", "name": "A", "options": [{"value": "fast", "name": "Fast"}]},
                        {"value": "smart", "name": "Smart"}]},
                {"id": "web", "name": "Web search", "type": "boolean", "currentValue": false},
                {"id": "odd", "name": "Odd", "type": "slider", "currentValue": 3}]
        }));
        let (current, modes) = choices.modes.clone().unwrap();
        assert_eq!(current, "ask");
        assert_eq!(
            modes.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
            ["ask", "code"]
        );
        assert_eq!(choices.options.len(), 2);
        let model = &choices.options[0];
        assert_eq!(
            model
                .values
                .iter()
                .map(|v| v.id.as_str())
                .collect::<Vec<_>>(),
            ["fast", "smart"]
        );
        assert!(model.takes(&json!("smart")) && !model.takes(&json!("other")));
        assert!(choices.options[1].takes(&json!(true)));
        assert!(!choices.options[1].takes(&json!("true")));
    }

    #[test]
    fn updates_change_the_current_mode_and_replace_the_options() {
        let mut choices = Choices::of_session(&json!({
            "modes": {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"},
                {"id": "code", "name": "Code"}]}}));
        let events = choices
            .apply(&json!({"sessionUpdate": "current_mode_update", "currentModeId": "code"}))
            .unwrap();
        assert!(
            matches!(&events[..], [AcpEvent::Agent(AgentUpdate::Modes { current, .. })] if current == "code")
        );
        let events = choices
            .apply(
                &json!({"sessionUpdate": "config_option_update", "configOptions": [
                {"id": "web", "name": "Web", "type": "boolean", "currentValue": true}]}),
            )
            .unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(choices.options[0].current, json!(true));
        assert!(choices
            .apply(&json!({"sessionUpdate": "plan", "entries": []}))
            .is_none());
    }
}
