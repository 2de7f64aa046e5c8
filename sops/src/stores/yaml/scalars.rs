//! Scanning of the tokens that carry text: directives, anchors, tags and the five scalar
//! styles (plain, single- and double-quoted, literal and folded blocks).

use super::scanner::Fail;
use super::scanner::{
    Mark, Scanner, Style, Tok, Token, is_alpha, is_blank, is_blankz, is_break, is_breakz,
};

fn hex_value(c: char) -> Option<u32> {
    c.to_digit(16)
}

impl Scanner {
    fn at_document_indicator(&self) -> bool {
        self.mark.column == 0
            && ((self.at(0) == '-' && self.at(1) == '-' && self.at(2) == '-')
                || (self.at(0) == '.' && self.at(1) == '.' && self.at(2) == '.'))
            && is_blankz(self.at(3))
    }

    pub(super) fn scan_directive(&mut self) -> Result<Token, Fail> {
        let start = self.mark;
        self.skip();
        let mut name = String::new();
        while is_alpha(self.at(0)) {
            self.read(&mut name);
        }
        let ctx = "while scanning a directive";
        if name.is_empty() {
            return Err(self.error(ctx, start, "could not find expected directive name"));
        }
        if !is_blankz(self.at(0)) {
            return Err(self.error(ctx, start, "found unexpected non-alphabetical character"));
        }
        let mut token;
        if name == "YAML" {
            let vctx = "while scanning a %YAML directive";
            while is_blank(self.at(0)) {
                self.skip();
            }
            let major = self.scan_version_number(start)?;
            if self.at(0) != '.' {
                return Err(self.error(
                    vctx,
                    start,
                    "did not find expected digit or '.' character",
                ));
            }
            self.skip();
            let minor = self.scan_version_number(start)?;
            token = Token::new(Tok::VersionDirective, start, self.mark);
            token.major = major;
            token.minor = minor;
        } else if name == "TAG" {
            let tctx = "while scanning a %TAG directive";
            while is_blank(self.at(0)) {
                self.skip();
            }
            let handle = self.scan_tag_handle(true, start)?;
            if !is_blank(self.at(0)) {
                return Err(self.error(tctx, start, "did not find expected whitespace"));
            }
            while is_blank(self.at(0)) {
                self.skip();
            }
            let prefix = self.scan_tag_uri(true, "", start)?;
            if !is_blankz(self.at(0)) {
                return Err(self.error(
                    tctx,
                    start,
                    "did not find expected whitespace or line break",
                ));
            }
            token = Token::new(Tok::TagDirective, start, self.mark);
            token.value = handle;
            token.suffix = prefix;
        } else {
            return Err(self.error(ctx, start, "found unknown directive name"));
        }
        while is_blank(self.at(0)) {
            self.skip();
        }
        if self.at(0) == '#' {
            while !is_breakz(self.at(0)) {
                self.skip();
            }
        }
        if !is_breakz(self.at(0)) {
            return Err(self.error(ctx, start, "did not find expected comment or line break"));
        }
        if is_break(self.at(0)) {
            self.skip_line();
        }
        Ok(token)
    }

    fn scan_version_number(&mut self, start: Mark) -> Result<i64, Fail> {
        let mut value = 0i64;
        let mut length = 0;
        while let Some(d) = self.at(0).to_digit(10) {
            length += 1;
            if length > 2 {
                return Err(self.error(
                    "while scanning a %YAML directive",
                    start,
                    "found extremely long version number",
                ));
            }
            value = value * 10 + i64::from(d);
            self.skip();
        }
        if length == 0 {
            return Err(self.error(
                "while scanning a %YAML directive",
                start,
                "did not find expected version number",
            ));
        }
        Ok(value)
    }

    pub(super) fn scan_anchor(&mut self, kind: Tok) -> Result<Token, Fail> {
        let start = self.mark;
        self.skip();
        let mut name = String::new();
        while is_alpha(self.at(0)) {
            self.read(&mut name);
        }
        let end = self.mark;
        let c = self.at(0);
        if name.is_empty() || !(is_blankz(c) || "?:,]}%@`".contains(c)) {
            let ctx = if kind == Tok::Anchor {
                "while scanning an anchor"
            } else {
                "while scanning an alias"
            };
            return Err(self.error(
                ctx,
                start,
                "did not find expected alphabetic or numeric character",
            ));
        }
        let mut token = Token::new(kind, start, end);
        token.value = name;
        Ok(token)
    }

