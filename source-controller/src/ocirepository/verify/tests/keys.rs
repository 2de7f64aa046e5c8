use super::*;

#[test]
fn public_keys_reads_only_pub_entries_in_key_order() {
    let a = p256_pair("a");
    let b = p256_pair("b");
    let data = secret(&[
        ("z.pub", &a.pub_pem),
        (
            "cosign.key",
            b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n",
        ),
        ("a.pub", &b.pub_pem),
        ("notes.txt", b"hello"),
    ]);
    let keys = public_keys(&data).unwrap();
    let names: Vec<_> = keys.iter().map(|k| k.name()).collect();
    assert_eq!(names, ["a.pub", "z.pub"]);
    assert!(
        keys.iter()
            .all(|k| k.algorithm() == KeyAlgorithm::EcdsaP256)
    );
    // Each key is the one stored under its name.
    let msg = b"payload";
    assert!(keys[0].verifies(msg, &b.sign(msg)));
    assert!(!keys[0].verifies(msg, &a.sign(msg)));
    assert!(keys[1].verifies(msg, &a.sign(msg)));
}

#[test]
fn no_pub_entry_is_an_error() {
    let data = secret(&[("cosign.key", b"x"), ("pub", b"y"), ("key.pub.bak", b"z")]);
    assert_eq!(public_keys(&data).unwrap_err(), VerifyError::NoPublicKeys);
    assert_eq!(
        public_keys(&BTreeMap::new()).unwrap_err(),
        VerifyError::NoPublicKeys
    );
}

#[test]
fn bad_pem_names_the_secret_key() {
    let good = p256_pair("good");
    for (bad, why) in [
        (&b"not a pem at all"[..], "no PEM block"),
        (
            b"-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----\n",
            "PEM decoding",
        ),
        (b"-----BEGIN PUBLIC KEY-----\nMFkw\n", "no END line"),
    ] {
        let data = secret(&[("a.pub", &good.pub_pem), ("broken.pub", bad)]);
        let err = public_keys(&data).unwrap_err();
        let VerifyError::InvalidKey { key, reason } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(key, "broken.pub");
        assert!(reason.contains(why), "{reason}");
        assert!(err.to_string().contains("'broken.pub'"), "{err}");
    }
}

#[test]
fn wrong_pem_label_and_garbage_der_are_refused() {
    let der = ec_spki(
        P256,
        p256_pair("x")
            .signing
            .verifying_key()
            .to_encoded_point(false)
            .as_bytes(),
    );
    let err = CosignKey::from_pem("c.pub", &pem("CERTIFICATE", &der)).unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown public key PEM type 'CERTIFICATE'"),
        "{err}"
    );
    let err =
        CosignKey::from_pem("g.pub", &pem("PUBLIC KEY", b"\x30\x03\x02\x01\x01")).unwrap_err();
    assert!(
        matches!(err, VerifyError::InvalidKey { ref key, .. } if key == "g.pub"),
        "{err:?}"
    );
    // A point not on the curve.
    let mut point = vec![4u8];
    point.extend([7u8; 64]);
    let err = CosignKey::from_pem("p.pub", &pem("PUBLIC KEY", &ec_spki(P256, &point))).unwrap_err();
    assert!(err.to_string().contains("invalid P-256 point"), "{err}");
}

#[test]
fn text_before_the_pem_block_is_skipped_like_go() {
    let pair = p256_pair("lead");
    let mut text = b"# rotated 2026-01-01\n".to_vec();
    text.extend_from_slice(&pair.pub_pem);
    let key = CosignKey::from_pem("k.pub", &text).unwrap();
    assert!(key.verifies(b"m", &pair.sign(b"m")));
}

#[test]
fn p521_and_unknown_algorithms_are_refused_by_name() {
    let err = CosignKey::from_pem("big.pub", &pem("PUBLIC KEY", &ec_spki(P521, &[4u8; 133])))
        .unwrap_err();
    assert_eq!(
        err,
        VerifyError::UnsupportedKey {
            key: "big.pub".into(),
            algorithm: "ECDSA P-521".into()
        }
    );
    // X25519 (1.3.101.110) is a key-agreement key.
    let der = spki(&oid("2b656e"), &[9u8; 32]);
    let err = CosignKey::from_pem("x.pub", &pem("PUBLIC KEY", &der)).unwrap_err();
    assert!(err.to_string().contains("algorithm 1.3.101.110"), "{err}");
}

