//! The pool against a fake hub (an HTTP server serving the kubeconfig Secret, counting its
//! requests) and fake spokes (serving `/version`, or nothing at all).

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use futures::channel::mpsc;
use kube::Client;
use rflux_common::runtime::fence::WriteFence;
use serde_json::json;

use super::*;

/// The fake hub: Secrets by (namespace, name) holding kubeconfig text under `value`.
#[derive(Default)]
struct Hub {
    secrets: Mutex<HashMap<(String, String), String>>,
    gets: AtomicUsize,
    lists: AtomicUsize,
    /// Watches answer 500 instead of staying open (the cache then reads with GETs).
    watch_fails: bool,
}

fn secret_json(ns: &str, name: &str, text: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name, "namespace": ns, "resourceVersion": "1"},
           "stringData": {"value": text}})
}

async fn secret_get(
    State(hub): State<Arc<Hub>>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    hub.gets.fetch_add(1, Ordering::SeqCst);
    match lock(&hub.secrets).get(&(ns.clone(), name.clone())) {
        Some(text) => axum::Json(secret_json(&ns, &name, text)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "reason": "NotFound", "code": 404,
                "message": format!("secrets \"{name}\" not found")}),
            ),
        )
            .into_response(),
    }
}

async fn secret_list(
    State(hub): State<Arc<Hub>>,
    Path(ns): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    let q = q.unwrap_or_default();
    if q.contains("watch=true") || q.contains("watch=1") {
        if hub.watch_fails {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
        let pending = futures::stream::pending::<Result<Vec<u8>, std::io::Error>>();
        return Response::new(Body::from_stream(pending));
    }
    hub.lists.fetch_add(1, Ordering::SeqCst);
    let items: Vec<_> = lock(&hub.secrets)
        .iter()
        .filter(|((n, name), _)| *n == ns && q.contains(&format!("metadata.name%3D{name}")))
        .map(|((n, name), t)| secret_json(n, name, t))
        .collect();
    axum::Json(json!({"apiVersion": "v1", "kind": "SecretList",
        "metadata": {"resourceVersion": "1"}, "items": items}))
    .into_response()
}

async fn serve(router: Router, listener: tokio::net::TcpListener) {
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
}

async fn hub(h: Arc<Hub>) -> Client {
    let router = Router::new()
        .route(
            "/api/v1/namespaces/{ns}/secrets/{name}",
            axum::routing::get(secret_get),
        )
        .route(
            "/api/v1/namespaces/{ns}/secrets",
            axum::routing::get(secret_list),
        )
        .with_state(h);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    serve(router, listener).await;
    let cfg = Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
    Client::try_from(cfg).unwrap()
}

/// A spoke that answers every request with a `/version` document, on `listener`.
async fn spoke_on(listener: tokio::net::TcpListener) {
    let version = json!({"major": "1", "minor": "35", "gitVersion": "v1.35.0", "gitCommit": "x",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
        "compiler": "gc", "platform": "linux/amd64"});
    let router = Router::new().fallback(move || {
        let v = version.clone();
        async move { axum::Json(v) }
    });
    serve(router, listener).await;
}

fn kubeconfig(port: u16, comment: &str) -> String {
    format!(
        "# {comment}\napiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\nusers:\n- name: u\n  user:\n    token: abc\n"
    )
}

fn cref(name: &str) -> ClusterRef {
    ClusterRef {
        namespace: "apps".into(),
        name: name.into(),
        key: String::new(),
    }
}

fn owner(name: &str) -> OwnerKey {
    ("apps".into(), name.into())
}

fn settings(fence: &WriteFence, track: bool) -> ClientSettings<'_> {
    ClientSettings {
        fence,
        track,
        override_managers: &[],
    }
}

fn err_of(r: Result<Client, ClientError>) -> ClientError {
    match r {
        Ok(_) => panic!("a client where an error was expected"),
        Err(e) => e,
    }
}

