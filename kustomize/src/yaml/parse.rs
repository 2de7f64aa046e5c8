//! YAML text to `serde_json::Value`.
//!
//! The converter walks yaml-rust2's event stream with an explicit stack of open collections,
//! so its own stack use does not grow with the nesting of the input. Every input is bounded:
//! its length, its nesting depth, its number of nodes, and its expanded size (an alias copies
//! the anchored node each time it is used, so a kilobyte of text can describe gigabytes).

use std::collections::HashMap;

use serde_json::{Map, Value};
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use super::scalar::scalar;
use crate::error::{KustomizeError, Result};

/// What one node adds to the expanded size besides its scalar text: about what it takes in
/// printed YAML (indentation, `- ` or `: `, a line break), and a fraction of its size in memory.
pub const NODE_OVERHEAD: usize = 16;

/// The deepest nesting accepted whatever [`Limits::max_depth`] says. Parsing does not recurse,
/// but dropping, cloning, comparing and printing a `serde_json::Value` do, and must fit in a
/// 2 MiB thread stack.
pub const MAX_DEPTH_CEILING: usize = 1000;

/// Bounds applied while converting YAML to values.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest input accepted, in bytes.
    pub max_bytes: usize,
    /// Largest number of value nodes produced (aliases count their full expansion).
    pub max_nodes: usize,
    /// Deepest nesting of collections (capped at [`MAX_DEPTH_CEILING`]).
    pub max_depth: usize,
    /// Fixed part of the expanded-size budget of a stream, in bytes.
    pub expansion_allowance: usize,
    /// Part of the expanded-size budget per byte of input.
    pub expansion_factor: usize,
    /// Resolve plain scalars as YAML 1.1 booleans too (`y`, `yes`, `on`, `n`, `no`, `off` in
    /// their three casings), as go-yaml v2 and sigs.k8s.io/yaml do; kustomize (go-yaml v3)
    /// keeps them strings, the default.
    pub yaml11: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 64 * 1024 * 1024,
            max_nodes: 2_000_000,
            max_depth: 256,
            // The expanded size of a stream is its scalar bytes plus NODE_OVERHEAD per node,
            // an alias counting its anchor's full size each time it is used, plus the copies
            // kept of anchored nodes and the paths recorded by tracked parsing. Without
            // aliases a node takes at least two bytes of text (`a,`), and unique keys take
            // more, so 16 per input byte admits alias-free documents; the 8 MiB allowance
            // covers the usual reuse of anchors in values files (hundreds of anchors used a
            // few times each add well under a megabyte). A 1 KB billion-laughs text stops at
            // about 8 MiB and a 1 MB one at about 24 MiB, where memory would otherwise run
            // out at gigabytes; a real manifest of a few megabytes gets 40 MiB or more.
            expansion_allowance: 8 * 1024 * 1024,
            expansion_factor: 16,
            yaml11: false,
        }
    }
}

impl Limits {
    /// The expanded-size budget of a stream of `input_len` bytes.
    pub fn expansion_budget(&self, input_len: usize) -> usize {
        self.expansion_factor
            .saturating_mul(input_len)
            .saturating_add(self.expansion_allowance)
    }
}

/// Parses a multi-document YAML stream. Empty documents (or documents that are only `null`)
/// are dropped, like kustomize does.
pub fn parse_stream(text: &str, origin: &str) -> Result<Vec<Value>> {
    parse_stream_with(text, origin, Limits::default())
}

/// Parses a single YAML document (the first one of the stream); an empty text gives `null`.
pub fn parse_one(text: &str, origin: &str) -> Result<Value> {
    parse_one_with(text, origin, Limits::default())
}

/// [`parse_one`] with explicit limits.
pub fn parse_one_with(text: &str, origin: &str, limits: Limits) -> Result<Value> {
    let mut docs = parse_documents(text, origin, limits)?;
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
    /// The 1-based line where the document's content starts.
    pub line: usize,
}

/// Like [`parse_stream_with`], also reporting where empty mapping values are (the whole text
/// on this thread; `super::parse_stream_tracked` may split a large one).
pub(crate) fn parse_stream_tracked_with(
    text: &str,
    origin: &str,
    limits: Limits,
) -> Result<Vec<TrackedDoc>> {
    let (docs, empties, lines) = parse_documents_inner(text, origin, limits, true)?;
    Ok(docs
        .into_iter()
        .zip(empties)
        .zip(lines)
        .filter(|((d, _), _)| !d.is_null())
        .map(|((value, empty_values), line)| TrackedDoc {
            value,
            empty_values,
            line,
        })
        .collect())
}

