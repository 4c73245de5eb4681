//! Saved conversations: the one reader and writer of the session format (`:help
//! agent-sessions`). Each conversation is one append-only JSONL file,
//! `{state_dir}/sessions/{workspace folder}/{id}.jsonl`: a header line, then one record a line,
//! each written whole, redacted and flushed as it happens (by a thread of its own, so saving never
//! waits on the disk in an event's way to the screen). [`Recorded`] is the decorator that saves
//! any [`crate::conversation::Conversation`].

mod agent;
mod recorded;
pub mod resume;
pub mod shape;

pub use agent::AgentNote;
pub use agent_nvim_conversation::saved::*;
pub use recorded::Recorded;

use std::fs::{DirBuilder, File, OpenOptions};
use std::hash::Hasher;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use agent_nvim_vocab::conversation::ConversationEvent;
use agent_nvim_vocab::events::Event;

/// Why a saved conversation could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The id is not one this store hands out (it could name a path elsewhere).
    #[error("'{0}' is not a conversation id")]
    BadId(String),
    /// No file for the id.
    #[error("no saved conversation '{0}' in this workspace")]
    Missing(String),
    /// The file is of another format version.
    #[error(
        "conversation '{id}' was saved in format {version}; this agent-nvim reads format {FORMAT}"
    )]
    Foreign { id: String, version: u32 },
    /// The header is missing or not one.
    #[error("conversation '{0}' has no readable header")]
    Unreadable(String),
    /// The disk said no.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

/// One conversation in [`Store::list`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listed {
    pub id: String,
    /// The first line of the first prompt (empty when there is none, or the file is unreadable).
    pub title: String,
    /// When it was last written, in seconds since the epoch.
    pub updated: u64,
    /// How many prompts it holds.
    pub prompts: u64,
    /// Tokens used by all its turns, in and out.
    pub tokens: u64,
    /// Why it cannot be resumed (unreadable, another format version); absent when it can.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The saved conversations of one workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    dir: PathBuf,
    root: String,
}

impl Store {
    /// The store of the workspace at `root`, under `state_dir` (`stdpath("state")/agent`).
    pub fn new(state_dir: &Path, root: &Path) -> Self {
        Store {
            dir: state_dir.join("sessions").join(workspace_folder(root)),
            root: root.display().to_string(),
        }
    }

    /// The workspace's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the prompts' images are saved: `images/` in the workspace's folder.
    pub fn images_dir(&self) -> PathBuf {
        self.dir.join("images")
    }

    /// Saves each of `images` not saved yet in [`Store::images_dir`] (0600, the folders 0700),
    /// named by its content ([`saved_image_name`]: an FNV-1a hash and the length, so the same
    /// image is kept once), and notes the name in it. A new file is written under a temporary
    /// name and linked into place whole, so a half-written one never stands for an image; a
    /// file already there is taken only when it holds exactly these bytes. One that cannot be
    /// saved is said in the log and left unnamed: the conversation goes on, and a resume says
    /// it is gone.
    pub fn keep_images(&self, images: &mut [agent_nvim_llm::Image]) {
        let dir = self.images_dir();
        for image in images
            .iter_mut()
            .filter(|i| i.file.is_none() && i.present())
        {
            let mut hash = fnv::FnvHasher::default();
            hash.write(&image.data);
            let name = saved_image_name(hash.finish(), image.data.len(), image.extension());
            match save_image(&dir, &name, &image.data) {
                Ok(()) => image.file = Some(name),
                Err(err) => {
                    tracing::warn!(%err, image = %image.name, "an image could not be saved")
                }
            }
        }
    }

    fn path(&self, id: &str) -> Result<PathBuf, StoreError> {
        if !valid_id(id) {
            return Err(StoreError::BadId(id.to_string()));
        }
        Ok(self.dir.join(format!("{id}.jsonl")))
    }

    /// Starts a new file for a conversation of kind `conversation`: its header written, mode
    /// 0600, the folders 0700.
    pub fn create(&self, conversation: &str) -> Result<Writer, StoreError> {
        let io_error = |context: &str| {
            let context = format!("{context} {}", self.dir.display());
            move |source| StoreError::Io { context, source }
        };
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(io_error("cannot create"))?;
        let now = SystemTime::now();
        for _ in 0..16 {
            let id = new_id(now);
            let path = self.path(&id)?;
            let opened = OpenOptions::new()
                .append(true)
                .create_new(true)
                .mode(0o600)
                .open(&path);
            let mut file = match opened {
                Ok(file) => file,
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(err) => return Err(io_error("cannot create a file in")(err)),
            };
            let header = Header {
                agent_nvim_session: FORMAT,
                id: id.clone(),
                workspace: self.root.clone(),
                created: rfc3339(now),
                conversation: conversation.to_string(),
            };
            let mut line = serde_json::to_string(&header).unwrap_or_default();
            line.push('\n');
            file.write_all(line.as_bytes())
                .map_err(io_error("cannot write in"))?;
            return Ok(Writer::start(id, file));
        }
        Err(io_error("no free conversation id in")(io::Error::other(
            "16 tries",
        )))
    }

