//! Our Grafana dashboards (`manifests/monitoring/dashboards/*.json`) against real metrics.
//!
//! - `our_dashboards_ask_what_fluxs_ask`: every query of Flux's dashboards
//!   (`../shared/reference/flux/dashboards`) about the kinds rflux reconciles is in ours,
//!   verbatim; every query of ours is one of Flux's, or Flux's Helm reconcile-time query asked
//!   about our two controllers. Skipped when `../shared` is absent.
//! - `every_dashboard_query_returns_series`: both controller processes reconcile a GitRepository
//!   and a Kustomization (plus a GitRepository whose Secret is missing and a Kustomization whose
//!   source is missing, so the failure panels have something to show) on the shared control
//!   plane, isolated by a watch label; a real Prometheus server scrapes both `/metrics` on
//!   loopback every second, with the target labels the PodMonitor gives in a cluster
//!   (`namespace`, `pod`, `container`, `endpoint`). Every dashboard variable and every query on
//!   controller metrics (`gotk_reconcile_*`, `controller_runtime_*`, `workqueue_*`,
//!   `rest_client_*`, `process_*`, `go_*`) is evaluated through Prometheus' HTTP API with the
//!   variables replaced by concrete values, and must return at least one series, each with a
//!   number (not NaN: every object reconciles every 3 s, so every rate has increases). Queries
//!   on metrics other programs export are listed and not evaluated:
//!   `gotk_resource_info` comes from kube-state-metrics (configured by
//!   `manifests/monitoring/kube-state-metrics/values.yaml`), `container_*` from the kubelet's
//!   cAdvisor.
//!
//! Needs the `prometheus` binary (Debian package `prometheus`; `make deps` installs it). When it
//! is missing the test fails under CI (`CI` set) and is skipped with a note elsewhere.
//! Needs the controller binaries: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::api::Api;
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::{ControlPlane, GitServer, repo_root};
use serde_json::{Value, json};
use support::lock_crds_and_install;
use support::procs::{ControllerOptions, Controllers, apply_value, http_get, ks_ready, wait_for};

/// Namespace and pod names the scrape targets get, as the PodMonitor would give them.
const OPERATOR_NS: &str = "flux-system";
const SOURCE_POD: &str = "source-controller-6c9d8f7b5d-q2x7k";
const KUSTOMIZE_POD: &str = "kustomize-controller-7f6b9c8d4-w5z2m";

fn dashboard_files() -> Vec<(String, Value)> {
    let dir = repo_root().join("manifests/monitoring/dashboards");
    let mut out = Vec::new();
    for name in ["cluster.json", "control-plane.json"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        out.push((name.to_string(), serde_json::from_str(&text).unwrap()));
    }
    out
}

/// `(panel title, expr)` of every target, rows' nested panels included.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str().filter(|e| !e.trim().is_empty()) {
                    out.push((p["title"].as_str().unwrap_or("").to_string(), e.to_string()));
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// Metric names in a PromQL expression: identifiers directly followed by a `{` selector.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let bytes = expr.as_bytes();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b':')
            {
                i += 1;
            }
            let preceded_by_quote = start > 0 && bytes[start - 1] == b'"';
            if !preceded_by_quote && bytes.get(i) == Some(&b'{') {
                names.insert(expr[start..i].to_string());
            }
        } else if c == b'"' {
            // Skip string literals (label values).
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += 1;
            }
            i += 1;
        } else {
            i += 1;
        }
    }
    names
}

/// Who exports a metric: `None` for the controllers, otherwise the program that does.
fn exported_elsewhere(metric: &str) -> Option<&'static str> {
    if metric == "gotk_resource_info" {
        Some("kube-state-metrics (custom resource state)")
    } else if metric.starts_with("container_") {
        Some("the kubelet's cAdvisor")
    } else {
        None
    }
}

fn is_controller_metric(metric: &str) -> bool {
    [
        "gotk_",
        "controller_runtime_",
        "workqueue_",
        "rest_client_",
        "process_",
        "go_",
    ]
    .iter()
    .any(|p| metric.starts_with(p))
        && exported_elsewhere(metric).is_none()
}

