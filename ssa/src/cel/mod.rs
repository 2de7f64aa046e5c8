//! CEL for `spec.healthCheckExprs` (custom status readers) and `spec.dependsOn[].readyExpr`,
//! with Flux's semantics (fluxcd/pkg `runtime/cel`, Flux RFC-0009 "custom health checks") on
//! the `cel` crate.
//!
//! Everything here is pure: expressions are compiled once per Kustomization spec
//! ([`HealthExprs::compile`], [`ReadyExpr::compile`]) and evaluated against `serde_json::Value`
//! objects. What the `cel` crate does and does not offer compared with Flux's cel-go
//! environment is listed in `docs/cel.md`.
//!
//! Expressions come from the tenant, so both steps are bounded. Compiling rejects a source
//! longer than [`MAX_EXPRESSION_LENGTH`], a tree (macros expanded) with more than
//! [`MAX_AST_NODES`] nodes or deeper than [`MAX_AST_DEPTH`], and comprehensions nested more
//! than [`MAX_COMPREHENSION_NESTING`] deep: an `InvalidCELExpression`-style parse error. The
//! `cel` crate has no cost hook, so the compiled tree is instrumented (`shape.rs`) to account
//! each evaluation to a meter (`meter.rs`): at most [`MAX_ITERATIONS`] comprehension
//! iterations, [`MAX_EVAL_BYTES`] bytes of built values (with the size of `replace`, `join` and
//! `split` results checked before they are built), and [`EVAL_TIMEOUT`] of wall-clock time
//! (shared by the three expressions of a health check); the pattern of `matches` may not be
//! longer than [`MAX_PATTERN_LENGTH`]. An evaluation over budget fails with a "cost limit
//! exceeded" evaluation error. Error messages are cut to 2 KiB.

mod meter;
mod shape;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::objects::{Key, Map};
use cel::{Context, Env, Value as CelValue};
use rflux_common::api::kustomization::CustomHealthCheck;
use serde_json::Value;

use crate::kstatus::{Status, StatusResult};
use rflux_core::split_api_version;

pub use meter::{
    EVAL_TIMEOUT, EvalLimits, Exceeded, MAX_EVAL_BYTES, MAX_ITERATIONS, MAX_PATTERN_LENGTH,
};
pub use shape::{
    MAX_AST_DEPTH, MAX_AST_NODES, MAX_COMPREHENSION_NESTING, MAX_EXPRESSION_LENGTH, ShapeError,
};

/// Flux's prefix of terminal configuration errors (the `Ready`/`Stalled` message).
pub const TERMINAL_ERROR_MESSAGE: &str =
    "Reconciliation failed terminally due to configuration error";
/// Condition reason of an expression that does not compile (terminal).
pub const INVALID_CEL_EXPRESSION_REASON: &str = "InvalidCELExpression";

/// A CEL error, with Flux's texts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CelError {
    /// The expression does not parse, or refers to something undeclared.
    #[error("failed to parse the CEL expression '{expr}': {message}")]
    Parse {
        /// The expression.
        expr: String,
        /// What is wrong.
        message: String,
    },
    /// The expression cannot give a boolean.
    #[error("CEL expression output type mismatch: expected bool, got {got}")]
    OutputType {
        /// The type the expression gives.
        got: String,
    },
    /// Evaluation failed (a missing field, a type mismatch, ...).
    #[error("failed to evaluate the CEL expression '{expr}': {message}")]
    Eval {
        /// The expression.
        expr: String,
        /// What failed.
        message: String,
    },
    /// The result is not a boolean.
    #[error("failed to evaluate CEL expression as boolean: '{expr}'")]
    NotBool {
        /// The expression.
        expr: String,
    },
}

/// Why `spec.healthCheckExprs` cannot be used (a terminal configuration error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HealthExprError {
    /// `current` is empty.
    #[error(
        "failed to create custom status evaluator for healthchecks[{index}]: expression Current not specified"
    )]
    MissingCurrent {
        /// Index in `healthCheckExprs`.
        index: usize,
    },
    /// One expression does not compile.
    #[error(
        "failed to create custom status evaluator for healthchecks[{index}]: failed to parse the expression {which}: {source}"
    )]
    Compile {
        /// Index in `healthCheckExprs`.
        index: usize,
        /// `Current`, `InProgress` or `Failed`.
        which: &'static str,
        /// The compile error.
        source: CelError,
    },
    /// Two entries cover the same group and kind.
    #[error("duplicate custom health check for GroupKind {group_kind} at healthchecks[{index}]")]
    Duplicate {
        /// `Kind.group` (Kubernetes' GroupKind string).
        group_kind: String,
        /// Index of the second entry.
        index: usize,
    },
}

