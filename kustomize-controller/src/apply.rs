//! Flux-compatible server-side apply (`ssa.ApplyAllStaged`): staged apply with dry-run drift
//! detection, field-manager takeover and the `ssa`/`reconcile`/`force` annotations.
//!
//! Pure helpers (object preparation, annotation matching, drift comparison, managed-field
//! cleanup) are separate from the I/O in [`apply_all`].

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use serde_json::{Map, Value, json};

use crate::health;
use crate::inventory::{self, InventoryError, ObjectRef, Stage, apply_order};
use crate::tracker::{self, Tracker};

/// The SSA field manager of the controller.
pub const FIELD_MANAGER: &str = "kustomize-controller";
/// Owner label holding the Kustomization name.
pub const NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";
/// Owner label holding the Kustomization namespace.
pub const NAMESPACE_LABEL: &str = "kustomize.toolkit.fluxcd.io/namespace";
/// `Override` (default), `Merge`, `IfNotPresent` or `Ignore`.
pub const SSA_KEY: &str = "kustomize.toolkit.fluxcd.io/ssa";
/// `disabled`: neither applied nor pruned.
pub const RECONCILE_KEY: &str = "kustomize.toolkit.fluxcd.io/reconcile";
/// `enabled`: recreate the object on immutable-field errors.
pub const FORCE_KEY: &str = "kustomize.toolkit.fluxcd.io/force";
/// `disabled`: never garbage-collected.
pub const PRUNE_KEY: &str = "kustomize.toolkit.fluxcd.io/prune";

const CLEANUP_ANNOTATIONS: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    "kustomize.toolkit.fluxcd.io/checksum",
    "fluxcd.io/sync-checksum",
];
const CLEANUP_LABELS: &[&str] = &["fluxcd.io/sync-gc-mark"];

/// What happened to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The object did not exist and was created.
    Created,
    /// The object drifted and was patched.
    Configured,
    /// The object matched; nothing was written.
    Unchanged,
    /// The object was deleted.
    Deleted,
    /// The object was skipped (annotations or labels).
    Skipped,
    /// Unknown.
    Unknown,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
            Action::Deleted => "deleted",
            Action::Skipped => "skipped",
            Action::Unknown => "unknown",
        })
    }
}

/// One change-set line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeSetEntry {
    /// The object.
    pub object: ObjectRef,
    /// What happened.
    pub action: Action,
}

impl ChangeSetEntry {
    /// `Kind/ns/name`.
    pub fn subject(&self) -> String {
        self.object.subject()
    }
}

impl fmt::Display for ChangeSetEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.object.subject(), self.action)
    }
}

/// The result of an apply or prune, in processing order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeSet {
    /// Entries in order.
    pub entries: Vec<ChangeSetEntry>,
}

impl ChangeSet {
    /// Appends an entry.
    pub fn push(&mut self, object: ObjectRef, action: Action) {
        self.entries.push(ChangeSetEntry { object, action });
    }

    /// Appends all entries of `other`.
    pub fn extend(&mut self, other: ChangeSet) {
        self.entries.extend(other.entries);
    }

    /// The action recorded for a subject (`Kind/ns/name`).
    pub fn action_of(&self, subject: &str) -> Option<Action> {
        self.entries
            .iter()
            .find(|e| e.subject() == subject)
            .map(|e| e.action)
    }

    /// Whether anything was created, configured or deleted.
    pub fn has_changes(&self) -> bool {
        self.entries.iter().any(|e| {
            matches!(
                e.action,
                Action::Created | Action::Configured | Action::Deleted
            )
        })
    }

    /// Flux's event body: `<subject> <action>` lines for created, configured and deleted objects.
    pub fn event_message(&self) -> String {
        self.entries
            .iter()
            .filter(|e| {
                matches!(
                    e.action,
                    Action::Created | Action::Configured | Action::Deleted
                )
            })
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The objects in order (for the inventory and health checks).
    pub fn objects(&self) -> impl Iterator<Item = &ObjectRef> {
        self.entries.iter().map(|e| &e.object)
    }
}

/// The Kustomization owning the applied objects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    /// Kustomization name.
    pub name: String,
    /// Kustomization namespace.
    pub namespace: String,
}

/// Options for [`apply_all`].
#[derive(Clone, Debug)]
pub struct ApplyOptions {
    /// Owner labels to set on every object.
    pub owner: Owner,
    /// `spec.force`: recreate objects on immutable-field errors.
    pub force: bool,
    /// `--custom-apply-stage-kinds` as `(group, kind)` pairs.
    pub custom_stage_kinds: Vec<(String, String)>,
    /// `--override-manager` names taken over like kubectl's.
    pub override_managers: Vec<String>,
    /// Timeout for the waits after the definition stages and for recreations (Flux: 60s).
    pub wait_timeout: Duration,
    /// `spec.ignore` rules, compiled with [`compile_ignore_rules`].
    pub ignore: Vec<DriftIgnoreRule>,
    /// `--concurrent-ssa`: objects planned (GET, dry-run, drift check) concurrently.
    pub concurrency: usize,
    /// `spec.commonMetadata.labels`, merged over the object's labels (after the owner labels).
    pub common_labels: Map<String, Value>,
    /// `spec.commonMetadata.annotations`, merged over the object's annotations.
    pub common_annotations: Map<String, Value>,
    /// The applied-object tracker: objects it knows to be as last applied are not read,
    /// dry-run or applied again, and every object applied or verified is recorded in it.
    pub tracker: Option<Arc<Tracker>>,
    /// Mixed into the tracker's desired-state hashes: the settings besides the object that
    /// change how it is applied (force, ignore rules, impersonated user...).
    pub tracker_salt: u64,
}

