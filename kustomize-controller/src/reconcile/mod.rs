//! The Kustomization reconciler. [`reconcile`] handles deletion (`finalize.rs`) and suspension,
//! then runs the named stages of [`pipeline`] (source → dependsOn → fetch → build → substitute
//! → apply → prune → health) and turns the outcome into the status, requeue and event with the
//! pure [`status`] module.
//!
//! | file | what |
//! |---|---|
//! | `pipeline.rs` | the stages, in order |
//! | `source.rs` | `sourceRef`, `dependsOn` (with CEL `readyExpr`), the cross-namespace check |
//! | `client.rs` | impersonation and remote kubeconfigs |
//! | `spec.rs` | build overrides, refused fields, durations, apply options, health targets |
//! | `status.rs` | outcome → conditions, history, requeue, event (pure) |
//! | `finalize.rs` | `deletionPolicy` and the finalizer |
//! | `triggers.rs` | new-revision triggers that cancel health checks |
//! | `prune_guard.rs` | the opt-in mass-deletion guard (`prune-limit`, `prune-confirm`) |
//! | `ownership.rs` | ownership conflicts: the claim check and the `OwnershipConflict` condition |
//! | `waves.rs` | Argo CD sync waves: the opt-in and the plan (issue 17) |
//! | `waves_exec.rs` | Argo CD sync waves: the wave-by-wave apply and prune |
//! | `argo_namespace.rs` | Argo CD `CreateNamespace=true`: create, keep in sync, delete on finalize |

mod argo_delete;
mod argo_namespace;
pub mod build;
mod client;
mod context;
mod finalize;
mod hooks;
pub mod ownership;
mod pipeline;
pub mod progress;
pub mod prune_guard;
pub mod source;
pub mod spec;
pub mod status;
#[cfg(test)]
mod test_fixtures;
pub mod triggers;
pub mod waves;
mod waves_exec;

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use rflux_common::api::kustomization::Kustomization;
use rflux_common::runtime::conditions as cond;
use rflux_common::runtime::controller::{no_requeue, requeue_dependency, requeue_success};
use rflux_common::runtime::finalizers::{FLUX_FINALIZER, add_finalizer};

pub use client::{
    ClientError, impersonation_user, kubeconfig_from_secret, refuse_file_references, remote_config,
};
pub use context::{
    ACCESS_DENIED_REASON, ARTIFACT_FAILED_REASON, BUILD_FAILED_REASON, CONTROLLER_NAME, Context,
    DEPENDENCY_NOT_READY_REASON, HEALTH_CHECK_FAILED_REASON, PRUNE_FAILED_REASON,
    REVISION_ANNOTATION, ReconcileError,
};
use context::{event, patch_status};
pub use finalize::{FinalizeAction, FinalizeOutcome, finalize, finalize_action};
use pipeline::Pipeline;
use status::Requeue;

/// Reconciles one Kustomization (the function given to `run_controller`).
pub async fn reconcile(
    obj: Arc<Kustomization>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let ks = obj.as_ref();
    let ns = ks.namespace().ok_or(ReconcileError::NoNamespace)?;
    let api: Api<Kustomization> = Api::namespaced(ctx.client.clone(), &ns);
    if ks.meta().deletion_timestamp.is_some() {
        let _slot = ctx.work_slots.clone().acquire_owned().await.ok();
        return finalize::finalize_deleted(ks, &api, &ctx).await;
    }
    if !ks.finalizers().iter().any(|f| f == FLUX_FINALIZER) {
        add_finalizer(&api, ks, FLUX_FINALIZER).await?;
    }
    if ks.spec.is_suspended() {
        tracing::info!("Reconciliation is suspended for this object");
        return Ok(no_requeue());
    }
    let start = Instant::now();
    let requested = cond::requested_at(ks.meta().annotations.as_ref()).map(str::to_string);
    let _busy = ctx
        .tracker
        .as_ref()
        .map(|t| t.begin((ns.clone(), ks.name_any())));

    let mut pipeline = Pipeline::new(ks, &ctx, &api);
    let outcome = pipeline.run().await;
    let Pipeline {
        status,
        conds,
        progress_writer,
        ..
    } = pipeline;
    // No progress write may land after (or race) the final status.
    progress_writer.finish().await;
    let done = status::conclude(
        ks,
        status,
        conds,
        outcome,
        requested,
        Timestamp::now(),
        start.elapsed(),
    );
    if done.write {
        patch_status(&api, &ks.name_any(), &done.status).await?;
    }
    let ev = &done.event;
    if ev.quiet {
        tracing::info!(revision = %ev.revision, reason = %ev.reason, "{}", ev.message);
    } else {
        event(&ctx, ks, ev.kind, &ev.reason, &ev.message, &ev.revision).await;
    }
    Ok(match done.requeue {
        Requeue::Interval(d) => requeue_success(d, ctx.jitter_percentage),
        Requeue::Dependency => requeue_dependency(ctx.requeue_dependency),
        Requeue::Retry(d) => Action::requeue(d),
        Requeue::Never => no_requeue(),
        Requeue::Now => Action::requeue(std::time::Duration::ZERO),
    })
}
