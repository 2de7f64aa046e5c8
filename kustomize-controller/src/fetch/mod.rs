//! Source artifact download, the fetch stage of a Kustomization: HTTP GET with retries,
//! digest verification, safe extraction of the gzip tarball ([`untar`]), a cache keyed by
//! digest, and per-reconcile working copies ([`workdir`]).
//!
//! [`ArtifactFetcher::fetch`] returns `cache_dir/<digest-hex>/`, the unpacked artifact. An
//! artifact whose digest is already cached is neither downloaded nor unpacked again. The
//! returned directory is shared by every reconcile of the same revision: callers must treat it
//! as read-only. The reconcile's build reads it in place, pinned against eviction
//! ([`ArtifactFetcher::fetch_pinned`]); a caller that must write copies it first
//! ([`ArtifactFetcher::fetch_into`], into a directory from [`ArtifactFetcher::work_dir`]).
//!
//! Compatibility with Flux's fetcher: 404 is [`FetchError::NotFound`] and not retried;
//! connection errors, 429 and 5xx (except 501) are retried with exponential backoff between
//! `retry_wait_min` and `retry_wait_max`; a bare hex digest means sha256; the mismatch message
//! is Flux's. Unlike Flux (which has no limits here), the download size is bounded by
//! [`FetcherOptions::max_download_bytes`], and extraction by [`UntarLimits`].

use std::collections::HashMap;
use std::fs;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::StatusCode;
use rflux_common::digest::Verifier;
use rflux_core::error_chain;

mod error;
mod pin;
pub mod untar;
pub mod workdir;

pub use error::FetchError;
pub use pin::PinnedArtifact;
pub use rflux_common::digest::{Digest, DigestAlgorithm};
pub use untar::{UntarError, UntarLimits, UntarStats, copy_tree, safe_entry_path, untar};
pub use workdir::{RUN_DIR_PREFIX, sweep_stale_runs};

use error::io_err;
use pin::Pins;
use untar::remove_tree;
use workdir::RunDir;

/// Flux's `--http-retry` default.
pub const DEFAULT_RETRIES: u32 = 9;

/// Temporary download files and extraction dirs older than this are leftovers of a crash.
const STALE_TEMP_AGE: Duration = Duration::from_secs(3600);

/// Settings of an [`ArtifactFetcher`].
#[derive(Debug, Clone)]
pub struct FetcherOptions {
    /// Where unpacked artifacts live (`<cache_dir>/<digest-hex>/`); created on demand.
    pub cache_dir: PathBuf,
    /// Retries after the first attempt (Flux `--http-retry`, default 9).
    pub retries: u32,
    /// First backoff (Flux: 5s); it doubles per retry.
    pub retry_wait_min: Duration,
    /// Backoff ceiling (Flux: 30s).
    pub retry_wait_max: Duration,
    /// Connection timeout of one attempt.
    pub connect_timeout: Duration,
    /// Longest silence while reading a response.
    pub read_timeout: Duration,
    /// Largest artifact accepted (`None` = unlimited, as in Flux).
    pub max_download_bytes: Option<u64>,
    /// Extraction bounds.
    pub untar: UntarLimits,
    /// Unpacked artifacts kept in the cache (least recently used ones are removed). Keep it
    /// above the number of concurrent reconciles.
    pub keep: usize,
    /// Entries used more recently than this are never evicted, even beyond `keep` (so that a
    /// reconcile still reading an older revision is not pulled out from under).
    pub evict_grace: Duration,
    /// Replaces `host[:port]` of every artifact URL (Flux: `SOURCE_CONTROLLER_LOCALHOST`).
    pub host_override: Option<String>,
    /// Where the fetcher's run directory of working copies is made (see [`workdir`]); the
    /// run directories that earlier, ended processes left here are removed by
    /// [`ArtifactFetcher::new`].
    pub work_parent: PathBuf,
}

impl FetcherOptions {
    /// Flux's defaults with the cache in `cache_dir`.
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        FetcherOptions {
            cache_dir: cache_dir.into(),
            retries: DEFAULT_RETRIES,
            retry_wait_min: Duration::from_secs(5),
            retry_wait_max: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(120),
            max_download_bytes: Some(1 << 30),
            untar: UntarLimits::default(),
            keep: 16,
            evict_grace: Duration::from_secs(600),
            host_override: None,
            work_parent: std::env::temp_dir(),
        }
    }

    /// Reads `SOURCE_CONTROLLER_LOCALHOST` into [`FetcherOptions::host_override`].
    pub fn with_env_host_override(mut self) -> Self {
        self.host_override = std::env::var("SOURCE_CONTROLLER_LOCALHOST")
            .ok()
            .filter(|h| !h.is_empty());
        self
    }
}

