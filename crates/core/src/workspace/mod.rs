//! THE path check. Every path a tool or an ACP agent names is resolved here, against the workspace
//! root, and nothing else in the codebase decides what is inside the workspace.
//!
//! The rule (SPEC section 2): join relative paths to the root, collapse `.` and `..`, resolve
//! symlinks along the part of the path that exists (a dangling link is followed too, so creating a
//! file through it cannot escape), and accept the result only if it is the root or lies below it.
//! Callers then do their I/O through [`beneath`], relative to the root's open handle, on the
//! resolved path (never on the text they were given), so a link swapped in after the check
//! cannot lead outside either.
//!
//! Path arguments may name files whose names are not simple text in the quoted form list_files
//! shows them in ([`names`]).

pub mod beneath;
pub mod files;
pub mod names;

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use beneath::Root;

/// How many symlinks one resolution may follow before it gives up (Linux's own limit).
const MAX_LINK_HOPS: usize = 40;
/// How many components one resolution may look up on the disk. Forty links of 4 KB each can
/// hold some 30,000 `a/..` steps, each a system call here (list_files resolves every link it
/// lists, so a directory of such links would take minutes); no real path needs a thousand.
const MAX_LOOKUPS: usize = 1024;

/// The workspace root, canonical, its open handle, and the check that confines paths to it.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    handle: Arc<Root>,
}

/// A path that passed the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Absolute, with symlinks resolved: the path to do I/O on.
    pub path: PathBuf,
    /// Relative to the root with `/` separators, `.` for the root itself, names that are not
    /// simple in [`names`]' quoted form: the path to show (and to give back).
    pub rel: String,
    /// The path as given ended in `/`: it must be a directory.
    pub dir_only: bool,
}

/// A path the check refused. Its text is what the model (or ACP agent) reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(String);

impl Refusal {
    fn outside(given: &str) -> Self {
        Refusal(format!(
            "Refused: '{given}' resolves outside the workspace root."
        ))
    }

    fn link_loop(given: &str) -> Self {
        Refusal(format!(
            "Refused: '{given}' has too many levels of symbolic links."
        ))
    }

    fn too_long(given: &str) -> Self {
        Refusal(format!("Refused: '{given}' is too long."))
    }

    /// Why resolving `given` failed on the disk.
    fn from_io(given: &str, err: &io::Error) -> Self {
        match err.raw_os_error() {
            Some(libc::ELOOP) => Refusal::link_loop(given),
            Some(libc::ENAMETOOLONG) => Refusal::too_long(given),
            Some(libc::EACCES) => Refusal(format!(
                "Refused: '{given}' cannot be looked up: permission denied."
            )),
            _ => Refusal::outside(given),
        }
    }

