//! Remote clusters as first-class as the local one (issue 19): a hub and two spokes, three
//! real control planes. The hub runs both controllers; each spoke's kubeconfig (a client
//! certificate of a user of its own, `hub-deployer-<n>`) is in a Secret on the hub, and one
//! GitRepository feeds one Kustomization per spoke (`spec.kubeConfig.secretRef`).
//!
//! (a) both spokes reconciled, Ready;
//! (b) a `kubectl edit`-like patch of an applied object on spoke 1 is reverted by the spoke's
//!     own tracker (the latency is printed, not asserted);
//! (d) a requested no-op reconcile of the spoke-1 Kustomization: the requests it costs on the
//!     hub (the status patch; no Secret or source read) and on the spoke (none for the applied
//!     object), counted from both apiservers' `apiserver_request_total`;
//! (e) the spoke-1 kubeconfig Secret rotated (another user): the Kustomization is reconciled at
//!     once, and edits on the spoke are reverted by the new entry's tracker;
//! (c) spoke 2's apiserver stopped: its Kustomization turns Ready=False naming the spoke's
//!     server; a change pushed meanwhile lands on spoke 1 (latency printed); spoke 2's
//!     apiserver started again: it converges (latency printed).
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::metrics::{Counts, diff, scrape_request_total, total};
use rflux_e2e::{Component, ControlPlane, GitServer};
use serde_json::json;
use support::procs::{
    ControllerOptions, Controllers, apply_value, install_crds, ks_condition, ks_ready, wait_for,
    wait_ks,
};

const TIMEOUT: Duration = Duration::from_secs(120);

fn manifests(value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fleet-config\ndata:\n  value: {value}\n"
    )
}

