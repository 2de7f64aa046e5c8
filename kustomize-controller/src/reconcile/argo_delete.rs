//! Argo CD's deletion of an application (issue 17, `argo-semantics.md` §1.7, §2.7, §4.5), for
//! an opted-in Kustomization being deleted:
//!
//! - the inventory is deleted one wave at a time, highest first, each wave gone before the
//!   next; live objects with `argocd.argoproj.io/sync-options: Delete=false` or
//!   `helm.sh/resource-policy: keep` are kept (read on the live object, as Argo does);
//! - PreDelete hooks (from the manifests rendered again) are created and waited for before
//!   anything is deleted, PostDelete hooks after every object is gone; a failed hook is
//!   deleted (so that the next attempt runs it again, as Argo) and blocks the deletion; at the
//!   end, the hooks with `HookSucceeded` are deleted.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use rflux_common::api::kustomization::Kustomization;
use serde_json::Value;

use super::build::build_objects;
use super::context::Context;
use super::source;
use super::spec::apply_options;
use crate::argo::hook::commit_of_revision;
use crate::argo::{
    DeleteHook, DeletePolicy, DeleteStage, HookNaming, delete_hooks, deletion_order,
};
use crate::decrypt::load_keys;
use crate::ssa::wait::{WaitError, wait_for_applied, wait_for_termination};
use crate::ssa::{
    Action, ApplyOptions, ChangeSet, DeleteError, ObjectRef, Owner, Resolver, apply_all_with,
    apply_order, delete_all,
};
use crate::substitute::post_build;

/// The deletion hooks of a Kustomization, from its manifests rendered again.
#[derive(Default)]
pub(super) struct DeleteHooks {
    /// Run before anything is deleted.
    pub pre: Vec<DeleteHook>,
    /// Run after every object is gone.
    pub post: Vec<DeleteHook>,
}

impl DeleteHooks {
    pub(super) fn is_empty(&self) -> bool {
        self.pre.is_empty() && self.post.is_empty()
    }
}

/// Why the manifests could not be rendered.
pub(super) enum RenderError {
    /// The source (or its artifact) is unavailable: no hook can be known.
    Source(String),
    /// Fetching, building or substituting failed: retried, the deletion waits.
    Build(String),
}

/// Renders the manifests of the source's current artifact again (as Argo does for its
/// deletion hooks) and picks the PreDelete and PostDelete hooks. Hooks without a name are
/// named from the revision and the deletion timestamp (stable across retries).
pub(super) async fn render_hooks(
    ctx: &Context,
    ks: &Kustomization,
    timeout: Duration,
) -> Result<DeleteHooks, RenderError> {
    let (_, artifact) = source::source(ctx, ks)
        .await
        .map_err(|e| RenderError::Source(e.message))?;
    let build = |m: String| RenderError::Build(m);
    let fetch = ctx.fetcher.fetch_pinned(&artifact.url, &artifact.digest);
    let dir = tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| build(format!("fetching {} timed out", artifact.url)))?
        .map_err(|e| build(e.to_string()))?;
    let keys = load_keys(&ctx.client, ks, ctx.sops_age_secret.as_ref())
        .await
        .map_err(|e| build(e.to_string()))?
        .map(Arc::new);
    let objects = build_objects(dir.path(), &ks.spec, timeout, keys, true)
        .await
        .map_err(|e| build(e.to_string()))?;
    drop(dir);
    let ns = ks.namespace().unwrap_or_default();
    let objects = post_build(
        &ctx.client,
        &ns,
        ks.spec.post_build.as_ref(),
        objects,
        ctx.strict_substitutions,
    )
    .await
    .map_err(|e| build(e.to_string()))?;
    let started_at_unix = ks
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or(0);
    let naming = HookNaming {
        revision: commit_of_revision(&artifact.revision).to_string(),
        started_at_unix,
    };
    Ok(DeleteHooks {
        pre: delete_hooks(&objects, DeleteStage::PreDelete, &naming),
        post: delete_hooks(&objects, DeleteStage::PostDelete, &naming),
    })
}

