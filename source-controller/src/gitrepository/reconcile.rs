//! The GitRepository reconcile pipeline (flux-spec §1.7) as named stages:
//! finalizer → suspend → storage → auth → ref resolution → (skip | fetch → checkout →
//! include → archive) → status, events, requeue.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use rflux_common::api::gitrepository::{GitProvider, GitRepository, GitRepositoryStatus};
use rflux_common::api::meta::Artifact as ApiArtifact;
use rflux_common::runtime::conditions::{self as cond, requested_at};
use rflux_common::runtime::finalizers::{FLUX_FINALIZER, add_finalizer, remove_finalizer};
use rflux_common::runtime::{EventRecorder, EventType, jittered, parse_go_duration};
use rflux_git::{GitError, Remote, Session};
use serde_json::{Value, json};

use super::auth::{SecretData, auth_from_secret, proxy_from_secret, url_redacted, validate_url};
use super::checkout::{CheckoutError, checkout, copy_include};
use super::refs::{RefError, RefSelector, Resolved};
use super::status::{self as st, Severity, StageError};
use crate::artifact::{ArtifactError, IgnoreRules, Storage, git_artifact_file_name};

/// Storage directory (lowercase kind).
pub const KIND_DIR: &str = "gitrepository";
/// Field manager / reporting controller.
pub const CONTROLLER_NAME: &str = "source-controller";

/// Shared state of the reconciler.
#[derive(Clone)]
pub struct Context {
    pub client: Client,
    pub storage: Storage,
    pub recorder: EventRecorder,
    /// `--interval-jitter-percentage`.
    pub jitter_percentage: u8,
    /// `--requeue-dependency`.
    pub requeue_dependency: Duration,
}

/// Errors returned to the controller runner (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("storage error: {0}")]
    Storage(#[from] ArtifactError),
    #[error("{0}")]
    Stage(String),
    #[error("object has no namespace")]
    NoNamespace,
}

