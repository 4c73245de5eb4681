//! Our requests to the agent that it has not answered yet, seen on the wire.
//!
//! A request-scoped elicitation (`elicitation/create` with a `requestId`) belongs to one of our
//! requests still waiting for its answer (a `session/new` that needs a sign-in first). One that
//! names no such request is stale or made up, and is answered `cancel` without being shown; one
//! that does is closed when that request is answered. The protocol crate numbers our requests
//! itself, so they are read here from the lines the transport writes and reads.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A JSON-RPC message's outline: enough to tell a request from an answer. Read once per line
/// the agent writes (the transport's check that a line is a JSON object).
#[derive(Default, Deserialize)]
pub(super) struct Outline {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<IgnoredAny>,
    /// Present, whatever it holds: `"result": null` is an answer too.
    #[serde(default, deserialize_with = "present")]
    result: Option<IgnoredAny>,
    #[serde(default, deserialize_with = "present")]
    error: Option<IgnoredAny>,
}

/// A field that is there, `null` included.
fn present<'de, D: serde::Deserializer<'de>>(field: D) -> Result<Option<IgnoredAny>, D::Error> {
    IgnoredAny::deserialize(field).map(Some)
}

impl Outline {
    /// The outline of `line`, when it is a JSON object.
    pub(super) fn of(line: &str) -> Option<Outline> {
        serde_json::from_str(line).ok()
    }
}

/// The open requests, each with a token cancelled when its answer arrives (or the connection
/// ends: dropped with it).
#[derive(Default)]
pub(super) struct InFlight {
    open: Mutex<HashMap<String, CancellationToken>>,
}

impl InFlight {
    /// A line we sent: a request (an id and a method) is open from now on.
    pub(super) fn sent(&self, line: &str) {
        let Some(Outline {
            id: Some(id),
            method: Some(_),
            ..
        }) = Outline::of(line)
        else {
            return;
        };
        self.lock().insert(key(&id), CancellationToken::new());
    }

    /// A line the agent sent, by its outline: an answer (an id, no method, a result or an
    /// error) closes the request of that id.
    pub(super) fn received(&self, outline: Outline) {
        let answer =
            outline.method.is_none() && (outline.result.is_some() || outline.error.is_some());
        if let (Some(id), true) = (outline.id, answer) {
            if let Some(closed) = self.lock().remove(&key(&id)) {
                closed.cancel();
            }
        }
    }

    /// The token of our open request `id` (as the agent names it), cancelled once it is
    /// answered; `None` when no request of ours by that id waits.
    pub(super) fn open(&self, id: &Value) -> Option<CancellationToken> {
        self.lock().get(&key(id)).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An id as its JSON text: `7` and `"7"` stay two ids, as JSON-RPC has them.
fn key(id: &Value) -> String {
    id.to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_is_open_until_its_answer_and_closes_its_token() {
        let inflight = InFlight::default();
        inflight.sent(r#"{"jsonrpc":"2.0","id":3,"method":"session/new","params":{}}"#);
        let token = inflight.open(&json!(3)).expect("open");
        // Not the same id: the string "3", a notification, a request of the agent's.
        assert!(inflight.open(&json!("3")).is_none());
        inflight.received(Outline::of(r#"{"jsonrpc":"2.0","id":"3","result":{}}"#).unwrap());
        inflight.received(
            Outline::of(r#"{"jsonrpc":"2.0","id":3,"method":"fs/read_text_file","params":{}}"#)
                .unwrap(),
        );
        assert!(!token.is_cancelled());
        inflight.received(
            Outline::of(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}"#).unwrap(),
        );
        assert!(token.is_cancelled());
        assert!(inflight.open(&json!(3)).is_none());
        // An answer whose result is null closes its request too.
        inflight.sent(r#"{"jsonrpc":"2.0","id":4,"method":"session/close","params":{}}"#);
        let token = inflight.open(&json!(4)).expect("open");
        inflight.received(Outline::of(r#"{"jsonrpc":"2.0","id":4,"result":null}"#).unwrap());
        assert!(token.is_cancelled());
    }

    #[test]
    fn our_answers_and_notifications_open_nothing() {
        let inflight = InFlight::default();
        inflight.sent(r#"{"jsonrpc":"2.0","id":9,"result":{"outcome":"cancelled"}}"#);
        inflight.sent(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{}}"#);
        inflight.sent("not json");
        assert!(inflight.open(&json!(9)).is_none());
        assert!(inflight.lock().is_empty());
    }
}
