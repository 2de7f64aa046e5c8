//! What the client a Kustomization applies with is made of: the remote cluster of
//! `spec.kubeConfig.secretRef` (sanitized: no plugins, no insecure TLS, no file references) and
//! the impersonated `spec.serviceAccountName` (or `--default-service-account`). The client
//! itself is built, and cached, by [`super::context::Context::apply_client`] (remote ones by
//! the pool of `crate::remote`, per cluster and kubeconfig revision).

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Config, ResourceExt};

/// Why the client for the target cluster could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig Secret could not be read.
    #[error("failed to get kubeconfig secret '{0}': {1}")]
    Secret(String, #[source] kube::Error),
    /// The Secret has none of the expected keys.
    #[error("kubeconfig secret '{name}' has no key {keys}")]
    MissingKey {
        /// `<namespace>/<name>` of the Secret.
        name: String,
        /// The keys that were looked for.
        keys: String,
    },
    /// The kubeconfig Secret does not exist.
    #[error("failed to get kubeconfig secret '{0}/{1}': secrets \"{1}\" not found")]
    SecretNotFound(String, String),
    /// The remote cluster is known to be unreachable (its circuit is open): the reconcile
    /// fails at once, until a probe finds the cluster back.
    #[error(
        "cluster {server} (kubeconfig secret '{secret}') is unreachable: {cause}; next connection attempt in {}s",
        retry_in.as_secs()
    )]
    Unreachable {
        /// The API server URL.
        server: String,
        /// `<namespace>/<name>` of the kubeconfig Secret.
        secret: String,
        /// The last connection error.
        cause: String,
        /// Time until the next probe.
        retry_in: Duration,
    },
    /// The kubeconfig is not valid.
    #[error("invalid kubeconfig: {0}")]
    Kubeconfig(String),
    /// The kubeconfig uses something this controller does not allow (plugins, insecure TLS,
    /// file references).
    #[error("kubeconfig not allowed: {0}")]
    NotAllowed(String),
    /// The client could not be built from the configuration.
    #[error("failed to build client: {0}")]
    Build(#[source] kube::Error),
    /// The fenced client could not be built.
    #[error("failed to build client: {0}")]
    Fence(#[source] rflux_common::runtime::client::ClientError),
}

impl ClientError {
    /// Whether the kubeconfig itself was refused (invalid or not allowed): a configuration
    /// error that retrying does not fix, reported as Stalled.
    pub fn is_refused(&self) -> bool {
        matches!(
            self,
            ClientError::Kubeconfig(_) | ClientError::NotAllowed(_)
        )
    }
}

/// The kubeconfig text in `secret`: the key `key` when given, else `value`, else `value.yaml`.
pub fn kubeconfig_from_secret(secret: &Secret, key: Option<&str>) -> Result<String, ClientError> {
    let keys: Vec<&str> = match key.filter(|k| !k.is_empty()) {
        Some(k) => vec![k],
        None => vec!["value", "value.yaml"],
    };
    let data = secret.data.as_ref();
    let string_data = secret.string_data.as_ref();
    for k in &keys {
        if let Some(b) = data.and_then(|d| d.get(*k)) {
            return String::from_utf8(b.0.clone())
                .map_err(|_| ClientError::Kubeconfig(format!("key '{k}' is not UTF-8")));
        }
        if let Some(s) = string_data.and_then(|d| d.get(*k)) {
            return Ok(s.clone());
        }
    }
    Err(ClientError::MissingKey {
        name: format!(
            "{}/{}",
            secret.namespace().unwrap_or_default(),
            secret.name_any()
        ),
        keys: keys
            .iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(" or "),
    })
}

/// A client configuration for a remote cluster from kubeconfig text, sanitized the way Flux
/// does: exec and auth-provider plugins and disabled TLS verification are refused (this
/// controller has no `--insecure-kubeconfig-*` flags), and so is every reference to a file
/// (see [`refuse_file_references`]); 10s connect timeout. Nothing is read from disk and no
/// request is sent for a refused kubeconfig.
pub async fn remote_config(text: &str) -> Result<Config, ClientError> {
    let kc = Kubeconfig::from_yaml(text).map_err(|e| ClientError::Kubeconfig(e.to_string()))?;
    refuse_file_references(&kc)?;
    let current = kc.current_context.clone().unwrap_or_default();
    let user = kc
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.clone());
    for a in &kc.auth_infos {
        if user.as_deref().is_some_and(|u| u != a.name) {
            continue;
        }
        if let Some(info) = &a.auth_info {
            if info.exec.is_some() {
                return Err(ClientError::NotAllowed(
                    "exec credential plugins are not allowed".into(),
                ));
            }
            if info.auth_provider.is_some() {
                return Err(ClientError::NotAllowed(
                    "auth-provider plugins are not allowed".into(),
                ));
            }
        }
    }
    if kc
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref())
        .any(|c| c.insecure_skip_tls_verify == Some(true))
    {
        return Err(ClientError::NotAllowed(
            "insecure-skip-tls-verify is not allowed".into(),
        ));
    }
    let mut cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| ClientError::Kubeconfig(e.to_string()))?;
    cfg.connect_timeout = Some(Duration::from_secs(10));
    Ok(cfg)
}

