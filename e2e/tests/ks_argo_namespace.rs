//! Argo CD `CreateNamespace=true` with `managedNamespaceMetadata` (issue 17) on the real
//! control plane, with the feature gate `ArgoSyncSemantics=true`
//! (kustomize-controller/src/reconcile/argo_namespace.rs), one Kustomization per case:
//! - `made`: its target namespace does not exist: it is created with the labels and annotations
//!   of `rflux.dev/argo-managed-namespace-metadata` and our mark `rflux.dev/created-by`; a new
//!   metadata is applied to it (a dropped key goes); deleting the Kustomization (prune) deletes
//!   it;
//! - `pre`: its target namespace exists already: it is neither labelled nor deleted;
//! - `built`: the build holds a Namespace of that name: the build's wins (no metadata, no mark,
//!   in the inventory);
//! - `off`: the same options without `rflux.dev/argo-semantics: enabled`: nothing is created,
//!   the apply fails as in Flux (namespace not found).
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod ks_env;
mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use ks_env::{Env, argo_kustomization, failed_with, ready_at, ready_message};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

const CREATED_BY: &str = "rflux.dev/created-by";

fn options(metadata: Value) -> Value {
    json!({"rflux.dev/argo-semantics": "enabled",
           "rflux.dev/argo-sync-options": "CreateNamespace=true",
           "rflux.dev/argo-managed-namespace-metadata": metadata.to_string()})
}

/// The labels and annotations of a namespace, `None` when it is absent or terminating.
async fn live(api: &Api<Namespace>, name: &str) -> Option<(Value, Value)> {
    let ns = api.get_opt(name).await.unwrap()?;
    if ns.metadata.deletion_timestamp.is_some() {
        return None;
    }
    Some((
        json!(ns.metadata.labels.unwrap_or_default()),
        json!(ns.metadata.annotations.unwrap_or_default()),
    ))
}

