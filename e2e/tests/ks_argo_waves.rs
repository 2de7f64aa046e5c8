//! Argo CD sync waves (issue 17) on the real control plane, with the feature gate
//! `ArgoSyncSemantics=true` (kustomize-controller/src/reconcile/waves.rs):
//! - a Kustomization annotated `rflux.dev/argo-semantics: enabled` applies three Deployments in
//!   waves -1, 0 and 1 one wave at a time: each is created only after the previous one is
//!   Available (the kwok node makes its pods Ready); a commit removing them prunes them in
//!   reverse wave order (wave 1 first);
//! - a second Kustomization without the annotation, with the same kind of objects, applies
//!   them all at once: the Argo annotations stay inert;
//! - a PreSync hook added later runs and stays out of the inventory.
//!
//! Times are observed by listing the Deployments every 100 ms.
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod ks_env;
mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use ks_env::{Env, argo_deployment, argo_kustomization, ready_at, ready_message};
use kube::api::{Api, ListParams};
use serde_json::json;
use support::procs::ks_condition;

const HOOK_JOB: &str = "apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  annotations:
    argocd.argoproj.io/hook: PreSync
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: migrate
        image: busybox:1.36
";

/// When each Deployment was first seen, first seen Available, and first seen gone (absent or
/// deleting) after having been seen; plus the Reconciling messages of Kustomization `argo`.
#[derive(Default, Debug)]
struct Seen {
    created: BTreeMap<String, Duration>,
    available: BTreeMap<String, Duration>,
    gone: BTreeMap<String, Duration>,
    /// Snapshots (as sets of present names) where `late` was gone and `mid` still present.
    late_gone_mid_present: bool,
    messages: Vec<String>,
}

fn available(d: &Deployment) -> bool {
    let s = d.status.clone().unwrap_or_default();
    s.available_replicas == Some(1)
        && s.conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True")
}