/// Refuses a kubeconfig from a tenant's Secret that names a file: `tokenFile`,
/// `client-certificate`, `client-key` (users) or `certificate-authority` (clusters). The
/// client would read them from the controller's own filesystem, so a tenant could send the
/// controller's ServiceAccount token to a server of its choice. Flux keeps only the inline
/// data of a kubeconfig; we refuse instead of dropping, so the tenant sees why. Every entry
/// is checked, not only the current context's: none of them has a use for a file.
pub fn refuse_file_references(kc: &Kubeconfig) -> Result<(), ClientError> {
    let refused = |kind: &str, name: &str, field: &str| {
        Err(ClientError::NotAllowed(format!(
            "{kind} '{name}' references a file ({field}): file references are not allowed, \
             use the inline -data fields or token instead"
        )))
    };
    for a in &kc.auth_infos {
        let Some(info) = &a.auth_info else { continue };
        if info.token_file.is_some() {
            return refused("user", &a.name, "tokenFile");
        }
        if info.client_certificate.is_some() {
            return refused("user", &a.name, "client-certificate");
        }
        if info.client_key.is_some() {
            return refused("user", &a.name, "client-key");
        }
    }
    for c in &kc.clusters {
        if c.cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            return refused("cluster", &c.name, "certificate-authority");
        }
    }
    Ok(())
}

/// `system:serviceaccount:<ns>:<sa>` for the spec's (or the default) service account.
pub fn impersonation_user(
    namespace: &str,
    spec_sa: Option<&str>,
    default_sa: &str,
) -> Option<String> {
    let sa = spec_sa.filter(|s| !s.is_empty()).unwrap_or(default_sa);
    (!sa.is_empty()).then(|| format!("system:serviceaccount:{namespace}:{sa}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn impersonation_prefers_spec_then_default() {
        assert_eq!(
            impersonation_user("ns", Some("deployer"), "dflt").as_deref(),
            Some("system:serviceaccount:ns:deployer")
        );
        assert_eq!(
            impersonation_user("ns", Some(""), "dflt").as_deref(),
            Some("system:serviceaccount:ns:dflt")
        );
        assert_eq!(impersonation_user("ns", None, ""), None);
    }

    fn secret(data: &[(&str, &str)]) -> Secret {
        use k8s_openapi::ByteString;
        let mut sec: Secret = serde_json::from_value(json!({
            "metadata": {"name": "kc", "namespace": "apps"}
        }))
        .unwrap();
        sec.data = Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        );
        sec
    }

    #[test]
    fn kubeconfig_key_order() {
        let both = secret(&[("value", "A"), ("value.yaml", "B"), ("custom", "C")]);
        assert_eq!(kubeconfig_from_secret(&both, None).unwrap(), "A");
        assert_eq!(kubeconfig_from_secret(&both, Some("custom")).unwrap(), "C");
        let yaml_only = secret(&[("value.yaml", "B")]);
        assert_eq!(kubeconfig_from_secret(&yaml_only, None).unwrap(), "B");
        let err = kubeconfig_from_secret(&yaml_only, Some("custom")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kubeconfig secret 'apps/kc' has no key 'custom'"
        );
        let err = kubeconfig_from_secret(&secret(&[]), None).unwrap_err();
        assert!(err.to_string().contains("'value' or 'value.yaml'"), "{err}");
    }

    fn kubeconfig(user: &str, cluster_extra: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:6443\n{cluster_extra}contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\nusers:\n- name: u\n  user:\n{user}"
        )
    }

    #[tokio::test]
    async fn remote_config_is_sanitized() {
        let ok = remote_config(&kubeconfig("    token: abc\n", ""))
            .await
            .unwrap();
        assert_eq!(ok.cluster_url.to_string(), "https://127.0.0.1:6443/");
        assert_eq!(ok.connect_timeout, Some(Duration::from_secs(10)));
        let exec = "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/true\n";
        let err = remote_config(&kubeconfig(exec, "")).await.unwrap_err();
        assert!(err.to_string().contains("exec"), "{err}");
        let insecure = "    insecure-skip-tls-verify: true\n";
        let err = remote_config(&kubeconfig("    token: abc\n", insecure))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("insecure"), "{err}");
        assert!(remote_config("not: [a kubeconfig").await.is_err());
    }

    /// A file reference in any user or cluster entry is refused before the kubeconfig is
    /// loaded, even where inline data would take precedence, and even when the file exists.
    #[tokio::test]
    async fn remote_config_refuses_file_references() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "controller-token").unwrap();
        let t = token.display();
        for (user, cluster, field) in [
            (format!("    tokenFile: {t}\n"), String::new(), "tokenFile"),
            (
                format!("    token: abc\n    tokenFile: {t}\n"),
                String::new(),
                "tokenFile",
            ),
            (
                format!("    client-certificate: {t}\n    client-key-data: Zm9v\n"),
                String::new(),
                "client-certificate",
            ),
            (
                format!("    client-certificate-data: Zm9v\n    client-key: {t}\n"),
                String::new(),
                "client-key",
            ),
            (
                "    token: abc\n".to_string(),
                format!("    certificate-authority: {t}\n"),
                "certificate-authority",
            ),
        ] {
            let err = remote_config(&kubeconfig(&user, &cluster))
                .await
                .unwrap_err();
            assert!(err.is_refused(), "{field}: {err}");
            let msg = err.to_string();
            assert!(
                msg.contains(field) && msg.contains("file references are not allowed"),
                "{field}: {msg}"
            );
        }
        // A user that the current context does not select is checked too.
        let other = format!(
            "{}- name: other\n  user:\n    tokenFile: {t}\n",
            kubeconfig("    token: abc\n", "")
        );
        let err = remote_config(&other).await.unwrap_err();
        assert!(err.to_string().contains("user 'other'"), "{err}");
        // Inline data stays allowed.
        let inline = "    client-certificate-data: Zm9v\n    client-key-data: YmFy\n";
        let ca = "    certificate-authority-data: Zm9v\n";
        let kc = Kubeconfig::from_yaml(&kubeconfig(inline, ca)).unwrap();
        assert!(refuse_file_references(&kc).is_ok());
    }
}
