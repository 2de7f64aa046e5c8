//! The result of one run (one JSON line), the pairing of interleaved runs, and the table
//! "figure | ours | Flux | ratio" with medians and spreads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::stats::{cell, fmt, median, ratio_text};

/// One run of one implementation: every figure, the conditions, the raw request counts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunResult {
    pub bench: String,
    /// The invocation this run belongs to (its start time); the table shows one session.
    pub session: String,
    pub implementation: String,
    /// Repetition (1, 2, …); runs of one repetition form a pair.
    pub rep: usize,
    pub clusters: usize,
    pub objects_per_cluster: usize,
    pub concurrent: u16,
    pub kc_version: String,
    /// Load averages (1, 5, 15 min) just before the run's controllers start and just after
    /// its last measurement.
    pub load_before: [f64; 3],
    pub load_after: [f64; 3],
    /// CPU seconds the machine spent outside this benchmark's processes (controllers, both
    /// control planes, the harness) during the run: the other work on the machine.
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub foreign_cpu_s: f64,
    /// Length of the window of `foreign_cpu_s` (controllers started to last measurement), s.
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub window_s: f64,
    /// From the burst of Kustomizations to all Ready at the revision, seconds.
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub all_ready_s: f64,
    /// From the `requestedAt` burst to all requests handled (Ready), seconds.
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub noop_s: f64,
    /// Requests of the no-op round, by `VERB resource` (harness and lease/node traffic removed).
    pub hub_noop_requests: BTreeMap<String, f64>,
    pub target_noop_requests: BTreeMap<String, f64>,
    /// kustomize-controller resident set (KiB): settled with no Kustomization, and settled
    /// with all clusters Ready.
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub kc_rss0_kib: f64,
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub kc_rss_kib: f64,
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub kc_peak_rss_kib: f64,
    /// kustomize-controller CPU seconds: the fleet phase, the no-op round.
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub kc_cpu_fleet_s: f64,
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub kc_cpu_noop_s: f64,
    /// Every phase ran to its end (an aborted run carries a note instead).
    pub complete: bool,
    pub notes: Vec<String>,
}

fn nan() -> f64 {
    f64::NAN
}

/// JSON has no NaN (serde_json writes `null`): read `null` back as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl RunResult {
    fn per_cluster(&self, counts: &BTreeMap<String, f64>) -> f64 {
        // `+ 0.0`: an empty float sum is -0.0.
        (counts.values().sum::<f64>() + 0.0) / self.clusters.max(1) as f64
    }

    pub fn hub_requests_per_cluster(&self) -> f64 {
        self.per_cluster(&self.hub_noop_requests)
    }

    pub fn target_requests_per_cluster(&self) -> f64 {
        self.per_cluster(&self.target_noop_requests)
    }

    /// (RSS with all clusters − RSS with none) / clusters, KiB.
    pub fn mem_per_cluster_kib(&self) -> f64 {
        (self.kc_rss_kib - self.kc_rss0_kib) / self.clusters.max(1) as f64
    }
}

/// The figures of the table: label, unit, how to read it from a run, decimals.
type Figure = (&'static str, fn(&RunResult) -> f64, usize);

pub const FIGURES: [Figure; 8] = [
    ("time to all Ready (s)", |r| r.all_ready_s, 2),
    ("no-op round, all handled (s)", |r| r.noop_s, 2),
    (
        "hub requests per no-op reconcile per cluster",
        RunResult::hub_requests_per_cluster,
        1,
    ),
    (
        "target requests per no-op reconcile per cluster",
        RunResult::target_requests_per_cluster,
        1,
    ),
    (
        "kustomize-controller peak RSS (MiB)",
        |r| r.kc_peak_rss_kib / 1024.0,
        1,
    ),
    (
        "kustomize-controller memory per cluster (KiB)",
        RunResult::mem_per_cluster_kib,
        0,
    ),
    (
        "kustomize-controller CPU, fleet (s)",
        |r| r.kc_cpu_fleet_s,
        2,
    ),
    (
        "kustomize-controller CPU, no-op round (s)",
        |r| r.kc_cpu_noop_s,
        2,
    ),
];

pub fn parse_results(text: &str) -> anyhow::Result<Vec<RunResult>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}

