//! The front ends, each a thin layer over the engine (`crate::session` builds what they drive):
//! - [`nvim`]: `agent-nvim nvim`, the backend the Neovim plugin starts over msgpack-RPC;
//! - [`terminal`]: `agent-nvim run` (the agent on one prompt) and `agent-nvim tool` (one tool by
//!   hand), asking on the terminal;
//! - [`mcp`]: `agent-nvim mcp`, the editor as read-only MCP tools for an external agent;
//! - [`cli`]: the command line that picks one.

pub mod cli;
pub mod mcp;
pub mod nvim;
pub mod terminal;

use crate::{Error, Result};

/// The multi-threaded runtime `agent-nvim run` and `agent-nvim nvim` run on.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    finish(&mut tokio::runtime::Builder::new_multi_thread())
}

/// The one-thread runtime for a single tool call (`agent-nvim tool`): one call gains nothing from
/// more threads, and cross-thread wake-ups cost.
pub fn runtime_single() -> Result<tokio::runtime::Runtime> {
    finish(&mut tokio::runtime::Builder::new_current_thread())
}

fn finish(builder: &mut tokio::runtime::Builder) -> Result<tokio::runtime::Runtime> {
    builder.enable_all().build().map_err(|source| Error::Io {
        context: "cannot start the async runtime",
        source,
    })
}
