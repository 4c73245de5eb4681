#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use agent_nvim_fixtures::user_repo::git as user_git;

/// A repository with one commit (`a.txt`, `sub/b.txt`), and a folder for worktrees.
fn repo() -> (tempfile::TempDir, tempfile::TempDir) {
    let main = tempfile::tempdir().unwrap();
    std::fs::write(main.path().join("a.txt"), "a\n").unwrap();
    std::fs::create_dir(main.path().join("sub")).unwrap();
    std::fs::write(main.path().join("sub/b.txt"), "b\n").unwrap();
    user_git(main.path(), &["init", "-q"]);
    user_git(main.path(), &["add", "-A"]);
    user_git(main.path(), &["commit", "-q", "-m", "one"]);
    (main, tempfile::tempdir().unwrap())
}

#[tokio::test]
async fn a_worktree_starts_from_the_main_trees_commit_on_a_branch_of_its_own() {
    let (main, under) = repo();
    let (worktree, root) =
        Worktree::create(&main.path().join("sub"), Some("agent/fix"), under.path())
            .await
            .unwrap();
    // The conversation's root is the same place inside it as the workspace was.
    assert_eq!(root, worktree.dir.join("sub"));
    assert!(worktree
        .dir
        .starts_with(under.path().canonicalize().unwrap()));
    assert_eq!(std::fs::read_to_string(root.join("b.txt")).unwrap(), "b\n");
    assert_eq!(worktree.branch, "agent/fix");
    assert_eq!(
        user_git(main.path(), &["rev-parse", "HEAD"]).trim(),
        worktree.base
    );
    assert!(user_git(main.path(), &["branch", "--list", "agent/fix"]).contains("agent/fix"));
    // Nothing changed yet; the main tree is as it was.
    assert!(worktree.changes().await.unwrap().is_empty());
    assert_eq!(user_git(main.path(), &["status", "--porcelain"]), "");
    // A branch that exists already is refused, saying so.
    let again = Worktree::create(main.path(), Some("agent/fix"), under.path()).await;
    assert!(
        matches!(&again, Err(WorktreeError::Branch { branch, .. }) if branch == "agent/fix"),
        "{again:?}"
    );
    // Without a branch name: agent/<date>-<time>.
    let (dated, _) = Worktree::create(main.path(), None, under.path())
        .await
        .unwrap();
    assert!(
        dated.branch.starts_with("agent/20") && dated.branch.len() == "agent/20261205-142501".len(),
        "{}",
        dated.branch
    );
}

#[tokio::test]
async fn outside_a_repository_a_worktree_says_why_it_cannot() {
    let plain = tempfile::tempdir().unwrap();
    let under = tempfile::tempdir().unwrap();
    let err = Worktree::create(plain.path(), None, under.path())
        .await
        .unwrap_err();
    assert!(
        matches!(err, WorktreeError::NotARepository { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("a worktree needs a git repository, and "),
        "{err}"
    );
}

#[tokio::test]
async fn its_changes_are_merged_into_the_main_working_tree_only_and_a_conflict_writes_nothing() {
    let (main, under) = repo();
    let (worktree, _) = Worktree::create(main.path(), Some("agent/work"), under.path())
        .await
        .unwrap();
    std::fs::write(worktree.dir.join("a.txt"), "a\nmore\n").unwrap();
    std::fs::write(worktree.dir.join("new.txt"), "new\n").unwrap();
    std::fs::remove_file(worktree.dir.join("sub/b.txt")).unwrap();
    let changes = worktree.changes().await.unwrap();
    let listed: Vec<(char, &str)> = changes
        .iter()
        .map(|c| (c.status, c.path.to_str().unwrap()))
        .collect();
    assert_eq!(
        listed,
        [('M', "a.txt"), ('A', "new.txt"), ('D', "sub/b.txt")]
    );
    // The worktree's own index was not touched: git there still sees them unstaged.
    let status = user_git(&worktree.dir, &["status", "--porcelain"]);
    assert!(
        status.contains(" M a.txt") && status.contains("?? new.txt"),
        "{status}"
    );

    // A conflict: the main tree changed a.txt too. Nothing is written, and the file is named.
    std::fs::write(main.path().join("a.txt"), "A\n").unwrap();
    let err = worktree.merge().await.unwrap_err();
    assert!(
        matches!(&err, WorktreeError::Conflicts { files, .. } if files == &["a.txt".to_string()]),
        "{err:?}"
    );
    assert!(err.to_string().contains("a.txt"), "{err}");
    assert!(!main.path().join("new.txt").exists());
    assert!(main.path().join("sub/b.txt").exists());

    // Undone there, the merge writes the main tree's files, never its index or branch.
    std::fs::write(main.path().join("a.txt"), "a\n").unwrap();
    let head = user_git(main.path(), &["rev-parse", "HEAD"]);
    let merged = worktree.merge().await.unwrap();
    assert_eq!(merged.len(), 3);
    assert_eq!(
        std::fs::read_to_string(main.path().join("a.txt")).unwrap(),
        "a\nmore\n"
    );
    assert_eq!(
        std::fs::read_to_string(main.path().join("new.txt")).unwrap(),
        "new\n"
    );
    assert!(!main.path().join("sub/b.txt").exists());
    assert_eq!(user_git(main.path(), &["rev-parse", "HEAD"]), head);
    let status = user_git(main.path(), &["status", "--porcelain"]);
    assert!(
        status.contains(" M a.txt")
            && status.contains("?? new.txt")
            && status.contains(" D sub/b.txt"),
        "nothing staged: {status}"
    );

    // Removed: the directory goes (forced, as it holds changes), the branch stays.
    assert!(worktree.remove(false).await.is_err());
    worktree.remove(true).await.unwrap();
    assert!(!worktree.dir.exists());
    assert!(user_git(main.path(), &["branch", "--list", "agent/work"]).contains("agent/work"));
}
