//! Artifact storage: layout, URLs, atomic archiving under per-artifact locks, verification,
//! garbage collection and removal.
//!
//! Layout: `<root>/<lowercase kind>/<namespace>/<name>/<file>`, directories mode 0700,
//! GitRepository file `<commit hex>.tar.gz`. `Artifact::path` is relative to the root.

use std::collections::HashSet;
use std::fs::{self, DirBuilder};
use std::io::ErrorKind;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use super::archive::{Digest, DigestAlgorithm, package_to_file_with};
use super::error::ArtifactError;
use super::ignore::IgnoreRules;
use rflux_common::digest::VerifyError;

/// Prefix of the temporary files written while archiving (see [`Storage::archive`]).
pub const TEMP_PREFIX: &str = ".rflux-archive-";
/// Default `--artifact-retention-ttl`.
pub const DEFAULT_RETENTION_TTL: Duration = Duration::from_secs(60);
/// Default `--artifact-retention-records`.
pub const DEFAULT_RETENTION_RECORDS: usize = 2;
/// At most this many files are examined by one garbage collection (Flux's limit).
pub const GARBAGE_COUNT_LIMIT: usize = 1000;

/// The artifact status value (`meta.Artifact` without `metadata`); the controller maps it to the
/// API type.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Artifact {
    /// Relative path, e.g. `gitrepository/<ns>/<name>/<sha1>.tar.gz`.
    pub path: String,
    /// `http://<advertised host>/<path>`.
    pub url: String,
    pub revision: String,
    /// `<algo>:<hex>` of the file.
    pub digest: String,
    /// RFC 3339, second precision, UTC.
    pub last_update_time: String,
    /// Size in bytes of the file.
    pub size: u64,
}

/// Storage configuration (from the controller flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageOptions {
    /// `--storage-path`; must exist.
    pub root: PathBuf,
    /// Advertised host (see [`advertised_address`]); may carry an `http://`/`https://` scheme.
    pub hostname: String,
    /// `--artifact-retention-ttl`.
    pub retention_ttl: Duration,
    /// `--artifact-retention-records`.
    pub retention_records: usize,
    /// `--artifact-digest-algo`.
    pub digest_algorithm: DigestAlgorithm,
}

impl StorageOptions {
    /// Options with Flux's defaults for everything but the root and host.
    pub fn new(root: impl Into<PathBuf>, hostname: impl Into<String>) -> Self {
        StorageOptions {
            root: root.into(),
            hostname: hostname.into(),
            retention_ttl: DEFAULT_RETENTION_TTL,
            retention_records: DEFAULT_RETENTION_RECORDS,
            digest_algorithm: DigestAlgorithm::Sha256,
        }
    }
}

/// Computes the advertised host from `--storage-adv-addr` and `--storage-addr` as Flux does: a
/// non-empty advertised address wins; otherwise the listen address with an empty host replaced
/// by `localhost` and `0.0.0.0` replaced by `$HOSTNAME` (or the kernel host name).
pub fn advertised_address(storage_addr: &str, adv_addr: &str) -> Result<String, ArtifactError> {
    if !adv_addr.is_empty() {
        return Ok(adv_addr.to_string());
    }
    let bad = |reason: &str| ArtifactError::InvalidAddress {
        value: storage_addr.to_string(),
        reason: reason.to_string(),
    };
    let (host, port) = split_host_port(storage_addr).ok_or_else(|| bad("missing port"))?;
    let host = match host {
        "" => "localhost".to_string(),
        "0.0.0.0" => system_hostname().ok_or_else(|| bad("cannot determine the host name"))?,
        h => h.to_string(),
    };
    Ok(join_host_port(&host, port))
}

fn split_host_port(addr: &str) -> Option<(&str, &str)> {
    if let Some(rest) = addr.strip_prefix('[') {
        let (host, tail) = rest.split_once(']')?;
        let port = tail.strip_prefix(':')?;
        return Some((host, port));
    }
    let (host, port) = addr.rsplit_once(':')?;
    if host.contains(':') {
        return None;
    }
    Some((host, port))
}

fn join_host_port(host: &str, port: &str) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn system_hostname() -> Option<String> {
    if let Ok(h) = std::env::var("HOSTNAME")
        && !h.is_empty()
    {
        return Some(h);
    }
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
}

