//! The CEL budget: compile-time bounds on tenant expressions, the runtime cost meter
//! (comprehension iterations, bytes of built values, wall-clock time), and a differential
//! check that the metering instrumentation changes no result.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use kustomize_controller::cel::{
    CelError, EvalLimits, Expression, HealthExprs, MAX_AST_DEPTH, MAX_AST_NODES,
    MAX_COMPREHENSION_NESTING, MAX_EVAL_BYTES, MAX_EXPRESSION_LENGTH, MAX_ITERATIONS,
    MAX_PATTERN_LENGTH, ReadyExpr, json_to_cel,
};
use rflux_common::api::kustomization::CustomHealthCheck;
use serde_json::{Value, json};

fn parse_message(r: Result<Expression, CelError>) -> String {
    match r {
        Err(CelError::Parse { message, .. }) => message,
        Err(other) => panic!("not a parse error: {other}"),
        Ok(_) => panic!("compiled"),
    }
}

#[test]
fn too_long_is_rejected_before_parsing_and_not_echoed() {
    let src = format!("{}true", "true && ".repeat(MAX_EXPRESSION_LENGTH / 8));
    let err = Expression::parse(&src).unwrap_err();
    let CelError::Parse { expr, message } = &err else {
        panic!("{err}");
    };
    assert_eq!(
        message,
        &format!(
            "expression is {} bytes long, more than the limit of {MAX_EXPRESSION_LENGTH}",
            src.len()
        )
    );
    assert!(expr.len() <= 67 && expr.ends_with("..."), "{expr}");
    // At the limit is fine.
    let ok = format!("{}true", " ".repeat(MAX_EXPRESSION_LENGTH - 4));
    assert!(Expression::parse(&ok).is_ok());
}

#[test]
fn too_many_nodes() {
    let src = format!("size([{}]) > 0", "1,".repeat(MAX_AST_NODES));
    assert_eq!(
        parse_message(Expression::parse(&src)),
        format!("expression has more than {MAX_AST_NODES} nodes once its macros are expanded")
    );
    let src = format!("size([{}]) > 0", "1,".repeat(MAX_AST_NODES / 2));
    assert!(Expression::parse(&src).is_ok());
}

/// Parses on a thread with the stack of a tokio worker (2 MiB) in a release build; the `cel`
/// crate's generated parser needs far larger frames in a debug build.
fn parse_on_worker_stack(src: String) -> Result<(), CelError> {
    let stack = if cfg!(debug_assertions) {
        64 << 20
    } else {
        2 << 20
    };
    std::thread::Builder::new()
        .stack_size(stack)
        .spawn(move || Expression::parse(&src).map(drop))
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let n = 2000;
    for src in [
        format!("{}true{}", "(".repeat(n), ")".repeat(n)),
        format!("{}1{} == 1", "[".repeat(n), "]".repeat(n)),
        format!("{}1{} == 1", "{1:".repeat(n / 2), "}".repeat(n / 2)),
        format!("{}1 == 1", "true ? 1 : ".repeat(n / 6)),
        format!("{}true", "!".repeat(n)),
        format!("{}1 == 1", "-".repeat(n)),
        format!("a{} == 1", ".b".repeat(n)),
        format!("a{} == 1", "[0]".repeat(n * 2 / 3)),
        format!("{}1 == 1", "1 + ".repeat(n / 2)),
        format!("{}true", "false || ".repeat(n / 5)),
        format!("{} == 1", "size(".repeat(n / 6) + "a" + &")".repeat(n / 6)),
    ] {
        let start = Instant::now();
        let result = parse_on_worker_stack(src.clone());
        eprintln!(
            "{}...: {:?}, ok: {}",
            &src[..12],
            start.elapsed(),
            result.is_ok()
        );
        // Repeated `!` and `-` cancel out in pairs, and `||` chains are balanced: those parse.
        if src.starts_with("!!") || src.starts_with("--") || src.starts_with("false ||") {
            assert!(result.is_ok(), "{}", &src[..12]);
        } else {
            match result {
                Err(CelError::Parse { message, .. }) => {
                    assert!(message.len() <= 2100, "{} bytes", message.len())
                }
                other => panic!("{}: {:?}", &src[..12], other.is_ok()),
            }
        }
    }
    let select_chain = |k: usize| format!("a{} == 1", ".b".repeat(k));
    assert!(Expression::parse(&select_chain(MAX_AST_DEPTH - 5)).is_ok());
    assert_eq!(
        parse_message(Expression::parse(&select_chain(MAX_AST_DEPTH + 5))),
        format!(
            "expression is nested more than {MAX_AST_DEPTH} levels deep once its macros are \
             expanded"
        )
    );
}

