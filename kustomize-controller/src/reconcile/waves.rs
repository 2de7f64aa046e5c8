//! Argo CD sync waves in the apply and prune stages (issue 17; `argo-semantics.md` §1), for
//! the Kustomizations that opt in: feature gate `ArgoSyncSemantics` and the annotation
//! `rflux.dev/argo-semantics: enabled`. Without both, [`prepare`] returns `None` and the
//! pipeline runs Flux's staged apply and prune, untouched.
//!
//! Apply: the Sync-phase objects, one wave at a time in plan order (Flux's staged apply inside a
//! wave). After every wave but the last: the inter-wave delay (skipped when the wave wrote
//! nothing), then a health wait on that wave's objects (Argo sleeps before it first reads
//! health, §1.5). A wave that is not healthy within
//! what is left of `spec.timeout` stops the sync; later waves are not applied.
//!
//! Prune: the stale objects, read live, in the plan's prune order (mirrored waves, `PruneLast`),
//! one wave at a time; each wave is deleted and waited for (gone) before the next one, and the
//! first failure stops the prune.
//!
//! Hooks (§2): PreSync, Sync, PostSync and SyncFail hooks run (`hooks.rs`) when the revision
//! or the manifests changed since the last successful sync; a no-op reconcile runs none.
//!
//! Per-object sync options (§4.5): `Replace=true`/`Force=true` objects go through the force
//! path of the apply (recreated on an immutable-field error, [`Waves::force`]). Before anything
//! is written, every kind the sync applies must be served (Argo's dry-run, run when the
//! revision or the manifests changed), except for objects with
//! `SkipDryRunOnMissingResource=true` or whose CRD is in the sync ([`Waves::skip_dry_run`]):
//! those are applied when their wave comes.
//!
//! Not yet: hooks with no sync phase (PreDelete/PostDelete: refused), prunes interleaved with
//! the applies of their wave (Argo runs them in the same step). `CreateNamespace=true` is
//! handled before the first wave by `argo_namespace.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rflux_common::api::kustomization::Kustomization;
use rflux_common::runtime::conditions::{READY, RECONCILIATION_FAILED_REASON};
use rflux_common::runtime::{StageError, format_go_duration, parse_go_duration};
use serde_json::Value;

use crate::argo::hook::commit_of_revision;
use crate::argo::{self, DeletePolicy, HookNaming, Phase, PlanOptions, Source};

/// The Kustomization annotation that sets the delay between two waves (a Go duration such as
/// `500ms`; Argo's `ARGOCD_SYNC_WAVE_DELAY`, default 2 s).
pub const WAVE_DELAY_ANNOTATION: &str = "rflux.dev/argo-sync-wave-delay";
/// Argo's default delay between waves (§1.5).
pub const DEFAULT_WAVE_DELAY: Duration = Duration::from_secs(2);
/// The longest delay accepted.
const MAX_WAVE_DELAY: Duration = Duration::from_secs(600);

/// One hook to run in one phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookRun {
    /// Its position in the built objects.
    pub position: usize,
    /// The phase it runs in.
    pub phase: Phase,
    /// The name it is created with (`metadata.name`, or the generated one, §2.3).
    pub name: String,
    /// `Kind/namespace/name`, with that name.
    pub label: String,
    /// Its delete policies (never empty).
    pub policies: Vec<DeletePolicy>,
}

/// One (phase, wave) step of an opted-in sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaveStep {
    /// The phase (PreSync, Sync or PostSync).
    pub phase: Phase,
    /// The wave.
    pub wave: i64,
    /// Positions of the ordinary objects applied in this step (Sync phase only).
    pub apply: Vec<usize>,
    /// The hooks of this step.
    pub hooks: Vec<HookRun>,
}

