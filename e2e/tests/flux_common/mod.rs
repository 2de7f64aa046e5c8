//! Shared by `flux_cli.rs` and `flux_interop.rs`: a test environment on the control plane named
//! `flux` (our CRDs, Flux's other source CRDs when Flux's controllers are needed), one namespace,
//! one repository on the test git server, and controller processes (ours or Flux's) that watch
//! only objects carrying this test's label (`--watch-label-selector`), so tests that run at the
//! same time on the same control plane do not see each other's objects.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::flux::{Controller, FluxBinary, ensure_flux_binaries, flux_extra_source_crds};
use rflux_e2e::{ControlPlane, GitServer, TestRepo, free_port, random_suffix};
use serde_json::{Value, json};

use crate::support::lock_crds_and_install;

/// The label every object of one test carries; controllers watch only that label.
pub const TEST_LABEL: &str = "rflux.test/run";

/// Which implementation runs a controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impl {
    /// Ours (the Rust binaries of this workspace).
    Rflux,
    /// Flux's Go binaries (e2e/flux/build.sh).
    Flux,
}

/// One test's namespace, repository and label on the `flux` control plane.
pub struct Env {
    pub cp: &'static ControlPlane,
    pub client: Client,
    pub ns: String,
    pub run: String,
    pub git: &'static GitServer,
    pub repo: TestRepo,
    pub logs: PathBuf,
    storage: Vec<tempfile::TempDir>,
}

/// Manifests of the sample app: two ConfigMaps and a ServiceAccount in `deploy/`.
pub fn app_files(value: &str) -> Vec<(String, String)> {
    vec![
        (
            "deploy/kustomization.yaml".into(),
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources:\n- config.yaml\n- sa.yaml\n\
             commonLabels:\n  app.kubernetes.io/name: demo\n"
                .into(),
        ),
        (
            "deploy/config.yaml".into(),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-a\n\
                 data:\n  value: \"{value}\"\n---\n\
                 apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-b\n  annotations:\n    team: blue\n\
                 data:\n  fixed: \"yes\"\n"
            ),
        ),
        (
            "deploy/sa.yaml".into(),
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: demo\n".into(),
        ),
    ]
}

/// The process name (`rflux-<component>` or `flux-<component>`) and binary of `which`'s
/// `component`; Flux's controllers also get `--enable-leader-election=false` in `args`.
fn controller_program(
    which: Impl,
    component: &str,
    flux: FluxBinary,
    args: &mut Vec<String>,
) -> (String, PathBuf) {
    match which {
        Impl::Rflux => (
            format!("rflux-{component}"),
            rflux_e2e::flux::rflux_binary(component).unwrap(),
        ),
        Impl::Flux => {
            args.push("--enable-leader-election=false".into());
            (
                format!("flux-{component}"),
                ensure_flux_binaries(&[flux]).unwrap()[0].clone(),
            )
        }
    }
}

/// Sets `reconcile.fluxcd.io/requestedAt` to a fresh random value on object `name`; returns
/// the value.
async fn request_reconcile_of<K>(api: &Api<K>, name: &str) -> String
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let value = rflux_e2e::random_suffix(8);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"annotations": {
            "reconcile.fluxcd.io/requestedAt": value}}})),
    )
    .await
    .unwrap();
    value
}

impl Env {
    /// A fresh namespace `<prefix>-…` and repository holding [`app_files`] (`value` = "one")
    /// pushed to `main`. `flux_crds`: also install Flux's non-Git source CRDs (Flux's
    /// controllers need them; builds Flux's source-controller when missing).
    pub async fn new(prefix: &str, flux_crds: bool) -> Env {
        let cp = ControlPlane::shared_named("flux").await.unwrap();
        let client = cp.client().await.unwrap();
        {
            let _lock = lock_crds_and_install(&client).await;
        }
        if flux_crds {
            tokio::task::spawn_blocking(|| {
                ensure_flux_binaries(&[
                    FluxBinary::SourceController,
                    FluxBinary::KustomizeController,
                ])
            })
            .await
            .unwrap()
            .unwrap();
            for file in flux_extra_source_crds().unwrap() {
                install_crd_file(&client, &file).await.unwrap();
            }
        }
        let ns = cp.create_namespace(prefix).await.unwrap();
        let git = GitServer::shared().await.unwrap();
        let repo = git.create_repo(prefix).unwrap();
        for (path, text) in app_files("one") {
            repo.write(&path, &text).unwrap();
        }
        repo.commit("first").unwrap();
        repo.push("main").unwrap();
        let logs = rflux_e2e::state_root().join("flux/test-logs").join(&ns);
        Env {
            cp,
            client,
            ns,
            run: random_suffix(10),
            git,
            repo,
            logs,
            storage: Vec::new(),
        }
    }

