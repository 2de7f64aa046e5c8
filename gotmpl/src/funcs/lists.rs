//! sprig's list and dict functions. Go maps are references: `set`/`unset` mutate in place.

use super::ctx::{Ctx, FResult};
use super::strings::{i, s, strval};
use crate::value::{ListKind, ListRef, MapKind, Value, deep_equal};

const NIL_DEREF: &str = "runtime error: invalid memory address or nil pointer dereference";

fn nil_list() -> Value {
    Value::list_of(Vec::new(), ListKind::Any, true)
}

/// The elements of a list argument, or sprig's error for other kinds (`what` is the verb).
fn elems(v: &Value, what: &str) -> Result<ListRef, String> {
    match v {
        Value::List(l, ..) => Ok(l.clone()),
        Value::Nil | Value::Invalid => Err(NIL_DEREF.into()),
        other => Err(format!("Cannot {what} type {}", other.kind_name())),
    }
}

pub(super) fn list(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.charge(a.len() as u64)?;
    Ok(Value::list(a))
}

pub(super) fn dict(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.charge(a.len() as u64)?;
    let mut m = std::collections::BTreeMap::new();
    let mut it = a.into_iter();
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| Value::str(""));
        m.insert(strval(&k), v);
    }
    Ok(Value::map(m))
}

pub(super) fn get(_: &mut Ctx, a: Vec<Value>) -> FResult {
    if let Value::Map(m, _) = &a[0]
        && let Some(v) = m.borrow().get(s(&a[1]))
    {
        return Ok(v.clone());
    }
    Ok(Value::str(""))
}

pub(super) fn set(_: &mut Ctx, a: Vec<Value>) -> FResult {
    let Value::Map(m, _) = &a[0] else {
        return Err("assignment to entry in nil map".into());
    };
    m.borrow_mut().insert(s(&a[1]).to_string(), a[2].clone());
    Ok(a[0].clone())
}

pub(super) fn unset(_: &mut Ctx, a: Vec<Value>) -> FResult {
    if let Value::Map(m, _) = &a[0] {
        m.borrow_mut().remove(s(&a[1]));
    }
    Ok(a[0].clone())
}

pub(super) fn has_key(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(
        matches!(&a[0], Value::Map(m, _) if m.borrow().contains_key(s(&a[1]))),
    ))
}

pub(super) fn pluck(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let key = s(&a[0]);
    let mut out = Vec::new();
    for d in &a[1..] {
        if let Value::Map(m, _) = d
            && let Some(v) = m.borrow().get(key)
        {
            out.push(v.clone());
        }
    }
    c.charge(out.len() as u64)?;
    Ok(Value::list(out))
}

/// Go iterates maps in random order; we use sorted order (deterministic, one of Go's outcomes).
pub(super) fn keys(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let mut out = Vec::new();
    for d in &a {
        if let Value::Map(m, _) = d {
            out.extend(m.borrow().keys().cloned());
        }
    }
    c.charge(out.len() as u64)?;
    Ok(Value::str_list(out))
}

pub(super) fn values(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let out: Vec<Value> = match &a[0] {
        Value::Map(m, _) => m.borrow().values().cloned().collect(),
        _ => Vec::new(),
    };
    c.charge(out.len() as u64)?;
    Ok(Value::list(out))
}

pub(super) fn pick(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let mut out = std::collections::BTreeMap::new();
    if let Value::Map(m, _) = &a[0] {
        let m = m.borrow();
        for k in &a[1..] {
            if let Some(v) = m.get(s(k)) {
                out.insert(s(k).to_string(), v.clone());
            }
        }
    }
    c.charge(out.len() as u64)?;
    Ok(Value::map(out))
}

