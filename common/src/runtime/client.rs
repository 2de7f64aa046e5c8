//! Kubernetes client: kubeconfig (`--kubeconfig`, `KUBECONFIG`, `~/.kube/config`) or in-cluster
//! config, with client-side rate limiting (`--kube-api-qps`, `--kube-api-burst`, a token bucket
//! like client-go's) and `rest_client_requests_total` accounting.
//!
//! As in Flux (`fluxcd/pkg/runtime/client`), the client-side limit is turned off when the API
//! server runs API Priority and Fairness (it answers `/livez/ping` with the
//! `X-Kubernetes-PF-FlowSchema-UID` header): the server then does the flow control, and the
//! flags are ignored.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::{Request, Response};
use futures::future::BoxFuture;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tower::{Layer, Service};

use super::fence::{FenceLayer, WriteFence};
use super::metrics::Metrics;

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No configuration was found (no kubeconfig and not in a cluster).
    #[error(
        "no Kubernetes configuration found (tried KUBECONFIG, ~/.kube/config and the in-cluster service account): {0}"
    )]
    Infer(#[source] kube::config::InferConfigError),
    /// The kubeconfig given with `--kubeconfig` could not be read.
    #[error("cannot read kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Path given.
        path: PathBuf,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The client could not be constructed (TLS, proxy, auth plugin...).
    #[error("cannot create the Kubernetes client: {0}")]
    Build(#[source] kube::Error),
    /// The API server did not answer the version probe.
    #[error("cannot reach the Kubernetes API server at {url}: {source}")]
    Connect {
        /// Cluster URL.
        url: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
}

/// Options of [`build_clients`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Explicit kubeconfig path (`--kubeconfig`); otherwise inferred.
    pub kubeconfig: Option<PathBuf>,
    /// Requests per second (`<= 0` disables throttling).
    pub qps: f32,
    /// Burst size.
    pub burst: u32,
}

/// Loads the client configuration: `--kubeconfig`, else `KUBECONFIG`/`~/.kube/config`, else
/// in-cluster.
pub async fn load_config(kubeconfig: Option<&PathBuf>) -> Result<Config, ClientError> {
    match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig {
                path: path.clone(),
                source,
            })?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                })
        }
        None => Config::infer().await.map_err(ClientError::Infer),
    }
}

/// Builds a client from `config` with throttling, request metrics and the write fence.
pub fn client_from_config(
    config: Config,
    qps: f32,
    burst: u32,
    metrics: Option<Metrics>,
    fence: WriteFence,
) -> Result<Client, ClientError> {
    let host = config
        .cluster_url
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let layer = ThrottleLayer {
        limiter: TokenBucket::new(f64::from(qps), burst).map(Arc::new),
        metrics,
        host,
    };
    let builder = kube::client::ClientBuilder::try_from(config).map_err(ClientError::Build)?;
    Ok(builder
        .with_layer(&layer)
        .with_layer(&FenceLayer::new(fence))
        .build())
}

/// A client from `config` (no throttling) whose writes pass `fence`: the clients a controller
/// builds per tenant (impersonation, remote clusters) are fenced like its own.
pub fn fenced_client(config: Config, fence: &WriteFence) -> Result<Client, ClientError> {
    let builder = kube::client::ClientBuilder::try_from(config).map_err(ClientError::Build)?;
    Ok(builder.with_layer(&FenceLayer::new(fence.clone())).build())
}

/// The header an API server running API Priority and Fairness puts on its answers.
pub const FLOW_SCHEMA_UID_HEADER: &str = "X-Kubernetes-PF-FlowSchema-UID";

/// Whether the API server runs API Priority and Fairness (Flux's `flowcontrol.IsEnabled`): a
/// `HEAD /livez/ping` answered with [`FLOW_SCHEMA_UID_HEADER`]. Any failure means no.
pub async fn flow_control_enabled(client: &Client) -> bool {
    let Ok(req) = Request::head("/livez/ping").body(Vec::new()) else {
        return false;
    };
    let probe = tokio::time::timeout(Duration::from_secs(10), client.send(req.map(Into::into)));
    match probe.await {
        Ok(Ok(resp)) => resp.headers().contains_key(FLOW_SCHEMA_UID_HEADER),
        _ => false,
    }
}

/// The client-side limit to use: none when the server does flow control, as Flux decides.
fn effective_limit(opts: &ClientOptions, flow_control: bool) -> (f32, u32) {
    if flow_control {
        (-1.0, 0)
    } else {
        (opts.qps, opts.burst)
    }
}

/// Loads the configuration once, builds the controllers' client (writes behind `fence`) and
/// the leader elector's own client (unfenced: its Lease writes open the fence; the same client
/// when `fence` never closes), and probes the API server once (`/version`), so a
/// misconfiguration fails fast with a clear error.
pub async fn build_clients(
    opts: &ClientOptions,
    metrics: Option<Metrics>,
    fence: WriteFence,
) -> Result<(Client, Client), ClientError> {
    let config = load_config(opts.kubeconfig.as_ref()).await?;
    let url = config.cluster_url.to_string();
    let probe = client_from_config(config.clone(), -1.0, 0, None, WriteFence::open())?;
    let flow_control = flow_control_enabled(&probe).await;
    let (qps, burst) = effective_limit(opts, flow_control);
    if flow_control {
        tracing::info!(
            "the API server runs API Priority and Fairness: client-side throttling is off (--kube-api-qps and --kube-api-burst ignored, as in Flux)"
        );
    }
    let lease_client = (!fence.allows_writes())
        .then(|| {
            client_from_config(
                config.clone(),
                qps,
                burst,
                metrics.clone(),
                WriteFence::open(),
            )
        })
        .transpose()?;
    let client = client_from_config(config, qps, burst, metrics, fence)?;
    let lease_client = lease_client.unwrap_or_else(|| client.clone());
    lease_client
        .apiserver_version()
        .await
        .map_err(|source| ClientError::Connect { url, source })?;
    Ok((client, lease_client))
}

