//! The OCI test environment itself: distribution's registry in every auth/TLS mode, the real
//! `flux push/tag artifact` against it, and the raw pusher for hostile content.
//! Skips (with the reason printed) when the registry binary or the flux CLI is not built.

#![allow(clippy::unwrap_used)]

use std::io::Read;
use std::path::Path;

use rflux_e2e::registry::{
    BEARER_SERVICE, ClientOptions, Descriptor, Registry, RegistryMode, RegistryOptions,
    image_index, image_manifest, media_types, push,
};

const SOURCE: &str = "https://git.example/podinfo.git";
const REVISION: &str = "main@sha1:0123456789abcdef0123456789abcdef01234567";

fn registry_skip() -> bool {
    match rflux_e2e::registry::skip_reason() {
        Some(why) => {
            eprintln!("skipped: {why}");
            true
        }
        None => false,
    }
}

fn push_skip() -> bool {
    match push::skip_reason() {
        Some(why) => {
            eprintln!("skipped: {why}");
            true
        }
        None => false,
    }
}

fn htpasswd() -> RegistryMode {
    RegistryMode::Htpasswd {
        user: "alice".into(),
        password: "s3cret-pw".into(),
    }
}

fn bearer() -> RegistryMode {
    RegistryMode::Bearer {
        user: "bob".into(),
        password: "t0ken-pw".into(),
    }
}

/// A small tree to push: two files in a subdirectory and one at the top.
fn tree(marker: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("apps")).unwrap();
    std::fs::write(
        dir.path().join("apps/cm.yaml"),
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {marker}\n"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "resources: [apps/cm.yaml]\n",
    )
    .unwrap();
    dir
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// Reads `repo:tag` back with the raw client and checks it is what `flux push` writes
/// (ocirepository.md §6) and that its layer holds `marker`. Returns the manifest digest.
async fn check_flux_artifact(reg: &Registry, repo: &str, tag: &str, marker: &str) -> String {
    let client = reg.client().unwrap();
    let m = client.get_manifest(repo, tag).await.unwrap();
    assert_eq!(m.media_type, media_types::OCI_MANIFEST);
    assert_eq!(m.digest_header.as_deref(), Some(m.digest.as_str()));
    let v = m.json().unwrap();
    assert_eq!(v["schemaVersion"], 2);
    assert_eq!(v["mediaType"], media_types::OCI_MANIFEST);
    assert_eq!(v["config"]["mediaType"], media_types::FLUX_CONFIG);
    let layers = v["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{v}");
    assert_eq!(layers[0]["mediaType"], media_types::FLUX_CONTENT);
    let ann = v["annotations"].as_object().unwrap();
    assert_eq!(
        ann["org.opencontainers.image.created"],
        "1970-01-01T00:00:00Z"
    );
    assert_eq!(ann["org.opencontainers.image.source"], SOURCE);
    assert_eq!(ann["org.opencontainers.image.revision"], REVISION);
    let layer_digest = layers[0]["digest"].as_str().unwrap();
    let blob = client.get_blob(repo, layer_digest, 1 << 20).await.unwrap();
    assert_eq!(rflux_e2e::registry::sha256_digest(&blob), layer_digest);
    assert_eq!(layers[0]["size"], blob.len());
    let tar = String::from_utf8_lossy(&gunzip(&blob)).into_owned();
    assert!(tar.contains("apps/cm.yaml"), "layer lacks apps/cm.yaml");
    assert!(
        tar.contains(&format!("name: {marker}")),
        "layer lacks the marker"
    );
    m.digest
}

