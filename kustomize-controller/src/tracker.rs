//! The applied-object tracker: what this controller has applied, fed by watches and kept as
//! fingerprints, never as objects. It lets a reconcile skip every request for objects that are
//! as it left them, reconciles a Kustomization as soon as someone edits, deletes or takes over a
//! field it manages (self-heal in well under a second instead of at the next interval), and
//! answers the health of unchanged objects without a watch of their own.
//!
//! One watch per kind (group and kind) of applied object, cluster-wide, on the label
//! `kustomize.toolkit.fluxcd.io/name` that every applied object carries, with the controller's
//! own identity. For each object it keeps the resourceVersion, a [`fingerprint`] of the fields
//! this controller manages and the kstatus status. A reconcile [`Tracker::record`]s each object
//! it applies or verifies (desired-state hash, fingerprint, resourceVersion, owner).
//!
//! The tracker never decides alone: whenever it does not know (kind not watched or not in
//! sync, object not recorded, another desired state, a fingerprint that differs), the reconcile
//! takes the full path (GET, dry-run, apply) like Flux does.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::channel::mpsc;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, TypeMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use rflux_common::runtime::format_go_duration;
use serde_json::{Map, Value};
use tokio::sync::Notify;

use crate::apply::{FIELD_MANAGER, NAME_LABEL, needs_cleanup};
use crate::health::{HealthError, ObjectStatus, ready_verdict};
use crate::inventory::ObjectRef;
use crate::kstatus::{self, Status};

/// The Kustomization that owns a tracked object: (namespace, name).
pub type OwnerKey = (String, String);

/// A kind: group and kind (all versions of a kind are the same objects).
type KindKey = (String, String);

/// An object: group, kind, namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    group: String,
    kind: String,
    namespace: String,
    name: String,
}

impl Key {
    fn of(obj: &ObjectRef) -> Self {
        Key {
            group: obj.group.clone(),
            kind: obj.kind.clone(),
            namespace: obj.namespace.clone(),
            name: obj.name.clone(),
        }
    }

    fn kind(&self) -> KindKey {
        (self.group.clone(), self.kind.clone())
    }
}

/// What a watch last saw of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Live {
    rv: u64,
    fp: u64,
    status: Status,
    /// The kstatus message, kept only while the object is not Current.
    message: Option<Box<str>>,
    /// The object carries what an apply cleans up first (kubectl's annotation, or fields of
    /// kubectl-like managers to take over): it always takes the full path.
    dirty: bool,
}

/// What a reconcile last applied (or verified) for an object.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    owner: OwnerKey,
    desired: u64,
    fp: u64,
    rv: u64,
}

/// Back-off of the drift triggers of one Kustomization (another controller that keeps changing
/// a field this one manages must not turn the pair into a busy loop).
#[derive(Clone, Copy, Debug)]
struct Trigger {
    last: Instant,
    strikes: u32,
    pending: bool,
}

/// Drift triggers of one Kustomization closer than this to the previous one count as a
/// streak; after a quiet period this long the streak starts again.
const QUIET: Duration = Duration::from_secs(60);
/// Triggers of a streak sent at once; later ones wait [`trigger_delay`].
const FREE_TRIGGERS: u32 = 3;
const MAX_TRIGGER_DELAY: Duration = Duration::from_secs(60);

/// How long the `strikes`-th trigger of a streak waits after the previous one: nothing for
/// the first [`FREE_TRIGGERS`], then 1 s, 2 s, 4 s... up to [`MAX_TRIGGER_DELAY`].
fn trigger_delay(strikes: u32) -> Duration {
    match strikes.checked_sub(FREE_TRIGGERS) {
        None => Duration::ZERO,
        Some(n) => Duration::from_secs(1u64 << n.min(6)).min(MAX_TRIGGER_DELAY),
    }
}

#[derive(Debug, Default)]
struct State {
    /// Watched kinds: `true` when the watch is in sync.
    kinds: HashMap<KindKey, bool>,
    live: HashMap<Key, Live>,
    records: HashMap<Key, Record>,
    /// Kustomizations being reconciled (their own writes are not drift), with a count.
    busy: HashMap<OwnerKey, usize>,
    triggers: HashMap<OwnerKey, Trigger>,
    /// Health waits in progress, woken when one of their owner's objects changes.
    waiters: HashMap<OwnerKey, Arc<Notify>>,
}

