//! `rflux-oci-bench`: OCIRepository pull-and-package time of one large artifact (about 30 MiB of
//! pseudo-random bytes in many files, so gzip cannot shrink it), our source-controller against
//! Flux's, on one control plane, against a real registry (`scripts/bench-oci.sh` runs it;
//! docs/benchmarks.md explains the method).
//!
//! ```text
//! rflux-oci-bench --ours-bin target/release [--flux-bin DIR] [--mib 30] [--files 1000] \
//!     [--runs 5] [--impls flux,ours] --out oci.jsonl
//! ```
//!
//! Setup: a registry (distribution, `e2e/registry/build.sh`) on loopback over plain HTTP; a
//! tree of `--files` files totalling `--mib` MiB written once from a fixed seed and pushed with
//! the real `flux push artifact` to `bench/app:latest`; a fresh control plane (`--cp-name`,
//! stopped at the end unless `--keep`) with our GitRepository and OCIRepository CRDs (plus
//! Flux's other source CRDs when Flux runs); per implementation a namespace `oci-<impl>`, its
//! own source-controller process (own storage and artifact server, watching only its label)
//! and an OCIRepository on `latest` (interval 1h, so only requests reconcile it). Both
//! controllers pull the first push untimed (warm-up), then the rounds start.
//!
//! Each round rewrites a marker file and pushes again (untimed: a new layer and manifest
//! digest, the whole layer to download again), then measures each implementation in turn, the
//! order rotating per round: the clock starts just before the `reconcile.fluxcd.io/requestedAt`
//! patch and stops when the watch delivers the OCIRepository Ready=True at the new
//! `latest@sha256:…` revision. The other controller is idle meanwhile. Per sample also the CPU
//! time of the measured source-controller; at the end each one's peak RSS (`VmHWM`). Prints a
//! markdown table (median, min, max, spread, ratio to ours) with the load average before and
//! after the rounds; every sample is appended to `--out` as a JSON line.
#![allow(clippy::unwrap_used)]

mod content;
#[path = "../../kubectl.rs"]
mod kubectl;
#[path = "../../ctlproc.rs"]
mod procs;
mod report;
mod side;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use kube::api::{Api, Patch, PatchParams};
use rflux_common::api::ocirepository::OciRepository;
use rflux_e2e::flux::{FluxBinary, flux_extra_source_crds};
use rflux_e2e::registry::push::push_artifact;
use rflux_e2e::registry::{Registry, RegistryMode};
use rflux_e2e::{ControlPlane, repo_root};
use serde_json::json;

use procs::{loadavg, log};
use report::{Context, Sample, table};
use side::{Side, create_namespace, ready_at, start_side, wait_obj};

/// The name of the OCIRepository in every namespace.
const NAME: &str = "bench";
/// The label whose value names the implementation; each controller watches only its own.
const LABEL: &str = "rflux.bench/impl";
/// The registry repository the artifact is pushed to (tag `latest`).
const REPO: &str = "bench/app";
const SOURCE: &str = "https://git.example/oci-bench.git";

#[derive(Parser, Debug)]
#[command(
    name = "rflux-oci-bench",
    about = "OCIRepository pull-and-package time, ours vs Flux"
)]
pub struct Args {
    /// Directory with our release `source-controller`.
    #[arg(long)]
    pub ours_bin: PathBuf,
    /// Directory with Flux's binaries (default: where e2e/flux/build.sh puts them).
    #[arg(long)]
    pub flux_bin: Option<PathBuf>,
    /// Size of the pushed tree, MiB (pseudo-random bytes: the layer is about as large).
    #[arg(long, default_value_t = 30)]
    pub mib: u64,
    /// Number of files in the tree.
    #[arg(long, default_value_t = 1000)]
    pub files: usize,
    /// Rounds (each: one push, then every implementation once).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    #[arg(long, value_delimiter = ',', default_value = "flux,ours")]
    pub impls: Vec<String>,
    #[arg(long, default_value = "oci-bench")]
    pub cp_name: String,
    /// Leave the control plane running.
    #[arg(long)]
    pub keep: bool,
    /// Samples, one JSON line each (appended).
    #[arg(long)]
    pub out: PathBuf,
    /// Per-measurement timeout, seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
}

