//! cosign v3's signature format: a Sigstore bundle (v0.3) attached to the signed manifest as an
//! OCI referrer. `cosign sign` (new bundle format, its default) pushes a manifest with
//! `subject` = the signed manifest, `artifactType` [`BUNDLE_ARTIFACT_TYPE`] and one layer: the
//! bundle JSON. Registries without the referrers API (distribution v3 among them) get the OCI
//! 1.1 fallback instead: an image index tagged `sha256-<hex>` listing the referrers.
//!
//! The bundle holds a DSSE envelope whose payload is an in-toto statement naming the manifest
//! digest as subject (predicate `https://sigstore.dev/cosign/sign/v1`); the envelope signature
//! is over DSSE's pre-authentication encoding. With a public key, Flux (cosign
//! `verifyImageAttestationsSigstoreBundle` → sigstore-go, `IgnoreTlog`) checks: bundle version
//! v0.3, key (not certificate) verification material, exactly one DSSE signature verified by the
//! key, payload type `application/vnd.in-toto+json`, and the manifest digest among the
//! statement's sha256 subjects. It checks no predicate type, so an attestation bundle signed by
//! the key counts too; we do the same. Message-signature bundles are not accepted (cosign does
//! not write them for images; sigstore-go would check them against the manifest digest).

use serde::Deserialize;

use super::classic::{base64_decode, clip};
use super::{CosignKey, VerifiedBy, VerifyError, first_verified, sha256_digest, sha256_hex};

/// `artifactType` of a cosign v3 signature referrer, and media type of its bundle layer.
pub const BUNDLE_ARTIFACT_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// What the referrers API and the fallback tag serve.
pub const REFERRERS_INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// Largest referrers index or referrer manifest read.
const MAX_INDEX_BYTES: usize = 4 * 1024 * 1024;
/// More bundle referrers than this and the index is refused (each `cosign sign` adds one).
pub const MAX_REFERRERS: usize = 128;
/// Largest bundle blob fetched and checked (a key-signed bundle is under 1 KiB; one with a
/// certificate chain and log entries a few KiB).
pub const MAX_BUNDLE_BYTES: u64 = 256 * 1024;

const BUNDLE_MEDIA_TYPE_PREFIX: &str = "application/vnd.dev.sigstore.bundle";
const INTOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// sigstore-go's bounds on a statement's subjects.
const MAX_SUBJECTS: usize = 1024;
const MAX_SUBJECT_DIGESTS: usize = 32;

/// The fallback tag of the OCI 1.1 referrers API: `sha256-<hex>` (an image index), for
/// registries that answer `GET /v2/<repo>/referrers/<digest>` with 404.
pub fn referrers_tag(manifest_digest: &str) -> Result<String, VerifyError> {
    Ok(format!("sha256-{}", sha256_hex(manifest_digest)?))
}

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    #[serde(default)]
    digest: String,
    #[serde(default)]
    size: u64,
    #[serde(rename = "artifactType", default)]
    artifact_type: Option<String>,
}

/// The referrer manifests of a referrers index (the API's answer or the fallback tag's index)
/// that may hold a Sigstore bundle: those with a bundle `artifactType`, or none at all
/// (cosign fetches every referrer and skips the non-bundles; we skip the ones that say they are
/// something else). Digests in index order; more than [`MAX_REFERRERS`] is an error.
pub fn referrer_manifests(index_json: &[u8]) -> Result<Vec<String>, VerifyError> {
    let invalid = VerifyError::InvalidReferrersIndex;
    if index_json.len() > MAX_INDEX_BYTES {
        return Err(invalid(format!(
            "{} bytes (at most {MAX_INDEX_BYTES})",
            index_json.len()
        )));
    }
    let index: Index = serde_json::from_slice(index_json).map_err(|e| invalid(e.to_string()))?;
    let digests: Vec<String> = index
        .manifests
        .into_iter()
        .filter(|d| {
            d.artifact_type
                .as_deref()
                .is_none_or(|t| t.is_empty() || t.starts_with(BUNDLE_MEDIA_TYPE_PREFIX))
        })
        .filter(|d| d.media_type.is_empty() || d.media_type.contains("manifest"))
        .filter(|d| sha256_hex(&d.digest).is_ok() && d.size <= MAX_INDEX_BYTES as u64)
        .map(|d| d.digest)
        .collect();
    if digests.len() > MAX_REFERRERS {
        return Err(VerifyError::TooManySignatures {
            count: digests.len(),
            max: MAX_REFERRERS,
        });
    }
    Ok(digests)
}

