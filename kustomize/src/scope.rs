//! Which objects have a namespace, as kustomize decides it, and the namespace-aware ("effective")
//! form of identities used whenever two identities are compared.
//!
//! kustomize knows the scope of the resource types of its built-in Kubernetes schema (API
//! v1.21) by exact `apiVersion` and `kind`; every other type, including a built-in kind under
//! another API version and every custom resource, counts as namespaced. So `namespace:` sets
//! the namespace of a `rbac.authorization.k8s.io/v1alpha1` `ClusterRole`, of a `TokenReview` and
//! of an `admissionregistration.k8s.io/v1` `ValidatingAdmissionPolicy` (checked with
//! `kubectl kustomize`, kustomize v5.5.0), but not of a `v1` `Namespace`.

use rflux_core::split_api_version;

use crate::resource::ResId;

/// `(apiVersion, kind)` of the cluster-scoped types of kustomize's built-in schema.
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    (
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io/v1beta1",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io/v1beta1",
        "ValidatingWebhookConfiguration",
    ),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("apiextensions.k8s.io/v1beta1", "CustomResourceDefinition"),
    ("apiregistration.k8s.io/v1", "APIService"),
    ("apiregistration.k8s.io/v1beta1", "APIService"),
    ("certificates.k8s.io/v1", "CertificateSigningRequest"),
    ("certificates.k8s.io/v1beta1", "CertificateSigningRequest"),
    ("flowcontrol.apiserver.k8s.io/v1beta1", "FlowSchema"),
    (
        "flowcontrol.apiserver.k8s.io/v1beta1",
        "PriorityLevelConfiguration",
    ),
    ("networking.k8s.io/v1", "IngressClass"),
    ("networking.k8s.io/v1beta1", "IngressClass"),
    ("node.k8s.io/v1", "RuntimeClass"),
    ("node.k8s.io/v1beta1", "RuntimeClass"),
    ("policy/v1beta1", "PodSecurityPolicy"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1beta1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1beta1", "ClusterRoleBinding"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("scheduling.k8s.io/v1beta1", "PriorityClass"),
    ("storage.k8s.io/v1", "CSIDriver"),
    ("storage.k8s.io/v1", "CSINode"),
    ("storage.k8s.io/v1", "StorageClass"),
    ("storage.k8s.io/v1", "VolumeAttachment"),
    ("storage.k8s.io/v1beta1", "CSIDriver"),
    ("storage.k8s.io/v1beta1", "CSINode"),
    ("storage.k8s.io/v1beta1", "StorageClass"),
    ("storage.k8s.io/v1beta1", "VolumeAttachment"),
    ("v1", "ComponentStatus"),
    ("v1", "Namespace"),
    ("v1", "Node"),
    ("v1", "NodeProxyOptions"),
    ("v1", "PersistentVolume"),
];

/// The namespace kustomize gives cluster-scoped objects when comparing namespaces.
pub const NOT_A_NAMESPACE: &str = "_non_namespaceable_";

/// Whether objects of this `apiVersion` and `kind` are certainly cluster scoped.
pub fn is_cluster_scoped(api_version: &str, kind: &str) -> bool {
    let (group, version) = split_api_version(api_version);
    is_cluster_scoped_gvk(group, version, kind)
}

/// [`is_cluster_scoped`] for a split group and version.
pub fn is_cluster_scoped_gvk(group: &str, version: &str, kind: &str) -> bool {
    CLUSTER_SCOPED
        .iter()
        .any(|(av, k)| *k == kind && split_api_version(av) == (group, version))
}

/// [`is_cluster_scoped`] for an identity.
pub fn id_is_cluster_scoped(id: &ResId) -> bool {
    is_cluster_scoped_gvk(&id.group, &id.version, &id.kind)
}

/// An identity with an unset or empty namespace written as `default` (none at all for a
/// cluster-scoped type), for equality checks.
pub fn effective(mut id: ResId) -> ResId {
    if id.namespace.as_deref().is_none_or(str::is_empty) {
        id.namespace = if id_is_cluster_scoped(&id) {
            None
        } else {
            Some("default".to_string())
        };
    }
    id
}

/// The namespace of an identity as kustomize's selectors compare it: `default` for an unset
/// one, [`NOT_A_NAMESPACE`] for a cluster-scoped type.
pub fn effective_namespace(id: &ResId) -> String {
    if id_is_cluster_scoped(id) {
        return NOT_A_NAMESPACE.to_string();
    }
    match id.namespace.as_deref() {
        None | Some("") | Some("default") => "default".to_string(),
        Some(ns) => ns.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(api_version: &str, kind: &str, ns: Option<&str>) -> ResId {
        let (g, v) = split_api_version(api_version);
        ResId {
            group: g.into(),
            version: v.into(),
            kind: kind.into(),
            namespace: ns.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn scope_is_decided_by_api_version_and_kind() {
        assert!(is_cluster_scoped("v1", "Namespace"));
        assert!(is_cluster_scoped(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole"
        ));
        assert!(is_cluster_scoped(
            "flowcontrol.apiserver.k8s.io/v1beta1",
            "FlowSchema"
        ));
        // Not in kustomize's table: namespaced.
        assert!(!is_cluster_scoped("example.com/v1", "Namespace"));
        assert!(!is_cluster_scoped(
            "rbac.authorization.k8s.io/v1alpha1",
            "ClusterRole"
        ));
        assert!(!is_cluster_scoped(
            "flowcontrol.apiserver.k8s.io/v1",
            "FlowSchema"
        ));
        assert!(!is_cluster_scoped(
            "authentication.k8s.io/v1",
            "TokenReview"
        ));
        assert!(!is_cluster_scoped(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy"
        ));
        assert!(!is_cluster_scoped("v1", "ConfigMap"));
    }

    #[test]
    fn effective_forms() {
        assert_eq!(effective_namespace(&id("v1", "ConfigMap", None)), "default");
        assert_eq!(effective_namespace(&id("v1", "ConfigMap", Some("x"))), "x");
        assert_eq!(
            effective_namespace(&id("v1", "Namespace", Some("x"))),
            NOT_A_NAMESPACE
        );
        assert_eq!(
            effective(id("v1", "ConfigMap", Some("")))
                .namespace
                .as_deref(),
            Some("default")
        );
        assert_eq!(effective(id("v1", "Namespace", None)).namespace, None);
        // An explicit namespace is kept, even on a cluster-scoped object.
        assert_eq!(
            effective(id("v1", "Namespace", Some("x")))
                .namespace
                .as_deref(),
            Some("x")
        );
    }
}