/// The options hooks are applied with: never through the applied-object cache.
pub(super) fn hook_apply_options(
    ctx: &Context,
    ks: &Kustomization,
    owner: Owner,
    timeout: Duration,
) -> ApplyOptions {
    ApplyOptions {
        cache: None,
        ..apply_options(ctx, ks, owner, timeout, Vec::new())
    }
}

fn hook_ref(h: &DeleteHook) -> Result<ObjectRef, String> {
    ObjectRef::from_value(&h.object).map_err(|e| format!("{}: {e}", h.label))
}

/// Creates the hooks of `stage` that do not exist yet (§2.7: a live hook is waited for, not
/// replaced) and waits until every one is complete. A failed hook is deleted (the next
/// attempt creates it again) and its failure returned, naming it.
pub(super) async fn run_hooks(
    resolver: &Resolver,
    hooks: &[DeleteHook],
    stage: DeleteStage,
    opts: &ApplyOptions,
    timeout: Duration,
) -> Result<(), String> {
    if hooks.is_empty() {
        return Ok(());
    }
    let mut refs = Vec::with_capacity(hooks.len());
    let mut missing = Vec::new();
    for h in hooks {
        let r = hook_ref(h)?;
        let live = resolver
            .get_live(&r)
            .await
            .map_err(|e| format!("{stage} hook {}: {e}", h.label))?;
        if live.is_none() {
            missing.push(h.object.clone());
        }
        refs.push(r);
    }
    if !missing.is_empty() {
        let applied = apply_all_with(resolver, missing, opts)
            .await
            .map_err(|e| format!("{stage} hook: {e}"))?;
        if let Some(e) = applied.entries.iter().find(|e| e.action == Action::Skipped) {
            return Err(format!(
                "{stage} hook {} was not applied (skipped: ignored, or held by another owner)",
                e.object.subject()
            ));
        }
    }
    match wait_for_applied(resolver, &refs, timeout, None).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let failed = failed_hooks(&e, &refs);
            if !failed.is_empty() {
                let owner = &opts.owner;
                if let Err(d) = delete_all(resolver, &failed, owner).await {
                    tracing::warn!(error = %d, "unable to delete the failed {stage} hooks");
                }
            }
            Err(failure_message(&e, &refs, stage))
        }
    }
}

fn failed_hooks(e: &WaitError, refs: &[ObjectRef]) -> Vec<ObjectRef> {
    match e {
        WaitError::Stalled { failed, .. } => failed
            .iter()
            .filter(|s| refs.contains(&s.object))
            .map(|s| s.object.clone())
            .collect(),
        _ => Vec::new(),
    }
}

/// `PreDelete hook Job/app/backup failed: <message>`, or why the wait ended.
fn failure_message(e: &WaitError, refs: &[ObjectRef], stage: DeleteStage) -> String {
    match e {
        WaitError::Stalled { failed, .. } => {
            let mine: Vec<String> = failed
                .iter()
                .filter(|s| refs.contains(&s.object))
                .map(|s| format!("{} failed: {}", s.object.subject(), s.message))
                .collect();
            if mine.is_empty() {
                format!("{stage} hooks: {e}")
            } else {
                format!("{stage} hook {}", mine.join("; "))
            }
        }
        _ => format!("{stage} hooks did not complete: {e}"),
    }
}

/// Deletes the hooks whose policy is `HookSucceeded` once the deletion succeeded (§2.7
/// cleanup); hooks with only `BeforeHookCreation` stay, as in Argo. Failures are logged.
pub(super) async fn cleanup_hooks(resolver: &Resolver, hooks: &DeleteHooks, owner: &Owner) {
    let refs: Vec<ObjectRef> = hooks
        .pre
        .iter()
        .chain(hooks.post.iter())
        .filter(|h| h.policies.contains(&DeletePolicy::HookSucceeded))
        .filter_map(|h| hook_ref(h).ok())
        .collect();
    if refs.is_empty() {
        return;
    }
    if let Err(e) = delete_all(resolver, &refs, owner).await {
        tracing::warn!(error = %e, "unable to delete the HookSucceeded deletion hooks");
    }
}

