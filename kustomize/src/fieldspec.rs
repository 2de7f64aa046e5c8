//! Field specs (which fields of which kinds a transformer touches), the transformer
//! configuration they make up (read from `configurations:` files; the built-in one is in
//! `builtin_config.rs`), and walking a path through an object.

use serde_json::{Map, Value};

use crate::error::{KustomizeError, Result};
use rflux_core::split_api_version;

use crate::resource::{MAX_DEPTH, ResId};

/// Group, version, kind; empty parts select anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl Gvk {
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Gvk {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
        }
    }

    /// Whether `self`, used as a selector, selects the given group/version/kind.
    pub fn selects(&self, group: &str, version: &str, kind: &str) -> bool {
        (self.group.is_empty() || self.group == group)
            && (self.version.is_empty() || self.version == version)
            && (self.kind.is_empty() || self.kind == kind)
    }

    pub fn selects_id(&self, id: &ResId) -> bool {
        self.selects(&id.group, &id.version, &id.kind)
    }

    pub fn selects_obj(&self, obj: &Value) -> bool {
        let (g, v) = split_api_version(obj.get("apiVersion").and_then(Value::as_str).unwrap_or(""));
        self.selects(g, v, obj.get("kind").and_then(Value::as_str).unwrap_or(""))
    }

    fn from_value(v: &Value) -> Self {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Gvk {
            group: s("group"),
            version: s("version"),
            kind: s("kind"),
        }
    }
}

/// One field spec: a path (segments separated by `/`, `\/` for a literal slash, `[]` marks a
/// list) in objects selected by a GVK; `create` adds the field when missing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldSpec {
    pub gvk: Gvk,
    pub path: String,
    pub create: bool,
}

impl FieldSpec {
    pub fn new(group: &str, version: &str, kind: &str, path: &str, create: bool) -> Self {
        FieldSpec {
            gvk: Gvk::new(group, version, kind),
            path: path.to_string(),
            create,
        }
    }

    /// The path split into segments.
    pub fn segments(&self) -> Vec<String> {
        split_path(&self.path)
    }

    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        let path = v
            .get("path")
            .and_then(Value::as_str)
            .ok_or("field spec without 'path'")?
            .to_string();
        if split_path(&path).len() > MAX_DEPTH {
            return Err(format!(
                "field spec path has more than {MAX_DEPTH} segments"
            ));
        }
        let create = v.get("create").and_then(Value::as_bool).unwrap_or(false);
        Ok(FieldSpec {
            gvk: Gvk::from_value(v),
            path,
            create,
        })
    }
}

/// Splits a field-spec path at unescaped `/`.
pub fn split_path(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'/') => {
                cur.push('/');
                chars.next();
            }
            '/' => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// Which fields refer to objects of one kind by name.
#[derive(Debug, Clone, PartialEq)]
pub struct NameBackRef {
    pub gvk: Gvk,
    pub referrers: Vec<FieldSpec>,
}

/// The field specs of every built-in transformer (kustomize's "transformer configuration").
#[derive(Debug, Clone, Default)]
pub struct TransformerConfig {
    pub name_prefix: Vec<FieldSpec>,
    pub name_suffix: Vec<FieldSpec>,
    pub namespace: Vec<FieldSpec>,
    pub common_labels: Vec<FieldSpec>,
    pub template_labels: Vec<FieldSpec>,
    pub labels: Vec<FieldSpec>,
    pub common_annotations: Vec<FieldSpec>,
    pub images: Vec<FieldSpec>,
    pub replicas: Vec<FieldSpec>,
    pub var_reference: Vec<FieldSpec>,
    pub name_reference: Vec<NameBackRef>,
}

fn add_unique(list: &mut Vec<FieldSpec>, more: &[FieldSpec]) {
    fn hash_of(fs: &FieldSpec) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        fs.hash(&mut h);
        h.finish()
    }
    // Where each hash sits in the list, so that merging two configurations of hundreds of
    // field specs (every base of an operator's config/ tree carries one) is not quadratic.
    let mut at: std::collections::HashMap<u64, Vec<usize>> = std::collections::HashMap::new();
    for (i, fs) in list.iter().enumerate() {
        at.entry(hash_of(fs)).or_default().push(i);
    }
    for fs in more {
        let same = at.entry(hash_of(fs)).or_default();
        if same.iter().any(|&i| list[i] == *fs) {
            continue;
        }
        same.push(list.len());
        list.push(fs.clone());
    }
}

