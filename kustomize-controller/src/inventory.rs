//! Object identities, Flux's apply order, and the Kustomization inventory
//! (`status.inventory`, ids in cli-utils `ObjMetadata` format).

use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt;

use rflux_common::api::kustomization::{
    InvalidInventoryId, ObjMetadata, ResourceInventory, ResourceRef,
};
use serde_json::Value;

/// Why an object or inventory entry cannot be identified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InventoryError {
    /// The object lacks `apiVersion`, `kind` or `metadata.name`.
    #[error("object is missing {field}: {object}")]
    MissingField {
        /// The missing field.
        field: &'static str,
        /// A short rendering of the object.
        object: String,
    },
    /// An inventory id cannot be parsed.
    #[error(transparent)]
    InvalidId(#[from] InvalidInventoryId),
}

/// The identity of one object: group, version, kind, namespace and name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// API group; empty for the core group.
    pub group: String,
    /// API version (without group).
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// Reads the identity from an object's `apiVersion`, `kind` and metadata.
    pub fn from_value(obj: &Value) -> Result<Self, InventoryError> {
        let missing = |field| InventoryError::MissingField {
            field,
            object: short(obj),
        };
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| missing("apiVersion"))?;
        let kind = obj
            .get("kind")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| missing("kind"))?;
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| missing("metadata.name"))?;
        let namespace = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let (group, version) = split_api_version(api_version);
        Ok(ObjectRef {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    /// Parses an inventory entry (id plus version).
    pub fn from_entry(entry: &ResourceRef) -> Result<Self, InventoryError> {
        let m = entry.metadata()?;
        Ok(ObjectRef {
            group: m.group,
            version: entry.v.clone(),
            kind: m.kind,
            namespace: m.namespace,
            name: m.name,
        })
    }

    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The cli-utils identity (without the version).
    pub fn metadata(&self) -> ObjMetadata {
        ObjMetadata {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            group: self.group.clone(),
            kind: self.kind.clone(),
        }
    }

    /// The inventory id, `<namespace>_<name>_<group>_<kind>`.
    pub fn id(&self) -> String {
        self.metadata().to_id()
    }

    /// The inventory entry for this object.
    pub fn entry(&self) -> ResourceRef {
        ResourceRef {
            id: self.id(),
            v: self.version.clone(),
        }
    }

    /// Flux's subject text: `Kind/namespace/name`, or `Kind/name` when cluster-scoped.
    pub fn subject(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}/{}", self.kind, self.name)
        } else {
            format!("{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.subject())
    }
}

fn short(obj: &Value) -> String {
    let mut s = obj.to_string();
    if s.len() > 120 {
        let mut cut = 120;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Splits `group/version` (core: `v1` → `("", "v1")`).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

/// Kinds in Flux's apply order; kinds not listed sort between this list and [`LAST_KINDS`].
const KIND_ORDER: &[&str] = &[
    "CustomResourceDefinition",
    "Namespace",
    "ClusterRole",
    "ClusterClass",
    "RuntimeClass",
    "PriorityClass",
    "StorageClass",
    "VolumeSnapshotClass",
    "IngressClass",
    "GatewayClass",
    "ClusterRoleBinding",
    "ResourceQuota",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "Secret",
    "Service",
    "LimitRange",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
];

/// Kinds applied after everything else.
const LAST_KINDS: &[&str] = &[
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

fn kind_rank(kind: &str) -> usize {
    if let Some(i) = KIND_ORDER.iter().position(|k| *k == kind) {
        return i;
    }
    match LAST_KINDS.iter().position(|k| *k == kind) {
        Some(i) => KIND_ORDER.len() + 1 + i,
        None => KIND_ORDER.len(),
    }
}

/// Flux's apply order: kind rank, then group, kind, namespace, name.
pub fn apply_order(a: &ObjectRef, b: &ObjectRef) -> Ordering {
    kind_rank(&a.kind)
        .cmp(&kind_rank(&b.kind))
        .then_with(|| a.group.cmp(&b.group))
        .then_with(|| a.kind.cmp(&b.kind))
        .then_with(|| a.namespace.cmp(&b.namespace))
        .then_with(|| a.name.cmp(&b.name))
}

/// The apply stages of Flux's `ApplyAllStaged`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// CRDs, Namespaces and ClusterRoles (applied, then waited for).
    ClusterDefinitions,
    /// Kinds whose name ends with `Class` (applied, then waited for).
    ClassDefinitions,
    /// The `--custom-apply-stage-kinds` group kinds (applied, no wait).
    Custom,
    /// Everything else.
    Rest,
}

/// Which stage an object is applied in. `custom` holds `(group, kind)` pairs.
pub fn stage_of(obj: &ObjectRef, custom: &[(String, String)]) -> Stage {
    let cluster_def = obj.group == "apiextensions.k8s.io"
        || (obj.group.is_empty() && obj.kind == "Namespace")
        || (obj.group == "rbac.authorization.k8s.io" && obj.kind == "ClusterRole");
    if cluster_def {
        Stage::ClusterDefinitions
    } else if obj.kind.ends_with("Class") {
        Stage::ClassDefinitions
    } else if custom
        .iter()
        .any(|(g, k)| *g == obj.group && *k == obj.kind)
    {
        Stage::Custom
    } else {
        Stage::Rest
    }
}

/// Parses `--custom-apply-stage-kinds` entries (`group/Kind`, or `Kind` for the core group).
pub fn parse_custom_stage_kinds(list: &[String]) -> Vec<(String, String)> {
    list.iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| match s.rsplit_once('/') {
            Some((g, k)) => (g.to_string(), k.to_string()),
            None => (String::new(), s.to_string()),
        })
        .collect()
}

/// Builds an inventory from applied objects, in the given (apply) order, without duplicates.
pub fn build<'a>(objects: impl IntoIterator<Item = &'a ObjectRef>) -> ResourceInventory {
    let mut seen = HashSet::new();
    let entries = objects
        .into_iter()
        .filter(|o| seen.insert(o.id()))
        .map(ObjectRef::entry)
        .collect();
    ResourceInventory { entries }
}

/// Stale objects: those in `old` whose id is not in `new`, with the version recorded in
/// `old`, sorted in apply order (prune deletes them in reverse).
pub fn diff(
    old: &ResourceInventory,
    new: &ResourceInventory,
) -> Result<Vec<ObjectRef>, InventoryError> {
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
    use serde_json::json;

    fn obj(api_version: &str, kind: &str, ns: &str, name: &str) -> ObjectRef {
        ObjectRef::from_value(&json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": ns}}))
        .unwrap()
    }

    #[test]
    fn ids_and_subjects() {
        let d = obj("apps/v1", "Deployment", "apps", "web");
        assert_eq!(d.id(), "apps_web_apps_Deployment");
        assert_eq!(d.subject(), "Deployment/apps/web");
        assert_eq!(d.api_version(), "apps/v1");
        let ns = obj("v1", "Namespace", "", "apps");
        assert_eq!(ns.id(), "_apps__Namespace");
        assert_eq!(ns.subject(), "Namespace/apps");
        assert_eq!(ns.api_version(), "v1");
        let cr = obj(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            "",
            "system:thing",
        );
        assert_eq!(
            cr.id(),
            "_system__thing_rbac.authorization.k8s.io_ClusterRole"
        );
        let back = ObjectRef::from_entry(&cr.entry()).unwrap();
        assert_eq!(back, cr);
        assert!(matches!(
            ObjectRef::from_value(&json!({"kind": "X", "metadata": {"name": "a"}})),
            Err(InventoryError::MissingField {
                field: "apiVersion",
                ..
            })
        ));
    }

    #[test]
    fn apply_order_follows_flux() {
        let mut objs = vec![
            obj(
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
                "",
                "v",
            ),
            obj("example.com/v1", "Widget", "apps", "w"),
            obj("apps/v1", "Deployment", "apps", "web"),
            obj("v1", "Service", "apps", "web"),
            obj("v1", "ConfigMap", "apps", "b"),
            obj("v1", "ConfigMap", "apps", "a"),
            obj("v1", "Namespace", "", "apps"),
            obj(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "",
                "widgets.example.com",
            ),
            obj("storage.k8s.io/v1", "StorageClass", "", "fast"),
            obj("v1", "ServiceAccount", "apps", "sa"),
        ];
        objs.sort_by(apply_order);
        let subjects: Vec<String> = objs.iter().map(ObjectRef::subject).collect();
        assert_eq!(
            subjects,
            [
                "CustomResourceDefinition/widgets.example.com",
                "Namespace/apps",
                "StorageClass/fast",
                "ServiceAccount/apps/sa",
                "ConfigMap/apps/a",
                "ConfigMap/apps/b",
                "Service/apps/web",
                "Deployment/apps/web",
                "Widget/apps/w",
                "ValidatingWebhookConfiguration/v",
            ]
        );
    }

    #[test]
    fn stages() {
        let custom = parse_custom_stage_kinds(&["example.com/Widget".into(), "Secret".into()]);
        assert_eq!(
            stage_of(
                &obj(
                    "apiextensions.k8s.io/v1",
                    "CustomResourceDefinition",
                    "",
                    "x"
                ),
                &custom
            ),
            Stage::ClusterDefinitions
        );
        assert_eq!(
            stage_of(&obj("v1", "Namespace", "", "x"), &custom),
            Stage::ClusterDefinitions
        );
        assert_eq!(
            stage_of(
                &obj("rbac.authorization.k8s.io/v1", "ClusterRole", "", "x"),
                &custom
            ),
            Stage::ClusterDefinitions
        );
        assert_eq!(
            stage_of(
                &obj(
                    "rbac.authorization.k8s.io/v1",
                    "ClusterRoleBinding",
                    "",
                    "x"
                ),
                &custom
            ),
            Stage::Rest
        );
        assert_eq!(
            stage_of(
                &obj("networking.k8s.io/v1", "IngressClass", "", "x"),
                &custom
            ),
            Stage::ClassDefinitions
        );
        assert_eq!(
            stage_of(&obj("example.com/v1", "Widget", "a", "x"), &custom),
            Stage::Custom
        );
        assert_eq!(
            stage_of(&obj("v1", "Secret", "a", "x"), &custom),
            Stage::Custom
        );
        assert_eq!(
            stage_of(&obj("v1", "ConfigMap", "a", "x"), &custom),
            Stage::Rest
        );
    }

    #[test]
    fn diff_returns_stale_in_apply_order() {
        let cm = obj("v1", "ConfigMap", "a", "cm");
        let dep = obj("apps/v1", "Deployment", "a", "web");
        let svc = obj("v1", "Service", "a", "web");
        let ns = obj("v1", "Namespace", "", "a");
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