/// The deepest expressions accepted evaluate on a worker's stack.
#[test]
fn deepest_accepted_expressions_evaluate() {
    let d = MAX_AST_DEPTH / 2 - 2;
    for src in [
        format!("{}1 > 1", "1 + ".repeat(2 * d)),
        format!(
            "{}'a'{} == 1",
            "size(string(".repeat(d / 2),
            "))".repeat(d / 2)
        ),
        format!("size({}1{}) == 1", "[".repeat(d), "]".repeat(d)),
        format!("status{} == 1", ".b".repeat(2 * d)),
    ] {
        // Parsing needs a large stack in a debug build (see `parse_on_worker_stack`).
        let parsed = src.clone();
        let e = std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn(move || Expression::parse(&parsed))
            .unwrap()
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("{src}: {e}"));
        let stack = if cfg!(debug_assertions) {
            64 << 20
        } else {
            2 << 20
        };
        let r = std::thread::Builder::new()
            .stack_size(stack)
            .spawn(move || e.eval_bool_on_object(&json!({"status": {}})).is_ok())
            .unwrap()
            .join();
        assert!(r.is_ok(), "{src}");
    }
}

#[test]
fn comprehension_nesting() {
    let nested = |k: usize| {
        let mut body = "true".to_string();
        for i in 0..k {
            body = format!("l.all(x{i}, {body})");
        }
        body
    };
    assert!(Expression::parse(&nested(MAX_COMPREHENSION_NESTING)).is_ok());
    assert_eq!(
        parse_message(Expression::parse(&nested(MAX_COMPREHENSION_NESTING + 1))),
        "comprehensions (all, exists, exists_one, map, filter) are nested more than 3 levels deep"
    );
    // Chained comprehensions are not nested.
    let chained = "l.map(x, x).filter(x, x > 0).map(x, x).filter(x, x > 0).all(x, x > 0)";
    assert!(Expression::parse(chained).is_ok());
}

#[test]
fn compile_limits_are_terminal_configuration_errors() {
    let long = "x".repeat(MAX_EXPRESSION_LENGTH + 1);
    let err = HealthExprs::compile(&[CustomHealthCheck {
        api_version: "example.com/v1".into(),
        kind: Some("Widget".into()),
        current: long.clone(),
        in_progress: None,
        failed: None,
    }])
    .unwrap_err();
    assert!(
        err.to_string().starts_with(
            "failed to create custom status evaluator for healthchecks[0]: failed to parse the \
             expression Current: failed to parse the CEL expression 'xxxx"
        ),
        "{err}"
    );
    assert!(
        err.to_string().ends_with("more than the limit of 4096"),
        "{err}"
    );
    let err = ReadyExpr::compile(&long).unwrap_err();
    assert!(matches!(err, CelError::Parse { .. }), "{err}");
}

/// The default limits without the wall-clock one (which a debug build may hit first): the
/// deterministic limits decide.
fn untimed() -> EvalLimits {
    EvalLimits {
        timeout: Duration::from_secs(60),
        ..EvalLimits::default()
    }
}

fn eval(src: &str, obj: &Value) -> Result<bool, CelError> {
    Expression::parse(src)
        .unwrap()
        .with_limits(untimed())
        .eval_bool_on_object(obj)
}

fn eval_message(src: &str, obj: &Value) -> String {
    match eval(src, obj) {
        Err(CelError::Eval { message, .. }) => message,
        other => panic!("{src}: {other:?}"),
    }
}

fn timed(src: &str, obj: &Value) -> (Result<bool, CelError>, Duration) {
    let e = Expression::parse(src).unwrap().with_limits(untimed());
    let start = Instant::now();
    let r = e.eval_bool_on_object(obj);
    let took = start.elapsed();
    eprintln!("{src}: {took:?}");
    (r, took)
}

