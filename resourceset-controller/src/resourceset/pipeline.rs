//! The stages of a ResourceSet reconcile, in Flux Operator's order.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use rflux_common::api::kustomization::ResourceInventory;
use rflux_common::api::resourceset::{
    BUILD_FAILED_REASON, INVALID_CEL_EXPRESSION_REASON, PROGRESSING_REASON,
    RECONCILIATION_IN_PROGRESS_MSG, ResourceSet, ResourceSetDependency, ResourceSetStatus,
};
use rflux_common::api::resourcesetinputprovider::ResourceSetInputProvider;
use rflux_common::runtime::conditions as cond;
use rflux_common::runtime::{EventType, parse_go_duration};
use rflux_ssa::cel::Expression;
use rflux_ssa::{
    Action, ApplyOptions, ChangeSet, ObjectRef, Resolver, apply_all_with, delete_all,
    wait::wait_for_applied, wait::wait_for_termination,
};
use serde_json::{Map, Value};

use super::context::{Context, event, owner_of, patch_status};
use super::outcome::{Outcome, StageFailure};
use super::prepare;
use crate::build::{self, StepObjects};
use crate::inputs::{self, Provider};

pub(super) const DEPENDENCY_NOT_READY: &str = "DependencyNotReady";

pub(super) struct Pipeline<'a> {
    ctx: &'a Context,
    rs: &'a ResourceSet,
    api: &'a Api<ResourceSet>,
    pub(super) status: ResourceSetStatus,
    timeout: Duration,
    /// The history metadata, once built (Flux Operator records it on apply failures too).
    pub(super) counts: Option<BTreeMap<String, String>>,
}

/// `sha256:` of the spec, the history digest of a build failure.
fn spec_digest(rs: &ResourceSet) -> String {
    use sha2::{Digest, Sha256};
    let text = serde_json::to_vec(&rs.spec).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(&text)))
}

impl<'a> Pipeline<'a> {
    pub(super) fn new(
        ctx: &'a Context,
        rs: &'a ResourceSet,
        api: &'a Api<ResourceSet>,
        status: ResourceSetStatus,
        timeout: Duration,
    ) -> Self {
        Pipeline {
            ctx,
            rs,
            api,
            status,
            timeout,
            counts: None,
        }
    }

    fn stalled(&self, reason: &str, message: String) -> StageFailure {
        StageFailure::Stalled {
            reason: reason.to_string(),
            message,
            digest: Some(spec_digest(self.rs)),
        }
    }

    /// dependsOn → progress → inputs → build → prepare → apply → GC → wait.
    pub(super) async fn run(&mut self) -> Result<Outcome, StageFailure> {
        let exprs = self.ready_exprs()?;
        self.dependencies(&exprs).await?;
        self.progress(RECONCILIATION_IN_PROGRESS_MSG).await?;
        let (sets, has_providers) = self.inputs().await?;
        let steps = self.build(&sets, has_providers).await?;
        let mut steps = self.prepare(steps);
        let resolver = self
            .ctx
            .resolver_for(self.rs)
            .map_err(|e| StageFailure::Failed {
                message: e.to_string(),
                digest: None,
            })?;
        self.read_cluster(resolver.client(), &mut steps).await?;
        let revision = prepare::revision(steps.iter().flat_map(|s| &s.objects));
        let resources: usize = steps.iter().map(|s| s.objects.len()).sum();
        let steps_count = self.rs.spec.has_steps().then_some(steps.len());
        let counts =
            super::status::counts(sets.as_ref().map_or(0, Vec::len), resources, steps_count);
        self.counts = Some(counts.clone());
        // Apply and GC failures are recorded in the history under the objects' digest.
        let with_digest = |e| super::status::with_digest(e, &revision);
        let applied = self.apply(&resolver, &steps).await.map_err(with_digest)?;
        self.collect_garbage(&resolver, &applied)
            .await
            .map_err(with_digest)?;
        if self.rs.spec.wait() {
            let last = applied
                .last()
                .map(|c| c.objects().cloned().collect::<Vec<_>>());
            let targets = last.unwrap_or_default();
            wait_for_applied(&resolver, &targets, self.timeout, None)
                .await
                .map_err(|e| StageFailure::Failed {
                    message: e.to_string(),
                    digest: Some(revision.clone()),
                })?;
        }
        Ok(Outcome { revision, counts })
    }