/// A token bucket (golang.org/x/time/rate semantics: reservations may push the balance below
/// zero, and the caller waits until it would be back at zero).
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

/// Token balance at a point in time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketState {
    /// Available tokens (may be negative after reservations).
    pub tokens: f64,
    /// When `tokens` was computed.
    pub at: Instant,
}

/// Reserves one token: refills the bucket for the time elapsed since `state.at` (capped at
/// `burst`), takes one token, and returns the new state and how long the caller must wait.
pub fn reserve(state: BucketState, now: Instant, qps: f64, burst: f64) -> (BucketState, Duration) {
    let elapsed = now.saturating_duration_since(state.at).as_secs_f64();
    let refilled = (state.tokens + elapsed * qps).min(burst);
    let after = refilled - 1.0;
    let wait = if after >= 0.0 || qps <= 0.0 {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(-after / qps)
    };
    (
        BucketState {
            tokens: after,
            at: now.max(state.at),
        },
        wait,
    )
}

impl TokenBucket {
    /// A bucket allowing `qps` requests per second with bursts of `burst`; `None` when `qps <= 0`
    /// (throttling disabled).
    pub fn new(qps: f64, burst: u32) -> Option<Self> {
        if qps.is_nan() || qps <= 0.0 || !qps.is_finite() {
            return None;
        }
        let burst = f64::from(burst.max(1));
        Some(Self {
            qps,
            burst,
            state: Mutex::new(BucketState {
                tokens: burst,
                at: Instant::now(),
            }),
        })
    }

    /// Takes a token, returning how long to wait before using it.
    pub fn acquire(&self) -> Duration {
        let mut guard = match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let (next, wait) = reserve(*guard, Instant::now(), self.qps, self.burst);
        *guard = next;
        wait
    }
}

/// Tower layer adding throttling and request metrics to the kube client stack.
#[derive(Debug, Clone)]
pub struct ThrottleLayer {
    limiter: Option<Arc<TokenBucket>>,
    metrics: Option<Metrics>,
    host: String,
}

impl ThrottleLayer {
    /// New layer (`limiter: None` disables throttling).
    pub fn new(limiter: Option<Arc<TokenBucket>>, metrics: Option<Metrics>, host: String) -> Self {
        Self {
            limiter,
            metrics,
            host,
        }
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttle {
            inner,
            limiter: self.limiter.clone(),
            metrics: self.metrics.clone(),
            host: self.host.clone(),
            sleep: None,
            permitted: false,
        }
    }
}

/// Service produced by [`ThrottleLayer`].
pub struct Throttle<S> {
    inner: S,
    limiter: Option<Arc<TokenBucket>>,
    metrics: Option<Metrics>,
    host: String,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    permitted: bool,
}

impl<S, B, RB> Service<Request<B>> for Throttle<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.permitted {
            if let Some(limiter) = &self.limiter
                && self.sleep.is_none()
            {
                let wait = limiter.acquire();
                if !wait.is_zero() {
                    self.sleep = Some(Box::pin(tokio::time::sleep(wait)));
                }
            }
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            self.permitted = true;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.permitted = false;
        let method = req.method().as_str().to_string();
        let metrics = self.metrics.clone();
        let host = self.host.clone();
        let started = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            if let Some(m) = metrics {
                let code = match &res {
                    Ok(r) => r.status().as_str().to_string(),
                    Err(_) => "<error>".to_string(),
                };
                m.record_rest_request(&code, &method, &host, started.elapsed());
            }
            res
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod flow_control_tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-connection HTTP server answering every request with `headers`; the client to it.
    async fn server(headers: &'static str) -> Client {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let resp = format!(
                    "HTTP/1.1 200 OK\r\n{headers}content-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = s.write_all(resp.as_bytes()).await;
            }
        });
        let config = Config::new(format!("http://{addr}").parse().unwrap());
        client_from_config(config, -1.0, 0, None, WriteFence::open()).unwrap()
    }

    #[tokio::test]
    async fn throttling_follows_the_servers_flow_control() {
        let apf = server("X-Kubernetes-PF-FlowSchema-UID: 1234\r\n").await;
        assert!(flow_control_enabled(&apf).await);
        let plain = server("").await;
        assert!(!flow_control_enabled(&plain).await);
        let opts = ClientOptions {
            kubeconfig: None,
            qps: 50.0,
            burst: 300,
        };
        assert_eq!(effective_limit(&opts, true), (-1.0, 0));
        assert_eq!(effective_limit(&opts, false), (50.0, 300));
        // a server that is not there: no flow control, the flags hold
        let gone = Config::new("http://127.0.0.1:9".parse().unwrap());
        let gone = client_from_config(gone, -1.0, 0, None, WriteFence::open()).unwrap();
        assert!(!flow_control_enabled(&gone).await);
    }
}
