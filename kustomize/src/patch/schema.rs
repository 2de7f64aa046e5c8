//! Merge keys and patch strategies of object fields, as strategic merge patching needs them.
//!
//! kustomize looks a resource's schema up by its exact `apiVersion` + `kind`, then walks
//! it field by field. A list is merged element-wise only where the schema gives it a patch
//! strategy containing `merge` (keyed by `x-kubernetes-list-map-keys` when present, otherwise by
//! `x-kubernetes-patch-merge-key`, or by value for primitive lists such as `finalizers`); every
//! other list, and every list of a kind without a schema, is replaced by the patch.
//!
//! The built-in table (`builtin_schema.txt`) holds, for the Kubernetes API version kustomize embeds
//! (v1.21.2), only the fields that lead to a list with a patch strategy. Its format: one type per
//! line, `TypeName field=SHAPE[!strategy:key1,key2] ...`, where SHAPE is `@Type` (object),
//! `[SHAPE` (list of), `{SHAPE` (map of) or empty (scalar); and lines
//! `= apiVersion Kind TypeName` binding a resource type to its root type.

use std::collections::HashMap;

use serde_json::Value;

use super::PatchError;

const BUILTIN: &str = include_str!("builtin_schema.txt");

/// The shape of a field's value.
#[derive(Debug, Clone)]
enum Shape {
    /// A scalar or anything we know nothing more about.
    Leaf,
    /// A named object type.
    Ref(String),
    /// An inline object type (CRD schemas, inline OpenAPI objects).
    Object(Box<ObjType>),
    /// A list of the inner shape.
    Array(Box<Shape>),
    /// A map (`additionalProperties`) of the inner shape.
    Map(Box<Shape>),
}

/// A field: its shape plus the patch strategy and merge keys declared on it.
#[derive(Debug, Clone)]
struct Field {
    shape: Shape,
    strategy: Option<String>,
    keys: Vec<String>,
}

impl Field {
    fn plain(shape: Shape) -> Field {
        Field {
            shape,
            strategy: None,
            keys: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Default)]
struct ObjType {
    props: HashMap<String, Field>,
    additional: Option<Box<Field>>,
}

/// Merge keys and patch strategies for resource types, looked up by `apiVersion` and `kind`.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    types: HashMap<String, ObjType>,
    /// `(apiVersion, kind)` -> `Shape::Ref(root type name)`.
    kinds: HashMap<(String, String), Shape>,
}

/// A position in a schema: the field reached so far.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cursor<'a> {
    schema: &'a Schema,
    shape: &'a Shape,
    strategy: Option<&'a str>,
    keys: &'a [String],
}

impl Schema {
    /// An empty schema: every list is replaced by a patch.
    pub fn empty() -> Schema {
        Schema::default()
    }

    /// The merge keys and strategies of the built-in Kubernetes kinds, as kustomize v5 has them.
    pub fn builtin() -> Schema {
        let mut s = Schema::default();
        for line in BUILTIN.lines() {
            let mut parts = line.split(' ');
            match parts.next() {
                Some("=") => {
                    if let (Some(av), Some(kind), Some(ty)) =
                        (parts.next(), parts.next(), parts.next())
                    {
                        s.kinds.insert(
                            (av.to_string(), kind.to_string()),
                            Shape::Ref(ty.to_string()),
                        );
                    }
                }
                Some(name) if !name.is_empty() => {
                    let mut t = ObjType::default();
                    for f in parts {
                        if let Some((fname, spec)) = f.split_once('=') {
                            t.props.insert(fname.to_string(), parse_table_field(spec));
                        }
                    }
                    s.types.insert(name.to_string(), t);
                }
                _ => {}
            }
        }
        s
    }

    /// The schema kustomize uses for a kustomization with `openapi: {path: ...}`: only the
    /// definitions of that document. kustomize does not keep the built-in Kubernetes schema
    /// next to a custom one (checked with `kubectl kustomize`: a Deployment's containers are
    /// then replaced, not merged by name), so this starts from an empty schema.
    pub fn from_openapi(doc: &Value) -> Result<Schema, PatchError> {
        let mut s = Schema::empty();
        s.add_openapi(doc)?;
        Ok(s)
    }

    /// Adds the definitions of an OpenAPI v2 document (`{definitions: {...}}`): every
    /// definition is stored under its name, and the ones carrying
    /// `x-kubernetes-group-version-kind` become the schema of those resource types, replacing
    /// entries of the same name or type. For the kustomization `openapi:` field use
    /// [`Schema::from_openapi`], which mirrors kustomize (custom schema only).
    pub fn add_openapi(&mut self, doc: &Value) -> Result<(), PatchError> {
        let defs = doc
            .get("definitions")
            .and_then(Value::as_object)
            .ok_or_else(|| PatchError::Schema {
                reason: "OpenAPI document has no `definitions` map".into(),
            })?;
        for (name, def) in defs {
            if !def.is_object() {
                return Err(PatchError::Schema {
                    reason: format!("definition {name} is not an object"),
                });
            }
            let ty = obj_type_from_openapi(def);
            self.types.insert(name.clone(), ty);
            for (av, kind) in gvks(def.get("x-kubernetes-group-version-kind")) {
                self.kinds.insert((av, kind), Shape::Ref(name.clone()));
            }
        }
        Ok(())
    }

