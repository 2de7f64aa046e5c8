//! Helpers of `resourceset_operator_real.rs`: the operator process, CRDs, ResourceSets and
//! providers, waits, and the record of what the operator created.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Client, discovery};
use rflux_e2e::{ControlPlane, flux_operator, free_port, repo_root, state_root};
use serde_json::{Value, json};

/// The control plane instance of this test.
pub(crate) const INSTANCE: &str = "flux-operator";
/// Field manager of what the test itself applies.
pub(crate) const MANAGER: &str = "rflux-e2e";
/// Namespace the operator runs for (its entitlement Secret goes there).
pub(crate) const RUNTIME_NAMESPACE: &str = "flux-system";

pub(crate) fn case_dir(case: &str) -> PathBuf {
    repo_root().join("e2e/tests/data/resourceset").join(case)
}

/// The test's own state (operator log and storage, lock, records), next to the control plane
/// instance's directory, which `rflux-e2e down` removes.
pub(crate) fn work_dir() -> PathBuf {
    state_root().join("flux-operator-oracle")
}

pub(crate) fn record_dir() -> PathBuf {
    work_dir().join("records")
}

pub(crate) fn read_yaml(path: &Path) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The operator process; killed (by its pid) when dropped.
pub(crate) struct Operator {
    child: Child,
    log: PathBuf,
}

