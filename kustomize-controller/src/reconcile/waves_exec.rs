//! Running Argo CD sync waves and hooks (issue 17): the apply and prune stages' wave-by-wave paths, for
//! the Kustomizations [`super::waves::prepare`] planned. Kept apart from the planning so that
//! the pipeline uses the plan and these methods extend the pipeline without an import circle.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
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
use super::waves::{HookRun, Waves};
use crate::argo::task::object_label;
use crate::argo::{self, PlanOptions, Source, Step};
use crate::inventory;
use crate::ssa::wait::{WaitError, wait_for_applied, wait_for_termination};
use crate::ssa::{
    Action, ApplyOptions, ChangeSet, ObjectRef, ResolveError, Resolver, StatusReader,
    apply_all_with, delete_all,
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
        // Argo's dry-run before anything is written (§1.4, §4.5), reduced to what it
        // decides on its own: whether every kind is served. Only when the revision or the
        // manifests changed: a no-op reconcile or a drift repair asks no discovery.
        if waves.run_hooks {
            check_kinds(resolver, &kinds_to_check(&objects, waves)).await?;
        }
        // `Replace=true`/`Force=true`: the force path of these objects (hooks included).
        let with_force;
        let opts = if waves.force.is_empty() {
            opts
        } else {
            with_force = ApplyOptions {
                force_objects: Arc::new(forced_refs(&objects, waves)),
                ..opts.clone()
            };
            &with_force
        };
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
        if let Some(o) = resolver.get_live(obj).await? {
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

/// Every hook this sync may create, with the object it comes from.
fn all_hooks(waves: &Waves) -> impl Iterator<Item = &HookRun> {
    waves
        .steps
        .iter()
        .flat_map(|s| s.hooks.iter())
        .chain(waves.sync_fail.iter())
}

/// The identity an object is applied with: a hook under its (maybe generated) name.
fn applied_ref(obj: &Value, hook_name: Option<&str>) -> Option<ObjectRef> {
    match hook_name {
        None => ObjectRef::from_value(obj).ok(),
        Some(name) => {
            let mut named = obj.clone();
            let meta = named.get_mut("metadata")?.as_object_mut()?;
            meta.insert("name".into(), name.into());
            ObjectRef::from_value(&named).ok()
        }
    }
}

/// The objects with `Replace=true`/`Force=true`, as they are applied.
fn forced_refs(objects: &[Value], waves: &Waves) -> HashSet<ObjectRef> {
    let plain = waves.steps.iter().flat_map(|s| s.apply.iter()).copied();
    let plain = plain
        .filter(|p| waves.force.contains(p))
        .filter_map(|p| applied_ref(objects.get(p)?, None));
    let hooks = all_hooks(waves)
        .filter(|h| waves.force.contains(&h.position))
        .filter_map(|h| applied_ref(objects.get(h.position)?, Some(&h.name)));
    plain.chain(hooks).collect()
}

/// The kinds that must be served before the sync starts: one `(group/version/kind, object)`
/// per kind, of the objects and hooks applied in this sync's steps, but not those with
/// `SkipDryRunOnMissingResource=true` or whose CRD is in the sync (§4.5).
fn kinds_to_check(objects: &[Value], waves: &Waves) -> Vec<(ObjectRef, String)> {
    let in_order = waves.steps.iter().flat_map(|s| {
        let plain = s.apply.iter().map(|&p| (p, None));
        plain.chain(s.hooks.iter().map(|h| (h.position, Some(h.label.clone()))))
    });
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (p, label) in in_order {
        if waves.skip_dry_run.contains(&p) {
            continue;
        }
        let Some(obj) = objects.get(p) else { continue };
        let text = |ptr: &str| obj.pointer(ptr).and_then(Value::as_str).unwrap_or("");
        let (group, version) = rflux_core::split_api_version(text("/apiVersion"));
        let gvk = ObjectRef {
            group: group.to_string(),
            version: version.to_string(),
            kind: text("/kind").to_string(),
            ..ObjectRef::default()
        };
        if gvk.kind.is_empty()
            || !seen.insert((gvk.group.clone(), gvk.version.clone(), gvk.kind.clone()))
        {
            continue;
        }
        let label = label.unwrap_or_else(|| {
            object_label(
                &gvk.kind,
                text("/metadata/namespace"),
                text("/metadata/name"),
            )
        });
        out.push((gvk, label));
    }
    out
}

/// Fails the sync, before anything is written, when a kind of `kinds` is not served (Argo
/// fails the whole operation on such a dry-run error, §4.5).
async fn check_kinds(resolver: &Resolver, kinds: &[(ObjectRef, String)]) -> Result<(), StageError> {
    let mut missing = Vec::new();
    for (gvk, label) in kinds {
        match resolver.resolve(gvk).await {
            Ok(_) => {}
            Err(e @ ResolveError::NoMatch { .. }) => missing.push(format!("{label}: {e}")),
            Err(e) => {
                return Err(StageError::generic(
                    READY,
                    RECONCILIATION_FAILED_REASON,
                    format!("{label}: {e}; nothing was applied"),
                ));
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(StageError::generic(
        READY,
        RECONCILIATION_FAILED_REASON,
        format!(
            "Argo sync semantics: {}; nothing was applied (a kind installed by an earlier wave \
             needs argocd.argoproj.io/sync-options: SkipDryRunOnMissingResource=true)",
            missing.join("; ")
        ),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::argo::{DeletePolicy, Phase};
    use crate::reconcile::waves::WaveStep;
    use serde_json::json;

    fn obj(api_version: &str, kind: &str, name: &str) -> Value {
        json!({"apiVersion": api_version, "kind": kind,
               "metadata": {"name": name, "namespace": "app"}})
    }

    fn hook(position: usize, name: &str) -> HookRun {
        HookRun {
            position,
            phase: Phase::PreSync,
            name: name.into(),
            label: format!("Job/app/{name}"),
            policies: vec![DeletePolicy::BeforeHookCreation],
        }
    }

    fn waves(force: &[usize], skip: &[usize]) -> Waves {
        Waves {
            steps: vec![
                WaveStep {
                    phase: Phase::PreSync,
                    wave: 0,
                    apply: vec![],
                    hooks: vec![hook(3, "gen-1a2b3c4-presync-1")],
                },
                WaveStep {
                    phase: Phase::Sync,
                    wave: -1,
                    apply: vec![0],
                    hooks: vec![],
                },
                WaveStep {
                    phase: Phase::Sync,
                    wave: 0,
                    apply: vec![1, 2, 4],
                    hooks: vec![],
                },
            ],
            sync_fail: vec![hook(5, "notify")],
            run_hooks: true,
            delay: Duration::ZERO,
            prune_last: false,
            force: force.iter().copied().collect(),
            skip_dry_run: skip.iter().copied().collect(),
        }
    }

    fn objects() -> Vec<Value> {
        let mut generated = obj("batch/v1", "Job", "");
        generated["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("name");
        generated["metadata"]["generateName"] = json!("gen-");
        vec![
            obj("v1", "ConfigMap", "a"),
            obj("example.com/v1", "Widget", "w1"),
            obj("example.com/v1", "Widget", "w2"),
            generated,
            obj("batch/v1", "Job", "once"),
            obj("batch/v1", "Job", "notify"),
        ]
    }

    #[test]
    fn forced_objects_are_named_as_applied() {
        let objs = objects();
        let refs = forced_refs(&objs, &waves(&[0, 3, 5], &[]));
        let mut names: Vec<String> = refs.iter().map(ObjectRef::subject).collect();
        names.sort();
        assert_eq!(
            names,
            vec![
                "ConfigMap/app/a",
                "Job/app/gen-1a2b3c4-presync-1",
                "Job/app/notify"
            ]
        );
        assert!(forced_refs(&objs, &waves(&[], &[])).is_empty());
    }

    #[test]
    fn kinds_checked_once_and_not_when_skipped() {
        let objs = objects();
        let kinds = |skip: &[usize]| -> Vec<(String, String)> {
            kinds_to_check(&objs, &waves(&[], skip))
                .into_iter()
                .map(|(gvk, label)| (gvk.api_version() + "/" + &gvk.kind, label))
                .collect()
        };
        // In step order, each kind once (the Job of the PreSync hook first); the SyncFail hook is not
        // part of the dry-run.
        assert_eq!(
            kinds(&[]),
            vec![
                (
                    "batch/v1/Job".to_string(),
                    "Job/app/gen-1a2b3c4-presync-1".to_string()
                ),
                ("v1/ConfigMap".into(), "ConfigMap/app/a".into()),
                ("example.com/v1/Widget".into(), "Widget/app/w1".into()),
            ]
        );
        // w1 skipped (the option): w2 still asks for the kind.
        assert_eq!(kinds(&[1])[2].1, "Widget/app/w2");
        assert!(kinds(&[1, 2]).iter().all(|(k, _)| !k.ends_with("Widget")));
    }
}
