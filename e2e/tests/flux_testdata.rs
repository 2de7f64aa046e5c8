//! Flux's own kustomize-controller e2e (its CI workflow `e2e.yaml` over `config/testdata`),
//! step by step, against our two controller processes, with podinfo served by the test git
//! server instead of GitHub.
//!
//! The testdata (`../shared/reference/flux/testdata`) points at
//! `https://github.com/stefanprodan/podinfo` with `tag: 6.3.5`, `semver: 6.3.5`,
//! `semver: >=6.3.5` and `branch: master`, and paths `./kustomize`, `./deploy/webapp/*` and
//! `./deploy/overlays/*`. The test pushes `../shared/reference/podinfo/tree` (podinfo's
//! `kustomize/` and `deploy/` folders) to a repository on the test git server, tags the first
//! commit `6.3.5` and a second one `6.9.4`, pushes `master`, and rewrites every GitRepository URL
//! to that repository. The objects get the controllers' watch label; the namespaced ones without
//! a namespace go to a test namespace (Flux's CI uses `kustomize-system`).
//!
//! Steps, as in Flux's workflow:
//! - status-defaults: an empty Kustomization gets `status: {observedGeneration: -1}` from the CRD.
//! - managed-fields: podinfo applied by `kubectl apply` (client-side), then the Kustomization takes
//!   it over: no trace of kubectl in the Deployment; again after `kubectl apply --server-side
//!   --force-conflicts` and a `reconcile.fluxcd.io/requestedAt` request.
//! - overlays: webapp-staging and webapp-production Ready (health checks on two Deployments each).
//! - dependencies: common, backend, frontend Ready, in dependsOn order.
//! - impersonation: Ready as the tenant service account; deleting the Kustomization prunes
//!   `deploy/podinfo`.
//! - oci: the OCIRepository pulls `stefanprodan/manifests/podinfo:6.3.5`, which this test pushes
//!   (podinfo's `kustomize/` folder, with the real `flux push artifact`) to a local registry
//!   (distribution, `e2e/registry/build.sh`) in place of ghcr.io; the Kustomization is Ready at
//!   `6.3.5@sha256:…` with its HPA patch applied. Without the registry or the flux CLI this step is
//!   skipped with a note.
//!
//! Skips (passes) with a message when `../shared` is absent. Needs the controller binaries
//! built (`cargo build -p source-controller -p kustomize-controller`) and `kubectl`.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::{ControlPlane, GitServer, repo_root};
use serde_json::{Value, json};
use support::procs::{
    Binaries, ControllerOptions, Controllers, apply_value, install_crds, ks_condition, ks_ready,
    wait_for, wait_ks, wait_list_empty,
};

const TIMEOUT: Duration = Duration::from_secs(240);
const PODINFO_URL: &str = "https://github.com/stefanprodan/podinfo";
/// Cluster-scoped names the testdata uses; removed before the run when a previous one left them.
const FIXED_NAMESPACES: &[&str] = &[
    "managed-fields",
    "staging",
    "production",
    "webapp",
    "impersonation",
    "oci",
];

fn shared_dir(rel: &str) -> Option<PathBuf> {
    let dir = repo_root().join("../shared").join(rel);
    dir.is_dir().then_some(dir)
}

