#![allow(clippy::unwrap_used)]

use super::*;

fn d(n: u8) -> String {
    format!("sha256:{}", hex::encode([n; 32]))
}

fn flux_manifest() -> Vec<u8> {
    serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": FLUX_CONFIG, "digest": d(1), "size": 233},
        "layers": [{"mediaType": FLUX_CONTENT, "digest": d(2), "size": 1024}],
        "annotations": {
            "org.opencontainers.image.created": "1970-01-01T00:00:00Z",
            "org.opencontainers.image.source": "https://git.example/podinfo.git",
            "org.opencontainers.image.revision": "main@sha1:abc"
        }
    })
    .to_string()
    .into_bytes()
}

#[test]
fn a_flux_artifact_manifest_parses_with_its_annotations() {
    let raw = flux_manifest();
    let digest = sha256_digest(&raw);
    let (mt, kind) = classify(Some(OCI_MANIFEST), &raw).unwrap();
    assert_eq!((mt.as_str(), kind), (OCI_MANIFEST, Kind::Image));
    let m = parse_image(raw.clone(), mt, digest.clone()).unwrap();
    assert_eq!(m.config.media_type, FLUX_CONFIG);
    assert_eq!(m.layers.len(), 1);
    assert_eq!(m.layers[0].media_type, FLUX_CONTENT);
    assert_eq!(m.layers[0].size, 1024);
    assert_eq!(m.layers[0].digest, d(2));
    assert_eq!(
        m.annotations
            .get("org.opencontainers.image.source")
            .map(String::as_str),
        Some("https://git.example/podinfo.git")
    );
    assert_eq!(m.annotations.len(), 3);
    assert_eq!(m.digest, digest);
    assert_eq!(m.raw, raw);
    assert_eq!(m.index_digest, None);
}

#[test]
fn the_media_type_comes_from_the_header_then_the_body_then_the_shape() {
    let raw = flux_manifest();
    // Parameters on the header are ignored.
    let (mt, k) = classify(
        Some("application/vnd.oci.image.manifest.v1+json; charset=utf-8"),
        &raw,
    )
    .unwrap();
    assert_eq!((mt.as_str(), k), (OCI_MANIFEST, Kind::Image));
    // A generic header: the body's mediaType.
    let (mt, k) = classify(Some("application/octet-stream"), &raw).unwrap();
    assert_eq!((mt.as_str(), k), (OCI_MANIFEST, Kind::Image));
    // No mediaType anywhere: the shape.
    let idx = br#"{"schemaVersion":2,"manifests":[]}"#;
    assert_eq!(classify(None, idx).unwrap().1, Kind::Index);
    let img = format!(
        r#"{{"schemaVersion":2,"config":{{"digest":"{}","size":1}},"layers":[]}}"#,
        d(1)
    );
    assert_eq!(classify(None, img.as_bytes()).unwrap().1, Kind::Image);
    let s1 = br#"{"schemaVersion":1,"fsLayers":[]}"#;
    assert_eq!(classify(None, s1).unwrap().1, Kind::Schema1);
    assert_eq!(
        classify(Some(DOCKER_SCHEMA1_SIGNED), b"{}").unwrap().1,
        Kind::Schema1
    );
    assert_eq!(
        classify(Some(DOCKER_MANIFEST_LIST), b"{}").unwrap().1,
        Kind::Index
    );
}

#[test]
fn things_that_are_not_manifests_are_refused() {
    for (ct, body) in [
        (
            Some("application/vnd.oci.image.config.v1+json"),
            &br#"{"architecture":"amd64"}"#[..],
        ),
        (Some("text/html"), b"<html>nope</html>"),
        (None, b"[1,2,3]"),
        (
            Some("application/json"),
            br#"{"mediaType":"application/vnd.cncf.flux.config.v1+json"}"#,
        ),
    ] {
        let e = classify(ct, body).unwrap_err();
        assert!(matches!(e, OciError::NotAManifest { .. }), "{ct:?}: {e}");
    }
    assert_eq!(
        classify(None, b"junk").unwrap_err(),
        OciError::NotAManifest {
            media_type: "unknown".into()
        }
    );
}

