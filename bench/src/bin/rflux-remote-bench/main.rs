//! `rflux-remote-bench`: the remote-cluster fleet benchmark (issue 19), our controllers against
//! Flux's, on N "clusters" (kubeconfig Secrets with distinct users) of one target apiserver,
//! reconciled from a hub (`scripts/bench-remote.sh` runs it; docs/benchmarks.md explains it).
//!
//! ```text
//! rflux-remote-bench run --ours-bin target/release [--flux-bin DIR] [--clusters 50] \
//!     [--reps 3] [--impls ours,flux] --out remote.jsonl
//! rflux-remote-bench table remote.jsonl [--session ID]
//! ```
//!
//! Every run starts two fresh control planes, a hub and a target. On the target: one namespace
//! and one user per cluster (a client certificate `CN=remote-cluster-NN`). On the hub: one
//! kubeconfig Secret per cluster, the implementation's source-controller and
//! kustomize-controller (Flux's defaults: `--concurrent=4`, default client limits), one
//! GitRepository, and one Kustomization per cluster (`kubeConfig.secretRef`, 4 objects, wait,
//! prune). Measured: the time from the burst of Kustomizations to all Ready; the
//! kustomize-controller's RSS settled before the burst and after it (memory per cluster), and
//! its peak; a no-op round (`requestedAt` on every Kustomization, nothing changed): its time
//! and the requests it costs on the hub and on the target (`apiserver_request_total` of each,
//! without lease and node traffic and the harness's own patches), per cluster. Repetitions
//! interleave the implementations (ours, Flux, ours, Flux, …); each run appends a JSON line to
//! `--out` with the load average before and after it, and the table pairs the runs of a
//! repetition, refusing a pair whose load differs by more than `--load-tolerance`.

#[path = "../../ctlproc.rs"]
mod ctlproc;
#[path = "../../kubectl.rs"]
mod kubectl;
mod procs;
mod report;
mod run;
#[path = "../../stats.rs"]
mod stats;
mod watch;
mod workload;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use rflux_e2e::flux::{FluxBinary, flux_bin_dir, flux_binary_version, flux_extra_source_crds};
use rflux_e2e::{GitServer, repo_root};

use procs::log;
use run::{Implementation, Session};

#[derive(Parser)]
#[command(
    name = "rflux-remote-bench",
    about = "Remote-cluster fleet benchmark: rflux vs Flux"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Interleaved runs of the implementations; one JSON line per run, then the table.
    Run(Box<RunArgs>),
    /// The table of one session of a results file (default: the last).
    Table {
        file: PathBuf,
        #[arg(long)]
        session: Option<String>,
        #[arg(long, default_value_t = 1.0)]
        load_tolerance: f64,
    },
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Directory with our release `source-controller` and `kustomize-controller`.
    #[arg(long)]
    ours_bin: PathBuf,
    /// Directory with Flux's binaries (default: where e2e/flux/build.sh puts them).
    #[arg(long)]
    flux_bin: Option<PathBuf>,
    /// Clusters (kubeconfig Secrets, users, Kustomizations).
    #[arg(long, default_value_t = 50)]
    clusters: usize,
    /// Repetitions; each runs every implementation once, in `--impls` order.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    #[arg(long, value_delimiter = ',', default_value = "ours,flux")]
    impls: Vec<String>,
    /// `--concurrent` of every controller (Flux's default).
    #[arg(long, default_value_t = 4)]
    concurrent: u16,
    /// Limit of each waiting phase, seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// Pause before each memory reading, seconds.
    #[arg(long, default_value_t = 5)]
    settle_secs: u64,
    /// A pair whose 1-minute load average before or after differs by more is refused.
    #[arg(long, default_value_t = 1.0)]
    load_tolerance: f64,
    /// Results file (JSON lines, appended).
    #[arg(long)]
    out: PathBuf,
    /// Directory for the controllers' logs and storage.
    #[arg(long, default_value = "target/bench/remote")]
    work_dir: PathBuf,
    /// Prefix of the control plane names (`<prefix>-hub`, `<prefix>-target`).
    #[arg(long, default_value = "remote-bench")]
    cp_prefix: String,
}

