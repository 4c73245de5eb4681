//! The saved-record types of a conversation (`:help agent-sessions`): the header and records of
//! a session file as they are written and read, and what a saved conversation gives back (the
//! model's view, its compactions, its title). The engine's store reads and writes the files;
//! these are what the files hold.

use serde::{Deserialize, Serialize};

use agent_nvim_llm::{CallResult, Image, Message, Prompt, ToolCall};
use agent_nvim_text::text::title_of;
use agent_nvim_vocab::approval::Decision;
use agent_nvim_vocab::conversation::ConversationEvent;
use agent_nvim_vocab::events::Event;

/// The format's version, the header's `agent_nvim_session`. Bumped when a record changes shape;
/// a file of another version is listed as such and never loaded.
pub const FORMAT: u32 = 1;

/// The first line of a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The format version ([`FORMAT`]).
    pub agent_nvim_session: u32,
    /// The conversation's id, also the file's name.
    pub id: String,
    /// The workspace root it ran in.
    pub workspace: String,
    /// When it began, UTC, `2026-12-01T12:34:56Z`.
    pub created: String,
    /// The conversation's kind ([`crate::Conversation::name`]).
    pub conversation: String,
}

/// One line after the header, with a `t` field naming its kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Record {
    /// What the user sent, context included, exactly as the conversation got it.
    Prompt { text: String },
    /// What the conversation reported, as the chat got it (text, tool rows, usage, errors).
    Event { event: ConversationEvent },
    /// How a question was answered, and the note its tool row shows.
    Decided {
        tool: String,
        decision: Decision,
        note: String,
    },
    /// What the model's view of the conversation gained in the turn just ended: the messages
    /// a resumed conversation sends again.
    Model { messages: Vec<Saved> },
    /// The conversation was rewound: the model's view is cut to its first `kept` messages
    /// (those saved before this line); `model` lines after it continue from there.
    Rewound { kept: usize },
    /// The images the prompt just before it holds (`:help agent-images`), each saved in the
    /// session folder's `images/`.
    Images { images: Vec<SavedImage> },
    /// A new branch starts (`:help agent-branches`): the view is cut to its first `kept`
    /// messages as a rewind cuts it, and the branch it cut is kept, to switch back to.
    Branched { kept: usize },
    /// The person switched branches: the view is again what it was when the branch left by
    /// record `to` (a `branched` or `switched` one, counted from 0 after the header) was left.
    Switched { to: usize },
}

/// An image of a prompt as saved: what it is, and the file in the session folder's `images/`
/// that holds its bytes (empty when it could not be saved: it is then not sent again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedImage {
    pub name: String,
    pub media_type: String,
    pub width: u32,
    pub height: u32,
    pub file: String,
}

impl From<&Image> for SavedImage {
    fn from(image: &Image) -> Self {
        SavedImage {
            name: image.name.clone(),
            media_type: image.media_type.clone(),
            width: image.width,
            height: image.height,
            file: image.file.clone().unwrap_or_default(),
        }
    }
}

impl SavedImage {
    /// The image it describes, its bytes not yet read ([`Conversation::model_view`] reads
    /// them).
    fn unread(&self) -> Image {
        Image::saved(
            self.name.clone(),
            self.media_type.clone(),
            (self.width, self.height),
            self.file.clone(),
            None,
        )
    }
}

/// The bytes of the saved image `file` in `dir`, when it is one agent.nvim saved there: a
/// name as [`saved_image_name`] makes them (so nothing outside `dir`), a regular file reached
/// without following a link (opened without waiting on a FIFO), of the length its name says,
/// holding an image. Anything else is not sent (the model is told it is gone).
pub fn read_saved_image(dir: &std::path::Path, file: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let length = saved_image_length(file)?;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir.join(file))
        .ok()?;
    let meta = opened.metadata().ok()?;
    if !meta.is_file() || meta.len() != length {
        return None;
    }
    let mut bytes = Vec::new();
    opened.take(length).read_to_end(&mut bytes).ok()?;
    let image = image_kind(&bytes);
    (bytes.len() as u64 == length && image).then_some(bytes)
}

