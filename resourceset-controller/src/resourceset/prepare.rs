//! Object preparation before the apply (Flux Operator's, in its order), pure: the owner labels,
//! then `commonMetadata` (which may overwrite them), then the cleanup of Flux's kustomize-controller
//! labels so that objects a Kustomization created are adopted; and the revision of the result.

use std::collections::BTreeMap;

use rflux_common::api::resourceset::{OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Labels and annotations removed from the desired objects before the apply (§7.2).
const CLEANUP_LABELS: [&str; 2] = [
    "kustomize.toolkit.fluxcd.io/name",
    "kustomize.toolkit.fluxcd.io/namespace",
];
const CLEANUP_ANNOTATIONS: [&str; 3] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    "meta.helm.sh/release-name",
    "meta.helm.sh/release-namespace",
];

/// Sets the owner labels of ResourceSet `namespace/name` and `commonMetadata` on `obj`.
pub fn prepare(
    obj: &mut Value,
    (name, namespace): (&str, &str),
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) {
    let Some(meta) = obj
        .as_object_mut()
        .map(|o| {
            o.entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()))
        })
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let mut set = |field: &str, pairs: &mut dyn Iterator<Item = (&str, &str)>, remove: &[&str]| {
        let m = meta
            .entry(field)
            .or_insert_with(|| Value::Object(Map::new()));
        if !m.is_object() {
            *m = Value::Object(Map::new());
        }
        if let Some(m) = m.as_object_mut() {
            for (k, v) in pairs {
                m.insert(k.to_string(), Value::String(v.to_string()));
            }
            for k in remove {
                m.remove(*k);
            }
        }
        if meta
            .get(field)
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
        {
            meta.remove(field);
        }
    };
    let owner = [(OWNER_NAME_LABEL, name), (OWNER_NAMESPACE_LABEL, namespace)];
    let mut label_pairs = owner
        .into_iter()
        .chain(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    set("labels", &mut label_pairs, &CLEANUP_LABELS);
    let mut annotation_pairs = annotations.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    set("annotations", &mut annotation_pairs, &CLEANUP_ANNOTATIONS);
}

