//! Where the SOPS keys of a Kustomization come from (Flux's `ImportKeys`).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};
use rflux_common::api::kustomization::Kustomization;
use rflux_sops::Keys;

/// Secret entries Flux reads as credentials of a cloud KMS or a Vault: refused here, by name.
const UNSUPPORTED_ENTRIES: [(&str, &str); 4] = [
    ("sops.vault-token", "HashiCorp Vault (hc_vault)"),
    ("sops.aws-kms", "AWS KMS"),
    ("sops.azure-kv", "Azure Key Vault"),
    ("sops.gcp-kms", "GCP KMS"),
];

/// Why the keys could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    /// The Secret does not exist (Flux reports the API's text as it is).
    #[error("secrets \"{0}\" not found")]
    NotFound(String),
    /// Reading the Secret failed.
    #[error("cannot get sops {what}Secret '{secret}': {source}")]
    Get {
        what: &'static str,
        secret: String,
        #[source]
        source: kube::Error,
    },
    /// An entry does not hold a usable key.
    #[error("failed to import '{entry}' data from sops decryption Secret '{secret}': {source}")]
    Import {
        entry: String,
        secret: String,
        #[source]
        source: rflux_sops::SopsError,
    },
    /// The Secret holds credentials of a key source this controller does not support.
    #[error(
        "sops decryption Secret '{secret}' holds '{entry}': the {provider} key source is not supported by this controller (supported: age identities in '*.agekey' entries, OpenPGP keys in '*.asc' entries)"
    )]
    Unsupported {
        secret: String,
        entry: String,
        provider: &'static str,
    },
}

/// Which Secret the keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `spec.decryption.secretRef`, in the Kustomization's namespace: every key kind.
    SecretRef { namespace: String, name: String },
    /// `--sops-age-secret`, in the runtime namespace: only its `*.agekey` entries.
    AgeSecret { namespace: String, name: String },
    /// No Secret: nothing can be decrypted (an encrypted object fails with the data-key error).
    None,
}

impl KeySource {
    /// Flux's choice: the Kustomization's own Secret, else the controller-wide age Secret.
    pub fn of(ks: &Kustomization, age_secret: Option<&(String, String)>) -> Option<KeySource> {
        let decryption = ks.spec.decryption.as_ref()?;
        Some(match (&decryption.secret_ref, age_secret) {
            (Some(r), _) => KeySource::SecretRef {
                namespace: ks.namespace().unwrap_or_default(),
                name: r.name.clone(),
            },
            (None, Some((ns, name))) => KeySource::AgeSecret {
                namespace: ns.clone(),
                name: name.clone(),
            },
            (None, None) => KeySource::None,
        })
    }
}

/// The keys for `ks`, read with the controller's own client (Flux does not impersonate this
/// read): `None` when `spec.decryption` is not set.
pub async fn load_keys(
    client: &Client,
    ks: &Kustomization,
    age_secret: Option<&(String, String)>,
) -> Result<Option<Keys>, KeysError> {
    let Some(source) = KeySource::of(ks, age_secret) else {
        return Ok(None);
    };
    let (namespace, name, what, only_age) = match &source {
        KeySource::SecretRef { namespace, name } => (namespace, name, "decryption ", false),
        KeySource::AgeSecret { namespace, name } => (namespace, name, "SOPS age decryption ", true),
        KeySource::None => return Ok(Some(Keys::default())),
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = match api.get_opt(name).await {
        Ok(Some(s)) => s,
        Ok(None) => return Err(KeysError::NotFound(name.clone())),
        Err(source) => {
            return Err(KeysError::Get {
                what,
                secret: format!("{namespace}/{name}"),
                source,
            });
        }
    };
    let data = secret.data.unwrap_or_default();
    keys_from_secret_data(&data, &format!("{namespace}/{name}"), only_age).map(Some)
}

/// Flux's rules for a key Secret's entries: `*.agekey` are age identity files, `*.asc` armored
/// OpenPGP private keys without a passphrase (only age ones when `only_age`); cloud and Vault
/// credentials are refused; other entries are ignored.
pub fn keys_from_secret_data(
    data: &BTreeMap<String, ByteString>,
    secret: &str,
    only_age: bool,
) -> Result<Keys, KeysError> {
    let mut keys = Keys::default();
    for (entry, value) in data {
        let import = |source| KeysError::Import {
            entry: entry.clone(),
            secret: secret.to_string(),
            source,
        };
        let text = || {
            std::str::from_utf8(&value.0)
                .map_err(|_| import(rflux_sops::SopsError::Key("not valid UTF-8".into())))
        };
        if entry.ends_with(".agekey") {
            keys.add_age_identities(text()?).map_err(import)?;
        } else if only_age {
            continue;
        } else if entry.ends_with(".asc") {
            keys.add_pgp_armored(text()?).map_err(import)?;
        } else if let Some((_, provider)) = UNSUPPORTED_ENTRIES.iter().find(|(n, _)| n == entry) {
            return Err(KeysError::Unsupported {
                secret: secret.to_string(),
                entry: entry.clone(),
                provider,
            });
        }
    }
    Ok(keys)
}

/// Keys from local files, for `kustomize-controller build --decrypt-key`: a file named
/// `*.asc` or holding an armored OpenPGP block is an OpenPGP secret key, any other an age
/// identity file.
pub fn keys_from_files(paths: &[std::path::PathBuf]) -> Result<Keys, String> {
    let mut keys = Keys::default();
    for p in paths {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let pgp = p.extension().is_some_and(|e| e == "asc") || text.contains("-----BEGIN PGP");
        let added = if pgp {
            keys.add_pgp_armored(&text)
        } else {
            keys.add_age_identities(&text)
        };
        added.map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(keys)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn data(entries: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    #[test]
    fn cloud_credentials_are_refused_by_provider_name() {
        for (entry, provider) in UNSUPPORTED_ENTRIES {
            let e = keys_from_secret_data(&data(&[(entry, "x")]), "apps/sops", false)
                .unwrap_err()
                .to_string();
            assert!(e.contains(provider) && e.contains(entry), "{e}");
        }
        // the age-only Secret of --sops-age-secret reads nothing else, as in Flux
        assert!(
            keys_from_secret_data(&data(&[("sops.aws-kms", "x")]), "flux-system/age", true).is_ok()
        );
    }

    #[test]
    fn a_bad_age_entry_names_the_entry_and_the_secret() {
        let e = keys_from_secret_data(&data(&[("k.agekey", "not a key")]), "apps/sops", false)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "failed to import 'k.agekey' data from sops decryption Secret 'apps/sops': "
            ),
            "{e}"
        );
        assert!(e.contains("unknown identity type"), "{e}");
        // other entries are ignored
        assert!(
            keys_from_secret_data(&data(&[("README", "hello")]), "apps/sops", false)
                .unwrap()
                .is_empty()
        );
    }
}
