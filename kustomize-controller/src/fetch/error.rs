//! What [`super::ArtifactFetcher`] can fail with.

use std::io;
use std::path::{Path, PathBuf};

use rflux_common::digest::{DigestError, DigestMismatch};

use super::untar::UntarError;

/// Everything [`super::ArtifactFetcher::fetch`] can fail with.
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

impl FetchError {
    /// `digest` (an `artifact.digest`, bare hex meaning sha256) did not parse. The message
    /// shows it with its algorithm.
    pub(super) fn invalid_digest(digest: &str, e: &DigestError) -> Self {
        if matches!(e, DigestError::Empty) {
            return FetchError::EmptyDigest;
        }
        let digest = if digest.contains(':') {
            digest.to_string()
        } else {
            format!("sha256:{digest}")
        };
        FetchError::InvalidDigest {
            digest,
            reason: e.reason(),
        }
    }
}

impl From<DigestMismatch> for FetchError {
    fn from(m: DigestMismatch) -> Self {
        FetchError::DigestMismatch {
            expected: m.expected.to_string(),
            actual: m.actual.to_string(),
        }
    }
}

pub(super) fn io_err<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> FetchError + 'a {
    move |source| FetchError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}
