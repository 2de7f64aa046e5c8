//! Flux-compatible server-side apply (`ssa.ApplyAllStaged`): staged apply with dry-run drift
//! detection, field-manager takeover and the `<group>/ssa`, `/reconcile` and `/force`
//! annotations. Objects an [`AppliedCache`] knows to be as last applied are neither read,
//! dry-run nor applied.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use serde_json::Value;

use super::cache::{AppliedCache, desired_hash};
use super::changeset::{Action, ChangeSet};
use super::claims::{Claim, foreign_appliers, marked_claim, takeover_allowed};
use super::cleanup::cleanup_patch;
use super::drift::{DriftIgnoreRule, has_drifted, ignored_paths, reconcile_ignored, strip_paths};
use super::errors::{ApplyError, ApplyErrorKind, api_reason, dry_run_error, is_immutable_error};
use super::object::ObjectRef;
use super::owner::{Owner, has_meta_value};
use super::resolver::Resolver;
use super::stage::{Stage, apply_order, stage_of};
use super::wait;

/// Options for [`apply_all`].
#[derive(Clone)]
pub struct ApplyOptions {
    /// The owner: field manager, owner labels and annotation keys.
    pub owner: Owner,
    /// Recreate objects on immutable-field errors (`spec.force`).
    pub force: bool,
    /// Objects recreated on immutable-field errors as if they carried the force annotation
    /// (`<group>/force: enabled`), without writing it: Argo's `Replace=true`/`Force=true`
    /// sync options (issue 17). Empty unless a Kustomization opts in to Argo semantics.
    pub force_objects: Arc<HashSet<ObjectRef>>,
    /// `--custom-apply-stage-kinds` as `(group, kind)` pairs.
    pub custom_stage_kinds: Vec<(String, String)>,
    /// `--override-manager` names taken over like kubectl's.
    pub override_managers: Vec<String>,
    /// Timeout for the waits after the definition stages and for recreations (Flux: 60s).
    pub wait_timeout: Duration,
    /// Drift ignore rules, compiled with [`super::compile_ignore_rules`].
    pub ignore: Vec<DriftIgnoreRule>,
    /// `--concurrent-ssa`: objects planned (GET, dry-run, drift check) concurrently.
    pub concurrency: usize,
    /// What remembers the applied objects: objects it knows to be as last applied are not
    /// read, dry-run or applied again, and every object applied or verified is recorded in it.
    pub cache: Option<Arc<dyn AppliedCache>>,
    /// Mixed into the cache's desired-state hashes: the settings besides the object that
    /// change how it is applied (force, ignore rules, impersonated user...).
    pub cache_salt: u64,
    /// Refuse objects another owner holds ([`super::claims`]); off is Flux's behaviour
    /// (take everything over).
    pub refuse_conflicts: bool,
    /// The owner asks to take over what others hold (`<group>/takeover: enabled` on it).
    pub takeover: bool,
    /// Tells whether another owner of our kind still holds an object its labels give it.
    pub claims: Option<Arc<dyn ClaimCheck>>,
    /// Log the change set grouped by action (`GroupChangeLog`), not object by object.
    pub group_log: bool,
}

/// Whether another owner of our kind (named by the labels of a live object) still holds it:
/// it exists, is not being deleted and lists the object. Stale labels are no claim.
pub trait ClaimCheck: Send + Sync {
    /// Whether `namespace/name` still holds `id`.
    fn holds<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        id: &'a ObjectRef,
    ) -> futures::future::BoxFuture<'a, bool>;
}

impl std::fmt::Debug for ApplyOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApplyOptions")
            .field("owner", &self.owner)
            .field("force", &self.force)
            .field("force_objects", &self.force_objects.len())
            .field("custom_stage_kinds", &self.custom_stage_kinds)
            .field("override_managers", &self.override_managers)
            .field("wait_timeout", &self.wait_timeout)
            .field("ignore", &self.ignore.len())
            .field("concurrency", &self.concurrency)
            .field("cache", &self.cache.is_some())
            .field("refuse_conflicts", &self.refuse_conflicts)
            .field("takeover", &self.takeover)
            .finish()
    }
}