/// The environment: the standard library and macros (`has`, `all`, `exists`, `exists_one`,
/// `map`, `filter`), optional values (`?.`, `[?]`, `orValue`, ...), and the strings and
/// encoders extensions, like Flux's cel-go environment.
fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // cel-go keeps the last entry of a map literal that repeats a key.
        env.set_error_on_duplicate_map_keys(false);
        if let Err(e) = env.add_extension(cel::extensions::strings) {
            tracing::warn!(error = %e, "CEL strings extension unavailable");
        }
        if let Err(e) = env.add_extension(cel::extensions::encoders) {
            tracing::warn!(error = %e, "CEL encoders extension unavailable");
        }
        if let Err(e) = meter::register(&mut env) {
            tracing::warn!(error = %e, "CEL cost metering functions unavailable");
        }
        Arc::new(env)
    })
    .clone()
}

/// Identifiers that are not variables: type names and function namespaces.
const BUILTIN_IDENTS: &[&str] = &[
    "bool",
    "bytes",
    "double",
    "duration",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "timestamp",
    "type",
    "uint",
    "optional",
    "strings",
    "base64",
    "google",
];

/// How much of an over-long expression its error repeats.
const QUOTED_PREFIX: usize = 64;
/// How much of a parse or evaluation message an error keeps (the parser quotes the source
/// for each error it reports, a failing function may quote its arguments, and the message
/// ends up in a status condition).
const MAX_MESSAGE_LENGTH: usize = 2048;

/// `s` cut to at most `max` bytes (on a character boundary), marked with `...` when cut.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

/// One compiled (and instrumented) expression.
#[derive(Debug, Clone)]
pub struct Expression {
    source: String,
    program: Arc<IdedExpr>,
    limits: EvalLimits,
}

impl Expression {
    /// Parses `source` (Flux parses health expressions without type checking: any top-level
    /// field of the object may be referenced), within the compile-time bounds.
    pub fn parse(source: &str) -> Result<Self, CelError> {
        let parse_error = |message: String| CelError::Parse {
            expr: source.to_string(),
            message: truncate(message, MAX_MESSAGE_LENGTH),
        };
        if let Err(e) = shape::check_source(source) {
            return Err(CelError::Parse {
                expr: truncate(source.to_string(), QUOTED_PREFIX),
                message: e.to_string(),
            });
        }
        let parser = env().parser().max_recursion_depth(MAX_AST_DEPTH as u16);
        let ast = parser
            .parse(source)
            .map_err(|e| parse_error(e.to_string()))?;
        shape::check_shape(&ast).map_err(|e| parse_error(e.to_string()))?;
        Ok(Expression {
            source: source.to_string(),
            program: Arc::new(shape::instrument(ast)),
            limits: EvalLimits::default(),
        })
    }

