//! Source artifact download (flux-spec §4.3 step 3): HTTP GET with retries, digest
//! verification, safe extraction of the gzip tarball, and a cache keyed by digest.
//!
//! [`ArtifactFetcher::fetch`] returns `cache_dir/<digest-hex>/`, the unpacked artifact. An
//! artifact whose digest is already cached is neither downloaded nor unpacked again. The
//! returned directory is shared by every reconcile of the same revision: callers must treat it
//! as read-only and copy it (see [`copy_tree`]) before generating a `kustomization.yaml` in it.
//!
//! Compatibility with Flux's fetcher (`fluxcd/pkg/http/fetch` + `fluxcd/pkg/tar`): 404 is
//! [`FetchError::NotFound`] and not retried; connection errors, 429 and 5xx (except 501) are
//! retried with exponential backoff between `retry_wait_min` and `retry_wait_max`; a bare hex
//! digest means sha256; the mismatch message is Flux's; symlinks in the archive are skipped;
//! absolute names, `..` components and backslashes are rejected; directories get at least 0700;
//! file mtimes are clamped to the extraction time. Unlike Flux (which has no limits here),
//! download size, unpacked size and entry count are bounded by [`FetcherOptions`], and hard
//! links, devices and FIFOs are refused.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::StatusCode;

/// Flux's `--http-retry` default.
pub const DEFAULT_RETRIES: u32 = 9;

/// Temporary download files and extraction dirs older than this are leftovers of a crash.
const STALE_TEMP_AGE: Duration = Duration::from_secs(3600);

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

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

/// Everything [`ArtifactFetcher::fetch`] can fail with.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The artifact URL (or the host override) is not usable.
    #[error("invalid artifact URL '{url}': {reason}")]
    InvalidUrl { url: String, reason: String },
    /// The server answered 404 (Flux's `ErrFileNotFound`; same text). The controller reports
    /// it as "Source is not ready, artifact not found".
    #[error("file not found")]
    NotFound { url: String },
    /// The server answered with another non-200 status that is not retried.
    #[error("failed to download archive from {url} (status: {status})")]
    Status { url: String, status: String },
    /// Every attempt failed with a retryable error.
    #[error("failed to download archive: GET {url} giving up after {attempts} attempt(s): {last}")]
    Download {
        url: String,
        attempts: u32,
        last: String,
    },
    /// The body is larger than `max_download_bytes`.
    #[error("artifact is greater than the max download size of {limit} bytes")]
    TooLarge { limit: u64 },
    /// No digest was given.
    #[error("failed to verify archive: empty digest")]
    EmptyDigest,
    /// The digest is malformed or uses an unsupported algorithm.
    #[error("failed to verify archive: failed to parse digest '{digest}': {reason}")]
    InvalidDigest {
        digest: String,
        reason: &'static str,
    },
    /// The downloaded bytes do not have the expected digest.
    #[error(
        "failed to verify archive: computed digest doesn't match provided '{expected}' (check whether file size exceeds max download size)"
    )]
    DigestMismatch {
        /// The expected digest, `<algo>:<hex>`.
        expected: String,
        /// The digest of what was downloaded.
        actual: String,
    },
    /// Extraction failed.
    #[error("failed to extract archive: {0}")]
    Untar(#[from] UntarError),
    /// Local file system trouble (cache directory, temporary files).
    #[error("{op} '{path}': {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    /// The extraction task died.
    #[error("extraction task failed: {0}")]
    Task(String),
}

impl FetchError {
    /// True for [`FetchError::NotFound`] (Flux's `ErrFileNotFound`).
    pub fn is_not_found(&self) -> bool {
        matches!(self, FetchError::NotFound { .. })
    }
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FetchError + 'a {
    move |source| FetchError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

// ---------------------------------------------------------------------------------------------
// Digests
// ---------------------------------------------------------------------------------------------

pub use rflux_common::digest::DigestAlgorithm;
use rflux_common::digest::Hasher;

/// A parsed `artifact.digest`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArtifactDigest {
    pub algorithm: DigestAlgorithm,
    /// Lower-case hex.
    pub hex: String,
}

impl std::fmt::Display for ArtifactDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.algorithm.as_str(), self.hex)
    }
}

