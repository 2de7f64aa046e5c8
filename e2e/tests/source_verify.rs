//! GitRepository `spec.verify` on the shared control plane and the test git server, with the
//! reconciler in-process (as in `source_controller.rs`).
//!
//! Keys are made at test time: two OpenPGP keys (gpg, temp GNUPGHOME, no passphrase) and an
//! SSH key (ssh-keygen); commits and tags are signed with `git commit -S` / `git tag -s`.
//! Covered: HEAD mode with PGP and SSH signatures (SourceVerified=True with Flux's reason and
//! message, `sourceVerificationMode`), a wrong key and a missing Secret (SourceVerified=False,
//! Ready=False, no artifact), Tag and TagAndHEAD modes, an unsigned tag, Tag mode on a branch
//! (Stalled), and an unsigned commit pushed after a verified one (no new artifact; the old one
//! stays) followed by a signed one (recovers).
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::runtime::controller::{ControllerSettings, run_controller};
use rflux_common::runtime::metrics::Metrics;
use rflux_common::runtime::{CancellationToken, EventRecorder};
use rflux_e2e::{ControlPlane, GitServer, TestRepo};
use serde_json::{Value, json};
use source_controller::artifact::{Storage, StorageOptions, serve_listener};
use source_controller::gitrepository::{Context, reconcile};
use support::{gitrepo_condition as condition, wait_gitrepo as wait_for};

fn have(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success() || !o.stderr.is_empty())
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A GnuPG home with keys, plus an SSH key pair.
struct Keys {
    dir: tempfile::TempDir,
    home: PathBuf,
    alice_fpr: String,
    alice_pub: String,
    bob_pub: String,
    ssh_key: PathBuf,
    ssh_pub: String,
    ssh_fingerprint: String,
}

impl Keys {
    fn alice_id(&self) -> &str {
        &self.alice_fpr[self.alice_fpr.len() - 16..]
    }

    /// git `-c` options that sign with Alice's PGP key.
    fn pgp_opts(&self) -> Vec<String> {
        vec![
            "-c".into(),
            format!("gpg.program={}", self.dir.path().join("gpg.sh").display()),
            "-c".into(),
            format!("user.signingkey={}", self.alice_fpr),
        ]
    }

    /// git `-c` options that sign with the SSH key.
    fn ssh_opts(&self) -> Vec<String> {
        vec![
            "-c".into(),
            "gpg.format=ssh".into(),
            "-c".into(),
            format!("user.signingkey={}", self.ssh_key.display()),
        ]
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .env("GNUPGHOME", &self.home)
            .args(["--kill", "gpg-agent"])
            .status();
    }
}

fn gpg(home: &Path) -> Command {
    let mut c = Command::new("gpg");
    c.env("GNUPGHOME", home)
        .args(["--batch", "--pinentry-mode", "loopback", "--passphrase", ""]);
    c
}

fn make_keys() -> Keys {
    let dir = tempfile::Builder::new().prefix("rfsv").tempdir().unwrap();
    let home = dir.path().join("g");
    std::fs::create_dir(&home).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
        let wrapper = dir.path().join("gpg.sh");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nGNUPGHOME='{}' exec gpg \"$@\"\n",
                home.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut fprs = Vec::new();
    for uid in ["Alice <alice@example.com>", "Bob <bob@example.com>"] {
        run(gpg(&home).args(["--quick-gen-key", uid, "ed25519", "sign", "never"]));
        let listing = run(gpg(&home).args(["--with-colons", "--list-keys", uid]));
        let fpr = listing
            .lines()
            .find_map(|l| l.strip_prefix("fpr:"))
            .unwrap()
            .trim_matches(':')
            .to_string();
        fprs.push(fpr);
    }
    let export = |fpr: &str| run(gpg(&home).args(["--armor", "--export", fpr]));
    let alice_pub = export(&fprs[0]);
    let bob_pub = export(&fprs[1]);
    let ssh_key = dir.path().join("id_ed25519");
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "e2e", "-f"])
        .arg(&ssh_key));
    let ssh_pub = std::fs::read_to_string(ssh_key.with_extension("pub")).unwrap();
    let ssh_fingerprint = run(Command::new("ssh-keygen")
        .args(["-l", "-E", "sha256", "-f"])
        .arg(ssh_key.with_extension("pub")))
    .split_whitespace()
    .nth(1)
    .unwrap()
    .to_string();
    Keys {
        dir,
        home,
        alice_fpr: fprs[0].clone(),
        alice_pub,
        bob_pub,
        ssh_key,
        ssh_pub,
        ssh_fingerprint,
    }
}