#[tokio::test]
async fn every_mode_starts_and_challenges_as_expected() {
    if registry_skip() {
        return;
    }
    for mode in [
        RegistryMode::Http,
        RegistryMode::Https,
        RegistryMode::Mtls,
        htpasswd(),
        bearer(),
    ] {
        let reg = Registry::start(mode.clone()).unwrap();
        assert!(
            reg.url("a/b")
                .starts_with(&format!("oci://127.0.0.1:{}/a/b", reg.port()))
        );
        assert_eq!(reg.host(), format!("127.0.0.1:{}", reg.port()));
        // Anonymous, but with the client certificate (mTLS needs it to talk at all).
        let anon = reg
            .client_with(&ClientOptions {
                credentials: None,
                client_cert: true,
                trust_ca: true,
            })
            .unwrap();
        let ping = anon.ping().await.unwrap();
        assert_eq!(ping.status, mode.anonymous_ping_status(), "{mode:?}");
        match &mode {
            RegistryMode::Htpasswd { .. } => {
                assert_eq!(
                    ping.challenge.as_deref(),
                    Some("Basic realm=\"basic-realm\""),
                    "{mode:?}"
                );
            }
            RegistryMode::Bearer { .. } => {
                let challenge = ping.challenge.unwrap();
                let realm = reg.token_realm().unwrap();
                assert!(realm.starts_with("http://localhost:"), "{realm}");
                assert!(challenge.starts_with("Bearer "), "{challenge}");
                assert!(
                    challenge.contains(&format!("realm=\"{realm}\"")),
                    "{challenge}"
                );
                assert!(
                    challenge.contains(&format!("service=\"{BEARER_SERVICE}\"")),
                    "{challenge}"
                );
            }
            _ => assert!(ping.challenge.is_none(), "{mode:?}: {ping:?}"),
        }
        // With what the mode needs, /v2/ is open.
        assert_eq!(
            reg.client().unwrap().ping_with_auth().await.unwrap(),
            200,
            "{mode:?}"
        );
        if mode.is_tls() {
            assert!(reg.ca_pem().unwrap().contains("BEGIN CERTIFICATE"));
            // Without trusting the CA the handshake fails.
            let untrusting = reg
                .client_with(&ClientOptions {
                    credentials: None,
                    client_cert: true,
                    trust_ca: false,
                })
                .unwrap();
            assert!(
                untrusting.ping().await.is_err(),
                "{mode:?}: unknown CA accepted"
            );
        } else {
            assert!(reg.ca_pem().is_none());
        }
        if mode == RegistryMode::Mtls {
            assert!(reg.client_key_pem().unwrap().contains("PRIVATE KEY"));
            let no_cert = reg.anonymous_client().unwrap();
            assert!(
                no_cert.ping().await.is_err(),
                "mTLS accepted a client without certificate"
            );
        }
        if let Some((user, _)) = mode.credentials() {
            let wrong = reg
                .client_with(&ClientOptions {
                    credentials: Some((user.to_string(), "wrong".into())),
                    client_cert: false,
                    trust_ca: true,
                })
                .unwrap();
            match &mode {
                // htpasswd answers the wrong password with another 401.
                RegistryMode::Htpasswd { .. } => {
                    assert_eq!(wrong.ping_with_auth().await.unwrap(), 401);
                }
                // The token server refuses to issue a token.
                _ => {
                    let err = wrong.ping_with_auth().await.unwrap_err().to_string();
                    assert!(err.contains("HTTP 401"), "{err}");
                }
            }
        }
    }
}

#[tokio::test]
async fn flux_push_and_tag_over_http_htpasswd_https_and_mtls() {
    if push_skip() {
        return;
    }
    for mode in [
        RegistryMode::Http,
        htpasswd(),
        RegistryMode::Https,
        RegistryMode::Mtls,
    ] {
        let reg = Registry::start(mode.clone()).unwrap();
        let marker = format!("cm-{}", rflux_e2e::random_suffix(6));
        let src = tree(&marker);
        let digest =
            push::push_artifact(&reg, "apps/podinfo", "6.1.0", src.path(), SOURCE, REVISION)
                .unwrap();
        push::tag_artifact(&reg, "apps/podinfo", "6.1.0", "latest").unwrap();
        // Read back from the registry itself (for mTLS: the instance that wants the client
        // certificate, not the twin the CLI pushed through).
        let got = check_flux_artifact(&reg, "apps/podinfo", "6.1.0", &marker).await;
        assert_eq!(got, digest, "{mode:?}");
        let latest = reg
            .client()
            .unwrap()
            .get_manifest("apps/podinfo", "latest")
            .await
            .unwrap();
        assert_eq!(latest.digest, digest, "{mode:?}: the tag moved the content");
        let mut tags = reg.client().unwrap().tags("apps/podinfo").await.unwrap();
        tags.sort();
        assert_eq!(
            tags,
            vec!["6.1.0".to_string(), "latest".to_string()],
            "{mode:?}"
        );
    }
}

