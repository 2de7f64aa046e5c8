//! Kustomization tracker: one watch, a map of status summaries, a version channel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::watch;

use crate::util::log;

#[derive(Debug, Clone, Default)]
pub struct KsState {
    pub generation: i64,
    pub observed_generation: i64,
    pub ready: bool,
    pub last_applied: String,
    pub last_handled: String,
    pub seen: Option<Instant>,
}

#[derive(Clone)]
pub struct Tracker {
    map: Arc<Mutex<HashMap<String, KsState>>>,
    version: watch::Receiver<u64>,
}

pub fn ks_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    )
}

pub fn git_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "GitRepository"),
        "gitrepositories",
    )
}

fn summarize(obj: &DynamicObject) -> KsState {
    let status = obj.data.get("status").cloned().unwrap_or(Value::Null);
    let ready = status["conditions"]
        .as_array()
        .map(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .unwrap_or(false);
    KsState {
        generation: obj.metadata.generation.unwrap_or(0),
        observed_generation: status["observedGeneration"].as_i64().unwrap_or(-1),
        ready,
        last_applied: status["lastAppliedRevision"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        last_handled: status["lastHandledReconcileAt"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        seen: Some(Instant::now()),
    }
}

impl Tracker {
    pub fn start(client: Client) -> Tracker {
        let map: Arc<Mutex<HashMap<String, KsState>>> = Arc::default();
        let (tx, rx) = watch::channel(0u64);
        let api: Api<DynamicObject> = Api::all_with(client, &ks_resource());
        let m = map.clone();
        tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            loop {
                match stream.try_next().await {
                    Ok(Some(obj)) => {
                        let key =
                            format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
                        if let Ok(mut g) = m.lock() {
                            g.insert(key, summarize(&obj));
                        }
                        tx.send_modify(|v| *v += 1);
                    }
                    Ok(None) => break,
                    Err(e) => log(format!("kustomization watch: {e}")),
                }
            }
        });
        Tracker { map, version: rx }
    }

    /// Waits until `pred` holds for every key; returns, per key, the time (since `t0`) the
    /// status that first satisfied it arrived, and the keys still failing at the timeout.
    pub async fn wait_all(
        &self,
        keys: &[String],
        t0: Instant,
        timeout: Duration,
        pred: impl Fn(&KsState) -> bool,
    ) -> (Vec<f64>, Vec<String>) {
        let mut rx = self.version.clone();
        let mut done: HashMap<&str, f64> = HashMap::new();
        let deadline = tokio::time::Instant::from_std(t0 + timeout);
        let mut last_report = Instant::now();
        loop {
            rx.borrow_and_update();
            if let Ok(g) = self.map.lock() {
                for k in keys {
                    if done.contains_key(k.as_str()) {
                        continue;
                    }
                    if let Some(s) = g.get(k)
                        && pred(s)
                    {
                        let at = s.seen.unwrap_or_else(Instant::now);
                        done.insert(k, at.saturating_duration_since(t0).as_secs_f64());
                    }
                }
            }
            if done.len() == keys.len() {
                break;
            }
            if last_report.elapsed() > Duration::from_secs(15) {
                log(format!(
                    "  {}/{} done after {:.0}s",
                    done.len(),
                    keys.len(),
                    t0.elapsed().as_secs_f64()
                ));
                last_report = Instant::now();
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => break,
            }
        }
        let missing = keys
            .iter()
            .filter(|k| !done.contains_key(k.as_str()))
            .cloned()
            .collect();
        let times = keys
            .iter()
            .filter_map(|k| done.get(k.as_str()).copied())
            .collect();
        (times, missing)
    }

    pub fn get(&self, key: &str) -> Option<KsState> {
        self.map.lock().ok()?.get(key).cloned()
    }
}
