//! Compile-time bounds on an expression, and its instrumentation for the runtime meter.
//!
//! [`check_source`] and [`check_shape`] reject an expression that is too long, too large or
//! too deeply nested once its macros are expanded, or that nests comprehensions too deeply.
//! [`instrument`] then rewrites the tree so that evaluating it accounts to the meter (see
//! `meter.rs`): every comprehension iteration calls the tick function; values built by `+`
//! and by functions are charged; values copied into list and map literals (and into the
//! results of `map` and `filter`) are weighed; `replace`, `join` and `split` go through
//! size-checked versions; and the pattern of `matches` is checked for its length. The rewrite keeps the shapes the `cel` interpreter recognises in
//! comprehensions (`all`/`exists` folds and `map`/`filter` appends), so behaviour and speed are
//! unchanged.

use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue, operators,
};

use super::meter::{CHARGE, JOIN, PATTERN, REPLACE, SPLIT, TICK, WEIGH};

/// Longest expression source accepted, in bytes.
pub const MAX_EXPRESSION_LENGTH: usize = 4096;
/// Most nodes in an expression tree (macros expanded).
pub const MAX_AST_NODES: usize = 1000;
/// Deepest expression tree (macros expanded); also the parser's recursion limit. Evaluating
/// recurses about twice as deep once the tree is instrumented.
pub const MAX_AST_DEPTH: usize = 32;
/// Deepest nesting of comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`) inside
/// the body of another.
pub const MAX_COMPREHENSION_NESTING: usize = 3;

/// An expression outside the compile-time bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("expression is {0} bytes long, more than the limit of {MAX_EXPRESSION_LENGTH}")]
    TooLong(usize),
    #[error("expression has more than {MAX_AST_NODES} nodes once its macros are expanded")]
    TooManyNodes,
    #[error(
        "expression is nested more than {MAX_AST_DEPTH} levels deep once its macros are expanded"
    )]
    TooDeep,
    #[error(
        "comprehensions (all, exists, exists_one, map, filter) are nested more than \
         {MAX_COMPREHENSION_NESTING} levels deep"
    )]
    NestedComprehensions,
}

/// Rejects a source longer than [`MAX_EXPRESSION_LENGTH`] (before it is parsed).
pub(super) fn check_source(source: &str) -> Result<(), ShapeError> {
    if source.len() > MAX_EXPRESSION_LENGTH {
        return Err(ShapeError::TooLong(source.len()));
    }
    Ok(())
}

/// The direct children of `e`, each flagged when it is evaluated once per iteration of `e`
/// (the condition and step of a comprehension).
fn children(e: &IdedExpr) -> Vec<(&IdedExpr, bool)> {
    fn once(x: &IdedExpr) -> (&IdedExpr, bool) {
        (x, false)
    }
    match &e.expr {
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => Vec::new(),
        Expr::Call(c) => c
            .target
            .iter()
            .map(|t| once(t))
            .chain(c.args.iter().map(once))
            .collect(),
        Expr::Select(s) => vec![once(&s.operand)],
        Expr::List(l) => l.elements.iter().map(once).collect(),
        Expr::Map(m) => m
            .entries
            .iter()
            .flat_map(|en| entry_children(&en.expr))
            .map(once)
            .collect(),
        Expr::Struct(s) => s
            .entries
            .iter()
            .flat_map(|en| entry_children(&en.expr))
            .map(once)
            .collect(),
        Expr::Comprehension(c) => vec![
            once(&c.iter_range),
            once(&c.accu_init),
            (&c.loop_cond, true),
            (&c.loop_step, true),
            once(&c.result),
        ],
    }
}

fn entry_children(e: &EntryExpr) -> Vec<&IdedExpr> {
    match e {
        EntryExpr::StructField(f) => vec![&f.value],
        EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
    }
}

/// Checks the node count, the depth and the comprehension nesting of a parsed expression
/// (without recursion, so any parsed tree is safe to check).
pub(super) fn check_shape(root: &IdedExpr) -> Result<(), ShapeError> {
    let mut nodes = 0usize;
    // (node, depth, comprehensions whose body encloses it)
    let mut stack = vec![(root, 1usize, 0usize)];
    while let Some((e, depth, nesting)) = stack.pop() {
        nodes += 1;
        if nodes > MAX_AST_NODES {
            return Err(ShapeError::TooManyNodes);
        }
        if depth > MAX_AST_DEPTH {
            return Err(ShapeError::TooDeep);
        }
        if matches!(e.expr, Expr::Comprehension(_)) && nesting + 1 > MAX_COMPREHENSION_NESTING {
            return Err(ShapeError::NestedComprehensions);
        }
        for (child, in_body) in children(e) {
            stack.push((child, depth + 1, nesting + usize::from(in_body)));
        }
    }
    Ok(())
}

