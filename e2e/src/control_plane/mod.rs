//! A local Kubernetes control plane: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok as detached processes, plus
//! one kwok-managed Node.
//!
//! `args.rs` holds the command lines, `state.rs` what is recorded about an instance and the
//! start options, `faults.rs` the fault-injection helpers (stop and start etcd or
//! kube-apiserver alone, keeping data and ports) and extra client identities.

mod args;
mod faults;
mod state;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use base64::Engine;
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::pki::{self, Usage};
use crate::process::{self, ProcessInfo};
use crate::{
    bin_dir, free_port, lock_file, now_unix, random_suffix, state_root, unique_name, write_atomic,
};
pub use faults::Component;
pub use state::{ControlPlaneOptions, ControlPlaneState};

/// Name of the instance used by [`ControlPlane::shared`].
pub const DEFAULT_INSTANCE: &str = "default";

/// Name of the kwok-managed Node every instance gets.
pub const NODE_NAME: &str = "kwok-node-0";

const STATE_FILE: &str = "state.json";

/// One running control plane instance.
#[derive(Clone, Debug)]
pub struct ControlPlane {
    state: ControlPlaneState,
}

static SHARED: Mutex<Option<HashMap<String, &'static ControlPlane>>> = Mutex::new(None);

fn validate_name(name: &str) -> anyhow::Result<()> {
    if name.is_empty()
        || name.len() > 40
        || name == crate::GIT_INSTANCE
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        bail!(
            "invalid instance name {name:?}: use [a-z0-9-]{{1,40}}, not {:?}",
            crate::GIT_INSTANCE
        );
    }
    Ok(())
}

/// Names of the control plane instances that have a state directory.
pub fn instance_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(state_root())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join(STATE_FILE).is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n != crate::GIT_INSTANCE)
        .collect();
    names.sort();
    names
}

