//! The artifact HTTP file server: a read-only view of the storage root, like Go's
//! `http.FileServer(http.Dir(root))`: GET and HEAD, directory listings, `Last-Modified`,
//! `If-Modified-Since`, single byte ranges, and Go's content types (extension table, then
//! content sniffing, so `.tar.gz` is `application/x-gzip`).
//!
//! Unlike Go's server it refuses (400) any `..` segment (raw or percent-encoded), NUL bytes and
//! malformed escapes, it answers 404 for anything whose resolved path (after symlinks) is
//! outside the root, and it neither serves nor lists the temporary file of an archive being
//! written (`.rflux-archive-*`, left behind when the writer is killed).

use std::future::Future;
use std::io::SeekFrom;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::error::ArtifactError;
use super::storage::TEMP_PREFIX;

const CHUNK: usize = 64 * 1024;

#[derive(Debug)]
struct ServerState {
    /// Canonical root.
    root: PathBuf,
}

/// The router serving `root` (canonicalized here; it must exist).
pub fn router(root: &Path) -> Result<Router, ArtifactError> {
    let root = std::fs::canonicalize(root).map_err(|e| ArtifactError::io("open", root, e))?;
    if !root.is_dir() {
        return Err(ArtifactError::InvalidDir(root));
    }
    let state = Arc::new(ServerState { root });
    Ok(Router::new().fallback(handle).with_state(state))
}

/// Binds `addr` and serves `root` until `shutdown` completes (then stops accepting and lets
/// in-flight requests finish).
pub async fn serve(
    root: PathBuf,
    addr: SocketAddr,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ArtifactError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(ArtifactError::Server)?;
    serve_listener(root, listener, shutdown).await
}

