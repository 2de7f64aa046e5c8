//! Argo CD `CreateNamespace=true` with `managedNamespaceMetadata` (issue 17;
//! `argo-semantics.md` §4.7), for Kustomizations that opt in to Argo sync semantics (feature
//! gate `ArgoSyncSemantics`, annotation `rflux.dev/argo-semantics: enabled`) and list
//! `CreateNamespace=true` in `rflux.dev/argo-sync-options`. The decisions are pure
//! (`argo/namespace.rs`); this file reads and writes the namespace.
//!
//! - [`ensure`], before the first wave: when `spec.targetNamespace` does not exist, it is
//!   created by server-side apply (our field manager) with the labels and annotations of
//!   `rflux.dev/argo-managed-namespace-metadata`, plus our mark `rflux.dev/created-by:
//!   <namespace>/<name>`. On later reconciles the namespace we created follows the metadata
//!   (keys dropped from it are removed). A namespace that exists and is not ours is left alone;
//!   a Namespace of that name in the build wins (the staged apply applies it).
//! - [`delete_created`], from the finalizer: when the Kustomization is deleted and its
//!   `deletionPolicy` garbage-collects (`MirrorPrune` with `prune: true`, `Delete`,
//!   `WaitForTermination`), the namespace is deleted if it carries our mark naming this
//!   Kustomization and is not in the inventory (an inventory Namespace follows Flux's rules).
//!
//! The namespace we create is never in the inventory and never pruned.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use rflux_common::api::kustomization::{DeletionPolicy, Kustomization};
use rflux_common::runtime::conditions::{PROGRESSING_REASON, READY, RECONCILIATION_FAILED_REASON};
use rflux_common::runtime::{EventType, Severity, StageError};
use serde_json::Value;

use super::client::ClientError;
use super::context::{Context, event};
use crate::argo::namespace::{
    NamespaceAction, NamespaceStep, creator, delete_on_finalize, namespace_step,
};
use crate::argo::{managed_namespace, settings};
use crate::identity::FIELD_MANAGER;
use crate::ssa::wait::wait_for_termination;
use crate::ssa::{ChangeSet, DeleteError, ObjectRef, Resolver};

/// The longest one read or write of the namespace may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A failure to read, write or delete the target namespace.
#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    /// The client of the target cluster could not be built.
    #[error("CreateNamespace: {0}")]
    Client(#[source] ClientError),
    /// An API call failed.
    #[error("CreateNamespace: unable to {verb} Namespace/{name}: {source}")]
    Api {
        /// What was done.
        verb: &'static str,
        /// The namespace.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// An API call did not answer in time.
    #[error("CreateNamespace: unable to {verb} Namespace/{name}: no answer within {secs} s")]
    Timeout {
        /// What was done.
        verb: &'static str,
        /// The namespace.
        name: String,
        /// The bound.
        secs: u64,
    },
    /// The live namespace could not be read as JSON.
    #[error("CreateNamespace: Namespace/{name} could not be read: {source}")]
    Decode {
        /// The namespace.
        name: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
}

/// One API call on Namespace `name`, bounded by [`CALL_TIMEOUT`].
async fn call<T>(
    verb: &'static str,
    name: &str,
    fut: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, NamespaceError> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(r) => r.map_err(|source| NamespaceError::Api {
            verb,
            name: name.to_string(),
            source,
        }),
        Err(_) => Err(NamespaceError::Timeout {
            verb,
            name: name.to_string(),
            secs: CALL_TIMEOUT.as_secs(),
        }),
    }
}

/// The live namespace `name` as JSON, `None` when it does not exist.
async fn read(api: &Api<Namespace>, name: &str) -> Result<Option<Value>, NamespaceError> {
    let live = call("read", name, api.get_opt(name)).await?;
    live.map(serde_json::to_value)
        .transpose()
        .map_err(|source| NamespaceError::Decode {
            name: name.to_string(),
            source,
        })
}

/// `<ks namespace>/<ks name>`, the value of our mark.
fn creator_of(ks: &Kustomization) -> String {
    creator(&ks.namespace().unwrap_or_default(), &ks.name_any())
}

/// Before the first wave: creates the target namespace, or keeps the metadata of the one we
/// created in sync (see the module doc). Does nothing unless the Kustomization opted in with
/// `CreateNamespace=true` (invalid opt-in annotations were refused by `waves::prepare`).
pub(super) async fn ensure(
    ctx: &Context,
    ks: &Kustomization,
    objects: &[Value],
    revision: &str,
) -> Result<(), StageError> {
    let opted = settings(ctx.argo_sync_semantics, ks.metadata.annotations.as_ref());
    let Some(settings) = opted.ok().flatten() else {
        return Ok(());
    };
    let target = ks.spec.target_namespace.as_deref();
    let Some(action) = managed_namespace(&settings, target, objects) else {
        return Ok(());
    };
    let (NamespaceAction::CreateIfMissing(_) | NamespaceAction::Apply(_), Some(name)) =
        (&action, target)
    else {
        return Ok(());
    };
    let failed = |e: NamespaceError| {
        let severity = match &e {
            NamespaceError::Client(c) if c.is_refused() => Severity::Misconfigured,
            _ => Severity::Generic,
        };
        StageError::new(severity, READY, RECONCILIATION_FAILED_REASON, e.to_string())
    };
    let client = ctx
        .apply_client(ks)
        .await
        .map_err(|e| failed(NamespaceError::Client(e)))?;
    let done = apply(client, &action, name, &creator_of(ks))
        .await
        .map_err(failed)?;
    if let Some(what) = done {
        let message = format!("Namespace/{name} {what}");
        tracing::info!(namespace = %name, "CreateNamespace: {message}");
        event(
            ctx,
            ks,
            EventType::Normal,
            PROGRESSING_REASON,
            &message,
            revision,
        )
        .await;
    }
    Ok(())
}

/// Reads the namespace and applies it when [`namespace_step`] says so; what was done
/// (`created`, `configured`), if anything.
async fn apply(
    client: Client,
    action: &NamespaceAction,
    name: &str,
    creator: &str,
) -> Result<Option<&'static str>, NamespaceError> {
    let api: Api<Namespace> = Api::all(client);
    let live = read(&api, name).await?;
    let (object, what) = match namespace_step(action, live.as_ref(), creator, FIELD_MANAGER) {
        NamespaceStep::Nothing => return Ok(None),
        NamespaceStep::Create(o) => (o, "created"),
        NamespaceStep::Update(o) => (o, "configured"),
    };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    call(
        "apply",
        name,
        api.patch(name, &params, &Patch::Apply(&object)),
    )
    .await?;
    Ok(Some(what))
}

