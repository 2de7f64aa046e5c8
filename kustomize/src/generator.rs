//! `configMapGenerator` / `secretGenerator` and the content hash kustomize appends to names.

use base64::Engine as _;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::error::{KustomizeError, Result};
use crate::item::Item;
use crate::kustomization::{Kustomization, scalar_text, str_map_of};
use crate::loader::Loader;
use crate::transform::set_meta;

/// What a generator does when an object of the same name already exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    Create,
    Merge,
    Replace,
}

/// One generated object plus how to combine it and whether it gets a hash suffix.
#[derive(Debug, Clone)]
pub struct Generated {
    pub obj: Value,
    pub behavior: Behavior,
    pub needs_hash: bool,
}

/// Options shared by `generatorOptions` and a generator's own `options`.
#[derive(Debug, Clone, Default)]
struct GenOptions {
    labels: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
    disable_hash: bool,
    immutable: bool,
}

fn options_of(v: Option<&Value>) -> std::result::Result<GenOptions, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(GenOptions::default());
    };
    Ok(GenOptions {
        labels: v
            .get("labels")
            .map(str_map_of)
            .transpose()?
            .unwrap_or_default(),
        annotations: v
            .get("annotations")
            .map(str_map_of)
            .transpose()?
            .unwrap_or_default(),
        disable_hash: v
            .get("disableNameSuffixHash")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        immutable: v.get("immutable").and_then(Value::as_bool).unwrap_or(false),
    })
}

fn merge_options(global: &GenOptions, local: &GenOptions) -> GenOptions {
    let mut out = local.clone();
    for (k, v) in &global.labels {
        if !out.labels.iter().any(|(lk, _)| lk == k) {
            out.labels.push((k.clone(), v.clone()));
        }
    }
    for (k, v) in &global.annotations {
        if !out.annotations.iter().any(|(lk, _)| lk == k) {
            out.annotations.push((k.clone(), v.clone()));
        }
    }
    out.disable_hash |= global.disable_hash;
    out.immutable |= global.immutable;
    out
}

/// Runs both generators of a kustomization.
pub fn generate(ldr: &Loader, k: &Kustomization) -> Result<Vec<Generated>> {
    let global =
        options_of(k.get("generatorOptions")).map_err(|m| k.field_err("generatorOptions", m))?;
    let mut out = Vec::new();
    for (field, is_secret) in [("configMapGenerator", false), ("secretGenerator", true)] {
        for g in k.entries(field)? {
            out.push(generate_one(ldr, k, field, &g, is_secret, &global)?);
        }
    }
    Ok(out)
}

