//! The status of a reconcile, as pure functions: a pipeline outcome (what was applied, or the
//! stage error) becomes the conditions, history, revisions and inventory of the status, when to
//! come back, and the event, with Flux's reasons and messages.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use rflux_common::api::kustomization::{
    Kustomization, KustomizationStatus, ResourceInventory, Snapshot,
};
use rflux_common::runtime::conditions::{
    self as cond, HEALTHY, PROGRESSING_REASON, PROGRESSING_WITH_RETRY_REASON, READY,
    RECONCILIATION_SUCCEEDED_REASON, RECONCILING, SUCCEEDED_REASON,
};
use rflux_common::runtime::{
    EventType, Severity, StageError, format_go_duration, parse_go_duration,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::context::{
    ARTIFACT_FAILED_REASON, DEPENDENCY_NOT_READY_REASON, HEALTH_CHECK_FAILED_REASON,
};
use crate::cel::INVALID_CEL_EXPRESSION_REASON;

/// How many history snapshots are kept (Flux keeps 5).
pub const HISTORY_LIMIT: usize = 5;

/// What a successful run applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    /// Whether anything was created, configured or deleted.
    pub changed: bool,
    /// The source revision applied.
    pub revision: String,
    /// The origin revision from the artifact metadata, when it has one.
    pub origin_revision: Option<String>,
    /// The new inventory.
    pub inventory: ResourceInventory,
    /// The digest of the built manifests.
    pub digest: String,
    /// The `Healthy` condition message; `None` when nothing was health-checked.
    pub healthy: Option<String>,
}

/// When to reconcile again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// After `spec.interval`, with the controller's jitter.
    Interval(Duration),
    /// After `--requeue-dependency`.
    Dependency,
    /// After `spec.retryInterval`.
    Retry(Duration),
    /// Only when the object changes.
    Never,
    /// At once (a newer trigger cut the run short).
    Now,
}

/// The event of a reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub kind: EventType,
    /// Flux's reason.
    pub reason: String,
    /// The message.
    pub message: String,
    /// The revision annotation (empty: none).
    pub revision: String,
    /// Only logged, not recorded (a quiet re-run, a wait for the source).
    pub quiet: bool,
}

/// What a reconcile concludes.
#[derive(Clone, Debug, PartialEq)]
pub struct Conclusion {
    /// The new status.
    pub status: KustomizationStatus,
    /// Whether it differs from the status the object had (else nothing is written).
    pub write: bool,
    /// When to come back.
    pub requeue: Requeue,
    /// The event.
    pub event: Event,
}

/// Whether `ks`, as this reconcile found it, is Ready at its generation with `revision`
/// applied (a reconcile of it that changes nothing is a quiet re-run).
pub fn ready_at(ks: &Kustomization, revision: &str) -> bool {
    ks.status.as_ref().is_some_and(|s| {
        cond::is_ready(s.conditions.as_deref().unwrap_or_default())
            && s.observed_generation == ks.meta().generation
            && s.last_applied_revision.as_deref() == Some(revision)
    })
}

