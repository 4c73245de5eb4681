//! agent.nvim's core: everything that touches the disk or starts a process, and the one gate
//! that lets it. Nothing here knows a model, a conversation, an external agent's protocol or a
//! front end.
//!
//! - [`workspace`] is the one path check and all file I/O beneath the root;
//! - [`tools`] are the four tools and the executor, which alone asks the [`approval`] gate and
//!   mints the write token ([`approved::Approved`]) for what was allowed; [`permissions`] are the
//!   person's rules the gate reads first;
//! - [`process`] and [`reaper`] run bounded commands whose process trees never outlive them,
//!   under the [`sandbox`] (Landlock) where the kernel has it;
//! - [`checkpoint`] keeps the workspace's states in a shadow git repository and puts them back;
//! - [`external`] is what the core does for an external agent the person started (write a file,
//!   start its process, start a terminal), under that agent's own permission flow;
//! - [`questions`] numbers every question a person answers; [`editor`] is the core's view of the
//!   open buffers.

pub mod approval;
pub mod approved;
pub mod checkpoint;
pub mod editor;
pub mod external;
pub mod permissions;
pub mod process;
pub mod questions;
pub mod reaper;
pub mod sandbox;
pub mod tools;
pub mod workspace;
pub mod worktree;

// The text layer, where the modules above find it.
use agent_nvim_text::{ansi, diff, secrets, text};
