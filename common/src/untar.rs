//! Safe extraction of a gzip-compressed tarball, and the tree operations around it.
//!
//! Like Flux's extraction: symlinks are skipped (their names still checked); absolute names,
//! `..` components and backslashes are refused; directories get at least 0700; file mtimes are
//! clamped to the extraction time. Unlike Flux, which has no limits here, the declared size and
//! the entry count are bounded by [`UntarLimits`], and hard links, devices and FIFOs are refused.

use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Extraction failures.
#[derive(Debug, thiserror::Error)]
pub enum UntarError {
    /// The gzip or tar stream is corrupt.
    #[error("tar error: {0}")]
    Format(#[source] io::Error),
    /// An entry name is absolute, contains `..` or a backslash, or is empty.
    #[error("tar contained invalid name error \"{0}\"")]
    InvalidName(String),
    /// The entries declare more bytes than allowed.
    #[error("tar \"{name}\" is bigger than max archive size of {limit} bytes")]
    TooBig { name: String, limit: u64 },
    /// More entries than allowed.
    #[error("tar has more than {limit} entries")]
    TooManyEntries { limit: u64 },
    /// A hard link, device, FIFO or other unsupported entry type.
    #[error("tar file entry {name} contained unsupported file type {kind}")]
    Unsupported { name: String, kind: String },
    /// An entry holds fewer bytes than its header declares.
    #[error("only wrote {written} bytes to {path}; expected {expected}")]
    Short {
        path: PathBuf,
        written: u64,
        expected: u64,
    },
    /// Writing to the destination failed.
    #[error("{op} '{path}': {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Bounds for extraction (`None` = unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UntarLimits {
    /// Sum of the declared entry sizes.
    pub max_bytes: Option<u64>,
    /// Number of entries (of every type).
    pub max_entries: Option<u64>,
}

impl Default for UntarLimits {
    fn default() -> Self {
        UntarLimits {
            max_bytes: Some(4 << 30),
            max_entries: Some(1_000_000),
        }
    }
}

/// What an extraction produced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UntarStats {
    pub files: u64,
    pub dirs: u64,
    /// Symbolic links, which are skipped.
    pub skipped_symlinks: u64,
    /// Bytes written to files.
    pub bytes: u64,
}

/// The relative path of an archive entry, or `None` when it must be refused: empty, absolute,
/// containing a backslash or a `..` component. `.` and empty components are dropped.
pub fn safe_entry_path(name: &[u8]) -> Option<PathBuf> {
    if name.is_empty() || name.starts_with(b"/") || name.contains(&b'\\') || name.contains(&0) {
        return None;
    }
    let mut out = PathBuf::new();
    for comp in name.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => return None,
            c => out.push(std::ffi::OsStr::from_bytes(c)),
        }
    }
    // Belt and braces: only normal components may remain.
    if out.components().all(|c| matches!(c, Component::Normal(_))) {
        Some(out)
    } else {
        None
    }
}

/// Extracts the gzip-compressed tarball `reader` into the existing directory `dest`.
pub fn untar(
    reader: impl Read,
    dest: &Path,
    limits: &UntarLimits,
) -> Result<UntarStats, UntarError> {
    let now = SystemTime::now();
    let gz = flate2::read::GzDecoder::new(reader);
    let mut archive = tar::Archive::new(gz);
    let mut stats = UntarStats::default();
    let mut declared: u64 = 0;
    let mut count: u64 = 0;
    let entries = archive.entries().map_err(UntarError::Format)?;
    for entry in entries {
        let mut entry = entry.map_err(UntarError::Format)?;
        count += 1;
        if let Some(limit) = limits.max_entries
            && count > limit
        {
            return Err(UntarError::TooManyEntries { limit });
        }
        let raw_name = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw_name).into_owned();
        let size = entry.size();
        declared = declared.saturating_add(size);
        if let Some(limit) = limits.max_bytes
            && declared > limit
        {
            return Err(UntarError::TooBig { name: shown, limit });
        }
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions() {
            continue;
        }
        let rel = safe_entry_path(&raw_name).ok_or_else(|| UntarError::InvalidName(shown.clone()));
        let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
        if kind.is_dir() {
            let rel = rel?;
            let path = dest.join(&rel);
            make_dirs(&path)?;
            fs::set_permissions(&path, fs::Permissions::from_mode(mode | 0o700)).map_err(|e| {
                UntarError::Io {
                    op: "chmod",
                    path: path.clone(),
                    source: e,
                }
            })?;
            stats.dirs += 1;
        } else if kind.is_file() || kind.is_contiguous() {
            let rel = rel?;
            let path = dest.join(&rel);
            if let Some(parent) = path.parent() {
                make_dirs(parent)?;
            }
            let mtime = entry
                .header()
                .mtime()
                .ok()
                .map(|s| UNIX_EPOCH + Duration::from_secs(s))
                .map_or(now, |t| t.min(now));
            let written = write_file(&mut entry, &path, mode | 0o600, size, mtime)?;
            stats.files += 1;
            stats.bytes += written;
        } else if kind.is_symlink() {
            // Flux's fetcher extracts WithSkipSymlinks: the name is still validated.
            rel?;
            stats.skipped_symlinks += 1;
        } else {
            return Err(UntarError::Unsupported {
                name: shown,
                kind: format!("{kind:?}"),
            });
        }
    }
    Ok(stats)
}

