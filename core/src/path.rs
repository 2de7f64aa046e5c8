//! Paths from untrusted input (a `spec.path`, an include's `toPath`, a tree entry) joined under
//! a root directory. Both joins share one lexical normalization; they differ only in what they
//! do with a `..` that would climb above the root:
//!
//! - [`secure_join`] clamps it at the root, like Go's `filepath-securejoin`, which Flux uses for
//!   `spec.path` (`../../x` is `<root>/x`);
//! - [`strict_join`] refuses it, for names that can only be hostile (archive and tree entries).
//!
//! Neither touches the filesystem: symlinks are the caller's concern.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// A path whose `..` components climb above the root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal path '{0}': it climbs out of its root")]
pub struct PathEscape(pub String);

/// The normal components of `rel` after `.`, `..` and root/prefix components are resolved
/// lexically, and whether a `..` tried to go above the root.
fn normalize(rel: &Path) -> (Vec<OsString>, bool) {
    let mut parts: Vec<OsString> = Vec::new();
    let mut escaped = false;
    for c in rel.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_os_string()),
            Component::ParentDir => {
                if parts.pop().is_none() {
                    escaped = true;
                }
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    (parts, escaped)
}

fn join(root: &Path, parts: Vec<OsString>) -> PathBuf {
    let mut out = root.to_path_buf();
    out.extend(parts);
    out
}

/// Joins `rel` under `root`; a `..` above the root stays at the root, and an absolute `rel` is
/// taken as relative to the root.
pub fn secure_join(root: &Path, rel: impl AsRef<Path>) -> PathBuf {
    join(root, normalize(rel.as_ref()).0)
}

/// Joins `rel` under `root`, refusing a path that climbs above the root at any point.
pub fn strict_join(root: &Path, rel: impl AsRef<Path>) -> Result<PathBuf, PathEscape> {
    let rel = rel.as_ref();
    let (parts, escaped) = normalize(rel);
    if escaped {
        return Err(PathEscape(rel.display().to_string()));
    }
    Ok(join(root, parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_at_the_root() {
        let root = Path::new("/r");
        assert_eq!(secure_join(root, "a/./b"), Path::new("/r/a/b"));
        assert_eq!(secure_join(root, "/abs"), Path::new("/r/abs"));
        assert_eq!(secure_join(root, "../../x"), Path::new("/r/x"));
        assert_eq!(secure_join(root, "a/../../x"), Path::new("/r/x"));
        assert_eq!(secure_join(root, "a/b/../c"), Path::new("/r/a/c"));
        assert_eq!(secure_join(root, ""), Path::new("/r"));
    }

    #[test]
    fn strict_refuses_escapes() {
        let root = Path::new("/r");
        assert_eq!(strict_join(root, "a/./b").unwrap(), Path::new("/r/a/b"));
        assert_eq!(strict_join(root, "/abs").unwrap(), Path::new("/r/abs"));
        assert_eq!(strict_join(root, "a/b/../c").unwrap(), Path::new("/r/a/c"));
        assert!(strict_join(root, "a/../../x").is_err());
        assert!(strict_join(root, "..").is_err());
        // Once above the root, coming back down does not make it legal.
        assert!(strict_join(root, "../r/x").is_err());
    }
}
