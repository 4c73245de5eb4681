//! A local stand-in for the LLM vendors, for the tests and the benches: it speaks the real wire formats (Anthropic
//! Messages, OpenAI chat completions and Responses, streamed as server-sent events over HTTP/1.1
//! chunked encoding, and Ollama's own chat as JSON lines) on 127.0.0.1 only, answers each request with the next scripted [`Reply`], and records
//! every request. Faults come on demand: bodies split at awkward byte boundaries with delays
//! ([`Pace`]), error statuses with `retry-after`, connections cut mid-body, `error` events mid-stream.
//! For the benches, a reply can spread its text deltas over a set time and record when each was
//! written ([`Reply::Spread`], [`MockLlm::text_sent`]), on the same clock as the reader's.
//!
//! The HTTP is hand-written over `std::net` so that every byte on the wire is the script's; each
//! connection has its own thread, so sync tests, `#[tokio::test]` tests and a separate `nvim`
//! process can all use it. It stops listening, and closes its connections, when dropped.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Which vendor's wire format the mock speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Anthropic Messages: `POST /v1/messages`, named SSE events.
    Anthropic,
    /// OpenAI chat completions: `POST /v1/chat/completions`, `data:` chunks ending in `[DONE]`.
    OpenAi,
    /// OpenAI chat completions as Ollama streams them: text chunks carry `role` every time, each
    /// tool call arrives whole in one chunk, and every tool call has `index` 0 (ids differ).
    OpenAiOllamaStyle,
    /// OpenAI Responses: `POST /v1/responses`, named `response.*` SSE events, no `[DONE]`.
    Responses,
    /// Ollama's own chat: `POST /api/chat`, one JSON object a line, the last `"done": true`;
    /// tool calls whole, without ids, arguments as objects.
    Ollama,
}

/// One piece of a model response, in the order the model produced it.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Assistant text, streamed as several deltas.
    Text(String),
    /// Assistant text streamed as exactly these deltas, one event each.
    Deltas(Vec<String>),
    /// A tool call; `args` is the raw JSON text the model wrote, malformed on purpose if a test wants.
    ToolCall {
        id: String,
        name: String,
        args: String,
    },
    /// Thinking: an Anthropic `thinking` block (its text in up to 3 `thinking_delta`s, then one
    /// `signature_delta`), Ollama's `thinking` field; not sent in the OpenAI wires.
    Thinking { text: String, signature: String },
    /// An Anthropic `redacted_thinking` block, whole at its start; not sent in the other wires.
    Redacted { data: String },
    /// A Responses `reasoning` item: its summary streamed as `reasoning_summary_text.delta`s,
    /// its `encrypted_content` in the item at `output_item.done`; not sent in the other wires.
    Reasoning {
        id: String,
        summary: String,
        encrypted: String,
    },
}

/// The mock's answer to one request to the model endpoint.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// One streamed model response: the parts in order, then the stop (`tool_use` / `tool_calls`
    /// when it has tool calls, else `end_turn` / `stop`), with usage (input, output tokens).
    Turn { parts: Vec<Part>, usage: (u64, u64) },
    /// An HTTP error status with the vendor's JSON error body, a `request-id` (Anthropic) or
    /// `x-request-id` (OpenAI) header, and `retry-after` (seconds) when given.
    Status {
        code: u16,
        message: String,
        retry_after: Option<u64>,
    },
    /// A `Turn` that stops at the model's output limit, as each wire says it: Anthropic
    /// `stop_reason: max_tokens`, OpenAI `finish_reason: length`, Responses
    /// `response.incomplete` (`max_output_tokens`), Ollama `done_reason: length`.
    Limited { parts: Vec<Part>, usage: (u64, u64) },
    /// A `Turn` (usage 0, 0) whose connection is closed after this many bytes of the body: no
    /// end of stream, no chunked-encoding terminator.
    CutAfter { bytes: usize, parts: Vec<Part> },
    /// A stream that sends the first part, then an error mid-stream and ends: Anthropic
    /// `event: error` with an `overloaded_error`, OpenAI a `data: {"error":{...}}` chunk.
    StreamError { message: String, parts: Vec<Part> },
    /// A stream that fails: Responses `response.failed` with `message` after `response.created`;
    /// in the other wires the same as a `StreamError` without parts.
    Failed { message: String },
    /// A redirect (301, 302, 307, 308) to `location`, as sent (absolute or relative), with an
    /// empty body.
    Redirect { code: u16, location: String },
    /// A `Turn` (usage 0, 0) written one SSE event per HTTP chunk, ignoring the [`Pace`]: the
    /// other events at once, text delta k at `k * over / deltas` after the first one (for the
    /// benches; [`MockLlm::text_sent`] says when each went out).
    Spread { parts: Vec<Part>, over: Duration },
}

/// How a streamed body is written: in pieces of `chunk_bytes` (one HTTP chunk each; the whole
/// body at once when `None`), with `delay` before each write after the response head.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pace {
    pub chunk_bytes: Option<usize>,
    pub delay: Duration,
}

/// One request the mock received, whatever its path.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub method: String,
    /// The request target as sent, query included.
    pub path: String,
    /// In the order sent, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; `Null` when empty, a JSON string of the text when not JSON.
    pub body: Value,
}

impl Recorded {
    /// The first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A running mock server; see the module doc.
///
/// Every response carries request id `req_mock_{N}`, N the 1-based number of the request in
/// [`MockLlm::requests`]; message ids are `msg_mock_{N}` / `chatcmpl-mock-{N}`, and the model is
/// the request's `model`. A request to another path, or without `"stream": true`, gets a 404 or
/// 400 that says why and does not use up a reply; once the replies run out every request gets a
/// 500 saying "mock: no scripted reply left".
pub struct MockLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

/// What the acceptor, the connection threads and the test share.
struct Shared {
    wire: Wire,
    replies: Mutex<VecDeque<Reply>>,
    pace: Mutex<Pace>,
    log: Mutex<Vec<Recorded>>,
    /// Whether [`MockLlm::requests`] keeps each request's body (see [`MockLlm::without_bodies`]).
    keep_bodies: AtomicBool,
    /// When each text delta of a [`Reply::Spread`] was about to be written.
    text_sent: Mutex<Vec<Instant>>,
    arrived: Condvar,
    stop: AtomicBool,
    /// A handle on each connection's socket (to shut it down on drop) and its thread.
    connections: Mutex<Vec<(TcpStream, JoinHandle<()>)>>,
    /// With [`MockLlm::with_cache`]: the prompt prefixes cached so far (their hashes), as
    /// Anthropic's prompt cache keeps them at each `cache_control` breakpoint.
    cache: Mutex<Option<std::collections::HashSet<u64>>>,
    /// With [`MockLlm::with_models`]: what `GET /api/tags` lists, as Ollama does.
    listed: Mutex<Option<Vec<String>>>,
}

impl MockLlm {
    /// Listens on a free port of 127.0.0.1 and answers with `replies`, one a request, in order.
    pub fn start(wire: Wire, replies: Vec<Reply>) -> MockLlm {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("mock: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("mock: local address");
        let shared = Arc::new(Shared {
            wire,
            replies: Mutex::new(replies.into()),
            pace: Mutex::new(Pace::default()),
            log: Mutex::new(Vec::new()),
            text_sent: Mutex::new(Vec::new()),
            keep_bodies: AtomicBool::new(true),
            arrived: Condvar::new(),
            stop: AtomicBool::new(false),
            connections: Mutex::new(Vec::new()),
            cache: Mutex::new(None),
            listed: Mutex::new(None),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name("mock-llm".into())
                .spawn(move || accept(&listener, &shared))
                .expect("mock: spawn the acceptor")
        };
        MockLlm {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// Writes every streamed body from now on at this pace.
    pub fn with_pace(self, pace: Pace) -> Self {
        *lock(&self.shared.pace) = pace;
        self
    }

    /// Answers Anthropic requests from now on with the usage a prompt cache gives: the longest
    /// prefix (tools, system, messages in order) ending at one of the request's `cache_control`
    /// blocks that an earlier request also marked is `cache_read_input_tokens`, the rest up to
    /// its last breakpoint `cache_creation_input_tokens`, what follows `input_tokens`; a token
    /// is 4 bytes of the prefix's JSON. The reply's own input count is then not used.
    pub fn with_cache(self) -> Self {
        *lock(&self.shared.cache) = Some(Default::default());
        self
    }

    /// Answers `GET /api/tags` from now on with these models, as an Ollama server lists the
    /// models it has pulled (the request is recorded and uses up no reply).
    pub fn with_models(self, names: &[&str]) -> Self {
        *lock(&self.shared.listed) = Some(names.iter().map(|n| n.to_string()).collect());
        self
    }

    /// Records requests from now on with a `Null` body (they are still read and answered as
    /// usual): for benches whose request bodies grow with the history, so that keeping them all
    /// does not weigh on what is measured.
    pub fn without_bodies(self) -> Self {
        self.shared.keep_bodies.store(false, Ordering::SeqCst);
        self
    }

    /// What the client is configured with: `http://127.0.0.1:PORT` for Anthropic (the client
    /// posts to `{base}/v1/messages`), `http://127.0.0.1:PORT/v1` for OpenAI (`{base}/chat/completions`).
    pub fn base_url(&self) -> String {
        match self.shared.wire {
            Wire::Anthropic => format!("http://{}", self.addr),
            // Ollama's base URLs usually name its OpenAI-compatible /v1, which the client drops.
            Wire::OpenAi | Wire::OpenAiOllamaStyle | Wire::Responses | Wire::Ollama => {
                format!("http://{}/v1", self.addr)
            }
        }
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.log).clone()
    }

    /// When each text delta of the [`Reply::Spread`] replies so far was written (just before its
    /// write), in order.
    pub fn text_sent(&self) -> Vec<Instant> {
        lock(&self.shared.text_sent).clone()
    }

    /// How many text deltas of [`Reply::Spread`] replies have gone out (cheaper than
    /// [`MockLlm::text_sent`] for polling).
    pub fn text_sent_count(&self) -> usize {
        lock(&self.shared.text_sent).len()
    }

    /// Waits until at least `n` requests have arrived and returns them all; panics, listing
    /// what did arrive, when `timeout` passes first.
    pub fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<Recorded> {
        let deadline = Instant::now() + timeout;
        let mut log = lock(&self.shared.log);
        while log.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let seen: Vec<String> = log
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.path))
                    .collect();
                panic!(
                    "mock: waited {timeout:?} for {n} requests, got {}: {seen:?}",
                    log.len()
                );
            }
            log = self
                .shared
                .arrived
                .wait_timeout(log, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        log.clone()
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // The acceptor blocks in accept(); one last connection wakes it to see `stop`.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let connections = std::mem::take(&mut *lock(&self.shared.connections));
        for (socket, thread) in connections {
            let _ = socket.shutdown(Shutdown::Both);
            let _ = thread.join();
        }
    }
}

/// Locks `mutex`, ignoring poisoning: a panicking test thread must not hide the mock's state.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let Ok(socket) = stream.try_clone() else {
            continue;
        };
        let thread = {
            let shared = Arc::clone(shared);
            thread::spawn(move || serve(&shared, stream))
        };
        lock(&shared.connections).push((socket, thread));
    }
}

