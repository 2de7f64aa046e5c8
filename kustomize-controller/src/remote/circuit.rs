//! The per-cluster circuit: after a connection failure, the reconciles of that cluster fail
//! fast (no network wait, no work slot held on a dead cluster) until a probe finds the cluster
//! back. The probe runs after an exponential back-off (2 s, doubling, capped at 2 min); only a
//! successful probe closes the circuit. Pure: every function takes the time it is called at.

use std::time::{Duration, Instant};

/// The first back-off after a connection failure.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(2);
/// The longest back-off between two probes of an unreachable cluster.
pub const MAX_BACKOFF: Duration = Duration::from_secs(120);

/// The back-off after `failures` consecutive failures (1: [`FIRST_BACKOFF`]).
pub fn backoff(failures: u32, first: Duration, cap: Duration) -> Duration {
    let shift = failures.saturating_sub(1).min(16);
    first.saturating_mul(1u32 << shift).min(cap)
}

/// Why a cluster is not tried: the cause of the last failure and the time to the next probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Down {
    /// The error of the last failed request or probe.
    pub cause: String,
    /// Time left until the next probe.
    pub retry_in: Duration,
}

/// The state of one cluster's circuit.
#[derive(Debug)]
pub struct Circuit {
    first: Duration,
    cap: Duration,
    /// Consecutive failures (0: closed).
    failures: u32,
    /// The next probe (set while open).
    probe_at: Option<Instant>,
    cause: String,
}

impl Default for Circuit {
    fn default() -> Self {
        Circuit::new(FIRST_BACKOFF, MAX_BACKOFF)
    }
}

impl Circuit {
    /// A closed circuit with the given back-off bounds.
    pub fn new(first: Duration, cap: Duration) -> Self {
        Circuit {
            first,
            cap,
            failures: 0,
            probe_at: None,
            cause: String::new(),
        }
    }

    /// `Err` while the circuit is open: the reconcile fails at once.
    pub fn check(&self, now: Instant) -> Result<(), Down> {
        match self.probe_at {
            None => Ok(()),
            Some(at) => Err(Down {
                cause: self.cause.clone(),
                retry_in: at.saturating_duration_since(now),
            }),
        }
    }

    /// Whether the circuit is open.
    pub fn is_open(&self) -> bool {
        self.probe_at.is_some()
    }

    /// A connection failure seen by a request or a watch: opens a closed circuit (the probe is
    /// due after the first back-off); an open one is left as it is, so requests failing while
    /// it is open do not push the probe further away.
    pub fn fail(&mut self, now: Instant, cause: &str) -> Option<Duration> {
        if self.is_open() {
            return None;
        }
        self.failures = 1;
        let wait = backoff(self.failures, self.first, self.cap);
        self.probe_at = Some(now + wait);
        self.cause = cause.to_string();
        Some(wait)
    }

    /// A failed probe: the circuit stays open and the back-off doubles (up to the cap).
    /// Returns the wait until the next probe.
    pub fn probe_failed(&mut self, now: Instant, cause: &str) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let wait = backoff(self.failures, self.first, self.cap);
        self.probe_at = Some(now + wait);
        self.cause = cause.to_string();
        wait
    }

    /// A successful probe: closes the circuit. Returns whether it was open.
    pub fn succeed(&mut self) -> bool {
        let was_open = self.is_open();
        self.failures = 0;
        self.probe_at = None;
        self.cause.clear();
        was_open
    }

    /// Consecutive failures (0: closed).
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// When the next probe is due (`None` when closed).
    pub fn probe_at(&self) -> Option<Instant> {
        self.probe_at
    }
}

/// Whether a client error means the cluster could not be reached (connect refused or timed
/// out, connection reset, TLS handshake, request timeout), as opposed to an answer from it (API
/// errors never count).
pub fn is_unreachable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(_) => false,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        other => text_is_unreachable(&error_chain(other)),
    }
}

/// The error and its causes, one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// Whether an error text (a stage error's message, made from the client's error and its causes)
/// says the cluster could not be reached. The apply layer keeps only the text of its errors.
pub fn text_is_unreachable(text: &str) -> bool {
    const MARKS: &[&str] = &[
        "connection refused",
        "tcp connect error",
        "client error (connect)",
        "error trying to connect",
        "connection reset",
        "no route to host",
        "network is unreachable",
        "host is unreachable",
        "timed out",
        "deadline has elapsed",
        "broken pipe",
        "connection closed before message completed",
    ];
    let lower = text.to_ascii_lowercase();
    MARKS.iter().any(|m| lower.contains(m))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let b = |n| backoff(n, FIRST_BACKOFF, MAX_BACKOFF).as_secs();
        assert_eq!(
            (1..=9).map(b).collect::<Vec<_>>(),
            [2, 4, 8, 16, 32, 64, 120, 120, 120]
        );
        assert_eq!(b(u32::MAX), 120);
    }

    #[test]
    fn open_until_a_probe_succeeds() {
        let t0 = Instant::now();
        let mut c = Circuit::new(Duration::from_millis(100), Duration::from_millis(350));
        assert!(c.check(t0).is_ok());
        assert_eq!(c.fail(t0, "refused"), Some(Duration::from_millis(100)));
        let down = c.check(t0 + Duration::from_millis(30)).unwrap_err();
        assert_eq!(down.cause, "refused");
        assert_eq!(down.retry_in, Duration::from_millis(70));
        // More failing requests while open do not move the probe.
        assert_eq!(c.fail(t0 + Duration::from_millis(50), "again"), None);
        assert_eq!(c.probe_at(), Some(t0 + Duration::from_millis(100)));
        // The back-off elapsing alone does not close it: only a probe does.
        let late = c.check(t0 + Duration::from_secs(5)).unwrap_err();
        assert_eq!(late.retry_in, Duration::ZERO);
        // Failed probes grow the back-off to the cap.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(c.probe_failed(t1, "still"), Duration::from_millis(200));
        assert_eq!(c.probe_failed(t1, "still"), Duration::from_millis(350));
        assert_eq!(c.probe_failed(t1, "still"), Duration::from_millis(350));
        assert_eq!(c.probe_at(), Some(t1 + Duration::from_millis(350)));
        assert_eq!(c.check(t1).unwrap_err().cause, "still");
        assert!(c.succeed());
        assert!(c.check(t1).is_ok());
        assert!(!c.succeed(), "already closed");
        // A new failure starts from the first back-off again.
        assert_eq!(c.fail(t1, "again"), Some(Duration::from_millis(100)));
    }

    #[test]
    fn unreachable_texts() {
        for t in [
            "ConfigMap/a/b apply failed: client error (Connect): tcp connect error: Connection refused (os error 111)",
            "discovery failed: error trying to connect: operation timed out",
            "ServiceError: deadline has elapsed",
        ] {
            assert!(text_is_unreachable(t), "{t}");
        }
        for t in [
            "ConfigMap/a/b dry-run failed (Invalid): data: Invalid value",
            "forbidden: User \"x\" cannot patch resource",
        ] {
            assert!(!text_is_unreachable(t), "{t}");
        }
    }
}
