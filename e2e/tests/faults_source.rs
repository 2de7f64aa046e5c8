//! Fault injection on source-controller (issue 14), with real processes on a real control plane
//! (the shared-named `loop` one, where nothing swaps CRDs or restarts the apiserver):
//!
//! 1. SIGKILL while an artifact is written, at varied moments: after each restart the artifact
//!    URL in the status serves bytes whose sha256 is `status.artifact.digest`, and no temporary
//!    file is ever served (the storage server is probed during the writes).
//! 2. Git servers down, hanging, answering garbage, advertising refs forever and serving a
//!    delta bomb, next to a healthy repository on the real git server that gets new commits:
//!    the healthy one keeps getting artifacts (delays printed), each bad one says what is
//!    wrong, source-controller never exits and its peak RSS stays under the pod's 1 GiB.
//! 3. The artifact volume full (an 8 MiB tmpfs, root only): StorageOperationFailed, the previous
//!    artifact still served intact; remounted bigger, it converges.
//! 4. GC during a slow download: kustomize-controller fetches through a slow proxy that also cuts
//!    every third connection, while new commits make source-controller collect old artifacts.
//!
//! `RFLUX_FAULTS=1` runs them all; by default only scenario 2 runs, with the down, hanging and
//! garbage servers (the fast representative). Needs the controller binaries built.
#![allow(clippy::unwrap_used)]

mod faults_source_common;
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use faults_source_common::{
    Proc, SlowProxy, full_suite, get_url, incompressible, loopback, sha256_hex, storage_args,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::{Client, ResourceExt};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::hostile_git::{Behavior, HostileGit};
use rflux_e2e::{ControlPlane, GitServer, TestRepo};
use serde_json::json;
use support::procs::{apply_value, install_crds, ks_ready, wait_for};

const TIMEOUT: Duration = Duration::from_secs(120);
const GIB_KIB: u64 = 1 << 20;

struct Env {
    cp: &'static ControlPlane,
    client: Client,
    git: &'static GitServer,
    ns: String,
    label: String,
    repos: Api<GitRepository>,
}

async fn env(prefix: &str) -> Env {
    let cp = ControlPlane::shared_named("loop").await.unwrap();
    let client = cp.client().await.unwrap();
    install_crds(&client).await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let ns = cp.create_namespace(prefix).await.unwrap();
    let repos = Api::namespaced(client.clone(), &ns);
    Env {
        cp,
        client,
        git,
        ns,
        label: rflux_e2e::unique_name("faults"),
        repos,
    }
}

impl Env {
    async fn apply_gitrepo(&self, name: &str, url: &str, interval: &str, timeout: &str) {
        let obj = json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": name, "namespace": self.ns,
                         "labels": {faults_source_common::WATCH_LABEL: self.label}},
            "spec": {"url": url, "interval": interval, "timeout": timeout,
                     "ref": {"branch": "main"}}
        });
        apply_value(&self.client, &obj, "e2e").await.unwrap();
    }

    fn source(&self, extra: &[String]) -> Proc {
        Proc::new(
            self.cp,
            "source-controller",
            &self.label,
            false,
            "default",
            extra,
        )
    }

    /// Waits until `name` has an artifact at `revision` with Ready=True; returns it.
    async fn wait_artifact(&self, sc: &Proc, name: &str, revision: &str) -> GitRepository {
        let res = wait_for(TIMEOUT, &format!("{name} at {revision}"), || async {
            sc.alive()?;
            let r = self.repos.get(name).await?;
            let ready = condition(&r, "Ready").is_some_and(|c| c.0 == "True");
            let at = r
                .status
                .as_ref()
                .and_then(|s| s.artifact.as_ref())
                .is_some_and(|a| a.revision == revision);
            Ok((ready && at).then_some(r))
        })
        .await;
        match res {
            Ok(r) => r,
            Err(e) => panic!("{e}\n{}", sc.tail(40)),
        }
    }
}

