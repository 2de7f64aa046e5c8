//! The ResourceSet controller on the real control plane (issue 19), with resourceset-controller
//! running as a process (`support::rsctl`):
//! - Static providers picked by a label selector feed a `resourcesTemplate`; the objects are
//!   applied by server-side apply as `flux-operator` with the owner labels and
//!   `commonMetadata`; status has the inventory, `lastAppliedRevision` and the history;
//! - a provider deleted → its object is garbage-collected (the provider watch reconciles the
//!   ResourceSet), with an `ApplySucceeded` event naming the deletion;
//! - `dependsOn` with `readyExpr` holds the ResourceSet (`DependencyNotReady`) until it holds;
//! - `serviceAccountName` is impersonated: without RBAC the apply is forbidden;
//! - steps: the second step is applied only after the first one's Job is Complete;
//! - `reconcile: disabled` stops reconciling (Warning event); deletion removes what it applied.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Event, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use rflux_common::api::resourceset::ResourceSet;
use rflux_common::api::resourcesetinputprovider::ResourceSetInputProvider;
use rflux_e2e::ControlPlane;
use serde_json::{Value, json};
use support::lock_crds_and_install;
use support::procs::wait_for;
use support::rsctl::ResourceSetController;

const WAIT: Duration = Duration::from_secs(60);