impl ApplyOptions {
    /// Defaults for an owner.
    pub fn new(owner: Owner) -> Self {
        ApplyOptions {
            owner,
            force: false,
            custom_stage_kinds: Vec::new(),
            override_managers: Vec::new(),
            wait_timeout: Duration::from_secs(60),
            ignore: Vec::new(),
            concurrency: 4,
            common_labels: Map::new(),
            common_annotations: Map::new(),
            tracker: None,
            tracker_salt: 0,
        }
    }
}

/// Why an apply failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyErrorKind {
    /// An object is malformed.
    #[error(transparent)]
    Invalid(#[from] InventoryError),
    /// The kind is unknown to the API server.
    #[error("{subject} not found: {message}")]
    NotFound {
        /// `Kind/ns/name`.
        subject: String,
        /// Details.
        message: String,
    },
    /// A namespaced object lacks a namespace.
    #[error("{subject} namespace not specified: {message}")]
    NamespaceNotSpecified {
        /// `Kind/name`.
        subject: String,
        /// Details.
        message: String,
    },
    /// Reading the live object failed.
    #[error("{subject} query failed: {source}")]
    Get {
        /// `Kind/ns/name`.
        subject: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The dry-run apply was rejected.
    #[error("{subject} dry-run failed{}: {message}", paren(.reason))]
    DryRun {
        /// `Kind/ns/name`.
        subject: String,
        /// API reason (`Invalid`, `NotFound`, ...).
        reason: String,
        /// API message.
        message: String,
    },
    /// Deleting an object for recreation failed.
    #[error("{subject} immutable field detected, failed to delete object: {message}")]
    Recreate {
        /// `Kind/ns/name`.
        subject: String,
        /// Details.
        message: String,
    },
    /// The managed-fields / annotation cleanup patch failed.
    #[error("{subject} metadata.managedFields cleanup failed: {message}")]
    Cleanup {
        /// `Kind/ns/name`.
        subject: String,
        /// Details.
        message: String,
    },
    /// The real apply failed.
    #[error("{subject} apply failed: {message}")]
    Apply {
        /// `Kind/ns/name`.
        subject: String,
        /// Details.
        message: String,
    },
    /// Waiting for the definitions stage failed.
    #[error(transparent)]
    Wait(#[from] health::HealthError),
}

fn paren(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(" ({reason})")
    }
}

/// Flux's `DryRunErr` texts: NotFound (missing namespace or kind) is reported as
/// `not found` / `namespace not specified`, anything else as `dry-run failed (<Reason>)`.
fn dry_run_error(obj: &ObjectRef, e: &kube::Error) -> ApplyErrorKind {
    let (reason, message, code) = api_reason(e);
    if code == 404 {
        if obj.namespace.is_empty() {
            return ApplyErrorKind::NamespaceNotSpecified {
                subject: obj.subject(),
                message,
            };
        }
        return ApplyErrorKind::NotFound {
            subject: obj.subject(),
            message,
        };
    }
    ApplyErrorKind::DryRun {
        subject: obj.subject(),
        reason,
        message,
    }
}

/// An apply failure with the entries applied before it.
#[derive(Debug, thiserror::Error)]
#[error("{kind}")]
pub struct ApplyError {
    /// What went wrong.
    #[source]
    pub kind: ApplyErrorKind,
    /// Objects processed before the failure.
    pub partial: ChangeSet,
}

/// Maps group/version/kind to API resources through discovery, with a cache that is refreshed
/// on a miss (so CRDs created by an earlier stage resolve).
pub struct Resolver {
    client: Client,
    cache: Mutex<HashMap<GvkKey, (ApiResource, bool)>>,
}

/// Cache key: group, version, kind.
type GvkKey = (String, String, String);

/// A kind that discovery cannot resolve.
#[derive(Debug, thiserror::Error)]
#[error("no matches for kind \"{kind}\" in version \"{api_version}\": {source}")]
pub struct ResolveError {
    /// Kind.
    pub kind: String,
    /// `group/version`.
    pub api_version: String,
    /// The discovery error.
    #[source]
    pub source: kube::Error,
}

impl Resolver {
    /// A resolver with an empty cache.
    pub fn new(client: Client) -> Self {
        Resolver {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The API resource of `obj`'s kind and whether it is namespaced.
    pub async fn resolve(&self, obj: &ObjectRef) -> Result<(ApiResource, bool), ResolveError> {
        let key = (obj.group.clone(), obj.version.clone(), obj.kind.clone());
        if let Ok(cache) = self.cache.lock()
            && let Some(hit) = cache.get(&key)
        {
            return Ok(hit.clone());
        }
        let gvk = GroupVersionKind::gvk(&obj.group, &obj.version, &obj.kind);
        // A freshly established CRD may take a moment to show up in discovery.
        let mut attempt = 0;
        let (ar, caps) = loop {
            match kube::discovery::pinned_kind(&self.client, &gvk).await {
                Ok(found) => break found,
                Err(e) if attempt < 5 && is_discovery_miss(&e) => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(source) => {
                    return Err(ResolveError {
                        kind: obj.kind.clone(),
                        api_version: obj.api_version(),
                        source,
                    });
                }
            }
        };
        let namespaced = matches!(caps.scope, Scope::Namespaced);
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key, (ar.clone(), namespaced));
        }
        Ok((ar, namespaced))
    }

    /// A dynamic API handle for `obj` (namespaced objects need a namespace).
    pub async fn api(&self, obj: &ObjectRef) -> Result<Api<DynamicObject>, ApplyErrorKind> {
        let (ar, namespaced) = self
            .resolve(obj)
            .await
            .map_err(|e| ApplyErrorKind::NotFound {
                subject: obj.subject(),
                message: e.to_string(),
            })?;
        if namespaced {
            if obj.namespace.is_empty() {
                return Err(ApplyErrorKind::NamespaceNotSpecified {
                    subject: obj.subject(),
                    message: format!("{} is a namespaced kind", obj.kind),
                });
            }
            Ok(Api::namespaced_with(
                self.client.clone(),
                &obj.namespace,
                &ar,
            ))
        } else {
            Ok(Api::all_with(self.client.clone(), &ar))
        }
    }
}

fn is_discovery_miss(e: &kube::Error) -> bool {
    match e {
        kube::Error::Discovery(_) => true,
        kube::Error::Api(s) => s.code == 404,
        _ => false,
    }
}

/// Whether `key` is set to `value` (case-insensitive) as a label or an annotation.
pub fn has_meta_value(obj: &Value, key: &str, value: &str) -> bool {
    ["labels", "annotations"].iter().any(|field| {
        obj.pointer(&format!("/metadata/{field}"))
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .is_some_and(|v| !v.is_empty() && v.eq_ignore_ascii_case(value))
    })
}

/// Whether the object is excluded from apply and prune (`reconcile: disabled` or `ssa: Ignore`).
pub fn is_ignored(obj: &Value) -> bool {
    has_meta_value(obj, RECONCILE_KEY, "disabled") || has_meta_value(obj, SSA_KEY, "Ignore")
}

/// Normalizes a desired object for SSA: sets the owner labels, drops `status` (except for
/// CRDs), `metadata.creationTimestamp`, `resourceVersion`, `uid` and `managedFields`.
pub fn prepare(mut obj: Value, owner: &Owner) -> Value {
    let is_crd = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .is_some_and(|v| v.starts_with("apiextensions.k8s.io/"))
        && obj.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition");
    if let Some(map) = obj.as_object_mut() {
        if !is_crd {
            map.remove("status");
        }
        let meta = map
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            for k in [
                "creationTimestamp",
                "resourceVersion",
                "uid",
                "managedFields",
                "generation",
            ] {
                meta.remove(k);
            }
            if !owner.name.is_empty() {
                let labels = meta
                    .entry("labels")
                    .or_insert_with(|| Value::Object(Map::new()));
                if !labels.is_object() {
                    *labels = Value::Object(Map::new());
                }
                if let Some(labels) = labels.as_object_mut() {
                    labels.insert(NAME_LABEL.into(), Value::String(owner.name.clone()));
                    labels.insert(
                        NAMESPACE_LABEL.into(),
                        Value::String(owner.namespace.clone()),
                    );
                }
            }
        }
    }
    obj
}

