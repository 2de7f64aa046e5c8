//! What a kustomization accumulates (its objects, transformer configuration and vars) and the
//! state shared by the whole build.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use rflux_core::split_api_version;
use serde_json::Value;

use crate::error::{KustomizeError, Location, Result};
use crate::fieldspec::TransformerConfig;
use crate::generator::{Behavior, Generated, merge_generated};
use crate::item::{Item, id_string};
use crate::kustomization::Kustomization;
use crate::patch::Schema;
use crate::resource::{ResId, metadata_str};
use crate::scope::{effective, is_cluster_scoped_gvk};

/// State shared by the whole build.
pub(crate) struct Ctx {
    /// The schema strategic merges use. Like in kustomize, an `openAPI:` field replaces it and
    /// `crds:` entries extend it for the rest of the build.
    schema: Schema,
    /// Counts changes of `schema`: a base built under one schema is not reused under another.
    schema_gen: u64,
    /// The directory of the kustomization being built (origin paths are relative to it).
    pub root: PathBuf,
}

impl Ctx {
    pub(crate) fn new(root: PathBuf) -> Self {
        Ctx {
            schema: Schema::builtin(),
            schema_gen: 0,
            root,
        }
    }

    pub(crate) fn schema(&self) -> &Schema {
        &self.schema
    }

    pub(crate) fn schema_gen(&self) -> u64 {
        self.schema_gen
    }

    pub(crate) fn replace_schema(&mut self, schema: Schema) {
        self.schema = schema;
        self.schema_gen += 1;
    }

    pub(crate) fn schema_mut(&mut self) -> &mut Schema {
        self.schema_gen += 1;
        &mut self.schema
    }
}

/// Resources plus what travels up with them from a kustomization.
#[derive(Debug, Clone)]
pub(crate) struct Acc {
    pub items: Vec<Item>,
    /// Shared until a `configurations:` file extends it.
    pub config: Arc<TransformerConfig>,
    pub vars: Vec<Value>,
}

impl Acc {
    pub(crate) fn new() -> Self {
        Acc {
            items: Vec::new(),
            config: TransformerConfig::shared_builtin(),
            vars: Vec::new(),
        }
    }

    pub(crate) fn append(&mut self, item: Item) -> Result<()> {
        self.append_all(vec![item])
    }

    /// Appends items, refusing any whose id is already present (one hash set per call, so
    /// loading a file is linear in its size).
    pub(crate) fn append_all(&mut self, mut items: Vec<Item>) -> Result<()> {
        let duplicate = {
            let mut seen: HashSet<IdKey<'_>> =
                self.items.iter().map(|x| IdKey::of(&x.res.obj)).collect();
            items
                .iter()
                .position(|x| !seen.insert(IdKey::of(&x.res.obj)))
        };
        if let Some(at) = duplicate {
            let rest = items.split_off(at);
            self.items.extend(items);
            let item = &rest[0];
            return Err(self.duplicate(item, &item.res.id()));
        }
        self.items.extend(items);
        Ok(())
    }

    /// The error for `item`, whose id is already registered: placed at the document it came
    /// from, naming the document of the object registered first.
    fn duplicate(&self, item: &Item, id: &ResId) -> KustomizeError {
        let eff = effective(id.clone());
        let first = self
            .items
            .iter()
            .find(|x| effective(x.res.id()) == eff)
            .and_then(source_location);
        let e = KustomizeError::DuplicateId {
            id: id_string(id),
            first,
        };
        match source_location(item) {
            Some(at) => e.at(at, ""),
            None => e,
        }
    }

    /// Takes in what a base accumulated.
    pub(crate) fn absorb(&mut self, other: Acc) -> Result<()> {
        self.append_all(other.items)?;
        self.merge_config(&other.config);
        self.vars.extend(other.vars);
        Ok(())
    }

    /// Adds a configuration read from a `configurations:` file.
    pub(crate) fn add_configuration(&mut self, tc: &TransformerConfig) {
        Arc::make_mut(&mut self.config).merge(tc);
    }

