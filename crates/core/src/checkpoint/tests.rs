#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::process::Command;

use agent_nvim_fixtures::user_repo::{differing, entries};

use futures::future::BoxFuture;

/// A workspace, a state directory, and checkpoints of the one over the other.
struct Fixture {
    ws: tempfile::TempDir,
    _state: tempfile::TempDir,
    checkpoints: Checkpoints,
}

impl Fixture {
    fn new() -> Self {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let checkpoints = Checkpoints::new(
            state.path(),
            Workspace::new(ws.path()).unwrap(),
            "c1".into(),
        );
        Fixture {
            ws,
            _state: state,
            checkpoints,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.ws.path().join(rel)
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.path(rel)).ok()
    }

    /// Runs the user's own git in the workspace.
    fn user_git(&self, args: &[&str]) -> String {
        agent_nvim_fixtures::user_repo::git(self.ws.path(), args)
    }

    async fn snapshot(&self) -> Snapshot {
        self.checkpoints.snapshot(Kind::Prompt, "p").await.unwrap()
    }
}

/// An editor whose buffers for the named files have unsaved changes, recording what it is told.
#[derive(Default)]
struct Buffers {
    unsaved: Vec<PathBuf>,
    written: Mutex<Vec<PathBuf>>,
    commands: Mutex<usize>,
}

impl Editor for Buffers {
    fn has_unsaved_changes<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, bool> {
        let dirty = self.unsaved.iter().any(|p| p == path);
        Box::pin(async move { dirty })
    }
    fn file_written<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, ()> {
        lock(&self.written).push(path.to_path_buf());
        Box::pin(async {})
    }
    fn command_finished(&self) -> BoxFuture<'_, ()> {
        *lock(&self.commands) += 1;
        Box::pin(async {})
    }
}

#[tokio::test]
async fn a_restore_puts_back_edited_created_and_deleted_files_and_never_touches_the_users_git() {
    let fx = Fixture::new();
    fx.write("a.txt", "one\n");
    fx.write("old.txt", "old\n");
    fx.write("src/lib.rs", "fn main() {}\n");
    fx.user_git(&["init", "-q"]);
    fx.user_git(&["add", "-A"]);
    fx.user_git(&["commit", "-qm", "start"]);
    fx.write("a.txt", "one, unstaged\n");
    let status_before = fx.user_git(&["status", "--porcelain"]);
    // What would run if the user's repository were used: a hook on every index change, and a
    // monitor git would start for `status`.
    let marker = fx._state.path().join("ran");
    let hook = fx.path(".git/hooks/post-index-change");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    fx.user_git(&[
        "config",
        "core.fsmonitor",
        &format!("touch {}", marker.display()),
    ]);
    let git_before = entries(&fx.path(".git"));

    let checkpoint = fx.snapshot().await;
    // The turn: an edit, a file created by edit_file, one created and one deleted by a command.
    fx.write("a.txt", "two\n");
    fx.write("notes/new.txt", "created\n");
    fx.write("made.txt", "by the shell\n");
    std::fs::remove_file(fx.path("old.txt")).unwrap();

    let editor = Buffers::default();
    let restored = fx
        .checkpoints
        .restore(&checkpoint.id, &editor)
        .await
        .unwrap();
    assert_eq!(fx.read("a.txt").as_deref(), Some("one, unstaged\n"));
    assert_eq!(fx.read("old.txt").as_deref(), Some("old\n"));
    assert_eq!(fx.read("notes/new.txt"), None);
    assert_eq!(fx.read("made.txt"), None);
    assert_eq!(
        restored.files,
        vec![
            (Status::Modified, PathBuf::from("a.txt")),
            (Status::Deleted, PathBuf::from("made.txt")),
            (Status::Deleted, PathBuf::from("notes/new.txt")),
            (Status::Added, PathBuf::from("old.txt")),
        ]
    );
    assert_eq!(
        *lock(&editor.written),
        vec![
            fx.path("a.txt").canonicalize().unwrap(),
            fx.path("old.txt").canonicalize().unwrap()
        ]
    );
    assert_eq!(*lock(&editor.commands), 1);

    assert_eq!(
        differing(&git_before, &entries(&fx.path(".git"))),
        Vec::<PathBuf>::new(),
        "the user's .git changed"
    );
    assert!(!marker.exists(), "a hook or monitor of the user's ran");
    std::fs::remove_file(&hook).unwrap();
    fx.user_git(&["config", "--unset", "core.fsmonitor"]);
    assert_eq!(fx.user_git(&["status", "--porcelain"]), status_before);
    assert!(!fx.checkpoints.dir().starts_with(fx.ws.path()));

    // The restore was checkpointed: restoring its undo brings the turn's work back.
    fx.checkpoints
        .restore(&restored.undo.id, &editor)
        .await
        .unwrap();
    assert_eq!(fx.read("a.txt").as_deref(), Some("two\n"));
    assert_eq!(fx.read("made.txt").as_deref(), Some("by the shell\n"));
    assert_eq!(fx.read("notes/new.txt").as_deref(), Some("created\n"));
    assert_eq!(fx.read("old.txt"), None);
}

