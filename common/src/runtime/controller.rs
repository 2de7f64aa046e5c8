//! Runs a kube-runtime `Controller` the way controller-runtime runs Flux's reconcilers:
//! `--concurrent` workers, Flux's watch predicate (generation changed OR
//! `reconcile.fluxcd.io/requestedAt` changed), `--watch-label-selector` / namespace scoping,
//! per-object exponential backoff on errors, controller-runtime metrics, a reconcile span with
//! the controller-runtime log keys, and `gotk_reconcile_duration_seconds`.

use std::collections::hash_map::DefaultHasher;
use std::fmt::Debug;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::conditions::RECONCILE_REQUESTED_AT_ANNOTATION;
use super::jitter::RetryBackoff;
use super::logging::{new_reconcile_id, reconcile_span};
use super::metrics::{ControllerMetrics, ReconcileResult};
use super::sharding::{self, Shards};

/// Flux's watch predicate as a kube-runtime predicate hash: changes when the generation or the
/// `reconcile.fluxcd.io/requestedAt` annotation changes. Flux Operator's kinds
/// (`fluxcd.controlplane.io`) reconcile on any annotation change instead (its `reconcile:
/// disabled`, `reconcileEvery`, `force` annotations act at once).
pub fn flux_predicate<K: Resource<DynamicType = ()>>(obj: &K) -> Option<u64> {
    let mut h = DefaultHasher::new();
    predicates::generation(obj).hash(&mut h);
    if K::group(&()) == "fluxcd.controlplane.io" {
        obj.meta().annotations.hash(&mut h);
    } else {
        obj.meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(RECONCILE_REQUESTED_AT_ANNOTATION))
            .hash(&mut h);
    }
    obj.meta().deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

/// Drops what no reconciler reads from an object before it is cached (kube's reflector store keeps
/// every watched object): `metadata.managedFields` and the
/// `kubectl.kubernetes.io/last-applied-configuration` annotation, often most of an object's size.
pub fn strip_for_cache<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// How one controller is run.
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// Lowercase kind, the `controller` label (`gitrepository`, `kustomization`).
    pub name: String,
    /// API group (for the log key `controllerGroup`).
    pub group: String,
    /// Kind (for `controllerKind` and `gotk_reconcile_duration_seconds{kind}`).
    pub kind: String,
    /// `--concurrent`.
    pub concurrency: u16,
    /// `--watch-label-selector` (empty: none).
    pub label_selector: String,
}

/// Wraps the caller's context with the runner's bookkeeping.
pub struct RunnerContext<K: Resource, Ctx> {
    /// Caller's context.
    pub inner: Arc<Ctx>,
    settings: ControllerSettings,
    metrics: ControllerMetrics,
    backoff: RetryBackoff<ObjectRef<K>>,
    shards: Option<Shards>,
}

/// Maps a reconcile outcome to controller-runtime's `result` label.
pub fn result_label<E>(res: &Result<Action, E>) -> ReconcileResult {
    match res {
        Err(_) => ReconcileResult::Error,
        Ok(a) if *a == Action::await_change() => ReconcileResult::Success,
        Ok(a) if *a == Action::requeue(std::time::Duration::ZERO) => ReconcileResult::Requeue,
        Ok(_) => ReconcileResult::RequeueAfter,
    }
}

/// Runs the controller until `shutdown` fires; in-flight reconciles then get [`SHUTDOWN_DRAIN_GRACE`] to finish.
///
/// `reconcile(obj, ctx)` returns the next [`Action`] (use
/// [`jittered`](super::jitter::jittered) for the success interval) or an error, which is retried
/// with exponential backoff between `min_retry` and `max_retry`.
#[allow(clippy::too_many_arguments)]
pub async fn run_controller<K, Ctx, F, Fut, E>(
    api: Api<K>,
    settings: ControllerSettings,
    metrics: ControllerMetrics,
    min_retry: std::time::Duration,
    max_retry: std::time::Duration,
    ctx: Arc<Ctx>,
    reconcile: F,
    shutdown: CancellationToken,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    Ctx: Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    run_controller_with(
        api,
        settings,
        metrics,
        min_retry,
        max_retry,
        ctx,
        reconcile,
        shutdown,
        |c| c,
    )
    .await;
}

