//! The fleet of issue 19 end to end, on three real control planes (a hub and two spokes), with
//! our three controllers on the hub (source-controller, kustomize-controller,
//! resourceset-controller) and one Git repository on the test git server:
//! - one Static ResourceSetInputProvider per spoke, labelled `environment` and `region`, its
//!   `defaultValues` naming the cluster; each spoke's kubeconfig in a Secret on the hub;
//! - a ResourceSet per environment (`production`, `staging`) selecting the providers by
//!   `environment`, templating per cluster a Kustomization that applies the repository through
//!   `<cluster>-kubeconfig` with `postBuild.substitute` (`region`, `cluster`, `environment`)
//!   and `prune: true`.
//!
//! (c) one provider, then a second: each spoke's objects land (latency printed);
//! (a) both spokes reconciled with their region's values, nothing on the hub;
//! (e) a `kubectl edit`-like patch on spoke 1 is reverted (latency printed, not asserted);
//! (b) spoke 1's provider relabelled production → staging: the production ResourceSet drops
//!     its Kustomization, the staging one creates its own, and the objects on the spoke follow
//!     (the states in between are printed as a timeline);
//! (f) spoke 2's apiserver stopped: a new commit still lands on spoke 1 (latency printed), the
//!     spoke-2 Kustomization is Ready=False naming the cluster, and after the restart it
//!     converges;
//! (d) spoke 2's provider deleted: its Kustomization is garbage-collected by the ResourceSet
//!     and, with `prune`, its objects on spoke 2 go.
//!
//! Needs the binaries: `cargo build -p source-controller -p kustomize-controller
//! -p resourceset-controller`. Walked through in docs/fleet.md.
#![allow(clippy::unwrap_used)]

#[path = "fleet_resourceset/fleet.rs"]
mod fleet;
mod support;
#[path = "fleet_resourceset/timeline.rs"]
mod timeline;

use std::time::{Duration, Instant};

