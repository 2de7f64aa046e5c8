//! The harness of the kustomize-controller fault scenarios (`faults_apply.rs`): both controller
//! processes on the shared control plane, kustomize-controller talking to the apiserver through
//! a [`FaultProxy`], a repository on the real git server, and the invariants every scenario
//! checks once its fault has cleared:
//! - no object still in Git was deleted or recreated ([`Uids`]: uids by name, before and after);
//! - nothing removed from Git survives with `prune: true` ([`Env::assert_absent`]);
//! - the Kustomization converges to Ready at the latest revision ([`Env::wait_ready_at`]) and
//!   its inventory lists exactly what Git holds ([`Env::assert_inventory`]).
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::fault_proxy::{Action, FaultProxy, HeldRequest, Rule, RuleId};
use rflux_e2e::{ControlPlane, GitServer, TestRepo};
use serde_json::{Value, json};

use crate::support::lock_crds_and_install;
use crate::support::procs::{
    ControllerOptions, Controllers, apply_value, ks_condition, ks_ready, wait_for, wait_ks,
};

/// Generous: convergence after a fault may take a few retries.
pub const TIMEOUT: Duration = Duration::from_secs(90);

/// The Kustomization every scenario uses.
pub const KS: &str = "app";

/// Whether the whole fault suite runs (`RFLUX_FAULTS=1`); prints why not when it does not.
pub fn faults_enabled(test: &str) -> bool {
    let on = std::env::var("RFLUX_FAULTS").is_ok_and(|v| !v.is_empty() && v != "0");
    if !on {
        eprintln!(
            "skipping {test}: the fault-injection suite runs with RFLUX_FAULTS=1 (make faults)"
        );
    }
    on
}

