//! `rflux-sops-bench`: decrypt-and-apply time of one Kustomization holding N SOPS-encrypted
//! Secret objects (age key), our kustomize-controller against Flux's, on one control plane
//! (`scripts/bench-sops.sh` runs it; docs/benchmarks.md explains the figures).
//!
//! ```text
//! rflux-sops-bench --ours-bin target/release [--flux-bin DIR] [--secrets 200] [--runs 7] \
//!     [--modes revision,noop] [--impls flux,ours,ours-notracker] [--kc-args "..."] \
//!     --out sops.jsonl
//! ```
//!
//! Setup: a fresh control plane (`--cp-name`, stopped at the end unless `--keep`), one git
//! repository on the e2e git server with N Secret manifests encrypted by the real `sops` CLI
//! (`--encrypted-regex '^(data|stringData)$'`, age), and per implementation a namespace
//! `sops-<impl>` with the age key Secret, a GitRepository and a Kustomization (`spec.decryption`)
//! reconciled by that implementation's own source-controller and kustomize-controller, which
//! watch only their namespace's label. All controllers run all the time; the measured one works
//! while the others are idle. Implementations: `flux` (Flux's binaries), `ours` (default
//! settings) and `ours-notracker` (ours with `--feature-gates=WatchAppliedObjects=false`, so it
//! dry-runs every object like Flux instead of trusting its applied-object watches).
//!
//! Each round runs every mode for every implementation, the implementation order rotating per
//! round. Modes:
//! - `revision`: a new commit changes an annotation (`commonAnnotations`) of all N Secrets. The
//!   clock starts when the GitRepository shows the new artifact (the source-controller's part is
//!   not timed) and stops when the Kustomization is Ready=True at that revision and all N
//!   Secrets carry the new annotation: fetch + N decryptions + build + N applies.
//! - `noop`: `reconcile.fluxcd.io/requestedAt` on the Kustomization; the clock stops when it is
//!   handled with Ready=True and all N Secrets present: fetch + N decryptions + build + the
//!   no-op apply (Flux dry-runs N objects; ours with its tracker sends no request for them).
//!
//! Per sample also the CPU time the kustomize-controller process used and the apiserver
//! requests on Secrets (`apiserver_request_total`). Note: Flux's controllers turn their
//! client-side rate limit off when the apiserver has API Priority and Fairness (as here); ours
//! keep `--kube-api-qps=50 --kube-api-burst=300`, which `--kc-args` can raise. Prints a
//! markdown table (median and p90 per implementation and mode, ratio to `ours`) with the load
//! average before and after; every sample is appended to `--out` as a JSON line.
#![allow(clippy::unwrap_used)]

mod cluster;
#[path = "../../kubectl.rs"]
mod kubectl;
#[path = "../../ctlproc.rs"]
mod procs;
mod report;
mod side;
#[path = "../../../../sops/tests/common/mod.rs"]
mod sops_cli;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::flux::{FluxBinary, flux_extra_source_crds};
use rflux_e2e::{ControlPlane, GitServer, metrics, repo_root};
use serde_json::json;

use cluster::{create_namespace, ks_done, wait_obj, wait_secrets};
use procs::{loadavg, log};
use report::{Sample, table};
use side::{Side, kustomization_yaml, start_side, write_fixtures};

/// The name of the GitRepository and the Kustomization in every namespace.
const NAME: &str = "sops";
/// The label whose value names the implementation; each controller watches only its own.
const LABEL: &str = "rflux.bench/impl";
/// The annotation every applied Secret carries, changed by each new revision.
const REV_ANNOTATION: &str = "bench.rflux.io/revision";
/// The label both implementations put on what a Kustomization applies.
const OWNER_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";

