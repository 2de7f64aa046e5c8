//! Public keys from the verification Secret, and the raw signature check Flux's cosign verifier
//! does with them (`signature.LoadVerifier(key, crypto.SHA256)`).

use std::collections::BTreeMap;
use std::fmt;

use ed25519_dalek::Verifier as _;
use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
use rsa::pkcs1::DecodeRsaPublicKey as _;
use sha2::Digest as _;
use spki::ObjectIdentifier;

use super::VerifyError;

/// Secret data keys holding cosign public keys end with this.
pub const KEY_SUFFIX: &str = ".pub";
/// At most this many `.pub` keys are read (each signature is checked against each key).
pub const MAX_KEYS: usize = 64;

const OID_EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const OID_P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const OID_P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
const OID_P521: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.35");
const OID_P224: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.33");
const OID_ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");
const OID_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");

/// The algorithm of a [`CosignKey`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlgorithm {
    EcdsaP256,
    EcdsaP384,
    Ed25519,
    Rsa,
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyAlgorithm::EcdsaP256 => "ECDSA P-256",
            KeyAlgorithm::EcdsaP384 => "ECDSA P-384",
            KeyAlgorithm::Ed25519 => "Ed25519",
            KeyAlgorithm::Rsa => "RSA",
        })
    }
}

#[derive(Clone)]
enum Key {
    P256(p256::ecdsa::VerifyingKey),
    P384(p384::ecdsa::VerifyingKey),
    Ed25519(ed25519_dalek::VerifyingKey),
    Rsa(rsa::pkcs1v15::VerifyingKey<sha2::Sha256>),
}

/// A public key read from a `*.pub` entry of the verification Secret.
#[derive(Clone)]
pub struct CosignKey {
    name: String,
    key: Key,
}

impl fmt::Debug for CosignKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CosignKey")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm())
            .finish()
    }
}

impl CosignKey {
    /// Parses one PEM public key; `name` is the Secret data key, used in errors.
    pub fn from_pem(name: &str, pem: &[u8]) -> Result<CosignKey, VerifyError> {
        let invalid = |reason: String| VerifyError::InvalidKey {
            key: name.to_string(),
            reason,
        };
        let (label, der) = first_pem_block(pem).map_err(invalid)?;
        let key = match label.as_str() {
            "PUBLIC KEY" => parse_spki(name, &der)?,
            "RSA PUBLIC KEY" => {
                let public = rsa::RsaPublicKey::from_pkcs1_der(&der)
                    .map_err(|e| invalid(format!("invalid PKCS#1 RSA public key: {e}")))?;
                Key::Rsa(rsa::pkcs1v15::VerifyingKey::new(public))
            }
            other => {
                return Err(invalid(format!(
                    "unknown public key PEM type '{}'",
                    other.chars().take(64).collect::<String>()
                )));
            }
        };
        Ok(CosignKey {
            name: name.to_string(),
            key,
        })
    }

    /// The Secret data key this key came from.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn algorithm(&self) -> KeyAlgorithm {
        match self.key {
            Key::P256(_) => KeyAlgorithm::EcdsaP256,
            Key::P384(_) => KeyAlgorithm::EcdsaP384,
            Key::Ed25519(_) => KeyAlgorithm::Ed25519,
            Key::Rsa(_) => KeyAlgorithm::Rsa,
        }
    }

    /// Checks a raw signature over `message` the way sigstore's `LoadVerifier(key, SHA256)`
    /// does: ECDSA (ASN.1 DER signature) over SHA-256(message) on either curve, RSA PKCS#1 v1.5
    /// with SHA-256, pure Ed25519 over the message.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        match &self.key {
            Key::P256(key) => {
                let prehash = sha2::Sha256::digest(message);
                p256::ecdsa::Signature::from_der(signature)
                    .is_ok_and(|sig| key.verify_prehash(&prehash, &sig).is_ok())
            }
            Key::P384(key) => {
                let prehash = sha2::Sha256::digest(message);
                p384::ecdsa::Signature::from_der(signature)
                    .is_ok_and(|sig| key.verify_prehash(&prehash, &sig).is_ok())
            }
            Key::Ed25519(key) => ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|sig| key.verify(message, &sig).is_ok()),
            Key::Rsa(key) => {
                use rsa::signature::Verifier as _;
                rsa::pkcs1v15::Signature::try_from(signature)
                    .is_ok_and(|sig| key.verify(message, &sig).is_ok())
            }
        }
    }
}

