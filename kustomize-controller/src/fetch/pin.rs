//! Cache entries held for reading. The build reads the unpacked artifact where the cache keeps
//! it (the engine never writes into its input), so a reconcile no longer copies the tree into a
//! working directory; eviction skips an entry while a [`PinnedArtifact`] for it lives.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// How many holders each pinned cache entry has.
#[derive(Debug, Default, Clone)]
pub(crate) struct Pins(Arc<Mutex<HashMap<PathBuf, usize>>>);

impl Pins {
    fn lock(&self) -> MutexGuard<'_, HashMap<PathBuf, usize>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pins `path` until the returned value is dropped.
    pub(crate) fn pin(&self, path: &Path) -> PinnedArtifact {
        *self.lock().entry(path.to_path_buf()).or_insert(0) += 1;
        PinnedArtifact {
            path: path.to_path_buf(),
            pins: self.clone(),
        }
    }

    /// Runs `remove` on `path` unless it is pinned; a [`Pins::pin`] of it waits until the
    /// removal is over. Returns whether `remove` ran.
    pub(crate) fn remove_unpinned(&self, path: &Path, remove: impl FnOnce(&Path)) -> bool {
        let pins = self.lock();
        if pins.contains_key(path) {
            return false;
        }
        remove(path);
        drop(pins);
        true
    }
}

/// An unpacked artifact in the cache, kept from eviction while this value lives. Read-only:
/// the directory is shared by every reconcile of the same revision.
#[derive(Debug)]
pub struct PinnedArtifact {
    path: PathBuf,
    pins: Pins,
}

impl PinnedArtifact {
    /// The unpacked artifact.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PinnedArtifact {
    fn drop(&mut self) {
        let mut pins = self.pins.lock();
        if let Some(n) = pins.get_mut(&self.path) {
            *n -= 1;
            if *n == 0 {
                pins.remove(&self.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_entries_are_not_removed_until_every_holder_is_gone() {
        let pins = Pins::default();
        let p = Path::new("/cache/abc");
        let a = pins.pin(p);
        let b = pins.pin(p);
        assert!(!pins.remove_unpinned(p, |_| panic!("removed a pinned entry")));
        drop(a);
        assert!(!pins.remove_unpinned(p, |_| panic!("removed a pinned entry")));
        drop(b);
        let mut removed = false;
        assert!(pins.remove_unpinned(p, |_| removed = true));
        assert!(removed);
    }
}
