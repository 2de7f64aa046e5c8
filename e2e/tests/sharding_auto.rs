//! Automatic sharding (issue 20 §4, docs/sharding.md): replicas of kustomize-controller with
//! `--auto-sharding` split the Kustomizations by a stable hash, each share held through slot
//! Leases. On one control plane, with the replicas as real processes:
//! - 3 replicas reconcile N Kustomizations (each applies one ConfigMap from one GitRepository)
//!   until all are Ready, and each replica holds slots;
//! - a 4th replica joins while every Kustomization is asked to reconcile: the slot leases end up
//!   exactly at the rendezvous assignment over the alive members (the newcomer holds about 1/4
//!   of them, and only slots that move to it change hands) and it reconciles their objects;
//! - one replica is SIGKILLed: reconcile requests on the Kustomizations of its slots are handled
//!   by the others once its leases expire (the takeover time is printed);
//! - the per-shard metrics are served;
//! - from the replicas' logs (a start and an end line per reconcile, microsecond timestamps), no
//!   Kustomization was ever reconciled by two replicas at once.
//!
//! N is `RFLUX_SHARDING_KS` (default 300: about 35 s for the whole test in a debug build on two
//! cores). Each phase prints a `MEASURE` line (time to Ready, join, takeover after SIGKILL).
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use rflux_common::api::kustomization::Kustomization;
use rflux_common::runtime::sharding::plan::{assign, slot_from_lease_name};
use rflux_common::runtime::sharding::slot_of;
use rflux_e2e::{ControlPlane, GitServer};
use serde_json::{Value, json};
use support::procs::{
    ControllerOptions, Controllers, WATCH_LABEL, apply_value, http_get, http_status, install_crds,
    ks_ready, wait_for,
};

const CONTROLLER: &str = "kustomize-controller";
const SHARDS: u32 = 32;
const LEASE: Duration = Duration::from_secs(10);
const SHARD_FLAGS: [&str; 5] = [
    "--auto-sharding",
    "--shards=32",
    "--leader-election-lease-duration=10s",
    "--leader-election-renew-deadline=8s",
    "--leader-election-retry-period=2s",
];

/// A kustomize-controller replica started by this test (killed when dropped).
struct Replica {
    name: String,
    child: Child,
    log: PathBuf,
    metrics: SocketAddr,
    /// When it was stopped (µs since the epoch).
    exited_at_us: Option<i64>,
    _tmp: tempfile::TempDir,
}

impl Drop for Replica {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], rflux_e2e::free_port().unwrap()))
}

