//! Drift between the live object and the dry-run result, and the `spec.ignore` rules: JSON
//! pointers left out of the comparison for the objects a selector matches.

use rflux_core::{LabelSelector, SelectorParseError};
use serde_json::{Map, Value};

use super::object::ObjectRef;

fn meta_map<'a>(obj: &'a Value, field: &str) -> Option<&'a Map<String, Value>> {
    obj.pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
}

fn without_meta_and_status(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(map) = v.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    v
}

/// Flux's drift check between the dry-run result and the live object.
pub fn has_drifted(live: Option<&Value>, dry_run: &Value) -> bool {
    let Some(live) = live else {
        return true;
    };
    if dry_run
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return true;
    }
    meta_map(live, "labels") != meta_map(dry_run, "labels")
        || meta_map(live, "annotations") != meta_map(dry_run, "annotations")
        || without_meta_and_status(live) != without_meta_and_status(dry_run)
}

/// A `spec.ignore` selector or label-selector expression that does not compile.
#[derive(Debug, thiserror::Error)]
pub enum SelectorError {
    /// A field is not a valid regular expression.
    #[error("invalid {field} regex {value:?}: {source}")]
    Regex {
        /// The selector field.
        field: &'static str,
        /// The expression.
        value: String,
        /// The regex error.
        #[source]
        source: regex::Error,
    },
    /// A label/annotation selector cannot be parsed.
    #[error("invalid {field} {value:?}: {reason}")]
    Expression {
        /// `labelSelector` or `annotationSelector`.
        field: &'static str,
        /// The expression.
        value: String,
        /// Why.
        #[source]
        reason: SelectorParseError,
    },
}

/// A compiled `spec.ignore` rule: JSON pointers and an optional object selector (group,
/// version, kind, name and namespace are anchored regular expressions).
#[derive(Clone, Debug)]
pub struct DriftIgnoreRule {
    paths: Vec<String>,
    fields: Vec<(&'static str, regex::Regex)>,
    labels: Option<LabelSelector>,
    annotations: Option<LabelSelector>,
}

/// Compiles `spec.ignore`.
pub fn compile_ignore_rules(
    rules: &[rflux_common::api::kustomization::IgnoreRule],
) -> Result<Vec<DriftIgnoreRule>, SelectorError> {
    rules
        .iter()
        .map(|rule| {
            let mut fields = Vec::new();
            let mut labels = None;
            let mut annotations = None;
            if let Some(t) = &rule.target {
                for (field, value) in [
                    ("group", &t.group),
                    ("version", &t.version),
                    ("kind", &t.kind),
                    ("name", &t.name),
                    ("namespace", &t.namespace),
                ] {
                    if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                        let re = regex::Regex::new(&format!("^(?:{v})$")).map_err(|source| {
                            SelectorError::Regex {
                                field,
                                value: v.to_string(),
                                source,
                            }
                        })?;
                        fields.push((field, re));
                    }
                }
                let parse = |field: &'static str, v: &Option<String>| {
                    v.as_deref()
                        .filter(|v| !v.is_empty())
                        .map(|v| {
                            LabelSelector::parse(v).map_err(|reason| SelectorError::Expression {
                                field,
                                value: v.to_string(),
                                reason,
                            })
                        })
                        .transpose()
                };
                labels = parse("labelSelector", &t.label_selector)?;
                annotations = parse("annotationSelector", &t.annotation_selector)?;
            }
            Ok(DriftIgnoreRule {
                paths: rule.paths.clone(),
                fields,
                labels,
                annotations,
            })
        })
        .collect()
}

impl DriftIgnoreRule {
    /// Whether the rule applies to `obj`.
    pub fn matches(&self, obj: &Value) -> bool {
        let Ok(id) = ObjectRef::from_value(obj) else {
            return false;
        };
        let fields_ok = self.fields.iter().all(|(field, re)| {
            let v = match *field {
                "group" => &id.group,
                "version" => &id.version,
                "kind" => &id.kind,
                "name" => &id.name,
                _ => &id.namespace,
            };
            re.is_match(v)
        });
        fields_ok
            && self.labels.as_ref().is_none_or(|s| {
                s.matches(obj.pointer("/metadata/labels").and_then(Value::as_object))
            })
            && self.annotations.as_ref().is_none_or(|s| {
                s.matches(
                    obj.pointer("/metadata/annotations")
                        .and_then(Value::as_object),
                )
            })
    }
}

