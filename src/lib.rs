//! agent.nvim's backend as a library: the core every front end shares, and the front ends built
//! on it. `main.rs` only picks a front end; everything that can be tested lives here.
//!
//! The core, in the order a prompt meets it:
//! - [`session`] builds a conversation from one config ([`conversation`]: the built-in turn
//!   loop of [`agent`] over [`llm`], or an external agent over [`acp`]);
//! - [`tools`] are the four tools and the executor, which alone asks the [`approval`] gate and
//!   applies what was allowed; [`workspace`] is the one path check and all file I/O beneath the
//!   root; [`process`] and [`reaper`] run bounded commands whose process trees never outlive them,
//!   under the [`sandbox`] (Landlock) where the kernel has it;
//! - [`questions`] numbers every question a person answers; [`display`], [`diff`], [`ansi`],
//!   [`text`] and [`secrets`] make what a person reads visible, short and free of keys;
//!   [`editor`] is the core's view of open buffers.
//!
//! The front ends ([`front`]): Neovim over msgpack-RPC, the terminal, and the command line that
//! picks between them.

pub mod display;
pub mod error;
pub mod front;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

// The layers below, where the modules above (and the tests) find them.
pub use agent_nvim_acp as acp;
pub use agent_nvim_conversation as conversation;
pub use agent_nvim_core::{
    approval, checkpoint, editor, external, permissions, process, questions, reaper, sandbox,
    tools, workspace, worktree,
};
pub use agent_nvim_engine::{agent, inline, instructions, session, sessions};
pub use agent_nvim_llm as llm;
pub use agent_nvim_text::{ansi, diff, secrets, text};

pub use error::{Error, Result};