#[test]
fn bad_descriptors_fail_parsing() {
    let cases = [
        serde_json::json!({"config": {"digest": "sha512:abcd", "size": 1}, "layers": []}),
        serde_json::json!({"config": {"digest": d(1), "size": 1}, "layers": [{"digest": "sha256:ABC", "size": 1}]}),
        serde_json::json!({"config": {"digest": d(1), "size": -1}, "layers": []}),
        serde_json::json!({"layers": []}),
    ];
    for c in cases {
        let raw = c.to_string().into_bytes();
        let e = parse_image(raw, OCI_MANIFEST.into(), d(9)).unwrap_err();
        assert!(matches!(e, OciError::Json(_)), "{c}: {e}");
    }
    // null collections are empty ones.
    let raw = serde_json::json!({"config": {"digest": d(1), "size": 1}, "layers": null, "annotations": null})
        .to_string()
        .into_bytes();
    let m = parse_image(raw, String::new(), d(9)).unwrap();
    assert!(m.layers.is_empty() && m.annotations.is_empty());
}

#[test]
fn an_index_resolves_to_the_first_linux_amd64_entry() {
    let idx = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": d(1), "size": 10, "platform": {"os": "linux", "architecture": "arm64"}},
            {"mediaType": OCI_MANIFEST, "digest": d(2), "size": 10, "platform": {"os": "windows", "architecture": "amd64"}},
            {"mediaType": OCI_MANIFEST, "digest": d(3), "size": 10, "platform": {"os": "linux", "architecture": "amd64", "variant": "v3"}},
            {"mediaType": OCI_MANIFEST, "digest": d(4), "size": 10, "platform": {"os": "linux", "architecture": "amd64"}}
        ]
    });
    let idx = parse_index(idx.to_string().as_bytes()).unwrap();
    assert_eq!(
        idx.child_for(DEFAULT_OS, DEFAULT_ARCHITECTURE)
            .unwrap()
            .digest,
        d(3)
    );
    assert_eq!(idx.child_for("linux", "arm64").unwrap().digest, d(1));
    assert!(idx.child_for("linux", "s390x").is_none());
    // An entry without a platform counts as linux/amd64.
    let idx = serde_json::json!({"manifests": [
        {"digest": d(5), "size": 1, "platform": {"os": "linux", "architecture": "arm"}},
        {"digest": d(6), "size": 1}
    ]});
    let idx = parse_index(idx.to_string().as_bytes()).unwrap();
    assert_eq!(
        idx.child_for(DEFAULT_OS, DEFAULT_ARCHITECTURE)
            .unwrap()
            .digest,
        d(6)
    );
    let bad = serde_json::json!({"manifests": [{"digest": "md5:00", "size": 1}]});
    assert!(parse_index(bad.to_string().as_bytes()).is_err());
}

#[test]
fn digests_and_tags_are_validated() {
    assert_eq!(
        sha256_digest(b""),
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert!(validate_digest(&d(0xab)).is_ok());
    for bad in [
        "sha256:",
        "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
        "sha512:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85",
        "sha256:../../../../e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca4959",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ] {
        assert!(validate_digest(bad).is_err(), "{bad}");
    }
    for ok in [
        "latest",
        "6.1.0",
        "v6.1.0",
        "6.2.0-rc.1",
        "_x",
        "sha256-abc.sig",
        &"a".repeat(128),
    ] {
        assert!(validate_tag(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        ".x",
        "-x",
        "a/b",
        "../x",
        "a:b",
        "a b",
        &"a".repeat(129),
        "a?b",
    ] {
        assert!(validate_tag(bad).is_err(), "{bad}");
    }
}
