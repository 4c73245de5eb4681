//! Elicitation (`elicitation/create`, stable in v1): the agent asks the person for some values
//! (a form built from a restricted JSON schema: strings, numbers, booleans, one or several of a
//! list) or to open a URL (a sign-in, a payment) and say so. The request is read with the
//! protocol crate's own types, so what does not match the schema is refused as invalid params;
//! what the person answers is checked here against the same schema before it is sent, whatever
//! the front end did.

use agent_client_protocol::v1::schema::{
    CreateElicitationRequest, ElicitationMode, ElicitationPropertySchema, ElicitationScope,
    MultiSelectItems, StringFormat,
};
use serde::Serialize;
use serde_json::{json, Map, Value};

/// What the agent asks, as the front end shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Elicitation {
    /// The agent's name.
    pub agent: String,
    /// Why it asks, in its words.
    pub message: String,
    #[serde(flatten)]
    pub ask: Ask,
}

/// A form to fill in, or a URL to open.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Ask {
    Form {
        title: Option<String>,
        description: Option<String>,
        /// In the schema's order (its properties are a map: by name).
        fields: Vec<Field>,
    },
    Url {
        /// The whole URL, http or https only (anything else is refused before asking).
        url: String,
        /// Its host, as the URL names it (an international name in its ASCII form).
        host: String,
        /// The agent's id for it, which `elicitation/complete` names.
        #[serde(skip)]
        elicitation_id: String,
    },
}

/// One value the form asks for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Field {
    /// The property's name (the key of the answer).
    pub name: String,
    /// Its title, or its name.
    pub title: String,
    pub description: Option<String>,
    pub required: bool,
    /// The schema's default: the form starts with it.
    pub default: Option<Value>,
    #[serde(flatten)]
    pub kind: Kind,
}

/// What kind of value a field takes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Kind {
    Text {
        min: Option<u32>,
        max: Option<u32>,
        /// `email`, `uri`, `date` or `date-time`: shown as a hint; the agent checks it.
        format: Option<String>,
    },
    Number {
        integer: bool,
        min: Option<f64>,
        max: Option<f64>,
    },
    Boolean,
    /// One of `options`.
    Choice {
        options: Vec<Choice>,
    },
    /// Several of `options`.
    Many {
        options: Vec<Choice>,
        min: Option<u64>,
        max: Option<u64>,
    },
}

/// One value a choice field may take, and how it is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Choice {
    pub value: String,
    pub title: String,
}

/// The person's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Elicited {
    /// The values, by field name.
    Accept(Map<String, Value>),
    Decline,
    Cancel,
}

/// What an elicitation belongs to.
#[derive(Debug, Clone, PartialEq)]
pub enum Scope {
    /// A session: asked during a turn of it only.
    Session,
    /// One of our requests, by its JSON-RPC id: asked while that request waits for its answer.
    Request(Value),
}

/// `elicitation/create`'s params read: what to ask, and what it belongs to, or why it cannot
/// be asked.
pub fn read(agent: &str, params: &Value) -> Result<(Elicitation, Scope), String> {
    let request: CreateElicitationRequest = serde_json::from_value(params.clone())
        .map_err(|err| format!("not an elicitation/create request: {err}"))?;
    let (ask, scope) = match request.mode {
        ElicitationMode::Form(form) => {
            let schema = form.requested_schema;
            let required = schema.required.unwrap_or_default();
            let fields = schema
                .properties
                .into_iter()
                .map(|(name, property)| field(name, property, &required))
                .collect::<Result<Vec<_>, _>>()?;
            let ask = Ask::Form {
                title: schema.title,
                description: schema.description,
                fields,
            };
            (ask, form.scope)
        }
        ElicitationMode::Url(url) => {
            let (normalized, host) = web_url(&url.url)?;
            let ask = Ask::Url {
                url: normalized,
                host,
                elicitation_id: url.elicitation_id.0.to_string(),
            };
            (ask, url.scope)
        }
        _ => return Err("its mode is neither form nor url".into()),
    };
    let scope = match scope {
        ElicitationScope::Request(request) => {
            Scope::Request(serde_json::to_value(request.request_id).unwrap_or(Value::Null))
        }
        _ => Scope::Session,
    };
    Ok((
        Elicitation {
            agent: agent.to_string(),
            message: request.message,
            ask,
        },
        scope,
    ))
}

