//! The `transformers:` field: configurations of kustomize's built-in transformer plugins
//! (`apiVersion: builtin`), given as files, inline YAML or directories, and the `generators:`
//! field (`generators.rs`).

mod builtins;
mod generators;

pub(crate) use builtins::run_replacements;
pub(crate) use generators::run_generator_entries;

use serde_json::{Value, json};

use crate::acc::{Acc, Ctx};
use crate::error::{KustomizeError, Result};
use crate::fieldspec::{FieldSpec, TransformerConfig, split_path, visit_path};
use crate::item::Item;
use crate::kustomization::{Kustomization, str_map_lenient};
use crate::loader::Loader;
use crate::patch::Selector;
use crate::resource::MAX_DEPTH;
use crate::scope::is_cluster_scoped;
use crate::transform::{self, ImageRule, NamespaceOptions, Subjects};

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
/// is the name of the directory of the kustomization that lists them; paths in them are
/// relative to it (`ldr`).
pub(crate) fn run_transformer_docs(
    ldr: &Loader,
    k: &Kustomization,
    root_name: &str,
    acc: &mut Acc,
    ctx: &Ctx,
    docs: &[Value],
) -> Result<()> {
    for doc in docs {
        ldr.meter().check_time()?;
        run_one(ldr, k, root_name, acc, ctx, doc)?;
    }
    Ok(())
}

const TRANSFORMER_KINDS: &str = "AnnotationsTransformer, HashTransformer, ImageTagTransformer, LabelTransformer, NamespaceTransformer, PatchJson6902Transformer, PatchStrategicMergeTransformer, PatchTransformer, PrefixSuffixTransformer, PrefixTransformer, SuffixTransformer, ReplacementTransformer, ReplicaCountTransformer, ValueAddTransformer";

/// The kind of a builtin plugin configuration; anything else (an external plugin) is refused.
pub(super) fn builtin_kind<'a>(k: &Kustomization, field: &str, doc: &'a Value) -> Result<&'a str> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if api_version != "builtin" {
        return Err(KustomizeError::Unsupported {
            file: k.file.clone(),
            field: field.to_string(),
            entry: format!("{api_version} {kind}"),
            message: "external plugins are not supported: only kustomize's builtin plugins (apiVersion: builtin) run".to_string(),
        });
    }
    Ok(kind)
}

/// The field specs of a configuration whose kind requires them (kustomize refuses a missing
/// list; an empty one selects nothing).
fn required_specs(
    k: &Kustomization,
    kind: &str,
    doc: &Value,
    origin: &str,
) -> Result<Vec<FieldSpec>> {
    if doc.get("fieldSpecs").is_none_or(Value::is_null) {
        return Err(k.field_err(
            "transformers",
            format!("{kind}: fieldSpecs is not expected to be nil"),
        ));
    }
    specs_of(doc, origin)
}

fn pairs(k: &Kustomization, doc: &Value, field: &str) -> Result<Vec<(String, String)>> {
    Ok(doc
        .get(field)
        .filter(|v| !v.is_null())
        .map(str_map_lenient)
        .transpose()
        .map_err(|m| k.field_err("transformers", m))?
        .unwrap_or_default())
}

