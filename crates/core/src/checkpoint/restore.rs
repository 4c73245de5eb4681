//! Putting a checkpoint's files back, beneath the root.
//!
//! What differs between the snapshot of the present and the checkpoint is read from git; every
//! write and removal then goes through the workspace's root handle ([`crate::workspace::beneath`]):
//! parents are made one `mkdirat` at a time and a link met on the way is refused, a last
//! component that is a link is replaced, never followed. So a checkpoint's path that now leads
//! outside (a directory swapped for a link since) is refused and listed, not written through.

use std::ffi::{CString, OsStr};
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::modes::Modes;
use super::{CheckpointError, Checkpoints, Snapshot, Status};
use crate::editor::Editor;
use crate::workspace::beneath::{self, FsError, Root};

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The snapshot taken just before: restoring it undoes this restore.
    pub undo: Snapshot,
    /// Each file put back, relative to the root: `Added` brought back, `Modified` rewritten,
    /// `Deleted` removed (created since the checkpoint).
    pub files: Vec<(Status, PathBuf)>,
    /// Files left as they are because they are over the size a snapshot records (their present
    /// content is in no checkpoint, so it would be lost).
    pub kept: Vec<PathBuf>,
    /// Files that could not be put back, and why (a path that now leads outside the root).
    pub failed: Vec<(PathBuf, String)>,
    /// Files left as they are because the person chose to keep them (another conversation's
    /// later changes).
    pub spared: Vec<PathBuf>,
}

