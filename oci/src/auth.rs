//! Registry credentials from image pull secrets, matched like go-containerregistry's
//! Kubernetes keychain (`pkg/authn/kubernetes`, what source-controller's `k8schain` uses).
//!
//! Matching: every `auths` key becomes a "glob URL": a scheme (`https://`, `http://`) is
//! dropped, a `/v1/` or `/v2/` path prefix counts as no path (`https://index.docker.io/v1/` is
//! the host `index.docker.io`). A key matches the target `<registry>/<repository>` when the
//! ports are equal, the hosts have the same number of dot-separated labels, each label matches
//! as a `filepath.Match` glob (`*.example.com`), and the key's path is a string prefix of the
//! target's path. Keys are tried from the lexically greatest down (longer, more specific keys
//! first); the first matching key's first entry wins, even when it holds no usable credential.
//! `docker.io` therefore does NOT match `index.docker.io` (three labels against two), exactly
//! like Flux.
//!
//! Not reproduced: the controller's own `~/.docker/config.json` and the cloud credential
//! helpers that `k8schain` consults after the pull secrets.

use std::fmt;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::{Map, Value};

use crate::url::Repository;

mod glob;

/// The credential used for one registry.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum Credentials {
    /// No credential: requests (and token requests) carry no `Authorization`.
    #[default]
    Anonymous,
    /// `username`/`password` (or the `auth` field, which wins): sent as Basic auth to the
    /// registry and to its token server.
    Basic { username: String, password: String },
    /// `identitytoken`: exchanged at the token server with the OAuth2 refresh-token grant.
    IdentityToken(String),
    /// `registrytoken`: sent as is as the Bearer token.
    RegistryToken(String),
}

impl Credentials {
    /// True for [`Credentials::Anonymous`].
    pub fn is_anonymous(&self) -> bool {
        matches!(self, Credentials::Anonymous)
    }

    /// The secret strings of this credential (to keep them out of error messages).
    pub(crate) fn secrets(&self) -> Vec<String> {
        match self {
            Credentials::Anonymous => Vec::new(),
            Credentials::Basic { username, password } => {
                let b64 = base64::engine::general_purpose::STANDARD
                    .encode(format!("{username}:{password}"));
                vec![password.clone(), b64]
            }
            Credentials::IdentityToken(t) | Credentials::RegistryToken(t) => vec![t.clone()],
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Anonymous => f.write_str("Anonymous"),
            Credentials::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            Credentials::IdentityToken(_) => f.write_str("IdentityToken(<redacted>)"),
            Credentials::RegistryToken(_) => f.write_str("RegistryToken(<redacted>)"),
        }
    }
}

/// A pull secret that does not decode. The message never contains a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KeychainError(pub String);

/// Credentials from image pull secrets.
#[derive(Clone, Default)]
pub struct Keychain {
    /// How many pull secrets went in: Flux's "anonymous keychain" is the one built from none.
    sources: usize,
    /// `(key, credentials)` in the order they were read.
    entries: Vec<(String, Credentials)>,
}

impl fmt::Debug for Keychain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&str> = self.entries.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Keychain")
            .field("sources", &self.sources)
            .field("keys", &keys)
            .finish()
    }
}

impl Keychain {
    /// The keychain of an object without pull secrets.
    pub fn anonymous() -> Keychain {
        Keychain::default()
    }

    /// A `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`:
    /// `{"auths": {"<registry>": {...}}}`. Empty data is a pull secret without entries.
    pub fn from_dockerconfigjson(data: &[u8]) -> Result<Keychain, KeychainError> {
        let mut k = Keychain {
            sources: 1,
            entries: Vec::new(),
        };
        if data.is_empty() {
            return Ok(k);
        }
        let doc = parse_json(data)?;
        let auths = match &doc {
            Value::Null => None,
            Value::Object(o) => field(o, "auths"),
            _ => return Err(KeychainError("docker config JSON is not an object".into())),
        };
        if let Some(auths) = auths {
            k.read_auths(auths)?;
        }
        Ok(k)
    }

