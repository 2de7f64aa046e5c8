//! The whole loop with both controller PROCESSES: our `source-controller` clones from the test
//! git server and serves the artifact, our `kustomize-controller` downloads, builds and applies
//! it. Nothing is patched by hand.
//!
//! One test on its own control plane (`loop`), the controllers watching only objects with their
//! label: a push adding a ConfigMap and a Deployment is applied (Ready at `main@sha1:<sha>`,
//! `wait: true`), a push changing a value updates it, a push removing a file prunes its object,
//! three Kustomizations C → B → A (dependsOn) are applied in order, and deleting the
//! Kustomization garbage-collects what it applied. The time from `git push` to the object
//! existing is printed (measured, not asserted). The Kustomization interval is long (10m): new
//! revisions must reach it through the GitRepository watch, not the interval.
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams};
use kube::{Client, ResourceExt};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::{ControlPlane, GitServer};
use serde_json::{Value, json};
use support::procs::{
    ControllerOptions, Controllers, apply_value, install_crds, ks_condition, ks_ready, wait_for,
    wait_ks, wait_list_empty,
};

const TIMEOUT: Duration = Duration::from_secs(90);

fn cm(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

fn deployment(name: &str, env: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      containers:
      - name: app
        image: registry.invalid/app:1
        env:
        - name: MODE
          value: "{env}"
"#
    )
}

/// Waits until the Kustomization is Ready at `revision`; the error carries its status and the
/// controller logs.
async fn wait_ready_at(
    api: &Api<Kustomization>,
    ctl: &mut Controllers,
    name: &str,
    revision: &str,
) -> Kustomization {
    wait_ks(
        api,
        ctl,
        TIMEOUT,
        name,
        &format!("{name} Ready at {revision}"),
        |ks| {
            let applied = ks
                .status
                .as_ref()
                .and_then(|s| s.last_applied_revision.as_deref());
            ks_ready(ks) && applied == Some(revision)
        },
    )
    .await
}

async fn cm_value(cms: &Api<ConfigMap>, name: &str) -> Option<String> {
    cms.get_opt(name)
        .await
        .ok()
        .flatten()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .and_then(|c| c.data)
        .and_then(|d| d.get("value").cloned())
}

