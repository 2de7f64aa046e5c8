//! Fault injection on the real control plane, kustomize-controller side (issue 14). Each
//! scenario runs both controller processes (kustomize-controller behind a fault proxy,
//! `rflux_e2e::fault_proxy`) against the real git server, injects a fault, lets it clear, and
//! checks the invariants (`faults_apply_common`): no object still in Git was deleted or
//! recreated (uids unchanged); nothing removed from Git survives with `prune: true`; the
//! Kustomization converges to Ready at the latest revision with the right inventory; while the
//! fault lasts, the condition says what is wrong.
//!
//! 1. SIGKILL between apply and status write (runs always, the default suite's representative);
//! 2. SIGKILL after k of n prune deletes;
//! 3. an error storm: ~30% of requests answered 409/422/500 or reset, while commits land;
//! 4. watches ended with a 410 Expired while a managed field is edited: the edit is reverted;
//! 5. the Kustomization deleted mid-reconcile, with `prune: true` and `prune: false`;
//!
//! plus the proxy's own test (runs always, about a second) and 3b, a transient 409 with
//! `spec.force: true` (runs always: the object is not recreated).
//!
//! 2–5 run with `RFLUX_FAULTS=1`. Times are printed, not asserted. The scenarios serialize on
//! the CRD lock they hold. Needs the controller binaries built:
//! `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod faults_apply_common;
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use faults_apply_common::{Env, KS, Uids, cm, faults_enabled, status_json};
use rflux_e2e::fault_proxy::{Action, INJECTED, Rule, WatchEnd};

/// 1. The apply of a new revision succeeds, the status write after it is held, and
/// kustomize-controller is SIGKILLed there: the status still says the old revision, the
/// objects already have the new values. After a restart: Ready at the new revision, same uids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_apply_and_status_write() {
    let names = ["cm-a", "cm-b", "cm-c"];
    let files: Vec<(&str, String)> = names.iter().map(|n| (*n, cm(n, "v1"))).collect();
    let mut env = Env::start("fault-status", 1, &files).await;
    env.create_ks(true).await;
    let rev1 = env.revision();
    env.wait_ready_at(&rev1).await;
    let kept = ["cm-a", "cm-b"];
    let uids = Uids::snapshot(&env.cms, &kept).await;

    // v2: two values change, cm-c leaves Git, cm-d joins.
    let apply = env.hold_next_apply();
    let rev2 = env.push(
        &[
            ("cm-a", Some(cm("cm-a", "v2"))),
            ("cm-b", Some(cm("cm-b", "v2"))),
            ("cm-c", None),
            ("cm-d", Some(cm("cm-d", "v2"))),
        ],
        "v2",
    );
    let held_apply = env.held(apply, "the first apply of v2").await;
    // The status write that follows the apply: held once the apply is on its way.
    let status_path = format!(
        "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/{}/kustomizations/{KS}/status",
        env.ns
    );
    let status = env.proxy.add(
        Rule::new(Action::Hold)
            .method(http::Method::PATCH)
            .path(regex::Regex::new(&format!("^{}$", regex::escape(&status_path))).unwrap())
            .times(1),
    );
    held_apply.release();
    let held_status = env.held(status, "the status write after the apply").await;
    let body = held_status.info.body_text();
    assert!(
        body.contains(&rev2),
        "the held status write is the one recording {rev2}: {body}"
    );
    env.ctl.kill_kustomize().unwrap();
    drop(held_status);

    // The fault is in place: applied, but not recorded.
    let now = ["cm-a", "cm-b", "cm-d"];
    env.assert_values(&now.map(|n| (n, "v2"))).await;
    let st = status_json(&env.ks).await;
    assert_eq!(
        st["lastAppliedRevision"].as_str(),
        Some(rev1.as_str()),
        "the status write was held and the controller killed: {st}"
    );

    env.proxy.clear();
    let t = Instant::now();
    env.ctl.restart_kustomize().await.unwrap();
    let (ks, _) = env.wait_ready_at(&rev2).await;
    eprintln!(
        "after SIGKILL between apply and status: Ready at the new revision {:.1}s after the restart",
        t.elapsed().as_secs_f64()
    );
    uids.assert_unchanged(&env.cms).await;
    env.assert_values(&now.map(|n| (n, "v2"))).await;
    env.assert_absent(&["cm-c"]).await;
    env.assert_inventory(&ks, &now);
}

