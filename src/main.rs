//! agent-nvim: pick the front end, run it, report one error.

use std::io::Write;
use std::process::ExitCode;

use agent_nvim::front::cli::{self, Command};
use agent_nvim::front::{nvim, terminal};
use agent_nvim::Error;

fn main() -> ExitCode {
    // Every child of this binary is spawned through the reaper, so any other child is an orphan
    // adopted from one of its trees.
    agent_nvim::reaper::claim_orphans();
    let result = cli::parse(std::env::args().skip(1)).and_then(|command| match command {
        Command::Tool(args) => terminal::run_tool(args),
        Command::Run(args) => terminal::run_agent(args),
        Command::Sessions { workspace } => terminal::list_sessions(workspace),
        Command::Sandbox(args) => terminal::sandbox_info(args),
        Command::Nvim { log } => nvim::run(log),
        Command::Mcp { socket, token } => agent_nvim::front::mcp::run(socket, token),
        Command::Help => say(cli::USAGE),
        Command::Version => say(&format!("agent-nvim {}\n", env!("CARGO_PKG_VERSION"))),
    });
    // Whatever tree is still running (dropped at the last moment, its end only queued) ends
    // before the process does.
    agent_nvim::reaper::end_all();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            let _ = writeln!(
                std::io::stderr(),
                "{}",
                agent_nvim::secrets::redact(&err.to_string())
            );
            ExitCode::from(match err {
                Error::Usage(_) => 2,
                Error::Provider(_) | Error::Workspace(_) | Error::Session(_) | Error::Io { .. } => {
                    1
                }
            })
        }
    }
}

fn say(text: &str) -> agent_nvim::Result<u8> {
    std::io::stdout()
        .write_all(text.as_bytes())
        .map_err(|source| Error::Io {
            context: "cannot write to stdout",
            source,
        })?;
    Ok(0)
}
