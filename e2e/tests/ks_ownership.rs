//! Ownership conflicts and the mass-deletion guard of kustomize-controller, with both
//! controller processes on the shared control plane and repositories on the real git server
//! (kustomize-controller/src/ssa/claims.rs, reconcile/ownership.rs, reconcile/prune_guard.rs):
//! 1. two Kustomizations with one object: the second is refused (`OwnershipConflict`), the
//!    object is not flipped back and forth, a takeover annotation moves it;
//! 2. objects held by Argo CD or applied by another tool with overlapping fields are refused;
//!    an applier whose fields do not overlap is no conflict;
//! 3. `RefuseOwnershipConflicts=false` restores Flux's "the later apply wins";
//! 4. `prune-limit` stops a revision that would prune too much until `prune-confirm` names it.
//!
//! Times are printed (measured, not asserted).
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod ks_env;
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use ks_env::{Env, TIMEOUT, cm, failed_with, ready_at, ready_message};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use support::procs::wait_for;

const NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";
const TAKEOVER: &str = "kustomize.toolkit.fluxcd.io/takeover";

fn owner_label(c: &ConfigMap) -> Option<String> {
    c.labels().get(NAME_LABEL).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_kustomizations_one_object() {
    let files = [
        ("a/shared.yaml", cm("shared", &[("value", "from-a")])),
        ("b/shared.yaml", cm("shared", &[("value", "from-b")])),
        ("b/other.yaml", cm("b-other", &[("value", "b")])),
    ];
    let mut env = Env::start("own2", "", &files).await;
    let rev = format!("main@sha1:{}", env.repo.head().unwrap());
    let ns = env.ns.clone();

    // `a` reconciles every 3 s and `b` retries every 2 s: a flip-flop would show within 10 s.
    env.create_ks("a", "./a", json!({"interval": "3s"}), json!({}))
        .await;
    env.wait_ks("a", "a Ready", |k| ready_at(k, &rev)).await;
    let before = env.cm("shared").await.unwrap();
    assert_eq!(owner_label(&before).as_deref(), Some("a"));

    let t = Instant::now();
    env.create_ks("b", "./b", json!({}), json!({})).await;
    let held = format!("ConfigMap/{ns}/shared is held by Kustomization {ns}/a");
    let b = env
        .wait_ks("b", "b OwnershipConflict", |k| {
            failed_with(k, "OwnershipConflict", &[&held])
        })
        .await;
    println!("b refused after {:?}: {}", t.elapsed(), ready_message(&b));
    assert_eq!(
        env.data("b-other", "value").await.as_deref(),
        Some("b"),
        "b's other objects are applied"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = env.cm("shared").await.unwrap();
    assert_eq!(after.uid(), before.uid());
    assert_eq!(
        after.resource_version(),
        before.resource_version(),
        "shared was written while a and b both reconcile: {:?}",
        after.metadata.managed_fields
    );
    assert_eq!(owner_label(&after).as_deref(), Some("a"));
    assert_eq!(env.data("shared", "value").await.as_deref(), Some("from-a"));
    let a = env.ks.get("a").await.unwrap();
    assert!(ready_at(&a, &rev), "a: {}", ready_message(&a));
    let b = env.ks.get("b").await.unwrap();
    assert!(
        failed_with(&b, "OwnershipConflict", &[&held]),
        "b after 10 s: {}",
        ready_message(&b)
    );

    // Deleting `b` (prune) leaves `a`'s object alone.
    env.delete_ks("b").await;
    let cm_now = env.cm("shared").await.expect("shared deleted by b's prune");
    assert_eq!(cm_now.uid(), before.uid());
    assert!(env.cm("b-other").await.is_none(), "b-other not pruned");

    // `b` again, asking to take over.
    let t = Instant::now();
    env.create_ks("b", "./b", json!({}), json!({TAKEOVER: "enabled"}))
        .await;
    env.wait_ks("b", "b Ready with takeover", |k| ready_at(k, &rev))
        .await;
    println!("b took over after {:?}", t.elapsed());
    let taken = env.cm("shared").await.unwrap();
    assert_eq!(taken.uid(), before.uid());
    assert_eq!(owner_label(&taken).as_deref(), Some("b"));
    assert_eq!(env.data("shared", "value").await.as_deref(), Some("from-b"));

    // `a` now finds `b` holding it (and does not take it back).
    env.request("a", json!({})).await;
    let held_b = format!("ConfigMap/{ns}/shared is held by Kustomization {ns}/b");
    let a = env
        .wait_ks("a", "a OwnershipConflict", |k| {
            failed_with(k, "OwnershipConflict", &[&held_b])
        })
        .await;
    println!("a: {}", ready_message(&a));
    assert_eq!(env.data("shared", "value").await.as_deref(), Some("from-b"));

    env.delete_ks("a").await;
    let last = env.cm("shared").await.expect("shared deleted by a's prune");
    assert_eq!(last.uid(), before.uid());
    assert_eq!(owner_label(&last).as_deref(), Some("b"));
    env.delete_ks("b").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argo_and_foreign_appliers_are_refused() {
    let files = [
        ("deploy/argo.yaml", cm("argo-owned", &[("key", "git")])),
        ("deploy/tool.yaml", cm("tool-owned", &[("key", "git")])),
        ("deploy/other.yaml", cm("tool-other-key", &[("key", "git")])),
    ];
    let mut env = Env::start("ownargo", "", &files).await;
    let rev = format!("main@sha1:{}", env.repo.head().unwrap());
    let ns = env.ns.clone();

    let argo: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "argo-owned", "namespace": ns, "annotations": {
            "argocd.argoproj.io/tracking-id": format!("guestbook:/ConfigMap:{ns}/argo-owned")}},
        "data": {"key": "argo"}
    }))
    .unwrap();
    env.cms.create(&PostParams::default(), &argo).await.unwrap();
    for (name, key) in [("tool-owned", "key"), ("tool-other-key", "other")] {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns}, "data": {key: "tool"}});
        env.cms
            .patch(name, &PatchParams::apply("other-tool"), &Patch::Apply(&obj))
            .await
            .unwrap();
    }

    let t = Instant::now();
    env.create_ks("app", "./deploy", json!({}), json!({})).await;
    let k = env
        .wait_ks("app", "OwnershipConflict", |k| {
            failed_with(
                k,
                "OwnershipConflict",
                &[
                    &format!("ConfigMap/{ns}/argo-owned is held by Argo CD application guestbook"),
                    &format!("ConfigMap/{ns}/tool-owned is held by field manager(s) other-tool"),
                ],
            )
        })
        .await;
    println!("refused after {:?}: {}", t.elapsed(), ready_message(&k));
    assert!(
        !ready_message(&k).contains("tool-other-key"),
        "no overlap, no conflict: {}",
        ready_message(&k)
    );
    assert_eq!(env.data("argo-owned", "key").await.as_deref(), Some("argo"));
    assert_eq!(env.data("tool-owned", "key").await.as_deref(), Some("tool"));
    let both = env.cm("tool-other-key").await.unwrap().data.unwrap();
    assert_eq!(
        both,
        BTreeMap::from([
            ("key".to_string(), "git".to_string()),
            ("other".to_string(), "tool".to_string())
        ]),
        "the non-overlapping applier's key stays and ours is applied"
    );

    // A takeover annotation on the object in Git.
    env.repo
        .write(
            "deploy/argo.yaml",
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argo-owned\n  annotations:\n    {TAKEOVER}: enabled\ndata:\n  key: \"git\"\n"
            ),
        )
        .unwrap();
    let t = Instant::now();
    let rev2 = env.push("take over argo-owned").await;
    assert_ne!(rev, rev2);
    let res = wait_for(TIMEOUT, "argo-owned taken over", || async {
        Ok((env.data("argo-owned", "key").await.as_deref() == Some("git")).then_some(()))
    })
    .await;
    if let Err(e) = res {
        panic!("{e}\n{}", env.ctl.log_tails(40));
    }
    println!("argo-owned taken over {:?} after the push", t.elapsed());
    let k = env
        .wait_ks("app", "only tool-owned refused", |k| {
            failed_with(k, "OwnershipConflict", &["tool-owned"])
                && !ready_message(k).contains("argo-owned")
                && k.status
                    .as_ref()
                    .and_then(|s| s.last_attempted_revision.as_deref())
                    == Some(rev2.as_str())
        })
        .await;
    println!("after takeover: {}", ready_message(&k));
    assert_eq!(env.data("tool-owned", "key").await.as_deref(), Some("tool"));
    let argo_now = env.cm("argo-owned").await.unwrap();
    assert_eq!(owner_label(&argo_now).as_deref(), Some("app"));
}