/// Whether `bytes` start as a png, jpeg, gif or webp does.
fn image_kind(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x89PNG\r\n\x1a\n")
        || bytes.starts_with(&[0xff, 0xd8, 0xff])
        || bytes.starts_with(b"GIF87a")
        || bytes.starts_with(b"GIF89a")
        || (bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP")
}

/// The name an image of `length` bytes whose content hashes to `hash` is saved under, with
/// extension `ext`: `{hash, 16 hex digits}-{length}.{ext}`.
pub fn saved_image_name(hash: u64, length: usize, ext: &str) -> String {
    format!("{hash:016x}-{length}.{ext}")
}

/// Whether `file` in `dir` is an image agent.nvim saved there, as [`read_saved_image`] checks
/// one, by its first bytes only: what a picture viewer may be handed (one that picks its
/// decoder by the content must never be given a file of another kind under an image's name).
pub fn is_saved_image(dir: &std::path::Path, file: &str) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let Some(length) = saved_image_length(file) else {
        return false;
    };
    let Ok(opened) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir.join(file))
    else {
        return false;
    };
    if !opened
        .metadata()
        .is_ok_and(|meta| meta.is_file() && meta.len() == length)
    {
        return false;
    }
    let mut head = Vec::with_capacity(12);
    opened.take(12).read_to_end(&mut head).is_ok() && image_kind(&head)
}

/// The length a name [`saved_image_name`] made says, when `file` is such a name.
fn saved_image_length(file: &str) -> Option<u64> {
    let (stem, ext) = file.rsplit_once('.')?;
    let (hash, length) = stem.split_once('-')?;
    let hex = hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit());
    let ext_ok = matches!(ext, "png" | "jpg" | "gif" | "webp");
    let digits = !length.is_empty() && length.bytes().all(|b| b.is_ascii_digit());
    if !(hex && ext_ok && digits) {
        return None;
    }
    length.parse().ok()
}

/// One message of the model's view, as saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Saved {
    /// The user's prompt, and its images when it has any.
    User {
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<SavedImage>,
    },
    /// One model response: its text and its tool calls, arguments as the model sent them, and
    /// the reasoning the provider wants back (absent in records written before it was kept).
    Assistant {
        text: String,
        calls: Vec<SavedCall>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasoning: Vec<SavedReasoning>,
    },
    /// The results of the previous response's calls.
    Results { results: Vec<SavedResult> },
}

/// A tool call as saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedCall {
    pub id: String,
    pub name: String,
    /// The arguments' text exactly as the model sent it.
    pub args: String,
}

/// A piece of reasoning as saved: where it came from (`anthropic`, `responses`), its place
/// among the response's parts, and the block or item as received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedReasoning {
    pub origin: String,
    pub at: usize,
    pub item: serde_json::Value,
}

/// A tool result as saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedResult {
    pub id: String,
    pub ok: bool,
    pub text: String,
}

impl From<&Message> for Saved {
    fn from(message: &Message) -> Self {
        match message {
            Message::User(prompt) => Saved::User {
                text: prompt.text.clone(),
                images: prompt.images.iter().map(SavedImage::from).collect(),
            },
            Message::Assistant {
                text,
                calls,
                reasoning,
            } => Saved::Assistant {
                text: text.clone(),
                reasoning: reasoning
                    .iter()
                    .map(|r| SavedReasoning {
                        origin: r.origin.name().to_string(),
                        at: r.at,
                        item: r.item.clone(),
                    })
                    .collect(),
                calls: calls
                    .iter()
                    .map(|call| SavedCall {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        args: call.raw_args.clone(),
                    })
                    .collect(),
            },
            Message::Results(results) => Saved::Results {
                results: results
                    .iter()
                    .map(|r| SavedResult {
                        id: r.id.clone(),
                        ok: r.ok,
                        text: r.text.clone(),
                    })
                    .collect(),
            },
        }
    }
}

