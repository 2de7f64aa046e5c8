//! The client against the real registry (distribution v3.1.2, `rflux_e2e::registry`) in each
//! auth and TLS mode. Without the registry binary every test prints why and passes.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use rflux_e2e::registry::{
    self, BEARER_SERVICE, Descriptor as RawDescriptor, Registry, RegistryMode, image_index,
    image_manifest, media_types,
};
use rflux_oci::manifest::{FLUX_CONFIG, FLUX_CONTENT, OCI_INDEX, OCI_MANIFEST, sha256_digest};
use rflux_oci::{Client, Descriptor, Keychain, Limits, OciError, Repository, TransportConfig};

fn start(mode: RegistryMode) -> Option<Registry> {
    if let Some(why) = registry::skip_reason() {
        eprintln!("skipped: {why}");
        return None;
    }
    Some(Registry::start(mode).unwrap())
}

fn client_with(
    reg: &Registry,
    path: &str,
    keychain: Keychain,
    cfg: TransportConfig,
    limits: Limits,
) -> Client {
    let repo = Repository::parse_flux_url(&reg.url(path), false).unwrap();
    Client::new(repo, keychain, cfg, limits).unwrap()
}

fn anonymous(reg: &Registry, path: &str) -> Client {
    client_with(
        reg,
        path,
        Keychain::anonymous(),
        TransportConfig::default(),
        Limits::default(),
    )
}

fn layer_bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i * 31 + seed as usize) % 251) as u8)
        .collect()
}

fn annotations() -> Vec<(String, String)> {
    vec![
        (
            "org.opencontainers.image.source".into(),
            "https://git.example/podinfo.git".into(),
        ),
        (
            "org.opencontainers.image.revision".into(),
            "main@sha1:0123456789abcdef".into(),
        ),
    ]
}

/// Pushes a Flux-shaped artifact with `layer`; returns the manifest digest.
async fn push(reg: &Registry, path: &str, tag: &str, layer: &[u8]) -> String {
    reg.client()
        .unwrap()
        .push_raw_artifact(
            path,
            tag,
            layer.to_vec().into(),
            media_types::FLUX_CONTENT,
            &annotations(),
        )
        .await
        .unwrap()
}

