//! Materialises a fetched commit (and included artifacts) into a directory for packaging.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use rflux_git::{
    FetchedCommit, GitError, ObjectId, Remote, SparseFilter, WalkEntry, fetch_commit,
    parse_gitmodules, submodule_for_path,
};

use super::auth::url_redacted;

/// Why a checkout or include copy failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("failed to fetch submodule '{path}' from '{url}': {source}")]
    Submodule {
        path: String,
        url: String,
        #[source]
        source: GitError,
    },
    #[error("no URL for submodule path '{0}' in .gitmodules")]
    SubmoduleUrl(String),
    #[error("checkout task failed: {0}")]
    Task(String),
    #[error("sparse checkout dir '{0}' does not exist")]
    SparseMissing(String),
    #[error("illegal path '{0}'")]
    IllegalPath(String),
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> CheckoutError {
    let context = context.into();
    move |source| CheckoutError::Io { context, source }
}

/// Joins a relative, slash-separated path from a tree or an archive under `root`, refusing one
/// that climbs above it.
fn join_under(root: &Path, rel: &str) -> Result<PathBuf, CheckoutError> {
    rflux_core::strict_join(root, rel).map_err(|_| CheckoutError::IllegalPath(rel.to_string()))
}

/// A submodule (gitlink) met while writing a tree: its path and the commit it pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gitlink {
    pub path: String,
    pub oid: ObjectId,
}

/// Writes the commit's tree under `dir`: regular files with their executable bit, and an empty
/// directory for each submodule (like a checkout without `--recurse-submodules`); symlinks are
/// skipped (the archive skips them anyway). Returns the submodules found, in tree order.
pub fn write_tree(
    fetched: &FetchedCommit,
    dir: &Path,
    sparse: &[String],
) -> Result<Vec<Gitlink>, CheckoutError> {
    let filter = if sparse.is_empty() {
        SparseFilter::all()
    } else {
        SparseFilter::new(sparse)
    };
    let mut gitlinks = Vec::new();
    fetched.walk_tree::<CheckoutError, _>(&filter, |entry| match entry {
        WalkEntry::File {
            path, mode, data, ..
        } => {
            if mode == 0o120000 {
                return Ok(());
            }
            let target = join_under(dir, path)?;
            if let Some(parent) = target.parent() {
                fs::create_dir_all(parent).map_err(io_err(format!("create dir for {path}")))?;
            }
            fs::write(&target, data).map_err(io_err(format!("write {path}")))?;
            if mode & 0o111 != 0 {
                set_executable(&target)?;
            }
            Ok(())
        }
        WalkEntry::Submodule { path, oid } => {
            let target = join_under(dir, path)?;
            fs::create_dir_all(&target).map_err(io_err(format!("create dir {path}")))?;
            gitlinks.push(Gitlink {
                path: path.to_string(),
                oid,
            });
            Ok(())
        }
    })?;
    for s in sparse {
        let trimmed = s.trim().trim_start_matches("./");
        if trimmed.is_empty() || trimmed == "." {
            continue;
        }
        if !join_under(dir, trimmed)?.is_dir() {
            return Err(CheckoutError::SparseMissing(s.clone()));
        }
    }
    Ok(gitlinks)
}

/// How deep nested submodules are followed (go-git's default recursion depth, as Flux uses).
pub const MAX_SUBMODULE_DEPTH: usize = 10;

/// Writes `fetched` under `dir` (see [`write_tree`]); with `recurse_submodules`, also fetches
/// each submodule from the URL `.gitmodules` gives it (resolved against `remote`'s URL) at the
/// commit its gitlink pins, and writes it in place, recursively up to
/// [`MAX_SUBMODULE_DEPTH`] levels. Credentials follow only to the same endpoint
/// ([`Remote::for_submodule`]).
pub async fn checkout(
    fetched: FetchedCommit,
    remote: &Remote,
    dir: PathBuf,
    sparse: Vec<String>,
    recurse_submodules: bool,
) -> Result<(), CheckoutError> {
    checkout_level(fetched, remote.clone(), dir, sparse, recurse_submodules, 0).await
}

fn checkout_level(
    fetched: FetchedCommit,
    remote: Remote,
    dir: PathBuf,
    sparse: Vec<String>,
    recurse: bool,
    depth: usize,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), CheckoutError>> + Send>> {
    Box::pin(async move {
        let (fetched, gitlinks, dir) =
            tokio::task::spawn_blocking(move || -> Result<_, CheckoutError> {
                let gitlinks = write_tree(&fetched, &dir, &sparse)?;
                Ok((fetched, gitlinks, dir))
            })
            .await
            .map_err(|e| CheckoutError::Task(e.to_string()))??;
        if !recurse || gitlinks.is_empty() {
            return Ok(());
        }
        if depth >= MAX_SUBMODULE_DEPTH {
            tracing::info!(
                depth,
                "submodule recursion depth reached; nested submodules are left empty"
            );
            return Ok(());
        }
        let configs = match fetched.root_file(".gitmodules")? {
            Some(data) => parse_gitmodules(data)?,
            None => Vec::new(),
        };
        drop(fetched);
        for link in gitlinks {
            let url = submodule_for_path(&configs, &link.path)
                .and_then(|c| c.url.clone())
                .ok_or_else(|| CheckoutError::SubmoduleUrl(link.path.clone()))?;
            let sub_remote = remote.for_submodule(&url)?;
            let shown = url_redacted(&sub_remote.url);
            tracing::debug!(path = %link.path, url = %shown, commit = %link.oid, "fetching submodule");
            let sub = fetch_commit(&sub_remote, &link.oid)
                .await
                .map_err(|source| CheckoutError::Submodule {
                    path: link.path.clone(),
                    url: shown.clone(),
                    source,
                })?;
            let target = join_under(&dir, &link.path)?;
            checkout_level(sub, sub_remote, target, Vec::new(), true, depth + 1).await?;
        }
        Ok(())
    })
}

