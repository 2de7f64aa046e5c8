//! The tracker's watches: one per applied kind, cluster-wide on the owner label, feeding
//! [`super::state::State`]; and the drift triggers they send, with back-off.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, TypeMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;

use super::Tracker;
use super::state::{Key, KindKey, Observed, OwnerKey, QUIET, Seen, State, Trigger, trigger_delay};

impl Tracker {
    /// Sends `owner` for reconciliation, at once or after its back-off delay.
    pub(super) fn trigger(&self, st: &mut State, owner: OwnerKey, why: &str) {
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
    fn observe(&self, key: Key, obj: &Value, how: Seen) {
        let seen = self.live_of(obj);
        let mut st = self.lock();
        let owner = match st.observe(&key, seen, how) {
            Observed::Untracked | Observed::Stale => return,
            Observed::Same(owner) => {
                wake(&st, &owner);
                return;
            }
            Observed::Drifted(owner) => owner,
        };
        wake(&st, &owner);
        // A Kustomization's own writes while it reconciles are not drift; what others changed
        // meanwhile is checked when the reconcile ends.
        if st.busy.contains_key(&owner) {
            return;
        }
        let why = format!("{}/{}/{} was changed", key.kind, key.namespace, key.name);
        self.trigger(&mut st, owner, &why);
    }

    /// A watch event: an object is gone.
    fn gone(&self, key: &Key) {
        let mut st = self.lock();
        let Some(owner) = st.gone(key) else {
            return;
        };
        wake(&st, &owner);
        if st.busy.contains_key(&owner) {
            return;
        }
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

    pub(super) fn spawn_watch(self: &Arc<Self>, kind: KindKey, resource: ApiResource) {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        // List items carry no apiVersion/kind; the kstatus rules need them.
        let types = TypeMeta {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
        };
        let cfg = watcher::Config::default().labels(&self.owner_label);
        let this = Arc::downgrade(self);
        tracing::debug!(group = %kind.0, kind = %kind.1, "watching applied objects");
        let task = tokio::spawn(async move {
            let mut events = watcher::watcher(api, cfg).default_backoff().boxed();
            let mut seen: HashSet<Key> = HashSet::new();
            while let Some(mut ev) = events.next().await {
                let Some(t) = this.upgrade() else { return };
                if let Ok(Event::InitApply(o) | Event::Apply(o)) = &mut ev {
                    o.types = Some(types.clone());
                }
                let value = |o: &DynamicObject| serde_json::to_value(o).unwrap_or(Value::Null);
                match ev {
                    Ok(Event::Init) => seen.clear(),
                    Ok(Event::InitApply(o)) => {
                        let key = Self::key_of(&kind, &o);
                        seen.insert(key.clone());
                        t.observe(key, &value(&o), Seen::Relist);
                    }
                    Ok(Event::InitDone) => {
                        t.init_done(&kind, &seen);
                        seen = HashSet::new();
                    }
                    Ok(Event::Apply(o)) => {
                        t.observe(Self::key_of(&kind, &o), &value(&o), Seen::Event);
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
                        if let Some(hook) = &t.on_watch_error {
                            hook(&e);
                        }
                    }
                }
            }
        });
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        watches.retain(|w| !w.is_finished());
        watches.push(task.abort_handle());
    }
}

/// Wakes the health waits of `owner`.
fn wake(st: &State, owner: &OwnerKey) {
    if let Some(n) = st.waiters.get(owner) {
        n.notify_waiters();
    }
}