#[tokio::test]
async fn flux_push_needs_the_right_credentials() {
    if push_skip() {
        return;
    }
    let reg = Registry::start(htpasswd()).unwrap();
    let src = tree("creds");
    for creds in [
        push::Creds::None,
        push::Creds::Explicit("alice".into(), "nope".into()),
    ] {
        let opts = push::PushOptions {
            creds: creds.clone(),
            timeout: std::time::Duration::from_secs(30),
            ..Default::default()
        };
        let err =
            push::push_artifact_with(&reg, "apps/x", "v1", src.path(), SOURCE, REVISION, &opts)
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("401") || err.to_lowercase().contains("unauthorized"),
            "{creds:?}: {err}"
        );
    }
    assert!(
        reg.client().unwrap().tags("apps/x").await.is_err(),
        "a refused push left tags"
    );
}

#[tokio::test]
async fn reproducible_pushes_give_the_same_digest() {
    if push_skip() {
        return;
    }
    let reg = Registry::start(RegistryMode::Http).unwrap();
    let src = tree("same");
    let d1 = push::push_artifact(&reg, "apps/repro", "a", src.path(), SOURCE, REVISION).unwrap();
    let d2 = push::push_artifact(&reg, "apps/repro", "b", src.path(), SOURCE, REVISION).unwrap();
    assert_eq!(d1, d2);
    // The same tree in another directory (different mtimes) still gives it.
    let copy = tree("same");
    let d3 = push::push_artifact(&reg, "apps/repro", "c", copy.path(), SOURCE, REVISION).unwrap();
    assert_eq!(d1, d3);
    // Other content, or another revision annotation, gives another digest.
    let other = tree("other");
    let d4 = push::push_artifact(&reg, "apps/repro", "d", other.path(), SOURCE, REVISION).unwrap();
    assert_ne!(d1, d4);
    let rev2 = "main@sha1:1111111111111111111111111111111111111111";
    let d5 = push::push_artifact(&reg, "apps/repro", "e", src.path(), SOURCE, rev2).unwrap();
    assert_ne!(d1, d5);
    // Without --reproducible the created time is now, so the digest differs.
    let opts = push::PushOptions {
        reproducible: false,
        ..Default::default()
    };
    let live =
        push::push_artifact_with(&reg, "apps/repro", "f", src.path(), SOURCE, REVISION, &opts)
            .unwrap();
    assert_ne!(d1, live.digest);
    assert_eq!(live.tag, "f");
    assert_eq!(
        live.url,
        format!("{}@{}", reg.url("apps/repro"), live.digest)
    );
}

#[tokio::test]
async fn bearer_push_goes_through_the_token_server() {
    if push_skip() {
        return;
    }
    let reg = Registry::start(bearer()).unwrap();
    assert!(reg.token_requests().is_empty());
    let src = tree("bearer");
    let digest =
        push::push_artifact(&reg, "team/app", "1.0.0", src.path(), SOURCE, REVISION).unwrap();
    let seen = reg.token_requests();
    let granted: Vec<_> = seen.iter().filter(|r| r.authorized).collect();
    assert!(!granted.is_empty(), "no token was issued: {seen:?}");
    for r in &granted {
        assert_eq!(r.method, "GET");
        assert_eq!(r.service.as_deref(), Some(BEARER_SERVICE), "{r:?}");
        assert_eq!(r.user.as_deref(), Some("bob"), "{r:?}");
    }
    let push_scope = granted.iter().flat_map(|r| &r.scopes).any(|s| {
        s.strip_prefix("repository:team/app:")
            .is_some_and(|actions| actions.split(',').any(|a| a == "push"))
    });
    assert!(push_scope, "no push scope for team/app: {seen:?}");
    assert_eq!(
        check_flux_artifact(&reg, "team/app", "1.0.0", "bearer").await,
        digest
    );

    // Wrong credentials: the token server refuses, so does the push.
    let before = reg.token_requests().len();
    let opts = push::PushOptions {
        creds: push::Creds::Explicit("bob".into(), "wrong".into()),
        timeout: std::time::Duration::from_secs(30),
        ..Default::default()
    };
    let err = push::push_artifact_with(
        &reg,
        "team/app",
        "2.0.0",
        src.path(),
        SOURCE,
        REVISION,
        &opts,
    )
    .unwrap_err();
    let after = reg.token_requests();
    assert!(
        after[before..]
            .iter()
            .any(|r| !r.authorized && r.status == 401),
        "{err}\n{after:?}"
    );
    assert!(!after[before..].iter().any(|r| r.authorized), "{after:?}");
}

