//! Kubernetes Events (core/v1, what Flux's client-go recorder emits): reason, type
//! Normal/Warning, `source.component` and `reportingController` = the controller name,
//! `reportingInstance` = the hostname, and annotations carrying the revision
//! (`source.toolkit.fluxcd.io/revision`, `kustomize.toolkit.fluxcd.io/revision`, ...) plus every
//! `event.toolkit.fluxcd.io/*` annotation of the object.
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
    webhook: Option<Arc<WebhookTarget>>,
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
            webhook: None,
        }
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

/// Errors of the notification webhook.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The address is not an `http://host[:port][/path]` URL.
    #[error("invalid events address {0:?}: expected http://host[:port][/path]")]
    InvalidUrl(String),
    /// Network failure (after retries).
    #[error("posting event to {url}: {reason}")]
    Post {
        /// Target.
        url: String,
        /// Last failure.
        reason: String,
    },
}

/// A parsed `--events-addr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    /// Original URL.
    pub url: String,
    /// `host:port` to connect to.
    pub authority: String,
    /// Host header value.
    pub host: String,
    /// Request path.
    pub path: String,
}

impl WebhookTarget {
    /// Parses an `http://` URL (https is not supported: Flux's install uses plain HTTP in-cluster).
    pub fn parse(url: &str) -> Result<Self, WebhookError> {
        let rest = url
            .trim()
            .strip_prefix("http://")
            .ok_or_else(|| WebhookError::InvalidUrl(url.to_string()))?;
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if hostport.is_empty() || hostport.contains('@') {
            return Err(WebhookError::InvalidUrl(url.to_string()));
        }
        let invalid = || WebhookError::InvalidUrl(url.to_string());
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(invalid)?;
            match after.strip_prefix(':') {
                Some(p) => (format!("[{h}]"), p.parse::<u16>().map_err(|_| invalid())?),
                None if after.is_empty() => (format!("[{h}]"), 80),
                None => return Err(invalid()),
            }
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse::<u16>().map_err(|_| invalid())?),
                None => (hostport.to_string(), 80),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(invalid());
        }
        let connect = format!("{host}:{port}");
        Ok(Self {
            url: url.trim().to_string(),
            authority: connect,
            host: hostport.to_string(),
            path: path.to_string(),
        })
    }

    /// POSTs `payload`; retries connection errors and 5xx up to 4 times (1s, 2s, 4s, 8s) like
    /// retryablehttp; 429 and other codes are final. Returns the last status code.
    pub async fn post(&self, payload: &serde_json::Value) -> Result<u16, WebhookError> {
        let body = payload.to_string();
        let mut delay = std::time::Duration::from_secs(1);
        let mut last = String::new();
        for attempt in 0..5 {
            if attempt > 0 {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            match tokio::time::timeout(std::time::Duration::from_secs(5), self.post_once(&body))
                .await
            {
                Ok(Ok(code)) if code < 500 => return Ok(code),
                Ok(Ok(code)) => last = format!("HTTP {code}"),
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = "timeout after 5s".to_string(),
            }
        }
        Err(WebhookError::Post {
            url: self.url.clone(),
            reason: last,
        })
    }

    async fn post_once(&self, body: &str) -> std::io::Result<u16> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(&self.authority).await?;
        let req = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
            self.path,
            self.host,
            body.len(),
            body
        );
        stream.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        // Only the status line is needed.
        while !buf.windows(2).any(|w| w == b"\r\n") {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > 16 * 1024 {
                break;
            }
        }
        let line = String::from_utf8_lossy(&buf);
        line.split(' ')
            .nth(1)
            .and_then(|c| c.get(..3))
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "bad HTTP response")
            })
    }
}
