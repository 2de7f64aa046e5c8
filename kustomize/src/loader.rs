//! Reading files with kustomize's load restrictions, plus an optional hard fence and the
//! build's budget.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::budget::{Budget, Meter};
use crate::error::{KustomizeError, Result};

/// Which files a kustomization may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoadRestrictor {
    /// kustomize's default: files (after resolving symlinks) must be in or below the directory
    /// of the kustomization that names them. Bases in other directories are allowed.
    #[default]
    RootOnly,
    /// `LoadRestrictionsNone`: any file may be read (still subject to `root_fence`).
    None,
}

/// Options of a build.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    pub load_restrictor: LoadRestrictor,
    /// When set, no file or directory outside this directory (after resolving symlinks) is
    /// ever read, whatever the restrictor says. Flux sets it to the artifact root.
    pub root_fence: Option<PathBuf>,
    /// Largest file read, in bytes (default [`DEFAULT_MAX_FILE_BYTES`]).
    pub max_file_bytes: Option<u64>,
    /// Limits of the whole build (time, objects, bytes read, nesting).
    pub budget: Budget,
    /// Files whose content the build reads from memory instead of the disk (Flux's SOPS
    /// decryption of generator and patch files, which must not write plaintext to disk).
    pub overlay: Option<Arc<FileOverlay>>,
    /// Accept objects named by `metadata.generateName` alone (not kustomize: an opt-in
    /// extension for Argo CD hooks). They are built under a placeholder name and come out with
    /// `generateName` set and no `name` (see [`crate::generate_name`]).
    pub generate_names: bool,
}

/// Replacement contents for files of the tree, by their real path (symlinks resolved). A file
/// is still resolved, fenced and restricted on disk as usual; only its bytes come from here.
#[derive(Debug, Default)]
pub struct FileOverlay {
    files: HashMap<PathBuf, Vec<u8>>,
}

impl FileOverlay {
    /// Replaces the content of the file at `real_path` (already canonical).
    pub fn insert(&mut self, real_path: PathBuf, bytes: Vec<u8>) {
        if let Some(mut old) = self.files.insert(real_path, bytes) {
            wipe(&mut old);
        }
    }

    /// The replacement content of a file, if any.
    pub fn get(&self, real_path: &Path) -> Option<&[u8]> {
        self.files.get(real_path).map(Vec::as_slice)
    }

    /// Whether no file is replaced.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// How many files are replaced.
    pub fn len(&self) -> usize {
        self.files.len()
    }
}

impl Drop for FileOverlay {
    /// The contents may be decrypted secrets: overwritten before the memory is freed.
    fn drop(&mut self) {
        for v in self.files.values_mut() {
            wipe(v);
        }
    }
}

/// Overwrites `v` with zeros in a way the optimiser keeps (a black-boxed write), then empties it.
fn wipe(v: &mut Vec<u8>) {
    v.iter_mut().for_each(|b| *b = 0);
    std::hint::black_box(&v);
    v.clear();
}

/// Default cap on one file's size.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// What every loader of one build shares.
#[derive(Debug)]
struct Shared {
    restrictor: LoadRestrictor,
    fence: Option<PathBuf>,
    max_file_bytes: u64,
    meter: Meter,
    overlay: Option<Arc<FileOverlay>>,
    generate_names: bool,
}

