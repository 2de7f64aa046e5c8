//! Running Argo CD sync waves and hooks (issue 17): the apply and prune stages' wave-by-wave paths, for
//! the Kustomizations [`super::waves::prepare`] planned. Kept apart from the planning so that
//! the pipeline uses the plan and these methods extend the pipeline without an import circle.

use std::time::{Duration, Instant};

use kube::ResourceExt;
use rflux_common::api::kustomization::ResourceInventory;
use rflux_common::runtime::StageError;
use rflux_common::runtime::conditions::{READY, RECONCILIATION_FAILED_REASON};
use serde_json::Value;

use super::context::{HEALTH_CHECK_FAILED_REASON, PRUNE_FAILED_REASON, patch_status};
use super::hooks::{Ledger, hook_error, hook_failure, hook_word, labels};
use super::pipeline::{Checked, Pipeline};
use super::spec::{WithoutFailFast, wait_targets};
use super::waves::Waves;
use crate::argo::{self, PlanOptions, Source, Step};
use crate::inventory;
use crate::ssa::wait::{WaitError, wait_for_applied, wait_for_termination};
use crate::ssa::{
    Action, ApplyOptions, ChangeSet, ObjectRef, Resolver, StatusReader, apply_all_with, delete_all,
};

/// Keeps a sync's changes, and what it applied so far for the inventory when it fails.
fn keep_applied(pipe: &mut Pipeline<'_>, changes: &ChangeSet) {
    let mut inv: ResourceInventory = pipe.status.inventory.clone().unwrap_or_default();
    let applied: Vec<ObjectRef> = changes.objects().cloned().collect();
    inventory::merge_back(&mut inv, &applied);
    pipe.status.inventory = Some(inv);
}