#[tokio::test]
async fn a_workspace_that_is_not_a_repository_is_snapshotted_with_its_gitignore_honoured() {
    let fx = Fixture::new();
    fx.write(".gitignore", "target/\n*.log\n");
    fx.write("keep.txt", "k\n");
    fx.write("target/out.bin", "built\n");
    fx.write("run.log", "noise\n");
    let first = fx.snapshot().await;
    assert_eq!(first.n, 1);
    assert_eq!(
        first.changed,
        vec![PathBuf::from(".gitignore"), PathBuf::from("keep.txt")]
    );
    assert_eq!(
        fx.checkpoints
            .file_at(&first.id, Path::new("keep.txt"))
            .await
            .unwrap(),
        Some(b"k\n".to_vec())
    );
    assert_eq!(
        fx.checkpoints
            .file_at(&first.id, Path::new("run.log"))
            .await
            .unwrap(),
        None
    );
    // Nothing changed: the next checkpoint, on the next ref, has the same files.
    let second = fx
        .checkpoints
        .snapshot(Kind::Edit, "keep.txt")
        .await
        .unwrap();
    assert_eq!((second.n, second.changed.len()), (2, 0));
    assert_eq!(fx.checkpoints.changes(&second.id).await.unwrap(), []);
    fx.write("keep.txt", "changed\n");
    let third = fx
        .checkpoints
        .snapshot(Kind::Command, "echo changed > keep.txt\nmore")
        .await
        .unwrap();
    assert_ne!(third.id, first.id);
    assert_eq!(third.changed, vec![PathBuf::from("keep.txt")]);
    let listed: Vec<(u64, Kind, String)> = fx
        .checkpoints
        .list("c1")
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.n, c.kind, c.label))
        .collect();
    assert_eq!(
        listed,
        vec![
            (1, Kind::Prompt, "p".to_string()),
            (2, Kind::Edit, "keep.txt".to_string()),
            (3, Kind::Command, "echo changed > keep.txt".to_string()),
        ]
    );
}

#[tokio::test]
async fn large_files_and_nested_repositories_are_skipped_listed_and_never_restored_over() {
    let fx = Fixture::new();
    fx.write("small.txt", "s\n");
    std::fs::write(fx.path("big.bin"), vec![b'x'; MAX_FILE_BYTES as usize + 1]).unwrap();
    fx.write("vendor/lib/file.c", "int x;\n");
    Command::new("git")
        .args(["init", "-q"])
        .current_dir(fx.path("vendor/lib"))
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .unwrap();
    let first = fx.snapshot().await;
    assert_eq!(first.skipped, vec![PathBuf::from("big.bin")]);
    assert_eq!(first.nested, vec![PathBuf::from("vendor/lib/")]);
    assert_eq!(first.changed, vec![PathBuf::from("small.txt")]);

    // A small file that grows past the limit leaves the checkpoints, and a restore keeps it.
    std::fs::write(
        fx.path("small.txt"),
        vec![b'y'; MAX_FILE_BYTES as usize + 1],
    )
    .unwrap();
    let restored = fx
        .checkpoints
        .restore(&first.id, &Buffers::default())
        .await
        .unwrap();
    assert_eq!(restored.kept, vec![PathBuf::from("small.txt")]);
    assert!(restored.files.is_empty());
    assert_eq!(
        std::fs::metadata(fx.path("small.txt")).unwrap().len(),
        MAX_FILE_BYTES + 1
    );
    assert_eq!(
        std::fs::metadata(fx.path("big.bin")).unwrap().len(),
        MAX_FILE_BYTES + 1
    );
    assert_eq!(fx.read("vendor/lib/file.c").as_deref(), Some("int x;\n"));
}

#[tokio::test]
async fn unsaved_buffers_block_the_whole_restore_and_are_named() {
    let fx = Fixture::new();
    fx.write("a.txt", "one\n");
    fx.write("b.txt", "one\n");
    let checkpoint = fx.snapshot().await;
    fx.write("a.txt", "two\n");
    fx.write("b.txt", "two\n");
    let root = fx.ws.path().canonicalize().unwrap();
    let editor = Buffers {
        unsaved: vec![root.join("b.txt")],
        ..Buffers::default()
    };
    let refused = fx.checkpoints.restore(&checkpoint.id, &editor).await;
    assert_eq!(refused, Err(CheckpointError::Unsaved(vec!["b.txt".into()])));
    assert_eq!(
        refused.unwrap_err().to_string(),
        "nothing was restored: b.txt has unsaved changes in Neovim; save or discard them first"
    );
    assert_eq!(fx.read("a.txt").as_deref(), Some("two\n"));
    assert_eq!(fx.read("b.txt").as_deref(), Some("two\n"));
    assert!(lock(&editor.written).is_empty());
}

