//! Metrics: names and labels in the text output, and coverage of every controller metric the
//! Flux dashboards in `../shared/reference/flux/dashboards` query.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use rflux_common::runtime::metrics::{Metrics, ReconcileResult, exponential_buckets_range};

fn sample_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn buckets_range_matches_go() {
    let b = exponential_buckets_range(0.01, 1800.0, 10);
    assert_eq!(b.len(), 10);
    assert!((b[0] - 0.01).abs() < 1e-12);
    assert!((b[9] - 1800.0).abs() < 1e-6);
    let ratio = b[1] / b[0];
    for w in b.windows(2) {
        assert!((w[1] / w[0] - ratio).abs() < 1e-9);
    }
}

#[test]
fn controller_metrics_are_initialised_and_counted() {
    let m = Metrics::new().unwrap();
    let c = m.register_controller("kustomization", 4);
    let text = m.encode().unwrap();
    assert_eq!(
        sample_value(
            &text,
            "controller_runtime_max_concurrent_reconciles{controller=\"kustomization\"}"
        ),
        Some(4.0)
    );
    for r in ["success", "error", "requeue", "requeue_after"] {
        let s = format!(
            "controller_runtime_reconcile_total{{controller=\"kustomization\",result=\"{r}\"}}"
        );
        assert_eq!(sample_value(&text, &s), Some(0.0), "{s}");
    }
    let g = c.start();
    let text = m.encode().unwrap();
    assert_eq!(
        sample_value(
            &text,
            "controller_runtime_active_workers{controller=\"kustomization\"}"
        ),
        Some(1.0)
    );
    std::thread::sleep(Duration::from_millis(20));
    let text = m.encode().unwrap();
    let longest = sample_value(
        &text,
        "workqueue_longest_running_processor_seconds{controller=\"kustomization\",name=\"kustomization\"}",
    )
    .unwrap();
    assert!(longest >= 0.015, "{longest}");
    g.finish(ReconcileResult::Error);
    c.start().finish(ReconcileResult::RequeueAfter);
    c.record_retry();
    let text = m.encode().unwrap();
    assert_eq!(
        sample_value(
            &text,
            "controller_runtime_reconcile_total{controller=\"kustomization\",result=\"error\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample_value(
            &text,
            "controller_runtime_reconcile_total{controller=\"kustomization\",result=\"requeue_after\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample_value(
            &text,
            "controller_runtime_reconcile_errors_total{controller=\"kustomization\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample_value(
            &text,
            "controller_runtime_active_workers{controller=\"kustomization\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        sample_value(
            &text,
            "controller_runtime_reconcile_time_seconds_count{controller=\"kustomization\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        sample_value(
            &text,
            "workqueue_adds_total{controller=\"kustomization\",name=\"kustomization\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        sample_value(
            &text,
            "workqueue_retries_total{controller=\"kustomization\",name=\"kustomization\"}"
        ),
        Some(1.0)
    );
    // A guard dropped without finish() counts as a panic.
    drop(c.start());
    let text = m.encode().unwrap();
    assert_eq!(
        sample_value(
            &text,
            "controller_runtime_reconcile_panics_total{controller=\"kustomization\"}"
        ),
        Some(1.0)
    );
}

