//! Against the real test git server of `rflux-e2e` (git http-backend behind
//! plain HTTP, HTTPS with basic/bearer auth, HTTPS with mTLS, and sshd).
//! When the server cannot be started (no Go toolchain/binary, no sshd), each
//! test prints why it skipped and passes.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic fails the test

mod common;

use std::path::Path;
use std::process::Command;

use common::{git_listing, walk_listing};
use rflux_e2e::GitServer;
use rflux_git::{
    Auth, GitError, ProtocolVersion, Remote, Session, SparseFilter, SshAuth, TlsConfig,
    fetch_commit, ls_refs,
};

async fn server() -> Option<&'static GitServer> {
    match GitServer::shared().await {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("skipping: the e2e git server is not available: {e:#}");
            None
        }
    }
}

/// A served repository with content; returns (name, bare path, head commit).
fn repo(gs: &GitServer, name: &str) -> (String, std::path::PathBuf, String) {
    let r = gs.create_repo(name).unwrap();
    let head = common::populate(r.path());
    r.tag("v1.0.0", true).unwrap();
    r.push("main").unwrap();
    r.push_tags().unwrap();
    (r.name().to_string(), r.bare_path().to_path_buf(), head)
}

async fn check_remote(remote: &Remote, bare: &Path, head: &str) {
    let session = Session::connect(remote).await.unwrap();
    let expected = match remote.protocol {
        ProtocolVersion::V2 => 2,
        ProtocolVersion::V0 => 0,
    };
    assert_eq!(session.protocol_version(), expected, "{}", remote.url);
    session.close().await;
    let refs = ls_refs(remote, &["refs/heads/main", "refs/tags/"])
        .await
        .unwrap();
    let main = refs.iter().find(|r| r.name == "refs/heads/main").unwrap();
    assert_eq!(main.oid.to_hex(), head);
    let tag = refs.iter().find(|r| r.name == "refs/tags/v1.0.0").unwrap();
    assert_eq!(tag.target().to_hex(), head);
    let fetched = fetch_commit(remote, &main.oid).await.unwrap();
    assert_eq!(fetched.id.to_hex(), head);
    assert_eq!(
        walk_listing(&fetched, &SparseFilter::all()),
        git_listing(bare, head, &[])
    );
}

#[tokio::test]
async fn http_anonymous_v2_and_v0() {
    let Some(gs) = server().await else { return };
    let (name, bare, head) = repo(gs, "gitcli-http");
    for v in [ProtocolVersion::V2, ProtocolVersion::V0] {
        let remote = Remote::new(gs.http_url(&name)).with_protocol(v);
        check_remote(&remote, &bare, &head).await;
    }
    let missing = Remote::new(gs.http_url("does-not-exist"));
    let err = ls_refs(&missing, &[]).await.unwrap_err();
    assert!(matches!(err, GitError::NotFound(_)), "{err:?}");
}

fn tls(gs: &GitServer) -> TlsConfig {
    TlsConfig {
        ca_pem: Some(gs.ca_pem()),
        ..Default::default()
    }
}

#[tokio::test]
async fn https_basic_and_bearer() {
    let Some(gs) = server().await else { return };
    let (name, bare, head) = repo(gs, "gitcli-https");
    let (user, pass) = gs.basic_auth();
    let url = gs.https_url(&name);
    let basic = Remote::new(&url).with_tls(tls(gs)).with_auth(Auth::Basic {
        username: user.clone(),
        password: pass.clone(),
    });
    check_remote(&basic, &bare, &head).await;
    let bearer = Remote::new(&url)
        .with_tls(tls(gs))
        .with_auth(Auth::Bearer(gs.bearer_token()));
    check_remote(&bearer, &bare, &head).await;

    // Wrong or missing credentials: Auth, and the secret is not in the message.
    for auth in [
        Auth::Basic {
            username: user,
            password: "wrong-secret-xyz".into(),
        },
        Auth::Bearer("wrong-secret-xyz".into()),
        Auth::None,
    ] {
        let r = Remote::new(&url).with_tls(tls(gs)).with_auth(auth);
        let err = ls_refs(&r, &[]).await.unwrap_err();
        assert!(matches!(err, GitError::Auth(_)), "{err:?}");
        assert!(!err.to_string().contains("wrong-secret-xyz"));
    }
    // Without the CA the server certificate is not trusted.
    let r = Remote::new(&url).with_auth(Auth::Bearer(gs.bearer_token()));
    let err = ls_refs(&r, &[]).await.unwrap_err();
    assert!(matches!(err, GitError::Tls(_)), "{err:?}");
    // Garbage CA material is a TLS configuration error.
    let r = Remote::new(&url).with_tls(TlsConfig {
        ca_pem: Some("not a pem".into()),
        ..Default::default()
    });
    assert!(matches!(ls_refs(&r, &[]).await, Err(GitError::Tls(_))));
}

