//! Where a repository is and how to reach it: URL, credentials, TLS material, timeout,
//! proxy, limits and protocol version.

use std::time::Duration;

use crate::limits::Limits;

/// SSH credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SshAuth {
    /// Private key (OpenSSH or PEM format).
    pub private_key_pem: String,
    /// Passphrase of the private key, if it is encrypted.
    pub passphrase: Option<String>,
    /// known_hosts content; host keys are always checked.
    pub known_hosts: String,
    /// Overrides the user of the URL.
    pub user: Option<String>,
}

impl std::fmt::Debug for SshAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshAuth")
            .field("private_key_pem", &"<redacted>")
            .field(
                "passphrase",
                &self.passphrase.as_ref().map(|_| "<redacted>"),
            )
            .field("known_hosts", &self.known_hosts)
            .field("user", &self.user)
            .finish()
    }
}

/// Credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Auth {
    #[default]
    None,
    /// HTTP basic auth.
    Basic { username: String, password: String },
    /// HTTP `Authorization: Bearer <token>`.
    Bearer(String),
    /// SSH key.
    Ssh(SshAuth),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Basic { username, .. } => write!(
                f,
                "Basic {{ username: {username:?}, password: <redacted> }}"
            ),
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Auth::Ssh(s) => s.fmt(f),
        }
    }
}

/// TLS material for HTTPS remotes (all PEM).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// Extra trusted CA certificates, added to the platform roots.
    pub ca_pem: Option<String>,
    /// Client certificate (chain) for mTLS.
    pub client_cert_pem: Option<String>,
    /// Client private key for mTLS.
    pub client_key_pem: Option<String>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca_pem", &self.ca_pem.is_some())
            .field("client_cert_pem", &self.client_cert_pem.is_some())
            .field(
                "client_key_pem",
                &self.client_key_pem.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Where and how to reach a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// `https://…`, `http://…`, `ssh://[user@]host[:port]/path`, `user@host:path` or `file://…`.
    pub url: String,
    pub auth: Auth,
    pub tls: TlsConfig,
    /// Bound on each operation (connect, ls-refs, fetch).
    pub timeout: Duration,
    /// HTTP(S) proxy URL.
    pub proxy: Option<String>,
    pub limits: Limits,
    /// Which protocol to ask for.
    pub protocol: ProtocolVersion,
}

/// The protocol version to request. Servers that do not speak v2 answer in
/// v0 anyway, so [`ProtocolVersion::V2`] always works.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProtocolVersion {
    /// Ask for v2 (`Git-Protocol: version=2`), accept v0/v1 answers.
    #[default]
    V2,
    /// Do not ask for v2 (plain v0 conversation).
    V0,
}

impl Remote {
    /// A remote with no credentials, a 60 s timeout and default limits.
    pub fn new(url: impl Into<String>) -> Self {
        Remote {
            url: url.into(),
            auth: Auth::None,
            tls: TlsConfig::default(),
            timeout: Duration::from_secs(60),
            proxy: None,
            limits: Limits::default(),
            protocol: ProtocolVersion::V2,
        }
    }

    pub fn with_auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    pub fn with_tls(mut self, tls: TlsConfig) -> Self {
        self.tls = tls;
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn with_proxy(mut self, proxy: impl Into<String>) -> Self {
        self.proxy = Some(proxy.into());
        self
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    pub fn with_protocol(mut self, protocol: ProtocolVersion) -> Self {
        self.protocol = protocol;
        self
    }
}