impl ControlPlane {
    /// The default instance: reused when it runs and is healthy, otherwise
    /// started (under a file lock, so parallel test binaries start only one)
    /// and left running for later test binaries.
    pub async fn shared() -> anyhow::Result<&'static ControlPlane> {
        Self::shared_named(DEFAULT_INSTANCE).await
    }

    /// Like [`ControlPlane::shared`] for a named instance (e.g. `remote`).
    pub async fn shared_named(name: &str) -> anyhow::Result<&'static ControlPlane> {
        if let Some(cp) = SHARED
            .lock()
            .map_err(|_| anyhow!("poisoned lock"))?
            .as_ref()
            .and_then(|m| m.get(name).copied())
        {
            return Ok(cp);
        }
        let cp = Self::ensure(name).await?;
        let mut guard = SHARED.lock().map_err(|_| anyhow!("poisoned lock"))?;
        let map = guard.get_or_insert_with(HashMap::new);
        Ok(*map
            .entry(name.to_string())
            .or_insert_with(|| Box::leak(Box::new(cp))))
    }

    /// Reuses the named instance when it is healthy, otherwise (re)starts it.
    /// Builds missing binaries first.
    pub async fn ensure(name: &str) -> anyhow::Result<ControlPlane> {
        validate_name(name)?;
        let lock_path = state_root().join(format!("{name}.lock"));
        let lock = tokio::task::spawn_blocking(move || lock_file(&lock_path)).await??;
        let result = async {
            if let Some(cp) = Self::load(name)? {
                if cp.is_healthy().await {
                    return Ok(cp);
                }
                eprintln!("rflux-e2e: control plane {name:?} is not healthy; restarting it");
            }
            tokio::task::spawn_blocking(crate::ensure_binaries).await??;
            // Ports are picked before the processes bind them: retry once in
            // case another process took one in between.
            match Self::start(name).await {
                Ok(cp) => Ok(cp),
                Err(e) => {
                    eprintln!("rflux-e2e: first start of {name:?} failed, retrying: {e:#}");
                    Self::start(name).await
                }
            }
        }
        .await;
        drop(lock);
        result
    }

    /// Reads the state file of a named instance, if there is one.
    pub fn load(name: &str) -> anyhow::Result<Option<ControlPlane>> {
        validate_name(name)?;
        let path = state_root().join(name).join(STATE_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let state: ControlPlaneState = serde_json::from_slice(&bytes)
                    .with_context(|| format!("parsing {}", path.display()))?;
                Ok(Some(ControlPlane { state }))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// All processes alive, startup completed and `/readyz` answers ok.
    pub async fn is_healthy(&self) -> bool {
        if !self.state.ready || !self.state.processes.iter().all(process::is_alive) {
            return false;
        }
        let check = async {
            let client = self.client().await?;
            readyz(&client).await
        };
        matches!(
            tokio::time::timeout(Duration::from_secs(10), check).await,
            Ok(Ok(()))
        )
    }

    /// Stops the named instance (if its state exists) and removes its state
    /// directory. Returns whether there was anything to stop.
    pub fn stop(name: &str) -> anyhow::Result<bool> {
        validate_name(name)?;
        let dir = state_root().join(name);
        let existed = dir.exists();
        if let Some(cp) = Self::load(name)? {
            stop_processes(&cp.state.processes);
        }
        if existed {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        let _ = std::fs::remove_file(state_root().join(format!("{name}.lock")));
        Ok(existed)
    }

    /// Starts a fresh instance, replacing whatever state `name` had. The
    /// binaries must exist (see [`crate::ensure_binaries`]).
    pub async fn start(name: &str) -> anyhow::Result<ControlPlane> {
        Self::start_with(name, &ControlPlaneOptions::default()).await
    }

    /// Like [`ControlPlane::start`] with extra kube-apiserver flags and an optional audit
    /// policy (see [`ControlPlaneOptions`]). The binaries must exist.
    pub async fn start_with(
        name: &str,
        opts: &ControlPlaneOptions,
    ) -> anyhow::Result<ControlPlane> {
        validate_name(name)?;
        Self::stop(name)?;
        let dir = state_root().join(name);
        let started = Instant::now();
        let mut cp = prepare(name, &dir)?;
        cp.state.extra_apiserver_args = state::apiserver_flags_for(opts, &dir)?;
        cp.save()?;
        match cp.launch().await {
            Ok(()) => {
                eprintln!(
                    "rflux-e2e: control plane {name:?} up in {:.1}s (KUBECONFIG={})",
                    started.elapsed().as_secs_f64(),
                    cp.state.kubeconfig.display()
                );
                Ok(cp)
            }
            Err(e) => {
                let logs = cp.log_tails(15);
                stop_processes(&cp.state.processes);
                Err(e.context(format!(
                    "starting control plane {name:?} (state kept in {} for inspection)\n{logs}",
                    dir.display()
                )))
            }
        }
    }

    async fn launch(&mut self) -> anyhow::Result<()> {
        let bin = bin_dir();
        let etcd_data = self.state.dir.join("etcd");
        std::fs::create_dir_all(&etcd_data)?;
        set_mode(&etcd_data, 0o700)?;
        let etcd_args = args::etcd(&self.state);
        let apiserver_args = args::apiserver(&self.state);
        let kcm_args = args::controller_manager(&self.state);
        let scheduler_args = args::scheduler(&self.state);
        let kwok_args = args::kwok(&self.state);

        self.spawn(&bin, "etcd", &etcd_args)?;
        self.wait_etcd_healthy().await?;
        self.spawn(&bin, "kube-apiserver", &apiserver_args)?;
        self.wait_apiserver_ready().await?;
        let client = self.client().await?;

        self.spawn(&bin, "kube-controller-manager", &kcm_args)?;
        self.spawn(&bin, "kube-scheduler", &scheduler_args)?;
        self.spawn(&bin, "kwok", &kwok_args)?;

        create_node(&client).await?;
        self.wait_for("Node Ready", Duration::from_secs(60), || {
            let client = client.clone();
            async move { node_ready(&client, NODE_NAME).await }
        })
        .await?;
        self.wait_for(
            "ServiceAccount default/default",
            Duration::from_secs(60),
            || {
                let client = client.clone();
                async move { service_account_exists(&client, "default", "default").await }
            },
        )
        .await?;
        self.state.ready = true;
        self.save()
    }

    /// Waits (up to 30 s) until etcd answers `/health` with `"health":"true"`.
    async fn wait_etcd_healthy(&self) -> anyhow::Result<()> {
        let etcd_port = self.state.etcd_client_port;
        self.wait_for("etcd /health", Duration::from_secs(30), || async move {
            let body = http_get_plain(etcd_port, "/health")?;
            if body.contains("\"health\":\"true\"") {
                Ok(())
            } else {
                bail!("etcd not healthy: {body}")
            }
        })
        .await
    }

    /// Waits (up to 120 s) until kube-apiserver answers `/readyz` with `ok`.
    async fn wait_apiserver_ready(&self) -> anyhow::Result<()> {
        let client = self.client().await?;
        self.wait_for("kube-apiserver /readyz", Duration::from_secs(120), || {
            let client = client.clone();
            async move { readyz(&client).await }
        })
        .await
    }

    fn spawn(&mut self, bin: &Path, name: &str, args: &[String]) -> anyhow::Result<()> {
        let log = self.state.dir.join("logs").join(format!("{name}.log"));
        let info = process::spawn(name, &bin.join(name), args, &self.state.dir, &log)?;
        self.state.processes.push(info);
        // Saved after every start so that `down` can clean up a partial start.
        self.save()
    }

    fn save(&self) -> anyhow::Result<()> {
        let json = serde_json::to_vec_pretty(&self.state)?;
        write_atomic(&self.state.dir.join(STATE_FILE), &json)
    }

    /// Polls `check` until it succeeds, failing early when a process died.
    async fn wait_for<F, Fut>(&self, what: &str, timeout: Duration, check: F) -> anyhow::Result<()>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match tokio::time::timeout(Duration::from_secs(10), check()).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => e,
                Err(_) => anyhow!("check timed out"),
            };
            if let Some(dead) = self.state.processes.iter().find(|p| !process::is_alive(p)) {
                bail!("{} exited while waiting for {what}", dead.name);
            }
            if Instant::now() >= deadline {
                return Err(last.context(format!("timed out after {timeout:?} waiting for {what}")));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The last `lines` lines of every process's log, for a failure message.
    pub fn log_tails(&self, lines: usize) -> String {
        self.state
            .processes
            .iter()
            .map(|p| {
                format!(
                    "--- {} ({}):\n{}",
                    p.name,
                    p.log.display(),
                    process::log_tail(&p.log, lines)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The admin (system:masters) client.
    pub async fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::try_from(self.config().await?)?)
    }

    /// The admin client configuration (from the kubeconfig).
    pub async fn config(&self) -> anyhow::Result<Config> {
        let kubeconfig = Kubeconfig::read_from(&self.state.kubeconfig)
            .with_context(|| format!("reading {}", self.state.kubeconfig.display()))?;
        Ok(Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)
    }

    /// A client that authenticates as admin and impersonates `user` (with
    /// `groups`), e.g. `system:serviceaccount:<ns>:<sa>`.
    pub async fn impersonating_client(
        &self,
        user: &str,
        groups: &[&str],
    ) -> anyhow::Result<Client> {
        let mut config = self.config().await?;
        config.auth_info.impersonate = Some(user.to_string());
        if !groups.is_empty() {
            config.auth_info.impersonate_groups =
                Some(groups.iter().map(|g| g.to_string()).collect());
        }
        Ok(Client::try_from(config)?)
    }

    /// Path of the admin kubeconfig (client certificate, embedded CA).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.state.kubeconfig
    }

    /// Creates a namespace `prefix-<random>` and waits for its `default`
    /// ServiceAccount (so Pods can be created right away). Returns its name.
    pub async fn create_namespace(&self, prefix: &str) -> anyhow::Result<String> {
        let client = self.client().await?;
        let name = unique_name(prefix);
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"rflux-e2e": "true"}},
        }))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match service_account_exists(&client, &name, "default").await {
                Ok(()) => return Ok(name),
                Err(e) if Instant::now() >= deadline => {
                    return Err(e.context(format!("namespace {name}: no default ServiceAccount")));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Instance name (`default`, `remote`, …).
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// API server URL, `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.state.server
    }

    /// PEM of the cluster CA (signs the API server and admin certificates).
    pub fn ca_pem(&self) -> anyhow::Result<String> {
        Ok(std::fs::read_to_string(&self.state.ca_cert)?)
    }

    /// A static bearer token for a `system:masters` user (`--token-auth-file`).
    pub fn admin_token(&self) -> &str {
        &self.state.admin_token
    }

    /// A kubeconfig (YAML text) that authenticates with [`Self::admin_token`]
    /// against `server` (default: this instance's URL); handy for kubeconfig
    /// Secrets in remote-cluster tests.
    pub fn token_kubeconfig(&self, server: Option<&str>) -> anyhow::Result<String> {
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem()?);
        Ok(kubeconfig_yaml(
            &self.state.name,
            server.unwrap_or(&self.state.server),
            &ca,
            &format!("    token: {}\n", self.state.admin_token),
        ))
    }

    /// State directory of this instance (logs are in `logs/`).
    pub fn state_dir(&self) -> &Path {
        &self.state.dir
    }

    /// The recorded state (ports, processes).
    pub fn state(&self) -> &ControlPlaneState {
        &self.state
    }

    /// Sum of the resident set sizes of the instance's processes, in KiB.
    pub fn rss_kib(&self) -> u64 {
        self.state
            .processes
            .iter()
            .filter_map(|p| process::rss_kib(p.pid))
            .sum()
    }
}

