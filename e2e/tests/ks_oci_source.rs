//! kustomize-controller with `sourceRef.kind: OCIRepository`, on the real control plane, as a
//! process (its source watches run), with NO source-controller acting on the OCIRepositories:
//! they carry no watch label, so the harness's source-controller ignores them. The test plays
//! source-controller itself: it packs a tree with `package_to_file`, serves it on loopback and
//! patches the OCIRepository's status (status subresource) with the artifact, as
//! source-controller would after a pull (revision `latest@sha256:<manifest digest>`, the
//! manifest annotations in `artifact.metadata`).
//!
//! Steps:
//! 1. An OCIRepository without an artifact: the Kustomization is Ready=False `ArtifactFailed`
//!    "Source artifact not found, retrying in 2s" (Flux's message; `--requeue-dependency=2s`).
//! 2. The artifact appears: Ready, `lastAppliedRevision` = the OCI revision,
//!    `lastAppliedOriginRevision` = the `org.opencontainers.image.revision` annotation, the
//!    ConfigMap applied.
//! 3. A new artifact revision: applied again at once, through the OCIRepository watch (the
//!    Kustomization's interval is an hour, and nothing else touches it).
//! 4. `--no-cross-namespace-refs`: an OCIRepository (and a GitRepository) in another namespace
//!    is refused, Stalled with `AccessDenied` and Flux's message; a missing OCIRepository is
//!    `ArtifactFailed` `ocirepositories.source.toolkit.fluxcd.io "<name>" not found` (Flux's
//!    message: the API server's); a Bucket is refused.
//! 5. Deletion prunes what the OCI artifact applied.
//!
//! Holds `<e2e state>/crds.lock` so the CRD compatibility test cannot swap CRDs meanwhile.
//! Needs the controller binaries built (`cargo build -p source-controller -p
//! kustomize-controller`).
#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use rflux_common::api::kustomization::Kustomization;
use rflux_common::api::ocirepository::OciRepository;
use rflux_e2e::ControlPlane;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use source_controller::artifact::package_to_file;
use support::procs::{
    ControllerOptions, Controllers, apply_value, ks_condition, ks_ready, wait_ks, wait_list_empty,
};
use support::{Publisher, cm_file, cm_value, lock_crds_and_install, serve_artifacts};

const TIMEOUT: Duration = Duration::from_secs(90);
/// How long a watch-triggered reconcile may take at most (the interval is an hour).
const WATCH_BOUND: Duration = Duration::from_secs(45);
const ORIGIN_SOURCE: &str = "https://git.example/app.git";

/// Packs `files` as the artifact of OCIRepository `name` in `ns` at tag `latest`, serves it,
/// and patches the status like source-controller after a pull; returns `(revision, origin
/// revision)`. `n` tells the revisions apart.
async fn publish_oci(
    publisher: &Publisher,
    ns: &str,
    name: &str,
    n: u32,
    files: &[(&str, &str)],
) -> (String, String) {
    let src = tempfile::tempdir().unwrap();
    for (path, content) in files {
        let p = src.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    let file = format!("oci-{ns}-{name}-{n}.tar.gz");
    let stored = publisher.storage.path().join(&file);
    let digest = package_to_file(src.path(), &stored, None).unwrap();
    let size = std::fs::metadata(&stored).unwrap().len();
    // The manifest digest: of a manifest naming this layer (what a registry would answer).
    let origin = format!("main@sha1:{n:040x}");
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "layers": [{"mediaType": "application/vnd.cncf.flux.content.v1.tar+gzip",
                    "digest": digest, "size": size}],
        "annotations": {"org.opencontainers.image.revision": origin}
    });
    let manifest_digest = hex(&Sha256::digest(manifest.to_string().as_bytes()));
    let revision = format!("latest@sha256:{manifest_digest}");
    let status = json!({"status": {
        "observedGeneration": 1,
        "url": format!("http://{}/{file}", publisher.addr),
        "artifact": {
            "path": format!("ocirepository/{ns}/{name}/{file}"),
            "url": format!("http://{}/{file}", publisher.addr),
            "revision": revision,
            "digest": digest,
            "lastUpdateTime": "2026-01-01T00:00:00Z",
            "size": size,
            "metadata": {
                "org.opencontainers.image.created": "1970-01-01T00:00:00Z",
                "org.opencontainers.image.source": ORIGIN_SOURCE,
                "org.opencontainers.image.revision": origin,
            },
        },
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "Succeeded",
            "message": format!("stored artifact for digest '{revision}'"),
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1
        }]
    }});
    let api: Api<OciRepository> = Api::namespaced(publisher.client.clone(), ns);
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    (revision, origin)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OCIRepository without the controllers' watch label (no source-controller acts on it).
async fn create_oci_repository(client: &Client, ns: &str, name: &str) {
    let obj = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"url": format!("oci://127.0.0.1:9/e2e/{name}"), "interval": "10m"}
    });
    apply_value(client, &obj, "e2e").await.unwrap();
}

