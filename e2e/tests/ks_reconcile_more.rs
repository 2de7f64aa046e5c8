//! More Kustomization reconciler e2e tests on the real control plane (same harness as
//! `ks_reconcile.rs`: artifacts served on loopback, GitRepository status patched by hand,
//! `reconcile` called in-process):
//!
//! - `spec.kubeConfig.secretRef`: objects land on the second control plane (`remote`), not on
//!   the local one, and service-account impersonation applies on the remote; a kubeconfig
//!   that names a file (tokenFile, client-certificate/key, certificate-authority) is Stalled
//!   and no connection is made;
//! - a CRD and its custom resources in one Kustomization;
//! - `wait: true` with a Deployment that can never become ready → HealthCheckFailed;
//! - `suspend: true` → nothing applied; resume → applied;
//! - every `deletionPolicy` through deletion of the Kustomization;
//! - a Deployment that becomes Available through KCM/scheduler/kwok with `wait: true`: the
//!   latency between its Available transition and the Kustomization's Ready transition is
//!   printed (measured, not asserted).
//!
//! Each test holds `<e2e state>/crds.lock` so the CRD compatibility test cannot swap CRDs meanwhile.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kustomize_controller::reconcile::{Context, reconcile};
use rflux_common::api::kustomization::Kustomization;
use rflux_common::runtime::conditions;
use rflux_e2e::ControlPlane;
use serde_json::{Value, json};
use support::*;

/// One test's world: a fresh namespace, an artifact server, an in-process reconciler context.
struct Harness {
    cp: &'static ControlPlane,
    client: Client,
    ns: String,
    publisher: Publisher,
    ctx: Arc<Context>,
    ks_api: Api<Kustomization>,
    cms: Api<ConfigMap>,
    server: ArtifactServer,
    _cache: tempfile::TempDir,
    _lock: std::fs::File,
}

async fn harness(prefix: &str) -> Harness {
    let cp = ControlPlane::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    let lock = lock_crds_and_install(&client).await;
    let ns = cp.create_namespace(prefix).await.unwrap();
    let (publisher, server) = serve_artifacts(&client, &ns).await;
    let cache = tempfile::tempdir().unwrap();
    let ctx = reconcile_context(&client, cp.config().await.unwrap(), cache.path());
    Harness {
        cp,
        ks_api: Api::namespaced(client.clone(), &ns),
        cms: Api::namespaced(client.clone(), &ns),
        client,
        ns,
        publisher,
        ctx: Arc::new(ctx),
        server,
        _cache: cache,
        _lock: lock,
    }
}

impl Harness {
    async fn create(&self, name: &str, repo: &str, path: &str, extra: Value) {
        create_ks(&self.ks_api, &self.ns, name, repo, path, extra).await;
    }

    /// Deletes the Kustomization and runs the finalizer; asserts it is gone.
    async fn delete(&self, name: &str) {
        self.ks_api
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        let obj = self.ks_api.get(name).await.unwrap();
        assert!(obj.metadata.deletion_timestamp.is_some());
        reconcile(Arc::new(obj), self.ctx.clone()).await.unwrap();
        assert!(self.ks_api.get_opt(name).await.unwrap().is_none());
    }

    async fn finish(self) {
        self.server.stop().await;
        let nss: Api<Namespace> = Api::all(self.client.clone());
        let _ = nss.delete(&self.ns, &DeleteParams::default()).await;
    }
}