impl ArtifactDigest {
    /// Parses `<algo>:<hex>`; a bare hex string is a sha256 digest (as in Flux).
    pub fn parse(digest: &str) -> Result<ArtifactDigest, FetchError> {
        if digest.is_empty() {
            return Err(FetchError::EmptyDigest);
        }
        let normalized = if digest.contains(':') {
            digest.to_string()
        } else {
            format!("sha256:{digest}")
        };
        let bad = |reason| FetchError::InvalidDigest {
            digest: normalized.clone(),
            reason,
        };
        let (algo, hex) = normalized
            .split_once(':')
            .ok_or_else(|| bad("invalid checksum digest format"))?;
        let algorithm: DigestAlgorithm = algo
            .parse()
            .map_err(|_| bad("unsupported digest algorithm"))?;
        if !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(bad("invalid checksum digest format"));
        }
        if hex.len() != algorithm.hex_len() {
            return Err(bad("invalid checksum digest length"));
        }
        Ok(ArtifactDigest {
            algorithm,
            hex: hex.to_string(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Safe untar
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Fetcher
// ---------------------------------------------------------------------------------------------

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
    /// A fetcher with its own HTTP client (rustls with the ring provider).
    pub fn new(opts: FetcherOptions) -> Result<Self, FetchError> {
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
        })
    }

    /// The settings.
    pub fn options(&self) -> &FetcherOptions {
        &self.opts
    }

    /// Where the artifact with this digest is (or would be) unpacked.
    pub fn cache_path(&self, digest: &ArtifactDigest) -> PathBuf {
        self.opts.cache_dir.join(&digest.hex)
    }

    /// Returns the unpacked artifact for `url` and `digest`, downloading and extracting it
    /// only when this digest is not cached yet.
    pub async fn fetch(&self, url: &str, digest: &str) -> Result<PathBuf, FetchError> {
        let digest = ArtifactDigest::parse(digest)?;
        let url = self.effective_url(url)?;
        let dir = self.cache_path(&digest);
        if dir.is_dir() {
            touch(&dir);
            return Ok(dir);
        }
        let result = {
            // Dropped (and the map entry released) even if this future is cancelled.
            let slot = InflightSlot::new(&self.inflight, &digest.hex);
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
        digest: &ArtifactDigest,
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
        let actual = self.download(url, digest.algorithm, &mut file).await?;
        if actual != digest.hex {
            return Err(FetchError::DigestMismatch {
                expected: digest.to_string(),
                actual: format!("{}:{actual}", digest.algorithm.as_str()),
            });
        }
        let limits = self.opts.untar;
        let cache = cache.clone();
        tokio::task::spawn_blocking(move || unpack(file, &cache, &dir, &limits))
            .await
            .map_err(|e| FetchError::Task(e.to_string()))?
    }

    /// GETs `url` into `out` with retries; returns the hex digest of the body.
    async fn download(
        &self,
        url: &reqwest::Url,
        algorithm: DigestAlgorithm,
        file: &mut tempfile::NamedTempFile,
    ) -> Result<String, FetchError> {
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
            let mut hasher = algorithm.hasher();
            match self.attempt(url, out, &path, &mut hasher).await? {
                Attempt::Done => return Ok(hasher.finish_hex()),
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
        hasher: &mut Hasher,
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
            hasher.update(&chunk);
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
            if let Err(e) = remove_tree(&path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot evict cached artifact");
            }
        }
    }
}

fn is_digest_dir_name(name: &str) -> bool {
    matches!(name.len(), 64 | 96 | 128)
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
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

/// `remove_dir_all` that first makes directories writable (archives may carry 0500 dirs).
fn remove_tree(path: &Path) -> io::Result<()> {
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

fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(r) => format!("{} {r}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let m = s.to_string();
        if parts.last() != Some(&m) {
            parts.push(m);
        }
        cur = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn digest_parsing() {
        let hex = "a".repeat(64);
        let d = ArtifactDigest::parse(&hex).unwrap();
        assert_eq!(d.algorithm, DigestAlgorithm::Sha256);
        assert_eq!(d.to_string(), format!("sha256:{hex}"));
        let d = ArtifactDigest::parse(&format!("sha512:{}", "0".repeat(128))).unwrap();
        assert_eq!(d.algorithm, DigestAlgorithm::Sha512);
        assert!(matches!(
            ArtifactDigest::parse(""),
            Err(FetchError::EmptyDigest)
        ));
        assert!(matches!(
            ArtifactDigest::parse(&format!("md5:{hex}")),
            Err(FetchError::InvalidDigest {
                reason: "unsupported digest algorithm",
                ..
            })
        ));
        assert!(ArtifactDigest::parse("sha256:abc").is_err());
        assert!(ArtifactDigest::parse(&"A".repeat(64)).is_err());
    }

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
