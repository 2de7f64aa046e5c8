//! The vocabulary of the `fluxcd.controlplane.io` kinds: group, kinds, finalizer, the
//! annotation and label keys the controller reads or writes, their defaults, and the
//! condition and event reasons (reference `resourceset.md` §1, §6, §11, §12.4).

use std::collections::BTreeMap;

/// API group of ResourceSet and ResourceSetInputProvider.
pub const GROUP: &str = "fluxcd.controlplane.io";
/// API version of both kinds (`fluxcd.controlplane.io/v1`).
pub const API_VERSION: &str = "fluxcd.controlplane.io/v1";
/// Kind name of a ResourceSet.
pub const RESOURCESET_KIND: &str = "ResourceSet";
/// Kind name of a ResourceSetInputProvider.
pub const INPUT_PROVIDER_KIND: &str = "ResourceSetInputProvider";

/// Finalizer put on both kinds.
pub const FINALIZER: &str = "fluxcd.controlplane.io/finalizer";
/// Field manager of server-side apply and of status patches.
pub const FIELD_MANAGER: &str = "flux-operator";

/// Value of the switch annotations that turns a feature on.
pub const ENABLED_VALUE: &str = "enabled";
/// Value of the switch annotations that turns a feature off.
pub const DISABLED_VALUE: &str = "disabled";

/// `disabled` on a ResourceSet/RSIP stops its reconciliation; on a rendered object it drops
/// the object from the build; as a label or annotation on an object, SSA skips it.
pub const RECONCILE_ANNOTATION: &str = "fluxcd.controlplane.io/reconcile";
/// Reconcile interval of a ResourceSet/RSIP (Go duration).
pub const RECONCILE_EVERY_ANNOTATION: &str = "fluxcd.controlplane.io/reconcileEvery";
/// Health-check (ResourceSet) or provider-call (RSIP) timeout (Go duration).
pub const RECONCILE_TIMEOUT_ANNOTATION: &str = "fluxcd.controlplane.io/reconcileTimeout";
/// `enabled`: recreate objects whose immutable fields changed (on the ResourceSet: all of
/// them; as a label or annotation of one object: that object).
pub const FORCE_ANNOTATION: &str = "fluxcd.controlplane.io/force";
/// `disabled` (label or annotation of a live object): never deleted by garbage collection.
pub const PRUNE_ANNOTATION: &str = "fluxcd.controlplane.io/prune";
/// `enabled` on a `batch/v1` Job: a failed Job is deleted and re-created before its step.
pub const RECREATE_ON_FAILURE_ANNOTATION: &str = "fluxcd.controlplane.io/recreateOnFailure";
/// `namespace/name` of the ConfigMap or Secret whose data a rendered ConfigMap/Secret copies.
pub const COPY_FROM_ANNOTATION: &str = "fluxcd.controlplane.io/copyFrom";
/// `namespace/name[:key]` of a kubeconfig Secret turned into `address`/`ca.crt` ConfigMap data.
pub const CONVERT_KUBECONFIG_FROM_ANNOTATION: &str = "fluxcd.controlplane.io/convertKubeConfigFrom";
/// Comma list of `Kind/namespace/name` ConfigMaps/Secrets whose data is hashed into
/// [`CHECKSUM_ANNOTATION`].
pub const CHECKSUM_FROM_ANNOTATION: &str = "fluxcd.controlplane.io/checksumFrom";
/// `sha256:` digest set next to [`CHECKSUM_FROM_ANNOTATION`].
pub const CHECKSUM_ANNOTATION: &str = "fluxcd.controlplane.io/checksum";
/// Event annotation: the revision a reconcile produced.
pub const REVISION_ANNOTATION: &str = "fluxcd.controlplane.io/revision";
/// Event annotation: the token that de-duplicates RSIP notifications.
pub const TOKEN_ANNOTATION: &str = "fluxcd.controlplane.io/token";

/// Any change of its value requests a reconcile; copied to `status.lastHandledReconcileAt`.
pub const RECONCILE_REQUEST_ANNOTATION: &str = super::super::meta::RECONCILE_REQUEST_ANNOTATION;
/// RSIP: run now even outside the schedule windows; copied to `status.lastHandledForceAt`.
pub const FORCE_REQUEST_ANNOTATION: &str = "reconcile.fluxcd.io/forceAt";
/// Label key that opts ConfigMaps and Secrets in to the config watchers.
pub const WATCH_LABEL: &str = "reconcile.fluxcd.io/watch";
/// Value of [`WATCH_LABEL`] that opts in.
pub const WATCH_LABEL_VALUE: &str = "Enabled";

/// Owner group of the objects a ResourceSet applies (prefix of the owner labels).
pub const OWNER_GROUP: &str = "resourceset.fluxcd.controlplane.io";
/// Owner label: name of the ResourceSet that applied the object.
pub const OWNER_NAME_LABEL: &str = "resourceset.fluxcd.controlplane.io/name";
/// Owner label: namespace of the ResourceSet that applied the object.
pub const OWNER_NAMESPACE_LABEL: &str = "resourceset.fluxcd.controlplane.io/namespace";

/// Default of [`RECONCILE_EVERY_ANNOTATION`] on a ResourceSet.
pub const RESOURCESET_DEFAULT_INTERVAL: &str = "1h";
/// Default of [`RECONCILE_TIMEOUT_ANNOTATION`] on a ResourceSet.
pub const RESOURCESET_DEFAULT_TIMEOUT: &str = "5m";
/// Default of [`RECONCILE_EVERY_ANNOTATION`] on a ResourceSetInputProvider.
pub const INPUT_PROVIDER_DEFAULT_INTERVAL: &str = "10m";
/// Default of [`RECONCILE_TIMEOUT_ANNOTATION`] on a ResourceSetInputProvider.
pub const INPUT_PROVIDER_DEFAULT_TIMEOUT: &str = "2m";

