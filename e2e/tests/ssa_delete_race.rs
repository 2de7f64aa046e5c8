//! Garbage collection never deletes an object on a stale verdict (rflux-ssa `delete_all`): the
//! object is read, judged (ours? opted out?), then deleted with the read uid and resourceVersion
//! as preconditions. Here the DELETE is held by a fault proxy while another owner takes the
//! object over; when it is released the apiserver refuses it (409), the object is read again,
//! is no longer ours, and is skipped. (Found by the fleet test: a Kustomization moving between
//! ResourceSets had an object deleted right after its new owner applied it.)
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use kustomize_controller::ssa::{Action as Change, ObjectRef, Owner, Resolver, delete_all};
use regex::Regex;
use rflux_e2e::ControlPlane;
use rflux_e2e::fault_proxy::{Action, FaultProxy, Rule};
use serde_json::json;

fn owner(name: &str) -> Owner {
    Owner {
        manager: "kustomize-controller".into(),
        group: "kustomize.toolkit.fluxcd.io".into(),
        name: name.into(),
        namespace: "flux-system".into(),
        options_group: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_taken_over_during_the_delete_is_skipped() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("gc-race").await.unwrap();
    let direct = cp.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(direct.clone(), &ns);
    let labels = |n: &str| json!({"kustomize.toolkit.fluxcd.io/name": n, "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
    for name in ["raced", "plain"] {
        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": labels("old")}, "data": {"a": "b"}}),
        )
        .unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let proxy = FaultProxy::start(cp.server_url(), &cp.ca_pem().unwrap(), 3)
        .await
        .unwrap();
    let kc = Kubeconfig::from_yaml(&cp.token_kubeconfig(Some(&proxy.url())).unwrap()).unwrap();
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    let resolver = Resolver::new(Client::try_from(config).unwrap());
    let path = Regex::new(&format!("/namespaces/{ns}/configmaps/raced$")).unwrap();
    let hold = proxy.add(
        Rule::new(Action::Hold)
            .method(http::Method::DELETE)
            .path(path)
            .times(1),
    );
    let stale = vec![
        ObjectRef::of("v1", "ConfigMap", &ns, "raced"),
        ObjectRef::of("v1", "ConfigMap", &ns, "plain"),
    ];
    let gc = tokio::spawn(async move { delete_all(&resolver, &stale, &owner("old")).await });
    let held = proxy
        .next_held(hold, Duration::from_secs(20))
        .await
        .unwrap();
    // Another owner takes the object over while the delete is in flight.
    cms.patch(
        "raced",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": labels("new")}})),
    )
    .await
    .unwrap();
    held.release();
    let changes = tokio::time::timeout(Duration::from_secs(20), gc)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        changes.action_of(&format!("ConfigMap/{ns}/raced")),
        Some(Change::Skipped)
    );
    assert_eq!(
        changes.action_of(&format!("ConfigMap/{ns}/plain")),
        Some(Change::Deleted)
    );
    let raced = cms.get_opt("raced").await.unwrap();
    assert!(raced.is_some(), "the object taken over was deleted");
    assert!(
        cms.get_opt("plain")
            .await
            .unwrap()
            .is_none_or(|c| c.metadata.deletion_timestamp.is_some())
    );
}
