//! OCIRepository on the real control plane, against a real registry (distribution v3.1.2, built
//! by `e2e/registry/build.sh`) holding artifacts pushed by the real `flux push artifact` and
//! `flux tag artifact` (ocirepository.md §6.1, the worked example): revisions, metadata, the
//! artifact path and contents, ref precedence, semver, `ignore`, `copy`, a new push, events.
//! Skipped, with the reason printed, when the registry or the flux CLI is missing.

#![allow(clippy::unwrap_used)]

mod oci_common;
mod support;

use oci_common::*;
use rflux_e2e::ControlPlane;
use rflux_e2e::registry::push::{PushOptions, push_artifact, push_artifact_with, tag_artifact};
use rflux_e2e::registry::{Registry, RegistryMode};
use serde_json::json;
use source_controller::ocirepository::OciSettings;

const SOURCE: &str = "https://git.example/podinfo.git";
const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";
const REV2: &str = "main@sha1:2222222222222222222222222222222222222222";

fn skip() -> bool {
    let reason = rflux_e2e::registry::skip_reason().or_else(|| {
        rflux_e2e::registry::push::flux_cli()
            .err()
            .map(|e| e.to_string())
    });
    if let Some(r) = reason {
        eprintln!("skipped: {r}");
        return true;
    }
    false
}