/// Merges `commonMetadata` labels and annotations over the object's own (they win, even over
/// the owner labels, like Flux).
pub fn merge_common_metadata(
    obj: &mut Value,
    labels: &Map<String, Value>,
    annotations: &Map<String, Value>,
) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    for (field, extra) in [("labels", labels), ("annotations", annotations)] {
        if extra.is_empty() {
            continue;
        }
        let target = meta
            .entry(field)
            .or_insert_with(|| Value::Object(Map::new()));
        if !target.is_object() {
            *target = Value::Object(Map::new());
        }
        if let Some(m) = target.as_object_mut() {
            for (k, v) in extra {
                m.insert(k.clone(), v.clone());
            }
        }
    }
}

fn meta_map<'a>(obj: &'a Value, field: &str) -> Option<&'a Map<String, Value>> {
    obj.pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
}

fn without_meta_and_status(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(map) = v.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    v
}

/// Flux's drift check between the dry-run result and the live object.
pub fn has_drifted(live: Option<&Value>, dry_run: &Value) -> bool {
    let Some(live) = live else {
        return true;
    };
    if dry_run
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return true;
    }
    meta_map(live, "labels") != meta_map(dry_run, "labels")
        || meta_map(live, "annotations") != meta_map(dry_run, "annotations")
        || without_meta_and_status(live) != without_meta_and_status(dry_run)
}