    /// Opens conversation `id` to append to it (a resumed conversation goes on in its own file).
    /// A partial last line (a crash while writing it) is cut off first, so the next record
    /// starts a line of its own. Every write goes to the end of the file as it is then
    /// (`O_APPEND`): whatever else appends to it, no record is written over another.
    pub fn append(&self, id: &str) -> Result<Writer, StoreError> {
        let path = self.path(id)?;
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|source| missing_or(id, &path, source))?;
        let (whole, len) =
            whole_lines_end(&mut file).map_err(|source| missing_or(id, &path, source))?;
        if whole < len {
            tracing::warn!(path = %path.display(), "cutting off a partial last line before appending");
            file.set_len(whole)
                .map_err(|source| missing_or(id, &path, source))?;
        }
        file.seek(SeekFrom::End(0))
            .map_err(|source| missing_or(id, &path, source))?;
        Ok(Writer::start(id.to_string(), file))
    }

    /// Reads conversation `id`. A line that is not a whole record (a partial last line after a
    /// crash) is skipped with a note in the log.
    pub fn load(&self, id: &str) -> Result<Conversation, StoreError> {
        self.load_with(id, |_| true)
    }

    /// Conversation `id`'s header alone, read from the file's first line: what a resume checks
    /// before it reads the rest.
    pub fn header(&self, id: &str) -> Result<Header, StoreError> {
        use std::io::BufRead as _;
        let path = self.path(id)?;
        let file = File::open(&path).map_err(|source| missing_or(id, &path, source))?;
        let mut line = Vec::new();
        io::BufReader::new(file)
            .take(MAX_HEADER)
            .read_until(b'\n', &mut line)
            .map_err(|source| missing_or(id, &path, source))?;
        let header = read_header(id, line.strip_suffix(b"\n").unwrap_or(&line))?;
        if header.id != id {
            return Err(StoreError::Unreadable(id.to_string()));
        }
        Ok(header)
    }

    /// [`Store::load`], handing `each` every record as soon as it is read, so a resume can show
    /// the first ones while the rest are parsed; `each` returning false stops the reading (what
    /// was read so far is returned).
    pub fn load_with(
        &self,
        id: &str,
        mut each: impl FnMut(&Record) -> bool,
    ) -> Result<Conversation, StoreError> {
        use std::io::BufRead as _;
        let path = self.path(id)?;
        // Read a line at a time, not the whole file first: the first records reach `each`
        // before the rest of a big file is even read.
        let file = File::open(&path).map_err(|source| missing_or(id, &path, source))?;
        let mut reader = io::BufReader::with_capacity(READ_CHUNK, file);
        let mut line = Vec::new();
        let mut next_line = |line: &mut Vec<u8>| {
            line.clear();
            reader
                .read_until(b'\n', line)
                .map_err(|source| missing_or(id, &path, source))
        };
        next_line(&mut line)?;
        let header = read_header(id, line.strip_suffix(b"\n").unwrap_or(&line))?;
        if header.id != id {
            // A file renamed or edited by hand: its header must not send appends elsewhere.
            return Err(StoreError::Unreadable(id.to_string()));
        }
        let mut records = Vec::new();
        for n in 0.. {
            if next_line(&mut line)? == 0 {
                break;
            }
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            if text.is_empty() {
                continue;
            }
            match serde_json::from_slice::<Record>(text) {
                Ok(record) => {
                    let go_on = each(&record);
                    records.push(record);
                    if !go_on {
                        break;
                    }
                }
                Err(err) => tracing::warn!(
                    path = %path.display(),
                    line = n + 2,
                    %err,
                    "skipping a line that is not a whole record"
                ),
            }
        }
        Ok(Conversation {
            header,
            records,
            images: Some(self.images_dir()),
        })
    }

    /// This workspace's conversations, most recently written first. A file that cannot be read
    /// or is of another version is listed with its problem.
    pub fn list(&self) -> Vec<Listed> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut listed: Vec<Listed> = entries
            .filter_map(|entry| entry.ok())
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let id = name.strip_suffix(".jsonl")?;
                valid_id(id).then(|| summarize(id, &entry.path()))
            })
            .collect();
        listed.sort_by(|a, b| (b.updated, &b.id).cmp(&(a.updated, &a.id)));
        listed
    }

    /// The ids of this workspace's conversations, most recently written first, from the
    /// directory alone (no file is read): what completing `:Agent resume ` offers.
    pub fn ids(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut ids: Vec<(u64, String)> = entries
            .filter_map(|entry| entry.ok())
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let id = name.strip_suffix(".jsonl").filter(|id| valid_id(id))?;
                Some((modified_secs(entry.metadata()), id.to_string()))
            })
            .collect();
        ids.sort_by(|a, b| b.cmp(a));
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// The id of the most recently written conversation that can be resumed.
    pub fn latest(&self) -> Option<String> {
        self.list()
            .into_iter()
            .find(|listed| listed.problem.is_none())
            .map(|listed| listed.id)
    }
}

