//! The OCIRepository reconcile pipeline as named stages, run in order by [`pipeline`] once
//! `Reconciling` is set (the stages of Flux's OCIRepository reconciler):
//!
//! 1. `reconcile_storage` (shared): the stored artifact still exists and matches its digest.
//! 2. [`validate_spec`]: a URL, provider or verification that cannot work stalls.
//! 3. [`reconcile_auth`]: the registry client, with credentials, TLS, proxy and timeout.
//! 4. [`reconcile_reference`]: the reference resolved to a manifest digest and a revision.
//! 5. [`reconcile_verification`]: with `spec.verify`, the cosign signature of that digest.
//! 6. Unchanged revision and content configuration: the stored artifact is kept, nothing pulled.
//! 7. [`super::pull::reconcile_pull`]: the manifest, the selected layer, extracted or copied.
//! 8. [`super::pull::reconcile_artifact`]: packaged into the storage and recorded in status.

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::Api;
use rflux_common::api::ocirepository::{
    OciProvider, OciRepositorySpec, OciRepositoryStatus, OciVerificationProvider,
};
use rflux_common::runtime::{EventType, StageError, parse_go_duration};
use rflux_oci::auth::Keychain;
use rflux_oci::client::Client;
use rflux_oci::error::OciError;
use rflux_oci::transport::TransportConfig;
use rflux_oci::url::Repository;

use super::auth::{proxy, pull_keychain, tls_material};
use super::pull::{reconcile_artifact, reconcile_pull};
use super::refs::{RefChoice, check_digest, revision, select_semver_tag};
use super::run::{Resolved, Run, bare_url};
use super::status as st;
use super::verify_stage::reconcile_verification;
use crate::source::status as source_status;
use crate::source::{Built, SecretData, read_secret, reconcile_storage, secret_data};

/// The pipeline after `Reconciling` is set; the stages mutate `status` as they go.
pub(super) async fn pipeline(
    run: &Run<'_>,
    status: &mut OciRepositoryStatus,
) -> Result<Built, StageError> {
    reconcile_storage(run, status).await;
    let repo = validate_spec(run.spec())?;
    st::reset_verification(status, run.spec());
    let client = reconcile_auth(run, repo).await?;
    let resolved = reconcile_reference(run.spec(), &client).await?;
    let now = jiff::Timestamp::now;
    if status
        .artifact
        .as_ref()
        .is_some_and(|a| a.revision != resolved.revision)
    {
        let outdated = st::outdated_message(&resolved.revision, &resolved.reference);
        source_status::new_revision(status, &outdated, run.generation, now());
    }
    if st::requires_verification(run.spec(), status, &resolved.revision, run.generation) {
        reconcile_verification(run, status, &client, &resolved).await?;
    }
    if st::artifact_up_to_date(run.spec(), status, &resolved.revision) {
        let message = st::stored_message(&resolved.revision);
        source_status::keep_artifact(status, &message, run.generation, now());
        let trace = format!(
            "artifact up-to-date with remote revision: '{}'",
            resolved.revision
        );
        run.event(EventType::Trace, "ArtifactUpToDate", &trace)
            .await;
        return Ok(None);
    }
    let pulled = reconcile_pull(run, &client, &resolved).await?;
    let message = reconcile_artifact(run, status, pulled, &resolved).await?;
    Ok(Some(message))
}

/// Configuration that cannot work without a spec change: the pipeline stalls.
pub(super) fn validate_spec(spec: &OciRepositorySpec) -> Result<Repository, StageError> {
    let repo = Repository::parse_flux_url(&spec.url, spec.is_insecure()).map_err(|e| {
        StageError::stalling(
            st::FETCH_FAILED,
            st::URL_INVALID,
            format!("URL validation failed for '{}': {e}", spec.url),
        )
    })?;
    if let Some(d) = spec.reference.as_ref().and_then(|r| r.digest.as_deref())
        && !d.is_empty()
    {
        check_digest(d)
            .map_err(|e| StageError::stalling(st::FETCH_FAILED, st::URL_INVALID, e.to_string()))?;
    }
    if let Some(v) = &spec.verify {
        let refused = match (v.provider, &v.secret_ref) {
            (OciVerificationProvider::Notation, _) => Some((
                "notation",
                "notation verification is not supported by this source-controller",
            )),
            (OciVerificationProvider::Cosign, None) => Some((
                "cosign keyless",
                "keyless verification (Fulcio certificates and the Rekor log) is not supported \
                 by this source-controller; give the public keys in spec.verify.secretRef",
            )),
            _ => None,
        };
        if let Some((provider, why)) = refused {
            return Err(StageError::stalling(
                st::SOURCE_VERIFIED,
                st::VERIFICATION_ERROR,
                format!("failed to verify the signature using provider '{provider}': {why}"),
            ));
        }
    }
    Ok(repo)
}

