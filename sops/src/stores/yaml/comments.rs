//! Comments in the scanner: the blanks, breaks and comment lines between tokens, split
//! into line, head and foot comments tied to tokens by go-yaml v3's rules, and the
//! placement of BLOCK-END tokens before the feet of the blocks they close.

use super::scanner::Fail;
use super::scanner::{CommentRec, Mark, Scanner, Tok, Token, is_blank, is_break, is_breakz};

impl Scanner {
    /// Closes block collections deeper than `column`; each BLOCK-END is placed before
    /// comments that sit at the closed block's indentation (they are its feet).
    pub(super) fn unroll_indent(&mut self, column: i64, scan_mark: Mark) -> Result<(), Fail> {
        if self.flow_level > 0 {
            return Ok(());
        }
        let mut block_mark = scan_mark;
        block_mark.index -= 1;
        while self.indent > column {
            let mut stop_index = block_mark.index;
            for c in self.comments.iter().rev() {
                if c.end_mark.index < stop_index {
                    break;
                }
                if c.start_mark.column == self.indent + 1 {
                    block_mark = c.start_mark;
                }
                stop_index = c.scan_mark.index;
            }
            self.insert_token(None, Token::new(Tok::BlockEnd, block_mark, block_mark))?;
            self.indent = self.indents.pop().unwrap_or(-1);
        }
        Ok(())
    }

    /// Skips blanks, line breaks and comments up to the next token.
    pub(super) fn scan_to_next_token(&mut self) -> Result<(), Fail> {
        let scan_mark = self.mark;
        loop {
            if self.mark.column == 0 && self.at(0) == '\u{feff}' {
                self.skip();
            }
            while self.at(0) == ' '
                || ((self.flow_level > 0 || !self.simple_key_allowed) && self.at(0) == '\t')
            {
                self.skip();
            }
            // A line comment right after a lone `-` that opened a sequence heads what
            // follows instead.
            if self.tokens.len() > 1 {
                let a = self.last_token(1).map(|t| t.kind);
                let b = self.last_token(0).map(|t| t.kind);
                let here = self.mark;
                let next_is_break = is_break(self.at(0));
                if let Some(c) = self.comments.last_mut()
                    && a == Some(Tok::BlockSequenceStart)
                    && b == Some(Tok::BlockEntry)
                    && !c.line.is_empty()
                    && !next_is_break
                {
                    c.head = std::mem::take(&mut c.line);
                    if c.start_mark.line == here.line - 1 {
                        c.token_mark = here;
                    }
                }
            }
            if self.at(0) == '#' {
                self.scan_comments(scan_mark);
            }
            if is_break(self.at(0)) {
                self.skip_line();
                if self.flow_level == 0 {
                    self.simple_key_allowed = true;
                }
            } else {
                break;
            }
        }
        Ok(())
    }

    /// A comment on the rest of the current line belongs to the token just scanned.
    pub(super) fn scan_line_comment(&mut self, token_mark: Mark) -> Result<(), Fail> {
        if self.newlines > 0 {
            return Ok(());
        }
        let mut text = String::new();
        let mut start_mark = Mark::default();
        for peek in 0..512 {
            let c = self.at(peek);
            if is_blank(c) {
                continue;
            }
            if c == '#' {
                let seen = self.mark.index + peek as i64;
                loop {
                    if is_breakz(self.at(0)) {
                        if self.mark.index >= seen || self.at(0) == '\0' {
                            break;
                        }
                        self.skip_line();
                    } else if self.mark.index >= seen {
                        if text.is_empty() {
                            start_mark = self.mark;
                        }
                        self.read(&mut text);
                    } else {
                        self.skip();
                    }
                }
            }
            break;
        }
        if !text.is_empty() {
            self.comments.push(CommentRec {
                token_mark,
                start_mark,
                line: text,
                ..CommentRec::default()
            });
        }
        Ok(())
    }

    /// Reads a block of comment lines, splitting it into feet of what came before and a
    /// head of what follows (by blank lines and indentation).
    fn scan_comments(&mut self, mut scan_mark: Mark) {
        let token = self.last_token(0).map(|t| (t.kind, t.start));
        let token = match token {
            Some((Tok::FlowEntry, _)) if self.tokens.len() > 1 => {
                self.last_token(1).map(|t| (t.kind, t.start))
            }
            t => t,
        };
        let (token_kind, mut token_mark) = token.unwrap_or((Tok::StreamStart, Mark::default()));
        let mut start_mark = Mark::default();
        let mut next_indent = self.indent.max(0);
        let mut recent_empty = false;
        let mut first_empty = self.newlines <= 1;
        let mut line = self.mark.line;
        let mut column = self.mark.column;
        let mut text = String::new();

        let mut foot_line = -1;
        if scan_mark.line > 0 {
            foot_line = self.mark.line - self.newlines + 1;
            if self.newlines == 0 && self.mark.column > 1 {
                foot_line += 1;
            }
        }

        let mut peek: usize = 0;
        while peek < 512 {
            column += 1;
            let c = self.at(peek);
            if is_blank(c) {
                peek += 1;
                continue;
            }
            let here = Mark {
                index: self.mark.index + peek as i64,
                line,
                column,
            };
            let close_flow = self.flow_level > 0 && (c == ']' || c == '}');
            if close_flow || is_breakz(c) {
                if close_flow || !recent_empty {
                    if close_flow
                        || (first_empty
                            && ((start_mark.line == foot_line && token_kind != Tok::Value)
                                || start_mark.column - 1 < next_indent))
                    {
                        if !text.is_empty() {
                            if start_mark.column - 1 < next_indent {
                                token_mark = start_mark;
                            }
                            self.comments.push(CommentRec {
                                scan_mark,
                                token_mark,
                                start_mark,
                                end_mark: here,
                                foot: std::mem::take(&mut text),
                                ..CommentRec::default()
                            });
                            scan_mark = here;
                            token_mark = scan_mark;
                        }
                    } else if !text.is_empty() && c != '\0' {
                        text.push('\n');
                    }
                }
                if !is_break(c) {
                    break;
                }
                first_empty = false;
                recent_empty = true;
                column = 0;
                line += 1;
                peek += 1;
                continue;
            }

            if !text.is_empty()
                && (close_flow || (column - 1 < next_indent && column != start_mark.column))
            {
                self.comments.push(CommentRec {
                    scan_mark,
                    token_mark,
                    start_mark,
                    end_mark: here,
                    foot: std::mem::take(&mut text),
                    ..CommentRec::default()
                });
                scan_mark = here;
                token_mark = scan_mark;
            }

            if c != '#' {
                break;
            }
            if text.is_empty() {
                start_mark = here;
            } else {
                text.push('\n');
            }
            recent_empty = false;

            let seen = self.mark.index + peek as i64;
            loop {
                if is_breakz(self.at(0)) {
                    if self.mark.index >= seen || self.at(0) == '\0' {
                        break;
                    }
                    self.skip_line();
                } else if self.mark.index >= seen {
                    self.read(&mut text);
                } else {
                    self.skip();
                }
            }
            peek = 1;
            column = 0;
            line = self.mark.line;
            next_indent = self.indent.max(0);
        }

        if !text.is_empty() {
            self.comments.push(CommentRec {
                scan_mark,
                token_mark: start_mark,
                start_mark,
                end_mark: Mark {
                    index: self.mark.index + peek as i64 - 1,
                    line,
                    column,
                },
                head: text,
                ..CommentRec::default()
            });
        }
    }
}
