//! Our resourceset-controller side by side with the real flux-operator (issue 19).
//!
//! Both run on the `flux-operator` control plane, one after the other (the operator watches
//! every namespace, and the two share the `fluxcd.controlplane.io` CRDs, the operator's): first
//! the operator's manager reconciles every case of `tests/data/resourceset/` listed in
//! [`CASES`], then it is stopped and our controller (watching only what carries its label)
//! reconciles the same cases. Each ResourceSet and its providers are applied identically in both
//! phases (with our watch label, which the operator ignores); the providers are kept between the
//! phases, so their uid-based ids, hence every rendered object, are the same.
//!
//! For each case the test records ([`compare::Snapshot`]) the live objects (labels, annotations,
//! spec/data, field managers), the ResourceSet status (inventory in order, `lastAppliedRevision`,
//! conditions, history), the events, the providers' exports and what is left after the
//! ResourceSet is deleted, and compares the two. Differences must be the ones listed in
//! [`KNOWN`] (with their cause); anything else fails the test. The table and the records go to
//! `<e2e state>/flux-operator-oracle/side-by-side/`.
//!
//! Skips (printing why) when flux-operator or resourceset-controller is not built.
#![allow(clippy::unwrap_used)]

#[path = "resourceset_side_by_side/compare.rs"]
mod compare;
#[allow(dead_code)]
#[path = "resourceset_operator_real/support.rs"]
mod op;
mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use compare::{Snapshot, differences, message_shape, normalize_live, normalize_status};
use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Client, discovery};
use op::{
    INSTANCE, MANAGER, Operator, RUNTIME_NAMESPACE, apply_crd, case_dir, delete_crd,
    ensure_namespace, install_flux_crds, inventory_id, ns_name, read_yaml, ready, rset_api,
    rsip_api, wait_for, work_dir,
};
use rflux_e2e::{ControlPlane, flux_operator, repo_root};
use serde_json::{Value, json};
use support::procs::WATCH_LABEL;
use support::rsctl::ResourceSetController;

/// The value of our watch label on everything this test applies.
const LABEL: &str = "rset-side-by-side";

/// The cases, in the order both phases run them: E3, E1 (first without its CRDs, see [`WITHOUT_CRDS`]), E7, E8, then the
/// cases `resourceset_operator_real.rs` sweeps.
const CASES: &[&str] = &[
    "e3-exclusion",
    "e1-inline-inputs",
    "e7-static-selector",
    "e8-permute",
    "e2-dedup",
    "e4-resources-template",
    "e5a-toyaml-nindent",
    "e5c-slugify",
    "e6-multi-cluster",
    "steps-resources-beat-template",
    "exclusion-template",
    "noinputs-no-exclusion",
    "permute-three",
    "flatten-provider-order",
    "functions-mix",
    "dedup-across",
    "list-and-dropped",
    "static-selector-filters",
    "slugify-truncate",
    "yaml11-keys",
    "number-types",
    "toyaml-quoting",
    "default-empty",
    "permute-providers-only",
    "long-string-folding",
];

/// The case run first without the CRDs of what it generates (the apply fails), which are then
/// installed (a retry succeeds): the history holds the failure and the success.
const WITHOUT_CRDS: &str = "e1-inline-inputs";

/// Differences we know of: `(case or "*", prefix of the difference line, cause)`.
const KNOWN: &[(&str, &str, &str)] = &[(
    "noinputs-no-exclusion",
    "status: /inventory/entries",
    "flux-operator adds one inventory entry per applied change-set entry, so an object built \
         twice (input-less `resources[]` are not de-duplicated) is listed twice; ours lists each \
         object once (rflux_ssa::inventory_of)",
)];

/// Which controller a phase runs.
enum Runner {
    Operator(Operator),
    Ours(ResourceSetController),
}

impl Runner {
    fn name(&self) -> &'static str {
        match self {
            Runner::Operator(_) => "flux-operator",
            Runner::Ours(_) => "resourceset-controller",
        }
    }

    fn log_tail(&self) -> String {
        match self {
            Runner::Operator(o) => o.log_tail(40),
            Runner::Ours(o) => o.log_tail(40),
        }
    }

    fn check_alive(&self) -> Result<(), String> {
        match self {
            Runner::Operator(_) => Ok(()),
            Runner::Ours(o) => o.check_alive().map_err(|e| format!("{e:#}")),
        }
    }
}

/// Our binary, next to the test binary's `deps/` directory.
fn our_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    let dir = if dir.ends_with("deps") {
        dir.parent().unwrap()
    } else {
        dir
    };
    dir.join("resourceset-controller")
}

/// The document with our watch label (and, for providers, a reconcile request `token`).
fn labelled(mut doc: Value, token: Option<&str>) -> Value {
    doc["metadata"]["labels"][WATCH_LABEL] = json!(LABEL);
    if let Some(t) = token {
        doc["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"] = json!(t);
    }
    doc
}

