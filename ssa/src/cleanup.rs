//! Managed-fields cleanup before an apply: the kubectl and legacy Flux annotations and labels
//! are removed, and the fields of kubectl-like managers (and `--override-manager`s) are merged
//! into the owner's Apply entry, so the next apply takes them over instead of sharing them.

use serde_json::{Map, Value, json};

const CLEANUP_ANNOTATIONS: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    "kustomize.toolkit.fluxcd.io/checksum",
    "fluxcd.io/sync-checksum",
];
const CLEANUP_LABELS: &[&str] = &["fluxcd.io/sync-gc-mark"];

/// Deep union of two `fieldsV1` sets.
fn merge_fields(into: &mut Value, from: &Value) {
    match (into.as_object_mut(), from.as_object()) {
        (Some(a), Some(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) => merge_fields(existing, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (None, Some(_)) => *into = from.clone(),
        _ => {}
    }
}

/// Whether the fields of `manager` (with `operation`) are taken over by `ours`: kubectl's,
/// `before-first-apply`'s, our own Update entries, and the `--override-manager`s.
fn taken_over(manager: &str, operation: &str, ours: &str, overrides: &[String]) -> bool {
    (manager.starts_with("kubectl") && (operation == "Apply" || operation == "Update"))
        || (manager == "before-first-apply" && operation == "Update")
        || (manager == ours && operation == "Update")
        || overrides.iter().any(|m| m == manager)
}

/// Whether [`cleanup_patch`] has anything to do: a kubectl/legacy annotation or label, or a
/// managed-fields entry to take over. Cheap (nothing is copied): the tracker asks it on every
/// watch event.
pub fn needs_cleanup(live: &Value, ours: &str, overrides: &[String]) -> bool {
    let has = |field: &str, keys: &[&str]| {
        live.pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
            .is_some_and(|m| keys.iter().any(|k| m.contains_key(*k)))
    };
    fn str_of<'a>(e: &'a Value, k: &str) -> &'a str {
        e.get(k).and_then(Value::as_str).unwrap_or("")
    }
    has("annotations", CLEANUP_ANNOTATIONS)
        || has("labels", CLEANUP_LABELS)
        || live
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .is_some_and(|entries| {
                entries.iter().any(|e| {
                    taken_over(
                        str_of(e, "manager"),
                        str_of(e, "operation"),
                        ours,
                        overrides,
                    )
                })
            })
}

/// The merge patch that removes kubectl/legacy annotations and merges the managed fields of
/// kubectl-like managers into the Apply entry of `ours` (the owner's field manager); `None` when
/// nothing needs cleaning.
pub fn cleanup_patch(live: &Value, ours: &str, overrides: &[String]) -> Option<Value> {
    if !needs_cleanup(live, ours, overrides) {
        return None;
    }
    let mut meta = Map::new();
    let mut strip = |field: &str, keys: &[&str]| {
        if let Some(m) = live
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
        {
            let present: Map<String, Value> = keys
                .iter()
                .filter(|k| m.contains_key(**k))
                .map(|k| ((*k).to_string(), Value::Null))
                .collect();
            if !present.is_empty() {
                meta.insert(field.to_string(), Value::Object(present));
            }
        }
    };
    strip("annotations", CLEANUP_ANNOTATIONS);
    strip("labels", CLEANUP_LABELS);

    let entries = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let str_of = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let takeover = entries.iter().any(|e| {
        taken_over(
            &str_of(e, "manager"),
            &str_of(e, "operation"),
            ours,
            overrides,
        )
    });
    if takeover {
        let mut kept = Vec::new();
        let mut merged: Option<Value> = None;
        for e in &entries {
            let manager = str_of(e, "manager");
            let operation = str_of(e, "operation");
            let is_ours = manager == ours && operation == "Apply";
            if !is_ours && !taken_over(&manager, &operation, ours, overrides) {
                kept.push(e.clone());
                continue;
            }
            let fields = e.get("fieldsV1").cloned().unwrap_or_else(|| json!({}));
            match merged.as_mut() {
                None => {
                    let mut m = e.clone();
                    if let Some(o) = m.as_object_mut() {
                        o.insert("manager".into(), json!(ours));
                        o.insert("operation".into(), json!("Apply"));
                        o.insert("fieldsType".into(), json!("FieldsV1"));
                        o.remove("subresource");
                    }
                    merged = Some(m);
                }
                Some(m) => {
                    if let Some(target) = m.get_mut("fieldsV1") {
                        merge_fields(target, &fields);
                    } else if let Some(o) = m.as_object_mut() {
                        o.insert("fieldsV1".into(), fields);
                    }
                    // Prefer the apiVersion of our own Apply entry.
                    if is_ours && let (Some(o), Some(v)) = (m.as_object_mut(), e.get("apiVersion"))
                    {
                        o.insert("apiVersion".into(), v.clone());
                    }
                }
            }
        }
        kept.extend(merged);
        meta.insert("managedFields".into(), Value::Array(kept));
    }
    if meta.is_empty() {
        None
    } else {
        Some(json!({ "metadata": meta }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const FIELD_MANAGER: &str = "kustomize-controller";

    #[test]
    fn cleanup_merges_kubectl_managers() {
        let live = json!({"metadata": {
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "1"},
        "labels": {"fluxcd.io/sync-gc-mark": "x"},
        "managedFields": [
            {"manager": "kustomize-controller", "operation": "Apply", "apiVersion": "v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}},
            {"manager": "kubectl-edit", "operation": "Update", "apiVersion": "v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:b": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}},
            {"manager": "flux-client-side-apply", "operation": "Update", "apiVersion": "v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:c": {}}}}
        ]}});
        let patch = cleanup_patch(&live, FIELD_MANAGER, &[]).unwrap();
        let meta = &patch["metadata"];
        assert_eq!(
            meta["annotations"],
            json!({"kubectl.kubernetes.io/last-applied-configuration": null})
        );
        assert_eq!(meta["labels"], json!({"fluxcd.io/sync-gc-mark": null}));
        let mf = meta["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 3);
        let ours = mf.iter().find(|e| e["manager"] == FIELD_MANAGER).unwrap();
        assert_eq!(ours["operation"], "Apply");
        assert_eq!(ours["fieldsV1"], json!({"f:data": {"f:a": {}, "f:b": {}}}));
        assert!(mf.iter().any(|e| e["manager"] == "flux-client-side-apply"));

        let clean = json!({"metadata": {"managedFields": [
            {"manager": "kustomize-controller", "operation": "Apply", "fieldsV1": {}}]}});
        assert!(cleanup_patch(&clean, FIELD_MANAGER, &[]).is_none());
        let custom = json!({"metadata": {"managedFields": [
            {"manager": "helm", "operation": "Update", "fieldsV1": {"f:a": {}}}]}});
        assert!(cleanup_patch(&custom, FIELD_MANAGER, &[]).is_none());
        let p = cleanup_patch(&custom, FIELD_MANAGER, &["helm".to_string()]).unwrap();
        assert_eq!(p["metadata"]["managedFields"][0]["manager"], FIELD_MANAGER);
    }
}
