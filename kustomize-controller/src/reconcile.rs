//! The Kustomization reconcile pipeline: the tested stages joined in Flux's order.
//!
//! `reconcile` handles deletion (finalizer + garbage collection) and suspension, then runs
//! [`Pipeline::run`]: source → dependsOn → fetch → build → substitute → apply → prune → health.
//! Every stage failure becomes a Flux reason on the `Ready` condition (and a warning event);
//! the status is written with a merge patch to the status subresource.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, Store};
use kube::{Client, Config, Resource, ResourceExt};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::{
    Kustomization, KustomizationSpec, KustomizationStatus, ResourceInventory, Snapshot,
};
use rflux_common::api::meta::{Artifact, SourceKind};
use rflux_common::runtime::conditions::{
    self as cond, HEALTHY, PROGRESSING_REASON, PROGRESSING_WITH_RETRY_REASON, READY,
    RECONCILIATION_FAILED_REASON, RECONCILIATION_SUCCEEDED_REASON, RECONCILING, SUCCEEDED_REASON,
};
use rflux_common::runtime::controller::{no_requeue, requeue_dependency, requeue_success};
use rflux_common::runtime::finalizers::{FLUX_FINALIZER, add_finalizer, remove_finalizer};
use rflux_common::runtime::{EventRecorder, EventType, format_go_duration, parse_go_duration};
use rflux_kustomize::FluxOverrides;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::apply::{
    ApplyOptions, ChangeSet, Owner, Resolver, apply_all_with, compile_ignore_rules,
};
use crate::cel::{HealthExprs, INVALID_CEL_EXPRESSION_REASON, ReadyExpr, TERMINAL_ERROR_MESSAGE};
use crate::fetch::ArtifactFetcher;
use crate::health::{wait_for_applied, wait_for_with_exprs, wait_targets};
use crate::inventory::{self, ObjectRef, split_api_version};
use crate::prune::{FinalizeAction, finalize, finalize_action, prune};
use crate::substitute::post_build;
use crate::tracker::Tracker;

/// Controller name (event source, field manager owner).
pub const CONTROLLER_NAME: &str = "kustomize-controller";
/// Flux reasons (kustomize-controller's API package).
pub const ARTIFACT_FAILED_REASON: &str = "ArtifactFailed";
/// `kustomize build` or post-build substitution failed.
pub const BUILD_FAILED_REASON: &str = "BuildFailed";
/// A health check failed.
pub const HEALTH_CHECK_FAILED_REASON: &str = "HealthCheckFailed";
/// A dependency is not ready.
pub const DEPENDENCY_NOT_READY_REASON: &str = "DependencyNotReady";
/// Garbage collection failed.
pub const PRUNE_FAILED_REASON: &str = "PruneFailed";
/// A cross-namespace reference is forbidden.
pub const ACCESS_DENIED_REASON: &str = "AccessDenied";
/// The event annotation that carries the revision.
pub const REVISION_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/revision";
/// Artifact metadata key for the origin revision.
const ORIGIN_REVISION_KEY: &str = "org.opencontainers.image.revision";
/// How many history snapshots are kept (Flux keeps 5).
const HISTORY_LIMIT: usize = 5;

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
    /// `--custom-apply-stage-kinds`, parsed.
    pub custom_stage_kinds: Vec<(String, String)>,
    /// `AdditiveCELDependencyCheck` feature gate: a `dependsOn[].readyExpr` is checked in
    /// addition to the built-in readiness rules instead of replacing them.
    pub additive_cel_dependency_check: bool,
    /// The applied-object tracker (local cluster only); `None` disables it.
    pub tracker: Option<Arc<Tracker>>,
    /// The GitRepository cache of the source watch, once it runs (a miss reads the API).
    pub sources: OnceLock<Store<GitRepository>>,
    /// `--concurrent` work slots: a reconcile holds one from its start until its health
    /// check, which waits on the tracker's watches without holding it (the controller runs
    /// reconciles with no other bound).
    pub work_slots: Arc<Semaphore>,
    /// Impersonating clients, by user name.
    clients: Mutex<HashMap<String, Client>>,
}

impl Context {
    /// A context with the given parts and Flux's defaults for the rest.
    pub fn new(
        client: Client,
        config: Config,
        recorder: EventRecorder,
        fetcher: ArtifactFetcher,
    ) -> Self {
        Context {
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
            custom_stage_kinds: Vec::new(),
            additive_cel_dependency_check: false,
            tracker: None,
            sources: OnceLock::new(),
            work_slots: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// The client that applies, prunes and health-checks for `ks`: on the remote cluster of
    /// `spec.kubeConfig.secretRef` when set, else the local one; impersonating its service
    /// account (or the default one) on that cluster, else with the given identity.
    async fn apply_client(&self, ks: &Kustomization) -> Result<Client, ClientError> {
        let ns = ks.namespace().unwrap_or_default();
        let user = impersonation_user(
            &ns,
            ks.spec.service_account_name.as_deref(),
            &self.default_service_account,
        );
        if let Some(secret_ref) = ks
            .spec
            .kube_config
            .as_ref()
            .and_then(|k| k.secret_ref.as_ref())
        {
            let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &ns);
            let secret = secrets
                .get(&secret_ref.name)
                .await
                .map_err(|e| ClientError::Secret(format!("{ns}/{}", secret_ref.name), e))?;
            let text = kubeconfig_from_secret(&secret, secret_ref.key.as_deref())?;
            let mut cfg = remote_config(&text).await?;
            cfg.auth_info.impersonate = user;
            // Remote clients are built per reconcile: the Secret may change at any time.
            return Client::try_from(cfg).map_err(ClientError::Build);
        }
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
        let client = Client::try_from(cfg).map_err(ClientError::Build)?;
        cache.insert(user, client.clone());
        Ok(client)
    }
}

/// Why the client for the target cluster could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig Secret could not be read.
    #[error("failed to get kubeconfig secret '{0}': {1}")]
    Secret(String, #[source] kube::Error),
    /// The Secret has none of the expected keys.
    #[error("kubeconfig secret '{name}' has no key {keys}")]
    MissingKey {
        /// `<namespace>/<name>` of the Secret.
        name: String,
        /// The keys that were looked for.
        keys: String,
    },
    /// The kubeconfig is not valid.
    #[error("invalid kubeconfig: {0}")]
    Kubeconfig(String),
    /// The kubeconfig uses something this controller does not allow (plugins, insecure TLS,
    /// file references).
    #[error("kubeconfig not allowed: {0}")]
    NotAllowed(String),
    /// The client could not be built from the configuration.
    #[error("failed to build client: {0}")]
    Build(#[source] kube::Error),
}

impl ClientError {
    /// Whether the kubeconfig itself was refused (invalid or not allowed): a configuration
    /// error that retrying does not fix, reported as Stalled.
    pub fn is_refused(&self) -> bool {
        matches!(
            self,
            ClientError::Kubeconfig(_) | ClientError::NotAllowed(_)
        )
    }
}

/// The kubeconfig text in `secret`: the key `key` when given, else `value`, else `value.yaml`.
pub fn kubeconfig_from_secret(secret: &Secret, key: Option<&str>) -> Result<String, ClientError> {
    let keys: Vec<&str> = match key.filter(|k| !k.is_empty()) {
        Some(k) => vec![k],
        None => vec!["value", "value.yaml"],
    };
    let data = secret.data.as_ref();
    let string_data = secret.string_data.as_ref();
    for k in &keys {
        if let Some(b) = data.and_then(|d| d.get(*k)) {
            return String::from_utf8(b.0.clone())
                .map_err(|_| ClientError::Kubeconfig(format!("key '{k}' is not UTF-8")));
        }
        if let Some(s) = string_data.and_then(|d| d.get(*k)) {
            return Ok(s.clone());
        }
    }
    Err(ClientError::MissingKey {
        name: format!(
            "{}/{}",
            secret.namespace().unwrap_or_default(),
            secret.name_any()
        ),
        keys: keys
            .iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(" or "),
    })
}

/// A client configuration for a remote cluster from kubeconfig text, sanitized the way Flux
/// does: exec and auth-provider plugins and disabled TLS verification are refused (this
/// controller has no `--insecure-kubeconfig-*` flags), and so is every reference to a file
/// (see [`refuse_file_references`]); 30s connect timeout. Nothing is read from disk and no
/// request is sent for a refused kubeconfig.
pub async fn remote_config(text: &str) -> Result<Config, ClientError> {
    let kc = Kubeconfig::from_yaml(text).map_err(|e| ClientError::Kubeconfig(e.to_string()))?;
    refuse_file_references(&kc)?;
    let current = kc.current_context.clone().unwrap_or_default();
    let user = kc
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.clone());
    for a in &kc.auth_infos {
        if user.as_deref().is_some_and(|u| u != a.name) {
            continue;
        }
        if let Some(info) = &a.auth_info {
            if info.exec.is_some() {
                return Err(ClientError::NotAllowed(
                    "exec credential plugins are not allowed".into(),
                ));
            }
            if info.auth_provider.is_some() {
                return Err(ClientError::NotAllowed(
                    "auth-provider plugins are not allowed".into(),
                ));
            }
        }
    }
    if kc
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref())
        .any(|c| c.insecure_skip_tls_verify == Some(true))
    {
        return Err(ClientError::NotAllowed(
            "insecure-skip-tls-verify is not allowed".into(),
        ));
    }
    let mut cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| ClientError::Kubeconfig(e.to_string()))?;
    cfg.connect_timeout = Some(Duration::from_secs(30));
    Ok(cfg)
}

