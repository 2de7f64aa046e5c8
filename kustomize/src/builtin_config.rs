//! kustomize's built-in transformer configuration: which fields of which kinds each built-in
//! transformer touches, where name references and `$(VAR)` references are.

use std::sync::{Arc, LazyLock};

use crate::fieldspec::{FieldSpec, Gvk, NameBackRef, TransformerConfig};

impl TransformerConfig {
    /// kustomize's built-in configuration.
    pub fn builtin() -> Self {
        builtin()
    }

    /// The built-in configuration, made once and shared: a build starts every kustomization's
    /// configuration from it and only copies it when a `configurations:` file extends it.
    pub fn shared_builtin() -> Arc<TransformerConfig> {
        static BUILTIN: LazyLock<Arc<TransformerConfig>> =
            LazyLock::new(|| Arc::new(TransformerConfig::builtin()));
        Arc::clone(&BUILTIN)
    }
}

fn fs(group: &str, version: &str, kind: &str, path: &str, create: bool) -> FieldSpec {
    FieldSpec::new(group, version, kind, path, create)
}

/// Workload kinds and where their pod spec lives: (group, version, kind, pod spec path).
const POD_SPEC_HOLDERS: &[(&str, &str, &str, &str)] = &[
    ("", "v1", "Pod", "spec"),
    ("", "", "PodTemplate", "template/spec"),
    ("", "", "Deployment", "spec/template/spec"),
    ("", "", "ReplicaSet", "spec/template/spec"),
    ("", "", "DaemonSet", "spec/template/spec"),
    ("", "", "StatefulSet", "spec/template/spec"),
    ("", "", "Job", "spec/template/spec"),
    ("", "", "CronJob", "spec/jobTemplate/spec/template/spec"),
];

/// Kinds whose pod spec fields (service account, claims, priority class) are rewritten.
const POD_FIELD_HOLDERS: &[(&str, &str)] = &[
    ("Pod", "spec"),
    ("StatefulSet", "spec/template/spec"),
    ("Deployment", "spec/template/spec"),
    ("ReplicationController", "spec/template/spec"),
    ("CronJob", "spec/jobTemplate/spec/template/spec"),
    ("Job", "spec/template/spec"),
    ("DaemonSet", "spec/template/spec"),
];

fn metadata_labels() -> Vec<FieldSpec> {
    let mut v = vec![fs("", "", "", "metadata/labels", true)];
    v.extend(template_meta("labels"));
    v
}

/// Pod template metadata of workloads (`labels` or `annotations`).
fn template_meta(field: &str) -> Vec<FieldSpec> {
    let t = |g: &str, ver: &str, k: &str, p: &str| fs(g, ver, k, &format!("{p}/{field}"), true);
    vec![
        t("", "v1", "ReplicationController", "spec/template/metadata"),
        t("", "", "Deployment", "spec/template/metadata"),
        t("", "", "ReplicaSet", "spec/template/metadata"),
        t("", "", "DaemonSet", "spec/template/metadata"),
        t(
            if field == "labels" { "apps" } else { "" },
            "",
            "StatefulSet",
            "spec/template/metadata",
        ),
        t("batch", "", "Job", "spec/template/metadata"),
        t("batch", "", "CronJob", "spec/jobTemplate/metadata"),
        t(
            "batch",
            "",
            "CronJob",
            "spec/jobTemplate/spec/template/metadata",
        ),
    ]
}

fn volume_claim_labels() -> Vec<FieldSpec> {
    vec![fs(
        "apps",
        "",
        "StatefulSet",
        "spec/volumeClaimTemplates[]/metadata/labels",
        true,
    )]
}

