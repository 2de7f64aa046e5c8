//! Jitter, backoff, token bucket, leader-election decisions (pure logic).
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use rflux_common::runtime::client::{BucketState, TokenBucket, reserve};
use rflux_common::runtime::jitter::{RetryBackoff, backoff_delay, jitter_with, jittered};
use rflux_common::runtime::leader::{Decision, decide, next_spec, released_spec};

#[test]
fn jitter_bounds() {
    let i = Duration::from_secs(100);
    assert_eq!(jitter_with(i, 5, 0.0), Duration::from_secs(95));
    assert_eq!(jitter_with(i, 5, 0.5), Duration::from_secs(100));
    assert_eq!(jitter_with(i, 10, 1.0), Duration::from_secs(110));
    assert_eq!(jitter_with(i, 0, 0.9), i);
    let mut distinct = std::collections::HashSet::new();
    for _ in 0..200 {
        let d = jittered(i, 5);
        assert!(
            d >= Duration::from_secs(95) && d <= Duration::from_secs(105),
            "{d:?}"
        );
        distinct.insert(d.as_millis());
    }
    assert!(distinct.len() > 10, "jitter should vary");
}

#[test]
fn exponential_backoff() {
    let min = Duration::from_millis(750);
    let max = Duration::from_secs(900);
    assert_eq!(backoff_delay(min, max, 1), min);
    assert_eq!(backoff_delay(min, max, 2), Duration::from_millis(1500));
    assert_eq!(backoff_delay(min, max, 4), Duration::from_millis(6000));
    assert_eq!(backoff_delay(min, max, 30), max);
    assert_eq!(backoff_delay(min, max, u32::MAX), max);
    let b = RetryBackoff::new(min, max);
    assert_eq!(b.next_delay(&"a"), min);
    assert_eq!(b.next_delay(&"a"), Duration::from_millis(1500));
    assert_eq!(b.next_delay(&"b"), min);
    assert_eq!(b.failures(&"a"), 2);
    b.forget(&"a");
    assert_eq!(b.failures(&"a"), 0);
    assert_eq!(b.next_delay(&"a"), min);
}

#[test]
fn token_bucket_reservations() {
    let t0 = Instant::now();
    let s = BucketState {
        tokens: 2.0,
        at: t0,
    };
    let (s, w) = reserve(s, t0, 10.0, 2.0);
    assert_eq!(w, Duration::ZERO);
    let (s, w) = reserve(s, t0, 10.0, 2.0);
    assert_eq!(w, Duration::ZERO);
    // Burst exhausted: the third waits 1/qps.
    let (s, w) = reserve(s, t0, 10.0, 2.0);
    assert!((w.as_secs_f64() - 0.1).abs() < 1e-9, "{w:?}");
    let (_, w) = reserve(s, t0, 10.0, 2.0);
    assert!((w.as_secs_f64() - 0.2).abs() < 1e-9, "{w:?}");
    // Refill is capped at burst.
    let s = BucketState {
        tokens: 0.0,
        at: t0,
    };
    let (s, w) = reserve(s, t0 + Duration::from_secs(100), 10.0, 2.0);
    assert_eq!(w, Duration::ZERO);
    assert!((s.tokens - 1.0).abs() < 1e-9);
    assert!(TokenBucket::new(0.0, 10).is_none());
    assert!(TokenBucket::new(-1.0, 10).is_none());
    assert!(TokenBucket::new(f64::NAN, 10).is_none());
    let b = TokenBucket::new(1.0, 1).unwrap();
    assert_eq!(b.acquire(), Duration::ZERO);
    assert!(b.acquire() > Duration::from_millis(900));
}

fn held_by(holder: &str, secs: i32) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(holder.to_string()),
        lease_duration_seconds: Some(secs),
        lease_transitions: Some(3),
        acquire_time: Some(MicroTime(jiff::Timestamp::from_second(1).unwrap())),
        renew_time: Some(MicroTime(jiff::Timestamp::from_second(2).unwrap())),
        ..LeaseSpec::default()
    }
}

