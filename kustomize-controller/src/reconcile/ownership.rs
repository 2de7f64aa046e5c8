//! Ownership conflicts, the Kustomization side of [`crate::ssa::claims`]: whether another
//! Kustomization still holds an object its labels give it, and the condition of a
//! Kustomization whose objects others hold.

use futures::future::BoxFuture;
use kube::api::Api;
use kube::{Client, Resource};
use rflux_common::api::kustomization::{KUSTOMIZATION_KIND as KIND, Kustomization};
use rflux_common::runtime::StageError;
use rflux_common::runtime::conditions::READY;

use crate::ssa::{ChangeSet, ClaimCheck, ObjectRef, Owner};

/// The Ready reason of a Kustomization some of whose objects another owner holds (ours, not
/// Flux's: Flux takes them over).
pub const OWNERSHIP_CONFLICT_REASON: &str = "OwnershipConflict";

/// Reads the claiming Kustomization with the controller's own client (the local cluster holds
/// every Kustomization, also for objects applied to a remote cluster).
pub struct InventoryClaims {
    pub client: Client,
}

/// Whether `ks` holds `id`: it is not being deleted and its inventory lists the object, or it
/// has no inventory yet (its first apply may not have recorded it yet).
pub fn holds(ks: &Kustomization, id: &ObjectRef) -> bool {
    if ks.meta().deletion_timestamp.is_some() {
        return false;
    }
    let wanted = id.id();
    match ks.status.as_ref().and_then(|s| s.inventory.as_ref()) {
        Some(inv) => inv.entries.iter().any(|e| e.id == wanted),
        None => true,
    }
}

impl ClaimCheck for InventoryClaims {
    fn holds<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        id: &'a ObjectRef,
    ) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let api: Api<Kustomization> = Api::namespaced(self.client.clone(), namespace);
            match api.get_opt(name).await {
                Ok(Some(ks)) => holds(&ks, id),
                Ok(None) => false,
                // Unknown: keep away from it.
                Err(_) => true,
            }
        })
    }
}

/// The failure of a run whose apply left out objects others hold: Ready=False
/// `OwnershipConflict`, naming each object and its holder, retried at the retry interval.
pub fn conflict_error(changes: &ChangeSet, owner: &Owner) -> Option<StageError> {
    if changes.refused.is_empty() {
        return None;
    }
    let held: Vec<String> = changes
        .refused
        .iter()
        .map(|(obj, claim)| format!("{} is held by {}", obj.subject(), claim.describe(KIND)))
        .collect();
    Some(StageError::generic(
        READY,
        OWNERSHIP_CONFLICT_REASON,
        format!(
            "{}; not applied (annotate the object in Git or this {KIND} with '{}: enabled' to take over)",
            held.join(", "),
            owner.key(crate::ssa::claims::TAKEOVER_SUFFIX)
        ),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ssa::Claim;
    use serde_json::json;

    fn cm(name: &str) -> ObjectRef {
        ObjectRef {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "apps".into(),
            name: name.into(),
        }
    }

    fn ks(inventory: Option<Vec<&str>>, deleting: bool) -> Kustomization {
        let mut v = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "a", "namespace": "flux-system"},
            "spec": {"interval": "1m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "r"}}});
        if let Some(ids) = inventory {
            let entries: Vec<_> = ids.iter().map(|i| json!({"id": i, "v": "v1"})).collect();
            v["status"] = json!({"inventory": {"entries": entries}});
        }
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_kustomization_holds_what_its_inventory_lists() {
        assert!(holds(&ks(Some(vec!["apps_x__ConfigMap"]), false), &cm("x")));
        assert!(!holds(
            &ks(Some(vec!["apps_y__ConfigMap"]), false),
            &cm("x")
        ));
        assert!(holds(&ks(None, false), &cm("x")));
        assert!(!holds(&ks(Some(vec!["apps_x__ConfigMap"]), true), &cm("x")));
    }

    #[test]
    fn the_condition_names_each_object_and_holder() {
        let owner = Owner {
            manager: "kustomize-controller".into(),
            group: "kustomize.toolkit.fluxcd.io".into(),
            name: "b".into(),
            namespace: "flux-system".into(),
            options_group: String::new(),
        };
        let mut changes = ChangeSet::default();
        assert!(conflict_error(&changes, &owner).is_none());
        changes.refuse(
            cm("x"),
            Claim::Owner {
                namespace: "flux-system".into(),
                name: "a".into(),
            },
        );
        let e = conflict_error(&changes, &owner).unwrap();
        assert_eq!(e.reason, OWNERSHIP_CONFLICT_REASON);
        assert!(
            e.message.starts_with(
                "ConfigMap/apps/x is held by Kustomization flux-system/a; not applied"
            ),
            "{}",
            e.message
        );
        assert!(
            e.message
                .contains("kustomize.toolkit.fluxcd.io/takeover: enabled")
        );
    }
}
