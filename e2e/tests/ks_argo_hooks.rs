//! Argo CD resource hooks (issue 17) on the real control plane, with the feature gate
//! `ArgoSyncSemantics=true` and `rflux.dev/argo-semantics: enabled`
//! (kustomize-controller/src/reconcile/hooks.rs):
//! - a PreSync Job completes before the Deployment of wave 0 is created; a PostSync Job with
//!   `HookSucceeded` runs and is deleted at the end of the sync, while the PreSync Job
//!   (default `BeforeHookCreation`) stays until the next sync, which replaces it; hooks are not
//!   in the inventory;
//! - a reconcile of the same revision (`requestedAt`) runs no hook;
//! - a failing PreSync Job stops the sync: the Deployment is never created, the SyncFail Job
//!   runs, and Ready names the failed hook.
//!
//! kwok completes every Pod a Job owns (its `pod-complete` stage), so a Job hook succeeds. To
//! make one fail, its Pod cannot be scheduled (a nodeSelector no node has) and
//! `activeDeadlineSeconds: 1` makes the Job controller fail the Job (DeadlineExceeded).
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod ks_env;
mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use ks_env::{Env, argo_deployment, argo_kustomization, ready_at, ready_message};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use support::procs::ks_condition;

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

/// What the poller saw, as times since the start.
#[derive(Default, Debug)]
struct Seen {
    /// Deployment name → first seen.
    deployments: BTreeMap<String, Duration>,
    /// Job name → the uids seen, in order.
    job_uids: BTreeMap<String, Vec<String>>,
    /// Job name → first seen Complete.
    complete: BTreeMap<String, Duration>,
    /// Reconciling messages of Kustomization `hooks`.
    messages: Vec<String>,
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

fn lock(s: &Arc<Mutex<Seen>>) -> std::sync::MutexGuard<'_, Seen> {
    s.lock().unwrap()
}

