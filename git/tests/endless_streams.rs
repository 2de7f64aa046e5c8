//! Servers that never stop talking: endless ref advertisements, `ls-refs` responses, shallow
//! lists, acknowledgements and progress, from an in-memory stream, a tiny HTTP server on
//! 127.0.0.1 and a fake `ssh` that prints pkt-lines forever. Each must end in a limit error
//! after a bounded amount of input: once per transport with the default limits, otherwise
//! with small limits so that the tests stay quick. Each test runs in a copy of this binary
//! with a capped address space and a deadline, so an unbounded reader fails the test instead
//! of exhausting the machine.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic fails the test

mod common;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use common::isolated;
use rflux_git::pktline::{PktReader, SectionLimits};
use rflux_git::protocol::{
    Advertisement, read_advertisement, read_fetch_v0, read_fetch_v2, read_ls_refs,
};
use rflux_git::{Auth, GitError, Limits, ObjectId, Remote, SshAuth};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};

const MIB: u64 = 1 << 20;
/// Address-space cap of the isolated copies.
const CAP_MIB: u64 = 1536;
/// No stream may be read much beyond the largest default limit (128 MiB of pkt-lines).
const MAX_READ: u64 = 256 * MIB;

const A: &str = "1111111111111111111111111111111111111111";

/// Small limits for the cases that do not test the defaults.
const SMALL: SectionLimits = SectionLimits {
    max_bytes: 4 * MIB,
    max_pkts: 10_000,
};

fn small(r: Endless) -> PktReader<Endless> {
    PktReader::with_limits(r, SMALL)
}

fn small_limits() -> Limits {
    Limits {
        max_advertisement_bytes: SMALL.max_bytes,
        max_advertisement_lines: SMALL.max_pkts as u32,
        ..Limits::default()
    }
}

fn pkt(s: &[u8]) -> Vec<u8> {
    let mut v = format!("{:04x}", s.len() + 4).into_bytes();
    v.extend_from_slice(s);
    v
}

fn pkts(lines: &[&[u8]]) -> Vec<u8> {
    lines.iter().flat_map(|l| pkt(l)).collect()
}

/// `prefix`, then `pattern` repeated forever; counts the bytes handed out.
struct Endless {
    prefix: Vec<u8>,
    pattern: Vec<u8>,
    pos: usize,
    sent: Arc<AtomicU64>,
}

impl Endless {
    fn new(prefix: Vec<u8>, pattern: Vec<u8>) -> (Self, Arc<AtomicU64>) {
        let sent = Arc::new(AtomicU64::new(0));
        let e = Endless {
            prefix,
            pattern,
            pos: 0,
            sent: sent.clone(),
        };
        (e, sent)
    }
}