/// Reconciles one GitRepository.
pub async fn reconcile(
    obj: Arc<GitRepository>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let ns = obj.namespace().ok_or(ReconcileError::NoNamespace)?;
    let name = obj.name_any();
    let api: Api<GitRepository> = Api::namespaced(ctx.client.clone(), &ns);

    // Deletion: remove all artifacts, then the finalizer.
    if obj.metadata.deletion_timestamp.is_some() {
        if obj.finalizers().iter().any(|f| f == FLUX_FINALIZER) {
            match ctx.storage.remove_all(KIND_DIR, &ns, &name) {
                Ok(true) => {
                    record(
                        &ctx,
                        obj.as_ref(),
                        EventType::Trace,
                        "GarbageCollectionSucceeded",
                        "garbage collected artifacts for deleted resource",
                        &[],
                    )
                    .await;
                }
                Ok(false) => {}
                Err(e) => {
                    record(
                        &ctx,
                        obj.as_ref(),
                        EventType::Warning,
                        "GarbageCollectionFailed",
                        &format!("garbage collection for deleted resource failed: {e}"),
                        &[],
                    )
                    .await;
                    return Err(e.into());
                }
            }
            remove_finalizer(&api, obj.as_ref(), FLUX_FINALIZER).await?;
        }
        return Ok(Action::await_change());
    }

    // Finalizer: add it and carry on with the patched object.
    let obj: GitRepository = match add_finalizer(&api, obj.as_ref(), FLUX_FINALIZER).await? {
        Some(patched) => patched,
        None => obj.as_ref().clone(),
    };
    let generation = obj.metadata.generation.unwrap_or(0);
    let req_at = requested_at(obj.metadata.annotations.as_ref()).map(str::to_string);

    if obj.spec.is_suspended() {
        tracing::info!("reconciliation is suspended for this object");
        if let Some(r) = &req_at {
            let mut status = obj.status.clone().unwrap_or_default();
            if status.last_handled_reconcile_at.as_deref() != Some(r) {
                status.last_handled_reconcile_at = Some(r.clone());
                patch_status(&api, &name, &status).await?;
            }
        }
        return Ok(Action::await_change());
    }

    let old_status = obj.status.clone().unwrap_or_default();
    let mut status = old_status.clone();
    let now = jiff::Timestamp::now();
    // What the API server holds (as far as this reconcile knows).
    let sent_status = if st::begin(&mut status, generation, now)
        || req_at.is_some() && req_at != old_status.last_handled_reconcile_at
    {
        patch_status(&api, &name, &status).await?;
        status.clone()
    } else {
        old_status.clone()
    };

    let outcome = pipeline(&obj, &ns, &name, &ctx, &mut status, generation).await;
    let now = jiff::Timestamp::now();
    let had_failure = st::had_failure(old_status.conditions.as_deref().unwrap_or(&[]));
    let old_digest = old_status.artifact.as_ref().map(|a| a.digest.clone());
    let result = match &outcome {
        Ok(_) => Ok(()),
        Err(e) => {
            st::record_failure(&mut status, e, generation, now);
            Err(e)
        }
    };
    st::finish(&mut status, result, generation, req_at.as_deref(), now);
    // Like Flux's patch helper: an unchanged status (a no-op poll) is not sent.
    if status != sent_status {
        patch_status(&api, &name, &status).await?;
    }

    match outcome {
        Ok(done) => {
            let art = status.artifact.clone();
            if let (Some(a), Done::Built { subject }) = (&art, &done)
                && old_digest.as_deref() != Some(a.digest.as_str())
            {
                record(
                    &ctx,
                    &obj,
                    EventType::Normal,
                    "NewArtifact",
                    &st::new_artifact_message(subject),
                    &[
                        ("source.toolkit.fluxcd.io/revision", &a.revision),
                        ("source.toolkit.fluxcd.io/digest", &a.digest),
                    ],
                )
                .await;
            } else if had_failure && let Some(a) = &art {
                record(
                    &ctx,
                    &obj,
                    EventType::Normal,
                    cond::SUCCEEDED_REASON,
                    &st::stored_message(&a.revision),
                    &[
                        ("source.toolkit.fluxcd.io/revision", &a.revision),
                        ("source.toolkit.fluxcd.io/digest", &a.digest),
                    ],
                )
                .await;
            }
            if !cond::is_ready(status.conditions.as_deref().unwrap_or(&[])) {
                let msg =
                    cond::get_message(status.conditions.as_deref().unwrap_or(&[]), cond::READY)
                        .unwrap_or("not ready")
                        .to_string();
                return Err(ReconcileError::Stage(msg));
            }
            let interval = parse_go_duration(&obj.spec.interval).unwrap_or(Duration::from_secs(60));
            Ok(Action::requeue(jittered(interval, ctx.jitter_percentage)))
        }
        Err(e) => {
            record(&ctx, &obj, EventType::Warning, e.reason, &e.message, &[]).await;
            match e.severity {
                Severity::Stalling => Ok(Action::await_change()),
                Severity::Waiting => Ok(Action::requeue(ctx.requeue_dependency)),
                Severity::Generic => Err(ReconcileError::Stage(e.message)),
            }
        }
    }
}

/// What a successful pipeline did.
enum Done {
    /// The stored artifact was kept (no change upstream).
    Unchanged,
    /// A new artifact was built from the commit with this message.
    Built { subject: String },
}

async fn record(
    ctx: &Context,
    obj: &GitRepository,
    t: EventType,
    reason: &str,
    message: &str,
    extra: &[(&str, &str)],
) {
    if let Err(e) = ctx.recorder.record(obj, t, reason, message, extra).await {
        tracing::warn!(error = %e, reason, "unable to record event");
    }
}

/// Merge-patches the status subresource; `None` optional fields are sent as `null` so they are
/// removed.
async fn patch_status(
    api: &Api<GitRepository>,
    name: &str,
    status: &GitRepositoryStatus,
) -> Result<(), kube::Error> {
    let mut value = serde_json::to_value(status).map_err(kube::Error::SerdeError)?;
    if let Value::Object(map) = &mut value {
        for key in [
            "artifact",
            "includedArtifacts",
            "observedIgnore",
            "observedRecurseSubmodules",
            "observedInclude",
            "observedSparseCheckout",
            "sourceVerificationMode",
        ] {
            map.entry(key).or_insert(Value::Null);
        }
    }
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": value })),
    )
    .await?;
    Ok(())
}

fn git_failed(e: impl std::fmt::Display) -> StageError {
    StageError::generic(
        st::FETCH_FAILED,
        st::GIT_OPERATION_FAILED,
        format!("failed to checkout and determine revision: {e}"),
    )
}

fn storage_failed(reason: &'static str, e: impl std::fmt::Display) -> StageError {
    StageError::generic(st::STORAGE_OPERATION_FAILED, reason, e.to_string())
}

