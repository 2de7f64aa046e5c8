//! Both controllers as real processes: `source-controller` and `kustomize-controller` started
//! from the build's `target/<profile>/` against a control plane, with loopback ports, a temp
//! artifact storage and log files, and stopped when the handle is dropped (also when the test
//! panics).
//!
//! API:
//! - [`Controllers::start`]`(cp, opts)` starts both, waits for `/readyz` on each, and returns the
//!   handle. [`ControllerOptions::default`] gives our binaries, `--requeue-dependency=2s`, and a
//!   unique watch label (`opts.label`, see [`Controllers::label`]) so that only the objects a test
//!   labels are reconciled: label every GitRepository and Kustomization with
//!   [`Controllers::labels`] (or [`Controllers::label_value`]), or set `opts.label = None` to
//!   watch everything (only on a control plane of your own).
//! - [`Binaries::ours`] (default) or [`Binaries::flux`] (Flux's binaries from
//!   `e2e/flux/build.sh`): both take the same flags, so the harness runs either. Flux's
//!   source-controller also watches its other kinds (OCIRepository, HelmRepository, Bucket, …):
//!   install Flux's CRDs first, not only ours.
//! - [`Controllers::check_alive`] fails with the log tails if a process exited;
//!   [`Controllers::log_tails`] for assertion messages; [`Controllers::source_metrics_addr`] and
//!   friends for scraping.
//! - [`Controllers::stop`] (also run by `Drop`): SIGTERM, then SIGKILL after 10 s.
//! - [`Controllers::kill_kustomize`] SIGKILLs kustomize-controller alone and
//!   [`Controllers::restart_kustomize`] starts it again with the same flags, ports, `TMPDIR` and
//!   log (the fault-injection tests); `opts.kustomize_kubeconfig` / `opts.source_kubeconfig`
//!   give a controller another `KUBECONFIG` (e.g. one whose server is a fault proxy).
//!
//! A test binary killed hard (SIGKILL) cannot run `Drop`: every start records the child pids
//! in `<control plane state>/controllers/<parent pid>.json`, and the next start stops the
//! children of parents that are gone.
//!
//! The binaries are not built here (cargo holds the build lock while tests run): build them
//! first, `cargo build -p source-controller -p kustomize-controller` (`make test` builds every
//! target before running the tests). A missing binary is an error that says so.
//!
//! Helpers for tests that drive the controllers: [`install_crds`] (our CRDs on a named control
//! plane), [`wait_for`] (poll until a closure yields `Some`), [`apply_value`] (server-side apply
//! of any object given as JSON, kind resolved by discovery), [`ks_condition`], [`ks_ready`].
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::ControlPlane;
use rflux_e2e::process::{ProcessInfo, is_alive, log_tail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Label key the harness uses for `--watch-label-selector`.
pub const WATCH_LABEL: &str = "e2e.rflux.dev/controllers";

/// Where the two controller executables are.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub source: PathBuf,
    pub kustomize: PathBuf,
}

impl Binaries {
    /// Our binaries, next to the running test executable (`target/<profile>/`).
    pub fn ours() -> Self {
        let dir = target_profile_dir();
        Binaries {
            source: dir.join("source-controller"),
            kustomize: dir.join("kustomize-controller"),
        }
    }

    /// Flux's binaries built by `e2e/flux/build.sh` (`$HOME/.cache/gitops-e2e/flux-bin`).
    pub fn flux() -> Self {
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
        let dir = home.join(".cache/gitops-e2e/flux-bin");
        Binaries {
            source: dir.join("flux-source-controller"),
            kustomize: dir.join("flux-kustomize-controller"),
        }
    }
}

/// `target/<profile>` of the running test binary (`target/<profile>/deps/<test>-<hash>`).
fn target_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let deps = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().map(Path::to_path_buf).unwrap_or(deps)
    } else {
        deps
    }
}

