//! `fluxcd.controlplane.io/v1` ResourceSet: a set of Kubernetes objects rendered from templates
//! once per input set, applied, health-checked and garbage-collected as a group (Flux Operator's
//! API, schema-compatible with flux-operator v0.59.0; the semantics are in
//! `resourceset.md` of the reference material).
//!
//! The submodules hold what both `fluxcd.controlplane.io` kinds share: the annotation, label
//! and condition vocabulary ([`keys`]), the hand-written schema pieces ([`schema`]), the spec
//! re-checks the controller repeats ([`validate`]), and the CRD generation for the group
//! ([`crd`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::kustomization::{CommonMetadata, ResourceInventory, Snapshot};

pub mod crd;
pub mod keys;
pub mod schema;
pub mod validate;

pub use keys::*;

/// One input set: the values a template reads through `inputs` (arbitrary JSON per key).
pub type InputSet = Map<String, Value>;

/// One resource template of `spec.resources`: an object whose string values may hold
/// `<< … >>` template actions.
pub type ResourceTemplate = Map<String, Value>;

/// Desired state of a ResourceSet: the templates, where their inputs come from, and how the
/// rendered objects are applied.
#[allow(clippy::duplicated_attributes)] // kube repeats `category` and `printcolumn`
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fluxcd.controlplane.io",
    version = "v1",
    kind = "ResourceSet",
    plural = "resourcesets",
    singular = "resourceset",
    namespaced,
    status = "ResourceSetStatus",
    shortname = "rset",
    category = "all",
    category = "fluxcd",
    category = "fluxcd-appliers",
    derive = "PartialEq",
    doc = "ResourceSet renders Kubernetes objects from templates and input sets and reconciles them as a group.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "message": "steps is mutually exclusive with resources and resourcesTemplate",
        "rule": "!has(self.steps) || (!has(self.resources) && !has(self.resourcesTemplate))"
    },
    {
        "message": "at least one of steps, resources or resourcesTemplate must be set",
        "rule": "has(self.steps) || has(self.resources) || has(self.resourcesTemplate)"
    }
]))]
pub struct ResourceSetSpec {
    /// Labels and annotations set on every rendered object (overwriting equal keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_metadata: Option<CommonMetadata>,

    /// Objects (by `apiVersion`, `kind`, `name`, `namespace`) that must exist, and optionally
    /// be ready, before the templates are rendered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<ResourceSetDependency>>,

    /// How the input sets of several providers are combined; `Flatten` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_strategy: Option<InputStrategySpec>,

    /// Input sets written in the ResourceSet itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::input_sets_schema")]
    pub inputs: Option<Vec<InputSet>>,

    /// ResourceSetInputProviders (same namespace) whose exported input sets are added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs_from: Option<Vec<InputProviderReference>>,

    /// Object templates, each rendered once per input set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::resource_templates_schema")]
    pub resources: Option<Vec<ResourceTemplate>>,

    /// A multi-document YAML template, rendered once per input set; objects of `resources`
    /// win over equal ones rendered from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_template: Option<String>,

    /// ServiceAccount (in the ResourceSet's namespace) impersonated to apply and prune.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// Ordered stages, each applied and health-checked before the next one starts; excludes
    /// `resources` and `resourcesTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 20),
        extend("x-kubernetes-validations" = [{
            "message": "step names must be unique",
            "rule": "self.all(s, self.exists_one(t, t.name == s.name))"
        }])
    )]
    pub steps: Option<Vec<ResourceSetStep>>,

    /// Wait for every applied object of the last step to become ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,
}

/// The ways input sets of several providers are combined.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum InputStrategy {
    /// All input sets, provider after provider, in one list.
    #[default]
    Flatten,
    /// The Cartesian product of the providers' input sets, each set scoped under its
    /// provider's normalized name.
    Permute,
}

impl InputStrategy {
    /// The value as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            InputStrategy::Flatten => "Flatten",
            InputStrategy::Permute => "Permute",
        }
    }
}

impl std::fmt::Display for InputStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.inputStrategy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "message": "includeEmptyProviders only applies when name is Permute",
    "rule": "!has(self.includeEmptyProviders) || self.name == 'Permute'"
}]))]
pub struct InputStrategySpec {
    /// The strategy.
    pub name: InputStrategy,
    /// Permute only: a provider without input sets empties the whole product instead of
    /// being left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_empty_providers: Option<bool>,
}

/// A reference to input providers in the ResourceSet's namespace, by name or by labels.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "message": "at least one of name or selector must be set for input provider references",
        "rule": "has(self.name) || has(self.selector)"
    },
    {
        "message": "cannot set both name and selector for input provider references",
        "rule": "!has(self.name) || !has(self.selector)"
    }
]))]
pub struct InputProviderReference {
    /// API version of the provider; the ResourceSet's when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = [API_VERSION]))]
    pub api_version: Option<String>,
    /// Kind of the provider; only `ResourceSetInputProvider`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = [INPUT_PROVIDER_KIND]))]
    pub kind: Option<String>,
    /// Name of one provider (excludes `selector`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Label selector choosing the providers (excludes `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::label_selector_schema")]
    pub selector: Option<LabelSelector>,
}

/// An object that must exist (and, with `ready`, be ready) before the ResourceSet is built.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "message": "ready must be set when readyExpr is set",
    "rule": "!has(self.readyExpr) || has(self.ready)"
}]))]
pub struct ResourceSetDependency {
    /// API version of the object.
    pub api_version: String,
    /// Kind of the object.
    pub kind: String,
    /// Name of the object.
    pub name: String,
    /// Namespace of the object; empty for a cluster-scoped object (never defaulted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Also require the object to be ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// CEL expression over the object replacing the built-in readiness check (with `ready`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_expr: Option<String>,
}

