//! The user's own git repository as the checkpoint tests see it: their `git`, run with a
//! configuration of the test's alone, and everything under `.git` to compare byte for byte.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `git ARGS` in `root` as the user would (no system or global configuration of the
/// machine's, a fixed identity); its stdout. Panics when git fails.
pub fn git(root: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "u")
        .env("GIT_AUTHOR_EMAIL", "u@x")
        .env("GIT_COMMITTER_NAME", "u")
        .env("GIT_COMMITTER_EMAIL", "u@x")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Every entry under `dir` (links not followed): its bytes for a file or link, its mode and its
/// modification time to the nanosecond.
pub type Entries = BTreeMap<PathBuf, (Vec<u8>, u32, i64, i64)>;

/// [`Entries`] of `dir`.
pub fn entries(dir: &Path) -> Entries {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let entry = entry.unwrap();
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            let bytes = if meta.is_dir() {
                stack.push(entry.path());
                Vec::new()
            } else if meta.file_type().is_symlink() {
                use std::os::unix::ffi::OsStrExt;
                let target = std::fs::read_link(entry.path()).unwrap();
                target.as_os_str().as_bytes().to_vec()
            } else {
                std::fs::read(entry.path()).unwrap()
            };
            let rel = entry.path().strip_prefix(dir).unwrap().to_path_buf();
            found.insert(rel, (bytes, meta.mode(), meta.mtime(), meta.mtime_nsec()));
        }
    }
    found
}

/// The paths whose entry differs between `before` and `after` (added, removed or changed).
pub fn differing(before: &Entries, after: &Entries) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = before
        .keys()
        .chain(after.keys())
        .filter(|key| before.get(*key) != after.get(*key))
        .cloned()
        .collect();
    paths.dedup();
    paths
}
