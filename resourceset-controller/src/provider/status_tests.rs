#![allow(clippy::unwrap_used)]

use super::*;
use rflux_common::api::resourcesetinputprovider::Schedule;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

#[test]
fn initialize_marks_progressing_or_disabled() {
    let now = ts("2026-01-01T00:00:00Z");
    let mut c = Vec::new();
    initialize(&mut c, false, Some(1), now);
    assert!(cond::is_unknown(&c, READY));
    assert_eq!(cond::get_reason(&c, RECONCILING), Some("Progressing"));
    let mut c = Vec::new();
    initialize(&mut c, true, Some(1), now);
    assert!(cond::is_true(&c, READY));
    assert_eq!(cond::get_reason(&c, READY), Some("ReconciliationDisabled"));
    assert_eq!(
        cond::get_message(&c, READY),
        Some("Initialized with reconciliation suspended")
    );
    assert!(cond::get(&c, RECONCILING).is_none());
}

#[test]
fn finalize_sets_retry_reason_and_drops_reconciling() {
    let now = ts("2026-01-01T00:00:00Z");
    let mut status = ResourceSetInputProviderStatus::default();
    let mut c = Vec::new();
    initialize(&mut c, false, Some(1), now);
    cond::mark_false(&mut c, READY, "ReconciliationFailed", "boom", Some(1), now);
    let a = annotations(&[("reconcile.fluxcd.io/requestedAt", "t1")]);
    finalize(&mut status, &mut c, Some(&a));
    assert_eq!(
        cond::get_reason(&c, RECONCILING),
        Some("ProgressingWithRetry")
    );
    assert_eq!(status.last_handled_reconcile_at.as_deref(), Some("t1"));
    cond::mark_true(&mut c, READY, "ReconciliationSucceeded", "ok", Some(1), now);
    finalize(&mut status, &mut c, None);
    assert!(cond::get(&c, RECONCILING).is_none());
}

#[test]
fn force_request_needs_requested_at_and_is_handled_once() {
    let mut status = ResourceSetInputProviderStatus::default();
    let only_force = annotations(&[("reconcile.fluxcd.io/forceAt", "t1")]);
    assert!(!take_force_request(&mut status, Some(&only_force)));
    let differ = annotations(&[
        ("reconcile.fluxcd.io/forceAt", "t1"),
        ("reconcile.fluxcd.io/requestedAt", "t2"),
    ]);
    assert!(!take_force_request(&mut status, Some(&differ)));
    let both = annotations(&[
        ("reconcile.fluxcd.io/forceAt", "t3"),
        ("reconcile.fluxcd.io/requestedAt", "t3"),
    ]);
    assert!(take_force_request(&mut status, Some(&both)));
    assert_eq!(status.last_handled_force_at.as_deref(), Some("t3"));
    assert!(!take_force_request(&mut status, Some(&both)));
}

#[test]
fn finished_message_rounds_like_go() {
    assert_eq!(
        finished_message(Duration::from_micros(12_600)),
        "Reconciliation finished in 13ms"
    );
    assert_eq!(
        finished_message(Duration::from_millis(1_499)),
        "Reconciliation finished in 1s"
    );
    assert_eq!(
        finished_message(Duration::from_millis(61_500)),
        "Reconciliation finished in 1m2s"
    );
}

fn scheduler(cron: &str, window: &str) -> Scheduler {
    Scheduler::new(
        &[Schedule {
            cron: cron.into(),
            time_zone: Some("UTC".into()),
            window: Some(window.into()),
        }],
        Duration::from_secs(120),
        ts("2026-01-01T00:00:00Z"),
    )
    .unwrap()
    .unwrap()
}

#[test]
fn requeue_follows_interval_or_schedule() {
    let ten = Duration::from_secs(600);
    let end = ts("2026-01-01T08:10:00Z");
    assert_eq!(requeue_after(ten, None, end), (Some(ten), None));
    assert_eq!(requeue_after(Duration::ZERO, None, end), (None, None));
    // Inside a 1h window opened at 08:00: the next interval (08:20) is still in it.
    let s = scheduler("0 8 * * *", "1h");
    assert_eq!(requeue_after(ten, Some(&s), end), (Some(ten), None));
    // At 08:55 the next interval falls outside: wait for tomorrow's window.
    let late = ts("2026-01-01T08:55:00Z");
    let (wait, next) = requeue_after(ten, Some(&s), late);
    assert_eq!(next.unwrap().when.0, ts("2026-01-02T08:00:00Z"));
    assert_eq!(wait, Some(Duration::from_secs(23 * 3600 + 5 * 60)));
    // A trigger sooner than the interval wins.
    let s = scheduler("*/5 * * * *", "0s");
    let (wait, next) = requeue_after(ten, Some(&s), end);
    assert_eq!(wait, Some(Duration::from_secs(300)));
    assert_eq!(next.unwrap().when.0, ts("2026-01-01T08:15:00Z"));
}
