//! The integration tests, as one binary (one link step, one process to start).

#![allow(clippy::unwrap_used, clippy::expect_used)]

// So that files shared with the library's unit tests can name its modules through `crate::`.
use agent_nvim::{acp, agent, editor};

mod suite;
mod support;
