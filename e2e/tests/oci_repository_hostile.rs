//! OCIRepository against hostile or broken registries: every bad input ends in a clear condition
//! on that object, the previous artifact is kept, nothing crashes, and another OCIRepository keeps
//! reconciling meanwhile. Content is pushed raw to a real registry (distribution v3.1.2), so it
//! can be what `flux push` never writes; 500s and silence come from local sockets.

#![allow(clippy::unwrap_used)]

mod oci_common;
mod support;

use std::time::Duration;

use oci_common::*;
use rflux_common::api::ocirepository::OciRepository;
use rflux_e2e::ControlPlane;
use rflux_e2e::registry::{Descriptor, image_manifest, media_types};
use rflux_e2e::registry::{Registry, RegistryMode};
use serde_json::json;
use source_controller::ocirepository::OciSettings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LAYER: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";

fn skip() -> bool {
    if let Some(r) = rflux_e2e::registry::skip_reason() {
        eprintln!("skipped: {r}");
        return true;
    }
    false
}

/// A server that answers every request with `500` (an error body that names nothing secret).
async fn always_500() -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let body = r#"{"errors":[{"code":"UNKNOWN","message":"backend exploded"}]}"#;
                let resp = format!(
                    "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    addr
}

/// A server that accepts connections and never answers.
async fn silent() -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    addr
}