fn applied_revision(ks: &Kustomization) -> Option<String> {
    ks.status
        .as_ref()
        .and_then(|s| s.last_applied_revision.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_cluster_via_kubeconfig_secret() {
    let h = harness("ksremote").await;
    let remote = ControlPlane::shared_named("remote").await.unwrap();
    assert_ne!(remote.server_url(), h.cp.server_url());
    let remote_client = remote.client().await.unwrap();
    // The target namespace must exist on the remote (same name as the local one).
    let remote_nss: Api<Namespace> = Api::all(remote_client.clone());
    remote_nss
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": h.ns}})).unwrap(),
        )
        .await
        .unwrap();
    let remote_cms: Api<ConfigMap> = Api::namespaced(remote_client.clone(), &h.ns);

    let kubeconfig = remote.token_kubeconfig(None).unwrap();
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.ns);
    for (name, key) in [
        ("remote-kc", "value"),
        ("remote-kc-custom", "my.kubeconfig"),
    ] {
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "stringData": {key: kubeconfig}
                }))
                .unwrap(),
            )
            .await
            .unwrap();
    }
    let rev = h
        .publisher
        .publish(
            "repo",
            1,
            &[
                ("remote/cm.yaml", &cm_file("on-remote", "r")),
                ("custom/cm.yaml", &cm_file("on-remote-custom", "c")),
            ],
        )
        .await;

    // 1. Impersonation applies on the remote: the ServiceAccount does not exist there and has
    // no RBAC, so the apply is denied for that identity.
    h.create(
        "remote",
        "repo",
        "./remote",
        json!({"kubeConfig": {"secretRef": {"name": "remote-kc"}},
               "serviceAccountName": "nobody"}),
    )
    .await;
    let ks = run_once(&h.ks_api, &h.ctx, "remote").await;
    let msg = assert_ready(&ks, "False", "ReconciliationFailed");
    assert!(
        msg.contains("forbidden")
            && msg.contains(&format!("system:serviceaccount:{}:nobody", h.ns)),
        "{msg}"
    );
    assert_eq!(cm_value(&remote_cms, "on-remote").await, None);

    // 2. Without impersonation: applied on the remote, not locally.
    h.ks_api
        .patch(
            "remote",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"serviceAccountName": null}})),
        )
        .await
        .unwrap();
    let ks = run_once(&h.ks_api, &h.ctx, "remote").await;
    assert_ready(&ks, "True", "ReconciliationSucceeded");
    assert_eq!(applied_revision(&ks).as_deref(), Some(rev.as_str()));
    assert_eq!(
        cm_value(&remote_cms, "on-remote").await.as_deref(),
        Some("r")
    );
    assert_eq!(cm_value(&h.cms, "on-remote").await, None, "applied locally");
    assert!(
        ks.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .unwrap()
            .iter()
            .all(|c| c.type_ != "UnsupportedFields" && c.type_ != "Stalled")
    );

    // 3. An explicit key.
    h.create(
        "remote-custom",
        "repo",
        "./custom",
        json!({"kubeConfig": {"secretRef": {"name": "remote-kc-custom", "key": "my.kubeconfig"}}}),
    )
    .await;
    let ks = run_once(&h.ks_api, &h.ctx, "remote-custom").await;
    assert_ready(&ks, "True", "ReconciliationSucceeded");
    assert_eq!(
        cm_value(&remote_cms, "on-remote-custom").await.as_deref(),
        Some("c")
    );

    // 4. A missing Secret: a clear failure, nothing applied.
    h.create(
        "remote-missing",
        "repo",
        "./remote",
        json!({"kubeConfig": {"secretRef": {"name": "no-such-secret"}}}),
    )
    .await;
    let ks = run_once(&h.ks_api, &h.ctx, "remote-missing").await;
    let msg = assert_ready(&ks, "False", "ReconciliationFailed");
    assert!(msg.contains("no-such-secret"), "{msg}");

    // 5. Deletion garbage-collects on the remote.
    h.delete("remote").await;
    assert_eq!(
        cm_value(&remote_cms, "on-remote").await,
        None,
        "not garbage-collected on the remote"
    );
    h.delete("remote-custom").await;
    assert_eq!(cm_value(&remote_cms, "on-remote-custom").await, None);
    // The failed one has no inventory: its deletion needs no client, so the missing Secret
    // does not block it.
    h.delete("remote-missing").await;
    let _ = remote_nss.delete(&h.ns, &DeleteParams::default()).await;
    h.finish().await;
}