#[test]
fn dashboard_queries_are_classified() {
    // Every metric our dashboards query is either a controller metric or named as external.
    for (file, dash) in dashboard_files() {
        let qs = queries(&dash);
        assert!(qs.len() >= 10, "{file}: only {} queries", qs.len());
        for (title, expr) in qs {
            let names = metric_names(&expr);
            assert!(!names.is_empty(), "{file} {title}: no metric in {expr}");
            for m in names {
                assert!(
                    is_controller_metric(&m) || exported_elsewhere(&m).is_some(),
                    "{file} {title}: unknown metric {m}"
                );
            }
        }
    }
    assert_eq!(
        metric_names(r#"sum(rate(a_b{x="c_d{"}[1m])) / go_info{} + foo"#),
        BTreeSet::from(["a_b".to_string(), "go_info".to_string()])
    );
}

#[test]
fn our_dashboards_ask_what_fluxs_ask() {
    let flux_dir = repo_root().join("../shared/reference/flux/dashboards");
    if !flux_dir.is_dir() {
        eprintln!(
            "skipped: {} is absent (the comparison with Flux's dashboards needs ../shared)",
            flux_dir.display()
        );
        return;
    }
    // Controllers of kinds rflux does not reconcile: Flux's panels about them are left out.
    let foreign = [
        "ocirepository",
        "helmrepository",
        "bucket",
        "helmchart",
        "helmrelease",
    ];
    for (file, ours) in dashboard_files() {
        let text = std::fs::read_to_string(flux_dir.join(&file)).unwrap();
        let flux: Value = serde_json::from_str(&text).unwrap();
        let flux_q: BTreeSet<String> = queries(&flux).into_iter().map(|(_, e)| e).collect();
        let our_q: BTreeSet<String> = queries(&ours).into_iter().map(|(_, e)| e).collect();
        for e in &flux_q {
            let about_foreign = foreign
                .iter()
                .any(|c| e.contains(&format!("controller=\"{c}\"")));
            assert!(
                about_foreign || our_q.contains(e),
                "{file}: Flux's query is missing from ours:\n{e}"
            );
        }
        for e in &our_q {
            let as_helm = e
                .replace("controller=\"kustomization\"", "controller=\"helmrelease\"")
                .replace("controller=\"gitrepository\"", "controller=\"helmrelease\"");
            assert!(
                flux_q.contains(e)
                    || (e.starts_with("histogram_quantile") && flux_q.contains(&as_helm)),
                "{file}: our query is not one of Flux's:\n{e}"
            );
        }
        // The variables are Flux's too (same names and queries).
        let vars = |d: &Value| -> BTreeMap<String, String> {
            d["templating"]["list"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|v| v["type"] == "query")
                .map(|v| {
                    (
                        v["name"].as_str().unwrap().to_string(),
                        v["query"]["query"].as_str().unwrap().replace(", ", ","),
                    )
                })
                .collect()
        };
        assert_eq!(vars(&ours), vars(&flux), "{file}: variables");
        eprintln!(
            "{file}: {} of Flux's {} queries, {} of ours",
            flux_q.intersection(&our_q).count(),
            flux_q.len(),
            our_q.len()
        );
    }
}

fn prometheus_binary() -> Option<PathBuf> {
    let from_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("prometheus"))
            .find(|p| p.is_file())
    });
    from_path.or_else(|| {
        let p = PathBuf::from("/usr/bin/prometheus");
        p.is_file().then_some(p)
    })
}

/// A Prometheus server on loopback; killed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    async fn start(bin: &Path, source: SocketAddr, kustomize: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let target = |addr: SocketAddr, pod: &str| {
            format!(
                "      - targets: [\"{addr}\"]\n        labels:\n          namespace: {OPERATOR_NS}\n          pod: {pod}\n          container: manager\n          endpoint: http-prom\n"
            )
        };
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: {OPERATOR_NS}/{OPERATOR_NS}\n    metrics_path: /metrics\n    static_configs:\n{}{}",
            target(source, SOURCE_POD),
            target(kustomize, KUSTOMIZE_POD)
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], rflux_e2e::free_port().unwrap()));
        let log = dir.path().join("prometheus.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let mut p = Prometheus {
            child,
            addr,
            log,
            _dir: dir,
        };
        let ready = wait_for(Duration::from_secs(30), "prometheus /-/ready", || async {
            Ok(matches!(http_get(addr, "/-/ready").await, Some((200, _))).then_some(()))
        })
        .await;
        if let Err(e) = ready {
            let status = p.child.try_wait();
            panic!("{e:#} (process: {status:?})\n{}", p.log_text());
        }
        p
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET an API path; the parsed `data` of a successful answer.
    async fn api(&self, path_and_query: &str) -> anyhow::Result<Value> {
        let (code, body) = http_get(self.addr, path_and_query)
            .await
            .ok_or_else(|| anyhow::anyhow!("no answer from prometheus"))?;
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| anyhow::anyhow!("HTTP {code}, not JSON ({e}): {body}"))?;
        if v["status"] != "success" {
            anyhow::bail!("HTTP {code}: {body}");
        }
        Ok(v["data"].clone())
    }

    /// Instant query: the result vector (or scalar as a one-element list).
    async fn query(&self, expr: &str) -> anyhow::Result<Vec<Value>> {
        let data = self
            .api(&format!("/api/v1/query?query={}", encode(expr)))
            .await?;
        Ok(match data["resultType"].as_str() {
            Some("vector") | Some("matrix") => {
                data["result"].as_array().cloned().unwrap_or_default()
            }
            Some("scalar") => vec![json!({"metric": {}, "value": data["result"]})],
            _ => Vec::new(),
        })
    }
}

