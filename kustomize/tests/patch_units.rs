//! Unit tests of the patch module's API. Behavioural expectations (merge order, kept/dropped
//! values) were checked with `kubectl kustomize` (Kustomize v5.5.0); see the comments.

#![allow(clippy::unwrap_used)] // tests may unwrap (project rule)

use std::collections::BTreeMap;

use rflux_kustomize::patch::{
    MergeOptions, PatchError, PatchOutcome, Schema, Selector, is_json6902, json6902, replacements,
    strategic_merge, strategic_merge_with, vars,
};
use rflux_kustomize::resource::{ResId, Resource};
use serde_json::{Value, json};

fn keys(s: &Schema, av: &str, kind: &str, path: &[&str]) -> Option<(String, Vec<String>)> {
    s.merge_keys_at(av, kind, path)
}

#[test]
fn builtin_schema_has_kubernetes_merge_keys() {
    let s = Schema::builtin();
    let pod = ["spec", "template", "spec"];
    let at = |extra: &[&str]| {
        let mut p: Vec<&str> = pod.to_vec();
        p.extend_from_slice(extra);
        keys(&s, "apps/v1", "Deployment", &p)
    };
    assert_eq!(
        at(&["containers"]),
        Some(("merge".into(), vec!["name".into()]))
    );
    assert_eq!(
        at(&["containers", "[]", "ports"]),
        Some((
            "merge".into(),
            vec!["containerPort".into(), "protocol".into()]
        ))
    );
    assert_eq!(
        at(&["containers", "[]", "volumeMounts"]),
        Some(("merge".into(), vec!["mountPath".into()]))
    );
    assert_eq!(
        at(&["volumes"]),
        Some(("merge,retainKeys".into(), vec!["name".into()]))
    );
    assert_eq!(at(&["tolerations"]), None);
    assert_eq!(
        keys(&s, "v1", "Service", &["spec", "ports"]),
        Some(("merge".into(), vec!["port".into(), "protocol".into()]))
    );
    assert_eq!(
        keys(&s, "v1", "ConfigMap", &["metadata", "finalizers"]),
        Some(("merge".into(), vec![]))
    );
    assert_eq!(
        keys(
            &s,
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            &["rules"]
        ),
        None
    );
    assert!(s.knows("batch/v1", "CronJob"));
    assert!(!s.knows("example.com/v1", "Foo"));
    assert!(!Schema::empty().knows("apps/v1", "Deployment"));
}

fn foo_schema_doc() -> Value {
    json!({"definitions": {
        "com.example.v1.Foo": {
            "type": "object",
            "x-kubernetes-group-version-kind": [{"group": "example.com", "kind": "Foo", "version": "v1"}],
            "properties": {"spec": {"$ref": "#/definitions/com.example.v1.FooSpec"}}
        },
        "com.example.v1.FooSpec": {
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"type": "object"},
                          "x-kubernetes-patch-merge-key": "name", "x-kubernetes-patch-strategy": "merge"},
                "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-patch-strategy": "merge"}
            }
        }
    }})
}

// kubectl kustomize with `openapi: {path: schema.json}` holding foo_schema_doc(): Foo items
// merge by name (new ones first), tags are unioned, and a Deployment's containers are
// replaced because the built-in schema is no longer used.
#[test]
fn custom_openapi_schema_replaces_builtin() {
    let s = Schema::from_openapi(&foo_schema_doc()).unwrap();
    let mut foo = json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "foo"},
        "spec": {"items": [{"name": "a", "v": 1}], "tags": ["t1"]}});
    let patch = json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "foo"},
        "spec": {"items": [{"name": "b", "v": 2}, {"name": "a", "extra": "x"}], "tags": ["t2"]}});
    assert_eq!(
        strategic_merge(&mut foo, &patch, &s).unwrap(),
        PatchOutcome::Patched
    );
    assert_eq!(
        foo["spec"]["items"],
        json!([{"name": "b", "v": 2}, {"name": "a", "v": 1, "extra": "x"}])
    );
    assert_eq!(foo["spec"]["tags"], json!(["t2", "t1"]));

    let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": [{"name": "c1", "image": "y"}]}}}});
    let dp = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": [{"name": "c2", "image": "x"}]}}}});
    strategic_merge(&mut d, &dp, &s).unwrap();
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"],
        json!([{"name": "c2", "image": "x"}])
    );

    assert!(matches!(
        Schema::from_openapi(&json!({"swagger": "2.0"})),
        Err(PatchError::Schema { .. })
    ));
}

