//! `agent-nvim run`: the agent in a terminal or a script, against the mock server.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::support::bin;
use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};

const SECRET: &str = "sk-ant-test-SECRET-4c1d";

/// `agent-nvim run` with a clean provider environment pointing at `mock`.
fn run(mock: Option<&MockLlm>, dir: &std::path::Path, args: &[&str]) -> Command {
    let mut command = bin();
    command
        .current_dir(dir)
        .arg("run")
        .args(args)
        .stdin(Stdio::null());
    for var in [
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "ANTHROPIC_BASE_URL",
        "OPENAI_BASE_URL",
    ] {
        command.env_remove(var);
    }
    if let Some(mock) = mock {
        command
            .env("ANTHROPIC_API_KEY", SECRET)
            .env("ANTHROPIC_BASE_URL", mock.base_url());
    }
    command
}

fn turn(parts: Vec<Part>) -> Reply {
    Reply::Turn {
        parts,
        usage: (1200, 34),
    }
}

#[test]
fn streams_text_and_tool_rows_then_the_done_line_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![
                Part::Text("Reading it.".into()),
                Part::ToolCall {
                    id: "t1".into(),
                    name: "read_file".into(),
                    args: json!({"path": "a.txt"}).to_string(),
                },
            ]),
            turn(vec![Part::Text("It says alpha.".into())]),
        ],
    );
    let out = run(Some(&mock), dir.path(), &["what", "is", "in", "a.txt?"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        "Reading it.\n▸ read a.txt (6 chars)\nIt says alpha.\ndone · 2.4k in / 68 out tokens · $0.01\n"
    );
    let first = &mock.requests()[0];
    assert_eq!(first.header("x-api-key"), Some(SECRET));
    assert_eq!(
        first.body["messages"][0]["content"][0]["text"],
        "what is in a.txt?"
    );
}

/// A mock whose model runs one command that prints `first`, waits for the file `go`, prints
/// `second` and waits for `go2`, then answers.
fn printing_command_mock() -> MockLlm {
    MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![Part::ToolCall {
                id: "t1".into(),
                name: "run_bash".into(),
                args: json!({"command": "echo first; while [ ! -e go ]; do sleep 0.02; done; \
                                         echo second; while [ ! -e go2 ]; do sleep 0.02; done"})
                .to_string(),
            }]),
            turn(vec![Part::Text("Ran.".into())]),
        ],
    )
}

#[test]
fn on_a_terminal_a_running_command_shows_its_newest_line_rewritten_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let mock = printing_command_mock();
    let mut command = run(Some(&mock), dir.path(), &["--auto-approve", "go"]);
    command.stdin(Stdio::piped());
    let mut pty = crate::support::pty::Pty::spawn_terminal(command);
    // One line, rubbed out and written again: the call while it has printed nothing, then the
    // newest line the command printed, dimmed.
    pty.expect("\r\x1b[K  \x1b[2m… running run_bash\x1b[0m");
    pty.expect("\r\x1b[K  \x1b[2mfirst\x1b[0m");
    std::fs::write(dir.path().join("go"), "").unwrap();
    pty.expect("\r\x1b[K  \x1b[2msecond\x1b[0m");
    std::fs::write(dir.path().join("go2"), "").unwrap();
    // The live line was rubbed out before the finished row took its place.
    let after = pty.expect("Ran.");
    assert!(after.starts_with("\r\x1b[K▸ $ echo first;"), "{after:?}");
    assert_eq!(pty.child.wait().unwrap().code(), Some(0));
}

