//! The writes of one stage, after every dry-run of it passed: the known-absent objects are
//! created first (no dry-run; a failed create deletes what this attempt created and stops the
//! stage before any update), then the updates, one by one in stage order. The change set keeps
//! the stage order.

use kube::api::Patch;
use kube::api::{DeleteParams, PatchParams, Preconditions, PropagationPolicy};
use serde_json::Value;

use super::one::{Plan, plan_one, refused, to_value};
use super::plan::{
    CreateOutcome, Created, before_our_labels, create_outcome, created_record, rollback_targets,
    write_order,
};
use crate::cache::desired_hash;
use crate::changeset::{Action, ChangeSet};
use crate::claims::Claim;
use crate::errors::{ApplyErrorKind, api_reason, dry_run_error};
use crate::object::ObjectRef;
use crate::owner::has_meta_value;
use crate::resolver::Resolver;

use super::options::ApplyOptions;

/// What happened to one object of the stage.
enum Outcome {
    Refused(Claim),
    Done(Action),
}

/// Writes the planned objects of a stage; returns the objects written or verified (for the
/// waits of the definition stages). On error, `changes` holds what was done before it (a
/// rolled-back create is not in it).
pub(super) async fn write_stage(
    resolver: &Resolver,
    opts: &ApplyOptions,
    planned: Vec<(ObjectRef, Value, Plan)>,
    changes: &mut ChangeSet,
) -> Result<Vec<ObjectRef>, ApplyErrorKind> {
    let creates: Vec<bool> = planned
        .iter()
        .map(|(_, _, p)| matches!(p, Plan::Create { .. }))
        .collect();
    let (create_idx, update_idx) = write_order(&creates);
    let mut slots: Vec<Option<(ObjectRef, Value, Plan)>> = planned.into_iter().map(Some).collect();
    let mut outcomes: Vec<Option<(ObjectRef, Outcome)>> = (0..slots.len()).map(|_| None).collect();
    let manager = &opts.owner.manager;

    let mut made: Vec<Created> = Vec::new();
    for i in create_idx {
        let Some((id, desired, plan)) = slots.get_mut(i).and_then(Option::take) else {
            continue;
        };
        match create_one(resolver, opts, &id, &desired, plan, &mut made).await {
            Ok(outcome) => outcomes[i] = Some((id, outcome)),
            Err(kind) => {
                record(resolver, opts, &id, &desired, Action::Unknown, None).await;
                rollback(resolver, opts, &made).await;
                return Err(kind);
            }
        }
    }

    let mut failed = None;
    for i in update_idx {
        let Some((id, desired, plan)) = slots.get_mut(i).and_then(Option::take) else {
            continue;
        };
        if let Plan::Refused(claim) = plan {
            record(resolver, opts, &id, &desired, Action::Unknown, None).await;
            outcomes[i] = Some((id, Outcome::Refused(claim)));
            continue;
        }
        match execute(&id, plan, manager).await {
            Ok((action, live)) => {
                record(resolver, opts, &id, &desired, action, live.as_ref()).await;
                outcomes[i] = Some((id, Outcome::Done(action)));
            }
            Err(kind) => {
                failed = Some(kind);
                break;
            }
        }
    }

    let mut applied = Vec::new();
    for (id, outcome) in outcomes.into_iter().flatten() {
        match outcome {
            Outcome::Refused(claim) => changes.refuse(id, claim),
            Outcome::Done(action) => {
                if action != Action::Skipped {
                    applied.push(id.clone());
                }
                changes.push(id, action);
            }
        }
    }
    match failed {
        Some(kind) => Err(kind),
        None => Ok(applied),
    }
}

