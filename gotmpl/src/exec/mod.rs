//! The executor: walks the tree like Go's `text/template` `state`, with the same error texts and
//! error locations, plus our bounds (output bytes, steps, depth).

mod args;

use crate::ast::{Arg, Branch, Command, Node, Pipe};
use crate::funcs::{self, Ctx, Ty};
use crate::options::{Options, TemplateError};
use crate::parse::TreeSet;
use crate::value::Value;

#[derive(Clone, Copy)]
enum At<'t> {
    None,
    Node(&'t Node, usize),
    Pipe(&'t Pipe),
    Arg(&'t Arg),
    Cmd(&'t Command),
}

pub(crate) enum Flow {
    Error(TemplateError),
    Break,
    Continue,
}

impl From<TemplateError> for Flow {
    fn from(e: TemplateError) -> Self {
        Flow::Error(e)
    }
}

type R<T> = Result<T, Flow>;

pub(crate) struct State<'t> {
    pub trees: &'t TreeSet,
    pub text: &'t str,
    pub parse_name: &'t str,
    pub name: &'t str,
    pub opts: &'t Options,
    pub ctx: Ctx,
    pub out: String,
    vars: Vec<(&'t str, Value)>,
    at: At<'t>,
    depth: usize,
    nest: usize,
    /// The dot is an element of a `[]interface{}`/`map[string]interface{}` (range): its
    /// static Go type is `interface {}` (error texts).
    dot_iface: bool,
}

/// What an argument evaluates to before type validation.
const MISSING: Option<Value> = None;

impl<'t> State<'t> {
    pub fn new(
        trees: &'t TreeSet,
        text: &'t str,
        name: &'t str,
        opts: &'t Options,
        inputs: Value,
    ) -> State<'t> {
        State {
            trees,
            text,
            parse_name: name,
            name,
            opts,
            ctx: Ctx::new(opts, inputs),
            out: String::new(),
            vars: vec![("$", Value::Invalid)],
            at: At::None,
            depth: 0,
            nest: 0,
            dot_iface: false,
        }
    }

    pub fn run(&mut self, root: &'t [Node]) -> Result<(), TemplateError> {
        match self.walk_list(&Value::Invalid, root) {
            Ok(()) => Ok(()),
            Err(Flow::Error(e)) => Err(e),
            Err(_) => Err(self.err_plain("break or continue outside range".into())),
        }
    }

    fn err_plain(&self, msg: String) -> TemplateError {
        TemplateError::Exec(format!("template: {}: {}", self.name, msg))
    }

    /// Builds Go's execution error text for the current node.
    pub fn errorf(&self, msg: impl Into<String>) -> Flow {
        let msg = msg.into();
        let (pos, ctx) = match self.at {
            At::None => {
                return Flow::Error(TemplateError::Exec(format!(
                    "template: {}: {}",
                    self.name, msg
                )));
            }
            At::Node(n, p) => (p, n.to_string()),
            At::Pipe(p) => (p.pos, p.to_string()),
            At::Arg(a) => (a.pos(), a.to_string()),
            At::Cmd(c) => (c.pos, c.to_string()),
        };
        let pos = pos.min(self.text.len());
        let before = &self.text.as_bytes()[..pos];
        let line = 1 + before.iter().filter(|b| **b == b'\n').count();
        let col = match before.iter().rposition(|b| *b == b'\n') {
            Some(i) => pos - i - 1,
            None => pos,
        };
        Flow::Error(TemplateError::Exec(format!(
            "template: {}:{}:{}: executing {} at <{}>: {}",
            self.parse_name,
            line,
            col,
            crate::gofmt::quote(self.name),
            ctx,
            msg
        )))
    }

    fn step(&mut self) -> R<()> {
        self.ctx.steps += 1;
        if self.ctx.steps > self.opts.max_steps {
            return Err(self.errorf(format!(
                "exceeded maximum evaluation steps ({})",
                self.opts.max_steps
            )));
        }
        Ok(())
    }

    fn write(&mut self, s: &str) -> R<()> {
        if self.out.len() + s.len() > self.opts.max_output_bytes {
            return Err(self.errorf(format!(
                "exceeded maximum output size ({} bytes)",
                self.opts.max_output_bytes
            )));
        }
        self.out.push_str(s);
        Ok(())
    }

    fn enter(&mut self) -> R<()> {
        self.nest += 1;
        if self.nest > self.opts.max_depth.saturating_mul(10) {
            return Err(self.errorf(format!(
                "exceeded maximum nesting depth ({})",
                self.opts.max_depth * 10
            )));
        }
        Ok(())
    }

    fn walk_list(&mut self, dot: &Value, list: &'t [Node]) -> R<()> {
        for n in list {
            self.walk(dot, n)?;
        }
        Ok(())
    }

    fn walk(&mut self, dot: &Value, node: &'t Node) -> R<()> {
        self.step()?;
        match node {
            Node::Text(t) => self.write(t),
            Node::Action(pos, pipe) => {
                self.at = At::Node(node, *pos);
                let v = self.eval_pipeline(dot, pipe)?;
                if pipe.decl.is_empty() {
                    self.at = At::Node(node, *pos);
                    let s = match &v {
                        Value::Invalid => "<no value>".to_string(),
                        v => crate::gofmt::sprint_value(v),
                    };
                    self.write(&s)?;
                }
                Ok(())
            }
            Node::If(b) | Node::With(b) => {
                self.at = At::Node(node, b.pos);
                self.enter()?;
                let mark = self.vars.len();
                let r = self.walk_if_with(dot, b, matches!(node, Node::With(_)));
                self.vars.truncate(mark);
                self.nest -= 1;
                r
            }
            Node::Range(b) => {
                self.at = At::Node(node, b.pos);
                self.enter()?;
                let mark = self.vars.len();
                let r = self.walk_range(dot, b);
                self.vars.truncate(mark);
                self.nest -= 1;
                r
            }
            Node::Template(pos, name, pipe) => {
                self.at = At::Node(node, *pos);
                self.walk_template(dot, node, *pos, name, pipe.as_ref())
            }
            Node::Break => Err(Flow::Break),
            Node::Continue => Err(Flow::Continue),
        }
    }

    fn walk_if_with(&mut self, dot: &Value, b: &'t Branch, with: bool) -> R<()> {
        let val = self.eval_pipeline(dot, &b.pipe)?;
        if val.truth() {
            if with {
                let saved = std::mem::replace(&mut self.dot_iface, false);
                let r = self.walk_list(&val, &b.list);
                self.dot_iface = saved;
                r
            } else {
                self.walk_list(dot, &b.list)
            }
        } else if let Some(e) = &b.else_list {
            self.walk_list(dot, e)
        } else {
            Ok(())
        }
    }

    fn one_iteration(&mut self, b: &'t Branch, index: Value, elem: Value, iface: bool) -> R<bool> {
        self.step()?;
        let decl = &b.pipe.decl;
        if !decl.is_empty() {
            if b.pipe.is_assign {
                if decl.len() > 1 {
                    self.set_var(&decl[0], index.clone())?;
                    self.set_var(&decl[1], elem.clone())?;
                } else {
                    self.set_var(&decl[0], elem.clone())?;
                }
            } else {
                let n = self.vars.len();
                self.vars[n - 1].1 = elem.clone();
                if decl.len() > 1 {
                    self.vars[n - 2].1 = index;
                }
            }
        }
        let mark = self.vars.len();
        let saved = std::mem::replace(&mut self.dot_iface, iface);
        let r = self.walk_list(&elem, &b.list);
        self.dot_iface = saved;
        self.vars.truncate(mark);
        match r {
            Ok(()) | Err(Flow::Continue) => Ok(true),
            Err(Flow::Break) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn walk_range(&mut self, dot: &Value, b: &'t Branch) -> R<()> {
        let val = self.eval_pipeline(dot, &b.pipe)?;
        let mut ran = false;
        match &val {
            Value::Int(n, kind) => {
                if b.pipe.decl.len() > 1 {
                    return Err(self.errorf(format!(
                        "can't use {} to iterate over more than one variable",
                        crate::gofmt::sprint_value(&val)
                    )));
                }
                let mut i = 0;
                while i < *n {
                    ran = true;
                    if !self.one_iteration(b, Value::Invalid, Value::Int(i, *kind), false)? {
                        break;
                    }
                    i += 1;
                }
            }
            Value::List(l, lk, _) => {
                let iface = *lk == crate::value::ListKind::Any;
                let l = l.clone();
                for (i, e) in l.iter().enumerate() {
                    ran = true;
                    if !self.one_iteration(b, Value::int(i as i64), e.clone(), iface)? {
                        break;
                    }
                }
            }
            Value::Map(m, mk) => {
                let iface = *mk == crate::value::MapKind::Any;
                let entries: Vec<(String, Value)> = m
                    .borrow()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                for (k, v) in entries {
                    ran = true;
                    if !self.one_iteration(b, Value::str(k), v, iface)? {
                        break;
                    }
                }
            }
            Value::Invalid => {}
            other => {
                return Err(self.errorf(format!(
                    "range can't iterate over {}",
                    crate::gofmt::sprint_value(other)
                )));
            }
        }
        if !ran && let Some(e) = &b.else_list {
            self.walk_list(dot, e)?;
        }
        Ok(())
    }

    fn walk_template(
        &mut self,
        dot: &Value,
        _node: &'t Node,
        _pos: usize,
        name: &'t str,
        pipe: Option<&'t Pipe>,
    ) -> R<()> {
        let Some(tree) = self.trees.get(name) else {
            return Err(self.errorf(format!(
                "template {} not defined",
                crate::gofmt::quote(name)
            )));
        };
        if self.depth >= self.opts.max_depth {
            return Err(self.errorf(format!(
                "exceeded maximum template depth ({})",
                self.opts.max_depth
            )));
        }
        let new_dot = match pipe {
            Some(p) => self.eval_pipeline(dot, p)?,
            None => Value::Invalid,
        };
        self.enter()?;
        let saved_vars = std::mem::replace(&mut self.vars, vec![("$", new_dot.clone())]);
        let saved_name = std::mem::replace(&mut self.name, name);
        let saved_iface = std::mem::replace(&mut self.dot_iface, false);
        self.depth += 1;
        let r = self.walk_list(&new_dot, tree);
        self.depth -= 1;
        self.name = saved_name;
        self.dot_iface = saved_iface;
        self.vars = saved_vars;
        self.nest -= 1;
        r
    }

    fn set_var(&mut self, name: &str, v: Value) -> R<()> {
        match self.vars.iter_mut().rev().find(|(n, _)| *n == name) {
            Some(slot) => {
                slot.1 = v;
                Ok(())
            }
            None => Err(self.errorf(format!("undefined variable: {name}"))),
        }
    }

    fn var_value(&self, name: &str) -> R<Value> {
        match self.vars.iter().rev().find(|(n, _)| *n == name) {
            Some((_, v)) => Ok(v.clone()),
            None => Err(self.errorf(format!("undefined variable: {name}"))),
        }
    }

    pub fn eval_pipeline(&mut self, dot: &Value, pipe: &'t Pipe) -> R<Value> {
        self.at = At::Pipe(pipe);
        let mut value: Option<Value> = MISSING;
        for cmd in &pipe.cmds {
            let mut v = self.eval_command(dot, cmd, value)?;
            if matches!(v, Value::Nil) {
                v = Value::Invalid;
            }
            value = Some(v);
        }
        let value = value.unwrap_or(Value::Invalid);
        for name in &pipe.decl {
            if pipe.is_assign {
                self.set_var(name, value.clone())?;
            } else {
                self.vars.push((name.as_str(), value.clone()));
            }
        }
        Ok(value)
    }

    fn not_a_function(&self, args: &[Arg], final_: &Option<Value>) -> R<()> {
        if args.len() > 1 || final_.is_some() {
            return Err(self.errorf(format!("can't give argument to non-function {}", args[0])));
        }
        Ok(())
    }

    fn eval_command(&mut self, dot: &Value, cmd: &'t Command, final_: Option<Value>) -> R<Value> {
        self.step()?;
        let first = &cmd.args[0];
        match first {
            Arg::Field(_, idents) => {
                self.at = At::Arg(first);
                let iface = self.dot_iface;
                return self.eval_field_chain_typed(dot.clone(), iface, idents, &cmd.args, final_);
            }
            Arg::Chain(_, node, fields) => {
                return self.eval_chain(dot, first, node, fields, &cmd.args, final_);
            }
            Arg::Identifier(_, name) => {
                return self.eval_function(dot, first, At::Cmd(cmd), name, &cmd.args, final_);
            }
            Arg::Pipe(p) => {
                self.not_a_function(&cmd.args, &final_)?;
                self.enter()?;
                let r = self.eval_pipeline(dot, p);
                self.nest -= 1;
                return r;
            }
            Arg::Variable(_, idents) => {
                return self.eval_variable(idents, first, &cmd.args, final_);
            }
            _ => {}
        }
        self.at = At::Arg(first);
        self.not_a_function(&cmd.args, &final_)?;
        match first {
            Arg::Bool(_, b) => Ok(Value::Bool(*b)),
            Arg::Dot(_) => Ok(dot.clone()),
            Arg::Nil(_) => Err(self.errorf("nil is not a command")),
            Arg::Number(_, n) => self.ideal_constant(n),
            Arg::String(_, _, s) => Ok(Value::str(s.as_str())),
            _ => Err(self.errorf(format!(
                "can't evaluate command {}",
                crate::gofmt::quote(&first.to_string())
            ))),
        }
    }

    fn eval_variable(
        &mut self,
        idents: &'t [String],
        node: &'t Arg,
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        self.at = At::Arg(node);
        let value = self.var_value(&idents[0])?;
        if idents.len() == 1 {
            self.not_a_function(args, &final_)?;
            return Ok(value);
        }
        self.eval_field_chain(value, &idents[1..], args, final_)
    }

    fn eval_chain(
        &mut self,
        dot: &Value,
        chain: &'t Arg,
        node: &'t Arg,
        fields: &'t [String],
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        self.at = At::Arg(chain);
        if matches!(node, Arg::Nil(_)) {
            return Err(self.errorf(format!("indirection through explicit nil in {chain}")));
        }
        let pipe = self.eval_arg(dot, Ty::NoCheck, node)?;
        self.eval_field_chain(pipe, fields, args, final_)
    }

    fn eval_field_chain(
        &mut self,
        receiver: Value,
        idents: &'t [String],
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        self.eval_field_chain_typed(receiver, false, idents, args, final_)
    }

    fn eval_field_chain_typed(
        &mut self,
        mut receiver: Value,
        mut iface: bool,
        idents: &'t [String],
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        let n = idents.len();
        for id in &idents[..n - 1] {
            receiver = self.eval_field(id, false, receiver, iface)?;
            iface = true;
        }
        let has_args = args.len() > 1 || final_.is_some();
        self.eval_field(&idents[n - 1], has_args, receiver, iface)
    }

    /// `iface`: the receiver came out of a map (its static Go type is `interface {}`).
    fn eval_field(&mut self, name: &str, has_args: bool, receiver: Value, iface: bool) -> R<Value> {
        self.step()?;
        match receiver {
            Value::Invalid => {
                if self.opts.missing_key_error {
                    return Err(self.errorf(format!(
                        "nil data; no entry for key {}",
                        crate::gofmt::quote(name)
                    )));
                }
                Ok(Value::Invalid)
            }
            Value::Nil => Err(self.errorf(format!("nil pointer evaluating interface {{}}.{name}"))),
            Value::Map(m, kind) => {
                if has_args {
                    return Err(self.errorf(format!("{name} is not a method but has arguments")));
                }
                let found = m.borrow().get(name).cloned();
                match found {
                    Some(v) => Ok(v),
                    None if self.opts.missing_key_error => Err(self.errorf(format!(
                        "map has no entry for key {}",
                        crate::gofmt::quote(name)
                    ))),
                    None if kind == crate::value::MapKind::Str => Ok(Value::Invalid),
                    None => Ok(Value::Invalid),
                }
            }
            other => {
                let t = if iface {
                    "interface {}"
                } else {
                    other.type_name()
                };
                Err(self.errorf(format!("can't evaluate field {name} in type {t}")))
            }
        }
    }

    fn eval_function(
        &mut self,
        dot: &Value,
        node: &'t Arg,
        call_node: At<'t>,
        name: &'t str,
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        self.at = At::Arg(node);
        let Some(def) = funcs::lookup(name) else {
            return Err(self.errorf(format!(
                "{} is not a defined function",
                crate::gofmt::quote(name)
            )));
        };
        let args = &args[1..];
        let num_in = args.len() + usize::from(final_.is_some());
        let fixed = def.params.len();
        if def.variadic.is_some() {
            if num_in < fixed {
                return Err(self.errorf(format!(
                    "wrong number of args for {name}: want at least {fixed} got {}",
                    args.len()
                )));
            }
        } else if num_in != fixed {
            return Err(self.errorf(format!(
                "wrong number of args for {name}: want {fixed} got {num_in}"
            )));
        }
        if name == "and" || name == "or" {
            let mut v = Value::Invalid;
            for a in args {
                v = self.eval_arg(dot, Ty::Refl, a)?;
                if v.truth() == (name == "or") {
                    return Ok(v);
                }
            }
            if let Some(f) = final_ {
                v = self.validate(f, Ty::Refl)?;
            }
            return Ok(v);
        }
        let mut argv = Vec::with_capacity(num_in);
        for (i, a) in args.iter().enumerate() {
            let ty = if i < fixed {
                def.params[i]
            } else {
                def.variadic.unwrap_or(Ty::Any)
            };
            argv.push(self.eval_arg(dot, ty, a)?);
        }
        if let Some(f) = final_ {
            let ty = if num_in - 1 < fixed {
                def.params[num_in - 1]
            } else {
                def.variadic.unwrap_or(Ty::Any)
            };
            argv.push(self.validate(f, ty)?);
        }
        if name == "call" {
            self.at = call_node;
            return Err(self.errorf(format!(
                "error calling call: non-function {} of type {}",
                args[0],
                argv[0].type_name()
            )));
        }
        let r = (def.imp)(&mut self.ctx, argv);
        match r {
            Ok(v) => {
                if self.ctx.steps > self.opts.max_steps {
                    self.at = call_node;
                    return Err(self.errorf(format!(
                        "exceeded maximum evaluation steps ({})",
                        self.opts.max_steps
                    )));
                }
                Ok(v)
            }
            Err(e) => {
                self.at = call_node;
                Err(self.errorf(format!("error calling {name}: {e}")))
            }
        }
    }
}
