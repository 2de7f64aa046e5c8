//! `source.toolkit.fluxcd.io/v1` GitRepository.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::meta::{Artifact, LocalObjectReference};

/// API group of the source kinds.
pub const SOURCE_GROUP: &str = "source.toolkit.fluxcd.io";
/// Kind name of [`GitRepository`].
pub const GIT_REPOSITORY_KIND: &str = "GitRepository";
/// Branch checked out when `spec.ref` selects nothing.
pub const DEFAULT_BRANCH: &str = "master";
/// Default of `spec.timeout`.
pub const DEFAULT_GIT_TIMEOUT: &str = "60s";

/// Desired state of a GitRepository: which repository, which reference, how often,
/// and how to authenticate and verify it.
#[allow(clippy::duplicated_attributes)] // kube repeats `category` and `printcolumn`
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "source.toolkit.fluxcd.io",
    version = "v1",
    kind = "GitRepository",
    plural = "gitrepositories",
    singular = "gitrepository",
    namespaced,
    status = "GitRepositoryStatus",
    shortname = "gitrepo",
    category = "all",
    category = "fluxcd",
    category = "fluxcd-sources",
    derive = "PartialEq",
    doc = "GitRepository produces an artifact (tarball) from a Git repository reference.",
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url"),
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
#[schemars(extend("x-kubernetes-validations" = [{
    "message": "serviceAccountName can only be set when provider is 'azure' or 'aws'",
    "rule": "!has(self.serviceAccountName) || (has(self.provider) && (self.provider == 'azure' || self.provider == 'aws'))"
}]))]
pub struct GitRepositorySpec {
    /// Repository address; `http://`, `https://` or `ssh://` (scp-like addresses are not accepted).
    #[schemars(regex(pattern = r"^(http|https|ssh)://.*$"))]
    pub url: String,

    /// Secret with the credentials: `username`/`password` or `bearerToken` for HTTPS,
    /// `identity`/`known_hosts` for SSH, optional TLS material and GitHub App keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,

    /// Credential provider; empty means `generic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<GitProvider>,

    /// ServiceAccount used for workload identity (providers `azure` and `aws` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// How often the repository is checked for updates (approximate, jittered).
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub interval: String,

    /// Time limit of Git operations; the API server fills in `60s` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m))+$"), extend("default" = "60s"))]
    pub timeout: Option<String>,

    /// The reference to check out; the `master` branch when unset.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<GitRepositoryRef>,

    /// Signature verification of the checked-out commit and/or tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<GitRepositoryVerification>,

    /// Secret with the proxy to use (`address`, `username`, `password`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_secret_ref: Option<LocalObjectReference>,

    /// Exclusion patterns in `.sourceignore` (gitignore) syntax; replaces the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<String>,

    /// Stops reconciliation while true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// Initialise all submodules with their default settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recurse_submodules: Option<bool>,

    /// Other GitRepositories whose artifact contents are copied into this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<GitRepositoryInclude>>,

    /// Directories to check out; only these end up in the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_checkout: Option<Vec<String>>,
}

/// Credential providers of a GitRepository.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GitProvider {
    /// Credentials come from `secretRef` (or none).
    Generic,
    /// AWS CodeCommit workload identity.
    Aws,
    /// Azure DevOps workload identity.
    Azure,
    /// GitHub App credentials from `secretRef`.
    Github,
}

impl GitProvider {
    /// The value as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            GitProvider::Generic => "generic",
            GitProvider::Aws => "aws",
            GitProvider::Azure => "azure",
            GitProvider::Github => "github",
        }
    }
}

/// Git reference to resolve. Precedence: commit, name, tag, semver, branch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitRepositoryRef {
    /// Branch to follow; `master` when no other field is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Tag to check out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// SemVer constraint; the highest matching tag is checked out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<String>,
    /// Full reference name, e.g. `refs/heads/main` or `refs/pull/420/head`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Commit SHA; wins over every other field. With `branch`, that branch is cloned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// Which Git objects must carry a trusted signature.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum GitVerificationMode {
    /// Legacy spelling of `HEAD`.
    #[serde(rename = "head")]
    LowercaseHead,
    /// The commit HEAD points to.
    #[serde(rename = "HEAD")]
    Head,
    /// The tag being checked out.
    #[serde(rename = "Tag")]
    Tag,
    /// Both the tag and the commit it points to.
    #[serde(rename = "TagAndHEAD")]
    TagAndHead,
}

impl GitVerificationMode {
    /// The value as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            GitVerificationMode::LowercaseHead => "head",
            GitVerificationMode::Head => "HEAD",
            GitVerificationMode::Tag => "Tag",
            GitVerificationMode::TagAndHead => "TagAndHEAD",
        }
    }

    /// `head` is an alias of `HEAD`; this maps it to `HEAD`.
    pub fn normalized(self) -> Self {
        match self {
            GitVerificationMode::LowercaseHead => GitVerificationMode::Head,
            other => other,
        }
    }
}

/// Signature verification settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitRepositoryVerification {
    /// What to verify; the API server fills in `HEAD` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "HEAD"))]
    pub mode: Option<GitVerificationMode>,
    /// Secret with trusted public keys: PGP under `*.asc` keys, SSH under `*.sshpub` keys.
    pub secret_ref: LocalObjectReference,
}

impl GitRepositoryVerification {
    /// The effective mode (`HEAD` when unset, `head` mapped to `HEAD`).
    pub fn effective_mode(&self) -> GitVerificationMode {
        self.mode
            .map(GitVerificationMode::normalized)
            .unwrap_or(GitVerificationMode::Head)
    }
}

