//! `WWW-Authenticate` challenges, parsed like go-containerregistry's `authchallenge`: one
//! challenge per header value, the scheme and parameter names lower-cased, values as tokens or
//! quoted strings with `\` escapes; parsing stops at the first malformed parameter.

use std::collections::BTreeMap;

use reqwest::header::{HeaderMap, WWW_AUTHENTICATE};

/// One challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// Lower-cased (`basic`, `bearer`, …).
    pub scheme: String,
    /// Lower-cased names.
    pub params: BTreeMap<String, String>,
}

impl Challenge {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }
}

/// How many challenges of one response are looked at.
const MAX_CHALLENGES: usize = 16;

/// The challenges of a response, in header order.
pub fn from_headers(headers: &HeaderMap) -> Vec<Challenge> {
    headers
        .get_all(WWW_AUTHENTICATE)
        .iter()
        .take(MAX_CHALLENGES)
        .filter_map(|v| v.to_str().ok())
        .filter_map(parse)
        .collect()
}

/// The first Basic or Bearer challenge, else the first one.
pub fn pick(challenges: &[Challenge]) -> Option<&Challenge> {
    challenges
        .iter()
        .find(|c| c.scheme == "basic" || c.scheme == "bearer")
        .or_else(|| challenges.first())
}

fn is_token(b: u8) -> bool {
    b.is_ascii() && !b.is_ascii_control() && !b" \t\"(),/:;<=>?@[]\\{}".contains(&b)
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn token(s: &str) -> (&str, &str) {
    let end = s.bytes().position(|b| !is_token(b)).unwrap_or(s.len());
    s.split_at(end)
}

fn skip_space(s: &str) -> &str {
    let start = s.bytes().position(|b| !is_space(b)).unwrap_or(s.len());
    &s[start..]
}

/// A token or a quoted string; `None` when empty or unterminated.
fn token_or_quoted(s: &str) -> Option<(String, &str)> {
    let Some(rest) = s.strip_prefix('"') else {
        let (t, rest) = token(s);
        return (!t.is_empty()).then(|| (t.to_string(), rest));
    };
    let mut out = String::new();
    let mut escape = false;
    for (i, c) in rest.char_indices() {
        if escape {
            out.push(c);
            escape = false;
        } else if c == '\\' {
            escape = true;
        } else if c == '"' {
            return (!out.is_empty()).then(|| (out, &rest[i + 1..]));
        } else {
            out.push(c);
        }
    }
    None
}

/// One header value.
pub fn parse(header: &str) -> Option<Challenge> {
    let (scheme, rest) = token(header);
    if scheme.is_empty() {
        return None;
    }
    let mut c = Challenge {
        scheme: scheme.to_ascii_lowercase(),
        params: BTreeMap::new(),
    };
    let mut s = skip_space(rest);
    let mut first = true;
    loop {
        // The first parameter follows the scheme directly; the others follow a comma.
        if !first {
            match s.strip_prefix(',') {
                Some(r) => s = r,
                None => break,
            }
        }
        first = false;
        let (key, rest) = token(skip_space(s));
        if key.is_empty() {
            break;
        }
        let Some(rest) = rest.strip_prefix('=') else {
            break;
        };
        let Some((value, rest)) = token_or_quoted(rest) else {
            break;
        };
        c.params.insert(key.to_ascii_lowercase(), value);
        s = skip_space(rest);
    }
    Some(c)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_give_realm_service_and_scope() {
        let c = parse(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.param("realm"), Some("https://auth.docker.io/token"));
        assert_eq!(c.param("service"), Some("registry.docker.io"));
        assert_eq!(c.param("scope"), Some("repository:library/nginx:pull"));
    }

    #[test]
    fn names_are_lower_cased_and_spaces_and_tokens_are_allowed() {
        let c = parse(r#"BASIC Realm="basic-realm" , Charset=UTF-8"#).unwrap();
        assert_eq!(c.scheme, "basic");
        assert_eq!(c.param("realm"), Some("basic-realm"));
        assert_eq!(c.param("charset"), Some("UTF-8"));
        let c = parse("Basic").unwrap();
        assert!(c.params.is_empty());
    }

    #[test]
    fn quoted_values_unescape_and_malformed_input_stops_parsing() {
        let c = parse(r#"Bearer realm="a\"b\\c",service="s""#).unwrap();
        assert_eq!(c.param("realm"), Some(r#"a"b\c"#));
        assert_eq!(c.param("service"), Some("s"));
        // Unterminated quote: the parameters before it are kept.
        let c = parse(r#"Bearer service="s",realm="https://x"#).unwrap();
        assert_eq!(c.param("service"), Some("s"));
        assert_eq!(c.param("realm"), None);
        // A parameter without '=' ends the list.
        let c = parse(r#"Bearer realm="r", junk, service="s""#).unwrap();
        assert_eq!(c.param("realm"), Some("r"));
        assert_eq!(c.param("service"), None);
        assert!(parse("").is_none());
        assert!(parse("\"quoted\"").is_none());
    }

    #[test]
    fn basic_or_bearer_is_preferred_among_several() {
        let mut h = HeaderMap::new();
        h.append(WWW_AUTHENTICATE, "Negotiate".parse().unwrap());
        h.append(
            WWW_AUTHENTICATE,
            r#"Bearer realm="https://t""#.parse().unwrap(),
        );
        let all = from_headers(&h);
        assert_eq!(all.len(), 2);
        assert_eq!(pick(&all).unwrap().scheme, "bearer");
        let only = vec![parse("Negotiate").unwrap()];
        assert_eq!(pick(&only).unwrap().scheme, "negotiate");
        assert!(pick(&[]).is_none());
    }
}
