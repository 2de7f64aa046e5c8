//! What one controller left for one case ([`Snapshot`]), normalized so that the two controllers'
//! snapshots can be compared field by field, and the comparison ([`differences`]).
//!
//! Normalization drops what the API server sets (uid, resourceVersion, timestamps, generation,
//! managedFields except the manager names and operations) and what depends on the clock
//! (condition times, `Reconciliation finished in <d>`, history times and durations); everything
//! else is compared as is.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// What one controller did with one case.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Snapshot {
    /// The ResourceSet's normalized status ([`normalize_status`]).
    pub status: Value,
    /// The ResourceSet's finalizers while it existed.
    pub finalizers: Value,
    /// Live objects by inventory id, normalized ([`normalize_live`]).
    pub objects: BTreeMap<String, Value>,
    /// The ResourceSet's events: `(type, reason, normalized message, component)`, sorted.
    pub events: Vec<(String, String, String, String)>,
    /// Ids still present (and not terminating) 60 s after the ResourceSet was deleted.
    pub left_after_delete: Vec<String>,
    /// The providers' `(name, exportedInputs, lastExportedRevision, Ready reason)`.
    pub providers: Vec<Value>,
}

/// Prefix of the success message; what follows is a duration.
const FINISHED: &str = "Reconciliation finished in ";

/// A message with its duration replaced by `<d>` when it is `Reconciliation finished in <d>`
/// with `<d>` a Go duration as flux-operator prints it (`123ms`, `1.23s`); otherwise the message
/// as is, so a malformed duration shows as a difference.
pub(crate) fn message_shape(message: &str) -> String {
    match message.strip_prefix(FINISHED) {
        Some(d) if is_go_duration(d) => format!("{FINISHED}<d>"),
        _ => message.to_string(),
    }
}

/// `123ms`, `1.5s`, `2m3.4s`: digits with an optional fraction and a unit, repeated.
fn is_go_duration(s: &str) -> bool {
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ms", "µs", "us", "ns", "h", "m", "s"]
            .into_iter()
            .find(|u| rest.starts_with(u));
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

/// A live object without what the API server sets and without its status (the cluster's
/// controllers write it); managedFields reduced to the sorted `manager/operation[/subresource]`
/// list.
pub(crate) fn normalize_live(mut obj: Value) -> Value {
    // The status is written by the cluster's controllers (a Deployment's), not by ours.
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return obj;
    };
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "selfLink",
    ] {
        meta.remove(k);
    }
    if let Some(Value::Array(fields)) = meta.remove("managedFields") {
        let mut managers: Vec<String> = fields
            .iter()
            .map(|f| {
                let mut s = format!(
                    "{}/{}",
                    f["manager"].as_str().unwrap_or("?"),
                    f["operation"].as_str().unwrap_or("?")
                );
                if let Some(sub) = f["subresource"].as_str() {
                    s.push('/');
                    s.push_str(sub);
                }
                s
            })
            .collect();
        managers.sort();
        meta.insert("managedFields".into(), json!(managers));
    }
    obj
}

/// The parts of a ResourceSet status both controllers must agree on: conditions without times
/// (messages by [`message_shape`]), history without times and durations, everything else as is.
pub(crate) fn normalize_status(status: &Value) -> Value {
    let mut out = status.as_object().cloned().unwrap_or_default();
    if let Some(Value::Array(conditions)) = out.remove("conditions") {
        let mut cs: Vec<Value> = conditions
            .iter()
            .map(|c| {
                json!({
                    "type": c["type"],
                    "status": c["status"],
                    "reason": c["reason"],
                    "message": message_shape(c["message"].as_str().unwrap_or_default()),
                    "observedGeneration": c["observedGeneration"],
                })
            })
            .collect();
        cs.sort_by(|a, b| a["type"].as_str().cmp(&b["type"].as_str()));
        out.insert("conditions".into(), Value::Array(cs));
    }
    if let Some(Value::Array(history)) = out.remove("history") {
        let hs: Vec<Value> = history
            .iter()
            .map(|h| {
                let mut m = Map::new();
                for (k, v) in h.as_object().into_iter().flatten() {
                    match k.as_str() {
                        "firstReconciled" | "lastReconciled" => {}
                        // Failures are retried with backoff: how often depends on timing.
                        "totalReconciliations"
                            if h["lastReconciledStatus"] != "ReconciliationSucceeded" =>
                        {
                            m.insert(k.clone(), json!("n"));
                        }
                        "lastReconciledDuration" => {
                            let ok = v.as_str().is_some_and(is_go_duration);
                            m.insert(k.clone(), json!(if ok { "<d>" } else { "malformed" }));
                        }
                        _ => {
                            m.insert(k.clone(), v.clone());
                        }
                    }
                }
                Value::Object(m)
            })
            .collect();
        out.insert("history".into(), Value::Array(hs));
    }
    Value::Object(out)
}