fn selector_labels() -> Vec<FieldSpec> {
    let mut v = vec![
        fs("", "v1", "Service", "spec/selector", true),
        fs("", "v1", "ReplicationController", "spec/selector", true),
        fs("", "", "Deployment", "spec/selector/matchLabels", true),
    ];
    let affinity = [
        "podAffinity/preferredDuringSchedulingIgnoredDuringExecution/podAffinityTerm",
        "podAffinity/requiredDuringSchedulingIgnoredDuringExecution",
        "podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution/podAffinityTerm",
        "podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution",
    ];
    let pod_selectors = |kind: &str, v: &mut Vec<FieldSpec>| {
        for a in affinity {
            v.push(fs(
                "apps",
                "",
                kind,
                &format!("spec/template/spec/affinity/{a}/labelSelector/matchLabels"),
                false,
            ));
        }
        v.push(fs(
            "apps",
            "",
            kind,
            "spec/template/spec/topologySpreadConstraints/labelSelector/matchLabels",
            false,
        ));
    };
    pod_selectors("Deployment", &mut v);
    v.push(fs("", "", "ReplicaSet", "spec/selector/matchLabels", true));
    v.push(fs("", "", "DaemonSet", "spec/selector/matchLabels", true));
    v.push(fs(
        "apps",
        "",
        "StatefulSet",
        "spec/selector/matchLabels",
        true,
    ));
    pod_selectors("StatefulSet", &mut v);
    v.extend([
        fs("batch", "", "Job", "spec/selector/matchLabels", false),
        fs(
            "batch",
            "",
            "CronJob",
            "spec/jobTemplate/spec/selector/matchLabels",
            false,
        ),
        fs(
            "policy",
            "",
            "PodDisruptionBudget",
            "spec/selector/matchLabels",
            false,
        ),
        fs(
            "networking.k8s.io",
            "",
            "NetworkPolicy",
            "spec/podSelector/matchLabels",
            false,
        ),
        fs(
            "networking.k8s.io",
            "",
            "NetworkPolicy",
            "spec/ingress/from/podSelector/matchLabels",
            false,
        ),
        fs(
            "networking.k8s.io",
            "",
            "NetworkPolicy",
            "spec/egress/to/podSelector/matchLabels",
            false,
        ),
    ]);
    v.extend(metadata_labels());
    v.extend(volume_claim_labels());
    v
}

fn annotations() -> Vec<FieldSpec> {
    let mut v = vec![fs("", "", "", "metadata/annotations", true)];
    v.extend(template_meta("annotations"));
    v
}

fn images() -> Vec<FieldSpec> {
    let mut v = Vec::new();
    for base in ["spec", "spec/template/spec"] {
        v.push(fs("", "", "", &format!("{base}/containers[]/image"), true));
        v.push(fs(
            "",
            "",
            "",
            &format!("{base}/initContainers[]/image"),
            true,
        ));
        v.push(fs(
            "",
            "",
            "",
            &format!("{base}/volumes[]/image/reference"),
            true,
        ));
    }
    // kustomize's order: containers, initContainers, volumes for `spec` then the template
    v
}

fn replicas() -> Vec<FieldSpec> {
    [
        "Deployment",
        "ReplicationController",
        "ReplicaSet",
        "StatefulSet",
    ]
    .iter()
    .map(|k| fs("", "", k, "spec/replicas", true))
    .collect()
}

fn namespace() -> Vec<FieldSpec> {
    vec![
        fs("", "", "Namespace", "metadata/name", true),
        fs(
            "apiregistration.k8s.io",
            "",
            "APIService",
            "spec/service/namespace",
            true,
        ),
        fs(
            "apiextensions.k8s.io",
            "",
            "CustomResourceDefinition",
            "spec/conversion/webhook/clientConfig/service/namespace",
            false,
        ),
    ]
}

fn pod_refs(leafs: &[&str]) -> Vec<FieldSpec> {
    let mut v = Vec::new();
    for (g, ver, kind, base) in POD_SPEC_HOLDERS {
        for leaf in leafs {
            v.push(fs(g, ver, kind, &format!("{base}/{leaf}"), false));
        }
    }
    v
}

fn pod_field(leaf: &str) -> Vec<FieldSpec> {
    POD_FIELD_HOLDERS
        .iter()
        .map(|(k, base)| fs("", "", k, &format!("{base}/{leaf}"), false))
        .collect()
}

