//! Stage verification (`spec.verify`, cosign with public keys): the keys of the Secret, then the
//! signatures of the resolved digest fetched from the registry (bounded) and checked by the pure
//! functions of [`super::verify`]. Like Flux, Sigstore bundles attached as referrers are tried
//! first (the OCI 1.1 referrers API, or its `sha256-<hex>` tag fallback when the registry has no
//! such API), then the classic `sha256-<hex>.sig` tag.

use rflux_common::api::ocirepository::OciRepositoryStatus;
use rflux_common::runtime::conditions::SUCCEEDED_REASON;
use rflux_common::runtime::{EventType, StageError};
use rflux_oci::client::Client;
use rflux_oci::error::OciError;
use rflux_oci::manifest::Descriptor;

use super::run::{Resolved, Run, bare_url};
use super::status as st;
use super::verify::{self as cosign, CosignKey, MAX_BUNDLE_BYTES, MAX_PAYLOAD_BYTES, VerifyError};
use crate::source::read_secret;

fn failed(msg: impl std::fmt::Display) -> StageError {
    StageError::generic(
        st::SOURCE_VERIFIED,
        st::VERIFICATION_ERROR,
        format!("failed to verify the signature using provider 'cosign': {msg}"),
    )
}

/// Verifies the resolved digest; on success `SourceVerified=True`.
pub(super) async fn reconcile_verification(
    run: &Run<'_>,
    status: &mut OciRepositoryStatus,
    client: &Client,
    resolved: &Resolved,
) -> Result<(), StageError> {
    let Some(secret) = run
        .spec()
        .verify
        .as_ref()
        .and_then(|v| v.secret_ref.as_ref())
    else {
        return Ok(());
    };
    let data = read_secret(&run.ctx.client, run.ns, &secret.name)
        .await
        .map_err(|e| {
            failed(format!(
                "failed to get secret '{}/{}': {e}",
                run.ns, secret.name
            ))
        })?;
    let keys = cosign::public_keys(&data).map_err(failed)?;
    let reference = format!("{}@{}", bare_url(&run.spec().url), resolved.digest);
    let no_match = || failed(cosign::flux_no_match_message(&reference));
    let outcome = match verify_bundles(client, &keys, &resolved.digest).await {
        Ok(Some(v)) => Ok(Some(v)),
        Ok(None) => verify_classic(client, &keys, &resolved.digest).await,
        Err(e) => Err(e),
    };
    let by = match outcome {
        Ok(Some(by)) => by,
        Ok(None) => return Err(no_match()),
        Err(Fetch::Registry(e)) => return Err(failed(e)),
        Err(Fetch::Invalid(VerifyError::NoMatchingSignatures { reasons })) => {
            tracing::info!(reference, ?reasons, "no signature verified");
            return Err(no_match());
        }
        Err(Fetch::Invalid(e)) => return Err(failed(e)),
    };
    let message = st::source_verified(
        status,
        &resolved.revision,
        run.generation,
        jiff::Timestamp::now(),
    );
    tracing::info!(key = by.key, signature = by.signature_digest, "{message}");
    run.event(EventType::Trace, SUCCEEDED_REASON, &message)
        .await;
    Ok(())
}

enum Fetch {
    Registry(OciError),
    Invalid(VerifyError),
}

impl From<OciError> for Fetch {
    fn from(e: OciError) -> Self {
        Fetch::Registry(e)
    }
}

impl From<VerifyError> for Fetch {
    fn from(e: VerifyError) -> Self {
        Fetch::Invalid(e)
    }
}

fn blob(digest: &str, size: u64) -> Descriptor {
    Descriptor {
        digest: digest.to_string(),
        size,
        ..Descriptor::default()
    }
}

/// The manifest (raw bytes) a tag or digest names, or `None` when the registry has none. Its
/// size is bounded by the client (and again by the pure parsers of `verify`).
async fn manifest_if_any(client: &Client, reference: &str) -> Result<Option<Vec<u8>>, Fetch> {
    match client.manifest_raw(reference).await {
        Ok((bytes, _, _)) => Ok(Some(bytes)),
        Err(OciError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Sigstore bundles attached to the digest (through the referrers tag); `None` when there are
/// none.
async fn verify_bundles(
    client: &Client,
    keys: &[CosignKey],
    digest: &str,
) -> Result<Option<cosign::VerifiedBy>, Fetch> {
    let index = match client.referrers(digest).await {
        Ok(index) => Some(index),
        Err(OciError::NotFound { .. }) => {
            manifest_if_any(client, &cosign::referrers_tag(digest)?).await?
        }
        Err(e) => return Err(e.into()),
    };
    let Some(index) = index else {
        return Ok(None);
    };
    let mut bundles = Vec::new();
    for referrer in cosign::referrer_manifests(&index)? {
        let Some(m) = manifest_if_any(client, &referrer).await? else {
            continue;
        };
        let Ok(layer) = cosign::bundle_layer(&m) else {
            continue;
        };
        let bytes = client
            .blob_bytes(&blob(&layer.digest, layer.size), MAX_BUNDLE_BYTES)
            .await?;
        bundles.push((layer, bytes));
    }
    if bundles.is_empty() {
        return Ok(None);
    }
    Ok(Some(cosign::verify_bundles(keys, digest, &bundles)?))
}

/// The classic `sha256-<hex>.sig` signatures; `None` when there are none.
async fn verify_classic(
    client: &Client,
    keys: &[CosignKey],
    digest: &str,
) -> Result<Option<cosign::VerifiedBy>, Fetch> {
    let Some(m) = manifest_if_any(client, &cosign::signature_tag(digest)?).await? else {
        return Ok(None);
    };
    let mut payloads = Vec::new();
    for c in cosign::signature_candidates(&m)? {
        let bytes = client
            .blob_bytes(&blob(&c.payload_digest, c.payload_size), MAX_PAYLOAD_BYTES)
            .await?;
        payloads.push((c, bytes));
    }
    Ok(Some(cosign::verify(keys, digest, &payloads)?))
}
