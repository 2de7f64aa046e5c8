//! The applied-object tracker: what this controller has applied, fed by watches and kept as
//! fingerprints, never as objects. It lets a reconcile skip every request for objects that are
//! as it left them, reconciles a Kustomization as soon as someone edits, deletes or takes over a
//! field it manages (self-heal in well under a second instead of at the next interval), and
//! answers the health of unchanged objects without a watch of their own.
//!
//! One watch per kind (group and kind) of applied object, cluster-wide, on the owner name label
//! that every applied object carries, with the controller's own identity (`watch.rs`). For each
//! object it keeps the resourceVersion, a fingerprint of the fields this controller manages
//! (`fingerprint.rs`) and the kstatus status (`state.rs`). A reconcile records each object it
//! applies or verifies through the [`AppliedCache`] seam of the `ssa` layer; `health.rs` waits
//! for readiness from the same watches.
//!
//! The tracker never decides alone: whenever it does not know (kind not watched or not in
//! sync, object not recorded, another desired state, a fingerprint that differs), the reconcile
//! takes the full path (GET, dry-run, apply) like Flux does.

mod fingerprint;
mod health;
mod state;
mod watch;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::channel::mpsc;
use kube::Client;
use kube::api::ApiResource;
use serde_json::Value;

use crate::identity::{FIELD_MANAGER, NAME_LABEL};
use crate::ssa::{AppliedCache, ObjectRef, Owner};

pub use fingerprint::fingerprint;
pub use state::OwnerKey;
use state::{Key, Live, State, drifted};

/// The tracker; see the module documentation.
pub struct Tracker {
    client: Client,
    /// The watch tasks, aborted when the tracker is dropped (a remote cluster's tracker goes
    /// with its kubeconfig revision).
    watches: Mutex<Vec<tokio::task::AbortHandle>>,
    /// Told of every watch error (the remote clusters' circuits listen to it).
    on_watch_error: Option<WatchErrorHook>,
    /// The field manager whose fields are fingerprinted.
    manager: String,
    /// The label every applied object carries (the watches select on it).
    owner_label: String,
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

/// Called with each error of the tracker's watches.
pub type WatchErrorHook = Arc<dyn Fn(&kube::runtime::watcher::Error) + Send + Sync>;

impl Drop for Tracker {
    fn drop(&mut self) {
        let watches = self.watches.get_mut().unwrap_or_else(|e| e.into_inner());
        for w in watches.drain(..) {
            w.abort();
        }
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

impl Tracker {
    /// A tracker watching with `client` (the controller's own identity). The receiver yields
    /// the Kustomizations to reconcile because one of their objects drifted.
    /// `override_managers` is `--override-manager` (their fields are taken over on apply).
    pub fn new(
        client: Client,
        override_managers: Vec<String>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<OwnerKey>) {
        let (tx, rx) = mpsc::unbounded();
        (Self::with_sink(client, override_managers, tx, None), rx)
    }

    /// Like [`Tracker::new`] with the drift triggers sent to `sink` (shared by the local
    /// cluster's tracker and the remote ones, so drift anywhere reconciles its Kustomization)
    /// and `on_watch_error` told of each watch error.
    pub fn with_sink(
        client: Client,
        override_managers: Vec<String>,
        sink: mpsc::UnboundedSender<OwnerKey>,
        on_watch_error: Option<WatchErrorHook>,
    ) -> Arc<Self> {
        Arc::new(Tracker {
            client,
            watches: Mutex::new(Vec::new()),
            on_watch_error,
            manager: FIELD_MANAGER.to_string(),
            owner_label: NAME_LABEL.to_string(),
            override_managers,
            state: Mutex::new(State::default()),
            drift: sink,
        })
    }

    /// How many kinds are watched.
    pub fn watched_kinds(&self) -> usize {
        self.lock().kinds.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn live_of(&self, obj: &Value) -> Live {
        Live::of(obj, &self.manager, &self.override_managers)
    }

    /// Whether `obj` is exactly as this controller left it with the desired state `desired`:
    /// its kind is watched and in sync, the last record has the same desired hash, and the live
    /// fingerprint is the recorded one.
    pub fn unchanged(&self, obj: &ObjectRef, desired: u64) -> bool {
        let key = Key::of(obj);
        let st = self.lock();
        if !st.synced(&key) {
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
        st.synced(&key) && !st.live.contains_key(&key)
    }

    /// Records `obj` as applied (`wrote`) or verified for `owner` with desired hash `desired`;
    /// `live` is the object the server returned. Starts the watch of the kind if needed.
    pub fn record(
        self: &Arc<Self>,
        obj: &ObjectRef,
        resource: &ApiResource,
        owner: &OwnerKey,
        desired: u64,
        live: &Value,
        wrote: bool,
    ) {
        let key = Key::of(obj);
        let seen = self.live_of(live);
        let start = self.lock().record(key.clone(), owner, desired, seen, wrote);
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
            &r.owner == owner && st.synced(k) && r.awaiting.is_none() && drifted(r, st.live.get(k))
        });
        if changed {
            self.trigger(
                &mut st,
                owner.clone(),
                "an object changed during the reconcile",
            );
        }
    }

    /// Whether every object is recorded for `owner` and its kind's watch is in sync, so
    /// [`Tracker::wait_current`] can judge them all from the watches.
    pub fn covers(&self, owner: &OwnerKey, objects: &[ObjectRef]) -> bool {
        self.lock().covers(owner, objects)
    }
}

/// The `ssa` layer's view of the tracker (a handle: recording may start a watch task, which
/// holds the tracker too).
pub struct TrackerCache(pub Arc<Tracker>);

impl AppliedCache for TrackerCache {
    fn unchanged(&self, obj: &ObjectRef, desired: u64) -> bool {
        self.0.unchanged(obj, desired)
    }

    fn known_absent(&self, obj: &ObjectRef) -> bool {
        self.0.known_absent(obj)
    }

    fn record(
        &self,
        obj: &ObjectRef,
        resource: &ApiResource,
        owner: &Owner,
        desired: u64,
        live: &Value,
        wrote: bool,
    ) {
        let key = (owner.namespace.clone(), owner.name.clone());
        self.0.record(obj, resource, &key, desired, live, wrote);
    }

    fn forget(&self, obj: &ObjectRef) {
        self.0.forget(obj);
    }
}
