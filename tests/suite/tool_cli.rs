//! `agent-nvim tool`: one tool by hand, its JSON, its exit codes, its terminal question.

use std::io::Read;

use serde_json::json;

use crate::support::{bin, json, pty::Pty, tool};

#[test]
fn prints_one_json_result_and_exits_0_whatever_ok_is() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    let out = tool(dir.path(), "read_file", r#"{"path":"a.txt"}"#, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        json(&out),
        json!({"ok": true, "text": "hello\n", "summary": "read a.txt (6 chars)"})
    );

    let out = tool(dir.path(), "read_file", r#"{"path":"../x"}"#, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        json(&out),
        json!({"ok": false, "text": "Refused: '../x' resolves outside the workspace root.",
               "summary": "Refused: '../x' resolves outside the workspace root."})
    );
}

#[test]
fn bad_usage_exits_2_with_a_message_and_prints_nothing_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    for (json_args, flags, says) in [
        ("{}", &["--yes"][..], "unknown flag '--yes'"),
        ("[1,2]", &[][..], "JSON_ARGS must be a JSON object"),
        ("{nope", &[][..], "JSON_ARGS is not valid JSON"),
        (
            "{}",
            &["--workspace", "/no/such/dir"][..],
            "cannot use workspace root /no/such/dir",
        ),
    ] {
        let out = tool(dir.path(), "list_files", json_args, flags);
        assert_eq!(out.status.code(), Some(2), "{json_args} {flags:?}");
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(says),
            "stderr {stderr:?} should say {says:?}"
        );
    }
}

#[test]
fn the_workspace_flag_sets_the_root() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("proj")).unwrap();
    std::fs::write(dir.path().join("proj/in.txt"), "").unwrap();
    let ws = dir.path().join("proj");
    let out = tool(
        dir.path(),
        "list_files",
        "{}",
        &["--workspace", ws.to_str().unwrap()],
    );
    assert_eq!(
        json(&out),
        json!({"ok": true, "text": "in.txt", "summary": "list . (1 entries)"})
    );
}

#[test]
fn without_a_terminal_mutating_tools_are_refused_unless_auto_approve() {
    let dir = tempfile::tempdir().unwrap();
    let out = tool(
        dir.path(),
        "edit_file",
        r#"{"path":"n.txt","old_str":"","new_str":"x"}"#,
        &[],
    );
    assert_eq!(
        json(&out)["text"],
        "The user declined to run edit_file. Ask what they would like to do instead."
    );
    assert!(!dir.path().join("n.txt").exists());
    let out = tool(dir.path(), "run_bash", r#"{"command":"touch ran"}"#, &[]);
    assert_eq!(json(&out)["ok"], false);
    assert!(!dir.path().join("ran").exists());

    let out = tool(
        dir.path(),
        "edit_file",
        r#"{"path":"n.txt","old_str":"","new_str":"x"}"#,
        &["--auto-approve"],
    );
    assert_eq!(
        json(&out),
        json!({"ok": true, "text": "Created n.txt.", "summary": "create n.txt"})
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("n.txt")).unwrap(),
        "x"
    );
}

#[test]
fn the_timeout_flag_bounds_run_bash() {
    let dir = tempfile::tempdir().unwrap();
    let out = tool(
        dir.path(),
        "run_bash",
        r#"{"command":"sleep 30"}"#,
        &["--auto-approve", "--timeout", "1"],
    );
    let result = json(&out);
    assert_eq!(result["ok"], false);
    assert_eq!(
        result["text"],
        "\n[timed out after 1s - process tree killed]\n[exit 124]"
    );
}

fn tool_on_a_terminal(dir: &std::path::Path, name: &str, args: &str) -> Pty {
    let mut command = bin();
    command.current_dir(dir).args(["tool", name, args]);
    Pty::spawn(command)
}

fn stdout_of(pty: &mut Pty) -> serde_json::Value {
    let mut out = String::new();
    pty.child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(pty.child.wait().unwrap().code(), Some(0));
    serde_json::from_str(out.trim_end()).unwrap()
}

#[test]
fn on_a_terminal_the_question_shows_the_diff_and_1_allows_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
    let mut pty = tool_on_a_terminal(
        dir.path(),
        "edit_file",
        r#"{"path":"a.txt","old_str":"two","new_str":"2"}"#,
    );
    let screen = pty.expect("[4/Esc] Refuse > ");
    assert!(
        screen.contains("agent: edit_file wants to: edit a.txt (replace 3 chars with 1)"),
        "{screen}"
    );
    assert!(screen.contains("  -two\r\n  +2\r\n"), "{screen}");
    pty.send(b"1");
    pty.expect("allowed once");
    assert_eq!(
        stdout_of(&mut pty),
        json!({"ok": true, "text": "Edited a.txt.", "summary": "edit a.txt"})
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "one\n2\n"
    );
}