impl ApplyOptions {
    /// Defaults for an owner.
    pub fn new(owner: Owner) -> Self {
        ApplyOptions {
            owner,
            force: false,
            force_objects: Arc::default(),
            custom_stage_kinds: Vec::new(),
            override_managers: Vec::new(),
            wait_timeout: Duration::from_secs(60),
            ignore: Vec::new(),
            concurrency: 4,
            cache: None,
            cache_salt: 0,
            refuse_conflicts: false,
            takeover: false,
            claims: None,
            group_log: false,
        }
    }
}

fn resource_version(v: &Value) -> Option<&str> {
    v.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn to_value(obj: &DynamicObject) -> Value {
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

async fn get_live(
    api: &Api<DynamicObject>,
    obj: &ObjectRef,
) -> Result<Option<Value>, ApplyErrorKind> {
    api.get_opt(&obj.name)
        .await
        .map(|o| o.as_ref().map(to_value))
        .map_err(|source| ApplyErrorKind::Get {
            subject: obj.subject(),
            source,
        })
}

async fn dry_run(
    api: &Api<DynamicObject>,
    obj: &ObjectRef,
    desired: &Value,
    manager: &str,
) -> Result<Value, kube::Error> {
    let pp = PatchParams::apply(manager).force().dry_run();
    api.patch(&obj.name, &pp, &Patch::Apply(desired))
        .await
        .map(|o| to_value(&o))
}

async fn delete_and_wait(
    api: &Api<DynamicObject>,
    obj: &ObjectRef,
    timeout: Duration,
) -> Result<(), ApplyErrorKind> {
    let err = |message: String| ApplyErrorKind::Recreate {
        subject: obj.subject(),
        message,
    };
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match api.delete(&obj.name, &dp).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(err(e.to_string())),
    }
    let start = Instant::now();
    loop {
        match api.get_opt(&obj.name).await {
            Ok(None) => return Ok(()),
            Ok(Some(_)) if start.elapsed() < timeout => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Ok(Some(_)) => {
                return Err(err(format!(
                    "timeout waiting for {} deletion",
                    obj.subject()
                )));
            }
            Err(e) => return Err(err(e.to_string())),
        }
    }
}

/// The outcome of the concurrent phase for one object.
enum Plan {
    /// Nothing to write (skipped or unchanged), with the object as read when it was.
    Done(Action, Option<Box<Value>>),
    /// Not applied: another owner holds it.
    Refused(Claim),
    /// Apply this payload; `created` when the object does not exist (yet).
    Apply {
        api: Box<Api<DynamicObject>>,
        payload: Value,
        created: bool,
    },
}

/// GET, skip checks, dry-run (with recreation on immutable errors), metadata cleanup and
/// drift detection for one object. Runs concurrently for the objects of a stage.
async fn plan_one(
    resolver: &Resolver,
    obj: &ObjectRef,
    desired: &Value,
    opts: &ApplyOptions,
) -> Result<Plan, ApplyErrorKind> {
    let owner = &opts.owner;
    if owner.is_ignored(desired) {
        return Ok(Plan::Done(Action::Skipped, None));
    }
    let tracked = opts.cache.as_deref();
    if tracked.is_some_and(|t| t.unchanged(obj, desired_hash(desired, opts.cache_salt))) {
        return Ok(Plan::Done(Action::Unchanged, None));
    }
    // An object the watch of its kind has not seen is not read: the dry-run tells whether it
    // exists after all (without our labels), and only then is it read.
    let absent = tracked.is_some_and(|t| t.known_absent(obj));
    let api = resolver.api(obj).await?;
    let mut live = if absent {
        None
    } else {
        get_live(&api, obj).await?
    };
    let ssa_key = owner.ssa_key();
    let force_key = owner.force_key();
    let skip = |live: Option<&Value>| {
        live.is_some_and(|l| owner.is_ignored(l))
            || (live.is_some() && has_meta_value(desired, &ssa_key, "IfNotPresent"))
    };
    if skip(live.as_ref()) {
        return Ok(Plan::Done(Action::Skipped, None));
    }
    // Before any write or dry-run: an immutable-field recreation must never hit an object
    // someone else holds.
    if let Some(claim) = refused(&api, obj, desired, live.as_ref(), opts).await {
        return Ok(Plan::Refused(claim));
    }

    let mut dry = match dry_run(&api, obj, desired, &opts.owner.manager).await {
        Ok(v) => v,
        Err(e) => {
            let (_, message, code) = api_reason(&e);
            let force = opts.force
                || opts.force_objects.contains(obj)
                || has_meta_value(desired, &force_key, "enabled")
                || live
                    .as_ref()
                    .is_some_and(|l| has_meta_value(l, &force_key, "enabled"));
            if live.is_some() && force && is_immutable_error(code, &message) {
                delete_and_wait(&api, obj, opts.wait_timeout).await?;
                live = None;
                dry_run(&api, obj, desired, &opts.owner.manager)
                    .await
                    .map_err(|e| dry_run_error(obj, &e))?
            } else {
                return Err(dry_run_error(obj, &e));
            }
        }
    };

    if absent && resource_version(&dry).is_some_and(|rv| !rv.is_empty()) {
        live = get_live(&api, obj).await?;
        if skip(live.as_ref()) {
            return Ok(Plan::Done(Action::Skipped, None));
        }
        if let Some(claim) = refused(&api, obj, desired, live.as_ref(), opts).await {
            return Ok(Plan::Refused(claim));
        }
    }

    // A controller may write the object between the GET and the dry-run (e.g. the Deployment
    // revision annotation); compare snapshots of the same resourceVersion to avoid false drift.
    for _ in 0..3 {
        let (Some(l), Some(dry_rv)) = (live.as_ref(), resource_version(&dry)) else {
            break;
        };
        if resource_version(l) == Some(dry_rv) {
            break;
        }
        live = get_live(&api, obj).await?;
        if live.is_none() {
            break;
        }
        dry = dry_run(&api, obj, desired, &opts.owner.manager)
            .await
            .map_err(|e| dry_run_error(obj, &e))?;
    }

    let merge = has_meta_value(desired, &ssa_key, "Merge")
        || live
            .as_ref()
            .is_some_and(|l| has_meta_value(l, &ssa_key, "Merge"));
    let mut patched = false;
    if let (Some(l), false) = (live.as_ref(), merge)
        && let Some(patch) = cleanup_patch(l, &owner.manager, &opts.override_managers)
    {
        let pp = PatchParams {
            field_manager: Some(owner.manager.clone()),
            ..PatchParams::default()
        };
        api.patch(&obj.name, &pp, &Patch::Merge(&patch))
            .await
            .map_err(|e| ApplyErrorKind::Cleanup {
                subject: obj.subject(),
                message: api_reason(&e).1,
            })?;
        patched = true;
    }

    let paths = ignored_paths(&opts.ignore, &dry);
    let drifted = if paths.is_empty() {
        has_drifted(live.as_ref(), &dry)
    } else {
        let live_cmp = live.as_ref().map(|l| strip_paths(l, &paths));
        has_drifted(live_cmp.as_ref(), &strip_paths(&dry, &paths))
    };
    if !patched && !drifted {
        return Ok(Plan::Done(Action::Unchanged, live.map(Box::new)));
    }
    let payload = match live.as_ref() {
        Some(l) if !paths.is_empty() => reconcile_ignored(desired, l, &dry, &paths),
        _ => desired.clone(),
    };
    Ok(Plan::Apply {
        api: Box::new(api),
        payload,
        created: live.is_none(),
    })
}

/// The claim that keeps us from applying `desired` over `live`, unless conflicts are not
/// refused or a takeover is allowed.
async fn refused(
    api: &Api<DynamicObject>,
    obj: &ObjectRef,
    desired: &Value,
    live: Option<&Value>,
    opts: &ApplyOptions,
) -> Option<Claim> {
    let live = live?;
    if !opts.refuse_conflicts || opts.takeover || takeover_allowed(&opts.owner, desired, None) {
        return None;
    }
    held_by(api, obj, desired, live, opts).await
}

/// Who else holds the live object `live`, if anyone ([`super::claims`]): its marks, then
/// other appliers whose fields overlap ours (a dry-run apply without force conflicts).
async fn held_by(
    api: &Api<DynamicObject>,
    obj: &ObjectRef,
    desired: &Value,
    live: &Value,
    opts: &ApplyOptions,
) -> Option<Claim> {
    match marked_claim(live, obj, &opts.owner) {
        Some(Claim::Owner { namespace, name }) => {
            let holds = match opts.claims.as_deref() {
                Some(check) => check.holds(&namespace, &name, obj).await,
                None => true,
            };
            return holds.then_some(Claim::Owner { namespace, name });
        }
        Some(claim) => return Some(claim),
        None => {}
    }
    let appliers = foreign_appliers(live, &opts.owner, &opts.override_managers);
    if appliers.is_empty() {
        return None;
    }
    let pp = PatchParams {
        dry_run: true,
        ..PatchParams::apply(&opts.owner.manager)
    };
    match api.patch(&obj.name, &pp, &Patch::Apply(desired)).await {
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let named: Vec<String> = appliers
                .iter()
                .filter(|m| s.message.contains(&format!("\"{m}\"")))
                .cloned()
                .collect();
            Some(Claim::Managers(if named.is_empty() {
                appliers
            } else {
                named
            }))
        }
        _ => None,
    }
}

