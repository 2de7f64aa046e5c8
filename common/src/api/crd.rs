//! Generation of the CustomResourceDefinitions from the Rust types.
//!
//! The derived CRDs are post-processed so they match Flux's own CRDs field by field
//! (see `docs/crds.md`): no `nullable` markers, `spec` not required at the root,
//! a `status` default of `{observedGeneration: -1}`, and Flux's CRD labels and
//! annotations. Everything here is pure; the `crdgen` binary does the file I/O.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Map, Value, json};

use super::gitrepository::GitRepository;
use super::kustomization::Kustomization;
use super::meta::status_default;
use super::ocirepository::OciRepository;

/// Annotation that keeps a Flux Kustomization applying these CRDs from running
/// variable substitution on them (Flux sets it on all its CRDs).
pub const SUBSTITUTE_ANNOTATION: (&str, &str) =
    ("kustomize.toolkit.fluxcd.io/substitute", "disabled");

/// The Flux distribution version these CRDs are API-compatible with; written to the
/// `app.kubernetes.io/version` label that `flux check` and `flux version` read.
pub const FLUX_COMPAT_VERSION: &str = "v2.9.0";

/// File name of the GitRepository CRD under `manifests/crds/`.
pub const GITREPOSITORIES_FILE: &str = "gitrepositories.yaml";
/// File name of the Kustomization CRD under `manifests/crds/`.
pub const KUSTOMIZATIONS_FILE: &str = "kustomizations.yaml";
/// File name of the OCIRepository CRD under `manifests/crds/`.
pub const OCIREPOSITORIES_FILE: &str = "ocirepositories.yaml";
/// File name of the kustomize `kustomization.yaml` listing the CRDs.
pub const KUSTOMIZE_FILE: &str = "kustomization.yaml";

/// Errors of CRD generation.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The CRD could not be converted to or from JSON.
    #[error("CRD {name} does not (de)serialize: {source}")]
    Json {
        /// CRD name.
        name: String,
        /// Underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// The CRD could not be rendered as YAML.
    #[error("CRD {name} cannot be rendered as YAML: {source}")]
    Yaml {
        /// CRD name.
        name: String,
        /// Underlying error.
        #[source]
        source: serde_saphyr::ser::Error,
    },
    /// The derived CRD does not have the expected shape.
    #[error("CRD {name}: unexpected shape: {what}")]
    Shape {
        /// CRD name.
        name: String,
        /// What was missing.
        what: &'static str,
    },
}

/// The GitRepository CRD (`gitrepositories.source.toolkit.fluxcd.io`).
pub fn gitrepositories_crd() -> Result<CustomResourceDefinition, CrdError> {
    finalize(GitRepository::crd(), "source-controller")
}

/// The OCIRepository CRD (`ocirepositories.source.toolkit.fluxcd.io`).
pub fn ocirepositories_crd() -> Result<CustomResourceDefinition, CrdError> {
    finalize(OciRepository::crd(), "source-controller")
}

/// The Kustomization CRD (`kustomizations.kustomize.toolkit.fluxcd.io`).
pub fn kustomizations_crd() -> Result<CustomResourceDefinition, CrdError> {
    finalize(Kustomization::crd(), "kustomize-controller")
}

/// Every CRD as a JSON value, in the form written to disk, in the order of [`crd_files`].
pub fn crd_values() -> Result<Vec<Value>, CrdError> {
    [
        gitrepositories_crd()?,
        ocirepositories_crd()?,
        kustomizations_crd()?,
    ]
    .iter()
    .map(|crd| {
        serde_json::to_value(crd).map_err(|source| CrdError::Json {
            name: crd.metadata.name.clone().unwrap_or_default(),
            source,
        })
    })
    .collect()
}

/// The CRD file names under `manifests/crds/`, in the order of [`crd_values`].
pub fn crd_files() -> [&'static str; 3] {
    [
        GITREPOSITORIES_FILE,
        OCIREPOSITORIES_FILE,
        KUSTOMIZATIONS_FILE,
    ]
}

/// The CRD files of the `fluxcd.controlplane.io` kinds of resourceset-controller, written by
/// their own generator (`super::resourceset::crd`, whose tests check these names against its
/// `crd_files`; named here so this file does not import that one, which imports this one).
pub const OPERATOR_CRD_FILES: [&str; 2] = ["resourcesets.yaml", "resourcesetinputproviders.yaml"];

/// Every CRD file `manifests/crds/kustomization.yaml` installs: Flux's kinds ([`crd_files`]),
/// then [`OPERATOR_CRD_FILES`].
pub fn installed_crd_files() -> Vec<&'static str> {
    let mut files = crd_files().to_vec();
    files.extend(OPERATOR_CRD_FILES);
    files
}

/// The files of `manifests/crds/` for Flux's kinds as `(file name, contents)`, and the
/// `kustomization.yaml` that installs [`installed_crd_files`]; deterministic.
pub fn manifest_files() -> Result<Vec<(&'static str, String)>, CrdError> {
    let values = crd_values()?;
    let mut out = Vec::new();
    for (file, value) in crd_files().into_iter().zip(values) {
        out.push((file, render_yaml(&value)?));
    }
    let kustomize = json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": installed_crd_files(),
    });
    out.push((KUSTOMIZE_FILE, render_yaml(&kustomize)?));
    Ok(out)
}

/// Renders a JSON value as a YAML document (starting with `---`), keys sorted so
/// the output does not depend on field declaration order.
pub fn render_yaml(value: &Value) -> Result<String, CrdError> {
    let sorted = sort_keys(value);
    let body = serde_saphyr::to_string(&sorted).map_err(|source| CrdError::Yaml {
        name: value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("kustomization.yaml")
            .to_string(),
        source,
    })?;
    Ok(format!("---\n{body}"))
}

