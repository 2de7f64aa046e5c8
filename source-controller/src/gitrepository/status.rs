//! Pure status/condition transitions of the GitRepository reconciler: the conditions each stage
//! sets, how a [`StageError`] is recorded, and the Ready summary at the end of a reconcile.

use rflux_common::api::gitrepository::{
    GitRepositorySpec, GitRepositoryStatus, GitVerificationMode,
};
use rflux_common::api::meta::{Artifact as ApiArtifact, revisions_equal};
use rflux_common::runtime::StageError;
use rflux_common::runtime::conditions::{self as cond, SUCCEEDED_REASON};

use crate::source::status as source_status;
pub use crate::source::status::{
    ARTIFACT_IN_STORAGE, ARTIFACT_OUTDATED, FETCH_FAILED, NEW_REVISION, PROGRESSING,
    SOURCE_VERIFIED, STORAGE_OPERATION_FAILED, artifact_missing, begin, finish, from_api_artifact,
    had_failure, progress, record_failure, to_api_artifact,
};
pub const INCLUDE_UNAVAILABLE: &str = "IncludeUnavailable";

pub const AUTHENTICATION_FAILED: &str = "AuthenticationFailed";
pub const URL_INVALID: &str = "URLInvalid";
pub const GIT_OPERATION_FAILED: &str = "GitOperationFailed";
pub const EMPTY_GIT_REPOSITORY: &str = "EmptyGitRepository";
pub const INVALID_PROVIDER_CONFIGURATION: &str = "InvalidProviderConfiguration";
pub const INCLUDE_CHANGE: &str = "IncludeChange";
pub const NOT_FOUND: &str = "NotFound";
pub const NO_ARTIFACT: &str = "NoArtifact";
pub const ARCHIVE_OPERATION_FAILED: &str = "ArchiveOperationFailed";
pub const DIRECTORY_CREATION_FAILED: &str = "DirectoryCreationFailed";
pub const VERIFICATION_ERROR: &str = "VerificationError";

/// `stored artifact for revision '<rev>'`.
pub fn stored_message(revision: &str) -> String {
    format!("stored artifact for revision '{revision}'")
}

/// The NewArtifact event message: the commit subject, at most 50 characters plus `...`.
pub fn new_artifact_message(commit_message: &str) -> String {
    let subject = commit_message.lines().next().unwrap_or("").trim_end();
    let mut short: String = subject.chars().take(50).collect();
    if subject.chars().count() > 50 {
        short.push_str("...");
    }
    format!("stored artifact for commit '{short}'")
}

/// The content-affecting spec fields differ from what the stored artifact was built with.
pub fn observed_fields_changed(spec: &GitRepositorySpec, status: &GitRepositoryStatus) -> bool {
    let empty_vec = |v: &Option<Vec<String>>| v.as_ref().is_none_or(Vec::is_empty);
    let sparse_same = (empty_vec(&spec.sparse_checkout)
        && empty_vec(&status.observed_sparse_checkout))
        || spec.sparse_checkout == status.observed_sparse_checkout;
    let include_same = spec.include.as_ref().is_none_or(Vec::is_empty)
        && status.observed_include.as_ref().is_none_or(Vec::is_empty)
        || spec.include == status.observed_include;
    spec.ignore != status.observed_ignore
        || spec.recurse_submodules.unwrap_or(false)
            != status.observed_recurse_submodules.unwrap_or(false)
        || !sparse_same
        || !include_same
}

/// Whether the included artifacts differ from those the stored artifact was built with (their
/// digests, or `spec.include` itself).
pub fn includes_changed(
    spec: &GitRepositorySpec,
    status: &GitRepositoryStatus,
    included: &[ApiArtifact],
) -> bool {
    if status.artifact.is_none() {
        return false;
    }
    let stored = status.included_artifacts.as_deref().unwrap_or(&[]);
    stored.len() != included.len()
        || stored
            .iter()
            .zip(included)
            .any(|(a, b)| a.digest != b.digest)
        || observed_fields_changed(spec, status) && spec.include != status.observed_include
}