/// The YAML documents of `path` (a file, or a directory: its kustomization.yaml `resources` in
/// order, else every `*.yaml` sorted).
fn load(path: &Path) -> Vec<Value> {
    if path.is_file() {
        let text = std::fs::read_to_string(path).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
        return docs.into_iter().filter(|d| !d.is_null()).collect();
    }
    let kfile = path.join("kustomization.yaml");
    let files: Vec<PathBuf> = if kfile.is_file() {
        let k: Value = serde_saphyr::from_str(&std::fs::read_to_string(&kfile).unwrap()).unwrap();
        k["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| path.join(r.as_str().unwrap()))
            .collect()
    } else {
        let mut f: Vec<PathBuf> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        f.sort();
        f
    };
    files.iter().flat_map(|f| load(f)).collect()
}

fn kind(obj: &Value) -> &str {
    obj["kind"].as_str().unwrap_or_default()
}

/// Rewrites a testdata object for this run: the podinfo URL → the test git server, the watch
/// label on Flux objects, a namespace for namespaced objects without one.
fn prepare(mut obj: Value, ns: &str, url: &str, ctl: &Controllers) -> Value {
    let k = kind(&obj).to_string();
    if k == "GitRepository" {
        assert_eq!(obj["spec"]["url"], PODINFO_URL, "testdata URL changed");
        obj["spec"]["url"] = Value::String(url.to_string());
    }
    if matches!(
        k.as_str(),
        "GitRepository" | "Kustomization" | "OCIRepository"
    ) {
        ctl.label_object(&mut obj);
    }
    if k != "Namespace" && obj["metadata"].get("namespace").is_none() {
        obj["metadata"]["namespace"] = Value::String(ns.to_string());
    }
    obj
}

async fn apply_all(client: &Client, objs: &[Value]) {
    for o in objs {
        apply_value(client, o, "e2e").await.unwrap();
    }
}

/// Waits until the Kustomization is Ready at its generation; returns it. Panics with its status
/// and the controller logs.
async fn wait_ready(client: &Client, ctl: &mut Controllers, ns: &str, name: &str) -> Kustomization {
    let api: Api<Kustomization> = Api::namespaced(client.clone(), ns);
    let started = Instant::now();
    let ks = wait_ks(
        &api,
        ctl,
        TIMEOUT,
        name,
        &format!("Kustomization {ns}/{name} Ready"),
        ks_ready,
    )
    .await;
    println!(
        "{ns}/{name}: Ready after {:.1}s at {}",
        started.elapsed().as_secs_f64(),
        ks.status
            .as_ref()
            .and_then(|s| s.last_applied_revision.clone())
            .unwrap_or_default()
    );
    ks
}

fn applied_revision(ks: &Kustomization) -> String {
    ks.status
        .as_ref()
        .and_then(|s| s.last_applied_revision.clone())
        .unwrap_or_default()
}

/// `kubectl --kubeconfig <cp> args…`; panics with stderr on failure.
fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .args(args)
        .output()
        .expect("kubectl must be installed");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Deletes a namespace left by an earlier run and waits until it is gone, dropping the
/// finalizers of Flux objects in it (their controllers are gone).
async fn purge_namespace(client: &Client, ns: &str) {
    let nss: Api<Namespace> = Api::all(client.clone());
    if nss.get_opt(ns).await.unwrap().is_none() {
        return;
    }
    println!("removing namespace {ns} left by an earlier run");
    let _ = nss.delete(ns, &DeleteParams::default()).await;
    let kinds = [
        (
            "kustomize.toolkit.fluxcd.io",
            "Kustomization",
            "kustomizations",
        ),
        (
            "source.toolkit.fluxcd.io",
            "GitRepository",
            "gitrepositories",
        ),
    ];
    let res = wait_for(TIMEOUT, &format!("namespace {ns} gone"), || async {
        for (group, kind, plural) in kinds {
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, "v1", kind),
                plural,
            );
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
            for o in api
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                if !o.finalizers().is_empty() {
                    let _ = api
                        .patch(
                            &o.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                        )
                        .await;
                }
            }
        }
        Ok(nss.get_opt(ns).await?.is_none().then_some(()))
    })
    .await;
    res.unwrap();
}

