//! The ping that picks the scheme and the auth mode, and sending a request with the
//! credentials of that mode (see the module documentation of `client`).

use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue};
use reqwest::{Method, Response, StatusCode};

use super::Client;
use super::body::discard;
pub(super) use super::state::{AuthMode, Bearer, Session};
use crate::auth::Credentials;
use crate::challenge::{self, Challenge};
use crate::error::OciError;
use crate::transport::map_reqwest;
use crate::url::Scheme;

/// How long HTTPS has alone before plain HTTP is tried in parallel (go-containerregistry).
const FALLBACK_DELAY: Duration = Duration::from_millis(300);
/// Scopes kept for token requests (each 401 may add one).
const MAX_SCOPES: usize = 8;

struct Ping {
    session: Session,
    challenge: Option<Challenge>,
}

impl Client {
    /// The session, pinging the registry on first use.
    pub(super) async fn session(&self) -> Result<&Session, OciError> {
        self.session.get_or_try_init(|| self.start_session()).await
    }

    async fn start_session(&self) -> Result<Session, OciError> {
        let ping = match self.repo.scheme_policy() {
            Scheme::HttpsOnly => self.ping("https").await?,
            Scheme::HttpOnly => self.ping("http").await?,
            Scheme::HttpsThenHttp => self.ping_with_fallback().await?,
        };
        if let Some(c) = ping.challenge.filter(|c| c.scheme == "bearer") {
            let mut bearer = Bearer::from_challenge(&c, self.repo.scope("pull"))?;
            self.fetch_token(&ping.session, &mut bearer).await?;
            *self.auth.lock().await = AuthMode::Bearer(bearer);
        }
        tracing::debug!(target: "rflux_oci", base = %ping.session.base, "registry session started");
        Ok(ping.session)
    }

