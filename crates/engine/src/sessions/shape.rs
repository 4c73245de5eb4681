//! What a person does to a saved conversation besides resuming it: rename it (`:Agent name`, the
//! resume list), delete it, and export it as markdown (`:Agent export`).
//!
//! A rename is a record appended to the file, the same `title` event an external agent sends when
//! it names its session (so the format does not change and the list already reads it): the last
//! one wins. A delete removes the file and its `.agent` note, nothing else (a conversation's
//! checkpoints are the [`crate::checkpoint::Checkpoints`]' to forget).

use agent_nvim_vocab::conversation::{AgentUpdate, ConversationEvent};
use agent_nvim_vocab::events::Event;

use std::os::unix::fs::DirBuilderExt as _;

use super::{Conversation, Record, Store, StoreError};

/// The record that names a conversation `title`.
pub fn title_record(title: &str) -> Record {
    Record::Event {
        event: ConversationEvent::Agent(AgentUpdate::Title {
            title: Some(title.to_string()),
        }),
    }
}

impl Store {
    /// Names conversation `id` `title` (what the list shows from now on): one whole line
    /// appended in one write, never cutting a line another writer is in the middle of (the
    /// conversation may be open in another Neovim).
    pub fn rename(&self, id: &str, title: &str) -> Result<(), StoreError> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        if !super::valid_id(id) {
            return Err(StoreError::BadId(id.to_string()));
        }
        let path = self.dir().join(format!("{id}.jsonl"));
        let mut line = serde_json::to_string(&title_record(title)).unwrap_or_default();
        line.push('\n');
        std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .and_then(|mut file| file.write_all(line.as_bytes()))
            .map_err(|source| super::missing_or(id, &path, source))
    }

    /// A fork of conversation `id`: a new file of the same kind holding its records before its
    /// `before`-th prompt as the conversation counts them now (a rewound prompt is not one; all
    /// of them when None: the conversation as saved so far), named `title`. `id` goes on
    /// unchanged. The new file's id, to resume; an error naming how many prompts there are when
    /// `before` is not one of them.
    pub fn fork(&self, id: &str, before: Option<usize>, title: &str) -> Result<String, StoreError> {
        let saved = self.load(id)?;
        let prompts = saved.tree().prompt_records();
        let cut = match before {
            None => saved.records.len(),
            Some(n) => match n.checked_sub(1).and_then(|i| prompts.get(i)) {
                Some(&at) => at,
                None => {
                    return Err(StoreError::Io {
                        context: format!(
                            "the conversation has {} prompt{}, not a prompt {n}",
                            prompts.len(),
                            if prompts.len() == 1 { "" } else { "s" }
                        ),
                        source: std::io::Error::other("no such prompt"),
                    })
                }
            },
        };
        let writer = self.create(&saved.header.conversation)?;
        for record in &saved.records[..cut] {
            writer.write(record.clone());
        }
        writer.write(title_record(title));
        writer.flush();
        Ok(writer.id().to_string())
    }

    /// Moves conversation `id` to `other` (another workspace's store: a fork with code works in
    /// a worktree, whose conversations are listed apart).
    pub fn move_to(&self, other: &Store, id: &str) -> Result<(), StoreError> {
        if !super::valid_id(id) {
            return Err(StoreError::BadId(id.to_string()));
        }
        let from = self.dir().join(format!("{id}.jsonl"));
        let to = other.dir().join(format!("{id}.jsonl"));
        let io = |source| StoreError::Io {
            context: format!("cannot move conversation {id} to {}", other.dir().display()),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(other.dir())
            .map_err(io)?;
        // A second name, then the first one gone: never over a file already there (the link
        // fails when one is), never half moved.
        std::fs::hard_link(&from, &to).map_err(io)?;
        std::fs::remove_file(&from).map_err(io)
    }

    /// Deletes conversation `id`: its file and its note.
    pub fn delete(&self, id: &str) -> Result<(), StoreError> {
        let path = self.dir().join(format!("{id}.jsonl"));
        if !super::valid_id(id) {
            return Err(StoreError::BadId(id.to_string()));
        }
        std::fs::remove_file(&path).map_err(|source| super::missing_or(id, &path, source))?;
        if let Ok(note) = self.note_path(id) {
            let _ = std::fs::remove_file(note);
        }
        Ok(())
    }
}