const T: Duration = Duration::from_secs(30);

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn clients_are_pooled_and_the_secret_comes_from_its_watch() {
    let h = Arc::new(Hub::default());
    lock(&h.secrets).insert(("apps".into(), "kc".into()), kubeconfig(1, "a"));
    let pool = RemotePool::new(hub(h.clone()).await, None);
    let fence = WriteFence::open();
    let s = settings(&fence, true);
    pool.client_for(&owner("one"), cref("kc"), None, T, &s)
        .await
        .unwrap();
    let first = pool.cluster_of(&owner("one")).unwrap();
    assert!(first.tracker.is_some(), "a remote cluster has a tracker");
    eventually("the Secret watch listed", || {
        h.lists.load(Ordering::SeqCst) > 0
    })
    .await;
    // Let the watch deliver its list.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let gets = h.gets.load(Ordering::SeqCst);
    for user in [
        None,
        Some("system:serviceaccount:apps:sa".to_string()),
        None,
    ] {
        pool.client_for(&owner("one"), cref("kc"), user, T, &s)
            .await
            .unwrap();
        pool.client_for(&owner("two"), cref("kc"), None, T, &s)
            .await
            .unwrap();
    }
    assert_eq!(
        h.gets.load(Ordering::SeqCst),
        gets,
        "no GET once the watch runs"
    );
    assert_eq!(pool.len(), 1);
    assert_eq!(pool.watched_secrets(), 1);
    let again = pool.cluster_of(&owner("two")).unwrap();
    assert!(Arc::ptr_eq(&first, &again), "the entry is reused");
    assert_eq!(
        lock(&first.clients).len(),
        2,
        "one client per user and timeout"
    );
    assert_eq!(pool.users(&cref("kc")).len(), 2);
    // A missing Secret is a clear error.
    let err = err_of(
        pool.client_for(&owner("three"), cref("missing"), None, T, &s)
            .await,
    );
    assert_eq!(
        err.to_string(),
        "failed to get kubeconfig secret 'apps/missing': secrets \"missing\" not found"
    );
}

#[tokio::test]
async fn a_new_kubeconfig_revision_replaces_the_entry() {
    let h = Arc::new(Hub {
        watch_fails: true,
        ..Hub::default()
    });
    lock(&h.secrets).insert(("apps".into(), "kc".into()), kubeconfig(1, "a"));
    let pool = RemotePool::new(hub(h.clone()).await, None);
    let fence = WriteFence::open();
    let s = settings(&fence, true);
    pool.client_for(&owner("one"), cref("kc"), None, T, &s)
        .await
        .unwrap();
    let entry = pool.cluster_of(&owner("one")).unwrap();
    let old_tracker = Arc::downgrade(entry.tracker.as_ref().unwrap());
    let old_digest = entry.digest.clone();
    let old = Arc::downgrade(&entry);
    drop(entry);
    // Same text: same entry.
    pool.client_for(&owner("one"), cref("kc"), None, T, &s)
        .await
        .unwrap();
    assert!(old.upgrade().is_some());
    lock(&h.secrets).insert(("apps".into(), "kc".into()), kubeconfig(2, "b"));
    pool.client_for(&owner("one"), cref("kc"), None, T, &s)
        .await
        .unwrap();
    let new = pool.cluster_of(&owner("one")).unwrap();
    assert_ne!(new.digest, old_digest);
    assert_eq!(new.server, "http://127.0.0.1:2/");
    assert!(old.upgrade().is_none(), "the old entry is gone");
    assert!(
        old_tracker.upgrade().is_none(),
        "its tracker (and watches) too"
    );
    assert_eq!(pool.len(), 1);
    // A refused kubeconfig builds nothing.
    lock(&h.secrets).insert(
        ("apps".into(), "bad".into()),
        kubeconfig(3, "c").replace("    token: abc\n", "    tokenFile: /etc/passwd\n"),
    );
    let err = err_of(
        pool.client_for(&owner("bad"), cref("bad"), None, T, &s)
            .await,
    );
    assert!(err.is_refused(), "{err}");
    assert_eq!(pool.len(), 1);
}

#[tokio::test]
async fn entries_nobody_uses_are_dropped() {
    let h = Arc::new(Hub::default());
    lock(&h.secrets).insert(("apps".into(), "a".into()), kubeconfig(1, "a"));
    lock(&h.secrets).insert(("apps".into(), "b".into()), kubeconfig(2, "b"));
    let pool = RemotePool::new(hub(h.clone()).await, None);
    let fence = WriteFence::open();
    let s = settings(&fence, false);
    for o in ["one", "two"] {
        pool.client_for(&owner(o), cref("a"), None, T, &s)
            .await
            .unwrap();
    }
    pool.client_for(&owner("three"), cref("b"), None, T, &s)
        .await
        .unwrap();
    assert_eq!((pool.len(), pool.watched_secrets()), (2, 2));
    pool.release(&owner("one"));
    assert_eq!(pool.len(), 2, "still used by two");
    // `three` moves to cluster a: b is dropped with its Secret watch.
    pool.client_for(&owner("three"), cref("a"), None, T, &s)
        .await
        .unwrap();
    assert_eq!((pool.len(), pool.watched_secrets()), (1, 1));
    pool.release(&owner("two"));
    pool.release(&owner("three"));
    assert_eq!((pool.len(), pool.watched_secrets()), (0, 0));
    pool.release(&owner("three"));
}

