//! The permission bits a snapshot records beside git's tree: git keeps a file's
//! content and whether it is executable, nothing else, so a `.env` of mode 0600 or a `private/`
//! of 0700 deleted and brought back by a rewind came back 0644 and 0755.
//!
//! At each snapshot every file the shadow index records, and every directory above one, is
//! looked at (`lstat`); those whose bits differ from what a restore makes by default (0666 or,
//! executable, 0777, less the umask; directories 0777 less the umask) are kept in a manifest,
//! a blob of the shadow repository named by `refs/agent-modes/{commit}`. Most workspaces have
//! none, and then nothing is written. A restore gives a file or directory it creates the
//! recorded bits (the default otherwise); a file edited in place keeps its own, as before.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The bits a snapshot records, by workspace-relative path.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Modes(HashMap<PathBuf, u32>);

impl Modes {
    /// Looks at `files` (relative to `root`, as the shadow index records them) and the
    /// directories above them, keeping the bits that differ from the defaults under `umask`.
    /// A path that cannot be read is left out (a restore gives it the default).
    pub fn scan(root: &Path, files: &[PathBuf], umask: u32) -> Modes {
        let mut modes = HashMap::new();
        let mut dirs = std::collections::HashSet::new();
        for file in files {
            if let Ok(meta) = std::fs::symlink_metadata(root.join(file)) {
                if meta.file_type().is_file() {
                    let bits = meta.permissions().mode() & 0o7777;
                    if bits != file_default(bits & 0o100 != 0, umask) {
                        modes.insert(file.clone(), bits);
                    }
                }
            }
            for dir in file.ancestors().skip(1) {
                if dir.as_os_str().is_empty() || !dirs.insert(dir.to_path_buf()) {
                    continue;
                }
                if let Ok(meta) = std::fs::symlink_metadata(root.join(dir)) {
                    let bits = meta.mode() & 0o7777;
                    if meta.file_type().is_dir() && bits != dir_default(umask) {
                        modes.insert(dir.to_path_buf(), bits);
                    }
                }
            }
        }
        Modes(modes)
    }

    /// Whether nothing differs from the defaults.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The bits recorded for `path`, if any.
    pub fn get(&self, path: &Path) -> Option<u32> {
        self.0.get(path).copied()
    }

    /// The manifest as stored: `MODE\0PATH\0` for each, mode in octal, sorted by path (the same
    /// workspace gives the same blob, which git stores once).
    pub fn encode(&self) -> Vec<u8> {
        let mut entries: Vec<(&PathBuf, &u32)> = self.0.iter().collect();
        entries.sort();
        let mut out = Vec::new();
        for (path, mode) in entries {
            out.extend_from_slice(format!("{mode:o}").as_bytes());
            out.push(0);
            out.extend_from_slice(path.as_os_str().as_bytes());
            out.push(0);
        }
        out
    }

    /// Reads what [`Modes::encode`] wrote; an entry it cannot read is left out.
    pub fn decode(bytes: &[u8]) -> Modes {
        let mut modes = HashMap::new();
        let mut fields = bytes.split(|b| *b == 0);
        while let (Some(mode), Some(path)) = (fields.next(), fields.next()) {
            let mode = std::str::from_utf8(mode)
                .ok()
                .and_then(|m| u32::from_str_radix(m, 8).ok());
            if let (Some(mode), false) = (mode, path.is_empty()) {
                modes.insert(
                    PathBuf::from(std::ffi::OsStr::from_bytes(path)),
                    mode & 0o7777,
                );
            }
        }
        Modes(modes)
    }
}

/// A new file's bits: 0666 less the umask, with the execute bits where it can be read when
/// git records it executable (what a restore has always made).
pub fn file_default(executable: bool, umask: u32) -> u32 {
    let plain = 0o666 & !umask;
    if executable {
        plain | ((plain & 0o444) >> 2)
    } else {
        plain
    }
}

/// A new directory's bits: 0777 less the umask.
pub fn dir_default(umask: u32) -> u32 {
    0o777 & !umask
}

/// This process's umask, read from `/proc/self/status` (setting it to read it back would race
/// with other threads creating files); 022 where it cannot be read.
pub fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Umask:"))
                .and_then(|value| u32::from_str_radix(value.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_reads_back_as_written_and_defaults_follow_the_umask() {
        let modes = Modes(HashMap::from([
            (PathBuf::from(".env"), 0o600),
            (PathBuf::from("a b/\nodd"), 0o2775),
        ]));
        assert_eq!(Modes::decode(&modes.encode()), modes);
        assert_eq!(Modes::decode(b"nonsense\0x\0"), Modes::default());
        assert_eq!(file_default(false, 0o022), 0o644);
        assert_eq!(file_default(true, 0o022), 0o755);
        assert_eq!(file_default(true, 0o077), 0o700);
        assert_eq!(file_default(false, 0o002), 0o664);
        assert_eq!(dir_default(0o022), 0o755);
        assert!(umask() <= 0o777);
    }
}