impl TransformerConfig {
    /// Adds another configuration (dropping duplicates, grouping name references by kind).
    pub fn merge(&mut self, o: &TransformerConfig) {
        add_unique(&mut self.name_prefix, &o.name_prefix);
        add_unique(&mut self.name_suffix, &o.name_suffix);
        add_unique(&mut self.namespace, &o.namespace);
        add_unique(&mut self.common_labels, &o.common_labels);
        add_unique(&mut self.template_labels, &o.template_labels);
        add_unique(&mut self.labels, &o.labels);
        add_unique(&mut self.common_annotations, &o.common_annotations);
        add_unique(&mut self.images, &o.images);
        add_unique(&mut self.replicas, &o.replicas);
        add_unique(&mut self.var_reference, &o.var_reference);
        for br in &o.name_reference {
            match self.name_reference.iter_mut().find(|x| x.gvk == br.gvk) {
                Some(x) => add_unique(&mut x.referrers, &br.referrers),
                None => self.name_reference.push(br.clone()),
            }
        }
    }

    /// Parses a `configurations:` file.
    pub fn from_value(v: &Value, origin: &str) -> Result<Self> {
        let err = |m: String| KustomizeError::Transform {
            context: format!("configuration file {origin}"),
            message: m,
        };
        let mut tc = TransformerConfig::default();
        let Some(obj) = v.as_object() else {
            return if v.is_null() {
                Ok(tc)
            } else {
                Err(err("expected a mapping".to_string()))
            };
        };
        for (k, val) in obj {
            let specs = |val: &Value| -> Result<Vec<FieldSpec>> {
                match val {
                    Value::Null => Ok(Vec::new()),
                    Value::Array(a) => a
                        .iter()
                        .map(|x| FieldSpec::from_value(x).map_err(|m| err(m.to_string())))
                        .collect(),
                    _ => Err(err(format!("'{k}' must be a list of field specs"))),
                }
            };
            match k.as_str() {
                "namePrefix" => tc.name_prefix = specs(val)?,
                "nameSuffix" => tc.name_suffix = specs(val)?,
                "namespace" => tc.namespace = specs(val)?,
                "commonLabels" => tc.common_labels = specs(val)?,
                "templateLabels" => tc.template_labels = specs(val)?,
                "labels" => tc.labels = specs(val)?,
                "commonAnnotations" => tc.common_annotations = specs(val)?,
                "images" => tc.images = specs(val)?,
                "replicas" => tc.replicas = specs(val)?,
                "varReference" => tc.var_reference = specs(val)?,
                "nameReference" => {
                    let list = val.as_array().cloned().unwrap_or_default();
                    for br in list {
                        let gvk = Gvk::from_value(&br);
                        let referrers = specs(br.get("fieldSpecs").unwrap_or(&Value::Null))?;
                        tc.merge(&TransformerConfig {
                            name_reference: vec![NameBackRef { gvk, referrers }],
                            ..Default::default()
                        });
                    }
                }
                _ => {}
            }
        }
        Ok(tc)
    }
}

/// Visits every value at `segs` below `node`, descending into every element of lists met on
/// the way. With `create`, missing mappings on the way are added and a missing leaf is set to
/// `leaf_default` before `f` sees it.
pub fn visit_path(
    node: &mut Value,
    segs: &[String],
    create: bool,
    leaf_default: &dyn Fn() -> Value,
    f: &mut dyn FnMut(&mut Value) -> Result<()>,
) -> Result<()> {
    if let Value::Array(items) = node {
        for item in items {
            visit_path(item, segs, create, leaf_default, f)?;
        }
        return Ok(());
    }
    let Some((first, rest)) = segs.split_first() else {
        return f(node);
    };
    let name = first.trim_end_matches("[]");
    let Value::Object(map) = node else {
        return Ok(());
    };
    if !map.contains_key(name) || map.get(name).is_some_and(Value::is_null) {
        // kustomize never adds a missing list, but turns a null one into an empty list.
        if !create || (first.ends_with("[]") && !map.contains_key(name)) {
            return Ok(());
        }
        let fresh = if rest.is_empty() {
            leaf_default()
        } else if first.ends_with("[]") {
            Value::Array(Vec::new())
        } else {
            Value::Object(Map::new())
        };
        map.insert(name.to_string(), fresh);
    }
    let Some(child) = map.get_mut(name) else {
        return Ok(());
    };
    if rest.is_empty() {
        if let Value::Array(items) = child
            && !first.ends_with("[]")
        {
            for item in items {
                f(item)?;
            }
            return Ok(());
        }
        return f(child);
    }
    visit_path(child, rest, create, leaf_default, f)
}