#[test]
fn leader_decisions() {
    let t0 = Instant::now();
    let d35 = Duration::from_secs(35);
    assert_eq!(decide(None, "me", t0, t0, d35), Decision::Create);
    assert_eq!(
        decide(Some(&held_by("me", 35)), "me", t0, t0, d35),
        Decision::Renew
    );
    assert_eq!(
        decide(Some(&LeaseSpec::default()), "me", t0, t0, d35),
        Decision::Acquire
    );
    match decide(
        Some(&held_by("other", 35)),
        "me",
        t0,
        t0 + Duration::from_secs(10),
        d35,
    ) {
        Decision::Wait { holder, remaining } => {
            assert_eq!(holder, "other");
            assert_eq!(remaining, Duration::from_secs(25));
        }
        d => panic!("unexpected {d:?}"),
    }
    // Expired relative to when we last saw it change.
    assert_eq!(
        decide(
            Some(&held_by("other", 35)),
            "me",
            t0,
            t0 + Duration::from_secs(35),
            d35
        ),
        Decision::Acquire
    );
    // A released lease (duration 1s) expires after 1s even if it had a holder.
    assert_eq!(
        decide(
            Some(&held_by("other", 1)),
            "me",
            t0,
            t0 + Duration::from_secs(1),
            d35
        ),
        Decision::Acquire
    );
}

#[test]
fn leader_specs() {
    let now = jiff::Timestamp::from_second(1000).unwrap();
    let d = Duration::from_secs(35);
    let created = next_spec(None, &Decision::Create, "me", d, now).unwrap();
    assert_eq!(created.holder_identity.as_deref(), Some("me"));
    assert_eq!(created.lease_duration_seconds, Some(35));
    assert_eq!(created.lease_transitions, Some(0));
    let current = held_by("other", 35);
    let acquired = next_spec(Some(&current), &Decision::Acquire, "me", d, now).unwrap();
    assert_eq!(acquired.lease_transitions, Some(4));
    assert_eq!(acquired.acquire_time, Some(MicroTime(now)));
    let mine = held_by("me", 35);
    let renewed = next_spec(Some(&mine), &Decision::Renew, "me", d, now).unwrap();
    assert_eq!(renewed.lease_transitions, Some(3));
    assert_eq!(renewed.acquire_time, mine.acquire_time);
    assert_eq!(renewed.renew_time, Some(MicroTime(now)));
    let wait = Decision::Wait {
        holder: "x".into(),
        remaining: Duration::ZERO,
    };
    assert!(next_spec(Some(&current), &wait, "me", d, now).is_none());
    let released = released_spec(&mine, now);
    assert_eq!(released.holder_identity, None);
    assert_eq!(released.lease_duration_seconds, Some(1));
    // After a release nobody holds it: acquiring does not count a transition.
    let reacquired = next_spec(Some(&released), &Decision::Acquire, "other", d, now).unwrap();
    assert_eq!(reacquired.lease_transitions, Some(3));
}

#[test]
fn requeue_actions_map_to_result_labels() {
    use kube::runtime::controller::Action;
    use rflux_common::runtime::controller::{
        no_requeue, requeue_dependency, requeue_success, result_label,
    };
    use rflux_common::runtime::metrics::ReconcileResult;
    let ok: Result<Action, std::io::Error> = Ok(no_requeue());
    assert_eq!(result_label(&ok), ReconcileResult::Success);
    let ok: Result<Action, std::io::Error> = Ok(requeue_success(Duration::from_secs(60), 5));
    assert_eq!(result_label(&ok), ReconcileResult::RequeueAfter);
    let ok: Result<Action, std::io::Error> = Ok(requeue_dependency(Duration::ZERO));
    assert_eq!(result_label(&ok), ReconcileResult::Requeue);
    let err: Result<Action, std::io::Error> = Err(std::io::Error::other("x"));
    assert_eq!(result_label(&err), ReconcileResult::Error);
}