/// Percent-encodes a query-string value.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The sample value of an instant-vector element, when it is a number.
fn finite_value(series: &Value) -> Option<f64> {
    series["value"][1]
        .as_str()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite())
}

/// Evaluates a Grafana query variable the way Grafana does, through Prometheus' API.
/// `label_values(metric, label)` lists the label's values; a bare metric query lists its series,
/// and the variable's regex (`/.*label="([^"]*).*/`) picks one label from each.
async fn variable_values(prom: &Prometheus, var: &Value) -> anyhow::Result<BTreeSet<String>> {
    let query = var["query"]["query"].as_str().unwrap_or("").trim();
    let (metric, label) = if let Some(args) = query
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))
    {
        let (m, l) = args
            .split_once(',')
            .ok_or_else(|| anyhow::anyhow!("label_values without a label: {query}"))?;
        (m.trim().to_string(), l.trim().to_string())
    } else {
        let regex = var["regex"].as_str().unwrap_or("");
        let label = regex
            .split_once("=\"(")
            .map(|(before, _)| {
                before
                    .trim_end()
                    .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .filter(|l| !l.is_empty())
            .ok_or_else(|| anyhow::anyhow!("cannot read the label from regex {regex:?}"))?;
        (query.to_string(), label)
    };
    let data = prom
        .api(&format!("/api/v1/series?match[]={}", encode(&metric)))
        .await?;
    Ok(data
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s[&label].as_str().map(str::to_string))
        .collect())
}

fn git_repository(ns: &str, name: &str, url: &str, extra: Value) -> Value {
    let mut obj = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"url": url, "interval": "3s", "timeout": "20s", "ref": {"branch": "main"}}
    });
    if let (Some(spec), Some(e)) = (obj["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(e.clone());
    }
    obj
}

fn kustomization(ns: &str, name: &str, source: &str) -> Value {
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"interval": "3s", "retryInterval": "3s", "timeout": "30s", "prune": true,
                 "path": "./deploy", "targetNamespace": ns,
                 "sourceRef": {"kind": "GitRepository", "name": source}}
    })
}

