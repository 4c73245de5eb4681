//! The workspace's files, for `@` completion in the chat's input: listed once beneath the root
//! as ripgrep lists them (the `ignore` crate: `.gitignore`, `.ignore` and git's excludes
//! respected, in a git repository or not; hidden files listed, `.git` not; links not followed),
//! kept, and matched fuzzily (helix's `nucleo-matcher`, scored for paths) for each query.
//!
//! A query answers from the listing it has and, when that is older than [`FRESH`], lists again
//! in the background for the next one: typing never waits for the disk, and a file created
//! since shows up once the next listing is done. Before the first listing is done (the front
//! end starts one when the session starts), a query waits at most [`FIRST_WAIT`] and then
//! answers from the files listed so far, saying the answer is partial. A query that extends the
//! last one (`calc` after `cal`) is matched against the last one's matches only: a fuzzy match
//! of the longer query is a match of the shorter one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nucleo_matcher::pattern::{CaseMatching, Normalization, Pattern};
use nucleo_matcher::{Config, Matcher, Utf32Str};

/// How long a listing is used before a query lists the files again (in the background). A walk
/// of a large tree costs a noticeable part of a core (BENCHMARKS.md): now and then while a
/// person types is little, every keystroke would be too much.
pub const FRESH: Duration = Duration::from_secs(30);
/// How long a query waits for the first listing before it answers from the files found so far.
pub const FIRST_WAIT: Duration = Duration::from_millis(40);
/// The most files listed: past that, the rest of a huge tree is not offered.
pub const MAX_FILES: usize = 500_000;

/// The listing of one workspace's files, shared by every query.
#[derive(Debug)]
pub struct FileIndex {
    root: PathBuf,
    listed: Mutex<Option<Listing>>,
    /// The walk under way, while there is one.
    walking: Mutex<Option<Arc<Walk>>>,
    /// The last query's matches (indices into its listing), for the next query that extends it.
    last: Mutex<Option<LastQuery>>,
}

#[derive(Debug, Clone)]
struct Listing {
    files: Arc<Vec<String>>,
    taken: Instant,
}

/// A walk in progress: the files found so far, and when it is over.
#[derive(Debug, Default)]
struct Walk {
    found: Mutex<Vec<String>>,
    done: tokio::sync::Notify,
    finished: AtomicBool,
}

#[derive(Debug)]
struct LastQuery {
    files: Arc<Vec<String>>,
    query: String,
    matched: Arc<Vec<u32>>,
}

/// What a query found: the best matches, best first, how many files there are, and whether
/// the files are not all listed yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub files: Vec<String>,
    pub total: usize,
    pub partial: bool,
}

impl FileIndex {
    /// An index of the files beneath `root` (the workspace's canonical root); nothing is listed
    /// until the first query or [`FileIndex::warm`].
    pub fn new(root: &Path) -> Arc<Self> {
        Arc::new(FileIndex {
            root: root.to_path_buf(),
            listed: Mutex::new(None),
            walking: Mutex::new(None),
            last: Mutex::new(None),
        })
    }

    /// Lists the files if they were never listed (the session starts it, so the first `@`
    /// does not wait); resolves when the listing is done.
    pub async fn warm(self: &Arc<Self>) {
        if self.kept().is_none() {
            let walk = self.walk();
            Self::finished(&walk).await;
        }
    }

    /// The files, relative to the root, in byte order, and whether they are only those found
    /// so far: the listing kept (listed again in the background once older than [`FRESH`]), or
    /// before the first one is done, what the walk found within [`FIRST_WAIT`].
    pub async fn files(self: &Arc<Self>) -> (Arc<Vec<String>>, bool) {
        if let Some(listing) = self.kept() {
            if listing.taken.elapsed() >= FRESH {
                self.walk();
            }
            return (listing.files, false);
        }
        let walk = self.walk();
        let _ = tokio::time::timeout(FIRST_WAIT, Self::finished(&walk)).await;
        if let Some(listing) = self.kept() {
            return (listing.files, false);
        }
        let mut so_far = walk
            .found
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        so_far.sort_unstable();
        (Arc::new(so_far), true)
    }

