//! The OpenAI Chat Completions wire format (also Ollama, llama.cpp, vLLM, OpenRouter): request
//! bodies and the streamed chunk parser.

use serde_json::{json, Value};

use super::{
    push_json, push_parts, written, LlmError, Message, Piece, Progress, Reply, Request, ToolCall,
    Usage,
};
use agent_nvim_vocab::tools::ToolSpec;

/// The tool catalogue in OpenAI's function shape.
pub fn tools(specs: &[ToolSpec]) -> Value {
    Value::Array(
        specs
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.schema}})
            })
            .collect(),
    )
}

/// One message as Chat Completions messages (tool results are one message each, failures
/// prefixed `ERROR: `), each as JSON text.
pub(super) fn piece(message: &Message) -> Piece {
    let parts = match message {
        Message::User(prompt) if prompt.images.is_empty() => {
            vec![json!({"role": "user", "content": prompt.text})]
        }
        Message::User(prompt) => {
            let mut content = vec![json!({"type": "text", "text": prompt.text})];
            content.extend(prompt.images.iter().map(|image| {
                if image.present() {
                    json!({"type": "image_url", "image_url": {"url": image.data_url()}})
                } else {
                    json!({"type": "text", "text": image.lost_line()})
                }
            }));
            vec![json!({"role": "user", "content": content})]
        }
        Message::Assistant { text, calls, .. } => {
            let content = if text.is_empty() {
                Value::Null
            } else {
                json!(text)
            };
            let mut m = json!({"role": "assistant", "content": content});
            if !calls.is_empty() {
                m["tool_calls"] = calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_args}}))
                    .collect();
            }
            vec![m]
        }
        Message::Results(results) => results
            .iter()
            .map(|r| {
                let content = r.sent_text();
                json!({"role": "tool", "tool_call_id": r.id, "content": content})
            })
            .collect(),
    };
    Piece {
        role: "",
        parts: parts.iter().map(Value::to_string).collect(),
    }
}

