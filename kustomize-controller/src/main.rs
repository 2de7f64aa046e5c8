//! kustomize-controller: Kustomization reconciliation (build, apply, prune, health).
//!
//! Without a subcommand the binary runs the controller (Flux's flags and defaults); subcommands
//! are one-shot tools.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rflux_common::runtime::flags::{KUSTOMIZE_FEATURE_GATES, parse_feature_gates};
use rflux_common::runtime::{KustomizeControllerFlags, Manager, RuntimeError, init_logging};
use rflux_kustomize::{BuildOptions, LoadRestrictor};

const CONTROLLER_NAME: &str = "kustomize-controller";

/// Flux-compatible kustomize-controller.
#[derive(Debug, Parser)]
#[command(name = CONTROLLER_NAME, version, about)]
struct Cli {
    /// One-shot tool; without a subcommand the controller runs.
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    flags: KustomizeControllerFlags,
}

/// One-shot subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Build a kustomization directory and write the objects as multi-document YAML to
    /// stdout, like `kustomize build`.
    Build {
        /// The directory that holds kustomization.yaml.
        dir: PathBuf,
        /// `LoadRestrictionsRootOnly` (kustomize's default) or `LoadRestrictionsNone`.
        #[arg(long, default_value = "LoadRestrictionsRootOnly")]
        load_restrictor: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(cmd) = cli.command {
        return match cmd {
            Command::Build {
                dir,
                load_restrictor,
            } => build_command(&dir, &load_restrictor),
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{CONTROLLER_NAME}: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.flags)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "unable to run {CONTROLLER_NAME}");
            eprintln!("{CONTROLLER_NAME}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `kustomize-controller build <dir>`: the engine as a command.
fn build_command(dir: &Path, load_restrictor: &str) -> ExitCode {
    let restrictor = match load_restrictor {
        "LoadRestrictionsRootOnly" | "rootOnly" => LoadRestrictor::RootOnly,
        "LoadRestrictionsNone" | "none" => LoadRestrictor::None,
        other => {
            eprintln!(
                "Error: unknown load restrictor '{other}' (use LoadRestrictionsRootOnly or LoadRestrictionsNone)"
            );
            return ExitCode::FAILURE;
        }
    };
    let opts = BuildOptions {
        load_restrictor: restrictor,
        ..BuildOptions::default()
    };
    match rflux_kustomize::build(dir, &opts) {
        Ok(resources) => {
            let objects: Vec<serde_json::Value> = resources.into_iter().map(|r| r.obj).collect();
            let mut stdout = std::io::stdout().lock();
            match stdout.write_all(rflux_kustomize::to_yaml_stream(&objects).as_bytes()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("Error: writing output: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("Error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(flags: KustomizeControllerFlags) -> Result<(), RuntimeError> {
    init_logging(flags.runtime.log_level, flags.runtime.log_encoding)?;
    let gates = parse_feature_gates(&flags.runtime.feature_gates, KUSTOMIZE_FEATURE_GATES)?;
    for name in flags.inert_flags_in_use() {
        tracing::info!(
            flag = name,
            "flag accepted for Flux compatibility but has no effect yet"
        );
    }
    tracing::info!(
        concurrent = flags.concurrent,
        no_cross_namespace_refs = flags.no_cross_namespace_refs,
        feature_gates = ?gates,
        "starting {CONTROLLER_NAME}"
    );
    let (manager, tasks) = Manager::start(CONTROLLER_NAME, &flags.runtime).await?;
    // Registered before leadership, like controller-runtime: non-leaders expose zeroed series.
    let controller_metrics = manager
        .metrics
        .register_controller("kustomization", flags.concurrent);
    manager
        .run(tasks, move |_mgr, stop| async move {
            // The Kustomization reconciler plugs in here:
            // `rflux_common::runtime::run_controller(_mgr.watch_api::<Kustomization>(), settings,
            // controller_metrics, min/max retry delay, ctx, reconcile, stop).await`.
            // Until then the controller serves health, metrics and the lease, and waits.
            let _ = controller_metrics;
            stop.cancelled().await;
            Ok(())
        })
        .await
}
