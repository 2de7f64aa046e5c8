//! The lexer: turns template text into items, the way Go's `text/template/parse` lexer does
//! (same item kinds, same trim-marker and comment rules, same error texts).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Error,
    Bool,
    Char,
    CharConstant,
    Complex,
    Assign,
    Declare,
    Eof,
    Field,
    Identifier,
    LeftDelim,
    LeftParen,
    Number,
    Pipe,
    RawString,
    RightDelim,
    RightParen,
    Space,
    String,
    Text,
    Variable,
    // keywords
    Block,
    Break,
    Continue,
    Dot,
    Define,
    Else,
    End,
    If,
    Nil,
    Range,
    Template,
    With,
}

impl Kind {
    fn is_keyword(self) -> bool {
        matches!(
            self,
            Kind::Block
                | Kind::Break
                | Kind::Continue
                | Kind::Dot
                | Kind::Define
                | Kind::Else
                | Kind::End
                | Kind::If
                | Kind::Nil
                | Kind::Range
                | Kind::Template
                | Kind::With
        )
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub kind: Kind,
    pub pos: usize,
    pub val: String,
    pub line: usize,
}

impl std::fmt::Display for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Kind::Eof => f.write_str("EOF"),
            Kind::Error => f.write_str(&self.val),
            k if k.is_keyword() => write!(f, "<{}>", self.val),
            _ => {
                if self.val.chars().count() > 10 {
                    let short: String = self.val.chars().take(10).collect();
                    write!(f, "{}...", crate::gofmt::quote(&short))
                } else {
                    f.write_str(&crate::gofmt::quote(&self.val))
                }
            }
        }
    }
}

