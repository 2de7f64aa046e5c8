//! YAML text to `serde_json::Value`, resolving plain scalars the way kustomize's loader does
//! (go-yaml v3 decoding into generic values, then JSON): `yes`/`on` stay strings, `0777` is
//! octal, `1e3` is the number 1000, integral floats become integers, dates become RFC 3339 strings.

use std::collections::HashMap;

use serde_json::{Map, Number, Value};
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use crate::error::{KustomizeError, Result};

/// Bounds applied while converting YAML to values.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest input accepted, in bytes.
    pub max_bytes: usize,
    /// Largest number of value nodes produced (aliases count their full expansion).
    pub max_nodes: usize,
    /// Deepest nesting of collections.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 64 * 1024 * 1024,
            max_nodes: 2_000_000,
            max_depth: 256,
        }
    }
}

/// Parses a multi-document YAML stream. Empty documents (or documents that are only `null`)
/// are dropped, like kustomize does.
pub fn parse_stream(text: &str, origin: &str) -> Result<Vec<Value>> {
    parse_stream_with(text, origin, Limits::default())
}

/// Parses a single YAML document (the first one of the stream); an empty text gives `null`.
pub fn parse_one(text: &str, origin: &str) -> Result<Value> {
    let mut docs = parse_documents(text, origin, Limits::default())?;
    if docs.is_empty() {
        Ok(Value::Null)
    } else {
        Ok(docs.swap_remove(0))
    }
}

/// [`parse_stream`] with explicit limits.
pub fn parse_stream_with(text: &str, origin: &str, limits: Limits) -> Result<Vec<Value>> {
    let docs = parse_documents(text, origin, limits)?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// A step of a path into a parsed document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSeg {
    Key(String),
    Index(usize),
}

/// A parsed document plus the paths of mapping values written with nothing after the colon
/// (`key:`). Both parse as null, but kustomize's merge drops the empty ones, so the build
/// needs to tell them apart.
#[derive(Debug, Clone)]
pub struct TrackedDoc {
    pub value: Value,
    pub empty_values: Vec<Vec<PathSeg>>,
}

/// Like [`parse_stream`], also reporting where empty mapping values are.
pub fn parse_stream_tracked(text: &str, origin: &str) -> Result<Vec<TrackedDoc>> {
    let (docs, empties) = parse_documents_inner(text, origin, Limits::default(), true)?;
    Ok(docs
        .into_iter()
        .zip(empties)
        .filter(|(d, _)| !d.is_null())
        .map(|(value, empty_values)| TrackedDoc {
            value,
            empty_values,
        })
        .collect())
}

fn parse_documents(text: &str, origin: &str, limits: Limits) -> Result<Vec<Value>> {
    parse_documents_inner(text, origin, limits, false).map(|(d, _)| d)
}

type Docs = (Vec<Value>, Vec<Vec<Vec<PathSeg>>>);

fn parse_documents_inner(text: &str, origin: &str, limits: Limits, track: bool) -> Result<Docs> {
    if text.len() > limits.max_bytes {
        return Err(KustomizeError::YamlLimit {
            origin: origin.to_string(),
            message: format!(
                "{} bytes is more than the limit of {} bytes",
                text.len(),
                limits.max_bytes
            ),
        });
    }
    let mut conv = Converter {
        parser: Parser::new_from_str(text),
        origin,
        limits,
        nodes: 0,
        anchors: HashMap::new(),
        chars: text.chars().count(),
        ends_with_newline: text.ends_with('\n'),
        track,
        path: Vec::new(),
        empties: Vec::new(),
    };
    let docs = conv.stream()?;
    let mut empties = std::mem::take(&mut conv.empties);
    empties.resize(docs.len(), Vec::new());
    Ok((docs, empties))
}

struct Converter<'a> {
    parser: Parser<std::str::Chars<'a>>,
    origin: &'a str,
    limits: Limits,
    nodes: usize,
    anchors: HashMap<usize, (Value, usize)>,
    chars: usize,
    ends_with_newline: bool,
    track: bool,
    path: Vec<PathSeg>,
    /// Per document, the paths of empty mapping values (only when tracking).
    empties: Vec<Vec<Vec<PathSeg>>>,
}