async fn cm_value(cms: &Api<ConfigMap>) -> Option<String> {
    cms.get_opt("fleet-config")
        .await
        .ok()
        .flatten()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .and_then(|c| c.data)
        .and_then(|d| d.get("value").cloned())
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

fn total_reconciliations(ks: &Kustomization) -> i64 {
    ks.status
        .as_ref()
        .and_then(|s| s.history.as_ref())
        .and_then(|h| h.first())
        .map_or(0, |h| h.total_reconciliations)
}

fn applied_rev(ks: &Kustomization) -> Option<&str> {
    ks.status.as_ref()?.last_applied_revision.as_deref()
}

/// Creates namespace `ns` on `client`'s cluster.
async fn create_ns(client: &Client, ns: &str) {
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_and_two_spokes() {
    let hub = ControlPlane::shared_named("fleet-hub").await.unwrap();
    let spoke1 = ControlPlane::shared_named("fleet-spoke1").await.unwrap();
    // Spoke 2's apiserver is stopped and started: an instance of this test's own.
    let mut spoke2 = ControlPlane::ensure("fleet-spoke2").await.unwrap();
    let client = hub.client().await.unwrap();
    let c1 = spoke1.client().await.unwrap();
    let c2 = spoke2.client().await.unwrap();
    install_crds(&client).await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let ns = hub.create_namespace("fleet").await.unwrap();
    create_ns(&c1, &ns).await;
    create_ns(&c2, &ns).await;

    // Each spoke's kubeconfig in a Secret on the hub, with a user of its own.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    for (i, spoke) in [(1, spoke1), (2, &spoke2)] {
        let path = spoke
            .user_kubeconfig(&format!("hub-deployer-{i}"), &["system:masters"])
            .unwrap();
        let text = std::fs::read_to_string(path).unwrap();
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("spoke{i}-kubeconfig")},
            "stringData": {"value": text}
        }))
        .unwrap();
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }

    let mut ctl = Controllers::start(hub, ControllerOptions::default())
        .await
        .unwrap();
    let repo = git.create_repo("fleet").unwrap();
    repo.write("deploy/all.yaml", &manifests("v1")).unwrap();
    let sha = repo.commit("v1").unwrap();
    repo.push("main").unwrap();
    let rev1 = format!("main@sha1:{sha}");
    let mut gitrepo = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "fleet", "namespace": ns},
        "spec": {"url": git.http_url(repo.name()), "interval": "1h", "ref": {"branch": "main"}}
    });
    ctl.label_object(&mut gitrepo);
    apply_value(&client, &gitrepo, "e2e").await.unwrap();
    for i in [1, 2] {
        let mut ks = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": format!("spoke{i}"), "namespace": ns},
            "spec": {"interval": "1h", "retryInterval": "1h", "timeout": "20s", "prune": true,
                     "wait": true, "path": "./deploy", "targetNamespace": ns,
                     "kubeConfig": {"secretRef": {"name": format!("spoke{i}-kubeconfig")}},
                     "sourceRef": {"kind": "GitRepository", "name": "fleet"}}
        });
        ctl.label_object(&mut ks);
        apply_value(&client, &ks, "e2e").await.unwrap();
    }
    let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), &ns);
    let cms1: Api<ConfigMap> = Api::namespaced(c1.clone(), &ns);
    let cms2: Api<ConfigMap> = Api::namespaced(c2.clone(), &ns);
    let hub_cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // (a) Both spokes reconciled from the one GitRepository.
    for name in ["spoke1", "spoke2"] {
        let at = rev1.clone();
        wait_ks(&ks_api, &mut ctl, TIMEOUT, name, "Ready", move |k| {
            ks_ready(k) && applied_rev(k) == Some(at.as_str())
        })
        .await;
    }
    assert_eq!(cm_value(&cms1).await.as_deref(), Some("v1"));
    assert_eq!(cm_value(&cms2).await.as_deref(), Some("v1"));
    assert_eq!(cm_value(&hub_cms).await, None, "applied on the hub");
    // Let the first reconciles' own watch events settle.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // (b) `kubectl edit` on spoke 1: reverted by the spoke's tracker.
    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    let edited = Instant::now();
    cms1.patch(
        "fleet-config",
        &edit,
        &Patch::Merge(json!({"data": {"value": "edited"}})),
    )
    .await
    .unwrap();
    let res = wait_for(TIMEOUT, "the edit on spoke 1 reverted", || async {
        Ok((cm_value(&cms1).await.as_deref() == Some("v1")).then(|| edited.elapsed()))
    })
    .await;
    let t_revert = res.unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(60)));
    println!(
        "measured: kubectl edit on spoke 1 reverted after {:.3}s (interval 1h)",
        t_revert.as_secs_f64()
    );
    let at = rev1.clone();
    wait_ks(&ks_api, &mut ctl, TIMEOUT, "spoke1", "Ready", move |k| {
        ks_ready(k) && applied_rev(k) == Some(at.as_str())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // (d) A requested no-op reconcile of spoke 1: requests on the hub and on the spoke.
    let h0 = scrape_request_total(&client).await.unwrap();
    let s0 = scrape_request_total(&c1).await.unwrap();
    let requested = k8s_openapi::jiff::Timestamp::now().to_string();
    ks_api
        .patch(
            "spoke1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "reconcile.fluxcd.io/requestedAt": requested}}})),
        )
        .await
        .unwrap();
    let res = wait_for(TIMEOUT, "the requested reconcile handled", || async {
        let k = ks_api.get("spoke1").await?;
        let handled = k
            .status
            .as_ref()
            .and_then(|s| s.last_handled_reconcile_at.as_deref())
            == Some(requested.as_str());
        Ok((handled && ks_ready(&k)).then_some(()))
    })
    .await;
    res.unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(60)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let hub_delta = diff(&h0, &scrape_request_total(&client).await.unwrap());
    let spoke_delta = diff(&s0, &scrape_request_total(&c1).await.unwrap());
    let status_patches = hub_delta
        .get("PATCH kustomize.toolkit.fluxcd.io/kustomizations/status")
        .copied()
        .unwrap_or(0.0);
    println!(
        "measured: requests around a no-op reconcile of a remote Kustomization: hub {hub_delta:?} \
         (status patches {status_patches}, total {}); spoke {spoke_delta:?} (configmaps {}, total {})",
        total(&hub_delta),
        requests_for(&spoke_delta, "configmaps"),
        total(&spoke_delta)
    );
    assert_eq!(
        requests_for(&hub_delta, "secrets"),
        0.0,
        "the kubeconfig Secret comes from its watch: {hub_delta:?}"
    );
    assert_eq!(
        requests_for(&hub_delta, "gitrepositories"),
        0.0,
        "the source comes from the watch cache: {hub_delta:?}"
    );
    assert_eq!(status_patches, 1.0, "one status patch: {hub_delta:?}");
    assert_eq!(
        requests_for(&spoke_delta, "configmaps"),
        0.0,
        "requests for the applied ConfigMap on the spoke: {spoke_delta:?}"
    );
    if let Some(pid) = Some(ctl.kustomize.child.id())
        && let Some(rss) = rflux_e2e::process::rss_kib(pid)
    {
        println!("measured: kustomize-controller RSS with 2 remote clusters: {rss} KiB");
    }

    // A rotated kubeconfig (another user) reconciles the Kustomization at once (Flux would wait
    // for the interval), and the new cluster entry's tracker reverts edits again.
    let before = total_reconciliations(&ks_api.get("spoke1").await.unwrap());
    let path = spoke1
        .user_kubeconfig("hub-deployer-1b", &["system:masters"])
        .unwrap();
    let rotated = std::fs::read_to_string(path).unwrap();
    secrets
        .patch(
            "spoke1-kubeconfig",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"value": rotated}})),
        )
        .await
        .unwrap();
    let changed = Instant::now();
    wait_ks(
        &ks_api,
        &mut ctl,
        TIMEOUT,
        "spoke1",
        "reconciled after the Secret change",
        |k| ks_ready(k) && total_reconciliations(k) > before,
    )
    .await;
    println!(
        "measured: kubeconfig Secret rotated: spoke 1 Kustomization reconciled within {:.3}s",
        changed.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let edited = Instant::now();
    cms1.patch(
        "fleet-config",
        &edit,
        &Patch::Merge(json!({"data": {"value": "edited"}})),
    )
    .await
    .unwrap();
    let res = wait_for(
        TIMEOUT,
        "the edit on spoke 1 reverted after the rotation",
        || async { Ok((cm_value(&cms1).await.as_deref() == Some("v1")).then(|| edited.elapsed())) },
    )
    .await;
    let t = res.unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(60)));
    println!(
        "measured: after the rotation, kubectl edit on spoke 1 reverted after {:.3}s",
        t.as_secs_f64()
    );

    // (c) Spoke 2's apiserver stops.
    spoke2
        .stop_component(Component::ApiServer, Duration::from_secs(5))
        .unwrap();
    let stopped = Instant::now();
    let server2 = spoke2.server_url().trim_end_matches('/').to_string();
    let down = wait_ks(
        &ks_api,
        &mut ctl,
        TIMEOUT,
        "spoke2",
        "Ready=False naming spoke 2",
        |k| {
            ks_condition(k, "Ready")
                .is_some_and(|c| c.status == "False" && c.message.contains("unreachable"))
        },
    )
    .await;
    let ready = ks_condition(&down, "Ready").unwrap();
    println!(
        "measured: spoke 2 Kustomization Ready=False {:.3}s after its apiserver stopped: {} / {}",
        stopped.elapsed().as_secs_f64(),
        ready.reason,
        ready.message
    );
    assert_eq!(ready.reason, "ReconciliationFailed");
    assert!(
        ready.message.contains(&server2) && ready.message.contains("spoke2-kubeconfig"),
        "the message names the cluster: {}",
        ready.message
    );

    // A change pushed meanwhile lands on spoke 1 on time.
    repo.write("deploy/all.yaml", &manifests("v2")).unwrap();
    let sha = repo.commit("v2").unwrap();
    repo.push("main").unwrap();
    let rev2 = format!("main@sha1:{sha}");
    let pushed = Instant::now();
    let repos: Api<rflux_common::api::gitrepository::GitRepository> =
        Api::namespaced(client.clone(), &ns);
    repos
        .patch(
            "fleet",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "reconcile.fluxcd.io/requestedAt": k8s_openapi::jiff::Timestamp::now().to_string()}}})),
        )
        .await
        .unwrap();
    let res = wait_for(TIMEOUT, "v2 on spoke 1", || async {
        Ok((cm_value(&cms1).await.as_deref() == Some("v2")).then(|| pushed.elapsed()))
    })
    .await;
    let t_spoke1 = res.unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(60)));
    println!(
        "measured: with spoke 2 down, the change reached spoke 1 {:.3}s after the push was announced",
        t_spoke1.as_secs_f64()
    );
    let at = rev2.clone();
    wait_ks(
        &ks_api,
        &mut ctl,
        TIMEOUT,
        "spoke1",
        "Ready at v2",
        move |k| ks_ready(k) && applied_rev(k) == Some(at.as_str()),
    )
    .await;
    let k2 = ks_api.get("spoke2").await.unwrap();
    assert_eq!(
        ks_condition(&k2, "Ready").map(|c| c.status.as_str()),
        Some("False")
    );

    // Spoke 2 returns: it converges.
    let starting = Instant::now();
    spoke2.start_component(Component::ApiServer).await.unwrap();
    let back = Instant::now();
    let t_start = back - starting;
    let at = rev2.clone();
    wait_ks(
        &ks_api,
        &mut ctl,
        TIMEOUT,
        "spoke2",
        "Ready at v2",
        move |k| ks_ready(k) && applied_rev(k) == Some(at.as_str()),
    )
    .await;
    assert_eq!(cm_value(&cms2).await.as_deref(), Some("v2"));
    println!(
        "measured: spoke 2 converged {:.3}s after its apiserver answered /readyz ({:.3}s after it was started)",
        back.elapsed().as_secs_f64(),
        (t_start + back.elapsed()).as_secs_f64()
    );
    // Its tracker's watches resume: an edit on spoke 2 is reverted too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let c2 = spoke2.client().await.unwrap();
    let cms2: Api<ConfigMap> = Api::namespaced(c2.clone(), &ns);
    let edited = Instant::now();
    cms2.patch(
        "fleet-config",
        &edit,
        &Patch::Merge(json!({"data": {"value": "edited"}})),
    )
    .await
    .unwrap();
    let res = wait_for(TIMEOUT, "the edit on spoke 2 reverted", || async {
        Ok((cm_value(&cms2).await.as_deref() == Some("v2")).then(|| edited.elapsed()))
    })
    .await;
    let t_revert2 = res.unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(60)));
    println!(
        "measured: after its return, kubectl edit on spoke 2 reverted after {:.3}s",
        t_revert2.as_secs_f64()
    );

    ctl.check_alive().unwrap();
    for name in ["spoke1", "spoke2"] {
        ks_api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let res = wait_for(TIMEOUT, "Kustomizations finalized", || async {
        let left = ks_api.list(&Default::default()).await?.items.len();
        Ok((left == 0).then_some(()))
    })
    .await;
    res.unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(60)));
    assert_eq!(cm_value(&cms1).await, None, "pruned on spoke 1");
    assert_eq!(cm_value(&cms2).await, None, "pruned on spoke 2");
    repos
        .delete("fleet", &DeleteParams::default())
        .await
        .unwrap();
    ctl.stop();
}
