//! Health from the tracker's watches: a `wait: true` check of objects the tracker records
//! needs no request, no watch of its own, and no work slot while it waits.

use std::sync::Arc;
use std::time::Duration;

use rflux_common::runtime::format_go_duration;

use super::Tracker;
use super::state::{Key, OwnerKey, drifted};
use crate::ssa::ObjectRef;
use crate::ssa::kstatus::Status;
use crate::ssa::wait::{ObjectStatus, WaitError, ready_verdict};

impl Tracker {
    /// The health of each object as the watches see it (Unknown until the watch has delivered
    /// the recorded write).
    fn health_of(&self, objects: &[ObjectRef]) -> Vec<ObjectStatus> {
        let st = self.lock();
        objects
            .iter()
            .map(|o| {
                let seen = st.seen_after_record(&Key::of(o));
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
            if !st.synced(&key) {
                return None;
            }
            let rec = st.records.get(&key)?;
            if rec.awaiting.is_some() {
                return None;
            }
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
    ) -> Result<(), WaitError> {
        let start = tokio::time::Instant::now();
        let deadline = start + timeout;
        let notify = Arc::clone(self.lock().waiters.entry(owner.clone()).or_default());
        let result = loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let elapsed = || format_go_duration(start.elapsed());
            if let Some((obj, what)) = self.changed_among(objects) {
                break Err(WaitError::Changed {
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
                break Err(WaitError::Timeout {
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
}