#[tokio::test]
async fn flux_refuses_an_ip_literal_loopback_realm() {
    if push_skip() {
        return;
    }
    // go-containerregistry refuses a realm on a loopback IP literal that is not the
    // registry's own host:port: the reason the default realm host is `localhost`.
    let opts = RegistryOptions {
        realm_host: "127.0.0.1".into(),
        ..Default::default()
    };
    let reg = Registry::start_with(bearer(), &opts).unwrap();
    assert!(reg.token_realm().unwrap().starts_with("http://127.0.0.1:"));
    let src = tree("ssrf");
    let err = push::push_artifact(&reg, "team/app", "1.0.0", src.path(), SOURCE, REVISION)
        .unwrap_err()
        .to_string();
    assert!(err.contains("private or link-local"), "{err}");
    assert!(
        reg.token_requests().is_empty(),
        "{:?}",
        reg.token_requests()
    );
    // Our raw client has no such guard: the same registry works through it.
    assert_eq!(reg.client().unwrap().ping_with_auth().await.unwrap(), 200);
    assert!(reg.token_requests().iter().any(|r| r.authorized));
}

#[tokio::test]
async fn raw_pusher_writes_what_flux_never_would() {
    if registry_skip() {
        return;
    }
    for mode in [RegistryMode::Http, RegistryMode::Mtls, bearer()] {
        let reg = Registry::start(mode.clone()).unwrap();
        raw_pushes(&reg).await;
    }
}

async fn raw_pushes(reg: &Registry) {
    let mode = reg.mode().clone();
    let client = reg.client().unwrap();
    // Arbitrary bytes as a blob, read back unchanged.
    let junk: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let junk_digest = reg.push_raw_blob("hostile/x", junk.clone()).await.unwrap();
    assert_eq!(junk_digest, rflux_e2e::registry::sha256_digest(&junk));
    let back = client
        .get_blob("hostile/x", &junk_digest, 1 << 20)
        .await
        .unwrap();
    assert_eq!(back.as_ref(), junk.as_slice(), "{mode:?}");
    // The read limit holds.
    let err = client
        .get_blob("hostile/x", &junk_digest, 1000)
        .await
        .unwrap_err();
    assert!(
        matches!(err, rflux_e2e::registry::RegistryError::TooLarge { .. }),
        "{err}"
    );

    // A manifest whose layer descriptor lies about its size and media type, with extra fields.
    let config = b"{}".to_vec();
    let config_digest = reg
        .push_raw_blob("hostile/x", config.clone())
        .await
        .unwrap();
    let lying = Descriptor {
        size: 3,
        ..Descriptor::of(media_types::FLUX_CONTENT, &junk)
    };
    let mut manifest: serde_json::Value = serde_json::from_slice(&image_manifest(
        &Descriptor::of(media_types::FLUX_CONFIG, &config),
        &[lying],
        &[("org.opencontainers.image.source".into(), "evil".into())],
    ))
    .unwrap();
    manifest["x-unknown"] = serde_json::json!({"nested": [1, 2, 3]});
    let bytes = serde_json::to_vec_pretty(&manifest).unwrap();
    let digest = reg
        .push_raw_manifest(
            "hostile/x",
            "lying",
            media_types::OCI_MANIFEST,
            bytes.clone(),
        )
        .await
        .unwrap();
    let got = client.get_manifest("hostile/x", "lying").await.unwrap();
    assert_eq!(got.bytes.as_ref(), bytes.as_slice(), "stored bytes changed");
    assert_eq!(got.digest, digest);
    assert_eq!(got.json().unwrap()["layers"][0]["size"], 3);
    assert_eq!(got.json().unwrap()["config"]["digest"], config_digest);
    // By digest too.
    let by_digest = client.get_manifest("hostile/x", &digest).await.unwrap();
    assert_eq!(by_digest.bytes, got.bytes);

    // A manifest naming a blob the repository does not hold is refused by the registry.
    let missing = Descriptor::of(media_types::FLUX_CONTENT, b"never uploaded");
    let refused = reg
        .push_raw_manifest(
            "hostile/x",
            "missing",
            media_types::OCI_MANIFEST,
            image_manifest(
                &Descriptor::of(media_types::FLUX_CONFIG, &config),
                &[missing],
                &[],
            ),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("BLOB_UNKNOWN"), "{refused}");

    // An image index pointing at the lying manifest (and at a child that does not exist).
    let child = Descriptor {
        platform: Some(("linux".into(), "amd64".into())),
        ..Descriptor::of(media_types::OCI_MANIFEST, &bytes)
    };
    let ghost = Descriptor {
        platform: Some(("linux".into(), "arm64".into())),
        ..Descriptor::of(media_types::OCI_MANIFEST, b"ghost")
    };
    let index = image_index(&[ghost, child]);
    let index_digest = reg
        .push_raw_manifest("hostile/x", "index", media_types::OCI_INDEX, index.clone())
        .await
        .unwrap();
    let got = client.get_manifest("hostile/x", "index").await.unwrap();
    assert_eq!(got.media_type, media_types::OCI_INDEX);
    assert_eq!(got.digest, index_digest);
    assert_eq!(got.json().unwrap()["manifests"][1]["digest"], digest);

    // A Flux-shaped artifact from raw parts, then deleted.
    let layer = {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b"not a tar at all").unwrap();
        gz.finish().unwrap()
    };
    let d = client
        .push_raw_artifact(
            "hostile/y",
            "v1",
            layer.into(),
            media_types::FLUX_CONTENT,
            &[(
                "org.opencontainers.image.revision".into(),
                "x@sha1:1".into(),
            )],
        )
        .await
        .unwrap();
    assert_eq!(
        client.tags("hostile/y").await.unwrap(),
        vec!["v1".to_string()]
    );
    client.delete_manifest("hostile/y", &d).await.unwrap();
    assert!(
        client.get_manifest("hostile/y", "v1").await.is_err(),
        "deleted manifest served"
    );
}

