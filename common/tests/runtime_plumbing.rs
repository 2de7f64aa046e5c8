//! Logs (zap shape), health/metrics HTTP servers, events and finalizer helpers, client config errors.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use rflux_common::runtime::events::{EventType, build_event, event_annotations};
use rflux_common::runtime::finalizers::{
    FLUX_FINALIZER, finalizers_patch, has_finalizer, with_finalizer, without_finalizer,
};
use rflux_common::runtime::logging::{
    new_reconcile_id, reconcile_span, render_console, subscriber_with_writer,
};
use rflux_common::runtime::metrics::Metrics;
use rflux_common::runtime::server::{Readiness, bind, health_router, metrics_router, serve};
use rflux_common::runtime::{LogEncoding, LogLevel};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buf {
    type Writer = Buf;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn lines(buf: &Buf) -> Vec<String> {
    String::from_utf8(buf.0.lock().unwrap().clone())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn json_logs_have_zap_and_controller_runtime_keys() {
    let buf = Buf::default();
    let sub = subscriber_with_writer(LogLevel::Info, LogEncoding::Json, buf.clone()).unwrap();
    tracing::subscriber::with_default(sub, || {
        let id = new_reconcile_id();
        let span = reconcile_span(
            "kustomization",
            "kustomize.toolkit.fluxcd.io",
            "Kustomization",
            "apps",
            "flux-system",
            &id,
        );
        let _e = span.enter();
        tracing::info!(revision = "main@sha1:abc", "server-side apply completed");
        tracing::error!(error = "boom", "Reconciler error");
        tracing::debug!("hidden at info level");
    });
    let out = lines(&buf);
    assert_eq!(out.len(), 2, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out[0]).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        vec![
            "level",
            "ts",
            "msg",
            "controller",
            "controllerGroup",
            "controllerKind",
            "Kustomization",
            "namespace",
            "name",
            "reconcileID",
            "revision"
        ]
    );
    assert_eq!(v["level"], "info");
    assert_eq!(v["msg"], "server-side apply completed");
    assert_eq!(v["controller"], "kustomization");
    assert_eq!(v["Kustomization"]["name"], "apps");
    assert_eq!(v["Kustomization"]["namespace"], "flux-system");
    assert_eq!(v["revision"], "main@sha1:abc");
    let ts = v["ts"].as_str().unwrap();
    assert!(ts.ends_with('Z') && ts.contains('T'), "{ts}");
    assert!(ts.parse::<jiff::Timestamp>().is_ok(), "{ts}");
    assert_eq!(v["reconcileID"].as_str().unwrap().len(), 36);
    let e: serde_json::Value = serde_json::from_str(&out[1]).unwrap();
    assert_eq!(e["level"], "error");
    assert_eq!(e["error"], "boom");
}

#[test]
fn console_logs_are_tab_separated() {
    let buf = Buf::default();
    let sub = subscriber_with_writer(LogLevel::Debug, LogEncoding::Console, buf.clone()).unwrap();
    tracing::subscriber::with_default(sub, || {
        tracing::debug!(logger = "setup", "starting manager");
    });
    let out = lines(&buf);
    assert_eq!(out.len(), 1);
    let parts: Vec<&str> = out[0].split('\t').collect();
    assert_eq!(parts[1], "DEBUG");
    assert_eq!(parts[2], "setup");
    assert_eq!(parts[3], "starting manager");
    let mut rec = serde_json::Map::new();
    rec.insert("ts".into(), "t".into());
    rec.insert("level".into(), "info".into());
    rec.insert("msg".into(), "m".into());
    rec.insert("k".into(), 1.into());
    assert_eq!(render_console(&rec), "t\tINFO\tm\t{\"k\":1}");
}

#[test]
fn reconcile_ids_are_uuid_v4_shaped_and_unique() {
    let a = new_reconcile_id();
    let b = new_reconcile_id();
    assert_ne!(a, b);
    let parts: Vec<&str> = a.split('-').collect();
    assert_eq!(
        parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
        vec![8, 4, 4, 4, 12]
    );
    assert!(parts[2].starts_with('4'));
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out.split(' ').nth(1).unwrap().parse().unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (code, body)
}

#[tokio::test]
async fn health_and_metrics_servers() {
    let ready = Readiness::new();
    let stop = CancellationToken::new();
    let hl = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let haddr = hl.local_addr().unwrap();
    let h = tokio::spawn(serve(hl, health_router(ready.clone()), stop.clone()));
    let metrics = Metrics::new().unwrap();
    metrics.register_controller("gitrepository", 2);
    let ml = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let maddr = ml.local_addr().unwrap();
    let mh = tokio::spawn(serve(ml, metrics_router(metrics.clone()), stop.clone()));

    assert_eq!(http_get(haddr, "/healthz").await.0, 200);
    assert_eq!(http_get(haddr, "/readyz").await.0, 500);
    ready.set_ready(true);
    assert_eq!(http_get(haddr, "/readyz").await.0, 200);
    let (code, body) = http_get(maddr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        body.contains(
            "controller_runtime_max_concurrent_reconciles{controller=\"gitrepository\"} 2"
        )
    );
    assert_eq!(http_get(maddr, "/nope").await.0, 404);

    // Binding the same port twice fails with a typed error.
    assert!(bind(haddr).await.is_err());

    stop.cancel();
    h.await.unwrap().unwrap();
    mh.await.unwrap().unwrap();
}

#[test]
fn events_follow_flux_shape() {
    let mut obj_ann = BTreeMap::new();
    obj_ann.insert(
        "event.toolkit.fluxcd.io/team".to_string(),
        "platform".to_string(),
    );
    obj_ann.insert("unrelated/annotation".to_string(), "x".to_string());
    let ann = event_annotations(
        &obj_ann,
        &[
            ("source.toolkit.fluxcd.io/revision", "main@sha1:abc"),
            ("empty", ""),
        ],
    );
    assert_eq!(ann.len(), 2);
    assert_eq!(ann["source.toolkit.fluxcd.io/revision"], "main@sha1:abc");
    assert_eq!(ann["event.toolkit.fluxcd.io/team"], "platform");

    let involved = ObjectReference {
        api_version: Some("source.toolkit.fluxcd.io/v1".into()),
        kind: Some("GitRepository".into()),
        name: Some("podinfo".into()),
        namespace: Some("flux-system".into()),
        uid: Some("u-1".into()),
        ..ObjectReference::default()
    };
    let now = jiff::Timestamp::from_second(1_700_000_000).unwrap();
    let ev = build_event(
        &involved,
        EventType::Normal,
        "NewArtifact",
        "stored artifact for commit 'x'",
        ann,
        "source-controller",
        "source-controller-abc",
        now,
    );
    assert_eq!(ev.metadata.namespace.as_deref(), Some("flux-system"));
    assert!(ev.metadata.name.as_deref().unwrap().starts_with("podinfo."));
    assert_eq!(ev.type_.as_deref(), Some("Normal"));
    assert_eq!(ev.reason.as_deref(), Some("NewArtifact"));
    assert_eq!(ev.reporting_component.as_deref(), Some("source-controller"));
    assert_eq!(
        ev.source.as_ref().unwrap().component.as_deref(),
        Some("source-controller")
    );
    assert_eq!(ev.count, Some(1));
    assert_eq!(ev.involved_object.kind.as_deref(), Some("GitRepository"));
    assert_eq!(
        ev.metadata.annotations.as_ref().unwrap()["source.toolkit.fluxcd.io/revision"],
        "main@sha1:abc"
    );
    assert_eq!(EventType::Warning.as_k8s(), "Warning");
    assert_eq!(EventType::Trace.as_k8s(), "Normal");
    assert_eq!(EventType::Warning.severity(), "error");
}

#[test]
fn finalizer_helpers() {
    let none: Vec<String> = vec![];
    let added = with_finalizer(&none, FLUX_FINALIZER).unwrap();
    assert_eq!(added, vec![FLUX_FINALIZER.to_string()]);
    assert!(has_finalizer(&added, FLUX_FINALIZER));
    assert!(with_finalizer(&added, FLUX_FINALIZER).is_none());
    let two = vec!["other/x".to_string(), FLUX_FINALIZER.to_string()];
    assert_eq!(
        without_finalizer(&two, FLUX_FINALIZER).unwrap(),
        vec!["other/x".to_string()]
    );
    assert!(without_finalizer(&none, FLUX_FINALIZER).is_none());
    assert_eq!(
        finalizers_patch(&added, Some("42")),
        serde_json::json!({"metadata": {"finalizers": [FLUX_FINALIZER], "resourceVersion": "42"}})
    );
    assert_eq!(
        finalizers_patch(&[], None),
        serde_json::json!({"metadata": {"finalizers": null}})
    );
}

#[tokio::test]
async fn missing_kubeconfig_is_a_clear_error() {
    let path = std::path::PathBuf::from("/nonexistent/rflux/kubeconfig");
    let err = rflux_common::runtime::client::load_config(Some(&path))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("/nonexistent/rflux/kubeconfig"), "{msg}");
}

