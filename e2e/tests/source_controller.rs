//! The GitRepository reconciler on the real control plane and the test git server.
//!
//! The reconciler runs in-process (the same `run_controller` + `reconcile` as the binary) with
//! an artifact storage in a temp dir and the artifact server on a loopback port. One test
//! function covers: HTTPS basic auth (branch), bearer token (annotated tag), SSH with
//! known_hosts (semver range), anonymous HTTP (an older commit), a served archive whose digest
//! matches status and equals packaging the work tree, a wrong password giving FetchFailed while
//! the old artifact stays, a push producing a new artifact, and deletion removing the storage.
//! It holds `<e2e state>/crds.lock` so the CRD compatibility test cannot swap CRDs meanwhile.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::runtime::controller::ControllerSettings;
use rflux_common::runtime::metrics::Metrics;
use rflux_common::runtime::{CancellationToken, EventRecorder};
use rflux_e2e::{ControlPlane, GitServer, TestRepo};
use serde_json::{Value, json};
use source_controller::artifact::{
    Digest, DigestAlgorithm, Storage, StorageOptions, package_to_file, serve_listener,
};
use source_controller::gitrepository::{Context, run_gitrepository_controller};
use support::{
    gitrepo_artifact, gitrepo_condition as condition, lock_crds, wait_gitrepo as wait_for,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SECOND_SUBJECT: &str = "second commit with a rather long subject line that gets cut";
const CRD_NAME: &str = "gitrepositories.source.toolkit.fluxcd.io";

/// Installs our GitRepository CRD when absent and waits until it is established.
async fn ensure_crd(client: &Client) -> anyhow::Result<()> {
    support::ensure_crd(client, CRD_NAME, "gitrepositories.yaml").await
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<(u16, Vec<u8>)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET /{path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("no header end"))?;
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow!("bad status line"))?
        .parse()?;
    Ok((code, buf[split + 4..].to_vec()))
}

fn ready_with(obj: &GitRepository, revision: &str) -> bool {
    condition(obj, "Ready").is_some_and(|c| c.status == "True")
        && obj
            .status
            .as_ref()
            .and_then(|s| s.artifact.as_ref())
            .is_some_and(|a| a.revision == revision)
}

async fn create_secret(client: &Client, ns: &str, name: &str, data: Value) {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name},
        "stringData": data,
    }))
    .unwrap();
    api.create(&PostParams::default(), &secret).await.unwrap();
}

async fn create_gitrepo(api: &Api<GitRepository>, name: &str, spec: Value) {
    let obj: GitRepository = serde_json::from_value(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

async fn request_reconcile(api: &Api<GitRepository>, name: &str, token: &str) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(
            &json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}}),
        ),
    )
    .await
    .unwrap();
}

/// Fetches the artifact over HTTP, checks its digest and size against status, and (when
/// `tree` is given) that it equals packaging that directory.
async fn check_served(
    obj: &GitRepository,
    storage_addr: std::net::SocketAddr,
    tree: Option<&Path>,
) {
    let art = gitrepo_artifact(obj);
    let prefix = format!("http://{storage_addr}/");
    let path = art
        .url
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("artifact URL {} does not start with {prefix}", art.url));
    assert_eq!(path, art.path);
    assert!(art.path.ends_with(".tar.gz"));
    let (code, body) = http_get(storage_addr, path).await.unwrap();
    assert_eq!(code, 200, "GET {}", art.url);
    let digest = Digest::of_reader(DigestAlgorithm::Sha256, &mut body.as_slice()).unwrap();
    assert_eq!(digest.to_string(), art.digest);
    assert_eq!(Some(body.len() as i64), art.size);
    if let Some(dir) = tree {
        let out = tempfile::tempdir().unwrap();
        let expected = package_to_file(dir, &out.path().join("x.tar.gz"), None).unwrap();
        assert_eq!(
            expected, art.digest,
            "artifact differs from the packaged work tree"
        );
    }
}

