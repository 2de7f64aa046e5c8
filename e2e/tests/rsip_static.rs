//! ResourceSetInputProvider on the real control plane, with resourceset-controller running as a
//! process (`support::rsctl`):
//! - a Static provider becomes Ready with `exportedInputs` `[defaultValues + id]` (`id` the
//!   Adler-32 of its uid, computed here independently) and `lastExportedRevision` (sha256 of
//!   the YAML Flux Operator would write, spelled out here), a Normal event carrying the
//!   revision annotation, and `kubectl get rsip` prints its Ready and Status columns;
//! - a GitHubBranch provider is Stalled with a message naming the type;
//! - `fluxcd.controlplane.io/reconcile: disabled` freezes the exports (Warning event), and a
//!   provider created disabled is Ready `ReconciliationDisabled`;
//! - a schedule that does not match now skips with `SkippedDueToSchedule` and `nextSchedule`;
//! - deletion removes the finalizer.
#![allow(clippy::unwrap_used)]

mod support;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use rflux_e2e::ControlPlane;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use support::lock_crds_and_install;
use support::procs::wait_for;
use support::rsctl::ResourceSetController;

const WAIT: Duration = Duration::from_secs(60);

fn rsip_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("fluxcd.controlplane.io", "v1", "ResourceSetInputProvider");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "resourcesetinputproviders");
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Adler-32, written from RFC 1950 (independent of the controller's).
fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65_521;
        b = (b + a) % 65_521;
    }
    (b << 16) | a
}

fn ready(obj: &DynamicObject) -> Option<Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .cloned()
}

fn condition(obj: &DynamicObject, type_: &str) -> Option<Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

async fn wait_ready_reason(
    api: &Api<DynamicObject>,
    name: &str,
    status: &str,
    reason: &str,
    rsc: &ResourceSetController,
) -> DynamicObject {
    let what = format!("{name} Ready={status} {reason}");
    let res = wait_for(WAIT, &what, || async {
        rsc.check_alive()?;
        let o = api.get(name).await?;
        Ok(ready(&o)
            .is_some_and(|c| c["status"] == status && c["reason"] == reason)
            .then_some(o))
    })
    .await;
    match res {
        Ok(o) => o,
        Err(e) => panic!("{e:#}\ncontroller log:\n{}", rsc.log_tail(40)),
    }
}

async fn events_for(client: &kube::Client, ns: &str, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
}

async fn wait_event(
    client: &kube::Client,
    ns: &str,
    name: &str,
    type_: &str,
    reason: &str,
) -> Event {
    let what = format!("{type_} event {reason} on {name}");
    wait_for(WAIT, &what, || async {
        Ok(events_for(client, ns, name)
            .await
            .into_iter()
            .find(|e| e.type_.as_deref() == Some(type_) && e.reason.as_deref() == Some(reason)))
    })
    .await
    .unwrap()
}

async fn create(api: &Api<DynamicObject>, obj: Value) -> DynamicObject {
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap()
}

