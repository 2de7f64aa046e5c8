//! Flux-compatible server-side apply (`ssa.ApplyAllStaged`): staged apply with dry-run drift
//! detection, field-manager takeover and the `<group>/ssa`, `/reconcile` and `/force`
//! annotations. Objects an [`AppliedCache`](crate::AppliedCache) knows to be as last applied are
//! neither read, dry-run nor applied; objects it knows to be absent are created without a
//! dry-run, after the dry-runs of the stage and before its updates, with a rollback of the
//! creates if one fails.
//!
//! | file | what |
//! |---|---|
//! | `apply.rs` | the stages: plan every object of a stage, then write it |
//! | `apply/options.rs` | [`ApplyOptions`], [`ClaimCheck`] |
//! | `apply/one.rs` | one object's plan: GET, skip checks, dry-run, drift, cleanup, claims |
//! | `apply/plan.rs` | the pure decisions of the direct creates and their rollback |
//! | `apply/write.rs` | a stage's writes: creates (rollback on failure), then updates |

mod one;
mod options;
mod plan;
mod write;

use futures::StreamExt;
use kube::Client;
use serde_json::Value;

use one::{Plan, plan_one};
pub use options::{ApplyOptions, ClaimCheck};
pub use plan::{
    CreateOutcome, Created, Route, create_outcome, created_by_apply, rollback_targets, route,
    write_order,
};

use crate::changeset::ChangeSet;
use crate::errors::{ApplyError, ApplyErrorKind};
use crate::object::ObjectRef;
use crate::resolver::Resolver;
use crate::stage::{Stage, apply_order, stage_of};
use crate::wait;

/// Applies `objects` in Flux's stages and order with a fresh [`Resolver`].
pub async fn apply_all(
    client: Client,
    objects: Vec<Value>,
    opts: &ApplyOptions,
) -> Result<ChangeSet, ApplyError> {
    let resolver = Resolver::new(client);
    apply_all_with(&resolver, objects, opts).await
}

/// Applies `objects` in Flux's stages (definitions, classes, custom kinds, the rest), waiting
/// for the first two stages to become ready, sorted within each stage by Flux's kind order.
pub async fn apply_all_with(
    resolver: &Resolver,
    objects: Vec<Value>,
    opts: &ApplyOptions,
) -> Result<ChangeSet, ApplyError> {
    let mut changes = ChangeSet::default();
    let mut items = Vec::with_capacity(objects.len());
    for o in objects {
        let desired = opts.owner.prepare(o);
        match ObjectRef::from_value(&desired) {
            Ok(id) => items.push((id, desired)),
            Err(e) => {
                return Err(ApplyError {
                    kind: e.into(),
                    partial: changes,
                });
            }
        }
    }
    let mut stages: Vec<(Stage, Vec<(ObjectRef, Value)>)> = Vec::new();
    for stage in [
        Stage::ClusterDefinitions,
        Stage::ClassDefinitions,
        Stage::Custom,
        Stage::Rest,
    ] {
        let mut in_stage: Vec<(ObjectRef, Value)> = Vec::new();
        let mut rest = Vec::new();
        for (id, v) in items {
            if stage_of(&id, &opts.custom_stage_kinds) == stage {
                in_stage.push((id, v));
            } else {
                rest.push((id, v));
            }
        }
        items = rest;
        in_stage.sort_by(|a, b| apply_order(&a.0, &b.0));
        stages.push((stage, in_stage));
    }
    for (stage, objs) in stages {
        if objs.is_empty() {
            continue;
        }
        // Plans run concurrently (order kept); the writes then run one by one in order.
        // The futures are built before the stream (not in a `map` closure) so the caller's
        // future stays provably `Send` (rustc cannot generalise the closure's lifetimes).
        let futs: Vec<_> = objs
            .iter()
            .map(|(id, desired)| plan_one(resolver, id, desired, opts, true))
            .collect();
        let plans: Vec<Result<Plan, ApplyErrorKind>> = futures::stream::iter(futs)
            .buffered(opts.concurrency.max(1))
            .collect()
            .await;
        let mut planned = Vec::with_capacity(plans.len());
        for ((id, desired), plan) in objs.into_iter().zip(plans) {
            match plan {
                Ok(p) => planned.push((id, desired, p)),
                Err(kind) => {
                    return Err(ApplyError {
                        kind,
                        partial: changes,
                    });
                }
            }
        }
        // Every dry-run of the stage passed: creates, then updates (`write.rs`).
        let applied = match write::write_stage(resolver, opts, planned, &mut changes).await {
            Ok(applied) => applied,
            Err(kind) => {
                return Err(ApplyError {
                    kind,
                    partial: changes,
                });
            }
        };
        if matches!(stage, Stage::ClusterDefinitions | Stage::ClassDefinitions)
            && !applied.is_empty()
            && let Err(e) = wait::wait_for_with(resolver, &applied, opts.wait_timeout).await
        {
            return Err(ApplyError {
                kind: e.into(),
                partial: changes,
            });
        }
    }
    if opts.group_log {
        tracing::info!(output = ?changes.to_grouped_map(), "server-side apply completed");
    } else {
        tracing::info!(output = ?changes.to_map(), "server-side apply completed");
    }
    Ok(changes)
}
