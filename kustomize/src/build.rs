//! The build: load a kustomization tree, run generators and transformers in kustomize's order
//! (`walk.rs` and the modules it uses), then add hash suffixes, fix name references, resolve
//! vars and sort.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::acc::{Acc, Ctx};
use crate::error::{KustomizeError, Result};
use crate::generator::content_hash;
use crate::glue::vars;
use crate::kustomization::{Kustomization, load_kustomization};
use crate::loader::{BuildOptions, Loader};
use crate::nameref::fix_back_references;
use crate::resource::Resource;
use crate::sort::{legacy_sort, legacy_sort_with};
use crate::transform::set_meta;
use crate::walk::accumulate_tree;

/// The `app.kubernetes.io/managed-by` value of `buildMetadata: [managedByLabel]` (what kustomize
/// prints when built as a library, as in kubectl and Flux).
pub const MANAGED_BY: &str = "kustomize-(devel)";

/// Builds the kustomization in `dir`, within the budget of `opts`.
pub fn build(dir: &Path, opts: &BuildOptions) -> Result<Vec<Resource>> {
    let ldr = Loader::new(dir, opts)?;
    let k = load_kustomization(&ldr)?;
    build_loaded_with(&ldr, &k, true)
}

/// Builds an already loaded kustomization. With `default_sort` false the objects keep
/// kustomize's accumulation order when the kustomization has no `sortOptions` (what kustomize
/// does as a library with default options, as Flux uses it); true sorts them in the legacy
/// order as `kustomize build` does.
pub(crate) fn build_loaded_with(
    ldr: &Loader,
    k: &Kustomization,
    default_sort: bool,
) -> Result<Vec<Resource>> {
    let mut ctx = Ctx::new(ldr.root.clone());
    let acc = accumulate_tree(ldr, k, &mut ctx)?;
    let mut out = finish(ldr, acc, k, default_sort).map_err(|e| k.locate(ldr, e))?;
    if ldr.generate_names() {
        crate::generate_name::restore_generate_names(out.iter_mut().map(|r| &mut r.obj));
    }
    Ok(out)
}

/// The steps after all kustomizations are accumulated: hash suffixes, name references, build
/// metadata, vars, dropping local-config objects and sorting.
fn finish(
    ldr: &Loader,
    mut acc: Acc,
    k: &Kustomization,
    default_sort: bool,
) -> Result<Vec<Resource>> {
    let build_meta = k.str_list("buildMetadata")?;
    for m in &build_meta {
        if ![
            "originAnnotations",
            "transformerAnnotations",
            "managedByLabel",
        ]
        .contains(&m.as_str())
        {
            return Err(k.field_err("buildMetadata", format!("unknown option '{m}'")));
        }
    }
    // hash suffixes (generated objects only: kubectl ignores a needs-hash annotation on resources)
    for item in acc.items.iter_mut() {
        if item.needs_hash {
            let h = content_hash(&item.res.obj);
            item.store_previous_id();
            let name = format!("{}-{h}", item.res.name());
            set_meta(&mut item.res.obj, "name", json!(name));
        }
    }
    fix_back_references(&mut acc.items, &acc.config.name_reference, ldr.meter())?;
    if build_meta.iter().any(|m| m == "originAnnotations") {
        for item in acc.items.iter_mut() {
            let Some(origin) = item.origin.clone() else {
                continue;
            };
            let mut ann = match item.res.obj.pointer("/metadata/annotations") {
                Some(Value::Object(m)) => m.clone(),
                _ => Map::new(),
            };
            ann.entry("config.kubernetes.io/origin")
                .or_insert(json!(origin));
            set_meta(&mut item.res.obj, "annotations", Value::Object(ann));
        }
    }
    if build_meta.iter().any(|m| m == "managedByLabel") {
        for item in acc.items.iter_mut() {
            let mut labels = match item.res.obj.pointer("/metadata/labels") {
                Some(Value::Object(m)) => m.clone(),
                _ => Map::new(),
            };
            labels.insert("app.kubernetes.io/managed-by".into(), json!(MANAGED_BY));
            set_meta(&mut item.res.obj, "labels", Value::Object(labels));
        }
    }
    ldr.meter().check_time()?;
    resolve_vars(&mut acc)?;
    for item in acc.items.iter_mut() {
        // kustomize rewrites annotations while it tracks build state, which drops an empty or
        // null `metadata.annotations`.
        if let Some(Value::Object(meta)) = item.res.obj.get_mut("metadata")
            && meta
                .get("annotations")
                .is_some_and(|a| a.is_null() || a.as_object().is_some_and(|m| m.is_empty()))
        {
            meta.remove("annotations");
        }
    }
    let mut out: Vec<Resource> = acc
        .items
        .into_iter()
        .filter(|i| {
            crate::resource::metadata_field(&i.res.obj, "annotations")
                .and_then(|a| a.get("config.kubernetes.io/local-config"))
                .and_then(Value::as_str)
                != Some("true")
        })
        .map(|i| i.res)
        .collect();
    apply_sort(&mut out, k, default_sort)?;
    Ok(out)
}

fn apply_sort(out: &mut [Resource], k: &Kustomization, default_sort: bool) -> Result<()> {
    let Some(so) = k.get("sortOptions") else {
        if default_sort {
            legacy_sort(out);
        }
        return Ok(());
    };
    match so.get("order").and_then(Value::as_str).unwrap_or("legacy") {
        "fifo" => Ok(()),
        "legacy" => {
            let list = |f: &str| -> Vec<String> {
                so.pointer(&format!("/legacySortOptions/{f}"))
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            legacy_sort_with(out, &list("orderFirst"), &list("orderLast"));
            Ok(())
        }
        other => Err(k.field_err("sortOptions", format!("unknown order '{other}'"))),
    }
}

fn resolve_vars(acc: &mut Acc) -> Result<()> {
    if acc.vars.is_empty() {
        return Ok(());
    }
    let specs = acc.config.var_reference.clone();
    vars(&mut acc.items, &acc.vars, &specs).map_err(|e| KustomizeError::Transform {
        context: "vars".to_string(),
        message: e.to_string(),
    })
}
