//! Kubernetes Events (core/v1, what Flux's client-go recorder emits): reason, type
//! Normal/Warning, `source.component` and `reportingController` = the controller name,
//! `reportingInstance` = the hostname, and annotations carrying the revision
//! (`source.toolkit.fluxcd.io/revision`, `kustomize.toolkit.fluxcd.io/revision`, ...) plus every
//! `event.toolkit.fluxcd.io/*` annotation of the object.
//!
//! Events have their own budget, like client-go's recorder: they are queued (bounded, dropped
//! and counted when full) and sent by a background task, so they never hold a reconcile; a spam
//! filter (a token bucket per object and reason) and the aggregation of identical events (the
//! existing Event's `count` and `lastTimestamp` are patched instead of creating a new one) run
//! before the apiserver is asked (`events/correlator.rs`).

pub mod correlator;
mod webhook;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use correlator::{Correlator, Decision};
use tokio::sync::mpsc;
pub use webhook::{WebhookError, WebhookTarget};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};

/// Prefix of object annotations copied onto events.
pub const EVENT_ANNOTATION_PREFIX: &str = "event.toolkit.fluxcd.io/";

/// Event severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Informational (`Normal`).
    Normal,
    /// Error (`Warning`).
    Warning,
    /// Flux "trace" severity: recorded as a `Normal` k8s event, never forwarded to
    /// notification-controller.
    Trace,
}

impl EventType {
    /// The k8s `type` field.
    pub fn as_k8s(self) -> &'static str {
        match self {
            Self::Normal | Self::Trace => "Normal",
            Self::Warning => "Warning",
        }
    }
    /// Flux's notification severity (`info`, `error`, `trace`).
    pub fn severity(self) -> &'static str {
        match self {
            Self::Normal => "info",
            Self::Warning => "error",
            Self::Trace => "trace",
        }
    }
}

/// Event errors.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The API call failed.
    #[error("cannot record event: {0}")]
    Kube(#[from] kube::Error),
    /// The object has no name.
    #[error("cannot record event: the involved object has no name")]
    NoName,
}

/// Merges event annotations: the object's `event.toolkit.fluxcd.io/*` annotations, then `extra`
/// (e.g. the revision), which wins on conflicts.
pub fn event_annotations(
    object_annotations: &BTreeMap<String, String>,
    extra: &[(&str, &str)],
) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = object_annotations
        .iter()
        .filter(|(k, _)| k.starts_with(EVENT_ANNOTATION_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in extra {
        if !v.is_empty() {
            out.insert((*k).to_string(), (*v).to_string());
        }
    }
    out
}

/// Builds the core/v1 Event (pure). The name follows client-go: `<object>.<hex unix nanos>`.
#[allow(clippy::too_many_arguments)]
pub fn build_event(
    involved: &ObjectReference,
    event_type: EventType,
    reason: &str,
    message: &str,
    annotations: BTreeMap<String, String>,
    controller: &str,
    instance: &str,
    now: jiff::Timestamp,
) -> Event {
    let obj_name = involved.name.clone().unwrap_or_default();
    let nanos = u128::try_from(now.as_nanosecond()).unwrap_or(0);
    let namespace = involved
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string());
    let ts = Time(jiff::Timestamp::from_second(now.as_second()).unwrap_or(now));
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{obj_name}.{nanos:x}")),
            namespace: Some(namespace),
            annotations: if annotations.is_empty() {
                None
            } else {
                Some(annotations)
            },
            ..ObjectMeta::default()
        },
        involved_object: involved.clone(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        type_: Some(event_type.as_k8s().to_string()),
        source: Some(EventSource {
            component: Some(controller.to_string()),
            host: None,
        }),
        first_timestamp: Some(ts.clone()),
        last_timestamp: Some(ts),
        count: Some(1),
        event_time: None::<MicroTime>,
        reporting_component: Some(controller.to_string()),
        reporting_instance: Some(instance.to_string()),
        ..Event::default()
    }
}