pub(crate) fn missing_or(id: &str, path: &Path, source: io::Error) -> StoreError {
    if source.kind() == io::ErrorKind::NotFound {
        StoreError::Missing(id.to_string())
    } else {
        StoreError::Io {
            context: format!("cannot read {}", path.display()),
            source,
        }
    }
}

/// Where the file's last whole line ends (0 when it has none), and its length: read from the end
/// back, a chunk at a time, so appending to a big conversation does not read all of it.
fn whole_lines_end(file: &mut File) -> io::Result<(u64, u64)> {
    let len = file.seek(SeekFrom::End(0))?;
    let mut end = len;
    let mut chunk = vec![0; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let part = &mut chunk[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(part)?;
        if let Some(at) = part.iter().rposition(|&b| b == b'\n') {
            return Ok((start + at as u64 + 1, len));
        }
        end = start;
    }
    Ok((0, len))
}

/// The longest header line [`Store::header`] reads.
const MAX_HEADER: u64 = 64 * 1024;

/// How much of a conversation's file one read takes while it is loaded.
const READ_CHUNK: usize = 256 * 1024;

fn read_header(id: &str, line: &[u8]) -> Result<Header, StoreError> {
    #[derive(Deserialize)]
    struct Version {
        agent_nvim_session: u32,
    }
    let version = serde_json::from_slice::<Version>(line)
        .map_err(|_| StoreError::Unreadable(id.to_string()))?
        .agent_nvim_session;
    if version != FORMAT {
        return Err(StoreError::Foreign {
            id: id.to_string(),
            version,
        });
    }
    serde_json::from_slice(line).map_err(|_| StoreError::Unreadable(id.to_string()))
}

/// When a file was last written, in seconds since the epoch (0 when that cannot be told).
fn modified_secs(metadata: io::Result<std::fs::Metadata>) -> u64 {
    metadata
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

/// The summaries made so far in this process, by file, with the length and time of writing of
/// the file each was made of: listing again reads only what was written since (the list reads
/// every conversation of the workspace, and a long one is megabytes).
type Summaries = std::collections::HashMap<PathBuf, (u64, SystemTime, Listed)>;

fn summaries() -> &'static std::sync::Mutex<Summaries> {
    static SUMMARIES: std::sync::OnceLock<std::sync::Mutex<Summaries>> = std::sync::OnceLock::new();
    SUMMARIES.get_or_init(Default::default)
}

/// What the list shows of the file of conversation `id` at `path`: made again only when the
/// file changed since it was last made ([`summaries`]).
fn summarize(id: &str, path: &Path) -> Listed {
    let stamp = std::fs::metadata(path)
        .ok()
        .and_then(|meta| Some((meta.len(), meta.modified().ok()?)));
    let cache = summaries();
    if let Some((len, modified)) = stamp {
        let known = cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(path)
            .filter(|(l, m, _)| (*l, *m) == (len, modified))
            .map(|(_, _, listed)| listed.clone());
        if let Some(listed) = known {
            return listed;
        }
    }
    let listed = summarize_file(id, path);
    // What could not be read may be readable next time: not kept.
    if let (Some((len, modified)), None) = (stamp, &listed.problem) {
        cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(path.to_path_buf(), (len, modified, listed.clone()));
    }
    listed
}

/// What the list shows of one file, read without parsing every record: only prompts and the
/// turns' last lines are.
fn summarize_file(id: &str, path: &Path) -> Listed {
    let mut listed = Listed {
        id: id.to_string(),
        title: String::new(),
        updated: modified_secs(std::fs::metadata(path)),
        prompts: 0,
        tokens: 0,
        problem: None,
    };
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(err) => {
            listed.problem = Some(format!("unreadable: {err}"));
            return listed;
        }
    };
    let mut lines = text.split(|&b| b == b'\n');
    let mut named: Option<String> = None;
    match read_header(id, lines.next().unwrap_or_default()) {
        Ok(header) if header.id != id => {
            listed.problem = Some("unreadable: its header names another conversation".into());
            return listed;
        }
        Ok(_) => {}
        Err(err) => {
            listed.problem = Some(match err {
                StoreError::Foreign { version, .. } => format!("format {version}, not {FORMAT}"),
                _ => "unreadable: no header".to_string(),
            });
            return listed;
        }
    }
    for line in lines {
        if line.starts_with(br#"{"t":"prompt""#) {
            listed.prompts += 1;
            if listed.prompts == 1 {
                if let Ok(Record::Prompt { text }) = serde_json::from_slice(line) {
                    listed.title = title_of(&text);
                }
            }
        } else if line.starts_with(br#"{"t":"event","event":{"type":"title""#) {
            // An external agent named the conversation: that name, not the prompt's, from here.
            if let Ok(Record::Event {
                event:
                    ConversationEvent::Agent(agent_nvim_vocab::conversation::AgentUpdate::Title {
                        title,
                    }),
            }) = serde_json::from_slice(line)
            {
                named = title;
            }
        } else if line.starts_with(br#"{"t":"event","event":{"type":"turn_done""#) {
            if let Ok(Record::Event {
                event: ConversationEvent::Turn(Event::TurnDone { input, output, .. }),
            }) = serde_json::from_slice(line)
            {
                listed.tokens += input + output;
            }
        }
    }
    if let Some(title) = named {
        listed.title = title;
    }
    listed
}

