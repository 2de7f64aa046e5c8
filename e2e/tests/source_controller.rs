//! The GitRepository reconciler on the real control plane and the test git server.
//!
//! The reconciler runs in-process (the same `run_controller` + `reconcile` as the binary) with
//! an artifact storage in a temp dir and the artifact server on a loopback port (the harness
//! is in `source_controller_common`). One test function covers: HTTPS basic auth (branch),
//! bearer token (annotated tag), SSH with known_hosts (semver range), anonymous HTTP (an older
//! commit), a served archive whose digest matches status and equals packaging the work tree, a
//! wrong password giving FetchFailed while the old artifact stays, a push producing a new
//! artifact, and deletion removing the storage. A second covers mTLS, `ref.name`, a
//! force-pushed branch and a deleted branch. Submodules, Secret-triggered reconciles and the
//! proxy are in `source_controller_more.rs`.
//! Each test holds `<e2e state>/crds.lock` so the CRD compatibility test cannot swap CRDs
//! meanwhile.
#![allow(clippy::unwrap_used)]

mod source_controller_common;
mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use rflux_e2e::{ControlPlane, GitServer};
use serde_json::json;
use source_controller_common::*;
use support::{
    gitrepo_artifact, gitrepo_condition as condition, lock_crds, wait_gitrepo as wait_for,
};

const SECOND_SUBJECT: &str = "second commit with a rather long subject line that gets cut";

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
