//! Fixtures for the tests and benches, compiled only with the `test-support` feature (which the
//! package's dev-dependency on itself turns on for `cargo test` and `cargo bench`) or in the unit
//! tests: never part of a `cargo build` of the product.
//!
//! - [`mock_llm`]: the one stand-in for the LLM vendors' streaming APIs, used by the unit tests,
//!   the integration tests (tests/support re-exports it) and the benches.
//! - [`fake_host`]: a scripted ACP front end for the ACP client's tests.
//! - [`user_repo`]: the user's own git repository, run and compared byte for byte (checkpoints).
//! - [`nvim`]: a real Neovim (`nvim --embed`) with the plugin loaded from this checkout, driven
//!   over msgpack-RPC, its screen kept as text; used by the integration tests and `benches/nvim.rs`.
//!
//! A fixture that cannot do what a test asked panics: that is how the test fails, so `unwrap` and
//! `expect` are allowed here and nowhere else in the library.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod fake_host;
pub mod mock_llm;
pub mod nvim;
pub mod user_repo;
