//! Hostile substitution inputs: pattern operators over a large value are linear, every run is
//! bounded by its budget with a clear error, and `post_build` keeps the async runtime free.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kustomize_controller::substitute::{
    Budget, BudgetError, EnvsubstError, Limits, PostBuildError, SubstituteOptions,
    envsubst_map_with, post_build, substitute_with, substitute_with_budget,
};
use rflux_common::api::kustomization::PostBuild;
use serde_json::{Value, json};

const MIB: usize = 1 << 20;

fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Evaluates `expr` with `V=value`; returns the output, the work units and the time taken.
fn run(expr: &str, value: &str) -> (String, u64, Duration) {
    let mut budget = Budget::default();
    let start = Instant::now();
    let out = envsubst_map_with(expr, &vars(&[("V", value)]), true, &mut budget).unwrap();
    (out, budget.work(), start.elapsed())
}

#[test]
fn pattern_operators_on_a_1mib_value_are_linear() {
    let n = MIB;
    let no_b = "a".repeat(n);
    for expr in [
        "${V#*b}",
        "${V##*b}",
        "${V%b*}",
        "${V%%b*}",
        "${V#*a*b}",
        "${V%%b*a*}",
        "${V#*aab*}",
        "${V##a*b*a}",
        "${V/b/c}",
        "${V//b/c}",
    ] {
        let (out, work, took) = run(expr, &no_b);
        eprintln!("{expr} over {n} bytes: {took:?}, {work} work units");
        assert_eq!(out.len(), n, "{expr}: nothing matches, the value is kept");
        assert!(work <= 12 * n as u64, "{expr}: {work} work units");
        assert!(took < Duration::from_secs(10), "{expr}: {took:?}");
    }
    // Matches at the far end are found as quickly.
    let mut ends_in_b = no_b.clone();
    ends_in_b.push('b');
    for (expr, want) in [
        ("${V#*b}", 0),
        ("${V##*b}", 0),
        ("${V%b*}", n),
        ("${V%%a*}", 0),
        ("${V#a}", n),
        ("${V//a/}", 1),
    ] {
        let (out, work, took) = run(expr, &ends_in_b);
        eprintln!("{expr} over {} bytes: {took:?}, {work} work units", n + 1);
        assert_eq!(out.len(), want, "{expr}");
        assert!(work <= 12 * n as u64, "{expr}: {work} work units");
    }
}

#[test]
fn wildcard_segments_are_bounded_by_the_work_budget() {
    let value = "a".repeat(MIB);
    // `?` and classes: compared at each position, a few units each: within the default budget.
    let (out, work, took) = run("${V##*[b]}", &value);
    eprintln!("${{V##*[b]}} over 1 MiB: {took:?}, {work} work units");
    assert_eq!(out.len(), MIB);
    // A long wildcard segment needs more work than one object may spend: a clear error.
    let pattern = format!("*{}b", "?".repeat(100));
    let err = envsubst_map_with(
        &format!("${{V#{pattern}}}"),
        &vars(&[("V", &value)]),
        true,
        &mut Budget::default(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        EnvsubstError::Budget(BudgetError::ObjectWork { limit: 50_000_000 })
    );
    assert_eq!(
        err.to_string(),
        "substitution needs more than 50000000 steps for this object"
    );
}

#[test]
fn output_is_capped_before_it_is_built() {
    // `${V//${E}/${V}}` with an empty E puts V between every two characters: 1 TB from 1 MiB.
    let value = "a".repeat(MIB);
    let start = Instant::now();
    let err = envsubst_map_with(
        "${V//${E}/${V}}",
        &vars(&[("V", &value), ("E", "")]),
        true,
        &mut Budget::default(),
    )
    .unwrap_err();
    eprintln!("quadratic replacement refused in {:?}", start.elapsed());
    assert_eq!(
        err,
        EnvsubstError::Budget(BudgetError::ObjectBytes { limit: 16 * MIB })
    );
    // Many references to a large value in one object.
    let text = "${V}".repeat(17);
    let err = envsubst_map_with(&text, &vars(&[("V", &value)]), true, &mut Budget::default())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "substitution produces more than {} bytes for this object",
            16 * MIB
        )
    );
}

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