impl Converter<'_> {
    fn next(&mut self) -> Result<(Event, Marker)> {
        self.parser.next_token().map_err(|e| KustomizeError::Yaml {
            origin: self.origin.to_string(),
            message: format!(
                "line {} column {}: {}",
                e.marker().line(),
                e.marker().col() + 1,
                e.info()
            ),
        })
    }

    fn err(&self, mark: &Marker, msg: impl std::fmt::Display) -> KustomizeError {
        KustomizeError::Yaml {
            origin: self.origin.to_string(),
            message: format!("line {}: {msg}", mark.line()),
        }
    }

    fn count(&mut self, n: usize) -> Result<()> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > self.limits.max_nodes {
            return Err(KustomizeError::YamlLimit {
                origin: self.origin.to_string(),
                message: format!(
                    "more than {} nodes (alias expansion bomb?)",
                    self.limits.max_nodes
                ),
            });
        }
        Ok(())
    }

    fn stream(&mut self) -> Result<Vec<Value>> {
        let mut docs = Vec::new();
        loop {
            let (ev, mark) = self.next()?;
            match ev {
                Event::StreamStart | Event::DocumentEnd | Event::Nothing => {}
                Event::StreamEnd => break,
                Event::DocumentStart => {
                    self.anchors.clear();
                    self.empties.push(Vec::new());
                    let (ev, mark) = self.next()?;
                    if matches!(ev, Event::DocumentEnd) {
                        docs.push(Value::Null);
                        continue;
                    }
                    let (v, _) = self.node(ev, mark, 0)?;
                    docs.push(v);
                }
                other => return Err(self.err(&mark, format!("unexpected event {other:?}"))),
            }
        }
        Ok(docs)
    }

    /// Converts the node that starts with `ev`; returns it and its node count.
    fn node(&mut self, ev: Event, mark: Marker, depth: usize) -> Result<(Value, usize)> {
        if depth > self.limits.max_depth {
            return Err(KustomizeError::YamlLimit {
                origin: self.origin.to_string(),
                message: format!(
                    "line {}: nesting deeper than {} levels",
                    mark.line(),
                    self.limits.max_depth
                ),
            });
        }
        match ev {
            Event::Alias(id) => {
                let Some(n) = self.anchors.get(&id).map(|(_, n)| *n) else {
                    return Err(self.err(&mark, "unknown anchor"));
                };
                self.count(n)?;
                let v = self
                    .anchors
                    .get(&id)
                    .map(|(v, _)| v.clone())
                    .unwrap_or(Value::Null);
                Ok((v, n))
            }
            Event::Scalar(mut text, style, anchor, tag) => {
                self.count(1)?;
                // A block scalar that runs to the end of a file without a final line break has
                // no trailing newline (yaml-rust2 adds one).
                if matches!(style, TScalarStyle::Literal | TScalarStyle::Folded)
                    && !self.ends_with_newline
                    && text.ends_with('\n')
                    && self
                        .parser
                        .peek()
                        .is_ok_and(|(_, m)| m.index() >= self.chars)
                {
                    text.pop();
                }
                let v = scalar(text, style, tag.as_ref()).map_err(|m| self.err(&mark, m))?;
                if anchor > 0 {
                    self.anchors.insert(anchor, (v.clone(), 1));
                }
                Ok((v, 1))
            }
            Event::SequenceStart(anchor, _) => {
                self.count(1)?;
                let mut items = Vec::new();
                let mut total = 1usize;
                loop {
                    let (ev, m) = self.next()?;
                    if matches!(ev, Event::SequenceEnd) {
                        break;
                    }
                    if self.track {
                        self.path.push(PathSeg::Index(items.len()));
                    }
                    let r = self.node(ev, m, depth + 1);
                    if self.track {
                        self.path.pop();
                    }
                    let (v, n) = r?;
                    total = total.saturating_add(n);
                    items.push(v);
                }
                let v = Value::Array(items);
                if anchor > 0 {
                    self.anchors.insert(anchor, (v.clone(), total));
                }
                Ok((v, total))
            }
            Event::MappingStart(anchor, _) => {
                self.count(1)?;
                let mut map = Map::new();
                let mut merged: Vec<Map<String, Value>> = Vec::new();
                let mut total = 1usize;
                loop {
                    let (ev, m) = self.next()?;
                    if matches!(ev, Event::MappingEnd) {
                        break;
                    }
                    let is_merge =
                        matches!(&ev, Event::Scalar(s, TScalarStyle::Plain, _, None) if s == "<<");
                    let (k, _) = self.node(ev, m, depth + 1)?;
                    let (vev, vm) = self.next()?;
                    if self.track {
                        if matches!(&vev, Event::Scalar(t, TScalarStyle::Plain, _, None) if t.is_empty())
                        {
                            let mut p = self.path.clone();
                            p.push(PathSeg::Key(key_string(&k)));
                            if let Some(last) = self.empties.last_mut() {
                                last.push(p);
                            }
                        }
                        self.path.push(PathSeg::Key(key_string(&k)));
                    }
                    let r = self.node(vev, vm, depth + 1);
                    if self.track {
                        self.path.pop();
                    }
                    let (v, n) = r?;
                    total = total.saturating_add(n);
                    if is_merge {
                        match v {
                            Value::Object(o) => merged.push(o),
                            Value::Array(list) => {
                                for item in list {
                                    match item {
                                        Value::Object(o) => merged.push(o),
                                        _ => {
                                            return Err(self.err(
                                                &m,
                                                "map merge requires map or sequence of maps",
                                            ));
                                        }
                                    }
                                }
                            }
                            _ => {
                                return Err(
                                    self.err(&m, "map merge requires map or sequence of maps")
                                );
                            }
                        }
                        continue;
                    }
                    let key = key_string(&k);
                    if map.contains_key(&key) {
                        return Err(self.err(&m, format!("mapping key \"{key}\" already defined")));
                    }
                    map.insert(key, v);
                }
                for o in merged {
                    for (k, v) in o {
                        if !map.contains_key(&k) {
                            map.insert(k, v);
                        }
                    }
                }
                let v = Value::Object(map);
                if anchor > 0 {
                    self.anchors.insert(anchor, (v.clone(), total));
                }
                Ok((v, total))
            }
            other => Err(self.err(&mark, format!("unexpected event {other:?}"))),
        }
    }
}

