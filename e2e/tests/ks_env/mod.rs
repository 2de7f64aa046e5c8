//! The world of the `ks_ownership` and `ks_gates` tests: both controller processes on the
//! shared control plane (holding the CRD lock), one repository on the real git server and a
//! GitRepository `repo` on it, with helpers to push, create, request, wait and delete.
#![allow(dead_code)]

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::{ControlPlane, GitServer, TestRepo};
use serde_json::{Value, json};

use crate::support::lock_crds_and_install;
use crate::support::procs::{
    ControllerOptions, Controllers, apply_value, ks_condition, ks_ready, wait_for, wait_ks,
};

pub const TIMEOUT: Duration = Duration::from_secs(90);

pub fn cm(name: &str, data: &[(&str, &str)]) -> String {
    let mut s = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n");
    for (k, v) in data {
        s.push_str(&format!("  {k}: \"{v}\"\n"));
    }
    s
}

/// A test's world: controllers, namespace, repository and a GitRepository `repo` on it.
pub struct Env {
    pub client: Client,
    pub ns: String,
    pub ctl: Controllers,
    pub repo: TestRepo,
    pub ks: Api<Kustomization>,
    pub cms: Api<ConfigMap>,
    pub gitrepos: Api<GitRepository>,
    _crd_lock: std::fs::File,
}

impl Env {
    /// Starts the controllers (kustomize-controller with `--feature-gates=<gates>` when not
    /// empty), commits `files` and waits for the first artifact.
    pub async fn start(prefix: &str, gates: &str, files: &[(&str, String)]) -> Env {
        let args = if gates.is_empty() {
            Vec::new()
        } else {
            vec![format!("--feature-gates={gates}")]
        };
        Env::start_with_args(prefix, args, files).await
    }