/// A Kustomization of `./deploy` with the controllers' label, an hour's interval and the
/// given `sourceRef`.
async fn create_ks(client: &Client, ctl: &Controllers, ns: &str, name: &str, source: Value) {
    let mut obj = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"interval": "1h", "retryInterval": "1h", "timeout": "60s", "prune": true,
                 "path": "./deploy", "targetNamespace": ns, "sourceRef": source}
    });
    ctl.label_object(&mut obj);
    apply_value(client, &obj, "e2e").await.unwrap();
}

/// Ready=False with `reason` and exactly `message`.
fn failed(k: &Kustomization, reason: &str, message: &str) -> bool {
    ks_condition(k, "Ready")
        .is_some_and(|c| c.status == "False" && c.reason == reason && c.message == message)
}

fn stalled(k: &Kustomization) -> bool {
    ks_condition(k, "Stalled").is_some_and(|c| c.status == "True")
}

fn applied(k: &Kustomization) -> (Option<&str>, Option<&str>) {
    let s = k.status.as_ref();
    (
        s.and_then(|s| s.last_applied_revision.as_deref()),
        s.and_then(|s| s.last_applied_origin_revision.as_deref()),
    )
}

fn deploy(value: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "deploy/kustomization.yaml",
            "resources:\n- cm.yaml\n".into(),
        ),
        ("deploy/cm.yaml", cm_file("from-oci", value)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomization_applies_oci_repository_artifacts() {
    let cp = ControlPlane::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    let _crd_lock = lock_crds_and_install(&client).await;
    let ns = cp.create_namespace("ksoci").await.unwrap();
    let other_ns = cp.create_namespace("ksoci-src").await.unwrap();
    let (publisher, server) = serve_artifacts(&client, &ns).await;
    let opts = ControllerOptions {
        kustomize_args: vec!["--no-cross-namespace-refs".into()],
        ..ControllerOptions::default()
    };
    let mut ctl = Controllers::start(cp, opts).await.unwrap();
    let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // 1. No artifact yet: Flux's ArtifactFailed wait.
    create_oci_repository(&client, &ns, "app").await;
    create_ks(
        &client,
        &ctl,
        &ns,
        "app",
        json!({"kind": "OCIRepository", "name": "app"}),
    )
    .await;
    let k = wait_ks(
        &ks_api,
        &mut ctl,
        TIMEOUT,
        "app",
        "ArtifactFailed without an artifact",
        |k| {
            failed(
                k,
                "ArtifactFailed",
                "Source artifact not found, retrying in 2s",
            )
        },
    )
    .await;
    assert!(!stalled(&k), "waiting for an artifact is not stalling");
    assert_eq!(cm_value(&cms, "from-oci").await, None);

    // 2. The artifact appears: applied at its OCI revision, with the origin revision.
    let files = deploy("one");
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    let (rev1, origin1) = publish_oci(&publisher, &ns, "app", 1, &files).await;
    let k = wait_ks(&ks_api, &mut ctl, TIMEOUT, "app", "Ready at rev1", |k| {
        ks_ready(k) && applied(k).0 == Some(rev1.as_str())
    })
    .await;
    assert!(rev1.starts_with("latest@sha256:"), "{rev1}");
    assert_eq!(applied(&k), (Some(rev1.as_str()), Some(origin1.as_str())));
    assert_eq!(
        ks_condition(&k, "Ready").unwrap().message,
        format!("Applied revision: {rev1}")
    );
    assert_eq!(cm_value(&cms, "from-oci").await.as_deref(), Some("one"));

    // 3. A new revision: the OCIRepository watch reconciles at once (the interval is 1h).
    let files = deploy("two");
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    let started = Instant::now();
    let (rev2, origin2) = publish_oci(&publisher, &ns, "app", 2, &files).await;
    assert_ne!(rev1, rev2);
    let k = wait_ks(
        &ks_api,
        &mut ctl,
        WATCH_BOUND,
        "app",
        "re-applied at rev2 through the watch",
        |k| ks_ready(k) && applied(k).0 == Some(rev2.as_str()),
    )
    .await;
    eprintln!(
        "rev2 applied {:?} after the status patch",
        started.elapsed()
    );
    assert_eq!(applied(&k), (Some(rev2.as_str()), Some(origin2.as_str())));
    assert_eq!(cm_value(&cms, "from-oci").await.as_deref(), Some("two"));

    // 4. Refusals: cross-namespace (both source kinds), missing, unsupported kind.
    create_oci_repository(&client, &other_ns, "shared").await;
    let files = deploy("shared");
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    publish_oci(&publisher, &other_ns, "shared", 3, &files).await;
    for (name, kind) in [
        ("cross-oci", "OCIRepository"),
        ("cross-git", "GitRepository"),
    ] {
        create_ks(
            &client,
            &ctl,
            &ns,
            name,
            json!({"kind": kind, "name": "shared", "namespace": other_ns}),
        )
        .await;
        let want = format!(
            "can't access '{kind}/{other_ns}/shared', cross-namespace references have been blocked"
        );
        let k = wait_ks(&ks_api, &mut ctl, TIMEOUT, name, "AccessDenied", |k| {
            failed(k, "AccessDenied", &want)
        })
        .await;
        assert!(stalled(&k), "{name}: a refused reference stalls");
        assert_eq!(applied(&k), (None, None));
    }
    create_ks(
        &client,
        &ctl,
        &ns,
        "missing",
        json!({"kind": "OCIRepository", "name": "nope"}),
    )
    .await;
    let want = r#"ocirepositories.source.toolkit.fluxcd.io "nope" not found"#.to_string();
    wait_ks(&ks_api, &mut ctl, TIMEOUT, "missing", "not found", |k| {
        failed(k, "ArtifactFailed", &want)
    })
    .await;
    create_ks(
        &client,
        &ctl,
        &ns,
        "bucket",
        json!({"kind": "Bucket", "name": "app"}),
    )
    .await;
    let k = wait_ks(&ks_api, &mut ctl, TIMEOUT, "bucket", "Bucket refused", |k| {
        failed(
            k,
            "ArtifactFailed",
            "source kind 'Bucket' is not supported by this controller (only GitRepository and OCIRepository)",
        )
    })
    .await;
    assert!(stalled(&k));
    // Only `app` applied anything.
    let applied_cms: Vec<String> = cms
        .list(&ListParams::default().labels("kustomize.toolkit.fluxcd.io/name"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(applied_cms, ["from-oci"]);

    // 5. Deletion prunes what the artifact applied.
    ctl.check_alive().unwrap();
    ks_api
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    wait_list_empty(&ks_api, &ctl, TIMEOUT, "Kustomizations finalized").await;
    assert_eq!(cm_value(&cms, "from-oci").await, None);
    ctl.stop();
    server.stop().await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for n in [&ns, &other_ns] {
        let _ = nss.delete(n, &DeleteParams::default()).await;
    }
}
