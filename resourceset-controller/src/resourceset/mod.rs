//! The ResourceSet reconciler (Flux Operator's, issue 19). [`reconcile`] handles deletion and
//! the `reconcile: disabled` annotation, then runs the stages of [`pipeline`] (dependsOn →
//! inputs → build → prepare → apply step by step → garbage collection → wait) and writes the
//! status, the event and the requeue.
//!
//! | file | what |
//! |---|---|
//! | `pipeline.rs` | the stages, in order |
//! | `info.rs` | the `flux_resourceset_info` gauge |
//! | `prepare.rs` | owner labels, `commonMetadata`, cleanup, the revision (pure) |
//! | `provider_labels.rs` | which ResourceSets a provider event concerns (also by its former labels) |
//! | `recreate.rs` | `recreateOnFailure`: failed Jobs deleted before their step |
//! | `sources.rs` | `copyFrom`, `convertKubeConfigFrom`, `checksumFrom` (reads the cluster) |
//! | `status.rs` | history and messages (pure) |

pub(crate) mod context;
pub mod info;
mod outcome;
mod pipeline;
pub mod prepare;
mod provider_labels;
pub mod recreate;
pub mod sources;
pub mod status;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use rflux_common::api::resourceset::{
    FINALIZER, INITIALIZED_DISABLED_MSG, RECONCILIATION_DISABLED_REASON,
    RECONCILIATION_FAILED_REASON, RECONCILIATION_SUCCEEDED_REASON, ResourceSet,
};
use rflux_common::api::resourcesetinputprovider::ResourceSetInputProvider;
use rflux_common::runtime::conditions as cond;
use rflux_common::runtime::controller::{
    ControllerSettings, no_requeue, requeue_dependency, requeue_success, run_controller_with,
};
use rflux_common::runtime::finalizers::{add_finalizer, remove_finalizer};
use rflux_common::runtime::metrics::ControllerMetrics;
use rflux_common::runtime::{EventType, parse_go_duration};
use tokio_util::sync::CancellationToken;

pub use context::{Context, owner_of};
use context::{event, patch_status};
pub use outcome::{Outcome, StageFailure};

/// Errors that make the runner retry with backoff (stage failures are in the status).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("ResourceSet has no namespace")]
    NoNamespace,
    /// A stage failed; the status says why (Flux Operator retries with exponential backoff).
    #[error("{0}")]
    Failed(String),
}

/// Runs the ResourceSet controller until `stop`.
pub async fn run_resourceset_controller(
    api: Api<ResourceSet>,
    settings: ControllerSettings,
    metrics: ControllerMetrics,
    retry: (Duration, Duration),
    ctx: Arc<Context>,
    stop: CancellationToken,
) {
    ctx.info.register(metrics.metrics().registry());
    let providers: Api<ResourceSetInputProvider> = Api::all(ctx.client.clone());
    let config_maps: Api<PartialObjectMeta<ConfigMap>> = Api::all(ctx.client.clone());
    let secrets: Api<PartialObjectMeta<Secret>> = Api::all(ctx.client.clone());
    let selector = ctx.watch_configs_label_selector.trim().to_string();
    let watching = ctx.clone();
    run_controller_with(
        api,
        settings,
        metrics,
        retry.0,
        retry.1,
        ctx,
        reconcile,
        stop,
        move |c| {
            // A labelled ConfigMap or Secret a ResourceSet read (copyFrom,
            // convertKubeConfigFrom, checksumFrom) reconciles it when it changes.
            let c = if selector.is_empty() {
                c
            } else {
                let config = || watcher::Config::default().labels(&selector);
                let (a, b) = (watching.clone(), watching.clone());
                c.watches(config_maps, config(), move |m| readers(&a, "ConfigMap", &m))
                    .watches(secrets, config(), move |m| readers(&b, "Secret", &m))
            };
            // A provider that changes (exports, appears, goes) reconciles the ResourceSets
            // of its namespace that read it, and, when its labels changed, those that
            // selected it by its former labels.
            let store = c.store();
            let seen = provider_labels::SeenLabels::default();
            c.watches(providers, watcher::Config::default(), move |p| {
                let ns = p.namespace().unwrap_or_default();
                let name = p.name_any();
                let before = seen.swap(&ns, &name, p.labels());
                store
                    .state()
                    .into_iter()
                    .filter(|rs| {
                        rs.namespace().as_deref() == Some(ns.as_str())
                            && provider_labels::concerns(rs, &name, p.labels(), before.as_ref())
                    })
                    .map(|rs| ObjectRef::from_obj(rs.as_ref()))
                    .collect::<Vec<_>>()
            })
        },
    )
    .await;
}

/// The ResourceSets that read the ConfigMap or Secret `m`.
fn readers<K: kube::Resource>(
    ctx: &Context,
    kind: &str,
    m: &PartialObjectMeta<K>,
) -> Vec<ObjectRef<ResourceSet>> {
    let reference = format!(
        "{kind}/{}/{}",
        m.metadata.namespace.as_deref().unwrap_or_default(),
        m.metadata.name.as_deref().unwrap_or_default()
    );
    ctx.readers_of(&reference)
        .into_iter()
        .map(|(ns, name)| ObjectRef::new(&name).within(&ns))
        .collect()
}

/// `reconcileEvery` / `reconcileTimeout` with their defaults when unparsable.
fn durations(rs: &ResourceSet) -> (Duration, Duration) {
    let parse =
        |s: &str, default: u64| parse_go_duration(s).unwrap_or(Duration::from_secs(default));
    (
        parse(rs.reconcile_every(), 3600),
        parse(rs.reconcile_timeout(), 300),
    )
}