/// Downloads, verifies, unpacks and caches source artifacts. Cheap to share (`Arc`).
pub struct ArtifactFetcher {
    opts: FetcherOptions,
    client: reqwest::Client,
    /// One lock per digest in flight, so concurrent fetches of one artifact download it once.
    inflight: InflightMap,
    /// The run directory of the working copies, made by the first [`ArtifactFetcher::work_dir`].
    run_dir: Mutex<Option<RunDir>>,
    /// Cache entries being read in place ([`ArtifactFetcher::fetch_pinned`]).
    pins: Pins,
}

impl std::fmt::Debug for ArtifactFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactFetcher")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

/// Installs the ring provider as rustls' process default unless one is set.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer is fine: a provider is set either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

type InflightMap = Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>;

/// A per-digest lock taken from the in-flight map; the map entry goes away with the last user.
struct InflightSlot<'a> {
    map: &'a InflightMap,
    key: String,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl<'a> InflightSlot<'a> {
    fn new(map: &'a InflightMap, key: &str) -> Self {
        let lock = map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(key.to_string())
            .or_default()
            .clone();
        InflightSlot {
            map,
            key: key.to_string(),
            lock,
        }
    }
}

impl Drop for InflightSlot<'_> {
    fn drop(&mut self) {
        let mut map = self
            .map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Our clone plus the map's: nobody else is waiting.
        if map
            .get(&self.key)
            .is_some_and(|l| Arc::strong_count(l) == 2)
        {
            map.remove(&self.key);
        }
    }
}

enum Attempt {
    Done,
    Retry(String, Option<Duration>),
}