impl From<Saved> for Message {
    fn from(saved: Saved) -> Self {
        match saved {
            Saved::User { text, images } => Message::User(Prompt {
                text,
                images: images.iter().map(SavedImage::unread).collect(),
                audio: Vec::new(),
            }),
            Saved::Assistant {
                text,
                calls,
                reasoning,
            } => Message::Assistant {
                text,
                reasoning: reasoning
                    .into_iter()
                    .filter_map(|r| {
                        Some(agent_nvim_llm::Reasoning {
                            origin: agent_nvim_llm::Origin::parse(&r.origin)?,
                            at: r.at,
                            item: r.item,
                        })
                    })
                    .collect(),
                calls: calls
                    .into_iter()
                    .map(|c| ToolCall::new(c.id, c.name, c.args))
                    .collect(),
            },
            Saved::Results { results } => Message::Results(
                results
                    .into_iter()
                    .map(|r| CallResult {
                        id: r.id,
                        ok: r.ok,
                        text: r.text,
                    })
                    .collect(),
            ),
        }
    }
}

/// A saved conversation as [`Store::load`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    pub header: Header,
    /// Every whole record, in order.
    pub records: Vec<Record>,
    /// The folder its prompts' images are saved in, when it has one.
    pub images: Option<std::path::PathBuf>,
}

impl Conversation {
    /// The model's view: every message the `model` records hold, in order. A turn the file
    /// holds no `model` record for (the session ended while it ran: a crash, a kill) is given as
    /// its prompt and a reply saying what the turn had done when it was cut off, so the model
    /// still knows of it and the prompts are counted as the chat shows them.
    pub fn model_view(&self) -> Vec<Message> {
        let mut view = View::default();
        for record in &self.records {
            view.take(record);
        }
        let mut messages: Vec<Message> = view.finish();
        for message in &mut messages {
            let Message::User(prompt) = message else {
                continue;
            };
            for image in &mut prompt.images {
                let data = self.images.as_deref().and_then(|dir| {
                    read_saved_image(dir, image.file.as_deref().unwrap_or_default())
                });
                if let Some(data) = data {
                    image.data = data.into();
                }
            }
        }
        messages
    }

    /// The compactions in force at the file's end: each `compacted` event recorded, less those
    /// a later rewind went back before.
    pub fn compactions(&self) -> Vec<agent_nvim_vocab::events::Compaction> {
        let mut view = View::<IsPrompt>::default();
        for record in &self.records {
            view.take(record);
        }
        view.compactions
    }

    /// What its turns and the compactions asked for outside a turn cost, in dollars, where a
    /// price was known: a rewind does not give back what was spent.
    pub fn cost(&self) -> f64 {
        use agent_nvim_vocab::events::Event;
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::Event {
                    event:
                        ConversationEvent::Turn(
                            Event::TurnDone { cost, .. } | Event::Compacted { cost, .. },
                        ),
                } => *cost,
                _ => None,
            })
            .sum()
    }

    /// The view over every record, as far as it tells whether each message is a prompt: for
    /// the branches ([`View::branches`], [`View::switch_target`], [`View::path`]).
    pub fn tree(&self) -> View<IsPrompt> {
        let mut view = View::<IsPrompt>::default();
        for record in &self.records {
            view.take(record);
        }
        view
    }

    /// Whether it ever branched (`branched` or `switched` records).
    pub fn has_branches(&self) -> bool {
        self.records
            .iter()
            .any(|r| matches!(r, Record::Branched { .. } | Record::Switched { .. }))
    }

    /// How many messages [`Conversation::model_view`] has, without building them.
    pub fn model_len(&self) -> usize {
        let mut view = View::<IsPrompt>::default();
        for record in &self.records {
            view.take(record);
        }
        view.finish().len()
    }

    /// Its title: the last one an external agent gave it (`session_info_update`), else the
    /// first line of its first prompt.
    pub fn title(&self) -> String {
        let named =
            self.records
                .iter()
                .fold(None, |named, record| match record {
                    Record::Event {
                        event:
                            ConversationEvent::Agent(
                                agent_nvim_vocab::conversation::AgentUpdate::Title { title },
                            ),
                    } => title.clone(),
                    _ => named,
                });
        named.unwrap_or_else(|| {
            self.records
                .iter()
                .find_map(|record| match record {
                    Record::Prompt { text } => Some(title_of(text)),
                    _ => None,
                })
                .unwrap_or_default()
        })
    }
}

