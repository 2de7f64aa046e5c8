//! kstatus conditions: set/replace, transition times, ordering, summary, finalisation, requestedAt.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use rflux_common::runtime::conditions::{
    self as c, GIT_REPOSITORY_SUMMARY, KStatus, SummarizeOptions,
};

fn ts(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(s).unwrap()
}

fn types(conds: &[Condition]) -> Vec<&str> {
    conds.iter().map(|c| c.type_.as_str()).collect()
}

#[test]
fn set_replaces_by_type_and_keeps_transition_time_when_state_unchanged() {
    let mut conds = Vec::new();
    assert!(c::mark_true(
        &mut conds,
        "ArtifactInStorage",
        "Succeeded",
        "stored",
        Some(1),
        ts(100)
    ));
    // Same state, later time, new generation: time kept, generation updated.
    assert!(c::mark_true(
        &mut conds,
        "ArtifactInStorage",
        "Succeeded",
        "stored",
        Some(2),
        ts(200)
    ));
    assert_eq!(conds.len(), 1);
    assert_eq!(conds[0].last_transition_time.0, ts(100));
    assert_eq!(conds[0].observed_generation, Some(2));
    // Exactly the same: no change reported.
    assert!(!c::mark_true(
        &mut conds,
        "ArtifactInStorage",
        "Succeeded",
        "stored",
        Some(2),
        ts(300)
    ));
    // Status change: new time.
    c::mark_false(
        &mut conds,
        "ArtifactInStorage",
        "Missing",
        "gone",
        Some(2),
        ts(400),
    );
    assert_eq!(conds[0].last_transition_time.0, ts(400));
    assert_eq!(conds[0].status, "False");
    // Message change (Flux semantics): new time too.
    c::mark_false(
        &mut conds,
        "ArtifactInStorage",
        "Missing",
        "gone again",
        Some(2),
        ts(500),
    );
    assert_eq!(conds[0].last_transition_time.0, ts(500));
    assert!(c::delete(&mut conds, "ArtifactInStorage"));
    assert!(!c::delete(&mut conds, "ArtifactInStorage"));
}

#[test]
fn ordering_puts_stalled_reconciling_ready_first() {
    let mut conds = Vec::new();
    c::mark_true(
        &mut conds,
        "FetchFailed",
        "GitOperationFailed",
        "x",
        Some(1),
        ts(1),
    );
    c::mark_true(
        &mut conds,
        "ArtifactInStorage",
        "Succeeded",
        "x",
        Some(2),
        ts(1),
    );
    c::mark_false(
        &mut conds,
        "Ready",
        "GitOperationFailed",
        "x",
        Some(1),
        ts(1),
    );
    c::mark_true(
        &mut conds,
        "Reconciling",
        "Progressing",
        "x",
        Some(1),
        ts(1),
    );
    c::mark_true(&mut conds, "Stalled", "URLInvalid", "x", Some(1), ts(1));
    c::mark_true(
        &mut conds,
        "ArtifactOutdated",
        "NewRevision",
        "x",
        Some(2),
        ts(1),
    );
    assert_eq!(
        types(&conds),
        vec![
            "Stalled",
            "Reconciling",
            "Ready",
            "ArtifactInStorage",
            "ArtifactOutdated",
            "FetchFailed"
        ]
    );
}

#[test]
fn reconciling_and_stalled_helpers() {
    let mut conds = Vec::new();
    c::mark_reconciling(
        &mut conds,
        "Progressing",
        "reconciliation in progress",
        Some(3),
        ts(10),
    );
    assert!(c::is_true(&conds, "Reconciling"));
    assert!(c::is_unknown(&conds, "Ready"));
    assert_eq!(
        c::get_message(&conds, "Ready"),
        Some("reconciliation in progress")
    );
    // Ready False is not reset to Unknown by a new reconcile.
    c::mark_stalled(&mut conds, "URLInvalid", "bad url", Some(3), ts(11));
    assert!(c::is_true(&conds, "Stalled"));
    assert!(c::get(&conds, "Reconciling").is_none());
    assert!(c::is_false(&conds, "Ready"));
    assert_eq!(c::get_reason(&conds, "Ready"), Some("URLInvalid"));
    c::mark_reconciling(&mut conds, "Progressing", "again", Some(4), ts(12));
    assert!(c::get(&conds, "Stalled").is_none());
    assert!(c::is_false(&conds, "Ready"));
    c::mark_ready(&mut conds, "Succeeded", "ok", Some(4), ts(13));
    assert!(c::is_ready(&conds));
    assert!(c::get(&conds, "Reconciling").is_none());
}

