//! The generated CRDs: (a) the committed manifests are up to date, (b) they match
//! Flux's CRDs structurally (everything except descriptions).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use rflux_common::api::crd::{self, manifest_files};
use serde_json::{Value, json};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crate dir has a parent")
        .to_path_buf()
}

/// Flux's CRD directory, or `None` (with a note on stdout) when `../shared` is absent.
fn flux_crds_dir() -> Option<PathBuf> {
    let dir = repo_root().join("../shared/reference/flux/crds");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!(
            "skipped: {} is absent, cannot compare with Flux's CRDs",
            dir.display()
        );
        None
    }
}

fn load_yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

#[test]
fn committed_manifests_are_up_to_date() {
    let dir = repo_root().join("manifests/crds");
    for (name, expected) in manifest_files().unwrap() {
        let path = dir.join(name);
        let actual = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            actual == expected,
            "{} is out of date with the Rust API types; run `make manifests` and commit the result",
            path.display()
        );
    }
}

#[test]
fn committed_manifests_parse_back_to_the_generated_crds() {
    let values = crd::crd_values().unwrap();
    let files = manifest_files().unwrap();
    for (value, (_, text)) in values.iter().zip(files.iter()) {
        let parsed: Value = serde_saphyr::from_str(text).unwrap();
        assert_eq!(&parsed, value);
    }
}

#[path = "support/crd_diff.rs"]
mod crd_diff;
use crd_diff::strip_descriptions;

fn diff(path: &str, ours: &Value, flux: &Value, out: &mut Vec<String>) {
    crd_diff::diff_as("flux", path, ours, flux, out);
}

fn v1_version(crd: &Value) -> Value {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find(|v| v["name"] == "v1"))
        .cloned()
        .unwrap_or_else(|| panic!("no v1 version in {}", crd["metadata"]["name"]))
}

/// Structural comparison of one of our CRDs with Flux's; returns the differences.
fn compare_with_flux(ours: &Value, flux: &Value) -> Vec<String> {
    let mut out = Vec::new();
    // identity, names, scope
    for ptr in [
        "/apiVersion",
        "/kind",
        "/metadata/name",
        "/spec/group",
        "/spec/names",
        "/spec/scope",
    ] {
        diff(
            ptr,
            ours.pointer(ptr).unwrap_or(&Value::Null),
            flux.pointer(ptr).unwrap_or(&Value::Null),
            &mut out,
        );
    }
    // Flux's own annotations, except the controller-gen marker
    if let Some(Value::Object(ann)) = flux.pointer("/metadata/annotations") {
        for (k, v) in ann {
            if k.starts_with("controller-gen.") {
                continue;
            }
            let ours_v = ours
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(k))
                .unwrap_or(&Value::Null);
            if ours_v != v {
                out.push(format!("/metadata/annotations/{k}: ours {ours_v} flux {v}"));
            }
        }
    }
    // the served/stored v1 version: printer columns, subresources, schema
    let (ov, fv) = (v1_version(ours), v1_version(flux));
    for key in [
        "served",
        "storage",
        "additionalPrinterColumns",
        "subresources",
        "deprecated",
    ] {
        diff(
            &format!("/v1/{key}"),
            ov.get(key).unwrap_or(&Value::Null),
            fv.get(key).unwrap_or(&Value::Null),
            &mut out,
        );
    }
    diff(
        "/v1/schema",
        &strip_descriptions(&ov["schema"]),
        &strip_descriptions(&fv["schema"]),
        &mut out,
    );
    // every version Flux serves, we serve (and no more)
    let names = |crd: &Value| -> Vec<Value> {
        crd.pointer("/spec/versions")
            .and_then(Value::as_array)
            .map(|vs| vs.iter().map(|v| json!([v["name"], v["served"]])).collect())
            .unwrap_or_default()
    };
    if names(ours) != names(flux) {
        out.push(format!(
            "/spec/versions: ours {:?} flux {:?}",
            names(ours),
            names(flux)
        ));
    }
    out
}

fn check_against_flux(file: &str, ours: Value) {
    let Some(dir) = flux_crds_dir() else { return };
    let flux = load_yaml(&dir.join(file));
    let diffs = compare_with_flux(&ours, &flux);
    assert!(
        diffs.is_empty(),
        "{} differs from Flux's {file}:\n  {}",
        ours["metadata"]["name"],
        diffs.join("\n  ")
    );
}

