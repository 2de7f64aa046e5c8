//! Command-line flags with Flux's names and defaults: the ones both controllers take
//! ([`RuntimeFlags`], [`LeaderElectionFlags`]) and the parsing helpers they share (listen
//! addresses, feature gates, the runtime namespace). Each controller's own flags live in its
//! binary crate and flatten [`RuntimeFlags`].
//!
//! Go's `pflag` accepts `--flag=value` and `--flag value`; boolean flags accept `--flag`
//! and `--flag=false` (but not `--flag false`). The structs here follow the same rules so the
//! args of Flux's Deployments work unchanged.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};

use super::duration::clap_duration;

/// Log verbosity (`--log-level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Everything, including trace events.
    Trace,
    /// Debug and above.
    Debug,
    /// Info and above (Flux default).
    Info,
    /// Warnings and errors (accepted for convenience; Flux has no warn level).
    Warn,
    /// Errors only.
    Error,
}

/// Log encoding (`--log-encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogEncoding {
    /// One JSON object per line, shaped like controller-runtime's zap output.
    Json,
    /// Tab-separated human-readable lines.
    Console,
}

/// Leader-election flags (`--enable-leader-election` and friends).
#[derive(Debug, Clone, Args)]
pub struct LeaderElectionFlags {
    /// Enable leader election for the controller manager (a coordination.k8s.io/v1 Lease).
    #[arg(long = "enable-leader-election", action = ArgAction::Set, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", default_value_t = false)]
    pub enable: bool,
    /// Give up the lease when the process is cancelled (SIGTERM), so a successor takes over at once.
    #[arg(long = "leader-election-release-on-cancel", action = ArgAction::Set, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", default_value_t = true)]
    pub release_on_cancel: bool,
    /// How long non-leaders wait before trying to take over a lease that is not renewed.
    #[arg(long = "leader-election-lease-duration", default_value = "35s", value_parser = clap_duration)]
    pub lease_duration: Duration,
    /// How long the leader keeps retrying to renew before giving up leadership.
    #[arg(long = "leader-election-renew-deadline", default_value = "30s", value_parser = clap_duration)]
    pub renew_deadline: Duration,
    /// How long to wait between two acquire/renew attempts.
    #[arg(long = "leader-election-retry-period", default_value = "5s", value_parser = clap_duration)]
    pub retry_period: Duration,
}

/// Automatic sharding flags (docs/sharding.md).
#[derive(Debug, Clone, Args)]
pub struct ShardingFlags {
    /// Split the objects among the replicas of this controller by a stable hash, each share
    /// held through Leases (replaces leader election; off: unchanged behaviour).
    #[arg(long = "auto-sharding", action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value_t = false)]
    pub auto_sharding: bool,
    /// The number of shard slots the objects are hashed into (with `--auto-sharding`).
    #[arg(long = "shards", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub shards: u32,
}

/// Flags shared by both controllers.
#[derive(Debug, Clone, Args)]
pub struct RuntimeFlags {
    /// The address the Prometheus metric endpoint binds to (`0` disables it).
    #[arg(long, env = "METRICS_ADDR", default_value = ":8080")]
    pub metrics_addr: String,
    /// The address the health endpoint (/healthz, /readyz) binds to (`0` disables it).
    #[arg(long, default_value = ":9440")]
    pub health_addr: String,
    /// The address of the notification-controller events webhook (`http://` only).
    #[arg(long, env = "EVENTS_ADDR", default_value = "")]
    pub events_addr: String,
    /// Leader election.
    #[command(flatten)]
    pub leader_election: LeaderElectionFlags,
    /// Automatic sharding.
    #[command(flatten)]
    pub sharding: ShardingFlags,
    /// Log verbosity.
    #[arg(long, value_enum, default_value = "info")]
    pub log_level: LogLevel,
    /// Log encoding.
    #[arg(long, value_enum, default_value = "json")]
    pub log_encoding: LogEncoding,
    /// Watch objects in every namespace; when false only `RUNTIME_NAMESPACE` is watched.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value_t = true)]
    pub watch_all_namespaces: bool,
    /// Only watch objects that match this label selector (sharding).
    #[arg(long, default_value = "")]
    pub watch_label_selector: String,
    /// Client-side rate limit of the Kubernetes API client, in requests per second (0 disables it).
    #[arg(long, default_value_t = 50.0)]
    pub kube_api_qps: f32,
    /// Burst of the client-side rate limiter.
    #[arg(long, default_value_t = 300)]
    pub kube_api_burst: u32,
    /// Percentage of jitter applied to the success requeue interval (must be < 100).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u8).range(0..100))]
    pub interval_jitter_percentage: u8,
    /// Requeue delay when a dependency (source artifact, dependsOn) is not ready.
    #[arg(long, default_value = "30s", value_parser = clap_duration)]
    pub requeue_dependency: Duration,
    /// Smallest delay of the per-object exponential failure backoff.
    #[arg(long, default_value = "750ms", value_parser = clap_duration)]
    pub min_retry_delay: Duration,
    /// Largest delay of the per-object exponential failure backoff.
    #[arg(long, default_value = "15m", value_parser = clap_duration)]
    pub max_retry_delay: Duration,
    /// Default service account used for impersonation (kustomize-controller) or workload identity.
    #[arg(long, default_value = "")]
    pub default_service_account: String,
    /// Feature gates, `Name=true,Other=false`.
    #[arg(long, default_value = "")]
    pub feature_gates: String,
    /// Workload-identity token cache size (accepted; not used yet).
    #[arg(long, default_value_t = 100)]
    pub token_cache_max_size: u32,
    /// Workload-identity token cache max duration (accepted; not used yet).
    #[arg(long, default_value = "1h", value_parser = clap_duration)]
    pub token_cache_max_duration: Duration,
    /// Path to a kubeconfig (controller-runtime flag); otherwise `KUBECONFIG`, `~/.kube/config`
    /// or the in-cluster config are used.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Why a listen address could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// The address is not `host:port`, `:port` or `[v6]:port`.
    #[error("invalid listen address {0:?}: expected [host]:port")]
    Invalid(String),
    /// The host name did not resolve.
    #[error("invalid listen address {addr:?}: {reason}")]
    Resolve {
        /// Input.
        addr: String,
        /// Why resolution failed.
        reason: String,
    },
}

