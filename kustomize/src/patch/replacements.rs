//! The `replacements:` transformer, with kustomize v5.5 semantics.
//!
//! Each replacement copies one value (the `source`) into fields of other resources (`targets`):
//! - `source`: `group`/`version`/`kind`/`name`/`namespace` select exactly one resource (exact
//!   match on any of its identities, current or earlier); `fieldPath` (default `metadata.name`)
//!   may hold `[key=value]` list selectors (exact) and list indices; `options.delimiter` +
//!   `options.index` take one part of a scalar.
//! - `targets[]`: `select` (required) and `reject` (identity fields exact, plus label and
//!   annotation selectors); `fieldPaths` (default `metadata.name`) with `[key=value]` (the value
//!   is an unanchored regular expression, as in kustomize), `[=value]` for scalar elements, `*`
//!   for every element, and list indices; `options.create` adds missing fields;
//!   `options.delimiter` + `options.index` replace one part of a scalar (negative index:
//!   prepend, past the end: append).
//! - a scalar target keeps its type (a string stays a string, a number must still parse as a
//!   number); a created scalar takes the type its text has in YAML; a map or list target is
//!   replaced by the source value.
//!
//! `path:` entries (replacements read from a file) must be expanded by the caller.

use regex::Regex;
use serde_json::{Map, Value};

use super::PatchError;
use super::list_elements::scalar_str;
use super::selector::Selector;
use crate::resource::{MAX_DEPTH, ResId, Resource, depth};
use crate::scope::effective_namespace;

/// Applies `replacements` (the parsed `replacements:` list) in order. Resources are identified
/// by their current identity and `original`.
pub fn apply(resources: &mut [Resource], replacements: &[Value]) -> Result<(), PatchError> {
    let ids: Vec<Vec<ResId>> = resources.iter().map(default_ids).collect();
    apply_with_ids(resources, &ids, replacements)
}

/// Like [`apply`], with every identity each resource has had (`ids[i]` for `resources[i]`;
/// its current identity is always added).
pub fn apply_with_ids(
    resources: &mut [Resource],
    ids: &[Vec<ResId>],
    replacements: &[Value],
) -> Result<(), PatchError> {
    for (index, r) in replacements.iter().enumerate() {
        let err = |reason: String| PatchError::Replacement { index, reason };
        let source = r.get("source").filter(|s| !s.is_null());
        let targets = r.get("targets").filter(|t| !t.is_null());
        let (Some(source), Some(targets)) = (source, targets) else {
            return Err(err(
                "replacements must specify a source and at least one target".into(),
            ));
        };
        let value = source_value(resources, ids, source).map_err(&err)?;
        let targets = targets
            .as_array()
            .ok_or_else(|| err("`targets` must be a list".into()))?;
        for t in targets {
            apply_target(resources, ids, &value, t).map_err(&err)?;
        }
    }
    Ok(())
}

fn default_ids(r: &Resource) -> Vec<ResId> {
    let cur = r.id();
    if cur == r.original {
        vec![cur]
    } else {
        vec![cur, r.original.clone()]
    }
}

fn all_ids(r: &Resource, extra: Option<&Vec<ResId>>) -> Vec<ResId> {
    let mut v = vec![r.id()];
    match extra {
        Some(e) if !e.is_empty() => v.extend(e.iter().cloned()),
        _ => {
            if r.original != v[0] {
                v.push(r.original.clone());
            }
        }
    }
    v
}

/// A selector's identity part (exact matching, kustomize `ResId.IsSelectedBy`).
#[derive(Debug, Default)]
struct IdSel {
    group: String,
    version: String,
    kind: String,
    name: String,
    namespace: String,
}

impl IdSel {
    fn from_value(v: &Value) -> IdSel {
        let s = |k: &str| v.get(k).map(scalar_str).unwrap_or_default();
        IdSel {
            group: s("group"),
            version: s("version"),
            kind: s("kind"),
            name: s("name"),
            namespace: s("namespace"),
        }
    }

    fn is_empty(&self) -> bool {
        self.group.is_empty()
            && self.version.is_empty()
            && self.kind.is_empty()
            && self.name.is_empty()
            && self.namespace.is_empty()
    }

