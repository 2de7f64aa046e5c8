//! `CreateNamespace=true` with `managedNamespaceMetadata` (§4.7): what to do with the target
//! namespace. The caller reads the live namespace; this only decides.
//!
//! rflux differs from Argo in two ways (issue 17): a namespace that exists and that we did not
//! create is left alone (Argo applies `managedNamespaceMetadata` onto it), and the namespace we
//! created carries our mark [`CREATED_BY`], so that deleting the Kustomization with prune can
//! delete it (Argo never does).

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
/// The generated Namespace is not in the inventory and carries no owner label: it is never
/// pruned. [`namespace_step`] adds our [`CREATED_BY`] mark to it.
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

/// The annotation on a namespace we created: `<Kustomization namespace>/<name>`.
pub const CREATED_BY: &str = "rflux.dev/created-by";

/// The value of [`CREATED_BY`] for the Kustomization `namespace/name`.
pub fn creator(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// What to do with the target namespace in this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceStep {
    /// Nothing: the manifests hold it, it exists and is not ours, it is terminating, or it is
    /// ours and already carries exactly the metadata asked for.
    Nothing,
    /// It does not exist: apply (create) this object.
    Create(Value),
    /// We created it and its metadata changed: apply this object (server-side apply by the
    /// same field manager, so the keys dropped from the metadata are removed).
    Update(Value),
}

/// Decides from `action`, the live namespace (`None`: absent) and `creator`
/// (see [`creator`]). `manager` is the field manager that applies it: its managed fields tell
/// which labels and annotations the last apply set.
pub fn namespace_step(
    action: &NamespaceAction,
    live: Option<&Value>,
    creator: &str,
    manager: &str,
) -> NamespaceStep {
    let desired = match action {
        NamespaceAction::InManifests => return NamespaceStep::Nothing,
        NamespaceAction::CreateIfMissing(ns) | NamespaceAction::Apply(ns) => marked(ns, creator),
    };
    let Some(live) = live else {
        return NamespaceStep::Create(desired);
    };
    if !created_by(live, creator) || terminating(live) || in_sync(&desired, live, manager) {
        return NamespaceStep::Nothing;
    }
    NamespaceStep::Update(desired)
}

/// Whether the finalizer deletes the live namespace: we created it (our mark names `creator`),
/// it is not terminating already, and it is not in the inventory (then the inventory's own
/// deletion rules apply).
pub fn delete_on_finalize(live: Option<&Value>, creator: &str, in_inventory: bool) -> bool {
    live.is_some_and(|ns| created_by(ns, creator) && !terminating(ns)) && !in_inventory
}

/// `ns` with our mark added to its annotations.
fn marked(ns: &Value, creator: &str) -> Value {
    let mut out = ns.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(CREATED_BY.into(), Value::String(creator.to_string()));
        }
    }
    out
}

fn created_by(live: &Value, creator: &str) -> bool {
    live.pointer("/metadata/annotations")
        .and_then(|a| a.get(CREATED_BY))
        .and_then(Value::as_str)
        == Some(creator)
}

fn terminating(live: &Value) -> bool {
    live.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
        || live.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating")
}

/// The live labels and annotations hold the desired values, and `manager`'s Apply entry owns
/// exactly the desired keys (none left over from an earlier metadata).
fn in_sync(desired: &Value, live: &Value, manager: &str) -> bool {
    ["labels", "annotations"].iter().all(|field| {
        let want = desired
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let have = live
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object);
        let values_match = want
            .iter()
            .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v));
        let owned = owned_keys(live, manager, field);
        let mut wanted: Vec<&str> = want.keys().map(String::as_str).collect();
        wanted.sort_unstable();
        values_match && owned.as_deref() == Some(wanted.as_slice())
    })
}

