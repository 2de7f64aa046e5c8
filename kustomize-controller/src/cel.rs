//! CEL for `spec.healthCheckExprs` (custom status readers) and `spec.dependsOn[].readyExpr`,
//! with Flux's semantics (fluxcd/pkg `runtime/cel`, RFC 0009) on the `cel` crate.
//!
//! Everything here is pure: expressions are compiled once per Kustomization spec
//! ([`HealthExprs::compile`], [`ReadyExpr::compile`]) and evaluated against `serde_json::Value`
//! objects. What the `cel` crate does and does not offer compared with Flux's cel-go
//! environment is listed in `docs/cel.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::objects::{Key, Map};
use cel::{Context, Env, Program, Value as CelValue};
use rflux_common::api::kustomization::CustomHealthCheck;
use serde_json::Value;

use crate::inventory::split_api_version;
use crate::kstatus::{Status, StatusResult};

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

/// One compiled expression.
#[derive(Debug, Clone)]
pub struct Expression {
    source: String,
    program: Arc<Program>,
}

impl Expression {
    /// Parses `source` (Flux parses health expressions without type checking: any top-level
    /// field of the object may be referenced).
    pub fn parse(source: &str) -> Result<Self, CelError> {
        let program = env().compile(source).map_err(|e| CelError::Parse {
            expr: source.to_string(),
            message: e.to_string(),
        })?;
        Ok(Expression {
            source: source.to_string(),
            program: Arc::new(program),
        })
    }

