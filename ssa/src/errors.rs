//! Why an apply failed, in Flux's words (`ssa` package error texts).

use super::changeset::ChangeSet;
use super::object::{ObjectError, ObjectRef};
use super::resolver::{LookupError, error_text};
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
    #[error("{subject} query failed: {}", error_text(.source))]
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
/// an API status; the message is then the error with its causes, see [`error_text`]).
pub(crate) fn api_reason(e: &kube::Error) -> (String, String, u16) {
    match e {
        kube::Error::Api(s) => (s.reason.clone(), s.message.clone(), s.code),
        other => (String::new(), error_text(other), 0),
    }
}

/// How the API server and admission (built-in validation, CEL rules, webhooks) say that a
/// field cannot be changed in place, lower-cased.
const IMMUTABLE_TEXTS: &[&str] = &[
    // apimachinery's `field is immutable` (Job template, Deployment/DaemonSet selector,
    // ConfigMap/Secret with `immutable: true`), PVC/PV `is immutable after creation`, CEL
    // `Value is immutable`, and webhooks (`the IAMPolicyMember's spec is immutable`).
    "is immutable",
    "immutable field",
    // Service `spec.clusterIPs[0]: Invalid value: …: may not change once set`.
    "may not change once set",
    // RoleBinding/ClusterRoleBinding `roleRef: Invalid value: …: cannot change roleRef`.
    "cannot change roleref",
    // StatefulSet `spec: Forbidden: updates to statefulset spec for fields other than …`.
    "updates to statefulset spec for fields other than",
    // Pod `spec: Forbidden: pod updates may not change fields other than …`.
    "pod updates may not change fields other than",
    // StorageClass `updates to parameters are forbidden`, `… provisioner …`.
    "updates to parameters are forbidden",
    "updates to provisioner are forbidden",
];

/// Whether an apply was refused because it changes a field that cannot be changed in place, so
/// `force` may delete and recreate the object. Only a client error that says so counts: never a
/// 409 Conflict (an optimistic-lock or field-manager conflict is transient or an ownership
/// matter, not immutability), a 5xx, or a transport error (code 0). Stricter than Flux's
/// `IsImmutableError`, which takes every Conflict and every Invalid as immutable (kubectl's
/// `--force` rule) and so recreates an object after one transient 409.
pub fn is_immutable_error(code: u16, message: &str) -> bool {
    if code == 409 || !(400..500).contains(&code) {
        return false;
    }
    let message = message.to_lowercase();
    IMMUTABLE_TEXTS.iter().any(|t| message.contains(t))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
    fn immutable_errors_are_only_what_the_apiserver_calls_immutable() {
        // Real apiserver texts (422 Invalid) for changes that need a recreation.
        let immutable = [
            r#"Job.batch "migrate" is invalid: spec.template: Invalid value: core.PodTemplateSpec{ObjectMeta:v1.ObjectMeta{Name:"", Labels:map[string]string{"job-name":"migrate"}}}: field is immutable"#,
            r#"Deployment.apps "web" is invalid: spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"web2"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"#,
            r#"Service "web" is invalid: spec.clusterIPs[0]: Invalid value: []string{"10.0.0.9"}: may not change once set"#,
            r#"ConfigMap "cfg" is invalid: data: Forbidden: field is immutable when `immutable` is set"#,
            r#"PersistentVolumeClaim "data" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"#,
            r#"StatefulSet.apps "db" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"#,
            r#"RoleBinding.rbac.authorization.k8s.io "app" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"Role", Name:"b"}: cannot change roleRef"#,
            r#"StorageClass.storage.k8s.io "fast" is invalid: parameters: Forbidden: updates to parameters are forbidden."#,
            r#"the ImmutableSinceFirstWrite "test1" is invalid: value: Invalid value: "string": Value is immutable"#,
        ];
        for m in immutable {
            assert!(is_immutable_error(422, m), "{m}");
        }
        // An admission webhook may deny with another client status.
        let webhook = r#"admission webhook "deny-immutable-field-updates.cnrm.cloud.google.com" denied the request: the IAMPolicyMember's spec is immutable"#;
        assert!(is_immutable_error(403, webhook));
        assert!(is_immutable_error(400, webhook));

        // Conflicts never: optimistic lock, SSA field-manager conflict, even if worded oddly.
        let conflicts = [
            r#"Operation cannot be fulfilled on configmaps "force-a": the object has been modified; please apply your changes to the latest version and try again"#,
            r#"Apply failed with 1 conflict: conflict with "kubectl-edit" using v1: .data.value"#,
            "field is immutable",
        ];
        for m in conflicts {
            assert!(!is_immutable_error(409, m), "{m}");
        }
        // Other invalid objects are the user's to fix, not a reason to delete.
        let invalid = [
            r#"Deployment.apps "web" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0"#,
            r#"ConfigMap "x" is invalid: metadata.name: Invalid value: "X": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"#,
            "/api/v1/namespaces/a/configmaps/x is invalid: injected by the fault proxy",
            "is not immutable",
        ];
        for m in invalid {
            assert!(!is_immutable_error(422, m), "{m}");
        }
        // Server and transport errors never, whatever they say.
        assert!(!is_immutable_error(
            500,
            "Internal error occurred: field is immutable"
        ));
        assert!(!is_immutable_error(0, "field is immutable"));
    }

    #[test]
    fn query_failures_read_as_text_not_debug_dumps() {
        let conflict = kube::Error::Api(
            kube::core::Status::failure(
                r#"Operation cannot be fulfilled on configmaps "a": the object has been modified"#,
                "Conflict",
            )
            .with_code(409)
            .boxed(),
        );
        // What kube's own Display gives: the Debug dump this must not show.
        assert!(conflict.to_string().contains("Status {"), "{conflict}");
        let obj = ObjectRef {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: "a".into(),
        };
        let get = ApplyErrorKind::Get {
            subject: obj.subject(),
            source: conflict,
        };
        assert_eq!(
            get.to_string(),
            r#"ConfigMap/ns/a query failed: Operation cannot be fulfilled on configmaps "a": the object has been modified"#
        );
        let empty = kube::Error::Api(kube::core::Status::failure("", "").with_code(503).boxed());
        assert_eq!(error_text(&empty), "HTTP status 503");
    }

    /// A server that accepts connections and closes them unanswered: kube's error for it names
    /// the cause below `SendRequest`, in the apply path's text and in the query-failed text.
    #[tokio::test]
    async fn transport_failures_keep_their_cause() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = tokio::io::AsyncReadExt::read(&mut sock, &mut buf).await;
                drop(sock);
            }
        });
        let url = format!("http://{addr}").parse().unwrap();
        let client = kube::Client::try_from(kube::Config::new(url)).unwrap();
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client, "ns");
        let e = api.get_opt("a").await.unwrap_err();
        server.abort();
        let plain = e.to_string();
        let (_, text, code) = api_reason(&e);
        assert_eq!(code, 0);
        assert!(text.starts_with(&plain), "{text}");
        assert!(
            text.len() > plain.len() && text.to_lowercase().contains("connection"),
            "the cause is named: {plain} -> {text}"
        );
        eprintln!("{plain}\n  -> {text}");
        // Each cause once.
        let parts: Vec<&str> = text.split(": ").collect();
        let mut seen = std::collections::HashSet::new();
        assert!(parts.iter().all(|p| seen.insert(*p)), "{text}");
    }
}
