//! MCP servers handed to an agent (`mcp_servers` in setup, and per agent): sent in
//! `session/new`, `session/load`, `session/resume` and `session/fork`. A stdio server goes to
//! every agent (the protocol says all take it); an HTTP or SSE one only to an agent whose
//! `mcpCapabilities` say it takes that transport, else it is left out and the chat says so once.
//!
//! The values of `env` and `headers` are secrets as far as we know: [`McpServer`]'s `Debug`
//! shows their names only, so no log line holds them, and nothing here is saved.

use std::path::PathBuf;

use serde_json::{json, Value};

/// One MCP server to hand to the agent.
#[derive(Clone, PartialEq, Eq)]
pub enum McpServer {
    /// Started by the agent: `command` (absolute) with `args` and `env`.
    Stdio {
        name: String,
        command: PathBuf,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// Reached by the agent at `url` (`http` or `sse`), with `headers`.
    Remote {
        name: String,
        transport: Transport,
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// How a remote MCP server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    Sse,
}

impl Transport {
    /// The protocol's word for it.
    pub fn word(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Sse => "sse",
        }
    }
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |pairs: &[(String, String)]| -> Vec<String> {
            pairs.iter().map(|(name, _)| name.clone()).collect()
        };
        match self {
            McpServer::Stdio {
                name,
                command,
                args,
                env,
            } => f
                .debug_struct("Stdio")
                .field("name", name)
                .field("command", command)
                .field("args", args)
                .field("env (names)", &names(env))
                .finish(),
            McpServer::Remote {
                name,
                transport,
                url,
                headers,
            } => f
                .debug_struct("Remote")
                .field("name", name)
                .field("transport", transport)
                .field("url", url)
                .field("headers (names)", &names(headers))
                .finish(),
        }
    }
}

impl McpServer {
    /// Its name.
    pub fn name(&self) -> &str {
        match self {
            McpServer::Stdio { name, .. } | McpServer::Remote { name, .. } => name,
        }
    }

    /// As the protocol's `McpServer` (`env` and `headers` as lists of `{name, value}`).
    fn to_json(&self) -> Value {
        let pairs = |pairs: &[(String, String)]| -> Value {
            pairs
                .iter()
                .map(|(name, value)| json!({"name": name, "value": value}))
                .collect()
        };
        match self {
            McpServer::Stdio {
                name,
                command,
                args,
                env,
            } => json!({
                "name": name,
                "command": command,
                "args": args,
                "env": pairs(env),
            }),
            McpServer::Remote {
                name,
                transport,
                url,
                headers,
            } => json!({
                "type": transport.word(),
                "name": name,
                "url": url,
                "headers": pairs(headers),
            }),
        }
    }
}

/// Which remote transports the agent takes (its `mcpCapabilities`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Takes {
    pub(super) http: bool,
    pub(super) sse: bool,
}

/// The `mcpServers` to send to an agent that takes `takes`, and the names of those left out
/// for it, each with its transport.
pub(super) fn for_agent(servers: &[McpServer], takes: Takes) -> (Value, Vec<String>) {
    let mut sent = Vec::new();
    let mut left = Vec::new();
    for server in servers {
        match server {
            McpServer::Remote {
                name, transport, ..
            } if !match transport {
                Transport::Http => takes.http,
                Transport::Sse => takes.sse,
            } =>
            {
                left.push(format!("{name} ({})", transport.word()));
            }
            _ => sent.push(server.to_json()),
        }
    }
    (Value::Array(sent), left)
}

/// What the chat says once about servers left out for `agent`.
pub(super) fn left_out_message(agent: &str, left: &[String]) -> String {
    format!(
        "{agent} does not take these MCP servers' transports (its mcpCapabilities), so they were left out: {}",
        left.join(", ")
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn servers() -> Vec<McpServer> {
        vec![
            McpServer::Stdio {
                name: "files".into(),
                command: PathBuf::from("/usr/bin/mcp-files"),
                args: vec!["--root".into(), ".".into()],
                env: vec![("TOKEN".into(), "s3cret-env".into())],
            },
            McpServer::Remote {
                name: "docs".into(),
                transport: Transport::Http,
                url: "https://docs.example/mcp".into(),
                headers: vec![("Authorization".into(), "Bearer s3cret-hdr".into())],
            },
            McpServer::Remote {
                name: "stream".into(),
                transport: Transport::Sse,
                url: "https://stream.example/sse".into(),
                headers: vec![],
            },
        ]
    }

    #[test]
    fn stdio_servers_go_to_every_agent_and_remote_ones_only_where_their_transport_is_taken() {
        let (sent, left) = for_agent(&servers(), Takes::default());
        assert_eq!(
            sent,
            json!([{"name": "files", "command": "/usr/bin/mcp-files", "args": ["--root", "."],
                "env": [{"name": "TOKEN", "value": "s3cret-env"}]}])
        );
        assert_eq!(left, ["docs (http)", "stream (sse)"]);
        let (sent, left) = for_agent(
            &servers(),
            Takes {
                http: true,
                sse: false,
            },
        );
        assert_eq!(sent.as_array().unwrap().len(), 2);
        assert_eq!(
            sent[1],
            json!({"type": "http", "name": "docs", "url": "https://docs.example/mcp",
                "headers": [{"name": "Authorization", "value": "Bearer s3cret-hdr"}]})
        );
        assert_eq!(left, ["stream (sse)"]);
        assert_eq!(
            left_out_message("claude", &left),
            "claude does not take these MCP servers' transports (its mcpCapabilities), so they were left out: stream (sse)"
        );
    }

    #[test]
    fn debug_output_names_the_variables_and_headers_but_never_shows_their_values() {
        let shown = format!("{:?}", servers());
        assert!(
            shown.contains("TOKEN") && shown.contains("Authorization"),
            "{shown}"
        );
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn every_server_validates_against_the_protocols_own_type() {
        let (sent, _) = for_agent(
            &servers(),
            Takes {
                http: true,
                sse: true,
            },
        );
        for server in sent.as_array().unwrap() {
            let parsed: agent_client_protocol::v1::schema::McpServer =
                serde_json::from_value(server.clone()).unwrap();
            assert_eq!(serde_json::to_value(&parsed).unwrap(), *server);
        }
    }
}
