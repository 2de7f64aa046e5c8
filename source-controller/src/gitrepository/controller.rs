//! Runs the GitRepository controller: the shared runner (Flux's predicate, workers, backoff,
//! metrics) plus a metadata-only watch on Secrets, so that a change to a Secret named by
//! `spec.secretRef`, `spec.verify.secretRef` or `spec.proxySecretRef` reconciles the
//! GitRepositories that use it right away instead of at their next interval.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use rflux_common::api::gitrepository::{GitRepository, GitRepositorySpec};
use rflux_common::runtime::CancellationToken;
use rflux_common::runtime::controller::{ControllerSettings, run_controller_sharded};
use rflux_common::runtime::metrics::ControllerMetrics;
use rflux_common::runtime::sharding::Shards;

use super::reconcile::{Context, reconcile};

/// The names of the Secrets a GitRepository reads (in its own namespace).
pub fn referenced_secrets(spec: &GitRepositorySpec) -> Vec<&str> {
    let mut out = Vec::with_capacity(3);
    if let Some(r) = &spec.secret_ref {
        out.push(r.name.as_str());
    }
    if let Some(v) = &spec.verify {
        out.push(v.secret_ref.name.as_str());
    }
    if let Some(r) = &spec.proxy_secret_ref {
        out.push(r.name.as_str());
    }
    out
}

/// The GitRepositories among `repos` that read the Secret `namespace/name`.
pub fn repositories_using_secret<'a>(
    repos: impl IntoIterator<Item = &'a GitRepository>,
    namespace: &str,
    name: &str,
) -> Vec<ObjectRef<GitRepository>> {
    repos
        .into_iter()
        .filter(|r| r.meta().namespace.as_deref() == Some(namespace))
        .filter(|r| referenced_secrets(&r.spec).contains(&name))
        .map(ObjectRef::from_obj)
        .collect()
}

/// Turns watch events into "this object changed" signals: nothing for the initial list (the
/// GitRepositories are all reconciled at start anyway), then every creation, update and
/// deletion; after a re-list (watch restart) only the objects whose resourceVersion differs
/// from the last one seen, and those that disappeared meanwhile.
#[derive(Debug)]
pub struct Changes<K: Resource<DynamicType = ()>> {
    seen: HashMap<ObjectRef<K>, K>,
    relisted: Option<HashSet<ObjectRef<K>>>,
    synced: bool,
}

