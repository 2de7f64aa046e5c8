//! The token issuer behind a Bearer registry: a tiny HTTP/1.1 server on a loopback port,
//! run on its own threads (usable from sync and async tests alike).
//!
//! `GET /token?service=…&scope=…` with the right Basic credentials answers
//! `{"token": "<random>", "access_token": "<same>", "expires_in": 300, "issued_at": "…"}`;
//! missing or wrong credentials get 401 with a Basic challenge; other paths 404, other methods
//! 405 (a client doing the OAuth2 POST flow falls back to GET on that). Every request is
//! recorded ([`TokenServer::requests`]) so a test can assert the token flow happened.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::Engine;

use super::error::RegistryError;

/// Longest request head read (request line plus headers).
const MAX_HEAD: usize = 16 * 1024;

/// One request the token server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRequest {
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// The decoded `service` parameter.
    pub service: Option<String>,
    /// The decoded `scope` parameters, in order (a client may send several).
    pub scopes: Vec<String>,
    /// The user of the Basic credentials, if any were sent.
    pub user: Option<String>,
    /// Whether the credentials matched (and a token was issued).
    pub authorized: bool,
    /// The token issued.
    pub token: Option<String>,
    /// The status answered.
    pub status: u16,
}

struct Shared {
    user: String,
    password: String,
    requests: Mutex<Vec<TokenRequest>>,
    stop: AtomicBool,
}

