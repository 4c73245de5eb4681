#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::conversation::fake::prompt;
use crate::conversation::Conversation as _;
use crate::llm::{CallResult, Message, ToolCall};
use agent_nvim_fixtures::mock_llm::{MockLlm, Part, Reply, Wire};
use agent_nvim_vocab::approval::Decision;

fn text(text: &str) -> Record {
    Record::Event {
        event: ConversationEvent::Turn(Event::Text { text: text.into() }),
    }
}

fn done(input: u64, output: u64) -> Record {
    Record::Event {
        event: ConversationEvent::Turn(Event::TurnDone {
            input,
            output,
            outcome: agent_nvim_vocab::events::Outcome::Done,
            message: "done".into(),
            cost: None,
        }),
    }
}

fn store(state: &Path) -> Store {
    Store::new(state, Path::new("/home/u/my project"))
}

#[test]
fn a_conversation_is_read_back_as_it_was_written_private_to_its_user() {
    let state = tempfile::tempdir().unwrap();
    let store = store(state.path());
    let writer = store.create("built-in").unwrap();
    let history = vec![
        Message::User("list it\nplease".into()),
        Message::Assistant {
            text: "looking".into(),
            calls: vec![ToolCall::new(
                "c1".into(),
                "list_files".into(),
                r#"{ "path":"." }"#.into(),
            )],
            // The model's thinking, signature and all, is what a resumed conversation sends
            // back: it is saved as it came.
            reasoning: vec![crate::llm::Reasoning {
                origin: crate::llm::Origin::Anthropic,
                at: 0,
                item: serde_json::json!({"type": "thinking", "thinking": "t", "signature": "s1"}),
            }],
        },
        Message::Results(vec![CallResult {
            id: "c1".into(),
            ok: true,
            text: "a.txt".into(),
        }]),
    ];
    let records = vec![
        Record::Prompt {
            text: "list it\nplease".into(),
        },
        Record::Event {
            event: ConversationEvent::Turn(Event::ToolStarted {
                id: "c1".into(),
                name: "list_files".into(),
                args: serde_json::json!({"path": "."}),
            }),
        },
        Record::Decided {
            tool: "run_bash".into(),
            decision: Decision::Refuse {
                reason: Some("no".into()),
            },
            note: "refused: no".into(),
        },
        // An external agent's thought and the model's own are one record on disk (and one row
        // in the chat): it reads back as the model's.
        Record::Event {
            event: ConversationEvent::Turn(agent_nvim_vocab::events::Event::Thought {
                text: "hmm".into(),
            }),
        },
        Record::Model {
            messages: history.iter().map(Saved::from).collect(),
        },
        done(10, 5),
    ];
    for record in &records {
        writer.write(record.clone());
    }
    writer.flush();
    let loaded = store.load(writer.id()).unwrap();
    assert_eq!(loaded.records, records);
    assert_eq!(loaded.header.id, writer.id());
    assert_eq!(loaded.header.workspace, "/home/u/my project");
    assert_eq!(loaded.header.agent_nvim_session, FORMAT);
    // The model's view comes back exactly, the arguments' text as the model sent it.
    assert_eq!(loaded.model_view(), history);
    assert_eq!(loaded.title(), "list it");
    let path = store.dir().join(format!("{}.jsonl", writer.id()));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(store.dir()), 0o700);
    let listed = store.list();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].title.as_str(),
            listed[0].prompts,
            listed[0].tokens
        ),
        ("list it", 1, 15)
    );
    // An external agent's title names it from then on, in the list and in the file; the last
    // one wins, and one cleared leaves the prompt's.
    let title = |t: Option<&str>| Record::Event {
        event: ConversationEvent::Agent(agent_nvim_vocab::conversation::AgentUpdate::Title {
            title: t.map(str::to_string),
        }),
    };
    writer.write(title(Some("First name")));
    writer.write(title(Some("Fix the parser")));
    writer.flush();
    assert_eq!(store.list()[0].title, "Fix the parser");
    assert_eq!(store.load(writer.id()).unwrap().title(), "Fix the parser");
    writer.write(title(None));
    writer.flush();
    assert_eq!(store.list()[0].title, "list it");
    assert_eq!(store.load(writer.id()).unwrap().title(), "list it");
    assert_eq!(listed[0].problem, None);
}