async fn read_secret(client: &Client, ns: &str, name: &str) -> Result<SecretData, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let s = api.get(name).await?;
    let mut out: SecretData = s
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, v) in s.string_data.unwrap_or_default() {
        out.insert(k, v.into_bytes());
    }
    Ok(out)
}

/// The pipeline after `Reconciling` is set; mutates `status` as it goes.
async fn pipeline(
    obj: &GitRepository,
    ns: &str,
    name: &str,
    ctx: &Context,
    status: &mut GitRepositoryStatus,
    generation: i64,
) -> Result<Done, StageError> {
    let spec = &obj.spec;
    let now = jiff::Timestamp::now;

    // Storage: verify the current artifact, GC, refresh its URL.
    if let Some(api_art) = status.artifact.clone() {
        let mut stored = st::from_api_artifact(&api_art);
        let ok = ctx.storage.artifact_exists(&stored) && {
            let st2 = ctx.storage.clone();
            let check = stored.clone();
            match tokio::task::spawn_blocking(move || st2.verify_artifact(&check)).await {
                Ok(Ok(())) => true,
                Ok(Err(e)) => {
                    record(
                        ctx,
                        obj,
                        EventType::Warning,
                        "ArtifactVerificationFailed",
                        &format!("failed to verify integrity of artifact: {e}"),
                        &[],
                    )
                    .await;
                    if let Ok(p) = ctx.storage.local_path(&stored.path) {
                        let _ = std::fs::remove_file(p);
                    }
                    false
                }
                Err(_) => false,
            }
        };
        if ok {
            match ctx.storage.garbage_collect_async(&stored).await {
                Ok(deleted) if !deleted.is_empty() => {
                    record(
                        ctx,
                        obj,
                        EventType::Trace,
                        "GarbageCollectionSucceeded",
                        &format!("garbage collected {} artifacts", deleted.len()),
                        &[],
                    )
                    .await;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "garbage collection failed"),
            }
            ctx.storage.set_artifact_url(&mut stored);
            if let Some(a) = status.artifact.as_mut() {
                a.url = stored.url;
            }
        } else {
            st::artifact_missing(status, generation, now());
        }
    } else {
        st::progress(status, "building artifact", generation, now());
    }

    // Configuration that cannot work without a spec change.
    if let Err(e) = validate_url(&spec.url) {
        return Err(StageError::stalling(
            st::FETCH_FAILED,
            st::URL_INVALID,
            format!("failed to parse url '{}': {e}", url_redacted(&spec.url)),
        ));
    }
    if spec.provider() != GitProvider::Generic {
        return Err(StageError::stalling(
            st::FETCH_FAILED,
            st::INVALID_PROVIDER_CONFIGURATION,
            format!(
                "provider '{}' is not supported yet by this source-controller",
                spec.provider().as_str()
            ),
        ));
    }
    // [spec.verify] Drop a previous SourceVerified=False (recomputed below, after the fetch).
    st::reset_verification(status, spec);
    let timeout = parse_go_duration(spec.timeout()).map_err(|e| {
        StageError::stalling(
            st::FETCH_FAILED,
            st::GIT_OPERATION_FAILED,
            format!("invalid timeout '{}': {e}", spec.timeout()),
        )
    })?;

    // Auth.
    let secret = match &spec.secret_ref {
        Some(r) => Some(read_secret(&ctx.client, ns, &r.name).await.map_err(|e| {
            StageError::generic(
                st::FETCH_FAILED,
                st::AUTHENTICATION_FAILED,
                format!("failed to get secret '{ns}/{}': {e}", r.name),
            )
        })?),
        None => None,
    };
    let (auth, tls) = auth_from_secret(&spec.url, secret.as_ref()).map_err(|e| {
        StageError::generic(
            st::FETCH_FAILED,
            st::AUTHENTICATION_FAILED,
            format!("failed to configure authentication options: {e}"),
        )
    })?;
    let mut remote = Remote::new(spec.url.clone())
        .with_auth(auth)
        .with_tls(tls)
        .with_timeout(timeout);
    if let Some(r) = &spec.proxy_secret_ref {
        let data = read_secret(&ctx.client, ns, &r.name).await.map_err(|e| {
            StageError::generic(
                st::FETCH_FAILED,
                st::AUTHENTICATION_FAILED,
                format!("failed to get secret '{ns}/{}': {e}", r.name),
            )
        })?;
        let proxy = proxy_from_secret(&data).map_err(|e| {
            StageError::generic(
                st::FETCH_FAILED,
                st::AUTHENTICATION_FAILED,
                format!("failed to configure proxy options: {e}"),
            )
        })?;
        remote = remote.with_proxy(proxy);
    }

    // Includes (dependencies): their artifacts must exist.
    let includes = spec.include.clone().unwrap_or_default();
    let mut included: Vec<ApiArtifact> = Vec::new();
    let git_api: Api<GitRepository> = Api::namespaced(ctx.client.clone(), ns);
    for inc in &includes {
        let dep = git_api.get(&inc.repository.name).await.map_err(|e| {
            StageError::waiting(
                st::INCLUDE_UNAVAILABLE,
                st::NOT_FOUND,
                format!(
                    "could not get resource for include '{}': {e}",
                    inc.repository.name
                ),
            )
        })?;
        let art = dep.status.and_then(|s| s.artifact).ok_or_else(|| {
            StageError::waiting(
                st::INCLUDE_UNAVAILABLE,
                st::NO_ARTIFACT,
                format!(
                    "no artifact available for include '{}'",
                    inc.repository.name
                ),
            )
        })?;
        included.push(art);
    }
    {
        let conds = status.conditions.get_or_insert_with(Vec::new);
        cond::delete(conds, st::INCLUDE_UNAVAILABLE);
    }
    let includes_changed = status.artifact.is_some() && {
        let stored = status.included_artifacts.as_deref().unwrap_or(&[]);
        stored.len() != included.len()
            || stored
                .iter()
                .zip(&included)
                .any(|(a, b)| a.digest != b.digest)
            || st::observed_fields_changed(spec, status) && spec.include != status.observed_include
    };
    if includes_changed {
        let conds = status.conditions.get_or_insert_with(Vec::new);
        cond::mark_true(
            conds,
            st::ARTIFACT_OUTDATED,
            st::INCLUDE_CHANGE,
            "included artifacts differ from last observed includes",
            Some(generation),
            now(),
        );
        st::progress(
            status,
            "building artifact: included artifacts differ from last observed includes",
            generation,
            now(),
        );
    }

    // Resolve the reference.
    let selector = RefSelector::from_spec(spec.reference.as_ref());
    let mut session = Session::connect(&remote)
        .await
        .map_err(git_failed_remote(&spec.url))?;
    let resolved: Resolved = if selector.needs_refs() {
        let prefixes = selector.prefixes();
        let prefix_refs: Vec<&str> = prefixes.iter().map(String::as_str).collect();
        let refs = session
            .ls_refs(&prefix_refs)
            .await
            .map_err(git_failed_remote(&spec.url))?;
        match selector.resolve(&refs) {
            Ok(r) => r,
            Err(RefError::NotFound(_)) if refs.is_empty() => {
                let all = session
                    .ls_refs(&[])
                    .await
                    .map_err(git_failed_remote(&spec.url))?;
                if all.is_empty() {
                    session.close().await;
                    return Err(StageError::generic(
                        st::FETCH_FAILED,
                        st::EMPTY_GIT_REPOSITORY,
                        "git repository is empty".into(),
                    ));
                }
                session.close().await;
                return Err(git_failed(
                    selector
                        .resolve(&refs)
                        .err()
                        .unwrap_or(RefError::EmptyRepository),
                ));
            }
            Err(e) => {
                session.close().await;
                return Err(git_failed(e));
            }
        }
    } else {
        selector.resolve(&[]).map_err(git_failed)?
    };
    let revision = resolved.revision();

    // Skip the fetch when nothing changed.
    if st::artifact_up_to_date(spec, status, &revision, &included) {
        session.close().await;
        st::keep_artifact(status, &revision, generation, now());
        record(
            ctx,
            obj,
            EventType::Trace,
            "GitOperationSucceeded",
            &format!("no changes since last reconciliation: observed revision '{revision}'"),
            &[],
        )
        .await;
        return Ok(Done::Unchanged);
    }
    if status
        .artifact
        .as_ref()
        .is_some_and(|a| !rflux_common::api::meta::revisions_equal(&a.revision, &revision))
    {
        st::new_revision(status, &revision, generation, now());
    }

    // Fetch.
    let fetched = session.fetch_commit(&resolved.want).await;
    session.close().await;
    let fetched = fetched.map_err(git_failed_remote(&spec.url))?;
    // A bare commit or commit+branch: the revision names the fetched commit.
    let revision = if fetched.id != resolved.commit {
        super::refs::revision_string(&resolved.name, &fetched.id.to_hex())
    } else {
        revision
    };
    let subject = fetched.commit.message.clone();

    // [spec.verify] Signature verification of the fetched commit and/or tag (verify.rs).
    if let Some(v) = &spec.verify {
        let keys = read_secret(&ctx.client, ns, &v.secret_ref.name)
            .await
            .map_err(|e| {
                StageError::generic(
                    st::SOURCE_VERIFIED,
                    st::VERIFICATION_ERROR,
                    format!("public keys secret error: {e}"),
                )
            })?;
        let mode = v.effective_mode();
        let message =
            super::verify::verify_fetched(mode, &selector, &resolved.name, &fetched, &keys)
                .map_err(|e| st::verification_failed(&e))?;
        st::source_verified(status, mode, &message, generation, now());
        record(
            ctx,
            obj,
            EventType::Trace,
            cond::SUCCEEDED_REASON,
            &message,
            &[],
        )
        .await;
    }

    // Checkout into a temp dir, then copy includes.
    let tmp = tempfile::Builder::new()
        .prefix(&format!("{KIND_DIR}-{ns}-{name}-"))
        .tempdir()
        .map_err(|e| {
            storage_failed(
                st::DIRECTORY_CREATION_FAILED,
                format!("failed to create temporary working directory: {e}"),
            )
        })?;
    let dir = tmp.path().to_path_buf();
    let sparse = spec.sparse_checkout.clone().unwrap_or_default();
    let recurse = spec.recurse_submodules.unwrap_or(false);
    let mut local_includes = Vec::new();
    for (inc, art) in includes.iter().zip(&included) {
        let path = ctx
            .storage
            .local_path(&art.path)
            .map_err(|e| storage_failed(st::ARCHIVE_OPERATION_FAILED, e))?;
        local_includes.push((
            path,
            inc.from_path().to_string(),
            inc.to_path().to_string(),
            inc.repository.name.clone(),
        ));
    }
    // The tree, and with recurseSubmodules its submodules (fetched here), then the includes.
    checkout(fetched, &remote, dir.clone(), sparse, recurse)
        .await
        .map_err(git_failed)?;
    let dir2 = dir.clone();
    let copied = tokio::task::spawn_blocking(move || -> Result<(), (CheckoutError, String)> {
        for (archive, from, to, name) in &local_includes {
            copy_include(archive, from, &dir2, to).map_err(|e| (e, name.clone()))?;
        }
        Ok(())
    })
    .await
    .map_err(|e| git_failed(format!("checkout task failed: {e}")))?;
    if let Err((e, inc_name)) = copied {
        return Err(StageError::generic(
            st::STORAGE_OPERATION_FAILED,
            "CopyFailure",
            format!("failed to copy '{inc_name}' include: {e}"),
        ));
    }

    // Package and store.
    let rules = IgnoreRules::load(&dir, spec.ignore.as_deref()).map_err(|e| {
        StageError::generic(
            st::STORAGE_OPERATION_FAILED,
            "SourceIgnoreError",
            format!("failed to load source ignore patterns: {e}"),
        )
    })?;
    let commit_hex = fetched_commit_hex(&revision);
    let artifact = ctx
        .storage
        .new_artifact_for(
            KIND_DIR,
            ns,
            name,
            &revision,
            &git_artifact_file_name(&commit_hex),
        )
        .map_err(|e| storage_failed(st::ARCHIVE_OPERATION_FAILED, e))?;
    let artifact = ctx
        .storage
        .archive_async(artifact, dir, rules)
        .await
        .map_err(|e| {
            storage_failed(
                st::ARCHIVE_OPERATION_FAILED,
                format!("unable to archive artifact to storage: {e}"),
            )
        })?;
    drop(tmp);
    if let Err(e) = ctx.storage.garbage_collect_async(&artifact).await {
        tracing::warn!(error = %e, "garbage collection failed");
    }
    st::artifact_stored(
        status,
        spec,
        st::to_api_artifact(&artifact, now()),
        included,
        generation,
        now(),
    );
    Ok(Done::Built { subject })
}

fn fetched_commit_hex(revision: &str) -> String {
    super::refs::revision_commit(revision)
        .unwrap_or(revision)
        .to_string()
}

fn git_failed_remote(url: &str) -> impl Fn(GitError) -> StageError + '_ {
    move |e| git_failed(format!("unable to clone '{}': {e}", url_redacted(url)))
}
