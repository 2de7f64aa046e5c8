//! `source.toolkit.fluxcd.io/v1` OCIRepository.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::meta::{Artifact, LocalObjectReference};

/// Kind name of [`OciRepository`].
pub const OCI_REPOSITORY_KIND: &str = "OCIRepository";
/// Tag pulled when `spec.ref` selects nothing.
pub const DEFAULT_OCI_TAG: &str = "latest";
/// Default of `spec.timeout`.
pub const DEFAULT_OCI_TIMEOUT: &str = "60s";

/// Desired state of an OCIRepository: which artifact, which reference, how often, and how to
/// authenticate, reach and verify the registry.
#[allow(clippy::duplicated_attributes)] // kube repeats `category` and `printcolumn`
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "source.toolkit.fluxcd.io",
    version = "v1",
    kind = "OCIRepository",
    root = "OciRepository",
    plural = "ocirepositories",
    singular = "ocirepository",
    namespaced,
    status = "OciRepositoryStatus",
    shortname = "ocirepo",
    category = "all",
    category = "fluxcd",
    category = "fluxcd-sources",
    derive = "PartialEq",
    doc = "OCIRepository produces an artifact (tarball) from an OCI artifact in a container registry.",
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OciRepositorySpec {
    /// Address of the repository: `oci://<host[:port]>/<path>`, without a tag.
    #[schemars(regex(pattern = r"^oci://.*$"))]
    pub url: String,

    /// The reference to pull; the `latest` tag when unset. Precedence: digest, semver, tag.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<OciRepositoryRef>,

    /// Which layer of the artifact to use, and how; the first layer, extracted, when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_selector: Option<OciLayerSelector>,

    /// Cloud provider of the registry credentials; the API server fills in `generic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "generic"))]
    pub provider: Option<OciProvider>,

    /// Image pull Secret (`kubernetes.io/dockerconfigjson` or `kubernetes.io/dockercfg`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,

    /// Signature verification of the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<OciRepositoryVerification>,

    /// ServiceAccount whose `imagePullSecrets` are used too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// Secret with `ca.crt` and/or `tls.crt` and `tls.key` for the registry connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_secret_ref: Option<LocalObjectReference>,

    /// Secret with the proxy to use (`address`, `username`, `password`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_secret_ref: Option<LocalObjectReference>,

    /// How often the registry is checked for a new artifact (approximate, jittered).
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub interval: String,

    /// Time limit of registry operations; the API server fills in `60s` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m))+$"), extend("default" = "60s"))]
    pub timeout: Option<String>,

    /// Exclusion patterns in `.sourceignore` (gitignore) syntax, added to the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<String>,

    /// Allow plain HTTP, and skip TLS verification when there is no `certSecretRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure: Option<bool>,

    /// Stops reconciliation while true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
}

/// The reference of an OCI artifact.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciRepositoryRef {
    /// Manifest digest (`sha256:<hex>`); wins over every other field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// SemVer constraint; the highest matching tag is pulled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<String>,
    /// Regular expression the tags must match before the semver constraint is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver_filter: Option<String>,
    /// Tag to pull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// Which layer to use.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciLayerSelector {
    /// Media type of the layer; the first layer when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// `extract` (the default) untars the layer; `copy` stores it as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<OciLayerOperation>,
}

impl OciLayerSelector {
    /// The effective operation (`extract` when unset).
    pub fn operation(&self) -> OciLayerOperation {
        self.operation.unwrap_or(OciLayerOperation::Extract)
    }
}

/// What to do with the selected layer.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OciLayerOperation {
    /// Untar the gzip-compressed layer and re-pack its contents.
    Extract,
    /// Store the layer blob unchanged.
    Copy,
}

/// Credential providers of an OCIRepository.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OciProvider {
    /// Credentials from `secretRef` and the ServiceAccount (or none).
    #[default]
    Generic,
    /// Amazon ECR.
    Aws,
    /// Azure Container Registry.
    Azure,
    /// Google Artifact Registry.
    Gcp,
}

impl OciProvider {
    /// The value as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            OciProvider::Generic => "generic",
            OciProvider::Aws => "aws",
            OciProvider::Azure => "azure",
            OciProvider::Gcp => "gcp",
        }
    }
}