#[tokio::test]
async fn every_dashboard_query_returns_series() {
    let Some(prom_bin) = prometheus_binary() else {
        let msg = "the prometheus binary is not installed (Debian package `prometheus`: `make deps` \
                   or `apt-get install -y prometheus`)";
        if std::env::var_os("CI").is_some() {
            panic!("{msg}; CI must install it");
        }
        eprintln!("skipped: {msg}");
        return;
    };
    let cp = ControlPlane::shared().await.unwrap();
    let client = cp.client().await.unwrap();
    let _crd_lock = lock_crds_and_install(&client).await;
    let git = GitServer::shared().await.unwrap();
    let ns = cp.create_namespace("dashboards").await.unwrap();

    let repo = git.create_repo("dashboards").unwrap();
    repo.write(
        "deploy/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dashboards\ndata:\n  k: v\n",
    )
    .unwrap();
    repo.commit("dashboards fixture").unwrap();
    repo.push("main").unwrap();
    let url = git.http_url(repo.name());

    let mut ctl = Controllers::start(
        cp,
        ControllerOptions {
            runtime_namespace: ns.clone(),
            ..ControllerOptions::default()
        },
    )
    .await
    .unwrap();
    let prom = Prometheus::start(
        &prom_bin,
        ctl.source_metrics_addr(),
        ctl.kustomize_metrics_addr(),
    )
    .await;
    let started = Instant::now();

    let mut objects = vec![
        git_repository(&ns, "app", &url, json!({})),
        // Its Secret does not exist: a failing source, and 404s in rest_client_requests_total.
        git_repository(
            &ns,
            "no-secret",
            &url,
            json!({"secretRef": {"name": "does-not-exist"}}),
        ),
        kustomization(&ns, "app", "app"),
        // Its source does not exist: a failing reconciler.
        kustomization(&ns, "no-source", "does-not-exist"),
    ];
    for o in &mut objects {
        ctl.label_object(o);
        apply_value(&client, o, "rflux-e2e-dashboards")
            .await
            .unwrap();
    }
    let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), &ns);
    let git_api: Api<GitRepository> = Api::namespaced(client.clone(), &ns);
    let ready = wait_for(
        Duration::from_secs(90),
        "Kustomization app Ready",
        || async { Ok(ks_api.get("app").await.map(|k| ks_ready(&k))?.then_some(())) },
    )
    .await;
    if let Err(e) = ready {
        let ks = ks_api.get("app").await.ok().map(|k| k.status);
        let gr = git_api.get("app").await.ok().map(|g| g.status);
        panic!(
            "{e:#}\nkustomization: {}\ngitrepository: {}\n{}",
            serde_json::to_string(&ks).unwrap(),
            serde_json::to_string(&gr).unwrap(),
            ctl.log_tails(30)
        );
    }
    eprintln!(
        "Kustomization Ready {:?} after the objects were applied",
        started.elapsed()
    );

    // Both targets are scraped.
    wait_for(
        Duration::from_secs(30),
        "both scrape targets up",
        || async {
            let up = prom.query("up == 1").await?;
            Ok((up.len() == 2).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", prom.log_text()));

    // Variables first: their values are what the queries get.
    let mut values: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut report = Vec::new();
    for (file, dash) in dashboard_files() {
        for var in dash["templating"]["list"].as_array().unwrap() {
            if var["type"] != "query" {
                continue;
            }
            let name = var["name"].as_str().unwrap().to_string();
            let query = var["query"]["query"].as_str().unwrap_or("");
            let metric = query
                .strip_prefix("label_values(")
                .and_then(|r| r.split(',').next())
                .unwrap_or(query)
                .trim();
            if let Some(who) = exported_elsewhere(metric) {
                // The value kube-state-metrics would list: the test namespace.
                report.push(format!(
                    "{file} ${name}: from {who}, not evaluated; using {ns}"
                ));
                values.insert((file.clone(), name), ns.clone());
                continue;
            }
            let got = wait_for(Duration::from_secs(30), &format!("${name}"), || async {
                let v = variable_values(&prom, var).await?;
                Ok(v.contains(OPERATOR_NS).then_some(v))
            })
            .await
            .unwrap_or_else(|e| panic!("{file} variable ${name} ({query}): {e:#}"));
            report.push(format!("{file} ${name} = {got:?}"));
            values.insert((file.clone(), name), OPERATOR_NS.to_string());
        }
    }

    // Then every query on controller metrics, until each has a number (rates need a few
    // scrapes and a few reconciles).
    let mut pending: Vec<(String, String, String)> = Vec::new();
    for (file, dash) in dashboard_files() {
        for (title, expr) in queries(&dash) {
            let names = metric_names(&expr);
            if let Some(who) = names.iter().find_map(|m| exported_elsewhere(m)) {
                report.push(format!("{file} {title}: from {who}, not evaluated: {expr}"));
                continue;
            }
            // Longest names first, so `$namespace` never eats part of a longer name.
            let mut vars: Vec<(&(String, String), &String)> =
                values.iter().filter(|((f, _), _)| *f == file).collect();
            vars.sort_by_key(|((_, n), _)| std::cmp::Reverse(n.len()));
            let mut concrete = expr.clone();
            for ((_, name), value) in vars {
                concrete = concrete.replace(&format!("${name}"), value);
            }
            assert!(!concrete.contains('$'), "unreplaced variable in {concrete}");
            pending.push((file.clone(), title, concrete));
        }
    }
    let total = pending.len();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let mut still = Vec::new();
        for (file, title, expr) in pending {
            let res = prom.query(&expr).await;
            match res {
                // Every object reconciles every few seconds here, so no series may be NaN.
                Ok(series)
                    if !series.is_empty() && series.iter().all(|s| finite_value(s).is_some()) =>
                {
                    let shown: Vec<String> = series
                        .iter()
                        .take(3)
                        .map(|s| format!("{} {}", s["metric"], s["value"][1]))
                        .collect();
                    report.push(format!(
                        "{file} {title}: {} series, {shown:?}",
                        series.len()
                    ));
                }
                other => {
                    last.insert(expr.clone(), format!("{other:?}"));
                    still.push((file, title, expr));
                }
            }
        }
        pending = still;
        if pending.is_empty() || Instant::now() > deadline {
            break;
        }
        ctl.check_alive().unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    for line in &report {
        eprintln!("{line}");
    }
    if !pending.is_empty() {
        let failed: Vec<String> = pending
            .iter()
            .map(|(f, t, e)| format!("{f} {t}: {e}\n    last answer: {}", last[e]))
            .collect();
        let scraped = prom
            .query("count by (__name__) ({job=~\".+\"})")
            .await
            .map(|v| v.len())
            .unwrap_or(0);
        panic!(
            "{} of {total} dashboard queries returned no series, or a NaN ({scraped} metric names scraped):\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
    eprintln!(
        "all {total} controller-metric queries returned series, {:?} after the objects were applied",
        started.elapsed()
    );
}
