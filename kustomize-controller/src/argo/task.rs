//! A sync task (§1.2): one object in one phase, applied or pruned.

use std::fmt;

use rflux_core::split_api_version;
use serde_json::Value;

use super::error::ArgoError;
use super::hook::{Hook, Phase};
use super::options::SyncOptions;

/// Where a task's object comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// The desired objects, by position: applied.
    Desired(usize),
    /// The objects to prune, by position: deleted.
    Live(usize),
    /// The namespace generated for `CreateNamespace=true`: applied.
    ManagedNamespace,
}

/// One task of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// The object.
    pub source: Source,
    /// Its phase (a dependency fix-up may change it, §1.3).
    pub phase: Phase,
    /// Its wave after mirroring (prune), `PruneLast` and the dependency fix-ups.
    pub wave: i64,
    /// The wave its annotations give.
    pub own_wave: i64,
    /// API group; empty for the core group.
    pub group: String,
    /// Kind.
    pub kind: String,
    /// `metadata.namespace` as given (no default is filled in).
    pub namespace: String,
    /// `metadata.name`; for a hook without one, the generated name (§2.3), or its
    /// `generateName` when no naming was given.
    pub name: String,
    /// The name was generated (or is a `generateName` prefix).
    pub generated_name: bool,
    /// Set for hooks.
    pub hook: Option<Hook>,
    /// Its sync options (from the desired object, or the live one for prunes).
    pub options: SyncOptions,
    /// For a CRD: the `group/Kind` it defines.
    pub(crate) defines: Option<String>,
    /// The namespace used to find the Namespace it needs: its own, else the destination.
    pub(crate) ref_namespace: String,
}

impl Task {
    /// A prune (deletion) task.
    pub fn is_prune(&self) -> bool {
        matches!(self.source, Source::Live(_))
    }

    /// A core-group Namespace.
    pub fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.kind == "Namespace"
    }

    /// A CustomResourceDefinition.
    pub fn is_crd(&self) -> bool {
        self.group == "apiextensions.k8s.io" && self.kind == "CustomResourceDefinition"
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&object_label(&self.kind, &self.namespace, &self.name))
    }
}

/// `Kind/namespace/name`, or `Kind/name` when cluster-scoped.
pub fn object_label(kind: &str, namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}/{namespace}/{name}")
    }
}

/// The identity fields of an object, read once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub generate_name: String,
}

impl Meta {
    /// Reads `apiVersion`, `kind` and the metadata; `index` names the object in errors.
    pub fn read(obj: &Value, index: usize) -> Result<Self, ArgoError> {
        let text = |ptr: &str| obj.pointer(ptr).and_then(Value::as_str).unwrap_or("");
        let api_version = text("/apiVersion");
        if api_version.is_empty() {
            return Err(ArgoError::MissingField {
                index,
                field: "apiVersion",
            });
        }
        let kind = text("/kind");
        if kind.is_empty() {
            return Err(ArgoError::MissingField {
                index,
                field: "kind",
            });
        }
        Ok(Meta {
            group: split_api_version(api_version).0.to_string(),
            kind: kind.to_string(),
            namespace: text("/metadata/namespace").to_string(),
            name: text("/metadata/name").to_string(),
            generate_name: text("/metadata/generateName").to_string(),
        })
    }

    /// `Kind/namespace/name` (the `generateName` prefix when there is no name).
    pub fn label(&self) -> String {
        let name = if self.name.is_empty() {
            &self.generate_name
        } else {
            &self.name
        };
        object_label(&self.kind, &self.namespace, name)
    }

    /// For a CRD with `spec.group` and `spec.names.kind`: `group/Kind`.
    pub fn defines(&self, obj: &Value) -> Option<String> {
        if self.group != "apiextensions.k8s.io" || self.kind != "CustomResourceDefinition" {
            return None;
        }
        let group = obj.pointer("/spec/group")?.as_str()?;
        let kind = obj.pointer("/spec/names/kind")?.as_str()?;
        Some(format!("{group}/{kind}"))
    }
}
