//! Field specs (which fields of which kinds a transformer touches), the transformer
//! configuration with kustomize's built-in defaults, and walking a path through an object.

use serde_json::{Map, Value};

use crate::error::{KustomizeError, Result};
use crate::resource::{ResId, split_api_version};

/// Group, version, kind; empty parts select anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl Gvk {
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Gvk {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
        }
    }

    /// Whether `self`, used as a selector, selects the given group/version/kind.
    pub fn selects(&self, group: &str, version: &str, kind: &str) -> bool {
        (self.group.is_empty() || self.group == group)
            && (self.version.is_empty() || self.version == version)
            && (self.kind.is_empty() || self.kind == kind)
    }

    pub fn selects_id(&self, id: &ResId) -> bool {
        self.selects(&id.group, &id.version, &id.kind)
    }

    pub fn selects_obj(&self, obj: &Value) -> bool {
        let (g, v) = split_api_version(obj.get("apiVersion").and_then(Value::as_str).unwrap_or(""));
        self.selects(g, v, obj.get("kind").and_then(Value::as_str).unwrap_or(""))
    }

    fn from_value(v: &Value) -> Self {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Gvk {
            group: s("group"),
            version: s("version"),
            kind: s("kind"),
        }
    }
}

/// One field spec: a path (segments separated by `/`, `\/` for a literal slash, `[]` marks a
/// list) in objects selected by a GVK; `create` adds the field when missing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldSpec {
    pub gvk: Gvk,
    pub path: String,
    pub create: bool,
}

impl FieldSpec {
    pub fn new(group: &str, version: &str, kind: &str, path: &str, create: bool) -> Self {
        FieldSpec {
            gvk: Gvk::new(group, version, kind),
            path: path.to_string(),
            create,
        }
    }

    /// The path split into segments.
    pub fn segments(&self) -> Vec<String> {
        split_path(&self.path)
    }

    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        let path = v
            .get("path")
            .and_then(Value::as_str)
            .ok_or("field spec without 'path'")?
            .to_string();
        let create = v.get("create").and_then(Value::as_bool).unwrap_or(false);
        Ok(FieldSpec {
            gvk: Gvk::from_value(v),
            path,
            create,
        })
    }
}

/// Splits a field-spec path at unescaped `/`.
pub fn split_path(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'/') => {
                cur.push('/');
                chars.next();
            }
            '/' => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// Which fields refer to objects of one kind by name.
#[derive(Debug, Clone, PartialEq)]
pub struct NameBackRef {
    pub gvk: Gvk,
    pub referrers: Vec<FieldSpec>,
}

/// The field specs of every built-in transformer (kustomize's "transformer configuration").
#[derive(Debug, Clone, Default)]
pub struct TransformerConfig {
    pub name_prefix: Vec<FieldSpec>,
    pub name_suffix: Vec<FieldSpec>,
    pub namespace: Vec<FieldSpec>,
    pub common_labels: Vec<FieldSpec>,
    pub template_labels: Vec<FieldSpec>,
    pub labels: Vec<FieldSpec>,
    pub common_annotations: Vec<FieldSpec>,
    pub images: Vec<FieldSpec>,
    pub replicas: Vec<FieldSpec>,
    pub var_reference: Vec<FieldSpec>,
    pub name_reference: Vec<NameBackRef>,
}

fn add_unique(list: &mut Vec<FieldSpec>, more: &[FieldSpec]) {
    for fs in more {
        if !list.contains(fs) {
            list.push(fs.clone());
        }
    }
}

impl TransformerConfig {
    /// Adds another configuration (dropping duplicates, grouping name references by kind).
    pub fn merge(&mut self, o: &TransformerConfig) {
        add_unique(&mut self.name_prefix, &o.name_prefix);
        add_unique(&mut self.name_suffix, &o.name_suffix);
        add_unique(&mut self.namespace, &o.namespace);
        add_unique(&mut self.common_labels, &o.common_labels);
        add_unique(&mut self.template_labels, &o.template_labels);
        add_unique(&mut self.labels, &o.labels);
        add_unique(&mut self.common_annotations, &o.common_annotations);
        add_unique(&mut self.images, &o.images);
        add_unique(&mut self.replicas, &o.replicas);
        add_unique(&mut self.var_reference, &o.var_reference);
        for br in &o.name_reference {
            match self.name_reference.iter_mut().find(|x| x.gvk == br.gvk) {
                Some(x) => add_unique(&mut x.referrers, &br.referrers),
                None => self.name_reference.push(br.clone()),
            }
        }
    }

