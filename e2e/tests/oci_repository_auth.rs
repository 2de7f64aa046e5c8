//! OCIRepository credentials and transport against real registries (distribution v3.1.2):
//! htpasswd Basic with a `kubernetes.io/dockerconfigjson` Secret (and through a ServiceAccount's
//! `imagePullSecrets`), the Bearer token flow, HTTPS with `certSecretRef` (CA, and mTLS with a
//! client certificate), and a cloud `provider` without a pull Secret, refused.

#![allow(clippy::unwrap_used)]

mod oci_common;
mod support;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use oci_common::*;
use rflux_e2e::ControlPlane;
use rflux_e2e::registry::push::push_artifact;
use rflux_e2e::registry::{Registry, RegistryMode};
use serde_json::json;
use source_controller::ocirepository::OciSettings;

const SOURCE: &str = "https://git.example/app.git";
const REV: &str = "main@sha1:3333333333333333333333333333333333333333";

fn skip() -> bool {
    let reason = rflux_e2e::registry::skip_reason().or_else(|| {
        rflux_e2e::registry::push::flux_cli()
            .err()
            .map(|e| e.to_string())
    });
    if let Some(r) = reason {
        eprintln!("skipped: {r}");
        return true;
    }
    false
}

fn creds() -> (String, String) {
    ("puller".to_string(), "s3cret-pass".to_string())
}

