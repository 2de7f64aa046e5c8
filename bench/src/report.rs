//! One run's measurements (a JSON line in the results file) and the side-by-side table.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
    /// `ours` or `flux`.
    pub implementation: String,
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

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{v:.digits$}"))
}

fn ratio(ours: Option<f64>, flux: Option<f64>, higher_is_better: bool) -> String {
    match (ours, flux) {
        (Some(o), Some(f)) if o > 0.0 && f > 0.0 => {
            let r = if higher_is_better { o / f } else { f / o };
            format!("{r:.1}×")
        }
        (Some(o), Some(f)) if o == 0.0 && f > 0.0 && !higher_is_better => "∞".to_string(),
        _ => "–".to_string(),
    }
}

/// Markdown tables, one per (N, variant, profile): figure | ours | Flux | ratio (how many
/// times better ours is; > 1 means ours wins). The latest run of each kind is used.
pub fn table(results: &[RunResult]) -> String {
    type Side<'a> = Option<&'a RunResult>;
    let mut groups: BTreeMap<(usize, String, String), (Side, Side)> = BTreeMap::new();
    for r in results {
        let e = groups
            .entry((r.n, r.variant.clone(), r.profile.clone()))
            .or_default();
        match r.implementation.as_str() {
            "ours" => e.0 = Some(r),
            _ => e.1 = Some(r),
        }
    }
    let mut out = String::new();
    for ((n, variant, profile), (ours, flux)) in groups {
        out.push_str(&format!(
            "\n### N={n}, variant {}, settings: {profile}\n\n",
            variant.to_uppercase()
        ));
        let mut flags = Vec::new();
        for (who, r) in [("ours", ours), ("Flux", flux)] {
            let Some(r) = r else { continue };
            let mut s = format!("{who}: `--concurrent={}`", r.concurrent);
            if !r.extra_args.0.is_empty() {
                s.push_str(&format!(", source `{}`", r.extra_args.0));
            }
            if !r.extra_args.1.is_empty() {
                s.push_str(&format!(", kustomize `{}`", r.extra_args.1));
            }
            flags.push(s);
        }
        out.push_str(&flags.join("; "));
        out.push_str("\n\n| figure | ours | Flux | ratio |\n|---|---:|---:|---:|\n");
        type Getter = fn(&RunResult) -> Option<f64>;
        let rows: Vec<(&str, Getter, usize)> = vec![
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
                "idle CPU s/min (both)",
                |r| r.idle_cpu_per_min.as_ref().map(Pair::sum),
                3,
            ),
        ];
        for (label, get, digits) in rows {
            let o = ours.and_then(get);
            let f = flux.and_then(get);
            if o.is_none() && f.is_none() {
                continue;
            }
            out.push_str(&format!(
                "| {label} | {} | {} | {} |\n",
                fmt_opt(o, digits),
                fmt_opt(f, digits),
                ratio(o, f, false)
            ));
        }
        for (who, r) in [("ours", ours), ("Flux", flux)] {
            let Some(r) = r else { continue };
            if let Some(i) = r.drift_interval_secs {
                out.push_str(&format!("\n{who}: drift phase ran with interval {i:.0}s."));
            }
            if r.fleet_not_ready > 0 {
                out.push_str(&format!(
                    "\n{who}: {} Kustomizations not Ready at the timeout.",
                    r.fleet_not_ready
                ));
            }
            if !r.api_breakdown.is_empty() {
                let parts: Vec<String> = r
                    .api_breakdown
                    .iter()
                    .map(|(k, v)| format!("{k}: {v:.0}"))
                    .collect();
                out.push_str(&format!(
                    "\n{who}: no-op reconcile requests: {}.",
                    parts.join(", ")
                ));
            }
            for note in &r.notes {
                out.push_str(&format!("\n{who}: {note}"));
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

    fn run(imp: &str, secs: f64, api: f64) -> RunResult {
        RunResult {
            implementation: imp.into(),
            profile: "equal".into(),
            variant: "a".into(),
            n: 100,
            concurrent: 4,
            fleet_secs: Some(secs),
            api_requests_per_noop: Some(api),
            peak_rss_mib: Some(Pair { sc: 10.0, kc: 20.0 }),
            ..Default::default()
        }
    }

    #[test]
    fn table_pairs_ours_and_flux_with_ratios() {
        let results = [run("ours", 5.0, 2.0), run("flux", 50.0, 104.0)];
        let text = results
            .iter()
            .map(|r| serde_json::to_string(r).unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        let parsed = parse_results(&text).unwrap();
        let t = table(&parsed);
        assert!(t.contains("### N=100, variant A, settings: equal"), "{t}");
        assert!(
            t.contains("| fleet: all Ready (s) | 5.0 | 50.0 | 10.0× |"),
            "{t}"
        );
        assert!(
            t.contains("| API requests per no-op reconcile (100 objects) | 2.0 | 104.0 | 52.0× |"),
            "{t}"
        );
        assert!(
            t.contains("| peak RSS MiB (both) | 30.0 | 30.0 | 1.0× |"),
            "{t}"
        );
        assert!(!t.contains("change propagation"), "{t}");
    }

    #[test]
    fn missing_side_gives_dash() {
        let t = table(&[run("ours", 5.0, 1.0)]);
        assert!(t.contains("| fleet: all Ready (s) | 5.0 | – | – |"), "{t}");
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
}
