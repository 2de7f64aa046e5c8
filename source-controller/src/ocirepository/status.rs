//! Pure status transitions of the OCIRepository reconciler (the shared ones are in
//! `crate::source::status`): Flux's messages, when the stored artifact can be kept, and the
//! verification condition.

use std::collections::BTreeMap;

use rflux_common::api::meta::Artifact as ApiArtifact;
use rflux_common::api::ocirepository::{
    OciLayerOperation, OciLayerSelector, OciRepositorySpec, OciRepositoryStatus,
};
use rflux_common::runtime::conditions::{
    self as cond, RECONCILING, STALLED, SUCCEEDED_REASON, SummarizeOptions,
};

use crate::source::status as source_status;
pub use crate::source::status::{
    ARTIFACT_IN_STORAGE, ARTIFACT_OUTDATED, FETCH_FAILED, SOURCE_VERIFIED, STORAGE_OPERATION_FAILED,
};

pub const AUTHENTICATION_FAILED: &str = "AuthenticationFailed";
pub const URL_INVALID: &str = "URLInvalid";
pub const READ_OPERATION_FAILED: &str = "ReadOperationFailed";
pub const PULL_FAILED: &str = "OCIArtifactPullFailed";
pub const LAYER_OPERATION_FAILED: &str = "OCIArtifactLayerOperationFailed";
pub const ARCHIVE_OPERATION_FAILED: &str = "ArchiveOperationFailed";
pub const DIRECTORY_CREATION_FAILED: &str = "DirectoryCreationFailed";
pub const VERIFICATION_ERROR: &str = "VerificationError";
pub const INVALID_PROVIDER_CONFIGURATION: &str = "InvalidProviderConfiguration";

/// Manifest annotation naming the source the artifact was pushed from.
pub const OCI_SOURCE_ANNOTATION: &str = "org.opencontainers.image.source";
/// Manifest annotation naming the source revision.
pub const OCI_REVISION_ANNOTATION: &str = "org.opencontainers.image.revision";

/// source-controller's OCIRepository summary (no `IncludeUnavailable` for this kind).
pub const OCI_REPOSITORY_SUMMARY: SummarizeOptions<'static> = SummarizeOptions {
    priority: &[
        STORAGE_OPERATION_FAILED,
        FETCH_FAILED,
        ARTIFACT_OUTDATED,
        ARTIFACT_IN_STORAGE,
        SOURCE_VERIFIED,
        STALLED,
        RECONCILING,
    ],
    negative_polarity: &[
        STORAGE_OPERATION_FAILED,
        FETCH_FAILED,
        ARTIFACT_OUTDATED,
        STALLED,
        RECONCILING,
    ],
    bipolar: &[SOURCE_VERIFIED],
};

crate::impl_source_status!(
    OciRepositoryStatus,
    OCI_REPOSITORY_SUMMARY,
    &[FETCH_FAILED, STORAGE_OPERATION_FAILED]
);

/// `stored artifact for digest '<rev>'`.
pub fn stored_message(revision: &str) -> String {
    format!("stored artifact for digest '{revision}'")
}

/// The NewArtifact event message: the revision and URL, with the origin source and revision when
/// the manifest names both.
pub fn new_artifact_message(
    revision: &str,
    url: &str,
    metadata: Option<&BTreeMap<String, String>>,
) -> String {
    let mut msg = format!("stored artifact with revision '{revision}' from '{url}'");
    if let Some(m) = metadata
        && let (Some(src), Some(rev)) =
            (m.get(OCI_SOURCE_ANNOTATION), m.get(OCI_REVISION_ANNOTATION))
    {
        msg.push_str(&format!(", origin source '{src}', origin revision '{rev}'"));
    }
    msg
}

/// `spec.layerSelector` with its defaults made explicit, for comparing with the observed one.
fn effective_selector(s: Option<&OciLayerSelector>) -> (Option<&str>, OciLayerOperation) {
    match s {
        Some(s) => (
            s.media_type.as_deref().filter(|m| !m.is_empty()),
            s.operation(),
        ),
        None => (None, OciLayerOperation::Extract),
    }
}

/// The content-affecting spec fields (`ignore`, `layerSelector`) differ from what the stored
/// artifact was built with: a re-pull and re-pack even when the digest is unchanged.
pub fn content_config_changed(spec: &OciRepositorySpec, status: &OciRepositoryStatus) -> bool {
    spec.ignore != status.observed_ignore
        || effective_selector(spec.layer_selector.as_ref())
            != effective_selector(status.observed_layer_selector.as_ref())
}

