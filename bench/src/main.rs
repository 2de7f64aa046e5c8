//! `rflux-fleet`: the fleet benchmark of issue 8, ours and Flux's controllers side by side.
//!
//! ```text
//! rflux-fleet run --implementation ours|flux --bin-dir DIR --crds FILE_OR_DIR... --n 100 \
//!     [--variant a|b] [--profile equal] [--concurrent 4] [--sc-args "..."] [--kc-args "..."] \
//!     [--phases api,fleet,idle,change,drift] --out results.jsonl
//! rflux-fleet table results.jsonl            # markdown: figure | ours | Flux | ratio
//! ```
//!
//! A run starts a fresh named control plane (`fleet-<implementation>`), pushes the workload to
//! the e2e git server, starts the two controllers as processes, measures the phases, stops the
//! controllers and the control plane, and appends one JSON line to `--out`.
//! `scripts/bench-fleet.sh` runs ours and Flux one after the other and prints the table.

mod fixtures;
mod report;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::{Parser, Subcommand, ValueEnum};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use rflux_e2e::{ControlPlane, GitServer, TestRepo, free_ports, metrics};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use fixtures::{BIG_NS, FLEET_NS, Variant};
use report::{Pair, RunResult};

const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

#[derive(Parser)]
#[command(
    name = "rflux-fleet",
    about = "Fleet benchmark: rflux vs Flux controllers"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// One run of one implementation on a fresh control plane; appends a JSON line to --out.
    Run(Box<RunArgs>),
    /// Prints the side-by-side tables of the runs in the given results files.
    Table {
        /// JSON-lines files written by `run`.
        files: Vec<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Implementation {
    Ours,
    Flux,
}

impl Implementation {
    fn label(self) -> &'static str {
        match self {
            Implementation::Ours => "ours",
            Implementation::Flux => "flux",
        }
    }

    fn binaries(self) -> (&'static str, &'static str) {
        match self {
            Implementation::Ours => ("source-controller", "kustomize-controller"),
            Implementation::Flux => ("flux-source-controller", "flux-kustomize-controller"),
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
struct RunArgs {
    /// Which controllers to run.
    #[arg(long, value_enum)]
    implementation: Implementation,
    /// Directory with the two controller binaries (ours: source-controller and
    /// kustomize-controller; Flux: flux-source-controller and flux-kustomize-controller).
    #[arg(long)]
    bin_dir: PathBuf,
    /// CRD files or directories to install (`kubectl apply --server-side -f`).
    #[arg(long, required = true, num_args = 1..)]
    crds: Vec<PathBuf>,
    /// Number of Kustomizations.
    #[arg(long, default_value_t = 100)]
    n: usize,
    /// a: one GitRepository per Kustomization; b: one shared GitRepository.
    #[arg(long, value_enum, default_value = "a")]
    variant: Variant,
    /// Label of the controller settings in the table.
    #[arg(long, default_value = "equal")]
    profile: String,
    /// `--concurrent` of both controllers.
    #[arg(long, default_value_t = 4)]
    concurrent: u16,
    /// Extra source-controller flags (space-separated).
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    sc_args: String,
    /// Extra kustomize-controller flags (space-separated).
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    kc_args: String,
    /// Phases to run, in this order: api, fleet, idle, change, drift.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "api,fleet,idle,change,drift"
    )]
    phases: Vec<String>,
    /// Length of the idle CPU window.
    #[arg(long, default_value_t = 120)]
    idle_secs: u64,
    /// Limit of each waiting phase.
    #[arg(long, default_value_t = 1200)]
    timeout_secs: u64,
    /// Kustomization interval set for the drift phase.
    #[arg(long, default_value_t = 20)]
    drift_interval_secs: u64,
    /// Results file (JSON lines, appended).
    #[arg(long)]
    out: PathBuf,
    /// Directory for logs, storage and profiles of the run.
    #[arg(long, default_value = "target/bench/fleet")]
    work_dir: PathBuf,
    /// Control plane instance name (default `fleet-<implementation>`).
    #[arg(long)]
    cp_name: Option<String>,
    /// Leave the control plane and the controllers running at the end.
    #[arg(long)]
    keep: bool,
    /// Record a CPU profile of kustomize-controller during the fleet phase (`perf record`).
    #[arg(long)]
    perf: bool,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run_cli(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rflux-fleet: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run_cli(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Cmd::Table { files } => {
            let mut all = Vec::new();
            for f in files {
                let text = std::fs::read_to_string(&f)
                    .with_context(|| format!("reading {}", f.display()))?;
                all.extend(
                    report::parse_results(&text)
                        .with_context(|| format!("parsing {}", f.display()))?,
                );
            }
            println!("{}", report::table(&all));
            Ok(())
        }
        Cmd::Run(args) => {
            let name = cp_name(&args);
            let result = tokio::select! {
                r = run(&args) => r?,
                _ = shutdown_signal() => {
                    log("interrupted: stopping the controllers and the control plane");
                    kill_registered();
                    if !args.keep {
                        tokio::task::spawn_blocking(move || ControlPlane::stop(&name)).await??;
                    }
                    bail!("interrupted");
                }
            };
            let line = serde_json::to_string(&result)?;
            if let Some(parent) = args.out.parent() {
                std::fs::create_dir_all(parent)?;
            }
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&args.out)
                .with_context(|| format!("opening {}", args.out.display()))?;
            writeln!(f, "{line}")?;
            println!("{}", report::table(std::slice::from_ref(&result)));
            Ok(())
        }
    }
}

/// Pids of the controller (and perf) processes of the current run, killed on SIGINT/SIGTERM.
static PIDS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn register_pid(pid: u32) {
    if let Ok(mut g) = PIDS.lock() {
        g.push(pid);
    }
}

fn kill_registered() {
    let pids = PIDS.lock().map(|g| g.clone()).unwrap_or_default();
    for pid in pids {
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn cp_name(args: &RunArgs) -> String {
    args.cp_name
        .clone()
        .unwrap_or_else(|| format!("fleet-{}", args.implementation.label()))
}

fn log(msg: impl AsRef<str>) {
    eprintln!(
        "[{}] {}",
        jiff::Timestamp::now().strftime("%H:%M:%S"),
        msg.as_ref()
    );
}

// ---------------------------------------------------------------------------------------------
// Kustomization tracker: one watch, a map of status summaries, a version channel.

#[derive(Debug, Clone, Default)]
struct KsState {
    generation: i64,
    observed_generation: i64,
    ready: bool,
    last_applied: String,
    last_handled: String,
    seen: Option<Instant>,
}

#[derive(Clone)]
struct Tracker {
    map: Arc<Mutex<HashMap<String, KsState>>>,
    version: watch::Receiver<u64>,
}

fn ks_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    )
}

fn git_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "GitRepository"),
        "gitrepositories",
    )
}

