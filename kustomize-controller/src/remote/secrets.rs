//! The kubeconfig Secrets that Kustomizations reference, fed by watches, so a no-op reconcile
//! of a remote Kustomization reads its Secret without a request.
//!
//! One watch per referenced Secret, in its namespace, with the field selector
//! `metadata.name=<name>`. Why not one watch of all Secrets (or of a label): the controller
//! would hold every Secret of the cluster in memory (tokens, keys of every tenant) to use a
//! handful, and a label would be a new contract tenants must know (Flux reads the Secret as
//! it is). The cost is one watch connection per referenced Secret, usually one per cluster and
//! namespace, started on first use and stopped when no Kustomization references it any more.
//!
//! Until a watch has delivered its first list (or while it is interrupted) the Secret is read
//! with a GET, as before. A change of a watched Secret (a new kubeconfig revision, deletion)
//! is reported to the pool, which reconciles the Kustomizations that use it; Flux does not
//! watch these Secrets (docs/flux-compat.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};

/// A Secret: (namespace, name).
pub type SecretId = (String, String);

/// Called with a Secret that changed after its watch had listed it.
pub type OnChange = Arc<dyn Fn(&SecretId) + Send + Sync>;

/// What one watch knows.
#[derive(Default)]
struct Cached {
    /// The watch has listed and is not interrupted.
    synced: bool,
    /// The Secret (`None`: it does not exist).
    secret: Option<Secret>,
}

struct Watched {
    cached: Arc<Mutex<Cached>>,
    task: tokio::task::AbortHandle,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The watch-fed cache; see the module documentation.
pub struct SecretCache {
    client: Client,
    on_change: OnChange,
    watches: Mutex<HashMap<SecretId, Watched>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SecretCache {
    /// A cache reading with `client` (the controller's own identity on its cluster).
    pub fn new(client: Client, on_change: OnChange) -> Self {
        SecretCache {
            client,
            on_change,
            watches: Mutex::new(HashMap::new()),
        }
    }

    /// The Secret `id` (`None` when it does not exist): from the watch when it is in sync,
    /// else with a GET (the watch is started if it does not run).
    pub async fn get(&self, id: &SecretId) -> Result<Option<Secret>, kube::Error> {
        let cached = {
            let mut watches = lock(&self.watches);
            match watches.get(id) {
                Some(w) => Arc::clone(&w.cached),
                None => {
                    let w = self.spawn(id);
                    let c = Arc::clone(&w.cached);
                    watches.insert(id.clone(), w);
                    c
                }
            }
        };
        {
            let c = lock(&cached);
            if c.synced {
                return Ok(c.secret.clone());
            }
        }
        Api::<Secret>::namespaced(self.client.clone(), &id.0)
            .get_opt(&id.1)
            .await
    }

    /// Stops watching `id` (no Kustomization references it any more).
    pub fn forget(&self, id: &SecretId) {
        lock(&self.watches).remove(id);
    }

    /// How many Secrets are watched.
    pub fn len(&self) -> usize {
        lock(&self.watches).len()
    }

    /// Whether no Secret is watched.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn spawn(&self, id: &SecretId) -> Watched {
        let cached: Arc<Mutex<Cached>> = Arc::default();
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &id.0);
        let cfg = watcher::Config::default().fields(&format!("metadata.name={}", id.1));
        let state = Arc::clone(&cached);
        let on_change = Arc::clone(&self.on_change);
        let id = id.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher::watcher(api, cfg).default_backoff().boxed();
            let mut listed: Option<Secret> = None;
            let mut ever_synced = false;
            while let Some(ev) = events.next().await {
                let changed = {
                    let mut c = lock(&state);
                    let before = c.secret.as_ref().and_then(|s| s.resource_version());
                    match ev {
                        Ok(Event::Init) => {
                            listed = None;
                            false
                        }
                        Ok(Event::InitApply(s)) => {
                            listed = Some(s);
                            false
                        }
                        Ok(Event::InitDone) => {
                            c.secret = listed.take();
                            c.synced = true;
                            let after = c.secret.as_ref().and_then(|s| s.resource_version());
                            let changed = ever_synced && before != after;
                            ever_synced = true;
                            changed
                        }
                        Ok(Event::Apply(s)) => {
                            let after = s.resource_version();
                            c.secret = Some(s);
                            c.synced = true;
                            before != after
                        }
                        Ok(Event::Delete(_)) => {
                            c.secret = None;
                            c.synced = true;
                            before.is_some()
                        }
                        Err(e) => {
                            tracing::debug!(secret = %format!("{}/{}", id.0, id.1), error = %e,
                                "watch of a kubeconfig Secret interrupted");
                            c.synced = false;
                            false
                        }
                    }
                };
                if changed {
                    tracing::info!(secret = %format!("{}/{}", id.0, id.1),
                        "kubeconfig Secret changed; reconciling its Kustomizations");
                    on_change(&id);
                }
            }
        });
        Watched {
            cached,
            task: task.abort_handle(),
        }
    }
}