/// Lists the Deployments (and reads Kustomization `argo`) every 100 ms until dropped.
fn watch(env: &Env, t0: Instant) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let deploys: Api<Deployment> = Api::namespaced(env.client.clone(), &env.ns);
    let ks = env.ks.clone();
    let out = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            if let Ok(list) = deploys.list(&ListParams::default()).await {
                let at = t0.elapsed();
                let mut s = out.lock().unwrap();
                let present: Vec<&Deployment> = list
                    .items
                    .iter()
                    .filter(|d| d.metadata.deletion_timestamp.is_none())
                    .collect();
                let names: Vec<String> = present
                    .iter()
                    .filter_map(|d| d.metadata.name.clone())
                    .collect();
                for d in &present {
                    let name = d.metadata.name.clone().unwrap_or_default();
                    s.created.entry(name.clone()).or_insert(at);
                    if available(d) {
                        s.available.entry(name).or_insert(at);
                    }
                }
                let known: Vec<String> = s.created.keys().cloned().collect();
                for name in known {
                    if !names.contains(&name) {
                        s.gone.entry(name).or_insert(at);
                    }
                }
                if !names.iter().any(|n| n == "late")
                    && names.iter().any(|n| n == "mid")
                    && s.created.contains_key("late")
                {
                    s.late_gone_mid_present = true;
                }
            }
            if let Ok(k) = ks.get("argo").await
                && let Some(c) = ks_condition(&k, "Reconciling")
            {
                let mut s = seen_lock(&out);
                if s.messages.last() != Some(&c.message) {
                    s.messages.push(c.message.clone());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (seen, task)
}

fn seen_lock(s: &Arc<Mutex<Seen>>) -> std::sync::MutexGuard<'_, Seen> {
    s.lock().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waves_apply_in_order_and_prune_in_reverse() {
    let files = [
        (
            "waves/kustomization.yaml",
            argo_kustomization(&["early.yaml", "mid.yaml", "late.yaml"]),
        ),
        // Written in an order that is not the wave order.
        ("waves/late.yaml", argo_deployment("late", "1")),
        ("waves/mid.yaml", argo_deployment("mid", "0")),
        ("waves/early.yaml", argo_deployment("early", "-1")),
        (
            "plain/kustomization.yaml",
            argo_kustomization(&["early.yaml", "mid.yaml", "late.yaml"]),
        ),
        ("plain/late.yaml", argo_deployment("p-late", "1")),
        ("plain/mid.yaml", argo_deployment("p-mid", "0")),
        ("plain/early.yaml", argo_deployment("p-early", "-1")),
    ];
    let t_start = Instant::now();
    let mut env = Env::start("argowaves", "ArgoSyncSemantics=true", &files).await;
    let rev = format!("main@sha1:{}", env.repo.head().unwrap());
    let t0 = Instant::now();
    let (seen, poller) = watch(&env, t0);
    env.create_ks(
        "argo",
        "./waves",
        json!({}),
        json!({"rflux.dev/argo-semantics": "enabled",
               "rflux.dev/argo-sync-wave-delay": "300ms"}),
    )
    .await;
    // The annotation absent: Flux semantics, even with the gate on.
    env.create_ks("plain", "./plain", json!({}), json!({}))
        .await;
    let r = rev.clone();
    env.wait_ks("argo", "Ready", move |k| ready_at(k, &r)).await;
    let r = rev.clone();
    env.wait_ks("plain", "Ready", move |k| ready_at(k, &r))
        .await;
    let synced = t0.elapsed();
    // Let the last wave and the plain objects become Available for the record.
    let _ = support::procs::wait_for(ks_env::TIMEOUT, "all Available", || async {
        Ok((seen_lock(&seen).available.len() == 6).then_some(()))
    })
    .await;
    {
        let s = seen_lock(&seen);
        println!(
            "argo Ready after {:.2} s; seen: {s:#?}",
            synced.as_secs_f64()
        );
        let c = |n: &str| s.created[n];
        let a = |n: &str| s.available[n];
        assert!(
            c("early") < c("mid") && c("mid") < c("late"),
            "not created in wave order: {s:?}"
        );
        assert!(
            c("mid") >= a("early"),
            "wave 0 created before wave -1 was Available: {s:?}"
        );
        assert!(
            c("late") >= a("mid"),
            "wave 1 created before wave 0 was Available: {s:?}"
        );
        assert!(
            s.messages
                .iter()
                .any(|m| m.starts_with("Applying wave 2 of 3 (wave 0) for revision main@sha1:")),
            "no wave progress on the Reconciling condition: {:?}",
            s.messages
        );
    }
    // Inert without the annotation: the three plain Deployments went out in one apply,
    // so one Progressing event names all three (waves would give one event per wave).
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(env.client.clone(), &env.ns);
    let one_apply = support::procs::wait_for(
        ks_env::TIMEOUT,
        "one Progressing event naming the three plain Deployments",
        || async {
            let listed = events
                .list(&ListParams::default().fields("involvedObject.name=plain"))
                .await?;
            Ok(listed
                .items
                .iter()
                .any(|e| {
                    e.message.as_deref().is_some_and(|m| {
                        ["p-early", "p-mid", "p-late"].iter().all(|n| m.contains(n))
                    })
                })
                .then_some(()))
        },
    )
    .await;
    assert!(
        one_apply.is_ok(),
        "the plain Kustomization applied in waves"
    );

    // A commit that removes the three: pruned in reverse wave order.
    env.repo.remove("waves/early.yaml").unwrap();
    env.repo.remove("waves/mid.yaml").unwrap();
    env.repo.remove("waves/late.yaml").unwrap();
    env.repo
        .write(
            "waves/kustomization.yaml",
            &argo_kustomization(&["keep.yaml"]),
        )
        .unwrap();
    env.repo
        .write("waves/keep.yaml", &ks_env::cm("keep", &[("a", "b")]))
        .unwrap();
    let t_push = t0.elapsed();
    let rev2 = env.push("remove the waves").await;
    let r = rev2.clone();
    env.wait_ks("argo", "Ready at the removal", move |k| ready_at(k, &r))
        .await;
    let _ = support::procs::wait_for(ks_env::TIMEOUT, "all gone", || async {
        Ok((seen_lock(&seen).gone.len() >= 3).then_some(()))
    })
    .await;
    poller.abort();
    let k = env.ks.get("argo").await.unwrap();
    println!("argo: {}", ready_message(&k));
    {
        let s = seen_lock(&seen);
        println!(
            "after the removal (pushed at {:.2} s): gone {:?}",
            t_push.as_secs_f64(),
            s.gone
        );
        let g = |n: &str| {
            *s.gone
                .get(n)
                .unwrap_or_else(|| panic!("{n} never pruned: {s:?}"))
        };
        assert!(
            g("late") <= g("mid") && g("mid") <= g("early"),
            "not pruned in reverse wave order: {:?}",
            s.gone
        );
        assert!(
            s.late_gone_mid_present,
            "never saw wave 1 gone while wave 0 was still there: {:?}",
            s.gone
        );
        assert!(
            !s.gone.contains_key("p-early"),
            "the plain objects were pruned"
        );
    }

    // A PreSync hook runs (ks_argo_hooks.rs tests hooks in depth) and stays out of the
    // inventory.
    env.repo
        .write(
            "waves/kustomization.yaml",
            &argo_kustomization(&["keep.yaml", "hook.yaml"]),
        )
        .unwrap();
    env.repo.write("waves/hook.yaml", HOOK_JOB).unwrap();
    let rev3 = env.push("add a hook").await;
    let r = rev3.clone();
    let k = env
        .wait_ks("argo", "Ready with a hook", move |k| ready_at(k, &r))
        .await;
    println!("hook: {}", ready_message(&k));
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(env.client.clone(), &env.ns);
    assert!(
        jobs.get_opt("migrate").await.unwrap().is_some(),
        "the hook did not run"
    );
    let inventory = k.status.unwrap().inventory.unwrap().entries;
    assert!(
        inventory.iter().all(|e| !e.id.ends_with("_Job")),
        "the hook is in the inventory: {inventory:?}"
    );
    println!("total {:.1} s", t_start.elapsed().as_secs_f64());
}
