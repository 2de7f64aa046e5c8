//! Plain and tagged scalars resolved the way kustomize's loader does (go-yaml v3 decoding into
//! generic values, then JSON): `yes`/`on` stay strings, `0777` is octal, `1e3` is the number
//! 1000, integral floats become integers, dates become RFC 3339 strings.

use serde_json::{Number, Value};
use yaml_rust2::parser::Tag;
use yaml_rust2::scanner::TScalarStyle;

fn tag_name(tag: &Tag) -> Option<&str> {
    if tag.handle == "tag:yaml.org,2002:" || tag.handle == "!!" {
        Some(tag.suffix.as_str())
    } else if let Some(s) = tag.suffix.strip_prefix("tag:yaml.org,2002:") {
        Some(s)
    } else {
        None
    }
}

pub(super) fn scalar(
    text: String,
    style: TScalarStyle,
    tag: Option<&Tag>,
    yaml11: bool,
) -> std::result::Result<Value, String> {
    if let Some(name) = tag.and_then(tag_name) {
        return match name {
            "str" | "binary" | "timestamp" => Ok(Value::String(text)),
            "null" => Ok(Value::Null),
            "bool" | "int" | "float" => {
                let v = resolve_plain(&text);
                match (name, &v) {
                    ("bool", Value::Bool(_))
                    | ("int", Value::Number(_))
                    | ("float", Value::Number(_)) => Ok(v),
                    _ => Err(format!("cannot decode {text:?} as !!{name}")),
                }
            }
            _ => Ok(Value::String(text)),
        };
    }
    if style != TScalarStyle::Plain {
        return Ok(Value::String(text));
    }
    if yaml11 && let Some(b) = yaml11_bool(&text) {
        return Ok(Value::Bool(b));
    }
    Ok(resolve_plain(&text))
}

/// The YAML 1.1 booleans go-yaml v2 resolves besides `true` and `false`.
fn yaml11_bool(s: &str) -> Option<bool> {
    match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Some(true),
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

/// Resolves a plain scalar like go-yaml v3 decoding into an untyped value, then JSON.
pub fn resolve_plain(s: &str) -> Value {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    let first = s.as_bytes()[0];
    if !(first.is_ascii_digit() || first == b'-' || first == b'+' || first == b'.') {
        return Value::String(s.to_string());
    }
    if let Some(v) = resolve_number(s) {
        return v;
    }
    if let Some(ts) = resolve_timestamp(s) {
        return Value::String(ts);
    }
    Value::String(s.to_string())
}

/// Whether a plain scalar would be read as a timestamp.
pub fn looks_like_timestamp(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_digit()) && resolve_timestamp(s).is_some()
}

fn resolve_number(s: &str) -> Option<Value> {
    let plain: String = s.chars().filter(|c| *c != '_').collect();
    if let Some(i) = parse_go_int(&plain) {
        return Some(Value::Number(Number::from(i)));
    }
    if let Some(u) = parse_go_uint(&plain) {
        return Some(Value::Number(Number::from(u)));
    }
    if is_yaml_float(&plain) {
        let f: f64 = plain.parse().ok()?;
        return Some(float_value(f));
    }
    None
}

/// A float as it comes back from a JSON round trip: integral values become integers.
pub fn float_value(f: f64) -> Value {
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 {
        // exact in i64
        #[allow(clippy::cast_possible_truncation)]
        return Value::Number(Number::from(f as i64));
    }
    Number::from_f64(f)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

fn split_sign(s: &str) -> (bool, &str) {
    if let Some(r) = s.strip_prefix('-') {
        (true, r)
    } else if let Some(r) = s.strip_prefix('+') {
        (false, r)
    } else {
        (false, s)
    }
}

fn digits_radix(s: &str) -> Option<(u32, &str)> {
    let lower = s.get(..2).map(str::to_ascii_lowercase);
    match lower.as_deref() {
        Some("0x") => Some((16, &s[2..])),
        Some("0o") => Some((8, &s[2..])),
        Some("0b") => Some((2, &s[2..])),
        _ if s.len() > 1 && s.starts_with('0') => Some((8, &s[1..])),
        _ => Some((10, s)),
    }
}

fn parse_go_int(s: &str) -> Option<i64> {
    let (neg, rest) = split_sign(s);
    let (radix, digits) = digits_radix(rest)?;
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let mag = u128::from_str_radix(digits, radix).ok()?;
    let v = if neg {
        -(i128::try_from(mag).ok()?)
    } else {
        i128::try_from(mag).ok()?
    };
    i64::try_from(v).ok()
}

fn parse_go_uint(s: &str) -> Option<u64> {
    let (radix, digits) = digits_radix(s)?;
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

fn is_yaml_float(s: &str) -> bool {
    // [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = i - int_start;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let frac_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if int_digits == 0 && i == frac_start {
            return false;
        }
    } else if int_digits == 0 {
        return false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            i += 1;
        }
        let exp_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == exp_start {
            return false;
        }
    }
    i == b.len()
}

