//! The Kustomization reconcile pipeline on the real control plane, without source-controller:
//! artifacts are packaged with `package_to_file`, served on loopback, and published by patching
//! a GitRepository's status by hand. The reconciler runs in-process (`reconcile` called
//! directly, so every step is deterministic).
//!
//! One test walks through: first apply (Ready, lastAppliedRevision, inventory, events), a new
//! revision (change + prune), a build failure (BuildFailed, nothing changed), dependsOn ordering,
//! service-account impersonation (denied without RBAC, allowed once granted) and deletion
//! (finalizer garbage collection).
//!
//! It holds `<e2e state>/crds.lock` so the CRD compatibility test cannot swap CRDs meanwhile.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Event, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kustomize_controller::reconcile::reconcile;
use rflux_common::api::kustomization::Kustomization;
use rflux_common::runtime::CancellationToken;
use rflux_common::runtime::conditions;
use rflux_common::runtime::controller::{ControllerSettings, run_controller};
use rflux_common::runtime::metrics::Metrics;
use rflux_e2e::ControlPlane;
use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomization_reconcile_pipeline() {
    let cp = ControlPlane::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    let _lock = lock_crds_and_install(&client).await;
    let ns = cp.create_namespace("ksrec").await.unwrap();

    // Artifact server on loopback.
    let (publisher, server) = serve_artifacts(&client, &ns).await;

    let cache = tempfile::tempdir().unwrap();
    let ctx = Arc::new(reconcile_context(
        &client,
        cp.config().await.unwrap(),
        cache.path(),
    ));
    let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // 1. First revision: two ConfigMaps, applied and Ready.
    let kfile = "resources:\n- a.yaml\n- b.yaml\n";
    let rev1 = publisher
        .publish(
            "repo",
            1,
            &[
                ("deploy/kustomization.yaml", kfile),
                ("deploy/a.yaml", &cm_file("cm-a", "one")),
                ("deploy/b.yaml", &cm_file("cm-b", "one")),
            ],
        )
        .await;
    create_ks(&ks_api, &ns, "app", "repo", "./deploy", json!({})).await;
    let app = run_once(&ks_api, &ctx, "app").await;
    let msg = assert_ready(&app, "True", "ReconciliationSucceeded");
    assert_eq!(msg, format!("Applied revision: {rev1}"));
    let status = app.status.clone().unwrap();
    assert_eq!(status.last_applied_revision.as_deref(), Some(rev1.as_str()));
    assert_eq!(
        status.last_attempted_revision.as_deref(),
        Some(rev1.as_str())
    );
    assert_eq!(status.observed_generation, app.metadata.generation);
    assert_eq!(status.inventory.as_ref().unwrap().entries.len(), 2);
    assert_eq!(status.history.as_ref().unwrap().len(), 1);
    assert!(app.finalizers().iter().any(|f| f == "finalizers.fluxcd.io"));
    assert_eq!(cm_value(&cms, "cm-a").await.as_deref(), Some("one"));
    assert_eq!(cm_value(&cms, "cm-b").await.as_deref(), Some("one"));
    let labels = cms.get("cm-a").await.unwrap().metadata.labels.unwrap();
    assert_eq!(
        labels
            .get("kustomize.toolkit.fluxcd.io/name")
            .map(String::as_str),
        Some("app")
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let evs = events
        .list(&ListParams::default().fields("involvedObject.name=app"))
        .await
        .unwrap();
    assert!(
        evs.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("ReconciliationSucceeded")),
        "no ReconciliationSucceeded event: {:?}",
        evs.items.iter().map(|e| &e.reason).collect::<Vec<_>>()
    );

    // 2. New revision: cm-a changes, cm-b is removed and pruned.
    let rev2 = publisher
        .publish(
            "repo",
            2,
            &[
                ("deploy/kustomization.yaml", "resources:\n- a.yaml\n"),
                ("deploy/a.yaml", &cm_file("cm-a", "two")),
            ],
        )
        .await;
    let app = run_once(&ks_api, &ctx, "app").await;
    assert_ready(&app, "True", "ReconciliationSucceeded");
    assert_eq!(
        app.status
            .as_ref()
            .unwrap()
            .last_applied_revision
            .as_deref(),
        Some(rev2.as_str())
    );
    assert_eq!(
        app.status
            .as_ref()
            .unwrap()
            .inventory
            .as_ref()
            .unwrap()
            .entries
            .len(),
        1
    );
    assert_eq!(cm_value(&cms, "cm-a").await.as_deref(), Some("two"));
    assert_eq!(cm_value(&cms, "cm-b").await, None, "cm-b was not pruned");

    // 3. A broken revision: BuildFailed, nothing changes.
    let rev3 = publisher
        .publish(
            "repo",
            3,
            &[
                (
                    "deploy/kustomization.yaml",
                    "resources:\n- a.yaml\n- missing.yaml\n",
                ),
                ("deploy/a.yaml", &cm_file("cm-a", "three")),
            ],
        )
        .await;
    let app = run_once(&ks_api, &ctx, "app").await;
    let msg = assert_ready(&app, "False", "BuildFailed");
    // The message places the error at the entry (file:line, relative to the artifact), not
    // at a temporary directory of the controller.
    assert!(
        msg.contains("deploy/kustomization.yaml:3:") && msg.contains("missing.yaml"),
        "{msg}"
    );
    assert!(!msg.contains("/tmp/") && !msg.contains(".cache"), "{msg}");
    let status = app.status.clone().unwrap();
    assert_eq!(status.last_applied_revision.as_deref(), Some(rev2.as_str()));
    assert_eq!(
        status.last_attempted_revision.as_deref(),
        Some(rev3.as_str())
    );
    assert_eq!(cm_value(&cms, "cm-a").await.as_deref(), Some("two"));
    let conds = status.conditions.unwrap();
    assert_eq!(
        conditions::get_reason(&conds, "Reconciling"),
        Some("ProgressingWithRetry")
    );

    // 4. dependsOn: B waits for A.
    let files2 = [
        ("a/cm.yaml", cm_file("dep-a", "a")),
        ("b/cm.yaml", cm_file("dep-b", "b")),
        ("sa/cm.yaml", cm_file("by-sa", "sa")),
    ];
    let files2: Vec<(&str, &str)> = files2.iter().map(|(p, c)| (*p, c.as_str())).collect();
    let rev_other = publisher.publish("other", 7, &files2).await;
    create_ks(&ks_api, &ns, "ks-a", "other", "./a", json!({})).await;
    // The built-in readiness check (readyExpr is covered by ks_cel.rs).
    create_ks(
        &ks_api,
        &ns,
        "ks-b",
        "other",
        "./b",
        json!({"dependsOn": [{"name": "ks-a"}]}),
    )
    .await;
    let b = run_once(&ks_api, &ctx, "ks-b").await;
    let msg = assert_ready(&b, "False", "DependencyNotReady");
    assert!(msg.contains("ks-a"), "{msg}");
    assert_eq!(cm_value(&cms, "dep-b").await, None);
    let a = run_once(&ks_api, &ctx, "ks-a").await;
    assert_eq!(ready(&a).0, "True", "{}", ready(&a).2);
    let b = run_once(&ks_api, &ctx, "ks-b").await;
    let (st, _, msg) = ready(&b);
    assert_eq!(st, "True", "{msg}");
    assert_eq!(
        b.status.as_ref().unwrap().last_applied_revision.as_deref(),
        Some(rev_other.as_str())
    );
    assert_eq!(cm_value(&cms, "dep-b").await.as_deref(), Some("b"));
    let b_conds = b
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .unwrap();
    assert!(b_conds.iter().all(|c| c.type_ != "UnsupportedFields"));

    // 5. Impersonation: a ServiceAccount without RBAC is denied; allowed once granted.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "deployer"}})).unwrap(),
    )
    .await
    .unwrap();
    create_ks(
        &ks_api,
        &ns,
        "ks-sa",
        "other",
        "./sa",
        json!({"serviceAccountName": "deployer"}),
    )
    .await;
    let sa = run_once(&ks_api, &ctx, "ks-sa").await;
    let msg = assert_ready(&sa, "False", "ReconciliationFailed");
    assert!(
        msg.contains("forbidden") && msg.contains("system:serviceaccount:"),
        "unclear denial: {msg}"
    );
    assert_eq!(cm_value(&cms, "by-sa").await, None);
    let roles: Api<Role> = Api::namespaced(client.clone(), &ns);
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "deployer"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns);
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "deployer"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployer"},
                "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": ns}]
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    // RBAC changes reach the authorizer's cache asynchronously: allow a few tries.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sa = run_once(&ks_api, &ctx, "ks-sa").await;
        let (st, _, msg) = ready(&sa);
        if st == "True" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still denied after the RoleBinding: {msg}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(cm_value(&cms, "by-sa").await.as_deref(), Some("sa"));

    // 6. Deletion: the finalizer garbage-collects the inventory (prune: true).
    ks_api
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    let app = ks_api.get("app").await.unwrap();
    assert!(app.metadata.deletion_timestamp.is_some());
    reconcile(Arc::new(app), ctx.clone()).await.unwrap();
    assert_eq!(
        cm_value(&cms, "cm-a").await,
        None,
        "cm-a not garbage-collected"
    );
    assert!(ks_api.get_opt("app").await.unwrap().is_none());

    // Cleanup.
    for name in ["ks-a", "ks-b", "ks-sa"] {
        ks_api.delete(name, &DeleteParams::default()).await.unwrap();
        let obj = ks_api.get(name).await.unwrap();
        reconcile(Arc::new(obj), ctx.clone()).await.unwrap();
    }
    // 7. The same pipeline under the controller runner (as main.rs wires it), with
    // `wait: true`: Ready and Healthy without calling `reconcile` by hand; deletion through
    // the finalizer.
    let rev_run = publisher
        .publish("runner", 9, &[("run/cm.yaml", &cm_file("by-runner", "r"))])
        .await;
    create_ks(
        &ks_api,
        &ns,
        "ks-run",
        "runner",
        "./run",
        json!({"wait": true}),
    )
    .await;
    let metrics = Metrics::new().unwrap();
    let runner_stop = CancellationToken::new();
    let runner = tokio::spawn(run_controller(
        ks_api.clone(),
        ControllerSettings {
            name: "kustomization".into(),
            group: "kustomize.toolkit.fluxcd.io".into(),
            kind: "Kustomization".into(),
            concurrency: 2,
            label_selector: String::new(),
        },
        metrics.register_controller("kustomization", 2),
        Duration::from_millis(500),
        Duration::from_secs(5),
        ctx.clone(),
        reconcile,
        runner_stop.clone(),
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    let run = loop {
        let k = ks_api.get("ks-run").await.unwrap();
        let conds = k
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        if conditions::is_ready(&conds) {
            break k;
        }
        assert!(
            Instant::now() < deadline,
            "ks-run not Ready under the runner: {conds:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let status = run.status.clone().unwrap();
    assert_eq!(
        status.last_applied_revision.as_deref(),
        Some(rev_run.as_str())
    );
    let conds = status.conditions.unwrap();
    assert_eq!(conditions::get_reason(&conds, "Healthy"), Some("Succeeded"));
    assert!(conditions::get(&conds, "Reconciling").is_none());
    assert_eq!(cm_value(&cms, "by-runner").await.as_deref(), Some("r"));
    ks_api
        .delete("ks-run", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ks_api.get_opt("ks-run").await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "ks-run not finalized by the runner"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(cm_value(&cms, "by-runner").await, None);
    runner_stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), runner)
        .await
        .unwrap()
        .unwrap();

    server.stop().await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = nss.delete(&ns, &DeleteParams::default()).await;
}