/// The artifact file name of a GitRepository revision: the bare commit hash plus `.tar.gz`
/// (`main@sha1:<hex>`, `sha1:<hex>`, legacy `main/<hex>` and bare `<hex>` are accepted).
pub fn git_artifact_file_name(revision: &str) -> String {
    let hash = revision
        .rsplit_once(':')
        .map(|(_, h)| h)
        .or_else(|| revision.rsplit_once('/').map(|(_, h)| h))
        .unwrap_or(revision);
    format!("{hash}.tar.gz")
}

fn check_component(what: &'static str, value: &str) -> Result<(), ArtifactError> {
    if value.is_empty()
        || value == "."
        || value == ".."
        || value.contains('/')
        || value.contains('\\')
        || value.contains('\0')
    {
        return Err(ArtifactError::InvalidComponent {
            what,
            value: value.to_string(),
        });
    }
    Ok(())
}

/// `<lowercase kind>/<namespace>/<name>/<file>`.
pub fn artifact_path(
    kind: &str,
    namespace: &str,
    name: &str,
    file_name: &str,
) -> Result<String, ArtifactError> {
    let kind = kind.to_ascii_lowercase();
    check_component("kind", &kind)?;
    check_component("namespace", namespace)?;
    check_component("name", name)?;
    check_component("file name", file_name)?;
    Ok(format!("{kind}/{namespace}/{name}/{file_name}"))
}

/// Now as RFC 3339 with second precision (the `metav1.Time` form).
pub fn now_rfc3339() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

#[derive(Debug, Default)]
struct KeyedLocks {
    held: Mutex<HashSet<PathBuf>>,
    released: Condvar,
}

