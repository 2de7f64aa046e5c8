//! Submodules: reading `.gitmodules` (git-config syntax), resolving a submodule URL against
//! the URL of its superproject (git's rules for `./` and `../`), and deriving the
//! [`Remote`] a submodule is fetched from.

use crate::error::GitError;
use crate::remote::{Auth, Remote, TlsConfig};

/// One `[submodule "<name>"]` section of `.gitmodules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmoduleConfig {
    /// The section's name.
    pub name: String,
    /// `path`: where the gitlink sits in the superproject's tree.
    pub path: Option<String>,
    /// `url`: absolute, or relative (`./`, `../`) to the superproject's URL.
    pub url: Option<String>,
}

fn bad(line: usize, msg: &str) -> GitError {
    GitError::protocol(format!(".gitmodules line {line}: {msg}"))
}

/// Parses a section header line (after the leading `[`), returning the section and, when
/// present, the subsection.
fn parse_header(rest: &str, line: usize) -> Result<(String, Option<String>), GitError> {
    let close = rest
        .rfind(']')
        .ok_or_else(|| bad(line, "unterminated section header"))?;
    let inner = rest[..close].trim();
    if let Some(q) = inner.find('"') {
        let section = inner[..q].trim().to_ascii_lowercase();
        let quoted = &inner[q + 1..];
        let mut sub = String::new();
        let mut chars = quoted.chars();
        let mut closed = false;
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(n) => sub.push(n),
                    None => return Err(bad(line, "bad escape in subsection")),
                },
                '"' => {
                    closed = true;
                    break;
                }
                c => sub.push(c),
            }
        }
        if !closed || !chars.as_str().trim().is_empty() {
            return Err(bad(line, "bad subsection name"));
        }
        return Ok((section, Some(sub)));
    }
    // Deprecated `[section.subsection]` form: the subsection is lowercased.
    match inner.split_once('.') {
        Some((s, sub)) => Ok((
            s.trim().to_ascii_lowercase(),
            Some(sub.to_ascii_lowercase()),
        )),
        None => Ok((inner.to_ascii_lowercase(), None)),
    }
}

/// Parses a value: quotes group, `\` escapes, `#`/`;` outside quotes start a comment, and
/// unquoted surrounding whitespace is dropped.
fn parse_value(raw: &str, line: usize) -> Result<String, GitError> {
    let mut out = String::new();
    let mut pending_ws = String::new();
    let mut in_quotes = false;
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push_str(&pending_ws);
                pending_ws.clear();
                in_quotes = !in_quotes;
            }
            '\\' => {
                out.push_str(&pending_ws);
                pending_ws.clear();
                match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('b') => {
                        out.pop();
                    }
                    Some(c @ ('"' | '\\')) => out.push(c),
                    Some(_) => return Err(bad(line, "unknown escape in value")),
                    None => return Err(bad(line, "line continuation is not supported")),
                }
            }
            '#' | ';' if !in_quotes => break,
            c if c.is_whitespace() && !in_quotes => {
                if !out.is_empty() {
                    pending_ws.push(c);
                }
            }
            c => {
                out.push_str(&pending_ws);
                pending_ws.clear();
                out.push(c);
            }
        }
    }
    if in_quotes {
        return Err(bad(line, "unterminated quote"));
    }
    Ok(out)
}

/// Parses `.gitmodules`. Sections other than `submodule` and keys other than `path` and
/// `url` are ignored; the last value of a repeated key wins (like `git config --get`).
pub fn parse_gitmodules(data: &[u8]) -> Result<Vec<SubmoduleConfig>, GitError> {
    let text = std::str::from_utf8(data)
        .map_err(|_| GitError::protocol(".gitmodules is not valid UTF-8"))?;
    let mut out: Vec<SubmoduleConfig> = Vec::new();
    let mut current: Option<usize> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim_start();
        if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        if let Some(rest) = l.strip_prefix('[') {
            let (section, sub) = parse_header(rest, line)?;
            current = match (section.as_str(), sub) {
                ("submodule", Some(name)) => Some(match out.iter().position(|s| s.name == name) {
                    Some(idx) => idx,
                    None => {
                        out.push(SubmoduleConfig {
                            name,
                            path: None,
                            url: None,
                        });
                        out.len() - 1
                    }
                }),
                _ => None,
            };
            continue;
        }
        let Some(idx) = current else {
            continue;
        };
        let (key, value) = match l.split_once('=') {
            Some((k, v)) => (k.trim().to_ascii_lowercase(), parse_value(v, line)?),
            // A key without `=` is boolean true; not meaningful for path/url.
            None => continue,
        };
        let entry = &mut out[idx];
        match key.as_str() {
            "path" => entry.path = Some(value),
            "url" => entry.url = Some(value),
            _ => {}
        }
    }
    Ok(out)
}

