//! `kustomize.toolkit.fluxcd.io/v1` Kustomization.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::meta::{
    CrossNamespaceSourceReference, DependencyReference, KubeConfigReference, LocalObjectReference,
    NamespacedObjectKindReference,
};

/// API group of the Kustomization kind.
pub const KUSTOMIZE_GROUP: &str = "kustomize.toolkit.fluxcd.io";
/// Kind name of [`Kustomization`].
pub const KUSTOMIZATION_KIND: &str = "Kustomization";

/// Desired state of a Kustomization: which source path to build, how to transform
/// the result, and how to apply, health-check and garbage-collect it.
#[allow(clippy::duplicated_attributes)] // kube repeats `category` and `printcolumn`
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kustomize.toolkit.fluxcd.io",
    version = "v1",
    kind = "Kustomization",
    plural = "kustomizations",
    singular = "kustomization",
    namespaced,
    status = "KustomizationStatus",
    shortname = "ks",
    category = "all",
    category = "fluxcd",
    category = "fluxcd-appliers",
    derive = "PartialEq",
    doc = "Kustomization builds a path of a source with kustomize and applies the result to a cluster.",
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
pub struct KustomizationSpec {
    /// Kustomize build metadata to add to the built objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_metadata: Option<Vec<BuildMetadata>>,

    /// Labels and annotations set on every applied object (after the build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_metadata: Option<CommonMetadata>,

    /// Kustomize components (local relative paths) to add to the build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub components: Option<Vec<String>>,

    /// SOPS decryption of Secrets in the built objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decryption: Option<Decryption>,

    /// What happens to the applied objects when the Kustomization is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,

    /// Kustomizations that must be ready before this one is reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<DependencyReference>>,

    /// Recreate objects whose update fails because of immutable fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub force: Option<bool>,

    /// CEL health checks for custom resources, used with `wait` or `healthChecks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_exprs: Option<Vec<CustomHealthCheck>>,

    /// Objects whose health is checked after apply (ignored when `wait` is true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_checks: Option<Vec<NamespacedObjectKindReference>>,

    /// Rules for fields to leave out of drift detection and apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<Vec<IgnoreRule>>,

    /// Drop components that do not exist in the source instead of failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_missing_components: Option<bool>,

    /// Image name, tag and digest overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<Image>>,

    /// How often to reconcile (approximate, jittered).
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub interval: String,

    /// Apply to a remote cluster described by a Secret or ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_config: Option<KubeConfigReference>,

    /// Prefix added to the names of the built objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 200))]
    pub name_prefix: Option<String>,

    /// Suffix added to the names of the built objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 200))]
    pub name_suffix: Option<String>,

    /// Inline strategic-merge or JSON6902 patches with optional targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches: Option<Vec<Patch>>,

    /// Directory in the source with a kustomization.yaml or plain manifests; the root when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,

    /// Variable substitution on the built manifests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_build: Option<PostBuild>,

    /// Delete objects that were applied before but are no longer built.
    pub prune: bool,

    /// How soon to retry after a failure; `interval` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub retry_interval: Option<String>,

    /// ServiceAccount (in this namespace) to impersonate when applying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// The source that provides the manifests.
    pub source_ref: CrossNamespaceSourceReference,

    /// Stops reconciliation while true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// Namespace set on (or overriding) every namespaced built object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub target_namespace: Option<String>,

    /// Time limit of build, apply and health checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub timeout: Option<String>,

    /// Health-check every applied object (then `healthChecks` is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,
}

/// Kustomize build metadata options.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BuildMetadata {
    /// Annotate objects with the file they came from.
    OriginAnnotations,
    /// Annotate objects with the transformers that changed them.
    TransformerAnnotations,
}

/// Labels and annotations applied to every object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommonMetadata {
    /// Annotations to add (existing keys are overwritten).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Labels to add (existing keys are overwritten).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

/// Decryption providers.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DecryptionProvider {
    /// Mozilla SOPS.
    Sops,
}

/// How to decrypt encrypted Secrets in the build output.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decryption {
    /// The decryption provider.
    pub provider: DecryptionProvider,
    /// Secret with private keys or cloud credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// ServiceAccount for cloud KMS workload identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
}

/// Garbage-collection policy on deletion.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete when `prune` is true, orphan otherwise.
    MirrorPrune,
    /// Delete the applied objects.
    Delete,
    /// Delete the applied objects and wait until they are gone.
    WaitForTermination,
    /// Leave the applied objects in place.
    Orphan,
}

