//! kstatus-compliant condition handling over `metav1.Condition`, following Flux's
//! `runtime/conditions` semantics.
//!
//! Everything here is pure: the current time is passed in where it matters.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition type `Ready`.
pub const READY: &str = "Ready";
/// Condition type `Reconciling` (abnormal-true).
pub const RECONCILING: &str = "Reconciling";
/// Condition type `Stalled` (abnormal-true).
pub const STALLED: &str = "Stalled";
/// Condition type `Healthy` (kustomize-controller).
pub const HEALTHY: &str = "Healthy";

/// Status `True`.
pub const TRUE: &str = "True";
/// Status `False`.
pub const FALSE: &str = "False";
/// Status `Unknown`.
pub const UNKNOWN: &str = "Unknown";

/// Reason `Progressing` (Reconciling=True while working).
pub const PROGRESSING_REASON: &str = "Progressing";
/// Reason `ProgressingWithRetry` (Reconciling after a failure).
pub const PROGRESSING_WITH_RETRY_REASON: &str = "ProgressingWithRetry";
/// Reason `Succeeded`.
pub const SUCCEEDED_REASON: &str = "Succeeded";
/// Reason `ReconciliationSucceeded` (kustomize-controller Ready=True).
pub const RECONCILIATION_SUCCEEDED_REASON: &str = "ReconciliationSucceeded";
/// Reason `ReconciliationFailed`.
pub const RECONCILIATION_FAILED_REASON: &str = "ReconciliationFailed";

/// Message `reconciliation in progress`.
pub const RECONCILIATION_IN_PROGRESS_MSG: &str = "reconciliation in progress";

/// The annotation `flux reconcile` sets to request a reconcile.
pub const RECONCILE_REQUESTED_AT_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";

/// Maximum length of a condition message (Flux trims to this).
pub const MAX_MESSAGE_LEN: usize = 32768;

/// Truncates a timestamp to whole seconds (conditions carry second precision).
pub fn truncate_to_seconds(ts: jiff::Timestamp) -> jiff::Timestamp {
    jiff::Timestamp::from_second(ts.as_second()).unwrap_or(ts)
}

/// Trims a message to [`MAX_MESSAGE_LEN`] characters, ending with `...` when cut.
pub fn trim_message(message: &str) -> String {
    if message.chars().count() <= MAX_MESSAGE_LEN {
        return message.to_string();
    }
    let mut out: String = message.chars().take(MAX_MESSAGE_LEN - 3).collect();
    out.push_str("...");
    out
}

/// Builds a condition with `lastTransitionTime = now` (truncated to seconds).
pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: jiff::Timestamp,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: trim_message(message),
        observed_generation,
        last_transition_time: Time(truncate_to_seconds(now)),
    }
}

/// Finds a condition by type.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True when the condition exists with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == TRUE)
}

/// True when the condition exists with status `False`.
pub fn is_false(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == FALSE)
}

/// True when the condition is absent or has status `Unknown`.
pub fn is_unknown(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_none_or(|c| c.status == UNKNOWN)
}

/// True when `Ready=True`.
pub fn is_ready(conditions: &[Condition]) -> bool {
    is_true(conditions, READY)
}

/// Reason of a condition, if present.
pub fn get_reason<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a str> {
    get(conditions, type_).map(|c| c.reason.as_str())
}

/// Message of a condition, if present.
pub fn get_message<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a str> {
    get(conditions, type_).map(|c| c.message.as_str())
}

fn same_state(a: &Condition, b: &Condition) -> bool {
    a.type_ == b.type_ && a.status == b.status && a.reason == b.reason && a.message == b.message
}

fn type_rank(type_: &str) -> u8 {
    match type_ {
        STALLED => 0,
        RECONCILING => 1,
        READY => 2,
        _ => 3,
    }
}

/// Sorts conditions the way Flux does: `Stalled`, `Reconciling`, `Ready` first, then the rest by
/// observedGeneration (descending) and type.
pub fn sort(conditions: &mut [Condition]) {
    conditions.sort_by(|a, b| {
        type_rank(&a.type_)
            .cmp(&type_rank(&b.type_))
            .then_with(|| {
                b.observed_generation
                    .unwrap_or(0)
                    .cmp(&a.observed_generation.unwrap_or(0))
            })
            .then_with(|| a.type_.cmp(&b.type_))
    });
}

