//! The Anthropic Messages API wire format: request bodies and the SSE stream parser.
//!
//! Prompt caching: the system prompt and the tool catalogue carry `cache_control`, and the
//! catalogue is rendered once per client, so every request's prefix is byte-identical. So does
//! the conversation's last block (a breakpoint that moves forward with each request, so the
//! next request reads all of this one's prefix from the cache) and the last block before the
//! model's latest reply (where the previous request's breakpoint was, in case the new one is
//! more than the API's 20 blocks of lookback past it): four breakpoints at most, the API's
//! limit.
//!
//! Extended thinking: with a budget, the request asks for `thinking` (and the interleaved
//! thinking beta, so the model thinks between tool calls too); thinking and redacted_thinking
//! blocks stream in as [`Progress::Thinking`] and are kept in the reply's reasoning, to be sent
//! back unchanged, signature and all, in their place in the assistant message (the API checks
//! them in a tool loop). Settings thinking forbids (temperature, top_k, a forced tool choice)
//! are never sent.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{
    interleave, push_json, written, LlmError, Message, Origin, Piece, Progress, Reasoning, Reply,
    Request, ToolCall, Usage,
};
use agent_nvim_vocab::tools::ToolSpec;

/// The most tokens one response may hold (its thinking budget comes on top).
const MAX_TOKENS: u32 = 16_000;

/// The largest `max_tokens` sent with thinking (current models' output limit).
const MAX_TOKENS_THINKING: u32 = 64_000;

/// What a thinking budget leaves at least of `max_tokens` for the answer.
const MIN_ANSWER: u32 = 1_024;

/// The beta that lets the model think between tool calls.
pub const INTERLEAVED_THINKING: &str = "interleaved-thinking-2025-05-14";

/// The tool catalogue in Anthropic's shape, the last entry marked for caching.
pub fn tools(specs: &[ToolSpec]) -> Value {
    let count = specs.len();
    Value::Array(
        specs
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut tool =
                    json!({"name": t.name, "description": t.description, "input_schema": t.schema});
                if i + 1 == count {
                    tool["cache_control"] = json!({"type": "ephemeral"});
                }
                tool
            })
            .collect(),
    )
}

/// One message's blocks, each as JSON text, under its role: rendered once per message and
/// kept by the client ([`super::Client`]), so a request re-renders only what is new.
pub(super) fn piece(message: &Message) -> Piece {
    let (role, blocks) = match message {
        Message::User(prompt) => {
            // Images first, as Anthropic advises, then the text about them.
            let mut blocks: Vec<Value> = prompt
                .images
                .iter()
                .map(|image| {
                    if image.present() {
                        json!({"type": "image", "source": {"type": "base64",
                            "media_type": image.media_type, "data": image.base64()}})
                    } else {
                        json!({"type": "text", "text": image.lost_line()})
                    }
                })
                .collect();
            blocks.push(json!({"type": "text", "text": prompt.text}));
            ("user", blocks)
        }
        Message::Results(results) => (
            "user",
            results
                .iter()
                .map(|r| {
                    let mut block =
                        json!({"type": "tool_result", "tool_use_id": r.id, "content": r.text});
                    if !r.ok {
                        block["is_error"] = Value::Bool(true);
                    }
                    block
                })
                .collect(),
        ),
        Message::Assistant {
            text,
            calls,
            reasoning,
        } => {
            let mut blocks = Vec::new();
            if !text.is_empty() {
                blocks.push(json!({"type": "text", "text": text}));
            }
            for call in calls {
                // Arguments that did not parse are replayed as {}: the API wants an object,
                // and the failed result beside it tells the model what went wrong.
                let input = match &call.args {
                    Ok(v @ Value::Object(_)) => v.clone(),
                    _ => json!({}),
                };
                blocks.push(
                    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}),
                );
            }
            (
                "assistant",
                interleave(blocks, reasoning, Origin::Anthropic),
            )
        }
    };
    Piece {
        role,
        parts: blocks.iter().map(Value::to_string).collect(),
    }
}