/// `flux push artifact` of `dir` to `bench/app:latest` (origin revision names the round);
/// returns the revision `latest@sha256:…`.
async fn push(reg: &Arc<Registry>, dir: &Path, round: usize) -> anyhow::Result<String> {
    let reg = reg.clone();
    let dir = dir.to_path_buf();
    let revision = format!("main@sha1:{round:040x}");
    let digest = tokio::task::spawn_blocking(move || {
        push_artifact(&reg, REPO, "latest", &dir, SOURCE, &revision)
    })
    .await??;
    Ok(format!("latest@{digest}"))
}

/// One timed reconcile of `side` to `revision`: elapsed ms and source-controller CPU ms.
async fn measure(
    client: &kube::Client,
    side: &mut Side,
    revision: &str,
    timeout: Duration,
) -> anyhow::Result<(f64, f64)> {
    let cpu0 = side.sc.cpu_secs();
    let token = rflux_e2e::random_suffix(8);
    let patch = json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}});
    let t0 = Instant::now();
    Api::<OciRepository>::namespaced(client.clone(), &side.ns)
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let t1 = wait_obj(&mut side.oci, timeout, "Ready at the new revision", |o| {
        ready_at(o, revision)
    })
    .await?;
    side.sc.check_alive()?;
    Ok((
        (t1 - t0).as_secs_f64() * 1000.0,
        (side.sc.cpu_secs() - cpu0) * 1000.0,
    ))
}

/// The size of the single layer of manifest `revision` (`latest@sha256:…`).
async fn layer_size(reg: &Registry, revision: &str) -> anyhow::Result<u64> {
    let digest = revision.trim_start_matches("latest@");
    let manifest = reg.client()?.get_manifest(REPO, digest).await?.json()?;
    manifest["layers"][0]["size"]
        .as_u64()
        .context("the pushed manifest has no layer size")
}

