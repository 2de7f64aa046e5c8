//! How a run of the stages ends.

use std::collections::BTreeMap;

/// A successful run.
#[derive(Debug)]
pub struct Outcome {
    /// `lastAppliedRevision`.
    pub revision: String,
    /// The history metadata.
    pub counts: BTreeMap<String, String>,
}

/// How a run failed.
#[derive(Debug)]
pub enum StageFailure {
    /// A dependency is missing or not ready: retried after `--requeue-dependency`.
    Dependency { message: String, changed: bool },
    /// A configuration error: no retry until the object changes.
    Stalled {
        reason: String,
        message: String,
        digest: Option<String>,
    },
    /// Apply, garbage collection or health: retried with backoff.
    Failed {
        message: String,
        digest: Option<String>,
    },
    /// The status could not be written.
    Kube(kube::Error),
}