    /// Parses the `readyExpr` of every dependency (a bad one stalls the ResourceSet).
    fn ready_exprs(&self) -> Result<Vec<Option<Expression>>, StageFailure> {
        self.rs
            .spec
            .depends_on()
            .iter()
            .map(|d| match d.ready_expr.as_deref().filter(|e| !e.is_empty()) {
                None => Ok(None),
                Some(e) => Expression::parse(e).map(Some).map_err(|err| {
                    self.stalled(
                        INVALID_CEL_EXPRESSION_REASON,
                        format!(
                            "Reconciliation failed terminally due to configuration error: failed to parse expression for dependency {}: {err}",
                            d.display_ref()
                        ),
                    )
                }),
            })
            .collect()
    }

    /// Stage: dependsOn, read with the controller's own identity.
    async fn dependencies(&self, exprs: &[Option<Expression>]) -> Result<(), StageFailure> {
        let resolver = self.ctx.own_resolver().map_err(|e| StageFailure::Failed {
            message: e.to_string(),
            digest: None,
        })?;
        for (d, expr) in self.rs.spec.depends_on().iter().zip(exprs) {
            if let Err(message) = dependency_ready(&resolver, d, expr.as_ref()).await {
                let message = format!("Retrying dependency check: {message}");
                let was = self
                    .status
                    .conditions
                    .as_deref()
                    .and_then(|c| cond::get_reason(c, cond::READY))
                    .map(str::to_string);
                return Err(StageFailure::Dependency {
                    message,
                    changed: was.as_deref() != Some(DEPENDENCY_NOT_READY),
                });
            }
        }
        Ok(())
    }

    /// Ready=Unknown and Reconciling with `message`, written at once.
    async fn progress(&mut self, message: &str) -> Result<(), StageFailure> {
        let conditions = self.status.conditions.get_or_insert_with(Vec::new);
        let now = jiff::Timestamp::now();
        let generation = self.rs.meta().generation;
        cond::mark_unknown(
            conditions,
            cond::READY,
            PROGRESSING_REASON,
            message,
            generation,
            now,
        );
        cond::mark_reconciling(conditions, PROGRESSING_REASON, message, generation, now);
        patch_status(self.api, self.rs, &self.status)
            .await
            .map_err(StageFailure::Kube)
    }

    /// Stage: the input sets. `None`: render without inputs (no providers and no inline inputs).
    async fn inputs(&self) -> Result<(Option<Vec<Map<String, Value>>>, bool), StageFailure> {
        let failed = |m: String| {
            self.stalled(
                BUILD_FAILED_REASON,
                format!("failed to compute inputs: {m}"),
            )
        };
        let ns = self.rs.namespace().unwrap_or_default();
        let spec = &self.rs.spec;
        let mut providers = vec![Provider {
            kind: "ResourceSet".into(),
            name: self.rs.name_any(),
            namespace: ns.clone(),
            sets: spec.inputs().to_vec(),
        }];
        let api: Api<ResourceSetInputProvider> = Api::namespaced(self.ctx.client.clone(), &ns);
        for from in spec.inputs_from() {
            match (&from.name, &from.selector) {
                (Some(name), None) => {
                    let p = api.get(name).await.map_err(|e| failed(e.to_string()))?;
                    providers.push(provider_of(&p));
                }
                (None, Some(selector)) => {
                    let sel = label_selector(selector).map_err(failed)?;
                    let list = api
                        .list(&ListParams::default().labels(&sel))
                        .await
                        .map_err(|e| failed(e.to_string()))?;
                    providers.extend(list.items.iter().map(provider_of));
                }
                _ => {
                    return Err(failed(
                        "an inputsFrom entry needs exactly one of name and selector".into(),
                    ));
                }
            }
        }
        let has_providers = !spec.inputs_from().is_empty();
        let sets = inputs::combine(
            providers,
            spec.input_strategy(),
            spec.include_empty_providers(),
        )
        .map_err(|e| failed(e.to_string()))?;
        if sets.is_empty() && !has_providers {
            return Ok((None, false));
        }
        Ok((Some(sets), has_providers))
    }