/// CEL expressions computing the health of a custom resource kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomHealthCheck {
    /// API version (only its group is matched).
    pub api_version: String,
    /// Kind; when unset, every kind of the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Expression true when the object reached its desired state.
    pub current: String,
    /// Expression true while the object is progressing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_progress: Option<String>,
    /// Expression true when the object failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// Selects objects by GVK, name, namespace and label/annotation selectors.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    /// API group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// API version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name (a regular expression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace (a regular expression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Label selector expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    /// Annotation selector expression (label selector syntax over annotations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<String>,
}

/// Fields (JSON pointers) to ignore during drift detection.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnoreRule {
    /// JSON pointers (RFC 6901) to ignore.
    pub paths: Vec<String>,
    /// Objects the rule applies to; all objects when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Selector>,
}

/// An image override.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    /// Image name to match.
    pub name: String,
    /// Replacement name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_name: Option<String>,
    /// Replacement tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_tag: Option<String>,
    /// Replacement digest (wins over `newTag`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// An inline patch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Patch {
    /// Strategic-merge patch (YAML object) or JSON6902 patch (array of operations).
    pub patch: String,
    /// Objects to patch; for a strategic-merge patch, by default the object it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Selector>,
}

/// Post-build variable substitution.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostBuild {
    /// Inline variables (highest precedence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub substitute: Option<BTreeMap<String, String>>,
    /// ConfigMaps and Secrets providing variables; later entries override earlier ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub substitute_from: Option<Vec<SubstituteReference>>,
    /// When to substitute; `WithVariables` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub substitute_strategy: Option<SubstituteStrategy>,
}

/// Kind of a substitution variable source.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SubstituteKind {
    /// A Secret (values are base64-decoded).
    Secret,
    /// A ConfigMap.
    ConfigMap,
}

/// A ConfigMap or Secret providing substitution variables.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubstituteReference {
    /// Kind of the object.
    pub kind: SubstituteKind,
    /// Name of the object, in the Kustomization's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Treat a missing object as empty instead of failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub optional: Option<bool>,
}

/// Substitution strategies.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SubstituteStrategy {
    /// Substitute only when at least one variable is defined.
    WithVariables,
    /// Always substitute (unset variables without defaults become empty).
    Always,
}

/// Observed state of a Kustomization.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizationStatus {
    /// Generation last reconciled successfully (`-1` before the first reconcile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Reconciling, Stalled and Healthy conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::meta::conditions_schema")]
    pub conditions: Option<Vec<Condition>>,
    /// Last source revision applied successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_revision: Option<String>,
    /// Origin revision (e.g. `org.opencontainers.image.revision`) of the last applied artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_origin_revision: Option<String>,
    /// Last source revision a reconcile was attempted for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision: Option<String>,
    /// Last handled value of the `reconcile.fluxcd.io/requestedAt` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// Objects applied by the last successful apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<ResourceInventory>,
    /// Up to five recent reconciliation snapshots, newest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<Snapshot>>,
}

/// The set of applied objects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInventory {
    /// Applied objects, in apply order.
    pub entries: Vec<ResourceRef>,
}

/// One applied object in the inventory.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub struct ResourceRef {
    /// `<namespace>_<name>_<group>_<kind>` (cli-utils ObjMetadata format).
    pub id: String,
    /// API version of the applied object.
    pub v: String,
}

/// The parts of an inventory id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ObjMetadata {
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// API group; empty for the core group.
    pub group: String,
    /// Kind.
    pub kind: String,
}

/// An inventory id that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid inventory id {id:?}: {reason}")]
pub struct InvalidInventoryId {
    /// The offending id.
    pub id: String,
    /// Why it is invalid.
    pub reason: &'static str,
}

const RBAC_KINDS: [&str; 4] = ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"];
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

impl ObjMetadata {
    /// The inventory id (`:` in RBAC names is written as `__`).
    pub fn to_id(&self) -> String {
        let name = if self.group == RBAC_GROUP && RBAC_KINDS.contains(&self.kind.as_str()) {
            self.name.replace(':', "__")
        } else {
            self.name.clone()
        };
        format!("{}_{}_{}_{}", self.namespace, name, self.group, self.kind)
    }

    /// Parses an inventory id: namespace up to the first `_`, kind after the last
    /// `_`, group before that, name the rest.
    pub fn parse_id(id: &str) -> Result<Self, InvalidInventoryId> {
        let err = |reason| InvalidInventoryId {
            id: id.to_string(),
            reason,
        };
        let (namespace, rest) = id.split_once('_').ok_or_else(|| err("too few fields"))?;
        let (rest, kind) = rest.rsplit_once('_').ok_or_else(|| err("too few fields"))?;
        let (name, group) = rest.rsplit_once('_').ok_or_else(|| err("too few fields"))?;
        if name.is_empty() {
            return Err(err("empty name"));
        }
        if kind.is_empty() {
            return Err(err("empty kind"));
        }
        let name = if group == RBAC_GROUP && RBAC_KINDS.contains(&kind) {
            name.replace("__", ":")
        } else {
            name.to_string()
        };
        Ok(ObjMetadata {
            namespace: namespace.to_string(),
            name,
            group: group.to_string(),
            kind: kind.to_string(),
        })
    }
}

