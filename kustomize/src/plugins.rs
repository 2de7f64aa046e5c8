//! The `transformers:` field: configurations of kustomize's built-in transformer plugins
//! (`apiVersion: builtin`), given as files or inline YAML.

use serde_json::Value;

use crate::error::{KustomizeError, Result};
use crate::fieldspec::{FieldSpec, TransformerConfig, split_path, visit_path};
use crate::item::Item;
use crate::kustomization::{Kustomization, str_map_lenient};
use crate::patch::Selector;
use crate::resource::MAX_DEPTH;
use crate::scope::is_cluster_scoped;
use crate::transform::{self, ImageRule};

fn specs_of(v: &Value, origin: &str) -> Result<Vec<FieldSpec>> {
    match v.get("fieldSpecs") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(list) => Ok(TransformerConfig::from_value(
            &serde_json::json!({ "labels": list }),
            origin,
        )?
        .labels),
    }
}

/// Runs transformer configurations (the documents `transformers:` lists) in order. `root_name`
/// is the name of the directory of the kustomization that lists them.
pub fn run_transformer_docs(
    k: &Kustomization,
    root_name: &str,
    items: &mut [Item],
    docs: &[Value],
) -> Result<()> {
    for doc in docs {
        run_one(k, root_name, items, doc)?;
    }
    Ok(())
}

fn run_one(k: &Kustomization, root_name: &str, items: &mut [Item], doc: &Value) -> Result<()> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    let origin = k.file.display().to_string();
    let unsupported = || {
        KustomizeError::Unsupported {
        file: k.file.clone(),
        field: "transformers".to_string(),
        entry: kind.to_string(),
        message: "only kustomize's built-in transformers (PrefixSuffixTransformer, LabelTransformer, AnnotationsTransformer, NamespaceTransformer, ImageTagTransformer, ValueAddTransformer) are supported".to_string(),
    }
    };
    let specs = specs_of(doc, &origin)?;
    let s = |f: &str| doc.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    match kind {
        "PrefixSuffixTransformer" | "PrefixTransformer" | "SuffixTransformer" => {
            transform::prefix_suffix(items, &s("prefix"), &s("suffix"), &specs)
        }
        "LabelTransformer" => {
            let pairs = doc
                .get("labels")
                .map(str_map_lenient)
                .transpose()
                .map_err(|m| k.field_err("transformers", m))?
                .unwrap_or_default();
            transform::set_map_entries(items, &pairs, &specs, "labels")
        }
        "AnnotationsTransformer" => {
            let pairs = doc
                .get("annotations")
                .map(str_map_lenient)
                .transpose()
                .map_err(|m| k.field_err("transformers", m))?
                .unwrap_or_default();
            transform::set_map_entries(items, &pairs, &specs, "annotations")
        }
        "NamespaceTransformer" => {
            let ns = doc
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            transform::namespace(items, ns, &specs)
        }
        "ImageTagTransformer" => {
            let it = doc.get("imageTag").cloned().unwrap_or(Value::Null);
            let g = |f: &str| {
                it.get(f)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
            };
            let rule = ImageRule {
                name: g("name").unwrap_or_default(),
                new_name: g("newName"),
                new_tag: g("newTag"),
                digest: g("digest"),
            };
            transform::images(items, &[rule], &specs)
        }
        "ValueAddTransformer" => value_add(k, root_name, items, doc),
        _ => Err(unsupported()),
    }
}

fn value_add(k: &Kustomization, root_name: &str, items: &mut [Item], doc: &Value) -> Result<()> {
    let value = doc
        .get("value")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or(root_name)
        .to_string();
    let targets = doc
        .get("targets")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if targets.is_empty() {
        return Err(k.field_err(
            "transformers",
            "ValueAddTransformer: must specify at least one target",
        ));
    }
    for t in targets {
        let field_path = t.get("fieldPath").and_then(Value::as_str).unwrap_or("");
        if field_path.is_empty() {
            return Err(k.field_err(
                "transformers",
                "ValueAddTransformer: fieldPath cannot be empty",
            ));
        }
        if split_path(field_path).len() > MAX_DEPTH {
            return Err(k.field_err(
                "transformers",
                format!("ValueAddTransformer: fieldPath has more than {MAX_DEPTH} segments"),
            ));
        }
        let pos = t
            .get("filePathPosition")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if pos < 0 {
            return Err(k.field_err(
                "transformers",
                format!("value of FilePathPosition ({pos}) cannot be negative"),
            ));
        }
        let selector = match t.get("selector").filter(|s| !s.is_null()) {
            Some(s) => Some(
                Selector::from_value(s).map_err(|e| k.field_err("transformers", e.to_string()))?,
            ),
            None => None,
        };
        for item in items.iter_mut() {
            if selector.as_ref().is_some_and(|s| !s.matches(&item.res)) {
                continue;
            }
            if field_path == "metadata/namespace" {
                if !is_cluster_scoped(item.res.api_version(), item.res.kind()) {
                    transform::set_meta(
                        &mut item.res.obj,
                        "namespace",
                        Value::String(value.clone()),
                    );
                }
                continue;
            }
            let segs = split_path(field_path);
            visit_path(
                &mut item.res.obj,
                &segs,
                true,
                &|| Value::String(String::new()),
                &mut |v| {
                    let old = match v {
                        Value::String(s) => s.clone(),
                        _ => String::new(),
                    };
                    let new = if pos == 0 {
                        value.clone()
                    } else {
                        let mut parts: Vec<&str> = if old.is_empty() {
                            Vec::new()
                        } else {
                            old.split('/').collect()
                        };
                        let idx = usize::try_from(pos - 1).unwrap_or(0);
                        if idx >= parts.len() {
                            parts.push(&value);
                        } else {
                            parts.insert(idx, &value);
                        }
                        parts.join("/")
                    };
                    *v = Value::String(new);
                    Ok(())
                },
            )?;
        }
    }
    Ok(())
}