/// What to do about the last wave's termination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LastWait {
    /// Do not wait (`Delete`, `MirrorPrune`).
    No,
    /// Wait; a failure is reported, not fatal (`WaitForTermination`, as Flux).
    Report,
    /// Wait; a failure keeps the finalizer (PostDelete hooks follow).
    Require,
}

/// Argo's cascade deletion of `inventory` (§1.7): live objects read first; those with
/// `Delete=false` or `helm.sh/resource-policy: keep` kept (Skipped in the change set); the
/// rest deleted wave by wave, highest first, each wave waited for (gone) before the next.
/// Flux's ownership rules still apply ([`delete_all`]). A failure keeps the finalizer.
/// Returns the changes and, with [`LastWait::Report`], the failed wait of the last wave.
pub(super) async fn delete_in_waves(
    resolver: &Resolver,
    inventory: &[ObjectRef],
    owner: &Owner,
    last: LastWait,
    timeout: Duration,
) -> Result<(ChangeSet, Option<WaitError>), DeleteError> {
    let mut ordered = inventory.to_vec();
    ordered.sort_by(apply_order);
    let mut changes = ChangeSet::default();
    let mut refs = Vec::new();
    let mut live = Vec::new();
    let mut errors = Vec::new();
    for r in &ordered {
        match resolver.get_live(r).await {
            Ok(None) => changes.push(r.clone(), Action::Deleted),
            Ok(Some(obj)) => {
                live.push(serde_json::to_value(&obj).unwrap_or(Value::Null));
                refs.push(r.clone());
            }
            Err(e) => errors.push(e),
        }
    }
    let fail = |errors: Vec<String>, changes: ChangeSet, not_deleted: Vec<ObjectRef>| DeleteError {
        errors,
        changes,
        not_deleted,
    };
    if !errors.is_empty() {
        return Err(fail(errors, changes, refs));
    }
    let order = match deletion_order(&live) {
        Ok(o) => o,
        Err(e) => return Err(fail(vec![e.to_string()], changes, refs)),
    };
    for &i in &order.kept {
        if let Some(r) = refs.get(i) {
            tracing::info!(object = %r.subject(), "kept: Delete=false or resource-policy keep");
            changes.push(r.clone(), Action::Skipped);
        }
    }
    let waves: Vec<(i64, Vec<ObjectRef>)> = order
        .waves
        .iter()
        .map(|(w, pos)| {
            (
                *w,
                pos.iter().filter_map(|&i| refs.get(i).cloned()).collect(),
            )
        })
        .collect();
    let mut termination_error = None;
    for (k, (wave, group)) in waves.iter().enumerate() {
        let later = || -> Vec<ObjectRef> {
            waves
                .iter()
                .skip(k + 1)
                .flat_map(|(_, g)| g.iter().cloned())
                .collect()
        };
        let deleted = match delete_all(resolver, group, owner).await {
            Ok(c) => c,
            Err(mut e) => {
                changes.extend(std::mem::take(&mut e.changes));
                e.not_deleted.extend(later());
                return Err(fail(e.errors, changes, e.not_deleted));
            }
        };
        let gone: Vec<ObjectRef> = deleted
            .entries
            .iter()
            .filter(|e| e.action == Action::Deleted)
            .map(|e| e.object.clone())
            .collect();
        changes.extend(deleted);
        let is_last = k + 1 == waves.len();
        if is_last && last == LastWait::No {
            break;
        }
        if let Err(e) = wait_for_termination(resolver, &gone, timeout).await {
            if is_last && last == LastWait::Report {
                termination_error = Some(e);
            } else {
                let mut pending = gone;
                pending.extend(later());
                let msg = format!("wave {wave}: waiting for its deletion: {e}");
                return Err(fail(vec![msg], changes, pending));
            }
        }
    }
    Ok((changes, termination_error))
}