fn sort_keys(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                out.insert(k.clone(), sort_keys(&map[k]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(sort_keys).collect()),
        other => other.clone(),
    }
}

/// Turns a derived CRD into the Flux-compatible one.
fn finalize(
    crd: CustomResourceDefinition,
    component: &str,
) -> Result<CustomResourceDefinition, CrdError> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let json_err = |source| CrdError::Json {
        name: name.clone(),
        source,
    };
    let shape = |what| CrdError::Shape {
        name: name.clone(),
        what,
    };
    let mut v = serde_json::to_value(&crd).map_err(json_err)?;

    let meta = v
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| shape("metadata"))?;
    meta.insert(
        "annotations".into(),
        json!({ SUBSTITUTE_ANNOTATION.0: SUBSTITUTE_ANNOTATION.1 }),
    );
    meta.insert(
        "labels".into(),
        json!({
            "app.kubernetes.io/component": component,
            "app.kubernetes.io/instance": "flux-system",
            "app.kubernetes.io/part-of": "flux",
            "app.kubernetes.io/version": FLUX_COMPAT_VERSION,
        }),
    );

    shape_schema(&mut v, &name, |props| {
        let status = props
            .get_mut("status")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| shape("status schema"))?;
        status.insert("default".into(), status_default());
        Ok(())
    })?;
    serde_json::from_value(v).map_err(json_err)
}

/// What every generated CRD gets: `listKind`, and per version a root schema without
/// `required`/`title`/`nullable`, with `metadata: {type: object}` and string `apiVersion`/`kind`;
/// `per_version` then adjusts the root properties.
pub(crate) fn shape_schema(
    v: &mut Value,
    name: &str,
    mut per_version: impl FnMut(&mut Map<String, Value>) -> Result<(), CrdError>,
) -> Result<(), CrdError> {
    let shape = |what| CrdError::Shape {
        name: name.to_string(),
        what,
    };
    let names = v
        .pointer_mut("/spec/names")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| shape("spec.names"))?;
    let list_kind = names
        .get("kind")
        .and_then(Value::as_str)
        .map(|kind| format!("{kind}List"))
        .ok_or_else(|| shape("spec.names.kind"))?;
    names.insert("listKind".into(), Value::String(list_kind));
    let versions = v
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| shape("spec.versions"))?;
    for version in versions {
        let root = version
            .pointer_mut("/schema/openAPIV3Schema")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| shape("openAPIV3Schema"))?;
        // Flux accepts objects without a spec (the controller then reports the error).
        root.remove("required");
        root.remove("title");
        strip_nullable(root);
        let props = root
            .get_mut("properties")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| shape("root properties"))?;
        props.insert("metadata".into(), json!({ "type": "object" }));
        for key in ["apiVersion", "kind"] {
            props
                .entry(key)
                .or_insert_with(|| json!({ "type": "string" }));
        }
        per_version(props)?;
    }
    Ok(())
}

/// Removes `nullable: true` everywhere: Flux's schemas have none, and the API server
/// then prunes explicit nulls instead of storing them.
fn strip_nullable(map: &mut Map<String, Value>) {
    map.remove("nullable");
    for (key, value) in map.iter_mut() {
        // `default` and `enum` hold data, not schemas.
        if key == "default" || key == "enum" || key == "x-kubernetes-validations" {
            continue;
        }
        match value {
            Value::Object(inner) => strip_nullable(inner),
            Value::Array(items) => {
                for item in items {
                    if let Value::Object(inner) = item {
                        strip_nullable(inner);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn contains_key(v: &Value, key: &str) -> bool {
        match v {
            Value::Object(m) => m.contains_key(key) || m.values().any(|x| contains_key(x, key)),
            Value::Array(a) => a.iter().any(|x| contains_key(x, key)),
            _ => false,
        }
    }

    #[test]
    fn generated_crds_have_flux_shape() {
        let values = crd_values().unwrap();
        assert_eq!(values.len(), crd_files().len());
        assert_eq!(values.len(), 3);
        for v in &values {
            assert!(!contains_key(v, "nullable"));
            let root = v
                .pointer("/spec/versions/0/schema/openAPIV3Schema")
                .unwrap();
            assert!(root.get("required").is_none());
            assert_eq!(
                root.pointer("/properties/status/default"),
                Some(&json!({"observedGeneration": -1}))
            );
            assert_eq!(
                v.pointer("/metadata/annotations/kustomize.toolkit.fluxcd.io~1substitute"),
                Some(&json!("disabled"))
            );
        }
    }

    #[test]
    fn kustomization_installs_flux_and_operator_crds() {
        let files = manifest_files().unwrap();
        let (_, text) = files.iter().find(|(f, _)| *f == KUSTOMIZE_FILE).unwrap();
        let doc: Value = serde_saphyr::from_str(text).unwrap();
        let listed: Vec<&str> = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(
            listed,
            [
                GITREPOSITORIES_FILE,
                OCIREPOSITORIES_FILE,
                KUSTOMIZATIONS_FILE,
                "resourcesets.yaml",
                "resourcesetinputproviders.yaml",
            ]
        );
    }

    #[test]
    fn rendering_is_deterministic() {
        let a = manifest_files().unwrap();
        let b = manifest_files().unwrap();
        assert_eq!(a, b);
        assert!(a.iter().all(|(_, s)| s.starts_with("---\n")));
    }
}
