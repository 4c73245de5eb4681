//! agent.nvim's backend as a library: the executor every front end shares (the path check, the
//! four tools, bounded commands, the approval gate) and the front ends built on it.
//!
//! `main.rs` only picks a front end; everything that can be tested lives here.

pub mod acp;
pub mod agent;
pub mod ansi;
pub mod approval;
pub mod cli;
pub mod conversation;
pub mod diff;
pub mod display;
pub mod editor;
pub mod error;
pub mod llm;
pub mod nvim;
pub mod process;
pub mod questions;
pub mod reaper;
pub mod secrets;
pub mod session;
pub mod terminal;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
pub mod text;
pub mod tools;
pub mod workspace;

pub use error::{Error, Result};
