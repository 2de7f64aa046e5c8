//! The install manifests (`manifests/install`, and the optional `manifests/monitoring`).
//!
//! - Our kustomize engine builds both directories byte-for-byte like `kubectl kustomize` (the
//!   kubectl half is skipped, with a note, when kubectl is not installed).
//! - The install holds what Flux's install holds for these two controllers, laid out the same
//!   way (names, labels, ports, probes, args, security settings), checked field by field.
//! - On a control plane of its own (`install`): `kubectl apply -k manifests/install` succeeds
//!   (server-side apply of our own build when kubectl is absent), a server-side apply of our
//!   build over it succeeds too, every object exists, the CRDs are Established and both
//!   Deployments become Available (kwok runs the pods: the containers do not really run, but
//!   every object passes the real API server's validation and admission). Then Flux's CLI,
//!   `flux check --components=source-controller,kustomize-controller`, passes (skipped with a
//!   note when `e2e/flux/build.sh` has not built `flux`).
//! - The static binaries of `make static` run as user 65534 in a root that holds only what the
//!   images hold, and reach the API server by name (skipped with a note without `make static`).
#![allow(clippy::unwrap_used)]

mod install_rbac;
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::GroupVersionKind;
use rflux_e2e::{ControlPlane, repo_root};
use rflux_kustomize::{BuildOptions, build, to_yaml_stream};
use serde_json::Value;
use support::procs::{apply_value, wait_for};

const VERSION: &str = "v0.1.0";
const SOURCE_IMAGE: &str = "ghcr.io/rflux/rflux-source-controller:v0.1.0";
const KUSTOMIZE_IMAGE: &str = "ghcr.io/rflux/rflux-kustomize-controller:v0.1.0";

fn manifests(dir: &str) -> PathBuf {
    repo_root().join("manifests").join(dir)
}

fn build_ours(dir: &Path) -> Vec<Value> {
    build(dir, &BuildOptions::default())
        .unwrap_or_else(|e| panic!("building {}: {e}", dir.display()))
        .into_iter()
        .map(|r| r.obj)
        .collect()
}

/// The program `name` on PATH, if any.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

fn kubectl() -> Option<PathBuf> {
    on_path("kubectl")
}

fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn find<'a>(objs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objs.iter()
        .find(|o| str_at(o, "/kind") == kind && str_at(o, "/metadata/name") == name)
        .unwrap_or_else(|| panic!("{kind}/{name} is not in the build"))
}

/// YAML `0.0` and `0` are the same number to the API server; compare them as equal.
fn numbers_as_f64(v: Value) -> Value {
    match v {
        Value::Number(n) => n
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        Value::Array(a) => Value::Array(a.into_iter().map(numbers_as_f64).collect()),
        Value::Object(m) => {
            Value::Object(m.into_iter().map(|(k, v)| (k, numbers_as_f64(v))).collect())
        }
        other => other,
    }
}

fn ids(objs: &[Value]) -> BTreeSet<String> {
    objs.iter()
        .map(|o| format!("{}/{}", str_at(o, "/kind"), str_at(o, "/metadata/name")))
        .collect()
}

