//! The RBAC checks of `install_manifests.rs`: what each controller must be allowed to do with
//! the source kinds (GitRepository, OCIRepository), checked on the built ClusterRole and, on a
//! cluster, by the API server's authorizer (SubjectAccessReview).
#![allow(dead_code, clippy::unwrap_used)]

use kube::api::Api;
use serde_json::Value;

/// What source-controller does with its source kinds: `(verb, resource)` in
/// `source.toolkit.fluxcd.io` (Flux's role grants every verb on every resource of the group).
const SOURCE_CONTROLLER_NEEDS: &[(&str, &str)] = &[
    ("get", "gitrepositories"),
    ("list", "gitrepositories"),
    ("watch", "gitrepositories"),
    ("patch", "gitrepositories"),
    ("update", "gitrepositories/finalizers"),
    ("patch", "gitrepositories/status"),
    ("get", "ocirepositories"),
    ("list", "ocirepositories"),
    ("watch", "ocirepositories"),
    ("update", "ocirepositories"),
    ("patch", "ocirepositories"),
    ("update", "ocirepositories/finalizers"),
    ("update", "ocirepositories/status"),
    ("patch", "ocirepositories/status"),
];

/// What kustomize-controller does with the sources: reads and watches them.
const KUSTOMIZE_CONTROLLER_NEEDS: &[(&str, &str)] = &[
    ("get", "gitrepositories"),
    ("list", "gitrepositories"),
    ("watch", "gitrepositories"),
    ("get", "ocirepositories"),
    ("list", "ocirepositories"),
    ("watch", "ocirepositories"),
];

/// Whether the RBAC `rule` allows `verb` on `group`/`resource` (`*` wildcards included).
fn rule_allows(rule: &Value, group: &str, resource: &str, verb: &str) -> bool {
    let has = |field: &str, want: &str| {
        rule[field]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == want || x == "*"))
    };
    has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
}

/// Asks the API server whether service account `flux-system/<sa>` may `verb` `resource` in
/// `source.toolkit.fluxcd.io` (a SubjectAccessReview: the real authorizer decides).
async fn sa_allowed(client: &kube::Client, sa: &str, verb: &str, resource: &str) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_string())),
        None => (resource, None),
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:flux-system:{sa}")),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:flux-system".into(),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                group: Some("source.toolkit.fluxcd.io".into()),
                resource: Some(resource.into()),
                subresource,
                verb: Some(verb.into()),
                namespace: Some("default".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let done = api
        .create(&kube::api::PostParams::default(), &review)
        .await
        .unwrap_or_else(|e| panic!("SubjectAccessReview for {sa} {verb} {resource}: {e}"));
    done.status.is_some_and(|s| s.allowed)
}

/// The `crd-controller` role's `rules` allow every need of both controllers.
pub fn assert_role_covers_the_sources(rules: &[Value]) {
    for (verb, resource) in SOURCE_CONTROLLER_NEEDS
        .iter()
        .chain(KUSTOMIZE_CONTROLLER_NEEDS)
    {
        assert!(
            rules
                .iter()
                .any(|r| rule_allows(r, "source.toolkit.fluxcd.io", resource, verb)),
            "crd-controller must allow {verb} on {resource}"
        );
    }
}

/// On the installed cluster, each controller's service account may do its work with the
/// source kinds, OCIRepository included, and a stranger (`flux-system/default`) may not.
pub async fn assert_controllers_may_use_the_sources(client: &kube::Client) {
    for (sa, needs) in [
        ("source-controller", SOURCE_CONTROLLER_NEEDS),
        ("kustomize-controller", KUSTOMIZE_CONTROLLER_NEEDS),
    ] {
        for (verb, resource) in needs {
            assert!(
                sa_allowed(client, sa, verb, resource).await,
                "{sa} may not {verb} {resource} after the install"
            );
        }
    }
    assert!(
        !sa_allowed(client, "default", "list", "ocirepositories").await,
        "flux-system/default must not read OCIRepositories"
    );
}
