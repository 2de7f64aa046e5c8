//! Pure status transitions of a ResourceSetInputProvider reconcile (reference §12.4, the
//! behaviour of Flux Operator's `initializeObjectStatus`/`finalizeObjectStatus`), the
//! `forceAt` request, durations as Flux Operator prints them, and the requeue decision.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use rflux_common::api::resourceset::keys::{
    FORCE_REQUEST_ANNOTATION, INITIALIZED_DISABLED_MSG, PROGRESSING_REASON,
    PROGRESSING_WITH_RETRY_REASON, RECONCILE_REQUEST_ANNOTATION, RECONCILIATION_DISABLED_REASON,
    RECONCILIATION_IN_PROGRESS_MSG,
};
use rflux_common::api::resourcesetinputprovider::{NextSchedule, ResourceSetInputProviderStatus};
use rflux_common::runtime::conditions::{self as cond, READY, RECONCILING, STALLED};
use rflux_common::runtime::format_go_duration;

use super::schedule::Scheduler;

/// Message prefix of the terminal (stalled) errors.
pub const TERMINAL_ERROR_MSG: &str = "Reconciliation failed terminally due to configuration error";

/// The conditions of a provider seen for the first time (when its finalizer is added).
pub fn initialize(
    conditions: &mut Vec<Condition>,
    disabled: bool,
    generation: Option<i64>,
    now: Timestamp,
) {
    if disabled {
        cond::mark_true(
            conditions,
            READY,
            RECONCILIATION_DISABLED_REASON,
            INITIALIZED_DISABLED_MSG,
            generation,
            now,
        );
    } else {
        cond::mark_unknown(
            conditions,
            READY,
            PROGRESSING_REASON,
            RECONCILIATION_IN_PROGRESS_MSG,
            generation,
            now,
        );
        cond::mark_true(
            conditions,
            RECONCILING,
            PROGRESSING_REASON,
            RECONCILIATION_IN_PROGRESS_MSG,
            generation,
            now,
        );
    }
}

/// The last step of every reconcile: the handled `requestedAt`, `ProgressingWithRetry` when
/// Ready is False while reconciling, and no `Reconciling` once Ready or Stalled is True.
pub fn finalize(
    status: &mut ResourceSetInputProviderStatus,
    conditions: &mut Vec<Condition>,
    annotations: Option<&BTreeMap<String, String>>,
) {
    if let Some(v) = annotations.and_then(|a| a.get(RECONCILE_REQUEST_ANNOTATION)) {
        status.last_handled_reconcile_at = Some(v.clone());
    }
    if cond::is_false(conditions, READY)
        && let Some(c) = conditions.iter_mut().find(|c| c.type_ == RECONCILING)
    {
        c.reason = PROGRESSING_WITH_RETRY_REASON.to_string();
    }
    if cond::is_true(conditions, READY) || cond::is_true(conditions, STALLED) {
        cond::delete(conditions, RECONCILING);
    }
}

/// A `reconcile.fluxcd.io/forceAt` request to handle now: the annotation equals
/// `requestedAt` and differs from `status.lastHandledForceAt`; records it as handled.
pub fn take_force_request(
    status: &mut ResourceSetInputProviderStatus,
    annotations: Option<&BTreeMap<String, String>>,
) -> bool {
    let Some(a) = annotations else {
        return false;
    };
    let (Some(force), Some(requested)) = (
        a.get(FORCE_REQUEST_ANNOTATION),
        a.get(RECONCILE_REQUEST_ANNOTATION),
    ) else {
        return false;
    };
    if force != requested || status.last_handled_force_at.as_deref() == Some(force) {
        return false;
    }
    status.last_handled_force_at = Some(force.clone());
    true
}

/// `Reconciliation finished in <d>`: milliseconds below a second, seconds above (Go's
/// `Duration.Round` then `String`).
pub fn finished_message(elapsed: Duration) -> String {
    let rounded = if elapsed < Duration::from_secs(1) {
        round_to(elapsed, Duration::from_millis(1))
    } else {
        round_to(elapsed, Duration::from_secs(1))
    };
    format!("Reconciliation finished in {}", format_go_duration(rounded))
}

fn round_to(d: Duration, unit: Duration) -> Duration {
    let (n, u) = (d.as_nanos(), unit.as_nanos());
    let rounded = (n + u / 2) / u * u;
    Duration::from_nanos(u64::try_from(rounded).unwrap_or(u64::MAX))
}

/// After a successful export: requeue at `interval`, or at the next schedule when it comes
/// first or the next interval falls outside every window (then it is also the next schedule
/// to report). `None`: no requeue (interval 0).
pub fn requeue_after(
    interval: Duration,
    scheduler: Option<&Scheduler>,
    end: Timestamp,
) -> (Option<Duration>, Option<NextSchedule>) {
    if interval.is_zero() {
        return (None, None);
    }
    let Some(s) = scheduler else {
        return (Some(interval), None);
    };
    let next_interval = jiff::SignedDuration::try_from(interval)
        .ok()
        .and_then(|d| end.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX);
    match s.next(end) {
        Some(next) if !s.should_schedule_interval(next_interval) || next.when.0 < next_interval => {
            let wait = until(end, next.when.0);
            (Some(wait), Some(next))
        }
        _ => (Some(interval), None),
    }
}

/// Time from `now` to `then`, at least a second (a past time requeues soon, not in a loop).
pub fn until(now: Timestamp, then: Timestamp) -> Duration {
    let d = then.duration_since(now);
    Duration::try_from(d)
        .unwrap_or(Duration::ZERO)
        .max(Duration::from_secs(1))
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
