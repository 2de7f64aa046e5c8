//! Comparing generated CRDs with upstream ones (Flux's, Flux Operator's), shared by the CRD
//! tests.
#![allow(dead_code)]

use serde_json::Value;

/// Removes every `description` string (documentation, not structure).
pub fn strip_descriptions(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, v)| !(k.as_str() == "description" && v.is_string()))
                .map(|(k, v)| (k.clone(), strip_descriptions(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_descriptions).collect()),
        other => other.clone(),
    }
}

/// Differences as `path: detail` lines; `required` lists compare as sets, numbers by value.
pub fn diff_as(who: &str, path: &str, ours: &Value, theirs: &Value, out: &mut Vec<String>) {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, bv) in b {
                let p = format!("{path}/{k}");
                match a.get(k) {
                    None => out.push(format!("{p}: missing in ours ({who}: {bv})")),
                    Some(av) if k == "required" => {
                        let set = |v: &Value| {
                            let mut l: Vec<String> = v
                                .as_array()
                                .map(|l| l.iter().map(Value::to_string).collect())
                                .unwrap_or_default();
                            l.sort();
                            l
                        };
                        if set(av) != set(bv) {
                            out.push(format!("{p}: ours {av} {who} {bv}"));
                        }
                    }
                    Some(av) => diff_as(who, &p, av, bv, out),
                }
            }
            for (k, av) in a {
                if !b.contains_key(k) {
                    out.push(format!("{path}/{k}: only in ours ({av})"));
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (av, bv)) in a.iter().zip(b).enumerate() {
                diff_as(who, &format!("{path}/{i}"), av, bv, out);
            }
        }
        (a, b) if a == b => {}
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) => out.push(format!("{path}: ours {a} {who} {b}")),
    }
}
