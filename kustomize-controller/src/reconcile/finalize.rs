//! Deletion of a Kustomization: Flux's `deletionPolicy` rules decide whether the inventory is
//! garbage-collected (and waited for), then the finalizer is dropped. With Argo's
//! `CreateNamespace=true` (opted in), the target namespace we created goes too
//! (`argo_namespace.rs`); the deletion follows Argo's order, keeps `Delete=false` and
//! `helm.sh/resource-policy: keep` objects and runs the PreDelete/PostDelete hooks
//! (`argo_delete.rs`).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use rflux_common::api::kustomization::{DeletionPolicy, Kustomization};
use rflux_common::runtime::conditions::{READY, mark_false};
use rflux_common::runtime::controller::no_requeue;
use rflux_common::runtime::finalizers::{FLUX_FINALIZER, remove_finalizer};
use rflux_common::runtime::{EventType, parse_go_duration};

use super::argo_delete::{
    DeleteHooks, LastWait, RenderError, cleanup_hooks, delete_in_waves, hook_apply_options,
    render_hooks, run_hooks,
};
use super::argo_namespace::{delete_created, deletion_candidate};
use super::context::{
    Context, PRUNE_FAILED_REASON, ReconcileError, event, inventory_refs, patch_status,
};
use crate::argo::{DeleteStage, settings};
use crate::identity::owner_of;
use crate::ssa::wait::{WaitError, wait_for_termination};
use crate::ssa::{
    Action as Change, ChangeSet, DeleteError, ObjectRef, Owner, Resolver, apply_order, delete_all,
};

/// Deletion: garbage-collect per `deletionPolicy`, then drop the finalizer.
pub(super) async fn finalize_deleted(
    ks: &Kustomization,
    api: &Api<Kustomization>,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    if !ks.finalizers().iter().any(|f| f == FLUX_FINALIZER) {
        return Ok(no_requeue());
    }
    let status = ks.status.clone().unwrap_or_default();
    let refs = inventory_refs(status.inventory.as_ref());
    let action = finalize_action(
        ks.spec.deletion_policy(),
        ks.spec.prune,
        ks.spec.is_suspended(),
        refs.is_empty(),
    );
    let timeout = parse_go_duration(ks.spec.timeout.as_deref().unwrap_or(&ks.spec.interval))
        .unwrap_or(Duration::from_secs(300));
    // Argo's CreateNamespace (opted in only): the namespace we created, if the policy
    // garbage-collects.
    let collects = finalize_action(
        ks.spec.deletion_policy(),
        ks.spec.prune,
        ks.spec.is_suspended(),
        false,
    ) != FinalizeAction::Orphan;
    let created_namespace = deletion_candidate(ctx.argo_sync_semantics, ks).filter(|_| collects);
    // Argo's deletion (opted in, not suspended): PreDelete/PostDelete hooks, kept objects and
    // the wave order (`argo_delete.rs`).
    let argo_on = !ks.spec.is_suspended()
        && settings(ctx.argo_sync_semantics, ks.metadata.annotations.as_ref())
            .ok()
            .flatten()
            .is_some();
    // Nothing to delete: no client is needed (a remote whose kubeconfig Secret is gone must not
    // block the deletion).
    if action != FinalizeAction::Orphan || created_namespace.is_some() || argo_on {
        let client = ctx.apply_client(ks).await?;
        let resolver = Resolver::new(client);
        let rev = status.last_applied_revision.clone().unwrap_or_default();
        let owner = owner_of(ks);
        let mut hooks = DeleteHooks::default();
        if argo_on {
            match render_hooks(ctx, ks, timeout).await {
                Ok(h) => hooks = h,
                Err(RenderError::Source(m)) => {
                    let msg = format!(
                        "PreDelete/PostDelete hooks not run: the source is unavailable: {m}"
                    );
                    event(
                        ctx,
                        ks,
                        EventType::Warning,
                        "DeletionHooksSkipped",
                        &msg,
                        &rev,
                    )
                    .await;
                }
                Err(RenderError::Build(m)) => {
                    let msg = format!(
                        "unable to render the manifests for the PreDelete/PostDelete hooks: {m}"
                    );
                    return block(ctx, ks, api, &msg, &rev).await;
                }
            }
        }
        let hook_opts = hook_apply_options(ctx, ks, owner.clone(), timeout);
        if let Err(m) = run_hooks(
            &resolver,
            &hooks.pre,
            DeleteStage::PreDelete,
            &hook_opts,
            timeout,
        )
        .await
        {
            return block(ctx, ks, api, &m, &rev).await;
        }
        let outcome = if argo_on && action != FinalizeAction::Orphan {
            let last = last_wait(action, !hooks.post.is_empty());
            delete_in_waves(&resolver, &refs, &owner, last, timeout)
                .await
                .map(|(changes, termination_error)| FinalizeOutcome {
                    changes,
                    termination_error,
                })
        } else {
            finalize(&resolver, &refs, &owner, action, timeout).await
        };
        match outcome {
            Ok(out) => {
                if out.changes.has_changes() {
                    event(
                        ctx,
                        ks,
                        EventType::Normal,
                        "Progressing",
                        &out.changes.event_message(),
                        &rev,
                    )
                    .await;
                }
                if let Some(e) = out.termination_error {
                    let msg = format!("failed to wait for resources termination: {e}");
                    event(ctx, ks, EventType::Warning, "TerminationFailed", &msg, &rev).await;
                }
            }
            Err(e) => return Err(prune_failed(ctx, ks, e, &rev).await),
        }
        if let Err(m) = run_hooks(
            &resolver,
            &hooks.post,
            DeleteStage::PostDelete,
            &hook_opts,
            timeout,
        )
        .await
        {
            return block(ctx, ks, api, &m, &rev).await;
        }
        if !hooks.is_empty() {
            cleanup_hooks(&resolver, &hooks, &owner).await;
        }
        if let Some(name) = &created_namespace
            && let Err(e) = delete_created(ctx, ks, &resolver, name, &refs, timeout, &rev).await
        {
            return Err(prune_failed(ctx, ks, e, &rev).await);
        }
    }
    ctx.forget_owner(ks);
    remove_finalizer(api, ks, FLUX_FINALIZER).await?;
    Ok(no_requeue())
}

