//! What client-go's `EventCorrelator` does before an Event reaches the apiserver, as a pure
//! state machine (the caller passes the clock):
//! - a spam filter: a token bucket per (object, reason), burst 25 and one token every 5 minutes
//!   (client-go's `EventSourceObjectSpamFilter` defaults); an event without a token is dropped;
//! - aggregation of identical events (same object, type, reason and message): the existing
//!   Event's `count` and `lastTimestamp` are patched instead of creating a new one (client-go's
//!   `eventLogger`).
//!
//! Both maps are bounded like client-go's LRU caches (4096 entries).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;

/// client-go's `defaultSpamBurst`.
pub const SPAM_BURST: u32 = 25;
/// client-go's `defaultSpamQPS` (1/300): one token every five minutes.
pub const SPAM_REFILL: Duration = Duration::from_secs(300);
/// client-go's `maxLruCacheEntries`.
pub const MAX_ENTRIES: usize = 4096;

/// The spam filter's key: the object and the reason.
pub type SpamKey = (String, String, String, String, String);

/// The aggregation key: the object, type, reason and message.
pub type AggregationKey = (SpamKey, String, String);

/// The keys of one event.
pub fn keys(
    involved: &ObjectReference,
    event_type: &str,
    reason: &str,
    message: &str,
) -> AggregationKey {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    (
        (
            s(&involved.kind),
            s(&involved.namespace),
            s(&involved.name),
            s(&involved.uid),
            reason.to_string(),
        ),
        event_type.to_string(),
        message.to_string(),
    )
}

/// What to do with an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Create a new Event.
    Create,
    /// Patch the existing Event `namespace/name` to `count` (and the new `lastTimestamp`).
    Patch {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The new count.
        count: i32,
    },
    /// Dropped by the spam filter.
    Drop,
}

#[derive(Clone, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

#[derive(Clone, Debug)]
struct Seen {
    namespace: String,
    name: String,
    count: i32,
}

/// The correlator; see the module documentation.
#[derive(Debug)]
pub struct Correlator {
    burst: u32,
    refill: Duration,
    buckets: HashMap<SpamKey, Bucket>,
    seen: HashMap<AggregationKey, Seen>,
}

impl Default for Correlator {
    fn default() -> Self {
        Self::new(SPAM_BURST, SPAM_REFILL)
    }
}

impl Correlator {
    /// A correlator with a token bucket of `burst` tokens, one more every `refill`.
    pub fn new(burst: u32, refill: Duration) -> Self {
        Correlator {
            burst: burst.max(1),
            refill,
            buckets: HashMap::new(),
            seen: HashMap::new(),
        }
    }

    /// Decides for an event with `key` at `now`; a `Create` or `Patch` is confirmed with
    /// [`Correlator::created`] or [`Correlator::patched`] once it succeeded.
    pub fn observe(&mut self, key: &AggregationKey, now: Instant) -> Decision {
        if !self.take_token(&key.0, now) {
            return Decision::Drop;
        }
        match self.seen.get(key) {
            Some(s) => Decision::Patch {
                namespace: s.namespace.clone(),
                name: s.name.clone(),
                count: s.count.saturating_add(1),
            },
            None => Decision::Create,
        }
    }

