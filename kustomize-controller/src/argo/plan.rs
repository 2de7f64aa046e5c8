//! The plan of one Argo-style sync: which objects are applied or pruned, in which
//! (phase, wave) steps (§1.2, §1.3), and the deletion order of a Kustomization (§1.7).

use std::fmt;

use serde_json::Value;

use super::annotations::{annotation_csv, wave, wave_notes};
use super::error::ArgoError;
use super::hook::{Hook, HookNaming, Phase, Role, classify, hook_name};
use super::keys::HELM_RESOURCE_POLICY;
use super::options::{Side, SyncOptions, object_sync_options};
use super::order;
use super::task::{Meta, Source, Task};

/// Inputs of a plan besides the objects.
#[derive(Clone, Debug, Default)]
pub struct PlanOptions {
    /// Argo's destination namespace (Flux: `spec.targetNamespace`). Argo gives it to every
    /// object without a namespace; here it is only used to find the Namespace an object needs
    /// (the fix-up of §1.3); the objects are not changed.
    pub destination_namespace: Option<String>,
    /// How hooks without `metadata.name` are named (§2.3). Without it they keep their
    /// `generateName` prefix, which is also what they are sorted by.
    pub hook_naming: Option<HookNaming>,
    /// Kustomization-level `PruneLast=true`.
    pub prune_last: bool,
    /// The namespace generated for `CreateNamespace=true` (see [`super::namespace`]): a
    /// PreSync task (§4.7).
    pub managed_namespace: Option<Value>,
}

/// Why an object gets no task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeftOutReason {
    /// `hook: Skip`: never applied, no status (§2.1).
    Skip,
    /// A hook with no sync phase (only `PreDelete`/`PostDelete`, Helm `test`, unknown types):
    /// not applied during syncs (§2.1).
    NoSyncPhase,
    /// A prune candidate that is a hook or `Skip`: never pruned (§1.2, §2.1).
    NotPrunable,
}

/// An object that gets no task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftOut {
    /// The object.
    pub source: Source,
    /// `Kind/namespace/name`.
    pub object: String,
    /// Why.
    pub reason: LeftOutReason,
}

/// Something Argo ignores in an object's annotations, for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// `Kind/namespace/name`.
    pub object: String,
    /// What was ignored.
    pub message: String,
}

/// One (phase, wave) group: Argo runs its prunes, then its applies, and (if it is not the
/// last step) waits for them before the next step (§1.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The phase.
    pub phase: Phase,
    /// The wave.
    pub wave: i64,
    /// Deletions, in Argo's order.
    pub prune: Vec<Task>,
    /// Applies: Argo's order, except that core Namespaces and then CRDs come first (an rflux
    /// rule, so the apply can treat them as Flux's cluster-definition stage within the step).
    pub apply: Vec<Task>,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} wave {}", self.phase, self.wave)
    }
}

/// The plan of a sync.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The steps, in order; none is empty.
    pub steps: Vec<Step>,
    /// Objects that get no task.
    pub left_out: Vec<LeftOut>,
    /// Values Argo ignores.
    pub notes: Vec<Note>,
}

