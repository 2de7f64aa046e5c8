//! The classic cosign signature format: an OCI image manifest tagged `sha256-<hex>.sig` in the
//! signed artifact's repository, one layer per signature. Each layer's blob is the "simple
//! signing" JSON payload that names the signed manifest digest; the layer annotation
//! `dev.cosignproject.cosign/signature` holds the base64 signature over the payload bytes.

use serde::Deserialize;

use super::{CosignKey, VerifiedBy, VerifyError, first_verified, sha256_digest, sha256_hex};

/// Media type of a signature payload layer.
pub const SIGNATURE_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// `critical.type` of a cosign container image signature payload.
pub const SIGNATURE_TYPE: &str = "cosign container image signature";
/// Largest signature manifest read. A manifest of [`MAX_SIGNATURE_LAYERS`] layers with their
/// annotations fits well under it; the caller bounds its download to this.
pub const MAX_SIGNATURE_MANIFEST_BYTES: usize = 4 * 1024 * 1024;
/// More layers than this and the signature manifest is refused (cosign refuses over 1000). Each
/// `cosign sign` of the same digest adds a layer.
pub const MAX_SIGNATURE_LAYERS: usize = 256;
/// Largest payload blob fetched and checked (cosign's payloads are a few hundred bytes plus the
/// `-a key=value` annotations; cosign itself allows 128 MiB).
pub const MAX_PAYLOAD_BYTES: u64 = 64 * 1024;
/// Longest base64 signature annotation considered (an RSA-8192 signature is 1368 characters).
const MAX_SIGNATURE_B64: usize = 16 * 1024;

/// One signature layer to fetch and check: its payload blob and the signature over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// `sha256:<hex>` of the payload blob, fetch it as `/v2/<repo>/blobs/<payload_digest>`.
    pub payload_digest: String,
    /// The payload size the manifest declares (at most [`MAX_PAYLOAD_BYTES`]).
    pub payload_size: u64,
    /// The `dev.cosignproject.cosign/signature` annotation: the base64 signature.
    pub signature_b64: String,
}

/// The tag under which cosign stores the signatures of a manifest: `sha256-<hex>.sig`.
pub fn signature_tag(manifest_digest: &str) -> Result<String, VerifyError> {
    Ok(format!("sha256-{}.sig", sha256_hex(manifest_digest)?))
}

#[derive(Deserialize)]
struct SignatureManifest {
    #[serde(default)]
    layers: Vec<Layer>,
}

#[derive(Deserialize)]
struct Layer {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    #[serde(default)]
    digest: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

/// The signature layers of a signature manifest (the JSON served under [`signature_tag`]):
/// layers of media type [`SIGNATURE_MEDIA_TYPE`] carrying the [`SIGNATURE_ANNOTATION`], with a
/// sha256 digest and a size of at most [`MAX_PAYLOAD_BYTES`]. Other layers are skipped (cosign
/// would report each of them as a failed signature; none of them could verify). More than
/// [`MAX_SIGNATURE_LAYERS`] layers is an error.
pub fn signature_candidates(sig_manifest_json: &[u8]) -> Result<Vec<Candidate>, VerifyError> {
    if sig_manifest_json.len() > MAX_SIGNATURE_MANIFEST_BYTES {
        return Err(VerifyError::InvalidSignatureManifest(format!(
            "{} bytes (at most {MAX_SIGNATURE_MANIFEST_BYTES})",
            sig_manifest_json.len()
        )));
    }
    let manifest: SignatureManifest = serde_json::from_slice(sig_manifest_json)
        .map_err(|e| VerifyError::InvalidSignatureManifest(e.to_string()))?;
    if manifest.layers.len() > MAX_SIGNATURE_LAYERS {
        return Err(VerifyError::TooManySignatures {
            count: manifest.layers.len(),
            max: MAX_SIGNATURE_LAYERS,
        });
    }
    Ok(manifest
        .layers
        .into_iter()
        .filter(|layer| layer.media_type == SIGNATURE_MEDIA_TYPE)
        .filter(|layer| sha256_hex(&layer.digest).is_ok() && layer.size <= MAX_PAYLOAD_BYTES)
        .filter_map(|mut layer| {
            let signature_b64 = layer.annotations.remove(SIGNATURE_ANNOTATION)?;
            (!signature_b64.is_empty() && signature_b64.len() <= MAX_SIGNATURE_B64).then_some(
                Candidate {
                    payload_digest: layer.digest,
                    payload_size: layer.size,
                    signature_b64,
                },
            )
        })
        .collect())
}

/// The part of the simple-signing payload cosign's claim check reads.
#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// Checks the fetched signature payloads of `manifest_digest` against the keys, in order; the
/// first candidate one key verifies wins. A candidate verifies when its payload is the blob the
/// manifest named (size and digest), the signature over the payload bytes checks with the key,
/// and the payload's `critical.image.docker-manifest-digest` is `manifest_digest` with
/// `critical.type` [`SIGNATURE_TYPE`]. Otherwise: [`VerifyError::NoMatchingSignatures`] with one
/// reason per candidate.
pub fn verify(
    keys: &[CosignKey],
    manifest_digest: &str,
    payloads: &[(Candidate, Vec<u8>)],
) -> Result<VerifiedBy, VerifyError> {
    sha256_hex(manifest_digest)?;
    first_verified(
        keys,
        payloads,
        MAX_SIGNATURE_LAYERS,
        |(candidate, _)| candidate.payload_digest.as_str(),
        "",
        |(candidate, payload)| check_candidate(keys, manifest_digest, candidate, payload),
    )
}

fn check_candidate<'k>(
    keys: &'k [CosignKey],
    manifest_digest: &str,
    candidate: &Candidate,
    payload: &[u8],
) -> Result<&'k CosignKey, String> {
    if payload.len() as u64 > MAX_PAYLOAD_BYTES {
        return Err(format!(
            "payload of {} bytes (at most {MAX_PAYLOAD_BYTES})",
            payload.len()
        ));
    }
    if payload.len() as u64 != candidate.payload_size {
        return Err(format!(
            "payload of {} bytes, the manifest says {}",
            payload.len(),
            candidate.payload_size
        ));
    }
    if sha256_digest(payload) != candidate.payload_digest {
        return Err("payload digest mismatch".to_string());
    }
    // The claims first: a payload about another image is refused before any key is tried.
    let claims: Payload =
        serde_json::from_slice(payload).map_err(|e| format!("invalid payload: {e}"))?;
    if claims.critical.kind != SIGNATURE_TYPE {
        return Err(format!(
            "payload type '{}' is not '{SIGNATURE_TYPE}'",
            clip(&claims.critical.kind)
        ));
    }
    if claims.critical.image.docker_manifest_digest != manifest_digest {
        return Err(format!(
            "payload signs '{}', not '{manifest_digest}'",
            clip(&claims.critical.image.docker_manifest_digest)
        ));
    }
    let signature = base64_decode(&candidate.signature_b64)
        .ok_or_else(|| "signature annotation is not valid base64".to_string())?;
    keys.iter()
        .find(|key| key.verifies(payload, &signature))
        .ok_or_else(|| format!("signature not verified by any of {} key(s)", keys.len()))
}

pub(super) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// A hostile string clipped for a message.
pub(super) fn clip(text: &str) -> String {
    let mut out: String = text.chars().take(80).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}
