//! One ResourceSetInputProvider reconcile (reference §12.4): deletion → finalizer →
//! `reconcile: disabled` → schedule → spec checks → export (Static) → status, event, requeue.
//! The decisions are the pure functions of [`super::status`], [`super::schedule`],
//! [`super::spec`] and [`super::revision`]; this file does the I/O.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use rflux_common::api::resourceset::keys::{
    self, FINALIZER, INVALID_SCHEDULE_REASON, INVALID_SPEC_REASON, PROGRESSING_REASON,
    RECONCILIATION_DISABLED_REASON, RECONCILIATION_FAILED_REASON, RECONCILIATION_IN_PROGRESS_MSG,
    RECONCILIATION_SUCCEEDED_REASON, REVISION_ANNOTATION, SKIPPED_DUE_TO_SCHEDULE_REASON,
    TOKEN_ANNOTATION,
};
use rflux_common::api::resourcesetinputprovider::{
    InputProviderType, ResourceSetInputProvider, ResourceSetInputProviderStatus,
};
use rflux_common::runtime::conditions::{self as cond, READY, RECONCILING};
use rflux_common::runtime::events::event_annotations;
use rflux_common::runtime::finalizers::{add_finalizer, has_finalizer, remove_finalizer};
use rflux_common::runtime::{EventType, parse_go_duration};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::revision::{exported_revision, static_input_set};
use super::schedule::Scheduler;
use super::status::{
    TERMINAL_ERROR_MSG, finalize, finished_message, initialize, requeue_after, take_force_request,
    until,
};
use super::{Context, spec};

/// Why a reconcile failed (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// Reading the provider failed.
    #[error("failed to get ResourceSetInputProvider {namespace}/{name}: {source}")]
    Get {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// API error.
        #[source]
        source: kube::Error,
    },
    /// Adding or removing the finalizer failed.
    #[error("failed to update the finalizer of {namespace}/{name}: {source}")]
    Finalizer {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// API error.
        #[source]
        source: kube::Error,
    },
    /// Patching the status failed.
    #[error("failed to update status of {namespace}/{name}: {source}")]
    Status {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// API error.
        #[source]
        source: kube::Error,
    },
    /// The exported inputs could not be printed for their revision.
    #[error("failed to marshal exported inputs: {0}")]
    Marshal(#[from] super::yaml::YamlError),
}

/// What the reconcile carries from step to step.
struct Run {
    api: Api<ResourceSetInputProvider>,
    obj: ResourceSetInputProvider,
    status: ResourceSetInputProviderStatus,
    conditions: Vec<Condition>,
    generation: Option<i64>,
    now: Timestamp,
}

/// Reconciles one provider; the kube-runtime entry point.
pub async fn reconcile(
    obj: Arc<ResourceSetInputProvider>,
    ctx: Arc<Context>,
) -> Result<Action, ProviderError> {
    let started = Instant::now();
    let namespace = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let api: Api<ResourceSetInputProvider> = Api::namespaced(ctx.client.clone(), &namespace);
    // The cached object may predate an annotation change that triggered this reconcile (the
    // annotation watch and the object watch are two streams): read the latest.
    let obj = match api.get_opt(&name).await {
        Ok(Some(o)) => o,
        Ok(None) => return Ok(Action::await_change()),
        Err(source) => {
            return Err(ProviderError::Get {
                namespace,
                name,
                source,
            });
        }
    };
    let fin_err = |source| ProviderError::Finalizer {
        namespace: namespace.clone(),
        name: name.clone(),
        source,
    };
    if obj.meta().deletion_timestamp.is_some() {
        // Deletion only releases the object: there is nothing to clean up.
        remove_finalizer(&api, &obj, FINALIZER)
            .await
            .map_err(fin_err)?;
        return Ok(Action::await_change());
    }
    let mut status = obj.status.clone().unwrap_or_default();
    let conditions = status.conditions.take().unwrap_or_default();
    let mut run = Run {
        api,
        generation: obj.meta().generation,
        obj,
        status,
        conditions,
        now: Timestamp::now(),
    };
    if !has_finalizer(run.obj.finalizers(), FINALIZER) {
        tracing::info!(finalizer = FINALIZER, "Adding finalizer");
        if let Some(patched) = add_finalizer(&run.api, &run.obj, FINALIZER)
            .await
            .map_err(fin_err)?
        {
            run.obj.metadata.finalizers = patched.metadata.finalizers;
            run.obj.metadata.resource_version = patched.metadata.resource_version;
        }
        initialize(
            &mut run.conditions,
            run.obj.is_disabled(),
            run.generation,
            run.now,
        );
    }
    if run.obj.is_disabled() {
        tracing::error!("Reconciliation is disabled");
        event(
            &ctx,
            &run.obj,
            EventType::Warning,
            RECONCILIATION_DISABLED_REASON,
            "Reconciliation is disabled",
        )
        .await;
        run.patch_status().await?;
        return Ok(Action::await_change());
    }
    run.reconcile(&ctx, started).await
}

