//! The I/O of automatic sharding: this replica's member lease, the slot leases, one round every
//! retry period (and at once when a reconcile of a draining slot ends). The decisions are
//! [`super::plan`]'s; the timing is the leader election's (`--leader-election-*` flags).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use tokio_util::sync::CancellationToken;

use super::plan::{
    Observed, SlotAction, alive_members, assign, member_lease_name, observe, plan_slots,
    slot_from_lease_name, slot_lease_name,
};
use super::{MEMBER_LABEL, SLOT_LABEL, Shards};
use crate::runtime::leader::{Decision, next_spec, released_spec};

/// A member lease not renewed for this many lease durations is deleted.
const STALE_MEMBER_FACTOR: u32 = 4;

/// Sharding settings.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// Controller name (lease names and labels).
    pub controller: String,
    /// Lease namespace (`RUNTIME_NAMESPACE`).
    pub namespace: String,
    /// This replica's identity.
    pub identity: String,
    /// Lease duration (others take a slot over after it passes without renewal).
    pub lease_duration: Duration,
    /// Renew deadline (reconciles of a slot start only within it from the last renewal).
    pub renew_deadline: Duration,
    /// Time between rounds.
    pub retry_period: Duration,
    /// How long shutdown waits for reconciles in flight before releasing the slots anyway.
    pub drain_grace: Duration,
}

/// The lease loop of one replica.
pub struct ShardLoop {
    api: Api<Lease>,
    cfg: ShardConfig,
    shards: Shards,
    member_name: String,
    members_seen: BTreeMap<String, Observed>,
    slots_seen: Vec<Option<Observed>>,
    slot_leases: Vec<Option<Lease>>,
    last_members: Vec<String>,
}

impl ShardLoop {
    /// A loop writing leases with `client` (the unfenced lease client).
    pub fn new(client: Client, cfg: ShardConfig, shards: Shards) -> Self {
        let n = usize::try_from(shards.count()).unwrap_or(1);
        Self {
            api: Api::namespaced(client, &cfg.namespace),
            member_name: member_lease_name(&cfg.controller, &cfg.identity),
            cfg,
            shards,
            members_seen: BTreeMap::new(),
            slots_seen: vec![None; n],
            slot_leases: vec![None; n],
            last_members: Vec::new(),
        }
    }

