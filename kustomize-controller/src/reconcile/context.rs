//! What every stage shares: the reconciler's [`Context`] (clients, fetcher, flags), Flux's
//! reasons, the errors that make the runner retry, and the status patch and event writers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Client, Config};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::{Kustomization, KustomizationStatus, ResourceInventory};
use rflux_common::api::ocirepository::OciRepository;
use rflux_common::runtime::client::fenced_client;
use rflux_common::runtime::fence::WriteFence;
use rflux_common::runtime::{EventRecorder, EventType};
use serde_json::json;
use tokio::sync::Semaphore;

use kube::ResourceExt;
use rflux_common::runtime::{Severity, StageError, parse_go_duration};

use super::client::{ClientError, impersonation_user};
use crate::fetch::ArtifactFetcher;
use crate::remote::{ClientSettings, ClusterRef, RemotePool};
use crate::ssa::{DeleteError, ObjectRef};
use crate::tracker::{Busy, OwnerKey, Tracker};

/// Controller name (event source, field manager owner).
pub const CONTROLLER_NAME: &str = "kustomize-controller";
/// Flux reasons (kustomize-controller's API package).
pub const ARTIFACT_FAILED_REASON: &str = "ArtifactFailed";
/// `kustomize build` or post-build substitution failed.
pub const BUILD_FAILED_REASON: &str = "BuildFailed";
/// A health check failed.
pub const HEALTH_CHECK_FAILED_REASON: &str = "HealthCheckFailed";
/// A new revision cancelled the health checks (`CancelHealthCheckOnNewRevision`).
pub const HEALTH_CHECK_CANCELED_REASON: &str = "HealthCheckCanceled";
/// A dependency is not ready.
pub const DEPENDENCY_NOT_READY_REASON: &str = "DependencyNotReady";
/// Garbage collection failed.
pub const PRUNE_FAILED_REASON: &str = "PruneFailed";
/// A cross-namespace reference is forbidden.
pub const ACCESS_DENIED_REASON: &str = "AccessDenied";
/// The event annotation that carries the revision.
pub const REVISION_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/revision";
/// What the reconciler needs besides the object.
pub struct Context {
    /// The controller's own client (reads sources, dependencies, writes status).
    pub client: Client,
    /// The controller's client configuration, the base of impersonating clients.
    pub config: Config,
    /// Event recorder.
    pub recorder: EventRecorder,
    /// Artifact fetcher (with its cache).
    pub fetcher: ArtifactFetcher,
    /// `--interval-jitter-percentage`.
    pub jitter_percentage: u8,
    /// `--requeue-dependency`.
    pub requeue_dependency: Duration,
    /// `--no-cross-namespace-refs`.
    pub no_cross_namespace_refs: bool,
    /// `--default-service-account` (empty: the controller's own identity).
    pub default_service_account: String,
    /// `StrictPostBuildSubstitutions` feature gate.
    pub strict_substitutions: bool,
    /// `--override-manager`.
    pub override_managers: Vec<String>,
    /// `--sops-age-secret`: (runtime namespace, Secret name), the age keys of Kustomizations
    /// whose `spec.decryption` names no Secret.
    pub sops_age_secret: Option<(String, String)>,
    /// `--custom-apply-stage-kinds`, parsed.
    pub custom_stage_kinds: Vec<(String, String)>,
    /// `AdditiveCELDependencyCheck` feature gate: a `dependsOn[].readyExpr` is checked in
    /// addition to the built-in readiness rules instead of replacing them.
    pub additive_cel_dependency_check: bool,
    /// `CancelHealthCheckOnNewRevision` feature gate.
    pub cancel_health_on_new_revision: bool,
    /// Health checks a new source revision may cancel.
    pub triggers: Arc<super::triggers::Triggers>,
    /// `DisableFailFastBehavior` feature gate, inverted: a Failed object ends a health wait.
    pub fail_fast: bool,
    /// `DirectSourceFetch` feature gate: sources are read from the API, not the watch cache.
    pub direct_source_fetch: bool,
    /// `GroupChangeLog` feature gate: the apply log groups object names by kind and action.
    pub group_change_log: bool,
    /// Refuse objects another owner holds (`RefuseOwnershipConflicts` feature gate, ours).
    pub refuse_conflicts: bool,
    /// `ArgoSyncSemantics` feature gate (ours, issue 17): Kustomizations annotated
    /// `rflux.dev/argo-semantics: enabled` apply in Argo CD sync waves (`reconcile/waves.rs`).
    pub argo_sync_semantics: bool,
    /// The applied-object tracker of the local cluster; `None` disables tracking (on the
    /// remote clusters too).
    pub tracker: Option<Arc<Tracker>>,
    /// The remote clusters (`spec.kubeConfig`): pooled clients, trackers and circuits.
    pub remote: RemotePool,
    /// The GitRepository cache of the source watch, once it runs (a miss reads the API).
    pub sources: OnceLock<Store<GitRepository>>,
    /// The OCIRepository cache of the source watch, once it runs (a miss reads the API).
    pub oci_sources: OnceLock<Store<OciRepository>>,
    /// `--concurrent` work slots: a reconcile holds one from its start until its health
    /// check, which waits on the tracker's watches without holding it (the controller runs
    /// reconciles with no other bound).
    pub work_slots: Arc<Semaphore>,
    /// The manager's write fence, also on the impersonating and remote clients.
    pub fence: WriteFence,
    /// Impersonating clients, by user name.
    pub(super) clients: Mutex<HashMap<String, Client>>,
    /// Argo sync semantics: the start (Unix seconds) of the sync operation of a Kustomization
    /// (uid, revision, manifests digest) that has not succeeded yet. Its retries keep it, so a
    /// `generateName` hook keeps its name and `BeforeHookCreation` replaces it, as an Argo
    /// retry does, instead of leaving one more object per retry.
    pub(super) sync_starts: Mutex<rflux_core::Lru<SyncKey, i64>>,
}