pub use agent_nvim_text::text::title_of;

/// Whether `id` is one [`new_id`] makes: digits, lower-case letters and `-`, so it names a file
/// in the folder and nothing else.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-')
}

/// A new id: the UTC time and four random hex digits, `20261201-123456-ab12`, so ids sort by
/// time.
pub fn new_id(now: SystemTime) -> String {
    let (date, time) = utc(now);
    format!("{date}-{time}-{:04x}", fastrand::u16(..))
}

/// Writes `data` as image `name` in `dir` (see [`Store::keep_images`]).
fn save_image(dir: &Path, name: &str, data: &[u8]) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    // The folder itself, never a link to one elsewhere.
    if !std::fs::symlink_metadata(dir)?.is_dir() {
        return Err(io::Error::other("the images folder is not a folder"));
    }
    let target = dir.join(name);
    if let Some(same) = read_saved_image(dir, name) {
        return if same == data {
            Ok(())
        } else {
            Err(io::Error::other(format!("{name} exists with other bytes")))
        };
    }
    let temporary = dir.join(format!(".{name}.{}.part", fastrand::u64(..)));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temporary)
        .and_then(|mut file| file.write_all(data).and_then(|()| file.sync_data()))
        .and_then(|()| std::fs::hard_link(&temporary, &target));
    let _ = std::fs::remove_file(&temporary);
    match written {
        Ok(()) => Ok(()),
        // Saved meanwhile (another Neovim): taken when it is the same.
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            match read_saved_image(dir, name) {
                Some(same) if same == data => Ok(()),
                _ => Err(err),
            }
        }
        Err(err) => Err(err),
    }
}

/// The folder of the workspace at `root`: a readable slug of its last component and a hash of
/// the whole path, `agent.nvim-1f3a5c7e9b2d4f60`. Never `.`/`..`, never holds a `/`.
pub fn workspace_folder(root: &Path) -> String {
    let last = root
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut slug: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    if slug.starts_with('.') {
        slug.replace_range(..1, "_");
    }
    if slug.is_empty() {
        slug.push_str("root");
    }
    let mut hash = fnv::FnvHasher::default();
    hash.write(root.as_os_str().as_encoded_bytes());
    format!("{slug}-{:016x}", hash.finish())
}

/// `(YYYYMMDD, HHMMSS)` of `at`, UTC.
fn utc(at: SystemTime) -> (String, String) {
    let (y, m, d, hh, mm, ss) = agent_nvim_text::time::civil(at);
    (
        format!("{y:04}{m:02}{d:02}"),
        format!("{hh:02}{mm:02}{ss:02}"),
    )
}

fn rfc3339(at: SystemTime) -> String {
    let (y, m, d, hh, mm, ss) = agent_nvim_text::time::civil(at);
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
}

