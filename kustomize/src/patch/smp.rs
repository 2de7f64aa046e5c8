//! Strategic merge patch with kustomize v5 (kyaml `merge2`) semantics.
//!
//! What kustomize does, and therefore what this does (each rule checked with `kubectl kustomize`
//! v5.5.0):
//! - maps merge recursively; a `null` in the patch removes the key; a `null` already in the
//!   target survives (kyaml keeps `key: null` but drops the empty `key:` form, which parsed
//!   values cannot distinguish: known gap);
//! - a list is merged element by element only when the schema of the target's kind gives it a
//!   `merge` patch strategy; elements are matched on the merge keys (several keys, such as
//!   `containerPort,protocol`, follow kyaml's quirky rules, including dropping unmatched
//!   elements when only one side names the protocol); elements new in the patch come first;
//!   primitive lists with a merge strategy (`finalizers`) are unioned, patch values first;
//! - every other list (no strategy, unknown field, unknown kind) is replaced by the patch;
//! - `$patch: delete | replace | merge` on maps, on lists (as an element `{$patch: ...}`) and
//!   on list elements; `$patch: replace` on an element of a merge-keyed list that also exists in
//!   the target leaves the target element unchanged (a kyaml quirk, mirrored);
//! - `$setElementOrder/...`, `$retainKeys` and `$deleteFromPrimitiveList/...` are not
//!   understood by kustomize and are merged as ordinary fields;
//! - `$patch: delete` at the top level deletes the whole object ([`PatchOutcome::Deleted`]).
//!
//! The function does not restore `metadata.name`, `metadata.namespace` or `kind` after the
//! merge; kustomize does that unless the patch's `allowNameChange` / `allowKindChange` options
//! are set, so the caller should too.

use serde_json::{Map, Value};

use super::PatchError;
use super::schema::{Cursor, Schema};

const DIRECTIVE: &str = "$patch";

/// What happened to the patched object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchOutcome {
    /// The object was changed in place (possibly not at all).
    Patched,
    /// The patch deleted the object (`$patch: delete` at the top level): drop the resource.
    Deleted,
}

/// Applies a strategic merge `patch` to `target` in place.
///
/// The schema is looked up with the target's `apiVersion` + `kind` (then the patch's, as
/// kustomize does). On error `target` is left unchanged.
pub fn strategic_merge(
    target: &mut Value,
    patch: &Value,
    schema: &Schema,
) -> Result<PatchOutcome, PatchError> {
    strategic_merge_with(target, patch, schema, &MergeOptions::default())
}

/// Decides, from the field-name path of a target null, whether to drop it.
pub type NullFilter<'a> = &'a dyn Fn(&[String]) -> bool;

/// Knobs for [`strategic_merge_with`].
#[derive(Default)]
pub struct MergeOptions<'a> {
    /// Called for every null met in the target's maps where the patch says nothing, with the
    /// path of field names leading to it (list positions left out); `true` drops the field.
    /// kyaml drops nulls written in the empty form (`key:`) and keeps spelled-out ones
    /// (`key: null`, `key: ~`); a caller whose parser records which nulls were empty can
    /// answer here. Without it every such null is kept.
    pub drop_target_null: Option<NullFilter<'a>>,
}

/// [`strategic_merge`] with options.
pub fn strategic_merge_with(
    target: &mut Value,
    patch: &Value,
    schema: &Schema,
    options: &MergeOptions<'_>,
) -> Result<PatchOutcome, PatchError> {
    let sch = root_schema(schema, Some(&*target), Some(patch));
    let dest = target.clone();
    let mut path = Vec::new();
    let ctx = Ctx {
        schema,
        drop_null: options.drop_target_null,
    };
    match walk(Some(dest), Some(patch.clone()), sch, &ctx, &mut path, false)? {
        Out::Clear => Ok(PatchOutcome::Deleted),
        Out::Set(v, _) => {
            if v.is_null() {
                return Ok(PatchOutcome::Deleted);
            }
            *target = v;
            Ok(PatchOutcome::Patched)
        }
    }
}

