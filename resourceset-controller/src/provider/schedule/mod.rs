//! `spec.schedule` of a ResourceSetInputProvider (reference §12.4): when a reconcile may run,
//! the next window (`status.nextSchedule`), and whether the next interval falls in a window.
//! Pure: every function takes the time it reasons about.

pub mod cron;

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use rflux_common::api::resourcesetinputprovider::{NextSchedule, Schedule};
use rflux_common::runtime::parse_go_duration;

pub use self::cron::{Cron, CronError};

/// Why `spec.schedule` was refused (the message of the `InvalidSchedule` condition).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The window is not a Go duration.
    #[error("failed to validate schedule[{index}]: invalid window {window:?}: {why}")]
    Window {
        /// Position in `spec.schedule`.
        index: usize,
        /// The window as written.
        window: String,
        /// Why it does not parse.
        why: String,
    },
    /// A non-zero window shorter than twice the timeout.
    #[error(
        "failed to validate schedule[{index}]: a non-zero window ({window}) must always be at least twice the timeout ({timeout})"
    )]
    WindowTooShort {
        /// Position in `spec.schedule`.
        index: usize,
        /// The window (Go format).
        window: String,
        /// The timeout (Go format).
        timeout: String,
    },
    /// The cron expression or time zone does not parse.
    #[error(
        "failed to validate schedule[{index}]: failed to parse cron spec '{cron}'{tz}: {source}"
    )]
    Cron {
        /// Position in `spec.schedule`.
        index: usize,
        /// The expression.
        cron: String,
        /// ` with timezone '<tz>'`, or empty.
        tz: String,
        /// The parse error.
        #[source]
        source: CronError,
    },
    /// The expression parses but never triggers within five years (`0 0 30 2 *`).
    #[error(
        "failed to validate schedule[{index}]: cron spec '{cron}' has no trigger in the next five years"
    )]
    NeverTriggers {
        /// Position in `spec.schedule`.
        index: usize,
        /// The expression.
        cron: String,
    },
}

struct Entry {
    spec: Schedule,
    cron: Cron,
    window: Duration,
}

/// The parsed schedules of one provider and its reconcile timeout.
pub struct Scheduler {
    entries: Vec<Entry>,
    timeout: Duration,
}

impl Scheduler {
    /// Parses the schedules; `None` when there are none (any time is fine). `now` is used to
    /// refuse expressions that never trigger.
    pub fn new(
        schedules: &[Schedule],
        timeout: Duration,
        now: Timestamp,
    ) -> Result<Option<Scheduler>, ScheduleError> {
        if schedules.is_empty() {
            return Ok(None);
        }
        let mut entries = Vec::with_capacity(schedules.len());
        for (index, spec) in schedules.iter().enumerate() {
            let window = parse_go_duration(spec.window()).map_err(|e| ScheduleError::Window {
                index,
                window: spec.window().to_string(),
                why: e.to_string(),
            })?;
            if !window.is_zero() && window < timeout.saturating_mul(2) {
                return Err(ScheduleError::WindowTooShort {
                    index,
                    window: cron::go_duration(window),
                    timeout: cron::go_duration(timeout),
                });
            }
            let tz = spec.time_zone();
            let cron = Cron::parse(&spec.cron, tz).map_err(|source| ScheduleError::Cron {
                index,
                cron: spec.cron.clone(),
                tz: if tz.is_empty() {
                    String::new()
                } else {
                    format!(" with timezone '{tz}'")
                },
                source,
            })?;
            if cron.next(now).is_none() {
                return Err(ScheduleError::NeverTriggers {
                    index,
                    cron: spec.cron.clone(),
                });
            }
            entries.push(Entry {
                spec: spec.clone(),
                cron,
                window,
            });
        }
        Ok(Some(Scheduler { entries, timeout }))
    }

    /// Whether a reconcile may start at `now`: some schedule has no window, or `now + timeout`
    /// is before the end of the window opened by its last trigger.
    pub fn should_reconcile(&self, now: Timestamp) -> bool {
        let deadline = add(now, self.timeout);
        self.entries
            .iter()
            .any(|e| e.window.is_zero() || self.in_window(e, now, deadline))
    }

    /// Whether a reconcile planned at `at` (the next interval) would fall in a window; schedules
    /// without a window do not count.
    pub fn should_schedule_interval(&self, at: Timestamp) -> bool {
        let deadline = add(at, self.timeout);
        self.entries
            .iter()
            .any(|e| !e.window.is_zero() && self.in_window(e, at, deadline))
    }

    fn in_window(&self, e: &Entry, at: Timestamp, deadline: Timestamp) -> bool {
        e.cron
            .previous(at)
            .is_some_and(|prev| deadline < add(prev, e.window))
    }

    /// The earliest next trigger of all schedules after `now`, as `status.nextSchedule`.
    pub fn next(&self, now: Timestamp) -> Option<NextSchedule> {
        self.entries
            .iter()
            .filter_map(|e| e.cron.next(now).map(|t| (t, e)))
            .min_by_key(|(t, _)| *t)
            .map(|(when, e)| NextSchedule {
                cron: e.spec.cron.clone(),
                time_zone: e.spec.time_zone.clone(),
                window: e.spec.window.clone(),
                when: Time(when),
            })
    }
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
