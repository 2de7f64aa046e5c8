//! Walking a tree out of an [`ObjectStore`], in git's tree order, with an
//! optional sparse-checkout filter.

use crate::error::GitError;
use crate::object::{ObjectKind, TreeIter, mode, tree_entries};
use crate::oid::ObjectId;
use crate::pack::ObjectStore;

/// Deepest directory nesting accepted while walking (git's `core.maxTreeDepth` default).
pub const MAX_TREE_DEPTH: usize = 4096;

/// Directories to keep (Flux `spec.sparseCheckout`); empty keeps everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SparseFilter {
    dirs: Vec<String>,
}

impl SparseFilter {
    /// A filter that keeps every file.
    pub fn all() -> Self {
        Self::default()
    }

    /// Keeps files under any of `dirs` (`./a/b/`, `/a/b` and `a/b` are the same;
    /// `.`, `/` or an empty string keep everything).
    pub fn new<I, S>(dirs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out = Vec::new();
        for d in dirs {
            let mut s = d.as_ref().trim();
            while let Some(r) = s.strip_prefix("./") {
                s = r;
            }
            let s = s.trim_matches('/');
            if s.is_empty() || s == "." {
                return Self::all();
            }
            out.push(s.to_string());
        }
        SparseFilter { dirs: out }
    }

    pub fn is_all(&self) -> bool {
        self.dirs.is_empty()
    }

    /// Whether the file at `path` is kept.
    pub fn includes(&self, path: &str) -> bool {
        self.is_all() || self.dirs.iter().any(|d| is_under(path, d))
    }

    /// Whether the directory at `dir` may hold kept files.
    pub fn descends(&self, dir: &str) -> bool {
        self.is_all()
            || self
                .dirs
                .iter()
                .any(|d| d == dir || is_under(dir, d) || is_under(d, dir))
    }
}

fn is_under(path: &str, dir: &str) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

/// An entry reported by [`walk_tree`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkEntry<'a> {
    /// A blob: regular file (`0o100644`/`0o100755`) or symlink (`0o120000`, data is the target).
    File {
        path: &'a str,
        mode: u32,
        oid: ObjectId,
        data: &'a [u8],
    },
    /// A submodule (gitlink, mode `0o160000`); its commit is not in the pack.
    Submodule { path: &'a str, oid: ObjectId },
}

/// A tree entry name must be a single safe path component.
fn checked_name(name: &[u8]) -> Result<&str, GitError> {
    let s = std::str::from_utf8(name)
        .map_err(|_| GitError::protocol("tree entry name is not UTF-8"))?;
    if s.is_empty()
        || s == "."
        || s == ".."
        || s.eq_ignore_ascii_case(".git")
        || s.contains('/')
        || s.contains('\0')
    {
        return Err(GitError::protocol(format!("unsafe tree entry name {s:?}")));
    }
    Ok(s)
}

