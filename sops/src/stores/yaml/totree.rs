//! Nodes → the sops tree, as sops' YAML store builds it: comments become items in source
//! order (a value's line comment becomes a "line comment" item before it), aliases are
//! expanded (bounded), scalars take go-yaml's types. Also the checks go-yaml's decoder makes
//! on the first document (duplicate keys, tagged scalars that do not fit their tag).

use std::collections::{HashMap, HashSet};

use base64::Engine;

use super::compose::{Kind, MAX_DEPTH, Node};
use super::resolve::{BINARY, MERGE, NULL, Resolved, STR, resolve_tagged};
use super::scanner::Fail;
use crate::tree::{Branch, Entry, Value};

/// How many tree items alias expansion may add beyond the document's own nodes.
pub(super) const ALIAS_BUDGET: usize = 1_000_000;

/// Converts documents one by one (aliases may point into earlier documents).
pub(super) struct Converter<'a> {
    nodes: &'a [Node],
    /// Tree items made so far (all documents) and the most allowed.
    spent: usize,
    limit: usize,
    expanding: HashSet<usize>,
    /// The first key that is not a string: sops fails on it only when it walks the tree,
    /// after every document loaded.
    pub key_error: Option<String>,
}

fn node(nodes: &[Node], n: usize) -> Result<&Node, Fail> {
    nodes
        .get(n)
        .ok_or_else(|| Fail::Msg("internal error: missing node".into()))
}

/// The text of each comment line (what follows `#`).
fn comment_lines(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split('\n').filter(|l| !l.is_empty()).map(|l| {
        let mut chars = l.chars();
        chars.next();
        chars.as_str().to_string()
    })
}

fn map_comments(text: &str, inline: bool, out: &mut Vec<Entry>) {
    for c in comment_lines(text) {
        out.push(if inline {
            Entry::LineComment(c)
        } else {
            Entry::Comment(c)
        });
    }
}

fn list_comments(text: &str, inline: bool, out: &mut Vec<Value>) {
    for c in comment_lines(text) {
        out.push(if inline {
            Value::LineComment(c)
        } else {
            Value::Comment(c)
        });
    }
}

/// go-yaml's reading of a node's tag (`ShortTag`).
fn is_null(n: &Node) -> bool {
    n.tag == NULL
}

/// The value go-yaml decodes a scalar to (`Err` when the text does not fit its tag).
pub(super) fn decode_scalar(n: &Node) -> Result<Value, String> {
    if n.tag == STR {
        return Ok(Value::Str(n.value.clone()));
    }
    let r = resolve_tagged(&n.tag, &n.value)
        .map_err(|()| format!("cannot decode a scalar tagged {} (line {})", n.tag, n.line))?;
    if n.tag == BINARY {
        let clean: String = n
            .value
            .chars()
            .filter(|c| *c != '\r' && *c != '\n')
            .collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(clean.as_bytes())
            .map_err(|_| "!!binary value contains invalid base64 data".to_string())?;
        return Ok(match String::from_utf8(bytes) {
            Ok(s) => Value::Str(s),
            Err(e) => Value::Bytes(e.into_bytes()),
        });
    }
    Ok(match r {
        Resolved::Null => Value::Null,
        Resolved::Bool(b) => Value::Bool(b),
        Resolved::Int(i) => Value::Int(i),
        Resolved::UInt(_) => {
            return Err(format!(
                "integer out of the 64-bit signed range (line {})",
                n.line
            ));
        }
        Resolved::Float(f) => Value::Float(f),
        Resolved::Time(t) => Value::Time(t),
        Resolved::Str => Value::Str(n.value.clone()),
    })
}

fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int",
        Value::Float(_) => "float64",
        Value::Time(_) => "time.Time",
        Value::Map(_) => "map[string]interface {}",
        Value::List(_) => "[]interface {}",
        _ => "string",
    }
}

