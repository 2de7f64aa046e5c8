//! The envsubst parser: text with `$$` escapes and `${...}` expressions, following the syntax
//! of `fluxcd/pkg/envsubst` (a fork of drone/envsubst). Parsing is one pass over the text,
//! with expression nesting bounded by [`MAX_NESTING`].

use super::budget::MAX_NESTING;
use super::error::EnvsubstError;

/// A piece of parsed text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Node {
    Text(String),
    Expr(Expr),
}

/// One `${...}` expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Expr {
    /// Variable name.
    pub(super) param: String,
    /// Operator as written: "" for `${var}`, `#` for `${#var}` and the prefix trim, `:` for
    /// substrings, `/`, `//`, `/#`, `/%`, `%`, `%%`, `##`, casing (`^`, `^^`, `,`, `,,`) or a
    /// default operator (`=`, `:=`, `:-`, `:?`, `:+`).
    pub(super) op: String,
    pub(super) args: Vec<Node>,
}

/// Operators that supply a value for an unset variable (exempt from the strict check).
pub(super) fn is_default_op(op: &str) -> bool {
    matches!(op, "-" | "+" | "=" | "?" | ":-" | ":+" | ":=" | ":?")
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Parses `text` into text and expression nodes.
pub(super) fn parse(text: &str) -> Result<Vec<Node>, EnvsubstError> {
    Parser {
        s: text.chars().collect(),
        pos: 0,
        depth: 0,
    }
    .parse_all()
}

struct Parser {
    s: Vec<char>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.s.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.s.get(self.pos + offset).copied()
    }

    fn at_open(&self) -> bool {
        self.peek() == Some('$') && self.peek_at(1) == Some('{')
    }

    /// Top level: text (with `$$` escapes) and `${...}` expressions.
    fn parse_all(&mut self) -> Result<Vec<Node>, EnvsubstError> {
        let mut nodes = Vec::new();
        let mut text = String::new();
        while let Some(c) = self.peek() {
            if self.at_open() {
                if !text.is_empty() {
                    nodes.push(Node::Text(std::mem::take(&mut text)));
                }
                self.pos += 2;
                nodes.push(Node::Expr(self.parse_expr()?));
                continue;
            }
            if c == '$' && self.peek_at(1) == Some('$') {
                text.push('$');
                self.pos += 2;
                continue;
            }
            text.push(c);
            self.pos += 1;
        }
        if !text.is_empty() {
            nodes.push(Node::Text(text));
        }
        Ok(nodes)
    }

    fn expect_close(&mut self) -> Result<(), EnvsubstError> {
        if self.peek() == Some('}') {
            self.pos += 1;
            Ok(())
        } else {
            Err(EnvsubstError::BadSubstitution)
        }
    }

    fn ident(&mut self) -> String {
        let start = self.pos;
        while self.peek().is_some_and(is_ident_char) {
            self.pos += 1;
        }
        self.s[start..self.pos].iter().collect()
    }

    /// After `${`.
    fn parse_expr(&mut self) -> Result<Expr, EnvsubstError> {
        if self.depth >= MAX_NESTING {
            return Err(EnvsubstError::TooDeep);
        }
        self.depth += 1;
        let r = self.parse_expr_inner();
        self.depth -= 1;
        r
    }

    fn parse_expr_inner(&mut self) -> Result<Expr, EnvsubstError> {
        if self.peek() == Some('#') {
            self.pos += 1;
            let param = self.ident();
            if param.is_empty() {
                return Err(EnvsubstError::BadSubstitution);
            }
            self.expect_close()?;
            return Ok(Expr {
                param,
                op: "#".into(),
                args: Vec::new(),
            });
        }
        let param = self.ident();
        if param.is_empty() {
            return Err(EnvsubstError::ParseVariableName);
        }
        match self.peek() {
            Some(':') => {
                if matches!(self.peek_at(1), Some('=' | '-' | '?' | '+')) {
                    let op: String = self.s[self.pos..self.pos + 2].iter().collect();
                    self.pos += 2;
                    self.parse_default(param, op)
                } else {
                    self.pos += 1;
                    self.parse_substr(param)
                }
            }
            Some('=') => {
                self.pos += 1;
                self.parse_default(param, "=".into())
            }
            Some(',' | '^') => {
                let op = self.take_op(|c| c == ',' || c == '^');
                self.expect_close()?;
                Ok(Expr {
                    param,
                    op,
                    args: Vec::new(),
                })
            }
            Some('/') => self.parse_replace(param),
            Some('#') => {
                let op = self.take_op(|c| c == '#');
                self.parse_trim(param, op)
            }
            Some('%') => {
                let op = self.take_op(|c| c == '%');
                self.parse_trim(param, op)
            }
            Some('}') => {
                self.pos += 1;
                Ok(Expr {
                    param,
                    op: String::new(),
                    args: Vec::new(),
                })
            }
            _ => Err(EnvsubstError::MissingClosingBrace),
        }
    }

    /// Up to two operator characters accepted by `accept`.
    fn take_op(&mut self, accept: impl Fn(char) -> bool) -> String {
        let mut op = String::new();
        while op.chars().count() < 2 {
            match self.peek() {
                Some(c) if accept(c) => {
                    op.push(c);
                    self.pos += 1;
                }
                _ => break,
            }
        }
        op
    }

    /// One argument: a nested `${...}`, or text up to a character `stop` rejects (or a
    /// `${`). With `escapes`, `$$`, `\/` and `\\` put the second character in literally.
    fn parse_arg(
        &mut self,
        stop: impl Fn(char) -> bool,
        escapes: bool,
    ) -> Result<Node, EnvsubstError> {
        if self.at_open() {
            self.pos += 2;
            return Ok(Node::Expr(self.parse_expr()?));
        }
        let mut text = String::new();
        while let Some(c) = self.peek() {
            if self.at_open() {
                break;
            }
            if escapes {
                let next = self.peek_at(1);
                let escaped = match c {
                    '$' => next == Some('$'),
                    '\\' => matches!(next, Some('/' | '\\')),
                    _ => false,
                };
                if escaped {
                    if let Some(n) = next {
                        text.push(n);
                    }
                    self.pos += 2;
                    continue;
                }
            }
            if stop(c) {
                break;
            }
            text.push(c);
            self.pos += 1;
        }
        if text.is_empty() {
            return Err(EnvsubstError::ParseFuncSubstitution);
        }
        Ok(Node::Text(text))
    }

    /// `${var:pos}` / `${var:pos:len}` after the first `:`.
    fn parse_substr(&mut self, param: String) -> Result<Expr, EnvsubstError> {
        let mut args = vec![self.parse_arg(|c| c == ':' || c == '}', false)?];
        match self.peek() {
            Some('}') => {
                self.pos += 1;
                return Ok(Expr {
                    param,
                    op: ":".into(),
                    args,
                });
            }
            Some(':') => {
                while self.peek() == Some(':') {
                    self.pos += 1;
                }
            }
            _ => return Err(EnvsubstError::BadSubstitution),
        }
        args.push(self.parse_arg(|c| c == '}', false)?);
        self.expect_close()?;
        Ok(Expr {
            param,
            op: ":".into(),
            args,
        })
    }

    fn parse_trim(&mut self, param: String, op: String) -> Result<Expr, EnvsubstError> {
        let arg = self.parse_arg(|c| c == '}', false)?;
        self.expect_close()?;
        Ok(Expr {
            param,
            op,
            args: vec![arg],
        })
    }

    /// `${var/p/r}` and friends, at the first `/`.
    fn parse_replace(&mut self, param: String) -> Result<Expr, EnvsubstError> {
        let mut op = String::from("/");
        self.pos += 1;
        if let Some(c @ ('/' | '#' | '%')) = self.peek() {
            op.push(c);
            self.pos += 1;
        }
        let mut args = Vec::new();
        if self.peek() == Some('/') {
            args.push(Node::Text(String::new()));
        } else {
            args.push(self.parse_arg(|c| c == '/', true)?);
        }
        if self.peek() != Some('/') {
            return Err(EnvsubstError::BadSubstitution);
        }
        while self.peek() == Some('/') {
            self.pos += 1;
        }
        if self.peek() != Some('}') {
            args.push(self.parse_arg(|c| c == '}', true)?);
        }
        self.expect_close()?;
        Ok(Expr { param, op, args })
    }

    /// Default operators: the arguments (text and nested expressions) up to `}` are joined.
    fn parse_default(&mut self, param: String, op: String) -> Result<Expr, EnvsubstError> {
        let mut args = Vec::new();
        loop {
            if self.peek() == Some('}') {
                self.pos += 1;
                return Ok(Expr { param, op, args });
            }
            args.push(self.parse_arg(|c| c == '}', false)?);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parser_builds_nested_default() {
        assert_eq!(
            parse("${a=x${b}y}").unwrap(),
            vec![Node::Expr(Expr {
                param: "a".into(),
                op: "=".into(),
                args: vec![
                    Node::Text("x".into()),
                    Node::Expr(Expr {
                        param: "b".into(),
                        op: String::new(),
                        args: vec![]
                    }),
                    Node::Text("y".into()),
                ],
            })]
        );
    }
}
