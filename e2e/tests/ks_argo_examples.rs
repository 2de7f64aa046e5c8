//! Real Argo CD example layouts (issue 17) on the real control plane: `sync-waves` and
//! `pre-post-sync` from argoproj/argocd-example-apps (e2e/tests/data/argo-examples/, see its
//! README for the commit and licence), pushed unchanged to the test git server and reconciled by
//! our controllers with the feature gate `ArgoSyncSemantics=true` and a Kustomization annotated
//! `rflux.dev/argo-semantics: enabled`. Each test asserts what Argo CD's documentation says a
//! sync of that layout does; the statements are quoted next to each assertion, from
//! `docs/user-guide/sync-waves.md` ("sync-waves.md"), `docs/user-guide/resource_hooks.md`
//! ("resource_hooks.md") of argoproj/argo-cd, and the reference
//! `../shared/reference/argo-semantics.md` (§n).
//!
//! `sync-waves/manifests.yaml` names its PreSync Job with `generateName` only. kustomize refuses
//! that ("missing metadata.name", Flux's kustomize-controller as well); an opted-in Kustomization
//! builds it (`BuildOptions::generate_names`) and names the hook as Argo does (§2.3). A test
//! states that without the opt-in the build refuses it, as Flux's does.
//!
//! kwok makes the ReplicaSets' Pods Ready and completes the Pods a Job owns, so every hook
//! succeeds and every workload becomes available. Times are first sightings of a poller that
//! lists the namespace every 100 ms.
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod ks_env;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use ks_env::{Env, ready_at, ready_message};
use kube::Client;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use rflux_common::api::kustomization::Kustomization;
use serde_json::{Value, json};
use support::procs::ks_condition;

/// The example files as stored (relative path, text), read from e2e/tests/data/argo-examples.
fn example_files() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/argo-examples");
    let mut out = Vec::new();
    for dir in ["sync-waves", "pre-post-sync", "kustomize-guestbook"] {
        let mut names: Vec<String> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".yaml"))
            .collect();
        names.sort();
        for n in names {
            let text = std::fs::read_to_string(root.join(dir).join(&n)).unwrap();
            out.push((format!("{dir}/{n}"), text));
        }
    }
    out
}

/// What the poller saw of one object (`Kind/name`), as times since the start.
#[derive(Default, Debug, Clone)]
struct Life {
    uids: Vec<String>,
    created: Option<Duration>,
    /// Available (ReplicaSet, Deployment) or Complete (Job).
    ready: Option<Duration>,
    /// First seen absent or deleting after having been seen.
    gone: Option<Duration>,
}

#[derive(Default, Debug, Clone)]
struct Seen {
    objects: BTreeMap<String, Life>,
    /// Namespace listings done.
    ticks: u64,
    /// The Reconciling messages of the Kustomization watched, in order, without repeats.
    messages: Vec<String>,
}

fn lock(s: &Arc<Mutex<Seen>>) -> std::sync::MutexGuard<'_, Seen> {
    s.lock().unwrap()
}

