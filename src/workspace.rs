//! THE path check. Every path a tool or an ACP agent names is resolved here, against the workspace
//! root, and nothing else in the codebase decides what is inside the workspace.
//!
//! The rule (SPEC section 2): join relative paths to the root, collapse `.` and `..`, resolve
//! symlinks along the part of the path that exists (a dangling link is followed too, so creating a
//! file through it cannot escape), and accept the result only if it is the root or lies below it.
//! Callers then do their I/O on the resolved path, never on the text they were given.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::{Error, Result};

/// How many symlinks one resolution may follow before it gives up (Linux's own limit).
const MAX_LINK_HOPS: usize = 40;

/// The workspace root, canonical, and the check that confines paths to it.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

/// A path that passed the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Absolute, with symlinks resolved: the path to do I/O on.
    pub path: PathBuf,
    /// Relative to the root with `/` separators, `.` for the root itself: the path to show.
    pub rel: String,
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
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

impl Workspace {
    /// Opens `root` as a workspace. The root is canonicalized once, here, so that a symlinked root
    /// and the paths below it compare as the same place.
    pub fn new(root: &Path) -> Result<Self> {
        let root = std::fs::canonicalize(root).map_err(|source| Error::Workspace {
            path: root.to_path_buf(),
            source,
        })?;
        if !root.is_dir() {
            return Err(Error::Workspace {
                path: root,
                source: io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
            });
        }
        Ok(Workspace { root })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves `given` (as the model or agent wrote it) and accepts it only inside the root.
    pub fn resolve(&self, given: &str) -> Result<Resolved, Refusal> {
        if given.trim().is_empty() {
            return Err(Refusal(format!("Refused: '{given}' is an empty path.")));
        }
        if given.contains('\0') {
            return Err(Refusal(format!(
                "Refused: '{}' contains a NUL byte.",
                given.replace('\0', "\\0")
            )));
        }
        let joined = self.root.join(given);
        let collapsed = collapse_dots(&joined);
        let real = resolve_links(&collapsed).map_err(|_| Refusal::outside(given))?;
        match relative_to(&real, &self.root) {
            Some(rel) => Ok(Resolved { path: real, rel }),
            None => Err(Refusal::outside(given)),
        }
    }

    /// The display form of an absolute path that is already known to be inside (for example one
    /// found while listing a directory). Falls back to the full path if it is not.
    pub fn display(&self, path: &Path) -> String {
        relative_to(path, &self.root).unwrap_or_else(|| path.display().to_string())
    }
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
/// exists. Where a component does not exist, the rest is appended as written (there is nothing
/// left to follow). Dangling links are followed to their target's text, so `link -> /elsewhere`
/// resolves outside even while `/elsewhere` does not exist.
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
    let mut missing = false;
    while let Some(name) = queue.pop_front() {
        if name == "." {
            continue;
        }
        if name == ".." {
            out.pop();
            continue;
        }
        let candidate = out.join(&name);
        if missing {
            out = candidate;
            continue;
        }
        match std::fs::symlink_metadata(&candidate) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err(io::Error::other("too many levels of symbolic links"));
                }
                let target = std::fs::read_link(&candidate)?;
                let mut parts = Vec::new();
                for component in target.components() {
                    match component {
                        Component::Prefix(_) | Component::RootDir => {
                            out = PathBuf::from(component.as_os_str());
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
            Err(err)
                if err.kind() == io::ErrorKind::NotFound
                    || err.kind() == io::ErrorKind::NotADirectory =>
            {
                missing = true;
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
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
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