/// `sha256:<hex>` of the objects as one YAML stream (each object [`normalized`], keys sorted,
/// then `---`), as Flux Operator computes `lastAppliedRevision`.
pub fn revision<'a>(objects: impl IntoIterator<Item = &'a Value>) -> String {
    let mut h = Sha256::new();
    for o in objects {
        let o = normalized(o);
        h.update(
            rflux_gotmpl::json_to_yaml(&o)
                .unwrap_or_default()
                .as_bytes(),
        );
        h.update(b"---\n");
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

/// The object as Flux's ssa `normalize.UnstructuredList` leaves it before Flux Operator hashes
/// it: `metadata.creationTimestamp: null` everywhere, `status` dropped (but on CRDs), and what
/// the round trip through the typed object adds for the kinds handled here (checked against
/// fluxcd/pkg/ssa v0.77.0): `spec: {}` on a Namespace; `selector: null` and `strategy: {}` on a
/// Deployment; on the pod template of a Deployment or Job `metadata: {}`, `resources: {}` on
/// every container and the `TCP` protocol on container ports; on a Service the `TCP` protocol
/// and `targetPort: 0`; a Secret's `stringData` moved into `data`. The typed defaults of the
/// other built-in kinds (StatefulSet, DaemonSet, CronJob, Pod, …) are not reproduced.
pub fn normalized(obj: &Value) -> Value {
    let mut o = obj.clone();
    let api_version = o["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = o["kind"].as_str().unwrap_or_default().to_string();
    let Some(m) = o.as_object_mut() else {
        return o;
    };
    let is_crd =
        kind == "CustomResourceDefinition" && api_version.starts_with("apiextensions.k8s.io/");
    if !is_crd {
        m.remove("status");
    }
    if let Some(meta) = m
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
    {
        meta.insert("creationTimestamp".into(), Value::Null);
    }
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => {
            m.entry("spec").or_insert_with(|| Value::Object(Map::new()));
        }
        ("v1", "Secret") => normalize_secret(m),
        ("v1", "Service") => {
            let ports = m.get_mut("spec").and_then(|s| s.get_mut("ports"));
            for p in ports.and_then(Value::as_array_mut).into_iter().flatten() {
                if let Some(p) = p.as_object_mut() {
                    default_protocol(p);
                    p.entry("targetPort").or_insert(Value::from(0));
                }
            }
        }
        ("apps/v1", "Deployment") | ("batch/v1", "Job") => {
            if let Some(spec) = m.get_mut("spec").and_then(Value::as_object_mut) {
                if kind == "Deployment" {
                    spec.entry("selector").or_insert(Value::Null);
                    spec.entry("strategy")
                        .or_insert_with(|| Value::Object(Map::new()));
                }
                let template = spec
                    .entry("template")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(t) = template.as_object_mut() {
                    t.entry("metadata")
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Some(pod) = t.get_mut("spec").and_then(Value::as_object_mut) {
                        pod_spec(pod);
                    }
                }
            }
        }
        _ => {}
    }
    o
}

/// A pod spec's typed defaults: `resources: {}` on every container, `TCP` on the ports of the
/// regular containers.
fn pod_spec(pod: &mut Map<String, Value>) {
    for field in ["containers", "initContainers", "ephemeralContainers"] {
        let list = pod.get_mut(field).and_then(Value::as_array_mut);
        for c in list.into_iter().flatten().filter_map(Value::as_object_mut) {
            c.entry("resources")
                .or_insert_with(|| Value::Object(Map::new()));
            if field == "containers" {
                let ports = c.get_mut("ports").and_then(Value::as_array_mut);
                for p in ports.into_iter().flatten().filter_map(Value::as_object_mut) {
                    default_protocol(p);
                }
            }
        }
    }
}

/// A port without a protocol gets `TCP`.
fn default_protocol(p: &mut Map<String, Value>) {
    let empty = p
        .get("protocol")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    if empty {
        p.insert("protocol".into(), Value::String("TCP".into()));
    }
}

/// `stringData` merged into `data` (base64, overwriting equal keys) and removed.
fn normalize_secret(m: &mut Map<String, Value>) {
    use base64::Engine as _;
    let Some(Value::Object(string_data)) = m.remove("stringData") else {
        return;
    };
    if string_data.is_empty() {
        m.insert("stringData".into(), Value::Object(string_data));
        return;
    }
    let data = m.entry("data").or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    if let Some(data) = data.as_object_mut() {
        for (k, v) in string_data {
            let text = v.as_str().unwrap_or_default();
            let encoded = base64::engine::general_purpose::STANDARD.encode(text);
            data.insert(k, Value::String(encoded));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn owner_labels_then_common_metadata_then_cleanup() {
        let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"kustomize.toolkit.fluxcd.io/name": "old", "x": "1"},
                         "annotations": {"meta.helm.sh/release-name": "r"}}});
        let mut labels = BTreeMap::new();
        labels.insert("team".to_string(), "a".to_string());
        labels.insert(OWNER_NAME_LABEL.to_string(), "overwritten".to_string());
        prepare(&mut o, ("rs", "apps"), &labels, &BTreeMap::new());
        assert_eq!(
            o["metadata"]["labels"],
            json!({"x": "1", OWNER_NAME_LABEL: "overwritten", OWNER_NAMESPACE_LABEL: "apps", "team": "a"})
        );
        assert!(o["metadata"].get("annotations").is_none(), "{o}");
    }

    /// E3 (`e3-exclusion`) as prepared for ResourceSet `default/tenants`; the digest is the
    /// `lastAppliedRevision` the real flux-operator v0.59.0 wrote for it
    /// (`e2e/tests/resourceset_side_by_side.rs`).
    #[test]
    fn the_revision_is_flux_operators() {
        let owner = json!({OWNER_NAME_LABEL: "tenants", OWNER_NAMESPACE_LABEL: "default"});
        let ns = |n: &str| {
            json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": n, "labels": owner}})
        };
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "flux", "namespace": "team1", "labels": owner,
                         "annotations": {"fluxcd.controlplane.io/reconcile": "enabled"}}});
        assert_eq!(
            revision([&ns("team1"), &ns("team2"), &sa]),
            "sha256:6fd5d02b426c3ab197e66b75d90aee38ca5dfad452cbf05184d9ec961628f320"
        );
    }

    /// Expected values: what fluxcd/pkg/ssa v0.77.0 `normalize.UnstructuredList` printed for the
    /// same objects.
    #[test]
    fn normalization_adds_the_typed_defaults() {
        let d = normalized(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d"}, "status": {"replicas": 1},
            "spec": {"template": {"spec": {"containers": [
                {"name": "a", "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]},
                {"name": "b", "resources": {"limits": {"cpu": "1"}}}],
                "initContainers": [{"name": "i", "ports": [{"containerPort": 1}]}]}}}}));
        assert_eq!(
            d,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "d", "creationTimestamp": null},
                "spec": {"selector": null, "strategy": {}, "template": {"metadata": {},
                    "spec": {"containers": [
                        {"name": "a", "resources": {}, "ports": [
                            {"containerPort": 80, "protocol": "TCP"},
                            {"containerPort": 53, "protocol": "UDP"}]},
                        {"name": "b", "resources": {"limits": {"cpu": "1"}}}],
                        "initContainers": [{"name": "i", "resources": {},
                            "ports": [{"containerPort": 1}]}]}}}})
        );
        let j = normalized(
            &json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"template": {"metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "a"}]}}}}),
        );
        assert_eq!(
            j["spec"],
            json!({"template": {"metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "a", "resources": {}}]}}})
        );
        let svc = normalized(
            &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}}),
        );
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"port": 80, "protocol": "TCP", "targetPort": 0},
                   {"port": 53, "protocol": "UDP", "targetPort": "dns"}])
        );
        let s = normalized(
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"a": "eA==", "b": "eA=="}, "stringData": {"b": "yz"}}),
        );
        assert_eq!(s["data"], json!({"a": "eA==", "b": "eXo="}));
        assert!(s.get("stringData").is_none(), "{s}");
        // A custom resource keeps its spec; a CRD keeps its status.
        let cr =
            json!({"apiVersion": "x.io/v1", "kind": "Namespace", "metadata": {}, "status": {}});
        assert_eq!(
            normalized(&cr),
            json!({"apiVersion": "x.io/v1", "kind": "Namespace",
            "metadata": {"creationTimestamp": null}})
        );
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "c"}, "status": {"x": 1}});
        assert_eq!(normalized(&crd)["status"], json!({"x": 1}));
    }

    #[test]
    fn the_revision_changes_with_any_object() {
        let a = json!({"kind": "ConfigMap", "metadata": {"name": "a"}});
        let b = json!({"kind": "ConfigMap", "metadata": {"name": "b"}});
        let r1 = revision([&a, &b]);
        assert!(r1.starts_with("sha256:") && r1.len() == 71, "{r1}");
        assert_ne!(r1, revision([&b, &a]));
        assert_eq!(r1, revision([&a, &b]));
    }
}
