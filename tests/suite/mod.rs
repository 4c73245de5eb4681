//! Integration test groups, one file a front end or concern.

mod tool_cli;