#[test]
fn a_saved_conversation_costs_its_turns_and_the_compactions_asked_for() {
    let state = tempfile::tempdir().unwrap();
    let store = store(state.path());
    let writer = store.create("built-in").unwrap();
    let priced = |cost: Option<f64>| Record::Event {
        event: ConversationEvent::Turn(Event::TurnDone {
            input: 1,
            output: 1,
            outcome: agent_nvim_vocab::events::Outcome::Done,
            message: "done".into(),
            cost,
        }),
    };
    writer.write(priced(Some(0.25)));
    writer.write(priced(None));
    writer.write(Record::Event {
        event: ConversationEvent::Turn(Event::Compacted {
            prompts: 1,
            before: 10,
            after: 2,
            upto: 2,
            summary: "s".into(),
            cost: Some(0.5),
        }),
    });
    writer.write(priced(Some(0.125)));
    writer.flush();
    let loaded = store.load(writer.id()).unwrap();
    assert_eq!(loaded.cost(), 0.875);
}

#[test]
fn a_partial_last_line_is_skipped_and_cut_off_before_appending() {
    // The end of the last whole line is found reading back from the end of the file, a chunk
    // at a time: the long partial line spans several chunks.
    let long = format!(
        r#"{{"t":"event","event":{{"type":"text","text":"{}"#,
        "x".repeat(200_000)
    );
    for partial in [r#"{"t":"event","event":{"type":"text","te"#, long.as_str()] {
        let state = tempfile::tempdir().unwrap();
        let store = store(state.path());
        let writer = store.create("built-in").unwrap();
        writer.write(Record::Prompt { text: "one".into() });
        writer.write(text("whole"));
        writer.flush();
        let id = writer.id().to_string();
        drop(writer);
        let path = store.dir().join(format!("{id}.jsonl"));
        let whole = std::fs::metadata(&path).unwrap().len();
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(partial.as_bytes()).unwrap();
        let loaded = store.load(&id).unwrap();
        assert_eq!(
            loaded.records,
            vec![Record::Prompt { text: "one".into() }, text("whole")]
        );
        let writer = store.append(&id).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        writer.write(Record::Prompt { text: "two".into() });
        writer.flush();
        let loaded = store.load(&id).unwrap();
        assert_eq!(
            loaded.records,
            vec![
                Record::Prompt { text: "one".into() },
                text("whole"),
                Record::Prompt { text: "two".into() }
            ]
        );
        assert_eq!(store.list()[0].prompts, 2);
    }
}

#[test]
fn unreadable_and_foreign_files_are_listed_as_such_and_never_loaded() {
    let state = tempfile::tempdir().unwrap();
    let store = store(state.path());
    let good = store.create("built-in").unwrap();
    good.write(Record::Prompt {
        text: "fix the build".into(),
    });
    good.flush();
    let dir = store.dir();
    std::fs::write(
        dir.join("20200101-000000-aaaa.jsonl"),
        "{\"agent_nvim_session\":99,\"id\":\"x\"}\n",
    )
    .unwrap();
    std::fs::write(dir.join("20200101-000000-bbbb.jsonl"), "not json\n").unwrap();
    std::fs::write(dir.join("20200101-000000-cccc.jsonl"), [0xff, 0xfe]).unwrap();
    // A header naming another conversation is not this one's.
    let copied = std::fs::read(dir.join(format!("{}.jsonl", good.id()))).unwrap();
    std::fs::write(dir.join("20200101-000000-ffff.jsonl"), copied).unwrap();
    // Not ids: ignored.
    std::fs::write(dir.join("Notes.jsonl"), "x").unwrap();
    std::fs::write(dir.join("20200101-000000-dddd.txt"), "x").unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    for name in ["aaaa", "bbbb", "cccc", "ffff"] {
        let file = File::options()
            .write(true)
            .open(dir.join(format!("20200101-000000-{name}.jsonl")))
            .unwrap();
        file.set_modified(old).unwrap();
    }
    // The ids alone, from the directory: the same files, in the same order.
    let listed_ids: Vec<String> = store.list().into_iter().map(|l| l.id).collect();
    assert_eq!(store.ids(), listed_ids);
    let listed = store.list();
    let seen: Vec<(&str, Option<&str>)> = listed
        .iter()
        .map(|l| (l.id.as_str(), l.problem.as_deref()))
        .collect();
    assert_eq!(seen.len(), 5, "{listed:?}");
    // The most recent first.
    assert_eq!(seen[0], (good.id(), None));
    assert_eq!(listed[0].title, "fix the build");
    assert!(seen.contains(&("20200101-000000-aaaa", Some("format 99, not 1"))));
    assert!(seen.contains(&("20200101-000000-bbbb", Some("unreadable: no header"))));
    assert!(seen.contains(&("20200101-000000-cccc", Some("unreadable: no header"))));
    assert!(seen.contains(&(
        "20200101-000000-ffff",
        Some("unreadable: its header names another conversation")
    )));
    assert!(matches!(
        store.load("20200101-000000-aaaa"),
        Err(StoreError::Foreign { version: 99, .. })
    ));
    assert!(matches!(
        store.load("20200101-000000-bbbb"),
        Err(StoreError::Unreadable(_))
    ));
    assert!(matches!(
        store.load("20200101-000000-ffff"),
        Err(StoreError::Unreadable(_))
    ));
    assert!(matches!(
        store.load("20200101-000000-eeee"),
        Err(StoreError::Missing(_))
    ));
    assert_eq!(store.latest().as_deref(), Some(good.id()));
}

