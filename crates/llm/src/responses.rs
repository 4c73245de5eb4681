//! OpenAI's Responses API wire format: request bodies and the streamed event parser.
//!
//! Nothing is stored on OpenAI's side (`store: false`): each request carries the whole
//! conversation as input items, and the model's reasoning comes back encrypted
//! (`include: ["reasoning.encrypted_content"]`) to be sent again, unchanged and in its place,
//! in the later requests of the tool loop, as the API needs for the model to go on reasoning.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{
    interleave, push_json, push_parts, written, LlmError, Message, Origin, Piece, Progress,
    Reasoning, Reply, Request, ToolCall, Usage,
};
use agent_nvim_vocab::tools::ToolSpec;

/// The tool catalogue in the Responses API's flat function shape.
pub fn tools(specs: &[ToolSpec]) -> Value {
    Value::Array(
        specs
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.schema})
            })
            .collect(),
    )
}

/// One message as input items (tool results as `function_call_output`, failures prefixed
/// `ERROR: `; reasoning items in their place), each as JSON text.
pub(super) fn piece(message: &Message) -> Piece {
    let items = match message {
        Message::User(prompt) => {
            let mut content = vec![json!({"type": "input_text", "text": prompt.text})];
            content.extend(prompt.images.iter().map(|image| {
                if image.present() {
                    json!({"type": "input_image", "image_url": image.data_url(), "detail": "auto"})
                } else {
                    json!({"type": "input_text", "text": image.lost_line()})
                }
            }));
            vec![json!({"type": "message", "role": "user", "content": content})]
        }
        Message::Assistant {
            text,
            calls,
            reasoning,
        } => {
            let mut parts = Vec::new();
            if !text.is_empty() {
                parts.push(json!({"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": text}]}));
            }
            for call in calls {
                parts.push(json!({"type": "function_call", "call_id": call.id,
                    "name": call.name, "arguments": call.raw_args}));
            }
            interleave(parts, reasoning, Origin::Responses)
        }
        Message::Results(results) => results
            .iter()
            .map(|r| {
                let output = r.sent_text();
                json!({"type": "function_call_output", "call_id": r.id, "output": output})
            })
            .collect(),
    };
    Piece {
        role: "",
        parts: items.iter().map(Value::to_string).collect(),
    }
}

/// Writes the request body: the system prompt as `instructions`, the conversation as input
/// items, `reasoning.effort` when the person chose one.
pub(super) fn write_body(
    out: &mut String,
    model: &str,
    system: &str,
    pieces: &[&Piece],
    tools: &str,
    effort: Option<&str>,
) {
    out.push_str("{\"model\":");
    push_json(out, model);
    out.push_str(",\"instructions\":");
    push_json(out, system);
    out.push_str(",\"input\":[");
    push_parts(out, pieces, false);
    out.push_str("],\"tools\":");
    out.push_str(tools);
    out.push_str(",\"stream\":true,\"store\":false,\"include\":[\"reasoning.encrypted_content\"]");
    if let Some(effort) = effort {
        out.push_str(",\"reasoning\":{\"effort\":");
        push_json(out, effort);
        out.push('}');
    }
    out.push('}');
}

/// The request body as JSON (tests; the client writes it as text, [`write_body`]).
pub fn body(model: &str, request: &Request<'_>, tools: &Value, effort: Option<&str>) -> Value {
    let pieces: Vec<Piece> = request.messages.iter().map(piece).collect();
    let refs: Vec<&Piece> = pieces.iter().collect();
    written(|out| {
        write_body(
            out,
            model,
            request.system,
            &refs,
            &tools.to_string(),
            effort,
        )
    })
}

/// A function call being streamed.
#[derive(Debug, Default)]
struct Partial {
    call_id: String,
    name: String,
    arguments: String,
}

/// Turns the event stream into a [`Reply`].
#[derive(Debug, Default)]
pub struct Parser {
    /// Function calls by output index, until their item is done.
    open: BTreeMap<u64, Partial>,
    text: String,
    calls: Vec<ToolCall>,
    reasoning: Vec<Reasoning>,
    usage: Usage,
    done: bool,
    cut: bool,
}