#[test]
fn crd_schema_extension_merges_by_declared_key() {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "foos.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Foo", "plural": "foos"},
            "versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"items": {
                    "type": "array", "items": {"type": "object"},
                    "x-kubernetes-patch-strategy": "merge", "x-kubernetes-list-map-keys": ["name"]}}}}}}}]}
    });
    let mut s = Schema::builtin();
    s.add_crd(&crd).unwrap();
    assert_eq!(
        keys(&s, "example.com/v1", "Foo", &["spec", "items"]),
        Some(("merge".into(), vec!["name".into()]))
    );
    let mut foo = json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "f"},
        "spec": {"items": [{"name": "a", "v": 1}]}});
    let patch = json!({"spec": {"items": [{"name": "a", "v": 2}]}});
    strategic_merge(&mut foo, &patch, &s).unwrap();
    assert_eq!(foo["spec"]["items"], json!([{"name": "a", "v": 2}]));
    // Without the CRD the list is replaced.
    let mut plain = json!({"apiVersion": "example.com/v1", "kind": "Foo", "spec": {"items": [{"name": "a", "w": 1}]}});
    strategic_merge(
        &mut plain,
        &json!({"spec": {"items": [{"name": "b"}]}}),
        &Schema::builtin(),
    )
    .unwrap();
    assert_eq!(plain["spec"]["items"], json!([{"name": "b"}]));

    assert!(s.add_crd(&json!({"kind": "ConfigMap"})).is_err());
    assert!(s.add_crd(&json!({"kind": "CustomResourceDefinition", "spec": {"group": "g", "names": {"kind": "K"}}})).is_err());
}

// kubectl kustomize drops target nulls written as `key:` and keeps `key: null`.
#[test]
fn merge_options_decide_which_target_nulls_survive() {
    let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app"},
        "spec": {"template": {"spec": {
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": null}},
            "containers": [{"name": "app", "image": "a", "resources": {"limits": null}}]}}}});
    let patch = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app"}, "spec": {"replicas": 3}});

    let mut kept = target.clone();
    strategic_merge(&mut kept, &patch, &Schema::builtin()).unwrap();
    assert_eq!(
        kept["spec"]["template"]["spec"]["affinity"]["nodeAffinity"],
        json!({"preferredDuringSchedulingIgnoredDuringExecution": null})
    );
    assert_eq!(kept["spec"]["replicas"], json!(3));

    let mut seen: Vec<Vec<String>> = Vec::new();
    let cell = std::cell::RefCell::new(&mut seen);
    let pred = |p: &[String]| {
        cell.borrow_mut().push(p.to_vec());
        p.last().is_some_and(|k| k == "limits")
    };
    let mut dropped = target.clone();
    strategic_merge_with(
        &mut dropped,
        &patch,
        &Schema::builtin(),
        &MergeOptions {
            drop_target_null: Some(&pred),
        },
    )
    .unwrap();
    assert_eq!(
        dropped["spec"]["template"]["spec"]["containers"][0]["resources"],
        json!({})
    );
    assert_eq!(
        dropped["spec"]["template"]["spec"]["affinity"]["nodeAffinity"],
        json!({"preferredDuringSchedulingIgnoredDuringExecution": null})
    );
    let paths = seen.iter().map(|p| p.join("/")).collect::<Vec<_>>();
    assert!(
        paths.contains(&"spec/template/spec/containers/resources/limits".to_string()),
        "{paths:?}"
    );
    assert!(paths.contains(&"spec/template/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution".to_string()));
}

