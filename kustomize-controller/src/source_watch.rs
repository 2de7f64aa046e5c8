//! The source watches (GitRepository and OCIRepository, one generic implementation): when a
//! source's artifact appears or its revision changes, the Kustomizations that reference it are
//! reconciled at once instead of at their next interval. Those already Ready (or Reconciling)
//! with `lastAttemptedRevision` equal to the new revision are skipped, like Flux does. The same
//! watch keeps the cache the reconciles read their artifact from.
//!
//! [`SourceRevisions`] is the predicate (it remembers the last revision seen per source),
//! [`dependents`] the mapping over the Kustomization cache (both pure), [`source_trigger`] the
//! two together with the health-check cancellation, [`source_events`] the watch stream and its
//! cache, and [`watch_sources`] plugs a kind's stream into the controller (kube-runtime's
//! `Controller::watches_stream`); the binary calls the last two once per kind.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use futures::Stream;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use rflux_common::api::kustomization::Kustomization;
use rflux_common::runtime::conditions as cond;
use rflux_common::runtime::controller::strip_for_cache;

use crate::reconcile::source::ArtifactSource;
use crate::reconcile::triggers::Triggers;

/// Remembers the artifact revision last seen for each source of kind `K` (`namespace/name`).
#[derive(Debug)]
pub struct SourceRevisions<K> {
    seen: Mutex<HashMap<String, String>>,
    kind: PhantomData<fn(&K)>,
}

impl<K> Default for SourceRevisions<K> {
    fn default() -> Self {
        SourceRevisions {
            seen: Mutex::default(),
            kind: PhantomData,
        }
    }
}

impl<K: ArtifactSource> SourceRevisions<K> {
    /// Records the source's artifact revision; `Some(revision)` when the artifact appeared
    /// or its revision changed since the last call (Flux's `SourceRevisionChangePredicate`),
    /// `None` otherwise (status-only updates, no artifact, deletion).
    pub fn changed(&self, source: &K) -> Option<String> {
        let key = format!(
            "{}/{}",
            source.namespace().unwrap_or_default(),
            source.name_any()
        );
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if source.meta().deletion_timestamp.is_some() {
            seen.remove(&key);
            return None;
        }
        let revision = source.artifact().map(|a| a.revision.clone())?;
        if seen.get(&key) == Some(&revision) {
            return None;
        }
        seen.insert(key, revision.clone());
        Some(revision)
    }
}

/// The Kustomizations to reconcile because `source` has a new artifact `revision`: those whose
/// `sourceRef` names it (its kind, namespace defaulting to their own), except the ones that
/// are Ready or Reconciling and already attempted `revision`.
pub fn dependents<'a, K: ArtifactSource>(
    source: &K,
    revision: &str,
    kustomizations: impl IntoIterator<Item = &'a Kustomization>,
) -> Vec<ObjectRef<Kustomization>> {
    let source_ns = source.namespace().unwrap_or_default();
    let source_name = source.name_any();
    kustomizations
        .into_iter()
        .filter(|ks| {
            let ns = ks.namespace().unwrap_or_default();
            let r = &ks.spec.source_ref;
            r.kind == K::KIND && r.name == source_name && r.namespace_or(&ns) == source_ns
        })
        .filter(|ks| {
            let status = ks.status.as_ref();
            let conds = status
                .and_then(|s| s.conditions.as_deref())
                .unwrap_or_default();
            let busy_or_ready = cond::is_ready(conds)
                || conds
                    .iter()
                    .any(|c| c.type_ == cond::RECONCILING && c.status == "True");
            let attempted = status.and_then(|s| s.last_attempted_revision.as_deref());
            !(busy_or_ready && attempted == Some(revision))
        })
        .map(ObjectRef::from_obj)
        .collect()
}

/// What a watch event of `source` triggers: the [`dependents`] of a new revision (none
/// otherwise), whose running health checks are cancelled first
/// (`CancelHealthCheckOnNewRevision`; nothing waits when the gate is off).
pub fn source_trigger<K: ArtifactSource>(
    source: &K,
    revisions: &SourceRevisions<K>,
    kustomizations: &Store<Kustomization>,
    triggers: &Triggers,
) -> Vec<ObjectRef<Kustomization>> {
    let Some(revision) = revisions.changed(source) else {
        return Vec::new();
    };
    let all = kustomizations.state();
    let deps = dependents(source, &revision, all.iter().map(AsRef::as_ref));
    let by = format!(
        "{}/{}/{}",
        K::KIND,
        source.namespace().unwrap_or_default(),
        source.name_any()
    );
    for d in &deps {
        let ns = d.namespace.clone().unwrap_or_default();
        triggers.fire(&(ns, d.name.clone()), &by);
    }
    deps
}

