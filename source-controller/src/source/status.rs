//! Status transitions every source kind shares (Flux's source reconcilers all summarise the same
//! way): `Reconciling` at the start, failures recorded one at a time, the stored artifact kept or
//! dropped, and the Ready summary at the end. Pure functions over [`SourceStatus`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use rflux_common::api::meta::Artifact as ApiArtifact;
use rflux_common::runtime::StageError;
use rflux_common::runtime::conditions::{
    self as cond, READY, RECONCILING, STALLED, SUCCEEDED_REASON, SummarizeOptions,
};

use crate::artifact::Artifact as StoredArtifact;

pub const ARTIFACT_IN_STORAGE: &str = "ArtifactInStorage";
pub const ARTIFACT_OUTDATED: &str = "ArtifactOutdated";
pub const FETCH_FAILED: &str = "FetchFailed";
pub const STORAGE_OPERATION_FAILED: &str = "StorageOperationFailed";
pub const SOURCE_VERIFIED: &str = "SourceVerified";
pub const NEW_REVISION: &str = "NewRevision";
pub const PROGRESSING: &str = "Progressing";

/// The status fields the shared transitions touch, and the kind's summary rules.
pub trait SourceStatus {
    /// How Ready is summarised for this kind.
    const SUMMARY: SummarizeOptions<'static>;
    /// Failure conditions, of which at most one is set at a time (and whose clearing by a
    /// success deserves a recovery event).
    const FAILURES: &'static [&'static str];

    fn conditions(&self) -> &[Condition];
    fn artifact(&self) -> Option<&ApiArtifact>;
    fn last_handled_reconcile_at(&self) -> Option<&str>;
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
    fn artifact_mut(&mut self) -> &mut Option<ApiArtifact>;
    fn observed_generation_mut(&mut self) -> &mut Option<i64>;
    fn last_handled_reconcile_at_mut(&mut self) -> &mut Option<String>;
}

/// Implements [`SourceStatus`] for a status type with the usual field names.
#[macro_export]
macro_rules! impl_source_status {
    ($ty:ty, $summary:expr, $failures:expr) => {
        impl $crate::source::status::SourceStatus for $ty {
            const SUMMARY: rflux_common::runtime::conditions::SummarizeOptions<'static> = $summary;
            const FAILURES: &'static [&'static str] = $failures;
            fn conditions(&self) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
                self.conditions.as_deref().unwrap_or(&[])
            }
            fn artifact(&self) -> Option<&rflux_common::api::meta::Artifact> {
                self.artifact.as_ref()
            }
            fn last_handled_reconcile_at(&self) -> Option<&str> {
                self.last_handled_reconcile_at.as_deref()
            }
            fn conditions_mut(
                &mut self,
            ) -> &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
                self.conditions.get_or_insert_with(Vec::new)
            }
            fn artifact_mut(&mut self) -> &mut Option<rflux_common::api::meta::Artifact> {
                &mut self.artifact
            }
            fn observed_generation_mut(&mut self) -> &mut Option<i64> {
                &mut self.observed_generation
            }
            fn last_handled_reconcile_at_mut(&mut self) -> &mut Option<String> {
                &mut self.last_handled_reconcile_at
            }
        }
    };
}

/// Maps a stored artifact to the API type.
pub fn to_api_artifact(a: &StoredArtifact, now: jiff::Timestamp) -> ApiArtifact {
    let ts = a.last_update_time.parse::<jiff::Timestamp>().unwrap_or(now);
    ApiArtifact {
        path: a.path.clone(),
        url: a.url.clone(),
        revision: a.revision.clone(),
        digest: a.digest.clone(),
        last_update_time: Time(cond::truncate_to_seconds(ts)),
        size: i64::try_from(a.size).ok(),
        metadata: None,
    }
}

/// Maps the API artifact back to the storage type.
pub fn from_api_artifact(a: &ApiArtifact) -> StoredArtifact {
    StoredArtifact {
        path: a.path.clone(),
        url: a.url.clone(),
        revision: a.revision.clone(),
        digest: a.digest.clone(),
        last_update_time: a.last_update_time.0.to_string(),
        size: a.size.and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
    }
}

/// `Reconciling=True` at the start of a reconcile. Returns true when the generation
/// changed (the caller then patches right away).
pub fn begin<S: SourceStatus>(status: &mut S, generation: i64, now: jiff::Timestamp) -> bool {
    let observed = status.observed_generation_mut().unwrap_or(-1);
    let changed = observed != generation;
    let msg = if changed {
        format!("processing object: new generation {observed} -> {generation}")
    } else {
        cond::RECONCILIATION_IN_PROGRESS_MSG.to_string()
    };
    cond::mark_reconciling(
        status.conditions_mut(),
        PROGRESSING,
        &msg,
        Some(generation),
        now,
    );
    changed
}

