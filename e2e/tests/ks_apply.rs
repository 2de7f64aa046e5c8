//! kustomize-controller apply stages on the real control plane: staged server-side apply with
//! drift detection, the ssa/force/reconcile annotations, inventory + prune, and watch-driven
//! health checks. Each test works in its own namespace (and its own CRD group).
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kustomize_controller::identity::NAME_LABEL;
use kustomize_controller::inventory;
use kustomize_controller::reconcile as prune;
use kustomize_controller::ssa::wait::{self as health, WaitError as HealthError};
use kustomize_controller::ssa::{
    Action, ApplyErrorKind, ApplyOptions, ChangeSet, ObjectRef, Owner, Resolver, Status, apply_all,
    apply_all_with,
};
use rflux_e2e::{ControlPlane, random_suffix};
use serde_json::{Value, json};

fn owner() -> Owner {
    kustomize_controller::identity::owner("apps", "flux-system")
}

fn opts() -> ApplyOptions {
    ApplyOptions::new(owner())
}

fn cm(ns: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns}, "data": data})
}

fn deployment(ns: &str, name: &str, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image}]}}}})
}

fn service(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]}})
}

fn crd(group: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

fn widget(group: &str, ns: &str, name: &str, size: i64) -> Value {
    json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": name, "namespace": ns}, "spec": {"size": size}})
}

async fn live(client: &Client, obj: &Value) -> Option<Value> {
    let id = ObjectRef::from_value(obj).unwrap();
    let api = Resolver::new(client.clone()).api(&id).await.unwrap();
    api.get_opt(&id.name)
        .await
        .unwrap()
        .map(|o| serde_json::to_value(o).unwrap())
}

fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

fn actions(cs: &ChangeSet) -> Vec<(String, Action)> {
    cs.entries.iter().map(|e| (e.subject(), e.action)).collect()
}

#[tokio::test]
async fn staged_apply_detects_drift_and_writes_only_changes() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("ks-apply").await.unwrap();
    let client = cp.client().await.unwrap();
    let group = format!("e{}.example.com", random_suffix(8));
    let set = |cm_value: &str| {
        vec![
            widget(&group, &ns, "w", 1),
            deployment(&ns, "web", "nginx:1.27"),
            service(&ns, "web"),
            cm(&ns, "config", json!({"key": cm_value})),
            crd(&group),
        ]
    };

    // First apply: the CRD is applied and established in stage 1, so the CR resolves later.
    let first = apply_all(client.clone(), set("a"), &opts()).await.unwrap();
    let crd_subject = format!("CustomResourceDefinition/widgets.{group}");
    assert_eq!(
        actions(&first),
        vec![
            (crd_subject.clone(), Action::Created),
            (format!("ConfigMap/{ns}/config"), Action::Created),
            (format!("Service/{ns}/web"), Action::Created),
            (format!("Deployment/{ns}/web"), Action::Created),
            (format!("Widget/{ns}/w"), Action::Created),
        ]
    );
    let cm_live = live(&client, &cm(&ns, "config", json!({}))).await.unwrap();
    assert_eq!(cm_live["metadata"]["labels"][NAME_LABEL], "apps");
    assert_eq!(
        cm_live["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/namespace"],
        "flux-system"
    );

    // Health: the Deployment becomes Available through KCM, the scheduler and kwok; the wait is
    // watch-driven and returns as soon as everything is Current.
    let ids: Vec<ObjectRef> = first.objects().cloned().collect();
    let start = Instant::now();
    health::wait_for(client.clone(), &ids, Duration::from_secs(90))
        .await
        .unwrap();
    assert!(start.elapsed() < Duration::from_secs(90));
    let dep = live(&client, &deployment(&ns, "web", "")).await.unwrap();
    assert_eq!(dep["status"]["availableReplicas"], 1);

    // Second apply: nothing changed, nothing written.
    let before: Vec<String> = {
        let mut v = Vec::new();
        for o in set("a") {
            v.push(rv(&live(&client, &o).await.unwrap()));
        }
        v
    };
    let resolver = Resolver::new(client.clone());
    let second = apply_all_with(&resolver, set("a"), &opts()).await.unwrap();
    assert!(
        second.entries.iter().all(|e| e.action == Action::Unchanged),
        "{:?}",
        actions(&second)
    );
    assert!(!second.has_changes());
    let mut after = Vec::new();
    for o in set("a") {
        after.push(rv(&live(&client, &o).await.unwrap()));
    }
    assert_eq!(before, after, "an unchanged apply must not write");

    // Change one object: only it is configured.
    let third = apply_all_with(&resolver, set("b"), &opts()).await.unwrap();
    let changed: Vec<_> = third
        .entries
        .iter()
        .filter(|e| e.action != Action::Unchanged)
        .map(ToString::to_string)
        .collect();
    assert_eq!(changed, vec![format!("ConfigMap/{ns}/config configured")]);
    assert_eq!(
        third.event_message(),
        format!("ConfigMap/{ns}/config configured")
    );

    // A kubectl edit (Update by a kubectl manager) changes a value and adds a key, plus the
    // last-applied annotation: the next apply reverts all of it.
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    cms.patch(
        "config",
        &edit,
        &Patch::Merge(json!({
            "metadata": {"annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "data": {"key": "edited", "extra": "x"}})),
    )
    .await
    .unwrap();
    let fourth = apply_all_with(&resolver, set("b"), &opts()).await.unwrap();
    assert_eq!(
        fourth.action_of(&format!("ConfigMap/{ns}/config")),
        Some(Action::Configured)
    );
    let reverted = cms.get("config").await.unwrap();
    let data = reverted.data.unwrap();
    assert_eq!(data.get("key").map(String::as_str), Some("b"));
    assert!(
        !data.contains_key("extra"),
        "field added by kubectl must be removed: {data:?}"
    );
    let annotations = reverted.metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
    let managers: Vec<String> = reverted
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        !managers.iter().any(|m| m.starts_with("kubectl")),
        "{managers:?}"
    );
    let fifth = apply_all_with(&resolver, set("b"), &opts()).await.unwrap();
    assert!(!fifth.has_changes(), "{:?}", actions(&fifth));

    // A custom resource reporting Stalled fails the wait early (fail-fast), well before the timeout.
    let ar = ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(&group, "v1", "Widget"));
    let widgets = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar);
    widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [
                {"type": "Stalled", "status": "True", "reason": "Broken", "message": "no"}]}})),
        )
        .await
        .unwrap();
    let widget_id = ObjectRef::from_value(&widget(&group, &ns, "w", 1)).unwrap();
    let start = Instant::now();
    let err = health::wait_for(client.clone(), &[widget_id], Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(30));
    match &err {
        HealthError::Stalled { failed, .. } => assert_eq!(failed[0].status, Status::Failed),
        other => panic!("expected a stalled error, got {other}"),
    }
    assert!(
        err.to_string().contains(&format!(
            "failed early due to stalled resources: [Widget/{ns}/w status: 'Failed']"
        )),
        "{err}"
    );
}