fn parse_documents(text: &str, origin: &str, limits: Limits) -> Result<Vec<Value>> {
    parse_documents_inner(text, origin, limits, false).map(|(d, _, _)| d)
}

type Docs = (Vec<Value>, Vec<Vec<Vec<PathSeg>>>, Vec<usize>);

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
        max_depth: limits.max_depth.min(MAX_DEPTH_CEILING),
        budget: limits.expansion_budget(text.len()),
        nodes: 0,
        content: 0,
        charged: 0,
        aliased: false,
        anchors: HashMap::new(),
        chars: text.chars().count(),
        ends_with_newline: text.ends_with('\n'),
        track,
        empties: Vec::new(),
        doc_lines: Vec::new(),
    };
    let docs = conv.stream()?;
    let mut empties = std::mem::take(&mut conv.empties);
    empties.resize(docs.len(), Vec::new());
    let mut lines = std::mem::take(&mut conv.doc_lines);
    if track {
        lines.resize(docs.len(), 1);
    }
    Ok((docs, empties, lines))
}

/// An anchored node, kept for the aliases that follow it.
struct Anchor {
    value: Value,
    nodes: usize,
    size: usize,
}

/// A collection whose end has not been read yet.
struct Frame {
    open: Open,
    anchor: usize,
    mark: Marker,
    nodes_at_start: usize,
    content_at_start: usize,
}

enum Open {
    Seq(Vec<Value>),
    Map {
        map: Map<String, Value>,
        /// Mappings given by `<<` merge keys, applied when the mapping ends.
        merged: Vec<Map<String, Value>>,
        /// The key read last, while its value is being read.
        key: Option<Key>,
    },
}

struct Key {
    name: String,
    merge: bool,
    mark: Marker,
}

struct Converter<'a> {
    parser: Parser<std::str::Chars<'a>>,
    origin: &'a str,
    limits: Limits,
    max_depth: usize,
    /// Largest expanded size of the stream, in bytes.
    budget: usize,
    nodes: usize,
    /// Expanded size of the values produced so far, aliases counted in full.
    content: usize,
    /// `content` plus anchor copies and recorded paths: what `budget` bounds.
    charged: usize,
    /// Whether an alias has been expanded (for the error message).
    aliased: bool,
    anchors: HashMap<usize, Anchor>,
    chars: usize,
    ends_with_newline: bool,
    track: bool,
    /// Per document, the paths of empty mapping values (only when tracking).
    empties: Vec<Vec<Vec<PathSeg>>>,
    /// Per document, the line its content starts on (only when tracking).
    doc_lines: Vec<usize>,
}

