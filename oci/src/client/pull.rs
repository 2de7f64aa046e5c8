//! Manifests and blobs.

use std::path::Path;

use reqwest::header::{CONTENT_TYPE, HeaderMap};
use reqwest::{Method, StatusCode};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt;

use super::Client;
use super::body::read_limited;
use crate::error::OciError;
use crate::manifest::{
    self, DEFAULT_ARCHITECTURE, DEFAULT_OS, DOCKER_SCHEMA1_SIGNED, Descriptor, Kind,
    MANIFEST_ACCEPT, Manifest, OCI_INDEX, sha256_digest, validate_digest, validate_tag,
};
use crate::transport::map_reqwest;

/// Nested indexes followed before giving up.
const MAX_INDEX_DEPTH: usize = 4;
/// Largest first allocation for a blob read into memory.
const INITIAL_BLOB_CAPACITY: u64 = 1 << 20;

/// A manifest response.
struct Fetched {
    raw: Vec<u8>,
    content_type: Option<String>,
    digest: String,
}

fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_string())
}

/// Where a blob goes.
enum Sink<'a> {
    File(tokio::fs::File, &'a Path),
    Memory(Vec<u8>),
}

impl Sink<'_> {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), OciError> {
        match self {
            Sink::File(f, path) => f
                .write_all(bytes)
                .await
                .map_err(|e| OciError::Io(format!("cannot write {}: {e}", path.display()))),
            Sink::Memory(v) => {
                v.extend_from_slice(bytes);
                Ok(())
            }
        }
    }
}

impl Client {
    /// The digest `tag` points at: `HEAD` with the manifest `Accept` list and its
    /// `Docker-Content-Digest`, falling back to a `GET` (and the digest of the bytes) when the
    /// HEAD fails or lacks the header, like source-controller.
    pub async fn resolve_digest(&self, tag: &str) -> Result<String, OciError> {
        validate_tag(tag)?;
        let base = self.base().await?;
        let url = self.api_url(&base, "manifests", tag);
        let accept = MANIFEST_ACCEPT.join(",");
        match self
            .send(Method::HEAD, &url, Some(&accept), self.timeout)
            .await
        {
            Ok(resp) if resp.status() == StatusCode::OK => {
                let digest = header_str(resp.headers(), "docker-content-digest");
                let has_type = resp.headers().contains_key(CONTENT_TYPE);
                if let Some(d) = digest.filter(|d| has_type && validate_digest(d).is_ok()) {
                    return Ok(d);
                }
            }
            // Waiting a second time for a registry that did not answer helps nobody.
            Err(e @ OciError::Timeout { .. }) => return Err(e),
            _ => {}
        }
        Ok(self.fetch_manifest(tag, &accept).await?.digest)
    }

    /// `GET` a manifest by tag or digest; a digest reference is verified against the bytes.
    async fn fetch_manifest(&self, reference: &str, accept: &str) -> Result<Fetched, OciError> {
        let base = self.base().await?;
        let url = self.api_url(&base, "manifests", reference);
        let what = format!("GET {url}");
        let resp = self
            .send(Method::GET, &url, Some(accept), self.timeout)
            .await?;
        if resp.status() != StatusCode::OK {
            return Err(self.status_error(resp, &url, "GET").await);
        }
        let content_type = header_str(resp.headers(), "content-type");
        let header_digest = header_str(resp.headers(), "docker-content-digest");
        let raw = read_limited(resp, self.limits.max_manifest_bytes, "manifest", &what).await?;
        let mut digest = sha256_digest(&raw);
        // Signed schema 1 manifests are hashed without their signature: trust the header then
        // (go-containerregistry does the same; such a manifest is refused later anyway).
        if content_type.as_deref() == Some(DOCKER_SCHEMA1_SIGNED)
            && let Some(h) = header_digest.filter(|h| validate_digest(h).is_ok())
        {
            digest = h;
        }
        if reference.starts_with("sha256:") && digest != reference {
            return Err(OciError::DigestMismatch {
                expected: reference.to_string(),
                actual: digest,
            });
        }
        Ok(Fetched {
            raw,
            content_type,
            digest,
        })
    }

