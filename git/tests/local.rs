//! End-to-end over a local `git upload-pack` child process (`file://`),
//! protocol v2 and v0: the same code path SSH uses, without a server.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic fails the test

mod common;

use common::{git, git_listing, populate, walk_listing};
use rflux_git::{
    GitError, ObjectId, ProtocolVersion, Remote, Session, SparseFilter, fetch_commit, ls_refs,
};

struct Fixture {
    _dir: tempfile::TempDir,
    bare: std::path::PathBuf,
    head: String,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let bare = dir.path().join("repo.git");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    let head = populate(&work);
    git(&work, &["tag", "-a", "-m", "release one", "v1.0.0"]);
    git(&work, &["tag", "light"]);
    git(&work, &["checkout", "-q", "-b", "feature"]);
    std::fs::write(work.join("feature.txt"), "f\n").unwrap();
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "feature"]);
    git(&work, &["checkout", "-q", "main"]);
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    Fixture {
        _dir: dir,
        bare,
        head,
    }
}

fn remote(f: &Fixture, v: ProtocolVersion) -> Remote {
    Remote::new(format!("file://{}", f.bare.display())).with_protocol(v)
}

/// `git ls-remote` output as (oid, name) pairs, sorted.
fn ls_remote(f: &Fixture) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = git(&f.bare, &["ls-remote", "."])
        .lines()
        .map(|l| {
            let (a, b) = l.split_once('\t').unwrap();
            (a.to_string(), b.to_string())
        })
        .collect();
    v.sort();
    v
}

async fn check_ls_refs(v: ProtocolVersion) {
    let f = fixture();
    let r = remote(&f, v);
    let refs = ls_refs(&r, &[]).await.unwrap();
    let mut got: Vec<(String, String)> = Vec::new();
    for rr in &refs {
        got.push((rr.oid.to_hex(), rr.name.clone()));
        if let Some(p) = rr.peeled {
            got.push((p.to_hex(), format!("{}^{{}}", rr.name)));
        }
    }
    got.sort();
    assert_eq!(got, ls_remote(&f));
    let head = refs.iter().find(|r| r.name == "HEAD").unwrap();
    assert_eq!(head.symref_target.as_deref(), Some("refs/heads/main"));

    let tags = ls_refs(&r, &["refs/tags/"]).await.unwrap();
    let names: Vec<&str> = tags.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["refs/tags/light", "refs/tags/v1.0.0"]);
    assert_eq!(tags[1].target().to_hex(), f.head);
    assert_ne!(tags[1].oid.to_hex(), f.head, "annotated tag has its own id");
}

#[tokio::test]
async fn ls_refs_v2_matches_ls_remote() {
    check_ls_refs(ProtocolVersion::V2).await;
}

#[tokio::test]
async fn ls_refs_v0_matches_ls_remote() {
    check_ls_refs(ProtocolVersion::V0).await;
}

async fn check_fetch(v: ProtocolVersion) {
    let f = fixture();
    let r = remote(&f, v);
    let mut s = Session::connect(&r).await.unwrap();
    assert_eq!(
        s.protocol_version(),
        if v == ProtocolVersion::V2 { 2 } else { 0 }
    );
    let main = s.ls_refs(&["refs/heads/main"]).await.unwrap();
    assert_eq!(main.len(), 1);
    let fetched = s.fetch_commit(&main[0].oid).await.unwrap();
    s.close().await;
    assert_eq!(fetched.id.to_hex(), f.head);
    assert_eq!(fetched.commit.message, "second\n");
    assert_eq!(fetched.commit.parents.len(), 1);
    // Shallow: the parent commit was not sent.
    assert!(fetched.store().get(&fetched.commit.parents[0]).is_none());
    assert_eq!(fetched.shallow, vec![fetched.id]);
    assert_eq!(
        walk_listing(&fetched, &SparseFilter::all()),
        git_listing(&f.bare, &f.head, &[])
    );
    let filter = SparseFilter::new(["apps/prod", "bin/"]);
    let sparse = walk_listing(&fetched, &filter);
    assert_eq!(sparse, git_listing(&f.bare, &f.head, &["apps/prod", "bin"]));
    assert_eq!(sparse.len(), 3);
}

#[tokio::test]
async fn fetch_v2_walk_equals_ls_tree() {
    check_fetch(ProtocolVersion::V2).await;
}

#[tokio::test]
async fn fetch_v0_walk_equals_ls_tree() {
    check_fetch(ProtocolVersion::V0).await;
}

