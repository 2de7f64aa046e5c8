//! The shared controller runner (`rflux_common::runtime::run_controller`) on a real API server:
//! Flux's predicate (generation or `reconcile.fluxcd.io/requestedAt` changes trigger, other
//! metadata/data changes do not), label-selector scoping, metrics, graceful stop.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use rflux_common::runtime::CancellationToken;
use rflux_common::runtime::controller::{ControllerSettings, no_requeue, run_controller};
use rflux_common::runtime::metrics::Metrics;
use rflux_e2e::ControlPlane;

#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

fn names(seen: &Seen) -> Vec<String> {
    seen.0.lock().unwrap().clone()
}

async fn wait_for(seen: &Seen, pred: impl Fn(&[String]) -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if pred(&names(seen)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {:?}",
            names(seen)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn cm(name: &str, labelled: bool) -> ConfigMap {
    let mut labels = BTreeMap::new();
    if labelled {
        labels.insert("sharding.fluxcd.io/key".to_string(), "shard1".to_string());
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"},
    }))
    .unwrap()
}

#[tokio::test]
async fn runner_honours_flux_predicate_selector_and_metrics() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("runner").await.unwrap();
    let client = cp.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &cm("in-shard", true))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("other-shard", false))
        .await
        .unwrap();

    let metrics = Metrics::new().unwrap();
    let cm_metrics = metrics.register_controller("configmap", 2);
    let seen = Arc::new(Seen::default());
    let stop = CancellationToken::new();
    let runner = tokio::spawn(run_controller(
        api.clone(),
        ControllerSettings {
            name: "configmap".into(),
            group: "".into(),
            kind: "ConfigMap".into(),
            concurrency: 2,
            label_selector: "sharding.fluxcd.io/key=shard1".into(),
        },
        cm_metrics,
        Duration::from_millis(100),
        Duration::from_secs(1),
        seen.clone(),
        |obj: Arc<ConfigMap>, seen: Arc<Seen>| async move {
            let name = obj.metadata.name.clone().unwrap_or_default();
            seen.0.lock().unwrap().push(name);
            Ok::<Action, std::io::Error>(no_requeue())
        },
        stop.clone(),
    ));

    wait_for(&seen, |s| s.len() == 1, "initial reconcile").await;
    assert_eq!(names(&seen), vec!["in-shard".to_string()]);

    // A data change does not change generation/requestedAt: filtered out.
    api.patch(
        "in-shard",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"data": {"k": "changed"}})),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        names(&seen).len(),
        1,
        "data change must not trigger: {:?}",
        names(&seen)
    );

    // `flux reconcile` sets requestedAt: triggers.
    api.patch(
        "in-shard",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
            "reconcile.fluxcd.io/requestedAt": "2026-01-01T00:00:00Z"
        }}})),
    )
    .await
    .unwrap();
    wait_for(&seen, |s| s.len() == 2, "requestedAt reconcile").await;

    let text = metrics.encode().unwrap();
    let line = text
        .lines()
        .find(|l| {
            l.starts_with(
                "controller_runtime_reconcile_total{controller=\"configmap\",result=\"success\"}",
            )
        })
        .unwrap();
    assert!(line.ends_with(" 2"), "{line}");
    assert!(text.contains(&format!(
        "gotk_reconcile_duration_seconds_count{{kind=\"ConfigMap\",name=\"in-shard\",namespace=\"{ns}\"}} 2"
    )));
    assert!(!text.contains("other-shard"));

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(20), runner)
        .await
        .expect("runner stops on cancel")
        .unwrap();
}

#[tokio::test]
async fn events_are_recorded_and_aggregated() {
    use k8s_openapi::api::core::v1::Event;
    use kube::api::ListParams;
    use rflux_common::runtime::events::{EventRecorder, EventType};

    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("events").await.unwrap();
    let client = cp.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut obj = cm("podinfo", false);
    obj.metadata.annotations = Some(BTreeMap::from([(
        "event.toolkit.fluxcd.io/team".to_string(),
        "platform".to_string(),
    )]));
    let obj = api.create(&PostParams::default(), &obj).await.unwrap();
    let recorder = EventRecorder::new(client.clone(), "source-controller", "pod-1");
    for _ in 0..3 {
        recorder
            .record(
                &obj,
                EventType::Normal,
                "NewArtifact",
                "stored artifact for commit 'init'",
                &[("source.toolkit.fluxcd.io/revision", "main@sha1:abc")],
            )
            .await
            .unwrap();
    }
    recorder
        .record(
            &obj,
            EventType::Warning,
            "GitOperationFailed",
            "auth failed",
            &[],
        )
        .await
        .unwrap();
    let events = Api::<Event>::namespaced(client, &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let normal: Vec<&Event> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("NewArtifact"))
        .collect();
    assert_eq!(normal.len(), 1, "identical events are aggregated");
    let e = normal[0];
    assert_eq!(e.count, Some(3));
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.involved_object.name.as_deref(), Some("podinfo"));
    assert_eq!(e.involved_object.uid, obj.metadata.uid);
    assert_eq!(e.reporting_component.as_deref(), Some("source-controller"));
    assert_eq!(e.reporting_instance.as_deref(), Some("pod-1"));
    let ann = e.metadata.annotations.clone().unwrap();
    assert_eq!(ann["source.toolkit.fluxcd.io/revision"], "main@sha1:abc");
    assert_eq!(ann["event.toolkit.fluxcd.io/team"], "platform");
    let warning = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("GitOperationFailed"))
        .unwrap();
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
}

#[tokio::test]
async fn finalizers_are_added_and_removed_with_optimistic_locking() {
    use rflux_common::runtime::finalizers::{add_finalizer, remove_finalizer};
    // Core objects require a qualified finalizer name (Flux's `finalizers.fluxcd.io` is only
    // accepted, with a warning, on custom resources).
    const FLUX_FINALIZER: &str = "toolkit.fluxcd.io/test-finalizer";

    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("finalizers").await.unwrap();
    let client = cp.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let mut obj = cm("app", false);
    obj.metadata.finalizers = Some(vec!["example.com/keep".to_string()]);
    let obj = api.create(&PostParams::default(), &obj).await.unwrap();

    let added = add_finalizer(&api, &obj, FLUX_FINALIZER)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        added.metadata.finalizers.clone().unwrap(),
        vec!["example.com/keep".to_string(), FLUX_FINALIZER.to_string()]
    );
    assert!(
        add_finalizer(&api, &added, FLUX_FINALIZER)
            .await
            .unwrap()
            .is_none()
    );
    // A stale copy (old resourceVersion) is rejected instead of clobbering the list.
    let err = {
        let mut stale = added.clone();
        stale.metadata.resource_version = obj.metadata.resource_version.clone();
        remove_finalizer(&api, &stale, FLUX_FINALIZER).await
    };
    match err {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let removed = remove_finalizer(&api, &added, FLUX_FINALIZER)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        removed.metadata.finalizers.clone().unwrap(),
        vec!["example.com/keep".to_string()]
    );
    // Clean up so the namespace can go away.
    let cleared = remove_finalizer(&api, &removed, "example.com/keep")
        .await
        .unwrap()
        .unwrap();
    assert!(cleared.metadata.finalizers.unwrap_or_default().is_empty());
}

/// Flux turns its client-side rate limit off when the API server runs API Priority and
/// Fairness; so do we. The real kube-apiserver does (the default since Kubernetes 1.29).
#[tokio::test]
async fn the_real_api_server_does_flow_control_so_clients_are_not_throttled() {
    let cp = ControlPlane::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    assert!(rflux_common::runtime::client::flow_control_enabled(&client).await);
}