impl ResourceRef {
    /// Parses the id of this entry.
    pub fn metadata(&self) -> Result<ObjMetadata, InvalidInventoryId> {
        ObjMetadata::parse_id(&self.id)
    }
}

/// A point-in-time record of reconciling one build output.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// `sha256:<hex>` of the built manifests.
    pub digest: String,
    /// When this build output was first reconciled.
    pub first_reconciled: Time,
    /// When this build output was last reconciled.
    pub last_reconciled: Time,
    /// Duration of the last reconcile, Go duration format (e.g. `2.81s`).
    pub last_reconciled_duration: String,
    /// Result of the last reconcile (e.g. `ReconciliationSucceeded`).
    pub last_reconciled_status: String,
    /// Number of reconciles of this build output.
    pub total_reconciliations: i64,
    /// Extra data, e.g. `revision` and `originRevision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

impl KustomizationSpec {
    /// JSON names of the optional spec fields that are set, in schema order.
    /// Controllers use it to warn about fields they do not act on.
    pub fn set_fields(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let mut add = |set: bool, name: &'static str| {
            if set {
                out.push(name);
            }
        };
        add(self.build_metadata.is_some(), "buildMetadata");
        add(self.common_metadata.is_some(), "commonMetadata");
        add(self.components.is_some(), "components");
        add(self.decryption.is_some(), "decryption");
        add(self.deletion_policy.is_some(), "deletionPolicy");
        add(self.depends_on.is_some(), "dependsOn");
        add(self.force.is_some(), "force");
        add(self.health_check_exprs.is_some(), "healthCheckExprs");
        add(self.health_checks.is_some(), "healthChecks");
        add(self.ignore.is_some(), "ignore");
        add(
            self.ignore_missing_components.is_some(),
            "ignoreMissingComponents",
        );
        add(self.images.is_some(), "images");
        add(self.kube_config.is_some(), "kubeConfig");
        add(self.name_prefix.is_some(), "namePrefix");
        add(self.name_suffix.is_some(), "nameSuffix");
        add(self.patches.is_some(), "patches");
        add(self.path.is_some(), "path");
        add(self.post_build.is_some(), "postBuild");
        add(self.retry_interval.is_some(), "retryInterval");
        add(self.service_account_name.is_some(), "serviceAccountName");
        add(self.suspend.is_some(), "suspend");
        add(self.target_namespace.is_some(), "targetNamespace");
        add(self.timeout.is_some(), "timeout");
        add(self.wait.is_some(), "wait");
        out
    }

    /// Whether reconciliation is suspended.
    pub fn is_suspended(&self) -> bool {
        self.suspend.unwrap_or(false)
    }

    /// Whether every applied object is health-checked.
    pub fn wait(&self) -> bool {
        self.wait.unwrap_or(false)
    }

    /// Whether immutable-field errors recreate the object.
    pub fn force(&self) -> bool {
        self.force.unwrap_or(false)
    }

    /// The effective deletion policy (`MirrorPrune` when unset).
    pub fn deletion_policy(&self) -> DeletionPolicy {
        self.deletion_policy.unwrap_or(DeletionPolicy::MirrorPrune)
    }

    /// The effective retry interval string (`interval` when unset).
    pub fn retry_interval(&self) -> &str {
        self.retry_interval.as_deref().unwrap_or(&self.interval)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn full_spec() -> serde_json::Value {
        json!({
            "buildMetadata": ["originAnnotations"],
            "commonMetadata": {"annotations": {"a": "1"}, "labels": {"l": "2"}},
            "components": ["../c"],
            "decryption": {"provider": "sops", "secretRef": {"name": "sops"}, "serviceAccountName": "kms"},
            "deletionPolicy": "WaitForTermination",
            "dependsOn": [{"name": "infra", "namespace": "flux-system", "readyExpr": "dep.status.x == 1"}],
            "force": true,
            "healthCheckExprs": [{"apiVersion": "example.com/v1", "kind": "Foo", "current": "true", "inProgress": "false", "failed": "false"}],
            "healthChecks": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "app"}],
            "ignore": [{"paths": ["/spec/replicas"], "target": {"kind": "Deployment", "labelSelector": "a=b"}}],
            "ignoreMissingComponents": true,
            "images": [{"name": "nginx", "newName": "mirror/nginx", "newTag": "1.2", "digest": "sha256:00"}],
            "interval": "10m",
            "kubeConfig": {"secretRef": {"name": "kc", "key": "value"}},
            "namePrefix": "p-",
            "nameSuffix": "-s",
            "patches": [{"patch": "- op: remove\n  path: /x\n", "target": {"group": "apps", "version": "v1", "kind": "Deployment", "name": "web", "namespace": "app", "annotationSelector": "x"}}],
            "path": "./deploy",
            "postBuild": {"substitute": {"A": "b"}, "substituteFrom": [{"kind": "ConfigMap", "name": "vars", "optional": true}], "substituteStrategy": "Always"},
            "prune": true,
            "retryInterval": "1m",
            "serviceAccountName": "deployer",
            "sourceRef": {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository", "name": "src", "namespace": "other"},
            "suspend": false,
            "targetNamespace": "app",
            "timeout": "2m",
            "wait": true
        })
    }

    #[test]
    fn full_spec_round_trips_and_reports_set_fields() {
        let raw = full_spec();
        let spec: KustomizationSpec = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(serde_json::to_value(&spec).unwrap(), raw);
        let set = spec.set_fields();
        // every key except the three required ones is optional and set
        let expected: Vec<&str> = raw
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .filter(|k| !["interval", "prune", "sourceRef"].contains(k))
            .collect();
        assert_eq!(set, expected);
        assert!(spec.force() && spec.wait());
        assert_eq!(spec.deletion_policy(), DeletionPolicy::WaitForTermination);
        assert_eq!(spec.source_ref.to_string(), "OCIRepository/other/src");
    }

    #[test]
    fn minimal_spec_defaults() {
        let spec: KustomizationSpec = serde_json::from_value(json!({
            "interval": "5m", "prune": false, "sourceRef": {"kind": "GitRepository", "name": "x"}
        }))
        .unwrap();
        assert!(spec.set_fields().is_empty());
        assert_eq!(spec.retry_interval(), "5m");
        assert_eq!(spec.deletion_policy(), DeletionPolicy::MirrorPrune);
        assert_eq!(spec.source_ref.namespace_or("ns"), "ns");
        assert_eq!(spec.source_ref.to_string(), "GitRepository/x");
    }

    #[test]
    fn missing_required_field_is_an_error() {
        let r: Result<KustomizationSpec, _> =
            serde_json::from_value(json!({"interval": "5m", "prune": true}));
        assert!(r.is_err());
    }

    #[test]
    fn inventory_ids_round_trip() {
        for (id, ns, name, group, kind) in [
            ("_apps__Namespace", "", "apps", "", "Namespace"),
            (
                "default_podinfo__Service",
                "default",
                "podinfo",
                "",
                "Service",
            ),
            (
                "default_podinfo_apps_Deployment",
                "default",
                "podinfo",
                "apps",
                "Deployment",
            ),
            (
                "_system__controller__x_rbac.authorization.k8s.io_ClusterRole",
                "",
                "system:controller:x",
                "rbac.authorization.k8s.io",
                "ClusterRole",
            ),
            (
                "ns_a_b_c_apps_Deployment",
                "ns",
                "a_b_c",
                "apps",
                "Deployment",
            ),
        ] {
            let m = ObjMetadata::parse_id(id).unwrap();
            assert_eq!(
                (
                    m.namespace.as_str(),
                    m.name.as_str(),
                    m.group.as_str(),
                    m.kind.as_str()
                ),
                (ns, name, group, kind),
                "{id}"
            );
            assert_eq!(m.to_id(), id);
        }
        assert!(ObjMetadata::parse_id("nounderscore").is_err());
        assert!(ObjMetadata::parse_id("a_b").is_err());
        assert!(ObjMetadata::parse_id("ns___Kind").is_err());
    }

    #[test]
    fn status_round_trips() {
        let raw = json!({
            "observedGeneration": 3,
            "conditions": [{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded",
                            "message": "Applied revision: main@sha1:abc", "lastTransitionTime": "2026-01-01T00:00:00Z",
                            "observedGeneration": 3}],
            "lastAppliedRevision": "main@sha1:abc",
            "lastAppliedOriginRevision": "o",
            "lastAttemptedRevision": "main@sha1:abc",
            "lastHandledReconcileAt": "2026-01-01T00:00:00.1Z",
            "inventory": {"entries": [{"id": "default_podinfo_apps_Deployment", "v": "v1"}]},
            "history": [{"digest": "sha256:00", "firstReconciled": "2026-01-01T00:00:00Z",
                         "lastReconciled": "2026-01-01T00:00:00Z", "lastReconciledDuration": "2.81s",
                         "lastReconciledStatus": "ReconciliationSucceeded", "totalReconciliations": 1,
                         "metadata": {"revision": "main@sha1:abc"}}]
        });
        let st: KustomizationStatus = serde_json::from_value(raw.clone()).unwrap();
        let back = serde_json::to_value(&st).unwrap();
        // key order of the condition differs (k8s-openapi serializes alphabetically); compare as values
        assert_eq!(back, raw);
    }
}
