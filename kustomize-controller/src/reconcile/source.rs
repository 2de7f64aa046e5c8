//! The inputs of a reconcile: `spec.sourceRef` (a GitRepository or an OCIRepository with an
//! artifact) and `spec.dependsOn` (Flux's readiness rules, or a CEL `readyExpr`), both behind one
//! cross-namespace access check (`--no-cross-namespace-refs`).
//!
//! The source kinds share one code path through [`ArtifactSource`]: the kind's name, its status
//! artifact and its watch cache are all the reconciler needs to know about a source.

use std::fmt::Debug;
use std::sync::OnceLock;
use std::time::Duration;

use kube::api::Api;
use kube::core::NamespaceResourceScope;
use kube::runtime::reflector::{self, Store};
use kube::{Resource, ResourceExt};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_common::api::meta::{Artifact, SourceKind};
use rflux_common::api::ocirepository::OciRepository;
use rflux_common::runtime::conditions::{self as cond, READY};
use rflux_common::runtime::{StageError, format_go_duration};
use serde::de::DeserializeOwned;

use super::context::{
    ACCESS_DENIED_REASON, ARTIFACT_FAILED_REASON, Context, DEPENDENCY_NOT_READY_REASON,
};
use crate::cel::{CelError, INVALID_CEL_EXPRESSION_REASON, ReadyExpr, TERMINAL_ERROR_MESSAGE};

/// A source kind whose status carries the artifact a Kustomization applies (Flux's
/// `sourcev1.Source`, for the kinds this controller serves): GitRepository and OCIRepository.
pub trait ArtifactSource:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The kind, as `spec.sourceRef.kind` names it.
    const KIND: SourceKind;

    /// The artifact of the status, if the source produced one.
    fn artifact(&self) -> Option<&Artifact>;

    /// The cache of this kind's source watch (filled once the watch runs; empty in a context
    /// without watches, where every read goes to the API).
    fn cache(ctx: &Context) -> &OnceLock<Store<Self>>;
}

impl ArtifactSource for GitRepository {
    const KIND: SourceKind = SourceKind::GitRepository;

    fn artifact(&self) -> Option<&Artifact> {
        self.status.as_ref()?.artifact.as_ref()
    }

    fn cache(ctx: &Context) -> &OnceLock<Store<Self>> {
        &ctx.sources
    }
}

impl ArtifactSource for OciRepository {
    const KIND: SourceKind = SourceKind::OciRepository;

    fn artifact(&self) -> Option<&Artifact> {
        self.status.as_ref()?.artifact.as_ref()
    }

    fn cache(ctx: &Context) -> &OnceLock<Store<Self>> {
        &ctx.oci_sources
    }
}

/// `--no-cross-namespace-refs`: a reference from `ns` to `kind/target_ns/name` in another
/// namespace is refused (Stalled, AccessDenied), with Flux's message.
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
                "can't access '{kind}/{target_ns}/{name}', cross-namespace references have been blocked"
            ),
        ));
    }
    Ok(())
}

/// Resolves `spec.sourceRef` to a source with an artifact: its namespace and the artifact.
/// GitRepository and OCIRepository are served; Bucket and ExternalArtifact are refused.
pub async fn source(ctx: &Context, ks: &Kustomization) -> Result<(String, Artifact), StageError> {
    let r = &ks.spec.source_ref;
    let ns = ks.namespace().unwrap_or_default();
    let source_ns = r.namespace_or(&ns).to_string();
    check_access(ctx, &ns, r.kind.as_str(), &source_ns, &r.name)?;
    let artifact = match r.kind {
        SourceKind::GitRepository => artifact_of::<GitRepository>(ctx, &source_ns, &r.name).await,
        SourceKind::OciRepository => artifact_of::<OciRepository>(ctx, &source_ns, &r.name).await,
        kind @ (SourceKind::Bucket | SourceKind::ExternalArtifact) => Err(unsupported_kind(kind)),
    }?;
    Ok((source_ns, artifact))
}

/// The refusal of a source kind this controller does not serve (a configuration error).
fn unsupported_kind(kind: SourceKind) -> StageError {
    StageError::stalling(
        READY,
        ARTIFACT_FAILED_REASON,
        format!(
            "source kind '{kind}' is not supported by this controller (only {} and {})",
            SourceKind::GitRepository,
            SourceKind::OciRepository
        ),
    )
}