/// Security (issue 14, defect 1): a tenant kubeconfig whose user reads the controller's
/// ServiceAccount token through `tokenFile`, pointed at a server the tenant runs. The
/// Kustomization is Stalled with a message naming the field, and the tenant's server never
/// sees a connection (without the check, the client reads the file and sends the token there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_file_references_are_refused_without_a_request() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let h = harness("kskcfile").await;
    // The tenant's "remote": counts every TCP connection it accepts.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let accept = tokio::spawn(async move {
        while let Ok((_sock, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    // Stands in for /var/run/secrets/kubernetes.io/serviceaccount/token.
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "the-controllers-token").unwrap();
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.ns);
    let variants = [
        (
            "kc-token-file",
            format!("    tokenFile: {}\n", token.display()),
            "",
        ),
        (
            "kc-cert-file",
            format!(
                "    client-certificate: {}\n    client-key: {}\n",
                token.display(),
                token.display()
            ),
            "",
        ),
        ("kc-ca-file", "    token: abc\n".to_string(), "ca"),
    ];
    let rev = h
        .publisher
        .publish("repo", 1, &[("app/cm.yaml", &cm_file("stolen", "x"))])
        .await;
    for (name, user, ca) in &variants {
        let ca_line = if ca.is_empty() {
            String::new()
        } else {
            format!("    certificate-authority: {}\n", token.display())
        };
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://{addr}\n{ca_line}contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\nusers:\n- name: u\n  user:\n{user}"
        );
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "stringData": {"value": kubeconfig}
                }))
                .unwrap(),
            )
            .await
            .unwrap();
        h.create(
            name,
            "repo",
            "./app",
            json!({"kubeConfig": {"secretRef": {"name": name}}}),
        )
        .await;
        let ks = run_once(&h.ks_api, &h.ctx, name).await;
        let msg = assert_ready(&ks, "False", "ReconciliationFailed");
        assert!(
            msg.contains("file references are not allowed"),
            "{name}: {msg}"
        );
        let conds = ks.status.as_ref().unwrap().conditions.as_ref().unwrap();
        let stalled = conditions::get(conds, "Stalled").expect("Stalled condition");
        assert_eq!(stalled.status, "True", "{name}");
        assert_eq!(
            ks.status
                .as_ref()
                .unwrap()
                .last_attempted_revision
                .as_deref(),
            Some(rev.as_str())
        );
        // Deleting it must not reach the tenant's server either (no inventory: no client).
        h.delete(name).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the controller connected to the tenant's server"
    );
    assert_eq!(cm_value(&h.cms, "stolen").await, None);
    accept.abort();
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_and_custom_resources_in_one_kustomization() {
    let h = harness("kscrd").await;
    let group = format!("{}.rflux.test", h.ns);
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names:\n    plural: widgets\n    singular: widget\n    kind: Widget\n    listKind: WidgetList\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            x-kubernetes-preserve-unknown-fields: true\n"
    );
    let cr =
        format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n");
    h.publisher
        .publish(
            "repo",
            1,
            &[
                (
                    "app/kustomization.yaml",
                    "resources:\n- widget.yaml\n- crd.yaml\n",
                ),
                ("app/crd.yaml", &crd),
                ("app/widget.yaml", &cr),
            ],
        )
        .await;
    h.create("crd", "repo", "./app", json!({"wait": true}))
        .await;
    let ks = run_once(&h.ks_api, &h.ctx, "crd").await;
    assert_ready(&ks, "True", "ReconciliationSucceeded");
    let ar = ApiResource {
        group: group.clone(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> = Api::namespaced_with(h.client.clone(), &h.ns, &ar);
    let w = widgets.get("w1").await.unwrap();
    assert_eq!(w.data["spec"]["size"], json!(3));
    let entries = ks.status.unwrap().inventory.unwrap().entries;
    assert_eq!(entries.len(), 2, "{entries:?}");
    // Deletion prunes both (prune: true); the CRD goes last.
    h.delete("crd").await;
    let crds: Api<CustomResourceDefinition> = Api::all(h.client.clone());
    let gone = crds
        .get_opt(&format!("widgets.{group}"))
        .await
        .unwrap()
        .is_none_or(|c| c.metadata.deletion_timestamp.is_some());
    assert!(gone, "CRD not garbage-collected");
    h.finish().await;
}

fn deployment_file(name: &str, node_selector: Option<(&str, &str)>) -> String {
    let selector = node_selector
        .map(|(k, v)| format!("      nodeSelector:\n        {k}: \"{v}\"\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 1\n  selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n    spec:\n{selector}      containers:\n      - name: main\n        image: registry.invalid/app:1\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_timeout_on_unschedulable_deployment() {
    let h = harness("kshealth").await;
    let rev = h
        .publisher
        .publish(
            "repo",
            1,
            &[(
                "app/deploy.yaml",
                &deployment_file("never", Some(("rflux.test/no-such-node", "true"))),
            )],
        )
        .await;
    h.create(
        "health",
        "repo",
        "./app",
        json!({"wait": true, "timeout": "5s"}),
    )
    .await;
    let started = Instant::now();
    let ks = run_once(&h.ks_api, &h.ctx, "health").await;
    let elapsed = started.elapsed();
    let msg = assert_ready(&ks, "False", "HealthCheckFailed");
    assert!(msg.contains("never"), "{msg}");
    assert!(
        elapsed >= Duration::from_secs(5),
        "gave up before the timeout: {elapsed:?}"
    );
    let status = ks.status.clone().unwrap();
    assert_eq!(status.last_applied_revision, None);
    assert_eq!(
        status.last_attempted_revision.as_deref(),
        Some(rev.as_str())
    );
    let conds = status.conditions.unwrap();
    assert_eq!(
        conditions::get_reason(&conds, "Healthy"),
        Some("HealthCheckFailed")
    );
    // The Deployment was applied and is in the inventory, even though it is not healthy.
    let deps: Api<Deployment> = Api::namespaced(h.client.clone(), &h.ns);
    assert!(deps.get_opt("never").await.unwrap().is_some());
    assert_eq!(status.inventory.unwrap().entries.len(), 1);
    h.delete("health").await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_and_resume() {
    let h = harness("kssuspend").await;
    let rev1 = h
        .publisher
        .publish("repo", 1, &[("app/cm.yaml", &cm_file("cm", "one"))])
        .await;
    h.create("sus", "repo", "./app", json!({})).await;
    let ks = run_once(&h.ks_api, &h.ctx, "sus").await;
    assert_ready(&ks, "True", "ReconciliationSucceeded");
    assert_eq!(cm_value(&h.cms, "cm").await.as_deref(), Some("one"));

    let suspend = |on: bool| Patch::Merge(json!({"spec": {"suspend": on}}));
    h.ks_api
        .patch("sus", &PatchParams::default(), &suspend(true))
        .await
        .unwrap();
    let rev2 = h
        .publisher
        .publish("repo", 2, &[("app/cm.yaml", &cm_file("cm", "two"))])
        .await;
    let ks = run_once(&h.ks_api, &h.ctx, "sus").await;
    assert_eq!(cm_value(&h.cms, "cm").await.as_deref(), Some("one"));
    assert_eq!(applied_revision(&ks).as_deref(), Some(rev1.as_str()));

    h.ks_api
        .patch("sus", &PatchParams::default(), &suspend(false))
        .await
        .unwrap();
    let ks = run_once(&h.ks_api, &h.ctx, "sus").await;
    assert_ready(&ks, "True", "ReconciliationSucceeded");
    assert_eq!(applied_revision(&ks).as_deref(), Some(rev2.as_str()));
    assert_eq!(cm_value(&h.cms, "cm").await.as_deref(), Some("two"));

    // Suspended on deletion: nothing is garbage-collected.
    h.ks_api
        .patch("sus", &PatchParams::default(), &suspend(true))
        .await
        .unwrap();
    h.delete("sus").await;
    assert_eq!(cm_value(&h.cms, "cm").await.as_deref(), Some("two"));
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_policies() {
    let h = harness("ksdelete").await;
    // (name, deletionPolicy, prune, objects kept after deletion)
    let cases = [
        ("mirror-prune", Some("MirrorPrune"), true, false),
        ("mirror-keep", Some("MirrorPrune"), false, true),
        ("default-keep", None, false, true),
        ("delete", Some("Delete"), false, false),
        ("orphan", Some("Orphan"), true, true),
        ("wait", Some("WaitForTermination"), false, false),
    ];
    let files: Vec<(String, String)> = cases
        .iter()
        .map(|(n, ..)| (format!("{n}/cm.yaml"), cm_file(&format!("cm-{n}"), n)))
        .collect();
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    h.publisher.publish("repo", 1, &files).await;
    for (name, policy, prune, _) in &cases {
        let mut extra = json!({"prune": prune});
        if let Some(p) = policy {
            extra["deletionPolicy"] = json!(p);
        }
        h.create(name, "repo", &format!("./{name}"), extra).await;
        let ks = run_once(&h.ks_api, &h.ctx, name).await;
        assert_ready(&ks, "True", "ReconciliationSucceeded");
        assert_eq!(
            cm_value(&h.cms, &format!("cm-{name}")).await.as_deref(),
            Some(*name)
        );
    }
    for (name, policy, prune, kept) in &cases {
        h.delete(name).await;
        let cm = h.cms.get_opt(&format!("cm-{name}")).await.unwrap();
        let exists = cm.is_some_and(|c| c.metadata.deletion_timestamp.is_none());
        assert_eq!(
            exists, *kept,
            "{name} (deletionPolicy {policy:?}, prune {prune}): kept={exists}"
        );
    }
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_available_to_ready_latency() {
    let h = harness("kslatency").await;
    h.publisher
        .publish(
            "repo",
            1,
            &[("app/deploy.yaml", &deployment_file("web", None))],
        )
        .await;
    h.create(
        "latency",
        "repo",
        "./app",
        json!({"wait": true, "timeout": "2m"}),
    )
    .await;
    // A poller sees the Available transition with ~50ms resolution (the condition timestamps
    // have 1s resolution).
    let deps: Api<Deployment> = Api::namespaced(h.client.clone(), &h.ns);
    let poller = {
        let deps = deps.clone();
        tokio::spawn(async move {
            loop {
                if let Ok(Some(d)) = deps.get_opt("web").await
                    && d.status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Available" && c.status == "True")
                {
                    return Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let started = Instant::now();
    let ks = run_once(&h.ks_api, &h.ctx, "latency").await;
    let wall = started.elapsed();
    let ready_seen = Instant::now();
    let available_seen = tokio::time::timeout(Duration::from_secs(10), poller)
        .await
        .unwrap()
        .unwrap();
    assert_ready(&ks, "True", "ReconciliationSucceeded");
    let dep = deps.get("web").await.unwrap();
    let available = dep
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Available" && c.status == "True")
        .and_then(|c| c.last_transition_time)
        .expect("Deployment Available");
    let conds = ks.status.unwrap().conditions.unwrap();
    let ready_at = conditions::get(&conds, "Ready")
        .unwrap()
        .last_transition_time
        .0;
    let latency = ready_at.duration_since(available.0);
    println!(
        "MEASURED Deployment Available -> Kustomization Ready: {:.3}s by condition timestamps \
         (1s resolution); {:.3}s as observed by a 50ms poller (±50ms; includes the status \
         write); reconcile wall time {:.3}s",
        latency.as_secs_f64(),
        ready_seen
            .saturating_duration_since(available_seen)
            .as_secs_f64(),
        wall.as_secs_f64()
    );
    assert!(
        latency.as_secs_f64() >= -1.0,
        "Ready before Available: {latency:?}"
    );
    h.delete("latency").await;
    h.finish().await;
}
