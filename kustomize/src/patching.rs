//! Patches of a kustomization: `patchesStrategicMerge`, `patches` and `patchesJson6902`.

use serde_json::{Map, Value, json};

use crate::acc::{Acc, Ctx};
use crate::error::{KustomizeError, Result};
use crate::item::{Item, id_string};
use crate::kustomization::Kustomization;
use crate::loader::Loader;
use crate::patch::{
    MergeOptions, PatchError, PatchOutcome, Schema, Selector, is_json6902, json6902,
    strategic_merge_consuming,
};
use crate::resource::id_of;
use crate::scope::effective;
use crate::yaml::{PathSeg, parse_one, parse_stream};

/// `patchesStrategicMerge:`: patches given as file paths or inline YAML, applied by id.
pub(crate) fn run_patches_strategic_merge(
    ldr: &Loader,
    k: &Kustomization,
    acc: &mut Acc,
    ctx: &Ctx,
) -> Result<()> {
    for entry in k.entries("patchesStrategicMerge")? {
        let Some(s) = entry.as_str() else {
            return Err(k.field_err(
                "patchesStrategicMerge",
                "entries must be strings (paths or inline patches)",
            ));
        };
        for patch in load_patch_docs(ldr, k, "patchesStrategicMerge", s)? {
            ldr.meter().check_time()?;
            smp_by_id(acc, k, "patchesStrategicMerge", &patch, ctx.schema())?;
        }
    }
    Ok(())
}

/// `patchesJson6902:`: JSON 6902 patches applied to every object their target selects (a
/// target that selects nothing is not an error).
pub(crate) fn run_patches_json6902(ldr: &Loader, k: &Kustomization, acc: &mut Acc) -> Result<()> {
    for entry in k.entries("patchesJson6902")? {
        let field = "patchesJson6902";
        let ops = match (
            entry.get("path").and_then(Value::as_str),
            entry.get("patch").and_then(Value::as_str),
        ) {
            (Some(p), _) => {
                let (pp, text) = ldr.read_text(p)?;
                parse_one(&text, &pp.display().to_string())?
            }
            (None, Some(text)) => parse_one(
                text,
                &format!("{} (patchesJson6902, inline)", k.file.display()),
            )?,
            (None, None) => return Err(k.field_err(field, "must specify one of patch and path")),
        };
        let target = entry
            .get("target")
            .ok_or_else(|| k.field_err(field, "must specify a target"))?;
        let sel = selector_of(k, field, target)?;
        // like kustomize, a JSON 6902 target that matches nothing is not an error
        for item in acc.items.iter_mut() {
            if sel.matches(&item.res) {
                ldr.meter().check_time()?;
                json6902(&mut item.res.obj, &ops).map_err(|e| perr(k, field, e))?;
            }
        }
    }
    Ok(())
}

/// Applies JSON 6902 operations of `patches:` to one object as kustomize does. Its build
/// annotations make `metadata.annotations` exist while the patch runs (not so for the older
/// `patchesJson6902:`), so `add /metadata/annotations/<key>` works on an object without
/// annotations; a map that stays empty is dropped again.
fn json6902_object(obj: &mut Value, ops: &Value) -> std::result::Result<(), PatchError> {
    let added = match obj.get_mut("metadata") {
        Some(Value::Object(m)) if !m.contains_key("annotations") => {
            m.insert("annotations".into(), Value::Object(Map::new()));
            true
        }
        _ => false,
    };
    let result = json6902(obj, ops);
    if added
        && let Some(Value::Object(m)) = obj.get_mut("metadata")
        && m.get("annotations")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        m.remove("annotations");
    }
    result
}

pub(crate) fn perr(k: &Kustomization, field: &str, e: impl std::fmt::Display) -> KustomizeError {
    KustomizeError::Patch {
        file: k.file.clone(),
        field: field.to_string(),
        message: e.to_string(),
    }
}

