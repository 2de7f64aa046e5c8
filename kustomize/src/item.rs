//! One object during a build, with the bookkeeping kustomize keeps in build annotations.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::resource::{ResId, Resource};
use crate::scope::{effective, effective_namespace};
use crate::yaml::PathSeg;

/// One object during a build.
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
    /// The file and 1-based line of the document the object was read from (for errors).
    pub source: Option<(Arc<Path>, usize)>,
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
            source: None,
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
    /// effectively: a cluster-scoped type has no namespace, whatever the objects say).
    pub fn matches_any_id(&self, id: &ResId) -> bool {
        let want = effective(id.clone());
        let want_ns = effective_namespace(&want);
        let same = |x: &ResId| {
            x.kind == want.kind
                && x.group == want.group
                && x.name == want.name
                && effective_namespace(x) == want_ns
        };
        same(&effective(self.res.id())) || self.prev_ids.iter().any(same)
    }
}

/// An identity as kustomize prints it in errors: `Kind.version.group/name.namespace`.
pub fn id_string(id: &ResId) -> String {
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
