//! cosign signature verification for OCIRepository `spec.verify` (`provider: cosign` with a
//! `secretRef`), the `SourceVerified` condition's source.
//!
//! Pure: no I/O. The caller reads the verification Secret, fetches the signature manifest and
//! the payload blobs from the registry (bounded by the limits below), and hands the bytes in.
//!
//! What Flux does (source-controller `internal/oci/cosign/cosign.go`, snapshot 39b711b1, cosign
//! v3 library), and what we do:
//! * Every Secret key ending in `.pub` is a PEM public key (`cryptoutils.UnmarshalPEMToPublicKey`:
//!   `PUBLIC KEY` SPKI or `RSA PUBLIC KEY` PKCS#1), checked with `signature.LoadVerifier(key,
//!   SHA256)`: ECDSA over the SHA-256 of the payload whatever the curve, RSA PKCS#1 v1.5 with
//!   SHA-256, pure Ed25519. We accept ECDSA P-256 and P-384, Ed25519 and RSA (up to 4096 bits);
//!   other curves are refused by name. A bad key fails the whole verification (Flux too, as soon
//!   as its random map order reaches it; we read all keys first, so the failure is deterministic).
//! * With a public key Flux sets `IgnoreTlog` and `Offline`: no Rekor, no timestamps, no
//!   certificate checks. We do the same.
//! * Flux first looks for cosign v3 sigstore bundles attached as OCI referrers (`GetBundles`,
//!   the referrers API or its `sha256-<hex>` tag fallback) and verifies those when it finds
//!   any; otherwise it falls back to the classic `sha256-<hex>.sig` tag. This module verifies
//!   the classic format (`classic.rs`) and the bundle format (`bundle.rs`).
//! * Flux sets no `ClaimVerifier`, so for the classic format its cosign library checks only the
//!   signature over the payload bytes, not which image the payload names. We also require the
//!   payload's `critical.image.docker-manifest-digest` to be the verified digest and
//!   `critical.type` to be `cosign container image signature` (what `cosign verify` checks and
//!   what cosign writes), so a signature copied from another image does not verify here.

mod bundle;
mod classic;
mod keys;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

pub use bundle::{
    BUNDLE_ARTIFACT_TYPE, BundleLayer, MAX_BUNDLE_BYTES, MAX_REFERRERS, REFERRERS_INDEX_MEDIA_TYPE,
    bundle_layer, referrer_manifests, referrers_tag, verify_bundles,
};
pub use classic::{
    Candidate, MAX_PAYLOAD_BYTES, MAX_SIGNATURE_LAYERS, MAX_SIGNATURE_MANIFEST_BYTES,
    SIGNATURE_ANNOTATION, SIGNATURE_MEDIA_TYPE, SIGNATURE_TYPE, signature_candidates,
    signature_tag, verify,
};
pub use keys::{CosignKey, KEY_SUFFIX, KeyAlgorithm, MAX_KEYS, public_keys};

/// The key that verified a signature, and which signature it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedBy {
    /// The Secret data key of the public key (`cosign.pub`).
    pub key: String,
    /// The digest of the verified blob: the signature payload layer (classic format) or the
    /// bundle layer (bundle format).
    pub signature_digest: String,
}

/// Why a verification did not succeed. The messages carry the Secret key or the digest they
/// are about; [`flux_no_match_message`] gives Flux's condition text for a failed match.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("no public keys found in the verification Secret (keys ending in '{KEY_SUFFIX}')")]
    NoPublicKeys,
    #[error("too many public keys in the verification Secret: {count} (at most {MAX_KEYS})")]
    TooManyKeys { count: usize },
    #[error("invalid public key '{key}': {reason}")]
    InvalidKey { key: String, reason: String },
    #[error("unsupported public key '{key}': {algorithm}")]
    UnsupportedKey { key: String, algorithm: String },
    #[error("invalid manifest digest '{digest}': expected sha256:<64 lowercase hex digits>")]
    InvalidDigest { digest: String },
    #[error("invalid signature manifest: {0}")]
    InvalidSignatureManifest(String),
    #[error("invalid referrers index: {0}")]
    InvalidReferrersIndex(String),
    #[error("invalid bundle manifest: {0}")]
    InvalidBundleManifest(String),
    #[error("too many signatures: {count} layers (at most {max})")]
    TooManySignatures { count: usize, max: usize },
    #[error("no matching signatures were found: {}", reasons.join("; "))]
    NoMatchingSignatures { reasons: Vec<String> },
}

/// Flux's failure text for `spec.verify` with keys: `no matching signatures were found for
/// '<repo>@<digest>'` (the condition message wraps it in `failed to verify the signature using
/// provider 'cosign': …`).
pub fn flux_no_match_message(reference: &str) -> String {
    format!("no matching signatures were found for '{reference}'")
}

/// The loop both signature formats share: refuses empty key sets and too many signatures,
/// then returns the first signature `check` accepts (naming the key and the signature's
/// digest), or every reason, labelled by `label`, when none is accepted.
pub(crate) fn first_verified<'k, T>(
    keys: &'k [CosignKey],
    signatures: &[T],
    max: usize,
    digest_of: impl Fn(&T) -> &str,
    label: &str,
    check: impl Fn(&T) -> Result<&'k CosignKey, String>,
) -> Result<VerifiedBy, VerifyError> {
    if keys.is_empty() {
        return Err(VerifyError::NoPublicKeys);
    }
    if signatures.len() > max {
        return Err(VerifyError::TooManySignatures {
            count: signatures.len(),
            max,
        });
    }
    let mut reasons = Vec::new();
    for s in signatures {
        let digest = digest_of(s);
        match check(s) {
            Ok(key) => {
                return Ok(VerifiedBy {
                    key: key.name().to_string(),
                    signature_digest: digest.to_string(),
                });
            }
            Err(reason) => reasons.push(format!("{label}{}: {reason}", short(digest))),
        }
    }
    if reasons.is_empty() {
        let what = if label.is_empty() {
            "signature"
        } else {
            label.trim()
        };
        reasons.push(format!("no {what}s found"));
    }
    Err(VerifyError::NoMatchingSignatures { reasons })
}

/// `sha256:0123456789ab` for messages.
fn short(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

/// The hex part of a `sha256:<hex>` manifest digest, refusing anything else (go-containerregistry
/// only knows sha256 digests).
pub(crate) fn sha256_hex(digest: &str) -> Result<&str, VerifyError> {
    let invalid = || VerifyError::InvalidDigest {
        digest: digest.chars().take(100).collect(),
    };
    let hex = digest.strip_prefix("sha256:").ok_or_else(invalid)?;
    if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(hex)
    } else {
        Err(invalid())
    }
}

/// `sha256:<hex>` of some bytes.
pub(crate) fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}
