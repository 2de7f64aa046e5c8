//! The JSON store (reference §4, §10). Reading uses our own parser so that key order,
//! duplicate keys and int/float typing match sops (serde_json would merge duplicates and
//! type numbers differently). Writing reproduces Go's `encoding/json` bytes: tab
//! indentation, `"key": value`, `<`, `>`, `&` escaped, Go's float text, and a final newline.

mod parse;

use crate::cipher::gofmt;
use crate::error::SopsError;
use crate::stores::flatten;
use crate::tree::{Branch, Entry, Value};
use zeroize::Zeroizing;

/// Parses an encrypted JSON document: the root must be an object with a `sops` object.
pub fn load(bytes: &[u8]) -> Result<(Vec<Branch>, Value), SopsError> {
    let mut branches = vec![load_plain(bytes)?];
    let meta = flatten::take_nested_metadata(&mut branches)?;
    Ok((branches, meta))
}

/// Parses a JSON document into one branch (no metadata handling).
pub fn load_plain(bytes: &[u8]) -> Result<Branch, SopsError> {
    let mut p = parse::Parser::new(bytes);
    match p.top() {
        Ok(parse::TopLevel::Object(branch)) => Ok(branch),
        Ok(parse::TopLevel::Other(what)) => Err(SopsError::Load(format!(
            "Could not unmarshal input data: SOPS only supports JSON files with a top-level object (starting with '{{'), not {what}"
        ))),
        Err(e) => Err(SopsError::Load(format!(
            "Could not unmarshal input data: {} (at byte {})",
            e.what, e.offset
        ))),
    }
}

/// Emits the first branch as sops' JSON store does.
pub fn emit(branches: &[Branch]) -> Result<Zeroizing<Vec<u8>>, SopsError> {
    let branch = branches
        .first()
        .ok_or_else(|| SopsError::Emit("Error marshaling to json: no document".into()))?;
    let mut out = Zeroizing::new(Vec::with_capacity(256));
    write_map(&mut out, branch, 0)?;
    out.push(b'\n');
    Ok(out)
}

fn newline(out: &mut Vec<u8>, depth: usize) {
    out.push(b'\n');
    out.extend(std::iter::repeat_n(b'\t', depth));
}

fn write_map(out: &mut Vec<u8>, entries: &[Entry], depth: usize) -> Result<(), SopsError> {
    out.push(b'{');
    let mut empty = true;
    for e in entries {
        let Entry::Pair(k, v) = e else { continue };
        if !empty {
            out.push(b',');
        }
        newline(out, depth + 1);
        write_string(out, k.as_bytes());
        out.extend_from_slice(b": ");
        write_value(out, v, depth + 1)?;
        empty = false;
    }
    if !empty {
        newline(out, depth);
    }
    out.push(b'}');
    Ok(())
}

fn write_value(out: &mut Vec<u8>, v: &Value, depth: usize) -> Result<(), SopsError> {
    if depth > crate::walk::MAX_DEPTH + 1 {
        return Err(SopsError::Emit(
            "Error marshaling to json: nesting too deep".into(),
        ));
    }
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Value::Float(f) => {
            let text = gofmt::float_json(*f).ok_or_else(|| {
                SopsError::Emit(format!(
                    "Error marshaling to json: json: unsupported value: {}",
                    gofmt::float_f(*f)
                ))
            })?;
            out.extend_from_slice(text.as_bytes());
        }
        Value::Str(s) | Value::Time(s) => write_string(out, s.as_bytes()),
        Value::Bytes(b) => write_string(out, b),
        // A comment where a value belongs is marshalled as Go's struct.
        Value::Comment(c) | Value::LineComment(c) => {
            let as_struct = [
                Entry::Pair("Value".into(), Value::Str(c.clone())),
                Entry::Pair(
                    "Inline".into(),
                    Value::Bool(matches!(v, Value::LineComment(_))),
                ),
            ];
            write_map(out, &as_struct, depth)?;
        }
        Value::Map(entries) => write_map(out, entries, depth)?,
        Value::List(items) => {
            out.push(b'[');
            let mut empty = true;
            let items = items
                .iter()
                .filter(|i| !matches!(i, Value::Comment(_) | Value::LineComment(_)));
            for item in items {
                if !empty {
                    out.push(b',');
                }
                newline(out, depth + 1);
                write_value(out, item, depth + 1)?;
                empty = false;
            }
            if !empty {
                newline(out, depth);
            }
            out.push(b']');
        }
    }
    Ok(())
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A JSON string as Go's `json.Marshal` writes it (HTML-safe escaping, `\u2028`/`\u2029`
/// escaped, invalid UTF-8 as `\ufffd`).
pub(crate) fn write_string(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for chunk in s.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                '\u{8}' => out.extend_from_slice(b"\\b"),
                '\u{c}' => out.extend_from_slice(b"\\f"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\r' => out.extend_from_slice(b"\\r"),
                '\t' => out.extend_from_slice(b"\\t"),
                '\u{0}'..='\u{1f}' | '<' | '>' | '&' => {
                    let b = c as u8;
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(b >> 4)]);
                    out.push(HEX[usize::from(b & 0xf)]);
                }
                '\u{2028}' => out.extend_from_slice(b"\\u2028"),
                '\u{2029}' => out.extend_from_slice(b"\\u2029"),
                other => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        for _ in chunk.invalid() {
            out.extend_from_slice(b"\\ufffd");
        }
    }
    out.push(b'"');
}

