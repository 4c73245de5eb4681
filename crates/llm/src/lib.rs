//! Talking to the model: the provider-neutral conversation, the configuration, and the streaming
//! client with its retries. One file per wire format: `anthropic.rs` (Messages API), `openai.rs`
//! (Chat Completions, which also covers llama.cpp, vLLM and OpenRouter), `responses.rs`
//! (OpenAI's Responses API) and `ollama.rs` (Ollama's own chat API, which takes the context
//! size). `models.rs` is what is known of each model: window, prices, thinking.

// The text layer, where the modules below find it.
use agent_nvim_text::secrets;

pub mod anthropic;
pub mod audio;
pub mod image;
pub mod key;
pub mod models;
pub mod ollama;
pub mod openai;
pub mod responses;

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::Value;

use agent_nvim_vocab::tools::ToolSpec;
pub use audio::{Audio, AudioError};
pub use image::{Image, ImageError};
pub use key::{ApiKey, Key};
pub use models::{ModelInfo, OpenAiApi, Price, Thinking, Tuning};

/// Which wire format and defaults to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// Anthropic Messages API.
    Anthropic,
    /// OpenAI Chat Completions.
    OpenAi,
    /// Ollama's OpenAI-compatible endpoint on localhost, no key.
    Ollama,
}

impl ProviderKind {
    /// Parses a provider name as users type it.
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "anthropic" | "claude" => Some(ProviderKind::Anthropic),
            "openai" => Some(ProviderKind::OpenAi),
            "ollama" => Some(ProviderKind::Ollama),
            _ => None,
        }
    }

    /// The name users type and status lines show (`anthropic`, `openai`, `ollama`).
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenAi => "openai",
            ProviderKind::Ollama => "ollama",
        }
    }

    /// The model used when none is configured.
    pub fn default_model(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "claude-sonnet-4-5",
            ProviderKind::OpenAi => "gpt-5",
            ProviderKind::Ollama => "qwen3-coder",
        }
    }

    /// Every provider.
    pub const ALL: [ProviderKind; 3] = [
        ProviderKind::Anthropic,
        ProviderKind::OpenAi,
        ProviderKind::Ollama,
    ];

    /// The environment variable its key is read from; None for a provider without a key.
    pub fn key_var(self) -> Option<&'static str> {
        match self {
            ProviderKind::Anthropic => Some(crate::secrets::ANTHROPIC_KEY_VAR),
            ProviderKind::OpenAi => Some(crate::secrets::OPENAI_KEY_VAR),
            ProviderKind::Ollama => None,
        }
    }

    /// The environment variable the vendor's SDK reads its base URL from; None for Ollama.
    pub fn base_url_var(self) -> Option<&'static str> {
        match self {
            ProviderKind::Anthropic => Some("ANTHROPIC_BASE_URL"),
            ProviderKind::OpenAi => Some("OPENAI_BASE_URL"),
            ProviderKind::Ollama => None,
        }
    }

    /// The base URL: the vendor SDK's environment variable, else the vendor's own endpoint.
    fn base_url(self, env: &dyn Fn(&str) -> Option<String>) -> String {
        let vendor = match self {
            ProviderKind::Anthropic => "https://api.anthropic.com",
            ProviderKind::OpenAi => "https://api.openai.com/v1",
            ProviderKind::Ollama => "http://localhost:11434/v1",
        };
        self.base_url_var()
            .and_then(env)
            .unwrap_or_else(|| vendor.to_string())
    }
}

/// What the user chose (None: not chosen, use the default).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderChoice {
    /// `anthropic`, `openai` or `ollama`.
    pub provider: Option<String>,
    /// The model name.
    pub model: Option<String>,
    /// The endpoint, overriding the environment and the vendor default.
    pub base_url: Option<String>,
    /// The key given in setup() (`api_key`), over the environment's.
    pub api_key: Option<ApiKey>,
    /// The command that prints the key (`api_key_cmd`), over the environment's; run when the
    /// first request needs it.
    pub api_key_cmd: Option<Vec<String>>,
    /// Thinking, reasoning effort, the OpenAI wire format and the model table.
    pub tuning: Tuning,
}

/// A complete provider configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderConfig {
    /// Wire format and defaults.
    pub kind: ProviderKind,
    /// The model name sent in each request.
    pub model: String,
    /// Base URL without a trailing slash.
    pub base_url: String,
    /// The key, or how to get it.
    pub key: Key,
    /// Thinking, reasoning effort, the OpenAI wire format and the model table.
    pub tuning: Tuning,
}

impl ProviderConfig {
    /// What is known of the model in use (its window, its prices). A local model the table
    /// does not know gets [`models::DEFAULT_LOCAL_CONTEXT`].
    pub fn model_info(&self) -> ModelInfo {
        let mut info = self.tuning.model(&self.model);
        if self.kind == ProviderKind::Ollama && !info.known {
            info.context = models::DEFAULT_LOCAL_CONTEXT;
        }
        info
    }

    /// The wire format the next request uses.
    pub fn wire(&self) -> WireFormat {
        match self.kind {
            ProviderKind::Anthropic => WireFormat::Anthropic,
            ProviderKind::Ollama => WireFormat::Ollama,
            ProviderKind::OpenAi if self.tuning.responses(&self.model) => WireFormat::Responses,
            ProviderKind::OpenAi => WireFormat::Chat,
        }
    }
}

/// The four wire formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Chat Completions.
    Chat,
    /// OpenAI Responses.
    Responses,
    /// Ollama's `/api/chat`.
    Ollama,
}

