//! `agent-nvim nvim` talks msgpack-RPC on its stdout and nothing else: a stray line there (a
//! log, a panic message, a child's output) would break Neovim's channel. The backend is driven
//! here as Neovim drives it, through a start, a prompt that fails (no provider), requests it
//! answers and one it does not know, and every byte it wrote to stdout must decode as RPC
//! messages, while its log went to the file it was given.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rmpv::Value;

/// Decodes `bytes` as back-to-back msgpack values; the offset of the first that is not one.
fn messages(bytes: &[u8]) -> Result<Vec<Value>, usize> {
    let mut cursor = std::io::Cursor::new(bytes);
    let mut found = Vec::new();
    while (cursor.position() as usize) < bytes.len() {
        let at = cursor.position() as usize;
        match rmpv::decode::read_value(&mut cursor) {
            Ok(value) => found.push(value),
            Err(_) => return Err(at),
        }
    }
    Ok(found)
}

/// Whether `value` is a msgpack-RPC message: `[0, id, method, params]`, `[1, id, error,
/// result]` or `[2, method, params]`.
fn is_rpc(value: &Value) -> bool {
    let Value::Array(items) = value else {
        return false;
    };
    match items.first().and_then(Value::as_u64) {
        Some(0) => items.len() == 4 && items[2].is_str() && items[3].is_array(),
        Some(1) => items.len() == 4 && items[1].is_u64(),
        Some(2) => items.len() == 3 && items[1].is_str() && items[2].is_array(),
        _ => false,
    }
}

fn responded(values: &[Value], id: u64) -> bool {
    values.iter().any(|v| {
        matches!(v, Value::Array(items) if items.first().and_then(Value::as_u64) == Some(1)
            && items.get(1).and_then(Value::as_u64) == Some(id))
    })
}

#[test]
fn the_backend_writes_nothing_but_msgpack_rpc_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("a.txt"), "hello\n").unwrap();
    let log = dir.path().join("backend.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-nvim"))
        .args(["nvim", "--log", log.to_str().unwrap()])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env("AGENT_NVIM_LOG", "trace")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (bytes_tx, bytes_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut chunk = [0u8; 64 * 1024];
        while let Ok(n) = stdout.read(&mut chunk) {
            if n == 0 || bytes_tx.send(chunk[..n].to_vec()).is_err() {
                break;
            }
        }
    });

    let mut stdin = child.stdin.take().unwrap();
    let send = |stdin: &mut std::process::ChildStdin, value: Value| {
        rmpv::encode::write_value(stdin, &value).unwrap();
        stdin.flush().unwrap();
    };
    // A request without arguments.
    let request = |id: u64, method: &str| {
        Value::Array(vec![
            0.into(),
            id.into(),
            method.into(),
            Value::Array(vec![]),
        ])
    };
    let map = |pairs: Vec<(&str, Value)>| {
        Value::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (Value::from(k), v))
                .collect(),
        )
    };
    send(&mut stdin, request(1, "version"));
    send(
        &mut stdin,
        Value::Array(vec![
            2.into(),
            "start".into(),
            Value::Array(vec![map(vec![
                ("workspace", workspace.to_str().unwrap().into()),
                (
                    "state_dir",
                    dir.path().join("state").to_str().unwrap().into(),
                ),
            ])]),
        ]),
    );
    send(
        &mut stdin,
        Value::Array(vec![
            2.into(),
            "prompt".into(),
            Value::Array(vec![map(vec![("text", "what is in a.txt?".into())])]),
        ]),
    );
    send(&mut stdin, request(2, "sessions"));
    send(&mut stdin, request(3, "no_such_request"));

    // Until the three requests are answered and the backend has sent Lua something (the
    // failed prompt's events go out as `nvim_exec_lua` requests).
    let mut bytes = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        if let Ok(chunk) = bytes_rx.recv_timeout(Duration::from_millis(100)) {
            bytes.extend(chunk);
        }
        if let Ok(values) = messages(&bytes) {
            seen = values;
            let lua = seen.iter().any(|v| {
                matches!(v, Value::Array(items) if items.get(2).and_then(Value::as_str) == Some("nvim_exec_lua"))
            });
            if (1..=3).all(|id| responded(&seen, id)) && lua {
                break;
            }
        }
    }
    drop(stdin);
    let waited = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if waited.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    reader.join().unwrap();
    while let Ok(chunk) = bytes_rx.try_recv() {
        bytes.extend(chunk);
    }

    let values = messages(&bytes).unwrap_or_else(|at| {
        panic!(
            "stdout holds something that is not msgpack at byte {at}: {:?}",
            String::from_utf8_lossy(&bytes[at..bytes.len().min(at + 200)])
        )
    });
    assert!(
        values.len() >= seen.len() && (1..=3).all(|id| responded(&values, id)),
        "not every request was answered: {values:?}"
    );
    for value in &values {
        assert!(is_rpc(value), "not an RPC message on stdout: {value:?}");
    }
    // What the backend logged went to its file, not to the channel.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.trim().is_empty(), "nothing was logged to {log:?}");
    assert!(
        !bytes.windows(5).any(|w| w == b"INFO " || w == b"TRACE"),
        "a log line reached stdout"
    );
}
