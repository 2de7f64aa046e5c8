//! Smart HTTP(S), as git's `gitprotocol-http` documentation describes it:
//! `GET <url>/info/refs?service=git-upload-pack`, then `POST <url>/git-upload-pack` per
//! request. Response bodies are parsed while they arrive, within the [`Limits`].

use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use reqwest::{Client, StatusCode, header};
use rflux_core::{Lru, error_chain};

use super::stream::{ErrorSlot, stream};
use crate::error::GitError;
use crate::limits::Limits;
use crate::pktline::{BoxReader, PktReader};
use crate::protocol::{Advertisement, read_advertisement};
use crate::remote::{Auth, ProtocolVersion, Remote};
use crate::url::redact;

/// How far past its expected size a response body may go before the transport itself stops
/// reading it. The pkt-line reader, whose section limits stop a stream with a more precise
/// error, always stops first: the margin exceeds the largest pkt-line.
const BACKSTOP_MARGIN: u64 = 64 << 10;

pub(crate) struct HttpConn {
    client: Client,
    url: String,
    auth: Auth,
    limits: Limits,
    timeout: Duration,
    want_v2: bool,
    /// The typed error behind a failed read of a response body.
    errors: ErrorSlot,
}

/// Installs the ring provider as rustls' process default unless one is set.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer is fine: a provider is set either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// What an HTTP client is built from: remotes with equal settings share one client (and so its
/// parsed CA roots and its pool of idle connections). Credentials sent per request (basic auth,
/// bearer tokens) are not part of it.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    timeout: Duration,
    ca_pem: Option<String>,
    client_cert_pem: Option<String>,
    client_key_pem: Option<String>,
    proxy: Option<String>,
}

impl ClientKey {
    fn of(remote: &Remote) -> Self {
        ClientKey {
            timeout: remote.timeout,
            ca_pem: remote.tls.ca_pem.clone(),
            client_cert_pem: remote.tls.client_cert_pem.clone(),
            client_key_pem: remote.tls.client_key_pem.clone(),
            proxy: remote.proxy.clone(),
        }
    }
}

/// How many distinct client settings are kept; the least recently used is dropped beyond that.
const CLIENT_CACHE_CAPACITY: usize = 16;

static CLIENTS: LazyLock<Mutex<Lru<ClientKey, Client>>> =
    LazyLock::new(|| Mutex::new(Lru::new(CLIENT_CACHE_CAPACITY)));

/// The shared client for `remote`'s settings, built on first use. Building one loads and parses
/// the platform's CA roots, which costs far more CPU than a no-op poll of a repository.
fn client_for(remote: &Remote) -> Result<Client, GitError> {
    let key = ClientKey::of(remote);
    // A poisoned lock only means another thread panicked mid-update: the map is still usable.
    if let Some(c) = CLIENTS.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(c);
    }
    let client = build_client(remote)?;
    CLIENTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, client.clone());
    Ok(client)
}

/// How long an idle pooled connection is kept for reuse by the next request to the same host.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// At most this many idle connections per host are kept.
const POOL_MAX_IDLE_PER_HOST: usize = 4;

fn build_client(remote: &Remote) -> Result<Client, GitError> {
    ensure_crypto_provider();
    let mut b = Client::builder()
        .user_agent(concat!("git/rflux-git-", env!("CARGO_PKG_VERSION")))
        .connect_timeout(remote.timeout)
        .timeout(remote.timeout)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(POOL_MAX_IDLE_PER_HOST);
    if let Some(ca) = &remote.tls.ca_pem {
        let certs = reqwest::Certificate::from_pem_bundle(ca.as_bytes())
            .map_err(|_| GitError::Tls("the CA bundle is not valid PEM".into()))?;
        if certs.is_empty() {
            return Err(GitError::Tls("the CA bundle holds no certificate".into()));
        }
        b = b.tls_certs_merge(certs);
    }
    match (&remote.tls.client_cert_pem, &remote.tls.client_key_pem) {
        (Some(cert), Some(key)) => {
            let mut pem = cert.clone().into_bytes();
            pem.push(b'\n');
            pem.extend_from_slice(key.as_bytes());
            let id = reqwest::Identity::from_pem(&pem).map_err(|_| {
                GitError::Tls("the client certificate or key is not valid PEM".into())
            })?;
            b = b.identity(id);
        }
        (None, None) => {}
        _ => {
            return Err(GitError::Config(
                "mTLS needs both a client certificate and a client key".into(),
            ));
        }
    }
    if let Some(p) = &remote.proxy {
        let proxy = reqwest::Proxy::all(p)
            .map_err(|_| GitError::Config(format!("invalid proxy URL {}", redact(p))))?;
        b = b.proxy(proxy);
    }
    b.build()
        .map_err(|e| GitError::Tls(format!("cannot build the HTTP client: {}", error_chain(&e))))
}