#[tokio::test]
async fn https_mutual_tls() {
    let Some(gs) = server().await else { return };
    let (name, bare, head) = repo(gs, "gitcli-mtls");
    let (cert, key) = gs.client_cert_pem();
    let url = gs.mtls_url(&name);
    let ok = Remote::new(&url).with_tls(TlsConfig {
        ca_pem: Some(gs.ca_pem()),
        client_cert_pem: Some(cert),
        client_key_pem: Some(key),
    });
    check_remote(&ok, &bare, &head).await;
    let no_cert = Remote::new(&url).with_tls(tls(gs));
    let err = ls_refs(&no_cert, &[]).await.unwrap_err();
    eprintln!("mTLS without a client certificate: {err}");
    assert!(matches!(err, GitError::Tls(_)), "{err:?}");
}

fn ssh_auth(gs: &GitServer) -> SshAuth {
    SshAuth {
        private_key_pem: gs.ssh_private_key_pem(),
        passphrase: None,
        known_hosts: gs.known_hosts_line(),
        user: None,
    }
}

#[tokio::test]
async fn ssh_key_and_known_hosts() {
    let Some(gs) = server().await else { return };
    let (name, bare, head) = repo(gs, "gitcli-ssh");
    let url = gs.ssh_url(&name);
    for v in [ProtocolVersion::V2, ProtocolVersion::V0] {
        let r = Remote::new(&url)
            .with_auth(Auth::Ssh(ssh_auth(gs)))
            .with_protocol(v);
        check_remote(&r, &bare, &head).await;
    }

    // Unknown host key.
    let other_key = gen_key(None);
    let mut wrong_kh = ssh_auth(gs);
    let host = gs.known_hosts_line();
    let host_field = host.split(' ').next().unwrap();
    wrong_kh.known_hosts = format!("{host_field} {}", other_key.1.trim());
    let err = ls_refs(&Remote::new(&url).with_auth(Auth::Ssh(wrong_kh)), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, GitError::HostKey(_)), "{err:?}");

    // A key the server does not know.
    let mut wrong_key = ssh_auth(gs);
    wrong_key.private_key_pem = other_key.0;
    let err = ls_refs(&Remote::new(&url).with_auth(Auth::Ssh(wrong_key)), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, GitError::Auth(_)), "{err:?}");

    // A repository that does not exist.
    let missing = Remote::new(gs.ssh_url("nope-missing")).with_auth(Auth::Ssh(ssh_auth(gs)));
    let err = ls_refs(&missing, &[]).await.unwrap_err();
    assert!(matches!(err, GitError::NotFound(_)), "{err:?}");
}

/// Generates an ed25519 key; returns (private key, public key line).
fn gen_key(passphrase: Option<&str>) -> (String, String) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("k");
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-C", "rflux-git-test", "-N"])
        .arg(passphrase.unwrap_or(""))
        .arg("-f")
        .arg(&p)
        .status()
        .unwrap();
    assert!(st.success());
    (
        std::fs::read_to_string(&p).unwrap(),
        std::fs::read_to_string(p.with_extension("pub")).unwrap(),
    )
}

#[tokio::test]
async fn ssh_passphrase_protected_key() {
    let Some(gs) = server().await else { return };
    let (name, bare, head) = repo(gs, "gitcli-sshpass");
    // Authorize a fresh passphrase-protected key with the test sshd.
    let (private, public) = gen_key(Some("correct horse"));
    let auth_keys = gs.state().dir.join("ssh").join("authorized_keys");
    if !auth_keys.is_file() {
        eprintln!("skipping: {} not found", auth_keys.display());
        return;
    }
    // Rewrite atomically (sshd may read the file concurrently for other tests)
    // and drop keys earlier runs of this test left behind.
    let mut keys: String = std::fs::read_to_string(&auth_keys)
        .unwrap()
        .lines()
        .filter(|l| !l.trim_end().ends_with(" rflux-git-test"))
        .map(|l| format!("{l}\n"))
        .collect();
    let original = keys.clone();
    keys.push_str(&public);
    write_atomic(&auth_keys, &keys);
    let mut a = ssh_auth(gs);
    a.private_key_pem = private.clone();
    a.passphrase = Some("correct horse".into());
    let url = gs.ssh_url(&name);
    check_remote(
        &Remote::new(&url).with_auth(Auth::Ssh(a.clone())),
        &bare,
        &head,
    )
    .await;

    a.passphrase = Some("wrong".into());
    let err = ls_refs(&Remote::new(&url).with_auth(Auth::Ssh(a.clone())), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, GitError::Auth(_)), "{err:?}");
    assert!(!err.to_string().contains("correct horse"));
    a.passphrase = None;
    let err = ls_refs(&Remote::new(&url).with_auth(Auth::Ssh(a)), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, GitError::Auth(_)), "{err:?}");
    write_atomic(&auth_keys, &original);
}

fn write_atomic(path: &Path, contents: &str) {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