/// The status, requeue and event of a finished run. `status` and `conds` are what the pipeline
/// left (progress conditions, an inventory recorded before a failure); `elapsed` is the run's
/// time; `requested` the `reconcile.fluxcd.io/requestedAt` value handled.
pub fn conclude(
    ks: &Kustomization,
    mut status: KustomizationStatus,
    mut conds: Vec<Condition>,
    outcome: Result<Applied, StageError>,
    requested: Option<String>,
    now: Timestamp,
    elapsed: Duration,
) -> Conclusion {
    let generation = ks.meta().generation;
    if requested.is_some() {
        status.last_handled_reconcile_at = requested;
    }
    let (requeue, event) = match outcome {
        Ok(done) => {
            let msg = format!("Applied revision: {}", done.revision);
            cond::mark_ready(
                &mut conds,
                RECONCILIATION_SUCCEEDED_REASON,
                &msg,
                generation,
                now,
            );
            match &done.healthy {
                Some(m) => {
                    cond::mark_true(&mut conds, HEALTHY, SUCCEEDED_REASON, m, generation, now);
                }
                None => {
                    cond::delete(&mut conds, HEALTHY);
                }
            }
            status.observed_generation = generation;
            status.last_applied_revision = Some(done.revision.clone());
            status.last_attempted_revision = Some(done.revision.clone());
            status.last_applied_origin_revision = done.origin_revision.clone();
            status.inventory = Some(done.inventory);
            let mut history = status.history.take().unwrap_or_default();
            record_history(
                &mut history,
                &done.digest,
                RECONCILIATION_SUCCEEDED_REASON,
                &done.revision,
                done.origin_revision.as_deref(),
                now,
                elapsed,
            );
            status.history = Some(history);
            let interval = parse_go_duration(&ks.spec.interval).unwrap_or(Duration::from_secs(600));
            let message = format!(
                "Reconciliation finished in {}, next run in {}",
                format_go_duration(elapsed),
                ks.spec.interval
            );
            // A reconcile that changed nothing of a Ready Kustomization is logged, not
            // recorded as an event (Flux records one every time).
            let quiet = !done.changed && ready_at(ks, &done.revision);
            (
                Requeue::Interval(interval),
                Event {
                    kind: EventType::Normal,
                    reason: RECONCILIATION_SUCCEEDED_REASON.to_string(),
                    message,
                    revision: done.revision,
                    quiet,
                },
            )
        }
        Err(f) => {
            if let Some(rev) = &f.revision {
                status.last_attempted_revision = Some(rev.clone());
            }
            if f.reason == INVALID_CEL_EXPRESSION_REASON {
                // A terminal configuration error is observed (Flux).
                status.observed_generation = generation;
            }
            if f.severity.stalls() {
                cond::mark_stalled(&mut conds, f.reason, &f.message, generation, now);
            } else {
                // Like Flux, Reconciling keeps the message of the stage that was in progress.
                let progress = cond::get(&conds, RECONCILING)
                    .filter(|c| c.status == "True" && c.reason == PROGRESSING_REASON)
                    .map_or_else(|| f.message.clone(), |c| c.message.clone());
                cond::mark_false(&mut conds, READY, f.reason, &f.message, generation, now);
                cond::mark_true(
                    &mut conds,
                    RECONCILING,
                    PROGRESSING_WITH_RETRY_REASON,
                    &progress,
                    generation,
                    now,
                );
            }
            if f.reason == HEALTH_CHECK_FAILED_REASON {
                cond::mark_false(&mut conds, HEALTHY, f.reason, &f.message, generation, now);
            }
            let retry = || {
                Requeue::Retry(
                    parse_go_duration(ks.spec.retry_interval()).unwrap_or(Duration::from_secs(60)),
                )
            };
            let requeue = match f.severity {
                Severity::Waiting => Requeue::Dependency,
                Severity::Superseded => Requeue::Now,
                Severity::Generic | Severity::Misconfigured => retry(),
                Severity::Stalling => Requeue::Never,
            };
            // Flux only logs a missing source or artifact (no event) while it waits for it,
            // and records a dependency wait at info severity.
            let quiet = f.severity == Severity::Waiting && f.reason == ARTIFACT_FAILED_REASON;
            let kind =
                if f.reason == DEPENDENCY_NOT_READY_REASON || f.severity == Severity::Superseded {
                    EventType::Normal
                } else {
                    EventType::Warning
                };
            // Flux words the event of a cancelled health check apart from its condition.
            let message = match f.message.strip_prefix(CANCELED_PREFIX) {
                Some(by) if f.severity == Severity::Superseded => {
                    format!("Health checks canceled due to new reconciliation triggered by {by}")
                }
                _ => f.message,
            };
            (
                requeue,
                Event {
                    kind,
                    reason: f.reason.to_string(),
                    message,
                    revision: f.revision.unwrap_or_default(),
                    quiet,
                },
            )
        }
    };
    status.conditions = Some(conds);
    // A retry that changes nothing (still waiting for the same source) writes nothing.
    let write = ks
        .status
        .as_ref()
        .is_none_or(|old| serde_json::to_value(old).ok() != serde_json::to_value(&status).ok());
    Conclusion {
        status,
        write,
        requeue,
        event,
    }
}

