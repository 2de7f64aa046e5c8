//! The tracker's bookkeeping, without I/O: what the watches last saw of each object ([`Live`]),
//! what a reconcile last applied ([`Record`]), which kinds are in sync, and the drift rule.
//!
//! resourceVersions are opaque strings: Kubernetes allows only equality checks on them (after an
//! etcd restore, relisted objects may carry lower numbers). Ordering comes from the watch
//! instead: each kind's watch delivers its events in order, so after this controller writes an
//! object, every event of that object before the one carrying the write's resourceVersion (the
//! echo) is older than the write and is ignored; a relist shows current state and is always
//! taken.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Notify;

use crate::ssa::ObjectRef;
use crate::ssa::cleanup::needs_cleanup;
use crate::ssa::kstatus::{self, Status};

use super::fingerprint::fingerprint;

/// The Kustomization that owns a tracked object: (namespace, name).
pub type OwnerKey = (String, String);

/// A kind: group and kind (all versions of a kind are the same objects).
pub type KindKey = (String, String);

/// An object: group, kind, namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn of(obj: &ObjectRef) -> Self {
        Key {
            group: obj.group.clone(),
            kind: obj.kind.clone(),
            namespace: obj.namespace.clone(),
            name: obj.name.clone(),
        }
    }

    pub fn kind(&self) -> KindKey {
        (self.group.clone(), self.kind.clone())
    }
}

/// What a watch last saw of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Live {
    pub rv: Box<str>,
    pub fp: u64,
    pub status: Status,
    /// The kstatus message, kept only while the object is not Current.
    pub message: Option<Box<str>>,
    /// The object carries what an apply cleans up first (kubectl's annotation, or fields of
    /// kubectl-like managers to take over): it always takes the full path.
    pub dirty: bool,
    /// Hashes of the resourceVersions the watch delivered before `rv`, newest first (0: none).
    /// A write whose echo the watch delivered before the write was recorded, followed by newer
    /// events (the controller-manager's status updates), is recognised by them.
    pub earlier: [u64; EARLIER],
}

/// How many earlier resourceVersions of an object are remembered (see [`Live::earlier`]).
pub const EARLIER: usize = 8;

fn rv_hash(rv: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    rv.hash(&mut h);
    // 0 marks an empty slot.
    h.finish().max(1)
}

impl Live {
    /// The facts kept of a live object: its fields managed by `manager` are fingerprinted.
    pub fn of(obj: &Value, manager: &str, override_managers: &[String]) -> Self {
        let health = kstatus::compute(obj);
        Live {
            rv: obj
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .into(),
            fp: fingerprint(obj, manager),
            message: (health.status != Status::Current).then(|| health.message.into()),
            status: health.status,
            dirty: needs_cleanup(obj, manager, override_managers),
            earlier: [0; EARLIER],
        }
    }

    /// Whether the watch delivered `rv` as this state or one of the few before it.
    pub fn delivered(&self, rv: &str) -> bool {
        *self.rv == *rv || {
            let h = rv_hash(rv);
            self.earlier.contains(&h)
        }
    }

    /// Takes over `previous`'s history, as the state the watch delivered after it.
    fn follow(&mut self, previous: &Live) {
        if previous.rv == self.rv {
            self.earlier = previous.earlier;
            return;
        }
        self.earlier[0] = rv_hash(&previous.rv);
        self.earlier[1..].copy_from_slice(&previous.earlier[..EARLIER - 1]);
    }
}

/// What a reconcile last applied (or verified) for an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub owner: OwnerKey,
    pub desired: u64,
    pub fp: u64,
    pub rv: Box<str>,
    /// The resourceVersion of this controller's own write, until its watch delivers it.
    pub awaiting: Option<Box<str>>,
    /// When the write was recorded: after [`ECHO_LIMIT`] without its echo, events are taken
    /// again (the echo passed unnoticed; a stale view costs at most one extra reconcile, never
    /// a health check stuck on Unknown).
    pub since: Instant,
}

/// How long the echo of a write is awaited before the watch's events are trusted again.
pub const ECHO_LIMIT: Duration = Duration::from_secs(10);

/// Whether a live state differs from what was recorded by someone else's write: deleted, or a
/// later resourceVersion whose fingerprint differs (or that kubectl-like managers touched).
pub fn drifted(rec: &Record, live: Option<&Live>) -> bool {
    match live {
        None => true,
        Some(l) => l.rv != rec.rv && (l.fp != rec.fp || l.dirty),
    }
}

