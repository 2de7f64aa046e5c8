//! Garbage collection of stale objects and the finalizer's deletion policy.

use kube::api::{DeleteParams, PropagationPolicy};
use rflux_common::api::kustomization::DeletionPolicy;
use serde_json::Value;

use crate::apply::{
    Action, ChangeSet, NAME_LABEL, NAMESPACE_LABEL, Owner, PRUNE_KEY, Resolver, has_meta_value,
    is_ignored,
};
use crate::inventory::ObjectRef;

/// Deletion failures, aggregated like Flux (`delete failed, errors: <e1>;<e2>;`).
#[derive(Debug, thiserror::Error)]
#[error("delete failed, errors: {}", .errors.iter().map(|e| format!("{e};")).collect::<String>())]
pub struct PruneError {
    /// One message per failed object.
    pub errors: Vec<String>,
    /// What was done before and despite the failures.
    pub changes: ChangeSet,
    /// Objects whose deletion was not confirmed (merge them back into the inventory).
    pub not_deleted: Vec<ObjectRef>,
}

/// Whether a live object may be garbage-collected by `owner`: both owner labels match and it
/// does not carry `prune: disabled`, `reconcile: disabled` or `ssa: Ignore`.
pub fn may_delete(live: &Value, owner: &Owner) -> bool {
    let label = |k: &str| {
        live.pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
    };
    label(NAME_LABEL) == Some(owner.name.as_str())
        && label(NAMESPACE_LABEL) == Some(owner.namespace.as_str())
        && !has_meta_value(live, PRUNE_KEY, "disabled")
        && !is_ignored(live)
}

/// Deletes `stale` objects (given in apply order) in reverse order, one by one, with background
/// propagation. Missing objects count as deleted; objects not owned by `owner` or opted out
/// are skipped.
pub async fn prune(
    resolver: &Resolver,
    stale: &[ObjectRef],
    owner: &Owner,
) -> Result<ChangeSet, PruneError> {
    let mut changes = ChangeSet::default();
    let mut errors = Vec::new();
    let mut not_deleted = Vec::new();
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    for obj in stale.iter().rev() {
        let api = match resolver.api(obj).await {
            Ok(api) => api,
            Err(e) => {
                errors.push(e.to_string());
                not_deleted.push(obj.clone());
                continue;
            }
        };
        let live = match api.get_opt(&obj.name).await {
            Ok(None) => {
                changes.push(obj.clone(), Action::Deleted);
                continue;
            }
            Ok(Some(live)) => serde_json::to_value(&live).unwrap_or(Value::Null),
            Err(e) => {
                errors.push(format!("{} query failed: {e}", obj.subject()));
                not_deleted.push(obj.clone());
                continue;
            }
        };
        if !may_delete(&live, owner) {
            changes.push(obj.clone(), Action::Skipped);
            continue;
        }
        match api.delete(&obj.name, &dp).await {
            Ok(_) => changes.push(obj.clone(), Action::Deleted),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                changes.push(obj.clone(), Action::Deleted);
            }
            Err(e) => {
                errors.push(format!("{} delete failed: {e}", obj.subject()));
                not_deleted.push(obj.clone());
            }
        }
    }
    if errors.is_empty() {
        if changes.has_changes() {
            tracing::info!(output = %changes.event_message(), "garbage collection completed");
        }
        Ok(changes)
    } else {
        Err(PruneError {
            errors,
            changes,
            not_deleted,
        })
    }
}

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

/// What the finalizer did.
#[derive(Debug)]
pub struct FinalizeOutcome {
    /// Deleted and skipped objects (empty when orphaned).
    pub changes: ChangeSet,
    /// For `WaitForTermination`: the wait failed (Flux logs it, emits
    /// `failed to wait for resources termination`, and removes the finalizer anyway).
    pub termination_error: Option<crate::health::HealthError>,
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
) -> Result<FinalizeOutcome, PruneError> {
    if action == FinalizeAction::Orphan {
        return Ok(FinalizeOutcome {
            changes: ChangeSet::default(),
            termination_error: None,
        });
    }
    let mut ordered = inventory.to_vec();
    ordered.sort_by(crate::inventory::apply_order);
    let changes = prune(resolver, &ordered, owner).await?;
    let mut termination_error = None;
    if action == FinalizeAction::DeleteAndWait {
        let deleted: Vec<ObjectRef> = changes
            .entries
            .iter()
            .filter(|e| e.action == Action::Deleted)
            .map(|e| e.object.clone())
            .collect();
        if let Err(e) = crate::health::wait_for_termination(resolver, &deleted, timeout).await {
            termination_error = Some(e);
        }
    }
    Ok(FinalizeOutcome {
        changes,
        termination_error,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ownership_and_opt_outs() {
        let owner = Owner {
            name: "app".into(),
            namespace: "flux-system".into(),
        };
        let owned =
            json!({"metadata": {"labels": {NAME_LABEL: "app", NAMESPACE_LABEL: "flux-system"}}});
        assert!(may_delete(&owned, &owner));
        let other = json!({"metadata": {"labels": {NAME_LABEL: "app", NAMESPACE_LABEL: "other"}}});
        assert!(!may_delete(&other, &owner));
        assert!(!may_delete(&json!({"metadata": {}}), &owner));
        let mut disabled = owned.clone();
        disabled["metadata"]["annotations"] = json!({PRUNE_KEY: "Disabled"});
        assert!(!may_delete(&disabled, &owner));
        let mut ignored = owned.clone();
        ignored["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/ssa"] = json!("ignore");
        assert!(!may_delete(&ignored, &owner));
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

    #[test]
    fn error_text() {
        let e = PruneError {
            errors: vec!["a failed".into(), "b failed".into()],
            changes: ChangeSet::default(),
            not_deleted: vec![],
        };
        assert_eq!(e.to_string(), "delete failed, errors: a failed;b failed;");
    }
}
