//! The tree → go-yaml nodes → emitter events, as sops' YAML store and go-yaml's encoder do
//! it: comments are gathered into head, line and foot comments of the nodes around them, and
//! each scalar gets the style go-yaml's first encoding pass (`Node.Encode`) gives it.

use base64::Engine;
use zeroize::Zeroize;

use super::analyze::{Analysis, analyze};
use super::resolve::{Resolved, format_float, is_base60_float, is_old_bool, resolve_plain};
use super::scanner::Style;
use crate::error::SopsError;
use crate::tree::{Branch, Entry, Value};

const MERGE_TAG: &str = "tag:yaml.org,2002:merge";
const BINARY_TAG: &str = "tag:yaml.org,2002:binary";
/// Deepest tree the emitter accepts (loaders allow 256 levels).
const MAX_DEPTH: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EvKind {
    StreamStart,
    StreamEnd,
    DocumentStart,
    DocumentEnd,
    Scalar,
    SequenceStart,
    SequenceEnd,
    MappingStart,
    MappingEnd,
}

/// An emitter event (go-yaml's `yaml_event_t`, the parts sops' output uses).
#[derive(Debug, Clone)]
pub(super) struct EEvent {
    pub kind: EvKind,
    pub value: String,
    /// Long tag (`tag:yaml.org,2002:…`) or empty.
    pub tag: String,
    pub style: Style,
    pub head: String,
    pub line: String,
    pub foot: String,
    pub tail: String,
}

impl EEvent {
    fn new(kind: EvKind) -> EEvent {
        EEvent {
            kind,
            value: String::new(),
            tag: String::new(),
            style: Style::Plain,
            head: String::new(),
            line: String::new(),
            foot: String::new(),
            tail: String::new(),
        }
    }

    pub(super) fn implicit(&self) -> bool {
        self.tag.is_empty()
    }
}

/// The events of a whole stream; their text is wiped when dropped.
pub(super) struct Events(pub Vec<EEvent>);

impl Drop for Events {
    fn drop(&mut self) {
        for e in &mut self.0 {
            e.value.zeroize();
            e.head.zeroize();
            e.line.zeroize();
            e.foot.zeroize();
            e.tail.zeroize();
        }
    }
}

enum Body {
    Scalar {
        value: String,
        tag: String,
        style: Style,
    },
    Seq(Vec<ENode>),
    Map(Vec<(ENode, ENode)>),
}

/// A go-yaml node as sops builds it for output.
struct ENode {
    body: Body,
    head: String,
    line: String,
    foot: String,
}

impl ENode {
    fn scalar(value: String, tag: &str, style: Style) -> ENode {
        ENode {
            body: Body::Scalar {
                value,
                tag: tag.to_string(),
                style,
            },
            head: String::new(),
            line: String::new(),
            foot: String::new(),
        }
    }
}

/// `#a\n#b` from comment texts `a`, `b` (the texts are wiped).
fn joined(comments: &mut Vec<String>) -> Option<String> {
    if comments.is_empty() {
        return None;
    }
    let s = format!("#{}", comments.join("\n#"));
    for c in comments.iter_mut() {
        c.zeroize();
    }
    comments.clear();
    Some(s)
}

/// Puts comments before what `slot` holds.
fn add_head(slot: &mut String, comments: &mut Vec<String>) {
    if let Some(mut c) = joined(comments) {
        if !slot.is_empty() {
            c.push('\n');
            c.push_str(slot);
            slot.zeroize();
        }
        *slot = c;
    }
}

/// Puts comments after what `slot` holds.
fn add_after(slot: &mut String, comments: &mut Vec<String>) {
    if let Some(mut c) = joined(comments) {
        if !slot.is_empty() {
            slot.push('\n');
        }
        slot.push_str(&c);
        c.zeroize();
    }
}

/// The style go-yaml's encoder picks for a string (YAML 1.1-ambiguous text is quoted).
fn string_node(s: &str) -> ENode {
    let requested = if s.contains('\n') {
        Style::Literal
    } else if resolve_plain(s) == Resolved::Str && !is_base60_float(s) && !is_old_bool(s) {
        Style::Plain
    } else {
        Style::Double
    };
    let style = first_pass_style(requested, &analyze(s));
    let tag = if style == Style::Plain && s == "<<" {
        MERGE_TAG
    } else {
        ""
    };
    ENode::scalar(s.to_string(), tag, style)
}

/// Bytes that are not UTF-8: `!!binary` with base64 in lines of 70.
fn binary_node(b: &[u8]) -> ENode {
    let enc = base64::engine::general_purpose::STANDARD.encode(b);
    let mut s = String::with_capacity(enc.len() + enc.len() / 70 + 1);
    let multi = enc.len() / 70 + 1 > 1;
    for chunk in enc.as_bytes().chunks(70) {
        s.push_str(std::str::from_utf8(chunk).unwrap_or(""));
        if multi {
            s.push('\n');
        }
    }
    let requested = if s.contains('\n') {
        Style::Literal
    } else {
        Style::Plain
    };
    let style = first_pass_style(requested, &analyze(&s));
    ENode::scalar(s, BINARY_TAG, style)
}

/// The emitter's style choice for a scalar at the root of a document (the first pass).
fn first_pass_style(requested: Style, a: &Analysis) -> Style {
    let mut style = requested;
    if style == Style::Plain && !a.block_plain_allowed {
        style = Style::Single;
    }
    if style == Style::Single && !a.single_quoted_allowed {
        style = Style::Double;
    }
    if matches!(style, Style::Literal | Style::Folded) && !a.block_allowed {
        style = Style::Double;
    }
    style
}