/// The model's view as a file's records build it, one record at a time: the messages
/// ([`Message`], for [`Conversation::model_view`]) or only whether each is a prompt
/// ([`IsPrompt`], for numbering a replayed cut while the file is still being read).
///
/// It also follows the conversation's tree of branches (`:help agent-branches`): which records
/// the current branch is made of (its `path`), where each of its prompts is, and, at each
/// `branched` and `switched` record, the branch that was left, so a later `switched` record can
/// go back to it.
#[derive(Debug)]
pub struct View<T> {
    messages: Vec<T>,
    cut: Option<CutTurn>,
    /// The compactions recorded and not rewound.
    compactions: Vec<agent_nvim_vocab::events::Compaction>,
    /// How many records it took.
    taken: usize,
    /// The records the current branch is made of, by index (`branched`, `switched` and
    /// `rewound` records are not part of any).
    path: Vec<usize>,
    /// The current branch's prompts, in order.
    prompts: Vec<PromptAt>,
    /// The branches left, each as it was when it was left.
    tips: Vec<Tip<T>>,
}

/// Where a prompt of a branch is: its record, its message's place in the view, and its place
/// in the branch's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PromptAt {
    record: usize,
    message: usize,
    path: usize,
}

/// A branch as it was when it was left: the record that left it (its `at`), and what the view
/// held then.
#[derive(Debug, Clone)]
struct Tip<T> {
    at: usize,
    /// Left by a `branched` or `switched` record: a branch the person kept (a rewind's is not).
    kept: bool,
    messages: Vec<T>,
    compactions: Vec<agent_nvim_vocab::events::Compaction>,
    path: Vec<usize>,
    prompts: Vec<PromptAt>,
}

/// How many branches one prompt of the current branch has (`branch 2 of 3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BranchAt {
    /// The prompt's number in the current branch (from 1).
    pub turn: usize,
    /// Which of them the current branch is (from 1), oldest first.
    pub index: usize,
    pub count: usize,
}

impl<T> Default for View<T> {
    fn default() -> Self {
        View {
            messages: Vec::new(),
            cut: None,
            compactions: Vec::new(),
            taken: 0,
            path: Vec::new(),
            prompts: Vec::new(),
            tips: Vec::new(),
        }
    }
}

/// What a [`View`] holds of each message.
pub trait ViewItem: Sized {
    /// A message a `model` record saved.
    fn saved(saved: &Saved) -> Self;
    /// A cut-off turn's prompt and reply.
    fn cut_off(turn: CutTurn) -> [Self; 2];
}

impl ViewItem for Message {
    fn saved(saved: &Saved) -> Self {
        Message::from(saved.clone())
    }

    fn cut_off(turn: CutTurn) -> [Self; 2] {
        turn.into_messages()
    }
}

/// Whether a message of the view is one of the user's prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IsPrompt(pub bool);

impl ViewItem for IsPrompt {
    fn saved(saved: &Saved) -> Self {
        IsPrompt(matches!(saved, Saved::User { .. }))
    }

    fn cut_off(_turn: CutTurn) -> [Self; 2] {
        [IsPrompt(true), IsPrompt(false)]
    }
}

