//! Bearer tokens from the realm of a `WWW-Authenticate: Bearer` challenge (Docker's token
//! and OAuth2 flows), and the realm rule (see the module documentation of `client`).

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;

use super::Client;
use super::body::read_limited;
use super::session::{Bearer, Session, basic_value};
use crate::auth::Credentials;
use crate::error::OciError;
use crate::transport::{is_internal_ip_literal, is_link_local_ip_literal, map_reqwest};

/// `client_id` of the OAuth2 flow.
const CLIENT_ID: &str = "rflux";

#[derive(Deserialize)]
struct TokenResponse {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    refresh_token: Option<String>,
}

/// `scheme://host[:port]/path` of a URL: what error messages show of a realm.
fn shown(url: &Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.set_fragment(None);
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.to_string()
}

/// The registry is itself a local address: a loopback or private IP literal, `localhost` or
/// `*.localhost`.
fn registry_is_local(registry: &str) -> bool {
    Url::parse(&format!("http://{registry}/"))
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .is_some_and(|h| {
            h == "localhost" || h.ends_with(".localhost") || is_internal_ip_literal(&h)
        })
}

impl Client {
    /// Checks the realm a registry asked us to get a token from.
    pub(super) fn check_realm(&self, session: &Session, realm: &str) -> Result<Url, OciError> {
        let url = Url::parse(realm).map_err(|_| {
            OciError::Auth(format!(
                "invalid realm in www-authenticate: '{}'",
                self.scrub(&realm.chars().take(120).collect::<String>())
            ))
        })?;
        let refuse = |why: &str| {
            Err(OciError::Auth(format!(
                "invalid realm in www-authenticate: {why}: {}",
                shown(&url)
            )))
        };
        match url.scheme() {
            "https" => {}
            "http" if session.plain_http => {}
            "http" => return refuse("plain http realm for a registry served over https"),
            _ => return refuse("the scheme must be https (or http for a plain-http registry)"),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return refuse("a realm may not carry credentials");
        }
        let Some(host) = url.host_str() else {
            return refuse("no host");
        };
        let host_port = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        if host_port == self.repo.registry {
            return Ok(url);
        }
        if is_link_local_ip_literal(host) {
            return refuse("link-local or unspecified address");
        }
        if is_internal_ip_literal(host) && !registry_is_local(&self.repo.registry) {
            return refuse("private or loopback address for a public registry");
        }
        Ok(url)
    }

    /// Gets a token for `b`'s scopes and stores it (and any refresh token) in `b`.
    pub(super) async fn fetch_token(
        &self,
        session: &Session,
        b: &mut Bearer,
    ) -> Result<(), OciError> {
        let realm = self.check_realm(session, &b.realm)?;
        if let Credentials::RegistryToken(t) = &self.creds {
            b.token = Some(t.clone());
            return Ok(());
        }
        let identity = b.refresh_token.clone().or(match &self.creds {
            Credentials::IdentityToken(t) => Some(t.clone()),
            _ => None,
        });
        let body = match identity {
            Some(id) => match self.token_oauth(&realm, b, &id).await {
                // Not every token server implements OAuth2: fall back to the GET flow.
                Err(OciError::NotFound { .. }) => self.token_get(&realm, b).await?,
                other => other?,
            },
            None => self.token_get(&realm, b).await?,
        };
        // serde's message could quote the body (a token): keep it out.
        let parsed: TokenResponse = serde_json::from_slice(&body).map_err(|_| {
            OciError::Json(format!(
                "the token response of {} is not valid JSON",
                shown(&realm)
            ))
        })?;
        let token = parsed
            .access_token
            .filter(|t| !t.is_empty())
            .or(parsed.token.filter(|t| !t.is_empty()))
            .ok_or_else(|| {
                OciError::Auth(format!(
                    "no token in bearer response from {}",
                    shown(&realm)
                ))
            })?;
        self.add_secret(&token);
        if let Some(rt) = parsed.refresh_token.filter(|t| !t.is_empty()) {
            self.add_secret(&rt);
            b.refresh_token = Some(rt);
        }
        b.token = Some(token);
        Ok(())
    }

    /// `GET <realm>?scope=…&service=…`, with Basic credentials when there are any.
    async fn token_get(&self, realm: &Url, b: &Bearer) -> Result<Vec<u8>, OciError> {
        let mut url = realm.clone();
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(k, _)| k != "scope" && k != "service")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        {
            let mut q = url.query_pairs_mut();
            q.clear();
            for (k, v) in &kept {
                q.append_pair(k, v);
            }
            for s in &b.scopes {
                q.append_pair("scope", s);
            }
            q.append_pair("service", b.service.as_deref().unwrap_or(""));
        }
        let mut req = self.http.get(url.clone()).timeout(self.timeout);
        if let Credentials::Basic { username, password } = &self.creds
            && let Ok(mut v) =
                HeaderValue::from_str(&format!("Basic {}", basic_value(username, password)))
        {
            v.set_sensitive(true);
            req = req.header(AUTHORIZATION, v);
        }
        self.token_answer(req, &url, "GET").await
    }

    /// The OAuth2 refresh-token grant: `POST <realm>` with a form.
    async fn token_oauth(
        &self,
        realm: &Url,
        b: &Bearer,
        refresh_token: &str,
    ) -> Result<Vec<u8>, OciError> {
        let mut form =
            Url::parse("http://form.invalid/").map_err(|e| OciError::Config(e.to_string()))?;
        {
            let mut q = form.query_pairs_mut();
            q.append_pair("scope", &b.scopes.join(" "));
            if let Some(s) = &b.service {
                q.append_pair("service", s);
            }
            q.append_pair("client_id", CLIENT_ID);
            q.append_pair("grant_type", "refresh_token");
            q.append_pair("refresh_token", refresh_token);
        }
        let body = form.query().unwrap_or_default().to_string();
        let req = self
            .http
            .request(Method::POST, realm.clone())
            .timeout(self.timeout)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body);
        self.token_answer(req, realm, "POST").await
    }

    async fn token_answer(
        &self,
        req: reqwest::RequestBuilder,
        url: &Url,
        method: &str,
    ) -> Result<Vec<u8>, OciError> {
        let what = format!("{method} {}", shown(url));
        let resp = req.send().await.map_err(|e| map_reqwest(e, &what))?;
        if resp.status() != StatusCode::OK {
            return Err(self.status_error(resp, &shown(url), method).await);
        }
        read_limited(resp, self.limits.max_token_bytes, "token response", &what).await
    }
}