/// Why no provider could be configured. The texts are what the user reads after `agent: `,
/// which the front end adds where it shows them.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// `provider` names none we know.
    #[error("unknown provider '{0}'; use anthropic, openai or ollama")]
    UnknownProvider(String),
    /// No provider named and no key set.
    #[error(
        "no model provider configured: set ANTHROPIC_API_KEY or OPENAI_API_KEY, or choose the \
         provider ollama for a local model"
    )]
    NoProvider,
    /// The named provider's key variable is not set.
    #[error("the {var} environment variable is not set; set it to use this provider")]
    MissingKey { var: &'static str },
    /// reqwest could not build its client (the TLS backend failed to load).
    #[error("cannot set up the HTTP client: {0}")]
    Http(#[source] reqwest::Error),
}

impl ProviderConfig {
    /// Resolves a choice against the environment: with no provider named, a key given in the
    /// choice is Anthropic's, else the first provider whose key variable is set (Anthropic, then
    /// OpenAI) is used. A key given in the choice (`api_key`, then `api_key_cmd`) wins over the
    /// variable: it is the more particular of the two.
    pub fn resolve(
        choice: &ProviderChoice,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ProviderError> {
        let env_set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let given = choice
            .api_key
            .clone()
            .filter(|key| !key.expose().trim().is_empty());
        let command = choice.api_key_cmd.clone().filter(|argv| !argv.is_empty());
        let kind = match &choice.provider {
            Some(name) => ProviderKind::parse(name)
                .ok_or_else(|| ProviderError::UnknownProvider(name.clone()))?,
            None if given.is_some() || command.is_some() => ProviderKind::Anthropic,
            None if env_set("ANTHROPIC_API_KEY").is_some() => ProviderKind::Anthropic,
            None if env_set("OPENAI_API_KEY").is_some() => ProviderKind::OpenAi,
            None => return Err(ProviderError::NoProvider),
        };
        let key = match (kind.key_var(), given, command) {
            (None, _, _) => Key::None,
            (Some(_), Some(key), _) => Key::Given {
                key,
                from: "api_key in setup()".into(),
            },
            (Some(_), None, Some(argv)) => Key::Command(argv),
            (Some(var), None, None) => Key::Given {
                key: ApiKey::new(env_set(var).ok_or(ProviderError::MissingKey { var })?),
                from: var.into(),
            },
        };
        let base_url = choice
            .base_url
            .clone()
            .unwrap_or_else(|| kind.base_url(&env_set));
        Ok(ProviderConfig {
            kind,
            model: choice
                .model
                .clone()
                .unwrap_or_else(|| kind.default_model().to_string()),
            base_url: base_url.trim_end_matches('/').to_string(),
            key,
            tuning: choice.tuning.clone(),
        })
    }
}

/// One tool call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's id for the call; its result echoes it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments exactly as the model sent them (replayed verbatim to OpenAI-style APIs).
    pub raw_args: String,
    /// The arguments parsed, or why they could not be.
    pub args: Result<Value, BadArguments>,
}

/// Why a call's argument text is not JSON, in the parser's words (the model is told them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadArguments(String);

impl ToolCall {
    /// Builds a call, parsing its raw argument text (empty means no arguments).
    pub fn new(id: String, name: String, raw_args: String) -> Self {
        let args = if raw_args.trim().is_empty() {
            Ok(Value::Object(Default::default()))
        } else {
            serde_json::from_str(&raw_args).map_err(|e| BadArguments(e.to_string()))
        };
        ToolCall {
            id,
            name,
            raw_args,
            args,
        }
    }
}

/// The result of one tool call, as sent back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallResult {
    /// The call's id.
    pub id: String,
    /// False marks a failure (`is_error` / `ERROR: `).
    pub ok: bool,
    /// What the model reads.
    pub text: String,
}

/// Where a piece of reasoning came from: it is sent back to that wire format only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// An Anthropic `thinking` or `redacted_thinking` block.
    Anthropic,
    /// An OpenAI Responses `reasoning` item.
    Responses,
}

impl Origin {
    /// The name sessions save it under.
    pub fn name(self) -> &'static str {
        match self {
            Origin::Anthropic => "anthropic",
            Origin::Responses => "responses",
        }
    }

    /// The origin saved as `name`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "anthropic" => Some(Origin::Anthropic),
            "responses" => Some(Origin::Responses),
            _ => None,
        }
    }
}

/// A piece of the model's reasoning that the provider wants back, exactly as it came (a
/// thinking block with its signature, a redacted one, an encrypted reasoning item), in its place
/// among the response's other parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Reasoning {
    /// The wire format it came in.
    pub origin: Origin,
    /// How many of the response's other parts came before it: its text (one part, however many
    /// blocks it came in) and each tool call.
    pub at: usize,
    /// The block or item as received.
    pub item: Value,
}

/// A response's `parts` (its text, then its calls, in a wire format's shape) with the reasoning
/// that came from `origin` put back where it came.
pub(crate) fn interleave(parts: Vec<Value>, reasoning: &[Reasoning], origin: Origin) -> Vec<Value> {
    let mut out = Vec::with_capacity(parts.len() + reasoning.len());
    let mut pending = reasoning.iter().filter(|r| r.origin == origin).peekable();
    for (i, part) in parts.into_iter().enumerate() {
        while let Some(r) = pending.next_if(|r| r.at <= i) {
            out.push(r.item.clone());
        }
        out.push(part);
    }
    out.extend(pending.map(|r| r.item.clone()));
    out
}

impl CallResult {
    /// What the wire formats without an error flag send: the text, a failure prefixed
    /// `ERROR: `.
    pub(crate) fn sent_text(&self) -> String {
        if self.ok {
            self.text.clone()
        } else {
            format!("ERROR: {}", self.text)
        }
    }
}

/// What the person sent: the text (with any context the front end added) and the images and
/// audio clips attached to it. Audio goes only to an external agent that takes it; the
/// built-in agent refuses a prompt holding any before sending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prompt {
    pub text: String,
    pub images: Vec<Image>,
    pub audio: Vec<Audio>,
}

impl From<String> for Prompt {
    fn from(text: String) -> Self {
        Prompt {
            text,
            ..Prompt::default()
        }
    }
}

impl From<&str> for Prompt {
    fn from(text: &str) -> Self {
        Prompt::from(text.to_string())
    }
}

/// The conversation, provider-neutral. Each provider renders it in its own format.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// What the user sent.
    User(Prompt),
    /// One model response, with the reasoning the provider wants sent back.
    Assistant {
        text: String,
        calls: Vec<ToolCall>,
        reasoning: Vec<Reasoning>,
    },
    /// The results of the previous response's calls, one for every call, in order.
    Results(Vec<CallResult>),
}

/// Token counts of one response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens (cached ones included).
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Of `input`, those read from the provider's prompt cache (billed at a tenth or so).
    pub cache_read: u64,
    /// Of `input`, those written to the prompt cache (Anthropic bills them a quarter more).
    pub cache_write: u64,
}

impl Usage {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }
}

/// A finished response.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// All its text.
    pub text: String,
    /// Its tool calls, in order.
    pub calls: Vec<ToolCall>,
    /// Its token counts.
    pub usage: Usage,
    /// Its reasoning to send back in later requests.
    pub reasoning: Vec<Reasoning>,
    /// The model stopped at its output limit (Anthropic `max_tokens`, OpenAI `length`,
    /// Responses `incomplete`): the reply may end mid-sentence or mid-call.
    pub cut: bool,
}

/// What the client reports while a response streams in.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// More text.
    Text(String),
    /// More of the model's thinking (shown dimmed and folded, never part of the answer).
    Thinking(String),
    /// The request failed and will be sent again after `delay`.
    Retrying {
        attempt: u32,
        delay: Duration,
        reason: String,
    },
}

