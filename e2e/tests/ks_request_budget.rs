//! The apiserver requests a new Kustomization costs (issue 20 §2), counted by the apiserver
//! itself (`apiserver_request_total` deltas) on a control plane of its own (`budget`), with
//! both controllers as processes.
//!
//! A GitRepository holds three directories of four objects each (three ConfigMaps and a
//! Secret). In one namespace:
//! 1. the first Kustomization (`one`): its kinds have never been applied, so the tracker knows
//!    nothing and every object is dry-run first; its count is printed;
//! 2. the second (`two`), once the kinds' watches are in sync: the objects are known absent, so
//!    they are created without a dry-run, and a fast reconcile writes no progress status. The
//!    work requests (without events, which have their own budget, the GitRepository's, the
//!    leases and the cluster's background) must be at most 6: the finalizer patch, 4 applies, 1
//!    status patch. The old code gave 11 (a progress status patch and 4 dry-runs more);
//! 3. the third (`bad`): a valid ConfigMap and an invalid one (a data key the apiserver
//!    refuses), both known absent. The valid one is created, the invalid one's create fails, so
//!    the valid one is deleted again (nothing applied half-way) and the Kustomization fails
//!    with the dry-run's words, as before.
//!
//! 4. objects known absent but there after all, without our labels: one Argo CD holds (refused,
//!    our fields given back), one kubectl created (taken over, as Flux does), one another tool
//!    applied (refused).
//!
//! Measurements are printed, not asserted on time. `BUDGET_KUSTOMIZE_CONTROLLER=<binary>` runs
//! another kustomize-controller build (e.g. an older one) for comparison.
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::metrics::{Counts, diff, scrape_request_total};
use rflux_e2e::{ControlPlane, GitServer};
use serde_json::json;
use support::procs::{
    ControllerOptions, Controllers, apply_value, install_crds, ks_condition, ks_ready, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(120);
/// Requests for a new Kustomization with four objects, once its kinds are watched.
const BUDGET: f64 = 6.0;

fn objects(prefix: &str) -> String {
    let mut out = String::new();
    for i in 1..=3 {
        out.push_str(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {prefix}-{i}\ndata:\n  value: v{i}\n---\n"
        ));
    }
    out.push_str(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {prefix}-4\nstringData:\n  token: t\n"
    ));
    out
}

const BAD: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: bad-1
data:
  value: ok
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: bad-2
data:
  \"not a valid key!\": x
";

const HELD: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: held-argo
data:
  key: git
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: held-kubectl
data:
  key: git
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: held-tool
data:
  key: git
";

/// The request keys that are not the Kustomization's work: events (their own budget), the
/// GitRepository's requests, leases (leader election), non-resource requests (the scrape),
/// the test's own create of the Kustomization, and WATCH (the apiserver counts a watch when it
/// ends: these are the cluster's long-running watches expiring at random, not this work; a
/// watch the tracker opens shows as its LIST).
fn is_work(key: &str) -> bool {
    let mut parts = key.split_whitespace();
    let verb = parts.next().unwrap_or("");
    let resource = parts.next().unwrap_or("");
    !(resource == "events"
        || resource.ends_with("/events")
        || resource.contains("gitrepositories")
        || resource.ends_with("/leases")
        || resource == "-"
        || verb == "WATCH"
        || (verb == "POST" && resource == "kustomize.toolkit.fluxcd.io/kustomizations"))
}

fn sum(counts: &Counts, f: impl Fn(&str) -> bool) -> f64 {
    counts.iter().filter(|(k, _)| f(k)).map(|(_, v)| v).sum()
}

/// `after - before - background`, per key, never below zero.
fn minus_background(delta: &Counts, background: &Counts) -> Counts {
    delta
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                (v - background.get(k).copied().unwrap_or(0.0)).max(0.0),
            )
        })
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

struct Env {
    client: Client,
    ns: String,
    ctl: Controllers,
    ks_api: Api<Kustomization>,
    revision: String,
}