async fn start_replica(
    cp: &ControlPlane,
    ctl: &Controllers,
    label: &str,
    ns: &str,
    i: usize,
) -> Replica {
    let (metrics, health) = (loopback(), loopback());
    let name = format!("replica-{i}");
    let log = cp
        .state_dir()
        .join("logs")
        .join(format!("sharding-{ns}-{name}.log"));
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let out = std::fs::File::create(&log).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut args = vec![
        format!("--metrics-addr={metrics}"),
        format!("--health-addr={health}"),
        "--watch-all-namespaces=true".to_string(),
        "--requeue-dependency=2s".to_string(),
        "--log-level=info".to_string(),
        format!("--watch-label-selector={WATCH_LABEL}={label}"),
    ];
    args.extend(SHARD_FLAGS.iter().map(ToString::to_string));
    let child = Command::new(&ctl.kustomize.program)
        .args(&args)
        .env("KUBECONFIG", cp.kubeconfig_path())
        .env("RUNTIME_NAMESPACE", ns)
        .env("TMPDIR", tmp.path())
        .env("HOSTNAME", &name)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let mut r = Replica {
        name,
        child,
        log,
        metrics,
        exited_at_us: None,
        _tmp: tmp,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(http_status(health, "/readyz").await, Some(200)) {
        assert!(
            r.child.try_wait().unwrap().is_none(),
            "{} exited:\n{}",
            r.name,
            rflux_e2e::process::log_tail(&r.log, 30)
        );
        assert!(Instant::now() < deadline, "{} not ready", r.name);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "{} started: pid {}, log {}",
        r.name,
        r.child.id(),
        r.log.display()
    );
    r
}

/// The identity a replica logged when it joined.
async fn identity(log: &Path) -> String {
    wait_for(
        Duration::from_secs(30),
        "the replica's identity in its log",
        || async {
            Ok(log_lines(log)
                .into_iter()
                .find(|l| l["msg"] == "automatic sharding: joining")
                .and_then(|l| l["identity"].as_str().map(str::to_string)))
        },
    )
    .await
    .unwrap()
}

fn log_lines(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Holder of each slot lease (slots without a lease or holder are absent).
async fn holders(leases: &Api<Lease>) -> BTreeMap<u32, String> {
    let lp = ListParams::default().labels(&format!("rflux.dev/shard-slot={CONTROLLER}"));
    leases
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|l| {
            let slot = slot_from_lease_name(CONTROLLER, l.metadata.name.as_deref()?)?;
            let holder = l.spec?.holder_identity.filter(|h| !h.is_empty())?;
            Some((slot, holder))
        })
        .collect()
}

/// Waits until every slot lease is held by its rendezvous owner among `members`.
async fn wait_balanced(
    leases: &Api<Lease>,
    members: &[String],
    timeout: Duration,
) -> BTreeMap<u32, String> {
    let desired = assign(members, SHARDS);
    let res = wait_for(
        timeout,
        "slot leases held as the rendezvous assignment says",
        || async {
            let h = holders(leases).await;
            let ok = (0..SHARDS).all(|s| h.get(&s) == desired[s as usize].as_ref());
            Ok(ok.then_some(h))
        },
    )
    .await;
    match res {
        Ok(h) => h,
        Err(e) => panic!(
            "{e}\nholders: {:?}\ndesired: {desired:?}",
            holders(leases).await
        ),
    }
}

fn count_by_holder(h: &BTreeMap<u32, String>) -> BTreeMap<&str, usize> {
    let mut out = BTreeMap::new();
    for v in h.values() {
        *out.entry(v.as_str()).or_default() += 1;
    }
    out
}

async fn request(api: &Api<Kustomization>, names: &[String], at: &str) {
    for n in names {
        api.patch(
            n,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": at}}}),
            ),
        )
        .await
        .unwrap();
    }
}

async fn wait_handled(api: &Api<Kustomization>, names: &[String], at: &str, timeout: Duration) {
    let names: BTreeSet<&String> = names.iter().collect();
    wait_for(
        timeout,
        &format!("{} requests {at} handled", names.len()),
        || async {
            let list = api.list(&ListParams::default()).await?;
            let pending = list
                .items
                .iter()
                .filter(|k| names.contains(&k.metadata.name.clone().unwrap_or_default()))
                .filter(|k| {
                    k.status
                        .as_ref()
                        .and_then(|s| s.last_handled_reconcile_at.as_deref())
                        != Some(at)
                })
                .count();
            Ok((pending == 0).then_some(()))
        },
    )
    .await
    .unwrap();
}

/// One reconcile of one object by one replica: [start, end] in µs since the epoch.
#[derive(Debug)]
struct Interval {
    replica: String,
    start: i64,
    end: i64,
}

/// Every reconcile in the replicas' logs, per object. A reconcile without an end line ends when
/// its process exited (`(name, log, exit time)`).
fn intervals(replicas: &[(&str, &Path, i64)]) -> BTreeMap<String, Vec<Interval>> {
    let mut out: BTreeMap<String, Vec<Interval>> = BTreeMap::new();
    for (name, log, exited) in replicas {
        let mut open: BTreeMap<String, (String, i64)> = BTreeMap::new();
        for l in log_lines(log) {
            let id = l["reconcileID"].as_str().unwrap_or_default().to_string();
            let obj = format!(
                "{}/{}",
                l["namespace"].as_str().unwrap_or(""),
                l["name"].as_str().unwrap_or("")
            );
            match l["msg"].as_str() {
                Some("shard reconcile started") => {
                    open.insert(id, (obj, l["start_us"].as_i64().unwrap()));
                }
                Some("shard reconcile finished") => {
                    open.remove(&id);
                    out.entry(obj).or_default().push(Interval {
                        replica: name.to_string(),
                        start: l["start_us"].as_i64().unwrap(),
                        end: l["end_us"].as_i64().unwrap(),
                    });
                }
                _ => {}
            }
        }
        for (_, (obj, start)) in open {
            let end = *exited;
            out.entry(obj).or_default().push(Interval {
                replica: name.to_string(),
                start,
                end,
            });
        }
    }
    out
}

fn now_us() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(d.as_micros()).unwrap()
}

