//! Running Argo CD resource hooks (issue 17, `argo-semantics.md` §2) for the opted-in
//! Kustomizations: creating a group of hooks (a `BeforeHookCreation` hook first replaces the
//! live object of the same name), the delete policies at the end of a sync, and the failure
//! path (delete the `HookFailed` hooks, run the SyncFail hooks all at once).
//!
//! Hooks are applied with our field manager and owner labels, but never enter the change set
//! the inventory is built from, nor the applied-object cache: they are never pruned as stale
//! and a drift check never re-applies them. Waiting for them is [`Pipeline::wait_wave`]'s (a
//! hook is complete when its kstatus is Current: a Job Complete, a Pod Succeeded, a kind
//! without a status at once; Failed fails it, §2.5).

use std::time::Duration;

use rflux_common::runtime::StageError;
use rflux_common::runtime::conditions::READY;
use serde_json::Value;

use super::pipeline::{Checked, Pipeline};
use super::waves::{HookRun, Waves};
use crate::argo::{DeletePolicy, Phase};
use crate::ssa::wait::{WaitError, wait_for_termination};
use crate::ssa::{Action, ApplyOptions, ObjectRef, Resolver, apply_all_with, delete_all};

/// The shortest time given to the SyncFail hooks, even when the sync used up `spec.timeout`.
const SYNC_FAIL_MIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The hooks created by one sync, with their delete policies.
#[derive(Default)]
pub(super) struct Ledger {
    created: Vec<(ObjectRef, Vec<DeletePolicy>)>,
}

impl Ledger {
    fn with_policy(&self, policy: DeletePolicy) -> Vec<ObjectRef> {
        self.created
            .iter()
            .filter(|(_, p)| p.contains(&policy))
            .map(|(r, _)| r.clone())
            .collect()
    }
}

/// `Job/ns/a, Job/ns/b`.
pub(super) fn labels(hooks: &[HookRun]) -> String {
    let names: Vec<&str> = hooks.iter().map(|h| h.label.as_str()).collect();
    names.join(", ")
}

/// `hook` or `hooks`.
pub(super) fn hook_word(hooks: &[HookRun]) -> &'static str {
    if hooks.len() == 1 { "hook" } else { "hooks" }
}

/// A hook's object as applied: the built object with its name set (`generateName` dropped).
fn hook_object(objects: &[Option<Value>], hook: &HookRun) -> Result<Value, String> {
    let mut obj = objects
        .get(hook.position)
        .and_then(Option::as_ref)
        .cloned()
        .ok_or_else(|| format!("{}: the object is missing", hook.label))?;
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("name".into(), hook.name.clone().into());
        meta.remove("generateName");
    }
    Ok(obj)
}

/// The failure of a wait, told from the side of the hooks: `Some` when one of `hooks` failed
/// or did not complete.
pub(super) fn hook_failure(e: &WaitError, hooks: &[ObjectRef], phase: Phase) -> Option<String> {
    match e {
        WaitError::Stalled { elapsed, failed } => {
            let mine: Vec<String> = failed
                .iter()
                .filter(|s| hooks.contains(&s.object))
                .map(|s| format!("{} failed: {}", s.object.subject(), s.message))
                .collect();
            (!mine.is_empty())
                .then(|| format!("{phase} hook {} (after {elapsed})", mine.join("; ")))
        }
        WaitError::Timeout { pending, .. } => {
            let mine: Vec<String> = pending
                .iter()
                .filter(|s| hooks.contains(&s.object))
                .map(|s| s.object.subject())
                .collect();
            (!mine.is_empty())
                .then(|| format!("{phase} hook {} did not complete: {e}", mine.join(", ")))
        }
        WaitError::Changed { subject, .. } if hooks.iter().any(|h| h.subject() == *subject) => {
            Some(format!("{phase} hook failed: {e}"))
        }
        _ => None,
    }
}