/// The waves of an opted-in Kustomization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waves {
    /// The steps, in plan order; none is empty. Without hooks to run, only Sync steps.
    pub steps: Vec<WaveStep>,
    /// The SyncFail hooks, run all at once when the sync fails (empty when hooks do not run).
    pub sync_fail: Vec<HookRun>,
    /// Hooks run in this reconcile: the revision or the manifests changed since the last
    /// successful sync (a no-op reconcile or a drift repair runs none, like Argo's self-heal).
    pub run_hooks: bool,
    /// The delay between two waves.
    pub delay: Duration,
    /// Kustomization-level `PruneLast=true`.
    pub prune_last: bool,
    /// Positions of the objects with `Replace=true` or `Force=true` (§4.5): applied through
    /// the force path (recreated on an immutable-field error). Never a CRD or a Namespace.
    pub force: BTreeSet<usize>,
    /// Positions of the objects whose kind need not be served when the sync starts (§4.5):
    /// `SkipDryRunOnMissingResource=true`, or a CRD of their group and kind is in the sync.
    /// Every other object of a kind the API server does not serve fails the sync before
    /// anything is written.
    pub skip_dry_run: BTreeSet<usize>,
}

impl Waves {
    /// `(wave, positions)` of the steps that apply ordinary objects, in order.
    pub fn apply_waves(&self) -> Vec<(i64, Vec<usize>)> {
        self.steps
            .iter()
            .filter(|s| !s.apply.is_empty())
            .map(|s| (s.wave, s.apply.clone()))
            .collect()
    }
}

/// Whether `revision` with manifests `digest` is what the last successful reconcile applied.
pub fn synced_before(ks: &Kustomization, revision: &str, digest: &str) -> bool {
    ks.status.as_ref().is_some_and(|s| {
        s.last_applied_revision.as_deref() == Some(revision)
            && s.history
                .as_ref()
                .and_then(|h| h.first())
                .is_some_and(|h| h.digest == digest)
    })
}

/// Reads the opt-in (`gate`: the feature gate) and plans the waves of `objects`, built from
/// `revision` with manifests `digest`. `Ok(None)`: Flux semantics. Stalls on an invalid
/// opt-in, a refused sync option, or an option not implemented yet.
/// `started_at_unix` gives the start of the sync operation (Unix seconds), which names the
/// `generateName` hooks; it is asked only when the Kustomization is opted in.
pub fn prepare(
    gate: bool,
    ks: &Kustomization,
    objects: &[Value],
    (revision, digest): (&str, &str),
    started_at_unix: impl FnOnce() -> i64,
) -> Result<Option<Waves>, StageError> {
    let annotations = ks.metadata.annotations.as_ref();
    let refused = |message: String| {
        StageError::stalling(
            READY,
            RECONCILIATION_FAILED_REASON,
            format!("Argo sync semantics: {message}"),
        )
    };
    let Some(settings) = argo::settings(gate, annotations).map_err(|e| refused(e.to_string()))?
    else {
        return Ok(None);
    };
    let delay = wave_delay(annotations).map_err(refused)?;
    let started_at_unix = started_at_unix();
    let options = PlanOptions {
        destination_namespace: ks.spec.target_namespace.clone(),
        prune_last: settings.prune_last,
        hook_naming: Some(HookNaming {
            revision: commit_of_revision(revision).to_string(),
            started_at_unix,
        }),
        ..PlanOptions::default()
    };
    let plan = argo::plan_with(objects, &[], &options).map_err(|e| refused(e.to_string()))?;
    // Hooks with no sync phase (PreDelete/PostDelete, which the finalizer runs, or a Helm type
    // Argo never runs) are left out of the sync, as Argo does (§2.1).
    for note in &plan.notes {
        tracing::info!(object = %note.object, "Argo sync semantics: {}", note.message);
    }
    for left in &plan.left_out {
        tracing::info!(object = %left.object, reason = ?left.reason, "not applied");
    }
    let run_hooks = !synced_before(ks, revision, digest);
    let (force, skip_dry_run) = apply_settings(&plan);
    let mut steps = Vec::new();
    let mut sync_fail = Vec::new();
    for step in &plan.steps {
        let mut apply = Vec::new();
        let mut hooks = Vec::new();
        for t in &step.apply {
            let Source::Desired(i) = t.source else {
                continue;
            };
            match &t.hook {
                None if step.phase == Phase::Sync => apply.push(i),
                None => {}
                Some(h) if run_hooks => {
                    let run = HookRun {
                        position: i,
                        phase: t.phase,
                        name: t.name.clone(),
                        label: t.to_string(),
                        policies: h.delete_policies.clone(),
                    };
                    if t.phase == Phase::SyncFail {
                        sync_fail.push(run);
                    } else {
                        hooks.push(run);
                    }
                }
                Some(_) => {}
            }
        }
        if !apply.is_empty() || !hooks.is_empty() {
            steps.push(WaveStep {
                phase: step.phase,
                wave: step.wave,
                apply,
                hooks,
            });
        }
    }
    Ok(Some(Waves {
        steps,
        sync_fail,
        run_hooks,
        delay,
        prune_last: settings.prune_last,
        force,
        skip_dry_run,
    }))
}

