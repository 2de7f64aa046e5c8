//! The stage-error model both controllers share: a reconcile pipeline is a row of named
//! stages, and the first one that fails returns a [`StageError`]. It says which condition to
//! set (with Flux's reason and message), how the failure is retried ([`Severity`]) and, when
//! known, which revision it is about. Turning it into conditions, a requeue and an event is
//! each controller's pure `status` module.

/// How a failed stage affects the result and when the object is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Retried: with backoff, or at the object's retry interval (Ready=False, Reconciling).
    Generic,
    /// Will not succeed without a change of the object's spec: Stalled, no requeue.
    Stalling,
    /// Configuration outside the object (a referenced Secret) is refused: Stalled like
    /// [`Severity::Stalling`], but tried again at the retry interval, since a fix of that
    /// Secret changes nothing the object's watch sees.
    Misconfigured,
    /// A dependency (source, artifact, dependsOn) is not ready: requeued after
    /// `--requeue-dependency`.
    Waiting,
    /// Cut short by a newer trigger (a new source revision while health checks ran):
    /// requeued at once.
    Superseded,
}

impl Severity {
    /// Whether the object is marked Stalled.
    pub fn stalls(self) -> bool {
        matches!(self, Severity::Stalling | Severity::Misconfigured)
    }
}

/// A failed stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageError {
    /// How it is retried.
    pub severity: Severity,
    /// The condition type that carries the failure (`Ready` for a Kustomization; a
    /// GitRepository uses `FetchFailed`, `StorageOperationFailed`, …).
    pub condition: &'static str,
    /// Flux's reason.
    pub reason: &'static str,
    /// The message, as Flux words it.
    pub message: String,
    /// The revision the failure is about (`lastAttemptedRevision`), when known.
    pub revision: Option<String>,
}

impl StageError {
    /// A failure with the given severity.
    pub fn new(
        severity: Severity,
        condition: &'static str,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        StageError {
            severity,
            condition,
            reason,
            message: message.into(),
            revision: None,
        }
    }

    /// A retried failure.
    pub fn generic(
        condition: &'static str,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self::new(Severity::Generic, condition, reason, message)
    }

    /// A failure that only a spec change can fix.
    pub fn stalling(
        condition: &'static str,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self::new(Severity::Stalling, condition, reason, message)
    }

    /// A wait for a dependency.
    pub fn waiting(
        condition: &'static str,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self::new(Severity::Waiting, condition, reason, message)
    }

    /// The same failure, about `revision`.
    pub fn at(mut self, revision: &str) -> Self {
        self.revision = Some(revision.to_string());
        self
    }
}

impl std::fmt::Display for StageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}

impl std::error::Error for StageError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_and_stalling() {
        let e = StageError::generic("Ready", "BuildFailed", "boom").at("main@sha1:abc");
        assert_eq!(e.severity, Severity::Generic);
        assert_eq!(e.revision.as_deref(), Some("main@sha1:abc"));
        assert_eq!(e.to_string(), "BuildFailed: boom");
        assert!(!e.severity.stalls());
        assert!(StageError::stalling("Ready", "X", "y").severity.stalls());
        assert!(Severity::Misconfigured.stalls());
        assert!(!StageError::waiting("Ready", "X", "y").severity.stalls());
    }
}