impl Parser {
    /// Feeds one event; true once the response completed.
    pub fn event(
        &mut self,
        name: &str,
        data: &str,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<bool, LlmError> {
        let v: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::Stream(format!("unreadable {name} event ({e})")))?;
        let kind = v["type"].as_str().unwrap_or(name);
        let index = v["output_index"].as_u64().unwrap_or(0);
        match kind {
            "response.output_text.delta" => {
                let text = v["delta"].as_str().unwrap_or_default();
                if !text.is_empty() {
                    self.text.push_str(text);
                    progress(Progress::Text(text.to_string()));
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(text) = v["delta"].as_str().filter(|t| !t.is_empty()) {
                    progress(Progress::Thinking(text.to_string()));
                }
            }
            "response.output_item.added" => {
                let item = &v["item"];
                if item["type"] == "function_call" {
                    self.open.insert(
                        index,
                        Partial {
                            call_id: string(&item["call_id"]),
                            name: string(&item["name"]),
                            arguments: string(&item["arguments"]),
                        },
                    );
                }
            }
            "response.function_call_arguments.delta" => {
                if let Some(call) = self.open.get_mut(&index) {
                    call.arguments
                        .push_str(v["delta"].as_str().unwrap_or_default());
                }
            }
            "response.function_call_arguments.done" => {
                if let (Some(call), Some(whole)) =
                    (self.open.get_mut(&index), v["arguments"].as_str())
                {
                    call.arguments = whole.to_string();
                }
            }
            "response.output_item.done" => self.item_done(index, &v["item"]),
            "response.completed" | "response.incomplete" => {
                let usage = &v["response"]["usage"];
                self.usage = Usage {
                    input: usage["input_tokens"].as_u64().unwrap_or(0),
                    output: usage["output_tokens"].as_u64().unwrap_or(0),
                    cache_read: usage["input_tokens_details"]["cached_tokens"]
                        .as_u64()
                        .unwrap_or(0),
                    cache_write: 0,
                };
                self.done = true;
                // Stopped at the output limit (not, say, by a content filter).
                self.cut = v["response"]["incomplete_details"]["reason"] == "max_output_tokens";
                return Ok(true);
            }
            "response.failed" => {
                let error = &v["response"]["error"];
                return Err(LlmError::Api(described(error, data)));
            }
            "error" => return Err(LlmError::Api(described(&v, data))),
            _ => {}
        }
        Ok(false)
    }

    /// An output item is complete: a function call becomes a call (the item's own fields are
    /// the final word), a reasoning item is kept as it came.
    fn item_done(&mut self, index: u64, item: &Value) {
        match item["type"].as_str() {
            Some("function_call") => {
                let partial = self.open.remove(&index).unwrap_or_default();
                let pick = |field: &str, streamed: String| match item[field].as_str() {
                    Some(value) if !value.is_empty() => value.to_string(),
                    _ => streamed,
                };
                self.calls.push(ToolCall::new(
                    pick("call_id", partial.call_id),
                    pick("name", partial.name),
                    pick("arguments", partial.arguments),
                ));
            }
            Some("reasoning") => self.reasoning.push(Reasoning {
                origin: Origin::Responses,
                at: usize::from(!self.text.is_empty()) + self.calls.len(),
                item: item.clone(),
            }),
            _ => {}
        }
    }

    /// The reply, or an error when the stream ended before the response completed.
    pub fn finish(mut self) -> Result<Reply, LlmError> {
        if !self.done {
            return Err(LlmError::Stream(
                "the stream ended before response.completed (send the prompt again)".to_string(),
            ));
        }
        for (_, call) in std::mem::take(&mut self.open) {
            self.calls
                .push(ToolCall::new(call.call_id, call.name, call.arguments));
        }
        Ok(Reply {
            text: self.text,
            calls: self.calls,
            usage: self.usage,
            reasoning: self.reasoning,
            cut: self.cut,
        })
    }
}

fn string(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// An error object's code and message (`rate_limit_exceeded: ...`).
fn described(error: &Value, data: &str) -> String {
    let message = error["message"].as_str().unwrap_or(data);
    match error["code"].as_str().filter(|c| !c.is_empty()) {
        Some(code) => format!("{code}: {message}"),
        None => message.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::CallResult;

    fn feed(events: &[Value]) -> (Result<Reply, LlmError>, Vec<Progress>) {
        let mut parser = Parser::default();
        let mut seen = Vec::new();
        let mut progress = |p: Progress| seen.push(p);
        for event in events {
            let name = event["type"].as_str().unwrap().to_string();
            match parser.event(&name, &event.to_string(), &mut progress) {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => return (Err(e), seen),
            }
        }
        (parser.finish(), seen)
    }

    #[test]
    fn reasoning_text_and_a_call_in_pieces_make_one_reply() {
        let reasoning = json!({"type": "reasoning", "id": "rs_1", "summary": [],
                               "encrypted_content": "gAAA-secret"});
        let (reply, seen) = feed(&[
            json!({"type": "response.created", "response": {"id": "resp_1"}}),
            json!({"type": "response.output_item.added", "output_index": 0,
                   "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
            json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "hmm"}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning}),
            json!({"type": "response.output_item.added", "output_index": 1,
                   "item": {"type": "message", "role": "assistant", "content": []}}),
            json!({"type": "response.output_text.delta", "output_index": 1, "delta": "Reading "}),
            json!({"type": "response.output_text.delta", "output_index": 1, "delta": "it."}),
            json!({"type": "response.output_item.added", "output_index": 2,
                   "item": {"type": "function_call", "id": "fc_1", "call_id": "call_9",
                            "name": "read_file", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "{\"pa"}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "th\":\"a\"}"}),
            json!({"type": "response.output_item.done", "output_index": 2,
                   "item": {"type": "function_call", "id": "fc_1", "call_id": "call_9",
                            "name": "read_file", "arguments": "{\"path\":\"a\"}"}}),
            json!({"type": "response.completed", "response": {"usage": {"input_tokens": 50,
                   "input_tokens_details": {"cached_tokens": 40}, "output_tokens": 7}}}),
        ]);
        let reply = reply.unwrap();
        assert_eq!(reply.text, "Reading it.");
        assert_eq!(
            reply.calls,
            vec![ToolCall::new(
                "call_9".into(),
                "read_file".into(),
                "{\"path\":\"a\"}".into()
            )]
        );
        assert_eq!(
            reply.reasoning,
            vec![Reasoning {
                origin: Origin::Responses,
                at: 0,
                item: reasoning
            }]
        );
        assert_eq!(
            reply.usage,
            Usage {
                input: 50,
                output: 7,
                cache_read: 40,
                cache_write: 0
            }
        );
        assert!(seen.contains(&Progress::Thinking("hmm".into())));
    }

    #[test]
    fn failed_and_error_events_carry_their_message_and_a_cut_stream_is_an_error() {
        let (reply, _) = feed(&[json!({"type": "response.failed", "response": {"error":
            {"code": "server_error", "message": "The model failed."}}})]);
        assert_eq!(
            reply.unwrap_err(),
            LlmError::Api("server_error: The model failed.".into())
        );
        let (reply, _) = feed(&[json!({"type": "error", "code": "context_length_exceeded",
            "message": "Your input exceeds the context window of this model."})]);
        assert_eq!(
            reply.unwrap_err().to_string(),
            "API error during the reply: context_length_exceeded: Your input exceeds the context window of this model."
        );
        let (reply, _) = feed(&[json!({"type": "response.output_text.delta", "delta": "par"})]);
        assert!(matches!(reply, Err(LlmError::Stream(_))));
    }

    #[test]
    fn the_body_sends_results_by_call_id_and_reasoning_back_in_its_place() {
        let item = json!({"type": "reasoning", "id": "rs_1", "summary": [],
                          "encrypted_content": "enc"});
        let messages = vec![
            Message::User("hi".into()),
            Message::Assistant {
                text: "t".into(),
                calls: vec![ToolCall::new(
                    "c1".into(),
                    "run_bash".into(),
                    "{\"command\":\"x".into(),
                )],
                reasoning: vec![Reasoning {
                    origin: Origin::Responses,
                    at: 0,
                    item: item.clone(),
                }],
            },
            Message::Results(vec![CallResult {
                id: "c1".into(),
                ok: false,
                text: "no".into(),
            }]),
        ];
        let body = body(
            "gpt-5",
            &Request {
                system: "sys",
                messages: &messages,
                history: None,
            },
            &json!([]),
            Some("high"),
        );
        assert_eq!(
            body["input"],
            json!([
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                item,
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "t"}]},
                {"type": "function_call", "call_id": "c1", "name": "run_bash", "arguments": "{\"command\":\"x"},
                {"type": "function_call_output", "call_id": "c1", "output": "ERROR: no"}
            ])
        );
        assert_eq!(body["instructions"], "sys");
        assert_eq!(body["store"], false);
        assert_eq!(body["stream"], true);
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(body["reasoning"], json!({"effort": "high"}));
    }
}
