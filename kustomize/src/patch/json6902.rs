//! RFC 6902 JSON patch, with the behaviour of the library kustomize uses (evanphx/json-patch v4):
//! `add` and `replace` need the parent to exist (`replace` of a missing map key sets it),
//! `remove` needs the target to exist, list indices
//! may be `-` (append, for `add`) or negative (counted from the end).

use serde_json::Value;

use super::PatchError;
use crate::resource::{MAX_DEPTH, depth};

/// Whether an entry of `patches:` is a JSON 6902 operation list (a sequence) rather than a
/// strategic merge patch (a map).
pub fn is_json6902(patch: &Value) -> bool {
    patch.is_array()
}

/// Applies the operations `ops` (a JSON array of `{op, path, value|from}` maps) to `target`.
/// On error `target` is left unchanged.
pub fn json6902(target: &mut Value, ops: &Value) -> Result<(), PatchError> {
    let list = ops.as_array().ok_or_else(|| PatchError::InvalidPatch {
        path: "<json6902>".into(),
        reason: "a JSON 6902 patch must be a list of operations".into(),
    })?;
    let mut doc = target.clone();
    for (index, op) in list.iter().enumerate() {
        apply_op(&mut doc, index, op)?;
    }
    *target = doc;
    Ok(())
}

fn apply_op(doc: &mut Value, index: usize, op: &Value) -> Result<(), PatchError> {
    let name = op
        .get("op")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let path = op.get("path").and_then(Value::as_str).map(str::to_string);
    let err = |path: &str, reason: String| PatchError::Json6902 {
        index,
        op: name.clone(),
        path: path.to_string(),
        reason,
    };
    if !op.is_object() {
        return Err(err("", "operation is not a map".into()));
    }
    let Some(path) = path else {
        return Err(err("", "missing `path`".into()));
    };
    let tokens = parse_pointer(&path).map_err(|r| err(&path, r))?;
    let value = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| err(&path, "missing `value`".into()))
    };
    // Every value placed in the document stays within the depth bound.
    let bounded = |v: Value| -> Result<Value, PatchError> {
        if tokens.len().saturating_add(depth(&v)) > MAX_DEPTH {
            return Err(err(
                &path,
                format!("the result would be nested more than {MAX_DEPTH} deep"),
            ));
        }
        Ok(v)
    };
    let from = || -> Result<(String, Vec<String>), PatchError> {
        let f = op
            .get("from")
            .and_then(Value::as_str)
            .ok_or_else(|| err(&path, "missing `from`".into()))?;
        let t = parse_pointer(f).map_err(|r| err(&path, r))?;
        Ok((f.to_string(), t))
    };
    match name.as_str() {
        "add" => add(doc, &tokens, bounded(value()?)?).map_err(|r| err(&path, r)),
        "remove" => remove(doc, &tokens).map(|_| ()).map_err(|r| err(&path, r)),
        "replace" => replace(doc, &tokens, bounded(value()?)?).map_err(|r| err(&path, r)),
        "move" => {
            let (f, ft) = from()?;
            let v = get(doc, &ft)
                .map(depth)
                .filter(|d| tokens.len().saturating_add(*d) > MAX_DEPTH);
            if v.is_some() {
                return Err(err(
                    &path,
                    format!("the result would be nested more than {MAX_DEPTH} deep"),
                ));
            }
            let v = remove(doc, &ft).map_err(|r| err(&path, format!("from {f}: {r}")))?;
            add(doc, &tokens, v).map_err(|r| err(&path, r))
        }
        "copy" => {
            let (f, ft) = from()?;
            let v = get(doc, &ft)
                .cloned()
                .ok_or_else(|| err(&path, format!("from {f}: path does not exist")))?;
            add(doc, &tokens, bounded(v)?).map_err(|r| err(&path, r))
        }
        "test" => {
            let want = op.get("value").cloned().unwrap_or(Value::Null);
            match get(doc, &tokens) {
                Some(v) if *v == want => Ok(()),
                None if want.is_null() => Ok(()),
                Some(v) => Err(err(
                    &path,
                    format!("test failed: value is {v}, expected {want}"),
                )),
                None => Err(err(&path, "test failed: path does not exist".into())),
            }
        }
        other => Err(err(&path, format!("unknown operation {other:?}"))),
    }
}

