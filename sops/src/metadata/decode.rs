//! mapstructure-style weak decoding of the `sops` block: Go-map views of tree maps and
//! string/int/bool/list fields that accept the conversions sops accepts.

use std::collections::HashMap;

use crate::cipher::gofmt;
use crate::error::SopsError;
use crate::tree::{Entry, Value};

/// A map's fields as a Go map sees them: comments dropped, a later duplicate winning.
pub(super) struct Fields<'a> {
    pub(super) entries: Vec<(&'a str, &'a Value)>,
}

impl<'a> Fields<'a> {
    pub(super) fn of(entries: &'a [Entry]) -> Fields<'a> {
        let mut out: Vec<(&'a str, &'a Value)> = Vec::new();
        let mut seen: HashMap<&'a str, usize> = HashMap::new();
        for e in entries {
            if let Entry::Pair(k, v) = e {
                if let Some(slot) = seen.get(k.as_str()).and_then(|&i| out.get_mut(i)) {
                    slot.1 = v;
                } else {
                    seen.insert(k.as_str(), out.len());
                    out.push((k.as_str(), v));
                }
            }
        }
        Fields { entries: out }
    }

    /// The field `name`: exact match, else the first case-insensitive one.
    pub(super) fn get(&self, name: &str) -> Option<&'a Value> {
        self.entries
            .iter()
            .find(|(k, _)| *k == name)
            .or_else(|| self.entries.iter().find(|(k, _)| fold_eq(k, name)))
            .map(|(_, v)| *v)
    }
}

fn fold_eq(a: &str, b: &str) -> bool {
    a.chars()
        .flat_map(char::to_lowercase)
        .eq(b.chars().flat_map(char::to_lowercase))
}

pub(super) fn expected_map(ctx: &str, got: &Value) -> SopsError {
    SopsError::Metadata(format!(
        "error decoding sops metadata: '{ctx}' expected a map, got '{}'",
        kind_name(got)
    ))
}

/// Go's reflect kind names, as mapstructure prints them.
fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "invalid",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int",
        Value::Float(_) => "float64",
        Value::Str(_) => "string",
        Value::Time(_) | Value::Comment(_) | Value::LineComment(_) => "struct",
        Value::Bytes(_) | Value::List(_) => "slice",
        Value::Map(_) => "map",
    }
}

/// A struct's fields from a value: a map, or nothing for null (all fields zero).
pub(super) fn struct_fields<'a>(v: &'a Value, ctx: &str) -> Result<Fields<'a>, SopsError> {
    match v {
        Value::Map(entries) => Ok(Fields::of(entries)),
        Value::Null => Ok(Fields {
            entries: Vec::new(),
        }),
        other => Err(expected_map(ctx, other)),
    }
}

/// A list field: a list (comments dropped), nothing for null or an empty map, and any
/// other single value lifted into a one-element list (mapstructure's weak typing).
pub(super) fn weak_list(v: Option<&Value>) -> Vec<&Value> {
    match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::List(items)) => items
            .iter()
            .filter(|i| !matches!(i, Value::Comment(_) | Value::LineComment(_)))
            .collect(),
        Some(Value::Map(entries)) if entries.iter().all(|e| !matches!(e, Entry::Pair(..))) => {
            Vec::new()
        }
        Some(other) => vec![other],
    }
}

pub(super) fn weak_string(v: Option<&Value>, ctx: &str) -> Result<String, SopsError> {
    Ok(match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::Str(s)) => s.clone(),
        Some(Value::Bool(b)) => if *b { "1" } else { "0" }.to_string(),
        Some(Value::Int(i)) => i.to_string(),
        Some(Value::Float(f)) => gofmt::float_f(*f),
        Some(Value::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(other) => {
            return Err(SopsError::Metadata(format!(
                "error decoding sops metadata: '{ctx}' expected type 'string', got unconvertible type '{}'",
                kind_name(other)
            )));
        }
    })
}

pub(super) fn weak_int(v: Option<&Value>, ctx: &str) -> Result<i64, SopsError> {
    let bad = || {
        SopsError::Metadata(format!(
            "error decoding sops metadata: cannot parse '{ctx}' as int"
        ))
    };
    Ok(match v {
        None | Some(Value::Null) => 0,
        Some(Value::Int(i)) => *i,
        // Go's int(f): truncation; out-of-range values are refused here.
        Some(Value::Float(f)) if f.is_finite() && f.abs() < 9.2e18 => f.trunc() as i64,
        Some(Value::Bool(b)) => i64::from(*b),
        Some(Value::Str(s)) if s.is_empty() => 0,
        Some(Value::Str(s)) => gofmt::parse_int_base0(s).ok_or_else(bad)?,
        Some(_) => return Err(bad()),
    })
}

pub(super) fn weak_bool(v: Option<&Value>, ctx: &str) -> Result<bool, SopsError> {
    let bad = || {
        SopsError::Metadata(format!(
            "error decoding sops metadata: cannot parse '{ctx}' as bool"
        ))
    };
    Ok(match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Int(i)) => *i != 0,
        Some(Value::Float(f)) => *f != 0.0,
        Some(Value::Str(s)) if s.is_empty() => false,
        Some(Value::Str(s)) => gofmt::parse_bool(s).ok_or_else(bad)?,
        Some(_) => return Err(bad()),
    })
}