fn generate_one(
    ldr: &Loader,
    k: &Kustomization,
    field: &str,
    g: &Value,
    is_secret: bool,
    global: &GenOptions,
) -> Result<Generated> {
    let name = g
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let gerr = |m: String| KustomizeError::Generator {
        file: k.file.clone(),
        name: name.clone(),
        message: m,
    };
    if name.is_empty() {
        return Err(gerr(format!("a '{field}' entry needs a name")));
    }
    let behavior = match g.get("behavior").and_then(Value::as_str).unwrap_or("") {
        "" | "create" | "add" => Behavior::Create,
        "merge" => Behavior::Merge,
        "replace" => Behavior::Replace,
        other => return Err(gerr(format!("unknown behavior '{other}'"))),
    };
    let local = options_of(g.get("options")).map_err(gerr)?;
    let opts = merge_options(global, &local);

    // key -> bytes, in insertion order
    let mut data: Vec<(String, Vec<u8>)> = Vec::new();
    let mut put = |key: String, val: Vec<u8>, what: &str| -> Result<()> {
        validate_key(&key).map_err(|m| gerr(format!("{what}: {m}")))?;
        if data.iter().any(|(k2, _)| *k2 == key) {
            return Err(gerr(format!(
                "cannot add key '{key}', another key by that name already exists"
            )));
        }
        data.push((key, val));
        Ok(())
    };

    let str_list = |f: &str| -> Result<Vec<String>> {
        match g.get(f) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| {
                    scalar_text(x).ok_or_else(|| gerr(format!("'{f}' must be a list of strings")))
                })
                .collect(),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(_) => Err(gerr(format!("'{f}' must be a list of strings"))),
        }
    };

    let mut env_files = str_list("envs")?;
    if let Some(e) = g.get("env").and_then(Value::as_str)
        && !e.is_empty()
    {
        env_files.push(e.to_string());
    }
    for env in env_files {
        let (env_path, text) = ldr.read_text(&env)?;
        let env_err = |(line, m): (usize, String)| {
            gerr(format!(
                "env file '{env}': {}:{line}: {m}",
                env_path.display()
            ))
        };
        for (key, val) in parse_env(&text).map_err(env_err)? {
            put(key, val.into_bytes(), &format!("env file '{env}'"))?;
        }
    }
    for lit in str_list("literals")? {
        let (key, val) = parse_literal(&lit).map_err(gerr)?;
        put(key, val.into_bytes(), "literal")?;
    }
    for f in str_list("files")? {
        let (key, path) = match f.split_once('=') {
            Some((k2, p)) => {
                if k2.is_empty() {
                    return Err(gerr(format!("key name for file path '{p}' missing")));
                }
                (k2.to_string(), p.to_string())
            }
            None => {
                let base = std::path::Path::new(&f)
                    .file_name()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (base, f.clone())
            }
        };
        let (_, bytes) = ldr.read(&path)?;
        put(key, bytes, &format!("file '{path}'"))?;
    }

    let mut meta = Map::new();
    meta.insert("name".into(), json!(name));
    if let Some(ns) = g
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        meta.insert("namespace".into(), json!(ns));
    }
    if !opts.labels.is_empty() {
        meta.insert(
            "labels".into(),
            Value::Object(
                opts.labels
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v)))
                    .collect(),
            ),
        );
    }
    if !opts.annotations.is_empty() {
        meta.insert(
            "annotations".into(),
            Value::Object(
                opts.annotations
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v)))
                    .collect(),
            ),
        );
    }
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!("v1"));
    obj.insert(
        "kind".into(),
        json!(if is_secret { "Secret" } else { "ConfigMap" }),
    );
    obj.insert("metadata".into(), Value::Object(meta));
    let b64 = base64::engine::general_purpose::STANDARD;
    if is_secret {
        let ty = g
            .get("type")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("Opaque");
        obj.insert("type".into(), json!(ty));
        {
            obj.insert(
                "data".into(),
                Value::Object(
                    data.iter()
                        .map(|(k, v)| (k.clone(), json!(wrap_base64(&b64.encode(v)))))
                        .collect(),
                ),
            );
        }
    } else {
        let mut text = Map::new();
        let mut binary = Map::new();
        for (key, val) in data {
            match String::from_utf8(val) {
                Ok(s) => {
                    text.insert(key, json!(s));
                }
                Err(e) => {
                    binary.insert(key, json!(wrap_base64(&b64.encode(e.as_bytes()))));
                }
            }
        }
        if !text.is_empty() {
            obj.insert("data".into(), Value::Object(text));
        }
        if !binary.is_empty() {
            obj.insert("binaryData".into(), Value::Object(binary));
        }
    }
    if opts.immutable {
        obj.insert("immutable".into(), json!(true));
    }
    Ok(Generated {
        obj: Value::Object(obj),
        behavior,
        needs_hash: !opts.disable_hash,
    })
}