/// The bundle blob of a referrer manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleLayer {
    /// `sha256:<hex>`, fetch it as `/v2/<repo>/blobs/<digest>`.
    pub digest: String,
    /// Declared size, at most [`MAX_BUNDLE_BYTES`].
    pub size: u64,
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(default)]
    layers: Vec<Descriptor>,
}

/// The bundle layer of a referrer manifest: cosign requires exactly one layer, of a Sigstore
/// bundle media type. An error means this referrer is not a bundle (skip it).
pub fn bundle_layer(referrer_manifest_json: &[u8]) -> Result<BundleLayer, VerifyError> {
    let invalid = VerifyError::InvalidBundleManifest;
    if referrer_manifest_json.len() > MAX_INDEX_BYTES {
        return Err(invalid(format!(
            "{} bytes (at most {MAX_INDEX_BYTES})",
            referrer_manifest_json.len()
        )));
    }
    let manifest: Manifest =
        serde_json::from_slice(referrer_manifest_json).map_err(|e| invalid(e.to_string()))?;
    let [layer] = manifest.layers.as_slice() else {
        return Err(invalid(format!(
            "expected exactly one layer, found {}",
            manifest.layers.len()
        )));
    };
    if !layer.media_type.starts_with(BUNDLE_MEDIA_TYPE_PREFIX) {
        return Err(invalid(format!(
            "layer media type '{}' is not a Sigstore bundle",
            clip(&layer.media_type)
        )));
    }
    sha256_hex(&layer.digest).map_err(|_| invalid("layer digest is not sha256".to_string()))?;
    if layer.size > MAX_BUNDLE_BYTES {
        return Err(invalid(format!(
            "bundle of {} bytes (at most {MAX_BUNDLE_BYTES})",
            layer.size
        )));
    }
    Ok(BundleLayer {
        digest: layer.digest.clone(),
        size: layer.size,
    })
}

