//! Watch-driven self-heal and request-free no-op reconciles (the applied-object tracker,
//! kustomize-controller/src/tracker/), with both controller processes on a control plane of
//! their own (`heal`), so the apiserver's request counters see only this test.
//!
//! A Kustomization with a one-hour interval applies a ConfigMap and a Deployment. Then:
//! 1. someone edits a managed field of each (a merge patch with another field manager, what
//!    `kubectl edit` sends): both are reverted, long before any interval;
//! 2. someone deletes the ConfigMap: it is recreated;
//! 3. someone adds a label of their own (a field the Kustomization does not manage): it stays
//!    and the Kustomization is not reconciled for it;
//! 4. a requested reconcile with nothing to change sends no request for the applied objects
//!    (from `apiserver_request_total`): no GET, no dry-run, no apply; one status patch.
//!
//! The times are printed (measured, not asserted).
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::metrics::{Counts, diff, scrape_request_total};
use rflux_e2e::{ControlPlane, GitServer};
use serde_json::json;
use support::procs::{
    ControllerOptions, Controllers, apply_value, install_crds, ks_ready, wait_for, wait_ks,
};

const TIMEOUT: Duration = Duration::from_secs(90);

const MANIFESTS: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: heal-config
data:
  value: v1
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: heal
spec:
  replicas: 0
  selector:
    matchLabels:
      app: heal
  template:
    metadata:
      labels:
        app: heal
      annotations:
        mode: one
    spec:
      containers:
      - name: app
        image: registry.invalid/app:1
"#;

async fn cm_value(cms: &Api<ConfigMap>) -> Option<String> {
    cms.get_opt("heal-config")
        .await
        .ok()
        .flatten()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .and_then(|c| c.data)
        .and_then(|d| d.get("value").cloned())
}

async fn pod_mode(deploys: &Api<Deployment>) -> Option<String> {
    deploys
        .get("heal")
        .await
        .ok()?
        .spec?
        .template
        .metadata?
        .annotations?
        .get("mode")
        .cloned()
}

fn total_reconciliations(ks: &Kustomization) -> i64 {
    ks.status
        .as_ref()
        .and_then(|s| s.history.as_ref())
        .and_then(|h| h.first())
        .map_or(0, |h| h.total_reconciliations)
}

