//! Interop with Flux's own controllers (source-controller v1.9.x and kustomize-controller v1.9.x,
//! built from the Go module proxy by e2e/flux/build.sh):
//! - our source-controller's artifacts consumed by Flux's kustomize-controller, and the reverse;
//! - the same Kustomization reconciled by Flux's controllers (one namespace) and by ours
//!   (another namespace, same git commit) leaves the same objects, inventory and status;
//! - migration: Flux reconciles, Flux stops, ours starts: nothing is recreated or pruned.
//!
//! Slow (Flux's binaries, several controller processes), so these run only with
//! `RFLUX_INTEROP=1` (`make interop`); otherwise each test prints a note and passes.
#![allow(clippy::unwrap_used)]

mod flux_common;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use flux_common::{
    Env, Impl, gunzip, http_get, interop_enabled as enabled, ready_status, wait_for,
};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::Api;
use rflux_common::api::kustomization::Kustomization;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const TIMEOUT: Duration = Duration::from_secs(180);

/// Keys whose values are times or server-assigned identities: dropped before comparing.
const VOLATILE: &[&str] = &[
    "lastTransitionTime",
    "lastUpdateTime",
    "firstReconciled",
    "lastReconciled",
    "lastReconciledDuration",
    "time",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "lastHandledReconcileAt",
];

/// `v` with the namespace name replaced by `NS`, `url` fields dropped and [`VOLATILE`] keys
/// removed, for comparing what two namespaces hold.
fn normalize(v: &Value, ns: &str) -> Value {
    match v {
        Value::String(s) => Value::String(s.replace(ns, "NS")),
        Value::Array(a) => Value::Array(a.iter().map(|x| normalize(x, ns)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !VOLATILE.contains(&k.as_str()) && k.as_str() != "url")
                .map(|(k, x)| (k.clone(), normalize(x, ns)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Paths (`a.b[0].c`) where `a` and `b` differ.
fn differences(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (x.get(k), y.get(k)) {
                    (Some(l), Some(r)) => differences(l, r, &p, out),
                    (l, r) => out.push(format!("{p}: flux={l:?} rflux={r:?}")),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (l, r)) in x.iter().zip(y).enumerate() {
                differences(l, r, &format!("{path}[{i}]"), out);
            }
        }
        (l, r) if l != r => out.push(format!("{path}: flux={l} rflux={r}")),
        _ => {}
    }
}

/// Kustomization status and the applied objects (labels, annotations, managed fields, data).
async fn snapshot(env: &Env, name: &str) -> Value {
    let ks = env.kustomizations().get(name).await.unwrap();
    let mut status = serde_json::to_value(ks.status.as_ref().unwrap()).unwrap();
    let cms: Api<ConfigMap> = env.configmaps();
    let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), &env.ns);
    let mut objects = BTreeMap::new();
    for cm in ["demo-a", "demo-b"] {
        let o = serde_json::to_value(cms.get(cm).await.unwrap()).unwrap();
        objects.insert(format!("ConfigMap/{cm}"), object_view(&o));
    }
    let o = serde_json::to_value(sas.get("demo").await.unwrap()).unwrap();
    objects.insert("ServiceAccount/demo".to_string(), object_view(&o));
    let gr = env.gitrepositories().get(name).await.unwrap();
    let mut gr_status = serde_json::to_value(gr.status.as_ref().unwrap()).unwrap();
    // gzip output differs between Go's compress/gzip and ours (docs/artifacts.md), so the
    // compressed digest and size differ; the tar stream inside must be byte-identical.
    let url = support::gitrepo_artifact(&gr).url.clone();
    let tar = tokio::task::spawn_blocking(move || gunzip(&http_get(&url).unwrap()).unwrap())
        .await
        .unwrap();
    let artifact = gr_status["artifact"].as_object_mut().unwrap();
    artifact.remove("digest");
    artifact.remove("size");
    artifact.insert(
        "tarSha256".into(),
        json!(format!("{:x}", Sha256::digest(&tar))),
    );
    // The history digest hashes the built YAML, which holds the namespace name: it cannot match
    // across namespaces (the migration test compares it in one namespace).
    // How many reconciles ran depends on timing (whether the first one found the artifact or
    // was requeued after --requeue-dependency), for either controller.
    for h in status["history"].as_array_mut().into_iter().flatten() {
        let h = h.as_object_mut().unwrap();
        h.remove("digest");
        h.remove("totalReconciliations");
    }
    let ks_meta = serde_json::to_value(&ks.metadata).unwrap();
    normalize(
        &json!({
            "kustomization": {"status": status, "finalizers": ks_meta["finalizers"]},
            "objects": objects,
            "gitrepository": {"status": gr_status, "finalizers": serde_json::to_value(&gr.metadata.finalizers).unwrap()},
        }),
        &env.ns,
    )
}

fn object_view(o: &Value) -> Value {
    let mf: Vec<Value> = o["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    json!({
        "labels": o["metadata"]["labels"],
        "annotations": o["metadata"]["annotations"],
        "managedFields": mf,
        "data": o["data"],
    })
}