/// The configuration of the submodule whose `path` is `path`.
pub fn submodule_for_path<'a>(
    configs: &'a [SubmoduleConfig],
    path: &str,
) -> Option<&'a SubmoduleConfig> {
    let want = path.trim_matches('/');
    configs
        .iter()
        .rev()
        .find(|c| c.path.as_deref().map(|p| p.trim_matches('/')) == Some(want))
}

/// Splits a URL into the part that `../` may not climb above (scheme and authority, or
/// `host:` of an scp-like URL) and its path.
fn split_root(url: &str) -> (&str, &str, bool) {
    if let Some(i) = url.find("://") {
        let after = &url[i + 3..];
        return match after.find('/') {
            Some(j) => (&url[..i + 3 + j], &after[j + 1..], false),
            None => (url, "", false),
        };
    }
    // scp-like `[user@]host:path` (a colon before any slash).
    if let Some(colon) = url.find(':')
        && !url[..colon].contains('/')
    {
        return (&url[..=colon], &url[colon + 1..], true);
    }
    ("", url, false)
}

/// Resolves a submodule URL: absolute URLs are returned as they are; `./x` and `../x` are
/// resolved against the superproject's URL the way git does (`../` drops the last path
/// component of the superproject URL). The result is not judged here:
/// [`Remote::for_submodule`] refuses local results for a remote superproject.
pub fn resolve_submodule_url(parent: &str, url: &str) -> Result<String, GitError> {
    let url = url.trim();
    if !(url.starts_with("./") || url.starts_with("../")) {
        return Ok(url.to_string());
    }
    let parent = parent.trim().trim_end_matches('/');
    let (root, path, scp) = split_root(parent);
    let mut comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let mut rest = url;
    loop {
        if let Some(r) = rest.strip_prefix("./") {
            rest = r;
        } else if let Some(r) = rest.strip_prefix("../") {
            if comps.pop().is_none() {
                return Err(GitError::Config(format!(
                    "submodule URL {url:?} climbs above the superproject URL {}",
                    crate::url::redact(parent)
                )));
            }
            rest = r;
        } else {
            break;
        }
    }
    let rest = rest.trim_end_matches('/');
    if !rest.is_empty() {
        comps.push(rest);
    }
    let joined = comps.join("/");
    Ok(if scp || root.is_empty() {
        format!("{root}{joined}")
    } else {
        format!("{root}/{joined}")
    })
}

/// The transport family and `host[:port]` of a URL (lowercased host), for deciding whether
/// credentials may be reused.
fn endpoint(url: &str) -> Option<(&'static str, String)> {
    let url = url.trim();
    let (family, rest) = if let Some(r) = url.strip_prefix("https://") {
        ("https", r)
    } else if let Some(r) = url.strip_prefix("http://") {
        ("http", r)
    } else if let Some(r) = url.strip_prefix("ssh://") {
        ("ssh", r)
    } else if url.contains("://") {
        return None;
    } else {
        // scp-like
        let (root, _, scp) = split_root(url);
        if !scp {
            return None;
        }
        let hostpart = root.trim_end_matches(':');
        let host = hostpart.rsplit_once('@').map_or(hostpart, |(_, h)| h);
        return Some(("ssh", host.to_ascii_lowercase()));
    };
    let authority = rest.split('/').next().unwrap_or("");
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let hostport = match (family, hostport.rsplit_once(':')) {
        ("https", Some((h, "443"))) | ("http", Some((h, "80"))) | ("ssh", Some((h, "22"))) => h,
        _ => hostport,
    };
    Some((family, hostport.to_ascii_lowercase()))
}

