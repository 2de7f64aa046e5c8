//! Artifact fetcher against a local HTTP server (source-controller's artifact server, or small
//! axum handlers for failure modes): download, digest verification, 404, retries, size limit,
//! cache hits without requests, eviction, refusal of hostile tarballs, and working copies
//! (removed with their value, and at start-up when a killed process left them).
#![allow(clippy::unwrap_used)]

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use kustomize_controller::fetch::{
    ArtifactFetcher, FetchError, FetcherOptions, RUN_DIR_PREFIX, UntarError, UntarLimits,
    copy_tree, untar,
};
use sha2::Digest as _;

// ---------------------------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------------------------

struct Server {
    base: String,
    requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(app: Router) -> Server {
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    let app = app.layer(middleware::from_fn(move |req: Request, next: Next| {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            next.run(req).await
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Server {
        base: format!("http://{addr}"),
        requests,
        task,
    }
}

/// source-controller's artifact server over `root`.
async fn artifact_server(root: &Path) -> Server {
    serve(source_controller::artifact::router(root).unwrap()).await
}

/// Serves `body` at every path, after answering `failures` requests with 500.
async fn flaky_server(body: Vec<u8>, failures: usize) -> Server {
    let seen = Arc::new(AtomicUsize::new(0));
    let body = Arc::new(body);
    let app = Router::new().fallback(move || {
        let seen = seen.clone();
        let body = body.clone();
        async move {
            if seen.fetch_add(1, Ordering::SeqCst) < failures {
                (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response()
            } else {
                (StatusCode::OK, body.as_ref().clone()).into_response()
            }
        }
    });
    serve(app).await
}

async fn status_server(status: StatusCode) -> Server {
    serve(Router::new().fallback(move || async move { (status, "nope").into_response() })).await
}

// ---------------------------------------------------------------------------------------------
// Artifacts
// ---------------------------------------------------------------------------------------------

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

/// Packages a small source tree into `<storage>/<rel>` and returns its digest.
fn make_artifact(storage: &Path, rel: &str, marker: &str) -> String {
    let src = tempfile::tempdir().unwrap();
    write(
        src.path(),
        "kustomization.yaml",
        "resources:\n- deploy/cm.yaml\n",
    );
    write(
        src.path(),
        "deploy/cm.yaml",
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {marker}\n"),
    );
    write(src.path(), "deploy/nested/deeper/x.txt", marker);
    write(src.path(), "run.sh", "#!/bin/sh\n");
    fs::set_permissions(src.path().join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    let out = storage.join(rel);
    fs::create_dir_all(out.parent().unwrap()).unwrap();
    source_controller::artifact::package_to_file(src.path(), &out, None).unwrap()
}

fn fetcher(cache: &Path) -> ArtifactFetcher {
    ArtifactFetcher::new(fast_opts(cache)).unwrap()
}

fn fast_opts(cache: &Path) -> FetcherOptions {
    let mut o = FetcherOptions::new(cache);
    o.retries = 3;
    o.retry_wait_min = Duration::from_millis(10);
    o.retry_wait_max = Duration::from_millis(40);
    o.evict_grace = Duration::ZERO;
    o
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(b))
}

fn cache_entries(cache: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(cache)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------------
// Hand-made tarballs (for hostile inputs)
// ---------------------------------------------------------------------------------------------

fn octal(field: &mut [u8], v: u64) {
    let digits = field.len() - 1;
    let s = format!("{v:0digits$o}");
    field[..digits].copy_from_slice(s.as_bytes());
    field[digits] = 0;
}

fn raw_entry(
    name: &[u8],
    typeflag: u8,
    mode: u32,
    data: &[u8],
    link: &[u8],
    mtime: u64,
) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name);
    octal(&mut h[100..108], u64::from(mode));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], data.len() as u64);
    octal(&mut h[136..148], mtime);
    h[156] = typeflag;
    h[157..157 + link.len()].copy_from_slice(link);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
    octal(&mut h[148..155], sum);
    h[155] = b' ';
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

fn file(name: &str, data: &str) -> Vec<u8> {
    raw_entry(name.as_bytes(), b'0', 0o644, data.as_bytes(), b"", 0)
}

fn tgz(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut tar = entries.concat();
    tar.extend_from_slice(&[0u8; 1024]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    gz.finish().unwrap()
}

fn untar_bytes(bytes: &[u8], limits: &UntarLimits) -> (tempfile::TempDir, Result<(), UntarError>) {
    let dest = tempfile::tempdir().unwrap();
    let r = untar(bytes, dest.path(), limits).map(|_| ());
    (dest, r)
}

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

#[test]
fn traversal_and_absolute_names_are_refused() {
    for name in ["../x", "a/../../x", "/abs/path", "a\\b", "a/.."] {
        let (dest, r) = untar_bytes(&tgz(&[file(name, "x")]), &UntarLimits::default());
        match r {
            Err(UntarError::InvalidName(n)) => assert_eq!(n, name),
            other => panic!("{name}: unexpected {other:?}"),
        }
        assert!(
            fs::read_dir(dest.path()).unwrap().next().is_none(),
            "{name}"
        );
    }
}

#[test]
fn symlinks_are_skipped_and_never_followed() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("secret");
    let bytes = tgz(&[
        raw_entry(
            b"link",
            b'2',
            0o777,
            b"",
            target.to_str().unwrap().as_bytes(),
            0,
        ),
        raw_entry(b"up", b'2', 0o777, b"", b"../../..", 0),
        // A file written "through" the symlink name must land inside dest as a plain file.
        file("link", "inside"),
        file("kept.yaml", "k: v\n"),
    ]);
    let (dest, r) = untar_bytes(&bytes, &UntarLimits::default());
    r.unwrap();
    assert!(!target.exists());
    let link = dest.path().join("link");
    assert!(
        !fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read_to_string(link).unwrap(), "inside");
    assert!(fs::symlink_metadata(dest.path().join("up")).is_err());
    assert_eq!(
        fs::read_to_string(dest.path().join("kept.yaml")).unwrap(),
        "k: v\n"
    );
}

#[test]
fn entry_count_and_size_limits_are_enforced() {
    let many: Vec<Vec<u8>> = (0..50).map(|i| file(&format!("f{i}"), "")).collect();
    let limits = UntarLimits {
        max_bytes: None,
        max_entries: Some(10),
    };
    let (_d, r) = untar_bytes(&tgz(&many), &limits);
    assert!(
        matches!(r, Err(UntarError::TooManyEntries { limit: 10 })),
        "{r:?}"
    );

    let limits = UntarLimits {
        max_bytes: Some(100),
        max_entries: None,
    };
    let big = "x".repeat(80);
    let (_d, r) = untar_bytes(&tgz(&[file("a", &big), file("b", &big)]), &limits);
    match r {
        Err(UntarError::TooBig { name, limit }) => {
            assert_eq!((name.as_str(), limit), ("b", 100));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn hard_links_and_devices_are_unsupported() {
    for (flag, name) in [(b'1', "hard"), (b'3', "chardev"), (b'6', "fifo")] {
        let (_d, r) = untar_bytes(
            &tgz(&[raw_entry(
                name.as_bytes(),
                flag,
                0o644,
                b"",
                b"/etc/passwd",
                0,
            )]),
            &UntarLimits::default(),
        );
        assert!(
            matches!(r, Err(UntarError::Unsupported { name: ref n, .. }) if n == name),
            "{name}: {r:?}"
        );
    }
}

#[test]
fn directory_modes_are_at_least_0700_and_mtimes_are_clamped() {
    let future = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 10 * 365 * 24 * 3600;
    let bytes = tgz(&[
        raw_entry(b"ro/", b'5', 0o500, b"", b"", 0),
        raw_entry(b"ro/f.txt", b'0', 0o400, b"data", b"", future),
        raw_entry(b"old.txt", b'0', 0o644, b"old", b"", 1_000_000_000),
    ]);
    let (dest, r) = untar_bytes(&bytes, &UntarLimits::default());
    r.unwrap();
    let m = fs::metadata(dest.path().join("ro"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(m & 0o777, 0o700, "{m:o}");
    let f = fs::metadata(dest.path().join("ro/f.txt")).unwrap();
    assert!(f.modified().unwrap() <= SystemTime::now());
    assert_eq!(f.permissions().mode() & 0o600, 0o600);
    let old = fs::metadata(dest.path().join("old.txt")).unwrap();
    assert_eq!(
        old.modified().unwrap(),
        UNIX_EPOCH + Duration::from_secs(1_000_000_000)
    );
}

#[test]
fn truncated_and_corrupt_archives_are_errors() {
    let mut bytes = tgz(&[file("a", &"x".repeat(4000))]);
    bytes.truncate(bytes.len() / 2);
    let (_d, r) = untar_bytes(&bytes, &UntarLimits::default());
    assert!(r.is_err());
    let (_d, r) = untar_bytes(b"not gzip at all", &UntarLimits::default());
    assert!(matches!(r, Err(UntarError::Format(_))), "{r:?}");
}

// ---------------------------------------------------------------------------------------------
// Working copies
// ---------------------------------------------------------------------------------------------

fn work_opts(cache: &Path, parent: &Path) -> FetcherOptions {
    let mut o = fast_opts(cache);
    o.work_parent = parent.to_path_buf();
    o
}

#[tokio::test]
async fn fetch_to_work_dir_gives_a_copy_that_goes_with_its_value() {
    let storage = tempfile::tempdir().unwrap();
    let rel = "gitrepository/default/app/w.tar.gz";
    let digest = make_artifact(storage.path(), rel, "work");
    let server = artifact_server(storage.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let parent = tempfile::tempdir().unwrap();
    // The parent is made when missing.
    let work_parent = parent.path().join("tmp");
    let f = ArtifactFetcher::new(work_opts(cache.path(), &work_parent)).unwrap();
    let url = format!("{}/{rel}", server.base);
    let a = f.fetch_to_work_dir(&url, &digest).await.unwrap();
    let b = f.fetch_to_work_dir(&url, &digest).await.unwrap();
    assert_ne!(a.path(), b.path());
    assert_eq!(
        fs::read_to_string(a.path().join("deploy/nested/deeper/x.txt")).unwrap(),
        "work"
    );
    // Both in the fetcher's one run directory, named for the sweep.
    let run = a.path().parent().unwrap().to_path_buf();
    assert_eq!(b.path().parent(), Some(run.as_path()));
    assert_eq!(run.parent(), Some(work_parent.as_path()));
    let run_name = run.file_name().unwrap().to_string_lossy().into_owned();
    assert!(run_name.starts_with(RUN_DIR_PREFIX), "{run_name}");
    let a_path = a.path().to_path_buf();
    drop(a);
    assert!(!a_path.exists());
    assert!(b.path().is_dir());
    drop(b);
    drop(f);
    assert!(!run.exists(), "the run directory goes with its fetcher");
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

#[test]
fn start_up_removes_working_copies_of_ended_runs_only() {
    let parent = tempfile::tempdir().unwrap();
    let p = parent.path();
    let cache = tempfile::tempdir().unwrap();

    // A live run: its copy survives another fetcher's start-up.
    let live = ArtifactFetcher::new(work_opts(cache.path(), p)).unwrap();
    let live_copy = live.work_dir().unwrap();
    fs::write(live_copy.path().join("kustomization.yaml"), "x").unwrap();
    let live_run = live_copy.path().parent().unwrap().to_path_buf();

    // Runs that ended mid-reconcile: their lock file is there but nobody holds it.
    let dead = p.join(format!("{RUN_DIR_PREFIX}dead"));
    fs::create_dir_all(dead.join("reconcile-1/deploy")).unwrap();
    fs::write(dead.join(".lock"), "").unwrap();
    fs::write(dead.join("reconcile-1/deploy/cm.yaml"), "x").unwrap();
    fs::set_permissions(
        dead.join("reconcile-1/deploy"),
        fs::Permissions::from_mode(0o500),
    )
    .unwrap();
    let dead_empty = p.join(format!("{RUN_DIR_PREFIX}dead-empty"));
    fs::create_dir(&dead_empty).unwrap();
    fs::write(dead_empty.join(".lock"), "").unwrap();
    // One that died before making its lock file, long ago.
    let lockless_old = p.join(format!("{RUN_DIR_PREFIX}old"));
    fs::create_dir(&lockless_old).unwrap();
    fs::File::open(&lockless_old)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(7200))
        .unwrap();

    // Left alone: a run dir being created (no lock file yet), other names, a file and a
    // symlink with our prefix.
    let lockless_new = p.join(format!("{RUN_DIR_PREFIX}new"));
    fs::create_dir(&lockless_new).unwrap();
    let foreign = p.join("other-tool-work");
    fs::create_dir(&foreign).unwrap();
    fs::write(foreign.join(".lock"), "").unwrap();
    let near_miss = p.join("kustomize-controller-workdir");
    fs::create_dir(&near_miss).unwrap();
    fs::write(near_miss.join(".lock"), "").unwrap();
    let file = p.join(format!("{RUN_DIR_PREFIX}file"));
    fs::write(&file, "not a directory").unwrap();
    let target = p.join("elsewhere");
    fs::create_dir(&target).unwrap();
    fs::write(target.join(".lock"), "").unwrap();
    let link = p.join(format!("{RUN_DIR_PREFIX}link"));
    std::os::unix::fs::symlink(&target, &link).unwrap();

    let _restarted = ArtifactFetcher::new(work_opts(cache.path(), p)).unwrap();

    assert!(!dead.exists());
    assert!(!dead_empty.exists());
    assert!(!lockless_old.exists());
    assert!(live_copy.path().join("kustomization.yaml").is_file());
    assert!(live_run.join(".lock").is_file());
    assert!(lockless_new.is_dir());
    assert!(foreign.join(".lock").is_file());
    assert!(near_miss.join(".lock").is_file());
    assert!(file.is_file());
    assert!(target.join(".lock").is_file());
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// Set in the child process of [`a_killed_run_is_swept_at_the_next_start_up`].
const CHILD_ENV: &str = "RFLUX_FETCH_TEST_WORK_PARENT";

#[test]
fn a_killed_run_is_swept_at_the_next_start_up() {
    if let Some(parent) = std::env::var_os(CHILD_ENV) {
        // The child: a reconcile's working copy, then wait to be killed (SIGKILL: no drop).
        let cache = tempfile::tempdir().unwrap();
        let f = ArtifactFetcher::new(work_opts(cache.path(), Path::new(&parent))).unwrap();
        let copy = f.work_dir().unwrap();
        fs::write(copy.path().join("kustomization.yaml"), "x").unwrap();
        // On a line of its own (libtest has written the test's name without a newline).
        println!("\nWORK {}", copy.path().display());
        std::io::stdout().flush().unwrap();
        std::thread::sleep(Duration::from_secs(120));
        return;
    }
    let parent = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_killed_run_is_swept_at_the_next_start_up",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, parent.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let copy = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .map(Result::unwrap)
        .find_map(|l| {
            l.split_once("WORK ")
                .map(|(_, p)| std::path::PathBuf::from(p))
        })
        .expect("the child reports its working copy");
    let run = copy.parent().unwrap().to_path_buf();
    assert!(copy.join("kustomization.yaml").is_file());

    // While the child lives, a start-up leaves its copy alone.
    let cache = tempfile::tempdir().unwrap();
    ArtifactFetcher::new(work_opts(cache.path(), parent.path())).unwrap();
    assert!(copy.join("kustomization.yaml").is_file());

    child.kill().unwrap();
    child.wait().unwrap();
    // Killed mid-reconcile: the copy is still there, until the next start-up.
    assert!(copy.is_dir());
    ArtifactFetcher::new(work_opts(cache.path(), parent.path())).unwrap();
    assert!(!run.exists(), "{} left behind", run.display());
    assert_eq!(fs::read_dir(parent.path()).unwrap().count(), 0);
}
