//! Remote clusters (`spec.kubeConfig.secretRef`) as first-class as the local one.
//!
//! A [`RemotePool`] keeps one [`Cluster`] per kubeconfig Secret reference (namespace, name,
//! key) and revision (a SHA-256 of the kubeconfig text): the sanitized base configuration
//! (`reconcile/client.rs`: `remote_config`), the fenced clients per impersonated user and
//! request timeout (reused across reconciles; Flux builds new ones each time), the cluster's
//! own applied-object tracker (self-heal, request-free no-ops and watch-driven health, its
//! drift triggers sent to the same sink as the local tracker's) and its circuit
//! (`circuit.rs`). A new kubeconfig revision replaces the entry (the old tracker's watches
//! stop); an entry no Kustomization uses any more is dropped, and so is the watch of its
//! Secret (`secrets.rs`).
//!
//! Bounds per cluster: clients connect within 10 s and each response read is bounded by the
//! Kustomization's `spec.timeout`. After a connection failure (a request of a reconcile or a
//! tracker watch) the circuit opens: every reconcile of that cluster fails at once, without
//! network wait and before it takes a work slot, with `Ready=False`, reason
//! `ReconciliationFailed` (Flux's reason when the client of a remote cluster fails) and a
//! message naming the server, the Secret and the cause. Its Kustomizations are reconciled at
//! once to show it. A probe (`GET /version`) runs after an exponential back-off (2 s, doubling,
//! capped at 2 min); when it succeeds the circuit closes and the cluster's Kustomizations are
//! reconciled again. One unreachable cluster never delays the others: nothing is shared but
//! the pool's map, held only for lookups.

pub mod circuit;
pub mod secrets;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use futures::channel::mpsc::UnboundedSender;
use kube::{Client, Config};
use rflux_common::runtime::client::fenced_client;
use rflux_common::runtime::fence::WriteFence;
use sha2::{Digest, Sha256};

use crate::reconcile::{ClientError, kubeconfig_from_secret, remote_config};
use crate::tracker::{OwnerKey, Tracker, WatchErrorHook};
use circuit::{Circuit, Down, error_chain, is_unreachable};
use secrets::{SecretCache, SecretId};

/// The connect timeout of remote clients.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A kubeconfig Secret reference: namespace, name, key (empty: `value`, then `value.yaml`).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct ClusterRef {
    /// Namespace of the Secret (the Kustomization's).
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
    /// `secretRef.key`.
    pub key: String,
}

impl ClusterRef {
    fn secret(&self) -> SecretId {
        (self.namespace.clone(), self.name.clone())
    }
}

/// What the pool needs from the controller at the time a client is asked for.
pub struct ClientSettings<'a> {
    /// The manager's write fence.
    pub fence: &'a WriteFence,
    /// Whether applied objects are tracked (`WatchAppliedObjects`): remote clusters get a
    /// tracker of their own.
    pub track: bool,
    /// `--override-manager`.
    pub override_managers: &'a [String],
}

