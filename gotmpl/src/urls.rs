//! A subset of Go's `net/url` for sprig's `urlParse` and `urlJoin`.

fn unhex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

fn unescape(s: &str, what: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let (Some(h), Some(l)) = (
                b.get(i + 1).and_then(|c| unhex(*c)),
                b.get(i + 2).and_then(|c| unhex(*c)),
            ) else {
                let end = (i + 3).min(b.len());
                return Err(format!(
                    "parse {}: invalid URL escape {}",
                    crate::gofmt::quote(what),
                    crate::gofmt::quote(&String::from_utf8_lossy(&b[i..end]))
                ));
            };
            out.push(h << 4 | l);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `urlParse`'s fields, in Go's meaning.
pub(crate) fn parse(raw: &str) -> Result<Vec<(&'static str, String)>, String> {
    let (rest, fragment) = match raw.split_once('#') {
        Some((r, f)) => (r, unescape(f, raw)?),
        None => (raw, String::new()),
    };
    if rest.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(format!(
            "parse {}: net/url: invalid control character in URL",
            crate::gofmt::quote(raw)
        ));
    }
    let mut scheme = String::new();
    let mut rest = rest;
    if let Some(i) = rest.find(':') {
        let cand = &rest[..i];
        if !cand.is_empty()
            && cand.as_bytes()[0].is_ascii_alphabetic()
            && cand
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-' || b == b'.')
        {
            scheme = cand.to_ascii_lowercase();
            rest = &rest[i + 1..];
        } else if i == 0 {
            return Err(format!(
                "parse {}: missing protocol scheme",
                crate::gofmt::quote(raw)
            ));
        }
    }
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, q.to_string()),
        None => (rest, String::new()),
    };
    let mut out = vec![("scheme", scheme.clone())];
    let (mut host, mut userinfo, mut opaque, mut path) =
        (String::new(), String::new(), String::new(), String::new());
    if !rest.starts_with('/') && !scheme.is_empty() {
        opaque = rest.to_string();
    } else if let Some(auth_rest) = rest
        .strip_prefix("//")
        .filter(|_| !scheme.is_empty() || rest.starts_with("//"))
    {
        let (auth, p) = match auth_rest.find('/') {
            Some(i) => (&auth_rest[..i], &auth_rest[i..]),
            None => (auth_rest, ""),
        };
        let (ui, h) = match auth.rfind('@') {
            Some(i) => (Some(&auth[..i]), &auth[i + 1..]),
            None => (None, auth),
        };
        if let Some(ui) = ui {
            userinfo = match ui.split_once(':') {
                Some((u, pw)) => format!("{}:{}", unescape(u, raw)?, unescape(pw, raw)?),
                None => unescape(ui, raw)?,
            };
        }
        host = unescape(h, raw)?;
        path = unescape(p, raw)?;
    } else {
        path = unescape(rest, raw)?;
    }
    let hostname = if let Some(h) = host.strip_prefix('[') {
        h.split(']').next().unwrap_or("").to_string()
    } else {
        match host.rfind(':') {
            Some(i) if host[i + 1..].bytes().all(|b| b.is_ascii_digit()) => host[..i].to_string(),
            _ => host.clone(),
        }
    };
    out.push(("host", host));
    out.push(("hostname", hostname));
    out.push(("path", path));
    out.push(("query", query));
    out.push(("opaque", opaque));
    out.push(("fragment", fragment));
    out.push(("userinfo", userinfo));
    Ok(out)
}

#[derive(PartialEq, Clone, Copy)]
enum Mode {
    Path,
    Host,
    User,
    Fragment,
}

fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if mode == Mode::Host && b"!$&'()*+,;=:[]<>\"".contains(&c) {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => return false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => {
            return match mode {
                Mode::Path => c == b'?',
                Mode::User => c == b'@' || c == b'/' || c == b'?' || c == b':',
                Mode::Fragment => false,
                Mode::Host => true,
            };
        }
        _ => {}
    }
    if mode == Mode::Fragment && b"!()*".contains(&c) {
        return false;
    }
    true
}

fn escape(s: &str, mode: Mode) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if should_escape(b, mode) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

pub(crate) struct Parts {
    pub scheme: String,
    pub host: String,
    pub path: String,
    pub query: String,
    pub opaque: String,
    pub fragment: String,
    pub userinfo: String,
}

/// Go's `url.URL.String()`.
pub(crate) fn join(p: &Parts) -> String {
    let mut buf = String::new();
    if !p.scheme.is_empty() {
        buf.push_str(&p.scheme);
        buf.push(':');
    }
    if !p.opaque.is_empty() {
        buf.push_str(&p.opaque);
    } else {
        let has_user = !p.userinfo.is_empty();
        if !p.scheme.is_empty() || !p.host.is_empty() || has_user {
            if !p.host.is_empty() || !p.path.is_empty() || has_user {
                buf.push_str("//");
            }
            if has_user {
                match p.userinfo.split_once(':') {
                    Some((u, pw)) => {
                        buf.push_str(&escape(u, Mode::User));
                        buf.push(':');
                        buf.push_str(&escape(pw, Mode::User));
                    }
                    None => buf.push_str(&escape(&p.userinfo, Mode::User)),
                }
                buf.push('@');
            }
            buf.push_str(&escape(&p.host, Mode::Host));
        }
        let path = escape(&p.path, Mode::Path);
        if !path.is_empty() && !path.starts_with('/') && !p.host.is_empty() {
            buf.push('/');
        }
        if buf.is_empty() && path.split('/').next().is_some_and(|seg| seg.contains(':')) {
            buf.push_str("./");
        }
        buf.push_str(&path);
    }
    if !p.query.is_empty() {
        buf.push('?');
        buf.push_str(&p.query);
    }
    if !p.fragment.is_empty() {
        buf.push('#');
        buf.push_str(&escape(&p.fragment, Mode::Fragment));
    }
    buf
}