impl Run {
    async fn reconcile(mut self, ctx: &Context, started: Instant) -> Result<Action, ProviderError> {
        let annotations = self.obj.metadata.annotations.clone();
        let force = take_force_request(&mut self.status, annotations.as_ref());
        let timeout = duration_or(
            self.obj.reconcile_timeout(),
            keys::INPUT_PROVIDER_DEFAULT_TIMEOUT,
        );
        let interval = duration_or(
            self.obj.reconcile_every(),
            keys::INPUT_PROVIDER_DEFAULT_INTERVAL,
        );

        let scheduler = match Scheduler::new(self.obj.spec.schedules(), timeout, self.now) {
            Ok(s) => s,
            Err(e) => {
                return self
                    .stall(ctx, INVALID_SCHEDULE_REASON, &e.to_string())
                    .await;
            }
        };
        self.status.next_schedule = None;
        if let Some(s) = &scheduler
            && !force
            && !s.should_reconcile(self.now)
            && let Some(next) = s.next(self.now)
        {
            let when = next.when.0;
            let msg = format!(
                "Reconciliation skipped, next scheduled at {}",
                when.strftime("%Y-%m-%dT%H:%M:%SZ")
            );
            // Only at creation: the object never reconciled reports Ready with the reason.
            if cond::get(&self.conditions, RECONCILING).is_some()
                && cond::is_unknown(&self.conditions, READY)
            {
                cond::delete(&mut self.conditions, RECONCILING);
                cond::mark_true(
                    &mut self.conditions,
                    READY,
                    SKIPPED_DUE_TO_SCHEDULE_REASON,
                    &msg,
                    self.generation,
                    self.now,
                );
            }
            tracing::info!("{msg}");
            self.status.next_schedule = Some(next);
            event(
                ctx,
                &self.obj,
                EventType::Normal,
                SKIPPED_DUE_TO_SCHEDULE_REASON,
                &msg,
            )
            .await;
            let wait = until(Timestamp::now(), when);
            self.patch_status().await?;
            return Ok(Action::requeue(wait));
        }

        if let Err(e) = spec::check(&self.obj.spec) {
            return self.stall(ctx, INVALID_SPEC_REASON, &e.to_string()).await;
        }
        cond::delete(&mut self.conditions, cond::STALLED);
        cond::mark_true(
            &mut self.conditions,
            RECONCILING,
            PROGRESSING_REASON,
            RECONCILIATION_IN_PROGRESS_MSG,
            self.generation,
            self.now,
        );

        let kind = self.obj.spec.provider_type;
        if kind != InputProviderType::Static {
            let msg = spec::unsupported_message(kind);
            cond::mark_stalled(
                &mut self.conditions,
                RECONCILIATION_FAILED_REASON,
                &msg,
                self.generation,
                self.now,
            );
            tracing::error!(r#type = %kind, "{msg}");
            event(
                ctx,
                &self.obj,
                EventType::Warning,
                RECONCILIATION_FAILED_REASON,
                &msg,
            )
            .await;
            self.patch_status().await?;
            return Ok(Action::await_change());
        }

        let uid = self.obj.metadata.uid.clone().unwrap_or_default();
        let inputs = vec![static_input_set(&self.obj.spec.default_values(), &uid)];
        let revision = match exported_revision(&inputs) {
            Ok(r) => r,
            Err(e) => {
                let msg = format!("failed to marshal exported inputs {e}");
                cond::mark_false(
                    &mut self.conditions,
                    READY,
                    RECONCILIATION_FAILED_REASON,
                    &msg,
                    self.generation,
                    self.now,
                );
                event(
                    ctx,
                    &self.obj,
                    EventType::Warning,
                    RECONCILIATION_FAILED_REASON,
                    &msg,
                )
                .await;
                self.patch_status().await?;
                return Err(e.into());
            }
        };
        let changed = self.status.last_exported_revision.as_deref() != Some(revision.as_str());
        self.status.exported_inputs = Some(inputs);
        self.status.last_exported_revision = Some(revision.clone());

        let msg = finished_message(started.elapsed());
        cond::mark_ready(
            &mut self.conditions,
            RECONCILIATION_SUCCEEDED_REASON,
            &msg,
            self.generation,
            self.now,
        );
        tracing::info!(revision = %revision, "{msg}");
        let with_revision = format!("{msg}, revision {revision}");
        let token = token(Timestamp::now());
        let extra = [
            (REVISION_ANNOTATION, revision.as_str()),
            (TOKEN_ANNOTATION, token.as_str()),
        ];
        if changed {
            if let Err(e) = ctx
                .recorder
                .record(
                    &self.obj,
                    EventType::Normal,
                    RECONCILIATION_SUCCEEDED_REASON,
                    &with_revision,
                    &extra,
                )
                .await
            {
                tracing::warn!(error = %e, "unable to record event");
            }
        } else {
            // The same revision: a Kubernetes event only, not forwarded to notifications.
            let annotations = event_annotations(self.obj.annotations(), &extra);
            if let Err(e) = ctx
                .recorder
                .record_ref(
                    &self.obj.object_ref(&()),
                    EventType::Normal,
                    RECONCILIATION_SUCCEEDED_REASON,
                    &with_revision,
                    annotations,
                )
                .await
            {
                tracing::warn!(error = %e, "unable to record event");
            }
        }

        let (wait, next) = requeue_after(interval, scheduler.as_ref(), Timestamp::now());
        if next.is_some() {
            self.status.next_schedule = next;
        }
        self.patch_status().await?;
        Ok(wait.map_or_else(Action::await_change, Action::requeue))
    }

    /// A terminal configuration error: Ready=False and Stalled=True with `reason`, a Warning
    /// event, no requeue until the object changes.
    async fn stall(
        mut self,
        ctx: &Context,
        reason: &str,
        err: &str,
    ) -> Result<Action, ProviderError> {
        let msg = format!("{TERMINAL_ERROR_MSG}: {err}");
        cond::mark_stalled(
            &mut self.conditions,
            reason,
            &msg,
            self.generation,
            self.now,
        );
        tracing::error!(reason, "{msg}");
        event(ctx, &self.obj, EventType::Warning, reason, &msg).await;
        self.patch_status().await?;
        Ok(Action::await_change())
    }

    /// Finalizes and writes the status (a merge patch of the status subresource; an absent
    /// `nextSchedule` is removed).
    async fn patch_status(mut self) -> Result<(), ProviderError> {
        let annotations = self.obj.metadata.annotations.clone();
        finalize(&mut self.status, &mut self.conditions, annotations.as_ref());
        cond::sort(&mut self.conditions);
        self.status.conditions = Some(self.conditions);
        let patch = status_patch(&self.status);
        let params = PatchParams {
            field_manager: Some(keys::FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        match self
            .api
            .patch_status(&self.obj.name_any(), &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(source) => Err(ProviderError::Status {
                namespace: self.obj.namespace().unwrap_or_default(),
                name: self.obj.name_any(),
                source,
            }),
        }
    }
}

/// The merge patch of the whole status; `nextSchedule` is sent as `null` when unset so a
/// previous one is removed.
pub fn status_patch(status: &ResourceSetInputProviderStatus) -> Value {
    let mut body = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    if let Some(map) = body.as_object_mut() {
        map.entry("nextSchedule").or_insert(Value::Null);
    }
    json!({ "status": body })
}

/// A Go duration from an annotation, or `default` when it does not parse (as Flux Operator).
fn duration_or(value: &str, default: &str) -> Duration {
    parse_go_duration(value)
        .or_else(|_| parse_go_duration(default))
        .unwrap_or(Duration::ZERO)
}

/// The notification token: `sha256:` of the current Unix time in nanoseconds.
fn token(now: Timestamp) -> String {
    let nanos = now.as_nanosecond().to_string();
    format!("sha256:{}", hex::encode(Sha256::digest(nanos.as_bytes())))
}

async fn event(
    ctx: &Context,
    obj: &ResourceSetInputProvider,
    kind: EventType,
    reason: &str,
    message: &str,
) {
    if let Err(e) = ctx.recorder.record(obj, kind, reason, message, &[]).await {
        tracing::warn!(error = %e, "unable to record event");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn status_patch_clears_next_schedule_and_keeps_the_rest() {
        let status = ResourceSetInputProviderStatus {
            last_exported_revision: Some("sha256:ab".into()),
            ..Default::default()
        };
        let p = status_patch(&status);
        assert_eq!(p["status"]["nextSchedule"], Value::Null);
        assert!(
            p["status"]
                .as_object()
                .unwrap()
                .contains_key("nextSchedule")
        );
        assert_eq!(p["status"]["lastExportedRevision"], "sha256:ab");
    }

    #[test]
    fn durations_fall_back_to_the_default() {
        assert_eq!(duration_or("30s", "10m"), Duration::from_secs(30));
        assert_eq!(duration_or("soon", "10m"), Duration::from_secs(600));
        assert_eq!(duration_or("", "2m"), Duration::from_secs(120));
    }

    #[test]
    fn tokens_are_sha256_of_the_time() {
        let t = token(Timestamp::from_second(1).unwrap());
        assert_eq!(
            t,
            format!("sha256:{}", hex::encode(Sha256::digest(b"1000000000")))
        );
    }
}