/// Merges (`behavior: merge`) or replaces (`behavior: replace`) the existing object `old` with
/// a generated one of the same id, as kustomize v5.5 does (`appendReplaceOrMerge` and
/// `CopyMergeMetaDataFieldsFrom` in api/resmap and api/resource):
/// - the result is the generated object, with the name and namespace (and the build history:
///   earlier ids, prefixes, suffixes) of the existing one; any other field of the existing
///   object, metadata included, is dropped, so `immutable` and a Secret's `type` come from the
///   generator alone;
/// - labels and annotations are the existing ones overlaid by the generated ones;
/// - `data` and `binaryData` are the generated ones for `replace`, and the existing ones
///   overlaid by the generated ones for `merge` (an empty map is left out);
/// - the hash suffix is kept only when both ask for it: an object generated with
///   `disableNameSuffixHash` (or loaded from a file) stays unhashed whatever merges into it,
///   and a generator with `disableNameSuffixHash` takes the hash off;
/// - the origin annotation is the existing one for `merge` and the generator's for `replace`.
pub(crate) fn merge_generated(old: &mut Item, item: Item, behavior: Behavior) {
    let mut obj = item.res.obj;
    for field in ["labels", "annotations"] {
        let mut merged = match old.res.obj.pointer(&format!("/metadata/{field}")) {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        if let Some(Value::Object(add)) = obj.pointer(&format!("/metadata/{field}")) {
            for (k, v) in add {
                merged.insert(k.clone(), v.clone());
            }
        }
        if merged.is_empty() {
            if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
                meta.remove(field);
            }
        } else {
            set_meta(&mut obj, field, Value::Object(merged));
        }
    }
    for field in ["name", "namespace"] {
        match old.res.obj.pointer(&format!("/metadata/{field}")) {
            Some(v) => set_meta(&mut obj, field, v.clone()),
            None => {
                if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
                    meta.remove(field);
                }
            }
        }
    }
    if behavior == Behavior::Merge
        && let Value::Object(o) = &mut obj
    {
        for field in ["data", "binaryData"] {
            let mut merged = match old.res.obj.get(field) {
                Some(Value::Object(m)) => m.clone(),
                _ => Map::new(),
            };
            if let Some(Value::Object(add)) = o.get(field) {
                for (k, v) in add {
                    merged.insert(k.clone(), v.clone());
                }
            }
            o.remove(field);
            if !merged.is_empty() {
                o.insert(field.to_string(), Value::Object(merged));
            }
        }
    }
    old.res.obj = obj;
    old.needs_hash = old.needs_hash && item.needs_hash;
    old.origin = match behavior {
        Behavior::Merge => old.origin.take().or(item.origin),
        _ => item.origin.or(old.origin.take()),
    };
}

/// kustomize breaks base64 text of 70 characters or more into lines of 70, each ended by a
/// newline.
fn wrap_base64(enc: &str) -> String {
    const LINE: usize = 70;
    if enc.len() < LINE {
        return enc.to_string();
    }
    let mut out = String::with_capacity(enc.len() + enc.len() / LINE + 1);
    for chunk in enc.as_bytes().chunks(LINE) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out
}

fn validate_key(key: &str) -> std::result::Result<(), String> {
    let ok = !key.is_empty()
        && key.len() <= 253
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && key != "."
        && key != ".."
        && !key.starts_with("..");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "\"{key}\" is not a valid key name: a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
        ))
    }
}

fn parse_literal(lit: &str) -> std::result::Result<(String, String), String> {
    let Some((k, v)) = lit.split_once('=') else {
        return Err(format!("invalid literal source {lit}, expected key=value"));
    };
    if k.is_empty() {
        return Err(format!("invalid literal source {lit}, expected key=value"));
    }
    let v = strip_quotes(v);
    Ok((k.to_string(), v.to_string()))
}

fn strip_quotes(v: &str) -> &str {
    let b = v.as_bytes();
    if b.len() >= 2 && (b[0] == b'"' || b[0] == b'\'') && b[b.len() - 1] == b[0] {
        return &v[1..v.len() - 1];
    }
    v
}