/// Another GitRepository whose artifact (or part of it) is copied into this one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitRepositoryInclude {
    /// The GitRepository to include (same namespace).
    pub repository: LocalObjectReference,
    /// Directory of the included artifact to copy; the root when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_path: Option<String>,
    /// Destination directory; the included repository's name when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_path: Option<String>,
}

impl GitRepositoryInclude {
    /// Source directory inside the included artifact (empty means the root).
    pub fn from_path(&self) -> &str {
        self.from_path.as_deref().unwrap_or("")
    }

    /// Destination directory inside this artifact.
    pub fn to_path(&self) -> &str {
        match self.to_path.as_deref() {
            Some(p) if !p.is_empty() => p,
            _ => &self.repository.name,
        }
    }
}

/// Observed state of a GitRepository.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitRepositoryStatus {
    /// Generation of the object last reconciled (`-1` before the first reconcile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Reconciling, Stalled, FetchFailed, ArtifactInStorage, ... conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::meta::conditions_schema")]
    pub conditions: Option<Vec<Condition>>,
    /// The artifact of the last successful reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
    /// Artifacts of `spec.include`, in the same order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_artifacts: Option<Vec<Artifact>>,
    /// `spec.ignore` as used for the current artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_ignore: Option<String>,
    /// `spec.recurseSubmodules` as used for the current artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_recurse_submodules: Option<bool>,
    /// `spec.include` as used for the current artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_include: Option<Vec<GitRepositoryInclude>>,
    /// `spec.sparseCheckout` as used for the current artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_sparse_checkout: Option<Vec<String>>,
    /// The verification mode last applied (`HEAD`, `Tag` or `TagAndHEAD`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_verification_mode: Option<String>,
    /// Last handled value of the `reconcile.fluxcd.io/requestedAt` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

impl GitRepositorySpec {
    /// JSON names of the optional spec fields that are set, in schema order.
    /// Controllers use it to warn about fields they do not act on.
    pub fn set_fields(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let mut add = |set: bool, name: &'static str| {
            if set {
                out.push(name);
            }
        };
        add(self.secret_ref.is_some(), "secretRef");
        add(self.provider.is_some(), "provider");
        add(self.service_account_name.is_some(), "serviceAccountName");
        add(self.timeout.is_some(), "timeout");
        add(self.reference.is_some(), "ref");
        add(self.verify.is_some(), "verify");
        add(self.proxy_secret_ref.is_some(), "proxySecretRef");
        add(self.ignore.is_some(), "ignore");
        add(self.suspend.is_some(), "suspend");
        add(self.recurse_submodules.is_some(), "recurseSubmodules");
        add(self.include.is_some(), "include");
        add(self.sparse_checkout.is_some(), "sparseCheckout");
        out
    }

    /// Whether reconciliation is suspended.
    pub fn is_suspended(&self) -> bool {
        self.suspend.unwrap_or(false)
    }

    /// The effective timeout string (`60s` when unset).
    pub fn timeout(&self) -> &str {
        self.timeout.as_deref().unwrap_or(DEFAULT_GIT_TIMEOUT)
    }

    /// The effective provider (`generic` when unset).
    pub fn provider(&self) -> GitProvider {
        self.provider.unwrap_or(GitProvider::Generic)
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
            "url": "ssh://git@example.com/org/repo.git",
            "secretRef": {"name": "auth"},
            "provider": "azure",
            "serviceAccountName": "sa",
            "interval": "1m",
            "timeout": "30s",
            "ref": {"branch": "main", "commit": "abc"},
            "verify": {"mode": "TagAndHEAD", "secretRef": {"name": "keys"}},
            "proxySecretRef": {"name": "proxy"},
            "ignore": "/*\n!/deploy\n",
            "suspend": false,
            "recurseSubmodules": true,
            "include": [{"repository": {"name": "other"}, "fromPath": "a", "toPath": "b"}],
            "sparseCheckout": ["deploy"]
        });
        let spec: GitRepositorySpec = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(serde_json::to_value(&spec).unwrap(), raw);
        assert_eq!(spec.set_fields().len(), 12);
        assert_eq!(spec.provider(), GitProvider::Azure);
        assert_eq!(spec.timeout(), "30s");
        assert_eq!(
            spec.verify.as_ref().unwrap().effective_mode(),
            GitVerificationMode::TagAndHead
        );
    }

    #[test]
    fn minimal_spec_has_no_set_fields_and_defaults() {
        let spec: GitRepositorySpec =
            serde_json::from_value(json!({"url": "https://x/y", "interval": "5m"})).unwrap();
        assert!(spec.set_fields().is_empty());
        assert_eq!(spec.timeout(), "60s");
        assert_eq!(spec.provider(), GitProvider::Generic);
        assert!(!spec.is_suspended());
        assert_eq!(
            serde_json::to_value(&spec).unwrap(),
            json!({"url": "https://x/y", "interval": "5m"})
        );
    }

    #[test]
    fn include_paths_default() {
        let inc = GitRepositoryInclude {
            repository: LocalObjectReference { name: "lib".into() },
            from_path: None,
            to_path: None,
        };
        assert_eq!(inc.to_path(), "lib");
        assert_eq!(inc.from_path(), "");
    }

    #[test]
    fn head_alias_normalizes() {
        let v: GitRepositoryVerification =
            serde_json::from_value(json!({"mode": "head", "secretRef": {"name": "k"}})).unwrap();
        assert_eq!(v.effective_mode(), GitVerificationMode::Head);
        assert_eq!(serde_json::to_value(&v).unwrap()["mode"], "head");
    }

    #[test]
    fn unknown_provider_is_an_error_not_a_panic() {
        let r: Result<GitRepositorySpec, _> = serde_json::from_value(
            json!({"url": "https://x/y", "interval": "5m", "provider": "gitlab"}),
        );
        assert!(r.is_err());
    }
}
