//! sprig's defaults, JSON, reflection, path and URL functions, and Flux Operator's YAML ones.

use super::ctx::{Ctx, FResult};
use super::strings::{s, strval};
use crate::value::Value;

pub(crate) fn str_arg(v: &Value) -> String {
    s(v).to_string()
}

pub(super) fn default(_: &mut Ctx, a: Vec<Value>) -> FResult {
    // `given` is the variadic slice: empty(given) is true only when there is none.
    if a.len() < 2 || a[1].empty() {
        return Ok(a[0].clone());
    }
    Ok(a[1].clone())
}

pub(super) fn empty(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(a[0].empty()))
}

pub(super) fn coalesce(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(a.iter().find(|v| !v.empty()).cloned().unwrap_or(Value::Nil))
}

pub(super) fn all(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(a.iter().all(|v| !v.empty())))
}

pub(super) fn any(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(a.iter().any(|v| !v.empty())))
}

pub(super) fn ternary(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(if matches!(a[2], Value::Bool(true)) {
        a[0].clone()
    } else {
        a[1].clone()
    })
}

pub(super) fn from_json(c: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(must_from_json(c, a).unwrap_or(Value::Nil))
}

pub(super) fn must_from_json(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.produce(s(&a[0]).len())?;
    crate::json::decode(s(&a[0]))
}

pub(super) fn to_json(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = crate::json::encode(&a[0], true, None).unwrap_or_default();
    c.string(r)
}

pub(super) fn must_to_json(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = crate::json::encode(&a[0], true, None)?;
    c.string(r)
}

pub(super) fn to_pretty_json(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = crate::json::encode(&a[0], true, Some("  ")).unwrap_or_default();
    c.string(r)
}

pub(super) fn must_to_pretty_json(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = crate::json::encode(&a[0], true, Some("  "))?;
    c.string(r)
}

pub(super) fn to_raw_json(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = crate::json::encode(&a[0], false, None)?;
    c.string(r)
}

pub(super) fn to_yaml(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = crate::yaml::marshal(&a[0]).unwrap_or_default();
    c.string(r)
}

pub(super) fn must_to_yaml(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = crate::yaml::marshal(&a[0])?;
    c.string(r)
}

fn type_name(v: &Value) -> &'static str {
    v.type_name()
}

pub(super) fn type_of(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::str(type_name(&a[0])))
}

pub(super) fn type_is(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(s(&a[0]) == type_name(&a[1])))
}

pub(super) fn type_is_like(_: &mut Ctx, a: Vec<Value>) -> FResult {
    let t = type_name(&a[1]);
    Ok(Value::Bool(s(&a[0]) == t || format!("*{}", s(&a[0])) == t))
}

pub(super) fn kind_of(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::str(a[0].kind_name()))
}

pub(super) fn kind_is(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(s(&a[0]) == a[1].kind_name()))
}

pub(super) fn deep_equal(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(crate::value::deep_equal(&a[0], &a[1], 0)))
}

/// Go's `path.Clean`.
pub(crate) fn clean_path(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

pub(super) fn base(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let p = s(&a[0]);
    if p.is_empty() {
        return c.string(".".into());
    }
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        return c.string("/".into());
    }
    c.string(t.rsplit('/').next().unwrap_or(t).to_string())
}

pub(super) fn dir(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let p = s(&a[0]);
    let d = match p.rfind('/') {
        Some(i) => &p[..=i],
        None => "",
    };
    c.string(clean_path(d))
}

pub(super) fn clean(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.string(clean_path(s(&a[0])))
}

pub(super) fn ext(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let p = s(&a[0]);
    for (i, ch) in p.char_indices().rev() {
        if ch == '/' {
            break;
        }
        if ch == '.' {
            return c.string(p[i..].to_string());
        }
    }
    c.string(String::new())
}

pub(super) fn is_abs(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(s(&a[0]).starts_with('/')))
}

pub(super) fn url_parse(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let m = crate::urls::parse(s(&a[0])).map_err(|e| format!("unable to parse url: {e}"))?;
    c.charge(8)?;
    Ok(crate::value::map_of(
        m.into_iter()
            .map(|(k, v)| (k.to_string(), Value::str(v)))
            .collect(),
    ))
}

pub(super) fn url_join(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let get = |k: &str| -> Result<String, String> {
        let Value::Map(m, _) = &a[0] else {
            return Ok(String::new());
        };
        match m.borrow().get(k) {
            None => Ok(String::new()),
            Some(Value::Str(v)) => Ok(v.to_string()),
            Some(other) => Err(format!(
                "unable to parse {k} key, must be of type string, but {} found",
                if matches!(other, Value::Nil) {
                    "invalid".to_string()
                } else {
                    other.kind_name().to_string()
                }
            )),
        }
    };
    let parts = crate::urls::Parts {
        scheme: get("scheme")?,
        host: get("host")?,
        path: get("path")?,
        query: get("query")?,
        opaque: get("opaque")?,
        fragment: get("fragment")?,
        userinfo: get("userinfo")?,
    };
    let _ = strval;
    c.string(crate::urls::join(&parts))
}