    /// [`Env::start`] with `args` given to kustomize-controller.
    pub async fn start_with_args(prefix: &str, args: Vec<String>, files: &[(&str, String)]) -> Env {
        let cp = ControlPlane::shared().await.unwrap();
        let client = cp.client().await.unwrap();
        let crd_lock = lock_crds_and_install(&client).await;
        let git = GitServer::shared().await.unwrap();
        let ns = cp.create_namespace(prefix).await.unwrap();
        let opts = ControllerOptions {
            kustomize_args: args,
            ..ControllerOptions::default()
        };
        let ctl = Controllers::start(cp, opts).await.unwrap();
        let repo = git.create_repo(prefix).unwrap();
        for (path, text) in files {
            repo.write(path, text).unwrap();
        }
        let sha = repo.commit("initial").unwrap();
        repo.push("main").unwrap();
        let mut gitrepo = json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": "repo", "namespace": ns},
            "spec": {"url": git.http_url(repo.name()), "interval": "1h", "ref": {"branch": "main"}}
        });
        ctl.label_object(&mut gitrepo);
        apply_value(&client, &gitrepo, "e2e").await.unwrap();
        let env = Env {
            ks: Api::namespaced(client.clone(), &ns),
            cms: Api::namespaced(client.clone(), &ns),
            gitrepos: Api::namespaced(client.clone(), &ns),
            client,
            ns,
            ctl,
            repo,
            _crd_lock: crd_lock,
        };
        env.wait_source(&format!("main@sha1:{sha}")).await;
        env
    }

    pub async fn wait_source(&self, rev: &str) {
        let res = wait_for(TIMEOUT, &format!("GitRepository at {rev}"), || async {
            let r = self.gitrepos.get("repo").await?;
            let at = r
                .status
                .as_ref()
                .and_then(|s| s.artifact.as_ref())
                .map(|a| a.revision.clone());
            Ok((at.as_deref() == Some(rev)).then_some(()))
        })
        .await;
        if let Err(e) = res {
            panic!("{e}\n{}", self.ctl.log_tails(40));
        }
    }

    /// Commits and pushes the work tree, asks for a fetch, waits for the artifact; the revision.
    pub async fn push(&self, msg: &str) -> String {
        let sha = self.repo.commit(msg).unwrap();
        self.repo.push("main").unwrap();
        let rev = format!("main@sha1:{sha}");
        self.gitrepos
            .patch(
                "repo",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    "reconcile.fluxcd.io/requestedAt": rflux_e2e::random_suffix(8)}}})),
            )
            .await
            .unwrap();
        self.wait_source(&rev).await;
        rev
    }

    /// Creates the Kustomization `name` of `./<path>` (prune, 2 s retry, 1 h interval), with
    /// `spec` merged into its spec and `annotations`.
    pub async fn create_ks(&self, name: &str, path: &str, spec: Value, annotations: Value) {
        let mut ks = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": self.ns, "annotations": annotations},
            "spec": {"interval": "1h", "retryInterval": "2s", "timeout": "60s", "prune": true,
                     "path": path, "targetNamespace": self.ns,
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}}
        });
        if let (Some(dst), Some(src)) = (ks["spec"].as_object_mut(), spec.as_object()) {
            dst.extend(src.clone());
        }
        self.ctl.label_object(&mut ks);
        apply_value(&self.client, &ks, "e2e").await.unwrap();
    }

    /// Merges `annotations` into the Kustomization's, with a fresh `requestedAt`.
    pub async fn request(&self, name: &str, annotations: Value) {
        let mut a = annotations;
        a["reconcile.fluxcd.io/requestedAt"] = json!(rflux_e2e::random_suffix(8));
        self.ks
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": a}})),
            )
            .await
            .unwrap();
    }

    pub async fn wait_ks(
        &mut self,
        name: &str,
        what: &str,
        pred: impl Fn(&Kustomization) -> bool,
    ) -> Kustomization {
        let api = self.ks.clone();
        wait_ks(&api, &mut self.ctl, TIMEOUT, name, what, pred).await
    }

    /// Deletes the Kustomization and waits until it is gone (its finalizer ran).
    pub async fn delete_ks(&self, name: &str) {
        self.ks
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        let res = wait_for(TIMEOUT, &format!("Kustomization {name} gone"), || async {
            Ok(self.ks.get_opt(name).await?.is_none().then_some(()))
        })
        .await;
        if let Err(e) = res {
            panic!("{e}\n{}", self.ctl.log_tails(40));
        }
    }

    pub async fn cm(&self, name: &str) -> Option<ConfigMap> {
        self.cms
            .get_opt(name)
            .await
            .unwrap()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
    }

    pub async fn data(&self, name: &str, key: &str) -> Option<String> {
        self.cm(name).await?.data?.get(key).cloned()
    }
}

pub fn ready_at(k: &Kustomization, rev: &str) -> bool {
    ks_ready(k)
        && k.status
            .as_ref()
            .and_then(|s| s.last_applied_revision.as_deref())
            == Some(rev)
}

/// Ready=False with `reason` (for the current generation: Flux leaves
/// `status.observedGeneration` behind on failures) whose message contains every `needles`.
pub fn failed_with(k: &Kustomization, reason: &str, needles: &[&str]) -> bool {
    ks_condition(k, "Ready").is_some_and(|c| {
        c.status == "False"
            && c.reason == reason
            && c.observed_generation == k.metadata.generation
            && needles.iter().all(|n| c.message.contains(n))
    })
}

pub fn ready_message(k: &Kustomization) -> String {
    ks_condition(k, "Ready")
        .map(|c| format!("{} {}: {}", c.status, c.reason, c.message))
        .unwrap_or_default()
}

/// A one-replica Deployment in Argo sync wave `wave` (the Argo tests).
pub fn argo_deployment(name: &str, wave: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  annotations:
    argocd.argoproj.io/sync-wave: \"{wave}\"
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
      - name: app
        image: nginx:1.27
"
    )
}

/// A kustomization listing `resources`.
pub fn argo_kustomization(resources: &[&str]) -> String {
    let mut s = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
        .to_string();
    for r in resources {
        s.push_str(&format!("- {r}\n"));
    }
    s
}