    fn selects(&self, id: &ResId) -> bool {
        let ns_ok = self.namespace.is_empty() || {
            let sel_ns = if self.namespace == "default" {
                "default".to_string()
            } else {
                self.namespace.clone()
            };
            sel_ns == effective_namespace(id)
        };
        (self.name.is_empty() || self.name == id.name)
            && ns_ok
            && (self.group.is_empty() || self.group == id.group)
            && (self.version.is_empty() || self.version == id.version)
            && (self.kind.is_empty() || self.kind == id.kind)
    }

    fn describe(&self) -> String {
        format!(
            "{}.{}.{} {}/{}",
            self.kind,
            self.version,
            self.group,
            if self.namespace.is_empty() {
                "[noNs]"
            } else {
                &self.namespace
            },
            self.name
        )
    }
}

fn options(v: Option<&Value>) -> (String, i64, bool) {
    let Some(o) = v else {
        return (String::new(), 0, false);
    };
    let delimiter = o.get("delimiter").map(scalar_str).unwrap_or_default();
    let index = o.get("index").and_then(Value::as_i64).unwrap_or(0);
    let create = o.get("create").and_then(Value::as_bool).unwrap_or(false);
    (delimiter, index, create)
}

fn source_value(
    resources: &[Resource],
    ids: &[Vec<ResId>],
    source: &Value,
) -> Result<Value, String> {
    let sel = IdSel::from_value(source);
    let mut found: Option<usize> = None;
    for (i, r) in resources.iter().enumerate() {
        if all_ids(r, ids.get(i)).iter().any(|id| sel.selects(id)) {
            if found.is_some() {
                return Err(format!("multiple matches for selector {}", sel.describe()));
            }
            found = Some(i);
        }
    }
    let Some(i) = found else {
        return Err(format!("nothing selected by {}", sel.describe()));
    };
    let field_path = match source.get("fieldPath").map(scalar_str) {
        Some(p) if !p.is_empty() => p,
        _ => "metadata.name".to_string(),
    };
    let parts = split_field_path(&field_path);
    let v = lookup(&resources[i].obj, &parts)
        .map_err(|e| format!("error looking up replacement source: {e}"))?
        .filter(|v| !is_nil_or_empty(v))
        .ok_or_else(|| {
            format!(
                "fieldPath `{field_path}` is missing for replacement source {}",
                sel.describe()
            )
        })?;
    let (delimiter, index, _) = options(source.get("options"));
    if delimiter.is_empty() {
        return Ok(v.clone());
    }
    if v.is_object() || v.is_array() {
        return Err("delimiter option can only be used with scalar nodes".into());
    }
    let text = scalar_str(v);
    let parts: Vec<&str> = text.split(delimiter.as_str()).collect();
    let idx = usize::try_from(index).ok().filter(|i| *i < parts.len());
    let Some(idx) = idx else {
        return Err(format!(
            "options.index {index} is out of bounds for value {text}"
        ));
    };
    Ok(Value::String(parts[idx].to_string()))
}

/// Whether a value counts as missing for kustomize: null, `{}` or `[]` (an empty string is a
/// value).
fn is_nil_or_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn apply_target(
    resources: &mut [Resource],
    ids: &[Vec<ResId>],
    value: &Value,
    t: &Value,
) -> Result<(), String> {
    let select = t
        .get("select")
        .filter(|s| !s.is_null())
        .ok_or("target must specify resources to select")?;
    let select_id = IdSel::from_value(select);
    let select_meta = meta_selector(select)?;
    let mut rejects = Vec::new();
    for r in t
        .get("reject")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let meta = if r.get("labelSelector").is_some() || r.get("annotationSelector").is_some() {
            Some(meta_selector(r)?)
        } else {
            None
        };
        rejects.push((IdSel::from_value(r), meta));
    }
    let field_paths: Vec<String> = match t.get("fieldPaths").and_then(Value::as_array) {
        Some(a) if !a.is_empty() => a.iter().map(scalar_str).collect(),
        _ => vec!["metadata.name".to_string()],
    };
    let (delimiter, index, create) = options(t.get("options"));
    for (i, r) in resources.iter_mut().enumerate() {
        if !select_meta.matches(r) {
            continue;
        }
        if rejects
            .iter()
            .any(|(_, m)| m.as_ref().is_some_and(|m| m.matches(r)))
        {
            continue;
        }
        let rids = all_ids(r, ids.get(i));
        let rejected = rejects
            .iter()
            .any(|(id, _)| !id.is_empty() && rids.iter().any(|x| id.selects(x)));
        if rejected || !rids.iter().any(|x| select_id.selects(x)) {
            continue;
        }
        for fp in &field_paths {
            let parts = split_field_path(fp);
            if parts.len().saturating_add(depth(value)) > MAX_DEPTH {
                return Err(format!(
                    "field path {fp:?}: the value would be nested more than {MAX_DEPTH} deep"
                ));
            }
            let mut count = 0usize;
            let mut failure: Option<String> = None;
            let res = visit(&mut r.obj, &parts, create, value, &mut |node, created| {
                count += 1;
                if failure.is_none()
                    && let Err(e) = set_field_value(node, created, value, &delimiter, index)
                {
                    failure = Some(e);
                }
            });
            let what = if create {
                "unable to find or create field"
            } else {
                "unable to find field"
            };
            if let Err(e) = res {
                return Err(format!("{what} {fp:?} in replacement target: {e}"));
            }
            if let Some(e) = failure {
                return Err(e);
            }
            if count == 0 {
                return Err(format!("{what} {fp:?} in replacement target"));
            }
        }
    }
    Ok(())
}

