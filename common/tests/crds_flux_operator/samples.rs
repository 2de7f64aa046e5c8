//! The reference examples (`resourceset.md` §13 E1, E7, E8, E9) as objects: every field is
//! declared by our CRD schema (and flux-operator's, when present), and each object survives
//! a round trip through the Rust types unchanged. The `status` sections are made up for the
//! round trip (shapes of §3 and §12.2).

use super::*;

const E1: &str = r#"
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSet
metadata:
  name: podinfo
  namespace: default
spec:
  commonMetadata:
    labels:
      app.kubernetes.io/name: podinfo
  inputs:
    - tenant: team1
      app:
        version: "6.7.x"
        replicas: 2
    - tenant: team2
      app:
        version: "6.6.x"
        replicas: 3
  resources:
    - apiVersion: source.toolkit.fluxcd.io/v1
      kind: OCIRepository
      metadata:
        name: podinfo-<< inputs.tenant >>
        namespace: default
      spec:
        interval: 10m
        url: oci://ghcr.io/stefanprodan/charts/podinfo
        ref:
          semver: << inputs.app.version | quote >>
    - apiVersion: helm.toolkit.fluxcd.io/v2
      kind: HelmRelease
      metadata:
        name: podinfo-<< inputs.tenant >>
        namespace: default
      spec:
        interval: 1h
        releaseName: podinfo-<< inputs.tenant >>
        chartRef:
          kind: OCIRepository
          name: podinfo-<< inputs.tenant >>
        values:
          replicaCount: << inputs.app.replicas | int >>
status:
  conditions:
    - type: Ready
      status: "True"
      reason: ReconciliationSucceeded
      message: Reconciliation finished in 120ms
      lastTransitionTime: "2026-09-01T10:00:00Z"
      observedGeneration: 1
  inventory:
    entries:
      - id: default_podinfo-team1_source.toolkit.fluxcd.io_OCIRepository
        v: v1
      - id: default_podinfo-team2_helm.toolkit.fluxcd.io_HelmRelease
        v: v2
  history:
    - digest: sha256:0a1b2c
      firstReconciled: "2026-09-01T09:00:00Z"
      lastReconciled: "2026-09-01T10:00:00Z"
      lastReconciledDuration: 120.5ms
      lastReconciledStatus: ReconciliationSucceeded
      totalReconciliations: 2
      metadata:
        inputs: "2"
        resources: "4"
  lastAppliedRevision: sha256:0a1b2c
  externalChecksumRefs:
    - ConfigMap/default/settings
  lastHandledReconcileAt: "2026-09-01T09:59:00.123456789Z"
"#;

const E7: &str = r#"
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSetInputProvider
metadata:
  name: app1-tenant1
  namespace: apps
  labels:
    some: label
    anotherLabel: value1
spec:
  type: Static
  defaultValues:
    tenant: tenant1
    app:
      version: "6.7.x"
      replicas: 2
status:
  exportedInputs:
    - id: "478151771"
      tenant: tenant1
      app:
        version: "6.7.x"
        replicas: 2
  lastExportedRevision: sha256:9f8e
  lastHandledForceAt: "2026-09-01T09:00:00Z"
---
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSetInputProvider
metadata:
  name: app1-tenant2
  namespace: apps
  labels:
    some: label
    anotherLabel: value2
spec:
  type: Static
  defaultValues:
    tenant: tenant2
    app:
      version: "6.6.x"
      replicas: 3
  schedule:
    - cron: "0 8 * * 1-5"
      timeZone: Europe/Berlin
      window: 8h
status:
  nextSchedule:
    cron: "0 8 * * 1-5"
    timeZone: Europe/Berlin
    window: 8h
    when: "2026-09-02T06:00:00Z"
---
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSet
metadata:
  name: app1
  namespace: apps
spec:
  inputsFrom:
    - kind: ResourceSetInputProvider
      selector:
        matchLabels:
          some: label
        matchExpressions:
          - key: anotherLabel
            operator: In
            values:
              - value1
              - value2
  resources:
    - apiVersion: source.toolkit.fluxcd.io/v1
      kind: OCIRepository
      metadata:
        name: app1-<< inputs.tenant >>
        namespace: apps
      spec:
        interval: 10m
        url: oci://my.registry/org/charts/app1
        ref:
          semver: << inputs.app.version | quote >>
    - apiVersion: helm.toolkit.fluxcd.io/v2
      kind: HelmRelease
      metadata:
        name: app1-<< inputs.tenant >>
        namespace: apps
      spec:
        interval: 1h
        releaseName: app1-<< inputs.tenant >>
        chartRef:
          kind: OCIRepository
          name: app1-<< inputs.tenant >>
        values:
          replicaCount: << inputs.app.replicas | int >>
"#;

const E8: &str = r#"
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSetInputProvider
metadata:
  name: git-tag
  namespace: default
spec:
  type: Static
  defaultValues:
    sha: bf5d6e01cf802734853f6f3417b237e3ad0ba35d
