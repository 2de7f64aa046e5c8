//! The event parser: tokens → events (document, collection, scalar, alias), routing the
//! scanned comments to events as go-yaml v3 does (head, line and foot comments).

use super::scanner::Fail;
use super::scanner::{Mark, Scanner, Style, Tok};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ev {
    StreamStart,
    StreamEnd,
    DocumentStart,
    DocumentEnd,
    Alias,
    Scalar,
    SequenceStart,
    SequenceEnd,
    MappingStart,
    MappingEnd,
}

#[derive(Debug, Clone)]
pub(super) struct Event {
    pub kind: Ev,
    pub start: Mark,
    pub anchor: String,
    pub tag: String,
    pub value: String,
    pub style: Style,
    pub flow: bool,
    pub head: String,
    pub line: String,
    pub foot: String,
}

impl Event {
    pub(super) fn new(kind: Ev, start: Mark) -> Event {
        Event {
            kind,
            start,
            anchor: String::new(),
            tag: String::new(),
            value: String::new(),
            style: Style::Plain,
            flow: false,
            head: String::new(),
            line: String::new(),
            foot: String::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    StreamStart,
    ImplicitDocumentStart,
    DocumentStart,
    DocumentContent,
    DocumentEnd,
    BlockNode,
    BlockSequenceFirstEntry,
    BlockSequenceEntry,
    IndentlessSequenceEntry,
    BlockMappingFirstKey,
    BlockMappingKey,
    BlockMappingValue,
    FlowSequenceFirstEntry,
    FlowSequenceEntry,
    FlowSequenceEntryMappingKey,
    FlowSequenceEntryMappingValue,
    FlowSequenceEntryMappingEnd,
    FlowMappingFirstKey,
    FlowMappingKey,
    FlowMappingValue,
    FlowMappingEmptyValue,
    End,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Peeked {
    pub kind: Tok,
    pub start: Mark,
    pub end: Mark,
}

pub(super) struct Parser {
    sc: Scanner,
    pub(super) state: State,
    pub(super) states: Vec<State>,
    pub(super) marks: Vec<Mark>,
    tag_directives: Vec<(String, String)>,
    head_comment: String,
    line_comment: String,
    foot_comment: String,
    stem_comment: Option<String>,
}

fn append_comment(dst: &mut String, text: &str) {
    if !dst.is_empty() {
        dst.push('\n');
    }
    dst.push_str(text);
}

impl Parser {
    pub(super) fn new(sc: Scanner) -> Parser {
        Parser {
            sc,
            state: State::StreamStart,
            states: Vec::new(),
            marks: Vec::new(),
            tag_directives: Vec::new(),
            head_comment: String::new(),
            line_comment: String::new(),
            foot_comment: String::new(),
            stem_comment: None,
        }
    }

    pub(super) fn peek(&mut self) -> Result<Peeked, Fail> {
        if !self.sc.token_available {
            self.sc.fetch_more_tokens()?;
        }
        let t = self
            .sc
            .tokens
            .get(self.sc.tokens_head)
            .ok_or_else(|| Fail::Msg("unexpected end of the token stream".into()))?;
        let p = Peeked {
            kind: t.kind,
            start: t.start,
            end: t.end,
        };
        self.unfold_comments(p);
        Ok(p)
    }

    /// Moves the comments that belong before `token` into the pending comment buffers.
    fn unfold_comments(&mut self, token: Peeked) {
        while let Some(c) = self.sc.comments.get_mut(self.sc.comments_head) {
            if token.start.index < c.token_mark.index {
                break;
            }
            if !c.head.is_empty() {
                if token.kind == Tok::BlockEnd {
                    // No heads on ends: keep it for the token that follows.
                    break;
                }
                append_comment(&mut self.head_comment, &c.head);
            }
            if !c.foot.is_empty() {
                append_comment(&mut self.foot_comment, &c.foot);
            }
            if !c.line.is_empty() {
                append_comment(&mut self.line_comment, &c.line);
            }
            *c = Default::default();
            self.sc.comments_head += 1;
        }
    }

    /// Takes the text fields of the head token.
    fn take_token_text(&mut self) -> (String, String, Style) {
        match self.sc.tokens.get_mut(self.sc.tokens_head) {
            Some(t) => (
                std::mem::take(&mut t.value),
                std::mem::take(&mut t.suffix),
                t.style,
            ),
            None => (String::new(), String::new(), Style::Plain),
        }
    }

    pub(super) fn skip_token(&mut self) {
        self.sc.token_available = false;
        self.sc.tokens_parsed += 1;
        self.sc.tokens_head += 1;
    }

    pub(super) fn set_event_comments(&mut self, ev: &mut Event) {
        ev.head = std::mem::take(&mut self.head_comment);
        ev.line = std::mem::take(&mut self.line_comment);
        ev.foot = std::mem::take(&mut self.foot_comment);
        self.stem_comment = None;
    }

    pub(super) fn pop_state(&mut self) {
        self.state = self.states.pop().unwrap_or(State::End);
    }

    pub(super) fn error(
        &self,
        context: &str,
        context_mark: Mark,
        problem: &str,
        problem_mark: Mark,
    ) -> Fail {
        Fail::parser(context, context_mark, problem, problem_mark)
    }

    /// The next event, or `None` after the end of the stream.
    pub(super) fn next_event(&mut self) -> Result<Option<Event>, Fail> {
        let ev = match self.state {
            State::End => return Ok(None),
            State::StreamStart => self.parse_stream_start()?,
            State::ImplicitDocumentStart => self.parse_document_start(true)?,
            State::DocumentStart => self.parse_document_start(false)?,
            State::DocumentContent => self.parse_document_content()?,
            State::DocumentEnd => self.parse_document_end()?,
            State::BlockNode => self.parse_node(true, false)?,
            State::BlockSequenceFirstEntry => self.parse_block_sequence_entry(true)?,
            State::BlockSequenceEntry => self.parse_block_sequence_entry(false)?,
            State::IndentlessSequenceEntry => self.parse_indentless_sequence_entry()?,
            State::BlockMappingFirstKey => self.parse_block_mapping_key(true)?,
            State::BlockMappingKey => self.parse_block_mapping_key(false)?,
            State::BlockMappingValue => self.parse_block_mapping_value()?,
            State::FlowSequenceFirstEntry => self.parse_flow_sequence_entry(true)?,
            State::FlowSequenceEntry => self.parse_flow_sequence_entry(false)?,
            State::FlowSequenceEntryMappingKey => self.parse_flow_sequence_entry_mapping_key()?,
            State::FlowSequenceEntryMappingValue => {
                self.parse_flow_sequence_entry_mapping_value()?
            }
            State::FlowSequenceEntryMappingEnd => {
                let t = self.peek()?;
                self.state = State::FlowSequenceEntry;
                Event::new(Ev::MappingEnd, t.start)
            }
            State::FlowMappingFirstKey => self.parse_flow_mapping_key(true)?,
            State::FlowMappingKey => self.parse_flow_mapping_key(false)?,
            State::FlowMappingValue => self.parse_flow_mapping_value(false)?,
            State::FlowMappingEmptyValue => self.parse_flow_mapping_value(true)?,
        };
        Ok(Some(ev))
    }

    fn parse_stream_start(&mut self) -> Result<Event, Fail> {
        let t = self.peek()?;
        if t.kind != Tok::StreamStart {
            return Err(self.error("", t.start, "did not find expected <stream-start>", t.start));
        }
        self.state = State::ImplicitDocumentStart;
        self.skip_token();
        Ok(Event::new(Ev::StreamStart, t.start))
    }

    fn parse_document_start(&mut self, implicit: bool) -> Result<Event, Fail> {
        let mut t = self.peek()?;
        if !implicit {
            while t.kind == Tok::DocumentEnd {
                self.skip_token();
                t = self.peek()?;
            }
        }
        let directive_or_start = matches!(
            t.kind,
            Tok::VersionDirective | Tok::TagDirective | Tok::DocumentStart | Tok::StreamEnd
        );
        if implicit && !directive_or_start {
            self.process_directives()?;
            self.states.push(State::DocumentEnd);
            self.state = State::BlockNode;
            let head = self.split_document_head();
            let mut ev = Event::new(Ev::DocumentStart, t.start);
            ev.head = head;
            Ok(ev)
        } else if t.kind != Tok::StreamEnd {
            let start = t.start;
            self.process_directives()?;
            let t = self.peek()?;
            if t.kind != Tok::DocumentStart {
                return Err(self.error(
                    "",
                    t.start,
                    "did not find expected <document start>",
                    t.start,
                ));
            }
            self.states.push(State::DocumentEnd);
            self.state = State::DocumentContent;
            self.skip_token();
            Ok(Event::new(Ev::DocumentStart, start))
        } else {
            self.state = State::End;
            self.skip_token();
            Ok(Event::new(Ev::StreamEnd, t.start))
        }
    }

    /// Comments before the first node, up to the last blank line, head the document.
    fn split_document_head(&mut self) -> String {
        let hc = self.head_comment.as_bytes();
        let n = hc.len();
        let mut i = n.saturating_sub(1);
        while i > 0 {
            if hc.get(i) == Some(&b'\n') {
                if i == n - 1 {
                    let head = self.head_comment.get(..i).unwrap_or("").to_string();
                    self.head_comment = self.head_comment.get(i + 1..).unwrap_or("").to_string();
                    return head;
                } else if hc.get(i - 1) == Some(&b'\n') {
                    let head = self.head_comment.get(..i - 1).unwrap_or("").to_string();
                    self.head_comment = self.head_comment.get(i + 1..).unwrap_or("").to_string();
                    return head;
                }
            }
            i -= 1;
        }
        String::new()
    }

    fn process_directives(&mut self) -> Result<(), Fail> {
        let mut version_seen = false;
        let mut t = self.peek()?;
        while matches!(t.kind, Tok::VersionDirective | Tok::TagDirective) {
            let (major, minor) = self
                .sc
                .tokens
                .get(self.sc.tokens_head)
                .map(|tk| (tk.major, tk.minor))
                .unwrap_or((0, 0));
            if t.kind == Tok::VersionDirective {
                if version_seen {
                    return Err(self.error(
                        "",
                        t.start,
                        "found duplicate %YAML directive",
                        t.start,
                    ));
                }
                if major != 1 || minor != 1 {
                    return Err(self.error(
                        "",
                        t.start,
                        "found incompatible YAML document",
                        t.start,
                    ));
                }
                version_seen = true;
            } else {
                let (handle, prefix, _) = self.take_token_text();
                if self.tag_directives.iter().any(|(h, _)| *h == handle) {
                    return Err(self.error("", t.start, "found duplicate %TAG directive", t.start));
                }
                self.tag_directives.push((handle, prefix));
            }
            self.skip_token();
            t = self.peek()?;
        }
        for (h, p) in [("!", "!"), ("!!", "tag:yaml.org,2002:")] {
            if !self.tag_directives.iter().any(|(x, _)| x == h) {
                self.tag_directives.push((h.to_string(), p.to_string()));
            }
        }
        Ok(())
    }

    fn parse_document_content(&mut self) -> Result<Event, Fail> {
        let t = self.peek()?;
        if matches!(
            t.kind,
            Tok::VersionDirective
                | Tok::TagDirective
                | Tok::DocumentStart
                | Tok::DocumentEnd
                | Tok::StreamEnd
        ) {
            self.pop_state();
            return Ok(Event::new(Ev::Scalar, t.start));
        }
        self.parse_node(true, false)
    }

    fn parse_document_end(&mut self) -> Result<Event, Fail> {
        let t = self.peek()?;
        if t.kind == Tok::DocumentEnd {
            self.skip_token();
        }
        self.tag_directives.clear();
        self.state = State::DocumentStart;
        let mut ev = Event::new(Ev::DocumentEnd, t.start);
        self.set_event_comments(&mut ev);
        if !ev.head.is_empty() && ev.foot.is_empty() {
            ev.foot = std::mem::take(&mut ev.head);
        }
        Ok(ev)
    }

    pub(super) fn parse_node(
        &mut self,
        block: bool,
        indentless_sequence: bool,
    ) -> Result<Event, Fail> {
        let mut t = self.peek()?;
        if t.kind == Tok::Alias {
            self.pop_state();
            let (name, _, _) = self.take_token_text();
            let mut ev = Event::new(Ev::Alias, t.start);
            ev.anchor = name;
            self.set_event_comments(&mut ev);
            self.skip_token();
            return Ok(ev);
        }
        let start = t.start;
        let mut anchor = String::new();
        let mut tag_parts: Option<(String, String)> = None;
        let mut tag_mark = t.start;
        if t.kind == Tok::Anchor {
            anchor = self.take_token_text().0;
            self.skip_token();
            t = self.peek()?;
            if t.kind == Tok::Tag {
                let (h, s, _) = self.take_token_text();
                tag_parts = Some((h, s));
                tag_mark = t.start;
                self.skip_token();
                t = self.peek()?;
            }
        } else if t.kind == Tok::Tag {
            let (h, s, _) = self.take_token_text();
            tag_parts = Some((h, s));
            tag_mark = t.start;
            self.skip_token();
            t = self.peek()?;
            if t.kind == Tok::Anchor {
                anchor = self.take_token_text().0;
                self.skip_token();
                t = self.peek()?;
            }
        }
        let mut tag = String::new();
        if let Some((handle, suffix)) = tag_parts {
            if handle.is_empty() {
                tag = suffix;
            } else {
                match self.tag_directives.iter().find(|(h, _)| *h == handle) {
                    Some((_, prefix)) => tag = format!("{prefix}{suffix}"),
                    None => {
                        return Err(self.error(
                            "while parsing a node",
                            start,
                            "found undefined tag handle",
                            tag_mark,
                        ));
                    }
                }
            }
        }

        let mut ev = Event::new(Ev::Scalar, start);
        ev.anchor = anchor;
        ev.tag = tag;
        if indentless_sequence && t.kind == Tok::BlockEntry {
            self.state = State::IndentlessSequenceEntry;
            ev.kind = Ev::SequenceStart;
            return Ok(ev);
        }
        match t.kind {
            Tok::Scalar => {
                self.pop_state();
                let (value, _, style) = self.take_token_text();
                ev.value = value;
                ev.style = style;
                self.set_event_comments(&mut ev);
                self.skip_token();
                Ok(ev)
            }
            Tok::FlowSequenceStart | Tok::FlowMappingStart => {
                self.state = if t.kind == Tok::FlowSequenceStart {
                    ev.kind = Ev::SequenceStart;
                    State::FlowSequenceFirstEntry
                } else {
                    ev.kind = Ev::MappingStart;
                    State::FlowMappingFirstKey
                };
                ev.flow = true;
                self.set_event_comments(&mut ev);
                Ok(ev)
            }
            Tok::BlockSequenceStart | Tok::BlockMappingStart if block => {
                self.state = if t.kind == Tok::BlockSequenceStart {
                    ev.kind = Ev::SequenceStart;
                    State::BlockSequenceFirstEntry
                } else {
                    ev.kind = Ev::MappingStart;
                    State::BlockMappingFirstKey
                };
                if let Some(stem) = self.stem_comment.take() {
                    ev.head = stem;
                }
                Ok(ev)
            }
            _ if !ev.anchor.is_empty() || !ev.tag.is_empty() => {
                self.pop_state();
                Ok(ev)
            }
            _ => {
                let context = if block {
                    "while parsing a block node"
                } else {
                    "while parsing a flow node"
                };
                Err(self.error(
                    context,
                    start,
                    "did not find expected node content",
                    t.start,
                ))
            }
        }
    }

    /// When a collection starts right under a `-`, the comments gathered before the `-`
    /// become the collection's head (its "stem").
    fn split_stem_comment(&mut self, stem_len: usize) -> Result<(), Fail> {
        if stem_len == 0 {
            return Ok(());
        }
        let t = self.peek()?;
        if t.kind != Tok::BlockSequenceStart && t.kind != Tok::BlockMappingStart {
            return Ok(());
        }
        let stem = self.head_comment.get(..stem_len).unwrap_or("").to_string();
        self.head_comment = self
            .head_comment
            .get(stem_len + 1..)
            .unwrap_or("")
            .to_string();
        self.stem_comment = Some(stem);
        Ok(())
    }

    fn parse_block_sequence_entry(&mut self, first: bool) -> Result<Event, Fail> {
        if first {
            let t = self.peek()?;
            self.marks.push(t.start);
            self.skip_token();
        }
        let t = self.peek()?;
        if t.kind == Tok::BlockEntry {
            let mark = t.end;
            let prior = self.head_comment.len();
            self.skip_token();
            self.split_stem_comment(prior)?;
            let t = self.peek()?;
            if t.kind != Tok::BlockEntry && t.kind != Tok::BlockEnd {
                self.states.push(State::BlockSequenceEntry);
                return self.parse_node(true, false);
            }
            self.state = State::BlockSequenceEntry;
            return Ok(Event::new(Ev::Scalar, mark));
        }
        if t.kind == Tok::BlockEnd {
            self.pop_state();
            self.marks.pop();
            self.skip_token();
            return Ok(Event::new(Ev::SequenceEnd, t.start));
        }
        let context_mark = self.marks.pop().unwrap_or_default();
        Err(self.error(
            "while parsing a block collection",
            context_mark,
            "did not find expected '-' indicator",
            t.start,
        ))
    }

    fn parse_indentless_sequence_entry(&mut self) -> Result<Event, Fail> {
        let t = self.peek()?;
        if t.kind == Tok::BlockEntry {
            let mark = t.end;
            let prior = self.head_comment.len();
            self.skip_token();
            self.split_stem_comment(prior)?;
            let t = self.peek()?;
            if !matches!(
                t.kind,
                Tok::BlockEntry | Tok::Key | Tok::Value | Tok::BlockEnd
            ) {
                self.states.push(State::IndentlessSequenceEntry);
                return self.parse_node(true, false);
            }
            self.state = State::IndentlessSequenceEntry;
            return Ok(Event::new(Ev::Scalar, mark));
        }
        self.pop_state();
        Ok(Event::new(Ev::SequenceEnd, t.start))
    }

    fn parse_block_mapping_key(&mut self, first: bool) -> Result<Event, Fail> {
        if first {
            let t = self.peek()?;
            self.marks.push(t.start);
            self.skip_token();
        }
        let t = self.peek()?;
        if t.kind == Tok::Key {
            let mark = t.end;
            self.skip_token();
            let t = self.peek()?;
            if !matches!(t.kind, Tok::Key | Tok::Value | Tok::BlockEnd) {
                self.states.push(State::BlockMappingValue);
                return self.parse_node(true, true);
            }
            self.state = State::BlockMappingValue;
            return Ok(Event::new(Ev::Scalar, mark));
        }
        if t.kind == Tok::BlockEnd {
            self.pop_state();
            self.marks.pop();
            let mut ev = Event::new(Ev::MappingEnd, t.start);
            self.set_event_comments(&mut ev);
            self.skip_token();
            return Ok(ev);
        }
        let context_mark = self.marks.pop().unwrap_or_default();
        Err(self.error(
            "while parsing a block mapping",
            context_mark,
            "did not find expected key",
            t.start,
        ))
    }

    fn parse_block_mapping_value(&mut self) -> Result<Event, Fail> {
        let t = self.peek()?;
        if t.kind == Tok::Value {
            let mark = t.end;
            self.skip_token();
            let t = self.peek()?;
            if !matches!(t.kind, Tok::Key | Tok::Value | Tok::BlockEnd) {
                self.states.push(State::BlockMappingKey);
                return self.parse_node(true, true);
            }
            self.state = State::BlockMappingKey;
            return Ok(Event::new(Ev::Scalar, mark));
        }
        self.state = State::BlockMappingKey;
        Ok(Event::new(Ev::Scalar, t.start))
    }
}
