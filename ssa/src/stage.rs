//! Flux's apply order: the stages (cluster definitions, class definitions, custom kinds, the
//! rest) and the kind order within a stage. Pruning and deletion run in the reverse order.

use std::cmp::Ordering;

use super::object::ObjectRef;

/// Kinds in Flux's apply order; kinds not listed sort between this list and [`LAST_KINDS`].
const KIND_ORDER: &[&str] = &[
    "CustomResourceDefinition",
    "Namespace",
    "ClusterRole",
    "ClusterClass",
    "RuntimeClass",
    "PriorityClass",
    "StorageClass",
    "VolumeSnapshotClass",
    "IngressClass",
    "GatewayClass",
    "ClusterRoleBinding",
    "ResourceQuota",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "Secret",
    "Service",
    "LimitRange",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
];

/// Kinds applied after everything else.
const LAST_KINDS: &[&str] = &[
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

fn kind_rank(kind: &str) -> usize {
    if let Some(i) = KIND_ORDER.iter().position(|k| *k == kind) {
        return i;
    }
    match LAST_KINDS.iter().position(|k| *k == kind) {
        Some(i) => KIND_ORDER.len() + 1 + i,
        None => KIND_ORDER.len(),
    }
}

/// Flux's apply order: kind rank, then group, kind, namespace, name.
pub fn apply_order(a: &ObjectRef, b: &ObjectRef) -> Ordering {
    kind_rank(&a.kind)
        .cmp(&kind_rank(&b.kind))
        .then_with(|| a.group.cmp(&b.group))
        .then_with(|| a.kind.cmp(&b.kind))
        .then_with(|| a.namespace.cmp(&b.namespace))
        .then_with(|| a.name.cmp(&b.name))
}

/// The apply stages of Flux's `ApplyAllStaged`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// CRDs, Namespaces and ClusterRoles (applied, then waited for).
    ClusterDefinitions,
    /// Kinds whose name ends with `Class` (applied, then waited for).
    ClassDefinitions,
    /// The `--custom-apply-stage-kinds` group kinds (applied, no wait).
    Custom,
    /// Everything else.
    Rest,
}

/// Which stage an object is applied in. `custom` holds `(group, kind)` pairs.
pub fn stage_of(obj: &ObjectRef, custom: &[(String, String)]) -> Stage {
    let cluster_def = obj.group == "apiextensions.k8s.io"
        || (obj.group.is_empty() && obj.kind == "Namespace")
        || (obj.group == "rbac.authorization.k8s.io" && obj.kind == "ClusterRole");
    if cluster_def {
        Stage::ClusterDefinitions
    } else if obj.kind.ends_with("Class") {
        Stage::ClassDefinitions
    } else if custom
        .iter()
        .any(|(g, k)| *g == obj.group && *k == obj.kind)
    {
        Stage::Custom
    } else {
        Stage::Rest
    }
}

/// Parses `--custom-apply-stage-kinds` entries (`group/Kind`, or `Kind` for the core group).
pub fn parse_custom_stage_kinds(list: &[String]) -> Vec<(String, String)> {
    list.iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| match s.rsplit_once('/') {
            Some((g, k)) => (g.to_string(), k.to_string()),
            None => (String::new(), s.to_string()),
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn apply_order_follows_flux() {
        let mut objs = vec![
            ObjectRef::of(
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
                "",
                "v",
            ),
            ObjectRef::of("example.com/v1", "Widget", "apps", "w"),
            ObjectRef::of("apps/v1", "Deployment", "apps", "web"),
            ObjectRef::of("v1", "Service", "apps", "web"),
            ObjectRef::of("v1", "ConfigMap", "apps", "b"),
            ObjectRef::of("v1", "ConfigMap", "apps", "a"),
            ObjectRef::of("v1", "Namespace", "", "apps"),
            ObjectRef::of(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "",
                "widgets.example.com",
            ),
            ObjectRef::of("storage.k8s.io/v1", "StorageClass", "", "fast"),
            ObjectRef::of("v1", "ServiceAccount", "apps", "sa"),
        ];
        objs.sort_by(apply_order);
        let subjects: Vec<String> = objs.iter().map(ObjectRef::subject).collect();
        assert_eq!(
            subjects,
            [
                "CustomResourceDefinition/widgets.example.com",
                "Namespace/apps",
                "StorageClass/fast",
                "ServiceAccount/apps/sa",
                "ConfigMap/apps/a",
                "ConfigMap/apps/b",
                "Service/apps/web",
                "Deployment/apps/web",
                "Widget/apps/w",
                "ValidatingWebhookConfiguration/v",
            ]
        );
    }

    #[test]
    fn stages() {
        let custom = parse_custom_stage_kinds(&["example.com/Widget".into(), "Secret".into()]);
        assert_eq!(
            stage_of(
                &ObjectRef::of(
                    "apiextensions.k8s.io/v1",
                    "CustomResourceDefinition",
                    "",
                    "x"
                ),
                &custom
            ),
            Stage::ClusterDefinitions
        );
        assert_eq!(
            stage_of(&ObjectRef::of("v1", "Namespace", "", "x"), &custom),
            Stage::ClusterDefinitions
        );
        assert_eq!(
            stage_of(
                &ObjectRef::of("rbac.authorization.k8s.io/v1", "ClusterRole", "", "x"),
                &custom
            ),
            Stage::ClusterDefinitions
        );
        assert_eq!(
            stage_of(
                &ObjectRef::of(
                    "rbac.authorization.k8s.io/v1",
                    "ClusterRoleBinding",
                    "",
                    "x"
                ),
                &custom
            ),
            Stage::Rest
        );
        assert_eq!(
            stage_of(
                &ObjectRef::of("networking.k8s.io/v1", "IngressClass", "", "x"),
                &custom
            ),
            Stage::ClassDefinitions
        );
        assert_eq!(
            stage_of(
                &ObjectRef::of("example.com/v1", "Widget", "a", "x"),
                &custom
            ),
            Stage::Custom
        );
        assert_eq!(
            stage_of(&ObjectRef::of("v1", "Secret", "a", "x"), &custom),
            Stage::Custom
        );
        assert_eq!(
            stage_of(&ObjectRef::of("v1", "ConfigMap", "a", "x"), &custom),
            Stage::Rest
        );
    }
}