---
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSetInputProvider
metadata:
  name: oci-tag
  namespace: default
spec:
  type: Static
  defaultValues:
    digest: sha256:d4ec9861522d4961b2acac5a070ef4f92d732480dff2062c2f3a1dcf9a5d1e91
---
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSet
metadata:
  name: my-rset
  namespace: default
spec:
  inputStrategy:
    name: Permute
  inputs:
    - id: id1
      someField: foo
    - id: id2
      someField: bar
  inputsFrom:
    - apiVersion: fluxcd.controlplane.io/v1
      kind: ResourceSetInputProvider
      name: git-tag
    - kind: ResourceSetInputProvider
      name: oci-tag
  resources:
    - apiVersion: v1
      kind: ConfigMap
      metadata:
        name: my-cm-<< inputs.id >>
        namespace: default
      data:
        rsetID: << inputs.my_rset.id | quote >>
        rsipGitID: << inputs.git_tag.id | quote >>
        rsipOCIID: << inputs.oci_tag.id | quote >>
        someField: << inputs.my_rset.someField | quote >>
        sha: << inputs.git_tag.sha | quote >>
        digest: << inputs.oci_tag.digest | quote >>
"#;

// E9 (steps), with a dependency added so `dependsOn` is covered.
const E9: &str = r#"
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSet
metadata:
  name: app
  namespace: apps
  annotations:
    fluxcd.controlplane.io/reconcileEvery: 30m
spec:
  serviceAccountName: flux-apps
  wait: true
  dependsOn:
    - apiVersion: v1
      kind: ConfigMap
      name: gate
      namespace: apps
      ready: true
      readyExpr: data.state == 'open'
  inputs:
    - version: v1.0.0
  steps:
    - name: db-migration
      timeout: 5m
      resources:
        - apiVersion: batch/v1
          kind: Job
          metadata:
            name: db-migration
            namespace: apps
            annotations:
              fluxcd.controlplane.io/force: enabled
              fluxcd.controlplane.io/recreateOnFailure: enabled
          spec:
            template:
              spec:
                restartPolicy: Never
                containers:
                  - name: migrate
                    image: ghcr.io/org/my-app:<< inputs.version >>
    - name: app-deploy
      timeout: 10m
      resourcesTemplate: |
        apiVersion: kustomize.toolkit.fluxcd.io/v1
        kind: Kustomization
        metadata:
          name: app-deploy
          namespace: apps
        spec:
          interval: 10m
          images:
            - name: ghcr.io/org/my-app
              newTag: << inputs.version | quote >>
          sourceRef:
            kind: GitRepository
            name: apps
          path: ./deploy/my-app
          prune: true
          wait: true
          timeout: 9m
"#;

fn docs(text: &str) -> Vec<Value> {
    text.split("\n---\n")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect()
}

/// Round trip of one object through its Rust type; returns nothing, panics on a change.
fn round_trip(doc: &Value) {
    let back = match doc["kind"].as_str() {
        Some("ResourceSet") => {
            let rset: ResourceSet = serde_json::from_value(doc.clone()).unwrap();
            serde_json::to_value(&rset).unwrap()
        }
        Some("ResourceSetInputProvider") => {
            let rsip: ResourceSetInputProvider = serde_json::from_value(doc.clone()).unwrap();
            serde_json::to_value(&rsip).unwrap()
        }
        other => panic!("unexpected kind {other:?}"),
    };
    assert_eq!(&back, doc, "round trip changed {}", doc["metadata"]["name"]);
}

/// Fields of `value` the schema does not declare (the API server would prune them), and
/// values of the wrong type or outside an enum.
fn undeclared(path: &str, value: &Value, schema: &Value, out: &mut Vec<String>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == json!(true) || path == "/metadata" {
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        out.push(format!("{path}: {value} is not one of {allowed:?}"));
    }
    let typed = match schema["type"].as_str() {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !typed {
        out.push(format!("{path}: {value} is not of type {}", schema["type"]));
        return;
    }
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let p = format!("{path}/{k}");
                if let Some(s) = schema["properties"].get(k) {
                    undeclared(&p, v, s, out);
                } else if schema["additionalProperties"].is_object() {
                    undeclared(&p, v, &schema["additionalProperties"], out);
                } else {
                    out.push(format!("{p}: not declared"));
                }
            }
            for r in schema["required"].as_array().into_iter().flatten() {
                if let Some(r) = r.as_str().filter(|r| !map.contains_key(*r)) {
                    out.push(format!("{path}: required {r} is missing"));
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                undeclared(&format!("{path}/{i}"), item, &schema["items"], out);
            }
        }
        _ => {}
    }
}

fn root_schema(crd: &Value) -> Value {
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema")
        .cloned()
        .unwrap()
}