/// One implementation's source-controller feeds the other's kustomize-controller: the first
/// commit is applied, then a new commit is packaged and applied.
async fn source_feeds_kustomize(ns_prefix: &str, source: Impl, kustomize: Impl) {
    let mut env = Env::new(ns_prefix, true).await;
    let _sc = env.start_source_controller(source);
    let _kc = env.start_kustomize_controller(kustomize);
    env.create_app("demo", "./deploy").await;
    let sha = env.repo.head().unwrap();
    let ks = env.wait_ks_applied("demo", &sha, TIMEOUT).await;
    assert_eq!(env.cm_value("demo-a").await.as_deref(), Some("one"));
    assert_eq!(ks.status.unwrap().inventory.unwrap().entries.len(), 3);

    // A new commit: the source-controller packages it, the other kustomize-controller applies it.
    let new_sha = env.push_value("two");
    env.request_source_reconcile("demo").await;
    env.wait_ks_applied("demo", &new_sha, TIMEOUT).await;
    assert_eq!(env.cm_value("demo-a").await.as_deref(), Some("two"));
}

#[tokio::test]
async fn our_artifacts_feed_fluxs_kustomize_controller() {
    if !enabled("our_artifacts_feed_fluxs_kustomize_controller") {
        return;
    }
    source_feeds_kustomize("interop-rs-fk", Impl::Rflux, Impl::Flux).await;
}

#[tokio::test]
async fn fluxs_artifacts_feed_our_kustomize_controller() {
    if !enabled("fluxs_artifacts_feed_our_kustomize_controller") {
        return;
    }
    source_feeds_kustomize("interop-fs-rk", Impl::Flux, Impl::Rflux).await;
}

#[tokio::test]
async fn flux_and_rflux_leave_the_same_state() {
    if !enabled("flux_and_rflux_leave_the_same_state") {
        return;
    }
    // Namespace A: Flux's controllers. Namespace B: ours, on the same git repository.
    let mut a = Env::new("interop-same-flux", true).await;
    let mut b = Env::new("interop-same-rflux", true).await;
    let procs = vec![
        a.start_source_controller(Impl::Flux),
        a.start_kustomize_controller(Impl::Flux),
        b.start_source_controller(Impl::Rflux),
        b.start_kustomize_controller(Impl::Rflux),
    ];
    let url = a.git.http_url(a.repo.name());
    a.create_app("demo", "./deploy").await;
    b.create_app_from("demo", "./deploy", &url).await;
    let sha = a.repo.head().unwrap();
    a.wait_ks_applied("demo", &sha, TIMEOUT).await;
    b.wait_ks_applied("demo", &sha, TIMEOUT).await;
    // Let both settle (Flux records its success event and history after the status).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let flux = snapshot(&a, "demo").await;
    let ours = snapshot(&b, "demo").await;
    eprintln!(
        "flux:  {}\nrflux: {}",
        serde_json::to_string_pretty(&flux).unwrap(),
        serde_json::to_string_pretty(&ours).unwrap()
    );
    let mut diffs = Vec::new();
    differences(&flux, &ours, "", &mut diffs);
    assert!(
        diffs.is_empty(),
        "state differs between Flux and rflux:\n{}",
        diffs.join("\n")
    );

    // A failure: the path disappears. Both keep the objects and report the same conditions.
    for env in [&a, &b] {
        env.patch_ks_spec("demo", json!({"path": "./does-not-exist"}))
            .await;
    }
    let mut failed = Vec::new();
    for env in [&a, &b] {
        let ks = wait_for(TIMEOUT, "Ready=False", || async {
            let ks = env.kustomizations().get("demo").await.ok()?;
            (ready_status(&ks).as_deref() == Some("False")).then_some(ks)
        })
        .await;
        failed.push(failure_view(&ks, &env.ns));
    }
    drop(procs);
    eprintln!(
        "failure flux:  {}\nfailure rflux: {}",
        serde_json::to_string_pretty(&failed[0]).unwrap(),
        serde_json::to_string_pretty(&failed[1]).unwrap()
    );
    let mut diffs = Vec::new();
    differences(&failed[0], &failed[1], "", &mut diffs);
    assert!(
        diffs.is_empty(),
        "failure status differs between Flux and rflux:\n{}",
        diffs.join("\n")
    );
}

