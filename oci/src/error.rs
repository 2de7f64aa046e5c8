//! The crate's error type.
//!
//! Messages are short and Flux-like. They never contain credentials, tokens or the bytes of an
//! `Authorization` header: registry error bodies are scrubbed of every secret the client holds
//! before they are kept (see `client::body`).

/// Everything that can go wrong talking to a registry or decoding what it sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OciError {
    /// HTTP 401 from the registry (or the token server), after the auth flow ran.
    #[error("{url}: {detail}")]
    Unauthorized { url: String, detail: String },
    /// HTTP 403 from the registry (or the token server).
    #[error("{url}: {detail}")]
    Forbidden { url: String, detail: String },
    /// HTTP 404: the repository, tag, manifest or blob does not exist. `what` names it and
    /// carries the registry's error message.
    #[error("{what}")]
    NotFound { what: String },
    /// Any other unexpected HTTP status. `body_excerpt` is the registry's `errors` messages,
    /// or `unexpected status code <code> <reason>[: <body text>]`.
    #[error("{url}: {body_excerpt}")]
    Status {
        code: u16,
        url: String,
        body_excerpt: String,
    },
    /// A request (or a blob download) did not finish in time.
    #[error("{what}: timed out")]
    Timeout { what: String },
    /// Connection-level failure (refused, reset, DNS, proxy).
    #[error("{0}")]
    Transport(String),
    /// TLS handshake or certificate problem, or unusable TLS material (CA, client cert/key).
    #[error("TLS error: {0}")]
    Tls(String),
    /// The bytes received do not hash to the digest that was asked for.
    #[error("digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch { expected: String, actual: String },
    /// A blob's length differs from its descriptor's `size` (or the `Content-Length` did).
    #[error("size mismatch for {what}: expected {expected} bytes, got {actual}")]
    SizeMismatch {
        what: String,
        expected: u64,
        actual: u64,
    },
    /// A response or a blob is larger than the configured limit.
    #[error("{what} exceeds the limit of {limit} bytes")]
    TooLarge { what: String, limit: u64 },
    /// More items (tags) than the configured limit.
    #[error("{what}: more than {limit}")]
    TooMany { what: String, limit: u64 },
    /// The reference points at something that is neither an image manifest nor an index.
    #[error("unsupported media type '{media_type}': not an OCI or Docker image manifest")]
    NotAManifest { media_type: String },
    /// A Docker schema 1 manifest (refused like go-containerregistry does).
    #[error("unsupported MediaType: \"{media_type}\": schema 1 manifests are not supported")]
    Schema1 { media_type: String },
    /// A registry or token server sent JSON that does not decode.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// The token exchange failed or was refused (bad realm, no token in the answer).
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The registry broke the distribution protocol (a malformed `Link` or
    /// `WWW-Authenticate` header, a pagination loop).
    #[error("registry protocol error: {0}")]
    Protocol(String),
    /// Invalid options (TLS material, proxy URL, a reference or digest with a bad format).
    #[error("{0}")]
    Config(String),
    /// Local I/O failure while writing a blob.
    #[error("{0}")]
    Io(String),
}

impl OciError {
    /// True for [`OciError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, OciError::NotFound { .. })
    }

    /// True for [`OciError::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, OciError::Timeout { .. })
    }
}