/// The label/annotation part of a selector (identity fields are matched separately).
fn meta_selector(v: &Value) -> Result<Selector, String> {
    let s = |k: &str| v.get(k).map(scalar_str).filter(|s| !s.is_empty());
    Selector::new(
        None,
        None,
        None,
        None,
        None,
        s("labelSelector"),
        s("annotationSelector"),
    )
    .map_err(|e| e.to_string())
}

/// Splits a replacement field path on `.`: `\.` escapes a dot, and a `[...]` segment holding
/// `=` keeps its dots (as kustomize splits field paths).
pub(crate) fn split_field_path(path: &str) -> Vec<String> {
    let mut raw: Vec<String> = Vec::new();
    let mut pieces = path.split('.');
    if path.starts_with('.') && path.len() > 1 {
        pieces.next();
    }
    for p in pieces {
        match raw.last_mut() {
            Some(last) if last.ends_with('\\') => {
                last.pop();
                last.push('.');
                last.push_str(p);
            }
            _ => raw.push(p.to_string()),
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        let e = &raw[i];
        if e.starts_with('[') && !e.ends_with(']') {
            let mut group = vec![e.clone()];
            while i + 1 < raw.len() {
                i += 1;
                group.push(raw[i].clone());
                if raw[i].ends_with(']') {
                    break;
                }
            }
            let joined = group.join(".");
            if joined.contains('=') {
                out.push(joined);
            } else {
                out.push(joined.trim_matches(|c| c == '[' || c == ']').to_string());
            }
        } else {
            out.push(e.clone());
        }
        i += 1;
    }
    out
}

fn is_list_index(p: &str) -> bool {
    p.starts_with('[') && p.ends_with(']')
}

fn idx_number(p: &str) -> Option<usize> {
    p.parse::<i64>().ok().and_then(|i| usize::try_from(i).ok())
}

fn split_index(p: &str) -> Result<(String, String), String> {
    let inner = p.trim_start_matches('[').trim_end_matches(']');
    inner
        .split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| {
            "list path element must contain fieldName=fieldValue for element to match".to_string()
        })
}

/// Looks a source field up: fields, `[k=v]` (exact value, first match) and list indices.
fn lookup<'a>(node: &'a Value, parts: &[String]) -> Result<Option<&'a Value>, String> {
    let mut cur = node;
    for p in parts {
        if let Some(i) = idx_number(p).filter(|_| cur.is_array()) {
            match cur.as_array().and_then(|a| a.get(i)) {
                Some(v) => cur = v,
                None => return Ok(None),
            }
            continue;
        }
        if is_list_index(p) {
            let (k, v) = split_index(p)?;
            let Value::Array(items) = cur else {
                return Ok(None);
            };
            let found = items.iter().find(|e| {
                if k.is_empty() {
                    !e.is_object() && !e.is_array() && scalar_str(e) == v
                } else {
                    e.get(&k)
                        .is_some_and(|x| !x.is_object() && !x.is_array() && scalar_str(x) == v)
                }
            });
            match found {
                Some(e) => cur = e,
                None => return Ok(None),
            }
            continue;
        }
        match cur {
            Value::Object(m) => match m.get(p.as_str()) {
                Some(v) => cur = v,
                None => return Ok(None),
            },
            Value::Null => return Ok(None),
            _ => return Err(format!("cannot look up field {p:?} in a non-map value")),
        }
    }
    Ok(Some(cur))
}

