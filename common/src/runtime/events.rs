//! Kubernetes Events (core/v1, what Flux's client-go recorder emits): reason, type
//! Normal/Warning, `source.component` and `reportingController` = the controller name,
//! `reportingInstance` = the hostname, and annotations carrying the revision
//! (`source.toolkit.fluxcd.io/revision`, `kustomize.toolkit.fluxcd.io/revision`, ...) plus every
//! `event.toolkit.fluxcd.io/*` annotation of the object (flux-spec §4.12).
//!
//! Repeated identical events are aggregated like client-go does: the existing Event's `count`
//! and `lastTimestamp` are patched instead of creating a new one.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

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

type AggregationKey = (String, String, String, String, String);
/// key -> (namespace, event name, count)
type AggregationCache = HashMap<AggregationKey, (String, String, i32)>;

/// Records events for one controller.
#[derive(Clone)]
pub struct EventRecorder {
    client: Client,
    controller: String,
    instance: String,
    seen: Arc<Mutex<AggregationCache>>,
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
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        Self {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            seen: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Controller name used as reporting component.
    pub fn controller(&self) -> &str {
        &self.controller
    }

    /// Records an event about `obj`. `extra_annotations` (e.g. the revision) are merged with the
    /// object's `event.toolkit.fluxcd.io/*` annotations.
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
        self.record_ref(&involved, event_type, reason, message, annotations)
            .await
    }

    /// Records an event for an object reference.
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
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let key: AggregationKey = (
            involved.uid.clone().unwrap_or_default(),
            involved.name.clone().unwrap_or_default(),
            reason.to_string(),
            message.to_string(),
            event_type.as_k8s().to_string(),
        );
        let previous = match self.seen.lock() {
            Ok(m) => m.get(&key).cloned(),
            Err(p) => p.into_inner().get(&key).cloned(),
        };
        if let Some((ns, name, count)) = previous {
            let patch = serde_json::json!({
                "count": count.saturating_add(1),
                "lastTimestamp": event.last_timestamp,
            });
            let api_prev: Api<Event> = Api::namespaced(self.client.clone(), &ns);
            if api_prev
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok()
            {
                self.remember(key, ns, name, count.saturating_add(1));
                return Ok(());
            }
        }
        let created = api.create(&PostParams::default(), &event).await?;
        let name = created.metadata.name.unwrap_or_default();
        self.remember(key, namespace, name, 1);
        Ok(())
    }

    fn remember(&self, key: AggregationKey, ns: String, name: String, count: i32) {
        let mut map = match self.seen.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        // Keep the cache bounded (client-go's LRU holds 4096 entries).
        if map.len() >= 4096 {
            map.clear();
        }
        map.insert(key, (ns, name, count));
    }
}
