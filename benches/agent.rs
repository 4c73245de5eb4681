//! Turn-loop benchmarks (issue 3): how many read_file round trips a second the loop sustains when
//! the model answers at once, and how soon a streamed text delta reaches `agent-nvim run`'s stdout
//! after the server sent it. Run with `cargo bench --bench agent`; figures go in BENCHMARKS.md.
//!
//! It has its own minimal SSE server (Anthropic format) so that the send time of every event is
//! known on the same clock as the time its text is read back.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_nvim::agent::{Agent, Outcome};
use agent_nvim::approval::Gate;
use agent_nvim::editor::NoEditor;
use agent_nvim::llm::{ApiKey, Client, ProviderConfig, ProviderKind};
use agent_nvim::tools::{Executor, Settings, ToolContext};
use agent_nvim::workspace::Workspace;
use tokio_util::sync::CancellationToken;

fn main() {
    round_trips(40);
    round_trips(200);
    round_trips(1000);
    delta_latency();
}

/// Reads one HTTP request (head and content-length body) from `stream`; false at EOF.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<String> {
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    String::from_utf8(body).ok()
}

fn chunk(stream: &mut TcpStream, data: &str) {
    // The client may hang up; the next request comes on a new connection.
    let _ = write!(stream, "{:x}\r\n{data}\r\n", data.len()).and_then(|()| stream.flush());
}

fn sse(name: &str, data: &str) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

const HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

/// Serves `turns` responses that each call read_file, then one that ends the turn.
fn serve_tool_calls(listener: TcpListener, turns: usize) {
    std::thread::spawn(move || {
        let mut served = 0;
        for stream in listener.incoming() {
            let stream = stream.unwrap();
            stream.set_nodelay(true).unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut stream = stream;
            while read_request(&mut reader).is_some() {
                served += 1;
                stream.write_all(HEAD.as_bytes()).unwrap();
                let mut body = sse(
                    "message_start",
                    r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}"#,
                );
                if served <= turns {
                    body += &sse(
                        "content_block_start",
                        &format!(
                            r#"{{"type":"content_block_start","index":0,"content_block":{{"type":"tool_use","id":"t{served}","name":"read_file","input":{{}}}}}}"#
                        ),
                    );
                    body += &sse(
                        "content_block_delta",
                        r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\":\"a.txt\"}"}}"#,
                    );
                } else {
                    body += &sse(
                        "content_block_start",
                        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
                    );
                    body += &sse(
                        "content_block_delta",
                        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"done"}}"#,
                    );
                }
                body += &sse(
                    "content_block_stop",
                    r#"{"type":"content_block_stop","index":0}"#,
                );
                body += &sse(
                    "message_delta",
                    r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}"#,
                );
                body += &sse("message_stop", r#"{"type":"message_stop"}"#);
                chunk(&mut stream, &body);
                chunk(&mut stream, "");
            }
        }
    });
}

/// One prompt whose model asks for read_file `turns` times before it finishes.
fn round_trips(turns: usize) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    serve_tool_calls(listener, turns);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n".repeat(50)).unwrap();
    let executor = Executor::new(ToolContext {
        workspace: Workspace::new(dir.path()).unwrap(),
        gate: Arc::new(Gate::new(true, None)),
        editor: Arc::new(NoEditor),
        settings: Settings::default(),
    });
    let config = ProviderConfig {
        kind: ProviderKind::Anthropic,
        model: "bench".into(),
        base_url: base,
        api_key: Some(ApiKey::new("k".into())),
    };
    let client = Client::new(config, &executor.catalogue()).unwrap();
    let mut agent = Agent::new(client, executor, (turns + 1) as u32);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    runtime.spawn(async move {
        while let Some(event) = rx.recv().await {
            if let agent_nvim::agent::Event::TurnDone { message, .. } = event {
                println!("  (turn ended: {message})");
            }
        }
    });
    let start = Instant::now();
    let outcome = runtime.block_on(agent.prompt("go".into(), &tx, &CancellationToken::new()));
    let elapsed = start.elapsed();
    assert_eq!(outcome, Outcome::Done);
    println!(
        "turn loop, {turns} read_file round trips against an instant local server: {:.0} round trips/s ({:.2} ms each; the request body grows with the history)",
        turns as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e3 / turns as f64
    );
}

fn delta_latency() {
    const DELTAS: usize = 200;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let sent: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let sent_by_server = sent.clone();
    std::thread::spawn(move || {
        let stream = listener.incoming().next().unwrap().unwrap();
        stream.set_nodelay(true).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut stream = stream;
        read_request(&mut reader).unwrap();
        stream.write_all(HEAD.as_bytes()).unwrap();
        chunk(
            &mut stream,
            &sse(
                "message_start",
                r#"{"type":"message_start","message":{"usage":{"input_tokens":1}}}"#,
            ),
        );
        chunk(
            &mut stream,
            &sse(
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
        );
        for i in 0..DELTAS {
            std::thread::sleep(Duration::from_millis(10));
            // One line per delta, so the reader can tell them apart.
            let event = sse(
                "content_block_delta",
                &format!(
                    r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"delta {i}\n"}}}}"#
                ),
            );
            sent_by_server.lock().unwrap().push(Instant::now());
            chunk(&mut stream, &event);
        }
        let mut tail = sse(
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
        );
        tail += &sse(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}"#,
        );
        tail += &sse("message_stop", r#"{"type":"message_stop"}"#);
        chunk(&mut stream, &tail);
        chunk(&mut stream, "");
    });
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-nvim"))
        .current_dir(dir.path())
        .args(["run", "hi"])
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", &base)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut received = Vec::new();
    for _ in 0..DELTAS {
        lines.next().unwrap().unwrap();
        received.push(Instant::now());
    }
    child.wait().unwrap();
    let sent = sent.lock().unwrap();
    let mut latency: Vec<Duration> = received
        .iter()
        .zip(sent.iter())
        .map(|(r, s)| r.duration_since(*s))
        .collect();
    latency.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "text delta, server write to `agent-nvim run` stdout ({DELTAS} deltas, 10 ms apart): median {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(latency[DELTAS / 2]),
        ms(latency[DELTAS * 99 / 100]),
        ms(latency[DELTAS - 1])
    );
}