    /// The same expression, evaluated within `limits`.
    pub fn with_limits(mut self, limits: EvalLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Compiles `source` with the declared `variables` only, for a boolean result (Flux's
    /// `WithCompile`, `WithStructVariables`, `WithOutputType(bool)`): an undeclared
    /// identifier or a literal of another type is a compile error.
    pub fn compile(source: &str, variables: &[&str]) -> Result<Self, CelError> {
        let e = Self::parse(source)?;
        let root = e.program.as_ref();
        let mut scope: Vec<String> = variables.iter().map(|v| (*v).to_string()).collect();
        if let Some(name) = first_undeclared(root, &mut scope) {
            return Err(CelError::Parse {
                expr: source.to_string(),
                message: format!("undeclared reference to '{name}'"),
            });
        }
        if let Some(got) = literal_type(&root.expr) {
            return Err(CelError::OutputType { got: got.into() });
        }
        Ok(e)
    }

    /// The source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates to a boolean with the given variables.
    pub fn eval_bool<'a>(
        &self,
        vars: impl IntoIterator<Item = (&'a str, &'a Value)>,
    ) -> Result<bool, CelError> {
        let mut ctx = Context::with_env(env());
        for (name, value) in vars {
            ctx.add_variable_from_value(name, json_to_cel(value));
        }
        self.eval_in(&ctx)
    }

    /// Evaluates to a boolean in a prepared context, within the cost limits.
    fn eval_in(&self, ctx: &Context<'_, '_>) -> Result<bool, CelError> {
        let (result, exceeded) = meter::metered(self.limits, || self.eval_unmetered(ctx));
        match exceeded {
            Some(e) => Err(self.over_budget(e)),
            None => result,
        }
    }

    /// Evaluates to a boolean, accounting to the meter already running on this thread.
    fn eval_unmetered(&self, ctx: &Context<'_, '_>) -> Result<bool, CelError> {
        match CelValue::resolve(&self.program, ctx) {
            Ok(CelValue::Bool(b)) => Ok(b),
            Ok(_) => Err(CelError::NotBool {
                expr: self.source.clone(),
            }),
            Err(e) => Err(CelError::Eval {
                expr: self.source.clone(),
                message: truncate(e.to_string(), MAX_MESSAGE_LENGTH),
            }),
        }
    }

    fn over_budget(&self, e: Exceeded) -> CelError {
        CelError::Eval {
            expr: self.source.clone(),
            message: e.to_string(),
        }
    }

    /// Evaluates with every top-level field of `obj` as a variable (`status`, `metadata`,
    /// `spec`, ...), as Flux's health expressions are.
    pub fn eval_bool_on_object(&self, obj: &Value) -> Result<bool, CelError> {
        self.eval_in(&object_context(obj))
    }
}

/// A context with every top-level field of `obj` as a variable.
fn object_context(obj: &Value) -> Context<'static, 'static> {
    let mut ctx = Context::with_env(env());
    for (name, value) in obj.as_object().into_iter().flatten() {
        ctx.add_variable_from_value(name.as_str(), json_to_cel(value));
    }
    ctx
}

/// The type of a literal root expression that cannot be a boolean.
fn literal_type(expr: &Expr) -> Option<&'static str> {
    use cel::common::ast::LiteralValue as L;
    match expr {
        Expr::Literal(L::Boolean(_)) => None,
        Expr::Literal(L::Int(_)) => Some("int"),
        Expr::Literal(L::UInt(_)) => Some("uint"),
        Expr::Literal(L::Double(_)) => Some("double"),
        Expr::Literal(L::String(_)) => Some("string"),
        Expr::Literal(L::Bytes(_)) => Some("bytes"),
        Expr::Literal(L::Null) => Some("null_type"),
        Expr::List(_) => Some("list"),
        Expr::Map(_) => Some("map"),
        _ => None,
    }
}

/// The first identifier that is neither declared, bound by a comprehension, nor built in.
fn first_undeclared(e: &IdedExpr, scope: &mut Vec<String>) -> Option<String> {
    match &e.expr {
        Expr::Unspecified | Expr::Literal(_) => None,
        Expr::Ident(name) => {
            let known = name.starts_with('@')
                || scope.iter().any(|s| s == name)
                || BUILTIN_IDENTS.contains(&name.as_str());
            (!known).then(|| name.clone())
        }
        Expr::Call(call) => call
            .target
            .as_deref()
            .and_then(|t| first_undeclared(t, scope))
            .or_else(|| call.args.iter().find_map(|a| first_undeclared(a, scope))),
        Expr::Select(s) => first_undeclared(&s.operand, scope),
        Expr::List(l) => l.elements.iter().find_map(|x| first_undeclared(x, scope)),
        Expr::Map(m) => m
            .entries
            .iter()
            .find_map(|en| entry_undeclared(&en.expr, scope)),
        Expr::Struct(s) => s
            .entries
            .iter()
            .find_map(|en| entry_undeclared(&en.expr, scope)),
        Expr::Comprehension(c) => {
            if let Some(n) = first_undeclared(&c.iter_range, scope)
                .or_else(|| first_undeclared(&c.accu_init, scope))
            {
                return Some(n);
            }
            let depth = scope.len();
            scope.push(c.iter_var.clone());
            if let Some(v) = &c.iter_var2 {
                scope.push(v.clone());
            }
            scope.push(c.accu_var.clone());
            let found = first_undeclared(&c.loop_cond, scope)
                .or_else(|| first_undeclared(&c.loop_step, scope))
                .or_else(|| first_undeclared(&c.result, scope));
            scope.truncate(depth);
            found
        }
    }
}