/// Every JSON pointer under which `a` and `b` differ (a missing side shows as `null`), with
/// both values, shortened.
pub(crate) fn json_diff(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                json_diff(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &p,
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                json_diff(p, q, &format!("{path}/{i}"), out);
            }
        }
        _ if a == b => {}
        _ => out.push(format!(
            "{} operator={} ours={}",
            if path.is_empty() { "/" } else { path },
            short(a),
            short(b)
        )),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 200 {
        format!("{}…", s.chars().take(200).collect::<String>())
    } else {
        s
    }
}

/// The differences between the operator's snapshot and ours, one line each, grouped by area
/// (`objects`, `status`, `events`, `delete`, `providers`, `finalizers`).
pub(crate) fn differences(op: &Snapshot, ours: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |area: &str, lines: Vec<String>| {
        out.extend(lines.into_iter().map(|l| format!("{area}: {l}")));
    };
    let mut objects = Vec::new();
    for id in op.objects.keys().chain(ours.objects.keys()) {
        match (op.objects.get(id), ours.objects.get(id)) {
            (Some(_), None) => objects.push(format!("{id} only created by the operator")),
            (None, Some(_)) => objects.push(format!("{id} only created by ours")),
            (Some(a), Some(b)) => json_diff(a, b, &format!("[{id}]"), &mut objects),
            (None, None) => {}
        }
    }
    objects.sort();
    objects.dedup();
    push("objects", objects);
    let mut status = Vec::new();
    json_diff(&op.status, &ours.status, "", &mut status);
    push("status", status);
    let mut events = Vec::new();
    json_diff(&json!(op.events), &json!(ours.events), "", &mut events);
    push("events", events);
    let mut delete = Vec::new();
    json_diff(
        &json!(op.left_after_delete),
        &json!(ours.left_after_delete),
        "",
        &mut delete,
    );
    push("delete", delete);
    let mut providers = Vec::new();
    json_diff(
        &json!(op.providers),
        &json!(ours.providers),
        "",
        &mut providers,
    );
    push("providers", providers);
    let mut finalizers = Vec::new();
    json_diff(&op.finalizers, &ours.finalizers, "", &mut finalizers);
    push("finalizers", finalizers);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_shapes() {
        assert_eq!(
            message_shape("Reconciliation finished in 123ms"),
            "Reconciliation finished in <d>"
        );
        assert_eq!(
            message_shape("Reconciliation finished in 1.23s"),
            "Reconciliation finished in <d>"
        );
        assert_eq!(
            message_shape("Reconciliation finished in 1.2345678s!"),
            "Reconciliation finished in 1.2345678s!"
        );
        assert_eq!(message_shape("other"), "other");
    }

    #[test]
    fn diff_names_pointers() {
        let mut out = Vec::new();
        json_diff(
            &json!({"a": {"b/c": 1, "x": [1, 2]}, "k": "v"}),
            &json!({"a": {"b/c": 2, "x": [1, 3]}, "k": "v", "n": true}),
            "",
            &mut out,
        );
        assert_eq!(
            out,
            [
                "/a/b~1c operator=1 ours=2",
                "/a/x/1 operator=2 ours=3",
                "/n operator=null ours=true"
            ]
        );
    }

    #[test]
    fn live_objects_lose_server_fields() {
        let o = normalize_live(
            json!({"metadata": {"name": "a", "uid": "u", "generation": 1,
            "managedFields": [{"manager": "m", "operation": "Apply", "fieldsV1": {}}]}}),
        );
        assert_eq!(
            o,
            json!({"metadata": {"name": "a", "managedFields": ["m/Apply"]}})
        );
    }
}
