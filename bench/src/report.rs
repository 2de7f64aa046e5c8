//! One run's measurements (a JSON line in the results file) and the side-by-side table.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::stats::{cell, median, range, ratio_text};

/// Per-controller figures (source-controller, kustomize-controller).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Pair {
    /// source-controller.
    pub sc: f64,
    /// kustomize-controller.
    pub kc: f64,
}

impl Pair {
    /// Both controllers together.
    pub fn sum(&self) -> f64 {
        self.sc + self.kc
    }
}

/// Everything one run measured. Phases that did not run leave `None`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunResult {
    /// `ours`, `flux` or `floor`.
    pub implementation: String,
    /// The invocation of `scripts/bench-fleet.sh` this run belongs to (its start time).
    #[serde(default)]
    pub session: String,
    /// Repetition (1, 2, …): the implementations' runs of one repetition are compared.
    #[serde(default)]
    pub rep: usize,
    /// 1-minute load average before the run and after it.
    #[serde(default)]
    pub load: Option<(f64, f64)>,
    /// Label of the controller settings (`equal`, `best`, …).
    pub profile: String,
    /// `a` (one GitRepository per Kustomization) or `b` (one shared).
    pub variant: String,
    /// Number of Kustomizations.
    pub n: usize,
    /// `--concurrent` of both controllers.
    pub concurrent: u16,
    /// Extra controller flags (source, kustomize).
    pub extra_args: (String, String),
    /// Seconds from the start of the apply burst until all N are Ready.
    pub fleet_secs: Option<f64>,
    /// Ready-time percentiles (p50, p90) in seconds from the burst start.
    pub fleet_p50_p90: Option<(f64, f64)>,
    /// Kustomizations that were not Ready at the timeout.
    pub fleet_not_ready: usize,
    /// CPU seconds the controllers used during the fleet phase.
    pub fleet_cpu_secs: Option<Pair>,
    /// Peak RSS (VmHWM) in MiB, read before the processes stop.
    pub peak_rss_mib: Option<Pair>,
    /// RSS in MiB after all were Ready and a settle period.
    pub steady_rss_mib: Option<Pair>,
    /// Idle CPU seconds per minute with the fleet in place.
    pub idle_cpu_per_min: Option<Pair>,
    /// Idle window length in seconds.
    pub idle_window_secs: Option<f64>,
    /// Seconds from the push (+ reconcile request of the GitRepositories) until all N applied it.
    pub change_secs: Option<f64>,
    /// Seconds from the drift patch until the field was reverted (None: not within the limit).
    pub drift_secs: Option<f64>,
    /// The Kustomization interval during the drift phase.
    pub drift_interval_secs: Option<f64>,
    /// Apiserver requests per no-op reconcile of the 100-object Kustomization (median).
    pub api_requests_per_noop: Option<f64>,
    /// The same, broken down by verb and resource (from the median window).
    pub api_breakdown: BTreeMap<String, f64>,
    /// Apiserver requests of the fleet phase per Kustomization, by verb and resource, from the
    /// burst until 5 s after the last Ready ([`per_kustomization`]).
    #[serde(default)]
    pub fleet_requests: BTreeMap<String, f64>,
    /// Free-form notes (timeouts, errors of a phase).
    pub notes: Vec<String>,
}

/// Reads JSON lines, skipping blank ones.
pub fn parse_results(text: &str) -> Result<Vec<RunResult>, serde_json::Error> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect()
}

type Getter = fn(&RunResult) -> Option<f64>;