fn kind_for_next(next: Option<&String>, value: &Value) -> Value {
    match next {
        Some(n) if is_list_index(n) || idx_number(n).is_some() => Value::Array(Vec::new()),
        Some(_) => Value::Object(Map::new()),
        None => match value {
            Value::Object(_) => Value::Object(Map::new()),
            Value::Array(_) => Value::Array(Vec::new()),
            _ => Value::Null,
        },
    }
}

/// Target lookup: calls `f(node, created)` for every node the path matches; with `create`
/// missing fields (and `[k=v]` elements) are added.
fn visit(
    node: &mut Value,
    parts: &[String],
    create: bool,
    value: &Value,
    f: &mut dyn FnMut(&mut Value, bool),
) -> Result<(), String> {
    visit_inner(node, parts, create, value, false, f)
}

fn visit_inner(
    node: &mut Value,
    parts: &[String],
    create: bool,
    value: &Value,
    created: bool,
    f: &mut dyn FnMut(&mut Value, bool),
) -> Result<(), String> {
    let Some((first, rest)) = parts.split_first() else {
        f(node, created);
        return Ok(());
    };
    if let Some(idx) = idx_number(first) {
        let Value::Array(items) = node else {
            return Err(format!("index {first} used on a non-list value"));
        };
        let mut new = false;
        if items.len() == idx && create {
            items.push(kind_for_next(rest.first(), value));
            new = true;
        }
        let len = items.len();
        let Some(elem) = items.get_mut(idx) else {
            return Err(format!(
                "index {idx} specified but only {len} elements found"
            ));
        };
        return visit_inner(elem, rest, create, value, new, f);
    }
    if is_list_index(first) {
        let (k, pattern) = split_index(first)?;
        let re = Regex::new(&pattern).map_err(|e| format!("invalid pattern {pattern:?}: {e}"))?;
        let Value::Array(items) = node else {
            return Err(format!("{first} used on a non-list value"));
        };
        let matching = |items: &Vec<Value>| -> Vec<usize> {
            (0..items.len())
                .filter(|&i| {
                    let e = &items[i];
                    if k.is_empty() {
                        !e.is_object() && !e.is_array() && re.is_match(scalar_str(e).trim())
                    } else {
                        e.get(&k)
                            .is_some_and(|x| !x.is_null() && re.is_match(scalar_str(x).trim()))
                    }
                })
                .collect()
        };
        let mut hits = matching(items);
        if hits.is_empty() && create {
            let elem = if k.is_empty() {
                Value::String(pattern.clone())
            } else {
                let mut m = Map::new();
                m.insert(k.clone(), Value::String(pattern.clone()));
                Value::Object(m)
            };
            items.push(elem);
            hits = matching(items);
        }
        for i in hits {
            if k.is_empty() {
                // kustomize ignores the rest of the path after a scalar element selector.
                f(&mut items[i], false);
            } else {
                visit_inner(&mut items[i], rest, create, value, false, f)?;
            }
        }
        return Ok(());
    }
    if first == "*" {
        let Value::Array(items) = node else {
            return Err("wildcard `*` used on a non-list value".into());
        };
        for item in items {
            visit_inner(item, rest, create, value, false, f)?;
        }
        return Ok(());
    }
    if node.is_null() && create {
        *node = Value::Object(Map::new());
    }
    let Value::Object(m) = node else {
        if node.is_null() {
            return Ok(());
        }
        return Err(format!("field {first:?} looked up in a non-map value"));
    };
    let mut new = false;
    if !m.contains_key(first.as_str()) {
        if !create {
            return Ok(());
        }
        m.insert(first.clone(), kind_for_next(rest.first(), value));
        new = true;
    }
    match m.get_mut(first.as_str()) {
        Some(child) => visit_inner(child, rest, create, value, new, f),
        None => Ok(()),
    }
}