/// 2. A commit removes n=6 ConfigMaps (prune: true); 2 DELETEs pass, the third is held and
/// kustomize-controller SIGKILLed. After a restart: all 6 gone, the kept objects keep their
/// uids, Ready at the new revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_after_k_of_n_prune_deletes() {
    if !faults_enabled("sigkill_after_k_of_n_prune_deletes") {
        return;
    }
    let (n, k) = (6usize, 2u64);
    let doomed: Vec<String> = (0..n).map(|i| format!("prune-{i}")).collect();
    let doomed: Vec<&str> = doomed.iter().map(String::as_str).collect();
    let kept = ["keep-a", "keep-b"];
    let files: Vec<(&str, String)> = doomed
        .iter()
        .chain(kept.iter())
        .map(|n| (*n, cm(n, "v1")))
        .collect();
    let mut env = Env::start("fault-prune", 2, &files).await;
    env.create_ks(true).await;
    let rev1 = env.revision();
    env.wait_ready_at(&rev1).await;
    let uids = Uids::snapshot(&env.cms, &kept).await;

    let path = regex::Regex::new(&format!("^/api/v1/namespaces/{}/configmaps/", env.ns)).unwrap();
    let delete = env.proxy.add(
        Rule::new(Action::Hold)
            .method(http::Method::DELETE)
            .path(path)
            .skip(k)
            .times(1),
    );
    let removals: Vec<(&str, Option<String>)> = doomed.iter().map(|n| (*n, None)).collect();
    let rev2 = env.push(&removals, "remove six");
    let held = env.held(delete, "the third prune DELETE").await;
    env.ctl.kill_kustomize().unwrap();
    drop(held);

    let mut left = Vec::new();
    for name in &doomed {
        if env.cms.get_opt(name).await.unwrap().is_some() {
            left.push(*name);
        }
    }
    eprintln!("killed mid-prune: {} of {n} left: {left:?}", left.len());
    assert_eq!(
        left.len(),
        n - k as usize,
        "k={k} deletes passed before the kill"
    );
    assert_eq!(env.proxy.counts(delete).unwrap().matched, k + 1);

    env.proxy.clear();
    let t = Instant::now();
    env.ctl.restart_kustomize().await.unwrap();
    let (ks, _) = env.wait_ready_at(&rev2).await;
    eprintln!(
        "after SIGKILL mid-prune: Ready at the new revision {:.1}s after the restart",
        t.elapsed().as_secs_f64()
    );
    env.assert_absent(&doomed).await;
    uids.assert_unchanged(&env.cms).await;
    env.assert_inventory(&ks, &kept);
}

/// Whether a Ready=False message names the error that caused it: the injected apiserver
/// status (its text carries [`INJECTED`]), or, for a reset, that the request could not be sent
/// (kube's `client error (SendRequest)`; the cause below it is not in the message).
fn names_the_error(message: &str) -> bool {
    let m = message.to_lowercase();
    m.contains(INJECTED)
        || [
            "sendrequest",
            "connection",
            "error sending request",
            "reset",
            "closed",
            "eof",
        ]
        .iter()
        .any(|w| m.contains(w))
}

