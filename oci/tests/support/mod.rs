//! Helpers shared by the integration tests: a scriptable fake registry (for what a real
//! registry never sends) and client constructors.

#![allow(dead_code, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rflux_oci::{Client, Keychain, Limits, Repository, TransportConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request the fake server saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the fake server answers.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Send the headers and this many body bytes, then stall forever.
    pub stall_after: Option<usize>,
    /// Send no Content-Length and close the connection after the body.
    pub no_length: bool,
}

impl Reply {
    pub fn new(status: u16) -> Reply {
        Reply {
            status,
            ..Default::default()
        }
    }

    pub fn header(mut self, k: &str, v: &str) -> Reply {
        self.headers.push((k.into(), v.into()));
        self
    }

    pub fn body(mut self, b: impl Into<Vec<u8>>) -> Reply {
        self.body = b.into();
        self
    }
}

type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// A plain-HTTP server on 127.0.0.1 answering with a handler; records every request.
pub struct FakeServer {
    pub addr: std::net::SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    pub async fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Handler = Arc::new(handler);
        let seen2 = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, handler.clone(), seen2.clone()));
            }
        });
        FakeServer { addr, seen, task }
    }

    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(mut conn: TcpStream, handler: Handler, seen: Arc<Mutex<Vec<Seen>>>) {
    let mut buf = Vec::new();
    loop {
        // Read one request head (bodies are ignored: the client only sends small forms).
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if buf.len() > 64 << 10 {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let mut lines = head.split("\r\n");
        let mut first = lines.next().unwrap_or_default().split(' ');
        let method = first.next().unwrap_or_default().to_string();
        let path = first.next().unwrap_or_default().to_string();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let body_len: usize = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + body_len {
            let mut chunk = [0u8; 4096];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = buf[head_end..head_end + body_len].to_vec();
        buf.drain(..head_end + body_len);
        let req = Seen {
            method: method.clone(),
            path,
            headers,
            body,
        };
        seen.lock().unwrap().push(req.clone());
        let reply = handler(&req);
        let mut out = format!("HTTP/1.1 {} X\r\n", reply.status);
        for (k, v) in &reply.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        if reply.no_length {
            out.push_str("Connection: close\r\n");
        } else {
            out.push_str(&format!("Content-Length: {}\r\n", reply.body.len()));
        }
        out.push_str("\r\n");
        if conn.write_all(out.as_bytes()).await.is_err() {
            return;
        }
        let body: &[u8] = if method == "HEAD" { &[] } else { &reply.body };
        if let Some(n) = reply.stall_after {
            let _ = conn.write_all(&body[..n.min(body.len())]).await;
            let _ = conn.flush().await;
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return;
        }
        if conn.write_all(body).await.is_err() {
            return;
        }
        if reply.no_length {
            let _ = conn.shutdown().await;
            return;
        }
    }
}

/// A client for `oci://<host>/<path>` with anonymous credentials.
pub fn client_for(host: &str, path: &str, timeout: Duration, limits: Limits) -> Client {
    let repo = Repository::parse_flux_url(&format!("oci://{host}/{path}"), false).unwrap();
    let cfg = TransportConfig {
        timeout,
        ..Default::default()
    };
    Client::new(repo, Keychain::anonymous(), cfg, limits).unwrap()
}

/// A `.dockerconfigjson` keychain with `user:password` for `host`.
pub fn keychain(host: &str, user: &str, password: &str) -> Keychain {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let doc = serde_json::json!({"auths": {host: {"username": user, "password": password, "auth": auth}}});
    Keychain::from_dockerconfigjson(doc.to_string().as_bytes()).unwrap()
}
