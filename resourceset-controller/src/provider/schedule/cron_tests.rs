#![allow(clippy::unwrap_used)]

use super::*;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// `(cron, time zone, now, robfig/cron v3.0.1's Next(now))`, recorded with the Go library
/// (`cron.NewParser(Minute|Hour|Dom|Month|Dow|Descriptor)`, `CRON_TZ=<tz>` prefix).
const NEXT: &[(&str, &str, &str, &str)] = &[
    (
        "*/5 * * * *",
        "UTC",
        "2026-03-04T10:07:30Z",
        "2026-03-04T10:10:00Z",
    ),
    (
        "0 8 * * 1-5",
        "UTC",
        "2026-03-06T09:00:00Z",
        "2026-03-09T08:00:00Z",
    ),
    (
        "0 8 * * 1-5",
        "Europe/Paris",
        "2026-03-06T09:00:00Z",
        "2026-03-09T07:00:00Z",
    ),
    // 02:30 does not exist on 2026-03-29 in Paris: skipped.
    (
        "30 2 * * *",
        "Europe/Paris",
        "2026-03-28T12:00:00Z",
        "2026-03-30T00:30:00Z",
    ),
    (
        "0 0 1,15 * 3",
        "UTC",
        "2026-01-02T00:00:00Z",
        "2026-01-07T00:00:00Z",
    ),
    (
        "0 0 1,15 * *",
        "UTC",
        "2026-01-02T00:00:00Z",
        "2026-01-15T00:00:00Z",
    ),
    (
        "0 0 * * 3",
        "UTC",
        "2026-01-02T00:00:00Z",
        "2026-01-07T00:00:00Z",
    ),
    (
        "0 0 ? * 3",
        "UTC",
        "2026-01-02T00:00:00Z",
        "2026-01-07T00:00:00Z",
    ),
    (
        "0 0 */2 * 3",
        "UTC",
        "2026-01-02T00:00:00Z",
        "2026-01-03T00:00:00Z",
    ),
    (
        "0 0 29 2 *",
        "UTC",
        "2026-01-02T00:00:00Z",
        "2028-02-29T00:00:00Z",
    ),
    (
        "15 14 1 * *",
        "America/New_York",
        "2026-10-31T20:00:00Z",
        "2026-11-01T19:15:00Z",
    ),
    (
        "0 12 * jan,JUL sun",
        "UTC",
        "2026-02-01T00:00:00Z",
        "2026-07-05T12:00:00Z",
    ),
    (
        "5/20 * * * *",
        "UTC",
        "2026-02-01T00:00:00Z",
        "2026-02-01T00:05:00Z",
    ),
    (
        "@daily",
        "UTC",
        "2026-02-01T10:00:00Z",
        "2026-02-02T00:00:00Z",
    ),
    (
        "@hourly",
        "Asia/Kolkata",
        "2026-02-01T10:00:00Z",
        "2026-02-01T10:30:00Z",
    ),
    (
        "@weekly",
        "UTC",
        "2026-02-01T10:00:00Z",
        "2026-02-08T00:00:00Z",
    ),
    (
        "@monthly",
        "UTC",
        "2026-02-01T10:00:00Z",
        "2026-03-01T00:00:00Z",
    ),
    (
        "@yearly",
        "UTC",
        "2026-02-01T10:00:00Z",
        "2027-01-01T00:00:00Z",
    ),
    (
        "@every 90s",
        "UTC",
        "2026-02-01T10:00:00Z",
        "2026-02-01T10:01:30Z",
    ),
    (
        "@every 1h30m",
        "Europe/Paris",
        "2026-02-01T10:00:17Z",
        "2026-02-01T11:30:17Z",
    ),
    (
        "@every 1ms",
        "UTC",
        "2026-02-01T10:00:00Z",
        "2026-02-01T10:00:01Z",
    ),
    (
        "0 9 * * mon-fri",
        "UTC",
        "2026-02-06T09:00:00Z",
        "2026-02-09T09:00:00Z",
    ),
    (
        "0 9 * * MON-FRI",
        "UTC",
        "2026-02-07T09:00:00Z",
        "2026-02-09T09:00:00Z",
    ),
    (
        "0 0 31 * *",
        "UTC",
        "2026-02-01T00:00:00Z",
        "2026-03-31T00:00:00Z",
    ),
];

#[test]
fn next_matches_robfig() {
    for (spec, tz, now, want) in NEXT {
        let c = Cron::parse(spec, tz).unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!(
            c.next(ts(now)),
            Some(ts(want)),
            "{spec} in {tz} after {now}"
        );
    }
}