#[tokio::test]
async fn ssa_annotations_are_honoured() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("ks-ssa").await.unwrap();
    let client = cp.client().await.unwrap();
    let annotated = |name: &str, key: &str, value: &str, data: &str| {
        let mut o = cm(&ns, name, json!({"k": data}));
        o["metadata"]["annotations"] = json!({ key: value });
        o
    };
    let ssa = "kustomize.toolkit.fluxcd.io/ssa";
    let reconcile = "kustomize.toolkit.fluxcd.io/reconcile";

    let first = apply_all(
        client.clone(),
        vec![
            annotated("once", ssa, "IfNotPresent", "v1"),
            annotated("ignored", ssa, "Ignore", "v1"),
            annotated("disabled", reconcile, "disabled", "v1"),
            annotated("merged", ssa, "merge", "v1"),
        ],
        &opts(),
    )
    .await
    .unwrap();
    assert_eq!(
        actions(&first),
        vec![
            (format!("ConfigMap/{ns}/disabled"), Action::Skipped),
            (format!("ConfigMap/{ns}/ignored"), Action::Skipped),
            (format!("ConfigMap/{ns}/merged"), Action::Created),
            (format!("ConfigMap/{ns}/once"), Action::Created),
        ]
    );
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    assert!(cms.get_opt("ignored").await.unwrap().is_none());
    assert!(cms.get_opt("disabled").await.unwrap().is_none());

    // IfNotPresent: existing objects are never updated.
    let second = apply_all(
        client.clone(),
        vec![annotated("once", ssa, "IfNotPresent", "v2")],
        &opts(),
    )
    .await
    .unwrap();
    assert_eq!(second.entries[0].action, Action::Skipped);
    let once = cms.get("once").await.unwrap();
    assert_eq!(once.data.unwrap()["k"], "v1");

    // reconcile: disabled on the LIVE object stops updates too.
    cms.patch(
        "merged",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {reconcile: "Disabled"}}})),
    )
    .await
    .unwrap();
    let third = apply_all(
        client.clone(),
        vec![annotated("merged", ssa, "merge", "v2")],
        &opts(),
    )
    .await
    .unwrap();
    assert_eq!(third.entries[0].action, Action::Skipped);
    assert_eq!(cms.get("merged").await.unwrap().data.unwrap()["k"], "v1");
}

