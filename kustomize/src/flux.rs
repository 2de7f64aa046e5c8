//! What Flux's kustomize-controller does around kustomize: generate a kustomization when the
//! path has none, overlay the `Kustomization` spec's fields, and build with no load
//! restrictions inside the artifact root only.

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use rflux_core::secure_join;
use serde_json::{Map, Value, json};

use crate::budget::Budget;
use crate::build::build_loaded_with;
use crate::error::{KustomizeError, Result};
use crate::kustomization::{KUSTOMIZATION_FILE_NAMES, Kustomization, load_kustomization};
use crate::loader::{BuildOptions, FileOverlay, LoadRestrictor, Loader, is_remote};
use crate::resource::Resource;
use crate::transform::set_meta;
use crate::yaml::parse_stream;

/// The parts of a Flux `Kustomization` spec that change the build.
#[derive(Debug, Clone, Default)]
pub struct FluxOverrides {
    /// `spec.targetNamespace`: becomes the kustomization's `namespace`.
    pub target_namespace: Option<String>,
    pub name_prefix: Option<String>,
    pub name_suffix: Option<String>,
    /// `spec.commonMetadata.labels`: set on every object after the build (overriding).
    pub common_labels: Vec<(String, String)>,
    /// `spec.commonMetadata.annotations`.
    pub common_annotations: Vec<(String, String)>,
    /// `spec.patches`: kustomize `patches` entries (`{patch, target}`), appended.
    pub patches: Vec<Value>,
    /// `spec.images`: kustomize `images` entries, merged by `name`.
    pub images: Vec<Value>,
    /// `spec.components`: component directories relative to the path, appended.
    pub components: Vec<String>,
    /// `spec.ignoreMissingComponents`.
    pub ignore_missing_components: bool,
    /// `spec.buildMetadata`: replaces the kustomization's `buildMetadata` when not empty.
    pub build_metadata: Vec<String>,
    /// Not Flux: accept objects named by `generateName` alone ([`BuildOptions::generate_names`];
    /// the controller sets it only for a Kustomization opted in to Argo CD semantics).
    pub generate_names: bool,
}

/// Builds `path` (relative to the artifact `root`, `..` clamped at the root) the way Flux
/// does, within the default [`Budget`].
pub fn build_flux(root: &Path, path: &Path, overrides: &FluxOverrides) -> Result<Vec<Resource>> {
    build_flux_with(root, path, overrides, &Budget::default())
}

/// [`build_flux`] within the given budget.
pub fn build_flux_with(
    root: &Path,
    path: &Path,
    overrides: &FluxOverrides,
    budget: &Budget,
) -> Result<Vec<Resource>> {
    build_flux_overlaid(root, path, overrides, budget, None)
}

/// [`build_flux_with`], reading the files of `files` from memory (decrypted sources).
pub fn build_flux_overlaid(
    root: &Path,
    path: &Path,
    overrides: &FluxOverrides,
    budget: &Budget,
    files: Option<Arc<FileOverlay>>,
) -> Result<Vec<Resource>> {
    let dir = secure_join(root, path);
    let opts = BuildOptions {
        load_restrictor: LoadRestrictor::None,
        root_fence: Some(root.to_path_buf()),
        max_file_bytes: None,
        budget: budget.clone(),
        overlay: files,
        generate_names: overrides.generate_names,
    };
    let ldr = Loader::new(&dir, &opts)?;
    let has_file = KUSTOMIZATION_FILE_NAMES
        .iter()
        .any(|n| ldr.root.join(n).is_file());
    let mut k = if has_file {
        let mut k = load_kustomization(&ldr)?;
        // Flux marks a kustomization without resources so kustomize does not reject it as empty.
        if k.list("resources")?.is_empty() && k.get("buildMetadata").is_none() {
            k.fields
                .insert("buildMetadata".into(), json!(["originAnnotations"]));
        }
        k
    } else {
        generate_kustomization(&ldr)?
    };
    overlay(&ldr, &mut k, overrides)?;
    // Flux's build does not sort (the objects stay in kustomize's accumulation order) unless
    // the kustomization sets sortOptions; the order shows in the history digest.
    let mut out = build_loaded_with(&ldr, &k, false)?;
    if !overrides.common_labels.is_empty() || !overrides.common_annotations.is_empty() {
        for r in out.iter_mut() {
            for (field, pairs) in [
                ("labels", &overrides.common_labels),
                ("annotations", &overrides.common_annotations),
            ] {
                if pairs.is_empty() {
                    continue;
                }
                let mut m = match r.obj.pointer(&format!("/metadata/{field}")) {
                    Some(Value::Object(m)) => m.clone(),
                    _ => Map::new(),
                };
                for (k2, v) in pairs {
                    m.insert(k2.clone(), json!(v));
                }
                set_meta(&mut r.obj, field, Value::Object(m));
            }
        }
    }
    Ok(out)
}

