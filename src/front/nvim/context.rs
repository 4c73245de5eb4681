//! The chat input's context requests: `files`, the workspace's files matching what
//! follows an `@` ([`crate::workspace::files`]), and `attach`, what a prompt's `@path`,
//! `#buffer`, `#selection`, ... attach, read through the path check and clamped as read_file
//! clamps ([`crate::tools::read_file::attachment`]). Lua formats the prompt from the answers.

use rmpv::Value;
use serde::Deserialize;

use super::protocol::{Attach, AttachItem, Files};
use crate::display::{self, Layout};
use crate::editor::Editor;
use crate::llm::{audio, image, Audio, Image};
use crate::text::clamp_marked;
use crate::tools::{attachment, image_bytes, Attachment, ImageBytes};
use crate::workspace::files::FileIndex;
use crate::workspace::Workspace;

/// How many matches `files` answers when Lua asks for no number.
const DEFAULT_LIMIT: usize = 50;

/// The longest `attach` may take: Neovim waits for it while the prompt is sent.
pub(super) const ATTACH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The one map argument of a request, decoded (an error string Lua shows when it is not one).
pub(super) fn decode<T: for<'de> Deserialize<'de>>(args: &[Value]) -> Result<T, Value> {
    let first = args.first().cloned().unwrap_or(Value::Nil);
    rmpv::ext::from_value(first).map_err(|err| Value::from(format!("agent: bad request ({err})")))
}

/// `files`: the best matches of `query`, best first, and how many files there are.
pub(super) async fn files(index: &std::sync::Arc<FileIndex>, files: Files) -> Value {
    let limit = files.limit.map_or(DEFAULT_LIMIT, |n| n.clamp(1, 1000));
    let found = index.find(&files.query, limit).await;
    Value::Map(vec![
        (
            Value::from("files"),
            Value::Array(found.files.into_iter().map(Value::from).collect()),
        ),
        (Value::from("total"), Value::from(found.total as u64)),
        (Value::from("partial"), Value::from(found.partial)),
    ])
}

/// The most characters one prompt's attachments hold together: each is clamped as read_file
/// clamps, and `#buffers` with fifty buffers open must not send a million.
pub(super) const MAX_TOTAL_CHARS: usize = 100_000;

