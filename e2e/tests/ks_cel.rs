//! CEL in Kustomizations on the real control plane (in-process reconciles, like
//! ks_reconcile.rs): `healthCheckExprs` judge a custom resource whose status the test sets
//! (Current → Healthy, `failed` → HealthCheckFailed), `dependsOn[].readyExpr` gates a dependent
//! (and replaces the built-in check unless AdditiveCELDependencyCheck is on), and invalid
//! expressions stall the Kustomization with InvalidCELExpression.
//!
//! It holds `<e2e state>/crds.lock` so the CRD compatibility test cannot swap CRDs meanwhile.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kustomize_controller::reconcile::reconcile;
use rflux_common::api::kustomization::Kustomization;
use rflux_common::runtime::conditions;
use rflux_e2e::ControlPlane;
use serde_json::json;
use support::*;

fn widget_crd(group: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap()
}

fn widget_file(group: &str, name: &str) -> String {
    format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec:\n  size: 1\n")
}

fn condition(ks: &Kustomization, type_: &str) -> Option<(String, String, String)> {
    let conds = ks.status.as_ref()?.conditions.clone()?;
    conditions::get(&conds, type_)
        .cloned()
        .map(|c| (c.status, c.reason, c.message))
}

async fn wait_until_exists(api: &Api<DynamicObject>, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.get_opt(name).await.unwrap().is_none() {
        assert!(Instant::now() < deadline, "widget {name} was never applied");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn set_phase(api: &Api<DynamicObject>, name: &str, phase: &str) {
    let patch = json!({"status": {"phase": phase}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomization_cel_expressions() {
    let cp = ControlPlane::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    let _lock = lock_crds_and_install(&client).await;
    let ns = cp.create_namespace("kscel").await.unwrap();

    // The custom resource kind, unique to this run.
    let group = format!("{ns}.celtest.rflux.io");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &widget_crd(&group))
        .await
        .unwrap();
    wait_crd_established(&crds, &format!("widgets.{group}"))
        .await
        .unwrap();
    let ar = ApiResource {
        group: group.clone(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);

    // Artifact server on loopback.
    let (publisher, server) = serve_artifacts(&client, &ns).await;
    let cache = tempfile::tempdir().unwrap();
    let cp_config = cp.config().await.unwrap();
    let new_ctx = |additive: bool| {
        let mut ctx = reconcile_context(&client, cp_config.clone(), cache.path());
        ctx.additive_cel_dependency_check = additive;
        Arc::new(ctx)
    };
    let ctx = new_ctx(false);
    let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), &ns);

    let rev = publisher
        .publish(
            "repo",
            1,
            &[
                ("widget/w1.yaml", &widget_file(&group, "w1")),
                ("a/cm.yaml", &cm_file("dep-a", "a")),
                ("b/cm.yaml", &cm_file("dep-b", "b")),
                ("d/cm.yaml", &cm_file("dep-d", "d")),
            ],
        )
        .await;

    // 1. healthCheckExprs: the Widget becomes Healthy through `current` once the test sets
    //    its status; the wait is watch-driven, so it ends right after the status update.
    let exprs = json!([
        // Group-wide entry (no kind): covers Widget.
        {"apiVersion": format!("{group}/v1"),
         "current": "status.phase == 'Ready'",
         "failed": "status.phase == 'Failed'"},
        // Kind-specific entry for another kind of the group: must not be used for Widget.
        {"apiVersion": format!("{group}/v1"), "kind": "Gadget", "current": "false"}
    ]);
    create_ks(
        &ks_api,
        &ns,
        "health",
        "repo",
        "./widget",
        json!({"healthCheckExprs": exprs,
               "healthChecks": [{"apiVersion": format!("{group}/v1"), "kind": "Widget",
                                 "name": "w1"}]}),
    )
    .await;
    let obj = ks_api.get("health").await.unwrap();
    let started = Instant::now();
    let run = tokio::spawn(reconcile(Arc::new(obj), ctx.clone()));
    wait_until_exists(&widgets, "w1").await;
    // Not Current yet: no status (an evaluation error) and then an unknown phase.
    tokio::time::sleep(Duration::from_millis(500)).await;
    set_phase(&widgets, "w1", "Provisioning").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !run.is_finished(),
        "health check passed before the Widget was Ready"
    );
    let set_at = Instant::now();
    set_phase(&widgets, "w1", "Ready").await;
    run.await.unwrap().unwrap();
    println!(
        "health check: passed {:?} after the status update ({:?} in all)",
        set_at.elapsed(),
        started.elapsed()
    );
    let health = ks_api.get("health").await.unwrap();
    let msg = assert_ready(&health, "True", "ReconciliationSucceeded");
    assert_eq!(msg, format!("Applied revision: {rev}"));
    let (st, reason, msg) = condition(&health, "Healthy").unwrap();
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("True", "Succeeded"),
        "{msg}"
    );
    assert!(condition(&health, "UnsupportedFields").is_none());

    // 2. `failed`: the next reconcile fails its health check at once (fail-fast).
    set_phase(&widgets, "w1", "Failed").await;
    let health = run_once(&ks_api, &ctx, "health").await;
    let msg = assert_ready(&health, "False", "HealthCheckFailed");
    assert!(
        msg.contains("failed early due to stalled resources")
            && msg.contains(&format!("Widget/{ns}/w1 status: 'Failed'")),
        "{msg}"
    );
    let (st, reason, _) = condition(&health, "Healthy").unwrap();
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "HealthCheckFailed")
    );

    // 3. readyExpr gates the dependent until it is true.
    let mut a = kustomization(&ns, "ks-a", "repo", "./a", json!({}));
    a.metadata.labels = Some([("release".to_string(), "v1".to_string())].into());
    ks_api.create(&PostParams::default(), &a).await.unwrap();
    let ready_expr = "dep.?status.?lastAppliedRevision.orValue('') != '' && \
                      dep.metadata.?labels.?release.orValue('') == self.metadata.labels.release";
    let mut b = kustomization(
        &ns,
        "ks-b",
        "repo",
        "./b",
        json!({"dependsOn": [{"name": "ks-a", "readyExpr": ready_expr}]}),
    );
    b.metadata.labels = Some([("release".to_string(), "v2".to_string())].into());
    ks_api.create(&PostParams::default(), &b).await.unwrap();
    let not_ready = format!("dependency '{ns}/ks-a' is not ready according to readyExpr eval");
    let b_obj = run_once(&ks_api, &ctx, "ks-b").await;
    let msg = assert_ready(&b_obj, "False", "DependencyNotReady");
    assert!(msg.contains(&not_ready), "{msg}");
    // ks-a Ready: the built-in check would pass, but the expression still says no.
    let a_obj = run_once(&ks_api, &ctx, "ks-a").await;
    assert_eq!(ready(&a_obj).0, "True", "{}", ready(&a_obj).2);
    let b_obj = run_once(&ks_api, &ctx, "ks-b").await;
    let (st, _, msg) = ready(&b_obj);
    assert_eq!(st, "False", "{msg}");
    assert!(msg.contains(&not_ready), "{msg}");
    assert_eq!(
        cm_value(&Api::namespaced(client.clone(), &ns), "dep-b").await,
        None
    );
    // The dependency's label now matches: ks-b proceeds.
    let patch = json!({"metadata": {"labels": {"release": "v2"}}});
    ks_api
        .patch("ks-a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let b_obj = run_once(&ks_api, &ctx, "ks-b").await;
    let (st, _, msg) = ready(&b_obj);
    assert_eq!(st, "True", "{msg}");
    assert_eq!(
        cm_value(&Api::namespaced(client.clone(), &ns), "dep-b")
            .await
            .as_deref(),
        Some("b")
    );

    // 4. readyExpr replaces the built-in check (ks-c is never reconciled, so never Ready),
    //    unless AdditiveCELDependencyCheck is on.
    create_ks(
        &ks_api,
        &ns,
        "ks-c",
        "repo",
        "./a",
        json!({"suspend": true}),
    )
    .await;
    create_ks(
        &ks_api,
        &ns,
        "ks-d",
        "repo",
        "./d",
        json!({"dependsOn": [{"name": "ks-c", "readyExpr": "dep.metadata.name == 'ks-c'"}]}),
    )
    .await;
    let additive = new_ctx(true);
    let d_obj = run_once(&ks_api, &additive, "ks-d").await;
    let msg = assert_ready(&d_obj, "False", "DependencyNotReady");
    assert!(
        msg.contains(&format!("dependency '{ns}/ks-c' is not ready")),
        "{msg}"
    );
    let d_obj = run_once(&ks_api, &ctx, "ks-d").await;
    let (st, _, msg) = ready(&d_obj);
    assert_eq!(st, "True", "{msg}");

    // 5. Invalid expressions: Stalled InvalidCELExpression, observed, not requeued.
    let terminal = "Reconciliation failed terminally due to configuration error: ";
    let cases = [
        (
            "bad-health",
            json!({"healthCheckExprs": [{"apiVersion": format!("{group}/v1"), "kind": "Widget",
                                         "current": "status.phase =="}]}),
            "failed to create custom status evaluator for healthchecks[0]",
        ),
        (
            "bad-ready",
            json!({"dependsOn": [{"name": "ks-a", "readyExpr": "dep.status.("}]}),
            "failed to evaluate dependency ks-a",
        ),
        (
            "undeclared-ready",
            json!({"dependsOn": [{"name": "ks-a", "readyExpr": "other.ready"}]}),
            "undeclared reference to 'other'",
        ),
    ];
    for (name, extra, detail) in cases {
        create_ks(&ks_api, &ns, name, "repo", "./a", extra).await;
        let obj = ks_api.get(name).await.unwrap();
        let action = reconcile(Arc::new(obj), ctx.clone()).await.unwrap();
        assert_eq!(action, Action::await_change(), "{name}: requeued");
        let obj = ks_api.get(name).await.unwrap();
        let (st, reason, msg) = ready(&obj);
        assert_eq!(
            (st.as_str(), reason.as_str()),
            ("False", "InvalidCELExpression"),
            "{name}: {msg}"
        );
        assert!(
            msg.starts_with(terminal) && msg.contains(detail),
            "{name}: {msg}"
        );
        let (st, reason, _) = condition(&obj, "Stalled").unwrap();
        assert_eq!(
            (st.as_str(), reason.as_str()),
            ("True", "InvalidCELExpression")
        );
        assert!(condition(&obj, "Reconciling").is_none(), "{name}");
        assert_eq!(
            obj.status.as_ref().unwrap().observed_generation,
            obj.metadata.generation,
            "{name}: a terminal error is observed"
        );
    }

    // Clean up: Kustomizations (finalizers run through reconcile), the CRD, the namespace.
    for name in [
        "health",
        "ks-a",
        "ks-b",
        "ks-c",
        "ks-d",
        "bad-health",
        "bad-ready",
        "undeclared-ready",
    ] {
        ks_api.delete(name, &DeleteParams::default()).await.unwrap();
        if let Some(obj) = ks_api.get_opt(name).await.unwrap() {
            reconcile(Arc::new(obj), ctx.clone()).await.unwrap();
        }
    }
    crds.delete(&format!("widgets.{group}"), &DeleteParams::default())
        .await
        .unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
    server.stop().await;
}