/// One named stage of `spec.steps`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "message": "at least one of resources or resourcesTemplate must be set",
    "rule": "has(self.resources) || has(self.resourcesTemplate)"
}]))]
pub struct ResourceSetStep {
    /// Name of the step (a DNS label), unique within the ResourceSet.
    #[schemars(length(max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
    /// Object templates of this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::resource_templates_schema")]
    pub resources: Option<Vec<ResourceTemplate>>,
    /// Multi-document YAML template of this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_template: Option<String>,
    /// How long to wait for the step's objects to become ready; the ResourceSet's
    /// reconcile timeout when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub timeout: Option<String>,
}

/// Observed state of a ResourceSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSetStatus {
    /// Ready, Reconciling and Stalled conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::meta::conditions_schema")]
    pub conditions: Option<Vec<Condition>>,
    /// Sorted `Kind/namespace/name` of the ConfigMaps and Secrets read from the cluster for
    /// `checksumFrom` annotations in the last reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_checksum_refs: Option<Vec<String>>,
    /// Up to five recent reconciliation snapshots, newest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<Snapshot>>,
    /// Objects applied by the last successful reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<ResourceInventory>,
    /// `sha256:<hex>` of the objects applied last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_revision: Option<String>,
    /// Last handled value of the `reconcile.fluxcd.io/requestedAt` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

impl ResourceSetSpec {
    /// The effective input strategy (`Flatten` when unset).
    pub fn input_strategy(&self) -> InputStrategy {
        self.input_strategy
            .as_ref()
            .map(|s| s.name)
            .unwrap_or_default()
    }

    /// Whether empty providers empty the product: only with `Permute` and
    /// `includeEmptyProviders: true`.
    pub fn include_empty_providers(&self) -> bool {
        self.input_strategy.as_ref().is_some_and(|s| {
            s.name == InputStrategy::Permute && s.include_empty_providers.unwrap_or(false)
        })
    }

    /// Whether `spec.steps` holds at least one step.
    pub fn has_steps(&self) -> bool {
        self.steps.as_ref().is_some_and(|s| !s.is_empty())
    }

    /// Whether the final step's objects are health-checked.
    pub fn wait(&self) -> bool {
        self.wait.unwrap_or(false)
    }

    /// The inline input sets (none when unset).
    pub fn inputs(&self) -> &[InputSet] {
        self.inputs.as_deref().unwrap_or_default()
    }

    /// The input provider references (none when unset).
    pub fn inputs_from(&self) -> &[InputProviderReference] {
        self.inputs_from.as_deref().unwrap_or_default()
    }

    /// The dependencies (none when unset).
    pub fn depends_on(&self) -> &[ResourceSetDependency] {
        self.depends_on.as_deref().unwrap_or_default()
    }

    /// The steps (none when unset).
    pub fn steps(&self) -> &[ResourceSetStep] {
        self.steps.as_deref().unwrap_or_default()
    }

    /// The labels of `commonMetadata` (empty when unset).
    pub fn common_labels(&self) -> BTreeMap<String, String> {
        self.common_metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default()
    }

    /// The annotations of `commonMetadata` (empty when unset).
    pub fn common_annotations(&self) -> BTreeMap<String, String> {
        self.common_metadata
            .as_ref()
            .and_then(|m| m.annotations.clone())
            .unwrap_or_default()
    }
}

impl InputProviderReference {
    /// The referenced kind, `ResourceSetInputProvider` when unset.
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or(INPUT_PROVIDER_KIND)
    }

    /// The referenced API version, `fluxcd.controlplane.io/v1` when unset.
    pub fn api_version(&self) -> &str {
        self.api_version.as_deref().unwrap_or(API_VERSION)
    }
}

impl ResourceSetDependency {
    /// Whether the dependency must be ready, not only exist.
    pub fn ready(&self) -> bool {
        self.ready.unwrap_or(false)
    }

    /// `apiVersion/Kind/namespace/name` (or `apiVersion/Kind/name` when cluster-scoped), the
    /// form the controller's messages use.
    pub fn display_ref(&self) -> String {
        match self.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => {
                format!("{}/{}/{}/{}", self.api_version, self.kind, ns, self.name)
            }
            _ => format!("{}/{}/{}", self.api_version, self.kind, self.name),
        }
    }
}

impl ResourceSet {
    /// Whether the `fluxcd.controlplane.io/reconcile` annotation is `disabled` (any case).
    pub fn is_disabled(&self) -> bool {
        keys::is_disabled(self.metadata.annotations.as_ref())
    }

    /// Whether the `fluxcd.controlplane.io/force` annotation is `enabled` (any case).
    pub fn is_force_enabled(&self) -> bool {
        keys::annotation_is(
            self.metadata.annotations.as_ref(),
            FORCE_ANNOTATION,
            ENABLED_VALUE,
        )
    }

    /// The `fluxcd.controlplane.io/reconcileEvery` value, or its default (`1h`); the caller
    /// parses it and falls back to the default when it does not parse.
    pub fn reconcile_every(&self) -> &str {
        keys::annotation(
            self.metadata.annotations.as_ref(),
            RECONCILE_EVERY_ANNOTATION,
        )
        .unwrap_or(RESOURCESET_DEFAULT_INTERVAL)
    }

    /// The `fluxcd.controlplane.io/reconcileTimeout` value, or its default (`5m`).
    pub fn reconcile_timeout(&self) -> &str {
        keys::annotation(
            self.metadata.annotations.as_ref(),
            RECONCILE_TIMEOUT_ANNOTATION,
        )
        .unwrap_or(RESOURCESET_DEFAULT_TIMEOUT)
    }
}
