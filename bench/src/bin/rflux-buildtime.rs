//! `rflux-buildtime`: the build half of our kustomize-controller's reconcile, timed for one
//! artifact (issue 15; `scripts/bench-buildtime.sh` runs it interleaved with Flux's).
//!
//! ```text
//! rflux-buildtime --url URL --digest sha256:HEX [--path P] [--k 7] [--warmup 1] [--case NAME]
//! ```
//!
//! It runs the controller's own code paths, with the controller's runtime: the fetch stage
//! (`ArtifactFetcher::fetch_pinned`: download, digest check, extraction into the digest cache,
//! which the build then reads in place) and the build stage (`build_flux_with` on
//! `spawn_blocking`, with the overrides and budget of a Kustomization that sets only
//! `spec.path`). Each iteration is timed twice and prints two JSON lines:
//!
//! - `cold`: a new fetcher with an empty cache: download + extraction + build, what the first
//!   reconcile of a revision does;
//! - `warm`: the same fetcher again: a cache hit + build, what a periodic re-reconcile of an
//!   unchanged revision does.
//!
//! Times are in milliseconds; releasing the cache entry is `cleanup_ms`, outside `total_ms`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use kustomize_controller::fetch::{ArtifactFetcher, FetcherOptions};
use kustomize_controller::reconcile::build::build_objects;
use rflux_common::api::kustomization::KustomizationSpec;
use rflux_common::runtime::{parse_go_duration, process};
use serde_json::json;

/// The controller's default `--concurrent` (sizes the runtime's threads).
const CONCURRENT: u16 = 4;

#[derive(Parser, Debug)]
#[command(
    name = "rflux-buildtime",
    about = "Time our controller's fetch + build stages"
)]
struct Args {
    /// Artifact URL (tar.gz).
    #[arg(long)]
    url: String,
    /// Artifact digest (`sha256:<hex>`).
    #[arg(long)]
    digest: String,
    /// The Kustomization's `spec.path`.
    #[arg(long, default_value = "./")]
    path: String,
    /// Case name echoed in the output.
    #[arg(long, default_value = "")]
    case: String,
    /// Timed iterations.
    #[arg(long, default_value_t = 7)]
    k: usize,
    /// Untimed iterations first.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
}

/// One timed pass.
struct Sample {
    fetch: Duration,
    build: Duration,
    cleanup: Duration,
    objects: usize,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A plain Flux Kustomization's spec: `spec.path` and the required fields only.
fn plain_spec(path: &str) -> anyhow::Result<KustomizationSpec> {
    let spec = json!({
        "interval": "10m",
        "path": path,
        "prune": true,
        "sourceRef": {"kind": "GitRepository", "name": "bench"},
    });
    serde_json::from_value(spec).context("plain Kustomization spec")
}

/// The fetch and build stages, as `reconcile/pipeline.rs` runs them.
async fn pass(
    fetcher: &ArtifactFetcher,
    args: &Args,
    spec: &KustomizationSpec,
) -> anyhow::Result<Sample> {
    let timeout = parse_go_duration(spec.timeout.as_deref().unwrap_or(&spec.interval))
        .context("spec.interval")?;
    let start = Instant::now();
    // Stage: fetch.
    let dir = tokio::time::timeout(timeout, fetcher.fetch_pinned(&args.url, &args.digest))
        .await
        .context("fetch timed out")?
        .context("fetch")?;
    let fetched = Instant::now();
    // Stage: build.
    let path = spec.path.clone().unwrap_or_else(|| "./".into());
    if !rflux_core::secure_join(dir.path(), &path).exists() {
        bail!("kustomization path not found: {path}");
    }
    let objects = build_objects(dir.path(), spec, timeout, None, false)
        .await
        .context("build")?;
    let done = Instant::now();
    drop(dir);
    Ok(Sample {
        fetch: fetched - start,
        build: done - fetched,
        cleanup: done.elapsed(),
        objects: objects.len(),
    })
}

fn print(args: &Args, mode: &str, iter: usize, s: &Sample) {
    let line = json!({
        "side": "ours",
        "mode": mode,
        "case": args.case,
        "iter": iter,
        "fetch_ms": ms(s.fetch),
        "build_ms": ms(s.build),
        "total_ms": ms(s.fetch + s.build),
        "cleanup_ms": ms(s.cleanup),
        "objects": s.objects,
    });
    println!("{line}");
}

async fn run(args: Args) -> anyhow::Result<()> {
    let spec = plain_spec(&args.path)?;
    let scratch = tempfile::Builder::new()
        .prefix("rflux-buildtime-")
        .tempdir()
        .context("scratch dir")?;
    for i in 0..args.warmup + args.k {
        // A fresh cache per iteration: the first fetch is cold, the second a cache hit.
        let base = scratch.path().join(i.to_string());
        let mut opts = FetcherOptions::new(base.join("cache"));
        opts.work_parent = base.join("work");
        std::fs::create_dir_all(&opts.work_parent).context("work parent")?;
        let fetcher = ArtifactFetcher::new(opts).context("fetcher")?;
        let cold = pass(&fetcher, &args, &spec).await?;
        let warm = pass(&fetcher, &args, &spec).await?;
        drop(fetcher);
        std::fs::remove_dir_all(&base).context("remove scratch")?;
        if let Some(iter) = i.checked_sub(args.warmup) {
            print(&args, "cold", iter, &cold);
            print(&args, "warm", iter, &warm);
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    process::cap_malloc_arenas("kustomize-controller");
    let runtime = match process::build_runtime(CONCURRENT) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rflux-buildtime: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let case = args.case.clone();
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rflux-buildtime: {case}: {e:#}");
            ExitCode::FAILURE
        }
    }
}