async fn run_all(args: &RunArgs) -> anyhow::Result<()> {
    let flux_dir = args.flux_bin.clone().unwrap_or_else(flux_bin_dir);
    let mut imps = Vec::new();
    for label in &args.impls {
        let imp = match label.as_str() {
            "ours" => Implementation {
                label: "ours".into(),
                flux: false,
                bin_dir: std::path::absolute(&args.ours_bin)?,
                version: "rflux (release build)".into(),
            },
            "flux" => {
                let kc = flux_dir.join("flux-kustomize-controller");
                if !kc.is_file() {
                    log(format!(
                        "Flux's controllers are not in {} (e2e/flux/build.sh): skipping Flux",
                        flux_dir.display()
                    ));
                    continue;
                }
                Implementation {
                    label: "flux".into(),
                    flux: true,
                    bin_dir: flux_dir.clone(),
                    version: flux_binary_version(FluxBinary::KustomizeController)
                        .unwrap_or_else(|| "?".into()),
                }
            }
            other => anyhow::bail!("unknown implementation {other:?} (ours, flux)"),
        };
        imps.push(imp);
    }
    // The same CRDs for both: ours, and the source kinds Flux's source-controller watches.
    let root = repo_root();
    let mut crds: Vec<PathBuf> = ["gitrepositories", "ocirepositories", "kustomizations"]
        .iter()
        .map(|k| root.join(format!("manifests/crds/{k}.yaml")))
        .collect();
    if imps.iter().any(|i| i.flux) {
        crds.extend(flux_extra_source_crds()?);
    }

    tokio::task::spawn_blocking(rflux_e2e::ensure_binaries).await??;
    let git = tokio::task::spawn_blocking(GitServer::ensure).await??;
    let repo = git.create_repo("remote-bench")?;
    for (path, text) in workload::repo_files() {
        repo.write(&path, &text)?;
    }
    let sha = repo.commit("remote bench")?.trim().to_string();
    repo.push("main")?;
    let session = Session {
        id: jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string(),
        clusters: args.clusters,
        concurrent: args.concurrent,
        timeout: Duration::from_secs(args.timeout_secs),
        settle: Duration::from_secs(args.settle_secs),
        crds,
        url: git.http_url(repo.name()),
        revision: format!("main@sha1:{sha}"),
        work_dir: args.work_dir.clone(),
        hub_name: format!("{}-hub", args.cp_prefix),
        target_name: format!("{}-target", args.cp_prefix),
    };
    if let Some(p) = args.out.parent() {
        std::fs::create_dir_all(p)?;
    }
    log(format!(
        "session {}; load average {:?}",
        session.id,
        procs::loadavg()
    ));
    for rep in 1..=args.reps {
        for imp in &imps {
            let r = run::run(&session, imp, rep).await?;
            append_line(&args.out, &serde_json::to_string(&r)?)?;
            log(format!(
                "{} rep {rep}: all Ready {:.1} s, no-op {:.1} s, load {:?} -> {:?}",
                imp.label, r.all_ready_s, r.noop_s, r.load_before, r.load_after
            ));
        }
    }
    let text = std::fs::read_to_string(&args.out)?;
    let all = report::parse_results(&text)?;
    println!(
        "{}",
        report::table(&all, Some(&session.id), args.load_tolerance)
    );
    Ok(())
}

fn append_line(path: &std::path::Path, line: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{line}")?;
    Ok(())
}

async fn run_cli(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Cmd::Table {
            file,
            session,
            load_tolerance,
        } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let all = report::parse_results(&text)
                .with_context(|| format!("parsing {}", file.display()))?;
            println!(
                "{}",
                report::table(&all, session.as_deref(), load_tolerance)
            );
            Ok(())
        }
        Cmd::Run(args) => {
            let prefix = args.cp_prefix.clone();
            tokio::select! {
                r = run_all(&args) => r,
                _ = tokio::signal::ctrl_c() => {
                    // Dropping the run stops its controllers; the control planes are stopped here.
                    log("interrupted: stopping the control planes");
                    for name in [format!("{prefix}-hub"), format!("{prefix}-target")] {
                        let _ = tokio::task::spawn_blocking(move || rflux_e2e::ControlPlane::stop(&name)).await;
                    }
                    anyhow::bail!("interrupted")
                }
            }
        }
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run_cli(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rflux-remote-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
