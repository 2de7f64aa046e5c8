//! Per-reconcile working copies, and the removal of those a killed process left behind.
//!
//! A reconcile copies the artifact into a directory of its own, since it writes into it (a
//! generated `kustomization.yaml`). Those directories are made inside a run directory of the
//! fetcher, `<parent>/kustomize-controller-work-<random>/`, whose `.lock` file the fetcher
//! holds an exclusive lock (`flock`) on for as long as it lives. The kernel drops the lock when
//! the process ends, however it ends; so a run directory whose lock can be taken belongs to a
//! run that is gone, and [`sweep_stale_runs`] removes it. It looks at nothing in `<parent>` but
//! real directories (not symlinks) of this user named with [`RUN_DIR_PREFIX`].

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::untar::remove_tree;

/// Names of run directories start with this.
pub const RUN_DIR_PREFIX: &str = "kustomize-controller-work-";
/// The lock file inside a run directory.
const LOCK_FILE: &str = ".lock";
/// Names of the working copies inside a run directory start with this.
const WORK_DIR_PREFIX: &str = "reconcile-";
/// A run directory without a lock file is being created, unless it is older than this (its
/// creator died between making it and creating the lock file).
const UNLOCKED_GRACE: Duration = Duration::from_secs(3600);
/// Attempts at creating a run directory when sweepers of other processes race with us.
const CREATE_ATTEMPTS: usize = 8;

/// A run directory this process holds the lock of; removed with what it holds on drop.
#[derive(Debug)]
pub(crate) struct RunDir {
    path: PathBuf,
    /// Held (locked) until drop.
    _lock: File,
}

impl RunDir {
    /// Creates a run directory under `parent` (made if missing) and takes its lock.
    pub(crate) fn create(parent: &Path) -> io::Result<RunDir> {
        fs::create_dir_all(parent)?;
        for _ in 0..CREATE_ATTEMPTS {
            let path = tempfile::Builder::new()
                .prefix(RUN_DIR_PREFIX)
                .rand_bytes(12)
                .tempdir_in(parent)?
                .keep();
            match lock_new(&path) {
                Ok(Some(lock)) => return Ok(RunDir { path, _lock: lock }),
                // A sweeper took it for a dead run's (and removes it): make another.
                Ok(None) => continue,
                Err(e) => {
                    let _ = remove_tree(&path);
                    return Err(e);
                }
            }
        }
        Err(io::Error::other(
            "another process kept removing new work directories",
        ))
    }

    /// The run directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A new, empty working copy directory (mode 0700), removed when the value is dropped.
    pub(crate) fn work_dir(&self) -> io::Result<tempfile::TempDir> {
        tempfile::Builder::new()
            .prefix(WORK_DIR_PREFIX)
            .tempdir_in(&self.path)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if let Err(e) = remove_tree(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot remove work directory");
        }
    }
}

/// Creates and locks `<dir>/.lock`. `None` when a sweeper got to it first: it holds the lock, or
/// already removed the file (the lock we got is then on a file nobody can find).
fn lock_new(dir: &Path) -> io::Result<Option<File>> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(None),
        Err(TryLockError::Error(e)) => return Err(e),
    }
    let ours = file.metadata()?;
    match fs::symlink_metadata(&path) {
        Ok(m) if m.dev() == ours.dev() && m.ino() == ours.ino() => Ok(Some(file)),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes the run directories under `parent` that no live process holds, with the working
/// copies in them; returns how many. Entries of other names, types or owners are left alone,
/// and so is everything when this process's user cannot be told.
pub fn sweep_stale_runs(parent: &Path) -> usize {
    let Some(uid) = own_uid() else {
        return 0;
    };
    let Ok(entries) = fs::read_dir(parent) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(RUN_DIR_PREFIX) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        match sweep_one(&path, &meta) {
            Ok(true) => removed += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove stale work directory");
            }
        }
    }
    removed
}

/// Removes the run directory `path` if its run is gone; whether it did.
fn sweep_one(path: &Path, meta: &fs::Metadata) -> io::Result<bool> {
    let lock_path = path.join(LOCK_FILE);
    let lock = match fs::symlink_metadata(&lock_path) {
        // Only a regular file is opened (a FIFO would block, a symlink could point anywhere).
        Ok(m) if m.is_file() => match File::open(&lock_path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        },
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Being created right now, or its creator died before making the lock file.
            let age = meta
                .modified()
                .ok()
                .and_then(|m| SystemTime::now().duration_since(m).ok())
                .unwrap_or_default();
            if age < UNLOCKED_GRACE {
                return Ok(false);
            }
            return remove_gone(path);
        }
        Err(e) => return Err(e),
    };
    match lock.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(false),
        Err(TryLockError::Error(e)) => return Err(e),
    }
    // Held while removing, so that a creator that lost the race sees it and starts over.
    let removed = remove_gone(path);
    drop(lock);
    removed
}

/// Removes `path`; `false` when another sweeper already did.
fn remove_gone(path: &Path) -> io::Result<bool> {
    match remove_tree(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// The uid this process runs as (the owner of `/proc/self`).
fn own_uid() -> Option<u32> {
    fs::metadata("/proc/self").ok().map(|m| m.uid())
}