/// A loader rooted at one kustomization directory.
#[derive(Debug, Clone)]
pub struct Loader {
    /// The directory, with symlinks resolved.
    pub root: PathBuf,
    shared: Arc<Shared>,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> KustomizeError {
    KustomizeError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Whether a relative path names a remote resource (URL or git reference).
pub fn is_remote(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    lower.starts_with("http://")
        || lower.starts_with("https://")
        || lower.starts_with("git::")
        || lower.starts_with("git@")
        || lower.starts_with("ssh://")
        || lower.starts_with("github.com/")
        || lower.starts_with("gitlab.com/")
        || lower.starts_with("bitbucket.org/")
        || lower.starts_with("file://")
        || lower.contains("?ref=")
}

/// Reads the regular file `path`, refusing it when it is larger than `cap` bytes: at most
/// `cap + 1` bytes are ever read, even from a file that grows while it is read.
fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>> {
    let too_big = |len: u64| {
        io_err(
            path,
            format!("file of {len} bytes is larger than the limit of {cap} bytes"),
        )
    };
    let file = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
    let meta = file.metadata().map_err(|e| io_err(path, e))?;
    if meta.is_dir() {
        return Err(io_err(path, "is a directory"));
    }
    if !meta.is_file() {
        // A FIFO or a device could block or never end.
        return Err(io_err(path, "not a regular file"));
    }
    if meta.len() > cap {
        return Err(too_big(meta.len()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io_err(path, e))?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > cap {
        return Err(too_big(read));
    }
    Ok(bytes)
}

impl Loader {
    /// A loader for the kustomization directory `dir`; the build's budget starts now.
    pub fn new(dir: &Path, opts: &BuildOptions) -> Result<Self> {
        let fence = match &opts.root_fence {
            Some(f) => Some(f.canonicalize().map_err(|e| io_err(f, e))?),
            None => None,
        };
        let root = dir.canonicalize().map_err(|e| io_err(dir, e))?;
        if !root.is_dir() {
            return Err(io_err(dir, "must be a directory"));
        }
        let l = Loader {
            root,
            shared: Arc::new(Shared {
                restrictor: opts.load_restrictor,
                fence,
                max_file_bytes: opts.max_file_bytes.unwrap_or(DEFAULT_MAX_FILE_BYTES),
                meter: Meter::start(&opts.budget),
                overlay: opts.overlay.clone(),
                generate_names: opts.generate_names,
            }),
        };
        l.check_fence(dir, &l.root)?;
        Ok(l)
    }

    fn check_fence(&self, asked: &Path, real: &Path) -> Result<()> {
        if let Some(f) = &self.shared.fence
            && !real.starts_with(f)
        {
            return Err(KustomizeError::OutsideRoot {
                path: asked.to_path_buf(),
                root: f.clone(),
            });
        }
        Ok(())
    }

    /// Whether objects named by `generateName` alone are accepted.
    pub(crate) fn generate_names(&self) -> bool {
        self.shared.generate_names
    }

    /// What the build has used of its budget.
    pub(crate) fn meter(&self) -> &Meter {
        &self.shared.meter
    }

    /// Lexically joins `rel` onto the root (no symlink resolution).
    pub fn join(&self, rel: &str) -> PathBuf {
        let p = Path::new(rel);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.root.join(p)
        }
    }

    /// Resolves `rel` to a real path allowed for reading as a file.
    pub fn resolve_file(&self, rel: &str) -> Result<PathBuf> {
        let joined = self.join(rel);
        let real = joined.canonicalize().map_err(|e| io_err(&joined, e))?;
        self.check_fence(&joined, &real)?;
        if self.shared.restrictor == LoadRestrictor::RootOnly && !real.starts_with(&self.root) {
            return Err(KustomizeError::OutsideRoot {
                path: joined,
                root: self.root.clone(),
            });
        }
        Ok(real)
    }

    /// Reads a file named relative to the root, within the size limit and the budget.
    pub fn read(&self, rel: &str) -> Result<(PathBuf, Vec<u8>)> {
        self.meter().check_time()?;
        let real = self.resolve_file(rel)?;
        let bytes = match self.shared.overlay.as_deref().and_then(|o| o.get(&real)) {
            Some(b) => b.to_vec(),
            None => read_capped(&real, self.shared.max_file_bytes)?,
        };
        self.meter()
            .add_bytes(u64::try_from(bytes.len()).unwrap_or(u64::MAX))?;
        Ok((self.join(rel), bytes))
    }

    /// Reads a UTF-8 text file named relative to the root.
    pub fn read_text(&self, rel: &str) -> Result<(PathBuf, String)> {
        let (p, bytes) = self.read(rel)?;
        let text = String::from_utf8(bytes).map_err(|_| io_err(&p, "file is not valid UTF-8"))?;
        Ok((p, text))
    }

    /// Reads a UTF-8 text file the caller found by walking the root's tree without following
    /// symlinks (so it is inside the root), within the size limit and the budget.
    pub(crate) fn read_walked_text(&self, path: &Path) -> Result<String> {
        self.meter().check_time()?;
        let bytes = read_capped(path, self.shared.max_file_bytes)?;
        self.meter()
            .add_bytes(u64::try_from(bytes.len()).unwrap_or(u64::MAX))?;
        String::from_utf8(bytes).map_err(|_| io_err(path, "file is not valid UTF-8"))
    }

    /// Whether `rel` names a directory (following symlinks).
    pub fn is_dir(&self, rel: &str) -> bool {
        self.join(rel).is_dir()
    }

    /// A loader for a base or component directory named relative to the root. The caller
    /// checks that it is not an ancestor of a kustomization being built (a cycle).
    pub fn sub(&self, rel: &str) -> Result<Loader> {
        let joined = self.join(rel);
        let real = joined.canonicalize().map_err(|e| io_err(&joined, e))?;
        if !real.is_dir() {
            return Err(io_err(&joined, "not a directory"));
        }
        self.check_fence(&joined, &real)?;
        Ok(Loader {
            root: real,
            shared: Arc::clone(&self.shared),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_read_refuses_big_and_special_files() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        std::fs::write(&f, "x".repeat(11)).unwrap();
        assert_eq!(read_capped(&f, 11).unwrap().len(), 11);
        let e = read_capped(&f, 10).unwrap_err();
        assert!(e.to_string().contains("larger than the limit"), "{e}");
        assert!(read_capped(t.path(), 10).is_err());
        #[cfg(unix)]
        {
            let e = read_capped(Path::new("/dev/zero"), 10).unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
    }
}
