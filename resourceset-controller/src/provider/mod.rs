//! The ResourceSetInputProvider reconciler (reference `resourceset.md` §12, issue 19).
//!
//! `type: Static` is exported fully: one input set, `defaultValues` plus `id` (the Adler-32 of
//! `metadata.uid`), its revision, `spec.schedule` windows, `reconcile: disabled`, `forceAt`.
//! Every other type calls a service outside the cluster (Git hosting APIs, OCI registries, an
//! HTTP endpoint) or ExternalArtifact objects; this controller does not, and stalls them with
//! a condition that says so.
//!
//! - [`id`]: Adler-32 ids (pure);
//! - [`yaml`]: `sigs.k8s.io/yaml.Marshal` of JSON values, for the revision (pure);
//! - [`revision`]: the Static input set and `lastExportedRevision` (pure);
//! - [`schedule`]: cron expressions and schedule windows (pure);
//! - [`spec`]: the spec rules re-checked (pure);
//! - [`status`]: condition transitions, force requests, requeue (pure);
//! - [`reconcile`]: the reconcile itself (I/O).

pub mod reconcile;
pub mod revision;
pub mod schedule;
pub mod spec;
pub mod status;
pub mod yaml;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use rflux_common::api::resourcesetinputprovider::ResourceSetInputProvider;
use rflux_common::runtime::EventRecorder;
use rflux_common::runtime::controller::{ControllerSettings, run_controller_with};
use rflux_common::runtime::metrics::ControllerMetrics;
use tokio_util::sync::CancellationToken;

pub use self::reconcile::{ProviderError, reconcile};

/// What every provider reconcile shares.
pub struct Context {
    /// The controller's client.
    pub client: Client,
    /// Events, as `flux-operator`.
    pub recorder: EventRecorder,
}

impl Context {
    /// A context.
    pub fn new(client: Client, recorder: EventRecorder) -> Self {
        Context { client, recorder }
    }
}

/// Flux Operator reconciles a provider when its generation or any annotation changes; the
/// runner's own predicate sees only `requestedAt` among annotations, so a metadata watch
/// adds the rest (`reconcile: disabled`, `reconcileEvery`, `forceAt`, ...).
fn annotations_hash<K: Resource>(obj: &K) -> Option<u64> {
    let mut h = DefaultHasher::new();
    obj.meta().annotations.hash(&mut h);
    Some(h.finish())
}

/// Runs the ResourceSetInputProvider controller until `stop`; `meta_api` (same scope as `api`)
/// feeds the annotation watch.
#[allow(clippy::too_many_arguments)]
pub async fn run_provider_controller(
    api: Api<ResourceSetInputProvider>,
    meta_api: Api<PartialObjectMeta<ResourceSetInputProvider>>,
    settings: ControllerSettings,
    metrics: ControllerMetrics,
    retry: (Duration, Duration),
    ctx: Arc<Context>,
    stop: CancellationToken,
) {
    let mut wc = watcher::Config::default();
    if !settings.label_selector.trim().is_empty() {
        wc = wc.labels(settings.label_selector.trim());
    }
    let annotation_changes = watcher(meta_api, wc)
        .default_backoff()
        .touched_objects()
        .predicate_filter(annotations_hash, Default::default())
        .filter_map(|res| async move {
            let meta = res.ok()?;
            let name = meta.metadata.name.clone()?;
            let namespace = meta.metadata.namespace.clone().unwrap_or_default();
            Some(ObjectRef::<ResourceSetInputProvider>::new(&name).within(&namespace))
        });
    run_controller_with(
        api,
        settings,
        metrics,
        retry.0,
        retry.1,
        ctx,
        reconcile,
        stop,
        move |controller| controller.reconcile_on(annotation_changes),
    )
    .await;
}