#[test]
fn on_a_terminal_esc_refuses_and_other_keys_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let mut pty = tool_on_a_terminal(dir.path(), "run_bash", r#"{"command":"touch ran"}"#);
    pty.expect("[4/Esc] Refuse > ");
    pty.send(b"zq\x1b");
    pty.expect("refused");
    let result = stdout_of(&mut pty);
    assert_eq!(
        result["text"],
        "The user declined to run run_bash. Ask what they would like to do instead."
    );
    assert!(!dir.path().join("ran").exists());
}

/// Two `agent-nvim tool edit_file` processes on one file at once, many times: every edit that
/// says `Edited` is in the file afterwards (none overwrote another's).
#[test]
fn concurrent_edits_of_one_file_never_lose_one_that_reported_success() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shared.txt");
    for pair in 0..200 {
        std::fs::write(&file, "base\n").unwrap();
        let children: Vec<_> = ["A", "B"]
            .iter()
            .map(|who| {
                let args = json!({"path": "shared.txt", "old_str": "base",
                                  "new_str": format!("base {who}{pair}")});
                bin()
                    .current_dir(dir.path())
                    .args(["tool", "edit_file", &args.to_string(), "--auto-approve"])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outcomes: Vec<serde_json::Value> = children
            .into_iter()
            .map(|child| json(&child.wait_with_output().unwrap()))
            .collect();
        let text = std::fs::read_to_string(&file).unwrap();
        for (who, outcome) in ["A", "B"].iter().zip(&outcomes) {
            let present =
                text.contains(&format!("{who}{pair} ")) || text.contains(&format!("{who}{pair}\n"));
            assert_eq!(
                outcome["ok"].as_bool().unwrap(),
                present,
                "pair {pair}: {who} said {outcome} but the file is {text:?}"
            );
        }
    }
}

/// `agent-nvim tool NAME JSON --auto-approve` in `dir`, run as uid and gid 1234 (the caller is
/// root), stdin empty.
fn tool_as_user_1234(dir: &std::path::Path, name: &str, json: &str) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    bin()
        .current_dir(dir)
        .env("HOME", dir)
        .args(["tool", name, json, "--auto-approve"])
        .uid(1234)
        .gid(1234)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// A user edits a setuid and setgid file of someone else's that they may write: the new file is
/// theirs (the owner cannot be kept), so it must not come out setuid to them, nor setgid to a
/// group that is not the file's.
#[test]
#[allow(clippy::print_stderr)]
fn an_edit_that_cannot_keep_the_owner_drops_setuid_and_setgid() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: only root can make a file owned by another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mode = |path: &std::path::Path, mode| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    mode(dir.path(), 0o777);
    let file = dir.path().join("tool.sh");
    std::fs::write(&file, "old\n").unwrap();
    std::os::unix::fs::chown(&file, Some(4321), Some(4321)).unwrap();
    mode(&file, 0o6777);
    let args = json!({"path": "tool.sh", "old_str": "old", "new_str": "new"});
    let out = tool_as_user_1234(dir.path(), "edit_file", &args.to_string());
    assert_eq!(json(&out)["ok"], true, "{out:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "new\n");
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (1234, 1234, 0o777)
    );
}