fn provider(name: &str, labels: &Value, spec: Value) -> Value {
    json!({
        "apiVersion": "fluxcd.controlplane.io/v1",
        "kind": "ResourceSetInputProvider",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsip_static_lifecycle() {
    let cp = ControlPlane::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    let _crd_lock = lock_crds_and_install(&client).await;
    let ns = cp.create_namespace("rsip").await.unwrap();
    let rsc = ResourceSetController::start(cp, &ns, &ns, &[]).unwrap();
    let labels = rsc.labels();
    let api = rsip_api(&client, &ns);

    // --- Static: Ready with defaults + id, revision, event, printer columns.
    create(
        &api,
        provider(
            "static",
            &labels,
            json!({"type": "Static", "defaultValues": {
                "env": "staging", "replicas": 2, "nested": {"a": [1, "x"]}
            }}),
        ),
    )
    .await;
    let obj = wait_ready_reason(&api, "static", "True", "ReconciliationSucceeded", &rsc).await;
    let uid = obj.metadata.uid.clone().unwrap();
    let id = adler32(uid.as_bytes()).to_string();
    assert_eq!(
        obj.data["status"]["exportedInputs"],
        json!([{"env": "staging", "replicas": 2, "nested": {"a": [1, "x"]}, "id": id}])
    );
    let yaml = format!(
        "- env: staging\n  id: \"{id}\"\n  nested:\n    a:\n    - 1\n    - x\n  replicas: 2\n"
    );
    let revision = format!(
        "sha256:{}",
        Sha256::digest(yaml.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    assert_eq!(obj.data["status"]["lastExportedRevision"], json!(revision));
    assert!(
        obj.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == "fluxcd.controlplane.io/finalizer"))
    );
    let msg = ready(&obj).unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.starts_with("Reconciliation finished in "), "{msg}");
    assert!(condition(&obj, "Reconciling").is_none());
    let ev = wait_event(&client, &ns, "static", "Normal", "ReconciliationSucceeded").await;
    let ann = ev.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(ann.get("fluxcd.controlplane.io/revision"), Some(&revision));
    assert!(
        ann.get("fluxcd.controlplane.io/token")
            .is_some_and(|t| t.starts_with("sha256:"))
    );
    assert_eq!(ev.reporting_component.as_deref(), Some("flux-operator"));
    assert!(
        ev.message
            .as_deref()
            .unwrap_or_default()
            .ends_with(&format!(", revision {revision}"))
    );

    if std::path::Path::new("/usr/bin/kubectl").exists() || which("kubectl") {
        let out = Command::new("kubectl")
            .args(["get", "rsip", "-n", &ns, "static"])
            .env("KUBECONFIG", cp.kubeconfig_path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["NAME", "AGE", "READY", "STATUS"], "{text}");
        let row = lines.next().unwrap();
        assert!(row.starts_with("static "), "{row}");
        assert!(
            row.contains(" True ") && row.contains("Reconciliation finished in"),
            "{row}"
        );
    } else {
        eprintln!("skipped the kubectl printer-column check: kubectl is not on PATH");
    }

    // --- GitHubBranch: stalled, the message names the type and why.
    create(
        &api,
        provider(
            "github",
            &labels,
            json!({"type": "GitHubBranch", "url": "https://github.com/org/repo"}),
        ),
    )
    .await;
    let gh = wait_ready_reason(&api, "github", "False", "ReconciliationFailed", &rsc).await;
    let stalled = condition(&gh, "Stalled").unwrap();
    assert_eq!(stalled["status"], "True");
    let m = stalled["message"].as_str().unwrap();
    assert!(
        m.contains("'GitHubBranch'") && m.contains("does not reach external services"),
        "{m}"
    );
    assert!(gh.data["status"]["exportedInputs"].is_null());
    wait_event(&client, &ns, "github", "Warning", "ReconciliationFailed").await;

    // --- Disabled: the exports stay as they were; a Warning event says so.
    api.patch(
        "static",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"fluxcd.controlplane.io/reconcile": "disabled"}}}),
        ),
    )
    .await
    .unwrap();
    wait_event(&client, &ns, "static", "Warning", "ReconciliationDisabled").await;
    api.patch(
        "static",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"defaultValues": {"env": "prod"}}})),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let frozen = api.get("static").await.unwrap();
    assert_eq!(
        frozen.data["status"]["lastExportedRevision"],
        json!(revision)
    );
    assert_eq!(frozen.data["status"]["exportedInputs"][0]["env"], "staging");
    // Enabled again: the new defaults are exported.
    api.patch(
        "static",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"fluxcd.controlplane.io/reconcile": "enabled"}}}),
        ),
    )
    .await
    .unwrap();
    wait_for(WAIT, "static exports env=prod", || async {
        let o = api.get("static").await?;
        Ok((o.data["status"]["exportedInputs"][0]["env"] == "prod").then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", rsc.log_tail(40)));

    let mut fresh = provider("created-disabled", &labels, json!({"type": "Static"}));
    fresh["metadata"]["annotations"] = json!({"fluxcd.controlplane.io/reconcile": "disabled"});
    create(&api, fresh).await;
    let d = wait_ready_reason(
        &api,
        "created-disabled",
        "True",
        "ReconciliationDisabled",
        &rsc,
    )
    .await;
    assert_eq!(
        ready(&d).unwrap()["message"],
        "Initialized with reconciliation suspended"
    );
    assert!(d.data["status"]["exportedInputs"].is_null());

    // --- A schedule that does not match now: skipped until its next trigger.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (hour, minute) = (((now / 3600) + 12) % 24, ((now / 60) + 30) % 60);
    let cron = format!("{minute} {hour} * * *");
    create(
        &api,
        provider(
            "scheduled",
            &labels,
            json!({"type": "Static", "schedule": [{"cron": cron, "window": "10m"}]}),
        ),
    )
    .await;
    let s = wait_ready_reason(&api, "scheduled", "True", "SkippedDueToSchedule", &rsc).await;
    let next = &s.data["status"]["nextSchedule"];
    assert_eq!(next["cron"], json!(cron));
    assert_eq!(next["timeZone"], "UTC");
    assert_eq!(next["window"], "10m");
    let when: Time = serde_json::from_value(next["when"].clone()).unwrap();
    let day = now - now % 86_400;
    let mut want = day + hour * 3600 + minute * 60;
    if want <= now {
        want += 86_400;
    }
    assert_eq!(u64::try_from(when.0.as_second()).unwrap(), want);
    let msg = ready(&s).unwrap()["message"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("Reconciliation skipped, next scheduled at "),
        "{msg}"
    );
    assert!(s.data["status"]["exportedInputs"].is_null());
    wait_event(&client, &ns, "scheduled", "Normal", "SkippedDueToSchedule").await;

    // --- Deletion releases the object.
    api.delete("static", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(WAIT, "static deleted", || async {
        Ok(api.get_opt("static").await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", rsc.log_tail(40)));

    rsc.check_alive().unwrap();
    drop(rsc);
    // Nothing reconciles the remaining finalizers now: remove them with the namespace.
    for name in ["github", "created-disabled", "scheduled"] {
        let _ = api
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
}

fn which(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(name).is_file()))
}
