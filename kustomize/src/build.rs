//! The build pipeline: load a kustomization tree, run generators and transformers in
//! kustomize's order, then add hash suffixes, fix name references, resolve vars and sort.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::error::{KustomizeError, Result};
use crate::fieldspec::{FieldSpec, TransformerConfig};
use crate::generator::{self, Behavior};
use crate::kustomization::{KUSTOMIZATION_FILE_NAMES, Kustomization, str_map_of};
use crate::loader::{BuildOptions, Loader, is_remote};
use crate::patch::{PatchOutcome, Schema, Selector, is_json6902, json6902, strategic_merge};
use crate::resource::{ResId, Resource};
use crate::sort;
use crate::transform::{self, ImageRule, effective};
use crate::yaml::{PathSeg, parse_one, parse_stream, parse_stream_tracked};

/// One object during a build, with the bookkeeping kustomize keeps in build annotations.
#[derive(Debug, Clone)]
pub struct Item {
    pub res: Resource,
    /// Earlier identities (namespace written as kustomize's effective namespace), oldest first.
    pub prev_ids: Vec<ResId>,
    /// Name prefixes and suffixes applied, innermost first.
    pub prefixes: Vec<String>,
    pub suffixes: Vec<String>,
    /// Generated objects that get a content-hash name suffix at the end of the build.
    pub needs_hash: bool,
    /// Mapping values written empty (`key:`) in the source; a strategic merge drops them.
    pub empty_values: Vec<Vec<PathSeg>>,
    /// Where the object came from, as the `config.kubernetes.io/origin` annotation writes it.
    pub origin: Option<String>,
}

impl Item {
    pub fn new(obj: Value) -> Self {
        Item {
            res: Resource::new(obj),
            prev_ids: Vec::new(),
            prefixes: Vec::new(),
            suffixes: Vec::new(),
            needs_hash: false,
            empty_values: Vec::new(),
            origin: None,
        }
    }

    /// The first identity the object had.
    pub fn org_id(&self) -> ResId {
        self.prev_ids
            .first()
            .cloned()
            .unwrap_or_else(|| self.res.id())
    }

    /// Records the current identity before a name or namespace change.
    pub fn store_previous_id(&mut self) {
        self.prev_ids.push(effective(self.res.id()));
    }

    /// Whether any identity the object had (or has) equals `id` (namespaces compared
    /// effectively).
    pub fn matches_any_id(&self, id: &ResId) -> bool {
        let want = effective(id.clone());
        let same = |x: &ResId| {
            x.kind == want.kind
                && x.group == want.group
                && x.name == want.name
                && x.namespace == want.namespace
        };
        same(&effective(self.res.id())) || self.prev_ids.iter().any(same)
    }
}

fn id_string(id: &ResId) -> String {
    let g = if id.group.is_empty() {
        "[noGrp]"
    } else {
        id.group.as_str()
    };
    let ns = id
        .namespace
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("[noNs]");
    format!("{}.{}.{}/{}.{}", id.kind, id.version, g, id.name, ns)
}

/// Resources plus what travels up with them from a kustomization.
struct Acc {
    items: Vec<Item>,
    config: TransformerConfig,
    vars: Vec<Value>,
}

impl Acc {
    fn new() -> Self {
        Acc {
            items: Vec::new(),
            config: TransformerConfig::builtin(),
            vars: Vec::new(),
        }
    }

    fn append(&mut self, item: Item) -> Result<()> {
        self.append_all(vec![item])
    }

    /// Appends items, refusing any whose id is already present (one hash set per call, so
    /// loading a file is linear in its size).
    fn append_all(&mut self, items: Vec<Item>) -> Result<()> {
        let mut seen: std::collections::HashSet<ResId> =
            self.items.iter().map(|x| effective(x.res.id())).collect();
        for item in items {
            let id = item.res.id();
            if !seen.insert(effective(id.clone())) {
                return Err(KustomizeError::DuplicateId { id: id_string(&id) });
            }
            self.items.push(item);
        }
        Ok(())
    }

    fn absorb(&mut self, other: Acc) -> Result<()> {
        self.append_all(other.items)?;
        self.config.merge(&other.config);
        self.vars.extend(other.vars);
        Ok(())
    }
}

/// The `app.kubernetes.io/managed-by` value of `buildMetadata: [managedByLabel]` (what kustomize
/// prints when built as a library, as in kubectl and Flux).
pub const MANAGED_BY: &str = "kustomize-(devel)";