impl Plan {
    /// The positions of the desired objects that are managed (ordinary objects: the inventory);
    /// hooks and skipped objects are not.
    pub fn managed(&self) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .tasks()
            .filter(|t| t.hook.is_none())
            .filter_map(|t| match t.source {
                Source::Desired(i) => Some(i),
                _ => None,
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Every task, in order.
    pub fn tasks(&self) -> impl Iterator<Item = &Task> {
        self.steps
            .iter()
            .flat_map(|s| s.prune.iter().chain(s.apply.iter()))
    }

    /// The SyncFail tasks: run all at once when the sync fails, waves ignored (§1.6).
    pub fn sync_fail(&self) -> Vec<&Task> {
        self.tasks()
            .filter(|t| t.phase == Phase::SyncFail)
            .collect()
    }

    /// Whether the sync spans more than one step outside SyncFail (then every step but the
    /// last is health-gated, §1.4).
    pub fn is_multi_step(&self) -> bool {
        self.steps
            .iter()
            .filter(|s| s.phase != Phase::SyncFail)
            .count()
            > 1
    }
}

/// The plan of applying `objects` (no prune, default options).
pub fn plan(objects: &[Value]) -> Result<Plan, ArgoError> {
    plan_with(objects, &[], &PlanOptions::default())
}

/// The plan of applying `desired` and pruning `to_prune` (live objects that are in the
/// inventory and no longer desired).
pub fn plan_with(
    desired: &[Value],
    to_prune: &[Value],
    options: &PlanOptions,
) -> Result<Plan, ArgoError> {
    let mut plan = Plan::default();
    let mut tasks = Vec::new();
    for (i, obj) in desired.iter().enumerate() {
        add_desired(&mut plan, &mut tasks, obj, Source::Desired(i), i, options)?;
    }
    if let Some(ns) = &options.managed_namespace {
        add_desired(
            &mut plan,
            &mut tasks,
            ns,
            Source::ManagedNamespace,
            0,
            options,
        )?;
    }
    for (i, obj) in to_prune.iter().enumerate() {
        add_prune(&mut plan, &mut tasks, obj, i)?;
    }
    mirror_prune_waves(&mut tasks);
    prune_last(&mut tasks, options.prune_last);
    order::sort(&mut tasks);
    plan.steps = group(tasks);
    Ok(plan)
}

fn add_desired(
    plan: &mut Plan,
    tasks: &mut Vec<Task>,
    obj: &Value,
    source: Source,
    index: usize,
    options: &PlanOptions,
) -> Result<(), ArgoError> {
    let meta = Meta::read(obj, index)?;
    let label = meta.label();
    let mut notes = wave_notes(obj);
    let role = classify(obj, &mut notes);
    let left_out = match &role {
        Role::Skip => Some(LeftOutReason::Skip),
        Role::Hook(h) if h.phases.is_empty() => Some(LeftOutReason::NoSyncPhase),
        Role::Hook(_) => None,
        Role::Resource if meta.name.is_empty() => {
            return Err(ArgoError::MissingField {
                index,
                field: "metadata.name",
            });
        }
        Role::Resource => None,
    };
    if let Some(reason) = left_out {
        plan.left_out.push(LeftOut {
            source,
            object: label.clone(),
            reason,
        });
        push_notes(plan, &label, notes);
        return Ok(());
    }
    let sync_options = object_sync_options(obj, Side::Desired, &label, &mut notes)?;
    match role {
        Role::Hook(h) => {
            for &phase in &h.phases {
                let mut t = task(
                    obj,
                    &meta,
                    source,
                    phase,
                    Some(h.clone()),
                    sync_options,
                    options,
                );
                if meta.name.is_empty() {
                    t.generated_name = true;
                    if let Some(naming) = &options.hook_naming {
                        t.name = hook_name(obj, phase, naming);
                    }
                }
                tasks.push(t);
            }
        }
        _ => {
            // §4.7: the generated namespace is applied by a PreSync task.
            let phase = match source {
                Source::ManagedNamespace => Phase::PreSync,
                _ => Phase::Sync,
            };
            tasks.push(task(obj, &meta, source, phase, None, sync_options, options));
        }
    }
    push_notes(plan, &label, notes);
    Ok(())
}

fn add_prune(
    plan: &mut Plan,
    tasks: &mut Vec<Task>,
    obj: &Value,
    index: usize,
) -> Result<(), ArgoError> {
    let meta = Meta::read(obj, index)?;
    let label = meta.label();
    let mut notes = Vec::new();
    if classify(obj, &mut notes) != Role::Resource {
        plan.left_out.push(LeftOut {
            source: Source::Live(index),
            object: label,
            reason: LeftOutReason::NotPrunable,
        });
        return Ok(());
    }
    let sync_options = object_sync_options(obj, Side::Live, &label, &mut notes)?;
    let source = Source::Live(index);
    let defaults = PlanOptions::default();
    tasks.push(task(
        obj,
        &meta,
        source,
        Phase::Sync,
        None,
        sync_options,
        &defaults,
    ));
    Ok(())
}

fn task(
    obj: &Value,
    meta: &Meta,
    source: Source,
    phase: Phase,
    hook: Option<Hook>,
    sync_options: SyncOptions,
    options: &PlanOptions,
) -> Task {
    let own_wave = wave(obj);
    let ref_namespace = if meta.namespace.is_empty() {
        options.destination_namespace.clone().unwrap_or_default()
    } else {
        meta.namespace.clone()
    };
    let name = if meta.name.is_empty() {
        meta.generate_name.clone()
    } else {
        meta.name.clone()
    };
    Task {
        source,
        phase,
        wave: own_wave,
        own_wave,
        group: meta.group.clone(),
        kind: meta.kind.clone(),
        namespace: meta.namespace.clone(),
        name,
        generated_name: false,
        hook,
        options: sync_options,
        defines: meta.defines(obj),
        ref_namespace,
    }
}

fn push_notes(plan: &mut Plan, label: &str, notes: Vec<String>) {
    plan.notes.extend(notes.into_iter().map(|message| Note {
        object: label.to_string(),
        message,
    }));
}

/// §1.3: the distinct waves of the prune tasks, sorted, swapped symmetrically (lowest with
/// highest), so objects of high waves are deleted first.
fn mirror_prune_waves(tasks: &mut [Task]) {
    let mut waves: Vec<i64> = tasks
        .iter()
        .filter(|t| t.is_prune())
        .map(|t| t.wave)
        .collect();
    waves.sort_unstable();
    waves.dedup();
    let last = waves.len().saturating_sub(1);
    for t in tasks.iter_mut().filter(|t| t.is_prune()) {
        if let Ok(k) = waves.binary_search(&t.wave)
            && let Some(&mirrored) = waves.get(last - k)
        {
            t.wave = mirrored;
        }
    }
}

/// §1.3 `PruneLast=true`: the prune task's wave becomes the highest Sync-phase wave (after
/// mirroring; counted from 0, as Argo's code does) plus one.
fn prune_last(tasks: &mut [Task], all: bool) {
    let last = tasks
        .iter()
        .filter(|t| t.phase == Phase::Sync)
        .map(|t| t.wave)
        .fold(0, i64::max)
        .saturating_add(1);
    for t in tasks.iter_mut() {
        if t.is_prune() && (all || t.options.prune_last) {
            t.wave = last;
        }
    }
}

/// Consecutive tasks of the same (phase, wave) form a step.
fn group(tasks: Vec<Task>) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for t in tasks {
        let same = steps
            .last()
            .is_some_and(|s| s.phase == t.phase && s.wave == t.wave);
        if !same {
            steps.push(Step {
                phase: t.phase,
                wave: t.wave,
                prune: Vec::new(),
                apply: Vec::new(),
            });
        }
        if let Some(step) = steps.last_mut() {
            if t.is_prune() {
                step.prune.push(t);
            } else {
                step.apply.push(t);
            }
        }
    }
    for step in &mut steps {
        // Stable: Argo's order is kept inside each class.
        step.apply.sort_by_key(|t| {
            if t.is_namespace() {
                0
            } else if t.is_crd() {
                1
            } else {
                2
            }
        });
    }
    steps
}

/// The order of a Kustomization's deletion (§1.7): one wave at a time, highest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deletion {
    /// `(wave, positions of the objects)`, highest wave first.
    pub waves: Vec<(i64, Vec<usize>)>,
    /// Positions of the objects kept: `Delete=false`, or `helm.sh/resource-policy: keep`.
    pub kept: Vec<usize>,
}