/// Splits an RFC 6901 pointer into unescaped tokens (`~1` is `/`, `~0` is `~`).
pub(crate) fn parse_pointer(p: &str) -> Result<Vec<String>, String> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Err(format!("JSON pointer {p:?} does not start with '/'"));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn get<'a>(doc: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get(t)?,
            Value::Array(a) => {
                let i = array_index(t, a.len(), false).ok()?;
                a.get(i)?
            }
            _ => return None,
        };
    }
    Some(cur)
}

fn parent<'a>(doc: &'a mut Value, tokens: &[String]) -> Result<(&'a mut Value, String), String> {
    let Some((last, init)) = tokens.split_last() else {
        return Err("the document root has no parent".into());
    };
    let mut cur = doc;
    for (i, t) in init.iter().enumerate() {
        let missing = || format!("missing path element {:?}", format_pointer(&tokens[..=i]));
        cur = match cur {
            Value::Object(m) => m.get_mut(t).ok_or_else(missing)?,
            Value::Array(a) => {
                let n = a.len();
                let idx = array_index(t, n, false)?;
                a.get_mut(idx).ok_or_else(missing)?
            }
            _ => return Err(missing()),
        };
    }
    Ok((cur, last.clone()))
}

fn format_pointer(tokens: &[String]) -> String {
    tokens
        .iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// An array index; `for_add` allows `len` itself (append position). A negative index counts
/// from the end: for `add` from the position after the last element (`-1` appends).
fn array_index(t: &str, len: usize, for_add: bool) -> Result<usize, String> {
    let i: i64 = t
        .parse()
        .map_err(|_| format!("invalid array index {t:?}"))?;
    let len_i = i64::try_from(len).map_err(|_| "array too long".to_string())?;
    let len_i = if for_add && i < 0 { len_i + 1 } else { len_i };
    let idx = if i < 0 {
        if i < -len_i {
            return Err(format!("array index {i} out of bounds (length {len})"));
        }
        i + len_i
    } else {
        i
    };
    let max = if for_add {
        i64::try_from(len).unwrap_or(i64::MAX)
    } else {
        len_i - 1
    };
    if idx > max {
        return Err(format!("array index {i} out of bounds (length {len})"));
    }
    usize::try_from(idx).map_err(|_| format!("invalid array index {t:?}"))
}

fn add(doc: &mut Value, tokens: &[String], v: Value) -> Result<(), String> {
    if tokens.is_empty() {
        *doc = v;
        return Ok(());
    }
    let (p, key) = parent(doc, tokens)?;
    match p {
        Value::Object(m) => {
            m.insert(key, v);
            Ok(())
        }
        Value::Array(a) => {
            let idx = if key == "-" {
                a.len()
            } else {
                array_index(&key, a.len(), true)?
            };
            a.insert(idx, v);
            Ok(())
        }
        _ => Err("parent is not a map or a list".into()),
    }
}

fn remove(doc: &mut Value, tokens: &[String]) -> Result<Value, String> {
    let (p, key) = parent(doc, tokens)?;
    match p {
        Value::Object(m) => m
            .shift_remove(&key)
            .ok_or_else(|| format!("cannot remove missing key {key:?}")),
        Value::Array(a) => {
            let idx = array_index(&key, a.len(), false)?;
            Ok(a.remove(idx))
        }
        _ => Err("parent is not a map or a list".into()),
    }
}

fn replace(doc: &mut Value, tokens: &[String], v: Value) -> Result<(), String> {
    if tokens.is_empty() {
        *doc = v;
        return Ok(());
    }
    let (p, key) = parent(doc, tokens)?;
    match p {
        // Like kustomize's JSON patch library, a missing key is simply set.
        Value::Object(m) => {
            m.insert(key, v);
            Ok(())
        }
        Value::Array(a) => {
            let idx = array_index(&key, a.len(), false)?;
            a[idx] = v;
            Ok(())
        }
        _ => Err("parent is not a map or a list".into()),
    }
}
