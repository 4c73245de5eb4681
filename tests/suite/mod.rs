//! Integration test groups, one file a front end or concern.

mod acp;
mod acp_choices;
mod acp_terminals;
mod agent;
mod approval_picker;
mod checkpoints;
mod install;
mod lua_tooling;
mod nvim_acp;
mod nvim_boundary;
mod nvim_chat_batches;
mod nvim_context;
mod nvim_diff;
mod nvim_keys;
mod nvim_permissions;
mod nvim_plugin;
mod nvim_prompting;
mod nvim_proposal;
mod nvim_render;
mod nvim_rewind;
mod nvim_sandbox;
mod nvim_sessions;
mod processes;
mod run_cli;
mod sandbox;
mod tool_cli;