/// Writes the request body: the system prompt as the first message, then `pieces`, and
/// `reasoning_effort` when the person chose one.
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
    out.push_str(",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"tools\":");
    out.push_str(tools);
    out.push_str(",\"messages\":[{\"role\":\"system\",\"content\":");
    push_json(out, system);
    out.push('}');
    push_parts(out, pieces, true);
    out.push(']');
    if let Some(effort) = effort {
        out.push_str(",\"reasoning_effort\":");
        push_json(out, effort);
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

/// A tool call being accumulated from deltas.
#[derive(Debug)]
struct Partial {
    index: u64,
    id: String,
    name: String,
    args: String,
}

/// Turns the chunk stream into a [`Reply`].
#[derive(Debug, Default)]
pub struct Parser {
    text: String,
    calls: Vec<Partial>,
    usage: Usage,
    finished: bool,
    done: bool,
    cut: bool,
}

impl Parser {
    /// Feeds one `data:` payload; true once `[DONE]` arrived.
    pub fn event(
        &mut self,
        data: &str,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<bool, LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::Stream(format!("unreadable chunk ({e})")))?;
        if let Some(error) = v.get("error") {
            let message = error["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| error.to_string());
            return Err(LlmError::Api(message));
        }
        if let Some(usage) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = Usage {
                input: usage["prompt_tokens"].as_u64().unwrap_or(0),
                output: usage["completion_tokens"].as_u64().unwrap_or(0),
                cache_read: usage["prompt_tokens_details"]["cached_tokens"]
                    .as_u64()
                    .unwrap_or(0),
                cache_write: 0,
            };
        }
        let Some(choice) = v["choices"].as_array().and_then(|c| c.first()) else {
            return Ok(false);
        };
        let delta = &choice["delta"];
        // Servers that show their model's reasoning (vLLM, DeepSeek, OpenRouter) send it apart.
        let thinking = delta["reasoning_content"]
            .as_str()
            .or(delta["reasoning"].as_str());
        if let Some(thinking) = thinking.filter(|t| !t.is_empty()) {
            progress(Progress::Thinking(thinking.to_string()));
        }
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            self.text.push_str(text);
            progress(Progress::Text(text.to_string()));
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            self.tool_delta(call);
        }
        if choice["finish_reason"].is_string() {
            self.finished = true;
            self.cut |= choice["finish_reason"] == "length";
        }
        Ok(false)
    }

    /// Deltas are grouped by index; a new id at an index starts a new call (Ollama sends whole
    /// calls, each at index 0).
    fn tool_delta(&mut self, call: &Value) {
        let index = call["index"].as_u64().unwrap_or(0);
        let id = call["id"].as_str().filter(|s| !s.is_empty());
        let function = &call["function"];
        let current = self.calls.iter().rposition(|c| c.index == index);
        let starts_new = match (current, id) {
            (None, _) => true,
            (Some(i), Some(id)) => self.calls[i].id != id,
            (Some(_), None) => false,
        };
        if starts_new {
            self.calls.push(Partial {
                index,
                id: id
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("call_{}", self.calls.len())),
                name: String::new(),
                args: String::new(),
            });
        }
        if let Some(partial) = self.calls.iter_mut().rev().find(|c| c.index == index) {
            if let Some(name) = function["name"].as_str() {
                partial.name.push_str(name);
            }
            if let Some(args) = function["arguments"].as_str() {
                partial.args.push_str(args);
            }
        }
    }

    /// The reply, or an error when the stream ended before it was complete. Servers that omit
    /// `[DONE]` after a finish_reason are accepted.
    pub fn finish(self) -> Result<Reply, LlmError> {
        if !self.done && !self.finished {
            return Err(LlmError::Stream(
                "the stream ended before [DONE] (send the prompt again)".to_string(),
            ));
        }
        Ok(Reply {
            text: self.text,
            calls: self
                .calls
                .into_iter()
                .map(|p| ToolCall::new(p.id, p.name, p.args))
                .collect(),
            usage: self.usage,
            reasoning: Vec::new(),
            cut: self.cut,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::CallResult;

    fn feed(chunks: &[&str]) -> Result<Reply, LlmError> {
        let mut parser = Parser::default();
        let mut progress = |_: Progress| {};
        for chunk in chunks {
            if parser.event(chunk, &mut progress)? {
                break;
            }
        }
        parser.finish()
    }

    #[test]
    fn tool_call_arguments_accumulate_per_index() {
        let reply = feed(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"ok "}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"read_file","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"list_files","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            reply,
            Reply {
                text: "ok ".into(),
                calls: vec![
                    ToolCall::new("c1".into(), "read_file".into(), r#"{"path":"a"}"#.into()),
                    ToolCall::new("c2".into(), "list_files".into(), "{}".into()),
                ],
                usage: Usage {
                    input: 7,
                    output: 3,
                    cache_read: 2,
                    cache_write: 0,
                },
                reasoning: Vec::new(),
                cut: false,
            }
        );
    }

    #[test]
    fn ollama_style_whole_calls_at_index_0_are_separate_calls() {
        let reply = feed(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"read_file","arguments":"{\"path\":\"x\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"read_file","arguments":"{\"path\":\"y\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ])
        .unwrap();
        let ids: Vec<_> = reply
            .calls
            .iter()
            .map(|c| (c.id.as_str(), c.args.clone().unwrap()))
            .collect();
        assert_eq!(
            ids,
            vec![("a", json!({"path":"x"})), ("b", json!({"path":"y"}))]
        );
    }

    #[test]
    fn an_error_chunk_and_a_cut_stream_are_errors() {
        assert_eq!(
            feed(&[r#"{"error":{"message":"bad things"}}"#]).unwrap_err(),
            LlmError::Api("bad things".into())
        );
        assert!(matches!(
            feed(&[r#"{"choices":[{"index":0,"delta":{"content":"par"}}]}"#]),
            Err(LlmError::Stream(_))
        ));
    }

    #[test]
    fn the_body_has_system_first_tool_messages_and_error_prefix() {
        let messages = vec![
            Message::User("hi".into()),
            Message::Assistant {
                text: "t".into(),
                calls: vec![ToolCall::new(
                    "c1".into(),
                    "run_bash".into(),
                    r#"{"command":"x"#.into(),
                )],
                reasoning: Vec::new(),
            },
            Message::Results(vec![CallResult {
                id: "c1".into(),
                ok: false,
                text: "no".into(),
            }]),
        ];
        let body = body(
            "gpt",
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
                {"role":"system","content":"sys"},
                {"role":"user","content":"hi"},
                {"role":"assistant","content":"t","tool_calls":[{"id":"c1","type":"function","function":{"name":"run_bash","arguments":"{\"command\":\"x"}}]},
                {"role":"tool","tool_call_id":"c1","content":"ERROR: no"}
            ])
        );
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
    }
}