/// Two Kustomizations `a` then `b` with one object under `gates`; waits until `b` settles and
/// returns the env and how many times the object was written during the 5 s after that.
async fn both_apply(prefix: &str, gates: &str) -> (Env, usize) {
    let files = [
        ("a/shared.yaml", cm("shared", &[("value", "from-a")])),
        ("b/shared.yaml", cm("shared", &[("value", "from-b")])),
    ];
    let mut env = Env::start(prefix, gates, &files).await;
    let rev = format!("main@sha1:{}", env.repo.head().unwrap());
    env.create_ks("a", "./a", json!({}), json!({})).await;
    env.wait_ks("a", "a Ready", |k| ready_at(k, &rev)).await;
    let t = Instant::now();
    env.create_ks("b", "./b", json!({}), json!({})).await;
    let b = env
        .wait_ks("b", "b Ready or refused", |k| {
            ready_at(k, &rev) || failed_with(k, "OwnershipConflict", &[])
        })
        .await;
    println!(
        "[{gates}] b settled after {:?}: {}",
        t.elapsed(),
        ready_message(&b)
    );
    assert!(ready_at(&b, &rev), "b: {}", ready_message(&b));
    let mut versions = std::collections::BTreeSet::new();
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(5) {
        if let Some(c) = env.cm("shared").await {
            versions.insert(c.resource_version().unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let writes = versions.len().saturating_sub(1);
    for name in ["a", "b"] {
        let k = env.ks.get(name).await.unwrap();
        assert!(
            !failed_with(&k, "OwnershipConflict", &[]),
            "[{gates}] {name}: {}",
            ready_message(&k)
        );
    }
    println!("[{gates}] shared written {writes} times in the 5 s after b settled");
    (env, writes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusal_can_be_turned_off() {
    // Flux's behaviour: no refusal, the later apply wins (until `a`'s next interval).
    let (env, writes) = both_apply(
        "ownoff",
        "RefuseOwnershipConflicts=false,WatchAppliedObjects=false",
    )
    .await;
    let shared = env.cm("shared").await.unwrap();
    assert_eq!(owner_label(&shared).as_deref(), Some("b"));
    assert_eq!(env.data("shared", "value").await.as_deref(), Some("from-b"));
    assert_eq!(writes, 0, "written again within a 1 h interval");
    drop(env);
    // With the applied-object watches (the default) each owner sees the other's write as
    // drift: the count of writes shows whether they fight (printed; see the report).
    let (env, writes) = both_apply("ownoffw", "RefuseOwnershipConflicts=false").await;
    let shared = env.cm("shared").await.unwrap();
    println!(
        "[watch] shared held by {:?} after {writes} writes in 5 s",
        owner_label(&shared)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mass_deletion_guard() {
    let files: Vec<(String, String)> = (1..=4)
        .map(|i| {
            (
                format!("deploy/c{i}.yaml"),
                cm(&format!("c{i}"), &[("value", "one")]),
            )
        })
        .collect();
    let files: Vec<(&str, String)> = files.iter().map(|(p, t)| (p.as_str(), t.clone())).collect();
    let mut env = Env::start("ownprune", "", &files).await;
    let rev1 = format!("main@sha1:{}", env.repo.head().unwrap());
    env.create_ks(
        "app",
        "./deploy",
        json!({}),
        json!({"kustomize.toolkit.fluxcd.io/prune-limit": "50%"}),
    )
    .await;
    env.wait_ks("app", "Ready", |k| ready_at(k, &rev1)).await;
    let mut uids = BTreeMap::new();
    for i in 1..=4 {
        let name = format!("c{i}");
        uids.insert(name.clone(), env.cm(&name).await.unwrap().uid());
    }

    // A revision that removes three of four and changes the fourth.
    for i in 2..=4 {
        env.repo.remove(&format!("deploy/c{i}.yaml")).unwrap();
    }
    env.repo
        .write("deploy/c1.yaml", &cm("c1", &[("value", "two")]))
        .unwrap();
    let t = Instant::now();
    let rev2 = env.push("remove three").await;
    let k = env
        .wait_ks("app", "PruneLimitExceeded", |k| {
            failed_with(
                k,
                "PruneLimitExceeded",
                &["would prune 3 of 4 objects", &rev2],
            )
        })
        .await;
    println!(
        "stopped {:?} after the push: {}",
        t.elapsed(),
        ready_message(&k)
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (name, uid) in &uids {
        let live = env.cm(name).await;
        assert_eq!(
            live.as_ref().and_then(|c| c.uid()),
            *uid,
            "{name} deleted or replaced"
        );
    }
    assert_eq!(
        env.data("c1", "value").await.as_deref(),
        Some("one"),
        "the held revision was applied"
    );

    let t = Instant::now();
    env.request(
        "app",
        json!({"kustomize.toolkit.fluxcd.io/prune-confirm": rev2}),
    )
    .await;
    let rev2c = rev2.clone();
    env.wait_ks("app", "Ready at the confirmed revision", move |k| {
        ready_at(k, &rev2c)
    })
    .await;
    println!("confirmed revision applied after {:?}", t.elapsed());
    for i in 2..=4 {
        assert!(env.cm(&format!("c{i}")).await.is_none(), "c{i} not pruned");
    }
    assert_eq!(env.data("c1", "value").await.as_deref(), Some("two"));
    assert_eq!(env.cm("c1").await.unwrap().uid(), uids["c1"]);
}