fn kustomization(ns: &str, name: &str, path: &str, ctl: &Controllers, extra: Value) -> Value {
    let mut obj = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"interval": "10m", "retryInterval": "5s", "timeout": "60s", "prune": true,
                 "wait": true, "path": path, "targetNamespace": ns,
                 "sourceRef": {"kind": "GitRepository", "name": "repo"}}
    });
    if let (Some(s), Some(e)) = (obj["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    ctl.label_object(&mut obj);
    obj
}

/// Polls until the ConfigMap has `value`; returns the time since `since`.
async fn time_until_value(
    cms: &Api<ConfigMap>,
    ctl: &mut Controllers,
    name: &str,
    value: Option<&str>,
    since: Instant,
) -> Duration {
    let res = wait_for(
        TIMEOUT,
        &format!("ConfigMap {name} value {value:?}"),
        || async { Ok((cm_value(cms, name).await.as_deref() == value).then(|| since.elapsed())) },
    )
    .await;
    match res {
        Ok(d) => d,
        Err(e) => panic!("{e}\n{}", ctl.log_tails(40)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_loop_with_both_controller_processes() {
    let cp = ControlPlane::shared_named("loop").await.unwrap();
    let client: Client = cp.client().await.unwrap();
    // Nothing swaps CRDs on this control plane: the lock is needed only to install them.
    install_crds(&client).await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let ns = cp.create_namespace("loop").await.unwrap();
    let mut ctl = Controllers::start(cp, ControllerOptions::default())
        .await
        .unwrap();

    let repo = git.create_repo("loop").unwrap();
    repo.write("README.md", "full loop\n").unwrap();
    let sha0 = repo.commit("initial").unwrap();
    repo.push("main").unwrap();

    let mut gitrepo = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "repo", "namespace": ns},
        "spec": {"url": git.http_url(repo.name()), "interval": "2s", "ref": {"branch": "main"}}
    });
    ctl.label_object(&mut gitrepo);
    apply_value(&client, &gitrepo, "e2e").await.unwrap();
    let repos: Api<GitRepository> = Api::namespaced(client.clone(), &ns);
    let rev0 = format!("main@sha1:{sha0}");
    let res = wait_for(
        TIMEOUT,
        "GitRepository artifact at the first commit",
        || async {
            let r = repos.get("repo").await?;
            Ok(r.status
                .and_then(|s| s.artifact)
                .filter(|a| a.revision == rev0)
                .map(|_| ()))
        },
    )
    .await;
    if let Err(e) = res {
        panic!("{e}\n{}", ctl.log_tails(40));
    }

    let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    apply_value(
        &client,
        &kustomization(&ns, "app", "./deploy", &ctl, json!({})),
        "e2e",
    )
    .await
    .unwrap();
    // Nothing under ./deploy yet: the build fails until the first push adds it.

    // 1. A push adds a ConfigMap and a Deployment: applied, Ready at the new revision.
    repo.write("deploy/config.yaml", &cm("app-config", "v1"))
        .unwrap();
    repo.write("deploy/app.yaml", &deployment("app", "one"))
        .unwrap();
    let sha1 = repo.commit("add the app").unwrap();
    let pushed = Instant::now();
    repo.push("main").unwrap();
    let rev1 = format!("main@sha1:{sha1}");
    let t_cm = time_until_value(&cms, &mut ctl, "app-config", Some("v1"), pushed).await;
    let ks = wait_ready_at(&ks_api, &mut ctl, "app", &rev1).await;
    let t_ready = pushed.elapsed();
    println!(
        "measured (GitRepository interval 2s): git push -> ConfigMap exists {:.2}s, -> Kustomization Ready (wait: true) {:.2}s",
        t_cm.as_secs_f64(),
        t_ready.as_secs_f64()
    );
    let status = ks.status.clone().unwrap();
    assert_eq!(status.last_applied_revision.as_deref(), Some(rev1.as_str()));
    assert_eq!(
        status.last_attempted_revision.as_deref(),
        Some(rev1.as_str())
    );
    let ready = ks_condition(&ks, "Ready").unwrap();
    assert_eq!(ready.reason, "ReconciliationSucceeded");
    assert_eq!(ready.message, format!("Applied revision: {rev1}"));
    let healthy = ks_condition(&ks, "Healthy").expect("wait: true sets Healthy");
    assert_eq!(healthy.status, "True");
    let dep = deploys.get("app").await.unwrap();
    assert_eq!(
        dep.labels()
            .get("kustomize.toolkit.fluxcd.io/name")
            .map(String::as_str),
        Some("app")
    );
    let available = dep
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Available" && c.status == "True");
    assert!(available, "wait: true means the Deployment was Available");
    let inventory: Vec<String> = status
        .inventory
        .unwrap()
        .entries
        .iter()
        .map(|e| e.id.clone())
        .collect();
    assert_eq!(
        inventory,
        vec![
            format!("{ns}_app-config__ConfigMap"),
            format!("{ns}_app_apps_Deployment")
        ]
    );
    let artifact = repos
        .get("repo")
        .await
        .unwrap()
        .status
        .unwrap()
        .artifact
        .unwrap();
    assert_eq!(artifact.revision, rev1);
    assert!(
        artifact
            .url
            .starts_with(&format!("http://{}/", ctl.storage_addr)),
        "served by our source-controller: {}",
        artifact.url
    );

    // 2. A push changes a value: updated.
    repo.write("deploy/config.yaml", &cm("app-config", "v2"))
        .unwrap();
    repo.write("deploy/app.yaml", &deployment("app", "two"))
        .unwrap();
    let sha2 = repo.commit("change the value").unwrap();
    let pushed = Instant::now();
    repo.push("main").unwrap();
    let rev2 = format!("main@sha1:{sha2}");
    let t_update = time_until_value(&cms, &mut ctl, "app-config", Some("v2"), pushed).await;
    wait_ready_at(&ks_api, &mut ctl, "app", &rev2).await;
    println!(
        "measured: git push -> ConfigMap updated {:.2}s, -> Ready {:.2}s",
        t_update.as_secs_f64(),
        pushed.elapsed().as_secs_f64()
    );
    let env = deploys
        .get("app")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .env
        .clone()
        .unwrap();
    assert_eq!(env[0].value.as_deref(), Some("two"));

    // 3. A push removes a file: its object is pruned, the other stays.
    repo.remove("deploy/config.yaml").unwrap();
    let sha3 = repo.commit("remove the config").unwrap();
    let pushed = Instant::now();
    repo.push("main").unwrap();
    let rev3 = format!("main@sha1:{sha3}");
    let t_prune = time_until_value(&cms, &mut ctl, "app-config", None, pushed).await;
    let ks = wait_ready_at(&ks_api, &mut ctl, "app", &rev3).await;
    println!(
        "measured: git push -> ConfigMap pruned {:.2}s",
        t_prune.as_secs_f64()
    );
    assert!(deploys.get_opt("app").await.unwrap().is_some());
    let entries = ks.status.unwrap().inventory.unwrap().entries;
    assert_eq!(entries.len(), 1, "{entries:?}");

    // 4. dependsOn: C → B → A, created in reverse order; A waits for a Deployment.
    repo.write("dep/a/cm.yaml", &cm("dep-a", "a")).unwrap();
    repo.write("dep/a/app.yaml", &deployment("dep-a", "a"))
        .unwrap();
    repo.write("dep/b/cm.yaml", &cm("dep-b", "b")).unwrap();
    repo.write("dep/c/cm.yaml", &cm("dep-c", "c")).unwrap();
    let sha4 = repo.commit("dependencies").unwrap();
    repo.push("main").unwrap();
    let rev4 = format!("main@sha1:{sha4}");
    wait_ready_at(&ks_api, &mut ctl, "app", &rev4).await;
    let created = Instant::now();
    for (name, dep) in [("c", Some("b")), ("b", Some("a")), ("a", None)] {
        let extra = match dep {
            Some(d) => json!({"dependsOn": [{"name": d}]}),
            None => json!({}),
        };
        let obj = kustomization(&ns, name, &format!("./dep/{name}"), &ctl, extra);
        apply_value(&client, &obj, "e2e").await.unwrap();
    }
    // Record when each ConfigMap first appears (100 ms polling).
    let mut seen: [Option<Duration>; 3] = [None; 3];
    let deadline = Instant::now() + TIMEOUT;
    while seen.iter().any(Option::is_none) {
        for (i, n) in ["dep-a", "dep-b", "dep-c"].iter().enumerate() {
            if seen[i].is_none() && cm_value(&cms, n).await.is_some() {
                seen[i] = Some(created.elapsed());
            }
        }
        if Instant::now() > deadline {
            panic!(
                "dependsOn chain not applied: {seen:?}\n{}",
                ctl.log_tails(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let [a, b, c] = seen.map(Option::unwrap);
    println!(
        "measured: dependsOn chain, first seen after creation: A {:.2}s, B {:.2}s, C {:.2}s",
        a.as_secs_f64(),
        b.as_secs_f64(),
        c.as_secs_f64()
    );
    assert!(
        a < b && b < c,
        "applied out of order: A {a:?}, B {b:?}, C {c:?}"
    );
    let mut ready_times = Vec::new();
    for name in ["a", "b", "c"] {
        let ks = wait_ready_at(&ks_api, &mut ctl, name, &rev4).await;
        ready_times.push(ks_condition(&ks, "Ready").unwrap().last_transition_time.0);
    }
    assert!(
        ready_times[0] <= ready_times[1] && ready_times[1] <= ready_times[2],
        "Ready transitions out of order: {ready_times:?}"
    );
    let mut created_at = Vec::new();
    for n in ["dep-a", "dep-b", "dep-c"] {
        created_at.push(
            cms.get(n)
                .await
                .unwrap()
                .metadata
                .creation_timestamp
                .unwrap()
                .0,
        );
    }
    assert!(
        created_at[0] <= created_at[1] && created_at[1] <= created_at[2],
        "objects created out of order: {created_at:?}"
    );

    // 5. Deleting a Kustomization (prune: true) removes what it applied.
    ks_api
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    let res = wait_for(
        TIMEOUT,
        "Kustomization app deleted and its Deployment pruned",
        || async {
            let gone = ks_api.get_opt("app").await?.is_none();
            let dep_gone = deploys
                .get_opt("app")
                .await?
                .is_none_or(|d| d.metadata.deletion_timestamp.is_some());
            Ok((gone && dep_gone).then_some(()))
        },
    )
    .await;
    if let Err(e) = res {
        panic!("{e}\n{}", ctl.log_tails(40));
    }
    for name in ["c", "b", "a"] {
        ks_api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    wait_list_empty(&ks_api, &ctl, TIMEOUT, "all Kustomizations finalized").await;
    ctl.check_alive().unwrap();
    repos
        .delete("repo", &DeleteParams::default())
        .await
        .unwrap();
    let res = wait_for(TIMEOUT, "GitRepository finalized", || async {
        Ok(repos.get_opt("repo").await?.is_none().then_some(()))
    })
    .await;
    if let Err(e) = res {
        panic!("{e}\n{}", ctl.log_tails(40));
    }
    ctl.stop();
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nss.delete(&ns, &DeleteParams::default()).await.unwrap();
}
