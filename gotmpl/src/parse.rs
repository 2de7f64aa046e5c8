//! The parser: items to trees, with Go's `text/template/parse` grammar and error texts.

use std::collections::BTreeMap;

use crate::ast::{Arg, Branch, Command, Node, Pipe};
use crate::lex::{Item, Kind, lex};

/// The parsed templates of one `parse` call: the main one and every `define`/`block`.
pub(crate) type TreeSet = BTreeMap<String, Vec<Node>>;

enum Step {
    Node(Node),
    Else(usize, bool),
    End,
}

struct Parser<'a> {
    name: &'a str,
    items: Vec<Item>,
    idx: usize,
    furthest: usize,
    vars: Vec<String>,
    range_depth: usize,
    depth: usize,
    max_depth: usize,
    action_line: usize,
    is_func: &'a dyn Fn(&str) -> bool,
    trees: TreeSet,
}

type PResult<T> = Result<T, String>;

/// Parses `text`. Errors are Go's full message (`template: name:line: ...`).
pub(crate) fn parse(
    name: &str,
    text: &str,
    left: &str,
    right: &str,
    max_depth: usize,
    is_func: &dyn Fn(&str) -> bool,
) -> Result<TreeSet, String> {
    let items = lex(text, left, right);
    let mut p = Parser {
        name,
        items,
        idx: 0,
        furthest: 0,
        vars: vec!["$".into()],
        range_depth: 0,
        depth: 0,
        max_depth,
        action_line: 0,
        is_func,
        trees: TreeSet::new(),
    };
    let root = p.parse_top()?;
    p.add(name.to_string(), root)?;
    Ok(p.trees)
}

fn is_empty_tree(list: &[Node]) -> bool {
    list.iter().all(|n| match n {
        Node::Text(t) => t.trim_matches(|c: char| c.is_whitespace()).is_empty(),
        _ => false,
    })
}