/// Deep union of two `fieldsV1` sets.
fn merge_fields(into: &mut Value, from: &Value) {
    match (into.as_object_mut(), from.as_object()) {
        (Some(a), Some(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) => merge_fields(existing, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (None, Some(_)) => *into = from.clone(),
        _ => {}
    }
}

fn taken_over(manager: &str, operation: &str, overrides: &[String]) -> bool {
    (manager.starts_with("kubectl") && (operation == "Apply" || operation == "Update"))
        || (manager == "before-first-apply" && operation == "Update")
        || (manager == FIELD_MANAGER && operation == "Update")
        || overrides.iter().any(|m| m == manager)
}

/// Whether [`cleanup_patch`] has anything to do: a kubectl/legacy annotation or label, or a
/// managed-fields entry to take over. Cheap (nothing is copied): the tracker asks it on every
/// watch event.
pub fn needs_cleanup(live: &Value, overrides: &[String]) -> bool {
    let has = |field: &str, keys: &[&str]| {
        live.pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
            .is_some_and(|m| keys.iter().any(|k| m.contains_key(*k)))
    };
    fn str_of<'a>(e: &'a Value, k: &str) -> &'a str {
        e.get(k).and_then(Value::as_str).unwrap_or("")
    }
    has("annotations", CLEANUP_ANNOTATIONS)
        || has("labels", CLEANUP_LABELS)
        || live
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .is_some_and(|entries| {
                entries
                    .iter()
                    .any(|e| taken_over(str_of(e, "manager"), str_of(e, "operation"), overrides))
            })
}

/// The merge patch that removes kubectl/legacy annotations and merges the managed fields of
/// kubectl-like managers into the `kustomize-controller` Apply entry; `None` when nothing
/// needs cleaning.
pub fn cleanup_patch(live: &Value, overrides: &[String]) -> Option<Value> {
    if !needs_cleanup(live, overrides) {
        return None;
    }
    let mut meta = Map::new();
    let mut strip = |field: &str, keys: &[&str]| {
        if let Some(m) = live
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
        {
            let present: Map<String, Value> = keys
                .iter()
                .filter(|k| m.contains_key(**k))
                .map(|k| ((*k).to_string(), Value::Null))
                .collect();
            if !present.is_empty() {
                meta.insert(field.to_string(), Value::Object(present));
            }
        }
    };
    strip("annotations", CLEANUP_ANNOTATIONS);
    strip("labels", CLEANUP_LABELS);

    let entries = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let str_of = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let takeover = entries
        .iter()
        .any(|e| taken_over(&str_of(e, "manager"), &str_of(e, "operation"), overrides));
    if takeover {
        let mut kept = Vec::new();
        let mut merged: Option<Value> = None;
        for e in &entries {
            let manager = str_of(e, "manager");
            let operation = str_of(e, "operation");
            let ours = manager == FIELD_MANAGER && operation == "Apply";
            if !ours && !taken_over(&manager, &operation, overrides) {
                kept.push(e.clone());
                continue;
            }
            let fields = e.get("fieldsV1").cloned().unwrap_or_else(|| json!({}));
            match merged.as_mut() {
                None => {
                    let mut m = e.clone();
                    if let Some(o) = m.as_object_mut() {
                        o.insert("manager".into(), json!(FIELD_MANAGER));
                        o.insert("operation".into(), json!("Apply"));
                        o.insert("fieldsType".into(), json!("FieldsV1"));
                        o.remove("subresource");
                    }
                    merged = Some(m);
                }
                Some(m) => {
                    if let Some(target) = m.get_mut("fieldsV1") {
                        merge_fields(target, &fields);
                    } else if let Some(o) = m.as_object_mut() {
                        o.insert("fieldsV1".into(), fields);
                    }
                    // Prefer the apiVersion of our own Apply entry.
                    if ours && let (Some(o), Some(v)) = (m.as_object_mut(), e.get("apiVersion")) {
                        o.insert("apiVersion".into(), v.clone());
                    }
                }
            }
        }
        kept.extend(merged);
        meta.insert("managedFields".into(), Value::Array(kept));
    }
    if meta.is_empty() {
        None
    } else {
        Some(json!({ "metadata": meta }))
    }
}

fn api_reason(e: &kube::Error) -> (String, String, u16) {
    match e {
        kube::Error::Api(s) => (s.reason.clone(), s.message.clone(), s.code),
        other => (String::new(), other.to_string(), 0),
    }
}

