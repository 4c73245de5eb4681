//! The workspace's files, for `@` completion in the chat's input: listed once beneath the root
//! as ripgrep lists them (the `ignore` crate: `.gitignore`, `.ignore` and git's excludes
//! respected, in a git repository or not; hidden files listed, `.git` not; links not followed),
//! kept, and matched fuzzily (helix's `nucleo-matcher`, scored for paths) for each query.
//!
//! A query answers from the listing it has and, when that is older than [`FRESH`], lists again
//! in the background for the next one: typing never waits for the disk, and a file created a
//! few seconds ago shows up on the next keystroke after that. Only the very first query waits
//! for the walk (the front end starts one when the session starts, so usually none does).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nucleo_matcher::pattern::{CaseMatching, Normalization, Pattern};
use nucleo_matcher::{Config, Matcher, Utf32Str};

/// How long a listing is used before the next query lists the files again.
pub const FRESH: Duration = Duration::from_secs(5);
/// The most files listed: past that, the rest of a huge tree is not offered.
pub const MAX_FILES: usize = 500_000;

/// The listing of one workspace's files, shared by every query.
#[derive(Debug)]
pub struct FileIndex {
    root: PathBuf,
    listed: Mutex<Option<Listing>>,
    refreshing: Arc<AtomicBool>,
}

#[derive(Debug, Clone)]
struct Listing {
    files: Arc<Vec<String>>,
    taken: Instant,
}

/// What a query found: the best matches, best first, and how many files there are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub files: Vec<String>,
    pub total: usize,
}

