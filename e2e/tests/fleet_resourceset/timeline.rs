//! A timeline of a transition, from watches (not polls, which miss short states): the
//! Kustomizations on the hub (created, their Ready status and reason, deleting, deleted) and
//! the applied ConfigMap on a spoke (created, updated, terminating, deleted, with its owner,
//! environment and uid), each with the time it was seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use rflux_common::api::kustomization::Kustomization;

use super::fleet::CONFIG;
use crate::support::procs::ks_condition;

type Entries = Arc<Mutex<Vec<(Instant, String)>>>;

/// Watches running in the background; [`Recorder::finish`] stops them and returns what they saw.
pub struct Recorder {
    entries: Entries,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn push(entries: &Entries, line: String) {
    let mut e = match entries.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    e.push((Instant::now(), line));
}

fn ks_state(k: &Kustomization) -> String {
    if k.metadata.deletion_timestamp.is_some() {
        return "deleting (finalizer: prune)".into();
    }
    match ks_condition(k, "Ready") {
        Some(c) => format!("Ready={} {}", c.status, c.reason),
        None => "created".into(),
    }
}

fn cm_state(cm: &ConfigMap) -> String {
    let data = cm.data.clone().unwrap_or_default();
    let owner = cm
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kustomize.toolkit.fluxcd.io/name"))
        .cloned()
        .unwrap_or_default();
    let uid = cm.metadata.uid.as_deref().unwrap_or_default();
    let term = if cm.metadata.deletion_timestamp.is_some() {
        " terminating"
    } else {
        ""
    };
    format!(
        "environment={} owner={owner} uid={}{term}",
        data.get("environment").map_or("", String::as_str),
        uid.get(..8).unwrap_or(uid)
    )
}

/// Sends once, on the first call.
fn signal(tx: &mut Option<tokio::sync::oneshot::Sender<()>>) {
    if let Some(tx) = tx.take() {
        let _ = tx.send(());
    }
}

impl Recorder {
    /// Starts watching the Kustomizations of `ks` and the spoke ConfigMap [`CONFIG`] of `cms`
    /// (`spoke` names it in the lines); returns once both watches listed.
    pub async fn start(ks: Api<Kustomization>, cms: Api<ConfigMap>, spoke: &str) -> Recorder {
        let entries: Entries = Arc::default();
        let (e1, e2) = (entries.clone(), entries.clone());
        let (tx1, ready1) = tokio::sync::oneshot::channel();
        let (tx2, ready2) = tokio::sync::oneshot::channel();
        let t1 = tokio::spawn(async move {
            let mut last: HashMap<String, String> = HashMap::new();
            let mut tx = Some(tx1);
            let mut s = watcher::watcher(ks, watcher::Config::default()).boxed();
            while let Some(ev) = s.next().await {
                let (k, state) = match ev {
                    Ok(Event::Apply(k) | Event::InitApply(k)) => {
                        let state = ks_state(&k);
                        (k, state)
                    }
                    Ok(Event::Delete(k)) => (k, "deleted".to_string()),
                    Ok(Event::InitDone) => {
                        signal(&mut tx);
                        continue;
                    }
                    _ => continue,
                };
                let name = k.metadata.name.unwrap_or_default();
                if last.get(&name) != Some(&state) {
                    push(&e1, format!("Kustomization {name}: {state}"));
                    last.insert(name, state);
                }
            }
        });
        let spoke = spoke.to_string();
        let t2 = tokio::spawn(async move {
            // The uid and state last seen; None while absent.
            let mut last: Option<(String, String)> = None;
            let mut tx = Some(tx2);
            let cfg = watcher::Config::default().fields(&format!("metadata.name={CONFIG}"));
            let mut s = watcher::watcher(cms, cfg).boxed();
            while let Some(ev) = s.next().await {
                let line = match ev {
                    Ok(Event::InitApply(c)) => {
                        let state = cm_state(&c);
                        last = Some((c.metadata.uid.unwrap_or_default(), state.clone()));
                        Some(format!("present: {state}"))
                    }
                    Ok(Event::Apply(c)) => {
                        let uid = c.metadata.uid.clone().unwrap_or_default();
                        let state = cm_state(&c);
                        let verb = match &last {
                            Some((u, st)) if *u == uid && *st == state => None,
                            Some((u, _)) if *u == uid => Some("updated"),
                            Some(_) => Some("replaced"),
                            None => Some("created"),
                        };
                        last = Some((uid, state.clone()));
                        verb.map(|v| format!("{v}: {state}"))
                    }
                    Ok(Event::Delete(c)) => {
                        last = None;
                        Some(format!("deleted: {}", cm_state(&c)))
                    }
                    Ok(Event::InitDone) => {
                        signal(&mut tx);
                        None
                    }
                    _ => None,
                };
                if let Some(line) = line {
                    push(&e2, format!("{spoke} ConfigMap {CONFIG} {line}"));
                }
            }
        });
        // Both watches listed before the change under test starts.
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            let _ = ready1.await;
            let _ = ready2.await;
        })
        .await;
        Recorder {
            entries,
            tasks: vec![t1, t2],
        }
    }

    /// Stops the watches; returns what they saw, in order, timed from `from` (the states
    /// listed before `from` at +0).
    pub fn finish(self, from: Instant) -> Vec<(Duration, String)> {
        for t in &self.tasks {
            t.abort();
        }
        let mut out: Vec<(Duration, String)> = match self.entries.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
        .into_iter()
        .map(|(at, line)| (at.saturating_duration_since(from), line))
        .collect();
        out.sort_by_key(|(at, _)| *at);
        out
    }
}

/// Prints a timeline under `title`.
pub fn print(title: &str, entries: &[(Duration, String)]) {
    println!("timeline: {title}");
    for (at, line) in entries {
        println!("  +{:>7.3}s  {line}", at.as_secs_f64());
    }
}