/// `attach`: each item as the prompt attaches it, in order; once those before hold
/// [`MAX_TOTAL_CHARS`] (each at most [`crate::text::MAX_CHARS`]), the rest are left out, each
/// saying so (a word that is no file stays nothing).
pub(super) async fn attach(
    workspace: &Workspace,
    editor: &dyn Editor,
    held: &Held,
    store: Option<&crate::sessions::Store>,
    attach: Attach,
) -> Value {
    // Images are saved as they are attached only for a picture in the chat; else when sent.
    let store = store.filter(|_| attach.preview);
    let mut answers = Vec::with_capacity(attach.items.len());
    let mut total = 0;
    for value in attach.items {
        let problem = |label: String, problem: &str| {
            Value::Map(vec![
                (Value::from("label"), Value::from(label)),
                (Value::from("problem"), Value::from(problem)),
            ])
        };
        let Some(item) = AttachItem::decode(&value) else {
            answers.push(problem(
                "@ ?".into(),
                "not an attachment (a bug; please report it with :Agent log)",
            ));
            continue;
        };
        let answer = match item {
            AttachItem::Path { path } if is_image_name(&path) => {
                let label = format!("@ {}", display::one_line(&path));
                match image_bytes(workspace, &path, image::MAX_INPUT as u64).await {
                    ImageBytes::File { rel, bytes } => {
                        let name = rel.rsplit('/').next().unwrap_or(&rel).to_string();
                        prepared(held, store, label, name, bytes).await
                    }
                    ImageBytes::Missing => Value::Map(vec![(Value::from("missing"), true.into())]),
                    ImageBytes::Problem(why) => problem(label, &display::one_line(&why)),
                }
            }
            AttachItem::Path { path } if audio::is_audio_name(&path) => {
                let label = format!("@ {}", display::one_line(&path));
                match image_bytes(workspace, &path, audio::MAX_BYTES as u64).await {
                    ImageBytes::File { rel, bytes } => {
                        let name = rel.rsplit('/').next().unwrap_or(&rel).to_string();
                        match Audio::prepare(&name, bytes) {
                            Ok(clip) => {
                                let row = clip.row();
                                let id = held.hold(Media::Audio(clip));
                                Value::Map(vec![
                                    (Value::from("label"), Value::from(row)),
                                    (Value::from("audio"), Value::from(id)),
                                    (Value::from("chars"), Value::from(0u64)),
                                ])
                            }
                            Err(err) => problem(label, &display::one_line(&err.to_string())),
                        }
                    }
                    ImageBytes::Missing => Value::Map(vec![(Value::from("missing"), true.into())]),
                    ImageBytes::Problem(why) => problem(label, &display::one_line(&why)),
                }
            }
            AttachItem::Clipboard { argv } => match clipboard(&argv).await {
                Ok(bytes) => {
                    prepared(held, store, "#clipboard".into(), "clipboard".into(), bytes).await
                }
                Err(why) => problem("#clipboard".into(), &why),
            },
            AttachItem::Held { image: id } => match held.get(id) {
                Some(Media::Image(image)) => image_answer(&image, id, store),
                Some(Media::Audio(_)) | None => problem(
                    "image".into(),
                    "this pasted image is no longer held (the backend restarted?); paste it again",
                ),
            },
            AttachItem::Path { path } => match attachment(workspace, editor, &path).await {
                Attachment::File {
                    rel,
                    text,
                    chars,
                    truncated,
                    unsaved,
                } => attached(
                    format!("@ {}", display::one_line(&rel)),
                    &text,
                    chars,
                    truncated,
                    unsaved,
                ),
                Attachment::Missing => Value::Map(vec![(Value::from("missing"), true.into())]),
                Attachment::Problem(problem) => Value::Map(vec![
                    (
                        Value::from("label"),
                        Value::from(format!("@ {}", display::one_line(&path))),
                    ),
                    (
                        Value::from("problem"),
                        Value::from(crate::secrets::redact(&display::one_line(&problem)).as_ref()),
                    ),
                ]),
            },
            AttachItem::Text { label, text } => {
                let clamped = clamp_marked(&text);
                let label = crate::secrets::redact(&display::one_line(&label)).into_owned();
                attached(
                    label,
                    &clamped.text,
                    clamped.chars,
                    clamped.truncated,
                    false,
                )
            }
        };
        let missing = field_of(&answer, "missing").is_some();
        if total >= MAX_TOTAL_CHARS && !missing {
            let label = field_of(&answer, "label").and_then(Value::as_str);
            answers.push(problem(
                label.unwrap_or("@ ?").to_string(),
                &format!(
                    "left out: this prompt's attachments already hold {MAX_TOTAL_CHARS} characters"
                ),
            ));
            continue;
        }
        total += field_of(&answer, "chars")
            .and_then(Value::as_u64)
            .unwrap_or(0) as usize;
        answers.push(answer);
    }
    Value::Array(answers)
}

/// The file names `@` attaches as an image, by their extension.
fn is_image_name(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    [".png", ".jpg", ".jpeg", ".gif", ".webp"]
        .iter()
        .any(|ext| lower.ends_with(ext))
}