/// Loads a patch given as a file path or inline YAML; returns its documents.
fn load_patch_docs(
    ldr: &Loader,
    k: &Kustomization,
    field: &str,
    text_or_path: &str,
) -> Result<Vec<Value>> {
    // a file when one exists by that name, else inline YAML if it looks like YAML (as kustomize
    // tries the file first)
    let looks_inline = text_or_path.contains('\n')
        || text_or_path.contains(": ")
        || text_or_path.trim_start().starts_with(['[', '{']);
    if !looks_inline || ldr.join(text_or_path).is_file() {
        let (p, text) = ldr.read_text(text_or_path)?;
        return parse_stream(&text, &p.display().to_string());
    }
    parse_stream(
        text_or_path,
        &format!("{} ({field}, inline)", k.file.display()),
    )
}

fn apply_smp(
    item: &mut Item,
    patch: &Value,
    schema: &Schema,
    allow_name: bool,
    allow_kind: bool,
) -> std::result::Result<bool, PatchError> {
    // Only what may be restored afterwards is kept (not a copy of the whole object: CRDs are
    // hundreds of kilobytes, and every patch would copy one).
    let kept = |ptr: &str| item.res.obj.pointer(ptr).cloned();
    let before = [
        kept("/metadata/name"),
        kept("/metadata/namespace"),
        kept("/kind"),
        kept("/apiVersion"),
    ];
    let before_id = item.res.id();
    let outcome =
        strategic_merge_consuming(&mut item.res.obj, patch, schema, &MergeOptions::default())?;
    if matches!(outcome, PatchOutcome::Deleted) {
        return Ok(false);
    }
    if !item.empty_values.is_empty() {
        let paths = std::mem::take(&mut item.empty_values);
        drop_empty_values(&mut item.res.obj, &paths);
    }
    let restore = |obj: &mut Value, old: &Option<Value>, key: &[&str]| {
        let mut cur = obj;
        for (i, seg) in key.iter().enumerate() {
            let Value::Object(m) = cur else { return };
            if i + 1 == key.len() {
                match old {
                    Some(v) => {
                        m.insert((*seg).to_string(), v.clone());
                    }
                    None => {
                        m.remove(*seg);
                    }
                }
                return;
            }
            cur = m
                .entry((*seg).to_string())
                .or_insert_with(|| Value::Object(Map::new()));
        }
    };
    let [name, namespace, kind, api_version] = &before;
    if !allow_name {
        restore(&mut item.res.obj, name, &["metadata", "name"]);
        restore(&mut item.res.obj, namespace, &["metadata", "namespace"]);
    }
    if !allow_kind {
        restore(&mut item.res.obj, kind, &["kind"]);
        restore(&mut item.res.obj, api_version, &["apiVersion"]);
    }
    if item.res.id() != before_id {
        item.prev_ids.push(effective(before_id));
    }
    Ok(true)
}

/// Applies one strategic-merge patch document to the object it names (by id).
fn smp_by_id(
    acc: &mut Acc,
    k: &Kustomization,
    field: &str,
    patch: &Value,
    schema: &Schema,
) -> Result<()> {
    let pid = id_of(patch);
    let matches: Vec<usize> = acc
        .items
        .iter()
        .enumerate()
        .filter(|(_, x)| {
            x.matches_any_id(&pid)
                || (x.org_id().name == pid.name
                    && x.org_id().kind == pid.kind
                    && pid.namespace.is_none())
        })
        .map(|(i, _)| i)
        .collect();
    let chosen: Vec<usize> = if matches.len() > 1 {
        matches
            .iter()
            .copied()
            .filter(|i| acc.items[*i].matches_any_id(&pid))
            .collect()
    } else {
        matches
    };
    if chosen.len() != 1 {
        return Err(KustomizeError::PatchTargetNotFound {
            file: k.file.clone(),
            field: field.to_string(),
            target: id_string(&pid),
        });
    }
    let i = chosen[0];
    let keep =
        apply_smp(&mut acc.items[i], patch, schema, false, false).map_err(|e| perr(k, field, e))?;
    if !keep {
        acc.items.remove(i);
    }
    Ok(())
}

