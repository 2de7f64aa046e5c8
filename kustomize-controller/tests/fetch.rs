//! Artifact fetcher against a local HTTP server (source-controller's artifact server, or small
//! axum handlers for failure modes): download, digest verification, 404, retries, size limit,
//! cache hits without requests, eviction, and refusal of a hostile tarball served over HTTP.
//! Unpacking hand-made (hostile) tarballs and working copies (removed with their value, and at
//! start-up when a killed process left them) are in `fetch_more.rs`; the servers and helpers
//! both use are in `fetch_common/mod.rs`.
#![allow(clippy::unwrap_used)]

mod fetch_common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use axum::http::StatusCode;
use fetch_common::*;
use kustomize_controller::fetch::{ArtifactFetcher, FetchError, UntarError, copy_tree};
use sha2::Digest as _;

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn fetches_unpacks_and_serves_cache_hits_without_requests() {
    let storage = tempfile::tempdir().unwrap();
    let rel = "gitrepository/default/app/abc123.tar.gz";
    let digest = make_artifact(storage.path(), rel, "first");
    assert!(digest.starts_with("sha256:"));
    let server = artifact_server(storage.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let f = fetcher(cache.path());
    let url = format!("{}/{rel}", server.base);

    let dir = f.fetch(&url, &digest).await.unwrap();
    assert_eq!(dir, cache.path().join(digest.trim_start_matches("sha256:")));
    assert_eq!(
        fs::read_to_string(dir.join("deploy/cm.yaml")).unwrap(),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: first\n"
    );
    assert_eq!(
        fs::read_to_string(dir.join("deploy/nested/deeper/x.txt")).unwrap(),
        "first"
    );
    let mode = fs::metadata(dir.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o100, 0o100, "executable bit kept: {mode:o}");
    let dmode = fs::metadata(dir.join("deploy"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dmode & 0o700, 0o700);
    // File times are not in the future.
    let mtime = fs::metadata(dir.join("deploy/cm.yaml"))
        .unwrap()
        .modified()
        .unwrap();
    assert!(mtime <= SystemTime::now());
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
    // Only the unpacked dir is left in the cache (temp files are gone).
    assert_eq!(
        cache_entries(cache.path()),
        vec![digest.trim_start_matches("sha256:").to_string()]
    );

    // Cache hit: same dir, no request; also with a bare-hex digest and a fresh fetcher.
    let again = f.fetch(&url, &digest).await.unwrap();
    assert_eq!(again, dir);
    let bare = digest.trim_start_matches("sha256:");
    let again = fetcher(cache.path()).fetch(&url, bare).await.unwrap();
    assert_eq!(again, dir);
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);

    // The cached tree can be copied out for a reconcile to modify.
    let work = tempfile::tempdir().unwrap();
    copy_tree(&dir, &work.path().join("src")).unwrap();
    assert_eq!(
        fs::read_to_string(work.path().join("src/deploy/nested/deeper/x.txt")).unwrap(),
        "first"
    );
}

#[tokio::test]
async fn digest_mismatch_is_refused_and_nothing_is_cached() {
    let storage = tempfile::tempdir().unwrap();
    let rel = "gitrepository/default/app/a.tar.gz";
    make_artifact(storage.path(), rel, "x");
    let server = artifact_server(storage.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let wrong = format!("sha256:{}", "0".repeat(64));
    let err = fetcher(cache.path())
        .fetch(&format!("{}/{rel}", server.base), &wrong)
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::DigestMismatch { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "failed to verify archive: computed digest doesn't match provided '{wrong}' (check whether file size exceeds max download size)"
        )
    );
    assert!(
        cache_entries(cache.path()).is_empty(),
        "{:?}",
        cache_entries(cache.path())
    );
}

#[tokio::test]
async fn sha512_digests_are_verified() {
    let storage = tempfile::tempdir().unwrap();
    let rel = "gitrepository/default/app/b.tar.gz";
    make_artifact(storage.path(), rel, "x");
    let bytes = fs::read(storage.path().join(rel)).unwrap();
    let digest = format!("sha512:{}", hex::encode(sha2::Sha512::digest(&bytes)));
    let server = artifact_server(storage.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let dir = fetcher(cache.path())
        .fetch(&format!("{}/{rel}", server.base), &digest)
        .await
        .unwrap();
    assert!(dir.join("kustomization.yaml").is_file());
    assert_eq!(dir.file_name().unwrap().len(), 128);
}

#[tokio::test]
async fn not_found_is_typed_and_not_retried() {
    let storage = tempfile::tempdir().unwrap();
    let server = artifact_server(storage.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let err = fetcher(cache.path())
        .fetch(
            &format!("{}/gitrepository/default/app/missing.tar.gz", server.base),
            &"a".repeat(64),
        )
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert_eq!(err.to_string(), "file not found");
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn client_errors_other_than_404_fail_without_retry() {
    let server = status_server(StatusCode::FORBIDDEN).await;
    let cache = tempfile::tempdir().unwrap();
    let err = fetcher(cache.path())
        .fetch(&format!("{}/x.tar.gz", server.base), &"a".repeat(64))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "failed to download archive from {}/x.tar.gz (status: 403 Forbidden)",
            server.base
        )
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn server_errors_are_retried_until_success() {
    let body = tgz(&[file("kustomization.yaml", "resources: []\n")]);
    let digest = sha256_hex(&body);
    let server = flaky_server(body, 2).await;
    let cache = tempfile::tempdir().unwrap();
    let dir = fetcher(cache.path())
        .fetch(&format!("{}/a.tar.gz", server.base), &digest)
        .await
        .unwrap();
    assert_eq!(
        fs::read_to_string(dir.join("kustomization.yaml")).unwrap(),
        "resources: []\n"
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn retries_give_up_after_the_configured_count() {
    let server = status_server(StatusCode::SERVICE_UNAVAILABLE).await;
    let cache = tempfile::tempdir().unwrap();
    let mut o = fast_opts(cache.path());
    o.retries = 2;
    let err = ArtifactFetcher::new(o)
        .unwrap()
        .fetch(&format!("{}/a.tar.gz", server.base), &"a".repeat(64))
        .await
        .unwrap_err();
    match &err {
        FetchError::Download { attempts, .. } => assert_eq!(*attempts, 3),
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        err.to_string().contains("giving up after 3 attempt(s)"),
        "{err}"
    );
    assert!(err.to_string().contains("503 Service Unavailable"), "{err}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn connection_refused_is_retried_then_reported() {
    // Bind and drop a listener to get a port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cache = tempfile::tempdir().unwrap();
    let mut o = fast_opts(cache.path());
    o.retries = 1;
    let err = ArtifactFetcher::new(o)
        .unwrap()
        .fetch(
            &format!("http://127.0.0.1:{port}/a.tar.gz"),
            &"a".repeat(64),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, FetchError::Download { attempts: 2, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn download_size_limit_is_enforced() {
    let storage = tempfile::tempdir().unwrap();
    let rel = "gitrepository/default/app/big.tar.gz";
    let digest = make_artifact(storage.path(), rel, "x");
    let server = artifact_server(storage.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let mut o = fast_opts(cache.path());
    o.max_download_bytes = Some(64);
    let err = ArtifactFetcher::new(o)
        .unwrap()
        .fetch(&format!("{}/{rel}", server.base), &digest)
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::TooLarge { limit: 64 }), "{err:?}");
    assert!(cache_entries(cache.path()).is_empty());
}

#[tokio::test]
async fn host_override_redirects_downloads() {
    let storage = tempfile::tempdir().unwrap();
    let rel = "gitrepository/default/app/c.tar.gz";
    let digest = make_artifact(storage.path(), rel, "x");
    let server = artifact_server(storage.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let mut o = fast_opts(cache.path());
    o.host_override = Some(server.base.trim_start_matches("http://").to_string());
    let dir = ArtifactFetcher::new(o)
        .unwrap()
        .fetch(
            &format!("http://source-controller.flux-system.svc.cluster.local./{rel}"),
            &digest,
        )
        .await
        .unwrap();
    assert!(dir.join("kustomization.yaml").is_file());
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn least_recently_used_entries_are_evicted() {
    let storage = tempfile::tempdir().unwrap();
    let server = artifact_server(storage.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let mut o = fast_opts(cache.path());
    o.keep = 2;
    let f = ArtifactFetcher::new(o).unwrap();
    let mut dirs = Vec::new();
    for i in 0..3 {
        let rel = format!("gitrepository/default/app/{i}.tar.gz");
        let digest = make_artifact(storage.path(), &rel, &format!("rev{i}"));
        dirs.push(
            f.fetch(&format!("{}/{rel}", server.base), &digest)
                .await
                .unwrap(),
        );
        // Distinct mtimes for the LRU order.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!dirs[0].exists(), "oldest entry evicted");
    assert!(dirs[1].is_dir());
    assert!(dirs[2].is_dir());
    assert_eq!(cache_entries(cache.path()).len(), 2);

    // With a grace period, recently used entries survive beyond `keep`.
    let mut o = fast_opts(cache.path());
    o.keep = 1;
    o.evict_grace = Duration::from_secs(3600);
    let f = ArtifactFetcher::new(o).unwrap();
    let rel = "gitrepository/default/app/3.tar.gz";
    let digest = make_artifact(storage.path(), rel, "rev3");
    f.fetch(&format!("{}/{rel}", server.base), &digest)
        .await
        .unwrap();
    assert!(dirs[1].is_dir() && dirs[2].is_dir());
    assert_eq!(cache_entries(cache.path()).len(), 3);
}

/// The build reads the cache entry in place (no working copy): while a reconcile holds it, other
/// fetches never evict it, even past `keep` and with no grace period; once released it goes.
#[tokio::test]
async fn a_pinned_entry_is_not_evicted_until_released() {
    let storage = tempfile::tempdir().unwrap();
    let server = artifact_server(storage.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let mut o = fast_opts(cache.path());
    o.keep = 1;
    let f = ArtifactFetcher::new(o).unwrap();
    let artifact = |i: usize| {
        let rel = format!("gitrepository/default/app/p{i}.tar.gz");
        let digest = make_artifact(storage.path(), &rel, &format!("rev{i}"));
        (format!("{}/{rel}", server.base), digest)
    };
    let (url0, digest0) = artifact(0);
    let pinned = f.fetch_pinned(&url0, &digest0).await.unwrap();
    assert!(pinned.path().join("kustomization.yaml").is_file());
    for i in 1..3 {
        let (url, digest) = artifact(i);
        f.fetch(&url, &digest).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        pinned.path().join("kustomization.yaml").is_file(),
        "a pinned entry was evicted"
    );
    let path = pinned.path().to_path_buf();
    drop(pinned);
    let (url, digest) = artifact(3);
    f.fetch(&url, &digest).await.unwrap();
    assert!(!path.exists(), "a released entry is evicted like any other");
    assert_eq!(cache_entries(cache.path()).len(), 1);
}

#[tokio::test]
async fn fetch_into_gives_a_private_copy() {
    let storage = tempfile::tempdir().unwrap();
    let rel = "gitrepository/default/app/e.tar.gz";
    let digest = make_artifact(storage.path(), rel, "priv");
    let server = artifact_server(storage.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let f = fetcher(cache.path());
    let url = format!("{}/{rel}", server.base);
    let work = tempfile::tempdir().unwrap();
    let dest = work.path().join("src");
    f.fetch_into(&url, &digest, &dest).await.unwrap();
    fs::write(dest.join("kustomization.yaml"), "changed").unwrap();
    // The cached tree is untouched, and a second copy comes from the cache.
    let cached = f.fetch(&url, &digest).await.unwrap();
    assert_eq!(
        fs::read_to_string(cached.join("kustomization.yaml")).unwrap(),
        "resources:\n- deploy/cm.yaml\n"
    );
    let dest2 = work.path().join("src2");
    f.fetch_into(&url, &digest, &dest2).await.unwrap();
    assert_eq!(
        fs::read_to_string(dest2.join("deploy/nested/deeper/x.txt")).unwrap(),
        "priv"
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn concurrent_fetches_of_one_artifact_download_once() {
    let storage = tempfile::tempdir().unwrap();
    let rel = "gitrepository/default/app/d.tar.gz";
    let digest = make_artifact(storage.path(), rel, "x");
    let server = artifact_server(storage.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let f = Arc::new(fetcher(cache.path()));
    let url = format!("{}/{rel}", server.base);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let f = f.clone();
            let url = url.clone();
            let digest = digest.clone();
            tokio::spawn(async move { f.fetch(&url, &digest).await.unwrap() })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    assert!(out.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn hostile_archive_served_over_http_is_refused() {
    let body = tgz(&[file("ok.yaml", "a: b\n"), file("../escape.yaml", "x")]);
    let digest = sha256_hex(&body);
    let server = flaky_server(body, 0).await;
    let cache = tempfile::tempdir().unwrap();
    let err = fetcher(cache.path())
        .fetch(&format!("{}/evil.tar.gz", server.base), &digest)
        .await
        .unwrap_err();
    assert!(
        matches!(err, FetchError::Untar(UntarError::InvalidName(ref n)) if n == "../escape.yaml"),
        "{err:?}"
    );
    assert!(!cache.path().join("escape.yaml").exists());
    assert!(!cache.path().parent().unwrap().join("escape.yaml").exists());
    assert!(
        cache_entries(cache.path()).is_empty(),
        "{:?}",
        cache_entries(cache.path())
    );
}