/// The type a plain (untagged) YAML scalar with this text resolves to.
pub(crate) fn plain_scalar(text: &str) -> Value {
    match text {
        "" => return Value::String(String::new()),
        "null" | "Null" | "NULL" | "~" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Ok(i) = text.parse::<i64>() {
        return Value::from(i);
    }
    if let Ok(u) = text.parse::<u64>() {
        return Value::from(u);
    }
    let looks_float = text
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
        && text.chars().any(|c| c.is_ascii_digit());
    if looks_float
        && let Some(n) = text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
    {
        return Value::Number(n);
    }
    Value::String(text.to_string())
}

fn set_field_value(
    target: &mut Value,
    created: bool,
    value: &Value,
    delimiter: &str,
    index: i64,
) -> Result<(), String> {
    let target_scalar = !target.is_object() && !target.is_array();
    let mut text = if value.is_object() || value.is_array() {
        String::new()
    } else {
        scalar_str(value)
    };
    if !delimiter.is_empty() {
        if !target_scalar {
            return Err("delimiter option can only be used with scalar nodes".into());
        }
        let cur = scalar_str(target);
        let mut parts: Vec<String> = cur.split(delimiter).map(str::to_string).collect();
        match usize::try_from(index) {
            Err(_) => parts.insert(0, text.clone()),
            Ok(i) if i >= parts.len() => parts.push(text.clone()),
            Ok(i) => parts[i] = text.clone(),
        }
        text = parts.join(delimiter);
    }
    if !target_scalar {
        *target = if delimiter.is_empty() {
            value.clone()
        } else {
            Value::String(text)
        };
        return Ok(());
    }
    *target = match &*target {
        _ if created => plain_scalar(&text),
        Value::String(_) => Value::String(text),
        Value::Number(_) => match plain_scalar(&text) {
            Value::Number(n) => Value::Number(n),
            _ => return Err(format!("cannot set the number field to {text:?}")),
        },
        Value::Bool(_) => match plain_scalar(&text) {
            Value::Bool(b) => Value::Bool(b),
            _ => return Err(format!("cannot set the boolean field to {text:?}")),
        },
        _ => return Err(format!("cannot set the null field to {text:?}")),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn field_paths_split_like_kustomize() {
        let s = |p: &str| split_field_path(p);
        assert_eq!(s("a.b.c"), ["a", "b", "c"]);
        assert_eq!(
            s(r"metadata.annotations.a\.b/c"),
            ["metadata", "annotations", "a.b/c"]
        );
        assert_eq!(s("spec.[name=a.b].x"), ["spec", "[name=a.b]", "x"]);
        assert_eq!(s("data.[file.name]"), ["data", "file.name"]);
        assert_eq!(s(".a.b"), ["a", "b"]);
    }

    #[test]
    fn plain_scalars_resolve_like_yaml() {
        assert_eq!(plain_scalar("5"), json!(5));
        assert_eq!(plain_scalar("1.5"), json!(1.5));
        assert_eq!(plain_scalar("true"), json!(true));
        assert_eq!(plain_scalar("~"), Value::Null);
        assert_eq!(plain_scalar("app:1"), json!("app:1"));
        assert_eq!(plain_scalar(""), json!(""));
        assert_eq!(plain_scalar("1.2.3"), json!("1.2.3"));
    }

    #[test]
    fn visit_creates_missing_fields_and_elements() {
        let mut obj = json!({"spec": {"list": [{"name": "a"}]}});
        let mut seen = Vec::new();
        let parts = split_field_path("spec.list.[name=b].x.y");
        visit(&mut obj, &parts, true, &json!("v"), &mut |n, created| {
            seen.push(created);
            *n = json!("v");
        })
        .unwrap();
        assert_eq!(seen, [true]);
        assert_eq!(
            obj,
            json!({"spec": {"list": [{"name": "a"}, {"name": "b", "x": {"y": "v"}}]}})
        );
        let err = visit(
            &mut obj,
            &split_field_path("spec.list.9"),
            false,
            &json!(1),
            &mut |_, _| {},
        );
        assert!(err.is_err());
        let err = visit(
            &mut obj,
            &split_field_path("spec.list.[novalue]"),
            false,
            &json!(1),
            &mut |_, _| {},
        );
        assert!(err.is_err());
    }
}