#[test]
fn our_engine_builds_the_manifests_like_kubectl_kustomize() {
    for dir in ["install", "monitoring"] {
        let path = manifests(dir);
        let ours = to_yaml_stream(&build_ours(&path));
        assert!(ours.contains("kind: "), "empty build of {dir}");
        let Some(kubectl) = kubectl() else {
            eprintln!("skipped the kubectl comparison of manifests/{dir}: kubectl is not on PATH");
            continue;
        };
        let out = Command::new(kubectl)
            .arg("kustomize")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl kustomize manifests/{dir}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs = String::from_utf8(out.stdout).unwrap();
        if ours != theirs {
            let first = ours
                .lines()
                .zip(theirs.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(ours.lines().count().min(theirs.lines().count()));
            panic!(
                "manifests/{dir}: our build differs from kubectl kustomize at line {}:\nours:    {:?}\nkubectl: {:?}",
                first + 1,
                ours.lines().nth(first),
                theirs.lines().nth(first)
            );
        }
        eprintln!(
            "manifests/{dir}: identical to kubectl kustomize ({} bytes)",
            ours.len()
        );
    }
}

#[test]
fn the_install_holds_what_flux_installs_for_both_controllers() {
    let objs = build_ours(&manifests("install"));
    let expected: BTreeSet<String> = [
        "Namespace/flux-system",
        "ResourceQuota/critical-pods",
        "CustomResourceDefinition/gitrepositories.source.toolkit.fluxcd.io",
        "CustomResourceDefinition/ocirepositories.source.toolkit.fluxcd.io",
        "CustomResourceDefinition/kustomizations.kustomize.toolkit.fluxcd.io",
        "CustomResourceDefinition/resourcesets.fluxcd.controlplane.io",
        "CustomResourceDefinition/resourcesetinputproviders.fluxcd.controlplane.io",
        "ServiceAccount/source-controller",
        "ServiceAccount/kustomize-controller",
        "ServiceAccount/resourceset-controller",
        "ClusterRole/resourceset-edit",
        "ClusterRole/resourceset-view",
        "ClusterRoleBinding/resourceset-reconciler",
        "Deployment/resourceset-controller",
        "ClusterRole/crd-controller",
        "ClusterRole/flux-edit",
        "ClusterRole/flux-view",
        "ClusterRoleBinding/crd-controller",
        "ClusterRoleBinding/cluster-reconciler",
        "Service/source-controller",
        "Deployment/source-controller",
        "Deployment/kustomize-controller",
        "NetworkPolicy/allow-egress",
        "NetworkPolicy/allow-scraping",
        "NetworkPolicy/allow-webhooks",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(ids(&objs), expected);

    // Labels Flux's tools read (`flux check`, `flux logs`, `flux version`) on every object.
    for o in &objs {
        let labels = o.pointer("/metadata/labels").cloned().unwrap_or_default();
        for (k, v) in [
            ("app.kubernetes.io/part-of", "flux"),
            ("app.kubernetes.io/instance", "flux-system"),
            ("app.kubernetes.io/version", VERSION),
        ] {
            assert_eq!(
                labels.get(k).and_then(Value::as_str),
                Some(v),
                "{} {} label {k}",
                str_at(o, "/kind"),
                str_at(o, "/metadata/name")
            );
        }
        let namespaced = !matches!(
            str_at(o, "/kind"),
            "Namespace" | "CustomResourceDefinition" | "ClusterRole" | "ClusterRoleBinding"
        );
        if namespaced {
            assert_eq!(str_at(o, "/metadata/namespace"), "flux-system", "{o}");
        }
    }

    // The CRDs are the generated ones (manifests/crds), unchanged but for the labels.
    for (name, file) in support::OUR_CRDS {
        let text = std::fs::read_to_string(manifests("crds").join(file)).unwrap();
        let generated: Value = serde_saphyr::from_str(&text).unwrap();
        let built = find(&objs, "CustomResourceDefinition", name);
        assert_eq!(
            numbers_as_f64(built["spec"].clone()),
            numbers_as_f64(generated["spec"].clone()),
            "CRD {name}"
        );
    }

    // Controllers: Flux's container name, ports, probes, args, security settings, volumes.
    for (name, image, ports, args, mounts) in [
        (
            "source-controller",
            SOURCE_IMAGE,
            vec![("http", 9090), ("http-prom", 8080), ("healthz", 9440)],
            vec![
                "--watch-all-namespaces",
                "--log-level=info",
                "--log-encoding=json",
                "--enable-leader-election",
                "--storage-path=/data",
                "--storage-adv-addr=source-controller.$(RUNTIME_NAMESPACE).svc.cluster.local.",
            ],
            vec![("data", "/data"), ("tmp", "/tmp")],
        ),
        (
            "kustomize-controller",
            KUSTOMIZE_IMAGE,
            vec![("http-prom", 8080), ("healthz", 9440)],
            vec![
                "--watch-all-namespaces",
                "--log-level=info",
                "--log-encoding=json",
                "--enable-leader-election",
            ],
            vec![("tmp", "/tmp")],
        ),
    ] {
        let d = find(&objs, "Deployment", name);
        let labels = &d["metadata"]["labels"];
        assert_eq!(labels["control-plane"], "controller", "{name}");
        assert_eq!(labels["app.kubernetes.io/component"], name);
        assert_eq!(d["spec"]["selector"]["matchLabels"]["app"], name);
        let tpl = &d["spec"]["template"];
        for (k, v) in [
            ("app", name),
            ("app.kubernetes.io/part-of", "flux"),
            ("app.kubernetes.io/component", name),
        ] {
            assert_eq!(tpl["metadata"]["labels"][k], v, "{name} pod label {k}");
        }
        assert_eq!(tpl["metadata"]["annotations"]["prometheus.io/port"], "8080");
        let spec = &tpl["spec"];
        assert_eq!(spec["serviceAccountName"], name);
        let c = &spec["containers"][0];
        assert_eq!(
            c["name"], "manager",
            "flux logs reads the container `manager`"
        );
        assert_eq!(c["image"], image);
        let got_ports: Vec<(String, i64)> = c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_string(),
                    p["containerPort"].as_i64().unwrap(),
                )
            })
            .collect();
        let want_ports: Vec<(String, i64)> =
            ports.iter().map(|(n, p)| (n.to_string(), *p)).collect();
        assert_eq!(got_ports, want_ports, "{name} ports");
        let got_args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(got_args, args, "{name} args");
        assert_eq!(
            c["env"][0],
            serde_json::json!({"name": "RUNTIME_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}})
        );
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(c["livenessProbe"]["httpGet"]["port"], "healthz");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(c["readinessProbe"]["httpGet"]["port"], "healthz");
        let sc = &c["securityContext"];
        assert_eq!(sc["runAsNonRoot"], true);
        assert_eq!(sc["runAsUser"], 65534);
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
        assert!(c["resources"]["limits"]["memory"].is_string(), "{name}");
        assert!(c["resources"]["requests"]["cpu"].is_string(), "{name}");
        let got_mounts: Vec<(String, String)> = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap().to_string(),
                    m["mountPath"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let want_mounts: Vec<(String, String)> = mounts
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(got_mounts, want_mounts, "{name} mounts");
        for v in spec["volumes"].as_array().unwrap() {
            assert!(v["emptyDir"].is_object(), "{name} volume {v}");
        }
    }

    let svc = find(&objs, "Service", "source-controller");
    assert_eq!(svc["spec"]["selector"]["app"], "source-controller");
    assert_eq!(svc["spec"]["ports"][0]["port"], 80);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "http");

    let reconciler = find(&objs, "ClusterRoleBinding", "cluster-reconciler");
    assert_eq!(reconciler["roleRef"]["name"], "cluster-admin");
    assert_eq!(
        reconciler["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "kustomize-controller",
            "namespace": "flux-system"}])
    );
    let binding = find(&objs, "ClusterRoleBinding", "crd-controller");
    assert_eq!(binding["roleRef"]["name"], "crd-controller");
    let subjects: BTreeSet<&str> = binding["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        subjects,
        BTreeSet::from(["source-controller", "kustomize-controller"])
    );
    // The controller role covers our API groups and leader-election leases.
    let role = find(&objs, "ClusterRole", "crd-controller");
    let rules = role["rules"].as_array().unwrap();
    for group in ["source.toolkit.fluxcd.io", "kustomize.toolkit.fluxcd.io"] {
        assert!(
            rules.iter().any(|r| r["apiGroups"]
                .as_array()
                .is_some_and(|g| g.iter().any(|x| x == group))
                && r["verbs"] == serde_json::json!(["*"])),
            "crd-controller must allow everything on {group}"
        );
    }
    assert!(
        rules
            .iter()
            .any(|r| r["resources"] == serde_json::json!(["leases"])),
        "crd-controller must allow leases"
    );
    install_rbac::assert_role_covers_the_sources(rules);

    // The monitoring add-on: a PodMonitor on http-prom and the dashboards ConfigMap.
    let mon = build_ours(&manifests("monitoring"));
    let pm = find(&mon, "PodMonitor", "flux-system");
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["port"], "http-prom");
    let apps = &pm["spec"]["selector"]["matchExpressions"][0]["values"];
    for app in ["source-controller", "kustomize-controller"] {
        assert!(
            apps.as_array().unwrap().iter().any(|a| a == app),
            "PodMonitor selects {app}"
        );
    }
    let cm = find(&mon, "ConfigMap", "rflux-grafana-dashboards");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    for file in ["cluster.json", "control-plane.json"] {
        let text = cm["data"][file].as_str().unwrap();
        let dash: Value = serde_json::from_str(text).unwrap();
        assert!(dash["panels"].as_array().is_some_and(|p| !p.is_empty()));
    }
}

