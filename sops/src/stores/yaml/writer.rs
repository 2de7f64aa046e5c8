//! The emitter's output primitives: indentation, indicators, comments and the four scalar
//! styles sops' output uses (plain, single-quoted, double-quoted with go-yaml's escapes,
//! literal block with its indentation and chomping hints).

use super::analyze::is_printable;
use super::emitter::Emitter;

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

impl Emitter<'_> {
    pub(super) fn put(&mut self, c: char) {
        let mut buf = [0u8; 4];
        self.out
            .extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        self.column += 1;
    }

    pub(super) fn write_str(&mut self, s: &str) {
        for c in s.chars() {
            self.put(c);
        }
    }

    pub(super) fn put_break(&mut self) {
        self.out.push(b'\n');
        self.column = 0;
        self.indention = true;
    }

    fn write_break(&mut self, c: char) {
        if c == '\n' {
            self.put_break();
        } else {
            self.put(c);
            self.column = 0;
            self.indention = true;
        }
    }

    pub(super) fn write_indent(&mut self) {
        let indent = self.indent.max(0);
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.put_break();
        }
        if self.foot_indent == indent {
            self.put_break();
        }
        while self.column < indent {
            self.put(' ');
        }
        self.whitespace = true;
        self.foot_indent = -1;
    }

    pub(super) fn write_indicator(
        &mut self,
        indicator: &str,
        need_ws: bool,
        is_ws: bool,
        is_indention: bool,
    ) {
        if need_ws && !self.whitespace {
            self.put(' ');
        }
        self.write_str(indicator);
        self.whitespace = is_ws;
        self.indention = self.indention && is_indention;
    }

    /// Comment lines; a line that does not start with `#` gets `# `.
    pub(super) fn write_comment(&mut self, comment: &str) {
        let mut breaks = false;
        let mut pound = false;
        for c in comment.chars() {
            if is_break(c) {
                self.write_break(c);
                breaks = true;
                pound = false;
            } else {
                if breaks {
                    self.write_indent();
                }
                if !pound {
                    if c != '#' {
                        self.put('#');
                        self.put(' ');
                    }
                    pound = true;
                }
                self.put(c);
                self.indention = false;
                breaks = false;
            }
        }
        if !breaks {
            self.put_break();
        }
        self.whitespace = true;
    }

    pub(super) fn write_plain(&mut self, value: &str) {
        if !value.is_empty() && !self.whitespace {
            self.put(' ');
        }
        let mut breaks = false;
        for c in value.chars() {
            if c == ' ' {
                self.put(c);
            } else if is_break(c) {
                if !breaks && c == '\n' {
                    self.put_break();
                }
                self.write_break(c);
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                self.put(c);
                self.indention = false;
                breaks = false;
            }
        }
        if !value.is_empty() {
            self.whitespace = false;
        }
        self.indention = false;
    }

    pub(super) fn write_single_quoted(&mut self, value: &str) {
        self.write_indicator("'", true, false, false);
        let mut breaks = false;
        for c in value.chars() {
            if c == ' ' {
                self.put(c);
            } else if is_break(c) {
                if !breaks && c == '\n' {
                    self.put_break();
                }
                self.write_break(c);
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                if c == '\'' {
                    self.put('\'');
                }
                self.put(c);
                self.indention = false;
                breaks = false;
            }
        }
        self.write_indicator("'", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    pub(super) fn write_double_quoted(&mut self, value: &str) {
        self.write_indicator("\"", true, false, false);
        // go-yaml checks for a byte-order mark at the start of the value for every
        // character: a value starting with one is escaped entirely.
        let bom = value.starts_with('\u{feff}');
        for c in value.chars() {
            if !is_printable(c) || bom || is_break(c) || c == '"' || c == '\\' {
                self.put('\\');
                let v = c as u32;
                let short = match v {
                    0x00 => Some('0'),
                    0x07 => Some('a'),
                    0x08 => Some('b'),
                    0x09 => Some('t'),
                    0x0A => Some('n'),
                    0x0B => Some('v'),
                    0x0C => Some('f'),
                    0x0D => Some('r'),
                    0x1B => Some('e'),
                    0x22 => Some('"'),
                    0x5C => Some('\\'),
                    0x85 => Some('N'),
                    0xA0 => Some('_'),
                    0x2028 => Some('L'),
                    0x2029 => Some('P'),
                    _ => None,
                };
                match short {
                    Some(s) => self.put(s),
                    None if v <= 0xFF => self.write_str(&format!("x{v:02X}")),
                    None if v <= 0xFFFF => self.write_str(&format!("u{v:04X}")),
                    None => self.write_str(&format!("U{v:08X}")),
                }
            } else {
                self.put(c);
            }
        }
        self.write_indicator("\"", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn write_block_scalar_hints(&mut self, value: &str) {
        let mut chars = value.chars();
        let first = value.chars().next();
        if first == Some(' ') || first.is_some_and(is_break) {
            self.write_indicator("4", false, false, false);
        }
        let last = chars.next_back();
        let chomp = match last {
            None => Some("-"),
            Some(l) if !is_break(l) => Some("-"),
            Some(_) => match chars.next_back() {
                None => Some("+"),
                Some(p) if is_break(p) => Some("+"),
                Some(_) => None,
            },
        };
        if let Some(ch) = chomp {
            self.write_indicator(ch, false, false, false);
        }
    }

    pub(super) fn write_literal(&mut self, value: &str) {
        self.write_indicator("|", true, false, false);
        self.write_block_scalar_hints(value);
        self.process_line_comment(true);
        self.whitespace = true;
        let mut breaks = true;
        for c in value.chars() {
            if is_break(c) {
                self.write_break(c);
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                self.put(c);
                self.indention = false;
                breaks = false;
            }
        }
    }
}
