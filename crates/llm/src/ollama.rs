//! Ollama's own chat API (`POST {root}/api/chat`, newline-delimited JSON). Its OpenAI-compatible
//! endpoint cannot set the context size, so a long conversation there is silently cut to the
//! server's default of 2k–4k tokens; this one takes `options.num_ctx`, sent from the model's
//! context setting. A model without tool support is refused by Ollama with an error that names
//! it; the message then says which model to take instead.

use futures::StreamExt;
use serde_json::{json, Value};

use super::{
    push_json, push_parts, written, LlmError, Message, Piece, Progress, Reply, Request, ToolCall,
    Usage,
};

/// A model that has tool support, named in the message for one that has not.
pub const TOOL_MODEL: &str = "qwen3-coder";

/// The longest line read before the stream is called broken (a reply line holds one delta).
const MAX_LINE: usize = 16 * 1024 * 1024;

/// The chat endpoint for a configured base URL: the OpenAI-compatible `/v1` suffix that base
/// URLs for Ollama usually end in is dropped.
pub fn url(base_url: &str) -> String {
    format!("{}/api/chat", root(base_url))
}

fn root(base_url: &str) -> &str {
    base_url.strip_suffix("/v1").unwrap_or(base_url)
}

/// How long the local server may take to list its models (`:Agent model` waits for it).
const LIST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The models the Ollama server at `base_url` has pulled (`GET {root}/api/tags`), by name, in
/// its order.
pub async fn list_models(base_url: &str) -> Result<Vec<String>, LlmError> {
    let url = format!("{}/api/tags", root(base_url));
    let connect = |reason: String| LlmError::Connect {
        url: url.clone(),
        reason,
    };
    let http = reqwest::Client::builder()
        .timeout(LIST_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|err| connect(err.to_string()))?;
    let response = http
        .get(&url)
        .send()
        .await
        .map_err(|err| connect(super::describe(&err)))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|err| connect(super::describe(&err)))?;
    if !status.is_success() {
        return Err(LlmError::Status {
            status: status.as_u16(),
            message: body.chars().take(300).collect(),
            request_id: None,
            retry_after: None,
        });
    }
    let listed: Value = serde_json::from_str(&body)
        .map_err(|err| LlmError::Stream(format!("{url} answered with no model list: {err}")))?;
    Ok(listed["models"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["name"].as_str().or_else(|| m["model"].as_str()))
        .map(String::from)
        .collect())
}

/// One message as Chat Completions messages with arguments as objects and results named by
/// their tool (the calls are in `previous`, the response they answer), each as JSON text.
pub(super) fn piece(message: &Message, previous: Option<&Message>) -> Piece {
    let parts = match message {
        Message::User(prompt) => {
            let mut text = prompt.text.clone();
            let mut images = Vec::new();
            for image in &prompt.images {
                if image.present() {
                    images.push(Value::String(image.base64()));
                } else {
                    text.push_str("\n\n");
                    text.push_str(&image.lost_line());
                }
            }
            let mut m = json!({"role": "user", "content": text});
            if !images.is_empty() {
                m["images"] = Value::Array(images);
            }
            vec![m]
        }
        Message::Assistant { text, calls, .. } => {
            let mut m = json!({"role": "assistant", "content": text});
            if !calls.is_empty() {
                m["tool_calls"] = calls
                    .iter()
                    .map(|c| {
                        let arguments = match &c.args {
                            Ok(v @ Value::Object(_)) => v.clone(),
                            _ => json!({}),
                        };
                        json!({"function": {"name": c.name, "arguments": arguments}})
                    })
                    .collect();
            }
            vec![m]
        }
        Message::Results(results) => {
            let calls = match previous {
                Some(Message::Assistant { calls, .. }) => calls.as_slice(),
                _ => &[],
            };
            results
                .iter()
                .map(|r| {
                    let content = r.sent_text();
                    let name = calls
                        .iter()
                        .find(|c| c.id == r.id)
                        .map_or("", |c| c.name.as_str());
                    json!({"role": "tool", "content": content, "tool_name": name})
                })
                .collect()
        }
    };
    Piece {
        role: "",
        parts: parts.iter().map(Value::to_string).collect(),
    }
}