#[tokio::test]
async fn force_recreates_objects_on_immutable_changes() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("ks-force").await.unwrap();
    let client = cp.client().await.unwrap();
    let named_job = |name: &str, image: &str, force: bool| {
        let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "m", "image": image}]}}}});
        if force {
            j["metadata"]["annotations"] = json!({"kustomize.toolkit.fluxcd.io/force": "Enabled"});
        }
        j
    };
    let job = |image: &str, force: bool| named_job("migrate", image, force);
    let first = apply_all(client.clone(), vec![job("busybox:1", false)], &opts())
        .await
        .unwrap();
    assert_eq!(first.entries[0].action, Action::Created);
    let uid_before = live(&client, &job("", false)).await.unwrap()["metadata"]["uid"].clone();

    // Without force the immutable change fails the dry-run, with Flux's message format.
    let err = apply_all(client.clone(), vec![job("busybox:2", false)], &opts())
        .await
        .unwrap_err();
    assert!(
        matches!(&err.kind, ApplyErrorKind::DryRun { reason, .. } if reason == "Invalid"),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("Job/{ns}/migrate dry-run failed (Invalid): ")),
        "{text}"
    );
    assert!(text.contains("immutable"), "{text}");

    // With the force annotation the Job is deleted and created again.
    let forced = apply_all(client.clone(), vec![job("busybox:2", true)], &opts())
        .await
        .unwrap();
    assert_eq!(forced.entries[0].action, Action::Created);
    let after = live(&client, &job("", false)).await.unwrap();
    assert_ne!(after["metadata"]["uid"], uid_before);
    assert_eq!(
        after["spec"]["template"]["spec"]["containers"][0]["image"],
        "busybox:2"
    );

    // spec.force (the option) works the same way, on a Job without the annotation.
    let plain = |image: &str| named_job("plain", image, false);
    apply_all(client.clone(), vec![plain("busybox:1")], &opts())
        .await
        .unwrap();
    let uid_before = live(&client, &plain("")).await.unwrap()["metadata"]["uid"].clone();
    let mut o = opts();
    o.force = true;
    let forced = apply_all(client.clone(), vec![plain("busybox:3")], &o)
        .await
        .unwrap();
    assert_eq!(forced.entries[0].action, Action::Created);
    assert_ne!(
        live(&client, &plain("")).await.unwrap()["metadata"]["uid"],
        uid_before
    );
}

