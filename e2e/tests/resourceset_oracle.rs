//! The ResourceSet cases of `tests/data/resourceset/` built by flux-operator's CLI (the oracle,
//! `rflux_e2e::flux_operator`), checked against what the spec (resourceset.md §13) and each
//! case's design say: the objects in build order (Kind, namespace, name), chosen fields, and the
//! owner labels on every object. A case directory with `expected-error.txt` must fail instead,
//! with that text in the error. Tests that need the CLI skip (with the reason printed) when
//! `e2e/flux-operator/build.sh` has not been run.
#![allow(clippy::unwrap_used)]

#[path = "resourceset_oracle/cases.rs"]
mod cases;

use std::path::{Path, PathBuf};

use cases::{CASES, Expect, adler32};
use rflux_e2e::flux_operator;
use serde_json::Value;

fn cases_dir() -> PathBuf {
    rflux_e2e::repo_root().join("e2e/tests/data/resourceset")
}

/// Case directories, sorted.
fn case_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("rset.yaml").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn expected_error(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join("expected-error.txt"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The oracle: flux-operator's own builder through its CLI.
fn oracle(case_dir: &Path) -> Result<Vec<Value>, String> {
    flux_operator::build_resourceset(case_dir)
}

/// Whether the CLI is built; prints why the calling test is skipped when not.
fn cli_ready(test: &str) -> bool {
    if flux_operator::cli().is_some() && flux_operator::yaml2json().is_some() {
        return true;
    }
    eprintln!(
        "skipping {test}: flux-operator is not built in {} (run e2e/flux-operator/build.sh)",
        flux_operator::bin_dir().display()
    );
    false
}

/// `Kind ns/name`, or `Kind name` for an object without a namespace.
fn object_id(o: &Value) -> String {
    let kind = o["kind"].as_str().unwrap_or("?");
    let name = o["metadata"]["name"].as_str().unwrap_or("?");
    match o["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// The object an expectation names: `Kind ns/name`, or `Kind ns/name#n` for its n-th
/// occurrence (0-based) when the same id is built more than once.
fn find<'a>(objects: &'a [Value], reference: &str) -> Option<&'a Value> {
    let (id, nth) = match reference.rsplit_once('#') {
        Some((id, n)) => (id, n.parse::<usize>().ok()?),
        None => (reference, 0),
    };
    objects.iter().filter(|o| object_id(o) == id).nth(nth)
}

/// `metadata.name` and `metadata.namespace` of the case's ResourceSet.
fn rset_identity(dir: &Path) -> (String, String) {
    let text = std::fs::read_to_string(dir.join("rset.yaml")).unwrap();
    let rset: Value = serde_saphyr::from_str(&text).unwrap();
    let get = |k: &str| rset["metadata"][k].as_str().unwrap_or_default().to_string();
    (get("name"), get("namespace"))
}

/// Checks `build`'s output for the case in `dir` against `expect`; returns every mismatch.
///
/// `build` is the engine under test, [`oracle`] for now. Our own ResourceSet engine plugs in
/// here: a `fn ours(case_dir: &Path) -> Result<Vec<Value>, String>` in this file that renders
/// `rset.yaml` (and `rsip.yaml`) with rflux's builder can be passed to `check_case` for every
/// case (the expectations are the same), and its objects compared with the oracle's one by one
/// with [`same_objects`].
fn check_case(
    dir: &Path,
    expect: &Expect,
    build: fn(&Path) -> Result<Vec<Value>, String>,
) -> Vec<String> {
    let objects = match build(dir) {
        Ok(objects) => objects,
        Err(e) => return vec![format!("build failed: {e}")],
    };
    let mut problems = Vec::new();
    if objects.is_empty() {
        problems.push("no objects".to_string());
    }
    let got: Vec<String> = objects.iter().map(object_id).collect();
    if got != expect.objects {
        problems.push(format!(
            "objects in build order:\n    got  {got:?}\n    want {:?}",
            expect.objects
        ));
    }
    let (name, namespace) = rset_identity(dir);
    for o in &objects {
        let labels = &o["metadata"]["labels"];
        if labels["resourceset.fluxcd.controlplane.io/name"] != name.as_str()
            || labels["resourceset.fluxcd.controlplane.io/namespace"] != namespace.as_str()
        {
            problems.push(format!(
                "{}: owner labels {labels} do not name {namespace}/{name}",
                object_id(o)
            ));
        }
    }
    for (reference, pointer, want) in &expect.fields {
        match find(&objects, reference).map(|o| o.pointer(pointer)) {
            None => problems.push(format!("{reference}: not built")),
            Some(got) if got != Some(want) => {
                problems.push(format!("{reference} {pointer}: got {got:?}, want {want}"));
            }
            Some(_) => {}
        }
    }
    for (reference, pointer) in &expect.absent {
        if let Some(got) = find(&objects, reference).and_then(|o| o.pointer(pointer)) {
            problems.push(format!("{reference} {pointer}: want absent, got {got}"));
        }
    }
    problems
}

/// Compares two builds object by object (same order, equal JSON).
fn same_objects(a: &[Value], b: &[Value]) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("{} objects vs {}", a.len(), b.len()));
    }
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return Err(format!("{} differs:\n  {x}\n  {y}", object_id(x)));
        }
    }
    Ok(())
}

