//! The GitRepository reconciler on the real control plane and the test git server, continued
//! from `source_controller.rs` (same in-process harness, from `source_controller_common`):
//! `recurseSubmodules`, a reconcile triggered by a change to a Secret the GitRepository reads,
//! and `proxySecretRef` through a test proxy with the no-fetch path when nothing changed.
//! Each test holds `<e2e state>/crds.lock` so the CRD compatibility test cannot swap CRDs
//! meanwhile.
#![allow(clippy::unwrap_used)]

mod source_controller_common;
mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use rflux_e2e::{ControlPlane, GitServer, TestRepo};
use serde_json::json;
use source_controller_common::*;
use support::{gitrepo_condition as condition, lock_crds, wait_gitrepo as wait_for};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A tiny HTTP proxy for the tests: forwards absolute-form requests (plain HTTP) and tunnels
/// `CONNECT` (HTTPS), after checking `Proxy-Authorization` against a username and password.
/// It records one line per request: `GET <path>`, `POST <path> <v2 command>`, `CONNECT
/// <host:port>`, or `407 <request line>` when the credentials are missing or wrong.
struct TestProxy {
    addr: std::net::SocketAddr,
    log: Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TestProxy {
    async fn start(username: &str, password: &str) -> TestProxy {
        use base64::Engine as _;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
        );
        let task = tokio::spawn({
            let log = log.clone();
            async move {
                while let Ok((sock, _)) = listener.accept().await {
                    let log = log.clone();
                    let expected = expected.clone();
                    tokio::spawn(async move {
                        if let Err(e) = proxy_one(sock, &expected, &log).await {
                            log.lock().unwrap().push(format!("error {e}"));
                        }
                    });
                }
            }
        });
        TestProxy { addr, log, task }
    }

    fn entries(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one proxied request (the connection is closed afterwards).
async fn proxy_one(
    mut client: tokio::net::TcpStream,
    expected_auth: &str,
    log: &std::sync::Mutex<Vec<String>>,
) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 4096];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed before the request head ended");
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut rest = buf[head_end + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_string();
    let mut parts = request_line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or_default().to_string(),
        parts.next().unwrap_or_default().to_string(),
    );
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if header("proxy-authorization") != Some(expected_auth) {
        log.lock().unwrap().push(format!("407 {request_line}"));
        client
            .write_all(
                b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await?;
        return Ok(());
    }
    if method == "CONNECT" {
        log.lock().unwrap().push(format!("CONNECT {target}"));
        let mut upstream = tokio::net::TcpStream::connect(&target).await?;
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
        upstream.write_all(&rest).await?;
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        return Ok(());
    }
    let Some(without_scheme) = target.strip_prefix("http://") else {
        bail!("not an absolute http URL: {target}");
    };
    let (hostport, path) = without_scheme
        .split_once('/')
        .map_or((without_scheme, String::from("/")), |(h, p)| {
            (h, format!("/{p}"))
        });
    let len: usize = header("content-length").unwrap_or("0").parse()?;
    while rest.len() < len {
        let mut chunk = [0u8; 4096];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed before the request body ended");
        }
        rest.extend_from_slice(&chunk[..n]);
    }
    let command = ["ls-refs", "fetch"]
        .into_iter()
        .find(|c| {
            let needle = format!("command={c}");
            rest.windows(needle.len()).any(|w| w == needle.as_bytes())
        })
        .unwrap_or("");
    log.lock()
        .unwrap()
        .push(format!("{method} {path} {command}").trim_end().to_string());
    let mut upstream = tokio::net::TcpStream::connect(hostport).await?;
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in &headers {
        if !matches!(
            k.as_str(),
            "proxy-authorization" | "proxy-connection" | "connection"
        ) {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    req.push_str("Connection: close\r\n\r\n");
    upstream.write_all(req.as_bytes()).await?;
    upstream.write_all(&rest).await?;
    tokio::io::copy(&mut upstream, &mut client).await?;
    client.shutdown().await?;
    Ok(())
}

/// Records the gitlink `commit` at `path` in the index (with an empty directory, as in a
/// clone whose submodules are not initialised), so the next commit holds a submodule.
fn add_gitlink(repo: &TestRepo, path: &str, commit: &str) {
    std::fs::create_dir_all(repo.path().join(path)).unwrap();
    repo.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{commit},{path}"),
    ])
    .unwrap();
}

fn write_file(root: &Path, rel: &str, contents: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, contents).unwrap();
}