/// Wires the watch of the sources of kind `K` ([`source_events`]) into the Kustomization
/// `controller`: each new revision reconciles its dependents ([`source_trigger`]).
pub fn watch_sources<K: ArtifactSource>(
    controller: Controller<Kustomization>,
    events: impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    triggers: Arc<Triggers>,
) -> Controller<Kustomization> {
    let kustomizations = controller.store();
    let revisions = SourceRevisions::<K>::default();
    controller.watches_stream(events, move |source: K| {
        source_trigger(&source, &revisions, &kustomizations, &triggers)
    })
}

/// The watch of the sources of kind `K` behind `api`: the stream of changed objects (to feed
/// [`source_trigger`]) and the cache it keeps, stripped like every cache of the controller.
pub fn source_events<K: ArtifactSource>(
    api: Api<K>,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
) {
    let (store, writer) = reflector::store();
    let events = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(strip_for_cache::<K>)
        .reflect(writer)
        .applied_objects();
    (store, events)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    use rflux_common::api::gitrepository::GitRepository;
    use rflux_common::api::ocirepository::OciRepository;
    use serde_json::{Value, json};

    fn repo(ns: &str, name: &str, revision: Option<&str>) -> GitRepository {
        let mut v = json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"url": "https://example.com/r.git", "interval": "1m"}
        });
        if let Some(rev) = revision {
            v["status"] = json!({"artifact": {
                "path": "p", "url": "http://x/p", "revision": rev, "digest": "sha256:00",
                "lastUpdateTime": "2026-01-01T00:00:00Z"
            }});
        }
        serde_json::from_value(v).unwrap()
    }

    fn oci(ns: &str, name: &str, revision: Option<&str>) -> OciRepository {
        let mut v = json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"url": "oci://registry.example/app", "interval": "1m"}
        });
        if let Some(rev) = revision {
            v["status"] = json!({"artifact": {
                "path": "p", "url": "http://x/p", "revision": rev, "digest": "sha256:00",
                "lastUpdateTime": "2026-01-01T00:00:00Z"
            }});
        }
        serde_json::from_value(v).unwrap()
    }

    fn ks(ns: &str, name: &str, source: Value, status: Value) -> Kustomization {
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"interval": "1m", "prune": true, "sourceRef": source},
            "status": status
        }))
        .unwrap()
    }

    fn cond(type_: &str, status: &str) -> Value {
        json!({"type": type_, "status": status, "reason": "R", "message": "",
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn revision_changes_are_reported_once() {
        let revs = SourceRevisions::default();
        assert_eq!(revs.changed(&repo("a", "r", None)), None, "no artifact yet");
        assert_eq!(
            revs.changed(&repo("a", "r", Some("main@sha1:1")))
                .as_deref(),
            Some("main@sha1:1")
        );
        assert_eq!(revs.changed(&repo("a", "r", Some("main@sha1:1"))), None);
        assert_eq!(
            revs.changed(&repo("b", "r", Some("main@sha1:1")))
                .as_deref(),
            Some("main@sha1:1"),
            "per namespace"
        );
        assert_eq!(
            revs.changed(&repo("a", "r", Some("main@sha1:2")))
                .as_deref(),
            Some("main@sha1:2")
        );
        let mut gone = repo("a", "r", Some("main@sha1:2"));
        gone.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:00Z".parse().unwrap(),
            ));
        assert_eq!(revs.changed(&gone), None);
        assert_eq!(
            revs.changed(&repo("a", "r", Some("main@sha1:2")))
                .as_deref(),
            Some("main@sha1:2"),
            "forgotten after deletion"
        );
    }

    #[test]
    fn dependents_match_the_source_and_skip_up_to_date() {
        let src = json!({"kind": "GitRepository", "name": "r"});
        let rev = "main@sha1:2";
        let list = [
            // Same namespace, never reconciled: enqueued.
            ks("a", "fresh", src.clone(), json!({})),
            // Ready at the old revision: enqueued.
            ks(
                "a",
                "old",
                src.clone(),
                json!({"conditions": [cond("Ready", "True")], "lastAttemptedRevision": "main@sha1:1"}),
            ),
            // Ready and already attempted the new revision: skipped.
            ks(
                "a",
                "done",
                src.clone(),
                json!({"conditions": [cond("Ready", "True")], "lastAttemptedRevision": rev}),
            ),
            // Reconciling at the new revision: skipped.
            ks(
                "a",
                "busy",
                src.clone(),
                json!({"conditions": [cond("Ready", "Unknown"), cond("Reconciling", "True")],
                      "lastAttemptedRevision": rev}),
            ),
            // Failed at the new revision (not Ready, not Reconciling): enqueued.
            ks(
                "a",
                "failed",
                src.clone(),
                json!({"conditions": [cond("Ready", "False")], "lastAttemptedRevision": rev}),
            ),
            // Cross-namespace reference to a/r: enqueued.
            ks(
                "b",
                "cross",
                json!({"kind": "GitRepository", "name": "r", "namespace": "a"}),
                json!({}),
            ),
            // Same name in another namespace: not this source.
            ks("b", "other-ns", src.clone(), json!({})),
            // Another source, another kind.
            ks(
                "a",
                "other",
                json!({"kind": "GitRepository", "name": "s"}),
                json!({}),
            ),
            ks(
                "a",
                "oci",
                json!({"kind": "OCIRepository", "name": "r"}),
                json!({}),
            ),
        ];
        let got: Vec<String> = dependents(&repo("a", "r", Some(rev)), rev, list.iter())
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        assert_eq!(got, ["a/fresh", "a/old", "a/failed", "b/cross"]);
    }

    #[test]
    fn oci_revisions_are_tracked_like_git_ones() {
        let revs = SourceRevisions::<OciRepository>::default();
        assert_eq!(revs.changed(&oci("a", "r", None)), None, "no artifact yet");
        let d1 = "latest@sha256:1111";
        let d2 = "latest@sha256:2222";
        assert_eq!(revs.changed(&oci("a", "r", Some(d1))).as_deref(), Some(d1));
        assert_eq!(revs.changed(&oci("a", "r", Some(d1))), None);
        assert_eq!(revs.changed(&oci("a", "r", Some(d2))).as_deref(), Some(d2));
        // Each kind keeps its own memory: a GitRepository of the same name is another source.
        let git_revs = SourceRevisions::<GitRepository>::default();
        assert_eq!(
            git_revs.changed(&repo("a", "r", Some(d2))).as_deref(),
            Some(d2)
        );
    }

    #[test]
    fn dependents_of_an_oci_repository_are_the_oci_references_only() {
        let rev = "latest@sha256:2222";
        let list = [
            ks(
                "a",
                "oci",
                json!({"kind": "OCIRepository", "name": "r"}),
                json!({}),
            ),
            ks(
                "a",
                "oci-done",
                json!({"kind": "OCIRepository", "name": "r"}),
                json!({"conditions": [cond("Ready", "True")], "lastAttemptedRevision": rev}),
            ),
            ks(
                "b",
                "oci-cross",
                json!({"kind": "OCIRepository", "name": "r", "namespace": "a"}),
                json!({}),
            ),
            ks(
                "a",
                "git",
                json!({"kind": "GitRepository", "name": "r"}),
                json!({}),
            ),
            ks(
                "a",
                "bucket",
                json!({"kind": "Bucket", "name": "r"}),
                json!({}),
            ),
        ];
        let names = |refs: Vec<ObjectRef<Kustomization>>| -> Vec<String> {
            refs.into_iter()
                .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
                .collect()
        };
        assert_eq!(
            names(dependents(&oci("a", "r", Some(rev)), rev, list.iter())),
            ["a/oci", "b/oci-cross"]
        );
        assert_eq!(
            names(dependents(&repo("a", "r", Some(rev)), rev, list.iter())),
            ["a/git"]
        );
    }

    #[tokio::test]
    async fn a_new_oci_revision_enqueues_and_cancels_the_waiting_health_check() {
        let mut writer = reflector::store::Writer::<Kustomization>::new(());
        for k in [
            ks(
                "a",
                "app",
                json!({"kind": "OCIRepository", "name": "r"}),
                json!({}),
            ),
            ks(
                "a",
                "other",
                json!({"kind": "GitRepository", "name": "r"}),
                json!({}),
            ),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(k));
        }
        let store = writer.as_reader();
        let triggers = Triggers::default();
        let revs = SourceRevisions::default();
        let waiting = triggers.register(("a".into(), "app".into()));
        let got = source_trigger(
            &oci("a", "r", Some("latest@sha256:1")),
            &revs,
            &store,
            &triggers,
        );
        assert_eq!(got, [ObjectRef::new("app").within("a")]);
        let by = tokio::time::timeout(Duration::from_secs(5), waiting.waiter.triggered())
            .await
            .unwrap();
        assert_eq!(by, "OCIRepository/a/r");
        // The same revision again (a status-only update): nothing.
        let again = source_trigger(
            &oci("a", "r", Some("latest@sha256:1")),
            &revs,
            &store,
            &triggers,
        );
        assert!(again.is_empty());
    }
}
