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
//! Not yet: hooks (an object with a hook annotation is refused), `CreateNamespace` (refused),
//! prunes interleaved with the applies of their wave (Argo runs them in the same step).

use std::collections::BTreeMap;
use std::time::Duration;

use rflux_common::api::kustomization::Kustomization;
use rflux_common::runtime::conditions::{READY, RECONCILIATION_FAILED_REASON};
use rflux_common::runtime::{StageError, format_go_duration, parse_go_duration};
use serde_json::Value;

use crate::argo::{self, LeftOutReason, Phase, PlanOptions, Source};

/// The Kustomization annotation that sets the delay between two waves (a Go duration such as
/// `500ms`; Argo's `ARGOCD_SYNC_WAVE_DELAY`, default 2 s).
pub const WAVE_DELAY_ANNOTATION: &str = "rflux.dev/argo-sync-wave-delay";
/// Argo's default delay between waves (§1.5).
pub const DEFAULT_WAVE_DELAY: Duration = Duration::from_secs(2);
/// The longest delay accepted.
const MAX_WAVE_DELAY: Duration = Duration::from_secs(600);

/// The waves of an opted-in Kustomization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waves {
    /// `(wave, positions in the built objects)`, in plan order; none is empty.
    pub apply: Vec<(i64, Vec<usize>)>,
    /// The delay between two waves.
    pub delay: Duration,
    /// Kustomization-level `PruneLast=true`.
    pub prune_last: bool,
}

/// Reads the opt-in (`gate`: the feature gate) and plans the waves of `objects`. `Ok(None)`: Flux semantics. Stalls on an
/// invalid opt-in, a refused sync option, a hook, or an option not implemented yet.
pub fn prepare(
    gate: bool,
    ks: &Kustomization,
    objects: &[Value],
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
    if settings.create_namespace {
        return Err(refused(
            "CreateNamespace=true is not supported yet; put the Namespace in the manifests".into(),
        ));
    }
    let delay = wave_delay(annotations).map_err(refused)?;
    let options = PlanOptions {
        destination_namespace: ks.spec.target_namespace.clone(),
        prune_last: settings.prune_last,
        ..PlanOptions::default()
    };
    let plan = argo::plan_with(objects, &[], &options).map_err(|e| refused(e.to_string()))?;
    if let Some(hook) = first_hook(&plan) {
        return Err(refused(format!(
            "{hook} is a hook ({} or {}); hooks are not supported yet, so it is not applied",
            argo::keys::HOOK,
            argo::keys::HELM_HOOK
        )));
    }
    for note in &plan.notes {
        tracing::info!(object = %note.object, "Argo sync semantics: {}", note.message);
    }
    for left in &plan.left_out {
        tracing::info!(object = %left.object, reason = ?left.reason, "not applied");
    }
    let mut apply = Vec::new();
    for step in plan.steps.iter().filter(|s| s.phase == Phase::Sync) {
        let positions: Vec<usize> = step
            .apply
            .iter()
            .filter_map(|t| match t.source {
                Source::Desired(i) => Some(i),
                _ => None,
            })
            .collect();
        if !positions.is_empty() {
            apply.push((step.wave, positions));
        }
    }
    Ok(Some(Waves {
        apply,
        delay,
        prune_last: settings.prune_last,
    }))
}

/// The first hook of a plan (a task with a hook, or a hook with no sync phase), as
/// `Kind/namespace/name`.
fn first_hook(plan: &argo::Plan) -> Option<String> {
    plan.tasks()
        .find(|t| t.hook.is_some())
        .map(ToString::to_string)
        .or_else(|| {
            plan.left_out
                .iter()
                .find(|l| l.reason == LeftOutReason::NoSyncPhase)
                .map(|l| l.object.clone())
        })
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

    #[test]
    fn hooks_are_named_in_the_refusal() {
        let objs = vec![
            cm("a", "0"),
            json!({"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": "migrate", "namespace": "app",
                                "annotations": {"argocd.argoproj.io/hook": "PreSync"}}}),
        ];
        let plan = argo::plan(&objs).unwrap();
        assert_eq!(first_hook(&plan).as_deref(), Some("Job/app/migrate"));
        let only_delete = vec![json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "bye", "annotations": {"argocd.argoproj.io/hook": "PostDelete"}}})];
        let plan = argo::plan(&only_delete).unwrap();
        assert_eq!(first_hook(&plan).as_deref(), Some("Pod/bye"));
        assert_eq!(first_hook(&argo::plan(&[cm("a", "1")]).unwrap()), None);
    }

    #[test]
    fn waves_in_plan_order() {
        let objs = vec![cm("c", "1"), cm("a", "-1"), cm("b", "0"), cm("d", "1")];
        let plan = argo::plan_with(&objs, &[], &PlanOptions::default()).unwrap();
        let waves: Vec<(i64, Vec<usize>)> = plan
            .steps
            .iter()
            .map(|s| {
                let p = s
                    .apply
                    .iter()
                    .filter_map(|t| match t.source {
                        Source::Desired(i) => Some(i),
                        _ => None,
                    })
                    .collect();
                (s.wave, p)
            })
            .collect();
        assert_eq!(waves, vec![(-1, vec![1]), (0, vec![2]), (1, vec![0, 3])]);
        let on = ks(json!({"rflux.dev/argo-semantics": "enabled",
                           "rflux.dev/argo-sync-wave-delay": "100ms"}));
        let w = prepare(true, &on, &objs).unwrap().unwrap();
        assert_eq!(w.apply, waves);
        assert_eq!(w.delay, Duration::from_millis(100));
    }

    #[test]
    fn off_unless_gate_and_annotation() {
        let objs = vec![cm("a", "1"), cm("b", "0")];
        let on = ks(json!({"rflux.dev/argo-semantics": "enabled"}));
        // Gate off: nothing is read, not even an invalid value.
        assert_eq!(prepare(false, &on, &objs).unwrap(), None);
        let bad = ks(json!({"rflux.dev/argo-semantics": "yes"}));
        assert_eq!(prepare(false, &bad, &objs).unwrap(), None);
        assert!(
            prepare(true, &bad, &objs)
                .unwrap_err()
                .message
                .contains("yes")
        );
        assert_eq!(prepare(true, &ks(json!({})), &objs).unwrap(), None);
        let disabled = ks(json!({"rflux.dev/argo-semantics": "disabled"}));
        assert_eq!(prepare(true, &disabled, &objs).unwrap(), None);
        assert_eq!(
            prepare(true, &on, &objs).unwrap().unwrap().delay,
            DEFAULT_WAVE_DELAY
        );
    }

    #[test]
    fn hooks_and_create_namespace_stall() {
        let on = ks(json!({"rflux.dev/argo-semantics": "enabled"}));
        let hook = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "migrate", "annotations": {"helm.sh/hook": "pre-install"}}});
        let e = prepare(true, &on, &[cm("a", "0"), hook]).unwrap_err();
        assert!(e.message.contains("Job/migrate is a hook"), "{}", e.message);
        assert!(e.message.contains("not supported yet"), "{}", e.message);
        assert!(e.severity.stalls());
        let cn = ks(json!({"rflux.dev/argo-semantics": "enabled",
                           "rflux.dev/argo-sync-options": "CreateNamespace=true"}));
        let e = prepare(true, &cn, &[cm("a", "0")]).unwrap_err();
        assert!(e.message.contains("CreateNamespace"), "{}", e.message);
    }
}
