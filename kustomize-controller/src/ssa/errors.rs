//! Why an apply failed, in Flux's words (`ssa` package error texts).

use super::changeset::ChangeSet;
use super::object::{ObjectError, ObjectRef};
use super::resolver::LookupError;
use super::wait::WaitError;

/// Why an apply failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyErrorKind {
    /// An object is malformed.
    #[error(transparent)]
    Invalid(#[from] ObjectError),
    /// The kind is unknown, or a namespaced object has no namespace.
    #[error(transparent)]
    Lookup(#[from] LookupError),
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
    Wait(#[from] WaitError),
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
pub(crate) fn dry_run_error(obj: &ObjectRef, e: &kube::Error) -> ApplyErrorKind {
    let (reason, message, code) = api_reason(e);
    if code == 404 {
        if obj.namespace.is_empty() {
            return LookupError::NamespaceNotSpecified {
                subject: obj.subject(),
                message,
            }
            .into();
        }
        return LookupError::NotFound {
            subject: obj.subject(),
            message,
        }
        .into();
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

/// The API reason, message and HTTP code of an error (empty reason and code 0 when it is not
/// an API status).
pub(crate) fn api_reason(e: &kube::Error) -> (String, String, u16) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn immutable_errors() {
        assert!(is_immutable_error(422, "spec.selector: Invalid value"));
        assert!(is_immutable_error(409, ""));
        assert!(is_immutable_error(400, "field is immutable"));
        assert!(!is_immutable_error(400, "bad request"));
    }
}