/// Refuses a kubeconfig from a tenant's Secret that names a file: `tokenFile`,
/// `client-certificate`, `client-key` (users) or `certificate-authority` (clusters). The
/// client would read them from the controller's own filesystem, so a tenant could send the
/// controller's ServiceAccount token to a server of its choice. Flux keeps only the inline
/// data of a kubeconfig; we refuse instead of dropping, so the tenant sees why. Every entry
/// is checked, not only the current context's: none of them has a use for a file.
pub fn refuse_file_references(kc: &Kubeconfig) -> Result<(), ClientError> {
    let refused = |kind: &str, name: &str, field: &str| {
        Err(ClientError::NotAllowed(format!(
            "{kind} '{name}' references a file ({field}): file references are not allowed, \
             use the inline -data fields or token instead"
        )))
    };
    for a in &kc.auth_infos {
        let Some(info) = &a.auth_info else { continue };
        if info.token_file.is_some() {
            return refused("user", &a.name, "tokenFile");
        }
        if info.client_certificate.is_some() {
            return refused("user", &a.name, "client-certificate");
        }
        if info.client_key.is_some() {
            return refused("user", &a.name, "client-key");
        }
    }
    for c in &kc.clusters {
        if c.cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            return refused("cluster", &c.name, "certificate-authority");
        }
    }
    Ok(())
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
    Finalize(String),
}

/// `system:serviceaccount:<ns>:<sa>` for the spec's (or the default) service account.
pub fn impersonation_user(
    namespace: &str,
    spec_sa: Option<&str>,
    default_sa: &str,
) -> Option<String> {
    let sa = spec_sa.filter(|s| !s.is_empty()).unwrap_or(default_sa);
    (!sa.is_empty()).then(|| format!("system:serviceaccount:{namespace}:{sa}"))
}

/// The build overrides from the spec.
pub fn overrides_from_spec(spec: &KustomizationSpec) -> FluxOverrides {
    let meta = spec.common_metadata.clone().unwrap_or_default();
    let pairs = |m: Option<BTreeMap<String, String>>| m.unwrap_or_default().into_iter().collect();
    FluxOverrides {
        target_namespace: spec.target_namespace.clone().filter(|s| !s.is_empty()),
        name_prefix: spec.name_prefix.clone().filter(|s| !s.is_empty()),
        name_suffix: spec.name_suffix.clone().filter(|s| !s.is_empty()),
        common_labels: pairs(meta.labels),
        common_annotations: pairs(meta.annotations),
        patches: spec
            .patches
            .iter()
            .flatten()
            .filter_map(|p| serde_json::to_value(p).ok())
            .collect(),
        images: spec
            .images
            .iter()
            .flatten()
            .filter_map(|i| serde_json::to_value(i).ok())
            .collect(),
        components: spec.components.clone().unwrap_or_default(),
        ignore_missing_components: spec.ignore_missing_components.unwrap_or(false),
        build_metadata: spec
            .build_metadata
            .iter()
            .flatten()
            .filter_map(|b| serde_json::to_value(b).ok())
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
    }
}

/// Condition type set while the spec uses fields this controller accepts but does not act on.
/// It is not a Flux condition type; kstatus and the `flux` CLI ignore unknown types.
pub const UNSUPPORTED_FIELDS: &str = "UnsupportedFields";
/// Reason of the [`UNSUPPORTED_FIELDS`] condition.
pub const NOT_IMPLEMENTED_REASON: &str = "NotImplemented";

/// Spec fields this pipeline does not act on (yet); each is reported, never silently ignored.
pub fn unsupported_fields(spec: &KustomizationSpec) -> (Vec<&'static str>, Vec<&'static str>) {
    // Refused: acting without them would apply the wrong thing or to the wrong cluster.
    let mut refused = Vec::new();
    // Warned: the reconcile is still correct without them, only less strict. None today
    // (healthCheckExprs and dependsOn[].readyExpr are implemented in `cel.rs`).
    let warned = Vec::new();
    for f in spec.set_fields() {
        match f {
            "decryption" => refused.push(f),
            "kubeConfig"
                if spec
                    .kube_config
                    .as_ref()
                    .is_some_and(|k| k.config_map_ref.is_some()) =>
            {
                refused.push("kubeConfig.configMapRef")
            }
            _ => {}
        }
    }
    (refused, warned)
}

