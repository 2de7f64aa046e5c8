//! The notification webhook (`--events-addr`): Flux's events posted to notification-controller.

/// Errors of the notification webhook.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The address is not an `http://host[:port][/path]` URL.
    #[error("invalid events address {0:?}: expected http://host[:port][/path]")]
    InvalidUrl(String),
    /// Network failure (after retries).
    #[error("posting event to {url}: {reason}")]
    Post {
        /// Target.
        url: String,
        /// Last failure.
        reason: String,
    },
}

/// A parsed `--events-addr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    /// Original URL.
    pub url: String,
    /// `host:port` to connect to.
    pub authority: String,
    /// Host header value.
    pub host: String,
    /// Request path.
    pub path: String,
}

impl WebhookTarget {
    /// Parses an `http://` URL (https is not supported: Flux's install uses plain HTTP in-cluster).
    pub fn parse(url: &str) -> Result<Self, WebhookError> {
        let rest = url
            .trim()
            .strip_prefix("http://")
            .ok_or_else(|| WebhookError::InvalidUrl(url.to_string()))?;
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if hostport.is_empty() || hostport.contains('@') {
            return Err(WebhookError::InvalidUrl(url.to_string()));
        }
        let invalid = || WebhookError::InvalidUrl(url.to_string());
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(invalid)?;
            match after.strip_prefix(':') {
                Some(p) => (format!("[{h}]"), p.parse::<u16>().map_err(|_| invalid())?),
                None if after.is_empty() => (format!("[{h}]"), 80),
                None => return Err(invalid()),
            }
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse::<u16>().map_err(|_| invalid())?),
                None => (hostport.to_string(), 80),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(invalid());
        }
        let connect = format!("{host}:{port}");
        Ok(Self {
            url: url.trim().to_string(),
            authority: connect,
            host: hostport.to_string(),
            path: path.to_string(),
        })
    }

    /// POSTs `payload`; retries connection errors and 5xx up to 4 times (1s, 2s, 4s, 8s) like
    /// retryablehttp; 429 and other codes are final. Returns the last status code.
    pub async fn post(&self, payload: &serde_json::Value) -> Result<u16, WebhookError> {
        let body = payload.to_string();
        let mut delay = std::time::Duration::from_secs(1);
        let mut last = String::new();
        for attempt in 0..5 {
            if attempt > 0 {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            match tokio::time::timeout(std::time::Duration::from_secs(5), self.post_once(&body))
                .await
            {
                Ok(Ok(code)) if code < 500 => return Ok(code),
                Ok(Ok(code)) => last = format!("HTTP {code}"),
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = "timeout after 5s".to_string(),
            }
        }
        Err(WebhookError::Post {
            url: self.url.clone(),
            reason: last,
        })
    }

    async fn post_once(&self, body: &str) -> std::io::Result<u16> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(&self.authority).await?;
        let req = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
            self.path,
            self.host,
            body.len(),
            body
        );
        stream.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        // Only the status line is needed.
        while !buf.windows(2).any(|w| w == b"\r\n") {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > 16 * 1024 {
                break;
            }
        }
        let line = String::from_utf8_lossy(&buf);
        line.split(' ')
            .nth(1)
            .and_then(|c| c.get(..3))
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "bad HTTP response")
            })
    }
}