    /// The image manifest at `digest` (`sha256:<hex>`), its digest verified. An index is
    /// resolved to its first linux/amd64 entry (fetched and verified the same way); schema 1
    /// is refused ([`OciError::Schema1`]); anything else is [`OciError::NotAManifest`].
    pub async fn manifest(&self, digest: &str) -> Result<Manifest, OciError> {
        validate_digest(digest)?;
        let mut reference = digest.to_string();
        let mut accept = MANIFEST_ACCEPT.join(",");
        let mut index_digest = None;
        for _ in 0..=MAX_INDEX_DEPTH {
            let f = self.fetch_manifest(&reference, &accept).await?;
            let (media_type, kind) = manifest::classify(f.content_type.as_deref(), &f.raw)?;
            match kind {
                Kind::Schema1 => return Err(OciError::Schema1 { media_type }),
                Kind::Image => {
                    let mut m = manifest::parse_image(f.raw, media_type, f.digest)?;
                    m.index_digest = index_digest;
                    return Ok(m);
                }
                Kind::Index => {
                    let index = manifest::parse_index(&f.raw)?;
                    let child = index.child_for(DEFAULT_OS, DEFAULT_ARCHITECTURE).ok_or_else(|| {
                        OciError::NotFound {
                            what: format!(
                                "no child with platform {DEFAULT_OS}/{DEFAULT_ARCHITECTURE} in index {}@{}",
                                self.repo, f.digest
                            ),
                        }
                    })?;
                    index_digest.get_or_insert(f.digest);
                    accept = if child.media_type.is_empty() {
                        MANIFEST_ACCEPT.join(",")
                    } else {
                        child.media_type.clone()
                    };
                    reference = child.digest.clone();
                }
            }
        }
        Err(OciError::Protocol(format!(
            "more than {MAX_INDEX_DEPTH} nested indexes under {}@{digest}",
            self.repo
        )))
    }

    /// The manifest at `reference` (a tag or a digest) as served: bytes, media type (the
    /// `Content-Type`, else the body's `mediaType`) and the digest of the bytes (verified for
    /// a digest reference). For cosign's `sha256-<hex>.sig` tags; a missing one is
    /// [`OciError::NotFound`].
    pub async fn manifest_raw(
        &self,
        reference: &str,
    ) -> Result<(Vec<u8>, String, String), OciError> {
        if reference.starts_with("sha256:") {
            validate_digest(reference)?;
        } else {
            validate_tag(reference)?;
        }
        let f = self
            .fetch_manifest(reference, &MANIFEST_ACCEPT.join(","))
            .await?;
        let header = f
            .content_type
            .as_deref()
            .map(|c| c.split(';').next().unwrap_or_default().trim().to_string())
            .unwrap_or_default();
        let media_type = if header.is_empty() {
            serde_json::from_slice::<serde_json::Value>(&f.raw)
                .ok()
                .and_then(|v| {
                    v.get("mediaType")
                        .and_then(|m| m.as_str())
                        .map(str::to_string)
                })
                .unwrap_or_default()
        } else {
            header
        };
        Ok((f.raw, media_type, f.digest))
    }

    /// The OCI 1.1 referrers index of `digest` (`GET /v2/<repo>/referrers/<digest>`), bounded
    /// like a manifest. A registry without the API answers 404: [`OciError::NotFound`], and the
    /// caller falls back to the `sha256-<hex>` tag.
    pub async fn referrers(&self, digest: &str) -> Result<Vec<u8>, OciError> {
        validate_digest(digest)?;
        let base = self.base().await?;
        let url = self.api_url(&base, "referrers", digest);
        let what = format!("GET {url}");
        let resp = self
            .send(Method::GET, &url, Some(OCI_INDEX), self.timeout)
            .await?;
        if resp.status() != StatusCode::OK {
            return Err(self.status_error(resp, &url, "GET").await);
        }
        read_limited(
            resp,
            self.limits.max_manifest_bytes,
            "referrers index",
            &what,
        )
        .await
    }

