//! `acp-test-agent`: a scripted ACP agent for agent.nvim's tests. No model, no network: it speaks
//! ACP (JSON-RPC 2.0, one message a line) on stdin/stdout and does what each prompt's text names.
//!
//! It is a `[[bin]]` of the package that needs the `test-support` feature: `cargo test` turns that
//! on (the package's dev-dependency on itself) and builds it on a fresh clone, the integration
//! tests find it through `CARGO_BIN_EXE_acp-test-agent`, and `cargo build --release` leaves it
//! out. It depends on nothing but std and serde_json.
//!
//! `acp-test-agent [MODE]`, MODE one of:
//! - `normal` (default);
//! - `silent`: never answers anything (for the connect timeout);
//! - `ignore-eof`: keeps running after its stdin closes (for the kill after the grace period);
//! - `spawn-child`: starts a `sleep` grandchild first (for killing the process tree);
//! - `load-only`: offers `session/load` but not `session/list`;
//! - `resume`: offers `session/load` and `session/resume`, not `session/list`;
//! - `resume-only`: offers `session/list` and `session/resume`, not `session/load`;
//! - `choices`: its sessions offer modes (`ask`, `code`) and config options (a `model` select
//!   of `fast` and `smart`, grouped, and a `web` boolean); session/set_mode and
//!   session/set_config_option change them (answered with every option as it is then);
//! - `login`: session/new and session/prompt answer `auth_required` until `authenticate` with
//!   method `key` (or a terminal login: run with the extra argument `login-terminal`, it writes
//!   the file `$ACP_TEST_AGENT_AUTH` and exits 0, and a later start finds it); `logout` undoes
//!   it;
//! - `spawn-detached`: first detaches a `sleep 1000` into a session of its own (`setsid -f`),
//!   running as `$ACP_TEST_AGENT_MARKER` (for killing what left the tree's group and parent chain).
//!
//! Prompts (the prompt's whole text): `chat`, `fs`, `permission`, `cancel`, `crash`, `usage`,
//! `info` (a usage_update with a cost and a session_info_update with a title), `updates` (a
//! current_mode_update and a config_option_update), `named-tool` (a tool call whose `name` its
//! title does not hold), `mcp-tools` (starts the `agent-nvim-editor` stdio MCP server it was
//! handed and reports the names tools/list gives, `mcp-tools: [...]`), the terminal
//! scenarios (see `terminal_scenario`),
//! `which session` (reports the session id it was prompted in, `prompted in: "s-1"`), `write`
//! (writes `written-by-agent.txt` itself, in its directory and in the one above, and says how
//! each went: `inside: written`, `outside: Permission denied (os error 13)`).
//! Images in a prompt are reported (`images: [{"mimeType": "image/png", "base64": 1234}]`,
//! the length of each one's base64); `promptCapabilities.image` is offered except in
//! `load-only` mode.
//! Files attached to a prompt as `resource` blocks are reported (`resources: [{"file", "scheme",
//! "text"}]`, then the prompt's text as `typed`); `promptCapabilities.embeddedContext` is
//! offered except in `load-only` mode.
//! `session/fork` (offered except in `load-only` mode) answers `{id}-fork` for session `{id}`.
//! It offers `session/list` (two sessions of its directory, over two pages) and `session/load`
//! (replays a prompt, an answer and a tool call).
//! `session/new` answers `$ACP_TEST_AGENT_SESSION`, `s-1` when it is not set.
//! Results the client sent back are reported as agent message chunks, one JSON line each.
//! With `ACP_TEST_AGENT_LOG` set, every line received and the pids it knows are appended to that
//! file, so a test can check what was (and was not) sent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "normal".into());
    log(&json!({"pid": std::process::id()}));
    let auth_file = std::env::var_os("ACP_TEST_AGENT_AUTH").map(PathBuf::from);
    if std::env::args().any(|arg| arg == "login-terminal") {
        // A terminal login: what a person sees, then the proof a later start finds.
        raw("Logged in.");
        if let Some(file) = &auth_file {
            std::fs::write(file, "yes").unwrap();
        }
        std::process::exit(0);
    }
    if mode == "spawn-child" {
        #[allow(clippy::zombie_processes)]
        let child = std::process::Command::new("sleep")
            .arg("1000")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        log(&json!({"grandchild": child.id()}));
        // Never waited for: it is meant to outlive this process unless its group is killed.
        std::mem::forget(child);
    }
    if mode == "spawn-detached" {
        let marker = std::env::var("ACP_TEST_AGENT_MARKER").unwrap_or_else(|_| "detached".into());
        // It keeps our stdout open, as a language server started by a real agent would.
        let status = std::process::Command::new("setsid")
            .args(["-f", "bash", "-c", &format!("exec -a {marker} sleep 1000")])
            .stdin(std::process::Stdio::null())
            .status()
            .unwrap();
        // `setsid -f` returns before the process has taken its name: wait until it has, so a
        // test that looks for it right after connecting finds it.
        for _ in 0..500 {
            if running_as(&marker) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        log(&json!({"detached": status.success()}));
    }
    // What agents and their wrappers print before speaking: must be skipped, not answered.
    raw("Debugger attached.");
    raw("[\"not\", \"an object\"]");

    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            log(&json!({"received": line}));
            if let Ok(message) = serde_json::from_str::<Value>(&line) {
                if tx.send(message).is_err() {
                    break;
                }
            }
        }
    });
    let mut agent = Agent {
        rx,
        ignore_eof: mode == "ignore-eof",
        next_id: 0,
        queued: VecDeque::new(),
        cancelled: false,
        mode: "ask".into(),
        model: "fast".into(),
        web: false,
        authenticated: mode != "login" || auth_file.as_ref().is_some_and(|f| f.exists()),
        mcp: serde_json::Map::new(),
        editor_server: None,
        prompt_id: Value::Null,
        closed: Value::Null,
    };
    if mode == "silent" {
        loop {
            std::thread::sleep(Duration::from_secs(1000));
        }
    }
    loop {
        let message = agent.next();
        let id = message.get("id").cloned();
        let method = message["method"].as_str().unwrap_or("").to_string();
        match (method.as_str(), id) {
            ("initialize", Some(id)) => send(&json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": 1,
                "agentCapabilities": {"loadSession": mode != "resume-only",
                    "mcpCapabilities": {"http": mode == "mcp-http", "sse": false},
                    "promptCapabilities": {"image": mode != "load-only",
                        "audio": mode != "load-only", "embeddedContext": mode != "load-only"},
                    "sessionCapabilities": match mode.as_str() {
                        "load-only" => json!({}),
                        "resume" => json!({"resume": {}}),
                        "resume-only" => json!({"list": {}, "resume": {}}),
                        _ => json!({"list": {}, "close": {}, "additionalDirectories": {},
                            "fork": {}, "delete": {}}),
                    },
                    "auth": if mode == "login" { json!({"logout": {}}) } else { json!({}) }},
                "authMethods": if mode == "login" { json!([
                    {"id": "key", "name": "Log in with a key", "description": "Asks for nothing"},
                    {"type": "terminal", "id": "tty", "name": "Log in in a terminal",
                        "args": ["login-terminal"], "env": {"ACP_TEST_LOGIN": "1"}}]) }
                    else { json!([]) },
                "agentInfo": {"name": "acp-test-agent", "version": "0"}}})),
            ("session/new", Some(id)) if !agent.authenticated => send(&json!({"jsonrpc": "2.0",
                "id": id, "error": {"code": -32000, "message": "Authentication required"}})),
            ("session/prompt", Some(id)) if !agent.authenticated => send(&json!({"jsonrpc": "2.0",
                "id": id, "error": {"code": -32000, "message": "Authentication required"}})),
            ("authenticate", Some(id)) => {
                agent.authenticated = message["params"]["methodId"] == "key";
                let result = if agent.authenticated {
                    json!({"result": {}})
                } else {
                    json!({"error": {"code": -32602, "message": "no such method"}})
                };
                let mut answer = json!({"jsonrpc": "2.0", "id": id});
                answer
                    .as_object_mut()
                    .unwrap()
                    .extend(result.as_object().unwrap().clone());
                send(&answer);
            }
            ("logout", Some(id)) => {
                agent.authenticated = false;
                send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}));
            }
            ("session/close", Some(id)) => send(&json!({"jsonrpc": "2.0", "id": id, "result": {}})),
            ("session/new", Some(id)) => {
                agent
                    .mcp
                    .insert("session/new".into(), mcp_summary(&message["params"]));
                agent.editor_server =
                    message["params"]["mcpServers"]
                        .as_array()
                        .and_then(|servers| {
                            servers
                                .iter()
                                .find(|s| s["name"] == "agent-nvim-editor")
                                .cloned()
                        });
                let mut result = json!({"sessionId": std::env::var("ACP_TEST_AGENT_SESSION")
                    .unwrap_or_else(|_| "s-1".into())});
                if mode == "choices" {
                    result["modes"] = json!({"currentModeId": agent.mode, "availableModes": [
                        {"id": "ask", "name": "Ask", "description": "Asks before editing"},
                        {"id": "code", "name": "Code"}]});
                    result["configOptions"] = agent.options();
                }
                send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
                // As Claude Code's adapter does: its slash commands, right after the session.
                if mode == "commands" {
                    update(json!({"sessionUpdate": "available_commands_update",
                        "availableCommands": [
                            {"name": "web", "description": "Search the web",
                                "input": {"hint": "query"}},
                            {"name": "init", "description": "Write an AGENTS.md"},
                            {"name": "compact", "description": "Summarise the session"}]}));
                }
            }
            ("session/set_mode", Some(id)) => {
                agent.mode = message["params"]["modeId"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}));
            }
            ("session/set_config_option", Some(id)) => {
                let params = &message["params"];
                match (params["configId"].as_str(), &params["value"]) {
                    (Some("model"), Value::String(value)) => agent.model = value.clone(),
                    (Some("web"), Value::Bool(value)) => agent.web = *value,
                    _ => {}
                }
                send(&json!({"jsonrpc": "2.0", "id": id,
                    "result": {"configOptions": agent.options()}}));
            }
            ("session/list", Some(id)) => {
                send(&json!({"jsonrpc": "2.0", "id": id, "result": sessions(&message["params"])}));
            }
            // A fork: the new session's id, `{the session forked}-fork`; with
            // `ACP_TEST_AGENT_LOG` set, the request is logged as every line is.
            ("session/fork", Some(id)) => {
                let forked = message["params"]["sessionId"].as_str().unwrap_or("");
                send(&json!({"jsonrpc": "2.0", "id": id,
                    "result": {"sessionId": format!("{forked}-fork")}}));
            }
            // A delete: answered, and said as a message of the session prompts go to.
            ("session/delete", Some(id)) => {
                report("deleted", &message["params"]["sessionId"]);
                send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}));
            }
            // A resume: nothing replayed, the session answered with its modes.
            ("session/resume", Some(id)) => {
                agent
                    .mcp
                    .insert("session/resume".into(), mcp_summary(&message["params"]));
                send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}));
            }
            // A load that never ends by itself: answered "cancelled" (-32800) once the client
            // sends `$/cancel_request` naming it.
            ("session/load", Some(id)) if message["params"]["sessionId"] == "slow" => {
                replay("slow");
                loop {
                    let next = agent.receive();
                    if next["method"] == "$/cancel_request" && next["params"]["requestId"] == id {
                        break;
                    }
                }
                send(&json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32800, "message": "request cancelled"}}));
            }
            ("session/load", Some(id)) => {
                agent
                    .mcp
                    .insert("session/load".into(), mcp_summary(&message["params"]));
                let session = message["params"]["sessionId"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                replay(&session);
                send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}));
            }
            // A side question, in a forked session: answered there, after trying to write a
            // file and to be allowed something (both must be refused).
            ("session/prompt", Some(id))
                if message["params"]["sessionId"]
                    .as_str()
                    .is_some_and(|s| s.ends_with("-fork"))
                    && message["params"]["prompt"][0]["text"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("[A side question")) =>
            {
                let session = message["params"]["sessionId"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let question = message["params"]["prompt"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .lines()
                    .last()
                    .unwrap_or("")
                    .to_string();
                let write = agent.request(
                    "fs/write_text_file",
                    json!({"sessionId": session, "path": "side.txt", "content": "x"}),
                );
                let allowed = agent.request(
                    "session/request_permission",
                    json!({"sessionId": session, "toolCall": {"toolCallId": "side-1",
                        "title": "touch side.txt"},
                        "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}]}),
                );
                let said = format!(
                    "side answer to {question:?}; write: {}; permission: {}",
                    if write.get("error").is_some() {
                        "refused"
                    } else {
                        "done"
                    },
                    allowed["result"]["outcome"]["outcome"]
                        .as_str()
                        .unwrap_or("?"),
                );
                send(&json!({"jsonrpc": "2.0", "method": "session/update",
                    "params": {"sessionId": session, "update": {"sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": said}}}}));
                send(&json!({"jsonrpc": "2.0", "id": id, "result": {"stopReason": "end_turn"}}));
            }
            ("session/prompt", Some(id)) => {
                agent.cancelled = false;
                let text = message["params"]["prompt"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                // Images: each reported as the media type and the size it decodes to.
                let images: Vec<Value> = message["params"]["prompt"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|block| block["type"] == "image")
                    .map(|block| {
                        let data = block["data"].as_str().unwrap_or("");
                        json!({"mimeType": block["mimeType"], "base64": data.len()})
                    })
                    .collect();
                if !images.is_empty() {
                    report("images", &json!(images));
                }
                // Audio: each reported as its media type and its base64 text's length and start.
                let audio: Vec<Value> = message["params"]["prompt"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|block| block["type"] == "audio")
                    .map(|block| {
                        let data = block["data"].as_str().unwrap_or("");
                        json!({"mimeType": block["mimeType"], "base64": data.len(),
                            "start": data.get(..8).unwrap_or(data)})
                    })
                    .collect();
                if !audio.is_empty() {
                    report("heard", &json!(audio));
                }
                // Embedded resources: each reported as its file name and text.
                let resources: Vec<Value> = message["params"]["prompt"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|block| block["type"] == "resource")
                    .map(|block| {
                        let uri = block["resource"]["uri"].as_str().unwrap_or("");
                        json!({"file": uri.rsplit('/').next().unwrap_or(""),
                            "scheme": uri.split(':').next().unwrap_or(""),
                            "text": block["resource"]["text"]})
                    })
                    .collect();
                if !resources.is_empty() {
                    report("resources", &json!(resources));
                    report("typed", &json!(text));
                }
                if text == "which session" {
                    let session = message["params"]["sessionId"].as_str().unwrap_or("");
                    report("prompted in", &json!(session));
                }
                // A slash command: reported as it came (ACP sends it as the prompt's text).
                if text.starts_with('/') {
                    report("slash", &json!(text));
                    send(
                        &json!({"jsonrpc": "2.0", "id": id, "result": {"stopReason": "end_turn"}}),
                    );
                    continue;
                }
                // A prompt the client put notes before: reported whole, its last line runs.
                if text.contains('\n') {
                    report("prompt", &json!(text));
                }
                let name = text.lines().last().unwrap_or("").to_string();
                agent.prompt_id = id.clone();
                let result = agent.scenario(&name);
                // Null: the scenario answered the prompt itself.
                if !result.is_null() {
                    send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
                }
            }
            (_, Some(id)) => send(&json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "Method not found"}})),
            (_, None) => {}
        }
    }
}