/// Rewrites a checked expression for the meter (see the module documentation).
pub(super) fn instrument(root: IdedExpr) -> IdedExpr {
    let mut next_id = max_id(&root) + 1;
    Rewriter {
        next_id: &mut next_id,
    }
    .expr(root)
}

fn max_id(root: &IdedExpr) -> u64 {
    let mut max = 0;
    let mut stack = vec![root];
    while let Some(e) = stack.pop() {
        max = max.max(e.id);
        stack.extend(children(e).into_iter().map(|(c, _)| c));
    }
    max
}

struct Rewriter<'a> {
    next_id: &'a mut u64,
}

impl Rewriter<'_> {
    fn node(&mut self, expr: Expr) -> IdedExpr {
        let id = *self.next_id;
        *self.next_id += 1;
        IdedExpr { id, expr }
    }

    fn call(&mut self, func: &str, args: Vec<IdedExpr>) -> IdedExpr {
        self.node(Expr::Call(CallExpr {
            func_name: func.to_string(),
            target: None,
            args,
        }))
    }

    fn wrap(&mut self, func: &str, e: IdedExpr) -> IdedExpr {
        self.call(func, vec![e])
    }

    fn expr(&mut self, e: IdedExpr) -> IdedExpr {
        let IdedExpr { id, expr } = e;
        let expr = match expr {
            Expr::Call(call) => return self.call_expr(id, call),
            Expr::Comprehension(c) => Expr::Comprehension(Box::new(self.comprehension(*c))),
            Expr::Select(mut s) => {
                let operand = std::mem::take(&mut *s.operand);
                *s.operand = self.expr(operand);
                Expr::Select(s)
            }
            Expr::List(l) => Expr::List(self.list(l)),
            Expr::Map(mut m) => {
                for en in &mut m.entries {
                    self.entry(&mut en.expr, true);
                }
                Expr::Map(m)
            }
            Expr::Struct(mut s) => {
                for en in &mut s.entries {
                    self.entry(&mut en.expr, false);
                }
                Expr::Struct(s)
            }
            other @ (Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_)) => other,
        };
        IdedExpr { id, expr }
    }

    fn entry(&mut self, e: &mut EntryExpr, weigh: bool) {
        let mut fix = |x: &mut IdedExpr| {
            let inner = self.expr(std::mem::take(x));
            *x = if weigh {
                self.wrap(WEIGH, inner)
            } else {
                inner
            };
        };
        match e {
            EntryExpr::StructField(f) => fix(&mut f.value),
            EntryExpr::MapEntry(m) => {
                fix(&mut m.key);
                fix(&mut m.value);
            }
        }
    }

    /// A list literal: each element is weighed as it is copied in.
    fn list(&mut self, mut l: ListExpr) -> ListExpr {
        l.elements = std::mem::take(&mut l.elements)
            .into_iter()
            .map(|el| {
                let inner = self.expr(el);
                self.wrap(WEIGH, inner)
            })
            .collect();
        l
    }

    fn call_expr(&mut self, id: u64, mut call: CallExpr) -> IdedExpr {
        call.target = call.target.map(|t| Box::new(self.expr(*t)));
        call.args = std::mem::take(&mut call.args)
            .into_iter()
            .map(|a| self.expr(a))
            .collect();
        // Size-checked versions of the strings extension's expanding functions.
        let guarded = match (call.func_name.as_str(), call.args.len()) {
            ("replace", 2 | 3) => Some(REPLACE),
            ("join", 0 | 1) => Some(JOIN),
            ("split", 1 | 2) => Some(SPLIT),
            _ => None,
        };
        if let Some(func) = guarded
            && let Some(target) = call.target.take()
        {
            let mut args = vec![*target];
            args.append(&mut call.args);
            let guarded_call = self.call(func, args);
            return IdedExpr { id, ..guarded_call };
        }
        // The pattern of `s.matches(p)` and `matches(s, p)` is checked for its length.
        let pattern_arg = match (call.func_name.as_str(), &call.target, call.args.len()) {
            ("matches", Some(_), 1) => Some(0),
            ("matches", None, 2) => Some(1),
            _ => None,
        };
        if let Some(i) = pattern_arg {
            let p = std::mem::take(&mut call.args[i]);
            call.args[i] = self.wrap(PATTERN, p);
        }
        let builds_value = call.func_name == operators::ADD || !is_operator(&call.func_name);
        let e = IdedExpr {
            id,
            expr: Expr::Call(call),
        };
        if builds_value {
            self.wrap(CHARGE, e)
        } else {
            e
        }
    }

    fn comprehension(&mut self, mut c: ComprehensionExpr) -> ComprehensionExpr {
        c.iter_range = self.expr(std::mem::take(&mut c.iter_range));
        c.accu_init = self.expr(std::mem::take(&mut c.accu_init));
        c.result = self.expr(std::mem::take(&mut c.result));
        let literal_cond = matches!(c.loop_cond.expr, Expr::Literal(_));
        let cond = self.expr(std::mem::take(&mut c.loop_cond));
        c.loop_cond = if literal_cond {
            cond
        } else {
            self.wrap(TICK, cond)
        };
        let step = std::mem::take(&mut c.loop_step);
        c.loop_step = self.loop_step(step, &c.accu_var, literal_cond);
        c
    }

    /// The loop step, with its top-level shape kept: `@result + [x]` (its element weighed),
    /// `g ? s : @result` (with `g` ticked when the loop condition is a literal), and
    /// `@result && p` / `@result || p`. A step of another shape under a literal condition is
    /// guarded as `tick(true) ? step : @result`, which the interpreter treats as before.
    fn loop_step(&mut self, step: IdedExpr, accu: &str, tick_here: bool) -> IdedExpr {
        let IdedExpr { id, expr } = step;
        let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if n == accu);
        match expr {
            Expr::Call(mut call)
                if call.func_name == operators::CONDITIONAL
                    && call.args.len() == 3
                    && is_accu(&call.args[2]) =>
            {
                let otherwise = call.args.pop().unwrap_or_default();
                let then = call.args.pop().unwrap_or_default();
                let guard = call.args.pop().unwrap_or_default();
                let guard = self.expr(guard);
                let guard = if tick_here {
                    self.wrap(TICK, guard)
                } else {
                    guard
                };
                let then = self.loop_step(then, accu, false);
                call.args = vec![guard, then, otherwise];
                IdedExpr {
                    id,
                    expr: Expr::Call(call),
                }
            }
            Expr::Call(mut call)
                if matches!(
                    call.func_name.as_str(),
                    operators::ADD | operators::LOGICAL_AND | operators::LOGICAL_OR
                ) && call.args.len() == 2
                    && is_accu(&call.args[0]) =>
            {
                let rhs = call.args.pop().unwrap_or_default();
                let rhs = match rhs.expr {
                    Expr::List(l) if call.func_name == operators::ADD => IdedExpr {
                        id: rhs.id,
                        expr: Expr::List(self.list(l)),
                    },
                    other => self.expr(IdedExpr {
                        id: rhs.id,
                        expr: other,
                    }),
                };
                call.args.push(rhs);
                let step = IdedExpr {
                    id,
                    expr: Expr::Call(call),
                };
                if tick_here {
                    self.ticked(step, accu)
                } else {
                    step
                }
            }
            other => {
                let step = self.expr(IdedExpr { id, expr: other });
                if tick_here {
                    self.ticked(step, accu)
                } else {
                    step
                }
            }
        }
    }

    /// `tick(true) ? step : accu`.
    fn ticked(&mut self, step: IdedExpr, accu: &str) -> IdedExpr {
        let yes = self.node(Expr::Literal(LiteralValue::Boolean(true.into())));
        let guard = self.wrap(TICK, yes);
        let otherwise = self.node(Expr::Ident(accu.to_string()));
        self.call(operators::CONDITIONAL, vec![guard, step, otherwise])
    }
}

/// Operators (`_+_`, `!_`, `@in`, ...) as opposed to functions.
fn is_operator(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('!') || name.starts_with('-') || name.starts_with('@')
}