impl KeyedLocks {
    fn guard(&self) -> MutexGuard<'_, HashSet<PathBuf>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An exclusive in-process lock on one artifact file, released on drop.
#[derive(Debug)]
pub struct ArtifactLock {
    locks: Arc<KeyedLocks>,
    key: PathBuf,
}

impl Drop for ArtifactLock {
    fn drop(&mut self) {
        let mut held = self.locks.guard();
        held.remove(&self.key);
        drop(held);
        self.locks.released.notify_all();
    }
}

/// Artifact storage rooted at a directory. Cheap to clone; clones share the lock table.
#[derive(Debug, Clone)]
pub struct Storage {
    root: PathBuf,
    hostname: String,
    retention_ttl: Duration,
    retention_records: usize,
    digest_algorithm: DigestAlgorithm,
    locks: Arc<KeyedLocks>,
    checked: Arc<super::checked::Checked>,
}

impl Storage {
    /// Creates the storage; the root must exist and be a directory.
    pub fn new(opts: StorageOptions) -> Result<Self, ArtifactError> {
        match fs::metadata(&opts.root) {
            Ok(md) if md.is_dir() => {}
            _ => return Err(ArtifactError::InvalidDir(opts.root)),
        }
        Ok(Storage {
            root: opts.root,
            hostname: opts.hostname,
            retention_ttl: opts.retention_ttl,
            retention_records: opts.retention_records,
            digest_algorithm: opts.digest_algorithm,
            locks: Arc::default(),
            checked: Arc::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn hostname(&self) -> &str {
        &self.hostname
    }

    pub fn digest_algorithm(&self) -> DigestAlgorithm {
        self.digest_algorithm
    }

    /// URL of a relative artifact path on the file server.
    pub fn url_for(&self, rel_path: &str) -> String {
        let rel = rel_path.trim_start_matches('/');
        if self.hostname.starts_with("http://") || self.hostname.starts_with("https://") {
            format!("{}/{}", self.hostname, rel)
        } else {
            format!("http://{}/{}", self.hostname, rel)
        }
    }

    /// Rewrites `artifact.url` from its path and the current host name (Flux does this on every
    /// reconcile so a host name change heals itself).
    pub fn set_artifact_url(&self, artifact: &mut Artifact) {
        if !artifact.path.is_empty() {
            artifact.url = self.url_for(&artifact.path);
        }
    }

    /// A new artifact (path, url, revision set; digest, size and time empty).
    pub fn new_artifact_for(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        revision: &str,
        file_name: &str,
    ) -> Result<Artifact, ArtifactError> {
        let path = artifact_path(kind, namespace, name, file_name)?;
        Ok(Artifact {
            url: self.url_for(&path),
            path,
            revision: revision.to_string(),
            ..Artifact::default()
        })
    }

    /// Joins a relative artifact path to the root, refusing anything that could leave it (a
    /// `..` above the root) or names no file (empty, the root itself, a NUL byte); an absolute
    /// path is taken as relative to the root.
    pub fn local_path(&self, rel_path: &str) -> Result<PathBuf, ArtifactError> {
        let invalid = || ArtifactError::InvalidPath(rel_path.to_string());
        if rel_path.contains('\0') {
            return Err(invalid());
        }
        let out = rflux_core::strict_join(&self.root, rel_path).map_err(|_| invalid())?;
        if out == self.root {
            return Err(invalid());
        }
        Ok(out)
    }

    /// Directory of `<kind>/<ns>/<name>`.
    pub fn object_dir(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<PathBuf, ArtifactError> {
        let kind = kind.to_ascii_lowercase();
        check_component("kind", &kind)?;
        check_component("namespace", namespace)?;
        check_component("name", name)?;
        Ok(self.root.join(kind).join(namespace).join(name))
    }

    /// Creates the artifact's directory (mode 0700).
    pub fn mkdir_artifact(&self, artifact: &Artifact) -> Result<PathBuf, ArtifactError> {
        let local = self.local_path(&artifact.path)?;
        let dir = local
            .parent()
            .ok_or_else(|| ArtifactError::InvalidPath(artifact.path.clone()))?
            .to_path_buf();
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| ArtifactError::io("create dir", &dir, e))?;
        Ok(dir)
    }

    /// Takes the in-process lock of the artifact's file, blocking while another holder has it.
    pub fn lock(&self, artifact: &Artifact) -> Result<ArtifactLock, ArtifactError> {
        let key = self.local_path(&artifact.path)?;
        let mut held = self.locks.guard();
        while held.contains(&key) {
            held = self
                .locks
                .released
                .wait(held)
                .unwrap_or_else(|e| e.into_inner());
        }
        held.insert(key.clone());
        Ok(ArtifactLock {
            locks: Arc::clone(&self.locks),
            key,
        })
    }

    /// Like [`Storage::lock`] but returns `None` instead of waiting.
    pub fn try_lock(&self, artifact: &Artifact) -> Result<Option<ArtifactLock>, ArtifactError> {
        let key = self.local_path(&artifact.path)?;
        let mut held = self.locks.guard();
        if held.contains(&key) {
            return Ok(None);
        }
        held.insert(key.clone());
        Ok(Some(ArtifactLock {
            locks: Arc::clone(&self.locks),
            key,
        }))
    }

    /// Archives `dir` to the artifact's file under its lock, atomically, and sets `digest`,
    /// `size` and `last_update_time`. Do not hold [`Storage::lock`] for the same artifact while
    /// calling this (it takes the lock itself). Blocking: call it from `spawn_blocking`.
    pub fn archive(
        &self,
        artifact: &mut Artifact,
        dir: &Path,
        rules: &IgnoreRules,
    ) -> Result<(), ArtifactError> {
        let local = self.local_path(&artifact.path)?;
        self.mkdir_artifact(artifact)?;
        let _lock = self.lock(artifact)?;
        let d = package_to_file_with(dir, &local, rules, self.digest_algorithm)?;
        artifact.digest = d.to_string();
        artifact.size = d.size;
        artifact.last_update_time = now_rfc3339();
        Ok(())
    }

    /// What the storage stage already checked (see [`super::checked`]).
    pub fn checked(&self) -> &super::checked::Checked {
        &self.checked
    }

    /// The stamp of the artifact's file, if it exists and is a regular file (not a symlink).
    pub fn artifact_stamp(&self, artifact: &Artifact) -> Option<super::checked::FileStamp> {
        let p = self.local_path(&artifact.path).ok()?;
        let md = fs::symlink_metadata(&p).ok()?;
        md.file_type()
            .is_file()
            .then(|| super::checked::FileStamp::of(&p, &md))
    }

    /// Whether the artifact's file exists and is a regular file (not a symlink).
    pub fn artifact_exists(&self, artifact: &Artifact) -> bool {
        self.local_path(&artifact.path)
            .ok()
            .and_then(|p| fs::symlink_metadata(p).ok())
            .is_some_and(|md| md.file_type().is_file())
    }

    /// Checks the file against `artifact.digest`.
    pub fn verify_artifact(&self, artifact: &Artifact) -> Result<(), ArtifactError> {
        if artifact.digest.is_empty() {
            return Err(ArtifactError::MissingDigest);
        }
        let expected = Digest::parse(&artifact.digest)
            .map_err(|e| ArtifactError::invalid_digest(&artifact.digest, e))?;
        let local = self.local_path(&artifact.path)?;
        let mut f = fs::File::open(&local).map_err(|e| ArtifactError::io("open", &local, e))?;
        expected.verify_reader(&mut f).map_err(|e| match e {
            VerifyError::Io(e) => ArtifactError::io("read", &local, e),
            VerifyError::Mismatch(m) => ArtifactError::DigestMismatch {
                expected: artifact.digest.clone(),
                actual: m.actual.to_string(),
            },
        })
    }

    /// Lists the files garbage collection would delete for the object owning `current`.
    pub fn garbage_files(
        &self,
        current: &Artifact,
        now: SystemTime,
    ) -> Result<Vec<PathBuf>, ArtifactError> {
        Ok(self.garbage_and_rest(current, now)?.0)
    }

    /// The garbage files, and whether the directory holds anything besides them and the
    /// current artifact (older artifacts still kept, archives in progress).
    fn garbage_and_rest(
        &self,
        current: &Artifact,
        now: SystemTime,
    ) -> Result<(Vec<PathBuf>, bool), ArtifactError> {
        let local = self.local_path(&current.path)?;
        let Some(dir) = local.parent() else {
            return Ok((Vec::new(), false));
        };
        let rd = match fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok((Vec::new(), false)),
            Err(e) => return Err(ArtifactError::io("read dir", dir, e)),
        };
        let mut files = Vec::new();
        let mut stale_temps = Vec::new();
        let mut temps = 0usize;
        for entry in rd.take(GARBAGE_COUNT_LIMIT) {
            let entry = entry.map_err(|e| ArtifactError::io("read dir", dir, e))?;
            let path = entry.path();
            let md =
                fs::symlink_metadata(&path).map_err(|e| ArtifactError::io("stat", &path, e))?;
            if !md.file_type().is_file() || path.extension().is_some_and(|e| e == "lock") {
                continue;
            }
            let mtime = md
                .modified()
                .map_err(|e| ArtifactError::io("stat", &path, e))?;
            let is_temp = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(TEMP_PREFIX));
            if is_temp {
                // An archive in progress is never touched; a leftover of a crash is, after the TTL.
                temps += 1;
                if now.duration_since(mtime).unwrap_or_default() > self.retention_ttl {
                    stale_temps.push(path);
                }
                continue;
            }
            files.push((path, mtime));
        }
        let mut garbage = select_garbage(
            &files,
            &local,
            now,
            self.retention_ttl,
            self.retention_records,
        );
        let others = files.iter().filter(|(p, _)| *p != local).count();
        let rest = others > garbage.len() || temps > stale_temps.len();
        garbage.extend(stale_temps);
        Ok((garbage, rest))
    }

    /// Deletes the garbage files of the object owning `current` (and their `.lock` siblings) and
    /// returns the deleted paths. Files whose lock is held are skipped.
    pub fn garbage_collect(&self, current: &Artifact) -> Result<Vec<PathBuf>, ArtifactError> {
        Ok(self.garbage_collect_rest(current)?.0)
    }

    /// [`Storage::garbage_collect`], also telling whether anything but the current artifact is
    /// left in the object's directory (while nothing is, a later collection has nothing to do).
    pub fn garbage_collect_rest(
        &self,
        current: &Artifact,
    ) -> Result<(Vec<PathBuf>, bool), ArtifactError> {
        let (garbage, mut rest) = self.garbage_and_rest(current, SystemTime::now())?;
        let mut deleted = Vec::new();
        let mut first_err = None;
        for file in garbage {
            let rel = file
                .strip_prefix(&self.root)
                .ok()
                .and_then(|r| r.to_str())
                .map(str::to_string);
            let probe = Artifact {
                path: rel.unwrap_or_default(),
                ..Artifact::default()
            };
            let _guard = match self.try_lock(&probe) {
                Ok(Some(g)) => Some(g),
                Ok(None) => {
                    // In use: left for a later collection.
                    rest = true;
                    continue;
                }
                Err(_) => None,
            };
            match fs::remove_file(&file) {
                Ok(()) => deleted.push(file.clone()),
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    first_err.get_or_insert(ArtifactError::io("remove", &file, e));
                }
            }
            let mut lock_file = file.into_os_string();
            lock_file.push(".lock");
            match fs::remove_file(&lock_file) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    first_err.get_or_insert(ArtifactError::io("remove", lock_file, e));
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok((deleted, rest)),
        }
    }

