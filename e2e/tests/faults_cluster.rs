//! Fault injection on the real control plane (issue 14, part 3): kube-apiserver and etcd
//! restarts, and leader failover of two replicas of each controller under 200 Kustomizations,
//! with a SIGSTOPped leader that wakes after losing its lease. Each scenario runs on a control
//! plane of its own (`faults-apiserver`, `faults-etcd`, `faults-failover`), started and stopped by
//! the test; the scenarios of this binary run one at a time.
//!
//! Invariants checked after each fault clears: no ConfigMap still in Git was deleted or
//! recreated (uids unchanged); what a commit made during the fault removed from Git is pruned
//! (`prune: true`); every Kustomization is Ready at its repository's latest revision. While the
//! API is down nothing can write a condition, so the controllers' logs must say why they fail,
//! and both processes must stay up.
//!
//! The failover runs two replicas of each controller with leader election (6 s leases), each
//! with its own client certificate, on a control plane whose audit log records every write. Round
//! 1 SIGSTOPs the kustomize-controller leader while it applies a commit, round 2 the idle
//! source-controller leader; once the standby holds the Lease a commit is pushed and the old
//! leader gets SIGCONT. The audit log must show no accepted write of the old leader's identity after the
//! new leader's first write (a table of writes per identity and phase is printed).
//!
//! `apiserver_restart_keeps_the_invariants` (3 Kustomizations) runs by default; the etcd restart
//! and the failover run with `RFLUX_FAULTS=1`. Times are printed, never asserted.
//! `RFLUX_FAULTS_KEEP_LOGS=1` keeps a copy of each control plane's logs in `/tmp`.
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod faults_cluster_common;
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use faults_cluster_common::audit::{AuditLog, WRITES_POLICY};
use faults_cluster_common::replicas::{Kind, Replica, lease_holder};
use faults_cluster_common::{
    Fleet, LogMark, OwnPlane, cm_name, enabled, serial, unreachable_lines,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::{Component, ControlPlaneOptions, GitServer};
use serde_json::{Map, json};
use support::procs::{ControllerOptions, Controllers, wait_for};

const CONVERGE: Duration = Duration::from_secs(180);
/// The shortest outage. Every failed reconcile during it doubles that object's retry delay
/// (from `--min-retry-delay` 750 ms), so a longer outage means a longer recovery.
const MIN_OUTAGE: Duration = Duration::from_secs(2);
/// Convergence of the 200 after a failover: long enough to outlast a stalled artifact download
/// (10 attempts, about 215 s), so that the run ends with the audit tables of both rounds.
const CONVERGE_FAILOVER: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_restart_keeps_the_invariants() {
    restart_scenario(Component::ApiServer, "faults-apiserver").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_restart_keeps_the_invariants() {
    if !enabled("etcd_restart_keeps_the_invariants") {
        return;
    }
    restart_scenario(Component::Etcd, "faults-etcd").await;
}

/// Both controllers reconcile 3 Kustomizations (one with an extra ConfigMap); `component` is
/// stopped, a commit changing every value and removing the extra lands while it is down, then
/// it is started again.
async fn restart_scenario(component: Component, plane_name: &str) {
    let _serial = serial().await;
    let started = Instant::now();
    let mut plane = OwnPlane::start(plane_name, ControlPlaneOptions::default()).await;
    let client = plane.cp.client().await.unwrap();
    let git = &git_server().await;
    let ns = plane.cp.create_namespace("faults").await.unwrap();
    let mut ctl = Controllers::start(&plane.cp, ControllerOptions::default())
        .await
        .unwrap();
    let mut fleet = Fleet::create(git, &ns, 1, 3, "v1", |i| i == 0);
    fleet.apply(&client, git, &ctl.labels()).await;
    let t = fleet
        .wait_converged(&client, CONVERGE, || ctl.log_tails(30))
        .await;
    println!("3 Kustomizations Ready in {:.1}s", t.as_secs_f64());
    let uids = fleet.cm_uids(&client).await;
    assert_eq!(uids.len(), 4, "3 ConfigMaps and one extra: {uids:?}");
    let ks_before = ks_uids(&client, &ns).await;
    let pids = (ctl.source.child.id(), ctl.kustomize.child.id());

    // The fault: the component goes down; a commit lands meanwhile.
    let marks = [
        LogMark::now(&ctl.source.log),
        LogMark::now(&ctl.kustomize.log),
    ];
    let stopping = Instant::now();
    // Both drain for longer than this on SIGTERM; what is left is SIGKILLed (a crash).
    let killed = plane
        .cp
        .stop_component(component, Duration::from_secs(2))
        .unwrap();
    let down = Instant::now();
    println!(
        "{} stopped in {:.1}s{}",
        component.process_name(),
        stopping.elapsed().as_secs_f64(),
        if killed { " (SIGKILL after 2 s)" } else { "" }
    );
    let removed = fleet.change_all("v2");
    assert_eq!(removed.len(), 1);
    let mut seen = Vec::new();
    while seen.is_empty() || down.elapsed() < MIN_OUTAGE {
        ctl.check_alive()
            .unwrap_or_else(|e| panic!("a controller died while the API was down: {e}"));
        if seen.is_empty() {
            seen = unreachable_lines(&marks);
            if !seen.is_empty() {
                println!(
                    "{:.1}s after the stop the logs say: {}",
                    down.elapsed().as_secs_f64(),
                    seen[0]
                );
            }
        }
        assert!(
            down.elapsed() < Duration::from_secs(90),
            "no log line says the API is unreachable after 90 s\n{}",
            ctl.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let restart = Instant::now();
    plane.cp.start_component(component).await.unwrap();
    println!(
        "{} down {:.1}s; back and ready {:.1}s after the start; {} error lines during the outage",
        component.process_name(),
        down.elapsed().as_secs_f64(),
        restart.elapsed().as_secs_f64(),
        unreachable_lines(&marks).len()
    );

    // Afterwards: converged at the new commit, nothing recreated, the removed object pruned.
    let back = Instant::now();
    let t = fleet
        .wait_converged(&client, CONVERGE, || ctl.log_tails(40))
        .await;
    println!(
        "all Ready at the commit pushed during the outage {:.1}s after the {} was back",
        t.as_secs_f64(),
        component.process_name()
    );
    fleet
        .assert_invariants(&client, &uids, &removed, "v2")
        .await;
    assert_eq!(
        ks_uids(&client, &ns).await,
        ks_before,
        "Kustomizations recreated"
    );
    ctl.check_alive().unwrap();
    assert_eq!(
        (ctl.source.child.id(), ctl.kustomize.child.id()),
        pids,
        "same processes"
    );

    // Self-heal still works: a managed field edited by someone else is reverted.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let name = cm_name(&fleet.members[1]);
    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    let edited = Instant::now();
    cms.patch(
        &name,
        &edit,
        &Patch::Merge(json!({"data": {"value": "edited"}})),
    )
    .await
    .unwrap();
    let res = wait_for(Duration::from_secs(90), "edited value reverted", || async {
        let v = cms
            .get(&name)
            .await?
            .data
            .and_then(|d| d.get("value").cloned());
        Ok((v.as_deref() == Some("v2")).then(|| edited.elapsed()))
    })
    .await;
    let healed = res.unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(40)));
    println!(
        "after the {} restart: an edited managed field reverted in {:.2}s (converged {:.1}s after restart); scenario {:.1}s",
        component.process_name(),
        healed.as_secs_f64(),
        back.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    ctl.stop();
}

/// The shared git server, restarted when it is not healthy (not the per-process cache of
/// `GitServer::shared`, which would keep a server that died during an earlier test).
async fn git_server() -> GitServer {
    tokio::task::spawn_blocking(GitServer::ensure)
        .await
        .unwrap()
        .unwrap()
}

async fn ks_uids(client: &Client, ns: &str) -> BTreeMap<String, String> {
    let api: Api<Kustomization> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|k| (k.name_any(), k.uid().unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_failover_under_200_kustomizations() {
    if !enabled("leader_failover_under_200_kustomizations") {
        return;
    }
    let _serial = serial().await;
    let opts = ControlPlaneOptions {
        audit_policy: Some(WRITES_POLICY.to_string()),
        ..ControlPlaneOptions::default()
    };
    let plane = OwnPlane::start("faults-failover", opts).await;
    let cp = &plane.cp;
    let client = cp.client().await.unwrap();
    let git = &git_server().await;
    let ns = cp.create_namespace("failover").await.unwrap();
    let mut replicas = Vec::new();
    for (kind, letter) in [
        (Kind::Source, "a"),
        (Kind::Kustomize, "a"),
        (Kind::Source, "b"),
        (Kind::Kustomize, "b"),
    ] {
        replicas.push(Replica::start(cp, kind, letter).await);
    }
    let users: Vec<String> = replicas.iter().map(|r| r.user.clone()).collect();
    let mut audit = AuditLog::new(&cp.audit_log_path().unwrap(), "rflux-");

    // 200 Kustomizations from 4 GitRepositories; 10 of them with an extra ConfigMap.
    let mut fleet = Fleet::create(git, &ns, 4, 50, "v1", |i| i % 20 == 0);
    fleet.apply(&client, git, &Map::new()).await;
    let t = fleet
        .wait_converged(&client, CONVERGE, || tails(&replicas))
        .await;
    println!(
        "measured: 200 Kustomizations created -> all Ready in {:.1}s",
        t.as_secs_f64()
    );
    let uids = fleet.cm_uids(&client).await;
    assert_eq!(uids.len(), 210);
    let ks_before = ks_uids(&client, &ns).await;

    let mut rounds = Vec::new();
    // Round 1 stops the kustomize-controller leader in the middle of applying a commit (it wakes
    // with reconciles in flight); round 2 stops an idle source-controller leader (it wakes with
    // its interval timers due).
    for (kind, value, busy) in [(Kind::Kustomize, "r1", true), (Kind::Source, "r2", false)] {
        let holder = wait_for(Duration::from_secs(60), "a lease holder", || async {
            Ok(lease_holder(&client, kind).await)
        })
        .await
        .unwrap();
        let old = replicas
            .iter()
            .position(|r| r.kind == kind && r.name == holder)
            .unwrap_or_else(|| panic!("holder {holder} is none of the replicas"));
        let new = replicas
            .iter()
            .position(|r| r.kind == kind && r.name != holder)
            .unwrap();
        let (old_user, new_user) = (replicas[old].user.clone(), replicas[new].user.clone());
        let mut removed = Vec::new();
        if busy {
            removed = fleet.change_all(&format!("{value}-busy"));
            let res = wait_for(CONVERGE, "the leader applying the busy commit", || async {
                Ok((fleet.count_converged(&client).await >= 20).then_some(()))
            })
            .await;
            res.unwrap_or_else(|e| panic!("{e}\n{}", tails(&replicas)));
        }
        let done = fleet.count_converged(&client).await;
        println!(
            "round {}: SIGSTOP {} leader {holder} ({done} of 200 at the latest commit)",
            kind.short(),
            kind.binary_name()
        );
        let stop_ts = Timestamp::now();
        replicas[old].signal("STOP");
        let new_name = replicas[new].name.clone();
        wait_for(
            Duration::from_secs(60),
            "the standby holds the lease",
            || async {
                Ok(
                    (lease_holder(&client, kind).await.as_deref() == Some(new_name.as_str()))
                        .then_some(()),
                )
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", tails(&replicas)));
        let first_new = loop {
            audit.refresh();
            if let Some(w) = audit.first_write(&new_user, stop_ts) {
                break w.clone();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let failover = secs_between(stop_ts, first_new.received);
        println!(
            "measured: failover {:.2}s (SIGSTOP -> new leader's first write: {})",
            failover,
            first_new.describe()
        );
        // Work for the new leader, then the old one wakes with its lease long expired.
        removed.extend(fleet.change_all(value));
        let pushed = Instant::now();
        let cont_ts = Timestamp::now();
        replicas[old].signal("CONT");
        let audit_path = cp.audit_log_path().unwrap();
        let late_writes = |since: Timestamp| {
            let mut log = AuditLog::new(&audit_path, &old_user);
            log.refresh();
            // A write the apiserver refused (e.g. 409 on the Lease the old leader tries to
            // renew with its stale resourceVersion) changed nothing: only accepted writes
            // are a split brain.
            let late: Vec<String> = log
                .writes_since(&old_user, since)
                .iter()
                .filter(|w| w.received > since && (200..300).contains(&w.code))
                .map(|w| w.describe())
                .collect();
            late
        };
        let t = fleet
            .wait_converged(&client, CONVERGE_FAILOVER, || {
                format!(
                    "writes of the old leader after the new one's first: {:#?}\n{}",
                    late_writes(first_new.received),
                    tails(&replicas)
                )
            })
            .await;
        println!(
            "measured: push -> all 200 Ready at the new revisions {:.1}s",
            t.as_secs_f64()
        );
        let awake = pushed.elapsed();
        if awake < Duration::from_secs(20) {
            tokio::time::sleep(Duration::from_secs(20) - awake).await;
        }
        let exit = replicas[old].exit_status();
        println!(
            "old leader {} {:.0} s after SIGCONT: {}\n{}",
            replicas[old].name,
            pushed.elapsed().as_secs_f64(),
            exit.map_or("still running".to_string(), |s| format!("exited ({s})")),
            replicas[old].tail(4)
        );
        fleet
            .assert_invariants(&client, &uids, &removed, value)
            .await;
        assert_eq!(
            ks_uids(&client, &ns).await,
            ks_before,
            "Kustomizations recreated"
        );

        audit.refresh();
        let names = [
            "before SIGSTOP",
            "stopped, no new leader write",
            "new leader, old stopped",
            "after SIGCONT of the old",
        ];
        let user_refs: Vec<&str> = users.iter().map(String::as_str).collect();
        println!(
            "writes per identity (objects + leases), round {}:\n{}",
            kind.short(),
            audit.phase_table(&user_refs, &[stop_ts, first_new.received, cont_ts], &names)
        );
        rounds.push((kind, failover, late_writes(first_new.received)));
    }
    let mut failures = Vec::new();
    for (kind, failover, late) in &rounds {
        println!(
            "round {}: failover {failover:.2}s, {} writes of the old leader after the new leader's first",
            kind.short(),
            late.len()
        );
        if !late.is_empty() {
            failures.push(format!(
                "{}: the old leader wrote {} times after the new leader's first write:\n{}",
                kind.binary_name(),
                late.len(),
                late.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
            ));
        }
    }
    assert!(failures.is_empty(), "split brain:\n{}", failures.join("\n"));
}

fn tails(replicas: &[Replica]) -> String {
    replicas
        .iter()
        .map(|r| r.tail(15))
        .collect::<Vec<_>>()
        .join("\n")
}

fn secs_between(a: Timestamp, b: Timestamp) -> f64 {
    (b.as_microsecond() - a.as_microsecond()) as f64 / 1e6
}
