//! Leader election on a real API server: one of two electors leads; when the leader dies
//! without releasing, the other takes over after the lease expires (not before); a released
//! lease is taken over quickly; never two leaders at once (sampled).
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use rflux_common::runtime::CancellationToken;
use rflux_common::runtime::leader::{LeaderElectionConfig, LeaderElector, is_leading};
use rflux_e2e::ControlPlane;
use tokio::sync::watch;

struct Candidate {
    id: String,
    rx: watch::Receiver<bool>,
    handle: tokio::task::JoinHandle<Result<(), rflux_common::runtime::LeaderError>>,
    stop: CancellationToken,
}

fn config(ns: &str, lease: &str, id: &str, lease_secs: u64, release: bool) -> LeaderElectionConfig {
    LeaderElectionConfig {
        lease_name: lease.to_string(),
        namespace: ns.to_string(),
        identity: id.to_string(),
        lease_duration: Duration::from_secs(lease_secs),
        renew_deadline: Duration::from_secs(lease_secs) - Duration::from_secs(1),
        retry_period: Duration::from_millis(300),
        release_on_cancel: release,
    }
}

fn spawn(client: &kube::Client, cfg: LeaderElectionConfig) -> Candidate {
    let id = cfg.identity.clone();
    let stop = CancellationToken::new();
    let (rx, handle) = LeaderElector::new(client.clone(), cfg, None)
        .unwrap()
        .spawn(stop.clone());
    Candidate {
        id,
        rx,
        handle,
        stop,
    }
}

/// Samples the candidates every 25ms until `done` holds or `timeout`; panics if two lead at once.
async fn sample_until(
    cands: &[&Candidate],
    timeout: Duration,
    done: impl Fn(&[bool]) -> bool,
) -> Vec<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let states: Vec<bool> = cands.iter().map(|c| is_leading(&c.rx)).collect();
        let leaders = states.iter().filter(|s| **s).count();
        assert!(leaders <= 1, "two leaders at once: {states:?}");
        if done(&states) {
            return states;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting; states {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Samples for `duration`, asserting there is never more than one leader; returns how many
/// samples saw each candidate leading.
async fn sample_for(cands: &[&Candidate], duration: Duration) -> Vec<usize> {
    let deadline = Instant::now() + duration;
    let mut counts = vec![0; cands.len()];
    let mut samples = 0;
    while Instant::now() < deadline {
        let states: Vec<bool> = cands.iter().map(|c| is_leading(&c.rx)).collect();
        assert!(
            states.iter().filter(|s| **s).count() <= 1,
            "two leaders at once: {states:?}"
        );
        for (i, s) in states.iter().enumerate() {
            counts[i] += usize::from(*s);
        }
        samples += 1;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    counts.push(samples);
    counts
}

async fn holder(client: &kube::Client, ns: &str, name: &str) -> (Option<String>, i32) {
    let lease = Api::<Lease>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    let spec = lease.spec.unwrap_or_default();
    (spec.holder_identity, spec.lease_transitions.unwrap_or(0))
}

#[tokio::test]
async fn takeover_after_leader_dies_without_release() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("leader-kill").await.unwrap();
    let client = cp.client().await.unwrap();
    let lease_name = "kustomize-controller-leader-election";
    let lease_secs = 4;
    let a = spawn(
        &client,
        config(&ns, lease_name, "pod-a_1", lease_secs, false),
    );
    let b = spawn(
        &client,
        config(&ns, lease_name, "pod-b_2", lease_secs, false),
    );

    let states = sample_until(&[&a, &b], Duration::from_secs(20), |s| s.iter().any(|x| *x)).await;
    let (leader, follower) = if states[0] { (a, b) } else { (b, a) };
    // Leadership is stable while the leader keeps renewing (longer than one lease duration).
    let counts = sample_for(&[&leader, &follower], Duration::from_secs(lease_secs + 2)).await;
    assert_eq!(
        counts[0], counts[2],
        "leader must lead in every sample: {counts:?}"
    );
    assert_eq!(counts[1], 0, "follower must never lead: {counts:?}");
    let (h, transitions_before) = holder(&client, &ns, lease_name).await;
    assert_eq!(h.as_deref(), Some(leader.id.as_str()));

    // Simulate a kill: drop the leader's task without releasing the lease.
    leader.handle.abort();
    let killed_at = Instant::now();
    sample_until(
        &[&leader, &follower],
        Duration::from_secs(lease_secs * 3),
        |s| s[1],
    )
    .await;
    let took = killed_at.elapsed();
    // Not before the lease could have expired (the follower last saw a renewal at most
    // ~2.2 retry periods before the kill), and within the lease duration plus a few retries.
    assert!(
        took >= Duration::from_secs(lease_secs) - Duration::from_millis(1500),
        "took over too early: {took:?}"
    );
    assert!(
        took <= Duration::from_secs(lease_secs) + Duration::from_secs(3),
        "took over too late: {took:?}"
    );
    let (h, transitions_after) = holder(&client, &ns, lease_name).await;
    assert_eq!(h.as_deref(), Some(follower.id.as_str()));
    assert_eq!(transitions_after, transitions_before + 1);

    follower.stop.cancel();
    follower.handle.await.unwrap().unwrap();
}

#[tokio::test]
async fn released_lease_is_taken_over_quickly() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("leader-release").await.unwrap();
    let client = cp.client().await.unwrap();
    let lease_name = "source-controller-leader-election";
    // A long lease: only a release lets the follower in quickly.
    let lease_secs = 30;
    let a = spawn(
        &client,
        config(&ns, lease_name, "pod-a_1", lease_secs, true),
    );
    sample_until(&[&a], Duration::from_secs(20), |s| s[0]).await;
    let b = spawn(
        &client,
        config(&ns, lease_name, "pod-b_2", lease_secs, true),
    );
    let counts = sample_for(&[&a, &b], Duration::from_secs(2)).await;
    assert_eq!(counts[1], 0);

    // Graceful shutdown of the leader releases the lease.
    a.stop.cancel();
    let released_at = Instant::now();
    sample_until(&[&a, &b], Duration::from_secs(10), |s| s[1]).await;
    assert!(
        released_at.elapsed() < Duration::from_secs(5),
        "took {:?}",
        released_at.elapsed()
    );
    a.handle.await.unwrap().unwrap();
    let (h, _) = holder(&client, &ns, lease_name).await;
    assert_eq!(h.as_deref(), Some("pod-b_2"));

    // And b releases on its own shutdown: no holder left.
    b.stop.cancel();
    b.handle.await.unwrap().unwrap();
    let (h, _) = holder(&client, &ns, lease_name).await;
    assert_eq!(h, None);
}

/// The controller binary built by cargo in this workspace, if present.
fn controller_binary(name: &str) -> Option<std::path::PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| rflux_e2e::repo_root().join("target"));
    let path = target.join("debug").join(name);
    path.is_file().then_some(path)
}