fn ready(rs: &ResourceSet) -> Option<(String, String, String)> {
    rs.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn wait_rs(
    api: &Api<ResourceSet>,
    name: &str,
    what: &str,
    rsc: &mut ResourceSetController,
    ok: impl Fn(&ResourceSet) -> bool,
) -> ResourceSet {
    let res = wait_for(WAIT, &format!("{name}: {what}"), || async {
        rsc.check_alive()?;
        let o = api.get(name).await?;
        Ok(ok(&o).then_some(o))
    })
    .await;
    match res {
        Ok(o) => o,
        Err(e) => panic!(
            "{e:#}\nlast: {:?}\ncontroller log:\n{}",
            api.get(name).await.ok().and_then(|o| ready(&o)),
            rsc.log_tail(60)
        ),
    }
}

fn is(status: &str, reason: &str) -> impl Fn(&ResourceSet) -> bool {
    let (status, reason) = (status.to_string(), reason.to_string());
    move |o| ready(o).is_some_and(|(s, r, _)| s == status && r == reason)
}

async fn events(client: &kube::Client, ns: &str, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
}

fn provider(name: &str, labels: &Value, tenant: &str) -> ResourceSetInputProvider {
    let mut labels = labels.clone();
    labels["fleet"] = json!("demo");
    serde_json::from_value(json!({
        "apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSetInputProvider",
        "metadata": {"name": name, "labels": labels},
        "spec": {"type": "Static", "defaultValues": {"tenant": tenant}}
    }))
    .unwrap()
}

fn rset(name: &str, labels: &Value, spec: Value) -> ResourceSet {
    serde_json::from_value(json!({
        "apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
        "metadata": {"name": name, "labels": labels},
        "spec": spec
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resourceset_lifecycle() {
    let cp = ControlPlane::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    let _crd_lock = lock_crds_and_install(&client).await;
    let ns = cp.create_namespace("rset").await.unwrap();
    let mut rsc = ResourceSetController::start(cp, &ns, &ns, &["--requeue-dependency=1s"]).unwrap();
    let labels = rsc.labels();
    let rsips: Api<ResourceSetInputProvider> = Api::namespaced(client.clone(), &ns);
    let rss: Api<ResourceSet> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let pp = PostParams::default();
    for (n, t) in [("p-a", "a"), ("p-b", "b")] {
        rsips.create(&pp, &provider(n, &labels, t)).await.unwrap();
    }
    let template = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-<< inputs.tenant >>\n  namespace: {ns}\ndata:\n  id: << inputs.id | quote >>\n  provider: << inputs.provider.name >>\n"
    );
    rss.create(
        &pp,
        &rset(
            "apps",
            &labels,
            json!({
                "commonMetadata": {"labels": {"team": "x"}},
                "inputsFrom": [{"selector": {"matchLabels": {"fleet": "demo"}}}],
                "resourcesTemplate": template
            }),
        ),
    )
    .await
    .unwrap();
    let rs = wait_rs(
        &rss,
        "apps",
        "Ready",
        &mut rsc,
        is("True", "ReconciliationSucceeded"),
    )
    .await;
    let (_, _, msg) = ready(&rs).unwrap();
    assert!(msg.starts_with("Reconciliation finished in "), "{msg}");
    let status = rs.status.clone().unwrap();
    let ids: Vec<String> = status
        .inventory
        .as_ref()
        .unwrap()
        .entries
        .iter()
        .map(|e| e.id.clone())
        .collect();
    assert_eq!(
        ids,
        [
            format!("{ns}_cm-a__ConfigMap"),
            format!("{ns}_cm-b__ConfigMap")
        ]
    );
    assert!(
        status
            .last_applied_revision
            .as_deref()
            .unwrap()
            .starts_with("sha256:")
    );
    let h = &status.history.as_ref().unwrap()[0];
    assert_eq!(h.last_reconciled_status, "ReconciliationSucceeded");
    assert_eq!(h.metadata.as_ref().unwrap()["inputs"], "2");
    assert_eq!(h.metadata.as_ref().unwrap()["resources"], "2");
    let p_a = rsips.get("p-a").await.unwrap();
    let cm = cms.get("cm-a").await.unwrap();
    let l = cm.metadata.labels.clone().unwrap();
    assert_eq!(l["resourceset.fluxcd.controlplane.io/name"], "apps");
    assert_eq!(l["resourceset.fluxcd.controlplane.io/namespace"], ns);
    assert_eq!(l["team"], "x");
    let data = cm.data.clone().unwrap();
    assert_eq!(data["provider"], "p-a");
    // The Static provider's id is the Adler-32 of its uid (computed by the RSIP controller).
    let exported = p_a
        .status
        .as_ref()
        .unwrap()
        .exported_inputs
        .clone()
        .unwrap();
    assert_eq!(json!(data["id"]), exported[0]["id"]);
    let managers: Vec<(String, String)> = cm
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("flux-operator".into(), "Apply".into())),
        "{managers:?}"
    );

    // A provider removed: its ConfigMap is garbage-collected.
    rsips.delete("p-b", &DeleteParams::default()).await.unwrap();
    wait_for(WAIT, "cm-b pruned", || async {
        Ok(cms.get_opt("cm-b").await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", rsc.log_tail(60)));
    let rs = wait_rs(&rss, "apps", "inventory without cm-b", &mut rsc, |o| {
        o.status
            .as_ref()
            .and_then(|s| s.inventory.as_ref())
            .is_some_and(|i| i.entries.len() == 1)
    })
    .await;
    assert_eq!(
        rs.status.unwrap().inventory.unwrap().entries[0].id,
        format!("{ns}_cm-a__ConfigMap")
    );
    let evs = events(&client, &ns, "apps").await;
    assert!(
        evs.iter()
            .any(|e| e.reason.as_deref() == Some("ApplySucceeded")
                && e.message
                    .as_deref()
                    .unwrap_or("")
                    .contains(&format!("ConfigMap/{ns}/cm-b deleted"))),
        "{:?}",
        evs.iter()
            .map(|e| (&e.reason, &e.message))
            .collect::<Vec<_>>()
    );
    assert!(
        evs.iter()
            .all(|e| e.reporting_component.as_deref() == Some("flux-operator"))
    );

    // dependsOn with readyExpr.
    rss.create(
        &pp,
        &rset(
            "gated",
            &labels,
            json!({
                "dependsOn": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gate",
                               "namespace": ns, "ready": true, "readyExpr": "data.open == 'yes'"}],
                "resources": [{"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "after-gate", "namespace": ns}}]
            }),
        ),
    )
    .await
    .unwrap();
    let rs = wait_rs(
        &rss,
        "gated",
        "DependencyNotReady",
        &mut rsc,
        is("False", "DependencyNotReady"),
    )
    .await;
    let (_, _, msg) = ready(&rs).unwrap();
    assert!(
        msg.starts_with("Retrying dependency check: dependency v1/ConfigMap/")
            && msg.contains("not found"),
        "{msg}"
    );
    let gate: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "gate"}, "data": {"open": "no"}}))
            .unwrap();
    cms.create(&pp, &gate).await.unwrap();
    let rs = wait_rs(&rss, "gated", "not ready", &mut rsc, |o| {
        ready(o).is_some_and(|(_, _, m)| m.ends_with("is not ready"))
    })
    .await;
    assert_eq!(ready(&rs).unwrap().1, "DependencyNotReady");
    assert!(cms.get_opt("after-gate").await.unwrap().is_none());
    cms.patch(
        "gate",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"open": "yes"}})),
    )
    .await
    .unwrap();
    wait_rs(
        &rss,
        "gated",
        "Ready",
        &mut rsc,
        is("True", "ReconciliationSucceeded"),
    )
    .await;
    assert!(cms.get_opt("after-gate").await.unwrap().is_some());

    // Impersonation: a service account without RBAC may not apply.
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "nobody"}})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create(&pp, &sa)
        .await
        .unwrap();
    rss.create(
        &pp,
        &rset(
            "denied",
            &labels,
            json!({"serviceAccountName": "nobody",
                   "resources": [{"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "denied", "namespace": ns}}]}),
        ),
    )
    .await
    .unwrap();
    let rs = wait_rs(
        &rss,
        "denied",
        "ReconciliationFailed",
        &mut rsc,
        is("False", "ReconciliationFailed"),
    )
    .await;
    let (_, _, msg) = ready(&rs).unwrap();
    assert!(msg.starts_with("reconciliation failed: "), "{msg}");
    assert!(
        msg.contains(&format!("system:serviceaccount:{ns}:nobody")) && msg.contains("forbidden"),
        "{msg}"
    );
    assert!(cms.get_opt("denied").await.unwrap().is_none());

    // Disabled: a Warning event and no more reconciles; then deletion prunes what was applied.
    rss.patch(
        "apps",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"fluxcd.controlplane.io/reconcile": "disabled"}}}),
        ),
    )
    .await
    .unwrap();
    wait_for(WAIT, "ReconciliationDisabled event", || async {
        Ok(events(&client, &ns, "apps")
            .await
            .iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("ReconciliationDisabled")
            })
            .then_some(()))
    })
    .await
    .unwrap();
    rss.patch(
        "apps",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"fluxcd.controlplane.io/reconcile": "enabled"}}}),
        ),
    )
    .await
    .unwrap();
    rss.delete("apps", &DeleteParams::default()).await.unwrap();
    wait_for(WAIT, "apps deleted with its objects", || async {
        Ok(
            (rss.get_opt("apps").await?.is_none() && cms.get_opt("cm-a").await?.is_none())
                .then_some(()),
        )
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", rsc.log_tail(60)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_apply_in_order_after_each_step_is_healthy() {
    let cp = ControlPlane::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    let _crd_lock = lock_crds_and_install(&client).await;
    let ns = cp.create_namespace("rsteps").await.unwrap();
    let mut rsc = ResourceSetController::start(cp, &ns, &ns, &[]).unwrap();
    let labels = rsc.labels();
    let rss: Api<ResourceSet> = Api::namespaced(client.clone(), &ns);
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "db-migration", "namespace": ns},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "m", "image": "ghcr.io/org/my-app:<< inputs.version >>"}]}}}});
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "app-config", "namespace": ns}, "data": {"v": "<< inputs.version >>"}});
    rss.create(
        &PostParams::default(),
        &rset(
            "app",
            &labels,
            json!({"inputs": [{"version": "v1.0.0"}], "wait": true,
                   "steps": [{"name": "db-migration", "timeout": "1m", "resources": [job]},
                             {"name": "app-deploy", "resources": [cm]}]}),
        ),
    )
    .await
    .unwrap();
    let rs = wait_rs(
        &rss,
        "app",
        "Ready",
        &mut rsc,
        is("True", "ReconciliationSucceeded"),
    )
    .await;
    let j = Api::<Job>::namespaced(client.clone(), &ns)
        .get("db-migration")
        .await
        .unwrap();
    let done = j
        .status
        .as_ref()
        .and_then(|s| s.completion_time.clone())
        .expect("the Job of the first step completed");
    let c = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("app-config")
        .await
        .unwrap();
    let created = c.metadata.creation_timestamp.clone().unwrap();
    println!("job completed {:?}, config created {:?}", done.0, created.0);
    assert!(
        done.0 <= created.0,
        "the second step was applied before the first was healthy"
    );
    assert_eq!(c.data.unwrap()["v"], "v1.0.0");
    let h = rs.status.unwrap().history.unwrap();
    assert_eq!(h[0].metadata.as_ref().unwrap()["steps"], "2");
}