pub fn cm(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// A scenario's world: the proxy, the controllers, the namespace, the repository.
pub struct Env {
    pub client: Client,
    pub ns: String,
    pub proxy: FaultProxy,
    pub ctl: Controllers,
    pub repo: TestRepo,
    pub ks: Api<Kustomization>,
    pub cms: Api<ConfigMap>,
    _kubeconfig: tempfile::TempDir,
    _crd_lock: std::fs::File,
}

impl Env {
    /// Starts the proxy (RNG `seed`), both controllers (kustomize-controller behind the proxy),
    /// and a GitRepository `repo` on a new git repository holding `files` under `deploy/`;
    /// waits for its first artifact.
    pub async fn start(prefix: &str, seed: u64, files: &[(&str, String)]) -> Env {
        let cp = ControlPlane::shared().await.unwrap();
        let client = cp.client().await.unwrap();
        // Held for the whole scenario: the CRD compatibility test may not swap the CRDs.
        let crd_lock = lock_crds_and_install(&client).await;
        let git = GitServer::shared().await.unwrap();
        let ns = cp.create_namespace(prefix).await.unwrap();
        let proxy = FaultProxy::start(cp.server_url(), &cp.ca_pem().unwrap(), seed)
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            cp.token_kubeconfig(Some(&proxy.url())).unwrap(),
        )
        .unwrap();
        let opts = ControllerOptions {
            kustomize_kubeconfig: Some(kubeconfig),
            ..ControllerOptions::default()
        };
        let ctl = Controllers::start(cp, opts).await.unwrap();

        let repo = git.create_repo(prefix).unwrap();
        repo.write("README.md", "fault scenario\n").unwrap();
        for (name, text) in files {
            repo.write(&format!("deploy/{name}.yaml"), text).unwrap();
        }
        let sha = repo.commit("initial").unwrap();
        repo.push("main").unwrap();
        let mut gitrepo = json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": "repo", "namespace": ns},
            "spec": {"url": git.http_url(repo.name()), "interval": "1s", "ref": {"branch": "main"}}
        });
        ctl.label_object(&mut gitrepo);
        apply_value(&client, &gitrepo, "e2e").await.unwrap();
        let repos: Api<GitRepository> = Api::namespaced(client.clone(), &ns);
        let rev = format!("main@sha1:{sha}");
        let res = wait_for(TIMEOUT, "the GitRepository's first artifact", || async {
            let r = repos.get("repo").await?;
            Ok(r.status
                .and_then(|s| s.artifact)
                .filter(|a| a.revision == rev)
                .map(|_| ()))
        })
        .await;
        if let Err(e) = res {
            panic!("{e}\n{}", ctl.log_tails(40));
        }
        Env {
            ks: Api::namespaced(client.clone(), &ns),
            cms: Api::namespaced(client.clone(), &ns),
            client,
            ns,
            proxy,
            ctl,
            repo,
            _kubeconfig: dir,
            _crd_lock: crd_lock,
        }
    }

    /// The current `main@sha1:<head>` revision.
    pub fn revision(&self) -> String {
        format!("main@sha1:{}", self.repo.head().unwrap())
    }

    /// Creates the Kustomization [`KS`] over `./deploy` (`prune` as given, retries every 2 s).
    pub async fn create_ks(&self, prune: bool) {
        self.create_ks_with(json!({"prune": prune})).await;
    }

    /// Creates the Kustomization [`KS`] over `./deploy` (retries every 2 s), `extra` merged
    /// into its spec.
    pub async fn create_ks_with(&self, extra: Value) {
        let mut obj = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": KS, "namespace": self.ns},
            "spec": {"interval": "10m", "retryInterval": "2s", "timeout": "30s", "prune": true,
                     "path": "./deploy", "targetNamespace": self.ns,
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}}
        });
        if let (Some(spec), Some(extra)) = (obj["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        self.ctl.label_object(&mut obj);
        apply_value(&self.client, &obj, "e2e").await.unwrap();
    }

    /// Writes (`Some`) or removes (`None`) files under `deploy/`, commits and pushes; returns
    /// the new revision.
    pub fn push(&self, changes: &[(&str, Option<String>)], msg: &str) -> String {
        for (name, text) in changes {
            let path = format!("deploy/{name}.yaml");
            match text {
                Some(t) => self.repo.write(&path, t).unwrap(),
                None => self.repo.remove(&path).unwrap(),
            }
        }
        let sha = self.repo.commit(msg).unwrap();
        self.repo.push("main").unwrap();
        format!("main@sha1:{sha}")
    }

    /// Waits until [`KS`] is Ready at `revision`; returns it and the seconds it took.
    pub async fn wait_ready_at(&mut self, revision: &str) -> (Kustomization, f64) {
        let t = Instant::now();
        let ks = wait_ks(
            &self.ks,
            &mut self.ctl,
            TIMEOUT,
            KS,
            &format!("{KS} Ready at {revision}"),
            |ks| {
                let applied = ks
                    .status
                    .as_ref()
                    .and_then(|s| s.last_applied_revision.as_deref());
                ks_ready(ks) && applied == Some(revision)
            },
        )
        .await;
        (ks, t.elapsed().as_secs_f64())
    }

    /// The ConfigMap's `data.value`, `None` when absent or being deleted.
    pub async fn value(&self, name: &str) -> Option<String> {
        self.cms
            .get_opt(name)
            .await
            .unwrap()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .and_then(|c| c.data)
            .and_then(|d| d.get("value").cloned())
    }

    /// Asserts each named ConfigMap has the given value.
    pub async fn assert_values(&self, want: &[(&str, &str)]) {
        for (name, value) in want {
            assert_eq!(
                self.value(name).await.as_deref(),
                Some(*value),
                "ConfigMap {name}\n{}",
                self.ctl.log_tails(30)
            );
        }
    }

    /// Asserts none of the named ConfigMaps exists (not even terminating).
    pub async fn assert_absent(&self, names: &[&str]) {
        for name in names {
            let live = self.cms.get_opt(name).await.unwrap();
            assert!(
                live.is_none(),
                "ConfigMap {name} removed from Git still exists: {:?}\n{}",
                live.map(|c| c.metadata),
                self.ctl.log_tails(30)
            );
        }
    }

    /// Asserts the inventory of `ks` lists exactly the named ConfigMaps of this namespace.
    pub fn assert_inventory(&self, ks: &Kustomization, names: &[&str]) {
        let mut got: Vec<String> = ks
            .status
            .as_ref()
            .and_then(|s| s.inventory.as_ref())
            .map(|i| i.entries.iter().map(|e| e.id.clone()).collect())
            .unwrap_or_default();
        got.sort();
        let mut want: Vec<String> = names
            .iter()
            .map(|n| format!("{}_{n}__ConfigMap", self.ns))
            .collect();
        want.sort();
        assert_eq!(got, want, "inventory of {}", ks.name_any());
    }

    /// The Ready condition as `(status, reason, message)`.
    pub async fn ready(&self) -> Option<(String, String, String)> {
        let ks = self.ks.get_opt(KS).await.ok().flatten()?;
        ks_condition(&ks, "Ready").map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    }

    /// Adds a rule holding the next non-dry-run PATCH (apply) of a ConfigMap in this namespace.
    pub fn hold_next_apply(&self) -> RuleId {
        let path =
            regex::Regex::new(&format!("^/api/v1/namespaces/{}/configmaps/", self.ns)).unwrap();
        self.proxy.add(
            Rule::new(Action::Hold)
                .method(http::Method::PATCH)
                .path(path)
                .filter(|r| !r.has_query_key("dryRun"))
                .times(1),
        )
    }

    /// Waits for the request rule `id` holds; the error names the controller logs.
    pub async fn held(&self, id: RuleId, what: &str) -> HeldRequest {
        match self.proxy.next_held(id, TIMEOUT).await {
            Ok(h) => {
                eprintln!(
                    "held {what}: {} {}?{}",
                    h.info.method, h.info.path, h.info.query
                );
                h
            }
            Err(e) => panic!("{what}: {e}\n{}", self.ctl.log_tails(40)),
        }
    }

    /// Deletes [`KS`] (as a user would) and waits until it is gone (its finalizer ran).
    pub async fn delete_ks(&self) {
        self.ks.delete(KS, &DeleteParams::default()).await.unwrap();
    }

    pub async fn wait_ks_gone(&self) -> f64 {
        let t = Instant::now();
        let res = wait_for(TIMEOUT, "the Kustomization to be finalized", || async {
            Ok(self.ks.get_opt(KS).await?.is_none().then_some(()))
        })
        .await;
        if let Err(e) = res {
            let left = self.ks.get_opt(KS).await.ok().flatten();
            panic!(
                "{e}\nstill there: {:?}\n{}",
                left.map(|k| (k.metadata.finalizers, k.status)),
                self.ctl.log_tails(40)
            );
        }
        t.elapsed().as_secs_f64()
    }

    /// Edits `data.value` of a ConfigMap with a merge patch by another field manager (what
    /// `kubectl edit` sends), through the admin client, not the proxy.
    pub async fn edit_value(&self, name: &str, value: &str) {
        let patch = json!({"data": {"value": value}});
        self.cms
            .patch(
                name,
                &PatchParams {
                    field_manager: Some("intruder".into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }
}

/// uids of ConfigMaps by name: a snapshot, to show nothing was deleted or recreated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uids(pub BTreeMap<String, String>);

impl Uids {
    /// The uids of the named ConfigMaps; each must exist.
    pub async fn snapshot(cms: &Api<ConfigMap>, names: &[&str]) -> Uids {
        let mut m = BTreeMap::new();
        for name in names {
            let cm = cms
                .get_opt(name)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("ConfigMap {name} does not exist"));
            m.insert(name.to_string(), cm.uid().unwrap_or_default());
        }
        Uids(m)
    }

    /// Asserts every ConfigMap of the snapshot still exists with the same uid.
    pub async fn assert_unchanged(&self, cms: &Api<ConfigMap>) {
        let names: Vec<&str> = self.0.keys().map(String::as_str).collect();
        let mut now = BTreeMap::new();
        for name in &names {
            let uid = cms
                .get_opt(name)
                .await
                .unwrap()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .and_then(|c| c.uid());
            now.insert(name.to_string(), uid.unwrap_or_else(|| "<absent>".into()));
        }
        assert_eq!(
            now, self.0,
            "objects still in Git were deleted or recreated"
        );
    }
}

/// Extra detail for a failure message: the Kustomization's status as JSON.
pub async fn status_json(ks: &Api<Kustomization>) -> Value {
    ks.get_opt(KS)
        .await
        .ok()
        .flatten()
        .and_then(|k| serde_json::to_value(k.status).ok())
        .unwrap_or(Value::Null)
}
