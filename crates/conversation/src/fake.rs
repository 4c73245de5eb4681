//! [`Fake`]: the one scripted conversation the tests of the crates above use, in place of an
//! agent: a name, what a prompt does, a history for the model's view, the sessions an external
//! agent would keep. Only with the `test-support` feature (or this crate's own tests).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::{AgentSession, AgentSessions, Choice, Conversation, ConversationError, Events};
use agent_nvim_llm::Message;
use agent_nvim_vocab::events::Outcome;

/// What a prompt does: given the prompt's text and its events, the turn's outcome.
type OnPrompt = Box<dyn Fn(String, Events) -> BoxFuture<'static, Outcome> + Send + Sync>;
/// What a load does after the loaded id is taken: given the id and the events, the title.
type OnLoad = Box<
    dyn Fn(String, Events) -> BoxFuture<'static, Result<String, ConversationError>> + Send + Sync,
>;

/// A conversation that does what a test scripts. By default a prompt reports nothing and ends
/// `Done`, and nothing else is supported; each `with_`/`on_` method adds one ability.
pub struct Fake {
    name: String,
    on_prompt: Option<OnPrompt>,
    history: Option<Vec<Message>>,
    rewinds: Mutex<Vec<usize>>,
    resets: std::sync::atomic::AtomicUsize,
    sessions: Option<Result<Vec<AgentSession>, ConversationError>>,
    on_load: Option<OnLoad>,
    session: Mutex<Option<String>>,
    chosen: Mutex<Vec<Choice>>,
    ended: AtomicBool,
}

impl Fake {
    /// A conversation called `name` whose prompts end at once.
    pub fn new(name: impl Into<String>) -> Self {
        Fake {
            name: name.into(),
            on_prompt: None,
            history: None,
            rewinds: Mutex::new(Vec::new()),
            resets: std::sync::atomic::AtomicUsize::new(0),
            sessions: None,
            on_load: None,
            session: Mutex::new(None),
            chosen: Mutex::new(Vec::new()),
            ended: AtomicBool::new(false),
        }
    }

    /// Each prompt runs `script` with the prompt's text and events, and ends as it says.
    pub fn on_prompt<F, Fut>(mut self, script: F) -> Self
    where
        F: Fn(String, Events) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Outcome> + Send + 'static,
    {
        self.on_prompt = Some(Box::new(move |text, events| Box::pin(script(text, events))));
        self
    }

    /// A history of our own: the model's view is `history` (from the asked message on), and a
    /// rewind or a reset is taken (and noted, [`Fake::rewinds`], [`Fake::resets`]) without
    /// changing it.
    pub fn with_history(mut self, history: Vec<Message>) -> Self {
        self.history = Some(history);
        self
    }

    /// An external agent's session: it keeps `sessions` (or fails to list them), its current
    /// session is `session`, and a load makes the loaded one current.
    pub fn as_agent(
        mut self,
        sessions: Result<Vec<AgentSession>, ConversationError>,
        session: Option<&str>,
    ) -> Self {
        self.sessions = Some(sessions);
        self.session = Mutex::new(session.map(str::to_string));
        self
    }

    /// A load, once its id is current, runs `script` with the id and the events for its title
    /// (or its failure). Without it a load answers an empty title.
    pub fn on_load<F, Fut>(mut self, script: F) -> Self
    where
        F: Fn(String, Events) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<String, ConversationError>> + Send + 'static,
    {
        self.on_load = Some(Box::new(move |id, events| Box::pin(script(id, events))));
        self
    }

    /// The prompts rewound to, in order.
    pub fn rewinds(&self) -> Vec<usize> {
        self.rewinds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many times it was told to start over.
    pub fn resets(&self) -> usize {
        self.resets.load(Ordering::SeqCst)
    }

    /// The modes and options chosen, in order.
    pub fn chosen(&self) -> Vec<Choice> {
        self.chosen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether the front end let go of it ([`Conversation::end`]).
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }
}

impl Conversation for Fake {
    fn name(&self) -> &str {
        &self.name
    }

    fn prompt<'a>(
        &'a self,
        prompt: agent_nvim_llm::Prompt,
        events: &'a Events,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Outcome> {
        match &self.on_prompt {
            Some(script) => script(prompt.text, events.clone()),
            None => Box::pin(async { Outcome::Done }),
        }
    }

    fn reset(&self) -> BoxFuture<'_, Result<(), ConversationError>> {
        if self.history.is_none() {
            return Box::pin(async { Err(self.unsupported("start over")) });
        }
        self.resets.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(()) })
    }

    fn model_view(&self, from: usize) -> BoxFuture<'_, Option<Vec<Message>>> {
        let view = self
            .history
            .as_ref()
            .map(|history| history.get(from..).unwrap_or_default().to_vec());
        Box::pin(async move { view })
    }

    fn rewind(&self, turn: usize) -> BoxFuture<'_, Result<(), ConversationError>> {
        if self.history.is_none() {
            return Box::pin(async { Err(self.unsupported("rewind")) });
        }
        self.rewinds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(turn);
        Box::pin(async { Ok(()) })
    }

    fn load<'a>(
        &'a self,
        id: &'a str,
        events: &'a Events,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<String, ConversationError>> {
        if self.sessions.is_none() {
            return Box::pin(async { Err(self.unsupported("load an agent's session")) });
        }
        *self.session.lock().unwrap_or_else(PoisonError::into_inner) = Some(id.to_string());
        match &self.on_load {
            Some(script) => script(id.to_string(), events.clone()),
            None => Box::pin(async { Ok(String::new()) }),
        }
    }

    fn end(self: Arc<Self>) -> BoxFuture<'static, ()> {
        self.ended.store(true, Ordering::SeqCst);
        Box::pin(async {})
    }

    fn agent(&self) -> Option<&dyn AgentSessions> {
        self.sessions.as_ref().map(|_| self as &dyn AgentSessions)
    }
}

impl AgentSessions for Fake {
    fn agent_sessions(&self) -> BoxFuture<'_, Result<Vec<AgentSession>, ConversationError>> {
        let listed = self.sessions.clone().unwrap_or(Ok(Vec::new()));
        Box::pin(async move { listed })
    }

    fn agent_session_id(&self) -> Option<String> {
        self.session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn choose(&self, choice: Choice) -> BoxFuture<'_, Result<(), ConversationError>> {
        self.chosen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(choice);
        Box::pin(async { Ok(()) })
    }
}

/// Runs one prompt of `conversation` and returns what it reported, in order.
pub async fn prompt(conversation: &dyn Conversation, text: &str) -> Vec<crate::ConversationEvent> {
    let (events, mut reported) = tokio::sync::mpsc::unbounded_channel();
    let events = Events::new(events);
    conversation
        .prompt(text.into(), &events, &CancellationToken::new())
        .await;
    drop(events);
    let mut seen = Vec::new();
    while let Some(event) = reported.recv().await {
        seen.push(event);
    }
    seen
}