/// `(status, reason, message)` of condition `type_`.
fn condition(r: &GitRepository, type_: &str) -> Option<(String, String, String)> {
    r.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// GETs the artifact URL in the status and checks its sha256 against the status digest.
async fn assert_served_intact(r: &GitRepository) -> usize {
    let a = r.status.as_ref().and_then(|s| s.artifact.as_ref()).unwrap();
    let (code, body) = get_url(&a.url).await.unwrap();
    assert_eq!(code, 200, "GET {}", a.url);
    let want = a.digest.strip_prefix("sha256:").unwrap_or(&a.digest);
    assert_eq!(
        sha256_hex(&body),
        want,
        "{} served {} bytes that do not match the status digest",
        a.url,
        body.len()
    );
    body.len()
}

fn write_bytes(repo: &TestRepo, path: &str, data: &[u8]) {
    let p = repo.path().join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

/// Temporary archive files under `root` (relative paths).
fn temp_files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if e
                .file_name()
                .to_string_lossy()
                .starts_with(".rflux-archive-")
                && let Ok(rel) = p.strip_prefix(root)
            {
                out.push(rel.display().to_string());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_git_servers_leave_the_healthy_repository_polling() {
    let full = std::env::var("RFLUX_FAULTS").is_ok_and(|v| v == "1");
    // (name, behavior, spec.timeout, words one of which the Ready message must hold)
    let mut bad: Vec<(&str, Behavior, &str, &[&str])> = vec![
        ("down", Behavior::Down, "10s", &["connection refused"]),
        ("hang", Behavior::Hang, "10s", &["timed out"]),
        ("garbage", Behavior::Garbage, "10s", &["invalid pkt-line"]),
    ];
    if full {
        bad.push(("endless", Behavior::EndlessRefs, "60s", &["limit"]));
        // A timeout long enough for the client to decode what the bomb resolves to.
        bad.push((
            "bomb",
            Behavior::DeltaBomb {
                steps: 19,
                fanout: 6,
            },
            "120s",
            &["limit"],
        ));
    } else {
        eprintln!("RFLUX_FAULTS unset: the endless-refs and delta-bomb servers are left out");
    }
    let e = env("faults-git").await;
    let storage = tempfile::tempdir().unwrap();
    let addr = loopback();
    let mut sc = e.source(&storage_args(storage.path(), addr, addr));
    sc.start().await.unwrap();
    let pid = sc.pid();

    let repo = e.git.create_repo("healthy").unwrap();
    repo.write("README.md", "healthy\n").unwrap();
    let sha = repo.commit("initial").unwrap();
    repo.push("main").unwrap();
    e.apply_gitrepo("healthy", &e.git.http_url(repo.name()), "2s", "20s")
        .await;
    e.wait_artifact(&sc, "healthy", &format!("main@sha1:{sha}"))
        .await;

    let mut servers = Vec::new();
    for (name, behavior, timeout, _) in &bad {
        let s = HostileGit::start(*behavior).unwrap();
        e.apply_gitrepo(name, &s.url(name), "10s", timeout).await;
        servers.push(s);
    }

    // The healthy repository keeps getting every new commit while the bad ones fail.
    let mut delays = Vec::new();
    for i in 1..=6 {
        repo.write("README.md", &format!("healthy {i}\n")).unwrap();
        let sha = repo.commit(&format!("change {i}")).unwrap();
        let pushed = Instant::now();
        repo.push("main").unwrap();
        let r = e
            .wait_artifact(&sc, "healthy", &format!("main@sha1:{sha}"))
            .await;
        delays.push(pushed.elapsed());
        assert_served_intact(&r).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!("healthy repository: push to artifact delays {delays:?} (interval 2s)");

    for (name, behavior, _, words) in &bad {
        let res = wait_for(TIMEOUT, &format!("{name} Ready=False"), || async {
            sc.alive()?;
            let r = e.repos.get(name).await?;
            Ok(condition(&r, "Ready").filter(|c| {
                let m = c.2.to_lowercase();
                c.0 == "False" && words.iter().any(|w| m.contains(w))
            }))
        })
        .await;
        let (status, reason, message) = match res {
            Ok(c) => c,
            Err(err) => {
                let r = e.repos.get(name).await.unwrap();
                panic!(
                    "{name} ({behavior:?}): {err}\nstatus: {}\n{}",
                    serde_json::to_string_pretty(&r.status).unwrap(),
                    sc.tail(30)
                )
            }
        };
        eprintln!("{name} ({behavior:?}): Ready={status} {reason}: {message}");
    }
    for s in &servers {
        eprintln!(
            "{:?}: {} connections, {} requests, {} bytes sent, pack {} bytes",
            s.behavior(),
            s.stats()
                .connections
                .load(std::sync::atomic::Ordering::Relaxed),
            s.stats()
                .requests
                .load(std::sync::atomic::Ordering::Relaxed),
            s.stats()
                .bytes_sent
                .load(std::sync::atomic::Ordering::Relaxed),
            s.pack_len()
        );
    }
    sc.check_alive().unwrap();
    assert_eq!(sc.pid(), pid);
    assert_eq!(sc.starts, 1);
    let hwm = sc.vm_hwm_kib().unwrap();
    eprintln!(
        "source-controller peak RSS (VmHWM) {} MiB, RSS now {} MiB",
        hwm / 1024,
        sc.rss_kib().unwrap_or(0) / 1024
    );
    assert!(hwm < GIB_KIB, "peak RSS {hwm} KiB is over the pod's 1 GiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_writing_an_artifact_never_serves_a_torn_one() {
    if !full_suite("sigkill_while_writing_an_artifact_never_serves_a_torn_one") {
        return;
    }
    let e = env("faults-kill").await;
    let storage = tempfile::tempdir().unwrap();
    let addr = loopback();
    let mut sc = e.source(&storage_args(storage.path(), addr, addr));
    let repo = e.git.create_repo("big").unwrap();
    for i in 0..32 {
        write_bytes(
            &repo,
            &format!("data/f{i:02}.bin"),
            &incompressible(1 << 20, i + 1),
        );
    }
    let sha = repo.commit("32 MiB of noise").unwrap();
    repo.push("main").unwrap();
    sc.start().await.unwrap();
    e.apply_gitrepo("big", &e.git.http_url(repo.name()), "1s", "60s")
        .await;
    let r = e
        .wait_artifact(&sc, "big", &format!("main@sha1:{sha}"))
        .await;
    let size = assert_served_intact(&r).await;
    eprintln!("first artifact: {size} bytes");

    let delays_ms = [0u64, 10, 40, 100, 200, 400, 800];
    let (mut temps_seen, mut temps_served) = (0, Vec::new());
    for (round, delay) in delays_ms.iter().enumerate() {
        write_bytes(
            &repo,
            &format!("data/f{round:02}.bin"),
            &incompressible(1 << 20, 1000 + round as u64),
        );
        let sha = repo.commit(&format!("round {round}")).unwrap();
        // Temporary files a previous SIGKILL left behind (collected after the retention TTL).
        let old_temps = temp_files(storage.path());
        repo.push("main").unwrap();
        // Wait for the write to start (a new temporary file appears), probe, then SIGKILL.
        let started = Instant::now();
        let mut seen = Vec::new();
        while started.elapsed() < Duration::from_secs(30) {
            seen = temp_files(storage.path());
            seen.retain(|t| !old_temps.contains(t));
            if !seen.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if let Some(t) = seen.first() {
            temps_seen += 1;
            let (code, body) = faults_source_common::http_get_bytes(addr, &format!("/{t}"))
                .await
                .unwrap_or((0, Vec::new()));
            if code == 200 {
                temps_served.push(format!("{t}: {} bytes", body.len()));
            }
            let (code, listing) = faults_source_common::http_get_bytes(
                addr,
                &format!("/{}/", Path::new(t).parent().unwrap().display()),
            )
            .await
            .unwrap_or((0, Vec::new()));
            if code == 200 && String::from_utf8_lossy(&listing).contains(".rflux-archive-") {
                temps_served.push(format!("listing of {t}'s directory names it"));
            }
        }
        tokio::time::sleep(Duration::from_millis(*delay)).await;
        let before = e.repos.get("big").await.unwrap();
        sc.kill9();
        eprintln!(
            "round {round}: SIGKILL {:?} after the push, {delay} ms after a temp file {} appeared; \
             status revision then {:?}",
            started.elapsed(),
            if seen.is_empty() { "never" } else { "had" },
            before
                .status
                .as_ref()
                .and_then(|s| s.artifact.as_ref())
                .map(|a| a.revision.clone())
        );
        // The advertised artifact is intact even with the writer dead (served by the next
        // process: the status only ever names renamed, complete files).
        sc.start().await.unwrap();
        if before
            .status
            .as_ref()
            .and_then(|s| s.artifact.as_ref())
            .is_some()
        {
            assert_served_intact(&before).await;
        }
        let restarted = Instant::now();
        let r = e
            .wait_artifact(&sc, "big", &format!("main@sha1:{sha}"))
            .await;
        assert_served_intact(&r).await;
        eprintln!(
            "round {round}: converged {:?} after the restart; temp files left: {:?}",
            restarted.elapsed(),
            temp_files(storage.path())
        );
        for t in temp_files(storage.path()) {
            let (code, _) = faults_source_common::http_get_bytes(addr, &format!("/{t}"))
                .await
                .unwrap_or((0, Vec::new()));
            if code == 200 {
                temps_served.push(format!("leftover {t}"));
            }
        }
    }
    eprintln!(
        "temp files seen during writes in {temps_seen} of {} rounds",
        delays_ms.len()
    );
    assert!(
        temps_served.is_empty(),
        "the storage server served temporary files: {temps_served:?}"
    );
}

/// The `.tar.gz` files under `root` (file names).
fn artifact_files(root: &Path) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                stack.push(p);
            } else if name.ends_with(".tar.gz") {
                out.insert(name);
            }
        }
    }
    out
}

/// Unmounts on drop.
struct Tmpfs(tempfile::TempDir);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_artifact_volume_fails_clearly_and_recovers() {
    if !full_suite("a_full_artifact_volume_fails_clearly_and_recovers") {
        return;
    }
    let uid = std::process::Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        eprintln!(
            "skipped a_full_artifact_volume_fails_clearly_and_recovers: needs root to mount a tmpfs"
        );
        return;
    }
    let dir = Tmpfs(tempfile::tempdir().unwrap());
    let mount = |opts: &str| {
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(dir.0.path())
            .status()
            .unwrap();
        st.success()
    };
    if !mount("size=8m") {
        eprintln!("skipped: mounting a tmpfs failed (no CAP_SYS_ADMIN?)");
        return;
    }
    let e = env("faults-full").await;
    let addr = loopback();
    let mut sc = e.source(&storage_args(dir.0.path(), addr, addr));
    sc.start().await.unwrap();
    let repo = e.git.create_repo("fill").unwrap();
    write_bytes(&repo, "small.bin", &incompressible(1 << 20, 7));
    let sha = repo.commit("1 MiB").unwrap();
    repo.push("main").unwrap();
    e.apply_gitrepo("fill", &e.git.http_url(repo.name()), "2s", "60s")
        .await;
    let r = e
        .wait_artifact(&sc, "fill", &format!("main@sha1:{sha}"))
        .await;
    assert_served_intact(&r).await;

    write_bytes(&repo, "big.bin", &incompressible(12 << 20, 8));
    let big = repo.commit("12 MiB more").unwrap();
    repo.push("main").unwrap();
    let res = wait_for(TIMEOUT, "Ready=False on a full volume", || async {
        let r = e.repos.get("fill").await?;
        Ok(condition(&r, "Ready")
            .is_some_and(|c| c.0 == "False")
            .then_some(r))
    })
    .await;
    let r = match res {
        Ok(r) => r,
        Err(err) => panic!("{err}\n{}", sc.tail(30)),
    };
    let ready = condition(&r, "Ready").unwrap();
    let storage_failed = condition(&r, "StorageOperationFailed");
    eprintln!("full volume: Ready={ready:?}; StorageOperationFailed={storage_failed:?}");
    assert!(
        storage_failed.as_ref().is_some_and(|c| c.0 == "True"),
        "no StorageOperationFailed=True: {:?}",
        r.status
    );
    assert!(
        ready.2.to_lowercase().contains("no space"),
        "the message does not say the volume is full: {}",
        ready.2
    );
    // The previous artifact is still advertised and intact.
    assert!(
        r.status
            .as_ref()
            .unwrap()
            .artifact
            .as_ref()
            .unwrap()
            .revision
            .ends_with(&sha)
    );
    assert_served_intact(&r).await;
    eprintln!(
        "temp files on the full volume: {:?}",
        temp_files(dir.0.path())
    );

    assert!(mount("remount,size=64m"), "remount failed");
    let started = Instant::now();
    let r = e
        .wait_artifact(&sc, "fill", &format!("main@sha1:{big}"))
        .await;
    let n = assert_served_intact(&r).await;
    eprintln!(
        "after the remount: Ready at the big revision in {:?} ({n} bytes)",
        started.elapsed()
    );
    sc.check_alive().unwrap();
    assert_eq!(sc.starts, 1);
}

fn cm_yaml(value: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  value: \"{value}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_during_a_slow_download_never_applies_a_torn_tarball() {
    if !full_suite("gc_during_a_slow_download_never_applies_a_torn_tarball") {
        return;
    }
    let e = env("faults-gc").await;
    let storage = tempfile::tempdir().unwrap();
    let addr = loopback();
    // 256 KiB/s; every connection is cut after 2.5 MiB (with 1.5 MiB artifacts, about every
    // second download is torn), and on every other connection one byte at 512 KiB is flipped.
    let proxy = SlowProxy::start(addr, 256 * 1024, 5 << 19, 512 << 10).await;
    let mut args = storage_args(storage.path(), addr, proxy.addr);
    args.extend([
        "--artifact-retention-records=1".to_string(),
        "--artifact-retention-ttl=1s".to_string(),
    ]);
    let mut sc = e.source(&args);
    sc.start().await.unwrap();
    let ks_tmp = tempfile::tempdir().unwrap();
    let mut kc = Proc::new(
        e.cp,
        "kustomize-controller",
        &e.label,
        false,
        "default",
        &["--requeue-dependency=2s".to_string()],
    );
    kc.env
        .push(("TMPDIR".into(), ks_tmp.path().display().to_string()));
    kc.start().await.unwrap();

    let repo = e.git.create_repo("gc").unwrap();
    repo.write("deploy/kustomization.yaml", "resources:\n- cm.yaml\n")
        .unwrap();
    let mut revisions: Vec<String> = Vec::new();
    let commit = |k: usize| {
        repo.write("deploy/cm.yaml", &cm_yaml(k)).unwrap();
        // 1.5 MiB of noise: about 6 s through the proxy.
        write_bytes(
            &repo,
            "deploy/noise.bin",
            &incompressible(3 << 19, 100 + k as u64),
        );
        let sha = repo.commit(&format!("value {k}")).unwrap();
        repo.push("main").unwrap();
        format!("main@sha1:{sha}")
    };
    revisions.push(commit(0));
    e.apply_gitrepo("gc", &e.git.http_url(repo.name()), "1s", "60s")
        .await;
    let ks = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "gc", "namespace": e.ns,
                     "labels": {faults_source_common::WATCH_LABEL: e.label}},
        "spec": {"interval": "10m", "retryInterval": "2s", "timeout": "60s", "prune": true,
                 "path": "./deploy", "targetNamespace": e.ns,
                 "sourceRef": {"kind": "GitRepository", "name": "gc"}}
    });
    apply_value(&e.client, &ks, "e2e").await.unwrap();
    let ks_api: Api<Kustomization> = Api::namespaced(e.client.clone(), &e.ns);
    let cms: Api<ConfigMap> = Api::namespaced(e.client.clone(), &e.ns);

    // Watch what gets applied: the ConfigMap's value only moves forward, Ready revisions are
    // committed ones.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (ks_api, cms, stop) = (ks_api.clone(), cms.clone(), stop.clone());
        tokio::spawn(async move {
            let mut values: Vec<usize> = Vec::new();
            let mut ready_revisions: Vec<String> = Vec::new();
            let mut failures: Vec<String> = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                if let Ok(Some(cm)) = cms.get_opt("app").await
                    && let Some(v) = cm.data.and_then(|d| d.get("value").cloned())
                    && let Ok(v) = v.parse::<usize>()
                    && values.last() != Some(&v)
                {
                    values.push(v);
                }
                if let Ok(k) = ks_api.get("gc").await
                    && let Some(c) = support::procs::ks_condition(&k, "Ready")
                    && c.status == "False"
                    && failures.last() != Some(&c.message)
                {
                    failures.push(c.message.clone());
                }
                if let Ok(k) = ks_api.get("gc").await
                    && ks_ready(&k)
                    && let Some(rev) = k.status.and_then(|s| s.last_applied_revision)
                    && ready_revisions.last() != Some(&rev)
                {
                    ready_revisions.push(rev);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            (values, ready_revisions, failures)
        })
    };

    // When each artifact file disappears from the storage (garbage collected).
    let gone_watch = {
        let (root, stop) = (storage.path().to_path_buf(), stop.clone());
        tokio::spawn(async move {
            let mut present: std::collections::BTreeSet<String> = Default::default();
            let mut gone: Vec<(String, Instant)> = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let now: std::collections::BTreeSet<String> = artifact_files(&root);
                for f in present.difference(&now) {
                    gone.push((f.clone(), Instant::now()));
                }
                present = now;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            gone
        })
    };
    for k in 1..=6 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        revisions.push(commit(k));
    }
    let last = revisions.last().unwrap().clone();
    let started = Instant::now();
    let res = wait_for(
        Duration::from_secs(240),
        "Kustomization Ready at the last revision",
        || async {
            sc.alive()?;
            kc.alive()?;
            let k = ks_api.get("gc").await?;
            Ok((ks_ready(&k)
                && k.status
                    .as_ref()
                    .and_then(|s| s.last_applied_revision.as_deref())
                    == Some(last.as_str()))
            .then_some(k))
        },
    )
    .await;
    if let Err(err) = res {
        let k = ks_api.get("gc").await.unwrap();
        panic!(
            "{err}\nstatus: {}\n{}\n{}",
            serde_json::to_string_pretty(&k.status).unwrap(),
            sc.tail(30),
            kc.tail(40)
        );
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (values, ready_revisions, failures) = watcher.await.unwrap();
    eprintln!("Ready=False messages seen while the faults lasted: {failures:#?}");
    let gone = gone_watch.await.unwrap();
    let requests = proxy.requests.lock().unwrap().clone();
    // Downloads whose file was collected while the response was still going through the proxy.
    let collected_mid_download = requests
        .iter()
        .filter(|r| {
            gone.iter().any(|(f, at)| {
                r.path.ends_with(f.as_str()) && *at >= r.start && r.end.is_none_or(|e| *at <= e)
            })
        })
        .count();
    for r in &requests {
        eprintln!(
            "  conn {} GET {} for {:?}",
            r.conn,
            r.path,
            r.end.map(|e| e - r.start)
        );
    }
    eprintln!(
        "{} artifact downloads through the proxy, {} artifacts collected, {collected_mid_download} of them while being downloaded",
        requests.len(),
        gone.len()
    );
    assert!(
        collected_mid_download > 0,
        "no artifact was garbage collected during a download: the scenario did not happen \
         (requests {requests:?}, collected {gone:?})"
    );
    let cm = cms.get("app").await.unwrap();
    eprintln!(
        "converged {:?} after the last push; ConfigMap values seen {values:?}; Ready revisions \
         seen {}; proxy: {} connections, {} cut, {} corrupted",
        started.elapsed(),
        ready_revisions.len(),
        proxy.connections.load(std::sync::atomic::Ordering::SeqCst),
        proxy.cut.load(std::sync::atomic::Ordering::SeqCst),
        proxy.corrupted.load(std::sync::atomic::Ordering::SeqCst)
    );
    assert_eq!(
        cm.data
            .as_ref()
            .and_then(|d| d.get("value"))
            .map(String::as_str),
        Some("6"),
        "{}",
        cm.name_any()
    );
    assert!(
        values.windows(2).all(|w| w[0] < w[1]),
        "the ConfigMap went back to an older value: {values:?}"
    );
    for rev in &ready_revisions {
        assert!(
            revisions.contains(rev),
            "Ready at an unknown revision {rev}"
        );
    }
    // Failures are reported as Events on the Kustomization.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(e.client.clone(), &e.ns);
    let events = events.list(&Default::default()).await.unwrap().items;
    let mismatches: u32 = events
        .iter()
        .filter(|ev| {
            ev.involved_object.kind.as_deref() == Some("Kustomization")
                && ev
                    .message
                    .as_deref()
                    .is_some_and(|m| m.contains("computed digest doesn't match"))
        })
        .map(|ev| ev.count.unwrap_or(1).max(1) as u32)
        .sum();
    for ev in events
        .iter()
        .filter(|ev| ev.type_.as_deref() == Some("Warning"))
    {
        eprintln!(
            "  event {}: {}",
            ev.reason.as_deref().unwrap_or(""),
            ev.message.as_deref().unwrap_or("")
        );
    }
    eprintln!("kustomize-controller refused {mismatches} downloads for a digest mismatch");
    if proxy.corrupted.load(std::sync::atomic::Ordering::SeqCst) > 0 {
        assert!(
            mismatches > 0,
            "a corrupted download was not refused for its digest"
        );
    }
    kc.check_alive().unwrap();
    sc.check_alive().unwrap();
}