    /// Removes the whole `<kind>/<ns>/<name>` directory (finalizer). Returns whether it existed.
    pub fn remove_all(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<bool, ArtifactError> {
        let dir = self.object_dir(kind, namespace, name)?;
        self.checked.forget_dir(&dir);
        match fs::remove_dir_all(&dir) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(ArtifactError::io("remove dir", dir, e)),
        }
    }

    /// Removes every file of the object's directory except `keep` (e.g. after an artifact was
    /// re-created under another name). Returns the removed paths.
    pub fn remove_all_but(&self, keep: &Artifact) -> Result<Vec<PathBuf>, ArtifactError> {
        let local = self.local_path(&keep.path)?;
        let Some(dir) = local.parent() else {
            return Ok(Vec::new());
        };
        let rd = match fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ArtifactError::io("read dir", dir, e)),
        };
        let mut keep_lock = local.clone().into_os_string();
        keep_lock.push(".lock");
        let mut removed = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| ArtifactError::io("read dir", dir, e))?;
            let path = entry.path();
            if path == local || path.as_os_str() == keep_lock {
                continue;
            }
            let ft = entry
                .file_type()
                .map_err(|e| ArtifactError::io("stat", &path, e))?;
            if ft.is_dir() {
                continue;
            }
            fs::remove_file(&path).map_err(|e| ArtifactError::io("remove", &path, e))?;
            removed.push(path);
        }
        Ok(removed)
    }
}