#[tokio::test]
async fn prune_deletes_stale_objects_but_keeps_opted_out_and_foreign_ones() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("ks-prune").await.unwrap();
    let client = cp.client().await.unwrap();
    let mut keep = cm(&ns, "keep-me", json!({"k": "v"}));
    keep["metadata"]["annotations"] = json!({"kustomize.toolkit.fluxcd.io/prune": "disabled"});
    let old_set = vec![
        cm(&ns, "stays", json!({"k": "v"})),
        cm(&ns, "stale", json!({"k": "v"})),
        keep.clone(),
        cm(&ns, "foreign", json!({"k": "v"})),
        service(&ns, "stale-svc"),
    ];
    let resolver = Resolver::new(client.clone());
    let applied = apply_all_with(&resolver, old_set, &opts()).await.unwrap();
    let old_inv = inventory::build(applied.objects());
    assert_eq!(old_inv.entries.len(), 5);
    assert_eq!(old_inv.entries[0].id, format!("{ns}_foreign__ConfigMap"));
    assert_eq!(old_inv.entries[0].v, "v1");

    // "foreign" was taken over by another Kustomization since.
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    cms.patch(
        "foreign",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {NAME_LABEL: "other"}}})),
    )
    .await
    .unwrap();

    let new_set = vec![cm(&ns, "stays", json!({"k": "v"}))];
    let applied = apply_all_with(&resolver, new_set, &opts()).await.unwrap();
    let new_inv = inventory::build(applied.objects());
    let stale = inventory::diff(&old_inv, &new_inv).unwrap();
    let stale_subjects: Vec<String> = stale.iter().map(ObjectRef::subject).collect();
    assert_eq!(
        stale_subjects,
        vec![
            format!("ConfigMap/{ns}/foreign"),
            format!("ConfigMap/{ns}/keep-me"),
            format!("ConfigMap/{ns}/stale"),
            format!("Service/{ns}/stale-svc"),
        ]
    );
    let pruned = kustomize_controller::ssa::delete_all(&resolver, &stale, &owner())
        .await
        .unwrap();
    // Reverse apply order.
    assert_eq!(
        actions(&pruned),
        vec![
            (format!("Service/{ns}/stale-svc"), Action::Deleted),
            (format!("ConfigMap/{ns}/stale"), Action::Deleted),
            (format!("ConfigMap/{ns}/keep-me"), Action::Skipped),
            (format!("ConfigMap/{ns}/foreign"), Action::Skipped),
        ]
    );
    assert_eq!(
        pruned.event_message(),
        format!("Service/{ns}/stale-svc deleted\nConfigMap/{ns}/stale deleted")
    );
    assert!(cms.get_opt("stale").await.unwrap().is_none());
    assert!(cms.get_opt("keep-me").await.unwrap().is_some());
    assert!(cms.get_opt("foreign").await.unwrap().is_some());
    assert!(cms.get_opt("stays").await.unwrap().is_some());

    // Pruning again: the already deleted objects count as deleted (NotFound).
    let again = kustomize_controller::ssa::delete_all(&resolver, &stale[2..], &owner())
        .await
        .unwrap();
    assert!(again.entries.iter().all(|e| e.action == Action::Deleted));

    // Termination wait (WaitForTermination) returns once the objects are gone.
    let gone: Vec<ObjectRef> = stale[2..].to_vec();
    health::wait_for_termination(&resolver, &gone, Duration::from_secs(30))
        .await
        .unwrap();
}

#[tokio::test]
async fn health_check_times_out_with_flux_message() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("ks-health").await.unwrap();
    let client = cp.client().await.unwrap();
    // No node matches the selector, so the Deployment never becomes available.
    let mut dep = deployment(&ns, "stuck", "nginx:1.27");
    dep["spec"]["template"]["spec"]["nodeSelector"] = json!({"no-such-node": "true"});
    let applied = apply_all(client.clone(), vec![dep], &opts()).await.unwrap();
    let ids: Vec<ObjectRef> = applied.objects().cloned().collect();
    let start = Instant::now();
    let err = health::wait_for(client.clone(), &ids, Duration::from_secs(3))
        .await
        .unwrap_err();
    let elapsed = start.elapsed();
    assert!(elapsed >= Duration::from_secs(3) && elapsed < Duration::from_secs(20));
    let text = err.to_string();
    assert!(text.starts_with("health check failed after 3"), "{text}");
    assert!(
        text.ends_with(&format!(
            "timeout waiting for: [Deployment/{ns}/stuck status: 'InProgress']"
        )),
        "{text}"
    );

    // A missing object is reported as NotFound.
    let missing = ObjectRef::from_value(&cm(&ns, "missing", json!({}))).unwrap();
    let err = health::wait_for(client.clone(), &[missing], Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with(&format!("[ConfigMap/{ns}/missing status: 'NotFound']")),
        "{err}"
    );
}

