//! New-revision triggers for running health checks (`CancelHealthCheckOnNewRevision`): while a
//! Kustomization waits for health, a new revision of its source cancels the wait, so a fixing
//! commit is not blocked until the timeout of a wait on the broken one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// A Kustomization, as `(namespace, name)`.
pub type Key = (String, String);

/// One waiting health check: woken with what triggered the new reconciliation.
#[derive(Debug, Default)]
pub struct Waiter {
    notify: Notify,
    by: Mutex<Option<String>>,
}

impl Waiter {
    /// Resolves with the trigger (`Kind/namespace/name`) once one arrives.
    pub async fn triggered(&self) -> String {
        loop {
            if let Some(by) = self.by.lock().ok().and_then(|mut b| b.take()) {
                return by;
            }
            self.notify.notified().await;
        }
    }
}

/// The health checks waiting now, by Kustomization.
#[derive(Debug, Default)]
pub struct Triggers {
    waiting: Mutex<HashMap<Key, Arc<Waiter>>>,
}

/// Unregisters its waiter when dropped (the wait ended, failed or was cancelled).
pub struct Registration<'a> {
    triggers: &'a Triggers,
    key: Key,
    /// The waiter to select on.
    pub waiter: Arc<Waiter>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Ok(mut w) = self.triggers.waiting.lock()
            && w.get(&self.key)
                .is_some_and(|x| Arc::ptr_eq(x, &self.waiter))
        {
            w.remove(&self.key);
        }
    }
}

impl Triggers {
    /// Registers a health check of `key` that a trigger may cancel.
    pub fn register(&self, key: Key) -> Registration<'_> {
        let waiter = Arc::new(Waiter::default());
        if let Ok(mut w) = self.waiting.lock() {
            w.insert(key.clone(), waiter.clone());
        }
        Registration {
            triggers: self,
            key,
            waiter,
        }
    }

    /// A new reconciliation of `key` was triggered by `by` (`Kind/namespace/name`): wakes its
    /// health check, if one is waiting. Returns whether one was.
    pub fn fire(&self, key: &Key, by: &str) -> bool {
        let waiter = self.waiting.lock().ok().and_then(|w| w.get(key).cloned());
        match waiter {
            Some(w) => {
                if let Ok(mut b) = w.by.lock() {
                    *b = Some(by.to_string());
                }
                w.notify.notify_one();
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(n: &str) -> Key {
        ("apps".into(), n.into())
    }

    #[tokio::test]
    async fn a_trigger_wakes_only_the_waiting_check_of_its_kustomization() {
        let t = Triggers::default();
        assert!(!t.fire(&key("a"), "GitRepository/apps/repo"));
        let reg = t.register(key("a"));
        assert!(!t.fire(&key("b"), "GitRepository/apps/other"));
        assert!(t.fire(&key("a"), "GitRepository/apps/repo"));
        let by = tokio::time::timeout(Duration::from_secs(5), reg.waiter.triggered())
            .await
            .unwrap();
        assert_eq!(by, "GitRepository/apps/repo");
        drop(reg);
        assert!(!t.fire(&key("a"), "GitRepository/apps/repo"));
    }

    #[tokio::test]
    async fn without_a_trigger_the_wait_goes_on() {
        let t = Triggers::default();
        let reg = t.register(key("a"));
        let woke = tokio::time::timeout(Duration::from_millis(100), reg.waiter.triggered()).await;
        assert!(woke.is_err());
    }
}