fn map_reqwest(e: reqwest::Error, timeout: Duration) -> GitError {
    if e.is_timeout() {
        return GitError::Timeout(timeout);
    }
    let e = e.without_url();
    let msg = error_chain(&e);
    let lower = msg.to_ascii_lowercase();
    if ["certificate", "tls", "handshake", "unknownissuer", "x509"]
        .iter()
        .any(|k| lower.contains(k))
    {
        GitError::Tls(msg)
    } else {
        GitError::Transport(msg)
    }
}

fn check_status(status: StatusCode, what: &str, url: &str) -> Result<(), GitError> {
    let url = redact(url);
    match status {
        s if s.is_success() => Ok(()),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            Err(GitError::Auth(format!("{what} {url}: HTTP {status}")))
        }
        StatusCode::NOT_FOUND => Err(GitError::NotFound(format!("{what} {url}: HTTP {status}"))),
        _ => Err(GitError::Transport(format!("{what} {url}: HTTP {status}"))),
    }
}

impl HttpConn {
    fn apply_auth(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, GitError> {
        Ok(match &self.auth {
            Auth::None => req,
            Auth::Basic { username, password } => req.basic_auth(username, Some(password)),
            Auth::Bearer(token) => req.bearer_auth(token),
            Auth::Ssh(_) => {
                return Err(GitError::Config(
                    "SSH credentials cannot be used with an HTTP(S) URL".into(),
                ));
            }
        })
    }

    /// A pkt-line reader over the body of `resp`, which may not exceed `max_bytes` (plus
    /// [`BACKSTOP_MARGIN`]).
    fn reader(
        &self,
        resp: reqwest::Response,
        max_bytes: u64,
        what: &'static str,
    ) -> BoxReader<'static> {
        let timeout = self.timeout;
        let body = stream(
            resp,
            max_bytes.saturating_add(BACKSTOP_MARGIN),
            what,
            move |e| map_reqwest(e, timeout),
            self.errors.clone(),
        );
        PktReader::with_limits(Box::new(body), (&self.limits).into())
    }

    /// The error behind `err` when it is a failed read of a response body.
    pub(crate) fn explain(&self, err: GitError) -> GitError {
        match err {
            GitError::Io { .. } => self.errors.take().unwrap_or(err),
            other => other,
        }
    }

    /// Connects and reads the advertisement.
    pub(crate) async fn open(
        remote: &Remote,
        url: &str,
    ) -> Result<(HttpConn, Advertisement), GitError> {
        let mut conn = HttpConn {
            client: client_for(remote)?,
            url: url.to_string(),
            auth: remote.auth.clone(),
            limits: remote.limits,
            timeout: remote.timeout,
            want_v2: remote.protocol == ProtocolVersion::V2,
            errors: ErrorSlot::default(),
        };
        let info = format!("{url}/info/refs?service=git-upload-pack");
        let mut req = conn.client.get(&info).header(header::ACCEPT, "*/*");
        if conn.want_v2 {
            req = req.header("Git-Protocol", "version=2");
        }
        let resp = conn
            .apply_auth(req)?
            .send()
            .await
            .map_err(|e| map_reqwest(e, conn.timeout))?;
        check_status(resp.status(), "GET", url)?;
        // Like git, POST to where the advertisement was finally served from
        // when the server redirected us (same scheme only: no downgrade).
        let final_url = resp.url().as_str();
        if let Some(base) = final_url
            .split('?')
            .next()
            .and_then(|u| u.strip_suffix("/info/refs"))
            && base != url
            && base.split("://").next() == url.split("://").next()
        {
            tracing::debug!(target: "rflux_git", "following redirect to {}", redact(base));
            conn.url = base.to_string();
        }
        let ctype = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        if !ctype.starts_with("application/x-git-upload-pack-advertisement") {
            return Err(GitError::protocol(format!(
                "{} is not a smart HTTP git server (content type {ctype:?}); dumb HTTP is not supported",
                redact(url)
            )));
        }
        // v0 answers start with "# service=git-upload-pack" and a flush, which
        // read_advertisement skips; v2 answers go straight to "version 2".
        let max = conn.limits.max_advertisement_bytes;
        let mut r = conn.reader(resp, max, "ref advertisement response");
        let adv = read_advertisement(&mut r)
            .await
            .map_err(|e| conn.explain(e))?;
        Ok((conn, adv))
    }