    /// Streams the blob of `desc` into `dest` (created or truncated), verifying its size and
    /// sha256 while reading. Refuses `desc.size > max` before any request, stops as soon as
    /// more than `desc.size` bytes arrive, and removes `dest` on any failure. Returns the byte
    /// count.
    pub async fn blob_to_file(
        &self,
        desc: &Descriptor,
        dest: &Path,
        max: u64,
    ) -> Result<u64, OciError> {
        self.check_blob(desc, max)?;
        let file = tokio::fs::File::create(dest)
            .await
            .map_err(|e| OciError::Io(format!("cannot create {}: {e}", dest.display())))?;
        let mut sink = Sink::File(file, dest);
        let result = self.stream_blob(desc, &mut sink).await;
        let result = match (result, sink) {
            (Ok(n), Sink::File(mut f, _)) => f
                .flush()
                .await
                .map(|_| n)
                .map_err(|e| OciError::Io(format!("cannot write {}: {e}", dest.display()))),
            (r, _) => r,
        };
        if result.is_err() {
            let _ = tokio::fs::remove_file(dest).await;
        }
        result
    }

    /// [`Client::blob_to_file`] into memory.
    pub async fn blob_bytes(&self, desc: &Descriptor, max: u64) -> Result<Vec<u8>, OciError> {
        self.check_blob(desc, max)?;
        let mut sink = Sink::Memory(Vec::with_capacity(
            usize::try_from(desc.size.min(INITIAL_BLOB_CAPACITY)).unwrap_or(0),
        ));
        self.stream_blob(desc, &mut sink).await?;
        match sink {
            Sink::Memory(v) => Ok(v),
            Sink::File(..) => Err(OciError::Io("internal: unexpected sink".into())),
        }
    }

    fn check_blob(&self, desc: &Descriptor, max: u64) -> Result<(), OciError> {
        validate_digest(&desc.digest)?;
        if desc.size > max {
            return Err(OciError::TooLarge {
                what: format!("blob {} ({} bytes)", desc.digest, desc.size),
                limit: max,
            });
        }
        Ok(())
    }

    async fn stream_blob(&self, desc: &Descriptor, sink: &mut Sink<'_>) -> Result<u64, OciError> {
        let base = self.base().await?;
        let url = self.api_url(&base, "blobs", &desc.digest);
        let what = format!("GET {url}");
        let mut resp = self
            .send(Method::GET, &url, None, self.blob_timeout)
            .await?;
        if resp.status() != StatusCode::OK {
            return Err(self.status_error(resp, &url, "GET").await);
        }
        let size_mismatch = |actual| OciError::SizeMismatch {
            what: format!("blob {}", desc.digest),
            expected: desc.size,
            actual,
        };
        if let Some(n) = resp.content_length()
            && n != desc.size
        {
            return Err(size_mismatch(n));
        }
        let mut hasher = Sha256::new();
        let mut total = 0u64;
        while let Some(chunk) = resp.chunk().await.map_err(|e| map_reqwest(e, &what))? {
            total = total.saturating_add(chunk.len() as u64);
            if total > desc.size {
                return Err(size_mismatch(total));
            }
            hasher.update(&chunk);
            sink.write(&chunk).await?;
        }
        if total != desc.size {
            return Err(size_mismatch(total));
        }
        let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
        if actual != desc.digest {
            return Err(OciError::DigestMismatch {
                expected: desc.digest.clone(),
                actual,
            });
        }
        Ok(total)
    }
}
