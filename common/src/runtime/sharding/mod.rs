//! Automatic sharding (`--auto-sharding`): N replicas of a controller split its objects among
//! themselves.
//!
//! - Each object belongs to one of `--shards` slots: a stable hash of `namespace/name`
//!   ([`plan::slot_of`]).
//! - Each replica holds a member Lease (`<controller>-member-<identity>`, label
//!   `rflux.dev/shard-member=<controller>`), renewed like the leader lease. The alive members are
//!   the holders of member leases not expired.
//! - The desired owner of a slot is the alive member of highest rendezvous weight
//!   ([`plan::assign`]): stable, and a member joining or leaving moves only its own share.
//! - Each slot is held through its own Lease (`<controller>-shard-<i>`, label
//!   `rflux.dev/shard-slot=<controller>`). A replica acquires the slots it should own when they
//!   are free, released or expired; it releases a slot it should no longer own only after it
//!   stopped starting reconciles of its objects and every reconcile in flight ended.
//! - A reconcile starts only while the slot's lease is certainly held (a per-slot
//!   [`WriteFence`]: the renew deadline from the last successful renewal, judged on the local
//!   clock), and one still running when that window closes is dropped.
//!
//! [`Shards`] is the state the runner ([`super::controller::run_controller_sharded`]) and the
//! lease loop ([`leases::ShardLoop`]) share.

pub mod leases;
pub mod plan;
pub mod runner;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::{IntCounterVec, IntGaugeVec, Opts};
use tokio::sync::{Notify, broadcast};

use super::fence::WriteFence;
use super::metrics::{Metrics, MetricsError};

pub use leases::{ShardConfig, ShardLoop};
pub use plan::slot_of;

/// The label of member leases (value: the controller name).
pub const MEMBER_LABEL: &str = "rflux.dev/shard-member";
/// The label of slot leases (value: the controller name).
pub const SLOT_LABEL: &str = "rflux.dev/shard-slot";

/// The controllers that implement `--auto-sharding`.
pub const SHARDED_CONTROLLERS: &[&str] = &["kustomize-controller", "source-controller"];

/// How often a running reconcile re-checks its slot's fence (besides every poll).
const LOST_CHECK: Duration = Duration::from_millis(200);

#[derive(Debug)]
struct Slot {
    /// The lease is ours (acquired, not yet released or lost).
    held: bool,
    /// Releasing: no new reconcile starts.
    draining: bool,
    /// Reconciles of this slot's objects running now.
    in_flight: u32,
    /// Open until the renew deadline after the last successful renewal.
    fence: WriteFence,
}

#[derive(Debug)]
struct ShardMetrics {
    owned: IntGaugeVec,
    reconciles: IntCounterVec,
    members: IntGaugeVec,
}

#[derive(Debug)]
struct Inner {
    controller: String,
    count: u32,
    slots: Mutex<Vec<Slot>>,
    drained: Notify,
    acquired: broadcast::Sender<u32>,
    metrics: Option<ShardMetrics>,
}

/// The slots this replica holds, shared by the lease loop and the controller runners.
#[derive(Clone, Debug)]
pub struct Shards {
    inner: Arc<Inner>,
}

/// A reconcile of an object of a held slot is running; dropping it ends it.
#[derive(Debug)]
pub struct SlotGuard {
    shards: Shards,
    slot: u32,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.shards.with_slot(self.slot, |s| {
            s.in_flight = s.in_flight.saturating_sub(1);
        });
        self.shards.inner.drained.notify_waiters();
    }
}

impl SlotGuard {
    /// The slot.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Completes when the slot's lease may no longer be ours (the fence closed): a reconcile
    /// still running then must stop writing. Checked on every poll before anything else, so a
    /// replica that was frozen past the window sees it at once when it wakes.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let fence = self.shards.fence(self.slot);
        let mut tick = Box::pin(tokio::time::sleep(LOST_CHECK));
        std::future::poll_fn(move |cx| {
            loop {
                if !fence.allows_writes() {
                    return std::task::Poll::Ready(());
                }
                match tick.as_mut().poll(cx) {
                    std::task::Poll::Pending => return std::task::Poll::Pending,
                    std::task::Poll::Ready(()) => tick
                        .as_mut()
                        .reset(tokio::time::Instant::now() + LOST_CHECK),
                }
            }
        })
    }

    /// Whether the slot's lease is still certainly ours.
    pub fn holds(&self) -> bool {
        self.shards.fence(self.slot).allows_writes()
    }
}