/// 3. For ~20 s, ~30% of kustomize-controller's requests (seeded) get a 409, 422 or 500, or a
/// reset, while three commits land. The Ready conditions seen meanwhile are printed; every
/// Ready=False names its error. Then the storm clears: invariants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_storm_then_convergence() {
    if !faults_enabled("error_storm_then_convergence") {
        return;
    }
    let stable = ["storm-a", "storm-b"];
    let files: Vec<(&str, String)> = stable
        .iter()
        .chain(["storm-gone"].iter())
        .map(|n| (*n, cm(n, "v0")))
        .collect();
    let mut env = Env::start("fault-storm", 3, &files).await;
    env.create_ks(true).await;
    let rev0 = env.revision();
    env.wait_ready_at(&rev0).await;
    let uids = Uids::snapshot(&env.cms, &stable).await;

    let storm = env.proxy.add(
        Rule::new(Action::OneOf(vec![
            Action::Respond(409),
            Action::Respond(422),
            Action::Respond(500),
            Action::Reset,
        ]))
        .probability(0.3),
    );
    let started = Instant::now();
    let mut seen: BTreeSet<(String, String, String)> = BTreeSet::new();
    let mut last = env.revision();
    let mut pushes = 0;
    while started.elapsed() < Duration::from_secs(20) {
        let due = 1 + started.elapsed().as_secs() / 6;
        if pushes < due.min(3) {
            pushes += 1;
            let v = format!("v{pushes}");
            let mut changes: Vec<(&str, Option<String>)> =
                stable.iter().map(|n| (*n, Some(cm(n, &v)))).collect();
            if pushes == 2 {
                changes.push(("storm-gone", None));
            }
            last = env.push(&changes, &v);
            eprintln!(
                "{:>5.1}s pushed {v}: {last}",
                started.elapsed().as_secs_f64()
            );
        }
        if let Some(c) = env.ready().await
            && seen.insert(c.clone())
        {
            eprintln!(
                "{:>5.1}s Ready={} {}: {}",
                started.elapsed().as_secs_f64(),
                c.0,
                c.1,
                c.2
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let counts = env.proxy.remove(storm).unwrap();
    eprintln!(
        "storm over: {} of {} matching requests faulted ({} requests in all)",
        counts.fired,
        counts.matched,
        env.proxy.requests()
    );
    assert!(counts.fired > 0, "the storm injected nothing");
    let failures: Vec<_> = seen.iter().filter(|c| c.0 == "False").collect();
    eprintln!("{} distinct Ready=False conditions seen", failures.len());
    for (_, reason, message) in &failures {
        assert!(
            names_the_error(message),
            "Ready=False ({reason}) does not name the error: {message}"
        );
    }

    let (ks, secs) = env.wait_ready_at(&last).await;
    eprintln!("after the storm: Ready at the last revision in {secs:.1}s");
    uids.assert_unchanged(&env.cms).await;
    env.assert_values(&stable.map(|n| (n, "v3"))).await;
    env.assert_absent(&["storm-gone"]).await;
    env.assert_inventory(&ks, &stable);
}

/// 4. The watches of kustomize-controller end with a 410 Expired (and the next watches from a
/// resourceVersion are answered 410 too) while someone edits a managed field: after the resync
/// the edit is reverted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_410_while_a_managed_field_is_edited() {
    if !faults_enabled("forced_410_while_a_managed_field_is_edited") {
        return;
    }
    let names = ["watched"];
    let mut env = Env::start("fault-410", 4, &[("watched", cm("watched", "v1"))]).await;
    env.create_ks(true).await;
    let rev = env.revision();
    env.wait_ready_at(&rev).await;
    let uids = Uids::snapshot(&env.cms, &names).await;
    // Let the tracker's watches open.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let open = env.proxy.open_watches();
    eprintln!("{open} watch streams open through the proxy");
    assert!(open > 0, "kustomize-controller watches through the proxy");

    let expired = env.proxy.add(
        Rule::new(Action::WatchExpired)
            .watch(true)
            .filter(|r| {
                r.query.split('&').any(|kv| {
                    kv.strip_prefix("resourceVersion=")
                        .is_some_and(|v| !v.is_empty() && v != "0")
                })
            })
            .times(4),
    );
    env.proxy.end_watches(WatchEnd::Expired);
    let t = Instant::now();
    env.edit_value("watched", "edited").await;
    let res = support::procs::wait_for(Duration::from_secs(60), "the edit reverted", || async {
        Ok((env.value("watched").await.as_deref() == Some("v1")).then_some(()))
    })
    .await;
    let counts = env.proxy.counts(expired).unwrap();
    if let Err(e) = res {
        panic!(
            "{e}; 410 answers to watches from a resourceVersion: {counts:?}\n{}",
            env.ctl.log_tails(40)
        );
    }
    eprintln!(
        "edit reverted {:.2}s after the watches ended with 410 ({} watches from a resourceVersion answered 410)",
        t.elapsed().as_secs_f64(),
        counts.fired
    );
    env.proxy.clear();
    let (ks, _) = env.wait_ready_at(&rev).await;
    uids.assert_unchanged(&env.cms).await;
    env.assert_inventory(&ks, &names);
}

/// 5. An apply of a managed object is held, the Kustomization deleted meanwhile, the apply
/// released: the finalizer finishes, the Kustomization is gone; with `prune: true` every object
/// it applied is gone (nothing half-applied survives), with `prune: false` they stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_mid_reconcile() {
    if !faults_enabled("deleted_mid_reconcile") {
        return;
    }
    for prune in [true, false] {
        let old = ["del-a", "del-b"];
        let files: Vec<(&str, String)> = old.iter().map(|n| (*n, cm(n, "v1"))).collect();
        let mut env = Env::start("fault-delete", 5, &files).await;
        env.create_ks(prune).await;
        let rev1 = env.revision();
        env.wait_ready_at(&rev1).await;
        let uids = Uids::snapshot(&env.cms, &old).await;

        let apply = env.hold_next_apply();
        env.push(
            &[
                ("del-a", Some(cm("del-a", "v2"))),
                ("del-c", Some(cm("del-c", "v2"))),
            ],
            "v2",
        );
        let held = env.held(apply, "an apply of the new revision").await;
        env.delete_ks().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release();
        let secs = env.wait_ks_gone().await;
        eprintln!("prune: {prune}: the Kustomization was finalized {secs:.1}s after the release");
        if prune {
            // Pruning deletes in the background: wait until the objects are gone.
            let res = support::procs::wait_for(
                Duration::from_secs(30),
                "the applied objects to be deleted",
                || async {
                    let mut left = Vec::new();
                    for n in ["del-a", "del-b", "del-c"] {
                        if env.cms.get_opt(n).await?.is_some() {
                            left.push(n);
                        }
                    }
                    Ok(left.is_empty().then_some(()))
                },
            )
            .await;
            if let Err(e) = res {
                panic!("{e}\n{}", env.ctl.log_tails(40));
            }
            env.assert_absent(&["del-a", "del-b", "del-c"]).await;
        } else {
            uids.assert_unchanged(&env.cms).await;
            let c = env.cms.get_opt("del-c").await.unwrap().is_some();
            eprintln!("prune: false: del-c (added by the interrupted revision) present: {c}");
        }
        env.ctl.check_alive().unwrap();
    }
}