/// Most history snapshots kept in `status.history`.
pub const MAX_HISTORY: usize = 5;
/// Most input sets a `Permute` product may hold.
pub const MAX_PERMUTATIONS: usize = 10_000;
/// Most steps of `spec.steps` (the CRD's `maxItems`).
pub const MAX_STEPS: usize = 20;

/// Ready=Unknown and Reconciling: a reconcile is under way.
pub const PROGRESSING_REASON: &str = "Progressing";
/// Reconciling while the last attempt failed.
pub const PROGRESSING_WITH_RETRY_REASON: &str = "ProgressingWithRetry";
/// Ready=True after a successful reconcile (also the Normal event reason).
pub const RECONCILIATION_SUCCEEDED_REASON: &str = "ReconciliationSucceeded";
/// Ready=False after an apply, prune or health-check failure (RSIP: a fetch failure).
pub const RECONCILIATION_FAILED_REASON: &str = "ReconciliationFailed";
/// The object carries `fluxcd.controlplane.io/reconcile: disabled`.
pub const RECONCILIATION_DISABLED_REASON: &str = "ReconciliationDisabled";
/// A `dependsOn` object is missing or not ready.
pub const DEPENDENCY_NOT_READY_REASON: &str = "DependencyNotReady";
/// Inputs or templates could not be computed (stalled until the next change).
pub const BUILD_FAILED_REASON: &str = "BuildFailed";
/// A `dependsOn[].readyExpr` does not parse (stalled).
pub const INVALID_CEL_EXPRESSION_REASON: &str = "InvalidCELExpression";
/// A health check was cancelled by a new reconcile request.
pub const HEALTH_CHECK_CANCELED_REASON: &str = "HealthCheckCanceled";
/// Event reason of an apply that changed objects.
pub const APPLY_SUCCEEDED_REASON: &str = "ApplySucceeded";
/// RSIP: `spec.schedule` does not parse (stalled).
pub const INVALID_SCHEDULE_REASON: &str = "InvalidSchedule";
/// RSIP: no schedule window is open now; the next one is in `status.nextSchedule`.
pub const SKIPPED_DUE_TO_SCHEDULE_REASON: &str = "SkippedDueToSchedule";
/// RSIP: `spec.defaultValues` does not decode (stalled).
pub const INVALID_DEFAULT_VALUES_REASON: &str = "InvalidDefaultValues";
/// RSIP: the exported input sets are not valid.
pub const INVALID_EXPORTED_INPUTS_REASON: &str = "InvalidExportedInputs";
/// RSIP: a spec rule the controller re-checks is broken (stalled).
pub const INVALID_SPEC_REASON: &str = "InvalidSpec";

/// Message of Ready=Unknown while reconciling.
pub const RECONCILIATION_IN_PROGRESS_MSG: &str = "Reconciliation in progress";
/// Message of Ready=True for an object created with reconciliation disabled.
pub const INITIALIZED_DISABLED_MSG: &str = "Initialized with reconciliation suspended";

/// The value of annotation `key`, if present.
pub fn annotation<'a>(
    annotations: Option<&'a BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a str> {
    annotations.and_then(|a| a.get(key)).map(String::as_str)
}

/// Whether annotation `key` equals `value`, ignoring ASCII case (as the controller compares).
pub fn annotation_is(
    annotations: Option<&BTreeMap<String, String>>,
    key: &str,
    value: &str,
) -> bool {
    annotation(annotations, key).is_some_and(|v| v.eq_ignore_ascii_case(value))
}

/// Whether `fluxcd.controlplane.io/reconcile` is `disabled` (any case).
pub fn is_disabled(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotation_is(annotations, RECONCILE_ANNOTATION, DISABLED_VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_annotations_ignore_case_and_need_the_exact_key() {
        let mut a = BTreeMap::new();
        assert!(!is_disabled(None));
        assert!(!is_disabled(Some(&a)));
        a.insert(RECONCILE_ANNOTATION.to_string(), "Disabled".to_string());
        assert!(is_disabled(Some(&a)));
        a.insert(RECONCILE_ANNOTATION.to_string(), "enabled".to_string());
        assert!(!is_disabled(Some(&a)));
        a.insert(FORCE_ANNOTATION.to_string(), "ENABLED".to_string());
        assert!(annotation_is(Some(&a), FORCE_ANNOTATION, ENABLED_VALUE));
        assert!(!annotation_is(Some(&a), PRUNE_ANNOTATION, ENABLED_VALUE));
    }

    #[test]
    fn keys_live_in_their_groups() {
        for key in [
            RECONCILE_ANNOTATION,
            RECONCILE_EVERY_ANNOTATION,
            RECONCILE_TIMEOUT_ANNOTATION,
            FORCE_ANNOTATION,
            PRUNE_ANNOTATION,
            RECREATE_ON_FAILURE_ANNOTATION,
            COPY_FROM_ANNOTATION,
            CONVERT_KUBECONFIG_FROM_ANNOTATION,
            CHECKSUM_FROM_ANNOTATION,
            CHECKSUM_ANNOTATION,
            REVISION_ANNOTATION,
            TOKEN_ANNOTATION,
            FINALIZER,
        ] {
            assert_eq!(key.split_once('/').map(|(g, _)| g), Some(GROUP), "{key}");
        }
        for key in [OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL] {
            assert_eq!(
                key.split_once('/').map(|(g, _)| g),
                Some(OWNER_GROUP),
                "{key}"
            );
        }
        assert_eq!(API_VERSION, format!("{GROUP}/v1"));
    }
}