/// Parses an env file: `KEY=VALUE` lines, `#` comments and blank lines skipped. An error
/// gives the 1-based line.
fn parse_env(text: &str) -> std::result::Result<Vec<(String, String)>, (usize, String)> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let raw = if i == 0 {
            raw.trim_start_matches('\u{feff}')
        } else {
            raw
        };
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once('=') {
            Some((k, v)) => {
                if k.is_empty() || k.contains(char::is_whitespace) {
                    return Err((i + 1, format!("invalid key '{k}'")));
                }
                out.push((k.to_string(), v.to_string()));
            }
            None => {
                // kustomize would read the variable from its own environment; a build must not
                // depend on the process environment, so such a line is an empty value.
                if line.contains(char::is_whitespace) {
                    return Err((i + 1, format!("invalid key '{line}'")));
                }
                out.push((line.to_string(), String::new()));
            }
        }
    }
    Ok(out)
}

/// Writes a string as Go's `encoding/json` does (HTML-sensitive characters escaped).
fn go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Go `encoding/json` of a value with sorted map keys.
fn go_json(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&crate::yaml::number_text(n)),
        Value::String(s) => go_json_string(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(out, x);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_string(out, k);
                out.push(':');
                go_json(out, &m[k]);
            }
            out.push('}');
        }
    }
}

/// The 10-character suffix kustomize derives from a ConfigMap's or Secret's content.
pub fn content_hash(obj: &Value) -> String {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    // kustomize looks the name up with a path that never matches, so it is always empty;
    // a missing field counts as the empty string.
    let field = |f: &str| match obj.get(f) {
        None | Some(Value::Null) => json!(""),
        Some(v) => v.clone(),
    };
    let encoded = if kind == "ConfigMap" {
        let mut m = json!({"kind": "ConfigMap", "name": "", "data": field("data")});
        if let Some(b) = obj.get("binaryData").filter(|b| b.is_object()) {
            m["binaryData"] = b.clone();
        }
        m
    } else if kind == "Secret" {
        let mut m =
            json!({"kind": "Secret", "type": field("type"), "name": "", "data": field("data")});
        if let Some(b) = obj.get("stringData").filter(|b| b.is_object()) {
            m["stringData"] = b.clone();
        }
        m
    } else {
        obj.clone()
    };
    let mut text = String::new();
    go_json(&mut text, &encoded);
    let digest = hex::encode(Sha256::digest(text.as_bytes()));
    digest
        .chars()
        .take(10)
        .map(|c| match c {
            '0' => 'g',
            '1' => 'h',
            '3' => 'k',
            'a' => 'm',
            'e' => 't',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_file_parsing() {
        let (line, v) = parse_env("\u{feff}# c\nA=1\n\n  B = x\nC=a=b\n").unwrap_err();
        assert!(v.contains("invalid key") && line == 4, "{line}: {v}");
        let v = parse_env("A=1\nC=a=b\nD=\n").unwrap();
        assert_eq!(
            v,
            vec![
                ("A".into(), "1".into()),
                ("C".into(), "a=b".into()),
                ("D".into(), "".into())
            ]
        );
    }

    #[test]
    fn literal_quotes_stripped() {
        assert_eq!(
            parse_literal("a=\"x y\"").unwrap(),
            ("a".into(), "x y".into())
        );
        assert!(parse_literal("novalue").is_err());
    }

    #[test]
    fn base64_wrapping() {
        assert_eq!(wrap_base64("abc"), "abc");
        let long = "x".repeat(75);
        assert_eq!(
            wrap_base64(&long),
            format!("{}\n{}\n", "x".repeat(70), "x".repeat(5))
        );
        assert_eq!(
            wrap_base64(&"y".repeat(70)),
            format!("{}\n", "y".repeat(70))
        );
    }

    #[test]
    fn key_validation() {
        assert!(validate_key("a.b-c_d").is_ok());
        assert!(validate_key("a/b").is_err());
    }

    #[test]
    fn hash_is_stable_and_content_sensitive() {
        let a = json!({"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k": "v"}});
        let b = json!({"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k": "w"}});
        assert_eq!(content_hash(&a).len(), 10);
        assert_ne!(content_hash(&a), content_hash(&b));
        assert_eq!(content_hash(&a), content_hash(&a.clone()));
    }
}