    /// Parses a `configurations:` file.
    pub fn from_value(v: &Value, origin: &str) -> Result<Self> {
        let err = |m: String| KustomizeError::Transform {
            context: format!("configuration file {origin}"),
            message: m,
        };
        let mut tc = TransformerConfig::default();
        let Some(obj) = v.as_object() else {
            return if v.is_null() {
                Ok(tc)
            } else {
                Err(err("expected a mapping".to_string()))
            };
        };
        for (k, val) in obj {
            let specs = |val: &Value| -> Result<Vec<FieldSpec>> {
                match val {
                    Value::Null => Ok(Vec::new()),
                    Value::Array(a) => a
                        .iter()
                        .map(|x| FieldSpec::from_value(x).map_err(|m| err(m.to_string())))
                        .collect(),
                    _ => Err(err(format!("'{k}' must be a list of field specs"))),
                }
            };
            match k.as_str() {
                "namePrefix" => tc.name_prefix = specs(val)?,
                "nameSuffix" => tc.name_suffix = specs(val)?,
                "namespace" => tc.namespace = specs(val)?,
                "commonLabels" => tc.common_labels = specs(val)?,
                "templateLabels" => tc.template_labels = specs(val)?,
                "labels" => tc.labels = specs(val)?,
                "commonAnnotations" => tc.common_annotations = specs(val)?,
                "images" => tc.images = specs(val)?,
                "replicas" => tc.replicas = specs(val)?,
                "varReference" => tc.var_reference = specs(val)?,
                "nameReference" => {
                    let list = val.as_array().cloned().unwrap_or_default();
                    for br in list {
                        let gvk = Gvk::from_value(&br);
                        let referrers = specs(br.get("fieldSpecs").unwrap_or(&Value::Null))?;
                        tc.merge(&TransformerConfig {
                            name_reference: vec![NameBackRef { gvk, referrers }],
                            ..Default::default()
                        });
                    }
                }
                _ => {}
            }
        }
        Ok(tc)
    }

    /// kustomize's built-in configuration.
    pub fn builtin() -> Self {
        defaults::builtin()
    }
}

mod defaults {
    use super::{FieldSpec, Gvk, NameBackRef, TransformerConfig};

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

    pub(super) fn builtin() -> TransformerConfig {
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
            var_reference: super::super::varref::builtin_var_reference(),
            name_reference: name_reference(),
        }
    }
}

/// Visits every value at `segs` below `node`, descending into every element of lists met on
/// the way. With `create`, missing mappings on the way are added and a missing leaf is set to
/// `leaf_default` before `f` sees it.
pub fn visit_path(
    node: &mut Value,
    segs: &[String],
    create: bool,
    leaf_default: &dyn Fn() -> Value,
    f: &mut dyn FnMut(&mut Value) -> Result<()>,
) -> Result<()> {
    if let Value::Array(items) = node {
        for item in items {
            visit_path(item, segs, create, leaf_default, f)?;
        }
        return Ok(());
    }
    let Some((first, rest)) = segs.split_first() else {
        return f(node);
    };
    let name = first.trim_end_matches("[]");
    let Value::Object(map) = node else {
        return Ok(());
    };
    if !map.contains_key(name) || map.get(name).is_some_and(Value::is_null) {
        // kustomize never adds a missing list, but turns a null one into an empty list.
        if !create || (first.ends_with("[]") && !map.contains_key(name)) {
            return Ok(());
        }
        let fresh = if rest.is_empty() {
            leaf_default()
        } else if first.ends_with("[]") {
            Value::Array(Vec::new())
        } else {
            Value::Object(Map::new())
        };
        map.insert(name.to_string(), fresh);
    }
    let Some(child) = map.get_mut(name) else {
        return Ok(());
    };
    if rest.is_empty() {
        if let Value::Array(items) = child
            && !first.ends_with("[]")
        {
            for item in items {
                f(item)?;
            }
            return Ok(());
        }
        return f(child);
    }
    visit_path(child, rest, create, leaf_default, f)
}
