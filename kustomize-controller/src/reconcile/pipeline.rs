//! One reconcile of a Kustomization, as Flux's kustomize-controller runs it: a short
//! [`Pipeline::run`] that calls one function per stage, in order. Each stage returns a
//! [`StageError`] (Flux's reason and message, how it is retried) or hands its result to the
//! next; the conditions and status are derived from the outcome by [`super::status`].

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use rflux_common::api::kustomization::{Kustomization, KustomizationStatus, ResourceInventory};
use rflux_common::api::meta::Artifact;
use rflux_common::runtime::conditions::{
    self as cond, PROGRESSING_REASON, READY, RECONCILIATION_FAILED_REASON,
};
use rflux_common::runtime::{EventType, Severity, StageError, format_go_duration};
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;

use super::argo_namespace;
use super::build::{BuildObjectsError, build_objects};
use super::context::{
    ARTIFACT_FAILED_REASON, BUILD_FAILED_REASON, Context, HEALTH_CHECK_CANCELED_REASON,
    HEALTH_CHECK_FAILED_REASON, PRUNE_FAILED_REASON, client_stage_error, event, patch_status,
};
use super::ownership::conflict_error;
use super::progress::{PROGRESS_DELAY, ProgressSink, ProgressWriter, announces};
use super::prune_guard;
use super::source;
use super::spec::{
    NOT_IMPLEMENTED_REASON, UNSUPPORTED_FIELDS, WithoutFailFast, apply_options, duration_of,
    health_check_refs, unsupported_fields, wait_targets,
};
use super::status::{Applied, CANCELED_PREFIX, manifests_digest, ready_at};
use super::waves;
use crate::cel::{HealthExprs, INVALID_CEL_EXPRESSION_REASON, TERMINAL_ERROR_MESSAGE};
use crate::decrypt::{load_keys, refuse_encrypted};
use crate::fetch::PinnedArtifact;
use crate::identity::owner_of;
use crate::inventory;
use crate::ssa::wait::{wait_for_applied, wait_for_with_reader};
use crate::ssa::{
    ChangeSet, ObjectRef, Owner, Resolver, StatusReader, apply_all_with, compile_ignore_rules,
    delete_all,
};
use crate::substitute::post_build;

/// Artifact metadata key for the origin revision.
const ORIGIN_REVISION_KEY: &str = "org.opencontainers.image.revision";

/// The spec, checked before anything is fetched.
pub(super) struct Checked {
    /// `spec.timeout` (or the interval).
    pub(super) timeout: Duration,
    /// `spec.healthCheckExprs`, compiled.
    pub(super) health_exprs: HealthExprs,
}

/// What the apply stage leaves for the next ones.
struct ApplyResult {
    resolver: Resolver,
    changes: ChangeSet,
}

/// The stages of one reconciliation and the state they build: the status (inventory,
/// progress conditions) and the work slot, held from the artifact on.
pub(super) struct Pipeline<'a> {
    pub ks: &'a Kustomization,
    pub ctx: &'a Context,
    pub api: &'a Api<Kustomization>,
    /// The status being built (its conditions are in `conds`).
    pub status: KustomizationStatus,
    /// The conditions being built.
    pub conds: Vec<Condition>,
    /// The owner of what this Kustomization applies.
    pub(super) owner: Owner,
    /// The `--concurrent` work slot.
    pub(super) slot: Option<OwnedSemaphorePermit>,
    /// A remote Kustomization's busy mark on its cluster's tracker, from the apply on.
    busy: Option<crate::tracker::Busy>,
    /// The deferred progress status (`progress.rs`), stopped before the final status.
    pub(super) progress_writer: ProgressWriter,
}

impl<'a> Pipeline<'a> {
    pub fn new(ks: &'a Kustomization, ctx: &'a Context, api: &'a Api<Kustomization>) -> Self {
        let mut status = ks.status.clone().unwrap_or_default();
        let conds = status.conditions.take().unwrap_or_default();
        Pipeline {
            ks,
            ctx,
            api,
            status,
            conds,
            owner: owner_of(ks),
            slot: None,
            busy: None,
            progress_writer: ProgressWriter::default(),
        }
    }