/// `2006-1-2` style dates (optionally with a time) become RFC 3339 strings, like a Go
/// `time.Time` marshalled to JSON.
fn resolve_timestamp(s: &str) -> Option<String> {
    let (date, rest) = match s.find(['T', 't', ' ']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mut parts = date.split('-');
    let y = parts.next()?;
    let m = parts.next()?;
    let d = parts.next()?;
    if parts.next().is_some()
        || y.len() != 4
        || m.is_empty()
        || m.len() > 2
        || d.is_empty()
        || d.len() > 2
    {
        return None;
    }
    if ![y, m, d]
        .iter()
        .all(|p| p.chars().all(|c| c.is_ascii_digit()))
    {
        return None;
    }
    let (mi, di): (u32, u32) = (m.parse().ok()?, d.parse().ok()?);
    if !(1..=12).contains(&mi) || !(1..=31).contains(&di) {
        return None;
    }
    let day = format!("{y}-{mi:02}-{di:02}");
    match rest {
        None => Some(format!("{day}T00:00:00Z")),
        Some(t) => {
            // Only the common UTC form is normalised; other forms stay as written.
            let t = t.trim();
            let hms = t.strip_suffix('Z')?;
            let mut hp = hms.split(':');
            let (h, mi2, se) = (hp.next()?, hp.next()?, hp.next()?);
            if hp.next().is_some() {
                return None;
            }
            let (sec, frac) = se.split_once('.').unwrap_or((se, ""));
            let h: u32 = h.parse().ok()?;
            let mi2: u32 = mi2.parse().ok()?;
            let sec: u32 = sec.parse().ok()?;
            let frac = frac.trim_end_matches('0');
            if frac.chars().any(|c| !c.is_ascii_digit()) {
                return None;
            }
            let frac = if frac.is_empty() {
                String::new()
            } else {
                format!(".{frac}")
            };
            Some(format!("{day}T{h:02}:{mi2:02}:{sec:02}{frac}Z"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolves_like_kustomize() {
        assert_eq!(resolve_plain("yes"), json!("yes"));
        assert_eq!(resolve_plain("on"), json!("on"));
        assert_eq!(resolve_plain("0777"), json!(511));
        assert_eq!(resolve_plain("1e3"), json!(1000));
        assert_eq!(resolve_plain("~"), Value::Null);
        assert_eq!(resolve_plain("0x1F"), json!(31));
        assert_eq!(resolve_plain("0o17"), json!(15));
        assert_eq!(resolve_plain("1_000"), json!(1000));
        assert_eq!(resolve_plain("True"), json!(true));
        assert_eq!(resolve_plain("012345678"), json!(12345678));
        assert_eq!(resolve_plain("2020-01-01"), json!("2020-01-01T00:00:00Z"));
        assert_eq!(resolve_plain("1.0"), json!(1));
        assert_eq!(resolve_plain("1.5"), json!(1.5));
        assert_eq!(resolve_plain("-0"), json!(0));
        assert_eq!(resolve_plain("="), json!("="));
        assert_eq!(resolve_plain("+12"), json!(12));
        assert_eq!(resolve_plain("1."), json!(1));
        assert_eq!(resolve_plain("1.2.3"), json!("1.2.3"));
        assert_eq!(resolve_plain("v1"), json!("v1"));
    }
}