/// Time limit of [`Storage::garbage_collect_async`] (Flux's reconcileStorage uses 5s).
pub const GARBAGE_COLLECT_TIMEOUT: Duration = Duration::from_secs(5);

impl Storage {
    /// [`Storage::archive`] on tokio's blocking pool; returns the updated artifact.
    pub async fn archive_async(
        &self,
        mut artifact: Artifact,
        dir: PathBuf,
        rules: IgnoreRules,
    ) -> Result<Artifact, ArtifactError> {
        let st = self.clone();
        tokio::task::spawn_blocking(move || {
            st.archive(&mut artifact, &dir, &rules)?;
            Ok(artifact)
        })
        .await
        .map_err(|e| ArtifactError::Background(e.to_string()))?
    }

    /// [`Storage::garbage_collect`] on tokio's blocking pool, abandoned (with
    /// [`ArtifactError::Timeout`]) after [`GARBAGE_COLLECT_TIMEOUT`].
    pub async fn garbage_collect_async(
        &self,
        current: &Artifact,
    ) -> Result<Vec<PathBuf>, ArtifactError> {
        Ok(self.garbage_collect_rest_async(current).await?.0)
    }

    /// [`Storage::garbage_collect_rest`] on the blocking pool, bounded in time.
    pub async fn garbage_collect_rest_async(
        &self,
        current: &Artifact,
    ) -> Result<(Vec<PathBuf>, bool), ArtifactError> {
        let st = self.clone();
        let current = current.clone();
        let task = tokio::task::spawn_blocking(move || st.garbage_collect_rest(&current));
        match tokio::time::timeout(GARBAGE_COLLECT_TIMEOUT, task).await {
            Ok(joined) => joined.map_err(|e| ArtifactError::Background(e.to_string()))?,
            Err(_) => Err(ArtifactError::Timeout(GARBAGE_COLLECT_TIMEOUT)),
        }
    }
}