/// Object key for messages.
fn key(o: &Value) -> String {
    let ns = str_at(o, "/metadata/namespace");
    let name = str_at(o, "/metadata/name");
    if ns.is_empty() {
        format!("{}/{name}", str_at(o, "/kind"))
    } else {
        format!("{}/{ns}/{name}", str_at(o, "/kind"))
    }
}

async fn get_live(client: &kube::Client, o: &Value) -> anyhow::Result<Option<DynamicObject>> {
    let (group, version) = str_at(o, "/apiVersion")
        .split_once('/')
        .unwrap_or(("", str_at(o, "/apiVersion")));
    let gvk = GroupVersionKind::gvk(group, version, str_at(o, "/kind"));
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match caps.scope {
        kube::discovery::Scope::Namespaced => {
            Api::namespaced_with(client.clone(), str_at(o, "/metadata/namespace"), &ar)
        }
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &ar),
    };
    Ok(api.get_opt(str_at(o, "/metadata/name")).await?)
}

fn available(d: &Deployment) -> bool {
    d.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Available" && c.status == "True")
        })
        && d.status.as_ref().and_then(|s| s.ready_replicas) == Some(1)
}

#[tokio::test]
async fn the_install_applies_on_a_cluster_and_the_deployments_become_available() {
    let cp = ControlPlane::shared_named("install").await.unwrap();
    let client = cp.client().await.unwrap();
    let objs = build_ours(&manifests("install"));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "flux-system");

    // Start from no Deployments, so Availability is earned by this run.
    for name in ["source-controller", "kustomize-controller"] {
        if deployments.get_opt(name).await.unwrap().is_some() {
            deployments
                .delete(name, &DeleteParams::foreground())
                .await
                .unwrap();
        }
    }
    wait_for(Duration::from_secs(60), "old Deployments gone", || async {
        let left = deployments.list(&Default::default()).await?.items.len();
        Ok((left == 0).then_some(()))
    })
    .await
    .unwrap();

    let started = Instant::now();
    if let Some(kubectl) = kubectl() {
        let out = tokio::task::spawn_blocking(move || {
            Command::new(kubectl)
                .arg("--kubeconfig")
                .arg(cp.kubeconfig_path())
                .args(["apply", "-k"])
                .arg(manifests("install"))
                .output()
        })
        .await
        .unwrap()
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "kubectl apply -k manifests/install failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "kubectl apply -k manifests/install: {} lines of output in {:?}",
            stdout.lines().count(),
            started.elapsed()
        );
    } else {
        eprintln!("kubectl is not on PATH: applying our own build only");
    }
    // Our build, server-side applied over it (or alone): the API server accepts every object.
    for o in &objs {
        apply_value(&client, o, "rflux-e2e-install")
            .await
            .unwrap_or_else(|e| panic!("server-side apply of {}: {e:#}", key(o)));
    }
    eprintln!("{} objects applied in {:?}", objs.len(), started.elapsed());

    for o in &objs {
        let live = get_live(&client, o)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{} does not exist after the install", key(o)));
        assert_eq!(
            live.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app.kubernetes.io/part-of"))
                .map(String::as_str),
            Some("flux"),
            "{}",
            key(o)
        );
        if str_at(o, "/kind") == "CustomResourceDefinition" {
            let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
            let name = str_at(o, "/metadata/name");
            support::wait_crd_established(&crds, name)
                .await
                .unwrap_or_else(|e| panic!("CRD not established: {e:#}"));
        }
    }
    install_rbac::assert_controllers_may_use_the_sources(&client).await;
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "flux-system");
    let svc = services.get("source-controller").await.unwrap();
    assert!(
        svc.spec
            .and_then(|s| s.cluster_ip)
            .is_some_and(|ip| !ip.is_empty() && ip != "None"),
        "the source-controller Service has a cluster IP"
    );

    let res = wait_for(
        Duration::from_secs(180),
        "both Deployments Available",
        || async {
            let mut all = true;
            for name in ["source-controller", "kustomize-controller"] {
                all &= deployments.get(name).await.map(|d| available(&d))?;
            }
            Ok(all.then_some(()))
        },
    )
    .await;
    if let Err(e) = res {
        let mut report = String::new();
        for name in ["source-controller", "kustomize-controller"] {
            let d = deployments.get(name).await.unwrap();
            report.push_str(&format!(
                "{name}: {}\n",
                serde_json::to_string(&d.status).unwrap()
            ));
        }
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(client.clone(), "flux-system");
        for p in pods.list(&Default::default()).await.unwrap() {
            report.push_str(&format!(
                "pod {}: {}\n",
                p.metadata.name.clone().unwrap_or_default(),
                serde_json::to_string(&p.status.map(|s| s.conditions)).unwrap()
            ));
        }
        let events: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(client.clone(), "flux-system");
        for ev in events.list(&Default::default()).await.unwrap() {
            report.push_str(&format!(
                "event {} {}: {}\n",
                ev.reason.unwrap_or_default(),
                ev.involved_object.name.unwrap_or_default(),
                ev.message.unwrap_or_default()
            ));
        }
        panic!("{e:#}\n{report}");
    }
    eprintln!(
        "both Deployments Available {:?} after the apply started",
        started.elapsed()
    );

    // Flux's own CLI accepts the install: Deployments Current, CRDs served, version labels.
    let flux = support::procs::Binaries::flux()
        .source
        .with_file_name("flux");
    if !flux.is_file() {
        eprintln!(
            "skipped `flux check`: {} is not built (e2e/flux/build.sh)",
            flux.display()
        );
        return;
    }
    let out = tokio::task::spawn_blocking(move || {
        Command::new(flux)
            .arg("--kubeconfig")
            .arg(cp.kubeconfig_path())
            .args([
                "check",
                "--components=source-controller,kustomize-controller",
                "--timeout=60s",
            ])
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("all checks passed"),
        "flux check failed:\n{text}"
    );
    for line in [
        "source-controller: deployment ready",
        "kustomize-controller: deployment ready",
        "gitrepositories.source.toolkit.fluxcd.io/v1",
        "ocirepositories.source.toolkit.fluxcd.io/v1",
        "kustomizations.kustomize.toolkit.fluxcd.io/v1",
        SOURCE_IMAGE,
        KUSTOMIZE_IMAGE,
    ] {
        assert!(
            text.contains(line),
            "flux check does not say {line:?}:\n{text}"
        );
    }
    eprintln!("flux check: all checks passed");
}

