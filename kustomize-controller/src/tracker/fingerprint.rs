//! The fingerprint of the fields a field manager owns in an object: it walks the manager's
//! `managedFields` sets (`f:`, `k:`, `v:`, `i:` keys) over the object and hashes the values
//! found, so it changes when someone else changes, removes or takes over one of those fields,
//! and not when they touch other fields.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::{Map, Value};

use crate::ssa::cache::hash_value;

fn hash_opt<H: Hasher>(v: Option<&Value>, h: &mut H) {
    match v {
        None => 9u8.hash(h),
        Some(v) => hash_value(v, h),
    }
}

/// Walks a `fieldsV1` set over the live object, hashing the path keys and the values found.
fn walk<H: Hasher>(live: Option<&Value>, fields: &Map<String, Value>, h: &mut H) {
    let mut keys: Vec<&String> = fields.keys().collect();
    keys.sort();
    for k in keys {
        k.hash(h);
        let child = fields.get(k).and_then(Value::as_object);
        if let Some(name) = k.strip_prefix("f:") {
            visit(live.and_then(|l| l.get(name)), child, h);
        } else if let Some(key) = k.strip_prefix("k:") {
            let want: Option<Map<String, Value>> = serde_json::from_str(key).ok();
            let item = live.and_then(Value::as_array).and_then(|items| {
                let want = want.as_ref()?;
                items
                    .iter()
                    .find(|it| want.iter().all(|(kk, vv)| it.get(kk) == Some(vv)))
            });
            visit(item, child, h);
        } else if let Some(val) = k.strip_prefix("v:") {
            let want: Option<Value> = serde_json::from_str(val).ok();
            let present = match (live.and_then(Value::as_array), want) {
                (Some(items), Some(w)) => items.contains(&w),
                _ => false,
            };
            present.hash(h);
        } else if let Some(idx) = k.strip_prefix("i:") {
            let item = idx
                .parse::<usize>()
                .ok()
                .and_then(|i| live.and_then(|l| l.get(i)));
            visit(item, child, h);
        }
        // ".": the node itself, already covered by its parent's key.
    }
}

fn visit<H: Hasher>(v: Option<&Value>, child: Option<&Map<String, Value>>, h: &mut H) {
    match child {
        Some(m) if m.keys().any(|k| k != ".") => walk(v, m, h),
        _ => hash_opt(v, h),
    }
}

