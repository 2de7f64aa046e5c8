//! `kustomize_build`: structure-aware fuzzing of the kustomize build.
//!
//! The input bytes become (through `arbitrary`) a small tree of directories `d0..dN`, each
//! with an optional kustomization and resource files, that refer to each other with `../dK`
//! paths (cycles and diamonds included) and use the transformers, generators, patches and
//! replacements; `d0` is built the way the controller builds it (`build_flux_with`, Flux
//! overrides, the default budget with a short timeout). Property: no panic and no hang
//! beyond the budget (libFuzzer's `-timeout` is twice the budget); errors are fine. A
//! successful build prints to YAML that parses back to the same objects (the controller's
//! substitution goes through that text).

use std::fs;
use std::path::Path;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use rflux_kustomize::yaml::parse_stream;
use rflux_kustomize::{Budget, FluxOverrides, build_flux_with, to_yaml_stream};
use serde_json::Value;

use crate::kbuild_model::{Dir, Ovr, Word, gen_value};

const MAX_DIRS: usize = 6;

/// The whole fuzz input.
#[derive(Debug, Arbitrary)]
pub struct KBuildInput {
    pub(crate) dirs: Vec<Dir>,
    pub(crate) overrides: Ovr,
}

/// The files `data` describes, as (relative path, content).
pub fn render_tree(data: &[u8]) -> Vec<(String, String)> {
    match KBuildInput::arbitrary_take_rest(Unstructured::new(data)) {
        Ok(input) => render(&input),
        Err(_) => Vec::new(),
    }
}

fn render(input: &KBuildInput) -> Vec<(String, String)> {
    let n = input.dirs.len().clamp(1, MAX_DIRS);
    let mut files = Vec::new();
    for (i, d) in input.dirs.iter().take(MAX_DIRS).enumerate() {
        d.render(i, n, &mut files);
    }
    if input.dirs.is_empty() {
        files.push(("d0/r0.yaml".to_string(), String::new()));
    }
    files
}

fn overrides(o: &Ovr, n: usize) -> FluxOverrides {
    FluxOverrides {
        target_namespace: o.target_namespace.as_ref().map(Word::text),
        name_prefix: o.name_prefix.as_ref().map(Word::text),
        name_suffix: None,
        common_labels: o.labels.iter().map(|(k, v)| (k.text(), v.text())).collect(),
        common_annotations: Vec::new(),
        patches: o.patches.iter().map(|p| p.value(0, n)).collect(),
        images: o.images.iter().map(gen_value).collect(),
        components: o.components.iter().map(|r| r.path(0, n)).collect(),
        ignore_missing_components: o.ignore_missing_components,
        build_metadata: if o.build_metadata {
            vec!["originAnnotations".into(), "transformerAnnotations".into()]
        } else {
            Vec::new()
        },
        generate_names: false,
    }
}

pub fn kustomize_build(data: &[u8]) {
    let Ok(input) = KBuildInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let files = render(&input);
    let Ok(tmp) = tempfile::tempdir() else {
        panic!("cannot create a temporary directory");
    };
    let root = tmp.path().join("root");
    for (path, text) in &files {
        let p = root.join(path);
        if let Some(parent) = p.parent() {
            let _ = fs::create_dir_all(parent);
        }
        let _ = fs::write(&p, text);
    }
    let n = input.dirs.len().clamp(1, MAX_DIRS);
    let budget = Budget {
        timeout: Duration::from_secs(5),
        ..Budget::default()
    };
    let built = build_flux_with(
        &root,
        Path::new("d0"),
        &overrides(&input.overrides, n),
        &budget,
    );
    if crate::debug() {
        for (path, text) in &files {
            eprintln!("--- {path}\n{text}");
        }
        match &built {
            Ok(r) => eprintln!("=== built {} objects", r.len()),
            Err(e) => eprintln!("=== error: {e}"),
        }
    }
    let Ok(resources) = built else { return };
    let objs: Vec<Value> = resources.into_iter().map(|r| r.obj).collect();
    let printed = to_yaml_stream(&objs);
    match parse_stream(&printed, "printed") {
        Ok(back) => assert!(
            back.len() == objs.len()
                && back.iter().zip(&objs).all(|(a, b)| crate::yaml::same(a, b)),
            "printed build output does not read back the same\n{printed}"
        ),
        Err(e) => panic!("printed build output does not parse: {e}\n{printed}"),
    }
}
