#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `make bench` part: the CPU the source-controller PROCESS spends polling unchanged
//! GitRepositories (scripts/bench-source.sh runs it).
//!
//! On its own control plane (`bench-src`, so no test is disturbed) it creates
//! `RFLUX_BENCH_POLL_OBJECTS` GitRepositories (default 1000) with interval
//! `RFLUX_BENCH_POLL_INTERVAL` (default `1m`) spread over `RFLUX_BENCH_POLL_REPOS` repositories
//! (default 5) on the e2e git server (anonymous HTTP), starts the controller binary
//! (`RFLUX_SOURCE_BIN`, default `target/release/source-controller`) with
//! `--concurrent=RFLUX_BENCH_POLL_CONCURRENT` (default 4), waits until every object is Ready,
//! then samples the process' utime+stime from `/proc/<pid>/stat` and the reconcile count from its
//! `controller_runtime_reconcile_total` over `RFLUX_BENCH_POLL_MINUTES` minutes (default 3).
//! Prints CPU seconds per minute and per reconcile as a markdown table, then the process' peak
//! RSS (`VmHWM`) and RSS (`VmRSS`, split into anon and file-backed) when all are Ready and at the
//! end of the window. `RFLUX_BENCH_POLL_WRAP` runs the controller under a profiler (see below).
//! Leftover GitRepositories of an earlier run lose their finalizers before their namespace is
//! deleted (no controller runs to remove them). Nothing is asserted.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use rflux_common::api::gitrepository::GitRepository;
use rflux_e2e::{ControlPlane, GitServer};
use serde_json::json;

const NAMESPACE: &str = "bench-poll";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn repo_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap().to_path_buf()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32, ticks: f64) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Field 3 of the after-paren list is #3 overall (state); utime is #14, stime #15.
    let utime: f64 = fields[11].parse().unwrap();
    let stime: f64 = fields[12].parse().unwrap();
    (utime + stime) / ticks
}

/// A `/proc/<pid>/status` memory field (`VmRSS`, `VmHWM`, `RssAnon`, ...) in MiB.
fn status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kib| kib.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

async fn reconcile_total(metrics: u16) -> f64 {
    let body = http_get(metrics, "/metrics").await;
    body.lines()
        .filter(|l| {
            l.starts_with("controller_runtime_reconcile_total{")
                && l.contains("controller=\"gitrepository\"")
        })
        .filter_map(|l| l.rsplit(' ').next())
        .filter_map(|v| v.parse::<f64>().ok())
        .sum()
}

/// A plain HTTP/1.0 GET (no client crate needed).
async fn http_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf).into_owned()
}

