//! Getting the `sops` block out of loaded branches, and the flattened form dotenv and INI
//! use for it (reference §4): map descent appends `__map_<key>`, list descent
//! `__list_<index>`.

use std::collections::BTreeMap;

use crate::error::SopsError;
use crate::tree::{Branch, Entry, Value};

const MAP_SEP: &str = "__map_";
const LIST_SEP: &str = "__list_";

/// At most this many path segments in one flattened key.
const MAX_SEGMENTS: usize = 256;

/// Takes the top-level `sops` entries out of every branch and returns the first branch's one
/// (it must be a non-empty map). As sops' stores do for JSON, YAML and INI.
pub fn take_nested_metadata(branches: &mut [Branch]) -> Result<Value, SopsError> {
    let mut found: Option<Value> = None;
    for (i, branch) in branches.iter_mut().enumerate() {
        let mut error = None;
        branch.retain_mut(|e| match e {
            Entry::Pair(k, v) if k == "sops" => {
                if i == 0 && error.is_none() {
                    if found.is_some() {
                        error = Some(SopsError::Load("Found duplicate sops entry".into()));
                    } else if let Value::Map(_) = v {
                        found = Some(std::mem::replace(v, Value::Null));
                    } else {
                        error = Some(SopsError::Load(
                            "Found sops entry that is not a mapping".into(),
                        ));
                    }
                }
                false
            }
            _ => true,
        });
        if let Some(e) = error {
            return Err(e);
        }
    }
    match found {
        Some(Value::Map(entries)) if !entries.is_empty() => Ok(Value::Map(entries)),
        _ => Err(SopsError::NoMetadata),
    }
}

/// Takes the `sops_`-prefixed entries out of the first branch (prefix removed), as sops'
/// dotenv store does.
pub fn take_prefixed_metadata(branches: &mut [Branch]) -> Vec<Entry> {
    let mut out = Vec::new();
    if let Some(branch) = branches.first_mut() {
        branch.retain_mut(|e| match e {
            Entry::Pair(k, v) if k.starts_with("sops_") => {
                out.push(Entry::Pair(
                    k["sops_".len()..].to_string(),
                    std::mem::replace(v, Value::Null),
                ));
                false
            }
            _ => true,
        });
    }
    out
}

enum Token {
    Key(String),
    Index(i64),
}

/// Splits a flattened key at its separators (sops' `tokenize`). A list index that is not a
/// number counts as 0, as in sops.
fn tokenize(path: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut kind: Option<&str> = None;
    let mut start = 0;
    let mut i = 0;
    let finish = |kind: Option<&str>, text: &str, tokens: &mut Vec<Token>| {
        tokens.push(match kind {
            Some(LIST_SEP) => Token::Index(text.parse().unwrap_or(0)),
            _ => Token::Key(text.to_string()),
        });
    };
    while i < path.len() {
        let rest = &path.as_bytes()[i..];
        let sep = if rest.starts_with(MAP_SEP.as_bytes()) {
            Some(MAP_SEP)
        } else if rest.starts_with(LIST_SEP.as_bytes()) {
            Some(LIST_SEP)
        } else {
            None
        };
        if let Some(sep) = sep {
            finish(kind, &path[start..i], &mut tokens);
            kind = Some(sep);
            i += sep.len();
            start = i;
        } else {
            i += 1;
        }
    }
    finish(kind, path.get(start..).unwrap_or(""), &mut tokens);
    tokens
}

#[derive(Default)]
struct Node {
    value: Option<Value>,
    keys: BTreeMap<String, Node>,
    indices: BTreeMap<i64, Node>,
}

fn convert(node: Node) -> Result<Value, String> {
    let kinds = usize::from(node.value.is_some())
        + usize::from(!node.keys.is_empty())
        + usize::from(!node.indices.is_empty());
    if kinds > 1 {
        return Err("Type mismatch".into());
    }
    if let Some(v) = node.value {
        return Ok(v);
    }
    if !node.indices.is_empty() {
        let n = node.indices.len();
        let first = node.indices.keys().next().copied();
        let last = node.indices.keys().next_back().copied();
        if first != Some(0) || last != i64::try_from(n - 1).ok() {
            return Err("Incomplete list".into());
        }
        return node
            .indices
            .into_values()
            .map(convert)
            .collect::<Result<_, _>>()
            .map(Value::List);
    }
    node.keys
        .into_iter()
        .map(|(k, n)| convert(n).map(|v| Entry::Pair(k, v)))
        .collect::<Result<_, _>>()
        .map(Value::Map)
}

/// Rebuilds the nested `sops` block from flattened entries (comments ignored). Map keys come
/// out sorted, as in sops; clashes, duplicates and lists with holes are refused.
pub fn unflatten(entries: Vec<Entry>) -> Result<Value, SopsError> {
    let mut root = Node::default();
    for e in entries {
        let Entry::Pair(key, value) = e else { continue };
        let tokens = tokenize(&key);
        if tokens.len() > MAX_SEGMENTS {
            return Err(SopsError::Metadata(format!(
                "Error while unflattening {key:?}: too many segments"
            )));
        }
        let mut node = &mut root;
        for t in tokens {
            node = match t {
                Token::Key(k) => node.keys.entry(k).or_default(),
                Token::Index(i) => node.indices.entry(i).or_default(),
            };
        }
        if node.value.is_some() {
            return Err(SopsError::Metadata(format!(
                "Error while unflattening {key:?}: Duplicate value"
            )));
        }
        node.value = Some(value);
    }
    if root.value.is_none() && root.keys.is_empty() && root.indices.is_empty() {
        return Ok(Value::Map(Vec::new()));
    }
    match convert(root) {
        Ok(Value::Map(m)) => Ok(Value::Map(m)),
        Ok(_) => Err(SopsError::Metadata(
            "Internal error: cannot find root".into(),
        )),
        Err(e) => Err(SopsError::Metadata(format!(
            "Error while unflattening: {e}"
        ))),
    }
}

