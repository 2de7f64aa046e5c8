//! The GitRepository watch: when a source's artifact appears or its revision
//! changes, the Kustomizations that reference it are reconciled at once instead of at their
//! next interval. Those already Ready (or Reconciling) with `lastAttemptedRevision` equal to
//! the new revision are skipped, like Flux does.
//!
//! [`SourceRevisions`] is the predicate (it remembers the last revision seen per source) and
//! [`dependents`] the mapping over the Kustomization cache; both are pure and the controller
//! binary wires them into kube-runtime's `Controller::watches`.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_common::api::meta::SourceKind;
use rflux_common::runtime::conditions as cond;

/// Remembers the artifact revision last seen for each GitRepository (`namespace/name`).
#[derive(Debug, Default)]
pub struct SourceRevisions {
    seen: Mutex<HashMap<String, String>>,
}

impl SourceRevisions {
    /// Records the repository's artifact revision; `Some(revision)` when the artifact appeared
    /// or its revision changed since the last call (Flux's `SourceRevisionChangePredicate`),
    /// `None` otherwise (status-only updates, no artifact, deletion).
    pub fn changed(&self, repo: &GitRepository) -> Option<String> {
        let key = format!(
            "{}/{}",
            repo.namespace().unwrap_or_default(),
            repo.name_any()
        );
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if repo.metadata.deletion_timestamp.is_some() {
            seen.remove(&key);
            return None;
        }
        let revision = repo
            .status
            .as_ref()
            .and_then(|s| s.artifact.as_ref())
            .map(|a| a.revision.clone())?;
        if seen.get(&key) == Some(&revision) {
            return None;
        }
        seen.insert(key, revision.clone());
        Some(revision)
    }
}

/// The Kustomizations to reconcile because `repo` has a new artifact `revision`: those whose
/// `sourceRef` names it (kind GitRepository, namespace defaulting to their own), except the
/// ones that are Ready or Reconciling and already attempted `revision`.
pub fn dependents<'a>(
    repo: &GitRepository,
    revision: &str,
    kustomizations: impl IntoIterator<Item = &'a Kustomization>,
) -> Vec<ObjectRef<Kustomization>> {
    let repo_ns = repo.namespace().unwrap_or_default();
    let repo_name = repo.name_any();
    kustomizations
        .into_iter()
        .filter(|ks| {
            let ns = ks.namespace().unwrap_or_default();
            let r = &ks.spec.source_ref;
            r.kind == SourceKind::GitRepository
                && r.name == repo_name
                && r.namespace_or(&ns) == repo_ns
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
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
}