/// [`serve`] on an already bound listener (useful with port 0).
pub async fn serve_listener(
    root: PathBuf,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ArtifactError> {
    let app = router(&root)?;
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(ArtifactError::Server)
}

fn plain(status: StatusCode, msg: &str) -> Response {
    let mut r = (status, format!("{msg}\n")).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

fn not_found() -> Response {
    plain(StatusCode::NOT_FOUND, "404 page not found")
}

fn bad_request() -> Response {
    plain(StatusCode::BAD_REQUEST, "400 bad request")
}

fn redirect(location: &str) -> Response {
    let mut r = StatusCode::MOVED_PERMANENTLY.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Percent-decodes a URL path; `None` on a malformed escape.
pub fn percent_decode(raw: &str) -> Option<Vec<u8>> {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hi = hex_val(*b.get(i + 1)?)?;
            let lo = hex_val(*b.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// A request path the server refuses to map onto the file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("refused request path")]
pub struct RefusedPath;

/// A `Range` header that cannot be satisfied for the file's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("range not satisfiable")]
pub struct UnsatisfiableRange;

/// Splits a raw request path into safe segments: [`RefusedPath`] for anything that must be
/// refused (malformed escape, NUL, `..`, non UTF-8), empty and `.` segments dropped.
pub fn safe_segments(raw_path: &str) -> Result<Vec<String>, RefusedPath> {
    let decoded = percent_decode(raw_path).ok_or(RefusedPath)?;
    if decoded.contains(&0) {
        return Err(RefusedPath);
    }
    let mut out = Vec::new();
    for seg in decoded.split(|c| *c == b'/') {
        match seg {
            b"" | b"." => {}
            b".." => return Err(RefusedPath),
            s => out.push(String::from_utf8(s.to_vec()).map_err(|_| RefusedPath)?),
        }
    }
    Ok(out)
}

async fn handle(State(st): State<Arc<ServerState>>, req: Request) -> Response {
    let method = req.method().clone();
    if method != Method::GET && method != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "405 method not allowed");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let raw = req.uri().path().to_string();
    let Ok(segments) = safe_segments(&raw) else {
        return bad_request();
    };
    // An archive being written (or left by a writer that died) is never served: only the
    // renamed, complete file is an artifact.
    if segments.iter().any(|s| is_temp_name(s)) {
        return not_found();
    }
    let mut path = st.root.clone();
    for s in &segments {
        path.push(s);
    }
    // Resolve symlinks and make sure the target is still inside the root.
    let real = match tokio::fs::canonicalize(&path).await {
        Ok(p) => p,
        Err(_) => return not_found(),
    };
    if !real.starts_with(&st.root) {
        return not_found();
    }
    let md = match tokio::fs::metadata(&real).await {
        Ok(m) => m,
        Err(_) => return not_found(),
    };
    if raw.ends_with("/index.html") {
        return redirect("./");
    }
    if md.is_dir() {
        if !raw.ends_with('/') {
            let base = segments.last().map(String::as_str).unwrap_or("");
            return redirect(&format!("{}/", escape_path(base)));
        }
        let index = real.join("index.html");
        if let Ok(imd) = tokio::fs::metadata(&index).await
            && imd.is_file()
        {
            return serve_file(&index, &imd, req.headers(), &method).await;
        }
        return list_dir(&real, &method).await;
    }
    if raw.ends_with('/') {
        let base = segments.last().map(String::as_str).unwrap_or("");
        return redirect(&format!("../{}", escape_path(base)));
    }
    serve_file(&real, &md, req.headers(), &method).await
}

fn http_date(t: SystemTime) -> Option<String> {
    let secs = t.duration_since(UNIX_EPOCH).ok()?.as_secs();
    let ts = jiff::Timestamp::from_second(i64::try_from(secs).ok()?).ok()?;
    jiff::fmt::rfc2822::DateTimePrinter::new()
        .timestamp_to_rfc9110_string(&ts)
        .ok()
}

fn parse_http_date(s: &str) -> Option<i64> {
    jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(s)
        .ok()
        .map(|t| t.as_second())
}

/// Go's built-in `mime` extension table.
fn type_by_extension(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "avif" => "image/avif",
        "css" => "text/css; charset=utf-8",
        "gif" => "image/gif",
        "htm" | "html" => "text/html; charset=utf-8",
        "jpeg" | "jpg" => "image/jpeg",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "pdf" => "application/pdf",
        "png" => "image/png",
        "svg" => "image/svg+xml",
        "wasm" => "application/wasm",
        "webp" => "image/webp",
        "xml" => "text/xml; charset=utf-8",
        _ => return None,
    })
}

/// A subset of Go's `http.DetectContentType`.
pub fn sniff(head: &[u8]) -> &'static str {
    const SIGS: &[(&[u8], &str)] = &[
        (b"\x1f\x8b\x08", "application/x-gzip"),
        (b"PK\x03\x04", "application/zip"),
        (b"%PDF-", "application/pdf"),
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"GIF87a", "image/gif"),
        (b"GIF89a", "image/gif"),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"BZh", "application/x-bzip2"),
        (b"\x00asm", "application/wasm"),
    ];
    for (sig, ct) in SIGS {
        if head.starts_with(sig) {
            return ct;
        }
    }
    if head.starts_with(b"\xfe\xff") || head.starts_with(b"\xff\xfe") {
        return "text/plain; charset=utf-16";
    }
    let binary = head.iter().any(|&c| {
        c <= 0x08 || c == 0x0b || (0x0e..=0x1a).contains(&c) || (0x1c..=0x1f).contains(&c)
    });
    if binary {
        "application/octet-stream"
    } else {
        "text/plain; charset=utf-8"
    }
}