/// Flux's `IsImmutableError`: Conflict or Invalid, or an admission message about immutability.
pub fn is_immutable_error(code: u16, message: &str) -> bool {
    code == 409
        || code == 422
        || message.contains("is immutable")
        || message.contains("immutable field")
        || message.contains("field is immutable")
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
) -> Result<Value, kube::Error> {
    let pp = PatchParams::apply(FIELD_MANAGER).force().dry_run();
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
    if is_ignored(desired) {
        return Ok(Plan::Done(Action::Skipped, None));
    }
    let tracked = opts.tracker.as_deref();
    if tracked.is_some_and(|t| t.unchanged(obj, tracker::desired_hash(desired, opts.tracker_salt)))
    {
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
    let skip = |live: Option<&Value>| {
        live.is_some_and(is_ignored)
            || (live.is_some() && has_meta_value(desired, SSA_KEY, "IfNotPresent"))
    };
    if skip(live.as_ref()) {
        return Ok(Plan::Done(Action::Skipped, None));
    }

    let mut dry = match dry_run(&api, obj, desired).await {
        Ok(v) => v,
        Err(e) => {
            let (_, message, code) = api_reason(&e);
            let force = opts.force
                || has_meta_value(desired, FORCE_KEY, "enabled")
                || live
                    .as_ref()
                    .is_some_and(|l| has_meta_value(l, FORCE_KEY, "enabled"));
            if live.is_some() && force && is_immutable_error(code, &message) {
                delete_and_wait(&api, obj, opts.wait_timeout).await?;
                live = None;
                dry_run(&api, obj, desired)
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
        dry = dry_run(&api, obj, desired)
            .await
            .map_err(|e| dry_run_error(obj, &e))?;
    }

    let merge = has_meta_value(desired, SSA_KEY, "Merge")
        || live
            .as_ref()
            .is_some_and(|l| has_meta_value(l, SSA_KEY, "Merge"));
    let mut patched = false;
    if let (Some(l), false) = (live.as_ref(), merge)
        && let Some(patch) = cleanup_patch(l, &opts.override_managers)
    {
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
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

/// The real server-side apply of a planned object; returns the action and the object as the
/// server returned it (or as read, when there was nothing to write).
async fn execute(obj: &ObjectRef, plan: Plan) -> Result<(Action, Option<Value>), ApplyErrorKind> {
    let (api, payload, created) = match plan {
        Plan::Done(action, live) => return Ok((action, live.map(|b| *b))),
        Plan::Apply {
            api,
            payload,
            created,
        } => (api, payload, created),
    };
    let pp = PatchParams::apply(FIELD_MANAGER).force();
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

/// Records an applied or verified object in the tracker (objects that must be read every time,
/// `ssa: IfNotPresent`, are not recorded).
async fn track(
    resolver: &Resolver,
    opts: &ApplyOptions,
    id: &ObjectRef,
    desired: &Value,
    action: Action,
    live: Option<&Value>,
) {
    let Some(t) = opts.tracker.as_ref() else {
        return;
    };
    let recordable = matches!(
        action,
        Action::Created | Action::Configured | Action::Unchanged
    ) && !has_meta_value(desired, SSA_KEY, "IfNotPresent");
    match live {
        Some(live) if recordable => {
            if let Ok((ar, _)) = resolver.resolve(id).await {
                let owner = (opts.owner.namespace.clone(), opts.owner.name.clone());
                let hash = tracker::desired_hash(desired, opts.tracker_salt);
                t.record(id, &ar, &owner, hash, live);
            }
        }
        // Unchanged according to the tracker: its record stands.
        None if action == Action::Unchanged => {}
        _ => t.forget(id),
    }
}

/// A `spec.ignore` selector or label-selector expression that does not compile.
#[derive(Debug, thiserror::Error)]
pub enum SelectorError {
    /// A field is not a valid regular expression.
    #[error("invalid {field} regex {value:?}: {source}")]
    Regex {
        /// The selector field.
        field: &'static str,
        /// The expression.
        value: String,
        /// The regex error.
        #[source]
        source: regex::Error,
    },
    /// A label/annotation selector cannot be parsed.
    #[error("invalid {field} {value:?}: {reason}")]
    Expression {
        /// `labelSelector` or `annotationSelector`.
        field: &'static str,
        /// The expression.
        value: String,
        /// Why.
        reason: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed Kubernetes label selector (`a=b,c!=d,e in (f,g),!h,i`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

fn split_top_level(expr: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in expr.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&expr[start..]);
    parts
}

impl LabelSelector {
    /// Parses a selector expression; the empty expression matches everything.
    pub fn parse(expr: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for term in split_top_level(expr) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let set_op = |op: &str| -> Option<Result<(String, Vec<String>), String>> {
                let (key, rest) = term.split_once(op)?;
                let rest = rest.trim();
                let inner = rest
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| format!("expected a (...) list in {term:?}"));
                Some(inner.map(|inner| {
                    (
                        key.trim().to_string(),
                        inner
                            .split(',')
                            .map(|v| v.trim().to_string())
                            .filter(|v| !v.is_empty())
                            .collect(),
                    )
                }))
            };
            let req = if let Some(r) = set_op(" notin ") {
                let (k, vs) = r?;
                Requirement::NotIn(k, vs)
            } else if let Some(r) = set_op(" in ") {
                let (k, vs) = r?;
                Requirement::In(k, vs)
            } else if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==") {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once('=') {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = term.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else {
                Requirement::Exists(term.to_string())
            };
            let key = match &req {
                Requirement::Exists(k)
                | Requirement::NotExists(k)
                | Requirement::Equals(k, _)
                | Requirement::NotEquals(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _) => k,
            };
            if key.is_empty() || key.contains(char::is_whitespace) {
                return Err(format!("invalid key in {term:?}"));
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether a label (or annotation) map satisfies every requirement.
    pub fn matches(&self, map: Option<&Map<String, Value>>) -> bool {
        let get = |k: &str| map.and_then(|m| m.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
        })
    }
}

/// A compiled `spec.ignore` rule: JSON pointers and an optional object selector (group,
/// version, kind, name and namespace are anchored regular expressions).
#[derive(Clone, Debug)]
pub struct DriftIgnoreRule {
    paths: Vec<String>,
    fields: Vec<(&'static str, regex::Regex)>,
    labels: Option<LabelSelector>,
    annotations: Option<LabelSelector>,
}

/// Compiles `spec.ignore`.
pub fn compile_ignore_rules(
    rules: &[rflux_common::api::kustomization::IgnoreRule],
) -> Result<Vec<DriftIgnoreRule>, SelectorError> {
    rules
        .iter()
        .map(|rule| {
            let mut fields = Vec::new();
            let mut labels = None;
            let mut annotations = None;
            if let Some(t) = &rule.target {
                for (field, value) in [
                    ("group", &t.group),
                    ("version", &t.version),
                    ("kind", &t.kind),
                    ("name", &t.name),
                    ("namespace", &t.namespace),
                ] {
                    if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                        let re = regex::Regex::new(&format!("^(?:{v})$")).map_err(|source| {
                            SelectorError::Regex {
                                field,
                                value: v.to_string(),
                                source,
                            }
                        })?;
                        fields.push((field, re));
                    }
                }
                let parse = |field: &'static str, v: &Option<String>| {
                    v.as_deref()
                        .filter(|v| !v.is_empty())
                        .map(|v| {
                            LabelSelector::parse(v).map_err(|reason| SelectorError::Expression {
                                field,
                                value: v.to_string(),
                                reason,
                            })
                        })
                        .transpose()
                };
                labels = parse("labelSelector", &t.label_selector)?;
                annotations = parse("annotationSelector", &t.annotation_selector)?;
            }
            Ok(DriftIgnoreRule {
                paths: rule.paths.clone(),
                fields,
                labels,
                annotations,
            })
        })
        .collect()
}

impl DriftIgnoreRule {
    /// Whether the rule applies to `obj`.
    pub fn matches(&self, obj: &Value) -> bool {
        let Ok(id) = ObjectRef::from_value(obj) else {
            return false;
        };
        let fields_ok = self.fields.iter().all(|(field, re)| {
            let v = match *field {
                "group" => &id.group,
                "version" => &id.version,
                "kind" => &id.kind,
                "name" => &id.name,
                _ => &id.namespace,
            };
            re.is_match(v)
        });
        fields_ok
            && self.labels.as_ref().is_none_or(|s| {
                s.matches(obj.pointer("/metadata/labels").and_then(Value::as_object))
            })
            && self.annotations.as_ref().is_none_or(|s| {
                s.matches(
                    obj.pointer("/metadata/annotations")
                        .and_then(Value::as_object),
                )
            })
    }
}

/// The ignored JSON pointers for `obj` (rules are matched against the dry-run object).
pub fn ignored_paths(rules: &[DriftIgnoreRule], obj: &Value) -> Vec<String> {
    rules
        .iter()
        .filter(|r| r.matches(obj))
        .flat_map(|r| r.paths.iter().cloned())
        .collect()
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn remove_pointer(v: &mut Value, pointer: &str) -> Option<Value> {
    let (parent, last) = pointer.rsplit_once('/')?;
    let last = unescape(last);
    match v.pointer_mut(parent)? {
        Value::Object(m) => m.shift_remove(&last),
        Value::Array(a) => {
            let i: usize = last.parse().ok()?;
            (i < a.len()).then(|| a.remove(i))
        }
        _ => None,
    }
}

fn set_pointer(v: &mut Value, pointer: &str, new: Value) -> bool {
    let Some(rest) = pointer.strip_prefix('/') else {
        return false;
    };
    let tokens: Vec<String> = rest.split('/').map(unescape).collect();
    let mut cur = v;
    for (i, t) in tokens.iter().enumerate() {
        let last = i + 1 == tokens.len();
        cur = match cur {
            Value::Object(m) => {
                if last {
                    m.insert(t.clone(), new);
                    return true;
                }
                m.entry(t.clone())
                    .or_insert_with(|| Value::Object(Map::new()))
            }
            Value::Array(a) => {
                let Some(slot) = t.parse::<usize>().ok().and_then(|i| a.get_mut(i)) else {
                    return false;
                };
                if last {
                    *slot = new;
                    return true;
                }
                slot
            }
            _ => return false,
        };
    }
    false
}

/// A copy of `obj` without the given JSON pointers.
pub fn strip_paths(obj: &Value, paths: &[String]) -> Value {
    let mut v = obj.clone();
    for p in paths {
        remove_pointer(&mut v, p);
    }
    v
}

/// The apply payload for ignored paths that drifted: the live value is adopted when the live
/// object has one, otherwise the path is removed from the payload.
pub fn reconcile_ignored(desired: &Value, live: &Value, dry: &Value, paths: &[String]) -> Value {
    let mut payload = desired.clone();
    for p in paths {
        let live_v = live.pointer(p);
        if live_v == dry.pointer(p) {
            continue;
        }
        match live_v {
            Some(l) if set_pointer(&mut payload, p, l.clone()) => {}
            _ => {
                remove_pointer(&mut payload, p);
            }
        }
    }
    payload
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
        let mut desired = prepare(o, &opts.owner);
        merge_common_metadata(&mut desired, &opts.common_labels, &opts.common_annotations);
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
            if inventory::stage_of(&id, &opts.custom_stage_kinds) == stage {
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
            match execute(&id, plan).await {
                Ok((action, live)) => {
                    track(resolver, opts, &id, &desired, action, live.as_ref()).await;
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
            && let Err(e) = health::wait_for_with(resolver, &applied, opts.wait_timeout).await
        {
            return Err(ApplyError {
                kind: e.into(),
                partial: changes,
            });
        }
    }
    tracing::info!(
        output = ?changes
            .entries
            .iter()
            .map(|e| (e.subject(), e.action.to_string()))
            .collect::<Vec<_>>(),
        "server-side apply completed"
    );
    Ok(changes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner {
            name: "app".into(),
            namespace: "flux-system".into(),
        }
    }

    #[test]
    fn prepare_sets_owner_labels_and_strips_server_fields() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "creationTimestamp": null, "resourceVersion": "5",
                "labels": {"x": "y"}},
            "status": {"a": 1}, "data": {"k": "v"}});
        let p = prepare(obj, &owner());
        assert_eq!(p["metadata"]["labels"][NAME_LABEL], "app");
        assert_eq!(p["metadata"]["labels"][NAMESPACE_LABEL], "flux-system");
        assert_eq!(p["metadata"]["labels"]["x"], "y");
        assert!(p.get("status").is_none());
        assert!(p["metadata"].get("creationTimestamp").is_none());
        assert!(p["metadata"].get("resourceVersion").is_none());

        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition", "metadata": {"name": "a.b"}, "status": {"x": 1}});
        assert!(prepare(crd, &owner()).get("status").is_some());
    }

    #[test]
    fn common_metadata_is_merged_over_the_object() {
        let mut o = prepare(
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "labels": {"team": "a"}}}),
            &owner(),
        );
        let labels = json!({"team": "b", "env": "prod"});
        let ann = json!({"note": "x"});
        merge_common_metadata(
            &mut o,
            labels.as_object().unwrap(),
            ann.as_object().unwrap(),
        );
        assert_eq!(o["metadata"]["labels"]["team"], "b");
        assert_eq!(o["metadata"]["labels"]["env"], "prod");
        assert_eq!(o["metadata"]["labels"][NAME_LABEL], "app");
        assert_eq!(o["metadata"]["annotations"]["note"], "x");
    }

    #[test]
    fn annotation_matching_is_case_insensitive_on_labels_and_annotations() {
        let a = json!({"metadata": {"annotations": {SSA_KEY: "ignore"}}});
        assert!(has_meta_value(&a, SSA_KEY, "Ignore"));
        assert!(is_ignored(&a));
        let l = json!({"metadata": {"labels": {RECONCILE_KEY: "Disabled"}}});
        assert!(is_ignored(&l));
        let other = json!({"metadata": {"annotations": {SSA_KEY: "Merge"}}});
        assert!(!is_ignored(&other));
        assert!(!has_meta_value(&json!({}), FORCE_KEY, "enabled"));
    }

    #[test]
    fn drift_detection() {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "resourceVersion": "7", "labels": {"a": "1"},
                "managedFields": [{"manager": "x"}]},
            "data": {"k": "v", "j": "w"}});
        let mut same = live.clone();
        same["metadata"]["managedFields"] = json!([{"manager": "kustomize-controller"}]);
        // Key order does not matter.
        same["data"] = json!({"j": "w", "k": "v"});
        assert!(!has_drifted(Some(&live), &same));
        assert!(has_drifted(None, &same));
        let mut data = same.clone();
        data["data"]["k"] = json!("changed");
        assert!(has_drifted(Some(&live), &data));
        let mut labels = same.clone();
        labels["metadata"]["labels"]["b"] = json!("2");
        assert!(has_drifted(Some(&live), &labels));
        let mut ann = same.clone();
        ann["metadata"]["annotations"] = json!({"x": "y"});
        assert!(has_drifted(Some(&live), &ann));
        let mut new_obj = same.clone();
        new_obj["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        assert!(has_drifted(Some(&live), &new_obj));
    }

    #[test]
    fn cleanup_merges_kubectl_managers() {
        let live = json!({"metadata": {
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "1"},
        "labels": {"fluxcd.io/sync-gc-mark": "x"},
        "managedFields": [
            {"manager": "kustomize-controller", "operation": "Apply", "apiVersion": "v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}},
            {"manager": "kubectl-edit", "operation": "Update", "apiVersion": "v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:b": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}},
            {"manager": "flux-client-side-apply", "operation": "Update", "apiVersion": "v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:c": {}}}}
        ]}});
        let patch = cleanup_patch(&live, &[]).unwrap();
        let meta = &patch["metadata"];
        assert_eq!(
            meta["annotations"],
            json!({"kubectl.kubernetes.io/last-applied-configuration": null})
        );
        assert_eq!(meta["labels"], json!({"fluxcd.io/sync-gc-mark": null}));
        let mf = meta["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 3);
        let ours = mf.iter().find(|e| e["manager"] == FIELD_MANAGER).unwrap();
        assert_eq!(ours["operation"], "Apply");
        assert_eq!(ours["fieldsV1"], json!({"f:data": {"f:a": {}, "f:b": {}}}));
        assert!(mf.iter().any(|e| e["manager"] == "flux-client-side-apply"));

        let clean = json!({"metadata": {"managedFields": [
            {"manager": "kustomize-controller", "operation": "Apply", "fieldsV1": {}}]}});
        assert!(cleanup_patch(&clean, &[]).is_none());
        let custom = json!({"metadata": {"managedFields": [
            {"manager": "helm", "operation": "Update", "fieldsV1": {"f:a": {}}}]}});
        assert!(cleanup_patch(&custom, &[]).is_none());
        let p = cleanup_patch(&custom, &["helm".to_string()]).unwrap();
        assert_eq!(p["metadata"]["managedFields"][0]["manager"], FIELD_MANAGER);
    }

    #[test]
    fn dry_run_error_texts_match_flux() {
        let obj = |ns: &str| ObjectRef {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            namespace: ns.into(),
            name: "web".into(),
        };
        let api = |msg: &str, reason: &str, code: u16| {
            kube::Error::Api(
                kube::core::Status::failure(msg, reason)
                    .with_code(code)
                    .boxed(),
            )
        };
        let invalid = dry_run_error(&obj("a"), &api("spec: bad", "Invalid", 422));
        assert_eq!(
            invalid.to_string(),
            "Deployment/a/web dry-run failed (Invalid): spec: bad"
        );
        let missing = dry_run_error(
            &obj("a"),
            &api("namespaces \"a\" not found", "NotFound", 404),
        );
        assert_eq!(
            missing.to_string(),
            "Deployment/a/web not found: namespaces \"a\" not found"
        );
        let no_ns = dry_run_error(&obj(""), &api("not found", "NotFound", 404));
        assert_eq!(
            no_ns.to_string(),
            "Deployment/web namespace not specified: not found"
        );
        let no_reason = dry_run_error(&obj("a"), &api("boom", "", 500));
        assert_eq!(
            no_reason.to_string(),
            "Deployment/a/web dry-run failed: boom"
        );
    }

    #[test]
    fn label_selectors() {
        let labels = json!({"app": "web", "tier": "front"});
        let m = labels.as_object();
        let ok = |e: &str| LabelSelector::parse(e).unwrap().matches(m);
        assert!(ok(""));
        assert!(ok("app=web"));
        assert!(ok("app==web,tier"));
        assert!(!ok("app!=web"));
        assert!(ok("tier in (front, back)"));
        assert!(!ok("tier notin (front)"));
        assert!(ok("!missing"));
        assert!(!ok("missing"));
        assert!(ok("missing notin (x)"));
        assert!(LabelSelector::parse("a in b").is_err());
    }

    #[test]
    fn ignore_rules_strip_and_adopt() {
        use rflux_common::api::kustomization::{IgnoreRule, Selector};
        let rules = compile_ignore_rules(&[IgnoreRule {
            paths: vec!["/spec/replicas".into(), "/metadata/annotations/a~1b".into()],
            target: Some(Selector {
                kind: Some("Deploy.*".into()),
                name: Some("web".into()),
                label_selector: Some("app=web".into()),
                ..Selector::default()
            }),
        }])
        .unwrap();
        let dep = |name: &str, replicas: i64| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": "a", "resourceVersion": "1",
                    "labels": {"app": "web"}, "annotations": {"a/b": "x"}},
                "spec": {"replicas": replicas}})
        };
        assert_eq!(ignored_paths(&rules, &dep("web", 1)).len(), 2);
        assert!(
            ignored_paths(&rules, &dep("web2", 1)).is_empty(),
            "anchored"
        );

        let live = dep("web", 5);
        let dry = dep("web", 1);
        assert!(has_drifted(Some(&live), &dry));
        let paths = ignored_paths(&rules, &dry);
        assert!(!has_drifted(
            Some(&strip_paths(&live, &paths)),
            &strip_paths(&dry, &paths)
        ));
        let desired = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"}, "spec": {"replicas": 1, "paused": false}});
        let payload = reconcile_ignored(&desired, &live, &dry, &paths);
        assert_eq!(payload["spec"]["replicas"], 5);
        let mut gone = live.clone();
        gone["spec"].as_object_mut().unwrap().remove("replicas");
        let payload = reconcile_ignored(&desired, &gone, &dry, &paths);
        assert!(payload["spec"].get("replicas").is_none());
        assert_eq!(payload["spec"]["paused"], false);

        let bad = compile_ignore_rules(&[IgnoreRule {
            paths: vec![],
            target: Some(Selector {
                name: Some("(".into()),
                ..Selector::default()
            }),
        }]);
        assert!(matches!(
            bad,
            Err(SelectorError::Regex { field: "name", .. })
        ));
    }

    #[test]
    fn immutable_errors() {
        assert!(is_immutable_error(422, "spec.selector: Invalid value"));
        assert!(is_immutable_error(409, ""));
        assert!(is_immutable_error(400, "field is immutable"));
        assert!(!is_immutable_error(400, "bad request"));
    }

    #[test]
    fn change_set_messages() {
        let mut cs = ChangeSet::default();
        let obj = |kind: &str, ns: &str, name: &str| ObjectRef {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
        };
        cs.push(obj("Namespace", "", "a"), Action::Unchanged);
        cs.push(obj("ConfigMap", "a", "c"), Action::Configured);
        cs.push(obj("Service", "a", "s"), Action::Created);
        cs.push(obj("Secret", "a", "x"), Action::Skipped);
        assert!(cs.has_changes());
        assert_eq!(
            cs.event_message(),
            "ConfigMap/a/c configured\nService/a/s created"
        );
        assert_eq!(cs.action_of("Namespace/a"), Some(Action::Unchanged));
        assert_eq!(cs.entries[3].to_string(), "Secret/a/x skipped");
    }
}
