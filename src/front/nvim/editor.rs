//! The backend's end of `editor_tools` (`agent-nvim mcp`, `crate::front::mcp`): a private
//! channel per external agent, a unix socket in a directory of its own (mode 0700, under the
//! temporary directory) and a random token, named only in the MCP server's arguments the agent
//! is given in `mcpServers`. Each call is one line of JSON in, one line out; it is answered from
//! Neovim by `lua/agent/editor_tools.lua`, read-only, after the workspace's path check, and
//! bounded as read_file is. The channel closes (its directory removed) when the agent stops
//! being its conversation's (another agent, `:Agent new here`, a resume, `:Agent close`).

use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use nvim_rs::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

use super::Nvim;
use crate::front::mcp::{Reply, Request};
use crate::workspace::Workspace;

/// The longest request line read.
const REQUEST_BYTES: u64 = 64 * 1024;
/// The longest Neovim may take to answer one call (it may be waiting at a prompt).
const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How many calls are answered at once; more are refused until one ends.
const CALLS_AT_ONCE: usize = 4;

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
            "{DIR_PREFIX}{}-{}",
            std::process::id(),
            &token[..12]
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        // Off the runtime's threads: a temp folder can hold many entries.
        let swept = dir.clone();
        tokio::task::spawn_blocking(move || sweep_stale(&swept));
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
        let calls = std::sync::Arc::new(tokio::sync::Semaphore::new(CALLS_AT_ONCE));
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    () = serving.cancelled() => break,
                };
                let Ok((stream, _)) = accepted else { continue };
                let (nvim, workspace, secret) = (nvim.clone(), workspace.clone(), secret.clone());
                let call = calls.clone().try_acquire_owned().ok();
                let stop = serving.clone();
                tokio::spawn(async move {
                    let served = tokio::select! {
                        served = serve(stream, &nvim, &workspace, &secret, call.is_some()) => served,
                        () = stop.cancelled() => Ok(()),
                    };
                    drop(call);
                    if let Err(err) = served {
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
        Ok(crate::front::mcp::server(
            std::env::current_exe()?,
            &self.socket,
            &self.token,
        ))
    }
}

/// The start of a channel's folder name; then the backend's pid and random hex.
const DIR_PREFIX: &str = "agent-nvim-editor-";

/// Removes the folders beside `ours` left by backends that were killed before they could
/// remove them: named as channels are, of the same owner as `ours` (this user), folders (never
/// a link), their pid no longer running. A live backend's folder is never touched.
fn sweep_stale(ours: &Path) {
    use std::os::unix::fs::MetadataExt;
    let (Some(temp), Ok(mine)) = (ours.parent(), std::fs::symlink_metadata(ours)) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        let ours_too = std::fs::symlink_metadata(&path)
            .is_ok_and(|meta| meta.is_dir() && meta.uid() == mine.uid());
        if !ours_too || path == ours || running(pid) {
            continue;
        }
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {
                tracing::info!(dir = %path.display(), "removed a dead backend's editor tools folder")
            }
            Err(err) => {
                tracing::debug!(dir = %path.display(), %err, "a stale editor tools folder stays")
            }
        }
    }
}

/// Whether process `pid` runs (one of another user's counts as running).
fn running(pid: i32) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// 16 random bytes, in hex, from the kernel.
fn random_hex() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// One connection: its call read (within [`ANSWER_TIMEOUT`]) and answered, unless `free` is
/// false ([`CALLS_AT_ONCE`] are being answered).
async fn serve(
    stream: tokio::net::UnixStream,
    nvim: &Nvim,
    workspace: &Workspace,
    token: &str,
    free: bool,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    tokio::time::timeout(
        ANSWER_TIMEOUT,
        BufReader::new(read.take(REQUEST_BYTES)).read_line(&mut line),
    )
    .await
    .map_err(|_| std::io::Error::other("no call came"))??;
    let reply = match serde_json::from_str::<Request>(&line) {
        Ok(request) if request.token == token && !free => refused(&format!(
            "busy: {CALLS_AT_ONCE} calls are being answered; call again when one is done"
        )),
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
    let answered = tokio::time::timeout(
        ANSWER_TIMEOUT,
        nvim.exec_lua(super::protocol::lua::EDITOR_TOOLS, lua_args),
    )
    .await;
    let Ok(answered) = answered else {
        return refused(&format!(
            "Neovim did not answer in {} s (it may be waiting at a prompt); call again later",
            ANSWER_TIMEOUT.as_secs()
        ));
    };
    match answered {
        Ok(Value::String(text)) => Reply {
            ok: true,
            text: bounded(&String::from_utf8_lossy(&text.into_bytes())),
        },
        Ok(Value::Map(fields)) => {
            let error = fields
                .iter()
                .find(|(k, _)| k.as_str() == Some("error"))
                .and_then(|(_, v)| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "no answer".into());
            refused(&bounded(&error))
        }
        Ok(_) => refused("Neovim gave no answer"),
        Err(err) => refused(&format!("Neovim could not answer: {err}")),
    }
}

fn root_of(workspace: &Workspace) -> String {
    let root: &Path = workspace.root();
    root.display().to_string()
}

/// `text` clamped as read_file clamps a file (its characters, the same marker at the end).
fn bounded(text: &str) -> String {
    crate::text::clamp_marked(text).text
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn only_the_folders_of_backends_that_are_gone_are_swept() {
        let temp = tempfile::tempdir().unwrap();
        let ours = temp
            .path()
            .join(format!("{DIR_PREFIX}{}-aaaa", std::process::id()));
        std::fs::create_dir(&ours).unwrap();
        // A pid that cannot be running (above the kernel's pid_max), one that is (ours, another
        // of its folders), a file and a link named like folders, and someone else's name.
        let gone = temp.path().join(format!("{DIR_PREFIX}{}-bbbb", i32::MAX));
        std::fs::create_dir(&gone).unwrap();
        std::fs::write(gone.join("socket"), "").unwrap();
        let alive = temp
            .path()
            .join(format!("{DIR_PREFIX}{}-cccc", std::process::id()));
        std::fs::create_dir(&alive).unwrap();
        let file = temp
            .path()
            .join(format!("{DIR_PREFIX}{}-dddd", i32::MAX - 1));
        std::fs::write(&file, "").unwrap();
        let target = tempfile::tempdir().unwrap();
        let link = temp
            .path()
            .join(format!("{DIR_PREFIX}{}-eeee", i32::MAX - 2));
        std::os::unix::fs::symlink(target.path(), &link).unwrap();
        let other = temp.path().join("someone-else-1");
        std::fs::create_dir(&other).unwrap();
        sweep_stale(&ours);
        assert!(!gone.exists());
        for kept in [&ours, &alive, &file, &link, &other] {
            assert!(std::fs::symlink_metadata(kept).is_ok(), "{kept:?}");
        }
        assert!(target.path().exists());
    }

    #[test]
    fn an_answer_is_clamped_as_read_file_clamps() {
        let text = "é".repeat(crate::text::MAX_CHARS + 10);
        let cut = bounded(&text);
        assert_eq!(cut, crate::text::clamp_marked(&text).text);
        assert!(cut.chars().count() < crate::text::MAX_CHARS + 200);
        assert!(cut.starts_with(&"é".repeat(100)));
        assert_eq!(bounded("short"), "short");
    }
}