struct Agent {
    rx: mpsc::Receiver<Value>,
    ignore_eof: bool,
    /// Our request ids start at 0, as real agents' do.
    next_id: u64,
    /// Requests and notifications that arrived while waiting for a response.
    queued: VecDeque<Value>,
    /// session/cancel arrived during the current prompt.
    cancelled: bool,
    /// `choices`: the session's mode and options.
    mode: String,
    model: String,
    web: bool,
    /// `login`: authenticated (else session/new and prompts want a login).
    authenticated: bool,
    /// The MCP servers each session method was sent, summed up (names, never the values of
    /// their variables and headers): what the `mcp` scenario reports.
    mcp: serde_json::Map<String, Value>,
    /// The editor tools server session/new was handed (`agent-nvim-editor`), whole: what
    /// `mcp-tools` starts.
    editor_server: Option<Value>,
    /// The id of the prompt being answered (what a request-scoped question names).
    prompt_id: Value,
    /// How the client answered `elicit-request`'s question about its prompt.
    closed: Value,
}

/// Starts the stdio MCP server `server` (an `mcpServers` entry), asks it initialize and
/// tools/list, and returns the tools' names (or what went wrong, as a string).
fn list_mcp_tools(server: &Value) -> Value {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut command = std::process::Command::new(server["command"].as_str().unwrap_or(""));
    command
        .args(strings(&server["args"]))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    for pair in server["env"].as_array().into_iter().flatten() {
        command.env(
            pair["name"].as_str().unwrap_or(""),
            pair["value"].as_str().unwrap_or(""),
        );
    }
    let Ok(mut child) = command.spawn() else {
        return json!("did not start");
    };
    let mut input = child.stdin.take().unwrap();
    let mut output = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut ask = |message: Value, answered: bool| -> Value {
        writeln!(input, "{message}").unwrap();
        input.flush().unwrap();
        if !answered {
            return Value::Null;
        }
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or(Value::Null)
    };
    ask(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "acp-test-agent", "version": "0"}}}),
        true,
    );
    ask(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        false,
    );
    let listed = ask(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
        true,
    );
    let _ = child.kill();
    let _ = child.wait();
    listed["result"]["tools"]
        .as_array()
        .map(|tools| tools.iter().map(|t| t["name"].clone()).collect())
        .unwrap_or(json!("no tools listed"))
}

