//! Builtin plugin kinds that map onto a kustomization field: each configuration object is
//! turned into the equivalent field of a kustomization and run by that field's implementation
//! (patches, replacements, generators), so a plugin and its field behave alike.

use serde_json::{Map, Value, json};

use crate::acc::{Acc, Ctx};
use crate::error::Result;
use crate::generator::{self, Generated, content_hash};
use crate::kustomization::Kustomization;
use crate::loader::Loader;
use crate::patch::PatchError;
use crate::patching::perr;
use crate::patching::{run_patches, run_patches_json6902, run_patches_strategic_merge};
use crate::transform::set_meta;
use crate::yaml::parse_stream;

/// A kustomization of the same file holding only `fields`.
fn as_field(k: &Kustomization, fields: Value) -> Kustomization {
    Kustomization::synthetic(
        k.file.clone(),
        match fields {
            Value::Object(m) => m,
            _ => Map::new(),
        },
    )
}

/// The string field `f` of a configuration ("" when absent); a non-string is an error.
fn text(k: &Kustomization, kind: &str, doc: &Value, f: &str) -> Result<String> {
    match doc.get(f) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(k.field_err(
            "transformers",
            format!("{kind}: '{f}' must be a string, got {other}"),
        )),
    }
}

/// `PatchTransformer`: one `patches:` entry (`patch` or `path`, `target`, `options`).
pub(super) fn patch(
    ldr: &Loader,
    k: &Kustomization,
    acc: &mut Acc,
    ctx: &Ctx,
    doc: &Value,
) -> Result<()> {
    let kind = "PatchTransformer";
    let mut entry = Map::new();
    let patch = text(k, kind, doc, "patch")?;
    let path = text(k, kind, doc, "path")?;
    if !patch.trim().is_empty() {
        entry.insert("patch".into(), json!(patch.trim()));
    }
    if !path.is_empty() {
        entry.insert("path".into(), json!(path));
    }
    for f in ["target", "options"] {
        if let Some(v) = doc.get(f).filter(|v| !v.is_null()) {
            entry.insert(f.into(), v.clone());
        }
    }
    run_patches(ldr, &as_field(k, json!({ "patches": [entry] })), acc, ctx)
}

/// `PatchStrategicMergeTransformer`: `paths` (files or inline patches) and `patches` (inline).
pub(super) fn strategic_merge(
    ldr: &Loader,
    k: &Kustomization,
    acc: &mut Acc,
    ctx: &Ctx,
    doc: &Value,
) -> Result<()> {
    let kind = "PatchStrategicMergeTransformer";
    let mut list: Vec<Value> = match doc.get("paths") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(other) => {
            return Err(k.field_err(
                "transformers",
                format!("{kind}: 'paths' must be a list, got {other}"),
            ));
        }
    };
    let inline = text(k, kind, doc, "patches")?;
    if !inline.is_empty() {
        list.push(json!(inline));
    }
    if list.is_empty() {
        return Err(k.field_err(
            "transformers",
            format!("{kind}: empty file path and empty patch content"),
        ));
    }
    let k2 = as_field(k, json!({ "patchesStrategicMerge": list }));
    run_patches_strategic_merge(ldr, &k2, acc, ctx)
}

/// `PatchJson6902Transformer`: a `target` (with a name) and `path` or `jsonOp`.
pub(super) fn json6902(ldr: &Loader, k: &Kustomization, acc: &mut Acc, doc: &Value) -> Result<()> {
    let kind = "PatchJson6902Transformer";
    let target = doc.get("target").filter(|t| !t.is_null());
    if target
        .and_then(|t| t.get("name"))
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(k.field_err(
            "transformers",
            format!("{kind}: must specify the target name"),
        ));
    }
    let path = text(k, kind, doc, "path")?;
    let op = text(k, kind, doc, "jsonOp")?;
    let mut entry = Map::new();
    entry.insert("target".into(), target.cloned().unwrap_or(Value::Null));
    match (path.is_empty(), op.is_empty()) {
        (true, true) => {
            return Err(k.field_err(
                "transformers",
                format!("{kind}: empty file path and empty jsonOp"),
            ));
        }
        (false, false) => {
            return Err(k.field_err(
                "transformers",
                format!("{kind}: must specify a file path or jsonOp, not both"),
            ));
        }
        (false, true) => entry.insert("path".into(), json!(path)),
        (true, false) => entry.insert("patch".into(), json!(op)),
    };
    run_patches_json6902(
        ldr,
        &as_field(k, json!({ "patchesJson6902": [entry] })),
        acc,
    )
}