#[tokio::test]
async fn an_unreachable_cluster_fails_fast_until_a_probe_finds_it_back() {
    // A port nothing listens on, for now.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let h = Arc::new(Hub::default());
    lock(&h.secrets).insert(("apps".into(), "kc".into()), kubeconfig(port, "a"));
    let (tx, mut rx) = mpsc::unbounded();
    let pool = RemotePool::with_backoff(
        hub(h.clone()).await,
        Some(tx),
        Duration::from_millis(100),
        Duration::from_millis(400),
    );
    let fence = WriteFence::open();
    let s = settings(&fence, false);
    for o in ["one", "two"] {
        pool.client_for(&owner(o), cref("kc"), None, T, &s)
            .await
            .unwrap();
    }
    // Not a connection failure: nothing opens.
    assert_eq!(
        pool.stage_failed(&owner("one"), "ConfigMap/a/b dry-run failed"),
        None
    );
    assert!(pool.gate(&owner("one"), &cref("kc")).is_ok());
    let msg = pool
        .stage_failed(
            &owner("one"),
            "ConfigMap/a/b apply failed: client error (Connect): tcp connect error: Connection refused",
        )
        .unwrap();
    assert!(
        msg.starts_with(&format!(
            "cluster http://127.0.0.1:{port}/ (kubeconfig secret 'apps/kc') is unreachable"
        )),
        "{msg}"
    );
    // The other Kustomization of the cluster is reconciled to show it; the reporter is not.
    assert_eq!(rx.next().await, Some(owner("two")));
    // Fails fast, for every Kustomization of the cluster, with the server and the cause.
    for o in ["one", "two"] {
        let err = pool.gate(&owner(o), &cref("kc")).unwrap_err();
        assert!(matches!(err, ClientError::Unreachable { .. }));
        let text = err.to_string();
        assert!(
            text.contains(&format!("127.0.0.1:{port}")) && text.contains("Connection refused"),
            "{text}"
        );
        let err = err_of(pool.client_for(&owner(o), cref("kc"), None, T, &s).await);
        assert!(matches!(err, ClientError::Unreachable { .. }), "{err}");
    }
    // The probes fail (nothing listens): the cause becomes theirs, the circuit stays open.
    let c = pool.cluster_of(&owner("one")).unwrap();
    eventually("a failed probe", || {
        c.check()
            .is_err_and(|d| !d.cause.contains("Connection refused (os"))
            || lock(&c.circuit).failures() > 1
    })
    .await;
    assert!(pool.gate(&owner("two"), &cref("kc")).is_err());
    // A Kustomization whose spec now names another Secret is not held back by the old one.
    assert!(pool.gate(&owner("two"), &cref("other")).is_ok());
    // The cluster comes back: a probe closes the circuit within the back-off cap and both
    // Kustomizations are reconciled.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    spoke_on(listener).await;
    let mut back = HashSet::new();
    let wait = tokio::time::timeout(Duration::from_secs(5), async {
        while back.len() < 2 {
            back.insert(rx.next().await.unwrap());
        }
    });
    wait.await
        .expect("the Kustomizations are reconciled when the cluster is back");
    assert_eq!(back, HashSet::from([owner("one"), owner("two")]));
    assert!(pool.gate(&owner("one"), &cref("kc")).is_ok());
    pool.client_for(&owner("one"), cref("kc"), None, T, &s)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_watch_failure_of_the_tracker_opens_the_circuit() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let h = Arc::new(Hub::default());
    lock(&h.secrets).insert(("apps".into(), "kc".into()), kubeconfig(port, "a"));
    let pool = RemotePool::with_backoff(
        hub(h.clone()).await,
        None,
        Duration::from_secs(60),
        Duration::from_secs(60),
    );
    let fence = WriteFence::open();
    let s = settings(&fence, true);
    pool.client_for(&owner("one"), cref("kc"), None, T, &s)
        .await
        .unwrap();
    let c = pool.cluster_of(&owner("one")).unwrap();
    // Recording an applied object starts the watch of its kind, which cannot connect.
    let obj = crate::ssa::ObjectRef::of("v1", "ConfigMap", "apps", "cm");
    let ar = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    c.tracker.as_ref().unwrap().record(
        &obj,
        &ar,
        &owner("one"),
        1,
        &json!({"metadata": {"name": "cm", "namespace": "apps", "resourceVersion": "1"}}),
        true,
    );
    eventually("the circuit opened by the watch", || c.check().is_err()).await;
    let err = pool
        .gate(&owner("one"), &cref("kc"))
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
}
