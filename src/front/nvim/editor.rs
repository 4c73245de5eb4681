//! The backend's end of `editor_tools` (`agent-nvim mcp`, `crate::front::mcp`): a private
//! channel per external agent, a unix socket in a directory of its own (mode 0700, under the
//! temporary directory) and a random token, named only in the MCP server's arguments the agent
//! is given in `mcpServers`. Each call is one line of JSON in, one line out; it is answered from
//! Neovim by `lua/agent/editor_tools.lua`, read-only, after the workspace's path check, and
//! bounded. The channel closes (its directory removed) when the agent's conversation ends.

use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use nvim_rs::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

use super::Nvim;
use crate::front::mcp::{Reply, Request};
use crate::workspace::Workspace;

/// The most an answer holds: what is left out is said.
const ANSWER_BYTES: usize = 64 * 1024;
/// The longest request line read.
const REQUEST_BYTES: u64 = 64 * 1024;

/// One agent's open channel: closed when dropped.
pub(super) struct Channel {
    dir: PathBuf,
    socket: PathBuf,
    token: String,
    stop: CancellationToken,
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.stop.cancel();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Channel {
    /// Opens a channel answering from `nvim` inside `workspace`, until dropped or `shutdown`.
    pub(super) fn open(
        nvim: Nvim,
        workspace: Workspace,
        shutdown: &CancellationToken,
    ) -> std::io::Result<Channel> {
        let token = random_hex()?;
        let dir = std::env::temp_dir().join(format!(
            "agent-nvim-editor-{}-{}",
            std::process::id(),
            &token[..12]
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let socket = dir.join("socket");
        let listener = match tokio::net::UnixListener::bind(&socket) {
            Ok(listener) => listener,
            Err(err) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(err);
            }
        };
        let stop = shutdown.child_token();
        let serving = stop.clone();
        let secret = token.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    () = serving.cancelled() => break,
                };
                let Ok((stream, _)) = accepted else { continue };
                let (nvim, workspace, secret) = (nvim.clone(), workspace.clone(), secret.clone());
                tokio::spawn(async move {
                    if let Err(err) = serve(stream, &nvim, &workspace, &secret).await {
                        tracing::debug!(%err, "an editor tools call was not answered");
                    }
                });
            }
        });
        Ok(Channel {
            dir,
            socket,
            token,
            stop,
        })
    }

    /// The MCP server the agent is handed: this binary's `mcp` with the channel's socket and
    /// token.
    pub(super) fn server(&self) -> std::io::Result<crate::acp::mcp::McpServer> {
        Ok(crate::acp::mcp::McpServer::Stdio {
            name: crate::front::mcp::SERVER_NAME.into(),
            command: std::env::current_exe()?,
            args: vec![
                "mcp".into(),
                "--socket".into(),
                self.socket.display().to_string(),
                "--token".into(),
                self.token.clone(),
            ],
            env: Vec::new(),
        })
    }
}

/// 16 random bytes, in hex, from the kernel.
fn random_hex() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

async fn serve(
    stream: tokio::net::UnixStream,
    nvim: &Nvim,
    workspace: &Workspace,
    token: &str,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    BufReader::new(read.take(REQUEST_BYTES))
        .read_line(&mut line)
        .await?;
    let reply = match serde_json::from_str::<Request>(&line) {
        Ok(request) if request.token == token => answer(nvim, workspace, request).await,
        Ok(_) => {
            tracing::warn!("an editor tools call with the wrong token was refused");
            refused("this channel is not yours")
        }
        Err(err) => refused(&format!("not a call: {err}")),
    };
    let mut out = serde_json::to_string(&reply).map_err(std::io::Error::other)?;
    out.push('\n');
    write.write_all(out.as_bytes()).await
}

fn refused(text: &str) -> Reply {
    Reply {
        ok: false,
        text: text.to_string(),
    }
}

/// One call answered: its path checked (and made absolute) here, the rest by Lua.
async fn answer(nvim: &Nvim, workspace: &Workspace, request: Request) -> Reply {
    let mut args = match request.args {
        serde_json::Value::Object(args) => args,
        serde_json::Value::Null => serde_json::Map::new(),
        _ => return refused("the arguments are not an object"),
    };
    if let Some(given) = args.get("path").cloned() {
        let Some(given) = given.as_str() else {
            return refused("path is not a string");
        };
        match workspace.resolve_literal(given) {
            Ok(resolved) => {
                args.insert(
                    "path".into(),
                    serde_json::Value::from(resolved.path.display().to_string()),
                );
            }
            Err(refusal) => return refused(&refusal.to_string()),
        }
    }
    for key in ["line", "column"] {
        if let Some(value) = args.get(key) {
            if !value
                .as_u64()
                .is_some_and(|n| (1..=10_000_000).contains(&n))
            {
                return refused(&format!("{key} is a number from 1"));
            }
        }
    }
    let lua_args = vec![
        Value::from(request.tool.as_str()),
        rmpv::ext::to_value(serde_json::Value::Object(args)).unwrap_or(Value::Nil),
        Value::from(root_of(workspace)),
    ];
    match nvim
        .exec_lua(super::protocol::lua::EDITOR_TOOLS, lua_args)
        .await
    {
        Ok(Value::String(text)) => Reply {
            ok: true,
            text: bounded(text.into_str().unwrap_or_default()),
        },
        Ok(Value::Map(fields)) => {
            let error = fields
                .iter()
                .find(|(k, _)| k.as_str() == Some("error"))
                .and_then(|(_, v)| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "no answer".into());
            refused(&bounded(error))
        }
        Ok(_) => refused("Neovim gave no answer"),
        Err(err) => refused(&format!("Neovim could not answer: {err}")),
    }
}

fn root_of(workspace: &Workspace) -> String {
    let root: &Path = workspace.root();
    root.display().to_string()
}

/// `text` cut at [`ANSWER_BYTES`] (on a character boundary), saying how much was left out.
fn bounded(mut text: String) -> String {
    if text.len() <= ANSWER_BYTES {
        return text;
    }
    let mut end = ANSWER_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let left = text.len() - end;
    text.truncate(end);
    text.push_str(&format!("\n… ({left} more bytes left out)"));
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_cut_on_a_character_and_says_so() {
        let text = "é".repeat(ANSWER_BYTES);
        let cut = bounded(text);
        assert!(cut.len() < ANSWER_BYTES + 64);
        assert!(
            cut.ends_with(&format!("({} more bytes left out)", ANSWER_BYTES)),
            "{}",
            &cut[cut.len() - 40..]
        );
        assert_eq!(bounded("short".into()), "short");
    }
}