struct Ctx<'a> {
    schema: &'a Schema,
    drop_null: Option<NullFilter<'a>>,
}

/// The result of walking one position.
enum Out {
    /// Remove the field / element.
    Clear,
    /// Set this value; the flag says whether it is the target's own node, merged in place
    /// (this matters for merge-keyed lists, see [`assoc_list`]).
    Set(Value, bool),
}

fn root_schema<'a>(
    schema: &'a Schema,
    dest: Option<&Value>,
    origin: Option<&Value>,
) -> Option<Cursor<'a>> {
    for v in [dest, origin].into_iter().flatten() {
        let (Some(kind), Some(av)) = (
            v.get("kind").and_then(Value::as_str),
            v.get("apiVersion").and_then(Value::as_str),
        ) else {
            continue;
        };
        if kind.is_empty() || av.is_empty() {
            continue;
        }
        if let Some(c) = schema.root(av, kind) {
            return Some(c);
        }
    }
    None
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Map,
    Seq,
    Scalar,
}

fn kind_of(v: &Value) -> Option<Kind> {
    match v {
        Value::Null => None,
        Value::Object(_) => Some(Kind::Map),
        Value::Array(_) => Some(Kind::Seq),
        _ => Some(Kind::Scalar),
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Map => "map",
        Kind::Seq => "list",
        Kind::Scalar => "scalar",
    }
}

fn path_str(path: &[String]) -> String {
    if path.is_empty() {
        "<root>".to_string()
    } else {
        path.join(".")
    }
}

fn walk(
    dest: Option<Value>,
    origin: Option<Value>,
    sch: Option<Cursor<'_>>,
    ctx: &Ctx<'_>,
    path: &mut Vec<String>,
    same: bool,
) -> Result<Out, PatchError> {
    // kyaml picks the schema of embedded objects (apiVersion + kind) when it has none yet.
    let sch = match sch {
        Some(s) => Some(s),
        None => root_schema(ctx.schema, dest.as_ref(), origin.as_ref()),
    };
    let kind = dest
        .as_ref()
        .and_then(kind_of)
        .or_else(|| origin.as_ref().and_then(kind_of));
    if let Some(k) = kind {
        for v in [dest.as_ref(), origin.as_ref()].into_iter().flatten() {
            if let Some(vk) = kind_of(v)
                && vk != k
            {
                return Err(PatchError::InvalidPatch {
                    path: path_str(path),
                    reason: format!("cannot merge a {} with a {}", kind_name(vk), kind_name(k)),
                });
            }
        }
    }
    match kind {
        Some(Kind::Seq) => {
            if sch.is_some_and(|c| c.is_merge_list()) {
                assoc_list(dest, origin, sch, ctx, path, same)
            } else {
                // Non-associative: the patch's list (or null) replaces the target's as is.
                match origin {
                    Some(Value::Null) => Ok(Out::Clear),
                    Some(o) => Ok(Out::Set(o, false)),
                    None => Ok(dest.map_or(Out::Clear, |d| Out::Set(d, true))),
                }
            }
        }
        Some(Kind::Scalar) => match origin {
            Some(Value::Null) => Ok(Out::Clear),
            Some(o) => Ok(Out::Set(o, false)),
            None => Ok(dest.map_or(Out::Clear, |d| Out::Set(d, true))),
        },
        Some(Kind::Map) | None => walk_map(dest, origin, sch, ctx, path, same),
    }
}

