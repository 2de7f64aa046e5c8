//! The token scanner: YAML text → tokens, plus the comments met between them, each tied to
//! the token it belongs to (go-yaml v3's rules, which decide where sops puts comments).
//!
//! The input is a vector of chars ending in an implicit NUL, so positions and columns count
//! characters as go-yaml's marks do. Every loop advances the position or stops at the end.

use std::collections::HashMap;

/// A position in the input (0-based; `index` counts characters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Mark {
    pub index: i64,
    pub line: i64,
    pub column: i64,
}

/// Token kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tok {
    StreamStart,
    StreamEnd,
    VersionDirective,
    TagDirective,
    DocumentStart,
    DocumentEnd,
    BlockSequenceStart,
    BlockMappingStart,
    BlockEnd,
    FlowSequenceStart,
    FlowSequenceEnd,
    FlowMappingStart,
    FlowMappingEnd,
    BlockEntry,
    FlowEntry,
    Key,
    Value,
    Alias,
    Anchor,
    Tag,
    Scalar,
}

/// How a scalar was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Style {
    Plain,
    Single,
    Double,
    Literal,
    Folded,
}

#[derive(Debug, Clone)]
pub(super) struct Token {
    pub kind: Tok,
    pub start: Mark,
    pub end: Mark,
    /// Scalar text, anchor/alias name, tag handle or `%TAG` handle.
    pub value: String,
    /// Tag suffix or `%TAG` prefix.
    pub suffix: String,
    pub style: Style,
    pub major: i64,
    pub minor: i64,
}

impl Token {
    pub(super) fn new(kind: Tok, start: Mark, end: Mark) -> Token {
        Token {
            kind,
            start,
            end,
            value: String::new(),
            suffix: String::new(),
            style: Style::Plain,
            major: 0,
            minor: 0,
        }
    }
}

/// A run of comment lines and the token it attaches to.
#[derive(Debug, Clone, Default)]
pub(super) struct CommentRec {
    pub scan_mark: Mark,
    pub token_mark: Mark,
    pub start_mark: Mark,
    pub end_mark: Mark,
    pub head: String,
    pub line: String,
    pub foot: String,
}

#[derive(Debug, Clone, Copy, Default)]
struct SimpleKey {
    possible: bool,
    required: bool,
    token_number: usize,
    mark: Mark,
}

/// Deepest block or flow nesting the scanner accepts (the tree allows 256 levels).
const MAX_NESTING: usize = 300;

/// Capacities Go's `append` gives a slice of tokens grown one by one; go-yaml compacts its
/// token queue only when the slice is full, which decides what "the previous token" is.
const GO_CAPS: [usize; 12] = [1, 2, 4, 8, 18, 37, 75, 151, 341, 625, 1024, 1479];

pub(super) struct Scanner {
    buf: Vec<char>,
    pos: usize,
    pub mark: Mark,
    pub(super) newlines: i64,
    stream_start_produced: bool,
    pub(super) flow_level: i64,
    pub tokens: Vec<Token>,
    pub tokens_head: usize,
    tokens_cap: usize,
    pub tokens_parsed: usize,
    pub token_available: bool,
    pub(super) indent: i64,
    pub(super) indents: Vec<i64>,
    pub(super) simple_key_allowed: bool,
    simple_keys: Vec<SimpleKey>,
    simple_keys_by_tok: HashMap<usize, usize>,
    pub comments: Vec<CommentRec>,
    pub comments_head: usize,
}