/// Signature verification settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciRepositoryVerification {
    /// `cosign` or `notation`; the API server fills in `cosign`.
    #[schemars(extend("default" = "cosign"))]
    pub provider: OciVerificationProvider,
    /// Secret with the trusted keys (cosign: every `*.pub` key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// Keyless identities (issuer and subject regular expressions); any may match.
    #[serde(
        default,
        rename = "matchOIDCIdentity",
        skip_serializing_if = "Option::is_none"
    )]
    pub match_oidc_identity: Option<Vec<OidcIdentityMatch>>,
    /// Secret with a self-hosted Sigstore trust root (`trusted_root.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_root_secret_ref: Option<LocalObjectReference>,
}

/// Signature verification providers.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OciVerificationProvider {
    /// Sigstore cosign.
    #[default]
    Cosign,
    /// Notary Project notation.
    Notation,
}

/// An OIDC identity a keyless signature must carry.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OidcIdentityMatch {
    /// Regular expression matching the OIDC issuer.
    pub issuer: String,
    /// Regular expression matching the identity subject.
    pub subject: String,
}

/// Observed state of an OCIRepository.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciRepositoryStatus {
    /// Generation of the object last reconciled (`-1` before the first reconcile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Reconciling, Stalled, FetchFailed, ArtifactInStorage, SourceVerified, ... conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::meta::conditions_schema")]
    pub conditions: Option<Vec<Condition>>,
    /// Address of the latest artifact (`…/latest.tar.gz`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The artifact of the last successful reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
    /// `spec.ignore` as used for the current artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_ignore: Option<String>,
    /// `spec.layerSelector` as used for the current artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_layer_selector: Option<OciLayerSelector>,
    /// Last handled value of the `reconcile.fluxcd.io/requestedAt` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

impl OciRepositorySpec {
    /// Whether reconciliation is suspended.
    pub fn is_suspended(&self) -> bool {
        self.suspend.unwrap_or(false)
    }

    /// The effective timeout string (`60s` when unset).
    pub fn timeout(&self) -> &str {
        self.timeout.as_deref().unwrap_or(DEFAULT_OCI_TIMEOUT)
    }

    /// The effective provider (`generic` when unset).
    pub fn provider(&self) -> OciProvider {
        self.provider.unwrap_or_default()
    }

    /// Whether plain HTTP (and, without `certSecretRef`, unverified TLS) is allowed.
    pub fn is_insecure(&self) -> bool {
        self.insecure.unwrap_or(false)
    }

    /// The effective layer operation.
    pub fn layer_operation(&self) -> OciLayerOperation {
        self.layer_selector
            .as_ref()
            .map(OciLayerSelector::operation)
            .unwrap_or(OciLayerOperation::Extract)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn full_spec_round_trips() {
        let raw = json!({
            "url": "oci://ghcr.io/org/manifests",
            "ref": {"digest": "sha256:abc", "semver": ">=1.0.0", "semverFilter": ".*-rc.*", "tag": "v1"},
            "layerSelector": {"mediaType": "application/vnd.cncf.flux.content.v1.tar+gzip", "operation": "copy"},
            "provider": "aws",
            "secretRef": {"name": "pull"},
            "verify": {"provider": "cosign", "secretRef": {"name": "keys"},
                       "matchOIDCIdentity": [{"issuer": "^https://x$", "subject": ".*"}],
                       "trustedRootSecretRef": {"name": "root"}},
            "serviceAccountName": "sa",
            "certSecretRef": {"name": "tls"},
            "proxySecretRef": {"name": "proxy"},
            "interval": "5m",
            "timeout": "30s",
            "ignore": "*.md\n",
            "insecure": true,
            "suspend": false
        });
        let spec: OciRepositorySpec = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(serde_json::to_value(&spec).unwrap(), raw);
        assert_eq!(spec.provider(), OciProvider::Aws);
        assert_eq!(spec.layer_operation(), OciLayerOperation::Copy);
        assert!(spec.is_insecure());
        assert_eq!(spec.timeout(), "30s");
    }

    #[test]
    fn minimal_spec_defaults() {
        let spec: OciRepositorySpec =
            serde_json::from_value(json!({"url": "oci://r/x", "interval": "1m"})).unwrap();
        assert_eq!(spec.provider(), OciProvider::Generic);
        assert_eq!(spec.layer_operation(), OciLayerOperation::Extract);
        assert_eq!(spec.timeout(), "60s");
        assert!(!spec.is_suspended() && !spec.is_insecure());
    }

    #[test]
    fn unknown_operation_is_an_error_not_a_panic() {
        let r: Result<OciLayerSelector, _> = serde_json::from_value(json!({"operation": "move"}));
        assert!(r.is_err());
    }
}
