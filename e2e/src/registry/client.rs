//! A minimal raw OCI distribution client for tests: monolithic blob uploads (POST then PUT),
//! manifest PUT of arbitrary bytes under any media type, and reads back. It answers Basic and
//! Bearer challenges (the token from the realm, with Basic credentials), so it works against
//! every [`super::RegistryMode`]. Every response body is read with a byte limit and every
//! request has a timeout.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use base64::Engine;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use sha2::{Digest as _, Sha256};

use super::error::RegistryError;

type Result<T, E = RegistryError> = std::result::Result<T, E>;

/// Media types the tests meet.
pub mod media_types {
    pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
    pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
    pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
    pub const DOCKER_MANIFEST_LIST: &str =
        "application/vnd.docker.distribution.manifest.list.v2+json";
    pub const FLUX_CONFIG: &str = "application/vnd.cncf.flux.config.v1+json";
    pub const FLUX_CONTENT: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";
    pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
}

/// Largest manifest read back (distribution refuses bigger ones on PUT).
pub const MAX_MANIFEST: usize = 4 * 1024 * 1024;
/// Largest error or token body read.
const MAX_SMALL_BODY: usize = 64 * 1024;
/// Per-request timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `fut` to completion on a fresh current-thread runtime in a new thread, so sync code
/// can call the async client from anywhere (inside a runtime too).
pub(crate) fn block_on<T: Send + 'static>(
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let handle = std::thread::Builder::new()
        .name("registry-block-on".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| RegistryError::io("building a tokio runtime", e))?;
            rt.block_on(fut)
        })
        .map_err(|e| RegistryError::io("starting a thread", e))?;
    handle.join().map_err(|_| RegistryError::Protocol {
        what: "registry client thread".into(),
        message: "panicked".into(),
    })?
}

/// What a client built by [`super::Registry::client_with`] carries.
#[derive(Clone, Debug, Default)]
pub struct ClientOptions {
    /// Basic credentials (sent on a Basic challenge, or to the realm of a Bearer challenge).
    pub credentials: Option<(String, String)>,
    /// Present the registry's client certificate (TLS modes).
    pub client_cert: bool,
    /// Trust the registry's CA (TLS modes).
    pub trust_ca: bool,
}

/// An OCI descriptor, for building (possibly lying) manifests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    /// Signed, so a test can even claim a negative size.
    pub size: i64,
    pub annotations: Vec<(String, String)>,
    /// `(os, architecture)`, for index entries.
    pub platform: Option<(String, String)>,
}

impl Descriptor {
    /// The truthful descriptor of `bytes`.
    pub fn of(media_type: &str, bytes: &[u8]) -> Descriptor {
        Descriptor {
            media_type: media_type.to_string(),
            digest: sha256_digest(bytes),
            size: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
            annotations: Vec::new(),
            platform: None,
        }
    }

    /// The descriptor as JSON (OCI field names).
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        });
        if !self.annotations.is_empty() {
            v["annotations"] = annotations_json(&self.annotations);
        }
        if let Some((os, arch)) = &self.platform {
            v["platform"] = serde_json::json!({"architecture": arch, "os": os});
        }
        v
    }
}

fn annotations_json(pairs: &[(String, String)]) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = pairs
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::Value::Object(map)
}

/// An OCI image manifest (`schemaVersion: 2`) with these descriptors and annotations.
pub fn image_manifest(
    config: &Descriptor,
    layers: &[Descriptor],
    annotations: &[(String, String)],
) -> Vec<u8> {
    let mut v = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": media_types::OCI_MANIFEST,
        "config": config.to_json(),
        "layers": layers.iter().map(Descriptor::to_json).collect::<Vec<_>>(),
    });
    if !annotations.is_empty() {
        v["annotations"] = annotations_json(annotations);
    }
    v.to_string().into_bytes()
}