/// Why a response could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    /// The server answered with an error status (returned by [`Client::complete`] after retries).
    #[error("API error {status}: {message}{}", request_id.as_ref().map(|id| format!(" (request id {id})")).unwrap_or_default())]
    Status {
        status: u16,
        message: String,
        request_id: Option<String>,
        retry_after: Option<Duration>,
    },
    /// The server could not be reached.
    #[error("cannot reach {url}: {reason}")]
    Connect { url: String, reason: String },
    /// The stream broke off or carried something we cannot read.
    #[error("the model's reply broke off: {0}")]
    Stream(String),
    /// The server sent an error event in the middle of the stream.
    #[error("API error during the reply: {0}")]
    Api(String),
    /// The server redirected the request to another origin, which would get the key: not
    /// followed (returned by [`Client::complete`]).
    #[error("the API at {from} redirected to {to} (another origin); not followed, so the key is not sent there. Set base_url (setup() or --base-url) to {base} if that server should get the key")]
    Redirected {
        from: String,
        to: String,
        /// The base URL that would send the request there directly.
        base: String,
    },
    /// `api_key_cmd` gave no key; the text says why and what to do ([`key::run_command`]).
    #[error(transparent)]
    Key(key::KeyCommandError),
}

impl LlmError {
    /// The same error with every key value in its texts replaced (a server may echo the key).
    fn redacted(self) -> Self {
        let clean = |text: String| crate::secrets::redact(&text).into_owned();
        match self {
            LlmError::Status {
                status,
                message,
                request_id,
                retry_after,
            } => LlmError::Status {
                status,
                message: clean(message),
                request_id: request_id.map(clean),
                retry_after,
            },
            LlmError::Connect { url, reason } => LlmError::Connect {
                url: clean(url),
                reason: clean(reason),
            },
            LlmError::Stream(reason) => LlmError::Stream(clean(reason)),
            LlmError::Api(message) => LlmError::Api(clean(message)),
            LlmError::Redirected { from, to, base } => LlmError::Redirected {
                from: clean(from),
                to: clean(to),
                base: clean(base),
            },
            LlmError::Key(err) => LlmError::Key(key::KeyCommandError {
                command: clean(err.command),
                why: clean(err.why),
                var: err.var,
            }),
        }
    }

    fn retry_delay(&self, attempt: u32, base: Duration) -> Option<Duration> {
        match self {
            LlmError::Status {
                status: 429 | 500 | 502 | 503 | 504 | 529,
                retry_after,
                ..
            } => {
                let backoff = base.saturating_mul(1 << attempt.min(5));
                Some(retry_after.unwrap_or(backoff).min(MAX_RETRY_DELAY))
            }
            _ => None,
        }
    }
}

/// How many times a retryable status is retried before it is reported.
const MAX_RETRIES: u32 = 4;
/// The longest wait between two tries, whatever retry-after says.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);

/// A request's fixed parts.
pub struct Request<'a> {
    /// The system prompt.
    pub system: &'a str,
    /// The conversation so far.
    pub messages: &'a [Message],
    /// Which conversation these messages are, when they only ever grow at the end under that
    /// number (the turn loop gives a new one whenever it cuts or
    /// rewrites them): the client then renders each message once, and later requests reuse it.
    /// None: render them all (a one-off request).
    pub history: Option<u64>,
}

/// One message rendered in a wire format: its role (Anthropic's, for merging neighbours) and
/// the JSON text of each block or item it becomes.
#[derive(Debug, Clone, Default)]
pub struct Piece {
    pub(crate) role: &'static str,
    pub(crate) parts: Vec<String>,
}

/// The body `write` writes, parsed (the wire modules' `body`, for tests).
pub(crate) fn written(write: impl FnOnce(&mut String)) -> Value {
    let mut out = String::new();
    write(&mut out);
    serde_json::from_str(&out).unwrap_or(Value::Null)
}

/// Appends `text` as a JSON string.
pub(crate) fn push_json(out: &mut String, text: &str) {
    out.push_str(&Value::from(text).to_string());
}

/// Appends every part of `pieces`, comma-separated (and after a comma when `after_one`: the
/// list already has an entry).
pub(crate) fn push_parts(out: &mut String, pieces: &[&Piece], after_one: bool) {
    let mut first = !after_one;
    for part in pieces.iter().flat_map(|p| &p.parts) {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(part);
    }
}

/// Where the images of `messages` are: for each message, how many images come before it (in
/// order, over all messages); and the number of the first image sent as an image, the ones
/// before it going as lines: none sent to a model that takes no images (`images` false), else
/// the newest whose base64 fits in `budget` bytes together ([`image::REQUEST_IMAGES`]), at most
/// [`image::REQUEST_IMAGE_COUNT`] of them.
fn image_places(messages: &[Message], images: bool, budget: usize) -> (Vec<usize>, usize) {
    let mut offsets = Vec::with_capacity(messages.len());
    let mut count = 0;
    for message in messages {
        offsets.push(count);
        count += images_of(message).len();
    }
    if !images {
        return (offsets, count);
    }
    let mut first_sent = 0;
    let mut size = 0;
    let newest_first = messages
        .iter()
        .rev()
        .flat_map(|message| images_of(message).iter().rev());
    for (n, image) in newest_first.enumerate() {
        size += image.base64_len();
        if size > budget || n >= image::REQUEST_IMAGE_COUNT {
            first_sent = count - n;
            break;
        }
    }
    (offsets, first_sent)
}

/// The images attached to `message` (none but a prompt's).
fn images_of(message: &Message) -> &[Image] {
    match message {
        Message::User(prompt) => &prompt.images,
        _ => &[],
    }
}

/// `message` with a line in place of each of its images numbered before `first_sent` (its first
/// numbered `offset`) ([`Image::unsent_line`], for a model that takes images or not): None
/// when it keeps every image.
fn images_as_lines(
    message: &Message,
    offset: usize,
    first_sent: usize,
    images: bool,
) -> Option<Message> {
    let Message::User(prompt) = message else {
        return None;
    };
    if prompt.images.is_empty() || offset >= first_sent {
        return None;
    }
    let mut text = String::new();
    let mut kept = Vec::new();
    for (n, image) in prompt.images.iter().enumerate() {
        if offset + n >= first_sent {
            kept.push(image.clone());
        } else {
            text.push_str(&image.unsent_line(images));
            text.push('\n');
        }
    }
    text.push_str(&prompt.text);
    Some(Message::User(Prompt {
        text,
        images: kept,
        audio: prompt.audio.clone(),
    }))
}

