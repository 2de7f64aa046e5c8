//! `fluxcd.controlplane.io/v1` ResourceSetInputProvider (RSIP): exports input sets for
//! ResourceSets, from its own `defaultValues` (`Static`) or from an external system (Git
//! hosting APIs, OCI registries, an HTTP service, ExternalArtifact objects). Schema-compatible
//! with flux-operator v0.59.0 (reference `resourceset.md` §12).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, LabelSelectorRequirement, Time,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::meta::LocalObjectReference;
use super::resourceset::keys::{
    self, INPUT_PROVIDER_DEFAULT_INTERVAL, INPUT_PROVIDER_DEFAULT_TIMEOUT,
    RECONCILE_EVERY_ANNOTATION, RECONCILE_TIMEOUT_ANNOTATION,
};

/// Default of `filter.limit`.
pub const DEFAULT_FILTER_LIMIT: i64 = 100;
/// Largest accepted `filter.limit`.
pub const MAX_FILTER_LIMIT: i64 = 10_000;
/// Default of `schedule[].timeZone`.
pub const DEFAULT_TIME_ZONE: &str = "UTC";
/// Default of `schedule[].window`.
pub const DEFAULT_WINDOW: &str = "0s";

/// Desired state of a ResourceSetInputProvider: where the input sets come from, how they are
/// filtered, and when they are refreshed.
#[allow(clippy::duplicated_attributes)] // kube repeats `category` and `printcolumn`
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "fluxcd.controlplane.io",
    version = "v1",
    kind = "ResourceSetInputProvider",
    plural = "resourcesetinputproviders",
    singular = "resourcesetinputprovider",
    namespaced,
    status = "ResourceSetInputProviderStatus",
    shortname = "rsip",
    category = "all",
    category = "fluxcd",
    category = "fluxcd-sources",
    derive = "PartialEq",
    doc = "ResourceSetInputProvider exports input sets for ResourceSets from static values or an external system.",
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
        "message": "spec.url must be empty when spec.type is 'Static'",
        "rule": "self.type != 'Static' || !has(self.url)"
    },
    {
        "message": "spec.url must be empty when spec.type is 'ExternalArtifact'",
        "rule": "self.type != 'ExternalArtifact' || !has(self.url)"
    },
    {
        "message": "spec.url must not be empty when spec.type is not 'Static' or 'ExternalArtifact'",
        "rule": "self.type == 'Static' || self.type == 'ExternalArtifact' || has(self.url)"
    },
    {
        "message": "spec.url must start with 'http://' or 'https://' when spec.type is a Git provider",
        "rule": "!self.type.startsWith('Git') || self.url.startsWith('http')"
    },
    {
        "message": "spec.url must start with 'http://' or 'https://' when spec.type is an AzureDevOps provider",
        "rule": "!self.type.startsWith('AzureDevOps') || self.url.startsWith('http://') || self.url.startsWith('https://')"
    },
    {
        "message": "spec.url must start with 'https://' when spec.type is a AWSCodeCommit provider",
        "rule": "!self.type.startsWith('AWSCodeCommit') || self.url.startsWith('https://')"
    },
    {
        "message": "spec.url must start with 'oci://' when spec.type is an OCI provider",
        "rule": "!self.type.endsWith('ArtifactTag') || self.url.startsWith('oci')"
    },
    {
        "message": "spec.url must include the repository path after the registry host when spec.type is an OCI provider",
        "rule": "!self.type.endsWith('ArtifactTag') || !self.url.startsWith('oci://') || self.url.substring(6).contains('/')"
    },
    {
        "message": "spec.url must start with 'http://' or 'https://' when spec.type is 'ExternalService'",
        "rule": "self.type != 'ExternalService' || self.url.startsWith('http')"
    },
    {
        "message": "spec.insecure can only be set when spec.type is 'ExternalService' or 'OCIArtifactTag'",
        "rule": "!has(self.insecure) || !self.insecure || self.type == 'ExternalService' || self.type == 'OCIArtifactTag'"
    },
    {
        "message": "spec.url must use 'https://' unless spec.insecure is true",
        "rule": "self.type != 'ExternalService' || !self.url.startsWith('http://') || (has(self.insecure) && self.insecure)"
    },
    {
        "message": "cannot specify spec.serviceAccountName when spec.type is not one of AzureDevOps*, AWSCodeCommit*, *ArtifactTag or ExternalArtifact",
        "rule": "!has(self.serviceAccountName) || self.type.startsWith('AzureDevOps') || self.type.startsWith('AWSCodeCommit') || self.type.endsWith('ArtifactTag') || self.type == 'ExternalArtifact'"
    },
    {
        "message": "cannot specify spec.certSecretRef when spec.type is one of Static, ExternalArtifact, AzureDevOps*, AWSCodeCommit*, ACRArtifactTag, ECRArtifactTag or GARArtifactTag",
        "rule": "!has(self.certSecretRef) || !(self.type == 'Static' || self.type == 'ExternalArtifact' || self.type.startsWith('AzureDevOps') || self.type.startsWith('AWSCodeCommit') || (self.type.endsWith('ArtifactTag') && self.type != 'OCIArtifactTag'))"
    },
    {
        "message": "cannot specify spec.secretRef when spec.type is one of Static, ExternalArtifact, AWSCodeCommit*, ACRArtifactTag, ECRArtifactTag or GARArtifactTag",
        "rule": "!has(self.secretRef) || !(self.type == 'Static' || self.type == 'ExternalArtifact' || self.type.startsWith('AWSCodeCommit') || (self.type.endsWith('ArtifactTag') && self.type != 'OCIArtifactTag'))"
    },
    {
        "message": "spec.selectors must be set when spec.type is 'ExternalArtifact'",
        "rule": "self.type != 'ExternalArtifact' || (has(self.selectors) && size(self.selectors) > 0)"
    },
    {
        "message": "spec.selectors must not be set when spec.type is not 'ExternalArtifact'",
        "rule": "self.type == 'ExternalArtifact' || !has(self.selectors)"
    }
]))]
pub struct ResourceSetInputProviderSpec {
    /// Where the input sets come from.
    #[serde(rename = "type")]
    pub provider_type: InputProviderType,