/// Back-off of the drift triggers of one Kustomization (another controller that keeps changing
/// a field this one manages must not turn the pair into a busy loop).
#[derive(Clone, Copy, Debug)]
pub struct Trigger {
    pub last: Instant,
    pub strikes: u32,
    pub pending: bool,
}

/// Drift triggers of one Kustomization closer than this to the previous one count as a
/// streak; after a quiet period this long the streak starts again.
pub const QUIET: Duration = Duration::from_secs(60);
/// Triggers of a streak sent at once; later ones wait [`trigger_delay`].
const FREE_TRIGGERS: u32 = 3;
const MAX_TRIGGER_DELAY: Duration = Duration::from_secs(60);

/// How long the `strikes`-th trigger of a streak waits after the previous one: nothing for
/// the first [`FREE_TRIGGERS`], then 1 s, 2 s, 4 s... up to [`MAX_TRIGGER_DELAY`].
pub fn trigger_delay(strikes: u32) -> Duration {
    match strikes.checked_sub(FREE_TRIGGERS) {
        None => Duration::ZERO,
        Some(n) => Duration::from_secs(1u64 << n.min(6)).min(MAX_TRIGGER_DELAY),
    }
}

/// How a watch event came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// An event of a running watch, in order.
    Event,
    /// An item of a (re)list: the current state, whatever came before.
    Relist,
}

/// Everything the tracker knows.
#[derive(Debug, Default)]
pub struct State {
    /// Watched kinds: `true` when the watch is in sync.
    pub kinds: HashMap<KindKey, bool>,
    pub live: HashMap<Key, Live>,
    pub records: HashMap<Key, Record>,
    /// Kustomizations being reconciled (their own writes are not drift), with a count.
    pub busy: HashMap<OwnerKey, usize>,
    pub triggers: HashMap<OwnerKey, Trigger>,
    /// Health waits in progress, woken when one of their owner's objects changes.
    pub waiters: HashMap<OwnerKey, Arc<Notify>>,
}

impl State {
    /// Whether the watch of `key`'s kind is running and in sync.
    pub fn synced(&self, key: &Key) -> bool {
        self.kinds.get(&key.kind()) == Some(&true)
    }

    /// Records `seen` (as the server returned it) as applied or verified for `owner`; `wrote`
    /// when this reconcile's write produced it. Returns whether the kind's watch must start.
    pub fn record(
        &mut self,
        key: Key,
        owner: &OwnerKey,
        desired: u64,
        seen: Live,
        wrote: bool,
    ) -> bool {
        // The watch may already have delivered the write, and even newer events after it.
        let echoed = self.live.get(&key).is_some_and(|l| l.delivered(&seen.rv));
        let newer = echoed && self.live.get(&key).is_some_and(|l| l.rv != seen.rv);
        let awaiting = (wrote && !echoed).then(|| seen.rv.clone());
        let record = Record {
            owner: owner.clone(),
            desired,
            fp: seen.fp,
            rv: seen.rv.clone(),
            awaiting,
            since: Instant::now(),
        };
        // A write is the newest state known until its echo (unless the watch already has a
        // newer one). A read (verified, nothing written) may be older or newer than the watch's
        // view: the watch keeps its own.
        if (wrote && !newer) || !self.live.contains_key(&key) {
            let mut seen = seen;
            if let Some(previous) = self.live.get(&key) {
                seen.follow(previous);
            }
            self.live.insert(key.clone(), seen);
        }
        self.records.insert(key.clone(), record);
        match self.kinds.entry(key.kind()) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(false);
                true
            }
        }
    }

    /// A watch saw `key` as `seen`. Returns the owner whose object drifted (to reconcile, if not
    /// busy), `Some(None)` when the object is recorded but did not drift, `None` when the event
    /// was older than our own write (ignored) or the object is not recorded.
    pub fn observe(&mut self, key: &Key, mut seen: Live, how: Seen) -> Observed {
        if let Some(rec) = self.records.get_mut(key)
            && let Some(want) = rec.awaiting.as_deref()
        {
            if how == Seen::Event && *want != *seen.rv && rec.since.elapsed() < ECHO_LIMIT {
                return Observed::Stale;
            }
            rec.awaiting = None;
        }
        let drift = self
            .records
            .get(key)
            .map(|rec| (rec.owner.clone(), drifted(rec, Some(&seen))));
        if let Some(previous) = self.live.get(key) {
            seen.follow(previous);
        }
        self.live.insert(key.clone(), seen);
        match drift {
            None => Observed::Untracked,
            Some((owner, true)) => Observed::Drifted(owner),
            Some((owner, false)) => Observed::Same(owner),
        }
    }

    /// A watch saw `key` deleted. Returns its owner, if recorded.
    pub fn gone(&mut self, key: &Key) -> Option<OwnerKey> {
        self.live.remove(key);
        let rec = self.records.get_mut(key)?;
        rec.awaiting = None;
        Some(rec.owner.clone())
    }

    /// Whether every object is recorded for `owner` and its kind's watch is in sync, so its
    /// health can be judged from the watches.
    pub fn covers(&self, owner: &OwnerKey, objects: &[ObjectRef]) -> bool {
        objects.iter().all(|o| {
            let key = Key::of(o);
            self.synced(&key) && self.records.get(&key).is_some_and(|r| &r.owner == owner)
        })
    }

    /// The live state of `key` once the watch has delivered the recorded write (or a relist),
    /// with its kind in sync; `None` while that is not known.
    pub fn seen_after_record(&self, key: &Key) -> Option<&Live> {
        let rec = self.records.get(key)?;
        if !self.synced(key) || rec.awaiting.is_some() {
            return None;
        }
        self.live.get(key)
    }
}