    /// source → dependsOn → fetch → build → substitute → apply → prune → health.
    pub async fn run(&mut self) -> Result<Applied, StageError> {
        let checked = self.check_spec()?;
        // A remote cluster known to be unreachable: fail now, before taking a work slot.
        self.ctx.remote_gate(self.ks)?;
        let (ctx, ks) = (self.ctx, self.ks);
        let (source_ns, artifact) = self.source(checked.timeout).await?;
        let revision = artifact.revision.clone();
        let at = |e: StageError| e.at(&revision);
        source::dependencies(self.ctx, self.ks, &source_ns, &revision)
            .await
            .map_err(at)?;
        let dir = self.fetch(&artifact, checked.timeout).await.map_err(at)?;
        let objects = self
            .build(dir.path(), &revision, checked.timeout)
            .await
            .map_err(at)?;
        drop(dir);
        let objects = self.substitute(objects).await.map_err(at)?;
        let digest = manifests_digest(&objects);
        prune_guard::check(
            &self.owner,
            self.ks.annotations(),
            self.ks.spec.prune,
            self.status.inventory.as_ref(),
            &objects,
            &revision,
        )
        .map_err(at)?;
        // Argo CD sync waves (issue 17): `None` unless the gate and the annotation opt in.
        let sync_key = (
            self.ks.uid().unwrap_or_default(),
            revision.clone(),
            digest.clone(),
        );
        let mut argo = false;
        let waves = waves::prepare(
            self.ctx.argo_sync_semantics,
            self.ks,
            &objects,
            (&revision, &digest),
            || {
                argo = true;
                self.ctx.sync_start(&sync_key, unix_now())
            },
        )
        .map_err(at)?;
        argo_namespace::ensure(self.ctx, self.ks, &objects, &revision)
            .await
            .map_err(at)?;
        let applied = self
            .apply(objects, &revision, &checked, waves.as_ref())
            .await
            .map_err(|e| at(ctx.remote_failed(ks, e)))?;
        let (inventory, pruned) = self
            .prune(&applied, &revision, waves.as_ref(), checked.timeout)
            .await
            .map_err(|e| at(ctx.remote_failed(ks, e)))?;
        if let Some(e) = conflict_error(&applied.changes, &self.owner) {
            return Err(at(e));
        }
        let healthy = self
            .health(&applied, &checked)
            .await
            .map_err(|e| at(ctx.remote_failed(ks, e)))?;
        if argo {
            self.ctx.sync_done(&sync_key);
        }
        Ok(Applied {
            changed: applied.changes.has_changes() || pruned,
            origin_revision: artifact
                .metadata
                .as_ref()
                .and_then(|m| m.get(ORIGIN_REVISION_KEY).cloned()),
            revision,
            inventory,
            digest,
            healthy,
        })
    }

    pub(super) fn progress(&mut self, message: String) {
        let generation = self.ks.meta().generation;
        cond::mark_reconciling(
            &mut self.conds,
            PROGRESSING_REASON,
            &message,
            generation,
            Timestamp::now(),
        );
        if self.progress_writer.started() {
            self.progress_writer.update(self.progress_status());
        }
    }

    /// The status as the progress shows it (with the conditions being built).
    fn progress_status(&self) -> KustomizationStatus {
        let mut status = self.status.clone();
        status.conditions = Some(self.conds.clone());
        status
    }

    /// Where the deferred progress is written: the status subresource.
    fn progress_sink(&self) -> ProgressSink {
        let api = self.api.clone();
        let name = self.ks.name_any();
        Arc::new(move |status: KustomizationStatus| {
            let (api, name) = (api.clone(), name.clone());
            async move {
                if let Err(e) = patch_status(&api, &name, &status).await {
                    tracing::warn!(error = %e, "unable to record progress");
                }
            }
            .boxed()
        })
    }