/// `recurseSubmodules`: a submodule with a relative URL (over HTTPS, so the parent's
/// credentials must follow it) that itself holds a nested submodule, plus a submodule with an
/// absolute URL on another endpoint (anonymous HTTP). With the flag the artifact holds their
/// files; without it, only empty directories.
#[tokio::test]
async fn gitrepository_recurse_submodules() {
    let cp = ControlPlane::shared().await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let _lock = lock_crds().await;
    let h = Harness::start(cp, "srcsub").await;
    let api = &h.api;

    let nested = git.create_repo("srcsub-nested").unwrap();
    nested.write("n.yaml", "nested: true\n").unwrap();
    let nested_commit = nested.commit("nested").unwrap();
    nested.push("main").unwrap();

    let lib = git.create_repo("srcsub-lib").unwrap();
    lib.write("lib.yaml", "lib: 1\n").unwrap();
    lib.write(
        ".gitmodules",
        &format!(
            "[submodule \"deep\"]\n\tpath = deep\n\turl = ../{}.git\n",
            nested.name()
        ),
    )
    .unwrap();
    add_gitlink(&lib, "deep", &nested_commit);
    let lib_commit = lib.commit("lib with a nested submodule").unwrap();
    // A later commit on the lib's main must not matter: the gitlink pins lib_commit.
    lib.write("later.yaml", "later: 1\n").unwrap();
    lib.commit("later").unwrap();
    lib.push("main").unwrap();

    let parent = git.create_repo("srcsub-parent").unwrap();
    parent.write("app.yaml", "app: 1\n").unwrap();
    let gitmodules = format!(
        "[submodule \"lib\"]\n\tpath = vendor/lib\n\turl = ../{}.git\n[submodule \"abs\"]\n\tpath = abs\n\turl = {}\n",
        lib.name(),
        git.http_url(nested.name())
    );
    parent.write(".gitmodules", &gitmodules).unwrap();
    add_gitlink(&parent, "vendor/lib", &lib_commit);
    add_gitlink(&parent, "abs", &nested_commit);
    let parent_commit = parent.commit("parent with submodules").unwrap();
    parent.push("main").unwrap();

    let (user, pass) = git.basic_auth();
    create_secret(
        &h.client,
        &h.ns,
        "basic",
        json!({"username": user, "password": pass, "ca.crt": git.ca_pem()}),
    )
    .await;
    for (name, recurse) in [("with-submodules", true), ("without-submodules", false)] {
        create_gitrepo(
            api,
            name,
            json!({
                "url": git.https_url(parent.name()), "interval": "1h",
                "ref": {"branch": "main"}, "secretRef": {"name": "basic"},
                "recurseSubmodules": recurse,
            }),
        )
        .await;
    }
    let revision = format!("main@sha1:{parent_commit}");

    let with = wait_for(api, "with-submodules", "ready with submodules", |o| {
        ready_with(o, &revision)
    })
    .await;
    assert_eq!(
        with.status.as_ref().unwrap().observed_recurse_submodules,
        Some(true)
    );
    let expected = tempfile::tempdir().unwrap();
    write_file(expected.path(), "app.yaml", "app: 1\n");
    write_file(expected.path(), ".gitmodules", &gitmodules);
    write_file(expected.path(), "vendor/lib/lib.yaml", "lib: 1\n");
    write_file(
        expected.path(),
        "vendor/lib/.gitmodules",
        &std::fs::read_to_string(lib.path().join(".gitmodules")).unwrap(),
    );
    write_file(expected.path(), "vendor/lib/deep/n.yaml", "nested: true\n");
    write_file(expected.path(), "abs/n.yaml", "nested: true\n");
    check_served(&with, h.storage_addr, Some(expected.path())).await;

    let without = wait_for(api, "without-submodules", "ready without submodules", |o| {
        ready_with(o, &revision)
    })
    .await;
    let bare = tempfile::tempdir().unwrap();
    write_file(bare.path(), "app.yaml", "app: 1\n");
    write_file(bare.path(), ".gitmodules", &gitmodules);
    std::fs::create_dir_all(bare.path().join("vendor/lib")).unwrap();
    std::fs::create_dir_all(bare.path().join("abs")).unwrap();
    check_served(&without, h.storage_addr, Some(bare.path())).await;
    assert_ne!(artifact_of(&with).digest, artifact_of(&without).digest);

    // A gitlink without a .gitmodules entry cannot be fetched: FetchFailed names the path.
    let orphan = git.create_repo("srcsub-orphan").unwrap();
    orphan.write("a.yaml", "a: 1\n").unwrap();
    add_gitlink(&orphan, "lost", &nested_commit);
    orphan.commit("gitlink without .gitmodules").unwrap();
    orphan.push("main").unwrap();
    create_gitrepo(
        api,
        "orphan",
        json!({
            "url": git.http_url(orphan.name()), "interval": "1h",
            "ref": {"branch": "main"}, "recurseSubmodules": true,
        }),
    )
    .await;
    let failed = wait_for(api, "orphan", "FetchFailed", |o| {
        condition(o, "FetchFailed").is_some_and(|c| c.status == "True")
    })
    .await;
    let msg = &condition(&failed, "FetchFailed").unwrap().message;
    assert!(
        msg.contains("no URL for submodule path 'lost' in .gitmodules"),
        "{msg}"
    );

    h.shutdown().await;
}