/// How to start the controllers.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    pub binaries: Binaries,
    /// `--watch-label-selector=<WATCH_LABEL>=<value>` on both; `None` watches everything.
    pub label: Option<String>,
    /// `--requeue-dependency` of both.
    pub requeue_dependency: String,
    /// `RUNTIME_NAMESPACE` (events, leases).
    pub runtime_namespace: String,
    /// `--log-level`.
    pub log_level: String,
    /// Extra flags for source-controller.
    pub source_args: Vec<String>,
    /// Extra flags for kustomize-controller.
    pub kustomize_args: Vec<String>,
    /// `KUBECONFIG` of source-controller (default: the control plane's admin kubeconfig).
    pub source_kubeconfig: Option<PathBuf>,
    /// `KUBECONFIG` of kustomize-controller (default: the control plane's admin kubeconfig),
    /// e.g. one whose server is a fault proxy (`rflux_e2e::fault_proxy`).
    pub kustomize_kubeconfig: Option<PathBuf>,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            binaries: Binaries::ours(),
            label: Some(rflux_e2e::unique_name("ctl")),
            requeue_dependency: "2s".into(),
            runtime_namespace: "default".into(),
            log_level: "info".into(),
            source_args: Vec::new(),
            kustomize_args: Vec::new(),
            source_kubeconfig: None,
            kustomize_kubeconfig: None,
        }
    }
}

