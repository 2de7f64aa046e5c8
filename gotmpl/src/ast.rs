//! The parse tree, mirroring Go's `text/template/parse` nodes. `Display` gives Go's `String()`
//! forms, which appear in error messages.

use std::fmt;

#[derive(Debug, Clone)]
pub(crate) struct Pipe {
    pub pos: usize,
    pub is_assign: bool,
    pub decl: Vec<String>,
    pub cmds: Vec<Command>,
}

#[derive(Debug, Clone)]
pub(crate) struct Command {
    pub pos: usize,
    pub args: Vec<Arg>,
}

/// A constant number, as `parse.NumberNode` classifies it.
#[derive(Debug, Clone)]
pub(crate) struct Number {
    pub text: String,
    pub int: Option<i64>,
    pub float: Option<f64>,
    /// Too big for int64 but a valid unsigned integer.
    pub uint_only: bool,
    pub complex: bool,
    pub is_char: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Dot(usize),
    Nil(usize),
    Bool(usize, bool),
    Number(usize, Box<Number>),
    /// quoted text, value
    String(usize, String, String),
    Field(usize, Vec<String>),
    Variable(usize, Vec<String>),
    Identifier(usize, String),
    Chain(usize, Box<Arg>, Vec<String>),
    Pipe(Box<Pipe>),
}

impl Arg {
    pub fn pos(&self) -> usize {
        match self {
            Arg::Dot(p)
            | Arg::Nil(p)
            | Arg::Bool(p, _)
            | Arg::Number(p, _)
            | Arg::String(p, ..)
            | Arg::Field(p, _)
            | Arg::Variable(p, _)
            | Arg::Identifier(p, _)
            | Arg::Chain(p, ..) => *p,
            Arg::Pipe(p) => p.pos,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Text(String),
    Action(usize, Pipe),
    If(Branch),
    With(Branch),
    Range(Branch),
    Template(usize, String, Option<Pipe>),
    Break,
    Continue,
}

#[derive(Debug, Clone)]
pub(crate) struct Branch {
    pub pos: usize,
    pub pipe: Pipe,
    pub list: Vec<Node>,
    pub else_list: Option<Vec<Node>>,
}

impl fmt::Display for Pipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.decl.is_empty() {
            f.write_str(&self.decl.join(", "))?;
            f.write_str(" := ")?;
        }
        for (i, c) in self.cmds.iter().enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            if let Arg::Pipe(p) = a {
                write!(f, "({p})")?;
            } else {
                write!(f, "{a}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Dot(_) => f.write_str("."),
            Arg::Nil(_) => f.write_str("nil"),
            Arg::Bool(_, b) => write!(f, "{b}"),
            Arg::Number(_, n) => f.write_str(&n.text),
            Arg::String(_, q, _) => f.write_str(q),
            Arg::Field(_, idents) => {
                for i in idents {
                    write!(f, ".{i}")?;
                }
                Ok(())
            }
            Arg::Variable(_, idents) => f.write_str(&idents.join(".")),
            Arg::Identifier(_, name) => f.write_str(name),
            Arg::Chain(_, node, fields) => {
                if let Arg::Pipe(p) = node.as_ref() {
                    write!(f, "({p})")?;
                } else {
                    write!(f, "{node}")?;
                }
                for i in fields {
                    write!(f, ".{i}")?;
                }
                Ok(())
            }
            Arg::Pipe(p) => write!(f, "{p}"),
        }
    }
}

fn write_list(f: &mut fmt::Formatter<'_>, list: &[Node]) -> fmt::Result {
    for n in list {
        write!(f, "{n}")?;
    }
    Ok(())
}

impl Node {
    fn fmt_branch(f: &mut fmt::Formatter<'_>, name: &str, b: &Branch) -> fmt::Result {
        write!(f, "{{{{{name} {}}}}}", b.pipe)?;
        write_list(f, &b.list)?;
        if let Some(e) = &b.else_list {
            f.write_str("{{else}}")?;
            write_list(f, e)?;
        }
        f.write_str("{{end}}")
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Text(t) => f.write_str(&crate::gofmt::quote(t)),
            Node::Action(_, p) => write!(f, "{{{{{p}}}}}"),
            Node::If(b) => Node::fmt_branch(f, "if", b),
            Node::With(b) => Node::fmt_branch(f, "with", b),
            Node::Range(b) => Node::fmt_branch(f, "range", b),
            Node::Template(_, name, pipe) => match pipe {
                Some(p) => write!(f, "{{{{template {} {p}}}}}", crate::gofmt::quote(name)),
                None => write!(f, "{{{{template {}}}}}", crate::gofmt::quote(name)),
            },
            Node::Break => f.write_str("{{break}}"),
            Node::Continue => f.write_str("{{continue}}"),
        }
    }
}