async fn apply_dynamic(api: &Api<DynamicObject>, doc: Value) {
    let (_, name) = ns_name(&doc);
    let obj: DynamicObject = serde_json::from_value(doc).unwrap();
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap();
}

/// Applies the case's providers with a fresh reconcile request and waits until the running
/// controller handled it; returns `(name, exportedInputs, lastExportedRevision, Ready)`.
async fn apply_providers(client: &Client, case: &str, runner: &Runner) -> Vec<Value> {
    let path = case_dir(case).join("rsip.yaml");
    if !path.is_file() {
        return Vec::new();
    }
    let (rset_ns, _) = ns_name(&read_yaml(&case_dir(case).join("rset.yaml")));
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
    let token = rflux_e2e::unique_name("side-by-side");
    let mut out = Vec::new();
    for mut doc in docs.into_iter().filter(|d| !d.is_null()) {
        if doc["metadata"]["namespace"].is_null() {
            doc["metadata"]["namespace"] = json!(rset_ns);
        }
        let (ns, name) = ns_name(&doc);
        let api = rsip_api(client, &ns);
        apply_dynamic(&api, labelled(doc, Some(&token))).await;
        let handled = wait_for(Duration::from_secs(60), "provider reconcile", || {
            let (api, name, token) = (api.clone(), name.clone(), token.clone());
            async move {
                let o = api.get(&name).await.ok()?;
                let done = o.data["status"]["lastHandledReconcileAt"] == token.as_str()
                    && ready(&o).is_some_and(|c| c["status"] != "Unknown");
                done.then_some(o)
            }
        })
        .await;
        let p = handled.unwrap_or_else(|e| {
            panic!(
                "{}: provider {ns}/{name}: {e}\n{}",
                runner.name(),
                runner.log_tail()
            )
        });
        let r = ready(&p).cloned().unwrap_or_default();
        out.push(json!({
            "name": name,
            "exportedInputs": p.data["status"]["exportedInputs"],
            "lastExportedRevision": p.data["status"]["lastExportedRevision"],
            "ready": [r["status"], r["reason"],
                      message_shape(r["message"].as_str().unwrap_or_default())],
            "finalizers": p.metadata.finalizers,
        }));
    }
    out
}

