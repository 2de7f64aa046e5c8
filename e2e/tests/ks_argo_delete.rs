//! Argo CD's deletion semantics (issue 17) on the real control plane, with the feature gate
//! `ArgoSyncSemantics=true` and `rflux.dev/argo-semantics: enabled`
//! (kustomize-controller/src/reconcile/argo_delete.rs, finalize.rs):
//! - deleting the Kustomization runs its PreDelete Job to completion before anything is
//!   deleted; the objects go one wave at a time, highest first (wave 1 is held by a finalizer
//!   the test owns: wave 0 is untouched until it is gone); the PostDelete Job runs only after
//!   every object is gone and, with `HookSucceeded`, is deleted at the end; the PreDelete Job
//!   (default `BeforeHookCreation`) stays, as in Argo; `Delete=false` and
//!   `helm.sh/resource-policy: keep` objects stay;
//! - a failing PreDelete Job stops the deletion: nothing is deleted, the finalizer stays and
//!   Ready names the hook; removing the opt-in annotation lets Flux's deletion finish;
//! - without the opt-in, the same annotations are inert: everything is deleted (Flux).
//!
//! kwok completes every Pod a Job owns, so a Job hook succeeds. To make one fail, its Pod
//! cannot be scheduled (a nodeSelector no node has) and `activeDeadlineSeconds: 1` makes the
//! Job controller fail the Job.
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod ks_env;
mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use ks_env::{Env, argo_kustomization, ready_message};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use support::procs::wait_for;

const HOLD: &str = "e2e.rflux.dev/hold";

/// A hook Job; `fail`: its Pod is never scheduled and the Job fails after 1 s.
fn job(name: &str, hook: &str, policy: Option<&str>, fail: bool) -> String {
    let policy = policy
        .map(|p| format!("    argocd.argoproj.io/hook-delete-policy: {p}\n"))
        .unwrap_or_default();
    let (deadline, selector) = if fail {
        (
            "  activeDeadlineSeconds: 1\n",
            "      nodeSelector: {no-such-node: \"true\"}\n",
        )
    } else {
        ("", "")
    };
    format!(
        "apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  annotations:
    argocd.argoproj.io/hook: {hook}
{policy}spec:
  backoffLimit: 0
{deadline}  template:
    spec:
      restartPolicy: Never
{selector}      containers:
      - name: run
        image: busybox:1.36
"
    )
}

/// A ConfigMap with `annotations` (YAML lines under `annotations:`) and, with `hold`, the
/// test's finalizer.
fn cm(name: &str, annotations: &[&str], hold: bool) -> String {
    let mut s = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n");
    if hold {
        s.push_str(&format!("  finalizers: [{HOLD}]\n"));
    }
    if !annotations.is_empty() {
        s.push_str("  annotations:\n");
        for a in annotations {
            s.push_str(&format!("    {a}\n"));
        }
    }
    s.push_str("data:\n  k: v\n");
    s
}

fn job_complete(j: &Job) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
}

/// What the poller saw, as times since the start.
#[derive(Default, Debug)]
struct Seen {
    /// ConfigMap name → first seen gone (after having been seen).
    gone: BTreeMap<String, Duration>,
    /// ConfigMap name → first seen with a deletionTimestamp.
    deleting: BTreeMap<String, Duration>,
    /// Job name → first seen.
    jobs: BTreeMap<String, Duration>,
    /// Job name → first seen Complete.
    complete: BTreeMap<String, Duration>,
    /// ConfigMaps `w0`/`w1` listed after the PostDelete Job `post` was seen (the Jobs are
    /// listed before the ConfigMaps in each round): must stay empty.
    live_after_post: Vec<String>,
}

fn lock(s: &Arc<Mutex<Seen>>) -> std::sync::MutexGuard<'_, Seen> {
    s.lock().unwrap()
}

