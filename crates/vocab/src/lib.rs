//! The words agent.nvim's layers speak to each other: data types only (serde), no behaviour that
//! needs another crate of the workspace. A layer that makes one of these and a layer that shows
//! it both depend on this crate, and on neither of each other.
//!
//! - [`events`]: what a turn reports, and how it ended.
//! - [`approval`]: a question before a call runs, and the person's answer.
//! - [`tools`]: a tool as the providers are told of it, and what a call produced.
//! - [`conversation`]: the one stream every conversation reports on, and an external agent's
//!   own updates.

pub mod approval;
pub mod conversation;
pub mod events;
pub mod tools;
