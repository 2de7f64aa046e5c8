#![allow(clippy::unwrap_used)]

use super::*;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn sched(cron: &str, window: &str) -> Schedule {
    Schedule {
        cron: cron.into(),
        time_zone: Some("UTC".into()),
        window: Some(window.into()),
    }
}

const TWO_MIN: Duration = Duration::from_secs(120);

#[test]
fn no_schedule_means_any_time() {
    assert!(
        Scheduler::new(&[], TWO_MIN, ts("2026-01-01T00:00:00Z"))
            .unwrap()
            .is_none()
    );
}

#[test]
fn zero_window_always_matches() {
    let s = Scheduler::new(
        &[sched("0 8 * * *", "0s")],
        TWO_MIN,
        ts("2026-01-01T00:00:00Z"),
    )
    .unwrap()
    .unwrap();
    assert!(s.should_reconcile(ts("2026-01-01T13:17:00Z")));
    // ... but does not count for planning the next interval.
    assert!(!s.should_schedule_interval(ts("2026-01-01T13:17:00Z")));
}

#[test]
fn window_matches_until_now_plus_timeout_reaches_its_end() {
    let now = ts("2026-01-01T00:00:00Z");
    let s = Scheduler::new(&[sched("0 8 * * *", "1h")], TWO_MIN, now)
        .unwrap()
        .unwrap();
    assert!(!s.should_reconcile(ts("2026-01-01T07:59:00Z")));
    assert!(s.should_reconcile(ts("2026-01-01T08:00:00Z")));
    assert!(s.should_reconcile(ts("2026-01-01T08:57:59Z")));
    // 08:58 + 2m = 09:00, not before the window's end.
    assert!(!s.should_reconcile(ts("2026-01-01T08:58:00Z")));
    assert!(s.should_schedule_interval(ts("2026-01-01T08:30:00Z")));
    assert!(!s.should_schedule_interval(ts("2026-01-01T10:30:00Z")));
    let next = s.next(ts("2026-01-01T08:58:00Z")).unwrap();
    assert_eq!(next.when.0, ts("2026-01-02T08:00:00Z"));
    assert_eq!(next.cron, "0 8 * * *");
    assert_eq!(next.window.as_deref(), Some("1h"));
}

#[test]
fn next_is_the_earliest_of_all_schedules() {
    let s = Scheduler::new(
        &[sched("0 20 * * *", "1h"), sched("30 9 * * *", "0s")],
        TWO_MIN,
        ts("2026-01-01T00:00:00Z"),
    )
    .unwrap()
    .unwrap();
    let next = s.next(ts("2026-01-01T10:00:00Z")).unwrap();
    assert_eq!(
        (next.cron.as_str(), next.when.0),
        ("0 20 * * *", ts("2026-01-01T20:00:00Z"))
    );
    let next = s.next(ts("2026-01-01T21:00:00Z")).unwrap();
    assert_eq!(
        (next.cron.as_str(), next.when.0),
        ("30 9 * * *", ts("2026-01-02T09:30:00Z"))
    );
}

#[test]
fn invalid_schedules_are_refused_with_their_index() {
    let now = ts("2026-01-01T00:00:00Z");
    let err = |s: Vec<Schedule>| Scheduler::new(&s, TWO_MIN, now).err().unwrap().to_string();
    let e = err(vec![sched("0 8 * * *", "0s"), sched("0 8 * * *", "3m")]);
    assert_eq!(
        e,
        "failed to validate schedule[1]: a non-zero window (3m0s) must always be at least twice the timeout (2m0s)"
    );
    let e = err(vec![sched("0 25 * * *", "0s")]);
    assert!(
        e.starts_with("failed to validate schedule[0]: failed to parse cron spec '0 25 * * *' with timezone 'UTC': "),
        "{e}"
    );
    let e = err(vec![sched("0 0 30 2 *", "0s")]);
    assert!(e.contains("no trigger in the next five years"), "{e}");
    let e = err(vec![sched("@daily", "soon")]);
    assert!(e.contains("invalid window \"soon\""), "{e}");
    let mut zone = sched("@daily", "0s");
    zone.time_zone = Some("Nowhere/City".into());
    assert!(err(vec![zone]).contains("unknown time zone"));
}
