//! The HTTP(S) client a [`crate::client::Client`] talks through: TLS (the platform's roots
//! plus an optional CA, an optional client certificate for mTLS, or no verification with
//! `insecure` and no CA), an optional proxy, timeouts, and a redirect policy that refuses to
//! be sent to private addresses. Clients with equal settings are shared (building one parses
//! the platform's CA roots).

use std::fmt;
use std::net::IpAddr;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use rflux_core::{Lru, error_chain};

use crate::error::OciError;

/// `proxySecretRef`: `address` plus optional credentials.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Proxy {
    pub address: String,
    pub username: Option<String>,
    pub password: Option<String>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("address", &redact_userinfo(&self.address))
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// How to reach the registry.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TransportConfig {
    /// PEM CA bundle ADDED to the platform roots (`certSecretRef` `ca.crt`).
    pub ca_pem: Option<String>,
    /// PEM client certificate for mTLS (`tls.crt`), with `client_key_pem`.
    pub client_cert_pem: Option<String>,
    /// PEM private key of the client certificate (`tls.key`).
    pub client_key_pem: Option<String>,
    /// Proxy for every request (replaces `HTTPS_PROXY` and friends, which apply otherwise).
    pub proxy: Option<Proxy>,
    /// `spec.insecure`: with no `ca_pem`, the server certificate is not verified.
    pub insecure: bool,
    /// Bounds connecting, every request without a body to stream (ping, token, HEAD,
    /// manifests, tag pages), and every pause while a blob streams.
    pub timeout: Duration,
    /// Bounds one whole blob download; `None` means `timeout`.
    pub blob_timeout: Option<Duration>,
    /// The `User-Agent` header (Flux sends `flux/v2`).
    pub user_agent: String,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            ca_pem: None,
            client_cert_pem: None,
            client_key_pem: None,
            proxy: None,
            insecure: false,
            timeout: Duration::from_secs(60),
            blob_timeout: None,
            user_agent: "flux/v2".into(),
        }
    }
}

impl fmt::Debug for TransportConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportConfig")
            .field("ca_pem", &self.ca_pem.as_ref().map(|_| "<pem>"))
            .field(
                "client_cert_pem",
                &self.client_cert_pem.as_ref().map(|_| "<pem>"),
            )
            .field(
                "client_key_pem",
                &self.client_key_pem.as_ref().map(|_| "<redacted>"),
            )
            .field("proxy", &self.proxy)
            .field("insecure", &self.insecure)
            .field("timeout", &self.timeout)
            .field("blob_timeout", &self.blob_timeout)
            .field("user_agent", &self.user_agent)
            .finish()
    }
}

/// Installs the ring provider as rustls' process default unless one is set.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer is fine: a provider is set either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// How many distinct settings keep a client; the least recently used is dropped beyond that.
const CLIENT_CACHE_CAPACITY: usize = 16;
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
const POOL_MAX_IDLE_PER_HOST: usize = 4;
/// Redirects followed per request (Go's default).
const MAX_REDIRECTS: usize = 10;

static CLIENTS: LazyLock<Mutex<Lru<TransportConfig, reqwest::Client>>> =
    LazyLock::new(|| Mutex::new(Lru::new(CLIENT_CACHE_CAPACITY)));

/// The shared client for `cfg`, built on first use.
pub(crate) fn client_for(cfg: &TransportConfig) -> Result<reqwest::Client, OciError> {
    // A poisoned lock only means another thread panicked mid-update: the map is still usable.
    if let Some(c) = CLIENTS.lock().unwrap_or_else(|e| e.into_inner()).get(cfg) {
        return Ok(c);
    }
    let client = build_client(cfg)?;
    CLIENTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(cfg.clone(), client.clone());
    Ok(client)
}

fn build_client(cfg: &TransportConfig) -> Result<reqwest::Client, OciError> {
    ensure_crypto_provider();
    let mut b = reqwest::Client::builder()
        .user_agent(cfg.user_agent.clone())
        .connect_timeout(cfg.timeout)
        .read_timeout(cfg.timeout)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(POOL_MAX_IDLE_PER_HOST)
        .redirect(redirect_policy());
    if let Some(ca) = &cfg.ca_pem {
        let certs = reqwest::Certificate::from_pem_bundle(ca.as_bytes())
            .map_err(|_| OciError::Tls("the CA bundle is not valid PEM".into()))?;
        if certs.is_empty() {
            return Err(OciError::Tls("the CA bundle holds no certificate".into()));
        }
        b = b.tls_certs_merge(certs);
    } else if cfg.insecure {
        b = b.tls_danger_accept_invalid_certs(true);
    }
    match (&cfg.client_cert_pem, &cfg.client_key_pem) {
        (Some(cert), Some(key)) => {
            let mut pem = cert.clone().into_bytes();
            pem.push(b'\n');
            pem.extend_from_slice(key.as_bytes());
            let id = reqwest::Identity::from_pem(&pem).map_err(|_| {
                OciError::Tls("the client certificate or key is not valid PEM".into())
            })?;
            b = b.identity(id);
        }
        (None, None) => {}
        _ => {
            return Err(OciError::Config(
                "mTLS needs both a client certificate and a client key".into(),
            ));
        }
    }
    if let Some(p) = &cfg.proxy {
        let mut proxy = reqwest::Proxy::all(&p.address).map_err(|_| {
            OciError::Config(format!(
                "invalid proxy URL '{}'",
                redact_userinfo(&p.address)
            ))
        })?;
        if let Some(user) = &p.username {
            proxy = proxy.basic_auth(user, p.password.as_deref().unwrap_or(""));
        }
        b = b.proxy(proxy);
    }
    b.build()
        .map_err(|e| OciError::Tls(format!("cannot build the HTTP client: {}", error_chain(&e))))
}