impl Operator {
    /// Starts the manager as §14 of the spec says and waits until `/readyz` answers 200.
    pub(crate) fn start(program: &Path, cp: &ControlPlane) -> Operator {
        use std::os::unix::process::CommandExt;
        let dir = work_dir();
        let storage = dir.join("storage");
        std::fs::create_dir_all(&storage).unwrap();
        let log = dir.join("manager.log");
        let out = std::fs::File::create(&log).unwrap();
        let health = format!("127.0.0.1:{}", free_port().unwrap());
        let metrics = format!("127.0.0.1:{}", free_port().unwrap());
        let child = Command::new(program)
            .arg("--enable-leader-election=false")
            .arg("--web-server-port=0")
            .arg(format!("--metrics-addr={metrics}"))
            .arg(format!("--health-addr={health}"))
            .arg(format!("--storage-path={}", storage.display()))
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env("RUNTIME_NAMESPACE", RUNTIME_NAMESPACE)
            .env("NOTIFICATIONS_DISABLED", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0)
            .spawn()
            .unwrap();
        let mut op = Operator { child, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = op.child.try_wait() {
                panic!("flux-operator exited with {status}:\n{}", op.log_tail(40));
            }
            if rflux_e2e::flux::http_status(&health, "/readyz").is_ok_and(|s| s == 200) {
                return op;
            }
            assert!(
                Instant::now() < deadline,
                "flux-operator not ready after 60 s:\n{}",
                op.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    pub(crate) fn log_tail(&self, lines: usize) -> String {
        rflux_e2e::process::log_tail(&self.log, lines)
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Server-side applies a CRD and waits until it is established.
pub(crate) async fn apply_crd(client: &Client, crd: &Value) {
    let crd: CustomResourceDefinition = serde_json::from_value(crd.clone()).unwrap();
    let name = crd.metadata.name.clone().unwrap();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap();
    wait_for(
        Duration::from_secs(30),
        &format!("CRD {name} established"),
        || {
            let api = api.clone();
            let name = name.clone();
            async move {
                let crd = api.get(&name).await.ok()?;
                let conditions = crd.status?.conditions?;
                conditions
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            }
        },
    )
    .await
    .unwrap();
}

/// Deletes the CRD `name` when present and waits until it is gone.
pub(crate) async fn delete_crd(client: &Client, name: &str) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    if api.get_opt(name).await.unwrap().is_none() {
        return;
    }
    let _ = api.delete(name, &DeleteParams::default()).await;
    wait_for(Duration::from_secs(60), &format!("CRD {name} gone"), || {
        let api = api.clone();
        let name = name.to_string();
        async move { api.get_opt(&name).await.ok()?.is_none().then_some(()) }
    })
    .await
    .unwrap();
}

/// A minimal HelmRelease CRD (any spec accepted): E1 generates HelmReleases, and Flux's
/// helm-controller CRD is not part of this repository.
pub(crate) fn helmrelease_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "helmreleases.helm.toolkit.fluxcd.io"},
        "spec": {
            "group": "helm.toolkit.fluxcd.io",
            "names": {"kind": "HelmRelease", "listKind": "HelmReleaseList",
                      "plural": "helmreleases", "singular": "helmrelease"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v2", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    })
}

pub(crate) fn rset_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("fluxcd.controlplane.io", "v1", "ResourceSet");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "resourcesets");
    Api::namespaced_with(client.clone(), namespace, &ar)
}

/// `(namespace, name)` of a manifest.
pub(crate) fn ns_name(obj: &Value) -> (String, String) {
    let get = |k: &str| obj["metadata"][k].as_str().unwrap_or_default().to_string();
    (get("namespace"), get("name"))
}

/// Server-side applies the case's `rset.yaml`; returns the ResourceSet's `(namespace, name)`.
pub(crate) async fn apply_rset(client: &Client, case: &str) -> (String, String) {
    let rset = read_yaml(&case_dir(case).join("rset.yaml"));
    let (ns, name) = ns_name(&rset);
    let obj: DynamicObject = serde_json::from_value(rset).unwrap();
    rset_api(client, &ns)
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap();
    (ns, name)
}

/// The `Ready` condition of an object's status.
pub(crate) fn ready(obj: &DynamicObject) -> Option<&Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// Polls `f` every 500 ms until it returns `Some`, or fails after `timeout`.
pub(crate) async fn wait_for<T, F, Fut>(
    timeout: Duration,
    what: &str,
    mut f: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits (up to 120 s) until the ResourceSet satisfies `pred`; panics with its status and the
/// operator's log otherwise.
pub(crate) async fn wait_rset(
    client: &Client,
    (ns, name): &(String, String),
    op: &Operator,
    what: &str,
    pred: impl Fn(&DynamicObject) -> bool,
) -> DynamicObject {
    let api = rset_api(client, ns);
    let pred = &pred;
    let res = wait_for(Duration::from_secs(120), what, || {
        let api = api.clone();
        async move {
            let obj = api.get(name).await.ok()?;
            pred(&obj).then_some(obj)
        }
    })
    .await;
    match res {
        Ok(obj) => obj,
        Err(e) => {
            let status = api.get(name).await.map(|o| o.data["status"].clone());
            panic!(
                "ResourceSet {ns}/{name}: {e}\nstatus: {status:?}\noperator log:\n{}",
                op.log_tail(40)
            )
        }
    }
}

/// Deletes a ResourceSet when present and waits until it is gone (its finalizer ran).
pub(crate) async fn delete_rset(client: &Client, (ns, name): &(String, String), op: &Operator) {
    let api = rset_api(client, ns);
    if api.get_opt(name).await.unwrap().is_none() {
        return;
    }
    api.delete(name, &DeleteParams::default()).await.unwrap();
    let gone = wait_for(Duration::from_secs(90), "ResourceSet deletion", || {
        let api = api.clone();
        async move { api.get_opt(name).await.ok()?.is_none().then_some(()) }
    })
    .await;
    if let Err(e) = gone {
        panic!("{ns}/{name}: {e}\noperator log:\n{}", op.log_tail(40));
    }
}

/// The live object for a manifest (looked up by its apiVersion/kind), if it exists.
pub(crate) async fn live(client: &Client, manifest: &Value) -> Option<DynamicObject> {
    let api_version = manifest["apiVersion"].as_str()?;
    let kind = manifest["kind"].as_str()?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = discovery::pinned_kind(client, &gvk).await.ok()?;
    let (ns, name) = ns_name(manifest);
    let api: Api<DynamicObject> = if caps.scope == discovery::Scope::Namespaced {
        Api::namespaced_with(client.clone(), &ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    api.get_opt(&name).await.ok()?
}

/// Whether every field of `sub` is in `sup` with the same value (objects compared key by key,
/// lists item by item with the same length, everything else by equality): the cluster may add
/// defaults.
pub(crate) fn contains(sup: &Value, sub: &Value) -> bool {
    match (sup, sub) {
        (Value::Object(a), Value::Object(b)) => b
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|x| contains(x, v))),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| contains(x, y))
        }
        _ => sup == sub,
    }
}

/// Checks that every object the CLI builds for `case` exists in the cluster with the CLI's
/// labels (owner labels, commonMetadata) and spec/data, leaving out the fields at the JSON
/// pointers `differ` (values the CLI computes differently, e.g. provider ids), except the
/// objects `skipped` (`Kind ns/name`), which the apply skips and which must not exist; returns
/// the record of what the operator created, which is also written to [`record_dir`].
pub(crate) async fn record_and_compare(
    client: &Client,
    case: &str,
    rset: &DynamicObject,
    differ: &[&str],
    skipped: &[&str],
) -> Value {
    let built = flux_operator::build_resourceset(&case_dir(case)).unwrap();
    let mut objects = Vec::new();
    for (i, manifest) in built.iter().enumerate() {
        // An object built twice (possible without input sets) is applied twice: the last wins.
        if built[i + 1..]
            .iter()
            .any(|o| inventory_id(o) == inventory_id(manifest))
        {
            continue;
        }
        let mut manifest = manifest.clone();
        for pointer in differ {
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            if let Some(Value::Object(map)) = manifest.pointer_mut(parent) {
                map.remove(key);
            }
        }
        let manifest = &manifest;
        let (ns, name) = ns_name(manifest);
        let kind = manifest["kind"].as_str().unwrap_or("?");
        let id = if ns.is_empty() {
            format!("{kind} {name}")
        } else {
            format!("{kind} {ns}/{name}")
        };
        if skipped.contains(&id.as_str()) {
            let obj = live(client, manifest).await;
            assert!(obj.is_none(), "{case}: {id} was applied, want it skipped");
            continue;
        }
        let obj = live(client, manifest)
            .await
            .unwrap_or_else(|| panic!("{case}: {id} was not created by the operator"));
        let obj = serde_json::to_value(&obj).unwrap();
        // The cluster may add labels of its own (`kubernetes.io/metadata.name` on Namespaces).
        assert!(
            contains(&obj["metadata"]["labels"], &manifest["metadata"]["labels"]),
            "{case}: labels of {id}: {} lack the CLI's {}",
            obj["metadata"]["labels"],
            manifest["metadata"]["labels"]
        );
        for field in ["spec", "data"] {
            if !manifest[field].is_null() {
                assert!(
                    contains(&obj[field], &manifest[field]),
                    "{case}: {id} {field} {} lacks the CLI's {}",
                    obj[field],
                    manifest[field]
                );
            }
        }
        objects.push(json!({
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "namespace": ns,
            "name": name,
            "labels": obj["metadata"]["labels"],
            "annotations": obj["metadata"]["annotations"],
        }));
    }
    let record = json!({
        "case": case,
        "operator": flux_operator::FLUX_OPERATOR_VERSION,
        "objects": objects,
        "status": rset.data["status"],
    });
    std::fs::create_dir_all(record_dir()).unwrap();
    let path = record_dir().join(format!("{case}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&record).unwrap()).unwrap();
    eprintln!("{case}: recorded {}", path.display());
    record
}

/// The inventory id of a manifest: `<namespace>_<name>_<group>_<kind>`.
pub(crate) fn inventory_id(manifest: &Value) -> String {
    let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    let (ns, name) = ns_name(manifest);
    let kind = manifest["kind"].as_str().unwrap_or_default();
    format!("{ns}_{name}_{group}_{kind}")
}

/// Inventory ids of a ResourceSet's status, in status order.
pub(crate) fn inventory(rset: &DynamicObject) -> Vec<String> {
    rset.data["status"]["inventory"]["entries"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter_map(|x| x["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) async fn ensure_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(name).await.unwrap().is_none() {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        api.create(&PostParams::default(), &ns).await.unwrap();
    }
}

/// Waits until namespace `name` is gone (an earlier run's GC may leave it terminating).
pub(crate) async fn wait_namespace_gone(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    wait_for(
        Duration::from_secs(90),
        &format!("namespace {name} gone"),
        || {
            let api = api.clone();
            async move { api.get_opt(name).await.ok()?.is_none().then_some(()) }
        },
    )
    .await
    .unwrap();
}

/// The ResourceSet's Ready condition has this status and reason.
pub(crate) fn is_status(
    status: &'static str,
    reason: &'static str,
) -> impl Fn(&DynamicObject) -> bool {
    move |obj| ready(obj).is_some_and(|c| c["status"] == status && c["reason"] == reason)
}

/// Takes the lock that keeps two of these tests (or test binaries) from running an operator on
/// the instance at once, and returns it with the instance's client and the started operator
/// (its four CRDs and runtime namespace installed first).
pub(crate) async fn start_operator(
    manager: PathBuf,
    crd_dir: &Path,
) -> (std::fs::File, Client, Operator) {
    let lock_path = work_dir().join("test.lock");
    let lock = tokio::task::spawn_blocking(move || rflux_e2e::lock_file(&lock_path))
        .await
        .unwrap()
        .unwrap();
    let cp = ControlPlane::shared_named(INSTANCE).await.unwrap();
    let client = cp.client().await.unwrap();
    let mut crd_files: Vec<PathBuf> = std::fs::read_dir(crd_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    crd_files.sort();
    assert_eq!(crd_files.len(), 4, "CRDs in {}", crd_dir.display());
    for file in &crd_files {
        apply_crd(&client, &read_yaml(file)).await;
    }
    ensure_namespace(&client, RUNTIME_NAMESPACE).await;
    let op = tokio::task::spawn_blocking({
        let cp = cp.clone();
        move || Operator::start(&manager, &cp)
    })
    .await
    .unwrap();
    (lock, client, op)
}

/// Installs the CRDs of the objects E1 and E7 generate: ours for OCIRepository
/// (`manifests/crds`) and [`helmrelease_crd`].
pub(crate) async fn install_flux_crds(client: &Client) {
    let oci_crd = repo_root().join("manifests/crds/ocirepositories.yaml");
    apply_crd(client, &read_yaml(&oci_crd)).await;
    apply_crd(client, &helmrelease_crd()).await;
}

pub(crate) fn rsip_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("fluxcd.controlplane.io", "v1", "ResourceSetInputProvider");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "resourcesetinputproviders");
    Api::namespaced_with(client.clone(), namespace, &ar)
}

/// Server-side applies every provider of the case's `rsip.yaml` and waits until each exported
/// its inputs; returns them as the operator left them.
pub(crate) async fn apply_rsips(client: &Client, case: &str, op: &Operator) -> Vec<DynamicObject> {
    let text = std::fs::read_to_string(case_dir(case).join("rsip.yaml")).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    // Like the CLI, a provider without a namespace goes to the ResourceSet's.
    let (rset_ns, _) = ns_name(&read_yaml(
        &case_dir(case).join("rsip.yaml").with_file_name("rset.yaml"),
    ));
    let mut out = Vec::new();
    for mut doc in docs.into_iter().filter(|d| !d.is_null()) {
        if doc["metadata"]["namespace"].is_null() {
            doc["metadata"]["namespace"] = json!(rset_ns);
        }
        let (ns, name) = ns_name(&doc);
        let api = rsip_api(client, &ns);
        let obj: DynamicObject = serde_json::from_value(doc).unwrap();
        api.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap();
        let res = wait_for(Duration::from_secs(60), "provider exports", || {
            let api = api.clone();
            let name = name.clone();
            async move {
                let obj = api.get(&name).await.ok()?;
                let ok = ready(&obj).is_some_and(|c| c["status"] == "True")
                    && obj.data["status"]["exportedInputs"].is_array();
                ok.then_some(obj)
            }
        })
        .await;
        match res {
            Ok(obj) => out.push(obj),
            Err(e) => panic!(
                "provider {ns}/{name}: {e}\noperator log:\n{}",
                op.log_tail(40)
            ),
        }
    }
    out
}

/// Adler-32 in decimal, the id flux-operator gives input sets.
pub(crate) fn adler32(text: &str) -> String {
    let (mut a, mut b) = (1u32, 0u32);
    for byte in text.bytes() {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    ((b << 16) | a).to_string()
}