impl FileIndex {
    /// An index of the files beneath `root` (the workspace's canonical root); nothing is listed
    /// until the first query or [`FileIndex::warm`].
    pub fn new(root: &Path) -> Arc<Self> {
        Arc::new(FileIndex {
            root: root.to_path_buf(),
            listed: Mutex::new(None),
            refreshing: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Lists the files now if they were never listed (the session starts it, so the first `@`
    /// does not wait).
    pub async fn warm(self: &Arc<Self>) {
        self.files().await;
    }

    /// The files, relative to the root, in byte order: the listing kept, refreshed in the
    /// background once it is older than [`FRESH`]; listed now (awaited) the first time.
    pub async fn files(self: &Arc<Self>) -> Arc<Vec<String>> {
        let kept = self
            .listed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match kept {
            Some(listing) => {
                if listing.taken.elapsed() >= FRESH && !self.refreshing.swap(true, Ordering::SeqCst)
                {
                    let index = self.clone();
                    tokio::spawn(async move {
                        index.relist().await;
                        index.refreshing.store(false, Ordering::SeqCst);
                    });
                }
                listing.files
            }
            None => self.relist().await,
        }
    }

    /// The best `limit` matches of `query` (fuzzy; empty: the first files), best first.
    pub async fn find(self: &Arc<Self>, query: &str, limit: usize) -> Found {
        let files = self.files().await;
        Found {
            files: best_matches(&files, query, limit),
            total: files.len(),
        }
    }

    async fn relist(&self) -> Arc<Vec<String>> {
        let root = self.root.clone();
        let files = tokio::task::spawn_blocking(move || list(&root))
            .await
            .unwrap_or_else(|join| {
                tracing::warn!(%join, "listing the workspace's files failed");
                Vec::new()
            });
        let files = Arc::new(files);
        *self.listed.lock().unwrap_or_else(PoisonError::into_inner) = Some(Listing {
            files: files.clone(),
            taken: Instant::now(),
        });
        files
    }
}

/// The files beneath `root`, relative to it, in byte order (see the module doc for what is
/// left out). Names that are not UTF-8, or hold a control or invisible character, are left out
/// too: completion would put a different name in the prompt than the one on disk.
pub fn list(root: &Path) -> Vec<String> {
    let (sender, received) = std::sync::mpsc::channel::<Vec<String>>();
    let walker = ignore::WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|entry| entry.file_name() != ".git")
        .build_parallel();
    walker.run(|| {
        let sender = sender.clone();
        let mut batch = Batch {
            files: Vec::new(),
            sender,
        };
        Box::new(move |entry| {
            let Ok(entry) = entry else {
                return ignore::WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return ignore::WalkState::Continue;
            }
            let rel = entry.path().strip_prefix(root).ok().and_then(Path::to_str);
            if let Some(rel) = rel.filter(|rel| plain(rel)) {
                batch.files.push(rel.to_string());
                if batch.files.len() >= 4096 {
                    batch.send();
                }
            }
            ignore::WalkState::Continue
        })
    });
    drop(sender);
    let mut files: Vec<String> = received.into_iter().flatten().collect();
    files.sort_unstable();
    files.truncate(MAX_FILES);
    files
}

/// One walker thread's files, sent in chunks and when the thread is done.
struct Batch {
    files: Vec<String>,
    sender: std::sync::mpsc::Sender<Vec<String>>,
}

impl Batch {
    fn send(&mut self) {
        let _ = self.sender.send(std::mem::take(&mut self.files));
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.send();
    }
}

/// A name that reads as it is written.
fn plain(rel: &str) -> bool {
    crate::display::visible(rel, crate::display::Layout::OneLine) == rel
}

/// The `limit` best fuzzy matches of `query` among `files`, best first: the higher score, then
/// the shorter path, then byte order. An empty query keeps the files' order.
pub fn best_matches(files: &[String], query: &str, limit: usize) -> Vec<String> {
    let query = query.trim();
    if query.is_empty() {
        return files.iter().take(limit).cloned().collect();
    }
    let mut matcher = Matcher::new(Config::DEFAULT.match_paths());
    let pattern = Pattern::parse(query, CaseMatching::Smart, Normalization::Smart);
    let mut buf = Vec::new();
    let mut scored: Vec<(u32, &String)> = files
        .iter()
        .filter_map(|file| {
            pattern
                .score(Utf32Str::new(file, &mut buf), &mut matcher)
                .map(|score| (score, file))
        })
        .collect();
    let order = |a: &(u32, &String), b: &(u32, &String)| {
        b.0.cmp(&a.0)
            .then(a.1.len().cmp(&b.1.len()))
            .then(a.1.cmp(b.1))
    };
    if scored.len() > limit && limit > 0 {
        scored.select_nth_unstable_by(limit - 1, order);
        scored.truncate(limit);
    }
    scored.sort_unstable_by(order);
    scored
        .into_iter()
        .take(limit)
        .map(|(_, file)| file.clone())
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn tree(files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for file in files {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
        dir
    }

    #[test]
    fn the_listing_respects_gitignore_without_a_repository_and_lists_hidden_files_but_not_git() {
        let dir = tree(&[
            ".gitignore",
            "src/calc.py",
            "target/debug/big.o",
            "notes.log",
            ".github/ci.yml",
            ".git/HEAD",
        ]);
        std::fs::write(dir.path().join(".gitignore"), "target/\n*.log\n").unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("etc-link")).unwrap();
        std::fs::write(dir.path().join("bad\u{1b}name"), "x").unwrap();
        assert_eq!(
            list(dir.path()),
            vec![".github/ci.yml", ".gitignore", "src/calc.py"]
        );
    }

    #[test]
    fn a_fuzzy_query_ranks_the_closest_path_first_and_keeps_the_limit() {
        let files: Vec<String> = [
            "docs/calculator.md",
            "src/calc.py",
            "src/cache/lib.rs",
            "tests/test_calc.py",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            best_matches(&files, "calc.py", 2),
            vec!["src/calc.py", "tests/test_calc.py"]
        );
        assert_eq!(
            best_matches(&files, "cachlib", 10),
            vec!["src/cache/lib.rs"]
        );
        assert_eq!(best_matches(&files, "", 2), files[..2].to_vec());
        assert!(best_matches(&files, "zzz", 10).is_empty());
    }

    #[tokio::test]
    async fn a_query_answers_from_the_listing_and_a_stale_one_is_listed_again_for_the_next() {
        let dir = tree(&["a.txt"]);
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let index = FileIndex::new(&root);
        assert_eq!(
            index.find("", 10).await,
            Found {
                files: vec!["a.txt".into()],
                total: 1
            }
        );
        std::fs::write(root.join("b.txt"), "x").unwrap();
        // Fresh: the kept listing.
        assert_eq!(index.find("", 10).await.total, 1);
        // Stale: this query still answers from it, and lists again behind it.
        index.listed.lock().unwrap().as_mut().unwrap().taken -= FRESH;
        assert_eq!(index.find("", 10).await.total, 1);
        for _ in 0..200 {
            if index.find("b", 10).await.files == vec!["b.txt".to_string()] {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the new file was never listed");
    }
}