/// The running token server; dropped means stopped.
pub struct TokenServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TokenServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl TokenServer {
    /// Starts a token server on `127.0.0.1:<free port>` issuing tokens to `user:password`.
    pub fn start(user: &str, password: &str) -> Result<TokenServer, RegistryError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| RegistryError::io("binding the token server", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| RegistryError::io("the token server's address", e))?;
        let shared = Arc::new(Shared {
            user: user.to_string(),
            password: password.to_string(),
            requests: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let accept_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("registry-token-server".into())
            .spawn(move || accept_loop(&listener, &accept_shared))
            .map_err(|e| RegistryError::io("starting the token server thread", e))?;
        Ok(TokenServer {
            addr,
            shared,
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:<port>/token`.
    pub fn url(&self) -> String {
        self.url_with_host("127.0.0.1")
    }

    /// `http://<host>:<port>/token` (`host` must resolve to 127.0.0.1, e.g. `localhost`).
    pub fn url_with_host(&self, host: &str) -> String {
        format!("http://{host}:{}/token", self.addr.port())
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request answered so far, oldest first.
    pub fn requests(&self) -> Vec<TokenRequest> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = conn else { continue };
        let shared = shared.clone();
        // One thread per connection: a slow client cannot hold up the others.
        let _ = std::thread::Builder::new()
            .name("registry-token-conn".into())
            .spawn(move || {
                let _ = serve(stream, &shared);
            });
    }
}

/// Reads one request head (bounded in bytes and time), answers it and closes.
fn serve(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new((&stream).take(MAX_HEAD as u64));
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            // Closed or over the limit before the end of the head.
            return respond(&stream, 400, &[], "bad request\n");
        }
        let line = line.trim_end_matches(['\r', '\n']).to_string();
        if line.is_empty() {
            break;
        }
        lines.push(line);
    }
    let mut first = lines.first().map(String::as_str).unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_string();
    let target = first.next().unwrap_or("").to_string();
    let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
    let authorization = lines.iter().skip(1).find_map(|h| {
        let (name, value) = h.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("authorization")
            .then(|| value.trim().to_string())
    });
    let params = parse_query(query);
    let mut record = TokenRequest {
        method: method.clone(),
        path: path.to_string(),
        service: params
            .iter()
            .find(|(k, _)| k == "service")
            .map(|(_, v)| v.clone()),
        scopes: params
            .iter()
            .filter(|(k, _)| k == "scope")
            .map(|(_, v)| v.clone())
            .collect(),
        user: None,
        authorized: false,
        token: None,
        status: 0,
    };
    let credentials = authorization.as_deref().and_then(basic_credentials);
    record.user = credentials.as_ref().map(|(u, _)| u.clone());
    let result = if path != "/token" {
        record.status = 404;
        respond(&stream, 404, &[], "not found\n")
    } else if method != "GET" {
        record.status = 405;
        respond(&stream, 405, &[("Allow", "GET")], "use GET\n")
    } else if credentials
        .as_ref()
        .is_some_and(|(u, p)| *u == shared.user && *p == shared.password)
    {
        let token = crate::random_suffix(32);
        let body = serde_json::json!({
            "token": token,
            "access_token": token,
            "expires_in": 300,
            "issued_at": rfc3339_now(),
        })
        .to_string();
        record.authorized = true;
        record.token = Some(token);
        record.status = 200;
        respond(&stream, 200, &[("Content-Type", "application/json")], &body)
    } else {
        record.status = 401;
        respond(
            &stream,
            401,
            &[("WWW-Authenticate", "Basic realm=\"rflux-token\"")],
            "{\"errors\":[{\"code\":\"UNAUTHORIZED\",\"message\":\"bad credentials\"}]}\n",
        )
    };
    shared
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(record);
    result
}

fn respond(
    mut stream: &TcpStream,
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        _ => "Method Not Allowed",
    };
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

/// RFC 3339 UTC time of now, without a date library (seconds precision).
fn rfc3339_now() -> String {
    let secs = crate::now_unix();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `Basic <base64(user:password)>` → (user, password).
pub(super) fn basic_credentials(header: &str) -> Option<(String, String)> {
    let (scheme, value) = header.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// `a=1&b=x%2Fy` → [("a","1"), ("b","x/y")] (`+` is a space).
pub(super) fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len()
                && bytes[i + 1].is_ascii_hexdigit()
                && bytes[i + 2].is_ascii_hexdigit() =>
            {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn query_and_credentials() {
        let q =
            parse_query("service=reg&scope=repository%3Aapps%2Fx%3Apush%2Cpull&scope=a+b&bad=%zz");
        assert_eq!(
            q,
            vec![
                ("service".into(), "reg".into()),
                ("scope".into(), "repository:apps/x:push,pull".into()),
                ("scope".into(), "a b".into()),
                ("bad".into(), "%zz".into()),
            ]
        );
        assert_eq!(parse_query("x=%4"), vec![("x".into(), "%4".into())]);
        let header = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("u:p:q")
        );
        assert_eq!(basic_credentials(&header), Some(("u".into(), "p:q".into())));
        assert_eq!(basic_credentials("Bearer abc"), None);
        assert_eq!(basic_credentials("Basic !!!"), None);
    }

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn issues_tokens_only_for_the_right_credentials() {
        use std::io::Read as _;
        let server = TokenServer::start("alice", "s3cret").unwrap();
        let get = |auth: Option<&str>, target: &str| {
            let mut s = TcpStream::connect(server.addr()).unwrap();
            let mut req = format!("GET {target} HTTP/1.1\r\nHost: x\r\n");
            if let Some(a) = auth {
                req.push_str(&format!(
                    "Authorization: Basic {}\r\n",
                    base64::engine::general_purpose::STANDARD.encode(a)
                ));
            }
            req.push_str("\r\n");
            s.write_all(req.as_bytes()).unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let ok = get(
            Some("alice:s3cret"),
            "/token?service=svc&scope=repository%3Aa%3Apull",
        );
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        let body = ok.split("\r\n\r\n").nth(1).unwrap();
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["token"], json["access_token"]);
        assert_eq!(json["token"].as_str().unwrap().len(), 32);
        let bad = get(Some("alice:wrong"), "/token?service=svc");
        assert!(bad.starts_with("HTTP/1.1 401"), "{bad}");
        assert!(bad.contains("WWW-Authenticate: Basic"), "{bad}");
        assert!(get(None, "/token").starts_with("HTTP/1.1 401"));
        assert!(get(Some("alice:s3cret"), "/other").starts_with("HTTP/1.1 404"));
        let seen = server.requests();
        assert_eq!(seen.len(), 4);
        assert!(seen[0].authorized);
        assert_eq!(seen[0].service.as_deref(), Some("svc"));
        assert_eq!(seen[0].scopes, vec!["repository:a:pull".to_string()]);
        assert_eq!(seen[0].token.as_deref(), json["token"].as_str());
        assert!(!seen[1].authorized && seen[1].user.as_deref() == Some("alice"));
        assert!(seen[2].user.is_none() && seen[2].status == 401);
        assert_eq!(seen[3].status, 404);
    }
}