/// (Kustomization uid, revision, manifests digest).
pub(super) type SyncKey = (String, String, String);

/// How many unfinished Argo syncs have their start remembered.
const SYNC_STARTS: usize = 1024;

impl Context {
    /// The applied-object tracker of the cluster `ks` applies to: the local one, or its
    /// remote cluster's (known after [`Context::apply_client`]).
    pub(super) fn tracker_for(&self, ks: &Kustomization) -> Option<Arc<Tracker>> {
        let local = self.tracker.as_ref()?;
        if ks.spec.kube_config.is_none() {
            return Some(Arc::clone(local));
        }
        self.remote.cluster_of(&owner_key(ks))?.tracker.clone()
    }

    /// Marks a remote Kustomization busy on its cluster's tracker for the rest of the
    /// reconcile (the local tracker's mark is taken by `reconcile`).
    pub(super) fn remote_busy(&self, ks: &Kustomization) -> Option<Busy> {
        ks.spec.kube_config.as_ref()?;
        self.tracker_for(ks).map(|t| t.begin(owner_key(ks)))
    }

    /// Fails at once when the remote cluster of `ks` is known to be unreachable (before the
    /// reconcile takes a work slot).
    pub(super) fn remote_gate(&self, ks: &Kustomization) -> Result<(), StageError> {
        match cluster_ref(ks) {
            Some(cref) => self
                .remote
                .gate(&owner_key(ks), &cref)
                .map_err(|e| client_stage_error(&e)),
            None => Ok(()),
        }
    }

    /// A stage of a remote `ks` failed: a connection failure opens its cluster's circuit and
    /// the message names the cluster.
    pub(super) fn remote_failed(&self, ks: &Kustomization, mut e: StageError) -> StageError {
        if ks.spec.kube_config.is_some()
            && let Some(m) = self.remote.stage_failed(&owner_key(ks), &e.message)
        {
            e.message = m;
        }
        e
    }

    /// `ks` is deleted: its tracker records and its hold on a remote cluster go.
    pub(super) fn forget_owner(&self, ks: &Kustomization) {
        let owner = owner_key(ks);
        if let Some(t) = self.tracker_for(ks) {
            t.forget_owner(&owner);
        }
        if let Some(t) = &self.tracker {
            t.forget_owner(&owner);
        }
        self.remote.release(&owner);
    }

    /// The start of the sync operation `key`: remembered from its first attempt, else `now`.
    pub(super) fn sync_start(&self, key: &SyncKey, now: i64) -> i64 {
        let mut starts = self
            .sync_starts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(t) = starts.get(key) {
            return t;
        }
        starts.insert(key.clone(), now);
        now
    }

    /// The sync operation `key` succeeded: a later sync of the same state is a new operation.
    pub(super) fn sync_done(&self, key: &SyncKey) {
        self.sync_starts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }

    /// A context with the given parts and Flux's defaults for the rest.
    pub fn new(
        client: Client,
        config: Config,
        recorder: EventRecorder,
        fetcher: ArtifactFetcher,
    ) -> Self {
        Context {
            remote: RemotePool::new(client.clone(), None),
            client,
            config,
            recorder,
            fetcher,
            jitter_percentage: 5,
            requeue_dependency: Duration::from_secs(30),
            no_cross_namespace_refs: false,
            default_service_account: String::new(),
            strict_substitutions: false,
            override_managers: Vec::new(),
            sops_age_secret: None,
            custom_stage_kinds: Vec::new(),
            additive_cel_dependency_check: false,
            refuse_conflicts: false,
            argo_sync_semantics: false,
            cancel_health_on_new_revision: false,
            triggers: Arc::default(),
            fail_fast: true,
            direct_source_fetch: false,
            group_change_log: false,
            tracker: None,
            sources: OnceLock::new(),
            oci_sources: OnceLock::new(),
            work_slots: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
            fence: WriteFence::open(),
            clients: Mutex::new(HashMap::new()),
            sync_starts: Mutex::new(rflux_core::Lru::new(SYNC_STARTS)),
        }
    }

