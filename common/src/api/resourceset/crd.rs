//! The CustomResourceDefinitions of the `fluxcd.controlplane.io` kinds (ResourceSet and
//! ResourceSetInputProvider), generated from the Rust types and post-processed to match
//! flux-operator's CRDs: no `nullable` markers, no root `required`/`title`, `metadata` as a
//! bare object, and `listKind`. Unlike the Flux CRDs (`super::super::crd`) they carry neither
//! Flux's install labels nor a `status` default. Pure; `crdgen` writes the files.
//!
//! The files are written next to the Flux CRDs in `manifests/crds/`, whose `kustomization.yaml`
//! installs them with Flux's (`super::super::crd::installed_crd_files`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

use super::super::crd::{CrdError, render_yaml, shape_schema};
use super::super::resourcesetinputprovider::ResourceSetInputProvider;
use super::ResourceSet;

/// File name of the ResourceSet CRD under `manifests/crds/`.
pub const RESOURCESETS_FILE: &str = "resourcesets.yaml";
/// File name of the ResourceSetInputProvider CRD under `manifests/crds/`.
pub const RESOURCESETINPUTPROVIDERS_FILE: &str = "resourcesetinputproviders.yaml";

/// The ResourceSet CRD (`resourcesets.fluxcd.controlplane.io`).
pub fn resourcesets_crd() -> Result<CustomResourceDefinition, CrdError> {
    finalize(ResourceSet::crd())
}

/// The ResourceSetInputProvider CRD (`resourcesetinputproviders.fluxcd.controlplane.io`).
pub fn resourcesetinputproviders_crd() -> Result<CustomResourceDefinition, CrdError> {
    finalize(ResourceSetInputProvider::crd())
}

/// Both CRDs as JSON values, in the order of [`crd_files`].
pub fn crd_values() -> Result<Vec<Value>, CrdError> {
    [resourcesets_crd()?, resourcesetinputproviders_crd()?]
        .iter()
        .map(|crd| {
            serde_json::to_value(crd).map_err(|source| CrdError::Json {
                name: crd.metadata.name.clone().unwrap_or_default(),
                source,
            })
        })
        .collect()
}

/// The CRD file names, in the order of [`crd_values`].
pub fn crd_files() -> [&'static str; 2] {
    [RESOURCESETS_FILE, RESOURCESETINPUTPROVIDERS_FILE]
}

/// The two CRD files as `(file name, contents)`, deterministic (keys sorted).
pub fn manifest_files() -> Result<Vec<(&'static str, String)>, CrdError> {
    let values = crd_values()?;
    crd_files()
        .into_iter()
        .zip(values)
        .map(|(file, value)| Ok((file, render_yaml(&value)?)))
        .collect()
}

fn finalize(crd: CustomResourceDefinition) -> Result<CustomResourceDefinition, CrdError> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let json_err = |source| CrdError::Json {
        name: name.clone(),
        source,
    };
    let mut v = serde_json::to_value(&crd).map_err(json_err)?;

    shape_schema(&mut v, &name, |_| Ok(()))?;
    serde_json::from_value(v).map_err(json_err)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_flux_kustomization_installs_these_files() {
        assert_eq!(crd_files(), super::super::super::crd::OPERATOR_CRD_FILES);
    }

    #[test]
    fn files_render_deterministically_and_carry_no_flux_labels() {
        let a = manifest_files().unwrap();
        assert_eq!(a, manifest_files().unwrap());
        assert_eq!(a.len(), 2);
        for v in crd_values().unwrap() {
            assert!(v.pointer("/metadata/labels").is_none());
            let root = v
                .pointer("/spec/versions/0/schema/openAPIV3Schema")
                .unwrap();
            assert!(root.get("required").is_none());
            assert!(root.pointer("/properties/status/default").is_none());
            assert!(!v.to_string().contains("\"nullable\""));
        }
    }
}