    /// `--watch-label-selector` value for this test.
    pub fn selector(&self) -> String {
        format!("{TEST_LABEL}={}", self.run)
    }

    /// Starts a source-controller (ours or Flux's) with its own storage dir and server.
    pub fn start_source_controller(&mut self, which: Impl) -> Controller {
        let storage = tempfile::tempdir().unwrap();
        let port = free_port().unwrap();
        let mut args = vec![
            format!("--storage-path={}", storage.path().display()),
            format!("--storage-addr=127.0.0.1:{port}"),
            format!("--storage-adv-addr=127.0.0.1:{port}"),
            "--watch-all-namespaces=true".into(),
            format!("--watch-label-selector={}", self.selector()),
            "--log-level=debug".into(),
        ];
        let (name, program) = controller_program(
            which,
            "source-controller",
            FluxBinary::SourceController,
            &mut args,
        );
        self.storage.push(storage);
        Controller::start(
            &name,
            &program,
            &args,
            self.cp.kubeconfig_path(),
            "flux-system",
            &self.logs,
        )
        .unwrap()
    }

    /// Starts a kustomize-controller (ours or Flux's).
    pub fn start_kustomize_controller(&self, which: Impl) -> Controller {
        let mut args = vec![
            "--watch-all-namespaces=true".into(),
            format!("--watch-label-selector={}", self.selector()),
            "--requeue-dependency=5s".into(),
            "--log-level=debug".into(),
        ];
        let (name, program) = controller_program(
            which,
            "kustomize-controller",
            FluxBinary::KustomizeController,
            &mut args,
        );
        Controller::start(
            &name,
            &program,
            &args,
            self.cp.kubeconfig_path(),
            "flux-system",
            &self.logs,
        )
        .unwrap()
    }

    /// Creates the GitRepository `name` (branch main of this test's repository, interval 1m)
    /// and the Kustomization `name` (path `path`, prune, targetNamespace = the test namespace).
    pub async fn create_app(&self, name: &str, path: &str) {
        self.create_app_from(name, path, &self.git.http_url(self.repo.name()))
            .await;
    }