#[test]
fn comprehension_iterations_are_capped() {
    let obj = json!({"status": {"items": vec![1; 1000]}});
    // 1000 x 1000 iterations: stopped after the limit.
    let src = "status.items.all(a, status.items.all(b, a == b))";
    let (r, took) = timed(src, &obj);
    let Err(CelError::Eval { message, .. }) = r else {
        panic!("{r:?}");
    };
    assert_eq!(
        message,
        format!("cost limit exceeded: more than {MAX_ITERATIONS} comprehension iterations")
    );
    assert!(took < Duration::from_secs(10));
    // An error the expression would absorb (`|| true`) still fails the evaluation.
    assert!(eval_message(&format!("{src} || true"), &obj).starts_with("cost limit exceeded"));
    // Within the limit.
    let big = json!({"status": {"items": vec![1; 50_000]}});
    assert!(eval("status.items.all(a, a == 1)", &big).unwrap());
    assert!(
        eval(
            "status.items.map(a, a + 1).filter(a, a == 2).size() == 50000",
            &big
        )
        .unwrap()
    );
    assert!(eval("status.items.exists_one(a, a == 1) == false", &big).unwrap());
    // Custom limits.
    let small = Expression::parse("status.items.exists(a, a == 2)")
        .unwrap()
        .with_limits(EvalLimits {
            iterations: 10,
            ..untimed()
        });
    let err = small
        .eval_bool_on_object(&json!({"status": {"items": vec![1; 11]}}))
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("more than 10 comprehension iterations"),
        "{err}"
    );
    assert!(
        !small
            .eval_bool_on_object(&json!({"status": {"items": vec![1; 10]}}))
            .unwrap()
    );
}

fn big_object() -> Value {
    json!({"status": {"big": "a".repeat(1 << 20), "items": vec![1; 200]}})
}

#[test]
fn built_values_are_capped() {
    let obj = big_object();
    let bytes_err =
        format!("cost limit exceeded: more than {MAX_EVAL_BYTES} bytes of values built");
    for src in [
        // Quadratic replacement: refused before it is built.
        "status.big.replace('', status.big) == ''",
        "status.big.replace('a', status.big, 100) == ''",
        // Copies of a large value into a list, a map, a map() result, a concatenation.
        "status.items.map(x, status.big).size() > 0",
        "size([status.big, status.big, status.big, status.big, status.big, status.big, status.big, \
         status.big, status.big, status.big, status.big, status.big, status.big, status.big, \
         status.big, status.big, status.big]) > 0",
        "size({1: status.big, 2: status.big, 3: status.big, 4: status.big, 5: status.big, \
         6: status.big, 7: status.big, 8: status.big, 9: status.big, 10: status.big, \
         11: status.big, 12: status.big, 13: status.big, 14: status.big, 15: status.big, \
         16: status.big, 17: status.big}) > 0",
        "size(status.big + status.big + status.big + status.big + status.big + status.big) > 0",
        // join with a large separator; split into a million strings.
        "['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l', 'm', 'n', 'o', 'p', 'q', \
         'r'].join(status.big) == ''",
        "status.big.split('').size() > 0",
    ] {
        let (r, took) = timed(src, &obj);
        match r {
            Err(CelError::Eval { message, .. }) => assert_eq!(message, bytes_err, "{src}"),
            other => panic!("{src}: {other:?}"),
        }
        assert!(took < Duration::from_secs(10), "{src}");
    }
    // Linear work on the large value is fine.
    assert!(
        eval(
            "status.big.startsWith('a') && size(status.big) == 1048576",
            &obj
        )
        .unwrap()
    );
    assert!(eval("status.big.replace('a', 'b').endsWith('b')", &obj).unwrap());
    assert!(eval("status.big.split('b').size() == 1", &obj).unwrap());
}