/// Answers requests on one keep-alive connection until the client closes it or a reply cuts it.
fn serve(shared: &Shared, mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    loop {
        let keep_body = shared.keep_bodies.load(Ordering::SeqCst);
        let Ok(Some(request)) = read_request(&mut stream, &mut buf, keep_body) else {
            break;
        };
        let close = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        match answer(shared, &mut stream, request) {
            Ok(true) if !close => {}
            _ => break,
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

const MAX_HEAD: usize = 1 << 20;

/// Reads one request (head, then a `content-length` body) from `stream`, keeping whatever
/// follows it in `buf`; `None` when the client closed the connection between requests.
/// A chunked request body is not read (reqwest sends JSON with a length): its `body` is `Null`
/// and [`answer`] refuses it.
/// Unless `keep_body`, only the fields [`answer`] reads are kept from the body, and parsing skips
/// the rest without building it (a bench's bodies grow with the history).
fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    keep_body: bool,
) -> io::Result<Option<Recorded>> {
    let head_len = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::other("mock: request head too long"));
        }
        if !fill(stream, buf)? {
            return Ok(None);
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_len]).into_owned();
    buf.drain(..head_len);
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let path = request_line.next().unwrap_or_default().to_owned();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let mut request = Recorded {
        method,
        path,
        headers,
        body: Value::Null,
    };
    if request.header("transfer-encoding").is_some() {
        return Ok(Some(request));
    }
    if request
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let len = match request.header("content-length") {
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| io::Error::other("mock: bad content-length"))?,
        None => 0,
    };
    while buf.len() < len {
        if !fill(stream, buf)? {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    let body: Vec<u8> = buf.drain(..len).collect();
    request.body = if body.is_empty() {
        Value::Null
    } else if !keep_body {
        serde_json::from_slice::<Probe>(&body).map_or(
            Value::Null,
            |p| json!({"model": p.model, "stream": p.stream, "stream_options": p.stream_options}),
        )
    } else {
        serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
    };
    Ok(Some(request))
}

/// The fields of a request body that shape the answer.
#[derive(serde::Deserialize)]
struct Probe {
    #[serde(default)]
    model: Value,
    #[serde(default)]
    stream: Value,
    #[serde(default)]
    stream_options: Value,
}

/// Reads what is available into `buf`; false at end of stream.
fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<bool> {
    let mut chunk = [0u8; 8192];
    // A signal the test process gets (a child's SIGCHLD, a stop and continue) may interrupt the
    // read before anything arrived: that is no end of the stream, so read again.
    let n = loop {
        match stream.read(&mut chunk) {
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            other => break other?,
        }
    };
    buf.extend_from_slice(&chunk[..n]);
    Ok(n > 0)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Records `request` and writes the response; true when the connection may serve another.
fn answer(shared: &Shared, stream: &mut TcpStream, request: Recorded) -> io::Result<bool> {
    let wire = shared.wire;
    let endpoint = wire.endpoint();
    let routed = request.method == "POST" && request.path.split('?').next() == Some(endpoint);
    let chunked_body = request.header("transfer-encoding").is_some();
    let streaming = request.body.get("stream") == Some(&Value::Bool(true));
    let model = request
        .body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock-model")
        .to_owned();
    let include_usage =
        request.body.pointer("/stream_options/include_usage") == Some(&Value::Bool(true));
    let cached = lock(&shared.cache)
        .as_mut()
        .filter(|_| wire == Wire::Anthropic)
        .map(|seen| cache_usage(seen, &request.body));
    let target = format!("{} {}", request.method, request.path);
    let listing = request.method == "GET" && request.path == "/api/tags";
    let number = {
        let mut log = lock(&shared.log);
        if shared.keep_bodies.load(Ordering::SeqCst) {
            log.push(request);
        } else {
            log.push(Recorded {
                body: Value::Null,
                ..request
            });
        }
        shared.arrived.notify_all();
        log.len()
    };
    let sse = Sse {
        wire,
        number,
        model,
        include_usage,
        cached,
    };
    let refusal = |code, message: String| Reply::Status {
        code,
        message,
        retry_after: None,
    };
    if let Some(names) = lock(&shared.listed).clone().filter(|_| listing) {
        let models: Vec<Value> = names
            .iter()
            .map(|name| json!({"name": name, "model": name, "size": 1}))
            .collect();
        let body = json!({ "models": models }).to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(format!("{head}{body}").as_bytes())?;
        return Ok(true);
    }
    let reply = if chunked_body {
        refusal(
            400,
            "mock: chunked request bodies are not supported; send content-length".into(),
        )
    } else if !routed {
        refusal(
            404,
            format!("mock: no route for {target}; the client should POST {endpoint}"),
        )
    } else if !streaming {
        refusal(
            400,
            "mock: only streamed requests are scripted; send \"stream\": true".into(),
        )
    } else {
        lock(&shared.replies)
            .pop_front()
            .unwrap_or_else(|| refusal(500, "mock: no scripted reply left".into()))
    };
    match reply {
        Reply::Status {
            code,
            message,
            retry_after,
        } => {
            let body = wire.error_body(code, &message, number).to_string();
            let mut head = format!(
                "HTTP/1.1 {code} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}: req_mock_{number}\r\n",
                reason(code),
                body.len(),
                wire.request_id_header(),
            );
            if let Some(seconds) = retry_after {
                head.push_str(&format!("retry-after: {seconds}\r\n"));
            }
            head.push_str("\r\n");
            stream.write_all(format!("{head}{body}").as_bytes())?;
            Ok(!chunked_body)
        }
        Reply::Redirect { code, location } => {
            let head = format!(
                "HTTP/1.1 {code} {}\r\nlocation: {location}\r\ncontent-length: 0\r\n{}: req_mock_{number}\r\n\r\n",
                reason(code),
                wire.request_id_header(),
            );
            stream.write_all(head.as_bytes())?;
            Ok(true)
        }
        Reply::Turn { parts, usage } => {
            write_stream(
                shared,
                stream,
                number,
                sse.turn(&parts, usage).concat().as_bytes(),
                true,
            )?;
            Ok(true)
        }
        Reply::Limited { parts, usage } => {
            write_stream(
                shared,
                stream,
                number,
                sse.ending(&parts, usage, true).concat().as_bytes(),
                true,
            )?;
            Ok(true)
        }
        Reply::CutAfter { bytes, parts } => {
            let body = sse.turn(&parts, (0, 0)).concat();
            write_stream(
                shared,
                stream,
                number,
                &body.as_bytes()[..bytes.min(body.len())],
                false,
            )?;
            Ok(false)
        }
        Reply::StreamError { message, parts } => {
            write_stream(
                shared,
                stream,
                number,
                sse.error(&parts, &message).concat().as_bytes(),
                true,
            )?;
            Ok(true)
        }
        Reply::Failed { message } => {
            let body = match wire {
                Wire::Responses => sse.failed(&message),
                _ => sse.error(&[], &message),
            };
            write_stream(shared, stream, number, body.concat().as_bytes(), true)?;
            Ok(true)
        }
        Reply::Spread { parts, over } => {
            write_spread(shared, stream, number, &sse.turn(&parts, (0, 0)), over)?;
            Ok(true)
        }
    }
}

/// The head of a 200 event-stream response.
fn stream_head(shared: &Shared, number: usize) -> String {
    let kind = match shared.wire {
        Wire::Ollama => "application/x-ndjson",
        _ => "text/event-stream; charset=utf-8",
    };
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n{}: req_mock_{number}\r\n\r\n",
        shared.wire.request_id_header(),
    )
}

/// One HTTP chunk holding `piece`.
fn http_chunk(piece: &[u8]) -> Vec<u8> {
    let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
    chunk.extend_from_slice(piece);
    chunk.extend_from_slice(b"\r\n");
    chunk
}

/// Writes a [`Reply::Spread`]: each event its own HTTP chunk, text delta k due `k * over / n`
/// after the first; whatever is due goes out, then a short sleep.
fn write_spread(
    shared: &Shared,
    stream: &mut TcpStream,
    number: usize,
    events: &Events,
    over: Duration,
) -> io::Result<()> {
    stream.write_all(stream_head(shared, number).as_bytes())?;
    let deltas = events.0.iter().filter(|(_, text)| *text).count().max(1);
    let interval = over.div_f64(deltas as f64);
    let mut start = None;
    let mut k: u32 = 0;
    for (event, text) in &events.0 {
        if *text {
            let first = *start.get_or_insert_with(Instant::now);
            let due = first + interval * k;
            while Instant::now() < due {
                if shared.stop.load(Ordering::SeqCst) {
                    return Err(io::Error::other("mock: stopping"));
                }
                thread::sleep(Duration::from_micros(500).min(due - Instant::now()));
            }
            k += 1;
        }
        if *text {
            lock(&shared.text_sent).push(Instant::now());
        }
        stream.write_all(&http_chunk(event.as_bytes()))?;
    }
    stream.write_all(b"0\r\n\r\n")
}

/// Writes a 200 event-stream response: the head, `body` in HTTP chunks at the mock's pace, and
/// the terminating zero-length chunk when `terminate` (without it the client sees a cut body).
fn write_stream(
    shared: &Shared,
    stream: &mut TcpStream,
    number: usize,
    body: &[u8],
    terminate: bool,
) -> io::Result<()> {
    let pace = lock(&shared.pace).clone();
    stream.write_all(stream_head(shared, number).as_bytes())?;
    for piece in body.chunks(pace.chunk_bytes.unwrap_or(body.len()).max(1)) {
        pause(pace.delay, &shared.stop)?;
        stream.write_all(&http_chunk(piece))?;
    }
    if terminate {
        pause(pace.delay, &shared.stop)?;
        stream.write_all(b"0\r\n\r\n")?;
    }
    Ok(())
}

/// Sleeps `delay` in short steps, failing as soon as the mock is being dropped.
fn pause(delay: Duration, stop: &AtomicBool) -> io::Result<()> {
    let end = Instant::now() + delay;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Err(io::Error::other("mock: stopping"));
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        thread::sleep(left.min(Duration::from_millis(20)));
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        301 => "Moved Permanently",
        302 => "Found",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Error",
    }
}

