//! A pull-only OCI registry client (distribution API v2) for the OCIRepository reconciler:
//! tags, manifest digests, manifests (indexes resolved to linux/amd64), signature manifests,
//! and blobs streamed to disk with their size and digest verified while they arrive.
//!
//! It follows go-containerregistry, what Flux uses: the URL parsing and the
//! HTTPS-then-HTTP heuristic for local registries ([`url`]), the Kubernetes pull-secret
//! keychain ([`auth`]), the `GET /v2/` ping and the Basic/Bearer token flows ([`client`]).
//! Unlike Flux, every byte and every request is bounded ([`Limits`],
//! [`transport::TransportConfig::timeout`]): a registry is hostile input.

pub mod auth;
pub(crate) mod challenge;
pub mod client;
pub mod error;
pub mod manifest;
pub mod transport;
pub mod url;

pub use auth::{Credentials, Keychain, KeychainError};
pub use client::Client;
pub use error::OciError;
pub use manifest::{Descriptor, Manifest, Platform};
pub use transport::{Proxy, TransportConfig};
pub use url::{Repository, Scheme, UrlError};

/// Byte and count bounds on what a registry may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest manifest or index accepted (default 4 MiB).
    pub max_manifest_bytes: u64,
    /// Most tags [`Client::list_tags`] collects over all pages (default 100 000).
    pub max_tags: usize,
    /// Largest token-server answer (default 64 KiB).
    pub max_token_bytes: u64,
    /// How much of an error body is read for its message (default 4 KiB).
    pub max_error_body: usize,
    /// Largest single page of a tag list (default 16 MiB).
    pub max_tag_page_bytes: u64,
    /// `n` asked for per tag page; 0 sends none and lets the registry decide (default 0, like
    /// go-containerregistry).
    pub tags_page_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_manifest_bytes: 4 << 20,
            max_tags: 100_000,
            max_token_bytes: 64 << 10,
            max_error_body: 4 << 10,
            max_tag_page_bytes: 16 << 20,
            tags_page_size: 0,
        }
    }
}