    pub(super) fn scan_tag(&mut self) -> Result<Token, Fail> {
        let start = self.mark;
        let (handle, suffix);
        if self.at(1) == '<' {
            self.skip();
            self.skip();
            suffix = self.scan_tag_uri(false, "", start)?;
            if self.at(0) != '>' {
                return Err(self.error(
                    "while scanning a tag",
                    start,
                    "did not find the expected '>'",
                ));
            }
            self.skip();
            handle = String::new();
        } else {
            let h = self.scan_tag_handle(false, start)?;
            if h.len() > 1 && h.starts_with('!') && h.ends_with('!') {
                suffix = self.scan_tag_uri(false, "", start)?;
                handle = h;
            } else {
                let s = self.scan_tag_uri(false, &h, start)?;
                if s.is_empty() {
                    handle = String::new();
                    suffix = "!".to_string();
                } else {
                    handle = "!".to_string();
                    suffix = s;
                }
            }
        }
        if !is_blankz(self.at(0)) {
            return Err(self.error(
                "while scanning a tag",
                start,
                "did not find expected whitespace or line break",
            ));
        }
        let mut token = Token::new(Tok::Tag, start, self.mark);
        token.value = handle;
        token.suffix = suffix;
        Ok(token)
    }

    fn scan_tag_handle(&mut self, directive: bool, start: Mark) -> Result<String, Fail> {
        let ctx = if directive {
            "while parsing a %TAG directive"
        } else {
            "while parsing a tag"
        };
        if self.at(0) != '!' {
            return Err(self.error(ctx, start, "did not find expected '!'"));
        }
        let mut s = String::new();
        self.read(&mut s);
        while is_alpha(self.at(0)) {
            self.read(&mut s);
        }
        if self.at(0) == '!' {
            self.read(&mut s);
        } else if directive && s != "!" {
            return Err(self.error(ctx, start, "did not find expected '!'"));
        }
        Ok(s)
    }

    fn scan_tag_uri(&mut self, directive: bool, head: &str, start: Mark) -> Result<String, Fail> {
        let ctx = if directive {
            "while parsing a %TAG directive"
        } else {
            "while parsing a tag"
        };
        let mut bytes: Vec<u8> = Vec::new();
        let mut has_tag = !head.is_empty();
        if head.len() > 1 {
            bytes.extend_from_slice(head.get(1..).unwrap_or("").as_bytes());
        }
        loop {
            let c = self.at(0);
            if !(is_alpha(c) || ";/?:@&=+$,.!~*'()[]%".contains(c)) || c == '\0' {
                break;
            }
            if c == '%' {
                self.scan_uri_escapes(directive, start, &mut bytes)?;
            } else {
                let mut s = String::new();
                self.read(&mut s);
                bytes.extend_from_slice(s.as_bytes());
            }
            has_tag = true;
        }
        if !has_tag {
            return Err(self.error(ctx, start, "did not find expected tag URI"));
        }
        String::from_utf8(bytes).map_err(|_| self.error(ctx, start, "found an incorrect UTF-8 tag"))
    }

    fn scan_uri_escapes(
        &mut self,
        directive: bool,
        start: Mark,
        out: &mut Vec<u8>,
    ) -> Result<(), Fail> {
        let ctx = if directive {
            "while parsing a %TAG directive"
        } else {
            "while parsing a tag"
        };
        let mut width = 0usize;
        let mut first = true;
        while first || width > 0 {
            let (Some(h), Some(l)) = (hex_value(self.at(1)), hex_value(self.at(2))) else {
                return Err(self.error(ctx, start, "did not find URI escaped octet"));
            };
            if self.at(0) != '%' {
                return Err(self.error(ctx, start, "did not find URI escaped octet"));
            }
            let octet = ((h << 4) + l) as u8;
            if first {
                width = match octet {
                    o if o & 0x80 == 0 => 1,
                    o if o & 0xE0 == 0xC0 => 2,
                    o if o & 0xF0 == 0xE0 => 3,
                    o if o & 0xF8 == 0xF0 => 4,
                    _ => {
                        return Err(self.error(
                            ctx,
                            start,
                            "found an incorrect leading UTF-8 octet",
                        ));
                    }
                };
                first = false;
            } else if octet & 0xC0 != 0x80 {
                return Err(self.error(ctx, start, "found an incorrect trailing UTF-8 octet"));
            }
            out.push(octet);
            self.skip();
            self.skip();
            self.skip();
            width -= 1;
        }
        Ok(())
    }