    fn take_token(&mut self, key: &SpamKey, now: Instant) -> bool {
        if self.buckets.len() >= MAX_ENTRIES && !self.buckets.contains_key(key) {
            self.buckets.clear();
        }
        let burst = f64::from(self.burst);
        let refill = self.refill.as_secs_f64();
        let b = self.buckets.entry(key.clone()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        if refill > 0.0 {
            b.tokens = (b.tokens + elapsed / refill).min(burst);
        } else {
            b.tokens = burst;
        }
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// The event with `key` was created as `namespace/name`.
    pub fn created(&mut self, key: AggregationKey, namespace: String, name: String) {
        if self.seen.len() >= MAX_ENTRIES && !self.seen.contains_key(&key) {
            self.seen.clear();
        }
        self.seen.insert(
            key,
            Seen {
                namespace,
                name,
                count: 1,
            },
        );
    }

    /// The Event of `key` was patched to `count`.
    pub fn patched(&mut self, key: &AggregationKey, count: i32) {
        if let Some(s) = self.seen.get_mut(key) {
            s.count = count;
        }
    }

    /// The Event of `key` could not be patched (deleted, expired): the next one is created.
    pub fn forget(&mut self, key: &AggregationKey) {
        self.seen.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Kustomization".into()),
            namespace: Some("apps".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    #[test]
    fn identical_events_are_aggregated_into_one_event() {
        let mut c = Correlator::default();
        let now = Instant::now();
        let k = keys(&obj("a"), "Normal", "ReconciliationSucceeded", "done");
        assert_eq!(c.observe(&k, now), Decision::Create);
        c.created(k.clone(), "apps".into(), "a.1".into());
        for count in 2..=4 {
            let d = c.observe(&k, now);
            assert_eq!(
                d,
                Decision::Patch {
                    namespace: "apps".into(),
                    name: "a.1".into(),
                    count
                }
            );
            c.patched(&k, count);
        }
        // Another message, reason, type or object is another Event.
        for other in [
            keys(&obj("a"), "Normal", "ReconciliationSucceeded", "other"),
            keys(&obj("a"), "Normal", "Progressing", "done"),
            keys(&obj("a"), "Warning", "ReconciliationSucceeded", "done"),
            keys(&obj("b"), "Normal", "ReconciliationSucceeded", "done"),
        ] {
            assert_eq!(c.observe(&other, now), Decision::Create, "{other:?}");
        }
        // A failed patch forgets the Event: the next one is created.
        c.forget(&k);
        assert_eq!(c.observe(&k, now), Decision::Create);
    }

    #[test]
    fn the_spam_filter_allows_a_burst_per_object_and_reason_then_one_per_refill() {
        let mut c = Correlator::new(3, Duration::from_secs(300));
        let t0 = Instant::now();
        let key = |msg: &str| keys(&obj("a"), "Warning", "BuildFailed", msg);
        let decisions: Vec<Decision> = (0..5)
            .map(|i| c.observe(&key(&format!("m{i}")), t0))
            .collect();
        assert_eq!(
            decisions,
            vec![
                Decision::Create,
                Decision::Create,
                Decision::Create,
                Decision::Drop,
                Decision::Drop
            ]
        );
        // Another reason and another object have their own buckets.
        assert_eq!(
            c.observe(&keys(&obj("a"), "Normal", "Progressing", "x"), t0),
            Decision::Create
        );
        assert_eq!(
            c.observe(&keys(&obj("b"), "Warning", "BuildFailed", "x"), t0),
            Decision::Create
        );
        // Half a refill later still nothing; a full refill gives one more token.
        assert_eq!(
            c.observe(&key("later"), t0 + Duration::from_secs(150)),
            Decision::Drop
        );
        assert_eq!(
            c.observe(&key("later"), t0 + Duration::from_secs(310)),
            Decision::Create
        );
        assert_eq!(
            c.observe(&key("later2"), t0 + Duration::from_secs(311)),
            Decision::Drop
        );
        // Tokens never exceed the burst.
        let t1 = t0 + Duration::from_secs(100_000);
        let allowed = (0..10)
            .filter(|i| c.observe(&key(&format!("n{i}")), t1) != Decision::Drop)
            .count();
        assert_eq!(allowed, 3);
    }

    #[test]
    fn client_go_defaults() {
        let mut c = Correlator::default();
        let t0 = Instant::now();
        let allowed = (0..40)
            .filter(|i| {
                c.observe(
                    &keys(&obj("a"), "Normal", "Progressing", &format!("{i}")),
                    t0,
                ) != Decision::Drop
            })
            .count();
        assert_eq!(allowed, 25);
    }
}
