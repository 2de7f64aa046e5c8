//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go semantics:
//! optimistic-concurrency updates, expiry judged on the local clock from the moment the record was
//! last seen to change (robust to clock skew), renew deadline, and release on cancel.
//!
//! The decision logic ([`decide`], [`next_spec`]) is pure; [`LeaderElector`] does the I/O.

use std::time::{Duration, Instant};

use super::fence::WriteFence;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;

/// Leader-election failures.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// Leadership was lost (renew deadline exceeded); the process should exit.
    #[error("leader election lost: could not renew lease {namespace}/{name} within {deadline:?}")]
    Lost {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// Renew deadline.
        deadline: Duration,
    },
    /// Invalid timing configuration.
    #[error(
        "invalid leader election timing: need lease-duration > renew-deadline > retry-period > 0 (got {lease:?} / {renew:?} / {retry:?})"
    )]
    Timing {
        /// Lease duration.
        lease: Duration,
        /// Renew deadline.
        renew: Duration,
        /// Retry period.
        retry: Duration,
    },
}

/// Leader election settings.
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    /// Lease name (see [`lease_name`]).
    pub lease_name: String,
    /// Lease namespace (`RUNTIME_NAMESPACE`).
    pub namespace: String,
    /// This candidate's identity (see [`default_identity`]).
    pub identity: String,
    /// Lease duration.
    pub lease_duration: Duration,
    /// Renew deadline.
    pub renew_deadline: Duration,
    /// Retry period.
    pub retry_period: Duration,
    /// Release the lease on shutdown.
    pub release_on_cancel: bool,
}

impl LeaderElectionConfig {
    /// Checks `lease_duration > renew_deadline > retry_period > 0`.
    pub fn validate(&self) -> Result<(), LeaderError> {
        if self.lease_duration > self.renew_deadline
            && self.renew_deadline > self.retry_period
            && !self.retry_period.is_zero()
        {
            Ok(())
        } else {
            Err(LeaderError::Timing {
                lease: self.lease_duration,
                renew: self.renew_deadline,
                retry: self.retry_period,
            })
        }
    }
}

/// Flux's lease name: `<controller>-leader-election`, plus `-<first 8 hex of sha256(selector)>`
/// when `--watch-label-selector` is set (so shards do not share a lease).
pub fn lease_name(controller: &str, watch_label_selector: &str) -> String {
    let base = format!("{controller}-leader-election");
    let sel = watch_label_selector.trim();
    if sel.is_empty() {
        return base;
    }
    let digest = Sha256::digest(sel.as_bytes());
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{base}-{hex}")
}

/// `<hostname>_<random hex>`, like controller-runtime's identity (`HOSTNAME` env or `/etc/hostname`).
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "rflux".to_string());
    let r: [u8; 8] = rand::random();
    let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
    format!("{host}_{hex}")
}

/// What a candidate should do with the lease it just read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No lease exists: create it holding it.
    Create,
    /// We hold it: renew (keep acquire time and transitions).
    Renew,
    /// Free or expired: take it over (new acquire time, transitions + 1).
    Acquire,
    /// Someone else holds a live lease.
    Wait {
        /// Current holder.
        holder: String,
        /// Time until it would expire if not renewed.
        remaining: Duration,
    },
}

