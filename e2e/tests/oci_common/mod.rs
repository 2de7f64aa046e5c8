//! Shared by the OCIRepository tests: the in-process OCIRepository reconciler [`OciHarness`]
//! (as the binary runs it, with its artifact storage in a temp dir and the artifact server on a
//! loopback port, for one test namespace), a real registry per test, and helpers.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use rflux_common::api::ocirepository::OciRepository;
use rflux_common::runtime::controller::ControllerSettings;
use rflux_common::runtime::metrics::Metrics;
use rflux_common::runtime::{CancellationToken, EventRecorder};
use rflux_e2e::ControlPlane;
use serde_json::{Value, json};
use source_controller::artifact::{Storage, StorageOptions, serve_listener};
use source_controller::gitrepository::Context;
use source_controller::ocirepository::{OciSettings, run_ocirepository_controller};

pub const CRD_NAME: &str = "ocirepositories.source.toolkit.fluxcd.io";

/// The reconciler, its storage and artifact server, for one test namespace.
pub struct OciHarness {
    pub client: Client,
    pub ns: String,
    pub api: Api<OciRepository>,
    pub storage_addr: std::net::SocketAddr,
    pub stop: CancellationToken,
    pub runner: tokio::task::JoinHandle<()>,
    pub server: tokio::task::JoinHandle<Result<(), source_controller::artifact::ArtifactError>>,
    pub storage_dir: tempfile::TempDir,
}

impl OciHarness {
    pub async fn start(cp: &ControlPlane, ns_prefix: &str, oci: OciSettings) -> OciHarness {
        let client = cp.client().await.unwrap();
        crate::support::ensure_crd(&client, CRD_NAME, "ocirepositories.yaml")
            .await
            .unwrap();
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
        let storage = Storage::new(StorageOptions::new(
            storage_dir.path(),
            storage_addr.to_string(),
        ))
        .unwrap();
        let ctx = Arc::new(Context {
            client: client.clone(),
            storage,
            recorder: EventRecorder::new(client.clone(), "source-controller", "e2e"),
            jitter_percentage: 5,
            requeue_dependency: Duration::from_secs(2),
            oci,
        });
        let api: Api<OciRepository> = Api::namespaced(client.clone(), &ns);
        let metrics = Metrics::new().unwrap();
        let runner = tokio::spawn(run_ocirepository_controller(
            api.clone(),
            ControllerSettings {
                name: "ocirepository".into(),
                group: "source.toolkit.fluxcd.io".into(),
                kind: "OCIRepository".into(),
                concurrency: 4,
                label_selector: String::new(),
            },
            metrics.register_controller("ocirepository", 4),
            (Duration::from_millis(500), Duration::from_secs(3)),
            ctx,
            stop.clone(),
            None,
        ));
        OciHarness {
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

    /// Creates an OCIRepository with `spec` (url and a 1h interval added unless given).
    pub async fn create(&self, name: &str, url: &str, spec: Value) {
        let mut spec = spec;
        spec["url"] = json!(url);
        if spec.get("interval").is_none() {
            spec["interval"] = json!("1h");
        }
        let obj: OciRepository = serde_json::from_value(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
            "metadata": {"name": name},
            "spec": spec,
        }))
        .unwrap();
        self.api.create(&PostParams::default(), &obj).await.unwrap();
    }

