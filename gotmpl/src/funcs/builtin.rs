//! Go's predefined template functions.

use super::ctx::{Ctx, FResult};
use crate::gofmt::{sprint, sprintln};
use crate::value::{IntKind, Value};

pub(super) fn and_or_unreachable(_: &mut Ctx, _: Vec<Value>) -> FResult {
    Err("internal error: special form called directly".into())
}

pub(super) fn not(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(!a[0].truth()))
}

pub(super) fn len(_: &mut Ctx, a: Vec<Value>) -> FResult {
    match &a[0] {
        Value::Nil | Value::Invalid => Err("len of nil pointer".into()),
        v => match v.len() {
            Some(n) => Ok(Value::int(n as i64)),
            None => Err(format!("len of type {}", v.type_name())),
        },
    }
}

pub(super) fn index(_: &mut Ctx, a: Vec<Value>) -> FResult {
    let mut item = a[0].clone();
    if matches!(item, Value::Nil | Value::Invalid) {
        return Err("index of untyped nil".into());
    }
    for idx in &a[1..] {
        let idx_int = |len: usize, what: &str| -> Result<usize, String> {
            let x = match idx {
                Value::Int(i, _) => *i,
                Value::Nil | Value::Invalid => {
                    return Err("cannot index slice/array with nil".into());
                }
                other => {
                    return Err(format!(
                        "cannot index slice/array with type {}",
                        other.type_name()
                    ));
                }
            };
            if x < 0 || x as u64 > len as u64 {
                return Err(format!("index out of range: {x}"));
            }
            if x as usize == len {
                return Err(format!("reflect: {what} index out of range"));
            }
            Ok(x as usize)
        };
        item = match &item {
            Value::List(l, ..) => l[idx_int(l.len(), "slice")?].clone(),
            Value::Str(s) => Value::Int(
                s.as_bytes()[idx_int(s.len(), "string")?] as i64,
                IntKind::Int,
            ),
            Value::Map(m, kind) => {
                let key = match idx {
                    Value::Str(k) => k.to_string(),
                    Value::Nil | Value::Invalid => {
                        return Err("value is nil; should be of type string".into());
                    }
                    other => {
                        return Err(format!(
                            "value has type {}; should be string",
                            other.type_name()
                        ));
                    }
                };
                match m.borrow().get(&key) {
                    Some(v) => v.clone(),
                    None if *kind == crate::value::MapKind::Str => Value::str(""),
                    None => Value::Nil,
                }
            }
            Value::Nil => return Err("index of nil pointer".into()),
            other => return Err(format!("can't index item of type {}", other.type_name())),
        };
    }
    Ok(item)
}

pub(super) fn print(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.string(sprint(&a))
}

pub(super) fn println(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.string(sprintln(&a))
}

pub(super) fn printf(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let Value::Str(fmt) = &a[0] else {
        return Err("format is not a string".into());
    };
    let s = crate::printf::sprintf(fmt, &a[1..], c.max_bytes)?;
    c.string(s)
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum BasicKind {
    Invalid,
    Bool,
    Int,
    Float,
    Str,
}

fn basic(v: &Value) -> BasicKind {
    match v {
        Value::Bool(_) => BasicKind::Bool,
        Value::Int(..) => BasicKind::Int,
        Value::Float(_) => BasicKind::Float,
        Value::Str(_) => BasicKind::Str,
        _ => BasicKind::Invalid,
    }
}

fn is_nilish(v: &Value) -> bool {
    matches!(v, Value::Nil | Value::Invalid)
}

fn eq2(a: &Value, b: &Value) -> Result<bool, String> {
    let (k1, k2) = (basic(a), basic(b));
    if k1 != k2 {
        if !is_nilish(a) && !is_nilish(b) {
            return Err(format!(
                "incompatible types for comparison: {} and {}",
                a.type_name(),
                b.type_name()
            ));
        }
        return Ok(false);
    }
    Ok(match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Int(x, _), Value::Int(y, _)) => x == y,
        (Value::Float(x), Value::Float(y)) => x == y,
        (Value::Str(x), Value::Str(y)) => x == y,
        _ => {
            if is_nilish(a) || is_nilish(b) {
                return Ok(is_nilish(a) == is_nilish(b));
            }
            if a.type_name() != b.type_name() {
                let args = [
                    a.clone(),
                    Value::str(a.type_name()),
                    Value::str(b.type_name()),
                    b.clone(),
                ];
                return Err(crate::printf::sprintf(
                    "non-comparable types %s: %v, %s: %v",
                    &args,
                    1 << 20,
                )?);
            }
            let args = [b.clone(), Value::str(b.type_name())];
            return Err(crate::printf::sprintf(
                "non-comparable type %s: %v",
                &args,
                1 << 20,
            )?);
        }
    })
}

pub(super) fn eq(_: &mut Ctx, a: Vec<Value>) -> FResult {
    if a.len() < 2 {
        return Err("missing argument for comparison".into());
    }
    for b in &a[1..] {
        if eq2(&a[0], b)? {
            return Ok(Value::Bool(true));
        }
    }
    Ok(Value::Bool(false))
}

pub(super) fn ne(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(!eq2(&a[0], &a[1])?))
}

fn lt2(a: &Value, b: &Value) -> Result<bool, String> {
    let (k1, k2) = (basic(a), basic(b));
    if k1 == BasicKind::Invalid || k2 == BasicKind::Invalid {
        return Err("invalid type for comparison".into());
    }
    if k1 != k2 {
        return Err(format!(
            "incompatible types for comparison: {} and {}",
            a.type_name(),
            b.type_name()
        ));
    }
    Ok(match (a, b) {
        (Value::Int(x, _), Value::Int(y, _)) => x < y,
        (Value::Float(x), Value::Float(y)) => x < y,
        (Value::Str(x), Value::Str(y)) => x.as_bytes() < y.as_bytes(),
        _ => return Err("invalid type for comparison".into()),
    })
}

pub(super) fn lt(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(lt2(&a[0], &a[1])?))
}

fn le2(a: &Value, b: &Value) -> Result<bool, String> {
    if lt2(a, b)? {
        return Ok(true);
    }
    eq2(a, b)
}

pub(super) fn le(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(le2(&a[0], &a[1])?))
}

pub(super) fn gt(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(!le2(&a[0], &a[1])?))
}

pub(super) fn ge(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(!lt2(&a[0], &a[1])?))
}

fn eval_args(a: &[Value]) -> String {
    if let [Value::Str(s)] = a {
        return s.to_string();
    }
    sprint(a)
}

pub(super) fn html(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let s = eval_args(&a);
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\0' => out.push('\u{FFFD}'),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    c.string(out)
}

pub(super) fn js(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let s = eval_args(&a);
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
            c if (c as u32) < 0x80 || crate::gofmt::is_print(c) => out.push(c),
            c => out.push_str(&format!("\\u{:04X}", c as u32)),
        }
    }
    c.string(out)
}

/// Go's `url.QueryEscape`.
pub(crate) fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

pub(super) fn urlquery(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let s = query_escape(&eval_args(&a));
    c.string(s)
}
