//! Output ordering: kustomize's default "legacy" order, and the `sortOptions` field.

use std::cmp::Ordering;

use crate::resource::Resource;

/// Kinds that come first, in this order.
const FIRST: &[&str] = &[
    "Namespace",
    "ResourceQuota",
    "StorageClass",
    "CustomResourceDefinition",
    "ServiceAccount",
    "PodSecurityPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Endpoints",
    "Service",
    "LimitRange",
    "PriorityClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
];

/// Kinds that come last, in this order.
const LAST: &[&str] = &[
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

fn rank(kind: &str, first: &[String], last: &[String]) -> i64 {
    if let Some(i) = first.iter().position(|k| k == kind) {
        return i as i64 - 10_000;
    }
    if let Some(i) = last.iter().position(|k| k == kind) {
        return 10_000 + i as i64;
    }
    0
}

fn gvk_key(r: &Resource) -> String {
    let id = r.id();
    let g = if id.group.is_empty() {
        "~G"
    } else {
        id.group.as_str()
    };
    let v = if id.version.is_empty() {
        "~V"
    } else {
        id.version.as_str()
    };
    let k = if id.kind.is_empty() {
        "~K"
    } else {
        id.kind.as_str()
    };
    format!("{g}_{v}_{k}")
}

fn ns_name_key(r: &Resource) -> String {
    let ns = match r.namespace() {
        Some(n) if !n.is_empty() => n,
        _ => "~X",
    };
    let name = if r.name().is_empty() { "~N" } else { r.name() };
    format!("{ns}|{name}")
}

/// Sorts in kustomize's legacy order (the default when `sortOptions` is absent).
pub fn legacy_sort(items: &mut [Resource]) {
    legacy_sort_with(items, &[], &[]);
}

/// Legacy order with custom first/last kind lists (`sortOptions.legacySortOptions`); empty
/// lists mean kustomize's defaults.
pub fn legacy_sort_with(items: &mut [Resource], order_first: &[String], order_last: &[String]) {
    let first: Vec<String> = if order_first.is_empty() {
        FIRST.iter().map(|s| s.to_string()).collect()
    } else {
        order_first.to_vec()
    };
    let last: Vec<String> = if order_last.is_empty() {
        LAST.iter().map(|s| s.to_string()).collect()
    } else {
        order_last.to_vec()
    };
    let mut keyed: Vec<(i64, String, String, usize)> = items
        .iter()
        .enumerate()
        .map(|(i, r)| (rank(r.kind(), &first, &last), gvk_key(r), ns_name_key(r), i))
        .collect();
    keyed.sort_by(|a, b| match a.0.cmp(&b.0) {
        Ordering::Equal => match a.1.cmp(&b.1) {
            Ordering::Equal => a.2.cmp(&b.2),
            o => o,
        },
        o => o,
    });
    let mut taken: Vec<Option<Resource>> = items
        .iter_mut()
        .map(|r| Some(std::mem::replace(r, Resource::new(serde_json::Value::Null))))
        .collect();
    for (slot, (_, _, _, i)) in items.iter_mut().zip(keyed) {
        if let Some(r) = taken[i].take() {
            *slot = r;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(api: &str, kind: &str, ns: Option<&str>, name: &str) -> Resource {
        let mut o = json!({"apiVersion": api, "kind": kind, "metadata": {"name": name}});
        if let Some(ns) = ns {
            o["metadata"]["namespace"] = json!(ns);
        }
        Resource::new(o)
    }

    #[test]
    fn legacy_order() {
        let mut v = vec![
            r(
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
                None,
                "w",
            ),
            r("v1", "Pod", Some("a"), "p"),
            r("apps/v1", "Deployment", Some("a"), "d"),
            r("example.com/v1", "Foo", Some("a"), "f"),
            r("v1", "Namespace", None, "a"),
            r("v1", "ConfigMap", Some("kubeflow"), "c"),
            r("v1", "ConfigMap", Some("kubeflow-system"), "c"),
            r("v1", "ConfigMap", None, "c"),
        ];
        legacy_sort(&mut v);
        let names: Vec<String> = v
            .iter()
            .map(|x| format!("{}/{}/{}", x.kind(), x.namespace().unwrap_or(""), x.name()))
            .collect();
        assert_eq!(
            names,
            vec![
                "Namespace//a",
                "ConfigMap/kubeflow-system/c",
                "ConfigMap/kubeflow/c",
                "ConfigMap//c",
                "Deployment/a/d",
                "Foo/a/f",
                "Pod/a/p",
                "ValidatingWebhookConfiguration//w"
            ]
        );
    }
}