fn selector_of(k: &Kustomization, field: &str, v: &Value) -> Result<Selector> {
    Selector::from_value(v).map_err(|e| perr(k, field, e))
}

/// `patches:`: strategic merge or JSON 6902 patches, by id or by target selector.
pub(crate) fn run_patches(ldr: &Loader, k: &Kustomization, acc: &mut Acc, ctx: &Ctx) -> Result<()> {
    for entry in k.entries("patches")? {
        let field = "patches";
        let docs = match (
            entry.get("path").and_then(Value::as_str),
            entry.get("patch").and_then(Value::as_str),
        ) {
            (Some(p), None) => {
                let (pp, text) = ldr.read_text(p)?;
                parse_stream(&text, &pp.display().to_string())?
            }
            (None, Some(text)) => {
                parse_stream(text, &format!("{} (patches, inline)", k.file.display()))?
            }
            (Some(_), Some(_)) => {
                return Err(k.field_err(field, "patch and path can't be set at the same time"));
            }
            (None, None) => return Err(k.field_err(field, "must specify one of patch and path")),
        };
        let allow_name = entry
            .pointer("/options/allowNameChange")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let allow_kind = entry
            .pointer("/options/allowKindChange")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let target = match entry.get("target").filter(|t| !t.is_null()) {
            Some(t) => Some(selector_of(k, field, t)?),
            None => None,
        };
        let json_ops = docs.len() == 1 && is_json6902(&docs[0]);
        if json_ops {
            let Some(sel) = target else {
                return Err(k.field_err(field, "a JSON 6902 patch needs a target"));
            };
            for item in acc.items.iter_mut() {
                if sel.matches(&item.res) {
                    ldr.meter().check_time()?;
                    json6902_object(&mut item.res.obj, &docs[0]).map_err(|e| perr(k, field, e))?;
                }
            }
            continue;
        }
        for patch in docs {
            ldr.meter().check_time()?;
            match &target {
                None => smp_by_id(acc, k, field, &patch, ctx.schema())?,
                Some(sel) => {
                    let mut keep = Vec::with_capacity(acc.items.len());
                    for mut item in std::mem::take(&mut acc.items) {
                        if sel.matches(&item.res) {
                            ldr.meter().check_time()?;
                            let mut p = patch.clone();
                            if let Value::Object(pm) = &mut p {
                                let meta = pm.entry("metadata").or_insert_with(|| json!({}));
                                if let Value::Object(mm) = meta {
                                    if !allow_name {
                                        mm.insert("name".into(), json!(item.res.name()));
                                    }
                                    if let Some(ns) = item.res.namespace() {
                                        mm.entry("namespace").or_insert(json!(ns));
                                    }
                                }
                            }
                            if !apply_smp(&mut item, &p, ctx.schema(), allow_name, allow_kind)
                                .map_err(|e| perr(k, field, e))?
                            {
                                continue;
                            }
                        }
                        keep.push(item);
                    }
                    acc.items = keep;
                }
            }
        }
    }
    Ok(())
}

/// Removes the fields at `paths` that are still null.
fn drop_empty_values(obj: &mut Value, paths: &[Vec<PathSeg>]) {
    fn go(cur: &mut Value, p: &[PathSeg]) {
        match p {
            [] => {}
            [PathSeg::Key(last)] => {
                if let Value::Object(m) = cur
                    && m.get(last).is_some_and(Value::is_null)
                {
                    m.remove(last);
                }
            }
            [seg, rest @ ..] => {
                let next = match (seg, cur) {
                    (PathSeg::Key(k), Value::Object(m)) => m.get_mut(k),
                    (PathSeg::Index(i), Value::Array(a)) => a.get_mut(*i),
                    _ => None,
                };
                if let Some(n) = next {
                    go(n, rest);
                }
            }
        }
    }
    for p in paths {
        go(obj, p);
    }
}