fn make_dirs(path: &Path) -> Result<(), UntarError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(path)
        .map_err(|e| UntarError::Io {
            op: "mkdir",
            path: path.to_path_buf(),
            source: e,
        })
}

fn write_file(
    entry: &mut impl Read,
    path: &Path,
    mode: u32,
    size: u64,
    mtime: SystemTime,
) -> Result<u64, UntarError> {
    let io = |op: &'static str| {
        move |e: io::Error| UntarError::Io {
            op,
            path: path.to_path_buf(),
            source: e,
        }
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(io("create"))?;
    let written = io::copy(&mut entry.take(size), &mut f).map_err(UntarError::Format)?;
    if written != size {
        return Err(UntarError::Short {
            path: path.to_path_buf(),
            written,
            expected: size,
        });
    }
    f.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io("chmod"))?;
    f.set_modified(mtime).map_err(io("set mtime of"))?;
    Ok(written)
}

/// Copies the directory tree `src` into `dst` (created if missing): directories and regular
/// files with their permission bits; symlinks and special files are skipped.
pub fn copy_tree(src: &Path, dst: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dst)?;
    for entry in fs::read_dir(src)? {
        let entry = entry?;
        let ft = entry.file_type()?;
        let to = dst.join(entry.file_name());
        if ft.is_dir() {
            copy_tree(&entry.path(), &to)?;
            let mode = entry.metadata()?.permissions().mode() & 0o777;
            fs::set_permissions(&to, fs::Permissions::from_mode(mode | 0o700))?;
        } else if ft.is_file() {
            fs::copy(entry.path(), &to)?;
        }
    }
    Ok(())
}

/// `remove_dir_all` that first makes directories writable (archives may carry 0500 dirs).
pub fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(_) => {
            make_writable(path);
            fs::remove_dir_all(path)
        }
    }
}

fn make_writable(path: &Path) {
    if let Ok(meta) = fs::symlink_metadata(path)
        && meta.is_dir()
    {
        let mode = meta.permissions().mode();
        let _ = fs::set_permissions(path, fs::Permissions::from_mode(mode | 0o700));
        if let Ok(rd) = fs::read_dir(path) {
            for e in rd.flatten() {
                make_writable(&e.path());
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn entry_paths() {
        assert_eq!(safe_entry_path(b"a/./b/"), Some(PathBuf::from("a/b")));
        assert_eq!(safe_entry_path(b"./x"), Some(PathBuf::from("x")));
        assert_eq!(safe_entry_path(b"../x"), None);
        assert_eq!(safe_entry_path(b"a/../../x"), None);
        assert_eq!(safe_entry_path(b"a/.."), None);
        assert_eq!(safe_entry_path(b"/etc/passwd"), None);
        assert_eq!(safe_entry_path(b"a\\b"), None);
        assert_eq!(safe_entry_path(b""), None);
    }

    #[test]
    fn remove_tree_removes_read_only_directories() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a");
        fs::create_dir_all(dir.join("b")).unwrap();
        fs::write(dir.join("b/f"), "x").unwrap();
        fs::set_permissions(dir.join("b"), fs::Permissions::from_mode(0o500)).unwrap();
        remove_tree(&dir).unwrap();
        assert!(!dir.exists());
    }
}
