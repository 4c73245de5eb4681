//! The attacks a review found on the file tools, each kept as a regression test: links swapped in
//! while a call runs or while an approval is pending, special files, huge files, metadata an edit
//! used to lose, concurrent edits, and names that are not simple text.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::testing::{call, executor};
use super::{Executor, Settings, ToolContext, ToolResult};
use crate::approval::{Asker, Gate};
use crate::editor::NoEditor;
use crate::workspace::Workspace;
use agent_nvim_vocab::approval::{ApprovalRequest, Decision};

/// The marker every byte outside the workspace carries: no result may ever contain it.
const SECRET: &str = "OUTSIDE-SECRET";

/// `<base>/repo` (the workspace) beside `<base>/outside`.
struct Tree {
    _dir: tempfile::TempDir,
    base: PathBuf,
    repo: PathBuf,
    outside: PathBuf,
}

fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let repo = base.join("repo");
    let outside = base.join("outside");
    std::fs::create_dir_all(repo.join("d")).unwrap();
    std::fs::create_dir_all(outside.join("d")).unwrap();
    for file in ["secret.txt", "d/f.txt", "d/only-outside.txt"] {
        std::fs::write(outside.join(file), format!("state0 {SECRET}\n")).unwrap();
    }
    std::fs::write(repo.join("d/f.txt"), "state0 inside\n").unwrap();
    std::fs::write(repo.join("f.txt"), "state0 inside\n").unwrap();
    Tree {
        _dir: dir,
        base,
        repo,
        outside,
    }
}

