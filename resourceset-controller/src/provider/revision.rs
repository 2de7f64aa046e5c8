//! What a Static provider exports and the revision of exported input sets (reference §12.2,
//! §12.3): the input set is `defaultValues` plus `id` (the Adler-32 of `metadata.uid`), and
//! `lastExportedRevision` is `sha256:<hex>` of `sigs.k8s.io/yaml.Marshal(exportedInputs)`.

use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

use super::yaml::{YamlError, to_yaml};
use crate::id::input_id;

/// Numbers as Flux Operator holds them after decoding `defaultValues` into Go's `any`: every
/// number is a float64, written back by `encoding/json` (whole values below 1e21 without a
/// fraction). Integers beyond 2^53 are rounded like Go rounds them.
pub fn normalize_numbers(v: &mut Value) {
    match v {
        Value::Number(n) => {
            if let Some(normal) = go_number(n) {
                *n = normal;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_numbers),
        Value::Object(map) => map.values_mut().for_each(normalize_numbers),
        _ => {}
    }
}

/// 2^63 and 2^64, exact in an f64: the bounds of whole floats that fit i64 and u64.
const TWO_63: f64 = 9_223_372_036_854_775_808.0;
const TWO_64: f64 = 18_446_744_073_709_551_616.0;

fn go_number(n: &Number) -> Option<Number> {
    #[allow(clippy::cast_precision_loss)] // the rounding is the point: Go decodes into float64
    let f = match (n.as_i64(), n.as_u64()) {
        (Some(i), _) => i as f64,
        (None, Some(u)) => u as f64,
        _ => n.as_f64()?,
    };
    if f.fract() == 0.0 && f.abs() < 1e21 {
        #[allow(clippy::cast_possible_truncation)] // range checked just above
        if (-TWO_63..TWO_63).contains(&f) {
            return Some(Number::from(f as i64));
        }
        if (0.0..TWO_64).contains(&f) {
            #[allow(clippy::cast_sign_loss)]
            return Some(Number::from(f as u64));
        }
    }
    Number::from_f64(f)
}

/// The one input set of a Static provider: the defaults, then `id` unless the defaults set
/// one (Flux Operator adds defaults only for missing keys, and `id` is set first).
pub fn static_input_set(defaults: &Map<String, Value>, uid: &str) -> Map<String, Value> {
    let mut set = Map::new();
    set.insert("id".into(), Value::String(input_id(uid)));
    for (k, v) in defaults {
        if !set.contains_key(k) {
            let mut v = v.clone();
            normalize_numbers(&mut v);
            set.insert(k.clone(), v);
        }
    }
    set
}

/// `sha256:<hex>` of the YAML of the exported input sets.
pub fn exported_revision(inputs: &[Map<String, Value>]) -> Result<String, YamlError> {
    let list = Value::Array(inputs.iter().cloned().map(Value::Object).collect());
    let yaml = to_yaml(&list)?;
    Ok(format!(
        "sha256:{}",
        hex::encode(Sha256::digest(yaml.as_bytes()))
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn static_set_is_defaults_plus_uid_id() {
        let uid = "6f1c9a52-1f6d-4b43-8d2a-0f3e4c1b2a90";
        let set = static_input_set(&map(json!({"env": "prod", "replicas": 2})), uid);
        assert_eq!(
            Value::Object(set),
            json!({"env": "prod", "replicas": 2, "id": input_id(uid)})
        );
        // An `id` in the defaults is kept out: the uid's wins.
        let set = static_input_set(&map(json!({"id": "mine"})), uid);
        assert_eq!(set["id"], json!(input_id(uid)));
    }

    #[test]
    fn numbers_go_through_float64() {
        let mut v = json!({"a": 9_007_199_254_740_993_u64, "b": 2.0, "c": [1.5, -3], "d": 1e21});
        normalize_numbers(&mut v);
        assert_eq!(v["a"], json!(9_007_199_254_740_992_u64));
        assert_eq!(v["b"], json!(2));
        assert!(v["b"].is_i64());
        assert_eq!(v["c"], json!([1.5, -3]));
        assert!(v["d"].is_f64());
    }

    /// The revision Flux Operator v0.59.0 gives these sets (`digest.FromBytes` of
    /// `sigs.k8s.io/yaml.Marshal`), recorded with the Go libraries.
    #[test]
    fn revision_is_sha256_of_sigs_yaml() {
        let sets = vec![map(json!({"id": "123456", "env": "staging"}))];
        // sha256 of "- env: staging\n  id: \"123456\"\n"
        let want = format!(
            "sha256:{}",
            hex::encode(Sha256::digest(b"- env: staging\n  id: \"123456\"\n"))
        );
        assert_eq!(exported_revision(&sets).unwrap(), want);
        assert_ne!(
            exported_revision(&[map(json!({"id": "123456", "env": "prod"}))]).unwrap(),
            want
        );
        // No sets: the revision of `[]`.
        assert_eq!(
            exported_revision(&[]).unwrap(),
            format!("sha256:{}", hex::encode(Sha256::digest(b"[]\n")))
        );
    }
}