#[tokio::test]
async fn changes_since_a_checkpoint_have_their_status_and_line_counts() {
    let fx = Fixture::new();
    fx.write("edited.txt", "a\nb\nc\n");
    fx.write("gone.txt", "x\ny\n");
    std::fs::write(fx.path("image.bin"), b"\0\x01\x02").unwrap();
    let checkpoint = fx.snapshot().await;
    fx.write("edited.txt", "a\nB\nc\nd\n");
    fx.write("new.txt", "1\n2\n3\n");
    std::fs::remove_file(fx.path("gone.txt")).unwrap();
    std::fs::write(fx.path("image.bin"), b"\0\x01\x03").unwrap();
    assert_eq!(
        fx.checkpoints.changes(&checkpoint.id).await.unwrap(),
        vec![
            Change {
                status: Status::Modified,
                path: "edited.txt".into(),
                lines: Some((2, 1))
            },
            Change {
                status: Status::Deleted,
                path: "gone.txt".into(),
                lines: Some((0, 2))
            },
            Change {
                status: Status::Modified,
                path: "image.bin".into(),
                lines: None
            },
            Change {
                status: Status::Added,
                path: "new.txt".into(),
                lines: Some((3, 0))
            },
        ]
    );
    assert_eq!(
        fx.checkpoints
            .file_at(&checkpoint.id, Path::new("gone.txt"))
            .await
            .unwrap(),
        Some(b"x\ny\n".to_vec())
    );
    // Between two checkpoints: what happened from one to the other, the same.
    let later = fx.snapshot().await;
    assert_eq!(
        fx.checkpoints
            .changes_between(&checkpoint.id, &later.id)
            .await
            .unwrap(),
        fx.checkpoints.changes(&checkpoint.id).await.unwrap()
    );
    assert_eq!(
        fx.checkpoints
            .changes_between(&later.id, &later.id)
            .await
            .unwrap(),
        []
    );
    assert_eq!(
        fx.checkpoints.changes("not-a-commit").await,
        Err(CheckpointError::Unknown("not-a-commit".into()))
    );
    // The counts a rewind list shows, from one git process for all the trees: each to the
    // next, the last to now.
    assert_eq!(
        fx.checkpoints
            .files_changed(&[&checkpoint.id, &later.id])
            .await
            .unwrap(),
        [
            fx.checkpoints.changes(&checkpoint.id).await.unwrap().len(),
            0
        ]
    );
    let missing = "0123456789abcdef0123456789abcdef01234567";
    assert_eq!(
        fx.checkpoints
            .changes_between(&checkpoint.id, missing)
            .await,
        Err(CheckpointError::Unknown(missing.into()))
    );
    assert_eq!(
        fx.checkpoints
            .trees_of(&[&later.id, &checkpoint.id])
            .await
            .unwrap(),
        [
            fx.checkpoints.tree_of(&later.id).await.unwrap(),
            fx.checkpoints.tree_of(&checkpoint.id).await.unwrap()
        ]
    );
}

#[tokio::test]
async fn a_gitattributes_filter_or_textconv_runs_nothing_whoever_configured_it() {
    let fx = Fixture::new();
    let marker = fx._state.path().join("ran");
    let evil = format!("touch {}", marker.display());
    fx.write(".gitattributes", "* filter=evil diff=evil\n");
    fx.write("a.txt", "one\n");
    fx.user_git(&["init", "-q"]);
    // The user's repository configures the driver (as git-lfs configures its own globally)...
    for key in [
        "filter.evil.clean",
        "filter.evil.smudge",
        "diff.evil.textconv",
    ] {
        fx.user_git(&["config", key, &evil]);
    }
    fx.user_git(&["config", "filter.evil.required", "true"]);
    let first = fx.snapshot().await;
    // ...and so does a process that wrote into the shadow repository's own config.
    let config = fx.checkpoints.dir().join("config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "[filter \"evil\"]\n\tclean = {evil}\n\tsmudge = {evil}\n[diff \"evil\"]\n\ttextconv = {evil}\n[core]\n\tfsmonitor = {evil}\n\thooksPath = /tmp\n"
    ));
    std::fs::write(&config, text).unwrap();
    fx.write("a.txt", "two\n");
    fx.checkpoints.snapshot(Kind::Edit, "a.txt").await.unwrap();
    let changes = fx.checkpoints.changes(&first.id).await.unwrap();
    assert_eq!(changes[0].lines, Some((1, 1)));
    fx.checkpoints
        .restore(&first.id, &Buffers::default())
        .await
        .unwrap();
    assert_eq!(fx.read("a.txt").as_deref(), Some("one\n"));
    assert!(!marker.exists(), "a driver ran");
}

