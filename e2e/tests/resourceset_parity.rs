//! Our ResourceSet engine side by side with flux-operator's (issue 19): every case of
//! `tests/data/resourceset/` is built by flux-operator's CLI (`flux-operator build resourceset`,
//! built from the Go module proxy by `e2e/flux-operator/build.sh`) and by
//! `resourceset_controller::offline::build_offline` (the same inputs, read with the same YAML
//! 1.1 reader, `flux-operator-yaml2json`). The generated objects must be equal, in order; a case
//! the CLI refuses must be refused by ours too. Skips (saying why) when the CLI is not built.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use rflux_common::api::resourceset::ResourceSet;
use rflux_common::api::resourcesetinputprovider::ResourceSetInputProvider;
use rflux_e2e::flux_operator;
use serde_json::Value;

fn case_dirs() -> Vec<PathBuf> {
    let root = rflux_e2e::repo_root().join("e2e/tests/data/resourceset");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("rset.yaml").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// Our build of a case, all steps' objects in order.
fn ours(dir: &Path) -> Result<Vec<Value>, String> {
    let read = |name: &str| -> Result<Vec<Value>, String> {
        let p = dir.join(name);
        if !p.is_file() {
            return Ok(Vec::new());
        }
        flux_operator::yaml_to_json(&std::fs::read_to_string(p).map_err(|e| e.to_string())?)
    };
    let rset = read("rset.yaml")?;
    let rs: ResourceSet = serde_json::from_value(rset.into_iter().next().ok_or("empty rset.yaml")?)
        .map_err(|e| e.to_string())?;
    let providers: Vec<ResourceSetInputProvider> = read("rsip.yaml")?
        .into_iter()
        .map(|v| serde_json::from_value(v).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let steps = resourceset_controller::offline::build_offline(&rs, &providers)
        .map_err(|e| e.to_string())?;
    let objects: Vec<Value> = steps.into_iter().flat_map(|s| s.objects).collect();
    if objects.is_empty() {
        // The CLI's refusal of an empty result.
        return Err("no objects were generated".into());
    }
    Ok(objects)
}

#[test]
fn every_case_builds_the_same_objects_as_flux_operator() {
    if flux_operator::cli().is_none() || flux_operator::yaml2json().is_none() {
        eprintln!(
            "skipping: flux-operator is not built in {} (run e2e/flux-operator/build.sh)",
            flux_operator::bin_dir().display()
        );
        return;
    }
    let mut failures = Vec::new();
    let dirs = case_dirs();
    assert!(dirs.len() >= 12, "{} cases", dirs.len());
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let theirs = flux_operator::build_resourceset(dir);
        let mine = ours(dir);
        match (&theirs, &mine) {
            (Ok(a), Ok(b)) if a == b => println!("{name}: {} objects, equal", a.len()),
            (Err(a), Err(b)) => println!("{name}: both refuse\n  flux-operator: {a}\n  ours: {b}"),
            _ => {
                println!("{name}: DIFFERENT\n  flux-operator: {theirs:#?}\n  ours: {mine:#?}");
                failures.push(name);
            }
        }
    }
    assert!(failures.is_empty(), "cases that differ: {failures:?}");
}