fn key_string(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        Value::Null => "null".to_string(),
        other => other.to_string(),
    }
}

fn tag_name(tag: &Tag) -> Option<&str> {
    if tag.handle == "tag:yaml.org,2002:" || tag.handle == "!!" {
        Some(tag.suffix.as_str())
    } else if let Some(s) = tag.suffix.strip_prefix("tag:yaml.org,2002:") {
        Some(s)
    } else {
        None
    }
}

fn scalar(
    text: String,
    style: TScalarStyle,
    tag: Option<&Tag>,
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
    Ok(resolve_plain(&text))
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

    #[test]
    fn quoted_scalars_stay_strings() {
        let v = parse_one("a: \"1\"\nb: '0777'\nc: !!str 12\nd: |\n  x\n", "t").unwrap();
        assert_eq!(v, json!({"a": "1", "b": "0777", "c": "12", "d": "x\n"}));
    }

    #[test]
    fn merge_keys_and_anchors() {
        let v = parse_one("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n", "t").unwrap();
        assert_eq!(v["other"], json!({"y": 3, "x": 1}));
    }

    #[test]
    fn duplicate_key_is_an_error() {
        let e = parse_one("a: 1\na: 2\n", "f.yaml").unwrap_err().to_string();
        assert!(e.contains("f.yaml") && e.contains("already defined"), "{e}");
    }

    #[test]
    fn alias_bomb_is_bounded() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            text.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
        }
        let e = parse_one(&text, "bomb.yaml").unwrap_err();
        assert!(matches!(e, KustomizeError::YamlLimit { .. }), "{e}");
    }

    #[test]
    fn deep_nesting_is_bounded() {
        let text = format!("{}1{}", "[".repeat(2000), "]".repeat(2000));
        let e = parse_one(&text, "deep.yaml").unwrap_err();
        // either our depth limit or the parser's own recursion limit stops it
        assert!(e.to_string().contains("deep.yaml"), "{e}");
        let text = format!("{}1{}", "[".repeat(80), "]".repeat(80));
        let limits = Limits {
            max_depth: 40,
            ..Limits::default()
        };
        let e = parse_stream_with(&text, "deep.yaml", limits).unwrap_err();
        assert!(matches!(e, KustomizeError::YamlLimit { .. }), "{e}");
    }

    #[test]
    fn size_is_bounded() {
        let limits = Limits {
            max_bytes: 10,
            ..Limits::default()
        };
        let e = parse_stream_with("a: 123456789012", "big.yaml", limits).unwrap_err();
        assert!(matches!(e, KustomizeError::YamlLimit { .. }), "{e}");
    }

    #[test]
    fn syntax_error_has_location() {
        let e = parse_stream("a: [1, 2\nb: c\n", "bad.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.yaml") && e.contains("line"), "{e}");
    }

    #[test]
    fn multi_doc_drops_empty() {
        let v = parse_stream("---\na: 1\n---\n---\nb: 2\n", "t").unwrap();
        assert_eq!(v, vec![json!({"a": 1}), json!({"b": 2})]);
    }
}

#[cfg(test)]
mod fold_tests {
    use super::*;

    #[test]
    fn double_quoted_fold_with_escaped_space() {
        let v = parse_one("k: \"a;\\n\n    \\   \\n    b\"\n", "t").unwrap();
        assert_eq!(v["k"], serde_json::json!("a;\n    \n    b"));
    }

    #[test]
    fn block_scalar_at_eof_without_newline() {
        let v = parse_one("a:\n  k: |\n    x\n    }", "t").unwrap();
        assert_eq!(v["a"]["k"], serde_json::json!("x\n}"));
        let v = parse_one("k: |\n  x\n", "t").unwrap();
        assert_eq!(v["k"], serde_json::json!("x\n"));
    }
}