/// Bytes that do not compress (so a size limit is really reached).
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn message(h: &OciRepository, t: &str) -> String {
    condition(h, t)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn hostile_registries_end_in_conditions_and_keep_the_artifact() {
    if skip() {
        return;
    }
    let cp = ControlPlane::shared().await.unwrap();
    let _lock = support::lock_crds().await;
    let settings = OciSettings {
        max_layer_bytes: 64 * 1024,
        ..OciSettings::default()
    };
    let h = OciHarness::start(cp, "ocibad", settings).await;
    let reg = Registry::start(RegistryMode::Http).unwrap();
    let client = reg.client().unwrap();
    let repo = "bad/app";
    let url = reg.url(repo);
    let annotations: Vec<(String, String)> = Vec::new();

    // A good artifact first, so every failure below must keep it.
    let good = tgz(&[("cm.yaml", b"kind: ConfigMap\n")]);
    let good_digest = client
        .push_raw_artifact(repo, "good", good.into(), LAYER, &annotations)
        .await
        .unwrap();
    h.create("victim", &url, json!({"ref": {"tag": "good"}}))
        .await;
    let ready = h.wait_ready("victim", &format!("good@{good_digest}")).await;
    let kept = ready.status.unwrap().artifact.unwrap();
    // A bystander that must keep reconciling while the victim is attacked.
    h.create(
        "bystander",
        &url,
        json!({"ref": {"tag": "good"}, "interval": "1s"}),
    )
    .await;

    // 1. A missing tag: 404 → OCIArtifactPullFailed.
    h.patch_spec("victim", json!({"ref": {"tag": "missing"}}))
        .await;
    let obj = h.wait_failed("victim", "OCIArtifactPullFailed").await;
    assert!(message(&obj, "Ready").starts_with("failed to determine artifact digest:"));
    assert_eq!(obj.status.as_ref().unwrap().artifact.as_ref(), Some(&kept));

    // 2. A manifest with no layers.
    let config = bytes::Bytes::from_static(b"{}");
    client.push_raw_blob(repo, config.clone()).await.unwrap();
    let config_desc = Descriptor::of(media_types::FLUX_CONFIG, &config);
    let empty = image_manifest(&config_desc, &[], &annotations);
    client
        .push_raw_manifest(repo, "empty", media_types::OCI_MANIFEST, empty.into())
        .await
        .unwrap();
    h.patch_spec("victim", json!({"ref": {"tag": "empty"}}))
        .await;
    let obj = h
        .wait_failed("victim", "OCIArtifactLayerOperationFailed")
        .await;
    assert!(message(&obj, "Ready").contains("no layers found in artifact"));
    assert_eq!(obj.status.as_ref().unwrap().artifact.as_ref(), Some(&kept));

    // 3. An index with no linux/amd64 image.
    let arm = image_manifest(&config_desc, &[], &annotations);
    let arm_digest = client
        .push_raw_manifest(
            repo,
            "arm-only-child",
            media_types::OCI_MANIFEST,
            arm.clone().into(),
        )
        .await
        .unwrap();
    let mut child = Descriptor::of(media_types::OCI_MANIFEST, &arm);
    child.digest = arm_digest;
    let child_json = {
        let mut v = child.to_json();
        v["platform"] = json!({"os": "linux", "architecture": "arm64"});
        v
    };
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": media_types::OCI_INDEX, "manifests": [child_json]
    }))
    .unwrap();
    client
        .push_raw_manifest(repo, "arm-index", media_types::OCI_INDEX, index.into())
        .await
        .unwrap();
    h.patch_spec("victim", json!({"ref": {"tag": "arm-index"}}))
        .await;
    let obj = h.wait_failed("victim", "OCIArtifactPullFailed").await;
    assert!(message(&obj, "Ready").contains("failed to pull artifact from"));
    assert_eq!(obj.status.as_ref().unwrap().artifact.as_ref(), Some(&kept));

    // 4. A layer over the size limit (64 KiB here): refused before it is downloaded.
    let big = noise(256 * 1024);
    client
        .push_raw_artifact(repo, "big", big.into(), LAYER, &annotations)
        .await
        .unwrap();
    h.patch_spec("victim", json!({"ref": {"tag": "big"}})).await;
    let obj = h
        .wait_failed("victim", "OCIArtifactLayerOperationFailed")
        .await;
    assert!(
        message(&obj, "Ready").contains("65536"),
        "{}",
        message(&obj, "Ready")
    );
    assert_eq!(obj.status.as_ref().unwrap().artifact.as_ref(), Some(&kept));

    // 5. A tar whose entry leaves the directory.
    let escape = tgz(&[("../../escape.yaml", b"owned\n")]);
    client
        .push_raw_artifact(repo, "escape", escape.into(), LAYER, &annotations)
        .await
        .unwrap();
    h.patch_spec("victim", json!({"ref": {"tag": "escape"}}))
        .await;
    let obj = h
        .wait_failed("victim", "OCIArtifactLayerOperationFailed")
        .await;
    assert!(
        message(&obj, "Ready").contains("tar contained invalid name error"),
        "{}",
        message(&obj, "Ready")
    );
    assert_eq!(obj.status.as_ref().unwrap().artifact.as_ref(), Some(&kept));

    // 6. A manifest whose layer descriptor lies about the blob's size.
    let real = tgz(&[("cm.yaml", b"kind: ConfigMap\nmetadata: {name: liar}\n")]);
    client
        .push_raw_blob(repo, real.clone().into())
        .await
        .unwrap();
    let mut lying = Descriptor::of(LAYER, &real);
    lying.size += 7;
    let liar = image_manifest(&config_desc, &[lying], &annotations);
    client
        .push_raw_manifest(repo, "liar", media_types::OCI_MANIFEST, liar.into())
        .await
        .unwrap();
    h.patch_spec("victim", json!({"ref": {"tag": "liar"}}))
        .await;
    let obj = h
        .wait_failed("victim", "OCIArtifactLayerOperationFailed")
        .await;
    assert!(
        message(&obj, "Ready").contains("mismatch"),
        "{}",
        message(&obj, "Ready")
    );
    assert_eq!(obj.status.as_ref().unwrap().artifact.as_ref(), Some(&kept));

    // 7. Not gzip: `extract` fails, `copy` stores it.
    let plain = b"not a tarball at all".to_vec();
    let plain_digest = client
        .push_raw_artifact(repo, "plain", plain.into(), LAYER, &annotations)
        .await
        .unwrap();
    h.patch_spec("victim", json!({"ref": {"tag": "plain"}}))
        .await;
    let obj = h
        .wait_failed("victim", "OCIArtifactLayerOperationFailed")
        .await;
    assert!(message(&obj, "Ready").starts_with("failed to extract layer contents from artifact"));
    assert_eq!(obj.status.as_ref().unwrap().artifact.as_ref(), Some(&kept));
    h.create(
        "plain-copy",
        &url,
        json!({"ref": {"tag": "plain"}, "layerSelector": {"operation": "copy"}}),
    )
    .await;
    h.wait_ready("plain-copy", &format!("plain@{plain_digest}"))
        .await;

    // 8. A registry answering 500, and one that never answers (bounded by spec.timeout).
    let e500 = always_500().await;
    h.create("e500", &format!("oci://{e500}/x/y"), json!({}))
        .await;
    let obj = h.wait_failed("e500", "OCIArtifactPullFailed").await;
    // go-containerregistry style: the registry's error message, no status code.
    assert!(
        message(&obj, "Ready").contains("UNKNOWN: backend exploded"),
        "{}",
        message(&obj, "Ready")
    );
    let mute = silent().await;
    let started = std::time::Instant::now();
    h.create(
        "mute",
        &format!("oci://{mute}/x/y"),
        json!({"timeout": "2s"}),
    )
    .await;
    let obj = h.wait_failed("mute", "OCIArtifactPullFailed").await;
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        message(&obj, "Ready").contains("timed out"),
        "{}",
        message(&obj, "Ready")
    );

    // 9. Spec errors stall: a tag in the URL, and no oci:// scheme is refused by the API server.
    h.create("tagged-url", &format!("{url}:v1"), json!({}))
        .await;
    let obj = h
        .wait("tagged-url", "Stalled", |o| is_true(o, "Stalled"))
        .await;
    assert_eq!(condition(&obj, "Stalled").unwrap().reason, "URLInvalid");
    assert!(
        message(&obj, "Ready").contains("URL must not contain a tag"),
        "{}",
        message(&obj, "Ready")
    );

    // The bystander kept reconciling the whole time, and the victim recovers.
    let by = h.api.get("bystander").await.unwrap();
    assert!(is_true(&by, "Ready"));
    h.patch_spec("victim", json!({"ref": {"tag": "good"}}))
        .await;
    h.wait("victim", "Ready again", |o| {
        is_true(o, "Ready")
            && o.status.as_ref().and_then(|s| s.observed_generation) == o.metadata.generation
    })
    .await;
    h.shutdown().await;
}