impl Env {
    fn ks(&self, name: &str, path: &str) -> Kustomization {
        let mut ks = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"interval": "1h", "retryInterval": "1h", "timeout": "60s", "prune": true,
                     "path": path, "targetNamespace": self.ns,
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}}
        });
        self.ctl.label_object(&mut ks);
        serde_json::from_value(ks).unwrap()
    }

    /// Creates a Kustomization and waits (from a watch opened before the first scrape, so the
    /// wait sends no request) until `done` holds; returns the request-count delta over the
    /// window, the window's length and the Kustomization.
    async fn create_and_count(
        &mut self,
        name: &str,
        path: &str,
        done: impl Fn(&Kustomization) -> bool,
    ) -> (Counts, Duration, Kustomization) {
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290);
        let mut stream = self.ks_api.watch(&wp, "0").await.unwrap().boxed();
        let m0 = scrape_request_total(&self.client).await.unwrap();
        let started = Instant::now();
        self.ks_api
            .create(&PostParams::default(), &self.ks(name, path))
            .await
            .unwrap();
        let seen = tokio::time::timeout(TIMEOUT, async {
            while let Some(ev) = stream.try_next().await.unwrap() {
                if let WatchEvent::Added(k) | WatchEvent::Modified(k) = ev
                    && done(&k)
                {
                    return Some(k);
                }
            }
            None
        })
        .await;
        let Ok(Some(ks)) = seen else {
            let now = self.ks_api.get_opt(name).await.ok().flatten();
            println!(
                "Kustomization {name} status: {:?}",
                now.and_then(|k| k.status)
            );
            panic!(
                "Kustomization {name} not done in time\n{}",
                self.ctl.log_tails(60)
            );
        };
        // Requests after the final status (a late progress write, events) land within this.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let m1 = scrape_request_total(&self.client).await.unwrap();
        let window = started.elapsed();
        drop(stream);
        (diff(&m0, &m1), window, ks)
    }

    /// The cluster's requests over an idle window of `len` (controllers idle).
    async fn background(&self, len: Duration) -> Counts {
        let m0 = scrape_request_total(&self.client).await.unwrap();
        tokio::time::sleep(len).await;
        let m1 = scrape_request_total(&self.client).await.unwrap();
        diff(&m0, &m1)
    }
}

fn ready_at(revision: &str) -> impl Fn(&Kustomization) -> bool + '_ {
    move |k| {
        ks_ready(k)
            && k.status
                .as_ref()
                .and_then(|s| s.last_applied_revision.as_deref())
                == Some(revision)
    }
}