/// A change to a Secret the GitRepository reads (secretRef, proxySecretRef) reconciles it at
/// once: no annotation, a 1h interval and a 2 min error backoff, so nothing else would.
#[tokio::test]
async fn gitrepository_reconciles_when_its_secret_changes() {
    let cp = ControlPlane::shared().await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let _lock = lock_crds().await;
    let h = Harness::start_with(
        cp,
        "srcsecret",
        HarnessOptions {
            min_retry: Duration::from_secs(120),
            max_retry: Duration::from_secs(120),
            ..HarnessOptions::default()
        },
    )
    .await;
    let api = &h.api;
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.ns);
    let repo = git.create_repo("srcsecret").unwrap();
    repo.write("cm.yaml", "kind: ConfigMap\n").unwrap();
    let head = repo.commit("first").unwrap();
    repo.push("main").unwrap();
    let revision = format!("main@sha1:{head}");

    let (user, pass) = git.basic_auth();
    create_secret(
        &h.client,
        &h.ns,
        "creds",
        json!({"username": user, "password": "wrong", "ca.crt": git.ca_pem()}),
    )
    .await;
    let proxy = TestProxy::start("proxy-user", "proxy-pass").await;
    create_secret(
        &h.client,
        &h.ns,
        "proxy",
        json!({"address": format!("http://{}", proxy.addr), "username": "proxy-user", "password": "nope"}),
    )
    .await;
    create_gitrepo(
        api,
        "by-secret",
        json!({
            "url": git.https_url(repo.name()), "interval": "1h",
            "ref": {"branch": "main"}, "secretRef": {"name": "creds"},
        }),
    )
    .await;
    create_gitrepo(
        api,
        "by-proxy-secret",
        json!({
            "url": git.http_url(repo.name()), "interval": "1h",
            "ref": {"branch": "main"}, "proxySecretRef": {"name": "proxy"},
        }),
    )
    .await;
    for name in ["by-secret", "by-proxy-secret"] {
        let failed = wait_for(api, name, "FetchFailed", |o| {
            condition(o, "FetchFailed").is_some_and(|c| c.status == "True")
        })
        .await;
        assert!(failed.status.as_ref().unwrap().artifact.is_none());
    }
    assert!(
        proxy.entries().iter().any(|e| e.starts_with("407 ")),
        "the proxy saw no request with the wrong password: {:?}",
        proxy.entries()
    );

    let t0 = Instant::now();
    secrets
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(&json!({"stringData": {"password": pass}})),
        )
        .await
        .unwrap();
    let fixed = wait_for(api, "by-secret", "ready after the secret was fixed", |o| {
        ready_with(o, &revision)
    })
    .await;
    let took = t0.elapsed();
    println!("secretRef fixed -> Ready in {took:?}");
    assert!(
        took < Duration::from_secs(60),
        "took {took:?}: not triggered by the Secret change"
    );
    assert!(
        fixed
            .status
            .as_ref()
            .unwrap()
            .last_handled_reconcile_at
            .is_none()
    );
    check_served(&fixed, h.storage_addr, None).await;

    let t0 = Instant::now();
    secrets
        .patch(
            "proxy",
            &PatchParams::default(),
            &Patch::Merge(&json!({"stringData": {"password": "proxy-pass"}})),
        )
        .await
        .unwrap();
    let via_proxy = wait_for(
        api,
        "by-proxy-secret",
        "ready after the proxy secret was fixed",
        |o| ready_with(o, &revision),
    )
    .await;
    let took = t0.elapsed();
    println!("proxySecretRef fixed -> Ready in {took:?}");
    assert!(
        took < Duration::from_secs(60),
        "took {took:?}: not triggered by the Secret change"
    );
    assert_eq!(artifact_of(&via_proxy).digest, artifact_of(&fixed).digest);
    let path = format!("/{}.git/info/refs", repo.name());
    assert!(
        proxy
            .entries()
            .iter()
            .any(|e| e.starts_with("GET ") && e.contains(&path)),
        "the fetch did not go through the proxy: {:?}",
        proxy.entries()
    );

    h.shutdown().await;
}