/// No back-off on the controller's merged trigger stream (see [`run_controller_with`]); it
/// never ends (`None` would end the stream).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTriggerBackoff;

impl Iterator for NoTriggerBackoff {
    type Item = std::time::Duration;
    fn next(&mut self) -> Option<std::time::Duration> {
        Some(std::time::Duration::ZERO)
    }
}

impl kube::runtime::utils::Backoff for NoTriggerBackoff {
    fn reset(&mut self) {}
}

/// [`run_controller`] with a hook that may add triggers to the kube-runtime [`Controller`]
/// before it runs (for example `watches` on Secrets mapped through `Controller::store`).
#[allow(clippy::too_many_arguments)]
pub async fn run_controller_with<K, Ctx, F, Fut, E>(
    api: Api<K>,
    settings: ControllerSettings,
    metrics: ControllerMetrics,
    min_retry: std::time::Duration,
    max_retry: std::time::Duration,
    ctx: Arc<Ctx>,
    reconcile: F,
    shutdown: CancellationToken,
    configure: impl FnOnce(Controller<K>) -> Controller<K>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    Ctx: Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    run_controller_sharded(
        api, settings, metrics, min_retry, max_retry, ctx, reconcile, shutdown, None, configure,
    )
    .await;
}

/// [`run_controller_with`] with automatic sharding when `shards` is set
/// ([`super::sharding`]): only objects of the slots this replica holds are reconciled, every
/// object of a slot is reconciled when the slot is acquired, and a reconcile still running when
/// its slot's lease window closes is dropped.
#[allow(clippy::too_many_arguments)]
pub async fn run_controller_sharded<K, Ctx, F, Fut, E>(
    api: Api<K>,
    settings: ControllerSettings,
    metrics: ControllerMetrics,
    min_retry: std::time::Duration,
    max_retry: std::time::Duration,
    ctx: Arc<Ctx>,
    reconcile: F,
    shutdown: CancellationToken,
    shards: Option<Shards>,
    configure: impl FnOnce(Controller<K>) -> Controller<K>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    Ctx: Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let mut wc = watcher::Config::default();
    if !settings.label_selector.trim().is_empty() {
        wc = wc.labels(settings.label_selector.trim());
    }
    let (reader, writer) = reflector::store();
    let stream = watcher(api, wc)
        .default_backoff()
        .modify(strip_for_cache)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(flux_predicate, Default::default());
    let concurrency = settings.concurrency.max(1);
    let slot_triggers = shards
        .clone()
        .map(|sh| sharding::runner::slot_triggers(sh, reader.clone()));
    let runner_ctx = Arc::new(RunnerContext {
        inner: ctx,
        settings,
        metrics,
        backoff: RetryBackoff::new(min_retry, max_retry),
        shards,
    });
    let reconcile = Arc::new(reconcile);
    let shutdown_fut = shutdown.clone().cancelled_owned();
    // Every trigger stream (this watch, the configure hook's watches) backs off on its own
    // errors: the controller's extra back-off on the merged stream would pause every trigger,
    // drift and new revisions included, whenever one watch fails (16 s after a forced 410 in
    // e2e/tests/faults_apply.rs).
    let controller = configure(Controller::for_stream(stream, reader));
    let controller = match slot_triggers {
        Some(t) => controller.reconcile_on(t),
        None => controller,
    };
    let run = controller
        .trigger_backoff(NoTriggerBackoff)
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown_fut)
        .run(
            move |obj: Arc<K>, rctx: Arc<RunnerContext<K, Ctx>>| {
                let reconcile = reconcile.clone();
                async move {
                    let name = obj.name_any();
                    let namespace = obj.namespace().unwrap_or_default();
                    // Sharded: only objects of a slot held now (the new owner reconciles the
                    // others when it acquires their slot).
                    let slot = match &rctx.shards {
                        None => None,
                        Some(sh) => match sh.try_start(sh.slot_of(&namespace, &name)) {
                            Some(g) => Some(g),
                            None => return Ok(Action::await_change()),
                        },
                    };
                    let span = reconcile_span(
                        &rctx.settings.name,
                        &rctx.settings.group,
                        &rctx.settings.kind,
                        &name,
                        &namespace,
                        &new_reconcile_id(),
                    );
                    let guard = rctx.metrics.start();
                    let deleting = obj.meta().deletion_timestamp.is_some();
                    let oref = ObjectRef::from_obj(obj.as_ref());
                    let fut = reconcile(obj, rctx.inner.clone()).instrument(span.clone());
                    let res = match slot {
                        None => fut.await,
                        Some(g) => {
                            sharding::runner::run_in_slot(g, fut)
                                .instrument(span.clone())
                                .await
                        }
                    };
                    let elapsed = guard.finish(result_label(&res));
                    let m = rctx.metrics.metrics();
                    if deleting && matches!(&res, Ok(a) if *a == Action::await_change()) {
                        m.delete_object(&rctx.settings.kind, &name, &namespace);
                    } else {
                        m.record_duration(&rctx.settings.kind, &name, &namespace, elapsed);
                    }
                    match &res {
                        Ok(_) => rctx.backoff.forget(&oref),
                        Err(e) => {
                            span.in_scope(|| tracing::error!(error = %e, "Reconciler error"));
                        }
                    }
                    res
                }
            },
            |obj: Arc<K>, _err: &E, rctx: Arc<RunnerContext<K, Ctx>>| {
                rctx.metrics.record_retry();
                Action::requeue(rctx.backoff.next_delay(&ObjectRef::from_obj(obj.as_ref())))
            },
            runner_ctx,
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "controller event");
            }
        });
    tokio::pin!(run);
    tokio::select! {
        () = &mut run => {}
        () = shutdown.cancelled() => {
            // kube's runner never finishes while its cache has not synced (for example while the
            // initial list keeps failing), so the drain of in-flight reconciles is bounded.
            if tokio::time::timeout(SHUTDOWN_DRAIN_GRACE, &mut run).await.is_err() {
                tracing::warn!(
                    grace = ?SHUTDOWN_DRAIN_GRACE,
                    "controller did not drain in time; stopping anyway"
                );
            }
        }
    }
}

