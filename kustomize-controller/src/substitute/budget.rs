//! Bounds on the work and the output of a substitution run.
//!
//! Variables come from the tenant's ConfigMaps and Secrets and the manifests from the tenant's
//! repository, so every substitution runs against a [`Budget`]: the bytes it produces (per
//! object and for the whole run), the pattern-matching steps it takes (per object and for the
//! whole run), a deadline, and a cancellation flag. Exceeding any of them ends the run with a
//! [`BudgetError`] reported against the object being substituted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Deepest nesting of `${...}` inside another expression's arguments.
pub const MAX_NESTING: usize = 64;
/// Default cap on the bytes substitution produces for one object (its substituted text plus
/// the intermediate values of its expressions).
pub const MAX_OBJECT_BYTES: usize = 16 << 20;
/// Default cap on the bytes substitution produces for all the objects of one run.
pub const MAX_TOTAL_BYTES: usize = 256 << 20;
/// Default cap on the work units (characters scanned or compared by pattern operators, case
/// mapping and replacement) spent on one object.
pub const MAX_OBJECT_WORK: u64 = 50_000_000;
/// Default cap on the work units spent on all the objects of one run.
pub const MAX_TOTAL_WORK: u64 = 500_000_000;
/// Default wall-clock limit of one run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How often (in work units) the deadline and the cancellation flag are looked at.
const CHECK_EVERY: u64 = 1 << 16;

/// The limits of one substitution run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes produced for one object.
    pub object_bytes: usize,
    /// Bytes produced for the whole run.
    pub total_bytes: usize,
    /// Work units spent on one object.
    pub object_work: u64,
    /// Work units spent on the whole run.
    pub total_work: u64,
    /// Wall-clock limit of the run (none: no deadline).
    pub timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            object_bytes: MAX_OBJECT_BYTES,
            total_bytes: MAX_TOTAL_BYTES,
            object_work: MAX_OBJECT_WORK,
            total_work: MAX_TOTAL_WORK,
            timeout: Some(DEFAULT_TIMEOUT),
        }
    }
}

/// A substitution exceeded its [`Limits`] (or was cancelled).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// The object's substituted text and intermediate values are too large.
    #[error("substitution produces more than {limit} bytes for this object")]
    ObjectBytes {
        /// [`Limits::object_bytes`].
        limit: usize,
    },
    /// The run as a whole produces too many bytes.
    #[error("substitution produces more than {limit} bytes in total")]
    TotalBytes {
        /// [`Limits::total_bytes`].
        limit: usize,
    },
    /// The object's pattern operators need too much work.
    #[error("substitution needs more than {limit} steps for this object")]
    ObjectWork {
        /// [`Limits::object_work`].
        limit: u64,
    },
    /// The run as a whole needs too much work.
    #[error("substitution needs more than {limit} steps in total")]
    TotalWork {
        /// [`Limits::total_work`].
        limit: u64,
    },
    /// The run did not finish in time.
    #[error("substitution did not finish within {}s", .limit.as_secs_f64())]
    Timeout {
        /// [`Limits::timeout`].
        limit: Duration,
    },
    /// The caller gave up waiting (the reconcile was cancelled).
    #[error("substitution was cancelled")]
    Cancelled,
}

/// The running account of one substitution run against its [`Limits`].
#[derive(Debug, Clone)]
pub struct Budget {
    limits: Limits,
    deadline: Option<Instant>,
    cancel: Option<Arc<AtomicBool>>,
    object_bytes: usize,
    total_bytes: usize,
    object_work: u64,
    total_work: u64,
    next_check: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(Limits::default())
    }
}

impl Budget {
    /// A fresh budget; the deadline starts now.
    pub fn new(limits: Limits) -> Self {
        Budget {
            limits,
            deadline: limits.timeout.and_then(|t| Instant::now().checked_add(t)),
            cancel: None,
            object_bytes: 0,
            total_bytes: 0,
            object_work: 0,
            total_work: 0,
            next_check: CHECK_EVERY,
        }
    }