    /// Address of the Git repository, OCI repository or HTTP service; none for `Static` and
    /// `ExternalArtifact`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^((http|https|oci)://.*){0,1}$"))]
    pub url: Option<String>,

    /// ServiceAccount for cloud workload identity, registry pull secrets or (ExternalArtifact)
    /// impersonation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// Secret with the credentials of the external system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,

    /// Secret with `ca.crt` and/or `tls.crt` and `tls.key` for the connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_secret_ref: Option<LocalObjectReference>,

    /// Allow plain HTTP (ExternalService and OCIArtifactTag only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure: Option<bool>,

    /// Values added to every exported input set when missing (for `Static`: the set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::resourceset::schema::free_form_map_schema")]
    pub default_values: Option<Map<String, Value>>,

    /// Which results of the external system are exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<InputProviderFilter>,

    /// Results whose exported values are frozen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip: Option<InputProviderSkip>,

    /// When the provider may reconcile; any time when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Vec<Schedule>>,

    /// ExternalArtifact objects to export (ExternalArtifact only, required there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selectors: Option<Vec<InputSelector>>,
}

/// Kinds of input providers.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum InputProviderType {
    /// The `defaultValues` themselves, as one input set.
    Static,
    /// GitHub branches.
    GitHubBranch,
    /// GitHub tags.
    GitHubTag,
    /// GitHub pull requests.
    GitHubPullRequest,
    /// GitLab branches.
    GitLabBranch,
    /// GitLab tags.
    GitLabTag,
    /// GitLab merge requests.
    GitLabMergeRequest,
    /// GitLab environments.
    GitLabEnvironment,
    /// Azure DevOps branches.
    AzureDevOpsBranch,
    /// Azure DevOps tags.
    AzureDevOpsTag,
    /// Azure DevOps pull requests.
    AzureDevOpsPullRequest,
    /// AWS CodeCommit branches.
    #[serde(rename = "AWSCodeCommitBranch")]
    AwsCodeCommitBranch,
    /// AWS CodeCommit tags.
    #[serde(rename = "AWSCodeCommitTag")]
    AwsCodeCommitTag,
    /// AWS CodeCommit pull requests.
    #[serde(rename = "AWSCodeCommitPullRequest")]
    AwsCodeCommitPullRequest,
    /// Gitea (and Forgejo) branches.
    GiteaBranch,
    /// Gitea (and Forgejo) tags.
    GiteaTag,
    /// Gitea (and Forgejo) pull requests.
    GiteaPullRequest,
    /// Tags of any OCI repository.
    #[serde(rename = "OCIArtifactTag")]
    OciArtifactTag,
    /// Tags of an Azure Container Registry repository.
    #[serde(rename = "ACRArtifactTag")]
    AcrArtifactTag,
    /// Tags of an Amazon ECR repository.
    #[serde(rename = "ECRArtifactTag")]
    EcrArtifactTag,
    /// Tags of a Google Artifact Registry repository.
    #[serde(rename = "GARArtifactTag")]
    GarArtifactTag,
    /// The `inputs` of a JSON document served over HTTP(S).
    ExternalService,
    /// `source.toolkit.fluxcd.io` ExternalArtifact objects chosen by `selectors`.
    ExternalArtifact,
}