/// Whether the stored artifact can be kept for `revision`.
pub fn artifact_up_to_date(
    spec: &OciRepositorySpec,
    status: &OciRepositoryStatus,
    revision: &str,
) -> bool {
    status
        .artifact
        .as_ref()
        .is_some_and(|a| a.revision == revision)
        && cond::is_true(
            status.conditions.as_deref().unwrap_or(&[]),
            ARTIFACT_IN_STORAGE,
        )
        && !content_config_changed(spec, status)
}

/// `new revision '<rev>' for '<reference>'`, as ArtifactOutdated and Reconciling say it.
pub fn outdated_message(revision: &str, reference: &str) -> String {
    format!("new revision '{revision}' for '{reference}'")
}

/// Whether the signature must be checked now: `spec.verify` is set and the revision changed, or
/// `SourceVerified` is missing, False, or was set for another generation.
pub fn requires_verification(
    spec: &OciRepositorySpec,
    status: &OciRepositoryStatus,
    revision: &str,
    generation: i64,
) -> bool {
    if spec.verify.is_none() {
        return false;
    }
    let conds = status.conditions.as_deref().unwrap_or(&[]);
    let revision_changed = status
        .artifact
        .as_ref()
        .is_none_or(|a| a.revision != revision);
    revision_changed
        || !cond::is_true(conds, SOURCE_VERIFIED)
        || cond::get(conds, SOURCE_VERIFIED).and_then(|c| c.observed_generation) != Some(generation)
}

/// Start of the source stage: a previous `SourceVerified=False` is dropped (it is recomputed),
/// and without `spec.verify` the condition is removed.
pub fn reset_verification(status: &mut OciRepositoryStatus, spec: &OciRepositorySpec) {
    let conds = status.conditions.get_or_insert_with(Vec::new);
    if spec.verify.is_none() || cond::is_false(conds, SOURCE_VERIFIED) {
        cond::delete(conds, SOURCE_VERIFIED);
    }
}

/// `verified signature of revision <rev>`: `SourceVerified=True/Succeeded`.
pub fn source_verified(
    status: &mut OciRepositoryStatus,
    revision: &str,
    generation: i64,
    now: jiff::Timestamp,
) -> String {
    let message = format!("verified signature of revision {revision}");
    cond::mark_true(
        status.conditions.get_or_insert_with(Vec::new),
        SOURCE_VERIFIED,
        SUCCEEDED_REASON,
        &message,
        Some(generation),
        now,
    );
    message
}