async fn run(args: &Args, work: &Path) -> anyhow::Result<(Vec<Sample>, Context)> {
    let reg = Arc::new(tokio::task::spawn_blocking(|| Registry::start(RegistryMode::Http)).await??);
    let tree_dir = work.join("content");
    log(format!(
        "writing {} files, {} MiB of pseudo-random bytes",
        args.files, args.mib
    ));
    let tree = content::write_tree(&tree_dir, args.files, args.mib)?;
    content::mark_round(&tree_dir, 0)?;
    let t = Instant::now();
    let mut revision = push(&reg, &tree_dir, 0).await?;
    let layer_bytes = layer_size(&reg, &revision).await?;
    log(format!(
        "pushed {revision} ({:.1} MiB layer) in {:.1} s",
        layer_bytes as f64 / 1048576.0,
        t.elapsed().as_secs_f64()
    ));

    log(format!("starting a fresh control plane {:?}", args.cp_name));
    tokio::task::spawn_blocking(rflux_e2e::ensure_binaries).await??;
    let cp = ControlPlane::start(&args.cp_name).await?;
    let client = cp.client().await?;
    let mut crds = vec![
        repo_root().join("manifests/crds/gitrepositories.yaml"),
        repo_root().join("manifests/crds/ocirepositories.yaml"),
    ];
    if args.impls.iter().any(|i| i == "flux") {
        // Flux's source-controller watches every source kind; the OCIRepository CRD is ours.
        crds.extend(
            flux_extra_source_crds()?
                .into_iter()
                .filter(|p| !p.to_string_lossy().contains("ocirepositories")),
        );
    }
    kubectl::install_crds(cp.kubeconfig_path(), &crds)?;
    create_namespace(&client, "flux-system").await?;
    let logs = std::path::absolute(args.out.with_extension("logs"))?;
    std::fs::create_dir_all(&logs)?;
    log(format!("controller logs in {}", logs.display()));

    let timeout = Duration::from_secs(args.timeout_secs);
    let url = reg.url(REPO);
    let mut sides = Vec::new();
    for name in &args.impls {
        log(format!("starting {name}"));
        sides.push(start_side(args, &client, &cp, name, &url, &logs).await?);
    }
    for side in &mut sides {
        let rev = revision.clone();
        wait_obj(&mut side.oci, timeout, "the first artifact", |o| {
            ready_at(o, &rev)
        })
        .await
        .with_context(|| format!("{}: first pull", side.name))?;
    }
    log("first pulls done (untimed); settling 5 s");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let load_before = loadavg();

    let mut samples = Vec::new();
    for round in 1..=args.runs {
        content::mark_round(&tree_dir, round)?;
        revision = push(&reg, &tree_dir, round).await?;
        let k = sides.len();
        for j in 0..k {
            let side = &mut sides[(j + round) % k];
            tokio::time::sleep(Duration::from_secs(1)).await;
            let (ms, cpu_ms) = measure(&client, side, &revision, timeout)
                .await
                .with_context(|| format!("{} round {round}", side.name))?;
            log(format!(
                "round {round} {}: {ms:.0} ms (source-controller CPU {cpu_ms:.0} ms)",
                side.name
            ));
            let line = json!({"side": side.name, "round": round, "ms": ms, "sc_cpu_ms": cpu_ms,
                "revision": revision, "layer_bytes": layer_bytes, "files": tree.files,
                "tree_bytes": tree.bytes});
            append_line(&args.out, &line.to_string())?;
            samples.push(Sample {
                side: side.name.clone(),
                ms,
                sc_cpu_ms: cpu_ms,
            });
        }
    }
    let load_after = loadavg();
    let mut notes = Vec::new();
    let mut peak_rss = BTreeMap::new();
    for side in &mut sides {
        if let Err(e) = side.sc.check_alive() {
            notes.push(format!("{e:#}"));
        }
        peak_rss.insert(side.name.clone(), side.sc.peak_rss_mib());
    }
    drop(sides);
    Ok((
        samples,
        Context {
            files: tree.files,
            tree_bytes: tree.bytes,
            layer_bytes,
            load_before,
            load_after,
            peak_rss,
            notes,
        },
    ))
}

fn append_line(path: &Path, line: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{line}")?;
    Ok(())
}

/// Why the benchmark cannot run (registry or flux CLI missing), or `None`.
fn missing_tools() -> Option<String> {
    rflux_e2e::registry::push::skip_reason()
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args = Args::parse();
    if args.runs < 1 {
        eprintln!("rflux-oci-bench: --runs must be at least 1");
        return std::process::ExitCode::FAILURE;
    }
    if let Err(e) = check_impls(&args.impls) {
        eprintln!("rflux-oci-bench: {e}");
        return std::process::ExitCode::FAILURE;
    }
    if let Some(why) = missing_tools() {
        eprintln!("rflux-oci-bench: {why}");
        return std::process::ExitCode::FAILURE;
    }
    let flux_built = rflux_e2e::flux::flux_binary(FluxBinary::SourceController).is_some();
    if args.flux_bin.is_none() && !flux_built && args.impls.iter().any(|i| i == "flux") {
        log("Flux's source-controller is not built (e2e/flux/build.sh): running ours only");
        args.impls.retain(|i| i != "flux");
    }
    let work = match tempfile::tempdir() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("rflux-oci-bench: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Some(p) = args.out.parent() {
        let _ = std::fs::create_dir_all(p);
    }
    log(format!("load average at the start: {}", loadavg()));
    let result = run(&args, work.path()).await;
    if !args.keep {
        log(format!("stopping control plane {:?}", args.cp_name));
        let name = args.cp_name.clone();
        let _ = tokio::task::spawn_blocking(move || ControlPlane::stop(&name)).await;
    }
    match result {
        Ok((samples, ctx)) => {
            println!("{}", table(&args, &samples, &ctx));
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rflux-oci-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Refuses an implementation list the harness cannot run.
fn check_impls(impls: &[String]) -> anyhow::Result<()> {
    for i in impls {
        if i != "flux" && i != "ours" {
            bail!("unknown implementation {i} (flux, ours)");
        }
    }
    Ok(())
}