impl InputProviderType {
    /// Every type, in the CRD's order.
    pub const ALL: [InputProviderType; 23] = [
        Self::Static,
        Self::GitHubBranch,
        Self::GitHubTag,
        Self::GitHubPullRequest,
        Self::GitLabBranch,
        Self::GitLabTag,
        Self::GitLabMergeRequest,
        Self::GitLabEnvironment,
        Self::AzureDevOpsBranch,
        Self::AzureDevOpsTag,
        Self::AzureDevOpsPullRequest,
        Self::AwsCodeCommitBranch,
        Self::AwsCodeCommitTag,
        Self::AwsCodeCommitPullRequest,
        Self::GiteaBranch,
        Self::GiteaTag,
        Self::GiteaPullRequest,
        Self::OciArtifactTag,
        Self::AcrArtifactTag,
        Self::EcrArtifactTag,
        Self::GarArtifactTag,
        Self::ExternalService,
        Self::ExternalArtifact,
    ];

    /// The value as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Static => "Static",
            Self::GitHubBranch => "GitHubBranch",
            Self::GitHubTag => "GitHubTag",
            Self::GitHubPullRequest => "GitHubPullRequest",
            Self::GitLabBranch => "GitLabBranch",
            Self::GitLabTag => "GitLabTag",
            Self::GitLabMergeRequest => "GitLabMergeRequest",
            Self::GitLabEnvironment => "GitLabEnvironment",
            Self::AzureDevOpsBranch => "AzureDevOpsBranch",
            Self::AzureDevOpsTag => "AzureDevOpsTag",
            Self::AzureDevOpsPullRequest => "AzureDevOpsPullRequest",
            Self::AwsCodeCommitBranch => "AWSCodeCommitBranch",
            Self::AwsCodeCommitTag => "AWSCodeCommitTag",
            Self::AwsCodeCommitPullRequest => "AWSCodeCommitPullRequest",
            Self::GiteaBranch => "GiteaBranch",
            Self::GiteaTag => "GiteaTag",
            Self::GiteaPullRequest => "GiteaPullRequest",
            Self::OciArtifactTag => "OCIArtifactTag",
            Self::AcrArtifactTag => "ACRArtifactTag",
            Self::EcrArtifactTag => "ECRArtifactTag",
            Self::GarArtifactTag => "GARArtifactTag",
            Self::ExternalService => "ExternalService",
            Self::ExternalArtifact => "ExternalArtifact",
        }
    }

    /// Branches of a Git hosting service.
    pub fn is_branch(self) -> bool {
        self.as_str().ends_with("Branch")
    }

    /// Tags of a Git hosting service (not OCI tags).
    pub fn is_git_tag(self) -> bool {
        self.as_str().ends_with("Tag") && !self.is_artifact_tag()
    }

    /// Pull (or merge) requests of a Git hosting service.
    pub fn is_change_request(self) -> bool {
        self.as_str().ends_with("PullRequest") || self == Self::GitLabMergeRequest
    }

    /// Any type served by a Git hosting API.
    pub fn is_git(self) -> bool {
        self.is_branch()
            || self.is_git_tag()
            || self.is_change_request()
            || self == Self::GitLabEnvironment
    }

    /// Tags of an OCI repository (generic or cloud registry).
    pub fn is_artifact_tag(self) -> bool {
        self.as_str().ends_with("ArtifactTag")
    }

    /// Needs `spec.url`: every type but `Static` and `ExternalArtifact`.
    pub fn needs_url(self) -> bool {
        !matches!(self, Self::Static | Self::ExternalArtifact)
    }
}