/// The `mcpServers` of `params`, without the values of `env` and `headers`.
fn mcp_summary(params: &Value) -> Value {
    let names = |list: &Value| -> Value {
        list.as_array()
            .map(|l| l.iter().map(|p| p["name"].clone()).collect())
            .unwrap_or_default()
    };
    params["mcpServers"]
        .as_array()
        .map(|servers| {
            servers
                .iter()
                .map(|s| {
                    json!({"name": s["name"], "type": s.get("type").cloned().unwrap_or(json!("stdio")),
                        "command": s["command"], "args": s["args"], "url": s["url"],
                        "env": names(&s["env"]), "headers": names(&s["headers"])})
                })
                .collect()
        })
        .unwrap_or(Value::Null)
}

impl Agent {
    /// `choices`: the config options as they are now.
    fn options(&self) -> Value {
        json!([
            {"id": "model", "name": "Model", "category": "model", "type": "select",
                "currentValue": self.model, "options": [
                    {"group": "quick", "name": "Quick", "options": [
                        {"value": "fast", "name": "Fast model"}]},
                    {"value": "smart", "name": "Smart model", "description": "Slower"}]},
            {"id": "web", "name": "Web search", "type": "boolean", "currentValue": self.web}
        ])
    }

    /// The next message not yet handled; exits at EOF (unless ignoring it).
    fn next(&mut self) -> Value {
        if let Some(message) = self.queued.pop_front() {
            return message;
        }
        self.receive()
    }

