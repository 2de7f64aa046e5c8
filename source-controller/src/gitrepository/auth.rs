//! Credentials from `spec.secretRef` and `spec.proxySecretRef`, as pure functions over the
//! Secret's data.

use rflux_git::{Auth, SshAuth, TlsConfig};

/// Secret data (already base64-decoded).
pub use crate::source::context::SecretData;

/// Why the secret cannot be turned into credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("invalid '{0}' auth option: key is not valid UTF-8")]
    NotUtf8(String),
    #[error("invalid '{0}' auth option: 'username' must be set")]
    PasswordWithoutUsername(String),
    #[error("invalid auth options: basic auth and bearer token cannot be set at the same time")]
    BasicAndBearer,
    #[error("invalid TLS options: 'tls.crt' and 'tls.key' must be set together")]
    HalfClientCert,
    #[error("invalid '{0}' auth option: 'identity' and 'known_hosts' are required for SSH")]
    SshIncomplete(String),
    #[error(
        "secret has github app data but provider is not set to github: provider 'github' is not supported yet"
    )]
    GithubAppData,
    #[error("invalid proxy secret: 'address' is required")]
    ProxyNoAddress,
    #[error("the SSH private key ('identity') is encrypted but the secret has no 'password'")]
    EncryptedKeyWithoutPassword,
}

/// Whether a private key (OpenSSH or legacy PEM) is passphrase-protected.
pub fn ssh_key_is_encrypted(pem: &str) -> bool {
    use base64::Engine as _;
    if pem.contains("Proc-Type: 4,ENCRYPTED") || pem.contains("BEGIN ENCRYPTED PRIVATE KEY") {
        return true;
    }
    let Some(start) = pem.find("-----BEGIN OPENSSH PRIVATE KEY-----") else {
        return false;
    };
    let body: String = pem[start..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .map(str::trim)
        .collect();
    let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(body) else {
        return false;
    };
    const MAGIC: &[u8] = b"openssh-key-v1\0";
    let Some(rest) = raw.strip_prefix(MAGIC) else {
        return false;
    };
    let Some(len_bytes) = rest.get(..4) else {
        return false;
    };
    let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]) as usize;
    rest.get(4..4 + len).is_some_and(|cipher| cipher != b"none")
}