/// How long the clipboard tool may take to print the image, then to exit: within
/// [`ATTACH_TIMEOUT`] together, which Neovim waits for.
const CLIPBOARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
const CLIPBOARD_EXIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The clipboard's image: what `argv` writes (Lua chose the tool: `wl-paste`, `xclip`, ...),
/// at most [`image::MAX_INPUT`] bytes, in [`CLIPBOARD_TIMEOUT`]. Killed if it takes longer.
async fn clipboard(argv: &[String]) -> Result<Vec<u8>, String> {
    use tokio::io::AsyncReadExt;
    let Some((program, args)) = argv.split_first() else {
        return Err("no clipboard tool was named".into());
    };
    let tool = std::path::Path::new(program)
        .file_name()
        .map_or(program.clone(), |n| n.to_string_lossy().into_owned());
    // A group of its own, so what a wrapper script starts is killed with it.
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| format!("{tool} could not be started: {err}"))?;
    let group = child.id();
    let kill_group = || {
        if let Some(pid) = group.and_then(|pid| i32::try_from(pid).ok()) {
            // SAFETY: kill(2) on the group this function made; no memory is involved.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    };
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| format!("{tool} gave no output"))?;
    let read = async {
        let mut bytes = Vec::new();
        (&mut stdout)
            .take(image::MAX_INPUT as u64 + 1)
            .read_to_end(&mut bytes)
            .await
            .map(|_| bytes)
    };
    let bytes = match tokio::time::timeout(CLIPBOARD_TIMEOUT, read).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(err)) => return Err(format!("{tool} could not be read: {err}")),
        Err(_) => {
            kill_group();
            return Err(format!(
                "{tool} gave nothing in {} s",
                CLIPBOARD_TIMEOUT.as_secs()
            ));
        }
    };
    drop(stdout);
    if bytes.len() > image::MAX_INPUT {
        kill_group();
        return Err(format!(
            "the clipboard's image is over {} MB",
            image::MAX_INPUT / 1024 / 1024
        ));
    }
    let status = tokio::time::timeout(CLIPBOARD_EXIT, child.wait()).await;
    if status.is_err() {
        kill_group();
    }
    let ok = matches!(status, Ok(Ok(status)) if status.success());
    if !ok || bytes.is_empty() {
        return Err(format!("the clipboard holds no image ({tool} found none)"));
    }
    Ok(apple_data(&bytes).unwrap_or(bytes))
}

/// The bytes of osascript's `«data PNGf89504E47...»` (how it prints the clipboard as PNG), when
/// `out` is that.
fn apple_data(out: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(out).ok()?.trim();
    let hex = text.strip_prefix("«data ")?.strip_suffix('»')?.get(4..)?;
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `bytes` made ready to send (scaled off the async threads), saved in the session folder
/// (so the chat can show it as a picture, and its conversation finds it saved), held under a
/// new number, and answered; or why not, under `label`.
async fn prepared(
    held: &Held,
    store: Option<&crate::sessions::Store>,
    label: String,
    name: String,
    bytes: Vec<u8>,
) -> Value {
    let keeper = store.cloned();
    let made = tokio::task::spawn_blocking(move || {
        let mut image = Image::prepare(&name, bytes)?;
        if let Some(keeper) = keeper {
            keeper.keep_images(std::slice::from_mut(&mut image));
        }
        Ok::<_, crate::llm::ImageError>(image)
    })
    .await;
    match made {
        Ok(Ok(image)) => {
            let id = held.hold(Media::Image(image.clone()));
            image_answer(&image, id, store)
        }
        Ok(Err(err)) => problem_value(label, &err.to_string()),
        Err(err) => problem_value(label, &format!("could not be read: {err}")),
    }
}

/// An image's answer: `label` is its row (`image: shot.png · 1280×720 · 240 KB`), `image`
/// the number the prompt names it by, `file` where it is saved (for a picture in the chat);
/// `chars` 0, since it holds no text.
fn image_answer(image: &Image, id: u64, store: Option<&crate::sessions::Store>) -> Value {
    let mut fields = vec![
        (Value::from("label"), Value::from(image.row())),
        (Value::from("image"), Value::from(id)),
        (Value::from("chars"), Value::from(0u64)),
    ];
    if let (Some(file), Some(store)) = (&image.file, store) {
        let path = store.images_dir().join(file);
        fields.push((
            Value::from("file"),
            Value::from(path.to_string_lossy().as_ref()),
        ));
    }
    Value::Map(fields)
}

/// A refused item's answer.
fn problem_value(label: String, problem: &str) -> Value {
    Value::Map(vec![
        (Value::from("label"), Value::from(label)),
        (
            Value::from("problem"),
            Value::from(crate::secrets::redact(problem).as_ref()),
        ),
    ])
}

/// How many images and clips one conversation holds between their attaching and their
/// prompt, and how many bytes together: the oldest go first.
const HELD_ITEMS: usize = 16;
const HELD_BYTES: usize = 64 * 1024 * 1024;

/// What [`Held`] holds: an image or an audio clip, sent beside the prompt's text.
#[derive(Debug, Clone)]
pub(super) enum Media {
    Image(Image),
    Audio(Audio),
}

impl Media {
    fn bytes(&self) -> usize {
        match self {
            Media::Image(image) => image.data.len(),
            Media::Audio(clip) => clip.data.len(),
        }
    }
}

/// The images and clips attached and not yet sent (or sent, and kept a while for a paste
/// sent again), by number. The numbers start at a random place for each conversation and each
/// process, so a `#image:N` left in text from before (another conversation's, a backend
/// restarted since) names nothing rather than another image.
pub(super) struct Held {
    inner: std::sync::Mutex<(u64, std::collections::VecDeque<(u64, Media)>)>,
}

impl Default for Held {
    fn default() -> Self {
        use std::hash::{BuildHasher, RandomState};
        // Random keys for each process; Lua reads numbers as doubles, so under 2^40.
        let start = RandomState::new().hash_one(std::time::SystemTime::now()) % (1 << 40);
        Held {
            inner: std::sync::Mutex::new((start.max(1 << 20), std::collections::VecDeque::new())),
        }
    }
}

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, std::collections::VecDeque<(u64, Media)>)> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds `media` under a new number; the oldest are let go past [`HELD_ITEMS`] or
    /// [`HELD_BYTES`] (the newest is always kept).
    pub(super) fn hold(&self, media: Media) -> u64 {
        let mut inner = self.lock();
        inner.0 += 1;
        let id = inner.0;
        inner.1.push_back((id, media));
        while inner.1.len() > 1
            && (inner.1.len() > HELD_ITEMS
                || inner.1.iter().map(|(_, m)| m.bytes()).sum::<usize>() > HELD_BYTES)
        {
            inner.1.pop_front();
        }
        id
    }

    /// Item `id`, when still held.
    pub(super) fn get(&self, id: u64) -> Option<Media> {
        self.lock()
            .1
            .iter()
            .find(|(held, _)| *held == id)
            .map(|(_, media)| media.clone())
    }
}

