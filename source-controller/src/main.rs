//! source-controller: GitRepository and OCIRepository reconciliation and artifact storage.
//!
//! Without a subcommand the binary runs the controller (Flux's flags and defaults); subcommands
//! are one-shot tools.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::ocirepository::OciRepository;
use rflux_common::runtime::controller::ControllerSettings;
use rflux_common::runtime::flags::{
    SOURCE_FEATURE_GATES, SOURCE_UNSUPPORTED_GATES, parse_feature_gates, parse_listen_addr,
    refuse_unsupported,
};
use rflux_common::runtime::process;
use rflux_common::runtime::{Manager, RuntimeError, init_logging};
use source_controller::artifact::{
    ArtifactError, DigestAlgorithm, Storage, StorageOptions, package_to_file, serve,
};
use source_controller::flags::SourceControllerFlags;
use source_controller::gitrepository::{CONTROLLER_NAME, Context, run_gitrepository_controller};
use source_controller::ocirepository::{OciSettings, run_ocirepository_controller};

/// Flux-compatible source-controller.
#[derive(Debug, Parser)]
#[command(name = CONTROLLER_NAME, version, about)]
struct Cli {
    /// One-shot tool; without a subcommand the controller runs.
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    flags: SourceControllerFlags,
}

/// One-shot subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Packages a directory into a deterministic tar.gz artifact and prints its digest.
    Package {
        /// Directory to package.
        dir: PathBuf,
        /// Output file.
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// Exclusion patterns in `.sourceignore` syntax (like `spec.ignore`; newline separated).
        #[arg(long)]
        ignore: Option<String>,
    },
}

/// Why the controller could not run.
#[derive(Debug, thiserror::Error)]
enum MainError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("artifact storage: {0}")]
    Storage(#[from] ArtifactError),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(cmd) = cli.command {
        return match cmd {
            Command::Package {
                dir,
                output,
                ignore,
            } => match package_to_file(&dir, &output, ignore.as_deref()) {
                Ok(digest) => {
                    println!("{digest}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{CONTROLLER_NAME} package: {e}");
                    ExitCode::FAILURE
                }
            },
        };
    }
    process::cap_malloc_arenas(CONTROLLER_NAME);
    let runtime = match process::build_runtime(cli.flags.concurrent) {
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

fn build_storage(flags: &SourceControllerFlags) -> Result<Storage, MainError> {
    let algo: DigestAlgorithm = flags
        .artifact_digest_algo
        .parse()
        .map_err(ArtifactError::from)?;
    let hostname = flags.advertised_storage_addr()?;
    Ok(Storage::new(StorageOptions {
        root: flags.storage_path.clone(),
        hostname,
        retention_ttl: flags.artifact_retention_ttl,
        retention_records: usize::try_from(flags.artifact_retention_records).unwrap_or(usize::MAX),
        digest_algorithm: algo,
    })?)
}

async fn run(flags: SourceControllerFlags) -> Result<(), MainError> {
    init_logging(flags.runtime.log_level, flags.runtime.log_encoding)
        .map_err(RuntimeError::from)?;
    let gates = parse_feature_gates(&flags.runtime.feature_gates, SOURCE_FEATURE_GATES)
        .map_err(RuntimeError::from)?;
    refuse_unsupported(&gates, SOURCE_UNSUPPORTED_GATES).map_err(RuntimeError::from)?;
    for name in flags.inert_flags_in_use() {
        tracing::info!(
            flag = name,
            "flag accepted for Flux compatibility but has no effect yet"
        );
    }
    tracing::info!(
        concurrent = flags.concurrent,
        storage_path = %flags.storage_path.display(),
        storage_addr = %flags.storage_addr,
        feature_gates = ?gates,
        "starting {CONTROLLER_NAME}"
    );
    let (manager, tasks) = Manager::start(CONTROLLER_NAME, &flags.runtime).await?;
    // Like Flux: the manager (client) first, then the storage.
    let storage = build_storage(&flags)?;
    let storage_addr = parse_listen_addr(&flags.storage_addr).map_err(RuntimeError::from)?;
    tracing::info!(host = %storage.hostname(), "artifact storage ready");
    // Registered before leadership, like controller-runtime: non-leaders expose zeroed series.
    let controller_metrics = manager
        .metrics
        .register_controller("gitrepository", flags.concurrent);
    let oci_metrics = manager
        .metrics
        .register_controller("ocirepository", flags.concurrent);
    let oci = OciSettings {
        max_layer_bytes: flags.oci_max_layer_size,
        ..OciSettings::default()
    };
    let concurrent = flags.concurrent;
    manager
        .run(tasks, move |mgr, stop| async move {
            // The artifact server runs only while this replica leads (like Flux).
            let server = storage_addr.map(|addr| {
                let root = storage.root().to_path_buf();
                let stop = stop.clone();
                tracing::info!(addr = %addr, "starting artifact server");
                tokio::spawn(async move {
                    let res = serve(root, addr, {
                        let stop = stop.clone();
                        async move { stop.cancelled().await }
                    })
                    .await;
                    if let Err(e) = &res {
                        // Without its file server the controller is useless: stop it.
                        tracing::error!(error = %e, "artifact server failed");
                        stop.cancel();
                    }
                    res
                })
            });
            let ctx = Arc::new(Context {
                client: mgr.client.clone(),
                storage,
                recorder: mgr.recorder.clone(),
                jitter_percentage: mgr.flags.interval_jitter_percentage,
                requeue_dependency: mgr.flags.requeue_dependency,
                oci,
            });
            let settings = ControllerSettings {
                name: "gitrepository".into(),
                group: "source.toolkit.fluxcd.io".into(),
                kind: "GitRepository".into(),
                concurrency: concurrent,
                label_selector: mgr.flags.watch_label_selector.clone(),
            };
            let oci_settings = ControllerSettings {
                name: "ocirepository".into(),
                kind: "OCIRepository".into(),
                ..settings.clone()
            };
            let retry = (mgr.flags.min_retry_delay, mgr.flags.max_retry_delay);
            // Both kinds run side by side, like Flux's source-controller; when one stops (on
            // shutdown), the other is stopped too.
            tokio::join!(
                async {
                    run_gitrepository_controller(
                        mgr.watch_api::<GitRepository>(),
                        mgr.watch_api::<PartialObjectMeta<Secret>>(),
                        settings,
                        controller_metrics,
                        retry.0,
                        retry.1,
                        ctx.clone(),
                        stop.clone(),
                        mgr.shards.clone(),
                    )
                    .await;
                    stop.cancel();
                },
                async {
                    run_ocirepository_controller(
                        mgr.watch_api::<OciRepository>(),
                        oci_settings,
                        oci_metrics,
                        retry,
                        ctx.clone(),
                        stop.clone(),
                        mgr.shards.clone(),
                    )
                    .await;
                    stop.cancel();
                },
            );
            stop.cancel();
            if let Some(h) = server {
                match h.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        return Err(RuntimeError::Controller(format!("artifact server: {e}")));
                    }
                    Err(e) => {
                        return Err(RuntimeError::Controller(format!(
                            "artifact server task failed: {e}"
                        )));
                    }
                }
            }
            Ok(())
        })
        .await?;
    Ok(())
}