/// The objects named in `spec.healthChecks` (namespace defaults to the Kustomization's; an
/// empty `apiVersion` means `apps/v1`, as in Flux, for the testdata's `kind: Deployment` checks).
pub fn health_check_refs(spec: &KustomizationSpec, namespace: &str) -> Vec<ObjectRef> {
    spec.health_checks
        .iter()
        .flatten()
        .map(|h| {
            let api_version = h
                .api_version
                .as_deref()
                .filter(|v| !v.is_empty())
                .unwrap_or("apps/v1");
            let (group, version) = split_api_version(api_version);
            ObjectRef {
                group: group.to_string(),
                version: version.to_string(),
                kind: h.kind.clone(),
                namespace: h
                    .namespace
                    .clone()
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| namespace.to_string()),
                name: h.name.clone(),
            }
        })
        .collect()
}

/// Why a dependency blocks, or `None` when it is ready (Flux's rules: Ready at the current
/// generation, and, when it uses the same source, applied the same revision).
pub fn dependency_blocker(
    dep: &Kustomization,
    source_ns: &str,
    ks: &Kustomization,
    revision: &str,
) -> Option<String> {
    let id = format!("{}/{}", dep.namespace().unwrap_or_default(), dep.name_any());
    let status = dep.status.clone().unwrap_or_default();
    let conds = status.conditions.unwrap_or_default();
    if !cond::is_ready(&conds) || dep.meta().generation != status.observed_generation {
        return Some(format!("dependency '{id}' is not ready"));
    }
    let dep_ns = dep.namespace().unwrap_or_default();
    let same_source = dep.spec.source_ref.kind == ks.spec.source_ref.kind
        && dep.spec.source_ref.name == ks.spec.source_ref.name
        && dep.spec.source_ref.namespace_or(&dep_ns) == source_ns;
    if same_source && status.last_applied_revision.as_deref() != Some(revision) {
        return Some(format!("dependency '{id}' revision is not up to date"));
    }
    None
}

/// CEL (helper O): the `dependsOn[].readyExpr` check of one dependency. `Ok(None)`: ready;
/// `Ok(Some(msg))`: not ready (or the evaluation failed), retried; `Err(msg)`: the expression
/// does not compile, a terminal configuration error (Flux's texts).
pub fn ready_expr_blocker(
    expr: &str,
    ks: &Kustomization,
    dep: &Kustomization,
) -> Result<Option<String>, String> {
    let compiled = ReadyExpr::compile(expr).map_err(|e| {
        format!(
            "{TERMINAL_ERROR_MESSAGE}: failed to evaluate dependency {}: {e}",
            dep.name_any()
        )
    })?;
    let id = format!("{}/{}", dep.namespace().unwrap_or_default(), dep.name_any());
    let as_value = |k: &Kustomization| serde_json::to_value(k).map_err(|e| e.to_string());
    let (this, other) = match (as_value(ks), as_value(dep)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            return Ok(Some(format!(
                "failed to convert Kustomization to unstructured: {e}"
            )));
        }
    };
    match compiled.eval(&this, &other) {
        Ok(true) => Ok(None),
        Ok(false) => Ok(Some(format!(
            "dependency '{id}' is not ready according to readyExpr eval"
        ))),
        Err(e) => Ok(Some(e.to_string())),
    }
}

/// The history digest: sha256 of the built objects as the YAML stream kustomize prints, in build
/// order (Flux digests the same bytes, so both controllers record the same digest).
pub fn manifests_digest(objects: &[Value]) -> String {
    let yaml = rflux_kustomize::to_yaml_stream(objects);
    format!("sha256:{}", hex::encode(Sha256::digest(yaml.as_bytes())))
}

/// Records one reconciliation in `history` (newest first, at most [`HISTORY_LIMIT`]): the same
/// digest and status as the newest entry updates it, anything else prepends a new one.
pub fn record_history(
    history: &mut Vec<Snapshot>,
    digest: &str,
    status: &str,
    revision: &str,
    now: Timestamp,
    duration: Duration,
) {
    let now = Time(cond::truncate_to_seconds(now));
    let dur = format_go_duration(duration);
    if let Some(first) = history.first_mut()
        && first.digest == digest
        && first.last_reconciled_status == status
    {
        first.last_reconciled = now;
        first.last_reconciled_duration = dur;
        first.total_reconciliations = first.total_reconciliations.saturating_add(1);
        return;
    }
    history.insert(
        0,
        Snapshot {
            digest: digest.to_string(),
            first_reconciled: now.clone(),
            last_reconciled: now,
            last_reconciled_duration: dur,
            last_reconciled_status: status.to_string(),
            total_reconciliations: 1,
            metadata: Some(BTreeMap::from([(
                "revision".to_string(),
                revision.to_string(),
            )])),
        },
    );
    history.truncate(HISTORY_LIMIT);
}

/// When to come back after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// `--requeue-dependency`.
    Dependency,
    /// `spec.retryInterval`.
    Interval,
    /// Only when the object changes (stalled).
    Never,
    /// Stalled, but tried again at `spec.retryInterval`: the cause lives outside the object
    /// (a kubeconfig Secret), so fixing it needs no change of the Kustomization.
    StalledRetry,
}

/// A stage failure.
#[derive(Debug)]
struct Failure {
    reason: &'static str,
    message: String,
    retry: Retry,
    /// The revision the failure is about (`lastAttemptedRevision`), when known.
    revision: Option<String>,
}

impl Failure {
    fn new(reason: &'static str, message: impl Into<String>, retry: Retry) -> Self {
        Failure {
            reason,
            message: message.into(),
            retry,
            revision: None,
        }
    }
    fn at(mut self, revision: &str) -> Self {
        self.revision = Some(revision.to_string());
        self
    }
}

/// A successful run.
struct Applied {
    /// Whether anything was created, configured or deleted.
    changed: bool,
    revision: String,
    origin_revision: Option<String>,
    inventory: ResourceInventory,
    digest: String,
    /// `Healthy` condition message, `None` when nothing was health-checked.
    healthy: Option<String>,
}

fn api_for(ks: &Kustomization, client: &Client) -> Result<Api<Kustomization>, ReconcileError> {
    let ns = ks.namespace().ok_or(ReconcileError::NoNamespace)?;
    Ok(Api::namespaced(client.clone(), &ns))
}

fn owner_of(ks: &Kustomization) -> Owner {
    Owner {
        name: ks.name_any(),
        namespace: ks.namespace().unwrap_or_default(),
    }
}

fn inventory_refs(inv: Option<&ResourceInventory>) -> Vec<ObjectRef> {
    inv.map(|i| {
        i.entries
            .iter()
            .filter_map(|e| ObjectRef::from_entry(e).ok())
            .collect()
    })
    .unwrap_or_default()
}