#[test]
fn summary_success_copies_artifact_in_storage() {
    let mut conds = Vec::new();
    c::mark_true(
        &mut conds,
        "ArtifactInStorage",
        "Succeeded",
        "stored artifact for revision 'main@sha1:abc'",
        Some(1),
        ts(1),
    );
    let ready = c::set_summary(&mut conds, &GIT_REPOSITORY_SUMMARY, Some(1), ts(2)).unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.reason, "Succeeded");
    assert_eq!(
        ready.message,
        "stored artifact for revision 'main@sha1:abc'"
    );
    assert_eq!(ready.observed_generation, Some(1));
}

#[test]
fn summary_negative_true_wins_over_positive_true() {
    let mut conds = Vec::new();
    c::mark_true(
        &mut conds,
        "ArtifactInStorage",
        "Succeeded",
        "stored",
        Some(2),
        ts(1),
    );
    c::mark_true(
        &mut conds,
        "FetchFailed",
        "GitOperationFailed",
        "failed to checkout",
        Some(2),
        ts(1),
    );
    c::mark_true(
        &mut conds,
        "Reconciling",
        "ProgressingWithRetry",
        "retrying",
        Some(2),
        ts(1),
    );
    let ready = c::summarize(&conds, &GIT_REPOSITORY_SUMMARY, Some(2), ts(3)).unwrap();
    assert_eq!(ready.status, "False");
    // FetchFailed comes before Reconciling in the priority list.
    assert_eq!(ready.reason, "GitOperationFailed");
    assert_eq!(ready.message, "failed to checkout");
}

#[test]
fn summary_priority_order_picks_first_of_top_group() {
    let mut conds = Vec::new();
    c::mark_true(
        &mut conds,
        "ArtifactOutdated",
        "NewRevision",
        "new upstream revision",
        Some(1),
        ts(1),
    );
    c::mark_true(
        &mut conds,
        "StorageOperationFailed",
        "ArchiveOperationFailed",
        "tar failed",
        Some(1),
        ts(1),
    );
    let ready = c::summarize(&conds, &GIT_REPOSITORY_SUMMARY, Some(1), ts(1)).unwrap();
    assert_eq!(ready.reason, "ArchiveOperationFailed");
}

#[test]
fn summary_unknown_and_false_negative() {
    // Only a False negative condition: status becomes True (inverted), from that condition.
    let mut conds = Vec::new();
    c::mark_false(
        &mut conds,
        "FetchFailed",
        "Recovered",
        "fine",
        Some(1),
        ts(1),
    );
    let ready = c::summarize(&conds, &GIT_REPOSITORY_SUMMARY, Some(1), ts(1)).unwrap();
    assert_eq!(ready.status, "True");
    // Only Unknown: Unknown.
    let mut conds = Vec::new();
    c::mark_unknown(
        &mut conds,
        "ArtifactInStorage",
        "Progressing",
        "building",
        Some(1),
        ts(1),
    );
    let ready = c::summarize(&conds, &GIT_REPOSITORY_SUMMARY, Some(1), ts(1)).unwrap();
    assert_eq!(ready.status, "Unknown");
    // Nothing owned: no summary.
    let mut conds = Vec::new();
    c::mark_true(&mut conds, "Healthy", "Succeeded", "x", Some(1), ts(1));
    assert!(c::summarize(&conds, &GIT_REPOSITORY_SUMMARY, Some(1), ts(1)).is_none());
}