    /// Stage: the spec. An invalid CEL health expression is terminal (Stalled
    /// InvalidCELExpression) and checked first; fields this controller refuses stall it; fields
    /// it accepts without acting on them are reported in the `UnsupportedFields` condition.
    fn check_spec(&mut self) -> Result<Checked, StageError> {
        let spec = &self.ks.spec;
        let health_exprs = HealthExprs::compile(
            spec.health_check_exprs.as_deref().unwrap_or_default(),
        )
        .map_err(|e| {
            StageError::stalling(
                READY,
                INVALID_CEL_EXPRESSION_REASON,
                format!("{TERMINAL_ERROR_MESSAGE}: {e}"),
            )
        })?;
        let (refused, warned) = unsupported_fields(spec);
        if warned.is_empty() {
            cond::delete(&mut self.conds, UNSUPPORTED_FIELDS);
        } else {
            let list: Vec<String> = warned.iter().map(|f| format!("spec.{f}")).collect();
            let message = format!(
                "{} accepted but not acted on by this controller yet",
                list.join(", ")
            );
            tracing::warn!(fields = ?warned, "{message}");
            cond::mark_true(
                &mut self.conds,
                UNSUPPORTED_FIELDS,
                NOT_IMPLEMENTED_REASON,
                &message,
                self.ks.meta().generation,
                Timestamp::now(),
            );
        }
        if !refused.is_empty() {
            let list: Vec<String> = refused.iter().map(|f| format!("spec.{f}")).collect();
            return Err(StageError::stalling(
                READY,
                RECONCILIATION_FAILED_REASON,
                format!("{} not supported by this controller yet", list.join(", ")),
            ));
        }
        let timeout = duration_of("timeout", spec.timeout.as_deref().unwrap_or(&spec.interval))?;
        duration_of("interval", &spec.interval)?;
        duration_of("retryInterval", spec.retry_interval())?;
        Ok(Checked {
            timeout,
            health_exprs,
        })
    }

    /// Stage: the source. Waiting for one holds no work slot; the rest of the pipeline does.
    /// A first (or new) revision is announced on the Reconciling condition.
    async fn source(&mut self, timeout: Duration) -> Result<(String, Artifact), StageError> {
        let (source_ns, artifact) = source::source(self.ctx, self.ks).await?;
        self.slot = self.ctx.work_slots.clone().acquire_owned().await.ok();
        let revision = &artifact.revision;
        self.progress(format!(
            "Fetching manifests for revision {revision} with a timeout of {}",
            format_go_duration(timeout)
        ));
        // A re-run of the applied revision of a Ready Kustomization does not announce itself:
        // most change nothing, and the final status follows in milliseconds. Others announce
        // it once the reconcile has run for `PROGRESS_DELAY` (`progress.rs`).
        if announces(ready_at(self.ks, revision)) {
            let (status, sink) = (self.progress_status(), self.progress_sink());
            self.progress_writer.start(status, PROGRESS_DELAY, sink);
        }
        Ok((source_ns, artifact))
    }

    /// Stage: fetch. Downloads the artifact (digest verified, cached) and holds the unpacked
    /// tree for the build, which reads it in place: the engine never writes into its input,
    /// so no working copy is made.
    async fn fetch(
        &self,
        artifact: &Artifact,
        timeout: Duration,
    ) -> Result<PinnedArtifact, StageError> {
        let failed = |message: String| StageError::generic(READY, ARTIFACT_FAILED_REASON, message);
        // Bounded by spec.timeout: retries against a URL that is gone (a replaced artifact
        // server) must not hold the work slot for minutes.
        let fetch = self
            .ctx
            .fetcher
            .fetch_pinned(&artifact.url, &artifact.digest);
        match tokio::time::timeout(timeout, fetch).await {
            Ok(r) => r.map_err(|e| failed(e.to_string())),
            Err(_) => Err(failed(format!(
                "failed to fetch artifact from {} within the timeout of {}",
                artifact.url,
                format_go_duration(timeout)
            ))),
        }
    }

