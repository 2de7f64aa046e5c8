//! Finalizer helpers (JSON merge patches on `metadata.finalizers`, guarded by
//! `metadata.resourceVersion` so a concurrent change makes the patch fail with a conflict
//! instead of silently dropping someone else's finalizer).

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Flux's finalizer.
pub const FLUX_FINALIZER: &str = "finalizers.fluxcd.io";

/// True when `finalizer` is present.
pub fn has_finalizer(finalizers: &[String], finalizer: &str) -> bool {
    finalizers.iter().any(|f| f == finalizer)
}

/// The list with `finalizer` appended, or `None` when it is already there.
pub fn with_finalizer(finalizers: &[String], finalizer: &str) -> Option<Vec<String>> {
    if has_finalizer(finalizers, finalizer) {
        return None;
    }
    let mut out = finalizers.to_vec();
    out.push(finalizer.to_string());
    Some(out)
}

/// The list without `finalizer`, or `None` when it was absent.
pub fn without_finalizer(finalizers: &[String], finalizer: &str) -> Option<Vec<String>> {
    if !has_finalizer(finalizers, finalizer) {
        return None;
    }
    Some(
        finalizers
            .iter()
            .filter(|f| f.as_str() != finalizer)
            .cloned()
            .collect(),
    )
}

/// JSON merge patch setting `metadata.finalizers` (and `resourceVersion` for optimistic locking
/// when given). An empty list is sent as `null`, which removes the field.
pub fn finalizers_patch(finalizers: &[String], resource_version: Option<&str>) -> Value {
    let list = if finalizers.is_empty() {
        Value::Null
    } else {
        json!(finalizers)
    };
    let mut meta = serde_json::Map::new();
    meta.insert("finalizers".into(), list);
    if let Some(rv) = resource_version {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
    json!({ "metadata": Value::Object(meta) })
}

/// Adds `finalizer` to `obj` if missing; returns the patched object, or `None` when nothing
/// had to change.
pub async fn add_finalizer<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let Some(list) = with_finalizer(obj.finalizers(), finalizer) else {
        return Ok(None);
    };
    let patch = finalizers_patch(&list, obj.resource_version().as_deref());
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(Some)
}

/// Removes `finalizer` from `obj` if present; returns the patched object, or `None` when nothing
/// had to change. A NotFound (object already gone) is reported as `Ok(None)`.
pub async fn remove_finalizer<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let Some(list) = without_finalizer(obj.finalizers(), finalizer) else {
        return Ok(None);
    };
    let patch = finalizers_patch(&list, obj.resource_version().as_deref());
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(o) => Ok(Some(o)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}
