//! Image manifests and indexes (OCI image-spec and Docker distribution v2), their media
//! types, and digests.

use std::collections::BTreeMap;

use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use crate::error::OciError;

/// OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker image manifest, schema 2.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker manifest list.
pub const DOCKER_MANIFEST_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Docker schema 1 (refused).
pub const DOCKER_SCHEMA1: &str = "application/vnd.docker.distribution.manifest.v1+json";
/// Signed Docker schema 1 (refused).
pub const DOCKER_SCHEMA1_SIGNED: &str = "application/vnd.docker.distribution.manifest.v1+prettyjws";
/// The config blob media type of `flux push artifact`.
pub const FLUX_CONFIG: &str = "application/vnd.cncf.flux.config.v1+json";
/// The single layer of `flux push artifact`.
pub const FLUX_CONTENT: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";
/// A Helm chart pushed by Helm.
pub const HELM_CHART_CONTENT: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// A Helm chart's config.
pub const HELM_CONFIG: &str = "application/vnd.cncf.helm.config.v1+json";
/// A gzip tar layer of an OCI image.
pub const OCI_LAYER_TAR_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// A gzip tar layer of a Docker image.
pub const DOCKER_LAYER_TAR_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// The `Accept` list for manifests, in go-containerregistry's order (`allManifestMediaTypes`).
pub const MANIFEST_ACCEPT: [&str; 6] = [
    DOCKER_SCHEMA1,
    DOCKER_SCHEMA1_SIGNED,
    DOCKER_MANIFEST,
    OCI_MANIFEST,
    DOCKER_MANIFEST_LIST,
    OCI_INDEX,
];

/// The platform an index is resolved to (go-containerregistry's default).
pub const DEFAULT_OS: &str = "linux";
/// See [`DEFAULT_OS`].
pub const DEFAULT_ARCHITECTURE: &str = "amd64";

/// A platform of an index entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Platform {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default, rename = "os.version")]
    pub os_version: String,
    #[serde(default)]
    pub variant: String,
    #[serde(default, rename = "os.features")]
    pub os_features: Vec<String>,
    #[serde(default)]
    pub features: Vec<String>,
}

/// A content descriptor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default, deserialize_with = "null_as_default")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub platform: Option<Platform>,
}

/// An image manifest, ready to pull layers from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The media type it was served as (or declares, when the server sent none we know).
    pub media_type: String,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    /// The manifest's annotations (source-controller's `artifact.metadata`).
    pub annotations: BTreeMap<String, String>,
    /// `artifactType`, when set.
    pub artifact_type: Option<String>,
    /// `sha256:<hex>` of [`Manifest::raw`] (verified against the reference).
    pub digest: String,
    /// The manifest bytes as served.
    pub raw: Vec<u8>,
    /// The index digest, when this manifest was reached through an index.
    pub index_digest: Option<String>,
}

/// An image index / manifest list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    #[serde(default)]
    pub media_type: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub manifests: Vec<Descriptor>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawManifest {
    #[serde(default)]
    media_type: String,
    config: Descriptor,
    #[serde(default, deserialize_with = "null_as_default")]
    layers: Vec<Descriptor>,
    #[serde(default, deserialize_with = "null_as_default")]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    artifact_type: Option<String>,
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// What a manifest response holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Image,
    Index,
    Schema1,
}

fn kind_of(media_type: &str) -> Option<Kind> {
    match media_type {
        OCI_MANIFEST | DOCKER_MANIFEST => Some(Kind::Image),
        OCI_INDEX | DOCKER_MANIFEST_LIST => Some(Kind::Index),
        DOCKER_SCHEMA1 | DOCKER_SCHEMA1_SIGNED => Some(Kind::Schema1),
        _ => None,
    }
}