#[test]
fn ids_and_workspace_folders_name_one_file_and_nothing_else() {
    let state = tempfile::tempdir().unwrap();
    let store = store(state.path());
    for id in ["../x", "a/b", "", "..", "A", "x.jsonl"] {
        assert!(!valid_id(id), "{id}");
        assert!(matches!(store.load(id), Err(StoreError::BadId(_))), "{id}");
        assert!(
            matches!(store.append(id), Err(StoreError::BadId(_))),
            "{id}"
        );
    }
    // 2026-12-01 12:34:56 UTC.
    let at = UNIX_EPOCH + Duration::from_secs(1_796_128_496);
    let id = new_id(at);
    assert!(id.starts_with("20261201-123456-"), "{id}");
    assert!(valid_id(&id));
    assert_eq!(rfc3339(at), "2026-12-01T12:34:56Z");
    assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
    let folder = |root: &str| workspace_folder(Path::new(root));
    for root in ["/", "/a/..", "/x/.hidden", "/x/a b/ü/", "/x/..."] {
        let name = folder(root);
        assert!(!name.contains('/') && !name.starts_with('.'), "{name}");
    }
    assert!(folder("/x/my project").starts_with("my_project-"));
    assert_ne!(folder("/a/proj"), folder("/b/proj"));
    assert_eq!(folder("/a/proj"), folder("/a/proj"));
}

#[test]
fn a_key_never_reaches_the_file() {
    let key = "sk-session-test-0123456789abcdef";
    crate::secrets::protect(key);
    let state = tempfile::tempdir().unwrap();
    let store = store(state.path());
    let writer = store.create("built-in").unwrap();
    writer.write(Record::Prompt {
        text: format!("my key is {key}"),
    });
    writer.write(Record::Model {
        messages: vec![Saved::Results {
            results: vec![SavedResult {
                id: "c1".into(),
                ok: true,
                text: format!("KEY={key}"),
            }],
        }],
    });
    writer.flush();
    let path = store.dir().join(format!("{}.jsonl", writer.id()));
    let raw = std::fs::read_to_string(path).unwrap();
    assert!(!raw.contains(key), "{raw}");
    assert!(raw.contains("my key is [redacted]"), "{raw}");
}

/// A mock server answering each request with the next of `answers`, as text.
fn answering(answers: &[&str]) -> MockLlm {
    let reply = |text: &&str| Reply::Turn {
        parts: vec![Part::Text(text.to_string())],
        usage: (1, 1),
    };
    MockLlm::start(Wire::Ollama, answers.iter().map(reply).collect())
}

fn native(dir: &Path, mock: &MockLlm) -> Arc<dyn crate::conversation::Conversation> {
    Arc::new(crate::agent::native::tests::native(dir, mock.base_url()))
}