/// `copyFrom`, `convertKubeConfigFrom` and `checksumFrom` read the cluster with the
/// ResourceSet's client (§7.1): the copied data, the kubeconfig's server and CA, and the
/// checksum (its input spelled out here), with the external reference in the status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_convert_and_checksum_read_the_cluster() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let cp = ControlPlane::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    let _crd_lock = lock_crds_and_install(&client).await;
    let ns = cp.create_namespace("rsrc").await.unwrap();
    let mut rsc = ResourceSetController::start(cp, &ns, &ns, &[]).unwrap();
    let labels = rsc.labels();
    let rss: Api<ResourceSet> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let pp = PostParams::default();
    let src: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "src", "labels": {"reconcile.fluxcd.io/watch": "Enabled"}},
        "data": {"a": "1", "b": "2"}
    }))
    .unwrap();
    cms.create(&pp, &src).await.unwrap();
    let ca_pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: spoke\n  cluster:\n    server: https://spoke.example:6443\n    certificate-authority-data: {}\n",
        b64.encode(ca_pem)
    );
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(
        json!({"metadata": {"name": "kc"}, "stringData": {"value": kubeconfig}}),
    )
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns)
        .create(&pp, &secret)
        .await
        .unwrap();
    let ann = |k: &str, v: String| json!({ k: v });
    rss.create(
        &pp,
        &rset(
            "sources",
            &labels,
            json!({"resources": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "copied", "namespace": ns,
                  "annotations": ann("fluxcd.controlplane.io/copyFrom", format!("{ns}/src"))}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info", "namespace": ns,
                  "annotations": ann("fluxcd.controlplane.io/convertKubeConfigFrom", format!("{ns}/kc"))}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "summed", "namespace": ns,
                  "annotations": ann("fluxcd.controlplane.io/checksumFrom", format!("ConfigMap/{ns}/src"))}}
            ]}),
        ),
    )
    .await
    .unwrap();
    let rs = wait_rs(
        &rss,
        "sources",
        "Ready",
        &mut rsc,
        is("True", "ReconciliationSucceeded"),
    )
    .await;
    assert_eq!(
        cms.get("copied").await.unwrap().data.unwrap(),
        [
            ("a".to_string(), "1".to_string()),
            ("b".to_string(), "2".to_string())
        ]
        .into()
    );
    let info = cms.get("cluster-info").await.unwrap().data.unwrap();
    assert_eq!(info["address"], "https://spoke.example:6443");
    assert_eq!(info["ca.crt"], ca_pem);
    let summed = cms.get("summed").await.unwrap();
    let sum = summed.metadata.annotations.unwrap()["fluxcd.controlplane.io/checksum"].clone();
    use sha2::Digest as _;
    let input = format!("ConfigMap/{ns}/src\0a\x001\0b\x002\0");
    let want = format!(
        "sha256:{}",
        sha2::Sha256::digest(input.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    assert_eq!(sum, want);
    assert_eq!(
        rs.status.unwrap().external_checksum_refs,
        Some(vec![format!("ConfigMap/{ns}/src")])
    );

    // The labelled source changes: the ResourceSet (interval 1h) reconciles at once, the copy
    // and the checksum follow.
    cms.patch(
        "src",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "changed"}})),
    )
    .await
    .unwrap();
    let res = wait_for(WAIT, "the copy follows its labelled source", || async {
        let copied = cms.get("copied").await?.data.unwrap_or_default();
        let summed = cms.get("summed").await?;
        let sum2 =
            summed.metadata.annotations.unwrap_or_default()["fluxcd.controlplane.io/checksum"]
                .clone();
        Ok((copied.get("a").map(String::as_str) == Some("changed") && sum2 != sum).then_some(()))
    })
    .await;
    if let Err(e) = res {
        panic!("{e:#}\n{}", rsc.log_tail(40));
    }
}

