//! Fixtures for the tests and benches, compiled only with the `test-support` feature (which the
//! package's dev-dependency on itself turns on for `cargo test` and `cargo bench`) or in the unit
//! tests: never part of a `cargo build` of the product.
//!
//! These are the lower crates' fixtures, here where the tests have always found them:
//! [`fake_host`] (a scripted ACP front end) is the ACP crate's, and [`mock_llm`], [`user_repo`]
//! and [`nvim`] are the dev-only `agent-nvim-fixtures` crate's.

pub use agent_nvim_acp::fake_host;
pub use agent_nvim_fixtures::{mock_llm, nvim, user_repo};
