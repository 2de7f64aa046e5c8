//! The kinds of git objects.

use crate::error::GitError;

/// The four object kinds a pack can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    Commit,
    Tree,
    Blob,
    Tag,
}

impl ObjectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Commit => "commit",
            ObjectKind::Tree => "tree",
            ObjectKind::Blob => "blob",
            ObjectKind::Tag => "tag",
        }
    }

    /// Parses `commit`, `tree`, `blob` or `tag`.
    pub fn parse(s: &[u8]) -> Result<Self, GitError> {
        match s {
            b"commit" => Ok(ObjectKind::Commit),
            b"tree" => Ok(ObjectKind::Tree),
            b"blob" => Ok(ObjectKind::Blob),
            b"tag" => Ok(ObjectKind::Tag),
            other => Err(GitError::protocol(format!(
                "unknown object type {:?}",
                String::from_utf8_lossy(other)
            ))),
        }
    }
}