    pub(super) fn scan_block_scalar(&mut self, literal: bool) -> Result<Token, Fail> {
        let ctx = "while scanning a block scalar";
        let start = self.mark;
        self.skip();
        let mut chomping = 0i32;
        let mut increment = 0i64;
        let c = self.at(0);
        if c == '+' || c == '-' {
            chomping = if c == '+' { 1 } else { -1 };
            self.skip();
            if let Some(d) = self.at(0).to_digit(10) {
                if d == 0 {
                    return Err(self.error(
                        ctx,
                        start,
                        "found an indentation indicator equal to 0",
                    ));
                }
                increment = i64::from(d);
                self.skip();
            }
        } else if let Some(d) = c.to_digit(10) {
            if d == 0 {
                return Err(self.error(ctx, start, "found an indentation indicator equal to 0"));
            }
            increment = i64::from(d);
            self.skip();
            let c = self.at(0);
            if c == '+' || c == '-' {
                chomping = if c == '+' { 1 } else { -1 };
                self.skip();
            }
        }
        while is_blank(self.at(0)) {
            self.skip();
        }
        if self.at(0) == '#' {
            self.scan_line_comment(start)?;
            while !is_breakz(self.at(0)) {
                self.skip();
            }
        }
        if !is_breakz(self.at(0)) {
            return Err(self.error(ctx, start, "did not find expected comment or line break"));
        }
        if is_break(self.at(0)) {
            self.skip_line();
        }
        let mut end = self.mark;
        let mut indent = 0i64;
        if increment > 0 {
            indent = if self.indent >= 0 {
                self.indent + increment
            } else {
                increment
            };
        }
        let mut s = String::new();
        let mut leading_break = String::new();
        let mut trailing_breaks = String::new();
        self.scan_block_scalar_breaks(&mut indent, &mut trailing_breaks, start, &mut end)?;
        let mut leading_blank = false;
        while self.mark.column == indent && self.at(0) != '\0' {
            let trailing_blank = is_blank(self.at(0));
            if !literal && !leading_blank && !trailing_blank && leading_break.starts_with('\n') {
                if trailing_breaks.is_empty() {
                    s.push(' ');
                }
            } else {
                s.push_str(&leading_break);
            }
            leading_break.clear();
            s.push_str(&trailing_breaks);
            trailing_breaks.clear();
            leading_blank = is_blank(self.at(0));
            while !is_breakz(self.at(0)) {
                self.read(&mut s);
            }
            self.read_line(&mut leading_break);
            self.scan_block_scalar_breaks(&mut indent, &mut trailing_breaks, start, &mut end)?;
        }
        if chomping != -1 {
            s.push_str(&leading_break);
        }
        if chomping == 1 {
            s.push_str(&trailing_breaks);
        }
        let mut token = Token::new(Tok::Scalar, start, end);
        token.value = s;
        token.style = if literal {
            Style::Literal
        } else {
            Style::Folded
        };
        Ok(token)
    }

    fn scan_block_scalar_breaks(
        &mut self,
        indent: &mut i64,
        breaks: &mut String,
        start: Mark,
        end: &mut Mark,
    ) -> Result<(), Fail> {
        *end = self.mark;
        let mut max_indent = 0;
        loop {
            while (*indent == 0 || self.mark.column < *indent) && self.at(0) == ' ' {
                self.skip();
            }
            if self.mark.column > max_indent {
                max_indent = self.mark.column;
            }
            if (*indent == 0 || self.mark.column < *indent) && self.at(0) == '\t' {
                return Err(self.error(
                    "while scanning a block scalar",
                    start,
                    "found a tab character where an indentation space is expected",
                ));
            }
            if !is_break(self.at(0)) {
                break;
            }
            self.read_line(breaks);
            *end = self.mark;
        }
        if *indent == 0 {
            *indent = max_indent.max(self.indent + 1).max(1);
        }
        Ok(())
    }

    pub(super) fn scan_flow_scalar(&mut self, single: bool) -> Result<Token, Fail> {
        let start = self.mark;
        self.skip();
        let mut s = String::new();
        let mut leading_break = String::new();
        let mut trailing_breaks = String::new();
        let mut whitespaces = String::new();
        loop {
            if self.at_document_indicator() {
                return Err(self.error(
                    "while scanning a quoted scalar",
                    start,
                    "found unexpected document indicator",
                ));
            }
            if self.at(0) == '\0' {
                return Err(self.error(
                    "while scanning a quoted scalar",
                    start,
                    "found unexpected end of stream",
                ));
            }
            let mut leading_blanks = false;
            while !is_blankz(self.at(0)) {
                let c = self.at(0);
                if single && c == '\'' && self.at(1) == '\'' {
                    s.push('\'');
                    self.skip();
                    self.skip();
                } else if single && c == '\'' || !single && c == '"' {
                    break;
                } else if !single && c == '\\' && is_break(self.at(1)) {
                    self.skip();
                    self.skip_line();
                    leading_blanks = true;
                    break;
                } else if !single && c == '\\' {
                    self.scan_escape(start, &mut s)?;
                } else {
                    self.read(&mut s);
                }
            }
            let c = self.at(0);
            if (single && c == '\'') || (!single && c == '"') {
                break;
            }
            while is_blank(self.at(0)) || is_break(self.at(0)) {
                if is_blank(self.at(0)) {
                    if leading_blanks {
                        self.skip();
                    } else {
                        self.read(&mut whitespaces);
                    }
                } else if !leading_blanks {
                    whitespaces.clear();
                    self.read_line(&mut leading_break);
                    leading_blanks = true;
                } else {
                    self.read_line(&mut trailing_breaks);
                }
            }
            if leading_blanks {
                fold_breaks(&mut s, &mut leading_break, &mut trailing_breaks);
            } else {
                s.push_str(&whitespaces);
                whitespaces.clear();
            }
        }
        self.skip();
        let mut token = Token::new(Tok::Scalar, start, self.mark);
        token.value = s;
        token.style = if single { Style::Single } else { Style::Double };
        Ok(token)
    }