/// The proxy itself, in front of the real apiserver, seen by a kube client: pass-through,
/// injected statuses (`skip`/`times` and the counts), reset, hold then release or answer,
/// watches ended with a 410 and answered with one, and seeded probabilities. Fast; runs always.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fault_proxy_injects_what_its_rules_say() {
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams, WatchEvent, WatchParams};
    use kube::config::{KubeConfigOptions, Kubeconfig};
    use kube::{Client, Config};
    use rflux_e2e::ControlPlane;
    use rflux_e2e::fault_proxy::{FaultProxy, RuleCounts};

    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("fault-proxy").await.unwrap();
    let proxy = FaultProxy::start(cp.server_url(), &cp.ca_pem().unwrap(), 7)
        .await
        .unwrap();
    let kc = Kubeconfig::from_yaml(&cp.token_kubeconfig(Some(&proxy.url())).unwrap()).unwrap();
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(Client::try_from(config).unwrap(), &ns);
    let obj: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe"},
        "data": {"value": "v1"}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &obj).await.unwrap();
    assert!(proxy.requests() >= 1);
    let path = regex::Regex::new(&format!("^/api/v1/namespaces/{ns}/configmaps/probe$")).unwrap();
    let code = |r: kube::Result<ConfigMap>| match r {
        Ok(_) => 200,
        Err(kube::Error::Api(s)) => {
            assert!(s.message.contains(INJECTED), "{s:?}");
            s.code
        }
        Err(e) => panic!("not an API error: {e}"),
    };

    // Statuses: the second and third GETs get a 409, the others pass.
    let r = proxy.add(
        Rule::new(Action::Respond(409))
            .method(http::Method::GET)
            .path(path.clone())
            .skip(1)
            .times(2),
    );
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(code(cms.get("probe").await));
    }
    assert_eq!(got, [200, 409, 409, 200]);
    assert_eq!(
        proxy.remove(r).unwrap(),
        RuleCounts {
            matched: 4,
            fired: 2
        }
    );
    for status in [422, 500, 410] {
        let r = proxy.add(Rule::new(Action::Respond(status)).path(path.clone()));
        assert_eq!(code(cms.get("probe").await), status);
        proxy.remove(r).unwrap();
    }

    // Reset: a transport error, not an API error.
    let r = proxy.add(Rule::new(Action::Reset).path(path.clone()).times(1));
    let err = cms.get("probe").await.unwrap_err();
    assert!(!matches!(err, kube::Error::Api(_)), "{err:?}");
    assert_eq!(
        code(cms.get("probe").await),
        200,
        "times(1): the next passes"
    );
    proxy.remove(r).unwrap();

    // Hold: nothing happens until the test releases the request (or answers it).
    let r = proxy.add(Rule::new(Action::Hold).path(path.clone()).times(2));
    let pending = tokio::spawn({
        let cms = cms.clone();
        async move { cms.get("probe").await.map(|_| ()) }
    });
    let held = proxy.next_held(r, Duration::from_secs(10)).await.unwrap();
    assert_eq!(held.info.method, http::Method::GET);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!pending.is_finished(), "a held request gets no answer");
    held.release();
    pending.await.unwrap().unwrap();
    let pending = tokio::spawn({
        let cms = cms.clone();
        async move { code(cms.get("probe").await) }
    });
    proxy
        .next_held(r, Duration::from_secs(10))
        .await
        .unwrap()
        .respond(500);
    assert_eq!(pending.await.unwrap(), 500);
    proxy.remove(r).unwrap();

    // Watches: ended with a 410 ERROR event; the next one answered with it at once.
    let rv = cms
        .get("probe")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    support::procs::wait_for(Duration::from_secs(10), "the watch to open", || async {
        Ok((proxy.open_watches() == 1).then_some(()))
    })
    .await
    .unwrap();
    proxy.end_watches(WatchEnd::Expired);
    let first = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .unwrap();
    assert!(
        matches!(&first, Ok(Some(WatchEvent::Error(s))) if s.code == 410),
        "{first:?}"
    );
    let r = proxy.add(Rule::new(Action::WatchExpired).watch(true));
    let events: Vec<_> = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .collect()
        .await;
    assert!(
        matches!(events.as_slice(), [Ok(WatchEvent::Error(s))] if s.code == 410),
        "{events:?}"
    );
    proxy.remove(r).unwrap();

    // Probability: seeded, so some but not all of 40 requests.
    let r = proxy.add(
        Rule::new(Action::Respond(500))
            .path(path.clone())
            .probability(0.3),
    );
    for _ in 0..40 {
        let _ = cms.get("probe").await;
    }
    let c = proxy.remove(r).unwrap();
    eprintln!("probability 0.3: {} of {} fired", c.fired, c.matched);
    assert!(c.matched == 40 && c.fired > 0 && c.fired < 40, "{c:?}");
}