impl AsyncRead for Endless {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        while buf.remaining() > 0 {
            if !this.prefix.is_empty() {
                let n = buf.remaining().min(this.prefix.len());
                buf.put_slice(&this.prefix[..n]);
                this.prefix.drain(..n);
                continue;
            }
            let n = buf.remaining().min(this.pattern.len() - this.pos);
            buf.put_slice(&this.pattern[this.pos..this.pos + n]);
            this.pos = (this.pos + n) % this.pattern.len();
        }
        let n = (buf.filled().len() - before) as u64;
        this.sent.fetch_add(n, Ordering::Relaxed);
        Poll::Ready(Ok(()))
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn expect_limit<T: std::fmt::Debug>(r: Result<T, GitError>, sent: &AtomicU64) -> String {
    let read = sent.load(Ordering::Relaxed);
    assert!(read < MAX_READ, "read {read} bytes");
    match r {
        Err(GitError::Limit(m)) => m,
        other => panic!("expected a limit error, got {other:?}"),
    }
}

#[test]
fn endless_ref_advertisements_are_bounded() {
    isolated(
        "endless_ref_advertisements_are_bounded",
        &[],
        Some(CAP_MIB),
        || {
            block_on(async {
                // v0: refs forever, default limits (count limit).
                let line = pkt(format!("{A} refs/heads/x\n").as_bytes());
                let (r, sent) = Endless::new(Vec::new(), line);
                let m = expect_limit(read_advertisement(&mut PktReader::new(r)).await, &sent);
                assert_eq!(
                    m,
                    "ref advertisement exceeds the limit of 1000000 pkt-lines"
                );
                // v0: refs with very long names (byte limit).
                let long = format!("{A} refs/heads/{}\n", "n".repeat(60_000));
                let (r, sent) = Endless::new(Vec::new(), pkt(long.as_bytes()));
                let m = expect_limit(read_advertisement(&mut small(r)).await, &sent);
                assert!(m.contains("4194304 bytes"), "{m}");
                // v2: capabilities forever.
                let (r, sent) = Endless::new(pkt(b"version 2\n"), pkt(b"agent=x\n"));
                let m = expect_limit(read_advertisement(&mut small(r)).await, &sent);
                assert!(m.contains("capability advertisement"), "{m}");
            });
        },
    );
}

#[test]
fn endless_ls_refs_responses_are_bounded() {
    isolated(
        "endless_ls_refs_responses_are_bounded",
        &[],
        Some(CAP_MIB),
        || {
            block_on(async {
                let line = format!("{A} refs/tags/v1 peeled:{A}\n");
                let (r, sent) = Endless::new(Vec::new(), pkt(line.as_bytes()));
                let m = expect_limit(read_ls_refs(&mut small(r)).await, &sent);
                assert!(m.contains("ls-refs"), "{m}");
            });
        },
    );
}

#[test]
fn endless_lines_before_the_pack_are_bounded() {
    isolated(
        "endless_lines_before_the_pack_are_bounded",
        &[],
        Some(CAP_MIB),
        || {
            block_on(async {
                let v0 = Advertisement::V0 {
                    refs: vec![],
                    caps: vec!["side-band-64k".into()],
                };
                let shallow = pkt(format!("shallow {A}\n").as_bytes());
                // v0: flushes forever, shallow lines forever, ACK ... continue forever.
                for pattern in [
                    b"0000".to_vec(),
                    shallow.clone(),
                    pkt(format!("ACK {A} continue\n").as_bytes()),
                ] {
                    let (r, sent) = Endless::new(Vec::new(), pattern);
                    expect_limit(read_fetch_v0(small(r), &v0, MIB).await, &sent);
                }
                // v2: endless shallow-info and acknowledgments sections.
                for (header, pattern) in [
                    (&b"shallow-info\n"[..], shallow),
                    (b"acknowledgments\n", pkt(format!("ACK {A}\n").as_bytes())),
                ] {
                    let (r, sent) = Endless::new(pkt(header), pattern);
                    expect_limit(read_fetch_v2(&mut small(r), MIB).await, &sent);
                }
                // Progress messages forever instead of pack data.
                let mut progress = b"\x02".to_vec();
                progress.extend(std::iter::repeat_n(b'.', 60_000));
                let (r, sent) = Endless::new(pkts(&[b"packfile\n"]), pkt(&progress));
                let m = expect_limit(read_fetch_v2(&mut small(r), MIB).await, &sent);
                assert!(m.contains("side-band"), "{m}");
            });
        },
    );
}

/// What the test server answers: a content type, a first part of the body, and a part
/// repeated forever (nothing when empty).
type Response = (&'static str, Vec<u8>, Vec<u8>);

/// A tiny HTTP/1.1 server: answers every request with `respond(head)`. Counts the body bytes
/// it managed to send.
async fn http_server(respond: fn(&str) -> Response) -> (std::net::SocketAddr, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                let head_end = loop {
                    let n = sock.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    req.extend_from_slice(&buf[..n]);
                    if let Some(i) = req.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&req[..head_end]).to_ascii_lowercase();
                let body_len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while req.len() < head_end + body_len {
                    let n = sock.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    req.extend_from_slice(&buf[..n]);
                }
                let (ctype, first, forever) = respond(&head);
                let mut out = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ntransfer-encoding: chunked\r\n\r\n"
                )
                .into_bytes();
                let chunk = |data: &[u8], out: &mut Vec<u8>| {
                    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                    out.extend_from_slice(data);
                    out.extend_from_slice(b"\r\n");
                };
                if !first.is_empty() {
                    // (An empty chunk would end the body.)
                    chunk(&first, &mut out);
                }
                if sock.write_all(&out).await.is_err() {
                    return;
                }
                counter.fetch_add(first.len() as u64, Ordering::Relaxed);
                if forever.is_empty() {
                    let _ = sock.write_all(b"0\r\n\r\n").await;
                    return;
                }
                let mut big = Vec::new();
                while big.len() < 256 * 1024 {
                    big.extend_from_slice(&forever);
                }
                let mut framed = Vec::new();
                chunk(&big, &mut framed);
                while sock.write_all(&framed).await.is_ok() {
                    counter.fetch_add(big.len() as u64, Ordering::Relaxed);
                }
            });
        }
    });
    (addr, sent)
}

const ADV: &str = "application/x-git-upload-pack-advertisement";
const RESULT: &str = "application/x-git-upload-pack-result";

fn v2_caps() -> Vec<u8> {
    let mut v = pkts(&[b"version 2\n", b"ls-refs\n", b"fetch=shallow\n"]);
    v.extend_from_slice(b"0000");
    v
}

fn remote(addr: std::net::SocketAddr) -> Remote {
    Remote::new(format!("http://{addr}/repo.git")).with_timeout(std::time::Duration::from_secs(50))
}