/// The table's rows: label, value, decimals.
const ROWS: &[(&str, Getter, usize)] = &[
    ("fleet: all Ready (s)", |r| r.fleet_secs, 1),
    ("fleet: p50 Ready (s)", |r| r.fleet_p50_p90.map(|p| p.0), 1),
    ("fleet: p90 Ready (s)", |r| r.fleet_p50_p90.map(|p| p.1), 1),
    (
        "fleet: CPU s (both controllers)",
        |r| r.fleet_cpu_secs.as_ref().map(Pair::sum),
        1,
    ),
    (
        "peak RSS MiB (both)",
        |r| r.peak_rss_mib.as_ref().map(Pair::sum),
        1,
    ),
    (
        "peak RSS MiB source-controller",
        |r| r.peak_rss_mib.as_ref().map(|p| p.sc),
        1,
    ),
    (
        "peak RSS MiB kustomize-controller",
        |r| r.peak_rss_mib.as_ref().map(|p| p.kc),
        1,
    ),
    (
        "steady RSS MiB (both)",
        |r| r.steady_rss_mib.as_ref().map(Pair::sum),
        1,
    ),
    ("change propagation (s)", |r| r.change_secs, 1),
    ("drift reverted after (s)", |r| r.drift_secs, 1),
    (
        "API requests per no-op reconcile (100 objects)",
        |r| r.api_requests_per_noop,
        1,
    ),
    (
        "  of which for the controllers' resources",
        |r| controller_requests(&r.api_breakdown),
        1,
    ),
    (
        "fleet: apiserver requests per new Kustomization",
        |r| sum_where(&r.fleet_requests, |_| true),
        1,
    ),
    (
        "  of which Kustomization and applied-object writes",
        |r| sum_where(&r.fleet_requests, is_kustomization_work),
        1,
    ),
    (
        "  of which events",
        |r| sum_where(&r.fleet_requests, |k| k.contains("events")),
        1,
    ),
    (
        "idle CPU s/min (both)",
        |r| r.idle_cpu_per_min.as_ref().map(Pair::sum),
        3,
    ),
];

/// The implementations a table compares, in column order.
const IMPLS: [&str; 3] = ["ours", "flux", "floor"];

/// The runs of one repetition, by implementation, and why they may not be compared.
struct Rep<'a> {
    rep: usize,
    runs: [Option<&'a RunResult>; 3],
    refused: Vec<String>,
}

/// Groups one session's runs by repetition; a repetition is refused when ours or Flux is
/// missing (when both ran in the session), or when the 1-minute load before its runs differs by
/// more than `tolerance` between them (the load after a run is mostly the run's own work: it is
/// shown, not compared; `scripts/bench-fleet.sh` lets the machine settle before each run).
fn repetitions<'a>(runs: &[&'a RunResult], tolerance: f64) -> Vec<Rep<'a>> {
    let mut reps: BTreeMap<usize, [Option<&RunResult>; 3]> = BTreeMap::new();
    for r in runs {
        if let Some(i) = IMPLS.iter().position(|x| *x == r.implementation) {
            reps.entry(r.rep).or_default()[i] = Some(r);
        }
    }
    let ran = |i: usize| runs.iter().any(|r| r.implementation == IMPLS[i]);
    reps.into_iter()
        .map(|(rep, runs)| {
            let mut refused = Vec::new();
            for i in 0..2 {
                if ran(i) && runs[i].is_none() {
                    refused.push(format!("no {} run", IMPLS[i]));
                }
            }
            let loads: Vec<(f64, f64)> = runs.iter().flatten().filter_map(|r| r.load).collect();
            let spread = |f: fn(&(f64, f64)) -> f64| {
                let xs: Vec<f64> = loads.iter().map(f).collect();
                let (lo, hi) = range(&xs);
                hi - lo
            };
            let before = spread(|l| l.0);
            if loads.len() > 1 && (before > tolerance || before.is_nan()) {
                let text: Vec<String> = runs
                    .iter()
                    .flatten()
                    .filter_map(|r| {
                        r.load
                            .map(|l| format!("{} {:.2}/{:.2}", r.implementation, l.0, l.1))
                    })
                    .collect();
                refused.push(format!(
                    "load before the runs differs by more than {tolerance} (before/after): {}",
                    text.join(", ")
                ));
            }
            Rep { rep, runs, refused }
        })
        .collect()
}