/// Writes the request body of `pieces` (one a message, in order). Consecutive user-side
/// messages (tool results, then a new prompt) are merged into one user message with the
/// tool_result blocks first, as the API requires. `thinking` is the thinking budget, when
/// thinking is on. The last block of the last message, and the last block of the last user
/// message before the last assistant one, carry `cache_control`: with the system prompt's and
/// the catalogue's, four in all.
pub(super) fn write_body(
    out: &mut String,
    model: &str,
    system: &str,
    pieces: &[&Piece],
    tools: &str,
    thinking: Option<u32>,
    max_output: Option<u32>,
) {
    let mut merged: Vec<(&str, Vec<&str>)> = Vec::new();
    for piece in pieces {
        match merged.last_mut() {
            Some((role, blocks)) if *role == piece.role => {
                blocks.extend(piece.parts.iter().map(String::as_str))
            }
            _ => merged.push((piece.role, piece.parts.iter().map(String::as_str).collect())),
        }
    }
    let last = merged.len().checked_sub(1);
    let previous = last.and_then(|last| {
        let assistant = merged[..last].iter().rposition(|m| m.0 == "assistant")?;
        merged[..assistant].iter().rposition(|m| m.0 == "user")
    });
    // Within the model's output limit, the budget below max_tokens (models without
    // interleaved thinking refuse it otherwise).
    let cap = max_output.unwrap_or(MAX_TOKENS_THINKING);
    let max_tokens = match thinking {
        Some(budget) => budget.saturating_add(MAX_TOKENS).min(cap),
        None => MAX_TOKENS.min(cap),
    };
    let thinking = thinking.map(|budget| {
        budget
            .min(max_tokens.saturating_sub(MIN_ANSWER))
            .max(super::models::MIN_THINKING_BUDGET)
    });
    out.push_str("{\"model\":");
    push_json(out, model);
    out.push_str(&format!(
        ",\"max_tokens\":{max_tokens},\"stream\":true,\"system\":[{{\"type\":\"text\",\"text\":"
    ));
    push_json(out, system);
    out.push_str(",\"cache_control\":{\"type\":\"ephemeral\"}}],\"tools\":");
    out.push_str(tools);
    out.push_str(",\"messages\":[");
    for (m, (role, blocks)) in merged.iter().enumerate() {
        if m > 0 {
            out.push(',');
        }
        out.push_str("{\"role\":\"");
        out.push_str(role);
        out.push_str("\",\"content\":[");
        let marked = Some(m) == last || Some(m) == previous;
        for (b, block) in blocks.iter().enumerate() {
            if b > 0 {
                out.push(',');
            }
            match block.strip_suffix('}') {
                Some(open) if marked && b + 1 == blocks.len() => {
                    out.push_str(open);
                    out.push_str(",\"cache_control\":{\"type\":\"ephemeral\"}}");
                }
                _ => out.push_str(block),
            }
        }
        out.push_str("]}");
    }
    out.push(']');
    if let Some(budget) = thinking {
        out.push_str(&format!(
            ",\"thinking\":{{\"type\":\"enabled\",\"budget_tokens\":{budget}}}"
        ));
    }
    out.push('}');
}

/// The request body as JSON (tests; the client writes it as text, [`write_body`]).
pub fn body(model: &str, request: &Request<'_>, tools: &Value, thinking: Option<u32>) -> Value {
    let pieces: Vec<Piece> = request.messages.iter().map(piece).collect();
    let refs: Vec<&Piece> = pieces.iter().collect();
    written(|out| {
        write_body(
            out,
            model,
            request.system,
            &refs,
            &tools.to_string(),
            thinking,
            None,
        )
    })
}

/// A content block being streamed.
#[derive(Debug)]
enum Block {
    Text,
    Tool {
        id: String,
        name: String,
        json: String,
    },
    /// A thinking block (its text and signature grow with deltas) or a redacted one (whole at
    /// its start), and how many parts came before it.
    Thought {
        item: Value,
        thinking: String,
        signature: String,
        at: usize,
    },
    Other,
}

/// Turns the event stream into a [`Reply`].
#[derive(Debug, Default)]
pub struct Parser {
    blocks: BTreeMap<u64, Block>,
    text: String,
    calls: Vec<ToolCall>,
    /// Tool blocks started so far (their calls are pushed when they stop).
    tools_started: usize,
    reasoning: Vec<Reasoning>,
    usage: Usage,
    stopped: bool,
    cut: bool,
}