impl std::fmt::Display for InputProviderType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.filter`: which results are exported.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InputProviderFilter {
    /// Regular expression branches must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_branch: Option<String>,
    /// Regular expression branches must not match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_branch: Option<String>,
    /// Regular expression tags must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_tag: Option<String>,
    /// Regular expression tags must not match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_tag: Option<String>,
    /// Regular expression GitLab environment names must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_environment: Option<String>,
    /// Regular expression GitLab environment names must not match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_environment: Option<String>,
    /// Labels a change request must all carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// Most results exported; the API server fills in 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::resourceset::schema::filter_limit_schema")]
    pub limit: Option<i64>,
    /// SemVer range tags must satisfy (tags only); matching tags are sorted newest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<String>,
}

impl InputProviderFilter {
    /// The effective limit: 100 when unset or not positive (as the controller reads it), at
    /// most 10000 (the CRD's bound, kept for objects stored without it).
    pub fn limit(&self) -> usize {
        let limit = match self.limit {
            Some(n) if n > 0 => n.min(MAX_FILTER_LIMIT),
            _ => DEFAULT_FILTER_LIMIT,
        };
        usize::try_from(limit).unwrap_or(DEFAULT_FILTER_LIMIT as usize)
    }
}

/// `spec.skip`: change requests whose exported values stay as they were.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InputProviderSkip {
    /// A result carrying any of these labels (or lacking a `!label`) is skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
}

/// One reconcile window: a cron expression, its time zone and how long it stays open.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// Cron expression (five fields or a `@` descriptor).
    pub cron: String,
    /// IANA time zone of the expression; the API server fills in `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "UTC"))]
    pub time_zone: Option<String>,
    /// How long after each trigger reconciles may start; `0s` (the API server's default)
    /// means at the trigger only. Non-zero windows must be at least twice the timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"),
        extend("default" = "0s")
    )]
    pub window: Option<String>,
}

impl Schedule {
    /// The effective time zone (`UTC` when unset).
    pub fn time_zone(&self) -> &str {
        self.time_zone.as_deref().unwrap_or(DEFAULT_TIME_ZONE)
    }

    /// The effective window (`0s` when unset).
    pub fn window(&self) -> &str {
        self.window.as_deref().unwrap_or(DEFAULT_WINDOW)
    }
}

/// The next schedule window (`status.nextSchedule`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NextSchedule {
    /// Cron expression of the schedule.
    pub cron: String,
    /// Time zone of the schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "UTC"))]
    pub time_zone: Option<String>,
    /// Window of the schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"),
        extend("default" = "0s")
    )]
    pub window: Option<String>,
    /// When the window opens.
    pub when: Time,
}

/// ExternalArtifact objects to export: by label selector, or by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend(
    "x-kubernetes-map-type" = "atomic",
    "x-kubernetes-validations" = [{
        "message": "name is mutually exclusive with matchLabels and matchExpressions",
        "rule": "!has(self.name) || (!has(self.matchLabels) && !has(self.matchExpressions))"
    }]
))]
pub struct InputSelector {
    /// Label selector requirements, ANDed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::resourceset::schema::label_selector_requirements_schema")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
    /// Labels that must all be present with these values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Name of one object (excludes the label fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace to look in: empty for the provider's own, `*` for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl InputSelector {
    /// The label part as a `metav1.LabelSelector`.
    pub fn label_selector(&self) -> LabelSelector {
        LabelSelector {
            match_expressions: self.match_expressions.clone(),
            match_labels: self.match_labels.clone(),
        }
    }
}

/// Observed state of a ResourceSetInputProvider.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSetInputProviderStatus {
    /// Ready, Reconciling and Stalled conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::meta::conditions_schema")]
    pub conditions: Option<Vec<Condition>>,
    /// The exported input sets, each with an `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::resourceset::schema::input_sets_schema")]
    pub exported_inputs: Option<Vec<Map<String, Value>>>,
    /// `sha256:<hex>` of the exported input sets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exported_revision: Option<String>,
    /// Last handled value of the `reconcile.fluxcd.io/forceAt` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_force_at: Option<String>,
    /// Last handled value of the `reconcile.fluxcd.io/requestedAt` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// The next schedule window, when the provider waits for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule: Option<NextSchedule>,
}

impl ResourceSetInputProviderSpec {
    /// The default values (none when unset).
    pub fn default_values(&self) -> Map<String, Value> {
        self.default_values.clone().unwrap_or_default()
    }

    /// The schedules (none when unset: any time).
    pub fn schedules(&self) -> &[Schedule] {
        self.schedule.as_deref().unwrap_or_default()
    }

    /// The selectors (none when unset).
    pub fn selectors(&self) -> &[InputSelector] {
        self.selectors.as_deref().unwrap_or_default()
    }

    /// The effective filter limit (100 when unset).
    pub fn limit(&self) -> usize {
        self.filter
            .as_ref()
            .map(InputProviderFilter::limit)
            .unwrap_or(DEFAULT_FILTER_LIMIT as usize)
    }

    /// Whether plain HTTP is allowed.
    pub fn is_insecure(&self) -> bool {
        self.insecure.unwrap_or(false)
    }
}

impl ResourceSetInputProvider {
    /// Whether the `fluxcd.controlplane.io/reconcile` annotation is `disabled` (any case).
    pub fn is_disabled(&self) -> bool {
        keys::is_disabled(self.metadata.annotations.as_ref())
    }