fn keyword(word: &str) -> Option<Kind> {
    Some(match word {
        "." => Kind::Dot,
        "block" => Kind::Block,
        "break" => Kind::Break,
        "continue" => Kind::Continue,
        "define" => Kind::Define,
        "else" => Kind::Else,
        "end" => Kind::End,
        "if" => Kind::If,
        "range" => Kind::Range,
        "nil" => Kind::Nil,
        "template" => Kind::Template,
        "with" => Kind::With,
        _ => return None,
    })
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_alnum(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

/// `%#U` of Go's fmt: `U+0023 '#'`.
fn sharp_u(c: char) -> String {
    format!("U+{:04X} '{}'", c as u32, c)
}

struct Lexer<'a> {
    input: &'a str,
    left: &'a str,
    right: &'a str,
    pos: usize,
    start: usize,
    paren_depth: i64,
    items: Vec<Item>,
    /// Line-number cache: the line at byte `line_pos` (positions only grow).
    line_pos: usize,
    line: usize,
}

/// Lexes the whole input. The item list ends with an `Eof` or an `Error` item.
pub(crate) fn lex(input: &str, left: &str, right: &str) -> Vec<Item> {
    let mut l = Lexer {
        input,
        left,
        right,
        pos: 0,
        start: 0,
        paren_depth: 0,
        items: Vec::new(),
        line_pos: 0,
        line: 1,
    };
    l.run();
    l.items
}

enum State {
    Text,
    InsideAction,
    Done,
}

impl<'a> Lexer<'a> {
    fn line_at(&mut self, pos: usize) -> usize {
        if pos < self.line_pos {
            return 1 + self.input.as_bytes()[..pos]
                .iter()
                .filter(|b| **b == b'\n')
                .count();
        }
        self.line += self.input.as_bytes()[self.line_pos..pos]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        self.line_pos = pos;
        self.line
    }

    fn emit(&mut self, kind: Kind) {
        let val = self.input[self.start..self.pos].to_string();
        self.emit_val(kind, val);
    }

    fn emit_val(&mut self, kind: Kind, val: String) {
        let line = self.line_at(self.start);
        self.items.push(Item {
            kind,
            pos: self.start,
            val,
            line,
        });
        self.start = self.pos;
    }

    fn error(&mut self, msg: String) -> State {
        let line = self.line_at(self.start);
        self.items.push(Item {
            kind: Kind::Error,
            pos: self.start,
            val: msg,
            line,
        });
        State::Done
    }

    fn peek(&self) -> Option<char> {
        self.input[self.pos..].chars().next()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn rest(&self) -> &'a str {
        &self.input[self.pos..]
    }

    fn run(&mut self) {
        let mut state = State::Text;
        loop {
            state = match state {
                State::Text => self.lex_text(),
                State::InsideAction => self.lex_inside_action(),
                State::Done => return,
            }
        }
    }

    fn has_left_trim(s: &str) -> bool {
        let b = s.as_bytes();
        b.len() >= 2 && b[0] == b'-' && is_space(b[1] as char)
    }

    fn has_right_trim(s: &str) -> bool {
        let b = s.as_bytes();
        b.len() >= 2 && is_space(b[0] as char) && b[1] == b'-'
    }

    fn at_right_delim(&self) -> (bool, bool) {
        let rest = self.rest();
        if Self::has_right_trim(rest) && rest[2..].starts_with(self.right) {
            return (true, true);
        }
        (rest.starts_with(self.right), false)
    }

    fn lex_text(&mut self) -> State {
        if let Some(x) = self.rest().find(self.left) {
            let delim_pos = self.pos + x;
            let after = &self.input[delim_pos + self.left.len()..];
            let mut text_end = delim_pos;
            if Self::has_left_trim(after) {
                text_end = self.input[self.start..delim_pos]
                    .trim_end_matches(is_space)
                    .len()
                    + self.start;
            }
            if text_end > self.start {
                self.pos = text_end;
                self.emit(Kind::Text);
            }
            self.pos = delim_pos;
            self.start = delim_pos;
            return self.lex_left_delim();
        }
        self.pos = self.input.len();
        if self.pos > self.start {
            self.emit(Kind::Text);
        }
        self.emit_val(Kind::Eof, String::new());
        State::Done
    }

    fn lex_left_delim(&mut self) -> State {
        self.pos += self.left.len();
        let trim = Self::has_left_trim(self.rest());
        let after = if trim { 2 } else { 0 };
        if self.rest()[after..].starts_with("/*") {
            self.pos += after;
            self.start = self.pos;
            return self.lex_comment();
        }
        self.emit(Kind::LeftDelim);
        self.pos += after;
        self.start = self.pos;
        self.paren_depth = 0;
        State::InsideAction
    }

    fn lex_comment(&mut self) -> State {
        self.pos += 2;
        let Some(x) = self.rest().find("*/") else {
            return self.error("unclosed comment".into());
        };
        self.pos += x + 2;
        let (delim, trim) = self.at_right_delim();
        if !delim {
            return self.error("comment ends before closing delimiter".into());
        }
        if trim {
            self.pos += 2;
        }
        self.pos += self.right.len();
        if trim {
            self.pos += self.rest().len() - self.rest().trim_start_matches(is_space).len();
        }
        self.start = self.pos;
        State::Text
    }

    fn lex_right_delim(&mut self) -> State {
        let (_, trim) = self.at_right_delim();
        if trim {
            self.pos += 2;
            self.start = self.pos;
        }
        self.pos += self.right.len();
        self.emit(Kind::RightDelim);
        if trim {
            self.pos += self.rest().len() - self.rest().trim_start_matches(is_space).len();
            self.start = self.pos;
        }
        State::Text
    }

    fn lex_inside_action(&mut self) -> State {
        let (delim, _) = self.at_right_delim();
        if delim {
            if self.paren_depth == 0 {
                return self.lex_right_delim();
            }
            return self.error("unclosed left paren".into());
        }
        let Some(c) = self.next() else {
            return self.error("unclosed action".into());
        };
        match c {
            c if is_space(c) => {
                self.pos -= 1;
                return self.lex_space();
            }
            '=' => self.emit(Kind::Assign),
            ':' => {
                if self.next() != Some('=') {
                    return self.error("expected :=".into());
                }
                self.emit(Kind::Declare);
            }
            '|' => self.emit(Kind::Pipe),
            '"' => return self.lex_quote(),
            '`' => return self.lex_raw_quote(),
            '$' => return self.lex_field_or_var(Kind::Variable),
            '\'' => return self.lex_char(),
            '.' if !matches!(self.peek(), Some('0'..='9')) => {
                return self.lex_field_or_var(Kind::Field);
            }
            '.' | '+' | '-' | '0'..='9' => {
                self.pos -= 1;
                return self.lex_number();
            }
            c if is_alnum(c) => {
                self.pos -= c.len_utf8();
                return self.lex_identifier();
            }
            '(' => {
                self.emit(Kind::LeftParen);
                self.paren_depth += 1;
            }
            ')' => {
                self.paren_depth -= 1;
                if self.paren_depth < 0 {
                    return self.error("unexpected right paren".into());
                }
                self.emit(Kind::RightParen);
            }
            c if c.is_ascii() && !c.is_ascii_control() => self.emit(Kind::Char),
            c => return self.error(format!("unrecognized character in action: {}", sharp_u(c))),
        }
        State::InsideAction
    }

    fn lex_space(&mut self) -> State {
        let mut n = 0;
        while let Some(c) = self.peek() {
            if !is_space(c) {
                break;
            }
            self.pos += 1;
            n += 1;
        }
        let before = &self.input[self.pos - 1..];
        if Self::has_right_trim(before) && before[2..].starts_with(self.right) {
            self.pos -= 1;
            if n == 1 {
                return State::InsideAction;
            }
        }
        self.emit(Kind::Space);
        State::InsideAction
    }

    fn at_terminator(&self) -> bool {
        match self.peek() {
            None => true,
            Some(c) if is_space(c) => true,
            Some('.' | ',' | '|' | ':' | ')' | '(') => true,
            _ => self.rest().starts_with(self.right),
        }
    }

    fn lex_identifier(&mut self) -> State {
        while let Some(c) = self.peek() {
            if !is_alnum(c) {
                break;
            }
            self.pos += c.len_utf8();
        }
        if !self.at_terminator() {
            let c = self.peek().unwrap_or('\0');
            self.pos += c.len_utf8();
            return self.error(format!("bad character {}", sharp_u(c)));
        }
        let word = &self.input[self.start..self.pos];
        let kind = match keyword(word) {
            Some(k) => k,
            None if word.starts_with('.') => Kind::Field,
            None if word == "true" || word == "false" => Kind::Bool,
            None => Kind::Identifier,
        };
        self.emit(kind);
        State::InsideAction
    }

    fn lex_field_or_var(&mut self, kind: Kind) -> State {
        if self.at_terminator() {
            self.emit(if kind == Kind::Variable {
                Kind::Variable
            } else {
                Kind::Dot
            });
            return State::InsideAction;
        }
        while let Some(c) = self.peek() {
            if !is_alnum(c) {
                break;
            }
            self.pos += c.len_utf8();
        }
        if !self.at_terminator() {
            let c = self.peek().unwrap_or('\0');
            self.pos += c.len_utf8();
            return self.error(format!("bad character {}", sharp_u(c)));
        }
        self.emit(kind);
        State::InsideAction
    }

    fn lex_char(&mut self) -> State {
        loop {
            match self.next() {
                Some('\\') => match self.next() {
                    Some('\n') | None => {
                        return self.error("unterminated character constant".into());
                    }
                    Some(_) => {}
                },
                Some('\n') | None => return self.error("unterminated character constant".into()),
                Some('\'') => break,
                Some(_) => {}
            }
        }
        self.emit(Kind::CharConstant);
        State::InsideAction
    }

    fn accept(&mut self, valid: &str) -> bool {
        match self.peek() {
            Some(c) if valid.contains(c) => {
                self.pos += c.len_utf8();
                true
            }
            _ => false,
        }
    }

    fn accept_run(&mut self, valid: &str) {
        while self.accept(valid) {}
    }

    fn scan_number(&mut self) -> bool {
        self.accept("+-");
        let mut digits = "0123456789_";
        if self.accept("0") {
            if self.accept("xX") {
                digits = "0123456789abcdefABCDEF_";
            } else if self.accept("oO") {
                digits = "01234567_";
            } else if self.accept("bB") {
                digits = "01_";
            }
        }
        self.accept_run(digits);
        if self.accept(".") {
            self.accept_run(digits);
        }
        if digits.len() == 11 && self.accept("eE") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        if digits.len() == 23 && self.accept("pP") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        self.accept("i");
        if let Some(c) = self.peek()
            && is_alnum(c)
        {
            self.pos += c.len_utf8();
            return false;
        }
        true
    }

    fn lex_number(&mut self) -> State {
        if !self.scan_number() {
            let text = self.input[self.start..self.pos].to_string();
            return self.error(format!("bad number syntax: {}", crate::gofmt::quote(&text)));
        }
        if matches!(self.peek(), Some('+' | '-')) {
            if !self.scan_number() || !self.input[..self.pos].ends_with('i') {
                let text = self.input[self.start..self.pos].to_string();
                return self.error(format!("bad number syntax: {}", crate::gofmt::quote(&text)));
            }
            self.emit(Kind::Complex);
        } else {
            self.emit(Kind::Number);
        }
        State::InsideAction
    }

    fn lex_quote(&mut self) -> State {
        loop {
            match self.next() {
                Some('\\') => match self.next() {
                    Some('\n') | None => return self.error("unterminated quoted string".into()),
                    Some(_) => {}
                },
                Some('\n') | None => return self.error("unterminated quoted string".into()),
                Some('"') => break,
                Some(_) => {}
            }
        }
        self.emit(Kind::String);
        State::InsideAction
    }

    fn lex_raw_quote(&mut self) -> State {
        loop {
            match self.next() {
                None => return self.error("unterminated raw quoted string".into()),
                Some('`') => break,
                Some(_) => {}
            }
        }
        self.emit(Kind::RawString);
        State::InsideAction
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<Kind> {
        lex(s, "<<", ">>").iter().map(|i| i.kind).collect()
    }

    #[test]
    fn text_and_action() {
        assert_eq!(
            kinds("a << .x | f 1 >>b"),
            vec![
                Kind::Text,
                Kind::LeftDelim,
                Kind::Space,
                Kind::Field,
                Kind::Space,
                Kind::Pipe,
                Kind::Space,
                Kind::Identifier,
                Kind::Space,
                Kind::Number,
                Kind::Space,
                Kind::RightDelim,
                Kind::Text,
                Kind::Eof
            ]
        );
    }

    #[test]
    fn trim_markers_and_comments() {
        let items = lex("a  <<- 1 ->>  b <</* c */>>d", "<<", ">>");
        assert_eq!(items[0].val, "a");
        assert_eq!(items.iter().filter(|i| i.kind == Kind::Text).count(), 3);
        assert_eq!(items[4].val, "b ");
    }

    #[test]
    fn errors() {
        let last = |s: &str| lex(s, "<<", ">>").last().unwrap().val.clone();
        assert_eq!(last("<< \"abc >>"), "unterminated quoted string");
        assert_eq!(last("<< x"), "unclosed action");
        assert_eq!(last("<< (x >>"), "unclosed left paren");
        assert_eq!(last("<< 1x >>"), "bad number syntax: \"1x\"");
        assert_eq!(last("<</* x >>"), "unclosed comment");
        assert_eq!(last("<< x# >>"), "bad character U+0023 '#'");
    }
}