    /// Sends one request; the response body may not exceed `max_response` bytes.
    pub(crate) async fn post(
        &self,
        v2: bool,
        body: Vec<u8>,
        max_response: u64,
    ) -> Result<BoxReader<'static>, GitError> {
        let url = format!("{}/git-upload-pack", self.url);
        let mut req = self
            .client
            .post(&url)
            .header(
                header::CONTENT_TYPE,
                "application/x-git-upload-pack-request",
            )
            .header(header::ACCEPT, "application/x-git-upload-pack-result")
            .body(body);
        if v2 {
            req = req.header("Git-Protocol", "version=2");
        }
        let resp = self
            .apply_auth(req)?
            .send()
            .await
            .map_err(|e| map_reqwest(e, self.timeout))?;
        check_status(resp.status(), "POST", &self.url)?;
        Ok(self.reader(resp, max_response, "HTTP response"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn remote(timeout_s: u64) -> Remote {
        Remote::new("https://example.com/r.git").with_timeout(Duration::from_secs(timeout_s))
    }

    #[test]
    fn equal_settings_share_a_key_and_tls_or_proxy_settings_do_not() {
        let a = ClientKey::of(&remote(60));
        assert!(a == ClientKey::of(&remote(60)));
        // Per-request credentials do not make a new client.
        let with_auth = remote(60).with_auth(crate::Auth::Basic {
            username: "u".into(),
            password: "p".into(),
        });
        assert!(a == ClientKey::of(&with_auth));
        assert!(a != ClientKey::of(&remote(30)));
        let mut ca = remote(60);
        ca.tls.ca_pem = Some("pem".into());
        assert!(a != ClientKey::of(&ca));
        let mut proxied = remote(60);
        proxied.proxy = Some("http://proxy:3128".into());
        assert!(a != ClientKey::of(&proxied));
    }

    #[test]
    fn the_cache_drops_the_least_recently_used_client() {
        let mut cache = Lru::new(CLIENT_CACHE_CAPACITY);
        let client = build_client(&remote(1)).unwrap();
        let keys: Vec<ClientKey> = (0..=CLIENT_CACHE_CAPACITY as u64)
            .map(|i| ClientKey::of(&remote(i + 1)))
            .collect();
        for k in &keys[..CLIENT_CACHE_CAPACITY] {
            cache.insert(k.clone(), client.clone());
        }
        // Touch the oldest so that the second oldest goes first.
        assert!(cache.get(&keys[0]).is_some());
        cache.insert(keys[CLIENT_CACHE_CAPACITY].clone(), client.clone());
        assert_eq!(cache.len(), CLIENT_CACHE_CAPACITY);
        assert!(cache.get(&keys[0]).is_some());
        assert!(cache.get(&keys[1]).is_none());
        assert!(cache.get(&keys[CLIENT_CACHE_CAPACITY]).is_some());
        // Re-inserting a present key evicts nothing.
        cache.insert(keys[2].clone(), client);
        assert_eq!(cache.len(), CLIENT_CACHE_CAPACITY);
    }

    #[test]
    fn client_for_reuses_the_client_built_for_equal_settings() {
        let r = remote(77);
        let key = ClientKey::of(&r);
        client_for(&r).unwrap();
        let cached = |k: &ClientKey| CLIENTS.lock().unwrap().get(k).is_some();
        assert!(cached(&key));
        // The second call is served from the cache (the Lru itself is tested in rflux-core).
        client_for(&r).unwrap();
        assert!(cached(&key));
        // A bad CA bundle is an error and is not cached.
        let mut bad = remote(78);
        bad.tls.ca_pem = Some("not pem".into());
        assert!(matches!(client_for(&bad), Err(GitError::Tls(_))));
        assert!(!cached(&ClientKey::of(&bad)));
    }
}