/// The tracker; see the module documentation.
pub struct Tracker {
    client: Client,
    override_managers: Vec<String>,
    state: Mutex<State>,
    drift: mpsc::UnboundedSender<OwnerKey>,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("Tracker")
            .field("kinds", &st.kinds.len())
            .field("objects", &st.live.len())
            .field("records", &st.records.len())
            .finish()
    }
}

/// Counts a Kustomization as busy while alive; see [`Tracker::begin`].
pub struct Busy {
    tracker: Arc<Tracker>,
    owner: OwnerKey,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.tracker.end(&self.owner);
    }
}

/// Parses a resourceVersion (etcd revisions are integers; anything else reads as 0, which
/// never counts as newer).
fn parse_rv(obj: &Value) -> u64 {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn hash_value<H: Hasher>(v: &Value, h: &mut H) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => (2u8, n.to_string()).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(a) => {
            (4u8, a.len()).hash(h);
            for x in a {
                hash_value(x, h);
            }
        }
        Value::Object(m) => {
            (5u8, m.len()).hash(h);
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for k in keys {
                k.hash(h);
                if let Some(x) = m.get(k) {
                    hash_value(x, h);
                }
            }
        }
    }
}

/// A hash of a desired object (key order does not matter) mixed with `salt` (the settings that
/// change how it is applied: force, ignore rules, the impersonated user...).
pub fn desired_hash(desired: &Value, salt: u64) -> u64 {
    let mut h = DefaultHasher::new();
    salt.hash(&mut h);
    hash_value(desired, &mut h);
    h.finish()
}

fn hash_opt<H: Hasher>(v: Option<&Value>, h: &mut H) {
    match v {
        None => 9u8.hash(h),
        Some(v) => hash_value(v, h),
    }
}

/// Walks a `fieldsV1` set over the live object, hashing the path keys and the values found.
fn walk<H: Hasher>(live: Option<&Value>, fields: &Map<String, Value>, h: &mut H) {
    let mut keys: Vec<&String> = fields.keys().collect();
    keys.sort();
    for k in keys {
        k.hash(h);
        let child = fields.get(k).and_then(Value::as_object);
        if let Some(name) = k.strip_prefix("f:") {
            visit(live.and_then(|l| l.get(name)), child, h);
        } else if let Some(key) = k.strip_prefix("k:") {
            let want: Option<Map<String, Value>> = serde_json::from_str(key).ok();
            let item = live.and_then(Value::as_array).and_then(|items| {
                let want = want.as_ref()?;
                items
                    .iter()
                    .find(|it| want.iter().all(|(kk, vv)| it.get(kk) == Some(vv)))
            });
            visit(item, child, h);
        } else if let Some(val) = k.strip_prefix("v:") {
            let want: Option<Value> = serde_json::from_str(val).ok();
            let present = match (live.and_then(Value::as_array), want) {
                (Some(items), Some(w)) => items.contains(&w),
                _ => false,
            };
            present.hash(h);
        } else if let Some(idx) = k.strip_prefix("i:") {
            let item = idx
                .parse::<usize>()
                .ok()
                .and_then(|i| live.and_then(|l| l.get(i)));
            visit(item, child, h);
        }
        // ".": the node itself, already covered by its parent's key.
    }
}

fn visit<H: Hasher>(v: Option<&Value>, child: Option<&Map<String, Value>>, h: &mut H) {
    match child {
        Some(m) if m.keys().any(|k| k != ".") => walk(v, m, h),
        _ => hash_opt(v, h),
    }
}