/// Waits until `pred` holds for the live namespace (`None`: absent or terminating).
async fn wait_ns(
    env: &Env,
    api: &Api<Namespace>,
    name: &str,
    what: &str,
    pred: impl Fn(&Option<(Value, Value)>) -> bool,
) -> Option<(Value, Value)> {
    let res = support::procs::wait_for(ks_env::TIMEOUT, what, || async {
        let l = live(api, name).await;
        Ok(pred(&l).then_some(l))
    })
    .await;
    match res {
        Ok(l) => l,
        Err(e) => panic!(
            "{e}; now: {:?}\n{}",
            live(api, name).await,
            env.ctl.log_tails(40)
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_namespace_with_metadata() {
    let files = [
        ("app/kustomization.yaml", argo_kustomization(&["cm.yaml"])),
        ("app/cm.yaml", ks_env::cm("a", &[("k", "v")])),
    ];
    let mut env = Env::start("argons", "ArgoSyncSemantics=true", &files).await;
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    let made = format!("{}-made", env.ns);
    let pre = format!("{}-pre", env.ns);
    let built = format!("{}-built", env.ns);
    let off = format!("{}-off", env.ns);

    // A namespace that exists before, with a label of its own.
    let existing = Namespace {
        metadata: ObjectMeta {
            name: Some(pre.clone()),
            labels: Some([("keep".to_string(), "yes".to_string())].into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    namespaces
        .create(&PostParams::default(), &existing)
        .await
        .unwrap();

    // The build of `built` holds its Namespace.
    env.repo
        .write(
            "built/kustomization.yaml",
            &argo_kustomization(&["ns.yaml", "cm.yaml"]),
        )
        .unwrap();
    env.repo
        .write(
            "built/ns.yaml",
            &format!(
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {built}\n  labels:\n    from-build: \"yes\"\n"
            ),
        )
        .unwrap();
    env.repo
        .write("built/cm.yaml", &ks_env::cm("b", &[("k", "v")]))
        .unwrap();
    let rev = env.push("a Namespace in the build").await;

    let metadata = json!({"labels": {"team": "a"}, "annotations": {"owner": "x"}});
    for (name, path, target) in [
        ("made", "./app", &made),
        ("pre", "./app", &pre),
        ("built", "./built", &built),
    ] {
        env.create_ks(
            name,
            path,
            json!({"targetNamespace": target}),
            options(metadata.clone()),
        )
        .await;
    }
    // The switch off: the same options, no opt-in.
    let mut not_opted = options(metadata.clone());
    not_opted
        .as_object_mut()
        .unwrap()
        .remove("rflux.dev/argo-semantics");
    env.create_ks("off", "./app", json!({"targetNamespace": off}), not_opted)
        .await;

    for name in ["made", "pre", "built"] {
        let r = rev.clone();
        let k = env.wait_ks(name, "Ready", move |k| ready_at(k, &r)).await;
        println!("{name}: {}", ready_message(&k));
    }
    let creator = format!("{}/made", env.ns);

    // Created, with the metadata and our mark; the ConfigMap went into it.
    let (labels, annotations) = live(&namespaces, &made).await.expect("made exists");
    assert_eq!(labels["team"], json!("a"), "{labels}");
    assert_eq!(annotations["owner"], json!("x"), "{annotations}");
    assert_eq!(annotations[CREATED_BY], json!(creator), "{annotations}");
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &made);
    assert!(cms.get_opt("a").await.unwrap().is_some());
    let k = env.ks.get("made").await.unwrap();
    let inventory = k.status.unwrap().inventory.unwrap().entries;
    assert!(
        inventory.iter().all(|e| !e.id.ends_with("_Namespace")),
        "the created namespace is in the inventory: {inventory:?}"
    );

    // The pre-existing one is left alone.
    let (labels, annotations) = live(&namespaces, &pre).await.expect("pre exists");
    assert_eq!(labels.get("team"), None, "{labels}");
    assert_eq!(labels["keep"], json!("yes"));
    assert_eq!(annotations.get(CREATED_BY), None, "{annotations}");
    assert_eq!(annotations.get("owner"), None, "{annotations}");

    // The build's Namespace wins: its labels, not the metadata, no mark; in the inventory.
    let (labels, annotations) = live(&namespaces, &built).await.expect("built exists");
    assert_eq!(labels["from-build"], json!("yes"), "{labels}");
    assert_eq!(labels.get("team"), None, "{labels}");
    assert_eq!(annotations.get(CREATED_BY), None, "{annotations}");
    let k = env.ks.get("built").await.unwrap();
    let inventory = k.status.unwrap().inventory.unwrap().entries;
    assert!(
        inventory
            .iter()
            .any(|e| e.id == format!("_{built}__Namespace")),
        "the build's Namespace is not in the inventory: {inventory:?}"
    );

    // Switched off: not created; the apply fails as Flux's does.
    let needle = format!("namespaces \"{off}\" not found");
    let k = env
        .wait_ks("off", "failed on the missing namespace", |k| {
            failed_with(k, "ReconciliationFailed", &[needle.as_str()])
        })
        .await;
    println!("off: {}", ready_message(&k));
    assert!(namespaces.get_opt(&off).await.unwrap().is_none());

    // A reconcile with the same metadata does not write to the namespace.
    let version = |ns: Namespace| ns.metadata.resource_version.unwrap_or_default();
    let before = version(namespaces.get(&made).await.unwrap());
    env.request("made", json!({})).await;
    let asked = env
        .ks
        .get("made")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap()["reconcile.fluxcd.io/requestedAt"]
        .clone();
    env.wait_ks("made", "the requested reconcile", move |k| {
        ready_at(k, &rev)
            && k.status
                .as_ref()
                .and_then(|s| s.last_handled_reconcile_at.as_deref())
                == Some(asked.as_str())
    })
    .await;
    let after = version(namespaces.get(&made).await.unwrap());
    assert_eq!(before, after, "a no-op reconcile wrote to the namespace");

    // A new metadata follows onto the namespace we created: changed value, dropped key.
    env.request(
        "made",
        json!({"rflux.dev/argo-managed-namespace-metadata":
               json!({"labels": {"team": "b"}}).to_string()}),
    )
    .await;
    wait_ns(&env, &namespaces, &made, "the new metadata", |l| {
        l.as_ref().is_some_and(|(labels, annotations)| {
            labels["team"] == json!("b")
                && annotations.get("owner").is_none()
                && annotations[CREATED_BY] == json!(creator)
        })
    })
    .await;

    // Deleted with prune: ours goes, the pre-existing one stays.
    env.delete_ks("made").await;
    wait_ns(&env, &namespaces, &made, "made deleted", Option::is_none).await;
    env.delete_ks("pre").await;
    let (labels, _) = live(&namespaces, &pre)
        .await
        .expect("the pre-existing namespace was deleted");
    assert_eq!(labels["keep"], json!("yes"));

    env.delete_ks("built").await;
    env.delete_ks("off").await;
    for name in [&pre, &built] {
        let _ = namespaces.delete(name, &DeleteParams::default()).await;
    }
}
