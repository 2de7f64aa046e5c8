//! Cluster helpers: kubectl, server-side apply of a burst, reconcile requests, apiserver
//! request counts and pushes to the benchmark repository.

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use rflux_e2e::{TestRepo, metrics};
use serde_json::{Value, json};

use crate::fixtures;
use crate::watch::{git_resource, ks_resource};

pub const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

pub use crate::kubectl::kubectl;

pub async fn apply_all(client: &Client, objs: Vec<Value>, parallel: usize) -> anyhow::Result<()> {
    let pp = PatchParams::apply("rflux-fleet").force();
    futures::stream::iter(objs)
        .map(|obj| {
            let client = client.clone();
            let pp = pp.clone();
            async move {
                let ar = if obj["kind"] == "GitRepository" {
                    git_resource()
                } else {
                    ks_resource()
                };
                let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default");
                let name = obj["metadata"]["name"].as_str().unwrap_or_default();
                let api: Api<DynamicObject> = Api::namespaced_with(client, ns, &ar);
                api.patch(name, &pp, &Patch::Apply(&obj))
                    .await
                    .with_context(|| format!("applying {ns}/{name}"))?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(parallel)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

pub async fn request_reconcile(
    client: &Client,
    ar: &ApiResource,
    ns: &str,
    names: &[String],
    token: &str,
) -> anyhow::Result<()> {
    let patch = json!({"metadata": {"annotations": {REQUESTED_AT: token}}});
    futures::stream::iter(names.iter().cloned())
        .map(|name| {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
            let patch = patch.clone();
            async move {
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .with_context(|| format!("annotating {ns}/{name}"))?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

pub async fn scrape(client: &Client) -> anyhow::Result<metrics::Counts> {
    metrics::scrape_request_total(client).await
}

pub fn push_rev(repo: &TestRepo, rev: u32) -> anyhow::Result<String> {
    for (path, text) in fixtures::repo_files(rev) {
        repo.write(&path, &text)?;
    }
    let sha = repo.commit(&format!("fleet rev {rev}"))?;
    repo.push("main")?;
    Ok(sha.trim().to_string())
}