/// Reads every Secret entry whose key ends in `.pub` as a PEM public key, in key order. An entry
/// that is not a supported public key fails the whole read, naming the entry; a Secret with no
/// `.pub` entry is an error too.
pub fn public_keys(data: &BTreeMap<String, Vec<u8>>) -> Result<Vec<CosignKey>, VerifyError> {
    let entries: Vec<_> = data
        .iter()
        .filter(|(name, _)| name.ends_with(KEY_SUFFIX))
        .collect();
    if entries.is_empty() {
        return Err(VerifyError::NoPublicKeys);
    }
    if entries.len() > MAX_KEYS {
        return Err(VerifyError::TooManyKeys {
            count: entries.len(),
        });
    }
    entries
        .into_iter()
        .map(|(name, pem)| CosignKey::from_pem(name, pem))
        .collect()
}

/// The label and DER bytes of the first PEM block, like Go's `pem.Decode` (text before the
/// block is skipped).
fn first_pem_block(text: &[u8]) -> Result<(String, Vec<u8>), String> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    const END: &[u8] = b"-----END ";
    let start = find(text, BEGIN).ok_or("PEM decoding failed: no PEM block")?;
    let rest = &text[start..];
    let end_marker = find(rest, END).ok_or("PEM decoding failed: no END line")?;
    let line_end = rest[end_marker..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(rest.len(), |p| end_marker + p);
    let block = &rest[..line_end];
    let (label, der) = pem_rfc7468::decode_vec(block.trim_ascii_end())
        .map_err(|e| format!("PEM decoding failed: {e}"))?;
    Ok((label.to_string(), der))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn parse_spki(name: &str, der: &[u8]) -> Result<Key, VerifyError> {
    let invalid = |reason: String| VerifyError::InvalidKey {
        key: name.to_string(),
        reason,
    };
    let unsupported = |algorithm: String| VerifyError::UnsupportedKey {
        key: name.to_string(),
        algorithm,
    };
    let spki = spki::SubjectPublicKeyInfoRef::try_from(der)
        .map_err(|e| invalid(format!("invalid SubjectPublicKeyInfo: {e}")))?;
    let bits = spki
        .subject_public_key
        .as_bytes()
        .ok_or_else(|| invalid("public key bit string has unused bits".to_string()))?;
    let oid = spki.algorithm.oid;
    if oid == OID_EC_PUBLIC_KEY {
        let curve = spki
            .algorithm
            .parameters_oid()
            .map_err(|e| invalid(format!("EC public key without a named curve: {e}")))?;
        if curve == OID_P256 {
            p256::ecdsa::VerifyingKey::from_sec1_bytes(bits)
                .map(Key::P256)
                .map_err(|_| invalid("invalid P-256 point".to_string()))
        } else if curve == OID_P384 {
            p384::ecdsa::VerifyingKey::from_sec1_bytes(bits)
                .map(Key::P384)
                .map_err(|_| invalid("invalid P-384 point".to_string()))
        } else if curve == OID_P521 {
            Err(unsupported("ECDSA P-521".to_string()))
        } else if curve == OID_P224 {
            Err(unsupported("ECDSA P-224".to_string()))
        } else {
            Err(unsupported(format!("ECDSA curve {curve}")))
        }
    } else if oid == OID_ED25519 {
        let bytes: &[u8; 32] = bits
            .try_into()
            .map_err(|_| invalid(format!("Ed25519 key of {} bytes", bits.len())))?;
        ed25519_dalek::VerifyingKey::from_bytes(bytes)
            .map(Key::Ed25519)
            .map_err(|_| invalid("invalid Ed25519 point".to_string()))
    } else if oid == OID_RSA {
        let public = rsa::RsaPublicKey::try_from(spki)
            .map_err(|e| invalid(format!("invalid RSA public key: {e}")))?;
        Ok(Key::Rsa(rsa::pkcs1v15::VerifyingKey::new(public)))
    } else {
        Err(unsupported(format!("algorithm {oid}")))
    }
}