/// `recreateOnFailure: enabled` on a Job: the failed Job is deleted before the next attempt and
/// created again (a new uid), as Flux Operator does; without the annotation it stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_jobs_are_recreated_when_asked() {
    let cp = ControlPlane::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    let _crd_lock = lock_crds_and_install(&client).await;
    let ns = cp.create_namespace("rsjob").await.unwrap();
    let mut rsc = ResourceSetController::start(cp, &ns, &ns, &[]).unwrap();
    let labels = rsc.labels();
    let rss: Api<ResourceSet> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    // kwok never schedules a Pod on a node that does not exist: the Job fails at its deadline.
    let job = |name: &str, recreate: bool| {
        let mut annotations = json!({});
        if recreate {
            annotations["fluxcd.controlplane.io/recreateOnFailure"] = json!("enabled");
        }
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "annotations": annotations},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 1, "template": {"spec": {
                "restartPolicy": "Never", "nodeSelector": {"no-such-node": "true"},
                "containers": [{"name": "m", "image": "busybox"}]}}}})
    };
    rss.create(
        &PostParams::default(),
        &rset(
            "jobs",
            &labels,
            json!({"wait": true, "resources": [job("again", true), job("once", false)]}),
        ),
    )
    .await
    .unwrap();
    type Seen = std::collections::BTreeMap<String, std::collections::BTreeSet<String>>;
    let uids = std::sync::Arc::new(std::sync::Mutex::new(Seen::new()));
    let res = wait_for(Duration::from_secs(90), "the failed Job recreated", || {
        let jobs = jobs.clone();
        let uids = uids.clone();
        async move {
            let items = jobs.list(&ListParams::default()).await?.items;
            let mut seen = uids.lock().unwrap();
            for j in items {
                seen.entry(j.metadata.name.clone().unwrap_or_default())
                    .or_default()
                    .insert(j.metadata.uid.clone().unwrap_or_default());
            }
            Ok(seen
                .get("again")
                .is_some_and(|u| u.len() >= 2)
                .then(|| seen.clone()))
        }
    })
    .await;
    let seen = match res {
        Ok(s) => s,
        Err(e) => panic!("{e:#}\n{:?}\n{}", uids.lock().unwrap(), rsc.log_tail(60)),
    };
    println!("job uids: {seen:?}");
    let once = jobs.get("once").await.unwrap();
    assert!(
        seen.get("once").is_some_and(|u| u.len() == 1),
        "the Job without the annotation was recreated: {seen:?}"
    );
    assert!(once.metadata.uid.is_some());
    // Each retry marks Ready Unknown while it runs: wait for the verdict of one.
    let rs = wait_rs(
        &rss,
        "jobs",
        "ReconciliationFailed",
        &mut rsc,
        is("False", "ReconciliationFailed"),
    )
    .await;
    let (_, _, msg) = ready(&rs).unwrap();
    assert!(msg.starts_with("reconciliation failed: "), "{msg}");
}