/// An OCI image index listing `manifests`.
pub fn image_index(manifests: &[Descriptor]) -> Vec<u8> {
    serde_json::json!({
        "schemaVersion": 2,
        "mediaType": media_types::OCI_INDEX,
        "manifests": manifests.iter().map(Descriptor::to_json).collect::<Vec<_>>(),
    })
    .to_string()
    .into_bytes()
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// A manifest as the registry served it.
#[derive(Clone, Debug)]
pub struct FetchedManifest {
    /// `Content-Type` of the answer.
    pub media_type: String,
    /// `Docker-Content-Digest` of the answer.
    pub digest_header: Option<String>,
    /// `sha256:` of the bytes received.
    pub digest: String,
    pub bytes: Bytes,
}

impl FetchedManifest {
    /// The bytes parsed as JSON.
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.bytes).map_err(|e| RegistryError::Protocol {
            what: "parsing the manifest".into(),
            message: e.to_string(),
        })
    }
}

/// What `GET /v2/` answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ping {
    pub status: u16,
    /// `WWW-Authenticate`, if any.
    pub challenge: Option<String>,
}

/// The raw client. Cheap to clone; bound to the tokio runtime it is first used on.
#[derive(Clone, Debug)]
pub struct RegistryClient {
    base: String,
    http: reqwest::Client,
    credentials: Option<(String, String)>,
    /// The `Authorization` value that last worked (reused until a new challenge).
    auth: Arc<Mutex<Option<HeaderValue>>>,
}