/// What a watch event meant for the tracker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// The object is not recorded by any Kustomization.
    Untracked,
    /// An event from before this controller's own write: ignored.
    Stale,
    /// Recorded for this owner; nothing it manages changed.
    Same(OwnerKey),
    /// Recorded for this owner, and changed by someone else.
    Drifted(OwnerKey),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key {
            group: "apps".into(),
            kind: "Deployment".into(),
            namespace: "a".into(),
            name: "web".into(),
        }
    }

    fn live(rv: &str, fp: u64) -> Live {
        Live {
            rv: rv.into(),
            fp,
            status: Status::Current,
            message: None,
            dirty: false,
            earlier: [0; EARLIER],
        }
    }

    fn owner() -> OwnerKey {
        ("ns".into(), "ks".into())
    }

    #[test]
    fn repeated_drift_backs_off() {
        let d: Vec<u64> = (0..12).map(|n| trigger_delay(n).as_secs()).collect();
        assert_eq!(d, vec![0, 0, 0, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn drift_needs_another_write_with_another_fingerprint() {
        let rec = Record {
            owner: owner(),
            desired: 1,
            fp: 10,
            rv: "100".into(),
            awaiting: None,
            since: Instant::now(),
        };
        assert!(!drifted(&rec, Some(&live("100", 10))));
        assert!(!drifted(&rec, Some(&live("150", 10))), "status-only change");
        assert!(drifted(&rec, Some(&live("150", 11))));
        // Versions are opaque: a "lower" one is just another one.
        assert!(drifted(&rec, Some(&live("90", 11))));
        assert!(drifted(&rec, None), "deleted");
        let dirty = Live {
            dirty: true,
            ..live("150", 10)
        };
        assert!(drifted(&rec, Some(&dirty)), "kubectl took over a field");
    }

    /// Events of the object from before our write are ignored until the watch delivers the
    /// write itself; after it, any change by someone else is drift.
    #[test]
    fn events_before_the_echo_of_our_write_are_ignored() {
        let mut st = State::default();
        st.kinds.insert(key().kind(), true);
        assert_eq!(
            st.observe(&key(), live("5", 1), Seen::Relist),
            Observed::Untracked
        );
        assert!(!st.record(key(), &owner(), 7, live("9", 2), true));
        // An older event (someone's edit before our apply) arrives late.
        assert_eq!(
            st.observe(&key(), live("8", 3), Seen::Event),
            Observed::Stale
        );
        assert_eq!(st.live[&key()].rv.as_ref(), "9");
        assert!(st.seen_after_record(&key()).is_none(), "write not seen yet");
        // Our write's echo.
        assert_eq!(
            st.observe(&key(), live("9", 2), Seen::Event),
            Observed::Same(owner())
        );
        assert!(st.seen_after_record(&key()).is_some());
        // Someone edits a managed field.
        assert_eq!(
            st.observe(&key(), live("10", 4), Seen::Event),
            Observed::Drifted(owner())
        );
    }

    /// The watch delivered our write and then the controller-manager's status updates before
    /// the write was recorded (a loaded controller): the write counts as seen, the newer state
    /// is kept, and health is judged from it. Before, the record awaited an echo that had
    /// already passed, and every later event was dropped as older than it: a `wait: true`
    /// Kustomization timed out on a Deployment that was long Available.
    #[test]
    fn a_write_echoed_before_it_was_recorded_is_not_awaited() {
        let mut st = State::default();
        st.kinds.insert(key().kind(), true);
        st.observe(&key(), live("5", 1), Seen::Relist);
        // Our apply returns 9; the watch delivers 9, 10 and 11 before we record it.
        for rv in ["9", "10", "11"] {
            st.observe(&key(), live(rv, 2), Seen::Event);
        }
        assert!(!st.record(key(), &owner(), 7, live("9", 2), true));
        assert!(st.records[&key()].awaiting.is_none());
        assert_eq!(st.live[&key()].rv.as_ref(), "11", "the newer state is kept");
        assert!(st.seen_after_record(&key()).is_some());
        // Later events are taken as they come.
        assert_eq!(
            st.observe(&key(), live("12", 2), Seen::Event),
            Observed::Same(owner())
        );
        // The history is bounded: a write delivered longer ago than that is awaited, until
        // ECHO_LIMIT has passed; then the next event is taken.
        let mut st = State::default();
        st.kinds.insert(key().kind(), true);
        for n in 0..(EARLIER + 2) {
            st.observe(&key(), live(&format!("{}", 20 + n), 2), Seen::Event);
        }
        st.record(key(), &owner(), 7, live("20", 2), true);
        assert!(st.records[&key()].awaiting.is_some());
        assert_eq!(
            st.observe(&key(), live("30", 2), Seen::Event),
            Observed::Stale
        );
        if let Some(rec) = st.records.get_mut(&key())
            && let Some(earlier) = rec.since.checked_sub(ECHO_LIMIT)
        {
            rec.since = earlier;
        }
        assert_eq!(
            st.observe(&key(), live("31", 2), Seen::Event),
            Observed::Same(owner())
        );
        assert!(st.seen_after_record(&key()).is_some());
    }

    /// After an etcd restore the relist carries lower resourceVersions: they are taken, and a
    /// managed field that differs is drift (numeric comparison dropped them as stale).
    #[test]
    fn a_relist_with_lower_versions_is_taken() {
        let mut st = State::default();
        st.kinds.insert(key().kind(), true);
        st.record(key(), &owner(), 7, live("1000", 2), true);
        assert_eq!(
            st.observe(&key(), live("1000", 2), Seen::Event),
            Observed::Same(owner())
        );
        // Restored from a backup: the object is back at an older state.
        assert_eq!(
            st.observe(&key(), live("40", 5), Seen::Relist),
            Observed::Drifted(owner())
        );
        assert_eq!(st.live[&key()].rv.as_ref(), "40");
        // Even while our own write was still awaited, a relist is the truth.
        st.record(key(), &owner(), 7, live("41", 2), true);
        assert_eq!(
            st.observe(&key(), live("30", 6), Seen::Relist),
            Observed::Drifted(owner())
        );
        assert!(st.records[&key()].awaiting.is_none());
    }

    /// A verified (not written) record does not replace the watch's view.
    #[test]
    fn a_read_does_not_override_the_watch() {
        let mut st = State::default();
        st.kinds.insert(key().kind(), true);
        st.observe(&key(), live("12", 3), Seen::Relist);
        st.record(key(), &owner(), 7, live("11", 2), false);
        assert_eq!(st.live[&key()].rv.as_ref(), "12");
        assert!(st.records[&key()].awaiting.is_none());
    }

    #[test]
    fn covers_needs_synced_watches() {
        let mut st = State::default();
        let obj = ObjectRef {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            namespace: "a".into(),
            name: "web".into(),
        };
        assert!(
            st.record(key(), &owner(), 7, live("9", 2), true),
            "starts the watch"
        );
        assert!(
            !st.covers(&owner(), std::slice::from_ref(&obj)),
            "watch not in sync"
        );
        st.kinds.insert(key().kind(), true);
        assert!(st.covers(&owner(), std::slice::from_ref(&obj)));
        assert!(!st.covers(&("x".into(), "y".into()), std::slice::from_ref(&obj)));
        assert_eq!(st.gone(&key()), Some(owner()));
        assert!(!st.live.contains_key(&key()));
    }
}