#[test]
fn summary_false_bipolar_overrides() {
    let mut conds = Vec::new();
    c::mark_true(
        &mut conds,
        "ArtifactInStorage",
        "Succeeded",
        "stored",
        Some(1),
        ts(1),
    );
    c::mark_false(
        &mut conds,
        "SourceVerified",
        "InvalidCommitSignature",
        "bad signature",
        Some(1),
        ts(1),
    );
    let ready = c::summarize(&conds, &GIT_REPOSITORY_SUMMARY, Some(1), ts(1)).unwrap();
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason, "InvalidCommitSignature");
}

#[test]
fn custom_summary_options() {
    let opts = SummarizeOptions {
        priority: &["Healthy", "Reconciling"],
        negative_polarity: &["Reconciling"],
        bipolar: &[],
    };
    let mut conds = Vec::new();
    c::mark_false(
        &mut conds,
        "Healthy",
        "HealthCheckFailed",
        "timeout",
        Some(1),
        ts(1),
    );
    let ready = c::summarize(&conds, &opts, Some(1), ts(1)).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "HealthCheckFailed")
    );
}

#[test]
fn finalize_status_rules() {
    let mut conds = Vec::new();
    c::mark_true(
        &mut conds,
        "Reconciling",
        "Progressing",
        "working",
        Some(5),
        ts(1),
    );
    c::mark_true(
        &mut conds,
        "Ready",
        "ReconciliationSucceeded",
        "Applied revision",
        Some(5),
        ts(1),
    );
    assert_eq!(c::finalize_status(&mut conds, 5, ts(2)), Some(5));
    assert!(c::get(&conds, "Reconciling").is_none());

    let mut conds = Vec::new();
    c::mark_true(
        &mut conds,
        "Reconciling",
        "Progressing",
        "working",
        Some(5),
        ts(1),
    );
    c::mark_false(
        &mut conds,
        "Ready",
        "BuildFailed",
        "kustomize build failed",
        Some(5),
        ts(1),
    );
    assert_eq!(c::finalize_status(&mut conds, 5, ts(2)), None);
    assert_eq!(
        c::get_reason(&conds, "Reconciling"),
        Some("ProgressingWithRetry")
    );
}

#[test]
fn kstatus_computation() {
    let mut conds = Vec::new();
    assert_eq!(c::kstatus(&conds, Some(1), None), KStatus::InProgress);
    c::mark_true(&mut conds, "Ready", "Succeeded", "ok", Some(1), ts(1));
    assert_eq!(c::kstatus(&conds, Some(1), Some(1)), KStatus::Current);
    assert_eq!(c::kstatus(&conds, Some(2), Some(1)), KStatus::InProgress);
    c::mark_true(
        &mut conds,
        "Reconciling",
        "Progressing",
        "x",
        Some(1),
        ts(1),
    );
    assert_eq!(c::kstatus(&conds, Some(1), Some(1)), KStatus::InProgress);
    c::delete(&mut conds, "Reconciling");
    c::mark_true(&mut conds, "Stalled", "URLInvalid", "x", Some(1), ts(1));
    assert_eq!(c::kstatus(&conds, Some(1), Some(1)), KStatus::Failed);
}

#[test]
fn requested_at_annotation() {
    let mut ann = BTreeMap::new();
    assert!(!c::reconcile_requested(Some(&ann), None));
    ann.insert(
        c::RECONCILE_REQUESTED_AT_ANNOTATION.to_string(),
        "2024-01-01T00:00:00Z".to_string(),
    );
    assert_eq!(c::requested_at(Some(&ann)), Some("2024-01-01T00:00:00Z"));
    assert!(c::reconcile_requested(Some(&ann), None));
    assert!(c::reconcile_requested(Some(&ann), Some("older")));
    assert!(!c::reconcile_requested(
        Some(&ann),
        Some("2024-01-01T00:00:00Z")
    ));
    assert!(!c::reconcile_requested(None, None));
}

#[test]
fn long_messages_are_trimmed_on_set() {
    let mut conds = Vec::new();
    c::mark_false(
        &mut conds,
        "Ready",
        "BuildFailed",
        &"e".repeat(40_000),
        Some(1),
        ts(1),
    );
    assert_eq!(conds[0].message.chars().count(), c::MAX_MESSAGE_LEN);
    assert!(conds[0].message.ends_with("..."));
}
