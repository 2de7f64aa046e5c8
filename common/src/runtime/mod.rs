//! Controller plumbing shared by both binaries: Flux-named flags, Kubernetes client with
//! client-side throttling, zap-shaped JSON logs, Prometheus metrics with Flux/controller-runtime
//! names, health and metrics servers, Lease leader election, kstatus conditions, events,
//! finalizers, jittered requeues, graceful shutdown, and a kube-runtime controller runner.

pub mod client;
pub mod conditions;
pub mod controller;
pub mod duration;
pub mod events;
pub mod fence;
pub mod finalizers;
pub mod flags;
pub mod jitter;
pub mod leader;
pub mod logging;
pub mod manager;
pub mod metrics;
pub mod process;
pub mod server;
pub mod sharding;
pub mod shutdown;
pub mod stage;

pub use client::{ClientError, ClientOptions, build_clients};
pub use controller::{
    ControllerSettings, flux_predicate, run_controller, run_controller_sharded, run_controller_with,
};
pub use duration::{DurationError, format_go_duration, parse_go_duration};
pub use events::{EventRecorder, EventType};
pub use flags::{LeaderElectionFlags, LogEncoding, LogLevel, RuntimeFlags, ShardingFlags};
pub use jitter::{RetryBackoff, backoff_delay, jittered};
pub use leader::{LeaderElectionConfig, LeaderElector, LeaderError};
pub use logging::init_logging;
pub use manager::{Manager, ManagerTasks};
pub use metrics::{ControllerMetrics, Metrics, MetricsError, ReconcileResult};
pub use server::{Readiness, ServerError};
pub use stage::{Severity, StageError};

/// Top-level runtime error (what `main` reports before exiting non-zero).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// Kubernetes client setup.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Metrics registry.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// HTTP servers.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// A listen address flag.
    #[error(transparent)]
    Addr(#[from] flags::AddrError),
    /// `--feature-gates`.
    #[error(transparent)]
    FeatureGate(#[from] flags::FeatureGateError),
    /// Logger installation.
    #[error(transparent)]
    Logging(#[from] logging::LoggingError),
    /// `--events-addr`.
    #[error(transparent)]
    Webhook(#[from] events::WebhookError),
    /// Leader election.
    #[error(transparent)]
    Leader(#[from] LeaderError),
    /// Leadership was lost while controllers ran.
    #[error("leader election lost")]
    LeadershipLost,
    /// A controller failed.
    #[error("{0}")]
    Controller(String),
}

/// Re-exported so callers (binaries, e2e tests) need no direct tokio-util dependency.
pub use tokio_util::sync::CancellationToken;