/// The media type and kind of a manifest response: the `Content-Type` when it names a
/// manifest type (what go-containerregistry uses), else the body's `mediaType`, else the
/// body's shape (`manifests` → index, `config` → image, `fsLayers` → schema 1). Anything else
/// is [`OciError::NotAManifest`].
pub fn classify(content_type: Option<&str>, body: &[u8]) -> Result<(String, Kind), OciError> {
    let header = content_type
        .map(|c| c.split(';').next().unwrap_or_default().trim().to_string())
        .unwrap_or_default();
    if let Some(k) = kind_of(&header) {
        return Ok((header, k));
    }
    let shape: Option<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_slice(body).ok();
    let not_a_manifest = || OciError::NotAManifest {
        media_type: if header.is_empty() {
            "unknown".into()
        } else {
            header.clone()
        },
    };
    let Some(shape) = shape else {
        return Err(not_a_manifest());
    };
    if let Some(mt) = shape.get("mediaType").and_then(|v| v.as_str())
        && let Some(k) = kind_of(mt)
    {
        return Ok((mt.to_string(), k));
    }
    if shape.get("manifests").is_some_and(|v| v.is_array()) {
        Ok((header, Kind::Index))
    } else if shape.get("config").is_some_and(|v| v.is_object()) {
        Ok((header, Kind::Image))
    } else if shape.contains_key("fsLayers") {
        Ok((header, Kind::Schema1))
    } else {
        Err(not_a_manifest())
    }
}

fn check_descriptor(d: &Descriptor, what: &str) -> Result<(), OciError> {
    validate_digest(&d.digest)
        .map_err(|_| OciError::Json(format!("{what}: invalid digest '{}'", excerpt(&d.digest))))
}

fn excerpt(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Parses an image manifest served as `media_type` whose bytes hash to `digest`.
pub fn parse_image(raw: Vec<u8>, media_type: String, digest: String) -> Result<Manifest, OciError> {
    let m: RawManifest =
        serde_json::from_slice(&raw).map_err(|e| OciError::Json(format!("image manifest: {e}")))?;
    check_descriptor(&m.config, "config")?;
    for (i, l) in m.layers.iter().enumerate() {
        check_descriptor(l, &format!("layers[{i}]"))?;
    }
    let media_type = if media_type.is_empty() {
        m.media_type
    } else {
        media_type
    };
    Ok(Manifest {
        media_type,
        config: m.config,
        layers: m.layers,
        annotations: m.annotations,
        artifact_type: m.artifact_type.filter(|a| !a.is_empty()),
        digest,
        raw,
        index_digest: None,
    })
}

/// Parses an image index.
pub fn parse_index(raw: &[u8]) -> Result<Index, OciError> {
    let idx: Index =
        serde_json::from_slice(raw).map_err(|e| OciError::Json(format!("image index: {e}")))?;
    for (i, d) in idx.manifests.iter().enumerate() {
        check_descriptor(d, &format!("manifests[{i}]"))?;
    }
    Ok(idx)
}

impl Index {
    /// The first entry for `os`/`architecture` (an entry without a platform counts as
    /// linux/amd64), like go-containerregistry's `childByPlatform`.
    pub fn child_for(&self, os: &str, architecture: &str) -> Option<&Descriptor> {
        self.manifests.iter().find(|d| match &d.platform {
            Some(p) => p.os == os && p.architecture == architecture,
            None => os == DEFAULT_OS && architecture == DEFAULT_ARCHITECTURE,
        })
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Accepts exactly `sha256:` and 64 lowercase hex digits (the only algorithm
/// go-containerregistry accepts).
pub fn validate_digest(digest: &str) -> Result<(), OciError> {
    let ok = digest.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if ok {
        Ok(())
    } else {
        Err(OciError::Config(format!(
            "invalid digest '{}': want sha256:<64 lowercase hex>",
            excerpt(digest)
        )))
    }
}

/// Accepts a tag as the distribution spec defines it: `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
pub fn validate_tag(tag: &str) -> Result<(), OciError> {
    let mut bytes = tag.bytes();
    let ok = tag.len() <= 128
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(OciError::Config(format!("invalid tag '{}'", excerpt(tag))))
    }
}

#[cfg(test)]
mod tests;
