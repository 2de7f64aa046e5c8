//! GitRepository reconciliation: reference selection, semver constraints, credentials,
//! checkout, status transitions and the reconcile pipeline.

pub mod auth;
pub mod checkout;
pub mod controller;
pub mod limits;
pub mod reconcile;
pub mod refs;
pub mod semver;
mod stages;
pub mod status;
pub mod verify;

pub use controller::run_gitrepository_controller;
pub use reconcile::{CONTROLLER_NAME, Context, KIND_DIR, ReconcileError, reconcile};