/// The messages the client has rendered, for the conversation and wire format they belong to.
#[derive(Debug, Default)]
struct Rendered {
    /// The history's epoch, the wire, whether the model takes images, and the first image
    /// sent as an image (the ones before it went as lines).
    key: Option<(u64, WireFormat, bool, usize)>,
    pieces: Vec<Piece>,
}

/// The streaming client for one provider.
pub struct Client {
    http: reqwest::Client,
    config: ProviderConfig,
    /// The tool catalogue as JSON text, rendered once so every request carries byte-identical
    /// tools (which is what lets the provider's prompt cache hit).
    tools: String,
    /// The catalogue in the Responses API's shape (OpenAI only: a model switch can change the
    /// wire format).
    responses_tools: String,
    /// The messages rendered so far: a tool loop's request renders only what is new.
    rendered: std::sync::Mutex<Rendered>,
    retry_base: Duration,
    /// The most base64 of images one request carries ([`image::REQUEST_IMAGES`]).
    image_budget: usize,
    /// The key `api_key_cmd` printed, once the first request needed it.
    fetched: tokio::sync::OnceCell<ApiKey>,
}

impl Client {
    /// A client for `config` offering `tools`.
    pub fn new(config: ProviderConfig, tools: &[ToolSpec]) -> Result<Self, ProviderError> {
        if let Key::Given { key, .. } = &config.key {
            crate::secrets::protect(key.expose());
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .redirect(reqwest::redirect::Policy::custom(same_origin_only))
            .build()
            .map_err(ProviderError::Http)?;
        let (tools, responses_tools) = match config.kind {
            ProviderKind::Anthropic => (anthropic::tools(tools), Value::Null),
            ProviderKind::OpenAi => (openai::tools(tools), responses::tools(tools)),
            ProviderKind::Ollama => (openai::tools(tools), Value::Null),
        };
        Ok(Client {
            http,
            config,
            tools: tools.to_string(),
            responses_tools: responses_tools.to_string(),
            rendered: Default::default(),
            retry_base: Duration::from_secs(1),
            image_budget: image::REQUEST_IMAGES,
            fetched: tokio::sync::OnceCell::new(),
        })
    }

    /// The key to send, None for a provider without one. `api_key_cmd` runs here the first
    /// time (a failure is not kept: the next request runs it again).
    async fn key(&self) -> Result<Option<&ApiKey>, LlmError> {
        match &self.config.key {
            Key::None => Ok(None),
            Key::Given { key, .. } => Ok(Some(key)),
            Key::Command(argv) => self
                .fetched
                .get_or_try_init(|| key::run_command(argv, self.config.kind.key_var()))
                .await
                .map(Some)
                .map_err(LlmError::Key),
        }
    }

    /// Where the next request is posted.
    fn endpoint(&self) -> String {
        let base = &self.config.base_url;
        match self.config.wire() {
            WireFormat::Anthropic => format!("{base}/v1/messages"),
            WireFormat::Chat => format!("{base}/chat/completions"),
            WireFormat::Responses => format!("{base}/responses"),
            WireFormat::Ollama => ollama::url(base),
        }
    }

    /// The next step for `err` that only this configuration knows, to say after it: a refused
    /// key names where the key came from and the base URL, a 404 the model and the URL.
    pub fn next_step(&self, err: &LlmError) -> Option<String> {
        let LlmError::Status { status, .. } = err else {
            return None;
        };
        let cfg = &self.config;
        let base = match cfg.kind.base_url_var() {
            Some(var) => format!("{} (base_url, else {var})", cfg.base_url),
            None => format!("{} (base_url)", cfg.base_url),
        };
        match status {
            401 | 403 => Some(match cfg.key.source() {
                Some(source) => format!("check the key, {source}, and the base URL in use, {base}"),
                None => format!(
                    "{} sends no key; check the base URL in use, {base}",
                    cfg.kind.name()
                ),
            }),
            404 => Some(format!(
                "check the model, {} (:Agent model picks another), and the URL, {}",
                cfg.model,
                self.endpoint()
            )),
            _ => None,
        }
    }

    /// Sends `model` in the requests from now on (the person switched it).
    pub fn set_model(&mut self, model: String) {
        self.config.model = model;
    }

    /// Lowers the most base64 of images one request carries (tests).
    #[cfg(test)]
    fn with_image_budget(mut self, bytes: usize) -> Self {
        self.image_budget = bytes;
        self
    }

    /// Shortens the backoff (tests).
    pub fn with_retry_base(mut self, base: Duration) -> Self {
        self.retry_base = base;
        self
    }

    /// The configuration in use.
    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    /// Sends the conversation and streams the reply, retrying retryable statuses with backoff
    /// (honouring retry-after). Dropping the future drops the connection.
    pub async fn complete(
        &self,
        request: &Request<'_>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Reply, LlmError> {
        let mut attempt = 0;
        loop {
            match self
                .once(request, progress)
                .await
                .map_err(LlmError::redacted)
            {
                Ok(reply) => return Ok(reply),
                Err(err) => match err.retry_delay(attempt, self.retry_base) {
                    Some(delay) if attempt < MAX_RETRIES => {
                        attempt += 1;
                        tracing::warn!(%err, attempt, ?delay, "retrying the model request");
                        progress(Progress::Retrying {
                            attempt,
                            delay,
                            reason: err.to_string(),
                        });
                        tokio::time::sleep(delay).await;
                    }
                    _ => return Err(err),
                },
            }
        }
    }

    /// The request body as JSON text, the messages rendered before reused (see
    /// [`Request::history`]).
    fn body(
        &self,
        wire: WireFormat,
        request: &Request<'_>,
        thinking: Option<u32>,
        effort: Option<&str>,
    ) -> String {
        let messages = request.messages;
        // A model that takes no images (one switched to after images were attached) is sent a
        // line in place of each, never the image it would refuse the whole request for; one
        // that does, the newest images up to REQUEST_IMAGES and a line for each older one.
        let images = self.config.model_info().images;
        let (offsets, first_sent) = image_places(messages, images, self.image_budget);
        let render = |i: usize| {
            let stripped = images_as_lines(&messages[i], offsets[i], first_sent, images);
            let message = stripped.as_ref().unwrap_or(&messages[i]);
            match wire {
                WireFormat::Anthropic => anthropic::piece(message),
                WireFormat::Chat => openai::piece(message),
                WireFormat::Responses => responses::piece(message),
                WireFormat::Ollama => {
                    ollama::piece(message, i.checked_sub(1).map(|j| &messages[j]))
                }
            }
        };
        let mut one_off = Vec::new();
        let mut kept = self
            .rendered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let pieces: &[Piece] = match request.history {
            Some(history) => {
                let key = Some((history, wire, images, first_sent));
                if kept.key != key || kept.pieces.len() > messages.len() {
                    kept.key = key;
                    kept.pieces.clear();
                }
                for i in kept.pieces.len()..messages.len() {
                    let piece = render(i);
                    kept.pieces.push(piece);
                }
                &kept.pieces
            }
            None => {
                one_off.extend((0..messages.len()).map(render));
                &one_off
            }
        };
        let refs: Vec<&Piece> = pieces.iter().collect();
        let size: usize = pieces
            .iter()
            .flat_map(|p| &p.parts)
            .map(|part| part.len() + 1)
            .sum();
        let mut out = String::with_capacity(size + request.system.len() + self.tools.len() + 512);
        let cfg = &self.config;
        let (system, model) = (request.system, cfg.model.as_str());
        let max_output = cfg.model_info().max_output;
        match wire {
            WireFormat::Anthropic => anthropic::write_body(
                &mut out,
                model,
                system,
                &refs,
                &self.tools,
                thinking,
                max_output,
            ),
            WireFormat::Chat => {
                openai::write_body(&mut out, model, system, &refs, &self.tools, effort)
            }
            WireFormat::Responses => responses::write_body(
                &mut out,
                model,
                system,
                &refs,
                &self.responses_tools,
                effort,
            ),
            WireFormat::Ollama => {
                let context = cfg.model_info().context;
                ollama::write_body(&mut out, model, system, &refs, &self.tools, context)
            }
        }
        out
    }

    async fn once(
        &self,
        request: &Request<'_>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Reply, LlmError> {
        let cfg = &self.config;
        let wire = cfg.wire();
        let model = cfg.model.as_str();
        let effort = cfg.tuning.effort.as_deref();
        let thinking = cfg.tuning.thinking_budget(model);
        let url = self.endpoint();
        let key = self.key().await?;
        let body = self.body(wire, request, thinking, effort);
        let accept = match wire {
            WireFormat::Ollama => "application/x-ndjson",
            _ => "text/event-stream",
        };
        let mut builder = self
            .http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", accept)
            .body(body);
        if wire == WireFormat::Anthropic {
            builder = builder.header("anthropic-version", "2023-06-01");
            if thinking.is_some() {
                // Thinking between tool calls, not only before the first.
                builder = builder.header("anthropic-beta", anthropic::INTERLEAVED_THINKING);
            }
        }
        if let Some(key) = key {
            builder = match cfg.kind {
                ProviderKind::Anthropic => builder.header("x-api-key", key.expose()),
                ProviderKind::OpenAi | ProviderKind::Ollama => builder.bearer_auth(key.expose()),
            };
        }
        let response = builder.send().await.map_err(|e| LlmError::Connect {
            url: url.clone(),
            reason: describe(&e),
        })?;
        let status = response.status();
        if status.is_redirection() {
            if let Some(redirect) = redirected(&response, &cfg.base_url, &url) {
                return Err(redirect);
            }
        }
        if !status.is_success() {
            let mut err = status_error(response).await;
            if let (
                WireFormat::Ollama,
                LlmError::Status {
                    status, message, ..
                },
            ) = (wire, &mut err)
            {
                if let Some(better) = ollama::no_tools(model, message) {
                    *message = better;
                } else if *status == 404 && !message.contains("not found, try pulling") {
                    let shown = without_credentials(&url);
                    *message = format!("{message} [{shown} is not Ollama's chat API; for another OpenAI-compatible server use provider = \"openai\" with its base_url]");
                }
            }
            return Err(err);
        }
        if wire == WireFormat::Ollama {
            return ollama::read(response, progress).await;
        }
        let mut events = response.bytes_stream().eventsource();
        let mut parser = Parser::new(wire);
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| LlmError::Stream(stream_reason(&e.to_string())))?;
            if parser.event(&event.event, &event.data, progress)? {
                // Read the body's end too, so the connection goes back to the pool for the next
                // request instead of being closed (a new TLS handshake every turn is slow).
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    while events.next().await.is_some() {}
                })
                .await;
                break;
            }
        }
        parser.finish()
    }
}

