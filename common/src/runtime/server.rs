//! Health (`/healthz`, `/readyz` at `--health-addr`) and metrics (`/metrics` at `--metrics-addr`)
//! HTTP servers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;

/// Server errors.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listener could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The server failed while running.
    #[error("server on {addr} failed: {source}")]
    Serve {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Shared readiness flag: `/readyz` answers 200 once it is set (client connected, caches synced).
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Not ready yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets readiness.
    pub fn set_ready(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }
    /// Current readiness.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(ready): State<Readiness>) -> Response {
    if ready.is_ready() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "[-]ping failed: reason withheld\nreadyz check failed",
        )
            .into_response()
    }
}

/// Router with `/healthz` (always ok while the process serves) and `/readyz`.
pub fn health_router(ready: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/healthz/ping", get(healthz))
        .route("/readyz", get(readyz))
        .route("/readyz/ping", get(readyz))
        .with_state(ready)
}

async fn metrics_handler(State(metrics): State<Metrics>) -> Response {
    match metrics.encode() {
        Ok(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Router with `/metrics`.
pub fn metrics_router(metrics: Metrics) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .with_state(metrics)
}

/// Binds a listener (separately from serving so bind errors surface at start-up).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// Serves `router` on `listener` until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(|source| ServerError::Serve { addr, source })
}