/// The fingerprint of the fields `manager` manages in `obj`: the `managedFields` entries of that
/// manager (not of a subresource), their field sets, and the object's values at those fields.
/// It changes when someone else changes, removes or takes over one of those fields, and not
/// when they touch other fields (status, fields of other managers, resourceVersion).
pub fn fingerprint(obj: &Value, manager: &str) -> u64 {
    let mut h = DefaultHasher::new();
    let entries = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut mine: Vec<&Value> = entries
        .iter()
        .filter(|e| e.get("manager").and_then(Value::as_str) == Some(manager))
        .filter(|e| {
            e.get("subresource")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        })
        .collect();
    mine.sort_by_key(|e| {
        (
            e.get("operation").and_then(Value::as_str).unwrap_or(""),
            e.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
        )
    });
    mine.len().hash(&mut h);
    for e in mine {
        e.get("operation")
            .and_then(Value::as_str)
            .unwrap_or("")
            .hash(&mut h);
        match e.get("fieldsV1").and_then(Value::as_object) {
            Some(fields) => walk(Some(obj), fields, &mut h),
            None => 0u8.hash(&mut h),
        }
    }
    h.finish()
}

/// The facts the tracker keeps of a live object.
fn observe_value(obj: &Value, override_managers: &[String]) -> Live {
    let health = kstatus::compute(obj);
    Live {
        rv: parse_rv(obj),
        fp: fingerprint(obj, FIELD_MANAGER),
        message: (health.status != Status::Current).then(|| health.message.into()),
        status: health.status,
        dirty: needs_cleanup(obj, override_managers),
    }
}

/// Whether a live state differs from what was recorded by a later write of someone else.
fn drifted(rec: &Record, live: Option<&Live>) -> bool {
    match live {
        None => true,
        Some(l) => l.rv > rec.rv && (l.fp != rec.fp || l.dirty),
    }
}

impl Tracker {
    /// A tracker watching with `client` (the controller's own identity). The receiver yields
    /// the Kustomizations to reconcile because one of their objects drifted.
    /// `override_managers` is `--override-manager` (see [`needs_cleanup`]).
    pub fn new(
        client: Client,
        override_managers: Vec<String>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<OwnerKey>) {
        let (tx, rx) = mpsc::unbounded();
        let t = Tracker {
            client,
            override_managers,
            state: Mutex::new(State::default()),
            drift: tx,
        };
        (Arc::new(t), rx)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `obj` is exactly as this controller left it with the desired state `desired`
    /// ([`desired_hash`]): its kind is watched and in sync, the last record has the same
    /// desired hash, and the live fingerprint is the recorded one.
    pub fn unchanged(&self, obj: &ObjectRef, desired: u64) -> bool {
        let key = Key::of(obj);
        let st = self.lock();
        if st.kinds.get(&key.kind()) != Some(&true) {
            return false;
        }
        match (st.records.get(&key), st.live.get(&key)) {
            (Some(rec), Some(live)) => rec.desired == desired && live.fp == rec.fp && !live.dirty,
            _ => false,
        }
    }

    /// Whether `obj` is known not to exist with this controller's labels (its kind is watched
    /// and in sync and the watch has not seen it).
    pub fn known_absent(&self, obj: &ObjectRef) -> bool {
        let key = Key::of(obj);
        let st = self.lock();
        st.kinds.get(&key.kind()) == Some(&true) && !st.live.contains_key(&key)
    }

    /// Records `obj` as applied or verified for `owner` with desired hash `desired`; `live` is
    /// the object the server returned (after the apply, or as read). Starts the watch of the
    /// kind (`resource`) if needed.
    pub fn record(
        self: &Arc<Self>,
        obj: &ObjectRef,
        resource: &ApiResource,
        owner: &OwnerKey,
        desired: u64,
        live: &Value,
    ) {
        let key = Key::of(obj);
        let seen = observe_value(live, &self.override_managers);
        let start = {
            let mut st = self.lock();
            let record = Record {
                owner: owner.clone(),
                desired,
                fp: seen.fp,
                rv: seen.rv,
            };
            let newer = st.live.get(&key).is_none_or(|l| seen.rv >= l.rv);
            if newer {
                st.live.insert(key.clone(), seen);
            }
            st.records.insert(key.clone(), record);
            let kind = key.kind();
            match st.kinds.entry(kind) {
                std::collections::hash_map::Entry::Occupied(_) => false,
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(false);
                    true
                }
            }
        };
        if start {
            self.spawn_watch(key.kind(), resource.clone());
        }
    }

    /// Forgets the record of `obj` (pruned, skipped, or no longer applied).
    pub fn forget(&self, obj: &ObjectRef) {
        self.lock().records.remove(&Key::of(obj));
    }

