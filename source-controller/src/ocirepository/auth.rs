//! Credentials, TLS and proxy settings of an OCIRepository, as pure functions over the Secrets'
//! data: the image pull Secret (`secretRef` and the ServiceAccount's `imagePullSecrets`),
//! `certSecretRef` and `proxySecretRef`.

use rflux_oci::auth::Keychain;
use rflux_oci::transport::Proxy;

use crate::source::SecretData;

/// The Secret type whose `.dockerconfigjson` key holds Docker credentials.
pub const DOCKER_CONFIG_JSON_TYPE: &str = "kubernetes.io/dockerconfigjson";
/// The legacy Secret type whose `.dockercfg` key holds Docker credentials.
pub const DOCKER_CFG_TYPE: &str = "kubernetes.io/dockercfg";

/// Why a Secret cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("invalid pull secret '{secret}': {detail}")]
    PullSecret { secret: String, detail: String },
    #[error("'{key}' in secret '{secret}' is not valid UTF-8")]
    NotUtf8 { secret: String, key: String },
    #[error("secret '{secret}' has '{present}' but not '{missing}'")]
    Incomplete {
        secret: String,
        present: &'static str,
        missing: &'static str,
    },
    #[error("secret '{secret}' has no CA certificate nor client certificate ('ca.crt', 'tls.crt')")]
    NoTls { secret: String },
    #[error("invalid proxy secret '{secret}': key 'address' is missing")]
    NoProxyAddress { secret: String },
}

/// The credentials of one image pull Secret. Like Flux's keychain, only the Docker config types
/// yield credentials; Secrets of other types are ignored (an anonymous keychain).
pub fn pull_keychain(
    secret: &str,
    type_: Option<&str>,
    data: &SecretData,
) -> Result<Keychain, AuthError> {
    let bad = |detail: String| AuthError::PullSecret {
        secret: secret.to_string(),
        detail,
    };
    match type_ {
        Some(DOCKER_CONFIG_JSON_TYPE) => match data.get(".dockerconfigjson") {
            Some(bytes) => Keychain::from_dockerconfigjson(bytes).map_err(|e| bad(e.to_string())),
            None => Err(bad("key '.dockerconfigjson' is missing".into())),
        },
        Some(DOCKER_CFG_TYPE) => match data.get(".dockercfg") {
            Some(bytes) => Keychain::from_dockercfg(bytes).map_err(|e| bad(e.to_string())),
            None => Err(bad("key '.dockercfg' is missing".into())),
        },
        _ => Ok(Keychain::anonymous()),
    }
}

fn text(secret: &str, data: &SecretData, key: &str) -> Result<Option<String>, AuthError> {
    match data.get(key) {
        None => Ok(None),
        Some(b) => String::from_utf8(b.clone())
            .map(Some)
            .map_err(|_| AuthError::NotUtf8 {
                secret: secret.to_string(),
                key: key.to_string(),
            }),
    }
}

/// The TLS material of `certSecretRef`: `ca.crt` (added to the system roots) and/or the client
/// pair `tls.crt` + `tls.key`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsMaterial {
    pub ca_pem: Option<String>,
    pub client_cert_pem: Option<String>,
    pub client_key_pem: Option<String>,
}

/// Reads `certSecretRef`'s data.
pub fn tls_material(secret: &str, data: &SecretData) -> Result<TlsMaterial, AuthError> {
    let ca = text(secret, data, "ca.crt")?;
    let cert = text(secret, data, "tls.crt")?;
    let key = text(secret, data, "tls.key")?;
    let incomplete = |present, missing| AuthError::Incomplete {
        secret: secret.to_string(),
        present,
        missing,
    };
    match (&cert, &key) {
        (Some(_), None) => return Err(incomplete("tls.crt", "tls.key")),
        (None, Some(_)) => return Err(incomplete("tls.key", "tls.crt")),
        _ => {}
    }
    if ca.is_none() && cert.is_none() {
        return Err(AuthError::NoTls {
            secret: secret.to_string(),
        });
    }
    Ok(TlsMaterial {
        ca_pem: ca,
        client_cert_pem: cert,
        client_key_pem: key,
    })
}

/// Reads `proxySecretRef`'s data: `address` (required), `username`, `password`.
pub fn proxy(secret: &str, data: &SecretData) -> Result<Proxy, AuthError> {
    let address = text(secret, data, "address")?
        .filter(|a| !a.is_empty())
        .ok_or_else(|| AuthError::NoProxyAddress {
            secret: secret.to_string(),
        })?;
    Ok(Proxy {
        address,
        username: text(secret, data, "username")?,
        password: text(secret, data, "password")?,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn data(kv: &[(&str, &str)]) -> SecretData {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn only_docker_config_secrets_yield_credentials() {
        let json = r#"{"auths":{"127.0.0.1:5000":{"username":"u","password":"p"}}}"#;
        let k = pull_keychain(
            "s",
            Some(DOCKER_CONFIG_JSON_TYPE),
            &data(&[(".dockerconfigjson", json)]),
        )
        .unwrap();
        assert!(!k.is_anonymous());
        let opaque =
            pull_keychain("s", Some("Opaque"), &data(&[(".dockerconfigjson", json)])).unwrap();
        assert!(opaque.is_anonymous(), "other types are ignored, like Flux");
        let missing = pull_keychain("s", Some(DOCKER_CONFIG_JSON_TYPE), &data(&[])).unwrap_err();
        assert!(
            missing.to_string().contains(".dockerconfigjson"),
            "{missing}"
        );
        let garbage = pull_keychain(
            "s",
            Some(DOCKER_CONFIG_JSON_TYPE),
            &data(&[(".dockerconfigjson", "{")]),
        )
        .unwrap_err();
        assert!(
            garbage.to_string().starts_with("invalid pull secret 's'"),
            "{garbage}"
        );
    }

    #[test]
    fn tls_material_needs_a_ca_or_a_complete_pair() {
        assert_eq!(
            tls_material("t", &data(&[("ca.crt", "CA")]))
                .unwrap()
                .ca_pem
                .as_deref(),
            Some("CA")
        );
        assert!(tls_material("t", &data(&[("tls.crt", "C"), ("tls.key", "K")])).is_ok());
        assert!(matches!(
            tls_material("t", &data(&[("tls.crt", "C")])),
            Err(AuthError::Incomplete { .. })
        ));
        assert!(matches!(
            tls_material("t", &data(&[])),
            Err(AuthError::NoTls { .. })
        ));
    }

    #[test]
    fn proxy_needs_an_address() {
        let p = proxy(
            "p",
            &data(&[("address", "http://proxy:3128"), ("username", "u")]),
        )
        .unwrap();
        assert_eq!(p.address, "http://proxy:3128");
        assert_eq!(p.username.as_deref(), Some("u"));
        assert!(proxy("p", &data(&[("username", "u")])).is_err());
    }
}
