//! Who applies and who owns: the field manager, and the owner labels and annotations, which
//! live under the owner's API group (`<group>/name`, `<group>/namespace`, `<group>/ssa`,
//! `<group>/reconcile`, `<group>/force`, `<group>/prune`), as in Flux's `ssa.Owner`.

use serde_json::{Map, Value};

/// The owner of the applied objects: the field manager and label group of the controller, and
/// the name and namespace of the object (a Kustomization, a ResourceSet…) they belong to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    /// The server-side apply field manager (`kustomize-controller`).
    pub manager: String,
    /// The API group of the owner labels and annotations (`kustomize.toolkit.fluxcd.io`).
    pub group: String,
    /// The owning object's name.
    pub name: String,
    /// The owning object's namespace.
    pub namespace: String,
    /// The API group of the per-object option keys (`ssa`, `force`, `prune`, `reconcile`)
    /// when it differs from the label group: Flux Operator labels with
    /// `resourceset.fluxcd.controlplane.io` but reads `fluxcd.controlplane.io/force`. Empty:
    /// the label group.
    pub options_group: String,
}

impl Owner {
    /// `<group>/<suffix>`: the key of an owner label or annotation.
    pub fn key(&self, suffix: &str) -> String {
        format!("{}/{suffix}", self.group)
    }

    /// `<options group>/<suffix>`: the key of a per-object option.
    pub fn option_key(&self, suffix: &str) -> String {
        let group = if self.options_group.is_empty() {
            &self.group
        } else {
            &self.options_group
        };
        format!("{group}/{suffix}")
    }

    /// The label holding the owner's name.
    pub fn name_label(&self) -> String {
        self.key("name")
    }

    /// The label holding the owner's namespace.
    pub fn namespace_label(&self) -> String {
        self.key("namespace")
    }

    /// `<group>/ssa`: `Override` (default), `Merge`, `IfNotPresent` or `Ignore`.
    pub fn ssa_key(&self) -> String {
        self.option_key("ssa")
    }

    /// `<group>/force`: `enabled` recreates the object on immutable-field errors.
    pub fn force_key(&self) -> String {
        self.option_key("force")
    }

    /// `<group>/prune`: `disabled` keeps the object from garbage collection.
    pub fn prune_key(&self) -> String {
        self.option_key("prune")
    }

    /// Whether `obj` carries both owner labels with this owner's name and namespace.
    pub fn owns(&self, obj: &Value) -> bool {
        let label = |k: &str| {
            obj.pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
        };
        label(&self.name_label()) == Some(self.name.as_str())
            && label(&self.namespace_label()) == Some(self.namespace.as_str())
    }

    /// Whether the object is excluded from apply and prune (`<group>/reconcile: disabled` or
    /// `<group>/ssa: Ignore`).
    pub fn is_ignored(&self, obj: &Value) -> bool {
        has_meta_value(obj, &self.option_key("reconcile"), "disabled")
            || has_meta_value(obj, &self.ssa_key(), "Ignore")
    }

    /// Normalizes a desired object for server-side apply: sets the owner labels (when the owner
    /// has a name), drops `status` (except for CRDs), `metadata.creationTimestamp`,
    /// `resourceVersion`, `uid`, `generation` and `managedFields`.
    pub fn prepare(&self, mut obj: Value) -> Value {
        let is_crd = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with("apiextensions.k8s.io/"))
            && obj.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition");
        let Some(map) = obj.as_object_mut() else {
            return obj;
        };
        if !is_crd {
            map.remove("status");
        }
        let meta = map
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(meta) = meta.as_object_mut() else {
            return obj;
        };
        for k in [
            "creationTimestamp",
            "resourceVersion",
            "uid",
            "managedFields",
            "generation",
        ] {
            meta.remove(k);
        }
        if !self.name.is_empty() {
            let labels = meta
                .entry("labels")
                .or_insert_with(|| Value::Object(Map::new()));
            if !labels.is_object() {
                *labels = Value::Object(Map::new());
            }
            if let Some(labels) = labels.as_object_mut() {
                labels.insert(self.name_label(), Value::String(self.name.clone()));
                labels.insert(
                    self.namespace_label(),
                    Value::String(self.namespace.clone()),
                );
            }
        }
        obj
    }
}

