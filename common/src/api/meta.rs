//! Shared API building blocks used by both Flux-compatible kinds (the equivalent of
//! Flux's `pkg/apis/meta` plus a few reference types of the Kustomization API).
//!
//! Every type serializes with Flux's JSON field names and leaves unset optional
//! fields out, so an object read from the cluster and written back keeps its shape.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Flux's duration format (Go `time.ParseDuration` subset accepted by the CRDs).
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// Duration format used where hours are not allowed (GitRepository `spec.timeout`).
pub const DURATION_NO_HOURS_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m))+$";

/// Format of `Artifact.digest` (`<algorithm>:<checksum>`).
pub const DIGEST_PATTERN: &str = r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$";

/// Finalizer put on every Flux object by its controller.
pub const FINALIZER: &str = "finalizers.fluxcd.io";

/// Annotation whose value change requests an immediate reconcile.
pub const RECONCILE_REQUEST_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";

/// Reference to an object in the same namespace, by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectReference {
    /// Name of the referenced object.
    pub name: String,
}

/// Reference to an object by name, optionally in another namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespacedObjectReference {
    /// Name of the referenced object.
    pub name: String,
    /// Namespace of the referenced object; when empty, the namespace of the referring object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Typed reference to an object by kind and name, optionally in another namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespacedObjectKindReference {
    /// API version of the referenced object; when empty, the preferred version of the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the referenced object.
    pub kind: String,
    /// Name of the referenced object.
    pub name: String,
    /// Namespace of the referenced object; when empty, the namespace of the referring object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Reference to a key of a Secret in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyReference {
    /// Name of the Secret.
    pub name: String,
    /// Key inside the Secret; each consumer documents its default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Where to find the kubeconfig (or cloud cluster description) of a remote cluster.
/// Exactly one of the two references must be set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "message": "exactly one of spec.kubeConfig.configMapRef or spec.kubeConfig.secretRef must be specified",
        "rule": "has(self.configMapRef) || has(self.secretRef)"
    },
    {
        "message": "exactly one of spec.kubeConfig.configMapRef or spec.kubeConfig.secretRef must be specified",
        "rule": "!has(self.configMapRef) || !has(self.secretRef)"
    }
]))]
pub struct KubeConfigReference {
    /// ConfigMap describing a cloud-provider cluster (keys `provider`, `cluster`,
    /// `address`, `ca.crt`, `audiences`, `serviceAccountName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<LocalObjectReference>,
    /// Secret holding a kubeconfig file; the key defaults to `value` (or `value.yaml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeyReference>,
}

/// Kinds a Kustomization can take its sources from.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SourceKind {
    /// `source.toolkit.fluxcd.io` OCIRepository.
    #[serde(rename = "OCIRepository")]
    OciRepository,
    /// `source.toolkit.fluxcd.io` GitRepository.
    GitRepository,
    /// `source.toolkit.fluxcd.io` Bucket.
    Bucket,
    /// `source.toolkit.fluxcd.io` ExternalArtifact (feature-gated in Flux).
    ExternalArtifact,
}

impl SourceKind {
    /// The kind as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::OciRepository => "OCIRepository",
            SourceKind::GitRepository => "GitRepository",
            SourceKind::Bucket => "Bucket",
            SourceKind::ExternalArtifact => "ExternalArtifact",
        }
    }
}

impl std::fmt::Display for SourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reference to a source object, possibly in another namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrossNamespaceSourceReference {
    /// API version of the source; when empty, the version the controller knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the source.
    pub kind: SourceKind,
    /// Name of the source.
    pub name: String,
    /// Namespace of the source; when empty, the namespace of the referring object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl CrossNamespaceSourceReference {
    /// The namespace the reference points into, given the referrer's namespace.
    pub fn namespace_or<'a>(&'a self, referrer_namespace: &'a str) -> &'a str {
        match self.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => ns,
            _ => referrer_namespace,
        }
    }
}

impl std::fmt::Display for CrossNamespaceSourceReference {
    /// `Kind/name` or `Kind/namespace/name`, as the `flux` CLI prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => write!(f, "{}/{}/{}", self.kind, ns, self.name),
            _ => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// Reference to a dependency, with an optional CEL readiness expression.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DependencyReference {
    /// Name of the dependency.
    pub name: String,
    /// Namespace of the dependency; when empty, the namespace of the referring object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// CEL expression (variables `self` and `dep`) deciding whether the dependency is ready;
    /// it replaces the built-in check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_expr: Option<String>,
}