impl Wire {
    /// The path the client must POST to.
    fn endpoint(self) -> &'static str {
        match self {
            Wire::Anthropic => "/v1/messages",
            Wire::OpenAi | Wire::OpenAiOllamaStyle => "/v1/chat/completions",
            Wire::Responses => "/v1/responses",
            Wire::Ollama => "/api/chat",
        }
    }

    fn request_id_header(self) -> &'static str {
        match self {
            Wire::Anthropic => "request-id",
            Wire::OpenAi | Wire::OpenAiOllamaStyle | Wire::Responses | Wire::Ollama => {
                "x-request-id"
            }
        }
    }

    /// The vendor's error body for an HTTP status (Anthropic: docs.claude.com/en/api/errors).
    fn error_body(self, code: u16, message: &str, number: usize) -> Value {
        match self {
            Wire::Anthropic => {
                let kind = match code {
                    401 => "authentication_error",
                    402 => "billing_error",
                    403 => "permission_error",
                    404 => "not_found_error",
                    413 => "request_too_large",
                    429 => "rate_limit_error",
                    529 => "overloaded_error",
                    500..=599 => "api_error",
                    _ => "invalid_request_error",
                };
                json!({"type": "error", "error": {"type": kind, "message": message},
                       "request_id": format!("req_mock_{number}")})
            }
            // Ollama's error is one string.
            Wire::Ollama => json!({"error": message}),
            Wire::OpenAi | Wire::OpenAiOllamaStyle | Wire::Responses => {
                let (kind, error_code) = match code {
                    401 => ("invalid_request_error", json!("invalid_api_key")),
                    429 => ("requests", json!("rate_limit_exceeded")),
                    500..=599 => ("server_error", Value::Null),
                    _ => ("invalid_request_error", Value::Null),
                };
                json!({"error": {"message": message, "type": kind, "param": null, "code": error_code}})
            }
        }
    }
}

/// A streamed body as its SSE events in order, each marked when it is a text delta.
#[derive(Default)]
struct Events(Vec<(String, bool)>);

impl Events {
    fn push(&mut self, event: String) {
        self.0.push((event, false));
    }

    fn push_text(&mut self, event: String) {
        self.0.push((event, true));
    }

    /// The whole body as one text.
    fn concat(&self) -> String {
        self.0.iter().map(|(event, _)| event.as_str()).collect()
    }
}

/// The streamed body of one response.
struct Sse {
    wire: Wire,
    number: usize,
    model: String,
    /// The request asked `stream_options.include_usage` (OpenAI sends usage only then).
    include_usage: bool,
    /// With [`MockLlm::with_cache`]: the input that was neither read nor written, read, written.
    cached: Option<(u64, u64, u64)>,
}

/// The usage a prompt cache gives `body` ([`MockLlm::with_cache`]), its breakpoints' prefixes
/// then remembered in `seen`.
fn cache_usage(seen: &mut std::collections::HashSet<u64>, body: &Value) -> (u64, u64, u64) {
    use std::hash::{Hash, Hasher};
    let mut blocks: Vec<&Value> = Vec::new();
    blocks.extend(body["tools"].as_array().into_iter().flatten());
    blocks.extend(body["system"].as_array().into_iter().flatten());
    for message in body["messages"].as_array().into_iter().flatten() {
        blocks.extend(message["content"].as_array().into_iter().flatten());
    }
    let (mut prefix, mut read, mut marked) = (String::new(), 0, 0);
    let mut hashes = Vec::new();
    for block in blocks {
        let mut plain = block.clone();
        if let Some(map) = plain.as_object_mut() {
            map.remove("cache_control");
        }
        prefix.push_str(&plain.to_string());
        if block.get("cache_control").is_some() {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            prefix.hash(&mut hasher);
            let hash = hasher.finish();
            let tokens = prefix.len() as u64 / 4;
            if seen.contains(&hash) {
                read = tokens;
            }
            marked = tokens;
            hashes.push(hash);
        }
    }
    seen.extend(hashes);
    let total = prefix.len() as u64 / 4;
    let written = marked.saturating_sub(read);
    (total - read - written, read, written)
}