#[cfg(unix)]
fn set_executable(p: &Path) -> Result<(), CheckoutError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(p, fs::Permissions::from_mode(0o755))
        .map_err(io_err(format!("chmod {}", p.display())))
}

#[cfg(not(unix))]
fn set_executable(_: &Path) -> Result<(), CheckoutError> {
    Ok(())
}

/// Extracts the entries of the `.tar.gz` at `archive` that lie under `from_path` into
/// `dest_root/to_path` (Flux's include copy). Only regular files and directories are copied.
pub fn copy_include(
    archive: &Path,
    from_path: &str,
    dest_root: &Path,
    to_path: &str,
) -> Result<(), CheckoutError> {
    let dest = join_under(dest_root, to_path)?;
    // Replace what the checkout had at toPath (Flux copies over it).
    if dest != dest_root && dest.exists() {
        fs::remove_dir_all(&dest).map_err(io_err(format!("clear {to_path}")))?;
    }
    fs::create_dir_all(&dest).map_err(io_err(format!("create {to_path}")))?;
    let from: Vec<String> = Path::new(from_path)
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let file = fs::File::open(archive).map_err(io_err(format!("open {}", archive.display())))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(io::BufReader::new(file)));
    let entries = tar.entries().map_err(io_err("read include archive"))?;
    let mut found = from.is_empty();
    for entry in entries {
        let mut entry = entry.map_err(io_err("read include archive entry"))?;
        let path = entry
            .path()
            .map_err(io_err("include entry path"))?
            .into_owned();
        let mut comps = Vec::new();
        for c in path.components() {
            match c {
                Component::Normal(p) => comps.push(p.to_string_lossy().into_owned()),
                Component::CurDir => {}
                _ => return Err(CheckoutError::IllegalPath(path.display().to_string())),
            }
        }
        if comps.len() < from.len() || comps[..from.len()] != from[..] {
            continue;
        }
        found = true;
        let rel = comps[from.len()..].join("/");
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            fs::create_dir_all(join_under(&dest, &rel)?)
                .map_err(io_err(format!("create {rel}")))?;
        } else if kind.is_file() && !rel.is_empty() {
            let target = join_under(&dest, &rel)?;
            if let Some(parent) = target.parent() {
                fs::create_dir_all(parent).map_err(io_err(format!("create dir for {rel}")))?;
            }
            let mode = entry.header().mode().unwrap_or(0o600);
            let mut out = fs::File::create(&target).map_err(io_err(format!("create {rel}")))?;
            io::copy(&mut entry, &mut out).map_err(io_err(format!("write {rel}")))?;
            if mode & 0o111 != 0 {
                set_executable(&target)?;
            }
        }
    }
    if !found {
        return Err(CheckoutError::IllegalPath(format!(
            "fromPath '{from_path}' not found in included artifact"
        )));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::artifact::{IgnoreRules, package_dir};

    #[test]
    fn join_under_refuses_climbing_above_the_root() {
        let root = Path::new("/r");
        assert_eq!(join_under(root, "a/./b").unwrap(), Path::new("/r/a/b"));
        assert_eq!(join_under(root, "/abs").unwrap(), Path::new("/r/abs"));
        let err = join_under(root, "a/../../x").unwrap_err();
        assert_eq!(err.to_string(), "illegal path 'a/../../x'");
    }

    #[test]
    fn include_copies_subtree() {
        let src = tempfile::tempdir().unwrap();
        fs::create_dir_all(src.path().join("deploy/app")).unwrap();
        fs::write(src.path().join("deploy/app/cm.yaml"), "a: 1\n").unwrap();
        fs::write(src.path().join("README"), "r").unwrap();
        let out = tempfile::tempdir().unwrap();
        let tgz = out.path().join("a.tar.gz");
        let mut f = fs::File::create(&tgz).unwrap();
        package_dir(src.path(), &IgnoreRules::none(), &mut f).unwrap();
        drop(f);
        let dest = tempfile::tempdir().unwrap();
        copy_include(&tgz, "deploy", dest.path(), "lib").unwrap();
        assert_eq!(
            fs::read_to_string(dest.path().join("lib/app/cm.yaml")).unwrap(),
            "a: 1\n"
        );
        assert!(!dest.path().join("lib/README").exists());
        copy_include(&tgz, "", dest.path(), "all").unwrap();
        assert!(dest.path().join("all/README").exists());
        assert!(copy_include(&tgz, "nope", dest.path(), "x").is_err());
        assert!(copy_include(&tgz, "", dest.path(), "../escape").is_err());
    }
}