#[tokio::test]
async fn fetch_annotated_tag_peels_to_commit() {
    let f = fixture();
    for v in [ProtocolVersion::V2, ProtocolVersion::V0] {
        let r = remote(&f, v);
        let tag_oid: ObjectId = git(&f.bare, &["rev-parse", "refs/tags/v1.0.0"])
            .trim()
            .parse()
            .unwrap();
        let fetched = fetch_commit(&r, &tag_oid).await.unwrap();
        assert_eq!(fetched.id.to_hex(), f.head);
        assert_eq!(fetched.tags.len(), 1);
        assert_eq!(fetched.tags[0].0, tag_oid);
        assert_eq!(fetched.tags[0].1.name, "v1.0.0");
        assert_eq!(fetched.tags[0].1.message, "release one\n");
    }
}

#[tokio::test]
async fn v2_session_serves_several_fetches() {
    let f = fixture();
    let mut s = Session::connect(&remote(&f, ProtocolVersion::V2))
        .await
        .unwrap();
    let refs = s.ls_refs(&["refs/heads/"]).await.unwrap();
    assert_eq!(refs.len(), 2);
    for rr in &refs {
        let fetched = s.fetch_commit(&rr.oid).await.unwrap();
        assert_eq!(fetched.id, rr.oid);
        let rev = rr.oid.to_hex();
        assert_eq!(
            walk_listing(&fetched, &SparseFilter::all()),
            git_listing(&f.bare, &rev, &[])
        );
    }
    s.close().await;
}

#[tokio::test]
async fn missing_repository_and_object_are_not_found() {
    let f = fixture();
    let missing = Remote::new(format!("file://{}/nope.git", f.bare.display()));
    let err = ls_refs(&missing, &[]).await.unwrap_err();
    assert!(matches!(err, GitError::NotFound(_)), "{err:?}");

    for v in [ProtocolVersion::V2, ProtocolVersion::V0] {
        let bogus: ObjectId = "0123456789012345678901234567890123456789".parse().unwrap();
        let err = fetch_commit(&remote(&f, v), &bogus).await.unwrap_err();
        assert!(matches!(err, GitError::NotFound(_)), "{v:?}: {err:?}");
    }
}

#[tokio::test]
async fn tiny_pack_limit_is_enforced() {
    let f = fixture();
    let limits = rflux_git::Limits {
        max_pack_bytes: 200,
        ..Default::default()
    };
    let r = remote(&f, ProtocolVersion::V2).with_limits(limits);
    let head: ObjectId = f.head.parse().unwrap();
    let err = fetch_commit(&r, &head).await.unwrap_err();
    assert!(matches!(err, GitError::Limit(_)), "{err:?}");
}

#[tokio::test]
async fn unresponsive_http_server_times_out() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock); // accept, never answer
        }
    });
    let r = Remote::new(format!("http://{addr}/repo.git"))
        .with_timeout(std::time::Duration::from_millis(500));
    let err = ls_refs(&r, &[]).await.unwrap_err();
    assert!(matches!(err, GitError::Timeout(_)), "{err:?}");
    hold.abort();
}

#[tokio::test]
async fn non_git_http_server_is_a_protocol_error() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serve = tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = sock.read(&mut buf).await;
            let _ = sock
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello")
                .await;
        }
    });
    let err = ls_refs(&Remote::new(format!("http://{addr}/repo.git")), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, GitError::Protocol(_)), "{err:?}");
    serve.abort();
}

#[tokio::test]
async fn http_body_cut_short_is_a_transport_error() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serve = tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let n = sock.read(&mut buf).await.unwrap_or(0);
            let advertisement = b"000eversion 2\n000cls-refs\n0000";
            let head = if buf[..n].starts_with(b"GET ") {
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/x-git-upload-pack-advertisement\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    advertisement.len()
                )
            } else {
                // Promises 1000 bytes, sends part of a ref line, hangs up.
                "HTTP/1.1 200 OK\r\ncontent-type: application/x-git-upload-pack-result\r\ncontent-length: 1000\r\nconnection: close\r\n\r\n0040aaaa".to_string()
            };
            let _ = sock.write_all(head.as_bytes()).await;
            if buf[..n].starts_with(b"GET ") {
                let _ = sock.write_all(advertisement).await;
            }
        }
    });
    let err = ls_refs(&Remote::new(format!("http://{addr}/repo.git")), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, GitError::Transport(_)), "{err:?}");
    serve.abort();
}