    fn receive(&mut self) -> Value {
        match self.rx.recv() {
            Ok(message) => {
                if message["method"] == "session/cancel" {
                    self.cancelled = true;
                }
                message
            }
            Err(_) if self.ignore_eof => loop {
                std::thread::sleep(Duration::from_secs(1000));
            },
            Err(_) => std::process::exit(0),
        }
    }

    /// Sends a request to the client and waits for its response (`result` or `error`).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let message = self.receive();
            if message.get("method").is_none() && message["id"] == id {
                let mut response = message;
                if let Some(object) = response.as_object_mut() {
                    object.remove("jsonrpc");
                    object.remove("id");
                }
                return response;
            }
            if message["method"] != "session/cancel" {
                self.queued.push_back(message);
            }
        }
    }

    /// Runs the scenario a prompt names; returns the prompt's result.
    fn scenario(&mut self, name: &str) -> Value {
        if let Some(result) = self.terminal_scenario(name) {
            return result;
        }
        match name {
            // The MCP servers each session method was sent (names only).
            "mcp" => {
                report("mcp", &Value::Object(self.mcp.clone()));
                json!({"stopReason": "end_turn"})
            }
            // The editor tools server, started as an agent starts a stdio MCP server, asked
            // initialize and tools/list over MCP's own JSON-RPC; the tools' names reported.
            "mcp-tools" => {
                let listed = self
                    .editor_server
                    .as_ref()
                    .map_or(json!("no editor tools server"), list_mcp_tools);
                report("mcp-tools", &listed);
                json!({"stopReason": "end_turn"})
            }
            // A tool call with a name its title does not hold.
            "named-tool" => {
                update(
                    json!({"sessionUpdate": "tool_call", "toolCallId": "t-named",
                    "title": "Search the code", "name": "grep", "kind": "search",
                    "status": "completed"}),
                );
                json!({"stopReason": "end_turn"})
            }
            // A form to fill in: what the client answered is reported.
            "elicit-form" => {
                let answer = self.request(
                    "elicitation/create",
                    json!({"sessionId": "s-1", "mode": "form",
                        "message": "Which database should I set up?",
                        "requestedSchema": {"type": "object", "properties": {
                            "name": {"type": "string", "title": "Name",
                                "description": "what the database is called"},
                            "port": {"type": "integer", "title": "Port", "minimum": 1,
                                "maximum": 65535, "default": 5432},
                            "tls": {"type": "boolean", "title": "Use TLS", "default": true},
                            "engine": {"type": "string", "title": "Engine", "oneOf": [
                                {"const": "pg", "title": "PostgreSQL"},
                                {"const": "my", "title": "MySQL"}]}},
                        "required": ["name", "engine"]}}),
                );
                report("elicited", &answer);
                json!({"stopReason": "end_turn"})
            }
            // A URL to open (a sign-in): what the client answered is reported.
            "elicit-url" => {
                let answer = self.request(
                    "elicitation/create",
                    json!({"sessionId": "s-1", "mode": "url", "elicitationId": "e-1",
                        "message": "Sign in to the example service",
                        "url": "https://login.example.com/device?code=WXYZ"}),
                );
                report("elicited", &answer);
                json!({"stopReason": "end_turn"})
            }
            // Six forms at once: the answers that come back first (without anyone answering)
            // are reported, with their request ids.
            // Request-scoped questions: one about the prompt still waiting (asked, then closed
            // when the prompt is answered) and one naming no request of the client's
            // (answered at once, reported); the prompt answered here, the first answer kept for
            // `elicit-closed`.
            "elicit-request" => {
                let open = self.next_id;
                self.next_id += 1;
                send(
                    &json!({"jsonrpc": "2.0", "id": open, "method": "elicitation/create",
                    "params": {"requestId": self.prompt_id, "mode": "form",
                        "message": "About this prompt?",
                        "requestedSchema": {"type": "object", "properties": {}}}}),
                );
                let stale = self.request(
                    "elicitation/create",
                    json!({"requestId": 424242, "mode": "form", "message": "About nothing?",
                        "requestedSchema": {"type": "object", "properties": {}}}),
                );
                report("stale", &stale);
                send(&json!({"jsonrpc": "2.0", "id": self.prompt_id,
                    "result": {"stopReason": "end_turn"}}));
                loop {
                    let message = self.receive();
                    if message.get("method").is_none() && message["id"] == open {
                        self.closed = message["result"].clone();
                        break;
                    }
                }
                Value::Null
            }
            // How the question about the last `elicit-request` prompt was answered, reported
            // in this turn (that one's had ended).
            "elicit-closed" => {
                report("closed", &self.closed);
                json!({"stopReason": "end_turn"})
            }
            "elicit-flood" => {
                let first = self.next_id;
                for _ in 0..6 {
                    let id = self.next_id;
                    self.next_id += 1;
                    send(
                        &json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create",
                        "params": {"sessionId": "s-1", "mode": "form", "message": "Again?",
                            "requestedSchema": {"type": "object", "properties": {}}}}),
                    );
                }
                let mut early = Vec::new();
                while early.len() < 2 {
                    let message = self.receive();
                    if message.get("method").is_none() {
                        early.push(
                            json!({"id": message["id"].as_i64().map(|i| i - first as i64),
                            "action": message["result"]["action"]}),
                        );
                    } else {
                        self.queued.push_back(message);
                    }
                }
                report("early", &json!(early));
                json!({"stopReason": "end_turn"})
            }
            // A URL question the agent says is complete before anyone answers it.
            "elicit-complete" => {
                let id = self.next_id;
                self.next_id += 1;
                send(
                    &json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create",
                    "params": {"sessionId": "s-1", "mode": "url", "elicitationId": "e-2",
                        "message": "Approve on your phone",
                        "url": "https://phone.example.com/approve"}}),
                );
                std::thread::sleep(Duration::from_millis(300));
                send(&json!({"jsonrpc": "2.0", "method": "elicitation/complete",
                    "params": {"elicitationId": "e-2"}}));
                let answer = loop {
                    let message = self.receive();
                    if message.get("method").is_none() && message["id"] == id {
                        break message["result"].clone();
                    }
                    self.queued.push_back(message);
                };
                report("elicited", &answer);
                json!({"stopReason": "end_turn"})
            }
            // Two plans kept apart: both written, the first updated, the second removed, a
            // third given as markdown.
            "plans" => {
                let entry = |content: &str, status: &str| json!({"content": content, "priority": "medium", "status": status});
                let items = |id: &str, entries: Value| {
                    json!({"sessionUpdate": "plan_update",
                        "plan": {"type": "items", "planId": id, "entries": entries}})
                };
                update(items(
                    "plan-a",
                    json!([
                        entry("Read the parser", "in_progress"),
                        entry("Fix it", "pending")
                    ]),
                ));
                update(items("plan-b", json!([entry("Write the docs", "pending")])));
                update(items(
                    "plan-a",
                    json!([
                        entry("Read the parser", "completed"),
                        entry("Fix it", "in_progress")
                    ]),
                ));
                update(json!({"sessionUpdate": "plan_removed", "planId": "plan-b"}));
                update(
                    json!({"sessionUpdate": "plan_update", "plan": {"type": "markdown",
                    "planId": "plan-c", "content": "1. Ship it\n2. Tell people"}}),
                );
                json!({"stopReason": "end_turn"})
            }
            // Two messages, told apart by their ids.
            "messages" => {
                for (id, text) in [
                    ("m-1", "First."),
                    ("m-1", " Still first."),
                    ("m-2", "Second."),
                ] {
                    update(
                        json!({"sessionUpdate": "agent_message_chunk", "messageId": id,
                        "content": {"type": "text", "text": text}}),
                    );
                }
                json!({"stopReason": "end_turn"})
            }
            // A compaction: begun, its summary sent in two chunks, then completed; and one
            // that fails.
            "compaction" => {
                update(
                    json!({"sessionUpdate": "compaction_update", "compactionId": "c-1",
                    "status": "in_progress"}),
                );
                for piece in ["Fixed the parser; ", "tests pass."] {
                    update(json!({"sessionUpdate": "compaction_summary_chunk",
                        "compactionId": "c-1", "content": {"type": "text", "text": piece}}));
                }
                update(
                    json!({"sessionUpdate": "compaction_update", "compactionId": "c-1",
                    "status": "completed"}),
                );
                update(
                    json!({"sessionUpdate": "compaction_update", "compactionId": "c-2",
                    "status": "failed", "error": "context too small"}),
                );
                json!({"stopReason": "end_turn"})
            }
            // Notices at each severity, one the protocol does not know (kept as info).
            "notice" => {
                for (severity, title) in [
                    ("warning", "MCP server unavailable"),
                    ("critical", "Something odd"),
                ] {
                    update(json!({"sessionUpdate": "notice", "severity": severity,
                        "title": title, "description": "said by the test agent"}));
                }
                json!({"stopReason": "end_turn"})
            }
            "chat" => {
                raw("a stray line in the middle of a turn");
                send(&json!({"jsonrpc": "2.0", "method": "_auth/status_update",
                    "params": {"sessionId": "s-1", "status": "ok"}}));
                update(json!({"sessionUpdate": "agent_thought_chunk",
                    "content": {"type": "text", "text": "Thinking about it."}}));
                update(json!({"sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "Hello"}}));
                update(json!({"sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": ", world"}}));
                update(json!({"sessionUpdate": "plan", "entries": [
                    {"content": "Read the notes", "priority": "high", "status": "completed"},
                    {"content": "Answer", "priority": "medium", "status": "in_progress"}]}));
                update(json!({"sessionUpdate": "tool_call", "toolCallId": "t1",
                    "title": "Read notes.txt", "kind": "read", "status": "pending",
                    "rawInput": {"path": "notes.txt"}}));
                update(
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1",
                    "status": "in_progress"}),
                );
                update(
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1",
                    "status": "completed", "content": [
                        {"type": "content", "content": {"type": "text", "text": "1 line"}},
                        {"type": "terminal", "terminalId": "term-1"}]}),
                );
                update(json!({"sessionUpdate": "available_commands_update",
                    "availableCommands": []}));
                json!({"stopReason": "end_turn"})
            }
            "fs" => {
                let outside = std::env::current_dir()
                    .unwrap()
                    .parent()
                    .map(|dir| dir.join("outside.txt"))
                    .unwrap_or_else(|| PathBuf::from("/outside.txt"));
                let reads = [
                    (
                        "read inside.txt",
                        json!({"sessionId": "s-1", "path": "inside.txt", "line": 2, "limit": 1}),
                    ),
                    (
                        "read ../outside.txt",
                        json!({"sessionId": "s-1", "path": "../outside.txt"}),
                    ),
                    (
                        "read absolute outside",
                        json!({"sessionId": "s-1", "path": outside}),
                    ),
                    (
                        "read open.txt",
                        json!({"sessionId": "s-1", "path": "open.txt"}),
                    ),
                ];
                for (label, params) in reads {
                    let response = self.request("fs/read_text_file", params);
                    report(label, &response);
                }
                let writes = [
                    (
                        "write made/by/agent.txt",
                        json!({"sessionId": "s-1", "path": "made/by/agent.txt", "content": "written\n"}),
                    ),
                    (
                        "write dirty.txt",
                        json!({"sessionId": "s-1", "path": "dirty.txt", "content": "clobbered"}),
                    ),
                    (
                        "write ../escape.txt",
                        json!({"sessionId": "s-1", "path": "../escape.txt", "content": "out"}),
                    ),
                ];
                for (label, params) in writes {
                    let response = self.request("fs/write_text_file", params);
                    report(label, &response);
                }
                let response = self.request("_custom/thing", json!({"sessionId": "s-1"}));
                report("unknown request", &response);
                json!({"stopReason": "end_turn"})
            }
            "permission" | "cancel" | "spoof" => {
                let notes = std::env::current_dir().unwrap().join("notes.txt");
                // `spoof`: a title and an option name that would rewrite or reorder the picker.
                let spoof = "Run touch PWNED #\r\u{1b}[2Kls -la";
                let allow = if name == "spoof" {
                    "Allow \u{202e}ti"
                } else {
                    "Allow"
                };
                let (id, title) = if name == "spoof" {
                    update(json!({"sessionUpdate": "tool_call", "toolCallId": "s1",
                        "title": spoof, "kind": "execute", "status": "pending",
                        "rawInput": {"command": "touch PWNED #\r\u{1b}[2Kls -la"}}));
                    ("s1", spoof)
                } else if name == "permission" {
                    update(json!({"sessionUpdate": "tool_call", "toolCallId": "p1",
                        "title": "Edit notes.txt", "kind": "edit", "status": "pending",
                        "content": [{"type": "diff", "path": notes, "oldText": "a\n", "newText": "b\n"}],
                        "rawInput": {"file_path": notes, "old_string": "a", "new_string": "b"}}));
                    ("p1", "Edit notes.txt")
                } else {
                    update(json!({"sessionUpdate": "tool_call", "toolCallId": "c1",
                        "title": "Run sleep 100", "kind": "execute", "status": "pending",
                        "rawInput": {"command": "sleep 100"}}));
                    ("c1", "Run sleep 100")
                };
                let response = self.request(
                    "session/request_permission",
                    json!({"sessionId": "s-1", "toolCall": {"toolCallId": id, "title": title},
                        "options": [
                            {"optionId": "allow-once", "name": allow, "kind": "allow_once"},
                            {"optionId": "always", "name": "Always allow", "kind": "allow_always"},
                            {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]}),
                );
                report("permission", &response);
                let allowed = response["result"]["outcome"]["outcome"] == "selected";
                update(
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": id,
                    "status": if allowed { "completed" } else { "failed" }}),
                );
                if self.cancelled {
                    json!({"stopReason": "cancelled"})
                } else {
                    json!({"stopReason": "end_turn"})
                }
            }
            "editwrite" => {
                // Writes through the client first, then proposes an edit and, once allowed,
                // writes exactly what it proposed.
                let here = std::env::current_dir().unwrap();
                let first = self.request(
                    "fs/write_text_file",
                    json!({"sessionId": "s-1", "path": here.join("first.txt"), "content": "one\n"}),
                );
                report("first write", &first);
                let notes = here.join("notes.txt");
                update(json!({"sessionUpdate": "tool_call", "toolCallId": "e1",
                    "title": "Edit notes.txt", "kind": "edit", "status": "pending",
                    "content": [{"type": "diff", "path": notes, "oldText": "a\nb\n", "newText": "a\nB\n"}]}));
                let response = self.request(
                    "session/request_permission",
                    json!({"sessionId": "s-1", "toolCall": {"toolCallId": "e1", "title": "Edit notes.txt"},
                        "options": [
                            {"optionId": "once", "name": "Allow", "kind": "allow_once"},
                            {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]}),
                );
                report("permission", &response);
                if response["result"]["outcome"]["outcome"] == "selected" {
                    let written = self.request(
                        "fs/write_text_file",
                        json!({"sessionId": "s-1", "path": notes, "content": "a\nB\n"}),
                    );
                    report("edit write", &written);
                }
                json!({"stopReason": "end_turn"})
            }
            "hunkwrite" | "hunkself" => {
                // An edit of notes.txt with two hunks far apart. `hunkwrite` writes through the
                // client (first.txt, then what it proposed once allowed); `hunkself` writes the
                // file itself, never through the client.
                let here = std::env::current_dir().unwrap();
                let through = name == "hunkwrite";
                if through {
                    let first = self.request(
                        "fs/write_text_file",
                        json!({"sessionId": "s-1", "path": here.join("first.txt"), "content": "one\n"}),
                    );
                    report("first write", &first);
                }
                let notes = here.join("notes.txt");
                let old: String = (1..=30).map(|i| format!("line {i}\n")).collect();
                let new = old
                    .replace("line 2\n", "line TWO\n")
                    .replace("line 28\n", "line TWENTY-EIGHT\n");
                update(json!({"sessionUpdate": "tool_call", "toolCallId": "h1",
                    "title": "Edit notes.txt", "kind": "edit", "status": "pending",
                    "content": [{"type": "diff", "path": notes, "oldText": old, "newText": new}]}));
                let response = self.request(
                    "session/request_permission",
                    json!({"sessionId": "s-1", "toolCall": {"toolCallId": "h1", "title": "Edit notes.txt"},
                        "options": [
                            {"optionId": "once", "name": "Allow", "kind": "allow_once"},
                            {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]}),
                );
                report("permission", &response);
                if response["result"]["outcome"]["outcome"] == "selected"
                    && response["result"]["outcome"]["optionId"] == "once"
                {
                    if through {
                        let written = self.request(
                            "fs/write_text_file",
                            json!({"sessionId": "s-1", "path": notes, "content": new}),
                        );
                        report("edit write", &written);
                    } else {
                        let _ = std::fs::write(&notes, &new);
                        report("wrote itself", &json!({"result": null}));
                    }
                }
                json!({"stopReason": "end_turn"})
            }
            "crash" => {
                update(json!({"sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "about to crash"}}));
                let _ = writeln!(std::io::stderr(), "fatal: test agent crashed on purpose");
                std::process::exit(3);
            }
            "outside" => {
                // An agent that writes some files itself (a.py, and new.py created) and one
                // through the client (through.py): only its own writes are changes outside the
                // client's checks. A tool call completes between the two of its own.
                let here = std::env::current_dir().unwrap();
                std::fs::write(here.join("a.py"), "changed by the agent\n").unwrap();
                update(json!({"sessionUpdate": "tool_call", "toolCallId": "t-out",
                    "title": "Edit a.py", "kind": "edit", "status": "completed"}));
                let response = self.request(
                    "fs/write_text_file",
                    json!({"sessionId": "s-1", "path": "through.py", "content": "asked for\n"}),
                );
                report("write through.py", &response);
                std::fs::write(here.join("new.py"), "made by the agent\n").unwrap();
                json!({"stopReason": "end_turn"})
            }
            // Files of its own in one turn: two changed (a.py, b.py), one made (c.py), one
            // removed (d.py).
            "outside-three" => {
                let here = std::env::current_dir().unwrap();
                std::fs::write(here.join("a.py"), "a, changed by the agent\n").unwrap();
                std::fs::write(here.join("b.py"), "b, changed by the agent\n").unwrap();
                std::fs::write(here.join("c.py"), "c, made by the agent\n").unwrap();
                let _ = std::fs::remove_file(here.join("d.py"));
                json!({"stopReason": "end_turn"})
            }
            "write" => {
                // Writes of its own, not through the client: what a sandbox must stop.
                let here = std::env::current_dir().unwrap();
                let outside = here
                    .parent()
                    .map(|dir| dir.join("written-by-agent.txt"))
                    .unwrap_or_else(|| PathBuf::from("/written-by-agent.txt"));
                for (label, path) in [
                    ("inside", here.join("written-by-agent.txt")),
                    ("outside", outside),
                ] {
                    let result = match std::fs::write(&path, "x") {
                        Ok(()) => "written".to_string(),
                        Err(err) => err.to_string(),
                    };
                    update(json!({"sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": format!("{label}: {result}\n")}}));
                }
                json!({"stopReason": "end_turn"})
            }
            "updates" => {
                // What an agent sends when its mode or options change on their own.
                update(json!({"sessionUpdate": "current_mode_update", "currentModeId": "code"}));
                update(
                    json!({"sessionUpdate": "config_option_update", "configOptions": [
                    {"id": "web", "name": "Web search", "type": "boolean", "currentValue": true}]}),
                );
                json!({"stopReason": "end_turn"})
            }
            "info" => {
                update(
                    json!({"sessionUpdate": "usage_update", "used": 45200, "size": 200000,
                    "cost": {"amount": 0.42, "currency": "USD"}}),
                );
                update(json!({"sessionUpdate": "session_info_update",
                    "title": "Fix the failing test"}));
                json!({"stopReason": "end_turn"})
            }
            "usage" => json!({"stopReason": "end_turn",
                "usage": {"inputTokens": 12, "outputTokens": 34, "totalTokens": 46}}),
            _ => json!({"stopReason": "refusal"}),
        }
    }
}

impl Agent {
    /// The terminal scenarios (`terminal/*`), each reporting every answer it got:
    /// - `terminal LINE`: asks permission for LINE (as a shell tool call), and when allowed runs
    ///   it in a terminal embedded in that call's row, waits for its exit, reads its output,
    ///   releases it, and asks for its output once more (an error by then);
    /// - `terminal-swap SHOWN ;; RUN`: asks permission for SHOWN, then runs RUN (what a lying
    ///   agent does);
    /// - `ask-only LINE`, `terminal-diff LINE`, `terminal-oddkind LINE`: a permission question
    ///   about LINE (plain; with a diff; with an inexact allow kind first), then (but for
    ///   `ask-only`) LINE in a terminal;
    /// - `terminal-bg LINE`: LINE in a terminal, left running;
    /// - `terminal-unasked LINE`: creates a terminal for LINE without asking, embeds it in a row
    ///   and waits for it;
    /// - `terminal-cwd DIR`: creates `pwd` in DIR without asking;
    /// - `terminal-many`: 33 terminals without a release, then one released and one more;
    /// - `terminal-env`: `echo $GREETING` with variables (and one no shell can name);
    /// - `fs-extra DIR`: reads `DIR/x.txt`, writes `DIR/y.txt` and reads `DIR/../outside.txt`
    ///   (a directory given as another root of the session);
    /// - `terminal-limit`: prints `ééé` (6 bytes) with `outputByteLimit` 5;
    /// - `terminal-kill MARKER`: starts `sleep 1000` (as MARKER) in the background and waits for
    ///   it, kills the terminal once it has printed `started`, and waits for the exit.
    fn terminal_scenario(&mut self, name: &str) -> Option<Value> {
        let (verb, rest) = name.split_once(' ').unwrap_or((name, ""));
        let done = json!({"stopReason": "end_turn"});
        match verb {
            "terminal" | "terminal-swap" => {
                let (shown, run) = rest.split_once(" ;; ").unwrap_or((rest, rest));
                update(json!({"sessionUpdate": "tool_call", "toolCallId": "x1",
                    "title": format!("Run {shown}"), "kind": "execute", "status": "pending",
                    "rawInput": {"command": shown}}));
                let response = self.request(
                    "session/request_permission",
                    json!({"sessionId": "s-1", "toolCall": {"toolCallId": "x1"},
                        "options": [
                            {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                            {"optionId": "no", "name": "Reject", "kind": "reject_once"}]}),
                );
                report("permission", &response);
                if response["result"]["outcome"]["optionId"] != "yes" {
                    update(
                        json!({"sessionUpdate": "tool_call_update", "toolCallId": "x1",
                        "status": "failed"}),
                    );
                    return Some(done);
                }
                self.run_terminal("x1", json!({"sessionId": "s-1", "command": run}), true);
                Some(done)
            }
            "ask-only" | "terminal-diff" | "terminal-oddkind" => {
                // A question about LINE: plain (`ask-only`, then nothing runs), with a diff to
                // preview (`terminal-diff`), or with an option whose kind is not an exact allow
                // listed first (`terminal-oddkind`); then LINE in a terminal, unless `ask-only`.
                let mut call = json!({"toolCallId": "q1", "title": format!("Run {rest}"),
                    "rawInput": {"command": rest}});
                if verb == "terminal-diff" {
                    call["content"] = json!([{"type": "diff", "path": "notes.txt",
                        "oldText": "a\n", "newText": "b\n"}]);
                }
                let options = if verb == "terminal-oddkind" {
                    json!([{"optionId": "no", "name": "Reject", "kind": "allow"},
                        {"optionId": "yes", "name": "Allow", "kind": "allow_once"}])
                } else {
                    json!([{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "no", "name": "Reject", "kind": "reject_once"}])
                };
                let response = self.request(
                    "session/request_permission",
                    json!({"sessionId": "s-1", "toolCall": call, "options": options}),
                );
                report("permission", &response);
                if verb != "ask-only" {
                    let created = self.request(
                        "terminal/create",
                        json!({"sessionId": "s-1", "command": rest}),
                    );
                    report("create", &created);
                }
                Some(done)
            }
            "terminal-bg" => {
                // Left running when the turn ends.
                let created = self.request(
                    "terminal/create",
                    json!({"sessionId": "s-1", "command": rest}),
                );
                report("create", &created);
                Some(done)
            }
            "terminal-unasked" => {
                update(json!({"sessionUpdate": "tool_call", "toolCallId": "u1",
                    "title": "Run something", "kind": "execute", "status": "pending"}));
                self.run_terminal("u1", json!({"sessionId": "s-1", "command": rest}), false);
                Some(done)
            }
            "fs-extra" => {
                // Reads and writes in DIR, a directory beside the workspace.
                let dir = PathBuf::from(rest);
                let read = self.request(
                    "fs/read_text_file",
                    json!({"sessionId": "s-1", "path": dir.join("x.txt")}),
                );
                report("extra read", &read);
                let written = self.request(
                    "fs/write_text_file",
                    json!({"sessionId": "s-1", "path": dir.join("y.txt"), "content": "y\n"}),
                );
                report("extra write", &written);
                let escape = self.request(
                    "fs/read_text_file",
                    json!({"sessionId": "s-1", "path": dir.join("../outside.txt")}),
                );
                report("extra escape", &escape);
                Some(done)
            }
            "terminal-env" => {
                // Variables for the command: a plain one, one bash would read at start-up, and
                // one whose name no shell takes.
                let created = self.request(
                    "terminal/create",
                    json!({"sessionId": "s-1", "command": "echo $GREETING",
                        "env": [{"name": "GREETING", "value": "hi there"},
                            {"name": "BASH_ENV", "value": "/nonexistent/rc"}]}),
                );
                report("create", &created);
                let params =
                    json!({"sessionId": "s-1", "terminalId": created["result"]["terminalId"]});
                let exit = self.request("terminal/wait_for_exit", params.clone());
                report("exit", &exit);
                report("output", &self.request("terminal/output", params));
                let bad = self.request(
                    "terminal/create",
                    json!({"sessionId": "s-1", "command": "true",
                        "env": [{"name": "A=B", "value": "x"}]}),
                );
                report("bad env", &bad);
                Some(done)
            }
            "terminal-many" => {
                // More terminals than a client holds, none released; then one released, and
                // one more.
                let mut last = Value::Null;
                let mut first = Value::Null;
                for n in 0..33 {
                    last = self.request(
                        "terminal/create",
                        json!({"sessionId": "s-1", "command": "true"}),
                    );
                    if n == 0 {
                        first = last["result"]["terminalId"].clone();
                    }
                }
                report("33rd", &last);
                self.request(
                    "terminal/release",
                    json!({"sessionId": "s-1", "terminalId": first}),
                );
                let again = self.request(
                    "terminal/create",
                    json!({"sessionId": "s-1", "command": "true"}),
                );
                report("after release", &again);
                Some(done)
            }
            "terminal-cwd" => {
                let created = self.request(
                    "terminal/create",
                    json!({"sessionId": "s-1", "command": "pwd", "cwd": rest}),
                );
                report("create", &created);
                Some(done)
            }
            "terminal-limit" => {
                let created = self.request(
                    "terminal/create",
                    json!({"sessionId": "s-1", "command": "printf", "args": ["ééé"],
                        "outputByteLimit": 5}),
                );
                let id = created["result"]["terminalId"].clone();
                let exit = self.request(
                    "terminal/wait_for_exit",
                    json!({"sessionId": "s-1", "terminalId": id}),
                );
                report("exit", &exit);
                let output = self.request(
                    "terminal/output",
                    json!({"sessionId": "s-1", "terminalId": id}),
                );
                report("output", &output);
                Some(done)
            }
            "terminal-kill" => {
                let line = format!("(exec -a {rest} sleep 1000) & echo started; wait");
                let created = self.request(
                    "terminal/create",
                    json!({"sessionId": "s-1", "command": line}),
                );
                report("create", &created);
                let id = created["result"]["terminalId"].clone();
                let params = json!({"sessionId": "s-1", "terminalId": id});
                for _ in 0..500 {
                    let output = self.request("terminal/output", params.clone());
                    if output["result"]["output"]
                        .as_str()
                        .is_some_and(|o| o.contains("started"))
                    {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                report("running", &json!(running_as(rest)));
                let killed = self.request("terminal/kill", params.clone());
                report("kill", &killed);
                let exit = self.request("terminal/wait_for_exit", params.clone());
                report("exit", &exit);
                let released = self.request("terminal/release", params);
                report("release", &released);
                Some(done)
            }
            _ => None,
        }
    }

    /// Creates a terminal with `params`, embeds it in tool call `call`'s row, waits for it and
    /// reports what each step answered; `release` releases it after.
    fn run_terminal(&mut self, call: &str, params: Value, release: bool) {
        let created = self.request("terminal/create", params);
        report("create", &created);
        let Some(id) = created["result"]["terminalId"].as_str().map(str::to_string) else {
            update(
                json!({"sessionUpdate": "tool_call_update", "toolCallId": call,
                "status": "failed"}),
            );
            return;
        };
        update(
            json!({"sessionUpdate": "tool_call_update", "toolCallId": call,
            "status": "in_progress", "content": [{"type": "terminal", "terminalId": id}]}),
        );
        let params = json!({"sessionId": "s-1", "terminalId": id});
        let exit = self.request("terminal/wait_for_exit", params.clone());
        report("exit", &exit);
        let output = self.request("terminal/output", params.clone());
        report("output", &output);
        update(
            json!({"sessionUpdate": "tool_call_update", "toolCallId": call,
            "status": "completed"}),
        );
        if release {
            let released = self.request("terminal/release", params.clone());
            report("release", &released);
            let after = self.request("terminal/output", params);
            report("after release", &after);
        }
    }
}

/// This directory's earlier sessions (session/list), over two pages: `earlier-1` with a title
/// and a time, then `earlier-2` with neither.
fn sessions(params: &Value) -> Value {
    let cwd = std::env::current_dir().unwrap();
    if params["cursor"] == "page-2" {
        return json!({"sessions": [{"sessionId": "earlier-2", "cwd": cwd}]});
    }
    json!({"sessions": [{"sessionId": "earlier-1", "cwd": cwd, "title": "Fix the parser",
        "updatedAt": "2026-11-30T10:00:00Z"}], "nextCursor": "page-2"})
}

/// Replays earlier session `session` (session/load): a user message in two chunks, the agent's
/// answer and a finished tool call.
fn replay(session: &str) {
    let update = |update: Value| {
        send(&json!({"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": session, "update": update}}));
    };
    update(json!({"sessionUpdate": "user_message_chunk",
        "content": {"type": "text", "text": "Fix the "}}));
    update(json!({"sessionUpdate": "user_message_chunk",
        "content": {"type": "text", "text": "parser"}}));
    update(json!({"sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "The parser is fixed."}}));
    update(json!({"sessionUpdate": "tool_call", "toolCallId": "l1",
        "title": "Edit parser.rs", "kind": "edit", "status": "completed",
        "content": [{"type": "content", "content": {"type": "text", "text": "1 line changed"}}]}));
}

/// Reports a response the client sent, as one message line: `{label}: {response JSON}`.
fn report(label: &str, response: &Value) {
    update(json!({"sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": format!("{label}: {response}\n")}}));
}

fn update(update: Value) {
    send(&json!({"jsonrpc": "2.0", "method": "session/update",
        "params": {"sessionId": "s-1", "update": update}}));
}

fn send(message: &Value) {
    raw(&message.to_string());
}

fn raw(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Appends `entry` to `$ACP_TEST_AGENT_LOG`, when set.
fn log(entry: &Value) {
    let Some(path) = std::env::var_os("ACP_TEST_AGENT_LOG") else {
        return;
    };
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{entry}");
    }
}

/// Whether a process's command line holds `marker`.
fn running_as(marker: &str) -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(marker)
        })
}