/// Pushes podinfo's folders: commit 1 tagged `6.3.5`, commit 2 tagged `6.9.4`, both on
/// `master`. Returns (repo name, sha of 6.3.5, sha of 6.9.4).
fn push_podinfo(git: &GitServer, tree: &Path) -> (String, String, String) {
    let repo = git.create_repo("podinfo").unwrap();
    fn copy(repo: &rflux_e2e::TestRepo, root: &Path, dir: &Path) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                copy(repo, root, &p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
                repo.write(&rel, &std::fs::read_to_string(&p).unwrap())
                    .unwrap();
            }
        }
    }
    copy(&repo, tree, tree);
    let old = repo.commit("podinfo 6.3.5").unwrap();
    repo.tag("6.3.5", true).unwrap();
    repo.write("VERSION", "6.9.4\n").unwrap();
    let new = repo.commit("podinfo 6.9.4").unwrap();
    repo.tag("6.9.4", true).unwrap();
    repo.push("master").unwrap();
    repo.push_tags().unwrap();
    (repo.name().to_string(), old, new)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_testdata_with_podinfo() {
    let (Some(testdata), Some(tree)) = (
        shared_dir("reference/flux/testdata"),
        shared_dir("reference/podinfo/tree"),
    ) else {
        println!(
            "skipped: ../shared/reference/flux/testdata or ../shared/reference/podinfo/tree is absent (Flux's testdata and podinfo's manifests are needed)"
        );
        return;
    };
    let cp = ControlPlane::shared_named("loop").await.unwrap();
    let client = cp.client().await.unwrap();
    install_crds(&client).await.unwrap();
    for ns in FIXED_NAMESPACES {
        purge_namespace(&client, ns).await;
    }
    let git = GitServer::shared().await.unwrap();
    let (repo, sha_old, sha_new) = push_podinfo(git, &tree);
    let url = git.http_url(&repo);
    let ns = cp.create_namespace("kustomize-system").await.unwrap();
    let nss: Api<Namespace> = Api::all(client.clone());

    // status-defaults, before the controllers run (as in Flux's workflow).
    let objs = load(&testdata.join("status-defaults"));
    assert_eq!(objs.len(), 1);
    let mut obj = objs[0].clone();
    obj["metadata"]["namespace"] = Value::String(ns.clone());
    apply_value(&client, &obj, "e2e").await.unwrap();
    let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), &ns);
    let raw: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
            "kustomizations",
        ),
    );
    let got = raw.get("status-defaults").await.unwrap();
    assert_eq!(got.data["status"], json!({"observedGeneration": -1}));
    ks_api
        .delete("status-defaults", &DeleteParams::default())
        .await
        .unwrap();

    let mut ctl = Controllers::start(cp, ControllerOptions::default())
        .await
        .unwrap();
    let rev_old = format!("6.3.5@sha1:{sha_old}");
    let rev_new = format!("6.9.4@sha1:{sha_new}");

    // managed-fields.
    let kubectl_ns = "managed-fields";
    kubectl(cp, &["create", "ns", kubectl_ns]);
    let podinfo_dir = tempfile::tempdir().unwrap();
    // `kustomize build github.com/stefanprodan/podinfo//kustomize?ref=6.3.5`, with our engine.
    let built = Command::new(Binaries::ours().kustomize)
        .arg("build")
        .arg(tree.join("kustomize"))
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let podinfo_yaml = podinfo_dir.path().join("podinfo.yaml");
    std::fs::write(&podinfo_yaml, &built.stdout).unwrap();
    let podinfo_path = podinfo_yaml.to_str().unwrap();
    kubectl(cp, &["-n", kubectl_ns, "apply", "-f", podinfo_path]);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), kubectl_ns);
    let before = serde_json::to_string(&deploys.get("podinfo").await.unwrap().metadata).unwrap();
    assert!(
        before.contains("kubectl"),
        "kubectl apply leaves its traces: {before}"
    );
    let objs: Vec<Value> = load(&testdata.join("managed-fields"))
        .into_iter()
        .map(|o| prepare(o, kubectl_ns, &url, &ctl))
        .collect();
    apply_all(&client, &objs).await;
    let ks = wait_ready(&client, &mut ctl, kubectl_ns, "podinfo").await;
    assert_eq!(applied_revision(&ks), rev_old, "semver 6.3.5");
    let no_kubectl = |d: &Deployment| !serde_json::to_string(d).unwrap().contains("kubectl");
    let dep = deploys.get("podinfo").await.unwrap();
    assert!(
        no_kubectl(&dep),
        "kubectl client-side manager not removed: {:?}",
        dep.metadata
    );
    kubectl(
        cp,
        &[
            "-n",
            kubectl_ns,
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            podinfo_path,
        ],
    );
    let dep = deploys.get("podinfo").await.unwrap();
    assert!(
        !no_kubectl(&dep),
        "kubectl server-side apply adds a kubectl manager"
    );
    let requested = format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    );
    kubectl(
        cp,
        &[
            "-n",
            kubectl_ns,
            "annotate",
            "--overwrite",
            "kustomization/podinfo",
            &format!("reconcile.fluxcd.io/requestedAt={requested}"),
        ],
    );
    let mf_api: Api<Kustomization> = Api::namespaced(client.clone(), kubectl_ns);
    let res = wait_for(
        TIMEOUT,
        "managed-fields reconcile request handled",
        || async {
            let ks = mf_api.get("podinfo").await?;
            let handled = ks
                .status
                .as_ref()
                .and_then(|s| s.last_handled_reconcile_at.clone());
            Ok((ks_ready(&ks) && handled.as_deref() == Some(requested.as_str())).then_some(()))
        },
    )
    .await;
    if let Err(e) = res {
        panic!("{e}\n{}", ctl.log_tails(40));
    }
    let dep = deploys.get("podinfo").await.unwrap();
    assert!(
        no_kubectl(&dep),
        "kubectl server-side manager not removed: {:?}",
        dep.metadata
    );
    mf_api
        .delete("podinfo", &DeleteParams::default())
        .await
        .unwrap();
    let res = wait_for(
        TIMEOUT,
        "managed-fields Kustomization finalized",
        || async { Ok(mf_api.get_opt("podinfo").await?.is_none().then_some(())) },
    )
    .await;
    res.unwrap();
    nss.delete(kubectl_ns, &DeleteParams::default())
        .await
        .unwrap();

    // overlays.
    let objs: Vec<Value> = load(&testdata.join("overlays"))
        .into_iter()
        .map(|o| prepare(o, &ns, &url, &ctl))
        .collect();
    apply_all(&client, &objs).await;
    for name in ["webapp-staging", "webapp-production"] {
        let ks = wait_ready(&client, &mut ctl, &ns, name).await;
        assert_eq!(
            applied_revision(&ks),
            rev_new,
            "semver >=6.3.5 picks the newest tag"
        );
        let healthy = ks_condition(&ks, "Ready").unwrap();
        assert_eq!(healthy.reason, "ReconciliationSucceeded");
    }
    for env in ["staging", "production"] {
        let d: Api<Deployment> = Api::namespaced(client.clone(), env);
        for name in ["backend", "frontend"] {
            let dep = d.get(name).await.unwrap();
            assert_eq!(
                dep.labels()
                    .get("app.kubernetes.io/environment")
                    .map(String::as_str),
                Some(env)
            );
        }
    }
    let repos: Api<GitRepository> = Api::namespaced(client.clone(), &ns);
    let res = wait_for(TIMEOUT, "webapp-latest artifact", || async {
        Ok(repos
            .get("webapp-latest")
            .await?
            .status
            .and_then(|s| s.artifact)
            .map(|a| a.revision))
    })
    .await;
    assert_eq!(res.unwrap(), format!("master@sha1:{sha_new}"));

    // dependencies.
    let objs: Vec<Value> = load(&testdata.join("dependencies"))
        .into_iter()
        .map(|o| prepare(o, &ns, &url, &ctl))
        .collect();
    apply_all(&client, &objs).await;
    let mut ready_at = Vec::new();
    for name in ["common", "backend", "frontend"] {
        let ks = wait_ready(&client, &mut ctl, &ns, name).await;
        assert_eq!(applied_revision(&ks), rev_new);
        ready_at.push(ks_condition(&ks, "Ready").unwrap().last_transition_time.0);
    }
    assert!(
        ready_at[0] <= ready_at[1] && ready_at[1] <= ready_at[2],
        "dependsOn order: {ready_at:?}"
    );

    // impersonation.
    let objs: Vec<Value> = load(&testdata.join("impersonation"))
        .into_iter()
        .map(|o| prepare(o, "impersonation", &url, &ctl))
        .collect();
    apply_all(&client, &objs).await;
    let ks = wait_ready(&client, &mut ctl, "impersonation", "podinfo").await;
    assert_eq!(applied_revision(&ks), rev_old, "tag 6.3.5");
    let imp_deploys: Api<Deployment> = Api::namespaced(client.clone(), "impersonation");
    let dep = imp_deploys.get("podinfo").await.unwrap();
    assert_eq!(
        dep.metadata
            .managed_fields
            .unwrap_or_default()
            .iter()
            .map(|m| m.manager.clone().unwrap_or_default())
            .filter(|m| m == "kustomize-controller")
            .count(),
        1
    );
    let imp_api: Api<Kustomization> = Api::namespaced(client.clone(), "impersonation");
    imp_api
        .delete("podinfo", &DeleteParams::default())
        .await
        .unwrap();
    let res = wait_for(
        TIMEOUT,
        "deploy/podinfo pruned after the Kustomization's deletion",
        || async {
            Ok(imp_deploys
                .get_opt("podinfo")
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await;
    if let Err(e) = res {
        panic!("{e}\n{}", ctl.log_tails(40));
    }

    // oci: the artifact ghcr.io serves, pushed to a local registry by the real flux CLI.
    let registry = match rflux_e2e::registry::push::skip_reason() {
        Some(why) => {
            println!("oci step skipped: {why}");
            None
        }
        None => Some(
            rflux_e2e::registry::Registry::start(rflux_e2e::registry::RegistryMode::Http).unwrap(),
        ),
    };
    if let Some(reg) = &registry {
        kubectl(cp, &["create", "ns", "oci"]);
        let oci_repo_path = "stefanprodan/manifests/podinfo";
        let digest = rflux_e2e::registry::push::push_artifact(
            reg,
            oci_repo_path,
            "6.3.5",
            &tree.join("kustomize"),
            PODINFO_URL,
            &format!("6.3.5@sha1:{sha_old}"),
        )
        .unwrap();
        let objs: Vec<Value> = load(&testdata.join("oci"))
            .into_iter()
            .map(|o| prepare(o, "oci", &url, &ctl))
            .map(|mut o| {
                if kind(&o) == "OCIRepository" {
                    assert_eq!(
                        o["spec"]["url"], "oci://ghcr.io/stefanprodan/manifests/podinfo",
                        "testdata URL changed"
                    );
                    o["spec"]["url"] = Value::String(reg.url(oci_repo_path));
                }
                o
            })
            .collect();
        apply_all(&client, &objs).await;
        let ks = wait_ready(&client, &mut ctl, "oci", "oci").await;
        assert_eq!(applied_revision(&ks), format!("6.3.5@{digest}"));
        assert_eq!(
            ks.status
                .as_ref()
                .unwrap()
                .last_applied_origin_revision
                .as_deref(),
            Some(format!("6.3.5@sha1:{sha_old}").as_str())
        );
        let hpa = kubectl(
            cp,
            &[
                "-n",
                "oci",
                "get",
                "hpa",
                "podinfo",
                "-o",
                "jsonpath={.spec.minReplicas}",
            ],
        );
        assert_eq!(hpa.trim(), "1", "the Kustomization's HPA patch is applied");
    }
    let oci_api: Api<Kustomization> = Api::namespaced(client.clone(), "oci");

    // Clean up: every Kustomization finalized (prune) while the controllers still run.
    ctl.check_alive().unwrap();
    for (n, api) in [(&ns, &ks_api), (&"oci".to_string(), &oci_api)] {
        api.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap();
        wait_list_empty(
            api,
            &ctl,
            TIMEOUT,
            &format!("Kustomizations in {n} finalized"),
        )
        .await;
    }
    for n in [ns.as_str(), "impersonation", kubectl_ns] {
        let api: Api<GitRepository> = Api::namespaced(client.clone(), n);
        let _ = api
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
        wait_list_empty(
            &api,
            &ctl,
            TIMEOUT,
            &format!("GitRepositories in {n} finalized"),
        )
        .await;
    }
    ctl.stop();
    for n in [ns.as_str(), "oci", "impersonation"] {
        let _ = nss.delete(n, &DeleteParams::default()).await;
    }
}