impl<'a> Converter<'a> {
    /// A converter over the nodes parsed so far; `spent` items were made for earlier
    /// documents. At most the number of nodes plus [`ALIAS_BUDGET`] items are made.
    pub(super) fn new(nodes: &'a [Node], spent: usize) -> Converter<'a> {
        Converter {
            nodes,
            spent,
            limit: nodes.len().saturating_add(ALIAS_BUDGET),
            expanding: HashSet::new(),
            key_error: None,
        }
    }

    /// Tree items made so far.
    pub(super) fn spent(&self) -> usize {
        self.spent
    }

    fn spend(&mut self, n: usize) -> Result<(), Fail> {
        self.spent = self.spent.saturating_add(n);
        if self.spent > self.limit {
            return Err(Fail::Msg(
                "yaml: document contains excessive aliasing".into(),
            ));
        }
        Ok(())
    }

    /// Follows an alias, refusing one that contains itself.
    fn enter_alias(&mut self, n: &Node) -> Result<usize, Fail> {
        let target = n
            .alias
            .ok_or_else(|| Fail::Msg("internal error: alias without target".into()))?;
        if !self.expanding.insert(target) {
            return Err(Fail::Msg(format!(
                "yaml: anchor '{}' value contains itself",
                n.value
            )));
        }
        Ok(target)
    }

    /// One document as a branch.
    pub(super) fn document(&mut self, doc: usize) -> Result<Branch, Fail> {
        let mut out = Vec::new();
        self.append_branch(doc, &mut out, false, 0)?;
        Ok(out)
    }

    fn append_branch(
        &mut self,
        n: usize,
        out: &mut Vec<Entry>,
        handled: bool,
        depth: usize,
    ) -> Result<(), Fail> {
        if depth > MAX_DEPTH {
            return Err(Fail::Msg(format!(
                "the document is nested deeper than {MAX_DEPTH} levels"
            )));
        }
        let nodes = self.nodes;
        let nd = node(nodes, n)?;
        if !handled {
            map_comments(&nd.head, false, out);
            map_comments(&nd.line_comment, false, out);
        }
        match nd.kind {
            Kind::Document => {
                for &c in &nd.content {
                    self.append_branch(c, out, false, depth)?;
                }
            }
            Kind::Sequence => {
                return Err(Fail::Msg(
                    "YAML documents that are sequences are not supported".into(),
                ));
            }
            Kind::Mapping => {
                for pair in nd.content.chunks(2) {
                    let (Some(&k), Some(&v)) = (pair.first(), pair.get(1)) else {
                        continue;
                    };
                    let (kn, vn) = (node(nodes, k)?, node(nodes, v)?);
                    map_comments(&kn.head, false, out);
                    map_comments(&kn.line_comment, false, out);
                    let handle = matches!(vn.kind, Kind::Scalar | Kind::Alias);
                    if handle {
                        map_comments(&vn.head, false, out);
                        map_comments(&vn.line_comment, true, out);
                    }
                    let key = self.key(k, depth)?;
                    let value = self.value(v, handle, depth + 1)?;
                    self.spend(1)?;
                    out.push(Entry::Pair(key, value));
                    if handle {
                        map_comments(&vn.foot, false, out);
                    }
                    map_comments(&kn.foot, false, out);
                }
            }
            Kind::Scalar => {
                if is_null(nd) {
                    return Ok(());
                }
                return Err(Fail::Msg(
                    "YAML documents that are values are not supported".into(),
                ));
            }
            Kind::Alias => {
                let target = self.enter_alias(nd)?;
                self.append_branch(target, out, false, depth)?;
                self.expanding.remove(&target);
            }
        }
        if !handled {
            map_comments(&nd.foot, false, out);
        }
        Ok(())
    }

    fn key(&mut self, k: usize, depth: usize) -> Result<String, Fail> {
        let v = self.value(k, true, depth + 1)?;
        match v {
            Value::Str(s) => Ok(s),
            other => {
                if self.key_error.is_none() {
                    self.key_error = Some(format!(
                        "Tree contains a non-string key (type {}). Only string keys are supported",
                        go_type(&other)
                    ));
                }
                Ok(String::new())
            }
        }
    }

    fn value(&mut self, n: usize, handled: bool, depth: usize) -> Result<Value, Fail> {
        if depth > MAX_DEPTH {
            return Err(Fail::Msg(format!(
                "the document is nested deeper than {MAX_DEPTH} levels"
            )));
        }
        let nodes = self.nodes;
        let nd = node(nodes, n)?;
        self.spend(1)?;
        match nd.kind {
            Kind::Sequence => {
                let mut list = Vec::new();
                if !handled {
                    list_comments(&nd.head, false, &mut list);
                    list_comments(&nd.line_comment, false, &mut list);
                }
                for &item in &nd.content {
                    let it = node(nodes, item)?;
                    list_comments(&it.head, false, &mut list);
                    list_comments(&it.line_comment, true, &mut list);
                    let v = self.value(item, true, depth + 1)?;
                    list.push(v);
                    list_comments(&it.foot, false, &mut list);
                }
                if !handled {
                    list_comments(&nd.foot, false, &mut list);
                }
                Ok(Value::List(list))
            }
            Kind::Mapping => {
                let mut entries = Vec::new();
                self.append_branch(n, &mut entries, handled, depth)?;
                Ok(Value::Map(entries))
            }
            // sops ignores decoding errors here: the value becomes null.
            Kind::Scalar => Ok(decode_scalar(nd).unwrap_or(Value::Null)),
            Kind::Alias => {
                let target = self.enter_alias(nd)?;
                let v = self.value(target, false, depth)?;
                self.expanding.remove(&target);
                Ok(v)
            }
            Kind::Document => Err(Fail::Msg("internal error: nested document".into())),
        }
    }
}

/// The checks sops' first decoding pass (the first document into a Go map) makes: the root
/// is a mapping (or empty), no mapping repeats a key, tagged scalars fit their tag, merge
/// keys merge mappings. Type errors are gathered as go-yaml does; other errors stop at once.
pub(super) fn check_first_document(nodes: &[Node], doc: usize) -> Result<(), Fail> {
    let mut chk = Checker {
        nodes,
        expanding: HashSet::new(),
        steps: 0,
        errors: Vec::new(),
    };
    let d = node(nodes, doc)?;
    if let Some(&root) = d.content.first() {
        chk.root(root)?;
    }
    if chk.errors.is_empty() {
        Ok(())
    } else {
        Err(Fail::Msg(format!(
            "yaml: unmarshal errors:\n  {}",
            chk.errors.join("\n  ")
        )))
    }
}

struct Checker<'a> {
    nodes: &'a [Node],
    expanding: HashSet<usize>,
    steps: usize,
    errors: Vec<String>,
}

