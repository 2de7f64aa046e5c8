//! The event parser's flow collections: `[a, b]`, `{a: b}` and single-pair mappings inside
//! flow sequences (`[a: b]`), with go-yaml v3's handling of empty keys and values.

use super::parser::{Ev, Event, Parser, State};
use super::scanner::Fail;
use super::scanner::Tok;

impl Parser {
    pub(super) fn parse_flow_sequence_entry(&mut self, first: bool) -> Result<Event, Fail> {
        if first {
            let t = self.peek()?;
            self.marks.push(t.start);
            self.skip_token();
        }
        let mut t = self.peek()?;
        if t.kind != Tok::FlowSequenceEnd {
            if !first {
                if t.kind == Tok::FlowEntry {
                    self.skip_token();
                    t = self.peek()?;
                } else {
                    let context_mark = self.marks.pop().unwrap_or_default();
                    return Err(self.error(
                        "while parsing a flow sequence",
                        context_mark,
                        "did not find expected ',' or ']'",
                        t.start,
                    ));
                }
            }
            if t.kind == Tok::Key {
                self.state = State::FlowSequenceEntryMappingKey;
                let mut ev = Event::new(Ev::MappingStart, t.start);
                ev.flow = true;
                self.skip_token();
                return Ok(ev);
            } else if t.kind != Tok::FlowSequenceEnd {
                self.states.push(State::FlowSequenceEntry);
                return self.parse_node(false, false);
            }
        }
        self.pop_state();
        self.marks.pop();
        let mut ev = Event::new(Ev::SequenceEnd, t.start);
        self.set_event_comments(&mut ev);
        self.skip_token();
        Ok(ev)
    }

    pub(super) fn parse_flow_sequence_entry_mapping_key(&mut self) -> Result<Event, Fail> {
        let t = self.peek()?;
        if !matches!(t.kind, Tok::Value | Tok::FlowEntry | Tok::FlowSequenceEnd) {
            self.states.push(State::FlowSequenceEntryMappingValue);
            return self.parse_node(false, false);
        }
        let mark = t.end;
        self.skip_token();
        self.state = State::FlowSequenceEntryMappingValue;
        Ok(Event::new(Ev::Scalar, mark))
    }

    pub(super) fn parse_flow_sequence_entry_mapping_value(&mut self) -> Result<Event, Fail> {
        let mut t = self.peek()?;
        if t.kind == Tok::Value {
            self.skip_token();
            t = self.peek()?;
            if t.kind != Tok::FlowEntry && t.kind != Tok::FlowSequenceEnd {
                self.states.push(State::FlowSequenceEntryMappingEnd);
                return self.parse_node(false, false);
            }
        }
        self.state = State::FlowSequenceEntryMappingEnd;
        Ok(Event::new(Ev::Scalar, t.start))
    }

    pub(super) fn parse_flow_mapping_key(&mut self, first: bool) -> Result<Event, Fail> {
        if first {
            let t = self.peek()?;
            self.marks.push(t.start);
            self.skip_token();
        }
        let mut t = self.peek()?;
        if t.kind != Tok::FlowMappingEnd {
            if !first {
                if t.kind == Tok::FlowEntry {
                    self.skip_token();
                    t = self.peek()?;
                } else {
                    let context_mark = self.marks.pop().unwrap_or_default();
                    return Err(self.error(
                        "while parsing a flow mapping",
                        context_mark,
                        "did not find expected ',' or '}'",
                        t.start,
                    ));
                }
            }
            if t.kind == Tok::Key {
                self.skip_token();
                let t = self.peek()?;
                if !matches!(t.kind, Tok::Value | Tok::FlowEntry | Tok::FlowMappingEnd) {
                    self.states.push(State::FlowMappingValue);
                    return self.parse_node(false, false);
                }
                self.state = State::FlowMappingValue;
                return Ok(Event::new(Ev::Scalar, t.start));
            } else if t.kind != Tok::FlowMappingEnd {
                self.states.push(State::FlowMappingEmptyValue);
                return self.parse_node(false, false);
            }
        }
        self.pop_state();
        self.marks.pop();
        let mut ev = Event::new(Ev::MappingEnd, t.start);
        self.set_event_comments(&mut ev);
        self.skip_token();
        Ok(ev)
    }

    pub(super) fn parse_flow_mapping_value(&mut self, empty: bool) -> Result<Event, Fail> {
        let mut t = self.peek()?;
        if empty {
            self.state = State::FlowMappingKey;
            return Ok(Event::new(Ev::Scalar, t.start));
        }
        if t.kind == Tok::Value {
            self.skip_token();
            t = self.peek()?;
            if t.kind != Tok::FlowEntry && t.kind != Tok::FlowMappingEnd {
                self.states.push(State::FlowMappingKey);
                return self.parse_node(false, false);
            }
        }
        self.state = State::FlowMappingKey;
        Ok(Event::new(Ev::Scalar, t.start))
    }
}