/// Conditions (the temp dir in messages replaced by `TMP`), revisions and generation.
fn failure_view(ks: &Kustomization, ns: &str) -> Value {
    let st = ks.status.as_ref().unwrap();
    let conds: Vec<Value> = st
        .conditions
        .iter()
        .flatten()
        .map(|c| {
            let msg = match c.message.find("/does-not-exist") {
                Some(end) => {
                    let start = c.message[..end].rfind(' ').map_or(0, |i| i + 1);
                    format!("{}TMP{}", &c.message[..start], &c.message[end..])
                }
                None => c.message.clone(),
            };
            json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": msg,
                   "observedGeneration": c.observed_generation})
        })
        .collect();
    normalize(
        &json!({
            "conditions": conds,
            "observedGeneration": st.observed_generation,
            "lastAppliedRevision": st.last_applied_revision,
            "lastAttemptedRevision": st.last_attempted_revision,
            "inventory": st.inventory.as_ref().map(|i| i.entries.len()),
        }),
        ns,
    )
}

#[tokio::test]
async fn migration_from_flux_readopts_the_inventory() {
    if !enabled("migration_from_flux_readopts_the_inventory") {
        return;
    }
    let mut env = Env::new("interop-migrate", true).await;
    let mut flux_sc = env.start_source_controller(Impl::Flux);
    let mut flux_kc = env.start_kustomize_controller(Impl::Flux);
    env.create_app("demo", "./deploy").await;
    let sha = env.repo.head().unwrap();
    let before = env.wait_ks_applied("demo", &sha, TIMEOUT).await;
    let uids = object_uids(&env).await;
    assert!(
        flux_kc.stop(Duration::from_secs(20)),
        "Flux's kustomize-controller exits on SIGTERM"
    );
    assert!(
        flux_sc.stop(Duration::from_secs(20)),
        "Flux's source-controller exits on SIGTERM"
    );

    let _sc = env.start_source_controller(Impl::Rflux);
    let _kc = env.start_kustomize_controller(Impl::Rflux);
    // Our source-controller re-packages the same commit into its own storage.
    let url = wait_live_artifact(&env).await;
    eprintln!("our source-controller serves the artifact at {url}");
    let req = env.request_reconcile("demo").await;
    let after = wait_for(TIMEOUT, "our controller handles the request", || async {
        let ks = env.kustomizations().get("demo").await.ok()?;
        let st = ks.status.as_ref()?;
        (st.last_handled_reconcile_at.as_deref() == Some(req.as_str())
            && ready_status(&ks).as_deref() == Some("True"))
        .then_some(ks)
    })
    .await;
    let b = before.status.unwrap();
    let a = after.status.unwrap();
    assert_eq!(a.inventory, b.inventory, "inventory re-adopted as is");
    assert_eq!(a.last_applied_revision, b.last_applied_revision);
    // Same build, same digest: our reconcile continues Flux's history entry.
    let (hb, ha) = (b.history.unwrap(), a.history.unwrap());
    eprintln!("history before: {hb:?}\nhistory after: {ha:?}");
    assert_eq!(ha.len(), hb.len(), "no new history entry");
    assert_eq!(ha[0].digest, hb[0].digest);
    assert!(ha[0].total_reconciliations > hb[0].total_reconciliations);
    assert_eq!(
        object_uids(&env).await,
        uids,
        "no object was recreated or pruned"
    );

    // Ours now drives it: a new commit is applied, still without recreating anything.
    let new_sha = env.push_value("two");
    env.request_source_reconcile("demo").await;
    env.wait_ks_applied("demo", &new_sha, TIMEOUT).await;
    assert_eq!(env.cm_value("demo-a").await.as_deref(), Some("two"));
    assert_eq!(object_uids(&env).await, uids);
}

/// Waits until the GitRepository is Ready with an artifact URL that answers (Flux's storage
/// server is gone, so this is the artifact of our source-controller); returns the URL.
async fn wait_live_artifact(env: &Env) -> String {
    wait_for(
        TIMEOUT,
        "an artifact from our source-controller",
        || async {
            let gr = env.gitrepositories().get("demo").await.ok()?;
            let st = gr.status.as_ref()?;
            let ready = st
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let art = st.artifact.as_ref()?;
            // Our controller writes its own storage address; Flux's process is gone.
            (ready
                && rflux_e2e::flux::http_status(
                    art.url
                        .trim_start_matches("http://")
                        .split('/')
                        .next()
                        .unwrap_or(""),
                    "/",
                )
                .is_ok())
            .then(|| art.url.clone())
        },
    )
    .await
}

async fn object_uids(env: &Env) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for cm in ["demo-a", "demo-b"] {
        let o = env.configmaps().get(cm).await.unwrap();
        assert!(o.metadata.deletion_timestamp.is_none());
        out.insert(cm.to_string(), o.metadata.uid.unwrap());
    }
    let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), &env.ns);
    let o = sas.get("demo").await.unwrap();
    out.insert("sa".to_string(), o.metadata.uid.unwrap());
    let ks: Kustomization = env.kustomizations().get("demo").await.unwrap();
    out.insert("ks".to_string(), ks.metadata.uid.unwrap());
    out
}