/// A directory the user may not search is not "outside the workspace": the refusal says why.
#[test]
#[allow(clippy::print_stderr)]
fn a_path_through_a_directory_the_user_may_not_search_says_permission_denied() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: only root can run the tool as another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::create_dir(dir.path().join("locked")).unwrap();
    std::fs::write(dir.path().join("locked/x"), "secret").unwrap();
    std::fs::set_permissions(
        dir.path().join("locked"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    let out = tool_as_user_1234(dir.path(), "read_file", r#"{"path":"locked/x"}"#);
    assert_eq!(
        json(&out)["text"],
        "Refused: 'locked/x' cannot be looked up: permission denied."
    );
}

#[test]
fn run_bash_gets_no_api_key_variable_unless_passed() {
    let dir = tempfile::tempdir().unwrap();
    let key = "sk-proj-tool-cli-5e5e5e";
    let command =
        json!({"command": "env | grep -E '^(ANTHROPIC_API_KEY|OPENAI_API_KEY|MY_COPY)=' | sort; \
                         printf '%s' \"$OPENAI_API_KEY\" | rev; echo"})
        .to_string();
    let env_of = |flags: &[&str]| {
        let out = bin()
            .current_dir(dir.path())
            .args(["tool", "run_bash", &command, "--auto-approve"])
            .args(flags)
            .env("ANTHROPIC_API_KEY", "sk-ant-tool-cli-4d4d4d")
            .env("OPENAI_API_KEY", key)
            .env("MY_COPY", key)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        json(&out)["text"].as_str().unwrap().to_string()
    };
    assert_eq!(env_of(&[]), "\n\n[exit 0]");
    // Passed, the variable is there with its value (reversed here, so it is not redacted); what
    // the command prints of the key itself is redacted.
    let reversed: String = key.chars().rev().collect();
    assert_eq!(
        env_of(&["--pass-env", "OPENAI_API_KEY"]),
        format!("OPENAI_API_KEY=[redacted]\n{reversed}\n\n[exit 0]")
    );
}

/// The attack a review found: a carriage return and an erase-line sequence that made the question
/// read `ls -la` while `touch PWNED` would run.
const SPOOF: &str = "touch PWNED #\r\u{1b}[2Kls -la";

#[test]
fn on_a_terminal_a_spoofing_command_is_shown_escaped_and_nothing_raw_reaches_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let args = json!({ "command": SPOOF }).to_string();
    let mut pty = tool_on_a_terminal(dir.path(), "run_bash", &args);
    let screen = pty.expect("[4/Esc] Refuse > ");
    assert!(
        screen.contains(r"agent: run_bash wants to: touch PWNED #\r\e[2Kls -la"),
        "{screen:?}"
    );
    assert!(
        !screen.contains('\u{1b}'),
        "an ESC reached the terminal: {screen:?}"
    );
    // The pty turns each newline into CR LF; any other CR came from the request.
    assert!(
        !screen.replace("\r\n", "\n").contains('\r'),
        "a CR reached the terminal: {screen:?}"
    );
    pty.send(b"4");
    pty.expect("refused");
    assert_eq!(stdout_of(&mut pty)["ok"], false);
    assert!(!dir.path().join("PWNED").exists());
}

#[test]
fn on_a_terminal_every_line_of_a_long_command_is_shown_and_blank_runs_are_one_marker() {
    let dir = tempfile::tempdir().unwrap();
    let command = format!("ls -la{}touch PWNED \u{202e}txt.exe", "\n".repeat(61));
    let args = json!({ "command": command }).to_string();
    let mut pty = tool_on_a_terminal(dir.path(), "run_bash", &args);
    let screen = pty.expect("[4/Esc] Refuse > ");
    assert!(
        screen.contains(
            "agent: run_bash wants to: run_bash · 62 lines\r\n  │ ls -la\r\n  │ [… 60 blank lines …]\r\n  │ touch PWNED \\u{202e}txt.exe\r\n"
        ),
        "{screen:?}"
    );
    assert!(!screen.contains('\u{202e}'), "{screen:?}");
    pty.send(b"n");
    pty.expect("refused");
    assert_eq!(stdout_of(&mut pty)["ok"], false);
}

#[test]
fn a_command_has_no_controlling_terminal_even_when_the_backend_has_one() {
    // (setsid is util-linux's; scripts/test.sh installs it where it is missing.)
    let dir = tempfile::tempdir().unwrap();
    // The backend in a session whose controlling terminal is the pty (as in a terminal); its
    // command tries the terminal: reading the person's keys, setting its size.
    let probe = "python3 -c 'import os\ntry:\n    os.open(\"/dev/tty\", os.O_RDONLY)\n    print(\"terminal open\")\nexcept OSError as e:\n    print(\"no terminal\", e.errno)'";
    let mut command = std::process::Command::new("setsid");
    command
        .current_dir(dir.path())
        .arg("--ctty")
        .arg(env!("CARGO_BIN_EXE_agent-nvim"))
        .args([
            "tool",
            "run_bash",
            &json!({ "command": probe }).to_string(),
            "--auto-approve",
            "--sandbox",
            "off",
        ]);
    let mut pty = Pty::spawn(command);
    let result = stdout_of(&mut pty);
    assert_eq!(
        result["text"],
        format!("no terminal {}\n\n[exit 0]", libc::ENXIO),
        "{result}"
    );
}