/// The output of a source reconciliation: a tarball served over HTTP by the source controller.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Path of the file relative to the storage root, e.g. `gitrepository/<ns>/<name>/<sha>.tar.gz`.
    pub path: String,
    /// HTTP address where the file can be downloaded.
    pub url: String,
    /// Revision of the source the file was produced from, e.g. `main@sha1:<hex>`.
    pub revision: String,
    /// Digest of the file as `<algorithm>:<checksum>`.
    #[schemars(regex(pattern = r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$"))]
    pub digest: String,
    /// When the file was last updated.
    pub last_update_time: Time,
    /// Size of the file in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// Upstream information about the source, e.g. OCI annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

impl Artifact {
    /// Whether `revision` is the revision of this artifact. Revisions in Flux's
    /// older formats (`<branch>/<sha>` and a bare `<sha>`) are taken as equal to
    /// the current `<branch>@sha1:<sha>` and `sha1:<sha>` formats.
    pub fn has_revision(&self, revision: &str) -> bool {
        revisions_equal(&self.revision, revision)
    }

    /// Whether the artifact's digest equals `digest`.
    pub fn has_digest(&self, digest: &str) -> bool {
        self.digest == digest
    }
}

/// Compares two source revisions, accepting Flux's legacy formats on either side.
pub fn revisions_equal(a: &str, b: &str) -> bool {
    a == b || normalize_revision(a) == normalize_revision(b)
}

/// Rewrites a legacy revision (`main/<sha>` or bare `<sha>`) into the
/// `main@sha1:<sha>` / `sha1:<sha>` form; other revisions are returned unchanged.
pub fn normalize_revision(revision: &str) -> String {
    fn is_sha1(s: &str) -> bool {
        s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
    }
    if revision.contains('@') || revision.contains(':') {
        return revision.to_string();
    }
    if is_sha1(revision) {
        return format!("sha1:{revision}");
    }
    if let Some((name, sha)) = revision.rsplit_once('/')
        && is_sha1(sha)
    {
        return format!("{name}@sha1:{sha}");
    }
    revision.to_string()
}

/// JSON schema of `metav1.Condition` lists, with the same validation the Kubernetes
/// API machinery (and Flux's CRDs) put on each field.
pub fn conditions_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Conditions describe the latest observations of the object's state.",
        "type": "array",
        "items": {
            "description": "One aspect of the object's current state (metav1.Condition).",
            "type": "object",
            "properties": {
                "lastTransitionTime": {
                    "description": "When the condition last changed status.",
                    "format": "date-time",
                    "type": "string"
                },
                "message": {
                    "description": "Human readable details about the last transition; may be empty.",
                    "maxLength": 32768,
                    "type": "string"
                },
                "observedGeneration": {
                    "description": "The .metadata.generation the condition was computed from.",
                    "format": "int64",
                    "minimum": 0,
                    "type": "integer"
                },
                "reason": {
                    "description": "CamelCase, machine-readable reason of the last transition.",
                    "maxLength": 1024,
                    "minLength": 1,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                    "type": "string"
                },
                "status": {
                    "description": "Status of the condition: True, False or Unknown.",
                    "enum": ["True", "False", "Unknown"],
                    "type": "string"
                },
                "type": {
                    "description": "Type of the condition, CamelCase or foo.example.com/CamelCase.",
                    "maxLength": 316,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
                    "type": "string"
                }
            },
            "required": ["lastTransitionTime", "message", "reason", "status", "type"]
        }
    })
}

/// Default of the `status` object in the CRDs: a fresh object reports `observedGeneration: -1`.
pub fn status_default() -> serde_json::Value {
    json!({ "observedGeneration": -1 })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn legacy_revisions_compare_equal() {
        let sha = "363a6a8fe6a7f13e05d34c163b0ef02a777da20a";
        assert!(revisions_equal(
            &format!("main/{sha}"),
            &format!("main@sha1:{sha}")
        ));
        assert!(revisions_equal(sha, &format!("sha1:{sha}")));
        assert!(!revisions_equal(
            &format!("main/{sha}"),
            &format!("dev@sha1:{sha}")
        ));
        assert!(!revisions_equal("v1.0.0", "v1.0.1"));
        assert_eq!(normalize_revision("not-a-sha"), "not-a-sha");
        assert_eq!(normalize_revision("feature/x"), "feature/x");
    }

    #[test]
    fn artifact_round_trips_without_adding_fields() {
        let raw = json!({
            "path": "gitrepository/ns/name/abc.tar.gz",
            "url": "http://source-controller/gitrepository/ns/name/abc.tar.gz",
            "revision": "main@sha1:abc",
            "digest": "sha256:0123",
            "lastUpdateTime": "2026-01-02T03:04:05Z"
        });
        let a: Artifact = serde_json::from_value(raw.clone()).unwrap();
        assert!(a.has_revision("main@sha1:abc"));
        assert!(a.has_digest("sha256:0123"));
        assert_eq!(serde_json::to_value(&a).unwrap(), raw);
    }
}