#[test]
fn gotk_object_metrics() {
    let m = Metrics::new().unwrap();
    m.record_duration(
        "GitRepository",
        "podinfo",
        "flux-system",
        Duration::from_millis(1500),
    );
    m.record_condition(
        "GitRepository",
        "podinfo",
        "flux-system",
        "Ready",
        "True",
        false,
    );
    m.record_suspend("GitRepository", "podinfo", "flux-system", true);
    let text = m.encode().unwrap();
    assert!(text.contains("# TYPE gotk_reconcile_duration_seconds histogram"));
    assert_eq!(
        sample_value(
            &text,
            "gotk_reconcile_duration_seconds_count{kind=\"GitRepository\",name=\"podinfo\",namespace=\"flux-system\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample_value(
            &text,
            "gotk_reconcile_condition{kind=\"GitRepository\",name=\"podinfo\",namespace=\"flux-system\",status=\"True\",type=\"Ready\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample_value(
            &text,
            "gotk_reconcile_condition{kind=\"GitRepository\",name=\"podinfo\",namespace=\"flux-system\",status=\"False\",type=\"Ready\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        sample_value(
            &text,
            "gotk_suspend_status{kind=\"GitRepository\",name=\"podinfo\",namespace=\"flux-system\"}"
        ),
        Some(1.0)
    );
    m.delete_object("GitRepository", "podinfo", "flux-system");
    let text = m.encode().unwrap();
    assert!(!text.contains("name=\"podinfo\""), "{text}");
}

#[test]
fn rest_client_and_leader_and_process_metrics() {
    let m = Metrics::new().unwrap();
    m.record_rest_request("200", "GET", "10.0.0.1:6443", Duration::from_millis(3));
    m.record_rest_request("200", "GET", "10.0.0.1:6443", Duration::from_millis(3));
    m.set_leader("kustomize-controller-leader-election", true);
    let text = m.encode().unwrap();
    assert_eq!(
        sample_value(
            &text,
            "rest_client_requests_total{code=\"200\",host=\"10.0.0.1:6443\",method=\"GET\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        sample_value(
            &text,
            "leader_election_master_status{name=\"kustomize-controller-leader-election\"}"
        ),
        Some(1.0)
    );
    if cfg!(target_os = "linux") {
        let rss = sample_value(&text, "process_resident_memory_bytes").unwrap();
        assert!(rss > 1_000_000.0, "rss {rss}");
        assert!(sample_value(&text, "process_cpu_seconds_total").unwrap() >= 0.0);
        assert!(sample_value(&text, "process_open_fds").unwrap() >= 3.0);
        assert!(sample_value(&text, "process_start_time_seconds").unwrap() > 1.6e9);
    }
}

fn shared_dir() -> Option<PathBuf> {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/flux/dashboards");
    p.is_dir().then_some(p)
}

const PROMQL_WORDS: &[&str] = &[
    "sum",
    "rate",
    "irate",
    "increase",
    "count",
    "max",
    "min",
    "avg",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "histogram_quantile",
    "label_values",
    "topk",
    "bottomk",
    "and",
    "or",
    "unless",
    "offset",
    "bool",
    "delta",
    "deriv",
    "abs",
    "clamp_min",
    "clamp_max",
    "avg_over_time",
    "max_over_time",
    "min_over_time",
    "sum_over_time",
    "vector",
    "scalar",
    "time",
    "absent",
    "sort",
    "sort_desc",
    "label_replace",
    "round",
    "ceil",
    "floor",
];

/// Extracts metric names from a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Grafana's `label_values(metric, label)`: only the first argument is a metric.
    let owned;
    let expr = match expr.trim().strip_prefix("label_values(") {
        Some(inner) => {
            owned = inner.split([',', ')']).next().unwrap_or("").to_string();
            owned.as_str()
        }
        None => expr,
    };
    // Drop string literals, label matchers, range selectors and grouping clauses.
    let mut cleaned = String::new();
    let mut depth_brace = 0;
    let mut depth_bracket = 0;
    let mut in_str = false;
    for ch in expr.chars() {
        match ch {
            '"' if depth_brace == 0 => in_str = !in_str,
            '{' if !in_str => depth_brace += 1,
            '}' if !in_str => depth_brace -= 1,
            '[' if !in_str && depth_brace == 0 => depth_bracket += 1,
            ']' if !in_str && depth_brace == 0 => depth_bracket -= 1,
            c if !in_str && depth_brace == 0 && depth_bracket == 0 => cleaned.push(c),
            _ => {}
        }
        if ch == '}' || ch == ']' {
            cleaned.push(' ');
        }
    }
    let re_by = regex_lite_by(&cleaned);
    let mut out = BTreeSet::new();
    for token in re_by
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|t| !t.is_empty())
    {
        let first = token.chars().next().unwrap();
        if first.is_ascii_digit() || PROMQL_WORDS.contains(&token) || token.starts_with('$') {
            continue;
        }
        if token.contains('_') {
            out.insert(token.to_string());
        }
    }
    out
}

