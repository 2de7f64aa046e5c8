//! The client against a scripted fake registry: answers a real registry never gives (slow,
//! oversized, lying, malformed), checking every byte and second stays bounded.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use rflux_oci::manifest::{DOCKER_SCHEMA1_SIGNED, OCI_MANIFEST, sha256_digest};
use rflux_oci::{Descriptor, Limits, OciError};
use support::{FakeServer, Reply, client_for};

fn d(n: u8) -> String {
    format!("sha256:{}", hex::encode([n; 32]))
}

/// `/v2/` answers 200; everything else goes to `rest`.
async fn registry(rest: impl Fn(&support::Seen) -> Reply + Send + Sync + 'static) -> FakeServer {
    FakeServer::start(move |req| {
        if req.path == "/v2/" {
            Reply::new(200)
        } else {
            rest(req)
        }
    })
    .await
}

#[tokio::test]
async fn a_registry_that_never_answers_times_out() {
    // Accepts connections and never writes a byte (neither TLS nor HTTP).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _hold = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = listener.accept().await {
            conns.push(c);
        }
    });
    let c = client_for(
        &addr.to_string(),
        "app",
        Duration::from_secs(1),
        Limits::default(),
    );
    let started = Instant::now();
    let e = c.resolve_digest("latest").await.unwrap_err();
    assert!(matches!(e, OciError::Timeout { .. }), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(e.to_string().contains("timed out"), "{e}");
}