impl Shards {
    /// `count` slots of `controller`, none held; with `metrics`, the per-shard series are
    /// registered in its registry.
    pub fn new(
        controller: &str,
        count: u32,
        metrics: Option<&Metrics>,
    ) -> Result<Self, MetricsError> {
        let count = count.max(1);
        let metrics = match metrics {
            Some(m) => Some(register(m, controller, count)?),
            None => None,
        };
        let (acquired, _) = broadcast::channel(usize::try_from(count).unwrap_or(1024).max(16) * 2);
        Ok(Shards {
            inner: Arc::new(Inner {
                controller: controller.to_string(),
                count,
                slots: Mutex::new(
                    (0..count)
                        .map(|_| Slot {
                            held: false,
                            draining: false,
                            in_flight: 0,
                            fence: WriteFence::closed(),
                        })
                        .collect(),
                ),
                drained: Notify::new(),
                acquired,
                metrics,
            }),
        })
    }

    /// The number of slots.
    pub fn count(&self) -> u32 {
        self.inner.count
    }

    /// The controller name.
    pub fn controller(&self) -> &str {
        &self.inner.controller
    }

    /// The slot of `namespace/name`.
    pub fn slot_of(&self, namespace: &str, name: &str) -> u32 {
        plan::slot_of(namespace, name, self.inner.count)
    }

    fn with_slot<T>(&self, slot: u32, f: impl FnOnce(&mut Slot) -> T) -> Option<T> {
        let mut slots = self.inner.slots.lock().ok()?;
        slots.get_mut(usize::try_from(slot).ok()?).map(f)
    }

    fn fence(&self, slot: u32) -> WriteFence {
        self.with_slot(slot, |s| s.fence.clone())
            .unwrap_or_else(WriteFence::closed)
    }

    /// Starts a reconcile of an object of `slot` when the slot is held, not draining and its
    /// lease certainly still ours; `None`: the object is not this replica's to reconcile now.
    pub fn try_start(&self, slot: u32) -> Option<SlotGuard> {
        let started = self.with_slot(slot, |s| {
            if s.held && !s.draining && s.fence.allows_writes() {
                s.in_flight += 1;
                true
            } else {
                false
            }
        })?;
        if !started {
            return None;
        }
        if let Some(m) = &self.inner.metrics {
            m.reconciles
                .with_label_values(&[&self.inner.controller, &slot.to_string()])
                .inc();
        }
        Some(SlotGuard {
            shards: self.clone(),
            slot,
        })
    }