#[test]
fn refused_like_robfig() {
    for (spec, tz, needle) in [
        ("0 0 * * 7", "UTC", "end of range (7) above maximum (6)"),
        ("0 0 * *", "UTC", "expected exactly 5 fields, found 4"),
        ("0 0 * * * *", "UTC", "expected exactly 5 fields, found 6"),
        ("60 * * * *", "UTC", "end of range (60) above maximum (59)"),
        (
            "5-1 * * * *",
            "UTC",
            "beginning of range (5) beyond end of range (1)",
        ),
        (
            "*/0 * * * *",
            "UTC",
            "step of range should be a positive number",
        ),
        ("1-2-3 * * * *", "UTC", "too many hyphens"),
        ("1/2/3 * * * *", "UTC", "too many slashes"),
        ("x * * * *", "UTC", "failed to parse int"),
        ("-1 * * * *", "UTC", "failed to parse int"),
        ("@every x", "UTC", "failed to parse duration"),
        ("@often", "UTC", "unrecognized descriptor: @often"),
        ("0 8 * * *", "Mars/Olympus", "unknown time zone"),
        ("", "UTC", "empty spec"),
    ] {
        let err = Cron::parse(spec, tz).unwrap_err().to_string();
        assert!(err.contains(needle), "{spec:?}: {err}");
    }
}

#[test]
fn never_triggering_spec_has_no_next() {
    let c = Cron::parse("0 0 30 2 *", "UTC").unwrap();
    assert_eq!(c.next(ts("2026-02-01T00:00:00Z")), None);
}

#[test]
fn tz_prefix_in_the_spec_without_a_time_zone() {
    let c = Cron::parse("CRON_TZ=Europe/Paris 0 8 * * *", "").unwrap();
    assert_eq!(
        c.next(ts("2026-01-10T00:00:00Z")),
        Some(ts("2026-01-10T07:00:00Z"))
    );
    // With a time zone set, the prefix is a sixth field.
    assert!(Cron::parse("CRON_TZ=Europe/Paris 0 8 * * *", "UTC").is_err());
}

/// The last trigger at or before `now`, minute by minute (the definition).
fn brute_previous(c: &Cron, now: Timestamp) -> Option<Timestamp> {
    let mut t = Timestamp::from_second(now.as_second() - now.as_second().rem_euclid(60)).unwrap();
    for _ in 0..(60 * 24 * 40) {
        let before = t.checked_sub(SignedDuration::from_secs(1)).unwrap();
        if c.next(before) == Some(t) {
            return Some(t);
        }
        t = t.checked_sub(SignedDuration::from_mins(1)).unwrap();
    }
    None
}

#[test]
fn previous_is_the_last_trigger_at_or_before_now() {
    for (spec, tz, now) in [
        ("*/5 * * * *", "UTC", "2026-03-04T10:07:30Z"),
        ("*/5 * * * *", "UTC", "2026-03-04T10:05:00Z"),
        ("0 8 * * 1-5", "Europe/Paris", "2026-03-09T06:59:59Z"),
        ("30 2 * * *", "Europe/Paris", "2026-03-30T00:00:00Z"),
        ("0 0 1,15 * 3", "UTC", "2026-01-20T00:00:00Z"),
        ("@daily", "Asia/Kolkata", "2026-02-01T10:00:00Z"),
    ] {
        let c = Cron::parse(spec, tz).unwrap();
        let got = c.previous(ts(now));
        assert!(got.is_some_and(|p| p <= ts(now)), "{spec} {now}: {got:?}");
        assert_eq!(got, brute_previous(&c, ts(now)), "{spec} in {tz} at {now}");
    }
}

#[test]
fn previous_of_every_is_one_second_before_next() {
    // Flux Operator's search over robfig's constant-delay schedule lands there.
    let c = Cron::parse("@every 1h", "UTC").unwrap();
    let now = ts("2026-02-01T10:00:17.5Z");
    assert_eq!(c.previous(now), Some(ts("2026-02-01T11:00:16Z")));
}

#[test]
fn previous_is_none_beyond_five_years() {
    // 29 February 2028 is the only trigger in range after 2025; before it, none within five years
    // of early 2024 except 2024-02-29 itself.
    let c = Cron::parse("0 0 29 2 *", "UTC").unwrap();
    assert_eq!(
        c.previous(ts("2026-01-01T00:00:00Z")),
        Some(ts("2024-02-29T00:00:00Z"))
    );
}
