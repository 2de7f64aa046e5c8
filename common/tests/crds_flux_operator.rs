//! The `fluxcd.controlplane.io` CRDs (ResourceSet, ResourceSetInputProvider): (a) the committed
//! manifests are up to date and not installed by `manifests/crds/kustomization.yaml`, (b) they
//! match flux-operator v0.59.0's CRDs structurally (everything except descriptions), (c) the
//! reference examples (E1, E7, E8, E9 of `resourceset.md` §13) fit the schema and survive a
//! round trip through the Rust types.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use rflux_common::api::resourceset::crd;
use rflux_common::api::{
    InputProviderType, InputStrategy, ResourceSet, ResourceSetInputProvider, ResourceSetSpecError,
};
use serde_json::{Value, json};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// flux-operator's CRD directory, or `None` (with a note on stdout) when `../shared` is absent.
fn upstream_dir() -> Option<PathBuf> {
    let dir = repo_root().join("../shared/reference/flux-operator/crds");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!(
            "skipped: {} is absent, cannot compare with flux-operator's CRDs",
            dir.display()
        );
        None
    }
}

const RSET_UPSTREAM: &str = "fluxcd.controlplane.io_resourcesets.yaml";
const RSIP_UPSTREAM: &str = "fluxcd.controlplane.io_resourcesetinputproviders.yaml";

fn load_yaml(path: &Path) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ours(file: &str) -> Value {
    let values = crd::crd_values().unwrap();
    let at = crd::crd_files().iter().position(|f| *f == file).unwrap();
    values[at].clone()
}

#[test]
fn committed_manifests_are_up_to_date() {
    let dir = repo_root().join("manifests/crds");
    for (name, expected) in crd::manifest_files().unwrap() {
        let path = dir.join(name);
        let actual = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            actual == expected,
            "{} is out of date with the Rust API types; run `make manifests`",
            path.display()
        );
        let parsed: Value = serde_saphyr::from_str(&actual).unwrap();
        assert_eq!(parsed, ours(name));
    }
}

#[test]
fn operator_crds_are_installed() {
    let text =
        std::fs::read_to_string(repo_root().join("manifests/crds/kustomization.yaml")).unwrap();
    for file in crd::crd_files() {
        assert!(text.contains(file), "{file} is not listed for installation");
    }
}

#[path = "support/crd_diff.rs"]
mod crd_diff;
use crd_diff::strip_descriptions;

fn diff(path: &str, ours: &Value, theirs: &Value, out: &mut Vec<String>) {
    crd_diff::diff_as("upstream", path, ours, theirs, out);
}