/// The field `name` of an answer map.
fn field_of<'a>(answer: &'a Value, name: &str) -> Option<&'a Value> {
    answer
        .as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(name))
        .map(|(_, v)| v)
}

/// One attachment's answer: `label`, `text` (what the model reads, keys redacted as a tool's
/// result is), `shown` (the same made visible, for the chat's fold), `chars`, and `truncated` /
/// `unsaved` when true.
fn attached(label: String, text: &str, chars: usize, truncated: bool, unsaved: bool) -> Value {
    let text = crate::secrets::redact(text);
    let shown = display::visible(&text, Layout::Prose).into_owned();
    let mut fields = vec![
        (Value::from("label"), Value::from(label)),
        (Value::from("text"), Value::from(text.as_ref())),
        (Value::from("shown"), Value::from(shown)),
        (Value::from("chars"), Value::from(chars as u64)),
    ];
    if truncated {
        fields.push((Value::from("truncated"), true.into()));
    }
    if unsaved {
        fields.push((Value::from("unsaved"), true.into()));
    }
    Value::Map(fields)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::text::MAX_CHARS;
    use futures::future::BoxFuture;
    use std::path::{Path, PathBuf};

    /// A buffer with unsaved changes holding one file.
    struct Unsaved(PathBuf, String);

    impl Editor for Unsaved {
        fn has_unsaved_changes<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, bool> {
            Box::pin(async move { path == self.0 })
        }
        fn file_written<'a>(&'a self, _path: &'a Path) -> BoxFuture<'a, ()> {
            Box::pin(async {})
        }
        fn command_finished(&self) -> BoxFuture<'_, ()> {
            Box::pin(async {})
        }
        fn unsaved_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Option<String>> {
            Box::pin(async move { (path == self.0).then(|| self.1.clone()) })
        }
    }

    #[tokio::test]
    async fn attachments_are_read_through_the_path_check_clamped_and_from_unsaved_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s3cret").unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(
            root.join("src/calc.py"),
            "def add(a, b):\n    return a + b\n",
        )
        .unwrap();
        std::fs::write(root.join("src/open.py"), "on disk\n").unwrap();
        std::fs::write(root.join("long.txt"), "x".repeat(MAX_CHARS + 5)).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("link")).unwrap();
        let workspace = Workspace::new(&root).unwrap();
        let editor = Unsaved(root.join("src/open.py"), "in the buffer\u{1b}\n".into());
        let items = [
            "src/calc.py",
            "../../etc/passwd",
            "link",
            "nothing",
            "src",
            "src/open.py",
            "long.txt",
        ]
        .into_iter()
        .map(|path| Value::Map(vec![("path".into(), path.into())]))
        .chain([Value::Map(vec![
            ("label".into(), "# diagnostics calc.py".into()),
            ("text".into(), "calc.py:1:1: ERROR: bad".into()),
        ])])
        .collect();
        let answer = attach(
            &workspace,
            &editor,
            &Held::default(),
            None,
            Attach {
                items,
                preview: false,
            },
        )
        .await;
        let answers = answer.as_array().unwrap();
        let calc = &answers[0];
        assert_eq!(
            field_of(calc, "label").unwrap().as_str(),
            Some("@ src/calc.py")
        );
        assert_eq!(
            field_of(calc, "text").unwrap().as_str(),
            Some("def add(a, b):\n    return a + b\n")
        );
        assert_eq!(field_of(calc, "chars").unwrap().as_u64(), Some(32));
        assert_eq!(
            field_of(&answers[1], "problem").unwrap().as_str(),
            Some("Refused: '../../etc/passwd' resolves outside the workspace root.")
        );
        assert_eq!(
            field_of(&answers[2], "problem").unwrap().as_str(),
            Some("Refused: 'link' resolves outside the workspace root.")
        );
        assert_eq!(
            field_of(&answers[3], "missing").unwrap().as_bool(),
            Some(true)
        );
        assert_eq!(
            field_of(&answers[4], "missing").unwrap().as_bool(),
            Some(true)
        );
        let open = &answers[5];
        assert_eq!(
            field_of(open, "text").unwrap().as_str(),
            Some("in the buffer\u{1b}\n")
        );
        assert_eq!(
            field_of(open, "shown").unwrap().as_str(),
            Some("in the buffer\\e\n")
        );
        assert_eq!(field_of(open, "unsaved").unwrap().as_bool(), Some(true));
        let long = &answers[6];
        assert_eq!(
            field_of(long, "chars").unwrap().as_u64(),
            Some(MAX_CHARS as u64)
        );
        assert_eq!(field_of(long, "truncated").unwrap().as_bool(), Some(true));
        assert!(field_of(long, "text")
            .unwrap()
            .as_str()
            .unwrap()
            .ends_with("x\n[... truncated at 20000 chars]"));
        let diagnostics = &answers[7];
        assert_eq!(
            field_of(diagnostics, "label").unwrap().as_str(),
            Some("# diagnostics calc.py")
        );
        assert_eq!(field_of(diagnostics, "chars").unwrap().as_u64(), Some(23));
    }

    #[tokio::test]
    async fn text_that_is_not_utf8_spoils_only_itself_and_the_attachments_stop_at_their_budget() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for i in 0..6 {
            std::fs::write(root.join(format!("f{i}.txt")), "y".repeat(MAX_CHARS)).unwrap();
        }
        let workspace = Workspace::new(&root).unwrap();
        let editor = Unsaved(root.join("none"), String::new());
        let latin1 = Value::Map(vec![
            ("label".into(), "# buffer notes".into()),
            (
                "text".into(),
                // A msgpack string of 7 bytes, one of them Latin-1's é, as Neovim sends it.
                rmpv::decode::read_value(&mut &b"\xa7caf\xe9 ok"[..]).unwrap(),
            ),
        ]);
        let items = std::iter::once(latin1)
            .chain((0..6).map(|i| Value::Map(vec![("path".into(), format!("f{i}.txt").into())])))
            .chain([
                Value::Map(vec![("path".into(), "nobody".into())]),
                Value::from(7),
            ])
            .collect();
        // Decoded as the request's argument is.
        let request: Attach =
            decode(&[Value::Map(vec![("items".into(), Value::Array(items))])]).unwrap();
        let answer = attach(&workspace, &editor, &Held::default(), None, request).await;
        let answers = answer.as_array().unwrap();
        assert_eq!(
            field_of(&answers[0], "text").unwrap().as_str(),
            Some("caf\u{fffd} ok")
        );
        // 9 + 5 × 20,000 reaches the budget: the sixth file is left out, saying why.
        for file in &answers[1..6] {
            assert_eq!(
                field_of(file, "chars").unwrap().as_u64(),
                Some(MAX_CHARS as u64)
            );
        }
        assert_eq!(
            field_of(&answers[6], "problem").unwrap().as_str(),
            Some("left out: this prompt's attachments already hold 100000 characters")
        );
        assert_eq!(
            field_of(&answers[6], "label").unwrap().as_str(),
            Some("@ f5.txt")
        );
        // A word that is no file stays nothing, budget or not.
        assert_eq!(
            field_of(&answers[7], "missing").unwrap().as_bool(),
            Some(true)
        );
        assert!(
            field_of(&answers[8], "problem").is_some(),
            "{:?}",
            answers[8]
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod clipboard_tests {
    use super::*;

    /// The pids whose command line holds `marker`.
    fn running_with(marker: &str) -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains(marker))
                    .unwrap_or(false)
            })
            .collect()
    }

    #[tokio::test]
    async fn a_clipboard_tool_that_never_answers_is_killed_with_what_it_started() {
        let marker = "41.5172";
        let argv: Vec<String> = [
            "/bin/sh",
            "-c",
            &format!("sleep {marker} & exec sleep {marker}"),
        ]
        .map(String::from)
        .to_vec();
        let err = clipboard(&argv).await.unwrap_err();
        assert_eq!(err, "sh gave nothing in 2 s");
        // The whole group is gone, the background child too.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !running_with(marker).is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(running_with(marker), Vec::<u32>::new());
    }

    #[tokio::test]
    async fn a_clipboard_without_an_image_and_osascripts_hex_are_told_apart() {
        let none: Vec<String> = ["/bin/sh", "-c", "exit 1"].map(String::from).to_vec();
        assert_eq!(
            clipboard(&none).await.unwrap_err(),
            "the clipboard holds no image (sh found none)"
        );
        assert_eq!(
            apple_data("«data PNGf89504E470D0A»\n".as_bytes()),
            Some(vec![0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a])
        );
        assert_eq!(apple_data(b"\x89PNG"), None);
        assert_eq!(apple_data("«data PNGf8»".as_bytes()), None);
    }

    #[test]
    fn held_clips_are_let_go_oldest_first_past_their_bytes_and_the_newest_is_kept() {
        let held = Held::default();
        let clip = |name: &str| {
            let mut bytes = agent_nvim_fixtures::sounds::wav(8);
            bytes.resize(audio::MAX_BYTES, 0);
            Media::Audio(Audio::prepare(name, bytes).unwrap())
        };
        let ids: Vec<u64> = (0..7)
            .map(|n| held.hold(clip(&format!("{n}.wav"))))
            .collect();
        // Six 10 MB clips fit in 64 MB, seven do not: the first is gone.
        assert!(held.get(ids[0]).is_none());
        for id in &ids[1..] {
            assert!(matches!(held.get(*id), Some(Media::Audio(_))));
        }
        // One item larger than the whole budget is still held, alone.
        let mut huge = agent_nvim_fixtures::sounds::wav(8);
        huge.resize(HELD_BYTES + 1, 0);
        let id = held.hold(Media::Audio(Audio {
            name: "huge.wav".into(),
            media_type: "audio/wav".into(),
            data: huge.into(),
        }));
        assert!(held.get(id).is_some());
        assert!(ids.iter().all(|id| held.get(*id).is_none()));
    }

    #[test]
    fn attach_items_for_images_decode_and_others_stay_what_they_were() {
        let map = |pairs: Vec<(&str, rmpv::Value)>| {
            rmpv::Value::Map(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
        };
        assert_eq!(
            AttachItem::decode(&map(vec![(
                "clipboard",
                rmpv::Value::Array(vec!["/usr/bin/wl-paste".into(), "--type".into()])
            )])),
            Some(AttachItem::Clipboard {
                argv: vec!["/usr/bin/wl-paste".into(), "--type".into()]
            })
        );
        assert_eq!(
            AttachItem::decode(&map(vec![("clipboard", rmpv::Value::Array(vec![]))])),
            None
        );
        assert_eq!(
            AttachItem::decode(&map(vec![("image", 7u64.into())])),
            Some(AttachItem::Held { image: 7 })
        );
        assert_eq!(
            AttachItem::decode(&map(vec![("path", "a.png".into())])),
            Some(AttachItem::Path {
                path: "a.png".into()
            })
        );
    }
}