    /// Stage: render the templates, off the async workers, within the reconcile timeout.
    async fn build(
        &self,
        sets: &Option<Vec<Map<String, Value>>>,
        has_providers: bool,
    ) -> Result<Vec<StepObjects>, StageFailure> {
        let spec = self.rs.spec.clone();
        build::validate(&spec)
            .map_err(|e| self.stalled(BUILD_FAILED_REASON, format!("build failed: {e}")))?;
        // Providers that export nothing: nothing is built, everything is garbage-collected.
        if has_providers && sets.as_ref().is_some_and(Vec::is_empty) {
            let steps = spec.steps();
            if steps.is_empty() {
                return Ok(vec![StepObjects {
                    name: String::new(),
                    timeout: None,
                    objects: Vec::new(),
                }]);
            }
            return Ok(steps
                .iter()
                .map(|s| StepObjects {
                    name: s.name.clone(),
                    timeout: s.timeout.clone(),
                    objects: Vec::new(),
                })
                .collect());
        }
        let sets = sets.clone();
        let task = tokio::task::spawn_blocking(move || {
            build::build(&spec, sets.as_deref(), &rflux_gotmpl::Options::default())
        });
        match tokio::time::timeout(self.timeout, task).await {
            Ok(Ok(Ok(steps))) => Ok(steps),
            Ok(Ok(Err(e))) => Err(self.stalled(BUILD_FAILED_REASON, format!("build failed: {e}"))),
            Ok(Err(e)) => Err(self.stalled(BUILD_FAILED_REASON, format!("build failed: {e}"))),
            Err(_) => Err(self.stalled(
                BUILD_FAILED_REASON,
                format!(
                    "build failed: the templates did not render within {:?}",
                    self.timeout
                ),
            )),
        }
    }

    /// Stage: owner labels, `commonMetadata`, cleanup (pure).
    fn prepare(&self, mut steps: Vec<StepObjects>) -> Vec<StepObjects> {
        let name = self.rs.name_any();
        let ns = self.rs.namespace().unwrap_or_default();
        let labels = self.rs.spec.common_labels();
        let annotations = self.rs.spec.common_annotations();
        for s in &mut steps {
            for o in &mut s.objects {
                prepare::prepare(o, (&name, &ns), &labels, &annotations);
            }
        }
        steps
    }

    /// Stage: `copyFrom`, `convertKubeConfigFrom` and `checksumFrom`, read with the applying
    /// client; the external checksum references go to the status.
    async fn read_cluster(
        &mut self,
        client: &Client,
        steps: &mut [StepObjects],
    ) -> Result<(), StageFailure> {
        let mut all: Vec<&mut Value> = steps
            .iter_mut()
            .flat_map(|s| s.objects.iter_mut())
            .collect();
        let reads = super::sources::prepare_from_cluster(client, &mut all)
            .await
            .map_err(|e| StageFailure::Failed {
                message: e.to_string(),
                digest: None,
            })?;
        self.ctx.remember_reads(self.rs, reads.all);
        let refs = reads.external_checksum;
        self.status.external_checksum_refs = (!refs.is_empty()).then_some(refs);
        Ok(())
    }