/// The real server-side apply of a planned object; returns the action and the object as the
/// server returned it (or as read, when there was nothing to write).
async fn execute(
    obj: &ObjectRef,
    plan: Plan,
    manager: &str,
) -> Result<(Action, Option<Value>), ApplyErrorKind> {
    let (api, payload, created) = match plan {
        Plan::Done(action, live) => return Ok((action, live.map(|b| *b))),
        Plan::Refused(_) => return Ok((Action::Skipped, None)),
        Plan::Apply {
            api,
            payload,
            created,
        } => (api, payload, created),
    };
    let pp = PatchParams::apply(manager).force();
    let applied = api
        .patch(&obj.name, &pp, &Patch::Apply(&payload))
        .await
        .map_err(|e| ApplyErrorKind::Apply {
            subject: obj.subject(),
            message: api_reason(&e).1,
        })?;
    let action = if created {
        Action::Created
    } else {
        Action::Configured
    };
    Ok((action, Some(to_value(&applied))))
}

/// Tells the cache of an applied or verified object (objects that must be read every time,
/// `ssa: IfNotPresent`, are not recorded).
async fn record(
    resolver: &Resolver,
    opts: &ApplyOptions,
    id: &ObjectRef,
    desired: &Value,
    action: Action,
    live: Option<&Value>,
) {
    let Some(cache) = opts.cache.as_ref() else {
        return;
    };
    let recordable = matches!(
        action,
        Action::Created | Action::Configured | Action::Unchanged
    ) && !has_meta_value(desired, &opts.owner.ssa_key(), "IfNotPresent");
    match live {
        Some(live) if recordable => {
            if let Ok((ar, _)) = resolver.resolve(id).await {
                let hash = desired_hash(desired, opts.cache_salt);
                let wrote = matches!(action, Action::Created | Action::Configured);
                cache.record(id, &ar, &opts.owner, hash, live, wrote);
            }
        }
        // Unchanged according to the cache: its record stands.
        None if action == Action::Unchanged => {}
        _ => cache.forget(id),
    }
}

