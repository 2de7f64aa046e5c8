//! The OCIRepository reconcile: the shared source reconcile (`crate::source::reconcile`) around
//! the pipeline of named stages (`stages.rs`).

use std::sync::Arc;

use kube::runtime::controller::Action;
use rflux_common::api::ocirepository::{OciRepository, OciRepositoryStatus};

use super::stages::pipeline;
use crate::source::{Context, ReconcileError, SourceObject, reconcile_source};

pub use super::run::KIND_DIR;

impl SourceObject for OciRepository {
    type Status = OciRepositoryStatus;
    const KIND_DIR: &'static str = KIND_DIR;
    const NULLABLE_STATUS: &'static [&'static str] =
        &["artifact", "url", "observedIgnore", "observedLayerSelector"];

    fn status(&self) -> Option<&OciRepositoryStatus> {
        self.status.as_ref()
    }
    fn is_suspended(&self) -> bool {
        self.spec.is_suspended()
    }
    fn interval(&self) -> &str {
        &self.spec.interval
    }
}

/// Reconciles one OCIRepository.
pub async fn reconcile(
    obj: Arc<OciRepository>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    reconcile_source(obj, ctx, |run, status| Box::pin(pipeline(run, status))).await
}