fn stop_processes(procs: &[ProcessInfo]) {
    let (etcd, rest): (Vec<ProcessInfo>, Vec<ProcessInfo>) =
        procs.iter().cloned().partition(|p| p.name == "etcd");
    let killed = process::stop(&rest, Duration::from_secs(15));
    let killed_etcd = process::stop(&etcd, Duration::from_secs(10));
    for name in killed.iter().chain(&killed_etcd) {
        eprintln!("rflux-e2e: {name} did not stop on SIGTERM; killed");
    }
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

fn kubeconfig_yaml(name: &str, server: &str, ca_b64: &str, user_fields: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: rflux-e2e-{name}\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {ca_b64}\nusers:\n- name: rflux-e2e-{name}-admin\n  user:\n{user_fields}\
         contexts:\n- name: rflux-e2e-{name}\n  context:\n    cluster: rflux-e2e-{name}\n    user: rflux-e2e-{name}-admin\n\
         current-context: rflux-e2e-{name}\n"
    )
}

/// Creates the state directory, PKI, kubeconfig and token file; picks ports.
fn prepare(name: &str, dir: &Path) -> anyhow::Result<ControlPlane> {
    let pki_dir = dir.join("pki");
    std::fs::create_dir_all(&pki_dir).with_context(|| format!("creating {}", pki_dir.display()))?;
    std::fs::create_dir_all(dir.join("logs"))?;
    let ca = pki::create_ca(&pki_dir, "ca", &format!("rflux-e2e-{name}-ca"))?;
    pki::issue(
        &ca,
        &pki_dir,
        "apiserver",
        "/CN=kube-apiserver",
        &[
            "IP:127.0.0.1",
            "IP:10.0.0.1",
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
        ],
        Usage::Server,
    )?;
    let admin = pki::issue(
        &ca,
        &pki_dir,
        "admin",
        "/O=system:masters/CN=rflux-e2e-admin",
        &[],
        Usage::Client,
    )?;
    pki::rsa_key_pair(&pki_dir, "sa")?;

    let admin_token = random_suffix(32);
    std::fs::write(
        dir.join("tokens.csv"),
        format!("{admin_token},rflux-e2e-token-admin,rflux-e2e-token-admin,\"system:masters\"\n"),
    )?;
    let b64 = |p: &Path| -> anyhow::Result<String> {
        Ok(base64::engine::general_purpose::STANDARD.encode(std::fs::read(p)?))
    };
    let apiserver_port = free_port()?;
    let server = format!("https://127.0.0.1:{apiserver_port}");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        kubeconfig_yaml(
            name,
            &server,
            &b64(&ca.cert)?,
            &format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(&admin.cert)?,
                b64(&admin.key)?
            ),
        ),
    )?;
    let state = ControlPlaneState {
        name: name.to_string(),
        dir: dir.to_path_buf(),
        kubeconfig,
        server,
        ca_cert: ca.cert,
        admin_token,
        etcd_client_port: free_port()?,
        etcd_peer_port: free_port()?,
        apiserver_port,
        kwok_port: free_port()?,
        processes: Vec::new(),
        started_at: now_unix(),
        ready: false,
        extra_apiserver_args: Vec::new(),
    };
    let cp = ControlPlane { state };
    cp.save()?;
    Ok(cp)
}

