//! CRD compatibility on a real API server: Flux's CRDs and ours (manifests/crds)
//! must accept, default and reject the same objects in the same way.
//!
//! One test function does everything, under the file lock `<e2e state>/crds.lock`
//! (other tests that need the Flux-kind CRDs stable can take the same lock):
//! 1. install Flux's CRDs (replacing whatever is installed), run the checks;
//! 2. check that ours can replace Flux's in place (dry-run update, the migration path);
//! 3. install ours, run the same checks; ours stay installed afterwards.
//!
//! The checks: every v1 GitRepository/Kustomization in Flux's samples and testdata is
//! created and read back, and must have lost no field; then a list of invalid (and a
//! few valid edge-case) objects is created in dry-run mode. Every outcome (the stored
//! spec and status including API-server defaults, or the rejection code and message)
//! must be identical under both CRD sets. Objects read back under our CRDs must also
//! survive a round trip through the Rust types unchanged.
//!
//! Skips (and passes) when `../shared` (Flux's CRDs and samples) is absent.
//!
//! The edge-case objects (and the `Kind`/`Case` types) are in `crd_compat_cases/mod.rs`.
#![allow(clippy::unwrap_used)]

mod crd_compat_cases;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use rflux_e2e::{ControlPlane, lock_file, state_root};
use serde_json::{Value, json};

use crd_compat_cases::{Case, Kind, edge_cases};

fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

fn shared_flux_dir() -> Option<PathBuf> {
    let dir = repo_root().join("../shared/reference/flux");
    dir.join("crds").is_dir().then_some(dir)
}

fn read_yaml_docs(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .map_err(|e| anyhow!("parsing {}: {e}", path.display()))?;
    Ok(docs.into_iter().filter(|d| d.is_object()).collect())
}
/// Every v1 GitRepository / Kustomization in Flux's samples and testdata.
fn flux_samples(flux_dir: &Path) -> anyhow::Result<Vec<Case>> {
    let mut files = Vec::new();
    for sub in ["samples", "testdata"] {
        collect_yaml(&flux_dir.join(sub), &mut files)?;
    }
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(flux_dir)
            .unwrap_or(&file)
            .display()
            .to_string();
        for mut doc in read_yaml_docs(&file)? {
            let Some(kind) = Kind::of(&doc) else { continue };
            let orig = doc["metadata"]["name"].as_str().unwrap_or("x").to_string();
            let name = format!("s{}-{orig}", out.len());
            let meta = doc
                .get_mut("metadata")
                .and_then(Value::as_object_mut)
                .ok_or_else(|| anyhow!("{rel}: object without metadata"))?;
            meta.insert("name".into(), json!(name));
            meta.remove("namespace");
            out.push(Case {
                name: format!("{rel}: {orig} ({name})"),
                kind,
                object: doc,
                expect_rejected: false,
            });
        }
    }
    Ok(out)
}

fn collect_yaml(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect_yaml(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
    Ok(())
}

/// What the API server did with an object.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Accepted { spec: Value, status: Value },
    Rejected { code: u16, message: String },
}

fn outcome_of(result: Result<DynamicObject, kube::Error>) -> anyhow::Result<Outcome> {
    match result {
        Ok(obj) => Ok(Outcome::Accepted {
            spec: obj.data.get("spec").cloned().unwrap_or(Value::Null),
            status: obj.data.get("status").cloned().unwrap_or(Value::Null),
        }),
        Err(kube::Error::Api(status)) => Ok(Outcome::Rejected {
            code: status.code,
            message: status.message,
        }),
        Err(e) => Err(anyhow!(e).context("unexpected client error")),
    }
}

/// Fields of `applied` that are absent or different in `read` (JSON paths).
fn lost_fields(path: &str, applied: &Value, read: &Value, out: &mut Vec<String>) {
    match (applied, read) {
        (Value::Object(a), Value::Object(r)) => {
            for (k, av) in a {
                match r.get(k) {
                    Some(rv) => lost_fields(&format!("{path}.{k}"), av, rv, out),
                    None => out.push(format!("{path}.{k} (was {av})")),
                }
            }
        }
        (Value::Array(a), Value::Array(r)) if a.len() == r.len() => {
            for (i, (av, rv)) in a.iter().zip(r).enumerate() {
                lost_fields(&format!("{path}[{i}]"), av, rv, out);
            }
        }
        (a, r) if a == r => {}
        (a, r) => out.push(format!("{path}: applied {a}, read back {r}")),
    }
}

struct RunResult {
    outcomes: BTreeMap<String, Outcome>,
    problems: Vec<String>,
}