#[tokio::test]
async fn finalizer_deletes_owned_objects_and_waits_for_termination() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("ks-final").await.unwrap();
    let client = cp.client().await.unwrap();
    let resolver = Resolver::new(client.clone());
    let set = vec![
        deployment(&ns, "web", "nginx:1.27"),
        cm(&ns, "config", json!({"k": "v"})),
    ];
    let applied = apply_all_with(&resolver, set.clone(), &opts())
        .await
        .unwrap();
    let inv: Vec<ObjectRef> = applied.objects().cloned().collect();

    // Orphan (MirrorPrune without prune) leaves everything in place.
    let action = prune::finalize_action(
        rflux_common::api::kustomization::DeletionPolicy::MirrorPrune,
        false,
        false,
        inv.is_empty(),
    );
    let out = prune::finalize(&resolver, &inv, &owner(), action, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(out.changes.entries.is_empty());
    assert!(live(&client, &set[1]).await.is_some());

    let action = prune::finalize_action(
        rflux_common::api::kustomization::DeletionPolicy::WaitForTermination,
        false,
        false,
        inv.is_empty(),
    );
    assert_eq!(action, prune::FinalizeAction::DeleteAndWait);
    let out = prune::finalize(&resolver, &inv, &owner(), action, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(
        out.termination_error.is_none(),
        "{:?}",
        out.termination_error
    );
    assert_eq!(
        out.changes.event_message(),
        format!("Deployment/{ns}/web deleted\nConfigMap/{ns}/config deleted")
    );
    for o in &set {
        assert!(live(&client, o).await.is_none());
    }
}

#[tokio::test]
async fn ignore_rules_keep_drift_in_ignored_fields() {
    use rflux_common::api::kustomization::{IgnoreRule, Selector};
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("ks-ignore").await.unwrap();
    let client = cp.client().await.unwrap();
    let resolver = Resolver::new(client.clone());
    let mut o = opts();
    o.ignore = kustomize_controller::ssa::compile_ignore_rules(&[IgnoreRule {
        paths: vec!["/spec/replicas".into()],
        target: Some(Selector {
            kind: Some("Deployment".into()),
            ..Selector::default()
        }),
    }])
    .unwrap();
    apply_all_with(&resolver, vec![deployment(&ns, "web", "nginx:1.27")], &o)
        .await
        .unwrap();
    // An autoscaler (another manager) scales the Deployment.
    let api = resolver
        .api(&ObjectRef::from_value(&deployment(&ns, "web", "")).unwrap())
        .await
        .unwrap();
    let hpa = PatchParams {
        field_manager: Some("autoscaler".into()),
        ..PatchParams::default()
    };
    api.patch("web", &hpa, &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();

    // The ignored drift is not reverted: nothing to do.
    let again = apply_all_with(&resolver, vec![deployment(&ns, "web", "nginx:1.27")], &o)
        .await
        .unwrap();
    assert_eq!(again.entries[0].action, Action::Unchanged);
    let replicas = |v: Value| v["spec"]["replicas"].as_i64().unwrap();
    assert_eq!(
        replicas(live(&client, &deployment(&ns, "web", "")).await.unwrap()),
        3
    );

    // A real change is applied, and the live replica count is adopted.
    let changed = apply_all_with(&resolver, vec![deployment(&ns, "web", "nginx:1.28")], &o)
        .await
        .unwrap();
    assert_eq!(changed.entries[0].action, Action::Configured);
    let now = live(&client, &deployment(&ns, "web", "")).await.unwrap();
    assert_eq!(replicas(now.clone()), 3);
    assert_eq!(
        now["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.28"
    );

    // Without ignore rules the same drift is reverted.
    let reverted = apply_all_with(
        &resolver,
        vec![deployment(&ns, "web", "nginx:1.28")],
        &opts(),
    )
    .await
    .unwrap();
    assert_eq!(reverted.entries[0].action, Action::Configured);
    assert_eq!(
        replicas(live(&client, &deployment(&ns, "web", "")).await.unwrap()),
        1
    );
}