/// Whether two URLs reach the same server the same way (scheme family, host and port).
pub fn same_endpoint(a: &str, b: &str) -> bool {
    match (endpoint(a), endpoint(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

impl Remote {
    /// The remote of a submodule whose `.gitmodules` URL is `url`: resolved against this
    /// remote's URL, with the same timeout, limits, protocol, proxy and CA. Credentials
    /// (auth and the mTLS client certificate) are passed on only when the submodule is on the
    /// same endpoint (scheme family, host and port), so they never leak to another host.
    ///
    /// A submodule of a superproject on a remote server may not live on the local file
    /// system: a `file:` URL or a local path (also one that a relative URL resolves to) is a
    /// [`GitError::Config`] error, since `.gitmodules` is written by whoever controls the
    /// remote repository and must not make the client read the files of the host it runs
    /// on. Only a superproject that is itself local (`file://`) may have local submodules.
    pub fn for_submodule(&self, url: &str) -> Result<Remote, GitError> {
        let resolved = resolve_submodule_url(&self.url, url)?;
        if crate::url::is_local(&resolved) && !crate::url::is_local(&self.url) {
            return Err(GitError::Config(format!(
                "submodule URL {:?} names the local file system ({:?}); only a local \
                 superproject may have local submodules",
                crate::url::redact(url),
                crate::url::redact(&resolved)
            )));
        }
        let mut sub = self.clone();
        sub.url = resolved;
        if !same_endpoint(&self.url, &sub.url) {
            sub.auth = Auth::None;
            sub.tls = TlsConfig {
                ca_pem: self.tls.ca_pem.clone(),
                client_cert_pem: None,
                client_key_pem: None,
            };
        }
        Ok(sub)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_sections_quotes_comments_and_legacy_headers() {
        let text = br#"
# comment
[core]
	path = ignored
[submodule "libs/one"]
	path = libs/one
	url = ../one.git   ; trailing comment
[Submodule "two \"quoted\""]
	Path = "dir with space/two"
	URL = https://example.com/two.git # comment
	branch = main
[submodule.Legacy]
	path = legacy
	url = ./legacy
[submodule "libs/one"]
	url = ../one-moved.git
[submodule "no-url"]
	path = nourl
"#;
        let subs = parse_gitmodules(text).unwrap();
        assert_eq!(subs.len(), 4);
        assert_eq!(subs[0].name, "libs/one");
        assert_eq!(subs[0].path.as_deref(), Some("libs/one"));
        assert_eq!(subs[0].url.as_deref(), Some("../one-moved.git"));
        assert_eq!(subs[1].name, "two \"quoted\"");
        assert_eq!(subs[1].path.as_deref(), Some("dir with space/two"));
        assert_eq!(subs[1].url.as_deref(), Some("https://example.com/two.git"));
        assert_eq!(subs[2].name, "legacy");
        assert_eq!(subs[2].url.as_deref(), Some("./legacy"));
        assert_eq!(subs[3].url, None);
        assert_eq!(
            submodule_for_path(&subs, "dir with space/two/")
                .unwrap()
                .name,
            "two \"quoted\""
        );
        assert!(submodule_for_path(&subs, "libs").is_none());
    }

    #[test]
    fn rejects_malformed_files() {
        assert!(parse_gitmodules(b"[submodule \"x\"\n").is_err());
        assert!(parse_gitmodules(b"[submodule \"x\"]\nurl = \"open\n").is_err());
        assert!(parse_gitmodules(&[0xff, 0xfe]).is_err());
    }

    #[test]
    fn resolves_relative_urls_like_git() {
        let cases = [
            (
                "https://h/org/parent.git",
                "../sub.git",
                "https://h/org/sub.git",
            ),
            (
                "https://h/org/parent.git/",
                "../sub.git",
                "https://h/org/sub.git",
            ),
            (
                "https://h/org/parent.git",
                "./sub",
                "https://h/org/parent.git/sub",
            ),
            ("https://h/org/parent", "../../other/x", "https://h/other/x"),
            (
                "ssh://git@h:2222/org/p.git",
                "../s.git",
                "ssh://git@h:2222/org/s.git",
            ),
            ("git@h:org/p.git", "../s.git", "git@h:org/s.git"),
            ("git@h:p.git", "../s.git", "git@h:s.git"),
            ("file:///srv/git/p", "../s", "file:///srv/git/s"),
            (
                "https://h/org/p.git",
                "https://x/abs.git",
                "https://x/abs.git",
            ),
            ("https://h/org/p.git", "git@x:abs.git", "git@x:abs.git"),
        ];
        for (parent, url, want) in cases {
            assert_eq!(
                resolve_submodule_url(parent, url).unwrap(),
                want,
                "{parent} + {url}"
            );
        }
        assert!(resolve_submodule_url("https://h/p.git", "../../x").is_err());
    }

    #[test]
    fn credentials_follow_only_to_the_same_endpoint() {
        let parent = Remote::new("https://git.example.com/org/parent.git")
            .with_auth(Auth::Basic {
                username: "u".into(),
                password: "p".into(),
            })
            .with_tls(TlsConfig {
                ca_pem: Some("CA".into()),
                client_cert_pem: Some("CERT".into()),
                client_key_pem: Some("KEY".into()),
            })
            .with_proxy("http://proxy:3128");
        let same = parent.for_submodule("../lib.git").unwrap();
        assert_eq!(same.url, "https://git.example.com/org/lib.git");
        assert_eq!(same.auth, parent.auth);
        assert_eq!(same.tls, parent.tls);
        let explicit_port = parent
            .for_submodule("https://GIT.example.com:443/x.git")
            .unwrap();
        assert_eq!(explicit_port.auth, parent.auth);
        for other in [
            "https://elsewhere.example.com/x.git",
            "https://git.example.com:8443/x.git",
            "http://git.example.com/x.git",
            "git@git.example.com:x.git",
        ] {
            let sub = parent.for_submodule(other).unwrap();
            assert_eq!(sub.auth, Auth::None, "{other}");
            assert_eq!(sub.tls.ca_pem.as_deref(), Some("CA"));
            assert_eq!(sub.tls.client_cert_pem, None);
            assert_eq!(sub.proxy, parent.proxy);
        }
        assert!(same_endpoint("git@h:a.git", "ssh://git@h/b.git"));
        assert!(same_endpoint("ssh://h:22/a", "ssh://other@h/b"));
    }

    #[test]
    fn remote_superprojects_may_not_have_local_submodules() {
        for parent in [
            "https://git.example.com/org/parent.git",
            "http://h/p",
            "ssh://git@h:2222/org/p.git",
            "git@h:org/p.git",
        ] {
            let parent = Remote::new(parent);
            for url in [
                "file:///var/run/secrets/kubernetes.io/serviceaccount",
                "FILE:///etc",
                "file:relative",
                "  file:///padded",
                "/var/run/x",
                "~/repo",
                "relative/path",
            ] {
                let err = parent.for_submodule(url).unwrap_err();
                assert!(
                    matches!(&err, GitError::Config(m) if m.contains("local file system")),
                    "{} + {url}: {err:?}",
                    parent.url
                );
            }
            // Relative URLs stay on the superproject's server.
            let sub = parent.for_submodule("../lib.git").unwrap();
            assert!(!crate::url::is_local(&sub.url), "{}", sub.url);
            parent
                .for_submodule("https://other.example.com/x.git")
                .unwrap();
        }
    }

    #[test]
    fn local_superprojects_may_have_local_submodules() {
        let parent = Remote::new("file:///srv/git/parent");
        assert_eq!(
            parent.for_submodule("../lib").unwrap().url,
            "file:///srv/git/lib"
        );
        assert_eq!(
            parent.for_submodule("file:///srv/other").unwrap().url,
            "file:///srv/other"
        );
        assert_eq!(
            parent.for_submodule("https://h/x.git").unwrap().url,
            "https://h/x.git"
        );
    }
}
