//! OCIRepository credentials and transport against real registries (distribution v3.1.2):
//! htpasswd Basic with a `kubernetes.io/dockerconfigjson` Secret (and through a ServiceAccount's
//! `imagePullSecrets`), the Bearer token flow, HTTPS with `certSecretRef` (CA, and mTLS with a
//! client certificate), and a cloud `provider` without a pull Secret, refused.

#![allow(clippy::unwrap_used)]

mod oci_common;
mod support;

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use oci_common::*;
use rflux_e2e::ControlPlane;
use rflux_e2e::registry::push::push_artifact;
use rflux_e2e::registry::{Registry, RegistryMode};
use serde_json::json;
use source_controller::ocirepository::OciSettings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// A forward HTTP proxy: each connection's first request names its target in absolute form
/// (`GET http://host:port/… HTTP/1.1`); the bytes go to that target unchanged (Go's server
/// accepts absolute-form requests) and back. The host `registry.proxy.test`, which nothing else
/// resolves, is reached at 127.0.0.1. Records each connection's first request line and whether
/// it carried `Proxy-Authorization` with `expected_auth`.
async fn forward_proxy(
    expected_auth: String,
) -> (std::net::SocketAddr, Arc<Mutex<Vec<(String, bool)>>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = l.accept().await {
            let record = record.clone();
            let expected_auth = expected_auth.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                    let Ok(n) = client.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                }
                let text = String::from_utf8_lossy(&head).to_string();
                let line = text.lines().next().unwrap_or_default().to_string();
                let authed = text.lines().any(|l| {
                    l.to_ascii_lowercase().starts_with("proxy-authorization:")
                        && l.ends_with(&expected_auth)
                });
                record.lock().unwrap().push((line.clone(), authed));
                let target = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|u| u.strip_prefix("http://"))
                    .and_then(|u| u.split('/').next())
                    .unwrap_or_default()
                    .replace(PROXY_ONLY_HOST, "127.0.0.1");
                let Ok(mut upstream) = tokio::net::TcpStream::connect(&target).await else {
                    return;
                };
                if upstream.write_all(&head).await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (addr, seen)
}

/// A host name only the test proxy resolves.
const PROXY_ONLY_HOST: &str = "registry.proxy.test";

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

    // proxySecretRef: the registry is named by a host only the proxy resolves, so Ready proves
    // that every request went through the proxy; each connection carried its credentials.
    let plain = Registry::start(RegistryMode::Http).unwrap();
    let dp = push_artifact(&plain, "via/proxy", "latest", content.path(), SOURCE, REV).unwrap();
    let basic_auth = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("proxy-user:proxy-pass")
    );
    let (proxy_addr, seen) = forward_proxy(basic_auth).await;
    h.secret(
        "proxy",
        "Opaque",
        json!({"address": format!("http://{proxy_addr}"), "username": "proxy-user",
               "password": "proxy-pass"}),
    )
    .await;
    let via_proxy = format!("oci://{PROXY_ONLY_HOST}:{}/via/proxy", plain.port());
    h.create(
        "proxied",
        &via_proxy,
        json!({"proxySecretRef": {"name": "proxy"}, "insecure": true}),
    )
    .await;
    h.wait_ready("proxied", &format!("latest@{dp}")).await;
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|(l, _)| l.starts_with(&format!("GET http://{PROXY_ONLY_HOST}:"))),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .filter(|(l, _)| l.starts_with("GET ") || l.starts_with("HEAD "))
            .all(|(_, authed)| *authed),
        "proxy credentials on every request: {seen:?}"
    );
    h.secret("no-address", "Opaque", json!({"username": "u"}))
        .await;
    h.create(
        "proxy-no-address",
        &via_proxy,
        json!({"proxySecretRef": {"name": "no-address"}}),
    )
    .await;
    let bad = h
        .wait_failed("proxy-no-address", "AuthenticationFailed")
        .await;
    assert!(
        condition(&bad, "Ready")
            .unwrap()
            .message
            .starts_with("failed to get proxy address:"),
        "{:?}",
        condition(&bad, "Ready")
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