    /// The best `limit` matches of `query` (fuzzy; empty: the first files), best first.
    pub async fn find(self: &Arc<Self>, query: &str, limit: usize) -> Found {
        let (files, partial) = self.files().await;
        let query = query.trim().to_string();
        let narrowed = self.narrowed(&files, &query);
        let index = self.clone();
        let total = files.len();
        let matched = tokio::task::spawn_blocking(move || {
            let (best, matched) = rank(
                &files,
                &query,
                limit,
                narrowed.as_ref().map(|m| m.as_slice()),
            );
            if let Some(matched) = matched {
                *index.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(LastQuery {
                    files,
                    query,
                    matched: Arc::new(matched),
                });
            }
            best
        })
        .await
        .unwrap_or_default();
        Found {
            files: matched,
            total,
            partial,
        }
    }

    fn kept(&self) -> Option<Listing> {
        self.listed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The last query's matches when `query` extends it over the same listing, and both are
    /// plain words (nucleo's syntax, `!`, `^`, `$`, `\`, a space, could make the longer one
    /// match more).
    fn narrowed(&self, files: &Arc<Vec<String>>, query: &str) -> Option<Arc<Vec<u32>>> {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let last = last.as_ref()?;
        let plain = |q: &str| {
            !q.is_empty()
                && q.chars()
                    .all(|c| c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'))
        };
        (Arc::ptr_eq(&last.files, files)
            && plain(query)
            && plain(&last.query)
            && query.starts_with(last.query.as_str()))
        .then(|| last.matched.clone())
    }

    /// The walk under way, or a new one (in the blocking pool) that keeps its listing when done.
    fn walk(self: &Arc<Self>) -> Arc<Walk> {
        let mut walking = self.walking.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(walk) = walking.as_ref() {
            return walk.clone();
        }
        let walk = Arc::new(Walk::default());
        *walking = Some(walk.clone());
        let index = self.clone();
        let progress = walk.clone();
        tokio::task::spawn_blocking(move || {
            let files = list_as_found(&index.root, |batch| {
                progress
                    .found
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend_from_slice(batch);
            });
            *index.listed.lock().unwrap_or_else(PoisonError::into_inner) = Some(Listing {
                files: Arc::new(files),
                taken: Instant::now(),
            });
            *index.walking.lock().unwrap_or_else(PoisonError::into_inner) = None;
            progress.finished.store(true, Ordering::SeqCst);
            progress.done.notify_waiters();
        });
        walk
    }

    async fn finished(walk: &Walk) {
        let notified = walk.done.notified();
        if !walk.finished.load(Ordering::SeqCst) {
            notified.await;
        }
    }
}

/// The files beneath `root`, relative to it, in byte order (see the module doc for what is
/// left out). Names that are not UTF-8, or hold a control or invisible character, are left out
/// too: completion would put a different name in the prompt than the one on disk.
pub fn list(root: &Path) -> Vec<String> {
    list_as_found(root, |_| {})
}

/// [`list`], handing each batch of files to `found` as the walk finds them.
fn list_as_found(root: &Path, mut found: impl FnMut(&[String])) -> Vec<String> {
    let (sender, received) = std::sync::mpsc::channel::<Vec<String>>();
    let walker = ignore::WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|entry| entry.file_name() != ".git")
        .build_parallel();
    let mut files = Vec::new();
    // Counted as they are found, so the walk stops at the cap (Neovim opened in $HOME or /
    // would otherwise walk millions of entries on every core).
    let counted = std::sync::atomic::AtomicUsize::new(0);
    let counted = &counted;
    std::thread::scope(|scope| {
        scope.spawn(move || {
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
                        if batch.files.len() >= 1024 {
                            batch.send();
                        }
                        let seen = counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if seen + 1 >= MAX_FILES {
                            return ignore::WalkState::Quit;
                        }
                    }
                    ignore::WalkState::Continue
                })
            });
        });
        for batch in received {
            if files.len() < MAX_FILES {
                found(&batch);
                files.extend(batch);
            }
        }
    });
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