/// `proxySecretRef` over plain HTTP (forwarded) and HTTPS (CONNECT), and the no-op path: a
/// reconcile whose remote ref still points at the stored revision lists refs and fetches
/// nothing (the proxy sees the requests, with the protocol v2 command of each POST).
#[tokio::test]
async fn gitrepository_proxy_and_no_fetch_when_unchanged() {
    let cp = ControlPlane::shared().await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let _lock = lock_crds().await;
    let h = Harness::start(cp, "srcproxy").await;
    let api = &h.api;
    let repo = git.create_repo("srcproxy").unwrap();
    repo.write("cm.yaml", "kind: ConfigMap\n").unwrap();
    let head = repo.commit("first").unwrap();
    repo.push("main").unwrap();
    let tree = export_tree(&repo);
    let revision = format!("main@sha1:{head}");

    let proxy = TestProxy::start("u", "p@ss:word").await;
    create_secret(
        &h.client,
        &h.ns,
        "proxy",
        json!({"address": format!("http://{}", proxy.addr), "username": "u", "password": "p@ss:word"}),
    )
    .await;
    let (user, pass) = git.basic_auth();
    create_secret(
        &h.client,
        &h.ns,
        "basic",
        json!({"username": user, "password": pass, "ca.crt": git.ca_pem()}),
    )
    .await;
    create_gitrepo(
        api,
        "plain",
        json!({
            "url": git.http_url(repo.name()), "interval": "1h",
            "ref": {"branch": "main"}, "proxySecretRef": {"name": "proxy"},
        }),
    )
    .await;
    create_gitrepo(
        api,
        "tls",
        json!({
            "url": git.https_url(repo.name()), "interval": "1h",
            "ref": {"branch": "main"}, "secretRef": {"name": "basic"},
            "proxySecretRef": {"name": "proxy"},
        }),
    )
    .await;
    let plain = wait_for(api, "plain", "ready through the proxy", |o| {
        ready_with(o, &revision)
    })
    .await;
    check_served(&plain, h.storage_addr, Some(tree.path())).await;
    let tls = wait_for(api, "tls", "ready through a CONNECT tunnel", |o| {
        ready_with(o, &revision)
    })
    .await;
    check_served(&tls, h.storage_addr, Some(tree.path())).await;

    let repo_path = format!("/{}.git/", repo.name());
    let plain_requests = |entries: &[String]| -> Vec<String> {
        entries
            .iter()
            .filter(|e| e.contains(&repo_path))
            .cloned()
            .collect()
    };
    let info_refs = format!("GET /{}.git/info/refs?service=git-upload-pack", repo.name());
    let ls_refs = format!("POST /{}.git/git-upload-pack ls-refs", repo.name());
    let fetch = format!("POST /{}.git/git-upload-pack fetch", repo.name());
    let entries = proxy.entries();
    println!("proxy log after the first reconciles: {entries:#?}");
    assert_eq!(
        plain_requests(&entries),
        vec![info_refs.clone(), ls_refs.clone(), fetch.clone()],
        "first reconcile: advertisement, ls-refs, fetch"
    );
    let https_port = git.state().https_port;
    assert!(
        entries
            .iter()
            .any(|e| *e == format!("CONNECT 127.0.0.1:{https_port}")),
        "no CONNECT to the HTTPS listener: {entries:?}"
    );
    assert!(
        !entries
            .iter()
            .any(|e| e.starts_with("407 ") || e.starts_with("error "))
    );

    // Two more reconciles with nothing changed: refs are listed, nothing is fetched.
    let before = entries.len();
    for token in ["again-1", "again-2"] {
        request_reconcile(api, "plain", token).await;
        let same = wait_for(api, "plain", "no-op reconcile handled", |o| {
            o.status
                .as_ref()
                .unwrap()
                .last_handled_reconcile_at
                .as_deref()
                == Some(token)
                && condition(o, "Ready").is_some_and(|c| c.status == "True")
        })
        .await;
        assert_eq!(artifact_of(&same).digest, artifact_of(&plain).digest);
        assert_eq!(
            artifact_of(&same).last_update_time,
            artifact_of(&plain).last_update_time
        );
    }
    let after = proxy.entries();
    println!(
        "proxy log of the two no-op reconciles: {:#?}",
        &after[before..]
    );
    assert_eq!(
        plain_requests(&after[before..]),
        vec![info_refs.clone(), ls_refs.clone(), info_refs, ls_refs],
        "an unchanged remote must not be fetched"
    );
    // A new commit is fetched again.
    repo.write("new.yaml", "new: 1\n").unwrap();
    let second = repo.commit("second").unwrap();
    repo.push("main").unwrap();
    let before = proxy.entries().len();
    request_reconcile(api, "plain", "after-push").await;
    wait_for(api, "plain", "new revision", |o| {
        ready_with(o, &format!("main@sha1:{second}"))
    })
    .await;
    assert!(
        plain_requests(&proxy.entries()[before..]).contains(&fetch),
        "a new revision must be fetched"
    );

    h.shutdown().await;
}
