//! go-yaml v3's emitter for the events sops' documents produce: block mappings and
//! sequences (empty ones in flow style), the five scalar styles' choice, and head, line,
//! foot and tail comments with go-yaml's spacing. Indent 4, lines never folded.

use zeroize::Zeroize;

use crate::error::SopsError;
use zeroize::Zeroizing;

use super::analyze::{Analysis, analyze};
use super::nodes::{EEvent, EvKind, Events};
use super::scanner::Style;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    StreamStart,
    FirstDocumentStart,
    DocumentStart,
    DocumentContent,
    DocumentEnd,
    FlowSequenceFirstItem,
    FlowSequenceTrailItem,
    FlowSequenceItem,
    FlowMappingFirstKey,
    FlowMappingTrailKey,
    FlowMappingKey,
    FlowMappingSimpleValue,
    FlowMappingValue,
    BlockSequenceFirstItem,
    BlockSequenceItem,
    BlockMappingFirstKey,
    BlockMappingKey,
    BlockMappingSimpleValue,
    BlockMappingValue,
    End,
}

const BEST_INDENT: i64 = 4;
/// go-yaml v3's default width is unlimited.
const BEST_WIDTH: i64 = i64::MAX / 4;

pub(super) struct Emitter<'a> {
    events: &'a [EEvent],
    pos: usize,
    pub(super) out: Zeroizing<Vec<u8>>,
    state: State,
    states: Vec<State>,
    pub(super) indent: i64,
    indents: Vec<i64>,
    flow_level: i64,
    simple_key_context: bool,
    pub(super) column: i64,
    pub(super) whitespace: bool,
    pub(super) indention: bool,
    pub(super) foot_indent: i64,
    head_comment: String,
    line_comment: String,
    foot_comment: String,
    tail_comment: String,
    key_line_comment: String,
    tag_handle: String,
    tag_suffix: String,
    scalar: Analysis,
    scalar_style: Style,
}

/// Writes the events as YAML text.
pub(super) fn emit(events: &Events) -> Result<Zeroizing<Vec<u8>>, SopsError> {
    let mut e = Emitter {
        events: &events.0,
        pos: 0,
        out: Zeroizing::new(Vec::new()),
        state: State::StreamStart,
        states: Vec::new(),
        indent: -1,
        indents: Vec::new(),
        flow_level: 0,
        simple_key_context: false,
        column: 0,
        whitespace: true,
        indention: true,
        foot_indent: -1,
        head_comment: String::new(),
        line_comment: String::new(),
        foot_comment: String::new(),
        tail_comment: String::new(),
        key_line_comment: String::new(),
        tag_handle: String::new(),
        tag_suffix: String::new(),
        scalar: Analysis::default(),
        scalar_style: Style::Plain,
    };
    let events = &events.0;
    while let Some(ev) = events.get(e.pos) {
        e.analyze_event(ev);
        e.step(ev)?;
        e.pos += 1;
    }
    Ok(std::mem::take(&mut e.out))
}

impl Drop for Emitter<'_> {
    fn drop(&mut self) {
        self.head_comment.zeroize();
        self.line_comment.zeroize();
        self.foot_comment.zeroize();
        self.tail_comment.zeroize();
        self.key_line_comment.zeroize();
    }
}

fn fail(problem: &str) -> SopsError {
    SopsError::Emit(format!("Error marshaling to YAML: {problem}"))
}