fn check_schema(doc: &Value) {
    let (ours_file, upstream_file) = match doc["kind"].as_str() {
        Some("ResourceSet") => (crd::RESOURCESETS_FILE, RSET_UPSTREAM),
        _ => (crd::RESOURCESETINPUTPROVIDERS_FILE, RSIP_UPSTREAM),
    };
    let mut schemas = vec![("ours", root_schema(&ours(ours_file)))];
    if let Some(dir) = upstream_dir() {
        schemas.push((
            "flux-operator",
            root_schema(&load_yaml(&dir.join(upstream_file))),
        ));
    }
    for (whose, schema) in schemas {
        let mut out = Vec::new();
        undeclared("", doc, &schema, &mut out);
        assert!(
            out.is_empty(),
            "{} against {whose} schema:\n  {}",
            doc["metadata"]["name"],
            out.join("\n  ")
        );
    }
}

#[test]
fn examples_fit_the_schema_and_round_trip() {
    let all: Vec<Value> = [E1, E7, E8, E9].iter().flat_map(|t| docs(t)).collect();
    assert_eq!(all.len(), 8);
    for doc in &all {
        check_schema(doc);
        round_trip(doc);
    }
}

#[test]
fn schema_check_notices_unknown_and_mistyped_fields() {
    let schema = root_schema(&ours(crd::RESOURCESETS_FILE));
    let mut doc = docs(E1).remove(0);
    doc["spec"]["suspend"] = json!(true);
    doc["spec"]["wait"] = json!("yes");
    doc["spec"]["inputStrategy"] = json!({"name": "Zip"});
    doc["status"]["inventory"]["entries"][0] = json!({"id": "x"});
    let mut out = Vec::new();
    undeclared("", &doc, &schema, &mut out);
    for needle in [
        "/spec/suspend",
        "/spec/wait",
        "/spec/inputStrategy/name",
        "required v",
    ] {
        assert!(
            out.iter().any(|l| l.contains(needle)),
            "{needle} not reported: {out:?}"
        );
    }
    // template objects and input values are free-form
    let mut doc = docs(E1).remove(0);
    doc["spec"]["resources"][0]["anything"] = json!({"goes": [1, "x"]});
    doc["spec"]["inputs"][0]["nested"] = json!({"deep": {"er": null}});
    let mut out = Vec::new();
    undeclared("", &doc, &schema, &mut out);
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn examples_read_as_the_reference_describes() {
    let e1: ResourceSet = serde_json::from_value(docs(E1).remove(0)).unwrap();
    assert_eq!(e1.spec.input_strategy(), InputStrategy::Flatten);
    assert_eq!(e1.spec.inputs().len(), 2);
    assert_eq!(e1.spec.inputs()[1]["app"]["replicas"], json!(3));
    assert_eq!(
        e1.spec
            .common_labels()
            .get("app.kubernetes.io/name")
            .map(String::as_str),
        Some("podinfo")
    );
    assert_eq!(e1.spec.validate(), Ok(()));
    let release = &e1.spec.resources.as_ref().unwrap()[1];
    assert_eq!(
        release["spec"]["values"]["replicaCount"],
        json!("<< inputs.app.replicas | int >>")
    );
    assert_eq!(e1.reconcile_every(), "1h");
    let status = e1.status.as_ref().unwrap();
    assert_eq!(status.inventory.as_ref().unwrap().entries.len(), 2);
    assert_eq!(status.history.as_ref().unwrap()[0].total_reconciliations, 2);

    let e7 = docs(E7);
    let rsip: ResourceSetInputProvider = serde_json::from_value(e7[0].clone()).unwrap();
    assert_eq!(rsip.spec.provider_type, InputProviderType::Static);
    assert_eq!(rsip.exported_inputs()[0]["id"], json!("478151771"));
    assert_eq!(rsip.reconcile_every(), "10m");
    let rset: ResourceSet = serde_json::from_value(e7[2].clone()).unwrap();
    assert_eq!(rset.spec.validate_inputs_from(), Ok(()));
    let sel = rset.spec.inputs_from()[0].selector.as_ref().unwrap();
    assert_eq!(sel.match_expressions.as_ref().unwrap()[0].operator, "In");

    let e8: ResourceSet = serde_json::from_value(docs(E8).remove(2)).unwrap();
    assert_eq!(e8.spec.input_strategy(), InputStrategy::Permute);
    assert!(!e8.spec.include_empty_providers());
    assert_eq!(
        e8.spec.inputs_from()[1].api_version(),
        "fluxcd.controlplane.io/v1"
    );

    let e9: ResourceSet = serde_json::from_value(docs(E9).remove(0)).unwrap();
    assert!(e9.spec.has_steps() && e9.spec.wait());
    assert_eq!(e9.reconcile_every(), "30m");
    assert_eq!(e9.spec.validate(), Ok(()));
    let mut broken = e9.clone();
    broken.spec.depends_on.as_mut().unwrap()[0].ready = None;
    assert!(matches!(
        broken.spec.validate(),
        Err(ResourceSetSpecError::ReadyExprWithoutReady { .. })
    ));
}