/// Creates every sample (for real) and every edge case (dry run) in a fresh namespace.
async fn run_checks(
    cp: &ControlPlane,
    client: &Client,
    label: &str,
    samples: &[Case],
    cases: &[Case],
    check_rust_types: bool,
) -> anyhow::Result<RunResult> {
    let ns = cp.create_namespace(&format!("crd-{label}")).await?;
    let mut outcomes = BTreeMap::new();
    let mut problems = Vec::new();
    let api = |kind: Kind| {
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &kind.api_resource())
    };

    for s in samples {
        let obj: DynamicObject = serde_json::from_value(s.object.clone())?;
        let name = obj.metadata.name.clone().unwrap_or_default();
        let created = create_retrying(&api(s.kind), &PostParams::default(), &obj).await;
        if let Err(e) = &created {
            problems.push(format!("[{label}] sample {} rejected: {e}", s.name));
            outcomes.insert(s.name.clone(), outcome_of(created)?);
            continue;
        }
        let read = api(s.kind)
            .get(&name)
            .await
            .with_context(|| format!("reading back {}", s.name))?;
        let mut lost = Vec::new();
        let applied_spec = s.object.get("spec").cloned().unwrap_or(Value::Null);
        let read_spec = read.data.get("spec").cloned().unwrap_or(Value::Null);
        if !applied_spec.is_null() {
            lost_fields("spec", &applied_spec, &read_spec, &mut lost);
        }
        if !lost.is_empty() {
            problems.push(format!(
                "[{label}] sample {} lost fields: {}",
                s.name,
                lost.join(", ")
            ));
        }
        if check_rust_types && let Err(e) = rust_round_trip(s.kind, &read) {
            problems.push(format!("[{label}] sample {}: {e}", s.name));
        }
        outcomes.insert(s.name.clone(), outcome_of(Ok(read))?);
    }

    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    for c in cases {
        let obj: DynamicObject = serde_json::from_value(c.object.clone())?;
        let outcome = outcome_of(create_retrying(&api(c.kind), &dry, &obj).await)?;
        let rejected = matches!(outcome, Outcome::Rejected { .. });
        if rejected != c.expect_rejected {
            problems.push(format!(
                "[{label}] case {}: expected {}, got {outcome:?}",
                c.name,
                if c.expect_rejected {
                    "rejection"
                } else {
                    "acceptance"
                }
            ));
        }
        if let Outcome::Accepted { spec, .. } = &outcome
            && check_rust_types
        {
            let mut full = c.object.clone();
            full["spec"] = spec.clone();
            let read: DynamicObject = serde_json::from_value(full)?;
            if let Err(e) = rust_round_trip(c.kind, &read) {
                problems.push(format!("[{label}] case {}: {e}", c.name));
            }
        }
        outcomes.insert(format!("case {}", c.name), outcome);
    }

    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    Ok(RunResult { outcomes, problems })
}

/// Right after a CRD is (re)created its REST endpoint can answer 404 for a moment.
async fn create_retrying(
    api: &Api<DynamicObject>,
    pp: &PostParams,
    obj: &DynamicObject,
) -> Result<DynamicObject, kube::Error> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match api.create(pp, obj).await {
            Err(kube::Error::Api(s)) if s.code == 404 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

/// The object read from the cluster must deserialize into our Rust types and
/// serialize back to the same spec and status.
fn rust_round_trip(kind: Kind, read: &DynamicObject) -> anyhow::Result<()> {
    let raw = serde_json::to_value(read)?;
    if raw.get("spec").is_none() {
        // spec-less objects are valid for the CRD but not for the controllers (see docs/crds.md)
        return Ok(());
    }
    let back = match kind {
        Kind::Git => serde_json::to_value(
            serde_json::from_value::<rflux_common::api::GitRepository>(raw.clone())
                .context("does not deserialize into GitRepository")?,
        )?,
        Kind::Ks => serde_json::to_value(
            serde_json::from_value::<rflux_common::api::Kustomization>(raw.clone())
                .context("does not deserialize into Kustomization")?,
        )?,
    };
    for key in ["spec", "status"] {
        if raw.get(key) != back.get(key) {
            bail!(
                "{key} changes through the Rust types: {} -> {}",
                raw.get(key).unwrap_or(&Value::Null),
                back.get(key).unwrap_or(&Value::Null)
            );
        }
    }
    Ok(())
}

fn crd_name(crd: &Value) -> anyhow::Result<String> {
    crd.pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| anyhow!("CRD without a name"))
}

