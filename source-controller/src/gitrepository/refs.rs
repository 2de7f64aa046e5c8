//! Reference selection and revision strings: which reference field wins, and Flux's revision
//! format.
//!
//! Pure: the caller lists the remote refs (`rflux_git::ls_refs`) with [`RefSelector::prefixes`]
//! and hands them to [`RefSelector::resolve`].

use rflux_common::api::gitrepository::{DEFAULT_BRANCH, GitRepositoryRef};
use rflux_git::{ObjectId, RemoteRef};

use super::semver::{Constraint, ConstraintError, select_highest};

/// What to check out, after applying the precedence commit > name > tag > semver > branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefSelector {
    /// A commit, optionally on a branch (the revision then carries the branch name).
    Commit { sha: String, branch: Option<String> },
    /// A full reference name (`refs/heads/main`, `refs/pull/1/head`).
    Name(String),
    /// A tag name.
    Tag(String),
    /// A semver constraint over the tags.
    Semver(String),
    /// A branch name.
    Branch(String),
}

/// Why a reference could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    #[error("git repository is empty")]
    EmptyRepository,
    #[error("couldn't find remote ref '{0}'")]
    NotFound(String),
    #[error("invalid commit SHA '{0}'")]
    InvalidCommit(String),
    #[error("semver parse error: {0}")]
    Semver(#[from] ConstraintError),
    #[error("no match found for semver: {0}")]
    NoSemverMatch(String),
}

/// The outcome of resolution: what to fetch and how to name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The id to ask the server for (a commit, or an annotated tag object).
    pub want: ObjectId,
    /// The commit the ref resolves to (peeled), when the advertisement tells us.
    pub commit: ObjectId,
    /// The revision prefix (`main`, `v1.0.0`, `refs/pull/1/head`), empty for a bare commit.
    pub name: String,
}

impl Resolved {
    /// The Flux revision string for this resolution.
    pub fn revision(&self) -> String {
        revision_string(&self.name, &self.commit.to_hex())
    }
}

/// `<name>@sha1:<hex>`, or `sha1:<hex>` when `name` is empty (Flux's revision format).
pub fn revision_string(name: &str, commit_hex: &str) -> String {
    if name.is_empty() {
        format!("sha1:{commit_hex}")
    } else {
        format!("{name}@sha1:{commit_hex}")
    }
}