/// Chooses which files to delete (pure). `files` are the object's artifact files with their
/// mtimes, `current` the current artifact's local path (never chosen). First every file older
/// than `ttl`; then, if more than `keep` files would remain, the oldest others until at most
/// `keep` remain (the current artifact counts towards `keep`).
pub fn select_garbage(
    files: &[(PathBuf, SystemTime)],
    current: &Path,
    now: SystemTime,
    ttl: Duration,
    keep: usize,
) -> Vec<PathBuf> {
    let mut sorted: Vec<&(PathBuf, SystemTime)> = files.iter().collect();
    sorted.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    let mut garbage: Vec<PathBuf> = Vec::new();
    let mut chosen = vec![false; sorted.len()];
    for (i, (path, mtime)) in sorted.iter().enumerate() {
        let age = now.duration_since(*mtime).unwrap_or_default();
        if path.as_path() != current && age > ttl {
            chosen[i] = true;
            garbage.push(path.clone());
        }
    }
    let mut remaining = sorted.len() - garbage.len();
    for (i, (path, _)) in sorted.iter().enumerate() {
        if remaining <= keep {
            break;
        }
        if chosen[i] || path.as_path() == current {
            continue;
        }
        chosen[i] = true;
        garbage.push(path.clone());
        remaining -= 1;
    }
    garbage
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn files(n: u64) -> Vec<(PathBuf, SystemTime)> {
        (0..n)
            .map(|i| (PathBuf::from(format!("/s/f{i}")), t(1000 + i)))
            .collect()
    }

    #[test]
    fn select_keeps_n_newest_and_current() {
        let fs = files(5);
        // Nothing expired (ttl huge): keep the 2 newest, and f4 is current.
        let g = select_garbage(
            &fs,
            Path::new("/s/f4"),
            t(1010),
            Duration::from_secs(3600),
            2,
        );
        assert_eq!(
            g,
            vec![PathBuf::from("/s/f0"), "/s/f1".into(), "/s/f2".into()]
        );
        // The current artifact is the oldest one: it is never deleted.
        let g = select_garbage(
            &fs,
            Path::new("/s/f0"),
            t(1010),
            Duration::from_secs(3600),
            2,
        );
        assert_eq!(
            g,
            vec![PathBuf::from("/s/f1"), "/s/f2".into(), "/s/f3".into()]
        );
    }

    #[test]
    fn select_removes_expired_even_below_n() {
        let fs = files(3);
        // ttl 5s at t=1007: f0 (age 7) and f1 (age 6) are expired; f2 is current.
        let g = select_garbage(&fs, Path::new("/s/f2"), t(1007), Duration::from_secs(5), 10);
        assert_eq!(g, vec![PathBuf::from("/s/f0"), "/s/f1".into()]);
        // Everything expired but current survives.
        let g = select_garbage(&fs, Path::new("/s/f1"), t(5000), Duration::from_secs(5), 10);
        assert_eq!(g, vec![PathBuf::from("/s/f0"), "/s/f2".into()]);
    }

    #[test]
    fn select_combines_ttl_and_records() {
        let fs = files(6);
        // At t=1004 with ttl 3s only f0 (age 4) is expired; then the oldest go until 2 remain.
        let g = select_garbage(&fs, Path::new("/s/f5"), t(1004), Duration::from_secs(3), 2);
        assert_eq!(
            g,
            vec![
                PathBuf::from("/s/f0"),
                "/s/f1".into(),
                "/s/f2".into(),
                "/s/f3".into()
            ]
        );
    }

    #[test]
    fn advertised_addresses() {
        assert_eq!(advertised_address(":9090", "").unwrap(), "localhost:9090");
        assert_eq!(
            advertised_address(":9090", "source-controller.flux-system.svc.cluster.local.")
                .unwrap(),
            "source-controller.flux-system.svc.cluster.local."
        );
        assert_eq!(
            advertised_address("10.0.0.1:80", "").unwrap(),
            "10.0.0.1:80"
        );
        assert_eq!(advertised_address("[::1]:9090", "").unwrap(), "[::1]:9090");
        assert!(advertised_address("nope", "").is_err());
        let h = advertised_address("0.0.0.0:9090", "").unwrap();
        assert!(h.ends_with(":9090") && !h.starts_with("0.0.0.0"));
    }

    #[test]
    fn file_names_and_paths() {
        assert_eq!(git_artifact_file_name("main@sha1:abc123"), "abc123.tar.gz");
        assert_eq!(git_artifact_file_name("sha1:abc123"), "abc123.tar.gz");
        assert_eq!(git_artifact_file_name("main/abc123"), "abc123.tar.gz");
        assert_eq!(git_artifact_file_name("abc123"), "abc123.tar.gz");
        assert_eq!(
            artifact_path("GitRepository", "ns", "n", "x.tar.gz").unwrap(),
            "gitrepository/ns/n/x.tar.gz"
        );
        assert!(artifact_path("GitRepository", "..", "n", "x").is_err());
        assert!(artifact_path("GitRepository", "ns", "a/b", "x").is_err());
        assert!(artifact_path("GitRepository", "ns", "n", "").is_err());
    }

    #[test]
    fn rfc3339_has_second_precision() {
        let s = now_rfc3339();
        assert!(s.ends_with('Z') && !s.contains('.'), "{s}");
        assert_eq!(s.len(), "2026-01-01T00:00:00Z".len());
    }
}