#[test]
fn evaluation_time_is_capped() {
    let obj = json!({"status": {"big": "a".repeat(1 << 20), "items": vec![1; 90_000]}});
    // 90000 iterations, each scanning 1 MiB: far more than the time limit.
    let e = Expression::parse("status.items.all(x, !status.big.contains('ab'))").unwrap();
    let start = Instant::now();
    let r = e.eval_bool_on_object(&obj);
    let took = start.elapsed();
    eprintln!("90000 scans of 1 MiB stopped after {took:?}");
    let Err(CelError::Eval { message, .. }) = r else {
        panic!("{r:?}");
    };
    assert_eq!(
        message,
        "cost limit exceeded: evaluation took longer than 100ms"
    );
    assert!(took < Duration::from_secs(10));
}

/// The environment the expressions ran in before metering: the same extensions, nothing
/// instrumented.
fn raw_eval(src: &str, obj: &Value) -> Result<bool, String> {
    let mut env = cel::Env::stdlib();
    env.set_error_on_duplicate_map_keys(false);
    env.add_extension(cel::extensions::strings).unwrap();
    env.add_extension(cel::extensions::encoders).unwrap();
    let env = Arc::new(env);
    let program = env.compile(src).unwrap();
    let mut ctx = cel::Context::with_env(env);
    for (k, v) in obj.as_object().unwrap() {
        ctx.add_variable_from_value(k.as_str(), json_to_cel(v));
    }
    match program.execute(&ctx) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("not a bool: {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn instrumentation_changes_no_result() {
    let obj = json!({
        "metadata": {"name": "w", "labels": {"app": "web", "tier": "x"}},
        "status": {"phase": "Running", "n": 3, "s": "a,b,,c", "l": [1, 2, 3, 2],
                   "conditions": [{"type": "Ready", "status": "True"}, {"type": "X"}],
                   "words": ["x", "y"], "mixed": ["x", 1]},
    });
    let cases = [
        "status.l.all(x, x > 0)",
        "status.l.exists(x, x == 3)",
        "status.l.exists_one(x, x == 2)",
        "status.l.map(x, x * 2) == [2, 4, 6, 4]",
        "status.l.map(x, x > 1, x * 10) == [20, 30, 20]",
        "status.l.filter(x, x == 2) == [2, 2]",
        "status.l.filter(x, x > 1).map(y, y - 1).all(z, z >= 1)",
        "status.conditions.all(c, c.status == 'True')",
        "status.conditions.exists(c, c.status == 'True')",
        "status.conditions.filter(c, c.type == 'X').all(c, c.status == 'True')",
        "status.l.all(x, status.l.exists(y, y == x))",
        "metadata.labels.all(k, k.size() > 2)",
        "metadata.labels.map(k, metadata.labels[k]).exists(v, v == 'web')",
        "status.l.all(x, 1 / (x - 2) > -5)",
        "status.l.exists(x, 1 / (x - 2) > 0)",
        "status.l.map(x, 'a').filter(x, x).size() == 0",
        "status.l.exists_one(x, x)",
        "status.s.replace(',', ';') == 'a;b;;c'",
        "status.s.replace(',', '', 2) == 'ab,c'",
        "status.s.replace(',', '', -1) == 'abc'",
        "status.s.replace('', '-') == '-a-,-b-,-,-c-'",
        "status.s.split(',') == ['a', 'b', '', 'c']",
        "status.s.split(',', 2) == ['a', 'b,,c']",
        "status.s.split(',', 0) == []",
        "status.s.split(',', -1).size() == 4",
        "status.phase.split('') == ['R', 'u', 'n', 'n', 'i', 'n', 'g']",
        "status.phase.split('', 3) == ['R', 'u', 'nning']",
        "''.split('') == [] && ''.split(',') == ['']",
        "status.words.join() == 'xy' && status.words.join('-') == 'x-y'",
        "[].join(',') == ''",
        "status.mixed.join(',') == ''",
        "status.n.replace('a', 'b') == ''",
        "status.phase.replace(1, 'b') == ''",
        "status.phase.split(1) == []",
        "status.n.join() == ''",
        "status.phase.join() == ''",
        "status.phase.replace('n', 'N', 'x') == ''",
        "[status.phase, status.n] == ['Running', 3]",
        "{'a': status.n, status.phase: 1}['Running'] == 1",
        "{'a': 1, 'a': 2}['a'] == 2",
        "status.phase + '!' == 'Running!' && [1] + [2] == [1, 2]",
        "strings.quote(status.phase) == '\"Running\"' && base64.encode(b'hi') == 'aGk='",
        "status.?missing.orValue('x') == 'x' && metadata.labels[?'app'].orValue('') == 'web'",
        "[?status.?missing, ?optional.of(1)] == [1]",
        "has(status.phase) && !has(status.nope)",
        "status.l[0] + status.n == 4",
        "status.phase.lowerAscii().upperAscii() == 'RUNNING'",
        "'%s-%d'.format([status.phase, status.n]) == 'Running-3'",
        "status.nope == 1",
        "status.phase.nope() == 1",
        "size(status.l.map(x, [x, x])) == 4",
        "type(status.l.map(x, x)) == list",
        "status.phase.matches('^R.*g$') && matches(status.phase, 'n+')",
        "status.phase.matches(1)",
        "status.phase.matches('(')",
    ];
    for src in cases {
        let ours = eval(src, &obj).map_err(|e| match e {
            CelError::Eval { message, .. } => message,
            other => other.to_string(),
        });
        let raw = raw_eval(src, &obj).map_err(|e| {
            if e.starts_with("not a bool") {
                format!("failed to evaluate CEL expression as boolean: '{src}'")
            } else {
                e
            }
        });
        assert_eq!(ours, raw, "{src}");
    }
}

#[test]
fn the_three_health_expressions_share_one_budget() {
    let check = CustomHealthCheck {
        api_version: "example.com/v1".into(),
        kind: Some("Widget".into()),
        current: "status.items.all(x, x == 1)".into(),
        in_progress: Some("status.items.exists(x, x == 2)".into()),
        failed: None,
    };
    let exprs = HealthExprs::compile(&[check])
        .unwrap()
        .with_limits(untimed());
    let ev = exprs.evaluator("example.com", "Widget").unwrap();
    let obj = |n: usize| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
                                "status": {"items": vec![1; n]}})
    };
    // 2 x 30000 iterations: within the limit.
    let (r, err) = ev.compute(&obj(30_000));
    assert_eq!(err, None);
    assert_eq!(r.status, kustomize_controller::ssa::Status::Current);
    // 2 x 60000: each expression alone is within the limit, both together are not.
    let (r, err) = ev.compute(&obj(60_000));
    assert_eq!(r.status, kustomize_controller::ssa::Status::Unknown);
    let err = err.unwrap();
    assert!(
        err == format!(
            "failed to evaluate the CEL expression 'status.items.all(x, x == 1)': cost limit \
             exceeded: more than {MAX_ITERATIONS} comprehension iterations"
        ),
        "{err}"
    );
}