/// State shared by the whole build.
struct Ctx {
    schema: Schema,
    /// The directory of the kustomization being built (origin paths are relative to it).
    root: std::path::PathBuf,
}

/// `path` relative to the directory `base` (both absolute, symlinks resolved).
fn relative_to(base: &Path, path: &Path) -> String {
    let b: Vec<_> = base.components().collect();
    let p: Vec<_> = path.components().collect();
    let common = b.iter().zip(&p).take_while(|(x, y)| x == y).count();
    let mut out = std::path::PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &p[common..] {
        out.push(c.as_os_str());
    }
    out.display().to_string()
}

/// Finds and parses the kustomization file of a directory.
pub fn load_kustomization(ldr: &Loader) -> Result<Kustomization> {
    let found: Vec<&str> = KUSTOMIZATION_FILE_NAMES
        .iter()
        .copied()
        .filter(|n| ldr.root.join(n).is_file())
        .collect();
    match found.as_slice() {
        [] => Err(KustomizeError::MissingKustomization(ldr.root.clone())),
        [name] => {
            let (path, text) = ldr.read_text(name)?;
            let doc = parse_one(&text, &path.display().to_string())?;
            Kustomization::from_value(&path, doc)
        }
        _ => Err(KustomizeError::MultipleKustomizations(ldr.root.clone())),
    }
}

/// Builds the kustomization in `dir`.
pub fn build(dir: &Path, opts: &BuildOptions) -> Result<Vec<Resource>> {
    let ldr = Loader::new(dir, opts)?;
    let k = load_kustomization(&ldr)?;
    build_loaded(&ldr, &k)
}

/// Builds an already loaded kustomization.
pub(crate) fn build_loaded(ldr: &Loader, k: &Kustomization) -> Result<Vec<Resource>> {
    build_loaded_with(ldr, k, true)
}

/// Like [`build_loaded`]; `default_sort` false keeps kustomize's accumulation order when the
/// kustomization has no `sortOptions` (the library default Flux builds with: krusty `Options`
/// with an empty `Reorder`), true sorts in the legacy order as `kustomize build` does.
pub(crate) fn build_loaded_with(
    ldr: &Loader,
    k: &Kustomization,
    default_sort: bool,
) -> Result<Vec<Resource>> {
    let mut ctx = Ctx {
        schema: Schema::builtin(),
        root: ldr.root.clone(),
    };
    let mut acc = Acc::new();
    accumulate(ldr, k, &mut acc, &mut ctx)?;
    finish(acc, k, default_sort)
}

fn finish(mut acc: Acc, k: &Kustomization, default_sort: bool) -> Result<Vec<Resource>> {
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
            let h = generator::content_hash(&item.res.obj);
            item.store_previous_id();
            let name = format!("{}-{h}", item.res.name());
            transform::set_meta(&mut item.res.obj, "name", json!(name));
        }
    }
    crate::nameref::fix_back_references(&mut acc.items, &acc.config.name_reference)?;
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
            transform::set_meta(&mut item.res.obj, "annotations", Value::Object(ann));
        }
    }
    if build_meta.iter().any(|m| m == "managedByLabel") {
        for item in acc.items.iter_mut() {
            let mut labels = match item.res.obj.pointer("/metadata/labels") {
                Some(Value::Object(m)) => m.clone(),
                _ => Map::new(),
            };
            labels.insert("app.kubernetes.io/managed-by".into(), json!(MANAGED_BY));
            transform::set_meta(&mut item.res.obj, "labels", Value::Object(labels));
        }
    }
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
            i.res
                .obj
                .pointer("/metadata/annotations/config.kubernetes.io~1local-config")
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
            sort::legacy_sort(out);
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
            sort::legacy_sort_with(out, &list("orderFirst"), &list("orderLast"));
            Ok(())
        }
        other => Err(k.field_err("sortOptions", format!("unknown order '{other}'"))),
    }
}