/// Every included artifact is available: `IncludeUnavailable` is cleared, and when they
/// changed ([`includes_changed`]) the stored artifact is marked outdated.
pub fn includes_available(
    status: &mut GitRepositoryStatus,
    spec: &GitRepositorySpec,
    included: &[ApiArtifact],
    generation: i64,
    now: jiff::Timestamp,
) {
    cond::delete(
        status.conditions.get_or_insert_with(Vec::new),
        INCLUDE_UNAVAILABLE,
    );
    if !includes_changed(spec, status, included) {
        return;
    }
    let msg = "included artifacts differ from last observed includes";
    let conds = status.conditions.get_or_insert_with(Vec::new);
    cond::mark_true(
        conds,
        ARTIFACT_OUTDATED,
        INCLUDE_CHANGE,
        msg,
        Some(generation),
        now,
    );
    progress(
        status,
        &format!("building artifact: {msg}"),
        generation,
        now,
    );
}

/// Whether the stored artifact can be kept for `revision` (nothing content-affecting changed).
pub fn artifact_up_to_date(
    spec: &GitRepositorySpec,
    status: &GitRepositoryStatus,
    revision: &str,
    included: &[ApiArtifact],
) -> bool {
    let Some(a) = &status.artifact else {
        return false;
    };
    let stored_incl = status.included_artifacts.as_deref().unwrap_or(&[]);
    let incl_same = stored_incl.len() == included.len()
        && stored_incl
            .iter()
            .zip(included)
            .all(|(x, y)| revisions_equal(&x.revision, &y.revision) && x.digest == y.digest);
    revisions_equal(&a.revision, revision)
        && cond::is_true(
            status.conditions.as_deref().unwrap_or(&[]),
            ARTIFACT_IN_STORAGE,
        )
        && !observed_fields_changed(spec, status)
        && !requires_verification(spec, status)
        && incl_same
}

/// Whether the source must be (re)verified: `spec.verify` is set and the last verified mode is
/// missing, or covered only the tag (HEAD now wanted) or only HEAD (the tag now wanted).
pub fn requires_verification(spec: &GitRepositorySpec, status: &GitRepositoryStatus) -> bool {
    let Some(v) = &spec.verify else {
        return false;
    };
    let wanted = v.effective_mode();
    let Some(observed) = status.source_verification_mode.as_deref() else {
        return true;
    };
    let wants_head = matches!(
        wanted,
        GitVerificationMode::Head | GitVerificationMode::TagAndHead
    );
    let wants_tag = matches!(
        wanted,
        GitVerificationMode::Tag | GitVerificationMode::TagAndHead
    );
    (observed == GitVerificationMode::Tag.as_str() && wants_head)
        || (observed == GitVerificationMode::Head.as_str() && wants_tag)
}

/// Start of the source stage: a previous `SourceVerified=False` is dropped (it is recomputed);
/// without `spec.verify`, the verified mode and the condition are cleared.
pub fn reset_verification(status: &mut GitRepositoryStatus, spec: &GitRepositorySpec) {
    let conds = status.conditions.get_or_insert_with(Vec::new);
    if spec.verify.is_none() {
        status.source_verification_mode = None;
        cond::delete(conds, SOURCE_VERIFIED);
    } else if cond::is_false(conds, SOURCE_VERIFIED) {
        cond::delete(conds, SOURCE_VERIFIED);
    }
}

/// The signatures verified: `SourceVerified=True/Succeeded` with the verification message and
/// the verified mode recorded.
pub fn source_verified(
    status: &mut GitRepositoryStatus,
    mode: GitVerificationMode,
    message: &str,
    generation: i64,
    now: jiff::Timestamp,
) {
    status.source_verification_mode = Some(mode.normalized().as_str().to_string());
    let conds = status.conditions.get_or_insert_with(Vec::new);
    cond::mark_true(
        conds,
        SOURCE_VERIFIED,
        SUCCEEDED_REASON,
        message,
        Some(generation),
        now,
    );
}

/// Maps a verification failure to the stage error (condition SourceVerified=False).
pub fn verification_failed(e: &super::verify::VerificationError) -> StageError {
    let (condition, reason, message) = (SOURCE_VERIFIED, e.reason(), e.to_string());
    if e.is_stalling() {
        StageError::stalling(condition, reason, message)
    } else {
        StageError::generic(condition, reason, message)
    }
}

/// A new upstream revision is about to be built.
pub fn new_revision(
    status: &mut GitRepositoryStatus,
    revision: &str,
    generation: i64,
    now: jiff::Timestamp,
) {
    let outdated = format!("new upstream revision '{revision}'");
    source_status::new_revision(status, &outdated, generation, now);
}

