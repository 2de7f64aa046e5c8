//! The apiserver floor (issue 20 §1): a minimal client with no controller logic that sends only
//! what any implementation must send for the fleet workload, so the time it takes is the limit
//! the controllers are measured against.
//!
//! Per Kustomization, in this order: one finalizer patch, one server-side apply per object of
//! the app (already built and substituted: no fetch, no build, no dry-run, no health check),
//! and one status patch (Ready, `lastAppliedRevision`). Sources get nothing: their artifact is
//! work the floor does not count. It runs `--concurrent` workers, like the controllers, and no
//! client-side throttling: under API Priority and Fairness neither controller throttles (Flux
//! turns its limiter off, and so do we).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::fixtures::{self, APP_PATH, FLEET_NS};
use crate::util::log;
use crate::watch::ks_resource;

/// The finalizer every Flux Kustomization carries.
const FINALIZER: &str = "finalizers.fluxcd.io";
/// The floor's field manager.
const MANAGER: &str = "apiserver-floor";

/// The app's objects as kustomize builds them from revision `rev` of the benchmark
/// repository, `${app_name}` still in place.
pub fn app_template(rev: u32) -> anyhow::Result<Vec<Value>> {
    let dir = tempfile::tempdir()?;
    for (path, text) in fixtures::repo_files(rev) {
        let p = dir.path().join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(p, text)?;
    }
    let built = rflux_kustomize::build(
        &dir.path().join(APP_PATH),
        &rflux_kustomize::BuildOptions::default(),
    )
    .map_err(|e| anyhow!("building the app template: {e}"))?;
    Ok(built.into_iter().map(|r| r.obj).collect())
}

/// The objects of one app: the template with `${app_name}` replaced (what postBuild does).
pub fn app_objects(template: &[Value], app: &str) -> anyhow::Result<Vec<Value>> {
    template
        .iter()
        .map(|o| {
            let text = serde_json::to_string(o)?.replace("${app_name}", app);
            Ok(serde_json::from_str(&text)?)
        })
        .collect()
}

/// The status the floor writes: what `flux get ks` and the benchmark's tracker read.
pub fn ready_status(generation: i64, revision: &str) -> Value {
    json!({"status": {
        "observedGeneration": generation,
        "lastAppliedRevision": revision,
        "lastAttemptedRevision": revision,
        "conditions": [{
            "type": "Ready",
            "status": "True",
            "reason": "ReconciliationSucceeded",
            "message": format!("Applied revision: {revision}"),
            "observedGeneration": generation,
            "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }],
    }})
}

/// The API resource of an object, from its apiVersion and kind (the app's four kinds).
fn resource_of(obj: &Value) -> anyhow::Result<ApiResource> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "ServiceAccount" => "serviceaccounts",
        "Service" => "services",
        "Deployment" => "deployments",
        "Ingress" => "ingresses",
        "ConfigMap" => "configmaps",
        other => return Err(anyhow!("the floor does not know the plural of {other}")),
    };
    Ok(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind),
        plural,
    ))
}

/// The floor's work for one Kustomization: finalizer, applies, status.
async fn settle(
    client: &Client,
    template: &[Value],
    revision: &str,
    ks: &DynamicObject,
) -> anyhow::Result<()> {
    let name = ks.name_any();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), FLEET_NS, &ks_resource());
    let fin = json!({"metadata": {"finalizers": [FINALIZER]}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&fin))
        .await
        .with_context(|| format!("finalizer of {name}"))?;
    let app = ks.data["spec"]["postBuild"]["substitute"]["app_name"]
        .as_str()
        .unwrap_or(&name)
        .to_string();
    let pp = PatchParams::apply(MANAGER).force();
    for obj in app_objects(template, &app)? {
        let ar = resource_of(&obj)?;
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or(FLEET_NS);
        let oname = obj["metadata"]["name"].as_str().unwrap_or_default();
        let objs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        objs.patch(oname, &pp, &Patch::Apply(&obj))
            .await
            .with_context(|| format!("applying {} {ns}/{oname}", ar.kind))?;
    }
    let status = ready_status(ks.metadata.generation.unwrap_or(1), revision);
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("status of {name}"))?;
    Ok(())
}

/// The running floor: a watch of the fleet's Kustomizations feeding `concurrent` workers.
pub struct Floor {
    watch: JoinHandle<()>,
    workers: JoinHandle<()>,
}

impl Floor {
    /// Starts the floor; each Kustomization seen is handled once, with `revision` as its
    /// applied revision.
    pub fn start(
        client: Client,
        concurrent: u16,
        revision: String,
        workdir: &Path,
    ) -> anyhow::Result<Self> {
        let template = Arc::new(app_template(1)?);
        std::fs::write(
            workdir.join("floor-template.json"),
            serde_json::to_vec_pretty(&*template)?,
        )?;
        let (tx, rx) = mpsc::unbounded_channel::<DynamicObject>();
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), FLEET_NS, &ks_resource());
        let watch = tokio::spawn(async move {
            let mut seen = HashSet::new();
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(ks) => {
                        if seen.insert(ks.name_any()) && tx.send(ks).is_err() {
                            return;
                        }
                    }
                    Err(e) => log(format!("floor: watch error: {e}")),
                }
            }
        });
        let workers = tokio::spawn(async move {
            let revision = Arc::new(revision);
            tokio_stream_from(rx)
                .for_each_concurrent(usize::from(concurrent.max(1)), |ks| {
                    let client = client.clone();
                    let template = Arc::clone(&template);
                    let revision = Arc::clone(&revision);
                    async move {
                        if let Err(e) = settle(&client, &template, &revision, &ks).await {
                            log(format!("floor: {e:#}"));
                        }
                    }
                })
                .await;
        });
        Ok(Floor { watch, workers })
    }

    /// Stops the watch and the workers.
    pub fn stop(self) {
        self.watch.abort();
        self.workers.abort();
    }
}

/// An unbounded receiver as a stream.
fn tokio_stream_from<T: Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn each_app_gets_its_own_four_objects() {
        let t = app_template(3).unwrap();
        let objs = app_objects(&t, "app-0007").unwrap();
        assert_eq!(objs.len(), 4);
        for o in &objs {
            assert_eq!(o["metadata"]["name"], "app-0007");
            assert_eq!(o["metadata"]["labels"]["fleet.rflux.dev/rev"], "3");
            resource_of(o).unwrap();
        }
        assert!(!serde_json::to_string(&objs).unwrap().contains("${"));
    }

    #[test]
    fn the_status_is_what_the_tracker_reads_as_ready() {
        let s = ready_status(2, "main@sha1:abc");
        assert_eq!(s["status"]["observedGeneration"], 2);
        assert_eq!(s["status"]["lastAppliedRevision"], "main@sha1:abc");
        assert_eq!(s["status"]["conditions"][0]["type"], "Ready");
        assert_eq!(s["status"]["conditions"][0]["status"], "True");
        assert!(resource_of(&json!({"apiVersion": "v1", "kind": "Pod"})).is_err());
    }
}
