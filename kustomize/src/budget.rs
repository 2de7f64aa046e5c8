//! The budget of one build: how long it may run, how many objects it may produce, how many
//! bytes of files it may read and how deep kustomizations may be nested. A kustomization tree
//! comes from a tenant, so every build is bounded; running into a limit fails the build with
//! [`KustomizeError::Budget`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::error::{BudgetExceeded, KustomizeError, Result};

/// Limits of one build. The defaults are generous for real repositories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// Wall-clock time the build may take (default 60 s).
    pub timeout: Duration,
    /// Objects the build may produce (default 100 000): every object read from a resource file
    /// or made by a generator, and every object copied from a base built earlier in the build
    /// (a base included along several paths is built once or twice, then copied).
    pub max_resources: usize,
    /// Bytes the build may take in (default 256 MiB): every file it reads, and the approximate
    /// size of the objects copied from a base built earlier in the build.
    pub max_bytes: u64,
    /// How deep kustomizations may be nested through `resources`, `components` and
    /// `transformers` (default 100 000: deeper than Go kustomize, whose stack gives out first).
    pub max_depth: usize,
}

/// Default [`Budget::timeout`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`Budget::max_resources`].
pub const DEFAULT_MAX_RESOURCES: usize = 100_000;
/// Default [`Budget::max_bytes`].
pub const DEFAULT_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// Default [`Budget::max_depth`].
pub const DEFAULT_MAX_DEPTH: usize = 100_000;

impl Default for Budget {
    fn default() -> Self {
        Budget {
            timeout: DEFAULT_TIMEOUT,
            max_resources: DEFAULT_MAX_RESOURCES,
            max_bytes: DEFAULT_MAX_BYTES,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// What one build has used of its budget so far. Shared by every loader of the build.
#[derive(Debug)]
pub(crate) struct Meter {
    budget: Budget,
    /// `None` when the timeout is too large to be a point in time.
    deadline: Option<Instant>,
    resources: AtomicUsize,
    bytes: AtomicU64,
}

fn exceeded(what: BudgetExceeded) -> KustomizeError {
    KustomizeError::Budget(what)
}

impl Meter {
    /// Starts metering a build now.
    pub(crate) fn start(budget: &Budget) -> Self {
        Meter {
            budget: budget.clone(),
            deadline: Instant::now().checked_add(budget.timeout),
            resources: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    /// Fails once the build has run out of time.
    pub(crate) fn check_time(&self) -> Result<()> {
        match self.deadline {
            Some(d) if Instant::now() > d => {
                Err(exceeded(BudgetExceeded::Time(self.budget.timeout)))
            }
            _ => Ok(()),
        }
    }

    /// Fails when kustomizations are nested `depth` deep and that is too deep.
    pub(crate) fn check_depth(&self, depth: usize) -> Result<()> {
        if depth > self.budget.max_depth {
            return Err(exceeded(BudgetExceeded::Depth(self.budget.max_depth)));
        }
        Ok(())
    }

    /// Counts `n` produced objects.
    pub(crate) fn add_resources(&self, n: usize) -> Result<()> {
        let total = self
            .resources
            .fetch_add(n, Ordering::Relaxed)
            .saturating_add(n);
        if total > self.budget.max_resources {
            return Err(exceeded(BudgetExceeded::Resources(
                self.budget.max_resources,
            )));
        }
        self.check_time()
    }

    /// Counts `n` bytes read.
    pub(crate) fn add_bytes(&self, n: u64) -> Result<()> {
        let total = self.bytes.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        if total > self.budget.max_bytes {
            return Err(exceeded(BudgetExceeded::Bytes(self.budget.max_bytes)));
        }
        self.check_time()
    }
}

/// The approximate size of a value in memory or as JSON text: its strings plus a few bytes per
/// node.
pub(crate) fn approx_size(v: &Value) -> u64 {
    const NODE: u64 = 8;
    let len = |s: &str| u64::try_from(s.len()).unwrap_or(u64::MAX);
    let mut total = 0u64;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        let here = match v {
            Value::Null | Value::Bool(_) | Value::Number(_) => NODE,
            Value::String(s) => NODE.saturating_add(len(s)),
            Value::Array(a) => {
                stack.extend(a.iter());
                NODE
            }
            Value::Object(m) => {
                let mut keys = NODE;
                for (k, x) in m {
                    keys = keys.saturating_add(NODE.saturating_add(len(k)));
                    stack.push(x);
                }
                keys
            }
        };
        total = total.saturating_add(here);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_enforced() {
        let m = Meter::start(&Budget {
            max_resources: 3,
            max_bytes: 10,
            max_depth: 2,
            ..Budget::default()
        });
        assert!(m.add_resources(3).is_ok());
        assert!(matches!(
            m.add_resources(1),
            Err(KustomizeError::Budget(BudgetExceeded::Resources(3)))
        ));
        assert!(m.add_bytes(10).is_ok());
        assert!(matches!(
            m.add_bytes(1),
            Err(KustomizeError::Budget(BudgetExceeded::Bytes(10)))
        ));
        assert!(m.check_depth(2).is_ok());
        assert!(m.check_depth(3).is_err());
        let late = Meter::start(&Budget {
            timeout: Duration::ZERO,
            ..Budget::default()
        });
        std::thread::sleep(Duration::from_millis(2));
        assert!(matches!(
            late.check_time(),
            Err(KustomizeError::Budget(BudgetExceeded::Time(_)))
        ));
        // A timeout too large for a point in time never runs out.
        let forever = Meter::start(&Budget {
            timeout: Duration::MAX,
            ..Budget::default()
        });
        assert!(forever.check_time().is_ok());
    }

    #[test]
    fn sizes_grow_with_content() {
        let small = approx_size(&serde_json::json!({"a": "x"}));
        let big = approx_size(&serde_json::json!({"a": "x".repeat(1000), "b": [1, 2, 3]}));
        assert!(small > 0 && big > small + 1000);
    }
}