impl Pipeline<'_> {
    /// Records the Reconciling progress in the status at once, so it is visible while a wave
    /// is waited for.
    pub(super) async fn show_progress(&mut self, message: String) {
        self.progress(message);
        self.status.conditions = Some(self.conds.clone());
        if let Err(e) = patch_status(self.api, &self.ks.name_any(), &self.status).await {
            tracing::warn!(error = %e, "unable to record progress");
        }
        self.status.conditions = None;
    }

    /// Stage apply, Argo style: step by step (see the module doc); the hooks of a step are
    /// created after its objects and waited for with them (`hooks.rs`).
    pub(super) async fn apply_waves(
        &mut self,
        resolver: &Resolver,
        objects: Vec<Value>,
        opts: &ApplyOptions,
        revision: &str,
        checked: &Checked,
        waves: &Waves,
    ) -> Result<ChangeSet, StageError> {
        let started = Instant::now();
        let left = || checked.timeout.saturating_sub(started.elapsed());
        let n = waves.steps.len();
        let applies = waves.steps.iter().filter(|s| !s.apply.is_empty()).count();
        let mut objects: Vec<Option<Value>> = objects.into_iter().map(Some).collect();
        let mut changes = ChangeSet::default();
        let mut ledger = Ledger::default();
        let mut i = 0;
        for (k, step) in waves.steps.iter().enumerate() {
            let wave = step.wave;
            let mut targets = Vec::new();
            let mut wrote = false;
            if !step.apply.is_empty() {
                i += 1;
                self.show_progress(format!(
                    "Applying wave {i} of {applies} (wave {wave}) for revision {revision}"
                ))
                .await;
                let batch: Vec<Value> = step
                    .apply
                    .iter()
                    .filter_map(|&p| objects.get_mut(p).and_then(Option::take))
                    .collect();
                let applied = match apply_all_with(resolver, batch, opts).await {
                    Ok(c) => c,
                    Err(e) => {
                        changes.extend(e.partial.clone());
                        keep_applied(self, &changes);
                        let error = StageError::generic(
                            READY,
                            RECONCILIATION_FAILED_REASON,
                            format!(
                                "wave {wave} ({i} of {applies}): {e}; later waves were not applied"
                            ),
                        );
                        return Err(self
                            .sync_failed(
                                resolver,
                                &objects,
                                opts,
                                revision,
                                checked,
                                waves,
                                &ledger,
                                left(),
                                error,
                            )
                            .await);
                    }
                };
                self.changes_event(&applied, revision).await;
                targets = wait_targets(&applied, &self.owner);
                wrote = applied.has_changes();
                changes.extend(applied);
            }
            let mut hook_refs = Vec::new();
            if !step.hooks.is_empty() {
                let (phase, word, names) =
                    (step.phase, hook_word(&step.hooks), labels(&step.hooks));
                self.show_progress(format!(
                    "Running {phase} {word} {names} for revision {revision}"
                ))
                .await;
                match self
                    .create_hooks(resolver, &objects, &step.hooks, opts, left(), &mut ledger)
                    .await
                {
                    Ok(refs) => hook_refs = refs,
                    Err(e) => {
                        keep_applied(self, &changes);
                        let error = hook_error(format!(
                            "{phase} {word} {names} could not be created: {e}; the sync \
                             stopped, later waves and phases were not applied"
                        ));
                        return Err(self
                            .sync_failed(
                                resolver,
                                &objects,
                                opts,
                                revision,
                                checked,
                                waves,
                                &ledger,
                                left(),
                                error,
                            )
                            .await);
                    }
                }
            }
            // Argo does not wait for the last step unless it holds hooks.
            if k + 1 == n && hook_refs.is_empty() {
                break;
            }
            // The delay lets other controllers update the status of what was just written;
            // a wave that wrote nothing (a drift check finding none) needs none.
            if wrote {
                tokio::time::sleep(waves.delay).await;
            }
            let with_hooks = !hook_refs.is_empty();
            targets.extend(hook_refs.iter().cloned());
            if let Err(e) = self
                .wait_wave(resolver, &targets, left(), checked, with_hooks)
                .await
            {
                keep_applied(self, &changes);
                let error = match hook_failure(&e, &hook_refs, step.phase) {
                    Some(m) => hook_error(format!(
                        "{m}; the sync stopped, later waves and phases were not applied"
                    )),
                    None => StageError::generic(
                        READY,
                        HEALTH_CHECK_FAILED_REASON,
                        format!(
                            "{} wave {wave} is not healthy: {e}; later waves were not applied",
                            step.phase
                        ),
                    ),
                };
                return Err(self
                    .sync_failed(
                        resolver,
                        &objects,
                        opts,
                        revision,
                        checked,
                        waves,
                        &ledger,
                        left(),
                        error,
                    )
                    .await);
            }
        }
        self.hooks_succeeded(resolver, &ledger, left().max(Duration::from_secs(10)))
            .await;
        Ok(changes)
    }

    /// Waits until `targets` are healthy (kstatus, or `spec.healthCheckExprs`), holding no
    /// work slot meanwhile. With `fail_fast` (hooks among them), a Failed object ends the
    /// wait whatever `--fail-fast` says.
    pub(super) async fn wait_wave(
        &mut self,
        resolver: &Resolver,
        targets: &[ObjectRef],
        timeout: Duration,
        checked: &Checked,
        fail_fast: bool,
    ) -> Result<(), WaitError> {
        if targets.is_empty() {
            return Ok(());
        }
        let exprs: Option<&dyn StatusReader> =
            (!checked.health_exprs.is_empty()).then_some(&checked.health_exprs);
        let no_fail_fast = WithoutFailFast { inner: exprs };
        let reader = if self.ctx.fail_fast || fail_fast {
            exprs
        } else {
            Some(&no_fail_fast as &dyn StatusReader)
        };
        let had_slot = self.slot.take().is_some();
        let waited = wait_for_applied(resolver, targets, timeout, reader).await;
        if had_slot {
            self.slot = self.ctx.work_slots.clone().acquire_owned().await.ok();
        }
        waited
    }

    /// Stage prune, Argo style: the stale objects in the plan's prune order, wave by wave.
    /// Returns the inventory and whether anything was deleted; on a failure, the objects not
    /// deleted (those of later waves included) stay in the inventory.
    pub(super) async fn prune_waves(
        &mut self,
        resolver: &Resolver,
        new_inventory: &mut ResourceInventory,
        stale: &[ObjectRef],
        revision: &str,
        waves: &Waves,
        timeout: Duration,
    ) -> Result<bool, StageError> {
        let failed = |message: String| StageError::generic(READY, PRUNE_FAILED_REASON, message);
        let started = Instant::now();
        // Read the live objects: their annotations give the waves. Gone ones need no wave.
        // Until the plan is made, a failure keeps every stale object in the inventory.
        let (live_refs, steps) = match read_live(resolver, stale, waves.prune_last).await {
            Ok(x) => x,
            Err(e) => {
                inventory::merge_back(new_inventory, stale);
                return Err(failed(e));
            }
        };
        let mut pruned = false;
        let n = steps.len();
        for (k, step) in steps.iter().enumerate() {
            let i = k + 1;
            let mut refs = Vec::new();
            let mut skipped = ChangeSet::default();
            for t in &step.prune {
                let Source::Live(p) = t.source else { continue };
                let Some(r) = live_refs.get(p) else { continue };
                if t.options.prune {
                    refs.push(r.clone());
                } else {
                    // `Prune=false`: never pruned; it leaves the inventory, as in Argo.
                    skipped.push(r.clone(), Action::Skipped);
                }
            }
            self.changes_event(&skipped, revision).await;
            if refs.is_empty() {
                continue;
            }
            self.show_progress(format!(
                "Pruning wave {i} of {n} (wave {}) for revision {revision}",
                step.wave
            ))
            .await;
            // delete_all deletes in reverse order: give it apply order.
            refs.sort_by(crate::ssa::apply_order);
            let deleted = match delete_all(resolver, &refs, &self.owner).await {
                Ok(d) => d,
                Err(e) => {
                    inventory::merge_back(new_inventory, &e.not_deleted);
                    keep_later(new_inventory, steps.get(i..).unwrap_or(&[]), &live_refs);
                    return Err(failed(format!(
                        "wave {} ({i} of {n}): {e}; later waves were not pruned",
                        step.wave
                    )));
                }
            };
            pruned |= deleted.has_changes();
            self.changes_event(&deleted, revision).await;
            if i == n {
                break;
            }
            let gone: Vec<ObjectRef> = deleted
                .entries
                .iter()
                .filter(|e| e.action == Action::Deleted)
                .map(|e| e.object.clone())
                .collect();
            let left = timeout.saturating_sub(started.elapsed());
            if let Err(e) = wait_for_termination(resolver, &gone, left).await {
                inventory::merge_back(new_inventory, &gone);
                keep_later(new_inventory, steps.get(i..).unwrap_or(&[]), &live_refs);
                return Err(failed(format!(
                    "wave {} ({i} of {n}) was not deleted: {e}; later waves were not pruned",
                    step.wave
                )));
            }
            tokio::time::sleep(waves.delay).await;
        }
        Ok(pruned)
    }
}

