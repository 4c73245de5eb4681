//! agent.nvim's engine: the built-in agent and what a front end builds a session from.
//!
//! - [`agent`]: the turn loop over the model client, and [`agent::Native`], the built-in agent
//!   as a conversation;
//! - [`instructions`]: the project's instruction files the first request carries;
//! - [`sessions`]: the saved conversations (the session files) and [`sessions::Recorded`], the
//!   decorator that saves any conversation as it happens;
//! - [`inline`]: an inline edit's own turn (`:Agent edit`), its prompt and its agent;
//! - [`session`]: the one place a session is assembled for every front end.

pub mod agent;
pub mod inline;
pub mod instructions;
pub mod session;
pub mod sessions;

// The layers below, where the modules above find them.
use agent_nvim_conversation as conversation;
use agent_nvim_core::{approval, checkpoint, editor, permissions, sandbox, tools, workspace};
use agent_nvim_llm as llm;
use agent_nvim_text::{secrets, text};