    /// The refusal for an I/O beneath the root that found the tree changed, or a loop, or a
    /// name too long: what [`Workspace::resolve`] would have said had it seen it first.
    pub fn for_fs(given: &str, err: &beneath::FsError) -> Option<Self> {
        match err {
            beneath::FsError::Moved => Some(Refusal::outside(given)),
            beneath::FsError::Loop => Some(Refusal::link_loop(given)),
            beneath::FsError::TooLong => Some(Refusal::too_long(given)),
            _ => None,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// Why [`Workspace::new`] could not open a root: it does not exist, is not a directory, or
/// cannot be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot use workspace root {}: {source}", path.display())]
pub struct RootError {
    /// The root as given.
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

impl Workspace {
    /// Opens `root` as a workspace. The root is canonicalized once, here, so that a symlinked root
    /// and the paths below it compare as the same place.
    pub fn new(root: &Path) -> Result<Self, RootError> {
        let root = std::fs::canonicalize(root).map_err(|source| RootError {
            path: root.to_path_buf(),
            source,
        })?;
        if !root.is_dir() {
            return Err(RootError {
                path: root,
                source: io::Error::other("not a directory"),
            });
        }
        let handle = Root::open(&root).map_err(|source| RootError {
            path: root.clone(),
            source,
        })?;
        Ok(Workspace {
            root,
            handle: Arc::new(handle),
        })
    }

    /// The same workspace with I/O that walks components instead of using openat2 (tests of the
    /// fallback).
    #[cfg(test)]
    pub fn walking(root: &Path) -> Result<Self, RootError> {
        let mut ws = Workspace::new(root)?;
        ws.handle = Arc::new(Root::walking(&ws.root).map_err(|source| RootError {
            path: ws.root.clone(),
            source,
        })?);
        Ok(ws)
    }

    /// The root's handle: every tool's I/O goes through it.
    pub fn handle(&self) -> &Root {
        &self.handle
    }

    /// `target` relative to the root (empty for the root itself): what to open beneath it.
    pub fn relative<'a>(&self, target: &'a Resolved) -> &'a Path {
        strip_root(&target.path, &self.root).unwrap_or(Path::new(""))
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves `given` (as the model or agent wrote it) and accepts it only inside the root.
    /// Components in the quoted form of [`names`] stand for the bytes they encode.
    pub fn resolve(&self, given: &str) -> Result<Resolved, Refusal> {
        usable(given)?;
        self.resolve_os(&names::parse(given), given)
    }

    /// [`Workspace::resolve`] of a path that names files by their real names (an ACP agent's,
    /// which never saw list_files): no component is read in the quoted form, so `"x"` is the
    /// file named with the quotes, not `x`.
    pub fn resolve_literal(&self, given: &str) -> Result<Resolved, Refusal> {
        usable(given)?;
        self.resolve_os(OsStr::new(given), given)
    }

    /// [`Workspace::resolve`] of a path that is already bytes (one found on disk); refusals
    /// quote `shown`.
    pub fn resolve_os(&self, given: &OsStr, shown: &str) -> Result<Resolved, Refusal> {
        let dir_only = {
            let bytes = std::os::unix::ffi::OsStrExt::as_bytes(given);
            bytes.ends_with(b"/") || bytes.ends_with(b"/.")
        };
        let joined = self.root.join(given);
        let collapsed = collapse_dots(&joined);
        let real = resolve_links(&collapsed).map_err(|err| Refusal::from_io(shown, &err))?;
        match relative_to(&real, &self.root) {
            Some(rel) => Ok(Resolved {
                path: real,
                rel,
                dir_only,
            }),
            None => Err(Refusal::outside(shown)),
        }
    }

    /// The display form of an absolute path that is already known to be inside (for example one
    /// found while listing a directory). Falls back to the full path if it is not.
    pub fn display(&self, path: &Path) -> String {
        relative_to(path, &self.root).unwrap_or_else(|| path.display().to_string())
    }
}

/// Refuses a path argument that is empty or holds a NUL byte.
fn usable(given: &str) -> Result<(), Refusal> {
    if given.trim().is_empty() {
        return Err(Refusal(format!("Refused: '{given}' is an empty path.")));
    }
    if given.contains('\0') {
        return Err(Refusal(format!(
            "Refused: '{}' contains a NUL byte.",
            given.replace('\0', "\\0")
        )));
    }
    Ok(())
}

/// Collapses `.` and `..` in an absolute path without touching the disk. `..` at `/` stays at `/`.
fn collapse_dots(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir | Component::Normal(_) => {
                out.push(component.as_os_str())
            }
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
        }
    }
    out
}

/// Follows symlinks component by component, as the kernel would, over the part of `path` that
/// exists. Below a component that does not exist there is nothing to follow, so names are appended
/// as written, until a `..` from a link's target climbs back to where things exist and following
/// starts again (`link -> missing/../out` must not stop at `<root>/out` if `out` is a link).
/// Dangling links are followed to their target's text, so `link -> /elsewhere` resolves outside
/// even while `/elsewhere` does not exist.
fn resolve_links(path: &Path) -> io::Result<PathBuf> {
    let mut out = PathBuf::new();
    let mut queue: VecDeque<OsString> = VecDeque::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => out.push(component.as_os_str()),
            Component::Normal(name) => queue.push_back(name.to_os_string()),
            // collapse_dots left none of these
            Component::CurDir | Component::ParentDir => {}
        }
    }
    let mut hops = 0;
    let mut lookups = 0;
    // How many trailing components of `out` do not exist.
    let mut missing: usize = 0;
    while let Some(name) = queue.pop_front() {
        if name == "." {
            continue;
        }
        if name == ".." {
            out.pop();
            missing = missing.saturating_sub(1);
            continue;
        }
        let candidate = out.join(&name);
        if missing > 0 {
            out = candidate;
            missing += 1;
            continue;
        }
        lookups += 1;
        if lookups > MAX_LOOKUPS {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        match std::fs::symlink_metadata(&candidate) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                let target = std::fs::read_link(&candidate)?;
                let mut parts = Vec::new();
                for component in target.components() {
                    match component {
                        Component::Prefix(_) => out = PathBuf::from(component.as_os_str()),
                        // Keep a drive prefix just set (`C:\x`), or the current one (`\x`).
                        Component::RootDir => {
                            out = out
                                .components()
                                .take_while(|c| matches!(c, Component::Prefix(_)))
                                .collect();
                            out.push(component.as_os_str());
                        }
                        Component::CurDir => {}
                        Component::ParentDir => parts.push(OsString::from("..")),
                        Component::Normal(part) => parts.push(part.to_os_string()),
                    }
                }
                for part in parts.into_iter().rev() {
                    queue.push_front(part);
                }
            }
            Ok(_) => out = candidate,
            // Below a file nothing exists (ENOTDIR); `out` holds no links, so asking whether it
            // is a directory follows none.
            Err(err) if err.kind() == io::ErrorKind::NotFound || !out.is_dir() => {
                missing = 1;
                out = candidate;
            }
            Err(err) => return Err(err),
        }
    }
    Ok(out)
}