/// The start of the condition message of a health check cancelled by a new revision
/// (`CancelHealthCheckOnNewRevision`), followed by `Kind/namespace/name` of the trigger.
pub const CANCELED_PREFIX: &str = "New reconciliation triggered by ";

/// The history digest: sha256 of the built objects as the YAML stream kustomize prints, in build
/// order (Flux digests the same bytes, so both controllers record the same digest).
pub fn manifests_digest(objects: &[Value]) -> String {
    let yaml = rflux_kustomize::to_yaml_stream(objects);
    format!("sha256:{}", hex::encode(Sha256::digest(yaml.as_bytes())))
}

/// Records one reconciliation in `history` (newest first, at most [`HISTORY_LIMIT`]): the same
/// digest and status as the newest entry updates it, anything else prepends a new one.
pub fn record_history(
    history: &mut Vec<Snapshot>,
    digest: &str,
    status: &str,
    revision: &str,
    origin_revision: Option<&str>,
    now: Timestamp,
    duration: Duration,
) {
    let now = Time(cond::truncate_to_seconds(now));
    let dur = format_go_duration(duration);
    if let Some(first) = history.first_mut()
        && first.digest == digest
        && first.last_reconciled_status == status
    {
        first.last_reconciled = now;
        first.last_reconciled_duration = dur;
        first.total_reconciliations = first.total_reconciliations.saturating_add(1);
        return;
    }
    history.insert(
        0,
        Snapshot {
            digest: digest.to_string(),
            first_reconciled: now.clone(),
            last_reconciled: now,
            last_reconciled_duration: dur,
            last_reconciled_status: status.to_string(),
            total_reconciliations: 1,
            metadata: Some(history_metadata(revision, origin_revision)),
        },
    );
    history.truncate(HISTORY_LIMIT);
}

