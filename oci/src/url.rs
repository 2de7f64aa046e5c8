//! `spec.url` of an OCIRepository: `oci://<host[:port]>/<repository path>`, parsed the way
//! source-controller does it with go-containerregistry's `name.NewRepository` (and
//! `name.Insecure` when `spec.insecure`), plus the registry scheme heuristic of
//! go-containerregistry's `Registry.Scheme()` and `transport.Ping`.

use std::fmt;
use std::net::Ipv4Addr;

/// The prefix every OCIRepository URL carries.
pub const OCI_PREFIX: &str = "oci://";
/// Docker Hub's registry host, what go-containerregistry rewrites `docker.io` (and an absent
/// registry) to.
pub const DEFAULT_REGISTRY: &str = "index.docker.io";
const DEFAULT_REGISTRY_ALIAS: &str = "docker.io";
const DEFAULT_NAMESPACE: &str = "library";
const REPOSITORY_CHARS: &str = "abcdefghijklmnopqrstuvwxyz0123456789_-./";

/// Why a URL was refused. The messages are source-controller's (`URLInvalid`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("URL must be in format 'oci://<domain>/<org>/<repo>'")]
    MissingPrefix,
    /// The text after the first `:` of the repository part (Go's `strings.Split(...)[1]`).
    #[error("URL must not contain a tag; remove ':{0}'")]
    Tag(String),
    /// go-containerregistry's `ErrBadName` message.
    #[error("{0}")]
    BadName(String),
}

/// Which schemes a registry is reached with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// HTTPS only: every registry that is not covered by the heuristic below.
    HttpsOnly,
    /// HTTPS first, plain HTTP when HTTPS fails (go-containerregistry pings both, HTTP
    /// starting 300 ms after HTTPS or as soon as HTTPS failed; the first scheme whose
    /// `GET /v2/` answers 200 or 401 is used for everything after).
    HttpsThenHttp,
    /// Plain HTTP only. Never chosen by [`Repository::scheme_policy`] (go-containerregistry
    /// always tries HTTPS first, even with `name.Insecure`); available to callers and tests.
    HttpOnly,
}

/// A repository in a registry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Repository {
    /// `host[:port]` as written in the URL (`docker.io` and an implicit registry become
    /// [`DEFAULT_REGISTRY`]).
    pub registry: String,
    /// The repository path used in `/v2/<path>/…` (`library/` added for single-element
    /// Docker Hub names).
    pub path: String,
    /// `spec.insecure`: plain HTTP allowed (see [`Repository::scheme_policy`]).
    pub insecure: bool,
}

impl Repository {
    /// Parses an OCIRepository `spec.url` like source-controller's `parseRepository`.
    ///
    /// One deliberate difference: for `oci://host/app:1.0` Flux reports go-containerregistry's
    /// "repository can only contain the characters …" (its own tag check is unreachable);
    /// here the tag message the Flux code intends is given instead.
    pub fn parse_flux_url(url: &str, insecure: bool) -> Result<Repository, UrlError> {
        let name = url
            .strip_prefix(OCI_PREFIX)
            .ok_or(UrlError::MissingPrefix)?;
        Repository::parse(name, insecure)
    }

    /// Parses `[registry/]repository` like go-containerregistry's `name.NewRepository`.
    pub fn parse(name: &str, insecure: bool) -> Result<Repository, UrlError> {
        if name.is_empty() {
            return Err(UrlError::BadName(
                "a repository name must be specified".into(),
            ));
        }
        let (registry, repo) = match name.split_once('/') {
            // The first element is a registry only when it looks like a host: a '.' or a ':'.
            Some((first, rest)) if first.contains(['.', ':']) => (first, rest),
            _ => ("", name),
        };
        if repo.contains(':') && !repo.contains('@') {
            let tag = repo.split(':').nth(1).unwrap_or_default();
            return Err(UrlError::Tag(tag.to_string()));
        }
        check_repository(repo)?;
        if !valid_authority(registry) {
            return Err(UrlError::BadName(format!(
                "registries must be valid RFC 3986 URI authorities: {registry}"
            )));
        }
        let registry = match registry {
            "" | DEFAULT_REGISTRY_ALIAS => DEFAULT_REGISTRY,
            r => r,
        };
        let path = if !repo.contains('/') && registry == DEFAULT_REGISTRY {
            format!("{DEFAULT_NAMESPACE}/{repo}")
        } else {
            repo.to_string()
        };
        Ok(Repository {
            registry: registry.to_string(),
            path,
            insecure,
        })
    }

    /// The schemes to try, like go-containerregistry: `insecure`, and registries named
    /// `localhost:<port>`, `*.localhost[:port]`, anything containing `127.0.0.1` or `::1`, or an
    /// RFC 1918 IPv4 address, are tried over HTTPS and then plain HTTP; everything else is
    /// HTTPS only.
    pub fn scheme_policy(&self) -> Scheme {
        if self.insecure || prefers_http(&self.registry) {
            Scheme::HttpsThenHttp
        } else {
            Scheme::HttpsOnly
        }
    }

    /// The token scope for `action` (`pull`): `repository:<path>:<action>`.
    pub fn scope(&self, action: &str) -> String {
        format!("repository:{}:{action}", self.path)
    }
}

impl fmt::Display for Repository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.path)
    }
}

fn check_repository(repo: &str) -> Result<(), UrlError> {
    let n = repo.chars().count();
    if !(2..=255).contains(&n) {
        return Err(UrlError::BadName(format!(
            "repository must be between 2 and 255 characters in length: {repo}"
        )));
    }
    if repo.chars().any(|c| !REPOSITORY_CHARS.contains(c)) {
        return Err(UrlError::BadName(format!(
            "repository can only contain the characters `{REPOSITORY_CHARS}`: {repo}"
        )));
    }
    Ok(())
}

/// What Go's `url.Parse("//" + name).Host == name` accepts: no userinfo, path, query or
/// fragment, no percent escapes or control characters, host characters from RFC 3986's
/// reg-name/IP-literal sets, and an optional all-digit port.
fn valid_authority(name: &str) -> bool {
    if name.is_empty() {
        return true;
    }
    if name.bytes().any(|b| b < 0x20 || b == 0x7f) || name.contains(['/', '?', '#', '@', '%']) {
        return false;
    }
    let (host, port) = if name.starts_with('[') {
        match name.find(']') {
            Some(end) => name.split_at(end + 1),
            None => return false,
        }
    } else {
        match name.rfind(':') {
            Some(i) => name.split_at(i),
            None => (name, ""),
        }
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
    port_ok
        && host.chars().all(|c| {
            !c.is_ascii() || c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:[]<>\"".contains(c)
        })
}

/// go-containerregistry's `Registry.Scheme() == "http"` without `name.Insecure`.
fn prefers_http(registry: &str) -> bool {
    is_rfc1918(registry)
        || registry.starts_with("localhost:")
        || is_dot_localhost(registry)
        || registry.contains("127.0.0.1")
        || registry.contains("::1")
}

/// `.*\.localhost(?::\d{1,5})?$`
fn is_dot_localhost(registry: &str) -> bool {
    let host = match registry.rsplit_once(':') {
        Some((h, port))
            if (1..=5).contains(&port.len()) && port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            h
        }
        _ => registry,
    };
    host.ends_with(".localhost")
}

/// The text before the first ':' is an IPv4 address in 10/8, 172.16/12 or 192.168/16.
fn is_rfc1918(registry: &str) -> bool {
    let ip = registry.split(':').next().unwrap_or_default();
    ip.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_private())
}

#[cfg(test)]
mod tests;
