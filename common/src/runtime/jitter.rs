//! Jittered requeue intervals (`--interval-jitter-percentage`) and the per-object exponential
//! failure backoff (`--min-retry-delay` .. `--max-retry-delay`).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;

/// Applies `±percentage%` of jitter to `interval`, using `unit` in `[0, 1)` as the random draw
/// (`0` gives the lower bound, values near `1` the upper bound). Pure; see [`jittered`].
pub fn jitter_with(interval: Duration, percentage: u8, unit: f64) -> Duration {
    let pct = f64::from(percentage.min(99)) / 100.0;
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.5
    };
    let factor = 1.0 + pct * (2.0 * unit - 1.0);
    Duration::from_secs_f64((interval.as_secs_f64() * factor).max(0.0))
}

/// Applies `±percentage%` of uniform random jitter to `interval` (Flux's success requeue).
pub fn jittered(interval: Duration, percentage: u8) -> Duration {
    let unit: f64 = rand::rng().random_range(0.0..1.0);
    jitter_with(interval, percentage, unit)
}

/// Delay after `failures` consecutive failures: `min * 2^(failures-1)`, capped at `max`
/// (controller-runtime's per-item exponential rate limiter). `failures = 0` gives `min`.
pub fn backoff_delay(min: Duration, max: Duration, failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(62);
    let factor = 1u64 << exp;
    let nanos = min.as_nanos().saturating_mul(u128::from(factor));
    let capped = nanos.min(max.as_nanos());
    Duration::from_nanos(u64::try_from(capped).unwrap_or(u64::MAX))
}

/// Per-object failure counters for [`backoff_delay`]; `forget` on success.
#[derive(Debug)]
pub struct RetryBackoff<K> {
    min: Duration,
    max: Duration,
    failures: Mutex<HashMap<K, u32>>,
}

impl<K: Eq + Hash + Clone> RetryBackoff<K> {
    /// New backoff with the given bounds.
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max: max.max(min),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Records a failure for `key` and returns the delay before the next attempt.
    pub fn next_delay(&self, key: &K) -> Duration {
        let mut map = match self.failures.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        let n = map.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        backoff_delay(self.min, self.max, *n)
    }

    /// Clears the failure count of `key` (call after a success).
    pub fn forget(&self, key: &K) {
        let mut map = match self.failures.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.remove(key);
    }

    /// Current failure count of `key`.
    pub fn failures(&self, key: &K) -> u32 {
        let map = match self.failures.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.get(key).copied().unwrap_or(0)
    }
}
