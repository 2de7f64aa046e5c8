//! Events → a graph of nodes (go-yaml v3's `yaml.Node`): documents, mappings, sequences,
//! scalars and aliases pointing at anchored nodes, each with its head, line and foot comment.

use std::collections::HashMap;

use super::parser::{Ev, Event, Parser};
use super::resolve::{MERGE, STR, resolve_plain, short_tag};
use super::scanner::Fail;
use super::scanner::Style;

/// Deepest nesting of collections (the tree allows 256 levels below the document).
pub(super) const MAX_DEPTH: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    Document,
    Sequence,
    Mapping,
    Scalar,
    Alias,
}

#[derive(Debug, Clone)]
pub(super) struct Node {
    pub kind: Kind,
    /// The short tag (`!!str`, `!!int`, `!custom`, …).
    pub tag: String,
    pub style: Style,
    pub flow: bool,
    pub value: String,
    /// For an alias: the anchored node.
    pub alias: Option<usize>,
    /// 1-based line, for messages.
    pub line: i64,
    pub head: String,
    pub line_comment: String,
    pub foot: String,
    pub content: Vec<usize>,
}

pub(super) struct Composer {
    parser: Parser,
    current: Option<Event>,
    started: bool,
    pub nodes: Vec<Node>,
    anchors: HashMap<String, usize>,
}

impl Composer {
    pub(super) fn new(parser: Parser) -> Composer {
        Composer {
            parser,
            current: None,
            started: false,
            nodes: Vec::new(),
            anchors: HashMap::new(),
        }
    }

    fn peek(&mut self) -> Result<Ev, Fail> {
        if self.current.is_none() {
            self.current = self.parser.next_event()?;
        }
        Ok(self.current.as_ref().map_or(Ev::StreamEnd, |e| e.kind))
    }

    fn expect(&mut self, kind: Ev) -> Result<Event, Fail> {
        self.peek()?;
        match self.current.take() {
            Some(e) if e.kind == kind => Ok(e),
            _ => Err(Fail::Msg(format!("expected {kind:?} event"))),
        }
    }

    fn event(&self) -> Result<&Event, Fail> {
        self.current
            .as_ref()
            .ok_or_else(|| Fail::Msg("unexpected end of the event stream".into()))
    }

    /// A node from the current event (its position and comments).
    fn new_node(&mut self, kind: Kind, default_tag: &str, value: String) -> Result<usize, Fail> {
        let ev = self
            .current
            .as_mut()
            .ok_or_else(|| Fail::Msg("no current event".into()))?;
        let tag = if !ev.tag.is_empty() && ev.tag != "!" {
            short_tag(&ev.tag)
        } else if !default_tag.is_empty() {
            default_tag.to_string()
        } else if kind == Kind::Scalar {
            resolve_plain(&value).tag().to_string()
        } else {
            String::new()
        };
        let node = Node {
            kind,
            tag,
            style: Style::Plain,
            flow: false,
            value,
            alias: None,
            line: ev.start.line + 1,
            head: std::mem::take(&mut ev.head),
            line_comment: std::mem::take(&mut ev.line),
            foot: std::mem::take(&mut ev.foot),
            content: Vec::new(),
        };
        self.nodes.push(node);
        Ok(self.nodes.len() - 1)
    }

    fn set_anchor(&mut self, n: usize, anchor: &str) {
        if !anchor.is_empty() {
            self.anchors.insert(anchor.to_string(), n);
        }
    }

    /// The next document of the stream (`None` at its end).
    pub(super) fn next_document(&mut self) -> Result<Option<usize>, Fail> {
        if !self.started {
            self.expect(Ev::StreamStart)?;
            self.started = true;
        }
        match self.peek()? {
            Ev::StreamEnd => Ok(None),
            Ev::DocumentStart => self.document().map(Some),
            other => Err(Fail::Msg(format!("unexpected {other:?} event"))),
        }
    }

    fn document(&mut self) -> Result<usize, Fail> {
        let n = self.new_node(Kind::Document, "", String::new())?;
        self.expect(Ev::DocumentStart)?;
        self.child(n, 1)?;
        if self.peek()? == Ev::DocumentEnd {
            let foot = self.event()?.foot.clone();
            if let Some(node) = self.nodes.get_mut(n) {
                node.foot = foot;
            }
        }
        self.expect(Ev::DocumentEnd)?;
        Ok(n)
    }

    fn child(&mut self, parent: usize, depth: usize) -> Result<usize, Fail> {
        if depth > MAX_DEPTH + 1 {
            return Err(Fail::Msg(format!(
                "the document is nested deeper than {MAX_DEPTH} levels"
            )));
        }
        let c = match self.peek()? {
            Ev::Scalar => self.scalar()?,
            Ev::Alias => self.alias()?,
            Ev::MappingStart => self.mapping(depth)?,
            Ev::SequenceStart => self.sequence(depth)?,
            other => return Err(Fail::Msg(format!("unexpected {other:?} event"))),
        };
        if let Some(p) = self.nodes.get_mut(parent) {
            p.content.push(c);
        }
        Ok(c)
    }

