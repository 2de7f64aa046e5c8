//! `GET /v2/<path>/tags/list`, following `Link` pagination.

use reqwest::header::{HeaderMap, LINK};
use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;

use super::Client;
use super::body::read_limited;
use crate::error::OciError;

#[derive(Deserialize)]
struct TagPage {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

/// The next-page URL of a `Link` header, resolved against `current` like
/// go-containerregistry's `getNextPageURL`: the first `Link` value must start with `<`; the
/// text up to the first `>` is the URL. No header → `None`.
pub fn parse_link(headers: &HeaderMap, current: &Url) -> Result<Option<Url>, OciError> {
    let Some(link) = headers.get(LINK) else {
        return Ok(None);
    };
    let link = link
        .to_str()
        .map_err(|_| OciError::Protocol("failed to parse link header: not ASCII".into()))?;
    if link.is_empty() {
        return Ok(None);
    }
    let Some(rest) = link.strip_prefix('<') else {
        return Err(OciError::Protocol(format!(
            "failed to parse link header: missing '<' in: {}",
            short(link)
        )));
    };
    let Some(end) = rest.find('>') else {
        return Err(OciError::Protocol(format!(
            "failed to parse link header: missing '>' in: {}",
            short(link)
        )));
    };
    current
        .join(&rest[..end])
        .map(Some)
        .map_err(|e| OciError::Protocol(format!("failed to parse link header: {e}")))
}

fn short(s: &str) -> String {
    s.chars().take(200).collect()
}

impl Client {
    /// Every tag of the repository, following `Link` pages (each asking for
    /// [`crate::Limits::tags_page_size`] tags when set). Each page is bounded by
    /// `max_tag_page_bytes`, the total by `max_tags`; a next page must stay on the registry's
    /// scheme, host and port.
    pub async fn list_tags(&self) -> Result<Vec<String>, OciError> {
        let base = self.base().await?;
        let mut url = format!("{base}/v2/{}/tags/list", self.repo.path);
        if self.limits.tags_page_size > 0 {
            url.push_str(&format!("?n={}", self.limits.tags_page_size));
        }
        let origin = Url::parse(&base)
            .map_err(|e| OciError::Config(format!("invalid registry URL {base}: {e}")))?;
        let mut tags = Vec::new();
        loop {
            let what = format!("GET {url}");
            let resp = self
                .send(Method::GET, &url, Some("application/json"), self.timeout)
                .await?;
            if resp.status() != StatusCode::OK {
                return Err(self.status_error(resp, &url, "GET").await);
            }
            let next = parse_link(resp.headers(), resp.url())?;
            let body =
                read_limited(resp, self.limits.max_tag_page_bytes, "tag list page", &what).await?;
            let page: TagPage = serde_json::from_slice(&body)
                .map_err(|e| OciError::Json(format!("tag list of {}: {e}", self.repo)))?;
            let page = page.tags.unwrap_or_default();
            if tags.len().saturating_add(page.len()) > self.limits.max_tags {
                return Err(OciError::TooMany {
                    what: format!("tags of {}", self.repo),
                    limit: self.limits.max_tags as u64,
                });
            }
            let empty = page.is_empty();
            tags.extend(page);
            let Some(next) = next else {
                return Ok(tags);
            };
            if empty {
                return Err(OciError::Protocol(format!(
                    "tag list of {}: an empty page links to another",
                    self.repo
                )));
            }
            if next.scheme() != origin.scheme()
                || next.host_str() != origin.host_str()
                || next.port_or_known_default() != origin.port_or_known_default()
            {
                return Err(OciError::Protocol(format!(
                    "tag list of {}: the next page is on another host",
                    self.repo
                )));
            }
            url = next.to_string();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn link(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(LINK, v.parse().unwrap());
        h
    }

    #[test]
    fn links_resolve_against_the_current_page() {
        let cur = Url::parse("http://127.0.0.1:5000/v2/app/tags/list?n=2").unwrap();
        let next = parse_link(&link(r#"</v2/app/tags/list?last=b&n=2>; rel="next""#), &cur)
            .unwrap()
            .unwrap();
        assert_eq!(
            next.as_str(),
            "http://127.0.0.1:5000/v2/app/tags/list?last=b&n=2"
        );
        let abs = parse_link(&link("<https://other.io/v2/x/tags/list?last=z>"), &cur)
            .unwrap()
            .unwrap();
        assert_eq!(abs.host_str(), Some("other.io"));
        let rel = parse_link(&link("<list?last=c>"), &cur).unwrap().unwrap();
        assert_eq!(
            rel.as_str(),
            "http://127.0.0.1:5000/v2/app/tags/list?last=c"
        );
        assert!(parse_link(&HeaderMap::new(), &cur).unwrap().is_none());
    }

    #[test]
    fn malformed_links_are_protocol_errors() {
        let cur = Url::parse("http://h/v2/app/tags/list").unwrap();
        for bad in [
            r#"/v2/app/tags/list?last=b; rel="next""#,
            "</v2/app/tags/list?last=b",
        ] {
            let e = parse_link(&link(bad), &cur).unwrap_err();
            assert!(matches!(e, OciError::Protocol(_)), "{bad}: {e}");
        }
    }
}
