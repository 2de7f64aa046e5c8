//! What every source reconcile and its stages share: the reconciler's state, and the two calls
//! to the outside world every stage may make (an event, a Secret).

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use std::collections::BTreeMap;

use kube::api::Api;
use kube::{Client, Resource};
use rflux_common::runtime::{EventRecorder, EventType};

use crate::artifact::Storage;

/// Field manager / reporting controller.
pub const CONTROLLER_NAME: &str = "source-controller";

/// Shared state of the reconciler.
#[derive(Clone)]
pub struct Context {
    pub client: Client,
    pub storage: Storage,
    pub recorder: EventRecorder,
    /// `--interval-jitter-percentage`.
    pub jitter_percentage: u8,
    /// `--requeue-dependency`.
    pub requeue_dependency: Duration,
    /// Bounds on OCI registry content.
    pub oci: crate::ocirepository::OciSettings,
}

/// The data of a Secret, by key.
pub type SecretData = BTreeMap<String, Vec<u8>>;

/// Records an event about `obj`; a failure to record is logged, not returned.
pub async fn record<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    t: EventType,
    reason: &str,
    message: &str,
    extra: &[(&str, &str)],
) {
    if let Err(e) = ctx.recorder.record(obj, t, reason, message, extra).await {
        tracing::warn!(error = %e, reason, "unable to record event");
    }
}

/// The data of Secret `ns/name` (`data`, overlaid with `stringData`).
pub async fn read_secret(client: &Client, ns: &str, name: &str) -> Result<SecretData, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    Ok(secret_data(api.get(name).await?))
}

/// A Secret's `data`, overlaid with `stringData`.
pub fn secret_data(s: Secret) -> SecretData {
    let mut out: SecretData = s
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, v) in s.string_data.unwrap_or_default() {
        out.insert(k, v.into_bytes());
    }
    out
}
