//! `target:` / `select:` / `reject:` selectors, as kustomize matches them.

use regex::Regex;
use serde_json::Value;

use super::PatchError;
use crate::resource::{ResId, Resource, split_api_version};

/// A resource selector. `group`, `version`, `kind`, `name` and `namespace` are regular
/// expressions anchored at both ends (empty or absent: match anything); `name` and `namespace`
/// match when either the original or the current identity matches; namespaces are compared in
/// their effective form (`default` for an unset namespace, a sentinel for cluster-scoped kinds).
/// `label_selector` / `annotation_selector` use Kubernetes label-selector syntax.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    pub group: Option<String>,
    pub version: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub annotation_selector: Option<String>,
    compiled: Compiled,
}

#[derive(Debug, Clone, Default)]
struct Compiled {
    group: Option<Regex>,
    version: Option<Regex>,
    kind: Option<Regex>,
    name: Option<Regex>,
    namespace: Option<Regex>,
    labels: Vec<Requirement>,
    annotations: Vec<Requirement>,
}

/// The namespace kustomize gives cluster-scoped objects when comparing namespaces.
const NOT_A_NAMESPACE: &str = "_non_namespaceable_";

/// Built-in kinds known to be cluster scoped (by exact `apiVersion` and `kind`).
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
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
    ),
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
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

/// Whether kustomize treats the resource type as certainly cluster scoped.
pub fn is_cluster_scoped(api_version: &str, kind: &str) -> bool {
    CLUSTER_SCOPED
        .iter()
        .any(|(a, k)| *a == api_version && *k == kind)
}

/// kustomize's `EffectiveNamespace` of an identity.
pub fn effective_namespace(id: &ResId) -> String {
    let av = if id.group.is_empty() {
        id.version.clone()
    } else {
        format!("{}/{}", id.group, id.version)
    };
    if is_cluster_scoped(&av, &id.kind) {
        return NOT_A_NAMESPACE.to_string();
    }
    match id.namespace.as_deref() {
        None | Some("") | Some("default") => "default".to_string(),
        Some(ns) => ns.to_string(),
    }
}

fn anchored(field: &str, pattern: &Option<String>) -> Result<Option<Regex>, PatchError> {
    match pattern.as_deref() {
        None | Some("") => Ok(None),
        Some(p) => {
            Regex::new(&format!("^(?:{p})$"))
                .map(Some)
                .map_err(|e| PatchError::InvalidSelector {
                    field: field.to_string(),
                    reason: e.to_string(),
                })
        }
    }
}

impl Selector {
    /// Builds a selector from its fields, compiling the regular expressions and label selectors.
    pub fn new(
        group: Option<String>,
        version: Option<String>,
        kind: Option<String>,
        name: Option<String>,
        namespace: Option<String>,
        label_selector: Option<String>,
        annotation_selector: Option<String>,
    ) -> Result<Selector, PatchError> {
        let compiled = Compiled {
            group: anchored("group", &group)?,
            version: anchored("version", &version)?,
            kind: anchored("kind", &kind)?,
            name: anchored("name", &name)?,
            namespace: anchored("namespace", &namespace)?,
            labels: parse_label_selector("labelSelector", label_selector.as_deref().unwrap_or(""))?,
            annotations: parse_label_selector(
                "annotationSelector",
                annotation_selector.as_deref().unwrap_or(""),
            )?,
        };
        Ok(Selector {
            group,
            version,
            kind,
            name,
            namespace,
            label_selector,
            annotation_selector,
            compiled,
        })
    }

    /// Parses a selector map (`{group, version, kind, name, namespace, labelSelector,
    /// annotationSelector}`); unknown fields are an error, as in kustomize's strict decoding.
    pub fn from_value(v: &Value) -> Result<Selector, PatchError> {
        let m = v.as_object().ok_or_else(|| PatchError::InvalidSelector {
            field: "<selector>".into(),
            reason: "selector is not a map".into(),
        })?;
        let mut f: [Option<String>; 7] = Default::default();
        const NAMES: [&str; 7] = [
            "group",
            "version",
            "kind",
            "name",
            "namespace",
            "labelSelector",
            "annotationSelector",
        ];
        for (k, val) in m {
            let Some(i) = NAMES.iter().position(|n| n == k) else {
                return Err(PatchError::InvalidSelector {
                    field: k.clone(),
                    reason: "unknown selector field".into(),
                });
            };
            f[i] = match val {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                Value::Bool(b) => Some(b.to_string()),
                _ => {
                    return Err(PatchError::InvalidSelector {
                        field: k.clone(),
                        reason: "must be a string".into(),
                    });
                }
            };
        }
        let [g, ve, ki, n, ns, l, a] = f;
        Selector::new(g, ve, ki, n, ns, l, a)
    }

    /// Whether the selector selects the resource.
    pub fn matches(&self, r: &Resource) -> bool {
        let c = &self.compiled;
        let cur = r.id();
        if let Some(re) = &c.namespace
            && !re.is_match(&effective_namespace(&r.original))
            && !re.is_match(&effective_namespace(&cur))
        {
            return false;
        }
        if let Some(re) = &c.name
            && !re.is_match(&r.original.name)
            && !re.is_match(&cur.name)
        {
            return false;
        }
        let (group, version) = split_api_version(r.api_version());
        if c.group.as_ref().is_some_and(|re| !re.is_match(group))
            || c.version.as_ref().is_some_and(|re| !re.is_match(version))
            || c.kind.as_ref().is_some_and(|re| !re.is_match(r.kind()))
        {
            return false;
        }
        let labels = r.obj.pointer("/metadata/labels");
        let annotations = r.obj.pointer("/metadata/annotations");
        c.labels.iter().all(|q| q.matches(labels))
            && c.annotations.iter().all(|q| q.matches(annotations))
    }
}

