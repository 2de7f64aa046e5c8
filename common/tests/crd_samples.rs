//! Flux's own v1 sample objects deserialize into the Rust types and serialize
//! back unchanged. Skips when `../shared` is absent.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use rflux_common::api::{GitRepository, Kustomization};
use serde_json::Value;

fn flux_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/flux");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!("skipped: {} is absent", dir.display());
        None
    }
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml") {
            out.push(path);
        }
    }
}

#[test]
fn flux_samples_round_trip_through_the_rust_types() {
    let Some(dir) = flux_dir() else { return };
    let mut files = Vec::new();
    yaml_files(&dir.join("samples"), &mut files);
    yaml_files(&dir.join("testdata"), &mut files);
    let (mut git, mut ks) = (0, 0);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
        for doc in docs {
            if doc.get("spec").is_none() {
                continue; // spec-less objects are not valid for the controllers
            }
            let back = match (doc["apiVersion"].as_str(), doc["kind"].as_str()) {
                (Some("source.toolkit.fluxcd.io/v1"), Some("GitRepository")) => {
                    git += 1;
                    let obj: GitRepository = serde_json::from_value(doc.clone())
                        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                    assert!(obj.spec.set_fields().contains(&"ref"));
                    serde_json::to_value(&obj).unwrap()
                }
                (Some("kustomize.toolkit.fluxcd.io/v1"), Some("Kustomization")) => {
                    ks += 1;
                    let obj: Kustomization = serde_json::from_value(doc.clone())
                        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                    serde_json::to_value(&obj).unwrap()
                }
                _ => continue,
            };
            assert_eq!(back["spec"], doc["spec"], "{}", file.display());
            assert_eq!(back["metadata"]["name"], doc["metadata"]["name"]);
        }
    }
    assert!(
        git >= 5 && ks >= 5,
        "found {git} GitRepositories, {ks} Kustomizations"
    );
}
