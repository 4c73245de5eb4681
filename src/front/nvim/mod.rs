//! The Neovim front end: `agent-nvim nvim`, started by the plugin as an RPC child on stdio.
//!
//! - [`bridge`]: the nvim-rs handler. It only decodes and hands off: nvim-rs awaits
//!   notifications one at a time, so a turn run inside `handle_notify` would deadlock the moment
//!   it waited for an approval that arrives as another notification. Turns run in spawned tasks
//!   on the conversation each message is addressed to ([`target`]); one Neovim holds several
//!   ([`slot`]).
//! - [`pump`]: what turns produce goes to Lua through one task that sends at most one batch a
//!   frame (SPEC section 6).
//! - [`adapters`]: the core's views of Neovim (the asker, the editor, an external agent's host),
//!   each a call into the plugin's Lua.
//! - [`protocol`]: every message across the boundary, and every Lua entry point Rust calls.
//! - [`replay`]: a resumed conversation sent to the chat again, rows first, outputs after.
//! - [`review`]: `:Agent diff`'s requests, and the note that gives a turn's done row its key.
//! - [`channel`]: the msgpack channel (stdin and stdout), read and written without thread hops.
//! - [`context`]: the chat input's `@` and `#` requests (`files`, `attach`).
//! - [`inline`]: `:Agent edit`'s own turn, its proposals shown in the buffer.
//! - [`log`]: the log file.
//! - [`rewind`]: `:Agent rewind`'s step (the code, then the conversation).
//! - [`shape`]: `:Agent export`, a conversation's saved title, the resume list's delete.
//! - [`side`]: `:Agent btw`, a side question answered apart from the conversation.
//! - [`target`]: what a message for one conversation does (start, prompt, resume, rewind...).

mod acp;
mod adapters;
mod bridge;
mod channel;
mod context;
mod editor;
mod inline;
mod log;
pub mod protocol;
mod pump;
mod replay;
mod review;
mod rewind;
mod shape;
mod side;
mod slot;
mod target;
mod ui;

use std::path::PathBuf;
use std::time::Duration;

use nvim_rs::compat::tokio::Compat;
use nvim_rs::Neovim;
use tokio_util::sync::CancellationToken;

use crate::Result;
pub use bridge::Bridge;
pub use pump::for_lua;

/// The handle to the Neovim that started us.
type Nvim = Neovim<Compat<channel::End>>;

/// `agent-nvim nvim`: serve the plugin until Neovim closes the channel or asks us to stop.
pub fn run(log: Option<PathBuf>) -> Result<u8> {
    crate::secrets::protect_env_keys();
    log::init(log.as_deref());
    let runtime = super::runtime()?;
    runtime.block_on(serve());
    // A blocked call must not keep the process alive once Neovim has gone.
    runtime.shutdown_timeout(Duration::from_millis(200));
    Ok(0)
}

async fn serve() {
    let shutdown = CancellationToken::new();
    let bridge = Bridge::new(shutdown.clone());
    use tokio_util::compat::{TokioAsyncReadCompatExt as _, TokioAsyncWriteCompatExt as _};
    let (reader, writer) = match (channel::End::stdin(), channel::End::stdout()) {
        (Ok(reader), Ok(writer)) => (reader, writer),
        (Err(err), _) | (_, Err(err)) => {
            tracing::error!(%err, "cannot talk to Neovim on stdio");
            return;
        }
    };
    let (nvim, io) = Neovim::new(reader.compat(), writer.compat_write(), bridge.clone());
    let io = tokio::spawn(io);
    tokio::spawn(pump::pump(
        nvim.clone(),
        bridge.ui_rx.lock().await.take(),
        bridge.ui().shown().clone(),
    ));
    let signals = stop_signals();
    tokio::select! {
        ended = io => tracing::info!(?ended, "Neovim closed the channel"),
        () = signals => tracing::info!("asked to stop by a signal"),
    }
    // Neovim is gone or going: cancel the turn (its commands' process trees are killed) and give
    // it a moment to finish doing so.
    shutdown.cancel();
    let slots = bridge.slots.all();
    for slot in &slots {
        slot.cancel_turn();
    }
    let idle = futures::future::join_all(slots.iter().map(|slot| slot.idle()));
    let _ = tokio::time::timeout(Duration::from_secs(1), idle).await;
    // External agents' process trees go with us.
    let ended = futures::future::join_all(slots.iter().map(|slot| slot.end_conversation()));
    let _ = tokio::time::timeout(Duration::from_secs(3), ended).await;
}

/// Resolves on SIGTERM, SIGHUP or SIGINT (Neovim stops its jobs with SIGTERM when it quits).
async fn stop_signals() {
    use tokio::signal::unix::{signal, SignalKind};
    let kinds = [
        SignalKind::terminate(),
        SignalKind::hangup(),
        SignalKind::interrupt(),
    ];
    let mut streams: Vec<_> = kinds.into_iter().filter_map(|k| signal(k).ok()).collect();
    if streams.is_empty() {
        return futures::future::pending().await;
    }
    let waits = streams.iter_mut().map(|s| Box::pin(s.recv()));
    futures::future::select_all(waits).await;
}
