//! Strategic merge patch with kustomize v5 semantics.
//!
//! What kustomize does, and therefore what this does (each rule checked with `kubectl kustomize`
//! v5.5.0):
//! - maps merge recursively; a `null` in the patch removes the key; a `null` already in the
//!   target survives (kustomize keeps `key: null` but drops the empty `key:` form, which parsed
//!   values cannot distinguish: known gap);
//! - a list is merged element by element only when the schema of the target's kind gives it a
//!   `merge` patch strategy; elements are matched on the merge keys (several keys, such as
//!   `containerPort,protocol`, follow kustomize's quirky rules, including dropping unmatched
//!   elements when only one side names the protocol); elements new in the patch come first;
//!   primitive lists with a merge strategy (`finalizers`) are unioned, patch values first;
//! - every other list (no strategy, unknown field, unknown kind) is replaced by the patch;
//! - `$patch: delete | replace | merge` on maps, on lists (as an element `{$patch: ...}`) and
//!   on list elements; `$patch: replace` on an element of a merge-keyed list that also exists in
//!   the target leaves the target element unchanged (a kustomize quirk, mirrored);
//! - `$setElementOrder/...`, `$retainKeys` and `$deleteFromPrimitiveList/...` are not
//!   understood by kustomize and are merged as ordinary fields;
//! - `$patch: delete` at the top level deletes the whole object ([`PatchOutcome::Deleted`]).
//!
//! The function does not restore `metadata.name`, `metadata.namespace` or `kind` after the
//! merge; kustomize does that unless the patch's `allowNameChange` / `allowKindChange` options
//! are set, so the caller should too.

use serde_json::{Map, Value};

use super::PatchError;
use super::list_elements::{
    append_list, element_setter, find_element, is_empty_map, merge_values, nil_or_empty, path_str,
    scalar_str, validate_keys,
};
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
    /// kustomize drops nulls written in the empty form (`key:`) and keeps spelled-out ones
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
    let mut merged = target.clone();
    let outcome = strategic_merge_consuming(&mut merged, patch, schema, options)?;
    if outcome == PatchOutcome::Patched {
        *target = merged;
    }
    Ok(outcome)
}

/// [`strategic_merge_with`] on the value itself rather than on a copy (the build patches
/// objects such as CRDs, hundreds of kilobytes each, and stops at a patch error): on error,
/// or when the patch deletes the object, `target` is left `null`.
pub fn strategic_merge_consuming(
    target: &mut Value,
    patch: &Value,
    schema: &Schema,
    options: &MergeOptions<'_>,
) -> Result<PatchOutcome, PatchError> {
    let sch = root_schema(schema, Some(&*target), Some(patch));
    let dest = std::mem::take(target);
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

fn walk(
    dest: Option<Value>,
    origin: Option<Value>,
    sch: Option<Cursor<'_>>,
    ctx: &Ctx<'_>,
    path: &mut Vec<String>,
    same: bool,
) -> Result<Out, PatchError> {
    // kustomize picks the schema of embedded objects (apiVersion + kind) when it has none yet.
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
        // Target and patch are one node in kustomize (a new or replaced subtree merged with
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
                // Errors are ignored here by kustomize; an unknown directive stays in the object.
                let d = map_directive(&mut o, path).unwrap_or(Directive::Merge);
                if d == Directive::Delete {
                    return Ok(Out::Clear);
                }
                (Value::Object(o), false)
            }
            // Patch null (or absent) over a missing field: nothing is added. A null already in
            // the target and untouched by the patch is kept: kustomize keeps nulls spelled out
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
    // The patch's map replaces the target's (or is new): kustomize then merges it with itself,
    // which applies nested directives and removes nulls.
    let copy = base.clone();
    base = merge_fields(base, Some(copy), sch, ctx, path, true)?;
    Ok(Out::Set(base, in_place))
}

/// Merges the fields of `origin` into the map `dest`, in sorted field order, as kustomize does.
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
    // kustomize removes every element whose `$patch` equals the directive value.
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
        // kustomize elides an element's directive from the patch node itself, so a later walk of
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
