//! One implementation under test: its source-controller process (own storage, watching only
//! its namespace's label), its namespace and OCIRepository, and a watch on that object.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use rflux_common::api::ocirepository::OciRepository;
use rflux_e2e::{ControlPlane, free_ports};
use serde_json::json;
use tokio::sync::watch;

use crate::procs::{Proc, wait_readyz};
use crate::{Args, LABEL, NAME};

/// The latest version of the OCIRepository as a watch delivered it, and when.
pub type Latest = watch::Receiver<Option<(Instant, OciRepository)>>;

/// One implementation: its namespace, its source-controller, the watch on its OCIRepository
/// (stopped when dropped).
pub struct Side {
    pub name: String,
    pub ns: String,
    pub oci: Latest,
    pub sc: Proc,
    watch: tokio::task::JoinHandle<()>,
}

impl Drop for Side {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

/// Watches the OCIRepository [`NAME`] in `ns`; the receiver always holds its latest version.
/// Errors are retried with the watcher's default backoff (a watch against a stopped apiserver
/// must not spin).
fn follow(client: &Client, ns: &str) -> (Latest, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(None);
    let api: Api<OciRepository> = Api::namespaced(client.clone(), ns);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={NAME}"));
    let task = tokio::spawn(async move {
        let mut s = watcher(api, cfg)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(ev) = s.next().await {
            if let Ok(o) = ev {
                let _ = tx.send(Some((Instant::now(), o)));
            }
        }
    });
    (rx, task)
}

/// Waits until the latest object satisfies `pred`; returns when the watch delivered it.
pub async fn wait_obj(
    rx: &mut Latest,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&OciRepository) -> bool,
) -> anyhow::Result<Instant> {
    let r = tokio::time::timeout(
        timeout,
        rx.wait_for(|v| v.as_ref().is_some_and(|(_, o)| pred(o))),
    )
    .await
    .with_context(|| format!("timed out waiting for {what}"))?
    .context("watch ended")?;
    Ok(r.as_ref().map(|(at, _)| *at).unwrap_or_else(Instant::now))
}

/// Ready=True at `revision` for the current generation.
pub fn ready_at(o: &OciRepository, revision: &str) -> bool {
    let Some(st) = o.status.as_ref() else {
        return false;
    };
    let ready = st
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ready
        && st.artifact.as_ref().is_some_and(|a| a.revision == revision)
        && st.observed_generation == o.meta().generation
}

pub async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Namespace `oci-<name>`, the source-controller of implementation `name` (`flux` or `ours`)
/// and the OCIRepository [`NAME`] on `url` (interval 1h: only requests reconcile it).
pub async fn start_side(
    args: &Args,
    client: &Client,
    cp: &ControlPlane,
    name: &str,
    url: &str,
    dir: &Path,
) -> anyhow::Result<Side> {
    let ns = format!("oci-{name}");
    create_namespace(client, &ns).await?;
    let bin = match name {
        "flux" => args
            .flux_bin
            .clone()
            .unwrap_or_else(rflux_e2e::flux::flux_bin_dir)
            .join("flux-source-controller"),
        "ours" => args.ours_bin.join("source-controller"),
        other => bail!("unknown implementation {other} (flux, ours)"),
    };
    let storage = dir.join(format!("storage-{name}"));
    std::fs::create_dir_all(&storage)?;
    let [sp] = free_ports::<1>()?;
    let sc_args = vec![
        "--watch-all-namespaces=true".to_string(),
        format!("--watch-label-selector={LABEL}={name}"),
        "--enable-leader-election=false".to_string(),
        format!("--storage-path={}", storage.display()),
        format!("--storage-addr=127.0.0.1:{sp}"),
        format!("--storage-adv-addr=127.0.0.1:{sp}"),
    ];
    let (mut sc, health) = Proc::start(
        &format!("{name}-source-controller"),
        &bin,
        &sc_args,
        cp.kubeconfig_path(),
        dir,
    )?;
    wait_readyz(&mut sc, health).await?;
    let (oci, watch) = follow(client, &ns);
    let obj: OciRepository = serde_json::from_value(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
        "metadata": {"name": NAME, "namespace": ns, "labels": {LABEL: name}},
        "spec": {"url": url, "interval": "1h", "timeout": "5m"}
    }))?;
    Api::<OciRepository>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &obj)
        .await?;
    Ok(Side {
        name: name.to_string(),
        ns,
        oci,
        sc,
        watch,
    })
}
