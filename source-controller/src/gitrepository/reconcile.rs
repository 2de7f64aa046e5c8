//! The GitRepository reconcile around the pipeline: deletion (artifacts, then the finalizer),
//! the finalizer, suspension, then the pipeline of named stages (`stages.rs`) between a `Reconciling`
//! status and the Ready summary, then events and the requeue.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use rflux_common::api::gitrepository::{GitRepository, GitRepositoryStatus};
use rflux_common::runtime::conditions::{self as cond, requested_at};
use rflux_common::runtime::finalizers::{FLUX_FINALIZER, add_finalizer, remove_finalizer};
use rflux_common::runtime::{EventType, Severity, StageError, jittered, parse_go_duration};
use serde_json::{Value, json};

use super::context::record;
pub use super::context::{CONTROLLER_NAME, Context, KIND_DIR};
use super::stages::{Done, Run, pipeline};
use super::status as st;
use crate::artifact::ArtifactError;

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

    if obj.metadata.deletion_timestamp.is_some() {
        return reconcile_delete(&api, &obj, &ctx, &ns, &name).await;
    }

    // Finalizer: add it and carry on with the patched object.
    let obj: GitRepository = match add_finalizer(&api, obj.as_ref(), FLUX_FINALIZER).await? {
        Some(patched) => patched,
        None => obj.as_ref().clone(),
    };
    let generation = obj.metadata.generation.unwrap_or(0);
    let req_at = requested_at(obj.metadata.annotations.as_ref()).map(str::to_string);

    if obj.spec.is_suspended() {
        return reconcile_suspended(&api, &obj, &name, req_at.as_deref()).await;
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

    let run = Run {
        obj: &obj,
        ns: &ns,
        name: &name,
        ctx: &ctx,
        generation,
    };
    let outcome = pipeline(&run, &mut status).await;
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
    report(
        &ctx,
        &obj,
        &status,
        outcome,
        old_digest.as_deref(),
        had_failure,
    )
    .await
}

/// Deletion: all artifacts of the object are removed, then the finalizer.
async fn reconcile_delete(
    api: &Api<GitRepository>,
    obj: &GitRepository,
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<Action, ReconcileError> {
    if !obj.finalizers().iter().any(|f| f == FLUX_FINALIZER) {
        return Ok(Action::await_change());
    }
    match ctx.storage.remove_all(KIND_DIR, ns, name) {
        Ok(true) => {
            record(
                ctx,
                obj,
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
                ctx,
                obj,
                EventType::Warning,
                "GarbageCollectionFailed",
                &format!("garbage collection for deleted resource failed: {e}"),
                &[],
            )
            .await;
            return Err(e.into());
        }
    }
    remove_finalizer(api, obj, FLUX_FINALIZER).await?;
    Ok(Action::await_change())
}

/// A suspended object is not reconciled; a reconcile request is still acknowledged.
async fn reconcile_suspended(
    api: &Api<GitRepository>,
    obj: &GitRepository,
    name: &str,
    requested_at: Option<&str>,
) -> Result<Action, ReconcileError> {
    tracing::info!("reconciliation is suspended for this object");
    if let Some(r) = requested_at {
        let mut status = obj.status.clone().unwrap_or_default();
        if status.last_handled_reconcile_at.as_deref() != Some(r) {
            status.last_handled_reconcile_at = Some(r.to_string());
            patch_status(api, name, &status).await?;
        }
    }
    Ok(Action::await_change())
}

/// The events for the pipeline's outcome and what happens next: a new artifact (or recovery
/// from a failure) is announced and the object requeued at its interval; a failure is
/// announced and retried as its severity says.
async fn report(
    ctx: &Context,
    obj: &GitRepository,
    status: &GitRepositoryStatus,
    outcome: Result<Done, StageError>,
    old_digest: Option<&str>,
    had_failure: bool,
) -> Result<Action, ReconcileError> {
    let done = match outcome {
        Ok(done) => done,
        Err(e) => {
            record(ctx, obj, EventType::Warning, e.reason, &e.message, &[]).await;
            return match e.severity {
                Severity::Stalling => Ok(Action::await_change()),
                // Stalled, but the fix is outside the object: look again at its interval.
                Severity::Misconfigured => Ok(Action::requeue(interval(obj, ctx))),
                Severity::Waiting => Ok(Action::requeue(ctx.requeue_dependency)),
                Severity::Superseded => Ok(Action::requeue(std::time::Duration::ZERO)),
                Severity::Generic => Err(ReconcileError::Stage(e.message)),
            };
        }
    };
    if let Some(a) = &status.artifact {
        let annotations = [
            ("source.toolkit.fluxcd.io/revision", a.revision.as_str()),
            ("source.toolkit.fluxcd.io/digest", a.digest.as_str()),
        ];
        if let Done::Built { subject } = &done
            && old_digest != Some(a.digest.as_str())
        {
            let message = st::new_artifact_message(subject);
            record(
                ctx,
                obj,
                EventType::Normal,
                "NewArtifact",
                &message,
                &annotations,
            )
            .await;
        } else if had_failure {
            let message = st::stored_message(&a.revision);
            let reason = cond::SUCCEEDED_REASON;
            record(ctx, obj, EventType::Normal, reason, &message, &annotations).await;
        }
    }
    let conditions = status.conditions.as_deref().unwrap_or(&[]);
    if !cond::is_ready(conditions) {
        let msg = cond::get_message(conditions, cond::READY).unwrap_or("not ready");
        return Err(ReconcileError::Stage(msg.to_string()));
    }
    Ok(Action::requeue(interval(obj, ctx)))
}

/// `spec.interval`, jittered.
fn interval(obj: &GitRepository, ctx: &Context) -> Duration {
    let interval = parse_go_duration(&obj.spec.interval).unwrap_or(Duration::from_secs(60));
    jittered(interval, ctx.jitter_percentage)
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