/// One repetition: ours and Flux's runs, and whether their conditions match.
pub struct Pair<'a> {
    pub rep: usize,
    pub ours: Option<&'a RunResult>,
    pub flux: Option<&'a RunResult>,
    /// Why the pair is refused (empty: accepted).
    pub refused: Vec<String>,
}

/// Groups the runs of one session by repetition and refuses a pair when a side is missing or
/// incomplete, or when the 1-minute load average before or after the two runs differs by more
/// than `tolerance`.
pub fn pairs(runs: &[RunResult], tolerance: f64) -> Vec<Pair<'_>> {
    let mut reps: BTreeMap<usize, (Option<&RunResult>, Option<&RunResult>)> = BTreeMap::new();
    for r in runs {
        let e = reps.entry(r.rep).or_default();
        match r.implementation.as_str() {
            "ours" => e.0 = Some(r),
            "flux" => e.1 = Some(r),
            _ => {}
        }
    }
    reps.into_iter()
        .map(|(rep, (ours, flux))| {
            let mut refused = Vec::new();
            match (ours, flux) {
                (Some(o), Some(f)) => {
                    for (side, r) in [("ours", o), ("Flux", f)] {
                        if !r.complete {
                            refused.push(format!("{side}'s run is incomplete"));
                        }
                    }
                    let d_before = (o.load_before[0] - f.load_before[0]).abs();
                    let d_after = (o.load_after[0] - f.load_after[0]).abs();
                    if !(d_before <= tolerance && d_after <= tolerance) {
                        refused.push(format!(
                            "load differs: before {:.2} vs {:.2}, after {:.2} vs {:.2} \
                             (tolerance {tolerance})",
                            o.load_before[0], f.load_before[0], o.load_after[0], f.load_after[0]
                        ));
                    }
                }
                _ => refused.push("one side missing".to_string()),
            }
            Pair {
                rep,
                ours,
                flux,
                refused,
            }
        })
        .collect()
}