/// Copies the tracked files of the work tree (without .git) to a fresh dir.
fn export_tree(repo: &TestRepo) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let files = repo.git(&["ls-files"]).unwrap();
    for f in files.lines().filter(|l| !l.is_empty()) {
        let dst = dir.path().join(f);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(repo.path().join(f), &dst).unwrap();
    }
    dir
}

#[tokio::test]
async fn gitrepository_reconciler_end_to_end() {
    let cp = ControlPlane::shared().await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let _lock = lock_crds().await;
    // Garbage collection is checked below: a 1 s retention TTL.
    let h = Harness::start_with(
        cp,
        "srcctl",
        HarnessOptions {
            retention_ttl: Duration::from_secs(1),
            ..HarnessOptions::default()
        },
    )
    .await;
    let client = h.client.clone();
    let ns = h.ns.clone();
    let api = h.api.clone();
    let storage_addr = h.storage_addr;
    let storage_root = h.storage_root();

    // A repository with two commits on main and tags.
    let repo = git.create_repo("srcctl").unwrap();
    repo.write("deploy/cm.yaml", "apiVersion: v1\nkind: ConfigMap\n")
        .unwrap();
    let first = repo.commit("first commit").unwrap();
    repo.tag("v1.0.0", true).unwrap();
    repo.write("deploy/app.yaml", "app: 1\n").unwrap();
    repo.write("deploy/notes.md", "excluded by spec.ignore below\n")
        .unwrap();
    repo.write("run.sh", "#!/bin/sh\necho hi\n").unwrap();
    std::process::Command::new("chmod")
        .args(["+x", repo.path().join("run.sh").to_str().unwrap()])
        .status()
        .unwrap();
    let second = repo
        .commit("second commit with a rather long subject line that gets cut")
        .unwrap();
    repo.tag("v1.1.0", false).unwrap();
    repo.push("main").unwrap();
    repo.push_tags().unwrap();
    let tree_second = export_tree(&repo);
    let v1_0_0_commit = repo.remote_rev("refs/tags/v1.0.0^{commit}").unwrap();
    assert_eq!(v1_0_0_commit, first);
    // v2.0.0 is outside the semver range used below.
    repo.write("deploy/v2.yaml", "v: 2\n").unwrap();
    repo.commit("v2").unwrap();
    repo.tag("v2.0.0", true).unwrap();
    repo.push_tags().unwrap();
    repo.reset_hard(&second).unwrap();

    // Secrets.
    let (user, pass) = git.basic_auth();
    create_secret(
        &client,
        &ns,
        "basic",
        json!({"username": user, "password": pass, "ca.crt": git.ca_pem()}),
    )
    .await;
    create_secret(
        &client,
        &ns,
        "bearer",
        json!({"bearerToken": git.bearer_token(), "ca.crt": git.ca_pem()}),
    )
    .await;
    create_secret(
        &client,
        &ns,
        "ssh",
        json!({"identity": git.ssh_private_key_pem(), "known_hosts": git.known_hosts_line()}),
    )
    .await;

    create_gitrepo(
        &api,
        "https-basic",
        json!({
            "url": git.https_url(repo.name()), "interval": "1h",
            "ref": {"branch": "main"}, "secretRef": {"name": "basic"},
        }),
    )
    .await;
    create_gitrepo(
        &api,
        "bearer-tag",
        json!({
            "url": git.https_url(repo.name()), "interval": "1h",
            "ref": {"tag": "v1.0.0"}, "secretRef": {"name": "bearer"},
        }),
    )
    .await;
    create_gitrepo(
        &api,
        "ssh-semver",
        json!({
            "url": git.ssh_url(repo.name()), "interval": "1h",
            "ref": {"semver": ">=1.0.0 <2.0.0"}, "secretRef": {"name": "ssh"},
        }),
    )
    .await;
    create_gitrepo(
        &api,
        "http-commit",
        json!({
            "url": git.http_url(repo.name()), "interval": "1h",
            "ref": {"commit": first},
        }),
    )
    .await;
    create_gitrepo(
        &api,
        "bad-url",
        json!({
            "url": "https://", "interval": "1h",
        }),
    )
    .await;

    let basic = wait_for(&api, "https-basic", "ready on main", |o| {
        ready_with(o, &format!("main@sha1:{second}"))
    })
    .await;
    let st = basic.status.as_ref().unwrap();
    assert_eq!(st.observed_generation, basic.metadata.generation);
    assert!(
        basic
            .metadata
            .finalizers
            .as_ref()
            .unwrap()
            .contains(&"finalizers.fluxcd.io".to_string())
    );
    let ready = condition(&basic, "Ready").unwrap();
    assert_eq!(ready.reason, "Succeeded");
    assert_eq!(
        ready.message,
        format!("stored artifact for revision 'main@sha1:{second}'")
    );
    assert!(condition(&basic, "ArtifactInStorage").is_some_and(|c| c.status == "True"));
    assert!(condition(&basic, "Reconciling").is_none());
    assert_eq!(
        st.artifact.as_ref().unwrap().path,
        format!("gitrepository/{ns}/https-basic/{second}.tar.gz")
    );
    check_served(&basic, storage_addr, Some(tree_second.path())).await;

    let tag = wait_for(&api, "bearer-tag", "ready on v1.0.0", |o| {
        ready_with(o, &format!("v1.0.0@sha1:{first}"))
    })
    .await;
    check_served(&tag, storage_addr, None).await;

    let semver = wait_for(&api, "ssh-semver", "ready on v1.1.0", |o| {
        ready_with(o, &format!("v1.1.0@sha1:{second}"))
    })
    .await;
    check_served(&semver, storage_addr, Some(tree_second.path())).await;
    // Same tree as the branch artifact: same bytes.
    assert_eq!(
        gitrepo_artifact(&semver).digest,
        st.artifact.as_ref().unwrap().digest
    );

    let commit = wait_for(&api, "http-commit", "ready on the first commit", |o| {
        ready_with(o, &format!("sha1:{first}"))
    })
    .await;
    check_served(&commit, storage_addr, None).await;
    assert_eq!(
        gitrepo_artifact(&commit).digest,
        gitrepo_artifact(&tag).digest
    );

    let bad = wait_for(&api, "bad-url", "stalled", |o| {
        condition(o, "Stalled").is_some_and(|c| c.status == "True")
    })
    .await;
    assert_eq!(condition(&bad, "Ready").unwrap().reason, "URLInvalid");
    assert_eq!(condition(&bad, "Ready").unwrap().status, "False");

    // Include + sparseCheckout + ignore: deploy/ of main (without *.md), plus the commit
    // artifact copied under lib/.
    create_gitrepo(
        &api,
        "with-include",
        json!({
            "url": git.http_url(repo.name()), "interval": "1h",
            "ref": {"branch": "main"},
            "sparseCheckout": ["deploy"],
            "ignore": "*.md\n",
            "include": [{"repository": {"name": "http-commit"}, "toPath": "lib"}],
        }),
    )
    .await;
    let inc = wait_for(&api, "with-include", "ready with include", |o| {
        ready_with(o, &format!("main@sha1:{second}"))
    })
    .await;
    let inc_status = inc.status.as_ref().unwrap();
    assert_eq!(
        inc_status.included_artifacts.as_ref().unwrap()[0].revision,
        format!("sha1:{first}")
    );
    assert_eq!(
        inc_status.observed_sparse_checkout,
        Some(vec!["deploy".to_string()])
    );
    assert_eq!(inc_status.observed_ignore.as_deref(), Some("*.md\n"));
    let expected = tempfile::tempdir().unwrap();
    for f in ["deploy/cm.yaml", "deploy/app.yaml"] {
        let dst = expected.path().join(f);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(tree_second.path().join(f), dst).unwrap();
    }
    std::fs::create_dir_all(expected.path().join("lib/deploy")).unwrap();
    std::fs::copy(
        tree_second.path().join("deploy/cm.yaml"),
        expected.path().join("lib/deploy/cm.yaml"),
    )
    .unwrap();
    check_served(&inc, storage_addr, Some(expected.path())).await;

    // An include that does not exist yet: IncludeUnavailable, then Ready once it has an
    // artifact (requeued after --requeue-dependency, no watch on includes).
    create_gitrepo(
        &api,
        "include-later",
        json!({
            "url": git.http_url(repo.name()), "interval": "1h",
            "ref": {"tag": "v1.0.0"},
            "include": [{"repository": {"name": "later"}, "fromPath": "deploy", "toPath": "x/y"}],
        }),
    )
    .await;
    let waiting = wait_for(&api, "include-later", "IncludeUnavailable", |o| {
        condition(o, "IncludeUnavailable").is_some_and(|c| c.status == "True")
    })
    .await;
    let iu = condition(&waiting, "IncludeUnavailable").unwrap();
    assert_eq!(iu.reason, "NotFound");
    assert!(
        iu.message
            .starts_with("could not get resource for include 'later'"),
        "{}",
        iu.message
    );
    create_gitrepo(
        &api,
        "later",
        json!({"url": git.http_url(repo.name()), "interval": "1h", "ref": {"commit": first}}),
    )
    .await;
    let included = wait_for(&api, "include-later", "ready after include appeared", |o| {
        ready_with(o, &format!("v1.0.0@sha1:{first}"))
    })
    .await;
    assert!(condition(&included, "IncludeUnavailable").is_none());
    let expected = tempfile::tempdir().unwrap();
    for f in ["deploy/cm.yaml", "x/y/cm.yaml"] {
        let dst = expected.path().join(f);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(tree_second.path().join("deploy/cm.yaml"), dst).unwrap();
    }
    check_served(&included, storage_addr, Some(expected.path())).await;

    // A sparse directory that does not exist fails the fetch.
    create_gitrepo(
        &api,
        "bad-sparse",
        json!({
            "url": git.http_url(repo.name()), "interval": "1h",
            "ref": {"branch": "main"}, "sparseCheckout": ["nope"],
        }),
    )
    .await;
    let bad_sparse = wait_for(&api, "bad-sparse", "FetchFailed", |o| {
        condition(o, "FetchFailed").is_some_and(|c| c.status == "True")
    })
    .await;
    let msg = &condition(&bad_sparse, "FetchFailed").unwrap().message;
    assert!(
        msg.contains("sparse checkout dir 'nope' does not exist"),
        "{msg}"
    );

    // Verification fails closed (here: its key Secret does not exist), a non-generic provider
    // stalls.
    create_gitrepo(
        &api,
        "with-verify",
        json!({
            "url": git.http_url(repo.name()), "interval": "1h",
            "ref": {"branch": "main"},
            "verify": {"mode": "HEAD", "secretRef": {"name": "keys"}},
        }),
    )
    .await;
    create_gitrepo(
        &api,
        "github-provider",
        json!({
            "url": git.http_url(repo.name()), "interval": "1h", "provider": "github",
        }),
    )
    .await;
    let verify = wait_for(&api, "with-verify", "SourceVerified=False", |o| {
        condition(o, "SourceVerified").is_some_and(|c| c.status == "False")
    })
    .await;
    let ready = condition(&verify, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "VerificationError")
    );
    assert!(verify.status.as_ref().unwrap().artifact.is_none());
    let gh = wait_for(&api, "github-provider", "stalled", |o| {
        condition(o, "Stalled").is_some_and(|c| c.status == "True")
    })
    .await;
    assert_eq!(
        condition(&gh, "Ready").unwrap().reason,
        "InvalidProviderConfiguration"
    );

    // Events: NewArtifact with Flux's message.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), &ns);
    let subject: String = SECOND_SUBJECT.chars().take(50).collect();
    assert!(SECOND_SUBJECT.chars().count() > 50);
    let expected_msg = format!("stored artifact for commit '{subject}...'");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = events.list(&Default::default()).await.unwrap();
        let found = list.items.iter().any(|e| {
            e.reason.as_deref() == Some("NewArtifact")
                && e.involved_object.name.as_deref() == Some("https-basic")
                && e.message.as_deref() == Some(expected_msg.as_str())
        });
        if found {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no NewArtifact event: {:?}",
            list.items
                .iter()
                .map(|e| (&e.reason, &e.message))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Wrong password: FetchFailed, the old artifact stays.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .patch(
            "basic",
            &PatchParams::default(),
            &Patch::Merge(&json!({"stringData": {"password": "wrong"}})),
        )
        .await
        .unwrap();
    request_reconcile(&api, "https-basic", "bad-password").await;
    let failed = wait_for(&api, "https-basic", "FetchFailed", |o| {
        condition(o, "FetchFailed").is_some_and(|c| c.status == "True")
            && o.status
                .as_ref()
                .unwrap()
                .last_handled_reconcile_at
                .as_deref()
                == Some("bad-password")
    })
    .await;
    let ff = condition(&failed, "FetchFailed").unwrap();
    assert_eq!(ff.reason, "GitOperationFailed");
    assert!(
        ff.message
            .starts_with("failed to checkout and determine revision: "),
        "{}",
        ff.message
    );
    assert!(
        !ff.message.contains("wrong"),
        "message leaks the password: {}",
        ff.message
    );
    let ready = condition(&failed, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "GitOperationFailed")
    );
    assert_eq!(
        failed.status.as_ref().unwrap().artifact,
        basic
            .status
            .as_ref()
            .unwrap()
            .artifact
            .clone()
            .map(|mut a| {
                a.url = gitrepo_artifact(&failed).url.clone();
                a
            })
    );
    check_served(&failed, storage_addr, Some(tree_second.path())).await;

    // Fix the password and push a new commit: a new artifact.
    secrets
        .patch(
            "basic",
            &PatchParams::default(),
            &Patch::Merge(&json!({"stringData": {"password": pass}})),
        )
        .await
        .unwrap();
    repo.write("deploy/new.yaml", "new: true\n").unwrap();
    let third = repo.commit("third").unwrap();
    repo.push("main").unwrap();
    let tree_third = export_tree(&repo);
    request_reconcile(&api, "https-basic", "after-push").await;
    let updated = wait_for(&api, "https-basic", "new artifact", |o| {
        ready_with(o, &format!("main@sha1:{third}"))
    })
    .await;
    assert!(condition(&updated, "FetchFailed").is_none());
    check_served(&updated, storage_addr, Some(tree_third.path())).await;
    assert_ne!(
        gitrepo_artifact(&updated).digest,
        gitrepo_artifact(&basic).digest
    );

    // No change: a reconcile keeps the artifact (same digest, new requestedAt handled).
    request_reconcile(&api, "https-basic", "no-change").await;
    let same = wait_for(&api, "https-basic", "no-change handled", |o| {
        o.status
            .as_ref()
            .unwrap()
            .last_handled_reconcile_at
            .as_deref()
            == Some("no-change")
            && condition(o, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    assert_eq!(
        gitrepo_artifact(&same).digest,
        gitrepo_artifact(&updated).digest
    );

    // A corrupted artifact fails verification and is rebuilt with the same content; garbage
    // collection (TTL 1s here) leaves only the current artifact.
    let current = same.status.as_ref().unwrap().artifact.clone().unwrap();
    let local = storage_root.join(&current.path);
    std::fs::write(&local, b"corrupted").unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    request_reconcile(&api, "https-basic", "corrupted").await;
    let rebuilt = wait_for(&api, "https-basic", "rebuilt after corruption", |o| {
        o.status
            .as_ref()
            .unwrap()
            .last_handled_reconcile_at
            .as_deref()
            == Some("corrupted")
            && condition(o, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    assert_eq!(gitrepo_artifact(&rebuilt).digest, current.digest);
    check_served(&rebuilt, storage_addr, Some(tree_third.path())).await;
    let list = events.list(&Default::default()).await.unwrap();
    assert!(
        list.items.iter().any(|e| {
            e.reason.as_deref() == Some("ArtifactVerificationFailed")
                && e.involved_object.name.as_deref() == Some("https-basic")
                && e.type_.as_deref() == Some("Warning")
        }),
        "no ArtifactVerificationFailed event"
    );
    let files: Vec<String> = std::fs::read_dir(local.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, vec![format!("{third}.tar.gz")], "garbage collection");

    // Deletion removes the storage directory and the finalizer.
    let obj_dir = storage_root.join(format!("gitrepository/{ns}/https-basic"));
    assert!(obj_dir.is_dir());
    api.delete("https-basic", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.get_opt("https-basic").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "https-basic not deleted");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        !obj_dir.exists(),
        "storage of the deleted object is still there"
    );

    h.shutdown().await;
}

/// Takes `<e2e state>/crds.lock`, so the CRD compatibility test cannot swap CRDs meanwhile.
/// Knobs of a [`Harness`].
struct HarnessOptions {
    /// `--artifact-retention-ttl`.
    retention_ttl: Duration,
    /// `--min-retry-delay` / `--max-retry-delay`: the error backoff.
    min_retry: Duration,
    max_retry: Duration,
}

impl Default for HarnessOptions {
    fn default() -> Self {
        let defaults = StorageOptions::new("/", "");
        HarnessOptions {
            retention_ttl: defaults.retention_ttl,
            min_retry: Duration::from_millis(500),
            max_retry: Duration::from_secs(3),
        }
    }
}

/// The reconciler (as the binary runs it: GitRepository watch plus the Secret watch), its
/// artifact storage and server, for one test namespace.
struct Harness {
    client: Client,
    ns: String,
    api: Api<GitRepository>,
    storage_addr: std::net::SocketAddr,
    stop: CancellationToken,
    runner: tokio::task::JoinHandle<()>,
    server: tokio::task::JoinHandle<Result<(), source_controller::artifact::ArtifactError>>,
    storage_dir: tempfile::TempDir,
}

impl Harness {
    async fn start(cp: &ControlPlane, ns_prefix: &str) -> Harness {
        Self::start_with(cp, ns_prefix, HarnessOptions::default()).await
    }

    async fn start_with(cp: &ControlPlane, ns_prefix: &str, opts: HarnessOptions) -> Harness {
        let client = cp.client().await.unwrap();
        ensure_crd(&client).await.unwrap();
        let ns = cp.create_namespace(ns_prefix).await.unwrap();
        let storage_dir = tempfile::tempdir().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let storage_addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve_listener(
            storage_dir.path().to_path_buf(),
            listener,
            {
                let stop = stop.clone();
                async move { stop.cancelled().await }
            },
        ));
        let mut storage_opts = StorageOptions::new(storage_dir.path(), storage_addr.to_string());
        storage_opts.retention_ttl = opts.retention_ttl;
        let storage = Storage::new(storage_opts).unwrap();
        let ctx = Arc::new(Context {
            client: client.clone(),
            storage,
            recorder: EventRecorder::new(client.clone(), "source-controller", "e2e"),
            jitter_percentage: 5,
            requeue_dependency: Duration::from_secs(2),
        });
        let api: Api<GitRepository> = Api::namespaced(client.clone(), &ns);
        let secrets: Api<PartialObjectMeta<Secret>> = Api::namespaced(client.clone(), &ns);
        let metrics = Metrics::new().unwrap();
        let runner = tokio::spawn(run_gitrepository_controller(
            api.clone(),
            secrets,
            ControllerSettings {
                name: "gitrepository".into(),
                group: "source.toolkit.fluxcd.io".into(),
                kind: "GitRepository".into(),
                concurrency: 4,
                label_selector: String::new(),
            },
            metrics.register_controller("gitrepository", 4),
            opts.min_retry,
            opts.max_retry,
            ctx,
            stop.clone(),
        ));
        Harness {
            client,
            ns,
            api,
            storage_addr,
            stop,
            runner,
            server,
            storage_dir,
        }
    }

    fn storage_root(&self) -> PathBuf {
        self.storage_dir.path().to_path_buf()
    }

    async fn shutdown(self) {
        self.stop.cancel();
        self.runner.await.unwrap();
        self.server.await.unwrap().unwrap();
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
    }
}

fn artifact_of(obj: &GitRepository) -> rflux_common::api::meta::Artifact {
    obj.status.as_ref().unwrap().artifact.clone().unwrap()
}

/// mTLS, `ref.name` (branch and tag refs), a force-pushed branch and a deleted branch.
#[tokio::test]
async fn gitrepository_mtls_ref_name_force_push_deleted_branch() {
    let cp = ControlPlane::shared().await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let _lock = lock_crds().await;
    let h = Harness::start(cp, "srcgaps").await;
    let api = &h.api;

    // main: first, second; branch "feature": second + feature commit; annotated tag v1 on first.
    let repo = git.create_repo("srcgaps").unwrap();
    repo.write("deploy/cm.yaml", "kind: ConfigMap\n").unwrap();
    let first = repo.commit("first").unwrap();
    repo.tag("v1", true).unwrap();
    repo.write("deploy/app.yaml", "app: 2\n").unwrap();
    let second = repo.commit("second").unwrap();
    repo.push("main").unwrap();
    repo.push_tags().unwrap();
    let tree_second = export_tree(&repo);
    repo.checkout("feature").unwrap();
    repo.write("feature.yaml", "feature: 1\n").unwrap();
    let feature1 = repo.commit("feature one").unwrap();
    repo.push("feature").unwrap();
    let tree_feature1 = export_tree(&repo);
    let tag_object = repo.remote_rev("refs/tags/v1").unwrap();
    assert_ne!(tag_object, first, "v1 must be an annotated tag");

    // mTLS: the client certificate, key and CA from the secret.
    let (cert, key) = git.client_cert_pem();
    assert!(cert.contains("BEGIN CERTIFICATE") && key.contains("PRIVATE KEY"));
    create_secret(
        &h.client,
        &h.ns,
        "mtls",
        json!({"tls.crt": cert, "tls.key": key, "ca.crt": git.ca_pem()}),
    )
    .await;
    // Only the CA: the mTLS listener refuses the connection.
    create_secret(&h.client, &h.ns, "ca-only", json!({"ca.crt": git.ca_pem()})).await;
    create_gitrepo(
        api,
        "mtls",
        json!({
            "url": git.mtls_url(repo.name()), "interval": "1h",
            "ref": {"branch": "main"}, "secretRef": {"name": "mtls"},
        }),
    )
    .await;
    create_gitrepo(
        api,
        "mtls-no-cert",
        json!({
            "url": git.mtls_url(repo.name()), "interval": "1h",
            "ref": {"branch": "main"}, "secretRef": {"name": "ca-only"},
        }),
    )
    .await;
    // ref.name: a branch ref and an annotated tag ref; the revision carries the full ref
    // name, and the tag ref resolves to the tagged commit (not the tag object).
    create_gitrepo(
        api,
        "name-branch",
        json!({
            "url": git.http_url(repo.name()), "interval": "1h",
            "ref": {"name": "refs/heads/feature"},
        }),
    )
    .await;
    create_gitrepo(
        api,
        "name-tag",
        json!({
            "url": git.http_url(repo.name()), "interval": "1h",
            // name takes precedence over branch and tag.
            "ref": {"name": "refs/tags/v1", "branch": "main", "tag": "nope"},
        }),
    )
    .await;
    // A branch that is force-pushed below, and one that is deleted below.
    create_gitrepo(
        api,
        "forced",
        json!({
            "url": git.http_url(repo.name()), "interval": "1h",
            "ref": {"branch": "feature"},
        }),
    )
    .await;

    let mtls = wait_for(api, "mtls", "ready over mTLS", |o| {
        ready_with(o, &format!("main@sha1:{second}"))
    })
    .await;
    check_served(&mtls, h.storage_addr, Some(tree_second.path())).await;
    let no_cert = wait_for(
        api,
        "mtls-no-cert",
        "FetchFailed without a client cert",
        |o| condition(o, "FetchFailed").is_some_and(|c| c.status == "True"),
    )
    .await;
    assert_eq!(
        condition(&no_cert, "FetchFailed").unwrap().reason,
        "GitOperationFailed"
    );
    assert!(no_cert.status.as_ref().unwrap().artifact.is_none());

    let name_branch = wait_for(api, "name-branch", "ready on refs/heads/feature", |o| {
        ready_with(o, &format!("refs/heads/feature@sha1:{feature1}"))
    })
    .await;
    check_served(&name_branch, h.storage_addr, Some(tree_feature1.path())).await;
    let name_tag = wait_for(api, "name-tag", "ready on refs/tags/v1", |o| {
        ready_with(o, &format!("refs/tags/v1@sha1:{first}"))
    })
    .await;
    check_served(&name_tag, h.storage_addr, None).await;
    assert_eq!(
        artifact_of(&name_tag).path,
        format!("gitrepository/{}/name-tag/{first}.tar.gz", h.ns)
    );

    let forced = wait_for(api, "forced", "ready on feature", |o| {
        ready_with(o, &format!("feature@sha1:{feature1}"))
    })
    .await;
    let old = artifact_of(&forced);

    // Force-push: rewrite feature to a different history (drop the feature commit, add
    // another on top of first).
    repo.reset_hard(&first).unwrap();
    repo.write("rewritten.yaml", "rewritten: true\n").unwrap();
    let rewritten = repo.commit("rewritten history").unwrap();
    repo.force_push("feature").unwrap();
    assert_eq!(repo.remote_rev("refs/heads/feature").unwrap(), rewritten);
    let tree_rewritten = export_tree(&repo);
    request_reconcile(api, "forced", "after-force-push").await;
    let rewritten_obj = wait_for(api, "forced", "new artifact after force-push", |o| {
        ready_with(o, &format!("feature@sha1:{rewritten}"))
    })
    .await;
    let new = artifact_of(&rewritten_obj);
    assert_ne!(new.digest, old.digest);
    assert_eq!(
        new.path,
        format!("gitrepository/{}/forced/{rewritten}.tar.gz", h.ns)
    );
    check_served(&rewritten_obj, h.storage_addr, Some(tree_rewritten.path())).await;

    // Deleted branch: FetchFailed naming the missing ref; the artifact stays served.
    repo.delete_remote_branch("feature").unwrap();
    assert!(repo.remote_rev("refs/heads/feature").is_err());
    request_reconcile(api, "forced", "after-delete").await;
    let gone = wait_for(api, "forced", "FetchFailed after branch deletion", |o| {
        condition(o, "FetchFailed").is_some_and(|c| c.status == "True")
            && o.status
                .as_ref()
                .unwrap()
                .last_handled_reconcile_at
                .as_deref()
                == Some("after-delete")
    })
    .await;
    let ff = condition(&gone, "FetchFailed").unwrap();
    assert_eq!(ff.reason, "GitOperationFailed");
    assert!(
        ff.message.contains("refs/heads/feature"),
        "message does not name the missing ref: {}",
        ff.message
    );
    let ready = condition(&gone, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "GitOperationFailed")
    );
    let kept = artifact_of(&gone);
    assert_eq!(
        (&kept.revision, &kept.digest, &kept.path, kept.size),
        (&new.revision, &new.digest, &new.path, new.size)
    );
    check_served(&gone, h.storage_addr, Some(tree_rewritten.path())).await;
    // ref.name on the deleted branch fails the same way and keeps its artifact too.
    request_reconcile(api, "name-branch", "after-delete").await;
    let name_gone = wait_for(api, "name-branch", "FetchFailed for ref.name", |o| {
        condition(o, "FetchFailed").is_some_and(|c| c.status == "True")
    })
    .await;
    assert!(
        condition(&name_gone, "FetchFailed")
            .unwrap()
            .message
            .contains("refs/heads/feature")
    );
    assert_eq!(
        artifact_of(&name_gone).digest,
        artifact_of(&name_branch).digest
    );

    h.shutdown().await;
}

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