/// Turns a Go listen address (`:8080`, `0.0.0.0:8080`, `localhost:9440`, `[::1]:80`) into a socket
/// address. `0` and the empty string mean "disabled" (`Ok(None)`), as in controller-runtime.
pub fn parse_listen_addr(addr: &str) -> Result<Option<SocketAddr>, AddrError> {
    let a = addr.trim();
    if a.is_empty() || a == "0" {
        return Ok(None);
    }
    if let Some(port) = a.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| AddrError::Invalid(addr.to_string()))?;
        return Ok(Some(SocketAddr::new(
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            port,
        )));
    }
    if let Ok(sa) = a.parse::<SocketAddr>() {
        return Ok(Some(sa));
    }
    let Some((host, port)) = a.rsplit_once(':') else {
        return Err(AddrError::Invalid(addr.to_string()));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| AddrError::Invalid(addr.to_string()))?;
    if host.is_empty() {
        return Err(AddrError::Invalid(addr.to_string()));
    }
    let mut resolved = (host, port)
        .to_socket_addrs()
        .map_err(|e| AddrError::Resolve {
            addr: addr.to_string(),
            reason: e.to_string(),
        })?;
    resolved.next().map(Some).ok_or_else(|| AddrError::Resolve {
        addr: addr.to_string(),
        reason: "no addresses".to_string(),
    })
}

/// Why `--feature-gates` is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    /// An entry is not `Name=bool`.
    #[error("invalid feature gate entry {0:?}: expected Name=true|false")]
    Malformed(String),
    /// The gate name is unknown (fatal in Flux too).
    #[error("unknown feature gate {0:?}")]
    Unknown(String),
    /// Flux knows the gate, but this implementation does not do what it asks.
    #[error("feature gate {name}={value} is not supported: {why}")]
    Unsupported {
        /// The gate.
        name: String,
        /// The refused value.
        value: bool,
        /// Why, and what to do instead.
        why: &'static str,
    },
}

/// Feature-gate defaults of kustomize-controller (Flux's gates, plus `WatchAppliedObjects`).
pub const KUSTOMIZE_FEATURE_GATES: &[(&str, bool)] = &[
    ("CacheSecretsAndConfigMaps", false),
    ("DisableStatusPollerCache", true),
    ("DisableFailFastBehavior", false),
    ("StrictPostBuildSubstitutions", true),
    ("GroupChangeLog", false),
    ("AdditiveCELDependencyCheck", false),
    ("ExternalArtifact", false),
    ("CancelHealthCheckOnNewRevision", false),
    ("DisableConfigWatchers", false),
    ("DirectSourceFetch", false),
    ("MigrateAPIVersion", false),
    ("ObjectLevelWorkloadIdentity", false),
    // Ours, not Flux's: watch the applied objects (no-op reconciles without requests per
    // object, self-heal on drift within a second). `WatchAppliedObjects=false` turns it off.
    ("WatchAppliedObjects", true),
    // Ours, not Flux's: do not apply objects another owner holds (another Kustomization,
    // Argo CD, another controller's apply); `RefuseOwnershipConflicts=false` takes them over
    // like Flux.
    ("RefuseOwnershipConflicts", true),
    // Ours, not Flux's (issue 17): Argo CD sync waves in the Kustomizations annotated
    // `rflux.dev/argo-semantics: enabled`; without the gate that annotation is inert.
    ("ArgoSyncSemantics", false),
];