    /// Adds the schema of a CustomResourceDefinition (`apiextensions.k8s.io/v1` or `v1beta1`):
    /// each served version's `openAPIV3Schema` becomes the schema of `group/version` + kind, so
    /// lists declaring `x-kubernetes-patch-strategy: merge` (with `x-kubernetes-patch-merge-key`
    /// or `x-kubernetes-list-map-keys`) are merged by key.
    ///
    /// This is an extension, not kustomize behaviour: kustomize's `crds:` field takes
    /// kube-openapi definition maps (not CRD objects) and uses them only for name references;
    /// it never changes strategic merge. Do not call this for `crds:` entries when mirroring
    /// `kubectl kustomize` (a `crds:` file in kube-openapi format is rejected here).
    pub fn add_crd(&mut self, crd: &Value) -> Result<(), PatchError> {
        let bad = |reason: &str| PatchError::Schema {
            reason: format!("CRD: {reason}"),
        };
        if crd.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
            return Err(bad("kind is not CustomResourceDefinition"));
        }
        let spec = crd.get("spec").ok_or_else(|| bad("no spec"))?;
        let group = spec
            .get("group")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no spec.group"))?;
        let kind = spec
            .pointer("/names/kind")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no spec.names.kind"))?;
        let mut found = false;
        // v1beta1: a shared spec.validation.openAPIV3Schema plus spec.version / spec.versions.
        let shared = spec.pointer("/validation/openAPIV3Schema");
        let mut versions: Vec<(String, Option<&Value>)> = Vec::new();
        if let Some(list) = spec.get("versions").and_then(Value::as_array) {
            for v in list {
                if let Some(name) = v.get("name").and_then(Value::as_str) {
                    let sch = v.pointer("/schema/openAPIV3Schema").or(shared);
                    versions.push((name.to_string(), sch));
                }
            }
        }
        if let Some(v) = spec.get("version").and_then(Value::as_str)
            && !versions.iter().any(|(n, _)| n == v)
        {
            versions.push((v.to_string(), shared));
        }
        for (version, sch) in versions {
            let Some(sch) = sch else { continue };
            if !sch.is_object() {
                return Err(bad("openAPIV3Schema is not an object"));
            }
            let name = format!("crd:{group}/{version}/{kind}");
            self.types.insert(name.clone(), obj_type_from_openapi(sch));
            let av = if group.is_empty() {
                version.clone()
            } else {
                format!("{group}/{version}")
            };
            self.kinds.insert((av, kind.to_string()), Shape::Ref(name));
            found = true;
        }
        if !found {
            return Err(bad("no version with an openAPIV3Schema"));
        }
        Ok(())
    }

    /// Whether the schema knows the resource type `apiVersion` + `kind`.
    pub fn knows(&self, api_version: &str, kind: &str) -> bool {
        self.kinds
            .contains_key(&(api_version.to_string(), kind.to_string()))
    }

    /// The patch strategy and merge keys of the field at `path` (field names; `[]` steps into
    /// list elements) of the given resource type, when the schema declares one.
    pub fn merge_keys_at(
        &self,
        api_version: &str,
        kind: &str,
        path: &[&str],
    ) -> Option<(String, Vec<String>)> {
        let mut c = self.root(api_version, kind)?;
        for p in path {
            c = if *p == "[]" {
                c.elements()?
            } else {
                c.field(p)?
            };
        }
        c.strategy().map(|s| (s.to_string(), c.keys().to_vec()))
    }

    pub(crate) fn root(&self, api_version: &str, kind: &str) -> Option<Cursor<'_>> {
        let shape = self
            .kinds
            .get(&(api_version.to_string(), kind.to_string()))?;
        Some(Cursor {
            schema: self,
            shape,
            strategy: None,
            keys: &[],
        })
    }

    fn lookup_type(&self, name: &str) -> Option<&ObjType> {
        self.types
            .get(name)
            .or_else(|| self.types.get(short_name(name)))
    }
}

impl<'a> Cursor<'a> {
    fn resolve_obj(&self) -> Option<&'a ObjType> {
        match self.shape {
            Shape::Ref(n) => self.schema.lookup_type(n),
            Shape::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The schema of a map field.
    pub(crate) fn field(&self, name: &str) -> Option<Cursor<'a>> {
        if let Shape::Map(inner) = self.shape {
            return Some(Cursor {
                schema: self.schema,
                shape: inner,
                strategy: None,
                keys: &[],
            });
        }
        let obj = self.resolve_obj()?;
        let f = obj.props.get(name).or(obj.additional.as_deref())?;
        Some(Cursor {
            schema: self.schema,
            shape: &f.shape,
            strategy: f.strategy.as_deref(),
            keys: &f.keys,
        })
    }