#[test]
fn webhook_addresses() {
    use rflux_common::runtime::events::WebhookTarget;
    let t = WebhookTarget::parse("http://notification-controller.flux-system.svc.cluster.local./")
        .unwrap();
    assert_eq!(
        t.authority,
        "notification-controller.flux-system.svc.cluster.local.:80"
    );
    assert_eq!(t.path, "/");
    let t = WebhookTarget::parse("http://127.0.0.1:9292/hook").unwrap();
    assert_eq!(
        (t.authority.as_str(), t.path.as_str()),
        ("127.0.0.1:9292", "/hook")
    );
    let t = WebhookTarget::parse("http://[::1]:81").unwrap();
    assert_eq!(t.authority, "[::1]:81");
    for bad in [
        "https://x/",
        "x:80",
        "http://",
        "http://h:port/",
        "http://u@h/",
        "http://[::1",
    ] {
        assert!(WebhookTarget::parse(bad).is_err(), "{bad}");
    }
}

#[tokio::test]
async fn webhook_posts_flux_event_payload() {
    use rflux_common::runtime::events::{WebhookTarget, notification_payload};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = s.read(&mut chunk).await.unwrap();
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                if body.len() >= len {
                    s.write_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
                        .await
                        .unwrap();
                    return (head.to_string(), body.to_string());
                }
            }
            if n == 0 {
                panic!("connection closed early");
            }
        }
    });
    let involved = ObjectReference {
        api_version: Some("kustomize.toolkit.fluxcd.io/v1".into()),
        kind: Some("Kustomization".into()),
        name: Some("apps".into()),
        namespace: Some("flux-system".into()),
        uid: Some("u-1".into()),
        ..ObjectReference::default()
    };
    let mut meta = BTreeMap::new();
    meta.insert(
        "kustomize.toolkit.fluxcd.io/revision".to_string(),
        "main@sha1:abc".to_string(),
    );
    let payload = notification_payload(
        &involved,
        EventType::Warning,
        "BuildFailed",
        "kustomize build failed",
        &meta,
        "kustomize-controller",
        "kc-1",
        jiff::Timestamp::from_second(1_700_000_000).unwrap(),
    );
    let target = WebhookTarget::parse(&format!("http://127.0.0.1:{port}/")).unwrap();
    assert_eq!(target.post(&payload).await.unwrap(), 202);
    let (head, body) = server.await.unwrap();
    assert!(head.starts_with("POST / HTTP/1.1"), "{head}");
    assert!(head.contains("Content-Type: application/json"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["severity"], "error");
    assert_eq!(v["reason"], "BuildFailed");
    assert_eq!(v["reportingController"], "kustomize-controller");
    assert_eq!(v["reportingInstance"], "kc-1");
    assert_eq!(v["involvedObject"]["kind"], "Kustomization");
    assert_eq!(v["involvedObject"]["uid"], "u-1");
    assert_eq!(
        v["metadata"]["kustomize.toolkit.fluxcd.io/revision"],
        "main@sha1:abc"
    );
    assert_eq!(v["timestamp"], "2023-11-14T22:13:20Z");
}
