use super::super::bundle::pae;
use super::*;

/// The in-toto statement `cosign sign` (new bundle format) signs.
fn statement(digest_hex: &str) -> Vec<u8> {
    format!(
        "{{\"_type\":\"https://in-toto.io/Statement/v1\", \"subject\":[{{\"digest\":{{\"sha256\":\
         \"{digest_hex}\"}}, \"annotations\":{{}}}}], \"predicateType\":\
         \"https://sigstore.dev/cosign/sign/v1\", \"predicate\":{{}}}}"
    )
    .into_bytes()
}

const INTOTO: &str = "application/vnd.in-toto+json";

fn bundle_json(payload_type: &str, payload: &[u8], sigs: &[Vec<u8>]) -> serde_json::Value {
    let sigs: Vec<_> = sigs
        .iter()
        .map(|s| serde_json::json!({"sig": b64(s)}))
        .collect();
    serde_json::json!({
        "mediaType": BUNDLE_ARTIFACT_TYPE,
        "verificationMaterial": {"publicKey": {"hint": "aO8QH3D4LFPlG0Jses9axK8+PJ5pJZ0jowv2/QD3Tvo="}},
        "dsseEnvelope": {"payload": b64(payload), "payloadType": payload_type, "signatures": sigs},
    })
}

/// A bundle as cosign v3 writes it for `cosign sign --key`.
fn signed_bundle(pair: &P256Pair, digest: &str) -> serde_json::Value {
    let payload = statement(digest.strip_prefix("sha256:").unwrap());
    let sig = pair.sign(&pae(INTOTO, &payload));
    bundle_json(INTOTO, &payload, &[sig])
}

fn fetched(bundle: &serde_json::Value) -> (BundleLayer, Vec<u8>) {
    let bytes = serde_json::to_vec(bundle).unwrap();
    (
        BundleLayer {
            digest: sha256_digest(&bytes),
            size: bytes.len() as u64,
        },
        bytes,
    )
}

fn reason(err: VerifyError) -> String {
    match err {
        VerifyError::NoMatchingSignatures { reasons } => reasons.join("; "),
        other => panic!("expected NoMatchingSignatures, got {other:?}"),
    }
}

#[test]
fn pae_matches_the_dsse_spec_example() {
    assert_eq!(
        pae("http://example.com/HelloWorld", b"hello world"),
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    );
}

#[test]
fn valid_bundle_verifies_and_wrong_key_does_not() {
    let signer = p256_pair("signer");
    let bundle = fetched(&signed_bundle(&signer, DIGEST));
    let verified = verify_bundles(
        &[signer.key("cosign.pub")],
        DIGEST,
        std::slice::from_ref(&bundle),
    )
    .unwrap();
    assert_eq!(verified.key, "cosign.pub");
    assert_eq!(verified.signature_digest, bundle.0.digest);
    let err = verify_bundles(&[p256_pair("other").key("o.pub")], DIGEST, &[bundle]).unwrap_err();
    assert!(reason(err).contains("not verified"));
}

#[test]
fn bundle_for_another_digest_is_refused() {
    let signer = p256_pair("signer");
    let bundle = fetched(&signed_bundle(&signer, OTHER_DIGEST));
    let err = verify_bundles(
        &[signer.key("k.pub")],
        DIGEST,
        std::slice::from_ref(&bundle),
    )
    .unwrap_err();
    assert!(reason(err).contains("statement subjects do not include"));
    assert!(verify_bundles(&[signer.key("k.pub")], OTHER_DIGEST, &[bundle]).is_ok());
}

#[test]
fn signature_must_cover_the_payload_type_too() {
    let signer = p256_pair("signer");
    let payload = statement(DIGEST.strip_prefix("sha256:").unwrap());
    // Signed over the raw payload instead of the PAE.
    let bundle = bundle_json(INTOTO, &payload, &[signer.sign(&payload)]);
    let err = verify_bundles(&[signer.key("k.pub")], DIGEST, &[fetched(&bundle)]).unwrap_err();
    assert!(reason(err).contains("not verified"));
    // Signed PAE, but the envelope's payloadType changed afterwards.
    let mut bundle = signed_bundle(&signer, DIGEST);
    bundle["dsseEnvelope"]["payloadType"] = "application/json".into();
    let err = verify_bundles(&[signer.key("k.pub")], DIGEST, &[fetched(&bundle)]).unwrap_err();
    assert!(reason(err).contains("not verified"));
    // Signed PAE over another payload type: verifies, but is not an in-toto statement.
    let sig = signer.sign(&pae("application/json", &payload));
    let bundle = bundle_json("application/json", &payload, &[sig]);
    let err = verify_bundles(&[signer.key("k.pub")], DIGEST, &[fetched(&bundle)]).unwrap_err();
    assert!(reason(err).contains("payload type 'application/json'"));
}

