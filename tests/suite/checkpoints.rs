//! Checkpoints through a whole session: the built-in agent's turn (edits, a created file, a
//! command that creates one and deletes another) is undone by restoring the checkpoint taken
//! before its prompt, and the user's own repository is left exactly as it was.

use std::path::PathBuf;
use std::sync::Arc;

use agent_nvim::agent::Native;
use agent_nvim::checkpoint::{Kind, Status};
use agent_nvim::conversation::Checkpointed;
use agent_nvim::editor::NoEditor;
use agent_nvim::llm::ProviderChoice;
use agent_nvim::session::{self, SessionConfig};
use agent_nvim::test_support::user_repo::{differing, entries, git as user_git, Entries};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::mock_llm::{MockLlm, Part, Reply, Wire};

pub(super) fn call(id: &str, name: &str, args: serde_json::Value) -> Part {
    Part::ToolCall {
        id: id.into(),
        name: name.into(),
        args: args.to_string(),
    }
}

/// The user's repository in `root`: `a.txt` and `old.txt` committed, then `a.txt` changed and
/// not committed. Its `git status` and everything under its `.git`, to compare with later.
pub(super) fn users_repo(root: &std::path::Path) -> (String, Entries) {
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    std::fs::write(root.join("old.txt"), "old\n").unwrap();
    user_git(root, &["init", "-q"]);
    user_git(root, &["add", "-A"]);
    user_git(root, &["commit", "-qm", "start"]);
    std::fs::write(root.join("a.txt"), "one, not yet committed\n").unwrap();
    let status = user_git(root, &["status", "--porcelain"]);
    (status, entries(&root.join(".git")))
}

/// One reply's calls changing four files of [`users_repo`]: `a.txt` edited and `src/new.rs`
/// created by edit_file, `made.txt` created and `old.txt` deleted by run_bash.
pub(super) fn four_changes() -> Vec<Part> {
    vec![
        call(
            "c1",
            "edit_file",
            json!({"path": "a.txt", "old_str": "one", "new_str": "two"}),
        ),
        call(
            "c2",
            "edit_file",
            json!({"path": "src/new.rs", "old_str": "", "new_str": "fn x() {}\n"}),
        ),
        call(
            "c3",
            "run_bash",
            json!({"command": "echo made > made.txt && rm old.txt"}),
        ),
    ]
}

#[tokio::test]
async fn restoring_the_prompts_checkpoint_undoes_its_edits_and_commands_and_never_touches_dot_git()
{
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let root = ws.path();
    let (status_before, git_before) = users_repo(root);

    let mock = MockLlm::start(
        Wire::Ollama,
        vec![
            Reply::Turn {
                parts: four_changes(),
                usage: (1, 1),
            },
            Reply::Turn {
                parts: vec![Part::Text("done".into())],
                usage: (1, 1),
            },
        ],
    );
    let mut config = SessionConfig::new(root);
    config.auto_approve = true;
    config.state_dir = Some(state.path().to_path_buf());
    config.provider = ProviderChoice {
        provider: Some("ollama".into()),
        model: Some("m".into()),
        base_url: Some(mock.base_url()),
        ..Default::default()
    };
    let built = session::build(&config, Box::new(|_, _| None), Arc::new(NoEditor)).unwrap();
    let checkpoints = built.checkpoints.clone().unwrap();
    let conversation = Checkpointed::wrap(
        Arc::new(Native::new(built.agent.unwrap())),
        Some(&checkpoints),
    );
    let (events, _seen) = tokio::sync::mpsc::unbounded_channel();
    let events = agent_nvim::conversation::Events::new(events);
    conversation
        .prompt("change things".into(), &events, &CancellationToken::new())
        .await;
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "two, not yet committed\n"
    );
    assert!(root.join("made.txt").exists() && !root.join("old.txt").exists());

    let listed = checkpoints.list(&checkpoints.conversation()).await.unwrap();
    let kinds: Vec<Kind> = listed.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [Kind::Prompt, Kind::Edit, Kind::Edit, Kind::Command]);
    let restored = checkpoints.restore(&listed[0].id, &NoEditor).await.unwrap();
    assert_eq!(
        restored.files,
        vec![
            (Status::Modified, PathBuf::from("a.txt")),
            (Status::Deleted, PathBuf::from("made.txt")),
            (Status::Added, PathBuf::from("old.txt")),
            (Status::Deleted, PathBuf::from("src/new.rs")),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "one, not yet committed\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("old.txt")).unwrap(),
        "old\n"
    );
    assert!(!root.join("made.txt").exists());
    assert!(!root.join("src/new.rs").exists());

    let git_after = entries(&root.join(".git"));
    assert_eq!(
        differing(&git_before, &git_after),
        Vec::<PathBuf>::new(),
        "the user's .git changed"
    );
    assert_eq!(user_git(root, &["status", "--porcelain"]), status_before);
    assert!(!checkpoints.dir().starts_with(root));
}