    /// Like [`Env::create_app`] with the GitRepository pointing at `url`.
    pub async fn create_app_from(&self, name: &str, path: &str, url: &str) {
        let labels = json!({ TEST_LABEL: self.run });
        let gr: GitRepository = serde_json::from_value(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels},
            "spec": {"url": url, "interval": "1m",
                     "timeout": "30s", "ref": {"branch": "main"}}
        }))
        .unwrap();
        Api::<GitRepository>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &gr)
            .await
            .unwrap();
        let ks: Kustomization = serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels},
            "spec": {"interval": "10m", "retryInterval": "20s", "timeout": "1m", "prune": true,
                     "path": path, "targetNamespace": self.ns,
                     "sourceRef": {"kind": "GitRepository", "name": name}}
        }))
        .unwrap();
        self.kustomizations()
            .create(&PostParams::default(), &ks)
            .await
            .unwrap();
    }

    pub fn kustomizations(&self) -> Api<Kustomization> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn gitrepositories(&self) -> Api<GitRepository> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Waits until the Kustomization is Ready=True with `lastAppliedRevision` ending in `sha`.
    pub async fn wait_ks_applied(&self, name: &str, sha: &str, timeout: Duration) -> Kustomization {
        let want = format!("main@sha1:{sha}");
        wait_for(
            timeout,
            &format!("Kustomization {name} applied at {want}"),
            || async {
                let ks = self.kustomizations().get(name).await.ok()?;
                let st = ks.status.as_ref()?;
                (ready_status(&ks).as_deref() == Some("True")
                    && st.last_applied_revision.as_deref() == Some(want.as_str()))
                .then_some(ks)
            },
        )
        .await
    }

    /// Waits until the GitRepository's artifact is at `sha`.
    pub async fn wait_source(&self, name: &str, sha: &str, timeout: Duration) -> GitRepository {
        let want = format!("main@sha1:{sha}");
        wait_for(
            timeout,
            &format!("GitRepository {name} at {want}"),
            || async {
                let gr = self.gitrepositories().get(name).await.ok()?;
                let rev = gr.status.as_ref()?.artifact.as_ref()?.revision.clone();
                (rev == want).then_some(gr)
            },
        )
        .await
    }

    /// Pushes a new commit with [`app_files`] at `value`; returns its sha.
    pub fn push_value(&self, value: &str) -> String {
        for (path, text) in app_files(value) {
            self.repo.write(&path, &text).unwrap();
        }
        let sha = self.repo.commit(&format!("value {value}")).unwrap();
        self.repo.push("main").unwrap();
        sha
    }

    pub async fn cm_value(&self, name: &str) -> Option<String> {
        self.configmaps()
            .get_opt(name)
            .await
            .unwrap()
            .and_then(|c| c.data)
            .and_then(|d| d.get("value").cloned())
    }

    /// Merge-patches the Kustomization's spec.
    pub async fn patch_ks_spec(&self, name: &str, spec: Value) {
        self.kustomizations()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "spec": spec })),
            )
            .await
            .unwrap();
    }

    /// Sets `reconcile.fluxcd.io/requestedAt` on the Kustomization; returns the value.
    pub async fn request_reconcile(&self, name: &str) -> String {
        request_reconcile_of(&self.kustomizations(), name).await
    }

    /// Sets `reconcile.fluxcd.io/requestedAt` on the GitRepository; returns the value.
    pub async fn request_source_reconcile(&self, name: &str) -> String {
        request_reconcile_of(&self.gitrepositories(), name).await
    }

    /// Dumps the controller logs of this test (for a failing assertion's context).
    pub fn logs_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        if let Ok(dir) = std::fs::read_dir(&self.logs) {
            for e in dir.flatten() {
                out.push_str(&format!(
                    "==> {}\n{}\n",
                    e.path().display(),
                    rflux_e2e::process::log_tail(&e.path(), lines)
                ));
            }
        }
        out
    }
}

/// The Ready condition's status.
pub fn ready_status(ks: &Kustomization) -> Option<String> {
    ks.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// Polls `f` every 300 ms until it returns `Some` or `timeout` passes (then panics with `what`).
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Creates the CRD in `file` when no CRD of that name exists; waits until established.
pub async fn install_crd_file(client: &Client, file: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file)?;
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(&text).map_err(|e| anyhow!("parsing {}: {e}", file.display()))?;
    let name = crd.name_any();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds.get_opt(&name).await?.is_none() {
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    crate::support::wait_crd_established(&crds, &name).await
}

/// Body of `GET <url>` (`http://host:port/path`, HTTP/1.0, 200 only).
pub fn http_get(url: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::{Read, Write};
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("not an http URL: {url}"))?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut s = std::net::TcpStream::connect(host)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.write_all(format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("no end of headers from {url}"))?;
    let head = String::from_utf8_lossy(&buf[..end]);
    if head.split_whitespace().nth(1) != Some("200") {
        bail!("GET {url}: {}", head.lines().next().unwrap_or(""));
    }
    Ok(buf[end + 4..].to_vec())
}

/// The decompressed bytes of a gzip stream (through the system's `gzip -dc`).
pub fn gunzip(data: &[u8]) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
    let input = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output()?;
    writer.join().map_err(|_| anyhow!("writer panicked"))??;
    if !out.status.success() {
        bail!("gzip -dc failed: {}", out.status);
    }
    Ok(out.stdout)
}

/// Whether the tests against Flux's controllers run (`RFLUX_INTEROP=1`, `make interop`); says
/// why not when they do not.
pub fn interop_enabled(test: &str) -> bool {
    if std::env::var("RFLUX_INTEROP").is_ok_and(|v| v == "1") {
        return true;
    }
    eprintln!(
        "{test}: skipped; set RFLUX_INTEROP=1 (make interop) to run it against Flux's controllers"
    );
    false
}
