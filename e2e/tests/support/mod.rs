//! Helpers shared by the Kustomization reconciler e2e tests: CRD install, an artifact
//! publisher (package a tree, serve it, patch a GitRepository's status), object builders.
#![allow(dead_code, clippy::unwrap_used)]

pub mod procs;
pub mod rsctl;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kustomize_controller::fetch::{ArtifactFetcher, FetcherOptions};
use kustomize_controller::reconcile::{Context, reconcile};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_common::runtime::{CancellationToken, EventRecorder, conditions};
use rflux_e2e::{lock_file, repo_root, state_root};
use serde_json::{Value, json};
use source_controller::artifact::{ArtifactError, package_to_file, serve_listener};

/// Takes `<e2e state>/crds.lock`, so the CRD compatibility test cannot swap CRDs meanwhile.
/// Hold the returned lock.
pub async fn lock_crds() -> std::fs::File {
    let lock_path = state_root().join("crds.lock");
    tokio::task::spawn_blocking(move || lock_file(&lock_path))
        .await
        .unwrap()
        .unwrap()
}

/// Our CRDs as `(name, file under manifests/crds)`: what the controllers serve and watch.
pub const OUR_CRDS: [(&str, &str); 5] = [
    (
        "gitrepositories.source.toolkit.fluxcd.io",
        "gitrepositories.yaml",
    ),
    (
        "ocirepositories.source.toolkit.fluxcd.io",
        "ocirepositories.yaml",
    ),
    (
        "kustomizations.kustomize.toolkit.fluxcd.io",
        "kustomizations.yaml",
    ),
    ("resourcesets.fluxcd.controlplane.io", "resourcesets.yaml"),
    (
        "resourcesetinputproviders.fluxcd.controlplane.io",
        "resourcesetinputproviders.yaml",
    ),
];

/// Takes the CRD lock ([`lock_crds`]) and installs our CRDs ([`OUR_CRDS`]: GitRepository,
/// OCIRepository, Kustomization, ResourceSet, ResourceSetInputProvider) when absent. Hold the returned lock.
pub async fn lock_crds_and_install(client: &Client) -> std::fs::File {
    let lock = lock_crds().await;
    for (name, file) in OUR_CRDS {
        ensure_crd(client, name, file).await.unwrap();
    }
    lock
}

/// Installs our CRD `name` from `manifests/crds/<file>` when absent; waits until established.
pub async fn ensure_crd(client: &Client, name: &str, file: &str) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds.get_opt(name).await?.is_none() {
        let text = std::fs::read_to_string(repo_root().join("manifests/crds").join(file))?;
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(&text).map_err(|e| anyhow!("parsing CRD {file}: {e}"))?;
        crds.create(&PostParams::default(), &crd).await?;
    }
    wait_crd_established(&crds, name).await
}