fn accumulate(ldr: &Loader, k: &Kustomization, acc: &mut Acc, ctx: &mut Ctx) -> Result<()> {
    if let Some(path) = k
        .get("openAPI")
        .and_then(|o| o.get("path"))
        .and_then(Value::as_str)
    {
        let (p, text) = ldr.read_text(path)?;
        let doc = parse_one(&text, &p.display().to_string())?;
        // Like kustomize, an `openapi:` schema replaces the built-in one instead of extending it.
        ctx.schema =
            Schema::from_openapi(&doc).map_err(|e| k.field_err("openapi", e.to_string()))?;
    }
    let mut entries = k.str_list("resources")?;
    entries.extend(k.str_list("bases")?);
    for entry in entries {
        accumulate_entry(ldr, k, &entry, acc, ctx)?;
    }
    for path in k.str_list("configurations")? {
        let (p, text) = ldr.read_text(&path)?;
        let origin = p.display().to_string();
        let tc = TransformerConfig::from_value(&parse_one(&text, &origin)?, &origin)?;
        acc.config.merge(&tc);
    }
    for path in k.str_list("crds")? {
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
        ctx.schema
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
        absorb_generated(acc, k, g, origin)?;
    }
    for entry in k.str_list("components")? {
        if is_remote(&entry) {
            return Err(remote_err(k, "components", &entry));
        }
        let sub = ldr.sub(&entry)?;
        let sk = load_kustomization(&sub)?;
        if !sk.is_component() {
            return Err(KustomizeError::InvalidKustomization {
                file: sk.file.clone(),
                message: format!(
                    "expected kind 'Component' for path '{}'",
                    sub.root.display()
                ),
            });
        }
        accumulate(&sub, &sk, acc, ctx)?;
    }
    run_transformers(ldr, k, acc, ctx)?;
    acc.vars.extend(k.list("vars")?);
    Ok(())
}

fn remote_err(k: &Kustomization, field: &str, entry: &str) -> KustomizeError {
    KustomizeError::Unsupported {
        file: k.file.clone(),
        field: field.to_string(),
        entry: entry.to_string(),
        message: "remote resources (URLs, git repositories) are not supported".to_string(),
    }
}

fn accumulate_entry(
    ldr: &Loader,
    k: &Kustomization,
    entry: &str,
    acc: &mut Acc,
    ctx: &mut Ctx,
) -> Result<()> {
    if is_remote(entry) {
        return Err(remote_err(k, "resources", entry));
    }
    if ldr.is_dir(entry) {
        let sub = ldr.sub(entry)?;
        let sk = load_kustomization(&sub)?;
        if sk.is_component() {
            return Err(KustomizeError::InvalidKustomization {
                file: sk.file.clone(),
                message: format!(
                    "expected kind != 'Component' for path '{}'",
                    sub.root.display()
                ),
            });
        }
        let mut sub_acc = Acc::new();
        accumulate(&sub, &sk, &mut sub_acc, ctx)?;
        return acc.absorb(sub_acc);
    }
    let joined = ldr.join(entry);
    if !joined.exists() {
        return Err(KustomizeError::Resource {
            file: k.file.clone(),
            entry: entry.to_string(),
            message: format!("file or directory '{}' does not exist", joined.display()),
        });
    }
    let origin = format!("path: {}\n", relative_to(&ctx.root, &ldr.join(entry)));
    let mut items = load_items(ldr, entry)?;
    for item in items.iter_mut() {
        item.origin = Some(origin.clone());
    }
    acc.append_all(items)
}

/// Reads a resource file: every document, `List` kinds flattened.
fn load_objects(ldr: &Loader, entry: &str) -> Result<Vec<Value>> {
    Ok(load_items(ldr, entry)?
        .into_iter()
        .map(|i| i.res.obj)
        .collect())
}

fn load_items(ldr: &Loader, entry: &str) -> Result<Vec<Item>> {
    let (path, text) = ldr.read_text(entry)?;
    let origin = path.display().to_string();
    let mut out = Vec::new();
    for doc in parse_stream_tracked(&text, &origin)? {
        flatten(doc.value, doc.empty_values, &origin, &path, &mut out)?;
    }
    Ok(out)
}

fn flatten(
    doc: Value,
    empties: Vec<Vec<PathSeg>>,
    origin: &str,
    path: &Path,
    out: &mut Vec<Item>,
) -> Result<()> {
    let invalid = |m: String| KustomizeError::InvalidResource {
        file: path.to_path_buf(),
        origin: origin.to_string(),
        message: m,
    };
    let Value::Object(_) = &doc else {
        return Err(invalid(format!("expected a mapping, got {doc}")));
    };
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind.ends_with("List") && doc.get("items").is_some() {
        if let Some(Value::Array(items)) = doc.get("items") {
            for (i, it) in items.clone().into_iter().enumerate() {
                let sub: Vec<Vec<PathSeg>> = empties
                    .iter()
                    .filter(|p| {
                        p.len() > 2
                            && p[0] == PathSeg::Key("items".into())
                            && p[1] == PathSeg::Index(i)
                    })
                    .map(|p| p[2..].to_vec())
                    .collect();
                flatten(it, sub, origin, path, out)?;
            }
        }
        return Ok(());
    }
    if kind.is_empty() {
        return Err(invalid("missing 'kind'".to_string()));
    }
    if doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(invalid(format!(
            "missing metadata.name in object of kind '{kind}'"
        )));
    }
    let mut item = Item::new(doc);
    item.empty_values = empties;
    out.push(item);
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