/// The commit hex of a revision in any accepted format (`main@sha1:<hex>`, `sha1:<hex>`,
/// legacy `main/<hex>` or bare `<hex>`).
pub fn revision_commit(revision: &str) -> Option<&str> {
    let tail = revision.rsplit_once("sha1:").map_or(revision, |(_, h)| h);
    let tail = tail.rsplit_once('/').map_or(tail, |(_, h)| h);
    (tail.len() == 40 && tail.bytes().all(|b| b.is_ascii_hexdigit())).then_some(tail)
}

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl RefSelector {
    /// Applies Flux's precedence to `spec.ref` (`None`: branch `master`).
    pub fn from_spec(r: Option<&GitRepositoryRef>) -> Self {
        let Some(r) = r else {
            return RefSelector::Branch(DEFAULT_BRANCH.to_string());
        };
        if let Some(c) = non_empty(&r.commit) {
            return RefSelector::Commit {
                sha: c.to_string(),
                branch: non_empty(&r.branch).map(str::to_string),
            };
        }
        if let Some(n) = non_empty(&r.name) {
            return RefSelector::Name(n.to_string());
        }
        if let Some(t) = non_empty(&r.tag) {
            return RefSelector::Tag(t.to_string());
        }
        if let Some(s) = non_empty(&r.semver) {
            return RefSelector::Semver(s.to_string());
        }
        RefSelector::Branch(non_empty(&r.branch).unwrap_or(DEFAULT_BRANCH).to_string())
    }

    /// Ref prefixes to list for this selector (`ls-refs ref-prefix`).
    pub fn prefixes(&self) -> Vec<String> {
        match self {
            RefSelector::Commit {
                branch: Some(b), ..
            } => vec![format!("refs/heads/{b}")],
            RefSelector::Commit { branch: None, .. } => Vec::new(),
            RefSelector::Name(n) => vec![n.clone()],
            RefSelector::Tag(t) => vec![format!("refs/tags/{t}")],
            RefSelector::Semver(_) => vec!["refs/tags/".to_string()],
            RefSelector::Branch(b) => vec![format!("refs/heads/{b}")],
        }
    }

    /// Whether resolution needs the remote's refs (a bare commit does not).
    pub fn needs_refs(&self) -> bool {
        !matches!(self, RefSelector::Commit { branch: None, .. })
    }

    /// Picks the commit from the listed refs.
    pub fn resolve(&self, refs: &[RemoteRef]) -> Result<Resolved, RefError> {
        let exact = |full: &str| refs.iter().find(|r| r.name == full);
        match self {
            RefSelector::Commit { sha, branch } => {
                let oid: ObjectId = sha
                    .parse()
                    .map_err(|_| RefError::InvalidCommit(sha.clone()))?;
                if let Some(b) = branch {
                    let full = format!("refs/heads/{b}");
                    if exact(&full).is_none() {
                        return Err(RefError::NotFound(full));
                    }
                }
                Ok(Resolved {
                    want: oid,
                    commit: oid,
                    name: branch.clone().unwrap_or_default(),
                })
            }
            RefSelector::Name(n) => {
                let r = exact(n).ok_or_else(|| RefError::NotFound(n.clone()))?;
                Ok(Resolved {
                    want: r.oid,
                    commit: r.target(),
                    name: n.clone(),
                })
            }
            RefSelector::Tag(t) => {
                let full = format!("refs/tags/{t}");
                let r = exact(&full).ok_or(RefError::NotFound(full))?;
                Ok(Resolved {
                    want: r.oid,
                    commit: r.target(),
                    name: t.clone(),
                })
            }
            RefSelector::Semver(c) => {
                let constraint = Constraint::parse(c)?;
                let tags = refs.iter().filter_map(|r| {
                    r.name
                        .strip_prefix("refs/tags/")
                        .filter(|t| !t.ends_with("^{}"))
                });
                let (tag, _) = select_highest(&constraint, tags)
                    .ok_or_else(|| RefError::NoSemverMatch(c.clone()))?;
                let full = format!("refs/tags/{tag}");
                let r = exact(&full).ok_or(RefError::NotFound(full))?;
                Ok(Resolved {
                    want: r.oid,
                    commit: r.target(),
                    name: tag.to_string(),
                })
            }
            RefSelector::Branch(b) => {
                let full = format!("refs/heads/{b}");
                let r = exact(&full).ok_or(RefError::NotFound(full))?;
                Ok(Resolved {
                    want: r.oid,
                    commit: r.target(),
                    name: b.clone(),
                })
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn oid(c: char) -> ObjectId {
        c.to_string().repeat(40).parse().unwrap()
    }

    fn rref(name: &str, o: ObjectId, peeled: Option<ObjectId>) -> RemoteRef {
        RemoteRef {
            name: name.into(),
            oid: o,
            peeled,
            symref_target: None,
        }
    }

    fn spec(f: impl FnOnce(&mut GitRepositoryRef)) -> GitRepositoryRef {
        let mut r = GitRepositoryRef::default();
        f(&mut r);
        r
    }

    #[test]
    fn precedence_commit_name_tag_semver_branch() {
        assert_eq!(
            RefSelector::from_spec(None),
            RefSelector::Branch("master".into())
        );
        let all = spec(|r| {
            r.branch = Some("main".into());
            r.tag = Some("v1".into());
            r.semver = Some(">=1".into());
            r.name = Some("refs/heads/x".into());
            r.commit = Some("a".repeat(40));
        });
        assert_eq!(
            RefSelector::from_spec(Some(&all)),
            RefSelector::Commit {
                sha: "a".repeat(40),
                branch: Some("main".into())
            }
        );
        let mut r = all.clone();
        r.commit = None;
        assert_eq!(
            RefSelector::from_spec(Some(&r)),
            RefSelector::Name("refs/heads/x".into())
        );
        r.name = None;
        assert_eq!(
            RefSelector::from_spec(Some(&r)),
            RefSelector::Tag("v1".into())
        );
        r.tag = None;
        assert_eq!(
            RefSelector::from_spec(Some(&r)),
            RefSelector::Semver(">=1".into())
        );
        r.semver = None;
        assert_eq!(
            RefSelector::from_spec(Some(&r)),
            RefSelector::Branch("main".into())
        );
        assert_eq!(
            RefSelector::from_spec(Some(&GitRepositoryRef::default())),
            RefSelector::Branch("master".into())
        );
    }

    #[test]
    fn revision_strings_follow_flux() {
        let refs = vec![
            rref("refs/heads/main", oid('a'), None),
            rref("refs/tags/v1.0.0", oid('b'), Some(oid('c'))),
            rref("refs/tags/v1.2.0", oid('d'), None),
            rref("refs/tags/v2.0.0", oid('e'), None),
            rref("refs/pull/4/head", oid('f'), None),
        ];
        let a = "a".repeat(40);
        let got = RefSelector::Branch("main".into()).resolve(&refs).unwrap();
        assert_eq!(got.revision(), format!("main@sha1:{a}"));
        let got = RefSelector::Tag("v1.0.0".into()).resolve(&refs).unwrap();
        assert_eq!(got.revision(), format!("v1.0.0@sha1:{}", "c".repeat(40)));
        assert_eq!(got.want, oid('b'));
        let got = RefSelector::Semver("~1".into()).resolve(&refs).unwrap();
        assert_eq!(got.revision(), format!("v1.2.0@sha1:{}", "d".repeat(40)));
        let got = RefSelector::Name("refs/pull/4/head".into())
            .resolve(&refs)
            .unwrap();
        assert_eq!(
            got.revision(),
            format!("refs/pull/4/head@sha1:{}", "f".repeat(40))
        );
        let got = RefSelector::Commit {
            sha: "9".repeat(40),
            branch: None,
        }
        .resolve(&[])
        .unwrap();
        assert_eq!(got.revision(), format!("sha1:{}", "9".repeat(40)));
        let got = RefSelector::Commit {
            sha: "9".repeat(40),
            branch: Some("main".into()),
        }
        .resolve(&refs)
        .unwrap();
        assert_eq!(got.revision(), format!("main@sha1:{}", "9".repeat(40)));
    }

    #[test]
    fn resolution_errors() {
        let refs = vec![rref("refs/heads/main", oid('a'), None)];
        assert_eq!(
            RefSelector::Branch("dev".into()).resolve(&refs),
            Err(RefError::NotFound("refs/heads/dev".into()))
        );
        assert!(matches!(
            RefSelector::Commit {
                sha: "xyz".into(),
                branch: None
            }
            .resolve(&refs),
            Err(RefError::InvalidCommit(_))
        ));
        assert!(matches!(
            RefSelector::Semver(">=1".into()).resolve(&refs),
            Err(RefError::NoSemverMatch(_))
        ));
        assert!(matches!(
            RefSelector::Semver("!!".into()).resolve(&refs),
            Err(RefError::Semver(_))
        ));
    }

    #[test]
    fn revision_commit_accepts_all_formats() {
        let h = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(revision_commit(&format!("main@sha1:{h}")), Some(h));
        assert_eq!(revision_commit(&format!("sha1:{h}")), Some(h));
        assert_eq!(revision_commit(&format!("main/{h}")), Some(h));
        assert_eq!(revision_commit(h), Some(h));
        assert_eq!(revision_commit("main@sha1:zz"), None);
    }
}