fn entry_undeclared(e: &EntryExpr, scope: &mut Vec<String>) -> Option<String> {
    match e {
        EntryExpr::StructField(f) => first_undeclared(&f.value, scope),
        EntryExpr::MapEntry(m) => {
            first_undeclared(&m.key, scope).or_else(|| first_undeclared(&m.value, scope))
        }
    }
}

/// A JSON value as a CEL value: integers are `int` (as in Kubernetes' unstructured objects),
/// or `uint` beyond `int`'s range.
pub fn json_to_cel(v: &Value) -> CelValue {
    match v {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                CelValue::Int(i)
            } else if let Some(u) = n.as_u64() {
                CelValue::UInt(u)
            } else {
                CelValue::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(items) => CelValue::List(Arc::new(items.iter().map(json_to_cel).collect())),
        Value::Object(map) => {
            let entries: std::collections::HashMap<Key, CelValue> = map
                .iter()
                .map(|(k, v)| (Key::from(k.as_str()), json_to_cel(v)))
                .collect();
            CelValue::Map(Map {
                map: Arc::new(entries),
            })
        }
    }
}

/// The status of one custom resource from its three expressions (Flux RFC-0009).
#[derive(Debug, Clone)]
pub struct StatusEvaluator {
    current: Expression,
    in_progress: Option<Expression>,
    failed: Option<Expression>,
}

impl StatusEvaluator {
    /// The same expressions, evaluated within `limits` (one budget for the three of them).
    pub fn with_limits(self, limits: EvalLimits) -> Self {
        StatusEvaluator {
            current: self.current.with_limits(limits),
            in_progress: self.in_progress.map(|e| e.with_limits(limits)),
            failed: self.failed.map(|e| e.with_limits(limits)),
        }
    }

    /// Compiles one `healthCheckExprs` entry (`index` is used in the error texts).
    pub fn new(hc: &CustomHealthCheck, index: usize) -> Result<Self, HealthExprError> {
        if hc.current.is_empty() {
            return Err(HealthExprError::MissingCurrent { index });
        }
        let compile = |which: &'static str, src: &str| {
            Expression::parse(src).map_err(|source| HealthExprError::Compile {
                index,
                which,
                source,
            })
        };
        let current = compile("Current", &hc.current)?;
        let failed = match hc.failed.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => Some(compile("Failed", s)?),
            None => None,
        };
        let in_progress = match hc.in_progress.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => Some(compile("InProgress", s)?),
            None => None,
        };
        Ok(StatusEvaluator {
            current,
            in_progress,
            failed,
        })
    }

    /// The object's status: InProgress while `status.observedGeneration` (when present)
    /// differs from `metadata.generation`; otherwise the first of `inProgress`, `failed`,
    /// `current` that is true; InProgress when none is.
    pub fn evaluate(&self, obj: &Value) -> Result<Status, CelError> {
        if let Some(observed) = obj.pointer("/status/observedGeneration") {
            let Some(observed) = observed.as_i64() else {
                return Err(CelError::Eval {
                    expr: "status.observedGeneration".into(),
                    message: format!("{observed} is not an integer"),
                });
            };
            if let Some(generation) = obj.pointer("/metadata/generation").and_then(Value::as_i64)
                && generation != observed
            {
                return Ok(Status::InProgress);
            }
        }
        let ordered = [
            (self.in_progress.as_ref(), Status::InProgress),
            (self.failed.as_ref(), Status::Failed),
            (Some(&self.current), Status::Current),
        ];
        // The object is converted once for the (up to) three expressions, which share one
        // cost budget.
        let ctx = object_context(obj);
        let mut last = &self.current;
        let (result, exceeded) = meter::metered(self.current.limits, || {
            for (expr, status) in ordered {
                if let Some(e) = expr {
                    last = e;
                    if e.eval_unmetered(&ctx)? {
                        return Ok(status);
                    }
                }
            }
            Ok(Status::InProgress)
        });
        match exceeded {
            Some(e) => Err(last.over_budget(e)),
            None => result,
        }
    }

    /// [`Self::evaluate`] as a kstatus result: an evaluation error is Unknown, with the
    /// error as the message (the health check then waits, and reports it on timeout).
    pub fn compute(&self, obj: &Value) -> (StatusResult, Option<String>) {
        match self.evaluate(obj) {
            Ok(status) => (
                StatusResult {
                    status,
                    message: match status {
                        Status::Current => "custom health check: current".into(),
                        Status::Failed => "custom health check: failed".into(),
                        _ => "custom health check: in progress".into(),
                    },
                },
                None,
            ),
            Err(e) => (
                StatusResult {
                    status: Status::Unknown,
                    message: String::new(),
                },
                Some(e.to_string()),
            ),
        }
    }
}