#[test]
fn p384_signatures_are_checked_over_sha256_like_flux() {
    use p384::ecdsa::signature::Signer as _;
    use p384::ecdsa::signature::hazmat::PrehashSigner as _;
    let signing =
        p384::ecdsa::SigningKey::from_slice(&[sha256(b"p384"), sha256(b"more")].concat()[..48])
            .unwrap();
    let point = signing.verifying_key().to_encoded_point(false);
    let key = CosignKey::from_pem(
        "p384.pub",
        &pem("PUBLIC KEY", &ec_spki(P384, point.as_bytes())),
    )
    .unwrap();
    assert_eq!(key.algorithm(), KeyAlgorithm::EcdsaP384);
    let msg = b"{\"critical\":{}}";
    // sigstore's LoadVerifier(key, SHA256): the digest is SHA-256 whatever the curve.
    let sig: p384::ecdsa::Signature = signing.sign_prehash(&sha256(msg)).unwrap();
    assert!(key.verifies(msg, sig.to_der().as_bytes()));
    // A SHA-384 signature (RustCrypto's default for P-384) is not what Flux checks.
    let sig384: p384::ecdsa::Signature = signing.sign(msg);
    assert!(!key.verifies(msg, sig384.to_der().as_bytes()));
    assert!(!key.verifies(b"other", sig.to_der().as_bytes()));
}

#[test]
fn ed25519_is_pure_ed25519_over_the_message() {
    use ed25519_dalek::Signer as _;
    let signing = ed25519_dalek::SigningKey::from_bytes(&sha256(b"ed"));
    let der = spki(&oid("2b6570"), signing.verifying_key().as_bytes());
    let key = CosignKey::from_pem("ed.pub", &pem("PUBLIC KEY", &der)).unwrap();
    assert_eq!(key.algorithm(), KeyAlgorithm::Ed25519);
    let msg = b"payload bytes";
    let sig = signing.sign(msg).to_bytes();
    assert!(key.verifies(msg, &sig));
    assert!(!key.verifies(b"payload byteS", &sig));
    let mut bad = sig;
    bad[10] ^= 1;
    assert!(!key.verifies(msg, &bad));
    assert!(!key.verifies(msg, &sig[..63]));
}

/// A deterministic RNG for RSA key generation in tests (SHA-256 in counter mode).
struct TestRng(u64);

impl rsa::rand_core::RngCore for TestRng {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.fill_bytes(&mut b);
        u32::from_le_bytes(b)
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill_bytes(&mut b);
        u64::from_le_bytes(b)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(32) {
            self.0 += 1;
            let block = sha256(&self.0.to_le_bytes());
            chunk.copy_from_slice(&block[..chunk.len()]);
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rsa::rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl rsa::rand_core::CryptoRng for TestRng {}

fn der_uint(bytes: &[u8]) -> Vec<u8> {
    let mut content = bytes.to_vec();
    if content.first().is_some_and(|b| b & 0x80 != 0) {
        content.insert(0, 0);
    }
    tlv(0x02, &content)
}

#[test]
fn rsa_pkcs1v15_sha256_in_both_pem_forms() {
    use rsa::signature::{SignatureEncoding as _, Signer as _};
    use rsa::traits::PublicKeyParts as _;
    let private = rsa::RsaPrivateKey::new(&mut TestRng(0), 1024).unwrap();
    let public = private.to_public_key();
    let mut body = der_uint(&public.n().to_bytes_be());
    body.extend(der_uint(&public.e().to_bytes_be()));
    let pkcs1 = tlv(0x30, &body);
    let mut alg = oid("2a864886f70d010101");
    alg.extend([0x05, 0x00]);
    let signer = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(private);
    let msg = b"rsa payload";
    let sig = signer.sign(msg).to_vec();
    for pem_text in [
        pem("PUBLIC KEY", &spki(&alg, &pkcs1)),
        pem("RSA PUBLIC KEY", &pkcs1),
    ] {
        let key = CosignKey::from_pem("rsa.pub", &pem_text).unwrap();
        assert_eq!(key.algorithm(), KeyAlgorithm::Rsa);
        assert!(key.verifies(msg, &sig));
        assert!(!key.verifies(b"rsa payloaD", &sig));
        let mut bad = sig.clone();
        bad[0] ^= 0x40;
        assert!(!key.verifies(msg, &bad));
    }
}

#[test]
fn too_many_keys_are_refused() {
    let pem_text = p256_pair("many").pub_pem;
    let data: BTreeMap<String, Vec<u8>> = (0..=MAX_KEYS)
        .map(|i| (format!("k{i}.pub"), pem_text.clone()))
        .collect();
    assert_eq!(
        public_keys(&data).unwrap_err(),
        VerifyError::TooManyKeys {
            count: MAX_KEYS + 1
        }
    );
    let data: BTreeMap<String, Vec<u8>> = data.into_iter().take(MAX_KEYS).collect();
    assert_eq!(public_keys(&data).unwrap().len(), MAX_KEYS);
}