/// A fixed `created` time, so that tests can compare whole chunks.
const CREATED: u64 = 1_700_000_000;

impl Sse {
    /// A whole response: the parts, then the stop with usage, then the end of the stream.
    fn turn(&self, parts: &[Part], usage: (u64, u64)) -> Events {
        self.ending(parts, usage, false)
    }

    /// [`Sse::turn`], stopped at the output limit when `limited`.
    fn ending(&self, parts: &[Part], (input, output): (u64, u64), limited: bool) -> Events {
        match self.wire {
            Wire::Responses if limited => {
                return self.responses(
                    parts,
                    Some((input, output)),
                    Some(("response.incomplete", "max_output_tokens")),
                )
            }
            Wire::Responses => return self.responses(parts, Some((input, output)), None),
            Wire::Ollama => {
                let reason = if limited { "length" } else { "stop" };
                return self.ollama(parts, Ok((input, output, reason)));
            }
            _ => {}
        }
        let mut body = self.opening(input, parts.is_empty());
        self.parts(parts, &mut body);
        let tools = parts.iter().any(|p| matches!(p, Part::ToolCall { .. }));
        match self.wire {
            Wire::Anthropic => {
                let stop = match (limited, tools) {
                    (true, _) => "max_tokens",
                    (false, true) => "tool_use",
                    (false, false) => "end_turn",
                };
                body.push(event(
                    "message_delta",
                    json!({"type": "message_delta",
                           "delta": {"stop_reason": stop, "stop_sequence": null},
                           "usage": {"output_tokens": output}}),
                ));
                body.push(event("message_stop", json!({"type": "message_stop"})));
            }
            Wire::OpenAi | Wire::OpenAiOllamaStyle => {
                let finish = match (limited, tools) {
                    (true, _) => "length",
                    (false, true) => "tool_calls",
                    (false, false) => "stop",
                };
                body.push(self.chunk(json!({}), json!(finish)));
                if self.include_usage {
                    let usage = json!({"prompt_tokens": input, "completion_tokens": output,
                                       "total_tokens": input + output});
                    body.push(data(self.envelope(json!([]), usage)));
                }
                body.push("data: [DONE]\n\n".into());
            }
            Wire::Responses | Wire::Ollama => {}
        }
        body
    }

    /// The first part, then the vendor's mid-stream error; the stream ends there.
    fn error(&self, parts: &[Part], message: &str) -> Events {
        let first = &parts[..parts.len().min(1)];
        match self.wire {
            Wire::Responses => return self.responses(first, None, Some(("error", message))),
            Wire::Ollama => return self.ollama(first, Err(message)),
            _ => {}
        }
        let mut body = self.opening(0, parts.is_empty());
        self.parts(&parts[..parts.len().min(1)], &mut body);
        match self.wire {
            Wire::Anthropic => {
                body.push(event(
                    "error",
                    json!({"type": "error", "error": {"type": "overloaded_error", "message": message}}),
                ));
            }
            Wire::OpenAi | Wire::OpenAiOllamaStyle => {
                body.push(data(
                    json!({"error": {"message": message, "type": "server_error",
                                               "param": null, "code": null}}),
                ));
            }
            Wire::Responses | Wire::Ollama => {}
        }
        body
    }

    /// A Responses stream that fails after it was created.
    fn failed(&self, message: &str) -> Events {
        self.responses(&[], None, Some(("response.failed", message)))
    }

    /// A Responses stream: `response.created`, each part as its output item's events, then
    /// `response.completed` with `usage`, or the `fault` event (`error`, `response.failed`).
    fn responses(
        &self,
        parts: &[Part],
        usage: Option<(u64, u64)>,
        fault: Option<(&str, &str)>,
    ) -> Events {
        let mut body = Events::default();
        let mut seq = 0u64;
        let mut push = |body: &mut Events, name: &str, mut v: Value, text: bool| {
            v["type"] = json!(name);
            v["sequence_number"] = json!(seq);
            seq += 1;
            let line = event(name, v);
            if text {
                body.push_text(line);
            } else {
                body.push(line);
            }
        };
        let id = format!("resp_mock_{}", self.number);
        let head = json!({"id": id, "object": "response", "status": "in_progress",
                          "model": self.model, "output": []});
        push(
            &mut body,
            "response.created",
            json!({"response": head}),
            false,
        );
        let mut output = Vec::new();
        for part in parts {
            let index = output.len();
            let (added, done) = match part {
                Part::Text(_) | Part::Deltas(_) => {
                    let item_id = format!("msg_mock_{}_{index}", self.number);
                    let text: Vec<&str> = match part {
                        Part::Deltas(d) => d.iter().map(String::as_str).collect(),
                        Part::Text(t) => pieces(t, 3),
                        _ => Vec::new(),
                    };
                    let whole: String = text.concat();
                    let added = json!({"id": item_id, "type": "message", "status": "in_progress",
                                       "role": "assistant", "content": []});
                    push(
                        &mut body,
                        "response.output_item.added",
                        json!({"output_index": index, "item": added}),
                        false,
                    );
                    for piece in &text {
                        push(
                            &mut body,
                            "response.output_text.delta",
                            json!({"item_id": item_id, "output_index": index,
                                    "content_index": 0, "delta": piece}),
                            true,
                        );
                    }
                    push(
                        &mut body,
                        "response.output_text.done",
                        json!({"item_id": item_id, "output_index": index,
                                "content_index": 0, "text": whole}),
                        false,
                    );
                    let done = json!({"id": item_id, "type": "message", "status": "completed",
                                      "role": "assistant", "content": [
                                          {"type": "output_text", "text": whole, "annotations": []}]});
                    (true, done)
                }
                Part::ToolCall {
                    id: call_id,
                    name,
                    args,
                } => {
                    let item_id = format!("fc_mock_{}_{index}", self.number);
                    let added = json!({"id": item_id, "type": "function_call",
                                       "status": "in_progress", "call_id": call_id,
                                       "name": name, "arguments": ""});
                    push(
                        &mut body,
                        "response.output_item.added",
                        json!({"output_index": index, "item": added}),
                        false,
                    );
                    for piece in pieces(args, 4) {
                        push(
                            &mut body,
                            "response.function_call_arguments.delta",
                            json!({"item_id": item_id, "output_index": index, "delta": piece}),
                            false,
                        );
                    }
                    push(
                        &mut body,
                        "response.function_call_arguments.done",
                        json!({"item_id": item_id, "output_index": index, "arguments": args}),
                        false,
                    );
                    let done = json!({"id": item_id, "type": "function_call",
                                      "status": "completed", "call_id": call_id,
                                      "name": name, "arguments": args});
                    (true, done)
                }
                Part::Reasoning {
                    id: item_id,
                    summary,
                    encrypted,
                } => {
                    let added = json!({"id": item_id, "type": "reasoning", "summary": []});
                    push(
                        &mut body,
                        "response.output_item.added",
                        json!({"output_index": index, "item": added}),
                        false,
                    );
                    for piece in pieces(summary, 3) {
                        push(
                            &mut body,
                            "response.reasoning_summary_text.delta",
                            json!({"item_id": item_id, "output_index": index,
                                    "summary_index": 0, "delta": piece}),
                            false,
                        );
                    }
                    let done = json!({"id": item_id, "type": "reasoning",
                                      "summary": [{"type": "summary_text", "text": summary}],
                                      "encrypted_content": encrypted});
                    (true, done)
                }
                Part::Thinking { .. } | Part::Redacted { .. } => (false, Value::Null),
            };
            if added {
                push(
                    &mut body,
                    "response.output_item.done",
                    json!({"output_index": index, "item": done}),
                    false,
                );
                output.push(done);
            }
        }
        match (fault, usage) {
            (Some(("response.incomplete", reason)), usage) => {
                let response = json!({"id": id, "object": "response", "status": "incomplete",
                    "model": self.model, "output": output, "usage": responses_usage(usage),
                    "incomplete_details": {"reason": reason}});
                push(
                    &mut body,
                    "response.incomplete",
                    json!({"response": response}),
                    false,
                );
            }
            (Some(("response.failed", message)), _) => {
                let response = json!({"id": id, "object": "response", "status": "failed",
                    "model": self.model, "output": output,
                    "error": {"code": "server_error", "message": message}});
                push(
                    &mut body,
                    "response.failed",
                    json!({"response": response}),
                    false,
                );
            }
            (Some((_, message)), _) => {
                push(
                    &mut body,
                    "error",
                    json!({"code": "server_error", "message": message, "param": null}),
                    false,
                );
            }
            (None, usage) => {
                let response = json!({"id": id, "object": "response", "status": "completed",
                    "model": self.model, "output": output, "usage": responses_usage(usage)});
                push(
                    &mut body,
                    "response.completed",
                    json!({"response": response}),
                    false,
                );
            }
        }
        body
    }