/// The markdown report of the latest session in `runs` (or of `session`).
pub fn table(runs: &[RunResult], session: Option<&str>, tolerance: f64) -> String {
    let Some(session) = session
        .map(str::to_string)
        .or_else(|| runs.last().map(|r| r.session.clone()))
    else {
        return "no runs\n".to_string();
    };
    let runs: Vec<RunResult> = runs
        .iter()
        .filter(|r| r.session == session)
        .cloned()
        .collect();
    let ps = pairs(&runs, tolerance);
    let accepted: Vec<&Pair> = ps.iter().filter(|p| p.refused.is_empty()).collect();
    let used: Vec<&Pair> = if accepted.is_empty() {
        // Loaded but complete pairs: shown, flagged as not publishable.
        ps.iter()
            .filter(|p| p.ours.is_some_and(|r| r.complete) && p.flux.is_some_and(|r| r.complete))
            .collect()
    } else {
        accepted.clone()
    };
    let first = runs.first();
    let mut out = format!(
        "# Remote clusters (issue 19): {} clusters × {} objects, one hub + one target apiserver\n\n\
         session {session}; Flux kustomize-controller {}; --concurrent={}; {} CPUs\n\n",
        first.map_or(0, |r| r.clusters),
        first.map_or(0, |r| r.objects_per_cluster),
        runs.iter()
            .find(|r| r.implementation == "flux")
            .map_or("—", |r| r.kc_version.as_str()),
        first.map_or(0, |r| r.concurrent),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    out.push_str(
        "| rep | implementation | load before (1/5/15 min) | load after | other work (CPU s / window s) | pair |\n",
    );
    out.push_str("|---:|---|---|---|---:|---|\n");
    for p in &ps {
        for r in [p.ours, p.flux].into_iter().flatten() {
            let l = |a: [f64; 3]| format!("{:.2} {:.2} {:.2}", a[0], a[1], a[2]);
            let verdict = if p.refused.is_empty() {
                "accepted".to_string()
            } else {
                format!("REFUSED: {}", p.refused.join("; "))
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} / {} | {verdict} |\n",
                p.rep,
                r.implementation,
                l(r.load_before),
                l(r.load_after),
                fmt(r.foreign_cpu_s, 1),
                fmt(r.window_s, 0)
            ));
        }
    }
    if accepted.is_empty() {
        out.push_str(
            "\n**No pair accepted: the figures below mix unequal conditions and are not \
             publishable.**\n",
        );
    }
    out.push_str(&format!(
        "\nMedian (min–max) over {} pair(s); ratio = Flux median ÷ ours median.\n\n\
         | figure | ours | Flux | ratio |\n|---|---:|---:|---:|\n",
        used.len()
    ));
    for (label, get, decimals) in FIGURES {
        let col = |flux: bool| -> Vec<f64> {
            used.iter()
                .filter_map(|p| if flux { p.flux } else { p.ours })
                .map(get)
                .collect()
        };
        let (o, f) = (col(false), col(true));
        let ratio = ratio_text(median(&o), median(&f));
        out.push_str(&format!(
            "| {label} | {} | {} | {ratio} |\n",
            cell(&o, decimals),
            cell(&f, decimals)
        ));
    }
    for r in &runs {
        for n in &r.notes {
            out.push_str(&format!(
                "\nNOTE ({} rep {}): {n}\n",
                r.implementation, r.rep
            ));
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(imp: &str, rep: usize, ready: f64, load: f64) -> RunResult {
        RunResult {
            session: "s".into(),
            implementation: imp.into(),
            rep,
            clusters: 50,
            all_ready_s: ready,
            noop_s: 1.0,
            kc_peak_rss_kib: 2048.0,
            kc_rss0_kib: 1000.0,
            kc_rss_kib: 6000.0,
            load_before: [load, 0.0, 0.0],
            load_after: [load, 0.0, 0.0],
            hub_noop_requests: [("PATCH k/status".to_string(), 50.0)].into(),
            complete: true,
            ..Default::default()
        }
    }

    #[test]
    fn per_cluster_figures() {
        let r = run("ours", 1, 10.0, 1.0);
        assert_eq!(r.hub_requests_per_cluster(), 1.0);
        assert_eq!(r.mem_per_cluster_kib(), 100.0);
    }

    #[test]
    fn a_pair_with_unequal_load_is_refused() {
        let runs = vec![
            run("ours", 1, 10.0, 1.0),
            run("flux", 1, 20.0, 1.5),
            run("ours", 2, 12.0, 1.0),
            run("flux", 2, 40.0, 4.0),
            run("ours", 3, 11.0, 1.0),
        ];
        let ps = pairs(&runs, 1.0);
        assert_eq!(ps.len(), 3);
        assert!(ps[0].refused.is_empty());
        assert!(
            ps[1].refused[0].contains("load differs"),
            "{:?}",
            ps[1].refused
        );
        assert_eq!(ps[2].refused, ["one side missing"]);
        let t = table(&runs, None, 1.0);
        // Only pair 1 counts: ratio 20 / 10.
        assert!(
            t.contains("| time to all Ready (s) | 10.00 | 20.00 | 2.0× |"),
            "{t}"
        );
        // Neither sent a request to the target: no ratio.
        assert!(
            t.contains("| target requests per no-op reconcile per cluster | 0.0 | 0.0 | = |"),
            "{t}"
        );
        assert!(!t.contains("not publishable"), "{t}");
    }

    #[test]
    fn no_accepted_pair_is_flagged() {
        let runs = vec![run("ours", 1, 10.0, 1.0), run("flux", 1, 30.0, 5.0)];
        let t = table(&runs, None, 1.0);
        assert!(t.contains("not publishable"), "{t}");
        assert!(
            t.contains("| time to all Ready (s) | 10.00 | 30.00 | 3.0× |"),
            "{t}"
        );
        assert_eq!(ratio_text(0.0, 16.0), "ours 0");
        assert_eq!(ratio_text(2.0, f64::NAN), "—");
    }

    #[test]
    fn results_round_trip_through_json_lines() {
        let a = run("ours", 1, 10.0, 1.0);
        let text = format!("{}\n\n", serde_json::to_string(&a).unwrap());
        let back = parse_results(&text).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].all_ready_s, 10.0);
        let aborted = RunResult {
            noop_s: f64::NAN,
            ..run("flux", 1, 10.0, 1.0)
        };
        let back = parse_results(&serde_json::to_string(&aborted).unwrap()).unwrap();
        assert!(back[0].noop_s.is_nan());
    }
}