impl Parser<'_> {
    fn next(&mut self) -> Item {
        let i = self.idx.min(self.items.len() - 1);
        self.idx = i + 1;
        self.furthest = self.furthest.max(i);
        self.items[i].clone()
    }

    fn backup(&mut self) {
        self.idx -= 1;
    }

    fn peek(&mut self) -> Item {
        let it = self.next();
        self.backup();
        it
    }

    fn next_non_space(&mut self) -> Item {
        loop {
            let it = self.next();
            if it.kind != Kind::Space {
                return it;
            }
        }
    }

    fn peek_non_space(&mut self) -> Item {
        let it = self.next_non_space();
        self.backup();
        it
    }

    fn errorf(&self, msg: String) -> String {
        let line = self.items[self.furthest.min(self.items.len() - 1)].line;
        format!("template: {}:{}: {}", self.name, line, msg)
    }

    fn unexpected<T>(&self, token: &Item, context: &str) -> PResult<T> {
        if token.kind == Kind::Error {
            let mut extra = String::new();
            if self.action_line != 0 && self.action_line != token.line {
                extra = format!(" in action started at {}:{}", self.name, self.action_line);
                if token.val.ends_with(" action") {
                    extra = extra[" in action".len()..].to_string();
                }
            }
            return Err(self.errorf(format!("{token}{extra}")));
        }
        Err(self.errorf(format!("unexpected {token} in {context}")))
    }

    fn expect(&mut self, kind: Kind, context: &str) -> PResult<Item> {
        let t = self.next_non_space();
        if t.kind != kind {
            return self.unexpected(&t, context);
        }
        Ok(t)
    }

    fn add(&mut self, name: String, root: Vec<Node>) -> PResult<()> {
        match self.trees.get(&name) {
            Some(existing) if !is_empty_tree(existing) => {
                if !is_empty_tree(&root) {
                    return Err(self.errorf(format!(
                        "template: multiple definition of template {}",
                        crate::gofmt::quote(&name)
                    )));
                }
            }
            _ => {
                self.trees.insert(name, root);
            }
        }
        Ok(())
    }

    fn parse_top(&mut self) -> PResult<Vec<Node>> {
        let mut root = Vec::new();
        while self.peek().kind != Kind::Eof {
            if self.peek().kind == Kind::LeftDelim {
                let mark = self.idx;
                self.next();
                if self.next_non_space().kind == Kind::Define {
                    self.parse_definition()?;
                    continue;
                }
                self.idx = mark;
            }
            match self.text_or_action()? {
                Step::Node(n) => root.push(n),
                Step::Else(..) => return Err(self.errorf("unexpected {{else}}".into())),
                Step::End => return Err(self.errorf("unexpected {{end}}".into())),
            }
        }
        Ok(root)
    }

    fn parse_definition(&mut self) -> PResult<()> {
        let context = "define clause";
        let t = self.next_non_space();
        if t.kind != Kind::String && t.kind != Kind::RawString {
            return self.unexpected(&t, context);
        }
        let name = self.unquote(&t.val)?;
        self.expect(Kind::RightDelim, context)?;
        let saved = std::mem::replace(&mut self.vars, vec!["$".into()]);
        let (list, end) = self.item_list()?;
        self.vars = saved;
        if !matches!(end, Step::End) {
            return Err(self.errorf(format!("unexpected {{{{else}}}} in {context}")));
        }
        self.add(name, list)
    }

    fn item_list(&mut self) -> PResult<(Vec<Node>, Step)> {
        let mut list = Vec::new();
        while self.peek_non_space().kind != Kind::Eof {
            match self.text_or_action()? {
                Step::Node(n) => list.push(n),
                end => return Ok((list, end)),
            }
        }
        Err(self.errorf("unexpected EOF".into()))
    }

    fn text_or_action(&mut self) -> PResult<Step> {
        let t = self.next_non_space();
        match t.kind {
            Kind::Text => Ok(Step::Node(Node::Text(t.val))),
            Kind::LeftDelim => {
                self.action_line = t.line;
                let r = self.action();
                self.action_line = 0;
                r
            }
            _ => self.unexpected(&t, "input"),
        }
    }

    fn nest<T>(&mut self, f: impl FnOnce(&mut Self) -> PResult<T>) -> PResult<T> {
        if self.depth >= self.max_depth {
            return Err(self.errorf("max expression depth exceeded".into()));
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    fn action(&mut self) -> PResult<Step> {
        let t = self.next_non_space();
        match t.kind {
            Kind::Block => return self.nest(|p| p.block_control()).map(Step::Node),
            Kind::Break | Kind::Continue => {
                let what = if t.kind == Kind::Break {
                    "{{break}}"
                } else {
                    "{{continue}}"
                };
                let n = self.next_non_space();
                if n.kind != Kind::RightDelim {
                    return self.unexpected(&n, what);
                }
                if self.range_depth == 0 {
                    return Err(self.errorf(format!("{what} outside {{{{range}}}}")));
                }
                return Ok(Step::Node(if t.kind == Kind::Break {
                    Node::Break
                } else {
                    Node::Continue
                }));
            }
            Kind::Else => {
                let peek = self.peek_non_space();
                if peek.kind == Kind::If || peek.kind == Kind::With {
                    return Ok(Step::Else(peek.pos, true));
                }
                let tok = self.expect(Kind::RightDelim, "else")?;
                return Ok(Step::Else(tok.pos, false));
            }
            Kind::End => {
                self.expect(Kind::RightDelim, "end")?;
                return Ok(Step::End);
            }
            Kind::If => {
                return self
                    .nest(|p| p.control("if"))
                    .map(|b| Step::Node(Node::If(b)));
            }
            Kind::Range => {
                return self
                    .nest(|p| p.control("range"))
                    .map(|b| Step::Node(Node::Range(b)));
            }
            Kind::With => {
                return self
                    .nest(|p| p.control("with"))
                    .map(|b| Step::Node(Node::With(b)));
            }
            Kind::Template => return self.template_control().map(Step::Node),
            _ => {}
        }
        self.backup();
        let tok = self.peek();
        let pipe = self.pipeline("command", Kind::RightDelim)?;
        Ok(Step::Node(Node::Action(tok.pos, pipe)))
    }

    fn control(&mut self, context: &str) -> PResult<Branch> {
        let nvars = self.vars.len();
        let r = self.control_inner(context);
        self.vars.truncate(nvars);
        r
    }

    fn control_inner(&mut self, context: &str) -> PResult<Branch> {
        let pipe = self.pipeline(context, Kind::RightDelim)?;
        if context == "range" {
            self.range_depth += 1;
        }
        let r = self.item_list();
        if context == "range" {
            self.range_depth -= 1;
        }
        let (list, next) = r?;
        let mut else_list = None;
        if let Step::Else(pos, chained) = next {
            let _ = pos;
            if chained && context == "if" && self.peek().kind == Kind::If {
                self.next();
                let b = self.nest(|p| p.control("if"))?;
                else_list = Some(vec![Node::If(b)]);
            } else if chained && context == "with" && self.peek().kind == Kind::With {
                self.next();
                let b = self.nest(|p| p.control("with"))?;
                else_list = Some(vec![Node::With(b)]);
            } else {
                if chained {
                    // `{{else if}}` inside a range or `{{else with}}` inside an if: Go parses
                    // the else as plain and then fails on the keyword.
                    let t = self.next_non_space();
                    return self.unexpected(&t, "input");
                }
                let (l, n) = self.item_list()?;
                if !matches!(n, Step::End) {
                    return Err(self.errorf("expected end; found {{else}}".into()));
                }
                else_list = Some(l);
            }
        }
        Ok(Branch {
            pos: pipe.pos,
            pipe,
            list,
            else_list,
        })
    }

    fn unquote(&self, q: &str) -> PResult<String> {
        crate::strlit::unquote(q).ok_or_else(|| self.errorf("invalid syntax".into()))
    }

    fn template_name(&mut self, t: &Item, context: &str) -> PResult<String> {
        match t.kind {
            Kind::String | Kind::RawString => self.unquote(&t.val),
            _ => self.unexpected(t, context),
        }
    }

    fn template_control(&mut self) -> PResult<Node> {
        let context = "template clause";
        let t = self.next_non_space();
        let name = self.template_name(&t, context)?;
        let mut pipe = None;
        if self.next_non_space().kind != Kind::RightDelim {
            self.backup();
            pipe = Some(self.pipeline(context, Kind::RightDelim)?);
        }
        Ok(Node::Template(t.pos, name, pipe))
    }

    fn block_control(&mut self) -> PResult<Node> {
        let context = "block clause";
        let t = self.next_non_space();
        let name = self.template_name(&t, context)?;
        let pipe = self.pipeline(context, Kind::RightDelim)?;
        let saved = std::mem::replace(&mut self.vars, vec!["$".into()]);
        let saved_range = std::mem::replace(&mut self.range_depth, 0);
        let r = self.item_list();
        self.vars = saved;
        self.range_depth = saved_range;
        let (list, end) = r?;
        if !matches!(end, Step::End) {
            return Err(self.errorf(format!("unexpected {{{{else}}}} in {context}")));
        }
        self.add(name.clone(), list)?;
        Ok(Node::Template(t.pos, name, Some(pipe)))
    }

    fn pipeline(&mut self, context: &str, end: Kind) -> PResult<Pipe> {
        let tok = self.peek_non_space();
        let mut pipe = Pipe {
            pos: tok.pos,
            is_assign: false,
            decl: Vec::new(),
            cmds: Vec::new(),
        };
        loop {
            let v = self.peek_non_space();
            if v.kind != Kind::Variable {
                break;
            }
            let mark = self.idx;
            self.next_non_space();
            let after = self.peek();
            let next = self.peek_non_space();
            if next.kind == Kind::Assign || next.kind == Kind::Declare {
                pipe.is_assign = next.kind == Kind::Assign;
                self.next_non_space();
                pipe.decl.push(v.val.clone());
                self.vars.push(v.val);
                break;
            } else if next.kind == Kind::Char && next.val == "," {
                self.next_non_space();
                pipe.decl.push(v.val.clone());
                self.vars.push(v.val);
                if context == "range" && pipe.decl.len() < 2 {
                    match self.peek_non_space().kind {
                        Kind::Variable | Kind::RightDelim | Kind::RightParen => continue,
                        _ => return Err(self.errorf("range can only initialize variables".into())),
                    }
                }
                return Err(self.errorf(format!("too many declarations in {context}")));
            } else {
                let _ = after;
                self.idx = mark;
                break;
            }
        }
        loop {
            let t = self.next_non_space();
            match t.kind {
                k if k == end => {
                    if pipe.cmds.is_empty() {
                        return Err(self.errorf(format!("missing value for {context}")));
                    }
                    for (i, c) in pipe.cmds.iter().enumerate().skip(1) {
                        if matches!(
                            c.args[0],
                            Arg::Bool(..)
                                | Arg::Dot(_)
                                | Arg::Nil(_)
                                | Arg::Number(..)
                                | Arg::String(..)
                        ) {
                            return Err(self.errorf(format!(
                                "non executable command in pipeline stage {}",
                                i + 1
                            )));
                        }
                    }
                    return Ok(pipe);
                }
                Kind::Bool
                | Kind::CharConstant
                | Kind::Complex
                | Kind::Dot
                | Kind::Field
                | Kind::Identifier
                | Kind::Number
                | Kind::Nil
                | Kind::RawString
                | Kind::String
                | Kind::Variable
                | Kind::LeftParen => {
                    self.backup();
                    let c = self.command()?;
                    pipe.cmds.push(c);
                }
                _ => return self.unexpected(&t, context),
            }
        }
    }

    fn command(&mut self) -> PResult<Command> {
        let pos = self.peek_non_space().pos;
        let mut cmd = Command {
            pos,
            args: Vec::new(),
        };
        loop {
            self.peek_non_space();
            if let Some(op) = self.operand()? {
                cmd.args.push(op);
            }
            let t = self.next();
            match t.kind {
                Kind::Space => continue,
                Kind::RightDelim | Kind::RightParen => self.backup(),
                Kind::Pipe => {}
                _ => return self.unexpected(&t, "operand"),
            }
            break;
        }
        if cmd.args.is_empty() {
            return Err(self.errorf("empty command".into()));
        }
        Ok(cmd)
    }

    fn operand(&mut self) -> PResult<Option<Arg>> {
        let Some(node) = self.term()? else {
            return Ok(None);
        };
        if self.peek().kind != Kind::Field {
            return Ok(Some(node));
        }
        let pos = self.peek().pos;
        let mut fields = Vec::new();
        while self.peek().kind == Kind::Field {
            let f = self.next();
            fields.extend(f.val[1..].split('.').map(str::to_string));
        }
        Ok(Some(match node {
            Arg::Field(_, mut idents) => {
                idents.extend(fields);
                Arg::Field(pos, idents)
            }
            Arg::Variable(_, mut idents) => {
                idents.extend(fields);
                Arg::Variable(pos, idents)
            }
            Arg::Bool(..) | Arg::String(..) | Arg::Number(..) | Arg::Nil(_) | Arg::Dot(_) => {
                return Err(self.errorf(format!(
                    "unexpected . after term {}",
                    crate::gofmt::quote(&node.to_string())
                )));
            }
            other => Arg::Chain(pos, Box::new(other), fields),
        }))
    }

    fn term(&mut self) -> PResult<Option<Arg>> {
        let t = self.next_non_space();
        Ok(Some(match t.kind {
            Kind::Identifier => {
                if !(self.is_func)(&t.val) {
                    return Err(self.errorf(format!(
                        "function {} not defined",
                        crate::gofmt::quote(&t.val)
                    )));
                }
                Arg::Identifier(t.pos, t.val)
            }
            Kind::Dot => Arg::Dot(t.pos),
            Kind::Nil => Arg::Nil(t.pos),
            Kind::Variable => {
                let idents: Vec<String> = t.val.split('.').map(str::to_string).collect();
                if !self.vars.iter().any(|v| *v == idents[0]) {
                    return Err(self.errorf(format!(
                        "undefined variable {}",
                        crate::gofmt::quote(&idents[0])
                    )));
                }
                Arg::Variable(t.pos, idents)
            }
            Kind::Field => Arg::Field(t.pos, t.val[1..].split('.').map(str::to_string).collect()),
            Kind::Bool => Arg::Bool(t.pos, t.val == "true"),
            Kind::CharConstant | Kind::Complex | Kind::Number => {
                let n = crate::strlit::number(&t.val, t.kind).map_err(|e| self.errorf(e))?;
                Arg::Number(t.pos, Box::new(n))
            }
            Kind::LeftParen => {
                let p = self.nest(|p| p.pipeline("parenthesized pipeline", Kind::RightParen))?;
                Arg::Pipe(Box::new(p))
            }
            Kind::String | Kind::RawString => {
                let s = self.unquote(&t.val)?;
                Arg::String(t.pos, t.val, s)
            }
            _ => {
                self.backup();
                return Ok(None);
            }
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<TreeSet, String> {
        parse("t", s, "{{", "}}", 100, &|n| n == "f")
    }

    #[test]
    fn defines_and_blocks_become_trees() {
        let t = p("{{define \"a\"}}x{{end}}{{block \"b\" .}}y{{end}}z").unwrap();
        assert_eq!(t.keys().cloned().collect::<Vec<_>>(), vec!["a", "b", "t"]);
    }

    #[test]
    fn node_strings_match_go() {
        let t = p("{{$x := f 1 \"s\" | f (f .a.b) $x.c}}").unwrap();
        assert_eq!(
            t["t"][0].to_string(),
            "{{$x := f 1 \"s\" | f (f .a.b) $x.c}}"
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            p("{{g}}").unwrap_err(),
            "template: t:1: function \"g\" not defined"
        );
        assert_eq!(p("{{if 1}}").unwrap_err(), "template: t:1: unexpected EOF");
        assert_eq!(
            p("\n{{$y}}").unwrap_err(),
            "template: t:2: undefined variable \"$y\""
        );
        assert_eq!(
            p("{{f 1 | 2}}").unwrap_err(),
            "template: t:1: non executable command in pipeline stage 2"
        );
        let deep = "{{if 1}}".repeat(200);
        assert_eq!(
            p(&deep).unwrap_err(),
            "template: t:1: max expression depth exceeded"
        );
    }
}
