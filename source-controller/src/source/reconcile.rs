//! The reconcile every source kind runs around its own pipeline (Flux's source reconcilers share
//! it): deletion (artifacts, then the finalizer), the finalizer, suspension, a `Reconciling`
//! status, the kind's stages, the Ready summary, then events and the requeue.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use rflux_common::runtime::conditions::{self as cond, requested_at};
use rflux_common::runtime::finalizers::{FLUX_FINALIZER, add_finalizer, remove_finalizer};
use rflux_common::runtime::{EventType, Severity, StageError, jittered, parse_go_duration};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::context::{Context, record};
use super::status::{self as st, SourceStatus};
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

/// A source kind the shared reconcile drives.
pub trait SourceObject:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    type Status: SourceStatus + Clone + Default + PartialEq + Serialize + Send + Sync;
    /// Storage directory (lowercase kind).
    const KIND_DIR: &'static str;
    /// Optional status fields sent as `null` when unset, so a merge patch removes them.
    const NULLABLE_STATUS: &'static [&'static str];

    fn status(&self) -> Option<&Self::Status>;
    fn is_suspended(&self) -> bool;
    fn interval(&self) -> &str;
}

/// One reconcile of one object: what every stage reads.
pub struct Run<'a, K> {
    pub obj: &'a K,
    pub ns: &'a str,
    pub name: &'a str,
    pub ctx: &'a Context,
    pub generation: i64,
}

impl<K: SourceObject> Run<'_, K> {
    /// Records an event about the object.
    pub async fn event(&self, t: EventType, reason: &str, message: &str) {
        record(self.ctx, self.obj, t, reason, message, &[]).await;
    }
}

/// What a successful pipeline did: kept the stored artifact (`None`), or built a new one,
/// announced by a `NewArtifact` event with this message.
pub type Built = Option<String>;

/// Runs the kind's `pipeline` inside the shared reconcile.
pub async fn reconcile_source<K, F>(
    obj: Arc<K>,
    ctx: Arc<Context>,
    pipeline: F,
) -> Result<Action, ReconcileError>
where
    K: SourceObject,
    F: for<'a> FnOnce(
        &'a Run<'a, K>,
        &'a mut K::Status,
    ) -> BoxFuture<'a, Result<Built, StageError>>,
{
    let ns = obj.namespace().ok_or(ReconcileError::NoNamespace)?;
    let name = obj.name_any();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);

    if obj.meta().deletion_timestamp.is_some() {
        return reconcile_delete(&api, obj.as_ref(), &ctx, &ns, &name).await;
    }
    // Finalizer: add it and carry on with the patched object.
    let obj: K = match add_finalizer(&api, obj.as_ref(), FLUX_FINALIZER).await? {
        Some(patched) => patched,
        None => obj.as_ref().clone(),
    };
    let generation = obj.meta().generation.unwrap_or(0);
    let req_at = requested_at(obj.meta().annotations.as_ref()).map(str::to_string);
    if obj.is_suspended() {
        return reconcile_suspended(&api, &obj, &name, req_at.as_deref()).await;
    }

    let old_status = obj.status().cloned().unwrap_or_default();
    let mut status = old_status.clone();
    let now = jiff::Timestamp::now();
    let request_new =
        req_at.is_some() && req_at.as_deref() != old_status.last_handled_reconcile_at();
    // What the API server holds (as far as this reconcile knows).
    let sent_status = if st::begin(&mut status, generation, now) || request_new {
        patch_status::<K>(&api, &name, &status).await?;
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
    let had_failure = st::had_failure::<K::Status>(old_status.conditions());
    let old_digest = old_status.artifact().map(|a| a.digest.clone());
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
        patch_status::<K>(&api, &name, &status).await?;
    }
    report(
        &ctx,
        &obj,
        status,
        outcome,
        old_digest.as_deref(),
        had_failure,
    )
    .await
}