/// An http or https URL as the WHATWG parser writes it (what is shown is what opens: control
/// characters percent-encoded, an international name in its ASCII form), and its host; any
/// other URL is refused (a file, a script, an app's scheme: nothing a person should be sent to
/// by an agent).
fn web_url(url: &str) -> Result<(String, String), String> {
    let parsed = url::Url::parse(url).map_err(|err| format!("its URL does not parse: {err}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "its URL is a {} URL, and only http and https URLs are opened",
            parsed.scheme()
        ));
    }
    let host = parsed
        .host_str()
        .map(str::to_string)
        .ok_or_else(|| "its URL has no host".to_string())?;
    Ok((parsed.to_string(), host))
}

fn field(
    name: String,
    property: ElicitationPropertySchema,
    required: &[String],
) -> Result<Field, String> {
    let choices = |values: Vec<String>| -> Vec<Choice> {
        values
            .into_iter()
            .map(|value| Choice {
                title: value.clone(),
                value,
            })
            .collect()
    };
    let titled = |options: Vec<agent_client_protocol::v1::schema::EnumOption>| -> Vec<Choice> {
        options
            .into_iter()
            .map(|option| Choice {
                value: option.value,
                title: option.title,
            })
            .collect()
    };
    let (title, description, default, kind) = match property {
        ElicitationPropertySchema::String(s) => {
            let kind = match (s.one_of, s.enum_values) {
                (Some(options), _) => Kind::Choice {
                    options: titled(options),
                },
                (None, Some(values)) => Kind::Choice {
                    options: choices(values),
                },
                (None, None) => Kind::Text {
                    min: s.min_length,
                    max: s.max_length,
                    format: s.format.map(|format| {
                        match format {
                            StringFormat::Email => "email",
                            StringFormat::Uri => "uri",
                            StringFormat::Date => "date",
                            StringFormat::DateTime => "date-time",
                            _ => "text",
                        }
                        .to_string()
                    }),
                },
            };
            (s.title, s.description, s.default.map(Value::from), kind)
        }
        ElicitationPropertySchema::Number(n) => (
            n.title,
            n.description,
            n.default.map(Value::from),
            Kind::Number {
                integer: false,
                min: n.minimum,
                max: n.maximum,
            },
        ),
        ElicitationPropertySchema::Integer(n) => (
            n.title,
            n.description,
            n.default.map(Value::from),
            Kind::Number {
                integer: true,
                // Bounds an integer field shows: exact for any a person would type.
                #[allow(clippy::cast_precision_loss)]
                min: n.minimum.map(|v| v as f64),
                #[allow(clippy::cast_precision_loss)]
                max: n.maximum.map(|v| v as f64),
            },
        ),
        ElicitationPropertySchema::Boolean(b) => (
            b.title,
            b.description,
            b.default.map(Value::from),
            Kind::Boolean,
        ),
        ElicitationPropertySchema::Array(many) => {
            let options = match many.items {
                MultiSelectItems::String(items) => choices(items.values),
                MultiSelectItems::Titled(items) => titled(items.options),
                _ => return Err(format!("field {name} is a list of a kind not known here")),
            };
            (
                many.title,
                many.description,
                many.default.map(Value::from),
                Kind::Many {
                    options,
                    min: many.min_items,
                    max: many.max_items,
                },
            )
        }
        _ => return Err(format!("field {name} is of a type not known here")),
    };
    Ok(Field {
        required: required.contains(&name),
        title: title
            .filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| name.clone()),
        name,
        description,
        default,
        kind,
    })
}

/// The answer's content checked against the form: every required field there, every value
/// of its field's kind and within its bounds; fields the form does not have are dropped. Why
/// not, for the log, when it fails (the front end checks first: this is the backend's word).
pub fn check(
    fields: &[Field],
    mut content: Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let mut checked = Map::new();
    for field in fields {
        let Some(value) = content.remove(&field.name).filter(|v| !v.is_null()) else {
            if field.required {
                return Err(format!("{} is required", field.name));
            }
            continue;
        };
        // A string default comes back as the person was shown it (made visible): the agent
        // gets its own default back, not the shown form of it.
        let value = match (&value, &field.default) {
            (Value::String(got), Some(Value::String(raw)))
                if got != raw
                    && *got
                        == agent_nvim_text::escape::visible_owned(
                            raw.clone(),
                            agent_nvim_text::escape::Layout::OneLine,
                        ) =>
            {
                Value::String(raw.clone())
            }
            _ => value,
        };
        if let Err(why) = fits(&field.kind, &value) {
            return Err(format!("{}: {why}", field.name));
        }
        checked.insert(field.name.clone(), value);
    }
    Ok(checked)
}