impl ArtifactFetcher {
    /// A fetcher with its own HTTP client (rustls with the ring provider). Working copies that
    /// earlier runs of this controller left in [`FetcherOptions::work_parent`] (a process killed
    /// mid-reconcile) are removed first ([`sweep_stale_runs`]).
    pub fn new(opts: FetcherOptions) -> Result<Self, FetchError> {
        let swept = sweep_stale_runs(&opts.work_parent);
        if swept > 0 {
            tracing::info!(
                count = swept,
                parent = %opts.work_parent.display(),
                "removed working copies of earlier runs"
            );
        }
        ensure_crypto_provider();
        let client = reqwest::Client::builder()
            .user_agent(concat!("kustomize-controller/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(opts.connect_timeout)
            .read_timeout(opts.read_timeout)
            .build()
            .map_err(|e| FetchError::Client(e.to_string()))?;
        Ok(ArtifactFetcher {
            opts,
            client,
            inflight: Mutex::new(HashMap::new()),
            run_dir: Mutex::new(None),
            pins: Pins::default(),
        })
    }

    /// A new, empty directory for one reconcile's working copy (see [`workdir`]), removed when
    /// the value is dropped. A copy left by a killed process is removed by the next
    /// [`ArtifactFetcher::new`].
    pub fn work_dir(&self) -> Result<tempfile::TempDir, FetchError> {
        let mut run_dir = self
            .run_dir
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let parent = &self.opts.work_parent;
        let run = match &mut *run_dir {
            Some(run) => run,
            slot => {
                slot.insert(RunDir::create(parent).map_err(io_err("create work dir in", parent))?)
            }
        };
        run.work_dir()
            .map_err(io_err("create work dir in", run.path()))
    }

    /// [`ArtifactFetcher::work_dir`] holding a private copy of the artifact
    /// ([`ArtifactFetcher::fetch_into`]).
    pub async fn fetch_to_work_dir(
        &self,
        url: &str,
        digest: &str,
    ) -> Result<tempfile::TempDir, FetchError> {
        let dir = self.work_dir()?;
        self.fetch_into(url, digest, dir.path()).await?;
        Ok(dir)
    }

    /// The settings.
    pub fn options(&self) -> &FetcherOptions {
        &self.opts
    }

    /// Where the artifact with this digest is (or would be) unpacked.
    pub fn cache_path(&self, digest: &Digest) -> PathBuf {
        self.opts.cache_dir.join(digest.hex())
    }

    /// Returns the unpacked artifact for `url` and `digest`, downloading and extracting it
    /// only when this digest is not cached yet.
    pub async fn fetch(&self, url: &str, digest: &str) -> Result<PathBuf, FetchError> {
        let digest =
            Digest::parse_allow_bare(digest).map_err(|e| FetchError::invalid_digest(digest, &e))?;
        let url = self.effective_url(url)?;
        let dir = self.cache_path(&digest);
        if dir.is_dir() {
            touch(&dir);
            return Ok(dir);
        }
        let result = {
            // Dropped (and the map entry released) even if this future is cancelled.
            let slot = InflightSlot::new(&self.inflight, digest.hex());
            let _guard = slot.lock.lock().await;
            if dir.is_dir() {
                touch(&dir);
                Ok(dir)
            } else {
                self.download_and_unpack(&url, &digest, dir).await
            }
        };
        let dir = result?;
        self.evict(&dir);
        Ok(dir)
    }

    /// [`ArtifactFetcher::fetch`], the entry held from eviction while the returned value lives:
    /// for readers that never write into the tree (the build), no copy is made. If the entry
    /// was evicted between the fetch and the pin, it is fetched once more.
    pub async fn fetch_pinned(
        &self,
        url: &str,
        digest: &str,
    ) -> Result<PinnedArtifact, FetchError> {
        let mut last = None;
        for _ in 0..2 {
            let dir = self.fetch(url, digest).await?;
            let pinned = self.pins.pin(&dir);
            if dir.is_dir() {
                return Ok(pinned);
            }
            last = Some(dir);
        }
        let dir = last.unwrap_or_default();
        Err(io_err("read cached artifact", &dir)(io::Error::from(
            io::ErrorKind::NotFound,
        )))
    }

    /// [`ArtifactFetcher::fetch`], then copies the unpacked tree into `dest` (created if
    /// missing) so the caller may modify it. If the cache entry is evicted while being copied,
    /// the artifact is fetched and copied once more.
    pub async fn fetch_into(&self, url: &str, digest: &str, dest: &Path) -> Result<(), FetchError> {
        let mut last = None;
        for _ in 0..2 {
            let src = self.fetch(url, digest).await?;
            let dst = dest.to_path_buf();
            let copied = tokio::task::spawn_blocking(move || copy_tree(&src, &dst))
                .await
                .map_err(|e| FetchError::Task(e.to_string()))?;
            match copied {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => last = Some(e),
                Err(e) => return Err(io_err("copy artifact into", dest)(e)),
            }
        }
        Err(io_err("copy artifact into", dest)(last.unwrap_or_else(
            || io::Error::from(io::ErrorKind::NotFound),
        )))
    }

    fn effective_url(&self, url: &str) -> Result<reqwest::Url, FetchError> {
        let bad = |reason: String| FetchError::InvalidUrl {
            url: url.to_string(),
            reason,
        };
        let mut u = reqwest::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        if !matches!(u.scheme(), "http" | "https") {
            return Err(bad(format!("unsupported scheme '{}'", u.scheme())));
        }
        if let Some(host) = &self.opts.host_override {
            let (h, port) = match host.rsplit_once(':') {
                Some((h, p)) if !h.is_empty() => match p.parse::<u16>() {
                    Ok(p) => (h, Some(p)),
                    Err(_) => (host.as_str(), None),
                },
                _ => (host.as_str(), None),
            };
            u.set_host(Some(h))
                .map_err(|e| bad(format!("host override '{host}': {e}")))?;
            if port.is_some() {
                u.set_port(port)
                    .map_err(|()| bad(format!("host override '{host}': cannot set the port")))?;
            }
        }
        Ok(u)
    }

    async fn download_and_unpack(
        &self,
        url: &reqwest::Url,
        digest: &Digest,
        dir: PathBuf,
    ) -> Result<PathBuf, FetchError> {
        let cache = &self.opts.cache_dir;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(cache)
            .map_err(io_err("create cache directory", cache))?;
        let mut file = tempfile::Builder::new()
            .prefix(".download-")
            .tempfile_in(cache)
            .map_err(io_err("create temp file in", cache))?;
        self.download(url, digest, &mut file).await?;
        let limits = self.opts.untar;
        let cache = cache.clone();
        tokio::task::spawn_blocking(move || unpack(file, &cache, &dir, &limits))
            .await
            .map_err(|e| FetchError::Task(e.to_string()))?
    }

    /// GETs `url` into `file` with retries, and checks the body against `digest`.
    async fn download(
        &self,
        url: &reqwest::Url,
        digest: &Digest,
        file: &mut tempfile::NamedTempFile,
    ) -> Result<(), FetchError> {
        let path = file.path().to_path_buf();
        let out = file.as_file_mut();
        let attempts = self.opts.retries.saturating_add(1);
        let mut last = String::new();
        for attempt in 0..attempts {
            if attempt > 0 {
                tracing::debug!(url = %url, attempt, error = %last, "retrying artifact download");
            }
            out.set_len(0)
                .and_then(|()| out.seek(SeekFrom::Start(0)).map(|_| ()))
                .map_err(|e| FetchError::Io {
                    op: "truncate",
                    path: path.clone(),
                    source: e,
                })?;
            let mut verifier = digest.verifier();
            match self.attempt(url, out, &path, &mut verifier).await? {
                Attempt::Done => return Ok(verifier.finish().map(|_| ())?),
                Attempt::Retry(msg, retry_after) => {
                    last = msg;
                    if attempt + 1 < attempts {
                        tokio::time::sleep(self.backoff(attempt, retry_after)).await;
                    }
                }
            }
        }
        Err(FetchError::Download {
            url: url.to_string(),
            attempts,
            last,
        })
    }

    fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let max = self.opts.retry_wait_max;
        if let Some(d) = retry_after {
            return d.min(max);
        }
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.opts
            .retry_wait_min
            .checked_mul(factor)
            .unwrap_or(max)
            .min(max)
    }

    async fn attempt(
        &self,
        url: &reqwest::Url,
        out: &mut fs::File,
        path: &Path,
        verifier: &mut Verifier,
    ) -> Result<Attempt, FetchError> {
        let mut resp = match self.client.get(url.clone()).send().await {
            Ok(r) => r,
            Err(e) => return Ok(Attempt::Retry(error_chain(&e.without_url()), None)),
        };
        let status = resp.status();
        if status == StatusCode::NOT_FOUND {
            return Err(FetchError::NotFound {
                url: url.to_string(),
            });
        }
        if status == StatusCode::TOO_MANY_REQUESTS
            || (status.is_server_error() && status != StatusCode::NOT_IMPLEMENTED)
        {
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            return Ok(Attempt::Retry(
                format!("unexpected HTTP status {}", status_text(status)),
                retry_after,
            ));
        }
        if status != StatusCode::OK {
            return Err(FetchError::Status {
                url: url.to_string(),
                status: status_text(status),
            });
        }
        let limit = self.opts.max_download_bytes;
        if let (Some(limit), Some(len)) = (limit, resp.content_length())
            && len > limit
        {
            return Err(FetchError::TooLarge { limit });
        }
        let mut total: u64 = 0;
        loop {
            let chunk = match resp.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => return Ok(Attempt::Retry(error_chain(&e.without_url()), None)),
            };
            total = total.saturating_add(chunk.len() as u64);
            if let Some(limit) = limit
                && total > limit
            {
                return Err(FetchError::TooLarge { limit });
            }
            verifier.update(&chunk);
            out.write_all(&chunk).map_err(|e| FetchError::Io {
                op: "write",
                path: path.to_path_buf(),
                source: e,
            })?;
        }
        out.flush().map_err(|e| FetchError::Io {
            op: "flush",
            path: path.to_path_buf(),
            source: e,
        })?;
        Ok(Attempt::Done)
    }