#[tokio::test]
async fn a_recorded_conversation_resumes_with_the_model_seeing_what_it_saw() {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("marker.txt"), "x").unwrap();
    let state = tempfile::tempdir().unwrap();
    let store = Store::new(state.path(), work.path());
    let mock = MockLlm::start(
        Wire::Ollama,
        vec![
            Reply::Turn {
                parts: vec![Part::ToolCall {
                    id: "c1".into(),
                    name: "list_files".into(),
                    args: r#"{"path": "."}"#.into(),
                }],
                usage: (3, 1),
            },
            Reply::Turn {
                parts: vec![Part::Text("one file".into())],
                usage: (4, 2),
            },
            Reply::Turn {
                parts: vec![Part::Text("still one".into())],
                usage: (5, 1),
            },
        ],
    );
    let first = Recorded::new(native(work.path(), &mock), store.clone());
    assert_eq!(first.id(), None, "no file before the first prompt");
    prompt(&first, "what is here?").await;
    let id = first.id().unwrap();
    first.flush();
    drop(first);

    let saved = store.load(&id).unwrap();
    let mut kinds: Vec<String> = saved
        .records
        .iter()
        .map(|r| match r {
            Record::Prompt { .. } => "prompt".to_string(),
            Record::Event { event } => serde_json::to_value(event).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string(),
            Record::Decided { .. } => "decided".into(),
            Record::Model { .. } => "model".into(),
            Record::Rewound { .. } => "rewound".into(),
            Record::Images { .. } => "images".into(),
            Record::Branched { .. } => "branched".into(),
            Record::Switched { .. } => "switched".into(),
        })
        .collect();
    // Text deltas may be joined into one line or not, as the writer finds them queued.
    kinds.dedup_by(|a, b| a == "text" && b == "text");
    assert_eq!(
        kinds,
        [
            "prompt",
            "turn_started",
            "usage",
            "tool_started",
            "tool_finished",
            "text",
            "usage",
            "turn_done",
            "model"
        ]
    );
    assert_eq!(saved.model_len(), saved.model_view().len());
    assert_eq!(saved.model_view().len(), 4);
    assert_eq!(store.list()[0].tokens, 7 + 3);

    // A new process: a fresh agent, resumed from the file.
    let second = Recorded::new(native(work.path(), &mock), store.clone());
    second.resume(&saved).await.unwrap();
    assert_eq!(second.id().as_deref(), Some(id.as_str()));
    prompt(&second, "and now?").await;
    second.flush();
    let sent = &mock.requests()[2].body["messages"];
    let sent = sent.as_array().unwrap();
    // system, the first prompt, the call, its result, the answer, the new prompt.
    assert_eq!(sent.len(), 6, "{sent:?}");
    assert_eq!(sent[1]["content"], "what is here?");
    assert_eq!(sent[2]["tool_calls"][0]["function"]["name"], "list_files");
    assert!(sent[3]["content"].as_str().unwrap().contains("marker.txt"));
    assert_eq!(sent[5]["content"], "and now?");
    // The same file goes on; its model records now hold both turns.
    let again = store.load(&id).unwrap();
    assert_eq!(again.model_len(), again.model_view().len());
    assert_eq!(again.model_view().len(), 6);
    assert_eq!(store.list().len(), 1);
    assert_eq!(store.list()[0].prompts, 2);

    // Starting over is a new conversation, a new file at its next prompt.
    second.reset().await.unwrap();
    assert_eq!(second.id(), None);
}

#[tokio::test]
async fn a_rewind_cuts_the_view_before_that_prompt_live_and_in_the_file() {
    let work = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let store = Store::new(state.path(), work.path());
    let mock = answering(&["a1", "a2", "a3", "a4"]);
    let recorded = Recorded::new(native(work.path(), &mock), store.clone());
    for text in ["one", "two", "three"] {
        prompt(&recorded, text).await;
    }
    assert_eq!(
        recorded.rewind(4).await,
        Err(crate::conversation::ConversationError::NoSuchPrompt(4))
    );
    assert_eq!(
        recorded.rewind(0).await,
        Err(crate::conversation::ConversationError::NoSuchPrompt(0))
    );
    recorded.rewind(2).await.unwrap();
    let users = |view: &[Message]| -> Vec<String> {
        view.iter()
            .filter_map(|m| match m {
                Message::User(prompt) => Some(prompt.text.clone()),
                _ => None,
            })
            .collect()
    };
    let live = recorded.model_view(0).await.unwrap();
    assert_eq!(users(&live), ["one"]);
    assert_eq!(live.len(), 2, "the first prompt and its answer stay");

    // The next request carries only what is left, then the new prompt.
    prompt(&recorded, "two again").await;
    let sent = &mock.requests()[3].body["messages"];
    let said: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(said, ["one", "two again"], "{sent}");

    // The file records the cut: a resume sees the same view as the live conversation.
    recorded.flush();
    let saved = store.load(&recorded.id().unwrap()).unwrap();
    assert!(saved
        .records
        .iter()
        .any(|r| matches!(r, Record::Rewound { kept: 2 })));
    assert_eq!(saved.model_view(), recorded.model_view(0).await.unwrap());
}