#[test]
fn on_a_terminal_the_question_is_never_rubbed_out_and_the_allowed_call_says_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mock = printing_command_mock();
    let mut command = run(Some(&mock), dir.path(), &["go"]);
    command.stdin(Stdio::piped());
    let mut pty = crate::support::pty::Pty::spawn_terminal(command);
    pty.expect("[4/Esc] Refuse > ");
    pty.send(b"1");
    // Between the question and the answer's note nothing rewrote the line.
    let answered = pty.expect("allowed once");
    assert!(!answered.contains("\x1b[K"), "{answered:?}");
    // Then the call says it runs until it prints.
    pty.expect("\r\x1b[K  \x1b[2m… running run_bash\x1b[0m");
    pty.expect("\r\x1b[K  \x1b[2mfirst\x1b[0m");
    std::fs::write(dir.path().join("go"), "").unwrap();
    std::fs::write(dir.path().join("go2"), "").unwrap();
    pty.expect("Ran.");
    assert_eq!(pty.child.wait().unwrap().code(), Some(0));
}

#[test]
fn piped_a_running_command_adds_nothing_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("go"), "").unwrap();
    std::fs::write(dir.path().join("go2"), "").unwrap();
    let mock = printing_command_mock();
    let out = run(Some(&mock), dir.path(), &["--auto-approve", "go"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("▸ $ echo first; while"), "{stdout:?}");
    assert!(
        !stdout.contains("first\n") && !stdout.contains('\x1b'),
        "{stdout:?}"
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn the_api_key_is_never_printed_even_when_the_api_fails() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![Reply::Status {
            code: 401,
            message: "invalid x-api-key".into(),
            retry_after: None,
        }],
    );
    let out = run(Some(&mock), dir.path(), &["hi"])
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!all.contains(SECRET), "the key leaked: {all}");
    assert!(all.contains("API error 401"), "{all}");
    assert!(all.contains("invalid x-api-key"), "{all}");
}

#[test]
fn without_any_provider_key_the_message_names_the_variables_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(None, dir.path(), &["hi"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ANTHROPIC_API_KEY") && stderr.contains("OPENAI_API_KEY"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_dead_server_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // A port nobody listens on: bind, note it, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = run(
        None,
        dir.path(),
        &[
            "hi",
            "--provider",
            "openai",
            "--base-url",
            &format!("http://127.0.0.1:{port}/v1"),
        ],
    )
    .env("OPENAI_API_KEY", "k")
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot reach http://127.0.0.1:{port}/v1/chat/completions"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("is the server running"), "{stderr}");
    assert_eq!(
        stderr.matches("cannot reach").count(),
        1,
        "the error is printed once: {stderr}"
    );
}

#[test]
fn without_a_terminal_commands_are_refused_unless_auto_approve() {
    for (flags, ran) in [(&[][..], false), (&["--auto-approve"][..], true)] {
        let dir = tempfile::tempdir().unwrap();
        let mock = MockLlm::start(
            Wire::OpenAi,
            vec![
                turn(vec![Part::ToolCall {
                    id: "c1".into(),
                    name: "run_bash".into(),
                    args: json!({"command": "touch ran"}).to_string(),
                }]),
                turn(vec![Part::Text("ok".into())]),
            ],
        );
        let out = run(
            None,
            dir.path(),
            &[
                &["--provider", "openai", "--base-url", &mock.base_url(), "go"][..],
                flags,
            ]
            .concat(),
        )
        .env("OPENAI_API_KEY", "k")
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(dir.path().join("ran").exists(), ran);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let row = if ran {
            "▸ $ touch ran -> exit 0"
        } else {
            "✗ $ touch ran -> declined"
        };
        assert!(stdout.contains(row), "{stdout}");
    }
}

