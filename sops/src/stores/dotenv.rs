//! The dotenv store (reference §4, §10): `KEY=value` and `#comment` lines; the `sops` block
//! is flattened into `sops_…=` lines of the same file.

use crate::cipher::gofmt;
use crate::cipher::gotime::GoTime;
use crate::error::SopsError;
use crate::stores::flatten;
use crate::tree::{Branch, Entry, Value};
use zeroize::Zeroizing;

/// Parses an encrypted dotenv document and its flattened `sops_` metadata.
pub fn load(bytes: &[u8]) -> Result<(Vec<Branch>, Value), SopsError> {
    let mut branches = vec![load_plain(bytes)?];
    let flat = flatten::take_prefixed_metadata(&mut branches);
    if flat.is_empty() {
        return Err(SopsError::NoMetadata);
    }
    Ok((branches, flatten::unflatten(flat)?))
}

/// Splits on `\n` only; empty lines are dropped; the key is everything before the first `=`
/// (no trimming, no quotes); `\n` (two characters) in a value becomes a newline.
pub fn load_plain(bytes: &[u8]) -> Result<Branch, SopsError> {
    let mut branch = Vec::new();
    for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix(b"#") {
            branch.push(Entry::Comment(
                String::from_utf8_lossy(comment).into_owned(),
            ));
            continue;
        }
        let Some(pos) = line.iter().position(|b| *b == b'=') else {
            return Err(SopsError::Load(format!(
                "invalid dotenv input line {} (no '=')",
                n + 1
            )));
        };
        let key = String::from_utf8_lossy(&line[..pos]).into_owned();
        let value = unescape_newlines(&line[pos + 1..]);
        branch.push(Entry::Pair(key, bytes_value(value)));
    }
    Ok(branch)
}

fn unescape_newlines(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'\\' && v.get(i + 1) == Some(&b'n') {
            out.push(b'\n');
            i += 2;
        } else {
            out.push(v[i]);
            i += 1;
        }
    }
    out
}

/// A string value, or raw bytes when they are not UTF-8.
pub(crate) fn bytes_value(b: Vec<u8>) -> Value {
    match String::from_utf8(b) {
        Ok(s) => Value::Str(s),
        Err(e) => Value::Bytes(e.into_bytes()),
    }
}

/// Emits the first branch: `#text` for comments, `KEY=value` with newlines as `\n`.
pub fn emit(branches: &[Branch]) -> Result<Zeroizing<Vec<u8>>, SopsError> {
    let mut out = Zeroizing::new(Vec::new());
    let Some(branch) = branches.first() else {
        return Ok(out);
    };
    for entry in branch {
        match entry {
            Entry::Comment(c) | Entry::LineComment(c) => {
                out.push(b'#');
                out.extend_from_slice(c.as_bytes());
            }
            Entry::Pair(k, v) => {
                let text: Zeroizing<Vec<u8>> = match v {
                    Value::Map(_) | Value::List(_) => {
                        return Err(SopsError::Emit(format!(
                            "cannot use complex value in dotenv file; offending key {k}"
                        )));
                    }
                    Value::Str(s) => Zeroizing::new(escape_newlines(s.as_bytes())),
                    Value::Bytes(b) => Zeroizing::new(escape_newlines(b)),
                    other => val_to_string(other)?,
                };
                out.extend_from_slice(k.as_bytes());
                out.push(b'=');
                out.extend_from_slice(&text);
            }
        }
        out.push(b'\n');
    }
    Ok(out)
}

fn escape_newlines(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    for b in v {
        if *b == b'\n' {
            out.extend_from_slice(b"\\n");
        } else {
            out.push(*b);
        }
    }
    out
}

/// sops' `ValToString` for a scalar: floats as `%G` (with `.0` when integral), booleans
/// `true`/`false`, times in seconds precision. Maps and lists are refused.
pub(crate) fn val_to_string(v: &Value) -> Result<Zeroizing<Vec<u8>>, SopsError> {
    let text = match v {
        Value::Str(s) => s.clone(),
        Value::Bytes(b) => return Ok(Zeroizing::new(b.clone())),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => gofmt::float_val_to_string(*f),
        Value::Bool(b) => b.to_string(),
        Value::Time(t) => GoTime::parse(t).map_or_else(|| t.clone(), |t| t.format_seconds()),
        Value::Null => "<nil>".to_string(),
        Value::Comment(c) => format!("{{{c} false}}"),
        Value::LineComment(c) => format!("{{{c} true}}"),
        Value::Map(_) | Value::List(_) => {
            return Err(SopsError::Emit(
                "a nested map or list cannot be written as a flat value".into(),
            ));
        }
    };
    Ok(Zeroizing::new(text.into_bytes()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let input = b"#c\nA=1\n\nB=x\\ny=z\nC=\r\n";
        let b = load_plain(input).unwrap();
        assert_eq!(
            b,
            vec![
                Entry::Comment("c".into()),
                Entry::Pair("A".into(), Value::Str("1".into())),
                Entry::Pair("B".into(), Value::Str("x\ny=z".into())),
                Entry::Pair("C".into(), Value::Str("\r".into())),
            ]
        );
        assert_eq!(
            emit(&[b]).unwrap().as_slice(),
            b"#c\nA=1\nB=x\\ny=z\nC=\r\n"
        );
        assert!(load_plain(b"A=1\nsecret-without-equals\n").is_err());
        let err = load_plain(b"hunter2\n").unwrap_err().to_string();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn typed_values_and_metadata() {
        let b = vec![vec![
            Entry::Pair("F".into(), Value::Float(2.0)),
            Entry::Pair("T".into(), Value::Bool(true)),
            Entry::Pair("D".into(), Value::Time("2024-01-01T00:00:00.5Z".into())),
        ]];
        assert_eq!(
            emit(&b).unwrap().as_slice(),
            b"F=2.0\nT=true\nD=2024-01-01T00:00:00Z\n"
        );
        let nested = vec![vec![Entry::Pair("M".into(), Value::Map(vec![]))]];
        assert!(emit(&nested).is_err());
        assert!(matches!(load(b"A=1\n"), Err(SopsError::NoMetadata)));
        let (branches, meta) = load(b"A=1\nsops_mac=m\nsops_age__list_0__map_enc=e\\nf\n").unwrap();
        assert_eq!(branches[0].len(), 1);
        assert_eq!(
            meta.get("age"),
            Some(&Value::List(vec![Value::Map(vec![Entry::Pair(
                "enc".into(),
                Value::Str("e\nf".into())
            )])]))
        );
    }
}