/// One remote cluster at one kubeconfig revision.
pub struct Cluster {
    /// The Secret it comes from.
    pub secret: ClusterRef,
    /// The API server URL.
    pub server: String,
    /// SHA-256 of the kubeconfig text.
    pub digest: String,
    base: Config,
    /// The kubeconfig's own identity, no read timeout (tracker watches and probes).
    base_client: Client,
    clients: Mutex<HashMap<(Option<String>, Duration), Client>>,
    /// The applied-object tracker of this cluster (with `WatchAppliedObjects`).
    pub tracker: Option<Arc<Tracker>>,
    circuit: Mutex<Circuit>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("secret", &self.secret)
            .field("server", &self.server)
            .field("digest", &self.digest)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Cluster {
    /// The client for `user` (impersonated; `None`: the kubeconfig's identity) whose
    /// response reads are bounded by `timeout`; built once, then reused.
    pub fn client(
        &self,
        user: Option<String>,
        timeout: Duration,
        fence: &WriteFence,
    ) -> Result<Client, ClientError> {
        let mut clients = lock(&self.clients);
        let key = (user, timeout);
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let mut cfg = self.base.clone();
        cfg.auth_info.impersonate = key.0.clone();
        cfg.read_timeout = Some(timeout);
        cfg.write_timeout = Some(timeout);
        cfg.reset_reader_on_write = true;
        let client = fenced_client(cfg, fence).map_err(ClientError::Fence)?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// `Err` while the circuit is open.
    pub fn check(&self) -> Result<(), Down> {
        lock(&self.circuit).check(Instant::now())
    }

    fn down_error(&self, down: Down) -> ClientError {
        ClientError::Unreachable {
            server: self.server.clone(),
            secret: format!("{}/{}", self.secret.namespace, self.secret.name),
            cause: down.cause,
            retry_in: down.retry_in,
        }
    }
}

/// The pool's shared state.
struct Shared {
    /// The entries, by Secret reference.
    clusters: Mutex<HashMap<ClusterRef, Arc<Cluster>>>,
    /// The cluster each Kustomization last asked for.
    owners: Mutex<HashMap<OwnerKey, ClusterRef>>,
    /// Where Kustomizations to reconcile are sent (the controller's drift stream).
    sink: Option<UnboundedSender<OwnerKey>>,
    first_backoff: Duration,
    max_backoff: Duration,
}

impl Shared {
    /// The Kustomizations that use `secret` (with any key), minus `except`.
    fn users_of(&self, secret: &SecretId, except: Option<&OwnerKey>) -> Vec<OwnerKey> {
        lock(&self.owners)
            .iter()
            .filter(|(o, r)| r.secret() == *secret && Some(*o) != except)
            .map(|(o, _)| o.clone())
            .collect()
    }

    fn users_of_ref(&self, cref: &ClusterRef) -> Vec<OwnerKey> {
        lock(&self.owners)
            .iter()
            .filter(|(_, r)| *r == cref)
            .map(|(o, _)| o.clone())
            .collect()
    }

    fn trigger(&self, owners: Vec<OwnerKey>) {
        if let Some(sink) = &self.sink {
            for o in owners {
                let _ = sink.unbounded_send(o);
            }
        }
    }

    /// A connection failure on `cluster`: opens its circuit, tells its Kustomizations (but
    /// `except`, which is reporting it) and starts the probe.
    fn failed(self: &Arc<Self>, cluster: &Arc<Cluster>, cause: &str, except: Option<&OwnerKey>) {
        let opened = lock(&cluster.circuit).fail(Instant::now(), cause);
        let Some(wait) = opened else { return };
        tracing::warn!(server = %cluster.server, secret = %format!("{}/{}", cluster.secret.namespace, cluster.secret.name),
            retry_in_ms = wait.as_millis() as u64, "remote cluster unreachable: {cause}");
        let users: Vec<OwnerKey> = self
            .users_of_ref(&cluster.secret)
            .into_iter()
            .filter(|o| Some(o) != except)
            .collect();
        self.trigger(users);
        let shared = Arc::downgrade(self);
        let weak = Arc::downgrade(cluster);
        tokio::spawn(probe_loop(shared, weak));
    }
}

/// Probes an unreachable cluster until it answers (or its entry is dropped), then closes the
/// circuit and reconciles its Kustomizations.
async fn probe_loop(shared: Weak<Shared>, cluster: Weak<Cluster>) {
    loop {
        let at = match cluster.upgrade() {
            Some(c) => lock(&c.circuit).probe_at(),
            None => return,
        };
        let Some(at) = at else { return };
        tokio::time::sleep_until(at.into()).await;
        let Some(c) = cluster.upgrade() else { return };
        let probe = tokio::time::timeout(CONNECT_TIMEOUT, c.base_client.apiserver_version());
        let result = match probe.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(error_chain(&e)),
            Err(_) => Err(format!("no answer within {}s", CONNECT_TIMEOUT.as_secs())),
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match result {
            Ok(()) => {
                if lock(&c.circuit).succeed() {
                    tracing::info!(server = %c.server, "remote cluster reachable again; reconciling its Kustomizations");
                    shared.trigger(shared.users_of_ref(&c.secret));
                }
                return;
            }
            Err(cause) => {
                let wait = lock(&c.circuit).probe_failed(Instant::now(), &cause);
                tracing::debug!(server = %c.server, retry_in_ms = wait.as_millis() as u64,
                    "remote cluster still unreachable: {cause}");
            }
        }
    }
}

/// The pool of remote clusters; see the module documentation.
pub struct RemotePool {
    shared: Arc<Shared>,
    secrets: SecretCache,
}

impl RemotePool {
    /// A pool reading kubeconfig Secrets with `hub` (the controller's own client) and sending
    /// the Kustomizations to reconcile (drift on a remote cluster, a changed kubeconfig
    /// Secret, a cluster back) to `sink`.
    pub fn new(hub: Client, sink: Option<UnboundedSender<OwnerKey>>) -> Self {
        Self::with_backoff(hub, sink, circuit::FIRST_BACKOFF, circuit::MAX_BACKOFF)
    }

    /// Like [`RemotePool::new`] with other circuit back-off bounds (tests).
    pub fn with_backoff(
        hub: Client,
        sink: Option<UnboundedSender<OwnerKey>>,
        first_backoff: Duration,
        max_backoff: Duration,
    ) -> Self {
        let shared = Arc::new(Shared {
            clusters: Mutex::new(HashMap::new()),
            owners: Mutex::new(HashMap::new()),
            sink,
            first_backoff,
            max_backoff,
        });
        let weak = Arc::downgrade(&shared);
        let on_change: secrets::OnChange = Arc::new(move |id: &SecretId| {
            if let Some(s) = weak.upgrade() {
                s.trigger(s.users_of(id, None));
            }
        });
        RemotePool {
            shared,
            secrets: SecretCache::new(hub, on_change),
        }
    }

    /// The client for `owner` on the cluster of `cref`, impersonating `user`, reads bounded by
    /// `timeout`. Reads the Secret from the watch cache, reuses the cluster entry of this
    /// kubeconfig revision (or builds it), and fails at once while the cluster's circuit is
    /// open.
    pub async fn client_for(
        &self,
        owner: &OwnerKey,
        cref: ClusterRef,
        user: Option<String>,
        timeout: Duration,
        settings: &ClientSettings<'_>,
    ) -> Result<Client, ClientError> {
        self.adopt(owner, &cref);
        let name = format!("{}/{}", cref.namespace, cref.name);
        let secret = self
            .secrets
            .get(&cref.secret())
            .await
            .map_err(|e| ClientError::Secret(name.clone(), e))?
            .ok_or_else(|| {
                ClientError::SecretNotFound(cref.namespace.clone(), cref.name.clone())
            })?;
        let key = (!cref.key.is_empty()).then_some(cref.key.as_str());
        let text = kubeconfig_from_secret(&secret, key)?;
        let digest = hex::encode(Sha256::digest(text.as_bytes()));
        let cluster = self.cluster(&cref, &text, digest, settings).await?;
        cluster.check().map_err(|d| cluster.down_error(d))?;
        cluster.client(user, timeout, settings.fence)
    }

    /// The entry of `cref` at the revision `digest`, built (and the old one replaced) when
    /// needed.
    async fn cluster(
        &self,
        cref: &ClusterRef,
        text: &str,
        digest: String,
        settings: &ClientSettings<'_>,
    ) -> Result<Arc<Cluster>, ClientError> {
        if let Some(c) = lock(&self.shared.clusters)
            .get(cref)
            .filter(|c| c.digest == digest && c.tracker.is_some() == settings.track)
        {
            return Ok(Arc::clone(c));
        }
        let mut base = remote_config(text).await?;
        base.connect_timeout = Some(CONNECT_TIMEOUT);
        let server = base.cluster_url.to_string();
        let base_client =
            fenced_client(base.clone(), settings.fence).map_err(ClientError::Fence)?;
        let shared = Arc::downgrade(&self.shared);
        let cluster = Arc::new_cyclic(|weak: &Weak<Cluster>| {
            let tracker = settings.track.then(|| {
                let weak = weak.clone();
                let hook: WatchErrorHook = Arc::new(move |e| {
                    let kube_error = match e {
                        kube::runtime::watcher::Error::InitialListFailed(k)
                        | kube::runtime::watcher::Error::WatchStartFailed(k)
                        | kube::runtime::watcher::Error::WatchFailed(k) => Some(k),
                        _ => None,
                    };
                    if let (Some(k), Some(c), Some(s)) =
                        (kube_error, weak.upgrade(), shared.upgrade())
                        && is_unreachable(k)
                    {
                        s.failed(&c, &error_chain(k), None);
                    }
                });
                let sink = self
                    .shared
                    .sink
                    .clone()
                    .unwrap_or_else(|| futures::channel::mpsc::unbounded().0);
                Tracker::with_sink(
                    base_client.clone(),
                    settings.override_managers.to_vec(),
                    sink,
                    Some(hook),
                )
            });
            Cluster {
                secret: cref.clone(),
                server,
                digest,
                base,
                base_client,
                clients: Mutex::new(HashMap::new()),
                tracker,
                circuit: Mutex::new(Circuit::new(
                    self.shared.first_backoff,
                    self.shared.max_backoff,
                )),
            }
        });
        let mut clusters = lock(&self.shared.clusters);
        if let Some(old) = clusters.get(cref)
            && old.digest == cluster.digest
            && old.tracker.is_some() == settings.track
        {
            // Built by a concurrent reconcile meanwhile.
            return Ok(Arc::clone(old));
        }
        if clusters
            .insert(cref.clone(), Arc::clone(&cluster))
            .is_some()
        {
            tracing::info!(secret = %format!("{}/{}", cref.namespace, cref.name),
                server = %cluster.server, "new kubeconfig revision; remote cluster entry replaced");
        }
        Ok(cluster)
    }

    /// Records that `owner` uses `cref`, releasing what it used before.
    fn adopt(&self, owner: &OwnerKey, cref: &ClusterRef) {
        let old = lock(&self.shared.owners).insert(owner.clone(), cref.clone());
        if let Some(old) = old.filter(|o| o != cref) {
            self.drop_unused(&old);
        }
    }

    /// `owner` no longer uses a remote cluster (it applies locally, or is deleted).
    pub fn release(&self, owner: &OwnerKey) {
        let old = lock(&self.shared.owners).remove(owner);
        if let Some(old) = old {
            self.drop_unused(&old);
        }
    }

    /// Drops the entry of `cref` and the watch of its Secret when nobody uses them.
    fn drop_unused(&self, cref: &ClusterRef) {
        let owners = lock(&self.shared.owners);
        if !owners.values().any(|r| r == cref) {
            lock(&self.shared.clusters).remove(cref);
        }
        let secret = cref.secret();
        if !owners.values().any(|r| r.secret() == secret) {
            drop(owners);
            self.secrets.forget(&secret);
        }
    }

    /// The cluster `owner` applies to (after its first [`RemotePool::client_for`]).
    pub fn cluster_of(&self, owner: &OwnerKey) -> Option<Arc<Cluster>> {
        let cref = lock(&self.shared.owners).get(owner).cloned()?;
        lock(&self.shared.clusters).get(&cref).cloned()
    }

    /// `Err` when the cluster `owner` applies to is known to be unreachable: the reconcile
    /// fails before it takes a work slot.
    /// Only when `owner` still uses `cref` (its spec may have changed since).
    pub fn gate(&self, owner: &OwnerKey, cref: &ClusterRef) -> Result<(), ClientError> {
        if lock(&self.shared.owners).get(owner) != Some(cref) {
            return Ok(());
        }
        match self.cluster_of(owner) {
            Some(c) => c.check().map_err(|d| c.down_error(d)),
            None => Ok(()),
        }
    }

    /// A stage of `owner` failed with `message`: when it says the cluster could not be
    /// reached, the circuit opens and the message names the cluster.
    pub fn stage_failed(&self, owner: &OwnerKey, message: &str) -> Option<String> {
        if !circuit::text_is_unreachable(message) {
            return None;
        }
        let cluster = self.cluster_of(owner)?;
        self.shared.failed(&cluster, message, Some(owner));
        Some(format!(
            "cluster {} (kubeconfig secret '{}/{}') is unreachable: {message}",
            cluster.server, cluster.secret.namespace, cluster.secret.name
        ))
    }

    /// How many clusters are pooled.
    pub fn len(&self) -> usize {
        lock(&self.shared.clusters).len()
    }

    /// Whether no cluster is pooled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many kubeconfig Secrets are watched.
    pub fn watched_secrets(&self) -> usize {
        self.secrets.len()
    }

    /// The Kustomizations using `cref` (tests, diagnostics).
    pub fn users(&self, cref: &ClusterRef) -> HashSet<OwnerKey> {
        self.shared.users_of_ref(cref).into_iter().collect()
    }
}

#[cfg(test)]
mod tests;
