//! Flux's manual sharding (issue 20 §4), as Flux documents it
//! (fluxcd.io/flux/installation/configuration/sharding): the main controllers run with
//! `--watch-label-selector=!sharding.fluxcd.io/key`, each shard's controllers with
//! `--watch-label-selector=sharding.fluxcd.io/key=shard1`, and a shard's GitRepository and
//! Kustomization both carry the shard label. Here both sets of OUR controllers run as processes
//! on one control plane (each also restricted to this test's objects):
//! - with only the main controllers running, the unlabelled pair is reconciled and the shard's
//!   pair is left alone (no status at all);
//! - once the shard's controllers run, its pair is reconciled, and its artifact is served by the
//!   shard's own source-controller (the artifact URL names its storage address);
//! - with the main controllers stopped, a reconcile request on the shard's Kustomization is
//!   handled and one on the main Kustomization is not.
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::{ControlPlane, GitServer};
use serde_json::{Value, json};
use support::procs::{
    ControllerOptions, Controllers, apply_value, install_crds, ks_ready, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(90);
const SHARD_KEY: &str = "sharding.fluxcd.io/key";
const TEST_LABEL: &str = "e2e.rflux.dev/sharding";

fn options(selector: &str) -> ControllerOptions {
    let flag = format!("--watch-label-selector={selector}");
    ControllerOptions {
        label: None,
        source_args: vec![flag.clone()],
        kustomize_args: vec![flag],
        ..ControllerOptions::default()
    }
}

fn labels(tag: &str, shard: Option<&str>) -> Value {
    let mut l = json!({ TEST_LABEL: tag });
    if let Some(s) = shard {
        l[SHARD_KEY] = json!(s);
    }
    l
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_manual_sharding_by_watch_label_selector() {
    let cp = ControlPlane::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    install_crds(&client).await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let ns = cp.create_namespace("shard").await.unwrap();
    let tag = rflux_e2e::unique_name("s");
    let repo = git.create_repo("shard").unwrap();
    for dir in ["main", "shard1"] {
        repo.write(
            &format!("{dir}/cm.yaml"),
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-{dir}\ndata:\n  a: b\n"
            ),
        )
        .unwrap();
    }
    repo.commit("two apps").unwrap();
    repo.push("main").unwrap();
    for (name, shard) in [("main", None), ("shard1", Some("shard1"))] {
        let gr = json!({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": name, "namespace": ns, "labels": labels(&tag, shard)},
            "spec": {"url": git.http_url(repo.name()), "interval": "1h", "ref": {"branch": "main"}}});
        apply_value(&client, &gr, "e2e").await.unwrap();
        let ks = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": ns, "labels": labels(&tag, shard)},
            "spec": {"interval": "1h", "prune": true, "path": format!("./{name}"),
                     "targetNamespace": ns, "sourceRef": {"kind": "GitRepository", "name": name}}});
        apply_value(&client, &ks, "e2e").await.unwrap();
    }
    let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), &ns);
    let repos: Api<GitRepository> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // The main controllers: everything without a shard key.
    let mut main = Controllers::start(cp, options(&format!("{TEST_LABEL}={tag},!{SHARD_KEY}")))
        .await
        .unwrap();
    wait_for(TIMEOUT, "the main Kustomization Ready", || async {
        Ok(ks_ready(&ks_api.get("main").await?).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", main.log_tails(40)));
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The CRDs default `status` to `{observedGeneration: -1}` (as Flux's): no conditions means
    // no controller touched it.
    let untouched = ks_api.get("shard1").await.unwrap();
    assert!(
        untouched
            .status
            .as_ref()
            .is_none_or(|s| s.conditions.is_none()),
        "the main controllers reconciled the shard's Kustomization: {:?}",
        untouched.status
    );
    let untouched = repos.get("shard1").await.unwrap();
    assert!(
        untouched
            .status
            .as_ref()
            .is_none_or(|s| s.conditions.is_none() && s.artifact.is_none()),
        "the main controllers reconciled the shard's GitRepository: {:?}",
        untouched.status
    );
    assert!(cms.get_opt("from-shard1").await.unwrap().is_none());
    let main_url = repos
        .get("main")
        .await
        .unwrap()
        .status
        .unwrap()
        .artifact
        .unwrap()
        .url;
    assert!(
        main_url.contains(&main.storage_addr.to_string()),
        "{main_url}"
    );

    // The shard's controllers.
    let shard = Controllers::start(
        cp,
        options(&format!("{TEST_LABEL}={tag},{SHARD_KEY}=shard1")),
    )
    .await
    .unwrap();
    wait_for(TIMEOUT, "the shard's Kustomization Ready", || async {
        Ok(ks_ready(&ks_api.get("shard1").await?).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", shard.log_tails(40)));
    assert!(cms.get_opt("from-shard1").await.unwrap().is_some());
    let shard_url = repos
        .get("shard1")
        .await
        .unwrap()
        .status
        .unwrap()
        .artifact
        .unwrap()
        .url;
    assert!(
        shard_url.contains(&shard.storage_addr.to_string()),
        "the shard's artifact is not served by the shard's source-controller: {shard_url}"
    );

    // Main stopped: only the shard answers reconcile requests.
    main.stop();
    let ask = |name: &'static str, at: &'static str| {
        let api = ks_api.clone();
        async move {
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": at}}}),
                ),
            )
            .await
            .unwrap();
        }
    };
    ask("shard1", "t1").await;
    ask("main", "t1").await;
    let handled = |k: &Kustomization| {
        k.status
            .as_ref()
            .and_then(|s| s.last_handled_reconcile_at.clone())
            .as_deref()
            == Some("t1")
    };
    wait_for(TIMEOUT, "the shard handles its request", || async {
        Ok(handled(&ks_api.get("shard1").await?).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", shard.log_tails(40)));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !handled(&ks_api.get("main").await.unwrap()),
        "the shard's controllers handled the main Kustomization"
    );
}