/// Structural comparison of one of our CRDs with flux-operator's.
fn compare(ours: &Value, theirs: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for ptr in [
        "/apiVersion",
        "/kind",
        "/metadata/name",
        "/spec/group",
        "/spec/names",
        "/spec/scope",
    ] {
        let get = |v: &Value| v.pointer(ptr).cloned().unwrap_or(Value::Null);
        diff(ptr, &get(ours), &get(theirs), &mut out);
    }
    // annotations other than controller-gen's version marker
    if let Some(Value::Object(ann)) = theirs.pointer("/metadata/annotations") {
        for (k, v) in ann
            .iter()
            .filter(|(k, _)| !k.starts_with("controller-gen."))
        {
            let mine = ours.pointer("/metadata/annotations").and_then(|a| a.get(k));
            if mine != Some(v) {
                out.push(format!(
                    "/metadata/annotations/{k}: ours {mine:?} upstream {v}"
                ));
            }
        }
    }
    let versions = |v: &Value| {
        v["spec"]["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let (ov, tv) = (versions(ours), versions(theirs));
    if ov.len() != tv.len() {
        out.push(format!(
            "/spec/versions: ours {} upstream {}",
            ov.len(),
            tv.len()
        ));
    }
    for (o, t) in ov.iter().zip(&tv) {
        let name = t["name"].as_str().unwrap_or("?");
        diff(
            &format!("/versions/{name}"),
            &strip_descriptions(o),
            &strip_descriptions(t),
            &mut out,
        );
    }
    out
}

fn check_against_upstream(file: &str, upstream: &str) {
    let Some(dir) = upstream_dir() else { return };
    let theirs = load_yaml(&dir.join(upstream));
    let mine = ours(file);
    let diffs = compare(&mine, &theirs);
    assert!(
        diffs.is_empty(),
        "{file} differs from flux-operator's {upstream}:\n  {}",
        diffs.join("\n  ")
    );
}

#[test]
fn resourceset_crd_matches_flux_operator() {
    check_against_upstream(crd::RESOURCESETS_FILE, RSET_UPSTREAM);
}

#[test]
fn resourcesetinputprovider_crd_matches_flux_operator() {
    check_against_upstream(crd::RESOURCESETINPUTPROVIDERS_FILE, RSIP_UPSTREAM);
}

type Mutation = (&'static str, Box<dyn Fn(&mut Value)>);

fn mutations() -> Vec<Mutation> {
    const SPEC: &str = "/spec/versions/0/schema/openAPIV3Schema/properties/spec";
    const STATUS: &str = "/spec/versions/0/schema/openAPIV3Schema/properties/status";
    fn at<'a>(v: &'a mut Value, ptr: &str) -> &'a mut Value {
        v.pointer_mut(ptr)
            .unwrap_or_else(|| panic!("no {ptr} in the CRD"))
    }
    fn obj<'a>(v: &'a mut Value, ptr: &str) -> &'a mut serde_json::Map<String, Value> {
        at(v, ptr).as_object_mut().unwrap()
    }
    vec![
        (
            "spec-level CEL rule",
            Box::new(|v| {
                *at(v, &format!("{SPEC}/x-kubernetes-validations/1/rule")) = json!("true");
            }),
        ),
        (
            "CEL message",
            Box::new(|v| {
                *at(
                    v,
                    &format!("{SPEC}/properties/steps/x-kubernetes-validations/0/message"),
                ) = json!("unique");
            }),
        ),
        (
            "preserve-unknown-fields",
            Box::new(|v| {
                obj(v, &format!("{SPEC}/properties/resources/items"))
                    .remove("x-kubernetes-preserve-unknown-fields");
            }),
        ),
        (
            "preserve-unknown-fields of inputs",
            Box::new(|v| {
                *at(
                    v,
                    &format!("{SPEC}/properties/inputs/items/additionalProperties"),
                ) = json!({"type": "string"});
            }),
        ),
        (
            "enum",
            Box::new(|v| {
                at(
                    v,
                    &format!("{SPEC}/properties/inputStrategy/properties/name/enum"),
                )
                .as_array_mut()
                .unwrap()
                .pop();
            }),
        ),
        (
            "pattern",
            Box::new(|v| {
                obj(v, &format!("{SPEC}/properties/steps/items/properties/name")).remove("pattern");
            }),
        ),
        (
            "maxItems",
            Box::new(|v| {
                *at(v, &format!("{SPEC}/properties/steps/maxItems")) = json!(21);
            }),
        ),
        (
            "atomic selector",
            Box::new(|v| {
                obj(
                    v,
                    &format!("{SPEC}/properties/inputsFrom/items/properties/selector"),
                )
                .remove("x-kubernetes-map-type");
            }),
        ),
        (
            "required",
            Box::new(|v| {
                *at(v, &format!("{SPEC}/properties/dependsOn/items/required")) =
                    json!(["name", "kind"]);
            }),
        ),
        (
            "status field",
            Box::new(|v| {
                obj(v, &format!("{STATUS}/properties")).remove("externalChecksumRefs");
            }),
        ),
        (
            "printer column",
            Box::new(|v| {
                at(v, "/spec/versions/0/additionalPrinterColumns")
                    .as_array_mut()
                    .unwrap()
                    .swap(0, 1);
            }),
        ),
        (
            "status subresource",
            Box::new(|v| {
                obj(v, "/spec/versions/0").remove("subresources");
            }),
        ),
        (
            "short name",
            Box::new(|v| {
                *at(v, "/spec/names/shortNames") = json!(["rs"]);
            }),
        ),
        (
            "category",
            Box::new(|v| {
                at(v, "/spec/names/categories")
                    .as_array_mut()
                    .unwrap()
                    .pop();
            }),
        ),
        (
            "extra field",
            Box::new(|v| {
                obj(v, &format!("{SPEC}/properties"))
                    .insert("suspend".into(), json!({"type": "boolean"}));
            }),
        ),
        (
            "nullable",
            Box::new(|v| {
                obj(v, &format!("{SPEC}/properties/wait")).insert("nullable".into(), json!(true));
            }),
        ),
        (
            "annotation",
            Box::new(|v| {
                obj(v, "/metadata")
                    .entry("annotations")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .unwrap()
                    .insert("x".into(), json!("y"));
            }),
        ),
    ]
}

/// The comparison must notice a change in every aspect it is trusted with.
#[test]
fn comparison_detects_differences() {
    let Some(dir) = upstream_dir() else { return };
    let theirs = load_yaml(&dir.join(RSET_UPSTREAM));
    assert!(compare(&theirs, &theirs).is_empty());
    for (what, mutate) in mutations() {
        let mut changed = theirs.clone();
        mutate(&mut changed);
        assert!(
            !compare(&changed, &theirs).is_empty() || !compare(&theirs, &changed).is_empty(),
            "a changed {what} went unnoticed"
        );
    }
    // RSIP-only aspects: a default and the integer bound
    let rsip = load_yaml(&dir.join(RSIP_UPSTREAM));
    let spec = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties";
    for (ptr, value) in [
        ("schedule/items/properties/timeZone/default", json!("Local")),
        ("filter/properties/limit/maximum", json!(1000)),
        ("type/enum/0", json!("Inline")),
    ] {
        let mut changed = rsip.clone();
        *changed.pointer_mut(&format!("{spec}/{ptr}")).unwrap() = value;
        assert!(!compare(&changed, &rsip).is_empty(), "{ptr} went unnoticed");
    }
    // descriptions are ignored on purpose
    let mut reworded = theirs.clone();
    *reworded
        .pointer_mut(
            "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/wait/description",
        )
        .unwrap() = json!("other words");
    assert!(compare(&reworded, &theirs).is_empty());
}

#[path = "crds_flux_operator/samples.rs"]
mod samples;