async fn patch_status(
    api: &Api<Kustomization>,
    name: &str,
    status: &KustomizationStatus,
) -> Result<(), kube::Error> {
    let patch = json!({ "status": status });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

async fn event(
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

fn duration_of(field: &str, value: &str) -> Result<Duration, Failure> {
    parse_go_duration(value).map_err(|e| {
        Failure::new(
            RECONCILIATION_FAILED_REASON,
            format!("invalid spec.{field} '{value}': {e}"),
            Retry::Never,
        )
    })
}

/// Reconciles one Kustomization (the function given to `run_controller`).
pub async fn reconcile(
    obj: Arc<Kustomization>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let ks = obj.as_ref();
    let api = api_for(ks, &ctx.client)?;
    if ks.meta().deletion_timestamp.is_some() {
        let _slot = ctx.work_slots.clone().acquire_owned().await.ok();
        return finalize_deleted(ks, &api, &ctx).await;
    }
    // Taken once the source has an artifact (see Pipeline::run).
    let mut slot = None;
    if !ks.finalizers().iter().any(|f| f == FLUX_FINALIZER) {
        add_finalizer(&api, ks, FLUX_FINALIZER).await?;
    }
    if ks.spec.is_suspended() {
        tracing::info!("Reconciliation is suspended for this object");
        return Ok(no_requeue());
    }
    let start = Instant::now();
    let mut status = ks.status.clone().unwrap_or_default();
    let mut conds = status.conditions.take().unwrap_or_default();
    let generation = ks.meta().generation;
    let requested = cond::requested_at(ks.meta().annotations.as_ref()).map(str::to_string);
    let owner_key = (ks.namespace().unwrap_or_default(), ks.name_any());
    let _busy = ctx.tracker.as_ref().map(|t| t.begin(owner_key));

    let outcome = Pipeline {
        ks,
        ctx: &ctx,
        api: &api,
    }
    .run(&mut status, &mut conds, &mut slot)
    .await;

    let now = Timestamp::now();
    if requested.is_some() {
        status.last_handled_reconcile_at = requested;
    }
    let (action, ev) = match outcome {
        Ok(done) => {
            let msg = format!("Applied revision: {}", done.revision);
            cond::mark_ready(
                &mut conds,
                RECONCILIATION_SUCCEEDED_REASON,
                &msg,
                generation,
                now,
            );
            match &done.healthy {
                Some(m) => {
                    cond::mark_true(&mut conds, HEALTHY, SUCCEEDED_REASON, m, generation, now);
                }
                None => {
                    cond::delete(&mut conds, HEALTHY);
                }
            }
            status.observed_generation = generation;
            status.last_applied_revision = Some(done.revision.clone());
            status.last_attempted_revision = Some(done.revision.clone());
            status.last_applied_origin_revision = done.origin_revision.clone();
            status.inventory = Some(done.inventory);
            let mut history = status.history.take().unwrap_or_default();
            record_history(
                &mut history,
                &done.digest,
                RECONCILIATION_SUCCEEDED_REASON,
                &done.revision,
                now,
                start.elapsed(),
            );
            status.history = Some(history);
            let interval = parse_go_duration(&ks.spec.interval).unwrap_or(Duration::from_secs(600));
            let ev_msg = format!(
                "Reconciliation finished in {}, next run in {}",
                format_go_duration(start.elapsed()),
                ks.spec.interval
            );
            // A reconcile that changed nothing of a Ready Kustomization is logged, not
            // recorded as an event (Flux records one every time).
            let quiet = !done.changed && ready_at(ks, &done.revision);
            if quiet {
                tracing::info!(revision = %done.revision, "{ev_msg}");
            }
            (
                requeue_success(interval, ctx.jitter_percentage),
                (
                    EventType::Normal,
                    RECONCILIATION_SUCCEEDED_REASON,
                    ev_msg,
                    done.revision,
                    quiet,
                ),
            )
        }
        Err(f) => {
            if let Some(rev) = &f.revision {
                status.last_attempted_revision = Some(rev.clone());
            }
            if f.reason == INVALID_CEL_EXPRESSION_REASON {
                // CEL (helper O): a terminal configuration error is observed (Flux).
                status.observed_generation = generation;
            }
            if matches!(f.retry, Retry::Never | Retry::StalledRetry) {
                cond::mark_stalled(&mut conds, f.reason, &f.message, generation, now);
            } else {
                // Like Flux, Reconciling keeps the message of the stage that was in progress.
                let progress = cond::get(&conds, RECONCILING)
                    .filter(|c| c.status == "True" && c.reason == PROGRESSING_REASON)
                    .map_or_else(|| f.message.clone(), |c| c.message.clone());
                cond::mark_false(&mut conds, READY, f.reason, &f.message, generation, now);
                cond::mark_true(
                    &mut conds,
                    RECONCILING,
                    PROGRESSING_WITH_RETRY_REASON,
                    &progress,
                    generation,
                    now,
                );
            }
            if f.reason == HEALTH_CHECK_FAILED_REASON {
                cond::mark_false(&mut conds, HEALTHY, f.reason, &f.message, generation, now);
            }
            let action = match f.retry {
                Retry::Dependency => requeue_dependency(ctx.requeue_dependency),
                Retry::Interval | Retry::StalledRetry => Action::requeue(
                    parse_go_duration(ks.spec.retry_interval()).unwrap_or(Duration::from_secs(60)),
                ),
                Retry::Never => no_requeue(),
            };
            let rev = f.revision.unwrap_or_default();
            // Flux only logs a missing source or artifact (no event) while it waits for it.
            let quiet = f.retry == Retry::Dependency && f.reason == ARTIFACT_FAILED_REASON;
            if quiet {
                tracing::info!(message = %f.message, "waiting for the source");
            }
            (
                action,
                (EventType::Warning, f.reason, f.message, rev, quiet),
            )
        }
    };
    status.conditions = Some(conds);
    // A retry that changes nothing (still waiting for the same source) writes nothing.
    let unchanged = ks
        .status
        .as_ref()
        .is_some_and(|old| serde_json::to_value(old).ok() == serde_json::to_value(&status).ok());
    if !unchanged {
        patch_status(&api, &ks.name_any(), &status).await?;
    }
    let (t, reason, msg, rev, quiet) = ev;
    // A dependency wait is routine: Flux records it at info severity.
    let t = if reason == DEPENDENCY_NOT_READY_REASON {
        EventType::Normal
    } else {
        t
    };
    if !quiet {
        event(&ctx, ks, t, reason, &msg, &rev).await;
    }
    Ok(action)
}

/// Whether `ks`, as this reconcile found it, is Ready at its generation with `revision`
/// applied (a reconcile of it that changes nothing is a quiet re-run).
fn ready_at(ks: &Kustomization, revision: &str) -> bool {
    ks.status.as_ref().is_some_and(|s| {
        cond::is_ready(s.conditions.as_deref().unwrap_or_default())
            && s.observed_generation == ks.meta().generation
            && s.last_applied_revision.as_deref() == Some(revision)
    })
}

/// The stages of one reconciliation.
struct Pipeline<'a> {
    ks: &'a Kustomization,
    ctx: &'a Context,
    api: &'a Api<Kustomization>,
}

impl Pipeline<'_> {
    async fn run(
        &self,
        status: &mut KustomizationStatus,
        conds: &mut Vec<Condition>,
        slot: &mut Option<OwnedSemaphorePermit>,
    ) -> Result<Applied, Failure> {
        let spec = &self.ks.spec;
        let ns = self.ks.namespace().unwrap_or_default();
        let generation = self.ks.meta().generation;

        // CEL (helper O): compile healthCheckExprs once per reconcile; an invalid expression
        // is terminal (Stalled InvalidCELExpression), checked before anything else.
        let health_exprs = HealthExprs::compile(
            spec.health_check_exprs.as_deref().unwrap_or_default(),
        )
        .map_err(|e| {
            Failure::new(
                INVALID_CEL_EXPRESSION_REASON,
                format!("{TERMINAL_ERROR_MESSAGE}: {e}"),
                Retry::Never,
            )
        })?;

        let (refused, warned) = unsupported_fields(spec);
        if warned.is_empty() {
            cond::delete(conds, UNSUPPORTED_FIELDS);
        } else {
            let list: Vec<String> = warned.iter().map(|f| format!("spec.{f}")).collect();
            let message = format!(
                "{} accepted but not acted on by this controller yet",
                list.join(", ")
            );
            tracing::warn!(fields = ?warned, "{message}");
            cond::mark_true(
                conds,
                UNSUPPORTED_FIELDS,
                NOT_IMPLEMENTED_REASON,
                &message,
                generation,
                Timestamp::now(),
            );
        }
        if !refused.is_empty() {
            let list: Vec<String> = refused.iter().map(|f| format!("spec.{f}")).collect();
            return Err(Failure::new(
                RECONCILIATION_FAILED_REASON,
                format!("{} not supported by this controller yet", list.join(", ")),
                Retry::Never,
            ));
        }
        let timeout = duration_of("timeout", spec.timeout.as_deref().unwrap_or(&spec.interval))?;
        duration_of("interval", &spec.interval)?;
        duration_of("retryInterval", spec.retry_interval())?;

        // Stage: source. Waiting for one holds no work slot; the rest of the pipeline does.
        let (source_ns, artifact) = self.source().await?;
        *slot = self.ctx.work_slots.clone().acquire_owned().await.ok();
        let revision = artifact.revision.clone();
        cond::mark_reconciling(
            conds,
            PROGRESSING_REASON,
            &format!(
                "Fetching manifests for revision {revision} with a timeout of {}",
                format_go_duration(timeout)
            ),
            generation,
            Timestamp::now(),
        );
        // A re-run of the applied revision of a Ready Kustomization does not announce itself:
        // most change nothing, and the final status follows in milliseconds.
        if !ready_at(self.ks, &revision) {
            status.conditions = Some(conds.clone());
            if let Err(e) = patch_status(self.api, &self.ks.name_any(), status).await {
                tracing::warn!(error = %e, "unable to record progress");
            }
            status.conditions = None;
        }

        // Stage: dependsOn.
        self.dependencies(&source_ns, &revision)
            .await
            .map_err(|f| f.at(&revision))?;

        // Stage: fetch.
        let dir = tempfile::tempdir().map_err(|e| {
            Failure::new(
                ARTIFACT_FAILED_REASON,
                format!("failed to create temp dir: {e}"),
                Retry::Interval,
            )
            .at(&revision)
        })?;
        self.ctx
            .fetcher
            .fetch_into(&artifact.url, &artifact.digest, dir.path())
            .await
            .map_err(|e| {
                Failure::new(ARTIFACT_FAILED_REASON, e.to_string(), Retry::Interval).at(&revision)
            })?;

        // Stage: build. Like Flux, a missing path is an artifact failure, found before building.
        let root = dir.path().to_path_buf();
        let path = spec.path.clone().unwrap_or_else(|| "./".into());
        let build_dir = rflux_kustomize::flux::secure_join(&root, Path::new(&path));
        if !build_dir.exists() {
            return Err(Failure::new(
                ARTIFACT_FAILED_REASON,
                format!(
                    "kustomization path not found: stat {}: no such file or directory",
                    build_dir.display()
                ),
                Retry::Interval,
            )
            .at(&revision));
        }
        // Flux reports each stage on the Reconciling condition; a failure keeps the last one.
        cond::mark_reconciling(
            conds,
            PROGRESSING_REASON,
            &format!(
                "Building manifests for revision {revision} with a timeout of {}",
                format_go_duration(timeout)
            ),
            generation,
            Timestamp::now(),
        );
        let overrides = overrides_from_spec(spec);
        let built = tokio::task::spawn_blocking(move || {
            rflux_kustomize::build_flux(&root, Path::new(&path), &overrides)
        })
        .await
        .map_err(|e| {
            Failure::new(
                BUILD_FAILED_REASON,
                format!("build task failed: {e}"),
                Retry::Interval,
            )
        })
        .and_then(|r| {
            r.map_err(|e| Failure::new(BUILD_FAILED_REASON, e.to_string(), Retry::Interval))
        })
        .map_err(|f| f.at(&revision))?;
        let objects: Vec<Value> = built.into_iter().map(|r| r.obj).collect();
        drop(dir);

        // Stage: substitute.
        let objects = post_build(
            &self.ctx.client,
            &ns,
            spec.post_build.as_ref(),
            objects,
            self.ctx.strict_substitutions,
        )
        .await
        .map_err(|e| {
            Failure::new(BUILD_FAILED_REASON, e.to_string(), Retry::Interval).at(&revision)
        })?;
        let digest = manifests_digest(&objects);

        // Stage: apply (as the service account).
        cond::mark_reconciling(
            conds,
            PROGRESSING_REASON,
            &format!(
                "Detecting drift for revision {revision} with a timeout of {}",
                format_go_duration(timeout)
            ),
            generation,
            Timestamp::now(),
        );
        let client = self.ctx.apply_client(self.ks).await.map_err(|e| {
            let retry = if e.is_refused() {
                Retry::StalledRetry
            } else {
                Retry::Interval
            };
            Failure::new(RECONCILIATION_FAILED_REASON, e.to_string(), retry).at(&revision)
        })?;
        let resolver = Resolver::new(client);
        let owner = owner_of(self.ks);
        let owner_key = (owner.namespace.clone(), owner.name.clone());
        let mut opts = ApplyOptions::new(owner.clone());
        // The tracker watches the local cluster only.
        let tracker = self
            .ctx
            .tracker
            .clone()
            .filter(|_| spec.kube_config.is_none());
        opts.tracker = tracker.clone();
        opts.tracker_salt = {
            let mut h = DefaultHasher::new();
            spec.force().hash(&mut h);
            serde_json::to_string(&spec.ignore)
                .unwrap_or_default()
                .hash(&mut h);
            self.ctx.override_managers.hash(&mut h);
            impersonation_user(
                &ns,
                spec.service_account_name.as_deref(),
                &self.ctx.default_service_account,
            )
            .hash(&mut h);
            h.finish()
        };
        opts.force = spec.force();
        opts.wait_timeout = timeout;
        opts.override_managers = self.ctx.override_managers.clone();
        opts.custom_stage_kinds = self.ctx.custom_stage_kinds.clone();
        opts.ignore =
            compile_ignore_rules(spec.ignore.as_deref().unwrap_or_default()).map_err(|e| {
                Failure::new(
                    RECONCILIATION_FAILED_REASON,
                    format!("invalid spec.ignore: {e}"),
                    Retry::Never,
                )
                .at(&revision)
            })?;
        let changes = apply_all_with(&resolver, objects, &opts)
            .await
            .map_err(|e| {
                Failure::new(RECONCILIATION_FAILED_REASON, e.to_string(), Retry::Interval)
                    .at(&revision)
            })?;
        self.changes_event(&changes, &revision).await;
        let mut changed = changes.has_changes();

        // Stage: prune.
        let mut new_inventory = inventory::build(changes.objects());
        if let Some(t) = &tracker {
            t.retain(&owner_key, &inventory_refs(Some(&new_inventory)));
        }
        if spec.prune
            && let Some(old) = status.inventory.as_ref()
        {
            let stale = inventory::diff(old, &new_inventory).map_err(|e| {
                Failure::new(PRUNE_FAILED_REASON, e.to_string(), Retry::Interval).at(&revision)
            })?;
            if !stale.is_empty() {
                match prune(&resolver, &stale, &owner).await {
                    Ok(pruned) => {
                        changed |= pruned.has_changes();
                        self.changes_event(&pruned, &revision).await;
                    }
                    Err(e) => {
                        inventory::merge_back(&mut new_inventory, &e.not_deleted);
                        status.inventory = Some(new_inventory);
                        return Err(Failure::new(
                            PRUNE_FAILED_REASON,
                            e.to_string(),
                            Retry::Interval,
                        )
                        .at(&revision));
                    }
                }
            }
        }
        // The new inventory is recorded even when the health check fails (the objects exist).
        status.inventory = Some(new_inventory.clone());

        // Stage: health.
        let mut targets: Vec<ObjectRef> = if spec.wait() {
            wait_targets(&changes, &owner)
        } else {
            Vec::new()
        };
        if !spec.wait() {
            targets.extend(health_check_refs(spec, &ns));
        }
        // The applied objects' health comes from the tracker's watches when it has them all.
        let watched = tracker
            .as_ref()
            .filter(|t| spec.wait() && health_exprs.is_empty() && t.covers(&owner_key, &targets));
        let healthy = if targets.is_empty() {
            None
        } else {
            let started = Instant::now();
            let waited = if let Some(t) = watched {
                // Waiting holds no work slot.
                slot.take();
                t.wait_current(&owner_key, &targets, timeout).await
            } else if spec.wait() {
                wait_for_applied(&resolver, &targets, timeout, &health_exprs).await
            } else {
                wait_for_with_exprs(&resolver, &targets, timeout, &health_exprs).await
            };
            waited.map_err(|e| {
                Failure::new(HEALTH_CHECK_FAILED_REASON, e.to_string(), Retry::Interval)
                    .at(&revision)
            })?;
            Some(format!(
                "Health check passed in {}",
                format_go_duration(started.elapsed())
            ))
        };

        Ok(Applied {
            changed,
            origin_revision: artifact
                .metadata
                .as_ref()
                .and_then(|m| m.get(ORIGIN_REVISION_KEY).cloned()),
            revision,
            inventory: new_inventory,
            digest,
            healthy,
        })
    }

    /// Resolves `spec.sourceRef` to a GitRepository with an artifact.
    async fn source(&self) -> Result<(String, Artifact), Failure> {
        let r = &self.ks.spec.source_ref;
        let ns = self.ks.namespace().unwrap_or_default();
        let source_ns = r.namespace_or(&ns).to_string();
        if r.kind != SourceKind::GitRepository {
            return Err(Failure::new(
                ARTIFACT_FAILED_REASON,
                format!(
                    "source kind '{}' is not supported by this controller (only GitRepository)",
                    r.kind
                ),
                Retry::Never,
            ));
        }
        if self.ctx.no_cross_namespace_refs && source_ns != ns {
            return Err(Failure::new(
                ACCESS_DENIED_REASON,
                format!(
                    "cannot access GitRepository/{source_ns}/{}, cross-namespace references have been blocked",
                    r.name
                ),
                Retry::Never,
            ));
        }
        let api: Api<GitRepository> = Api::namespaced(self.ctx.client.clone(), &source_ns);
        let id = format!("GitRepository/{source_ns}/{}", r.name);
        // The source watch's cache first (what a new revision triggered us with); a miss reads
        // the API, so a repository created a moment ago is not reported missing.
        let cached =
            self.ctx.sources.get().and_then(|store| {
                store.get(&reflector::ObjectRef::new(&r.name).within(&source_ns))
            });
        let fetched = match cached {
            Some(repo) => Ok(Some(repo.as_ref().clone())),
            None => api.get_opt(&r.name).await,
        };
        let repo = match fetched {
            Ok(Some(repo)) => repo,
            Ok(None) => {
                return Err(Failure::new(
                    ARTIFACT_FAILED_REASON,
                    format!("Source '{id}' not found"),
                    Retry::Dependency,
                ));
            }
            Err(e) => {
                return Err(Failure::new(
                    ARTIFACT_FAILED_REASON,
                    format!("unable to get source '{id}': {e}"),
                    Retry::Interval,
                ));
            }
        };
        match repo.status.and_then(|s| s.artifact) {
            Some(a) => Ok((source_ns, a)),
            None => Err(Failure::new(
                ARTIFACT_FAILED_REASON,
                format!(
                    "Source artifact not found, retrying in {}",
                    format_go_duration(self.ctx.requeue_dependency)
                ),
                Retry::Dependency,
            )),
        }
    }

    /// Checks `spec.dependsOn`.
    async fn dependencies(&self, source_ns: &str, revision: &str) -> Result<(), Failure> {
        let ns = self.ks.namespace().unwrap_or_default();
        let mut blockers = Vec::new();
        for d in self.ks.spec.depends_on.iter().flatten() {
            let dep_ns = d
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| ns.clone());
            if self.ctx.no_cross_namespace_refs && dep_ns != ns {
                return Err(Failure::new(
                    ACCESS_DENIED_REASON,
                    format!(
                        "cannot access Kustomization/{dep_ns}/{}, cross-namespace references have been blocked",
                        d.name
                    ),
                    Retry::Never,
                ));
            }
            let api: Api<Kustomization> = Api::namespaced(self.ctx.client.clone(), &dep_ns);
            match api.get_opt(&d.name).await {
                Ok(Some(dep)) => {
                    // CEL (helper O): readyExpr replaces the built-in check unless the
                    // AdditiveCELDependencyCheck gate is on.
                    if let Some(expr) = d.ready_expr.as_deref().filter(|e| !e.is_empty()) {
                        match ready_expr_blocker(expr, self.ks, &dep) {
                            Err(terminal) => {
                                return Err(Failure::new(
                                    INVALID_CEL_EXPRESSION_REASON,
                                    terminal,
                                    Retry::Never,
                                ));
                            }
                            Ok(Some(b)) => {
                                blockers.push(b);
                                continue;
                            }
                            Ok(None) if !self.ctx.additive_cel_dependency_check => continue,
                            Ok(None) => {}
                        }
                    }
                    if let Some(b) = dependency_blocker(&dep, source_ns, self.ks, revision) {
                        blockers.push(b);
                    }
                }
                Ok(None) => blockers.push(format!("dependency '{dep_ns}/{}' not found", d.name)),
                Err(e) => blockers.push(format!(
                    "unable to get '{dep_ns}/{}' dependency: {e}",
                    d.name
                )),
            }
        }
        if blockers.is_empty() {
            return Ok(());
        }
        Err(Failure::new(
            DEPENDENCY_NOT_READY_REASON,
            format!(
                "Dependencies do not meet ready condition ({}), retrying in {}",
                blockers.join("; "),
                format_go_duration(self.ctx.requeue_dependency)
            ),
            Retry::Dependency,
        ))
    }

    async fn changes_event(&self, changes: &ChangeSet, revision: &str) {
        if changes.has_changes() {
            event(
                self.ctx,
                self.ks,
                EventType::Normal,
                PROGRESSING_REASON,
                &changes.event_message(),
                revision,
            )
            .await;
        }
    }
}