    fn alias(&mut self) -> Result<usize, Fail> {
        let name = self.event()?.anchor.clone();
        let n = self.new_node(Kind::Alias, "", name.clone())?;
        let target = self
            .anchors
            .get(&name)
            .copied()
            .ok_or_else(|| Fail::Msg(format!("yaml: unknown anchor '{name}' referenced")))?;
        if let Some(node) = self.nodes.get_mut(n) {
            node.alias = Some(target);
        }
        self.expect(Ev::Alias)?;
        Ok(n)
    }

    fn scalar(&mut self) -> Result<usize, Fail> {
        let (style, value, anchor) = {
            let ev = self
                .current
                .as_mut()
                .ok_or_else(|| Fail::Msg("no event".into()))?;
            (
                ev.style,
                std::mem::take(&mut ev.value),
                std::mem::take(&mut ev.anchor),
            )
        };
        let default_tag = match style {
            Style::Plain if value == "<<" => MERGE,
            Style::Plain => "",
            _ => STR,
        };
        let n = self.new_node(Kind::Scalar, default_tag, value)?;
        if let Some(node) = self.nodes.get_mut(n) {
            node.style = style;
        }
        self.set_anchor(n, &anchor);
        self.expect(Ev::Scalar)?;
        Ok(n)
    }

    fn sequence(&mut self, depth: usize) -> Result<usize, Fail> {
        let (flow, anchor) = {
            let ev = self.event()?;
            (ev.flow, ev.anchor.clone())
        };
        let n = self.new_node(Kind::Sequence, "!!seq", String::new())?;
        if let Some(node) = self.nodes.get_mut(n) {
            node.flow = flow;
        }
        self.set_anchor(n, &anchor);
        self.expect(Ev::SequenceStart)?;
        while self.peek()? != Ev::SequenceEnd {
            self.child(n, depth + 1)?;
        }
        let end = self.expect(Ev::SequenceEnd)?;
        if let Some(node) = self.nodes.get_mut(n) {
            node.line_comment = end.line;
            node.foot = end.foot;
        }
        Ok(n)
    }

    fn mapping(&mut self, depth: usize) -> Result<usize, Fail> {
        let (flow, anchor) = {
            let ev = self.event()?;
            (ev.flow, ev.anchor.clone())
        };
        let n = self.new_node(Kind::Mapping, "!!map", String::new())?;
        if let Some(node) = self.nodes.get_mut(n) {
            node.flow = flow;
        }
        self.set_anchor(n, &anchor);
        self.expect(Ev::MappingStart)?;
        while self.peek()? != Ev::MappingEnd {
            let k = self.child(n, depth + 1)?;
            let len = self.content_len(n);
            if !flow && len > 2 && !self.foot(k).is_empty() {
                let prev = self
                    .nodes
                    .get(n)
                    .and_then(|p| p.content.get(len - 3))
                    .copied();
                if let Some(prev) = prev {
                    let foot = self.take_foot(k);
                    if let Some(p) = self.nodes.get_mut(prev) {
                        p.foot = foot;
                    }
                }
            }
            let v = self.child(n, depth + 1)?;
            if self.foot(k).is_empty() && !self.foot(v).is_empty() {
                let foot = self.take_foot(v);
                if let Some(kn) = self.nodes.get_mut(k) {
                    kn.foot = foot;
                }
            }
        }
        let end = self.expect(Ev::MappingEnd)?;
        let len = self.content_len(n);
        let last_key = self
            .nodes
            .get(n)
            .and_then(|p| p.content.get(len.wrapping_sub(2)))
            .copied();
        if let Some(node) = self.nodes.get_mut(n) {
            node.line_comment = end.line;
            node.foot = end.foot;
        }
        if !flow && len > 1 && !self.foot(n).is_empty() {
            let foot = self.take_foot(n);
            if let Some(k) = last_key.and_then(|k| self.nodes.get_mut(k)) {
                k.foot = foot;
            }
        }
        Ok(n)
    }

    fn content_len(&self, n: usize) -> usize {
        self.nodes.get(n).map_or(0, |x| x.content.len())
    }

    fn foot(&self, n: usize) -> &str {
        self.nodes.get(n).map_or("", |x| x.foot.as_str())
    }

    fn take_foot(&mut self, n: usize) -> String {
        self.nodes
            .get_mut(n)
            .map(|x| std::mem::take(&mut x.foot))
            .unwrap_or_default()
    }
}