impl Pipeline<'_> {
    /// Creates a group of hooks and records them in `ledger`. A hook with
    /// `BeforeHookCreation` replaces the live object of its name: that one is deleted and
    /// waited for (gone) first. Returns the hooks, to wait for.
    pub(super) async fn create_hooks(
        &mut self,
        resolver: &Resolver,
        objects: &[Option<Value>],
        hooks: &[HookRun],
        opts: &ApplyOptions,
        timeout: Duration,
        ledger: &mut Ledger,
    ) -> Result<Vec<ObjectRef>, String> {
        let mut objs = Vec::with_capacity(hooks.len());
        let mut refs = Vec::with_capacity(hooks.len());
        let mut before = Vec::new();
        for h in hooks {
            let obj = hook_object(objects, h)?;
            let r = ObjectRef::from_value(&obj).map_err(|e| format!("{}: {e}", h.label))?;
            if h.policies.contains(&DeletePolicy::BeforeHookCreation) {
                before.push(r.clone());
            }
            refs.push(r);
            objs.push(obj);
        }
        self.delete_hooks(resolver, &before, timeout).await?;
        for (r, h) in refs.iter().zip(hooks) {
            ledger.created.push((r.clone(), h.policies.clone()));
        }
        // Never through the applied-object cache: a hook deleted since must be created again.
        let opts = ApplyOptions {
            cache: None,
            ..opts.clone()
        };
        let applied = apply_all_with(resolver, objs, &opts)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(e) = applied.entries.iter().find(|e| e.action == Action::Skipped) {
            return Err(format!(
                "{} was not applied (skipped: ignored, or held by another owner)",
                e.object.subject()
            ));
        }
        Ok(refs)
    }

    /// Deletes hooks we own (background propagation) and waits until they are gone.
    async fn delete_hooks(
        &mut self,
        resolver: &Resolver,
        refs: &[ObjectRef],
        timeout: Duration,
    ) -> Result<(), String> {
        if refs.is_empty() {
            return Ok(());
        }
        let deleted = delete_all(resolver, refs, &self.owner)
            .await
            .map_err(|e| format!("deleting hooks: {e}"))?;
        let gone: Vec<ObjectRef> = deleted
            .entries
            .iter()
            .filter(|e| e.action == Action::Deleted)
            .map(|e| e.object.clone())
            .collect();
        wait_for_termination(resolver, &gone, timeout)
            .await
            .map_err(|e| format!("deleting hooks: {e}"))
    }

    /// The sync succeeded: deletes the hooks with `HookSucceeded`. A failure is only logged
    /// (the objects are applied; the next sync replaces the hooks).
    pub(super) async fn hooks_succeeded(
        &mut self,
        resolver: &Resolver,
        ledger: &Ledger,
        timeout: Duration,
    ) {
        let refs = ledger.with_policy(DeletePolicy::HookSucceeded);
        if let Err(e) = self.delete_hooks(resolver, &refs, timeout).await {
            tracing::warn!(error = %e, "unable to delete the HookSucceeded hooks");
        }
    }

    /// The sync failed with `error`: deletes the hooks with `HookFailed`, runs the SyncFail
    /// hooks all at once (waves ignored, §1.6) and waits for them, deletes those with
    /// `HookFailed`, and returns `error` with what the SyncFail hooks did. Without hooks to run
    /// (a no-op reconcile), `error` as is.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn sync_failed(
        &mut self,
        resolver: &Resolver,
        objects: &[Option<Value>],
        opts: &ApplyOptions,
        revision: &str,
        checked: &Checked,
        waves: &Waves,
        ledger: &Ledger,
        left: Duration,
        mut error: StageError,
    ) -> StageError {
        if !waves.run_hooks {
            return error;
        }
        let timeout = left.max(SYNC_FAIL_MIN_TIMEOUT);
        let failed_hooks = ledger.with_policy(DeletePolicy::HookFailed);
        if let Err(e) = self.delete_hooks(resolver, &failed_hooks, timeout).await {
            tracing::warn!(error = %e, "unable to delete the HookFailed hooks");
        }
        let hooks = &waves.sync_fail;
        if hooks.is_empty() {
            return error;
        }
        let (word, names) = (hook_word(hooks), labels(hooks));
        self.show_progress(format!(
            "Running SyncFail {word} {names} for revision {revision}"
        ))
        .await;
        let mut fail_ledger = Ledger::default();
        let outcome = match self
            .create_hooks(resolver, objects, hooks, opts, timeout, &mut fail_ledger)
            .await
        {
            Ok(refs) => self
                .wait_wave(resolver, &refs, timeout, checked, true)
                .await
                .map_err(|e| {
                    hook_failure(&e, &refs, Phase::SyncFail).unwrap_or_else(|| e.to_string())
                }),
            Err(e) => Err(e),
        };
        let failed_hooks = fail_ledger.with_policy(DeletePolicy::HookFailed);
        if let Err(e) = self.delete_hooks(resolver, &failed_hooks, timeout).await {
            tracing::warn!(error = %e, "unable to delete the HookFailed SyncFail hooks");
        }
        error.message = match outcome {
            Ok(()) => format!("{}; SyncFail {word} {names} ran", error.message),
            Err(e) => format!("{}; one or more SyncFail hooks failed: {e}", error.message),
        };
        error
    }
}

/// A hook failure: the sync stops (`Ready=False`, retried).
pub(super) fn hook_error(message: String) -> StageError {
    StageError::generic(
        READY,
        rflux_common::runtime::conditions::RECONCILIATION_FAILED_REASON,
        message,
    )
}