#[tokio::test]
async fn names_like_options_links_and_fifos_are_recorded_as_what_they_are() {
    let fx = Fixture::new();
    fx.write("--output=x", "dash\n");
    fx.write("-c", "c\n");
    fx.write(":(glob)*", "magic\n");
    fx.write("run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(fx.path("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", fx.path("link")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        fx.path("fifo").as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let first = fx.snapshot().await;
    assert_eq!(
        first.changed,
        ["--output=x", "-c", ":(glob)*", "link", "run.sh"]
            .map(PathBuf::from)
            .to_vec()
    );
    assert!(!fx.path("x").exists());
    for name in ["--output=x", "-c", ":(glob)*", "run.sh", "link"] {
        std::fs::remove_file(fx.path(name)).unwrap();
    }
    fx.write("link", "a file now\n");
    fx.checkpoints
        .restore(&first.id, &Buffers::default())
        .await
        .unwrap();
    assert_eq!(fx.read("--output=x").as_deref(), Some("dash\n"));
    assert_eq!(fx.read(":(glob)*").as_deref(), Some("magic\n"));
    assert_eq!(
        std::fs::read_link(fx.path("link")).unwrap(),
        Path::new("/etc/passwd")
    );
    let mode = std::fs::metadata(fx.path("run.sh")).unwrap().mode();
    assert_eq!(mode & 0o100, 0o100, "{mode:o}");
    assert!(std::fs::symlink_metadata(fx.path("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
}

#[tokio::test]
async fn a_restore_never_writes_through_a_link_swapped_in_since() {
    let fx = Fixture::new();
    let outside = tempfile::tempdir().unwrap();
    fx.write(
        "d/f.txt", "inside
",
    );
    fx.write(
        "e.txt", "e
",
    );
    fx.write(
        "hidden/g.txt",
        "g
",
    );
    let first = fx.snapshot().await;
    // A directory and a file swapped for links to outside; the links are new, so the restore
    // removes them and puts the real ones back.
    std::fs::remove_dir_all(fx.path("d")).unwrap();
    std::os::unix::fs::symlink(outside.path(), fx.path("d")).unwrap();
    std::fs::remove_file(fx.path("e.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("e.txt"), fx.path("e.txt")).unwrap();
    // A link the snapshots cannot see (ignored): writing beneath it is refused, not followed.
    std::fs::remove_dir_all(fx.path("hidden")).unwrap();
    std::os::unix::fs::symlink(outside.path(), fx.path("hidden")).unwrap();
    fx.write(".gitignore", "hidden\n");
    let restored = fx
        .checkpoints
        .restore(&first.id, &Buffers::default())
        .await
        .unwrap();
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    assert_eq!(fx.read("d/f.txt").as_deref(), Some("inside\n"));
    assert!(std::fs::symlink_metadata(fx.path("d")).unwrap().is_dir());
    assert_eq!(fx.read("e.txt").as_deref(), Some("e\n"));
    assert!(std::fs::symlink_metadata(fx.path("e.txt"))
        .unwrap()
        .is_file());
    let failed: Vec<&Path> = restored.failed.iter().map(|(p, _)| p.as_path()).collect();
    assert_eq!(failed, [Path::new("hidden/g.txt")]);
    assert_eq!(
        restored.failed[0].1,
        "it now leads outside the workspace (a link); not followed"
    );
}

#[tokio::test]
async fn without_git_checkpoints_are_off_and_say_so_once() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let checkpoints = Checkpoints::without_git(state.path(), Workspace::new(ws.path()).unwrap());
    assert_eq!(checkpoints.checkpoint(Kind::Prompt, "hi").await, None);
    assert_eq!(
        checkpoints.take_notice().as_deref(),
        Some("checkpoints are off: git was not found on PATH; install git to be able to rewind")
    );
    assert_eq!(checkpoints.checkpoint(Kind::Prompt, "again").await, None);
    assert_eq!(checkpoints.take_notice(), None);
    assert!(!checkpoints.dir().exists());
}

#[tokio::test]
async fn conversation_ids_that_cannot_name_a_ref_are_refused() {
    let fx = Fixture::new();
    for bad in ["", "../x", "a/b", ".hidden", "x.lock", "a b", "-p"] {
        fx.checkpoints.set_conversation(bad.into());
        assert_eq!(
            fx.checkpoints.snapshot(Kind::Prompt, "p").await,
            Err(CheckpointError::Conversation(bad.into())),
            "{bad}"
        );
    }
    let id = Checkpoints::new_conversation_id();
    fx.checkpoints.set_conversation(id.clone());
    assert_eq!(
        fx.checkpoints.snapshot(Kind::Prompt, "p").await.unwrap().n,
        1
    );
    assert_eq!(fx.checkpoints.list(&id).await.unwrap().len(), 1);
}

#[tokio::test]
async fn another_workspaces_checkpoint_is_adopted_and_restored_here() {
    let a = Fixture::new();
    a.write("kept.txt", "as it was\n");
    a.write("sub/new.txt", "made then\n");
    let point = a.snapshot().await;
    a.write("kept.txt", "changed after\n");
    // Another workspace (a worktree, say) with files of its own.
    let b = Fixture::new();
    b.write("kept.txt", "the worktree's\n");
    b.write("only-here.txt", "x\n");
    let adopted = b
        .checkpoints
        .adopt(&a.checkpoints, &point.id)
        .await
        .unwrap();
    assert_eq!(adopted, point.id);
    b.checkpoints
        .restore(&adopted, &Buffers::default())
        .await
        .unwrap();
    assert_eq!(b.read("kept.txt").as_deref(), Some("as it was\n"));
    assert_eq!(b.read("sub/new.txt").as_deref(), Some("made then\n"));
    assert_eq!(b.read("only-here.txt"), None);
    // The other workspace is as it was.
    assert_eq!(a.read("kept.txt").as_deref(), Some("changed after\n"));
    assert!(b
        .checkpoints
        .adopt(&a.checkpoints, "not-a-sha")
        .await
        .is_err());
}

#[tokio::test]
async fn forgetting_a_conversation_drops_its_checkpoints_and_no_others() {
    let fx = Fixture::new();
    let (a, b) = ("conv-a".to_string(), "conv-b".to_string());
    for id in [&a, &b, &a] {
        fx.checkpoints.set_conversation(id.clone());
        fx.checkpoints.snapshot(Kind::Prompt, "p").await.unwrap();
    }
    assert_eq!(fx.checkpoints.list(&a).await.unwrap().len(), 2);
    assert_eq!(fx.checkpoints.forget(&a).await.unwrap(), 2);
    assert!(fx.checkpoints.list(&a).await.unwrap().is_empty());
    assert_eq!(fx.checkpoints.list(&b).await.unwrap().len(), 1);
    assert_eq!(fx.checkpoints.forget(&a).await.unwrap(), 0);
    assert!(fx.checkpoints.forget("../x").await.is_err());
}

#[test]
fn shadow_directories_are_named_by_the_workspace_and_a_hash_of_its_path() {
    assert_eq!(
        shadow_name(Path::new("/home/u/proj")),
        shadow_name(Path::new("/home/u/proj"))
    );
    assert_ne!(
        shadow_name(Path::new("/a/src")),
        shadow_name(Path::new("/b/src"))
    );
    let name = shadow_name(Path::new("/home/u/my proj!"));
    assert!(name.starts_with("my_proj_-"), "{name}");
    assert_eq!(name.len(), "my_proj_-".len() + 16);
}

#[tokio::test]
async fn a_file_rewritten_while_snapshots_run_never_breaks_one() {
    let fx = Fixture::new();
    fx.write("busy.txt", "start\n");
    fx.write("steady.txt", "steady\n");
    let busy = fx.path("busy.txt");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0usize;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                // Growing and shrinking, replaced and rewritten in place.
                let text = "x".repeat(n % 200_000);
                if n.is_multiple_of(2) {
                    std::fs::write(&busy, &text).unwrap();
                } else {
                    let temp = busy.with_extension("tmp");
                    std::fs::write(&temp, &text).unwrap();
                    std::fs::rename(&temp, &busy).unwrap();
                }
                n += 7919;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
    };
    let mut taken = Vec::new();
    for _ in 0..15 {
        taken.push(fx.checkpoints.snapshot(Kind::Prompt, "p").await);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    writer.join().unwrap();
    for snapshot in &taken {
        let snapshot = snapshot.as_ref().unwrap();
        // Whatever moment each caught, the file beside it is whole.
        assert_eq!(
            fx.checkpoints
                .file_at(&snapshot.id, Path::new("steady.txt"))
                .await
                .unwrap(),
            Some(b"steady\n".to_vec())
        );
    }
}

#[tokio::test]
async fn an_index_lock_left_by_a_killed_git_does_not_stop_later_snapshots() {
    let fx = Fixture::new();
    fx.write("a.txt", "one\n");
    fx.snapshot().await;
    std::fs::write(fx.checkpoints.dir().join("index.lock"), "").unwrap();
    fx.write("a.txt", "two\n");
    let next = fx.snapshot().await;
    assert_eq!(next.changed, vec![PathBuf::from("a.txt")]);
    assert!(!fx.checkpoints.dir().join("index.lock").exists());
}

#[tokio::test]
async fn warming_records_the_files_in_the_index_and_takes_no_checkpoint() {
    let fx = Fixture::new();
    fx.write("a.txt", "one\n");
    fx.checkpoints.warm().await;
    assert!(fx.checkpoints.dir().join("index").exists());
    assert_eq!(fx.checkpoints.list("c1").await.unwrap(), []);
    let mode = std::fs::metadata(fx.checkpoints.dir()).unwrap().mode();
    assert_eq!(
        mode & 0o777,
        0o700,
        "the copies of the files are the user's alone"
    );
    fx.write("a.txt", "two\n");
    let first = fx.snapshot().await;
    assert_eq!(
        fx.checkpoints
            .file_at(&first.id, Path::new("a.txt"))
            .await
            .unwrap(),
        Some(b"two\n".to_vec())
    );
}

#[tokio::test]
async fn rewind_points_are_the_prompts_newest_first_with_what_each_turn_changed() {
    let fx = Fixture::new();
    fx.write("a.txt", "one\n");
    fx.checkpoints
        .snapshot(Kind::Prompt, "first")
        .await
        .unwrap();
    fx.write("a.txt", "two\n");
    fx.checkpoints.snapshot(Kind::Edit, "a.txt").await.unwrap();
    fx.write("b.txt", "new\n");
    fx.checkpoints
        .snapshot(Kind::Prompt, "second")
        .await
        .unwrap();
    fx.write("c.txt", "later\n");
    let points = fx.checkpoints.points("c1").await.unwrap();
    let seen: Vec<(usize, &str, usize)> = points
        .iter()
        .map(|p| (p.turn, p.label.as_str(), p.files))
        .collect();
    assert_eq!(seen, [(2, "second", 1), (1, "first", 2)]);

    // Prompt 3's checkpoint was never taken (git failed then): prompt 4 keeps its number and
    // counts its turn from its own checkpoint, and there is no point 3.
    fx.checkpoints
        .snapshot_at(Kind::Prompt, "fourth", Some(4))
        .await
        .unwrap();
    fx.write("d.txt", "after four\n");
    let seen: Vec<(usize, String, usize)> = fx
        .checkpoints
        .points("c1")
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.turn, p.label, p.files))
        .collect();
    assert_eq!(
        seen,
        [
            (4, "fourth".to_string(), 1),
            (2, "second".to_string(), 1),
            (1, "first".to_string(), 2)
        ]
    );
}

#[tokio::test]
async fn the_last_rewind_of_the_code_can_be_undone_until_the_next_prompt() {
    let fx = Fixture::new();
    let undo = || async {
        let point = fx.checkpoints.undo_point("c1").await.unwrap();
        point.map(|p| (p.turn, p.label, p.files, p.id))
    };
    fx.write("a.txt", "one\n");
    let first = fx.snapshot().await;
    assert_eq!(undo().await, None, "no rewind yet");
    fx.write("a.txt", "two\n");
    fx.write("b.txt", "new\n");
    // Refused for an unsaved buffer, then the person saves it: no undo appears, which would put
    // their own change back.
    let unsaved = Buffers {
        unsaved: vec![fx.path("a.txt").canonicalize().unwrap()],
        ..Buffers::default()
    };
    fx.checkpoints
        .restore(&first.id, &unsaved)
        .await
        .unwrap_err();
    fx.write("a.txt", "two, saved\n");
    assert_eq!(undo().await, None, "a refused restore is no undo");
    fx.write("a.txt", "two\n");
    let clean = Buffers::default();
    let restored = fx.checkpoints.restore(&first.id, &clean).await.unwrap();
    assert_eq!(fx.read("b.txt"), None);
    let label = points::UNDO_LABEL.to_string();
    assert_eq!(
        undo().await,
        Some((0, label.clone(), 2, restored.undo.id.clone()))
    );
    assert_eq!(
        fx.checkpoints
            .undo_point("c1")
            .await
            .unwrap()
            .map(|p| (p.turn, p.label)),
        Some((0, "the code before the last rewind".to_string()))
    );

    // A restore refused for unsaved buffers changed nothing: the undo is still the first one's.
    let dirty = Buffers {
        unsaved: vec![fx.path("a.txt").canonicalize().unwrap()],
        ..Buffers::default()
    };
    fx.write("a.txt", "three\n");
    fx.checkpoints.restore(&first.id, &dirty).await.unwrap_err();
    let three = undo().await.unwrap();
    assert_eq!((three.2, &three.3), (2, &restored.undo.id));

    // Undone: the files are back; undoing again is the redo.
    let undone = fx.checkpoints.restore(&three.3, &clean).await.unwrap();
    assert_eq!(
        (fx.read("a.txt"), fx.read("b.txt")),
        (Some("two\n".into()), Some("new\n".into()))
    );
    assert_eq!(undo().await.unwrap().3, undone.undo.id);

    // After a prompt, there is nothing to undo.
    fx.snapshot().await;
    assert_eq!(undo().await, None);
}

#[tokio::test]
async fn a_restore_removes_the_directories_created_since_once_empty() {
    let fx = Fixture::new();
    fx.write(".gitignore", "*.log\n");
    fx.write("src/a.txt", "a\n");
    let before = fx.snapshot().await;
    fx.write("made/sub/x.txt", "x\n");
    fx.write("made/y.txt", "y\n");
    fx.write("src/new.txt", "new\n");
    fx.write("logs/new.txt", "new\n");
    fx.write("logs/run.log", "ignored, kept\n");
    fx.checkpoints
        .restore(&before.id, &Buffers::default())
        .await
        .unwrap();
    assert!(!fx.path("made").exists(), "made/ was created since");
    assert_eq!(fx.read("src/a.txt"), Some("a\n".into()));
    assert!(!fx.path("src/new.txt").exists());
    // A directory holding what the checkpoint does not record stays, with it.
    assert_eq!(fx.read("logs/run.log"), Some("ignored, kept\n".into()));
    assert!(!fx.path("logs/new.txt").exists());
}

/// The permission bits of `rel` (0o7777).
fn bits(fx: &Fixture, rel: &str) -> u32 {
    std::fs::symlink_metadata(fx.path(rel)).unwrap().mode() & 0o7777
}

fn chmod(fx: &Fixture, rel: &str, mode: u32) {
    std::fs::set_permissions(fx.path(rel), std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test]
async fn a_rewind_brings_files_and_directories_back_with_the_modes_they_had() {
    let fx = Fixture::new();
    fx.write(".env", "KEY=secret\n");
    chmod(&fx, ".env", 0o600);
    fx.write("private/id", "key\n");
    chmod(&fx, "private/id", 0o600);
    chmod(&fx, "private", 0o700);
    fx.write("shared/notes.txt", "n\n");
    chmod(&fx, "shared", 0o2775);
    fx.write("bin/run", "#!/bin/sh\n");
    chmod(&fx, "bin/run", 0o700);
    fx.write("bin/tool", "#!/bin/sh\n");
    chmod(&fx, "bin/tool", 0o755);
    fx.write("group.txt", "g\n");
    chmod(&fx, "group.txt", 0o640);
    let before = fx.snapshot().await;
    // A command deletes them all.
    for rel in [".env", "private", "shared", "bin", "group.txt"] {
        let path = fx.path(rel);
        if path.is_dir() {
            std::fs::remove_dir_all(path).unwrap();
        } else {
            std::fs::remove_file(path).unwrap();
        }
    }
    fx.snapshot().await;
    fx.checkpoints
        .restore(&before.id, &Buffers::default())
        .await
        .unwrap();
    let got: Vec<(&str, u32)> = [
        ".env",
        "private",
        "private/id",
        "shared",
        "shared/notes.txt",
        "bin/run",
        "bin/tool",
        "group.txt",
    ]
    .into_iter()
    .map(|rel| (rel, bits(&fx, rel)))
    .collect();
    let umask = modes::umask();
    assert_eq!(
        got,
        [
            (".env", 0o600),
            ("private", 0o700),
            ("private/id", 0o600),
            ("shared", 0o2775),
            ("shared/notes.txt", modes::file_default(false, umask)),
            ("bin/run", 0o700),
            ("bin/tool", 0o755),
            ("group.txt", 0o640),
        ]
    );
    assert_eq!(fx.read(".env"), Some("KEY=secret\n".into()));
}

#[tokio::test]
async fn a_file_rewound_in_place_keeps_the_mode_it_has_now() {
    let fx = Fixture::new();
    fx.write("a.txt", "one\n");
    chmod(&fx, "a.txt", 0o640);
    let before = fx.snapshot().await;
    fx.write("a.txt", "two\n");
    chmod(&fx, "a.txt", 0o600);
    fx.checkpoints
        .restore(&before.id, &Buffers::default())
        .await
        .unwrap();
    assert_eq!(fx.read("a.txt"), Some("one\n".into()));
    assert_eq!(bits(&fx, "a.txt"), 0o600);
}

#[tokio::test]
async fn a_mode_changed_between_snapshots_is_the_one_the_later_snapshot_records() {
    // git sees no change in a chmod that keeps the execute bit: each snapshot looks again.
    let fx = Fixture::new();
    fx.write(".env", "KEY=1\n");
    fx.snapshot().await;
    chmod(&fx, ".env", 0o600);
    let second = fx.snapshot().await;
    std::fs::remove_file(fx.path(".env")).unwrap();
    fx.checkpoints
        .restore(&second.id, &Buffers::default())
        .await
        .unwrap();
    assert_eq!(bits(&fx, ".env"), 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_conversations_of_one_workspace_snapshot_at_once_without_losing_one() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    // A second conversation of the same workspace (another Checkpoints: its own refs and git
    // state), the same shadow repository: the repository's lock keeps them apart.
    let other = Checkpoints::new(
        fx._state.path(),
        Workspace::new(fx.ws.path()).unwrap(),
        "c2".into(),
    );
    let take = |checkpoints: Checkpoints, name: &'static str| {
        tokio::spawn(async move {
            let mut taken = Vec::new();
            for i in 0..15 {
                let label = format!("{name} {i}");
                taken.push(checkpoints.snapshot(Kind::Edit, &label).await.map(|s| s.id));
            }
            taken
        })
    };
    let (first, second) = tokio::join!(
        take(fx.checkpoints.clone(), "one"),
        take(other.clone(), "two")
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    // Every snapshot taken (none failed on a lock the other held), each on its own refs.
    assert!(
        first.iter().chain(&second).all(Result::is_ok),
        "{first:?} {second:?}"
    );
    assert_eq!(fx.checkpoints.list("c1").await.unwrap().len(), 15);
    assert_eq!(other.list("c2").await.unwrap().len(), 15);
    // One history: every snapshot is on HEAD's line, none forked off and lost.
    let on_head = fx
        .checkpoints
        .inner
        .git
        .line(&["rev-list", "--count", "--first-parent", "HEAD"])
        .await
        .unwrap();
    assert_eq!(on_head.trim(), "30");
}

#[tokio::test]
async fn another_conversations_later_changes_are_found_and_a_restore_can_spare_them() {
    let fx = Fixture::new();
    fx.write("mine.txt", "mine 0\n");
    fx.write("theirs.txt", "theirs 0\n");
    let other = Checkpoints::new(
        fx._state.path(),
        Workspace::new(fx.ws.path()).unwrap(),
        "c2".into(),
    );
    // Conversation 2 edits theirs.txt before my prompt: not after it, so not counted.
    other.snapshot(Kind::Edit, "theirs.txt").await.unwrap();
    fx.write("theirs.txt", "theirs 1\n");
    // My prompt (the point a rewind goes back to), then my edit.
    let point = fx.checkpoints.snapshot(Kind::Prompt, "mine").await.unwrap();
    fx.checkpoints
        .snapshot(Kind::Edit, "mine.txt")
        .await
        .unwrap();
    fx.write("mine.txt", "mine 1\n");
    // Conversation 2 makes mid.txt, and my next snapshot follows it: its change is counted up
    // to that one.
    other.snapshot(Kind::Write, "mid.txt").await.unwrap();
    fx.write("mid.txt", "mid\n");
    fx.checkpoints
        .snapshot(Kind::Prompt, "again")
        .await
        .unwrap();
    // Conversation 2's prompt (no change of its own), then a command that creates new.txt and
    // changes theirs.txt, the last change: counted up to the workspace now.
    other.snapshot(Kind::Prompt, "go on").await.unwrap();
    other.snapshot(Kind::Command, "make").await.unwrap();
    fx.write("theirs.txt", "theirs 2\n");
    fx.write("new.txt", "new\n");
    let theirs = fx.checkpoints.changed_by("c2", &point.id).await.unwrap();
    assert_eq!(
        theirs.iter().cloned().collect::<Vec<_>>(),
        [
            PathBuf::from("mid.txt"),
            PathBuf::from("new.txt"),
            PathBuf::from("theirs.txt")
        ]
    );
    // Mine are not theirs.
    let mine = other.changed_by("c1", &point.id).await.unwrap();
    assert_eq!(
        mine.into_iter().collect::<Vec<_>>(),
        [PathBuf::from("mine.txt")]
    );
    // Restoring my point while sparing theirs: my file back, theirs as conversation 2 left it.
    let restored = fx
        .checkpoints
        .restore_sparing(&point.id, &crate::editor::NoEditor, &theirs)
        .await
        .unwrap();
    assert_eq!(fx.read("mine.txt").as_deref(), Some("mine 0\n"));
    assert_eq!(fx.read("theirs.txt").as_deref(), Some("theirs 2\n"));
    assert_eq!(fx.read("new.txt").as_deref(), Some("new\n"));
    assert_eq!(fx.read("mid.txt").as_deref(), Some("mid\n"));
    assert_eq!(
        restored.spared,
        [
            PathBuf::from("mid.txt"),
            PathBuf::from("new.txt"),
            PathBuf::from("theirs.txt")
        ]
    );
    assert_eq!(
        restored.files,
        [(Status::Modified, PathBuf::from("mine.txt"))]
    );
}

#[tokio::test]
async fn a_snapshot_after_another_conversations_records_the_workspace_as_it_is_not_as_this_one_last_saw_it(
) {
    let fx = Fixture::new();
    fx.write("a.txt", "1\n");
    fx.checkpoints.snapshot(Kind::Edit, "a.txt").await.unwrap();
    // Another conversation of the workspace changes the file and snapshots (the shared index
    // now holds the change).
    let other = Checkpoints::new(
        fx._state.path(),
        Workspace::new(fx.ws.path()).unwrap(),
        "c2".into(),
    );
    fx.write("a.txt", "2\n");
    other.snapshot(Kind::Edit, "a.txt").await.unwrap();
    // Nothing changed since the index was written: this handle's snapshot is still of "2".
    let mine = fx.checkpoints.snapshot(Kind::Prompt, "next").await.unwrap();
    let recorded = fx
        .checkpoints
        .file_at(&mine.id, Path::new("a.txt"))
        .await
        .unwrap();
    assert_eq!(recorded.as_deref(), Some(&b"2\n"[..]));
}

#[tokio::test]
async fn restoring_only_some_files_puts_those_back_and_leaves_every_other_change() {
    let fx = Fixture::new();
    fx.write("a.py", "a 0\n");
    fx.write("b.py", "b 0\n");
    fx.write("gone.py", "gone 0\n");
    let point = fx.checkpoints.snapshot(Kind::Prompt, "go").await.unwrap();
    fx.write("a.py", "a 1\n");
    fx.write("b.py", "b 1\n");
    fx.write("new.py", "new\n");
    std::fs::remove_file(fx.ws.path().join("gone.py")).unwrap();
    let only: std::collections::BTreeSet<PathBuf> = [
        PathBuf::from("a.py"),
        PathBuf::from("new.py"),
        PathBuf::from("gone.py"),
    ]
    .into();
    let restored = fx
        .checkpoints
        .restore_only(&point.id, &crate::editor::NoEditor, &only)
        .await
        .unwrap();
    assert_eq!(fx.read("a.py").as_deref(), Some("a 0\n"));
    assert_eq!(fx.read("gone.py").as_deref(), Some("gone 0\n"));
    assert_eq!(fx.read("new.py"), None);
    // Not among them: as it was left.
    assert_eq!(fx.read("b.py").as_deref(), Some("b 1\n"));
    let mut files = restored.files.clone();
    files.sort_by(|x, y| x.1.cmp(&y.1));
    assert_eq!(
        files,
        [
            (Status::Modified, PathBuf::from("a.py")),
            (Status::Added, PathBuf::from("gone.py")),
            (Status::Deleted, PathBuf::from("new.py")),
        ]
    );
    assert!(restored.spared.is_empty());
    // And it can be undone like any restore.
    fx.checkpoints
        .restore(&restored.undo.id, &crate::editor::NoEditor)
        .await
        .unwrap();
    assert_eq!(fx.read("a.py").as_deref(), Some("a 1\n"));
}
