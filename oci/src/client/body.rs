//! Bounded reads of response bodies, and the errors made from unexpected statuses.

use reqwest::{Response, StatusCode};
use serde::Deserialize;

use super::Client;
use crate::error::OciError;
use crate::transport::map_reqwest;

/// Reads the whole body of `resp`, refusing more than `limit` bytes (before reading when the
/// `Content-Length` already says so). `what` names the content, `req` the request (`GET
/// <url>`) for transport errors.
pub(super) async fn read_limited(
    mut resp: Response,
    limit: u64,
    what: &str,
    req: &str,
) -> Result<Vec<u8>, OciError> {
    let too_large = || OciError::TooLarge {
        what: what.to_string(),
        limit,
    };
    if resp.content_length().is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| map_reqwest(e, req))? {
        if (out.len() as u64).saturating_add(chunk.len() as u64) > limit {
            return Err(too_large());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Reads at most `limit` bytes of the body, ignoring errors (for error messages).
async fn read_prefix(mut resp: Response, limit: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < limit {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let take = chunk.len().min(limit - out.len());
                out.extend_from_slice(&chunk[..take]);
            }
            _ => break,
        }
    }
    out
}

/// Reads and drops a short body so that the connection can be reused; a longer one is cut
/// (the connection is then closed).
pub(super) async fn discard(resp: Response, limit: usize) {
    let _ = read_prefix(resp, limit).await;
}

#[derive(Deserialize)]
struct RegistryErrors {
    #[serde(default)]
    errors: Vec<Diagnostic>,
}

#[derive(Deserialize)]
struct Diagnostic {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    detail: Option<serde_json::Value>,
}

impl Diagnostic {
    fn render(&self) -> String {
        let mut s = format!("{}: {}", self.code, self.message);
        if let Some(d) = self.detail.as_ref().filter(|d| !d.is_null()) {
            s.push_str("; ");
            go_value(d, &mut s);
        }
        s
    }
}

/// Appends a decoded JSON value the way Go's `%v` prints an `any` holding it: strings bare,
/// objects as `map[k:v]` with sorted keys, arrays as `[a b]`, `null` as `<nil>`, numbers as
/// `float64` with `%v` (shortest form, exponent from 1e21).
fn go_value(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::String(t) => out.push_str(t),
        Value::Number(n) => out.push_str(&go_float(n.as_f64().unwrap_or(0.0))),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                go_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push_str("map[");
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                go_value(&map[k.as_str()], out);
            }
            out.push(']');
        }
    }
}

/// Go's `%v` of a `float64`: `%g` with the shortest representation, which switches to an
/// exponent (`1e+21`) when the exponent is below -4 or at least 21.
fn go_float(f: f64) -> String {
    if f == 0.0 {
        return "0".into();
    }
    let exp = f.abs().log10().floor();
    if (-4.0..21.0).contains(&exp) {
        format!("{f}")
    } else {
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((m, e)) => {
                let (sign, digits) = match e.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', e),
                };
                format!("{m}e{sign}{digits:0>2}")
            }
            None => s,
        }
    }
}

/// go-containerregistry's rendering of an error response: the registry's `errors` when the
/// body holds them, else the status and the body text.
pub(super) fn render_error(status: StatusCode, method: &str, body: &[u8]) -> String {
    if let Ok(parsed) = serde_json::from_slice::<RegistryErrors>(body) {
        match parsed.errors.as_slice() {
            [] => {}
            [one] => return one.render(),
            many => {
                let all: Vec<String> = many.iter().map(Diagnostic::render).collect();
                return format!("multiple errors returned: {}", all.join("; "));
            }
        }
    }
    let status_text = format!(
        "unexpected status code {} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    let text = printable(body);
    if text.is_empty() {
        if method == "HEAD" {
            format!("{status_text} (HEAD responses have no body, use GET for details)")
        } else {
            status_text
        }
    } else {
        format!("{status_text}: {text}")
    }
}

/// The body as one line of text, control characters replaced.
fn printable(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}

impl Client {
    /// Removes every secret the client knows from `s`.
    pub(super) fn scrub(&self, s: &str) -> String {
        let secrets = self.secrets.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = s.to_string();
        for secret in secrets.iter().filter(|x| !x.is_empty()) {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "<redacted>");
            }
        }
        out
    }

    /// Remembers a secret learnt at run time (a token) to keep it out of messages.
    pub(super) fn add_secret(&self, s: &str) {
        if s.is_empty() {
            return;
        }
        let mut secrets = self.secrets.lock().unwrap_or_else(|e| e.into_inner());
        if !secrets.iter().any(|x| x == s) {
            secrets.push(s.to_string());
        }
    }

    /// The error for an unexpected status of `method url`.
    pub(super) async fn status_error(&self, resp: Response, url: &str, method: &str) -> OciError {
        let status = resp.status();
        let body = read_prefix(resp, self.limits.max_error_body).await;
        let detail = self.scrub(&render_error(status, method, &body));
        // go-containerregistry's `transport.Error`: `<METHOD> <url>: <detail>`.
        let url = format!("{method} {}", url.split('?').next().unwrap_or(url));
        match status {
            StatusCode::UNAUTHORIZED => OciError::Unauthorized { url, detail },
            StatusCode::FORBIDDEN => OciError::Forbidden { url, detail },
            StatusCode::NOT_FOUND => OciError::NotFound {
                what: format!("{url}: {detail}"),
            },
            _ => OciError::Status {
                code: status.as_u16(),
                url,
                body_excerpt: detail,
            },
        }
    }
}