impl Converter<'_> {
    fn next(&mut self) -> Result<(Event, Marker)> {
        self.parser.next_token().map_err(|e| KustomizeError::Yaml {
            origin: self.origin.to_string(),
            line: e.marker().line(),
            col: Some(e.marker().col() + 1),
            message: e.info().to_string(),
        })
    }

    fn err(&self, mark: &Marker, msg: impl std::fmt::Display) -> KustomizeError {
        KustomizeError::Yaml {
            origin: self.origin.to_string(),
            line: mark.line(),
            col: Some(mark.col() + 1),
            message: msg.to_string(),
        }
    }

    fn limit_err(&self, mark: &Marker, msg: impl std::fmt::Display) -> KustomizeError {
        KustomizeError::YamlLimit {
            origin: self.origin.to_string(),
            message: format!("line {}: {msg}", mark.line()),
        }
    }

    fn count(&mut self, n: usize, mark: &Marker) -> Result<()> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > self.limits.max_nodes {
            let what = if self.aliased { " through aliases" } else { "" };
            let max = self.limits.max_nodes;
            return Err(self.limit_err(mark, format!("document has more than {max} nodes{what}")));
        }
        Ok(())
    }

    /// Adds `size` bytes to what the stream holds, failing past the budget.
    fn charge(&mut self, size: usize, mark: &Marker) -> Result<()> {
        self.charged = self.charged.saturating_add(size);
        if self.charged > self.budget {
            let what = if self.aliased { " through aliases" } else { "" };
            let msg = format!("document expands to more than {} bytes{what}", self.budget);
            return Err(self.limit_err(mark, msg));
        }
        Ok(())
    }

    /// Adds `size` bytes of document content.
    fn grow(&mut self, size: usize, mark: &Marker) -> Result<()> {
        self.content = self.content.saturating_add(size);
        self.charge(size, mark)
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
                    if self.track {
                        self.doc_lines.push(mark.line());
                    }
                    if matches!(ev, Event::DocumentEnd) {
                        docs.push(Value::Null);
                        continue;
                    }
                    docs.push(self.document(ev, mark)?);
                }
                other => return Err(self.err(&mark, format!("unexpected event {other:?}"))),
            }
        }
        Ok(docs)
    }

    /// Converts the document whose root node starts with `ev`.
    fn document(&mut self, mut ev: Event, mut mark: Marker) -> Result<Value> {
        let mut stack: Vec<Frame> = Vec::new();
        loop {
            // a finished node: its value, whether it is a `<<` key, and where it started
            let done = match ev {
                Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                    self.check_depth(stack.len(), &mark)?;
                    self.count(1, &mark)?;
                    self.grow(NODE_OVERHEAD, &mark)?;
                    let open = if matches!(ev, Event::SequenceStart(..)) {
                        Open::Seq(Vec::new())
                    } else {
                        Open::Map {
                            map: Map::new(),
                            merged: Vec::new(),
                            key: None,
                        }
                    };
                    stack.push(Frame {
                        open,
                        anchor,
                        mark,
                        nodes_at_start: self.nodes.saturating_sub(1),
                        content_at_start: self.content.saturating_sub(NODE_OVERHEAD),
                    });
                    None
                }
                Event::SequenceEnd | Event::MappingEnd => {
                    let Some(frame) = stack.pop() else {
                        return Err(self.err(&mark, format!("unexpected event {ev:?}")));
                    };
                    let start = frame.mark;
                    Some((self.close(frame, &mark)?, false, start))
                }
                Event::Alias(id) => {
                    self.check_depth(stack.len(), &mark)?;
                    Some((self.alias(id, &mark)?, false, mark))
                }
                Event::Scalar(text, style, anchor, tag) => {
                    self.check_depth(stack.len(), &mark)?;
                    if self.track
                        && style == TScalarStyle::Plain
                        && tag.is_none()
                        && text.is_empty()
                    {
                        self.record_empty(&stack, &mark)?;
                    }
                    let merge = style == TScalarStyle::Plain && tag.is_none() && text == "<<";
                    let v = self.scalar(text, style, anchor, tag.as_ref(), &mark)?;
                    Some((v, merge, mark))
                }
                other => return Err(self.err(&mark, format!("unexpected event {other:?}"))),
            };
            if let Some((value, merge, start)) = done
                && let Some(root) = self.attach(&mut stack, value, merge, start)?
            {
                return Ok(root);
            }
            (ev, mark) = self.next()?;
        }
    }

    fn check_depth(&self, depth: usize, mark: &Marker) -> Result<()> {
        if depth > self.max_depth {
            let msg = format!("nesting deeper than {} levels", self.max_depth);
            return Err(self.limit_err(mark, msg));
        }
        Ok(())
    }

    /// Keeps a copy of an anchored node (`id` 0 is none), counting the copy against the
    /// budget before making it.
    fn keep_anchor(
        &mut self,
        id: usize,
        value: &Value,
        nodes: usize,
        size: usize,
        mark: &Marker,
    ) -> Result<()> {
        if id > 0 {
            self.charge(size, mark)?;
            let value = value.clone();
            self.anchors.insert(id, Anchor { value, nodes, size });
        }
        Ok(())
    }

    fn alias(&mut self, id: usize, mark: &Marker) -> Result<Value> {
        let Some((nodes, size)) = self.anchors.get(&id).map(|a| (a.nodes, a.size)) else {
            return Err(self.err(mark, "unknown anchor"));
        };
        self.aliased = true;
        self.count(nodes, mark)?;
        self.grow(size, mark)?;
        Ok(self
            .anchors
            .get(&id)
            .map_or(Value::Null, |a| a.value.clone()))
    }

    fn scalar(
        &mut self,
        mut text: String,
        style: TScalarStyle,
        anchor: usize,
        tag: Option<&Tag>,
        mark: &Marker,
    ) -> Result<Value> {
        self.count(1, mark)?;
        let size = text.len().saturating_add(NODE_OVERHEAD);
        self.grow(size, mark)?;
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
        let v = scalar(text, style, tag, self.limits.yaml11).map_err(|m| self.err(mark, m))?;
        self.keep_anchor(anchor, &v, 1, size, mark)?;
        Ok(v)
    }

    /// Ends a collection: its value, after merge keys are applied.
    fn close(&mut self, frame: Frame, mark: &Marker) -> Result<Value> {
        let value = match frame.open {
            Open::Seq(items) => Value::Array(items),
            Open::Map { key: Some(_), .. } => {
                return Err(self.err(mark, "mapping ended before a value"));
            }
            Open::Map {
                mut map, merged, ..
            } => {
                for o in merged {
                    for (k, v) in o {
                        if !map.contains_key(&k) {
                            map.insert(k, v);
                        }
                    }
                }
                Value::Object(map)
            }
        };
        let nodes = self.nodes.saturating_sub(frame.nodes_at_start);
        let size = self.content.saturating_sub(frame.content_at_start);
        self.keep_anchor(frame.anchor, &value, nodes, size, mark)?;
        Ok(value)
    }

    /// Puts a finished node into the collection being read; returns it when it is the root.
    fn attach(
        &mut self,
        stack: &mut [Frame],
        value: Value,
        merge: bool,
        start: Marker,
    ) -> Result<Option<Value>> {
        let Some(top) = stack.last_mut() else {
            return Ok(Some(value));
        };
        let (map, merged, key) = match &mut top.open {
            Open::Seq(items) => {
                items.push(value);
                return Ok(None);
            }
            Open::Map { map, merged, key } => (map, merged, key),
        };
        let Some(k) = key.take() else {
            let name = match value {
                Value::String(s) => s,
                Value::Null => "null".to_string(),
                other => {
                    let s = other.to_string();
                    self.charge(s.len(), &start)?;
                    s
                }
            };
            *key = Some(Key {
                name,
                merge,
                mark: start,
            });
            return Ok(None);
        };
        if k.merge {
            let bad = "map merge requires map or sequence of maps";
            match value {
                Value::Object(o) => merged.push(o),
                Value::Array(list) => {
                    for item in list {
                        let Value::Object(o) = item else {
                            return Err(self.err(&k.mark, bad));
                        };
                        merged.push(o);
                    }
                }
                _ => return Err(self.err(&k.mark, bad)),
            }
            return Ok(None);
        }
        if map.contains_key(&k.name) {
            let msg = format!("mapping key \"{}\" already defined", k.name);
            return Err(self.err(&k.mark, msg));
        }
        map.insert(k.name, value);
        Ok(None)
    }

    /// Records the path of the empty value about to be read, if it is a mapping value.
    fn record_empty(&mut self, stack: &[Frame], mark: &Marker) -> Result<()> {
        let awaiting_value = stack
            .last()
            .is_some_and(|f| matches!(f.open, Open::Map { key: Some(_), .. }));
        if !awaiting_value {
            return Ok(());
        }
        // what the path takes in memory
        let seg = std::mem::size_of::<PathSeg>();
        let size = stack.iter().fold(0usize, |n, frame| match &frame.open {
            Open::Map { key: Some(k), .. } => n.saturating_add(seg.saturating_add(k.name.len())),
            _ => n.saturating_add(seg),
        });
        self.charge(size, mark)?;
        let mut path = Vec::with_capacity(stack.len());
        for frame in stack {
            match &frame.open {
                Open::Seq(items) => path.push(PathSeg::Index(items.len())),
                Open::Map { key: Some(k), .. } => path.push(PathSeg::Key(k.name.clone())),
                // inside a complex key
                Open::Map { key: None, .. } => {}
            }
        }
        if let Some(last) = self.empties.last_mut() {
            last.push(path);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn yaml11_booleans_only_when_asked() {
        let text = "n: a\non: yes\nq: \"no\"\nt: True\n";
        let v12 = parse_one(text, "t.yaml").unwrap();
        assert_eq!(
            v12,
            serde_json::json!({"n": "a", "on": "yes", "q": "no", "t": true})
        );
        let limits = Limits {
            yaml11: true,
            ..Limits::default()
        };
        let v11 = parse_one_with(text, "t.yaml", limits).unwrap();
        assert_eq!(
            v11,
            serde_json::json!({"false": "a", "true": true, "q": "no", "t": true})
        );
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
        assert!(e.starts_with("bad.yaml:2:2: invalid YAML: "), "{e}");
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