#[test]
fn regex_patterns_are_bounded() {
    let obj = big_object();
    assert!(eval("status.big.matches('^a+$')", &obj).unwrap());
    assert!(eval("status.items.all(x, status.big.matches('a$'))", &obj).unwrap());
    let message = format!(
        "Error executing function 'matches': regular expression is {} bytes long, more than \
         the limit of {MAX_PATTERN_LENGTH}",
        (1 << 20) + 1
    );
    for src in [
        "!status.big.matches(status.big + 'b')",
        "!matches('a', status.big + 'b')",
    ] {
        let (r, took) = timed(src, &obj);
        assert_eq!(
            r.unwrap_err(),
            CelError::Eval {
                expr: src.into(),
                message: message.clone()
            }
        );
        assert!(took < Duration::from_secs(10), "{src}");
    }
    // A pattern written in the expression always fits.
    let long = format!(
        "'a'.matches('{}')",
        "a?".repeat(MAX_EXPRESSION_LENGTH / 2 - 10)
    );
    assert!(eval(&long, &obj).is_ok());
}

#[test]
fn messages_are_cut() {
    // The parser quotes the source once per error.
    let src = "(1 +) ".repeat(600);
    let Err(CelError::Parse { message, .. }) = parse_on_worker_stack(src) else {
        panic!("parsed");
    };
    assert!(
        message.len() <= 2051 && message.ends_with("..."),
        "{}",
        message.len()
    );
}
