//! The inputs of a reconcile: `spec.sourceRef` (a GitRepository with an artifact) and
//! `spec.dependsOn` (Flux's readiness rules, or a CEL `readyExpr`), both behind one
//! cross-namespace access check (`--no-cross-namespace-refs`).

use kube::api::Api;
use kube::runtime::reflector;
use kube::{Resource, ResourceExt};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_common::api::meta::{Artifact, SourceKind};
use rflux_common::runtime::conditions::{self as cond, READY};
use rflux_common::runtime::{StageError, format_go_duration};

use super::context::{
    ACCESS_DENIED_REASON, ARTIFACT_FAILED_REASON, Context, DEPENDENCY_NOT_READY_REASON,
};
use crate::cel::{CelError, INVALID_CEL_EXPRESSION_REASON, ReadyExpr, TERMINAL_ERROR_MESSAGE};

/// `--no-cross-namespace-refs`: a reference from `ns` to `kind/target_ns/name` in another
/// namespace is refused (Stalled, AccessDenied).
pub fn check_access(
    ctx: &Context,
    ns: &str,
    kind: &str,
    target_ns: &str,
    name: &str,
) -> Result<(), StageError> {
    if ctx.no_cross_namespace_refs && target_ns != ns {
        return Err(StageError::stalling(
            READY,
            ACCESS_DENIED_REASON,
            format!(
                "cannot access {kind}/{target_ns}/{name}, cross-namespace references have been blocked"
            ),
        ));
    }
    Ok(())
}

/// Resolves `spec.sourceRef` to a GitRepository with an artifact: its namespace and the
/// artifact. The source watch's cache is read first (what a new revision triggered us with);
/// a miss reads the API, so a repository created a moment ago is not reported missing.
pub async fn source(ctx: &Context, ks: &Kustomization) -> Result<(String, Artifact), StageError> {
    let r = &ks.spec.source_ref;
    let ns = ks.namespace().unwrap_or_default();
    let source_ns = r.namespace_or(&ns).to_string();
    if r.kind != SourceKind::GitRepository {
        return Err(StageError::stalling(
            READY,
            ARTIFACT_FAILED_REASON,
            format!(
                "source kind '{}' is not supported by this controller (only GitRepository)",
                r.kind
            ),
        ));
    }
    check_access(ctx, &ns, "GitRepository", &source_ns, &r.name)?;
    let api: Api<GitRepository> = Api::namespaced(ctx.client.clone(), &source_ns);
    let id = format!("GitRepository/{source_ns}/{}", r.name);
    // DirectSourceFetch: always from the API, never the watch cache.
    let cached = ctx
        .sources
        .get()
        .filter(|_| !ctx.direct_source_fetch)
        .and_then(|store| store.get(&reflector::ObjectRef::new(&r.name).within(&source_ns)));
    let fetched = match cached {
        Some(repo) => Ok(Some(repo.as_ref().clone())),
        None => api.get_opt(&r.name).await,
    };
    let repo = match fetched {
        Ok(Some(repo)) => repo,
        Ok(None) => {
            return Err(StageError::waiting(
                READY,
                ARTIFACT_FAILED_REASON,
                format!("Source '{id}' not found"),
            ));
        }
        Err(e) => {
            return Err(StageError::generic(
                READY,
                ARTIFACT_FAILED_REASON,
                format!("unable to get source '{id}': {e}"),
            ));
        }
    };
    match repo.status.and_then(|s| s.artifact) {
        Some(a) => Ok((source_ns, a)),
        None => Err(StageError::waiting(
            READY,
            ARTIFACT_FAILED_REASON,
            format!(
                "Source artifact not found, retrying in {}",
                format_go_duration(ctx.requeue_dependency)
            ),
        )),
    }
}

/// Checks `spec.dependsOn` against the source revision being applied.
pub async fn dependencies(
    ctx: &Context,
    ks: &Kustomization,
    source_ns: &str,
    revision: &str,
) -> Result<(), StageError> {
    let ns = ks.namespace().unwrap_or_default();
    let mut blockers = Vec::new();
    for d in ks.spec.depends_on.iter().flatten() {
        let dep_ns = d
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| ns.clone());
        check_access(ctx, &ns, "Kustomization", &dep_ns, &d.name)?;
        let api: Api<Kustomization> = Api::namespaced(ctx.client.clone(), &dep_ns);
        match api.get_opt(&d.name).await {
            Ok(Some(dep)) => {
                // readyExpr replaces the built-in check unless the AdditiveCELDependencyCheck
                // feature gate is on.
                if let Some(expr) = d.ready_expr.as_deref().filter(|e| !e.is_empty()) {
                    match ready_expr_blocker(expr, ks, &dep) {
                        Err(terminal) => {
                            return Err(StageError::stalling(
                                READY,
                                INVALID_CEL_EXPRESSION_REASON,
                                terminal.to_string(),
                            ));
                        }
                        Ok(Some(b)) => {
                            blockers.push(b);
                            continue;
                        }
                        Ok(None) if !ctx.additive_cel_dependency_check => continue,
                        Ok(None) => {}
                    }
                }
                if let Some(b) = dependency_blocker(&dep, source_ns, ks, revision) {
                    blockers.push(b);
                }
            }
            Ok(None) => blockers.push(format!("dependency '{dep_ns}/{}' not found", d.name)),
            Err(e) => blockers.push(format!(
                "unable to get '{dep_ns}/{}' dependency: {e}",
                d.name
            )),
        }
    }
    if blockers.is_empty() {
        return Ok(());
    }
    Err(StageError::waiting(
        READY,
        DEPENDENCY_NOT_READY_REASON,
        format!(
            "Dependencies do not meet ready condition ({}), retrying in {}",
            blockers.join("; "),
            format_go_duration(ctx.requeue_dependency)
        ),
    ))
}