    /// Runs rounds until `shutdown`; then stops every slot, waits (bounded) for the reconciles
    /// in flight, releases the slot leases and the member lease.
    pub async fn run(mut self, shutdown: CancellationToken) {
        tracing::info!(
            controller = %self.cfg.controller,
            identity = %self.cfg.identity,
            shards = self.shards.count(),
            member_lease = %self.member_name,
            "automatic sharding: joining"
        );
        loop {
            self.round().await;
            let wait = self.cfg.retry_period;
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
                // A draining slot may be releasable now.
                () = self.shards.reconcile_ended(), if self.draining() => {}
            }
        }
        self.leave().await;
    }

    fn draining(&self) -> bool {
        self.shards
            .held_slots()
            .iter()
            .any(|s| !self.shards.owned().contains(s))
    }

    async fn round(&mut self) {
        let now = Instant::now();
        self.renew_member().await;
        if let Err(e) = self.read_members(now).await {
            tracing::debug!(error = %e, "listing member leases");
        }
        let alive = alive_members(&self.members_seen, now, self.cfg.lease_duration);
        if alive != self.last_members {
            tracing::info!(controller = %self.cfg.controller, members = ?alive, "shard members changed");
            self.last_members = alive.clone();
        }
        self.shards.set_members(alive.len());
        if let Err(e) = self.read_slots(now).await {
            // Nothing is known of the slots: renewals cannot be judged, the fences close on
            // their own when the renew deadline passes.
            tracing::debug!(error = %e, "listing slot leases");
            return;
        }
        let desired = assign(&alive, self.shards.count());
        let plan = plan_slots(
            &desired,
            &self.slots_seen,
            &self.cfg.identity,
            Instant::now(),
            self.cfg.lease_duration,
        );
        for (i, action) in plan.into_iter().enumerate() {
            let Ok(slot) = u32::try_from(i) else { continue };
            match action {
                SlotAction::Acquire(d) => {
                    self.write_slot(slot, &d, true).await;
                }
                // Also when the record is ours but the slot is not held locally (a write whose
                // answer was lost): a renewal makes it ours with a fresh window.
                SlotAction::Renew => self.write_slot(slot, &Decision::Renew, true).await,
                SlotAction::Release => {
                    if self.shards.drain(slot) {
                        self.release_slot(slot).await;
                    } else {
                        // Reconciles still run: keep the lease while they finish.
                        self.write_slot(slot, &Decision::Renew, false).await;
                    }
                }
                SlotAction::Idle => {
                    if self.shards.is_held(slot) {
                        self.shards.dropped(slot, "lease held by another replica");
                    }
                }
            }
        }
    }

    async fn renew_member(&mut self) {
        let current = match self.api.get_opt(&self.member_name).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(error = %e, "reading member lease");
                return;
            }
        };
        let spec = current.as_ref().map(|l| l.spec.clone().unwrap_or_default());
        // Our own lease: renew whatever it says (no one else writes it).
        let decision = if spec.is_none() {
            Decision::Create
        } else {
            Decision::Renew
        };
        let Some(next) = next_spec(
            spec.as_ref(),
            &decision,
            &self.cfg.identity,
            self.cfg.lease_duration,
            jiff::Timestamp::now(),
        ) else {
            return;
        };
        let res = match current {
            None => {
                let lease = self.lease(&self.member_name, MEMBER_LABEL, next);
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut l) => {
                l.spec = Some(next);
                self.api
                    .replace(&self.member_name, &PostParams::default(), &l)
                    .await
            }
        };
        if let Err(e) = res {
            tracing::debug!(error = %e, "renewing member lease");
        }
    }

    async fn read_members(&mut self, now: Instant) -> Result<(), kube::Error> {
        let lp = ListParams::default().labels(&format!("{MEMBER_LABEL}={}", self.cfg.controller));
        let list = self.api.list(&lp).await?;
        let mut names = BTreeSet::new();
        for l in list.items {
            let Some(name) = l.metadata.name.clone() else {
                continue;
            };
            observe(
                &mut self.members_seen,
                &name,
                l.spec.unwrap_or_default(),
                now,
            );
            names.insert(name);
        }
        self.members_seen.retain(|n, _| names.contains(n));
        // Member leases of replicas gone long ago (each replica has a fresh identity): any
        // member deletes them.
        let stale: Vec<String> = self
            .members_seen
            .iter()
            .filter(|(n, o)| {
                **n != self.member_name
                    && now >= o.changed_at + self.cfg.lease_duration * STALE_MEMBER_FACTOR
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in stale {
            if self
                .api
                .delete(&name, &DeleteParams::default())
                .await
                .is_ok()
            {
                tracing::info!(lease = %name, "deleted the member lease of a replica gone");
                self.members_seen.remove(&name);
            }
        }
        Ok(())
    }

    async fn read_slots(&mut self, now: Instant) -> Result<(), kube::Error> {
        let lp = ListParams::default().labels(&format!("{SLOT_LABEL}={}", self.cfg.controller));
        let list = self.api.list(&lp).await?;
        let mut fresh: Vec<Option<Lease>> = vec![None; self.slot_leases.len()];
        for l in list.items {
            let Some(slot) = l
                .metadata
                .name
                .as_deref()
                .and_then(|n| slot_from_lease_name(&self.cfg.controller, n))
            else {
                continue;
            };
            if let Some(entry) = usize::try_from(slot).ok().and_then(|i| fresh.get_mut(i)) {
                *entry = Some(l);
            }
        }
        for (i, lease) in fresh.iter().enumerate() {
            let spec: Option<LeaseSpec> =
                lease.as_ref().map(|l| l.spec.clone().unwrap_or_default());
            let seen = &mut self.slots_seen[i];
            *seen = match (seen.take(), spec) {
                (_, None) => None,
                (Some(o), Some(s)) if o.spec == s => Some(o),
                (_, Some(s)) => Some(Observed {
                    spec: s,
                    changed_at: now,
                }),
            };
        }
        self.slot_leases = fresh;
        Ok(())
    }

    fn lease(&self, name: &str, label: &str, spec: LeaseSpec) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(self.cfg.namespace.clone()),
                labels: Some([(label.to_string(), self.cfg.controller.clone())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        }
    }

    /// Creates, takes over or renews the lease of `slot`; on success the slot's fence is
    /// extended by the renew deadline from the moment the request was sent. `keep`: this
    /// replica should own the slot (false: a renewal while a release waits for reconciles).
    async fn write_slot(&mut self, slot: u32, decision: &Decision, keep: bool) {
        let Ok(i) = usize::try_from(slot) else { return };
        let name = slot_lease_name(&self.cfg.controller, slot);
        let current = self.slot_leases.get(i).cloned().flatten();
        let spec = current.as_ref().map(|l| l.spec.clone().unwrap_or_default());
        let Some(next) = next_spec(
            spec.as_ref(),
            decision,
            &self.cfg.identity,
            self.cfg.lease_duration,
            jiff::Timestamp::now(),
        ) else {
            return;
        };
        let sent = Instant::now();
        let res = match current {
            None => {
                let lease = self.lease(&name, SLOT_LABEL, next);
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut l) => {
                l.spec = Some(next);
                self.api.replace(&name, &PostParams::default(), &l).await
            }
        };
        match res {
            Ok(l) => {
                self.shards
                    .renewed(slot, sent, self.cfg.renew_deadline, keep);
                self.slots_seen[i] = Some(Observed {
                    spec: l.spec.clone().unwrap_or_default(),
                    changed_at: Instant::now(),
                });
                self.slot_leases[i] = Some(l);
            }
            Err(e) => {
                // A conflict: someone else wrote it first; the fence closes on its own.
                tracing::debug!(error = %e, shard = slot, "writing shard lease");
            }
        }
    }

    /// Releases the lease of `slot` (no reconcile of it runs here any more).
    async fn release_slot(&mut self, slot: u32) {
        let Ok(i) = usize::try_from(slot) else { return };
        let name = slot_lease_name(&self.cfg.controller, slot);
        // Nothing of the slot starts from here on, whatever the answer.
        self.shards.dropped(slot, "released");
        let Some(mut l) = self.slot_leases.get(i).cloned().flatten() else {
            return;
        };
        let Some(spec) = l.spec.clone() else { return };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return;
        }
        l.spec = Some(released_spec(&spec, jiff::Timestamp::now()));
        match self.api.replace(&name, &PostParams::default(), &l).await {
            Ok(l) => self.slot_leases[i] = Some(l),
            // Not released: it expires after the lease duration.
            Err(e) => tracing::debug!(error = %e, shard = slot, "releasing shard lease"),
        }
    }

    async fn leave(&mut self) {
        let held = self.shards.held_slots();
        for s in &held {
            self.shards.drain(*s);
        }
        let deadline = Instant::now() + self.cfg.drain_grace;
        while self.shards.in_flight() > 0 && Instant::now() < deadline {
            tokio::select! {
                () = self.shards.reconcile_ended() => {}
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
        let now = Instant::now();
        if self.read_slots(now).await.is_ok() {
            for s in held {
                self.release_slot(s).await;
            }
        } else {
            for s in held {
                self.shards.dropped(s, "shutdown");
            }
        }
        if let Err(e) = self
            .api
            .delete(&self.member_name, &DeleteParams::default())
            .await
        {
            tracing::debug!(error = %e, "deleting member lease");
        }
        tracing::info!(controller = %self.cfg.controller, "automatic sharding: left");
    }
}