#[test]
fn a_turn_the_session_ended_in_is_given_to_the_model_as_cut_off() {
    let tool_finished = |summary: &str, ok| Record::Event {
        event: ConversationEvent::Turn(Event::ToolFinished {
            id: "c1".into(),
            name: "run_bash".into(),
            ok,
            summary: summary.into(),
            output: "secret output stays out".into(),
            diff: None,
        }),
    };
    let conversation = Conversation {
        images: None,
        header: Header {
            agent_nvim_session: FORMAT,
            id: "x".into(),
            workspace: "/w".into(),
            created: "2026-12-01T12:00:00Z".into(),
            conversation: "built-in".into(),
        },
        records: vec![
            Record::Prompt {
                text: "first".into(),
            },
            text("one"),
            done(1, 1),
            Record::Model {
                messages: vec![
                    Saved::User {
                        text: "first".into(),
                        images: Vec::new(),
                    },
                    Saved::Assistant {
                        text: "one".into(),
                        calls: vec![],
                        reasoning: Vec::new(),
                    },
                ],
            },
            // Killed while this turn ran: its model record was never written.
            Record::Prompt {
                text: "second".into(),
            },
            text("Running the "),
            text("tests."),
            tool_finished("$ cargo test -> exit 101", false),
        ],
    };
    let view = conversation.model_view();
    assert_eq!(view.len(), 4, "{view:?}");
    assert_eq!(view[2], Message::User("second".into()));
    let Message::Assistant { text, calls, .. } = &view[3] else {
        panic!("{view:?}")
    };
    assert!(calls.is_empty());
    assert_eq!(
        text,
        &format!("Running the tests.\n\n{CUT_OFF} Tools that had finished: $ cargo test -> exit 101 (failed).")
    );

    // A turn that ended, even one that gained nothing, is not cut off.
    let mut ended = conversation.clone();
    ended.records.push(Record::Model { messages: vec![] });
    assert_eq!(ended.model_len(), ended.model_view().len());
    assert_eq!(ended.model_view().len(), 2);
    // A cut-off turn before a later one keeps its place.
    let mut later = conversation.clone();
    later.records.push(Record::Prompt {
        text: "third".into(),
    });
    let view = later.model_view();
    assert_eq!(view.len(), 6);
    assert_eq!(view[2], Message::User("second".into()));
    assert_eq!(view[4], Message::User("third".into()));
    // Resumed after the kill, then rewound to before the cut-off turn: the cut counts it.
    let mut rewound = conversation.clone();
    rewound.records.push(Record::Rewound { kept: 2 });
    assert_eq!(rewound.model_len(), rewound.model_view().len());
    assert_eq!(rewound.model_view().len(), 2);
    let mut prompts = View::<IsPrompt>::default();
    for record in &rewound.records[..rewound.records.len() - 1] {
        prompts.take(record);
    }
    assert_eq!(prompts.prompts(), 1, "the cut-off turn is still open");
    prompts.take(&Record::Rewound { kept: 4 });
    assert_eq!(
        prompts.prompts(),
        2,
        "a rewind counts the cut-off turn it follows"
    );
}

#[test]
fn a_header_is_read_alone_and_records_are_handed_on_as_they_are_read() {
    let state = tempfile::tempdir().unwrap();
    let store = store(state.path());
    let writer = store.create("built-in").unwrap();
    for n in 0..5 {
        writer.write(Record::Prompt {
            text: format!("prompt {n}"),
        });
    }
    writer.flush();
    let id = writer.id().to_string();
    drop(writer);
    let header = store.header(&id).unwrap();
    assert_eq!(
        (header.id.as_str(), header.conversation.as_str()),
        (id.as_str(), "built-in")
    );

    // Handed on in order; false stops the reading there.
    let mut seen = Vec::new();
    let loaded = store
        .load_with(&id, |record| {
            seen.push(record.clone());
            seen.len() < 3
        })
        .unwrap();
    assert_eq!(seen.len(), 3);
    assert_eq!(loaded.records, seen);
    let mut all = 0;
    store
        .load_with(&id, |_| {
            all += 1;
            true
        })
        .unwrap();
    assert_eq!(all, 5);

    // A header of another version, or naming another id, is refused as load refuses it.
    let path = store.dir().join(format!("{id}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replacen(&format!("\"id\":\"{id}\""), "\"id\":\"other\"", 1),
    )
    .unwrap();
    assert!(matches!(store.header(&id), Err(StoreError::Unreadable(_))));
    std::fs::write(
        &path,
        text.replacen("\"agent_nvim_session\":1", "\"agent_nvim_session\":99", 1),
    )
    .unwrap();
    assert!(matches!(
        store.header(&id),
        Err(StoreError::Foreign { version: 99, .. })
    ));
    assert!(matches!(store.header("../x"), Err(StoreError::BadId(_))));
}