    /// Merges another accumulator's configuration into this one. Every configuration is the
    /// built-in one extended by merges, and merging only appends what is missing, so merging
    /// the built-in one changes nothing and merging into the built-in one gives the other.
    fn merge_config(&mut self, other: &Arc<TransformerConfig>) {
        if Arc::ptr_eq(&self.config, other) {
            return;
        }
        let builtin = TransformerConfig::shared_builtin();
        if Arc::ptr_eq(other, &builtin) {
            return;
        }
        if Arc::ptr_eq(&self.config, &builtin) {
            self.config = Arc::clone(other);
            return;
        }
        Arc::make_mut(&mut self.config).merge(other);
    }

    /// Adds a generated ConfigMap or Secret, creating, merging or replacing as its behavior
    /// says.
    pub(crate) fn absorb_generated(
        &mut self,
        k: &Kustomization,
        g: Generated,
        origin: String,
    ) -> Result<()> {
        let mut item = Item::new(g.obj);
        item.origin = Some(origin);
        item.needs_hash = g.needs_hash;
        let id = item.res.id();
        let pos = self.items.iter().position(|x| x.matches_any_id(&id));
        match (g.behavior, pos) {
            (Behavior::Create, None) => self.append(item),
            (Behavior::Create, Some(i)) => Err(KustomizeError::DuplicateId {
                id: id_string(&id),
                first: source_location(&self.items[i]),
            }),
            (_, None) => Err(KustomizeError::Generator {
                file: k.file.clone(),
                name: id.name.clone(),
                message: format!(
                    "id {} does not exist; cannot merge or replace",
                    id_string(&id)
                ),
            }),
            (behavior, Some(i)) => {
                merge_generated(&mut self.items[i], item, behavior);
                Ok(())
            }
        }
    }
}

/// Where an item was read from, when it was read from a file.
fn source_location(item: &Item) -> Option<Location> {
    item.source.as_ref().map(|(file, line)| Location {
        file: file.to_path_buf(),
        line: *line,
        col: None,
    })
}

/// An object's identity as [`effective`] compares it, borrowed from the object: the duplicate
/// check of [`Acc::append_all`] runs over every object each time a file is appended.
#[derive(PartialEq, Eq, Hash)]
struct IdKey<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    name: &'a str,
    namespace: Option<&'a str>,
}

impl<'a> IdKey<'a> {
    fn of(obj: &'a Value) -> Self {
        let (group, version) =
            split_api_version(obj.get("apiVersion").and_then(Value::as_str).unwrap_or(""));
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let namespace = match metadata_str(obj, "namespace") {
            Some(ns) if !ns.is_empty() => Some(ns),
            _ if is_cluster_scoped_gvk(group, version, kind) => None,
            _ => Some("default"),
        };
        IdKey {
            group,
            version,
            kind,
            name: metadata_str(obj, "name").unwrap_or(""),
            namespace,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fieldspec::FieldSpec;

    #[test]
    fn configurations_merge_like_before_sharing() {
        let extra = TransformerConfig {
            name_prefix: vec![FieldSpec::new("", "", "X", "spec/x", false)],
            ..Default::default()
        };
        let mut with_extra = Acc::new();
        with_extra.add_configuration(&extra);
        // Merging into a plain accumulator gives the extended configuration ...
        let mut a = Acc::new();
        a.absorb(with_extra.clone()).unwrap();
        let mut expected = TransformerConfig::builtin();
        expected.merge(&extra);
        assert_eq!(a.config.name_prefix, expected.name_prefix);
        // ... merging a plain one into an extended one keeps it ...
        let mut b = with_extra.clone();
        b.absorb(Acc::new()).unwrap();
        assert_eq!(b.config.name_prefix, expected.name_prefix);
        // ... and two different extensions are both kept, in order.
        let other = TransformerConfig {
            name_prefix: vec![FieldSpec::new("", "", "Y", "spec/y", false)],
            ..Default::default()
        };
        let mut c = Acc::new();
        c.add_configuration(&other);
        b.absorb(c).unwrap();
        expected.merge(&other);
        assert_eq!(b.config.name_prefix, expected.name_prefix);
    }
}