fn fits(kind: &Kind, value: &Value) -> Result<(), String> {
    let within = |n: f64, min: Option<f64>, max: Option<f64>| {
        min.is_none_or(|min| n >= min) && max.is_none_or(|max| n <= max)
    };
    match kind {
        Kind::Text { min, max, .. } => {
            let text = value.as_str().ok_or("not a string")?;
            let length = text.chars().count();
            let fits = min.is_none_or(|min| length >= min as usize)
                && max.is_none_or(|max| length <= max as usize);
            fits.then_some(())
                .ok_or_else(|| "its length is out of bounds".into())
        }
        Kind::Number { integer, min, max } => {
            let n = if *integer {
                // An integer field's value is an integer, bounded as shown.
                #[allow(clippy::cast_precision_loss)]
                value.as_i64().map(|n| n as f64)
            } else {
                value.as_f64()
            }
            .ok_or("not a number of its kind")?;
            within(n, *min, *max)
                .then_some(())
                .ok_or_else(|| "out of bounds".into())
        }
        Kind::Boolean => value
            .as_bool()
            .map(|_| ())
            .ok_or_else(|| "not a boolean".into()),
        Kind::Choice { options } => {
            let text = value.as_str().ok_or("not a string")?;
            options
                .iter()
                .any(|o| o.value == text)
                .then_some(())
                .ok_or_else(|| "not one of its choices".into())
        }
        Kind::Many { options, min, max } => {
            let picked = value.as_array().ok_or("not a list")?;
            let known = picked.iter().all(|v| {
                v.as_str()
                    .is_some_and(|text| options.iter().any(|o| o.value == text))
            });
            let count = picked.len() as u64;
            let fits = min.is_none_or(|min| count >= min) && max.is_none_or(|max| count <= max);
            (known && fits)
                .then_some(())
                .ok_or_else(|| "not a list of its choices within bounds".into())
        }
    }
}

