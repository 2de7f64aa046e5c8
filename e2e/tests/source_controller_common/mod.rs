//! Shared by `source_controller.rs` and `source_controller_more.rs`: the in-process
//! GitRepository reconciler [`Harness`] (its artifact storage in a temp dir and the artifact
//! server on a loopback port, for one test namespace) and helpers to create objects and check
//! served artifacts.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::runtime::controller::ControllerSettings;
use rflux_common::runtime::metrics::Metrics;
use rflux_common::runtime::{CancellationToken, EventRecorder};
use rflux_e2e::{ControlPlane, TestRepo};
use serde_json::{Value, json};
use source_controller::artifact::{
    Digest, DigestAlgorithm, Storage, StorageOptions, package_to_file, serve_listener,
};
use source_controller::gitrepository::{Context, run_gitrepository_controller};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{gitrepo_artifact, gitrepo_condition as condition};

pub const CRD_NAME: &str = "gitrepositories.source.toolkit.fluxcd.io";

/// Installs our GitRepository CRD when absent and waits until it is established.
pub async fn ensure_crd(client: &Client) -> anyhow::Result<()> {
    crate::support::ensure_crd(client, CRD_NAME, "gitrepositories.yaml").await
}

pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<(u16, Vec<u8>)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET /{path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("no header end"))?;
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow!("bad status line"))?
        .parse()?;
    Ok((code, buf[split + 4..].to_vec()))
}

pub fn ready_with(obj: &GitRepository, revision: &str) -> bool {
    condition(obj, "Ready").is_some_and(|c| c.status == "True")
        && obj
            .status
            .as_ref()
            .and_then(|s| s.artifact.as_ref())
            .is_some_and(|a| a.revision == revision)
}

pub async fn create_secret(client: &Client, ns: &str, name: &str, data: Value) {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name},
        "stringData": data,
    }))
    .unwrap();
    api.create(&PostParams::default(), &secret).await.unwrap();
}

pub async fn create_gitrepo(api: &Api<GitRepository>, name: &str, spec: Value) {
    let obj: GitRepository = serde_json::from_value(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

pub async fn request_reconcile(api: &Api<GitRepository>, name: &str, token: &str) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(
            &json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}}),
        ),
    )
    .await
    .unwrap();
}

/// Fetches the artifact over HTTP, checks its digest and size against status, and (when
/// `tree` is given) that it equals packaging that directory.
pub async fn check_served(
    obj: &GitRepository,
    storage_addr: std::net::SocketAddr,
    tree: Option<&Path>,
) {
    let art = gitrepo_artifact(obj);
    let prefix = format!("http://{storage_addr}/");
    let path = art
        .url
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("artifact URL {} does not start with {prefix}", art.url));
    assert_eq!(path, art.path);
    assert!(art.path.ends_with(".tar.gz"));
    let (code, body) = http_get(storage_addr, path).await.unwrap();
    assert_eq!(code, 200, "GET {}", art.url);
    let digest = Digest::of_reader(DigestAlgorithm::Sha256, &mut body.as_slice()).unwrap();
    assert_eq!(digest.to_string(), art.digest);
    assert_eq!(Some(body.len() as i64), art.size);
    if let Some(dir) = tree {
        let out = tempfile::tempdir().unwrap();
        let expected = package_to_file(dir, &out.path().join("x.tar.gz"), None).unwrap();
        assert_eq!(
            expected, art.digest,
            "artifact differs from the packaged work tree"
        );
    }
}

/// Copies the tracked files of the work tree (without .git) to a fresh dir.
pub fn export_tree(repo: &TestRepo) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let files = repo.git(&["ls-files"]).unwrap();
    for f in files.lines().filter(|l| !l.is_empty()) {
        let dst = dir.path().join(f);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(repo.path().join(f), &dst).unwrap();
    }
    dir
}

/// Takes `<e2e state>/crds.lock`, so the CRD compatibility test cannot swap CRDs meanwhile.
/// Knobs of a [`Harness`].
pub struct HarnessOptions {
    /// `--artifact-retention-ttl`.
    pub retention_ttl: Duration,
    /// `--min-retry-delay` / `--max-retry-delay`: the error backoff.
    pub min_retry: Duration,
    pub max_retry: Duration,
}

impl Default for HarnessOptions {
    fn default() -> Self {
        let defaults = StorageOptions::new("/", "");
        HarnessOptions {
            retention_ttl: defaults.retention_ttl,
            min_retry: Duration::from_millis(500),
            max_retry: Duration::from_secs(3),
        }
    }
}

/// The reconciler (as the binary runs it: GitRepository watch plus the Secret watch), its
/// artifact storage and server, for one test namespace.
pub struct Harness {
    pub client: Client,
    pub ns: String,
    pub api: Api<GitRepository>,
    pub storage_addr: std::net::SocketAddr,
    pub stop: CancellationToken,
    pub runner: tokio::task::JoinHandle<()>,
    pub server: tokio::task::JoinHandle<Result<(), source_controller::artifact::ArtifactError>>,
    pub storage_dir: tempfile::TempDir,
}

impl Harness {
    pub async fn start(cp: &ControlPlane, ns_prefix: &str) -> Harness {
        Self::start_with(cp, ns_prefix, HarnessOptions::default()).await
    }

    pub async fn start_with(cp: &ControlPlane, ns_prefix: &str, opts: HarnessOptions) -> Harness {
        let client = cp.client().await.unwrap();
        ensure_crd(&client).await.unwrap();
        let ns = cp.create_namespace(ns_prefix).await.unwrap();
        let storage_dir = tempfile::tempdir().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let storage_addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve_listener(
            storage_dir.path().to_path_buf(),
            listener,
            {
                let stop = stop.clone();
                async move { stop.cancelled().await }
            },
        ));
        let mut storage_opts = StorageOptions::new(storage_dir.path(), storage_addr.to_string());
        storage_opts.retention_ttl = opts.retention_ttl;
        let storage = Storage::new(storage_opts).unwrap();
        let ctx = Arc::new(Context {
            client: client.clone(),
            storage,
            recorder: EventRecorder::new(client.clone(), "source-controller", "e2e"),
            jitter_percentage: 5,
            requeue_dependency: Duration::from_secs(2),
            oci: Default::default(),
        });
        let api: Api<GitRepository> = Api::namespaced(client.clone(), &ns);
        let secrets: Api<PartialObjectMeta<Secret>> = Api::namespaced(client.clone(), &ns);
        let metrics = Metrics::new().unwrap();
        let runner = tokio::spawn(run_gitrepository_controller(
            api.clone(),
            secrets,
            ControllerSettings {
                name: "gitrepository".into(),
                group: "source.toolkit.fluxcd.io".into(),
                kind: "GitRepository".into(),
                concurrency: 4,
                label_selector: String::new(),
            },
            metrics.register_controller("gitrepository", 4),
            opts.min_retry,
            opts.max_retry,
            ctx,
            stop.clone(),
            None,
        ));
        Harness {
            client,
            ns,
            api,
            storage_addr,
            stop,
            runner,
            server,
            storage_dir,
        }
    }

    pub fn storage_root(&self) -> PathBuf {
        self.storage_dir.path().to_path_buf()
    }

    pub async fn shutdown(self) {
        self.stop.cancel();
        self.runner.await.unwrap();
        self.server.await.unwrap().unwrap();
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
    }
}

pub fn artifact_of(obj: &GitRepository) -> rflux_common::api::meta::Artifact {
    obj.status.as_ref().unwrap().artifact.clone().unwrap()
}