/// Flux's generated kustomization: every sub-directory holding a kustomization file (not
/// descended into) and every `.yaml`/`.yml` file below the path, in walk order. Every such file
/// must parse as YAML; reading them counts against the build's budget.
pub(crate) fn generate_kustomization(ldr: &Loader) -> Result<Kustomization> {
    let resources = walk(ldr)?;
    let mut fields = Map::new();
    fields.insert(
        "apiVersion".into(),
        json!("kustomize.config.k8s.io/v1beta1"),
    );
    fields.insert("kind".into(), json!("Kustomization"));
    if resources.is_empty() {
        fields.insert("namespace".into(), json!("_placeholder"));
    }
    fields.insert(
        "resources".into(),
        Value::Array(resources.into_iter().map(Value::String).collect()),
    );
    Ok(Kustomization::synthetic(
        ldr.root.join("kustomization.yaml"),
        fields,
    ))
}

/// The sorted entries of a directory.
fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| io_err(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    Ok(entries)
}

fn io_err(p: &Path, e: std::io::Error) -> KustomizeError {
    KustomizeError::Io {
        path: p.to_path_buf(),
        message: e.to_string(),
    }
}

/// Walks the tree below the loader's root depth first, in sorted order, without following
/// symlinks; keeps its own stack of directories, so a deep tree needs no thread stack.
fn walk(ldr: &Loader) -> Result<Vec<String>> {
    let root = ldr.root.as_path();
    let mut out = Vec::new();
    let mut stack = vec![sorted_entries(root)?.into_iter()];
    while let Some(dir) = stack.last_mut() {
        let Some(p) = dir.next() else {
            stack.pop();
            continue;
        };
        ldr.meter().check_time()?;
        let meta = std::fs::symlink_metadata(&p).map_err(|e| io_err(&p, e))?;
        let rel = p
            .strip_prefix(root)
            .map(|r| format!("./{}", r.display()))
            .unwrap_or_else(|_| p.display().to_string());
        if meta.is_dir() {
            if KUSTOMIZATION_FILE_NAMES.iter().any(|n| p.join(n).is_file()) {
                out.push(rel);
                continue;
            }
            stack.push(sorted_entries(&p)?.into_iter());
            continue;
        }
        if !meta.is_file() {
            continue;
        }
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        if ext != "yaml" && ext != "yml" {
            continue;
        }
        let text = ldr.read_walked_text(&p)?;
        parse_stream(&text, &p.display().to_string()).map_err(|e| match e {
            KustomizeError::Yaml {
                origin,
                line,
                col,
                message,
            } => KustomizeError::Yaml {
                origin,
                line,
                col,
                message: format!("failed to decode Kubernetes YAML: {message}"),
            },
            other => other,
        })?;
        out.push(rel);
    }
    Ok(out)
}

fn overlay(ldr: &Loader, k: &mut Kustomization, o: &FluxOverrides) -> Result<()> {
    if let Some(ns) = o.target_namespace.as_ref().filter(|s| !s.is_empty()) {
        k.fields.insert("namespace".into(), json!(ns));
    }
    if let Some(p) = o.name_prefix.as_ref().filter(|s| !s.is_empty()) {
        k.fields.insert("namePrefix".into(), json!(p));
    }
    if let Some(s) = o.name_suffix.as_ref().filter(|s| !s.is_empty()) {
        k.fields.insert("nameSuffix".into(), json!(s));
    }
    if !o.build_metadata.is_empty() {
        k.fields
            .insert("buildMetadata".into(), json!(o.build_metadata));
    }
    if !o.patches.is_empty() {
        let mut list = k.list("patches")?;
        list.extend(o.patches.iter().cloned());
        k.fields.insert("patches".into(), Value::Array(list));
    }
    if !o.images.is_empty() {
        let mut list = k.list("images")?;
        for img in &o.images {
            let field =
                |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
            let name = field(img, "name");
            match list.iter_mut().find(|x| field(x, "name") == name) {
                Some(Value::Object(slot)) => {
                    // Flux merges: a new name replaces the name; a tag or digest replaces both.
                    if !field(img, "newName").is_empty() {
                        slot.insert("newName".into(), json!(field(img, "newName")));
                    }
                    if !field(img, "newTag").is_empty() || !field(img, "digest").is_empty() {
                        slot.insert("newTag".into(), json!(field(img, "newTag")));
                        slot.insert("digest".into(), json!(field(img, "digest")));
                    }
                }
                _ => list.push(img.clone()),
            }
        }
        k.fields.insert("images".into(), Value::Array(list));
    }
    if !o.components.is_empty() {
        let mut list = k.list("components")?;
        for c in &o.components {
            let p = Path::new(c);
            // like Flux: no URL or absolute path (`..` is fine; the fence still holds)
            if p.is_absolute() || is_remote(c) {
                return Err(k.field_err(
                    "components",
                    format!("component path '{c}' must be local and relative"),
                ));
            }
            if o.ignore_missing_components && !ldr.join(c).exists() {
                continue;
            }
            list.push(json!(c));
        }
        k.fields.insert("components".into(), Value::Array(list));
    }
    Ok(())
}