fn layer_desc(layer: &[u8]) -> Descriptor {
    Descriptor {
        media_type: FLUX_CONTENT.into(),
        digest: sha256_digest(layer),
        size: layer.len() as u64,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_pushed_artifact_resolves_and_pulls_over_plain_http() {
    let Some(reg) = start(RegistryMode::Http) else {
        return;
    };
    let layer = layer_bytes(300 << 10, 1);
    let digest = push(&reg, "apps/podinfo", "6.1.0", &layer).await;
    let c = anonymous(&reg, "apps/podinfo");
    assert_eq!(c.resolve_digest("6.1.0").await.unwrap(), digest);
    // The loopback heuristic fell back to plain HTTP.
    assert_eq!(
        c.base_url(),
        Some(format!("http://{}", reg.host()).as_str())
    );

    let m = c.manifest(&digest).await.unwrap();
    assert_eq!(m.digest, digest);
    assert_eq!(sha256_digest(&m.raw), digest);
    assert_eq!(m.media_type, OCI_MANIFEST);
    assert_eq!(m.config.media_type, FLUX_CONFIG);
    assert_eq!(m.layers, vec![layer_desc(&layer)]);
    assert_eq!(
        m.annotations
            .get("org.opencontainers.image.revision")
            .map(String::as_str),
        Some("main@sha1:0123456789abcdef")
    );
    assert_eq!(m.index_digest, None);

    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("layer.tgz");
    let n = c.blob_to_file(&m.layers[0], &dest, 1 << 20).await.unwrap();
    assert_eq!(n, layer.len() as u64);
    assert_eq!(std::fs::read(&dest).unwrap(), layer);
    assert_eq!(c.blob_bytes(&m.config, 1024).await.unwrap(), b"{}");

    let (raw, media_type, raw_digest) = c.manifest_raw("6.1.0").await.unwrap();
    assert_eq!(
        (media_type.as_str(), raw_digest.as_str()),
        (OCI_MANIFEST, digest.as_str())
    );
    assert_eq!(raw, m.raw);
}

#[tokio::test]
async fn the_flux_cli_push_is_read_back_with_its_annotations() {
    if let Some(why) = registry::push::skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let Some(reg) = start(RegistryMode::Http) else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    std::fs::write(
        src.path().join("deploy.yaml"),
        "apiVersion: v1\nkind: ConfigMap\n",
    )
    .unwrap();
    let rev = "main@sha1:0123456789abcdef0123456789abcdef01234567";
    let digest = registry::push::push_artifact(
        &reg,
        "apps/podinfo",
        "6.1.0",
        src.path(),
        "https://git.example/podinfo.git",
        rev,
    )
    .unwrap();
    registry::push::tag_artifact(&reg, "apps/podinfo", "6.1.0", "latest").unwrap();
    let c = anonymous(&reg, "apps/podinfo");
    assert_eq!(c.resolve_digest("latest").await.unwrap(), digest);
    let m = c.manifest(&digest).await.unwrap();
    assert_eq!(m.config.media_type, FLUX_CONFIG);
    assert_eq!(m.layers.len(), 1);
    assert_eq!(m.layers[0].media_type, FLUX_CONTENT);
    let get = |k: &str| m.annotations.get(k).cloned().unwrap_or_default();
    assert_eq!(
        get("org.opencontainers.image.created"),
        "1970-01-01T00:00:00Z"
    );
    assert_eq!(
        get("org.opencontainers.image.source"),
        "https://git.example/podinfo.git"
    );
    assert_eq!(get("org.opencontainers.image.revision"), rev);
    let layer = c.blob_bytes(&m.layers[0], 1 << 20).await.unwrap();
    assert_eq!(&layer[..2], &[0x1f, 0x8b], "a gzip stream");
    let mut tags = c.list_tags().await.unwrap();
    tags.sort();
    assert_eq!(tags, ["6.1.0", "latest"]);
}

#[tokio::test]
async fn missing_tags_manifests_and_repositories_are_not_found() {
    let Some(reg) = start(RegistryMode::Http) else {
        return;
    };
    push(&reg, "apps/app", "v1", &layer_bytes(10, 2)).await;
    let c = anonymous(&reg, "apps/app");
    let e = c.resolve_digest("nope").await.unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(e.to_string().contains("MANIFEST_UNKNOWN"), "{e}");
    let e = c.manifest_raw("sha256-0123.sig").await.unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let e = c
        .manifest(&format!("sha256:{}", "0".repeat(64)))
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let e = anonymous(&reg, "apps/none").list_tags().await.unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(e.to_string().contains("NAME_UNKNOWN"), "{e}");
}

#[tokio::test]
async fn htpasswd_basic_auth_uses_the_pull_secret() {
    let mode = RegistryMode::Htpasswd {
        user: "alice".into(),
        password: "s3cret-pass".into(),
    };
    let Some(reg) = start(mode) else { return };
    let layer = layer_bytes(1000, 3);
    let digest = push(&reg, "apps/app", "v1", &layer).await;
    let kc = support::keychain(&reg.host(), "alice", "s3cret-pass");
    let c = client_with(
        &reg,
        "apps/app",
        kc,
        TransportConfig::default(),
        Limits::default(),
    );
    assert_eq!(c.resolve_digest("v1").await.unwrap(), digest);
    let m = c.manifest(&digest).await.unwrap();
    assert_eq!(c.blob_bytes(&m.layers[0], 1 << 20).await.unwrap(), layer);

    let e = anonymous(&reg, "apps/app")
        .resolve_digest("v1")
        .await
        .unwrap_err();
    assert!(matches!(e, OciError::Unauthorized { .. }), "{e}");
    let wrong = support::keychain(&reg.host(), "alice", "wrong-pass");
    let c = client_with(
        &reg,
        "apps/app",
        wrong,
        TransportConfig::default(),
        Limits::default(),
    );
    let e = c.resolve_digest("v1").await.unwrap_err();
    assert!(matches!(e, OciError::Unauthorized { .. }), "{e}");
    assert!(!e.to_string().contains("wrong-pass"), "{e}");
}

#[tokio::test]
async fn bearer_tokens_come_from_the_realm_once_per_client() {
    let mode = RegistryMode::Bearer {
        user: "bob".into(),
        password: "t0ken-pass".into(),
    };
    let Some(reg) = start(mode) else { return };
    let layer = layer_bytes(2000, 4);
    let digest = push(&reg, "apps/app", "v1", &layer).await;
    let before = reg.token_requests().len();
    let kc = support::keychain(&reg.host(), "bob", "t0ken-pass");
    let c = client_with(
        &reg,
        "apps/app",
        kc,
        TransportConfig::default(),
        Limits::default(),
    );
    assert_eq!(c.resolve_digest("v1").await.unwrap(), digest);
    let m = c.manifest(&digest).await.unwrap();
    assert_eq!(c.blob_bytes(&m.layers[0], 1 << 20).await.unwrap(), layer);
    assert_eq!(c.list_tags().await.unwrap(), ["v1"]);
    let ours: Vec<_> = reg.token_requests().into_iter().skip(before).collect();
    assert_eq!(ours.len(), 1, "{ours:?}");
    let t = &ours[0];
    assert_eq!(t.method, "GET");
    assert_eq!(t.service.as_deref(), Some(BEARER_SERVICE));
    assert_eq!(t.scopes, ["repository:apps/app:pull"]);
    assert_eq!(t.user.as_deref(), Some("bob"));
    assert!(t.authorized);

    for kc in [
        Keychain::anonymous(),
        support::keychain(&reg.host(), "bob", "bad-pass"),
    ] {
        let c = client_with(
            &reg,
            "apps/app",
            kc,
            TransportConfig::default(),
            Limits::default(),
        );
        let e = c.resolve_digest("v1").await.unwrap_err();
        assert!(matches!(e, OciError::Unauthorized { .. }), "{e}");
        assert!(!e.to_string().contains("bad-pass"), "{e}");
    }
}

/// The path of a blob in the registry's filesystem storage.
fn stored_blob(reg: &Registry, digest: &str) -> std::path::PathBuf {
    let hex = digest.trim_start_matches("sha256:");
    reg.data_dir()
        .join("docker/registry/v2/blobs/sha256")
        .join(&hex[..2])
        .join(hex)
        .join("data")
}

#[tokio::test]
async fn a_blob_whose_bytes_lie_about_their_digest_is_refused() {
    let Some(reg) = start(RegistryMode::Http) else {
        return;
    };
    let layer = layer_bytes(50 << 10, 5);
    push(&reg, "apps/app", "v1", &layer).await;
    let desc = layer_desc(&layer);
    // Same length, other bytes: only the digest can tell.
    let path = stored_blob(&reg, &desc.digest);
    let mut forged = std::fs::read(&path).unwrap();
    forged[100] ^= 0xff;
    std::fs::write(&path, &forged).unwrap();
    let c = anonymous(&reg, "apps/app");
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("layer.tgz");
    let e = c.blob_to_file(&desc, &dest, 1 << 20).await.unwrap_err();
    assert_eq!(
        e,
        OciError::DigestMismatch {
            expected: desc.digest.clone(),
            actual: sha256_digest(&forged)
        }
    );
    assert!(!dest.exists(), "the partial file is removed");
    let e = c.blob_bytes(&desc, 1 << 20).await.unwrap_err();
    assert!(matches!(e, OciError::DigestMismatch { .. }), "{e}");
}

#[tokio::test]
async fn descriptor_sizes_that_lie_are_refused_and_leave_no_file() {
    let Some(reg) = start(RegistryMode::Http) else {
        return;
    };
    let layer = layer_bytes(20 << 10, 6);
    push(&reg, "apps/app", "v1", &layer).await;
    let c = anonymous(&reg, "apps/app");
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("layer.tgz");
    for claimed in [layer.len() as u64 - 1, layer.len() as u64 + 1, 1] {
        let desc = Descriptor {
            size: claimed,
            ..layer_desc(&layer)
        };
        let e = c.blob_to_file(&desc, &dest, 1 << 20).await.unwrap_err();
        assert!(
            matches!(e, OciError::SizeMismatch { expected, .. } if expected == claimed),
            "{claimed}: {e}"
        );
        assert!(!dest.exists());
    }
}

#[tokio::test]
async fn a_layer_larger_than_allowed_is_refused_before_any_request() {
    let Some(reg) = start(RegistryMode::Http) else {
        return;
    };
    let layer = layer_bytes(64 << 10, 7);
    push(&reg, "apps/app", "v1", &layer).await;
    let c = anonymous(&reg, "apps/app");
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("layer.tgz");
    let e = c
        .blob_to_file(&layer_desc(&layer), &dest, 1000)
        .await
        .unwrap_err();
    assert!(matches!(e, OciError::TooLarge { limit: 1000, .. }), "{e}");
    assert!(!dest.exists());
    // Not even the ping was sent.
    assert_eq!(c.base_url(), None);
    let e = c.blob_bytes(&layer_desc(&layer), 1000).await.unwrap_err();
    assert!(matches!(e, OciError::TooLarge { .. }), "{e}");
    assert_eq!(c.base_url(), None);
}

#[tokio::test]
async fn tags_are_listed_across_pages() {
    let Some(reg) = start(RegistryMode::Http) else {
        return;
    };
    let digest = push(&reg, "apps/app", "t0", &layer_bytes(10, 8)).await;
    let raw = anonymous(&reg, "apps/app")
        .manifest_raw("t0")
        .await
        .unwrap()
        .0;
    let mut want = vec!["t0".to_string()];
    for i in 1..8 {
        let tag = format!("t{i}");
        let d = reg
            .push_raw_manifest("apps/app", &tag, media_types::OCI_MANIFEST, raw.clone())
            .await
            .unwrap();
        assert_eq!(d, digest);
        want.push(tag);
    }
    let paged = Limits {
        tags_page_size: 3,
        ..Default::default()
    };
    let c = client_with(
        &reg,
        "apps/app",
        Keychain::anonymous(),
        TransportConfig::default(),
        paged,
    );
    let mut got = c.list_tags().await.unwrap();
    got.sort();
    assert_eq!(got, want);
    // Three pages of at most 3 were asked for (the registry logs every request).
    let log = std::fs::read_to_string(reg.log_path()).unwrap();
    let pages = log.matches("/v2/apps/app/tags/list?").count();
    assert!(pages >= 3, "{pages} page requests in the log");
    assert!(log.contains("last=t"), "a next page was followed");

    let mut all = anonymous(&reg, "apps/app").list_tags().await.unwrap();
    all.sort();
    assert_eq!(all, want);
    let capped = Limits {
        tags_page_size: 3,
        max_tags: 5,
        ..Default::default()
    };
    let c = client_with(
        &reg,
        "apps/app",
        Keychain::anonymous(),
        TransportConfig::default(),
        capped,
    );
    let e = c.list_tags().await.unwrap_err();
    assert!(matches!(e, OciError::TooMany { limit: 5, .. }), "{e}");
}

#[tokio::test]
async fn an_index_resolves_to_its_linux_amd64_image() {
    let Some(reg) = start(RegistryMode::Http) else {
        return;
    };
    let rc = reg.client().unwrap();
    let config = b"{}".to_vec();
    rc.push_raw_blob("apps/multi", config.clone().into())
        .await
        .unwrap();
    let mut children = Vec::new();
    for (arch, seed) in [("arm64", 9u8), ("amd64", 10u8)] {
        let layer = layer_bytes(1000, seed);
        rc.push_raw_blob("apps/multi", layer.clone().into())
            .await
            .unwrap();
        let m = image_manifest(
            &RawDescriptor::of(media_types::FLUX_CONFIG, &config),
            &[RawDescriptor::of(media_types::FLUX_CONTENT, &layer)],
            &[("arch".to_string(), arch.to_string())],
        );
        let d = rc
            .push_raw_manifest(
                "apps/multi",
                &sha256_digest(&m),
                media_types::OCI_MANIFEST,
                m.clone().into(),
            )
            .await
            .unwrap();
        let mut desc = RawDescriptor::of(media_types::OCI_MANIFEST, &m);
        desc.platform = Some(("linux".into(), arch.into()));
        children.push((d, desc, layer));
    }
    let index = image_index(&children.iter().map(|c| c.1.clone()).collect::<Vec<_>>());
    let index_digest = rc
        .push_raw_manifest("apps/multi", "multi", media_types::OCI_INDEX, index.into())
        .await
        .unwrap();
    let c = anonymous(&reg, "apps/multi");
    assert_eq!(c.resolve_digest("multi").await.unwrap(), index_digest);
    let m = c.manifest(&index_digest).await.unwrap();
    let (amd64_digest, _, amd64_layer) = &children[1];
    assert_eq!(&m.digest, amd64_digest);
    assert_eq!(m.index_digest.as_deref(), Some(index_digest.as_str()));
    assert_eq!(m.annotations.get("arch").map(String::as_str), Some("amd64"));
    assert_eq!(
        &c.blob_bytes(&m.layers[0], 1 << 20).await.unwrap(),
        amd64_layer
    );
    let (_, media_type, _) = c.manifest_raw("multi").await.unwrap();
    assert_eq!(media_type, OCI_INDEX);
}

#[tokio::test]
async fn https_needs_the_ca_unless_insecure() {
    let Some(reg) = start(RegistryMode::Https) else {
        return;
    };
    let layer = layer_bytes(500, 11);
    let digest = push(&reg, "apps/app", "v1", &layer).await;
    let with_ca = TransportConfig {
        ca_pem: reg.ca_pem().map(str::to_string),
        ..Default::default()
    };
    let c = client_with(
        &reg,
        "apps/app",
        Keychain::anonymous(),
        with_ca,
        Limits::default(),
    );
    assert_eq!(c.resolve_digest("v1").await.unwrap(), digest);
    assert_eq!(
        c.base_url(),
        Some(format!("https://{}", reg.host()).as_str())
    );

    let e = anonymous(&reg, "apps/app")
        .resolve_digest("v1")
        .await
        .unwrap_err();
    assert!(matches!(e, OciError::Tls(_)), "{e}");
    eprintln!("without the CA: {e}");

    let insecure = TransportConfig {
        insecure: true,
        timeout: Duration::from_secs(10),
        ..Default::default()
    };
    let c = client_with(
        &reg,
        "apps/app",
        Keychain::anonymous(),
        insecure,
        Limits::default(),
    );
    assert_eq!(c.resolve_digest("v1").await.unwrap(), digest);
    assert_eq!(
        c.base_url(),
        Some(format!("https://{}", reg.host()).as_str())
    );
}

#[tokio::test]
async fn mtls_needs_the_client_certificate() {
    let Some(reg) = start(RegistryMode::Mtls) else {
        return;
    };
    let layer = layer_bytes(500, 12);
    let digest = push(&reg, "apps/app", "v1", &layer).await;
    let full = TransportConfig {
        ca_pem: reg.ca_pem().map(str::to_string),
        client_cert_pem: reg.client_cert_pem().map(str::to_string),
        client_key_pem: reg.client_key_pem().map(str::to_string),
        ..Default::default()
    };
    let c = client_with(
        &reg,
        "apps/app",
        Keychain::anonymous(),
        full,
        Limits::default(),
    );
    assert_eq!(c.resolve_digest("v1").await.unwrap(), digest);
    let m = c.manifest(&digest).await.unwrap();
    assert_eq!(c.blob_bytes(&m.layers[0], 1 << 20).await.unwrap(), layer);

    let ca_only = TransportConfig {
        ca_pem: reg.ca_pem().map(str::to_string),
        ..Default::default()
    };
    let c = client_with(
        &reg,
        "apps/app",
        Keychain::anonymous(),
        ca_only,
        Limits::default(),
    );
    let e = c.resolve_digest("v1").await.unwrap_err();
    assert!(matches!(e, OciError::Tls(_)), "{e}");
    eprintln!("without the client certificate: {e}");
}