fn absorb_generated(
    acc: &mut Acc,
    k: &Kustomization,
    g: generator::Generated,
    origin: String,
) -> Result<()> {
    let mut item = Item::new(g.obj);
    item.origin = Some(origin);
    item.needs_hash = g.needs_hash;
    let id = item.res.id();
    let pos = acc.items.iter().position(|x| x.matches_any_id(&id));
    match (g.behavior, pos) {
        (Behavior::Create, None) => acc.append(item),
        (Behavior::Create, Some(_)) => Err(KustomizeError::DuplicateId { id: id_string(&id) }),
        (_, None) => Err(KustomizeError::Generator {
            file: k.file.clone(),
            name: id.name.clone(),
            message: format!(
                "id {} does not exist; cannot merge or replace",
                id_string(&id)
            ),
        }),
        (behavior, Some(i)) => {
            let old = &mut acc.items[i];
            let new_obj = item.res.obj;
            for field in ["labels", "annotations"] {
                if let Some(Value::Object(add)) = new_obj.pointer(&format!("/metadata/{field}")) {
                    let mut merged = match old.res.obj.pointer(&format!("/metadata/{field}")) {
                        Some(Value::Object(m)) => m.clone(),
                        _ => Map::new(),
                    };
                    for (kk, v) in add {
                        merged.insert(kk.clone(), v.clone());
                    }
                    transform::set_meta(&mut old.res.obj, field, Value::Object(merged));
                }
            }
            for field in ["data", "binaryData"] {
                let new_part = new_obj.get(field).cloned();
                let Value::Object(o) = &mut old.res.obj else {
                    continue;
                };
                match behavior {
                    Behavior::Replace => {
                        match new_part {
                            Some(v) => o.insert(field.to_string(), v),
                            None => o.remove(field),
                        };
                    }
                    _ => {
                        if let Some(Value::Object(add)) = new_part {
                            let entry = o
                                .entry(field.to_string())
                                .or_insert_with(|| Value::Object(Map::new()));
                            if let Value::Object(m) = entry {
                                for (kk, v) in add {
                                    m.insert(kk, v);
                                }
                            }
                        }
                    }
                }
            }
            // the new object replaces the old one except for merged metadata and data
            if let Value::Object(o) = &mut old.res.obj {
                for field in ["immutable", "type"] {
                    match new_obj.get(field) {
                        Some(v) => o.insert(field.to_string(), v.clone()),
                        None => o.remove(field),
                    };
                }
            }
            old.needs_hash = item.needs_hash;
            Ok(())
        }
    }
}