fn http_body(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.split(' ').nth(1)?.parse().ok()?;
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    Some((code, body))
}

/// `leader_election_master_status` of a running controller (None while it is unreachable).
fn reports_leading(metrics_port: u16, lease: &str) -> Option<bool> {
    let (_, body) = http_body(metrics_port, "/metrics")?;
    let series = format!("leader_election_master_status{{name=\"{lease}\"}} ");
    Some(
        body.lines()
            .find_map(|l| l.strip_prefix(&series))
            .is_some_and(|v| v.trim() == "1"),
    )
}

struct Proc {
    child: std::process::Child,
    metrics: u16,
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Never leak a controller process when an assertion fails.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_controller(bin: &std::path::Path, kubeconfig: &std::path::Path, ns: &str) -> Proc {
    let metrics = rflux_e2e::free_port().unwrap();
    let health = rflux_e2e::free_port().unwrap();
    let child = std::process::Command::new(bin)
        .args([
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--metrics-addr=127.0.0.1:{metrics}"),
            format!("--health-addr=127.0.0.1:{health}"),
            "--enable-leader-election".to_string(),
            "--leader-election-lease-duration=4s".to_string(),
            "--leader-election-renew-deadline=3s".to_string(),
            "--leader-election-retry-period=500ms".to_string(),
        ])
        .env("RUNTIME_NAMESPACE", ns)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    Proc { child, metrics }
}

#[tokio::test]
async fn two_controller_processes_share_one_lease() {
    let Some(bin) = controller_binary("kustomize-controller") else {
        eprintln!(
            "skipped: target/debug/kustomize-controller not built (cargo build -p kustomize-controller)"
        );
        return;
    };
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("leader-procs").await.unwrap();
    let client = cp.client().await.unwrap();
    let lease = "kustomize-controller-leader-election";
    let mut procs = vec![
        start_controller(&bin, cp.kubeconfig_path(), &ns),
        start_controller(&bin, cp.kubeconfig_path(), &ns),
    ];

    // Exactly one process leads (sampled from both metrics endpoints).
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader_idx = loop {
        let states: Vec<Option<bool>> = procs
            .iter()
            .map(|p| reports_leading(p.metrics, lease))
            .collect();
        let leading: Vec<usize> = (0..states.len())
            .filter(|i| states[*i] == Some(true))
            .collect();
        assert!(leading.len() <= 1, "both processes lead: {states:?}");
        if let [i] = leading[..] {
            break i;
        }
        assert!(Instant::now() < deadline, "no leader: {states:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (h, _) = holder(&client, &ns, lease).await;
    assert!(h.is_some());

    // SIGKILL the leader: no release; the other process takes over after the lease expires.
    let mut dead = procs.remove(leader_idx);
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    let survivor = &mut procs[0];
    let killed_at = Instant::now();
    loop {
        if reports_leading(survivor.metrics, lease) == Some(true) {
            break;
        }
        assert!(
            survivor.child.try_wait().unwrap().is_none(),
            "survivor exited"
        );
        assert!(killed_at.elapsed() < Duration::from_secs(15), "no takeover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        killed_at.elapsed() >= Duration::from_millis(2500),
        "took over too early: {:?}",
        killed_at.elapsed()
    );
    let (h2, _) = holder(&client, &ns, lease).await;
    assert!(
        h2.is_some() && h2 != h,
        "lease holder should change: {h:?} -> {h2:?}"
    );

    // SIGTERM the survivor: it releases the lease and exits 0.
    let status = std::process::Command::new("kill")
        .args(["-TERM", &survivor.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(s) = survivor.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "survivor did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(exit.code(), Some(0));
    let (h3, _) = holder(&client, &ns, lease).await;
    assert_eq!(h3, None, "lease should be released on SIGTERM");
}
