//! Command-line parsing for every front end. Hand-written: the grammar is small, and each mistake
//! gets a message that says what to type instead (exit status 2).

use std::path::PathBuf;
use std::time::Duration;

use crate::sandbox::{Mode, Sandbox};
use crate::{Error, Result};

/// The usage text shown on `--help` and after a usage error.
pub const USAGE: &str = "\
usage:
  agent-nvim tool NAME 'JSON_ARGS' [--workspace DIR] [--auto-approve] [--timeout SECS]
                  [--pass-env NAME]... [SANDBOX FLAGS]
      Run one tool (read_file, list_files, edit_file, run_bash) and print its result as JSON.
  agent-nvim run [--workspace DIR] [--provider P] [--model M] [--base-url URL]
                 [--api chat|responses] [--thinking TOKENS|off] [--effort LEVEL]
                 [--auto-approve] [--max-turns N] [--max-cost DOLLARS] [--timeout SECS]
                 [--pass-env NAME]... [SANDBOX FLAGS] [--resume [ID]] [--instructions FILE]... [--no-instructions]
                 PROMPT
      Run the agent on one prompt in the terminal; its text streams to stdout. The
      conversation is saved; --resume continues the one with ID (the latest without one).
      The first of AGENTS.md, CLAUDE.md (or the --instructions files) at the workspace root
      goes into the system prompt; --no-instructions reads none.
      Providers: anthropic (ANTHROPIC_API_KEY), openai (OPENAI_API_KEY), ollama (no key).
      --api responses talks to OpenAI's Responses API; --thinking sets Anthropic's thinking
      budget (on at 8000 for the models that think); --effort low|medium|high is OpenAI's
      reasoning effort. --max-cost stops before a request once the conversation has cost
      that many dollars (by the model table's prices).
      run_bash's commands do not get the API key variables; --pass-env NAME passes one.
  agent-nvim sessions [--workspace DIR]
      List the workspace's saved conversations, the most recent first.
  agent-nvim sandbox [--workspace DIR] [SANDBOX FLAGS] [--json]
      Say what the sandbox enforces here: the Landlock ABI, the mode in force, where
      commands may write, and what this kernel cannot enforce.
  agent-nvim nvim [--log FILE]
      The Neovim front end (msgpack-RPC on stdio); the plugin starts it.
  agent-nvim mcp --socket PATH --token TOKEN
      The editor's read-only tools as an MCP server on stdio, for an external agent; agent.nvim
      hands an agent this command with its own socket and token (editor_tools = true).
  agent-nvim --version

SANDBOX FLAGS (run_bash's commands run under Landlock where the kernel has it):
  --sandbox MODE    workspace-write (the default: write only in the workspace, the temp
                    directory and the --writable places), read-only, or off
  --no-network      block TCP connect and bind (Landlock ABI 4 or later)
  --writable PATH   one more place commands may write (repeatable)
";

/// What the user asked the binary to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `agent-nvim tool ...`: run one tool by hand.
    Tool(ToolArgs),
    /// `agent-nvim run ...`: the agent in the terminal.
    Run(RunArgs),
    /// `agent-nvim sessions [--workspace DIR]`: the workspace's saved conversations.
    Sessions { workspace: Option<PathBuf> },
    /// `agent-nvim sandbox ...`: what the sandbox enforces here.
    Sandbox(SandboxArgs),
    /// `agent-nvim nvim [--log FILE]`: the Neovim front end, started by the plugin.
    Nvim { log: Option<PathBuf> },
    /// `agent-nvim mcp --socket PATH --token TOKEN`: the editor's read-only MCP tools, started
    /// by an external agent as the backend told it (`editor_tools`).
    Mcp { socket: PathBuf, token: String },
    /// `--help`.
    Help,
    /// `--version`.
    Version,
}

/// Arguments of `agent-nvim tool`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolArgs {
    /// The tool's name, as the model would call it.
    pub name: String,
    /// Its arguments: always a JSON object.
    pub args: serde_json::Map<String, serde_json::Value>,
    /// The workspace root; the current directory when not given.
    pub workspace: Option<PathBuf>,
    /// Allow every mutating call without asking.
    pub auto_approve: bool,
    /// run_bash's timeout.
    pub timeout: Option<Duration>,
    /// Key variables run_bash's commands get anyway (`--pass-env NAME`, repeatable).
    pub pass_env: Vec<String>,
    /// The sandbox run_bash's commands run in.
    pub sandbox: SandboxFlags,
}