/// Deletes the named CRDs (clearing finalizers of leftover objects so the
/// deletion cannot hang), creates `crds` and waits until they serve.
async fn install(client: &Client, crds: &[Value]) -> anyhow::Result<()> {
    let crd_api = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in crds {
        let name = crd_name(crd)?;
        if let Some(existing) = crd_api.get_opt(&name).await? {
            clear_finalizers(client, &existing).await?;
            match crd_api.delete(&name, &DeleteParams::default()).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(e.into()),
            }
            let deadline = Instant::now() + Duration::from_secs(120);
            while crd_api.get_opt(&name).await?.is_some() {
                if Instant::now() >= deadline {
                    bail!("CRD {name} was not deleted within 120s");
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        let new: CustomResourceDefinition = serde_json::from_value(crd.clone())?;
        crd_api
            .create(&PostParams::default(), &new)
            .await
            .with_context(|| format!("creating CRD {name}"))?;
    }
    for crd in crds {
        let name = crd_name(crd)?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let c = crd_api.get(&name).await?;
            let established = c
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if Instant::now() >= deadline {
                bail!("CRD {name} not established within 60s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

async fn clear_finalizers(client: &Client, crd: &CustomResourceDefinition) -> anyhow::Result<()> {
    let spec = &crd.spec;
    let Some(version) = spec.versions.iter().find(|v| v.storage) else {
        return Ok(());
    };
    let gvk = GroupVersionKind::gvk(&spec.group, &version.name, &spec.names.kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &spec.names.plural);
    let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
    let list = match api.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(kube::Error::Api(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for obj in list {
        if obj.metadata.finalizers.as_ref().is_none_or(Vec::is_empty) {
            continue;
        }
        let (Some(ns), Some(name)) = (
            obj.metadata.namespace.as_deref(),
            obj.metadata.name.as_deref(),
        ) else {
            continue;
        };
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar);
        let patch = json!({"metadata": {"finalizers": null}});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A Flux-installed cluster must be able to switch to our CRDs in place
/// (same names, same versions): a dry-run replace of each installed CRD.
async fn check_in_place_replace(client: &Client, ours: &[Value]) -> anyhow::Result<Vec<String>> {
    let crd_api = Api::<CustomResourceDefinition>::all(client.clone());
    let mut problems = Vec::new();
    for crd in ours {
        let name = crd_name(crd)?;
        let current = crd_api.get(&name).await?;
        let mut new: CustomResourceDefinition = serde_json::from_value(crd.clone())?;
        new.metadata.resource_version = current.metadata.resource_version.clone();
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        if let Err(e) = crd_api.replace(&name, &dry, &new).await {
            problems.push(format!("replacing Flux's {name} with ours in place: {e}"));
        }
    }
    Ok(problems)
}

#[tokio::test(flavor = "multi_thread")]
async fn flux_and_rflux_crds_accept_and_reject_alike() {
    let Some(flux_dir) = shared_flux_dir() else {
        println!(
            "skipped: ../shared/reference/flux is absent (Flux's CRDs and samples are needed)"
        );
        return;
    };
    let flux_crds: Vec<Value> = [
        "source.toolkit.fluxcd.io_gitrepositories.yaml",
        "kustomize.toolkit.fluxcd.io_kustomizations.yaml",
    ]
    .iter()
    .flat_map(|f| read_yaml_docs(&flux_dir.join("crds").join(f)).unwrap())
    .collect();
    let our_crds: Vec<Value> = ["gitrepositories.yaml", "kustomizations.yaml"]
        .iter()
        .flat_map(|f| read_yaml_docs(&repo_root().join("manifests/crds").join(f)).unwrap())
        .collect();
    assert_eq!(flux_crds.len(), 2);
    assert_eq!(our_crds.len(), 2);
    let samples = flux_samples(&flux_dir).unwrap();
    assert!(
        samples.len() >= 10,
        "expected Flux's samples, found {}",
        samples.len()
    );
    let cases = edge_cases();

    let cp = ControlPlane::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    let lock_path = state_root().join("crds.lock");
    let _lock = tokio::task::spawn_blocking(move || lock_file(&lock_path))
        .await
        .unwrap()
        .unwrap();

    // Run 1: Flux's CRDs. Whatever happens, ours are installed again afterwards.
    let flux_run = async {
        install(&client, &flux_crds).await?;
        let run = run_checks(cp, &client, "flux", &samples, &cases, false).await?;
        let replace = check_in_place_replace(&client, &our_crds).await?;
        anyhow::Ok((run, replace))
    }
    .await;
    // Run 2: ours (and they stay installed).
    let our_run = async {
        install(&client, &our_crds).await?;
        run_checks(cp, &client, "rflux", &samples, &cases, true).await
    }
    .await;

    let (flux_run, replace_problems) = flux_run.unwrap();
    let our_run = our_run.unwrap();
    let mut problems = flux_run.problems;
    problems.extend(replace_problems);
    problems.extend(our_run.problems);
    for (name, flux_outcome) in &flux_run.outcomes {
        match our_run.outcomes.get(name) {
            Some(ours) if ours == flux_outcome => {}
            Some(ours) => problems.push(format!(
                "{name}: Flux's CRD -> {flux_outcome:?}\n    our CRD -> {ours:?}"
            )),
            None => problems.push(format!("{name}: no outcome under our CRD")),
        }
    }
    assert_eq!(flux_run.outcomes.len(), samples.len() + cases.len());
    assert!(
        problems.is_empty(),
        "{} problem(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}