/// Decides what to do (pure). `observed_at` is when this candidate last saw the lease record
/// change (local monotonic clock); a foreign lease is live until `observed_at + duration`, where
/// the duration is the record's `leaseDurationSeconds` or `default_duration`.
pub fn decide(
    spec: Option<&LeaseSpec>,
    identity: &str,
    observed_at: Instant,
    now: Instant,
    default_duration: Duration,
) -> Decision {
    let Some(spec) = spec else {
        return Decision::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder == identity {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::Acquire;
    }
    let duration = spec
        .lease_duration_seconds
        .filter(|s| *s > 0)
        .map_or(default_duration, |s| {
            Duration::from_secs(u64::from(s.unsigned_abs()))
        });
    let expires = observed_at + duration;
    if now < expires {
        Decision::Wait {
            holder: holder.to_string(),
            remaining: expires - now,
        }
    } else {
        Decision::Acquire
    }
}

/// The spec to write for a decision (pure). `Wait` yields `None`.
pub fn next_spec(
    current: Option<&LeaseSpec>,
    decision: &Decision,
    identity: &str,
    lease_duration: Duration,
    now: jiff::Timestamp,
) -> Option<LeaseSpec> {
    let secs = i32::try_from(lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
    match decision {
        Decision::Wait { .. } => None,
        Decision::Create => Some(LeaseSpec {
            holder_identity: Some(identity.to_string()),
            lease_duration_seconds: Some(secs),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }),
        Decision::Renew => {
            let mut spec = current.cloned().unwrap_or_default();
            spec.holder_identity = Some(identity.to_string());
            spec.lease_duration_seconds = Some(secs);
            spec.renew_time = Some(MicroTime(now));
            if spec.acquire_time.is_none() {
                spec.acquire_time = Some(MicroTime(now));
            }
            Some(spec)
        }
        Decision::Acquire => {
            let mut spec = current.cloned().unwrap_or_default();
            let transitions = spec.lease_transitions.unwrap_or(0);
            let had_holder = spec
                .holder_identity
                .as_deref()
                .is_some_and(|h| !h.is_empty());
            spec.holder_identity = Some(identity.to_string());
            spec.lease_duration_seconds = Some(secs);
            spec.acquire_time = Some(MicroTime(now));
            spec.renew_time = Some(MicroTime(now));
            spec.lease_transitions = Some(if had_holder {
                transitions.saturating_add(1)
            } else {
                transitions
            });
            Some(spec)
        }
    }
}

/// The spec written when releasing: no holder, 1s duration (so others take over at once).
pub fn released_spec(current: &LeaseSpec, now: jiff::Timestamp) -> LeaseSpec {
    let mut spec = current.clone();
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.acquire_time = Some(MicroTime(now));
    spec.renew_time = Some(MicroTime(now));
    spec
}

/// True while the elector behind `rx` runs and holds the lease (a closed channel — the elector
/// task ended or was aborted — counts as not leading).
pub fn is_leading(rx: &watch::Receiver<bool>) -> bool {
    rx.has_changed().is_ok() && *rx.borrow()
}

/// Waits until the elector reports leadership; returns false if the elector ended first.
pub async fn wait_until_leader(rx: &mut watch::Receiver<bool>) -> bool {
    rx.wait_for(|leading| *leading).await.is_ok()
}

/// Runs the election against the API server.
pub struct LeaderElector {
    api: Api<Lease>,
    cfg: LeaderElectionConfig,
    metrics: Option<Metrics>,
    observed: Option<LeaseSpec>,
    observed_at: Instant,
    fence: WriteFence,
}

impl LeaderElector {
    /// New elector (validates the timings).
    pub fn new(
        client: Client,
        cfg: LeaderElectionConfig,
        metrics: Option<Metrics>,
    ) -> Result<Self, LeaderError> {
        cfg.validate()?;
        Ok(Self {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            metrics,
            observed: None,
            observed_at: Instant::now(),
            fence: WriteFence::open(),
        })
    }

    /// Extends `fence` by the renew deadline from each successful acquisition or renewal (from
    /// the moment its request was sent) and closes it when the lease is lost or released.
    pub fn with_fence(mut self, fence: WriteFence) -> Self {
        self.fence = fence;
        self
    }

    /// Spawns the election loop. The receiver reports leadership; the task ends with
    /// `Err(Lost)` when leadership is lost, or `Ok` after `shutdown` (releasing the lease when
    /// configured).
    pub fn spawn(
        self,
        shutdown: CancellationToken,
    ) -> (watch::Receiver<bool>, JoinHandle<Result<(), LeaderError>>) {
        let (tx, rx) = watch::channel(false);
        let handle = tokio::spawn(self.run(tx, shutdown));
        (rx, handle)
    }

    fn set_metric(&self, leading: bool) {
        if let Some(m) = &self.metrics {
            m.set_leader(&self.cfg.lease_name, leading);
        }
    }

    async fn run(
        mut self,
        tx: watch::Sender<bool>,
        shutdown: CancellationToken,
    ) -> Result<(), LeaderError> {
        self.set_metric(false);
        tracing::info!(
            lease = %format!("{}/{}", self.cfg.namespace, self.cfg.name()),
            identity = %self.cfg.identity,
            "attempting to acquire leader lease"
        );
        // Acquire phase.
        loop {
            let sent = Instant::now();
            if self.try_acquire_or_renew().await {
                self.fence.renewed(sent, self.cfg.renew_deadline);
                break;
            }
            let wait = jitter_period(self.cfg.retry_period);
            tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                () = tokio::time::sleep(wait) => {}
            }
        }
        tracing::info!(
            lease = %format!("{}/{}", self.cfg.namespace, self.cfg.name()),
            identity = %self.cfg.identity,
            "successfully acquired lease"
        );
        let _ = tx.send(true);
        self.set_metric(true);
        // Renew phase.
        let mut last_renew = Instant::now();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => {
                    self.fence.close();
                    let _ = tx.send(false);
                    self.set_metric(false);
                    if self.cfg.release_on_cancel {
                        self.release().await;
                    }
                    return Ok(());
                }
                () = tokio::time::sleep(self.cfg.retry_period) => {}
            }
            // Judged on the local clock first: a replica frozen past its deadline (SIGSTOP)
            // has lost, whatever a late renewal would say.
            let sent = Instant::now();
            let renewed =
                last_renew.elapsed() < self.cfg.renew_deadline && self.try_acquire_or_renew().await;
            if renewed {
                last_renew = sent;
                self.fence.renewed(sent, self.cfg.renew_deadline);
            } else if last_renew.elapsed() >= self.cfg.renew_deadline {
                self.fence.close();
                let _ = tx.send(false);
                self.set_metric(false);
                tracing::error!(
                    lease = %format!("{}/{}", self.cfg.namespace, self.cfg.name()),
                    "leader election lost"
                );
                return Err(LeaderError::Lost {
                    namespace: self.cfg.namespace.clone(),
                    name: self.cfg.lease_name.clone(),
                    deadline: self.cfg.renew_deadline,
                });
            }
        }
    }

    /// One acquire-or-renew round; true when we hold the lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> bool {
        let now = Instant::now();
        let current = match self.api.get_opt(&self.cfg.lease_name).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(error = %e, "error retrieving lease");
                return false;
            }
        };
        let spec = current.as_ref().map(|l| l.spec.clone().unwrap_or_default());
        if spec != self.observed {
            self.observed = spec.clone();
            self.observed_at = now;
        }
        let decision = decide(
            spec.as_ref(),
            &self.cfg.identity,
            self.observed_at,
            now,
            self.cfg.lease_duration,
        );
        let Some(new_spec) = next_spec(
            spec.as_ref(),
            &decision,
            &self.cfg.identity,
            self.cfg.lease_duration,
            jiff::Timestamp::now(),
        ) else {
            return false;
        };
        let result = match (&decision, current) {
            (Decision::Create, _) | (_, None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.lease_name.clone()),
                        namespace: Some(self.cfg.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(new_spec.clone()),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            (_, Some(mut lease)) => {
                lease.spec = Some(new_spec.clone());
                self.api
                    .replace(&self.cfg.lease_name, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(_) => {
                self.observed = Some(new_spec);
                self.observed_at = Instant::now();
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "failed to update lease");
                false
            }
        }
    }

    async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.lease_name).await else {
            return;
        };
        let Some(spec) = lease.spec.clone() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return;
        }
        lease.spec = Some(released_spec(&spec, jiff::Timestamp::now()));
        match self
            .api
            .replace(&self.cfg.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.cfg.lease_name, "released leader lease"),
            Err(e) => tracing::warn!(error = %e, "failed to release leader lease"),
        }
    }
}

impl LeaderElectionConfig {
    fn name(&self) -> &str {
        &self.lease_name
    }
}

/// client-go waits `period * (1 + rand * 1.2)` between acquire attempts.
fn jitter_period(period: Duration) -> Duration {
    let unit: f64 = rand::random::<f64>();
    period.mul_f64(1.0 + unit * 1.2)
}