/// The fingerprint of the fields `manager` manages in `obj`: the `managedFields` entries of that
/// manager (not of a subresource), their field sets, and the object's values at those fields.
/// It changes when someone else changes, removes or takes over one of those fields, and not
/// when they touch other fields (status, fields of other managers, resourceVersion).
pub fn fingerprint(obj: &Value, manager: &str) -> u64 {
    let mut h = DefaultHasher::new();
    let entries = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut mine: Vec<&Value> = entries
        .iter()
        .filter(|e| e.get("manager").and_then(Value::as_str) == Some(manager))
        .filter(|e| {
            e.get("subresource")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        })
        .collect();
    mine.sort_by_key(|e| {
        (
            e.get("operation").and_then(Value::as_str).unwrap_or(""),
            e.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
        )
    });
    mine.len().hash(&mut h);
    for e in mine {
        e.get("operation")
            .and_then(Value::as_str)
            .unwrap_or("")
            .hash(&mut h);
        match e.get("fieldsV1").and_then(Value::as_object) {
            Some(fields) => walk(Some(obj), fields, &mut h),
            None => 0u8.hash(&mut h),
        }
    }
    h.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    const FIELD_MANAGER: &str = "kustomize-controller";

    fn deployment(image: &str, replicas: i64, fields: Value) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "a", "resourceVersion": "7",
                "labels": {"app": "web", "team": "x"},
                "managedFields": [
                    {"manager": "kustomize-controller", "operation": "Apply",
                     "apiVersion": "apps/v1", "fieldsType": "FieldsV1", "fieldsV1": fields},
                    {"manager": "kube-controller-manager", "operation": "Update",
                     "subresource": "status", "fieldsV1": {"f:status": {}}}
                ]},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "app", "image": image, "imagePullPolicy": "Always"},
                {"name": "side", "image": "side:1"}
            ]}}},
            "status": {"replicas": 0}
        })
    }

    fn owned() -> Value {
        json!({"f:metadata": {"f:labels": {"f:app": {}}},
               "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                   "k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
    }

    #[test]
    fn fingerprint_covers_managed_fields_only() {
        let base = fingerprint(&deployment("app:1", 0, owned()), FIELD_MANAGER);
        assert_eq!(
            base,
            fingerprint(&deployment("app:1", 0, owned()), FIELD_MANAGER)
        );
        // Our fields: image of the keyed container, replicas.
        assert_ne!(
            base,
            fingerprint(&deployment("app:2", 0, owned()), FIELD_MANAGER)
        );
        assert_ne!(
            base,
            fingerprint(&deployment("app:1", 1, owned()), FIELD_MANAGER)
        );
        // Not ours: another container, a defaulted field, status, another label, rv.
        let mut other = deployment("app:1", 0, owned());
        other["spec"]["template"]["spec"]["containers"][1]["image"] = json!("side:2");
        other["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("Never");
        other["status"]["replicas"] = json!(3);
        other["metadata"]["labels"]["team"] = json!("y");
        other["metadata"]["resourceVersion"] = json!("99");
        assert_eq!(base, fingerprint(&other, FIELD_MANAGER));
        // Key order does not matter.
        let mut reordered = deployment("app:1", 0, owned());
        let c = reordered["spec"]["template"]["spec"]["containers"][0].take();
        let mut m = Map::new();
        for k in ["image", "name", "imagePullPolicy"] {
            m.insert(k.into(), c[k].clone());
        }
        reordered["spec"]["template"]["spec"]["containers"][0] = Value::Object(m);
        assert_eq!(base, fingerprint(&reordered, FIELD_MANAGER));
    }

    #[test]
    fn fingerprint_sees_takeover_and_removal() {
        let base = fingerprint(&deployment("app:1", 0, owned()), FIELD_MANAGER);
        // Someone took over replicas: our field set shrinks.
        let mut fields = owned();
        fields["f:spec"]
            .as_object_mut()
            .unwrap()
            .remove("f:replicas");
        assert_ne!(
            base,
            fingerprint(&deployment("app:1", 0, fields), FIELD_MANAGER)
        );
        // A field we own was removed.
        let mut gone = deployment("app:1", 0, owned());
        gone["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("app");
        assert_ne!(base, fingerprint(&gone, FIELD_MANAGER));
        // The keyed container was renamed away.
        let mut renamed = deployment("app:1", 0, owned());
        renamed["spec"]["template"]["spec"]["containers"][0]["name"] = json!("other");
        assert_ne!(base, fingerprint(&renamed, FIELD_MANAGER));
        // No entry of ours at all.
        let mut none = deployment("app:1", 0, owned());
        none["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        assert_ne!(base, fingerprint(&none, FIELD_MANAGER));
    }

    #[test]
    fn fingerprint_walks_set_and_index_entries() {
        let obj = |finalizers: Value| {
            json!({"metadata": {"name": "x", "finalizers": finalizers, "managedFields": [
                {"manager": "m", "operation": "Apply",
                 "fieldsV1": {"f:metadata": {"f:finalizers": {"v:\"a\"": {}}},
                              "f:args": {"i:1": {}}}}]},
                   "args": ["x", "y"]})
        };
        let a = fingerprint(&obj(json!(["a", "b"])), "m");
        assert_eq!(a, fingerprint(&obj(json!(["b", "a"])), "m"));
        assert_ne!(a, fingerprint(&obj(json!(["b"])), "m"));
        let mut o = obj(json!(["a"]));
        o["args"][1] = json!("z");
        assert_ne!(a, fingerprint(&o, "m"));
    }
}
