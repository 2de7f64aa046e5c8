//! `fluxcd.controlplane.io/recreateOnFailure: enabled` on a `batch/v1` Job (Flux Operator's):
//! before its step is applied, a live Job that kstatus sees as Failed, that carries this
//! ResourceSet's owner labels and is not `reconcile: disabled`, is deleted (foreground, with a
//! UID precondition) and awaited (5 s poll, 60 s at most), so that the apply creates it again.
//! It works even when the Job is `prune: disabled`.

use std::time::Duration;

use kube::api::{DeleteParams, Preconditions, PropagationPolicy};
use rflux_common::api::resourceset::RECREATE_ON_FAILURE_ANNOTATION;
use rflux_ssa::{ObjectRef, Owner, Resolver, Status};
use serde_json::Value;

/// Whether a desired object asks to be recreated when its live Job failed (pure).
pub fn wants_recreate(o: &Value) -> bool {
    o.get("apiVersion").and_then(Value::as_str) == Some("batch/v1")
        && o.get("kind").and_then(Value::as_str) == Some("Job")
        && o.pointer("/metadata/annotations")
            .and_then(|a| a.get(RECREATE_ON_FAILURE_ANNOTATION))
            .and_then(Value::as_str)
            .is_some_and(|v| v.eq_ignore_ascii_case("enabled"))
}

/// Whether the live Job is to be deleted: Failed, ours, not excluded (pure).
pub fn must_delete(live: &Value, owner: &Owner) -> bool {
    owner.owns(live)
        && !owner.is_ignored(live)
        && rflux_ssa::kstatus::compute(live).status == Status::Failed
}

/// Deletes the failed Jobs of `objects` that ask for it and waits until they are gone.
pub async fn recreate_failed_jobs(
    resolver: &Resolver,
    objects: &[Value],
    owner: &Owner,
) -> Result<(), String> {
    for o in objects.iter().filter(|o| wants_recreate(o)) {
        let id = ObjectRef::from_value(o).map_err(|e| e.to_string())?;
        let Some(live) = resolver.get_live(&id).await? else {
            continue;
        };
        let live_json = serde_json::to_value(&live).map_err(|e| e.to_string())?;
        if !must_delete(&live_json, owner) {
            continue;
        }
        let api = resolver.api(&id).await.map_err(|e| e.to_string())?;
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: live.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&id.name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => continue,
            Err(e) => return Err(format!("failed to delete failed Job {}: {e}", id.subject())),
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            match resolver.get_live(&id).await? {
                Some(l) if l.metadata.uid == live.metadata.uid => {}
                _ => break,
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "timeout waiting for failed Job {} to be deleted",
                    id.subject()
                ));
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owner() -> Owner {
        crate::resourceset::context::owner_for("app", "apps")
    }

    #[test]
    fn only_failed_owned_jobs_that_ask_for_it() {
        let desired = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "m", "annotations": {RECREATE_ON_FAILURE_ANNOTATION: "enabled"}}});
        assert!(wants_recreate(&desired));
        assert!(!wants_recreate(
            &json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "m"}})
        ));
        let labels = json!({"resourceset.fluxcd.controlplane.io/name": "app",
                            "resourceset.fluxcd.controlplane.io/namespace": "apps"});
        let failed = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "m", "labels": labels, "generation": 1},
            "status": {"conditions": [{"type": "Failed", "status": "True"}]}});
        assert!(must_delete(&failed, &owner()));
        let mut running = failed.clone();
        running["status"] = json!({"active": 1});
        assert!(!must_delete(&running, &owner()));
        let mut foreign = failed.clone();
        foreign["metadata"]["labels"] = json!({});
        assert!(!must_delete(&foreign, &owner()));
        let mut excluded = failed.clone();
        excluded["metadata"]["annotations"] =
            json!({"fluxcd.controlplane.io/reconcile": "disabled"});
        assert!(!must_delete(&excluded, &owner()));
    }
}