/// Applies `objects` in Flux's stages and order with a fresh [`Resolver`].
pub async fn apply_all(
    client: Client,
    objects: Vec<Value>,
    opts: &ApplyOptions,
) -> Result<ChangeSet, ApplyError> {
    let resolver = Resolver::new(client);
    apply_all_with(&resolver, objects, opts).await
}

/// Applies `objects` in Flux's stages (definitions, classes, custom kinds, the rest), waiting
/// for the first two stages to become ready, sorted within each stage by Flux's kind order.
pub async fn apply_all_with(
    resolver: &Resolver,
    objects: Vec<Value>,
    opts: &ApplyOptions,
) -> Result<ChangeSet, ApplyError> {
    let mut changes = ChangeSet::default();
    let mut items = Vec::with_capacity(objects.len());
    for o in objects {
        let desired = opts.owner.prepare(o);
        match ObjectRef::from_value(&desired) {
            Ok(id) => items.push((id, desired)),
            Err(e) => {
                return Err(ApplyError {
                    kind: e.into(),
                    partial: changes,
                });
            }
        }
    }
    let mut stages: Vec<(Stage, Vec<(ObjectRef, Value)>)> = Vec::new();
    for stage in [
        Stage::ClusterDefinitions,
        Stage::ClassDefinitions,
        Stage::Custom,
        Stage::Rest,
    ] {
        let mut in_stage: Vec<(ObjectRef, Value)> = Vec::new();
        let mut rest = Vec::new();
        for (id, v) in items {
            if stage_of(&id, &opts.custom_stage_kinds) == stage {
                in_stage.push((id, v));
            } else {
                rest.push((id, v));
            }
        }
        items = rest;
        in_stage.sort_by(|a, b| apply_order(&a.0, &b.0));
        stages.push((stage, in_stage));
    }
    for (stage, objs) in stages {
        if objs.is_empty() {
            continue;
        }
        let mut applied = Vec::new();
        // Plans run concurrently (order kept); the writes then run one by one in order.
        // The futures are built before the stream (not in a `map` closure) so the caller's
        // future stays provably `Send` (rustc cannot generalise the closure's lifetimes).
        let futs: Vec<_> = objs
            .iter()
            .map(|(id, desired)| plan_one(resolver, id, desired, opts))
            .collect();
        let plans: Vec<Result<Plan, ApplyErrorKind>> = futures::stream::iter(futs)
            .buffered(opts.concurrency.max(1))
            .collect()
            .await;
        let mut planned = Vec::with_capacity(plans.len());
        for ((id, desired), plan) in objs.into_iter().zip(plans) {
            match plan {
                Ok(p) => planned.push((id, desired, p)),
                Err(kind) => {
                    return Err(ApplyError {
                        kind,
                        partial: changes,
                    });
                }
            }
        }
        for (id, desired, plan) in planned {
            if let Plan::Refused(claim) = plan {
                record(resolver, opts, &id, &desired, Action::Unknown, None).await;
                changes.refuse(id, claim);
                continue;
            }
            match execute(&id, plan, &opts.owner.manager).await {
                Ok((action, live)) => {
                    record(resolver, opts, &id, &desired, action, live.as_ref()).await;
                    if action != Action::Skipped {
                        applied.push(id.clone());
                    }
                    changes.push(id, action);
                }
                Err(kind) => {
                    return Err(ApplyError {
                        kind,
                        partial: changes,
                    });
                }
            }
        }
        if matches!(stage, Stage::ClusterDefinitions | Stage::ClassDefinitions)
            && !applied.is_empty()
            && let Err(e) = wait::wait_for_with(resolver, &applied, opts.wait_timeout).await
        {
            return Err(ApplyError {
                kind: e.into(),
                partial: changes,
            });
        }
    }
    if opts.group_log {
        tracing::info!(output = ?changes.to_grouped_map(), "server-side apply completed");
    } else {
        tracing::info!(output = ?changes.to_map(), "server-side apply completed");
    }
    Ok(changes)
}