    /// Stops the run (with [`BudgetError::Cancelled`]) once `flag` is set.
    pub fn with_cancel(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = Some(flag);
        self
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Work units spent so far in the whole run.
    pub fn work(&self) -> u64 {
        self.total_work
    }

    /// Bytes produced so far in the whole run.
    pub fn bytes(&self) -> usize {
        self.total_bytes
    }

    /// Starts the account of the next object (and looks at the deadline).
    pub fn begin_object(&mut self) -> Result<(), BudgetError> {
        self.object_bytes = 0;
        self.object_work = 0;
        self.check_time()
    }

    /// Accounts `units` of work.
    pub fn work_units(&mut self, units: u64) -> Result<(), BudgetError> {
        self.object_work = self.object_work.saturating_add(units);
        self.total_work = self.total_work.saturating_add(units);
        if self.object_work > self.limits.object_work {
            return Err(BudgetError::ObjectWork {
                limit: self.limits.object_work,
            });
        }
        if self.total_work > self.limits.total_work {
            return Err(BudgetError::TotalWork {
                limit: self.limits.total_work,
            });
        }
        if self.total_work >= self.next_check {
            self.next_check = self.total_work.saturating_add(CHECK_EVERY);
            self.check_time()?;
        }
        Ok(())
    }

    /// Accounts `len` bytes of output (also one work unit per 16 bytes, so that copying counts
    /// towards the deadline checks).
    pub fn bytes_out(&mut self, len: usize) -> Result<(), BudgetError> {
        self.fits(len)?;
        self.object_bytes += len;
        self.total_bytes += len;
        self.work_units((len / 16) as u64)
    }

    /// Fails when `len` more bytes would not fit, without accounting them: the check made
    /// before building a value whose size is known in advance.
    pub fn fits(&self, len: usize) -> Result<(), BudgetError> {
        if self.object_bytes.saturating_add(len) > self.limits.object_bytes {
            return Err(BudgetError::ObjectBytes {
                limit: self.limits.object_bytes,
            });
        }
        if self.total_bytes.saturating_add(len) > self.limits.total_bytes {
            return Err(BudgetError::TotalBytes {
                limit: self.limits.total_bytes,
            });
        }
        Ok(())
    }

    fn check_time(&self) -> Result<(), BudgetError> {
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return Err(BudgetError::Cancelled);
        }
        match (self.deadline, self.limits.timeout) {
            (Some(deadline), Some(limit)) if Instant::now() >= deadline => {
                Err(BudgetError::Timeout { limit })
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_enforced() {
        let mut b = Budget::new(Limits {
            object_bytes: 10,
            total_bytes: 15,
            object_work: 100,
            total_work: 150,
            timeout: None,
        });
        b.bytes_out(10).unwrap();
        assert_eq!(b.bytes_out(1), Err(BudgetError::ObjectBytes { limit: 10 }));
        b.begin_object().unwrap();
        assert_eq!(b.fits(6), Err(BudgetError::TotalBytes { limit: 15 }));
        b.work_units(100).unwrap();
        assert_eq!(b.work_units(1), Err(BudgetError::ObjectWork { limit: 100 }));
        b.begin_object().unwrap();
        assert_eq!(b.work_units(60), Err(BudgetError::TotalWork { limit: 150 }));
    }

    #[test]
    fn deadline_and_cancellation() {
        let mut b = Budget::new(Limits {
            timeout: Some(Duration::ZERO),
            ..Limits::default()
        });
        assert_eq!(
            b.begin_object(),
            Err(BudgetError::Timeout {
                limit: Duration::ZERO
            })
        );
        let flag = Arc::new(AtomicBool::new(false));
        let mut b = Budget::default().with_cancel(flag.clone());
        b.begin_object().unwrap();
        flag.store(true, Ordering::Relaxed);
        assert_eq!(b.work_units(CHECK_EVERY), Err(BudgetError::Cancelled));
    }
}