/// Writes the request body: the system prompt first, then `pieces`, the context size as
/// `num_ctx`.
pub(super) fn write_body(
    out: &mut String,
    model: &str,
    system: &str,
    pieces: &[&Piece],
    tools: &str,
    context: u64,
) {
    out.push_str("{\"model\":");
    push_json(out, model);
    out.push_str(",\"stream\":true,\"tools\":");
    out.push_str(tools);
    out.push_str(",\"messages\":[{\"role\":\"system\",\"content\":");
    push_json(out, system);
    out.push('}');
    push_parts(out, pieces, true);
    out.push_str(&format!("],\"options\":{{\"num_ctx\":{context}}}}}"));
}

/// The request body as JSON (tests; the client writes it as text, [`write_body`]).
pub fn body(model: &str, request: &Request<'_>, tools: &Value, context: u64) -> Value {
    let messages = request.messages;
    let pieces: Vec<Piece> = (0..messages.len())
        .map(|i| piece(&messages[i], i.checked_sub(1).map(|j| &messages[j])))
        .collect();
    let refs: Vec<&Piece> = pieces.iter().collect();
    written(|out| {
        write_body(
            out,
            model,
            request.system,
            &refs,
            &tools.to_string(),
            context,
        )
    })
}

/// The message for Ollama's refusal of a model without tool support, else None.
pub fn no_tools(model: &str, message: &str) -> Option<String> {
    message.contains("does not support tools").then(|| {
        format!(
            "{model} has no tool support, which the agent needs to read and edit files; choose a \
             model that has it, such as {TOOL_MODEL} (ollama pull {TOOL_MODEL}, then :Agent model \
             {TOOL_MODEL}) [Ollama: {message}]"
        )
    })
}

/// Reads the streamed lines into a reply.
pub async fn read(
    response: reqwest::Response,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Reply, LlmError> {
    let mut parser = Parser::default();
    let mut stream = response.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| LlmError::Stream(super::stream_reason(&e.to_string())))?;
        buf.extend_from_slice(&chunk);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            if parser.line(&String::from_utf8_lossy(&line), progress)? {
                return parser.finish();
            }
        }
        if buf.len() > MAX_LINE {
            return Err(LlmError::Stream(
                "a line of the reply is longer than 16 MB".to_string(),
            ));
        }
    }
    if !buf.is_empty() {
        parser.line(&String::from_utf8_lossy(&buf), progress)?;
    }
    parser.finish()
}

/// Turns the lines into a [`Reply`].
#[derive(Debug, Default)]
pub struct Parser {
    text: String,
    calls: Vec<ToolCall>,
    usage: Usage,
    done: bool,
    cut: bool,
}

impl Parser {
    /// Feeds one line; true once the last (`"done": true`) arrived.
    pub fn line(
        &mut self,
        line: &str,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<bool, LlmError> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(false);
        }
        let v: Value = serde_json::from_str(line)
            .map_err(|e| LlmError::Stream(format!("unreadable line ({e})")))?;
        if let Some(error) = v.get("error") {
            let message = error
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| error.to_string());
            return Err(LlmError::Api(message));
        }
        let message = &v["message"];
        if let Some(thinking) = message["thinking"].as_str().filter(|t| !t.is_empty()) {
            progress(Progress::Thinking(thinking.to_string()));
        }
        if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
            self.text.push_str(text);
            progress(Progress::Text(text.to_string()));
        }
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            let function = &call["function"];
            let arguments = match &function["arguments"] {
                Value::String(text) => text.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            let id = call["id"]
                .as_str()
                .filter(|id| !id.is_empty())
                .map(str::to_string)
                .unwrap_or_else(|| fresh_id(self.calls.len()));
            let name = function["name"].as_str().unwrap_or_default().to_string();
            self.calls.push(ToolCall::new(id, name, arguments));
        }
        if v["done"] == true {
            let input = v["prompt_eval_count"].as_u64().unwrap_or(0);
            let output = v["eval_count"].as_u64().unwrap_or(0);
            self.usage = Usage {
                input,
                output,
                ..Usage::default()
            };
            self.done = true;
            self.cut = v["done_reason"] == "length";
            return Ok(true);
        }
        Ok(false)
    }

    /// The reply, or an error when the stream ended before its last line.
    pub fn finish(self) -> Result<Reply, LlmError> {
        if !self.done {
            return Err(LlmError::Stream(
                "the stream ended before its last line (send the prompt again)".to_string(),
            ));
        }
        Ok(Reply {
            text: self.text,
            calls: self.calls,
            usage: self.usage,
            reasoning: Vec::new(),
            cut: self.cut,
        })
    }
}