    /// Removes the least recently used unpacked artifacts beyond `keep` (never `current`, nor
    /// one used within `evict_grace`), and leftovers of interrupted downloads or extractions
    /// older than an hour.
    fn evict(&self, current: &Path) {
        let Ok(rd) = fs::read_dir(&self.opts.cache_dir) else {
            return;
        };
        let now = SystemTime::now();
        let mut entries: Vec<(SystemTime, PathBuf)> = Vec::new();
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let path = e.path();
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            let modified = meta.modified().unwrap_or(UNIX_EPOCH);
            let age = now.duration_since(modified).unwrap_or_default();
            if name.starts_with(".download-") || name.starts_with(".unpack-") {
                if age > STALE_TEMP_AGE {
                    let _ = if meta.is_dir() {
                        remove_tree(&path)
                    } else {
                        fs::remove_file(&path)
                    };
                }
                continue;
            }
            if !meta.is_dir() || path == current || !is_digest_dir_name(&name) {
                continue;
            }
            entries.push((modified, path));
        }
        // `current` counts as one of the kept entries.
        let keep_others = self.opts.keep.saturating_sub(1);
        if entries.len() <= keep_others {
            return;
        }
        entries.sort_by_key(|e| std::cmp::Reverse(e.0));
        for (modified, path) in entries.into_iter().skip(keep_others) {
            if now.duration_since(modified).unwrap_or_default() < self.opts.evict_grace {
                continue;
            }
            self.pins.remove_unpinned(&path, |path| {
                if let Err(e) = remove_tree(path) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot evict cached artifact");
                }
            });
        }
    }
}

/// Whether `name` is the hex of a digest (a cache entry).
fn is_digest_dir_name(name: &str) -> bool {
    [
        DigestAlgorithm::Sha256,
        DigestAlgorithm::Sha384,
        DigestAlgorithm::Sha512,
    ]
    .into_iter()
    .any(|a| Digest::new(a, name).is_ok())
}