/// The ignored JSON pointers for `obj` (rules are matched against the dry-run object).
pub fn ignored_paths(rules: &[DriftIgnoreRule], obj: &Value) -> Vec<String> {
    rules
        .iter()
        .filter(|r| r.matches(obj))
        .flat_map(|r| r.paths.iter().cloned())
        .collect()
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn remove_pointer(v: &mut Value, pointer: &str) -> Option<Value> {
    let (parent, last) = pointer.rsplit_once('/')?;
    let last = unescape(last);
    match v.pointer_mut(parent)? {
        Value::Object(m) => m.shift_remove(&last),
        Value::Array(a) => {
            let i: usize = last.parse().ok()?;
            (i < a.len()).then(|| a.remove(i))
        }
        _ => None,
    }
}

fn set_pointer(v: &mut Value, pointer: &str, new: Value) -> bool {
    let Some(rest) = pointer.strip_prefix('/') else {
        return false;
    };
    let tokens: Vec<String> = rest.split('/').map(unescape).collect();
    let mut cur = v;
    for (i, t) in tokens.iter().enumerate() {
        let last = i + 1 == tokens.len();
        cur = match cur {
            Value::Object(m) => {
                if last {
                    m.insert(t.clone(), new);
                    return true;
                }
                m.entry(t.clone())
                    .or_insert_with(|| Value::Object(Map::new()))
            }
            Value::Array(a) => {
                let Some(slot) = t.parse::<usize>().ok().and_then(|i| a.get_mut(i)) else {
                    return false;
                };
                if last {
                    *slot = new;
                    return true;
                }
                slot
            }
            _ => return false,
        };
    }
    false
}

/// A copy of `obj` without the given JSON pointers.
pub fn strip_paths(obj: &Value, paths: &[String]) -> Value {
    let mut v = obj.clone();
    for p in paths {
        remove_pointer(&mut v, p);
    }
    v
}

/// The apply payload for ignored paths that drifted: the live value is adopted when the live
/// object has one, otherwise the path is removed from the payload.
pub fn reconcile_ignored(desired: &Value, live: &Value, dry: &Value, paths: &[String]) -> Value {
    let mut payload = desired.clone();
    for p in paths {
        let live_v = live.pointer(p);
        if live_v == dry.pointer(p) {
            continue;
        }
        match live_v {
            Some(l) if set_pointer(&mut payload, p, l.clone()) => {}
            _ => {
                remove_pointer(&mut payload, p);
            }
        }
    }
    payload
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn drift_detection() {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "resourceVersion": "7", "labels": {"a": "1"},
                "managedFields": [{"manager": "x"}]},
            "data": {"k": "v", "j": "w"}});
        let mut same = live.clone();
        same["metadata"]["managedFields"] = json!([{"manager": "kustomize-controller"}]);
        // Key order does not matter.
        same["data"] = json!({"j": "w", "k": "v"});
        assert!(!has_drifted(Some(&live), &same));
        assert!(has_drifted(None, &same));
        let mut data = same.clone();
        data["data"]["k"] = json!("changed");
        assert!(has_drifted(Some(&live), &data));
        let mut labels = same.clone();
        labels["metadata"]["labels"]["b"] = json!("2");
        assert!(has_drifted(Some(&live), &labels));
        let mut ann = same.clone();
        ann["metadata"]["annotations"] = json!({"x": "y"});
        assert!(has_drifted(Some(&live), &ann));
        let mut new_obj = same.clone();
        new_obj["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        assert!(has_drifted(Some(&live), &new_obj));
    }

    #[test]
    fn ignore_rules_strip_and_adopt() {
        use rflux_common::api::kustomization::{IgnoreRule, Selector};
        let rules = compile_ignore_rules(&[IgnoreRule {
            paths: vec!["/spec/replicas".into(), "/metadata/annotations/a~1b".into()],
            target: Some(Selector {
                kind: Some("Deploy.*".into()),
                name: Some("web".into()),
                label_selector: Some("app=web".into()),
                ..Selector::default()
            }),
        }])
        .unwrap();
        let dep = |name: &str, replicas: i64| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": "a", "resourceVersion": "1",
                    "labels": {"app": "web"}, "annotations": {"a/b": "x"}},
                "spec": {"replicas": replicas}})
        };
        assert_eq!(ignored_paths(&rules, &dep("web", 1)).len(), 2);
        assert!(
            ignored_paths(&rules, &dep("web2", 1)).is_empty(),
            "anchored"
        );

        let live = dep("web", 5);
        let dry = dep("web", 1);
        assert!(has_drifted(Some(&live), &dry));
        let paths = ignored_paths(&rules, &dry);
        assert!(!has_drifted(
            Some(&strip_paths(&live, &paths)),
            &strip_paths(&dry, &paths)
        ));
        let desired = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"}, "spec": {"replicas": 1, "paused": false}});
        let payload = reconcile_ignored(&desired, &live, &dry, &paths);
        assert_eq!(payload["spec"]["replicas"], 5);
        let mut gone = live.clone();
        gone["spec"].as_object_mut().unwrap().remove("replicas");
        let payload = reconcile_ignored(&desired, &gone, &dry, &paths);
        assert!(payload["spec"].get("replicas").is_none());
        assert_eq!(payload["spec"]["paused"], false);

        let bad = compile_ignore_rules(&[IgnoreRule {
            paths: vec![],
            target: Some(Selector {
                name: Some("(".into()),
                ..Selector::default()
            }),
        }]);
        assert!(matches!(
            bad,
            Err(SelectorError::Regex { field: "name", .. })
        ));
    }
}
