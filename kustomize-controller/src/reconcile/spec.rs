//! What the spec asks for, read without I/O: build overrides, refused fields, durations,
//! health-check targets and the options of the apply.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use rflux_common::api::kustomization::{Kustomization, KustomizationSpec};
use rflux_common::runtime::conditions::{READY, RECONCILIATION_FAILED_REASON};
use rflux_common::runtime::{StageError, parse_go_duration};
use rflux_core::split_api_version;
use rflux_kustomize::FluxOverrides;
use serde_json::Value;

use super::client::impersonation_user;
use super::context::Context;
use super::ownership::InventoryClaims;
use crate::identity::GROUP;
use crate::ssa::claims::TAKEOVER_SUFFIX;
use crate::ssa::kstatus::{Status, compute};
use crate::ssa::wait::is_statusless_kind;
use crate::ssa::{
    Action, ApplyOptions, ChangeSet, DriftIgnoreRule, ObjectRef, Owner, StatusReader,
};
use kube::ResourceExt;

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
        // not a spec field: the build stage sets it for an Argo opt-in
        generate_names: false,
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
            // Cloud KMS workload identity: refused, naming the provider (age and OpenPGP keys
            // from the Secret are supported).
            "decryption"
                if spec
                    .decryption
                    .as_ref()
                    .is_some_and(|d| d.service_account_name.is_some()) =>
            {
                refused.push("decryption.serviceAccountName (cloud KMS workload identity)")
            }
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

/// A spec duration, or a stalling failure naming the field.
pub fn duration_of(field: &str, value: &str) -> Result<Duration, StageError> {
    parse_go_duration(value).map_err(|e| {
        StageError::stalling(
            READY,
            RECONCILIATION_FAILED_REASON,
            format!("invalid spec.{field} '{value}': {e}"),
        )
    })
}

/// The objects a `wait: true` health check waits for: every change-set object except the
/// skipped ones and the Kustomization itself (to avoid a deadlock).
pub fn wait_targets(changes: &ChangeSet, owner: &Owner) -> Vec<ObjectRef> {
    changes
        .entries
        .iter()
        .filter(|e| e.action != Action::Skipped)
        .map(|e| &e.object)
        .filter(|o| {
            !(o.group == GROUP
                && o.kind == "Kustomization"
                && o.name == owner.name
                && o.namespace == owner.namespace)
        })
        .cloned()
        .collect()
}

/// The options of the apply stage: the owner, `spec.force`, the wait timeout, the controller's
/// stage kinds and override managers, the compiled `spec.ignore` rules, and the tracker
/// (local cluster only) with a salt of every setting that changes how objects are applied.
pub fn apply_options(
    ctx: &Context,
    ks: &Kustomization,
    owner: Owner,
    timeout: Duration,
    ignore: Vec<DriftIgnoreRule>,
) -> ApplyOptions {
    let spec = &ks.spec;
    let ns = owner.namespace.clone();
    let mut opts = ApplyOptions::new(owner);
    opts.force = spec.force();
    opts.wait_timeout = timeout;
    opts.override_managers = ctx.override_managers.clone();
    opts.custom_stage_kinds = ctx.custom_stage_kinds.clone();
    opts.ignore = ignore;
    opts.refuse_conflicts = ctx.refuse_conflicts;
    opts.group_log = ctx.group_change_log;
    if ctx.refuse_conflicts {
        let key = opts.owner.key(TAKEOVER_SUFFIX);
        opts.takeover = ks
            .annotations()
            .get(&key)
            .is_some_and(|v| v.eq_ignore_ascii_case("enabled"));
        opts.claims = Some(std::sync::Arc::new(InventoryClaims {
            client: ctx.client.clone(),
        }));
    }
    if let Some(t) = ctx.tracker_for(ks) {
        opts.cache = Some(std::sync::Arc::new(crate::tracker::TrackerCache(t.clone())));
        opts.cache_salt = {
            let mut h = DefaultHasher::new();
            spec.force().hash(&mut h);
            serde_json::to_string(&spec.ignore)
                .unwrap_or_default()
                .hash(&mut h);
            ctx.override_managers.hash(&mut h);
            impersonation_user(
                &ns,
                spec.service_account_name.as_deref(),
                &ctx.default_service_account,
            )
            .hash(&mut h);
            h.finish()
        };
    }
    opts
}