#[tokio::test]
async fn ocirepository_authenticates_like_flux() {
    if skip() {
        return;
    }
    let cp = ControlPlane::shared().await.unwrap();
    let _lock = support::lock_crds().await;
    let h = OciHarness::start(cp, "ociauth", OciSettings::default()).await;
    let content = content_dir(&[("cm.yaml", "kind: ConfigMap\n")]);
    let (user, password) = creds();

    // htpasswd (Basic): without credentials the registry answers 401 and the digest cannot be
    // determined; with a dockerconfigjson Secret it works; a Secret of another type is ignored.
    let basic = Registry::start(RegistryMode::Htpasswd {
        user: user.clone(),
        password: password.clone(),
    })
    .unwrap();
    let d = push_artifact(&basic, "team/app", "latest", content.path(), SOURCE, REV).unwrap();
    let url = basic.url("team/app");
    h.create("anon", &url, json!({})).await;
    let anon = h.wait_failed("anon", "OCIArtifactPullFailed").await;
    let msg = &condition(&anon, "Ready").unwrap().message;
    assert!(
        msg.starts_with("failed to determine artifact digest:"),
        "{msg}"
    );
    assert!(!msg.contains(&password));
    h.pull_secret("pull", &basic.host(), &user, &password).await;
    h.create("basic", &url, json!({"secretRef": {"name": "pull"}}))
        .await;
    h.wait_ready("basic", &format!("latest@{d}")).await;
    h.secret("opaque", "Opaque", json!({".dockerconfigjson": "{}"}))
        .await;
    h.create("opaque", &url, json!({"secretRef": {"name": "opaque"}}))
        .await;
    h.wait_failed("opaque", "OCIArtifactPullFailed").await;
    // A missing Secret: AuthenticationFailed.
    h.create("missing", &url, json!({"secretRef": {"name": "nope"}}))
        .await;
    let missing = h.wait_failed("missing", "AuthenticationFailed").await;
    assert!(
        condition(&missing, "Ready")
            .unwrap()
            .message
            .contains("auth secret 'nope' not found")
    );
    // The ServiceAccount's imagePullSecrets join the keychain.
    let sas: Api<ServiceAccount> = Api::namespaced(h.client.clone(), &h.ns);
    let sa: ServiceAccount = serde_json::from_value(json!({
        "metadata": {"name": "puller"}, "imagePullSecrets": [{"name": "pull"}]
    }))
    .unwrap();
    sas.create(&PostParams::default(), &sa).await.unwrap();
    h.create("via-sa", &url, json!({"serviceAccountName": "puller"}))
        .await;
    h.wait_ready("via-sa", &format!("latest@{d}")).await;
    // With a pull Secret, a cloud provider is not used (Flux's rule); without one it is refused.
    h.create(
        "aws-with-secret",
        &url,
        json!({"provider": "aws", "secretRef": {"name": "pull"}}),
    )
    .await;
    h.wait_ready("aws-with-secret", &format!("latest@{d}"))
        .await;
    h.create("gcp", &url, json!({"provider": "gcp"})).await;
    let gcp = h.wait("gcp", "Stalled", |o| is_true(o, "Stalled")).await;
    assert!(
        condition(&gcp, "Ready")
            .unwrap()
            .message
            .starts_with("failed to get credential from gcp:")
    );

    // Bearer: the token flow against the realm, with the pull Secret's credentials.
    let bearer = Registry::start(RegistryMode::Bearer {
        user: user.clone(),
        password: password.clone(),
    })
    .unwrap();
    let d2 = push_artifact(&bearer, "team/app", "v1", content.path(), SOURCE, REV).unwrap();
    h.pull_secret("bearer-pull", &bearer.host(), &user, &password)
        .await;
    h.create(
        "bearer",
        &bearer.url("team/app"),
        json!({"secretRef": {"name": "bearer-pull"}, "ref": {"tag": "v1"}}),
    )
    .await;
    h.wait_ready("bearer", &format!("v1@{d2}")).await;
    let pulls: Vec<_> = bearer
        .token_requests()
        .into_iter()
        .filter(|r| r.authorized && r.scopes.iter().any(|s| s == "repository:team/app:pull"))
        .collect();
    assert!(
        !pulls.is_empty(),
        "a pull token was issued to the Secret's user"
    );

    // HTTPS: refused without the CA, accepted with certSecretRef ca.crt; mTLS with the pair.
    let https = Registry::start(RegistryMode::Https).unwrap();
    let d3 = push_artifact(&https, "app", "latest", content.path(), SOURCE, REV).unwrap();
    h.create("https-no-ca", &https.url("app"), json!({})).await;
    h.wait_failed("https-no-ca", "OCIArtifactPullFailed").await;
    h.secret("ca", "Opaque", json!({"ca.crt": https.ca_pem().unwrap()}))
        .await;
    h.create(
        "https",
        &https.url("app"),
        json!({"certSecretRef": {"name": "ca"}}),
    )
    .await;
    h.wait_ready("https", &format!("latest@{d3}")).await;
    // `insecure` without a CA skips verification (Flux's rule).
    h.create(
        "https-insecure",
        &https.url("app"),
        json!({"insecure": true}),
    )
    .await;
    h.wait_ready("https-insecure", &format!("latest@{d3}"))
        .await;

    let mtls = Registry::start(RegistryMode::Mtls).unwrap();
    let d4 = push_artifact(&mtls, "app", "latest", content.path(), SOURCE, REV).unwrap();
    h.create(
        "mtls-ca-only",
        &mtls.url("app"),
        json!({"certSecretRef": {"name": "mtls-ca"}}),
    )
    .await;
    h.secret(
        "mtls-ca",
        "Opaque",
        json!({"ca.crt": mtls.ca_pem().unwrap()}),
    )
    .await;
    h.wait_failed("mtls-ca-only", "OCIArtifactPullFailed").await;
    h.secret(
        "mtls",
        "kubernetes.io/tls",
        json!({
            "ca.crt": mtls.ca_pem().unwrap(),
            "tls.crt": mtls.client_cert_pem().unwrap(),
            "tls.key": mtls.client_key_pem().unwrap(),
        }),
    )
    .await;
    h.create(
        "mtls",
        &mtls.url("app"),
        json!({"certSecretRef": {"name": "mtls"}}),
    )
    .await;
    h.wait_ready("mtls", &format!("latest@{d4}")).await;
    h.shutdown().await;
}