#[test]
fn top_level_delete_and_bad_directive() {
    let s = Schema::builtin();
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    let out = strategic_merge(&mut cm, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "$patch": "delete"}), &s).unwrap();
    assert_eq!(out, PatchOutcome::Deleted);
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}});
    let err = strategic_merge(&mut cm, &json!({"data": {"$patch": "nope"}}), &s).unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}});
    let err = strategic_merge(&mut cm, &json!({"data": ["x"]}), &s).unwrap_err();
    assert!(err.to_string().contains("data"), "{err}");
    assert_eq!(
        cm,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}}),
        "unchanged on error"
    );
}

#[test]
fn json6902_errors_name_the_operation() {
    let mut obj = json!({"a": {"b~/c": 1}, "l": [1, 2]});
    json6902(&mut obj, &json!([{"op": "replace", "path": "/a/b~0~1c", "value": 5}, {"op": "add", "path": "/l/-", "value": 3}])).unwrap();
    assert_eq!(obj, json!({"a": {"b~/c": 5}, "l": [1, 2, 3]}));
    let before = obj.clone();
    let err = json6902(
        &mut obj,
        &json!([{"op": "add", "path": "/x", "value": 1}, {"op": "remove", "path": "/nope"}]),
    )
    .unwrap_err();
    match err {
        PatchError::Json6902 {
            index, op, path, ..
        } => {
            assert_eq!((index, op.as_str(), path.as_str()), (1, "remove", "/nope"));
        }
        other => panic!("unexpected {other}"),
    }
    assert_eq!(obj, before, "a failed patch leaves the object unchanged");
    assert!(json6902(&mut obj, &json!([{"op": "frob", "path": "/a"}])).is_err());
    assert!(json6902(&mut obj, &json!([{"op": "add", "path": "a", "value": 1}])).is_err());
    assert!(json6902(&mut obj, &json!({"op": "add"})).is_err());
    assert!(is_json6902(&json!([])));
    assert!(!is_json6902(&json!({"kind": "X"})));
}

fn res(kind: &str, name: &str, ns: Option<&str>, labels: Value) -> Resource {
    let mut obj =
        json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "labels": labels}});
    if let Some(ns) = ns {
        obj["metadata"]["namespace"] = json!(ns);
    }
    Resource::new(obj)
}

#[test]
fn selector_matches_like_kustomize() {
    let sel = |v: Value| Selector::from_value(&v).unwrap();
    let mut r = res("ConfigMap", "app", None, json!({"tier": "web", "n": "5"}));
    assert!(sel(json!({"name": "app"})).matches(&r));
    assert!(
        !sel(json!({"name": "ap"})).matches(&r),
        "name regex is anchored"
    );
    assert!(sel(json!({"name": "a.*", "kind": "Config.*", "version": "v1"})).matches(&r));
    assert!(
        sel(json!({"namespace": "default"})).matches(&r),
        "no namespace means default"
    );
    assert!(sel(json!({"labelSelector": "tier in (web, db), !gone, n>3"})).matches(&r));
    assert!(!sel(json!({"labelSelector": "tier notin (web)"})).matches(&r));
    assert!(!sel(json!({"annotationSelector": "tier"})).matches(&r));
    // A renamed object is still selected by its original name.
    r.obj["metadata"]["name"] = json!("pre-app");
    assert!(sel(json!({"name": "app"})).matches(&r));
    assert!(sel(json!({"name": "pre-app"})).matches(&r));
    // Cluster-scoped kinds have no namespace.
    let ns =
        Resource::new(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}));
    assert!(!sel(json!({"namespace": "default"})).matches(&ns));

    assert!(matches!(
        Selector::from_value(&json!({"nme": "x"})),
        Err(PatchError::InvalidSelector { .. })
    ));
    assert!(Selector::from_value(&json!({"name": "("})).is_err());
    assert!(Selector::from_value(&json!({"labelSelector": "a in b"})).is_err());
    assert!(Selector::from_value(&json!({"labelSelector": "a,,b"})).is_err());
}