    /// Subscribes to the slots acquired from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<u32> {
        self.inner.acquired.subscribe()
    }

    /// The slots held (and not draining) now.
    pub fn owned(&self) -> Vec<u32> {
        self.slots_where(|s| s.held && !s.draining)
    }

    /// The slots whose state matches `keep`.
    fn slots_where(&self, keep: impl Fn(&Slot) -> bool) -> Vec<u32> {
        self.inner.slots.lock().map_or_else(
            |_| Vec::new(),
            |slots| {
                slots
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| keep(s))
                    .filter_map(|(i, _)| u32::try_from(i).ok())
                    .collect()
            },
        )
    }

    /// Whether `slot` is held by this replica.
    pub fn is_held(&self, slot: u32) -> bool {
        self.with_slot(slot, |s| s.held).unwrap_or(false)
    }

    /// The lease of `slot` was acquired (or renewed) by a request sent at `sent`. `keep`: this
    /// replica should own the slot (not a renewal that only covers the reconciles in flight of
    /// a slot being released), so a slot that was draining is taken back. An acquisition, or a
    /// slot taken back, is announced: its objects are reconciled (those skipped while it
    /// drained included).
    pub(crate) fn renewed(&self, slot: u32, sent: Instant, window: Duration, keep: bool) {
        let (newly, announce) = self
            .with_slot(slot, |s| {
                s.fence.renewed(sent, window);
                let newly = !s.held;
                let announce = newly || (keep && s.draining);
                s.held = true;
                if keep {
                    s.draining = false;
                }
                (newly, announce)
            })
            .unwrap_or((false, false));
        if newly {
            self.set_owned(slot, true);
            tracing::info!(controller = %self.inner.controller, shard = slot, "acquired shard");
        }
        if announce {
            // No receiver yet is fine: the runners scan the owned slots when they start.
            let _ = self.inner.acquired.send(slot);
        }
    }

    /// Stops new reconciles of `slot`; true when none is in flight (it may be released).
    pub(crate) fn drain(&self, slot: u32) -> bool {
        self.with_slot(slot, |s| {
            s.draining = true;
            s.in_flight == 0
        })
        .unwrap_or(true)
    }

    /// The lease of `slot` was released or lost: nothing of it runs from now on.
    pub(crate) fn dropped(&self, slot: u32, why: &str) {
        let was = self
            .with_slot(slot, |s| {
                let was = s.held;
                s.held = false;
                s.draining = false;
                s.fence.close();
                was
            })
            .unwrap_or(false);
        if was {
            self.set_owned(slot, false);
            tracing::info!(controller = %self.inner.controller, shard = slot, reason = why, "gave up shard");
        }
    }

    /// The slots held, draining ones included.
    pub(crate) fn held_slots(&self) -> Vec<u32> {
        self.slots_where(|s| s.held)
    }

    /// Reconciles in flight over every slot.
    pub(crate) fn in_flight(&self) -> u32 {
        self.inner
            .slots
            .lock()
            .map_or(0, |slots| slots.iter().map(|s| s.in_flight).sum())
    }

    /// Completes at the next end of a reconcile.
    pub(crate) async fn reconcile_ended(&self) {
        self.inner.drained.notified().await;
    }

    fn set_owned(&self, slot: u32, owned: bool) {
        if let Some(m) = &self.inner.metrics {
            m.owned
                .with_label_values(&[&self.inner.controller, &slot.to_string()])
                .set(i64::from(owned));
        }
    }

    pub(crate) fn set_members(&self, n: usize) {
        if let Some(m) = &self.inner.metrics {
            m.members
                .with_label_values(&[&self.inner.controller])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}

fn register(m: &Metrics, controller: &str, count: u32) -> Result<ShardMetrics, MetricsError> {
    let owned = IntGaugeVec::new(
        Opts::new(
            "rflux_shard_owned",
            "Whether this replica holds the shard's lease (1) or not (0).",
        ),
        &["controller", "shard"],
    )?;
    let reconciles = IntCounterVec::new(
        Opts::new(
            "rflux_shard_reconcile_total",
            "Reconciles started by this replica, per shard.",
        ),
        &["controller", "shard"],
    )?;
    let members = IntGaugeVec::new(
        Opts::new(
            "rflux_shard_members",
            "Alive members (replicas) seen by this replica.",
        ),
        &["controller"],
    )?;
    m.registry().register(Box::new(owned.clone()))?;
    m.registry().register(Box::new(reconciles.clone()))?;
    m.registry().register(Box::new(members.clone()))?;
    for s in 0..count {
        owned
            .with_label_values(&[controller, &s.to_string()])
            .set(0);
        reconciles.with_label_values(&[controller, &s.to_string()]);
    }
    members.with_label_values(&[controller]).set(0);
    Ok(ShardMetrics {
        owned,
        reconciles,
        members,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reconciles_start_only_in_held_undrained_slots_and_are_counted_until_they_end() {
        let s = Shards::new("c", 4, None).unwrap();
        assert!(s.try_start(1).is_none(), "not held");
        s.renewed(1, Instant::now(), Duration::from_secs(30), true);
        let g = s.try_start(1).unwrap();
        assert!(g.holds());
        assert!(s.try_start(9).is_none(), "out of range");
        assert!(!s.drain(1), "one in flight");
        assert!(s.try_start(1).is_none(), "draining: nothing new starts");
        assert_eq!(s.in_flight(), 1);
        drop(g);
        assert!(s.drain(1));
        s.dropped(1, "test");
        assert!(!s.is_held(1));
        assert!(s.try_start(1).is_none());
        // Acquired again later: starts again.
        s.renewed(1, Instant::now(), Duration::from_secs(30), true);
        assert!(s.try_start(1).is_some());
    }

    #[test]
    fn a_slot_whose_renewal_window_passed_starts_nothing() {
        let s = Shards::new("c", 2, None).unwrap();
        s.renewed(
            0,
            Instant::now() - Duration::from_secs(31),
            Duration::from_secs(30),
            true,
        );
        assert!(s.is_held(0));
        assert!(s.try_start(0).is_none());
    }

    #[tokio::test]
    async fn a_draining_slot_wanted_again_is_taken_back_and_announced() {
        let s = Shards::new("c", 2, None).unwrap();
        let mut rx = s.subscribe();
        s.renewed(0, Instant::now(), Duration::from_secs(30), true);
        assert_eq!(rx.recv().await.unwrap(), 0);
        let g = s.try_start(0).unwrap();
        assert!(!s.drain(0));
        // Renewed only to cover the reconcile in flight: still draining, nothing announced.
        s.renewed(0, Instant::now(), Duration::from_secs(30), false);
        assert!(s.try_start(0).is_none());
        assert!(rx.try_recv().is_err());
        // The slot is ours again: starts resume and its objects (skipped meanwhile) are
        // announced for a reconcile.
        s.renewed(0, Instant::now(), Duration::from_secs(30), true);
        assert_eq!(rx.recv().await.unwrap(), 0);
        assert!(s.try_start(0).is_some());
        drop(g);
    }

    #[tokio::test]
    async fn acquisitions_are_announced_once() {
        let s = Shards::new("c", 2, None).unwrap();
        let mut rx = s.subscribe();
        s.renewed(1, Instant::now(), Duration::from_secs(30), true);
        s.renewed(1, Instant::now(), Duration::from_secs(30), true);
        assert_eq!(rx.recv().await.unwrap(), 1);
        assert!(rx.try_recv().is_err(), "a renewal is not an acquisition");
        assert_eq!(s.owned(), vec![1]);
    }

    #[test]
    fn auto_sharding_is_off_by_default_and_set_by_flags() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            flags: crate::runtime::RuntimeFlags,
        }
        let off = Cli::try_parse_from(["c"]).unwrap().flags.sharding;
        assert!(!off.auto_sharding);
        assert_eq!(off.shards, 32);
        let on = Cli::try_parse_from(["c", "--auto-sharding", "--shards=8"])
            .unwrap()
            .flags
            .sharding;
        assert!(on.auto_sharding);
        assert_eq!(on.shards, 8);
        assert!(Cli::try_parse_from(["c", "--shards=0"]).is_err());
        let explicit = Cli::try_parse_from(["c", "--auto-sharding=false"]).unwrap();
        assert!(!explicit.flags.sharding.auto_sharding);
    }

    #[tokio::test]
    async fn controllers_without_sharding_refuse_the_flag_instead_of_running_unfenced() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            flags: crate::runtime::RuntimeFlags,
        }
        let flags = Cli::try_parse_from([
            "c",
            "--auto-sharding",
            "--metrics-addr=0",
            "--health-addr=0",
        ])
        .unwrap()
        .flags;
        let err = crate::runtime::Manager::start_with_shutdown(
            "resourceset-controller",
            &flags,
            crate::runtime::CancellationToken::new(),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("--auto-sharding is not implemented by resourceset-controller"),
            "{err}"
        );
    }

    #[test]
    fn per_shard_metrics_are_served() {
        let m = Metrics::new().unwrap();
        let s = Shards::new("kustomize-controller", 2, Some(&m)).unwrap();
        s.renewed(1, Instant::now(), Duration::from_secs(30), true);
        drop(s.try_start(1));
        s.set_members(3);
        let text = m.encode().unwrap();
        assert!(
            text.contains(r#"rflux_shard_owned{controller="kustomize-controller",shard="1"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"rflux_shard_owned{controller="kustomize-controller",shard="0"} 0"#)
        );
        assert!(text.contains(
            r#"rflux_shard_reconcile_total{controller="kustomize-controller",shard="1"} 1"#
        ));
        assert!(text.contains(r#"rflux_shard_members{controller="kustomize-controller"} 3"#));
    }
}
