//! What the storage stage already checked of each object's artifact, so that a poll that
//! changes nothing does not hash the artifact file again, nor list its directory for garbage.
//!
//! Flux verifies the artifact's digest and collects garbage on every reconcile. We do both the
//! first time, and again whenever the file is not the one last verified (another path, size,
//! modification time or inode) or something besides the current artifact was left in the
//! directory. A file replaced or truncated on disk is therefore still caught; only a change that
//! keeps size, mtime and inode (someone writing the storage volume on purpose) is not, until the
//! process restarts. Kept in memory, one entry per object, dropped with the object's storage.

use std::collections::HashMap;
use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// The identity of a file as the last check saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStamp {
    pub path: PathBuf,
    pub len: u64,
    pub modified: Option<SystemTime>,
    pub inode: u64,
}

impl FileStamp {
    /// The stamp of `path` from its metadata.
    pub fn of(path: &Path, md: &Metadata) -> Self {
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(md);
        #[cfg(not(unix))]
        let inode = 0;
        FileStamp {
            path: path.to_path_buf(),
            len: md.len(),
            modified: md.modified().ok(),
            inode,
        }
    }
}

#[derive(Clone, Debug)]
struct Entry {
    stamp: FileStamp,
    digest: String,
    /// Garbage collection left nothing but this file in the directory.
    clean: bool,
}

/// The checks done, by object directory.
#[derive(Debug, Default)]
pub struct Checked {
    entries: Mutex<HashMap<PathBuf, Entry>>,
}

fn dir_of(stamp: &FileStamp) -> PathBuf {
    stamp
        .path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

impl Checked {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<PathBuf, Entry>) -> T) -> T {
        let mut g = match self.entries.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut g)
    }

    /// Whether this very file was verified against `digest`.
    pub fn verified(&self, stamp: &FileStamp, digest: &str) -> bool {
        self.with(|m| {
            m.get(&dir_of(stamp))
                .is_some_and(|e| e.stamp == *stamp && e.digest == digest)
        })
    }

    /// Whether garbage collection can be skipped: this file was verified and the last
    /// collection left nothing else in its directory.
    pub fn clean(&self, stamp: &FileStamp, digest: &str) -> bool {
        self.with(|m| {
            m.get(&dir_of(stamp))
                .is_some_and(|e| e.stamp == *stamp && e.digest == digest && e.clean)
        })
    }

    /// Records a successful verification (the directory's collection state starts over when
    /// the file changed).
    pub fn record_verified(&self, stamp: FileStamp, digest: &str) {
        self.with(|m| {
            let dir = dir_of(&stamp);
            let clean = m
                .get(&dir)
                .is_some_and(|e| e.stamp == stamp && e.digest == digest && e.clean);
            m.insert(
                dir,
                Entry {
                    stamp,
                    digest: digest.to_string(),
                    clean,
                },
            );
        });
    }

    /// Records what a garbage collection left: `rest` when anything but the file remains.
    pub fn record_collected(&self, stamp: &FileStamp, digest: &str, rest: bool) {
        self.with(|m| {
            if let Some(e) = m.get_mut(&dir_of(stamp))
                && e.stamp == *stamp
                && e.digest == digest
            {
                e.clean = !rest;
            }
        });
    }

    /// Forgets an object directory (its storage was removed).
    pub fn forget_dir(&self, dir: &Path) {
        self.with(|m| m.remove(dir));
    }

    /// Entries kept (one per object with a checked artifact).
    pub fn len(&self) -> usize {
        self.with(|m| m.len())
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn stamp(path: &str, len: u64, ino: u64) -> FileStamp {
        FileStamp {
            path: PathBuf::from(path),
            len,
            modified: Some(SystemTime::UNIX_EPOCH),
            inode: ino,
        }
    }

    #[test]
    fn a_file_is_trusted_only_while_it_is_the_one_checked() {
        let c = Checked::default();
        let a = stamp("/s/gitrepository/ns/r/a.tar.gz", 10, 1);
        assert!(!c.verified(&a, "sha256:x"));
        c.record_verified(a.clone(), "sha256:x");
        assert!(c.verified(&a, "sha256:x"));
        assert!(!c.verified(&a, "sha256:y"), "another digest");
        assert!(!c.verified(&stamp("/s/gitrepository/ns/r/a.tar.gz", 11, 1), "sha256:x"));
        assert!(!c.verified(&stamp("/s/gitrepository/ns/r/a.tar.gz", 10, 2), "sha256:x"));
        let mut touched = a.clone();
        touched.modified = Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1));
        assert!(!c.verified(&touched, "sha256:x"));
        // Garbage: needed until a collection left nothing else; a new file starts over.
        assert!(!c.clean(&a, "sha256:x"));
        c.record_collected(&a, "sha256:x", true);
        assert!(!c.clean(&a, "sha256:x"));
        c.record_collected(&a, "sha256:x", false);
        assert!(c.clean(&a, "sha256:x"));
        c.record_verified(a.clone(), "sha256:x");
        assert!(
            c.clean(&a, "sha256:x"),
            "re-verifying the same file keeps it clean"
        );
        let b = stamp("/s/gitrepository/ns/r/b.tar.gz", 12, 3);
        c.record_verified(b.clone(), "sha256:z");
        assert!(!c.clean(&b, "sha256:z"));
        assert!(!c.verified(&a, "sha256:x"), "one entry per object");
        assert_eq!(c.len(), 1);
        c.forget_dir(Path::new("/s/gitrepository/ns/r"));
        assert!(c.is_empty());
    }
}