/// The artifact of the `K` named `ns/name`. The source watch's cache is read first (what a new
/// revision triggered us with); a miss reads the API, so a source created a moment ago is not
/// reported missing. With `DirectSourceFetch` the API is always read.
async fn artifact_of<K: ArtifactSource>(
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<Artifact, StageError> {
    let cached = K::cache(ctx)
        .get()
        .filter(|_| !ctx.direct_source_fetch)
        .and_then(|store| store.get(&reflector::ObjectRef::new(name).within(ns)));
    let found = match cached {
        Some(obj) => Ok(Some(obj.artifact().cloned())),
        None => Api::<K>::namespaced(ctx.client.clone(), ns)
            .get_opt(name)
            .await
            .map(|obj| obj.map(|o| o.artifact().cloned())),
    };
    let resource = format!("{}.{}", K::plural(&()), K::group(&()));
    found_artifact(found, &resource, ns, name, ctx.requeue_dependency)
}

/// What the lookup of the source `ns/name` (of `resource`, `<plural>.<group>`) means: its
/// artifact, or the ArtifactFailed error Flux reports. `found` is `Ok(None)` when the source does
/// not exist (Flux's message is then the API server's not-found error) and `Ok(Some(None))` when
/// it has no artifact yet (both retried after `requeue`).
fn found_artifact(
    found: Result<Option<Option<Artifact>>, kube::Error>,
    resource: &str,
    ns: &str,
    name: &str,
    requeue: Duration,
) -> Result<Artifact, StageError> {
    match found {
        Ok(Some(Some(artifact))) => Ok(artifact),
        Ok(Some(None)) => Err(StageError::waiting(
            READY,
            ARTIFACT_FAILED_REASON,
            format!(
                "Source artifact not found, retrying in {}",
                format_go_duration(requeue)
            ),
        )),
        Ok(None) => Err(StageError::waiting(
            READY,
            ARTIFACT_FAILED_REASON,
            format!("{resource} \"{name}\" not found"),
        )),
        Err(e) => Err(StageError::generic(
            READY,
            ARTIFACT_FAILED_REASON,
            format!("unable to get source '{ns}/{name}': {e}"),
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
    use rflux_common::runtime::stage::Severity;
    use serde_json::{Value, json};

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

    fn artifact(revision: &str) -> Value {
        json!({"path": "p", "url": "http://x/p.tar.gz", "revision": revision,
               "digest": "sha256:00", "lastUpdateTime": "2026-01-01T00:00:00Z",
               "metadata": {"org.opencontainers.image.revision": "main@sha1:1"}})
    }

    fn git(ns: &str, name: &str, revision: Option<&str>) -> GitRepository {
        let mut v = json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"url": "https://example.com/r.git", "interval": "1m"}
        });
        if let Some(rev) = revision {
            v["status"] = json!({"artifact": artifact(rev)});
        }
        serde_json::from_value(v).unwrap()
    }

    fn oci(ns: &str, name: &str, revision: Option<&str>) -> OciRepository {
        let mut v = json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"url": "oci://registry.example/app", "interval": "1m"}
        });
        if let Some(rev) = revision {
            v["status"] = json!({"artifact": artifact(rev)});
        }
        serde_json::from_value(v).unwrap()
    }

    /// A context whose API server does not answer: only the cache can resolve a source.
    fn offline_context(cache: &std::path::Path) -> Context {
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let mut opts = crate::fetch::FetcherOptions::new(cache);
        opts.work_parent = cache.to_path_buf();
        Context::new(
            client.clone(),
            kube::Config::new("http://127.0.0.1:9".parse().unwrap()),
            rflux_common::runtime::EventRecorder::new(client, "kustomize-controller", "test"),
            crate::fetch::ArtifactFetcher::new(opts).unwrap(),
        )
    }

    fn store_of<K: ArtifactSource>(objs: Vec<K>) -> Store<K> {
        let mut writer = reflector::store::Writer::<K>::new(());
        for o in objs {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(o));
        }
        writer.as_reader()
    }

    fn ks_with_source(source: Value) -> Kustomization {
        let mut v = base();
        v["spec"]["sourceRef"] = source;
        ks(v)
    }

    #[test]
    fn both_kinds_expose_kind_and_artifact() {
        assert_eq!(GitRepository::KIND.as_str(), "GitRepository");
        assert_eq!(OciRepository::KIND.as_str(), "OCIRepository");
        assert_eq!(
            oci("a", "r", Some("latest@sha256:1"))
                .artifact()
                .map(|a| a.revision.as_str()),
            Some("latest@sha256:1")
        );
        assert_eq!(
            git("a", "r", Some("main@sha1:1"))
                .artifact()
                .map(|a| a.revision.as_str()),
            Some("main@sha1:1")
        );
        assert!(oci("a", "r", None).artifact().is_none());
        assert!(git("a", "r", None).artifact().is_none());
    }

    const OCI: &str = "ocirepositories.source.toolkit.fluxcd.io";

    #[test]
    fn lookup_outcomes_carry_the_kind() {
        let requeue = Duration::from_secs(30);
        let a: Artifact = serde_json::from_value(artifact("latest@sha256:1")).unwrap();
        assert_eq!(
            found_artifact(Ok(Some(Some(a.clone()))), OCI, "a", "r", requeue),
            Ok(a)
        );
        let missing = found_artifact(Ok(None), OCI, "a", "r", requeue).unwrap_err();
        assert_eq!(
            (missing.severity, missing.reason, missing.message.as_str()),
            (
                Severity::Waiting,
                "ArtifactFailed",
                r#"ocirepositories.source.toolkit.fluxcd.io "r" not found"#
            )
        );
        let empty = found_artifact(Ok(Some(None)), OCI, "a", "r", requeue).unwrap_err();
        assert_eq!(
            (empty.severity, empty.reason, empty.message.as_str()),
            (
                Severity::Waiting,
                "ArtifactFailed",
                "Source artifact not found, retrying in 30s"
            )
        );
    }

    #[test]
    fn unsupported_kinds_stall() {
        for kind in [SourceKind::Bucket, SourceKind::ExternalArtifact] {
            let e = unsupported_kind(kind);
            assert_eq!(e.severity, Severity::Stalling);
            assert_eq!(e.reason, "ArtifactFailed");
            assert_eq!(
                e.message,
                format!(
                    "source kind '{kind}' is not supported by this controller (only GitRepository and OCIRepository)"
                )
            );
        }
    }

    #[tokio::test]
    async fn source_reads_each_kind_from_its_cache_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = offline_context(dir.path());
        let _ = ctx
            .sources
            .set(store_of(vec![git("apps", "repo", Some("main@sha1:1"))]));
        let _ = OciRepository::cache(&ctx).set(store_of(vec![
            oci("apps", "repo", Some("latest@sha256:2")),
            oci("apps", "empty", None),
        ]));

        let git_ks = ks_with_source(json!({"kind": "GitRepository", "name": "repo"}));
        let (ns, a) = source(&ctx, &git_ks).await.unwrap();
        assert_eq!((ns.as_str(), a.revision.as_str()), ("apps", "main@sha1:1"));

        // Same name, other kind: the OCIRepository, not the GitRepository.
        let oci_ks = ks_with_source(json!({"kind": "OCIRepository", "name": "repo"}));
        let (ns, a) = source(&ctx, &oci_ks).await.unwrap();
        assert_eq!(
            (ns.as_str(), a.revision.as_str()),
            ("apps", "latest@sha256:2")
        );
        assert_eq!(
            a.metadata
                .as_ref()
                .and_then(|m| m.get("org.opencontainers.image.revision"))
                .map(String::as_str),
            Some("main@sha1:1")
        );

        let empty_ks = ks_with_source(json!({"kind": "OCIRepository", "name": "empty"}));
        let e = source(&ctx, &empty_ks).await.unwrap_err();
        assert_eq!(e.message, "Source artifact not found, retrying in 30s");

        // A cache miss goes to the API (which does not answer here).
        let miss = ks_with_source(json!({"kind": "OCIRepository", "name": "other"}));
        let e = source(&ctx, &miss).await.unwrap_err();
        assert_eq!(e.severity, Severity::Generic);
        assert!(
            e.message.starts_with("unable to get source 'apps/other': "),
            "{}",
            e.message
        );

        // DirectSourceFetch: never the cache.
        ctx.direct_source_fetch = true;
        let e = source(&ctx, &oci_ks).await.unwrap_err();
        assert!(
            e.message.starts_with("unable to get source 'apps/repo': "),
            "{}",
            e.message
        );
        let e = source(&ctx, &git_ks).await.unwrap_err();
        assert!(
            e.message.starts_with("unable to get source 'apps/repo': "),
            "{}",
            e.message
        );
    }

    #[tokio::test]
    async fn cross_namespace_sources_are_refused_for_every_kind() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = offline_context(dir.path());
        ctx.no_cross_namespace_refs = true;
        for kind in ["GitRepository", "OCIRepository", "Bucket"] {
            let k = ks_with_source(json!({"kind": kind, "name": "repo", "namespace": "other"}));
            let e = source(&ctx, &k).await.unwrap_err();
            assert_eq!(
                (e.severity, e.reason, e.message),
                (
                    Severity::Stalling,
                    "AccessDenied",
                    format!(
                        "can't access '{kind}/other/repo', cross-namespace references have been blocked"
                    )
                )
            );
        }
        // The same namespace spelled out is no cross-namespace reference.
        let k = ks_with_source(json!({"kind": "Bucket", "name": "b", "namespace": "apps"}));
        assert_eq!(source(&ctx, &k).await.unwrap_err().reason, "ArtifactFailed");
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