#[test]
fn gitrepository_crd_matches_flux() {
    let ours = serde_json::to_value(crd::gitrepositories_crd().unwrap()).unwrap();
    check_against_flux("source.toolkit.fluxcd.io_gitrepositories.yaml", ours);
}

#[test]
fn ocirepository_crd_matches_flux() {
    let ours = serde_json::to_value(crd::ocirepositories_crd().unwrap()).unwrap();
    check_against_flux("source.toolkit.fluxcd.io_ocirepositories.yaml", ours);
}

#[test]
fn kustomization_crd_matches_flux() {
    let ours = serde_json::to_value(crd::kustomizations_crd().unwrap()).unwrap();
    check_against_flux("kustomize.toolkit.fluxcd.io_kustomizations.yaml", ours);
}

/// The comparison itself must notice a change in any checked aspect.
#[test]
fn comparison_detects_differences() {
    let Some(dir) = flux_crds_dir() else { return };
    let flux = load_yaml(&dir.join("source.toolkit.fluxcd.io_gitrepositories.yaml"));
    assert!(compare_with_flux(&flux, &flux).is_empty());
    let spec = "/spec/versions/0/schema/openAPIV3Schema/properties/spec";
    type Mutation = (&'static str, Box<dyn Fn(&mut Value)>);
    let mutations: Vec<Mutation> = vec![
        (
            "pattern",
            Box::new(move |v| {
                v.pointer_mut(&format!("{spec}/properties/interval"))
                    .unwrap()
                    .as_object_mut()
                    .unwrap()
                    .remove("pattern");
            }),
        ),
        (
            "default",
            Box::new(move |v| {
                *v.pointer_mut(&format!("{spec}/properties/timeout/default"))
                    .unwrap() = json!("30s");
            }),
        ),
        (
            "enum",
            Box::new(move |v| {
                v.pointer_mut(&format!("{spec}/properties/provider/enum"))
                    .unwrap()
                    .as_array_mut()
                    .unwrap()
                    .pop();
            }),
        ),
        (
            "required",
            Box::new(move |v| {
                *v.pointer_mut(&format!("{spec}/required")).unwrap() = json!(["url"]);
            }),
        ),
        (
            "cel",
            Box::new(move |v| {
                *v.pointer_mut(&format!("{spec}/x-kubernetes-validations/0/rule"))
                    .unwrap() = json!("true");
            }),
        ),
        (
            "printer column",
            Box::new(move |v| {
                v.pointer_mut("/spec/versions/0/additionalPrinterColumns")
                    .unwrap()
                    .as_array_mut()
                    .unwrap()
                    .remove(0);
            }),
        ),
        (
            "short name",
            Box::new(move |v| {
                *v.pointer_mut("/spec/names/shortNames").unwrap() = json!(["gr"]);
            }),
        ),
        (
            "extra field",
            Box::new(move |v| {
                v.pointer_mut(&format!("{spec}/properties"))
                    .unwrap()
                    .as_object_mut()
                    .unwrap()
                    .insert("extra".into(), json!({"type": "string"}));
            }),
        ),
        (
            "nullable",
            Box::new(move |v| {
                v.pointer_mut(&format!("{spec}/properties/ref"))
                    .unwrap()
                    .as_object_mut()
                    .unwrap()
                    .insert("nullable".into(), json!(true));
            }),
        ),
        (
            "annotation",
            Box::new(move |v| {
                v.pointer_mut("/metadata/annotations")
                    .unwrap()
                    .as_object_mut()
                    .unwrap()
                    .remove("kustomize.toolkit.fluxcd.io/substitute");
            }),
        ),
    ];
    for (what, mutate) in mutations {
        let mut changed = flux.clone();
        mutate(&mut changed);
        assert!(
            !compare_with_flux(&changed, &flux).is_empty(),
            "a changed {what} went unnoticed"
        );
    }
    // descriptions are ignored on purpose
    let mut reworded = flux.clone();
    *reworded
        .pointer_mut(&format!("{spec}/properties/url/description"))
        .unwrap() = json!("other words");
    assert!(compare_with_flux(&reworded, &flux).is_empty());
}

#[test]
fn crds_carry_flux_install_labels() {
    for crd in crd::crd_values().unwrap() {
        let labels = &crd["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/part-of"], "flux");
        assert_eq!(
            labels["app.kubernetes.io/version"],
            crd::FLUX_COMPAT_VERSION
        );
        assert!(labels["app.kubernetes.io/component"].is_string());
    }
}
