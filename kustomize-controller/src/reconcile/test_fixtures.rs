//! Kustomizations for the reconciler's unit tests.

use rflux_common::api::kustomization::Kustomization;
use serde_json::{Value, json};

/// A Kustomization from JSON.
pub fn ks(v: Value) -> Kustomization {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("invalid test Kustomization: {e}"))
}

/// `apps/app`, generation 2, pruning `./deploy` of GitRepository `repo`.
pub fn base() -> Value {
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "app", "namespace": "apps", "generation": 2},
        "spec": {"interval": "1m", "prune": true, "path": "./deploy",
                 "sourceRef": {"kind": "GitRepository", "name": "repo"}}
    })
}