/// `ReplacementTransformer`: `replacements`, each inline or a `path`.
pub(super) fn replacements(
    ldr: &Loader,
    k: &Kustomization,
    acc: &mut Acc,
    doc: &Value,
) -> Result<()> {
    let list = match doc.get("replacements") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(a)) => a.clone(),
        Some(other) => {
            return Err(k.field_err(
                "transformers",
                format!("ReplacementTransformer: 'replacements' must be a list, got {other}"),
            ));
        }
    };
    for r in &list {
        if r.get("path").is_some_and(|p| !p.is_null())
            && (r.get("source").is_some_and(|s| !s.is_null())
                || r.get("targets")
                    .and_then(Value::as_array)
                    .is_some_and(|t| !t.is_empty()))
        {
            return Err(k.field_err(
                "transformers",
                "ReplacementTransformer: cannot specify both path and inline replacement",
            ));
        }
    }
    run_replacements(ldr, &as_field(k, json!({ "replacements": list })), acc)
}

/// `HashTransformer`: appends the content hash to the names of generated objects now.
pub(super) fn hash(acc: &mut Acc) {
    for item in acc.items.iter_mut().filter(|i| i.needs_hash) {
        let h = content_hash(&item.res.obj);
        item.store_previous_id();
        let name = format!("{}-{h}", item.res.name());
        set_meta(&mut item.res.obj, "name", json!(name));
    }
}

/// `ConfigMapGenerator` / `SecretGenerator` under `generators:`: the fields of a
/// `configMapGenerator:` (`secretGenerator:`) entry at the top level, the name and namespace
/// defaulting to the object's `metadata`. The kustomization's `generatorOptions` do not apply.
pub(crate) fn generate(ldr: &Loader, k: &Kustomization, doc: &Value) -> Result<Vec<Generated>> {
    let field = match doc.get("kind").and_then(Value::as_str) {
        Some("SecretGenerator") => "secretGenerator",
        _ => "configMapGenerator",
    };
    let mut args = doc.as_object().cloned().unwrap_or_default();
    for f in ["apiVersion", "kind", "metadata"] {
        args.remove(f);
    }
    for f in ["name", "namespace"] {
        let empty = args
            .get(f)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if let Some(v) = doc.pointer(&format!("/metadata/{f}")).filter(|_| empty) {
            args.insert(f.into(), v.clone());
        }
    }
    generator::generate(ldr, &as_field(k, json!({ field: [args] })))
}

/// `replacements:` (of a kustomization or a `ReplacementTransformer`): entries inline or
/// read from a `path` (one replacement or a list of them).
pub(crate) fn run_replacements(ldr: &Loader, k: &Kustomization, acc: &mut Acc) -> Result<()> {
    let list = k.list("replacements")?;
    if list.is_empty() {
        return Ok(());
    }
    let mut all = Vec::new();
    // for each replacement, the entry it came from (to place an error at)
    let mut owners = Vec::new();
    for (n, r) in k.entries("replacements")?.enumerate() {
        if let Some(path) = r.get("path").and_then(Value::as_str) {
            let (p, text) = ldr.read_text(path)?;
            for doc in parse_stream(&text, &p.display().to_string())? {
                match doc {
                    Value::Array(a) => all.extend(a),
                    other => all.push(other),
                }
            }
        } else {
            all.push(r);
        }
        owners.resize(all.len(), n);
    }
    crate::glue::replacements(&mut acc.items, &all).map_err(|e| {
        let owner = match &e {
            PatchError::Replacement { index, .. } => owners.get(*index).copied(),
            _ => None,
        };
        let e = perr(k, "replacements", e);
        match owner {
            Some(n) => k.at_entry(Some(ldr), "replacements", n, e),
            None => e,
        }
    })
}