#[test]
fn ctrl_c_cancels_the_turn_kills_the_command_tree_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![turn(vec![Part::ToolCall {
            id: "t1".into(),
            name: "run_bash".into(),
            args: json!({"command": "sleep 1000 & echo $! > bg.pid; sleep 1000"}).to_string(),
        }])],
    );
    let mut child = run(Some(&mock), dir.path(), &["--auto-approve", "wait"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid_file = dir.path().join("bg.pid");
    for _ in 0..400 {
        if pid_file.exists()
            && !std::fs::read_to_string(&pid_file)
                .unwrap()
                .trim()
                .is_empty()
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let bg: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: sending SIGINT to our own child, as a terminal's Ctrl-C would.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let mut alive = true;
    for _ in 0..100 {
        alive = crate::support::process::alive(bg);
        if !alive {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !alive,
        "the background job of the cancelled command survived"
    );
}

/// The texts of `out` (stdout then stderr).
fn all_output(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_401_and_a_500_that_echo_the_key_show_it_redacted() {
    for (code, retries) in [(401, 0), (500, 4)] {
        let dir = tempfile::tempdir().unwrap();
        // A 500 is retried four times (retry-after 0: no wait), each attempt echoing the key.
        let echo = || Reply::Status {
            code,
            message: format!("invalid x-api-key: {SECRET}"),
            retry_after: Some(0),
        };
        let mock = MockLlm::start(Wire::Anthropic, vec![echo(); retries + 1]);
        let out = run(Some(&mock), dir.path(), &["hi"]).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(mock.requests().len(), retries + 1);
        let all = all_output(&out);
        assert!(!all.contains(SECRET), "the key leaked: {all}");
        assert_eq!(
            all.matches("invalid x-api-key: [redacted]").count(),
            retries + 1,
            "{all}"
        );
        assert!(all.contains(&format!("API error {code}")), "{all}");
    }
}

#[test]
fn a_redirect_to_another_origin_is_not_followed_so_the_key_stays_home() {
    for (wire, provider, key_header) in [
        (Wire::Anthropic, "anthropic", "x-api-key"),
        (Wire::OpenAi, "openai", "authorization"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = MockLlm::start(wire, vec![turn(vec![Part::Text("stolen".into())])]);
        let endpoint = match wire {
            Wire::Anthropic => "/v1/messages",
            _ => "/chat/completions",
        };
        let target = format!("{}{endpoint}", elsewhere.base_url());
        let mock = MockLlm::start(
            wire,
            vec![Reply::Redirect {
                code: 307,
                location: target.clone(),
            }],
        );
        let out = run(
            None,
            dir.path(),
            &["--provider", provider, "--base-url", &mock.base_url(), "hi"],
        )
        .env("ANTHROPIC_API_KEY", SECRET)
        .env("OPENAI_API_KEY", SECRET)
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
        assert!(
            mock.requests()[0]
                .header(key_header)
                .unwrap()
                .contains(SECRET),
            "the configured server gets the key"
        );
        assert_eq!(
            elsewhere.requests(),
            vec![],
            "the other origin was sent a request"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let want = format!(
            "agent: the API at {}{endpoint} redirected to {target} (another origin); not followed, \
             so the key is not sent there. Set base_url (setup() or --base-url) to {} if that \
             server should get the key\n",
            mock.base_url(),
            elsewhere.base_url()
        );
        assert_eq!(stderr, want);
    }
}

#[test]
fn a_redirect_within_the_same_origin_is_followed_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            Reply::Redirect {
                code: 307,
                location: "/v1/messages?moved=1".into(),
            },
            turn(vec![Part::Text("here".into())]),
        ],
    );
    let out = run(Some(&mock), dir.path(), &["hi"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let requests = mock.requests();
    assert_eq!(requests[1].path, "/v1/messages?moved=1");
    assert_eq!(requests[1].header("x-api-key"), Some(SECRET));
    assert_eq!(requests[1].body, requests[0].body);
}

#[test]
fn run_bash_commands_get_no_key_unless_passed() {
    for (flags, want) in [
        (&[][..], "KEYS:\n"),
        (
            &["--pass-env", "ANTHROPIC_API_KEY"][..],
            "KEYS:\nANTHROPIC_API_KEY=[redacted]\n",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mock = MockLlm::start(
            Wire::Anthropic,
            vec![
                turn(vec![Part::ToolCall {
                    id: "t1".into(),
                    name: "run_bash".into(),
                    args: json!({"command": "echo KEYS:; env | grep -E '^(ANTHROPIC_API_KEY|OPENAI_API_KEY|SOME_TOKEN)=' | sort"}).to_string(),
                }]),
                turn(vec![Part::Text("ok".into())]),
            ],
        );
        let out = run(
            Some(&mock),
            dir.path(),
            &[&["--auto-approve"][..], flags, &["go"][..]].concat(),
        )
        .env("OPENAI_API_KEY", "sk-openai-test-77aa")
        .env("SOME_TOKEN", format!("Bearer {SECRET}"))
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
        let (content, ok) = crate::support::tool_result(&mock, 1, "t1");
        assert!(ok);
        assert_eq!(content, format!("{want}\n[exit 0]"));
    }
}

#[test]
fn the_models_text_and_tool_rows_cannot_control_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![
                Part::Text("fine\u{1b}[8m hidden\u{1b}[0m\r\u{1b}[1A\u{202e}!\n".into()),
                Part::ToolCall {
                    id: "t1".into(),
                    name: "run_bash".into(),
                    args: json!({"command": "true #\r\u{1b}[2Kls"}).to_string(),
                },
            ]),
            turn(vec![Part::Text("ok".into())]),
        ],
    );
    let out = run(Some(&mock), dir.path(), &["--auto-approve", "go"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout,
        "fine\\e[8m hidden\\e[0m\\r\\e[1A\\u{202e}!\n▸ $ true #\\r\\e[2Kls -> exit 0\nok\ndone · 2.4k in / 68 out tokens · $0.01\n"
    );
}

#[test]
fn a_run_is_saved_listed_and_resumed_with_the_earlier_turns_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    let mock = crate::support::read_then_resume_mock((1200, 34));
    let in_state = |mut command: Command| {
        command.env("XDG_STATE_HOME", state.path());
        command.output().unwrap()
    };
    let sessions = || {
        let mut command = bin();
        command.current_dir(dir.path()).arg("sessions");
        let out = in_state(command);
        assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(sessions(), "", "nothing saved yet");
    let first = in_state(run(
        Some(&mock),
        dir.path(),
        &["what is in a.txt?\nsecond line"],
    ));
    assert_eq!(first.status.code(), Some(0), "{}", all_output(&first));
    let listed = sessions();
    let line = listed.lines().next().unwrap();
    assert_eq!(listed.lines().count(), 1, "{listed}");
    // The title is the first prompt's first line.
    assert!(
        line.ends_with(" ago  1 prompt  2468 tokens  what is in a.txt?")
            || line.ends_with(" just now  1 prompt  2468 tokens  what is in a.txt?"),
        "{line}"
    );
    let id = line.split(' ').next().unwrap().to_string();

    let again = in_state(run(Some(&mock), dir.path(), &["--resume", "go", "on"]));
    assert_eq!(again.status.code(), Some(0), "{}", all_output(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains(&format!("agent: resumed {id} · what is in a.txt?")),
        "{}",
        all_output(&again)
    );
    // The third request carries the first prompt, the call, its result and the answer.
    let sent = &mock.requests()[2].body["messages"];
    let sent = sent.as_array().unwrap();
    assert_eq!(sent.len(), 5, "{sent:?}");
    assert_eq!(
        sent[0]["content"][0]["text"],
        "what is in a.txt?\nsecond line"
    );
    assert_eq!(sent[1]["content"][0]["name"], "read_file");
    assert!(sent[2].to_string().contains("alpha"), "{}", sent[2]);
    assert_eq!(sent[4]["content"][0]["text"], "go on");
    let listed = sessions();
    assert!(
        listed.contains(&format!("{id}  ")) && listed.contains("  2 prompts  "),
        "{listed}"
    );
    // Each run took a checkpoint before its prompt, under the saved conversation's id: both
    // prompts are rewind points.
    let mut config = agent_nvim::session::SessionConfig::new(dir.path().to_path_buf());
    config.state_dir = Some(state.path().join("nvim/agent"));
    let built = agent_nvim::session::build(
        &config,
        Box::new(|_, _| None),
        std::sync::Arc::new(agent_nvim::editor::NoEditor),
    )
    .unwrap();
    let checkpoints = built.checkpoints.unwrap();
    let points = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(checkpoints.points(&id))
        .unwrap();
    let labels: Vec<(usize, &str)> = points.iter().map(|p| (p.turn, p.label.as_str())).collect();
    assert_eq!(
        labels,
        [(2, "go on"), (1, "what is in a.txt?")],
        "{points:?}"
    );

    let missing = in_state(run(
        Some(&mock),
        dir.path(),
        &["--resume", "20000101-000000-0000", "x"],
    ));
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains("agent: no saved conversation '20000101-000000-0000' in this workspace"),
        "{}",
        all_output(&missing)
    );
}

#[test]
fn agents_md_goes_into_the_system_prompt_said_on_stderr_and_no_instructions_reads_none() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("AGENTS.md"), "RULE-FROM-AGENTS-MD\n").unwrap();
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![Part::Text("ok".into())]),
            turn(vec![Part::Text("ok".into())]),
        ],
    );
    let out = run(Some(&mock), dir.path(), &["hi"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok\ndone · 1.2k in / 34 out tokens · <$0.01\n"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("agent: instructions: AGENTS.md\n"),
        "{stderr}"
    );
    let system = |n: usize| mock.requests()[n].body["system"][0]["text"].to_string();
    assert!(system(0).contains("RULE-FROM-AGENTS-MD"));

    let out = run(Some(&mock), dir.path(), &["--no-instructions", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("instructions"));
    assert!(!system(1).contains("RULE-FROM-AGENTS-MD"));
}

/// A mock whose model asks to run `touch ran`, then answers, its stream held back `delay`.
fn touch_mock(delay: Duration) -> MockLlm {
    MockLlm::start(
        Wire::Anthropic,
        vec![
            turn(vec![Part::ToolCall {
                id: "t1".into(),
                name: "run_bash".into(),
                args: json!({"command": "touch ran"}).to_string(),
            }]),
            turn(vec![Part::Text("Answered.".into())]),
        ],
    )
    .with_pace(crate::support::mock_llm::Pace {
        chunk_bytes: None,
        delay,
    })
}

#[test]
fn keys_typed_before_the_question_is_printed_never_answer_it() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mock = touch_mock(Duration::from_millis(1500));
    let mut command = run(Some(&mock), dir.path(), &["go"]);
    command
        .env("XDG_STATE_HOME", state.path())
        .stdin(Stdio::piped());
    let mut pty = crate::support::pty::Pty::spawn_terminal(command);
    // Typed while the model is still answering: "Always allow ... in this project", twice
    // (the choice and its confirmation).
    pty.send(b"aa");
    pty.expect("[4/Esc] Refuse > ");
    // Nothing was decided by them: the question waits, and refusing refuses.
    pty.send(b"4");
    pty.expect("Answered.");
    assert_eq!(pty.child.wait().unwrap().code(), Some(0));
    assert!(!dir.path().join("ran").exists());
    let saved: Vec<_> = crate::support::files_beneath(state.path())
        .into_iter()
        .filter(|p| p.ends_with("permissions.json"))
        .collect();
    assert!(saved.is_empty(), "a rule was saved: {saved:?}");
}

#[test]
fn a_lasting_grant_takes_its_key_twice_and_another_key_is_a_choice_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mock = touch_mock(Duration::ZERO);
    let mut command = run(Some(&mock), dir.path(), &["go"]);
    command
        .env("XDG_STATE_HOME", state.path())
        .stdin(Stdio::piped());
    let mut pty = crate::support::pty::Pty::spawn_terminal(command);
    pty.expect("[4/Esc] Refuse > ");
    pty.send(b"3");
    pty.expect("Allow everything this session: press 3 again to confirm > ");
    // Not the same key: read as a choice of its own (refuse).
    pty.send(b"4");
    pty.expect("Answered.");
    assert_eq!(pty.child.wait().unwrap().code(), Some(0));
    assert!(!dir.path().join("ran").exists());
}