    /// Compiles `source` with the declared `variables` only, for a boolean result (Flux's
    /// `WithCompile`, `WithStructVariables`, `WithOutputType(bool)`): an undeclared
    /// identifier or a literal of another type is a compile error.
    pub fn compile(source: &str, variables: &[&str]) -> Result<Self, CelError> {
        let e = Self::parse(source)?;
        let root = e.program.expression();
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

    /// Evaluates to a boolean in a prepared context.
    fn eval_in(&self, ctx: &Context<'_, '_>) -> Result<bool, CelError> {
        match self.program.execute(ctx) {
            Ok(CelValue::Bool(b)) => Ok(b),
            Ok(_) => Err(CelError::NotBool {
                expr: self.source.clone(),
            }),
            Err(e) => Err(CelError::Eval {
                expr: self.source.clone(),
                message: e.to_string(),
            }),
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

/// The status of one custom resource from its three expressions (RFC 0009).
#[derive(Debug, Clone)]
pub struct StatusEvaluator {
    current: Expression,
    in_progress: Option<Expression>,
    failed: Option<Expression>,
}

impl StatusEvaluator {
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
        // The object is converted once for the (up to) three expressions.
        let ctx = object_context(obj);
        for (expr, status) in ordered {
            if let Some(e) = expr
                && e.eval_in(&ctx)?
            {
                return Ok(status);
            }
        }
        Ok(Status::InProgress)
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hc(api_version: &str, kind: Option<&str>, current: &str) -> CustomHealthCheck {
        CustomHealthCheck {
            api_version: api_version.into(),
            kind: kind.map(str::to_string),
            current: current.into(),
            in_progress: None,
            failed: None,
        }
    }

    fn obj(status: Value) -> Value {
        json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "ns", "generation": 2,
                         "labels": {"app": "web"}},
            "spec": {"replicas": 3},
            "status": status,
        })
    }

    fn ready(status: &str) -> Value {
        json!([{"type": "Ready", "status": status, "reason": "R", "message": "m"}])
    }

    #[test]
    fn compile_errors() {
        let e =
            HealthExprs::compile(&[hc("example.com/v1", None, "status.phase == ")]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with(
                "failed to create custom status evaluator for healthchecks[0]: \
                 failed to parse the expression Current: failed to parse the CEL expression 'status.phase == '"
            ),
            "{msg}"
        );
        let mut bad_failed = hc("example.com/v1", None, "true");
        bad_failed.failed = Some("(((".into());
        let e = HealthExprs::compile(&[hc("a/v1", None, "true"), bad_failed]).unwrap_err();
        assert!(
            e.to_string()
                .contains("healthchecks[1]: failed to parse the expression Failed"),
            "{e}"
        );
        let e = HealthExprs::compile(&[hc("example.com/v1", None, "")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to create custom status evaluator for healthchecks[0]: expression Current not specified"
        );
        let e = HealthExprs::compile(&[
            hc("example.com/v1", Some("Widget"), "true"),
            hc("example.com/v2", Some("Widget"), "true"),
        ])
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "duplicate custom health check for GroupKind Widget.example.com at healthchecks[1]"
        );
        assert!(HealthExprs::compile(&[]).unwrap().is_empty());
    }

    #[test]
    fn current_in_progress_failed_precedence() {
        let mut check = hc(
            "example.com/v1",
            Some("Widget"),
            "status.conditions.filter(c, c.type == 'Ready').all(c, c.status == 'True')",
        );
        check.failed =
            Some("status.conditions.exists(c, c.type == 'Ready' && c.status == 'False')".into());
        check.in_progress = Some("has(status.phase) && status.phase == 'Pending'".into());
        let exprs = HealthExprs::compile(&[check]).unwrap();
        let ev = exprs.evaluator("example.com", "Widget").unwrap();
        assert_eq!(
            ev.evaluate(&obj(json!({"conditions": ready("True")})))
                .unwrap(),
            Status::Current
        );
        assert_eq!(
            ev.evaluate(&obj(json!({"conditions": ready("False")})))
                .unwrap(),
            Status::Failed
        );
        assert_eq!(
            ev.evaluate(&obj(json!({"conditions": ready("Unknown")})))
                .unwrap(),
            Status::InProgress
        );
        // inProgress is evaluated first: it wins over failed and current.
        assert_eq!(
            ev.evaluate(&obj(
                json!({"phase": "Pending", "conditions": ready("True")})
            ))
            .unwrap(),
            Status::InProgress
        );
        assert_eq!(
            ev.evaluate(&obj(
                json!({"phase": "Pending", "conditions": ready("False")})
            ))
            .unwrap(),
            Status::InProgress
        );
        // A stale observedGeneration is InProgress whatever the expressions say.
        assert_eq!(
            ev.evaluate(&obj(
                json!({"observedGeneration": 1, "conditions": ready("True")})
            ))
            .unwrap(),
            Status::InProgress
        );
        assert_eq!(
            ev.evaluate(&obj(
                json!({"observedGeneration": 2, "conditions": ready("True")})
            ))
            .unwrap(),
            Status::Current
        );
    }

    #[test]
    fn evaluation_errors_are_unknown() {
        let exprs =
            HealthExprs::compile(&[hc("example.com/v1", None, "status.ready == true")]).unwrap();
        let ev = exprs.evaluator("example.com", "Widget").unwrap();
        // No status at all: the variable is missing.
        let no_status = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                               "metadata": {"name": "w"}});
        let err = ev.evaluate(&no_status).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("failed to evaluate the CEL expression 'status.ready == true'"),
            "{err}"
        );
        let (r, e) = ev.compute(&no_status);
        assert_eq!(r.status, Status::Unknown);
        assert!(e.is_some());
        let (r, e) = ev.compute(&obj(json!({"ready": true})));
        assert_eq!(r.status, Status::Current);
        assert_eq!(e, None);
        // A non-boolean result.
        let exprs = HealthExprs::compile(&[hc("example.com/v1", None, "status.phase")]).unwrap();
        let err = exprs
            .evaluator("example.com", "Widget")
            .unwrap()
            .evaluate(&obj(json!({"phase": "Ready"})))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "failed to evaluate CEL expression as boolean: 'status.phase'"
        );
    }

    #[test]
    fn kind_specific_entry_wins_over_group() {
        let exprs = HealthExprs::compile(&[
            hc("example.com/v1", None, "status.group == true"),
            hc("example.com/v1beta1", Some("Widget"), "status.kind == true"),
            hc("v1", Some("ConfigMap"), "data.ok == 'yes'"),
        ])
        .unwrap();
        let widget = obj(json!({"group": false, "kind": true}));
        // Widget uses its own entry (only the group of apiVersion is matched).
        assert_eq!(
            exprs
                .evaluator("example.com", "Widget")
                .unwrap()
                .evaluate(&widget)
                .unwrap(),
            Status::Current
        );
        // Another kind of the group falls back to the group-wide entry.
        assert_eq!(
            exprs
                .evaluator("example.com", "Gadget")
                .unwrap()
                .evaluate(&widget)
                .unwrap(),
            Status::InProgress
        );
        assert!(exprs.evaluator("other.io", "Widget").is_none());
        // The core group.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"ok": "yes"}});
        assert_eq!(
            exprs
                .evaluator("", "ConfigMap")
                .unwrap()
                .evaluate(&cm)
                .unwrap(),
            Status::Current
        );
        assert!(exprs.evaluator("", "Secret").is_none());
        // Jobs keep the built-in reader.
        let jobs = HealthExprs::compile(&[hc("batch/v1", None, "true")]).unwrap();
        assert!(jobs.evaluator("batch", "Job").is_none());
        assert!(jobs.evaluator("batch", "CronJob").is_some());
    }

    fn ks(name: &str, labels: Value, ready: &str, gen_: i64, observed: i64) -> Value {
        json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": "apps", "generation": gen_, "labels": labels},
            "spec": {"interval": "1m", "prune": true},
            "status": {"observedGeneration": observed, "conditions": [
                {"type": "Ready", "status": ready, "reason": "x", "message": ""}]}
        })
    }

    #[test]
    fn ready_expr_true_false_error() {
        let expr = ReadyExpr::compile(
            "dep.metadata.generation == dep.status.observedGeneration && \
             dep.status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'True') && \
             dep.metadata.labels['app/version'] == self.metadata.labels['app/version']",
        )
        .unwrap();
        let me = ks("me", json!({"app/version": "v1"}), "False", 1, 1);
        let dep = ks("dep", json!({"app/version": "v1"}), "True", 3, 3);
        assert!(expr.eval(&me, &dep).unwrap());
        let other_version = ks("dep", json!({"app/version": "v2"}), "True", 3, 3);
        assert!(!expr.eval(&me, &other_version).unwrap());
        let stale = ks("dep", json!({"app/version": "v1"}), "True", 3, 2);
        assert!(!expr.eval(&me, &stale).unwrap());
        // A label missing on the dependency: an evaluation error (not terminal).
        let unlabeled = ks("dep", json!({}), "True", 3, 3);
        let err = expr.eval(&me, &unlabeled).unwrap_err();
        assert!(matches!(err, CelError::Eval { .. }), "{err}");
        // A non-boolean result.
        let s = ReadyExpr::compile("dep.metadata.name").unwrap();
        assert!(matches!(
            s.eval(&me, &dep).unwrap_err(),
            CelError::NotBool { .. }
        ));
    }

    #[test]
    fn ready_expr_compile_errors() {
        let e = ReadyExpr::compile("dep.status.(").unwrap_err();
        assert!(matches!(e, CelError::Parse { .. }), "{e}");
        // Only self and dep are declared; comprehension variables are in scope.
        let e = ReadyExpr::compile("other.status.ready").unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to parse the CEL expression 'other.status.ready': undeclared reference to 'other'"
        );
        let e = ReadyExpr::compile("dep.status.conditions.all(c, c.status == x)").unwrap_err();
        assert!(e.to_string().contains("'x'"), "{e}");
        assert!(ReadyExpr::compile("dep.status.conditions.all(c, c.status == 'True')").is_ok());
        assert!(ReadyExpr::compile("[1, 2].map(x, x * 2).exists(y, y == 4)").is_ok());
        let e = ReadyExpr::compile("'yes'").unwrap_err();
        assert_eq!(
            e.to_string(),
            "CEL expression output type mismatch: expected bool, got string"
        );
    }

    #[test]
    fn kubernetes_flavoured_functions() {
        let o = obj(json!({
            "phase": "Running",
            "replicas": 3,
            "ratio": 0.5,
            "conditions": ready("True"),
            "message": "  Hello World  ",
        }));
        let t = |src: &str| {
            Expression::parse(src)
                .unwrap()
                .eval_bool_on_object(&o)
                .unwrap_or_else(|e| panic!("{src}: {e}"))
        };
        assert!(t("has(status.phase)"));
        assert!(!t("has(status.missing)"));
        assert!(t(
            "has(metadata.labels.app) && metadata.labels.app == 'web'"
        ));
        assert!(t("status.conditions.exists(c, c.type == 'Ready')"));
        assert!(t("status.conditions.exists_one(c, c.status == 'True')"));
        assert!(t("status.conditions.map(c, c.type) == ['Ready']"));
        assert!(t("size(status.conditions) == 1"));
        assert!(t(
            "status.replicas == spec.replicas && status.replicas >= 2"
        ));
        assert!(t("status.ratio < 1.0"));
        assert!(t(
            "status.phase.startsWith('Run') && status.phase.endsWith('ing')"
        ));
        assert!(t(
            "status.phase.contains('unn') && status.phase.matches('^R.*g$')"
        ));
        assert!(t("status.phase.lowerAscii() == 'running'"));
        assert!(t("status.message.trim() == 'Hello World'"));
        assert!(t("status.phase.split('n').size() == 4"));
        assert!(t("'status' in metadata == false && 'labels' in metadata"));
        assert!(t("status.?missing.orValue('x') == 'x'"));
        assert!(t("status.?phase.orValue('x') == 'Running'"));
        assert!(t("!status.?missing.hasValue()"));
        assert!(t("metadata.?labels.?app.orValue('') == 'web'"));
        assert!(t("base64.encode(b'hi') == 'aGk='"));
        assert!(t("int(status.replicas) + 1 == 4"));
        assert!(t("string(status.replicas) == '3'"));
        assert!(t(
            "status.phase.charAt(0) == 'R' && status.phase.indexOf('n') == 2"
        ));
        assert!(t(
            "status.phase.upperAscii() == 'RUNNING' && status.phase.reverse() == 'gninnuR'"
        ));
        assert!(t(
            "status.phase.substring(0, 3) == 'Run' && status.phase.replace('n', 'N') == 'RuNNiNg'"
        ));
        assert!(t(
            "['a', 'b'].join('-') == 'a-b' && strings.quote('x') == '\"x\"'"
        ));
        assert!(t("'%s/%d'.format(['a', 1]) == 'a/1'"));
        assert!(t("base64.decode('aGk=') == b'hi'"));
        assert!(t(
            "type(status.phase) == string && type(status.replicas) == int"
        ));
        assert!(t(
            "optional.of(1).value() == 1 && !optional.none().hasValue()"
        ));
        assert!(t("metadata.labels[?'app'].orValue('') == 'web'"));
        assert!(t("timestamp('2026-01-02T03:04:05Z').getFullYear() == 2026"));
        assert!(t("duration('90s') == duration('1m30s')"));
        // cel-go's CrossTypeNumericComparisons.
        assert!(t(
            "status.replicas < 3.5 && status.ratio < 1 && status.replicas == 3.0"
        ));
    }
}