impl RegistryClient {
    /// A client for `base` (`http(s)://127.0.0.1:<port>`), trusting `ca_pem`, presenting
    /// `identity_pem` (certificate then key) and answering challenges with `credentials`.
    pub fn new(
        base: &str,
        ca_pem: Option<&str>,
        identity_pem: Option<&str>,
        credentials: Option<(String, String)>,
    ) -> Result<RegistryClient> {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Losing a race with another installer is fine: a provider is set either way.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let what = |w: &str| {
            let w = w.to_string();
            move |source| RegistryError::Http { what: w, source }
        };
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::limited(5))
            .connect_timeout(Duration::from_secs(5))
            .timeout(REQUEST_TIMEOUT);
        if let Some(ca) = ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(ca.as_bytes())
                .map_err(what("parsing the registry CA"))?;
            builder = builder.tls_certs_merge(certs);
        }
        if let Some(id) = identity_pem {
            let identity = reqwest::Identity::from_pem(id.as_bytes())
                .map_err(what("parsing the client certificate"))?;
            builder = builder.identity(identity);
        }
        let http = builder.build().map_err(what("building the HTTP client"))?;
        Ok(RegistryClient {
            base: base.trim_end_matches('/').to_string(),
            http,
            credentials,
            auth: Arc::new(Mutex::new(None)),
        })
    }

    /// An unauthenticated `GET /v2/` (no challenge answered).
    pub async fn ping(&self) -> Result<Ping> {
        let resp = self
            .http
            .get(format!("{}/v2/", self.base))
            .send()
            .await
            .map_err(|source| RegistryError::Http {
                what: format!("GET {}/v2/", self.base),
                source,
            })?;
        Ok(Ping {
            status: resp.status().as_u16(),
            challenge: header_string(resp.headers(), "www-authenticate"),
        })
    }

    /// The status of `GET /v2/` after answering a challenge with the credentials.
    pub async fn ping_with_auth(&self) -> Result<u16> {
        let url = format!("{}/v2/", self.base);
        let resp = self
            .send("GET /v2/", Method::GET, &url, HeaderMap::new(), None)
            .await?;
        Ok(resp.status().as_u16())
    }

    /// Uploads `bytes` as a blob of `repo` (POST to start, PUT with `?digest=`); returns
    /// `sha256:<hex>`.
    pub async fn push_raw_blob(&self, repo: &str, bytes: Bytes) -> Result<String> {
        let digest = sha256_digest(&bytes);
        let what = format!("uploading blob {digest} to {repo}");
        let url = format!("{}/v2/{}/blobs/uploads/", self.base, repo_path(repo));
        let resp = self
            .send(&what, Method::POST, &url, HeaderMap::new(), None)
            .await?;
        let resp = expect(resp, StatusCode::ACCEPTED, &what).await?;
        let location = resp
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| RegistryError::Protocol {
                what: what.clone(),
                message: "no Location in the upload answer".into(),
            })?;
        let mut put_url = if location.starts_with("http://") || location.starts_with("https://") {
            location.to_string()
        } else {
            format!("{}/{}", self.base, location.trim_start_matches('/'))
        };
        put_url.push(if put_url.contains('?') { '&' } else { '?' });
        put_url.push_str("digest=");
        put_url.push_str(&digest.replace(':', "%3A"));
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        let resp = self
            .send(&what, Method::PUT, &put_url, headers, Some(bytes))
            .await?;
        expect(resp, StatusCode::CREATED, &what).await?;
        Ok(digest)
    }

    /// Puts `bytes` as manifest `reference` (tag or digest) of `repo` with `Content-Type:
    /// media_type`; returns `sha256:` of the bytes, checked against `Docker-Content-Digest`.
    pub async fn push_raw_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<String> {
        let digest = sha256_digest(&bytes);
        let what = format!("putting manifest {repo}:{reference}");
        let url = format!("{}/v2/{}/manifests/{reference}", self.base, repo_path(repo));
        let mut headers = HeaderMap::new();
        let content_type =
            HeaderValue::from_str(media_type).map_err(|e| RegistryError::Protocol {
                what: what.clone(),
                message: format!("media type {media_type:?}: {e}"),
            })?;
        headers.insert(header::CONTENT_TYPE, content_type);
        let resp = self
            .send(&what, Method::PUT, &url, headers, Some(bytes))
            .await?;
        let resp = expect(resp, StatusCode::CREATED, &what).await?;
        let stored = header_string(resp.headers(), "docker-content-digest");
        if stored.as_deref().is_some_and(|d| d != digest) {
            return Err(RegistryError::Protocol {
                what,
                message: format!("the registry stored {stored:?}, the bytes are {digest}"),
            });
        }
        Ok(digest)
    }

    /// Pushes a Flux-shaped artifact made of raw parts: an empty JSON config
    /// (`application/vnd.cncf.flux.config.v1+json`), `layer` under `layer_media_type`, and a
    /// manifest with `annotations`, tagged `tag`. Returns the manifest digest.
    pub async fn push_raw_artifact(
        &self,
        repo: &str,
        tag: &str,
        layer: Bytes,
        layer_media_type: &str,
        annotations: &[(String, String)],
    ) -> Result<String> {
        let config = Bytes::from_static(b"{}");
        let config_desc = Descriptor::of(media_types::FLUX_CONFIG, &config);
        let layer_desc = Descriptor::of(layer_media_type, &layer);
        self.push_raw_blob(repo, config).await?;
        self.push_raw_blob(repo, layer).await?;
        let manifest = image_manifest(&config_desc, &[layer_desc], annotations);
        self.push_raw_manifest(repo, tag, media_types::OCI_MANIFEST, manifest.into())
            .await
    }

    /// `GET` manifest `reference` of `repo`, accepting OCI and Docker manifests and indexes.
    pub async fn get_manifest(&self, repo: &str, reference: &str) -> Result<FetchedManifest> {
        let what = format!("getting manifest {repo}:{reference}");
        let url = format!("{}/v2/{}/manifests/{reference}", self.base, repo_path(repo));
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static(
                "application/vnd.oci.image.manifest.v1+json, \
                 application/vnd.oci.image.index.v1+json, \
                 application/vnd.docker.distribution.manifest.v2+json, \
                 application/vnd.docker.distribution.manifest.list.v2+json",
            ),
        );
        let resp = self.send(&what, Method::GET, &url, headers, None).await?;
        let resp = expect(resp, StatusCode::OK, &what).await?;
        let media_type = header_string(resp.headers(), "content-type").unwrap_or_default();
        let digest_header = header_string(resp.headers(), "docker-content-digest");
        let bytes = read_limited(resp, MAX_MANIFEST, &what).await?;
        Ok(FetchedManifest {
            media_type,
            digest_header,
            digest: sha256_digest(&bytes),
            bytes,
        })
    }

    /// `GET` blob `digest` of `repo`, at most `limit` bytes.
    pub async fn get_blob(&self, repo: &str, digest: &str, limit: usize) -> Result<Bytes> {
        let what = format!("getting blob {repo}@{digest}");
        let url = format!("{}/v2/{}/blobs/{digest}", self.base, repo_path(repo));
        let resp = self
            .send(&what, Method::GET, &url, HeaderMap::new(), None)
            .await?;
        let resp = expect(resp, StatusCode::OK, &what).await?;
        read_limited(resp, limit, &what).await
    }

    /// The tags of `repo` (`GET /v2/<repo>/tags/list`, first 1000).
    pub async fn tags(&self, repo: &str) -> Result<Vec<String>> {
        let what = format!("listing the tags of {repo}");
        let url = format!("{}/v2/{}/tags/list?n=1000", self.base, repo_path(repo));
        let resp = self
            .send(&what, Method::GET, &url, HeaderMap::new(), None)
            .await?;
        let resp = expect(resp, StatusCode::OK, &what).await?;
        let body = read_limited(resp, MAX_MANIFEST, &what).await?;
        let v: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| RegistryError::Protocol {
                what: what.clone(),
                message: e.to_string(),
            })?;
        Ok(v["tags"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Deletes manifest `digest` of `repo` (the registry has deletes enabled).
    pub async fn delete_manifest(&self, repo: &str, digest: &str) -> Result<()> {
        let what = format!("deleting manifest {repo}@{digest}");
        let url = format!("{}/v2/{}/manifests/{digest}", self.base, repo_path(repo));
        let resp = self
            .send(&what, Method::DELETE, &url, HeaderMap::new(), None)
            .await?;
        expect(resp, StatusCode::ACCEPTED, &what).await?;
        Ok(())
    }

    /// Sends a request with the last working `Authorization`; on a 401 with a challenge and
    /// credentials at hand, answers the challenge and retries once.
    async fn send(
        &self,
        what: &str,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Option<Bytes>,
    ) -> Result<reqwest::Response> {
        let mut auth = self
            .auth
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut answered = false;
        loop {
            let mut req = self
                .http
                .request(method.clone(), url)
                .headers(headers.clone());
            if let Some(a) = &auth {
                req = req.header(header::AUTHORIZATION, a.clone());
            }
            if let Some(b) = &body {
                req = req.body(b.clone());
            }
            let resp = req.send().await.map_err(|source| RegistryError::Http {
                what: what.to_string(),
                source,
            })?;
            if resp.status() != StatusCode::UNAUTHORIZED || answered {
                return Ok(resp);
            }
            let Some((user, password)) = &self.credentials else {
                return Ok(resp);
            };
            let Some(challenge) = header_string(resp.headers(), "www-authenticate") else {
                return Ok(resp);
            };
            let value = self.answer(&challenge, user, password).await?;
            *self.auth.lock().unwrap_or_else(PoisonError::into_inner) = Some(value.clone());
            auth = Some(value);
            answered = true;
        }
    }

    /// The `Authorization` value answering `challenge`.
    async fn answer(&self, challenge: &str, user: &str, password: &str) -> Result<HeaderValue> {
        let what = format!("answering the challenge {challenge:?}");
        let protocol = |message: String| RegistryError::Protocol {
            what: what.clone(),
            message,
        };
        let (scheme, params) = parse_challenge(challenge);
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let value = if scheme.eq_ignore_ascii_case("basic") {
            format!("Basic {basic}")
        } else if scheme.eq_ignore_ascii_case("bearer") {
            let param = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            let realm = param("realm").ok_or_else(|| protocol("no realm".into()))?;
            let mut url = reqwest::Url::parse(&realm).map_err(|e| protocol(e.to_string()))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(protocol(format!("realm scheme {}", url.scheme())));
            }
            {
                let mut q = url.query_pairs_mut();
                if let Some(service) = param("service") {
                    q.append_pair("service", &service);
                }
                if let Some(scope) = param("scope") {
                    q.append_pair("scope", &scope);
                }
            }
            let resp = self
                .http
                .get(url)
                .header(header::AUTHORIZATION, format!("Basic {basic}"))
                .send()
                .await
                .map_err(|source| RegistryError::Http {
                    what: what.clone(),
                    source,
                })?;
            let resp = expect(resp, StatusCode::OK, &what).await?;
            let body = read_limited(resp, MAX_SMALL_BODY, &what).await?;
            let json: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| protocol(e.to_string()))?;
            let token = json["token"]
                .as_str()
                .or_else(|| json["access_token"].as_str())
                .filter(|t| !t.is_empty())
                .ok_or_else(|| protocol("no token in the answer".into()))?;
            format!("Bearer {token}")
        } else {
            return Err(protocol(format!("unknown scheme {scheme:?}")));
        };
        HeaderValue::from_str(&value).map_err(|e| protocol(e.to_string()))
    }
}