/// Values of kustomize-controller's gates that are refused at start-up: Flux documents a
/// behaviour for them that this implementation does not have.
pub const KUSTOMIZE_UNSUPPORTED_GATES: &[(&str, bool, &str)] = &[
    (
        "CacheSecretsAndConfigMaps",
        true,
        "Secrets and ConfigMaps are read with direct requests (Flux's default); no cache of them is kept",
    ),
    (
        "DisableStatusPollerCache",
        false,
        "health is read from the applied-object watches (WatchAppliedObjects) or polled without a cache; Flux's status poller cache is not implemented",
    ),
    (
        "ExternalArtifact",
        true,
        "the ExternalArtifact source kind is not implemented",
    ),
    (
        "MigrateAPIVersion",
        true,
        "managed-fields API versions are not migrated; apply with the API version the field manager last used, or remove its managedFields entry",
    ),
    (
        "ObjectLevelWorkloadIdentity",
        true,
        "cloud workload identity (per-object service accounts for KMS providers) is not implemented",
    ),
];

/// Values of source-controller's gates that are refused at start-up.
pub const SOURCE_UNSUPPORTED_GATES: &[(&str, bool, &str)] = &[
    (
        "CacheSecretsAndConfigMaps",
        true,
        "Secrets and ConfigMaps are read with direct requests (Flux's default); no cache of them is kept",
    ),
    (
        "ObjectLevelWorkloadIdentity",
        true,
        "cloud workload identity (per-object service accounts for git providers) is not implemented",
    ),
];

/// Feature-gate defaults of source-controller (the gates of Flux's that apply to GitRepository).
pub const SOURCE_FEATURE_GATES: &[(&str, bool)] = &[
    ("CacheSecretsAndConfigMaps", false),
    ("ObjectLevelWorkloadIdentity", false),
];

/// Parses `--feature-gates` against the known gates and their defaults; returns every known gate
/// with its effective value, in the order of `known`.
pub fn parse_feature_gates(
    value: &str,
    known: &[(&str, bool)],
) -> Result<Vec<(String, bool)>, FeatureGateError> {
    let mut gates: Vec<(String, bool)> = known
        .iter()
        .map(|(name, default)| ((*name).to_string(), *default))
        .collect();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, raw) = entry
            .split_once('=')
            .ok_or_else(|| FeatureGateError::Malformed(entry.to_string()))?;
        let enabled = match raw.trim().to_ascii_lowercase().as_str() {
            "true" => true,
            "false" => false,
            _ => return Err(FeatureGateError::Malformed(entry.to_string())),
        };
        let slot = gates
            .iter_mut()
            .find(|(n, _)| n == name.trim())
            .ok_or_else(|| FeatureGateError::Unknown(name.trim().to_string()))?;
        slot.1 = enabled;
    }
    Ok(gates)
}

/// Refuses gates set to a value listed in `unsupported` (`(name, value, why)`), so that no gate
/// is accepted and then ignored.
pub fn refuse_unsupported(
    gates: &[(String, bool)],
    unsupported: &[(&str, bool, &'static str)],
) -> Result<(), FeatureGateError> {
    for (name, value) in gates {
        if let Some((_, _, why)) = unsupported.iter().find(|(n, v, _)| n == name && v == value) {
            return Err(FeatureGateError::Unsupported {
                name: name.clone(),
                value: *value,
                why,
            });
        }
    }
    Ok(())
}

/// Whether `name` is on in gates parsed by [`parse_feature_gates`].
pub fn gate_enabled(gates: &[(String, bool)], name: &str) -> bool {
    gates.iter().any(|(n, on)| n == name && *on)
}

impl RuntimeFlags {
    /// Names of flags that were given a non-default value but have no effect in this
    /// implementation yet (they are accepted so Flux's Deployment args keep working).
    pub fn inert_flags_in_use(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.token_cache_max_size != 100 {
            out.push("--token-cache-max-size");
        }
        if self.token_cache_max_duration != Duration::from_secs(3600) {
            out.push("--token-cache-max-duration");
        }
        out
    }
}

/// The namespace the controller runs in: `RUNTIME_NAMESPACE`, or `flux-system` when unset.
pub fn runtime_namespace() -> String {
    runtime_namespace_from(std::env::var("RUNTIME_NAMESPACE").ok())
}

/// Pure part of [`runtime_namespace`].
pub fn runtime_namespace_from(env: Option<String>) -> String {
    env.filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "flux-system".to_string())
}