/// One controller process.
#[derive(Debug)]
pub struct ControllerProc {
    pub name: &'static str,
    pub child: Child,
    pub program: PathBuf,
    pub log: PathBuf,
    pub metrics_addr: SocketAddr,
    pub health_addr: SocketAddr,
    /// How it was started (for a restart with the same flags, ports and storage).
    args: Vec<String>,
    envs: Vec<(&'static str, std::ffi::OsString)>,
}

impl ControllerProc {
    fn info(&self) -> ProcessInfo {
        ProcessInfo {
            name: self.name.to_string(),
            pid: self.child.id(),
            program: self.program.clone(),
            log: self.log.clone(),
        }
    }
}

/// The record that lets a later start clean up after a test binary that was killed hard.
#[derive(Debug, Serialize, Deserialize)]
struct PidRecord {
    parent: u32,
    children: Vec<ProcessInfo>,
}

/// Both controllers, running; dropped means stopped.
#[derive(Debug)]
pub struct Controllers {
    pub source: ControllerProc,
    pub kustomize: ControllerProc,
    /// `--storage-addr` (and `--storage-adv-addr`) of source-controller.
    pub storage_addr: SocketAddr,
    /// `--storage-path`, removed on drop.
    pub storage: tempfile::TempDir,
    /// `TMPDIR` of kustomize-controller (its artifact cache), removed on drop.
    pub tmp: tempfile::TempDir,
    label: Option<String>,
    pid_file: PathBuf,
    stopped: bool,
}

fn loopback() -> anyhow::Result<SocketAddr> {
    Ok(SocketAddr::from(([127, 0, 0, 1], rflux_e2e::free_port()?)))
}

impl Controllers {
    /// Starts both controllers against `cp` and waits until both answer `/readyz` with 200.
    /// The loopback ports are picked free, but another process's outgoing connection may take
    /// one before the controller binds it ("Address already in use"): then both are started
    /// again on other ports (at most 3 attempts).
    pub async fn start(cp: &ControlPlane, opts: ControllerOptions) -> anyhow::Result<Controllers> {
        let mut attempt = 1;
        loop {
            match Self::start_once(cp, opts.clone()).await {
                Err(e) if attempt < 3 && format!("{e:#}").contains("Address already in use") => {
                    eprintln!("a controller port was taken meanwhile, starting again: {e:#}");
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn start_once(cp: &ControlPlane, opts: ControllerOptions) -> anyhow::Result<Controllers> {
        for bin in [&opts.binaries.source, &opts.binaries.kustomize] {
            if !bin.is_file() {
                bail!(
                    "{} is missing: build it first (cargo build -p source-controller -p kustomize-controller)",
                    bin.display()
                );
            }
        }
        let dir = cp.state_dir().join("controllers");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        stop_orphans(&dir);
        let tag = rflux_e2e::random_suffix(6);
        let storage = tempfile::tempdir()?;
        let tmp = tempfile::tempdir()?;
        let storage_addr = loopback()?;
        let selector = opts
            .label
            .as_ref()
            .map(|v| format!("--watch-label-selector={WATCH_LABEL}={v}"));
        let common = |metrics: SocketAddr, health: SocketAddr| {
            let mut args = vec![
                format!("--metrics-addr={metrics}"),
                format!("--health-addr={health}"),
                "--enable-leader-election=false".to_string(),
                "--watch-all-namespaces=true".to_string(),
                format!("--requeue-dependency={}", opts.requeue_dependency),
                format!("--log-level={}", opts.log_level),
            ];
            args.extend(selector.clone());
            args
        };
        let (sm, sh) = (loopback()?, loopback()?);
        let mut source_args = common(sm, sh);
        source_args.extend([
            format!("--storage-path={}", storage.path().display()),
            format!("--storage-addr={storage_addr}"),
            format!("--storage-adv-addr={storage_addr}"),
        ]);
        source_args.extend(opts.source_args.iter().cloned());
        let (km, kh) = (loopback()?, loopback()?);
        let mut kustomize_args = common(km, kh);
        kustomize_args.extend(opts.kustomize_args.iter().cloned());

        let spawn = |name: &'static str,
                     program: &Path,
                     args: &[String],
                     kubeconfig: &Option<PathBuf>,
                     metrics_addr: SocketAddr,
                     health_addr: SocketAddr|
         -> anyhow::Result<ControllerProc> {
            let log = cp
                .state_dir()
                .join("logs")
                .join(format!("{name}-{tag}.log"));
            // Both ours and Flux's read `KUBECONFIG` (Flux's have no `--kubeconfig` flag).
            let kubeconfig = kubeconfig
                .clone()
                .unwrap_or_else(|| cp.kubeconfig_path().to_path_buf());
            let envs = vec![
                ("KUBECONFIG", kubeconfig.into_os_string()),
                ("RUNTIME_NAMESPACE", opts.runtime_namespace.clone().into()),
                ("TMPDIR", tmp.path().as_os_str().to_os_string()),
            ];
            let child = spawn_logged(program, args, &envs, &log)?;
            Ok(ControllerProc {
                name,
                child,
                program: program.to_path_buf(),
                log,
                metrics_addr,
                health_addr,
                args: args.to_vec(),
                envs,
            })
        };
        let source = spawn(
            "source-controller",
            &opts.binaries.source,
            &source_args,
            &opts.source_kubeconfig,
            sm,
            sh,
        )?;
        let pid_file = dir.join(format!("{}.json", std::process::id()));
        let mut ctl = Controllers {
            kustomize: match spawn(
                "kustomize-controller",
                &opts.binaries.kustomize,
                &kustomize_args,
                &opts.kustomize_kubeconfig,
                km,
                kh,
            ) {
                Ok(k) => k,
                Err(e) => {
                    let mut source = source;
                    let _ = source.child.kill();
                    let _ = source.child.wait();
                    return Err(e);
                }
            },
            source,
            storage_addr,
            storage,
            tmp,
            label: opts.label.clone(),
            pid_file,
            stopped: false,
        };
        ctl.record_pids();
        eprintln!(
            "controllers started: source-controller pid {} (log {}), kustomize-controller pid {} (log {}), label {:?}",
            ctl.source.child.id(),
            ctl.source.log.display(),
            ctl.kustomize.child.id(),
            ctl.kustomize.log.display(),
            ctl.label
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        for addr in [sh, kh] {
            loop {
                ctl.check_alive()?;
                if matches!(http_status(addr, "/readyz").await, Some(200)) {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("{addr}/readyz not ready in 60s\n{}", ctl.log_tails(30));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(ctl)
    }

    fn record_pids(&mut self) {
        let record = PidRecord {
            parent: std::process::id(),
            children: vec![self.source.info(), self.kustomize.info()],
        };
        // Several Controllers in one test binary share the parent's record: append.
        let mut all: Vec<ProcessInfo> = std::fs::read(&self.pid_file)
            .ok()
            .and_then(|b| serde_json::from_slice::<PidRecord>(&b).ok())
            .map(|r| r.children)
            .unwrap_or_default();
        all.retain(is_alive);
        all.extend(record.children);
        let record = PidRecord {
            parent: record.parent,
            children: all,
        };
        if let Ok(bytes) = serde_json::to_vec(&record) {
            let _ = std::fs::write(&self.pid_file, bytes);
        }
    }

    /// SIGKILLs kustomize-controller (no shutdown of any kind) and reaps it.
    pub fn kill_kustomize(&mut self) -> anyhow::Result<()> {
        let k = &mut self.kustomize;
        if k.child.try_wait()?.is_none() {
            k.child.kill().context("SIGKILL kustomize-controller")?;
        }
        let status = k.child.wait()?;
        eprintln!("kustomize-controller pid {} killed: {status}", k.child.id());
        Ok(())
    }

    /// Starts kustomize-controller again (after [`Controllers::kill_kustomize`]) with the same
    /// flags, ports, environment and `TMPDIR`, appending to the same log; waits for `/readyz`.
    pub async fn restart_kustomize(&mut self) -> anyhow::Result<()> {
        if self.kustomize.child.try_wait()?.is_none() {
            bail!("kustomize-controller is still running");
        }
        let k = &mut self.kustomize;
        k.child = spawn_logged(&k.program, &k.args, &k.envs, &k.log)?;
        eprintln!("kustomize-controller restarted: pid {}", k.child.id());
        let health = k.health_addr;
        self.record_pids();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.check_alive()?;
            if matches!(http_status(health, "/readyz").await, Some(200)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{health}/readyz not ready in 60s\n{}", self.log_tails(30));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The watch label value, if the controllers watch a label.
    pub fn label_value(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// `(WATCH_LABEL, value)` when the controllers watch a label.
    pub fn label(&self) -> Option<(&'static str, &str)> {
        self.label.as_deref().map(|v| (WATCH_LABEL, v))
    }

    /// The labels to put on objects these controllers must see (empty when unlabelled).
    pub fn labels(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        if let Some(v) = &self.label {
            m.insert(WATCH_LABEL.into(), Value::String(v.clone()));
        }
        m
    }

    /// Adds [`Controllers::labels`] to `obj.metadata.labels`.
    pub fn label_object(&self, obj: &mut Value) {
        let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
            return;
        };
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(l) = labels.as_object_mut() {
            l.extend(self.labels());
        }
    }

    pub fn source_metrics_addr(&self) -> SocketAddr {
        self.source.metrics_addr
    }

    pub fn kustomize_metrics_addr(&self) -> SocketAddr {
        self.kustomize.metrics_addr
    }

    /// Errors (with the log tails) if a controller process has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for p in [&mut self.source, &mut self.kustomize] {
            if let Some(status) = p.child.try_wait()? {
                bail!(
                    "{} exited ({status}); log {}:\n{}",
                    p.name,
                    p.log.display(),
                    log_tail(&p.log, 40)
                );
            }
        }
        Ok(())
    }

    /// The last `lines` lines of both logs, for assertion messages.
    pub fn log_tails(&self, lines: usize) -> String {
        format!(
            "--- {} ({}):\n{}\n--- {} ({}):\n{}",
            self.source.name,
            self.source.log.display(),
            log_tail(&self.source.log, lines),
            self.kustomize.name,
            self.kustomize.log.display(),
            log_tail(&self.kustomize.log, lines)
        )
    }

    /// SIGTERM both, SIGKILL what is left after 10 s, reap them. Idempotent.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        for p in [&mut self.source, &mut self.kustomize] {
            if matches!(p.child.try_wait(), Ok(None)) {
                let _ = Command::new("kill")
                    .args(["-s", "TERM", &p.child.id().to_string()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for p in [&mut self.source, &mut self.kustomize] {
            loop {
                match p.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        eprintln!("{} did not stop on SIGTERM; killing it", p.name);
                        let _ = p.child.kill();
                        let _ = p.child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        // Forget our children in the pid record (others in this process may still run).
        if let Ok(bytes) = std::fs::read(&self.pid_file)
            && let Ok(mut rec) = serde_json::from_slice::<PidRecord>(&bytes)
        {
            let mine = [self.source.child.id(), self.kustomize.child.id()];
            rec.children.retain(|c| !mine.contains(&c.pid));
            if rec.children.is_empty() {
                let _ = std::fs::remove_file(&self.pid_file);
            } else if let Ok(b) = serde_json::to_vec(&rec) {
                let _ = std::fs::write(&self.pid_file, b);
            }
        }
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts `program` with `args` and `envs`, stdout and stderr appended to `log`.
fn spawn_logged(
    program: &Path,
    args: &[String],
    envs: &[(&'static str, std::ffi::OsString)],
    log: &Path,
) -> anyhow::Result<Child> {
    if let Some(parent) = log.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let out = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))
}

/// Stops children recorded by test processes that no longer run.
fn stop_orphans(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(rec) = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<PidRecord>(&b).ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{}", rec.parent)).exists() {
            continue;
        }
        let stopped = rflux_e2e::process::stop(&rec.children, Duration::from_secs(5));
        eprintln!(
            "stopped controllers left by the gone test process {} (SIGKILL needed: {stopped:?})",
            rec.parent
        );
        let _ = std::fs::remove_file(&path);
    }
}

/// `GET path` over plain HTTP/1.0; the status code, or `None` when the connection fails.
pub async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    http_get(addr, path).await.map(|(code, _)| code)
}

/// `GET path` over plain HTTP/1.0: status code and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_string()))
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .ok()
        .flatten()
}

/// Polls `f` every 200 ms until it yields `Some`, or fails after `timeout` with `what` and the
/// last error `f` returned.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}; last error: {last}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Server-side applies `obj` (any kind; the resource is found by discovery) with field manager
/// `manager`, forcing conflicts. Namespaced objects need `metadata.namespace`.
pub async fn apply_value(client: &Client, obj: &Value, manager: &str) -> anyhow::Result<()> {
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("object without apiVersion"))?;
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("object without kind"))?;
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("object without metadata.name"))?;
    let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str);
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("discovering {api_version} {kind}"))?;
    let api: Api<DynamicObject> = match (caps.scope, ns) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        (kube::discovery::Scope::Namespaced, None) => {
            bail!("{kind}/{name} is namespaced but has no metadata.namespace")
        }
        (kube::discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &ar),
    };
    api.patch(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(obj),
    )
    .await
    .with_context(|| format!("applying {kind}/{name}"))?;
    Ok(())
}

/// Installs our CRDs ([`super::OUR_CRDS`]) on a control plane of the test's own (not
/// `default`, where the CRD compatibility test swaps CRDs): when all are present it only waits
/// until they are established, without the global CRD lock (other test binaries may hold it for
/// minutes); otherwise it installs them under the lock ([`super::lock_crds_and_install`]).
pub async fn install_crds(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut present = true;
    for (name, _) in super::OUR_CRDS {
        present &= crds.get_opt(name).await?.is_some();
    }
    if present {
        for (name, file) in super::OUR_CRDS {
            super::ensure_crd(client, name, file).await?;
        }
    } else {
        drop(super::lock_crds_and_install(client).await);
    }
    Ok(())
}

/// The condition `type_` of a Kustomization.
pub fn ks_condition<'a>(ks: &'a Kustomization, type_: &str) -> Option<&'a Condition> {
    ks.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether the Kustomization is Ready=True at its current generation.
pub fn ks_ready(ks: &Kustomization) -> bool {
    ks_condition(ks, "Ready").is_some_and(|c| c.status == "True")
        && ks.status.as_ref().and_then(|s| s.observed_generation) == ks.metadata.generation
}

/// Polls the Kustomization `name` until `pred` holds and returns it. On timeout, panics with
/// `what`, its status, whether the controllers are still running, and their log tails.
pub async fn wait_ks(
    api: &Api<Kustomization>,
    ctl: &mut Controllers,
    timeout: Duration,
    name: &str,
    what: &str,
    pred: impl Fn(&Kustomization) -> bool,
) -> Kustomization {
    let pred = &pred;
    let res = wait_for(timeout, what, || async move {
        let ks = api.get(name).await?;
        Ok(pred(&ks).then_some(ks))
    })
    .await;
    match res {
        Ok(ks) => ks,
        Err(e) => {
            let status = api
                .get(name)
                .await
                .map(|k| serde_json::to_string_pretty(&k.status).unwrap_or_default())
                .unwrap_or_default();
            let alive = ctl
                .check_alive()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            panic!("{e}\nstatus: {status}\n{alive}\n{}", ctl.log_tails(40));
        }
    }
}

/// Waits until `api` lists no objects (all finalized); panics with the controller logs on
/// timeout.
pub async fn wait_list_empty<K>(api: &Api<K>, ctl: &Controllers, timeout: Duration, what: &str)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let res = wait_for(timeout, what, || async {
        Ok(api
            .list(&Default::default())
            .await?
            .items
            .is_empty()
            .then_some(()))
    })
    .await;
    if let Err(e) = res {
        panic!("{e}\n{}", ctl.log_tails(40));
    }
}