/// Arguments of `agent-nvim run`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunArgs {
    /// The prompt (several words are joined with spaces).
    pub prompt: String,
    /// The workspace root; the current directory when not given.
    pub workspace: Option<PathBuf>,
    /// Provider, model and endpoint.
    pub choice: crate::llm::ProviderChoice,
    /// Allow every mutating call without asking.
    pub auto_approve: bool,
    /// The cap on model calls.
    pub max_turns: Option<u32>,
    /// The most the conversation may cost, in dollars.
    pub max_cost: Option<f64>,
    /// run_bash's timeout.
    pub timeout: Option<Duration>,
    /// Key variables run_bash's commands get anyway (`--pass-env NAME`, repeatable).
    pub pass_env: Vec<String>,
    /// `--resume [ID]`: continue a saved conversation, `Some(None)` the latest.
    pub resume: Option<Option<String>>,
    /// The sandbox run_bash's commands run in.
    pub sandbox: SandboxFlags,
    /// The project's instruction files to look for (`--instructions FILE`, repeatable; empty
    /// with `--no-instructions`); None: AGENTS.md, then CLAUDE.md.
    pub instructions: Option<Vec<String>>,
}

/// Arguments of `agent-nvim sandbox`.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxArgs {
    /// The workspace root; the current directory when not given.
    pub workspace: Option<PathBuf>,
    /// The sandbox asked about.
    pub sandbox: SandboxFlags,
    /// Print the report as JSON (what `:checkhealth agent` reads).
    pub json: bool,
}

/// `--sandbox MODE`, `--no-network` and `--writable PATH`, as given.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SandboxFlags {
    /// `--sandbox MODE`; None: workspace-write.
    pub mode: Option<Mode>,
    /// `--no-network`.
    pub no_network: bool,
    /// `--writable PATH`, repeatable.
    pub writable: Vec<PathBuf>,
}

impl SandboxFlags {
    /// The sandbox these flags ask for.
    pub fn sandbox(&self) -> Sandbox {
        Sandbox {
            mode: self.mode.unwrap_or_default(),
            network: !self.no_network,
            writable: self.writable.clone(),
        }
    }

