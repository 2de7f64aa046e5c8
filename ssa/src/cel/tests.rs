//! Unit tests of the CEL environment, health expressions and readyExpr.

#![allow(clippy::unwrap_used)]

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
    let e = HealthExprs::compile(&[hc("example.com/v1", None, "status.phase == ")]).unwrap_err();
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
