//! The file server never serves or lists the temporary file of an archive being written: a
//! writer killed mid-archive leaves a partial `.rflux-archive-*.tmp` next to the artifacts, and
//! the e2e fault suite (`e2e/tests/faults_source.rs`) found it served with 200 and listed.
#![allow(clippy::unwrap_used)]

use std::fs;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn partial_archives_are_neither_served_nor_listed() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("gitrepository/ns/repo");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("abc.tar.gz"), b"complete").unwrap();
    let temp = format!(
        "{}Xy12Ab.tmp",
        source_controller::artifact::storage::TEMP_PREFIX
    );
    fs::write(dir.join(&temp), b"\x1f\x8b\x08partial").unwrap();
    // A directory with the prefix is hidden as well.
    fs::create_dir_all(dir.join(format!("{temp}.d"))).unwrap();
    fs::write(dir.join(format!("{temp}.d/f")), b"x").unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(source_controller::artifact::serve_listener(
        root.path().to_path_buf(),
        listener,
        async {
            let _ = rx.await;
        },
    ));

    let (status, body) = get(addr, "/gitrepository/ns/repo/abc.tar.gz").await;
    assert_eq!((status, body.as_str()), (200, "complete"));
    for path in [
        format!("/gitrepository/ns/repo/{temp}"),
        format!("/gitrepository/ns/repo/{temp}.d/f"),
        // Percent-encoded, so the check runs on decoded segments.
        "/gitrepository/ns/repo/%2Erflux-archive-Xy12Ab.tmp".to_string(),
    ] {
        let (status, _) = get(addr, &path).await;
        assert_eq!(status, 404, "{path}");
    }
    let (status, listing) = get(addr, "/gitrepository/ns/repo/").await;
    assert_eq!(status, 200);
    assert!(listing.contains("abc.tar.gz"), "{listing}");
    assert!(!listing.contains("rflux-archive"), "{listing}");

    let _ = tx.send(());
    server.await.unwrap().unwrap();
}
