//! OCIRepository interop with Flux's own controllers (source-controller v1.9.x and
//! kustomize-controller v1.9.x, built by e2e/flux/build.sh), against a real registry
//! (distribution, e2e/registry/build.sh) holding artifacts pushed by the real `flux push
//! artifact`:
//! - our source-controller's OCIRepository artifact consumed by Flux's kustomize-controller
//!   (which downloads `artifact.url` and checks `artifact.digest` before it applies), and
//!   Flux's artifact consumed by ours; then a new push reaches the other side too;
//! - the same OCIRepository and Kustomization reconciled by Flux's controllers (one namespace)
//!   and by ours (another namespace, same registry artifact) leave the same OCIRepository
//!   status (the tar stream inside the artifact byte-identical), the same Kustomization status
//!   and the same applied objects; `flux get sources oci` and `flux get kustomizations` print
//!   the same rows for both; a missing tag fails the same way on both.
//!
//! Slow (Flux's binaries, several controller processes), so these run only with
//! `RFLUX_INTEROP=1` (`make interop`); otherwise each test prints a note and passes. Also
//! skipped, with the reason, when the registry or the flux CLI is missing.
#![allow(clippy::unwrap_used)]

mod flux_common;
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flux_common::{
    Env, Impl, TEST_LABEL, app_files, gunzip, http_get, interop_enabled, ready_status,
};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, Patch, PatchParams, PostParams};
use rflux_common::api::kustomization::Kustomization;
use rflux_common::api::ocirepository::OciRepository;
use rflux_e2e::flux::{CliOutput, FluxCli};
use rflux_e2e::registry::push::{flux_cli, push_artifact};
use rflux_e2e::registry::{Registry, RegistryMode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const TIMEOUT: Duration = Duration::from_secs(180);
const SOURCE: &str = "https://git.example/demo.git";
const REPO: &str = "apps/demo";

/// Keys whose values are times or server-assigned identities: dropped before comparing.
const VOLATILE: &[&str] = &[
    "lastTransitionTime",
    "lastUpdateTime",
    "firstReconciled",
    "lastReconciled",
    "lastReconciledDuration",
    "time",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "lastHandledReconcileAt",
];

/// Whether this test runs (`RFLUX_INTEROP=1`, the registry and the flux CLI built).
fn enabled(test: &str) -> bool {
    if !interop_enabled(test) {
        return false;
    }
    match rflux_e2e::registry::skip_reason().or_else(|| flux_cli().err().map(|e| e.to_string())) {
        Some(why) => {
            eprintln!("{test}: skipped: {why}");
            false
        }
        None => true,
    }
}

/// The origin revision of push `n` (`flux push --revision`).
fn origin(n: u32) -> String {
    format!("main@sha1:{n:040x}")
}

async fn start_registry() -> Arc<Registry> {
    Arc::new(
        tokio::task::spawn_blocking(|| Registry::start(RegistryMode::Http))
            .await
            .unwrap()
            .unwrap(),
    )
}

/// `flux push artifact` of [`app_files`]`(value)` to `<reg>/apps/demo:latest`; returns the
/// OCI revision `latest@sha256:…`.
async fn push(reg: &Arc<Registry>, value: &str, n: u32) -> String {
    let reg = reg.clone();
    let value = value.to_string();
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in app_files(&value) {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let digest = push_artifact(&reg, REPO, "latest", dir.path(), SOURCE, &origin(n)).unwrap();
        format!("latest@{digest}")
    })
    .await
    .unwrap()
}

fn ocirepositories(env: &Env) -> Api<OciRepository> {
    Api::namespaced(env.client.clone(), &env.ns)
}

/// The OCIRepository `demo` (`url`, interval 10m: new pushes arrive by request) and the
/// Kustomization `demo` (`./deploy`, prune, targetNamespace = the test namespace) on it.
async fn create_oci_app(env: &Env, url: &str) {
    let labels = json!({ TEST_LABEL: env.run });
    let oci: OciRepository = serde_json::from_value(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
        "metadata": {"name": "demo", "namespace": env.ns, "labels": labels},
        "spec": {"url": url, "interval": "10m", "timeout": "60s"}
    }))
    .unwrap();
    ocirepositories(env)
        .create(&PostParams::default(), &oci)
        .await
        .unwrap();
    let ks: Kustomization = serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "demo", "namespace": env.ns, "labels": labels},
        "spec": {"interval": "10m", "retryInterval": "20s", "timeout": "1m", "prune": true,
                 "path": "./deploy", "targetNamespace": env.ns,
                 "sourceRef": {"kind": "OCIRepository", "name": "demo"}}
    }))
    .unwrap();
    env.kustomizations()
        .create(&PostParams::default(), &ks)
        .await
        .unwrap();
}

