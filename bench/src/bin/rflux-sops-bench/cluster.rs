//! The cluster side: watches of the measured objects, namespaces, kubectl, the applied Secrets.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use rflux_common::api::kustomization::Kustomization;
use serde_json::json;
use tokio::sync::watch;

use crate::{NAME, OWNER_LABEL, REV_ANNOTATION};

/// The latest version of an object as a watch delivered it, and when.
pub type Latest<K> = watch::Receiver<Option<(Instant, K)>>;

/// Watches the object `sops` of kind `K` in `ns`; the receiver always holds its latest version.
pub fn follow<K>(client: &Client, ns: &str) -> Latest<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (tx, rx) = watch::channel(None);
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={NAME}"));
    // Backoff: after the control plane stops, a watch without it spins on connection errors.
    // The task ends when every receiver is gone.
    tokio::spawn(async move {
        let mut s = watcher(api, cfg)
            .default_backoff()
            .applied_objects()
            .boxed();
        loop {
            tokio::select! {
                _ = tx.closed() => break,
                ev = s.next() => match ev {
                    Some(Ok(o)) => {
                        let _ = tx.send(Some((Instant::now(), o)));
                    }
                    Some(Err(_)) => {}
                    None => break,
                },
            }
        }
    });
    rx
}

/// Waits until the latest object satisfies `pred`; returns when the watch delivered it.
pub async fn wait_obj<K>(
    rx: &mut Latest<K>,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&K) -> bool,
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

pub fn ks_done(ks: &Kustomization, rev: &str, token: Option<&str>) -> bool {
    let Some(st) = ks.status.as_ref() else {
        return false;
    };
    let ready =
        st.conditions.iter().flatten().any(|c| {
            c.type_ == "Ready" && c.status == "True" && c.reason == "ReconciliationSucceeded"
        });
    ready
        && st.last_applied_revision.as_deref() == Some(rev)
        && st.observed_generation == ks.meta().generation
        && token.is_none_or(|t| st.last_handled_reconcile_at.as_deref() == Some(t))
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

/// Polls until all `n` applied Secrets exist and carry `REV_ANNOTATION` = `rev`. `None` when
/// the first look found them so, else when a later one did.
pub async fn wait_secrets(
    client: &Client,
    ns: &str,
    n: usize,
    rev: usize,
    timeout: Duration,
) -> anyhow::Result<Option<Instant>> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("{OWNER_LABEL}={NAME}"));
    let want = rev.to_string();
    let deadline = Instant::now() + timeout;
    let mut first = true;
    loop {
        let list = api.list_metadata(&lp).await?;
        let at_rev = list
            .items
            .iter()
            .filter(|s| {
                s.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(REV_ANNOTATION))
                    == Some(&want)
            })
            .count();
        if at_rev == n {
            return Ok((!first).then(Instant::now));
        }
        first = false;
        if Instant::now() > deadline {
            bail!("{ns}: {at_rev} of {n} Secrets at revision {rev}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