#[tokio::test]
async fn a_resume_that_cannot_be_saved_changes_nothing() {
    let work = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let store = Store::new(state.path(), work.path());
    let mock = answering(&["a", "b", "c"]);
    // Another conversation, saved, then gone before it is resumed.
    let other = Recorded::new(native(work.path(), &mock), store.clone());
    prompt(&other, "elsewhere").await;
    other.flush();
    let other_id = other.id().unwrap();
    let saved = store.load(&other_id).unwrap();
    drop(other);
    std::fs::remove_file(store.dir().join(format!("{other_id}.jsonl"))).unwrap();

    let current = Recorded::new(native(work.path(), &mock), store.clone());
    prompt(&current, "here").await;
    let id = current.id().unwrap();
    assert!(current.resume(&saved).await.is_err());
    // Still the conversation it was, in its own file: the next prompt goes on with "here" only.
    assert_eq!(current.id(), Some(id.clone()));
    prompt(&current, "again").await;
    current.flush();
    let sent = &mock.requests()[2].body["messages"];
    let texts: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(!texts.contains(&"elsewhere"), "{texts:?}");
    assert!(
        texts.contains(&"here") && texts.contains(&"again"),
        "{texts:?}"
    );
    let view = store.load(&id).unwrap().model_view();
    assert_eq!(view.len(), 4, "{view:?}");
}

#[cfg(target_os = "linux")]
fn nice_of_this_thread() -> libc::c_int {
    // SAFETY: reads the calling thread's nice value.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
}

#[cfg(target_os = "linux")]
#[test]
fn a_background_thread_gets_a_lower_priority_and_only_it() {
    let before = nice_of_this_thread();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let own = nice_of_this_thread();
        lower_priority();
        tx.send((own, nice_of_this_thread())).unwrap();
    });
    let (own, after) = rx.recv().unwrap();
    assert_eq!(after, own.max(BACKGROUND_NICE));
    assert_eq!(
        nice_of_this_thread(),
        before,
        "the spawning thread kept its priority"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_thread_already_nicer_is_never_given_a_higher_priority() {
    let seen = std::thread::spawn(|| {
        // Anyone may lower a thread's priority; only root could raise it again.
        let tid = unsafe { libc::gettid() } as libc::id_t;
        assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 15) }, 0);
        lower_priority();
        nice_of_this_thread()
    })
    .join()
    .unwrap();
    assert_eq!(seen, 15);
}

#[test]
fn a_usage_record_saved_before_cached_tokens_were_counted_reads_as_none_cached() {
    let line = r#"{"t":"event","event":{"type":"usage","input":1,"output":2}}"#;
    let record: Record = serde_json::from_str(line).unwrap();
    assert_eq!(
        record,
        Record::Event {
            event: ConversationEvent::Turn(agent_nvim_vocab::events::Event::Usage {
                input: 1,
                output: 2,
                cached: 0,
                cost: None,
            })
        }
    );
}