/// Conversation `saved` as markdown: a title, then each prompt under `## You` and what answered
/// it under `## Agent` (the text, each tool call as a `<details>` block holding its result, the
/// errors and the done lines). Every key it could hold is left out.
pub fn markdown(saved: &Conversation, title: &str) -> String {
    let mut out = format!("# {}\n\n", one_line(title));
    out.push_str(&format!(
        "_A conversation of agent.nvim ({}), saved as {}._\n",
        saved.header.conversation, saved.header.id
    ));
    let mut answering = false;
    let mut text = String::new();
    let flush_text = |out: &mut String, text: &mut String| {
        if !text.trim().is_empty() {
            out.push('\n');
            out.push_str(text.trim_end());
            out.push('\n');
        }
        text.clear();
    };
    // The current branch only: what a rewind cut, or a branch left, is not the conversation.
    let tree = saved.tree();
    for record in tree.path().iter().filter_map(|&at| saved.records.get(at)) {
        match record {
            Record::Prompt { text: prompt } => {
                flush_text(&mut out, &mut text);
                out.push_str("\n## You\n\n");
                out.push_str(&unhidden(prompt.trim_end()));
                out.push('\n');
                answering = false;
            }
            Record::Event { event } => {
                let Some(event) = turn_event(event) else {
                    continue;
                };
                if !answering && !matches!(event, Shown::Nothing) {
                    flush_text(&mut out, &mut text);
                    out.push_str("\n## Agent\n");
                    answering = true;
                }
                match event {
                    Shown::Text(piece) => text.push_str(&unhidden(piece)),
                    Shown::Block(block) => {
                        flush_text(&mut out, &mut text);
                        out.push('\n');
                        out.push_str(&block);
                    }
                    Shown::Nothing => {}
                }
            }
            // The prompt's text names its images in its `[attached: image: ...]` rows.
            Record::Decided { .. }
            | Record::Model { .. }
            | Record::Rewound { .. }
            | Record::Branched { .. }
            | Record::Switched { .. }
            | Record::Images { .. } => {}
        }
    }
    flush_text(&mut out, &mut text);
    crate::secrets::redact_owned(out)
}

/// What an event adds to the markdown.
enum Shown<'a> {
    Text(&'a str),
    Block(String),
    Nothing,
}

fn turn_event(event: &ConversationEvent) -> Option<Shown<'_>> {
    Some(match event {
        ConversationEvent::Turn(Event::Text { text }) => Shown::Text(text),
        ConversationEvent::Turn(Event::ToolFinished {
            summary,
            output,
            diff,
            ok,
            ..
        }) => {
            let mut body = output.trim_end().to_string();
            if let Some(diff) = diff.as_deref().filter(|d| !d.is_empty()) {
                if !body.is_empty() {
                    body.push('\n');
                }
                body.push_str(diff.trim_end());
            }
            let mark = if *ok { "▸" } else { "✗" };
            Shown::Block(details(&format!("{mark} {}", one_line(summary)), &body))
        }
        ConversationEvent::Turn(Event::Error { message }) => {
            Shown::Block(format!("> **error:** {}\n", one_line(message)))
        }
        ConversationEvent::Turn(Event::TurnDone { message, .. }) => {
            Shown::Block(format!("_{}_\n", one_line(message)))
        }
        ConversationEvent::Turn(Event::Compacted { prompts, .. }) => Shown::Block(format!(
            "_the {prompts} earlier prompts were replaced by a summary the model wrote_\n"
        )),
        ConversationEvent::Agent(AgentUpdate::ToolUpdated {
            title,
            status,
            output,
            running: false,
            ..
        }) if status == "completed" || status == "failed" => {
            let mark = if status == "completed" { "▸" } else { "✗" };
            Shown::Block(details(&format!("{mark} {}", one_line(title)), output))
        }
        ConversationEvent::Agent(AgentUpdate::UserMessage { .. }) => return None,
        _ => Shown::Nothing,
    })
}

