//! Builtin transformer and generator kinds (`apiVersion: builtin`) listed under `transformers:`
//! and `generators:`. Each directory of `tests/builtin_plugins/` is a kustomization; its
//! `expected.yaml` is what `kubectl kustomize` (kustomize v5.5.0) printed for it, or, for an
//! `err-*` directory, `kubectl-error.txt` is kubectl's error and `expected-error.txt` lists the
//! words our error must contain (one a line).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use rflux_kustomize::{BuildOptions, build, to_yaml_stream};
use serde_json::Value;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/builtin_plugins")
}

fn check_output(case: &str) {
    let dir = data().join(case);
    let objs: Vec<Value> = build(&dir, &BuildOptions::default())
        .unwrap_or_else(|e| panic!("{case}: {e}"))
        .into_iter()
        .map(|r| r.obj)
        .collect();
    let expected = std::fs::read_to_string(dir.join("expected.yaml")).unwrap();
    pretty_assertions::assert_eq!(to_yaml_stream(&objs), expected, "{case}");
}

fn check_error(case: &str) {
    let dir = data().join(case);
    let err = match build(&dir, &BuildOptions::default()) {
        Ok(objs) => panic!("{case}: built {} objects, kubectl fails", objs.len()),
        Err(e) => e.to_string(),
    };
    let kubectl = std::fs::read_to_string(dir.join("kubectl-error.txt")).unwrap();
    eprintln!("{case}\n  kubectl: {}\n  ours:    {err}", kubectl.trim());
    let words = std::fs::read_to_string(dir.join("expected-error.txt")).unwrap();
    for w in words.lines().filter(|l| !l.trim().is_empty()) {
        assert!(err.contains(w.trim()), "{case}: {err:?} lacks {w:?}");
    }
}

#[test]
fn label_and_annotation_transformers_touch_only_their_field_specs() {
    check_output("labels-annotations");
}

#[test]
fn namespace_transformer_unset_only_and_all_service_accounts() {
    check_output("namespace");
}

#[test]
fn namespace_transformer_field_specs_and_no_subjects() {
    check_output("namespace-specs");
}

#[test]
fn prefix_suffix_prefix_and_suffix_transformers() {
    check_output("prefix-suffix");
}

#[test]
fn image_tag_and_replica_count_transformers() {
    check_output("image-replicas");
}

#[test]
fn patch_transformers_strategic_merge_and_json6902() {
    check_output("patches");
}

#[test]
fn replacement_transformer_inline_and_path() {
    check_output("replacements");
}

#[test]
fn hash_transformer_hashes_generated_names_now() {
    check_output("hash");
}

#[test]
fn configmap_and_secret_generators_under_generators() {
    check_output("generators");
}

#[test]
fn errors_are_clear() {
    let mut cases: Vec<String> = std::fs::read_dir(data())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("err-"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 7, "{cases:?}");
    for c in &cases {
        check_error(c);
    }
}

#[test]
fn every_output_case_has_a_test() {
    let src = std::fs::read_to_string(file!()).unwrap_or_else(|_| {
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/builtin_plugins.rs"),
        )
        .unwrap()
    });
    for e in std::fs::read_dir(data()).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if !name.starts_with("err-") {
            assert!(
                src.contains(&format!("check_output(\"{name}\")")),
                "{name} untested"
            );
        }
    }
}