#[test]
fn every_case_directory_has_expectations() {
    let dirs = case_dirs();
    assert!(dirs.len() >= 12, "only {} cases", dirs.len());
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_str().unwrap();
        let listed = CASES.iter().any(|(n, _)| *n == name);
        let error = expected_error(dir).is_some();
        assert!(
            listed != error,
            "{name}: needs exactly one of an entry in CASES or expected-error.txt"
        );
    }
    for (name, _) in CASES {
        assert!(
            cases_dir().join(name).join("rset.yaml").is_file(),
            "{name} has no rset.yaml"
        );
    }
}

#[test]
fn adler32_matches_the_spec_examples() {
    assert_eq!(adler32("foo"), "42074437");
    assert_eq!(adler32("6.0.4"), "48955639");
    assert_eq!(adler32(""), "1");
}

#[test]
fn oracle_builds_every_case_as_designed() {
    if !cli_ready("oracle_builds_every_case_as_designed") {
        return;
    }
    let mut failures = Vec::new();
    for (name, expect) in CASES {
        let problems = check_case(&cases_dir().join(name), &expect(), oracle);
        if problems.is_empty() {
            eprintln!("{name}: ok");
        } else {
            failures.push(format!("{name}:\n  {}", problems.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn oracle_reports_the_expected_build_errors() {
    if !cli_ready("oracle_reports_the_expected_build_errors") {
        return;
    }
    let mut seen = 0;
    for dir in case_dirs() {
        let Some(want) = expected_error(&dir) else {
            continue;
        };
        seen += 1;
        match oracle(&dir) {
            Ok(objects) => panic!(
                "{}: built {:?}, want an error with {want:?}",
                dir.display(),
                objects.iter().map(object_id).collect::<Vec<_>>()
            ),
            Err(e) => assert!(
                e.contains(&want),
                "{}: error {e:?} lacks {want:?}",
                dir.display()
            ),
        }
    }
    assert!(seen >= 3, "only {seen} error cases");
}

#[test]
fn oracle_groups_objects_by_step() {
    if !cli_ready("oracle_groups_objects_by_step") {
        return;
    }
    let steps = |case: &str| -> Vec<(Option<String>, Vec<String>)> {
        flux_operator::build_resourceset_steps(&cases_dir().join(case))
            .unwrap()
            .into_iter()
            .map(|s| (s.name, s.objects.iter().map(object_id).collect()))
            .collect()
    };
    let named = |n: &str, ids: &[&str]| {
        (
            Some(n.to_string()),
            ids.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        steps("e9-steps"),
        vec![
            named("db-migration", &["Job apps/db-migration"]),
            named("app-deploy", &["Kustomization apps/app-deploy"]),
        ]
    );
    // The `cleanup` step built nothing (its only Job is excluded): the CLI prints no header.
    assert_eq!(
        steps("steps-resources-beat-template"),
        vec![
            named(
                "config",
                &["ConfigMap apps/app-config", "ConfigMap apps/app-extra"]
            ),
            named("deploy", &["ConfigMap apps/app-deploy-staging"]),
        ]
    );
    assert_eq!(
        steps("e1-inline-inputs")
            .iter()
            .map(|s| s.0.clone())
            .collect::<Vec<_>>(),
        vec![None]
    );
}

/// Our converter (sigs.k8s.io/yaml) and serde-saphyr read the CLI's output alike.
#[test]
fn converted_output_matches_a_yaml_parser() {
    if !cli_ready("converted_output_matches_a_yaml_parser") {
        return;
    }
    for (name, _) in CASES {
        let dir = cases_dir().join(name);
        let raw = flux_operator::build_resourceset_raw(&dir).unwrap();
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&raw).unwrap();
        let parsed: Vec<Value> = parsed.into_iter().filter(|v| !v.is_null()).collect();
        let converted = oracle(&dir).unwrap();
        if let Err(e) = same_objects(&converted, &parsed) {
            panic!("{name}: {e}");
        }
    }
}