/// `GET /readyz` as admin; ok when the body is `ok`.
async fn readyz(client: &Client) -> anyhow::Result<()> {
    let req = http::Request::get("/readyz").body(Vec::new())?;
    let body = client.request_text(req).await?;
    if body.trim() == "ok" {
        Ok(())
    } else {
        bail!("/readyz: {body}")
    }
}

async fn create_node(client: &Client) -> anyhow::Result<()> {
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "kubernetes.io/role": "agent",
                "node-role.kubernetes.io/agent": "",
            },
        },
        "spec": {"providerID": format!("kwok://{NODE_NAME}")},
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "1000"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "1000"},
            "nodeInfo": {
                "architecture": "amd64",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "fake",
                "operatingSystem": "linux",
            },
            "phase": "Running",
        },
    }))?;
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .context("creating the kwok Node")?;
    Ok(())
}

async fn node_ready(client: &Client, name: &str) -> anyhow::Result<()> {
    let node = Api::<Node>::all(client.clone()).get(name).await?;
    let ready = node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if ready {
        Ok(())
    } else {
        bail!("node {name} not Ready yet")
    }
}

async fn service_account_exists(client: &Client, ns: &str, name: &str) -> anyhow::Result<()> {
    match Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?
    {
        Some(_) => Ok(()),
        None => bail!("serviceaccount {ns}/{name} not found yet"),
    }
}

/// Minimal HTTP/1.0 GET against 127.0.0.1:`port`; returns the whole response.
fn http_get_plain(port: u16, path: &str) -> anyhow::Result<String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn instance_names_are_validated() {
        assert!(validate_name("default").is_ok());
        assert!(validate_name("remote-2").is_ok());
        for bad in ["", "Remote", "a/b", "..", crate::GIT_INSTANCE] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn kubeconfig_text_parses() {
        let text = kubeconfig_yaml("x", "https://127.0.0.1:1", "Q0E=", "    token: abc\n");
        let kc = Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("rflux-e2e-x"));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:1"));
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_some());
    }
}
