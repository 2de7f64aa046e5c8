//! The spec rules the controller re-checks although the CRD's CEL rules enforce them on
//! admission (clusters without CEL, objects stored under an older CRD), as Flux Operator
//! repeats them (Stalled `InvalidSpec`), and which types this controller can export.

use rflux_common::api::resourcesetinputprovider::{
    InputProviderType, ResourceSetInputProviderSpec,
};

/// A broken spec rule; the message follows Flux Operator's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// ExternalService without an `http(s)://` URL.
    #[error("spec.url must start with 'http://' or 'https://' when spec.type is 'ExternalService'")]
    ExternalServiceScheme,
    /// ExternalService over plain HTTP without `insecure`.
    #[error("spec.url must use 'https://' unless spec.insecure is true")]
    ExternalServiceInsecure,
    /// ExternalArtifact without selectors.
    #[error("spec.selectors must be set when spec.type is 'ExternalArtifact'")]
    ExternalArtifactSelectors,
    /// ExternalArtifact with a URL.
    #[error("spec.url must be empty when spec.type is 'ExternalArtifact'")]
    ExternalArtifactUrl,
    /// `insecure` on a type that has no plain-HTTP mode.
    #[error(
        "spec.insecure can only be set when spec.type is 'ExternalService' or 'OCIArtifactTag'"
    )]
    Insecure,
    /// An OCI type whose URL names no repository.
    #[error(
        "spec.url must include the repository path after the registry host when spec.type is an OCI provider"
    )]
    OciRepositoryPath,
}

/// Checks the rules Flux Operator re-checks, in its order.
pub fn check(spec: &ResourceSetInputProviderSpec) -> Result<(), SpecError> {
    let url = spec.url.as_deref().unwrap_or_default();
    match spec.provider_type {
        InputProviderType::ExternalService => {
            if !url.starts_with("http://") && !url.starts_with("https://") {
                return Err(SpecError::ExternalServiceScheme);
            }
            if url.starts_with("http://") && !spec.is_insecure() {
                return Err(SpecError::ExternalServiceInsecure);
            }
        }
        InputProviderType::ExternalArtifact => {
            if spec.selectors().is_empty() {
                return Err(SpecError::ExternalArtifactSelectors);
            }
            if !url.is_empty() {
                return Err(SpecError::ExternalArtifactUrl);
            }
        }
        t if spec.is_insecure() && t != InputProviderType::OciArtifactTag => {
            return Err(SpecError::Insecure);
        }
        _ => {}
    }
    if spec.provider_type.is_artifact_tag() && !url.trim_start_matches("oci://").contains('/') {
        return Err(SpecError::OciRepositoryPath);
    }
    Ok(())
}

/// What a type would call: the message of the Stalled condition for the types this
/// controller does not export (every one but `Static`).
pub fn unsupported_message(t: InputProviderType) -> String {
    let what = if t.is_git() {
        "a Git hosting API"
    } else if t.is_artifact_tag() {
        "an OCI registry"
    } else if t == InputProviderType::ExternalService {
        "an HTTP service"
    } else {
        "ExternalArtifact objects"
    };
    format!(
        "spec.type '{t}' is not supported by rflux's resourceset-controller: it would call {what}, \
         and this controller does not reach external services; only 'Static' providers export inputs"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> ResourceSetInputProviderSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn valid_specs_pass() {
        for v in [
            json!({"type": "Static", "defaultValues": {"a": 1}}),
            json!({"type": "ExternalService", "url": "https://svc/x"}),
            json!({"type": "ExternalService", "url": "http://svc/x", "insecure": true}),
            json!({"type": "ExternalArtifact", "selectors": [{"name": "a"}]}),
            json!({"type": "OCIArtifactTag", "url": "oci://reg:5000/repo", "insecure": true}),
            json!({"type": "GitHubBranch", "url": "https://github.com/o/r"}),
        ] {
            assert_eq!(check(&spec(v.clone())), Ok(()), "{v}");
        }
    }

    #[test]
    fn broken_rules_are_reported_in_order() {
        for (v, want) in [
            (
                json!({"type": "ExternalService", "url": "ftp://x"}),
                SpecError::ExternalServiceScheme,
            ),
            (
                json!({"type": "ExternalService"}),
                SpecError::ExternalServiceScheme,
            ),
            (
                json!({"type": "ExternalService", "url": "http://x"}),
                SpecError::ExternalServiceInsecure,
            ),
            (
                json!({"type": "ExternalArtifact"}),
                SpecError::ExternalArtifactSelectors,
            ),
            (
                json!({"type": "ExternalArtifact", "selectors": [{"name": "a"}], "url": "https://x"}),
                SpecError::ExternalArtifactUrl,
            ),
            (
                json!({"type": "Static", "insecure": true}),
                SpecError::Insecure,
            ),
            (
                json!({"type": "GitLabTag", "url": "https://x", "insecure": true}),
                SpecError::Insecure,
            ),
            (
                json!({"type": "OCIArtifactTag", "url": "oci://reg:5000"}),
                SpecError::OciRepositoryPath,
            ),
            (
                json!({"type": "ECRArtifactTag", "url": "oci://reg"}),
                SpecError::OciRepositoryPath,
            ),
        ] {
            assert_eq!(check(&spec(v.clone())), Err(want), "{v}");
        }
        // `insecure: false` is no error anywhere.
        assert_eq!(
            check(&spec(json!({"type": "Static", "insecure": false}))),
            Ok(())
        );
    }

    #[test]
    fn unsupported_message_names_the_type_and_the_reason() {
        let m = unsupported_message(InputProviderType::GitHubBranch);
        assert!(
            m.contains("'GitHubBranch'") && m.contains("Git hosting API"),
            "{m}"
        );
        assert!(m.contains("does not reach external services"), "{m}");
        let m = unsupported_message(InputProviderType::OciArtifactTag);
        assert!(
            m.contains("'OCIArtifactTag'") && m.contains("OCI registry"),
            "{m}"
        );
        let m = unsupported_message(InputProviderType::ExternalArtifact);
        assert!(m.contains("ExternalArtifact objects"), "{m}");
    }
}