/// Requests for `resource` (any verb) in a request-count difference.
fn requests_for(counts: &Counts, resource: &str) -> f64 {
    counts
        .iter()
        .filter(|(k, _)| {
            k.split_whitespace()
                .nth(1)
                .is_some_and(|r| r == resource || r.ends_with(&format!("/{resource}")))
        })
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_reverted_at_once_and_noop_reconciles_send_no_object_requests() {
    let cp = ControlPlane::shared_named("heal").await.unwrap();
    let client: Client = cp.client().await.unwrap();
    install_crds(&client).await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let ns = cp.create_namespace("heal").await.unwrap();
    let mut ctl = Controllers::start(cp, ControllerOptions::default())
        .await
        .unwrap();

    let repo = git.create_repo("heal").unwrap();
    repo.write("deploy/all.yaml", MANIFESTS).unwrap();
    let sha = repo.commit("initial").unwrap();
    repo.push("main").unwrap();
    let rev = format!("main@sha1:{sha}");

    let mut gitrepo = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "repo", "namespace": ns},
        "spec": {"url": git.http_url(repo.name()), "interval": "1h", "ref": {"branch": "main"}}
    });
    ctl.label_object(&mut gitrepo);
    apply_value(&client, &gitrepo, "e2e").await.unwrap();
    let mut ks = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "heal", "namespace": ns},
        "spec": {"interval": "1h", "retryInterval": "1h", "timeout": "60s", "prune": true,
                 "wait": true, "path": "./deploy", "targetNamespace": ns,
                 "sourceRef": {"kind": "GitRepository", "name": "repo"}}
    });
    ctl.label_object(&mut ks);
    apply_value(&client, &ks, "e2e").await.unwrap();

    let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let ready_at_rev = |k: &Kustomization| {
        ks_ready(k)
            && k.status
                .as_ref()
                .and_then(|s| s.last_applied_revision.as_deref())
                == Some(rev.as_str())
    };
    wait_ks(&ks_api, &mut ctl, TIMEOUT, "heal", "Ready", ready_at_rev).await;
    assert_eq!(cm_value(&cms).await.as_deref(), Some("v1"));
    assert_eq!(pod_mode(&deploys).await.as_deref(), Some("one"));
    // Let the first reconcile's own watch events settle.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 1. Edits of managed fields, as `kubectl edit` sends them.
    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    let edited = Instant::now();
    cms.patch(
        "heal-config",
        &edit,
        &Patch::Merge(json!({"data": {"value": "edited"}})),
    )
    .await
    .unwrap();
    let res = wait_for(TIMEOUT, "ConfigMap value reverted", || async {
        Ok((cm_value(&cms).await.as_deref() == Some("v1")).then(|| edited.elapsed()))
    })
    .await;
    let t_cm = res.unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(40)));

    let edited = Instant::now();
    deploys
        .patch(
            "heal",
            &edit,
            &Patch::Merge(
                json!({"spec": {"template": {"metadata": {"annotations": {"mode": "two"}}}}}),
            ),
        )
        .await
        .unwrap();
    let res = wait_for(TIMEOUT, "Deployment annotation reverted", || async {
        Ok((pod_mode(&deploys).await.as_deref() == Some("one")).then(|| edited.elapsed()))
    })
    .await;
    let t_dep = res.unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(40)));

    // 2. A deleted object is recreated.
    let deleted = Instant::now();
    cms.delete("heal-config", &DeleteParams::default())
        .await
        .unwrap();
    let res = wait_for(TIMEOUT, "ConfigMap recreated", || async {
        Ok(cm_value(&cms).await.is_some().then(|| deleted.elapsed()))
    })
    .await;
    let t_del = res.unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(40)));
    println!(
        "measured (interval 1h): drift reverted after: ConfigMap value {:.3}s, Deployment pod annotation {:.3}s; deleted ConfigMap recreated after {:.3}s",
        t_cm.as_secs_f64(),
        t_dep.as_secs_f64(),
        t_del.as_secs_f64()
    );
    wait_ks(&ks_api, &mut ctl, TIMEOUT, "heal", "Ready", ready_at_rev).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 3. A field of someone else's is theirs: kept, and no reconcile for it.
    let before = total_reconciliations(&ks_api.get("heal").await.unwrap());
    cms.patch(
        "heal-config",
        &PatchParams::apply("someone-else"),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "heal-config", "labels": {"team": "blue"}}})),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cm = cms.get("heal-config").await.unwrap();
    assert_eq!(cm.labels().get("team").map(String::as_str), Some("blue"));
    let after = total_reconciliations(&ks_api.get("heal").await.unwrap());
    assert_eq!(
        before, after,
        "a change to a field the Kustomization does not manage reconciled it"
    );

    // 4. A requested no-op reconcile: no request for the applied objects.
    let m0 = scrape_request_total(&client).await.unwrap();
    let requested = k8s_openapi::jiff::Timestamp::now().to_string();
    ks_api
        .patch(
            "heal",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "reconcile.fluxcd.io/requestedAt": requested}}})),
        )
        .await
        .unwrap();
    let res = wait_for(TIMEOUT, "the requested reconcile handled", || async {
        let k = ks_api.get("heal").await?;
        let handled = k
            .status
            .as_ref()
            .and_then(|s| s.last_handled_reconcile_at.as_deref())
            == Some(requested.as_str());
        Ok((handled && ready_at_rev(&k)).then_some(()))
    })
    .await;
    res.unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(40)));
    // Late requests (events, a second status patch) would land within this.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let m1 = scrape_request_total(&client).await.unwrap();
    let delta = diff(&m0, &m1);
    println!("measured: apiserver requests around a no-op reconcile: {delta:?}");
    assert_eq!(
        requests_for(&delta, "configmaps"),
        0.0,
        "requests for the ConfigMap: {delta:?}"
    );
    assert_eq!(
        requests_for(&delta, "deployments"),
        0.0,
        "requests for the Deployment: {delta:?}"
    );
    assert_eq!(
        requests_for(&delta, "gitrepositories"),
        0.0,
        "the source comes from the watch cache: {delta:?}"
    );
    let status_patches = delta
        .get("PATCH kustomize.toolkit.fluxcd.io/kustomizations/status")
        .copied()
        .unwrap_or(0.0);
    assert_eq!(status_patches, 1.0, "one status patch: {delta:?}");

    ctl.check_alive().unwrap();
    ks_api
        .delete("heal", &DeleteParams::default())
        .await
        .unwrap();
    let res = wait_for(TIMEOUT, "Kustomization finalized", || async {
        Ok(ks_api.get_opt("heal").await?.is_none().then_some(()))
    })
    .await;
    res.unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(40)));
    let repos: Api<GitRepository> = Api::namespaced(client.clone(), &ns);
    repos
        .delete("repo", &DeleteParams::default())
        .await
        .unwrap();
    ctl.stop();
}
