//! Samples and the markdown table.

use std::collections::BTreeMap;

use rflux_e2e::flux::{FluxBinary, flux_binary_version};

use crate::Args;

/// One measurement.
pub struct Sample {
    pub side: String,
    pub ms: f64,
    pub sc_cpu_ms: f64,
}

/// What the table says about the artifact and the run.
pub struct Context {
    pub files: usize,
    pub tree_bytes: u64,
    /// Size of the pushed layer (the compressed tarball the controllers download).
    pub layer_bytes: u64,
    pub load_before: String,
    pub load_after: String,
    /// Peak RSS (VmHWM, MiB) of each implementation's source-controller at the end.
    pub peak_rss: BTreeMap<String, f64>,
    pub notes: Vec<String>,
}

/// The median of sorted values (the mean of the middle two for an even count).
pub fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

pub fn table(args: &Args, samples: &[Sample], ctx: &Context) -> String {
    let mut by: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by.entry(s.side.as_str()).or_default().push(s);
    }
    let sorted = |v: &[&Sample], f: fn(&Sample) -> f64| {
        let mut xs: Vec<f64> = v.iter().map(|s| f(s)).collect();
        xs.sort_by(f64::total_cmp);
        xs
    };
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let flux_version = flux_binary_version(FluxBinary::SourceController).unwrap_or_default();
    let mut out = format!(
        "# OCIRepository pull and package: one {:.1} MiB artifact ({} files, {:.1} MiB of \
         pseudo-random bytes), ours vs Flux\n\n\
         {} interleaved rounds (a new `flux push` per round, then each implementation in turn, \
         the order rotating); Flux source-controller: {flux_version}; {cores} CPUs.\n\
         load average (1, 5, 15 min) before the rounds: {} / after: {}\n\n\
         Time from the `reconcile.fluxcd.io/requestedAt` request to the watch showing Ready=True \
         at the new `latest@sha256:…` revision: resolve the tag, fetch the manifest, download and \
         verify the layer, untar it, re-archive it into storage, patch the status. Last column: \
         median ÷ ours' median.\n\n\
         | implementation | runs | median ms | min ms | max ms | spread (max−min)/median | \
         source-controller CPU ms (median) | peak RSS MiB | median / ours |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        mib(ctx.layer_bytes),
        ctx.files,
        mib(ctx.tree_bytes),
        args.runs,
        ctx.load_before,
        ctx.load_after
    );
    let ours = by.get("ours").map(|v| median(&sorted(v, |s| s.ms)));
    for side in &args.impls {
        let Some(v) = by.get(side.as_str()) else {
            continue;
        };
        let ms = sorted(v, |s| s.ms);
        let cpu = sorted(v, |s| s.sc_cpu_ms);
        let med = median(&ms);
        let (min, max) = (ms[0], ms[ms.len() - 1]);
        let rss = ctx.peak_rss.get(side).copied().unwrap_or(f64::NAN);
        let ratio = ours.map_or("—".into(), |o| format!("{:.2}×", med / o));
        out.push_str(&format!(
            "| {side} | {} | {med:.0} | {min:.0} | {max:.0} | {:.0} % | {:.0} | {rss:.1} | {ratio} |\n",
            v.len(),
            (max - min) / med * 100.0,
            median(&cpu),
        ));
    }
    out.push_str("\nSamples (ms, in round order):\n\n");
    for side in &args.impls {
        if let Some(v) = by.get(side.as_str()) {
            let all: Vec<String> = v.iter().map(|s| format!("{:.0}", s.ms)).collect();
            out.push_str(&format!("- {side}: {}\n", all.join(", ")));
        }
    }
    for n in &ctx.notes {
        out.push_str(&format!("\nNOTE: {n}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[1.0, 2.0, 9.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 4.0, 9.0]), 3.0);
        assert!(median(&[]).is_nan());
    }
}