fn cond_true(o: &Value, type_: &str) -> bool {
    o["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

/// Whether `o` (kind `kind`) is available or complete.
fn is_ready(kind: &str, o: &Value) -> bool {
    match kind {
        "Job" => cond_true(o, "Complete"),
        "ReplicaSet" => {
            let want = o["spec"]["replicas"].as_i64().unwrap_or(1);
            o["status"]["availableReplicas"].as_i64() == Some(want)
                && o["status"]["observedGeneration"] == o["metadata"]["generation"]
        }
        "Deployment" => cond_true(o, "Available"),
        _ => true,
    }
}

async fn list_values<K>(api: &Api<K>) -> Option<Vec<Value>>
where
    K: Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let list = api.list(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect(),
    )
}

/// Every ReplicaSet, Deployment and Service of `ns` as (`Kind/name`, object).
async fn list_all(client: &Client, ns: &str) -> Option<Vec<(String, Value)>> {
    let mut out = Vec::new();
    let rs = list_values(&Api::<ReplicaSet>::namespaced(client.clone(), ns)).await?;
    let deploys = list_values(&Api::<Deployment>::namespaced(client.clone(), ns)).await?;
    let svcs = list_values(&Api::<Service>::namespaced(client.clone(), ns)).await?;
    for (kind, items) in [
        ("ReplicaSet", rs),
        ("Deployment", deploys),
        ("Service", svcs),
    ] {
        for o in items {
            let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
            out.push((format!("{kind}/{name}"), o));
        }
    }
    Some(out)
}

/// Aborts the task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Watches the Jobs, lists the rest of the namespace (and reads Kustomization `ks`) every
/// 100 ms until aborted.
fn watch(env: &Env, ks: &str, t0: Instant) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let client = env.client.clone();
    let ns = env.ns.clone();
    let kss = env.ks.clone();
    let ks = ks.to_string();
    let out = seen.clone();
    let jobs = watch_jobs(env, t0, seen.clone());
    let task = tokio::spawn(async move {
        let _jobs = AbortOnDrop(jobs);
        loop {
            if let Some(list) = list_all(&client, &ns).await {
                let at = t0.elapsed();
                let mut s = lock(&out);
                s.ticks += 1;
                let mut present = BTreeSet::new();
                for (key, o) in &list {
                    if !o["metadata"]["deletionTimestamp"].is_null() {
                        continue;
                    }
                    present.insert(key.clone());
                    let life = s.objects.entry(key.clone()).or_default();
                    let uid = o["metadata"]["uid"].as_str().unwrap_or("").to_string();
                    if !life.uids.contains(&uid) {
                        life.uids.push(uid);
                    }
                    life.created.get_or_insert(at);
                    let kind = key.split('/').next().unwrap_or("");
                    if is_ready(kind, o) {
                        life.ready.get_or_insert(at);
                    }
                }
                for (key, life) in s.objects.iter_mut() {
                    if !key.starts_with("Job/") && !present.contains(key) {
                        life.gone.get_or_insert(at);
                    }
                }
            }
            if let Ok(k) = kss.get(&ks).await
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

/// Records every Job event of the namespace in `seen` (a watch, not a poll: a hook Job can
/// complete and be deleted within one poll).
fn watch_jobs(env: &Env, t0: Instant, seen: Arc<Mutex<Seen>>) -> tokio::task::JoinHandle<()> {
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), &env.ns);
    tokio::spawn(async move {
        let mut stream = jobs
            .watch(&WatchParams::default(), "0")
            .await
            .unwrap()
            .boxed();
        while let Some(ev) = stream.next().await {
            let (job, deleted) = match ev {
                Ok(WatchEvent::Added(j) | WatchEvent::Modified(j)) => (j, false),
                Ok(WatchEvent::Deleted(j)) => (j, true),
                _ => continue,
            };
            let at = t0.elapsed();
            let o = serde_json::to_value(&job).unwrap();
            let key = format!("Job/{}", o["metadata"]["name"].as_str().unwrap_or(""));
            let mut s = lock(&seen);
            let life = s.objects.entry(key).or_default();
            let uid = o["metadata"]["uid"].as_str().unwrap_or("").to_string();
            if deleted || !o["metadata"]["deletionTimestamp"].is_null() {
                life.gone.get_or_insert(at);
                continue;
            }
            if !life.uids.contains(&uid) {
                life.uids.push(uid);
                // A new Job of a name seen gone before: not gone any more.
                life.gone = None;
            }
            life.created.get_or_insert(at);
            if is_ready("Job", &o) {
                life.ready.get_or_insert(at);
            }
        }
    })
}

/// The opt-in annotations (a short inter-wave delay to keep the test quick).
fn opt_in() -> Value {
    json!({"rflux.dev/argo-semantics": "enabled",
           "rflux.dev/argo-sync-wave-delay": "300ms"})
}

fn inventory(k: &Kustomization) -> BTreeSet<String> {
    k.status
        .as_ref()
        .and_then(|s| s.inventory.as_ref())
        .map(|i| i.entries.iter().map(|e| e.id.clone()).collect())
        .unwrap_or_default()
}

/// The names of the Jobs that exist (not deleting) in the namespace now.
async fn live_jobs(env: &Env) -> BTreeSet<String> {
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), &env.ns);
    jobs.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .filter_map(|j| j.metadata.name)
        .collect()
}

/// Lets the poller look twice more, and until `done` holds (at most [`ks_env::TIMEOUT`]), so
/// that what happened by the time the Kustomization was Ready is on the record.
async fn settle(seen: &Arc<Mutex<Seen>>, done: impl Fn(&Seen) -> bool) {
    let from = lock(seen).ticks;
    let _ = support::procs::wait_for(ks_env::TIMEOUT, "the poller to catch up", || async {
        let s = lock(seen);
        Ok((s.ticks >= from + 2 && done(&s)).then_some(()))
    })
    .await;
}

