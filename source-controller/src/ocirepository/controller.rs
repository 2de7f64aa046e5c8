//! Runs the OCIRepository controller: the shared runner (Flux's predicate, workers, backoff,
//! metrics). Like Flux, no watch on Secrets: a changed pull Secret is seen at the next interval.

use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use rflux_common::api::ocirepository::OciRepository;
use rflux_common::runtime::CancellationToken;
use rflux_common::runtime::controller::{ControllerSettings, run_controller_sharded};
use rflux_common::runtime::metrics::ControllerMetrics;
use rflux_common::runtime::sharding::Shards;

use super::reconcile::reconcile;
use crate::source::Context;

/// Runs the OCIRepository controller until `stop` fires (with `shards`: only the objects of
/// the slots this replica holds).
pub async fn run_ocirepository_controller(
    repos: Api<OciRepository>,
    settings: ControllerSettings,
    metrics: ControllerMetrics,
    retry: (Duration, Duration),
    ctx: Arc<Context>,
    stop: CancellationToken,
    shards: Option<Shards>,
) {
    run_controller_sharded(
        repos,
        settings,
        metrics,
        retry.0,
        retry.1,
        ctx,
        reconcile,
        stop,
        shards,
        |controller| controller,
    )
    .await;
}
