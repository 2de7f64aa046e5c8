//! The GitRepository reconcile: the shared source reconcile (`crate::source::reconcile`) around
//! the pipeline of named stages (`stages.rs`).

use std::sync::Arc;

use kube::runtime::controller::Action;
use rflux_common::api::gitrepository::{GitRepository, GitRepositoryStatus};
use rflux_common::runtime::conditions::GIT_REPOSITORY_SUMMARY;

use super::stages::{Done, pipeline};
use super::status as st;
pub use crate::source::{CONTROLLER_NAME, Context, ReconcileError};
use crate::source::{SourceObject, reconcile_source};

/// Storage directory (lowercase kind).
pub const KIND_DIR: &str = "gitrepository";

crate::impl_source_status!(
    GitRepositoryStatus,
    GIT_REPOSITORY_SUMMARY,
    &[
        st::FETCH_FAILED,
        st::STORAGE_OPERATION_FAILED,
        st::INCLUDE_UNAVAILABLE
    ]
);

impl SourceObject for GitRepository {
    type Status = GitRepositoryStatus;
    const KIND_DIR: &'static str = KIND_DIR;
    const NULLABLE_STATUS: &'static [&'static str] = &[
        "artifact",
        "includedArtifacts",
        "observedIgnore",
        "observedRecurseSubmodules",
        "observedInclude",
        "observedSparseCheckout",
        "sourceVerificationMode",
    ];

    fn status(&self) -> Option<&GitRepositoryStatus> {
        self.status.as_ref()
    }
    fn is_suspended(&self) -> bool {
        self.spec.is_suspended()
    }
    fn interval(&self) -> &str {
        &self.spec.interval
    }
}

/// Reconciles one GitRepository.
pub async fn reconcile(
    obj: Arc<GitRepository>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    reconcile_source(obj, ctx, |run, status| {
        Box::pin(async move {
            Ok(match pipeline(run, status).await? {
                Done::Unchanged => None,
                Done::Built { subject } => Some(st::new_artifact_message(&subject)),
            })
        })
    })
    .await
}