/// A known-absent object: applied without force and without a dry-run. Created: remembered
/// for a rollback. Existed without conflict: its claims are checked as on the full path (our
/// fields are taken back if another owner holds it). Conflict: the full path decides.
async fn create_one(
    resolver: &Resolver,
    opts: &ApplyOptions,
    id: &ObjectRef,
    desired: &Value,
    plan: Plan,
    made: &mut Vec<Created>,
) -> Result<Outcome, ApplyErrorKind> {
    let manager = &opts.owner.manager;
    let Plan::Create { api, payload } = plan else {
        let (action, live) = execute(id, plan, manager).await?;
        record(resolver, opts, id, desired, action, live.as_ref()).await;
        return Ok(Outcome::Done(action));
    };
    let response = api
        .patch(
            &id.name,
            &PatchParams::apply(manager),
            &Patch::Apply(&payload),
        )
        .await
        .map(|o| to_value(&o));
    let code = |e: &kube::Error| match e {
        kube::Error::Api(s) => s.code,
        _ => 0,
    };
    match create_outcome(response.as_ref().map_err(code), manager) {
        CreateOutcome::Created => {
            let live = response.ok();
            if let Some(c) = live.as_ref().and_then(|l| created_record(id, l, manager)) {
                made.push(c);
            }
            record(resolver, opts, id, desired, Action::Created, live.as_ref()).await;
            Ok(Outcome::Done(Action::Created))
        }
        CreateOutcome::Existed => {
            let live = response.ok();
            let prior = live.as_ref().map(|l| before_our_labels(l, &opts.owner));
            if let Some(claim) = refused(&api, id, desired, prior.as_ref(), opts).await {
                give_back(&api, id, manager).await;
                record(resolver, opts, id, desired, Action::Unknown, None).await;
                return Ok(Outcome::Refused(claim));
            }
            record(
                resolver,
                opts,
                id,
                desired,
                Action::Configured,
                live.as_ref(),
            )
            .await;
            Ok(Outcome::Done(Action::Configured))
        }
        CreateOutcome::Conflict => {
            tracing::debug!(object = %id.subject(), "known absent, found with fields of others: full path");
            let plan = plan_one(resolver, id, desired, opts, false).await?;
            if let Plan::Refused(claim) = plan {
                record(resolver, opts, id, desired, Action::Unknown, None).await;
                return Ok(Outcome::Refused(claim));
            }
            let (action, live) = execute(id, plan, manager).await?;
            record(resolver, opts, id, desired, action, live.as_ref()).await;
            Ok(Outcome::Done(action))
        }
        CreateOutcome::Failed => match response {
            // Without a dry-run, the create meets the errors the dry-run would have met:
            // reported in the dry-run's words, as Flux does.
            Err(e) => Err(dry_run_error(id, &e)),
            Ok(_) => Err(ApplyErrorKind::Apply {
                subject: id.subject(),
                message: "unexpected create outcome".to_string(),
            }),
        },
    }
}

/// Takes back the fields our apply added to an object another owner holds: an apply of
/// nothing by our manager removes the fields only we own (shared ones stay theirs).
async fn give_back(api: &kube::Api<kube::api::DynamicObject>, id: &ObjectRef, manager: &str) {
    let empty = serde_json::json!({
        "apiVersion": id.api_version(),
        "kind": id.kind,
        "metadata": {"name": id.name, "namespace": id.namespace},
    });
    if let Err(e) = api
        .patch(
            &id.name,
            &PatchParams::apply(manager),
            &Patch::Apply(&empty),
        )
        .await
    {
        tracing::warn!(object = %id.subject(), error = %e, "unable to give back the fields of a held object");
    }
}

/// Deletes the objects this attempt created, by uid precondition (an object recreated by
/// someone else meanwhile is not ours to delete), and forgets them in the cache. Failures are
/// logged: the stage fails with the create's error either way.
async fn rollback(resolver: &Resolver, opts: &ApplyOptions, made: &[Created]) {
    for target in rollback_targets(made) {
        if let Some(cache) = opts.cache.as_ref() {
            cache.forget(&target.object);
        }
        let api = match resolver.api(&target.object).await {
            Ok(api) => api,
            Err(e) => {
                tracing::warn!(object = %target.object.subject(), error = %e, "rollback of a create failed");
                continue;
            }
        };
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            preconditions: Some(Preconditions {
                uid: Some(target.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&target.object.name, &dp).await {
            Ok(_) => {
                tracing::info!(object = %target.object.subject(), "create rolled back");
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                tracing::warn!(object = %target.object.subject(), error = %e, "rollback of a create failed");
            }
        }
    }
}

/// The real server-side apply of a planned object; returns the action and the object as the
/// server returned it (or as read, when there was nothing to write).
async fn execute(
    obj: &ObjectRef,
    plan: Plan,
    manager: &str,
) -> Result<(Action, Option<Value>), ApplyErrorKind> {
    let (api, payload, created, direct) = match plan {
        Plan::Done(action, live) => return Ok((action, live.map(|b| *b))),
        Plan::Refused(_) => return Ok((Action::Skipped, None)),
        Plan::Apply {
            api,
            payload,
            created,
        } => (api, payload, created, false),
        // Only reached if a create is written outside the create phase.
        Plan::Create { api, payload } => (api, payload, true, true),
    };
    let pp = PatchParams::apply(manager).force();
    let applied = match api.patch(&obj.name, &pp, &Patch::Apply(&payload)).await {
        Ok(o) => to_value(&o),
        // Without a dry-run, the create meets the errors the dry-run would have met: report
        // them in the dry-run's words, as Flux does.
        Err(e) if direct => return Err(dry_run_error(obj, &e)),
        Err(e) => {
            return Err(ApplyErrorKind::Apply {
                subject: obj.subject(),
                message: api_reason(&e).1,
            });
        }
    };
    let created = if direct {
        super::plan::created_by_apply(&applied, manager)
    } else {
        created
    };
    let action = if created {
        Action::Created
    } else {
        Action::Configured
    };
    Ok((action, Some(applied)))
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
