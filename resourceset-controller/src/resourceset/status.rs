//! The ResourceSet status, pure: history snapshots and messages.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use rflux_common::api::kustomization::Snapshot;
use rflux_common::api::resourceset::MAX_HISTORY;
use rflux_common::runtime::duration::format_go_duration;

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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