/// `path` relative to `root` with `/` separators (`.` for the root), or None when it is not the
/// root or below it. Component-wise, so `repo-secrets` is not inside `repo`.
fn relative_to(path: &Path, root: &Path) -> Option<String> {
    let rest = strip_root(path, root)?;
    let parts: Vec<String> = rest
        .components()
        .map(|c| names::show(c.as_os_str()).into_owned())
        .collect();
    if parts.is_empty() {
        Some(".".to_string())
    } else {
        Some(parts.join("/"))
    }
}

#[cfg(not(any(target_os = "macos", windows)))]
fn strip_root<'a>(path: &'a Path, root: &Path) -> Option<&'a Path> {
    path.strip_prefix(root).ok()
}

/// macOS and Windows file systems are case-insensitive by default, so `/Repo/x` is inside `/repo`.
#[cfg(any(target_os = "macos", windows))]
fn strip_root<'a>(path: &'a Path, root: &Path) -> Option<&'a Path> {
    let mut rest = path.components();
    for want in root.components() {
        let got = rest.next()?;
        let same = got.as_os_str().to_string_lossy().to_lowercase()
            == want.as_os_str().to_string_lossy().to_lowercase();
        if !same {
            return None;
        }
    }
    Some(rest.as_path())
}

/// Runs blocking file I/O off the async workers, so a 50 MB read never stalls a front end's loop.
/// A task that never finished (it panicked) is the caller's error like any other I/O error.
pub async fn blocking<T, E, F>(f: F) -> Result<T, E>
where
    T: Send + 'static,
    E: From<std::io::Error> + Send + 'static,
    F: FnOnce() -> Result<T, E> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|join| Err(std::io::Error::other(join.to_string()).into()))
}