fn name_reference() -> Vec<NameBackRef> {
    let br = |g: &str, v: &str, k: &str, referrers: Vec<FieldSpec>| NameBackRef {
        gvk: Gvk::new(g, v, k),
        referrers,
    };
    let hpa = || {
        vec![fs(
            "",
            "",
            "HorizontalPodAutoscaler",
            "spec/scaleTargetRef/name",
            false,
        )]
    };
    let mut cm = pod_refs(&[
        "volumes/configMap/name",
        "containers/env/valueFrom/configMapKeyRef/name",
        "initContainers/env/valueFrom/configMapKeyRef/name",
        "containers/envFrom/configMapRef/name",
        "initContainers/envFrom/configMapRef/name",
        "volumes/projected/sources/configMap/name",
    ]);
    cm.extend([
        fs("", "", "Node", "spec/configSource/configMap", false),
        fs("", "", "Role", "rules/resourceNames", false),
        fs("", "", "ClusterRole", "rules/resourceNames", false),
        fs(
            "",
            "",
            "Ingress",
            "metadata/annotations/nginx.ingress.kubernetes.io\\/fastcgi-params-configmap",
            false,
        ),
    ]);
    let mut secret = pod_refs(&[
        "volumes/secret/secretName",
        "containers/env/valueFrom/secretKeyRef/name",
        "initContainers/env/valueFrom/secretKeyRef/name",
        "containers/envFrom/secretRef/name",
        "initContainers/envFrom/secretRef/name",
        "imagePullSecrets/name",
        "volumes/projected/sources/secret/name",
    ]);
    secret.extend([
        fs("", "", "Ingress", "spec/tls/secretName", false),
        fs(
            "",
            "",
            "Ingress",
            "metadata/annotations/ingress.kubernetes.io\\/auth-secret",
            false,
        ),
        fs(
            "",
            "",
            "Ingress",
            "metadata/annotations/nginx.ingress.kubernetes.io\\/auth-secret",
            false,
        ),
        fs(
            "",
            "",
            "Ingress",
            "metadata/annotations/nginx.ingress.kubernetes.io\\/auth-tls-secret",
            false,
        ),
        fs("", "", "ServiceAccount", "imagePullSecrets/name", false),
        fs("", "", "StorageClass", "parameters/secretName", false),
        fs("", "", "StorageClass", "parameters/adminSecretName", false),
        fs("", "", "StorageClass", "parameters/userSecretName", false),
        fs("", "", "StorageClass", "parameters/secretRef", false),
        fs("", "", "Role", "rules/resourceNames", false),
        fs("", "", "ClusterRole", "rules/resourceNames", false),
        fs(
            "serving.knative.dev",
            "v1",
            "Service",
            "spec/template/spec/containers/env/valueFrom/secretKeyRef/name",
            false,
        ),
        fs(
            "",
            "",
            "PersistentVolume",
            "spec/azureFile/secretName",
            false,
        ),
    ]);
    let service = vec![
        fs("apps", "", "StatefulSet", "spec/serviceName", false),
        fs(
            "",
            "",
            "Ingress",
            "spec/rules/http/paths/backend/serviceName",
            false,
        ),
        fs("", "", "Ingress", "spec/backend/serviceName", false),
        fs(
            "",
            "",
            "Ingress",
            "spec/rules/http/paths/backend/service/name",
            false,
        ),
        fs("", "", "Ingress", "spec/defaultBackend/service/name", false),
        fs(
            "apiregistration.k8s.io",
            "",
            "APIService",
            "spec/service/name",
            false,
        ),
        fs(
            "admissionregistration.k8s.io",
            "",
            "ValidatingWebhookConfiguration",
            "webhooks/clientConfig/service",
            false,
        ),
        fs(
            "admissionregistration.k8s.io",
            "",
            "MutatingWebhookConfiguration",
            "webhooks/clientConfig/service",
            false,
        ),
    ];
    let rbac = "rbac.authorization.k8s.io";
    let mut sa = vec![
        fs(rbac, "", "RoleBinding", "subjects", false),
        fs(rbac, "", "ClusterRoleBinding", "subjects", false),
    ];
    sa.push(fs("", "", "Pod", "spec/serviceAccountName", false));
    sa.extend(
        POD_FIELD_HOLDERS
            .iter()
            .skip(1)
            .map(|(k, base)| fs("", "", k, &format!("{base}/serviceAccountName"), false)),
    );
    let mut pv = vec![fs(
        "",
        "",
        "PersistentVolumeClaim",
        "spec/volumeName",
        false,
    )];
    pv.push(fs("", "", "ClusterRole", "rules/resourceNames", false));
    vec![
        br("", "", "Deployment", hpa()),
        br("", "", "ReplicationController", hpa()),
        br("", "", "ReplicaSet", hpa()),
        br("", "", "StatefulSet", hpa()),
        br("", "v1", "ConfigMap", cm),
        br("", "v1", "Secret", secret),
        br("", "v1", "Service", service),
        br(
            rbac,
            "",
            "Role",
            vec![fs(rbac, "", "RoleBinding", "roleRef/name", false)],
        ),
        br(
            rbac,
            "",
            "ClusterRole",
            vec![
                fs(rbac, "", "RoleBinding", "roleRef/name", false),
                fs(rbac, "", "ClusterRoleBinding", "roleRef/name", false),
            ],
        ),
        br("", "v1", "ServiceAccount", sa),
        br(
            "",
            "v1",
            "PersistentVolumeClaim",
            pod_field("volumes/persistentVolumeClaim/claimName"),
        ),
        br("", "v1", "PersistentVolume", pv),
        br(
            "storage.k8s.io",
            "v1",
            "StorageClass",
            vec![
                fs("", "", "PersistentVolume", "spec/storageClassName", false),
                fs(
                    "",
                    "",
                    "PersistentVolumeClaim",
                    "spec/storageClassName",
                    false,
                ),
                fs(
                    "",
                    "",
                    "StatefulSet",
                    "spec/volumeClaimTemplates/spec/storageClassName",
                    false,
                ),
            ],
        ),
        br(
            "scheduling.k8s.io",
            "v1",
            "PriorityClass",
            pod_field("priorityClassName"),
        ),
        // kustomize spells this group with a version, so it never selects anything.
        br(
            "networking.k8s.io/v1",
            "v1",
            "IngressClass",
            vec![fs("", "", "Ingress", "spec/ingressClassName", false)],
        ),
        br(
            "admissionregistration.k8s.io",
            "",
            "ValidatingAdmissionPolicy",
            vec![fs(
                "admissionregistration.k8s.io",
                "",
                "ValidatingAdmissionPolicyBinding",
                "spec/policyName",
                false,
            )],
        ),
    ]
}