/// Walks the tree `root` depth-first in stored order (the order of
/// `git ls-tree -r`), calling `f` for each kept blob and submodule.
pub fn walk_tree<'s, E, F>(
    store: &'s ObjectStore,
    root: &ObjectId,
    filter: &SparseFilter,
    mut f: F,
) -> Result<(), E>
where
    E: From<GitError>,
    F: FnMut(WalkEntry<'_>) -> Result<(), E>,
{
    let root_data = store.get_kind(root, ObjectKind::Tree)?;
    // Stack of (iterator, length of the path prefix for this tree).
    let mut stack: Vec<(TreeIter<'s>, usize)> = vec![(tree_entries(root_data), 0)];
    let mut path = String::new();
    while let Some((iter, prefix_len)) = stack.last_mut() {
        let prefix_len = *prefix_len;
        let Some(entry) = iter.next() else {
            stack.pop();
            continue;
        };
        let entry = entry?;
        let name = checked_name(entry.name)?;
        path.truncate(prefix_len);
        if prefix_len > 0 {
            path.push('/');
        }
        path.push_str(name);
        match entry.mode {
            mode::TREE => {
                if !filter.descends(&path) {
                    continue;
                }
                if stack.len() >= MAX_TREE_DEPTH {
                    return Err(GitError::Limit(format!(
                        "tree deeper than {MAX_TREE_DEPTH} levels"
                    ))
                    .into());
                }
                let data = store.get_kind(&entry.oid, ObjectKind::Tree)?;
                stack.push((tree_entries(data), path.len()));
            }
            mode::GITLINK => {
                if filter.includes(&path) {
                    f(WalkEntry::Submodule {
                        path: &path,
                        oid: entry.oid,
                    })?;
                }
            }
            m @ (mode::BLOB | mode::BLOB_EXECUTABLE | mode::SYMLINK | 0o100664 | 0o100000) => {
                if filter.includes(&path) {
                    let data = store.get_kind(&entry.oid, ObjectKind::Blob)?;
                    // Old repositories may carry 100664 / 100000; git treats them as 100644.
                    let mode = if m == mode::BLOB_EXECUTABLE || m == mode::SYMLINK {
                        m
                    } else {
                        mode::BLOB
                    };
                    f(WalkEntry::File {
                        path: &path,
                        mode,
                        oid: entry.oid,
                        data,
                    })?;
                }
            }
            other => {
                return Err(GitError::protocol(format!(
                    "tree entry {path:?} has unsupported mode {other:o}"
                ))
                .into());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tree(entries: &[(&str, &str, ObjectId)]) -> Vec<u8> {
        let mut v = Vec::new();
        for (m, n, o) in entries {
            v.extend_from_slice(format!("{m} {n}\0").as_bytes());
            v.extend_from_slice(&o.0);
        }
        v
    }

    fn sample() -> (ObjectStore, ObjectId) {
        let mut s = ObjectStore::new();
        let a = s.insert(ObjectKind::Blob, b"a".to_vec());
        let b = s.insert(ObjectKind::Blob, b"b".to_vec());
        let deep = s.insert(ObjectKind::Tree, tree(&[("100755", "run.sh", b)]));
        let apps = s.insert(
            ObjectKind::Tree,
            tree(&[("100644", "x.yaml", a), ("40000", "deep", deep)]),
        );
        let other = s.insert(ObjectKind::Tree, tree(&[("120000", "link", a)]));
        let root = s.insert(
            ObjectKind::Tree,
            tree(&[
                ("100644", "README", a),
                ("40000", "apps", apps),
                ("40000", "other", other),
                ("160000", "sub", ObjectId([9; 20])),
            ]),
        );
        (s, root)
    }

    fn collect(s: &ObjectStore, root: &ObjectId, f: &SparseFilter) -> Vec<String> {
        let mut out = Vec::new();
        walk_tree::<GitError, _>(s, root, f, |e| {
            out.push(match e {
                WalkEntry::File {
                    path, mode, data, ..
                } => {
                    format!("{mode:o} {path} {}", String::from_utf8_lossy(data))
                }
                WalkEntry::Submodule { path, oid } => format!("sub {path} {}", &oid.to_hex()[..4]),
            });
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn walks_everything_in_order() {
        let (s, root) = sample();
        assert_eq!(
            collect(&s, &root, &SparseFilter::all()),
            vec![
                "100644 README a",
                "100644 apps/x.yaml a",
                "100755 apps/deep/run.sh b",
                "120000 other/link a",
                "sub sub 0909",
            ]
        );
    }

    #[test]
    fn sparse_filter_keeps_only_listed_dirs() {
        let (s, root) = sample();
        assert_eq!(
            collect(&s, &root, &SparseFilter::new(["./apps/deep/"])),
            vec!["100755 apps/deep/run.sh b"]
        );
        assert_eq!(
            collect(&s, &root, &SparseFilter::new(["/other", "apps/deep"])),
            vec!["100755 apps/deep/run.sh b", "120000 other/link a"]
        );
        assert!(collect(&s, &root, &SparseFilter::new(["apps/dee"])).is_empty());
        assert_eq!(collect(&s, &root, &SparseFilter::new(["."])).len(), 5);
        let f = SparseFilter::new(["a/b"]);
        assert!(f.descends("a") && f.descends("a/b") && f.descends("a/b/c"));
        assert!(!f.descends("a/bc") && !f.includes("a/x") && f.includes("a/b/x"));
    }

    #[test]
    fn rejects_unsafe_names_missing_objects_and_bad_modes() {
        for name in ["..", ".git", ".GIT"] {
            let mut s = ObjectStore::new();
            let a = s.insert(ObjectKind::Blob, b"a".to_vec());
            let root = s.insert(ObjectKind::Tree, tree(&[("100644", name, a)]));
            let r = walk_tree::<GitError, _>(&s, &root, &SparseFilter::all(), |_| Ok(()));
            assert!(matches!(r, Err(GitError::Protocol(_))), "{name}");
        }
        let mut s = ObjectStore::new();
        let root = s.insert(
            ObjectKind::Tree,
            tree(&[("100644", "f", ObjectId([1; 20]))]),
        );
        let r = walk_tree::<GitError, _>(&s, &root, &SparseFilter::all(), |_| Ok(()));
        assert!(matches!(r, Err(GitError::NotFound(_))));
        let a = s.insert(ObjectKind::Blob, b"a".to_vec());
        let root = s.insert(ObjectKind::Tree, tree(&[("100600", "f", a)]));
        let r = walk_tree::<GitError, _>(&s, &root, &SparseFilter::all(), |_| Ok(()));
        assert!(matches!(r, Err(GitError::Protocol(_))));
        // A blob where a tree is expected.
        let r = walk_tree::<GitError, _>(&s, &a, &SparseFilter::all(), |_| Ok(()));
        assert!(matches!(r, Err(GitError::Protocol(_))));
    }

    #[test]
    fn callback_errors_stop_the_walk() {
        let (s, root) = sample();
        let mut n = 0;
        let r = walk_tree::<GitError, _>(&s, &root, &SparseFilter::all(), |_| {
            n += 1;
            Err(GitError::Config("stop".into()))
        });
        assert!(matches!(r, Err(GitError::Config(_))));
        assert_eq!(n, 1);
    }
}
