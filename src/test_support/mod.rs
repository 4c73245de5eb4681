//! Fixtures for the tests and benches, compiled only with the `test-support` feature (which the
//! package's dev-dependency on itself turns on for `cargo test` and `cargo bench`) or in the unit
//! tests: never part of a `cargo build` of the product.
//!
//! - [`fake_host`]: a scripted ACP front end for the ACP client's tests.
//! - [`mock_llm`], [`user_repo`] and [`nvim`] are the dev-only `agent-nvim-fixtures` crate's,
//!   here where the tests have always found them.
//!
//! A fixture that cannot do what a test asked panics: that is how the test fails, so `unwrap` and
//! `expect` are allowed here and nowhere else in the library.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod fake_host;

pub use agent_nvim_fixtures::{mock_llm, nvim, user_repo};
