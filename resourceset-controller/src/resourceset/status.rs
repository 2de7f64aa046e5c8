//! The ResourceSet status, pure: history snapshots and messages.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use rflux_common::api::kustomization::Snapshot;
use rflux_common::api::resourceset::MAX_HISTORY;
use rflux_common::api::resourceset::{PROGRESSING_REASON, RECONCILIATION_IN_PROGRESS_MSG};
use rflux_common::runtime::conditions as cond;
use rflux_common::runtime::duration::format_go_duration;

use super::outcome::StageFailure;

/// What one reconcile adds to the history.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// `sha256:` of the applied objects (of `json(spec)` for a build failure).
    pub digest: String,
    /// The Ready reason.
    pub status: String,
    pub duration: Duration,
    /// `inputs`, `resources` and (with steps) `steps` counts; none for a build failure.
    pub metadata: Option<BTreeMap<String, String>>,
}

/// Adds `r` to `history` (newest first, at most five): a snapshot with the same digest and
/// status is updated and moved to the front.
pub fn record(history: &mut Vec<Snapshot>, r: Record, now: jiff::Timestamp) {
    let now = Time(now);
    let duration = format_go_duration(r.duration);
    if let Some(i) = history
        .iter()
        .position(|s| s.digest == r.digest && s.last_reconciled_status == r.status)
    {
        let mut s = history.remove(i);
        s.last_reconciled = now;
        s.last_reconciled_duration = duration;
        s.total_reconciliations += 1;
        s.metadata = r.metadata;
        history.insert(0, s);
    } else {
        history.insert(
            0,
            Snapshot {
                digest: r.digest,
                first_reconciled: now.clone(),
                last_reconciled: now,
                last_reconciled_duration: duration,
                last_reconciled_status: r.status,
                total_reconciliations: 1,
                metadata: r.metadata,
            },
        );
    }
    history.truncate(MAX_HISTORY);
}

/// `Reconciliation finished in <d>` (milliseconds under a second, as Go prints them).
pub fn finished_message(d: Duration) -> String {
    let d = if d < Duration::from_secs(1) {
        Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    } else {
        Duration::from_millis(u64::try_from(d.as_millis() / 10 * 10).unwrap_or(u64::MAX))
    };
    format!("Reconciliation finished in {}", format_go_duration(d))
}

/// The history metadata of a successful build.
pub fn counts(inputs: usize, resources: usize, steps: Option<usize>) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert("inputs".to_string(), inputs.to_string());
    m.insert("resources".to_string(), resources.to_string());
    if let Some(s) = steps {
        m.insert("steps".to_string(), s.to_string());
    }
    m
}

/// What Flux Operator sets when it adds the finalizer (its first reconcile of an object that is
/// not disabled): Ready=Unknown and Reconciling, both `Progressing`, `Reconciliation in progress`.
pub fn initialize(conditions: &mut Vec<Condition>, generation: Option<i64>, now: jiff::Timestamp) {
    cond::mark_unknown(
        conditions,
        cond::READY,
        PROGRESSING_REASON,
        RECONCILIATION_IN_PROGRESS_MSG,
        generation,
        now,
    );
    cond::mark_reconciling(
        conditions,
        PROGRESSING_REASON,
        RECONCILIATION_IN_PROGRESS_MSG,
        generation,
        now,
    );
}

/// After a failed reconcile (Ready=False): a Reconciling condition, if there is one, gets reason
/// `ProgressingWithRetry` and keeps its message; none is added (Flux Operator's status
/// finalization).
pub fn mark_retrying(conditions: &mut [Condition]) {
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == cond::RECONCILING) {
        c.reason = PROGRESSING_WITH_RETRY_REASON.to_string();
    }
}

/// `ProgressingWithRetry`.
pub const PROGRESSING_WITH_RETRY_REASON: &str = "ProgressingWithRetry";

/// An apply, GC or health failure without a digest gets the objects' `revision` (Flux Operator
/// records those failures in the history under the digest of the objects).
pub fn with_digest(e: StageFailure, revision: &str) -> StageFailure {
    match e {
        StageFailure::Failed {
            message,
            digest: None,
        } => StageFailure::Failed {
            message,
            digest: Some(revision.to_string()),
        },
        e => e,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn retrying_keeps_the_reconciling_message_and_adds_none() {
        let t = jiff::Timestamp::UNIX_EPOCH;
        let mut c = Vec::new();
        mark_retrying(&mut c);
        assert!(c.is_empty());
        initialize(&mut c, Some(3), t);
        cond::mark_false(
            &mut c,
            cond::READY,
            "ReconciliationFailed",
            "boom",
            Some(3),
            t,
        );
        mark_retrying(&mut c);
        let r = cond::get(&c, cond::RECONCILING).unwrap();
        assert_eq!(
            (r.status.as_str(), r.reason.as_str(), r.message.as_str()),
            ("True", "ProgressingWithRetry", "Reconciliation in progress")
        );
        assert_eq!(
            cond::get_reason(&c, cond::READY),
            Some("ReconciliationFailed")
        );
    }

    #[test]
    fn failures_get_the_objects_digest() {
        let failed = |digest: Option<&str>| StageFailure::Failed {
            message: "m".into(),
            digest: digest.map(str::to_string),
        };
        let digest = |e: StageFailure| match e {
            StageFailure::Failed { digest, .. } => digest,
            _ => None,
        };
        assert_eq!(
            digest(with_digest(failed(None), "sha256:a")).as_deref(),
            Some("sha256:a")
        );
        assert_eq!(
            digest(with_digest(failed(Some("sha256:b")), "sha256:a")).as_deref(),
            Some("sha256:b")
        );
        let dep = with_digest(
            StageFailure::Dependency {
                message: "m".into(),
                changed: true,
            },
            "sha256:a",
        );
        assert!(matches!(dep, StageFailure::Dependency { .. }));
    }

    fn rec(d: &str, s: &str) -> Record {
        Record {
            digest: d.into(),
            status: s.into(),
            duration: Duration::from_millis(1500),
            metadata: None,
        }
    }

    #[test]
    fn same_digest_and_status_is_updated_and_moved_first() {
        let t = jiff::Timestamp::UNIX_EPOCH;
        let mut h = Vec::new();
        record(&mut h, rec("a", "ReconciliationSucceeded"), t);
        record(&mut h, rec("b", "ReconciliationSucceeded"), t);
        record(&mut h, rec("a", "ReconciliationSucceeded"), t);
        assert_eq!(h.len(), 2);
        assert_eq!((h[0].digest.as_str(), h[0].total_reconciliations), ("a", 2));
        assert_eq!(h[0].last_reconciled_duration, "1.5s");
        record(&mut h, rec("a", "ReconciliationFailed"), t);
        assert_eq!(h.len(), 3);
        for i in 0..10 {
            record(&mut h, rec(&i.to_string(), "x"), t);
        }
        assert_eq!(h.len(), MAX_HISTORY);
    }

    #[test]
    fn messages() {
        assert_eq!(
            finished_message(Duration::from_micros(123_456)),
            "Reconciliation finished in 123ms"
        );
        assert_eq!(
            finished_message(Duration::from_millis(2345)),
            "Reconciliation finished in 2.34s"
        );
    }
}