#[derive(Parser, Debug)]
#[command(
    name = "rflux-sops-bench",
    about = "SOPS decrypt-and-apply time, ours vs Flux"
)]
pub struct Args {
    /// Directory with our release `source-controller` and `kustomize-controller`.
    #[arg(long)]
    pub ours_bin: PathBuf,
    /// Directory with Flux's binaries (default: where e2e/flux/build.sh puts them).
    #[arg(long)]
    pub flux_bin: Option<PathBuf>,
    /// Encrypted Secrets in the Kustomization.
    #[arg(long, default_value_t = 200)]
    pub secrets: usize,
    /// Rounds (each: every mode for every implementation).
    #[arg(long, default_value_t = 7)]
    pub runs: usize,
    #[arg(long, value_delimiter = ',', default_value = "revision,noop")]
    pub modes: Vec<String>,
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "flux,ours,ours-notracker"
    )]
    pub impls: Vec<String>,
    /// `--concurrent` of every controller.
    #[arg(long, default_value_t = 4)]
    pub concurrent: u16,
    #[arg(long, default_value = "sops-bench")]
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
    /// Extra arguments of every kustomize-controller (space-separated), e.g.
    /// `--kube-api-qps=500 --kube-api-burst=1000`.
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub kc_args: String,
}

/// One measurement of `mode` on `side` (the repository is at `sha`, commonAnnotation `rev`).
async fn measure(
    client: &Client,
    side: &mut Side,
    mode: &str,
    sha: &str,
    rev: usize,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<Measured> {
    let revision = format!("main@sha1:{sha}");
    let requests0 = metrics::scrape_request_total(client).await?;
    let cpu0 = side.kc.cpu_secs();
    let (t0, t1) = match mode {
        "revision" => {
            let token = rflux_e2e::random_suffix(8);
            let patch =
                json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}});
            Api::<GitRepository>::namespaced(client.clone(), &side.ns)
                .patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            let t0 = wait_obj(&mut side.gr, timeout, "the new artifact", |g| {
                g.status
                    .as_ref()
                    .and_then(|s| s.artifact.as_ref())
                    .is_some_and(|a| a.revision == revision)
            })
            .await?;
            let t1 = wait_obj(&mut side.ks, timeout, "Ready at the new revision", |k| {
                ks_done(k, &revision, None)
            })
            .await?;
            (t0, t1)
        }
        "noop" => {
            let token = rflux_e2e::random_suffix(8);
            let patch =
                json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}});
            let t0 = Instant::now();
            Api::<Kustomization>::namespaced(client.clone(), &side.ns)
                .patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            let t1 = wait_obj(&mut side.ks, timeout, "the request handled", |k| {
                ks_done(k, &revision, Some(&token))
            })
            .await?;
            (t0, t1)
        }
        other => bail!("unknown mode {other}"),
    };
    // Ready is reported after the apply, so the Secrets are normally there already.
    let t1 = match wait_secrets(client, &side.ns, n, rev, timeout).await? {
        Some(later) => later.max(t1),
        None => t1,
    };
    let cpu = side.kc.cpu_secs() - cpu0;
    side.kc.check_alive()?;
    let requests = metrics::diff(&requests0, &metrics::scrape_request_total(client).await?);
    // Requests on Secrets, without the harness's own list.
    let secret_requests = requests
        .into_iter()
        .filter(|(k, _)| k.contains(" secrets") && !k.starts_with("LIST "))
        .collect();
    Ok(Measured {
        ms: (t1 - t0).as_secs_f64() * 1000.0,
        kc_cpu_ms: cpu * 1000.0,
        secret_requests,
    })
}

/// What one measurement found.
struct Measured {
    ms: f64,
    kc_cpu_ms: f64,
    /// apiserver requests on Secrets during the measurement, by verb (`apiserver_request_total`;
    /// only the measured implementation works meanwhile).
    secret_requests: metrics::Counts,
}

/// Samples, notes, and the load average just before and just after the rounds.
struct Outcome {
    samples: Vec<Sample>,
    notes: Vec<String>,
    load: (String, String),
}