/// `target/x86_64-unknown-linux-gnu/release`, where `make static` leaves the static binaries.
fn static_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test>-<hash>
    let target = exe
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| repo_root().join("target"));
    target.join("x86_64-unknown-linux-gnu/release")
}

/// A controller process inside a chroot; killed on drop.
struct Chrooted(std::process::Child);

impl Drop for Chrooted {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the kustomize-controller image holds (distroless static: CA bundle, hosts) plus the
/// device nodes a container runtime provides, in an otherwise empty directory.
fn bare_root(kubeconfig: &str) -> anyhow::Result<tempfile::TempDir> {
    let root = tempfile::tempdir()?;
    let r = root.path();
    // /tmp and /data stand for the Deployments' emptyDir volumes.
    for d in ["etc/ssl/certs", "dev", "tmp", "data"] {
        std::fs::create_dir_all(r.join(d))?;
    }
    std::fs::copy(
        "/etc/ssl/certs/ca-certificates.crt",
        r.join("etc/ssl/certs/ca-certificates.crt"),
    )?;
    // In a cluster the API server is `kubernetes.default.svc`; here it resolves through
    // /etc/hosts (glibc's built-in `files` NSS module, no shared library needed).
    std::fs::write(
        r.join("etc/hosts"),
        "127.0.0.1 localhost kubernetes.default.svc\n",
    )?;
    std::fs::write(
        r.join("etc/passwd"),
        "nobody:x:65534:65534::/:/sbin/nologin\n",
    )?;
    std::fs::write(r.join("kubeconfig"), kubeconfig)?;
    for (dev, minor) in [("null", "3"), ("random", "8"), ("urandom", "9")] {
        let st = Command::new("mknod")
            .arg(r.join("dev").join(dev))
            .args(["-m", "666", "c", "1", minor])
            .status()?;
        anyhow::ensure!(st.success(), "mknod {dev} failed");
    }
    let st = Command::new("chmod")
        .arg("1777")
        .arg(r.join("tmp"))
        .arg(r.join("data"))
        .status()?;
    anyhow::ensure!(st.success(), "chmod /tmp failed");
    Ok(root)
}

#[tokio::test]
async fn the_static_binaries_run_as_nobody_in_a_bare_root_against_the_api_server() {
    let dir = static_dir();
    let bins = ["source-controller", "kustomize-controller"].map(|b| dir.join(b));
    if bins.iter().any(|b| !b.is_file()) {
        eprintln!(
            "skipped: no static binaries in {} (`make static` builds them; it takes minutes, so \
             `make test` does not)",
            dir.display()
        );
        return;
    }
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !is_root || on_path("chroot").is_none() || on_path("mknod").is_none() {
        eprintln!("skipped: needs root, chroot and mknod");
        return;
    }
    let cp = ControlPlane::shared().await.unwrap();
    let port = cp
        .server_url()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let kubeconfig = std::fs::read_to_string(cp.kubeconfig_path())
        .unwrap()
        .replace(
            cp.server_url(),
            &format!("https://kubernetes.default.svc:{port}"),
        );
    assert!(kubeconfig.contains("kubernetes.default.svc"));
    let root = bare_root(&kubeconfig).unwrap();
    let label = format!(
        "--watch-label-selector=e2e.rflux.dev/static={}",
        rflux_e2e::unique_name("s")
    );
    for bin in &bins {
        let name = bin.file_name().unwrap().to_string_lossy().to_string();
        std::fs::copy(bin, root.path().join(&name)).unwrap();
        let metrics = rflux_e2e::free_port().unwrap();
        let health = rflux_e2e::free_port().unwrap();
        let mut args = vec![
            "--kubeconfig=/kubeconfig".to_string(),
            format!("--metrics-addr=127.0.0.1:{metrics}"),
            format!("--health-addr=127.0.0.1:{health}"),
            "--enable-leader-election=false".to_string(),
            label.clone(),
        ];
        if name == "source-controller" {
            let storage = rflux_e2e::free_port().unwrap();
            args.extend([
                "--storage-path=/data".to_string(),
                format!("--storage-addr=127.0.0.1:{storage}"),
                format!("--storage-adv-addr=127.0.0.1:{storage}"),
            ]);
        }
        let log = root.path().join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        // Absolute path: the cleared environment has no PATH to look it up in.
        let child = Command::new(on_path("chroot").unwrap())
            .arg("--userspec=65534:65534")
            .arg(root.path())
            .arg(format!("/{name}"))
            .args(&args)
            .env_clear()
            .env("RUNTIME_NAMESPACE", "default")
            .env("TMPDIR", "/tmp")
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let mut proc = Chrooted(child);
        let health_addr = std::net::SocketAddr::from(([127, 0, 0, 1], health));
        let started = Instant::now();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let problem = match proc.0.try_wait() {
                Ok(Some(status)) => Some(format!("exited: {status}")),
                Ok(None) if Instant::now() > deadline => Some("/readyz not 200 in 60s".into()),
                Ok(None) => None,
                Err(e) => Some(e.to_string()),
            };
            if let Some(p) = problem {
                panic!(
                    "static {name} in a bare root: {p}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            if support::procs::http_status(health_addr, "/readyz").await == Some(200) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let metrics_addr = std::net::SocketAddr::from(([127, 0, 0, 1], metrics));
        let (_, body) = support::procs::http_get(metrics_addr, "/metrics")
            .await
            .unwrap();
        let host = format!("host=\"kubernetes.default.svc:{port}\"");
        assert!(
            body.lines()
                .any(|l| l.starts_with("rest_client_requests_total") && l.contains(&host)),
            "{name}: no API request to kubernetes.default.svc in /metrics"
        );
        eprintln!(
            "static {name}: ready in a bare root as user 65534 after {:?}",
            started.elapsed()
        );
        drop(proc);
    }
}