/// Sets (adds or replaces by type) a condition. The existing `lastTransitionTime` is kept when the
/// status, reason and message did not change; otherwise the new condition's time is used.
/// Returns true when the stored condition changed in any field.
pub fn set(conditions: &mut Vec<Condition>, mut condition: Condition) -> bool {
    condition.message = trim_message(&condition.message);
    condition.last_transition_time = Time(truncate_to_seconds(condition.last_transition_time.0));
    let changed = if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == condition.type_)
    {
        if same_state(existing, &condition) {
            condition.last_transition_time = existing.last_transition_time.clone();
        }
        let changed = *existing != condition;
        *existing = condition;
        changed
    } else {
        conditions.push(condition);
        true
    };
    sort(conditions);
    changed
}

/// Removes a condition by type; returns true when one was removed.
pub fn delete(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    before != conditions.len()
}

/// Sets `type=True`.
pub fn mark_true(
    conditions: &mut Vec<Condition>,
    type_: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> bool {
    set(
        conditions,
        new_condition(type_, TRUE, reason, message, generation, now),
    )
}

/// Sets `type=False`.
pub fn mark_false(
    conditions: &mut Vec<Condition>,
    type_: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> bool {
    set(
        conditions,
        new_condition(type_, FALSE, reason, message, generation, now),
    )
}

/// Sets `type=Unknown`.
pub fn mark_unknown(
    conditions: &mut Vec<Condition>,
    type_: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> bool {
    set(
        conditions,
        new_condition(type_, UNKNOWN, reason, message, generation, now),
    )
}

/// Marks the object as reconciling (`Reconciling=True`) and, as kstatus requires, removes `Stalled`.
/// `Ready` becomes `Unknown` with the same reason/message only when it is absent or already
/// `Unknown` (the last step of the summary).
pub fn mark_reconciling(
    conditions: &mut Vec<Condition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    delete(conditions, STALLED);
    mark_true(conditions, RECONCILING, reason, message, generation, now);
    if is_unknown(conditions, READY) {
        mark_unknown(conditions, READY, reason, message, generation, now);
    }
}

/// Marks the object as stalled (`Stalled=True`, `Ready=False` with the same reason and message)
/// and removes `Reconciling`.
pub fn mark_stalled(
    conditions: &mut Vec<Condition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    delete(conditions, RECONCILING);
    mark_true(conditions, STALLED, reason, message, generation, now);
    mark_false(conditions, READY, reason, message, generation, now);
}

/// Marks the object ready (`Ready=True`), clearing `Reconciling` and `Stalled`.
pub fn mark_ready(
    conditions: &mut Vec<Condition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    delete(conditions, RECONCILING);
    delete(conditions, STALLED);
    mark_true(conditions, READY, reason, message, generation, now);
}

/// Which types feed the summary, and how.
#[derive(Debug, Clone, Copy)]
pub struct SummarizeOptions<'a> {
    /// Owned and summarised types, highest priority first (reason/message come from the first
    /// condition of the winning group in this order).
    pub priority: &'a [&'a str],
    /// Types with negative ("abnormal-true") polarity.
    pub negative_polarity: &'a [&'a str],
    /// Bipolar types: when one of them is `False`, it overrides `Ready`.
    pub bipolar: &'a [&'a str],
}

/// source-controller's GitRepository summary.
pub const GIT_REPOSITORY_SUMMARY: SummarizeOptions<'static> = SummarizeOptions {
    priority: &[
        "StorageOperationFailed",
        "FetchFailed",
        "IncludeUnavailable",
        "ArtifactOutdated",
        "ArtifactInStorage",
        "SourceVerified",
        STALLED,
        RECONCILING,
    ],
    negative_polarity: &[
        "StorageOperationFailed",
        "FetchFailed",
        "IncludeUnavailable",
        "ArtifactOutdated",
        STALLED,
        RECONCILING,
    ],
    bipolar: &["SourceVerified"],
};

fn group_rank(status: &str, negative: bool) -> u8 {
    match (status, negative) {
        (TRUE, true) => 0,
        (FALSE, false) => 1,
        (TRUE, false) => 2,
        (FALSE, true) => 3,
        _ => 4,
    }
}