fn builtin() -> TransformerConfig {
    let mut template_labels = metadata_labels();
    template_labels.dedup();
    TransformerConfig {
        name_prefix: vec![fs("", "", "", "metadata/name", false)],
        name_suffix: vec![fs("", "", "", "metadata/name", false)],
        namespace: namespace(),
        common_labels: selector_labels(),
        template_labels,
        labels: Vec::new(),
        common_annotations: annotations(),
        images: images(),
        replicas: replicas(),
        var_reference: builtin_var_reference(),
        name_reference: name_reference(),
    }
}

/// The built-in `varReference` field specs: where `$(VAR)` references are substituted.
fn builtin_var_reference() -> Vec<FieldSpec> {
    let fs = |kind: &str, path: &str| FieldSpec::new("", "", kind, path, false);
    let mut v = Vec::new();
    let holders: &[(&str, &str)] = &[
        ("CronJob", "spec/jobTemplate/spec/template/spec"),
        ("DaemonSet", "spec/template/spec"),
        ("Deployment", "spec/template/spec"),
        ("Job", "spec/template/spec"),
        ("Pod", "spec"),
        ("ReplicaSet", "spec/template/spec"),
        ("StatefulSet", "spec/template/spec"),
    ];
    for (kind, base) in holders {
        for c in ["containers", "initContainers"] {
            for leaf in ["args", "command", "env/value", "volumeMounts/mountPath"] {
                v.push(fs(kind, &format!("{base}/{c}/{leaf}")));
            }
        }
        let nfs = match *kind {
            // kustomize's CronJob entry misses `spec/` before `volumes`.
            "CronJob" => "spec/jobTemplate/spec/template/volumes/nfs/server".to_string(),
            "StatefulSet" => "spec/volumeClaimTemplates/spec/nfs/server".to_string(),
            _ => format!("{base}/volumes/nfs/server"),
        };
        v.push(fs(kind, &nfs));
    }
    v.extend([
        fs("Deployment", "spec/template/metadata/annotations"),
        fs("Ingress", "spec/rules/host"),
        fs("Ingress", "spec/tls/hosts"),
        fs("Ingress", "spec/tls/secretName"),
        fs("Service", "spec/ports/port"),
        fs("Service", "spec/ports/targetPort"),
        fs("PersistentVolume", "spec/nfs/server"),
        fs("", "metadata/labels"),
        fs("", "metadata/annotations"),
    ]);
    v
}