/// Flattens a map into `prefix`-ed keys (sops' `flattenTreeBranch`); comments are dropped.
pub fn flatten(entries: &[Entry], prefix: &str) -> Result<Vec<Entry>, SopsError> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    flatten_map(entries, prefix, &mut out, &mut seen, 0)?;
    Ok(out)
}

fn flatten_map(
    entries: &[Entry],
    prefix: &str,
    out: &mut Vec<Entry>,
    seen: &mut std::collections::HashSet<String>,
    depth: usize,
) -> Result<(), SopsError> {
    for e in entries {
        if let Entry::Pair(k, v) = e {
            flatten_value(v, format!("{prefix}{k}"), out, seen, depth + 1)?;
        }
    }
    Ok(())
}

fn flatten_value(
    v: &Value,
    key: String,
    out: &mut Vec<Entry>,
    seen: &mut std::collections::HashSet<String>,
    depth: usize,
) -> Result<(), SopsError> {
    if depth > MAX_SEGMENTS {
        return Err(SopsError::Metadata("metadata nested too deeply".into()));
    }
    match v {
        Value::Map(entries) => flatten_map(entries, &format!("{key}{MAP_SEP}"), out, seen, depth),
        Value::List(items) => {
            let items = items
                .iter()
                .filter(|i| !matches!(i, Value::Comment(_) | Value::LineComment(_)));
            for (i, item) in items.enumerate() {
                flatten_value(item, format!("{key}{LIST_SEP}{i}"), out, seen, depth + 1)?;
            }
            Ok(())
        }
        other => {
            if !seen.insert(key.clone()) {
                return Err(SopsError::Metadata(format!(
                    "Found key collision {key:?} while flattening"
                )));
            }
            out.push(Entry::Pair(key, other.clone()));
            Ok(())
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::Str(v.into())
    }

    fn pair(k: &str, v: Value) -> Entry {
        Entry::Pair(k.into(), v)
    }

    #[test]
    fn round_trip() {
        let tree = vec![
            pair(
                "age",
                Value::List(vec![Value::Map(vec![
                    pair("enc", s("E")),
                    pair("recipient", s("R")),
                ])]),
            ),
            pair("lastmodified", s("T")),
        ];
        let flat = flatten(&tree, "sops_").unwrap();
        assert_eq!(
            flat,
            vec![
                pair("sops_age__list_0__map_enc", s("E")),
                pair("sops_age__list_0__map_recipient", s("R")),
                pair("sops_lastmodified", s("T")),
            ]
        );
        let flat = flatten(&tree, "").unwrap();
        assert_eq!(unflatten(flat).unwrap(), Value::Map(tree));
    }

    #[test]
    fn refusals() {
        let dup = vec![pair("a", s("1")), pair("a", s("2"))];
        assert!(
            unflatten(dup)
                .unwrap_err()
                .to_string()
                .contains("Duplicate value")
        );
        let clash = vec![pair("a", s("1")), pair("a__map_b", s("2"))];
        assert!(
            unflatten(clash)
                .unwrap_err()
                .to_string()
                .contains("Type mismatch")
        );
        let hole = vec![pair("a__list_0", s("1")), pair("a__list_2", s("2"))];
        assert!(
            unflatten(hole)
                .unwrap_err()
                .to_string()
                .contains("Incomplete list")
        );
        let collide = vec![
            pair("a__map_b", s("1")),
            pair("a", Value::Map(vec![pair("b", s("2"))])),
        ];
        assert!(flatten(&collide, "").is_err());
    }

    #[test]
    fn sorted_keys_and_odd_indices() {
        let v = unflatten(vec![
            pair("b", s("2")),
            pair("a__list_x", s("1")),
            Entry::Comment("ignored".into()),
        ])
        .unwrap();
        assert_eq!(
            v,
            Value::Map(vec![
                pair("a", Value::List(vec![s("1")])),
                pair("b", s("2")),
            ])
        );
    }

    #[test]
    fn nested_metadata_extraction() {
        let mut branches = vec![
            vec![
                pair("a", s("1")),
                pair("sops", Value::Map(vec![pair("mac", s("m"))])),
            ],
            vec![pair("sops", s("x"))],
        ];
        let m = take_nested_metadata(&mut branches).unwrap();
        assert_eq!(m, Value::Map(vec![pair("mac", s("m"))]));
        assert_eq!(branches, vec![vec![pair("a", s("1"))], vec![]]);
        let mut none = vec![vec![pair("a", s("1"))]];
        assert!(matches!(
            take_nested_metadata(&mut none),
            Err(SopsError::NoMetadata)
        ));
        let mut bad = vec![vec![pair("sops", s("x"))]];
        assert!(take_nested_metadata(&mut bad).is_err());
    }
}
