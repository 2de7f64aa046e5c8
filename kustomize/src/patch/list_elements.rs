//! Matching the elements of merge-keyed lists during a strategic merge: key tuples, finding,
//! replacing and removing elements by their key values, as kustomize does it.

use serde_json::Value;

use super::PatchError;

pub(crate) fn path_str(path: &[String]) -> String {
    if path.is_empty() {
        "<root>".to_string()
    } else {
        path.join(".")
    }
}

/// The text of a scalar as kustomize reads it (the empty string for null, maps and lists).
pub(crate) fn scalar_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

/// Whether a field value counts as missing: null, `{}` or `[]` (an empty string does not).
pub(crate) fn nil_or_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

pub(crate) fn is_empty_map(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// Two key tuples agree when they share a value and do not conflict.
pub(crate) fn match_values(a: &[String], b: &[String]) -> Option<Vec<String>> {
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

pub(crate) fn merge_values(list: &mut [Vec<String>]) {
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

/// Keeps the keys some tuple has a value for (and the values of those keys).
pub(crate) fn validate_keys(
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

/// The index of the first element whose keys have exactly these values
/// (an empty key means the list holds scalars).
pub(crate) fn find_element(list: &[Value], keys: &[String], values: &[String]) -> Option<usize> {
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

/// Whether an element's `key` field has `value` (any value when `value` is empty); an empty
/// key compares a scalar element itself.
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

/// Replaces (or, without `element`, removes) the elements matching
/// `keys`/`values`, appends `element` when none matched; drops null and empty-map elements.
pub(crate) fn element_setter(
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

/// Puts the target's elements back over the list of merged elements: each replaces the
/// element with the same key values, or is appended.
pub(crate) fn append_list(
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
    fn key_tuples_match_like_kustomize() {
        assert_eq!(
            match_values(&v(&["80", ""]), &v(&["80", "TCP"])),
            Some(v(&["80", "TCP"]))
        );
        assert_eq!(match_values(&v(&["80", "UDP"]), &v(&["80", "TCP"])), None);
        assert_eq!(match_values(&v(&["80", ""]), &v(&["81", ""])), None);
        // Two empty values count as a shared value (as kustomize counts them).
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