#[tokio::test]
async fn a_blob_that_stalls_mid_stream_times_out_and_leaves_no_file() {
    let blob = vec![7u8; 64 << 10];
    let digest = sha256_digest(&blob);
    let served = blob.clone();
    let srv = registry(move |_| Reply {
        status: 200,
        body: served.clone(),
        stall_after: Some(1000),
        ..Default::default()
    })
    .await;
    let c = client_for(
        &srv.host(),
        "app",
        Duration::from_secs(1),
        Limits::default(),
    );
    let desc = Descriptor {
        digest,
        size: blob.len() as u64,
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("layer.tgz");
    let started = Instant::now();
    let e = c.blob_to_file(&desc, &dest, 1 << 20).await.unwrap_err();
    assert!(matches!(e, OciError::Timeout { .. }), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!dest.exists());
}

#[tokio::test]
async fn manifests_over_the_limit_are_refused_with_or_without_a_length() {
    let huge = vec![b' '; 2 << 20];
    for no_length in [false, true] {
        let body = huge.clone();
        let srv = registry(move |_| Reply {
            status: 200,
            headers: vec![("Content-Type".into(), OCI_MANIFEST.into())],
            body: body.clone(),
            no_length,
            ..Default::default()
        })
        .await;
        let limits = Limits {
            max_manifest_bytes: 1 << 20,
            ..Default::default()
        };
        let c = client_for(&srv.host(), "app", Duration::from_secs(5), limits);
        let e = c.manifest(&sha256_digest(&huge)).await.unwrap_err();
        assert_eq!(
            e,
            OciError::TooLarge {
                what: "manifest".into(),
                limit: 1 << 20
            },
            "no_length={no_length}"
        );
    }
}

#[tokio::test]
async fn what_is_not_a_manifest_is_refused_and_schema1_too() {
    let config = br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers"}}"#.to_vec();
    let schema1 = br#"{"schemaVersion":1,"name":"app","tag":"v1","fsLayers":[]}"#.to_vec();
    let (c1, s1) = (config.clone(), schema1.clone());
    let srv = registry(move |req| {
        if req.path.ends_with(&sha256_digest(&c1)) {
            Reply::new(200)
                .header("Content-Type", "application/vnd.oci.image.config.v1+json")
                .body(c1.clone())
        } else {
            Reply::new(200)
                .header("Content-Type", DOCKER_SCHEMA1_SIGNED)
                .body(s1.clone())
        }
    })
    .await;
    let c = client_for(
        &srv.host(),
        "app",
        Duration::from_secs(5),
        Limits::default(),
    );
    let e = c.manifest(&sha256_digest(&config)).await.unwrap_err();
    assert!(
        matches!(&e, OciError::NotAManifest { media_type } if media_type == "application/vnd.oci.image.config.v1+json"),
        "{e}"
    );
    let e = c.manifest(&sha256_digest(&schema1)).await.unwrap_err();
    assert!(matches!(e, OciError::Schema1 { .. }), "{e}");
}

#[tokio::test]
async fn a_manifest_whose_bytes_do_not_match_the_digest_is_refused() {
    let srv = registry(|_| {
        Reply::new(200)
            .header("Content-Type", OCI_MANIFEST)
            .body(format!(
                r#"{{"schemaVersion":2,"config":{{"digest":"{}","size":2}},"layers":[]}}"#,
                d(1)
            ))
    })
    .await;
    let c = client_for(
        &srv.host(),
        "app",
        Duration::from_secs(5),
        Limits::default(),
    );
    let e = c.manifest(&d(9)).await.unwrap_err();
    assert!(
        matches!(&e, OciError::DigestMismatch { expected, .. } if *expected == d(9)),
        "{e}"
    );
}

#[tokio::test]
async fn tag_pages_may_not_leave_the_registry_or_loop_on_empty_pages() {
    let srv = registry(|_| {
        Reply::new(200)
            .header(
                "Link",
                "<http://169.254.169.254/v2/app/tags/list?last=a>; rel=\"next\"",
            )
            .body(r#"{"name":"app","tags":["a"]}"#)
    })
    .await;
    let c = client_for(
        &srv.host(),
        "app",
        Duration::from_secs(5),
        Limits::default(),
    );
    let e = c.list_tags().await.unwrap_err();
    assert!(matches!(e, OciError::Protocol(_)), "{e}");

    let srv = registry(|_| {
        Reply::new(200)
            .header("Link", "</v2/app/tags/list?last=z>; rel=\"next\"")
            .body(r#"{"name":"app","tags":[]}"#)
    })
    .await;
    let c = client_for(
        &srv.host(),
        "app",
        Duration::from_secs(5),
        Limits::default(),
    );
    let e = c.list_tags().await.unwrap_err();
    assert!(matches!(e, OciError::Protocol(_)), "{e}");

    // A page linking to itself forever stops at max_tags.
    let srv = registry(|_| {
        Reply::new(200)
            .header("Link", "</v2/app/tags/list>; rel=\"next\"")
            .body(r#"{"name":"app","tags":["a","b","c"]}"#)
    })
    .await;
    let limits = Limits {
        max_tags: 50,
        ..Default::default()
    };
    let c = client_for(&srv.host(), "app", Duration::from_secs(5), limits);
    let e = c.list_tags().await.unwrap_err();
    assert!(matches!(e, OciError::TooMany { limit: 50, .. }), "{e}");
    assert!(srv.requests().len() < 30);
}

#[tokio::test]
async fn error_bodies_that_echo_credentials_are_scrubbed() {
    // The registry asks for Basic auth and then answers 500 echoing the Authorization header.
    let srv = FakeServer::start(|req| match req.header("authorization") {
        None => Reply::new(401).header("WWW-Authenticate", "Basic realm=\"r\""),
        Some(auth) => Reply::new(500).body(format!(
            r#"{{"errors":[{{"code":"UNKNOWN","message":"you sent {auth}"}}]}}"#
        )),
    })
    .await;
    let repo =
        rflux_oci::Repository::parse_flux_url(&format!("oci://{}/app", srv.host()), false).unwrap();
    let kc = support::keychain(&srv.host(), "alice", "pa55-w0rd");
    let c = rflux_oci::Client::new(repo, kc, Default::default(), Limits::default()).unwrap();
    let e = c.resolve_digest("latest").await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, OciError::Status { code: 500, .. }), "{msg}");
    assert!(msg.contains("you sent Basic <redacted>"), "{msg}");
    assert!(!msg.contains("pa55-w0rd"), "{msg}");
    // The header was really sent (the test would prove nothing otherwise).
    assert!(
        srv.requests()
            .iter()
            .any(|r| r.header("authorization").is_some())
    );
}

#[tokio::test]
async fn a_realm_pointing_at_a_metadata_endpoint_gets_nothing() {
    let srv = FakeServer::start(|_| {
        Reply::new(401).header(
            "WWW-Authenticate",
            "Bearer realm=\"http://169.254.169.254/latest/meta-data\",service=\"x\"",
        )
    })
    .await;
    let repo =
        rflux_oci::Repository::parse_flux_url(&format!("oci://{}/app", srv.host()), false).unwrap();
    let kc = support::keychain(&srv.host(), "alice", "pa55-w0rd");
    let cfg = rflux_oci::TransportConfig {
        timeout: Duration::from_secs(2),
        ..Default::default()
    };
    let c = rflux_oci::Client::new(repo, kc, cfg, Limits::default()).unwrap();
    let started = Instant::now();
    let e = c.list_tags().await.unwrap_err();
    assert!(matches!(e, OciError::Auth(_)), "{e}");
    assert!(e.to_string().contains("169.254.169.254"), "{e}");
    // Refused before connecting (a connection attempt would take the 2 s timeout).
    assert!(started.elapsed() < Duration::from_millis(1500));
}

#[tokio::test]
async fn a_token_answer_over_the_limit_or_without_a_token_fails() {
    let big = format!(r#"{{"token":"{}"}}"#, "t".repeat(100 << 10));
    let srv = FakeServer::start(move |req| {
        if req.path.starts_with("/token") {
            if req.path.contains("service=small") {
                Reply::new(200).body(r#"{"expires_in":300}"#)
            } else {
                Reply::new(200).body(big.clone())
            }
        } else {
            Reply::new(401)
        }
    })
    .await;
    for (service, want_too_large) in [("big", true), ("small", false)] {
        let realm = format!("http://{}/token", srv.host());
        let challenge = format!("Bearer realm=\"{realm}\",service=\"{service}\"");
        let inner =
            FakeServer::start(move |_| Reply::new(401).header("WWW-Authenticate", &challenge))
                .await;
        let c = client_for(
            &inner.host(),
            "app",
            Duration::from_secs(5),
            Limits::default(),
        );
        let e = c.list_tags().await.unwrap_err();
        if want_too_large {
            assert!(matches!(e, OciError::TooLarge { limit: 65536, .. }), "{e}");
        } else {
            assert!(matches!(e, OciError::Auth(_)), "{e}");
            assert!(e.to_string().contains("no token"), "{e}");
        }
    }
}

#[tokio::test]
async fn a_blob_longer_than_its_descriptor_is_cut_off_without_a_length() {
    // No Content-Length: only counting the bytes while they arrive can catch it.
    let blob = vec![3u8; 4 << 20];
    let served = blob.clone();
    let srv = registry(move |_| Reply {
        status: 200,
        body: served.clone(),
        no_length: true,
        ..Default::default()
    })
    .await;
    let c = client_for(
        &srv.host(),
        "app",
        Duration::from_secs(5),
        Limits::default(),
    );
    let desc = Descriptor {
        digest: sha256_digest(&blob[..1000]),
        size: 1000,
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("layer.tgz");
    let e = c.blob_to_file(&desc, &dest, 1 << 20).await.unwrap_err();
    assert!(
        matches!(e, OciError::SizeMismatch { expected: 1000, actual, .. } if actual > 1000 && actual < (4 << 20)),
        "{e}"
    );
    assert!(!dest.exists());
    // Shorter than announced, also without a length.
    let desc = Descriptor {
        digest: sha256_digest(&blob),
        size: blob.len() as u64 + 1,
        ..Default::default()
    };
    let e = c.blob_bytes(&desc, 8 << 20).await.unwrap_err();
    assert!(
        matches!(e, OciError::SizeMismatch { actual, .. } if actual == blob.len() as u64),
        "{e}"
    );
}