impl Emitter<'_> {
    fn next_kind(&self, k: usize) -> Option<EvKind> {
        self.events.get(self.pos + k).map(|e| e.kind)
    }

    fn pop_state(&mut self) {
        self.state = self.states.pop().unwrap_or(State::End);
    }

    fn pop_indent(&mut self) {
        self.indent = self.indents.pop().unwrap_or(-1);
    }

    fn analyze_event(&mut self, ev: &EEvent) {
        self.tag_handle.clear();
        self.tag_suffix.clear();
        if !ev.head.is_empty() {
            self.head_comment = ev.head.clone();
        }
        if !ev.line.is_empty() {
            self.line_comment = ev.line.clone();
        }
        if !ev.foot.is_empty() {
            self.foot_comment = ev.foot.clone();
        }
        if !ev.tail.is_empty() {
            self.tail_comment = ev.tail.clone();
        }
        if ev.kind == EvKind::Scalar {
            if !ev.tag.is_empty() {
                match ev.tag.strip_prefix("tag:yaml.org,2002:") {
                    Some(suffix) => {
                        self.tag_handle = "!!".into();
                        self.tag_suffix = suffix.into();
                    }
                    None => match ev.tag.strip_prefix('!') {
                        Some(suffix) => {
                            self.tag_handle = "!".into();
                            self.tag_suffix = suffix.into();
                        }
                        None => self.tag_suffix = ev.tag.clone(),
                    },
                }
            }
            self.scalar = analyze(&ev.value);
        }
    }

    fn step(&mut self, ev: &EEvent) -> Result<(), SopsError> {
        match self.state {
            State::StreamStart => {
                if ev.kind != EvKind::StreamStart {
                    return Err(fail("expected STREAM-START"));
                }
                self.indent = -1;
                self.column = 0;
                self.whitespace = true;
                self.indention = true;
                self.foot_indent = -1;
                self.state = State::FirstDocumentStart;
                Ok(())
            }
            State::FirstDocumentStart => self.document_start(ev, true),
            State::DocumentStart => self.document_start(ev, false),
            State::DocumentContent => {
                self.states.push(State::DocumentEnd);
                self.process_head_comment();
                self.emit_node(ev, false)?;
                self.process_line_comment(false);
                self.process_foot_comment();
                Ok(())
            }
            State::DocumentEnd => {
                if ev.kind != EvKind::DocumentEnd {
                    return Err(fail("expected DOCUMENT-END"));
                }
                self.foot_indent = 0;
                self.process_foot_comment();
                self.foot_indent = -1;
                self.write_indent();
                self.state = State::DocumentStart;
                Ok(())
            }
            State::FlowSequenceFirstItem => self.flow_sequence_item(ev, true, false),
            State::FlowSequenceTrailItem => self.flow_sequence_item(ev, false, true),
            State::FlowSequenceItem => self.flow_sequence_item(ev, false, false),
            State::FlowMappingFirstKey => self.flow_mapping_key(ev, true, false),
            State::FlowMappingTrailKey => self.flow_mapping_key(ev, false, true),
            State::FlowMappingKey => self.flow_mapping_key(ev, false, false),
            State::FlowMappingSimpleValue => self.flow_mapping_value(ev, true),
            State::FlowMappingValue => self.flow_mapping_value(ev, false),
            State::BlockSequenceFirstItem => self.block_sequence_item(ev, true),
            State::BlockSequenceItem => self.block_sequence_item(ev, false),
            State::BlockMappingFirstKey => self.block_mapping_key(ev, true),
            State::BlockMappingKey => self.block_mapping_key(ev, false),
            State::BlockMappingSimpleValue => self.block_mapping_value(ev, true),
            State::BlockMappingValue => self.block_mapping_value(ev, false),
            State::End => Err(fail("expected nothing after STREAM-END")),
        }
    }

    fn document_start(&mut self, ev: &EEvent, first: bool) -> Result<(), SopsError> {
        match ev.kind {
            EvKind::DocumentStart => {
                if !first {
                    self.write_indent();
                    self.write_indicator("---", true, false, false);
                    self.write_indent();
                }
                if !self.head_comment.is_empty() {
                    self.process_head_comment();
                    self.put_break();
                }
                self.state = State::DocumentContent;
                Ok(())
            }
            EvKind::StreamEnd => {
                self.state = State::End;
                Ok(())
            }
            _ => Err(fail("expected DOCUMENT-START or STREAM-END")),
        }
    }

    fn increase_indent(&mut self, flow: bool) {
        self.indents.push(self.indent);
        if self.indent < 0 {
            self.indent = if flow { BEST_INDENT } else { 0 };
        } else if self.states.last() == Some(&State::BlockSequenceItem) {
            self.indent += 2;
        } else {
            self.indent = BEST_INDENT * ((self.indent + BEST_INDENT) / BEST_INDENT);
        }
    }

    fn comments_pending(&self) -> bool {
        !self.line_comment.is_empty()
            || !self.foot_comment.is_empty()
            || !self.tail_comment.is_empty()
    }

    fn flow_sequence_item(
        &mut self,
        ev: &EEvent,
        first: bool,
        trail: bool,
    ) -> Result<(), SopsError> {
        if first {
            self.write_indicator("[", true, true, false);
            self.increase_indent(true);
            self.flow_level += 1;
        }
        if ev.kind == EvKind::SequenceEnd {
            self.flow_level -= 1;
            self.pop_indent();
            if self.column == 0 {
                self.write_indent();
            }
            self.write_indicator("]", false, false, false);
            self.process_line_comment(false);
            self.process_foot_comment();
            self.pop_state();
            return Ok(());
        }
        if !first && !trail {
            self.write_indicator(",", false, false, false);
        }
        self.process_head_comment();
        if self.column == 0 || self.column > BEST_WIDTH {
            self.write_indent();
        }
        let pending = self.comments_pending();
        self.states.push(if pending {
            State::FlowSequenceTrailItem
        } else {
            State::FlowSequenceItem
        });
        self.emit_node(ev, false)?;
        if self.comments_pending() {
            self.write_indicator(",", false, false, false);
        }
        self.process_line_comment(false);
        self.process_foot_comment();
        Ok(())
    }

    fn flow_mapping_key(&mut self, ev: &EEvent, first: bool, trail: bool) -> Result<(), SopsError> {
        if first {
            self.write_indicator("{", true, true, false);
            self.increase_indent(true);
            self.flow_level += 1;
        }
        if ev.kind == EvKind::MappingEnd {
            let pending = !self.head_comment.is_empty()
                || !self.foot_comment.is_empty()
                || !self.tail_comment.is_empty();
            if pending && !first && !trail {
                self.write_indicator(",", false, false, false);
            }
            self.process_head_comment();
            self.flow_level -= 1;
            self.pop_indent();
            self.write_indicator("}", false, false, false);
            self.process_line_comment(false);
            self.process_foot_comment();
            self.pop_state();
            return Ok(());
        }
        if !first && !trail {
            self.write_indicator(",", false, false, false);
        }
        self.process_head_comment();
        if self.column == 0 || self.column > BEST_WIDTH {
            self.write_indent();
        }
        if self.check_simple_key() {
            self.states.push(State::FlowMappingSimpleValue);
            self.emit_node(ev, true)
        } else {
            self.write_indicator("?", true, false, false);
            self.states.push(State::FlowMappingValue);
            self.emit_node(ev, false)
        }
    }

    fn flow_mapping_value(&mut self, ev: &EEvent, simple: bool) -> Result<(), SopsError> {
        if simple {
            self.write_indicator(":", false, false, false);
        } else {
            if self.column > BEST_WIDTH {
                self.write_indent();
            }
            self.write_indicator(":", true, false, false);
        }
        let pending = self.comments_pending();
        self.states.push(if pending {
            State::FlowMappingTrailKey
        } else {
            State::FlowMappingKey
        });
        self.emit_node(ev, false)?;
        if self.comments_pending() {
            self.write_indicator(",", false, false, false);
        }
        self.process_line_comment(false);
        self.process_foot_comment();
        Ok(())
    }

    fn block_sequence_item(&mut self, ev: &EEvent, first: bool) -> Result<(), SopsError> {
        if first {
            self.increase_indent(false);
        }
        if ev.kind == EvKind::SequenceEnd {
            self.pop_indent();
            self.pop_state();
            return Ok(());
        }
        self.process_head_comment();
        self.write_indent();
        self.write_indicator("-", true, false, true);
        self.states.push(State::BlockSequenceItem);
        self.emit_node(ev, false)?;
        self.process_line_comment(false);
        self.process_foot_comment();
        Ok(())
    }

    fn block_mapping_key(&mut self, ev: &EEvent, first: bool) -> Result<(), SopsError> {
        if first {
            self.increase_indent(false);
        }
        self.process_head_comment();
        if ev.kind == EvKind::MappingEnd {
            self.pop_indent();
            self.pop_state();
            return Ok(());
        }
        self.write_indent();
        if !self.line_comment.is_empty() {
            self.key_line_comment = std::mem::take(&mut self.line_comment);
        }
        if self.check_simple_key() {
            self.states.push(State::BlockMappingSimpleValue);
            self.emit_node(ev, true)
        } else {
            self.write_indicator("?", true, false, true);
            self.states.push(State::BlockMappingValue);
            self.emit_node(ev, false)
        }
    }

    fn block_mapping_value(&mut self, ev: &EEvent, simple: bool) -> Result<(), SopsError> {
        if simple {
            self.write_indicator(":", false, false, false);
        } else {
            self.write_indent();
            self.write_indicator(":", true, false, true);
        }
        if !self.key_line_comment.is_empty() {
            if ev.kind == EvKind::Scalar {
                if self.line_comment.is_empty() {
                    self.line_comment = std::mem::take(&mut self.key_line_comment);
                }
            } else if matches!(ev.kind, EvKind::MappingStart | EvKind::SequenceStart) {
                std::mem::swap(&mut self.line_comment, &mut self.key_line_comment);
                self.process_line_comment(false);
                std::mem::swap(&mut self.line_comment, &mut self.key_line_comment);
            }
        }
        self.states.push(State::BlockMappingKey);
        self.emit_node(ev, false)?;
        self.process_line_comment(false);
        self.process_foot_comment();
        Ok(())
    }

    fn emit_node(&mut self, ev: &EEvent, simple_key: bool) -> Result<(), SopsError> {
        self.simple_key_context = simple_key;
        match ev.kind {
            EvKind::Scalar => {
                self.select_scalar_style(ev);
                self.process_tag();
                self.increase_indent(true);
                self.process_scalar(&ev.value);
                self.pop_indent();
                self.pop_state();
                Ok(())
            }
            EvKind::SequenceStart => {
                let empty = self.next_kind(1) == Some(EvKind::SequenceEnd);
                self.state = if self.flow_level > 0 || empty {
                    State::FlowSequenceFirstItem
                } else {
                    State::BlockSequenceFirstItem
                };
                Ok(())
            }
            EvKind::MappingStart => {
                let empty = self.next_kind(1) == Some(EvKind::MappingEnd);
                self.state = if self.flow_level > 0 || empty {
                    State::FlowMappingFirstKey
                } else {
                    State::BlockMappingFirstKey
                };
                Ok(())
            }
            _ => Err(fail(
                "expected SCALAR, SEQUENCE-START, MAPPING-START, or ALIAS",
            )),
        }
    }

    fn check_simple_key(&self) -> bool {
        let Some(ev) = self.events.get(self.pos) else {
            return false;
        };
        let length = match ev.kind {
            EvKind::Scalar => {
                if self.scalar.multiline {
                    return false;
                }
                self.tag_handle.len() + self.tag_suffix.len() + ev.value.len()
            }
            EvKind::SequenceStart if self.next_kind(1) == Some(EvKind::SequenceEnd) => 0,
            EvKind::MappingStart if self.next_kind(1) == Some(EvKind::MappingEnd) => 0,
            _ => return false,
        };
        length <= 128
    }

    fn select_scalar_style(&mut self, ev: &EEvent) {
        let no_tag = self.tag_handle.is_empty() && self.tag_suffix.is_empty();
        let mut style = ev.style;
        if self.simple_key_context && self.scalar.multiline {
            style = Style::Double;
        }
        if style == Style::Plain {
            if (self.flow_level > 0 && !self.scalar.flow_plain_allowed)
                || (self.flow_level == 0 && !self.scalar.block_plain_allowed)
            {
                style = Style::Single;
            }
            if ev.value.is_empty() && (self.flow_level > 0 || self.simple_key_context) {
                style = Style::Single;
            }
            if no_tag && !ev.implicit() {
                style = Style::Single;
            }
        }
        if style == Style::Single && !self.scalar.single_quoted_allowed {
            style = Style::Double;
        }
        if matches!(style, Style::Literal | Style::Folded)
            && (!self.scalar.block_allowed || self.flow_level > 0 || self.simple_key_context)
        {
            style = Style::Double;
        }
        self.scalar_style = style;
    }

    fn process_tag(&mut self) {
        if self.tag_handle.is_empty() && self.tag_suffix.is_empty() {
            return;
        }
        let handle = std::mem::take(&mut self.tag_handle);
        let suffix = std::mem::take(&mut self.tag_suffix);
        if !handle.is_empty() {
            if !self.whitespace {
                self.put(' ');
            }
            self.write_str(&handle);
            self.whitespace = false;
            self.indention = false;
            self.write_tag_content(&suffix);
        } else {
            self.write_indicator("!<", true, false, false);
            self.write_tag_content(&suffix);
            self.write_indicator(">", false, false, false);
        }
    }

    fn write_tag_content(&mut self, value: &str) {
        for c in value.chars() {
            if c.is_ascii_alphanumeric() || "-;/?:@&=+$,_.~*'()[]".contains(c) {
                self.put(c);
            } else {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    self.write_str(&format!("%{b:02X}"));
                }
            }
        }
        self.whitespace = false;
        self.indention = false;
    }

    fn process_scalar(&mut self, value: &str) {
        match self.scalar_style {
            Style::Plain => self.write_plain(value),
            Style::Single => self.write_single_quoted(value),
            Style::Double => self.write_double_quoted(value),
            Style::Literal | Style::Folded => self.write_literal(value),
        }
    }

    pub(super) fn process_head_comment(&mut self) {
        if !self.tail_comment.is_empty() {
            self.write_indent();
            let mut tail = std::mem::take(&mut self.tail_comment);
            self.write_comment(&tail);
            tail.zeroize();
            self.foot_indent = self.indent.max(0);
        }
        if self.head_comment.is_empty() {
            return;
        }
        self.write_indent();
        let mut head = std::mem::take(&mut self.head_comment);
        self.write_comment(&head);
        head.zeroize();
    }

    pub(super) fn process_line_comment(&mut self, linebreak: bool) {
        if self.line_comment.is_empty() {
            if linebreak {
                self.put_break();
            }
            return;
        }
        if !self.whitespace {
            self.put(' ');
        }
        let mut line = std::mem::take(&mut self.line_comment);
        self.write_comment(&line);
        line.zeroize();
    }

    fn process_foot_comment(&mut self) {
        if self.foot_comment.is_empty() {
            return;
        }
        self.write_indent();
        let mut foot = std::mem::take(&mut self.foot_comment);
        self.write_comment(&foot);
        foot.zeroize();
        self.foot_indent = self.indent.max(0);
    }
}