/// Whether every `keys` was seen ready.
fn all_ready(s: &Seen, keys: &[&str]) -> bool {
    keys.iter()
        .all(|k| s.objects.get(*k).is_some_and(|l| l.ready.is_some()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_post_sync_example_runs_its_hooks_around_the_sync() {
    let files = example_files();
    let refs: Vec<(&str, String)> = files.iter().map(|(p, t)| (p.as_str(), t.clone())).collect();
    let mut env = Env::start("argoex-pps", "ArgoSyncSemantics=true", &refs).await;
    let rev = format!("main@sha1:{}", env.repo.head().unwrap());
    let ns = env.ns.clone();
    let t0 = Instant::now();
    let (seen, poller) = watch(&env, "pps", t0);
    env.create_ks("pps", "./pre-post-sync", json!({}), opt_in())
        .await;
    let r = rev.clone();
    let k = env.wait_ks("pps", "Ready", move |k| ready_at(k, &r)).await;
    println!(
        "pps Ready after {:.2} s: {}",
        t0.elapsed().as_secs_f64(),
        ready_message(&k)
    );
    // kustomize's namePrefix of pre-post-sync/ reaches the hooks and the base's objects.
    let (before, after) = ("Job/pre-post-sync-before", "Job/pre-post-sync-after");
    let app = "pre-post-sync-kustomize-guestbook-ui";
    let (deploy, svc) = (format!("Deployment/{app}"), format!("Service/{app}"));
    settle(&seen, |s| {
        all_ready(s, &[&deploy])
            && [before, after]
                .iter()
                .all(|k| s.objects.get(*k).is_some_and(|l| l.gone.is_some()))
    })
    .await;
    poller.abort();
    let s = lock(&seen).clone();
    println!("seen: {s:#?}");
    let life = |key: &str| {
        s.objects
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("{key} never seen: {s:#?}"))
    };

    // resource_hooks.md: "PreSync | Executes prior to the apply of the manifests."
    let pre_done = life(before)
        .ready
        .unwrap_or_else(|| panic!("the PreSync Job never completed: {s:#?}"));
    for key in [&deploy, &svc] {
        assert!(
            pre_done <= life(key).created.unwrap(),
            "{key} was applied before the PreSync Job completed: {s:#?}"
        );
    }
    // resource_hooks.md: "PostSync | Executes after all Sync hooks completed and were
    // successful, a successful apply, and all resources in a Healthy state."
    let healthy = life(&deploy)
        .ready
        .unwrap_or_else(|| panic!("the Deployment never became Available: {s:#?}"));
    let post_created = life(after).created.unwrap();
    assert!(
        healthy <= post_created,
        "the PostSync Job ran before the Deployment was Available: {s:#?}"
    );
    assert!(
        life(after).ready.is_some(),
        "the PostSync Job never completed: {s:#?}"
    );
    // resource_hooks.md: "HookSucceeded | The hook resource is deleted after the hook
    // succeeded"; §2.2: "the hook is deleted when the whole OPERATION succeeds (at the end)",
    // so the PreSync Job is still there while the PostSync Job runs.
    for key in [before, after] {
        assert!(life(key).gone.is_some(), "{key} was not deleted: {s:#?}");
        assert_eq!(life(key).uids.len(), 1, "{key} ran more than once: {s:#?}");
    }
    assert!(
        life(before).gone.unwrap() >= post_created,
        "the PreSync Job was deleted before the PostSync hook ran: {s:#?}"
    );
    assert!(
        s.messages.iter().any(|m| m
            == &format!("Running PreSync hook Job/{ns}/pre-post-sync-before for revision {rev}")),
        "no PreSync progress on the Reconciling condition: {:?}",
        s.messages
    );

    // The final objects: the guestbook UI Deployment and Service, nothing of the hooks
    // (§2.1: "Hook objects are never part of the managed set").
    assert!(
        live_jobs(&env).await.is_empty(),
        "hook Jobs remain after a successful sync"
    );
    let want: BTreeSet<String> = [
        format!("{ns}_{app}_apps_Deployment"),
        format!("{ns}_{app}__Service"),
    ]
    .into();
    assert_eq!(inventory(&k), want, "the inventory is not the guestbook UI");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_waves_example_applies_its_waves_and_hooks_in_order() {
    let files = example_files();
    let refs: Vec<(&str, String)> = files.iter().map(|(p, t)| (p.as_str(), t.clone())).collect();
    let mut env = Env::start("argoex-waves", "ArgoSyncSemantics=true", &refs).await;
    let rev = format!("main@sha1:{}", env.repo.head().unwrap());
    let ns = env.ns.clone();
    let t0 = Instant::now();
    let (seen, poller) = watch(&env, "waves", t0);
    env.create_ks("waves", "./sync-waves", json!({}), opt_in())
        .await;
    let r = rev.clone();
    let k = env
        .wait_ks("waves", "Ready", move |k| ready_at(k, &r))
        .await;
    println!(
        "waves Ready after {:.2} s: {}",
        t0.elapsed().as_secs_f64(),
        ready_message(&k)
    );
    settle(&seen, |s| {
        all_ready(s, &["ReplicaSet/frontend", "Job/maint-page-down"])
    })
    .await;
    let s = lock(&seen).clone();
    println!("seen: {s:#?}");
    // The PreSync Job has `generateName: upgrade-sql-schema` (no name). §2.3: Argo names it
    // `<generateName>` + lowercase(`<first 7 of the revision>-<phase>-<start, Unix seconds>`).
    let commit = env.repo.head().unwrap();
    let presync_prefix = format!("Job/upgrade-sql-schema{}-presync-", &commit[..7]);
    let presync: Vec<&String> = s
        .objects
        .keys()
        .filter(|k| k.starts_with("Job/upgrade-sql-schema"))
        .collect();
    assert_eq!(presync.len(), 1, "one PreSync Job: {s:#?}");
    let presync_key = presync[0].clone();
    let start = presync_key
        .strip_prefix(&presync_prefix)
        .unwrap_or_else(|| panic!("{presync_key} is not named {presync_prefix}<start>"));
    let start: u64 = start.parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        start <= now && now - start < 600,
        "the start {start} is not the sync's (now {now})"
    );
    let life = |key: &str| {
        let key = if key == "Job/upgrade-sql-schema" {
            presync_key.as_str()
        } else {
            key
        };
        s.objects
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("{key} never seen: {s:#?}"))
    };
    let created = |key: &str| life(key).created.unwrap();
    let ready = |key: &str| {
        life(key)
            .ready
            .unwrap_or_else(|| panic!("{key} never available/complete: {s:#?}"))
    };
    // The plan of the example: PreSync upgrade-sql-schema; wave 0 backend (Service,
    // ReplicaSet); wave 1 the Sync hook maint-page-up; wave 2 frontend; wave 3 the Sync hook
    // maint-page-down.
    // resource_hooks.md: "PreSync | Executes prior to the apply of the manifests."
    for key in ["Service/backend", "ReplicaSet/backend"] {
        assert!(
            ready("Job/upgrade-sql-schema") <= created(key),
            "{key} was applied before the PreSync Job completed: {s:#?}"
        );
    }
    // sync-waves.md: "Within each phase you can have one or more waves, that allows you to
    // ensure certain resources are healthy before subsequent resources are synced."
    assert!(
        ready("ReplicaSet/backend") <= created("Job/maint-page-up"),
        "the wave-1 hook ran before wave 0 was healthy: {s:#?}"
    );
    // §2.1: "Sync | in the Sync phase, sorted with the normal objects by wave, kind, name | a
    // running Sync hook holds back the following groups".
    for key in ["Service/frontend", "ReplicaSet/frontend"] {
        assert!(
            ready("Job/maint-page-up") <= created(key),
            "{key} (wave 2) was applied before the wave-1 hook completed: {s:#?}"
        );
    }
    assert!(
        ready("ReplicaSet/frontend") <= created("Job/maint-page-down"),
        "the wave-3 hook ran before wave 2 was healthy: {s:#?}"
    );
    // §1.4 ("a step with hooks is waited for even when it is the last one"): the sync is Ready
    // only once the last hook completed.
    assert!(
        life("Job/maint-page-down").ready.is_some(),
        "the last Sync hook never completed: {s:#?}"
    );
    for hook in ["maint-page-up", "maint-page-down"] {
        assert!(
            s.messages
                .iter()
                .any(|m| m == &format!("Running Sync hook Job/{ns}/{hook} for revision {rev}")),
            "no progress for {hook} on the Reconciling condition: {:?}",
            s.messages
        );
    }

    // The final objects. resource_hooks.md: "Named hooks (i.e. ones with /metadata/name) will
    // only be created once"; none of the three hooks has HookSucceeded (BeforeHookCreation,
    // explicit or the default, §2.2), so the three Jobs stay after the sync, outside the
    // managed set (§2.1).
    let presync_name = presync_key.trim_start_matches("Job/").to_string();
    let jobs: BTreeSet<String> = ["maint-page-down", "maint-page-up", presync_name.as_str()]
        .map(String::from)
        .into();
    assert_eq!(live_jobs(&env).await, jobs, "the hooks left behind");
    let want: BTreeSet<String> = [
        format!("{ns}_backend__Service"),
        format!("{ns}_backend_apps_ReplicaSet"),
        format!("{ns}_frontend__Service"),
        format!("{ns}_frontend_apps_ReplicaSet"),
    ]
    .into();
    assert_eq!(
        inventory(&k),
        want,
        "the inventory is not the four workloads"
    );

    // A commit that drops the example's objects (a ConfigMap stays). sync-waves.md: "During
    // pruning of resources, resources from higher waves are processed first before moving to
    // lower waves." Hooks are not pruned (§2.1).
    env.repo
        .write(
            "sync-waves/kustomization.yaml",
            &ks_env::argo_kustomization(&["keep.yaml"]),
        )
        .unwrap();
    env.repo.remove("sync-waves/manifests.yaml").unwrap();
    env.repo
        .write("sync-waves/keep.yaml", &ks_env::cm("keep", &[("a", "b")]))
        .unwrap();
    let rev2 = env.push("drop the example").await;
    let r = rev2.clone();
    let k = env
        .wait_ks("waves", "Ready after the removal", move |k| ready_at(k, &r))
        .await;
    println!("after the removal: {}", ready_message(&k));
    let _ = support::procs::wait_for(ks_env::TIMEOUT, "the workloads gone", || async {
        let s = lock(&seen).clone();
        Ok(["ReplicaSet/backend", "ReplicaSet/frontend"]
            .iter()
            .all(|key| s.objects.get(*key).is_some_and(|l| l.gone.is_some()))
            .then_some(()))
    })
    .await;
    poller.abort();
    let s = lock(&seen).clone();
    let gone = |key: &str| {
        s.objects[key]
            .gone
            .unwrap_or_else(|| panic!("{key} was not pruned: {s:#?}"))
    };
    for front in ["Service/frontend", "ReplicaSet/frontend"] {
        for back in ["Service/backend", "ReplicaSet/backend"] {
            assert!(
                gone(front) <= gone(back),
                "{back} (wave 0) was pruned before {front} (wave 2): {s:#?}"
            );
        }
    }
    assert_eq!(live_jobs(&env).await, jobs, "the hooks were pruned");
    assert_eq!(
        inventory(&k),
        [format!("{ns}_keep__ConfigMap")].into(),
        "the inventory after the removal"
    );
}

/// The verbatim `sync-waves/` without the opt-in (the gate is on, the Kustomization carries
/// no `rflux.dev/argo-semantics`): Flux semantics, so kustomize refuses the generateName-only
/// PreSync Job as Flux's kustomize-controller does: Ready=False `BuildFailed` naming the missing
/// name, and nothing applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_waves_example_without_the_opt_in_is_refused_by_the_build_like_flux() {
    let files = example_files();
    let refs: Vec<(&str, String)> = files.iter().map(|(p, t)| (p.as_str(), t.clone())).collect();
    let mut env = Env::start("argoex-gen", "ArgoSyncSemantics=true", &refs).await;
    env.create_ks("waves", "./sync-waves", json!({}), json!({}))
        .await;
    let k = env
        .wait_ks("waves", "Ready=False BuildFailed", |k| {
            ks_condition(k, "Ready")
                .is_some_and(|c| c.status == "False" && c.reason == "BuildFailed")
        })
        .await;
    let msg = ready_message(&k);
    assert!(msg.contains("missing metadata.name"), "{msg}");
    assert!(
        live_jobs(&env).await.is_empty(),
        "nothing of the sync was applied"
    );
}
