//! The real Neovim the tests drive ([`agent_nvim::test_support::nvim`]), set up to use the
//! backend cargo built for these tests.

pub use agent_nvim::test_support::nvim::*;

/// The Lua that sets the plugin up to use the debug backend built for these tests.
pub fn setup_lua(extra: &str) -> String {
    setup_lua_for(env!("CARGO_BIN_EXE_agent-nvim"), extra)
}

/// A headless Neovim whose plugin talks to `mock` as Anthropic, set up with `extra` options.
pub fn mock_options(mock: &super::mock_llm::MockLlm, extra: &str) -> Options {
    Options {
        ui: None,
        env: vec![
            ("ANTHROPIC_API_KEY".into(), "test-key".into()),
            ("ANTHROPIC_BASE_URL".into(), mock.base_url()),
        ],
        setup: setup_lua(extra),
    }
}