/// Lists the Deployments and Jobs (and reads Kustomization `hooks`) every 100 ms.
fn watch(env: &Env, t0: Instant) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let deploys: Api<Deployment> = Api::namespaced(env.client.clone(), &env.ns);
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), &env.ns);
    let ks = env.ks.clone();
    let out = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            // Jobs first: a Deployment seen is then seen after the Jobs of the same tick.
            if let Ok(list) = jobs.list(&ListParams::default()).await {
                let at = t0.elapsed();
                let mut s = lock(&out);
                for j in &list.items {
                    let name = j.metadata.name.clone().unwrap_or_default();
                    let uid = j.metadata.uid.clone().unwrap_or_default();
                    let uids = s.job_uids.entry(name.clone()).or_default();
                    if !uids.contains(&uid) {
                        uids.push(uid);
                    }
                    if job_complete(j) {
                        s.complete.entry(name).or_insert(at);
                    }
                }
            }
            if let Ok(list) = deploys.list(&ListParams::default()).await {
                let at = t0.elapsed();
                let mut s = lock(&out);
                for d in &list.items {
                    let name = d.metadata.name.clone().unwrap_or_default();
                    s.deployments.entry(name).or_insert(at);
                }
            }
            if let Ok(k) = ks.get("hooks").await
                && let Some(c) = ks_condition(&k, "Reconciling")
            {
                let mut s = lock(&out);
                if s.messages.last() != Some(&c.message) {
                    s.messages.push(c.message.clone());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (seen, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_run_in_their_phases_and_only_on_change() {
    let files = [
        (
            "ok/kustomization.yaml",
            argo_kustomization(&["app.yaml", "pre.yaml", "post.yaml"]),
        ),
        ("ok/app.yaml", argo_deployment("app", "0")),
        ("ok/pre.yaml", job("pre", "PreSync", None, false)),
        (
            "ok/post.yaml",
            job("post", "PostSync", Some("HookSucceeded"), false),
        ),
        (
            "bad/kustomization.yaml",
            argo_kustomization(&["app.yaml", "pre.yaml", "syncfail.yaml"]),
        ),
        ("bad/app.yaml", argo_deployment("bad-app", "0")),
        ("bad/pre.yaml", job("bad-pre", "PreSync", None, true)),
        (
            "bad/syncfail.yaml",
            job("bad-syncfail", "SyncFail", None, false),
        ),
    ];
    let t_start = Instant::now();
    let mut env = Env::start("argohooks", "ArgoSyncSemantics=true", &files).await;
    let rev = format!("main@sha1:{}", env.repo.head().unwrap());
    let ns = env.ns.clone();
    let t0 = Instant::now();
    let (seen, poller) = watch(&env, t0);
    let opt_in = json!({"rflux.dev/argo-semantics": "enabled",
                        "rflux.dev/argo-sync-wave-delay": "300ms"});
    env.create_ks("hooks", "./ok", json!({}), opt_in.clone())
        .await;
    env.create_ks("bad", "./bad", json!({}), opt_in.clone())
        .await;

    // (a), (d): the PreSync Job completes before the Deployment is created; the PostSync Job
    // (HookSucceeded) is deleted at the end; the PreSync Job (BeforeHookCreation) stays.
    let r = rev.clone();
    let k = env
        .wait_ks("hooks", "Ready", move |k| ready_at(k, &r))
        .await;
    println!(
        "hooks Ready after {:.2} s: {}",
        t0.elapsed().as_secs_f64(),
        ready_message(&k)
    );
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), &ns);
    let deploys: Api<Deployment> = Api::namespaced(env.client.clone(), &ns);
    let pre = jobs.get("pre").await.unwrap();
    assert!(job_complete(&pre), "the PreSync Job is not complete");
    assert!(
        jobs.get_opt("post").await.unwrap().is_none(),
        "the HookSucceeded PostSync Job was not deleted"
    );
    let app = deploys.get("app").await.unwrap();
    let completed = pre.status.as_ref().and_then(|s| s.completion_time.clone());
    let created = app.metadata.creation_timestamp.clone();
    println!("pre completed {completed:?}, app created {created:?}");
    assert!(
        completed.unwrap().0 <= created.unwrap().0,
        "the Deployment was created before the PreSync Job completed"
    );
    let inventory: Vec<String> = k
        .status
        .as_ref()
        .and_then(|s| s.inventory.as_ref())
        .map(|i| i.entries.iter().map(|e| e.id.clone()).collect())
        .unwrap_or_default();
    assert!(
        inventory.iter().all(|id| !id.contains("_Job")),
        "a hook is in the inventory: {inventory:?}"
    );
    assert!(
        inventory
            .iter()
            .any(|id| id.ends_with("_app_apps_Deployment"))
    );
    {
        let s = lock(&seen);
        println!("seen: {s:#?}");
        assert!(
            s.complete["pre"] <= s.deployments["app"],
            "the Deployment was seen before the PreSync Job was Complete: {s:?}"
        );
        assert!(
            s.job_uids.contains_key("post"),
            "the PostSync Job never ran: {s:?}"
        );
        let running = format!("Running PreSync hook Job/{ns}/pre for revision {rev}");
        assert!(
            s.messages.contains(&running),
            "no hook progress on the Reconciling condition: {:?}",
            s.messages
        );
        assert!(
            s.messages
                .iter()
                .any(|m| m.starts_with("Running PostSync hook")),
            "{:?}",
            s.messages
        );
    }

    // (b): the failing PreSync Job stops the sync and runs the SyncFail Job.
    let needles = [
        format!("PreSync hook Job/{ns}/bad-pre failed"),
        format!("SyncFail hook Job/{ns}/bad-syncfail ran"),
    ];
    let k = env
        .wait_ks("bad", "failed PreSync hook", move |k| {
            ks_env::failed_with(
                k,
                "ReconciliationFailed",
                &[&needles[0], &needles[1], "deadline"],
            )
        })
        .await;
    println!("bad: {}", ready_message(&k));
    // Stop its retries (each one runs the hooks again) before looking.
    env.ks
        .patch(
            "bad",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap();
    assert!(
        !lock(&seen).deployments.contains_key("bad-app"),
        "the Deployment of the failed sync was applied"
    );
    assert!(deploys.get_opt("bad-app").await.unwrap().is_none());
    assert!(
        lock(&seen).job_uids.contains_key("bad-syncfail"),
        "the SyncFail Job never ran"
    );

    // (c): a reconcile of the same revision runs no hook.
    let pre_uid = pre.metadata.uid.clone().unwrap();
    env.request("hooks", json!({})).await;
    let asked = env
        .ks
        .get("hooks")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap()["reconcile.fluxcd.io/requestedAt"]
        .clone();
    let r = rev.clone();
    env.wait_ks("hooks", "no-op reconcile", move |k| {
        ready_at(k, &r)
            && k.status
                .as_ref()
                .and_then(|s| s.last_handled_reconcile_at.as_deref())
                == Some(asked.as_str())
    })
    .await;
    assert_eq!(
        jobs.get("pre").await.unwrap().metadata.uid.as_deref(),
        Some(pre_uid.as_str()),
        "the no-op reconcile replaced the PreSync Job"
    );
    {
        let s = lock(&seen);
        assert_eq!(s.job_uids["pre"].len(), 1, "{s:?}");
        assert_eq!(s.job_uids["post"].len(), 1, "{s:?}");
    }

    // (d): the next sync (a new revision) replaces the PreSync Job (BeforeHookCreation).
    env.repo
        .write("ok/cm.yaml", &ks_env::cm("extra", &[("a", "b")]))
        .unwrap();
    env.repo
        .write(
            "ok/kustomization.yaml",
            &argo_kustomization(&["app.yaml", "pre.yaml", "post.yaml", "cm.yaml"]),
        )
        .unwrap();
    let rev2 = env.push("a new revision").await;
    let r = rev2.clone();
    env.wait_ks("hooks", "Ready at the new revision", move |k| {
        ready_at(k, &r)
    })
    .await;
    poller.abort();
    let new_uid = jobs.get("pre").await.unwrap().metadata.uid.unwrap();
    assert_ne!(new_uid, pre_uid, "the PreSync Job was not replaced");
    assert!(jobs.get_opt("post").await.unwrap().is_none());
    {
        let s = lock(&seen);
        println!("after the new revision: {:?}", s.job_uids);
        assert_eq!(s.job_uids["post"].len(), 2, "{s:?}");
    }
    println!("total {:.1} s", t_start.elapsed().as_secs_f64());
}

/// A failing PreSync hook named by `generateName` alone, retried every 2 s: each retry is the
/// same Argo sync operation, so the hook keeps its generated name (§2.3: the operation start is
/// part of it) and `BeforeHookCreation` replaces the Job, as an Argo retry does. Without that,
/// each retry would leave one more failed Job behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_generate_name_hook_keeps_its_name_across_retries() {
    let hook = job("migrate", "PreSync", None, true)
        .replace("  name: migrate\n", "  generateName: migrate-\n");
    assert!(hook.contains("generateName: migrate-"), "{hook}");
    let files = [
        (
            "retry/kustomization.yaml",
            argo_kustomization(&["app.yaml", "pre.yaml"]),
        ),
        ("retry/app.yaml", argo_deployment("retry-app", "0")),
        ("retry/pre.yaml", hook),
    ];
    let env = Env::start("argoretry", "ArgoSyncSemantics=true", &files).await;
    let commit = env.repo.head().unwrap();
    let t0 = Instant::now();
    let (seen, poller) = watch(&env, t0);
    let opt_in = json!({"rflux.dev/argo-semantics": "enabled",
                        "rflux.dev/argo-sync-wave-delay": "300ms"});
    env.create_ks("retry", "./retry", json!({}), opt_in).await;
    let prefix = format!("migrate-{}-presync-", &commit[..7]);
    // Three attempts: three Jobs created (under one name, asserted below).
    let s2 = seen.clone();
    support::procs::wait_for(ks_env::TIMEOUT, "three attempts of the hook", || {
        let attempts: usize = lock(&s2)
            .job_uids
            .iter()
            .filter(|(n, _)| n.starts_with("migrate-"))
            .map(|(_, u)| u.len())
            .sum();
        async move { Ok((attempts >= 3).then_some(())) }
    })
    .await
    .unwrap();
    env.ks
        .patch(
            "retry",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap();
    poller.abort();
    let s = lock(&seen);
    println!("jobs seen: {:?}", s.job_uids);
    let names: Vec<&String> = s
        .job_uids
        .keys()
        .filter(|n| n.starts_with("migrate-"))
        .collect();
    assert_eq!(
        names.len(),
        1,
        "one name across the retries: {:?}",
        s.job_uids
    );
    assert!(
        names[0].starts_with(&prefix),
        "{} is not {prefix}<start>",
        names[0]
    );
    assert!(s.job_uids[names[0]].len() >= 3, "{:?}", s.job_uids);
    assert!(
        !s.deployments.contains_key("retry-app"),
        "the Deployment of the failing sync was applied"
    );
}

/// `HookFailed` (§2.2: "the hook is deleted when the OPERATION fails (or is terminated), whatever
/// this hook's own result"): in a failing sync, a PreSync hook that completed (wave -1) and the
/// one that failed (wave 0) are both deleted, before the SyncFail hook runs, which stays; in a
/// successful sync a `HookFailed` hook stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_failed_policy_deletes_the_hooks_of_a_failed_sync_only() {
    let wave = |text: String, w: &str| {
        text.replace(
            "    argocd.argoproj.io/hook: PreSync\n",
            &format!(
                "    argocd.argoproj.io/hook: PreSync\n    argocd.argoproj.io/sync-wave: \"{w}\"\n"
            ),
        )
    };
    let files = [
        (
            "hfok/kustomization.yaml",
            argo_kustomization(&["app.yaml", "pre.yaml"]),
        ),
        ("hfok/app.yaml", argo_deployment("hfok-app", "0")),
        (
            "hfok/pre.yaml",
            job("hfok-pre", "PreSync", Some("HookFailed"), false),
        ),
        (
            "hfbad/kustomization.yaml",
            argo_kustomization(&["app.yaml", "first.yaml", "pre.yaml", "syncfail.yaml"]),
        ),
        ("hfbad/app.yaml", argo_deployment("hfbad-app", "0")),
        (
            "hfbad/first.yaml",
            wave(
                job("hfbad-first", "PreSync", Some("HookFailed"), false),
                "-1",
            ),
        ),
        (
            "hfbad/pre.yaml",
            wave(job("hfbad-pre", "PreSync", Some("HookFailed"), true), "0"),
        ),
        (
            "hfbad/syncfail.yaml",
            job("hfbad-syncfail", "SyncFail", None, false),
        ),
    ];
    assert!(files[5].1.contains("sync-wave: \"-1\""), "{}", files[5].1);
    let mut env = Env::start("argohookfailed", "ArgoSyncSemantics=true", &files).await;
    let rev = format!("main@sha1:{}", env.repo.head().unwrap());
    let ns = env.ns.clone();
    let (seen, poller) = watch(&env, Instant::now());
    let opt_in = json!({"rflux.dev/argo-semantics": "enabled",
                        "rflux.dev/argo-sync-wave-delay": "300ms"});
    env.create_ks("hfok", "./hfok", json!({}), opt_in.clone())
        .await;
    env.create_ks("hfbad", "./hfbad", json!({}), opt_in).await;
    let r = rev.clone();
    env.wait_ks("hfok", "Ready", move |k| ready_at(k, &r)).await;
    let needle = format!("PreSync hook Job/{ns}/hfbad-pre failed");
    let k = env
        .wait_ks("hfbad", "failed PreSync hook", move |k| {
            ks_env::failed_with(k, "ReconciliationFailed", &[&needle])
        })
        .await;
    println!("hfbad: {}", ready_message(&k));
    env.ks
        .patch(
            "hfbad",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap();
    poller.abort();
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), &ns);
    assert!(
        jobs.get_opt("hfok-pre").await.unwrap().is_some(),
        "a HookFailed hook of a successful sync was deleted"
    );
    let (job_uids, complete, deployments) = {
        let s = lock(&seen);
        (
            s.job_uids.clone(),
            s.complete.clone(),
            s.deployments.clone(),
        )
    };
    println!("jobs seen: {job_uids:?}");
    for gone in ["hfbad-first", "hfbad-pre"] {
        assert!(
            job_uids.contains_key(gone),
            "{gone} never ran: {job_uids:?}"
        );
        assert!(
            jobs.get_opt(gone).await.unwrap().is_none(),
            "{gone} (HookFailed) is still there after the failed sync"
        );
    }
    assert!(
        complete.contains_key("hfbad-first"),
        "the wave -1 hook did not complete before the failure: {complete:?}"
    );
    assert!(
        jobs.get_opt("hfbad-syncfail").await.unwrap().is_some(),
        "the SyncFail hook (no policy: BeforeHookCreation) is not there"
    );
    assert!(!deployments.contains_key("hfbad-app"));
}