/// The namespace the finalizer may delete: the Kustomization opted in (gate and annotation)
/// and has a target namespace. The caller checks that its `deletionPolicy` garbage-collects,
/// and our mark on the live namespace.
pub(super) fn deletion_candidate(gate: bool, ks: &Kustomization) -> Option<String> {
    settings(gate, ks.metadata.annotations.as_ref())
        .ok()
        .flatten()?;
    let name = ks
        .spec
        .target_namespace
        .as_deref()
        .filter(|n| !n.is_empty())?;
    Some(name.to_string())
}

/// From the finalizer, after the inventory was garbage-collected: deletes Namespace `name`
/// if we created it (our mark names `ks`) and it is not in `inventory`; with
/// `WaitForTermination`, waits (within `timeout`) until it is gone. A failed deletion keeps
/// the finalizer (the error); a failed wait is an event, as for the inventory.
pub(super) async fn delete_created(
    ctx: &Context,
    ks: &Kustomization,
    resolver: &Resolver,
    name: &str,
    inventory: &[ObjectRef],
    timeout: Duration,
    revision: &str,
) -> Result<(), DeleteError> {
    let ns_ref = ObjectRef {
        group: String::new(),
        version: "v1".into(),
        kind: "Namespace".into(),
        namespace: String::new(),
        name: name.to_string(),
    };
    let in_inventory = inventory
        .iter()
        .any(|r| r.group.is_empty() && r.kind == "Namespace" && r.name == name);
    let api: Api<Namespace> = Api::all(resolver.client().clone());
    let deleted = async {
        let live = read(&api, name).await?;
        if !delete_on_finalize(live.as_ref(), &creator_of(ks), in_inventory) {
            return Ok(false);
        }
        let gone = call(
            "delete",
            name,
            api.delete(name, &DeleteParams::background()),
        )
        .await;
        match gone {
            Ok(_) => Ok(true),
            Err(NamespaceError::Api {
                source: kube::Error::Api(e),
                ..
            }) if e.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }
    .await;
    let deleted = deleted.map_err(|e| DeleteError {
        errors: vec![e.to_string()],
        changes: ChangeSet::default(),
        not_deleted: vec![ns_ref.clone()],
    })?;
    if !deleted {
        return Ok(());
    }
    let message = format!("Namespace/{name} deleted");
    tracing::info!(namespace = %name, "CreateNamespace: {message}");
    event(
        ctx,
        ks,
        EventType::Normal,
        PROGRESSING_REASON,
        &message,
        revision,
    )
    .await;
    if ks.spec.deletion_policy() == DeletionPolicy::WaitForTermination
        && let Err(e) = wait_for_termination(resolver, &[ns_ref], timeout).await
    {
        let msg = format!("failed to wait for resources termination: {e}");
        event(
            ctx,
            ks,
            EventType::Warning,
            "TerminationFailed",
            &msg,
            revision,
        )
        .await;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ks(annotations: Value, spec: Value) -> Kustomization {
        let mut s = json!({"interval": "1m", "prune": true, "targetNamespace": "app",
                           "sourceRef": {"kind": "GitRepository", "name": "repo"}});
        if let (Some(dst), Some(src)) = (s.as_object_mut(), spec.as_object()) {
            dst.extend(src.clone());
        }
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system", "annotations": annotations},
            "spec": s
        }))
        .unwrap()
    }

    fn on() -> Value {
        json!({"rflux.dev/argo-semantics": "enabled",
               "rflux.dev/argo-sync-options": "CreateNamespace=true"})
    }

    #[test]
    fn deletion_candidate_needs_the_opt_in_and_a_target() {
        assert_eq!(
            deletion_candidate(true, &ks(on(), json!({}))).as_deref(),
            Some("app")
        );
        assert_eq!(creator_of(&ks(on(), json!({}))), "flux-system/apps");
        // Gate off, annotation absent or disabled: nothing changes.
        assert_eq!(deletion_candidate(false, &ks(on(), json!({}))), None);
        assert_eq!(deletion_candidate(true, &ks(json!({}), json!({}))), None);
        let disabled = json!({"rflux.dev/argo-semantics": "disabled",
                              "rflux.dev/argo-sync-options": "CreateNamespace=true"});
        assert_eq!(deletion_candidate(true, &ks(disabled, json!({}))), None);
        // No target namespace.
        let none = ks(on(), json!({"targetNamespace": null}));
        assert_eq!(deletion_candidate(true, &none), None);
        let empty = ks(on(), json!({"targetNamespace": ""}));
        assert_eq!(deletion_candidate(true, &empty), None);
    }
}
