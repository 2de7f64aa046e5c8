//! One watch of the hub's Kustomizations: the latest status summary of each, in a channel the
//! phases wait on (no polling, so the harness adds no requests while a phase runs).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use rflux_common::api::kustomization::Kustomization;
use tokio::sync::watch;

/// What the phases look at in a Kustomization.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KsState {
    /// Ready=True and observedGeneration = generation.
    pub ready: bool,
    pub last_applied: Option<String>,
    pub last_handled: Option<String>,
    /// The Ready condition's message (for a timeout report).
    pub message: String,
}

impl KsState {
    fn of(k: &Kustomization) -> KsState {
        let st = k.status.as_ref();
        let ready_cond = st
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
        KsState {
            ready: ready_cond.is_some_and(|c| c.status == "True")
                && st.and_then(|s| s.observed_generation) == k.metadata.generation,
            last_applied: st.and_then(|s| s.last_applied_revision.clone()),
            last_handled: st.and_then(|s| s.last_handled_reconcile_at.clone()),
            message: ready_cond.map(|c| c.message.clone()).unwrap_or_default(),
        }
    }
}

pub type States = BTreeMap<String, KsState>;

/// The latest states, updated by a background watch until dropped.
pub struct KsWatch {
    rx: watch::Receiver<States>,
}

impl KsWatch {
    pub fn start(client: &Client, ns: &str) -> KsWatch {
        let (tx, rx) = watch::channel(States::new());
        let api: Api<Kustomization> = Api::namespaced(client.clone(), ns);
        tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            loop {
                tokio::select! {
                    _ = tx.closed() => break,
                    ev = s.next() => match ev {
                        Some(Ok(k)) => {
                            let name = k.name_any();
                            let st = KsState::of(&k);
                            tx.send_modify(|m| { m.insert(name, st); });
                        }
                        Some(Err(_)) => {}
                        None => break,
                    },
                }
            }
        });
        KsWatch { rx }
    }

    /// Waits until `pred` holds for all of `names`; returns when the watch delivered the last
    /// change needed. On a timeout, the error names a Kustomization that was not there yet.
    pub async fn wait_all(
        &mut self,
        names: &[String],
        timeout: Duration,
        what: &str,
        pred: impl Fn(&KsState) -> bool,
    ) -> anyhow::Result<Instant> {
        let done = |m: &States| names.iter().all(|n| m.get(n).is_some_and(&pred));
        {
            let res = tokio::time::timeout(timeout, self.rx.wait_for(done)).await;
            if let Ok(r) = res {
                r.context("the Kustomization watch ended")?;
                return Ok(Instant::now());
            }
        }
        let m = self.rx.borrow();
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| !m.get(*n).is_some_and(&pred))
            .collect();
        let first = missing
            .first()
            .map(|n| format!("{n}: {:?}", m.get(*n)))
            .unwrap_or_default();
        anyhow::bail!(
            "timed out waiting for {what}: {} not there, e.g. {first}",
            missing.len()
        )
    }
}