impl Parser {
    /// Feeds one event; true once `message_stop` arrived.
    pub fn event(
        &mut self,
        name: &str,
        data: &str,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<bool, LlmError> {
        if name == "ping" {
            return Ok(false);
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::Stream(format!("unreadable {name} event ({e})")))?;
        let kind = v["type"].as_str().unwrap_or(name);
        match kind {
            "message_start" => {
                let usage = &v["message"]["usage"];
                self.usage.cache_read = usage["cache_read_input_tokens"].as_u64().unwrap_or(0);
                self.usage.cache_write = usage["cache_creation_input_tokens"].as_u64().unwrap_or(0);
                self.usage.input = [
                    "input_tokens",
                    "cache_creation_input_tokens",
                    "cache_read_input_tokens",
                ]
                .iter()
                .filter_map(|k| usage[*k].as_u64())
                .sum();
                self.usage.output = usage["output_tokens"].as_u64().unwrap_or(0);
            }
            "content_block_start" => {
                let block = &v["content_block"];
                let index = v["index"].as_u64().unwrap_or(0);
                let block = match block["type"].as_str() {
                    Some("text") => {
                        if let Some(text) = block["text"].as_str().filter(|t| !t.is_empty()) {
                            self.text.push_str(text);
                            progress(Progress::Text(text.to_string()));
                        }
                        Block::Text
                    }
                    Some("tool_use") => {
                        self.tools_started += 1;
                        Block::Tool {
                            id: block["id"].as_str().unwrap_or_default().to_string(),
                            name: block["name"].as_str().unwrap_or_default().to_string(),
                            json: String::new(),
                        }
                    }
                    Some("thinking" | "redacted_thinking") => {
                        let thinking = block["thinking"].as_str().unwrap_or_default().to_string();
                        if !thinking.is_empty() {
                            progress(Progress::Thinking(thinking.clone()));
                        }
                        Block::Thought {
                            item: block.clone(),
                            thinking,
                            signature: block["signature"].as_str().unwrap_or_default().to_string(),
                            at: usize::from(!self.text.is_empty()) + self.tools_started,
                        }
                    }
                    _ => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let index = v["index"].as_u64().unwrap_or(0);
                let delta = &v["delta"];
                match (self.blocks.get_mut(&index), delta["type"].as_str()) {
                    (Some(Block::Text), Some("text_delta")) => {
                        let text = delta["text"].as_str().unwrap_or_default();
                        self.text.push_str(text);
                        progress(Progress::Text(text.to_string()));
                    }
                    (Some(Block::Tool { json, .. }), Some("input_json_delta")) => {
                        json.push_str(delta["partial_json"].as_str().unwrap_or_default());
                    }
                    (Some(Block::Thought { thinking, .. }), Some("thinking_delta")) => {
                        let piece = delta["thinking"].as_str().unwrap_or_default();
                        thinking.push_str(piece);
                        if !piece.is_empty() {
                            progress(Progress::Thinking(piece.to_string()));
                        }
                    }
                    (Some(Block::Thought { signature, .. }), Some("signature_delta")) => {
                        signature.push_str(delta["signature"].as_str().unwrap_or_default());
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = v["index"].as_u64().unwrap_or(0);
                if let Some(block) = self.blocks.remove(&index) {
                    self.close(block);
                }
            }
            "message_delta" => {
                if let Some(out) = v["usage"]["output_tokens"].as_u64() {
                    self.usage.output = out;
                }
                if v["delta"]["stop_reason"] == "max_tokens" {
                    self.cut = true;
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(true);
            }
            "error" => {
                let error = &v["error"];
                return Err(LlmError::Api(format!(
                    "{}: {}",
                    error["type"].as_str().unwrap_or("error"),
                    error["message"].as_str().unwrap_or(data)
                )));
            }
            _ => {}
        }
        Ok(false)
    }

    /// The reply, or an error when the stream ended before `message_stop`.
    pub fn finish(mut self) -> Result<Reply, LlmError> {
        if !self.stopped {
            return Err(LlmError::Stream(
                "the stream ended before message_stop (send the prompt again)".to_string(),
            ));
        }
        // A block whose stop never came is still part of the reply.
        for (_, block) in std::mem::take(&mut self.blocks) {
            self.close(block);
        }
        Ok(Reply {
            text: self.text,
            calls: self.calls,
            usage: self.usage,
            reasoning: self.reasoning,
            cut: self.cut,
        })
    }

    /// Keeps what a finished block adds to the reply.
    fn close(&mut self, block: Block) {
        match block {
            Block::Tool { id, name, json } => self.calls.push(ToolCall::new(id, name, json)),
            Block::Thought {
                mut item,
                thinking,
                signature,
                at,
            } => {
                if item["type"] == "thinking" {
                    item["thinking"] = Value::String(thinking);
                    item["signature"] = Value::String(signature);
                }
                self.reasoning.push(Reasoning {
                    origin: Origin::Anthropic,
                    at,
                    item,
                });
            }
            Block::Text | Block::Other => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::CallResult;

    fn feed(events: &[(&str, Value)]) -> (Result<Reply, LlmError>, Vec<String>) {
        let mut parser = Parser::default();
        let mut texts = Vec::new();
        let mut progress = |p: Progress| {
            if let Progress::Text(t) = p {
                texts.push(t)
            }
        };
        for (name, data) in events {
            if let Err(e) = parser.event(name, &data.to_string(), &mut progress) {
                return (Err(e), texts);
            }
        }
        (parser.finish(), texts)
    }

    #[test]
    fn text_and_a_tool_call_in_fragments_make_one_reply() {
        let (reply, texts) = feed(&[
            (
                "message_start",
                json!({"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}}}),
            ),
            (
                "content_block_start",
                json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            ),
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}),
            ),
            ("ping", json!({"type":"ping"})),
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"look."}}),
            ),
            (
                "content_block_stop",
                json!({"type":"content_block_stop","index":0}),
            ),
            (
                "content_block_start",
                json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"read_file","input":{}}}),
            ),
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"pa"}}),
            ),
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"th\": \"a.rs\"}"}}),
            ),
            (
                "content_block_stop",
                json!({"type":"content_block_stop","index":1}),
            ),
            (
                "message_delta",
                json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":42}}),
            ),
            ("message_stop", json!({"type":"message_stop"})),
        ]);
        assert_eq!(texts, vec!["Let me ", "look."]);
        assert_eq!(
            reply.unwrap(),
            Reply {
                text: "Let me look.".into(),
                calls: vec![ToolCall::new(
                    "toolu_1".into(),
                    "read_file".into(),
                    "{\"path\": \"a.rs\"}".into()
                )],
                usage: Usage {
                    input: 15,
                    output: 42,
                    cache_read: 5,
                    cache_write: 0,
                },
                reasoning: Vec::new(),
                cut: false,
            }
        );
    }

    #[test]
    fn an_error_event_mid_stream_is_an_api_error() {
        let (reply, _) = feed(&[
            (
                "message_start",
                json!({"type":"message_start","message":{"usage":{"input_tokens":1}}}),
            ),
            (
                "error",
                json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
            ),
        ]);
        assert_eq!(
            reply.unwrap_err(),
            LlmError::Api("overloaded_error: Overloaded".into())
        );
    }

    #[test]
    fn a_stream_without_message_stop_is_incomplete() {
        let (reply, _) = feed(&[(
            "message_start",
            json!({"type":"message_start","message":{"usage":{}}}),
        )]);
        assert!(matches!(reply, Err(LlmError::Stream(_))));
    }

    #[test]
    fn the_body_merges_results_before_the_next_prompt_and_marks_errors() {
        let messages = vec![
            Message::User("hi".into()),
            Message::Assistant {
                text: String::new(),
                calls: vec![
                    ToolCall::new("t1".into(), "read_file".into(), r#"{"path":"a"}"#.into()),
                    ToolCall::new("t2".into(), "read_file".into(), r#"{"path":"#.into()),
                ],
                reasoning: Vec::new(),
            },
            Message::Results(vec![
                CallResult {
                    id: "t1".into(),
                    ok: true,
                    text: "A".into(),
                },
                CallResult {
                    id: "t2".into(),
                    ok: false,
                    text: "bad".into(),
                },
            ]),
            Message::User("next".into()),
        ];
        let body = body(
            "m",
            &Request {
                system: "sys",
                messages: &messages,
                history: None,
            },
            &json!([]),
            None,
        );
        assert_eq!(
            body["messages"],
            json!([
                {"role":"user","content":[{"type":"text","text":"hi",
                    "cache_control":{"type":"ephemeral"}}]},
                {"role":"assistant","content":[
                    {"type":"tool_use","id":"t1","name":"read_file","input":{"path":"a"}},
                    {"type":"tool_use","id":"t2","name":"read_file","input":{}}]},
                {"role":"user","content":[
                    {"type":"tool_result","tool_use_id":"t1","content":"A"},
                    {"type":"tool_result","tool_use_id":"t2","content":"bad","is_error":true},
                    {"type":"text","text":"next","cache_control":{"type":"ephemeral"}}]}
            ])
        );
        assert_eq!(
            body["system"],
            json!([{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}])
        );
        assert_eq!(body["stream"], json!(true));
    }

    /// Every `cache_control` in a body, as (where, what it marks).
    fn breakpoints(body: &Value) -> Vec<String> {
        let mut found = Vec::new();
        for (i, tool) in body["tools"].as_array().unwrap().iter().enumerate() {
            if tool.get("cache_control").is_some() {
                found.push(format!("tool {i}"));
            }
        }
        if body["system"][0].get("cache_control").is_some() {
            found.push("system".into());
        }
        for (m, message) in body["messages"].as_array().unwrap().iter().enumerate() {
            for (b, block) in message["content"].as_array().unwrap().iter().enumerate() {
                if block.get("cache_control").is_some() {
                    found.push(format!("message {m} block {b}"));
                }
            }
        }
        found
    }

    #[test]
    fn one_message_and_a_cancelled_turns_merged_message_get_their_marks_and_stay_valid_json() {
        let one = vec![Message::User("hi".into())];
        let request = |messages| Request {
            system: "sys",
            messages,
            history: None,
        };
        let body1 = body("m", &request(&one), &json!([]), None);
        assert_eq!(breakpoints(&body1), ["system", "message 0 block 0"]);
        // A cancelled call: its result and the next prompt are one user message, marked on the
        // prompt; the prompt before the reply is marked too.
        let merged = vec![
            Message::User("first".into()),
            Message::Assistant {
                text: String::new(),
                calls: vec![ToolCall::new("t1".into(), "run_bash".into(), "{}".into())],
                reasoning: Vec::new(),
            },
            Message::Results(vec![CallResult {
                id: "t1".into(),
                ok: false,
                text: "Cancelled by the user before it ran.".into(),
            }]),
            Message::User("second".into()),
        ];
        let body2 = body("m", &request(&merged), &json!([]), Some(2048));
        assert_eq!(
            breakpoints(&body2),
            ["system", "message 0 block 0", "message 2 block 1"]
        );
        assert_eq!(body2["messages"][2]["content"][0]["type"], "tool_result");
        assert_eq!(body2["max_tokens"], 2048 + 16_000);
        assert_eq!(body2["thinking"]["budget_tokens"], 2048);
    }

    #[test]
    fn over_a_ten_turn_tool_loop_the_breakpoint_moves_to_the_last_block_and_never_exceeds_four() {
        let specs: Vec<ToolSpec> = ["read_file", "list_files", "edit_file", "run_bash"]
            .into_iter()
            .map(|name| ToolSpec {
                name,
                description: "d",
                schema: json!({"type": "object"}),
            })
            .collect();
        let tools = tools(&specs);
        let mut messages = vec![Message::User("fix the tests".into())];
        for turn in 0..10 {
            let body = body(
                "m",
                &Request {
                    system: "sys",
                    messages: &messages,
                    history: None,
                },
                &tools,
                None,
            );
            let marks = breakpoints(&body);
            assert!(marks.len() <= 4, "turn {turn}: {marks:?}");
            let sent = body["messages"].as_array().unwrap();
            let last = sent.len() - 1;
            let last_block = sent[last]["content"].as_array().unwrap().len() - 1;
            assert!(
                marks.contains(&format!("message {last} block {last_block}")),
                "turn {turn}: {marks:?}"
            );
            if turn > 0 {
                // The previous request's last block is marked too: its prefix is read back.
                let previous = last - 2;
                let block = sent[previous]["content"].as_array().unwrap().len() - 1;
                assert!(
                    marks.contains(&format!("message {previous} block {block}")),
                    "turn {turn}: {marks:?}"
                );
                assert_eq!(marks.len(), 4, "turn {turn}: {marks:?}");
            }
            messages.push(Message::Assistant {
                text: format!("step {turn}"),
                calls: vec![ToolCall::new(
                    format!("t{turn}"),
                    "read_file".into(),
                    r#"{"path":"a"}"#.into(),
                )],
                reasoning: Vec::new(),
            });
            messages.push(Message::Results(vec![CallResult {
                id: format!("t{turn}"),
                ok: true,
                text: "A".repeat(2000),
            }]));
        }
    }
}
