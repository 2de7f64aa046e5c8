//! `BuildOptions::generate_names` (issue 17, not kustomize): objects named by `generateName`
//! alone are refused by default, as kubectl kustomize refuses them, and built with their
//! `generateName` (transformed like a name) when the option is on.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use rflux_kustomize::{BuildOptions, FluxOverrides, build, build_flux};
use serde_json::{Value, json};

fn write(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

const HOOK: &str = "apiVersion: batch/v1
kind: Job
metadata:
  generateName: upgrade-sql-
  annotations:
    argocd.argoproj.io/hook: PreSync
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: a, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata:
  generateName: upgrade-sql-
spec: {}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: plain
data: {a: b}
";

fn tree() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        &[
            (
                "kustomization.yaml",
                "resources: [hooks.yaml]\nnamespace: app\nnamePrefix: p-\nnameSuffix: -s\n\
                 commonLabels: {team: a}\npatches:\n- target: {kind: Job}\n  patch: |\n    - op: add\n      path: /spec/backoffLimit\n      value: 1\n",
            ),
            ("hooks.yaml", HOOK),
        ],
    );
    d
}

fn meta(o: &Value) -> &Value {
    &o["metadata"]
}

#[test]
fn refused_by_default_as_kubectl_refuses_it() {
    let d = tree();
    let e = build(d.path(), &BuildOptions::default()).unwrap_err();
    assert!(
        e.to_string()
            .contains("missing metadata.name in object of kind 'Job'"),
        "{e}"
    );
}

#[test]
fn built_with_its_transformed_generate_name_when_asked() {
    let d = tree();
    let opts = BuildOptions {
        generate_names: true,
        ..BuildOptions::default()
    };
    let out: Vec<Value> = build(d.path(), &opts)
        .unwrap()
        .into_iter()
        .map(|r| r.obj)
        .collect();
    let jobs: Vec<&Value> = out.iter().filter(|o| o["kind"] == "Job").collect();
    assert_eq!(
        jobs.len(),
        2,
        "both jobs with the same generateName: {out:#?}"
    );
    for j in &jobs {
        let m = meta(j);
        assert!(m.get("name").is_none(), "{m}");
        assert_eq!(m["generateName"], "p-upgrade-sql--s", "{m}");
        assert_eq!(m["namespace"], "app");
        assert_eq!(m["labels"], json!({"team": "a"}));
        assert_eq!(j["spec"]["backoffLimit"], 1, "the patch by kind applies");
        let annotations = m.get("annotations").cloned().unwrap_or(json!({}));
        assert!(
            annotations
                .get(rflux_kustomize::GENERATE_NAME_ANNOTATION)
                .is_none(),
            "{annotations}"
        );
    }
    assert_eq!(
        meta(jobs[0])["annotations"],
        json!({"argocd.argoproj.io/hook": "PreSync"})
    );
    assert!(meta(jobs[1]).get("annotations").is_none(), "{}", jobs[1]);
    let cm = out.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    assert_eq!(meta(cm)["name"], "p-plain-s");
    // Reproducible: a second build is identical.
    let again: Vec<Value> = build(d.path(), &opts)
        .unwrap()
        .into_iter()
        .map(|r| r.obj)
        .collect();
    assert_eq!(out, again);
}

#[test]
fn a_flux_build_without_a_kustomization_file_takes_the_option_too() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), &[("hooks.yaml", HOOK)]);
    let plain = build_flux(d.path(), Path::new("."), &FluxOverrides::default());
    assert!(plain.is_err(), "Flux's build refuses it");
    let overrides = FluxOverrides {
        generate_names: true,
        target_namespace: Some("t".into()),
        ..FluxOverrides::default()
    };
    let out = build_flux(d.path(), Path::new("."), &overrides).unwrap();
    let names: Vec<String> = out
        .iter()
        .map(|r| {
            let m = &r.obj["metadata"];
            format!(
                "{}/{}/{}",
                m["namespace"].as_str().unwrap_or(""),
                m["name"].as_str().unwrap_or(""),
                m["generateName"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        names,
        ["t//upgrade-sql-", "t//upgrade-sql-", "t/plain/"],
        "Flux keeps the accumulation order"
    );
}