/// `Bearer realm="r",service="s",scope="a:b:c,d"` → ("Bearer", [(realm, r), …]).
pub(crate) fn parse_challenge(header: &str) -> (String, Vec<(String, String)>) {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    let mut params = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            value = chars.by_ref().take_while(|c| *c != ',').collect();
        }
        params.push((key.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    (scheme.to_string(), params)
}

fn repo_path(repo: &str) -> &str {
    repo.trim_matches('/')
}

fn header_string(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(String::from)
}

/// The response when its status is `want`, else an error carrying the (bounded) body.
async fn expect(
    resp: reqwest::Response,
    want: StatusCode,
    what: &str,
) -> Result<reqwest::Response> {
    if resp.status() == want {
        return Ok(resp);
    }
    let status = resp.status().as_u16();
    let body = read_limited(resp, MAX_SMALL_BODY, what)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|e| format!("(body not read: {e})"));
    Err(RegistryError::Status {
        what: what.to_string(),
        status,
        body,
    })
}

/// The whole body, refusing more than `limit` bytes.
async fn read_limited(mut resp: reqwest::Response, limit: usize, what: &str) -> Result<Bytes> {
    let too_large = || RegistryError::TooLarge {
        what: what.to_string(),
        limit,
    };
    if resp
        .content_length()
        .is_some_and(|n| usize::try_from(n).map_or(true, |n| n > limit))
    {
        return Err(too_large());
    }
    let mut buf = BytesMut::new();
    while let Some(chunk) = resp.chunk().await.map_err(|source| RegistryError::Http {
        what: what.to_string(),
        source,
    })? {
        if buf.len() + chunk.len() > limit {
            return Err(too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse() {
        let (scheme, params) = parse_challenge(
            r#"Bearer realm="http://127.0.0.1:1/token",service="svc",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(scheme, "Bearer");
        assert_eq!(
            params,
            vec![
                ("realm".into(), "http://127.0.0.1:1/token".into()),
                ("service".into(), "svc".into()),
                ("scope".into(), "repository:a/b:pull,push".into()),
            ]
        );
        let (scheme, params) = parse_challenge(r#"Basic realm="basic-realm""#);
        assert_eq!(scheme, "Basic");
        assert_eq!(params, vec![("realm".into(), "basic-realm".into())]);
        let (_, params) = parse_challenge(r#"Bearer realm=plain, error="a\"b""#);
        assert_eq!(
            params,
            vec![
                ("realm".into(), "plain".into()),
                ("error".into(), "a\"b".into())
            ]
        );
    }

    #[test]
    fn manifests_are_built_as_told() {
        let layer = Descriptor {
            size: -5,
            ..Descriptor::of(media_types::FLUX_CONTENT, b"abc")
        };
        let config = Descriptor::of(media_types::FLUX_CONFIG, b"{}");
        let bytes = image_manifest(&config, &[layer], &[("k".into(), "v".into())]);
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["schemaVersion"], 2);
        assert_eq!(v["layers"][0]["size"], -5);
        assert_eq!(
            v["layers"][0]["digest"],
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(v["annotations"]["k"], "v");
        let child = Descriptor {
            platform: Some(("linux".into(), "amd64".into())),
            ..Descriptor::of(media_types::OCI_MANIFEST, &bytes)
        };
        let index: serde_json::Value = serde_json::from_slice(&image_index(&[child])).unwrap();
        assert_eq!(index["mediaType"], media_types::OCI_INDEX);
        assert_eq!(index["manifests"][0]["platform"]["architecture"], "amd64");
    }
}