/// The stream parser of one of the SSE wire formats.
enum Parser {
    Anthropic(anthropic::Parser),
    OpenAi(openai::Parser),
    Responses(responses::Parser),
}

impl Parser {
    fn new(wire: WireFormat) -> Self {
        match wire {
            WireFormat::Anthropic => Parser::Anthropic(anthropic::Parser::default()),
            WireFormat::Responses => Parser::Responses(responses::Parser::default()),
            WireFormat::Chat | WireFormat::Ollama => Parser::OpenAi(openai::Parser::default()),
        }
    }

    /// Feeds one SSE event; true when the response is complete.
    fn event(
        &mut self,
        name: &str,
        data: &str,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<bool, LlmError> {
        match self {
            Parser::Anthropic(p) => p.event(name, data, progress),
            Parser::OpenAi(p) => p.event(data, progress),
            Parser::Responses(p) => p.event(name, data, progress),
        }
    }

    fn finish(self) -> Result<Reply, LlmError> {
        match self {
            Parser::Anthropic(p) => p.finish(),
            Parser::OpenAi(p) => p.finish(),
            Parser::Responses(p) => p.finish(),
        }
    }
}

/// `url` without a user name or password in it (a base URL may carry them).
fn without_credentials(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_password(None);
            let _ = parsed.set_username("");
            parsed.to_string()
        }
        Err(_) => "the configured URL".to_string(),
    }
}

/// How many same-origin redirects one request may follow.
const MAX_REDIRECTS: usize = 10;

/// The redirect policy: a redirect is followed only to the origin (scheme, host, port) the
/// request was sent to, where the key already goes. Any other is not followed, and
/// [`redirected`] reports it: reqwest would strip `Authorization` on the way but not Anthropic's
/// `x-api-key`.
fn same_origin_only(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let same = attempt
        .previous()
        .first()
        .is_some_and(|first| first.origin() == attempt.url().origin());
    if !same {
        attempt.stop()
    } else if attempt.previous().len() > MAX_REDIRECTS {
        attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
    } else {
        attempt.follow()
    }
}

/// The error for a redirect that was not followed (a 3xx with a `location`), with the base URL
/// that would reach its target: `to` less the path `url` added to `base_url`, when it ends so.
fn redirected(response: &reqwest::Response, base_url: &str, url: &str) -> Option<LlmError> {
    let location = response.headers().get("location")?.to_str().ok()?;
    let to = response.url().join(location).ok()?;
    let suffix = url.strip_prefix(base_url).unwrap_or_default();
    let mut target = to.clone();
    target.set_query(None);
    target.set_fragment(None);
    let target = target.to_string();
    let base = match target.strip_suffix(suffix) {
        Some(base) if !suffix.is_empty() => base.to_string(),
        _ => to.origin().ascii_serialization(),
    };
    Some(LlmError::Redirected {
        from: response.url().to_string(),
        to: to.to_string(),
        base,
    })
}