/// Parses a `Range` header against `size`: `Ok(None)` = serve everything, `Ok(Some((start,
/// len)))` = one satisfiable range.
pub fn parse_range(value: &str, size: u64) -> Result<Option<(u64, u64)>, UnsatisfiableRange> {
    let e = UnsatisfiableRange;
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return Ok(None);
    };
    if spec.contains(',') {
        // Multiple ranges are not supported: answer with the whole file.
        return Ok(None);
    }
    let (a, b) = spec.trim().split_once('-').ok_or(e)?;
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        let n: u64 = b.parse().map_err(|_| e)?;
        if n == 0 || size == 0 {
            return Err(e);
        }
        let n = n.min(size);
        return Ok(Some((size - n, n)));
    }
    let start: u64 = a.parse().map_err(|_| e)?;
    if start >= size {
        return Err(e);
    }
    let end = if b.is_empty() {
        size - 1
    } else {
        let last: u64 = b.parse().map_err(|_| e)?;
        if last < start {
            return Err(e);
        }
        last.min(size - 1)
    };
    Ok(Some((start, end - start + 1)))
}

async fn serve_file(
    path: &Path,
    md: &std::fs::Metadata,
    headers: &HeaderMap,
    method: &Method,
) -> Response {
    let mut file = match tokio::fs::File::open(path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return plain(StatusCode::FORBIDDEN, "403 Forbidden");
        }
        Err(_) => return not_found(),
    };
    let size = md.len();
    let mtime = md.modified().ok();
    let last_modified = mtime.and_then(http_date);

    if let (Some(m), Some(ims)) = (
        mtime,
        headers
            .get(header::IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_http_date),
    ) && headers.get(header::IF_NONE_MATCH).is_none()
        && let Ok(d) = m.duration_since(UNIX_EPOCH)
        && i64::try_from(d.as_secs()).is_ok_and(|s| s <= ims)
    {
        let mut r = StatusCode::NOT_MODIFIED.into_response();
        if let Some(lm) = &last_modified
            && let Ok(v) = HeaderValue::from_str(lm)
        {
            r.headers_mut().insert(header::LAST_MODIFIED, v);
        }
        return r;
    }

    let ctype = match type_by_extension(path) {
        Some(t) => t,
        None => {
            let mut head = vec![0u8; 512.min(size as usize)];
            if file.read_exact(&mut head).await.is_err() {
                return plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "500 internal server error",
                );
            }
            sniff(&head)
        }
    };

    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(|v| parse_range(v, size))
        .unwrap_or(Ok(None));
    let (status, start, len) = match range {
        Ok(None) => (StatusCode::OK, 0, size),
        Ok(Some((s, l))) => (StatusCode::PARTIAL_CONTENT, s, l),
        Err(UnsatisfiableRange) => {
            let mut r = plain(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "invalid range: failed to overlap",
            );
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return r;
        }
    };

    let mut builder = Response::builder()
        .status(status)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::CONTENT_TYPE, ctype)
        .header(header::CONTENT_LENGTH, len.to_string());
    if let Some(lm) = &last_modified {
        builder = builder.header(header::LAST_MODIFIED, lm);
    }
    if status == StatusCode::PARTIAL_CONTENT {
        builder = builder.header(
            header::CONTENT_RANGE,
            format!("bytes {}-{}/{}", start, start + len.saturating_sub(1), size),
        );
    }
    let body = if *method == Method::HEAD {
        Body::empty()
    } else {
        if file.seek(SeekFrom::Start(start)).await.is_err() {
            return plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "500 internal server error",
            );
        }
        let stream = futures::stream::unfold((file, len), |(mut f, left)| async move {
            if left == 0 {
                return None;
            }
            let want = usize::try_from(left).unwrap_or(CHUNK).min(CHUNK);
            let mut buf = vec![0u8; want];
            match f.read(&mut buf).await {
                Ok(0) => Some((
                    Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "file shrank while serving",
                    )),
                    (f, 0),
                )),
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(Bytes::from(buf)), (f, left - n as u64)))
                }
                Err(e) => Some((Err(e), (f, 0))),
            }
        });
        Body::from_stream(stream)
    };
    builder.body(body).unwrap_or_else(|_| {
        plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "500 internal server error",
        )
    })
}