fn perr(k: &Kustomization, field: &str, e: impl std::fmt::Display) -> KustomizeError {
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
) -> std::result::Result<bool, crate::patch::PatchError> {
    let before = item.res.obj.clone();
    let outcome = strategic_merge(&mut item.res.obj, patch, schema)?;
    if matches!(outcome, PatchOutcome::Deleted) {
        return Ok(false);
    }
    if !item.empty_values.is_empty() {
        let paths = std::mem::take(&mut item.empty_values);
        drop_empty_values(&mut item.res.obj, &paths);
    }
    let restore = |obj: &mut Value, ptr: &str, key: &[&str]| {
        let old = before.pointer(ptr).cloned();
        let mut cur = obj;
        for (i, seg) in key.iter().enumerate() {
            let Value::Object(m) = cur else { return };
            if i + 1 == key.len() {
                match &old {
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
    if !allow_name {
        restore(&mut item.res.obj, "/metadata/name", &["metadata", "name"]);
        restore(
            &mut item.res.obj,
            "/metadata/namespace",
            &["metadata", "namespace"],
        );
    }
    if !allow_kind {
        restore(&mut item.res.obj, "/kind", &["kind"]);
        restore(&mut item.res.obj, "/apiVersion", &["apiVersion"]);
    }
    if item.res.id() != effective_free(&before) {
        item.prev_ids
            .push(effective(crate::resource::id_of(&before)));
    }
    Ok(true)
}

fn effective_free(obj: &Value) -> ResId {
    crate::resource::id_of(obj)
}

/// Applies one strategic-merge patch document to the object it names (by id).
fn smp_by_id(
    acc: &mut Acc,
    k: &Kustomization,
    field: &str,
    patch: &Value,
    schema: &Schema,
) -> Result<()> {
    let pid = crate::resource::id_of(patch);
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

fn run_patches(ldr: &Loader, k: &Kustomization, acc: &mut Acc, ctx: &Ctx) -> Result<()> {
    for entry in k.list("patches")? {
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
                    json6902(&mut item.res.obj, &docs[0]).map_err(|e| perr(k, field, e))?;
                }
            }
            continue;
        }
        for patch in docs {
            match &target {
                None => smp_by_id(acc, k, field, &patch, &ctx.schema)?,
                Some(sel) => {
                    let mut keep = Vec::with_capacity(acc.items.len());
                    for mut item in std::mem::take(&mut acc.items) {
                        if sel.matches(&item.res) {
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
                            if !apply_smp(&mut item, &p, &ctx.schema, allow_name, allow_kind)
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

fn run_transformers(ldr: &Loader, k: &Kustomization, acc: &mut Acc, ctx: &mut Ctx) -> Result<()> {
    // patchesStrategicMerge
    for entry in k.list("patchesStrategicMerge")? {
        let Some(s) = entry.as_str() else {
            return Err(k.field_err(
                "patchesStrategicMerge",
                "entries must be strings (paths or inline patches)",
            ));
        };
        for patch in load_patch_docs(ldr, k, "patchesStrategicMerge", s)? {
            smp_by_id(acc, k, "patchesStrategicMerge", &patch, &ctx.schema)?;
        }
    }
    run_patches(ldr, k, acc, ctx)?;
    let cfg = acc.config.clone();
    if let Some(ns) = k.str_field("namespace")?.filter(|s| !s.is_empty()) {
        transform::namespace(&mut acc.items, &ns, &cfg.namespace)?;
    }
    if let Some(p) = k.str_field("namePrefix")?.filter(|s| !s.is_empty()) {
        transform::prefix_suffix(&mut acc.items, &p, "", &cfg.name_prefix)?;
    }
    if let Some(s) = k.str_field("nameSuffix")?.filter(|s| !s.is_empty()) {
        transform::prefix_suffix(&mut acc.items, "", &s, &cfg.name_suffix)?;
    }
    for l in k.list("labels")? {
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
    // patchesJson6902
    for entry in k.list("patchesJson6902")? {
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
                json6902(&mut item.res.obj, &ops).map_err(|e| perr(k, field, e))?;
            }
        }
    }
    for r in k.list("replicas")? {
        let name = r
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| k.field_err("replicas", "entry without name"))?;
        let count = r.get("count").cloned().unwrap_or(json!(0));
        transform::replicas(&mut acc.items, name, &count, &cfg.replicas)?;
    }
    let mut rules = Vec::new();
    let mut images = k.list("images")?;
    images.extend(k.list("imageTags")?);
    for img in images {
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
    let mut docs = Vec::new();
    for entry in k.str_list("transformers")? {
        if entry.contains('\n') {
            docs.extend(parse_stream(
                &entry,
                &format!("{} (transformers, inline)", k.file.display()),
            )?);
        } else if ldr.is_dir(&entry) {
            let sub = ldr.sub(&entry)?;
            let sk = load_kustomization(&sub)?;
            let mut sub_acc = Acc::new();
            accumulate(&sub, &sk, &mut sub_acc, ctx)?;
            docs.extend(sub_acc.items.into_iter().map(|i| i.res.obj));
        } else {
            docs.extend(load_objects(ldr, &entry)?);
        }
    }
    let root_name = ldr
        .root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    crate::plugins::run_transformer_docs(k, &root_name, &mut acc.items, &docs)?;
    Ok(())
}

fn run_replacements(ldr: &Loader, k: &Kustomization, acc: &mut Acc) -> Result<()> {
    let list = k.list("replacements")?;
    if list.is_empty() {
        return Ok(());
    }
    let mut all = Vec::new();
    for r in list {
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
    }
    crate::glue::replacements(&mut acc.items, &all).map_err(|e| perr(k, "replacements", e))
}

fn resolve_vars(acc: &mut Acc) -> Result<()> {
    if acc.vars.is_empty() {
        return Ok(());
    }
    let specs = acc.config.var_reference.clone();
    crate::glue::vars(&mut acc.items, &acc.vars, &specs).map_err(|e| KustomizeError::Transform {
        context: "vars".to_string(),
        message: e.to_string(),
    })
}