/// Extracts into a temporary directory next to `dir`, then renames it into place. If another
/// fetch won the race the existing directory is kept.
fn unpack(
    mut file: tempfile::NamedTempFile,
    cache: &Path,
    dir: &Path,
    limits: &UntarLimits,
) -> Result<PathBuf, FetchError> {
    file.as_file_mut()
        .seek(SeekFrom::Start(0))
        .map_err(io_err("seek", file.path()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".unpack-")
        .tempdir_in(cache)
        .map_err(io_err("create temp dir in", cache))?;
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o700))
        .map_err(io_err("chmod", tmp.path()))?;
    untar(io::BufReader::new(file.as_file()), tmp.path(), limits)?;
    let staged = tmp.keep();
    match fs::rename(&staged, dir) {
        Ok(()) => {
            touch(dir);
            Ok(dir.to_path_buf())
        }
        Err(e) => {
            let _ = remove_tree(&staged);
            if dir.is_dir() {
                Ok(dir.to_path_buf())
            } else {
                Err(FetchError::Io {
                    op: "rename unpacked artifact to",
                    path: dir.to_path_buf(),
                    source: e,
                })
            }
        }
    }
}

/// Marks a cache entry as recently used (its mtime orders eviction).
fn touch(dir: &Path) {
    if let Ok(f) = fs::File::open(dir) {
        let _ = f.set_modified(SystemTime::now());
    }
}

fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(r) => format!("{} {r}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn digest_errors_keep_flux_messages() {
        let hex = "a".repeat(64);
        let parse =
            |s: &str| Digest::parse_allow_bare(s).map_err(|e| FetchError::invalid_digest(s, &e));
        let d = parse(&hex).unwrap();
        assert_eq!(d.algorithm(), DigestAlgorithm::Sha256);
        assert_eq!(d.to_string(), format!("sha256:{hex}"));
        assert_eq!(
            parse(&format!("sha512:{}", "0".repeat(128)))
                .unwrap()
                .algorithm(),
            DigestAlgorithm::Sha512
        );
        assert!(matches!(parse(""), Err(FetchError::EmptyDigest)));
        assert!(matches!(
            parse(&format!("md5:{hex}")),
            Err(FetchError::InvalidDigest {
                reason: "unsupported digest algorithm",
                ..
            })
        ));
        assert_eq!(
            parse("sha256:abc").unwrap_err().to_string(),
            "failed to verify archive: failed to parse digest 'sha256:abc': invalid checksum digest length"
        );
        assert_eq!(
            parse(&"A".repeat(64)).unwrap_err().to_string(),
            format!(
                "failed to verify archive: failed to parse digest 'sha256:{}': invalid checksum digest format",
                "A".repeat(64)
            )
        );
    }

    #[test]
    fn cache_entry_names_are_digest_hex() {
        assert!(is_digest_dir_name(&"a".repeat(64)));
        assert!(is_digest_dir_name(&"0".repeat(96)));
        assert!(is_digest_dir_name(&"f".repeat(128)));
        assert!(!is_digest_dir_name(&"a".repeat(63)));
        assert!(!is_digest_dir_name(&"A".repeat(64)));
        assert!(!is_digest_dir_name(".download-x"));
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut o = FetcherOptions::new("/nonexistent");
        o.retry_wait_min = Duration::from_secs(5);
        o.retry_wait_max = Duration::from_secs(30);
        let f = ArtifactFetcher::new(o).unwrap();
        assert_eq!(f.backoff(0, None), Duration::from_secs(5));
        assert_eq!(f.backoff(1, None), Duration::from_secs(10));
        assert_eq!(f.backoff(2, None), Duration::from_secs(20));
        assert_eq!(f.backoff(3, None), Duration::from_secs(30));
        assert_eq!(f.backoff(40, None), Duration::from_secs(30));
        assert_eq!(
            f.backoff(0, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
    }

    #[test]
    fn host_override_replaces_host_and_port() {
        let mut o = FetcherOptions::new("/nonexistent");
        o.host_override = Some("localhost:9090".into());
        let f = ArtifactFetcher::new(o).unwrap();
        let u = f
            .effective_url("http://source-controller.flux-system.svc.cluster.local./gitrepository/a/b/c.tar.gz")
            .unwrap();
        assert_eq!(
            u.as_str(),
            "http://localhost:9090/gitrepository/a/b/c.tar.gz"
        );
        assert!(f.effective_url("ftp://x/y").is_err());
        assert!(f.effective_url("not a url").is_err());
    }
}