/// The keys of `metadata.<field>` that `manager` owns through an Apply, sorted; `None` when it
/// has no Apply entry.
fn owned_keys<'a>(live: &'a Value, manager: &str, field: &str) -> Option<Vec<&'a str>> {
    let entry = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)?
        .iter()
        .find(|e| {
            e.get("manager").and_then(Value::as_str) == Some(manager)
                && e.get("operation").and_then(Value::as_str) == Some("Apply")
        })?;
    let mut keys: Vec<&str> = entry
        .pointer(&format!("/fieldsV1/f:metadata/f:{field}"))
        .and_then(Value::as_object)
        .map(|m| m.keys().filter_map(|k| k.strip_prefix("f:")).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    Some(keys)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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

    const ME: &str = "flux-system/apps";
    const MANAGER: &str = "kustomize-controller";

    fn with_team(team: &str) -> NamespaceAction {
        let mut settings = create();
        let mut meta = NamespaceMetadata::default();
        meta.labels.insert("team".into(), team.into());
        settings.managed_namespace_metadata = Some(meta);
        managed_namespace(&settings, Some("app"), &[]).unwrap()
    }

    /// A live namespace with `labels`/`annotations`, whose `MANAGER` Apply entry owns
    /// `owned_labels` and `owned_annotations`.
    fn live(labels: Value, annotations: Value, owned_labels: &[&str], owned: &[&str]) -> Value {
        let keys = |ks: &[&str]| -> Value {
            ks.iter()
                .map(|k| (format!("f:{k}"), json!({})))
                .collect::<Map<String, Value>>()
                .into()
        };
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "app", "labels": labels, "annotations": annotations,
                            "managedFields": [
                                {"manager": "kubectl", "operation": "Update",
                                 "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}},
                                {"manager": MANAGER, "operation": "Apply",
                                 "fieldsV1": {"f:metadata": {"f:labels": keys(owned_labels),
                                                             "f:annotations": keys(owned)}}}]}})
    }

    #[test]
    fn an_absent_namespace_is_created_with_our_mark() {
        let NamespaceStep::Create(ns) = namespace_step(&with_team("a"), None, ME, MANAGER) else {
            panic!("expected Create");
        };
        assert_eq!(ns["metadata"]["labels"], json!({"team": "a"}));
        assert_eq!(ns["metadata"]["annotations"], json!({CREATED_BY: ME}));
        assert_eq!(ns["metadata"]["name"], json!("app"));
        // Without metadata too.
        let bare = managed_namespace(&create(), Some("app"), &[]).unwrap();
        let NamespaceStep::Create(ns) = namespace_step(&bare, None, ME, MANAGER) else {
            panic!("expected Create");
        };
        assert_eq!(ns["metadata"]["annotations"], json!({CREATED_BY: ME}));
        assert!(ns["metadata"].get("labels").is_none());
    }

    #[test]
    fn a_namespace_in_the_manifests_or_not_ours_is_left_alone() {
        assert_eq!(
            namespace_step(&NamespaceAction::InManifests, None, ME, MANAGER),
            NamespaceStep::Nothing
        );
        let theirs = live(json!({"team": "x"}), json!({}), &[], &[]);
        assert_eq!(
            namespace_step(&with_team("a"), Some(&theirs), ME, MANAGER),
            NamespaceStep::Nothing
        );
        // Another Kustomization created it.
        let other = live(
            json!({"team": "a"}),
            json!({CREATED_BY: "flux-system/other"}),
            &["team"],
            &[CREATED_BY],
        );
        assert_eq!(
            namespace_step(&with_team("a"), Some(&other), ME, MANAGER),
            NamespaceStep::Nothing
        );
    }

    #[test]
    fn ours_is_updated_only_when_its_metadata_changed() {
        let synced = live(
            json!({"team": "a", "other": "kept"}),
            json!({CREATED_BY: ME}),
            &["team"],
            &[CREATED_BY],
        );
        assert_eq!(
            namespace_step(&with_team("a"), Some(&synced), ME, MANAGER),
            NamespaceStep::Nothing
        );
        // A new value.
        let NamespaceStep::Update(ns) = namespace_step(&with_team("b"), Some(&synced), ME, MANAGER)
        else {
            panic!("expected Update");
        };
        assert_eq!(ns["metadata"]["labels"], json!({"team": "b"}));
        assert_eq!(ns["metadata"]["annotations"][CREATED_BY], json!(ME));
        // A key dropped from the metadata: still owned by our manager, so applied away.
        let bare = managed_namespace(&create(), Some("app"), &[]).unwrap();
        assert!(matches!(
            namespace_step(&bare, Some(&synced), ME, MANAGER),
            NamespaceStep::Update(_)
        ));
        // Someone changed our value by hand.
        let edited = live(
            json!({"team": "z"}),
            json!({CREATED_BY: ME}),
            &["team"],
            &[CREATED_BY],
        );
        assert!(matches!(
            namespace_step(&with_team("a"), Some(&edited), ME, MANAGER),
            NamespaceStep::Update(_)
        ));
        // A terminating namespace is not written to.
        let mut gone = synced.clone();
        gone["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(
            namespace_step(&with_team("b"), Some(&gone), ME, MANAGER),
            NamespaceStep::Nothing
        );
    }

    #[test]
    fn only_ours_outside_the_inventory_is_deleted() {
        let ours = live(json!({}), json!({CREATED_BY: ME}), &[], &[CREATED_BY]);
        assert!(delete_on_finalize(Some(&ours), ME, false));
        assert!(!delete_on_finalize(Some(&ours), ME, true));
        assert!(!delete_on_finalize(Some(&ours), "flux-system/other", false));
        assert!(!delete_on_finalize(None, ME, false));
        let theirs = live(json!({}), json!({}), &[], &[]);
        assert!(!delete_on_finalize(Some(&theirs), ME, false));
        let mut terminating = ours.clone();
        terminating["status"] = json!({"phase": "Terminating"});
        assert!(!delete_on_finalize(Some(&terminating), ME, false));
        assert_eq!(creator("flux-system", "apps"), ME);
    }
}