/// Markdown tables, one per (N, variant, settings), of the latest session of each: every
/// figure as `median (min–max)` over the accepted repetitions, for ours, Flux and the apiserver
/// floor, with the ratios `Flux ÷ ours`, `ours ÷ floor` and `Flux ÷ floor` of the medians.
pub fn table(results: &[RunResult], tolerance: f64) -> String {
    let mut groups: BTreeMap<(usize, String, String), Vec<&RunResult>> = BTreeMap::new();
    for r in results {
        groups
            .entry((r.n, r.variant.clone(), r.profile.clone()))
            .or_default()
            .push(r);
    }
    let mut out = String::new();
    for ((n, variant, profile), runs) in groups {
        let latest = runs.iter().map(|r| r.session.as_str()).max().unwrap_or("");
        let session: Vec<&RunResult> = runs.into_iter().filter(|r| r.session == latest).collect();
        let reps = repetitions(&session, tolerance);
        let accepted: Vec<&Rep> = reps.iter().filter(|r| r.refused.is_empty()).collect();
        out.push_str(&format!(
            "\n### N={n}, variant {}, settings: {profile}\n\n",
            variant.to_uppercase()
        ));
        if !latest.is_empty() {
            out.push_str(&format!("Session {latest}. "));
        }
        let mut flags = Vec::new();
        for (i, who) in ["ours", "Flux", "floor"].iter().enumerate() {
            let Some(r) = session.iter().find(|r| r.implementation == IMPLS[i]) else {
                continue;
            };
            let mut s = format!("{who}: `--concurrent={}`", r.concurrent);
            if i < 2 && !r.extra_args.0.is_empty() {
                s.push_str(&format!(", source `{}`", r.extra_args.0));
            }
            if i < 2 && !r.extra_args.1.is_empty() {
                s.push_str(&format!(", kustomize `{}`", r.extra_args.1));
            }
            flags.push(s);
        }
        out.push_str(&flags.join("; "));
        out.push_str(&format!(
            "\n\nMedian (min–max) over {} accepted repetition(s) of {}.",
            accepted.len(),
            reps.len()
        ));
        let used: Vec<&Rep> = if accepted.is_empty() {
            out.push_str(" **No repetition was accepted: these figures are not publishable.**");
            reps.iter().collect()
        } else {
            accepted
        };
        for r in reps.iter().filter(|r| !r.refused.is_empty()) {
            out.push_str(&format!(
                "\nRepetition {} refused: {}.",
                r.rep,
                r.refused.join("; ")
            ));
        }
        let with_floor = used.iter().any(|r| r.runs[2].is_some());
        out.push_str("\n\n| figure | ours | Flux |");
        out.push_str(if with_floor {
            " floor | Flux ÷ ours | ours ÷ floor | Flux ÷ floor |\n|---|---:|---:|---:|---:|---:|---:|\n"
        } else {
            " Flux ÷ ours |\n|---|---:|---:|---:|\n"
        });
        for (label, get, digits) in ROWS {
            let vals = |i: usize| -> Vec<f64> {
                used.iter()
                    .filter_map(|r| r.runs[i].and_then(get))
                    .collect()
            };
            let (o, f, fl) = (vals(0), vals(1), vals(2));
            if o.is_empty() && f.is_empty() && fl.is_empty() {
                continue;
            }
            let (mo, mf, mfl) = (median(&o), median(&f), median(&fl));
            out.push_str(&format!(
                "| {label} | {} | {} |",
                cell(&o, *digits),
                cell(&f, *digits)
            ));
            if with_floor {
                out.push_str(&format!(
                    " {} | {} | {} | {} |\n",
                    cell(&fl, *digits),
                    ratio_text(mo, mf),
                    ratio_text(mfl, mo),
                    ratio_text(mfl, mf)
                ));
            } else {
                out.push_str(&format!(" {} |\n", ratio_text(mo, mf)));
            }
        }
        out.push_str("\n| rep | implementation | load before/after (1 min) |\n|---:|---|---|\n");
        for rep in &reps {
            for r in rep.runs.iter().flatten() {
                let load = r.load.map_or_else(
                    || "not recorded".to_string(),
                    |l| format!("{:.2} / {:.2}", l.0, l.1),
                );
                out.push_str(&format!(
                    "| {} | {} | {load} |\n",
                    rep.rep, r.implementation
                ));
            }
        }
        for r in session.iter() {
            let who = r.implementation.as_str();
            if let Some(i) = r.drift_interval_secs {
                out.push_str(&format!(
                    "\n{who} (rep {}): drift phase ran with interval {i:.0}s.",
                    r.rep
                ));
            }
            if r.fleet_not_ready > 0 {
                out.push_str(&format!(
                    "\n{who} (rep {}): {} Kustomizations not Ready at the timeout.",
                    r.rep, r.fleet_not_ready
                ));
            }
            if !r.api_breakdown.is_empty() {
                let parts: Vec<String> = r
                    .api_breakdown
                    .iter()
                    .map(|(k, v)| format!("{k}: {v:.0}"))
                    .collect();
                out.push_str(&format!(
                    "\n{who} (rep {}): no-op reconcile requests: {}.",
                    r.rep,
                    parts.join(", ")
                ));
            }
            if !r.fleet_requests.is_empty() {
                let parts: Vec<String> = r
                    .fleet_requests
                    .iter()
                    .map(|(k, v)| format!("{k}: {v:.2}"))
                    .collect();
                out.push_str(&format!(
                    "\n{who} (rep {}): fleet requests per Kustomization: {}.",
                    r.rep,
                    parts.join(", ")
                ));
            }
            for note in &r.notes {
                out.push_str(&format!("\n{who} (rep {}): {note}", r.rep));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(imp: &str, rep: usize, secs: f64, load: f64) -> RunResult {
        RunResult {
            implementation: imp.into(),
            session: "s1".into(),
            rep,
            load: Some((load, load)),
            profile: "equal".into(),
            variant: "a".into(),
            n: 100,
            concurrent: 4,
            fleet_secs: Some(secs),
            api_requests_per_noop: (imp != "floor").then_some(secs / 10.0),
            peak_rss_mib: (imp != "floor").then_some(Pair { sc: 10.0, kc: 20.0 }),
            ..Default::default()
        }
    }

    #[test]
    fn three_columns_medians_and_floor_ratios() {
        let results = [
            run("ours", 1, 5.0, 0.5),
            run("flux", 1, 50.0, 0.6),
            run("floor", 1, 4.0, 0.5),
            run("ours", 2, 7.0, 0.5),
            run("flux", 2, 30.0, 0.7),
            run("floor", 2, 4.0, 0.4),
            run("ours", 3, 6.0, 0.5),
            run("flux", 3, 40.0, 0.5),
            run("floor", 3, 5.0, 0.5),
        ];
        let text = results
            .iter()
            .map(|r| serde_json::to_string(r).unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        let parsed = parse_results(&text).unwrap();
        let t = table(&parsed, 1.0);
        assert!(t.contains("### N=100, variant A, settings: equal"), "{t}");
        assert!(t.contains("over 3 accepted repetition(s) of 3"), "{t}");
        // Medians 6, 40, 4: Flux ÷ ours 6.7, ours ÷ floor 1.5, Flux ÷ floor 10.
        assert!(
            t.contains(
                "| fleet: all Ready (s) | 6.0 (5.0–7.0) | 40.0 (30.0–50.0) | 4.0 (4.0–5.0) | 6.7× | 1.5× | 10.0× |"
            ),
            "{t}"
        );
        assert!(
            t.contains(
                "| peak RSS MiB (both) | 30.0 (30.0–30.0) | 30.0 (30.0–30.0) | — | 1.0× | — | — |"
            ),
            "{t}"
        );
        assert!(!t.contains("change propagation"), "{t}");
    }

    #[test]
    fn a_repetition_under_unequal_load_is_left_out() {
        let results = [
            run("ours", 1, 5.0, 0.5),
            run("flux", 1, 50.0, 4.0),
            run("ours", 2, 6.0, 0.5),
            run("flux", 2, 30.0, 0.9),
        ];
        let t = table(&results, 1.0);
        assert!(t.contains("over 1 accepted repetition(s) of 2"), "{t}");
        assert!(t.contains("Repetition 1 refused: load"), "{t}");
        assert!(
            t.contains("| fleet: all Ready (s) | 6.0 | 30.0 | 5.0× |"),
            "{t}"
        );
        // Nothing accepted: everything shown, flagged.
        let t = table(&results[..2], 1.0);
        assert!(t.contains("not publishable"), "{t}");
    }

    #[test]
    fn only_the_latest_session_and_missing_sides() {
        let mut old = run("ours", 1, 100.0, 0.5);
        old.session = "s0".into();
        let t = table(&[old, run("ours", 1, 5.0, 0.5)], 1.0);
        assert!(t.contains("| fleet: all Ready (s) | 5.0 | — | — |"), "{t}");
        assert!(!t.contains("100.0"), "{t}");
        // A session with ours and Flux refuses a repetition that lacks one of them.
        let t = table(&[run("ours", 1, 5.0, 0.5), run("flux", 2, 9.0, 0.5)], 1.0);
        assert!(t.contains("Repetition 1 refused: no flux run"), "{t}");
    }
}

/// Request keys (`VERB group/resource[/sub]`) of the cluster's own background work, which
/// neither side's controllers send: kwok's and the kubelet-less node heartbeats, leases and
/// kube-controller-manager's periodic discovery.
fn is_background(key: &str) -> bool {
    let resource = key.split_whitespace().nth(1).unwrap_or("");
    matches!(
        resource,
        "nodes" | "nodes/status" | "coordination.k8s.io/leases" | "-/api" | "-/apis"
    )
}

/// A fleet phase's request counts per Kustomization: without the cluster's background
/// ([`is_background`]) and the harness's own burst (its server-side applies of the
/// GitRepositories and Kustomizations, which no controller sends), divided by `n`. What the
/// cluster does in reaction to the applied objects (ReplicaSets, Deployment status, its
/// events) stays: it is the same for every implementation, the floor included.
pub fn per_kustomization(counts: &BTreeMap<String, f64>, n: usize) -> BTreeMap<String, f64> {
    let harness = |k: &str| {
        k == "APPLY source.toolkit.fluxcd.io/gitrepositories"
            || k == "APPLY kustomize.toolkit.fluxcd.io/kustomizations"
    };
    counts
        .iter()
        .filter(|(k, v)| !is_background(k) && !harness(k) && **v > 0.0)
        .map(|(k, v)| (k.clone(), v / n.max(1) as f64))
        .collect()
}

/// Requests on Kustomizations (finalizer, status) and on the four kinds a fleet app applies.
fn is_kustomization_work(key: &str) -> bool {
    let resource = key.split_whitespace().nth(1).unwrap_or("");
    resource.starts_with("kustomize.toolkit.fluxcd.io/kustomizations")
        || matches!(
            resource,
            "serviceaccounts" | "services" | "apps/deployments" | "networking.k8s.io/ingresses"
        )
}

/// The sum of the counts whose key matches; `None` when nothing was counted.
fn sum_where(counts: &BTreeMap<String, f64>, keep: impl Fn(&str) -> bool) -> Option<f64> {
    if counts.is_empty() {
        return None;
    }
    Some(counts.iter().filter(|(k, _)| keep(k)).map(|(_, v)| v).sum())
}

/// The no-op reconcile's requests without the cluster's background ([`is_background`]).
pub fn controller_requests(breakdown: &BTreeMap<String, f64>) -> Option<f64> {
    if breakdown.is_empty() {
        return None;
    }
    Some(
        breakdown
            .iter()
            .filter(|(k, _)| !is_background(k))
            .map(|(_, v)| v)
            .sum(),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod background_tests {
    use super::*;

    #[test]
    fn background_requests_are_left_out() {
        let b: BTreeMap<String, f64> = [
            ("GET -/api", 3.0),
            ("PATCH nodes/status", 1.0),
            ("GET nodes", 3.0),
            ("PUT coordination.k8s.io/leases", 2.0),
            (
                "PATCH kustomize.toolkit.fluxcd.io/kustomizations/status",
                1.0,
            ),
            ("APPLY configmaps (dry-run)", 100.0),
            ("POST events", 1.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(controller_requests(&b), Some(102.0));
        assert_eq!(controller_requests(&BTreeMap::new()), None);
    }

    #[test]
    fn fleet_requests_per_kustomization() {
        let c: BTreeMap<String, f64> = [
            ("APPLY kustomize.toolkit.fluxcd.io/kustomizations", 10.0),
            ("APPLY source.toolkit.fluxcd.io/gitrepositories", 10.0),
            ("PATCH kustomize.toolkit.fluxcd.io/kustomizations", 10.0),
            (
                "PATCH kustomize.toolkit.fluxcd.io/kustomizations/status",
                20.0,
            ),
            ("APPLY apps/deployments", 10.0),
            ("APPLY apps/deployments (dry-run)", 10.0),
            ("APPLY networking.k8s.io/ingresses", 10.0),
            ("POST events", 30.0),
            ("PUT coordination.k8s.io/leases", 50.0),
            ("GET -/api", 0.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let per = per_kustomization(&c, 10);
        assert_eq!(per.len(), 6, "{per:?}");
        assert_eq!(sum_where(&per, |_| true), Some(9.0));
        assert_eq!(sum_where(&per, is_kustomization_work), Some(6.0));
        assert_eq!(sum_where(&per, |k| k.contains("events")), Some(3.0));
        assert_eq!(sum_where(&BTreeMap::new(), |_| true), None);
    }
}