async fn ensure_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = rflux_common::api::crd::gitrepositories_crd().unwrap();
    let name = crd.metadata.name.clone().unwrap();
    if crds.get_opt(&name).await.unwrap().is_none() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let established = crds
            .get(&name)
            .await
            .unwrap()
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return;
        }
        assert!(Instant::now() < deadline, "CRD not established");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Removes the finalizers of every GitRepository left in the namespace (no controller runs to
/// remove them, and they would hold its deletion forever).
async fn drop_finalizers(client: &Client) {
    let api: Api<GitRepository> = Api::namespaced(client.clone(), NAMESPACE);
    let Ok(list) = api.list(&ListParams::default()).await else {
        return;
    };
    let patch = json!({"metadata": {"finalizers": null}});
    futures::stream::iter(list.items)
        .map(|o| {
            let (api, patch) = (api.clone(), patch.clone());
            async move {
                let name = o.metadata.name.unwrap_or_default();
                let _ = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
}

async fn fresh_namespace(client: &Client) {
    let nss: Api<Namespace> = Api::all(client.clone());
    if nss.get_opt(NAMESPACE).await.unwrap().is_some() {
        drop_finalizers(client).await;
        let _ = nss.delete(NAMESPACE, &DeleteParams::default()).await;
        let deadline = Instant::now() + Duration::from_secs(300);
        while nss.get_opt(NAMESPACE).await.unwrap().is_some() {
            assert!(
                Instant::now() < deadline,
                "namespace {NAMESPACE} not deleted"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
}

fn ready_count(list: &[GitRepository]) -> usize {
    list.iter()
        .filter(|o| {
            o.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count()
}

struct Controller {
    child: Child,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes --bench; anything else (cargo test --all-targets, --list) skips.
    if !std::env::args().any(|a| a == "--bench") {
        println!("skipped: run with `cargo bench -p source-controller --bench poll`");
        return;
    }
    let objects: usize = env_or("RFLUX_BENCH_POLL_OBJECTS", 1000);
    let repos: usize = env_or("RFLUX_BENCH_POLL_REPOS", 5).max(1);
    let interval: String = env_or("RFLUX_BENCH_POLL_INTERVAL", "1m".to_string());
    let minutes: f64 = env_or("RFLUX_BENCH_POLL_MINUTES", 3.0);
    let concurrent: u16 = env_or("RFLUX_BENCH_POLL_CONCURRENT", 4);
    let bin = std::env::var("RFLUX_SOURCE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("target/release/source-controller"));
    if !bin.is_file() {
        println!(
            "skipped: no source-controller binary at {} (set RFLUX_SOURCE_BIN)",
            bin.display()
        );
        return;
    }

    let cp = ControlPlane::shared_named("bench-src").await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    ensure_crd(&client).await;
    fresh_namespace(&client).await;

    let mut urls = Vec::new();
    for i in 0..repos {
        let repo = git.create_repo(&format!("bench-poll-{i}")).unwrap();
        for f in 0..20 {
            repo.write(
                &format!("deploy/cm-{f}.yaml"),
                &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{f}\ndata:\n  repo: \"{i}\"\n"),
            )
            .unwrap();
        }
        repo.commit("manifests").unwrap();
        repo.push("main").unwrap();
        urls.push(git.http_url(repo.name()));
    }

    let api: Api<GitRepository> = Api::namespaced(client.clone(), NAMESPACE);
    let t_create = Instant::now();
    futures::stream::iter(0..objects)
        .map(|i| {
            let api = api.clone();
            let url = urls[i % urls.len()].clone();
            let interval = interval.clone();
            async move {
                let obj: GitRepository = serde_json::from_value(json!({
                    "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                    "metadata": {"name": format!("poll-{i:04}")},
                    "spec": {"url": url, "interval": interval, "ref": {"branch": "main"}},
                }))
                .unwrap();
                api.create(&PostParams::default(), &obj).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let created_in = t_create.elapsed();

    let storage = tempfile::tempdir().unwrap();
    let (metrics, health, storage_port) = (free_port(), free_port(), free_port());
    let log_path = std::env::temp_dir().join("rflux-bench-poll-source-controller.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let t_start = Instant::now();
    // RFLUX_BENCH_POLL_WRAP: a command prefix for profiling, e.g. `heaptrack -o /tmp/sc` or
    // `perf record -e cpu-clock -g -o /tmp/sc.data` (the CPU and RSS then include the wrapper's).
    let wrap: Vec<String> = std::env::var("RFLUX_BENCH_POLL_WRAP")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let mut cmd = match wrap.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(&bin);
            c
        }
        None => Command::new(&bin),
    };
    let child = cmd
        .env("KUBECONFIG", cp.kubeconfig_path())
        .env("RUNTIME_NAMESPACE", NAMESPACE)
        .args([
            format!("--metrics-addr=127.0.0.1:{metrics}"),
            format!("--health-addr=127.0.0.1:{health}"),
            format!("--storage-path={}", storage.path().display()),
            format!("--storage-addr=127.0.0.1:{storage_port}"),
            format!("--storage-adv-addr=127.0.0.1:{storage_port}"),
            "--watch-all-namespaces=true".to_string(),
            format!("--concurrent={concurrent}"),
            "--log-level=error".to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let ctl = Controller { child };
    let pid = ctl.child.id();
    let ticks = clock_ticks();

    let deadline = Instant::now() + Duration::from_secs(900);
    let all_ready_in = loop {
        let list = api.list(&ListParams::default()).await.unwrap().items;
        if ready_count(&list) == objects {
            break t_start.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {objects} Ready after 15 min; log: {}",
            ready_count(&list),
            log_path.display()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let cpu_to_ready = cpu_seconds(pid, ticks);
    let (peak_ready, rss_ready) = (status_mib(pid, "VmHWM"), status_mib(pid, "VmRSS"));

    // The steady state: every object polls its remote once per interval; nothing changes.
    let window = Duration::from_secs_f64(minutes * 60.0);
    let (cpu0, rec0, t0) = (
        cpu_seconds(pid, ticks),
        reconcile_total(metrics).await,
        Instant::now(),
    );
    tokio::time::sleep(window).await;
    let (cpu1, rec1, elapsed) = (
        cpu_seconds(pid, ticks),
        reconcile_total(metrics).await,
        t0.elapsed(),
    );
    let rss = status_mib(pid, "VmRSS");
    let (anon, file) = (status_mib(pid, "RssAnon"), status_mib(pid, "RssFile"));
    let peak = status_mib(pid, "VmHWM");
    let threads = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:").map(|v| v.trim().to_string()))
        .unwrap_or_default();
    let still_ready = ready_count(&api.list(&ListParams::default()).await.unwrap().items);
    drop(ctl);

    let cpu = cpu1 - cpu0;
    let mins = elapsed.as_secs_f64() / 60.0;
    let reconciles = rec1 - rec0;
    let per_rec_ms = if reconciles > 0.0 {
        cpu / reconciles * 1000.0
    } else {
        f64::NAN
    };
    println!(
        "{objects} GitRepositories (interval {interval}, {repos} repositories, --concurrent={concurrent}), created in {:.1} s",
        created_in.as_secs_f64()
    );
    println!();
    println!(
        "| objects | interval | all Ready after | CPU to Ready | window | reconciles | reconciles/s | CPU s/min | CPU ms/reconcile | CPU % of one core | RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {objects} | {interval} | {:.1} s | {:.1} s | {:.1} min | {reconciles:.0} | {:.1} | {:.2} | {:.2} | {:.1} % | {:.0} MiB |",
        all_ready_in.as_secs_f64(),
        cpu_to_ready,
        mins,
        reconciles / elapsed.as_secs_f64(),
        cpu / mins,
        per_rec_ms,
        cpu / elapsed.as_secs_f64() * 100.0,
        rss,
    );
    println!();
    println!(
        "| RSS peak at all Ready | RSS at all Ready | RSS peak at end | RSS at end (anon + file) | threads |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| {peak_ready:.1} MiB | {rss_ready:.1} MiB | {peak:.1} MiB | {rss:.1} MiB ({anon:.1} + {file:.1}) | {threads} |"
    );
    if still_ready != objects {
        println!("note: {still_ready} of {objects} were Ready at the end of the window");
    }

    drop_finalizers(&client).await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let _ = nss.delete(NAMESPACE, &DeleteParams::default()).await;
}
