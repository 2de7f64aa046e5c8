//! GitRepository reconciliation: reference selection, semver constraints, credentials,
//! checkout, status transitions and the reconcile pipeline.

pub mod auth;
pub mod checkout;
pub mod reconcile;
pub mod refs;
pub mod semver;
pub mod status;

pub use reconcile::{CONTROLLER_NAME, Context, KIND_DIR, ReconcileError, reconcile};