    /// An Ollama stream: one line a text piece, a thought, or a whole tool call, then the
    /// `"done": true` line with the counts, or the error line.
    fn ollama(&self, parts: &[Part], end: Result<(u64, u64, &str), &str>) -> Events {
        let mut body = Events::default();
        let line = |message: Value| {
            format!(
                "{}\n",
                json!({"model": self.model, "created_at": "2025-01-01T00:00:00Z",
                                    "message": message, "done": false})
            )
        };
        for part in parts {
            match part {
                Part::Text(text) => {
                    for piece in pieces(text, 3) {
                        body.push_text(line(json!({"role": "assistant", "content": piece})));
                    }
                }
                Part::Deltas(deltas) => {
                    for piece in deltas {
                        body.push_text(line(json!({"role": "assistant", "content": piece})));
                    }
                }
                Part::ToolCall { name, args, .. } => {
                    let arguments = serde_json::from_str::<Value>(args)
                        .unwrap_or_else(|_| Value::String(args.clone()));
                    body.push(line(json!({"role": "assistant", "content": "",
                        "tool_calls": [{"function": {"name": name, "arguments": arguments}}]})));
                }
                Part::Thinking { text, .. } => {
                    body.push(line(
                        json!({"role": "assistant", "content": "", "thinking": text}),
                    ));
                }
                Part::Redacted { .. } | Part::Reasoning { .. } => {}
            }
        }
        match end {
            Ok((input, output, reason)) => body.push(format!(
                "{}\n",
                json!({"model": self.model,
                "created_at": "2025-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": ""}, "done": true,
                "done_reason": reason, "total_duration": 1000, "prompt_eval_count": input,
                "eval_count": output})
            )),
            Err(message) => body.push(format!("{}\n", json!({"error": message}))),
        }
        body
    }

    /// Anthropic `message_start` (and a `ping` if no block will carry one); OpenAI's first chunk
    /// with the role (Ollama has none: its every chunk carries the role).
    fn opening_usage(&self, input: u64) -> Value {
        match self.cached {
            Some((input, read, written)) => json!({"input_tokens": input,
                "cache_read_input_tokens": read, "cache_creation_input_tokens": written,
                "output_tokens": 1}),
            None => json!({"input_tokens": input, "output_tokens": 1}),
        }
    }

    fn opening(&self, input: u64, no_parts: bool) -> Events {
        let mut body = Events::default();
        match self.wire {
            Wire::Anthropic => {
                body.push(event(
                    "message_start",
                    json!({"type": "message_start", "message": {
                        "id": format!("msg_mock_{}", self.number), "type": "message",
                        "role": "assistant", "model": self.model, "content": [],
                        "stop_reason": null, "stop_sequence": null,
                        "usage": self.opening_usage(input)}}),
                ));
                if no_parts {
                    body.push(event("ping", json!({"type": "ping"})));
                }
            }
            Wire::OpenAi => {
                body.push(self.chunk(json!({"role": "assistant", "content": ""}), Value::Null));
            }
            Wire::OpenAiOllamaStyle | Wire::Responses | Wire::Ollama => {}
        }
        body
    }

    /// Each part as its deltas: text in up to 3 pieces (or the given ones), tool arguments in up
    /// to 4 fragments.
    fn parts(&self, parts: &[Part], body: &mut Events) {
        let mut tool_index = 0;
        for (index, part) in parts.iter().enumerate() {
            let text: Vec<&str> = match part {
                Part::Text(text) => pieces(text, 3),
                Part::Deltas(deltas) => deltas.iter().map(String::as_str).collect(),
                _ => Vec::new(),
            };
            match (self.wire, part) {
                (Wire::Anthropic, Part::Text(_) | Part::Deltas(_)) => {
                    block_start(body, index, json!({"type": "text", "text": ""}));
                    for piece in text {
                        body.push_text(delta(index, json!({"type": "text_delta", "text": piece})));
                    }
                    body.push(block_stop(index));
                }
                (Wire::Anthropic, Part::ToolCall { id, name, args }) => {
                    block_start(
                        body,
                        index,
                        json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    );
                    // The API opens every tool input with an empty fragment.
                    for piece in std::iter::once("").chain(pieces(args, 4)) {
                        body.push(delta(
                            index,
                            json!({"type": "input_json_delta", "partial_json": piece}),
                        ));
                    }
                    body.push(block_stop(index));
                }
                (Wire::OpenAi, Part::Text(_) | Part::Deltas(_)) => {
                    for piece in text {
                        body.push_text(self.chunk(json!({"content": piece}), Value::Null));
                    }
                }
                (Wire::OpenAiOllamaStyle, Part::Text(_) | Part::Deltas(_)) => {
                    for piece in text {
                        let delta = json!({"role": "assistant", "content": piece});
                        body.push_text(self.chunk(delta, Value::Null));
                    }
                }
                (Wire::OpenAi, Part::ToolCall { id, name, args }) => {
                    let first = json!({"tool_calls": [{"index": tool_index, "id": id, "type": "function",
                                                      "function": {"name": name, "arguments": ""}}]});
                    body.push(self.chunk(first, Value::Null));
                    for piece in pieces(args, 4) {
                        let more = json!({"tool_calls": [{"index": tool_index,
                                                          "function": {"arguments": piece}}]});
                        body.push(self.chunk(more, Value::Null));
                    }
                    tool_index += 1;
                }
                (Wire::OpenAiOllamaStyle, Part::ToolCall { id, name, args }) => {
                    let whole = json!({"role": "assistant", "content": "",
                                       "tool_calls": [{"index": 0, "id": id, "type": "function",
                                                       "function": {"name": name, "arguments": args}}]});
                    body.push(self.chunk(whole, Value::Null));
                }
                (Wire::Anthropic, Part::Thinking { text, signature }) => {
                    block_start(
                        body,
                        index,
                        json!({"type": "thinking", "thinking": "", "signature": ""}),
                    );
                    for piece in pieces(text, 3) {
                        body.push(delta(
                            index,
                            json!({"type": "thinking_delta", "thinking": piece}),
                        ));
                    }
                    body.push(delta(
                        index,
                        json!({"type": "signature_delta", "signature": signature}),
                    ));
                    body.push(block_stop(index));
                }
                (Wire::Anthropic, Part::Redacted { data }) => {
                    block_start(
                        body,
                        index,
                        json!({"type": "redacted_thinking", "data": data}),
                    );
                    body.push(block_stop(index));
                }
                // Not part of these wires (Responses and Ollama have their own writers).
                (_, Part::Thinking { .. } | Part::Redacted { .. } | Part::Reasoning { .. })
                | (Wire::Responses | Wire::Ollama, _) => {}
            }
        }
    }

    /// One `chat.completion.chunk` with a single choice.
    fn chunk(&self, delta: Value, finish_reason: Value) -> String {
        let choice =
            json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason});
        data(self.envelope(json!([choice]), Value::Null))
    }

    /// The fields every chunk has; `usage` only when the request asked for it.
    fn envelope(&self, choices: Value, usage: Value) -> Value {
        let fingerprint = match self.wire {
            Wire::OpenAiOllamaStyle => json!("fp_ollama"),
            Wire::Anthropic | Wire::OpenAi | Wire::Responses | Wire::Ollama => Value::Null,
        };
        let mut chunk = json!({"id": format!("chatcmpl-mock-{}", self.number),
                               "object": "chat.completion.chunk", "created": CREATED,
                               "model": self.model, "system_fingerprint": fingerprint,
                               "choices": choices});
        if self.include_usage {
            chunk["usage"] = usage;
        }
        chunk
    }
}