// Expected strings are those of the vars_basic case built by kubectl kustomize.
#[test]
fn var_expansion_rules() {
    let values: BTreeMap<String, Value> = [
        ("SVC".to_string(), json!("my-svc")),
        ("PORT".to_string(), json!(8080)),
        ("M".to_string(), json!({"a": 1})),
    ]
    .into();
    let mut used = BTreeMap::new();
    assert_eq!(vars::expand("$(PORT)", &values, &mut used), json!(8080));
    assert_eq!(
        vars::expand("--svc=$(SVC)", &values, &mut used),
        json!("--svc=my-svc")
    );
    assert_eq!(
        vars::expand("$(UNKNOWN)", &values, &mut used),
        json!("$(UNKNOWN)")
    );
    assert_eq!(vars::expand("cost $$", &values, &mut used), json!("cost $"));
    assert_eq!(vars::expand("$(", &values, &mut used), json!("$("));
    assert_eq!(
        vars::expand("$(M)", &values, &mut used),
        json!("$(M)"),
        "maps are not substituted"
    );
    assert_eq!(vars::expand("a$b", &values, &mut used), json!("a$b"));
    assert_eq!(used.get("SVC"), Some(&1));
    assert_eq!(used.get("PORT"), Some(&1));
    assert!(!used.contains_key("M"));

    let svc = json!({"spec": {"ports": [{"port": 8080}], "a.b": {"c": true}}});
    assert_eq!(
        vars::field_value(&svc, "spec.ports[0].port").unwrap(),
        json!(8080)
    );
    assert_eq!(
        vars::field_value(&svc, "spec.a\\.b.c").unwrap(),
        json!(true)
    );
    assert!(vars::field_value(&svc, "spec.ports[3].port").is_err());
    assert!(
        vars::default_var_reference_paths()
            .iter()
            .any(|f| f.path == "spec/template/spec/containers/env/value"
                && f.gvk.kind == "Deployment")
    );
}

#[test]
fn unused_vars_are_reported() {
    let mut rs = vec![Resource::new(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "args": ["$(A)"]}]}}),
    )];
    let values: BTreeMap<String, Value> =
        [("A".to_string(), json!("x")), ("B".to_string(), json!("y"))].into();
    let unused = vars::substitute(&mut rs, &values, &vars::default_var_reference_paths()).unwrap();
    assert_eq!(unused, vec!["B".to_string()]);
    assert_eq!(rs[0].obj["spec"]["containers"][0]["args"], json!(["x"]));
    // A list at a var-reference path must hold strings only.
    let mut bad = vec![Resource::new(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "args": [1]}]}}),
    )];
    assert!(vars::substitute(&mut bad, &values, &vars::default_var_reference_paths()).is_err());
}

#[test]
fn replacements_use_previous_identities() {
    let mut rs = vec![
        Resource::new(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pre-src"}, "data": {"k": "v"}}),
        ),
        Resource::new(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dst"}, "data": {"k": "old"}}),
        ),
    ];
    let list = vec![
        json!({"source": {"kind": "ConfigMap", "name": "src", "fieldPath": "data.k"},
        "targets": [{"select": {"name": "dst"}, "fieldPaths": ["data.k"]}]}),
    ];
    // Unknown original name: nothing is selected.
    let err = replacements::apply(&mut rs.clone(), &list).unwrap_err();
    assert!(
        matches!(err, PatchError::Replacement { index: 0, .. }),
        "{err}"
    );
    let prev = ResId {
        version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "src".into(),
        ..Default::default()
    };
    replacements::apply_with_ids(&mut rs, &[vec![prev], vec![]], &list).unwrap();
    assert_eq!(rs[1].obj["data"]["k"], json!("v"));
    assert!(replacements::apply(&mut rs, &[json!({"source": {"kind": "ConfigMap"}})]).is_err());
}