async fn sharded_fleet(count: usize) {
    let cp = ControlPlane::shared().await.unwrap();
    let client: Client = cp.client().await.unwrap();
    install_crds(&client).await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let ns = cp.create_namespace("shauto").await.unwrap();
    let label = rflux_e2e::unique_name("sh");
    let repo = git.create_repo("shauto").unwrap();
    repo.write(
        "app/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  a: b\n",
    )
    .unwrap();
    repo.commit("one ConfigMap").unwrap();
    repo.push("main").unwrap();
    let labels = json!({ WATCH_LABEL: label });
    let gr = json!({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "repo", "namespace": ns, "labels": labels},
        "spec": {"url": git.http_url(repo.name()), "interval": "1h", "ref": {"branch": "main"}}});
    apply_value(&client, &gr, "e2e").await.unwrap();

    // Replica 0 comes with the source-controller; the leases live in the test's namespace.
    let mut opts = ControllerOptions {
        label: Some(label.clone()),
        runtime_namespace: ns.clone(),
        ..ControllerOptions::default()
    };
    opts.kustomize_args = SHARD_FLAGS.iter().map(ToString::to_string).collect();
    let mut ctl = Controllers::start(cp, opts).await.unwrap();
    let mut replicas = Vec::new();
    for i in 1..3 {
        replicas.push(start_replica(cp, &ctl, &label, &ns, i).await);
    }
    let mut ids = vec![identity(&ctl.kustomize.log).await];
    for r in &replicas {
        ids.push(identity(&r.log).await);
    }
    eprintln!("identities: {ids:?}");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), &ns);

    let started = Instant::now();
    let names: Vec<String> = (0..count).map(|i| format!("ks-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let ks = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"interval": "30m", "prune": false, "path": "./app", "targetNamespace": ns,
                     "namePrefix": format!("k{i}-"),
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}}});
        apply_value(&client, &ks, "e2e").await.unwrap();
    }
    let timeout = Duration::from_secs(120 + 2 * count as u64);
    wait_for(
        timeout,
        &format!("{count} Kustomizations Ready"),
        || async {
            let list = ks_api.list(&ListParams::default()).await?;
            let ready = list.items.iter().filter(|k| ks_ready(k)).count();
            Ok((ready == count).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tails(30)));
    eprintln!(
        "MEASURE {count} Kustomizations Ready with 3 replicas in {:.1}s (from the first create)",
        started.elapsed().as_secs_f64()
    );
    let before = wait_balanced(&leases, &sorted(&ids), Duration::from_secs(60)).await;
    let shares = count_by_holder(&before);
    eprintln!("slots per replica: {shares:?}");
    assert_eq!(shares.len(), 3, "every replica holds slots: {shares:?}");

    // Metrics of replica 1.
    let (code, body) = http_get(replicas[0].metrics, "/metrics").await.unwrap();
    assert_eq!(code, 200);
    let owned = body
        .lines()
        .filter(|l| l.starts_with("rflux_shard_owned{") && l.ends_with(" 1"))
        .count();
    eprintln!("replica-1 metrics: rflux_shard_owned=1 on {owned} shards");
    assert_eq!(
        owned,
        shares[ids[1].as_str()],
        "rflux_shard_owned of replica-1"
    );
    assert!(
        body.contains(&format!(
            "rflux_shard_members{{controller=\"{CONTROLLER}\"}} 3"
        )),
        "{}",
        body.lines()
            .filter(|l| l.contains("rflux_shard"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let reconciled: u64 = body
        .lines()
        .filter(|l| l.starts_with("rflux_shard_reconcile_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(reconciled > 0, "replica-1 counted no reconcile");

    // A 4th member joins (as replica 3) and takes its share; every object is asked to
    // reconcile while the slots move.
    let joined = Instant::now();
    replicas.push(start_replica(cp, &ctl, &label, &ns, 3).await);
    request(&ks_api, &names, "during-join").await;
    let new_id = identity(&replicas[2].log).await;
    let mut members = ids.clone();
    members.push(new_id.clone());
    let after = wait_balanced(&leases, &sorted(&members), LEASE * 6).await;
    let shares_after = count_by_holder(&after);
    let theirs = shares_after.get(new_id.as_str()).copied().unwrap_or(0);
    eprintln!(
        "MEASURE join: the 4th replica holds {theirs} of {SHARDS} slots {:.1}s after it started; shares {shares_after:?}",
        joined.elapsed().as_secs_f64(),
    );
    assert!(theirs > 0, "the new replica took no slot");
    for s in 0..SHARDS {
        if before.get(&s) != after.get(&s) {
            assert_eq!(
                after.get(&s),
                Some(&new_id),
                "slot {s} moved between old replicas"
            );
        }
    }
    wait_handled(&ks_api, &names, "during-join", Duration::from_secs(90)).await;
    let its: Vec<String> = names
        .iter()
        .filter(|n| after.get(&slot_of(&ns, n, SHARDS)) == Some(&new_id))
        .cloned()
        .collect();
    request(&ks_api, &its, "after-join").await;
    wait_handled(&ks_api, &its, "after-join", Duration::from_secs(60)).await;
    let by_new: BTreeSet<String> = log_lines(&replicas[2].log)
        .into_iter()
        .filter(|l| l["msg"] == "shard reconcile finished")
        .filter_map(|l| l["name"].as_str().map(str::to_string))
        .collect();
    let missing: Vec<&String> = its.iter().filter(|n| !by_new.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "not reconciled by the new replica: {missing:?}"
    );

    // SIGKILL replica 2: the others take its slots over.
    let victim_id = ids[2].clone();
    let orphans: Vec<String> = names
        .iter()
        .filter(|n| after.get(&slot_of(&ns, n, SHARDS)) == Some(&victim_id))
        .cloned()
        .collect();
    assert!(!orphans.is_empty());
    let victim = &mut replicas[1];
    victim.child.kill().unwrap();
    victim.child.wait().unwrap();
    victim.exited_at_us = Some(now_us());
    let killed = Instant::now();
    request(&ks_api, &orphans, "after-kill").await;
    wait_handled(&ks_api, &orphans, "after-kill", LEASE * 6).await;
    eprintln!(
        "MEASURE takeover: {} Kustomizations of the killed replica's {} slots handled {:.1}s after SIGKILL (lease duration {:?}, retry period 2s)",
        orphans.len(),
        shares_after[victim_id.as_str()],
        killed.elapsed().as_secs_f64(),
        LEASE
    );
    let alive = sorted(&[ids[0].clone(), ids[1].clone(), new_id.clone()]);
    let last = wait_balanced(&leases, &alive, LEASE * 4).await;
    eprintln!(
        "slots per replica after the kill: {:?}",
        count_by_holder(&last)
    );

    // Stop everything, then check the logs: no object in two replicas' reconciles at once.
    // A reconcile with no end line ended at the latest when its process exited.
    ctl.stop();
    let ctl_exited = now_us();
    for r in &mut replicas {
        if r.child.try_wait().unwrap().is_none() {
            let _ = Command::new("kill")
                .args(["-s", "TERM", &r.child.id().to_string()])
                .status();
            let _ = r.child.wait();
            r.exited_at_us = Some(now_us());
        }
    }
    let mut logs: Vec<(&str, &Path, i64)> =
        vec![("replica-0", ctl.kustomize.log.as_path(), ctl_exited)];
    for r in &replicas {
        logs.push((r.name.as_str(), r.log.as_path(), r.exited_at_us.unwrap()));
    }
    let all = intervals(&logs);
    let mut total = 0;
    let mut moved = 0;
    for (obj, iv) in &all {
        total += iv.len();
        let owners: BTreeSet<&str> = iv.iter().map(|i| i.replica.as_str()).collect();
        if owners.len() > 1 {
            moved += 1;
        }
        for (i, a) in iv.iter().enumerate() {
            for b in &iv[i + 1..] {
                if a.replica != b.replica {
                    assert!(
                        a.end <= b.start || b.end <= a.start,
                        "{obj} reconciled by {} [{}, {}] and {} [{}, {}] at once",
                        a.replica,
                        a.start,
                        a.end,
                        b.replica,
                        b.start,
                        b.end
                    );
                }
            }
        }
    }
    eprintln!(
        "MEASURE {total} reconciles of {} objects checked, {moved} objects reconciled by more than one replica over the run, none concurrently",
        all.len()
    );
    assert!(
        moved > 0,
        "no object changed replica: the check saw no handover"
    );
}

fn sorted(ids: &[String]) -> Vec<String> {
    let mut v = ids.to_vec();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_replicas_split_take_over_and_rebalance() {
    let n = std::env::var("RFLUX_SHARDING_KS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    sharded_fleet(n).await;
}