    /// The schema of a list's elements.
    pub(crate) fn elements(&self) -> Option<Cursor<'a>> {
        match self.shape {
            Shape::Array(inner) => Some(Cursor {
                schema: self.schema,
                shape: inner,
                strategy: None,
                keys: &[],
            }),
            _ => None,
        }
    }

    pub(crate) fn strategy(&self) -> Option<&'a str> {
        self.strategy
    }

    pub(crate) fn keys(&self) -> &'a [String] {
        self.keys
    }

    /// A list is associative when its strategy (comma separated) contains `merge`.
    pub(crate) fn is_merge_list(&self) -> bool {
        self.strategy
            .is_some_and(|s| s.split(',').any(|p| p == "merge"))
    }
}

fn short_name(name: &str) -> &str {
    const PREFIXES: [&str; 5] = [
        "io.k8s.api.",
        "io.k8s.apimachinery.pkg.apis.",
        "io.k8s.apimachinery.pkg.",
        "io.k8s.kube-aggregator.pkg.apis.",
        "io.k8s.apiextensions-apiserver.pkg.apis.",
    ];
    PREFIXES
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name)
}

fn parse_table_shape(s: &str) -> Shape {
    if let Some(rest) = s.strip_prefix('[') {
        Shape::Array(Box::new(parse_table_shape(rest)))
    } else if let Some(rest) = s.strip_prefix('{') {
        Shape::Map(Box::new(parse_table_shape(rest)))
    } else if let Some(rest) = s.strip_prefix('@') {
        Shape::Ref(rest.to_string())
    } else {
        Shape::Leaf
    }
}

fn parse_table_field(spec: &str) -> Field {
    let (shape, ext) = match spec.split_once('!') {
        Some((s, e)) => (s, Some(e)),
        None => (spec, None),
    };
    let mut f = Field::plain(parse_table_shape(shape));
    if let Some(ext) = ext {
        let (strategy, keys) = ext.split_once(':').unwrap_or((ext, ""));
        f.strategy = Some(strategy.to_string());
        f.keys = keys
            .split(',')
            .filter(|k| !k.is_empty())
            .map(str::to_string)
            .collect();
    }
    f
}

fn gvks(ext: Option<&Value>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for g in ext.and_then(Value::as_array).into_iter().flatten() {
        let group = g.get("group").and_then(Value::as_str).unwrap_or("");
        let (Some(version), Some(kind)) = (
            g.get("version").and_then(Value::as_str),
            g.get("kind").and_then(Value::as_str),
        ) else {
            continue;
        };
        let av = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        out.push((av, kind.to_string()));
    }
    out
}

fn ref_name(v: &Value) -> Option<String> {
    v.get("$ref")
        .and_then(Value::as_str)
        .map(|r| r.rsplit('/').next().unwrap_or(r).to_string())
}

fn obj_type_from_openapi(def: &Value) -> ObjType {
    let mut t = ObjType::default();
    if let Some(props) = def.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            t.props.insert(k.clone(), field_from_openapi(v));
        }
    }
    if let Some(ap) = def.get("additionalProperties").filter(|v| v.is_object()) {
        t.additional = Some(Box::new(field_from_openapi(ap)));
    }
    t
}

fn shape_from_openapi(v: &Value) -> Shape {
    if let Some(r) = ref_name(v) {
        return Shape::Ref(r);
    }
    // `allOf: [{$ref}]` is how some generators wrap a reference.
    if let Some(r) = v
        .get("allOf")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(ref_name)
    {
        return Shape::Ref(r);
    }
    match v.get("type").and_then(Value::as_str) {
        Some("array") => Shape::Array(Box::new(
            v.get("items")
                .map(shape_from_openapi)
                .unwrap_or(Shape::Leaf),
        )),
        _ if v.get("properties").is_some() => Shape::Object(Box::new(obj_type_from_openapi(v))),
        Some("object") => match v.get("additionalProperties").filter(|a| a.is_object()) {
            Some(ap) => Shape::Map(Box::new(shape_from_openapi(ap))),
            None => Shape::Leaf,
        },
        _ => Shape::Leaf,
    }
}

fn field_from_openapi(v: &Value) -> Field {
    let mut f = Field::plain(shape_from_openapi(v));
    if let Some(ps) = v.get("x-kubernetes-patch-strategy").and_then(Value::as_str) {
        f.strategy = Some(ps.to_string());
        let list_keys: Option<Vec<String>> = v
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            });
        f.keys = match list_keys {
            Some(k) => k,
            None => v
                .get("x-kubernetes-patch-merge-key")
                .and_then(Value::as_str)
                .map(|k| vec![k.to_string()])
                .unwrap_or_default(),
        };
    }
    f
}
