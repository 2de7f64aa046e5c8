//! One object's plan, run concurrently for the objects of a stage: GET, skip checks, dry-run
//! (with recreation on immutable errors), metadata cleanup, drift detection and the ownership
//! claims; or, for an object the cache knows absent, a direct create.

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use serde_json::Value;

use super::options::ApplyOptions;
use super::plan::{Route, route};
use crate::cache::desired_hash;
use crate::changeset::Action;
use crate::claims::{Claim, foreign_appliers, marked_claim, takeover_allowed};
use crate::cleanup::cleanup_patch;
use crate::drift::{has_drifted, ignored_paths, reconcile_ignored, strip_paths};
use crate::errors::{ApplyErrorKind, api_reason, dry_run_error, is_immutable_error};
use crate::object::ObjectRef;
use crate::owner::has_meta_value;
use crate::resolver::Resolver;

fn resource_version(v: &Value) -> Option<&str> {
    v.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

pub(super) fn to_value(obj: &DynamicObject) -> Value {
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
pub(super) enum Plan {
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
    /// Known absent: create it by applying `payload` without a dry-run ([`plan::route`]).
    Create {
        api: Box<Api<DynamicObject>>,
        payload: Value,
    },
}

/// GET, skip checks, dry-run (with recreation on immutable errors), metadata cleanup and
/// drift detection for one object. Runs concurrently for the objects of a stage. With
/// `direct`, an object the cache knows absent is planned as a [`Plan::Create`] instead
/// (`write.rs` falls back to the full path, without `direct`, when the create meets an
/// object after all).
pub(super) async fn plan_one(
    resolver: &Resolver,
    obj: &ObjectRef,
    desired: &Value,
    opts: &ApplyOptions,
    direct: bool,
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
    if direct && route(absent) == Route::CreateDirect {
        return Ok(Plan::Create {
            api: Box::new(api),
            payload: desired.clone(),
        });
    }
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
pub(super) async fn refused(
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