    /// Stage: apply step by step; each step but the last is waited for before the next.
    async fn apply(
        &mut self,
        resolver: &Resolver,
        steps: &[StepObjects],
    ) -> Result<Vec<ChangeSet>, StageFailure> {
        let mut opts = ApplyOptions::new(owner_of(self.rs));
        opts.force = self.rs.is_force_enabled();
        opts.wait_timeout = self.timeout;
        opts.override_managers = vec!["kustomize-controller".into()];
        let mut done: Vec<ChangeSet> = Vec::with_capacity(steps.len());
        let n = steps.len();
        for (i, step) in steps.iter().enumerate() {
            let named = !step.name.is_empty();
            super::recreate::recreate_failed_jobs(resolver, &step.objects, &opts.owner)
                .await
                .map_err(|message| StageFailure::Failed {
                    message,
                    digest: None,
                })?;
            let changes = apply_all_with(resolver, step.objects.clone(), &opts)
                .await
                .map_err(|e| {
                    let message = if named {
                        format!("step {:?} apply failed: {e}", step.name)
                    } else {
                        e.to_string()
                    };
                    StageFailure::Failed {
                        message,
                        digest: None,
                    }
                })?;
            // The inventory keeps what is applied so far (old ∪ applied).
            let mut inv = inventory_ids(self.status.inventory.as_ref());
            for o in changes.objects() {
                if !inv.iter().any(|(id, _)| id == &o.id()) {
                    inv.push((o.id(), o.version.clone()));
                }
            }
            if i + 1 < n {
                let message = format!("Applying step {}/{n} {:?}", i + 1, step.name);
                self.progress(&message).await?;
                let lines = changes.event_message();
                if !lines.is_empty() {
                    event(
                        self.ctx,
                        self.rs,
                        EventType::Normal,
                        "ApplySucceeded",
                        &format!("step {:?}: {lines}", step.name),
                    )
                    .await;
                }
                let timeout = step
                    .timeout
                    .as_deref()
                    .and_then(|t| parse_go_duration(t).ok())
                    .unwrap_or(self.timeout);
                let targets: Vec<ObjectRef> = changes.objects().cloned().collect();
                wait_for_applied(resolver, &targets, timeout, None)
                    .await
                    .map_err(|e| StageFailure::Failed {
                        message: format!("step {:?} health check failed: {e}", step.name),
                        digest: None,
                    })?;
            }
            done.push(changes);
        }
        Ok(done)
    }

    /// Stage: delete what left the templates (Flux's appliers first, then the rest), then
    /// record the new inventory and send the event.
    async fn collect_garbage(
        &mut self,
        resolver: &Resolver,
        applied: &[ChangeSet],
    ) -> Result<(), StageFailure> {
        let owner = owner_of(self.rs);
        let new: Vec<ObjectRef> = applied.iter().flat_map(|c| c.objects().cloned()).collect();
        let keep: HashSet<String> = new.iter().map(ObjectRef::id).collect();
        let old = inventory_refs(self.status.inventory.as_ref());
        let stale: Vec<ObjectRef> = old
            .into_iter()
            .filter(|o| !keep.contains(&o.id()))
            .collect();
        let appliers = |o: &ObjectRef| {
            o.group == "kustomize.toolkit.fluxcd.io" || o.group == "helm.toolkit.fluxcd.io"
        };
        let (first, rest): (Vec<ObjectRef>, Vec<ObjectRef>) = stale.into_iter().partition(appliers);
        let mut gc = ChangeSet::default();
        if !first.is_empty() {
            let c =
                delete_all(resolver, &first, &owner)
                    .await
                    .map_err(|e| StageFailure::Failed {
                        message: e.to_string(),
                        digest: None,
                    })?;
            let deleted: Vec<ObjectRef> = c
                .entries
                .iter()
                .filter(|e| e.action == Action::Deleted)
                .map(|e| e.object.clone())
                .collect();
            if let Err(e) = wait_for_termination(resolver, &deleted, Duration::from_secs(60)).await
            {
                tracing::info!(error = %e, "Flux objects still terminating");
            }
            gc.extend(c);
        }
        if !rest.is_empty() {
            gc.extend(delete_all(resolver, &rest, &owner).await.map_err(|e| {
                StageFailure::Failed {
                    message: e.to_string(),
                    digest: None,
                }
            })?);
        }
        self.status.inventory = Some(rflux_ssa::inventory_of(new.iter()));
        let mut lines: Vec<String> = applied
            .last()
            .map(|c| c.event_message())
            .filter(|m| !m.is_empty())
            .into_iter()
            .collect();
        let gc_lines: Vec<String> = gc.entries.iter().map(ToString::to_string).collect();
        lines.extend(gc_lines);
        if !lines.is_empty() {
            event(
                self.ctx,
                self.rs,
                EventType::Normal,
                "ApplySucceeded",
                &lines.join("\n"),
            )
            .await;
        }
        Ok(())
    }
}