#[test]
fn run_limits_apply_across_objects_and_name_the_object() {
    let objects: Vec<Value> = (0..4)
        .map(|i| cm(&format!("c{i}"), json!({"k": "${V}"})))
        .collect();
    let limits = Limits {
        total_bytes: 3000,
        timeout: None,
        ..Limits::default()
    };
    let mut budget = Budget::new(limits);
    let err = substitute_with_budget(
        objects.clone(),
        &vars(&[("V", &"x".repeat(1000))]),
        SubstituteOptions::default(),
        &mut budget,
    )
    .unwrap_err();
    assert_eq!(err.id, "ConfigMap.v1.[noGrp]/c2");
    assert_eq!(
        err.to_string(),
        "post build failed for 'ConfigMap.v1.[noGrp]/c2': envsubst error: variable substitution \
         failed: substitution produces more than 3000 bytes in total"
    );
    // A run past its deadline stops at the next object.
    let mut budget = Budget::new(Limits {
        timeout: Some(Duration::ZERO),
        ..Limits::default()
    });
    let err = substitute_with_budget(
        objects,
        &vars(&[("V", "x")]),
        SubstituteOptions::default(),
        &mut budget,
    )
    .unwrap_err();
    assert_eq!(
        err.source,
        PostBuildError::Eval(EnvsubstError::Budget(BudgetError::Timeout {
            limit: Duration::ZERO
        }))
    );
    assert!(
        err.to_string()
            .ends_with("substitution did not finish within 0s"),
        "{err}"
    );
}

/// A client for an address nothing listens on: `post_build` with inline variables only never
/// sends a request.
fn offline_client() -> kube::Client {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

/// Runs `work` while a ticker task on the same runtime ticks every 5 ms; returns the ticks
/// seen, the longest gap between two ticks, and how long `work` took.
async fn with_ticker<T>(
    work: impl std::future::Future<Output = T>,
) -> (T, u64, Duration, Duration) {
    let running = Arc::new(AtomicBool::new(true));
    let ticks = Arc::new(AtomicU64::new(0));
    let max_gap_us = Arc::new(AtomicU64::new(0));
    let ticker = tokio::spawn({
        let (running, ticks, max_gap_us) = (running.clone(), ticks.clone(), max_gap_us.clone());
        async move {
            let mut last = Instant::now();
            while running.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(5)).await;
                max_gap_us.fetch_max(last.elapsed().as_micros() as u64, Ordering::Relaxed);
                ticks.fetch_add(1, Ordering::Relaxed);
                last = Instant::now();
            }
        }
    });
    // Let the ticker start.
    tokio::time::sleep(Duration::from_millis(20)).await;
    ticks.store(0, Ordering::Relaxed);
    max_gap_us.store(0, Ordering::Relaxed);
    let start = Instant::now();
    let out = work.await;
    let took = start.elapsed();
    let (n, gap) = (
        ticks.load(Ordering::Relaxed),
        max_gap_us.load(Ordering::Relaxed),
    );
    running.store(false, Ordering::Relaxed);
    ticker.await.unwrap();
    (out, n, Duration::from_micros(gap), took)
}

/// While `post_build` substitutes a heavy set of objects, a ticker on the same
/// single-threaded runtime keeps ticking: the CPU work runs on a blocking thread. The control
/// run does the same work inline on the runtime, as `post_build` used to: the ticker stalls.
#[tokio::test(flavor = "current_thread")]
async fn post_build_keeps_the_runtime_responsive() {
    let value = "a".repeat(MIB / 4);
    let objects: Vec<Value> = (0..8)
        .map(|i| {
            cm(
                &format!("c{i}"),
                json!({"k": "${V##*b}${V%%b*}", "l": "${V:0:10}"}),
            )
        })
        .collect();
    let inline_vars = BTreeMap::from([("V".to_string(), value)]);
    let pb = PostBuild {
        substitute: Some(inline_vars.clone()),
        ..PostBuild::default()
    };

    let (inline_out, inline_ticks, inline_gap, inline_took) = with_ticker(async {
        substitute_with(objects.clone(), &inline_vars, SubstituteOptions::default())
    })
    .await;
    eprintln!(
        "inline: {inline_took:?}; the ticker ticked {inline_ticks} times, longest gap {inline_gap:?}"
    );
    assert!(
        inline_ticks <= 1,
        "control: the inline run starves the ticker"
    );

    let client = offline_client();
    let (out, ticks, gap, took) =
        with_ticker(post_build(&client, "ns", Some(&pb), objects, true)).await;
    eprintln!("post_build: {took:?}; the ticker ticked {ticks} times, longest gap {gap:?}");
    let out = out.unwrap();
    assert_eq!(out, inline_out.unwrap());
    assert_eq!(out.len(), 8);
    assert_eq!(out[0]["data"]["l"], "aaaaaaaaaa");
    assert!(
        out[0]["data"]["k"]
            .as_str()
            .is_some_and(|k| k.len() == MIB / 2),
        "both halves kept"
    );
    assert!(
        ticks >= 2,
        "the ticker ran during post_build: {ticks} ticks in {took:?}"
    );
    assert!(
        gap < Duration::from_secs(2) || gap < took / 2,
        "longest gap {gap:?} during a {took:?} post_build"
    );
}