pub(super) fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}
pub(super) fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}
pub(super) fn is_breakz(c: char) -> bool {
    is_break(c) || c == '\0'
}
pub(super) fn is_blankz(c: char) -> bool {
    is_blank(c) || is_breakz(c)
}
pub(super) fn is_alpha(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

impl Scanner {
    pub(super) fn new(buf: Vec<char>) -> Scanner {
        Scanner {
            buf,
            pos: 0,
            mark: Mark::default(),
            newlines: 0,
            stream_start_produced: false,
            flow_level: 0,
            tokens: Vec::new(),
            tokens_head: 0,
            tokens_cap: 0,
            tokens_parsed: 0,
            token_available: false,
            indent: 0,
            indents: Vec::new(),
            simple_key_allowed: false,
            simple_keys: Vec::new(),
            simple_keys_by_tok: HashMap::new(),
            comments: Vec::new(),
            comments_head: 0,
        }
    }

    /// The character `k` places ahead (NUL past the end).
    pub(super) fn at(&self, k: usize) -> char {
        self.buf.get(self.pos + k).copied().unwrap_or('\0')
    }

    pub(super) fn skip(&mut self) {
        if !is_blank(self.at(0)) {
            self.newlines = 0;
        }
        self.mark.index += 1;
        self.mark.column += 1;
        self.pos += 1;
    }

    pub(super) fn skip_line(&mut self) {
        if self.at(0) == '\r' && self.at(1) == '\n' {
            self.mark.index += 2;
            self.pos += 2;
        } else if is_break(self.at(0)) {
            self.mark.index += 1;
            self.pos += 1;
        } else {
            return;
        }
        self.mark.column = 0;
        self.mark.line += 1;
        self.newlines += 1;
    }

    pub(super) fn read(&mut self, s: &mut String) {
        let c = self.at(0);
        if !is_blank(c) {
            self.newlines = 0;
        }
        s.push(c);
        self.pos += 1;
        self.mark.index += 1;
        self.mark.column += 1;
    }

    pub(super) fn read_line(&mut self, s: &mut String) {
        let c = self.at(0);
        if c == '\r' && self.at(1) == '\n' {
            s.push('\n');
            self.pos += 2;
            self.mark.index += 1;
        } else if c == '\r' || c == '\n' || c == '\u{85}' {
            s.push('\n');
            self.pos += 1;
        } else if c == '\u{2028}' || c == '\u{2029}' {
            s.push(c);
            self.pos += 1;
        } else {
            return;
        }
        self.mark.index += 1;
        self.mark.column = 0;
        self.mark.line += 1;
        self.newlines += 1;
    }

    pub(super) fn error(&self, context: &str, context_mark: Mark, problem: &str) -> Fail {
        Fail::scanner(context, context_mark, problem, self.mark)
    }

    /// Inserts a token at `pos` places after the queue head (or appends), keeping go-yaml's
    /// slice bookkeeping so that "the last two tokens" mean the same thing.
    pub(super) fn insert_token(&mut self, pos: Option<isize>, token: Token) -> Result<(), Fail> {
        if self.tokens_head > 0 && self.tokens.len() == self.tokens_cap {
            self.tokens.drain(..self.tokens_head);
            self.tokens_head = 0;
        }
        if self.tokens.len() == self.tokens_cap {
            self.tokens_cap = GO_CAPS
                .iter()
                .copied()
                .find(|&c| c > self.tokens_cap)
                .unwrap_or(self.tokens_cap + self.tokens_cap / 4 + 1);
        }
        match pos {
            None => self.tokens.push(token),
            Some(p) => {
                let at = self.tokens_head as isize + p;
                if at < 0 || at as usize > self.tokens.len() {
                    return Err(Fail::Msg("token queue out of order".into()));
                }
                self.tokens.insert(at as usize, token);
            }
        }
        Ok(())
    }

    pub(super) fn last_token(&self, back: usize) -> Option<&Token> {
        let n = self.tokens.len();
        if n > back {
            self.tokens.get(n - 1 - back)
        } else {
            None
        }
    }

    /// Makes sure the queue holds a token the parser may take.
    pub(super) fn fetch_more_tokens(&mut self) -> Result<(), Fail> {
        loop {
            if self.tokens.len() - self.tokens_head > 2 {
                match self.simple_keys_by_tok.get(&self.tokens_parsed).copied() {
                    None => break,
                    Some(i) => {
                        if !self.simple_key_is_valid(i)? {
                            break;
                        }
                    }
                }
            }
            self.fetch_next_token()?;
        }
        self.token_available = true;
        Ok(())
    }

    fn fetch_next_token(&mut self) -> Result<(), Fail> {
        if !self.stream_start_produced {
            return self.fetch_stream_start();
        }
        let scan_mark = self.mark;
        self.scan_to_next_token()?;
        self.unroll_indent(self.mark.column, scan_mark)?;

        let c = self.at(0);
        if c == '\0' {
            return self.fetch_stream_end();
        }
        if self.mark.column == 0 && c == '%' {
            return self.fetch_directive();
        }
        if self.mark.column == 0 && is_blankz(self.at(3)) {
            if c == '-' && self.at(1) == '-' && self.at(2) == '-' {
                return self.fetch_document_indicator(Tok::DocumentStart);
            }
            if c == '.' && self.at(1) == '.' && self.at(2) == '.' {
                return self.fetch_document_indicator(Tok::DocumentEnd);
            }
        }

        let mut comment_mark = self.mark;
        if ((self.flow_level == 0 && c == ':') || (self.flow_level > 0 && c == ','))
            && let Some(t) = self.last_token(0)
        {
            // A comment after `:` (or `,`) belongs to the token before it.
            comment_mark = t.start;
        }
        self.fetch_token_at(c)?;
        if self
            .last_token(0)
            .is_some_and(|t| t.kind == Tok::BlockEntry)
        {
            // A sequence indicator alone has no line comment: it heads what follows.
            return Ok(());
        }
        self.scan_line_comment(comment_mark)
    }

    fn fetch_token_at(&mut self, c: char) -> Result<(), Fail> {
        let next = self.at(1);
        let flow = self.flow_level > 0;
        match c {
            '[' => return self.fetch_flow_collection_start(Tok::FlowSequenceStart),
            '{' => return self.fetch_flow_collection_start(Tok::FlowMappingStart),
            ']' => return self.fetch_flow_collection_end(Tok::FlowSequenceEnd),
            '}' => return self.fetch_flow_collection_end(Tok::FlowMappingEnd),
            ',' => return self.fetch_flow_entry(),
            '-' if is_blankz(next) => return self.fetch_block_entry(),
            '?' if flow || is_blankz(next) => return self.fetch_key(),
            ':' if flow || is_blankz(next) => return self.fetch_value(),
            '*' => return self.fetch_anchor(Tok::Alias),
            '&' => return self.fetch_anchor(Tok::Anchor),
            '!' => return self.fetch_tag(),
            '|' if !flow => return self.fetch_block_scalar(true),
            '>' if !flow => return self.fetch_block_scalar(false),
            '\'' => return self.fetch_flow_scalar(true),
            '"' => return self.fetch_flow_scalar(false),
            _ => {}
        }
        let indicator = is_blankz(c) || "-?:,[]{}#&*!|>'\"%@`".contains(c);
        if !indicator
            || (c == '-' && !is_blank(next))
            || (!flow && (c == '?' || c == ':') && !is_blankz(next))
        {
            return self.fetch_plain_scalar();
        }
        Err(self.error(
            "while scanning for the next token",
            self.mark,
            "found character that cannot start any token",
        ))
    }

    fn simple_key_is_valid(&mut self, i: usize) -> Result<bool, Fail> {
        let mark = self.mark;
        let Some(key) = self.simple_keys.get_mut(i) else {
            return Ok(false);
        };
        if !key.possible {
            return Ok(false);
        }
        if key.mark.line < mark.line || key.mark.index + 1024 < mark.index {
            if key.required {
                let km = key.mark;
                return Err(self.error(
                    "while scanning a simple key",
                    km,
                    "could not find expected ':'",
                ));
            }
            key.possible = false;
            return Ok(false);
        }
        Ok(true)
    }

    fn save_simple_key(&mut self) -> Result<(), Fail> {
        let required = self.flow_level == 0 && self.indent == self.mark.column;
        if self.simple_key_allowed {
            let key = SimpleKey {
                possible: true,
                required,
                token_number: self.tokens_parsed + (self.tokens.len() - self.tokens_head),
                mark: self.mark,
            };
            self.remove_simple_key()?;
            let last = self.simple_keys.len().saturating_sub(1);
            if let Some(slot) = self.simple_keys.get_mut(last) {
                *slot = key;
                self.simple_keys_by_tok.insert(key.token_number, last);
            }
        }
        Ok(())
    }

    fn remove_simple_key(&mut self) -> Result<(), Fail> {
        let Some(key) = self.simple_keys.last().copied() else {
            return Ok(());
        };
        if key.possible {
            if key.required {
                return Err(self.error(
                    "while scanning a simple key",
                    key.mark,
                    "could not find expected ':'",
                ));
            }
            if let Some(k) = self.simple_keys.last_mut() {
                k.possible = false;
            }
            self.simple_keys_by_tok.remove(&key.token_number);
        }
        Ok(())
    }

    fn increase_flow_level(&mut self) -> Result<(), Fail> {
        self.simple_keys.push(SimpleKey {
            possible: false,
            required: false,
            token_number: self.tokens_parsed + (self.tokens.len() - self.tokens_head),
            mark: self.mark,
        });
        self.flow_level += 1;
        if self.flow_level as usize > MAX_NESTING {
            return Err(self.error(
                "while increasing flow level",
                self.mark,
                "exceeded the maximum nesting depth",
            ));
        }
        Ok(())
    }

    fn decrease_flow_level(&mut self) {
        if self.flow_level > 0 {
            self.flow_level -= 1;
            if let Some(k) = self.simple_keys.pop() {
                self.simple_keys_by_tok.remove(&k.token_number);
            }
        }
    }

    /// Opens a block collection when `column` is deeper than the current indentation.
    fn roll_indent(
        &mut self,
        column: i64,
        number: Option<usize>,
        kind: Tok,
        mark: Mark,
    ) -> Result<(), Fail> {
        if self.flow_level > 0 {
            return Ok(());
        }
        if self.indent < column {
            self.indents.push(self.indent);
            self.indent = column;
            if self.indents.len() > MAX_NESTING {
                return Err(self.error(
                    "while increasing indent level",
                    mark,
                    "exceeded the maximum nesting depth",
                ));
            }
            let pos = number.map(|n| n as isize - self.tokens_parsed as isize);
            self.insert_token(pos, Token::new(kind, mark, mark))?;
        }
        Ok(())
    }

    fn fetch_stream_start(&mut self) -> Result<(), Fail> {
        self.indent = -1;
        self.simple_keys.push(SimpleKey::default());
        self.simple_key_allowed = true;
        self.stream_start_produced = true;
        self.insert_token(None, Token::new(Tok::StreamStart, self.mark, self.mark))
    }

    fn fetch_stream_end(&mut self) -> Result<(), Fail> {
        if self.mark.column != 0 {
            self.mark.column = 0;
            self.mark.line += 1;
        }
        self.unroll_indent(-1, self.mark)?;
        self.remove_simple_key()?;
        self.simple_key_allowed = false;
        self.insert_token(None, Token::new(Tok::StreamEnd, self.mark, self.mark))
    }

    fn fetch_directive(&mut self) -> Result<(), Fail> {
        self.unroll_indent(-1, self.mark)?;
        self.remove_simple_key()?;
        self.simple_key_allowed = false;
        let token = self.scan_directive()?;
        self.insert_token(None, token)
    }

    fn fetch_document_indicator(&mut self, kind: Tok) -> Result<(), Fail> {
        self.unroll_indent(-1, self.mark)?;
        self.remove_simple_key()?;
        self.simple_key_allowed = false;
        let start = self.mark;
        self.skip();
        self.skip();
        self.skip();
        self.insert_token(None, Token::new(kind, start, self.mark))
    }

    fn fetch_flow_collection_start(&mut self, kind: Tok) -> Result<(), Fail> {
        self.save_simple_key()?;
        self.increase_flow_level()?;
        self.simple_key_allowed = true;
        self.single_char_token(kind)
    }

    fn fetch_flow_collection_end(&mut self, kind: Tok) -> Result<(), Fail> {
        self.remove_simple_key()?;
        self.decrease_flow_level();
        self.simple_key_allowed = false;
        self.single_char_token(kind)
    }

    fn fetch_flow_entry(&mut self) -> Result<(), Fail> {
        self.remove_simple_key()?;
        self.simple_key_allowed = true;
        self.single_char_token(Tok::FlowEntry)
    }

    fn single_char_token(&mut self, kind: Tok) -> Result<(), Fail> {
        let start = self.mark;
        self.skip();
        self.insert_token(None, Token::new(kind, start, self.mark))
    }

    fn fetch_block_entry(&mut self) -> Result<(), Fail> {
        if self.flow_level == 0 {
            if !self.simple_key_allowed {
                return Err(self.error(
                    "",
                    self.mark,
                    "block sequence entries are not allowed in this context",
                ));
            }
            self.roll_indent(self.mark.column, None, Tok::BlockSequenceStart, self.mark)?;
        }
        self.remove_simple_key()?;
        self.simple_key_allowed = true;
        self.single_char_token(Tok::BlockEntry)
    }

    fn fetch_key(&mut self) -> Result<(), Fail> {
        if self.flow_level == 0 {
            if !self.simple_key_allowed {
                return Err(self.error(
                    "",
                    self.mark,
                    "mapping keys are not allowed in this context",
                ));
            }
            self.roll_indent(self.mark.column, None, Tok::BlockMappingStart, self.mark)?;
        }
        self.remove_simple_key()?;
        self.simple_key_allowed = self.flow_level == 0;
        self.single_char_token(Tok::Key)
    }

    fn fetch_value(&mut self) -> Result<(), Fail> {
        let last = self.simple_keys.len().saturating_sub(1);
        if self.simple_key_is_valid(last)? {
            let key = self.simple_keys.get(last).copied().unwrap_or_default();
            let pos = key.token_number as isize - self.tokens_parsed as isize;
            self.insert_token(Some(pos), Token::new(Tok::Key, key.mark, key.mark))?;
            self.roll_indent(
                key.mark.column,
                Some(key.token_number),
                Tok::BlockMappingStart,
                key.mark,
            )?;
            if let Some(k) = self.simple_keys.get_mut(last) {
                k.possible = false;
            }
            self.simple_keys_by_tok.remove(&key.token_number);
            self.simple_key_allowed = false;
        } else {
            if self.flow_level == 0 {
                if !self.simple_key_allowed {
                    return Err(self.error(
                        "",
                        self.mark,
                        "mapping values are not allowed in this context",
                    ));
                }
                self.roll_indent(self.mark.column, None, Tok::BlockMappingStart, self.mark)?;
            }
            self.simple_key_allowed = self.flow_level == 0;
        }
        self.single_char_token(Tok::Value)
    }

    fn fetch_anchor(&mut self, kind: Tok) -> Result<(), Fail> {
        self.save_simple_key()?;
        self.simple_key_allowed = false;
        let token = self.scan_anchor(kind)?;
        self.insert_token(None, token)
    }

    fn fetch_tag(&mut self) -> Result<(), Fail> {
        self.save_simple_key()?;
        self.simple_key_allowed = false;
        let token = self.scan_tag()?;
        self.insert_token(None, token)
    }

    fn fetch_block_scalar(&mut self, literal: bool) -> Result<(), Fail> {
        self.remove_simple_key()?;
        self.simple_key_allowed = true;
        let token = self.scan_block_scalar(literal)?;
        self.insert_token(None, token)
    }

    fn fetch_flow_scalar(&mut self, single: bool) -> Result<(), Fail> {
        self.save_simple_key()?;
        self.simple_key_allowed = false;
        let token = self.scan_flow_scalar(single)?;
        self.insert_token(None, token)
    }

    fn fetch_plain_scalar(&mut self) -> Result<(), Fail> {
        self.save_simple_key()?;
        self.simple_key_allowed = false;
        let token = self.scan_plain_scalar()?;
        self.insert_token(None, token)
    }
}

/// Why parsing failed (internal; becomes [`SopsError::Load`]).
#[derive(Debug)]
pub(super) enum Fail {
    Syntax {
        context_mark: Mark,
        problem: String,
        problem_mark: Mark,
        scanner: bool,
    },
    Msg(String),
}

impl Fail {
    pub(super) fn scanner(
        _context: &str,
        context_mark: Mark,
        problem: &str,
        problem_mark: Mark,
    ) -> Fail {
        Fail::Syntax {
            context_mark,
            problem: problem.into(),
            problem_mark,
            scanner: true,
        }
    }

    pub(super) fn parser(
        _context: &str,
        context_mark: Mark,
        problem: &str,
        problem_mark: Mark,
    ) -> Fail {
        Fail::Syntax {
            context_mark,
            problem: problem.into(),
            problem_mark,
            scanner: false,
        }
    }

    /// go-yaml's wording: `yaml: line N: problem`.
    pub(super) fn message(&self) -> String {
        match self {
            Fail::Msg(m) => m.clone(),
            Fail::Syntax {
                context_mark,
                problem,
                problem_mark,
                scanner,
            } => {
                let extra = i64::from(*scanner);
                let line = if context_mark.line != 0 {
                    context_mark.line + extra
                } else if problem_mark.line != 0 {
                    problem_mark.line + extra
                } else {
                    0
                };
                if line != 0 {
                    format!("yaml: line {line}: {problem}")
                } else {
                    format!("yaml: {problem}")
                }
            }
        }
    }
}