#[tokio::test]
async fn a_compaction_is_recorded_and_a_resumed_conversation_is_sent_the_summary_with_the_whole_history_kept(
) {
    let work = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let store = Store::new(state.path(), work.path());
    let mock = answering(&["a1", "a2", "SUMMARY of p1", "a3", "a1 again"]);
    let keeping_one = || {
        Arc::new(crate::agent::native::tests::native_keeping(
            work.path(),
            mock.base_url(),
            1,
        )) as Arc<dyn crate::conversation::Conversation>
    };
    let first = Recorded::new(keeping_one(), store.clone());
    prompt(&first, "P-ONE").await;
    prompt(&first, "P-TWO").await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let events = crate::conversation::Events::new(tx);
    first
        .compact(&events, &tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    drop(events);
    let mut compacted = 0;
    while let Some(event) = rx.recv().await {
        compacted += usize::from(matches!(
            event,
            ConversationEvent::Turn(agent_nvim_vocab::events::Event::Compacted { .. })
        ));
    }
    assert_eq!(compacted, 1);
    let id = first.id().unwrap();
    first.flush();
    drop(first);

    // The file keeps every message, and the compaction beside them.
    let saved = store.load(&id).unwrap();
    assert_eq!(saved.model_view().len(), 4);
    let compactions = saved.compactions();
    assert_eq!(compactions.len(), 1);
    assert_eq!((compactions[0].upto, compactions[0].prompts), (2, 1));
    assert_eq!(compactions[0].summary, "SUMMARY of p1");

    // Resumed: the next request is sent the summary, not the first prompt.
    let second = Recorded::new(keeping_one(), store.clone());
    second.resume(&saved).await.unwrap();
    prompt(&second, "P-THREE").await;
    let sent = mock.requests()[3].body["messages"].to_string();
    assert!(
        sent.contains("SUMMARY of p1") && sent.contains("P-TWO"),
        "{sent}"
    );
    assert!(!sent.contains("P-ONE"), "{sent}");
    // Rewound to before the first prompt: the compaction goes with it, in the file too.
    second.rewind(1).await.unwrap();
    second.flush();
    let rewound = store.load(&id).unwrap();
    assert!(rewound.compactions().is_empty());
    prompt(&second, "P-ONE again").await;
    let sent = mock.requests()[4].body["messages"].to_string();
    assert!(!sent.contains("SUMMARY"), "{sent}");
}

/// An image to save: its bytes need only start as a png does.
fn picture(bytes: &[u8]) -> crate::llm::Image {
    let mut data = b"\x89PNG\r\n\x1a\n".to_vec();
    data.extend_from_slice(bytes);
    crate::llm::Image {
        name: "shot.png".into(),
        media_type: "image/png".into(),
        width: 1,
        height: 1,
        scaled_from: None,
        data: data.into(),
        file: None,
    }
}

#[test]
fn an_image_is_saved_once_by_its_content_0600_and_read_back_only_as_that_file() {
    let state = tempfile::tempdir().unwrap();
    let store = store(state.path());
    let mut images = [picture(b"one"), picture(b"one"), picture(b"two")];
    store.keep_images(&mut images);
    let names: Vec<String> = images.iter().map(|i| i.file.clone().unwrap()).collect();
    assert_eq!(names[0], names[1], "the same bytes, one file");
    assert_ne!(names[0], names[2]);
    let dir = store.images_dir();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut expected = vec![names[0].clone(), names[2].clone()];
    expected.sort();
    assert_eq!(files, expected, "no temporary file left");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.join(&names[0])), 0o600);
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(
        read_saved_image(&dir, &names[0]).as_deref(),
        Some(&images[0].data[..])
    );
    // Names it never makes, and a file that is not what its name says, are not read.
    for name in [
        "../secret.png",
        "",
        "a.png",
        &names[0].replace(".png", ".txt"),
    ] {
        assert_eq!(read_saved_image(&dir, name), None, "{name}");
    }
    std::fs::write(dir.join(&names[2]), b"\x89PNG\r\n\x1a\ntwo and more").unwrap();
    assert_eq!(read_saved_image(&dir, &names[2]), None, "another length");
}