impl<T: ViewItem + Clone> View<T> {
    /// Takes the next record of the file.
    pub fn take(&mut self, record: &Record) {
        let index = self.taken;
        self.taken += 1;
        match record {
            Record::Prompt { text } => {
                self.end_cut();
                self.prompts.push(PromptAt {
                    record: index,
                    message: self.messages.len(),
                    path: self.path.len(),
                });
                self.path.push(index);
                self.cut = Some(CutTurn::new(text));
            }
            Record::Event { event } => {
                self.path.push(index);
                if let agent_nvim_vocab::conversation::ConversationEvent::Turn(Event::Compacted {
                    prompts,
                    upto,
                    summary,
                    ..
                }) = event
                {
                    self.compactions.push(agent_nvim_vocab::events::Compaction {
                        upto: *upto,
                        summary: summary.clone(),
                        prompts: *prompts,
                    });
                }
                if let Some(turn) = self.cut.as_mut() {
                    turn.saw(event);
                }
            }
            Record::Model { messages } => {
                self.path.push(index);
                self.cut = None;
                self.messages.extend(messages.iter().map(T::saved));
            }
            Record::Rewound { kept } => {
                // A rewind comes after a resume, which had the cut-off turn in its view.
                self.end_cut();
                self.leave(index, false);
                self.cut_to(*kept);
            }
            Record::Branched { kept } => {
                self.end_cut();
                self.leave(index, true);
                self.cut_to(*kept);
            }
            Record::Switched { to } => {
                self.end_cut();
                let Some(tip) = self.tips.iter().find(|tip| tip.at == *to).cloned() else {
                    return;
                };
                self.leave(index, true);
                self.messages = tip.messages;
                self.compactions = tip.compactions;
                self.path = tip.path;
                self.prompts = tip.prompts;
            }
            Record::Images { images } => {
                self.path.push(index);
                if let Some(turn) = self.cut.as_mut() {
                    turn.images = images.iter().map(SavedImage::unread).collect();
                }
            }
            Record::Decided { .. } => self.path.push(index),
        }
    }

    /// Keeps the current branch as a tip, left by record `at`.
    fn leave(&mut self, at: usize, kept: bool) {
        self.tips.push(Tip {
            at,
            kept,
            messages: self.messages.clone(),
            compactions: self.compactions.clone(),
            path: self.path.clone(),
            prompts: self.prompts.clone(),
        });
    }

    /// Cuts the view to its first `kept` messages: the prompts from there on leave the branch,
    /// and the records from the first of them.
    fn cut_to(&mut self, kept: usize) {
        self.messages.truncate(kept);
        self.compactions.retain(|c| c.upto <= kept);
        if let Some(first) = self.prompts.iter().position(|p| p.message >= kept) {
            self.path.truncate(self.prompts[first].path);
            self.prompts.truncate(first);
        }
    }

    /// The messages so far, a turn still open given as cut off.
    pub fn finish(mut self) -> Vec<T> {
        self.end_cut();
        self.messages
    }

    /// The records the current branch is made of, in order.
    pub fn path(&self) -> &[usize] {
        &self.path
    }

    /// The records of the current branch's prompts, in order.
    pub fn prompt_records(&self) -> Vec<usize> {
        self.prompts.iter().map(|p| p.record).collect()
    }