/// A `<details>` block: `summary`, and `body` in a fence longer than any backtick run in it.
fn details(summary: &str, body: &str) -> String {
    let summary = summary
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    if body.trim().is_empty() {
        return format!("<details><summary>{summary}</summary></details>\n");
    }
    let longest = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(3.max(longest + 1));
    format!(
        "<details><summary>{summary}</summary>\n\n{fence}\n{}\n{fence}\n\n</details>\n",
        body.trim_end()
    )
}

/// `text` with an HTML comment's opening shown, not taken: the rest of the export would be
/// hidden where the markdown is rendered.
fn unhidden(text: &str) -> String {
    text.replace("<!--", "&lt;!--")
}

/// `text` on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::sessions::Header;

    fn saved(records: Vec<Record>) -> Conversation {
        Conversation {
            images: None,
            header: Header {
                agent_nvim_session: crate::sessions::FORMAT,
                id: "20261206-101010-ab12".into(),
                workspace: "/w".into(),
                created: "2026-12-06T10:10:10Z".into(),
                conversation: "built-in".into(),
            },
            records,
        }
    }

    #[test]
    fn the_markdown_holds_every_prompt_the_answers_and_each_tool_folded_and_no_key() {
        crate::secrets::protect("sk-ant-secret-key-0123456789");
        let turn = |event| Record::Event {
            event: ConversationEvent::Turn(event),
        };
        let md = markdown(
            &saved(vec![
                Record::Prompt {
                    text: "fix the test".into(),
                },
                turn(Event::Text {
                    text: "Looking".into(),
                }),
                turn(Event::Text {
                    text: " at it.".into(),
                }),
                turn(Event::ToolFinished {
                    id: "t1".into(),
                    name: "run_bash".into(),
                    ok: false,
                    summary: "$ cargo test -> exit 101".into(),
                    output: "```\nboom sk-ant-secret-key-0123456789\n".into(),
                    diff: None,
                }),
                turn(Event::TurnDone {
                    input: 1,
                    output: 2,
                    outcome: agent_nvim_vocab::events::Outcome::Done,
                    message: "done · 1 in / 2 out tokens".into(),
                    cost: None,
                }),
                Record::Prompt {
                    text: "and now?".into(),
                },
                turn(Event::Text {
                    text: "Fixed.".into(),
                }),
            ]),
            "fix the test",
        );
        assert!(md.starts_with("# fix the test\n"), "{md}");
        assert!(
            md.contains("\n## You\n\nfix the test\n\n## Agent\n\nLooking at it.\n"),
            "{md}"
        );
        assert!(
            md.contains("<details><summary>✗ $ cargo test -&gt; exit 101</summary>\n\n````\n```\nboom [redacted]\n````\n\n</details>"),
            "{md}"
        );
        assert!(md.contains("_done · 1 in / 2 out tokens_"), "{md}");
        assert!(
            md.contains("\n## You\n\nand now?\n\n## Agent\n\nFixed.\n"),
            "{md}"
        );
        assert!(!md.contains("sk-ant-secret"), "{md}");
    }

    #[test]
    fn a_fork_holds_the_records_before_its_prompt_and_the_original_goes_on_unchanged() {
        let state = tempfile::tempdir().unwrap();
        let store = Store::new(state.path(), std::path::Path::new("/w"));
        let writer = store.create("built-in").unwrap();
        let id = writer.id().to_string();
        for text in ["one", "two", "three"] {
            writer.write(Record::Prompt { text: text.into() });
            writer.write(Record::Event {
                event: ConversationEvent::Turn(Event::Text {
                    text: format!("answer to {text}"),
                }),
            });
        }
        writer.flush();
        drop(writer);
        let before = std::fs::read(store.dir().join(format!("{id}.jsonl"))).unwrap();
        let fork = store.fork(&id, Some(3), "fork of it").unwrap();
        assert_ne!(fork, id);
        let forked = store.load(&fork).unwrap();
        let prompts: Vec<_> = forked
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Prompt { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(prompts, ["one", "two"]);
        assert_eq!(forked.header.conversation, "built-in");
        let listed = store.list();
        let title = |of: &str| listed.iter().find(|l| l.id == of).unwrap().title.clone();
        assert_eq!(title(&fork), "fork of it");
        assert_eq!(title(&id), "one");
        assert_eq!(
            std::fs::read(store.dir().join(format!("{id}.jsonl"))).unwrap(),
            before
        );
        // All of it, when no prompt is named; no prompt 0 or 4.
        let whole = store.fork(&id, None, "whole").unwrap();
        assert_eq!(store.load(&whole).unwrap().records.len(), 7);
        for n in [0, 4] {
            let err = store.fork(&id, Some(n), "x").unwrap_err().to_string();
            assert!(err.contains("the conversation has 3 prompts"), "{err}");
        }
    }

    #[test]
    fn a_fork_counts_the_prompts_a_rewind_left() {
        use crate::sessions::Saved;
        let state = tempfile::tempdir().unwrap();
        let store = Store::new(state.path(), std::path::Path::new("/w"));
        let writer = store.create("built-in").unwrap();
        let id = writer.id().to_string();
        let turn = |text: &str| {
            vec![
                Record::Prompt { text: text.into() },
                Record::Model {
                    messages: vec![
                        Saved::User {
                            text: text.into(),
                            images: Vec::new(),
                        },
                        Saved::Assistant {
                            text: "ok".into(),
                            calls: vec![],
                            reasoning: vec![],
                        },
                    ],
                },
            ]
        };
        // one, two, three; rewound to before three (two kept: 4 messages); then four.
        let mut records: Vec<Record> = ["one", "two", "three"]
            .iter()
            .flat_map(|t| turn(t))
            .collect();
        records.push(Record::Rewound { kept: 4 });
        records.extend(turn("four"));
        for record in records {
            writer.write(record);
        }
        writer.flush();
        drop(writer);
        // Prompt 3 is now "four": the fork before it holds one, two (and three, rewound).
        let fork = store.fork(&id, Some(3), "f").unwrap();
        let forked = store.load(&fork).unwrap();
        assert!(!forked
            .records
            .iter()
            .any(|r| matches!(r, Record::Prompt { text } if text == "four")));
        let view: Vec<_> = forked.model_view();
        assert_eq!(view.len(), 4, "{view:?}");
    }

    #[test]
    fn a_conversation_moves_to_another_store_never_over_one_there() {
        let state = tempfile::tempdir().unwrap();
        let main = Store::new(state.path(), std::path::Path::new("/w"));
        let worktree = Store::new(state.path(), std::path::Path::new("/w-tree"));
        let writer = main.create("built-in").unwrap();
        let id = writer.id().to_string();
        writer.write(Record::Prompt { text: "p".into() });
        writer.flush();
        drop(writer);
        main.move_to(&worktree, &id).unwrap();
        assert!(main.list().is_empty());
        assert_eq!(worktree.list()[0].id, id);
        // Back, over nothing; then again over a file now there: refused, both kept.
        worktree.move_to(&main, &id).unwrap();
        std::fs::write(worktree.dir().join(format!("{id}.jsonl")), "theirs").unwrap();
        assert!(main.move_to(&worktree, &id).is_err());
        assert!(main.dir().join(format!("{id}.jsonl")).exists());
        assert_eq!(
            std::fs::read_to_string(worktree.dir().join(format!("{id}.jsonl"))).unwrap(),
            "theirs"
        );
    }

    #[test]
    fn a_rename_is_what_the_list_shows_and_a_delete_removes_the_file_and_its_note() {
        let state = tempfile::tempdir().unwrap();
        let store = Store::new(state.path(), std::path::Path::new("/w"));
        let writer = store.create("built-in").unwrap();
        let id = writer.id().to_string();
        writer.write(Record::Prompt {
            text: "first words".into(),
        });
        writer.flush();
        drop(writer);
        assert_eq!(store.list()[0].title, "first words");
        store.rename(&id, "my name").unwrap();
        assert_eq!(store.list()[0].title, "my name");
        store
            .note_agent_session(
                &id,
                &crate::sessions::AgentNote {
                    agent: "x".into(),
                    session: "s".into(),
                },
            )
            .unwrap();
        store.delete(&id).unwrap();
        assert!(store.list().is_empty());
        assert!(store.agent_session(&id).is_none());
        assert!(matches!(store.delete(&id), Err(StoreError::Missing(_))));
        assert!(matches!(store.delete("../x"), Err(StoreError::BadId(_))));
    }
}
