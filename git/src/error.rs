//! The crate's error type.

use std::fmt;

/// Everything that can go wrong talking to a Git remote or decoding what it sent.
///
/// Messages never contain passwords, tokens, private keys or URL userinfo.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The remote refused the credentials (HTTP 401/403, SSH "Permission denied").
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The repository or the requested ref/object does not exist on the remote.
    #[error("not found: {0}")]
    NotFound(String),
    /// TLS handshake or certificate problem, or unusable TLS material (CA, client cert/key).
    #[error("TLS error: {0}")]
    Tls(String),
    /// The SSH host key was not in known_hosts, or did not match.
    #[error("SSH host key verification failed: {0}")]
    HostKey(String),
    /// The remote sent something that does not follow the Git protocol, or a malformed object/pack.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The remote reported an error (`ERR` packet or side-band channel 3).
    #[error("remote error: {0}")]
    Remote(String),
    /// A configured limit was exceeded (see [`crate::Limits`]: pack size, object count, object
    /// size, decoded bytes, advertisement size), or a remote sent more than the client accepts.
    #[error("limit exceeded: {0}")]
    Limit(String),
    /// The remote URL or the options are invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Transport-level failure (connection refused, broken pipe, HTTP error status, ssh exited).
    #[error("transport error: {0}")]
    Transport(String),
    /// Local I/O failure.
    #[error("I/O error: {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The operation did not finish within the configured timeout.
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
}

impl GitError {
    pub(crate) fn protocol(msg: impl fmt::Display) -> Self {
        GitError::Protocol(msg.to_string())
    }

    /// A malformed pack or delta.
    pub(crate) fn corrupt_pack(msg: impl fmt::Display) -> Self {
        GitError::Protocol(format!("corrupt pack: {msg}"))
    }

    pub(crate) fn io(context: impl fmt::Display, source: std::io::Error) -> Self {
        GitError::Io {
            context: context.to_string(),
            source,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = GitError> = std::result::Result<T, E>;
