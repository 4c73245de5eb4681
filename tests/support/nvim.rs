//! The real Neovim the tests drive ([`agent_nvim::test_support::nvim`]), set up to use the
//! backend cargo built for these tests.

pub use agent_nvim::test_support::nvim::*;

/// The Lua that sets the plugin up to use the debug backend built for these tests.
pub fn setup_lua(extra: &str) -> String {
    setup_lua_for(env!("CARGO_BIN_EXE_agent-nvim"), extra)
}