async fn run(args: &Args, work: &Path) -> anyhow::Result<Outcome> {
    let tools = sops_cli::tools().context("the sops CLI is not built (e2e/sops/build.sh)")?;
    let age = tools.age_key(work);
    let git = tokio::task::spawn_blocking(GitServer::ensure).await??;
    let repo = git.create_repo("sops-bench")?;
    log(format!("encrypting {} Secrets with sops", args.secrets));
    let t = Instant::now();
    write_fixtures(&repo, args.secrets, work, &age.recipient)?;
    log(format!("encrypted in {:.1} s", t.elapsed().as_secs_f64()));
    let mut sha = repo.commit("sops bench rev 0")?.trim().to_string();
    repo.push("main")?;
    let url = git.http_url(repo.name());

    log(format!("starting a fresh control plane {:?}", args.cp_name));
    tokio::task::spawn_blocking(rflux_e2e::ensure_binaries).await??;
    let cp = ControlPlane::start(&args.cp_name).await?;
    let client = cp.client().await?;
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let mut crds = vec![
        repo_root().join("manifests/crds/gitrepositories.yaml"),
        repo_root().join("manifests/crds/ocirepositories.yaml"),
        repo_root().join("manifests/crds/kustomizations.yaml"),
    ];
    if args.impls.iter().any(|i| i == "flux") {
        crds.extend(flux_extra_source_crds()?);
    }
    kubectl::install_crds(&kubeconfig, &crds)?;
    create_namespace(&client, "flux-system").await?;
    let logs = std::path::absolute(args.out.with_extension("logs"))?;
    std::fs::create_dir_all(&logs)?;
    log(format!("controller logs in {}", logs.display()));

    let timeout = Duration::from_secs(args.timeout_secs);
    let mut sides = Vec::new();
    let mut notes = Vec::new();
    for name in &args.impls {
        log(format!("starting {name}"));
        let side = start_side(args, &client, &cp, name, &url, &age.identity, &logs).await?;
        sides.push(side);
    }
    let revision = format!("main@sha1:{sha}");
    let started = Instant::now();
    for side in &mut sides {
        wait_obj(&mut side.ks, timeout, "the first apply", |k| {
            ks_done(k, &revision, None)
        })
        .await
        .with_context(|| format!("{}: first apply", side.name))?;
        wait_secrets(&client, &side.ns, args.secrets, 0, timeout).await?;
    }
    log(format!(
        "first applies done ({:.1} s, all at once); settling 10 s",
        started.elapsed().as_secs_f64()
    ));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let load_before = loadavg();

    let mut samples = Vec::new();
    let mut rev = 0;
    for round in 1..=args.runs {
        for mode in &args.modes {
            if mode == "revision" {
                rev += 1;
                repo.write("kustomization.yaml", &kustomization_yaml(args.secrets, rev))?;
                sha = repo
                    .commit(&format!("sops bench rev {rev}"))?
                    .trim()
                    .to_string();
                repo.push("main")?;
            }
            let k = sides.len();
            for j in 0..k {
                let side = &mut sides[(j + round) % k];
                tokio::time::sleep(Duration::from_secs(1)).await;
                let m = measure(&client, side, mode, &sha, rev, args.secrets, timeout)
                    .await
                    .with_context(|| format!("{} {mode} round {round}", side.name))?;
                log(format!(
                    "round {round} {mode} {}: {:.0} ms (kc CPU {:.0} ms; Secret requests {:?})",
                    side.name, m.ms, m.kc_cpu_ms, m.secret_requests
                ));
                let line = json!({"side": side.name, "mode": mode, "round": round, "ms": m.ms,
                    "kc_cpu_ms": m.kc_cpu_ms, "secret_requests": m.secret_requests,
                    "secrets": args.secrets});
                append_line(&args.out, &line.to_string())?;
                samples.push(Sample {
                    side: side.name.clone(),
                    mode: mode.clone(),
                    ms: m.ms,
                    kc_cpu_ms: m.kc_cpu_ms,
                    requests: metrics::total(&m.secret_requests),
                });
            }
        }
    }
    let load_after = loadavg();
    for side in &mut sides {
        if let Err(e) = side.kc.check_alive() {
            notes.push(format!("{e:#}"));
        }
    }
    drop(sides);
    Ok(Outcome {
        samples,
        notes,
        load: (load_before, load_after),
    })
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

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args = Args::parse();
    let flux_built = rflux_e2e::flux::flux_binary(FluxBinary::KustomizeController).is_some()
        && rflux_e2e::flux::flux_binary(FluxBinary::SourceController).is_some();
    if args.flux_bin.is_none() && !flux_built && args.impls.iter().any(|i| i == "flux") {
        log("Flux's controllers are not built (e2e/flux/build.sh): running ours only");
        args.impls.retain(|i| i != "flux");
    }
    let work = match tempfile::tempdir() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("rflux-sops-bench: {e}");
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
        Ok(o) => {
            let load = (o.load.0.as_str(), o.load.1.as_str());
            println!("{}", table(&args, &o.samples, load, &o.notes));
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rflux-sops-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