    /// Keeps only the records of `owner` whose object is in `keep` (the new inventory).
    pub fn retain(&self, owner: &OwnerKey, keep: &[ObjectRef]) {
        let keep: HashSet<Key> = keep.iter().map(Key::of).collect();
        self.lock()
            .records
            .retain(|k, r| &r.owner != owner || keep.contains(k));
    }

    /// Forgets every record of `owner` (deleted Kustomization).
    pub fn forget_owner(&self, owner: &OwnerKey) {
        let mut st = self.lock();
        st.records.retain(|_, r| &r.owner != owner);
        st.triggers.remove(owner);
    }

    /// Marks `owner` as being reconciled until the guard drops: its objects' changes are its
    /// own. When the last guard drops, objects changed by someone else meanwhile trigger again.
    /// A delayed drift trigger of `owner` is no longer pending once its reconcile begins.
    pub fn begin(self: &Arc<Self>, owner: OwnerKey) -> Busy {
        let mut st = self.lock();
        *st.busy.entry(owner.clone()).or_default() += 1;
        if let Some(t) = st.triggers.get_mut(&owner) {
            t.pending = false;
        }
        drop(st);
        Busy {
            tracker: Arc::clone(self),
            owner,
        }
    }

    fn end(&self, owner: &OwnerKey) {
        let mut st = self.lock();
        let left = match st.busy.get_mut(owner) {
            Some(n) if *n > 1 => {
                *n -= 1;
                *n
            }
            _ => {
                st.busy.remove(owner);
                0
            }
        };
        if left > 0 {
            return;
        }
        let changed = st.records.iter().any(|(k, r)| {
            &r.owner == owner
                && st.kinds.get(&k.kind()) == Some(&true)
                && drifted(r, st.live.get(k))
        });
        if changed {
            self.trigger(
                &mut st,
                owner.clone(),
                "an object changed during the reconcile",
            );
        }
    }