#[test]
fn endless_http_responses_are_bounded() {
    isolated(
        "endless_http_responses_are_bounded",
        &[],
        Some(CAP_MIB),
        || {
            block_on(async {
                // v0: the advertisement of the GET never ends.
                let (addr, sent) = http_server(|_| {
                    let mut first = pkts(&[b"# service=git-upload-pack\n"]);
                    first.extend_from_slice(b"0000");
                    (ADV, first, pkt(format!("{A} refs/heads/x\n").as_bytes()))
                })
                .await;
                let m = expect_limit(rflux_git::ls_refs(&remote(addr), &[]).await, &sent);
                assert!(m.contains("advertisement"), "{m}");

                // v2: the ls-refs response of the POST never ends.
                let (addr, sent) = http_server(|head| {
                    if head.starts_with("get ") {
                        (ADV, v2_caps(), Vec::new())
                    } else {
                        (
                            RESULT,
                            Vec::new(),
                            pkt(format!("{A} refs/heads/x\n").as_bytes()),
                        )
                    }
                })
                .await;
                let r = remote(addr).with_limits(small_limits());
                let m = expect_limit(rflux_git::ls_refs(&r, &[]).await, &sent);
                assert!(m.contains("ls-refs"), "{m}");

                // v2: the acknowledgments before the pack never end.
                let (addr, sent) = http_server(|head| {
                    if head.starts_with("get ") {
                        (ADV, v2_caps(), Vec::new())
                    } else {
                        (
                            RESULT,
                            pkts(&[b"acknowledgments\n"]),
                            pkt(format!("ACK {A}\n").as_bytes()),
                        )
                    }
                })
                .await;
                let want: ObjectId = A.parse().unwrap();
                let r = remote(addr).with_limits(small_limits());
                let m = expect_limit(
                    rflux_git::fetch_commit(&r, &want).await.map(|f| f.id),
                    &sent,
                );
                assert!(m.contains("before the pack"), "{m}");
            });
        },
    );
}

/// Over SSH, where `ssh` is whatever `RFLUX_GIT_SSH` names: `ls_refs` with `ls_refs_limits`
/// when given, then `fetch_commit` with `fetch_limits`.
fn over_ssh(
    ls_refs_limits: Option<Limits>,
    fetch_limits: Limits,
) -> (Option<Result<usize, GitError>>, Result<ObjectId, GitError>) {
    let remote = Remote::new("ssh://git@127.0.0.1/repo.git")
        .with_timeout(std::time::Duration::from_secs(50))
        .with_auth(Auth::Ssh(SshAuth {
            private_key_pem: "not a key".into(),
            known_hosts: "127.0.0.1 ssh-ed25519 AAAA".into(),
            ..Default::default()
        }));
    block_on(async {
        let refs = match ls_refs_limits {
            Some(l) => Some(
                rflux_git::ls_refs(&remote.clone().with_limits(l), &[])
                    .await
                    .map(|r| r.len()),
            ),
            None => None,
        };
        let want: ObjectId = A.parse().unwrap();
        let fetched = rflux_git::fetch_commit(&remote.with_limits(fetch_limits), &want)
            .await
            .map(|f| f.id);
        (refs, fetched)
    })
}

#[test]
fn endless_ssh_output_is_bounded() {
    // Fake `ssh` programs (chosen through RFLUX_GIT_SSH, set only for the isolated copies)
    // that ignore their arguments and print pkt-lines forever; `yes` adds the newline.
    let cases = [
        // v0: refs forever (58-byte pkt-lines); ls-refs runs with the default limits.
        ("v0-refs", format!("exec yes '003a{A} refs/heads/x'"), true),
        // v2: capabilities forever.
        (
            "v2-caps",
            "printf '000eversion 2\\n'; exec yes 000aagent".to_string(),
            true,
        ),
        // v2: a valid advertisement, then shallow lines forever.
        (
            "v2-shallow",
            format!(
                "printf '000eversion 2\\n0000'; printf '0011shallow-info\\n'; exec yes '0035shallow {A}'"
            ),
            false,
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let only = std::env::var("RFLUX_GIT_SSH_CASE").ok();
    for (case, script, refs_too) in cases {
        if only.as_deref().is_some_and(|c| c != case) {
            continue;
        }
        let prog = dir.path().join(case);
        std::fs::write(&prog, format!("#!/bin/sh\n{script}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let env = [
            ("RFLUX_GIT_SSH", prog.as_os_str()),
            ("RFLUX_GIT_SSH_CASE", std::ffi::OsStr::new(case)),
        ];
        isolated("endless_ssh_output_is_bounded", &env, Some(CAP_MIB), || {
            let ls_refs = match case {
                "v0-refs" => Some(Limits::default()),
                _ if refs_too => Some(small_limits()),
                _ => None,
            };
            let (refs, fetched) = over_ssh(ls_refs, small_limits());
            if let Some(refs) = &refs {
                assert!(matches!(refs, Err(GitError::Limit(_))), "{case}: {refs:?}");
            }
            if case == "v0-refs" {
                let m = format!("{refs:?}");
                assert!(m.contains("1000000 pkt-lines"), "{m}");
            }
            assert!(
                matches!(fetched, Err(GitError::Limit(_))),
                "{case}: {fetched:?}"
            );
        });
    }
}
