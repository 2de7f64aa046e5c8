//! The seam between apply and whatever remembers what was applied (the kustomize-controller's
//! applied-object tracker implements it): apply asks it whether an object is as last applied
//! with the same desired state, and tells it each object it applied or verified. Apply knows
//! nothing else of it.

use std::hash::{DefaultHasher, Hash, Hasher};

use kube::api::ApiResource;
use serde_json::Value;

use super::object::ObjectRef;
use super::owner::Owner;

/// What apply needs from a cache of applied objects. Whenever the cache is not sure, it answers
/// `false`, and apply takes the full path (GET, dry-run, apply) like Flux does.
pub trait AppliedCache: Send + Sync {
    /// Whether `obj` is exactly as last applied, with the desired state hash `desired`
    /// ([`desired_hash`]): nothing needs to be read, dry-run or applied.
    fn unchanged(&self, obj: &ObjectRef, desired: u64) -> bool;

    /// Whether `obj` is known not to exist with the owner labels (so the GET can be skipped).
    fn known_absent(&self, obj: &ObjectRef) -> bool;

    /// `obj` was applied or verified for `owner` with desired hash `desired`; `live` is the
    /// object as the server returned it, `wrote` whether this apply changed it.
    fn record(
        &self,
        obj: &ObjectRef,
        resource: &ApiResource,
        owner: &Owner,
        desired: u64,
        live: &Value,
        wrote: bool,
    );

    /// Forgets what it knows of `obj` as applied (skipped, or its apply failed).
    fn forget(&self, obj: &ObjectRef);
}

/// Hashes a JSON value independently of object key order (the tracker's fingerprints use it
/// too).
pub fn hash_value<H: Hasher>(v: &Value, h: &mut H) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => (2u8, n.to_string()).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(a) => {
            (4u8, a.len()).hash(h);
            for x in a {
                hash_value(x, h);
            }
        }
        Value::Object(m) => {
            (5u8, m.len()).hash(h);
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for k in keys {
                k.hash(h);
                if let Some(x) = m.get(k) {
                    hash_value(x, h);
                }
            }
        }
    }
}

/// A hash of a desired object (key order does not matter) mixed with `salt` (the settings that
/// change how it is applied: force, ignore rules, the impersonated user...).
pub fn desired_hash(desired: &Value, salt: u64) -> u64 {
    let mut h = DefaultHasher::new();
    salt.hash(&mut h);
    hash_value(desired, &mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn desired_hash_ignores_key_order_and_mixes_the_salt() {
        let a = json!({"a": 1, "b": {"c": [1, 2], "d": "x"}});
        let b = json!({"b": {"d": "x", "c": [1, 2]}, "a": 1});
        assert_eq!(desired_hash(&a, 7), desired_hash(&b, 7));
        assert_ne!(desired_hash(&a, 7), desired_hash(&a, 8));
        assert_ne!(desired_hash(&a, 7), desired_hash(&json!({"a": 1}), 7));
        assert_ne!(
            desired_hash(&json!([1, 2]), 0),
            desired_hash(&json!([2, 1]), 0)
        );
    }
}