fn text(data: &SecretData, key: &str) -> Result<Option<String>, AuthError> {
    match data.get(key) {
        None => Ok(None),
        Some(b) => String::from_utf8(b.clone())
            .map(Some)
            .map_err(|_| AuthError::NotUtf8(key.to_string())),
    }
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// Credentials and TLS material for `url` from the secret data (`None`: no secretRef).
pub fn auth_from_secret(
    url: &str,
    data: Option<&SecretData>,
) -> Result<(Auth, TlsConfig), AuthError> {
    let Some(data) = data else {
        return Ok((Auth::None, TlsConfig::default()));
    };
    if data.contains_key("githubAppID") {
        return Err(AuthError::GithubAppData);
    }
    let ca = match non_empty(text(data, "ca.crt")?) {
        Some(c) => Some(c),
        None => non_empty(text(data, "caFile")?),
    };
    let cert = non_empty(text(data, "tls.crt")?);
    let key = non_empty(text(data, "tls.key")?);
    if cert.is_some() != key.is_some() {
        return Err(AuthError::HalfClientCert);
    }
    let tls = TlsConfig {
        ca_pem: ca,
        client_cert_pem: cert,
        client_key_pem: key,
    };
    if url.starts_with("ssh://") {
        let identity = non_empty(text(data, "identity")?);
        let known_hosts = non_empty(text(data, "known_hosts")?);
        let (Some(identity), Some(known_hosts)) = (identity, known_hosts) else {
            return Err(AuthError::SshIncomplete(url_redacted(url)));
        };
        let passphrase = non_empty(text(data, "password")?);
        if passphrase.is_none() && ssh_key_is_encrypted(&identity) {
            return Err(AuthError::EncryptedKeyWithoutPassword);
        }
        let auth = Auth::Ssh(SshAuth {
            private_key_pem: identity,
            passphrase,
            known_hosts,
            user: None,
        });
        return Ok((auth, tls));
    }
    let username = non_empty(text(data, "username")?);
    let password = non_empty(text(data, "password")?);
    let bearer = non_empty(text(data, "bearerToken")?);
    if bearer.is_some() && username.is_some() && password.is_some() {
        return Err(AuthError::BasicAndBearer);
    }
    if let Some(token) = bearer {
        return Ok((Auth::Bearer(token), tls));
    }
    match (username, password) {
        (Some(username), password) => Ok((
            Auth::Basic {
                username,
                password: password.unwrap_or_default(),
            },
            tls,
        )),
        (None, Some(_)) => Err(AuthError::PasswordWithoutUsername(url_redacted(url))),
        (None, None) => Ok((Auth::None, tls)),
    }
}

/// The proxy URL from a proxy secret (`address`, optional `username`/`password`).
pub fn proxy_from_secret(data: &SecretData) -> Result<String, AuthError> {
    let address = non_empty(text(data, "address")?).ok_or(AuthError::ProxyNoAddress)?;
    let username = non_empty(text(data, "username")?);
    let password = non_empty(text(data, "password")?);
    let Some(user) = username else {
        return Ok(address);
    };
    let Some((scheme, rest)) = address.split_once("://") else {
        return Ok(address);
    };
    let userinfo = match password {
        Some(p) => format!("{}:{}", percent_encode(&user), percent_encode(&p)),
        None => percent_encode(&user),
    };
    Ok(format!("{scheme}://{userinfo}@{rest}"))
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The URL without userinfo (for messages).
pub fn url_redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if rest.contains('/') {
        format!("{scheme}://{host}/{path}")
    } else {
        format!("{scheme}://{host}")
    }
}

/// Validates `spec.url` the way the controller needs it (`http`, `https` or `ssh` with a host).
pub fn validate_url(url: &str) -> Result<(), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("missing scheme".into());
    };
    if !matches!(scheme, "http" | "https" | "ssh") {
        return Err(format!("unsupported scheme '{scheme}'"));
    }
    let authority = rest.split('/').next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() {
        return Err("missing host".into());
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("invalid character in URL".into());
    }
    Ok(())
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
    fn basic_bearer_and_none() {
        let (a, _) = auth_from_secret(
            "https://h/r",
            Some(&data(&[("username", "u"), ("password", "p")])),
        )
        .unwrap();
        assert_eq!(
            a,
            Auth::Basic {
                username: "u".into(),
                password: "p".into()
            }
        );
        let (a, _) = auth_from_secret("https://h/r", Some(&data(&[("bearerToken", "t")]))).unwrap();
        assert_eq!(a, Auth::Bearer("t".into()));
        let (a, _) = auth_from_secret("https://h/r", None).unwrap();
        assert_eq!(a, Auth::None);
        assert_eq!(
            auth_from_secret(
                "https://h/r",
                Some(&data(&[
                    ("username", "u"),
                    ("password", "p"),
                    ("bearerToken", "t")
                ]))
            ),
            Err(AuthError::BasicAndBearer)
        );
        assert!(matches!(
            auth_from_secret("https://h/r", Some(&data(&[("password", "p")]))),
            Err(AuthError::PasswordWithoutUsername(_))
        ));
    }

    #[test]
    fn tls_material() {
        let (_, tls) = auth_from_secret(
            "https://h/r",
            Some(&data(&[
                ("caFile", "CA"),
                ("tls.crt", "C"),
                ("tls.key", "K"),
            ])),
        )
        .unwrap();
        assert_eq!(tls.ca_pem.as_deref(), Some("CA"));
        assert_eq!(tls.client_key_pem.as_deref(), Some("K"));
        let (_, tls) = auth_from_secret(
            "https://h/r",
            Some(&data(&[("caFile", "old"), ("ca.crt", "new")])),
        )
        .unwrap();
        assert_eq!(tls.ca_pem.as_deref(), Some("new"));
        assert_eq!(
            auth_from_secret("https://h/r", Some(&data(&[("tls.crt", "C")]))),
            Err(AuthError::HalfClientCert)
        );
    }

    #[test]
    fn ssh_needs_identity_and_known_hosts() {
        let (a, _) = auth_from_secret(
            "ssh://git@h/r",
            Some(&data(&[
                ("identity", "KEY"),
                ("known_hosts", "h ssh-ed25519 AAA"),
                ("password", "pp"),
            ])),
        )
        .unwrap();
        let Auth::Ssh(s) = a else { panic!("not ssh") };
        assert_eq!(s.private_key_pem, "KEY");
        assert_eq!(s.passphrase.as_deref(), Some("pp"));
        assert!(matches!(
            auth_from_secret("ssh://git@h/r", Some(&data(&[("identity", "KEY")]))),
            Err(AuthError::SshIncomplete(_))
        ));
    }

    fn openssh_key(cipher: &str) -> String {
        use base64::Engine as _;
        let mut raw = b"openssh-key-v1\0".to_vec();
        raw.extend_from_slice(&(cipher.len() as u32).to_be_bytes());
        raw.extend_from_slice(cipher.as_bytes());
        raw.extend_from_slice(&[0, 0, 0, 0]);
        let b64 = base64::engine::general_purpose::STANDARD.encode(raw);
        format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{b64}\n-----END OPENSSH PRIVATE KEY-----\n")
    }

    #[test]
    fn encrypted_ssh_key_needs_password() {
        assert!(ssh_key_is_encrypted(&openssh_key("aes256-ctr")));
        assert!(!ssh_key_is_encrypted(&openssh_key("none")));
        assert!(ssh_key_is_encrypted(
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n..."
        ));
        assert!(!ssh_key_is_encrypted("garbage"));
        let enc = openssh_key("aes256-ctr");
        assert_eq!(
            auth_from_secret(
                "ssh://git@h/r",
                Some(&data(&[("identity", &enc), ("known_hosts", "h k")]))
            ),
            Err(AuthError::EncryptedKeyWithoutPassword)
        );
        assert!(
            auth_from_secret(
                "ssh://git@h/r",
                Some(&data(&[
                    ("identity", &enc),
                    ("known_hosts", "h k"),
                    ("password", "p")
                ]))
            )
            .is_ok()
        );
    }

    #[test]
    fn proxy_and_urls() {
        assert_eq!(
            proxy_from_secret(&data(&[
                ("address", "http://proxy:3128"),
                ("username", "a b"),
                ("password", "p@ss")
            ]))
            .unwrap(),
            "http://a%20b:p%40ss@proxy:3128"
        );
        assert_eq!(
            proxy_from_secret(&data(&[])),
            Err(AuthError::ProxyNoAddress)
        );
        assert_eq!(
            url_redacted("https://user:secret@host/org/repo"),
            "https://host/org/repo"
        );
        assert!(validate_url("https://host/repo").is_ok());
        assert!(validate_url("ssh://git@host:22/repo").is_ok());
        assert!(validate_url("git@host:repo").is_err());
        assert!(validate_url("ftp://host/repo").is_err());
        assert!(validate_url("https:///repo").is_err());
        assert!(matches!(
            auth_from_secret("https://h/r", Some(&data(&[("githubAppID", "1")]))),
            Err(AuthError::GithubAppData)
        ));
    }
}