/// A garbage-collection failure: a Warning event, and the error (the finalizer is kept).
async fn prune_failed(
    ctx: &Context,
    ks: &Kustomization,
    e: DeleteError,
    rev: &str,
) -> ReconcileError {
    event(
        ctx,
        ks,
        EventType::Warning,
        PRUNE_FAILED_REASON,
        &e.to_string(),
        rev,
    )
    .await;
    ReconcileError::Finalize(e)
}

/// The deletion waits (a deletion hook failed, or its manifests could not be rendered):
/// `Ready=False` with `message`, a Warning event, the finalizer kept, retried after
/// `spec.retryInterval`.
async fn block(
    ctx: &Context,
    ks: &Kustomization,
    api: &Api<Kustomization>,
    message: &str,
    rev: &str,
) -> Result<Action, ReconcileError> {
    let mut status = ks.status.clone().unwrap_or_default();
    let mut conds = status.conditions.take().unwrap_or_default();
    mark_false(
        &mut conds,
        READY,
        DELETION_HOOK_FAILED_REASON,
        message,
        ks.metadata.generation,
        Timestamp::now(),
    );
    status.conditions = Some(conds);
    if let Err(e) = patch_status(api, &ks.name_any(), &status).await {
        tracing::warn!(error = %e, "unable to record the deletion failure");
    }
    event(
        ctx,
        ks,
        EventType::Warning,
        DELETION_HOOK_FAILED_REASON,
        message,
        rev,
    )
    .await;
    let retry = parse_go_duration(ks.spec.retry_interval()).unwrap_or(Duration::from_secs(60));
    Ok(Action::requeue(retry))
}

/// The reason of `Ready=False` while a deletion hook blocks the deletion.
pub const DELETION_HOOK_FAILED_REASON: &str = "DeletionHookFailed";

/// What the finalizer does with the applied objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizeAction {
    /// Leave them.
    Orphan,
    /// Delete them.
    Delete,
    /// Delete them and wait until they are gone.
    DeleteAndWait,
}