/// Opens `path` to be written from its start, created with mode 0600 if it is not there, never
/// through a symbolic link in its place: for the files of the state directory that are
/// rewritten whole (an agent's session note, the saved permission rules).
pub fn rewrite_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::fs;
    use tempfile::TempDir;

    /// A workspace `<base>/repo` with `src/a.rs` in it, a directory `<base>/outside` with
    /// `secret.txt`, and the sibling `<base>/repo-secrets/key.pem`.
    struct Fixture {
        dir: TempDir,
        base: PathBuf,
        ws: Workspace,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(base.join("repo/src")).unwrap();
        fs::write(base.join("repo/src/a.rs"), "fn main() {}\n").unwrap();
        fs::create_dir_all(base.join("outside")).unwrap();
        fs::write(base.join("outside/secret.txt"), "secret\n").unwrap();
        fs::create_dir_all(base.join("repo-secrets")).unwrap();
        fs::write(base.join("repo-secrets/key.pem"), "key\n").unwrap();
        let ws = Workspace::new(&base.join("repo")).unwrap();
        Fixture { dir, base, ws }
    }

    fn accepted(path: PathBuf, rel: &str) -> Result<Resolved, Refusal> {
        Ok(Resolved {
            path,
            rel: rel.to_string(),
            dir_only: false,
        })
    }

    /// The refusal SPEC section 2 prescribes, spelled out here rather than through
    /// `Refusal::outside` so that a change to the text fails these tests.
    fn refused_outside(given: &str) -> Result<Resolved, Refusal> {
        Err(Refusal(format!(
            "Refused: '{given}' resolves outside the workspace root."
        )))
    }

    fn refused_loop(given: &str) -> Result<Resolved, Refusal> {
        Err(Refusal(format!(
            "Refused: '{given}' has too many levels of symbolic links."
        )))
    }

    fn text(path: &Path) -> String {
        path.to_str().unwrap().to_string()
    }

    #[test]
    fn new_canonicalizes_the_root() {
        let fx = fixture();
        let through_tempdir = fx.dir.path().join("repo/./src/..");
        let ws = Workspace::new(&through_tempdir).unwrap();
        assert_eq!(ws.root(), fx.base.join("repo"));
    }

    #[test]
    fn new_refuses_a_missing_root() {
        let fx = fixture();
        let missing = fx.base.join("nope");
        match Workspace::new(&missing) {
            Err(RootError { path, source }) => {
                assert_eq!((path, source.kind()), (missing, io::ErrorKind::NotFound));
            }
            other => panic!("expected Error::Workspace, got {other:?}"),
        }
    }

    #[test]
    fn new_refuses_a_file_as_root() {
        let fx = fixture();
        let file = fx.base.join("outside/secret.txt");
        let err = Workspace::new(&file).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot use workspace root {}: not a directory",
                file.display()
            )
        );
    }

    #[test]
    fn relative_path_resolves_below_the_root() {
        let fx = fixture();
        let root = fx.ws.root();
        assert_eq!(
            fx.ws.resolve("src/a.rs"),
            accepted(root.join("src/a.rs"), "src/a.rs")
        );
    }

    #[test]
    fn relative_path_that_does_not_exist_yet_is_accepted() {
        let fx = fixture();
        let root = fx.ws.root();
        assert_eq!(
            fx.ws.resolve("new/dir/b.rs"),
            accepted(root.join("new/dir/b.rs"), "new/dir/b.rs")
        );
    }

    #[test]
    fn dot_is_the_root_itself() {
        let fx = fixture();
        assert_eq!(
            fx.ws.resolve("."),
            accepted(fx.ws.root().to_path_buf(), ".")
        );
    }

    #[test]
    fn redundant_slashes_and_dots_are_collapsed() {
        let fx = fixture();
        let root = fx.ws.root();
        assert_eq!(
            fx.ws.resolve("./src//./a.rs"),
            accepted(root.join("src/a.rs"), "src/a.rs")
        );
        // A trailing slash is kept as a demand for a directory; the I/O checks it.
        assert_eq!(
            fx.ws.resolve("./src//./a.rs/"),
            Ok(Resolved {
                path: root.join("src/a.rs"),
                rel: "src/a.rs".to_string(),
                dir_only: true,
            })
        );
    }

    #[test]
    fn parent_of_the_root_is_refused() {
        let fx = fixture();
        assert_eq!(fx.ws.resolve("../x"), refused_outside("../x"));
    }

    #[test]
    fn climbing_to_etc_passwd_is_refused() {
        let fx = fixture();
        assert_eq!(
            fx.ws.resolve("../../etc/passwd"),
            refused_outside("../../etc/passwd")
        );
    }

    #[test]
    fn dotdot_that_climbs_out_after_going_down_is_refused() {
        let fx = fixture();
        assert_eq!(
            fx.ws.resolve("src/../../escape.txt"),
            refused_outside("src/../../escape.txt")
        );
    }

    #[test]
    fn dotdot_that_stays_inside_is_collapsed() {
        let fx = fixture();
        assert_eq!(
            fx.ws.resolve("src/../a.rs"),
            accepted(fx.ws.root().join("a.rs"), "a.rs")
        );
    }

    #[test]
    fn climbing_out_and_back_in_by_name_is_accepted() {
        let fx = fixture();
        assert_eq!(
            fx.ws.resolve("../repo/src/a.rs"),
            accepted(fx.ws.root().join("src/a.rs"), "src/a.rs")
        );
    }

    #[test]
    fn absolute_path_inside_is_accepted() {
        let fx = fixture();
        let given = text(&fx.ws.root().join("src/a.rs"));
        assert_eq!(
            fx.ws.resolve(&given),
            accepted(fx.ws.root().join("src/a.rs"), "src/a.rs")
        );
    }

    #[test]
    fn absolute_path_through_the_uncanonical_tempdir_is_accepted() {
        let fx = fixture();
        let given = text(&fx.dir.path().join("repo/src/a.rs"));
        assert_eq!(
            fx.ws.resolve(&given),
            accepted(fx.ws.root().join("src/a.rs"), "src/a.rs")
        );
    }

    #[test]
    fn absolute_root_is_the_root_itself() {
        let fx = fixture();
        let given = text(fx.ws.root());
        assert_eq!(
            fx.ws.resolve(&given),
            accepted(fx.ws.root().to_path_buf(), ".")
        );
    }

    #[test]
    fn absolute_path_outside_is_refused() {
        let fx = fixture();
        let given = text(&fx.base.join("outside/secret.txt"));
        assert_eq!(fx.ws.resolve(&given), refused_outside(&given));
    }

    #[test]
    fn filesystem_root_is_refused() {
        let fx = fixture();
        assert_eq!(fx.ws.resolve("/"), refused_outside("/"));
    }

    #[test]
    fn sibling_sharing_the_root_as_a_string_prefix_is_refused() {
        let fx = fixture();
        let given = format!("{}-secrets/key.pem", text(fx.ws.root()));
        assert_eq!(fx.ws.resolve(&given), refused_outside(&given));
    }

    #[test]
    fn empty_path_is_refused() {
        let fx = fixture();
        assert_eq!(
            fx.ws.resolve(""),
            Err(Refusal("Refused: '' is an empty path.".to_string()))
        );
    }

    #[test]
    fn blank_path_is_refused() {
        let fx = fixture();
        assert_eq!(
            fx.ws.resolve(" \t\n"),
            Err(Refusal("Refused: ' \t\n' is an empty path.".to_string()))
        );
    }

    #[test]
    fn nul_byte_is_refused_and_shown_escaped() {
        let fx = fixture();
        assert_eq!(
            fx.ws.resolve("src/a\0.rs"),
            Err(Refusal(
                "Refused: 'src/a\\0.rs' contains a NUL byte.".to_string()
            ))
        );
    }

    #[test]
    fn refusal_displays_its_text() {
        let fx = fixture();
        let refusal = fx.ws.resolve("../x").unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "Refused: '../x' resolves outside the workspace root."
        );
    }

    #[test]
    fn display_shows_paths_inside_relative_and_outside_in_full() {
        let fx = fixture();
        let outside = fx.base.join("outside/secret.txt");
        assert_eq!(
            (
                fx.ws.display(&fx.ws.root().join("src/a.rs")),
                fx.ws.display(fx.ws.root()),
                fx.ws.display(&outside),
            ),
            ("src/a.rs".to_string(), ".".to_string(), text(&outside))
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn root_in_another_case_is_refused_on_linux() {
        let fx = fixture();
        let upper = text(fx.ws.root()).to_uppercase();
        assert!(!Path::new(&upper).exists(), "{upper} exists");
        let given = format!("{upper}/x");
        assert_eq!(fx.ws.resolve(&given), refused_outside(&given));
    }

    #[cfg(any(target_os = "macos", windows))]
    #[test]
    fn root_in_another_case_is_accepted_on_case_insensitive_systems() {
        let fx = fixture();
        let upper = text(fx.ws.root()).to_uppercase();
        let given = text(&Path::new(&upper).join("x"));
        assert_eq!(fx.ws.resolve(&given), accepted(PathBuf::from(&given), "x"));
    }

    #[cfg(unix)]
    mod links {
        use super::*;
        use std::os::unix::fs::symlink;

        #[test]
        fn link_to_a_file_outside_is_refused() {
            let fx = fixture();
            symlink(fx.base.join("outside/secret.txt"), fx.ws.root().join("s")).unwrap();
            assert_eq!(fx.ws.resolve("s"), refused_outside("s"));
        }

        #[test]
        fn link_to_a_directory_outside_is_refused() {
            let fx = fixture();
            symlink(fx.base.join("outside"), fx.ws.root().join("o")).unwrap();
            assert_eq!(
                (fx.ws.resolve("o"), fx.ws.resolve("o/secret.txt")),
                (refused_outside("o"), refused_outside("o/secret.txt"))
            );
        }

        #[test]
        fn new_file_through_a_link_to_a_directory_outside_is_refused() {
            let fx = fixture();
            symlink(fx.base.join("outside"), fx.ws.root().join("o")).unwrap();
            assert_eq!(
                fx.ws.resolve("o/new/file.txt"),
                refused_outside("o/new/file.txt")
            );
        }

        #[test]
        fn relative_link_climbing_out_is_refused() {
            let fx = fixture();
            symlink("../..", fx.ws.root().join("src/up")).unwrap();
            assert_eq!(
                fx.ws.resolve("src/up/outside/secret.txt"),
                refused_outside("src/up/outside/secret.txt")
            );
        }

        #[test]
        fn dangling_link_pointing_outside_is_refused() {
            let fx = fixture();
            symlink(fx.base.join("outside/new.txt"), fx.ws.root().join("d")).unwrap();
            assert_eq!(fx.ws.resolve("d"), refused_outside("d"));
        }

        #[test]
        fn dangling_link_pointing_inside_resolves_to_its_target() {
            let fx = fixture();
            symlink("src/new.rs", fx.ws.root().join("d")).unwrap();
            assert_eq!(
                fx.ws.resolve("d"),
                accepted(fx.ws.root().join("src/new.rs"), "src/new.rs")
            );
        }

        #[test]
        fn link_inside_pointing_inside_resolves_to_its_target() {
            let fx = fixture();
            symlink(fx.ws.root().join("src"), fx.ws.root().join("code")).unwrap();
            assert_eq!(
                fx.ws.resolve("code/a.rs"),
                accepted(fx.ws.root().join("src/a.rs"), "src/a.rs")
            );
        }

        #[test]
        fn relative_link_climbing_to_the_root_resolves_to_the_root() {
            let fx = fixture();
            symlink("..", fx.ws.root().join("src/home")).unwrap();
            assert_eq!(
                fx.ws.resolve("src/home/src/a.rs"),
                accepted(fx.ws.root().join("src/a.rs"), "src/a.rs")
            );
        }

        #[test]
        fn link_loop_is_refused_without_hanging() {
            let fx = fixture();
            symlink("loop2", fx.ws.root().join("loop1")).unwrap();
            symlink("loop1", fx.ws.root().join("loop2")).unwrap();
            assert_eq!(fx.ws.resolve("loop1/x"), refused_loop("loop1/x"));
        }

        #[test]
        fn self_link_is_refused_without_hanging() {
            let fx = fixture();
            symlink("me", fx.ws.root().join("me")).unwrap();
            assert_eq!(fx.ws.resolve("me"), refused_loop("me"));
        }

        /// `detour -> nothere/../out`: the kernel would fail on `nothere`, but a resolver that
        /// stops following links once it meets a missing component would hand back
        /// `<root>/out`, a link to outside, to do I/O on.
        #[test]
        fn link_detouring_through_a_missing_directory_is_still_followed() {
            let fx = fixture();
            symlink(fx.base.join("outside"), fx.ws.root().join("out")).unwrap();
            symlink("nothere/../out", fx.ws.root().join("detour")).unwrap();
            assert_eq!(
                (fx.ws.resolve("detour"), fx.ws.resolve("detour/secret.txt")),
                (
                    refused_outside("detour"),
                    refused_outside("detour/secret.txt")
                )
            );
        }

        #[test]
        fn link_detouring_through_a_file_is_still_followed() {
            let fx = fixture();
            symlink(fx.base.join("outside"), fx.ws.root().join("out")).unwrap();
            symlink("a.rs/x/../../../out", fx.ws.root().join("src/detour")).unwrap();
            assert_eq!(
                fx.ws.resolve("src/detour/secret.txt"),
                refused_outside("src/detour/secret.txt")
            );
        }

        #[test]
        fn symlinked_root_is_canonical_and_accepts_paths_through_the_link() {
            let fx = fixture();
            let link = fx.base.join("repo-link");
            symlink(fx.base.join("repo"), &link).unwrap();
            let ws = Workspace::new(&link).unwrap();
            let through_link = text(&link.join("src/a.rs"));
            assert_eq!(
                (
                    ws.root().to_path_buf(),
                    ws.resolve("src/a.rs"),
                    ws.resolve(&through_link),
                ),
                (
                    fx.base.join("repo"),
                    accepted(fx.base.join("repo/src/a.rs"), "src/a.rs"),
                    accepted(fx.base.join("repo/src/a.rs"), "src/a.rs"),
                )
            );
        }
    }

    #[cfg(unix)]
    mod property {
        use super::*;
        use proptest::prelude::*;
        use std::os::unix::fs::symlink;

        /// Names of the links planted by `plant` (they sit at several depths, so random paths
        /// meet them often).
        const LINKS: [&str; 8] = [
            "out_dir", "out_file", "in_dir", "dangling", "up", "home", "detour", "loop",
        ];

        /// A tree mixing directories, files and every kind of link the check has to see through.
        fn plant(base: &Path) {
            let repo = base.join("repo");
            let outside = base.join("outside");
            for dir in ["repo/a/b", "repo/c", "outside/a/b", "a"] {
                fs::create_dir_all(base.join(dir)).unwrap();
            }
            for file in ["repo/b", "repo/a/c", "outside/b", "outside/secret.txt"] {
                fs::write(base.join(file), "x\n").unwrap();
            }
            let links = [
                (outside.clone(), repo.join("out_dir")),
                (outside.join("secret.txt"), repo.join("out_file")),
                ("a".into(), repo.join("in_dir")),
                (repo.join("a/b"), repo.join("a/in_dir")),
                (outside.join("nope/deeper"), repo.join("dangling")),
                ("../..".into(), repo.join("a/up")),
                ("../..".into(), repo.join("a/b/home")),
                ("nothere/../out_dir".into(), repo.join("detour")),
                ("nothere/../../out_dir".into(), repo.join("a/detour")),
                ("up".into(), repo.join("a/b/up")),
                ("../repo".into(), outside.join("home")),
                ("../out_file".into(), repo.join("c/out_file")),
                ("../loop".into(), repo.join("a/loop")),
                ("a/loop".into(), repo.join("loop")),
            ];
            for (target, link) in links {
                symlink(target, link).unwrap();
            }
        }

        /// `.` and `..` collapsed as text, the way SPEC section 2 says (before any link).
        fn collapse(path: &Path) -> PathBuf {
            let mut out = PathBuf::new();
            for component in path.components() {
                match component {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::CurDir => {}
                    other => out.push(other.as_os_str()),
                }
            }
            out
        }

        /// The kernel's view of `path`: its longest prefix that exists (as a name, links
        /// included) canonicalized by `std::fs::canonicalize`, with the rest appended. None
        /// when that prefix cannot be canonicalized (a dangling link or a loop).
        fn kernel_view(path: &Path) -> Option<PathBuf> {
            let existing = path.ancestors().find(|p| fs::symlink_metadata(p).is_ok())?;
            let real = fs::canonicalize(existing).ok()?;
            match path.strip_prefix(existing).ok()? {
                rest if rest.as_os_str().is_empty() => Some(real),
                rest => Some(real.join(rest)),
            }
        }

        /// Whether the kernel meets a link loop resolving the existing part of `path`.
        fn is_loop(path: &Path) -> bool {
            path.ancestors()
                .find(|p| fs::symlink_metadata(p).is_ok())
                .and_then(|existing| fs::canonicalize(existing).err())
                .is_some_and(|err| err.raw_os_error() == Some(libc::ELOOP))
        }

        fn given_paths(base: &Path) -> impl Strategy<Value = String> {
            let mut names = vec!["..", ".", "", "a", "b", "c"];
            names.extend(LINKS);
            let root = text(&base.join("repo"));
            let prefixes = vec![
                String::new(),
                String::new(),
                "/".to_string(),
                format!("{root}/"),
                format!("/{root}/"),
                format!("{root}-secrets/"),
            ];
            (
                prop::sample::select(prefixes),
                prop::collection::vec(prop::sample::select(names), 0..8),
            )
                .prop_map(|(prefix, segments)| prefix + &segments.join("/"))
        }

        #[test]
        fn a_loop_past_a_dangling_link_is_refused_as_a_loop() {
            let dir = tempfile::tempdir().unwrap();
            let base = fs::canonicalize(dir.path()).unwrap();
            plant(&base);
            let ws = Workspace::new(&base.join("repo")).unwrap();
            assert_eq!(
                ws.resolve("detour/home/loop"),
                refused_loop("detour/home/loop")
            );
        }

        #[test]
        fn accepted_paths_stay_inside_and_refusals_are_exact() {
            let dir = tempfile::tempdir().unwrap();
            let base = fs::canonicalize(dir.path()).unwrap();
            plant(&base);
            let ws = Workspace::new(&base.join("repo")).unwrap();
            let root = ws.root();
            proptest!(
                ProptestConfig {
                    cases: 512,
                    failure_persistence: None,
                    ..ProptestConfig::default()
                },
                |(given in given_paths(&base))| {
                    // A trailing slash only marks the demand for a directory; the I/O checks it.
                    let got = ws.resolve(&given).map(|r| Resolved { dir_only: false, ..r });
                    if given.trim().is_empty() {
                        prop_assert_eq!(
                            got,
                            Err(Refusal(format!("Refused: '{given}' is an empty path.")))
                        );
                        return Ok(());
                    }
                    if let Ok(resolved) = &got {
                        // Sound: what was accepted is, to the kernel, inside the root, and the
                        // path handed back has no links left in it.
                        let real = kernel_view(&resolved.path);
                        prop_assert_eq!(real.as_ref(), Some(&resolved.path));
                        prop_assert!(resolved.path.starts_with(root));
                        prop_assert_eq!(&root.join(&resolved.rel), &resolved.path);
                    }
                    // Complete: wherever the kernel can say where the path goes, the check
                    // agrees with it, both ways.
                    if let Some(real) = kernel_view(&collapse(&root.join(&given))) {
                        let want = match real.strip_prefix(root) {
                            Ok(rest) if rest.as_os_str().is_empty() => {
                                accepted(real.clone(), ".")
                            }
                            Ok(rest) => accepted(real.clone(), rest.to_str().unwrap()),
                            Err(_) => refused_outside(&given),
                        };
                        prop_assert_eq!(got, want);
                    } else if let Err(refusal) = got {
                        // The kernel could not say: a dangling link (refused only when it leads
                        // outside) or a loop (refused as one). The check follows a dangling
                        // link's text where the kernel stops, so past one it may meet a loop the
                        // kernel never reaches (`detour/home/loop`): a loop refusal is right then.
                        let got = Err(refusal);
                        if is_loop(&collapse(&root.join(&given))) {
                            prop_assert_eq!(got, refused_loop(&given));
                        } else if got != refused_loop(&given) {
                            prop_assert_eq!(got, refused_outside(&given));
                        }
                    }
                }
            );
        }
    }
}
