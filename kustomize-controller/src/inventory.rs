//! The Kustomization inventory (`status.inventory`): the objects a revision applied, as ids in
//! cli-utils `ObjMetadata` format, and the diff that names what to prune.

use std::collections::HashSet;

use rflux_common::api::kustomization::{ObjMetadata, ResourceInventory, ResourceRef};

use crate::ssa::{ObjectError, ObjectRef, apply_order};

/// Builds an inventory from applied objects, in the given (apply) order, without duplicates.
pub fn build<'a>(objects: impl IntoIterator<Item = &'a ObjectRef>) -> ResourceInventory {
    crate::ssa::inventory_of(objects)
}

/// Stale objects: those in `old` whose id is not in `new`, with the version recorded in
/// `old`, sorted in apply order (prune deletes them in reverse).
pub fn diff(
    old: &ResourceInventory,
    new: &ResourceInventory,
) -> Result<Vec<ObjectRef>, ObjectError> {
    let keep: HashSet<ObjMetadata> = new
        .entries
        .iter()
        .map(ResourceRef::metadata)
        .collect::<Result<_, _>>()?;
    let mut seen = HashSet::new();
    let mut stale = Vec::new();
    for entry in &old.entries {
        let obj = ObjectRef::from_entry(entry)?;
        let meta = obj.metadata();
        if !keep.contains(&meta) && seen.insert(meta) {
            stale.push(obj);
        }
    }
    stale.sort_by(apply_order);
    Ok(stale)
}

/// Merges objects whose deletion was not confirmed back into an inventory (Flux 1.9+).
pub fn merge_back(inventory: &mut ResourceInventory, kept: &[ObjectRef]) {
    let mut ids: HashSet<String> = inventory.entries.iter().map(|e| e.id.clone()).collect();
    for obj in kept {
        if ids.insert(obj.id()) {
            inventory.entries.push(obj.entry());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn diff_returns_stale_in_apply_order() {
        let cm = ObjectRef::of("v1", "ConfigMap", "a", "cm");
        let dep = ObjectRef::of("apps/v1", "Deployment", "a", "web");
        let svc = ObjectRef::of("v1", "Service", "a", "web");
        let ns = ObjectRef::of("v1", "Namespace", "", "a");
        let old = build([&dep, &svc, &cm, &ns, &cm]);
        assert_eq!(old.entries.len(), 4, "duplicates are dropped");
        let new = build([&ns, &cm]);
        let stale = diff(&old, &new).unwrap();
        assert_eq!(stale, vec![svc.clone(), dep.clone()]);
        assert!(diff(&new, &old).unwrap().is_empty());

        // A version change alone is not stale.
        let mut dep_v2 = dep.clone();
        dep_v2.version = "v2".into();
        assert!(diff(&build([&dep]), &build([&dep_v2])).unwrap().is_empty());

        let bad = ResourceInventory {
            entries: vec![ResourceRef {
                id: "bad".into(),
                v: "v1".into(),
            }],
        };
        assert!(diff(&bad, &new).is_err());

        let mut inv = build([&cm]);
        merge_back(&mut inv, &[dep.clone(), cm.clone()]);
        assert_eq!(inv.entries.len(), 2);
        assert_eq!(inv.entries[1].id, "a_web_apps_Deployment");
    }
}