fn summarize(obj: &DynamicObject) -> KsState {
    let status = obj.data.get("status").cloned().unwrap_or(Value::Null);
    let ready = status["conditions"]
        .as_array()
        .map(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .unwrap_or(false);
    KsState {
        generation: obj.metadata.generation.unwrap_or(0),
        observed_generation: status["observedGeneration"].as_i64().unwrap_or(-1),
        ready,
        last_applied: status["lastAppliedRevision"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        last_handled: status["lastHandledReconcileAt"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        seen: Some(Instant::now()),
    }
}

impl Tracker {
    fn start(client: Client) -> Tracker {
        let map: Arc<Mutex<HashMap<String, KsState>>> = Arc::default();
        let (tx, rx) = watch::channel(0u64);
        let api: Api<DynamicObject> = Api::all_with(client, &ks_resource());
        let m = map.clone();
        tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            loop {
                match stream.try_next().await {
                    Ok(Some(obj)) => {
                        let key =
                            format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
                        if let Ok(mut g) = m.lock() {
                            g.insert(key, summarize(&obj));
                        }
                        tx.send_modify(|v| *v += 1);
                    }
                    Ok(None) => break,
                    Err(e) => log(format!("kustomization watch: {e}")),
                }
            }
        });
        Tracker { map, version: rx }
    }

    /// Waits until `pred` holds for every key; returns, per key, the time (since `t0`) the
    /// status that first satisfied it arrived, and the keys still failing at the timeout.
    async fn wait_all(
        &self,
        keys: &[String],
        t0: Instant,
        timeout: Duration,
        pred: impl Fn(&KsState) -> bool,
    ) -> (Vec<f64>, Vec<String>) {
        let mut rx = self.version.clone();
        let mut done: HashMap<&str, f64> = HashMap::new();
        let deadline = tokio::time::Instant::from_std(t0 + timeout);
        let mut last_report = Instant::now();
        loop {
            rx.borrow_and_update();
            if let Ok(g) = self.map.lock() {
                for k in keys {
                    if done.contains_key(k.as_str()) {
                        continue;
                    }
                    if let Some(s) = g.get(k)
                        && pred(s)
                    {
                        let at = s.seen.unwrap_or_else(Instant::now);
                        done.insert(k, at.saturating_duration_since(t0).as_secs_f64());
                    }
                }
            }
            if done.len() == keys.len() {
                break;
            }
            if last_report.elapsed() > Duration::from_secs(15) {
                log(format!(
                    "  {}/{} done after {:.0}s",
                    done.len(),
                    keys.len(),
                    t0.elapsed().as_secs_f64()
                ));
                last_report = Instant::now();
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => break,
            }
        }
        let missing = keys
            .iter()
            .filter(|k| !done.contains_key(k.as_str()))
            .cloned()
            .collect();
        let times = keys
            .iter()
            .filter_map(|k| done.get(k.as_str()).copied())
            .collect();
        (times, missing)
    }

    fn get(&self, key: &str) -> Option<KsState> {
        self.map.lock().ok()?.get(key).cloned()
    }
}

// ---------------------------------------------------------------------------------------------
// Controller processes.

struct Proc {
    name: String,
    child: Child,
}

impl Proc {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn cpu_secs(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        let ticks = metrics::cpu_ticks_from_stat(&stat)?;
        Some(ticks as f64 / clock_ticks())
    }

    fn status_mib(&self, field: &str) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        metrics::status_kib(&status, field).map(|k| k as f64 / 1024.0)
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn stop(&mut self) {
        if !self.alive() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if !self.alive() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        log(format!("{} did not stop on SIGTERM; killing it", self.name));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The 1-minute load average (`/proc/loadavg`), as text.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".to_string())
}

/// `getconf CLK_TCK` (100 on Linux nearly everywhere).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

fn spawn_proc(
    name: &str,
    bin: &Path,
    args: &[String],
    env: &[(&str, String)],
    log_path: &Path,
) -> anyhow::Result<Proc> {
    use std::os::unix::process::CommandExt as _;
    let out = std::fs::File::create(log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    register_pid(child.id());
    Ok(Proc {
        name: name.to_string(),
        child,
    })
}

/// `GET path` on 127.0.0.1:port; true on a 200.
async fn http_ok(port: u16, path: &str) -> bool {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<bool, std::io::Error>(
            buf.starts_with(b"HTTP/1.0 200") || buf.starts_with(b"HTTP/1.1 200"),
        )
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Ok(true))
    )
}

struct Controllers {
    sc: Proc,
    kc: Proc,
    perf: Option<Child>,
}

impl Controllers {
    fn cpu(&self) -> Option<Pair> {
        Some(Pair {
            sc: self.sc.cpu_secs()?,
            kc: self.kc.cpu_secs()?,
        })
    }

    fn mem(&self, field: &str) -> Option<Pair> {
        Some(Pair {
            sc: self.sc.status_mib(field)?,
            kc: self.kc.status_mib(field)?,
        })
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        for p in [&mut self.sc, &mut self.kc] {
            if !p.alive() {
                bail!("{} exited (see its log)", p.name);
            }
        }
        Ok(())
    }

    fn stop_perf(&mut self) {
        if let Some(mut p) = self.perf.take() {
            let _ = Command::new("kill")
                .args(["-INT", &p.id().to_string()])
                .status();
            let _ = p.wait();
        }
    }

    fn stop(&mut self) {
        self.stop_perf();
        self.kc.stop();
        self.sc.stop();
    }
}

fn split_args(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

async fn start_controllers(
    args: &RunArgs,
    kubeconfig: &Path,
    dir: &Path,
) -> anyhow::Result<Controllers> {
    let (sc_bin, kc_bin) = args.implementation.binaries();
    let storage = dir.join("storage");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&storage)?;
    std::fs::create_dir_all(&tmp)?;
    let env = [
        ("KUBECONFIG", kubeconfig.display().to_string()),
        ("RUNTIME_NAMESPACE", "flux-system".to_string()),
        ("TMPDIR", tmp.display().to_string()),
    ];
    let [sm, sh, sp, km, kh] = free_ports::<5>()?;
    let mut sc_args = vec![
        format!("--metrics-addr=127.0.0.1:{sm}"),
        format!("--health-addr=127.0.0.1:{sh}"),
        format!("--storage-path={}", storage.display()),
        format!("--storage-addr=127.0.0.1:{sp}"),
        format!("--storage-adv-addr=127.0.0.1:{sp}"),
        "--enable-leader-election=false".to_string(),
        format!("--concurrent={}", args.concurrent),
    ];
    sc_args.extend(split_args(&args.sc_args));
    let mut kc_args = vec![
        format!("--metrics-addr=127.0.0.1:{km}"),
        format!("--health-addr=127.0.0.1:{kh}"),
        "--enable-leader-election=false".to_string(),
        format!("--concurrent={}", args.concurrent),
    ];
    kc_args.extend(split_args(&args.kc_args));
    log(format!("starting {sc_bin} {}", sc_args.join(" ")));
    let sc = spawn_proc(
        "source-controller",
        &args.bin_dir.join(sc_bin),
        &sc_args,
        &env,
        &dir.join("source-controller.log"),
    )?;
    log(format!("starting {kc_bin} {}", kc_args.join(" ")));
    let kc = spawn_proc(
        "kustomize-controller",
        &args.bin_dir.join(kc_bin),
        &kc_args,
        &env,
        &dir.join("kustomize-controller.log"),
    )?;
    let mut ctl = Controllers { sc, kc, perf: None };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        ctl.check_alive()?;
        if http_ok(sh, "/readyz").await && http_ok(kh, "/readyz").await {
            break;
        }
        if Instant::now() > deadline {
            log("controllers not ready after 60s; continuing");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(ctl)
}

// ---------------------------------------------------------------------------------------------
// Cluster helpers.

fn kubectl(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .context("running kubectl")?;
    if !out.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn apply_all(client: &Client, objs: Vec<Value>, parallel: usize) -> anyhow::Result<()> {
    let pp = PatchParams::apply("rflux-fleet").force();
    futures::stream::iter(objs)
        .map(|obj| {
            let client = client.clone();
            let pp = pp.clone();
            async move {
                let ar = if obj["kind"] == "GitRepository" {
                    git_resource()
                } else {
                    ks_resource()
                };
                let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default");
                let name = obj["metadata"]["name"].as_str().unwrap_or_default();
                let api: Api<DynamicObject> = Api::namespaced_with(client, ns, &ar);
                api.patch(name, &pp, &Patch::Apply(&obj))
                    .await
                    .with_context(|| format!("applying {ns}/{name}"))?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(parallel)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn request_reconcile(
    client: &Client,
    ar: &ApiResource,
    ns: &str,
    names: &[String],
    token: &str,
) -> anyhow::Result<()> {
    let patch = json!({"metadata": {"annotations": {REQUESTED_AT: token}}});
    futures::stream::iter(names.iter().cloned())
        .map(|name| {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
            let patch = patch.clone();
            async move {
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .with_context(|| format!("annotating {ns}/{name}"))?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn scrape(client: &Client) -> anyhow::Result<metrics::Counts> {
    metrics::scrape_request_total(client).await
}

fn push_rev(repo: &TestRepo, rev: u32) -> anyhow::Result<String> {
    for (path, text) in fixtures::repo_files(rev) {
        repo.write(&path, &text)?;
    }
    let sha = repo.commit(&format!("fleet rev {rev}"))?;
    repo.push("main")?;
    Ok(sha.trim().to_string())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

// ---------------------------------------------------------------------------------------------
// The run.

async fn run(args: &RunArgs) -> anyhow::Result<RunResult> {
    let label = args.implementation.label();
    let cp_name = cp_name(args);
    let dir = std::path::absolute(args.work_dir.join(format!(
        "{label}-n{}-{}-{}",
        args.n,
        match args.variant {
            Variant::A => "a",
            Variant::B => "b",
        },
        args.profile
    )))?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    let mut result = RunResult {
        implementation: label.to_string(),
        profile: args.profile.clone(),
        variant: match args.variant {
            Variant::A => "a".into(),
            Variant::B => "b".into(),
        },
        n: args.n,
        concurrent: args.concurrent,
        extra_args: (args.sc_args.clone(), args.kc_args.clone()),
        ..Default::default()
    };

    log(format!("starting a fresh control plane {cp_name:?}"));
    tokio::task::spawn_blocking(rflux_e2e::ensure_binaries).await??;
    let cp = ControlPlane::start(&cp_name).await?;
    let outcome = async {
        let git = tokio::task::spawn_blocking(GitServer::ensure).await??;
        let repo = git.create_repo("fleet")?;
        let sha1 = push_rev(&repo, 1)?;
        let url = git.http_url(repo.name());
        log(format!("repository {url} at {sha1}"));

        let kubeconfig = cp.kubeconfig_path().to_path_buf();
        for crd in &args.crds {
            kubectl(
                &kubeconfig,
                &["apply", "--server-side", "-f", &crd.display().to_string()],
            )?;
        }
        kubectl(
            &kubeconfig,
            &[
                "wait",
                "--for=condition=Established",
                "crd",
                "--all",
                "--timeout=60s",
            ],
        )?;
        for ns in [FLEET_NS, BIG_NS, "flux-system"] {
            kubectl(&kubeconfig, &["create", "namespace", ns])?;
        }
        let client = cp.client().await?;
        let tracker = Tracker::start(client.clone());
        let mut ctl = start_controllers(args, &kubeconfig, &dir).await?;
        let phases = run_phases(
            args,
            &client,
            &tracker,
            &mut ctl,
            &repo,
            &url,
            &sha1,
            &mut result,
        )
        .await;
        if let Err(e) = &phases {
            result.notes.push(format!("aborted: {e:#}"));
            log(format!("phase failed: {e:#}"));
        }
        result.peak_rss_mib = ctl.mem("VmHWM");
        if args.keep {
            log("--keep: leaving the controllers and the control plane running");
            std::mem::forget(ctl);
        } else {
            ctl.stop();
        }
        Ok::<(), anyhow::Error>(())
    }
    .await;
    if !args.keep {
        log(format!("stopping control plane {cp_name:?}"));
        let name = cp_name.clone();
        tokio::task::spawn_blocking(move || ControlPlane::stop(&name)).await??;
    }
    outcome?;
    Ok(result)
}

#[allow(clippy::too_many_arguments)]
async fn run_phases(
    args: &RunArgs,
    client: &Client,
    tracker: &Tracker,
    ctl: &mut Controllers,
    repo: &TestRepo,
    url: &str,
    sha1: &str,
    result: &mut RunResult,
) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(args.timeout_secs);
    let rev1 = fixtures::branch_revision(sha1);
    let want = |p: &str| args.phases.iter().any(|x| x == p);
    let fleet_keys: Vec<String> = (0..args.n)
        .map(|i| format!("{FLEET_NS}/{}", fixtures::app_name(i)))
        .collect();

    if want("api") {
        api_phase(client, tracker, ctl, url, &rev1, result).await?;
    }

    if want("fleet") {
        let objs = fixtures::fleet_objects(args.variant, args.n, url);
        if args.perf {
            let data = std::path::absolute(args.work_dir.join(format!(
                "perf-{}-n{}.data",
                args.implementation.label(),
                args.n
            )))?;
            let p = Command::new("perf")
                .args(["record", "-F", "499", "-e", "cpu-clock", "-g", "-o"])
                .arg(&data)
                .args(["-p", &ctl.kc.pid().to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            match p {
                Ok(p) => {
                    register_pid(p.id());
                    ctl.perf = Some(p);
                }
                Err(e) => result.notes.push(format!("perf record failed: {e}")),
            }
        }
        let cpu0 = ctl.cpu();
        let load0 = load_average();
        log(format!("fleet: applying {} objects", objs.len()));
        let t0 = Instant::now();
        apply_all(client, objs, 32).await?;
        log(format!(
            "fleet: burst applied in {:.1}s; waiting for {} Kustomizations",
            t0.elapsed().as_secs_f64(),
            args.n
        ));
        let (mut times, missing) = tracker
            .wait_all(&fleet_keys, t0, timeout, |s| {
                s.ready && s.observed_generation == s.generation && s.last_applied == rev1
            })
            .await;
        ctl.stop_perf();
        ctl.check_alive()?;
        let cpu1 = ctl.cpu();
        result.notes.push(format!(
            "machine load average (1 min) at the fleet start/end: {load0}/{}",
            load_average()
        ));
        times.sort_by(f64::total_cmp);
        result.fleet_not_ready = missing.len();
        if missing.is_empty() {
            result.fleet_secs = times.last().copied();
        } else {
            result.notes.push(format!(
                "fleet: {} not Ready after {}s, e.g. {:?}",
                missing.len(),
                args.timeout_secs,
                &missing[..missing.len().min(3)]
            ));
        }
        result.fleet_p50_p90 = Some((percentile(&times, 0.5), percentile(&times, 0.9)));
        if let (Some(a), Some(b)) = (cpu0, cpu1) {
            result.fleet_cpu_secs = Some(Pair {
                sc: b.sc - a.sc,
                kc: b.kc - a.kc,
            });
        }
        log(format!(
            "fleet: {} Ready; all after {:?}s, p50/p90 {:?}, cpu {:?}",
            times.len(),
            result.fleet_secs,
            result.fleet_p50_p90,
            result.fleet_cpu_secs
        ));
        if !missing.is_empty() {
            bail!("fleet did not become Ready");
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        result.steady_rss_mib = ctl.mem("VmRSS");
        log(format!("steady RSS MiB: {:?}", result.steady_rss_mib));
    }

    if want("idle") {
        let c0 = ctl.cpu();
        let t = Instant::now();
        log(format!("idle: measuring CPU for {}s", args.idle_secs));
        tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
        ctl.check_alive()?;
        let c1 = ctl.cpu();
        let mins = t.elapsed().as_secs_f64() / 60.0;
        if let (Some(a), Some(b)) = (c0, c1) {
            result.idle_cpu_per_min = Some(Pair {
                sc: (b.sc - a.sc) / mins,
                kc: (b.kc - a.kc) / mins,
            });
        }
        result.idle_window_secs = Some(t.elapsed().as_secs_f64());
        log(format!("idle CPU s/min: {:?}", result.idle_cpu_per_min));
    }

    if want("change") && want("fleet") {
        let sha2 = push_rev(repo, 2)?;
        let rev2 = fixtures::branch_revision(&sha2);
        let t0 = Instant::now();
        let sources: Vec<String> = match args.variant {
            Variant::A => (0..args.n).map(fixtures::app_name).collect(),
            Variant::B => vec!["fleet".to_string()],
        };
        let token = jiff::Timestamp::now().to_string();
        request_reconcile(client, &git_resource(), FLEET_NS, &sources, &token).await?;
        log(format!(
            "change: pushed {sha2}, requested reconcile of {} GitRepositories",
            sources.len()
        ));
        let (_, missing) = tracker
            .wait_all(&fleet_keys, t0, timeout, |s| {
                s.ready && s.last_applied == rev2
            })
            .await;
        if missing.is_empty() {
            result.change_secs = Some(t0.elapsed().as_secs_f64());
        } else {
            result.notes.push(format!(
                "change: {} had not applied it at the timeout",
                missing.len()
            ));
        }
        log(format!("change propagation: {:?}s", result.change_secs));
    }

    if want("drift") && want("fleet") {
        drift_phase(args, client, tracker, result).await?;
    }
    Ok(())
}

async fn api_phase(
    client: &Client,
    tracker: &Tracker,
    ctl: &mut Controllers,
    url: &str,
    rev1: &str,
    result: &mut RunResult,
) -> anyhow::Result<()> {
    log("api: applying the 100-object Kustomization");
    let t0 = Instant::now();
    apply_all(
        client,
        vec![
            fixtures::git_repository("big", BIG_NS, url),
            fixtures::big_kustomization("big"),
        ],
        2,
    )
    .await?;
    let key = vec![format!("{BIG_NS}/big")];
    let (_, missing) = tracker
        .wait_all(&key, t0, Duration::from_secs(300), |s| {
            s.ready && s.last_applied == rev1
        })
        .await;
    if !missing.is_empty() {
        bail!("the 100-object Kustomization did not become Ready");
    }
    log(format!(
        "api: Ready after {:.1}s",
        t0.elapsed().as_secs_f64()
    ));
    // Let follow-up work (events, status writes, health polling) settle.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let window = Duration::from_secs(10);
    let ks_api: Api<DynamicObject> = Api::namespaced_with(client.clone(), BIG_NS, &ks_resource());
    let mut samples: Vec<(f64, metrics::Counts)> = Vec::new();
    for round in 0..3 {
        // Idle baseline window.
        let m0 = scrape(client).await?;
        tokio::time::sleep(window).await;
        let m1 = scrape(client).await?;
        let baseline = metrics::diff(&m0, &m1);
        // Reconcile window of the same length.
        let m2 = scrape(client).await?;
        let started = Instant::now();
        let token = format!("fleet-noop-{round}-{}", jiff::Timestamp::now().as_second());
        ks_api
            .patch(
                "big",
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"annotations": {REQUESTED_AT: token}}})),
            )
            .await?;
        let (_, missing) = tracker
            .wait_all(&key, started, Duration::from_secs(60), |s| {
                s.last_handled == token && s.ready
            })
            .await;
        if !missing.is_empty() {
            bail!("the no-op reconcile was not handled within 60s");
        }
        let took = started.elapsed();
        if took < window {
            tokio::time::sleep(window - took).await;
        }
        let m3 = scrape(client).await?;
        let mut reconcile = metrics::subtract(&metrics::diff(&m2, &m3), &baseline);
        // Our own annotation patch.
        let own = "PATCH kustomize.toolkit.fluxcd.io/kustomizations".to_string();
        if let Some(v) = reconcile.get_mut(&own) {
            *v -= 1.0;
        }
        reconcile.retain(|_, v| v.abs() > 0.0);
        let n = metrics::total(&reconcile);
        log(format!(
            "api: round {round}: {n} requests (handled in {:.2}s): {reconcile:?}",
            took.as_secs_f64()
        ));
        samples.push((n, reconcile));
        ctl.check_alive()?;
    }
    samples.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (median, breakdown) = samples.swap_remove(1);
    result.api_requests_per_noop = Some(median);
    result.api_breakdown = breakdown.into_iter().collect();
    Ok(())
}

async fn drift_phase(
    args: &RunArgs,
    client: &Client,
    tracker: &Tracker,
    result: &mut RunResult,
) -> anyhow::Result<()> {
    let name = fixtures::app_name(0);
    let key = format!("{FLEET_NS}/{name}");
    let interval = args.drift_interval_secs;
    let ks_api: Api<DynamicObject> = Api::namespaced_with(client.clone(), FLEET_NS, &ks_resource());
    let t0 = Instant::now();
    ks_api
        .patch(
            &name,
            &PatchParams::apply("rflux-fleet").force(),
            &Patch::Apply(&json!({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                "kind": "Kustomization",
                "metadata": {"name": name, "namespace": FLEET_NS},
                "spec": fixtures::fleet_kustomization(args.variant, 0)["spec"].clone()
                    .as_object()
                    .map(|o| {
                        let mut o = o.clone();
                        o.insert("interval".into(), json!(format!("{interval}s")));
                        Value::Object(o)
                    })
                    .ok_or_else(|| anyhow!("no spec"))?,
            })),
        )
        .await?;
    let generation = ks_api.get(&name).await?.metadata.generation.unwrap_or(0);
    let (_, missing) = tracker
        .wait_all(
            std::slice::from_ref(&key),
            t0,
            Duration::from_secs(120),
            |s| s.ready && s.observed_generation >= generation,
        )
        .await;
    if !missing.is_empty() {
        bail!("drift: the Kustomization did not reconcile its new interval");
    }
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), FLEET_NS);
    let current = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(fixtures::DRIFT_ANNOTATION).cloned())
            .unwrap_or_default()
    };
    let pp = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..Default::default()
    };
    deploys
        .patch(
            &name,
            &pp,
            &Patch::Merge(&json!({"spec": {"template": {"metadata": {"annotations": {
                fixtures::DRIFT_ANNOTATION: "drifted"}}}}})),
        )
        .await?;
    let t_drift = Instant::now();
    log(format!(
        "drift: patched deployment {name}; waiting for the revert (interval {interval}s)"
    ));
    let limit = Duration::from_secs(3 * interval + 30);
    result.drift_interval_secs = Some(interval as f64);
    loop {
        let d = deploys.get(&name).await?;
        if current(&d) == "v1" {
            result.drift_secs = Some(t_drift.elapsed().as_secs_f64());
            break;
        }
        if t_drift.elapsed() > limit {
            result
                .notes
                .push(format!("drift: not reverted within {}s", limit.as_secs()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let since_ready = tracker
        .get(&key)
        .and_then(|s| s.seen)
        .map(|s| s.elapsed().as_secs_f64());
    log(format!(
        "drift: reverted after {:?}s (last Kustomization status {since_ready:?}s ago)",
        result.drift_secs
    ));
    Ok(())
}