impl<K: Resource<DynamicType = ()>> Default for Changes<K> {
    fn default() -> Self {
        Changes {
            seen: HashMap::new(),
            relisted: None,
            synced: false,
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone> Changes<K> {
    /// The objects `event` reports as changed.
    pub fn observe(&mut self, event: watcher::Event<K>) -> Vec<K> {
        match event {
            watcher::Event::Init => {
                self.relisted = Some(HashSet::new());
                Vec::new()
            }
            watcher::Event::InitDone => {
                let listed = self.relisted.take().unwrap_or_default();
                let was_synced = std::mem::replace(&mut self.synced, true);
                let gone: Vec<ObjectRef<K>> = self
                    .seen
                    .keys()
                    .filter(|k| !listed.contains(*k))
                    .cloned()
                    .collect();
                let removed: Vec<K> = gone.iter().filter_map(|k| self.seen.remove(k)).collect();
                if was_synced { removed } else { Vec::new() }
            }
            watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) => {
                let key = ObjectRef::from_obj(&obj);
                if let Some(set) = self.relisted.as_mut() {
                    set.insert(key.clone());
                }
                let rv = obj.meta().resource_version.clone();
                let prev = self.seen.insert(key, obj.clone());
                let changed = prev.is_none_or(|p| p.meta().resource_version != rv);
                if self.synced && changed {
                    vec![obj]
                } else {
                    Vec::new()
                }
            }
            watcher::Event::Delete(obj) => {
                self.seen.remove(&ObjectRef::from_obj(&obj));
                if self.synced { vec![obj] } else { Vec::new() }
            }
        }
    }
}

/// Keeps only what identifies an object and its version (name, namespace, resourceVersion, uid).
pub fn slim_metadata<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
    meta.labels = None;
    meta.owner_references = None;
    meta.finalizers = None;
}

fn map_secret(
    store: &Store<GitRepository>,
    ns: Option<String>,
    name: &str,
) -> Vec<ObjectRef<GitRepository>> {
    let Some(ns) = ns else {
        return Vec::new();
    };
    let repos = store.state();
    let refs = repositories_using_secret(repos.iter().map(Arc::as_ref), &ns, name);
    if !refs.is_empty() {
        tracing::debug!(
            secret = %format!("{ns}/{name}"),
            count = refs.len(),
            "secret changed: reconciling the GitRepositories that use it"
        );
    }
    refs
}

/// Runs the GitRepository controller until `stop` fires. `secrets` (a metadata-only API)
/// should have the same scope as `repos` (all namespaces, or the watched one). With `shards`
/// (`--auto-sharding`), only the objects of the slots this replica holds are reconciled.
#[allow(clippy::too_many_arguments)]
pub async fn run_gitrepository_controller(
    repos: Api<GitRepository>,
    secrets: Api<PartialObjectMeta<Secret>>,
    settings: ControllerSettings,
    metrics: ControllerMetrics,
    min_retry: Duration,
    max_retry: Duration,
    ctx: Arc<Context>,
    stop: CancellationToken,
    shards: Option<Shards>,
) {
    run_controller_sharded(
        repos,
        settings,
        metrics,
        min_retry,
        max_retry,
        ctx,
        reconcile,
        stop,
        shards,
        move |controller| {
            let store = controller.store();
            // Metadata is enough: the resourceVersion changes with the data.
            let mut changes = Changes::default();
            let stream = watcher(secrets, watcher::Config::default())
                .default_backoff()
                // Only the name, namespace and resourceVersion are used: `Changes` keeps one
                // copy of every Secret's metadata, so the rest is dropped.
                .modify(slim_metadata)
                .flat_map(move |event| {
                    let items: Vec<Result<PartialObjectMeta<Secret>, watcher::Error>> = match event
                    {
                        Ok(e) => changes.observe(e).into_iter().map(Ok).collect(),
                        Err(e) => vec![Err(e)],
                    };
                    futures::stream::iter(items)
                });
            controller.watches_stream(stream, move |secret| {
                map_secret(&store, secret.namespace(), &secret.name_any())
            })
        },
    )
    .await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn repo(ns: &str, name: &str, spec: serde_json::Value) -> GitRepository {
        let mut spec = spec;
        spec["url"] = json!("https://example.com/r.git");
        spec["interval"] = json!("1m");
        serde_json::from_value(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }))
        .unwrap()
    }

    fn secret(name: &str, rv: &str) -> Secret {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "a", "resourceVersion": rv},
        }))
        .unwrap()
    }

    fn names(v: Vec<Secret>) -> Vec<String> {
        v.into_iter().map(|s| s.name_any()).collect()
    }

    #[test]
    fn slim_metadata_keeps_identity_and_version() {
        let mut s: Secret = serde_json::from_value(json!({
            "metadata": {
                "name": "creds", "namespace": "a", "resourceVersion": "7", "uid": "u1",
                "labels": {"x": "y"}, "annotations": {"big": "z"},
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u2"}],
            },
        }))
        .unwrap();
        slim_metadata(&mut s);
        let m = &s.metadata;
        assert_eq!(
            (
                m.name.as_deref(),
                m.namespace.as_deref(),
                m.resource_version.as_deref(),
                m.uid.as_deref()
            ),
            (Some("creds"), Some("a"), Some("7"), Some("u1"))
        );
        assert!(m.labels.is_none() && m.annotations.is_none() && m.managed_fields.is_none());
        assert!(m.owner_references.is_none());
    }

    #[test]
    fn changes_skip_the_initial_list_and_unchanged_relists() {
        use watcher::Event;
        let mut c = Changes::<Secret>::default();
        assert!(c.observe(Event::Init).is_empty());
        assert!(c.observe(Event::InitApply(secret("one", "1"))).is_empty());
        assert!(c.observe(Event::InitApply(secret("two", "1"))).is_empty());
        assert!(c.observe(Event::InitDone).is_empty());
        assert_eq!(names(c.observe(Event::Apply(secret("one", "2")))), ["one"]);
        assert_eq!(names(c.observe(Event::Apply(secret("new", "5")))), ["new"]);
        assert_eq!(names(c.observe(Event::Delete(secret("two", "1")))), ["two"]);
        // A re-list after a watch restart: only what changed meanwhile.
        assert!(c.observe(Event::Init).is_empty());
        assert!(c.observe(Event::InitApply(secret("one", "2"))).is_empty());
        assert_eq!(
            names(c.observe(Event::InitApply(secret("new", "6")))),
            ["new"]
        );
        assert_eq!(
            names(c.observe(Event::InitApply(secret("two", "7")))),
            ["two"]
        );
        // "one" was deleted while the watch was down.
        let mut c2 = Changes::<Secret>::default();
        for e in [
            Event::Init,
            Event::InitApply(secret("one", "1")),
            Event::InitApply(secret("two", "1")),
            Event::InitDone,
            Event::Init,
            Event::InitApply(secret("two", "1")),
        ] {
            assert!(c2.observe(e).is_empty());
        }
        assert_eq!(names(c2.observe(Event::InitDone)), ["one"]);
        assert!(c.observe(Event::InitDone).is_empty());
    }

    #[test]
    fn maps_every_kind_of_secret_reference_in_the_same_namespace() {
        let repos = [
            repo("a", "auth", json!({"secretRef": {"name": "creds"}})),
            repo(
                "a",
                "verify",
                json!({"verify": {"mode": "HEAD", "secretRef": {"name": "keys"}}}),
            ),
            repo("a", "proxy", json!({"proxySecretRef": {"name": "creds"}})),
            repo("b", "other-ns", json!({"secretRef": {"name": "creds"}})),
            repo("a", "none", json!({})),
        ];
        let names = |ns: &str, secret: &str| {
            let mut v: Vec<String> = repositories_using_secret(&repos, ns, secret)
                .into_iter()
                .map(|r| r.name)
                .collect();
            v.sort();
            v
        };
        assert_eq!(names("a", "creds"), ["auth", "proxy"]);
        assert_eq!(names("a", "keys"), ["verify"]);
        assert_eq!(names("b", "creds"), ["other-ns"]);
        assert!(names("a", "unrelated").is_empty());
        assert!(names("c", "creds").is_empty());
        assert_eq!(
            referenced_secrets(&repos[0].spec),
            vec!["creds"],
            "secretRef only"
        );
        assert!(referenced_secrets(&repos[4].spec).is_empty());
    }
}