/// Reconciles one ResourceSet.
pub async fn reconcile(obj: Arc<ResourceSet>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let rs = obj.as_ref();
    let ns = rs.namespace().ok_or(ReconcileError::NoNamespace)?;
    let api: Api<ResourceSet> = Api::namespaced(ctx.client.clone(), &ns);
    if rs.meta().deletion_timestamp.is_some() {
        pipeline::finalize(&ctx, rs).await;
        ctx.info.delete(&ns, &rs.name_any());
        ctx.forget_reads(&ns, &rs.name_any());
        remove_finalizer(&api, rs, FINALIZER).await?;
        return Ok(no_requeue());
    }
    let fresh = !rs.finalizers().iter().any(|f| f == FINALIZER);
    if fresh {
        add_finalizer(&api, rs, FINALIZER).await?;
    }
    let mut status = rs.status.clone().unwrap_or_default();
    let generation = rs.meta().generation;
    let now = jiff::Timestamp::now();
    if fresh && !rs.is_disabled() {
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        status::initialize(conditions, generation, now);
    }
    if rs.is_disabled() {
        event(
            &ctx,
            rs,
            EventType::Warning,
            RECONCILIATION_DISABLED_REASON,
            "Reconciliation is disabled",
        )
        .await;
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        if cond::get(conditions, cond::READY).is_none() {
            cond::mark_ready(
                conditions,
                RECONCILIATION_DISABLED_REASON,
                INITIALIZED_DISABLED_MSG,
                generation,
                now,
            );
            patch_status(&api, rs, &status).await?;
        }
        ctx.info.record(rs, &status);
        return Ok(no_requeue());
    }
    if let Some(at) = cond::requested_at(Some(rs.annotations())) {
        status.last_handled_reconcile_at = Some(at.to_string());
    }
    let start = Instant::now();
    let (every, timeout) = durations(rs);
    let mut p = pipeline::Pipeline::new(&ctx, rs, &api, status, timeout);
    let outcome = p.run().await;
    let counts = p.counts.take();
    let mut status = p.status;
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let now = jiff::Timestamp::now();
    match outcome {
        Ok(done) => {
            let message = status::finished_message(start.elapsed());
            cond::mark_ready(
                conditions,
                RECONCILIATION_SUCCEEDED_REASON,
                &message,
                generation,
                now,
            );
            status::record(
                status.history.get_or_insert_with(Vec::new),
                status::Record {
                    digest: done.revision.clone(),
                    status: RECONCILIATION_SUCCEEDED_REASON.into(),
                    duration: start.elapsed(),
                    metadata: Some(done.counts.clone()),
                },
                now,
            );
            status.last_applied_revision = Some(done.revision.clone());
            patch_status(&api, rs, &status).await?;
            ctx.info.record(rs, &status);
            event(
                &ctx,
                rs,
                EventType::Normal,
                RECONCILIATION_SUCCEEDED_REASON,
                &message,
            )
            .await;
            Ok(requeue_success(every, ctx.jitter_percentage))
        }
        Err(StageFailure::Dependency { message, changed }) => {
            cond::delete(conditions, cond::STALLED);
            cond::mark_false(
                conditions,
                cond::READY,
                pipeline::DEPENDENCY_NOT_READY,
                &message,
                generation,
                now,
            );
            status::mark_retrying(conditions);
            patch_status(&api, rs, &status).await?;
            ctx.info.record(rs, &status);
            if changed {
                event(
                    &ctx,
                    rs,
                    EventType::Normal,
                    pipeline::DEPENDENCY_NOT_READY,
                    &message,
                )
                .await;
            }
            Ok(requeue_dependency(ctx.requeue_dependency))
        }
        Err(StageFailure::Stalled {
            reason,
            message,
            digest,
        }) => {
            cond::mark_stalled(conditions, &reason, &message, generation, now);
            if let Some(digest) = digest {
                status::record(
                    status.history.get_or_insert_with(Vec::new),
                    status::Record {
                        digest,
                        status: reason.clone(),
                        duration: start.elapsed(),
                        metadata: None,
                    },
                    now,
                );
            }
            patch_status(&api, rs, &status).await?;
            ctx.info.record(rs, &status);
            event(&ctx, rs, EventType::Warning, &reason, &message).await;
            Ok(no_requeue())
        }
        Err(StageFailure::Failed { message, digest }) => {
            let message = format!("reconciliation failed: {message}");
            cond::delete(conditions, cond::STALLED);
            cond::mark_false(
                conditions,
                cond::READY,
                RECONCILIATION_FAILED_REASON,
                &message,
                generation,
                now,
            );
            status::mark_retrying(conditions);
            if let Some(digest) = digest {
                status::record(
                    status.history.get_or_insert_with(Vec::new),
                    status::Record {
                        digest,
                        status: RECONCILIATION_FAILED_REASON.into(),
                        duration: start.elapsed(),
                        metadata: counts,
                    },
                    now,
                );
            }
            patch_status(&api, rs, &status).await?;
            ctx.info.record(rs, &status);
            event(
                &ctx,
                rs,
                EventType::Warning,
                RECONCILIATION_FAILED_REASON,
                &message,
            )
            .await;
            Err(ReconcileError::Failed(message))
        }
        Err(StageFailure::Kube(e)) => Err(ReconcileError::Kube(e)),
    }
}