/// A history entry's metadata, as Flux writes it: the revision, and the origin revision (the
/// artifact's `org.opencontainers.image.revision`) when there is one.
fn history_metadata(revision: &str, origin_revision: Option<&str>) -> BTreeMap<String, String> {
    let mut m = BTreeMap::from([("revision".to_string(), revision.to_string())]);
    if let Some(o) = origin_revision.filter(|o| !o.is_empty()) {
        m.insert("originRevision".to_string(), o.to_string());
    }
    m
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rflux_common::runtime::conditions::{RECONCILIATION_FAILED_REASON, STALLED};
    use serde_json::json;

    use crate::reconcile::context::{
        ACCESS_DENIED_REASON, BUILD_FAILED_REASON, PRUNE_FAILED_REASON,
    };

    fn ks(status: Value) -> Kustomization {
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "app", "namespace": "apps", "generation": 3},
            "spec": {"interval": "10m", "retryInterval": "2m", "prune": true,
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}},
            "status": status
        }))
        .unwrap()
    }

    fn applied(changed: bool, healthy: Option<&str>) -> Applied {
        Applied {
            changed,
            revision: "main@sha1:abc".into(),
            origin_revision: None,
            inventory: ResourceInventory::default(),
            digest: "sha256:d".into(),
            healthy: healthy.map(str::to_string),
        }
    }

    fn now() -> Timestamp {
        "2026-12-01T10:00:00Z".parse().unwrap()
    }

    fn run(
        ks: &Kustomization,
        conds: Vec<Condition>,
        outcome: Result<Applied, StageError>,
    ) -> Conclusion {
        let status = ks.status.clone().unwrap_or_default();
        conclude(
            ks,
            status,
            conds,
            outcome,
            None,
            now(),
            Duration::from_millis(1500),
        )
    }

    fn get<'a>(c: &'a Conclusion, t: &str) -> Option<&'a Condition> {
        cond::get(c.status.conditions.as_deref().unwrap_or_default(), t)
    }

    fn progressing(message: &str) -> Vec<Condition> {
        let mut conds = Vec::new();
        cond::mark_reconciling(&mut conds, PROGRESSING_REASON, message, Some(3), now());
        conds
    }

    #[test]
    fn success_marks_ready_and_records_history() {
        let k = ks(json!({}));
        let c = run(
            &k,
            progressing("Building"),
            Ok(applied(true, Some("Health check passed in 1s"))),
        );
        let ready = get(&c, READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", RECONCILIATION_SUCCEEDED_REASON)
        );
        assert_eq!(ready.message, "Applied revision: main@sha1:abc");
        assert!(get(&c, RECONCILING).is_none());
        assert_eq!(get(&c, HEALTHY).unwrap().reason, SUCCEEDED_REASON);
        assert_eq!(c.status.observed_generation, Some(3));
        assert_eq!(
            c.status.last_applied_revision.as_deref(),
            Some("main@sha1:abc")
        );
        assert_eq!(c.status.history.as_ref().unwrap()[0].digest, "sha256:d");
        assert_eq!(c.requeue, Requeue::Interval(Duration::from_secs(600)));
        assert_eq!(c.event.kind, EventType::Normal);
        assert_eq!(
            c.event.message,
            "Reconciliation finished in 1.5s, next run in 10m"
        );
        assert!(!c.event.quiet);
        assert!(c.write);
    }

    #[test]
    fn a_no_op_rerun_of_a_ready_revision_is_quiet_and_writes_nothing() {
        let first = run(&ks(json!({})), Vec::new(), Ok(applied(false, None)));
        let mut k = ks(json!({}));
        k.status = Some(first.status.clone());
        let again = run(&k, Vec::new(), Ok(applied(false, None)));
        assert!(again.event.quiet);
        // The history's count and duration move, so the status is written.
        assert!(again.write);
        assert!(get(&again, HEALTHY).is_none(), "nothing health-checked");
    }

    #[test]
    fn every_flux_failure_reason_maps_to_conditions_requeue_and_event() {
        let k = ks(json!({}));
        let cases = [
            (
                StageError::generic(READY, BUILD_FAILED_REASON, "kustomize build failed"),
                false,
                Requeue::Retry(Duration::from_secs(120)),
                EventType::Warning,
                false,
            ),
            (
                StageError::generic(READY, RECONCILIATION_FAILED_REASON, "apply failed"),
                false,
                Requeue::Retry(Duration::from_secs(120)),
                EventType::Warning,
                false,
            ),
            (
                StageError::generic(READY, PRUNE_FAILED_REASON, "delete failed"),
                false,
                Requeue::Retry(Duration::from_secs(120)),
                EventType::Warning,
                false,
            ),
            (
                StageError::generic(READY, HEALTH_CHECK_FAILED_REASON, "timeout"),
                false,
                Requeue::Retry(Duration::from_secs(120)),
                EventType::Warning,
                false,
            ),
            (
                StageError::waiting(READY, ARTIFACT_FAILED_REASON, "Source artifact not found"),
                false,
                Requeue::Dependency,
                EventType::Warning,
                true,
            ),
            (
                StageError::generic(READY, ARTIFACT_FAILED_REASON, "digest mismatch"),
                false,
                Requeue::Retry(Duration::from_secs(120)),
                EventType::Warning,
                false,
            ),
            (
                StageError::waiting(READY, DEPENDENCY_NOT_READY_REASON, "dependency not ready"),
                false,
                Requeue::Dependency,
                EventType::Normal,
                false,
            ),
            (
                StageError::stalling(READY, ACCESS_DENIED_REASON, "cross-namespace"),
                true,
                Requeue::Never,
                EventType::Warning,
                false,
            ),
            (
                StageError::stalling(
                    READY,
                    RECONCILIATION_FAILED_REASON,
                    "spec.decryption not supported",
                ),
                true,
                Requeue::Never,
                EventType::Warning,
                false,
            ),
            (
                StageError::stalling(READY, INVALID_CEL_EXPRESSION_REASON, "bad expr"),
                true,
                Requeue::Never,
                EventType::Warning,
                false,
            ),
            (
                StageError::new(
                    Severity::Misconfigured,
                    READY,
                    RECONCILIATION_FAILED_REASON,
                    "kubeconfig not allowed",
                ),
                true,
                Requeue::Retry(Duration::from_secs(120)),
                EventType::Warning,
                false,
            ),
        ];
        for (err, stalled, requeue, kind, quiet) in cases {
            let reason = err.reason;
            let c = run(
                &k,
                progressing("Fetching manifests"),
                Err(err.at("main@sha1:abc")),
            );
            let ready = get(&c, READY).unwrap();
            assert_eq!(
                (ready.status.as_str(), ready.reason.as_str()),
                ("False", reason)
            );
            assert_eq!(get(&c, STALLED).is_some(), stalled, "{reason}");
            if stalled {
                assert!(get(&c, RECONCILING).is_none(), "{reason}");
            } else {
                let r = get(&c, RECONCILING).unwrap();
                assert_eq!(r.reason, PROGRESSING_WITH_RETRY_REASON, "{reason}");
                assert_eq!(r.message, "Fetching manifests", "keeps the stage's message");
            }
            assert_eq!(
                get(&c, HEALTHY).map(|h| h.status.as_str()),
                (reason == HEALTH_CHECK_FAILED_REASON).then_some("False"),
                "{reason}"
            );
            assert_eq!(c.requeue, requeue, "{reason}");
            assert_eq!((c.event.kind, c.event.quiet), (kind, quiet), "{reason}");
            assert_eq!(c.event.revision, "main@sha1:abc");
            assert_eq!(
                c.status.last_attempted_revision.as_deref(),
                Some("main@sha1:abc")
            );
            assert_eq!(c.status.last_applied_revision, None);
            assert_eq!(
                c.status.observed_generation,
                (reason == INVALID_CEL_EXPRESSION_REASON).then_some(3),
                "{reason}: only a terminal CEL error is observed"
            );
        }
    }

    #[test]
    fn an_unchanged_failure_writes_nothing() {
        let err =
            || StageError::waiting(READY, ARTIFACT_FAILED_REASON, "Source artifact not found");
        let first = run(&ks(json!({})), Vec::new(), Err(err()));
        let mut k = ks(json!({}));
        k.status = Some(first.status.clone());
        let again = run(&k, first.status.conditions.clone().unwrap(), Err(err()));
        assert!(!again.write);
    }

    #[test]
    fn history_updates_or_prepends() {
        let mut h = Vec::new();
        let now = Timestamp::now();
        record_history(
            &mut h,
            "sha256:a",
            "ReconciliationSucceeded",
            "r1",
            None,
            now,
            Duration::from_secs(1),
        );
        record_history(
            &mut h,
            "sha256:a",
            "ReconciliationSucceeded",
            "r1",
            None,
            now,
            Duration::from_secs(2),
        );
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].total_reconciliations, 2);
        assert_eq!(h[0].last_reconciled_duration, "2s");
        for i in 0..6 {
            record_history(
                &mut h,
                &format!("sha256:{i}"),
                "x",
                "r",
                Some("main@sha1:abc"),
                now,
                Duration::ZERO,
            );
        }
        assert_eq!(h.len(), HISTORY_LIMIT);
        assert_eq!(h[0].digest, "sha256:5");
        let meta = h[0].metadata.as_ref().unwrap();
        assert_eq!(meta["originRevision"], "main@sha1:abc");
        assert_eq!(meta["revision"], "r");
    }

    #[test]
    fn history_names_the_origin_revision_only_when_known() {
        assert_eq!(
            history_metadata("r", None),
            BTreeMap::from([("revision".to_string(), "r".to_string())])
        );
        assert_eq!(history_metadata("r", Some("")).len(), 1);
        assert_eq!(history_metadata("r", Some("o"))["originRevision"], "o");
    }

    #[test]
    fn digest_depends_on_content() {
        let a = manifests_digest(&[json!({"a": 1})]);
        assert_ne!(a, manifests_digest(&[json!({"a": 2})]));
        assert!(a.starts_with("sha256:"));
    }
}
