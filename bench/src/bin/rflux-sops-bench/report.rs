//! Samples and the markdown table.

use std::collections::BTreeMap;

use rflux_e2e::flux::{FluxBinary, flux_binary_version};

use crate::Args;

/// One measurement.
pub struct Sample {
    pub side: String,
    pub mode: String,
    pub ms: f64,
    pub kc_cpu_ms: f64,
    /// apiserver requests on Secrets during the measurement.
    pub requests: f64,
}

/// Nearest-rank percentile (`p` in 0..=1) of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of sorted values (the mean of the middle two for an even count).
fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

pub fn table(args: &Args, samples: &[Sample], load: (&str, &str), notes: &[String]) -> String {
    let mut by: BTreeMap<(&str, &str), Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by.entry((s.mode.as_str(), s.side.as_str()))
            .or_default()
            .push(s);
    }
    let stats = |v: &[&Sample], f: fn(&Sample) -> f64| {
        let mut xs: Vec<f64> = v.iter().map(|s| f(s)).collect();
        xs.sort_by(f64::total_cmp);
        (median(&xs), percentile(&xs, 0.9))
    };
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let flux_version = flux_binary_version(FluxBinary::KustomizeController).unwrap_or_default();
    let mut out = format!(
        "# SOPS decrypt-and-apply: one Kustomization, {} age-encrypted Secrets, ours vs Flux\n\n\
         {} interleaved rounds; Flux kustomize-controller: {flux_version}; --concurrent={}; \
         {cores} CPUs.\n\
         load average (1, 5, 15 min) before the rounds: {} / after: {}\n\n\
         ours-notracker = ours with `--feature-gates=WatchAppliedObjects=false` (no applied-object \
         watches: it dry-runs every object, as Flux does).\n\n\
         Time from the request (noop) or the new artifact (revision) to Ready=True with all \
         Secrets applied; last column: median ÷ ours' median.\n\n\
         | mode | implementation | runs | median ms | p90 ms | kc CPU ms (median) | Secret requests (median) | median / ours |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
        args.secrets, args.runs, args.concurrent, load.0, load.1
    );
    for mode in &args.modes {
        let ours = by
            .get(&(mode.as_str(), "ours"))
            .map(|v| stats(v, |s| s.ms).0);
        for side in &args.impls {
            let Some(v) = by.get(&(mode.as_str(), side.as_str())) else {
                continue;
            };
            let (med, p90) = stats(v, |s| s.ms);
            let (cpu, _) = stats(v, |s| s.kc_cpu_ms);
            let (requests, _) = stats(v, |s| s.requests);
            let ratio = ours.map_or("—".into(), |o| format!("{:.2}×", med / o));
            out.push_str(&format!(
                "| {mode} | {side} | {} | {med:.0} | {p90:.0} | {cpu:.0} | {requests:.0} | {ratio} |\n",
                v.len()
            ));
        }
    }
    if !args.kc_args.is_empty() {
        out.push_str(&format!(
            "\nExtra arguments of every kustomize-controller: `{}`\n",
            args.kc_args
        ));
    }
    for n in notes {
        out.push_str(&format!("\nNOTE: {n}\n"));
    }
    out
}
