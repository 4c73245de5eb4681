//! The integration tests, as one binary (one link step, one process to start).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
mod support;