/// A new artifact is stored: set it (with the manifest annotations as metadata) and the
/// observed fields.
pub fn artifact_stored(
    status: &mut OciRepositoryStatus,
    spec: &OciRepositorySpec,
    artifact: ApiArtifact,
    latest_url: Option<String>,
    generation: i64,
    now: jiff::Timestamp,
) {
    let revision = artifact.revision.clone();
    status.artifact = Some(artifact);
    status.observed_ignore = spec.ignore.clone();
    status.observed_layer_selector = spec.layer_selector.clone();
    if latest_url.is_some() {
        status.url = latest_url;
    }
    source_status::keep_artifact(status, &stored_message(&revision), generation, now);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::source::status::{begin, finish, keep_artifact, record_failure};
    use rflux_common::runtime::StageError;
    use serde_json::json;

    fn now() -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn spec(v: serde_json::Value) -> OciRepositorySpec {
        let mut v = v;
        v["url"] = json!("oci://r/x");
        v["interval"] = json!("1m");
        serde_json::from_value(v).unwrap()
    }

    fn art(rev: &str) -> ApiArtifact {
        serde_json::from_value(json!({
            "path": "ocirepository/ns/n/sha256:aa.tar.gz", "url": "http://h/x",
            "revision": rev, "digest": "sha256:00", "lastUpdateTime": "2026-01-02T03:04:05Z"
        }))
        .unwrap()
    }

    #[test]
    fn new_artifact_message_names_the_origin_only_with_both_annotations() {
        let mut m = BTreeMap::new();
        m.insert(
            OCI_SOURCE_ANNOTATION.to_string(),
            "https://git/x".to_string(),
        );
        assert_eq!(
            new_artifact_message("latest@sha256:ab", "oci://r/x", Some(&m)),
            "stored artifact with revision 'latest@sha256:ab' from 'oci://r/x'"
        );
        m.insert(
            OCI_REVISION_ANNOTATION.to_string(),
            "main@sha1:cd".to_string(),
        );
        assert_eq!(
            new_artifact_message("latest@sha256:ab", "oci://r/x", Some(&m)),
            "stored artifact with revision 'latest@sha256:ab' from 'oci://r/x', \
             origin source 'https://git/x', origin revision 'main@sha1:cd'"
        );
    }

    #[test]
    fn ignore_or_layer_selector_change_forces_a_repack() {
        let s = spec(json!({}));
        let mut st = OciRepositoryStatus::default();
        artifact_stored(&mut st, &s, art("latest@sha256:ab"), None, 1, now());
        assert!(artifact_up_to_date(&s, &st, "latest@sha256:ab"));
        assert!(!artifact_up_to_date(&s, &st, "latest@sha256:cd"));
        // An explicit default selector is the same content configuration.
        let same = spec(json!({"layerSelector": {"operation": "extract"}}));
        assert!(artifact_up_to_date(&same, &st, "latest@sha256:ab"));
        let copy = spec(json!({"layerSelector": {"operation": "copy"}}));
        assert!(!artifact_up_to_date(&copy, &st, "latest@sha256:ab"));
        let ignore = spec(json!({"ignore": "*.md"}));
        assert!(!artifact_up_to_date(&ignore, &st, "latest@sha256:ab"));
    }

    #[test]
    fn success_then_failure_keeps_the_artifact_and_flux_messages() {
        let s = spec(json!({}));
        let mut st = OciRepositoryStatus::default();
        assert!(begin(&mut st, 1, now()));
        artifact_stored(
            &mut st,
            &s,
            art("latest@sha256:ab"),
            Some("http://h/l".into()),
            1,
            now(),
        );
        finish(&mut st, Ok(()), 1, None, now());
        let c = st.conditions.as_deref().unwrap();
        assert!(cond::is_true(c, cond::READY));
        assert_eq!(
            cond::get_message(c, cond::READY),
            Some("stored artifact for digest 'latest@sha256:ab'")
        );
        assert_eq!(st.observed_generation, Some(1));
        begin(&mut st, 1, now());
        let err = StageError::generic(FETCH_FAILED, PULL_FAILED, "failed to pull");
        record_failure(&mut st, &err, 1, now());
        finish(&mut st, Err(&err), 1, None, now());
        let c = st.conditions.as_deref().unwrap();
        assert!(cond::is_false(c, cond::READY));
        assert_eq!(cond::get_reason(c, cond::READY), Some(PULL_FAILED));
        assert!(st.artifact.is_some(), "the old artifact is kept");
        keep_artifact(&mut st, &stored_message("latest@sha256:ab"), 1, now());
        assert!(cond::get(st.conditions.as_deref().unwrap(), FETCH_FAILED).is_none());
    }

    #[test]
    fn verification_is_bipolar_and_rechecked_on_new_revision_or_generation() {
        let s = spec(json!({"verify": {"provider": "cosign", "secretRef": {"name": "k"}}}));
        let mut st = OciRepositoryStatus::default();
        assert!(requires_verification(&s, &st, "latest@sha256:ab", 1));
        artifact_stored(&mut st, &s, art("latest@sha256:ab"), None, 1, now());
        source_verified(&mut st, "latest@sha256:ab", 1, now());
        assert!(!requires_verification(&s, &st, "latest@sha256:ab", 1));
        assert!(requires_verification(&s, &st, "latest@sha256:cd", 1));
        assert!(requires_verification(&s, &st, "latest@sha256:ab", 2));
        let err = StageError::generic(SOURCE_VERIFIED, VERIFICATION_ERROR, "no signature");
        record_failure(&mut st, &err, 1, now());
        let c = st.conditions.as_deref().unwrap();
        assert!(cond::is_false(c, SOURCE_VERIFIED));
        finish(&mut st, Err(&err), 1, None, now());
        assert_eq!(
            cond::get_reason(st.conditions.as_deref().unwrap(), cond::READY),
            Some(VERIFICATION_ERROR)
        );
        reset_verification(&mut st, &s);
        assert!(cond::get(st.conditions.as_deref().unwrap(), SOURCE_VERIFIED).is_none());
        // Without spec.verify the condition goes.
        source_verified(&mut st, "latest@sha256:ab", 1, now());
        reset_verification(&mut st, &spec(json!({})));
        assert!(cond::get(st.conditions.as_deref().unwrap(), SOURCE_VERIFIED).is_none());
    }
}