/// The `elicitation/create` result for `elicited`.
pub fn answer(elicited: &Elicited) -> Value {
    match elicited {
        // Nothing to send (a URL's accept, a form of optional fields left empty): no content.
        Elicited::Accept(content) if content.is_empty() => json!({"action": "accept"}),
        Elicited::Accept(content) => json!({"action": "accept", "content": content}),
        Elicited::Decline => json!({"action": "decline"}),
        Elicited::Cancel => json!({"action": "cancel"}),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::CreateElicitationResponse;

    fn form() -> Value {
        json!({
            "sessionId": "s1",
            "mode": "form",
            "message": "Set up the database",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "title": "Name", "minLength": 1},
                    "port": {"type": "integer", "minimum": 1, "maximum": 65535, "default": 5432},
                    "tls": {"type": "boolean", "default": true},
                    "engine": {"type": "string", "oneOf": [
                        {"const": "pg", "title": "PostgreSQL"},
                        {"const": "my", "title": "MySQL"}
                    ]},
                    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 1}
                },
                "required": ["name", "engine"]
            }
        })
    }

    fn fields() -> Vec<Field> {
        match read("test", &form()).unwrap().0.ask {
            Ask::Form { fields, .. } => fields,
            Ask::Url { .. } => panic!("a form"),
        }
    }

    #[test]
    fn a_form_is_read_field_by_field_with_its_defaults_and_required_marks() {
        let (asked, scope) = read("test", &form()).unwrap();
        assert_eq!(scope, Scope::Session);
        assert_eq!(asked.message, "Set up the database");
        let fields = fields();
        let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["engine", "name", "port", "tags", "tls"]);
        assert!(fields[0].required && fields[1].required && !fields[2].required);
        assert_eq!(fields[1].title, "Name");
        assert_eq!(fields[2].default, Some(json!(5432)));
        assert_eq!(
            fields[0].kind,
            Kind::Choice {
                options: vec![
                    Choice {
                        value: "pg".into(),
                        title: "PostgreSQL".into()
                    },
                    Choice {
                        value: "my".into(),
                        title: "MySQL".into()
                    },
                ]
            }
        );
        assert!(matches!(fields[2].kind, Kind::Number { integer: true, .. }));
        assert_eq!(fields[4].kind, Kind::Boolean);
    }

    #[test]
    fn an_answer_is_checked_against_the_form() {
        let fields = fields();
        let good = json!({"name": "db", "engine": "pg", "port": 5433, "tls": false, "tags": ["a"], "extra": 1});
        let checked = check(&fields, good.as_object().unwrap().clone()).unwrap();
        assert!(!checked.contains_key("extra"), "unknown fields are dropped");
        // A default the person left as shown (a tab made visible) goes back as the agent gave it.
        let mut tabbed = fields.clone();
        tabbed[1].default = Some(json!("a\tb"));
        let shown = agent_nvim_text::escape::visible_owned(
            "a\tb".into(),
            agent_nvim_text::escape::Layout::OneLine,
        );
        assert_ne!(shown, "a\tb");
        let back = check(
            &tabbed,
            json!({"name": shown, "engine": "pg"})
                .as_object()
                .unwrap()
                .clone(),
        )
        .unwrap();
        assert_eq!(back["name"], json!("a\tb"));
        assert_eq!(checked["port"], json!(5433));
        for (bad, why) in [
            (json!({"engine": "pg"}), "name is required"),
            (
                json!({"name": "db", "engine": "oracle"}),
                "engine: not one of its choices",
            ),
            (
                json!({"name": "db", "engine": "pg", "port": 70000}),
                "port: out of bounds",
            ),
            (
                json!({"name": "db", "engine": "pg", "port": 1.5}),
                "port: not a number of its kind",
            ),
            (
                json!({"name": "", "engine": "pg"}),
                "name: its length is out of bounds",
            ),
            (
                json!({"name": "db", "engine": "pg", "tls": "yes"}),
                "tls: not a boolean",
            ),
            (
                json!({"name": "db", "engine": "pg", "tags": ["a", "b"]}),
                "tags: not a list of its choices within bounds",
            ),
        ] {
            assert_eq!(
                check(&fields, bad.as_object().unwrap().clone()),
                Err(why.to_string())
            );
        }
    }

    #[test]
    fn a_url_is_read_with_its_host_and_only_the_web_is_opened() {
        let url = |url: &str| {
            json!({"sessionId": "s1", "mode": "url", "message": "Sign in",
                   "elicitationId": "e1", "url": url})
        };
        let (asked, _) = read("test", &url("https://xn--e1afmkfd.example/login?x=1")).unwrap();
        assert_eq!(
            asked.ask,
            Ask::Url {
                url: "https://xn--e1afmkfd.example/login?x=1".into(),
                host: "xn--e1afmkfd.example".into(),
                elicitation_id: "e1".into(),
            }
        );
        // A look-alike name is shown, and opened, in its ASCII form; what a terminal would
        // act on is percent-encoded in the URL shown and opened.
        let (asked, _) = read("test", &url("https://пример.example/a\u{1b}[2Jb c")).unwrap();
        assert_eq!(
            asked.ask,
            Ask::Url {
                url: "https://xn--e1afmkfd.example/a%1B[2Jb%20c".into(),
                host: "xn--e1afmkfd.example".into(),
                elicitation_id: "e1".into(),
            }
        );
        for bad in ["file:///etc/passwd", "javascript:alert(1)", "not a url"] {
            assert!(read("test", &url(bad)).is_err(), "{bad}");
        }
        let unknown = json!({"sessionId": "s1", "mode": "telepathy", "message": "m"});
        assert!(read("test", &unknown).is_err());
    }

    #[test]
    fn every_answer_is_a_valid_v1_response() {
        let content = json!({"name": "db"}).as_object().unwrap().clone();
        for elicited in [
            Elicited::Accept(content),
            Elicited::Decline,
            Elicited::Cancel,
        ] {
            let sent = answer(&elicited);
            let parsed: CreateElicitationResponse = serde_json::from_value(sent.clone()).unwrap();
            assert_eq!(serde_json::to_value(parsed).unwrap(), sent);
        }
    }
}