/// Reads the stale objects that still exist and plans their prune steps.
async fn read_live(
    resolver: &Resolver,
    stale: &[ObjectRef],
    prune_last: bool,
) -> Result<(Vec<ObjectRef>, Vec<Step>), String> {
    let mut live_refs = Vec::new();
    let mut live = Vec::new();
    for obj in stale {
        let api = resolver.api(obj).await.map_err(|e| e.to_string())?;
        let got = api
            .get_opt(&obj.name)
            .await
            .map_err(|e| format!("{} query failed: {e}", obj.subject()))?;
        if let Some(o) = got {
            live.push(serde_json::to_value(&o).map_err(|e| e.to_string())?);
            live_refs.push(obj.clone());
        }
    }
    let options = PlanOptions {
        prune_last,
        ..PlanOptions::default()
    };
    let steps = argo::plan_with(&[], &live, &options)
        .map_err(|e| format!("Argo sync semantics: {e}"))?
        .steps;
    Ok((live_refs, steps))
}

/// Keeps the objects of the steps not run in the inventory.
fn keep_later(inv: &mut ResourceInventory, later: &[Step], live_refs: &[ObjectRef]) {
    let refs: Vec<ObjectRef> = later
        .iter()
        .flat_map(|s| s.prune.iter())
        .filter_map(|t| match t.source {
            Source::Live(p) => live_refs.get(p).cloned(),
            _ => None,
        })
        .collect();
    inventory::merge_back(inv, &refs);
}
