//! The front ends, each a thin layer over the core (`crate::session` builds what they drive):
//! - [`nvim`]: `agent-nvim nvim`, the backend the Neovim plugin starts over msgpack-RPC;
//! - [`terminal`]: `agent-nvim run` (the agent on one prompt) and `agent-nvim tool` (one tool by
//!   hand), asking on the terminal;
//! - [`cli`]: the command line that picks one.

pub mod cli;
pub mod nvim;
pub mod terminal;