/// Deletion: all artifacts of the object are removed, then the finalizer.
async fn reconcile_delete<K: SourceObject>(
    api: &Api<K>,
    obj: &K,
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<Action, ReconcileError> {
    if !obj.finalizers().iter().any(|f| f == FLUX_FINALIZER) {
        return Ok(Action::await_change());
    }
    match ctx.storage.remove_all(K::KIND_DIR, ns, name) {
        Ok(true) => {
            let msg = "garbage collected artifacts for deleted resource";
            record(
                ctx,
                obj,
                EventType::Trace,
                "GarbageCollectionSucceeded",
                msg,
                &[],
            )
            .await;
        }
        Ok(false) => {}
        Err(e) => {
            let msg = format!("garbage collection for deleted resource failed: {e}");
            record(
                ctx,
                obj,
                EventType::Warning,
                "GarbageCollectionFailed",
                &msg,
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
async fn reconcile_suspended<K: SourceObject>(
    api: &Api<K>,
    obj: &K,
    name: &str,
    requested_at: Option<&str>,
) -> Result<Action, ReconcileError> {
    tracing::info!("reconciliation is suspended for this object");
    if let Some(r) = requested_at {
        let mut status = obj.status().cloned().unwrap_or_default();
        if status.last_handled_reconcile_at() != Some(r) {
            *status.last_handled_reconcile_at_mut() = Some(r.to_string());
            patch_status::<K>(api, name, &status).await?;
        }
    }
    Ok(Action::await_change())
}

/// The events for the pipeline's outcome and what happens next: a new artifact (or recovery
/// from a failure) is announced and the object requeued at its interval; a failure is
/// announced and retried as its severity says.
async fn report<K: SourceObject>(
    ctx: &Context,
    obj: &K,
    status: K::Status,
    outcome: Result<Built, StageError>,
    old_digest: Option<&str>,
    had_failure: bool,
) -> Result<Action, ReconcileError> {
    let built = match outcome {
        Ok(built) => built,
        Err(e) => {
            record(ctx, obj, EventType::Warning, e.reason, &e.message, &[]).await;
            return match e.severity {
                Severity::Stalling => Ok(Action::await_change()),
                // Stalled, but the fix is outside the object: look again at its interval.
                Severity::Misconfigured => Ok(Action::requeue(interval(obj, ctx))),
                Severity::Waiting => Ok(Action::requeue(ctx.requeue_dependency)),
                Severity::Superseded => Ok(Action::requeue(Duration::ZERO)),
                Severity::Generic => Err(ReconcileError::Stage(e.message)),
            };
        }
    };
    if let Some(a) = status.artifact() {
        let annotations = [
            ("source.toolkit.fluxcd.io/revision", a.revision.as_str()),
            ("source.toolkit.fluxcd.io/digest", a.digest.as_str()),
        ];
        match built {
            Some(message) if old_digest != Some(a.digest.as_str()) => {
                record(
                    ctx,
                    obj,
                    EventType::Normal,
                    "NewArtifact",
                    &message,
                    &annotations,
                )
                .await;
            }
            _ if had_failure => {
                let message = cond::get_message(status.conditions(), st::ARTIFACT_IN_STORAGE)
                    .unwrap_or_default();
                let reason = cond::SUCCEEDED_REASON;
                record(ctx, obj, EventType::Normal, reason, message, &annotations).await;
            }
            _ => {}
        }
    }
    let conditions = status.conditions();
    if !cond::is_ready(conditions) {
        let msg = cond::get_message(conditions, cond::READY).unwrap_or("not ready");
        return Err(ReconcileError::Stage(msg.to_string()));
    }
    Ok(Action::requeue(interval(obj, ctx)))
}

/// `spec.interval`, jittered.
fn interval<K: SourceObject>(obj: &K, ctx: &Context) -> Duration {
    let interval = parse_go_duration(obj.interval()).unwrap_or(Duration::from_secs(60));
    jittered(interval, ctx.jitter_percentage)
}

/// Merge-patches the status subresource; unset optional fields are sent as `null` so they are
/// removed.
async fn patch_status<K: SourceObject>(
    api: &Api<K>,
    name: &str,
    status: &K::Status,
) -> Result<(), kube::Error> {
    let mut value = serde_json::to_value(status).map_err(kube::Error::SerdeError)?;
    if let Value::Object(map) = &mut value {
        for key in K::NULLABLE_STATUS {
            map.entry(*key).or_insert(Value::Null);
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