/// The ResourceSet's deletion: the inventory is deleted (Flux's appliers first) unless the
/// ResourceSet is disabled or its service account is gone; errors are only logged.
pub(super) async fn finalize(ctx: &Context, rs: &ResourceSet) {
    let refs = inventory_refs(rs.status.as_ref().and_then(|s| s.inventory.as_ref()));
    if rs.is_disabled() || refs.is_empty() {
        return;
    }
    let ns = rs.namespace().unwrap_or_default();
    let sa = ctx.service_account(rs);
    if !sa.is_empty() {
        let sas: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &ns);
        if !matches!(sas.get_opt(&sa).await, Ok(Some(_))) {
            tracing::info!(sa, "service account not found, skipping the uninstall");
            return;
        }
    }
    let resolver = match ctx.resolver_for(rs) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "uninstall skipped");
            return;
        }
    };
    let owner = owner_of(rs);
    let (first, rest): (Vec<ObjectRef>, Vec<ObjectRef>) = refs.into_iter().partition(|o| {
        o.group == "kustomize.toolkit.fluxcd.io" || o.group == "helm.toolkit.fluxcd.io"
    });
    for part in [first, rest] {
        if part.is_empty() {
            continue;
        }
        if let Err(e) = delete_all(&resolver, &part, &owner).await {
            tracing::warn!(error = %e, "uninstall: garbage collection failed");
        }
    }
}

/// Whether dependency `d` exists and, with `ready`, is ready: `readyExpr`, else the Ready rule
/// of Flux Operator's kinds, else kstatus Current.
async fn dependency_ready(
    resolver: &Resolver,
    d: &ResourceSetDependency,
    expr: Option<&Expression>,
) -> Result<(), String> {
    let ns = d.namespace.clone().unwrap_or_default();
    let id = ObjectRef::of(&d.api_version, &d.kind, &ns, &d.name);
    let pretty = format!("{}/{}", d.api_version, id.subject());
    let live = match resolver.get_live(&id).await {
        Ok(Some(o)) => o,
        Ok(None) => return Err(format!("dependency {pretty} not found")),
        Err(e) => return Err(format!("dependency {pretty} not found: {e}")),
    };
    if !d.ready.unwrap_or(false) {
        return Ok(());
    }
    let mut obj = serde_json::to_value(&live).map_err(|e| e.to_string())?;
    if let Some(a) = obj
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    let ready = match expr {
        Some(e) => e.eval_bool_on_object(&obj).unwrap_or(false),
        None if d.api_version == "fluxcd.controlplane.io/v1"
            && matches!(
                d.kind.as_str(),
                "ResourceSet" | "ResourceSetInputProvider" | "FluxInstance"
            ) =>
        {
            flux_operator_ready(&obj)
        }
        None => rflux_ssa::kstatus::compute(&obj).status == rflux_ssa::Status::Current,
    };
    if ready {
        Ok(())
    } else {
        Err(format!("dependency {pretty} is not ready"))
    }
}

/// Every Ready condition is True for the current generation (an object without one passes).
fn flux_operator_ready(obj: &Value) -> bool {
    let generation = obj.pointer("/metadata/generation").and_then(Value::as_i64);
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        .all(|c| {
            c.get("status").and_then(Value::as_str) == Some("True")
                && c.get("observedGeneration").and_then(Value::as_i64) == generation
        })
}

fn provider_of(p: &ResourceSetInputProvider) -> Provider {
    Provider {
        kind: "ResourceSetInputProvider".into(),
        name: p.name_any(),
        namespace: p.namespace().unwrap_or_default(),
        sets: p
            .status
            .as_ref()
            .and_then(|s| s.exported_inputs.clone())
            .unwrap_or_default(),
    }
}

/// A Kubernetes label selector as a list-request string.
fn label_selector(
    s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Result<String, String> {
    let mut parts: Vec<String> = s
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            op => return Err(format!("{op:?} is not a valid label selector operator")),
        });
    }
    Ok(parts.join(","))
}

fn inventory_refs(inv: Option<&ResourceInventory>) -> Vec<ObjectRef> {
    inv.map(|i| {
        i.entries
            .iter()
            .filter_map(|e| ObjectRef::from_entry(e).ok())
            .collect()
    })
    .unwrap_or_default()
}

fn inventory_ids(inv: Option<&ResourceInventory>) -> Vec<(String, String)> {
    inv.map(|i| {
        i.entries
            .iter()
            .map(|e| (e.id.clone(), e.v.clone()))
            .collect()
    })
    .unwrap_or_default()
}