    /// `GET <scheme>://<registry>/v2/` without credentials: 200 and 401 are answers, anything
    /// else is an error.
    async fn ping(&self, scheme: &str) -> Result<Ping, OciError> {
        let url = format!("{scheme}://{}/v2/", self.repo.registry);
        let what = format!("GET {url}");
        let resp = self
            .http
            .get(&url)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| map_reqwest(e, &what))?;
        // A redirect may have changed the scheme (go-containerregistry looks at the last URL).
        let plain_http = resp.url().scheme() == "http";
        let session = Session {
            base: format!(
                "{}://{}",
                if plain_http { "http" } else { "https" },
                self.repo.registry
            ),
            plain_http,
        };
        match resp.status() {
            StatusCode::OK => {
                discard(resp, self.limits.max_error_body).await;
                Ok(Ping {
                    session,
                    challenge: None,
                })
            }
            StatusCode::UNAUTHORIZED => {
                let all = challenge::from_headers(resp.headers());
                let challenge = challenge::pick(&all).cloned();
                discard(resp, self.limits.max_error_body).await;
                Ok(Ping { session, challenge })
            }
            _ => Err(self.status_error(resp, &url, "GET").await),
        }
    }

    /// HTTPS, and plain HTTP once HTTPS failed or took longer than [`FALLBACK_DELAY`]; the
    /// first answer wins.
    async fn ping_with_fallback(&self) -> Result<Ping, OciError> {
        let https = self.ping("https");
        tokio::pin!(https);
        let early = tokio::select! {
            r = &mut https => Some(r),
            _ = tokio::time::sleep(FALLBACK_DELAY) => None,
        };
        let https_err = match early {
            Some(Ok(p)) => return Ok(p),
            Some(Err(e)) => e,
            None => {
                let http = self.ping("http");
                tokio::pin!(http);
                let (mut https_err, mut http_err) = (None, None);
                loop {
                    tokio::select! {
                        r = &mut https, if https_err.is_none() => match r {
                            Ok(p) => return Ok(p),
                            Err(e) => https_err = Some(e),
                        },
                        r = &mut http, if http_err.is_none() => match r {
                            Ok(p) => return Ok(p),
                            Err(e) => http_err = Some(e),
                        },
                    }
                    if let (Some(a), Some(b)) = (&https_err, &http_err) {
                        return Err(both_failed(a.clone(), b.clone()));
                    }
                }
            }
        };
        match self.ping("http").await {
            Ok(p) => Ok(p),
            Err(e) => Err(both_failed(https_err, e)),
        }
    }

    /// The `Authorization` header of the current mode.
    async fn authorization(&self) -> Option<HeaderValue> {
        let value = match &*self.auth.lock().await {
            AuthMode::Bearer(b) => b.token.as_ref().map(|t| format!("Bearer {t}")),
            AuthMode::Basic => match &self.creds {
                Credentials::Basic { username, password } => {
                    Some(format!("Basic {}", basic_value(username, password)))
                }
                Credentials::RegistryToken(t) => Some(format!("Bearer {t}")),
                Credentials::Anonymous | Credentials::IdentityToken(_) => None,
            },
        }?;
        let mut v = HeaderValue::from_str(&value).ok()?;
        v.set_sensitive(true);
        Some(v)
    }

    async fn send_once(
        &self,
        method: &Method,
        url: &str,
        accept: Option<&str>,
        timeout: Duration,
    ) -> Result<Response, OciError> {
        let what = format!("{method} {url}");
        let mut req = self.http.request(method.clone(), url).timeout(timeout);
        if let Some(a) = accept {
            req = req.header(ACCEPT, a);
        }
        if let Some(h) = self.authorization().await {
            req = req.header(AUTHORIZATION, h);
        }
        req.send().await.map_err(|e| map_reqwest(e, &what))
    }

    /// Sends a request to the registry (`url` under the session's base) with the current
    /// credentials; a 401 with a Bearer challenge refreshes the token and retries once. The
    /// status is not checked.
    pub(super) async fn send(
        &self,
        method: Method,
        url: &str,
        accept: Option<&str>,
        timeout: Duration,
    ) -> Result<Response, OciError> {
        let session = self.session().await?;
        let resp = self.send_once(&method, url, accept, timeout).await?;
        if resp.status() != StatusCode::UNAUTHORIZED {
            return Ok(resp);
        }
        let challenges = challenge::from_headers(resp.headers());
        let Some(bearer) = challenges.into_iter().find(|c| c.scheme == "bearer") else {
            return Ok(resp);
        };
        discard(resp, self.limits.max_error_body).await;
        {
            let mut auth = self.auth.lock().await;
            match &mut *auth {
                AuthMode::Bearer(b) => {
                    if let Some(scope) = bearer.param("scope")
                        && !b.scopes.iter().any(|s| s == scope)
                    {
                        b.scopes.insert(0, scope.to_string());
                        b.scopes.truncate(MAX_SCOPES);
                    }
                    self.fetch_token(session, b).await?;
                }
                AuthMode::Basic => {
                    let mut b = Bearer::from_challenge(&bearer, self.repo.scope("pull"))?;
                    self.fetch_token(session, &mut b).await?;
                    *auth = AuthMode::Bearer(b);
                }
            }
        }
        self.send_once(&method, url, accept, timeout).await
    }

    /// The base URL of the session (pinging first if needed).
    pub(super) async fn base(&self) -> Result<String, OciError> {
        Ok(self.session().await?.base.clone())
    }
}

impl Bearer {
    fn from_challenge(c: &Challenge, pull_scope: String) -> Result<Bearer, OciError> {
        let realm = c
            .param("realm")
            .ok_or_else(|| OciError::Auth("malformed www-authenticate, missing realm".into()))?;
        let mut scopes = vec![pull_scope];
        if let Some(s) = c.param("scope")
            && !scopes.iter().any(|x| x == s)
        {
            scopes.insert(0, s.to_string());
        }
        Ok(Bearer {
            realm: realm.to_string(),
            service: c.param("service").map(str::to_string),
            scopes,
            token: None,
            refresh_token: None,
        })
    }
}

pub(super) fn basic_value(username: &str, password: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
}

/// Both schemes failed. A certificate problem over HTTPS is the story (the HTTP answer of a
/// TLS-only server is just "400 client sent an HTTP request to an HTTPS server"); otherwise an
/// HTTP-level answer (a status) says more than a connection error; two connection errors are
/// reported together.
fn both_failed(https: OciError, http: OciError) -> OciError {
    if let OciError::Tls(m) = &https
        && m.to_ascii_lowercase().contains("certificate")
    {
        return OciError::Tls(format!("{m}; {http}"));
    }
    let connection_level = |e: &OciError| {
        matches!(
            e,
            OciError::Transport(_) | OciError::Tls(_) | OciError::Timeout { .. }
        )
    };
    match (connection_level(&https), connection_level(&http)) {
        (_, false) => http,
        (false, true) => https,
        (true, true) => match (&https, &http) {
            (OciError::Timeout { what: a }, OciError::Timeout { what: b }) => OciError::Timeout {
                what: format!("{a} and {b}"),
            },
            _ => OciError::Transport(format!("{https}; {http}")),
        },
    }
}