    /// Stage: build, on a blocking thread. Like Flux, a missing path is an artifact failure,
    /// found before building.
    async fn build(
        &mut self,
        root: &Path,
        revision: &str,
        timeout: Duration,
    ) -> Result<Vec<Value>, StageError> {
        let path = self.ks.spec.path.clone().unwrap_or_else(|| "./".into());
        let build_dir = rflux_core::secure_join(root, &path);
        if !build_dir.exists() {
            return Err(StageError::generic(
                READY,
                ARTIFACT_FAILED_REASON,
                format!(
                    "kustomization path not found: stat {}: no such file or directory",
                    build_dir.display()
                ),
            ));
        }
        // Flux reports each stage on the Reconciling condition; a failure keeps the last one.
        self.progress(format!(
            "Building manifests for revision {revision} with a timeout of {}",
            format_go_duration(timeout)
        ));
        let build_failed =
            |message: String| StageError::generic(READY, BUILD_FAILED_REASON, message);
        // spec.decryption: the keys, read before the build (Flux fails the build without them)
        let keys = load_keys(&self.ctx.client, self.ks, self.ctx.sops_age_secret.as_ref())
            .await
            .map_err(|e| build_failed(e.to_string()))?
            .map(Arc::new);
        // Argo CD hooks may be named by `generateName` alone (issue 17): accepted only when the
        // Kustomization is opted in (a bad opt-in is reported by the waves stage).
        let argo = crate::argo::settings(
            self.ctx.argo_sync_semantics,
            self.ks.metadata.annotations.as_ref(),
        )
        .is_ok_and(|s| s.is_some());
        build_objects(root, &self.ks.spec, timeout, keys, argo)
            .await
            .map_err(|e| {
                let message = match e {
                    BuildObjectsError::Build(e) => relative_to_artifact(&e.to_string(), root),
                    e => relative_to_artifact(&e.to_string(), root),
                };
                build_failed(message)
            })
    }

    /// Stage: post-build substitution (`spec.postBuild`).
    async fn substitute(&self, objects: Vec<Value>) -> Result<Vec<Value>, StageError> {
        let ns = self.ks.namespace().unwrap_or_default();
        post_build(
            &self.ctx.client,
            &ns,
            self.ks.spec.post_build.as_ref(),
            objects,
            self.ctx.strict_substitutions,
        )
        .await
        .map_err(|e| StageError::generic(READY, BUILD_FAILED_REASON, e.to_string()))
    }

    /// Stage: server-side apply, in Flux's stages, as the tenant's service account (on the
    /// remote cluster of `spec.kubeConfig` when set); with `waves`, Argo's sync waves.
    async fn apply(
        &mut self,
        objects: Vec<Value>,
        revision: &str,
        checked: &Checked,
        waves: Option<&waves::Waves>,
    ) -> Result<ApplyResult, StageError> {
        let timeout = checked.timeout;
        self.progress(format!(
            "Detecting drift for revision {revision} with a timeout of {}",
            format_go_duration(timeout)
        ));
        let client = self
            .ctx
            .apply_client(self.ks)
            .await
            .map_err(|e| client_stage_error(&e))?;
        if self.busy.is_none() {
            self.busy = self.ctx.remote_busy(self.ks);
        }
        let ignore = compile_ignore_rules(self.ks.spec.ignore.as_deref().unwrap_or_default())
            .map_err(|e| {
                StageError::stalling(
                    READY,
                    RECONCILIATION_FAILED_REASON,
                    format!("invalid spec.ignore: {e}"),
                )
            })?;
        // Flux's guard: a Secret still SOPS-encrypted is never applied.
        refuse_encrypted(&objects)
            .map_err(|e| StageError::generic(READY, RECONCILIATION_FAILED_REASON, e))?;
        let opts = apply_options(self.ctx, self.ks, self.owner.clone(), timeout, ignore);
        let resolver = Resolver::new(client);
        if let Some(waves) = waves {
            let changes = self
                .apply_waves(&resolver, objects, &opts, revision, checked, waves)
                .await?;
            return Ok(ApplyResult { resolver, changes });
        }
        let changes = apply_all_with(&resolver, objects, &opts)
            .await
            .map_err(|e| StageError::generic(READY, RECONCILIATION_FAILED_REASON, e.to_string()))?;
        self.changes_event(&changes, revision).await;
        Ok(ApplyResult { resolver, changes })
    }