    /// A `kubernetes.io/dockercfg` Secret's `.dockercfg`: `{"<registry>": {...}}`.
    pub fn from_dockercfg(data: &[u8]) -> Result<Keychain, KeychainError> {
        let mut k = Keychain {
            sources: 1,
            entries: Vec::new(),
        };
        if data.is_empty() {
            return Ok(k);
        }
        k.read_auths(&parse_json(data)?)?;
        Ok(k)
    }

    /// Adds `other`'s pull secrets after this one's (for an equal key, earlier entries win).
    pub fn extend(&mut self, other: Keychain) {
        self.sources += other.sources;
        self.entries.extend(other.entries);
    }

    /// True when no pull secret went in (Flux then may use the cloud `provider` login).
    pub fn is_anonymous(&self) -> bool {
        self.sources == 0
    }

    /// How many registry entries the keychain holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the keychain holds no registry entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The credentials for `target`: `<registry>/<repository path>` (a bare registry matches
    /// only keys without a path). See the module documentation for the rules.
    pub fn resolve(&self, target: &str) -> Credentials {
        let Some(target) = SchemelessUrl::parse(target) else {
            return Credentials::Anonymous;
        };
        let mut keys: Vec<&str> = self.entries.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        keys.iter()
            .rev()
            .find(|k| SchemelessUrl::parse(k).is_some_and(|g| g.matches(&target)))
            .and_then(|key| self.entries.iter().find(|(k, _)| k == key))
            .map(|(_, c)| c.clone())
            .unwrap_or_default()
    }

    /// [`Keychain::resolve`] for a repository.
    pub fn resolve_repository(&self, repo: &Repository) -> Credentials {
        self.resolve(&repo.to_string())
    }

    fn read_auths(&mut self, auths: &Value) -> Result<(), KeychainError> {
        let auths = match auths {
            Value::Null => return Ok(()),
            Value::Object(o) => o,
            _ => return Err(KeychainError("'auths' is not an object".into())),
        };
        for (registry, entry) in auths {
            let key = keyring_key(registry)?;
            let creds = credentials_of(registry, entry)?;
            self.entries.push((key, creds));
        }
        Ok(())
    }
}

fn parse_json(data: &[u8]) -> Result<Value, KeychainError> {
    serde_json::from_slice(data)
        .map_err(|e| KeychainError(format!("invalid docker config JSON: {}", json_position(&e))))
}

/// Where a JSON error is, without the error text (which may quote a secret).
fn json_position(e: &serde_json::Error) -> String {
    format!("syntax error at line {} column {}", e.line(), e.column())
}

/// The value of `name` in `o`, matched like Go's encoding/json: case-insensitively, the
/// last matching key winning.
fn field<'a>(o: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    o.iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
        .next_back()
}

fn string_field(
    o: &Map<String, Value>,
    name: &str,
    registry: &str,
) -> Result<String, KeychainError> {
    match field(o, name) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(KeychainError(format!(
            "entry {registry:?}: field '{name}' is not a string"
        ))),
    }
}

/// One `auths` entry, like go-containerregistry's `AuthConfig.UnmarshalJSON`: a non-empty
/// `auth` (base64 `user:password`) replaces `username`/`password`.
fn credentials_of(registry: &str, entry: &Value) -> Result<Credentials, KeychainError> {
    let o = match entry {
        Value::Null => return Ok(Credentials::Anonymous),
        Value::Object(o) => o,
        _ => {
            return Err(KeychainError(format!(
                "entry {registry:?} is not an object"
            )));
        }
    };
    let mut username = string_field(o, "username", registry)?;
    let mut password = string_field(o, "password", registry)?;
    let auth = string_field(o, "auth", registry)?;
    let identity = string_field(o, "identitytoken", registry)?;
    let registry_token = string_field(o, "registrytoken", registry)?;
    if !auth.is_empty() {
        (username, password) = decode_auth(&auth).map_err(|m| {
            KeychainError(format!(
                "entry {registry:?}: unable to decode auth field: {m}"
            ))
        })?;
    }
    Ok(if !registry_token.is_empty() {
        Credentials::RegistryToken(registry_token)
    } else if !identity.is_empty() {
        Credentials::IdentityToken(identity)
    } else if !username.is_empty() && !password.is_empty() {
        Credentials::Basic { username, password }
    } else {
        Credentials::Anonymous
    })
}