/// Whether `key` is set to `value` (case-insensitive) as a label or an annotation.
pub fn has_meta_value(obj: &Value, key: &str, value: &str) -> bool {
    ["labels", "annotations"].iter().any(|field| {
        obj.pointer(&format!("/metadata/{field}"))
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .is_some_and(|v| !v.is_empty() && v.eq_ignore_ascii_case(value))
    })
}

/// The owner the unit tests use (here and in the controllers): Kustomization `flux-system/app`.
#[cfg(any(test, feature = "testing"))]
pub fn test_owner() -> Owner {
    Owner {
        manager: "kustomize-controller".into(),
        group: "kustomize.toolkit.fluxcd.io".into(),
        name: "app".into(),
        namespace: "flux-system".into(),
        options_group: String::new(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    use super::test_owner as owner;

    #[test]
    fn prepare_sets_owner_labels_and_strips_server_fields() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "creationTimestamp": null, "resourceVersion": "5",
                "labels": {"x": "y"}},
            "status": {"a": 1}, "data": {"k": "v"}});
        let p = owner().prepare(obj);
        assert_eq!(
            p["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"],
            "app"
        );
        assert_eq!(
            p["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/namespace"],
            "flux-system"
        );
        assert_eq!(p["metadata"]["labels"]["x"], "y");
        assert!(p.get("status").is_none());
        assert!(p["metadata"].get("creationTimestamp").is_none());
        assert!(p["metadata"].get("resourceVersion").is_none());
        assert!(owner().owns(&p));

        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition", "metadata": {"name": "a.b"}, "status": {"x": 1}});
        assert!(owner().prepare(crd).get("status").is_some());
        // Another group's owner writes its own keys.
        let other = Owner {
            group: "fluxcd.controlplane.io".into(),
            ..owner()
        };
        let p = other.prepare(json!({"metadata": {"name": "c"}}));
        assert_eq!(
            p["metadata"]["labels"]["fluxcd.controlplane.io/name"],
            "app"
        );
        assert!(!owner().owns(&p));
    }

    #[test]
    fn annotation_matching_is_case_insensitive_on_labels_and_annotations() {
        let o = owner();
        let a = json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/ssa": "ignore"}}});
        assert!(has_meta_value(&a, &o.ssa_key(), "Ignore"));
        assert!(o.is_ignored(&a));
        let l =
            json!({"metadata": {"labels": {"kustomize.toolkit.fluxcd.io/reconcile": "Disabled"}}});
        assert!(o.is_ignored(&l));
        let other =
            json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/ssa": "Merge"}}});
        assert!(!o.is_ignored(&other));
        assert!(!has_meta_value(&json!({}), &o.force_key(), "enabled"));
    }

    #[test]
    fn option_keys_may_live_in_another_group() {
        let o = Owner {
            manager: "flux-operator".into(),
            group: "resourceset.fluxcd.controlplane.io".into(),
            name: "app".into(),
            namespace: "apps".into(),
            options_group: "fluxcd.controlplane.io".into(),
        };
        assert_eq!(o.name_label(), "resourceset.fluxcd.controlplane.io/name");
        assert_eq!(o.force_key(), "fluxcd.controlplane.io/force");
        assert_eq!(o.prune_key(), "fluxcd.controlplane.io/prune");
        let off = json!({"metadata": {"labels": {"fluxcd.controlplane.io/reconcile": "Disabled"}}});
        assert!(o.is_ignored(&off));
        assert!(!owner().is_ignored(&off));
        assert_eq!(owner().force_key(), "kustomize.toolkit.fluxcd.io/force");
    }
}
