//! `CreateNamespace=true` with `managedNamespaceMetadata` (§4.7): what to do with the target
//! namespace. The caller knows whether it exists; this only decides.

use serde_json::{Map, Value, json};

use super::options::ArgoSettings;

/// What to do with the target namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceAction {
    /// The manifests hold a Namespace of that name: it is used, nothing is generated (its own
    /// labels and annotations win over `managedNamespaceMetadata`).
    InManifests,
    /// No metadata: create this Namespace if it does not exist; leave an existing one alone.
    CreateIfMissing(Value),
    /// With metadata: apply this Namespace (server-side apply, so other keys stay) in PreSync,
    /// creating it if missing.
    Apply(Value),
}

/// The action for `namespace` (Flux: `spec.targetNamespace`), or `None` when
/// `CreateNamespace=true` is not set or there is no target namespace (Argo does nothing then).
/// The generated Namespace carries no owner mark of ours: it is never pruned nor deleted with
/// the Kustomization, as in Argo.
pub fn managed_namespace(
    settings: &ArgoSettings,
    namespace: Option<&str>,
    desired: &[Value],
) -> Option<NamespaceAction> {
    let name = namespace.filter(|n| !n.is_empty())?;
    if !settings.create_namespace {
        return None;
    }
    if desired.iter().any(|o| is_namespace_named(o, name)) {
        return Some(NamespaceAction::InManifests);
    }
    let mut metadata = Map::new();
    metadata.insert("name".into(), Value::String(name.to_string()));
    let Some(meta) = &settings.managed_namespace_metadata else {
        return Some(NamespaceAction::CreateIfMissing(namespace_object(metadata)));
    };
    for (key, map) in [("labels", &meta.labels), ("annotations", &meta.annotations)] {
        if !map.is_empty() {
            let entries = map
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            metadata.insert(key.into(), Value::Object(entries));
        }
    }
    Some(NamespaceAction::Apply(namespace_object(metadata)))
}

fn namespace_object(metadata: Map<String, Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})
}

/// A core-group Namespace named `name`.
fn is_namespace_named(obj: &Value, name: &str) -> bool {
    obj.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && obj.get("kind").and_then(Value::as_str) == Some("Namespace")
        && obj.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
}

#[cfg(test)]
mod tests {
    use super::super::options::NamespaceMetadata;
    use super::*;

    fn create() -> ArgoSettings {
        ArgoSettings {
            create_namespace: true,
            ..ArgoSettings::default()
        }
    }

    #[test]
    fn nothing_without_the_option_or_a_namespace() {
        assert_eq!(
            managed_namespace(&ArgoSettings::default(), Some("app"), &[]),
            None
        );
        assert_eq!(managed_namespace(&create(), None, &[]), None);
        assert_eq!(managed_namespace(&create(), Some(""), &[]), None);
    }

    #[test]
    fn a_namespace_in_the_manifests_wins() {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}});
        let other = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b"}});
        assert_eq!(
            managed_namespace(&create(), Some("app"), &[other.clone(), ns]),
            Some(NamespaceAction::InManifests)
        );
        assert!(matches!(
            managed_namespace(&create(), Some("app"), &[other]),
            Some(NamespaceAction::CreateIfMissing(_))
        ));
    }

    #[test]
    fn without_metadata_only_a_missing_namespace_is_created() {
        let Some(NamespaceAction::CreateIfMissing(ns)) =
            managed_namespace(&create(), Some("app"), &[])
        else {
            panic!("expected CreateIfMissing");
        };
        assert_eq!(
            ns,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}})
        );
    }

    #[test]
    fn with_metadata_the_namespace_is_applied_with_exactly_it() {
        let mut settings = create();
        let mut meta = NamespaceMetadata::default();
        meta.labels.insert("team".into(), "a".into());
        settings.managed_namespace_metadata = Some(meta);
        let Some(NamespaceAction::Apply(ns)) = managed_namespace(&settings, Some("app"), &[])
        else {
            panic!("expected Apply");
        };
        assert_eq!(ns["metadata"]["labels"], json!({"team": "a"}));
        assert!(ns["metadata"].get("annotations").is_none());
    }
}