    /// Sends `owner` for reconciliation, at once or after its back-off delay.
    fn trigger(&self, st: &mut State, owner: OwnerKey, why: &str) {
        let now = Instant::now();
        let t = st.triggers.entry(owner.clone()).or_insert(Trigger {
            last: now,
            strikes: 0,
            pending: false,
        });
        if t.pending {
            return;
        }
        if now.saturating_duration_since(t.last) > QUIET {
            t.strikes = 0;
        }
        let at = (t.last + trigger_delay(t.strikes)).max(now);
        t.last = at;
        t.strikes = t.strikes.saturating_add(1);
        let wait = at.saturating_duration_since(now);
        tracing::info!(
            kustomization = format!("{}/{}", owner.0, owner.1),
            delay_ms = wait.as_millis() as u64,
            "drift: {why}; reconciling"
        );
        if wait.is_zero() {
            let _ = self.drift.unbounded_send(owner);
            return;
        }
        t.pending = true;
        let tx = self.drift.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = tx.unbounded_send(owner);
        });
    }

    /// A watch event: an object as it is now.
    fn observe(&self, key: Key, obj: &Value) {
        let seen = observe_value(obj, &self.override_managers);
        let mut st = self.lock();
        let newer = st.live.get(&key).is_none_or(|l| seen.rv >= l.rv);
        if !newer {
            return;
        }
        let drift = st.records.get(&key).map(|rec| {
            if let Some(n) = st.waiters.get(&rec.owner) {
                n.notify_waiters();
            }
            (rec.owner.clone(), drifted(rec, Some(&seen)))
        });
        st.live.insert(key.clone(), seen);
        let owner = match drift {
            Some((owner, true)) if !st.busy.contains_key(&owner) => owner,
            _ => return,
        };
        let why = format!("{}/{}/{} was changed", key.kind, key.namespace, key.name);
        self.trigger(&mut st, owner, &why);
    }

    /// A watch event: an object is gone.
    fn gone(&self, key: &Key) {
        let mut st = self.lock();
        st.live.remove(key);
        if let Some(n) = st.records.get(key).and_then(|r| st.waiters.get(&r.owner)) {
            n.notify_waiters();
        }
        let owner = match st.records.get(key) {
            Some(rec) if !st.busy.contains_key(&rec.owner) => rec.owner.clone(),
            _ => return,
        };
        let why = format!("{}/{}/{} was deleted", key.kind, key.namespace, key.name);
        self.trigger(&mut st, owner, &why);
    }

    fn set_synced(&self, kind: &KindKey, synced: bool) {
        let mut st = self.lock();
        let Some(s) = st.kinds.get_mut(kind) else {
            return;
        };
        let woke = synced && !*s;
        *s = synced;
        if woke {
            for n in st.waiters.values() {
                n.notify_waiters();
            }
        }
    }

    /// Whether every object is recorded for `owner`, so [`Tracker::wait_current`] can judge
    /// them all from the watches.
    pub fn covers(&self, owner: &OwnerKey, objects: &[ObjectRef]) -> bool {
        let st = self.lock();
        objects.iter().all(|o| {
            st.records
                .get(&Key::of(o))
                .is_some_and(|r| &r.owner == owner)
        })
    }

    /// The health of each object as the watches see it (Unknown until seen at or after the
    /// recorded write).
    fn health_of(&self, objects: &[ObjectRef]) -> Vec<ObjectStatus> {
        let st = self.lock();
        objects
            .iter()
            .map(|o| {
                let key = Key::of(o);
                let synced = st.kinds.get(&key.kind()) == Some(&true);
                let seen = match (st.records.get(&key), st.live.get(&key)) {
                    (Some(rec), Some(live)) if synced && live.rv >= rec.rv => Some(live),
                    _ => None,
                };
                ObjectStatus {
                    object: o.clone(),
                    status: seen.map_or(Status::Unknown, |l| l.status),
                    message: seen
                        .and_then(|l| l.message.as_deref())
                        .unwrap_or_default()
                        .to_string(),
                    error: None,
                }
            })
            .collect()
    }

    /// The first object deleted or changed by someone else since it was recorded.
    fn changed_among<'a>(&self, objects: &'a [ObjectRef]) -> Option<(&'a ObjectRef, &'static str)> {
        let st = self.lock();
        objects.iter().find_map(|o| {
            let key = Key::of(o);
            if st.kinds.get(&key.kind()) != Some(&true) {
                return None;
            }
            let rec = st.records.get(&key)?;
            match st.live.get(&key) {
                None => Some((o, "deleted")),
                Some(l) if drifted(rec, Some(l)) => Some((o, "changed")),
                Some(_) => None,
            }
        })
    }

    /// Waits until every object (all recorded for `owner`, see [`Tracker::covers`]) is
    /// Current, from the watches' events: no request and no watch of its own. Fails fast on a
    /// Failed object and after `timeout`, with the errors of the watch-per-object wait.
    pub async fn wait_current(
        &self,
        owner: &OwnerKey,
        objects: &[ObjectRef],
        timeout: Duration,
    ) -> Result<(), HealthError> {
        let start = tokio::time::Instant::now();
        let deadline = start + timeout;
        let notify = Arc::clone(self.lock().waiters.entry(owner.clone()).or_default());
        let result = loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let elapsed = || format_go_duration(start.elapsed());
            if let Some((obj, what)) = self.changed_among(objects) {
                break Err(HealthError::Changed {
                    elapsed: elapsed(),
                    subject: obj.subject(),
                    what,
                });
            }
            let states = self.health_of(objects);
            if let Some(done) = ready_verdict(&states, elapsed) {
                break done;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break Err(HealthError::Timeout {
                    elapsed: elapsed(),
                    pending: states
                        .into_iter()
                        .filter(|s| s.status != Status::Current)
                        .collect(),
                });
            }
        };
        let mut st = self.lock();
        if st
            .waiters
            .get(owner)
            .is_some_and(|n| Arc::strong_count(n) <= 2)
        {
            st.waiters.remove(owner);
        }
        result
    }

    /// A (re)list finished: objects not seen are gone.
    fn init_done(&self, kind: &KindKey, seen: &HashSet<Key>) {
        let gone: Vec<Key> = {
            let st = self.lock();
            st.live
                .keys()
                .filter(|k| &k.kind() == kind && !seen.contains(*k))
                .cloned()
                .collect()
        };
        for k in &gone {
            self.gone(k);
        }
        self.set_synced(kind, true);
    }

    fn key_of(kind: &KindKey, obj: &DynamicObject) -> Key {
        Key {
            group: kind.0.clone(),
            kind: kind.1.clone(),
            namespace: obj.metadata.namespace.clone().unwrap_or_default(),
            name: obj.metadata.name.clone().unwrap_or_default(),
        }
    }

    fn spawn_watch(self: &Arc<Self>, kind: KindKey, resource: ApiResource) {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        // List items carry no apiVersion/kind; the kstatus rules need them.
        let types = TypeMeta {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
        };
        let cfg = watcher::Config::default().labels(NAME_LABEL);
        let this = Arc::downgrade(self);
        tracing::debug!(group = %kind.0, kind = %kind.1, "watching applied objects");
        tokio::spawn(async move {
            let mut events = watcher::watcher(api, cfg).default_backoff().boxed();
            let mut seen: HashSet<Key> = HashSet::new();
            while let Some(mut ev) = events.next().await {
                let Some(t) = this.upgrade() else { return };
                if let Ok(Event::InitApply(o) | Event::Apply(o)) = &mut ev {
                    o.types = Some(types.clone());
                }
                match ev {
                    Ok(Event::Init) => seen.clear(),
                    Ok(Event::InitApply(o)) => {
                        let key = Self::key_of(&kind, &o);
                        seen.insert(key.clone());
                        t.observe(key, &serde_json::to_value(&o).unwrap_or(Value::Null));
                    }
                    Ok(Event::InitDone) => {
                        t.init_done(&kind, &seen);
                        seen = HashSet::new();
                    }
                    Ok(Event::Apply(o)) => {
                        t.observe(
                            Self::key_of(&kind, &o),
                            &serde_json::to_value(&o).unwrap_or(Value::Null),
                        );
                        // A resumed watch delivers everything after its last version.
                        t.set_synced(&kind, true);
                    }
                    Ok(Event::Delete(o)) => {
                        t.gone(&Self::key_of(&kind, &o));
                        t.set_synced(&kind, true);
                    }
                    Err(e) => {
                        tracing::debug!(group = %kind.0, kind = %kind.1, error = %e,
                            "watch of applied objects interrupted");
                        t.set_synced(&kind, false);
                    }
                }
            }
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(image: &str, replicas: i64, fields: Value) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "a", "resourceVersion": "7",
                "labels": {"app": "web", "team": "x"},
                "managedFields": [
                    {"manager": "kustomize-controller", "operation": "Apply",
                     "apiVersion": "apps/v1", "fieldsType": "FieldsV1", "fieldsV1": fields},
                    {"manager": "kube-controller-manager", "operation": "Update",
                     "subresource": "status", "fieldsV1": {"f:status": {}}}
                ]},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "app", "image": image, "imagePullPolicy": "Always"},
                {"name": "side", "image": "side:1"}
            ]}}},
            "status": {"replicas": 0}
        })
    }

    fn owned() -> Value {
        json!({"f:metadata": {"f:labels": {"f:app": {}}},
               "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                   "k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
    }

    #[test]
    fn fingerprint_covers_managed_fields_only() {
        let base = fingerprint(&deployment("app:1", 0, owned()), FIELD_MANAGER);
        assert_eq!(
            base,
            fingerprint(&deployment("app:1", 0, owned()), FIELD_MANAGER)
        );
        // Our fields: image of the keyed container, replicas.
        assert_ne!(
            base,
            fingerprint(&deployment("app:2", 0, owned()), FIELD_MANAGER)
        );
        assert_ne!(
            base,
            fingerprint(&deployment("app:1", 1, owned()), FIELD_MANAGER)
        );
        // Not ours: another container, a defaulted field, status, another label, rv.
        let mut other = deployment("app:1", 0, owned());
        other["spec"]["template"]["spec"]["containers"][1]["image"] = json!("side:2");
        other["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("Never");
        other["status"]["replicas"] = json!(3);
        other["metadata"]["labels"]["team"] = json!("y");
        other["metadata"]["resourceVersion"] = json!("99");
        assert_eq!(base, fingerprint(&other, FIELD_MANAGER));
        // Key order does not matter.
        let mut reordered = deployment("app:1", 0, owned());
        let c = reordered["spec"]["template"]["spec"]["containers"][0].take();
        let mut m = Map::new();
        for k in ["image", "name", "imagePullPolicy"] {
            m.insert(k.into(), c[k].clone());
        }
        reordered["spec"]["template"]["spec"]["containers"][0] = Value::Object(m);
        assert_eq!(base, fingerprint(&reordered, FIELD_MANAGER));
    }

    #[test]
    fn fingerprint_sees_takeover_and_removal() {
        let base = fingerprint(&deployment("app:1", 0, owned()), FIELD_MANAGER);
        // Someone took over replicas: our field set shrinks.
        let mut fields = owned();
        fields["f:spec"]
            .as_object_mut()
            .unwrap()
            .remove("f:replicas");
        assert_ne!(
            base,
            fingerprint(&deployment("app:1", 0, fields), FIELD_MANAGER)
        );
        // A field we own was removed.
        let mut gone = deployment("app:1", 0, owned());
        gone["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("app");
        assert_ne!(base, fingerprint(&gone, FIELD_MANAGER));
        // The keyed container was renamed away.
        let mut renamed = deployment("app:1", 0, owned());
        renamed["spec"]["template"]["spec"]["containers"][0]["name"] = json!("other");
        assert_ne!(base, fingerprint(&renamed, FIELD_MANAGER));
        // No entry of ours at all.
        let mut none = deployment("app:1", 0, owned());
        none["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        assert_ne!(base, fingerprint(&none, FIELD_MANAGER));
    }

    #[test]
    fn fingerprint_walks_set_and_index_entries() {
        let obj = |finalizers: Value| {
            json!({"metadata": {"name": "x", "finalizers": finalizers, "managedFields": [
                {"manager": "m", "operation": "Apply",
                 "fieldsV1": {"f:metadata": {"f:finalizers": {"v:\"a\"": {}}},
                              "f:args": {"i:1": {}}}}]},
                   "args": ["x", "y"]})
        };
        let a = fingerprint(&obj(json!(["a", "b"])), "m");
        assert_eq!(a, fingerprint(&obj(json!(["b", "a"])), "m"));
        assert_ne!(a, fingerprint(&obj(json!(["b"])), "m"));
        let mut o = obj(json!(["a"]));
        o["args"][1] = json!("z");
        assert_ne!(a, fingerprint(&o, "m"));
    }

    #[test]
    fn desired_hash_ignores_key_order_but_not_values_or_salt() {
        let a = json!({"a": 1, "b": {"c": [1, 2], "d": "x"}});
        let b = json!({"b": {"d": "x", "c": [1, 2]}, "a": 1});
        assert_eq!(desired_hash(&a, 1), desired_hash(&b, 1));
        assert_ne!(desired_hash(&a, 1), desired_hash(&a, 2));
        let c = json!({"a": 1, "b": {"c": [2, 1], "d": "x"}});
        assert_ne!(desired_hash(&a, 1), desired_hash(&c, 1));
        assert_ne!(
            desired_hash(&json!({"a": "1"}), 0),
            desired_hash(&json!({"a": 1}), 0)
        );
    }

    #[test]
    fn repeated_drift_backs_off() {
        let d: Vec<u64> = (0..12).map(|n| trigger_delay(n).as_secs()).collect();
        assert_eq!(d, vec![0, 0, 0, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn drift_needs_a_later_write_with_another_fingerprint() {
        let rec = Record {
            owner: ("ns".into(), "ks".into()),
            desired: 1,
            fp: 10,
            rv: 100,
        };
        let live = |rv, fp| Live {
            rv,
            fp,
            status: Status::Current,
            message: None,
            dirty: false,
        };
        assert!(!drifted(&rec, Some(&live(100, 10))));
        assert!(!drifted(&rec, Some(&live(150, 10))), "status-only change");
        assert!(!drifted(&rec, Some(&live(90, 11))), "an older event");
        assert!(drifted(&rec, Some(&live(150, 11))));
        assert!(drifted(&rec, None), "deleted");
        let dirty = Live {
            dirty: true,
            ..live(150, 10)
        };
        assert!(drifted(&rec, Some(&dirty)), "kubectl took over a field");
    }
}