/// The deletion order of `live` objects when their Kustomization is deleted: waves from the
/// live objects' annotations, highest first; the next wave starts once every object of the
/// previous one is gone. Argo never deletes CRDs because it does not track them; whether CRDs
/// are deleted stays the caller's (Flux's `deletionPolicy`) decision.
pub fn deletion_order(live: &[Value]) -> Result<Deletion, ArgoError> {
    let mut out = Deletion::default();
    let mut by_wave: Vec<(i64, usize)> = Vec::new();
    for (i, obj) in live.iter().enumerate() {
        let label = Meta::read(obj, i)?.label();
        let options = object_sync_options(obj, Side::Live, &label, &mut Vec::new())?;
        if !options.delete || annotation_csv(obj, HELM_RESOURCE_POLICY).contains(&"keep") {
            out.kept.push(i);
        } else {
            by_wave.push((wave(obj), i));
        }
    }
    by_wave.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (w, i) in by_wave {
        match out.waves.last_mut() {
            Some((last, group)) if *last == w => group.push(i),
            _ => out.waves.push((w, vec![i])),
        }
    }
    Ok(out)
}

/// The prune steps alone (no apply): mirrored waves, `PruneLast` (§1.3).
pub fn prune_order(to_prune: &[Value]) -> Result<Vec<Step>, ArgoError> {
    Ok(plan_with(&[], to_prune, &PlanOptions::default())?.steps)
}
