//! Object identities: [`ObjectRef`] (group, version, kind, namespace, name) and its forms in
//! Flux's inventory (`<namespace>_<name>_<group>_<kind>`) and in messages (`Kind/ns/name`).

use std::fmt;

use rflux_common::api::kustomization::{InvalidInventoryId, ObjMetadata, ResourceRef};
use rflux_core::split_api_version;
use serde_json::Value;

/// Why an object or inventory entry cannot be identified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
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
    pub fn from_value(obj: &Value) -> Result<Self, ObjectError> {
        let missing = |field| ObjectError::MissingField {
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
    pub fn from_entry(entry: &ResourceRef) -> Result<Self, ObjectError> {
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

impl ObjectRef {
    /// An object reference from `apiVersion`, kind, namespace and name.
    pub fn of(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        let (group, version) = split_api_version(api_version);
        ObjectRef {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// An inventory (`status.inventory`) of objects, in the given (apply) order, without
/// duplicates.
pub fn inventory_of<'a>(
    objects: impl IntoIterator<Item = &'a ObjectRef>,
) -> rflux_common::api::kustomization::ResourceInventory {
    let mut seen = std::collections::HashSet::new();
    let entries = objects
        .into_iter()
        .filter(|o| seen.insert(o.id()))
        .map(ObjectRef::entry)
        .collect();
    rflux_common::api::kustomization::ResourceInventory { entries }
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_and_subjects() {
        let d = ObjectRef::of("apps/v1", "Deployment", "apps", "web");
        assert_eq!(d.id(), "apps_web_apps_Deployment");
        assert_eq!(d.subject(), "Deployment/apps/web");
        assert_eq!(d.api_version(), "apps/v1");
        let ns = ObjectRef::of("v1", "Namespace", "", "apps");
        assert_eq!(ns.id(), "_apps__Namespace");
        assert_eq!(ns.subject(), "Namespace/apps");
        assert_eq!(ns.api_version(), "v1");
        let cr = ObjectRef::of(
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
            Err(ObjectError::MissingField {
                field: "apiVersion",
                ..
            })
        ));
    }
}
