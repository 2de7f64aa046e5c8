//! Go's `encoding/json` for template values: sorted map keys, HTML-safe escaping by default,
//! Go's float format; and decoding into Go's `interface{}` shapes (numbers are float64).

use crate::gofmt::format_json_float;
use crate::value::Value;

fn escape_into(out: &mut String, s: &str, html: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' if html => out.push_str(&format!("\\u{:04x}", c as u32)),
            '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write(
    out: &mut String,
    v: &Value,
    html: bool,
    indent: Option<&str>,
    level: usize,
) -> Result<(), String> {
    if level > 1000 {
        return Err(
            "json: unsupported value: encountered a cycle or nesting deeper than 1000".into(),
        );
    }
    if out.len() > crate::gofmt::print_cap() {
        return Err("exceeded maximum output size".into());
    }
    let nl = |out: &mut String, lvl: usize| {
        if let Some(ind) = indent {
            out.push('\n');
            for _ in 0..lvl {
                out.push_str(ind);
            }
        }
    };
    match v {
        Value::Invalid | Value::Nil => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i, _) => out.push_str(&i.to_string()),
        Value::Float(f) => {
            if !f.is_finite() {
                return Err(format!(
                    "json: unsupported value: {}",
                    crate::gofmt::format_g(*f)
                ));
            }
            out.push_str(&format_json_float(*f));
        }
        Value::Str(s) => escape_into(out, s, html),
        Value::List(l, _, nil) => {
            if *nil {
                out.push_str("null");
                return Ok(());
            }
            out.push('[');
            for (i, e) in l.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                nl(out, level + 1);
                write(out, e, html, indent, level + 1)?;
            }
            if !l.is_empty() {
                nl(out, level);
            }
            out.push(']');
        }
        Value::Map(m, _) => {
            out.push('{');
            let m = m.borrow();
            for (i, (k, e)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                nl(out, level + 1);
                escape_into(out, k, html);
                out.push(':');
                if indent.is_some() {
                    out.push(' ');
                }
                write(out, e, html, indent, level + 1)?;
            }
            if !m.is_empty() {
                nl(out, level);
            }
            out.push('}');
        }
    }
    Ok(())
}

/// `json.Marshal` (`html` = escape `<>&`), or `json.MarshalIndent(v, "", indent)`.
pub(crate) fn encode(v: &Value, html: bool, indent: Option<&str>) -> Result<String, String> {
    let mut out = String::new();
    write(&mut out, v, html, indent, 0)?;
    Ok(out)
}

fn from_serde(v: serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(b),
        serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => Value::str(s),
        serde_json::Value::Array(a) => Value::list(a.into_iter().map(from_serde).collect()),
        serde_json::Value::Object(o) => {
            Value::map(o.into_iter().map(|(k, v)| (k, from_serde(v))).collect())
        }
    }
}

/// `json.Unmarshal` into `interface{}`.
pub(crate) fn decode(s: &str) -> Result<Value, String> {
    match serde_json::from_str::<serde_json::Value>(s) {
        Ok(v) => Ok(from_serde(v)),
        Err(e) if e.is_eof() => Err("unexpected end of JSON input".into()),
        Err(e) => Err(format!("invalid JSON: {e}")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_go() {
        let v = Value::from_json(&serde_json::json!({"b": [1, 2.5, null], "a": "<é>"}));
        assert_eq!(
            encode(&v, true, None).unwrap(),
            r#"{"a":"\u003cé\u003e","b":[1,2.5,null]}"#
        );
        assert_eq!(
            encode(&v, false, None).unwrap(),
            r#"{"a":"<é>","b":[1,2.5,null]}"#
        );
        assert_eq!(
            encode(&v, true, Some("  ")).unwrap(),
            "{\n  \"a\": \"\\u003cé\\u003e\",\n  \"b\": [\n    1,\n    2.5,\n    null\n  ]\n}"
        );
        assert!(encode(&Value::Float(f64::NAN), true, None).is_err());
    }

    #[test]
    fn decodes_numbers_as_floats() {
        let v = decode("[1, 2.5]").unwrap();
        assert_eq!(crate::gofmt::sprint_value(&v), "[1 2.5]");
        assert!(matches!(&v, Value::List(l, ..) if matches!(l[0], Value::Float(_))));
        assert_eq!(decode("{").unwrap_err(), "unexpected end of JSON input");
    }
}