/// A copy of `value` with every object's keys sorted (bytewise), as Go marshals a map.
pub fn sorted(value: &serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = serde_json::Map::with_capacity(map.len());
            for k in keys {
                if let Some(v) = map.get(k) {
                    out.insert(k.clone(), sorted(v));
                }
            }
            serde_json::Value::Object(out)
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(sorted).collect())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn round(input: &str) -> String {
        let b = load_plain(input.as_bytes()).unwrap();
        String::from_utf8(emit(&[b]).unwrap().to_vec()).unwrap()
    }

    #[test]
    fn emits_like_go() {
        assert_eq!(
            round(
                r#"{"a":"x<y>&\u2028\u0001\b","n":-0,"f":1.0,"g":1e21,"h":0.0000001,"l":[],"m":{},"z":[1,{"k":null}]}"#
            ),
            "{\n\t\"a\": \"x\\u003cy\\u003e\\u0026\\u2028\\u0001\\b\",\n\t\"n\": 0,\n\t\"f\": 1,\n\t\"g\": 1e+21,\n\t\"h\": 1e-7,\n\t\"l\": [],\n\t\"m\": {},\n\t\"z\": [\n\t\t1,\n\t\t{\n\t\t\t\"k\": null\n\t\t}\n\t]\n}\n"
        );
        assert_eq!(round("{}"), "{}\n");
    }

    #[test]
    fn keeps_duplicates_order_and_number_types() {
        let b = load_plain(br#"{"b":1,"a":2,"b":3.5,"big":9223372036854775808} trailing"#).unwrap();
        assert_eq!(
            b,
            vec![
                Entry::Pair("b".into(), Value::Int(1)),
                Entry::Pair("a".into(), Value::Int(2)),
                Entry::Pair("b".into(), Value::Float(3.5)),
                Entry::Pair("big".into(), Value::Float(9223372036854775808.0)),
            ]
        );
    }

    #[test]
    fn strings_like_go() {
        let b = load_plain(b"{\"s\":\"\\ud83d\\ude00 \\ud800x \xff\"}").unwrap();
        assert_eq!(
            b,
            vec![Entry::Pair(
                "s".into(),
                Value::Str("😀 \u{FFFD}x \u{FFFD}".into())
            )]
        );
    }

    #[test]
    fn refusals() {
        for bad in [
            "",
            "[1]",
            "{",
            "{\"a\" 1}",
            "{\"a\":1,}",
            "{\"a\":01}",
            "{\"a\":1e999}",
            "{\"a\":\"\n\"}",
            "{\"a\":tru}",
        ] {
            assert!(load_plain(bad.as_bytes()).is_err(), "{bad:?}");
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(300), "]".repeat(300));
        assert!(load_plain(deep.as_bytes()).is_err());
        assert!(matches!(load(b"{\"a\":1}"), Err(SopsError::NoMetadata)));
        assert!(matches!(
            load(b"{\"a\":1,\"sops\":{}}"),
            Err(SopsError::NoMetadata)
        ));
    }

    #[test]
    fn sorts_keys_recursively() {
        let v: serde_json::Value =
            serde_json::from_str(r#"{"b":{"z":1,"a":[{"y":1,"x":2}]},"a":0}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&sorted(&v)).unwrap(),
            r#"{"a":0,"b":{"a":[{"x":2,"y":1}],"z":1}}"#
        );
    }
}