/// Lists the Jobs, then the ConfigMaps, every 50 ms.
fn watch(env: &Env, t0: Instant) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), &env.ns);
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let mut known: Vec<String> = Vec::new();
        loop {
            if let Ok(list) = jobs.list(&ListParams::default()).await {
                let at = t0.elapsed();
                let mut s = lock(&out);
                for j in &list.items {
                    let name = j.metadata.name.clone().unwrap_or_default();
                    s.jobs.entry(name.clone()).or_insert(at);
                    if job_complete(j) {
                        s.complete.entry(name).or_insert(at);
                    }
                }
            }
            if let Ok(list) = cms.list(&ListParams::default()).await {
                let at = t0.elapsed();
                let mut s = lock(&out);
                let names: Vec<String> = list
                    .items
                    .iter()
                    .filter_map(|c| c.metadata.name.clone())
                    .collect();
                if s.jobs.contains_key("post") {
                    for n in names.iter().filter(|n| *n == "w0" || *n == "w1") {
                        s.live_after_post.push(n.clone());
                    }
                }
                for c in &list.items {
                    if c.metadata.deletion_timestamp.is_some() {
                        let name = c.metadata.name.clone().unwrap_or_default();
                        s.deleting.entry(name).or_insert(at);
                    }
                }
                for k in &known {
                    if !names.contains(k) {
                        s.gone.entry(k.clone()).or_insert(at);
                    }
                }
                for n in names {
                    if !known.contains(&n) {
                        known.push(n);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    (seen, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_runs_hooks_keeps_objects_and_goes_wave_by_wave() {
    let files = [
        (
            "ok/kustomization.yaml",
            argo_kustomization(&["objects.yaml", "pre.yaml", "post.yaml"]),
        ),
        (
            "ok/objects.yaml",
            [
                cm("w1", &["argocd.argoproj.io/sync-wave: \"1\""], true),
                cm("w0", &[], false),
                cm(
                    "keep-argo",
                    &["argocd.argoproj.io/sync-options: Delete=false"],
                    false,
                ),
                cm("keep-helm", &["helm.sh/resource-policy: keep"], false),
            ]
            .join("---\n"),
        ),
        ("ok/pre.yaml", job("pre", "PreDelete", None, false)),
        (
            "ok/post.yaml",
            job("post", "PostDelete", Some("HookSucceeded"), false),
        ),
        (
            "bad/kustomization.yaml",
            argo_kustomization(&["objects.yaml", "pre.yaml"]),
        ),
        ("bad/objects.yaml", cm("bad-cm", &[], false)),
        ("bad/pre.yaml", job("bad-pre", "PreDelete", None, true)),
        (
            "flux/kustomization.yaml",
            argo_kustomization(&["objects.yaml"]),
        ),
        (
            "flux/objects.yaml",
            [
                cm(
                    "flux-keep-argo",
                    &["argocd.argoproj.io/sync-options: Delete=false"],
                    false,
                ),
                cm("flux-keep-helm", &["helm.sh/resource-policy: keep"], false),
            ]
            .join("---\n"),
        ),
    ];
    let t_start = Instant::now();
    let mut env = Env::start("argodel", "ArgoSyncSemantics=true", &files).await;
    let rev = format!("main@sha1:{}", env.repo.head().unwrap());
    let ns = env.ns.clone();
    let opt_in = json!({"rflux.dev/argo-semantics": "enabled",
                        "rflux.dev/argo-sync-wave-delay": "300ms"});
    env.create_ks("ok", "./ok", json!({}), opt_in.clone()).await;
    env.create_ks("bad", "./bad", json!({}), opt_in.clone())
        .await;
    env.create_ks("flux", "./flux", json!({}), json!({})).await;
    for name in ["ok", "bad", "flux"] {
        let r = rev.clone();
        env.wait_ks(name, "Ready", move |k| ks_env::ready_at(k, &r))
            .await;
    }
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &ns);
    // Deletion hooks are never applied by a sync.
    for j in ["pre", "post", "bad-pre"] {
        assert!(
            jobs.get_opt(j).await.unwrap().is_none(),
            "the deletion hook {j} ran in a sync"
        );
    }

    // (a) The opted-in deletion.
    let t0 = Instant::now();
    let (seen, poller) = watch(&env, t0);
    env.ks.delete("ok", &DeleteParams::default()).await.unwrap();
    // Wave 1 is deleted first and held by our finalizer.
    let w1 = wait_for(Duration::from_secs(60), "w1 deleting", || async {
        Ok(cms
            .get_opt("w1")
            .await?
            .filter(|c| c.metadata.deletion_timestamp.is_some()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", env.ctl.log_tails(40)));
    let pre = jobs.get("pre").await.unwrap();
    assert!(job_complete(&pre), "the PreDelete Job is not complete");
    let completed = pre
        .status
        .as_ref()
        .and_then(|s| s.completion_time.clone())
        .unwrap();
    let deleted_at = w1.metadata.deletion_timestamp.clone().unwrap();
    println!("pre completed {completed:?}, w1 deleted {deleted_at:?}");
    assert!(
        completed.0 <= deleted_at.0,
        "an object was deleted before the PreDelete Job completed"
    );
    // While wave 1 is not gone, wave 0 is untouched and no PostDelete hook runs.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let w0 = cms.get("w0").await.unwrap();
    assert!(
        w0.metadata.deletion_timestamp.is_none(),
        "wave 0 was deleted while wave 1 was still there"
    );
    assert!(jobs.get_opt("post").await.unwrap().is_none());
    assert!(env.ks.get_opt("ok").await.unwrap().is_some());
    // Release wave 1: the deletion goes on.
    cms.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    wait_for(Duration::from_secs(90), "Kustomization ok gone", || async {
        Ok(env.ks.get_opt("ok").await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", env.ctl.log_tails(40)));
    tokio::time::sleep(Duration::from_millis(200)).await;
    poller.abort();
    {
        let s = lock(&seen);
        println!("seen: {s:#?}");
        // Wave 0 was first touched (deleting, or already gone) only once wave 1 was gone.
        let w0_touched = s.deleting.get("w0").unwrap_or(&s.gone["w0"]);
        assert!(
            s.gone["w1"] <= *w0_touched,
            "wave 0 went before wave 1: {s:?}"
        );
        assert!(
            s.live_after_post.is_empty(),
            "the PostDelete Job ran before every object was gone: {s:?}"
        );
        // It ran (it is deleted, `HookSucceeded`, as soon as it completes: the poller may
        // miss its Complete condition; the Kustomization is only gone once it completed).
        assert!(
            s.jobs.contains_key("post"),
            "the PostDelete Job never ran: {s:?}"
        );
    }
    assert!(cms.get_opt("w0").await.unwrap().is_none());
    assert!(cms.get_opt("w1").await.unwrap().is_none());
    assert!(
        cms.get_opt("keep-argo").await.unwrap().is_some(),
        "the Delete=false object was deleted"
    );
    assert!(
        cms.get_opt("keep-helm").await.unwrap().is_some(),
        "the resource-policy keep object was deleted"
    );
    assert!(
        jobs.get_opt("post").await.unwrap().is_none(),
        "the HookSucceeded PostDelete Job was not deleted"
    );
    assert!(
        jobs.get_opt("pre").await.unwrap().is_some(),
        "the BeforeHookCreation PreDelete Job was deleted"
    );

    // (b) A failing PreDelete hook blocks the deletion.
    env.ks
        .delete("bad", &DeleteParams::default())
        .await
        .unwrap();
    let needle = format!("PreDelete hook Job/{ns}/bad-pre failed");
    let k = env
        .wait_ks("bad", "failed PreDelete hook", move |k| {
            support::procs::ks_condition(k, "Ready").is_some_and(|c| {
                c.status == "False"
                    && c.reason == "DeletionHookFailed"
                    && c.message.contains(&needle)
            })
        })
        .await;
    println!("bad: {}", ready_message(&k));
    assert!(k.metadata.deletion_timestamp.is_some());
    assert!(
        cms.get_opt("bad-cm").await.unwrap().is_some(),
        "an object was deleted although the PreDelete hook failed"
    );
    // The escape hatch: without the opt-in, Flux's deletion runs.
    env.ks
        .patch(
            "bad",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"rflux.dev/argo-semantics": null}}})),
        )
        .await
        .unwrap();
    wait_for(
        Duration::from_secs(90),
        "Kustomization bad gone",
        || async { Ok(env.ks.get_opt("bad").await?.is_none().then_some(())) },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", env.ctl.log_tails(40)));
    assert!(cms.get_opt("bad-cm").await.unwrap().is_none());

    // (c) Without the opt-in, the annotations are inert (Flux deletes everything).
    env.delete_ks("flux").await;
    for name in ["flux-keep-argo", "flux-keep-helm"] {
        assert!(
            cms.get_opt(name).await.unwrap().is_none(),
            "{name} was kept without the opt-in"
        );
    }
    println!("total {:.1} s", t_start.elapsed().as_secs_f64());
}