/// A path `@` can name: shown as it is (no control or invisible character) and without
/// blanks, which end an `@path` in a prompt.
fn plain(rel: &str) -> bool {
    !rel.contains(char::is_whitespace)
        && agent_nvim_text::escape::visible(rel, agent_nvim_text::escape::Layout::OneLine) == rel
}

/// The `limit` best fuzzy matches of `query` among `files`, best first: the higher score, then
/// the shorter path, then byte order. An empty query keeps the files' order.
pub fn best_matches(files: &[String], query: &str, limit: usize) -> Vec<String> {
    rank(files, query.trim(), limit, None).0
}

/// [`best_matches`] among `only` (indices into `files`) when given, and the indices of every
/// match (None for an empty query).
fn rank(
    files: &[String],
    query: &str,
    limit: usize,
    only: Option<&[u32]>,
) -> (Vec<String>, Option<Vec<u32>>) {
    if query.is_empty() {
        return (files.iter().take(limit).cloned().collect(), None);
    }
    let mut matcher = Matcher::new(Config::DEFAULT.match_paths());
    let pattern = Pattern::parse(query, CaseMatching::Smart, Normalization::Smart);
    let mut buf = Vec::new();
    let mut score = |i: u32| {
        let file = files.get(i as usize)?;
        pattern
            .score(Utf32Str::new(file, &mut buf), &mut matcher)
            .map(|score| (score, i))
    };
    let mut scored: Vec<(u32, u32)> = match only {
        Some(only) => only.iter().filter_map(|&i| score(i)).collect(),
        None => (0..files.len() as u32).filter_map(score).collect(),
    };
    let mut matched: Vec<u32> = scored.iter().map(|&(_, i)| i).collect();
    matched.sort_unstable();
    let file = |i: u32| files[i as usize].as_str();
    let order = |a: &(u32, u32), b: &(u32, u32)| {
        b.0.cmp(&a.0)
            .then(file(a.1).len().cmp(&file(b.1).len()))
            .then(file(a.1).cmp(file(b.1)))
    };
    if scored.len() > limit && limit > 0 {
        scored.select_nth_unstable_by(limit - 1, order);
        scored.truncate(limit);
    }
    scored.sort_unstable_by(order);
    let best = scored
        .into_iter()
        .take(limit)
        .map(|(_, i)| file(i).to_string())
        .collect();
    (best, Some(matched))
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
        // `@my notes.txt` would name `my`: a name with a blank is not offered.
        std::fs::write(dir.path().join("my notes.txt"), "x").unwrap();
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
    async fn a_query_that_extends_the_last_one_finds_what_a_full_match_finds() {
        let names: Vec<String> = (0..300)
            .map(|i| format!("src/m{i}/{}", ["calc.py", "cache.rs", "lib.rs"][i % 3]))
            .collect();
        let dir = tree(&names.iter().map(String::as_str).collect::<Vec<_>>());
        let index = FileIndex::new(&std::fs::canonicalize(dir.path()).unwrap());
        index.warm().await;
        let (files, _) = index.files().await;
        for query in ["c", "ca", "cal", "calc", "calc.p", "calc.pz"] {
            assert_eq!(
                index.find(query, 20).await.files,
                best_matches(&files, query, 20),
                "{query}"
            );
        }
        // The narrowing was used: the last matches are the last query's, none.
        assert!(index
            .last
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .matched
            .is_empty());
        // A query that does not extend it is matched over everything again.
        assert_eq!(index.find("lib", 400).await.files.len(), 100);
    }

    #[tokio::test]
    async fn a_query_answers_from_the_listing_and_a_stale_one_is_listed_again_for_the_next() {
        let dir = tree(&["a.txt"]);
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let index = FileIndex::new(&root);
        index.warm().await;
        assert_eq!(
            index.find("", 10).await,
            Found {
                files: vec!["a.txt".into()],
                total: 1,
                partial: false,
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
