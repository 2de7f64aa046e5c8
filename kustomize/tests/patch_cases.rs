//! Replays the cases of `tests/patch_data/cases.json` through the patch module. Every expected
//! value (or expected failure) in that file is what `kubectl kustomize` (Kustomize v5.5.0)
//! produced for the same input; `tests/patch_data/gen.py` regenerates it.

#![allow(clippy::unwrap_used)] // tests may unwrap (project rule)

use std::path::PathBuf;
use std::sync::OnceLock;

use rflux_kustomize::patch::{
    PatchError, PatchOutcome, Schema, Selector, is_json6902, json6902, replacements,
    strategic_merge, vars,
};
use rflux_kustomize::resource::{Resource, id_of};
use serde_json::Value;

fn cases() -> &'static [Value] {
    static CASES: OnceLock<Vec<Value>> = OnceLock::new();
    CASES.get_or_init(|| {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/patch_data/cases.json");
        let text = std::fs::read_to_string(&p).unwrap();
        serde_json::from_str::<Vec<Value>>(&text).unwrap()
    })
}

fn case(name: &str) -> Value {
    cases()
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no case {name}"))
}

fn resources(c: &Value) -> Vec<Resource> {
    c["resources"]
        .as_array()
        .unwrap()
        .iter()
        .cloned()
        .map(Resource::new)
        .collect()
}

fn restore(obj: &mut Value, before: &Value) {
    for ptr in ["/metadata/name", "/metadata/namespace", "/kind"] {
        let old = before.pointer(ptr).cloned();
        let (parent, key) = ptr.rsplit_once('/').unwrap();
        let target = if parent.is_empty() {
            Some(&mut *obj)
        } else {
            obj.pointer_mut(parent)
        };
        if let Some(Value::Object(m)) = target {
            match old {
                Some(v) => {
                    m.insert(key.to_string(), v);
                }
                None => {
                    m.remove(key);
                }
            }
        }
    }
}

/// Applies one strategic merge patch to the resources at `idx`, dropping deleted ones.
fn smp_all(
    res: &mut Vec<Resource>,
    idx: &[usize],
    patch: &Value,
    schema: &Schema,
) -> Result<(), PatchError> {
    let mut deleted = Vec::new();
    for &i in idx {
        let before = res[i].obj.clone();
        match strategic_merge(&mut res[i].obj, patch, schema)? {
            PatchOutcome::Deleted => deleted.push(i),
            PatchOutcome::Patched => restore(&mut res[i].obj, &before),
        }
    }
    for i in deleted.into_iter().rev() {
        res.remove(i);
    }
    Ok(())
}

/// What the build pipeline does with a `patches:` list.
fn run_patches(c: &Value, res: &mut Vec<Resource>) -> Result<(), PatchError> {
    let schema = Schema::builtin();
    for p in c["patches"].as_array().unwrap() {
        let docs = p["docs"].as_array().unwrap();
        if p["target"].is_null() {
            for doc in docs {
                let pid = id_of(doc);
                let idx: Vec<usize> = (0..res.len())
                    .filter(|&i| {
                        let cur = res[i].id();
                        cur.kind == pid.kind
                            && cur.name == pid.name
                            && cur.group == pid.group
                            && cur.version == pid.version
                    })
                    .collect();
                smp_all(res, &idx, doc, &schema)?;
            }
        } else {
            let sel = Selector::from_value(&p["target"])?;
            if docs.len() == 1 && is_json6902(&docs[0]) {
                for r in res.iter_mut().filter(|r| sel.matches(r)) {
                    json6902(&mut r.obj, &docs[0])?;
                }
            } else {
                for doc in docs {
                    let idx: Vec<usize> =
                        (0..res.len()).filter(|&i| sel.matches(&res[i])).collect();
                    smp_all(res, &idx, doc, &schema)?;
                }
            }
        }
    }
    Ok(())
}

fn run(c: &Value) -> Result<Vec<Value>, PatchError> {
    let mut res = resources(c);
    match c["kind"].as_str().unwrap() {
        "patches" => run_patches(c, &mut res)?,
        "replacements" => replacements::apply(
            &mut res,
            c["kustomization"]["replacements"].as_array().unwrap(),
        )?,
        "vars" => {
            let values = vars::resolve(&res, c["kustomization"]["vars"].as_array().unwrap())?;
            vars::substitute(&mut res, &values, &vars::default_var_reference_paths())?;
        }
        other => panic!("unknown case kind {other}"),
    }
    Ok(res.into_iter().map(|r| r.obj).collect())
}

fn sort_key(v: &Value) -> String {
    format!(
        "{}/{}/{}",
        v["kind"].as_str().unwrap_or(""),
        v.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(""),
        v.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    )
}

fn check(name: &str) {
    let c = case(name);
    let got = run(&c);
    if let Some(err) = c.get("error") {
        assert!(
            got.is_err(),
            "{name}: kustomize fails ({err}) but we produced {got:#?}"
        );
        return;
    }
    let mut got = got.unwrap_or_else(|e| panic!("{name}: unexpected error {e}"));
    let mut want = c["expected"].as_array().unwrap().clone();
    got.sort_by_key(sort_key);
    want.sort_by_key(sort_key);
    let keys = |v: &[Value]| v.iter().map(sort_key).collect::<Vec<_>>();
    assert_eq!(keys(&got), keys(&want), "{name}: resources differ");
    for (g, w) in got.iter().zip(&want) {
        assert!(
            g == w,
            "{name}: {} differs\n got: {g}\nwant: {w}",
            sort_key(w)
        );
    }
}

#[test]
fn every_case_is_covered_by_a_test() {
    let src = include_str!("patch_cases.rs");
    for c in cases() {
        let name = c["name"].as_str().unwrap();
        assert!(
            src.contains(&format!("    {name},\n")),
            "case {name} has no test"
        );
    }
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check(stringify!($name));
            }
        )*
    };
}

cases!(
    smp_containers_env_ports_finalizers,
    smp_directives,
    smp_list_delete_and_merge_directive,
    smp_nulls,
    smp_type_mismatch_error,
    smp_top_level_delete,
    smp_crd_lists_replaced,
    smp_multikey_ports,
    smp_ports_same_protocol,
    smp_ports_no_protocol,
    smp_cronjob_and_statefulset,
    smp_rbac_rules_replaced,
    smp_primitive_union_dupes,
    smp_element_without_key,
    smp_new_list_with_directives,
    smp_unknown_directive_error,
    select_name_regex_and_labels,
    json6902_ops,
    json6902_replace_missing_adds,
    json6902_remove_missing_error,
    json6902_add_missing_parent_error,
    json6902_index_out_of_range_error,
    json6902_test_failure_error,
    json6902_add_replaces_existing,
    smp_with_target_multiple,
    repl_types_create_wildcard_regex,
    repl_delimiters,
    repl_select_reject_labels,
    repl_default_fieldpaths,
    repl_create_list_element,
    repl_missing_target_field_error,
    repl_missing_source_field_error,
    repl_ambiguous_source_error,
    repl_no_source_error,
    repl_bad_type_error,
    vars_basic,
    vars_no_apiversion_error,
    vars_namespace_mismatch_error,
    vars_missing_field_error,
    smp_target_explicit_nulls_kept,
    repl_empty_string_source,
    smp_random_lists,
    smp_random_lists_2,
    smp_random_service_ports,
    repl_path_syntax,
    repl_index_out_of_range_error,
    repl_source_delimiter_out_of_range_error,
    repl_select_namespace_and_version,
    smp_random_mixed,
);
