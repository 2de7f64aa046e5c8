//! Argo CD per-object sync options in the apply (issue 17; `argo-semantics.md` §4.5) on the
//! real control plane, with the feature gate `ArgoSyncSemantics=true` and
//! `rflux.dev/argo-semantics: enabled` (kustomize-controller/src/reconcile/waves_exec.rs):
//! - `SkipDryRunOnMissingResource=true`: a CRD in wave -1 and its custom resource in wave 0
//!   sync (Ready, the resource created); without the option too, because Argo skips the dry-run
//!   by itself when the CRD is in the same sync. A custom resource whose CRD is NOT in the sync
//!   fails the whole sync before anything is written (the ConfigMap of wave -1 is never
//!   created); with the option, wave -1 is applied, wave 0 fails while the kind is unknown, and
//!   once the CRD appears (as an operator would install it) the next reconcile creates it;
//! - `Replace=true`: a Job whose `spec.template` (immutable) changes is recreated (new uid)
//!   without a force annotation being written; without the option the same change fails with
//!   the immutable-field error and the Job keeps its uid.
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod ks_env;
mod support;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use ks_env::{Env, argo_kustomization, failed_with, ready_at, ready_message};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

const OPT_IN: &str = "rflux.dev/argo-semantics";

fn opted_in() -> serde_json::Value {
    json!({OPT_IN: "enabled", "rflux.dev/argo-sync-wave-delay": "200ms"})
}

/// A namespaced CRD `<plural>.<group>` for `kind`, served as `v1`, in sync wave `wave`.
fn crd(group: &str, kind: &str, wave: &str) -> String {
    let plural = format!("{}s", kind.to_lowercase());
    format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.{group}
  annotations:
    argocd.argoproj.io/sync-wave: \"{wave}\"
spec:
  group: {group}
  scope: Namespaced
  names:
    kind: {kind}
    plural: {plural}
    singular: {singular}
    listKind: {kind}List
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
",
        singular = kind.to_lowercase()
    )
}

/// A custom resource of `group/v1` `kind` in wave `wave`, with `options` as sync options.
fn cr(group: &str, kind: &str, name: &str, wave: &str, options: Option<&str>) -> String {
    let options = options
        .map(|o| format!("    argocd.argoproj.io/sync-options: {o}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: {group}/v1
kind: {kind}
metadata:
  name: {name}
  annotations:
    argocd.argoproj.io/sync-wave: \"{wave}\"
{options}spec:
  size: 3
"
    )
}

fn cm_in_wave(name: &str, wave: &str) -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  annotations:
    argocd.argoproj.io/sync-wave: \"{wave}\"
data:
  a: b
"
    )
}

fn custom(env: &Env, group: &str, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, "v1", kind),
        &format!("{}s", kind.to_lowercase()),
    );
    Api::namespaced_with(env.client.clone(), &env.ns, &ar)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_dry_run_on_missing_resource() {
    // Unique groups: CRDs are cluster-wide and the control plane is shared.
    let suffix = rflux_e2e::random_suffix(6);
    let g = |x: &str| format!("{x}{suffix}.options.rflux.test");
    let (ga, gb, gc, gd) = (g("a"), g("b"), g("c"), g("d"));
    let files = [
        (
            "opt/kustomization.yaml",
            argo_kustomization(&["crd.yaml", "cr.yaml"]),
        ),
        ("opt/crd.yaml", crd(&ga, "Widget", "-1")),
        (
            "opt/cr.yaml",
            cr(
                &ga,
                "Widget",
                "w",
                "0",
                Some("SkipDryRunOnMissingResource=true"),
            ),
        ),
        (
            "auto/kustomization.yaml",
            argo_kustomization(&["crd.yaml", "cr.yaml"]),
        ),
        ("auto/crd.yaml", crd(&gb, "Gadget", "-1")),
        ("auto/cr.yaml", cr(&gb, "Gadget", "g", "0", None)),
        (
            "missing/kustomization.yaml",
            argo_kustomization(&["cm.yaml", "cr.yaml"]),
        ),
        ("missing/cm.yaml", cm_in_wave("m-before", "-1")),
        ("missing/cr.yaml", cr(&gc, "Gizmo", "z", "0", None)),
        (
            "later/kustomization.yaml",
            argo_kustomization(&["cm.yaml", "cr.yaml"]),
        ),
        ("later/cm.yaml", cm_in_wave("l-before", "-1")),
        (
            "later/cr.yaml",
            cr(
                &gd,
                "Sprocket",
                "s",
                "0",
                Some("SkipDryRunOnMissingResource=true"),
            ),
        ),
    ];
    let mut env = Env::start("argoopts", "ArgoSyncSemantics=true", &files).await;
    let rev = format!("main@sha1:{}", env.repo.head().unwrap());
    for (name, path) in [
        ("opt", "./opt"),
        ("auto", "./auto"),
        ("missing", "./missing"),
        ("later", "./later"),
    ] {
        env.create_ks(name, path, json!({}), opted_in()).await;
    }

    // The CRD in wave -1, its resource in wave 0, with the option: synced.
    let r = rev.clone();
    let k = env.wait_ks("opt", "Ready", move |k| ready_at(k, &r)).await;
    println!("opt: {}", ready_message(&k));
    assert!(
        custom(&env, &ga, "Widget")
            .get_opt("w")
            .await
            .unwrap()
            .is_some(),
        "the Widget was not created"
    );
    // Without the option: Argo skips the dry-run by itself when the CRD is in the sync.
    let r = rev.clone();
    let k = env.wait_ks("auto", "Ready", move |k| ready_at(k, &r)).await;
    println!("auto: {}", ready_message(&k));
    assert!(
        custom(&env, &gb, "Gadget")
            .get_opt("g")
            .await
            .unwrap()
            .is_some(),
        "the Gadget was not created"
    );

    // A kind nobody serves, without the option: the sync fails before anything is written.
    let k = env
        .wait_ks("missing", "failed on the unknown kind", |k| {
            failed_with(
                k,
                "ReconciliationFailed",
                &["Gizmo/", "no matches for kind", "nothing was applied"],
            )
        })
        .await;
    println!("missing: {}", ready_message(&k));
    assert!(
        env.cm("m-before").await.is_none(),
        "wave -1 was applied although the sync's dry-run failed"
    );

    // With the option: wave -1 is applied, wave 0 fails while the kind is unknown...
    let k = env
        .wait_ks("later", "failed in wave 0", |k| {
            failed_with(k, "ReconciliationFailed", &["wave 0", "Sprocket"])
        })
        .await;
    println!("later, before the CRD: {}", ready_message(&k));
    assert!(
        env.cm("l-before").await.is_some(),
        "wave -1 was not applied with SkipDryRunOnMissingResource=true"
    );
    // ...and once the CRD exists (installed by someone else), the next sync creates it.
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let outside: CustomResourceDefinition =
        serde_saphyr::from_str(&crd(&gd, "Sprocket", "0")).unwrap();
    crds.create(&PostParams::default(), &outside).await.unwrap();
    env.request("later", json!({})).await;
    let r = rev.clone();
    let k = env
        .wait_ks("later", "Ready once the CRD exists", move |k| {
            ready_at(k, &r)
        })
        .await;
    println!("later, after the CRD: {}", ready_message(&k));
    assert!(
        custom(&env, &gd, "Sprocket")
            .get_opt("s")
            .await
            .unwrap()
            .is_some(),
        "the Sprocket was not created"
    );

    // The Gizmo still fails the same way: nothing else changed it.
    let k = env.ks.get("missing").await.unwrap();
    assert!(
        failed_with(&k, "ReconciliationFailed", &["Gizmo/"]),
        "{}",
        ready_message(&k)
    );
    assert!(env.cm("m-before").await.is_none());

    for name in ["opt", "auto", "missing", "later"] {
        env.delete_ks(name).await;
    }
    for (group, plural) in [(&ga, "widgets"), (&gb, "gadgets"), (&gd, "sprockets")] {
        let _ = crds
            .delete(&format!("{plural}.{group}"), &DeleteParams::default())
            .await;
    }
}