/// Which of the differences a restore puts back.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scope<'a> {
    /// All but these (listed in [`Restored::spared`] when they differ).
    Sparing(&'a std::collections::BTreeSet<PathBuf>),
    /// These alone; the others are not looked at.
    Only(&'a std::collections::BTreeSet<PathBuf>),
}

/// One difference to undo.
struct Step {
    status: Status,
    path: PathBuf,
    /// The checkpoint's mode and blob (None for a removal).
    blob: Option<(String, String)>,
    /// The blob's bytes, once read.
    bytes: Vec<u8>,
}

/// Restores `target` over the present, recorded as `undo`.
pub(super) async fn restore(
    checkpoints: &Checkpoints,
    undo: &Snapshot,
    target: &str,
    editor: &dyn Editor,
    scope: Scope<'_>,
) -> Result<Restored, CheckpointError> {
    let git = &checkpoints.inner.git;
    let workspace = &checkpoints.inner.workspace;
    let out = git
        .run(
            &[
                "diff-tree",
                "-r",
                "-z",
                "--no-renames",
                "--raw",
                &undo.id,
                target,
            ],
            b"",
        )
        .await?;
    let mut kept = Vec::new();
    let mut spared = Vec::new();
    let mut steps = Vec::new();
    let mut fields = out.split(|byte| *byte == 0);
    while let Some(field) = fields.next() {
        let Some(raw) = field.strip_prefix(b":") else {
            continue;
        };
        let Some(path) = fields.next() else { break };
        let path = PathBuf::from(OsStr::from_bytes(path));
        let raw = String::from_utf8_lossy(raw);
        let parts: Vec<&str> = raw.split(' ').collect();
        let [old_mode, new_mode, _old, new_blob, status] = parts[..] else {
            continue;
        };
        if old_mode == "160000" || new_mode == "160000" {
            continue;
        }
        if matches!(scope, Scope::Only(only) if !only.contains(&path)) {
            continue;
        }
        if undo.skipped.contains(&path) {
            kept.push(path);
            continue;
        }
        if matches!(scope, Scope::Sparing(spare) if spare.contains(&path)) {
            spared.push(path);
            continue;
        }
        let (status, blob) = match status {
            "D" => (Status::Deleted, None),
            "A" => (
                Status::Added,
                Some((new_mode.to_string(), new_blob.to_string())),
            ),
            _ => (
                Status::Modified,
                Some((new_mode.to_string(), new_blob.to_string())),
            ),
        };
        steps.push(Step {
            status,
            path,
            blob,
            bytes: Vec::new(),
        });
    }

    let mut unsaved = Vec::new();
    for step in &steps {
        if editor
            .has_unsaved_changes(&workspace.root().join(&step.path))
            .await
        {
            unsaved.push(crate::workspace::names::show(step.path.as_os_str()).into_owned());
        }
    }
    if !unsaved.is_empty() {
        return Err(CheckpointError::Unsaved(unsaved));
    }

    for step in &mut steps {
        if let Some((_, blob)) = &step.blob {
            step.bytes = git.run(&["cat-file", "blob", blob], b"").await?;
        }
    }
    let modes = checkpoints.modes_of(target).await;
    // Removals first, deepest first, so a directory a file must replace is emptied before.
    steps.sort_by_key(|step| {
        (
            step.blob.is_some(),
            std::cmp::Reverse(step.path.components().count()),
        )
    });
    // The directories of the files to remove that the checkpoint does not have: created since,
    // they go too once emptied (git records no empty directory, so one that was there empty
    // before goes as well).
    let mut dirs: Vec<PathBuf> = steps
        .iter()
        .filter(|step| step.blob.is_none())
        .flat_map(|step| step.path.ancestors().skip(1))
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .collect();
    dirs.sort();
    dirs.dedup();
    if !dirs.is_empty() {
        // Every directory of the checkpoint's tree, in one call (naming each would be one
        // argument a directory, past the system's limit in a big tree).
        let listed = git
            .run(
                &[
                    "ls-tree",
                    "-r",
                    "-d",
                    "-z",
                    "--name-only",
                    "--full-tree",
                    target,
                ],
                b"",
            )
            .await?;
        let kept: std::collections::HashSet<&Path> = listed
            .split(|byte| *byte == 0)
            .filter(|name| !name.is_empty())
            .map(|name| Path::new(std::ffi::OsStr::from_bytes(name)))
            .collect();
        dirs.retain(|dir| !kept.contains(dir.as_path()));
    }
    // Deepest first, so a parent is tried once its children are gone.
    dirs.sort_by_key(|dir| std::cmp::Reverse(dir.components().count()));
    let ws = workspace.clone();
    let done = crate::workspace::blocking(move || {
        let mut files = Vec::new();
        let mut failed = Vec::new();
        for step in steps {
            let result = match &step.blob {
                Some((mode, _)) => write(ws.handle(), &step.path, mode, &step.bytes, &modes),
                None => remove(ws.handle(), &step.path),
            };
            match result {
                Ok(()) => files.push((step.status, step.path)),
                Err(err) => failed.push((step.path, describe(err))),
            }
        }
        for dir in &dirs {
            // Only when empty: what else is in it (ignored files, the person's) keeps it.
            remove_empty_dir(ws.handle(), dir);
        }
        Ok::<_, std::io::Error>((files, failed))
    })
    .await
    .map_err(|err| CheckpointError::Git(format!("restore stopped: {err}")))?;
    let (mut files, failed) = done;
    files.sort_by(|a, b| a.1.cmp(&b.1));
    for (status, path) in &files {
        if *status != Status::Deleted {
            editor.file_written(&workspace.root().join(path)).await;
        }
    }
    if files.iter().any(|(status, _)| *status == Status::Deleted) {
        editor.command_finished().await;
    }
    Ok(Restored {
        undo: undo.clone(),
        files,
        kept,
        failed,
        spared,
    })
}

/// Why a file could not be put back, in words.
fn describe(err: FsError) -> String {
    match err {
        FsError::Moved => "it now leads outside the workspace (a link); not followed".into(),
        FsError::NotADirectory => "a file stands where its directory was".into(),
        FsError::Loop => "too many levels of symbolic links".into(),
        FsError::TooLong => "the path is too long".into(),
        FsError::IsDirectory => "a directory stands where it was".into(),
        FsError::NotRegular => "not a regular file".into(),
        FsError::NotFound => "its directory is gone".into(),
        FsError::Io(err) => err.to_string(),
    }
}

/// `path` as a checkpoint may hold it: plain names only, never `.git`.
fn checked(path: &Path) -> Result<(&Path, CString), FsError> {
    let plain = path.components().all(|component| {
        matches!(component, Component::Normal(name) if !name.eq_ignore_ascii_case(".git"))
    });
    let name = path.file_name().filter(|_| plain).ok_or(FsError::Moved)?;
    let name = CString::new(name.as_bytes()).map_err(|_| FsError::Moved)?;
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    Ok((parent.unwrap_or(Path::new(".")), name))
}

/// Removes the file (or link) at `path`, never what a link points to. Gone already is fine.
fn remove(root: &Root, path: &Path) -> Result<(), FsError> {
    let (parent, name) = checked(path)?;
    let dir = match root.open_at(parent, OFlags::PATH | OFlags::DIRECTORY) {
        Ok(dir) => dir,
        Err(FsError::NotFound) => return Ok(()),
        Err(err) => return Err(err),
    };
    match rustix::fs::unlinkat(&dir, &name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

/// Removes the directory at `path` if it is empty, never following a link; anything else is
/// left as it is.
fn remove_empty_dir(root: &Root, path: &Path) {
    let Ok((parent, name)) = checked(path) else {
        return;
    };
    if let Ok(dir) = root.open_at(parent, OFlags::PATH | OFlags::DIRECTORY) {
        let _ = rustix::fs::unlinkat(&dir, &name, AtFlags::REMOVEDIR);
    }
}

/// Writes `bytes` at `path` as git mode `mode` (a file, an executable, a link). A file or
/// directory it creates gets the permission bits `modes` recorded for it (else the defaults);
/// a file it rewrites in place keeps its own.
fn write(root: &Root, path: &Path, mode: &str, bytes: &[u8], modes: &Modes) -> Result<(), FsError> {
    checked(path)?;
    // The person asked for this restore (`:Agent rewind`), after seeing what it restores.
    let approved = super::token();
    let (dir, name) = root.make_parents_with(path, &|dir| modes.get(dir), &approved)?;
    let probe = rustix::fs::openat(
        &dir,
        &name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    );
    let existing = match probe {
        Ok(fd) => Some(rustix::fs::FileType::from_raw_mode(
            rustix::fs::fstat(&fd)?.st_mode,
        )),
        Err(rustix::io::Errno::NOENT) => None,
        Err(errno) => return Err(errno.into()),
    };
    let executable = mode == "100755";
    if mode != "120000" && existing == Some(rustix::fs::FileType::RegularFile) {
        if let Some(file) = root.open_in_dir(path)? {
            // An edited file keeps its owner, mode and attributes, as edit_file's writes do.
            file.replace(&|out: &mut dyn Write| out.write_all(bytes), &approved)?;
            return set_executable(dir.as_fd(), &name, executable);
        }
    }
    match existing {
        Some(rustix::fs::FileType::Directory) => {
            rustix::fs::unlinkat(&dir, &name, AtFlags::REMOVEDIR)?
        }
        Some(_) => rustix::fs::unlinkat(&dir, &name, AtFlags::empty())?,
        None => {}
    }
    if mode == "120000" {
        rustix::fs::symlinkat(OsStr::from_bytes(bytes), &dir, &name)?;
        return Ok(());
    }
    match modes.get(path) {
        Some(bits) => beneath::create_new_with(dir.as_fd(), &name, bytes, Some(bits), &approved),
        None => {
            beneath::create_new(dir.as_fd(), &name, bytes, &approved)?;
            set_executable(dir.as_fd(), &name, executable)
        }
    }
}

/// Gives the file at `name` the execute bits where it has read bits (`executable`), or takes
/// them away.
fn set_executable(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &CString,
    executable: bool,
) -> Result<(), FsError> {
    let opened = beneath::open_in(dir, name)?;
    let mode = opened.stat.st_mode & 0o7777;
    let wanted = if executable {
        mode | ((mode & 0o444) >> 2)
    } else {
        mode & !0o111
    };
    if wanted != mode {
        rustix::fs::fchmod(&opened.file, Mode::from_raw_mode(wanted))?;
    }
    Ok(())
}
