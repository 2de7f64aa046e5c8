//! Post-build variable collection (`postBuild.substituteFrom` + `substitute`) on a real API
//! server: precedence, newline stripping, optional sources, Flux's error texts, and the whole
//! `post_build` step.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::PostParams;
use kustomize_controller::substitute::{PostBuildError, collect_vars, post_build};
use rflux_common::api::kustomization::{PostBuild, SubstituteReference};
use rflux_e2e::ControlPlane;
use serde_json::json;

async fn create_cm(client: &kube::Client, ns: &str, name: &str, data: serde_json::Value) {
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name}, "data": data,
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
}

async fn create_secret(client: &kube::Client, ns: &str, name: &str, data: serde_json::Value) {
    let s: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name}, "stringData": data,
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

fn reference(kind: &str, name: &str, optional: Option<bool>) -> SubstituteReference {
    serde_json::from_value(json!({"kind": kind, "name": name, "optional": optional})).unwrap()
}

fn post_build_spec(refs: Vec<SubstituteReference>, inline: &[(&str, &str)]) -> PostBuild {
    PostBuild {
        substitute: if inline.is_empty() {
            None
        } else {
            Some(
                inline
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        },
        substitute_from: Some(refs),
        substitute_strategy: None,
    }
}

#[tokio::test]
async fn vars_follow_flux_precedence_and_lose_newlines() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("ks-subst-vars").await.unwrap();
    let client = cp.client().await.unwrap();
    create_cm(
        &client,
        &ns,
        "base",
        json!({"a": "from-cm", "b": "from-cm", "c": "from-cm", "multi": "x\ny\n"}),
    )
    .await;
    create_secret(
        &client,
        &ns,
        "creds",
        json!({"b": "from-secret", "c": "from-secret", "token": "s3cr3t\n"}),
    )
    .await;
    create_cm(&client, &ns, "last", json!({"b": "from-last"})).await;

    let pb = post_build_spec(
        vec![
            reference("ConfigMap", "base", None),
            reference("Secret", "creds", Some(false)),
            reference("ConfigMap", "last", None),
            reference("ConfigMap", "absent", Some(true)),
            reference("Secret", "absent", Some(true)),
        ],
        &[("c", "inline\nvalue")],
    );
    let vars = collect_vars(&client, &ns, &pb).await.unwrap();
    let want: BTreeMap<String, String> = [
        ("a", "from-cm"),
        ("b", "from-last"),
        ("c", "inlinevalue"),
        ("multi", "xy"),
        ("token", "s3cr3t"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(vars, want);
}

#[tokio::test]
async fn missing_required_sources_fail_with_flux_text() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("ks-subst-missing").await.unwrap();
    let client = cp.client().await.unwrap();

    let err = collect_vars(
        &client,
        &ns,
        &post_build_spec(vec![reference("ConfigMap", "nope", None)], &[]),
    )
    .await
    .unwrap_err();
    assert!(err.not_found);
    assert_eq!(
        err.to_string(),
        "substitute from 'ConfigMap/nope' error: configmaps \"nope\" not found"
    );

    let err = collect_vars(
        &client,
        &ns,
        &post_build_spec(vec![reference("Secret", "nope", Some(false))], &[]),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "substitute from 'Secret/nope' error: secrets \"nope\" not found"
    );
}

#[tokio::test]
async fn optional_does_not_hide_other_errors() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("ks-subst-forbidden").await.unwrap();
    let user = format!("system:serviceaccount:{ns}:nobody");
    let client = cp.impersonating_client(&user, &[]).await.unwrap();
    let err = collect_vars(
        &client,
        &ns,
        &post_build_spec(vec![reference("Secret", "anything", Some(true))], &[]),
    )
    .await
    .unwrap_err();
    assert!(!err.not_found);
    assert!(
        err.to_string().starts_with(
            "substitute from 'Secret/anything' error: secrets \"anything\" is forbidden"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn post_build_substitutes_objects_with_cluster_vars() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("ks-subst-post").await.unwrap();
    let client = cp.client().await.unwrap();
    create_cm(
        &client,
        &ns,
        "cluster-vars",
        json!({"replicas": "2", "env": "dev"}),
    )
    .await;

    let objects = vec![
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web-${env}"},
               "spec": {"replicas": "${replicas}"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "raw", "annotations": {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}},
               "data": {"k": "${env}"}}),
    ];
    let pb = post_build_spec(
        vec![reference("ConfigMap", "cluster-vars", None)],
        &[("env", "prod")],
    );
    let out = post_build(&client, &ns, Some(&pb), objects.clone(), true)
        .await
        .unwrap();
    assert_eq!(out[0]["metadata"]["name"], "web-prod");
    assert_eq!(out[0]["spec"]["replicas"], json!(2));
    assert_eq!(out[1], objects[1]);

    // Without postBuild nothing changes.
    let same = post_build(&client, &ns, None, objects.clone(), true)
        .await
        .unwrap();
    assert_eq!(same, objects);

    // A source error is reported against the first object that does not opt out.
    let bad = post_build_spec(vec![reference("ConfigMap", "gone", None)], &[]);
    let err = post_build(&client, &ns, Some(&bad), objects.clone(), true)
        .await
        .unwrap_err();
    assert_eq!(err.id, "Deployment.v1.apps/web-${env}");
    assert!(matches!(err.source, PostBuildError::Vars(_)));
    assert_eq!(
        err.to_string(),
        "post build failed for 'Deployment.v1.apps/web-${env}': substitute from 'ConfigMap/gone' error: configmaps \"gone\" not found"
    );
    // When every object opts out, the source is never read.
    let only_raw = vec![objects[1].clone()];
    let out = post_build(&client, &ns, Some(&bad), only_raw.clone(), true)
        .await
        .unwrap();
    assert_eq!(out, only_raw);
}