/// Removes `by (...)` / `without (...)` label lists.
fn regex_lite_by(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(pos) = find_grouping(rest) {
        out.push_str(&rest[..pos]);
        let after = &rest[pos..];
        match after.find(')') {
            Some(end) => rest = &after[end + 1..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

fn find_grouping(s: &str) -> Option<usize> {
    for kw in ["by", "without"] {
        let mut from = 0;
        while let Some(i) = s[from..].find(kw) {
            let idx = from + i;
            let before_ok = idx == 0
                || !s.as_bytes()[idx - 1].is_ascii_alphanumeric() && s.as_bytes()[idx - 1] != b'_';
            let tail = s[idx + kw.len()..].trim_start();
            if before_ok && tail.starts_with('(') {
                return Some(idx);
            }
            from = idx + kw.len();
        }
    }
    None
}

fn collect_queries(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, val) in map {
                match (k.as_str(), val) {
                    ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                    ("query" | "definition", serde_json::Value::String(s)) if s.contains('_') => {
                        out.push(s.clone())
                    }
                    _ => collect_queries(val, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| collect_queries(i, out)),
        _ => {}
    }
}

/// Metrics that come from other exporters, not from the controllers.
const EXTERNAL: &[&str] = &[
    "gotk_resource_info",                 // kube-state-metrics custom resource state
    "container_memory_working_set_bytes", // cAdvisor
];

#[test]
fn extractor_sanity() {
    let names = metric_names(
        "sum(rate(gotk_reconcile_duration_seconds_sum{namespace=~\"$ns\",kind=~\"A|B\"}[5m])) by (kind, name)\n/\n sum(rate(x_count[5m])) by (kind)",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        vec![
            "gotk_reconcile_duration_seconds_sum".to_string(),
            "x_count".to_string()
        ]
    );
    let names = metric_names("label_values(gotk_resource_info, exported_namespace)");
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        vec!["gotk_resource_info".to_string()]
    );
}

#[test]
fn every_dashboard_controller_metric_is_exported() {
    let Some(dir) = shared_dir() else {
        eprintln!("skipped: ../shared/reference/flux/dashboards not found");
        return;
    };
    let mut queries = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        files += 1;
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        collect_queries(&json, &mut queries);
    }
    assert!(
        files >= 2,
        "expected the Flux dashboards in {}",
        dir.display()
    );
    let mut names = BTreeSet::new();
    for q in &queries {
        names.extend(metric_names(q));
    }
    // Our registry after both controllers registered and one object reconciled.
    let m = Metrics::new().unwrap();
    for c in ["kustomization", "gitrepository"] {
        m.register_controller(c, 2);
    }
    m.record_duration(
        "Kustomization",
        "apps",
        "flux-system",
        Duration::from_millis(10),
    );
    m.record_rest_request("200", "GET", "h", Duration::from_millis(1));
    let text = m.encode().unwrap();
    let exported: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let mut missing = Vec::new();
    let mut checked = Vec::new();
    for name in &names {
        if EXTERNAL.contains(&name.as_str()) {
            continue;
        }
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|b| exported.contains(b)))
            .unwrap_or(name.as_str());
        checked.push(base.to_string());
        if !exported.contains(base) {
            missing.push(name.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "dashboard metrics not exported: {missing:?}"
    );
    assert!(
        checked
            .iter()
            .any(|c| c == "controller_runtime_reconcile_total")
    );
    assert!(
        checked
            .iter()
            .any(|c| c == "gotk_reconcile_duration_seconds")
    );
    eprintln!("dashboard metrics checked: {checked:?}");
}
