//! What the controller runner does with sharding on: reconcile an object only in a slot this
//! replica holds (and drop the reconcile when the slot's lease window closes), and reconcile
//! every object of a slot when it is acquired.

use std::future::Future;

use futures::{Stream, StreamExt, stream};
use kube::Resource;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::broadcast::error::RecvError;

use super::{Shards, SlotGuard};

/// The objects of `store` in `slots`.
pub fn objects_in<K>(shards: &Shards, store: &Store<K>, slots: &[u32]) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .filter(|o| {
            let slot = shards.slot_of(&o.namespace().unwrap_or_default(), &o.name_any());
            slots.contains(&slot)
        })
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

/// Every object of each slot acquired from now on (and of the slots held already), from the
/// reflector `store`: the trigger stream given to `Controller::reconcile_on`.
pub fn slot_triggers<K>(shards: Shards, store: Store<K>) -> impl Stream<Item = ObjectRef<K>> + Send
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let rx = shards.subscribe();
    let held = shards.owned();
    let acquired = stream::unfold((rx, shards.clone()), |(mut rx, shards)| async move {
        match rx.recv().await {
            Ok(slot) => Some((vec![slot], (rx, shards))),
            // Announcements were missed: every slot held now.
            Err(RecvError::Lagged(_)) => {
                let owned = shards.owned();
                Some((owned, (rx, shards)))
            }
            Err(RecvError::Closed) => None,
        }
    });
    stream::iter([held])
        .chain(acquired)
        .flat_map(move |slots| stream::iter(objects_in(&shards, &store, &slots)))
}

/// Runs `reconcile` under `guard`: logs its start and end (with microsecond timestamps, for the
/// checks that no object is reconciled by two replicas at once) and drops it when the slot's
/// lease may no longer be ours (it ends as `await_change`: the new owner reconciles it).
pub async fn run_in_slot<E>(
    guard: SlotGuard,
    reconcile: impl Future<Output = Result<Action, E>>,
) -> Result<Action, E> {
    let slot = guard.slot();
    let start_us = jiff::Timestamp::now().as_microsecond();
    tracing::info!(shard = slot, start_us, "shard reconcile started");
    let lost = guard.lost();
    let res = tokio::select! {
        biased;
        () = lost => {
            tracing::warn!(shard = slot, "shard lease window closed: reconcile dropped");
            Ok(Action::await_change())
        }
        r = reconcile => r,
    };
    let end_us = jiff::Timestamp::now().as_microsecond();
    tracing::info!(shard = slot, start_us, end_us, "shard reconcile finished");
    drop(guard);
    res
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::{reflector, watcher};

    fn cm(ns: &str, name: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn an_acquired_slot_triggers_exactly_its_objects() {
        let shards = Shards::new("c", 4, None).unwrap();
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        let names: Vec<String> = (0..40).map(|i| format!("o-{i}")).collect();
        for n in &names {
            writer.apply_watcher_event(&watcher::Event::Apply(cm("ns", n)));
        }
        let mut triggers = Box::pin(slot_triggers(shards.clone(), reader));
        shards.renewed(
            2,
            std::time::Instant::now(),
            std::time::Duration::from_secs(30),
            true,
        );
        let expected: Vec<&String> = names
            .iter()
            .filter(|n| shards.slot_of("ns", n) == 2)
            .collect();
        assert!(!expected.is_empty());
        let mut got = Vec::new();
        for _ in 0..expected.len() {
            got.push(triggers.next().await.unwrap().name);
        }
        got.sort();
        let mut want: Vec<String> = expected.into_iter().cloned().collect();
        want.sort();
        assert_eq!(got, want);
        // Nothing else is pending.
        let more =
            tokio::time::timeout(std::time::Duration::from_millis(50), triggers.next()).await;
        assert!(more.is_err(), "triggered more than the slot's objects");
    }
}
