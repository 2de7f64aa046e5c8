//! Waiting for objects, driven by watches: one watch per object (field selector on its name);
//! the kstatus rules in [`super::kstatus`] (or a [`StatusReader`] for the kinds it handles) run on
//! every event, so the wait ends as soon as every object is Current (Flux polls every 5s).

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Client;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use rflux_common::runtime::format_go_duration;
use serde_json::Value;

use super::kstatus::{self, Status};
use super::object::ObjectRef;
use super::resolver::Resolver;

/// The last known status of one watched object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectStatus {
    /// The object.
    pub object: ObjectRef,
    /// Its kstatus status.
    pub status: Status,
    /// The kstatus message.
    pub message: String,
    /// The last watch error, if any.
    pub error: Option<String>,
}

fn render(list: &[ObjectStatus]) -> String {
    list.iter()
        .map(|s| match &s.error {
            Some(e) => format!("{} status: '{}': {e}", s.object.subject(), s.status),
            None => format!("{} status: '{}'", s.object.subject(), s.status),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a health check failed (Flux's texts).
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// Some objects were not Current before the timeout.
    #[error("health check failed after {elapsed}: timeout waiting for: [{}]", render(.pending))]
    Timeout {
        /// Go-formatted time spent.
        elapsed: String,
        /// The objects that were not Current.
        pending: Vec<ObjectStatus>,
    },
    /// Some objects are Failed (fail-fast).
    #[error("health check failed after {elapsed}: failed early due to stalled resources: [{}]", render(.failed))]
    Stalled {
        /// Go-formatted time spent.
        elapsed: String,
        /// The Failed objects.
        failed: Vec<ObjectStatus>,
    },
    /// An object was deleted, or a field this controller manages was changed, by someone else
    /// while waiting for it (the tracker reconciles the Kustomization again at once).
    #[error("health check failed after {elapsed}: {subject} was {what} while waiting for it")]
    Changed {
        /// Go-formatted time spent.
        elapsed: String,
        /// `Kind/ns/name`.
        subject: String,
        /// `deleted` or `changed`.
        what: &'static str,
    },
    /// Objects still existed at the timeout of a termination wait.
    #[error("timeout waiting for termination: [{}]", render(.remaining))]
    TerminationTimeout {
        /// The objects still present.
        remaining: Vec<ObjectStatus>,
    },
    /// An object's kind cannot be resolved.
    #[error("{subject} health check failed: {message}")]
    Resolve {
        /// `Kind/ns/name`.
        subject: String,
        /// Details.
        message: String,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Goal {
    Ready,
    Gone,
}

/// Judges the kinds it handles instead of the kstatus rules (Flux's custom health checks, CEL
/// `healthCheckExprs`), re-evaluated on every watch event.
pub trait StatusReader: Sync {
    /// Whether it judges objects of `group` and `kind`.
    fn handles(&self, group: &str, kind: &str) -> bool;
    /// The status of `obj` (of a kind it handles), its message, and an evaluation error to
    /// report (which leaves the object Unknown, not Current).
    fn read(&self, group: &str, kind: &str, obj: &Value) -> (Status, String, Option<String>);
}

/// Waits until every object is Current (fail-fast on Failed), with a fresh [`Resolver`].
pub async fn wait_for(
    client: Client,
    objects: &[ObjectRef],
    timeout: Duration,
) -> Result<(), WaitError> {
    wait_for_with(&Resolver::new(client), objects, timeout).await
}

/// Waits until every object is Current; returns early with [`WaitError::Stalled`] as soon as
/// one is Failed, or [`WaitError::Timeout`] after `timeout`.
pub async fn wait_for_with(
    resolver: &Resolver,
    objects: &[ObjectRef],
    timeout: Duration,
) -> Result<(), WaitError> {
    watch_until(resolver, objects, timeout, Goal::Ready, None, false).await
}

/// [`wait_for_with`] with a [`StatusReader`]: objects of a group/kind it handles are judged by
/// it instead of the kstatus rules.
pub async fn wait_for_with_reader(
    resolver: &Resolver,
    objects: &[ObjectRef],
    timeout: Duration,
    reader: Option<&dyn StatusReader>,
) -> Result<(), WaitError> {
    watch_until(resolver, objects, timeout, Goal::Ready, reader, false).await
}

/// [`wait_for_with_reader`] for objects just applied, which therefore exist: kinds without a
/// status ([`is_statusless`]) count as Current without a watch.
pub async fn wait_for_applied(
    resolver: &Resolver,
    objects: &[ObjectRef],
    timeout: Duration,
    reader: Option<&dyn StatusReader>,
) -> Result<(), WaitError> {
    watch_until(resolver, objects, timeout, Goal::Ready, reader, true).await
}

/// Waits until none of the objects exists any more (`WaitForTermination`).
pub async fn wait_for_termination(
    resolver: &Resolver,
    objects: &[ObjectRef],
    timeout: Duration,
) -> Result<(), WaitError> {
    watch_until(resolver, objects, timeout, Goal::Gone, None, false).await
}

type Events = BoxStream<
    'static,
    (
        usize,
        Result<Event<kube::api::DynamicObject>, watcher::Error>,
    ),
>;

async fn watch_until(
    resolver: &Resolver,
    objects: &[ObjectRef],
    timeout: Duration,
    goal: Goal,
    reader: Option<&dyn StatusReader>,
    applied: bool,
) -> Result<(), WaitError> {
    let start = tokio::time::Instant::now();
    if objects.is_empty() {
        return Ok(());
    }
    let mut streams: Vec<Events> = Vec::with_capacity(objects.len());
    // Objects without a status need no watch (see `is_statusless`).
    let skip_watch: Vec<bool> = objects
        .iter()
        .map(|o| {
            applied
                && goal == Goal::Ready
                && is_statusless(o)
                && !reader.is_some_and(|r| r.handles(&o.group, &o.kind))
        })
        .collect();
    for (i, obj) in objects.iter().enumerate() {
        if skip_watch[i] {
            continue;
        }
        let api = resolver.api(obj).await.map_err(|e| WaitError::Resolve {
            subject: obj.subject(),
            message: e.to_string(),
        })?;
        let cfg = watcher::Config::default().fields(&format!("metadata.name={}", obj.name));
        streams.push(
            watcher::watcher(api, cfg)
                .default_backoff()
                .map(move |ev| (i, ev))
                .boxed(),
        );
    }
    let mut events = futures::stream::select_all(streams);
    let mut states: Vec<ObjectStatus> = objects
        .iter()
        .zip(&skip_watch)
        .map(|(o, skip)| ObjectStatus {
            object: o.clone(),
            status: if *skip {
                Status::Current
            } else {
                Status::Unknown
            },
            message: if *skip {
                "Resource is always ready".to_string()
            } else {
                String::new()
            },
            error: None,
        })
        .collect();
    let mut listed = vec![false; objects.len()];
    // Jobs with ttlSecondsAfterFinished that disappear count as Current.
    let mut ttl_job = vec![false; objects.len()];
    let deadline = start + timeout;
    loop {
        let elapsed = || format_go_duration(start.elapsed());
        match goal {
            Goal::Ready => {
                if let Some(done) = ready_verdict(&states, elapsed) {
                    return done;
                }
            }
            Goal::Gone => {
                if states.iter().all(|s| s.status == Status::NotFound) {
                    return Ok(());
                }
            }
        }
        let next = tokio::time::timeout_at(deadline, events.next()).await;
        let (i, event) = match next {
            Ok(Some(item)) => item,
            // Timed out, or (unexpectedly) every watch ended.
            Err(_) | Ok(None) => {
                return Err(match goal {
                    Goal::Ready => WaitError::Timeout {
                        elapsed: elapsed(),
                        pending: states
                            .into_iter()
                            .filter(|s| s.status != Status::Current)
                            .collect(),
                    },
                    Goal::Gone => WaitError::TerminationTimeout {
                        remaining: states
                            .into_iter()
                            .filter(|s| s.status != Status::NotFound)
                            .collect(),
                    },
                });
            }
        };
        let Some(state) = states.get_mut(i) else {
            continue;
        };
        match event {
            Ok(Event::Init) => listed[i] = false,
            Ok(Event::InitApply(obj) | Event::Apply(obj)) => {
                listed[i] = true;
                state.error = None;
                match serde_json::to_value(&obj) {
                    Ok(mut v) => {
                        // List items carry no apiVersion/kind; the rules need them.
                        if let Some(map) = v.as_object_mut() {
                            map.insert("apiVersion".into(), state.object.api_version().into());
                            map.insert("kind".into(), state.object.kind.clone().into());
                        }
                        ttl_job[i] = state.object.group == "batch"
                            && state.object.kind == "Job"
                            && v.pointer("/spec/ttlSecondsAfterFinished").is_some();
                        let (group, kind) = (&state.object.group, &state.object.kind);
                        if let Some(r) = reader.filter(|r| r.handles(group, kind)) {
                            // An evaluation error leaves the object Unknown (not Current),
                            // with the error reported if the wait times out.
                            let (status, message, err) = r.read(group, kind, &v);
                            state.status = status;
                            state.message = message;
                            state.error = err;
                        } else {
                            let r = kstatus::compute(&v);
                            state.status = r.status;
                            state.message = r.message;
                        }
                    }
                    Err(e) => {
                        state.status = Status::Unknown;
                        state.error = Some(e.to_string());
                    }
                }
            }
            Ok(Event::Delete(_)) => mark_gone(state, goal, ttl_job[i]),
            Ok(Event::InitDone) => {
                if !listed[i] {
                    mark_gone(state, goal, ttl_job[i]);
                }
            }
            Err(e) => state.error = Some(e.to_string()),
        }
    }
}

/// The end of a readiness wait, if it has one: `Stalled` as soon as one object is Failed
/// (fail-fast), `Ok` once every object is Current, `None` while some are still in progress.
pub fn ready_verdict(
    states: &[ObjectStatus],
    elapsed: impl Fn() -> String,
) -> Option<Result<(), WaitError>> {
    let failed: Vec<ObjectStatus> = states
        .iter()
        .filter(|s| s.status == Status::Failed)
        .cloned()
        .collect();
    if !failed.is_empty() {
        return Some(Err(WaitError::Stalled {
            elapsed: elapsed(),
            failed,
        }));
    }
    states
        .iter()
        .all(|s| s.status == Status::Current)
        .then_some(Ok(()))
}

/// Kinds without a status, which kstatus calls Current as soon as they exist and are not being
/// deleted. The `wait: true` targets were applied by this same reconcile, so they exist: waiting
/// for them opens no watch (saves a LIST and a WATCH per object; a no-op reconcile of 100
/// ConfigMaps went from ~365 to ~200 apiserver requests, docs/benchmarks.md).
pub fn is_statusless(obj: &ObjectRef) -> bool {
    is_statusless_kind(&obj.group, &obj.kind)
}

/// [`is_statusless`] for a group and kind.
pub fn is_statusless_kind(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("", "ConfigMap" | "Secret" | "ServiceAccount")
            | (
                "rbac.authorization.k8s.io",
                "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding"
            )
    )
}

fn mark_gone(state: &mut ObjectStatus, goal: Goal, ttl_job: bool) {
    if goal == Goal::Ready && ttl_job {
        state.status = Status::Current;
        state.message = "Job was deleted after finishing (ttlSecondsAfterFinished)".into();
    } else {
        state.status = Status::NotFound;
        state.message = "Resource not found".into();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ready_verdict_fails_fast_then_waits_for_all_current() {
        let st = |name: &str, status| ObjectStatus {
            object: ObjectRef {
                group: "apps".into(),
                version: "v1".into(),
                kind: "Deployment".into(),
                namespace: "a".into(),
                name: name.into(),
            },
            status,
            message: String::new(),
            error: None,
        };
        let t = || "1s".to_string();
        assert!(
            ready_verdict(&[st("a", Status::Current), st("b", Status::InProgress)], t).is_none()
        );
        assert!(matches!(
            ready_verdict(&[st("a", Status::Current), st("b", Status::Current)], t),
            Some(Ok(()))
        ));
        match ready_verdict(&[st("a", Status::InProgress), st("b", Status::Failed)], t) {
            Some(Err(WaitError::Stalled { failed, .. })) => {
                assert_eq!(failed.len(), 1);
                assert_eq!(failed[0].object.name, "b");
            }
            other => panic!("expected Stalled, got {other:?}"),
        }
    }

    #[test]
    fn statusless_kinds_are_the_ones_without_a_status() {
        let o = |group: &str, kind: &str| ObjectRef {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: "a".into(),
            name: "x".into(),
        };
        for (g, k) in [
            ("", "ConfigMap"),
            ("", "Secret"),
            ("", "ServiceAccount"),
            ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ] {
            assert!(is_statusless(&o(g, k)), "{g}/{k}");
        }
        for (g, k) in [
            ("apps", "Deployment"),
            ("", "Service"),
            ("", "Namespace"),
            ("networking.k8s.io", "Ingress"),
            ("example.com", "ConfigMap"),
        ] {
            assert!(!is_statusless(&o(g, k)), "{g}/{k}");
        }
    }

    #[test]
    fn error_texts_match_flux() {
        let obj = ObjectRef {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            namespace: "ns".into(),
            name: "web".into(),
        };
        let e = WaitError::Timeout {
            elapsed: "5s".into(),
            pending: vec![
                ObjectStatus {
                    object: obj.clone(),
                    status: Status::InProgress,
                    message: "Available: 0/1".into(),
                    error: None,
                },
                ObjectStatus {
                    object: ObjectRef {
                        kind: "ConfigMap".into(),
                        group: String::new(),
                        ..obj.clone()
                    },
                    status: Status::NotFound,
                    message: String::new(),
                    error: Some("boom".into()),
                },
            ],
        };
        assert_eq!(
            e.to_string(),
            "health check failed after 5s: timeout waiting for: \
             [Deployment/ns/web status: 'InProgress', ConfigMap/ns/web status: 'NotFound': boom]"
        );
        let s = WaitError::Stalled {
            elapsed: "1.5s".into(),
            failed: vec![ObjectStatus {
                object: obj,
                status: Status::Failed,
                message: String::new(),
                error: None,
            }],
        };
        assert_eq!(
            s.to_string(),
            "health check failed after 1.5s: failed early due to stalled resources: \
             [Deployment/ns/web status: 'Failed']"
        );
    }
}
