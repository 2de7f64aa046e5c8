//! What the ResourceSet stages share: the context, the owner, status and event writes.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Config, ResourceExt};
use rflux_common::api::resourceset::{OWNER_GROUP, ResourceSet, ResourceSetStatus};
use rflux_common::runtime::ClientError;
use rflux_common::runtime::client::fenced_client;
use rflux_common::runtime::fence::WriteFence;
use rflux_common::runtime::{EventRecorder, EventType};
use rflux_ssa::{Owner, Resolver};
use serde_json::json;

/// What every ResourceSet reconcile shares.
pub struct Context {
    /// The controller's own client (inputs, dependencies, status).
    pub client: Client,
    /// The base configuration of the impersonating clients.
    pub config: Config,
    pub recorder: EventRecorder,
    /// `--default-service-account`.
    pub default_service_account: String,
    /// `--requeue-dependency` (Flux Operator's default: 5 s).
    pub requeue_dependency: Duration,
    /// `--interval-jitter-percentage`.
    pub jitter_percentage: u8,
    /// The manager's write fence (also on the impersonating clients).
    pub fence: WriteFence,
    /// `flux_resourceset_info`.
    pub info: super::info::InfoMetric,
    /// `--watch-configs-label-selector`: ConfigMaps and Secrets with these labels that a
    /// ResourceSet read (copy, convert, checksum) reconcile it when they change.
    pub watch_configs_label_selector: String,
    /// What each ResourceSet (namespace, name) read last, as `Kind/namespace/name`.
    /// Resolvers (discovery cache and client) by impersonated user ("" = the controller's own
    /// identity), kept across reconciles: discovery and the client's TLS set-up happen once.
    pub(crate) resolvers: std::sync::Mutex<std::collections::HashMap<String, Arc<Resolver>>>,
    pub(crate) reads: std::sync::Mutex<
        std::collections::HashMap<(String, String), std::collections::BTreeSet<String>>,
    >,
}

impl Context {
    /// A context with Flux Operator's defaults.
    pub fn new(client: Client, config: Config, recorder: EventRecorder) -> Self {
        Context {
            client,
            config,
            recorder,
            default_service_account: String::new(),
            requeue_dependency: Duration::from_secs(5),
            jitter_percentage: 5,
            fence: WriteFence::open(),
            info: super::info::InfoMetric::default(),
            watch_configs_label_selector: "reconcile.fluxcd.io/watch=Enabled".into(),
            resolvers: std::sync::Mutex::default(),
            reads: std::sync::Mutex::default(),
        }
    }
}

impl Context {
    /// The service account `rs` acts as: `serviceAccountName`, else `--default-service-account`
    /// (empty: the controller's own identity).
    pub(crate) fn service_account(&self, rs: &ResourceSet) -> String {
        rs.spec
            .service_account_name
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| self.default_service_account.clone())
    }

    /// The resolver (and client) that acts for `rs`, impersonating its service account.
    pub(crate) fn resolver_for(&self, rs: &ResourceSet) -> Result<Arc<Resolver>, ClientError> {
        let sa = self.service_account(rs);
        if sa.is_empty() {
            return self.resolver_as("");
        }
        let ns = rs.namespace().unwrap_or_default();
        self.resolver_as(&format!("system:serviceaccount:{ns}:{sa}"))
    }

    /// The resolver of the controller's own identity (providers, dependencies).
    pub(crate) fn own_resolver(&self) -> Result<Arc<Resolver>, ClientError> {
        self.resolver_as("")
    }

    /// The cached resolver impersonating `user` ("" = no impersonation).
    fn resolver_as(&self, user: &str) -> Result<Arc<Resolver>, ClientError> {
        let mut all = self
            .resolvers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(r) = all.get(user) {
            return Ok(r.clone());
        }
        let client = if user.is_empty() {
            self.client.clone()
        } else {
            let mut cfg = self.config.clone();
            cfg.auth_info.impersonate = Some(user.to_string());
            fenced_client(cfg, &self.fence)?
        };
        let r = Arc::new(Resolver::new(client));
        all.insert(user.to_string(), r.clone());
        Ok(r)
    }

    /// Records what `rs` read from the cluster (replacing the previous record).
    pub(crate) fn remember_reads(
        &self,
        rs: &ResourceSet,
        reads: std::collections::BTreeSet<String>,
    ) {
        let key = (rs.namespace().unwrap_or_default(), rs.name_any());
        let mut all = self
            .reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if reads.is_empty() {
            all.remove(&key);
        } else {
            all.insert(key, reads);
        }
    }

    /// Forgets a deleted ResourceSet's reads.
    pub(crate) fn forget_reads(&self, namespace: &str, name: &str) {
        self.reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// The ResourceSets that read `Kind/namespace/name`.
    pub(crate) fn readers_of(&self, reference: &str) -> Vec<(String, String)> {
        self.reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(_, refs)| refs.contains(reference))
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// The owner of what a ResourceSet applies: field manager `flux-operator`, owner labels under
/// `resourceset.fluxcd.controlplane.io`, per-object options under `fluxcd.controlplane.io`.
pub fn owner_of(rs: &ResourceSet) -> Owner {
    owner_for(&rs.name_any(), &rs.namespace().unwrap_or_default())
}

/// The owner for ResourceSet `namespace/name`.
pub fn owner_for(name: &str, namespace: &str) -> Owner {
    Owner {
        manager: crate::CONTROLLER_NAME.to_string(),
        group: OWNER_GROUP.to_string(),
        name: name.to_string(),
        namespace: namespace.to_string(),
        options_group: "fluxcd.controlplane.io".to_string(),
    }
}

pub(crate) async fn patch_status(
    api: &Api<ResourceSet>,
    rs: &ResourceSet,
    status: &ResourceSetStatus,
) -> Result<(), kube::Error> {
    let patch = json!({ "status": status });
    api.patch_status(
        &rs.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
}

pub(crate) async fn event(ctx: &Context, rs: &ResourceSet, t: EventType, reason: &str, msg: &str) {
    if let Err(e) = ctx.recorder.record(rs, t, reason, msg, &[]).await {
        tracing::warn!(error = %e, "unable to record event");
    }
}