/// A Job (`sync-options` when given); `image` changes its immutable `spec.template`.
fn job(name: &str, image: &str, options: Option<&str>) -> String {
    let annotations = options
        .map(|o| format!("  annotations:\n    argocd.argoproj.io/sync-options: {o}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
{annotations}spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: run
        image: {image}
"
    )
}

fn uid(j: &Job) -> String {
    j.metadata.uid.clone().unwrap_or_default()
}

fn image(j: &Job) -> String {
    j.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_recreates_on_an_immutable_change() {
    let files = [
        (
            "replace/kustomization.yaml",
            argo_kustomization(&["job.yaml"]),
        ),
        (
            "replace/job.yaml",
            job("rj", "busybox:1.36", Some("Replace=true")),
        ),
        (
            "plain/kustomization.yaml",
            argo_kustomization(&["job.yaml"]),
        ),
        ("plain/job.yaml", job("pj", "busybox:1.36", None)),
    ];
    let mut env = Env::start("argoreplace", "ArgoSyncSemantics=true", &files).await;
    let rev = format!("main@sha1:{}", env.repo.head().unwrap());
    env.create_ks("replace", "./replace", json!({}), opted_in())
        .await;
    env.create_ks("plain", "./plain", json!({}), opted_in())
        .await;
    for name in ["replace", "plain"] {
        let r = rev.clone();
        env.wait_ks(name, "Ready", move |k| ready_at(k, &r)).await;
    }
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), &env.ns);
    let (rj0, pj0) = (jobs.get("rj").await.unwrap(), jobs.get("pj").await.unwrap());

    // The same immutable change (spec.template) in both.
    env.repo
        .write(
            "replace/job.yaml",
            &job("rj", "busybox:1.37", Some("Replace=true")),
        )
        .unwrap();
    env.repo
        .write("plain/job.yaml", &job("pj", "busybox:1.37", None))
        .unwrap();
    let rev2 = env.push("change the Job templates").await;

    let r = rev2.clone();
    let k = env
        .wait_ks("replace", "Ready at the change", move |k| ready_at(k, &r))
        .await;
    println!("replace: {}", ready_message(&k));
    let rj1 = jobs.get("rj").await.unwrap();
    assert_ne!(uid(&rj1), uid(&rj0), "the Job was not recreated");
    assert_eq!(image(&rj1), "busybox:1.37");
    let annotations = rj1.metadata.annotations.clone().unwrap_or_default();
    assert!(
        !annotations.contains_key("kustomize.toolkit.fluxcd.io/force"),
        "the force annotation was written: {annotations:?}"
    );

    let k = env
        .wait_ks("plain", "failed on the immutable field", |k| {
            failed_with(k, "ReconciliationFailed", &["Job/", "pj", "immutable"])
        })
        .await;
    println!("plain: {}", ready_message(&k));
    let pj1 = jobs.get("pj").await.unwrap();
    assert_eq!(
        uid(&pj1),
        uid(&pj0),
        "the Job without Replace was recreated"
    );
    assert_eq!(image(&pj1), "busybox:1.36");

    for name in ["replace", "plain"] {
        env.delete_ks(name).await;
    }
}