    /// The `fluxcd.controlplane.io/reconcileEvery` value, or its default (`10m`).
    pub fn reconcile_every(&self) -> &str {
        keys::annotation(
            self.metadata.annotations.as_ref(),
            RECONCILE_EVERY_ANNOTATION,
        )
        .unwrap_or(INPUT_PROVIDER_DEFAULT_INTERVAL)
    }

    /// The `fluxcd.controlplane.io/reconcileTimeout` value, or its default (`2m`).
    pub fn reconcile_timeout(&self) -> &str {
        keys::annotation(
            self.metadata.annotations.as_ref(),
            RECONCILE_TIMEOUT_ANNOTATION,
        )
        .unwrap_or(INPUT_PROVIDER_DEFAULT_TIMEOUT)
    }

    /// The exported input sets (none before the first export).
    pub fn exported_inputs(&self) -> &[Map<String, Value>] {
        self.status
            .as_ref()
            .and_then(|s| s.exported_inputs.as_deref())
            .unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn type_names_round_trip_through_serde() {
        for t in InputProviderType::ALL {
            let v = serde_json::to_value(t).unwrap();
            assert_eq!(v, json!(t.as_str()));
            let back: InputProviderType = serde_json::from_value(v).unwrap();
            assert_eq!(back, t);
        }
        assert!(serde_json::from_value::<InputProviderType>(json!("GitHub")).is_err());
    }

    #[test]
    fn type_families() {
        use InputProviderType as T;
        let git: Vec<_> = T::ALL.into_iter().filter(|t| t.is_git()).collect();
        assert_eq!(git.len(), 16);
        assert!(T::GitLabMergeRequest.is_change_request());
        assert!(T::GiteaTag.is_git_tag() && !T::OciArtifactTag.is_git_tag());
        assert!(T::EcrArtifactTag.is_artifact_tag() && !T::EcrArtifactTag.is_git());
        assert!(!T::Static.needs_url() && !T::ExternalArtifact.needs_url());
        assert!(T::ExternalService.needs_url() && !T::ExternalService.is_git());
    }

    #[test]
    fn full_spec_round_trips() {
        let raw = json!({
            "type": "GitHubPullRequest",
            "url": "https://github.com/org/repo",
            "secretRef": {"name": "gh"},
            "certSecretRef": {"name": "ca"},
            "defaultValues": {"env": "staging", "replicas": 2, "nested": {"a": [1, 2.5, null, true]}},
            "filter": {"labels": ["deploy"], "limit": 5, "includeBranch": "^feat-", "excludeBranch": "wip",
                       "includeTag": "v.*", "excludeTag": "rc", "includeEnvironment": "e", "excludeEnvironment": "x",
                       "semver": ">=1.0.0"},
            "skip": {"labels": ["hold", "!ok"]},
            "schedule": [{"cron": "0 8 * * 1-5", "timeZone": "Europe/Paris", "window": "4h"}]
        });
        let spec: ResourceSetInputProviderSpec = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(serde_json::to_value(&spec).unwrap(), raw);
        assert_eq!(spec.provider_type, InputProviderType::GitHubPullRequest);
        assert_eq!(spec.limit(), 5);
        assert_eq!(spec.schedules()[0].time_zone(), "Europe/Paris");
    }

    #[test]
    fn defaults_apply_when_unset() {
        let spec: ResourceSetInputProviderSpec =
            serde_json::from_value(json!({"type": "Static"})).unwrap();
        assert_eq!(spec.limit(), 100);
        assert!(spec.default_values().is_empty() && !spec.is_insecure());
        let s: Schedule = serde_json::from_value(json!({"cron": "@daily"})).unwrap();
        assert_eq!((s.time_zone(), s.window()), ("UTC", "0s"));
        let huge = InputProviderFilter {
            limit: Some(1 << 40),
            ..Default::default()
        };
        assert_eq!(huge.limit(), 10_000);
        let negative = InputProviderFilter {
            limit: Some(-3),
            ..Default::default()
        };
        assert_eq!(negative.limit(), 100);
    }

    #[test]
    fn selectors_split_into_label_selector() {
        let sel: InputSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "x"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}],
            "namespace": "*"
        }))
        .unwrap();
        let ls = sel.label_selector();
        assert_eq!(ls.match_labels.unwrap()["app"], "x");
        assert_eq!(ls.match_expressions.unwrap()[0].key, "tier");
        assert_eq!(sel.name, None);
    }

    #[test]
    fn missing_type_is_an_error() {
        let r: Result<ResourceSetInputProviderSpec, _> =
            serde_json::from_value(json!({"url": "https://x"}));
        assert!(r.is_err());
    }
}