/// Waits (up to 30 s) until the CRD `name` has condition Established=True.
pub async fn wait_crd_established(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let crd = crds.get(name).await?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("CRD {name} not established");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Condition `type_` of a GitRepository's status.
pub fn gitrepo_condition<'a>(
    obj: &'a GitRepository,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    obj.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The artifact in a GitRepository's status; panics when there is none.
pub fn gitrepo_artifact(obj: &GitRepository) -> &rflux_common::api::meta::Artifact {
    obj.status
        .as_ref()
        .and_then(|s| s.artifact.as_ref())
        .unwrap_or_else(|| panic!("GitRepository {} has no artifact", obj.name_any()))
}

/// Polls the GitRepository `name` every 250 ms until `pred` holds (returns it) or 90 s pass
/// (panics with `what` and the status).
pub async fn wait_gitrepo(
    api: &Api<GitRepository>,
    name: &str,
    what: &str,
    pred: impl Fn(&GitRepository) -> bool,
) -> GitRepository {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let obj = api.get(name).await.unwrap();
        if pred(&obj) {
            return obj;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {name}: {what}; status: {}",
            serde_json::to_string_pretty(&obj.status).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The running loopback artifact server from [`serve_artifacts`].
pub struct ArtifactServer {
    stop: CancellationToken,
    server: tokio::task::JoinHandle<Result<(), ArtifactError>>,
}

impl ArtifactServer {
    /// Stops the server and asserts it shut down cleanly.
    pub async fn stop(self) {
        self.stop.cancel();
        self.server.await.unwrap().unwrap();
    }
}

/// Serves a fresh storage directory on loopback; returns a [`Publisher`] for namespace `ns`
/// over it and the server (stop it at the end of the test).
pub async fn serve_artifacts(client: &Client, ns: &str) -> (Publisher, ArtifactServer) {
    let storage = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(serve_listener(storage.path().to_path_buf(), listener, {
        let stop = stop.clone();
        async move { stop.cancelled().await }
    }));
    let publisher = Publisher {
        storage,
        addr,
        client: client.clone(),
        ns: ns.to_string(),
    };
    (publisher, ArtifactServer { stop, server })
}

/// An in-process reconciler context for tests: the fetcher caches in `cache` and retries once
/// after 100–200 ms; dependencies are re-checked after 2 s.
pub fn reconcile_context(
    client: &Client,
    config: kube::Config,
    cache: &std::path::Path,
) -> Context {
    let mut fopts = FetcherOptions::new(cache);
    fopts.retries = 1;
    fopts.retry_wait_min = Duration::from_millis(100);
    fopts.retry_wait_max = Duration::from_millis(200);
    let mut ctx = Context::new(
        client.clone(),
        config,
        EventRecorder::new(client.clone(), "kustomize-controller", "e2e"),
        ArtifactFetcher::new(fopts).unwrap(),
    );
    ctx.requeue_dependency = Duration::from_secs(2);
    ctx
}

/// Serves packaged artifacts and publishes them on GitRepositories.
pub struct Publisher {
    pub storage: tempfile::TempDir,
    pub addr: std::net::SocketAddr,
    pub client: Client,
    pub ns: String,
}

impl Publisher {
    /// Writes `files` into a fresh directory, packages it, and sets it as `repo`'s artifact at
    /// revision `main@sha1:<commit>`. Returns the revision.
    pub async fn publish(&self, repo: &str, commit: u32, files: &[(&str, &str)]) -> String {
        let src = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let p = src.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        let file = format!("{repo}-{commit}.tar.gz");
        let digest = package_to_file(src.path(), &self.storage.path().join(&file), None).unwrap();
        let size = std::fs::metadata(self.storage.path().join(&file))
            .unwrap()
            .len();
        let revision = format!("main@sha1:{commit:040x}");
        let api: Api<GitRepository> = Api::namespaced(self.client.clone(), &self.ns);
        if api.get_opt(repo).await.unwrap().is_none() {
            let obj: GitRepository = serde_json::from_value(json!({
                "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                "metadata": {"name": repo, "namespace": self.ns},
                "spec": {"url": "https://git.invalid/repo.git", "interval": "10m",
                         "ref": {"branch": "main"}}
            }))
            .unwrap();
            api.create(&PostParams::default(), &obj).await.unwrap();
        }
        let status = json!({"status": {
            "observedGeneration": 1,
            "artifact": {
                "path": format!("gitrepository/{}/{repo}/{file}", self.ns),
                "url": format!("http://{}/{file}", self.addr),
                "revision": revision,
                "digest": digest,
                "lastUpdateTime": "2026-01-01T00:00:00Z",
                "size": size,
            },
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "Succeeded",
                "message": format!("stored artifact for revision '{revision}'"),
                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1
            }]
        }});
        api.patch_status(repo, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        revision
    }
}

pub fn kustomization(ns: &str, name: &str, repo: &str, path: &str, extra: Value) -> Kustomization {
    let mut spec = json!({
        "interval": "10m", "retryInterval": "1m", "timeout": "30s", "prune": true, "path": path,
        "targetNamespace": ns,
        "sourceRef": {"kind": "GitRepository", "name": repo}
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": ns}, "spec": spec
    }))
    .unwrap()
}

/// Creates the Kustomization built by [`kustomization`].
pub async fn create_ks(
    api: &Api<Kustomization>,
    ns: &str,
    name: &str,
    repo: &str,
    path: &str,
    extra: Value,
) {
    api.create(
        &PostParams::default(),
        &kustomization(ns, name, repo, path, extra),
    )
    .await
    .unwrap();
}

/// Reads the object fresh and runs one reconcile; returns the object afterwards.
pub async fn run_once(api: &Api<Kustomization>, ctx: &Arc<Context>, name: &str) -> Kustomization {
    let obj = api.get(name).await.unwrap();
    reconcile(Arc::new(obj), ctx.clone()).await.unwrap();
    api.get(name).await.unwrap()
}

pub fn ready(ks: &Kustomization) -> (String, String, String) {
    let conds = ks
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let c = conditions::get(&conds, "Ready")
        .cloned()
        .unwrap_or_else(|| panic!("no Ready condition on {}: {conds:?}", ks.name_any()));
    (c.status, c.reason, c.message)
}

/// Asserts the Kustomization's Ready condition has `want_status` and `want_reason`; returns
/// its message.
pub fn assert_ready(ks: &Kustomization, want_status: &str, want_reason: &str) -> String {
    let (st, reason, msg) = ready(ks);
    assert_eq!(
        (st.as_str(), reason.as_str()),
        (want_status, want_reason),
        "{}: {msg}",
        ks.name_any()
    );
    msg
}

pub fn cm_file(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

pub async fn cm_value(cms: &Api<ConfigMap>, name: &str) -> Option<String> {
    cms.get_opt(name)
        .await
        .unwrap()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .and_then(|c| c.data)
        .and_then(|d| d.get("value").cloned())
}