/// `apiVersion` for an inventory id `<ns>_<name>_<group>_<kind>` and version.
fn api_version(id: &str, version: &str) -> String {
    let group = id.split('_').nth(2).unwrap_or_default();
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// The live object `id` (`apiVersion` given), when it exists and is not being deleted.
async fn live(client: &Client, id: &str, api_version: &str) -> Option<Value> {
    let parts: Vec<&str> = id.split('_').collect();
    let [ns, name, _, kind] = parts[..] else {
        return None;
    };
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps): (ApiResource, _) = discovery::pinned_kind(client, &gvk).await.ok()?;
    let api: Api<DynamicObject> = if caps.scope == discovery::Scope::Namespaced {
        Api::namespaced_with(client.clone(), ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let obj = api.get_opt(name).await.ok()??;
    if obj.metadata.deletion_timestamp.is_some() {
        return None;
    }
    Some(serde_json::to_value(obj).unwrap())
}

async fn wait_rset_gone(client: &Client, (ns, name): &(String, String), runner: &Runner) {
    let api = rset_api(client, ns);
    if api.get_opt(name).await.unwrap().is_none() {
        return;
    }
    api.delete(name, &Default::default()).await.unwrap();
    let gone = wait_for(Duration::from_secs(90), "ResourceSet deletion", || {
        let api = api.clone();
        async move { api.get_opt(name).await.ok()?.is_none().then_some(()) }
    })
    .await;
    if let Err(e) = gone {
        panic!("{}: {ns}/{name}: {e}\n{}", runner.name(), runner.log_tail());
    }
}

/// Runs one case with the running controller and records what it did.
async fn run_case(client: &Client, case: &str, runner: &Runner) -> Snapshot {
    let rset = read_yaml(&case_dir(case).join("rset.yaml"));
    let id = ns_name(&rset);
    let built = flux_operator::build_resourceset(&case_dir(case)).unwrap();
    // What an earlier run left, and the namespaces an earlier phase is still deleting.
    wait_rset_gone(client, &id, runner).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for m in built.iter().filter(|m| m["kind"] == "Namespace") {
        let name = ns_name(m).1;
        wait_for(Duration::from_secs(90), "namespace gone", || {
            let (api, name) = (namespaces.clone(), name.clone());
            async move { api.get_opt(&name).await.ok()?.is_none().then_some(()) }
        })
        .await
        .unwrap();
    }
    let providers = apply_providers(client, case, runner).await;
    let api = rset_api(client, &id.0);
    if case == WITHOUT_CRDS {
        delete_crd(client, "helmreleases.helm.toolkit.fluxcd.io").await;
        delete_crd(client, "ocirepositories.source.toolkit.fluxcd.io").await;
    }
    apply_dynamic(&api, labelled(rset, None)).await;
    let settled = |c: &Value| {
        c["status"] == "True"
            || ["ReconciliationFailed", "BuildFailed"]
                .contains(&c["reason"].as_str().unwrap_or_default())
    };
    let rs = if case == WITHOUT_CRDS {
        // It fails without the CRDs, then a retry applies it once they are back.
        settle(&api, &id.1, case, runner, |c| {
            c["reason"] == "ReconciliationFailed"
        })
        .await;
        install_flux_crds(client).await;
        settle(&api, &id.1, case, runner, |c| c["status"] == "True").await
    } else {
        settle(&api, &id.1, case, runner, settled).await
    };
    // Objects: what either the inventory or the CLI build names.
    let mut ids: BTreeMap<String, String> = built
        .iter()
        .map(|m| {
            (
                inventory_id(m),
                m["apiVersion"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for e in rs.data["status"]["inventory"]["entries"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let (i, v) = (e["id"].as_str().unwrap(), e["v"].as_str().unwrap());
        ids.insert(i.to_string(), api_version(i, v));
    }
    let mut objects = BTreeMap::new();
    for (i, v) in &ids {
        if let Some(o) = live(client, i, v).await {
            objects.insert(i.clone(), normalize_live(o));
        }
    }
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    let finalizers = json!(rs.metadata.finalizers);
    let status = normalize_status(&rs.data["status"]);
    // Deletion: what the ResourceSet created must go (Namespaces may stay terminating).
    wait_rset_gone(client, &id, runner).await;
    let created: Vec<(String, String)> = objects
        .keys()
        .map(|i| (i.clone(), ids[i].clone()))
        .collect();
    let left = wait_for(Duration::from_secs(60), "objects deleted", || {
        let created = created.clone();
        async move {
            let mut left = Vec::new();
            for (i, v) in &created {
                if live(client, i, v).await.is_some() {
                    left.push(i.clone());
                }
            }
            left.is_empty().then_some(left)
        }
    })
    .await;
    let mut left_after_delete = Vec::new();
    if left.is_err() {
        for (i, v) in &created {
            if live(client, i, v).await.is_some() {
                left_after_delete.push(i.clone());
            }
        }
    }
    let events = events_of(client, &id.0, &uid).await;
    Snapshot {
        status,
        finalizers,
        objects,
        events,
        left_after_delete,
        providers,
    }
}

/// Waits (up to 120 s) until the ResourceSet's Ready condition satisfies `pred`.
async fn settle(
    api: &Api<DynamicObject>,
    name: &str,
    case: &str,
    runner: &Runner,
    pred: impl Fn(&Value) -> bool,
) -> DynamicObject {
    let pred = &pred;
    let done = wait_for(Duration::from_secs(120), "Ready settled", || {
        let api = api.clone();
        async move {
            let o = api.get(name).await.ok()?;
            ready(&o).is_some_and(pred).then_some(o)
        }
    })
    .await;
    match done {
        // flux-operator patches the conditions and the rest of the status in separate requests:
        // wait until the object stays unchanged for 1.5 s (a failing one is retried with backoff).
        Ok(mut o) => {
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                let again = api.get(name).await.unwrap();
                if again.metadata.resource_version == o.metadata.resource_version {
                    break;
                }
                o = again;
            }
            o
        }
        Err(e) => {
            let alive = runner.check_alive();
            panic!(
                "{}: {case}: {e} ({alive:?})\nstatus: {:?}\n{}",
                runner.name(),
                api.get(name).await.map(|o| o.data["status"].clone()),
                runner.log_tail()
            )
        }
    }
}

/// The events about the ResourceSet with `uid`: `(type, reason, message shape, component)`.
async fn events_of(client: &Client, ns: &str, uid: &str) -> Vec<(String, String, String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
        .await
        .unwrap();
    let mut out: Vec<_> = list
        .items
        .iter()
        .map(|e| {
            (
                e.type_.clone().unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
                message_shape(e.message.as_deref().unwrap_or_default()),
                e.source
                    .as_ref()
                    .and_then(|s| s.component.clone())
                    .or_else(|| e.reporting_component.clone())
                    .unwrap_or_default(),
            )
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether a difference line of `case` is one of [`KNOWN`].
fn known(case: &str, line: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .find(|(c, prefix, _)| (*c == "*" || *c == case) && line.starts_with(prefix))
        .map(|(_, _, cause)| *cause)
}

/// One table row: what both agree on, and the differences.
fn row(case: &str, a: &Snapshot, b: &Snapshot, diffs: &[String]) -> String {
    let area = |name: &str| {
        let n = diffs
            .iter()
            .filter(|d| d.starts_with(&format!("{name}: ")))
            .count();
        if n == 0 {
            "=".to_string()
        } else {
            format!("≠{n}")
        }
    };
    let status_diff = |p: &str| {
        if diffs.iter().any(|d| d.starts_with(&format!("status: {p}"))) {
            "≠"
        } else {
            "="
        }
    };
    let ready = |s: &Snapshot| {
        s.status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .map(|c| {
                format!(
                    "{}/{}",
                    c["status"].as_str().unwrap_or("?"),
                    c["reason"].as_str().unwrap_or("?")
                )
            })
            .unwrap_or_default()
    };
    format!(
        "| {case} | {}/{} | {} | {} | {} | {} | {} | {} | {} | {} |",
        a.objects.len(),
        b.objects.len(),
        area("objects"),
        status_diff("/inventory"),
        status_diff("/lastAppliedRevision"),
        format_args!("{} {}", ready(a), status_diff("/conditions")),
        status_diff("/history"),
        area("events"),
        area("delete"),
        area("providers"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resourceset_controller_side_by_side_with_flux_operator() {
    let (Some(manager), Some(_), Some(crd_dir)) = (
        flux_operator::manager(),
        flux_operator::cli(),
        flux_operator::crd_dir(),
    ) else {
        eprintln!("skipping: flux-operator is not built (run e2e/flux-operator/build.sh)");
        return;
    };
    if !our_binary().is_file() {
        eprintln!(
            "skipping: {} is missing (cargo build -p resourceset-controller)",
            our_binary().display()
        );
        return;
    }
    // The lock `resourceset_operator_real.rs` takes: one operator on the instance at a time.
    let lock_path = work_dir().join("test.lock");
    let _lock = tokio::task::spawn_blocking(move || rflux_e2e::lock_file(&lock_path))
        .await
        .unwrap()
        .unwrap();
    let cp = ControlPlane::shared_named(INSTANCE).await.unwrap();
    let client = cp.client().await.unwrap();
    let mut crd_files: Vec<PathBuf> = std::fs::read_dir(&crd_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    crd_files.sort();
    for file in &crd_files {
        apply_crd(&client, &read_yaml(file)).await;
    }
    install_flux_crds(&client).await;
    for file in ["gitrepositories.yaml", "kustomizations.yaml"] {
        apply_crd(
            &client,
            &read_yaml(&repo_root().join("manifests/crds").join(file)),
        )
        .await;
    }
    for ns in [RUNTIME_NAMESPACE, "apps", "other"] {
        ensure_namespace(&client, ns).await;
    }

    let operator = tokio::task::spawn_blocking(move || Operator::start(&manager, cp))
        .await
        .unwrap();
    let runner = Runner::Operator(operator);
    let mut theirs = Vec::new();
    for case in CASES {
        theirs.push(run_case(&client, case, &runner).await);
        eprintln!("{}: {case} done", runner.name());
    }
    drop(runner);

    let ours = ResourceSetController::start(cp, LABEL, RUNTIME_NAMESPACE, &[]).unwrap();
    let runner = Runner::Ours(ours);
    let mut mine = Vec::new();
    for case in CASES {
        mine.push(run_case(&client, case, &runner).await);
        eprintln!("{}: {case} done", runner.name());
    }

    let out_dir = work_dir().join("side-by-side");
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut table = vec![
        "| case | objects op/ours | content | inventory | lastAppliedRevision | Ready (conditions) | history | events | deletion | providers |".to_string(),
        "|---|---|---|---|---|---|---|---|---|---|".to_string(),
    ];
    let mut unexpected = Vec::new();
    let mut explained = Vec::new();
    for ((case, a), b) in CASES.iter().zip(&theirs).zip(&mine) {
        let diffs = differences(a, b);
        table.push(row(case, a, b, &diffs));
        for d in &diffs {
            match known(case, d) {
                Some(cause) => explained.push(format!("{case}: {d} ({cause})")),
                None => unexpected.push(format!("{case}: {d}")),
            }
        }
        let record = json!({"case": case, "operator": a, "ours": b, "differences": diffs});
        std::fs::write(
            out_dir.join(format!("{case}.json")),
            serde_json::to_string_pretty(&record).unwrap(),
        )
        .unwrap();
    }
    let summary = format!(
        "{}\n\nknown differences:\n{}\n\nunexpected differences:\n{}\n",
        table.join("\n"),
        explained.join("\n"),
        unexpected.join("\n")
    );
    std::fs::write(out_dir.join("summary.md"), &summary).unwrap();
    eprintln!("{summary}");
    assert!(unexpected.is_empty(), "{}", unexpected.join("\n"));
}