pub(super) fn omit(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let mut out = std::collections::BTreeMap::new();
    if let Value::Map(m, _) = &a[0] {
        for (k, v) in m.borrow().iter() {
            if !a[1..].iter().any(|o| s(o) == k) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    c.charge(out.len() as u64)?;
    Ok(Value::map(out))
}

fn iface_conv(v: &Value, want: &str) -> String {
    let t = if matches!(v, Value::Nil | Value::Invalid) {
        "nil"
    } else {
        v.type_name()
    };
    format!("interface conversion: interface {{}} is {t}, not {want}")
}

pub(super) fn dig(c: &mut Ctx, a: Vec<Value>) -> FResult {
    if a.len() < 3 {
        return Err("dig needs at least three arguments".into());
    }
    let last = &a[a.len() - 1];
    let Value::Map(mut cur, MapKind::Any) = last.clone() else {
        return Err(iface_conv(last, "map[string]interface {}"));
    };
    let default = a[a.len() - 2].clone();
    let mut ks = Vec::new();
    for k in &a[..a.len() - 2] {
        match k {
            Value::Str(k) => ks.push(k.to_string()),
            other => return Err(iface_conv(other, "string")),
        }
    }
    for (n, k) in ks.iter().enumerate() {
        c.charge(1)?;
        let step = match cur.borrow().get(k) {
            None => return Ok(default),
            Some(v) => v.clone(),
        };
        if n == ks.len() - 1 {
            return Ok(step);
        }
        match step {
            Value::Map(m, MapKind::Any) => cur = m,
            other => return Err(iface_conv(&other, "map[string]interface {}")),
        }
    }
    Ok(default)
}

pub(super) fn push(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let l = elems(&a[0], "push on")?;
    c.charge(l.len() as u64 + 1)?;
    let mut v = l.to_vec();
    v.push(a[1].clone());
    Ok(Value::list(v))
}

pub(super) fn must_push(c: &mut Ctx, a: Vec<Value>) -> FResult {
    push(c, a)
}

pub(super) fn prepend(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let l = elems(&a[0], "prepend on")?;
    c.charge(l.len() as u64 + 1)?;
    let mut v = vec![a[1].clone()];
    v.extend(l.iter().cloned());
    Ok(Value::list(v))
}

pub(super) fn must_prepend(c: &mut Ctx, a: Vec<Value>) -> FResult {
    prepend(c, a)
}

pub(super) fn first(_: &mut Ctx, a: Vec<Value>) -> FResult {
    let l = elems(&a[0], "find first on")?;
    Ok(l.first().cloned().unwrap_or(Value::Nil))
}

pub(super) fn must_first(c: &mut Ctx, a: Vec<Value>) -> FResult {
    first(c, a)
}

pub(super) fn last(_: &mut Ctx, a: Vec<Value>) -> FResult {
    let l = elems(&a[0], "find last on")?;
    Ok(l.last().cloned().unwrap_or(Value::Nil))
}

pub(super) fn must_last(c: &mut Ctx, a: Vec<Value>) -> FResult {
    last(c, a)
}

pub(super) fn rest(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let l = elems(&a[0], "find rest on")?;
    if l.is_empty() {
        return Ok(nil_list());
    }
    c.charge(l.len() as u64)?;
    Ok(Value::list(l[1..].to_vec()))
}

pub(super) fn must_rest(c: &mut Ctx, a: Vec<Value>) -> FResult {
    rest(c, a)
}

pub(super) fn initial(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let l = elems(&a[0], "find initial on")?;
    if l.is_empty() {
        return Ok(nil_list());
    }
    c.charge(l.len() as u64)?;
    Ok(Value::list(l[..l.len() - 1].to_vec()))
}

pub(super) fn must_initial(c: &mut Ctx, a: Vec<Value>) -> FResult {
    initial(c, a)
}

pub(super) fn reverse(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let l = elems(&a[0], "find reverse on")?;
    c.charge(l.len() as u64)?;
    Ok(Value::list(l.iter().rev().cloned().collect()))
}

pub(super) fn must_reverse(c: &mut Ctx, a: Vec<Value>) -> FResult {
    reverse(c, a)
}

pub(super) fn compact(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let l = elems(&a[0], "compact on")?;
    c.charge(l.len() as u64)?;
    Ok(Value::list(
        l.iter().filter(|v| !v.empty()).cloned().collect(),
    ))
}

pub(super) fn must_compact(c: &mut Ctx, a: Vec<Value>) -> FResult {
    compact(c, a)
}

fn in_list(hay: &[Value], needle: &Value) -> bool {
    hay.iter().any(|h| deep_equal(needle, h, 0))
}

pub(super) fn uniq(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let l = elems(&a[0], "find uniq on")?;
    c.charge((l.len() as u64).saturating_mul(l.len() as u64) / 16 + l.len() as u64)?;
    let mut out: Vec<Value> = Vec::new();
    for v in l.iter() {
        if !in_list(&out, v) {
            out.push(v.clone());
        }
    }
    Ok(Value::list(out))
}

pub(super) fn must_uniq(c: &mut Ctx, a: Vec<Value>) -> FResult {
    uniq(c, a)
}

pub(super) fn without(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let l = elems(&a[0], "find without on")?;
    c.charge((l.len() as u64).saturating_mul(a.len() as u64))?;
    Ok(Value::list(
        l.iter().filter(|v| !in_list(&a[1..], v)).cloned().collect(),
    ))
}

pub(super) fn must_without(c: &mut Ctx, a: Vec<Value>) -> FResult {
    without(c, a)
}

pub(super) fn has(c: &mut Ctx, a: Vec<Value>) -> FResult {
    if matches!(a[1], Value::Nil | Value::Invalid) {
        return Ok(Value::Bool(false));
    }
    let l = elems(&a[1], "find has on")?;
    c.charge(l.len() as u64)?;
    Ok(Value::Bool(in_list(&l, &a[0])))
}

pub(super) fn must_has(c: &mut Ctx, a: Vec<Value>) -> FResult {
    has(c, a)
}

pub(super) fn slice(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let (l, kind) = match &a[0] {
        Value::List(l, k, _) => (l.clone(), *k),
        Value::Nil | Value::Invalid => return Err(NIL_DEREF.into()),
        other => {
            return Err(format!(
                "list should be type of slice or array but {}",
                other.kind_name()
            ));
        }
    };
    if l.is_empty() {
        return Ok(Value::Nil);
    }
    let to_int = |v: &Value| super::numbers::to_i64(v);
    let start = a.get(1).map(to_int).unwrap_or(0);
    let end = if a.len() < 3 {
        l.len() as i64
    } else {
        to_int(&a[2])
    };
    if start < 0 || end < start || end > l.len() as i64 {
        return Err("reflect.Value.Slice: slice index out of bounds".into());
    }
    c.charge((end - start) as u64)?;
    Ok(Value::list_of(
        l[start as usize..end as usize].to_vec(),
        kind,
        false,
    ))
}

pub(super) fn must_slice(c: &mut Ctx, a: Vec<Value>) -> FResult {
    slice(c, a)
}

pub(super) fn concat(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let mut out = Vec::new();
    for l in &a {
        match l {
            Value::List(l, ..) => {
                c.charge(l.len() as u64)?;
                out.extend(l.iter().cloned());
            }
            Value::Nil | Value::Invalid => return Err(NIL_DEREF.into()),
            other => return Err(format!("Cannot concat type {} as list", other.kind_name())),
        }
    }
    if out.is_empty() {
        return Ok(nil_list());
    }
    Ok(Value::list(out))
}

pub(super) fn chunk(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let size = i(&a[0]);
    let l = elems(&a[1], "chunk")?;
    if l.is_empty() {
        return Ok(Value::list_of(Vec::new(), ListKind::Nested, false));
    }
    if size <= 0 {
        return Err("runtime error: makeslice: len out of range".into());
    }
    c.charge(l.len() as u64)?;
    let chunks: Vec<Value> = l
        .chunks(size as usize)
        .map(|ch| Value::list(ch.to_vec()))
        .collect();
    Ok(Value::list_of(chunks, ListKind::Nested, false))
}

pub(super) fn must_chunk(c: &mut Ctx, a: Vec<Value>) -> FResult {
    chunk(c, a)
}