    /// Stage: prune what the previous inventory has and this one does not (`spec.prune`).
    /// The new inventory is recorded even when a later stage fails (the objects exist);
    /// objects whose deletion failed stay in it. Returns the inventory and whether anything
    /// was deleted.
    async fn prune(
        &mut self,
        applied: &ApplyResult,
        revision: &str,
        waves: Option<&waves::Waves>,
        timeout: Duration,
    ) -> Result<(ResourceInventory, bool), StageError> {
        let mut new_inventory = inventory::build(applied.changes.objects());
        let owner = &self.owner;
        if let Some(t) = self.ctx.tracker_for(self.ks) {
            let keep: Vec<ObjectRef> = applied.changes.objects().cloned().collect();
            t.retain(&(owner.namespace.clone(), owner.name.clone()), &keep);
        }
        let failed = |message: String| StageError::generic(READY, PRUNE_FAILED_REASON, message);
        let mut pruned = false;
        if self.ks.spec.prune
            && let Some(old) = self.status.inventory.as_ref()
        {
            let stale = inventory::diff(old, &new_inventory).map_err(|e| failed(e.to_string()))?;
            if let Some(waves) = waves.filter(|_| !stale.is_empty()) {
                let result = self
                    .prune_waves(
                        &applied.resolver,
                        &mut new_inventory,
                        &stale,
                        revision,
                        waves,
                        timeout,
                    )
                    .await;
                self.status.inventory = Some(new_inventory.clone());
                pruned = result?;
            } else if !stale.is_empty() {
                match delete_all(&applied.resolver, &stale, owner).await {
                    Ok(deleted) => {
                        pruned = deleted.has_changes();
                        self.changes_event(&deleted, revision).await;
                    }
                    Err(e) => {
                        inventory::merge_back(&mut new_inventory, &e.not_deleted);
                        self.status.inventory = Some(new_inventory);
                        return Err(failed(e.to_string()));
                    }
                }
            }
        }
        self.status.inventory = Some(new_inventory.clone());
        Ok((new_inventory, pruned))
    }

