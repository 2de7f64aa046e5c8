//! resourceset-controller: Flux Operator's ResourceSet and ResourceSetInputProvider
//! (`fluxcd.controlplane.io/v1`), both controllers in one process, like Flux Operator.
//! Events are recorded as `flux-operator`.

mod flags;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use kube::core::PartialObjectMeta;
use resourceset_controller::CONTROLLER_NAME;
use resourceset_controller::provider::{Context as ProviderContext, run_provider_controller};
use resourceset_controller::resourceset::{
    Context as ResourceSetContext, run_resourceset_controller,
};
use rflux_common::api::resourceset::ResourceSet;
use rflux_common::api::resourceset::keys::{GROUP, INPUT_PROVIDER_KIND, RESOURCESET_KIND};
use rflux_common::api::resourcesetinputprovider::ResourceSetInputProvider;
use rflux_common::runtime::client::load_config;
use rflux_common::runtime::controller::ControllerSettings;
use rflux_common::runtime::process;
use rflux_common::runtime::{Manager, RuntimeError, init_logging};

use crate::flags::ResourceSetControllerFlags;

/// The binary's name (the events' component is [`CONTROLLER_NAME`], as Flux Operator's).
const BINARY_NAME: &str = "resourceset-controller";

/// Flux Operator-compatible ResourceSet and ResourceSetInputProvider controller.
#[derive(Debug, Parser)]
#[command(name = BINARY_NAME, version, about)]
struct Cli {
    #[command(flatten)]
    flags: ResourceSetControllerFlags,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    process::cap_malloc_arenas(BINARY_NAME);
    let runtime = match process::build_runtime(cli.flags.concurrent) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{BINARY_NAME}: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.flags)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "unable to run {BINARY_NAME}");
            eprintln!("{BINARY_NAME}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(flags: ResourceSetControllerFlags) -> Result<(), RuntimeError> {
    init_logging(flags.runtime.log_level, flags.runtime.log_encoding)?;
    for name in flags.inert_flags_in_use() {
        tracing::info!(
            flag = name,
            "flag accepted for Flux Operator compatibility but has no effect yet"
        );
    }
    tracing::info!(
        concurrent = flags.concurrent,
        requeue_dependency = ?flags.runtime.requeue_dependency,
        "starting {BINARY_NAME}"
    );
    // Leases, metrics and events carry the Flux Operator name.
    let (manager, tasks) = Manager::start(CONTROLLER_NAME, &flags.runtime).await?;
    // The base configuration of the impersonating (service account) clients.
    let config = load_config(flags.runtime.kubeconfig.as_ref()).await?;
    // Registered before leadership, like controller-runtime: non-leaders expose zeroed series.
    let rset_metrics = manager
        .metrics
        .register_controller("resourceset", flags.concurrent);
    let rsip_metrics = manager
        .metrics
        .register_controller("resourcesetinputprovider", flags.concurrent);
    let concurrent = flags.concurrent;
    manager
        .run(tasks, move |mgr, stop| async move {
            let mut rset_ctx =
                ResourceSetContext::new(mgr.client.clone(), config, mgr.recorder.clone());
            rset_ctx.default_service_account = mgr.flags.default_service_account.clone();
            rset_ctx.requeue_dependency = mgr.flags.requeue_dependency;
            rset_ctx.fence = mgr.fence.clone();
            rset_ctx.watch_configs_label_selector = flags.watch_configs_label_selector.clone();
            let rsip_ctx = ProviderContext::new(mgr.client.clone(), mgr.recorder.clone());
            let rset_settings = ControllerSettings {
                name: "resourceset".into(),
                group: GROUP.into(),
                kind: RESOURCESET_KIND.into(),
                concurrency: concurrent,
                label_selector: mgr.flags.watch_label_selector.clone(),
            };
            let rsip_settings = ControllerSettings {
                name: "resourcesetinputprovider".into(),
                kind: INPUT_PROVIDER_KIND.into(),
                ..rset_settings.clone()
            };
            let retry = (mgr.flags.min_retry_delay, mgr.flags.max_retry_delay);
            // Both kinds run side by side; when one stops (on shutdown), the other is stopped
            // too.
            tokio::join!(
                async {
                    run_resourceset_controller(
                        mgr.watch_api::<ResourceSet>(),
                        rset_settings,
                        rset_metrics,
                        retry,
                        Arc::new(rset_ctx),
                        stop.clone(),
                    )
                    .await;
                    stop.cancel();
                },
                async {
                    run_provider_controller(
                        mgr.watch_api::<ResourceSetInputProvider>(),
                        mgr.watch_api::<PartialObjectMeta<ResourceSetInputProvider>>(),
                        rsip_settings,
                        rsip_metrics,
                        retry,
                        Arc::new(rsip_ctx),
                        stop.clone(),
                    )
                    .await;
                    stop.cancel();
                },
            );
            Ok(())
        })
        .await
}