/// Reads and removes a map's `$patch` directive.
fn map_directive(m: &mut Map<String, Value>, path: &[String]) -> Result<Directive, PatchError> {
    let Some(v) = m.get(DIRECTIVE) else {
        return Ok(Directive::Merge);
    };
    let d = match v.as_str() {
        Some("delete") => Directive::Delete,
        Some("replace") => Directive::Replace,
        Some("merge") => Directive::Merge,
        _ => {
            return Err(PatchError::InvalidPatch {
                path: path_str(path),
                reason: format!("unknown patch strategy {}", scalar_str(v)),
            });
        }
    };
    m.shift_remove(DIRECTIVE);
    Ok(d)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Directive {
    Merge,
    Replace,
    Delete,
}

fn walk_map(
    dest: Option<Value>,
    origin: Option<Value>,
    sch: Option<Cursor<'_>>,
    ctx: &Ctx<'_>,
    path: &mut Vec<String>,
    same: bool,
) -> Result<Out, PatchError> {
    let dest_missing = dest.as_ref().is_none_or(Value::is_null);
    if same && !dest_missing {
        // Target and patch are one node in kyaml (a new or replaced subtree merged with
        // itself): eliding the directive from the patch elides it from the target too.
        return match origin {
            Some(Value::Object(mut o)) => match map_directive(&mut o, path)? {
                Directive::Delete => Ok(Out::Clear),
                _ => {
                    let d = Value::Object(o.clone());
                    merge_fields(d, Some(Value::Object(o)), sch, ctx, path, true)
                        .map(|v| Out::Set(v, true))
                }
            },
            Some(Value::Null) => Ok(Out::Clear),
            _ => Ok(dest.map_or(Out::Clear, |d| Out::Set(d, true))),
        };
    }
    let (mut base, in_place) = if dest_missing {
        match origin {
            Some(Value::Object(mut o)) => {
                // Errors are ignored here by kyaml; an unknown directive stays in the object.
                let d = map_directive(&mut o, path).unwrap_or(Directive::Merge);
                if d == Directive::Delete {
                    return Ok(Out::Clear);
                }
                (Value::Object(o), false)
            }
            // Patch null (or absent) over a missing field: nothing is added. A null already in
            // the target and untouched by the patch is kept: kyaml keeps nulls spelled out
            // (`null`, `~`, as in `creationTimestamp: null`) but drops the empty form (`key:`);
            // parsed values cannot tell them apart, so every target null is kept.
            Some(_) => return Ok(Out::Clear),
            None => {
                let Some(d) = dest else { return Ok(Out::Clear) };
                if let Some(f) = ctx.drop_null {
                    let fields: Vec<String> = path
                        .iter()
                        .filter(|p| !p.starts_with('['))
                        .cloned()
                        .collect();
                    if f(&fields) {
                        return Ok(Out::Clear);
                    }
                }
                return Ok(Out::Set(d, true));
            }
        }
    } else {
        match origin {
            Some(Value::Null) => return Ok(Out::Clear),
            Some(Value::Object(mut o)) => match map_directive(&mut o, path)? {
                Directive::Delete => return Ok(Out::Clear),
                Directive::Replace => (Value::Object(o), false),
                Directive::Merge => {
                    let d = dest.unwrap_or(Value::Null);
                    return merge_fields(d, Some(Value::Object(o)), sch, ctx, path, false)
                        .map(|v| Out::Set(v, true));
                }
            },
            Some(_) | None => {
                let d = dest.unwrap_or(Value::Null);
                return merge_fields(d, None, sch, ctx, path, false).map(|v| Out::Set(v, true));
            }
        }
    };
    // The patch's map replaces the target's (or is new): kyaml then merges it with itself,
    // which applies nested directives and removes nulls.
    let copy = base.clone();
    base = merge_fields(base, Some(copy), sch, ctx, path, true)?;
    Ok(Out::Set(base, in_place))
}

/// Merges the fields of `origin` into the map `dest`, in kyaml's field order (sorted).
fn merge_fields(
    dest: Value,
    origin: Option<Value>,
    sch: Option<Cursor<'_>>,
    ctx: &Ctx<'_>,
    path: &mut Vec<String>,
    same: bool,
) -> Result<Value, PatchError> {
    let Value::Object(mut dm) = dest else {
        return Ok(dest);
    };
    let mut om = match origin {
        Some(Value::Object(o)) => o,
        _ => Map::new(),
    };
    let mut names: Vec<String> = dm.keys().chain(om.keys()).cloned().collect();
    names.sort();
    names.dedup();
    for name in names {
        let fs = sch.and_then(|c| c.field(&name));
        let d = dm.get_mut(&name).map(std::mem::take);
        let o = om.remove(&name);
        path.push(name.clone());
        let out = walk(d, o, fs, ctx, path, same);
        path.pop();
        match out? {
            Out::Clear => {
                dm.shift_remove(&name);
            }
            Out::Set(v, _) => {
                dm.insert(name, v);
            }
        }
    }
    Ok(Value::Object(dm))
}

/// kyaml's string form of a scalar (`yaml.Node.Value`).
pub(crate) fn scalar_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

/// kyaml `IsNilOrEmpty` for a field value (an empty string is not empty).
fn nil_or_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn is_empty_map(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// Reads a list's `$patch` directive (an element `{$patch: X}` with no other key), removing
/// that element. Elements carrying `$patch` next to other keys are element directives.
fn list_directive(list: &mut Vec<Value>, path: &[String]) -> Result<Directive, PatchError> {
    let Some(pos) = list
        .iter()
        .position(|e| e.as_object().is_some_and(|m| m.contains_key(DIRECTIVE)))
    else {
        return Ok(Directive::Merge);
    };
    let (len, value) = match &list[pos] {
        Value::Object(m) => (m.len(), m.get(DIRECTIVE).cloned().unwrap_or(Value::Null)),
        _ => return Ok(Directive::Merge),
    };
    if len > 1 {
        return Ok(Directive::Merge);
    }
    let d = match value.as_str() {
        Some("delete") => Directive::Delete,
        Some("replace") => Directive::Replace,
        Some("merge") => Directive::Merge,
        _ => {
            return Err(PatchError::InvalidPatch {
                path: path_str(path),
                reason: format!("unknown patch strategy {}", scalar_str(&value)),
            });
        }
    };
    // kyaml removes every element whose `$patch` equals the directive value.
    let v = scalar_str(&value);
    list.retain(|e| match e.get(DIRECTIVE) {
        Some(x) => scalar_str(x) != v,
        None => !is_empty_map(e),
    });
    Ok(d)
}

fn assoc_list(
    dest: Option<Value>,
    origin: Option<Value>,
    sch: Option<Cursor<'_>>,
    ctx: &Ctx<'_>,
    path: &mut Vec<String>,
    same: bool,
) -> Result<Out, PatchError> {
    let dest_missing = dest.as_ref().is_none_or(Value::is_null);
    // Whether the elements are merged with themselves (see `walk_map`).
    let mut elems_same = same;
    let (d_list, p_list): (Vec<Value>, Option<Vec<Value>>) = if same && !dest_missing {
        match origin {
            Some(Value::Array(mut o)) => match list_directive(&mut o, path)? {
                Directive::Delete => return Ok(Out::Clear),
                _ => (o.clone(), Some(o)),
            },
            Some(Value::Null) => return Ok(Out::Clear),
            _ => return Ok(dest.map_or(Out::Clear, |d| Out::Set(d, true))),
        }
    } else if dest_missing {
        // New list: taken from the patch without reading its directive, then merged with itself.
        elems_same = true;
        match origin {
            Some(Value::Array(a)) => (a.clone(), Some(a)),
            Some(_) => return Ok(Out::Clear),
            None => {
                let Some(d) = dest else { return Ok(Out::Clear) };
                if let Some(f) = ctx.drop_null {
                    let fields: Vec<String> = path
                        .iter()
                        .filter(|p| !p.starts_with('['))
                        .cloned()
                        .collect();
                    if f(&fields) {
                        return Ok(Out::Clear);
                    }
                }
                return Ok(Out::Set(d, true));
            }
        }
    } else {
        let Some(Value::Array(d)) = dest else {
            return Ok(Out::Clear);
        };
        match origin {
            Some(Value::Null) => return Ok(Out::Clear),
            Some(Value::Array(mut o)) => match list_directive(&mut o, path)? {
                Directive::Delete => return Ok(Out::Clear),
                Directive::Replace => {
                    elems_same = true;
                    (o.clone(), Some(o))
                }
                Directive::Merge => (d, Some(o)),
            },
            Some(_) => return Ok(Out::Clear),
            None => (d, None),
        }
    };
    let keys: Vec<String> = sch.map(|c| c.keys().to_vec()).unwrap_or_default();
    let elem_sch = sch.and_then(|c| c.elements());
    // Tuples of key values, patch elements first (kustomize prepends new elements).
    let mut values: Vec<Vec<String>> = Vec::new();
    for src in [p_list.as_deref(), Some(d_list.as_slice())]
        .into_iter()
        .flatten()
    {
        for e in src {
            let t: Vec<String> = keys
                .iter()
                .map(|k| match e.get(k) {
                    Some(v) if !nil_or_empty(v) => scalar_str(v),
                    _ => String::new(),
                })
                .collect();
            if t.is_empty() || values.contains(&t) {
                continue;
            }
            values.push(t);
        }
    }
    let result = if !values.is_empty() || !keys.is_empty() {
        set_assoc_elements(
            values,
            &keys,
            d_list,
            p_list.clone(),
            elem_sch,
            ctx,
            path,
            elems_same,
        )?
    } else {
        let mut prim: Vec<Vec<String>> = Vec::new();
        for src in [p_list.as_deref(), Some(d_list.as_slice())]
            .into_iter()
            .flatten()
        {
            for e in src {
                let t = vec![scalar_str(e)];
                if !prim.contains(&t) {
                    prim.push(t);
                }
            }
        }
        set_assoc_elements(
            prim,
            &[String::new()],
            d_list,
            p_list.clone(),
            elem_sch,
            ctx,
            path,
            elems_same,
        )?
    };
    Ok(Out::Set(Value::Array(result), false))
}

/// kyaml `match`: two key tuples agree when they share a value and do not conflict.
fn match_values(a: &[String], b: &[String]) -> Option<Vec<String>> {
    if a.len() != b.len() {
        return None;
    }
    let mut common = false;
    let mut res = Vec::with_capacity(a.len());
    for (x, y) in a.iter().zip(b) {
        if x == y {
            common = true;
            res.push(x.clone());
        } else if !x.is_empty() && !y.is_empty() {
            return None;
        } else if !x.is_empty() {
            res.push(x.clone());
        } else {
            res.push(y.clone());
        }
    }
    common.then_some(res)
}

fn merge_values(list: &mut [Vec<String>]) {
    for i in 0..list.len() {
        let v1 = list[i].clone();
        for j in 0..list.len() {
            if let Some(m) = match_values(&v1, &list[j]) {
                list[i] = m.clone();
                list[j] = m;
            }
        }
    }
}

/// kyaml `validateKeys`: keep the keys some tuple has a value for.
fn validate_keys(
    all: &[Vec<String>],
    values: &[String],
    keys: &[String],
) -> (Vec<String>, Vec<String>) {
    let valid: Vec<bool> = (0..keys.len())
        .map(|i| all.iter().any(|t| t.get(i).is_some_and(|v| !v.is_empty())))
        .collect();
    if !valid.iter().any(|b| *b) {
        return (keys.to_vec(), values.to_vec());
    }
    let vk = keys
        .iter()
        .zip(&valid)
        .filter(|(_, b)| **b)
        .map(|(k, _)| k.clone())
        .collect();
    let vv = values
        .iter()
        .enumerate()
        .filter(|(i, v)| !v.is_empty() || valid.get(*i).copied().unwrap_or(false))
        .map(|(_, v)| v.clone())
        .collect();
    (vk, vv)
}

/// kyaml `ElementMatcher`: index of the first element whose keys have exactly these values
/// (an empty key means the list holds scalars).
fn find_element(list: &[Value], keys: &[String], values: &[String]) -> Option<usize> {
    let keys: Vec<&str> = if keys.is_empty() {
        vec![""]
    } else {
        keys.iter().map(String::as_str).collect()
    };
    let values: Vec<&str> = if values.is_empty() {
        vec![""]
    } else {
        values.iter().map(String::as_str).collect()
    };
    if keys[0].is_empty() {
        return list
            .iter()
            .position(|e| !e.is_object() && !e.is_array() && scalar_str(e) == values[0]);
    }
    if keys.len() != values.len() {
        return None;
    }
    list.iter().position(|e| {
        let Value::Object(m) = e else { return false };
        keys.iter()
            .zip(&values)
            .all(|(k, v)| m.get(*k).is_some_and(|x| scalar_str(x) == *v))
    })
}

/// kyaml `FieldMatcher{Name, StringValue}` as used by `ElementSetter`.
fn setter_field_matches(
    elem: &Value,
    key: &str,
    value: &str,
    path: &[String],
) -> Result<bool, PatchError> {
    if key.is_empty() {
        if elem.is_object() || elem.is_array() {
            return Err(PatchError::MergeKey {
                path: path_str(path),
                key: String::new(),
                reason: "list mixes scalars and non-scalars".into(),
            });
        }
        return Ok(scalar_str(elem) == value);
    }
    let Value::Object(m) = elem else {
        return Err(PatchError::MergeKey {
            path: path_str(path),
            key: key.to_string(),
            reason: "list element is not a map".into(),
        });
    };
    Ok(match m.get(key) {
        None => false,
        Some(v) => value.is_empty() || scalar_str(v) == value,
    })
}

/// kyaml `ElementSetter`: replaces (or, without `element`, removes) the elements matching
/// `keys`/`values`, appends `element` when none matched; drops null and empty-map elements.
fn element_setter(
    list: &mut Vec<Value>,
    element: Option<Value>,
    keys: &[String],
    values: &[String],
    path: &[String],
) -> Result<(), PatchError> {
    let keys: Vec<String> = if keys.is_empty() {
        vec![String::new()]
    } else {
        keys.to_vec()
    };
    let mapping_setter = !keys[0].is_empty() && values.first().is_some_and(|v| !v.is_empty());
    let mut out = Vec::with_capacity(list.len() + 1);
    let mut matched = false;
    for elem in std::mem::take(list) {
        if is_empty_map(&elem) {
            continue;
        }
        if !elem.is_object() && mapping_setter {
            out.push(elem);
            continue;
        }
        let mut found = false;
        let mut last: Option<bool> = None;
        for (j, k) in keys.iter().enumerate() {
            if let Some(v) = values.get(j) {
                last = Some(setter_field_matches(&elem, k, v, path)?);
            }
            found = last == Some(true);
            if !found {
                break;
            }
        }
        if !found {
            if !values.is_empty() {
                out.push(elem);
            }
            continue;
        }
        matched = true;
        if let Some(e) = &element {
            out.push(e.clone());
        }
    }
    *list = out;
    if let Some(e) = element
        && !e.is_null()
        && !matched
    {
        list.push(e);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn set_assoc_elements(
    mut values: Vec<Vec<String>>,
    keys: &[String],
    mut dest: Vec<Value>,
    mut patch: Option<Vec<Value>>,
    elem_sch: Option<Cursor<'_>>,
    ctx: &Ctx<'_>,
    path: &mut Vec<String>,
    same: bool,
) -> Result<Vec<Value>, PatchError> {
    let mut items: Vec<Value> = Vec::new();
    if keys.len() > 1 {
        merge_values(&mut values);
    }
    let mut valid_keys: Vec<String> = Vec::new();
    for tuple in &values {
        if tuple.is_empty() {
            continue;
        }
        let (vk, vv) = validate_keys(&values, tuple, keys);
        valid_keys = vk.clone();
        let (lk, lv) = validate_keys(std::slice::from_ref(&vv), &vv, &vk);
        let d_idx = find_element(&dest, &lk, &lv);
        let p_idx = patch.as_deref().and_then(|p| find_element(p, &lk, &lv));
        let p_elem = p_idx.and_then(|i| patch.as_ref().map(|p| p[i].clone()));
        // kyaml elides an element's directive from the patch node itself, so a later walk of
        // the same element (duplicate key tuples) no longer sees it.
        if let (Some(i), Some(p)) = (p_idx, patch.as_mut())
            && let Some(Value::Object(m)) = p.get_mut(i)
            && m.get(DIRECTIVE)
                .and_then(Value::as_str)
                .is_some_and(|d| matches!(d, "delete" | "replace" | "merge"))
        {
            m.shift_remove(DIRECTIVE);
        }
        let d_elem = d_idx.map(|i| dest[i].clone());
        path.push(format!("[{}]", vv.join(",")));
        let out = walk(d_elem, p_elem, elem_sch, ctx, path, same);
        path.pop();
        let mut val = match out? {
            Out::Clear => None,
            Out::Set(v, in_place) => {
                if in_place && let Some(i) = d_idx {
                    dest[i] = v.clone();
                }
                Some((v, in_place))
            }
        };
        let mut exit = false;
        for (i, key) in vk.iter().enumerate() {
            match &mut val {
                None => {
                    element_setter(&mut dest, None, &vk, &vv, path)?;
                    exit = true;
                }
                Some((v, _)) if is_empty_map(v) => {
                    element_setter(&mut dest, None, &vk, &vv, path)?;
                    exit = true;
                }
                Some((v, in_place)) => {
                    let value = vv.get(i).cloned().unwrap_or_default();
                    if let Value::Object(m) = v
                        && !key.is_empty()
                        && !m.contains_key(key)
                        && !value.is_empty()
                    {
                        m.insert(key.clone(), Value::String(value.clone()));
                        if *in_place
                            && let Some(Value::Object(dm)) = d_idx.and_then(|di| dest.get_mut(di))
                        {
                            dm.insert(key.clone(), Value::String(value));
                        }
                    }
                }
            }
        }
        if exit {
            continue;
        }
        element_setter(&mut items, val.map(|(v, _)| v), &vk, &vv, path)?;
    }
    if !values.is_empty() {
        append_list(&mut items, dest, &valid_keys, path)?;
    }
    Ok(items)
}

/// kyaml `appendListNode` (prepend direction): puts the target's elements back over the list
/// of merged elements.
fn append_list(
    dst: &mut Vec<Value>,
    src: Vec<Value>,
    keys: &[String],
    path: &[String],
) -> Result<(), PatchError> {
    let first_empty = keys.first().is_none_or(String::is_empty);
    for elem in src {
        if first_empty {
            let v = scalar_str(&elem);
            element_setter(dst, Some(elem), &[String::new()], &[v], path)?;
            continue;
        }
        let mut v = Vec::new();
        for key in keys {
            let Value::Object(m) = &elem else {
                return Err(PatchError::MergeKey {
                    path: path_str(path),
                    key: key.clone(),
                    reason: "list element is not a map".into(),
                });
            };
            match m.get(key) {
                None => dst.push(elem.clone()),
                Some(x) => v.push(scalar_str(x)),
            }
        }
        if keys.len() > 1 {
            element_setter(dst, None, keys, &v, path)?;
        }
        element_setter(dst, Some(elem), keys, &v, path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn key_tuples_match_like_kyaml() {
        assert_eq!(
            match_values(&v(&["80", ""]), &v(&["80", "TCP"])),
            Some(v(&["80", "TCP"]))
        );
        assert_eq!(match_values(&v(&["80", "UDP"]), &v(&["80", "TCP"])), None);
        assert_eq!(match_values(&v(&["80", ""]), &v(&["81", ""])), None);
        // Two empty values count as a shared value (kyaml quirk).
        assert_eq!(
            match_values(&v(&["", ""]), &v(&["80", ""])),
            Some(v(&["80", ""]))
        );
        let mut l = vec![v(&["80", ""]), v(&["80", "TCP"]), v(&["81", "UDP"])];
        merge_values(&mut l);
        assert_eq!(
            l,
            vec![v(&["80", "TCP"]), v(&["80", "TCP"]), v(&["81", "UDP"])]
        );
        let (k, vals) = validate_keys(
            &[v(&["80", ""])],
            &v(&["80", ""]),
            &v(&["port", "protocol"]),
        );
        assert_eq!((k, vals), (v(&["port"]), v(&["80"])));
    }
}