/// A Responses `usage` object for (input, output) tokens (none: zero).
fn responses_usage(usage: Option<(u64, u64)>) -> Value {
    let (input, out) = usage.unwrap_or_default();
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
           "output_tokens": out, "output_tokens_details": {"reasoning_tokens": 0},
           "total_tokens": input + out})
}

fn event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn data(data: Value) -> String {
    format!("data: {data}\n\n")
}

fn delta(index: usize, delta: Value) -> String {
    event(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

/// A `content_block_start`; the first block is followed by a `ping`, as the API does.
fn block_start(body: &mut Events, index: usize, block: Value) {
    body.push(event(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": block}),
    ));
    if index == 0 {
        body.push(event("ping", json!({"type": "ping"})));
    }
}

fn block_stop(index: usize) -> String {
    event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    )
}

/// `text` cut at character boundaries into at most `n` pieces of equal length in characters
/// (the last shorter); none for empty text.
fn pieces(text: &str, n: usize) -> Vec<&str> {
    let starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let size = starts.len().div_ceil(n).max(1);
    (0..starts.len())
        .step_by(size)
        .map(|k| &text[starts[k]..starts.get(k + size).copied().unwrap_or(text.len())])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One HTTP response as a raw client read it.
    #[derive(Debug)]
    struct Response {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        /// The size of each HTTP chunk of a chunked body.
        chunks: Vec<usize>,
        /// A chunked body ended with its zero-length chunk (a length-delimited one is always complete).
        complete: bool,
    }

    fn connect(mock: &MockLlm) -> TcpStream {
        let stream = TcpStream::connect(mock.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
    }

    fn send(stream: &mut TcpStream, path: &str, headers: &[(&str, &str)], body: &Value) {
        let body = body.to_string();
        let mut request = format!("POST {path} HTTP/1.1\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
        stream.write_all(request.as_bytes()).unwrap();
    }

    /// Reads one response; `buf` keeps what was read beyond it.
    fn receive(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Response {
        let head_len = loop {
            if let Some(i) = find(buf, b"\r\n\r\n") {
                break i + 4;
            }
            assert!(
                fill(stream, buf).unwrap(),
                "connection closed before a response head"
            );
        };
        let head = String::from_utf8(buf.drain(..head_len).collect()).unwrap();
        let mut lines = head.trim_end().split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .map(|l| l.split_once(": ").unwrap())
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect();
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let mut response = Response {
            status,
            headers: headers.clone(),
            body: Vec::new(),
            chunks: Vec::new(),
            complete: true,
        };
        if let Some(len) = header("content-length") {
            let len: usize = len.parse().unwrap();
            while buf.len() < len {
                assert!(
                    fill(stream, buf).unwrap(),
                    "connection closed inside a body"
                );
            }
            response.body = buf.drain(..len).collect();
            return response;
        }
        assert_eq!(header("transfer-encoding").as_deref(), Some("chunked"));
        loop {
            let line_end = loop {
                if let Some(i) = find(buf, b"\r\n") {
                    break i;
                }
                if !fill(stream, buf).unwrap() {
                    response.complete = false;
                    return response;
                }
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[..line_end]).unwrap(), 16).unwrap();
            while buf.len() < line_end + 2 + size + 2 {
                if !fill(stream, buf).unwrap() {
                    response.complete = false;
                    return response;
                }
            }
            let chunk: Vec<u8> = buf.drain(..line_end + 2 + size + 2).collect();
            if size == 0 {
                return response;
            }
            response
                .body
                .extend_from_slice(&chunk[line_end + 2..line_end + 2 + size]);
            response.chunks.push(size);
        }
    }

    /// Posts `body` on a new connection and reads the one response.
    fn post(mock: &MockLlm, path: &str, body: &Value) -> Response {
        let mut stream = connect(mock);
        send(&mut stream, path, &[("host", "127.0.0.1")], body);
        receive(&mut stream, &mut Vec::new())
    }

    /// The events of an SSE body: (event name or "", data as JSON, or as a string when not JSON).
    fn sse(body: &[u8]) -> Vec<(String, Value)> {
        let text = std::str::from_utf8(body).unwrap();
        assert!(text.ends_with("\n\n"), "SSE body ends mid-event: {text:?}");
        text.split_terminator("\n\n")
            .map(|block| {
                let (mut name, mut data) = (String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        name = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data = v.to_owned();
                    } else {
                        panic!("not an SSE field: {line:?}");
                    }
                }
                let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                (name, data)
            })
            .collect()
    }

    fn text(s: &str) -> Part {
        Part::Text(s.into())
    }

    fn tool(id: &str, name: &str, args: &str) -> Part {
        Part::ToolCall {
            id: id.into(),
            name: name.into(),
            args: args.into(),
        }
    }

    fn header_pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn anthropic_request() -> Value {
        json!({"model": "claude-test", "max_tokens": 100, "stream": true,
               "messages": [{"role": "user", "content": "hi"}]})
    }

    fn openai_request(include_usage: bool) -> Value {
        json!({"model": "gpt-test", "stream": true, "stream_options": {"include_usage": include_usage},
               "messages": [{"role": "user", "content": "hi"}]})
    }

    #[test]
    fn mock_records_each_request_with_lowercased_header_names_and_its_json_body() {
        let mock = MockLlm::start(
            Wire::Anthropic,
            vec![Reply::Turn {
                parts: vec![text("hi")],
                usage: (1, 1),
            }],
        );
        assert_eq!(
            mock.base_url(),
            format!("http://127.0.0.1:{}", mock.addr.port())
        );
        let mut stream = connect(&mock);
        let headers = [
            ("Host", "127.0.0.1"),
            ("X-Api-Key", "sk-test"),
            ("anthropic-version", "2023-06-01"),
        ];
        send(&mut stream, "/v1/messages", &headers, &anthropic_request());
        assert_eq!(receive(&mut stream, &mut Vec::new()).status, 200);

        let content_length = anthropic_request().to_string().len().to_string();
        let expected = Recorded {
            method: "POST".into(),
            path: "/v1/messages".into(),
            headers: header_pairs(&[
                ("host", "127.0.0.1"),
                ("x-api-key", "sk-test"),
                ("anthropic-version", "2023-06-01"),
                ("content-length", &content_length),
            ]),
            body: anthropic_request(),
        };
        assert_eq!(mock.requests(), vec![expected]);
        assert_eq!(mock.requests()[0].header("X-API-KEY"), Some("sk-test"));
        assert_eq!(mock.requests()[0].header("authorization"), None);
    }

    #[test]
    fn mock_anthropic_stream_sent_one_byte_a_chunk_reassembles_into_the_vendor_events() {
        let reply = || Reply::Turn {
            parts: vec![
                text("héllo ✓ wörld"),
                tool("toolu_1", "read", r#"{"path":"a.rs"}"#),
            ],
            usage: (12, 34),
        };
        let whole = MockLlm::start(Wire::Anthropic, vec![reply()]);
        let bytewise = MockLlm::start(Wire::Anthropic, vec![reply()]).with_pace(Pace {
            chunk_bytes: Some(1),
            delay: Duration::ZERO,
        });
        let at_once = post(&whole, "/v1/messages", &anthropic_request());
        let split = post(&bytewise, "/v1/messages", &anthropic_request());

        assert_eq!(split.status, 200);
        assert_eq!(
            split.headers,
            header_pairs(&[
                ("content-type", "text/event-stream; charset=utf-8"),
                ("cache-control", "no-cache"),
                ("transfer-encoding", "chunked"),
                ("request-id", "req_mock_1"),
            ])
        );
        assert!(split.complete && at_once.complete);
        assert_eq!(split.chunks, vec![1; at_once.body.len()]);
        assert_eq!(at_once.chunks, vec![at_once.body.len()]);
        assert_eq!(split.body, at_once.body);

        let ev = |name: &str, data: Value| (name.to_owned(), data);
        let text_delta = |t: &str| {
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                                              "delta": {"type": "text_delta", "text": t}}),
            )
        };
        let json_delta = |j: &str| {
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1,
                                              "delta": {"type": "input_json_delta", "partial_json": j}}),
            )
        };
        assert_eq!(
            sse(&split.body),
            vec![
                ev(
                    "message_start",
                    json!({"type": "message_start", "message": {
                    "id": "msg_mock_1", "type": "message", "role": "assistant", "model": "claude-test",
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": 12, "output_tokens": 1}}})
                ),
                ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0,
                                                  "content_block": {"type": "text", "text": ""}})
                ),
                ev("ping", json!({"type": "ping"})),
                text_delta("héllo"),
                text_delta(" ✓ wö"),
                text_delta("rld"),
                ev(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 0})
                ),
                ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 1,
                    "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}})
                ),
                json_delta(""),
                json_delta(r#"{"pa"#),
                json_delta(r#"th":"#),
                json_delta(r#""a.r"#),
                json_delta(r#"s"}"#),
                ev(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 1})
                ),
                ev(
                    "message_delta",
                    json!({"type": "message_delta",
                                            "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                                            "usage": {"output_tokens": 34}})
                ),
                ev("message_stop", json!({"type": "message_stop"})),
            ]
        );
    }

    /// An OpenAI chunk as the tests expect it, `usage: null` included.
    fn openai_chunk(delta: Value, finish_reason: Value) -> (String, Value) {
        (
            String::new(),
            json!({"id": "chatcmpl-mock-1", "object": "chat.completion.chunk", "created": CREATED,
                   "model": "gpt-test", "system_fingerprint": null, "usage": null,
                   "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}]}),
        )
    }

    #[test]
    fn mock_openai_stream_sent_one_byte_a_chunk_reassembles_into_the_vendor_chunks() {
        let reply = || Reply::Turn {
            parts: vec![
                text("ça va"),
                tool("call_a", "read", r#"{"path":"a"}"#),
                tool("call_b", "list", "{}"),
            ],
            usage: (7, 9),
        };
        let whole = MockLlm::start(Wire::OpenAi, vec![reply()]);
        let bytewise = MockLlm::start(Wire::OpenAi, vec![reply()]).with_pace(Pace {
            chunk_bytes: Some(1),
            delay: Duration::ZERO,
        });
        assert_eq!(
            whole.base_url(),
            format!("http://127.0.0.1:{}/v1", whole.addr.port())
        );
        let at_once = post(&whole, "/v1/chat/completions", &openai_request(true));
        let split = post(&bytewise, "/v1/chat/completions", &openai_request(true));

        assert_eq!(
            split.headers,
            header_pairs(&[
                ("content-type", "text/event-stream; charset=utf-8"),
                ("cache-control", "no-cache"),
                ("transfer-encoding", "chunked"),
                ("x-request-id", "req_mock_1"),
            ])
        );
        assert!(split.complete);
        assert_eq!(split.chunks, vec![1; at_once.body.len()]);
        assert_eq!(split.body, at_once.body);

        let args = |index: u64, fragment: &str| {
            openai_chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}),
                Value::Null,
            )
        };
        assert_eq!(
            sse(&split.body),
            vec![
                openai_chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                openai_chunk(json!({"content": "ça"}), Value::Null),
                openai_chunk(json!({"content": " v"}), Value::Null),
                openai_chunk(json!({"content": "a"}), Value::Null),
                openai_chunk(
                    json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                           "function": {"name": "read", "arguments": ""}}]}),
                    Value::Null
                ),
                args(0, r#"{"p"#),
                args(0, "ath"),
                args(0, r#"":""#),
                args(0, r#"a"}"#),
                openai_chunk(
                    json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                           "function": {"name": "list", "arguments": ""}}]}),
                    Value::Null
                ),
                args(1, "{"),
                args(1, "}"),
                openai_chunk(json!({}), json!("tool_calls")),
                (
                    String::new(),
                    json!({"id": "chatcmpl-mock-1", "object": "chat.completion.chunk", "created": CREATED,
                           "model": "gpt-test", "system_fingerprint": null, "choices": [],
                           "usage": {"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16}})
                ),
                (String::new(), json!("[DONE]")),
            ]
        );
    }

    #[test]
    fn mock_openai_stream_has_no_usage_unless_the_request_asks_for_it() {
        let mock = MockLlm::start(
            Wire::OpenAi,
            vec![Reply::Turn {
                parts: vec![text("ok")],
                usage: (3, 4),
            }],
        );
        let response = post(&mock, "/v1/chat/completions", &openai_request(false));
        let without_usage = |(name, mut data): (String, Value)| {
            data.as_object_mut().map(|o| o.remove("usage"));
            (name, data)
        };
        assert_eq!(
            sse(&response.body),
            vec![
                without_usage(openai_chunk(
                    json!({"role": "assistant", "content": ""}),
                    Value::Null
                )),
                without_usage(openai_chunk(json!({"content": "o"}), Value::Null)),
                without_usage(openai_chunk(json!({"content": "k"}), Value::Null)),
                without_usage(openai_chunk(json!({}), json!("stop"))),
                (String::new(), json!("[DONE]")),
            ]
        );
    }

    #[test]
    fn mock_ollama_style_sends_each_tool_call_whole_and_every_one_at_index_0() {
        let mock = MockLlm::start(
            Wire::OpenAiOllamaStyle,
            vec![Reply::Turn {
                parts: vec![
                    text("hm"),
                    tool("call_1", "read", r#"{"path":"a"}"#),
                    tool("call_2", "read", r#"{"path":"b"}"#),
                ],
                usage: (5, 6),
            }],
        );
        let response = post(&mock, "/v1/chat/completions", &openai_request(true));
        let chunk = |delta: Value, finish: Value| {
            (
                String::new(),
                json!({"id": "chatcmpl-mock-1", "object": "chat.completion.chunk", "created": CREATED,
                       "model": "gpt-test", "system_fingerprint": "fp_ollama", "usage": null,
                       "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]}),
            )
        };
        let call = |id: &str, args: &str| {
            chunk(
                json!({"role": "assistant", "content": "", "tool_calls": [{"index": 0, "id": id, "type": "function",
                                                                            "function": {"name": "read", "arguments": args}}]}),
                Value::Null,
            )
        };
        assert_eq!(
            sse(&response.body),
            vec![
                chunk(json!({"role": "assistant", "content": "h"}), Value::Null),
                chunk(json!({"role": "assistant", "content": "m"}), Value::Null),
                call("call_1", r#"{"path":"a"}"#),
                call("call_2", r#"{"path":"b"}"#),
                chunk(json!({}), json!("tool_calls")),
                (
                    String::new(),
                    json!({"id": "chatcmpl-mock-1", "object": "chat.completion.chunk", "created": CREATED,
                           "model": "gpt-test", "system_fingerprint": "fp_ollama", "choices": [],
                           "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}})
                ),
                (String::new(), json!("[DONE]")),
            ]
        );
    }

    #[test]
    fn mock_status_reply_carries_the_vendor_error_body_request_id_and_retry_after() {
        let overloaded = Reply::Status {
            code: 529,
            message: "Overloaded".into(),
            retry_after: Some(3),
        };
        let anthropic = MockLlm::start(Wire::Anthropic, vec![overloaded]);
        let response = post(&anthropic, "/v1/messages", &anthropic_request());
        assert_eq!(response.status, 529);
        let body_len = response.body.len().to_string();
        assert_eq!(
            response.headers,
            header_pairs(&[
                ("content-type", "application/json"),
                ("content-length", &body_len),
                ("request-id", "req_mock_1"),
                ("retry-after", "3"),
            ])
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&response.body).unwrap(),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"},
                   "request_id": "req_mock_1"})
        );

        let limited = Reply::Status {
            code: 429,
            message: "Rate limit reached".into(),
            retry_after: None,
        };
        let openai = MockLlm::start(Wire::OpenAi, vec![limited]);
        let response = post(&openai, "/v1/chat/completions", &openai_request(true));
        assert_eq!(response.status, 429);
        let body_len = response.body.len().to_string();
        assert_eq!(
            response.headers,
            header_pairs(&[
                ("content-type", "application/json"),
                ("content-length", &body_len),
                ("x-request-id", "req_mock_1"),
            ])
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&response.body).unwrap(),
            json!({"error": {"message": "Rate limit reached", "type": "requests", "param": null,
                             "code": "rate_limit_exceeded"}})
        );
    }

    #[test]
    fn mock_cut_after_closes_the_connection_without_the_chunked_terminator() {
        let parts = || vec![text("a long enough answer"), tool("toolu_9", "read", "{}")];
        let full = MockLlm::start(
            Wire::Anthropic,
            vec![Reply::Turn {
                parts: parts(),
                usage: (0, 0),
            }],
        );
        let full = post(&full, "/v1/messages", &anthropic_request()).body;
        let cut = MockLlm::start(
            Wire::Anthropic,
            vec![Reply::CutAfter {
                bytes: 300,
                parts: parts(),
            }],
        );
        let mut stream = connect(&cut);
        send(
            &mut stream,
            "/v1/messages",
            &[("host", "127.0.0.1")],
            &anthropic_request(),
        );
        let mut buf = Vec::new();
        let response = receive(&mut stream, &mut buf);
        assert_eq!(response.status, 200);
        assert!(!response.complete);
        assert_eq!(response.body, full[..300]);
        assert_eq!(
            (stream.read(&mut [0u8; 16]).unwrap(), buf.len()),
            (0, 0),
            "the socket is closed"
        );
    }

    #[test]
    fn mock_stream_error_sends_the_vendor_error_event_after_the_first_part() {
        let reply = || Reply::StreamError {
            message: "Overloaded".into(),
            parts: vec![text("abc"), text("never sent")],
        };
        let anthropic = MockLlm::start(Wire::Anthropic, vec![reply()]);
        let response = post(&anthropic, "/v1/messages", &anthropic_request());
        assert!(response.complete);
        let events = sse(&response.body);
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "error"
            ]
        );
        assert_eq!(
            events[7].1,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        );

        let openai = MockLlm::start(Wire::OpenAi, vec![reply()]);
        let response = post(&openai, "/v1/chat/completions", &openai_request(true));
        assert!(response.complete);
        let events = sse(&response.body);
        assert_eq!(
            events.len(),
            5,
            "role, three text pieces, the error: {events:?}"
        );
        assert_eq!(
            events[4],
            (
                String::new(),
                json!({"error": {"message": "Overloaded", "type": "server_error", "param": null, "code": null}})
            )
        );
    }

    #[test]
    fn mock_out_of_replies_answers_500_saying_so() {
        let mock = MockLlm::start(Wire::OpenAi, vec![]);
        let response = post(&mock, "/v1/chat/completions", &openai_request(true));
        assert_eq!(response.status, 500);
        assert_eq!(
            serde_json::from_slice::<Value>(&response.body).unwrap(),
            json!({"error": {"message": "mock: no scripted reply left", "type": "server_error", "param": null, "code": null}})
        );
    }

    #[test]
    fn mock_refuses_a_wrong_path_or_an_unstreamed_request_without_using_up_a_reply() {
        let mock = MockLlm::start(
            Wire::Anthropic,
            vec![Reply::Turn {
                parts: vec![text("hi")],
                usage: (1, 1),
            }],
        );
        let wrong_path = post(&mock, "/v1/v1/messages", &anthropic_request());
        assert_eq!(wrong_path.status, 404);
        assert_eq!(
            serde_json::from_slice::<Value>(&wrong_path.body).unwrap(),
            json!({"type": "error", "request_id": "req_mock_1", "error": {"type": "not_found_error",
                   "message": "mock: no route for POST /v1/v1/messages; the client should POST /v1/messages"}})
        );
        let unstreamed = post(
            &mock,
            "/v1/messages",
            &json!({"model": "claude-test", "messages": []}),
        );
        assert_eq!(unstreamed.status, 400);
        assert_eq!(
            post(&mock, "/v1/messages", &anthropic_request()).status,
            200
        );
        let paths: Vec<String> = mock.requests().into_iter().map(|r| r.path).collect();
        assert_eq!(paths, ["/v1/v1/messages", "/v1/messages", "/v1/messages"]);
    }

    #[test]
    fn mock_serves_several_requests_on_one_keep_alive_connection_at_its_pace() {
        let replies = vec![
            Reply::Turn {
                parts: vec![text("one")],
                usage: (1, 1),
            },
            Reply::Status {
                code: 503,
                message: "busy".into(),
                retry_after: Some(1),
            },
            Reply::Turn {
                parts: vec![text("three")],
                usage: (1, 1),
            },
        ];
        let delay = Duration::from_millis(5);
        let mock = MockLlm::start(Wire::OpenAi, replies).with_pace(Pace {
            chunk_bytes: Some(64),
            delay,
        });
        let (client, started) = {
            let mut stream = connect(&mock);
            let started = Instant::now();
            let client = thread::spawn(move || {
                let mut buf = Vec::new();
                (0..3)
                    .map(|_| {
                        send(
                            &mut stream,
                            "/v1/chat/completions",
                            &[("host", "127.0.0.1")],
                            &openai_request(true),
                        );
                        receive(&mut stream, &mut buf)
                    })
                    .collect::<Vec<Response>>()
            });
            (client, started)
        };
        assert_eq!(mock.wait_for_requests(3, Duration::from_secs(10)).len(), 3);
        let responses = client.join().unwrap();
        let statuses: Vec<u16> = responses.iter().map(|r| r.status).collect();
        assert_eq!(statuses, [200, 503, 200]);
        assert!(responses.iter().all(|r| r.complete));
        let writes = responses[0].chunks.len() + 1 + responses[2].chunks.len() + 1;
        assert!(responses[0].chunks.iter().all(|&n| n <= 64));
        assert!(
            started.elapsed() >= delay * writes as u32,
            "a delay before every write"
        );
    }

    #[test]
    fn mock_stops_listening_when_dropped() {
        let mock = MockLlm::start(Wire::Anthropic, vec![]);
        let idle = connect(&mock);
        drop(mock);
        let mut idle = idle;
        assert_eq!(
            idle.read(&mut [0u8; 1]).unwrap(),
            0,
            "open connections are closed"
        );
        // Dropping joined the acceptor thread, which owned the listener, so the port is closed.
        // A connect to it is not asserted to fail: a test running in parallel may have been
        // given the same port by the kernel since.
    }

    /// A spread reply: given deltas each in its own event and HTTP chunk, delta k no sooner than
    /// k intervals after the first, and the send times recorded; the same deltas on both wires.
    #[test]
    fn spread_sends_each_delta_in_its_own_chunk_on_schedule() {
        let deltas: Vec<String> = (0..5).map(|i| format!("d{i}\n")).collect();
        let over = Duration::from_millis(100);
        for wire in [Wire::Anthropic, Wire::OpenAi] {
            let reply = Reply::Spread {
                parts: vec![Part::Deltas(deltas.clone())],
                over,
            };
            let mock = MockLlm::start(wire, vec![reply]);
            let path = wire.endpoint();
            let response = post(&mock, path, &json!({"model": "m", "stream": true}));
            assert_eq!(response.status, 200);
            assert!(response.complete);
            let events = sse(&response.body);
            assert_eq!(response.chunks.len(), events.len(), "{events:?}");
            let texts: Vec<String> = events
                .iter()
                .filter_map(|(_, data)| {
                    data.pointer("/delta/text")
                        .or_else(|| data.pointer("/choices/0/delta/content"))
                        .and_then(Value::as_str)
                        .filter(|t| !t.is_empty())
                        .map(str::to_owned)
                })
                .collect();
            assert_eq!(texts, deltas);
            let sent = mock.text_sent();
            assert_eq!(sent.len(), deltas.len());
            for (k, at) in sent.iter().enumerate() {
                assert!(*at >= sent[0] + over / 5 * k as u32, "delta {k} early");
            }
        }
    }

    /// Without bodies the request is still answered from its body (model, stream) but recorded
    /// with a `Null` one.
    #[test]
    fn without_bodies_answers_as_usual_and_records_no_body() {
        let reply = Reply::Turn {
            parts: vec![Part::Text("ok".into())],
            usage: (1, 1),
        };
        let mock = MockLlm::start(Wire::Anthropic, vec![reply]).without_bodies();
        let response = post(
            &mock,
            "/v1/messages",
            &json!({"model": "m-1", "stream": true}),
        );
        assert_eq!(response.status, 200);
        let events = sse(&response.body);
        assert_eq!(events[0].1.pointer("/message/model"), Some(&json!("m-1")));
        let recorded = mock.requests();
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].path, "/v1/messages");
        assert_eq!(recorded[0].body, Value::Null);
    }
}
