//! What the OCIRepository stages share: one reconcile's [`Run`], the resolved reference, and
//! the storage directory. A leaf: the stage files all read it, it reads none of them.

use rflux_common::api::ocirepository::{OciRepository, OciRepositorySpec};

/// Storage directory (lowercase kind).
pub const KIND_DIR: &str = "ocirepository";

/// One reconcile of one OCIRepository.
pub(crate) type Run<'a> = crate::source::Run<'a, OciRepository>;

impl Run<'_> {
    pub(crate) fn spec(&self) -> &OciRepositorySpec {
        &self.obj.spec
    }
}

/// The resolved reference.
pub(crate) struct Resolved {
    /// The manifest digest (`sha256:<hex>`).
    pub digest: String,
    /// `<tag>@<digest>`, or the digest for a digest reference.
    pub revision: String,
    /// `<host>/<path>:<tag>` or `<host>/<path>@<digest>`, for messages (Flux's reference).
    pub reference: String,
}

/// The URL without its `oci://` scheme, as go-containerregistry prints references.
pub(crate) fn bare_url(url: &str) -> &str {
    url.strip_prefix("oci://").unwrap_or(url)
}