/// Flux's finalizer rule: delete only when not suspended, the inventory is non-empty, and the
/// policy is `Delete`/`WaitForTermination`, or `MirrorPrune` with `prune: true`.
pub fn finalize_action(
    policy: DeletionPolicy,
    prune: bool,
    suspended: bool,
    inventory_empty: bool,
) -> FinalizeAction {
    if suspended || inventory_empty {
        return FinalizeAction::Orphan;
    }
    match policy {
        DeletionPolicy::Delete => FinalizeAction::Delete,
        DeletionPolicy::WaitForTermination => FinalizeAction::DeleteAndWait,
        DeletionPolicy::MirrorPrune if prune => FinalizeAction::Delete,
        DeletionPolicy::MirrorPrune | DeletionPolicy::Orphan => FinalizeAction::Orphan,
    }
}

/// The last wave's rule for `action`, `post_hooks`: PostDelete hooks follow.
fn last_wait(action: FinalizeAction, post_hooks: bool) -> LastWait {
    if post_hooks {
        LastWait::Require
    } else if action == FinalizeAction::DeleteAndWait {
        LastWait::Report
    } else {
        LastWait::No
    }
}

/// What the finalizer did.
#[derive(Debug)]
pub struct FinalizeOutcome {
    /// Deleted and skipped objects (empty when orphaned).
    pub changes: ChangeSet,
    /// For `WaitForTermination`: the wait failed (Flux logs it, emits
    /// `failed to wait for resources termination`, and removes the finalizer anyway).
    pub termination_error: Option<WaitError>,
}

/// The finalizer's garbage collection: deletes every inventory object owned by `owner`
/// according to `action`, waiting for termination when asked (`timeout`). A deletion error is
/// returned (the finalizer must be kept and the deletion retried).
pub async fn finalize(
    resolver: &Resolver,
    inventory: &[ObjectRef],
    owner: &Owner,
    action: FinalizeAction,
    timeout: std::time::Duration,
) -> Result<FinalizeOutcome, DeleteError> {
    if action == FinalizeAction::Orphan {
        return Ok(FinalizeOutcome {
            changes: ChangeSet::default(),
            termination_error: None,
        });
    }
    let mut ordered = inventory.to_vec();
    ordered.sort_by(apply_order);
    let changes = delete_all(resolver, &ordered, owner).await?;
    let mut termination_error = None;
    if action == FinalizeAction::DeleteAndWait {
        let deleted: Vec<ObjectRef> = changes
            .entries
            .iter()
            .filter(|e| e.action == Change::Deleted)
            .map(|e| e.object.clone())
            .collect();
        if let Err(e) = wait_for_termination(resolver, &deleted, timeout).await {
            termination_error = Some(e);
        }
    }
    Ok(FinalizeOutcome {
        changes,
        termination_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_wave_is_waited_for_when_post_delete_hooks_follow() {
        assert_eq!(last_wait(FinalizeAction::Delete, true), LastWait::Require);
        assert_eq!(
            last_wait(FinalizeAction::DeleteAndWait, true),
            LastWait::Require
        );
        assert_eq!(
            last_wait(FinalizeAction::DeleteAndWait, false),
            LastWait::Report
        );
        assert_eq!(last_wait(FinalizeAction::Delete, false), LastWait::No);
    }

    #[test]
    fn finalizer_policies() {
        use DeletionPolicy::*;
        assert_eq!(
            finalize_action(MirrorPrune, true, false, false),
            FinalizeAction::Delete
        );
        assert_eq!(
            finalize_action(MirrorPrune, false, false, false),
            FinalizeAction::Orphan
        );
        assert_eq!(
            finalize_action(Delete, false, false, false),
            FinalizeAction::Delete
        );
        assert_eq!(
            finalize_action(WaitForTermination, false, false, false),
            FinalizeAction::DeleteAndWait
        );
        assert_eq!(
            finalize_action(Orphan, true, false, false),
            FinalizeAction::Orphan
        );
        assert_eq!(
            finalize_action(Delete, true, true, false),
            FinalizeAction::Orphan
        );
        assert_eq!(
            finalize_action(Delete, true, false, true),
            FinalizeAction::Orphan
        );
    }
}