/// `DisableFailFastBehavior`: a Failed object does not end the health wait; it counts as
/// still in progress until it recovers or the timeout (Flux's `FailFast: false`). Objects of
/// kinds without a status stay with the wait's own rule (Current without a watch).
pub struct WithoutFailFast<'a> {
    /// The `healthCheckExprs` reader, if any.
    pub inner: Option<&'a dyn StatusReader>,
}

impl StatusReader for WithoutFailFast<'_> {
    fn handles(&self, group: &str, kind: &str) -> bool {
        self.inner.is_some_and(|r| r.handles(group, kind)) || !is_statusless_kind(group, kind)
    }

    fn read(&self, group: &str, kind: &str, obj: &Value) -> (Status, String, Option<String>) {
        let (status, message, err) = match self.inner.filter(|r| r.handles(group, kind)) {
            Some(r) => r.read(group, kind, obj),
            None => {
                let r = compute(obj);
                (r.status, r.message, None)
            }
        };
        match status {
            Status::Failed => (Status::InProgress, message, err),
            other => (other, message, err),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::reconcile::test_fixtures::{base, ks};

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
        v["spec"]["decryption"] = json!({"provider": "sops", "serviceAccountName": "kms"});
        v["spec"]["healthCheckExprs"] = json!([{"apiVersion": "v1", "current": "true"}]);
        v["spec"]["dependsOn"] = json!([{"name": "dep", "readyExpr": "true"}]);
        let (refused, warned) = unsupported_fields(&ks(v).spec);
        assert_eq!(
            refused,
            vec!["decryption.serviceAccountName (cloud KMS workload identity)"]
        );
        // keys from a Secret are supported
        let mut v = base();
        v["spec"]["decryption"] = json!({"provider": "sops", "secretRef": {"name": "sops-age"}});
        assert!(unsupported_fields(&ks(v).spec).0.is_empty());
        // CEL fields are implemented: not reported any more.
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

    #[test]
    fn wait_targets_skip_skipped_and_self() {
        let owner = crate::identity::owner("apps", "flux-system");
        let o = |group: &str, kind: &str, ns: &str, name: &str| ObjectRef {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
        };
        let mut cs = ChangeSet::default();
        cs.push(o("", "ConfigMap", "a", "c"), Action::Unchanged);
        cs.push(o("", "Secret", "a", "s"), Action::Skipped);
        cs.push(
            o(
                "kustomize.toolkit.fluxcd.io",
                "Kustomization",
                "flux-system",
                "apps",
            ),
            Action::Configured,
        );
        cs.push(
            o(
                "kustomize.toolkit.fluxcd.io",
                "Kustomization",
                "flux-system",
                "other",
            ),
            Action::Created,
        );
        let subjects: Vec<String> = wait_targets(&cs, &owner)
            .iter()
            .map(ObjectRef::subject)
            .collect();
        assert_eq!(
            subjects,
            ["ConfigMap/a/c", "Kustomization/flux-system/other"]
        );
    }

    #[test]
    fn without_fail_fast_a_failed_object_is_still_in_progress() {
        let failed = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "generation": 1},
            "spec": {"replicas": 1},
            "status": {"observedGeneration": 1, "conditions": [{"type": "Progressing",
                "status": "False", "reason": "ProgressDeadlineExceeded", "message": "too slow"}]}});
        assert_eq!(compute(&failed).status, Status::Failed);
        let r = WithoutFailFast { inner: None };
        assert!(r.handles("apps", "Deployment"));
        assert!(!r.handles("", "ConfigMap"));
        let (status, message, _) = r.read("apps", "Deployment", &failed);
        assert_eq!(status, Status::InProgress);
        assert!(
            message.contains("too slow") || !message.is_empty(),
            "{message}"
        );
    }
}
