//! The registry client.
//!
//! # Auth flow (go-containerregistry's `transport.NewWithContext`)
//!
//! The first call pings `GET /v2/` without credentials ([`crate::url::Scheme`] decides the
//! schemes tried). A 200, or a 401 with a Basic (or no usable) challenge, puts the client in
//! Basic mode: every request to the registry carries the keychain's Basic credentials (or the
//! `registrytoken` as a Bearer token), none when anonymous. A 401 with a Bearer challenge puts
//! it in Bearer mode and fetches a token at once:
//!
//! - `registrytoken` credentials are the token;
//! - `identitytoken` credentials (or a `refresh_token` a token server returned earlier) are
//!   exchanged with an OAuth2 `POST` (`grant_type=refresh_token`, `service`, `scope`,
//!   `client_id`); a 404 there falls back to the GET below;
//! - otherwise `GET <realm>?scope=repository:<path>:pull&service=<service>` with the Basic
//!   credentials when there are any (anonymous otherwise).
//!
//! The token (`token`, or `access_token` when set) is cached in the client. Any later 401 with
//! a Bearer challenge adds the challenge's `scope`, fetches a new token and retries the request
//! once (in Basic mode too: some registries answer the ping with 200 and challenge later).
//!
//! # Realm rule
//!
//! The realm comes from the registry, so it is checked before anything is sent to it: only
//! `http` and `https`; `http` only when the registry itself answered over plain HTTP (so
//! credentials never go in clear text to a realm of an HTTPS registry); never a link-local or
//! unspecified IP literal (cloud metadata endpoints); a loopback or private IP literal only
//! when it is the registry's own `host:port` or the registry is itself local (a loopback or
//! private IP literal, `localhost`, `*.localhost`). go-containerregistry refuses every
//! loopback/private realm but the registry's own `host:port`; we allow a local registry's
//! token server on another local port (what test setups do).

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::OnceCell;

use crate::Limits;
use crate::auth::{Credentials, Keychain};
use crate::error::OciError;
use crate::transport::{self, TransportConfig};
use crate::url::Repository;

mod body;
mod pull;
mod session;
mod state;
mod tags;
mod token;

#[cfg(test)]
mod tests;

pub use tags::parse_link;

/// A client for one repository. Cheap to create (HTTP clients are shared per settings);
/// the ping result and the token are cached for its lifetime.
pub struct Client {
    repo: Repository,
    creds: Credentials,
    http: reqwest::Client,
    limits: Limits,
    timeout: Duration,
    blob_timeout: Duration,
    session: OnceCell<state::Session>,
    auth: tokio::sync::Mutex<state::AuthMode>,
    /// Strings that must never appear in an error message (passwords, tokens).
    secrets: Mutex<Vec<String>>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("repo", &self.repo)
            .field("creds", &self.creds)
            .field("limits", &self.limits)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Client {
    /// A client for `repo` with the credentials `keychain` resolves for it. Fails only on
    /// unusable TLS or proxy settings; no request is sent before the first call.
    pub fn new(
        repo: Repository,
        keychain: Keychain,
        cfg: TransportConfig,
        limits: Limits,
    ) -> Result<Client, OciError> {
        let creds = keychain.resolve_repository(&repo);
        Client::with_credentials(repo, creds, cfg, limits)
    }

    /// A client for `repo` with explicit credentials (`flux push --creds` style).
    pub fn with_credentials(
        repo: Repository,
        creds: Credentials,
        cfg: TransportConfig,
        limits: Limits,
    ) -> Result<Client, OciError> {
        let http = transport::client_for(&cfg)?;
        let mut secrets = creds.secrets();
        if let Some(pw) = cfg.proxy.as_ref().and_then(|p| p.password.clone()) {
            secrets.push(pw);
        }
        Ok(Client {
            repo,
            creds,
            http,
            limits,
            timeout: cfg.timeout,
            blob_timeout: cfg.blob_timeout.unwrap_or(cfg.timeout),
            session: OnceCell::new(),
            auth: tokio::sync::Mutex::new(state::AuthMode::Basic),
            secrets: Mutex::new(secrets),
        })
    }

    /// The repository this client pulls from.
    pub fn repository(&self) -> &Repository {
        &self.repo
    }

    /// The credentials in use (Debug output is redacted).
    pub fn credentials(&self) -> &Credentials {
        &self.creds
    }

    /// `<scheme>://<registry>` once the first request decided the scheme.
    pub fn base_url(&self) -> Option<&str> {
        self.session.get().map(|s| s.base.as_str())
    }

    /// `<base>/v2/<path>/<kind>/<reference>`.
    fn api_url(&self, base: &str, kind: &str, reference: &str) -> String {
        format!("{base}/v2/{}/{kind}/{reference}", self.repo.path)
    }
}