    /// Takes `arg` when it is a sandbox flag (with its value from `args`); false otherwise.
    fn take(&mut self, arg: &str, args: &mut impl Iterator<Item = String>) -> Result<bool> {
        match arg {
            "--sandbox" => {
                let name = value(args, "--sandbox")?;
                match Mode::parse(&name) {
                    Some(mode) => self.mode = Some(mode),
                    None => {
                        return Err(usage(format!(
                            "--sandbox takes {}, got '{name}'",
                            Mode::NAMES
                        )))
                    }
                }
            }
            "--no-network" => self.no_network = true,
            "--writable" => self
                .writable
                .push(PathBuf::from(value(args, "--writable")?)),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn usage(message: impl std::fmt::Display) -> Error {
    Error::Usage(format!("agent-nvim: {message}\n\n{USAGE}"))
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command> {
    let mut args = args.into_iter();
    match args.next().as_deref() {
        None => Err(usage("no command given")),
        Some("-h" | "--help" | "help") => Ok(Command::Help),
        Some("-V" | "--version") => Ok(Command::Version),
        Some("tool") => parse_tool(args).map(Command::Tool),
        Some("run") => parse_run(args).map(Command::Run),
        Some("sessions") => parse_sessions(args),
        Some("sandbox") => parse_sandbox(args).map(Command::Sandbox),
        Some("nvim") => parse_nvim(args),
        Some("mcp") => parse_mcp(args),
        Some(other) => Err(usage(format!("unknown command '{other}'"))),
    }
}

fn parse_tool(args: impl Iterator<Item = String>) -> Result<ToolArgs> {
    let mut positional = Vec::new();
    let mut workspace = None;
    let mut auto_approve = false;
    let mut timeout = None;
    let mut pass_env = Vec::new();
    let mut sandbox = SandboxFlags::default();
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        if sandbox.take(&arg, &mut args)? {
            continue;
        }
        match arg.as_str() {
            "--workspace" => workspace = Some(PathBuf::from(value(&mut args, "--workspace")?)),
            "--auto-approve" => auto_approve = true,
            "--timeout" => timeout = Some(seconds(&value(&mut args, "--timeout")?)?),
            "--pass-env" => pass_env.push(value(&mut args, "--pass-env")?),
            flag if flag.starts_with("--") => return Err(usage(format!("unknown flag '{flag}'"))),
            _ => positional.push(arg),
        }
    }
    let mut positional = positional.into_iter();
    let (Some(name), Some(json), None) = (positional.next(), positional.next(), positional.next())
    else {
        return Err(usage(
            "'tool' takes exactly two arguments: NAME and 'JSON_ARGS'",
        ));
    };
    let args = match serde_json::from_str(&json) {
        Ok(serde_json::Value::Object(map)) => map,
        Ok(_) => {
            return Err(usage(format!(
                "JSON_ARGS must be a JSON object, got: {json}"
            )))
        }
        Err(err) => {
            return Err(usage(format!(
                "JSON_ARGS is not valid JSON ({err}): {json}"
            )))
        }
    };
    Ok(ToolArgs {
        name,
        args,
        workspace,
        auto_approve,
        timeout,
        pass_env,
        sandbox,
    })
}

fn parse_run(args: impl Iterator<Item = String>) -> Result<RunArgs> {
    let mut words = Vec::new();
    let mut run = RunArgs {
        prompt: String::new(),
        workspace: None,
        choice: Default::default(),
        auto_approve: false,
        max_turns: None,
        max_cost: None,
        timeout: None,
        pass_env: Vec::new(),
        resume: None,
        sandbox: SandboxFlags::default(),
        instructions: None,
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        if run.sandbox.take(&arg, &mut args)? {
            continue;
        }
        match arg.as_str() {
            "--workspace" => run.workspace = Some(PathBuf::from(value(&mut args, "--workspace")?)),
            "--provider" => run.choice.provider = Some(value(&mut args, "--provider")?),
            "--model" => run.choice.model = Some(value(&mut args, "--model")?),
            "--base-url" => run.choice.base_url = Some(value(&mut args, "--base-url")?),
            "--api" => {
                let text = value(&mut args, "--api")?;
                run.choice.tuning.api = crate::llm::OpenAiApi::parse(&text)
                    .ok_or_else(|| usage(format!("--api takes chat or responses, got '{text}'")))?;
            }
            "--thinking" => {
                let text = value(&mut args, "--thinking")?;
                run.choice.tuning.thinking = match text.as_str() {
                    "off" | "false" | "0" => crate::llm::Thinking::Off,
                    _ => match text.parse::<u32>() {
                        Ok(n) if n >= crate::llm::models::MIN_THINKING_BUDGET => {
                            crate::llm::Thinking::Budget(n)
                        }
                        _ => {
                            return Err(usage(format!(
                                "--thinking takes a budget of at least 1024 tokens, or off; got '{text}'"
                            )))
                        }
                    },
                };
            }
            "--effort" => {
                let text = value(&mut args, "--effort")?;
                if !["minimal", "low", "medium", "high"].contains(&text.as_str()) {
                    return Err(usage(format!(
                        "--effort takes minimal, low, medium or high, got '{text}'"
                    )));
                }
                run.choice.tuning.effort = Some(text);
            }
            "--auto-approve" => run.auto_approve = true,
            "--max-turns" => {
                let text = value(&mut args, "--max-turns")?;
                match text.parse::<u32>() {
                    Ok(n) if n > 0 => run.max_turns = Some(n),
                    _ => {
                        return Err(usage(format!(
                            "--max-turns takes a positive whole number, got '{text}'"
                        )))
                    }
                }
            }
            "--max-cost" => {
                let text = value(&mut args, "--max-cost")?;
                match text.parse::<f64>() {
                    Ok(dollars) if dollars.is_finite() && dollars > 0.0 => {
                        run.max_cost = Some(dollars)
                    }
                    _ => {
                        return Err(usage(format!(
                            "--max-cost takes a positive number of dollars, got '{text}'"
                        )))
                    }
                }
            }
            "--timeout" => run.timeout = Some(seconds(&value(&mut args, "--timeout")?)?),
            "--pass-env" => run.pass_env.push(value(&mut args, "--pass-env")?),
            "--instructions" => run
                .instructions
                .get_or_insert_with(Vec::new)
                .push(value(&mut args, "--instructions")?),
            "--no-instructions" => run.instructions = Some(Vec::new()),
            // The id is optional: the next word is taken as one only when it has an id's shape.
            "--resume" => run.resume = Some(args.next_if(|word| is_id(word))),
            flag if flag.starts_with("--resume=") => {
                run.resume = Some(Some(flag["--resume=".len()..].to_string()))
            }
            "--" => words.extend(args.by_ref()),
            flag if flag.starts_with("--") => return Err(usage(format!("unknown flag '{flag}'"))),
            _ => words.push(arg),
        }
    }
    run.prompt = words.join(" ");
    if run.prompt.trim().is_empty() {
        return Err(usage("'run' needs a PROMPT"));
    }
    Ok(run)
}

/// Whether `word` has a conversation id's shape (`20261201-123456-ab12`): 8 digits and a dash
/// first, so no prompt word is taken for one.
fn is_id(word: &str) -> bool {
    let bytes = word.as_bytes();
    bytes.len() > 9
        && bytes[..8].iter().all(u8::is_ascii_digit)
        && bytes[8] == b'-'
        && crate::sessions::valid_id(word)
}

fn parse_sessions(mut args: impl Iterator<Item = String>) -> Result<Command> {
    let mut workspace = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--workspace" => workspace = Some(PathBuf::from(value(&mut args, "--workspace")?)),
            other => return Err(usage(format!("unknown argument to 'sessions': '{other}'"))),
        }
    }
    Ok(Command::Sessions { workspace })
}

fn parse_sandbox(mut args: impl Iterator<Item = String>) -> Result<SandboxArgs> {
    let mut parsed = SandboxArgs {
        workspace: None,
        sandbox: SandboxFlags::default(),
        json: false,
    };
    while let Some(arg) = args.next() {
        if parsed.sandbox.take(&arg, &mut args)? {
            continue;
        }
        match arg.as_str() {
            "--workspace" => {
                parsed.workspace = Some(PathBuf::from(value(&mut args, "--workspace")?))
            }
            "--json" => parsed.json = true,
            other => return Err(usage(format!("unknown argument to 'sandbox': '{other}'"))),
        }
    }
    Ok(parsed)
}

fn parse_nvim(mut args: impl Iterator<Item = String>) -> Result<Command> {
    let mut log = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--log" => log = Some(PathBuf::from(value(&mut args, "--log")?)),
            other => return Err(usage(format!("unknown argument to 'nvim': '{other}'"))),
        }
    }
    Ok(Command::Nvim { log })
}