/// Reconciling (and Ready, when Unknown) with a progress message such as `building artifact`.
pub fn progress<S: SourceStatus>(status: &mut S, msg: &str, generation: i64, now: jiff::Timestamp) {
    cond::mark_reconciling(
        status.conditions_mut(),
        PROGRESSING,
        msg,
        Some(generation),
        now,
    );
}

/// The artifact vanished from the storage or failed verification: drop it.
pub fn artifact_missing<S: SourceStatus>(status: &mut S, generation: i64, now: jiff::Timestamp) {
    *status.artifact_mut() = None;
    let msg = "building artifact: disappeared from storage";
    let conds = status.conditions_mut();
    cond::delete(conds, ARTIFACT_IN_STORAGE);
    cond::mark_reconciling(conds, PROGRESSING, msg, Some(generation), now);
    cond::mark_unknown(conds, READY, PROGRESSING, msg, Some(generation), now);
}

/// A new upstream revision is about to be built: `ArtifactOutdated=True/NewRevision` with
/// `outdated` (when an artifact exists) and Reconciling `building artifact: <outdated>`.
pub fn new_revision<S: SourceStatus>(
    status: &mut S,
    outdated: &str,
    generation: i64,
    now: jiff::Timestamp,
) {
    if status.artifact().is_none() {
        progress(status, "building artifact", generation, now);
        return;
    }
    let conds = status.conditions_mut();
    cond::mark_true(
        conds,
        ARTIFACT_OUTDATED,
        NEW_REVISION,
        outdated,
        Some(generation),
        now,
    );
    cond::mark_reconciling(
        conds,
        PROGRESSING,
        &format!("building artifact: {outdated}"),
        Some(generation),
        now,
    );
}

/// The stored artifact stays valid: `ArtifactInStorage=True` with `stored` (the kind's message),
/// and the failures and `ArtifactOutdated` cleared.
pub fn keep_artifact<S: SourceStatus>(
    status: &mut S,
    stored: &str,
    generation: i64,
    now: jiff::Timestamp,
) {
    let conds = status.conditions_mut();
    cond::mark_true(
        conds,
        ARTIFACT_IN_STORAGE,
        SUCCEEDED_REASON,
        stored,
        Some(generation),
        now,
    );
    for t in S::FAILURES.iter().chain([&ARTIFACT_OUTDATED]) {
        cond::delete(conds, t);
    }
}

/// Records a failed stage (the other failure conditions are cleared: one failure at a time).
/// `SourceVerified` is bipolar: a verification failure sets it False.
pub fn record_failure<S: SourceStatus>(
    status: &mut S,
    err: &StageError,
    generation: i64,
    now: jiff::Timestamp,
) {
    let conds = status.conditions_mut();
    for t in S::FAILURES {
        if *t != err.condition {
            cond::delete(conds, t);
        }
    }
    let mark = if err.condition == SOURCE_VERIFIED {
        cond::mark_false
    } else {
        cond::mark_true
    };
    mark(
        conds,
        err.condition,
        err.reason,
        &err.message,
        Some(generation),
        now,
    );
}

/// End of reconcile: summarise Ready from the other conditions and compute observedGeneration.
/// `result` is `Ok` for success (including no-op), the stage error otherwise.
pub fn finish<S: SourceStatus>(
    status: &mut S,
    result: Result<(), &StageError>,
    generation: i64,
    requested_at: Option<&str>,
    now: jiff::Timestamp,
) {
    if let Some(r) = requested_at {
        *status.last_handled_reconcile_at_mut() = Some(r.to_string());
    }
    let conds = status.conditions_mut();
    let observed = match result {
        Ok(()) => {
            cond::delete(conds, RECONCILING);
            cond::delete(conds, STALLED);
            cond::set_summary(conds, &S::SUMMARY, Some(generation), now);
            cond::is_true(conds, READY)
        }
        Err(e) if e.severity.stalls() => {
            cond::mark_stalled(conds, e.reason, &e.message, Some(generation), now);
            true
        }
        Err(_) => {
            cond::delete(conds, STALLED);
            cond::set_summary(conds, &S::SUMMARY, Some(generation), now);
            cond::finalize_status(conds, generation, now);
            false
        }
    };
    if observed {
        *status.observed_generation_mut() = Some(generation);
    }
}

/// Whether a failure condition is set (its clearing by a success deserves a recovery event).
pub fn had_failure<S: SourceStatus>(conditions: &[Condition]) -> bool {
    S::FAILURES.iter().any(|t| cond::is_true(conditions, t))
}