fn escape_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Whether a file name is one of the temporary files [`super::Storage::archive`] writes before
/// the rename.
fn is_temp_name(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX)
}

async fn list_dir(dir: &Path, method: &Method) -> Response {
    let mut rd = match tokio::fs::read_dir(dir).await {
        Ok(rd) => rd,
        Err(_) => return plain(StatusCode::INTERNAL_SERVER_ERROR, "Error reading directory"),
    };
    let mut entries = Vec::new();
    loop {
        match rd.next_entry().await {
            Ok(Some(e)) => {
                let name = e.file_name().to_string_lossy().into_owned();
                if is_temp_name(&name) {
                    continue;
                }
                let is_dir = e.file_type().await.is_ok_and(|t| t.is_dir());
                entries.push((name, is_dir));
            }
            Ok(None) => break,
            Err(_) => return plain(StatusCode::INTERNAL_SERVER_ERROR, "Error reading directory"),
        }
    }
    entries.sort();
    let mut html = String::from(
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
    );
    for (name, is_dir) in entries {
        let name = if is_dir { format!("{name}/") } else { name };
        let href = if name.contains(':') {
            format!("./{}", escape_path(&name).replace("%2F", "/"))
        } else {
            escape_path(&name).replace("%2F", "/")
        };
        html.push_str(&format!("<a href=\"{href}\">{}</a>\n", escape_html(&name)));
    }
    html.push_str("</pre>\n");
    let len = html.len();
    let body = if *method == Method::HEAD {
        Body::empty()
    } else {
        Body::from(html)
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CONTENT_LENGTH, len.to_string())
        .body(body)
        .unwrap_or_else(|_| {
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "500 internal server error",
            )
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn segments_refuse_traversal() {
        assert_eq!(safe_segments("/a/b.tar.gz").unwrap(), vec!["a", "b.tar.gz"]);
        assert_eq!(safe_segments("//a/./b").unwrap(), vec!["a", "b"]);
        assert!(safe_segments("/../etc/passwd").is_err());
        assert!(safe_segments("/a/%2e%2e/%2E%2E/etc").is_err());
        assert!(safe_segments("/a%2f..%2fb").is_err());
        assert!(safe_segments("/a%00").is_err());
        assert!(safe_segments("/a%zz").is_err());
        assert!(safe_segments("/a%2").is_err());
        assert_eq!(safe_segments("/a%20b").unwrap(), vec!["a b"]);
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Ok(Some((0, 10))));
        assert_eq!(parse_range("bytes=90-", 100), Ok(Some((90, 10))));
        assert_eq!(parse_range("bytes=-5", 100), Ok(Some((95, 5))));
        assert_eq!(parse_range("bytes=95-200", 100), Ok(Some((95, 5))));
        assert_eq!(parse_range("bytes=100-", 100), Err(UnsatisfiableRange));
        assert_eq!(parse_range("bytes=5-1", 100), Err(UnsatisfiableRange));
        assert_eq!(parse_range("bytes=0-1,3-4", 100), Ok(None));
        assert_eq!(parse_range("items=0-1", 100), Ok(None));
    }

    #[test]
    fn content_types() {
        assert_eq!(sniff(b"\x1f\x8b\x08\x00\x00"), "application/x-gzip");
        assert_eq!(sniff(b"apiVersion: v1\n"), "text/plain; charset=utf-8");
        assert_eq!(sniff(b""), "text/plain; charset=utf-8");
        assert_eq!(sniff(b"\x00\x01\x02"), "application/octet-stream");
        assert_eq!(
            type_by_extension(Path::new("x.json")),
            Some("application/json")
        );
        assert_eq!(type_by_extension(Path::new("x.tar.gz")), None);
    }

    #[test]
    fn http_dates_round_trip() {
        let t = UNIX_EPOCH + std::time::Duration::from_secs(784_111_777);
        let s = http_date(t).unwrap();
        assert_eq!(s, "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(parse_http_date(&s), Some(784_111_777));
    }
}
