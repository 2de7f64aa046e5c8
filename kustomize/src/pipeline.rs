//! The steps of one kustomization besides including other kustomizations: its schema
//! (`openAPI`, `crds`), `configurations`, generators, and the built-in transformers in
//! kustomize's order.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::acc::{Acc, Ctx};
use crate::error::Result;
use crate::fieldspec::{FieldSpec, TransformerConfig};
use crate::generator;
use crate::kustomization::{Kustomization, str_map_of};
use crate::loader::Loader;
use crate::objects::relative_to;
use crate::patch::Schema;
use crate::patching::{run_patches, run_patches_json6902, run_patches_strategic_merge};
use crate::plugins::{run_generator_entries, run_replacements};
use crate::transform::{self, ImageRule};
use crate::yaml::parse_one;

/// `openAPI:`: replaces the schema of the build.
pub(crate) fn load_openapi(ldr: &Loader, k: &Kustomization, ctx: &mut Ctx) -> Result<()> {
    if let Some(path) = k
        .get("openAPI")
        .and_then(|o| o.get("path"))
        .and_then(Value::as_str)
    {
        let (p, text) = ldr.read_text(path)?;
        let doc = parse_one(&text, &p.display().to_string())?;
        // Like kustomize, an `openapi:` schema replaces the built-in one instead of extending it.
        let schema =
            Schema::from_openapi(&doc).map_err(|e| k.field_err("openapi", e.to_string()))?;
        ctx.replace_schema(schema);
    }
    Ok(())
}

/// `configurations:`, `crds:` and the generators, which come after `resources:`.
pub(crate) fn configure_and_generate(
    ldr: &Loader,
    k: &Kustomization,
    acc: &mut Acc,
    ctx: &mut Ctx,
) -> Result<()> {
    for path in k.str_entries("configurations")? {
        let (p, text) = ldr.read_text(&path)?;
        let origin = p.display().to_string();
        let tc = TransformerConfig::from_value(&parse_one(&text, &origin)?, &origin)?;
        acc.add_configuration(&tc);
    }
    for path in k.str_entries("crds")? {
        // kustomize's `crds:` files are OpenAPI definition maps (name -> schema), not CRD objects.
        let (p, text) = ldr.read_text(&path)?;
        let doc = parse_one(&text, &p.display().to_string())?;
        if !doc
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_object))
        {
            return Err(k.field_err(
                "crds",
                format!("unable to parse open API definition from '{path}': expected a map of definitions"),
            ));
        }
        ctx.schema_mut()
            .add_openapi(&json!({ "definitions": doc }))
            .map_err(|e| k.field_err("crds", e.to_string()))?;
    }
    for g in generator::generate(ldr, k)? {
        let kind = if g.obj.get("kind").and_then(Value::as_str) == Some("Secret") {
            "SecretGenerator"
        } else {
            "ConfigMapGenerator"
        };
        let origin = format!(
            "configuredIn: {}\nconfiguredBy:\n  apiVersion: builtin\n  kind: {kind}\n",
            relative_to(&ctx.root, &k.file)
        );
        ldr.meter().add_resources(1)?;
        acc.absorb_generated(k, g, origin)?;
    }
    run_generator_entries(ldr, k, acc, ctx)
}

/// The built-in transformers, from `patchesStrategicMerge` to `replacements`, in kustomize's
/// order (the `transformers:` field comes after them).
pub(crate) fn run_builtin_transformers(
    ldr: &Loader,
    k: &Kustomization,
    acc: &mut Acc,
    ctx: &Ctx,
) -> Result<()> {
    run_patches_strategic_merge(ldr, k, acc, ctx)?;
    run_patches(ldr, k, acc, ctx)?;
    let cfg = Arc::clone(&acc.config);
    if let Some(ns) = k.str_field("namespace")?.filter(|s| !s.is_empty()) {
        transform::namespace(&mut acc.items, &ns, &cfg.namespace)?;
    }
    if let Some(p) = k.str_field("namePrefix")?.filter(|s| !s.is_empty()) {
        transform::prefix_suffix(&mut acc.items, &p, "", &cfg.name_prefix)?;
    }
    if let Some(s) = k.str_field("nameSuffix")?.filter(|s| !s.is_empty()) {
        transform::prefix_suffix(&mut acc.items, "", &s, &cfg.name_suffix)?;
    }
    for l in k.entries("labels")? {
        let pairs = l
            .get("pairs")
            .map(str_map_of)
            .transpose()
            .map_err(|m| k.field_err("labels", m))?
            .unwrap_or_default();
        let mut specs: Vec<FieldSpec> = Vec::new();
        if let Some(Value::Array(fields)) = l.get("fields") {
            let tc = TransformerConfig::from_value(
                &json!({"labels": fields}),
                &k.file.display().to_string(),
            )?;
            specs.extend(tc.labels);
        }
        specs.extend(cfg.labels.iter().cloned());
        if l.get("includeSelectors")
            .and_then(Value::as_bool)
            .unwrap_or(false)
        {
            specs.extend(cfg.common_labels.iter().cloned());
        } else {
            if l.get("includeTemplates")
                .and_then(Value::as_bool)
                .unwrap_or(false)
            {
                specs.extend(cfg.template_labels.iter().cloned());
            }
            specs.push(FieldSpec::new("", "", "", "metadata/labels", true));
        }
        let mut dedup: Vec<FieldSpec> = Vec::new();
        for s in specs {
            if !dedup.contains(&s) {
                dedup.push(s);
            }
        }
        transform::set_map_entries(&mut acc.items, &pairs, &dedup, "labels")?;
    }
    let common_labels = k.str_map("commonLabels")?;
    transform::set_map_entries(
        &mut acc.items,
        &common_labels,
        &cfg.common_labels,
        "commonLabels",
    )?;
    let common_annotations = k.str_map("commonAnnotations")?;
    transform::set_map_entries(
        &mut acc.items,
        &common_annotations,
        &cfg.common_annotations,
        "commonAnnotations",
    )?;
    run_patches_json6902(ldr, k, acc)?;
    for r in k.entries("replicas")? {
        let name = r
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| k.field_err("replicas", "entry without name"))?;
        let count = r.get("count").cloned().unwrap_or(json!(0));
        transform::replicas(&mut acc.items, name, &count, &cfg.replicas)?;
    }
    let mut rules = Vec::new();
    for img in k.entries("images")?.chain(k.entries("imageTags")?) {
        // like kustomize's JSON decoding, `newTag: 1.20` (a number) is an error, not "1.2"
        let s = |f: &str| -> Result<Option<String>> {
            match img.get(f) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(v)) => Ok(Some(v.clone()).filter(|v| !v.is_empty())),
                Some(other) => {
                    Err(k.field_err("images", format!("'{f}' must be a string, got {other}")))
                }
            }
        };
        rules.push(ImageRule {
            name: s("name")?.unwrap_or_default(),
            new_name: s("newName")?,
            new_tag: s("newTag")?,
            digest: s("digest")?,
        });
    }
    transform::images(&mut acc.items, &rules, &cfg.images)?;
    run_replacements(ldr, k, acc)?;
    Ok(())
}