/// Stage auth: the keychain (pull Secret and the ServiceAccount's image pull Secrets), the TLS
/// material, the proxy and the timeout, as a registry client. A cloud `provider` is used only
/// when no pull Secret gave credentials, like Flux; this controller has no cloud login.
async fn reconcile_auth(run: &Run<'_>, repo: Repository) -> Result<Client, StageError> {
    let spec = run.spec();
    let auth_failed =
        |msg: String| StageError::generic(st::FETCH_FAILED, st::AUTHENTICATION_FAILED, msg);
    let timeout = parse_go_duration(spec.timeout()).map_err(|e| {
        StageError::stalling(
            st::FETCH_FAILED,
            st::INVALID_PROVIDER_CONFIGURATION,
            format!("invalid timeout '{}': {e}", spec.timeout()),
        )
    })?;
    let mut keychain = Keychain::anonymous();
    if let Some(r) = &spec.secret_ref {
        let secret = get_secret(run, &r.name)
            .await
            .map_err(|e| auth_failed(format!("failed to get credential: {e}")))?;
        keychain.extend(secret_keychain(&r.name, secret).map_err(auth_failed)?);
    }
    if let Some(sa) = &spec.service_account_name {
        for name in image_pull_secrets(run, sa).await.map_err(auth_failed)? {
            // Like Flux's keychain, a missing image pull Secret of the account is skipped.
            if let Ok(secret) = get_secret(run, &name).await {
                keychain.extend(secret_keychain(&name, secret).map_err(auth_failed)?);
            }
        }
    }
    if keychain.is_anonymous() && spec.provider() != OciProvider::Generic {
        return Err(StageError::stalling(
            st::FETCH_FAILED,
            st::AUTHENTICATION_FAILED,
            format!(
                "failed to get credential from {}: cloud provider login is not supported by \
                 this source-controller; use a pull secret (spec.secretRef)",
                spec.provider().as_str()
            ),
        ));
    }
    let mut cfg = TransportConfig {
        insecure: spec.is_insecure(),
        timeout,
        ..TransportConfig::default()
    };
    if let Some(r) = &spec.cert_secret_ref {
        let data = read_secret(&run.ctx.client, run.ns, &r.name)
            .await
            .map_err(|e| {
                auth_failed(format!(
                    "failed to generate transport for '{}': {e}",
                    spec.url
                ))
            })?;
        let tls = tls_material(&r.name, &data).map_err(|e| {
            auth_failed(format!(
                "failed to generate transport for '{}': {e}",
                spec.url
            ))
        })?;
        cfg.ca_pem = tls.ca_pem;
        cfg.client_cert_pem = tls.client_cert_pem;
        cfg.client_key_pem = tls.client_key_pem;
    }
    if let Some(r) = &spec.proxy_secret_ref {
        let data: SecretData = read_secret(&run.ctx.client, run.ns, &r.name)
            .await
            .map_err(|e| auth_failed(format!("failed to get proxy address: {e}")))?;
        cfg.proxy = Some(
            proxy(&r.name, &data)
                .map_err(|e| auth_failed(format!("failed to get proxy address: {e}")))?,
        );
    }
    Client::new(repo, keychain, cfg, rflux_oci::Limits::default()).map_err(|e| {
        auth_failed(format!(
            "failed to generate transport for '{}': {e}",
            spec.url
        ))
    })
}

async fn get_secret(run: &Run<'_>, name: &str) -> Result<Secret, String> {
    let api: Api<Secret> = Api::namespaced(run.ctx.client.clone(), run.ns);
    api.get(name).await.map_err(|e| match e {
        kube::Error::Api(ae) if ae.code == 404 => {
            format!("auth secret '{name}' not found")
        }
        other => format!("failed to get secret '{}/{name}': {other}", run.ns),
    })
}

fn secret_keychain(name: &str, secret: Secret) -> Result<Keychain, String> {
    let type_ = secret.type_.clone();
    pull_keychain(name, type_.as_deref(), &secret_data(secret)).map_err(|e| e.to_string())
}

/// The names of the ServiceAccount's `imagePullSecrets`.
async fn image_pull_secrets(run: &Run<'_>, sa: &str) -> Result<Vec<String>, String> {
    let api: Api<ServiceAccount> = Api::namespaced(run.ctx.client.clone(), run.ns);
    let account = api.get(sa).await.map_err(|e| {
        format!("failed to get credential: failed to get service account '{sa}': {e}")
    })?;
    Ok(account
        .image_pull_secrets
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .filter(|n| !n.is_empty())
        .collect())
}

/// Stage reference: `spec.ref` resolved to a manifest digest (a HEAD for a tag; the tag list for
/// semver).
async fn reconcile_reference(
    spec: &OciRepositorySpec,
    client: &Client,
) -> Result<Resolved, StageError> {
    let read_failed = |e: String| {
        StageError::generic(
            st::FETCH_FAILED,
            st::READ_OPERATION_FAILED,
            format!(
                "failed to determine the artifact tag for '{}': {e}",
                spec.url
            ),
        )
    };
    let digest_failed = |e: OciError| {
        StageError::generic(
            st::FETCH_FAILED,
            st::PULL_FAILED,
            format!("failed to determine artifact digest: {e}"),
        )
    };
    let tag = match RefChoice::from_spec(spec.reference.as_ref()) {
        RefChoice::Digest(d) => {
            return Ok(Resolved {
                reference: format!("{}@{d}", bare_url(&spec.url)),
                revision: revision(None, &d),
                digest: d,
            });
        }
        RefChoice::Tag(t) => t,
        RefChoice::Semver { constraint, filter } => {
            let tags = client
                .list_tags()
                .await
                .map_err(|e| read_failed(e.to_string()))?;
            select_semver_tag(&tags, &constraint, filter.as_deref())
                .map_err(|e| read_failed(e.to_string()))?
        }
    };
    let digest = client.resolve_digest(&tag).await.map_err(digest_failed)?;
    Ok(Resolved {
        reference: format!("{}:{tag}", bare_url(&spec.url)),
        revision: revision(Some(&tag), &digest),
        digest,
    })
}
