//! The errors of the registry fixtures.

use std::path::PathBuf;
use std::time::Duration;

/// What can go wrong starting or talking to a test registry.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("the registry binary {path} is missing: build it with `e2e/registry/build.sh`")]
    BinaryMissing { path: PathBuf },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("creating the test PKI: {0:#}")]
    Pki(anyhow::Error),
    #[error("making the htpasswd line: {0}")]
    Htpasswd(String),
    #[error("the registry exited before it was ready ({status}):\n{log}")]
    Exited { status: String, log: String },
    #[error("the registry did not answer GET /v2/ within {timeout:?} (last: {last}):\n{log}")]
    NotReady {
        timeout: Duration,
        last: String,
        log: String,
    },
    #[error("{what}: {source}")]
    Http {
        what: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{what}: HTTP {status}: {body}")]
    Status {
        what: String,
        status: u16,
        body: String,
    },
    #[error("{what}: {message}")]
    Protocol { what: String, message: String },
    #[error("{what}: more than {limit} bytes")]
    TooLarge { what: String, limit: usize },
    #[error("the flux CLI is not built ({path}): run `make flux-cli` (e2e/flux/build.sh flux)")]
    FluxMissing { path: PathBuf },
    #[error("{0}")]
    Flux(String),
}

impl RegistryError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> RegistryError {
        RegistryError::Io {
            what: what.into(),
            source,
        }
    }
}

pub(super) type Result<T, E = RegistryError> = std::result::Result<T, E>;