#[test]
fn structural_requirements_of_sigstore_go() {
    let signer = p256_pair("signer");
    let key = [signer.key("k.pub")];
    let good = signed_bundle(&signer, DIGEST);
    assert!(verify_bundles(&key, DIGEST, &[fetched(&good)]).is_ok());

    let mut two = good.clone();
    let sig = two["dsseEnvelope"]["signatures"][0].clone();
    two["dsseEnvelope"]["signatures"] = serde_json::json!([sig.clone(), sig]);
    assert!(
        reason(verify_bundles(&key, DIGEST, &[fetched(&two)]).unwrap_err())
            .contains("exactly one DSSE signature")
    );

    let mut cert = good.clone();
    cert["verificationMaterial"] = serde_json::json!({"certificate": {"rawBytes": "MIIB"}});
    assert!(
        reason(verify_bundles(&key, DIGEST, &[fetched(&cert)]).unwrap_err())
            .contains("not signed with a key")
    );

    for (media_type, ok) in [
        ("application/vnd.dev.sigstore.bundle.v0.3+json", true),
        ("application/vnd.dev.sigstore.bundle+json;version=0.3", true),
        ("application/vnd.dev.sigstore.bundle.v0.3.1+json", true),
        ("application/vnd.dev.sigstore.bundle.v0.2+json", false),
        (
            "application/vnd.dev.sigstore.bundle+json;version=0.2",
            false,
        ),
        ("application/vnd.dev.sigstore.bundle.v0.4+json", false),
        ("application/vnd.dev.sigstore.bundle.v0.3.01+json", false),
        ("", false),
    ] {
        let mut b = good.clone();
        b["mediaType"] = media_type.into();
        assert_eq!(
            verify_bundles(&key, DIGEST, &[fetched(&b)]).is_ok(),
            ok,
            "{media_type}"
        );
    }

    let mut message = good.clone();
    message["messageSignature"] = serde_json::json!({"signature": "MEUC"});
    assert!(verify_bundles(&key, DIGEST, &[fetched(&message)]).is_err());
    let obj = message.as_object_mut().unwrap();
    obj.remove("dsseEnvelope");
    assert!(
        reason(verify_bundles(&key, DIGEST, &[fetched(&message)]).unwrap_err())
            .contains("message signature bundles are not supported")
    );
}

#[test]
fn proto_names_and_unpadded_base64_are_accepted() {
    let signer = p256_pair("signer");
    let payload = statement(DIGEST.strip_prefix("sha256:").unwrap());
    let sig = signer.sign(&pae(INTOTO, &payload));
    let unpadded = |b: &[u8]| b64(b).trim_end_matches('=').to_string();
    let bundle = serde_json::json!({
        "media_type": "application/vnd.dev.sigstore.bundle+json;version=0.3",
        "verification_material": {"public_key": {}},
        "dsse_envelope": {"payload": unpadded(&payload), "payload_type": INTOTO,
                          "signatures": [{"sig": unpadded(&sig)}]},
    });
    assert!(verify_bundles(&[signer.key("k.pub")], DIGEST, &[fetched(&bundle)]).is_ok());
}

#[test]
fn tampered_blob_is_refused() {
    let signer = p256_pair("signer");
    let (layer, mut bytes) = fetched(&signed_bundle(&signer, DIGEST));
    bytes.push(b'\n');
    let err = verify_bundles(&[signer.key("k.pub")], DIGEST, &[(layer, bytes)]).unwrap_err();
    assert!(reason(err).contains("does not match its descriptor"));
}

#[test]
fn referrers_index_and_bundle_manifest() {
    assert_eq!(
        referrers_tag(DIGEST).unwrap(),
        "sha256-00a5dd81461ee16963a66d4132c578d37cde1153037aa8f6fa430f8a0f46536e"
    );
    let d = |c: char| format!("sha256:{}", c.to_string().repeat(64));
    // The fallback-tag index cosign writes, plus referrers of other kinds.
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": REFERRERS_INDEX_MEDIA_TYPE,
        "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "size": 877,
             "digest": d('a'), "artifactType": BUNDLE_ARTIFACT_TYPE},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "size": 500,
             "digest": d('b'), "artifactType": "application/spdx+json"},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "size": 500,
             "digest": d('c')},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "size": 500,
             "digest": "sha256:../x", "artifactType": BUNDLE_ARTIFACT_TYPE},
        ]
    });
    let digests = referrer_manifests(&serde_json::to_vec(&index).unwrap()).unwrap();
    assert_eq!(digests, [d('a'), d('c')]);
    assert!(matches!(
        referrer_manifests(b"{"),
        Err(VerifyError::InvalidReferrersIndex(_))
    ));
    let many: Vec<_> = (0..=MAX_REFERRERS)
        .map(|_| serde_json::json!({"digest": d('a'), "size": 1}))
        .collect();
    let many = serde_json::to_vec(&serde_json::json!({ "manifests": many })).unwrap();
    assert!(matches!(
        referrer_manifests(&many),
        Err(VerifyError::TooManySignatures { .. })
    ));

    // The referrer manifest cosign pushes.
    let manifest = |layers: serde_json::Value| {
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": BUNDLE_ARTIFACT_TYPE,
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2,
                       "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},
            "layers": layers,
            "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "size": 612,
                        "digest": DIGEST},
        }))
        .unwrap()
    };
    let layer =
        serde_json::json!({"mediaType": BUNDLE_ARTIFACT_TYPE, "size": 667, "digest": d('e')});
    assert_eq!(
        bundle_layer(&manifest(serde_json::json!([layer.clone()]))).unwrap(),
        BundleLayer {
            digest: d('e'),
            size: 667
        }
    );
    assert!(bundle_layer(&manifest(serde_json::json!([layer.clone(), layer.clone()]))).is_err());
    assert!(bundle_layer(&manifest(serde_json::json!([]))).is_err());
    let mut sbom = layer.clone();
    sbom["mediaType"] = "application/spdx+json".into();
    assert!(bundle_layer(&manifest(serde_json::json!([sbom]))).is_err());
    let mut big = layer;
    big["size"] = (MAX_BUNDLE_BYTES + 1).into();
    assert!(bundle_layer(&manifest(serde_json::json!([big]))).is_err());
}