/// Waits until the Kustomization `demo` is Ready=True with `lastAppliedRevision` = `revision`.
async fn wait_applied(env: &Env, revision: &str) -> Kustomization {
    let found = wait_for_or_none(TIMEOUT, || async {
        let ks = env.kustomizations().get("demo").await.ok()?;
        let st = ks.status.as_ref()?;
        (ready_status(&ks).as_deref() == Some("True")
            && st.last_applied_revision.as_deref() == Some(revision))
        .then_some(ks)
    })
    .await;
    match found {
        Some(ks) => ks,
        None => panic!(
            "{}: Kustomization demo not applied at {revision}\n{}\n{}",
            env.ns,
            statuses(env).await,
            env.logs_tail(40)
        ),
    }
}

/// Like [`wait_for`], but `None` on timeout (so the caller can print context).
async fn wait_for_or_none<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The statuses of the OCIRepository and the Kustomization `demo`, for failure messages.
async fn statuses(env: &Env) -> String {
    let oci = ocirepositories(env)
        .get("demo")
        .await
        .ok()
        .map(|o| o.status);
    let ks = env
        .kustomizations()
        .get("demo")
        .await
        .ok()
        .map(|o| o.status);
    format!(
        "OCIRepository: {}\nKustomization: {}",
        serde_json::to_string_pretty(&oci).unwrap(),
        serde_json::to_string_pretty(&ks).unwrap()
    )
}

/// Sets `reconcile.fluxcd.io/requestedAt` on the OCIRepository `demo`.
async fn request_source_reconcile(env: &Env) {
    ocirepositories(env)
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                "reconcile.fluxcd.io/requestedAt": rflux_e2e::random_suffix(8)}}})),
        )
        .await
        .unwrap();
}

/// The artifact of the OCIRepository `demo`: downloads `artifact.url` and checks that its
/// sha256 is `artifact.digest`; returns the artifact and the bytes.
async fn checked_artifact(env: &Env) -> (rflux_common::api::meta::Artifact, Vec<u8>) {
    let obj = ocirepositories(env).get("demo").await.unwrap();
    let art = obj.status.unwrap().artifact.unwrap();
    let url = art.url.clone();
    let bytes = tokio::task::spawn_blocking(move || http_get(&url).unwrap())
        .await
        .unwrap();
    assert_eq!(
        format!("sha256:{:x}", Sha256::digest(&bytes)),
        art.digest,
        "{}: the served artifact has the digest its status claims",
        env.ns
    );
    (art, bytes)
}

/// One implementation's source-controller serves an OCIRepository whose artifact the other
/// implementation's kustomize-controller applies; a new push follows the same way.
async fn oci_source_feeds_kustomize(prefix: &str, source: Impl, kustomize: Impl) {
    let mut env = Env::new(prefix, true).await;
    let reg = start_registry().await;
    let rev1 = push(&reg, "one", 1).await;
    let _sc = env.start_source_controller(source);
    let _kc = env.start_kustomize_controller(kustomize);
    create_oci_app(&env, &reg.url(REPO)).await;
    let ks = wait_applied(&env, &rev1).await;
    let st = ks.status.unwrap();
    assert_eq!(
        st.last_applied_origin_revision.as_deref(),
        Some(origin(1).as_str())
    );
    assert_eq!(st.inventory.unwrap().entries.len(), 3);
    assert_eq!(env.cm_value("demo-a").await.as_deref(), Some("one"));
    // The kustomize-controller applied after checking the digest; so do we, and the artifact
    // was served by the source-controller under test (its storage address).
    let (art, _) = checked_artifact(&env).await;
    assert_eq!(art.revision, rev1);
    assert_eq!(
        art.metadata.unwrap()["org.opencontainers.image.revision"],
        origin(1)
    );

    let rev2 = push(&reg, "two", 2).await;
    assert_ne!(rev1, rev2);
    request_source_reconcile(&env).await;
    let ks = wait_applied(&env, &rev2).await;
    assert_eq!(
        ks.status.unwrap().last_applied_origin_revision.as_deref(),
        Some(origin(2).as_str())
    );
    assert_eq!(env.cm_value("demo-a").await.as_deref(), Some("two"));
    let (art, _) = checked_artifact(&env).await;
    assert_eq!(art.revision, rev2);
}

#[tokio::test]
async fn our_oci_artifacts_feed_fluxs_kustomize_controller() {
    if !enabled("our_oci_artifacts_feed_fluxs_kustomize_controller") {
        return;
    }
    oci_source_feeds_kustomize("interop-oci-rs-fk", Impl::Rflux, Impl::Flux).await;
}