/// Deletion: garbage-collect per `deletionPolicy`, then drop the finalizer.
async fn finalize_deleted(
    ks: &Kustomization,
    api: &Api<Kustomization>,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    if !ks.finalizers().iter().any(|f| f == FLUX_FINALIZER) {
        return Ok(no_requeue());
    }
    let status = ks.status.clone().unwrap_or_default();
    let refs = inventory_refs(status.inventory.as_ref());
    let action = finalize_action(
        ks.spec.deletion_policy(),
        ks.spec.prune,
        ks.spec.is_suspended(),
        refs.is_empty(),
    );
    let timeout = parse_go_duration(ks.spec.timeout.as_deref().unwrap_or(&ks.spec.interval))
        .unwrap_or(Duration::from_secs(300));
    // Nothing to delete: no client is needed (a remote whose kubeconfig Secret is gone must not
    // block the deletion).
    if action != FinalizeAction::Orphan {
        let client = ctx.apply_client(ks).await?;
        let resolver = Resolver::new(client);
        let rev = status.last_applied_revision.unwrap_or_default();
        match finalize(&resolver, &refs, &owner_of(ks), action, timeout).await {
            Ok(out) => {
                if out.changes.has_changes() {
                    event(
                        ctx,
                        ks,
                        EventType::Normal,
                        "Progressing",
                        &out.changes.event_message(),
                        &rev,
                    )
                    .await;
                }
                if let Some(e) = out.termination_error {
                    let msg = format!("failed to wait for resources termination: {e}");
                    event(ctx, ks, EventType::Warning, "TerminationFailed", &msg, &rev).await;
                }
            }
            Err(e) => {
                event(
                    ctx,
                    ks,
                    EventType::Warning,
                    PRUNE_FAILED_REASON,
                    &e.to_string(),
                    &rev,
                )
                .await;
                return Err(ReconcileError::Finalize(e.to_string()));
            }
        }
    }
    if let Some(t) = &ctx.tracker {
        t.forget_owner(&(ks.namespace().unwrap_or_default(), ks.name_any()));
    }
    remove_finalizer(api, ks, FLUX_FINALIZER).await?;
    Ok(no_requeue())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ks(v: Value) -> Kustomization {
        serde_json::from_value(v).unwrap()
    }

    fn base() -> Value {
        json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "app", "namespace": "apps", "generation": 2},
            "spec": {"interval": "1m", "prune": true, "path": "./deploy",
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}}
        })
    }

    #[test]
    fn impersonation_prefers_spec_then_default() {
        assert_eq!(
            impersonation_user("ns", Some("deployer"), "dflt").as_deref(),
            Some("system:serviceaccount:ns:deployer")
        );
        assert_eq!(
            impersonation_user("ns", Some(""), "dflt").as_deref(),
            Some("system:serviceaccount:ns:dflt")
        );
        assert_eq!(impersonation_user("ns", None, ""), None);
    }

    #[test]
    fn overrides_carry_spec_fields() {
        let mut v = base();
        v["spec"]["targetNamespace"] = json!("prod");
        v["spec"]["namePrefix"] = json!("p-");
        v["spec"]["commonMetadata"] = json!({"labels": {"team": "a"}});
        v["spec"]["images"] = json!([{"name": "nginx", "newTag": "1.2"}]);
        v["spec"]["patches"] = json!([{"patch": "x", "target": {"kind": "Deployment"}}]);
        let o = overrides_from_spec(&ks(v).spec);
        assert_eq!(o.target_namespace.as_deref(), Some("prod"));
        assert_eq!(o.name_prefix.as_deref(), Some("p-"));
        assert_eq!(o.name_suffix, None);
        assert_eq!(o.common_labels, vec![("team".to_string(), "a".to_string())]);
        assert_eq!(o.images[0]["newTag"], "1.2");
        assert_eq!(o.patches[0]["target"]["kind"], "Deployment");
    }

    #[test]
    fn unsupported_fields_are_reported() {
        let mut v = base();
        v["spec"]["decryption"] = json!({"provider": "sops"});
        v["spec"]["healthCheckExprs"] = json!([{"apiVersion": "v1", "current": "true"}]);
        v["spec"]["dependsOn"] = json!([{"name": "dep", "readyExpr": "true"}]);
        let (refused, warned) = unsupported_fields(&ks(v).spec);
        assert_eq!(refused, vec!["decryption"]);
        // CEL fields are implemented (helper O): not reported any more.
        assert!(warned.is_empty(), "{warned:?}");
        let mut v = base();
        v["spec"]["kubeConfig"] = json!({"secretRef": {"name": "remote"}});
        assert!(unsupported_fields(&ks(v).spec).0.is_empty());
        let mut v = base();
        v["spec"]["kubeConfig"] = json!({"configMapRef": {"name": "cloud"}});
        assert_eq!(
            unsupported_fields(&ks(v).spec).0,
            vec!["kubeConfig.configMapRef"]
        );
        let (r, w) = unsupported_fields(&ks(base()).spec);
        assert!(r.is_empty() && w.is_empty());
    }

    #[test]
    fn health_checks_default_namespace() {
        let mut v = base();
        v["spec"]["healthChecks"] = json!([
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "namespace": "other"},
            {"kind": "Deployment", "name": "backend"},
            {"apiVersion": "", "kind": "Deployment", "name": "frontend"}
        ]);
        let refs = health_check_refs(&ks(v).spec, "apps");
        assert_eq!(refs[0].group, "apps");
        assert_eq!(refs[0].namespace, "apps");
        assert_eq!(refs[1].group, "");
        assert_eq!(refs[1].version, "v1");
        assert_eq!(refs[1].namespace, "other");
        for r in &refs[2..] {
            assert_eq!(
                (r.group.as_str(), r.version.as_str()),
                ("apps", "v1"),
                "{r:?}"
            );
        }
    }

    fn ready_dep(generation: i64, observed: i64, applied: &str) -> Kustomization {
        let mut v = base();
        v["metadata"]["name"] = json!("dep");
        v["metadata"]["generation"] = json!(generation);
        v["status"] = json!({
            "observedGeneration": observed,
            "lastAppliedRevision": applied,
            "conditions": [{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded",
                            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
        });
        ks(v)
    }

    #[test]
    fn dependency_rules() {
        let me = ks(base());
        assert_eq!(
            dependency_blocker(&ready_dep(1, 1, "r1"), "apps", &me, "r1"),
            None
        );
        assert!(
            dependency_blocker(&ready_dep(2, 1, "r1"), "apps", &me, "r1")
                .unwrap()
                .contains("is not ready")
        );
        assert!(
            dependency_blocker(&ready_dep(1, 1, "r0"), "apps", &me, "r1")
                .unwrap()
                .contains("revision is not up to date")
        );
        // A different source: the revision is not compared.
        let mut other = ready_dep(1, 1, "r0");
        other.spec.source_ref.name = "other".into();
        assert_eq!(dependency_blocker(&other, "apps", &me, "r1"), None);
    }

    #[test]
    fn ready_expr_rules() {
        let mut me = base();
        me["metadata"]["labels"] = json!({"tier": "web"});
        let me = ks(me);
        let mut dep = ready_dep(1, 1, "r0");
        dep.metadata.labels = Some(BTreeMap::from([("tier".to_string(), "web".to_string())]));
        let same_tier = "dep.metadata.labels.tier == self.metadata.labels.tier";
        assert_eq!(ready_expr_blocker(same_tier, &me, &dep), Ok(None));
        dep.metadata.labels = Some(BTreeMap::from([("tier".to_string(), "db".to_string())]));
        assert_eq!(
            ready_expr_blocker(same_tier, &me, &dep),
            Ok(Some(
                "dependency 'apps/dep' is not ready according to readyExpr eval".to_string()
            ))
        );
        // An evaluation error is retried, not terminal.
        let missing = ready_expr_blocker("dep.status.nothing == 1", &me, &dep)
            .unwrap()
            .unwrap();
        assert!(
            missing.starts_with("failed to evaluate the CEL expression"),
            "{missing}"
        );
        // A compile error is terminal.
        let err = ready_expr_blocker("dep.status.(", &me, &dep).unwrap_err();
        assert!(
            err.starts_with(
                "Reconciliation failed terminally due to configuration error: \
                 failed to evaluate dependency dep: failed to parse the CEL expression 'dep.status.('"
            ),
            "{err}"
        );
        let err = ready_expr_blocker("foo == 1", &me, &dep).unwrap_err();
        assert!(err.contains("undeclared reference to 'foo'"), "{err}");
    }

    #[test]
    fn history_updates_or_prepends() {
        let mut h = Vec::new();
        let now = Timestamp::now();
        record_history(
            &mut h,
            "sha256:a",
            "ReconciliationSucceeded",
            "r1",
            now,
            Duration::from_secs(1),
        );
        record_history(
            &mut h,
            "sha256:a",
            "ReconciliationSucceeded",
            "r1",
            now,
            Duration::from_secs(2),
        );
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].total_reconciliations, 2);
        assert_eq!(h[0].last_reconciled_duration, "2s");
        for i in 0..6 {
            record_history(
                &mut h,
                &format!("sha256:{i}"),
                "x",
                "r",
                now,
                Duration::ZERO,
            );
        }
        assert_eq!(h.len(), HISTORY_LIMIT);
        assert_eq!(h[0].digest, "sha256:5");
    }

    #[test]
    fn digest_depends_on_content() {
        let a = manifests_digest(&[json!({"a": 1})]);
        assert_ne!(a, manifests_digest(&[json!({"a": 2})]));
        assert!(a.starts_with("sha256:"));
    }

    fn secret(data: &[(&str, &str)]) -> Secret {
        use k8s_openapi::ByteString;
        let mut sec: Secret = serde_json::from_value(json!({
            "metadata": {"name": "kc", "namespace": "apps"}
        }))
        .unwrap();
        sec.data = Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        );
        sec
    }

    #[test]
    fn kubeconfig_key_order() {
        let both = secret(&[("value", "A"), ("value.yaml", "B"), ("custom", "C")]);
        assert_eq!(kubeconfig_from_secret(&both, None).unwrap(), "A");
        assert_eq!(kubeconfig_from_secret(&both, Some("custom")).unwrap(), "C");
        let yaml_only = secret(&[("value.yaml", "B")]);
        assert_eq!(kubeconfig_from_secret(&yaml_only, None).unwrap(), "B");
        let err = kubeconfig_from_secret(&yaml_only, Some("custom")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kubeconfig secret 'apps/kc' has no key 'custom'"
        );
        let err = kubeconfig_from_secret(&secret(&[]), None).unwrap_err();
        assert!(err.to_string().contains("'value' or 'value.yaml'"), "{err}");
    }

    fn kubeconfig(user: &str, cluster_extra: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:6443\n{cluster_extra}contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\nusers:\n- name: u\n  user:\n{user}"
        )
    }

    #[tokio::test]
    async fn remote_config_is_sanitized() {
        let ok = remote_config(&kubeconfig("    token: abc\n", ""))
            .await
            .unwrap();
        assert_eq!(ok.cluster_url.to_string(), "https://127.0.0.1:6443/");
        assert_eq!(ok.connect_timeout, Some(Duration::from_secs(30)));
        let exec = "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/true\n";
        let err = remote_config(&kubeconfig(exec, "")).await.unwrap_err();
        assert!(err.to_string().contains("exec"), "{err}");
        let insecure = "    insecure-skip-tls-verify: true\n";
        let err = remote_config(&kubeconfig("    token: abc\n", insecure))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("insecure"), "{err}");
        assert!(remote_config("not: [a kubeconfig").await.is_err());
    }

    /// A file reference in any user or cluster entry is refused before the kubeconfig is
    /// loaded, even where inline data would take precedence, and even when the file exists.
    #[tokio::test]
    async fn remote_config_refuses_file_references() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "controller-token").unwrap();
        let t = token.display();
        for (user, cluster, field) in [
            (format!("    tokenFile: {t}\n"), String::new(), "tokenFile"),
            (
                format!("    token: abc\n    tokenFile: {t}\n"),
                String::new(),
                "tokenFile",
            ),
            (
                format!("    client-certificate: {t}\n    client-key-data: Zm9v\n"),
                String::new(),
                "client-certificate",
            ),
            (
                format!("    client-certificate-data: Zm9v\n    client-key: {t}\n"),
                String::new(),
                "client-key",
            ),
            (
                "    token: abc\n".to_string(),
                format!("    certificate-authority: {t}\n"),
                "certificate-authority",
            ),
        ] {
            let err = remote_config(&kubeconfig(&user, &cluster))
                .await
                .unwrap_err();
            assert!(err.is_refused(), "{field}: {err}");
            let msg = err.to_string();
            assert!(
                msg.contains(field) && msg.contains("file references are not allowed"),
                "{field}: {msg}"
            );
        }
        // A user that the current context does not select is checked too.
        let other = format!(
            "{}- name: other\n  user:\n    tokenFile: {t}\n",
            kubeconfig("    token: abc\n", "")
        );
        let err = remote_config(&other).await.unwrap_err();
        assert!(err.to_string().contains("user 'other'"), "{err}");
        // Inline data stays allowed.
        let inline = "    client-certificate-data: Zm9v\n    client-key-data: YmFy\n";
        let ca = "    certificate-authority-data: Zm9v\n";
        let kc = Kubeconfig::from_yaml(&kubeconfig(inline, ca)).unwrap();
        assert!(refuse_file_references(&kc).is_ok());
    }
}
