//! What the source kinds share: the reconciler's context, the reconcile around each kind's
//! pipeline, and the status transitions.

pub mod context;
pub mod reconcile;
pub mod status;
mod storage_stage;

pub use context::{CONTROLLER_NAME, Context, SecretData, read_secret, record, secret_data};
pub use reconcile::{Built, ReconcileError, Run, SourceObject, reconcile_source};
pub use storage_stage::reconcile_storage;