/// The positions of the desired objects with `Replace=true`/`Force=true`, and of those whose
/// dry-run Argo skips when their kind is unknown (§4.5): `SkipDryRunOnMissingResource=true`,
/// or automatically when the sync holds the CRD of their group and kind.
fn apply_settings(plan: &argo::Plan) -> (BTreeSet<usize>, BTreeSet<usize>) {
    let defined: BTreeSet<&str> = plan.tasks().filter_map(|t| t.defines.as_deref()).collect();
    let mut force = BTreeSet::new();
    let mut skip = BTreeSet::new();
    for t in plan.tasks() {
        let Source::Desired(i) = t.source else {
            continue;
        };
        // Argo updates CRDs and Namespaces instead of replacing them: recreating one would
        // delete what it holds (§4.5).
        if t.options.force && !t.is_crd() && !t.is_namespace() {
            force.insert(i);
        }
        if t.options.skip_dry_run_on_missing_resource
            || defined.contains(format!("{}/{}", t.group, t.kind).as_str())
        {
            skip.insert(i);
        }
    }
    (force, skip)
}

/// [`WAVE_DELAY_ANNOTATION`], or Argo's default.
fn wave_delay(annotations: Option<&BTreeMap<String, String>>) -> Result<Duration, String> {
    let Some(text) = annotations.and_then(|a| a.get(WAVE_DELAY_ANNOTATION)) else {
        return Ok(DEFAULT_WAVE_DELAY);
    };
    let invalid = |why: String| {
        format!(
            "annotation {WAVE_DELAY_ANNOTATION}: {:?} is not valid: {why}",
            crate::argo::error::quote(text)
        )
    };
    let d = parse_go_duration(text).map_err(|e| invalid(e.to_string()))?;
    if d > MAX_WAVE_DELAY {
        return Err(invalid(format!(
            "at most {}",
            format_go_duration(MAX_WAVE_DELAY)
        )));
    }
    Ok(d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ks(annotations: Value) -> Kustomization {
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system", "annotations": annotations},
            "spec": {"interval": "1m", "prune": true, "targetNamespace": "app",
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}}
        }))
        .unwrap()
    }

    fn cm(name: &str, wave: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "annotations": {"argocd.argoproj.io/sync-wave": wave}}})
    }

    #[test]
    fn delay_default_custom_and_invalid() {
        assert_eq!(wave_delay(None).unwrap(), DEFAULT_WAVE_DELAY);
        let mut a = BTreeMap::new();
        a.insert(WAVE_DELAY_ANNOTATION.to_string(), "250ms".to_string());
        assert_eq!(wave_delay(Some(&a)).unwrap(), Duration::from_millis(250));
        a.insert(WAVE_DELAY_ANNOTATION.to_string(), "soon".to_string());
        assert!(wave_delay(Some(&a)).unwrap_err().contains("soon"));
        a.insert(WAVE_DELAY_ANNOTATION.to_string(), "2h".to_string());
        assert!(wave_delay(Some(&a)).unwrap_err().contains("at most"));
    }

    const REV: &str = "main@sha1:1a2b3c4d5e6f";

    fn prep(gate: bool, ks: &Kustomization, objs: &[Value]) -> Result<Option<Waves>, StageError> {
        prepare(gate, ks, objs, (REV, "sha256:d"), || 1_735_689_600)
    }

    fn job(name: &str, hook: &str, extra: Value) -> Value {
        let mut annotations = json!({"argocd.argoproj.io/hook": hook});
        if let (Some(a), Some(e)) = (annotations.as_object_mut(), extra.as_object()) {
            a.extend(e.clone());
        }
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": name, "namespace": "app", "annotations": annotations}})
    }

    #[test]
    fn phaseless_hooks_are_left_out_of_the_sync() {
        // PreDelete/PostDelete hooks run on deletion (finalize.rs), never in a sync (§2.1).
        let objs = vec![
            cm("a", "0"),
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "bye", "annotations": {"argocd.argoproj.io/hook": "PostDelete"}}}),
        ];
        let on = ks(json!({"rflux.dev/argo-semantics": "enabled"}));
        let waves = prep(true, &on, &objs).unwrap().unwrap();
        let applied: Vec<usize> = waves.steps.iter().flat_map(|s| s.apply.clone()).collect();
        assert_eq!(applied, [0]);
        assert!(waves.steps.iter().all(|s| s.hooks.is_empty()));
        assert!(waves.sync_fail.is_empty());
    }

    #[test]
    fn waves_in_plan_order() {
        let objs = vec![cm("c", "1"), cm("a", "-1"), cm("b", "0"), cm("d", "1")];
        let on = ks(json!({"rflux.dev/argo-semantics": "enabled",
                           "rflux.dev/argo-sync-wave-delay": "100ms"}));
        let w = prep(true, &on, &objs).unwrap().unwrap();
        assert_eq!(
            w.apply_waves(),
            vec![(-1, vec![1]), (0, vec![2]), (1, vec![0, 3])]
        );
        assert!(
            w.steps
                .iter()
                .all(|s| s.phase == Phase::Sync && s.hooks.is_empty())
        );
        assert_eq!(w.delay, Duration::from_millis(100));
    }

    #[test]
    fn hooks_in_their_phases_and_waves() {
        let objs = vec![
            cm("a", "0"),
            job("pre", "PreSync", json!({})),
            job("mid", "Sync", json!({"argocd.argoproj.io/sync-wave": "1"})),
            job(
                "post",
                "PostSync",
                json!({"argocd.argoproj.io/hook-delete-policy": "HookSucceeded"}),
            ),
            job("fail", "SyncFail", json!({})),
            json!({"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"generateName": "gen-", "namespace": "app",
                                "annotations": {"argocd.argoproj.io/hook": "PreSync"}}}),
        ];
        let on = ks(json!({"rflux.dev/argo-semantics": "enabled"}));
        let w = prep(true, &on, &objs).unwrap().unwrap();
        assert!(w.run_hooks);
        let shape: Vec<(Phase, i64, Vec<usize>, Vec<String>)> = w
            .steps
            .iter()
            .map(|s| {
                let hooks = s.hooks.iter().map(|h| h.label.clone()).collect();
                (s.phase, s.wave, s.apply.clone(), hooks)
            })
            .collect();
        let gen_name = shape[0].3[0].clone();
        assert!(
            gen_name.starts_with("Job/app/gen-1a2b3c4-presync-"),
            "{gen_name}"
        );
        assert_eq!(
            shape,
            vec![
                (
                    Phase::PreSync,
                    0,
                    vec![],
                    vec![gen_name.clone(), "Job/app/pre".into()]
                ),
                (Phase::Sync, 0, vec![0], vec![]),
                (Phase::Sync, 1, vec![], vec!["Job/app/mid".into()]),
                (Phase::PostSync, 0, vec![], vec!["Job/app/post".into()]),
            ]
        );
        assert_eq!(
            w.steps[3].hooks[0].policies,
            vec![DeletePolicy::HookSucceeded]
        );
        assert_eq!(
            w.steps[0].hooks[1].policies,
            vec![DeletePolicy::BeforeHookCreation]
        );
        assert_eq!(w.sync_fail.len(), 1);
        assert_eq!(w.sync_fail[0].name, "fail");

        // The same revision and manifests as the last successful sync: no hook runs.
        let mut synced = on.clone();
        synced.status = Some(
            serde_json::from_value(json!({
                "lastAppliedRevision": REV,
                "history": [{"digest": "sha256:d", "firstReconciled": "2026-01-01T00:00:00Z",
                             "lastReconciled": "2026-01-01T00:00:00Z",
                             "lastReconciledDuration": "1s",
                             "lastReconciledStatus": "ReconciliationSucceeded",
                             "totalReconciliations": 1}]
            }))
            .unwrap(),
        );
        assert!(synced_before(&synced, REV, "sha256:d"));
        assert!(!synced_before(&synced, REV, "sha256:e"));
        assert!(!synced_before(&synced, "main@sha1:other", "sha256:d"));
        let quiet = prep(true, &synced, &objs).unwrap().unwrap();
        assert!(!quiet.run_hooks);
        assert!(quiet.sync_fail.is_empty());
        assert_eq!(quiet.steps.len(), 1);
        assert_eq!(quiet.apply_waves(), vec![(0, vec![0])]);
    }

    #[test]
    fn off_unless_gate_and_annotation() {
        let objs = vec![cm("a", "1"), cm("b", "0")];
        let on = ks(json!({"rflux.dev/argo-semantics": "enabled"}));
        // Gate off: nothing is read, not even an invalid value.
        assert_eq!(prep(false, &on, &objs).unwrap(), None);
        let bad = ks(json!({"rflux.dev/argo-semantics": "yes"}));
        assert_eq!(prep(false, &bad, &objs).unwrap(), None);
        assert!(prep(true, &bad, &objs).unwrap_err().message.contains("yes"));
        assert_eq!(prep(true, &ks(json!({})), &objs).unwrap(), None);
        let disabled = ks(json!({"rflux.dev/argo-semantics": "disabled"}));
        assert_eq!(prep(true, &disabled, &objs).unwrap(), None);
        assert_eq!(
            prep(true, &on, &objs).unwrap().unwrap().delay,
            DEFAULT_WAVE_DELAY
        );
    }

    fn with_options(mut obj: Value, options: &str) -> Value {
        obj["metadata"]["annotations"]["argocd.argoproj.io/sync-options"] = json!(options);
        obj
    }

    fn crd(group: &str, kind: &str, wave: &str) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": format!("{}s.{group}", kind.to_lowercase()),
                            "annotations": {"argocd.argoproj.io/sync-wave": wave}},
               "spec": {"group": group, "names": {"kind": kind}}})
    }

    fn cr(group: &str, kind: &str, name: &str) -> Value {
        json!({"apiVersion": format!("{group}/v1"), "kind": kind,
               "metadata": {"name": name, "namespace": "app"}})
    }

    #[test]
    fn replace_force_and_skip_dry_run_positions() {
        let objs = vec![
            with_options(cm("replaced", "0"), "Replace=true"),
            with_options(cm("forced", "0"), "Force=true,Validate=false"),
            with_options(cm("plain", "0"), "Replace=false"),
            // Defined by the CRD of this sync: Argo skips the dry-run by itself.
            cr("a.example.com", "Widget", "w"),
            crd("a.example.com", "Widget", "-1"),
            // Not defined here: only the option skips it.
            with_options(
                cr("b.example.com", "Gadget", "g"),
                "SkipDryRunOnMissingResource=true",
            ),
            cr("c.example.com", "Gizmo", "z"),
            // A CRD of another kind of the same group defines nothing for Gizmo.
            crd("c.example.com", "Other", "0"),
            with_options(job("hook", "PreSync", json!({})), "Replace=true"),
            // Argo never replaces these: a recreation would delete what they hold.
            with_options(crd("d.example.com", "Thing", "0"), "Replace=true"),
            with_options(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}),
                "Force=true",
            ),
        ];
        let on = ks(json!({"rflux.dev/argo-semantics": "enabled"}));
        let w = prep(true, &on, &objs).unwrap().unwrap();
        assert_eq!(w.force, BTreeSet::from([0, 1, 8]));
        assert_eq!(w.skip_dry_run, BTreeSet::from([3, 5]));
        // Without the opt-in, nothing is planned at all.
        assert_eq!(prep(false, &on, &objs).unwrap(), None);
    }

    #[test]
    fn create_namespace_is_accepted() {
        // The namespace itself is handled by `argo_namespace.rs`, before the first wave.
        let cn = ks(json!({"rflux.dev/argo-semantics": "enabled",
                           "rflux.dev/argo-sync-options": "CreateNamespace=true"}));
        let w = prep(true, &cn, &[cm("a", "0")]).unwrap().unwrap();
        assert_eq!(w.apply_waves(), vec![(0, vec![0])]);
    }
}
