//! Unit tests: keys generated in-test (fixed seeds, so failures reproduce), payloads and
//! manifests written exactly as cosign writes them.

mod bundle;
mod classic;
mod keys;

use std::collections::BTreeMap;

use base64::Engine as _;
use sha2::Digest as _;

use super::*;

pub(super) const DIGEST: &str =
    "sha256:00a5dd81461ee16963a66d4132c578d37cde1153037aa8f6fa430f8a0f46536e";
pub(super) const OTHER_DIGEST: &str =
    "sha256:1111111111111111111111111111111111111111111111111111111111111111";

pub(super) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(super) fn sha256(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

/// A DER TLV with the definite length form.
pub(super) fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// DER OBJECT IDENTIFIER content bytes given in hex.
pub(super) fn oid(hex_content: &str) -> Vec<u8> {
    tlv(0x06, &hex::decode(hex_content).unwrap())
}

pub(super) const EC_PUBLIC_KEY: &str = "2a8648ce3d0201";
pub(super) const P256: &str = "2a8648ce3d030107";
pub(super) const P384: &str = "2b81040022";
pub(super) const P521: &str = "2b81040023";

/// SubjectPublicKeyInfo DER, written by hand (independent of the parser under test).
pub(super) fn spki(algorithm: &[u8], key: &[u8]) -> Vec<u8> {
    let mut bits = vec![0u8];
    bits.extend_from_slice(key);
    let mut body = tlv(0x30, algorithm);
    body.extend(tlv(0x03, &bits));
    tlv(0x30, &body)
}

pub(super) fn ec_spki(curve: &str, point: &[u8]) -> Vec<u8> {
    let mut alg = oid(EC_PUBLIC_KEY);
    alg.extend(oid(curve));
    spki(&alg, point)
}

pub(super) fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    let body = b64(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out.into_bytes()
}

/// A P-256 key pair from a seed, as `cosign generate-key-pair` would make (its public half
/// as the PEM `cosign.pub` holds).
pub(super) struct P256Pair {
    pub signing: p256::ecdsa::SigningKey,
    pub pub_pem: Vec<u8>,
}

pub(super) fn p256_pair(seed: &str) -> P256Pair {
    let signing = p256::ecdsa::SigningKey::from_slice(&sha256(seed.as_bytes())).unwrap();
    let point = signing.verifying_key().to_encoded_point(false);
    P256Pair {
        pub_pem: pem("PUBLIC KEY", &ec_spki(P256, point.as_bytes())),
        signing,
    }
}

impl P256Pair {
    /// ECDSA P-256 with SHA-256, ASN.1 DER: what cosign puts in the annotation (base64).
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        use p256::ecdsa::signature::Signer as _;
        let sig: p256::ecdsa::Signature = self.signing.sign(message);
        sig.to_der().as_bytes().to_vec()
    }

    pub fn key(&self, name: &str) -> CosignKey {
        CosignKey::from_pem(name, &self.pub_pem).unwrap()
    }
}

pub(super) fn secret(entries: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect()
}