fn kind_tag(n: &Node) -> &str {
    match n.kind {
        Kind::Mapping => "!!map",
        Kind::Sequence => "!!seq",
        _ => &n.tag,
    }
}

impl Checker<'_> {
    fn step(&mut self, depth: usize) -> Result<(), Fail> {
        self.steps += 1;
        if depth > MAX_DEPTH || self.steps > ALIAS_BUDGET.saturating_add(self.nodes.len()) {
            return Err(Fail::Msg(
                "yaml: document contains excessive aliasing".into(),
            ));
        }
        Ok(())
    }

    fn enter(&mut self, nd: &Node) -> Result<usize, Fail> {
        let target = nd
            .alias
            .ok_or_else(|| Fail::Msg("internal error: alias without target".into()))?;
        if !self.expanding.insert(target) {
            return Err(Fail::Msg(format!(
                "yaml: anchor '{}' value contains itself",
                nd.value
            )));
        }
        Ok(target)
    }

    /// The document root, decoded into `map[string]interface{}`.
    fn root(&mut self, n: usize) -> Result<(), Fail> {
        let nodes = self.nodes;
        let nd = node(nodes, n)?;
        match nd.kind {
            Kind::Alias => {
                let t = self.enter(nd)?;
                self.root(t)?;
                self.expanding.remove(&t);
                Ok(())
            }
            Kind::Mapping => self.mapping(nd, true, 0),
            Kind::Scalar if is_null(nd) => Ok(()),
            Kind::Scalar => {
                decode_scalar(nd).map_err(|e| Fail::Msg(format!("yaml: {e}")))?;
                self.errors.push(format!(
                    "line {}: cannot unmarshal {} into map[string]interface {{}}",
                    nd.line, nd.tag
                ));
                Ok(())
            }
            _ => {
                self.errors.push(format!(
                    "line {}: cannot unmarshal {} into map[string]interface {{}}",
                    nd.line,
                    kind_tag(nd)
                ));
                Ok(())
            }
        }
    }

    /// A value decoded into `interface{}`.
    fn value(&mut self, n: usize, depth: usize) -> Result<(), Fail> {
        self.step(depth)?;
        let nodes = self.nodes;
        let nd = node(nodes, n)?;
        match nd.kind {
            Kind::Scalar => decode_scalar(nd)
                .map(|_| ())
                .map_err(|e| Fail::Msg(format!("yaml: {e}"))),
            Kind::Alias => {
                let t = self.enter(nd)?;
                self.value(t, depth + 1)?;
                self.expanding.remove(&t);
                Ok(())
            }
            Kind::Sequence | Kind::Document => {
                for &c in &nd.content {
                    self.value(c, depth + 1)?;
                }
                Ok(())
            }
            Kind::Mapping => self.mapping(nd, false, depth),
        }
    }

    /// A key: into a string at the root (type error for a collection), into `interface{}`
    /// below (a collection is fatal). Returns whether the value is decoded too.
    fn key(&mut self, n: usize, top: bool, depth: usize) -> Result<bool, Fail> {
        let nodes = self.nodes;
        let nd = node(nodes, n)?;
        match nd.kind {
            Kind::Alias => {
                let t = self.enter(nd)?;
                let r = self.key(t, top, depth + 1);
                self.expanding.remove(&t);
                r
            }
            Kind::Mapping | Kind::Sequence if top => {
                self.value_errors_only(n, depth)?;
                self.errors.push(format!(
                    "line {}: cannot unmarshal {} into string",
                    nd.line,
                    kind_tag(nd)
                ));
                Ok(false)
            }
            Kind::Mapping | Kind::Sequence => {
                self.value(n, depth + 1)?;
                Err(Fail::Msg("yaml: invalid map key".into()))
            }
            _ => {
                let v = decode_scalar(nd).map_err(|e| Fail::Msg(format!("yaml: {e}")))?;
                Ok(!(top && v == Value::Null))
            }
        }
    }

    /// go-yaml checks a mapping's keys for duplicates before decoding it into a string.
    fn value_errors_only(&mut self, n: usize, depth: usize) -> Result<(), Fail> {
        let nd = node(self.nodes, n)?;
        if nd.kind == Kind::Mapping {
            self.duplicates(nd);
        }
        let _ = depth;
        Ok(())
    }

    /// Records go-yaml's duplicate-key errors; `true` when there were some.
    fn duplicates(&mut self, nd: &Node) -> bool {
        let nodes = self.nodes;
        let keys: Vec<&Node> = nd
            .content
            .chunks(2)
            .filter_map(|p| p.first().and_then(|&k| nodes.get(k)))
            .collect();
        let mut by_key: HashMap<(Kind, &str), Vec<usize>> = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            by_key
                .entry((k.kind, k.value.as_str()))
                .or_default()
                .push(i);
        }
        let before = self.errors.len();
        for (i, ki) in keys.iter().enumerate() {
            let Some(same) = by_key.get(&(ki.kind, ki.value.as_str())) else {
                continue;
            };
            for &j in same.iter().filter(|&&j| j > i) {
                if let Some(kj) = keys.get(j) {
                    self.errors.push(format!(
                        "line {}: mapping key {:?} already defined at line {}",
                        kj.line, kj.value, ki.line
                    ));
                }
            }
        }
        self.errors.len() > before
    }

    fn mapping(&mut self, nd: &Node, top: bool, depth: usize) -> Result<(), Fail> {
        if self.duplicates(nd) {
            return Ok(());
        }
        let nodes = self.nodes;
        let mut merge = None;
        for pair in nd.content.chunks(2) {
            let (Some(&k), Some(&v)) = (pair.first(), pair.get(1)) else {
                continue;
            };
            let kn = node(nodes, k)?;
            if kn.kind == Kind::Scalar && kn.value == "<<" && kn.tag == MERGE {
                merge = Some(v);
                continue;
            }
            if self.key(k, top, depth)? {
                self.value(v, depth + 1)?;
            }
        }
        if let Some(v) = merge {
            self.merge(v, top, depth)?;
        }
        Ok(())
    }

    fn merge(&mut self, v: usize, top: bool, depth: usize) -> Result<(), Fail> {
        let nodes = self.nodes;
        let want_map =
            || Fail::Msg("yaml: map merge requires map or sequence of maps as the value".into());
        let target_kind = |n: &Node| match n.kind {
            Kind::Alias => n.alias.and_then(|t| nodes.get(t)).map(|t| t.kind),
            k => Some(k),
        };
        let vn = node(nodes, v)?;
        let parts: Vec<usize> = match vn.kind {
            Kind::Mapping => vec![v],
            Kind::Alias if target_kind(vn) == Some(Kind::Mapping) => vec![v],
            Kind::Sequence => {
                for &i in &vn.content {
                    if target_kind(node(nodes, i)?) != Some(Kind::Mapping) {
                        return Err(want_map());
                    }
                }
                vn.content.clone()
            }
            _ => return Err(want_map()),
        };
        for p in parts {
            let pn = node(nodes, p)?;
            let (m, alias) = match pn.kind {
                Kind::Alias => (self.enter(pn)?, true),
                _ => (p, false),
            };
            let mn = node(nodes, m)?;
            self.mapping(mn, top, depth + 1)?;
            if alias {
                self.expanding.remove(&m);
            }
        }
        Ok(())
    }
}
