//! Remote URL forms: `http(s)://`, `ssh://`, scp-like `user@host:path`, and
//! `file://` (spawns the local `git upload-pack`; meant for tests).

use crate::error::GitError;

/// A parsed remote location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteUrl {
    /// Smart HTTP(S); the URL without a trailing slash.
    Http { url: String },
    /// SSH; `path` is passed to `git-upload-pack` as is.
    Ssh {
        user: Option<String>,
        host: String,
        port: Option<u16>,
        path: String,
    },
    /// A repository on the local file system (needs `git` on `PATH`).
    File { path: String },
}

fn config(msg: impl Into<String>) -> GitError {
    GitError::Config(msg.into())
}

/// The URL with any userinfo password replaced, for messages.
pub fn redact(url: &str) -> String {
    if let Some(scheme_end) = url.find("://") {
        let rest = &url[scheme_end + 3..];
        let auth_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..auth_end].rfind('@') {
            let userinfo = &rest[..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                user.to_string()
            };
            return format!("{}{}{}", &url[..scheme_end + 3], masked, &rest[at..]);
        }
    }
    url.to_string()
}

/// Whether `url` names the local file system rather than a remote server: a `file:` URL
/// (any case), or anything that is neither `scheme://…` nor scp-like `[user@]host:path`
/// (git takes such strings, `/srv/repo` or `../repo` for example, as local paths).
pub fn is_local(url: &str) -> bool {
    let url = url.trim();
    if url
        .get(..5)
        .is_some_and(|p| p.eq_ignore_ascii_case("file:"))
    {
        return true;
    }
    if url.contains("://") {
        return false;
    }
    // scp-like when a colon comes before any slash.
    match url.find(':') {
        Some(colon) => url[..colon].contains('/'),
        None => true,
    }
}

fn check_host(host: &str) -> Result<(), GitError> {
    if host.is_empty() {
        return Err(config("SSH URL without a host"));
    }
    if host.starts_with('-') || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(config(format!("invalid SSH host {host:?}")));
    }
    Ok(())
}

fn split_user(s: &str) -> (Option<String>, &str) {
    match s.rfind('@') {
        Some(i) => (
            Some(s[..i].to_string()).filter(|u| !u.is_empty()),
            &s[i + 1..],
        ),
        None => (None, s),
    }
}

impl RemoteUrl {
    pub fn parse(url: &str) -> Result<Self, GitError> {
        let url = url.trim();
        if let Some(rest) = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
        {
            if rest.is_empty() || rest.starts_with('/') {
                return Err(config(format!("HTTP URL without a host: {}", redact(url))));
            }
            return Ok(RemoteUrl::Http {
                url: url.trim_end_matches('/').to_string(),
            });
        }
        if let Some(path) = url.strip_prefix("file://") {
            if path.is_empty() {
                return Err(config("file URL without a path"));
            }
            return Ok(RemoteUrl::File {
                path: path.to_string(),
            });
        }
        if let Some(rest) = url.strip_prefix("ssh://") {
            let slash = rest
                .find('/')
                .ok_or_else(|| config(format!("SSH URL without a path: {url}")))?;
            let (authority, path) = rest.split_at(slash);
            let (user, hostport) = split_user(authority);
            let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
                let end = h
                    .find(']')
                    .ok_or_else(|| config(format!("unterminated IPv6 host in {url}")))?;
                let port = h[end + 1..].strip_prefix(':');
                (h[..end].to_string(), port)
            } else {
                match hostport.rsplit_once(':') {
                    Some((h, p)) => (h.to_string(), Some(p)),
                    None => (hostport.to_string(), None),
                }
            };
            let port = match port.filter(|p| !p.is_empty()) {
                Some(p) => Some(
                    p.parse::<u16>()
                        .map_err(|_| config(format!("invalid SSH port {p:?}")))?,
                ),
                None => None,
            };
            check_host(&host)?;
            // ssh://host/~user/repo means a path relative to a home directory.
            let path = match path.strip_prefix("/~") {
                Some(p) => format!("~{p}"),
                None => path.to_string(),
            };
            return Ok(RemoteUrl::Ssh {
                user,
                host,
                port,
                path,
            });
        }
        if url.contains("://") {
            return Err(config(format!("unsupported URL scheme in {}", redact(url))));
        }
        // scp-like: [user@]host:path, with the colon before any slash.
        if let Some(colon) = url.find(':')
            && !url[..colon].contains('/')
        {
            let (user, host) = split_user(&url[..colon]);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            check_host(host)?;
            let path = &url[colon + 1..];
            if path.is_empty() {
                return Err(config(format!("SSH URL without a path: {url}")));
            }
            return Ok(RemoteUrl::Ssh {
                user,
                host: host.to_string(),
                port: None,
                path: path.to_string(),
            });
        }
        Err(config(format!("unsupported remote URL {}", redact(url))))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_forms() {
        assert_eq!(
            RemoteUrl::parse("https://example.com/org/repo.git/").unwrap(),
            RemoteUrl::Http {
                url: "https://example.com/org/repo.git".into()
            }
        );
        assert_eq!(
            RemoteUrl::parse("ssh://git@example.com:2222/org/repo.git").unwrap(),
            RemoteUrl::Ssh {
                user: Some("git".into()),
                host: "example.com".into(),
                port: Some(2222),
                path: "/org/repo.git".into()
            }
        );
        assert_eq!(
            RemoteUrl::parse("ssh://[::1]:22/~me/r").unwrap(),
            RemoteUrl::Ssh {
                user: None,
                host: "::1".into(),
                port: Some(22),
                path: "~me/r".into()
            }
        );
        assert_eq!(
            RemoteUrl::parse("git@github.com:org/repo.git").unwrap(),
            RemoteUrl::Ssh {
                user: Some("git".into()),
                host: "github.com".into(),
                port: None,
                path: "org/repo.git".into()
            }
        );
        assert_eq!(
            RemoteUrl::parse("file:///tmp/x.git").unwrap(),
            RemoteUrl::File {
                path: "/tmp/x.git".into()
            }
        );
    }

    #[test]
    fn rejects_bad_urls() {
        for u in [
            "ftp://x/y",
            "ssh://-oProxyCommand=x/y",
            "ssh://host:notaport/x",
            "ssh://host",
            "https://",
            "/just/a/path",
            "-oProxyCommand=x:repo",
        ] {
            assert!(
                matches!(RemoteUrl::parse(u), Err(GitError::Config(_))),
                "{u}"
            );
        }
    }

    #[test]
    fn tells_local_urls_from_remote_ones() {
        for local in [
            "file:///var/run/secrets",
            "FILE:///x",
            "File:relative",
            "/var/run/x",
            "../x",
            "./x:y",
            "relative/path",
            "",
        ] {
            assert!(is_local(local), "{local:?}");
        }
        for remote in [
            "https://h/x.git",
            "http://h/x",
            "ssh://h/x",
            "git@h:x.git",
            "h:x",
            "[::1]:x",
        ] {
            assert!(!is_local(remote), "{remote:?}");
        }
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("https://user:secret@host/x"),
            "https://user:***@host/x"
        );
        assert_eq!(redact("https://host/x"), "https://host/x");
    }
}
