//! Typed errors of the artifact module.

use std::io;
use std::path::PathBuf;

use rflux_common::digest::DigestError;

/// Everything that can go wrong while packaging, storing or serving artifacts.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The directory to archive does not exist or is not a directory.
    #[error("invalid dir path: {0}")]
    InvalidDir(PathBuf),

    /// An I/O operation on `path` failed.
    #[error("{op} '{path}': {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// Writing the archive stream failed (the sink, not a source file).
    #[error("writing archive: {0}")]
    Write(#[source] io::Error),

    /// A file changed size while it was being archived.
    #[error("file '{path}' changed while archiving: expected {expected} bytes, read {actual}")]
    FileChanged {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },

    /// A relative artifact path tried to leave the storage root or was otherwise unusable.
    #[error("invalid artifact path '{0}'")]
    InvalidPath(String),

    /// A kind, namespace, name or file name is not a single safe path component.
    #[error("invalid {what} '{value}': must be a single non-empty path component")]
    InvalidComponent { what: &'static str, value: String },

    /// A digest string could not be parsed.
    #[error("failed to parse artifact digest '{0}'")]
    InvalidDigest(String),

    /// The digest algorithm is not supported.
    #[error("unsupported digest algorithm '{0}' (supported: sha256, sha384, sha512)")]
    UnsupportedAlgorithm(String),

    /// The stored file does not have the digest recorded in status.
    #[error("computed digest doesn't match '{expected}' (got '{actual}')")]
    DigestMismatch { expected: String, actual: String },

    /// The artifact has no digest to verify against.
    #[error("artifact has no digest")]
    MissingDigest,

    /// A listen address or advertised address was not usable.
    #[error("invalid address '{value}': {reason}")]
    InvalidAddress { value: String, reason: String },

    /// A blocking task could not complete (panicked or was cancelled).
    #[error("background task failed: {0}")]
    Background(String),

    /// An operation exceeded its time limit.
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),

    /// The HTTP file server failed.
    #[error("file server: {0}")]
    Server(#[source] io::Error),
}

impl From<io::Error> for ArtifactError {
    /// Errors of the archive sink (compression or output), not of a source file.
    fn from(e: io::Error) -> Self {
        ArtifactError::Write(e)
    }
}

impl ArtifactError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        ArtifactError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

impl ArtifactError {
    /// `value` (an `artifact.digest`) did not parse: an unknown algorithm is reported by name,
    /// anything else as [`ArtifactError::InvalidDigest`].
    pub fn invalid_digest(value: &str, e: DigestError) -> Self {
        match e {
            DigestError::Unsupported(u) => u.into(),
            _ => ArtifactError::InvalidDigest(value.to_string()),
        }
    }
}

impl From<rflux_common::digest::UnsupportedDigestAlgorithm> for ArtifactError {
    fn from(e: rflux_common::digest::UnsupportedDigestAlgorithm) -> Self {
        ArtifactError::UnsupportedAlgorithm(e.0)
    }
}