/// Follows at most [`MAX_REDIRECTS`] redirects, never from one host to an IP literal of
/// another host in a loopback, private, link-local or unspecified range (go-containerregistry's
/// `checkRedirectSSRF`). reqwest drops `Authorization` when the host changes.
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error("stopped after 10 redirects");
        }
        let origin = attempt
            .previous()
            .first()
            .and_then(|u| u.host_str())
            .map(str::to_string);
        let dest = attempt.url().host_str().map(str::to_string);
        match (origin, dest) {
            (Some(o), Some(d)) if o != d && is_internal_ip_literal(&d) => {
                attempt.error("redirect to a private or link-local address refused")
            }
            _ => attempt.follow(),
        }
    })
}

/// `host` (as in a URL, IPv6 in brackets) is an IP literal in a loopback, private (RFC 1918,
/// IPv6 ULA), link-local or unspecified range.
pub(crate) fn is_internal_ip_literal(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    match h.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => {
            ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified()
        }
        Ok(IpAddr::V6(ip)) => {
            ip.is_loopback()
                || ip.is_unspecified()
                || ip.is_unique_local()
                || ip.is_unicast_link_local()
                || (ip.segments()[0] & 0xff0f) == 0xff02
        }
        Err(_) => false,
    }
}

/// `host` is a link-local or unspecified IP literal (cloud metadata endpoints and the like).
pub(crate) fn is_link_local_ip_literal(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    match h.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => ip.is_link_local() || ip.is_unspecified(),
        Ok(IpAddr::V6(ip)) => ip.is_unicast_link_local() || ip.is_unspecified(),
        Err(_) => false,
    }
}

/// `scheme://user:pass@host` → `scheme://host`.
pub(crate) fn redact_userinfo(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
                None => url.to_string(),
            }
        }
        None => url.to_string(),
    }
}

/// Maps a reqwest failure of `what` (e.g. `GET https://host/v2/`) to an [`OciError`].
pub(crate) fn map_reqwest(e: reqwest::Error, what: &str) -> OciError {
    if e.is_timeout() {
        return OciError::Timeout {
            what: what.to_string(),
        };
    }
    let e = e.without_url();
    let msg = error_chain(&e);
    let lower = msg.to_ascii_lowercase();
    if [
        "certificate",
        "tls",
        "handshake",
        "unknownissuer",
        "x509",
        "ssl",
    ]
    .iter()
    .any(|k| lower.contains(k))
    {
        OciError::Tls(format!("{what}: {msg}"))
    } else {
        OciError::Transport(format!("{what}: {msg}"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn equal_settings_share_a_client_and_tls_settings_do_not() {
        let a = TransportConfig::default();
        let mut b = a.clone();
        assert!(a == b);
        b.insecure = true;
        assert!(a != b);
        let mut cache = Lru::new(CLIENT_CACHE_CAPACITY);
        let client = build_client(&a).unwrap();
        for i in 0..=CLIENT_CACHE_CAPACITY as u64 {
            let mut k = a.clone();
            k.timeout = Duration::from_secs(i + 1);
            cache.insert(k, client.clone());
        }
        assert_eq!(cache.len(), CLIENT_CACHE_CAPACITY);
        // The first inserted is the one that went.
        let mut first = a.clone();
        first.timeout = Duration::from_secs(1);
        assert!(cache.get(&first).is_none());
    }

    #[test]
    fn bad_tls_material_and_half_mtls_are_refused() {
        let cfg = TransportConfig {
            ca_pem: Some("not pem".into()),
            ..Default::default()
        };
        assert!(matches!(build_client(&cfg), Err(OciError::Tls(_))));
        let cfg = TransportConfig {
            client_cert_pem: Some("x".into()),
            ..Default::default()
        };
        assert!(matches!(build_client(&cfg), Err(OciError::Config(_))));
        let cfg = TransportConfig {
            proxy: Some(Proxy {
                address: "http://user:pw@[bad".into(),
                username: None,
                password: None,
            }),
            ..Default::default()
        };
        let e = build_client(&cfg).unwrap_err().to_string();
        assert!(!e.contains("pw"), "{e}");
    }

    #[test]
    fn debug_output_hides_keys_and_proxy_passwords() {
        let cfg = TransportConfig {
            client_key_pem: Some("-----BEGIN PRIVATE KEY----- secretkey".into()),
            proxy: Some(Proxy {
                address: "http://u:inline-pw@proxy:3128".into(),
                username: Some("u".into()),
                password: Some("proxy-pw".into()),
            }),
            ..Default::default()
        };
        let s = format!("{cfg:?}");
        for secret in ["secretkey", "inline-pw", "proxy-pw"] {
            assert!(!s.contains(secret), "{s}");
        }
        assert!(s.contains("proxy:3128"));
    }

    #[test]
    fn internal_addresses_are_recognised() {
        for h in [
            "127.0.0.1",
            "10.0.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "[::1]",
            "[fd00:ec2::254]",
            "[fe80::1]",
        ] {
            assert!(is_internal_ip_literal(h), "{h}");
        }
        for h in ["8.8.8.8", "ghcr.io", "[2001:db8::1]", "localhost"] {
            assert!(!is_internal_ip_literal(h), "{h}");
        }
        assert!(is_link_local_ip_literal("169.254.169.254"));
        assert!(!is_link_local_ip_literal("127.0.0.1"));
        assert_eq!(redact_userinfo("http://u:p@h:1/x?y"), "http://h:1/x?y");
        assert_eq!(redact_userinfo("http://h/x@y"), "http://h/x@y");
    }
}
