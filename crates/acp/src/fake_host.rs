//! A front end for ACP tests: records what the client shows it and answers permission questions
//! as told. Shared by the unit tests (`crate::tests`) and the integration tests
//! (tests/suite/acp.rs, through tests/support). Only with the `test-support` feature.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::editor::Editor;
use crate::elicit::{Elicitation, Elicited};
use crate::{AcpEvent, AcpHost, PermissionAsk, Picked};
use agent_nvim_vocab::events::Event;

/// How a fake user answers permission questions.
#[derive(Clone, Copy)]
pub enum Answer {
    /// Picks the first option of this kind.
    Kind(&'static str),
    /// The n-th question picks the first option of the n-th kind (the last kind after that).
    Kinds(&'static [&'static str]),
    /// Picks an id the agent never offered.
    Bogus,
    /// Never answers.
    Never,
}

pub struct FakeHost {
    pub events: Mutex<Vec<AcpEvent>>,
    pub asks: Mutex<Vec<PermissionAsk>>,
    pub can_ask: bool,
    pub answer: Answer,
    pub buffers: Vec<(PathBuf, String)>,
    pub unsaved: Vec<PathBuf>,
    pub written: Mutex<Vec<PathBuf>>,
    /// What the agent asked with `elicitation/create`, in order.
    pub elicited: Mutex<Vec<Elicitation>>,
    /// How every elicitation is answered (None: never).
    pub elicit_with: Mutex<Option<Elicited>>,
}

impl FakeHost {
    pub fn new(can_ask: bool, answer: Answer) -> Self {
        FakeHost {
            events: Mutex::new(Vec::new()),
            asks: Mutex::new(Vec::new()),
            can_ask,
            answer,
            buffers: Vec::new(),
            unsaved: Vec::new(),
            written: Mutex::new(Vec::new()),
            elicited: Mutex::new(Vec::new()),
            elicit_with: Mutex::new(Some(Elicited::Cancel)),
        }
    }

    pub fn events(&self) -> Vec<AcpEvent> {
        self.events.lock().unwrap().clone()
    }

    /// The agent's message text of the turn, joined.
    pub fn text(&self) -> String {
        self.events()
            .iter()
            .filter_map(|e| match e {
                AcpEvent::Turn(Event::Text { text }) => Some(text.clone()),
                _ => None,
            })
            .collect()
    }

    /// What the test agent reported for `label` (its `{label}: {json}` lines).
    pub fn report(&self, label: &str) -> Value {
        let prefix = format!("{label}: ");
        let text = self.text();
        let line = text
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no report for {label} in {text:?}"));
        serde_json::from_str(line).unwrap()
    }

    pub fn last(&self) -> AcpEvent {
        self.events().last().cloned().unwrap()
    }
}

impl AcpHost for FakeHost {
    fn event(&self, event: AcpEvent) {
        self.events.lock().unwrap().push(event);
    }
    fn ask_permission(&self, request: PermissionAsk) -> BoxFuture<'_, Option<Picked>> {
        let asked = self.asks.lock().unwrap().len();
        let kind = match self.answer {
            Answer::Kinds(kinds) => kinds.get(asked).or(kinds.last()).copied(),
            Answer::Kind(kind) => Some(kind),
            Answer::Bogus | Answer::Never => None,
        };
        let picked = match (self.answer, kind) {
            (Answer::Kind(_) | Answer::Kinds(_), Some(kind)) => request
                .options
                .iter()
                .find(|o| o.kind == kind)
                .map(|o| o.id.clone()),
            (Answer::Bogus, _) => Some("bogus".into()),
            _ => None,
        }
        .map(|option| Picked {
            option,
            edited: None,
        });
        self.asks.lock().unwrap().push(request);
        match self.answer {
            Answer::Never => Box::pin(futures::future::pending()),
            Answer::Kind(_) | Answer::Kinds(_) | Answer::Bogus => Box::pin(async move { picked }),
        }
    }
    fn elicit(&self, asked: Elicitation) -> BoxFuture<'_, Option<Elicited>> {
        self.elicited.lock().unwrap().push(asked);
        match self.elicit_with.lock().unwrap().clone() {
            Some(answer) => Box::pin(async move { Some(answer) }),
            None => Box::pin(futures::future::pending()),
        }
    }
    fn buffer_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Option<String>> {
        let text = self
            .buffers
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, t)| t.clone());
        Box::pin(async move { text })
    }
    fn editor(&self) -> &dyn Editor {
        self
    }
    fn can_ask(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move { self.can_ask })
    }
}

impl Editor for FakeHost {
    fn has_unsaved_changes<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, bool> {
        Box::pin(async move { self.unsaved.iter().any(|p| p == path) })
    }
    fn file_written<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, ()> {
        self.written.lock().unwrap().push(path.to_path_buf());
        Box::pin(async {})
    }
    fn command_finished(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