#[tokio::test]
async fn ocirepository_follows_flux_pushed_artifacts() {
    if skip() {
        return;
    }
    let cp = ControlPlane::shared().await.unwrap();
    let _lock = support::lock_crds().await;
    let h = OciHarness::start(cp, "oci", OciSettings::default()).await;
    let reg = Registry::start(RegistryMode::Http).unwrap();
    let repo = "apps/podinfo";
    let url = reg.url(repo);

    // §6.1: push 6.1.0 twice (reproducible: same digest), tag it latest, and more tags for semver.
    let content = content_dir(&[
        (
            "deploy/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
        ),
        ("deploy/notes.md", "excluded by spec.ignore below\n"),
    ]);
    let d1 = push_artifact(&reg, repo, "6.1.0", content.path(), SOURCE, REV1).unwrap();
    assert_eq!(
        push_artifact(&reg, repo, "6.1.0", content.path(), SOURCE, REV1).unwrap(),
        d1,
        "--reproducible pushes of the same tree have the same digest"
    );
    tag_artifact(&reg, repo, "6.1.0", "latest").unwrap();
    // §6.1 step 4's tags, in a repository of their own (with both `6.1.0` and `v6.1.0` the
    // pick between equal versions is unspecified in Flux).
    let semver_repo = "apps/semver";
    let semver_url = reg.url(semver_repo);
    let same = push_artifact(&reg, semver_repo, "6.0.0", content.path(), SOURCE, REV1).unwrap();
    assert_eq!(
        same, d1,
        "the same tree and revision give the same manifest in any repository"
    );
    for t in ["v6.1.0", "6.2.0-rc.1", "latest"] {
        tag_artifact(&reg, semver_repo, "6.0.0", t).unwrap();
    }

    // No ref: latest, over plain HTTP without `insecure` (the loopback heuristic).
    h.create("latest", &url, json!({})).await;
    let obj = h.wait_ready("latest", &format!("latest@{d1}")).await;
    let status = obj.status.as_ref().unwrap();
    let art = status.artifact.as_ref().unwrap();
    assert_eq!(
        art.path,
        format!("ocirepository/{}/latest/{d1}.tar.gz", h.ns)
    );
    let meta = art.metadata.as_ref().unwrap();
    assert_eq!(meta["org.opencontainers.image.source"], SOURCE);
    assert_eq!(meta["org.opencontainers.image.revision"], REV1);
    assert_eq!(
        meta["org.opencontainers.image.created"],
        "1970-01-01T00:00:00Z"
    );
    assert_eq!(
        status.url.as_deref(),
        Some(
            format!(
                "http://{}/ocirepository/{}/latest/latest.tar.gz",
                h.storage_addr, h.ns
            )
            .as_str()
        )
    );
    assert_eq!(
        condition(&obj, "Ready").unwrap().message,
        format!("stored artifact for digest 'latest@{d1}'")
    );
    let files = h.artifact_files(&obj).await;
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["deploy/cm.yaml", "deploy/notes.md"]);
    // The stored artifact is re-packed: its digest is not the layer's.
    assert_ne!(art.digest, d1);
    // status.url (latest.tar.gz) serves the same bytes as artifact.url.
    assert_eq!(
        http_get_url(status.url.as_deref().unwrap()).await,
        http_get_url(&art.url).await
    );
    let events = h.events("latest", "NewArtifact").await;
    assert!(
        events.contains(&format!(
            "stored artifact with revision 'latest@{d1}' from '{url}', origin source '{SOURCE}', \
             origin revision '{REV1}'"
        )),
        "{events:?}"
    );

    // ref.tag, ref.digest, semver (with and without prereleases and a filter), spec.ignore.
    h.create(
        "tag",
        &url,
        json!({"ref": {"tag": "6.1.0"}, "ignore": "*.md"}),
    )
    .await;
    h.create(
        "digest",
        &url,
        json!({"ref": {"digest": d1, "tag": "nope"}}),
    )
    .await;
    h.create("semver", &semver_url, json!({"ref": {"semver": ">=6.0.0"}}))
        .await;
    h.create(
        "semver-pre",
        &semver_url,
        json!({"ref": {"semver": ">=6.0.0-0"}}),
    )
    .await;
    h.create(
        "semver-filter",
        &semver_url,
        json!({"ref": {"semver": ">=6.0.0", "semverFilter": ".*-rc.*"}}),
    )
    .await;
    let tagged = h.wait_ready("tag", &format!("6.1.0@{d1}")).await;
    let names: Vec<String> = h
        .artifact_files(&tagged)
        .await
        .into_iter()
        .map(|f| f.0)
        .collect();
    assert_eq!(
        names,
        ["deploy/cm.yaml"],
        "spec.ignore applies to extracted content"
    );
    h.wait_ready("digest", &d1).await;
    h.wait_ready("semver", &format!("v6.1.0@{d1}")).await;
    h.wait_ready("semver-pre", &format!("6.2.0-rc.1@{d1}"))
        .await;
    let failed = h.wait_failed("semver-filter", "ReadOperationFailed").await;
    assert!(
        condition(&failed, "Ready")
            .unwrap()
            .message
            .ends_with("no match found for semver: >=6.0.0"),
        "{:?}",
        condition(&failed, "Ready")
    );

    // copy: the layer stored as it is, so the artifact digest is the layer digest.
    h.create(
        "copy",
        &url,
        json!({"layerSelector": {"mediaType": "application/vnd.cncf.flux.content.v1.tar+gzip",
                                 "operation": "copy"}}),
    )
    .await;
    let copied = h.wait_ready("copy", &format!("latest@{d1}")).await;
    let layer = reg
        .client()
        .unwrap()
        .get_manifest(repo, &d1)
        .await
        .unwrap()
        .json()
        .unwrap()["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(copied.status.unwrap().artifact.unwrap().digest, layer);

    // A layer selector that matches nothing: the pull fails with Flux's message.
    h.create(
        "no-layer",
        &url,
        json!({"layerSelector": {"mediaType": "text/plain"}}),
    )
    .await;
    let nl = h
        .wait_failed("no-layer", "OCIArtifactLayerOperationFailed")
        .await;
    assert!(
        condition(&nl, "Ready")
            .unwrap()
            .message
            .contains("failed to find layer with media type 'text/plain' in artifact")
    );
    // It retries with backoff, pulling from the same repository: removed so that the request
    // counts below see only the no-op reconcile.
    h.api.delete("no-layer", &Default::default()).await.unwrap();
    h.wait_gone("no-layer").await;

    // A new push to latest: a requested reconcile picks it up; the old file is kept until GC.
    let content2 = content_dir(&[(
        "deploy/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n",
    )]);
    let pushed = push_artifact_with(
        &reg,
        repo,
        "latest",
        content2.path(),
        SOURCE,
        REV2,
        &PushOptions::default(),
    )
    .unwrap();
    assert_ne!(pushed.digest, d1);
    h.request("latest").await;
    let obj = h
        .wait_ready("latest", &format!("latest@{}", pushed.digest))
        .await;
    let files = h.artifact_files(&obj).await;
    assert!(String::from_utf8_lossy(&files[0].1).contains("name: b"));
    assert_eq!(
        obj.status.unwrap().artifact.unwrap().metadata.unwrap()["org.opencontainers.image.revision"],
        REV2
    );
    // A reconcile with nothing new downloads nothing (one HEAD for the tag, no manifest GET, no
    // blob) and keeps the same artifact.
    let before = h.api.get("latest").await.unwrap().status.unwrap().artifact;
    let blobs = registry_requests(&reg, "GET", repo, "blobs");
    let manifests = registry_requests(&reg, "GET", repo, "manifests");
    let heads = registry_requests(&reg, "HEAD", repo, "manifests");
    let after = h.reconcile_now("latest").await.status.unwrap().artifact;
    assert_eq!(before, after);
    assert_eq!(
        registry_requests(&reg, "GET", repo, "blobs"),
        blobs,
        "no blob downloaded"
    );
    assert_eq!(
        registry_requests(&reg, "GET", repo, "manifests"),
        manifests,
        "no manifest downloaded"
    );
    assert_eq!(
        registry_requests(&reg, "HEAD", repo, "manifests"),
        heads + 1,
        "one HEAD resolved the tag"
    );

    // Deletion removes the object's storage directory.
    let dir = h
        .storage_root()
        .join("ocirepository")
        .join(&h.ns)
        .join("latest");
    assert!(dir.is_dir());
    h.api.delete("latest", &Default::default()).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while dir.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        !dir.exists(),
        "artifacts of a deleted OCIRepository are removed"
    );
    h.shutdown().await;
}
