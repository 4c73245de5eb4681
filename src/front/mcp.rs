//! `agent-nvim mcp --socket PATH --token TOKEN`: the editor as read-only tools for an external
//! agent (`editor_tools = true`), an MCP server on stdio built on `rmcp`. It knows nothing itself:
//! each call goes, as one line of JSON, over the private channel the backend opened for that
//! agent (a unix socket in a directory only this user can enter, named in the arguments the
//! backend gave the agent for this server, with a token the backend checks), and the backend
//! answers it from the running Neovim (`front::nvim::editor`), inside the workspace's path check
//! and bounded like read_file. No tool of it writes, runs or reaches outside the workspace.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::{Error, Result};

/// The server's name, as the agent is told it (`mcpServers[].name`).
pub const SERVER_NAME: &str = "agent-nvim-editor";

/// The entry an agent is handed in `mcpServers` for the editor tools: `command` (this binary)
/// run as `mcp` with the channel's socket and token, and no environment of its own.
pub fn server(command: PathBuf, socket: &Path, token: &str) -> crate::acp::mcp::McpServer {
    crate::acp::mcp::McpServer::Stdio {
        name: SERVER_NAME.into(),
        command,
        args: vec![
            "mcp".into(),
            "--socket".into(),
            socket.display().to_string(),
            "--token".into(),
            token.to_string(),
        ],
        env: Vec::new(),
    }
}

/// One call over the private channel: the token, the tool and its arguments.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub token: String,
    pub tool: String,
    #[serde(default)]
    pub args: Value,
}

/// The backend's answer: the text the agent reads, and whether it is an error.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    pub text: String,
}

/// The tools, with what each takes. Every one is read-only.
pub fn tools() -> Vec<(&'static str, &'static str, Value)> {
    let path =
        json!({"type": "string", "description": "a file in the workspace, relative to its root"});
    let position = json!({
        "type": "object",
        "properties": {
            "path": path,
            "line": {"type": "integer", "minimum": 1, "description": "1-based"},
            "column": {"type": "integer", "minimum": 1, "description": "1-based, in characters"}
        },
        "required": ["path", "line", "column"]
    });
    vec![
        (
            "diagnostics",
            "The diagnostics Neovim has (LSP, linters) for one file of the workspace, or for every open file of it when no path is given: severity, line, column, source and message.",
            json!({"type": "object", "properties": {"path": path}}),
        ),
        (
            "open_buffers",
            "The workspace's files open in Neovim, which have unsaved changes, and the unsaved text of those.",
            json!({"type": "object", "properties": {}}),
        ),
        (
            "selection",
            "The text the person last selected in Neovim (its file and lines), when it is in the workspace.",
            json!({"type": "object", "properties": {}}),
        ),
        (
            "definition",
            "Where the symbol at a position is defined (LSP), within the workspace.",
            position.clone(),
        ),
        (
            "references",
            "Where the symbol at a position is used (LSP), within the workspace.",
            position.clone(),
        ),
        ("hover", "What the language server says about the symbol at a position.", position),
        (
            "document_symbols",
            "The symbols of one file of the workspace (LSP): functions, types and the like, with their lines.",
            json!({"type": "object", "properties": {"path": path}, "required": ["path"]}),
        ),
    ]
}

/// `agent-nvim mcp`: serves the tools on stdin/stdout until the agent closes them.
pub fn run(socket: PathBuf, token: String) -> Result<u8> {
    let runtime = super::runtime_single()?;
    runtime.block_on(async move {
        let server = Editor {
            channel: Arc::new(Channel { socket, token }),
        };
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|err| Error::Io {
                context: "the MCP client did not initialize",
                source: std::io::Error::other(err.to_string()),
            })?;
        let _ = running.waiting().await;
        Ok(0)
    })
}

/// Where calls go.
struct Channel {
    socket: PathBuf,
    token: String,
}

impl Channel {
    /// One call, answered by the backend; an error the agent reads when it cannot be.
    async fn call(&self, tool: &str, args: Value) -> Reply {
        match self.ask(tool, args).await {
            Ok(reply) => reply,
            Err(err) => Reply {
                ok: false,
                text: format!(
                    "agent.nvim's editor is not reachable ({err}); Neovim may have closed"
                ),
            },
        }
    }

    async fn ask(&self, tool: &str, args: Value) -> std::io::Result<Reply> {
        let stream = tokio::net::UnixStream::connect(&self.socket).await?;
        let (read, mut write) = stream.into_split();
        let request = Request {
            token: self.token.clone(),
            tool: tool.to_string(),
            args,
        };
        let mut line = serde_json::to_string(&request).map_err(std::io::Error::other)?;
        line.push('\n');
        write.write_all(line.as_bytes()).await?;
        write.shutdown().await?;
        let mut answer = String::new();
        BufReader::new(read).read_line(&mut answer).await?;
        serde_json::from_str(&answer).map_err(std::io::Error::other)
    }
}

#[derive(Clone)]
struct Editor {
    channel: Arc<Channel>,
}

impl ServerHandler for Editor {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Read-only views of the person's running Neovim: diagnostics, open buffers with unsaved text, the selection, and LSP definition, references, hover and symbols. Paths are relative to the workspace root.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, ErrorData> {
        let tools = tools()
            .into_iter()
            .map(|(name, description, schema)| {
                let schema = match schema {
                    Value::Object(object) => object,
                    _ => serde_json::Map::new(),
                };
                let mut annotations = ToolAnnotations::new();
                annotations.read_only_hint = Some(true);
                annotations.destructive_hint = Some(false);
                annotations.open_world_hint = Some(false);
                Tool::new(name, description, Arc::new(schema)).with_annotations(annotations)
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        if !tools().iter().any(|(name, _, _)| *name == request.name) {
            return Err(ErrorData::invalid_params(
                format!("no tool named {}", request.name),
                None,
            ));
        }
        let args = request.arguments.map(Value::Object).unwrap_or(json!({}));
        let reply = self.channel.call(&request.name, args).await;
        let content = vec![ContentBlock::text(reply.text)];
        Ok(if reply.ok {
            CallToolResult::success(content)
        } else {
            CallToolResult::error(content)
        }
        .into())
    }
}