#[test]
fn a_link_or_a_fifo_planted_where_an_image_goes_is_never_read_nor_written_through() {
    let state = tempfile::tempdir().unwrap();
    let store = store(state.path());
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("id_ed25519");
    let mut probe = [picture(b"key")];
    store.keep_images(&mut probe);
    let name = probe[0].file.clone().unwrap();
    let dir = store.images_dir();
    // A file of the right length and kind outside, linked in place of the saved one.
    std::fs::write(&secret, &probe[0].data[..]).unwrap();
    std::fs::remove_file(dir.join(&name)).unwrap();
    std::os::unix::fs::symlink(&secret, dir.join(&name)).unwrap();
    assert_eq!(
        read_saved_image(&dir, &name),
        None,
        "a link is not followed"
    );
    // Saving the same image again does not take the link for it, nor write through it.
    std::fs::write(&secret, b"private").unwrap();
    let mut again = [picture(b"key")];
    store.keep_images(&mut again);
    assert_eq!(again[0].file, None, "left unsaved, said in the log");
    assert_eq!(std::fs::read(&secret).unwrap(), b"private");
    // A FIFO where an image should be: read at once as nothing, never waited on.
    std::fs::remove_file(dir.join(&name)).unwrap();
    let fifo = std::ffi::CString::new(dir.join(&name).as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a path the test owns.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    assert_eq!(read_saved_image(&dir, &name), None);
}

/// The user messages' texts of request `n` the mock got (Ollama's wire).
fn said_in(mock: &MockLlm, n: usize) -> Vec<String> {
    mock.requests()[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

/// The user messages' texts of `view`.
fn users_of(view: &[Message]) -> Vec<String> {
    view.iter()
        .filter_map(|m| match m {
            Message::User(prompt) => Some(prompt.text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_branch_keeps_the_one_it_left_and_switching_restores_its_history_live_and_saved() {
    use agent_nvim_conversation::saved::BranchAt;
    let work = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let store = Store::new(state.path(), work.path());
    let mock = answering(&["a1", "a2", "b2", "b3", "a3"]);
    let recorded = Recorded::new(native(work.path(), &mock), store.clone());
    for text in ["one", "two"] {
        prompt(&recorded, text).await;
    }
    assert_eq!(recorded.branches().await, None, "no branch yet");
    // Edit-and-resend of prompt 2: a new branch from before it.
    let saved = recorded.branch(2).await.unwrap();
    assert_eq!(users_of(&saved.model_view()), ["one"]);
    prompt(&recorded, "two, better").await;
    let said = said_in(&mock, 2);
    assert_eq!(
        said,
        ["one", "two, better"],
        "the old branch's later messages are not sent"
    );
    assert_eq!(
        recorded.branches().await,
        Some(vec![BranchAt {
            turn: 2,
            index: 2,
            count: 2
        }])
    );
    prompt(&recorded, "three").await;

    // Back to the first branch: its history is the model's again, the files say so.
    let saved = recorded.switch_branch(2, -1).await.unwrap();
    let live = recorded.model_view(0).await.unwrap();
    assert_eq!(users_of(&live), ["one", "two"]);
    assert_eq!(saved.model_view(), live);
    assert_eq!(
        recorded.branches().await,
        Some(vec![BranchAt {
            turn: 2,
            index: 1,
            count: 2
        }])
    );
    assert!(
        recorded.switch_branch(2, -1).await.is_err(),
        "none before the first"
    );
    prompt(&recorded, "three on the first").await;
    let said = said_in(&mock, 4);
    assert_eq!(said, ["one", "two", "three on the first"]);

    // Forward again: the second branch as it was left, its third prompt with it.
    recorded.switch_branch(2, 1).await.unwrap();
    assert_eq!(
        users_of(&recorded.model_view(0).await.unwrap()),
        ["one", "two, better", "three"]
    );
    // A resume of the file continues the branch last used, and the tree reads the same.
    recorded.flush();
    let saved = store.load(&recorded.id().unwrap()).unwrap();
    assert_eq!(
        users_of(&saved.model_view()),
        ["one", "two, better", "three"]
    );
    assert!(saved.has_branches());
    let tree = saved.tree();
    assert_eq!(
        tree.branches(),
        vec![BranchAt {
            turn: 2,
            index: 2,
            count: 2
        }]
    );
    // The branch's records: its prompts in order, none of the other branch's.
    let prompts: Vec<&str> = tree
        .path()
        .iter()
        .filter_map(|&at| match &saved.records[at] {
            Record::Prompt { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(prompts, ["one", "two, better", "three"]);
}

#[test]
fn the_list_reads_a_file_again_only_once_it_changed() {
    let state = tempfile::tempdir().unwrap();
    let store = store(state.path());
    let writer = store.create("built-in").unwrap();
    writer.write(Record::Prompt {
        text: "first title".into(),
    });
    writer.flush();
    assert_eq!(store.list()[0].title, "first title");
    let path = store.dir().join(format!("{}.jsonl", writer.id()));
    let written = std::fs::metadata(&path).unwrap().modified().unwrap();
    // The same length and time of writing, other words: the summary made before stands.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("first title", "other title")).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(written)
        .unwrap();
    assert_eq!(store.list()[0].title, "first title");
    // Written since: read again.
    writer.write(Record::Prompt {
        text: "second".into(),
    });
    writer.flush();
    let listed = &store.list()[0];
    assert_eq!((listed.title.as_str(), listed.prompts), ("other title", 2));
}