/// Computes the summary `Ready` condition from the owned conditions (Flux's merge algorithm):
/// group by (status, polarity) with priority True+negative > False+positive > True+positive >
/// False+negative > Unknown; the top group decides the status (inverted for negative polarity);
/// reason and message come from its first member in priority order. A `False` bipolar condition
/// overrides the result. Returns `None` when no summarised condition is present.
pub fn summarize(
    conditions: &[Condition],
    opts: &SummarizeOptions<'_>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Option<Condition> {
    let mut best: Option<(u8, usize, &Condition)> = None;
    for (idx, type_) in opts.priority.iter().enumerate() {
        let Some(c) = get(conditions, type_) else {
            continue;
        };
        let rank = group_rank(&c.status, opts.negative_polarity.contains(type_));
        if best.is_none_or(|(r, i, _)| (rank, idx) < (r, i)) {
            best = Some((rank, idx, c));
        }
    }
    let (rank, _, top) = best?;
    let status = match rank {
        0 | 1 => FALSE,
        2 | 3 => TRUE,
        _ => UNKNOWN,
    };
    let mut ready = new_condition(READY, status, &top.reason, &top.message, generation, now);
    for type_ in opts.bipolar {
        if let Some(c) = get(conditions, type_).filter(|c| c.status == FALSE) {
            ready = new_condition(READY, FALSE, &c.reason, &c.message, generation, now);
            break;
        }
    }
    Some(ready)
}

/// Applies [`summarize`] and stores the result as `Ready` (keeping the transition time when
/// unchanged). Returns the stored Ready condition, if any.
pub fn set_summary(
    conditions: &mut Vec<Condition>,
    opts: &SummarizeOptions<'_>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Option<Condition> {
    let ready = summarize(conditions, opts, generation, now)?;
    set(conditions, ready);
    get(conditions, READY).cloned()
}

/// End-of-reconcile status finalisation: with `Ready=True`, `Reconciling` is
/// removed and the returned value is the generation to store as `status.observedGeneration`;
/// with `Ready=False` and `Reconciling` present, the latter's reason becomes
/// `ProgressingWithRetry`.
pub fn finalize_status(
    conditions: &mut Vec<Condition>,
    generation: i64,
    now: jiff::Timestamp,
) -> Option<i64> {
    if is_true(conditions, READY) {
        delete(conditions, RECONCILING);
        delete(conditions, STALLED);
        return Some(generation);
    }
    if is_false(conditions, READY)
        && let Some(rec) = get(conditions, RECONCILING).cloned()
    {
        let mut updated = rec;
        updated.reason = PROGRESSING_WITH_RETRY_REASON.to_string();
        updated.last_transition_time = Time(truncate_to_seconds(now));
        set(conditions, updated);
    }
    None
}

/// kstatus status of an object (as `kstatus`, `flux` and health checks compute it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KStatus {
    /// Reconciled and Ready.
    Current,
    /// Work in progress (or not yet observed).
    InProgress,
    /// Stalled: will not make progress without a change.
    Failed,
}

/// Computes the kstatus result: Reconciling=True → InProgress; Stalled=True →
/// Failed; observedGeneration ≠ generation → InProgress; otherwise Ready=True → Current, else
/// InProgress.
pub fn kstatus(
    conditions: &[Condition],
    generation: Option<i64>,
    observed_generation: Option<i64>,
) -> KStatus {
    if let (Some(g), Some(o)) = (generation, observed_generation)
        && g != o
    {
        return KStatus::InProgress;
    }
    if is_true(conditions, RECONCILING) {
        return KStatus::InProgress;
    }
    if is_true(conditions, STALLED) {
        return KStatus::Failed;
    }
    if is_true(conditions, READY) {
        KStatus::Current
    } else {
        KStatus::InProgress
    }
}

/// The `reconcile.fluxcd.io/requestedAt` annotation value, if set and non-empty.
pub fn requested_at(annotations: Option<&BTreeMap<String, String>>) -> Option<&str> {
    annotations
        .and_then(|a| a.get(RECONCILE_REQUESTED_AT_ANNOTATION))
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// True when the object carries a `requestedAt` value that differs from
/// `status.lastHandledReconcileAt`, i.e. `flux reconcile` asked for a reconcile not yet handled.
pub fn reconcile_requested(
    annotations: Option<&BTreeMap<String, String>>,
    last_handled_reconcile_at: Option<&str>,
) -> bool {
    match requested_at(annotations) {
        Some(v) => last_handled_reconcile_at != Some(v),
        None => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ts(secs: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn trims_long_messages() {
        let long = "x".repeat(MAX_MESSAGE_LEN + 10);
        let t = trim_message(&long);
        assert_eq!(t.chars().count(), MAX_MESSAGE_LEN);
        assert!(t.ends_with("..."));
        assert_eq!(trim_message("short"), "short");
    }

    #[test]
    fn truncates_time_to_seconds() {
        let t = jiff::Timestamp::from_millisecond(1_500).unwrap();
        assert_eq!(truncate_to_seconds(t), ts(1));
    }
}
