//! Deleting applied objects: garbage collection of what is no longer desired and the owner's
//! finalizer, with Flux's ownership and opt-out rules and its error texts.

use kube::api::{DeleteParams, PropagationPolicy};
use serde_json::Value;

use super::changeset::{Action, ChangeSet};
use super::object::ObjectRef;
use super::owner::{Owner, has_meta_value};
use super::resolver::{Resolver, error_text};

/// Deletion failures, aggregated like Flux (`delete failed, errors: <e1>;<e2>;`).
#[derive(Debug, thiserror::Error)]
#[error("delete failed, errors: {}", .errors.iter().map(|e| format!("{e};")).collect::<String>())]
pub struct DeleteError {
    /// One message per failed object.
    pub errors: Vec<String>,
    /// What was done before and despite the failures.
    pub changes: ChangeSet,
    /// Objects whose deletion was not confirmed (merge them back into the inventory).
    pub not_deleted: Vec<ObjectRef>,
}

/// Whether a live object may be garbage-collected by `owner`: both owner labels match and it
/// does not carry `<group>/prune: disabled`, `<group>/reconcile: disabled` or `<group>/ssa: Ignore`.
pub fn may_delete(live: &Value, owner: &Owner) -> bool {
    owner.owns(live)
        && !has_meta_value(live, &owner.prune_key(), "disabled")
        && !owner.is_ignored(live)
}

/// How many times an object that changed between its read and its delete is read again.
const DELETE_ATTEMPTS: usize = 3;

/// Reads `obj`, checks that `owner` may delete it, and deletes it with the read uid and
/// resourceVersion as preconditions: an object another owner took over (or anyone changed)
/// after the read is read and judged again, never deleted on a stale verdict.
async fn delete_one(
    api: &kube::Api<kube::core::DynamicObject>,
    obj: &ObjectRef,
    owner: &Owner,
) -> Result<Action, String> {
    for _ in 0..DELETE_ATTEMPTS {
        let live = match api.get_opt(&obj.name).await {
            Ok(None) => return Ok(Action::Deleted),
            Ok(Some(live)) => live,
            Err(e) => {
                return Err(format!(
                    "{} query failed: {}",
                    obj.subject(),
                    error_text(&e)
                ));
            }
        };
        let value = serde_json::to_value(&live).unwrap_or(Value::Null);
        if !may_delete(&value, owner) {
            return Ok(Action::Skipped);
        }
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            preconditions: Some(kube::api::Preconditions {
                uid: live.metadata.uid.clone(),
                resource_version: live.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(&obj.name, &dp).await {
            Ok(_) => return Ok(Action::Deleted),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Action::Deleted),
            // The precondition failed: the object changed since it was read.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => {
                return Err(format!(
                    "{} delete failed: {}",
                    obj.subject(),
                    error_text(&e)
                ));
            }
        }
    }
    Err(format!(
        "{} delete failed: the object kept changing while it was being deleted",
        obj.subject()
    ))
}

/// Deletes `stale` objects (given in apply order) in reverse order, one by one, with background
/// propagation. Missing objects count as deleted; objects not owned by `owner` or opted out
/// are skipped.
pub async fn delete_all(
    resolver: &Resolver,
    stale: &[ObjectRef],
    owner: &Owner,
) -> Result<ChangeSet, DeleteError> {
    let mut changes = ChangeSet::default();
    let mut errors = Vec::new();
    let mut not_deleted = Vec::new();
    for obj in stale.iter().rev() {
        let api = match resolver.api(obj).await {
            Ok(api) => api,
            Err(e) => {
                errors.push(e.to_string());
                not_deleted.push(obj.clone());
                continue;
            }
        };
        match delete_one(&api, obj, owner).await {
            Ok(action) => changes.push(obj.clone(), action),
            Err(e) => {
                errors.push(e);
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
        Err(DeleteError {
            errors,
            changes,
            not_deleted,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    const NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";
    const NAMESPACE_LABEL: &str = "kustomize.toolkit.fluxcd.io/namespace";
    const PRUNE_KEY: &str = "kustomize.toolkit.fluxcd.io/prune";

    #[test]
    fn ownership_and_opt_outs() {
        let owner = Owner {
            manager: "kustomize-controller".into(),
            group: "kustomize.toolkit.fluxcd.io".into(),
            name: "app".into(),
            namespace: "flux-system".into(),
            options_group: String::new(),
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
    fn error_text() {
        let e = DeleteError {
            errors: vec!["a failed".into(), "b failed".into()],
            changes: ChangeSet::default(),
            not_deleted: vec![],
        };
        assert_eq!(e.to_string(), "delete failed, errors: a failed;b failed;");
    }
}
