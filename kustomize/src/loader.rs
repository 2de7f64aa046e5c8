//! Reading files with kustomize's load restrictions, plus an optional hard fence.

use std::path::{Component, Path, PathBuf};

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
    /// Largest file read, in bytes.
    pub max_file_bytes: Option<u64>,
}

/// Default cap on one file's size.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// A loader rooted at one kustomization directory.
#[derive(Debug, Clone)]
pub struct Loader {
    /// The directory, with symlinks resolved.
    pub root: PathBuf,
    opts: BuildOptions,
    fence: Option<PathBuf>,
    /// Directories of the kustomizations that led here (for cycle detection).
    chain: Vec<PathBuf>,
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

impl Loader {
    /// A loader for the kustomization directory `dir`.
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
            root: root.clone(),
            opts: opts.clone(),
            fence,
            chain: vec![root],
        };
        l.check_fence(dir, &l.root)?;
        Ok(l)
    }

    fn check_fence(&self, asked: &Path, real: &Path) -> Result<()> {
        if let Some(f) = &self.fence
            && !real.starts_with(f)
        {
            return Err(KustomizeError::OutsideRoot {
                path: asked.to_path_buf(),
                root: f.clone(),
            });
        }
        Ok(())
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
        if self.opts.load_restrictor == LoadRestrictor::RootOnly && !real.starts_with(&self.root) {
            return Err(KustomizeError::OutsideRoot {
                path: joined,
                root: self.root.clone(),
            });
        }
        Ok(real)
    }

    /// Reads a file named relative to the root.
    pub fn read(&self, rel: &str) -> Result<(PathBuf, Vec<u8>)> {
        let real = self.resolve_file(rel)?;
        let meta = std::fs::metadata(&real).map_err(|e| io_err(&real, e))?;
        if meta.is_dir() {
            return Err(io_err(&real, "is a directory"));
        }
        let cap = self.opts.max_file_bytes.unwrap_or(DEFAULT_MAX_FILE_BYTES);
        if meta.len() > cap {
            return Err(io_err(
                &real,
                format!(
                    "file of {} bytes is larger than the limit of {cap} bytes",
                    meta.len()
                ),
            ));
        }
        let bytes = std::fs::read(&real).map_err(|e| io_err(&real, e))?;
        Ok((self.join(rel), bytes))
    }

    /// Reads a UTF-8 text file named relative to the root.
    pub fn read_text(&self, rel: &str) -> Result<(PathBuf, String)> {
        let (p, bytes) = self.read(rel)?;
        let text = String::from_utf8(bytes).map_err(|_| io_err(&p, "file is not valid UTF-8"))?;
        Ok((p, text))
    }

    /// Whether `rel` names a directory (following symlinks).
    pub fn is_dir(&self, rel: &str) -> bool {
        self.join(rel).is_dir()
    }

    /// A loader for a base or component directory named relative to the root.
    pub fn sub(&self, rel: &str) -> Result<Loader> {
        let joined = self.join(rel);
        let real = joined.canonicalize().map_err(|e| io_err(&joined, e))?;
        if !real.is_dir() {
            return Err(io_err(&joined, "not a directory"));
        }
        self.check_fence(&joined, &real)?;
        for prev in &self.chain {
            if prev.starts_with(&real) {
                return Err(io_err(
                    &joined,
                    format!(
                        "cycle detected: '{}' refers to an ancestor",
                        self.root.display()
                    ),
                ));
            }
        }
        let mut chain = self.chain.clone();
        chain.push(real.clone());
        Ok(Loader {
            root: real,
            opts: self.opts.clone(),
            fence: self.fence.clone(),
            chain,
        })
    }

    /// The options this loader was made with.
    pub fn options(&self) -> &BuildOptions {
        &self.opts
    }
}

/// Removes `.` and resolves `..` lexically.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}