/// The stored artifact stays valid: re-mark ArtifactInStorage and clear failures.
pub fn keep_artifact(
    status: &mut GitRepositoryStatus,
    revision: &str,
    generation: i64,
    now: jiff::Timestamp,
) {
    source_status::keep_artifact(status, &stored_message(revision), generation, now);
}

/// A new artifact is stored: set it and the observed fields.
pub fn artifact_stored(
    status: &mut GitRepositoryStatus,
    spec: &GitRepositorySpec,
    artifact: ApiArtifact,
    included: Vec<ApiArtifact>,
    generation: i64,
    now: jiff::Timestamp,
) {
    let revision = artifact.revision.clone();
    status.artifact = Some(artifact);
    status.included_artifacts = (!included.is_empty()).then_some(included);
    status.observed_ignore = spec.ignore.clone();
    status.observed_recurse_submodules = spec.recurse_submodules;
    status.observed_include = spec.include.clone();
    status.observed_sparse_checkout = spec.sparse_checkout.clone();
    keep_artifact(status, &revision, generation, now);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::artifact::Artifact as StoredArtifact;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use rflux_common::runtime::Severity;
    use rflux_common::runtime::conditions::{KStatus, kstatus};
    use rflux_common::runtime::conditions::{READY, RECONCILING, STALLED};

    fn now() -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn art(rev: &str) -> ApiArtifact {
        to_api_artifact(
            &StoredArtifact {
                path: "gitrepository/ns/n/x.tar.gz".into(),
                url: "http://h/gitrepository/ns/n/x.tar.gz".into(),
                revision: rev.into(),
                digest: "sha256:00".into(),
                last_update_time: "2026-01-02T03:04:05Z".into(),
                size: 10,
            },
            now(),
        )
    }

    fn conds(st: &GitRepositoryStatus) -> &[Condition] {
        st.conditions.as_deref().unwrap()
    }

    #[test]
    fn first_success_is_ready_with_flux_messages() {
        let spec = GitRepositorySpec::default();
        let mut st = GitRepositoryStatus::default();
        assert!(begin(&mut st, 1, now()));
        assert_eq!(
            cond::get_message(conds(&st), RECONCILING),
            Some("processing object: new generation -1 -> 1")
        );
        assert!(cond::is_unknown(conds(&st), READY));
        artifact_stored(&mut st, &spec, art("main@sha1:abc"), vec![], 1, now());
        finish(&mut st, Ok(()), 1, Some("t1"), now());
        let c = conds(&st);
        assert!(cond::is_true(c, READY));
        assert_eq!(cond::get_reason(c, READY), Some("Succeeded"));
        assert_eq!(
            cond::get_message(c, READY),
            Some("stored artifact for revision 'main@sha1:abc'")
        );
        assert!(cond::get(c, RECONCILING).is_none());
        assert_eq!(st.observed_generation, Some(1));
        assert_eq!(st.last_handled_reconcile_at.as_deref(), Some("t1"));
        assert_eq!(
            kstatus(c, Some(1), st.observed_generation),
            KStatus::Current
        );
    }

    #[test]
    fn fetch_failure_keeps_artifact_and_retries() {
        let spec = GitRepositorySpec::default();
        let mut st = GitRepositoryStatus::default();
        begin(&mut st, 1, now());
        artifact_stored(&mut st, &spec, art("main@sha1:abc"), vec![], 1, now());
        finish(&mut st, Ok(()), 1, None, now());
        begin(&mut st, 1, now());
        let err = StageError::generic(
            FETCH_FAILED,
            GIT_OPERATION_FAILED,
            "failed to checkout and determine revision: authentication failed",
        );
        record_failure(&mut st, &err, 1, now());
        finish(&mut st, Err(&err), 1, None, now());
        let c = conds(&st);
        assert!(cond::is_false(c, READY));
        assert_eq!(cond::get_reason(c, READY), Some(GIT_OPERATION_FAILED));
        assert_eq!(
            cond::get_reason(c, RECONCILING),
            Some(cond::PROGRESSING_WITH_RETRY_REASON)
        );
        assert!(cond::is_true(c, ARTIFACT_IN_STORAGE));
        assert_eq!(st.artifact.as_ref().unwrap().revision, "main@sha1:abc");
        // Recovery clears FetchFailed.
        assert!(had_failure::<GitRepositoryStatus>(c));
        begin(&mut st, 1, now());
        keep_artifact(&mut st, "main@sha1:abc", 1, now());
        finish(&mut st, Ok(()), 1, None, now());
        assert!(cond::get(conds(&st), FETCH_FAILED).is_none());
        assert!(cond::is_true(conds(&st), READY));
    }

    #[test]
    fn stalling_error_sets_stalled_and_observed_generation() {
        let mut st = GitRepositoryStatus::default();
        begin(&mut st, 3, now());
        let err = StageError::stalling(FETCH_FAILED, URL_INVALID, "failed to parse url");
        record_failure(&mut st, &err, 3, now());
        finish(&mut st, Err(&err), 3, None, now());
        let c = conds(&st);
        assert!(cond::is_true(c, STALLED));
        assert!(cond::is_false(c, READY));
        assert_eq!(cond::get_reason(c, READY), Some(URL_INVALID));
        assert_eq!(st.observed_generation, Some(3));
        assert_eq!(kstatus(c, Some(3), Some(3)), KStatus::Failed);
    }

    #[test]
    fn new_revision_marks_outdated_then_cleared() {
        let spec = GitRepositorySpec::default();
        let mut st = GitRepositoryStatus::default();
        begin(&mut st, 1, now());
        artifact_stored(&mut st, &spec, art("main@sha1:aaa"), vec![], 1, now());
        finish(&mut st, Ok(()), 1, None, now());
        begin(&mut st, 1, now());
        new_revision(&mut st, "main@sha1:bbb", 1, now());
        assert_eq!(
            cond::get_message(conds(&st), RECONCILING),
            Some("building artifact: new upstream revision 'main@sha1:bbb'")
        );
        assert!(cond::is_true(conds(&st), ARTIFACT_OUTDATED));
        artifact_stored(&mut st, &spec, art("main@sha1:bbb"), vec![], 1, now());
        assert!(cond::get(conds(&st), ARTIFACT_OUTDATED).is_none());
    }

    #[test]
    fn up_to_date_depends_on_revision_and_observed_fields() {
        let mut spec = GitRepositorySpec::default();
        let mut st = GitRepositoryStatus::default();
        begin(&mut st, 1, now());
        artifact_stored(&mut st, &spec, art("main@sha1:aaa"), vec![], 1, now());
        assert!(artifact_up_to_date(&spec, &st, "main@sha1:aaa", &[]));
        assert!(!artifact_up_to_date(&spec, &st, "main@sha1:bbb", &[]));
        spec.ignore = Some("*.md".into());
        assert!(!artifact_up_to_date(&spec, &st, "main@sha1:aaa", &[]));
        spec.ignore = None;
        spec.sparse_checkout = Some(vec!["deploy".into()]);
        assert!(!artifact_up_to_date(&spec, &st, "main@sha1:aaa", &[]));
        spec.sparse_checkout = Some(vec![]);
        assert!(artifact_up_to_date(&spec, &st, "main@sha1:aaa", &[]));
        artifact_missing(&mut st, 1, now());
        assert!(!artifact_up_to_date(&spec, &st, "main@sha1:aaa", &[]));
    }

    #[test]
    fn verification_conditions_and_reverification() {
        use rflux_common::api::gitrepository::GitRepositoryVerification;
        let mut spec = GitRepositorySpec {
            verify: Some(GitRepositoryVerification {
                mode: Some(GitVerificationMode::Tag),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut st = GitRepositoryStatus::default();
        assert!(requires_verification(&spec, &st));
        begin(&mut st, 1, now());
        source_verified(
            &mut st,
            GitVerificationMode::Tag,
            "verified signature of\n\t- tag",
            1,
            now(),
        );
        artifact_stored(&mut st, &spec, art("v1@sha1:aaa"), vec![], 1, now());
        finish(&mut st, Ok(()), 1, None, now());
        assert!(cond::is_true(conds(&st), READY));
        assert_eq!(st.source_verification_mode.as_deref(), Some("Tag"));
        assert!(!requires_verification(&spec, &st));
        assert!(artifact_up_to_date(&spec, &st, "v1@sha1:aaa", &[]));
        // HEAD (or TagAndHEAD) now wanted, only the tag was verified: verify again.
        spec.verify.as_mut().unwrap().mode = Some(GitVerificationMode::LowercaseHead);
        assert!(requires_verification(&spec, &st));
        assert!(!artifact_up_to_date(&spec, &st, "v1@sha1:aaa", &[]));
        spec.verify.as_mut().unwrap().mode = Some(GitVerificationMode::TagAndHead);
        assert!(requires_verification(&spec, &st));

        // A failed verification: SourceVerified=False drives Ready=False, the artifact stays.
        begin(&mut st, 2, now());
        let err = StageError::generic(
            SOURCE_VERIFIED,
            "InvalidCommitSignature",
            "signature verification of commit 'abc' failed: no",
        );
        record_failure(&mut st, &err, 2, now());
        finish(&mut st, Err(&err), 2, None, now());
        let c = conds(&st);
        assert!(cond::is_false(c, SOURCE_VERIFIED));
        assert!(cond::is_false(c, READY));
        assert_eq!(cond::get_reason(c, READY), Some("InvalidCommitSignature"));
        assert_eq!(
            cond::get_message(c, READY),
            Some("signature verification of commit 'abc' failed: no")
        );
        assert!(st.artifact.is_some());
        // The next attempt starts without the stale False; dropping spec.verify clears all.
        reset_verification(&mut st, &spec);
        assert!(cond::get(conds(&st), SOURCE_VERIFIED).is_none());
        source_verified(&mut st, GitVerificationMode::TagAndHead, "ok", 2, now());
        reset_verification(&mut st, &spec);
        assert!(cond::is_true(conds(&st), SOURCE_VERIFIED));
        spec.verify = None;
        reset_verification(&mut st, &spec);
        assert!(cond::get(conds(&st), SOURCE_VERIFIED).is_none());
        assert_eq!(st.source_verification_mode, None);
        assert!(!requires_verification(&spec, &st));
    }

    #[test]
    fn invalid_verification_mode_stalls() {
        let e = super::super::verify::VerificationError::NoTagReference;
        let se = verification_failed(&e);
        assert_eq!(se.severity, Severity::Stalling);
        let mut st = GitRepositoryStatus::default();
        begin(&mut st, 1, now());
        record_failure(&mut st, &se, 1, now());
        finish(&mut st, Err(&se), 1, None, now());
        let c = conds(&st);
        assert!(cond::is_true(c, STALLED));
        assert_eq!(cond::get_reason(c, READY), Some("InvalidVerificationMode"));
        assert_eq!(
            cond::get_reason(c, SOURCE_VERIFIED),
            Some("InvalidVerificationMode")
        );
    }

    #[test]
    fn include_changes_mark_the_artifact_outdated() {
        let spec = GitRepositorySpec::default();
        let mut st = GitRepositoryStatus::default();
        let inc = art("main@sha1:aaa");
        // Without a stored artifact there is nothing to be outdated.
        includes_available(&mut st, &spec, std::slice::from_ref(&inc), 1, now());
        assert!(cond::get(conds(&st), ARTIFACT_OUTDATED).is_none());
        artifact_stored(
            &mut st,
            &spec,
            art("main@sha1:abc"),
            vec![inc.clone()],
            1,
            now(),
        );
        // A previous IncludeUnavailable is cleared; the same includes change nothing.
        cond::mark_true(
            st.conditions.as_mut().unwrap(),
            INCLUDE_UNAVAILABLE,
            NO_ARTIFACT,
            "no artifact available for include 'dep'",
            Some(1),
            now(),
        );
        includes_available(&mut st, &spec, std::slice::from_ref(&inc), 1, now());
        assert!(cond::get(conds(&st), INCLUDE_UNAVAILABLE).is_none());
        assert!(cond::get(conds(&st), ARTIFACT_OUTDATED).is_none());
        // Another digest, or one include fewer, is a change.
        assert!(includes_changed(&spec, &st, &[]));
        let mut changed = inc.clone();
        changed.digest = "sha256:11".into();
        includes_available(&mut st, &spec, &[changed], 1, now());
        assert_eq!(
            cond::get_reason(conds(&st), ARTIFACT_OUTDATED),
            Some(INCLUDE_CHANGE)
        );
        assert_eq!(
            cond::get_message(conds(&st), RECONCILING),
            Some("building artifact: included artifacts differ from last observed includes")
        );
    }

    #[test]
    fn event_message_truncates_subject() {
        assert_eq!(
            new_artifact_message("short\n\nbody"),
            "stored artifact for commit 'short'"
        );
        let long = "x".repeat(60);
        assert_eq!(
            new_artifact_message(&long),
            format!("stored artifact for commit '{}...'", "x".repeat(50))
        );
    }
}