    fn scan_escape(&mut self, start: Mark, s: &mut String) -> Result<(), Fail> {
        let ctx = "while parsing a quoted scalar";
        let mut code_length = 0usize;
        match self.at(1) {
            '0' => s.push('\0'),
            'a' => s.push('\x07'),
            'b' => s.push('\x08'),
            't' | '\t' => s.push('\t'),
            'n' => s.push('\n'),
            'v' => s.push('\x0b'),
            'f' => s.push('\x0c'),
            'r' => s.push('\r'),
            'e' => s.push('\x1b'),
            ' ' => s.push(' '),
            '"' => s.push('"'),
            '\'' => s.push('\''),
            '\\' => s.push('\\'),
            'N' => s.push('\u{85}'),
            '_' => s.push('\u{a0}'),
            'L' => s.push('\u{2028}'),
            'P' => s.push('\u{2029}'),
            'x' => code_length = 2,
            'u' => code_length = 4,
            'U' => code_length = 8,
            _ => return Err(self.error(ctx, start, "found unknown escape character")),
        }
        self.skip();
        self.skip();
        if code_length > 0 {
            let mut value: u32 = 0;
            for k in 0..code_length {
                let Some(d) = hex_value(self.at(k)) else {
                    return Err(self.error(ctx, start, "did not find expected hexdecimal number"));
                };
                value = (value << 4) + d;
            }
            let Some(ch) = char::from_u32(value) else {
                return Err(self.error(ctx, start, "found invalid Unicode character escape code"));
            };
            s.push(ch);
            for _ in 0..code_length {
                self.skip();
            }
        }
        Ok(())
    }

    pub(super) fn scan_plain_scalar(&mut self) -> Result<Token, Fail> {
        let mut s = String::new();
        let mut leading_break = String::new();
        let mut trailing_breaks = String::new();
        let mut whitespaces = String::new();
        let mut leading_blanks = false;
        let indent = self.indent + 1;
        let start = self.mark;
        let mut end = self.mark;
        let flow = self.flow_level > 0;
        loop {
            if self.at_document_indicator() || self.at(0) == '#' {
                break;
            }
            while !is_blankz(self.at(0)) {
                let c = self.at(0);
                if (c == ':' && is_blankz(self.at(1))) || (flow && ",?[]{}".contains(c)) {
                    break;
                }
                if leading_blanks || !whitespaces.is_empty() {
                    if leading_blanks {
                        fold_breaks(&mut s, &mut leading_break, &mut trailing_breaks);
                        leading_blanks = false;
                    } else {
                        s.push_str(&whitespaces);
                        whitespaces.clear();
                    }
                }
                self.read(&mut s);
                end = self.mark;
            }
            if !(is_blank(self.at(0)) || is_break(self.at(0))) {
                break;
            }
            while is_blank(self.at(0)) || is_break(self.at(0)) {
                if is_blank(self.at(0)) {
                    if leading_blanks && self.mark.column < indent && self.at(0) == '\t' {
                        return Err(self.error(
                            "while scanning a plain scalar",
                            start,
                            "found a tab character that violates indentation",
                        ));
                    }
                    if leading_blanks {
                        self.skip();
                    } else {
                        self.read(&mut whitespaces);
                    }
                } else if !leading_blanks {
                    whitespaces.clear();
                    self.read_line(&mut leading_break);
                    leading_blanks = true;
                } else {
                    self.read_line(&mut trailing_breaks);
                }
            }
            if !flow && self.mark.column < indent {
                break;
            }
        }
        let mut token = Token::new(Tok::Scalar, start, end);
        token.value = s;
        token.style = Style::Plain;
        if leading_blanks {
            self.simple_key_allowed = true;
        }
        Ok(token)
    }
}

/// Line folding shared by quoted and plain scalars: one break becomes a space, more breaks
/// are kept (less the first).
fn fold_breaks(s: &mut String, leading_break: &mut String, trailing_breaks: &mut String) {
    if leading_break.starts_with('\n') {
        if trailing_breaks.is_empty() {
            s.push(' ');
        } else {
            s.push_str(trailing_breaks);
        }
    } else {
        s.push_str(leading_break);
        s.push_str(trailing_breaks);
    }
    trailing_breaks.clear();
    leading_break.clear();
}