/// What the writer thread is given.
enum Line {
    Record(Box<Record>),
    /// Answered once everything before it is on the disk (tests, and a front end that exits).
    Flush(mpsc::Sender<()>),
}

/// Appends records to one conversation's file, from a thread of its own: [`Writer::write`]
/// only queues, the thread writes each record as one whole line as soon as it gets it (text
/// deltas queued together are joined into one line), every string redacted
/// ([`crate::secrets::redact`]). Dropping every clone ends the thread once the queue is written.
#[derive(Clone)]
pub struct Writer {
    id: String,
    queue: mpsc::Sender<Line>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("id", &self.id).finish()
    }
}

/// Gives the calling thread a lower CPU priority: for the threads that read and write saved
/// conversations, which must not take a core from what the person is waiting for. On a machine
/// with two cores, a resume read at full speed kept Neovim waiting for a core (a batch of the
/// chat took several times as long; BENCHMARKS.md), and a writer woken by an event could run
/// before the event went on. Only
/// the calling thread's: on Linux a nice value is per thread. A thread already nicer than
/// [`BACKGROUND_NICE`] (the backend started under `nice`) keeps its value: it is never raised,
/// even where it could be (root). Elsewhere nothing changes.
pub fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: these calls only read or set the calling thread's scheduling attributes and
        // errno.
        let tid = unsafe { libc::gettid() } as libc::id_t;
        // -1 is a nice value as well as the error return: errno tells them apart.
        unsafe { *libc::__errno_location() = 0 };
        let now = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) };
        if now == -1 && std::io::Error::last_os_error().raw_os_error() != Some(0) {
            let err = std::io::Error::last_os_error();
            tracing::debug!(%err, "a background thread keeps its priority");
            return;
        }
        if now >= BACKGROUND_NICE {
            return;
        }
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, BACKGROUND_NICE) } != 0 {
            let err = std::io::Error::last_os_error();
            tracing::debug!(%err, "a background thread keeps its priority");
        }
    }
}

/// The nice value [`lower_priority`] gives.
#[cfg(target_os = "linux")]
const BACKGROUND_NICE: libc::c_int = 10;

impl agent_nvim_conversation::Recorder for Writer {
    fn record(&self, event: &ConversationEvent) {
        self.write(Record::Event {
            event: event.clone(),
        });
    }
}

impl Writer {
    fn start(id: String, file: File) -> Self {
        let (queue, lines) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("agent-session".into())
            .spawn(move || {
                lower_priority();
                write_lines(file, lines)
            });
        if let Err(err) = spawned {
            tracing::warn!(%err, "cannot start the session writer; this conversation is not saved");
        }
        Writer { id, queue }
    }

    /// The conversation's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Queues `record`; it is on the disk a moment later.
    pub fn write(&self, record: Record) {
        let _ = self.queue.send(Line::Record(Box::new(record)));
    }

    /// Waits until everything queued before is written.
    pub fn flush(&self) {
        let (done, wait) = mpsc::channel();
        if self.queue.send(Line::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

fn write_lines(mut file: File, lines: mpsc::Receiver<Line>) {
    let mut failed = false;
    let mut next = lines.recv().ok();
    while let Some(line) = next.take() {
        let mut record = match line {
            Line::Record(record) => *record,
            Line::Flush(done) => {
                let _ = done.send(());
                next = lines.recv().ok();
                continue;
            }
        };
        // Join the text deltas already waiting, so a fast stream is not a line a delta.
        while let Record::Event {
            event: ConversationEvent::Turn(Event::Text { text }),
        } = &mut record
        {
            match lines.try_recv() {
                Ok(Line::Record(more)) => match *more {
                    Record::Event {
                        event: ConversationEvent::Turn(Event::Text { text: more }),
                    } => text.push_str(&more),
                    other => {
                        next = Some(Line::Record(Box::new(other)));
                        break;
                    }
                },
                Ok(flush) => {
                    next = Some(flush);
                    break;
                }
                Err(_) => break,
            }
        }
        let mut text = match serde_json::to_string(&record) {
            Ok(text) => crate::secrets::redact(&text).into_owned(),
            Err(err) => {
                tracing::warn!(%err, "a session record could not be written");
                continue;
            }
        };
        text.push('\n');
        if let Err(err) = file.write_all(text.as_bytes()) {
            if !failed {
                tracing::warn!(%err, "cannot write the session file; later records may be lost");
            }
            failed = true;
        }
        if next.is_none() {
            next = lines.recv().ok();
        }
    }
}

#[cfg(test)]
mod tests;