/// Why a dependency blocks, or `None` when it is ready (Flux's rules: Ready at the current
/// generation, and, when it uses the same source, applied the same revision).
pub fn dependency_blocker(
    dep: &Kustomization,
    source_ns: &str,
    ks: &Kustomization,
    revision: &str,
) -> Option<String> {
    let id = format!("{}/{}", dep.namespace().unwrap_or_default(), dep.name_any());
    let status = dep.status.clone().unwrap_or_default();
    let conds = status.conditions.unwrap_or_default();
    if !cond::is_ready(&conds) || dep.meta().generation != status.observed_generation {
        return Some(format!("dependency '{id}' is not ready"));
    }
    let dep_ns = dep.namespace().unwrap_or_default();
    let same_source = dep.spec.source_ref.kind == ks.spec.source_ref.kind
        && dep.spec.source_ref.name == ks.spec.source_ref.name
        && dep.spec.source_ref.namespace_or(&dep_ns) == source_ns;
    if same_source && status.last_applied_revision.as_deref() != Some(revision) {
        return Some(format!("dependency '{id}' revision is not up to date"));
    }
    None
}

/// A `dependsOn[].readyExpr` that does not compile: a terminal configuration error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{}: failed to evaluate dependency {dependency}: {source}",
    TERMINAL_ERROR_MESSAGE
)]
pub struct ReadyExprError {
    /// The dependency's name.
    pub dependency: String,
    /// The compile error.
    #[source]
    pub source: CelError,
}

/// The `dependsOn[].readyExpr` check of one dependency. `Ok(None)`: ready; `Ok(Some(msg))`:
/// not ready (or the evaluation failed), retried; `Err`: the expression does not compile.
pub fn ready_expr_blocker(
    expr: &str,
    ks: &Kustomization,
    dep: &Kustomization,
) -> Result<Option<String>, ReadyExprError> {
    let compiled = ReadyExpr::compile(expr).map_err(|source| ReadyExprError {
        dependency: dep.name_any(),
        source,
    })?;
    let id = format!("{}/{}", dep.namespace().unwrap_or_default(), dep.name_any());
    let as_value = |k: &Kustomization| serde_json::to_value(k).map_err(|e| e.to_string());
    let (this, other) = match (as_value(ks), as_value(dep)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            return Ok(Some(format!(
                "failed to convert Kustomization to unstructured: {e}"
            )));
        }
    };
    match compiled.eval(&this, &other) {
        Ok(true) => Ok(None),
        Ok(false) => Ok(Some(format!(
            "dependency '{id}' is not ready according to readyExpr eval"
        ))),
        Err(e) => Ok(Some(e.to_string())),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use serde_json::json;

    use crate::reconcile::test_fixtures::{base, ks};

    fn ready_dep(generation: i64, observed: i64, applied: &str) -> Kustomization {
        let mut v = base();
        v["metadata"]["name"] = json!("dep");
        v["metadata"]["generation"] = json!(generation);
        v["status"] = json!({
            "observedGeneration": observed,
            "lastAppliedRevision": applied,
            "conditions": [{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded",
                            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
        });
        ks(v)
    }

    #[test]
    fn dependency_rules() {
        let me = ks(base());
        assert_eq!(
            dependency_blocker(&ready_dep(1, 1, "r1"), "apps", &me, "r1"),
            None
        );
        assert!(
            dependency_blocker(&ready_dep(2, 1, "r1"), "apps", &me, "r1")
                .unwrap()
                .contains("is not ready")
        );
        assert!(
            dependency_blocker(&ready_dep(1, 1, "r0"), "apps", &me, "r1")
                .unwrap()
                .contains("revision is not up to date")
        );
        // A different source: the revision is not compared.
        let mut other = ready_dep(1, 1, "r0");
        other.spec.source_ref.name = "other".into();
        assert_eq!(dependency_blocker(&other, "apps", &me, "r1"), None);
    }

    #[test]
    fn ready_expr_rules() {
        let mut me = base();
        me["metadata"]["labels"] = json!({"tier": "web"});
        let me = ks(me);
        let mut dep = ready_dep(1, 1, "r0");
        dep.metadata.labels = Some(BTreeMap::from([("tier".to_string(), "web".to_string())]));
        let same_tier = "dep.metadata.labels.tier == self.metadata.labels.tier";
        assert_eq!(ready_expr_blocker(same_tier, &me, &dep), Ok(None));
        dep.metadata.labels = Some(BTreeMap::from([("tier".to_string(), "db".to_string())]));
        assert_eq!(
            ready_expr_blocker(same_tier, &me, &dep),
            Ok(Some(
                "dependency 'apps/dep' is not ready according to readyExpr eval".to_string()
            ))
        );
        // An evaluation error is retried, not terminal.
        let missing = ready_expr_blocker("dep.status.nothing == 1", &me, &dep)
            .unwrap()
            .unwrap();
        assert!(
            missing.starts_with("failed to evaluate the CEL expression"),
            "{missing}"
        );
        // A compile error is terminal.
        let err = ready_expr_blocker("dep.status.(", &me, &dep)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "Reconciliation failed terminally due to configuration error: \
                 failed to evaluate dependency dep: failed to parse the CEL expression 'dep.status.('"
            ),
            "{err}"
        );
        let err = ready_expr_blocker("foo == 1", &me, &dep)
            .unwrap_err()
            .to_string();
        assert!(err.contains("undeclared reference to 'foo'"), "{err}");
    }
}