fn parse_mcp(mut args: impl Iterator<Item = String>) -> Result<Command> {
    let (mut socket, mut token) = (None, None);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--socket" => socket = Some(PathBuf::from(value(&mut args, "--socket")?)),
            "--token" => token = Some(value(&mut args, "--token")?),
            other => return Err(usage(format!("unknown argument to 'mcp': '{other}'"))),
        }
    }
    match (socket, token) {
        (Some(socket), Some(token)) => Ok(Command::Mcp { socket, token }),
        _ => Err(usage(
            "'mcp' takes --socket and --token, as agent.nvim gives them to an agent (editor_tools)",
        )),
    }
}

fn value(args: &mut impl Iterator<Item = String>, flag: &str) -> Result<String> {
    args.next()
        .ok_or_else(|| usage(format!("{flag} needs a value")))
}

fn seconds(text: &str) -> Result<Duration> {
    match text.parse::<f64>() {
        Ok(secs) if secs > 0.0 && secs.is_finite() => Ok(Duration::from_secs_f64(secs)),
        _ => Err(usage(format!(
            "--timeout takes a positive number of seconds, got '{text}'"
        ))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn parse_words(words: &str) -> Result<Command> {
        parse(words.split(' ').map(String::from))
    }

    #[test]
    fn tool_takes_name_json_and_flags_in_any_order() {
        let got = parse(
            [
                "tool",
                "--auto-approve",
                "read_file",
                r#"{"path":"a"}"#,
                "--workspace",
                "/w",
                "--timeout",
                "1.5",
                "--pass-env",
                "OPENAI_API_KEY",
            ]
            .map(String::from),
        )
        .unwrap();
        let mut args = serde_json::Map::new();
        args.insert("path".into(), "a".into());
        assert_eq!(
            got,
            Command::Tool(ToolArgs {
                name: "read_file".into(),
                args,
                workspace: Some("/w".into()),
                auto_approve: true,
                timeout: Some(Duration::from_millis(1500)),
                pass_env: vec!["OPENAI_API_KEY".into()],
                sandbox: SandboxFlags::default(),
            })
        );
    }

    #[test]
    fn run_takes_flags_and_joins_the_prompt_words() {
        let got = parse_words(
            "run --provider ollama --pass-env A --model qwen --max-turns 3 fix the tests --auto-approve --max-cost 0.5 --pass-env B",
        )
        .unwrap();
        assert_eq!(
            got,
            Command::Run(RunArgs {
                prompt: "fix the tests".into(),
                workspace: None,
                choice: crate::llm::ProviderChoice {
                    provider: Some("ollama".into()),
                    model: Some("qwen".into()),
                    base_url: None,
                    tuning: Default::default(),
                    api_key: None,
                    api_key_cmd: None,
                },
                auto_approve: true,
                max_turns: Some(3),
                max_cost: Some(0.5),
                timeout: None,
                pass_env: vec!["A".into(), "B".into()],
                resume: None,
                sandbox: SandboxFlags::default(),
                instructions: None,
            })
        );
    }

    #[test]
    fn run_takes_the_wire_thinking_and_effort_and_refuses_what_it_cannot_use() {
        let Command::Run(run) =
            parse_words("run --api responses --thinking 4096 --effort high hi").unwrap()
        else {
            panic!("not a run");
        };
        let tuning = run.choice.tuning;
        assert_eq!(tuning.api, crate::llm::OpenAiApi::Responses);
        assert_eq!(tuning.thinking, crate::llm::Thinking::Budget(4096));
        assert_eq!(tuning.effort.as_deref(), Some("high"));
        let Command::Run(run) = parse_words("run --thinking off hi").unwrap() else {
            panic!("not a run");
        };
        assert_eq!(run.choice.tuning.thinking, crate::llm::Thinking::Off);
        for (words, says) in [
            ("run --api soap hi", "--api takes chat or responses"),
            ("run --thinking 10 hi", "at least 1024"),
            (
                "run --effort max hi",
                "--effort takes minimal, low, medium or high",
            ),
            (
                "run --max-cost -1 hi",
                "--max-cost takes a positive number of dollars, got '-1'",
            ),
            (
                "run --max-cost NaN hi",
                "--max-cost takes a positive number of dollars",
            ),
        ] {
            let err = parse_words(words).unwrap_err().to_string();
            assert!(err.contains(says), "{words}: {err}");
        }
    }

    #[test]
    fn run_takes_instruction_files_or_none() {
        let instructions = |words: &str| match parse_words(words).unwrap() {
            Command::Run(run) => run.instructions,
            other => panic!("{other:?}"),
        };
        assert_eq!(instructions("run go"), None);
        assert_eq!(
            instructions("run --instructions RULES.md --instructions AGENTS.md go"),
            Some(vec!["RULES.md".into(), "AGENTS.md".into()])
        );
        assert_eq!(instructions("run --no-instructions go"), Some(vec![]));
    }

    #[test]
    fn resume_takes_an_id_only_when_the_next_word_has_an_ids_shape() {
        let resume = |words: &str| match parse_words(words).unwrap() {
            Command::Run(run) => (run.resume, run.prompt),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            resume("run --resume 20261201-123456-ab12 go on"),
            (Some(Some("20261201-123456-ab12".into())), "go on".into())
        );
        assert_eq!(resume("run --resume fix it"), (Some(None), "fix it".into()));
        assert_eq!(
            resume("run go --resume=20261201-123456-ab12"),
            (Some(Some("20261201-123456-ab12".into())), "go".into())
        );
        assert_eq!(resume("run fix it"), (None, "fix it".into()));
        assert_eq!(
            parse_words("sessions --workspace /w").unwrap(),
            Command::Sessions {
                workspace: Some("/w".into())
            }
        );
        assert!(matches!(
            parse_words("sessions extra"),
            Err(Error::Usage(_))
        ));
    }

    #[test]
    fn bad_usage_says_what_is_wrong() {
        let message = |words: &str| match parse_words(words) {
            Err(Error::Usage(m)) => m.lines().next().unwrap().to_string(),
            other => panic!("expected a usage error, got {other:?}"),
        };
        assert_eq!(
            message("tool read_file {} --force"),
            "agent-nvim: unknown flag '--force'"
        );
        assert_eq!(
            message("tool read_file [1]"),
            "agent-nvim: JSON_ARGS must be a JSON object, got: [1]"
        );
        assert_eq!(
            message("tool read_file"),
            "agent-nvim: 'tool' takes exactly two arguments: NAME and 'JSON_ARGS'"
        );
        assert_eq!(
            message("tool read_file {} --timeout 0"),
            "agent-nvim: --timeout takes a positive number of seconds, got '0'"
        );
        assert_eq!(
            message("tool read_file {} --workspace"),
            "agent-nvim: --workspace needs a value"
        );
        assert_eq!(
            message("frobnicate"),
            "agent-nvim: unknown command 'frobnicate'"
        );
        assert!(
            message("tool read_file {nope").starts_with("agent-nvim: JSON_ARGS is not valid JSON")
        );
    }

    #[test]
    fn run_and_tool_take_the_sandbox_flags_and_a_bad_mode_names_the_good_ones() {
        let flags = SandboxFlags {
            mode: Some(Mode::ReadOnly),
            no_network: true,
            writable: vec!["/c".into(), "~/.npm".into()],
        };
        let run = match parse_words(
            "run --sandbox read-only fix it --no-network --writable /c --writable ~/.npm",
        )
        .unwrap()
        {
            Command::Run(run) => run,
            other => panic!("{other:?}"),
        };
        assert_eq!((run.prompt.as_str(), &run.sandbox), ("fix it", &flags));
        let tool = match parse_words("tool run_bash {} --no-network --sandbox off").unwrap() {
            Command::Tool(tool) => tool,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            tool.sandbox.sandbox(),
            Sandbox {
                mode: Mode::Off,
                network: false,
                writable: Vec::new(),
            }
        );
        // No flag: the default sandbox.
        match parse_words("tool run_bash {}").unwrap() {
            Command::Tool(tool) => assert_eq!(tool.sandbox.sandbox(), Sandbox::new()),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse_words("sandbox --workspace /w --no-network --json").unwrap(),
            Command::Sandbox(SandboxArgs {
                workspace: Some("/w".into()),
                sandbox: SandboxFlags {
                    no_network: true,
                    ..SandboxFlags::default()
                },
                json: true,
            })
        );
        match parse_words("run --sandbox workspace_write go") {
            Err(Error::Usage(m)) => assert_eq!(
                m.lines().next().unwrap(),
                "agent-nvim: --sandbox takes \"workspace-write\", \"read-only\" or \"off\", got 'workspace_write'"
            ),
            other => panic!("expected a usage error, got {other:?}"),
        }
    }
}