/// 3b. With `spec.force: true`, one transient 409 on the dry-run apply of an object still in
/// Git: the object must not be recreated (its uid stays). Flux's `IsImmutableError` counts
/// every 409 and 422 as immutable and would recreate it; `ssa::errors::is_immutable_error`
/// only counts a client error that says a field is immutable, never a Conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_conflict_with_force_does_not_recreate() {
    let names = ["force-a", "force-b"];
    let files: Vec<(&str, String)> = names.iter().map(|n| (*n, cm(n, "v0"))).collect();
    let mut env = Env::start("fault-force", 6, &files).await;
    env.create_ks_with(serde_json::json!({"force": true})).await;
    let rev0 = env.revision();
    env.wait_ready_at(&rev0).await;
    let uids = Uids::snapshot(&env.cms, &names).await;

    let path = regex::Regex::new(&format!("^/api/v1/namespaces/{}/configmaps/", env.ns)).unwrap();
    let conflict = env.proxy.add(
        Rule::new(Action::Respond(409))
            .method(http::Method::PATCH)
            .path(path)
            .filter(|r| r.has_query_key("dryRun"))
            .times(1),
    );
    let changes: Vec<(&str, Option<String>)> =
        names.iter().map(|n| (*n, Some(cm(n, "v1")))).collect();
    let rev1 = env.push(&changes, "v1");
    let (ks, _) = env.wait_ready_at(&rev1).await;
    assert_eq!(env.proxy.counts(conflict).unwrap().fired, 1);
    uids.assert_unchanged(&env.cms).await;
    env.assert_values(&names.map(|n| (n, "v1"))).await;
    env.assert_inventory(&ks, &names);
}