/// The compiled `spec.healthCheckExprs`, keyed by group and kind (an empty kind covers the
/// whole group; a kind-specific entry wins).
#[derive(Debug, Clone, Default)]
pub struct HealthExprs {
    by_group_kind: BTreeMap<(String, String), StatusEvaluator>,
}

impl HealthExprs {
    /// Compiles every entry; the first error is terminal for the Kustomization.
    pub fn compile(checks: &[CustomHealthCheck]) -> Result<Self, HealthExprError> {
        let mut by_group_kind = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for (index, hc) in checks.iter().enumerate() {
            // Only the group of apiVersion counts.
            let (group, _) = split_api_version(&hc.api_version);
            let kind = hc.kind.clone().unwrap_or_default();
            let key = (group.to_string(), kind);
            if !seen.insert(key.clone()) {
                let group_kind = if key.0.is_empty() {
                    key.1.clone()
                } else {
                    format!("{}.{}", key.1, key.0)
                };
                return Err(HealthExprError::Duplicate { group_kind, index });
            }
            by_group_kind.insert(key, StatusEvaluator::new(hc, index)?);
        }
        Ok(HealthExprs { by_group_kind })
    }

    /// The same expressions, each object evaluated within `limits`.
    pub fn with_limits(mut self, limits: EvalLimits) -> Self {
        self.by_group_kind = std::mem::take(&mut self.by_group_kind)
            .into_iter()
            .map(|(key, ev)| (key, ev.with_limits(limits)))
            .collect();
        self
    }

    /// No expressions.
    pub fn is_empty(&self) -> bool {
        self.by_group_kind.is_empty()
    }

    /// The evaluator for objects of `group`/`kind`: the kind-specific entry, else the
    /// group-wide one. `batch/Job` keeps Flux's built-in Job reader, which Flux consults
    /// before the CEL readers.
    pub fn evaluator(&self, group: &str, kind: &str) -> Option<&StatusEvaluator> {
        if group == "batch" && kind == "Job" {
            return None;
        }
        self.by_group_kind
            .get(&(group.to_string(), kind.to_string()))
            .or_else(|| self.by_group_kind.get(&(group.to_string(), String::new())))
    }
}

/// A compiled `dependsOn[].readyExpr`: a boolean over `self` (this Kustomization) and `dep`
/// (the dependency), both as unstructured objects.
#[derive(Debug, Clone)]
pub struct ReadyExpr(Expression);

impl ReadyExpr {
    /// Compiles the expression with the variables `self` and `dep` declared.
    pub fn compile(expr: &str) -> Result<Self, CelError> {
        Expression::compile(expr, &["self", "dep"]).map(ReadyExpr)
    }

    /// Whether the dependency is ready.
    pub fn eval(&self, this: &Value, dep: &Value) -> Result<bool, CelError> {
        self.0.eval_bool([("self", this), ("dep", dep)])
    }
}

/// `spec.healthCheckExprs` judge the kinds they name instead of the kstatus rules.
impl crate::wait::StatusReader for HealthExprs {
    fn handles(&self, group: &str, kind: &str) -> bool {
        self.evaluator(group, kind).is_some()
    }

    fn read(&self, group: &str, kind: &str, obj: &Value) -> (Status, String, Option<String>) {
        match self.evaluator(group, kind) {
            Some(e) => {
                let (r, err) = e.compute(obj);
                (r.status, r.message, err)
            }
            None => (Status::Unknown, String::new(), None),
        }
    }
}
