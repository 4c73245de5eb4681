//! Integration test groups, one file a front end or concern.

mod agent;
mod tool_cli;
