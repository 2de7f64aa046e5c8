#![allow(clippy::unwrap_used)]

use super::*;
use rflux_common::api::resourceset::ResourceSetSpec;
use serde_json::json;

fn spec(v: Value) -> ResourceSetSpec {
    serde_json::from_value(v).unwrap()
}

fn sets(v: Value) -> Vec<Map<String, Value>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_object().unwrap().clone())
        .collect()
}

fn subjects(steps: &[StepObjects]) -> Vec<String> {
    steps
        .iter()
        .flat_map(|s| s.objects.iter().map(subject))
        .collect()
}

#[test]
fn e1_resources_are_rendered_template_by_template_input_by_input() {
    let s = spec(json!({"resources": [
        {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
         "metadata": {"name": "podinfo-<< inputs.tenant >>", "namespace": "default"},
         "spec": {"interval": "10m", "url": "oci://ghcr.io/stefanprodan/charts/podinfo",
                  "ref": {"semver": "<< inputs.app.version | quote >>"}}},
        {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
         "metadata": {"name": "podinfo-<< inputs.tenant >>", "namespace": "default"},
         "spec": {"values": {"replicaCount": "<< inputs.app.replicas | int >>"}}}
    ]}));
    let inputs = sets(json!([
        {"tenant": "team1", "app": {"version": "6.7.x", "replicas": 2}},
        {"tenant": "team2", "app": {"version": "6.6.x", "replicas": 3}}
    ]));
    let out = build(&s, Some(&inputs), &Options::default()).unwrap();
    assert_eq!(
        subjects(&out),
        [
            "OCIRepository/default/podinfo-team1",
            "OCIRepository/default/podinfo-team2",
            "HelmRelease/default/podinfo-team1",
            "HelmRelease/default/podinfo-team2"
        ]
    );
    let o = &out[0].objects;
    assert_eq!(o[0]["spec"]["ref"]["semver"], "6.7.x");
    assert_eq!(
        o[3]["spec"]["values"]["replicaCount"], 3,
        "an int, not a string"
    );
}

#[test]
fn e2_e3_dedup_and_exclusion() {
    let s = spec(json!({"resources": [
        {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
         "metadata": {"name": "podinfo", "namespace": "default"}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "flux", "namespace": "<< inputs.tenant >>",
           "annotations": {"fluxcd.controlplane.io/reconcile":
             "<< if eq inputs.tenant \"team1\" >>enabled<< else >>disabled<< end >>"}}}
    ]}));
    let inputs = sets(json!([{"tenant": "team1"}, {"tenant": "team2"}]));
    let out = build(&s, Some(&inputs), &Options::default()).unwrap();
    assert_eq!(
        subjects(&out),
        ["OCIRepository/default/podinfo", "ServiceAccount/team1/flux"]
    );
}

#[test]
fn e4_resources_template_with_range_and_if() {
    let tpl = r#"---
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata:
  name: << inputs.bundle >>
  namespace: flux-system
spec:
  url: oci://registry.example.com/<< inputs.bundle >>
<<- range $component := inputs.components >>
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: << $component >>
  namespace: flux-system
spec:
  path: ./<< $component >>
  << if inputs.decryption >>
  decryption:
    provider: sops
  << end >>
<<- end >>
---
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
metadata:
  name: dropped
---
kind: ConfigMap
metadata:
  name: no-api-version
"#;
    let s = spec(json!({"resourcesTemplate": tpl}));
    let inputs = sets(json!([
        {"bundle": "addons", "decryption": false, "components": ["ingress-nginx", "cert-manager"]},
        {"bundle": "apps", "decryption": true, "components": ["frontend", "backend"]}
    ]));
    let out = build(&s, Some(&inputs), &Options::default()).unwrap();
    assert_eq!(
        subjects(&out),
        [
            "OCIRepository/flux-system/addons",
            "Kustomization/flux-system/ingress-nginx",
            "Kustomization/flux-system/cert-manager",
            "OCIRepository/flux-system/apps",
            "Kustomization/flux-system/frontend",
            "Kustomization/flux-system/backend"
        ]
    );
    let objs = &out[0].objects;
    assert!(objs[1]["spec"].get("decryption").is_none());
    assert_eq!(objs[4]["spec"]["decryption"]["provider"], "sops");
}

#[test]
fn no_inputs_renders_once_without_dedup() {
    let s = spec(json!({"resources": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x",
          "annotations": {"fluxcd.controlplane.io/reconcile": "disabled"}}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}}
    ]}));
    let out = build(&s, None, &Options::default()).unwrap();
    assert_eq!(
        out[0].objects.len(),
        2,
        "neither filtered nor de-duplicated"
    );
}

#[test]
fn steps_are_built_apart_and_may_not_share_objects() {
    let cm = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "apps"}, "data": {"source": "resources"}})
    };
    let s = spec(json!({"steps": [
        {"name": "db-migration", "timeout": "5m", "resources": [cm("a")],
         "resourcesTemplate": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: apps\ndata:\n  source: template\n"},
        {"name": "app-deploy", "resources": [cm("b")]}
    ]}));
    let inputs = sets(json!([{"version": "v1"}]));
    let out = build(&s, Some(&inputs), &Options::default()).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].name, "db-migration");
    assert_eq!(out[0].timeout.as_deref(), Some("5m"));
    assert_eq!(out[0].objects.len(), 1);
    assert_eq!(
        out[0].objects[0]["data"]["source"], "resources",
        "resources beat the template"
    );
    let dup = spec(json!({"steps": [
        {"name": "a", "resources": [cm("x")]}, {"name": "b", "resources": [cm("x")]}
    ]}));
    assert_eq!(
        build(&dup, Some(&inputs), &Options::default())
            .unwrap_err()
            .to_string(),
        "duplicate resource ConfigMap/apps/x in step \"b\", already defined in step \"a\""
    );
}

#[test]
fn spec_rules_and_template_errors_have_flux_operators_words() {
    let both =
        spec(json!({"resourcesTemplate": "x", "steps": [{"name": "a", "resourcesTemplate": "y"}]}));
    assert_eq!(
        build(&both, None, &Options::default())
            .unwrap_err()
            .to_string(),
        "spec.steps is mutually exclusive with spec.resources and spec.resourcesTemplate"
    );
    let missing = spec(
        json!({"resources": [{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "<< inputs.nope >>"}}]}),
    );
    let inputs = sets(json!([{"tenant": "a"}]));
    let e = build(&missing, Some(&inputs), &Options::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "failed to build resources[0]: failed to execute template: template: resourceset:"
        ),
        "{e}"
    );
    assert!(e.contains("map has no entry for key \"nope\""), "{e}");
}

#[test]
fn a_huge_build_is_refused() {
    let s = spec(json!({"resourcesTemplate":
        "<< range $i := until 60000 >>\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c<< $i >>\n<< end >>"}));
    let e = build(&s, None, &Options::default()).unwrap_err();
    assert!(
        matches!(e, BuildError::Limit(_) | BuildError::Resource(_)),
        "{e}"
    );
}
