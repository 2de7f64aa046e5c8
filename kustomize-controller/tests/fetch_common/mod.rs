//! Shared by `fetch.rs` and `fetch_more.rs`: local HTTP servers (source-controller's artifact
//! server, small axum handlers for failure modes), artifact and cache helpers, and hand-made
//! tarballs.
#![allow(dead_code, clippy::unwrap_used)]

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use kustomize_controller::fetch::{ArtifactFetcher, FetcherOptions};
use sha2::Digest as _;

// ---------------------------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------------------------

pub struct Server {
    pub base: String,
    pub requests: Arc<AtomicUsize>,
    pub task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn serve(app: Router) -> Server {
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
pub async fn artifact_server(root: &Path) -> Server {
    serve(source_controller::artifact::router(root).unwrap()).await
}

/// Serves `body` at every path, after answering `failures` requests with 500.
pub async fn flaky_server(body: Vec<u8>, failures: usize) -> Server {
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

pub async fn status_server(status: StatusCode) -> Server {
    serve(Router::new().fallback(move || async move { (status, "nope").into_response() })).await
}

// ---------------------------------------------------------------------------------------------
// Artifacts
// ---------------------------------------------------------------------------------------------

pub fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

/// Packages a small source tree into `<storage>/<rel>` and returns its digest.
pub fn make_artifact(storage: &Path, rel: &str, marker: &str) -> String {
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

pub fn fetcher(cache: &Path) -> ArtifactFetcher {
    ArtifactFetcher::new(fast_opts(cache)).unwrap()
}

pub fn fast_opts(cache: &Path) -> FetcherOptions {
    let mut o = FetcherOptions::new(cache);
    o.retries = 3;
    o.retry_wait_min = Duration::from_millis(10);
    o.retry_wait_max = Duration::from_millis(40);
    o.evict_grace = Duration::ZERO;
    o
}

pub fn sha256_hex(b: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(b))
}

pub fn cache_entries(cache: &Path) -> Vec<String> {
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

pub fn octal(field: &mut [u8], v: u64) {
    let digits = field.len() - 1;
    let s = format!("{v:0digits$o}");
    field[..digits].copy_from_slice(s.as_bytes());
    field[digits] = 0;
}

pub fn raw_entry(
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

pub fn file(name: &str, data: &str) -> Vec<u8> {
    raw_entry(name.as_bytes(), b'0', 0o644, data.as_bytes(), b"", 0)
}

pub fn tgz(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut tar = entries.concat();
    tar.extend_from_slice(&[0u8; 1024]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    gz.finish().unwrap()
}