/// A reqwest error in words a user can act on (no URL query, no headers: nothing secret).
pub(crate) fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        text = format!("{text}: {inner}");
        source = inner.source();
    }
    if err.is_connect() {
        text.push_str(" — is the server running and the base URL right?");
    }
    text
}

pub(crate) fn stream_reason(reason: &str) -> String {
    format!("{reason} (the connection closed before the reply was complete; send the prompt again)")
}

/// Reads an error response: the vendor's message from its JSON body, the request id header, and
/// retry-after.
pub(crate) async fn status_error(response: reqwest::Response) -> LlmError {
    let status = response.status().as_u16();
    let headers = response.headers();
    let request_id = ["request-id", "x-request-id"]
        .iter()
        .find_map(|h| headers.get(*h))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let retry_after = headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64);
    let body = response.text().await.unwrap_or_default();
    let message = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| {
            let error = v.get("error")?;
            // Ollama's error is the message itself.
            if let Some(message) = error.as_str() {
                return Some(message.to_string());
            }
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let kind = error.get("type").and_then(Value::as_str);
            Some(match kind {
                Some(kind) => format!("{kind}: {message}"),
                None => message.to_string(),
            })
        })
        .unwrap_or_else(|| body.chars().take(300).collect());
    LlmError::Status {
        status,
        message,
        request_id,
        retry_after,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_provider_name_parses_back_to_its_kind() {
        for kind in ProviderKind::ALL {
            assert_eq!(ProviderKind::parse(kind.name()), Some(kind));
            // Every key variable is one the redactor keeps out of children.
            if let Some(var) = kind.key_var() {
                assert!(crate::secrets::KEY_VARS.contains(&var), "{var}");
            }
        }
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn with_no_provider_the_first_key_set_wins() {
        let cfg = ProviderConfig::resolve(
            &ProviderChoice::default(),
            &env_of(&[("OPENAI_API_KEY", "sk-o"), ("ANTHROPIC_API_KEY", "sk-a")]),
        )
        .unwrap();
        assert_eq!(
            cfg,
            ProviderConfig {
                kind: ProviderKind::Anthropic,
                model: "claude-sonnet-4-5".into(),
                base_url: "https://api.anthropic.com".into(),
                key: Key::Given {
                    key: ApiKey::new("sk-a".into()),
                    from: "ANTHROPIC_API_KEY".into(),
                },
                tuning: Default::default(),
            }
        );
        let cfg = ProviderConfig::resolve(
            &ProviderChoice::default(),
            &env_of(&[("OPENAI_API_KEY", "sk-o")]),
        )
        .unwrap();
        assert_eq!(
            (cfg.kind, cfg.base_url.as_str()),
            (ProviderKind::OpenAi, "https://api.openai.com/v1")
        );
    }

    #[test]
    fn with_no_key_at_all_the_message_names_the_variables() {
        let err = ProviderConfig::resolve(&ProviderChoice::default(), &env_of(&[])).unwrap_err();
        let err = err.to_string();
        assert!(
            err.contains("ANTHROPIC_API_KEY") && err.contains("OPENAI_API_KEY"),
            "{err}"
        );
        let choice = ProviderChoice {
            provider: Some("openai".into()),
            ..Default::default()
        };
        let err =
            ProviderConfig::resolve(&choice, &env_of(&[("ANTHROPIC_API_KEY", "k")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the OPENAI_API_KEY environment variable is not set; set it to use this provider"
        );
    }

    #[test]
    fn base_urls_come_from_the_choice_then_the_sdk_variables_then_the_vendor() {
        let env = env_of(&[
            ("ANTHROPIC_API_KEY", "k"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
            ("OPENAI_API_KEY", "k"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:8/v1"),
        ]);
        let pick = |provider: &str, base: Option<&str>| {
            let choice = ProviderChoice {
                provider: Some(provider.into()),
                model: None,
                base_url: base.map(String::from),
                tuning: Default::default(),
                api_key: None,
                api_key_cmd: None,
            };
            ProviderConfig::resolve(&choice, &env).unwrap().base_url
        };
        assert_eq!(pick("anthropic", None), "http://127.0.0.1:9");
        assert_eq!(pick("openai", None), "http://127.0.0.1:8/v1");
        assert_eq!(pick("openai", Some("http://h/v1/")), "http://h/v1");
        let ollama = ProviderConfig::resolve(
            &ProviderChoice {
                provider: Some("ollama".into()),
                ..Default::default()
            },
            &env_of(&[]),
        )
        .unwrap();
        assert_eq!(
            (ollama.base_url.as_str(), ollama.key),
            ("http://localhost:11434/v1", Key::None)
        );
    }

    #[test]
    fn a_key_from_setup_wins_over_the_variable_and_without_a_provider_is_anthropics() {
        let env = env_of(&[("OPENAI_API_KEY", "sk-o"), ("ANTHROPIC_API_KEY", "sk-a")]);
        let choice = ProviderChoice {
            api_key_cmd: Some(vec!["pass".into(), "show".into(), "anthropic".into()]),
            ..Default::default()
        };
        let cfg = ProviderConfig::resolve(&choice, &env_of(&[("OPENAI_API_KEY", "sk-o")])).unwrap();
        assert_eq!(
            (cfg.kind, &cfg.key),
            (
                ProviderKind::Anthropic,
                &Key::Command(vec!["pass".into(), "show".into(), "anthropic".into()])
            )
        );
        assert_eq!(
            cfg.key.source().unwrap(),
            "api_key_cmd (pass show anthropic)"
        );
        let choice = ProviderChoice {
            provider: Some("openai".into()),
            api_key: Some(ApiKey::new("sk-setup".into())),
            api_key_cmd: Some(vec!["pass".into()]),
            ..Default::default()
        };
        let cfg = ProviderConfig::resolve(&choice, &env).unwrap();
        assert_eq!(
            cfg.key,
            Key::Given {
                key: ApiKey::new("sk-setup".into()),
                from: "api_key in setup()".into()
            }
        );
        // Ollama takes no key, whatever setup gives.
        let choice = ProviderChoice {
            provider: Some("ollama".into()),
            api_key_cmd: Some(vec!["pass".into()]),
            ..Default::default()
        };
        assert_eq!(
            ProviderConfig::resolve(&choice, &env).unwrap().key,
            Key::None
        );
    }

    #[test]
    fn an_api_key_never_shows_in_debug_output() {
        let cfg = ProviderConfig::resolve(
            &ProviderChoice::default(),
            &env_of(&[("ANTHROPIC_API_KEY", "sk-secret-123")]),
        )
        .unwrap();
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("sk-secret-123"), "{shown}");
        assert!(shown.contains("[redacted]"));
    }

    #[test]
    fn retryable_statuses_back_off_and_honour_retry_after() {
        let status = |status, retry_after| LlmError::Status {
            status,
            message: String::new(),
            request_id: None,
            retry_after,
        };
        let base = Duration::from_millis(100);
        assert_eq!(
            status(529, None).retry_delay(0, base),
            Some(Duration::from_millis(100))
        );
        assert_eq!(
            status(429, None).retry_delay(2, base),
            Some(Duration::from_millis(400))
        );
        assert_eq!(
            status(503, Some(Duration::from_secs(7))).retry_delay(0, base),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            status(429, Some(Duration::from_secs(3600))).retry_delay(0, base),
            Some(MAX_RETRY_DELAY)
        );
        for code in [500, 502, 504] {
            assert!(status(code, None).retry_delay(0, base).is_some());
        }
        for code in [400, 401, 403, 404, 413] {
            assert_eq!(status(code, None).retry_delay(0, base), None);
        }
        assert_eq!(LlmError::Stream("cut".into()).retry_delay(0, base), None);
    }

    #[test]
    fn an_error_that_echoes_a_key_is_redacted_in_every_text() {
        crate::secrets::protect("sk-llm-unit-31415926");
        let status = LlmError::Status {
            status: 401,
            message: "bad key sk-llm-unit-31415926".into(),
            request_id: Some("req sk-llm-unit-31415926".into()),
            retry_after: None,
        };
        assert_eq!(
            status.redacted().to_string(),
            "API error 401: bad key [redacted] (request id req [redacted])"
        );
        assert_eq!(
            LlmError::Api("echo sk-llm-unit-31415926".into()).redacted(),
            LlmError::Api("echo [redacted]".into())
        );
        assert_eq!(
            LlmError::Connect {
                url: "http://h/?k=sk-llm-unit-31415926".into(),
                reason: "refused".into()
            }
            .redacted()
            .to_string(),
            "cannot reach http://h/?k=[redacted]: refused"
        );
    }

    #[test]
    fn a_body_from_the_messages_rendered_before_is_the_body_rendered_afresh_in_every_wire() {
        let specs = [agent_nvim_vocab::tools::ToolSpec {
            name: "read_file",
            description: "d",
            schema: serde_json::json!({"type": "object"}),
        }];
        for kind in ProviderKind::ALL {
            for api in [OpenAiApi::Chat, OpenAiApi::Responses] {
                let config = ProviderConfig {
                    kind,
                    model: "m".into(),
                    base_url: "http://127.0.0.1:9".into(),
                    key: Key::None,
                    tuning: Tuning {
                        api,
                        thinking: Thinking::Budget(2000),
                        effort: Some("low".into()),
                        ..Tuning::default()
                    },
                };
                let client = Client::new(config, &specs).unwrap();
                let wire = client.config().wire();
                let mut messages = vec![Message::User("go".into())];
                for turn in 0..6 {
                    let fresh = || {
                        let request = Request {
                            system: "sys",
                            messages: &messages,
                            history: None,
                        };
                        client.body(wire, &request, Some(2000), Some("low"))
                    };
                    let kept = Request {
                        system: "sys",
                        messages: &messages,
                        history: Some(7),
                    };
                    let kept = client.body(wire, &kept, Some(2000), Some("low"));
                    let parse = |s: &str| serde_json::from_str::<Value>(s).unwrap();
                    assert_eq!(parse(&kept), parse(&fresh()), "{wire:?} turn {turn}");
                    messages.push(Message::Assistant {
                        text: format!("step {turn}"),
                        calls: vec![ToolCall::new(
                            format!("t{turn}"),
                            "read_file".into(),
                            r#"{"path":"a"}"#.into(),
                        )],
                        reasoning: Vec::new(),
                    });
                    messages.push(Message::Results(vec![CallResult {
                        id: format!("t{turn}"),
                        ok: turn % 2 == 0,
                        text: "A".repeat(10),
                    }]));
                }
                // The same number after a cut would be a lie the caller must not tell; a new
                // number renders again.
                messages.truncate(3);
                let cut = Request {
                    system: "sys",
                    messages: &messages,
                    history: Some(8),
                };
                let body: Value =
                    serde_json::from_str(&client.body(wire, &cut, None, None)).unwrap();
                assert!(!body.to_string().contains("step 1"), "{wire:?}: {body}");
            }
        }
    }

    #[test]
    fn a_model_switched_to_that_takes_no_images_is_sent_a_line_for_each_in_every_wire() {
        let image =
            Image::prepare("shot.png", agent_nvim_fixtures::pictures::png(4, 4, 1)).unwrap();
        let messages = vec![
            Message::User(Prompt {
                text: "what is this?".into(),
                images: vec![image.clone()],
                audio: Vec::new(),
            }),
            Message::Assistant {
                text: "a square".into(),
                calls: Vec::new(),
                reasoning: Vec::new(),
            },
            Message::User("and now?".into()),
        ];
        for kind in ProviderKind::ALL {
            for api in [OpenAiApi::Chat, OpenAiApi::Responses] {
                let mut tuning = Tuning {
                    api,
                    ..Tuning::default()
                };
                tuning.models.insert(
                    "local-text".into(),
                    models::ModelEntry {
                        context: None,
                        price: None,
                        images: Some(false),
                    },
                );
                let config = ProviderConfig {
                    kind,
                    model: "seeing".into(),
                    base_url: "http://127.0.0.1:9".into(),
                    key: Key::None,
                    tuning,
                };
                let mut client = Client::new(config, &[]).unwrap();
                let wire = client.config().wire();
                let request = Request {
                    system: "sys",
                    messages: &messages,
                    history: Some(3),
                };
                let seeing = client.body(wire, &request, None, None);
                assert!(seeing.contains(&image.base64()), "{wire:?}");
                // The same history, rendered before with its image, after the switch.
                client.set_model("local-text".into());
                let blind = client.body(wire, &request, None, None);
                assert!(!blind.contains(&image.base64()), "{wire:?}: {blind}");
                assert!(
                    blind.contains(
                        "[image shot.png was attached here; the model in use now does not take images, so it is not sent]"
                    ),
                    "{wire:?}: {blind}"
                );
                assert!(blind.contains("what is this?"), "{wire:?}: {blind}");
            }
        }
    }

    #[test]
    fn a_request_carries_the_newest_hundred_images_at_most() {
        let tiny = Image {
            name: "dot.png".into(),
            media_type: "image/png".into(),
            width: 1,
            height: 1,
            scaled_from: None,
            data: vec![1u8; 30].into(),
            file: None,
        };
        // 102 images over 51 prompts: the oldest two go as lines.
        let messages: Vec<Message> = (0..51)
            .map(|_| {
                Message::User(Prompt {
                    text: "two more".into(),
                    images: vec![tiny.clone(), tiny.clone()],
                    audio: Vec::new(),
                })
            })
            .collect();
        let (offsets, first_sent) = image_places(&messages, true, usize::MAX);
        assert_eq!(first_sent, 2);
        assert_eq!((offsets[0], offsets[1], offsets[50]), (0, 2, 100));
        let first = images_as_lines(&messages[0], offsets[0], first_sent, true).unwrap();
        assert!(matches!(&first, Message::User(p) if p.images.is_empty()));
        assert!(images_as_lines(&messages[1], offsets[1], first_sent, true).is_none());
        // A model that takes none: every one a line.
        let (_, none) = image_places(&messages, false, usize::MAX);
        assert_eq!(none, 102);
    }

    #[test]
    fn a_request_carries_the_newest_images_that_fit_and_a_line_for_each_older_one() {
        // Three images of 7 KB (9.3 KB in base64): the newest two fit in 24 KB, not the first
        // (24 MB and 7 MB in use: the same sums, a thousand times smaller to run).
        let big = |name: &str, byte: u8| Image {
            name: name.into(),
            media_type: "image/png".into(),
            width: 1,
            height: 1,
            scaled_from: None,
            data: vec![byte; 7 * 1024].into(),
            file: None,
        };
        let (a, b, c) = (big("a.png", 0xAA), big("b.png", 0xBB), big("c.png", 0xCC));
        // What each one's base64 starts with (the bytes differ).
        let heads: Vec<String> = [&a, &b, &c]
            .iter()
            .map(|image| {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.encode(&image.data[..48])
            })
            .collect();
        let head = |image: &Image| heads[usize::from((image.data[0] - 0xAA) / 0x11)].clone();
        assert_eq!(image::REQUEST_IMAGES, 24 * 1024 * 1024);
        let asked = |image: &Image, text: &str| {
            Message::User(Prompt {
                text: text.into(),
                images: vec![image.clone()],
                audio: Vec::new(),
            })
        };
        let answered = || Message::Assistant {
            text: "seen".into(),
            calls: Vec::new(),
            reasoning: Vec::new(),
        };
        for kind in ProviderKind::ALL {
            let config = ProviderConfig {
                kind,
                model: "seeing".into(),
                base_url: "http://127.0.0.1:9".into(),
                key: Key::None,
                tuning: Tuning::default(),
            };
            let client = Client::new(config, &[])
                .unwrap()
                .with_image_budget(24 * 1024);
            let wire = client.config().wire();
            let mut messages = vec![asked(&a, "one"), answered(), asked(&b, "two")];
            let body = |messages: &[Message]| {
                let request = Request {
                    system: "sys",
                    messages,
                    history: Some(1),
                };
                client.body(wire, &request, None, None)
            };
            // Two fit: both sent.
            let two = body(&messages);
            assert!(
                two.contains(&head(&a)) && two.contains(&head(&b)),
                "{wire:?}"
            );
            // A third: the oldest goes as a line, also from messages rendered before.
            messages.extend([answered(), asked(&c, "three")]);
            let three = body(&messages);
            assert!(!three.contains(&head(&a)), "{wire:?}");
            assert!(
                three.contains(&head(&b)) && three.contains(&head(&c)),
                "{wire:?}"
            );
            assert!(
                three.contains("[image a.png was attached here; left out of this request, which carries the newest images only (24 MB, 100 at most)]"),
                "{wire:?}"
            );
            assert!(three.len() < 32 * 1024, "{wire:?}: {}", three.len());
        }
    }

    #[test]
    fn max_tokens_stays_within_the_models_output_limit_and_above_the_thinking_budget() {
        let body_for = |model: &str, budget: u32| {
            let config = ProviderConfig {
                kind: ProviderKind::Anthropic,
                model: model.into(),
                base_url: "http://127.0.0.1:9".into(),
                key: Key::None,
                tuning: Tuning {
                    thinking: Thinking::Budget(budget),
                    ..Tuning::default()
                },
            };
            let client = Client::new(config, &[]).unwrap();
            let messages = [Message::User("hi".into())];
            let request = Request {
                system: "s",
                messages: &messages,
                history: None,
            };
            let budget = client.config().tuning.thinking_budget(model);
            let body = client.body(WireFormat::Anthropic, &request, budget, None);
            serde_json::from_str::<Value>(&body).unwrap()
        };
        let opus = body_for("claude-opus-4-1", 31_500);
        assert_eq!(opus["max_tokens"], 32_000);
        assert_eq!(opus["thinking"]["budget_tokens"], 32_000 - 1_024);
        let sonnet = body_for("claude-sonnet-4-5", 8_000);
        assert_eq!(sonnet["max_tokens"], 24_000);
        assert_eq!(sonnet["thinking"]["budget_tokens"], 8_000);
        let haiku = body_for("claude-3-5-haiku", 8_000);
        assert_eq!(haiku["max_tokens"], 8_192);
        assert!(haiku.get("thinking").is_none(), "{haiku}");
    }

    #[test]
    fn reasoning_goes_back_between_the_parts_it_came_between() {
        let part = |name: &str| serde_json::json!(name);
        let reasoning = |at: usize, name: &str, origin| Reasoning {
            origin,
            at,
            item: serde_json::json!(name),
        };
        let got = interleave(
            vec![part("text"), part("call 1"), part("call 2")],
            &[
                reasoning(0, "first", Origin::Anthropic),
                reasoning(2, "between", Origin::Anthropic),
                reasoning(1, "other wire", Origin::Responses),
                reasoning(3, "last", Origin::Anthropic),
            ],
            Origin::Anthropic,
        );
        assert_eq!(
            got,
            ["first", "text", "call 1", "between", "call 2", "last"].map(part)
        );
    }

    #[test]
    fn a_status_error_names_status_message_and_request_id() {
        let err = LlmError::Status {
            status: 529,
            message: "overloaded_error: Overloaded".into(),
            request_id: Some("req_1".into()),
            retry_after: None,
        };
        assert_eq!(
            err.to_string(),
            "API error 529: overloaded_error: Overloaded (request id req_1)"
        );
    }
}