fn report(label: &str, delta: &Counts, background: &Counts) -> (f64, f64) {
    let net = minus_background(delta, background);
    let work: Counts = net
        .iter()
        .filter(|(k, _)| is_work(k))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let events = sum(&net, |k| k.contains("events"));
    let total_work = sum(&work, |_| true);
    // What this Kustomization involves: itself and its objects' kinds. The rest of the work
    // count can only be the cluster's own noise (a controller-manager relist) or a request of
    // ours for something else; printed either way.
    let scoped = sum(&work, |k| {
        let resource = k.split_whitespace().nth(1).unwrap_or("");
        resource.starts_with("kustomize.toolkit.fluxcd.io/kustomizations")
            || resource == "configmaps"
            || resource == "secrets"
    });
    println!("measured: {label}: all requests in the window: {delta:?}");
    println!("measured: {label}: background over the same time: {background:?}");
    println!(
        "measured: {label}: work requests {scoped} for the Kustomization and its objects' kinds, {total_work} in all {work:?}; event requests {events}"
    );
    (scoped, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_kustomization_costs_at_most_six_requests_once_its_kinds_are_watched() {
    let cp = ControlPlane::shared_named("budget").await.unwrap();
    let client: Client = cp.client().await.unwrap();
    install_crds(&client).await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let ns = cp.create_namespace("budget").await.unwrap();
    let mut opts = ControllerOptions::default();
    if let Some(bin) = std::env::var_os("BUDGET_KUSTOMIZE_CONTROLLER") {
        opts.binaries.kustomize = PathBuf::from(bin);
        println!("kustomize-controller: {:?}", opts.binaries.kustomize);
    }
    let ctl = Controllers::start(cp, opts).await.unwrap();

    let repo = git.create_repo("budget").unwrap();
    repo.write("one/all.yaml", &objects("one")).unwrap();
    repo.write("two/all.yaml", &objects("two")).unwrap();
    repo.write("bad/all.yaml", BAD).unwrap();
    repo.write("held/all.yaml", HELD).unwrap();
    let sha = repo.commit("initial").unwrap();
    repo.push("main").unwrap();
    let revision = format!("main@sha1:{sha}");

    let mut gitrepo = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "repo", "namespace": ns},
        "spec": {"url": git.http_url(repo.name()), "interval": "1h", "ref": {"branch": "main"}}
    });
    ctl.label_object(&mut gitrepo);
    apply_value(&client, &gitrepo, "e2e").await.unwrap();
    let repos: Api<GitRepository> = Api::namespaced(client.clone(), &ns);
    let res = wait_for(TIMEOUT, "GitRepository ready", || async {
        let r = repos.get("repo").await?;
        Ok(r.status
            .and_then(|s| s.artifact)
            .is_some_and(|a| a.revision == revision)
            .then_some(()))
    })
    .await;
    res.unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(40)));
    // The namespace's own start-up requests (kube-root-ca.crt, default ServiceAccount) settle.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), &ns);
    let mut env = Env {
        client: client.clone(),
        ns: ns.clone(),
        ctl,
        ks_api,
        revision,
    };
    let rev = env.revision.clone();

    // 1. The first Kustomization: kinds never applied before.
    let (d1, w1, _) = env.create_and_count("one", "./one", ready_at(&rev)).await;
    let bg1 = env.background(w1).await;
    let (first, first_events) = report("first Kustomization (kinds unknown)", &d1, &bg1);

    // 2. The second one: its kinds' watches are in sync, its objects known absent.
    let (d2, w2, ks2) = env.create_and_count("two", "./two", ready_at(&rev)).await;
    let bg2 = env.background(w2).await;
    let (second, second_events) = report("second Kustomization (kinds watched)", &d2, &bg2);
    let inventory = ks2
        .status
        .as_ref()
        .and_then(|s| s.inventory.as_ref())
        .map_or(0, |i| i.entries.len());
    assert_eq!(inventory, 4, "four objects in the inventory");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for i in 1..=3 {
        let cm = cms.get(&format!("two-{i}")).await.unwrap();
        let value = cm.data.unwrap_or_default().get("value").cloned();
        assert_eq!(value.as_deref(), Some(format!("v{i}").as_str()));
    }
    println!(
        "measured: requests per new Kustomization with 4 objects: first {first} (+{first_events} event requests), next {second} (+{second_events} event requests); budget {BUDGET}"
    );
    assert!(
        second <= BUDGET,
        "a new Kustomization whose kinds are watched cost {second} work requests (budget {BUDGET}): {d2:?}"
    );
    // The change set still says `created` (Flux's Progressing event lists it).
    let progressing = wait_for(TIMEOUT, "the Progressing event of `two`", || async {
        let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), &ns);
        let list = events
            .list(&kube::api::ListParams::default().fields("involvedObject.name=two"))
            .await?;
        Ok(list
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("Progressing"))
            .and_then(|e| e.message))
    })
    .await
    .unwrap();
    println!("Progressing event of `two`: {progressing:?}");
    assert!(
        progressing.contains(&format!("ConfigMap/{ns}/two-1 created"))
            && progressing.contains(&format!("Secret/{ns}/two-4 created")),
        "{progressing}"
    );

    // 3. A create that fails rolls back the creates of its stage.
    let failed = |k: &Kustomization| {
        ks_condition(k, "Ready").is_some_and(|c| c.status == "False")
            && k.status
                .as_ref()
                .and_then(|s| s.last_attempted_revision.as_deref())
                == Some(rev.as_str())
    };
    let (d3, _, ks3) = env.create_and_count("bad", "./bad", failed).await;
    let message = ks_condition(&ks3, "Ready")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    println!("measured: failing Kustomization: requests {d3:?}; Ready message: {message}");
    assert!(
        message.contains(&format!("ConfigMap/{ns}/bad-2 dry-run failed")),
        "{message}"
    );
    let res = wait_for(TIMEOUT, "bad-1 absent", || async {
        Ok(cms.get_opt("bad-1").await?.is_none().then_some(()))
    })
    .await;
    res.unwrap_or_else(|e| panic!("{e}\n{}", env.ctl.log_tails(40)));
    // Old code: both dry-run, the second fails, nothing is written. New code: `bad-1` is
    // created, `bad-2`'s create fails, `bad-1` is deleted again.
    let writes = d3.get("APPLY configmaps").copied().unwrap_or(0.0);
    let deletes = d3.get("DELETE configmaps").copied().unwrap_or(0.0);
    println!("measured: failing Kustomization: ConfigMap writes {writes}, deletes {deletes}");
    if writes > 1.0 {
        assert!(deletes >= 1.0, "a create was not rolled back: {d3:?}");
    }
    let inventory = ks3
        .status
        .as_ref()
        .and_then(|s| s.inventory.as_ref())
        .map_or(0, |i| i.entries.len());
    assert_eq!(
        inventory, 0,
        "nothing of the failed stage is in the inventory"
    );

    // 4. Known absent (no labels of ours) but there after all: held by Argo CD (same value: the
    //    unforced create merges, the claim check refuses it and our fields are given back),
    //    created by kubectl (conflict: the full path takes it over, as Flux does), applied by
    //    another tool (conflict: the full path refuses it).
    let argo: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "held-argo", "namespace": ns, "annotations": {
            "argocd.argoproj.io/tracking-id": format!("guestbook:/ConfigMap:{ns}/held-argo")}},
        "data": {"key": "git"}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &argo).await.unwrap();
    let kubectl: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "held-kubectl", "namespace": ns}, "data": {"key": "kubectl"}
    }))
    .unwrap();
    let pp = PostParams {
        field_manager: Some("kubectl-create".into()),
        ..PostParams::default()
    };
    let kubectl_uid = cms.create(&pp, &kubectl).await.unwrap().metadata.uid;
    let tool = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "held-tool", "namespace": ns}, "data": {"key": "tool"}});
    cms.patch(
        "held-tool",
        &PatchParams::apply("other-tool"),
        &Patch::Apply(&tool),
    )
    .await
    .unwrap();
    let conflict = |k: &Kustomization| {
        ks_condition(k, "Ready").is_some_and(|c| c.reason == "OwnershipConflict")
    };
    let (d4, _, ks4) = env.create_and_count("held", "./held", conflict).await;
    let message = ks_condition(&ks4, "Ready")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    println!("measured: objects there after all: requests {d4:?}; Ready message: {message}");
    assert!(
        message.contains(&format!(
            "ConfigMap/{ns}/held-argo is held by Argo CD application guestbook"
        )) && message.contains(&format!(
            "ConfigMap/{ns}/held-tool is held by field manager(s) other-tool"
        )) && !message.contains("held-kubectl"),
        "{message}"
    );
    let held_argo = cms.get("held-argo").await.unwrap();
    assert!(
        !held_argo
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("kustomize.toolkit.fluxcd.io/name"),
        "our labels are given back on the object Argo CD holds"
    );
    let held_tool = cms.get("held-tool").await.unwrap();
    assert_eq!(
        held_tool
            .data
            .unwrap_or_default()
            .get("key")
            .map(String::as_str),
        Some("tool")
    );
    let held_kubectl = cms.get("held-kubectl").await.unwrap();
    assert_eq!(
        held_kubectl.metadata.uid, kubectl_uid,
        "taken over, not recreated"
    );
    assert_eq!(
        held_kubectl
            .data
            .unwrap_or_default()
            .get("key")
            .map(String::as_str),
        Some("git")
    );

    env.ctl.check_alive().unwrap();
    for name in ["one", "two", "bad", "held"] {
        env.ks_api
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    let res = wait_for(TIMEOUT, "Kustomizations finalized", || async {
        let left = env.ks_api.list(&Default::default()).await?.items.len();
        Ok((left == 0).then_some(()))
    })
    .await;
    res.unwrap_or_else(|e| panic!("{e}\n{}", env.ctl.log_tails(40)));
    repos
        .delete("repo", &DeleteParams::default())
        .await
        .unwrap();
    env.ctl.stop();
}