#[tokio::test]
async fn index_children_are_checked_only_when_asked() {
    if registry_skip() {
        return;
    }
    let opts = RegistryOptions {
        validate_index_children: true,
        ..Default::default()
    };
    let reg = Registry::start_with(RegistryMode::Http, &opts).unwrap();
    let ghost = Descriptor {
        platform: Some(("linux".into(), "amd64".into())),
        ..Descriptor::of(media_types::OCI_MANIFEST, b"ghost")
    };
    let index = image_index(&[ghost]);
    let err = reg
        .push_raw_manifest("idx/x", "v1", media_types::OCI_INDEX, index.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("MANIFEST_BLOB_UNKNOWN"), "{err}");
    // The default registry takes it.
    let lax = Registry::start(RegistryMode::Http).unwrap();
    lax.push_raw_manifest("idx/x", "v1", media_types::OCI_INDEX, index)
        .await
        .unwrap();
}

#[test]
fn second_instance_serves_the_same_storage() {
    if registry_skip() {
        return;
    }
    let reg = Registry::start(RegistryMode::Mtls).unwrap();
    let twin = reg.twin().unwrap();
    assert_eq!(twin.mode(), &RegistryMode::Https);
    assert_eq!(twin.data_dir(), reg.data_dir());
    assert_ne!(twin.port(), reg.port());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // The twin needs no client certificate; what it stores, the mTLS instance serves.
        let d = twin
            .anonymous_client()
            .unwrap()
            .push_raw_blob("shared/x", b"shared bytes".to_vec().into())
            .await
            .unwrap();
        let back = reg
            .client()
            .unwrap()
            .get_blob("shared/x", &d, 100)
            .await
            .unwrap();
        assert_eq!(back.as_ref(), b"shared bytes");
    });
    let dir = reg.data_dir().to_path_buf();
    drop(reg);
    assert!(dir.is_dir(), "storage removed while the twin runs");
    drop(twin);
    assert!(!Path::new(&dir).exists(), "storage left behind");
}