/// An id for a call Ollama sent without one: unique across the conversations of this process
/// and the ones saved before it (the chat keys its rows by id).
fn fresh_id(n: usize) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("call_{nanos:x}_{n}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::CallResult;
    use agent_nvim_fixtures::mock_llm::{MockLlm, Wire};

    #[tokio::test]
    async fn the_local_server_s_models_are_listed_by_name_and_a_server_that_lists_none_says_so() {
        let mock = MockLlm::start(Wire::Ollama, vec![])
            .with_models(&["qwen3-coder:30b", "llama3.2:latest"]);
        assert_eq!(
            list_models(&mock.base_url()).await.unwrap(),
            vec!["qwen3-coder:30b".to_string(), "llama3.2:latest".to_string()]
        );
        assert_eq!(mock.requests()[0].path, "/api/tags");
        // An OpenAI-compatible server has no /api/tags: its 404 comes back as it is.
        let other = MockLlm::start(Wire::OpenAi, vec![]);
        let err = list_models(&other.base_url()).await.unwrap_err();
        assert!(
            matches!(err, LlmError::Status { status: 404, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn lines_with_text_thinking_and_a_call_make_one_reply() {
        let mut parser = Parser::default();
        let mut seen = Vec::new();
        let mut progress = |p: Progress| seen.push(p);
        for line in [
            r#"{"model":"m","message":{"role":"assistant","content":"","thinking":"hm"},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":"Look"},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"read_file","arguments":{"path":"a"}}}]},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":30,"eval_count":4}"#,
        ] {
            if parser.line(line, &mut progress).unwrap() {
                break;
            }
        }
        let reply = parser.finish().unwrap();
        assert_eq!(reply.text, "Look");
        assert_eq!(reply.calls.len(), 1);
        assert_eq!(reply.calls[0].args, Ok(json!({"path": "a"})));
        assert!(reply.calls[0].id.starts_with("call_"));
        assert_eq!((reply.usage.input, reply.usage.output), (30, 4));
        assert_eq!(
            seen,
            vec![
                Progress::Thinking("hm".into()),
                Progress::Text("Look".into())
            ]
        );
    }

    #[test]
    fn the_body_carries_num_ctx_and_names_each_result_by_its_tool() {
        let messages = vec![
            Message::User("hi".into()),
            Message::Assistant {
                text: String::new(),
                calls: vec![ToolCall::new("c".into(), "list_files".into(), "{}".into())],
                reasoning: Vec::new(),
            },
            Message::Results(vec![CallResult {
                id: "c".into(),
                ok: true,
                text: "a\nb".into(),
            }]),
        ];
        let body = body(
            "qwen3-coder",
            &Request {
                system: "sys",
                messages: &messages,
                history: None,
            },
            &json!([]),
            32_000,
        );
        assert_eq!(body["options"], json!({"num_ctx": 32000}));
        assert_eq!(
            body["messages"][2]["tool_calls"],
            json!([{"function": {"name": "list_files", "arguments": {}}}])
        );
        assert_eq!(
            body["messages"][3],
            json!({"role": "tool", "content": "a\nb", "tool_name": "list_files"})
        );
        assert_eq!(
            url("http://localhost:11434/v1"),
            "http://localhost:11434/api/chat"
        );
        assert_eq!(url("http://h:1"), "http://h:1/api/chat");
    }

    #[test]
    fn a_model_without_tools_gets_a_message_naming_one_with_them() {
        let message = no_tools(
            "gemma2",
            "registry.ollama.ai/library/gemma2:latest does not support tools",
        )
        .unwrap();
        assert!(message.contains("ollama pull qwen3-coder"), "{message}");
        assert!(no_tools("gemma2", "model not found").is_none());
    }
}