/// Every file and directory below `dir`, with the bytes of the files.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                todo.push(path.clone());
                out.insert(path, None);
            } else {
                out.insert(path.clone(), Some(std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    out
}

fn auto_executor(ws: Workspace, settings: Settings) -> Executor {
    Executor::new(ToolContext {
        workspace: ws,
        gate: Arc::new(Gate::new(true, None)),
        editor: Arc::new(NoEditor),
        settings,
        checkpoints: None,
    })
}

fn edit(path: &str, old: &str, new: &str) -> Value {
    json!({"path": path, "old_str": old, "new_str": new})
}

/// Swaps `a` and `b` (a real directory or file and a link to the outside) atomically, over and
/// over, while 3,000 calls run; nothing outside may be read, created or changed.
fn race(walk: bool) {
    let t = tree();
    symlink(t.outside.join("d"), t.repo.join("dswap")).unwrap();
    symlink("../outside/secret.txt", t.repo.join("fswap")).unwrap();
    let before = snapshot(&t.outside);
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps, repo) = (stop.clone(), swaps.clone(), t.repo.clone());
        std::thread::spawn(move || {
            let dir = rustix::fs::open(
                &repo,
                rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
                rustix::fs::Mode::empty(),
            )
            .unwrap();
            while !stop.load(Ordering::Relaxed) {
                for (a, b) in [("d", "dswap"), ("f.txt", "fswap")] {
                    rustix::fs::renameat_with(&dir, a, &dir, b, rustix::fs::RenameFlags::EXCHANGE)
                        .unwrap();
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let ws = if walk {
        Workspace::walking(&t.repo).unwrap()
    } else {
        Workspace::new(&t.repo).unwrap()
    };
    let ex = auto_executor(ws, Settings::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Successful reads and writes: the race is only a test if some calls got through.
    let mut succeeded = [0usize; 2];
    runtime.block_on(async {
        for i in 0..3000 {
            let (tool, args) = match i % 6 {
                0 => ("read_file", json!({"path": "d/f.txt"})),
                1 => ("read_file", json!({"path": "f.txt"})),
                2 => ("list_files", json!({"path": "d"})),
                3 => ("edit_file", edit("f.txt", "state0", "state0!")),
                4 => ("edit_file", edit("d/f.txt", "state0", "state0!")),
                _ => ("edit_file", edit(&format!("d/new-{i}.txt"), "", "new\n")),
            };
            let result = call(&ex, tool, args).await;
            assert!(
                !result.text.contains(SECRET) && !result.text.contains("only-outside"),
                "{tool} read outside: {result:?}"
            );
            succeeded[usize::from(tool == "edit_file")] += usize::from(result.ok);
        }
    });
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert_eq!(snapshot(&t.outside), before, "something outside changed");
    // The race really ran: the swapper swapped throughout and calls went through between swaps.
    assert!(swaps.load(Ordering::Relaxed) > 1000, "too few swaps");
    assert!(
        succeeded.iter().all(|n| *n > 0),
        "no read or no write went through: {succeeded:?}"
    );
}

#[test]
fn links_swapped_in_during_calls_never_lead_outside() {
    race(false);
}

#[test]
fn links_swapped_in_during_calls_never_lead_outside_when_walking_components() {
    race(true);
}

/// An asker that does something to the disk while "the user is deciding", then allows.
struct OnAsk(Box<dyn Fn() + Send + Sync>);

impl Asker for OnAsk {
    fn ask(&self, _request: ApprovalRequest) -> BoxFuture<'_, Option<Decision>> {
        (self.0)();
        Box::pin(async { Some(Decision::AllowOnce) })
    }
}

fn asking_executor(root: &Path, on_ask: impl Fn() + Send + Sync + 'static) -> Executor {
    Executor::new(ToolContext {
        workspace: Workspace::new(root).unwrap(),
        gate: Arc::new(Gate::new(false, Some(Arc::new(OnAsk(Box::new(on_ask)))))),
        editor: Arc::new(NoEditor),
        settings: Settings::default(),
        checkpoints: None,
    })
}

fn changed(rel: &str) -> ToolResult {
    ToolResult::fail(format!(
        "edit_file: {rel} changed while waiting for approval; read it again."
    ))
}

#[tokio::test]
async fn a_directory_swapped_for_a_link_while_the_picker_is_open_gets_nothing_written() {
    let t = tree();
    let (repo, outside) = (t.repo.clone(), t.outside.clone());
    let ex = asking_executor(&t.repo, move || {
        std::fs::rename(repo.join("d"), repo.join("d.moved")).unwrap();
        symlink(outside.join("d"), repo.join("d")).unwrap();
    });
    let before = snapshot(&t.outside);
    assert_eq!(
        call(
            &ex,
            "edit_file",
            edit("d/authorized_keys", "", "ssh-ed25519 AAAA\n")
        )
        .await,
        changed("d/authorized_keys")
    );
    assert_eq!(snapshot(&t.outside), before);
}

#[tokio::test]
async fn a_file_swapped_for_a_link_while_the_picker_is_open_is_not_written() {
    let t = tree();
    let (repo, outside) = (t.repo.clone(), t.outside.clone());
    let ex = asking_executor(&t.repo, move || {
        std::fs::remove_file(repo.join("f.txt")).unwrap();
        symlink(outside.join("secret.txt"), repo.join("f.txt")).unwrap();
    });
    let before = snapshot(&t.outside);
    assert_eq!(
        call(&ex, "edit_file", edit("f.txt", "state0", "pwned")).await,
        changed("f.txt")
    );
    assert_eq!(snapshot(&t.outside), before);
    let _ = t.base;
}

#[tokio::test]
async fn a_file_replaced_by_another_with_the_same_bytes_is_a_change() {
    let t = tree();
    let repo = t.repo.clone();
    let ex = asking_executor(&t.repo, move || {
        std::fs::write(repo.join("other.txt"), "state0 inside\n").unwrap();
        std::fs::rename(repo.join("other.txt"), repo.join("f.txt")).unwrap();
    });
    assert_eq!(
        call(&ex, "edit_file", edit("f.txt", "state0", "state1")).await,
        changed("f.txt")
    );
}

/// Runs `tool` with `args`, failing the test instead of hanging if the call blocks.
async fn bounded(ex: &Executor, tool: &str, args: Value) -> ToolResult {
    tokio::time::timeout(Duration::from_secs(20), call(ex, tool, args))
        .await
        .unwrap_or_else(|_| panic!("{tool} blocked"))
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
}

#[tokio::test]
async fn a_fifo_is_not_a_regular_file_and_nothing_blocks_on_it() {
    let (dir, ex, rec) = executor(Some(Decision::AllowOnce));
    mkfifo(&dir.path().join("p"));
    assert_eq!(
        (
            bounded(&ex, "read_file", json!({"path": "p"})).await,
            bounded(&ex, "edit_file", edit("p", "a", "b")).await,
            bounded(&ex, "edit_file", edit("p", "", "b")).await,
        ),
        (
            ToolResult::fail("Not a regular file: p"),
            ToolResult::fail("Not a regular file: p"),
            ToolResult::fail("Not a regular file: p"),
        )
    );
    assert!(rec.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_character_device_is_not_read() {
    let (dir, ex, _) = executor(Some(Decision::AllowOnce));
    let made = rustix::fs::mknodat(
        rustix::fs::CWD,
        dir.path().join("z"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o644),
        rustix::fs::makedev(1, 5),
    );
    if made.is_err() {
        eprintln!("skipped: mknod needs CAP_MKNOD ({made:?})");
        return;
    }
    assert_eq!(
        (
            bounded(&ex, "read_file", json!({"path": "z"})).await,
            bounded(&ex, "edit_file", edit("z", "a", "b")).await,
        ),
        (
            ToolResult::fail("Not a regular file: z"),
            ToolResult::fail("Not a regular file: z"),
        )
    );
}

#[tokio::test]
async fn a_file_above_the_limit_is_refused_before_it_is_read() {
    let (dir, ex, rec) = executor(Some(Decision::AllowOnce));
    let file = std::fs::File::create(dir.path().join("huge.log")).unwrap();
    file.set_len(10 * 1024 * 1024 * 1024).unwrap();
    assert_eq!(
        bounded(&ex, "edit_file", edit("huge.log", "a", "b")).await,
        ToolResult::fail("edit_file: huge.log is 10240 MB, more than the 64 MB edit_file handles.")
    );
    assert!(rec.asked.lock().unwrap().is_empty());

    let ex = auto_executor(
        Workspace::new(dir.path()).unwrap(),
        Settings {
            max_edit_mb: 1,
            ..Settings::default()
        },
    );
    std::fs::write(dir.path().join("two.txt"), "x".repeat(1024 * 1024 + 1)).unwrap();
    assert_eq!(
        call(&ex, "edit_file", edit("two.txt", "x", "y")).await,
        ToolResult::fail("edit_file: two.txt is 1.1 MB, more than the 1 MB edit_file handles.")
    );
}

#[tokio::test]
async fn paths_that_loop_are_too_long_or_pass_through_a_file_say_so() {
    let (dir, ex, _) = executor(Some(Decision::AllowOnce));
    symlink("l2", dir.path().join("l1")).unwrap();
    symlink("l1", dir.path().join("l2")).unwrap();
    std::fs::write(dir.path().join("file.txt"), "x").unwrap();
    let long = "n".repeat(300);
    assert_eq!(
        (
            call(&ex, "read_file", json!({"path": "l1/x"})).await,
            call(&ex, "read_file", json!({"path": long})).await,
            call(&ex, "read_file", json!({"path": "file.txt/"})).await,
            call(&ex, "read_file", json!({"path": "file.txt/x"})).await,
            call(&ex, "edit_file", edit("file.txt/", "x", "y")).await,
        ),
        (
            ToolResult::fail("Refused: 'l1/x' has too many levels of symbolic links."),
            ToolResult::fail(format!("Refused: '{long}' is too long.")),
            ToolResult::fail("No such directory: file.txt/"),
            ToolResult::fail("No such directory: file.txt/x"),
            ToolResult::fail("No such directory: file.txt/"),
        )
    );
}

#[tokio::test]
async fn a_read_only_file_is_refused_even_for_root() {
    let (dir, ex, rec) = executor(Some(Decision::AllowOnce));
    let file = dir.path().join("ro.txt");
    std::fs::write(&file, "old").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
    assert_eq!(
        call(&ex, "edit_file", edit("ro.txt", "old", "new")).await,
        ToolResult::fail("edit_file: ro.txt is read-only.")
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "old");
    assert!(rec.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_edit_keeps_owner_group_mode_and_extended_attributes() {
    let (dir, ex, _) = executor(Some(Decision::AllowOnce));
    let file = dir.path().join("kept.txt");
    std::fs::write(&file, "old\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        std::os::unix::fs::chown(&file, Some(1234), Some(2345)).unwrap();
    }
    // A user attribute and a POSIX ACL (user 1234 may read), as the kernel stores it.
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 6u16, u32::MAX),
        (0x02, 4, 1234),
        (0x04, 4, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    let flags = rustix::fs::XattrFlags::empty();
    rustix::fs::setxattr(&file, "user.origin", b"kept", flags).unwrap();
    let has_acl = rustix::fs::setxattr(&file, "system.posix_acl_access", &acl, flags).is_ok();
    let xattrs = |path: &Path| -> Vec<(String, Vec<u8>)> {
        ["user.origin", "system.posix_acl_access"]
            .iter()
            .filter_map(|name| {
                let mut buf = vec![0u8; 256];
                let n = rustix::fs::getxattr(path, *name, &mut buf[..]).ok()?;
                Some((name.to_string(), buf[..n].to_vec()))
            })
            .collect()
    };
    let meta = |path: &Path| {
        let m = std::fs::metadata(path).unwrap();
        (m.uid(), m.gid(), m.mode() & 0o7777)
    };
    let (want_meta, want_xattrs) = (meta(&file), xattrs(&file));
    assert_eq!(want_xattrs.len(), if has_acl { 2 } else { 1 });
    let inode = std::fs::metadata(&file).unwrap().ino();
    assert_eq!(
        call(&ex, "edit_file", edit("kept.txt", "old", "new")).await,
        ToolResult::ok("Edited kept.txt.", "edit kept.txt")
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "new\n");
    // Replaced atomically (a new inode), with everything the old one had.
    assert_ne!(std::fs::metadata(&file).unwrap().ino(), inode);
    assert_eq!((meta(&file), xattrs(&file)), (want_meta, want_xattrs));
    if root {
        assert_eq!(meta(&file).0, 1234);
    }
}

#[tokio::test]
async fn a_hard_linked_file_is_edited_in_place_so_every_name_sees_it() {
    let (dir, ex, rec) = executor(Some(Decision::AllowOnce));
    let (a, b) = (dir.path().join("a.txt"), dir.path().join("b.txt"));
    std::fs::write(&a, "one\ntwo\n").unwrap();
    std::fs::hard_link(&a, &b).unwrap();
    let inode = std::fs::metadata(&a).unwrap().ino();
    assert!(
        call(&ex, "edit_file", edit("a.txt", "two", "deux"))
            .await
            .ok
    );
    assert_eq!(
        (
            std::fs::read_to_string(&a).unwrap(),
            std::fs::read_to_string(&b).unwrap(),
            std::fs::metadata(&a).unwrap().ino(),
        ),
        ("one\ndeux\n".to_string(), "one\ndeux\n".to_string(), inode)
    );
    // A shorter text is cut to its length, and no staging file is left.
    assert!(
        call(&ex, "edit_file", edit("b.txt", "one\ndeux\n", "1"))
            .await
            .ok
    );
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "1");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with(".agent-edit-")),
        "{names:?}"
    );
    // The person was told the file has other names.
    let asked = rec.asked.lock().unwrap();
    assert!(
        asked[0]
            .diff
            .as_deref()
            .unwrap()
            .starts_with("[a.txt has 2 names (hard links): the edit changes the file under every name]\n--- a/a.txt\n"),
        "{:?}",
        asked[0].diff
    );
}

#[tokio::test]
async fn names_with_a_newline_or_invalid_utf8_are_listed_in_a_form_the_tools_accept() {
    use std::os::unix::ffi::OsStrExt;
    let (dir, ex, _) = executor(Some(Decision::AllowOnce));
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9");
    std::fs::write(dir.path().join("two\nlines.txt"), "first\n").unwrap();
    std::fs::write(dir.path().join(odd), "second\n").unwrap();
    std::fs::create_dir(dir.path().join("sub\tdir")).unwrap();
    let listing = call(&ex, "list_files", json!({})).await;
    assert_eq!(
        listing,
        ToolResult::ok(
            "\"sub\\tdir\"/\n\"caf\\xe9\"\n\"two\\nlines.txt\"",
            "list . (3 entries)"
        )
    );
    assert_eq!(
        (
            call(&ex, "read_file", json!({"path": "\"two\\nlines.txt\""})).await,
            call(&ex, "read_file", json!({"path": "\"caf\\xe9\""})).await,
            call(&ex, "edit_file", edit("\"caf\\xe9\"", "second", "2nd")).await,
            call(&ex, "list_files", json!({"path": "\"sub\\tdir\""})).await,
        ),
        (
            ToolResult::ok("first\n", "read \"two\\nlines.txt\" (6 chars)"),
            ToolResult::ok("second\n", "read \"caf\\xe9\" (7 chars)"),
            ToolResult::ok("Edited \"caf\\xe9\".", "edit \"caf\\xe9\""),
            ToolResult::ok("(empty directory)", "list \"sub\\tdir\" (0 entries)"),
        )
    );
    assert_eq!(std::fs::read(dir.path().join(odd)).unwrap(), b"2nd\n");
}

#[tokio::test]
async fn links_are_listed_by_where_they_lead() {
    let t = tree();
    symlink(t.outside.join("d"), t.repo.join("out")).unwrap();
    symlink("d", t.repo.join("in")).unwrap();
    let ex = auto_executor(Workspace::new(&t.repo).unwrap(), Settings::default());
    assert_eq!(
        call(&ex, "list_files", json!({})).await,
        ToolResult::ok("d/\nin/\nf.txt\nout", "list . (4 entries)")
    );
}

#[tokio::test]
async fn a_cancel_ends_a_read_at_once() {
    let (_dir, ex, _) = executor(None);
    let cancel = CancellationToken::new();
    cancel.cancel();
    assert_eq!(
        ex.call("read_file", &json!({"path": "x"}), &cancel).await,
        ToolResult::fail(super::CANCELLED)
    );
}

#[tokio::test]
async fn the_preview_shows_what_the_edit_makes_of_stray_bytes_around_the_span() {
    // The two halves of U+202E (RIGHT-TO-LEFT OVERRIDE) on either side of the replaced span: each
    // alone is invalid UTF-8, joined by the edit they are the override.
    let (dir, ex, rec) = executor(Some(Decision::AllowOnce));
    let file = dir.path().join("t.rs");
    std::fs::write(&file, b"let ok = 1; \xe2\x80MARK\xae // x\n").unwrap();
    assert!(call(&ex, "edit_file", edit("t.rs", "MARK", "")).await.ok);
    let written = std::fs::read(&file).unwrap();
    assert_eq!(written, "let ok = 1; \u{202e} // x\n".as_bytes());
    let preview = rec.asked.lock().unwrap()[0].diff.clone().unwrap();
    assert!(
        preview.contains("\n+let ok = 1; \u{202e} // x\n"),
        "the preview does not show what is written: {preview:?}"
    );
}

#[tokio::test]
async fn an_edit_does_not_carry_file_capabilities_over_to_the_new_content() {
    // A write drops a file's capabilities (the kernel removes security.capability on every
    // write, for root too); a replace must not keep them either.
    let (dir, ex, _) = executor(Some(Decision::AllowOnce));
    let file = dir.path().join("tool");
    std::fs::write(&file, "old\n").unwrap();
    // vfs_cap_data revision 2, effective, permitted = CAP_SETUID (bit 7).
    let mut cap = (0x0200_0000u32 | 1).to_le_bytes().to_vec();
    for word in [1u32 << 7, 0, 0, 0] {
        cap.extend_from_slice(&word.to_le_bytes());
    }
    let flags = rustix::fs::XattrFlags::empty();
    if let Err(err) = rustix::fs::setxattr(&file, "security.capability", &cap, flags) {
        eprintln!("skipped: cannot set security.capability here ({err})");
        return;
    }
    assert!(call(&ex, "edit_file", edit("tool", "old", "new")).await.ok);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "new\n");
    let mut buf = [0u8; 64];
    assert_eq!(
        rustix::fs::getxattr(&file, "security.capability", &mut buf[..]).err(),
        Some(rustix::io::Errno::NODATA)
    );
}

#[tokio::test]
async fn a_cancel_ends_an_edit_waiting_for_a_lock_another_process_holds() {
    let (dir, ex, rec) = executor(Some(Decision::AllowOnce));
    let file = dir.path().join("held.txt");
    std::fs::write(&file, "old\n").unwrap();
    // A lock taken through another open file conflicts as another process's would.
    let holder = std::fs::File::open(&file).unwrap();
    rustix::fs::flock(&holder, rustix::fs::FlockOperation::LockShared).unwrap();
    let cancel = CancellationToken::new();
    let canceller = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            while rec.asked.lock().unwrap().is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancel.cancel();
        })
    };
    // The lock is waited for up to 10 s; the cancel must end the wait long before.
    let result = tokio::time::timeout(
        Duration::from_secs(8),
        ex.call("edit_file", &edit("held.txt", "old", "new"), &cancel),
    )
    .await
    .expect("the edit kept waiting for the lock after the cancel");
    canceller.await.unwrap();
    assert_eq!(
        result,
        ToolResult::fail_with(super::CANCELLED, "edit held.txt: cancelled")
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "old\n");
}

#[tokio::test]
async fn a_link_that_walks_up_and_down_thousands_of_times_is_refused_as_a_loop() {
    // Each `a/..` is one lookup on the disk; a repository of such links (a git checkout keeps
    // them) made every list_files of their directory take a lookup per step per link.
    let (dir, ex, _) = executor(None);
    std::fs::create_dir(dir.path().join("a")).unwrap();
    std::fs::write(dir.path().join("f.txt"), "reached\n").unwrap();
    symlink(
        format!("{}f.txt", "a/../".repeat(800)),
        dir.path().join("l1"),
    )
    .unwrap();
    symlink(format!("{}l1", "a/../".repeat(800)), dir.path().join("l2")).unwrap();
    assert_eq!(
        call(&ex, "read_file", json!({"path": "l2"})).await,
        ToolResult::fail("Refused: 'l2' has too many levels of symbolic links.")
    );
    // A link with a few steps is followed as before.
    symlink("a/../a/../f.txt", dir.path().join("short")).unwrap();
    assert!(call(&ex, "read_file", json!({"path": "short"})).await.ok);
}