    /// The branches (kept ones, and the current one) that share the current branch's prompts
    /// before its `turn`-th, told apart by the record of their `turn`-th prompt: each such
    /// record with the latest tip that holds it (None for the current branch), oldest first.
    fn alternatives(&self, turn: usize) -> Vec<(usize, Option<usize>)> {
        let Some(at) = turn.checked_sub(1) else {
            return Vec::new();
        };
        let shared = |prompts: &[PromptAt]| {
            prompts.len() > at
                && prompts[..at].iter().map(|p| p.record).eq(self
                    .prompts
                    .iter()
                    .take(at)
                    .map(|p| p.record))
        };
        let mut found: Vec<(usize, Option<usize>)> = Vec::new();
        for tip in self
            .tips
            .iter()
            .filter(|tip| tip.kept && shared(&tip.prompts))
        {
            let record = tip.prompts[at].record;
            match found.iter_mut().find(|(r, _)| *r == record) {
                Some(entry) => entry.1 = Some(tip.at),
                None => found.push((record, Some(tip.at))),
            }
        }
        if let Some(current) = self.prompts.get(at) {
            match found.iter_mut().find(|(r, _)| *r == current.record) {
                Some(entry) => entry.1 = None,
                None => found.push((current.record, None)),
            }
        }
        found.sort_by_key(|(record, _)| *record);
        found
    }

    /// Every prompt of the current branch that has other branches: its number, which branch
    /// the current one is, and how many there are.
    pub fn branches(&self) -> Vec<BranchAt> {
        (1..=self.prompts.len())
            .filter_map(|turn| {
                let found = self.alternatives(turn);
                let index = found.iter().position(|(_, tip)| tip.is_none())?;
                (found.len() > 1).then_some(BranchAt {
                    turn,
                    index: index + 1,
                    count: found.len(),
                })
            })
            .collect()
    }

    /// The tip to switch to from the current branch at its `turn`-th prompt: the branch `step`
    /// places after (or before, when negative) the current one there, as it was last left.
    /// None when there is no such branch.
    pub fn switch_target(&self, turn: usize, step: i64) -> Option<usize> {
        let found = self.alternatives(turn);
        let current = found.iter().position(|(_, tip)| tip.is_none())? as i64;
        let target = usize::try_from(current + step).ok()?;
        found.get(target).and_then(|(_, tip)| *tip)
    }

    fn end_cut(&mut self) {
        if let Some(turn) = self.cut.take() {
            self.messages.extend(T::cut_off(turn));
        }
    }
}

impl View<IsPrompt> {
    /// How many prompts the view holds now.
    pub fn prompts(&self) -> usize {
        self.messages.iter().filter(|m| m.0).count()
    }
}

/// A turn whose end the file never got: its prompt, the text the model had written and the
/// tools that had finished.
#[derive(Debug)]
pub struct CutTurn {
    prompt: String,
    images: Vec<Image>,
    text: String,
    tools: Vec<String>,
}

impl CutTurn {
    fn new(prompt: &str) -> Self {
        CutTurn {
            prompt: prompt.to_string(),
            images: Vec::new(),
            text: String::new(),
            tools: Vec::new(),
        }
    }

    fn saw(&mut self, event: &ConversationEvent) {
        match event {
            ConversationEvent::Turn(Event::Text { text }) => self.text.push_str(text),
            ConversationEvent::Turn(Event::ToolFinished {
                ok, summary, name, ..
            }) => {
                let what = if summary.is_empty() { name } else { summary };
                let how = if *ok { "done" } else { "failed" };
                self.tools.push(format!("{what} ({how})"));
            }
            _ => {}
        }
    }

    /// The prompt and a reply: the text so far, the tools that finished, and that it was cut off.
    fn into_messages(self) -> [Message; 2] {
        let mut reply = self.text;
        if !reply.is_empty() {
            reply.push_str("\n\n");
        }
        reply.push_str(CUT_OFF);
        if !self.tools.is_empty() {
            reply.push_str(" Tools that had finished: ");
            reply.push_str(&self.tools.join("; "));
            reply.push('.');
        }
        [
            Message::User(Prompt {
                text: self.prompt,
                images: self.images,
                audio: Vec::new(),
            }),
            Message::Assistant {
                text: reply,
                calls: Vec::new(),
                reasoning: Vec::new(),
            },
        ]
    }
}

/// What a cut-off turn's reply says of it.
pub const CUT_OFF: &str = "[This turn was cut off: the session ended before it finished.]";