fn value_node(v: &Value, depth: usize) -> Result<ENode, SopsError> {
    if depth > MAX_DEPTH {
        return Err(SopsError::Emit(
            "the tree is nested too deeply for YAML".into(),
        ));
    }
    Ok(match v {
        Value::Null => ENode::scalar("null".into(), "", Style::Plain),
        Value::Bool(b) => ENode::scalar(b.to_string(), "", Style::Plain),
        Value::Int(i) => ENode::scalar(i.to_string(), "", Style::Plain),
        Value::Float(f) => ENode::scalar(format_float(*f), "", Style::Plain),
        Value::Time(t) => ENode::scalar(t.clone(), "", Style::Plain),
        Value::Str(s) => string_node(s),
        Value::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => string_node(s),
            Err(_) => binary_node(b),
        },
        Value::Map(entries) => map_node(entries, depth)?,
        Value::List(items) => seq_node(items, depth)?,
        Value::Comment(_) | Value::LineComment(_) => {
            return Err(SopsError::Emit(
                "a comment cannot be the value of a YAML map entry".into(),
            ));
        }
    })
}

/// sops' `appendTreeBranch`: comments before the first entry head the mapping, later ones
/// head the next key; line comments go to the next value; trailing ones foot the last key.
fn map_node(entries: &[Entry], depth: usize) -> Result<ENode, SopsError> {
    let mut node = ENode {
        body: Body::Map(Vec::new()),
        head: String::new(),
        line: String::new(),
        foot: String::new(),
    };
    let mut pairs: Vec<(ENode, ENode)> = Vec::new();
    let mut heads = Vec::new();
    let mut inlines = Vec::new();
    for e in entries {
        match e {
            Entry::Comment(c) => heads.push(c.clone()),
            Entry::LineComment(c) => inlines.push(c.clone()),
            Entry::Pair(k, v) => {
                if pairs.is_empty() {
                    add_head(&mut node.head, &mut heads);
                }
                let mut key = string_node(k);
                add_head(&mut key.head, &mut heads);
                let mut value = value_node(v, depth + 1)?;
                add_after(&mut value.line, &mut inlines);
                pairs.push((key, value));
            }
        }
    }
    heads.append(&mut inlines);
    match pairs.last_mut() {
        None => add_head(&mut node.head, &mut heads),
        Some((k, _)) => add_after(&mut k.foot, &mut heads),
    }
    node.body = Body::Map(pairs);
    Ok(node)
}

/// sops' `appendSequence`, the same rules for list elements.
fn seq_node(items: &[Value], depth: usize) -> Result<ENode, SopsError> {
    let mut node = ENode {
        body: Body::Seq(Vec::new()),
        head: String::new(),
        line: String::new(),
        foot: String::new(),
    };
    let mut out: Vec<ENode> = Vec::new();
    let mut heads = Vec::new();
    let mut inlines = Vec::new();
    for v in items {
        match v {
            Value::Comment(c) => heads.push(c.clone()),
            Value::LineComment(c) => inlines.push(c.clone()),
            other => {
                if out.is_empty() {
                    add_head(&mut node.head, &mut heads);
                }
                let mut item = value_node(other, depth + 1)?;
                add_head(&mut item.head, &mut heads);
                add_after(&mut item.line, &mut inlines);
                out.push(item);
            }
        }
    }
    heads.append(&mut inlines);
    match out.last_mut() {
        None => add_head(&mut node.head, &mut heads),
        Some(last) => add_after(&mut last.foot, &mut heads),
    }
    node.body = Body::Seq(out);
    Ok(node)
}

/// go-yaml's `encoder.node`: a key's foot comment is carried as the "tail" of the next key
/// (or of the mapping's end), written once the value before it is complete.
fn node_events(n: ENode, tail: String, out: &mut Vec<EEvent>) {
    let ENode {
        body,
        head,
        line,
        foot,
    } = n;
    match body {
        Body::Scalar { value, tag, style } => {
            let mut ev = EEvent::new(EvKind::Scalar);
            ev.value = value;
            ev.tag = tag;
            ev.style = style;
            ev.head = head;
            ev.line = line;
            ev.foot = foot;
            ev.tail = tail;
            out.push(ev);
        }
        Body::Seq(items) => {
            let mut start = EEvent::new(EvKind::SequenceStart);
            start.head = head;
            out.push(start);
            for item in items {
                node_events(item, String::new(), out);
            }
            let mut end = EEvent::new(EvKind::SequenceEnd);
            end.line = line;
            end.foot = foot;
            out.push(end);
        }
        Body::Map(pairs) => {
            let mut start = EEvent::new(EvKind::MappingStart);
            start.tail = tail;
            start.head = head;
            out.push(start);
            let mut carried = String::new();
            for (mut k, v) in pairs {
                let foot = std::mem::take(&mut k.foot);
                node_events(k, std::mem::take(&mut carried), out);
                carried = foot;
                node_events(v, String::new(), out);
            }
            let mut end = EEvent::new(EvKind::MappingEnd);
            end.tail = carried;
            end.line = line;
            end.foot = foot;
            out.push(end);
        }
    }
}

/// The events go-yaml's encoder sends for sops' documents.
pub(super) fn events(branches: &[Branch]) -> Result<Events, SopsError> {
    let mut out = Events(vec![EEvent::new(EvKind::StreamStart)]);
    for branch in branches {
        let root = map_node(branch, 0)?;
        out.0.push(EEvent::new(EvKind::DocumentStart));
        node_events(root, String::new(), &mut out.0);
        out.0.push(EEvent::new(EvKind::DocumentEnd));
    }
    out.0.push(EEvent::new(EvKind::StreamEnd));
    Ok(out)
}