#[tokio::test]
async fn fluxs_oci_artifacts_feed_our_kustomize_controller() {
    if !enabled("fluxs_oci_artifacts_feed_our_kustomize_controller") {
        return;
    }
    oci_source_feeds_kustomize("interop-oci-fs-rk", Impl::Flux, Impl::Rflux).await;
}

/// `v` with the namespace name replaced by `NS`, `url` fields dropped and [`VOLATILE`] keys
/// removed, for comparing what two namespaces hold.
fn normalize(v: &Value, ns: &str) -> Value {
    match v {
        Value::String(s) => Value::String(s.replace(ns, "NS")),
        Value::Array(a) => Value::Array(a.iter().map(|x| normalize(x, ns)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !VOLATILE.contains(&k.as_str()) && k.as_str() != "url")
                .map(|(k, x)| (k.clone(), normalize(x, ns)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Paths (`a.b[0].c`) where `a` (Flux) and `b` (ours) differ.
fn differences(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (x.get(k), y.get(k)) {
                    (Some(l), Some(r)) => differences(l, r, &p, out),
                    (l, r) => out.push(format!("{p}: flux={l:?} rflux={r:?}")),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (l, r)) in x.iter().zip(y).enumerate() {
                differences(l, r, &format!("{path}[{i}]"), out);
            }
        }
        (l, r) if l != r => out.push(format!("{path}: flux={l} rflux={r}")),
        _ => {}
    }
}

fn object_view(o: &Value) -> Value {
    json!({
        "labels": o["metadata"]["labels"],
        "annotations": o["metadata"]["annotations"],
        "managedFields": o["metadata"]["managedFields"].as_array().cloned().unwrap_or_default(),
        "data": o["data"],
    })
}

/// The OCIRepository (status, finalizers; the artifact's compressed digest and size replaced
/// by the sha256 of the tar stream inside), the Kustomization (status, finalizers) and the
/// applied objects, normalized.
async fn snapshot(env: &Env) -> Value {
    let oci = ocirepositories(env).get("demo").await.unwrap();
    let mut oci_status = serde_json::to_value(oci.status.as_ref().unwrap()).unwrap();
    // gzip output differs between Go's compress/gzip and ours (docs/artifacts.md): the
    // compressed digest and size differ, the tar stream inside must not.
    let (_, bytes) = checked_artifact(env).await;
    let tar = tokio::task::spawn_blocking(move || gunzip(&bytes).unwrap())
        .await
        .unwrap();
    let artifact = oci_status["artifact"].as_object_mut().unwrap();
    artifact.remove("digest");
    artifact.remove("size");
    artifact.insert(
        "tarSha256".into(),
        json!(format!("{:x}", Sha256::digest(&tar))),
    );
    let ks = env.kustomizations().get("demo").await.unwrap();
    let mut ks_status = serde_json::to_value(ks.status.as_ref().unwrap()).unwrap();
    // The history digest hashes the built YAML, which holds the namespace name; how many
    // reconciles ran depends on timing.
    for h in ks_status["history"].as_array_mut().into_iter().flatten() {
        let h = h.as_object_mut().unwrap();
        h.remove("digest");
        h.remove("totalReconciliations");
    }
    let mut objects = BTreeMap::new();
    for cm in ["demo-a", "demo-b"] {
        let o = serde_json::to_value(env.configmaps().get(cm).await.unwrap()).unwrap();
        objects.insert(format!("ConfigMap/{cm}"), object_view(&o));
    }
    let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), &env.ns);
    let o = serde_json::to_value(sas.get("demo").await.unwrap()).unwrap();
    objects.insert("ServiceAccount/demo".to_string(), object_view(&o));
    normalize(
        &json!({
            "ocirepository": {"status": oci_status,
                              "finalizers": serde_json::to_value(&oci.metadata.finalizers).unwrap()},
            "kustomization": {"status": ks_status,
                              "finalizers": serde_json::to_value(&ks.metadata.finalizers).unwrap()},
            "objects": objects,
        }),
        &env.ns,
    )
}

/// `flux get <args> --namespace <ns>`: the `demo` row, whitespace-normalized.
async fn flux_row(cli: &FluxCli, env: &Env, args: &[&str]) -> String {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--namespace", env.ns.as_str()]);
    let out: CliOutput = cli.run_async(&all).await.unwrap();
    eprintln!("{out}");
    assert!(out.success(), "{out}");
    out.stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some("demo"))
        .unwrap_or_else(|| panic!("no demo row: {out}"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The OCIRepository's conditions (type, status, reason, message), normalized.
async fn failure_view(env: &Env, reg_host: &str) -> Value {
    let oci = ocirepositories(env).get("demo").await.unwrap();
    let st = oci.status.unwrap();
    let conds: Vec<Value> = st
        .conditions
        .iter()
        .flatten()
        .map(|c| {
            json!({"type": c.type_, "status": c.status, "reason": c.reason,
                   "message": c.message.replace(reg_host, "REGISTRY"),
                   "observedGeneration": c.observed_generation})
        })
        .collect();
    normalize(
        &json!({"conditions": conds, "observedGeneration": st.observed_generation,
                "artifactRevision": st.artifact.map(|a| a.revision)}),
        &env.ns,
    )
}

#[tokio::test]
async fn flux_and_rflux_leave_the_same_oci_state() {
    if !enabled("flux_and_rflux_leave_the_same_oci_state") {
        return;
    }
    let reg = start_registry().await;
    let rev1 = push(&reg, "one", 1).await;
    // Namespace A: Flux's controllers. Namespace B: ours. Same registry artifact.
    let mut a = Env::new("interop-oci-same-flux", true).await;
    let mut b = Env::new("interop-oci-same-rflux", true).await;
    let procs = vec![
        a.start_source_controller(Impl::Flux),
        a.start_kustomize_controller(Impl::Flux),
        b.start_source_controller(Impl::Rflux),
        b.start_kustomize_controller(Impl::Rflux),
    ];
    let url = reg.url(REPO);
    create_oci_app(&a, &url).await;
    create_oci_app(&b, &url).await;
    wait_applied(&a, &rev1).await;
    wait_applied(&b, &rev1).await;
    // Let both settle (Flux records its success event and history after the status).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let flux = snapshot(&a).await;
    let ours = snapshot(&b).await;
    eprintln!(
        "flux:  {}\nrflux: {}",
        serde_json::to_string_pretty(&flux).unwrap(),
        serde_json::to_string_pretty(&ours).unwrap()
    );
    // Every difference is collected and reported at the end, so one run shows them all.
    let mut diffs = Vec::new();
    differences(&flux, &ours, "state", &mut diffs);

    // The flux CLI prints the same rows for Flux's objects and ours.
    let cli = FluxCli::new(&flux_cli().unwrap(), a.cp.kubeconfig_path());
    for args in [
        &["get", "sources", "oci"][..],
        &["get", "kustomizations"][..],
    ] {
        let (rf, rr) = (
            flux_row(&cli, &a, args).await,
            flux_row(&cli, &b, args).await,
        );
        if rf != rr {
            diffs.push(format!("flux {}: flux={rf:?} rflux={rr:?}", args.join(" ")));
        }
    }
    let row = flux_row(&cli, &b, &["get", "sources", "oci"]).await;
    let short = format!("latest@sha256:{}", &rev1["latest@sha256:".len()..][..8]);
    assert_eq!(
        row,
        format!("demo {short} False True stored artifact for digest '{short}'")
    );

    // A missing tag: both fail the same way and keep the artifact they had.
    for env in [&a, &b] {
        ocirepositories(env)
            .patch(
                "demo",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"ref": {"tag": "nope"}}})),
            )
            .await
            .unwrap();
    }
    let mut failed = Vec::new();
    for env in [&a, &b] {
        // Sources update `status.observedGeneration` only on success (Flux): the Ready
        // condition's own observedGeneration tells that the new spec was tried.
        let seen = wait_for_or_none(TIMEOUT, || async {
            let o = ocirepositories(env).get("demo").await.ok()?;
            let st = o.status.as_ref()?;
            let ready = st
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready")?;
            (ready.status == "False" && ready.observed_generation == o.metadata.generation)
                .then_some(())
        })
        .await;
        if seen.is_none() {
            panic!(
                "{}: OCIRepository not Ready=False\n{}\n{}",
                env.ns,
                statuses(env).await,
                env.logs_tail(40)
            );
        }
        failed.push(failure_view(env, &reg.host()).await);
    }
    drop(procs);
    eprintln!(
        "failure flux:  {}\nfailure rflux: {}",
        serde_json::to_string_pretty(&failed[0]).unwrap(),
        serde_json::to_string_pretty(&failed[1]).unwrap()
    );
    differences(&failed[0], &failed[1], "failure", &mut diffs);
    // The applied objects stay on both sides.
    for env in [&a, &b] {
        let cms: Api<ConfigMap> = env.configmaps();
        assert!(cms.get_opt("demo-a").await.unwrap().is_some());
    }
    assert!(
        diffs.is_empty(),
        "Flux and rflux differ:\n{}",
        diffs.join("\n")
    );
}