/// How many events wait for the background sender before new ones are dropped (client-go's
/// broadcaster queue: `maxQueuedEvents`).
pub const EVENT_QUEUE_CAPACITY: usize = 1000;

/// One event waiting for the background sender.
struct Pending {
    involved: ObjectReference,
    event_type: EventType,
    reason: String,
    message: String,
    annotations: BTreeMap<String, String>,
}

/// The counters of a recorder (shared by its clones).
#[derive(Debug, Default)]
struct Counters {
    /// Dropped because the queue was full.
    dropped: AtomicU64,
    /// Dropped by the spam filter.
    filtered: AtomicU64,
    /// Sent (created or aggregated) or failed, by the background sender.
    handled: AtomicU64,
    /// Enqueued.
    queued: AtomicU64,
}

/// Records events for one controller, through client-go's spam filter and aggregation
/// ([`correlator`]). With [`EventRecorder::with_queue`], [`EventRecorder::record`] never waits
/// for the apiserver: events go through a bounded queue to a background sender (dropped and
/// counted when it is full).
#[derive(Clone)]
pub struct EventRecorder {
    client: Client,
    controller: String,
    instance: String,
    correlator: Arc<Mutex<Correlator>>,
    webhook: Option<Arc<WebhookTarget>>,
    queue: Arc<OnceLock<mpsc::Sender<Pending>>>,
    counters: Arc<Counters>,
    dropped_metric: Option<prometheus::IntCounter>,
    /// `Some`: events are queued for the background sender ([`EventRecorder::with_queue`]).
    queue_capacity: Option<usize>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("controller", &self.controller)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// New recorder; `controller` is e.g. `kustomize-controller`, `instance` the pod hostname.
    /// Events are sent with `client`; [`EventRecorder::with_client`] gives them a client (and
    /// a rate limiter) of their own.
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        Self {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            correlator: Arc::new(Mutex::new(Correlator::default())),
            webhook: None,
            queue: Arc::new(OnceLock::new()),
            counters: Arc::new(Counters::default()),
            dropped_metric: None,
            queue_capacity: None,
        }
    }

    /// Sends the events from a bounded queue of `capacity` on a background task:
    /// [`EventRecorder::record`] then never waits for the apiserver; when the queue is full the
    /// event is dropped and counted ([`EventRecorder::dropped`], `gotk_events_dropped_total`).
    /// Without it, `record` sends the event before it returns (through the same spam filter
    /// and aggregation). Call before the first event.
    pub fn with_queue(mut self, capacity: usize) -> Self {
        self.queue_capacity = Some(capacity.max(1));
        self
    }

    /// Sends the events with `client` (e.g. one with its own client-side rate limiter, so
    /// events never take the reconciles' budget). Call before the first event.
    pub fn with_client(mut self, client: Client) -> Self {
        self.client = client;
        self
    }

    /// Registers `gotk_events_dropped_total` (events dropped because the queue was full, or
    /// by the spam filter, by `cause`) in `registry`.
    pub fn register_metrics(
        mut self,
        registry: &prometheus::Registry,
    ) -> Result<Self, prometheus::Error> {
        let vec = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "gotk_events_dropped_total",
                "Kubernetes events not sent: the queue was full or the spam filter dropped them.",
            ),
            &["cause"],
        )?;
        registry.register(Box::new(vec.clone()))?;
        self.dropped_metric = Some(vec.with_label_values(&["queue_full"]));
        Ok(self)
    }

    /// Also forwards non-trace events to notification-controller (`--events-addr`, an
    /// `http://` URL). An empty address disables forwarding.
    pub fn with_webhook(mut self, events_addr: &str) -> Result<Self, WebhookError> {
        if events_addr.trim().is_empty() {
            self.webhook = None;
        } else {
            self.webhook = Some(Arc::new(WebhookTarget::parse(events_addr)?));
        }
        Ok(self)
    }

    /// Controller name used as reporting component.
    pub fn controller(&self) -> &str {
        &self.controller
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    /// Events dropped by the spam filter.
    pub fn filtered(&self) -> u64 {
        self.counters.filtered.load(Ordering::Relaxed)
    }

    /// Waits until every event queued so far has been handled by the background sender (sent,
    /// aggregated, filtered or failed). For tests and shutdown.
    pub async fn flush(&self) {
        loop {
            let queued = self.counters.queued.load(Ordering::Acquire);
            if self.counters.handled.load(Ordering::Acquire) >= queued {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Records an event about `obj`. `extra_annotations` (e.g. the revision) are merged with the
    /// object's `event.toolkit.fluxcd.io/*` annotations. Returns once the event is queued (or
    /// dropped because the queue is full); the notification webhook is told at once, like Flux.
    pub async fn record<K>(
        &self,
        obj: &K,
        event_type: EventType,
        reason: &str,
        message: &str,
        extra_annotations: &[(&str, &str)],
    ) -> Result<(), EventError>
    where
        K: Resource<DynamicType = ()>,
    {
        if obj.meta().name.is_none() {
            return Err(EventError::NoName);
        }
        let involved = obj.object_ref(&());
        let annotations = event_annotations(obj.annotations(), extra_annotations);
        if let Some(target) = self.webhook.clone()
            && event_type != EventType::Trace
        {
            let payload = notification_payload(
                &involved,
                event_type,
                reason,
                message,
                &annotations,
                &self.controller,
                &self.instance,
                jiff::Timestamp::now(),
            );
            // Fire and forget, like Flux: a slow notification-controller must not stall reconciles.
            tokio::spawn(async move {
                if let Err(e) = target.post(&payload).await {
                    tracing::error!(error = %e, "unable to record event");
                }
            });
        }
        let Some(capacity) = self.queue_capacity else {
            return self
                .record_ref(&involved, event_type, reason, message, annotations)
                .await;
        };
        self.enqueue(
            capacity,
            Pending {
                involved,
                event_type,
                reason: reason.to_string(),
                message: message.to_string(),
                annotations,
            },
        );
        Ok(())
    }

    fn enqueue(&self, capacity: usize, pending: Pending) {
        let tx = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::channel(capacity);
            // The sender's handle has no queue of its own (no cycle keeping the task alive).
            let handle = EventRecorder {
                queue: Arc::new(OnceLock::new()),
                ..self.clone()
            };
            tokio::spawn(sender(handle, rx));
            tx
        });
        self.counters.queued.fetch_add(1, Ordering::AcqRel);
        if tx.try_send(pending).is_err() {
            self.counters.handled.fetch_add(1, Ordering::AcqRel);
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            if let Some(m) = &self.dropped_metric {
                m.inc();
            }
            tracing::debug!("event queue full: event dropped");
        }
    }

    /// Records an event for an object reference now (not queued), through the spam filter and
    /// the aggregation.
    pub async fn record_ref(
        &self,
        involved: &ObjectReference,
        event_type: EventType,
        reason: &str,
        message: &str,
        annotations: BTreeMap<String, String>,
    ) -> Result<(), EventError> {
        let now = jiff::Timestamp::now();
        let event = build_event(
            involved,
            event_type,
            reason,
            message,
            annotations,
            &self.controller,
            &self.instance,
            now,
        );
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let key = correlator::keys(involved, event_type.as_k8s(), reason, message);
        let decision = self.correlate().observe(&key, std::time::Instant::now());
        match decision {
            Decision::Drop => {
                self.counters.filtered.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(reason, "event dropped by the spam filter");
                return Ok(());
            }
            Decision::Patch {
                namespace: ns,
                name,
                count,
            } => {
                let patch = serde_json::json!({
                    "count": count,
                    "lastTimestamp": event.last_timestamp,
                });
                let api_prev: Api<Event> = Api::namespaced(self.client.clone(), &ns);
                if api_prev
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .is_ok()
                {
                    self.correlate().patched(&key, count);
                    return Ok(());
                }
                self.correlate().forget(&key);
            }
            Decision::Create => {}
        }
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let created = api.create(&PostParams::default(), &event).await?;
        let name = created.metadata.name.unwrap_or_default();
        self.correlate().created(key, namespace, name);
        Ok(())
    }

    fn correlate(&self) -> std::sync::MutexGuard<'_, Correlator> {
        self.correlator.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The background sender: one event at a time, in order.
async fn sender(recorder: EventRecorder, mut rx: mpsc::Receiver<Pending>) {
    while let Some(p) = rx.recv().await {
        if let Err(e) = recorder
            .record_ref(
                &p.involved,
                p.event_type,
                &p.reason,
                &p.message,
                p.annotations,
            )
            .await
        {
            tracing::warn!(error = %e, reason = %p.reason, "unable to record event");
        }
        recorder.counters.handled.fetch_add(1, Ordering::AcqRel);
    }
}

/// The `event.toolkit.fluxcd.io/v1beta1` Event posted to notification-controller (pure).
#[allow(clippy::too_many_arguments)]
pub fn notification_payload(
    involved: &ObjectReference,
    event_type: EventType,
    reason: &str,
    message: &str,
    metadata: &BTreeMap<String, String>,
    controller: &str,
    instance: &str,
    now: jiff::Timestamp,
) -> serde_json::Value {
    let mut obj = serde_json::Map::new();
    for (k, v) in [
        ("kind", &involved.kind),
        ("namespace", &involved.namespace),
        ("name", &involved.name),
        ("uid", &involved.uid),
        ("apiVersion", &involved.api_version),
        ("resourceVersion", &involved.resource_version),
    ] {
        if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
            obj.insert(k.to_string(), serde_json::Value::String(v.clone()));
        }
    }
    let mut out = serde_json::json!({
        "involvedObject": obj,
        "severity": event_type.severity(),
        "timestamp": format!("{}", jiff::Timestamp::from_second(now.as_second()).unwrap_or(now)),
        "message": message,
        "reason": reason,
        "reportingController": controller,
        "reportingInstance": instance,
    });
    if !metadata.is_empty()
        && let Some(map) = out.as_object_mut()
    {
        map.insert("metadata".into(), serde_json::json!(metadata));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn unreachable_client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        Client::try_from(config).unwrap()
    }

    fn object() -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("app".into()),
                namespace: Some("apps".into()),
                uid: Some("u1".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_without_waiting_for_the_apiserver() {
        let recorder =
            EventRecorder::new(unreachable_client(), "kustomize-controller", "t").with_queue(2);
        // Nothing yields in between on this single-threaded runtime: the sender cannot run.
        for i in 0..10 {
            recorder
                .record(
                    &object(),
                    EventType::Normal,
                    "Progressing",
                    &format!("m{i}"),
                    &[],
                )
                .await
                .unwrap();
        }
        assert_eq!(recorder.dropped(), 8);
        // The two queued ones are handled (their sends fail: nothing listens).
        recorder.flush().await;
        assert_eq!(recorder.counters.handled.load(Ordering::Acquire), 10);
    }

    #[tokio::test]
    async fn without_a_queue_record_sends_at_once_and_reports_the_error() {
        let recorder = EventRecorder::new(unreachable_client(), "kustomize-controller", "t");
        let sent = recorder
            .record(&object(), EventType::Normal, "Progressing", "m", &[])
            .await;
        assert!(matches!(sent, Err(EventError::Kube(_))), "{sent:?}");
        assert_eq!(recorder.dropped(), 0);
    }

    #[tokio::test]
    async fn the_spam_filter_drops_before_any_request() {
        let recorder = EventRecorder::new(unreachable_client(), "kustomize-controller", "t");
        let mut failed = 0;
        for i in 0..30 {
            if recorder
                .record(
                    &object(),
                    EventType::Warning,
                    "BuildFailed",
                    &format!("m{i}"),
                    &[],
                )
                .await
                .is_err()
            {
                failed += 1;
            }
        }
        // 25 tried (and failed: nothing listens), 5 filtered without a request.
        assert_eq!(failed, 25);
        assert_eq!(recorder.filtered(), 5);
    }
}