    /// Merge-patches the spec.
    pub async fn patch_spec(&self, name: &str, spec: Value) {
        self.api
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": spec})),
            )
            .await
            .unwrap();
    }

    /// Asks for a reconcile now (`reconcile.fluxcd.io/requestedAt`); returns the value asked.
    pub async fn request(&self, name: &str) -> String {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            .to_string();
        self.api
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"annotations": {
                    "reconcile.fluxcd.io/requestedAt": at}}})),
            )
            .await
            .unwrap();
        at
    }

    /// Waits (up to 60 s) until the object is gone (finalized).
    pub async fn wait_gone(&self, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.api.get_opt(name).await.unwrap().is_some() {
            assert!(Instant::now() < deadline, "{name} was not finalized");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Asks for a reconcile and waits until it has been handled (`lastHandledReconcileAt`).
    pub async fn reconcile_now(&self, name: &str) -> OciRepository {
        let at = self.request(name).await;
        self.wait(name, "the reconcile request handled", |o| {
            o.status
                .as_ref()
                .and_then(|s| s.last_handled_reconcile_at.as_deref())
                == Some(at.as_str())
        })
        .await
    }

    /// Waits (up to 60 s) until `pred` holds; panics with the last status otherwise.
    pub async fn wait(
        &self,
        name: &str,
        what: &str,
        pred: impl Fn(&OciRepository) -> bool,
    ) -> OciRepository {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let obj = self.api.get(name).await.unwrap();
            if pred(&obj) {
                return obj;
            }
            if Instant::now() > deadline {
                panic!(
                    "{name}: timed out waiting for {what}; status: {}",
                    serde_json::to_string_pretty(&obj.status).unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until Ready=True at `revision`.
    pub async fn wait_ready(&self, name: &str, revision: &str) -> OciRepository {
        self.wait(name, &format!("Ready at {revision}"), |o| {
            is_true(o, "Ready") && revision_of(o).as_deref() == Some(revision)
        })
        .await
    }

    /// Waits until Ready=False with `reason`, observed for the current generation.
    pub async fn wait_failed(&self, name: &str, reason: &str) -> OciRepository {
        self.wait(name, &format!("Ready=False/{reason}"), |o| {
            condition(o, "Ready").is_some_and(|c| {
                c.status == "False"
                    && c.reason == reason
                    && c.observed_generation == o.metadata.generation
            })
        })
        .await
    }

    pub async fn secret(&self, name: &str, type_: &str, string_data: Value) {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.ns);
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "type": type_,
            "metadata": {"name": name},
            "stringData": string_data,
        }))
        .unwrap();
        api.create(&PostParams::default(), &secret).await.unwrap();
    }

    /// A `kubernetes.io/dockerconfigjson` Secret for `host` with `user:password`.
    pub async fn pull_secret(&self, name: &str, host: &str, user: &str, password: &str) {
        use base64::Engine;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let cfg = json!({"auths": {host: {"username": user, "password": password, "auth": auth}}});
        self.secret(
            name,
            "kubernetes.io/dockerconfigjson",
            json!({".dockerconfigjson": cfg.to_string()}),
        )
        .await;
    }

    /// The messages of the events about `name` with `reason`.
    pub async fn events(&self, name: &str, reason: &str) -> Vec<String> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let list = api
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .unwrap();
        list.items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.message)
            .collect()
    }

    /// Downloads the artifact of `obj` from the artifact server and lists the tarball's files.
    pub async fn artifact_files(&self, obj: &OciRepository) -> Vec<(String, Vec<u8>)> {
        let url = &obj.status.as_ref().unwrap().artifact.as_ref().unwrap().url;
        let bytes = http_get_url(url).await;
        untar_files(&bytes)
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

pub async fn http_get_url(url: &str) -> Vec<u8> {
    let resp = reqwest::get(url).await.unwrap();
    assert!(resp.status().is_success(), "GET {url}: {}", resp.status());
    resp.bytes().await.unwrap().to_vec()
}

/// The regular files of a gzip tarball, sorted by name.
pub fn untar_files(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    use std::io::Read;
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let mut out = Vec::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        if e.header().entry_type().is_file() {
            let name = e
                .path()
                .unwrap()
                .to_string_lossy()
                .trim_start_matches("./")
                .to_string();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            out.push((name, data));
        }
    }
    out.sort();
    out
}

/// A gzip tarball of `(name, contents)` entries, names written as given (even hostile ones).
pub fn tgz(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    for (name, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        // `set_path` refuses `..`; write the raw name bytes like a hostile tool would.
        let raw = &mut h.as_old_mut().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        builder.append(&h, *data).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

pub fn condition<'a>(o: &'a OciRepository, t: &str) -> Option<&'a Condition> {
    o.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)
}

pub fn is_true(o: &OciRepository, t: &str) -> bool {
    condition(o, t).is_some_and(|c| c.status == "True")
}

pub fn revision_of(o: &OciRepository) -> Option<String> {
    Some(o.status.as_ref()?.artifact.as_ref()?.revision.clone())
}

/// Writes `files` under a new temp dir (the content pushed with `flux push artifact`).
pub fn content_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, data) in files {
        let p: &Path = name.as_ref();
        let full = dir.path().join(p);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, data).unwrap();
    }
    dir
}

/// How many requests of `method` for paths under `/v2/<repo>/<kind>/` the registry has logged.
pub fn registry_requests(
    reg: &rflux_e2e::registry::Registry,
    method: &str,
    repo: &str,
    kind: &str,
) -> usize {
    let log = std::fs::read_to_string(reg.log_path()).unwrap_or_default();
    let needle = format!("/v2/{repo}/{kind}/");
    log.lines()
        .filter(|l| l.contains(&format!("http.request.method={method} ")) && l.contains(&needle))
        .filter(|l| l.contains("response completed"))
        .count()
}