/// base64 `user:password`; padded when it ends with `=` (after trimming), unpadded otherwise.
fn decode_auth(field: &str) -> Result<(String, String), &'static str> {
    let padded = field.trim().ends_with('=');
    let config = GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(if padded {
            DecodePaddingMode::RequireCanonical
        } else {
            DecodePaddingMode::RequireNone
        });
    let engine = GeneralPurpose::new(&base64::alphabet::STANDARD, config);
    let decoded = engine.decode(field).map_err(|_| "illegal base64 data")?;
    let decoded = String::from_utf8_lossy(&decoded);
    match decoded.split_once(':') {
        Some((u, p)) => Ok((u.to_string(), p.to_string())),
        None => Err("must be formatted as base64(username:password)"),
    }
}

/// The keyring key of an `auths` entry: scheme dropped, `/v1/` and `/v2/` path prefixes
/// reduced to `/`, a path of `/` dropped.
fn keyring_key(registry: &str) -> Result<String, KeychainError> {
    let rest = registry
        .strip_prefix("https://")
        .or_else(|| registry.strip_prefix("http://"))
        .unwrap_or(registry);
    let url = SchemelessUrl::parse(rest)
        .ok_or_else(|| KeychainError(format!("Entry {registry:?} in dockercfg invalid")))?;
    let mut path = url.path.as_str();
    if path.starts_with("/v2/") || path.starts_with("/v1/") {
        path = &path[3..];
    }
    Ok(if !path.is_empty() && path != "/" {
        format!("{}{path}", url.host)
    } else {
        url.host
    })
}

/// `host[:port][/path]` as Go's `url.Parse("https://" + s)` splits it (userinfo dropped,
/// query and fragment ignored).
#[derive(Debug, PartialEq, Eq)]
struct SchemelessUrl {
    host: String,
    path: String,
}

impl SchemelessUrl {
    fn parse(s: &str) -> Option<SchemelessUrl> {
        if s.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return None;
        }
        let s = s.split(['?', '#']).next().unwrap_or_default();
        let (authority, path) = match s.find('/') {
            Some(i) => s.split_at(i),
            None => (s, ""),
        };
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        if !valid_host(host) {
            return None;
        }
        Some(SchemelessUrl {
            host: host.to_string(),
            path: path.to_string(),
        })
    }

    /// go-containerregistry's `urlsMatch(self as glob, target)`.
    fn matches(&self, target: &SchemelessUrl) -> bool {
        let (glob_labels, glob_port) = split_host(&self.host);
        let (target_labels, target_port) = split_host(&target.host);
        glob_port == target_port
            && glob_labels.len() == target_labels.len()
            && target.path.starts_with(&self.path)
            && glob_labels
                .iter()
                .zip(&target_labels)
                .all(|(g, t)| glob::matches(g, t))
    }
}

/// A host Go's URL parser accepts: a port after the last colon (outside brackets) is all
/// digits, no spaces or percent escapes.
fn valid_host(host: &str) -> bool {
    if host.contains([' ', '%', '\\']) {
        return false;
    }
    let port = if let Some(rest) = host.strip_prefix('[') {
        match rest.find(']') {
            Some(i) => &rest[i + 1..],
            None => return false,
        }
    } else {
        host.rfind(':').map_or("", |i| &host[i..])
    };
    port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

/// Go's `net.SplitHostPort` (falling back to the whole host and no port when it fails), then
/// the host split at dots.
fn split_host(host: &str) -> (Vec<&str>, &str) {
    let (h, port) = split_host_port(host).unwrap_or((host, ""));
    (h.split('.').collect(), port)
}

fn split_host_port(host: &str) -> Option<(&str, &str)> {
    if let Some(rest) = host.strip_prefix('[') {
        let end = rest.find(']')?;
        let port = rest[end + 1..].strip_prefix(':')?;
        let h = &rest[..end];
        if port.contains([':', '[', ']']) {
            return None;
        }
        return Some((h, port));
    }
    let (h, port) = host.rsplit_once(':')?;
    if h.contains(':') || h.contains(['[', ']']) || port.contains(['[', ']']) {
        return None;
    }
    Some((h, port))
}

#[cfg(test)]
mod tests;