/// One requirement of a label selector.
#[derive(Debug, Clone)]
enum Requirement {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Gt(String, i64),
    Lt(String, i64),
}

impl Requirement {
    fn matches(&self, map: Option<&Value>) -> bool {
        let get = |k: &str| map.and_then(|m| m.get(k)).map(label_value);
        match self {
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::In(k, vs) => get(k).is_some_and(|v| vs.contains(&v)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|v| !vs.contains(&v)),
            Requirement::Gt(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::Lt(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        }
    }
}

fn label_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Splits on commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, ch) in s.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

/// Parses Kubernetes label-selector syntax: `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
/// `a notin (x,y)`, `a`, `!a`, `a>1`, `a<1`, joined by commas (all must hold).
fn parse_label_selector(field: &str, s: &str) -> Result<Vec<Requirement>, PatchError> {
    let bad = |reason: String| PatchError::InvalidSelector {
        field: field.to_string(),
        reason,
    };
    let mut reqs = Vec::new();
    if s.trim().is_empty() {
        return Ok(reqs);
    }
    for part in split_top(s) {
        let p = part.trim();
        if p.is_empty() {
            return Err(bad(format!("empty requirement in {s:?}")));
        }
        let set_op = |p: &str, word: &str| -> Option<(String, Vec<String>)> {
            let idx = p
                .find(&format!(" {word} "))
                .or_else(|| p.find(&format!(" {word}(")))?;
            let key = p[..idx].trim().to_string();
            let rest = p[idx + word.len() + 1..].trim();
            let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
            let vals = inner.split(',').map(|v| v.trim().to_string()).collect();
            Some((key, vals))
        };
        let req = if let Some(k) = p.strip_prefix('!') {
            Requirement::NotExists(k.trim().to_string())
        } else if let Some((k, v)) = set_op(p, "notin") {
            Requirement::NotIn(k, v)
        } else if let Some((k, v)) = set_op(p, "in") {
            Requirement::In(k, v)
        } else if let Some((k, v)) = p.split_once("!=") {
            Requirement::NotIn(k.trim().to_string(), vec![v.trim().to_string()])
        } else if let Some((k, v)) = p.split_once("==") {
            Requirement::In(k.trim().to_string(), vec![v.trim().to_string()])
        } else if let Some((k, v)) = p.split_once('=') {
            Requirement::In(k.trim().to_string(), vec![v.trim().to_string()])
        } else if let Some((k, v)) = p.split_once('>') {
            let n = v
                .trim()
                .parse()
                .map_err(|_| bad(format!("{p:?}: not an integer")))?;
            Requirement::Gt(k.trim().to_string(), n)
        } else if let Some((k, v)) = p.split_once('<') {
            let n = v
                .trim()
                .parse()
                .map_err(|_| bad(format!("{p:?}: not an integer")))?;
            Requirement::Lt(k.trim().to_string(), n)
        } else {
            Requirement::Exists(p.to_string())
        };
        let key = match &req {
            Requirement::Exists(k)
            | Requirement::NotExists(k)
            | Requirement::In(k, _)
            | Requirement::NotIn(k, _)
            | Requirement::Gt(k, _)
            | Requirement::Lt(k, _) => k,
        };
        if !valid_key(key) {
            return Err(bad(format!("invalid key {key:?} in {s:?}")));
        }
        reqs.push(req);
    }
    Ok(reqs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_syntax() {
        let labels = json!({"a": "x", "n": "7"});
        let ok = |s: &str| {
            parse_label_selector("l", s).map(|r| r.iter().all(|q| q.matches(Some(&labels))))
        };
        assert_eq!(ok("a=x").ok(), Some(true));
        assert_eq!(ok("a==x,n").ok(), Some(true));
        assert_eq!(ok("a!=x").ok(), Some(false));
        assert_eq!(ok("a in (x, y)").ok(), Some(true));
        assert_eq!(ok("a notin (x)").ok(), Some(false));
        assert_eq!(ok("!b").ok(), Some(true));
        assert_eq!(ok("n>6,n<8").ok(), Some(true));
        assert_eq!(ok("").ok(), Some(true));
        assert!(ok("a in x").is_err());
        assert!(ok("n>z").is_err());
        assert!(ok("a=x,").is_err());
    }

    #[test]
    fn effective_namespaces() {
        let id = |kind: &str, ns: Option<&str>| ResId {
            version: "v1".into(),
            kind: kind.into(),
            namespace: ns.map(str::to_string),
            ..Default::default()
        };
        assert_eq!(effective_namespace(&id("ConfigMap", None)), "default");
        assert_eq!(effective_namespace(&id("ConfigMap", Some("x"))), "x");
        assert_eq!(
            effective_namespace(&id("Namespace", Some("x"))),
            NOT_A_NAMESPACE
        );
        assert!(is_cluster_scoped(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole"
        ));
        assert!(!is_cluster_scoped("v1", "ConfigMap"));
    }
}