    /// The client that applies, prunes and health-checks for `ks`: on the remote cluster of
    /// `spec.kubeConfig.secretRef` when set, else the local one; impersonating its service
    /// account (or the default one) on that cluster, else with the given identity.
    pub(super) async fn apply_client(&self, ks: &Kustomization) -> Result<Client, ClientError> {
        let ns = ks.namespace().unwrap_or_default();
        let user = impersonation_user(
            &ns,
            ks.spec.service_account_name.as_deref(),
            &self.default_service_account,
        );
        if let Some(cref) = cluster_ref(ks) {
            let settings = ClientSettings {
                fence: &self.fence,
                track: self.tracker.is_some(),
                override_managers: &self.override_managers,
            };
            // Pooled per cluster and kubeconfig revision (`remote/`).
            return self
                .remote
                .client_for(&owner_key(ks), cref, user, request_timeout(ks), &settings)
                .await;
        }
        self.remote.release(&owner_key(ks));
        let Some(user) = user else {
            return Ok(self.client.clone());
        };
        let mut cache = match self.clients.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some(c) = cache.get(&user) {
            return Ok(c.clone());
        }
        let mut cfg = self.config.clone();
        cfg.auth_info.impersonate = Some(user.clone());
        let client = fenced_client(cfg, &self.fence).map_err(ClientError::Fence)?;
        cache.insert(user, client.clone());
        Ok(client)
    }
}

/// The kubeconfig Secret reference of a remote `ks` (`spec.kubeConfig.secretRef`).
fn cluster_ref(ks: &Kustomization) -> Option<ClusterRef> {
    let secret_ref = ks.spec.kube_config.as_ref()?.secret_ref.as_ref()?;
    Some(ClusterRef {
        namespace: ks.namespace().unwrap_or_default(),
        name: secret_ref.name.clone(),
        key: secret_ref.key.clone().unwrap_or_default(),
    })
}

/// (namespace, name) of `ks`.
pub(super) fn owner_key(ks: &Kustomization) -> OwnerKey {
    (ks.namespace().unwrap_or_default(), ks.name_any())
}

/// `spec.timeout` (else the interval; 5 min when neither parses): the bound of each response
/// read of a remote client.
fn request_timeout(ks: &Kustomization) -> Duration {
    parse_go_duration(ks.spec.timeout.as_deref().unwrap_or(&ks.spec.interval))
        .unwrap_or(Duration::from_secs(300))
}

/// The Ready=False error of a client that could not be had: `ReconciliationFailed` (Flux's
/// reason when the client of the target cluster fails), Stalled when the kubeconfig itself
/// was refused.
pub(super) fn client_stage_error(e: &ClientError) -> StageError {
    let severity = if e.is_refused() {
        Severity::Misconfigured
    } else {
        Severity::Generic
    };
    StageError::new(
        severity,
        rflux_common::runtime::conditions::READY,
        rflux_common::runtime::conditions::RECONCILIATION_FAILED_REASON,
        e.to_string(),
    )
}

/// Errors that make the runner retry with backoff (stage failures are reported in the status
/// and requeued instead).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Writing the status, finalizers or reading the object failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The object has no namespace.
    #[error("Kustomization has no namespace")]
    NoNamespace,
    /// The client for the target cluster could not be built (the finalizer is kept).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Garbage collection on deletion failed (the finalizer is kept).
    #[error("finalizer: {0}")]
    Finalize(#[source] DeleteError),
}

pub(super) fn inventory_refs(inv: Option<&ResourceInventory>) -> Vec<ObjectRef> {
    inv.map(|i| {
        i.entries
            .iter()
            .filter_map(|e| ObjectRef::from_entry(e).ok())
            .collect()
    })
    .unwrap_or_default()
}

pub(super) async fn patch_status(
    api: &Api<Kustomization>,
    name: &str,
    status: &KustomizationStatus,
) -> Result<(), kube::Error> {
    let patch = json!({ "status": status });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

pub(super) async fn event(
    ctx: &Context,
    ks: &Kustomization,
    t: EventType,
    reason: &str,
    msg: &str,
    rev: &str,
) {
    let ann: Vec<(&str, &str)> = if rev.is_empty() {
        Vec::new()
    } else {
        vec![(REVISION_ANNOTATION, rev)]
    };
    if let Err(e) = ctx.recorder.record(ks, t, reason, msg, &ann).await {
        tracing::warn!(error = %e, "unable to record event");
    }
}