use fleet::{
    Applied, applied, applied_rev, create_ns, kubeconfig_secret, manifests, provider, resource_set,
    rs_inventory, rs_ready,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_common::api::resourceset::ResourceSet;
use rflux_common::api::resourcesetinputprovider::ResourceSetInputProvider;
use rflux_e2e::{Component, ControlPlane, GitServer};
use serde_json::json;
use support::procs::{
    ControllerOptions, Controllers, apply_value, install_crds, ks_condition, ks_ready,
};
use support::rsctl::ResourceSetController;

const TIMEOUT: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(25);

/// Everything the steps share.
struct Fleet {
    ctl: Controllers,
    rsc: ResourceSetController,
    ks: Api<Kustomization>,
    rss: Api<ResourceSet>,
    rsips: Api<ResourceSetInputProvider>,
}

impl Fleet {
    /// Both controllers' log tails, for failure messages.
    fn logs(&self) -> String {
        format!(
            "{}\n--- resourceset-controller:\n{}",
            self.ctl.log_tails(40),
            self.rsc.log_tail(40)
        )
    }

    /// Polls `f` every [`POLL`] until it yields `Some` (the latencies printed are measured
    /// this way: 25 ms resolution); panics with the logs after [`TIMEOUT`].
    async fn wait<T, F, Fut>(&mut self, what: &str, mut f: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
    {
        let deadline = Instant::now() + TIMEOUT;
        let mut last = String::new();
        loop {
            match f().await {
                Ok(Some(v)) => return v,
                Ok(None) => {}
                Err(e) => last = format!("{e:#}"),
            }
            if Instant::now() > deadline {
                let alive = self.ctl.check_alive().err().map(|e| e.to_string());
                let rs_alive = self.rsc.check_alive().err().map(|e| e.to_string());
                panic!(
                    "timed out after {TIMEOUT:?} waiting for {what}; last error: {last}\n\
                     {alive:?} {rs_alive:?}\n{}",
                    self.logs()
                )
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until Kustomization `name` is Ready at `rev`.
    async fn ks_ready_at(&mut self, name: &str, rev: &str) -> Kustomization {
        let api = self.ks.clone();
        let what = format!("Kustomization {name} Ready at {rev}");
        self.wait(&what, || async {
            let k = api.get_opt(name).await?;
            Ok(k.filter(|k| ks_ready(k) && applied_rev(k) == Some(rev)))
        })
        .await
    }

    /// Waits until the ResourceSet `name` is Ready and its inventory is `ids`.
    async fn rs_ready_with(&mut self, name: &str, ids: &[String]) -> ResourceSet {
        let api = self.rss.clone();
        let what = format!("ResourceSet {name} Ready with inventory {ids:?}");
        self.wait(&what, || async {
            let rs = api.get(name).await?;
            let ok = rs_ready(&rs).is_some_and(|(s, _, _)| s == "True") && rs_inventory(&rs) == ids;
            Ok(ok.then_some(rs))
        })
        .await
    }
}

/// Waits until `cms` holds a ConfigMap for which `pred` holds; returns it and the time.
async fn wait_applied(
    fleet: &mut Fleet,
    cms: &Api<ConfigMap>,
    what: &str,
    since: Instant,
    pred: impl Fn(&Applied) -> bool,
) -> (Applied, Duration) {
    let pred = &pred;
    fleet
        .wait(what, || async move {
            Ok(applied(cms)
                .await
                .filter(|a| pred(a))
                .map(|a| (a, since.elapsed())))
        })
        .await
}

/// The inventory id of Kustomization `name` in `ns`.
fn ks_id(ns: &str, name: &str) -> String {
    format!("{ns}_{name}_kustomize.toolkit.fluxcd.io_Kustomization")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_from_resourcesets_on_three_clusters() {
    let hub = ControlPlane::shared_named("fleet-hub").await.unwrap();
    let spoke1 = ControlPlane::shared_named("fleet-spoke1").await.unwrap();
    // Spoke 2's apiserver is stopped and started: an instance of this test's own.
    let mut spoke2 = ControlPlane::ensure("fleet-rs-spoke2").await.unwrap();
    let client = hub.client().await.unwrap();
    let c1 = spoke1.client().await.unwrap();
    let c2 = spoke2.client().await.unwrap();
    install_crds(&client).await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let ns = hub.create_namespace("rsfleet").await.unwrap();
    create_ns(&c1, &ns).await;
    create_ns(&c2, &ns).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    kubeconfig_secret(&secrets, spoke1, "spoke1").await;
    kubeconfig_secret(&secrets, &spoke2, "spoke2").await;

    let ctl = Controllers::start(hub, ControllerOptions::default())
        .await
        .unwrap();
    // One watch label for the three controllers: the ResourceSets stamp it on the
    // Kustomizations they generate (commonMetadata).
    let label = ctl.label_value().unwrap().to_string();
    let watch = ctl.labels();
    let rsc = ResourceSetController::start(hub, &label, &ns, &[]).unwrap();
    let mut f = Fleet {
        ctl,
        rsc,
        ks: Api::namespaced(client.clone(), &ns),
        rss: Api::namespaced(client.clone(), &ns),
        rsips: Api::namespaced(client.clone(), &ns),
    };

    let repo = git.create_repo("rsfleet").unwrap();
    repo.write("deploy/all.yaml", &manifests("v1")).unwrap();
    let sha = repo.commit("v1").unwrap();
    repo.push("main").unwrap();
    let rev1 = format!("main@sha1:{sha}");
    let mut gitrepo = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "fleet", "namespace": ns},
        "spec": {"url": git.http_url(repo.name()), "interval": "1h", "ref": {"branch": "main"}}
    });
    f.ctl.label_object(&mut gitrepo);
    apply_value(&client, &gitrepo, "e2e").await.unwrap();
    for env in ["production", "staging"] {
        apply_value(&client, &resource_set(env, &ns, &watch), "e2e")
            .await
            .unwrap();
    }
    // No provider yet: both Ready with an empty inventory.
    for env in ["production", "staging"] {
        f.rs_ready_with(env, &[]).await;
    }
    let cms1: Api<ConfigMap> = Api::namespaced(c1.clone(), &ns);
    let cms2: Api<ConfigMap> = Api::namespaced(c2.clone(), &ns);
    let hub_cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // (c) A provider for spoke 1: its objects land; then one for spoke 2.
    let t = Instant::now();
    apply_value(
        &client,
        &provider("spoke1", &ns, "production", "eu", &watch),
        "e2e",
    )
    .await
    .unwrap();
    let (a1, lat1) = wait_applied(&mut f, &cms1, "spoke 1 objects", t, |a| {
        a.get("version") == "v1"
    })
    .await;
    println!(
        "measured: provider spoke1 created -> its objects on spoke 1 after {:.3}s",
        lat1.as_secs_f64()
    );
    let t = Instant::now();
    apply_value(
        &client,
        &provider("spoke2", &ns, "production", "us", &watch),
        "e2e",
    )
    .await
    .unwrap();
    let (a2, lat2) = wait_applied(&mut f, &cms2, "spoke 2 objects", t, |a| {
        a.get("version") == "v1"
    })
    .await;
    println!(
        "measured: provider spoke2 added -> its objects on spoke 2 after {:.3}s",
        lat2.as_secs_f64()
    );

    // (a) Both spokes reconciled with their region's values, by the production ResourceSet.
    for name in ["production-spoke1", "production-spoke2"] {
        f.ks_ready_at(name, &rev1).await;
    }
    f.rs_ready_with(
        "production",
        &[
            ks_id(&ns, "production-spoke1"),
            ks_id(&ns, "production-spoke2"),
        ],
    )
    .await;
    f.rs_ready_with("staging", &[]).await;
    for (a, cluster, region) in [(&a1, "spoke1", "eu"), (&a2, "spoke2", "us")] {
        assert_eq!(a.get("cluster"), cluster, "{a:?}");
        assert_eq!(a.get("region"), region, "{a:?}");
        assert_eq!(a.get("environment"), "production", "{a:?}");
        assert_eq!(a.owner, format!("production-{cluster}"), "{a:?}");
    }
    assert!(applied(&hub_cms).await.is_none(), "applied on the hub");
    let sa1: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(c1.clone(), &ns);
    assert!(sa1.get_opt("fleet-app").await.unwrap().is_some());
    // Let the first reconciles' own watch events settle.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // (e) `kubectl edit` on spoke 1: reverted by the spoke's tracker.
    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    let t = Instant::now();
    cms1.patch(
        fleet::CONFIG,
        &edit,
        &Patch::Merge(json!({"data": {"region": "edited"}})),
    )
    .await
    .unwrap();
    let (_, lat) = wait_applied(&mut f, &cms1, "the edit on spoke 1 reverted", t, |a| {
        a.get("region") == "eu"
    })
    .await;
    println!(
        "measured: kubectl edit on spoke 1 reverted after {:.3}s (Kustomization interval 1h)",
        lat.as_secs_f64()
    );

    // (b) Spoke 1 moves from production to staging: a label change on its provider. Watches
    // record what happens in between.
    let recorder = timeline::Recorder::start(f.ks.clone(), cms1.clone(), "spoke1").await;
    let t = Instant::now();
    f.rsips
        .patch(
            "spoke1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"environment": "staging"}}})),
        )
        .await
        .unwrap();
    let (ks_api, cms) = (f.ks.clone(), cms1.clone());
    let moved = f
        .wait("spoke 1 moved to staging", || async {
            let old = ks_api.get_opt("production-spoke1").await?;
            let new = ks_api.get_opt("staging-spoke1").await?;
            let live = applied(&cms).await;
            let moved = old.is_none()
                && new.is_some_and(|k| ks_ready(&k))
                && live.as_ref().is_some_and(|a| {
                    a.owner == "staging-spoke1" && a.get("environment") == "staging"
                });
            Ok(moved.then(|| t.elapsed()))
        })
        .await;
    // Let the last events arrive.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let entries = recorder.finish(t);
    timeline::print(
        "spoke 1's provider relabelled environment=production -> staging (+0 = the patch)",
        &entries,
    );
    println!(
        "measured: spoke 1 moved to the staging ResourceSet in {:.3}s",
        moved.as_secs_f64()
    );
    let prefix = format!("spoke1 ConfigMap {}", fleet::CONFIG);
    let deleted = entries
        .iter()
        .find(|(_, l)| l.starts_with(&format!("{prefix} deleted")))
        .map(|(at, _)| *at);
    let recreated = entries
        .iter()
        .find(|(at, l)| {
            l.starts_with(&format!("{prefix} created")) && deleted.is_some_and(|d| *at >= d)
        })
        .map(|(at, _)| *at);
    match (deleted, recreated) {
        (Some(d), Some(c)) => println!(
            "measured: during the move spoke 1's objects were deleted at +{:.3}s and re-created at +{:.3}s (absent {:.3}s)",
            d.as_secs_f64(),
            c.as_secs_f64(),
            (c - d).as_secs_f64()
        ),
        _ => println!("measured: during the move spoke 1's objects were never absent"),
    }
    assert!(
        entries
            .iter()
            .any(|(_, l)| l == "Kustomization production-spoke1: deleted"),
        "the production ResourceSet deleted its Kustomization: {entries:#?}"
    );
    let staged = f.ks_ready_at("staging-spoke1", &rev1).await;
    assert_eq!(
        staged.metadata.labels.as_ref().unwrap()["resourceset.fluxcd.controlplane.io/name"],
        "staging"
    );
    f.rs_ready_with("staging", &[ks_id(&ns, "staging-spoke1")])
        .await;
    f.rs_ready_with("production", &[ks_id(&ns, "production-spoke2")])
        .await;
    let a = applied(&cms1).await.unwrap();
    assert_eq!((a.get("region"), a.get("cluster")), ("eu", "spoke1"));
    assert_eq!(
        applied(&cms2).await.map(|a| a.owner),
        Some("production-spoke2".into()),
        "spoke 2 untouched by the move"
    );

    // (f) Spoke 2's apiserver stops.
    spoke2
        .stop_component(Component::ApiServer, Duration::from_secs(5))
        .unwrap();
    let stopped = Instant::now();
    let server2 = spoke2.server_url().trim_end_matches('/').to_string();
    repo.write("deploy/all.yaml", &manifests("v2")).unwrap();
    let sha = repo.commit("v2").unwrap();
    repo.push("main").unwrap();
    let rev2 = format!("main@sha1:{sha}");
    let pushed = Instant::now();
    let repos: Api<GitRepository> = Api::namespaced(client.clone(), &ns);
    repos
        .patch(
            "fleet",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "reconcile.fluxcd.io/requestedAt": k8s_openapi::jiff::Timestamp::now().to_string()}}})),
        )
        .await
        .unwrap();
    let (_, lat) = wait_applied(&mut f, &cms1, "v2 on spoke 1", pushed, |a| {
        a.get("version") == "v2"
    })
    .await;
    println!(
        "measured: with spoke 2 down, the new commit reached spoke 1 {:.3}s after the push was announced",
        lat.as_secs_f64()
    );
    f.ks_ready_at("staging-spoke1", &rev2).await;
    let api = f.ks.clone();
    let down = f
        .wait("production-spoke2 Ready=False naming spoke 2", || async {
            let k = api.get("production-spoke2").await?;
            let failed = ks_condition(&k, "Ready")
                .is_some_and(|c| c.status == "False" && c.message.contains("unreachable"));
            Ok(failed.then_some(k))
        })
        .await;
    let ready = ks_condition(&down, "Ready").unwrap();
    println!(
        "measured: production-spoke2 Ready=False {:.3}s after its apiserver stopped: {} / {}",
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
    let rs = f.rss.get("production").await.unwrap();
    assert_eq!(
        rs_ready(&rs).map(|r| r.0),
        Some("True".into()),
        "the hub side is unaffected"
    );

    // Spoke 2 returns: it converges.
    let starting = Instant::now();
    spoke2.start_component(Component::ApiServer).await.unwrap();
    let back = Instant::now();
    f.ks_ready_at("production-spoke2", &rev2).await;
    let c2 = spoke2.client().await.unwrap();
    let cms2: Api<ConfigMap> = Api::namespaced(c2.clone(), &ns);
    let a = applied(&cms2).await.unwrap();
    assert_eq!((a.get("version"), a.get("region")), ("v2", "us"));
    println!(
        "measured: spoke 2 converged {:.3}s after its apiserver answered /readyz ({:.3}s after it was started)",
        back.elapsed().as_secs_f64(),
        starting.elapsed().as_secs_f64()
    );

    // (d) Spoke 2's provider removed: its Kustomization is garbage-collected, its objects go.
    let t = Instant::now();
    f.rsips
        .delete("spoke2", &DeleteParams::default())
        .await
        .unwrap();
    let api = f.ks.clone();
    let ks_gone = f
        .wait("production-spoke2 garbage-collected", || async {
            Ok(api
                .get_opt("production-spoke2")
                .await?
                .is_none()
                .then(|| t.elapsed()))
        })
        .await;
    let cms = cms2.clone();
    let objs_gone = f
        .wait("spoke 2 objects pruned", || async {
            let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(c2.clone(), &ns);
            let gone = applied(&cms).await.is_none() && sas.get_opt("fleet-app").await?.is_none();
            Ok(gone.then(|| t.elapsed()))
        })
        .await;
    println!(
        "measured: provider spoke2 deleted -> Kustomization gone after {:.3}s, objects on spoke 2 gone after {:.3}s",
        ks_gone.as_secs_f64(),
        objs_gone.as_secs_f64()
    );
    f.rs_ready_with("production", &[]).await;
    assert_eq!(
        applied(&cms1).await.map(|a| a.owner),
        Some("staging-spoke1".into()),
        "spoke 1 untouched by the removal"
    );

    // Teardown: deleting the ResourceSets deletes their Kustomizations, which prune spoke 1.
    f.ctl.check_alive().unwrap();
    f.rsc.check_alive().unwrap();
    for env in ["production", "staging"] {
        f.rss.delete(env, &DeleteParams::default()).await.unwrap();
    }
    let (rss, ks) = (f.rss.clone(), f.ks.clone());
    f.wait("ResourceSets and Kustomizations finalized", || async {
        let left = rss.list(&Default::default()).await?.items.len()
            + ks.list(&Default::default()).await?.items.len();
        Ok((left == 0).then_some(()))
    })
    .await;
    assert!(applied(&cms1).await.is_none(), "pruned on spoke 1");
    f.rsips
        .delete("spoke1", &DeleteParams::default())
        .await
        .unwrap();
    repos
        .delete("fleet", &DeleteParams::default())
        .await
        .unwrap();
    f.ctl.stop();
}