/// How long in-flight reconciles may take to finish after a shutdown signal.
pub const SHUTDOWN_DRAIN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Success: requeue after `interval` with `±jitter_percentage%` jitter (Flux's success path).
pub fn requeue_success(interval: std::time::Duration, jitter_percentage: u8) -> Action {
    Action::requeue(super::jitter::jittered(interval, jitter_percentage))
}

/// A dependency (source artifact, dependsOn) is not ready: requeue after `--requeue-dependency`
/// without backoff.
pub fn requeue_dependency(delay: std::time::Duration) -> Action {
    Action::requeue(delay)
}

/// Stalled or suspended: no requeue until the object changes.
pub fn no_requeue() -> Action {
    Action::await_change()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn strip_for_cache_drops_managed_fields_and_last_applied_only() {
        let mut cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "a", "generation": 3,
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"big\":1}",
                    "reconcile.fluxcd.io/requestedAt": "now",
                },
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
            "data": {"k": "v"},
        }))
        .unwrap();
        let before = flux_predicate(&cm);
        strip_for_cache(&mut cm);
        assert!(cm.metadata.managed_fields.is_none());
        let ann = cm.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann.len(), 1);
        assert_eq!(ann["reconcile.fluxcd.io/requestedAt"], "now");
        assert_eq!(cm.data.as_ref().unwrap()["k"], "v");
        // The watch predicate sees the same object.
        assert_eq!(flux_predicate(&cm), before);
    }

    #[test]
    fn flux_operator_kinds_trigger_on_any_annotation() {
        use crate::api::resourceset::ResourceSet;
        let mut rs: ResourceSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
            "metadata": {"name": "a", "generation": 1}, "spec": {}
        }))
        .unwrap();
        let before = flux_predicate(&rs);
        rs.metadata.annotations = Some(
            [(
                "fluxcd.controlplane.io/reconcile".to_string(),
                "disabled".to_string(),
            )]
            .into(),
        );
        assert_ne!(flux_predicate(&rs), before);
        let mut cm: ConfigMap =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "a"}})).unwrap();
        let before = flux_predicate(&cm);
        cm.metadata.annotations = Some([("x".to_string(), "y".to_string())].into());
        assert_eq!(
            flux_predicate(&cm),
            before,
            "Flux's kinds ignore other annotations"
        );
    }
}