    /// Stage: health. `wait: true` waits for everything applied (from the tracker's watches,
    /// holding no work slot, when it has them all), else for `spec.healthChecks`. Returns the
    /// `Healthy` message, `None` when nothing was checked.
    async fn health(
        &mut self,
        applied: &ApplyResult,
        checked: &Checked,
    ) -> Result<Option<String>, StageError> {
        let spec = &self.ks.spec;
        let owner = &self.owner;
        let targets: Vec<ObjectRef> = if spec.wait() {
            wait_targets(&applied.changes, owner)
        } else {
            health_check_refs(spec, &owner.namespace)
        };
        if targets.is_empty() {
            return Ok(None);
        }
        let owner_key = (owner.namespace.clone(), owner.name.clone());
        let exprs: Option<&dyn StatusReader> =
            (!checked.health_exprs.is_empty()).then_some(&checked.health_exprs);
        let no_fail_fast = WithoutFailFast { inner: exprs };
        let reader = if self.ctx.fail_fast {
            exprs
        } else {
            Some(&no_fail_fast as &dyn StatusReader)
        };
        let watched = self
            .ctx
            .tracker_for(self.ks)
            .filter(|t| spec.wait() && reader.is_none() && t.covers(&owner_key, &targets));
        let started = Instant::now();
        let wait = async {
            if let Some(t) = watched {
                // Waiting holds no work slot.
                self.slot.take();
                t.wait_current(&owner_key, &targets, checked.timeout).await
            } else if spec.wait() {
                wait_for_applied(&applied.resolver, &targets, checked.timeout, reader).await
            } else {
                wait_for_with_reader(&applied.resolver, &targets, checked.timeout, reader).await
            }
        };
        let waited = if self.ctx.cancel_health_on_new_revision {
            let reg = self.ctx.triggers.register(owner_key.clone());
            tokio::select! {
                waited = wait => waited,
                by = reg.waiter.triggered() => {
                    return Err(StageError::new(
                        Severity::Superseded,
                        READY,
                        HEALTH_CHECK_CANCELED_REASON,
                        format!("{CANCELED_PREFIX}{by}"),
                    ));
                }
            }
        } else {
            wait.await
        };
        waited
            .map_err(|e| StageError::generic(READY, HEALTH_CHECK_FAILED_REASON, e.to_string()))?;
        Ok(Some(format!(
            "Health check passed in {}",
            format_go_duration(started.elapsed())
        )))
    }

    /// Flux's Progressing event listing what an apply or prune changed.
    pub(super) async fn changes_event(&self, changes: &ChangeSet, revision: &str) {
        if changes.has_changes() {
            event(
                self.ctx,
                self.ks,
                EventType::Normal,
                PROGRESSING_REASON,
                &changes.event_message(),
                revision,
            )
            .await;
        }
    }
}

/// A build error's text with the artifact's directory taken off the paths in it, so the Ready
/// message names `apps/kustomization.yaml:7`, not the temporary directory the artifact was
/// unpacked in (the root itself becomes `.`).
fn relative_to_artifact(message: &str, root: &Path) -> String {
    let mut roots = Vec::new();
    // the engine prints paths under the root with symlinks resolved
    if let Ok(real) = root.canonicalize() {
        roots.push(real);
    }
    roots.push(root.to_path_buf());
    let mut out = message.to_string();
    for r in roots {
        let r = r.display().to_string();
        let r = r.trim_end_matches('/');
        if r.is_empty() {
            continue;
        }
        out = out.replace(&format!("{r}/"), "");
        // what is left are mentions of the root itself, unless a longer name starts with it
        let mut rest = out.as_str();
        let mut replaced = String::with_capacity(out.len());
        while let Some(i) = rest.find(r) {
            let after = &rest[i + r.len()..];
            let longer = after
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'));
            replaced.push_str(&rest[..i]);
            replaced.push_str(if longer { r } else { "." });
            rest = after;
        }
        replaced.push_str(rest);
        out = replaced;
    }
    out
}

/// Seconds since the Unix epoch (0 before it).
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::relative_to_artifact;

    #[test]
    fn build_errors_name_paths_relative_to_the_artifact() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = t.path().join("artifact");
        std::fs::create_dir_all(root.join("apps")).expect("mkdir");
        let real = root.canonicalize().expect("canonical root");
        let msg = format!(
            "{r}/apps/kustomization.yaml:7: resources[1] 'svc.yaml': security: file '{r}/apps/../../x.yaml' is not in or below '{r}'; also {r}-other/a",
            r = real.display()
        );
        assert_eq!(
            relative_to_artifact(&msg, &root),
            format!(
                "apps/kustomization.yaml:7: resources[1] 'svc.yaml': security: file 'apps/../../x.yaml' is not in or below '.'; also {}-other/a",
                real.display()
            )
        );
        // the path as given (before symlinks are resolved) is taken off too
        let given = format!("{}/./b.yaml:1: may not add resource", root.display());
        assert_eq!(
            relative_to_artifact(&given, &root),
            "./b.yaml:1: may not add resource"
        );
    }
}