/// Commits everything in the work tree with extra git `-c` options (signing); returns the sha.
fn commit_with(repo: &TestRepo, opts: &[String], sign: bool, msg: &str) -> String {
    repo.git(&["add", "-A"]).unwrap();
    let mut args: Vec<&str> = opts.iter().map(String::as_str).collect();
    args.extend(["commit", "-q", "--allow-empty", "-m", msg]);
    if sign {
        args.push("-S");
    }
    repo.git(&args).unwrap();
    repo.head().unwrap()
}

fn tag_with(repo: &TestRepo, opts: &[String], sign: bool, name: &str) {
    let mut args: Vec<&str> = opts.iter().map(String::as_str).collect();
    args.extend([
        "tag",
        "-f",
        if sign { "-s" } else { "-a" },
        "-m",
        name,
        name,
    ]);
    repo.git(&args).unwrap();
}

fn status_is(obj: &GitRepository, type_: &str, status: &str, reason: &str) -> bool {
    condition(obj, type_).is_some_and(|c| c.status == status && c.reason == reason)
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

async fn create_gitrepo(api: &Api<GitRepository>, name: &str, url: &str, r: Value, verify: Value) {
    let obj: GitRepository = serde_json::from_value(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": name},
        "spec": {"url": url, "interval": "1h", "ref": r, "verify": verify},
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

fn artifact_revision(obj: &GitRepository) -> Option<String> {
    obj.status
        .as_ref()?
        .artifact
        .as_ref()
        .map(|a| a.revision.clone())
}

/// Asserts a failed verification: SourceVerified=False and Ready=False with the same reason
/// and message.
fn assert_unverified(obj: &GitRepository, reason: &str) -> String {
    let sv = condition(obj, "SourceVerified").unwrap();
    let ready = condition(obj, "Ready").unwrap();
    assert_eq!(
        (sv.status.as_str(), sv.reason.as_str()),
        ("False", reason),
        "{sv:?}"
    );
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason, sv.reason);
    assert_eq!(ready.message, sv.message);
    sv.message.clone()
}

#[tokio::test]
async fn gitrepository_signature_verification() {
    for (tool, arg) in [
        ("gpg", "--version"),
        ("ssh-keygen", "-?"),
        ("git", "--version"),
    ] {
        if !have(tool, arg) {
            println!("skipped: `{tool}` is not available to make signed commits");
            return;
        }
    }
    let cp = ControlPlane::shared().await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    let _lock = support::lock_crds_and_install(&client).await;
    let ns = cp.create_namespace("srcverify").await.unwrap();

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
    let storage = Storage::new(StorageOptions::new(
        storage_dir.path(),
        storage_addr.to_string(),
    ))
    .unwrap();
    let ctx = Arc::new(Context {
        client: client.clone(),
        storage,
        recorder: EventRecorder::new(client.clone(), "source-controller", "e2e"),
        jitter_percentage: 5,
        requeue_dependency: Duration::from_secs(2),
        oci: Default::default(),
    });
    let api: Api<GitRepository> = Api::namespaced(client.clone(), &ns);
    let metrics = Metrics::new().unwrap();
    let runner = tokio::spawn(run_controller(
        api.clone(),
        ControllerSettings {
            name: "gitrepository".into(),
            group: "source.toolkit.fluxcd.io".into(),
            kind: "GitRepository".into(),
            concurrency: 4,
            label_selector: String::new(),
        },
        metrics.register_controller("gitrepository", 4),
        Duration::from_millis(500),
        Duration::from_secs(3),
        ctx,
        reconcile,
        stop.clone(),
    ));

    // Keys and a repository: a PGP-signed commit on main with a signed tag v1.0.0 and an
    // unsigned annotated tag v2.0.0; an SSH-signed commit on branch `ssh`; branch `moving`.
    let t0 = Instant::now();
    let keys = make_keys();
    let pgp = keys.pgp_opts();
    let ssh = keys.ssh_opts();
    let repo = git.create_repo("srcverify").unwrap();
    repo.write("deploy/cm.yaml", "apiVersion: v1\nkind: ConfigMap\n")
        .unwrap();
    let signed = commit_with(&repo, &pgp, true, "signed with pgp");
    tag_with(&repo, &pgp, true, "v1.0.0");
    tag_with(&repo, &[], false, "v2.0.0");
    repo.push("main").unwrap();
    repo.push("moving").unwrap();
    repo.push_tags().unwrap();
    let tag_v1 = repo.remote_rev("refs/tags/v1.0.0").unwrap();
    let tag_v2 = repo.remote_rev("refs/tags/v2.0.0").unwrap();
    repo.write("deploy/ssh.yaml", "ssh: 1\n").unwrap();
    let ssh_signed = commit_with(&repo, &ssh, true, "signed with ssh");
    repo.push("ssh").unwrap();
    println!("keys and signed commits made in {:?}", t0.elapsed());

    create_secret(
        &client,
        &ns,
        "keys",
        json!({"alice.asc": keys.alice_pub, "me.sshpub": keys.ssh_pub}),
    )
    .await;
    create_secret(&client, &ns, "wrong", json!({"bob.asc": keys.bob_pub})).await;

    let url = git.http_url(repo.name());
    let with = |mode: &str, secret: &str| json!({"mode": mode, "secretRef": {"name": secret}});
    // name, ref, verify mode, verify secret
    for (name, reference, mode, secret) in [
        ("head-pgp", json!({"branch": "main"}), "HEAD", "keys"),
        ("head-ssh", json!({"branch": "ssh"}), "HEAD", "keys"),
        ("head-wrong", json!({"branch": "main"}), "HEAD", "wrong"),
        ("no-secret", json!({"branch": "main"}), "HEAD", "absent"),
        ("tag", json!({"tag": "v1.0.0"}), "Tag", "keys"),
        (
            "tag-and-head",
            json!({"semver": "~1.0"}),
            "TagAndHEAD",
            "keys",
        ),
        ("tag-unsigned", json!({"tag": "v2.0.0"}), "Tag", "keys"),
        ("tag-on-branch", json!({"branch": "main"}), "Tag", "keys"),
        ("moving", json!({"branch": "moving"}), "head", "keys"),
    ] {
        create_gitrepo(&api, name, &url, reference, with(mode, secret)).await;
    }

    // HEAD, PGP.
    let ok = wait_for(&api, "head-pgp", "verified and ready", |o| {
        status_is(o, "Ready", "True", "Succeeded")
    })
    .await;
    let sv = condition(&ok, "SourceVerified").unwrap();
    assert_eq!(
        (sv.status.as_str(), sv.reason.as_str()),
        ("True", "Succeeded")
    );
    assert_eq!(
        sv.message,
        format!(
            "verified signature of\n\t- commit '{signed}' with key '{}'",
            keys.alice_id()
        )
    );
    let st = ok.status.as_ref().unwrap();
    assert_eq!(st.source_verification_mode.as_deref(), Some("HEAD"));
    assert_eq!(
        artifact_revision(&ok).as_deref(),
        Some(format!("main@sha1:{signed}").as_str())
    );

    // HEAD, SSH.
    let ok = wait_for(&api, "head-ssh", "verified and ready", |o| {
        status_is(o, "Ready", "True", "Succeeded")
    })
    .await;
    assert_eq!(
        condition(&ok, "SourceVerified").unwrap().message,
        format!(
            "verified signature of\n\t- commit '{ssh_signed}' with key '{}'",
            keys.ssh_fingerprint
        )
    );

    // Wrong key: no artifact.
    let bad = wait_for(&api, "head-wrong", "verification failed", |o| {
        status_is(o, "SourceVerified", "False", "InvalidCommitSignature")
    })
    .await;
    let msg = assert_unverified(&bad, "InvalidCommitSignature");
    assert_eq!(
        msg,
        format!(
            "signature verification of commit '{signed}' failed: unable to verify Git commit: \
             unable to verify payload with any of the given key rings: no matching key"
        )
    );
    assert_eq!(artifact_revision(&bad), None);
    assert!(condition(&bad, "ArtifactInStorage").is_none());

    // Missing Secret.
    let bad = wait_for(&api, "no-secret", "verification error", |o| {
        status_is(o, "SourceVerified", "False", "VerificationError")
    })
    .await;
    let msg = assert_unverified(&bad, "VerificationError");
    assert!(msg.starts_with("public keys secret error: "), "{msg}");
    assert_eq!(artifact_revision(&bad), None);

    // Tag.
    let ok = wait_for(&api, "tag", "tag verified", |o| {
        status_is(o, "Ready", "True", "Succeeded")
    })
    .await;
    assert_eq!(
        condition(&ok, "SourceVerified").unwrap().message,
        format!(
            "verified signature of\n\t- tag 'v1.0.0@{tag_v1}' with key '{}'",
            keys.alice_id()
        )
    );
    assert_eq!(
        ok.status
            .as_ref()
            .unwrap()
            .source_verification_mode
            .as_deref(),
        Some("Tag")
    );
    assert_eq!(
        artifact_revision(&ok).as_deref(),
        Some(format!("v1.0.0@sha1:{signed}").as_str())
    );

    // TagAndHEAD through a semver range.
    let ok = wait_for(&api, "tag-and-head", "tag and head verified", |o| {
        status_is(o, "Ready", "True", "Succeeded")
    })
    .await;
    assert_eq!(
        condition(&ok, "SourceVerified").unwrap().message,
        format!(
            "verified signature of\n\t- tag 'v1.0.0@{tag_v1}' with key '{id}'\n\t- commit '{signed}' with key '{id}'",
            id = keys.alice_id()
        )
    );
    assert_eq!(
        ok.status
            .as_ref()
            .unwrap()
            .source_verification_mode
            .as_deref(),
        Some("TagAndHEAD")
    );

    // Unsigned tag.
    let bad = wait_for(&api, "tag-unsigned", "unsigned tag", |o| {
        status_is(o, "SourceVerified", "False", "InvalidGitObject")
    })
    .await;
    assert_eq!(
        assert_unverified(&bad, "InvalidGitObject"),
        format!("cannot verify signature of tag 'v2.0.0@{tag_v2}' since it is not signed")
    );
    assert_eq!(artifact_revision(&bad), None);

    // Tag mode without a tag reference: stalled.
    let bad = wait_for(&api, "tag-on-branch", "stalled", |o| {
        status_is(o, "Stalled", "True", "InvalidVerificationMode")
    })
    .await;
    assert_eq!(
        assert_unverified(&bad, "InvalidVerificationMode"),
        "cannot verify tag object's signature if a tag reference is not specified"
    );
    assert_eq!(bad.status.as_ref().unwrap().observed_generation, Some(1));

    // An unsigned commit after a verified one: no new artifact, the old one stays served.
    let first = wait_for(&api, "moving", "verified", |o| {
        status_is(o, "Ready", "True", "Succeeded")
    })
    .await;
    let first_art = first.status.as_ref().unwrap().artifact.clone().unwrap();
    assert_eq!(first_art.revision, format!("moving@sha1:{signed}"));
    repo.git(&["checkout", "-q", "-B", "moving", &signed])
        .unwrap();
    repo.write("deploy/evil.yaml", "evil: 1\n").unwrap();
    let unsigned = commit_with(&repo, &[], false, "not signed");
    repo.push("moving").unwrap();
    request_reconcile(&api, "moving", "after-unsigned").await;
    let bad = wait_for(&api, "moving", "unsigned commit rejected", |o| {
        status_is(o, "SourceVerified", "False", "InvalidCommitSignature")
    })
    .await;
    assert_eq!(
        assert_unverified(&bad, "InvalidCommitSignature"),
        format!(
            "signature verification of commit '{unsigned}' failed: unsupported signature type: empty"
        )
    );
    let kept = bad.status.as_ref().unwrap().artifact.clone().unwrap();
    assert_eq!(kept.revision, first_art.revision);
    assert_eq!(kept.digest, first_art.digest);
    let dir = storage_dir
        .path()
        .join(format!("gitrepository/{ns}/moving"));
    let tarballs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tar.gz"))
        .collect();
    assert_eq!(tarballs, vec![format!("{signed}.tar.gz")]);
    // A signed commit on top recovers.
    let resigned = commit_with(&repo, &pgp, true, "signed again");
    repo.push("moving").unwrap();
    request_reconcile(&api, "moving", "after-signed").await;
    let ok = wait_for(&api, "moving", "signed commit accepted", |o| {
        artifact_revision(o).as_deref() == Some(format!("moving@sha1:{resigned}").as_str())
            && status_is(o, "Ready", "True", "Succeeded")
    })
    .await;
    assert_eq!(
        condition(&ok, "SourceVerified").unwrap().reason,
        "Succeeded"
    );

    stop.cancel();
    let _ = runner.await;
    let _ = server.await;
    drop(keys);
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