fn run_one(
    ldr: &Loader,
    k: &Kustomization,
    root_name: &str,
    acc: &mut Acc,
    ctx: &Ctx,
    doc: &Value,
) -> Result<()> {
    let kind = builtin_kind(k, "transformers", doc)?;
    let origin = k.file.display().to_string();
    let specs = || specs_of(doc, &origin);
    let s = |f: &str| doc.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    let items = &mut acc.items;
    match kind {
        "PrefixSuffixTransformer" | "PrefixTransformer" | "SuffixTransformer" => {
            let specs = required_specs(k, kind, doc, &origin)?;
            let prefix = if kind == "SuffixTransformer" {
                String::new()
            } else {
                s("prefix")
            };
            let suffix = if kind == "PrefixTransformer" {
                String::new()
            } else {
                s("suffix")
            };
            transform::prefix_suffix(items, &prefix, &suffix, &specs)
        }
        "LabelTransformer" => {
            transform::set_map_entries(items, &pairs(k, doc, "labels")?, &specs()?, "labels")
        }
        "AnnotationsTransformer" => transform::set_map_entries(
            items,
            &pairs(k, doc, "annotations")?,
            &specs()?,
            "annotations",
        ),
        "NamespaceTransformer" => namespace(k, items, doc, &specs()?),
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
            transform::images(items, &[rule], &specs()?)
        }
        "ReplicaCountTransformer" => replica_count(k, items, doc, &specs()?),
        "ValueAddTransformer" => value_add(k, root_name, items, doc),
        "PatchTransformer" => builtins::patch(ldr, k, acc, ctx, doc),
        "PatchStrategicMergeTransformer" => builtins::strategic_merge(ldr, k, acc, ctx, doc),
        "PatchJson6902Transformer" => builtins::json6902(ldr, k, acc, doc),
        "ReplacementTransformer" => builtins::replacements(ldr, k, acc, doc),
        "HashTransformer" => {
            builtins::hash(acc);
            Ok(())
        }
        "ConfigMapGenerator" | "SecretGenerator" => Err(k.field_err(
            "transformers",
            format!("plugin {kind} is a generator, not a transformer: list it under 'generators'"),
        )),
        _ => Err(KustomizeError::Unsupported {
            file: k.file.clone(),
            field: "transformers".to_string(),
            entry: kind.to_string(),
            message: format!(
                "not a builtin transformer kind; the builtin transformers are {TRANSFORMER_KINDS}"
            ),
        }),
    }
}

/// `NamespaceTransformer`: `metadata.namespace`, `fieldSpecs`, `unsetOnly`,
/// `setRoleBindingSubjects`. An empty namespace changes nothing.
fn namespace(
    k: &Kustomization,
    items: &mut [Item],
    doc: &Value,
    specs: &[FieldSpec],
) -> Result<()> {
    let subjects = match doc
        .get("setRoleBindingSubjects")
        .and_then(Value::as_str)
        .unwrap_or("")
    {
        "" | "defaultOnly" => Subjects::DefaultOnly,
        "allServiceAccounts" => Subjects::AllServiceAccounts,
        "none" => Subjects::None,
        other => {
            return Err(k.field_err(
                "transformers",
                format!("NamespaceTransformer: invalid value \"{other}\" for setRoleBindingSubjects: must be one of \"defaultOnly\", \"none\" or \"allServiceAccounts\""),
            ));
        }
    };
    let unset_only = doc
        .get("unsetOnly")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let ns = doc
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    if ns.is_empty() {
        return Ok(());
    }
    transform::namespace_with(
        items,
        ns,
        specs,
        NamespaceOptions {
            unset_only,
            subjects,
        },
    )
}

/// `ReplicaCountTransformer`: `replica` (`name`, `count`) and `fieldSpecs`; selecting no
/// object is an error, as in kustomize.
fn replica_count(
    k: &Kustomization,
    items: &mut [Item],
    doc: &Value,
    specs: &[FieldSpec],
) -> Result<()> {
    let name = doc
        .pointer("/replica/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let count = doc.pointer("/replica/count").cloned().unwrap_or(json!(0));
    if transform::replicas(items, name, &count, specs)? == 0 {
        let part = |s: &str, none: &str| {
            if s.is_empty() {
                none.to_string()
            } else {
                s.to_string()
            }
        };
        // kustomize's spelling of a group/version/kind
        let gvks: Vec<String> = specs
            .iter()
            .map(|fs| {
                let g = &fs.gvk;
                format!(
                    "{}.{}.{}",
                    part(&g.kind, "[noKind]"),
                    part(&g.version, "[noVer]"),
                    part(&g.group, "[noGrp]")
                )
            })
            .collect();
        return Err(k.field_err(
            "transformers",
            format!(
                "ReplicaCountTransformer: resource with name {name} does not match a config with the following GVK [{}]",
                gvks.join(" ")
            ),
        ));
    }
    Ok(())
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