// The bundle JSON is protobuf JSON: camelCase names, the proto names accepted too.
#[derive(Deserialize)]
struct Bundle {
    #[serde(rename = "mediaType", alias = "media_type", default)]
    media_type: String,
    #[serde(rename = "verificationMaterial", alias = "verification_material")]
    verification_material: Option<VerificationMaterial>,
    #[serde(rename = "dsseEnvelope", alias = "dsse_envelope")]
    dsse_envelope: Option<Envelope>,
    #[serde(rename = "messageSignature", alias = "message_signature")]
    message_signature: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct VerificationMaterial {
    #[serde(rename = "publicKey", alias = "public_key")]
    public_key: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    payload: String,
    #[serde(rename = "payloadType", alias = "payload_type", default)]
    payload_type: String,
    #[serde(default)]
    signatures: Vec<EnvelopeSignature>,
}

#[derive(Deserialize)]
struct EnvelopeSignature {
    #[serde(default)]
    sig: String,
}

#[derive(Deserialize)]
struct Statement {
    #[serde(default)]
    subject: Vec<Subject>,
}

#[derive(Deserialize)]
struct Subject {
    #[serde(default)]
    digest: std::collections::BTreeMap<String, String>,
}

/// Checks the fetched bundles of `manifest_digest` against the keys, in order; the first bundle
/// one key verifies wins (see the module documentation for the checks). Otherwise
/// [`VerifyError::NoMatchingSignatures`] with one reason per bundle.
pub fn verify_bundles(
    keys: &[CosignKey],
    manifest_digest: &str,
    bundles: &[(BundleLayer, Vec<u8>)],
) -> Result<VerifiedBy, VerifyError> {
    let hex = sha256_hex(manifest_digest)?;
    first_verified(
        keys,
        bundles,
        MAX_REFERRERS,
        |(layer, _)| layer.digest.as_str(),
        "bundle ",
        |(layer, bytes)| check_bundle(keys, hex, layer, bytes),
    )
}

fn check_bundle<'k>(
    keys: &'k [CosignKey],
    manifest_hex: &str,
    layer: &BundleLayer,
    bytes: &[u8],
) -> Result<&'k CosignKey, String> {
    if bytes.len() as u64 > MAX_BUNDLE_BYTES {
        return Err(format!(
            "{} bytes (at most {MAX_BUNDLE_BYTES})",
            bytes.len()
        ));
    }
    if bytes.len() as u64 != layer.size || sha256_digest(bytes) != layer.digest {
        return Err("blob does not match its descriptor".to_string());
    }
    let bundle: Bundle =
        serde_json::from_slice(bytes).map_err(|e| format!("invalid bundle: {e}"))?;
    if !supported_version(&bundle.media_type) {
        return Err(format!(
            "unsupported bundle media type '{}' (v0.3 required)",
            clip(&bundle.media_type)
        ));
    }
    if bundle
        .verification_material
        .is_none_or(|m| m.public_key.is_none())
    {
        return Err("not signed with a key (no publicKey verification material)".to_string());
    }
    let envelope = match (bundle.dsse_envelope, bundle.message_signature) {
        (Some(envelope), None) => envelope,
        (None, Some(_)) => return Err("message signature bundles are not supported".to_string()),
        _ => return Err("bundle must hold exactly one of dsseEnvelope, messageSignature".into()),
    };
    let [signature] = envelope.signatures.as_slice() else {
        return Err(format!(
            "exactly one DSSE signature is required, found {}",
            envelope.signatures.len()
        ));
    };
    let payload = proto_bytes(&envelope.payload).ok_or("DSSE payload is not base64")?;
    let signature = proto_bytes(&signature.sig).ok_or("DSSE signature is not base64")?;
    let message = pae(&envelope.payload_type, &payload);
    let key = keys
        .iter()
        .find(|key| key.verifies(&message, &signature))
        .ok_or_else(|| format!("signature not verified by any of {} key(s)", keys.len()))?;
    if envelope.payload_type != INTOTO_PAYLOAD_TYPE {
        return Err(format!(
            "payload type '{}' is not '{INTOTO_PAYLOAD_TYPE}'",
            clip(&envelope.payload_type)
        ));
    }
    let statement: Statement =
        serde_json::from_slice(&payload).map_err(|e| format!("invalid in-toto statement: {e}"))?;
    if statement.subject.len() > MAX_SUBJECTS
        || statement
            .subject
            .iter()
            .any(|s| s.digest.len() > MAX_SUBJECT_DIGESTS)
    {
        return Err("too many subjects or subject digests".to_string());
    }
    let names_manifest = statement.subject.iter().any(|s| {
        s.digest
            .get("sha256")
            .is_some_and(|d| d.eq_ignore_ascii_case(manifest_hex))
    });
    if !names_manifest {
        return Err(format!(
            "statement subjects do not include sha256:{manifest_hex}"
        ));
    }
    Ok(key)
}

/// Bundle media types cosign accepts: version v0.3 (at least v0.3, below v0.4).
fn supported_version(media_type: &str) -> bool {
    if media_type == "application/vnd.dev.sigstore.bundle+json;version=0.3" {
        return true;
    }
    let Some(version) = media_type
        .strip_prefix("application/vnd.dev.sigstore.bundle.v")
        .and_then(|v| v.strip_suffix("+json"))
    else {
        return false;
    };
    let mut parts = version.split('.');
    let (Some(major), Some(minor)) = (parts.next(), parts.next()) else {
        return false;
    };
    let patch_ok = parts.next().is_none_or(is_number) && parts.next().is_none();
    major == "0" && minor == "3" && patch_ok
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

/// DSSE's pre-authentication encoding, what the envelope signature covers.
pub(super) fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// A protobuf JSON `bytes` value: base64, standard or URL-safe, padded or not.
fn proto_bytes(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    base64_decode(text)
        .or_else(|| STANDARD_NO_PAD.decode(text).ok())
        .or_else(|| URL_SAFE.decode(text).ok())
        .or_else(|| URL_SAFE_NO_PAD.decode(text).ok())
}
