//! Builds every case directory under a folder and compares the printed output, byte for byte,
//! with what `kubectl kustomize` (Kustomize v5.5.0) printed for the same tree (`expected.yaml`),
//! or checks that the build fails where kubectl failed (`expected-error.txt`).
//! Shared by `generator_merge.rs` and `scope_cases.rs`.

use std::path::{Path, PathBuf};

use rflux_kustomize::{BuildOptions, build, to_yaml_stream};
use serde_json::Value;

/// Runs every case of `dir` (relative to the crate) and returns how many ran.
pub fn run_cases(dir: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let sub = std::fs::read_to_string(case.join("BUILD"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| ".".into());
        let result = build(&case.join(&sub), &BuildOptions::default());
        let expected = std::fs::read_to_string(case.join("expected.yaml")).ok();
        let problem = match (result, expected) {
            (Ok(objs), Some(want)) => {
                let got = to_yaml_stream(&objs.into_iter().map(|r| r.obj).collect::<Vec<Value>>());
                (got != want)
                    .then(|| format!("output differs:\n--- got\n{got}--- expected\n{want}"))
            }
            (Ok(_), None) => {
                let err = std::fs::read_to_string(case.join("expected-error.txt")).unwrap();
                Some(format!("built, but kubectl failed: {err}"))
            }
            (Err(e), Some(_)) => Some(format!("build error: {e}")),
            (Err(e), None) => {
                println!("{name}: fails as kubectl does: {e}");
                None
            }
        };
        match problem {
            None => println!("ok   {name}"),
            Some(p) => {
                println!("FAIL {name}: {p}");
                failures.push(name);
            }
        }
    }
    println!(
        "{}: {} of {} cases match kubectl",
        dir,
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "cases differing from kubectl: {failures:#?}"
    );
    cases.len()
}
