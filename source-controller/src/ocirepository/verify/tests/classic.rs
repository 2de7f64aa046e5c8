use super::*;

/// The payload `cosign sign` writes (byte for byte, as seen from cosign v3.1.3).
fn payload(digest: &str) -> Vec<u8> {
    format!(
        "{{\"critical\":{{\"identity\":{{\"docker-reference\":\"127.0.0.1:5000/apps/podinfo\"}},\
         \"image\":{{\"docker-manifest-digest\":\"{digest}\"}},\
         \"type\":\"cosign container image signature\"}},\"optional\":null}}"
    )
    .into_bytes()
}

struct Layer {
    media_type: &'static str,
    payload: Vec<u8>,
    signature: Option<String>,
}

fn cosign_layer(payload: Vec<u8>, signature: &[u8]) -> Layer {
    Layer {
        media_type: SIGNATURE_MEDIA_TYPE,
        payload,
        signature: Some(b64(signature)),
    }
}

/// The signature manifest cosign pushes under `sha256-<hex>.sig`.
fn sig_manifest(layers: &[Layer]) -> Vec<u8> {
    let layers: Vec<_> = layers
        .iter()
        .map(|l| {
            let mut layer = serde_json::json!({
                "mediaType": l.media_type,
                "size": l.payload.len(),
                "digest": sha256_digest(&l.payload),
            });
            if let Some(sig) = &l.signature {
                layer["annotations"] = serde_json::json!({ SIGNATURE_ANNOTATION: sig });
            }
            layer
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "size": 233,
            "digest": "sha256:96d1b3ab8bfba221d2db186054bdc5e5d40e1158acd75b24edc87f6083dd47f8"
        },
        "layers": layers,
    }))
    .unwrap()
}

/// What the caller does: candidates from the manifest, each paired with the blob it fetched.
fn fetched(manifest: &[u8], layers: &[Layer]) -> Vec<(Candidate, Vec<u8>)> {
    signature_candidates(manifest)
        .unwrap()
        .into_iter()
        .map(|c| {
            let blob = layers
                .iter()
                .find(|l| sha256_digest(&l.payload) == c.payload_digest)
                .unwrap()
                .payload
                .clone();
            (c, blob)
        })
        .collect()
}

fn reasons(err: VerifyError) -> Vec<String> {
    match err {
        VerifyError::NoMatchingSignatures { reasons } => reasons,
        other => panic!("expected NoMatchingSignatures, got {other:?}"),
    }
}

#[test]
fn signature_tag_is_cosigns() {
    assert_eq!(
        signature_tag(DIGEST).unwrap(),
        "sha256-00a5dd81461ee16963a66d4132c578d37cde1153037aa8f6fa430f8a0f46536e.sig"
    );
    for bad in [
        "00a5dd81461ee16963a66d4132c578d37cde1153037aa8f6fa430f8a0f46536e",
        "sha512:00a5dd81461ee16963a66d4132c578d37cde1153037aa8f6fa430f8a0f46536e",
        "sha256:00A5DD81461EE16963A66D4132C578D37CDE1153037AA8F6FA430F8A0F46536E",
        "sha256:00a5",
        "sha256:../../../x",
    ] {
        assert!(
            matches!(signature_tag(bad), Err(VerifyError::InvalidDigest { .. })),
            "{bad}"
        );
    }
}

#[test]
fn valid_signature_verifies() {
    let pair = p256_pair("signer");
    let p = payload(DIGEST);
    let layers = [cosign_layer(p.clone(), &pair.sign(&p))];
    let manifest = sig_manifest(&layers);
    let candidates = signature_candidates(&manifest).unwrap();
    assert_eq!(
        candidates,
        [Candidate {
            payload_digest: sha256_digest(&p),
            payload_size: p.len() as u64,
            // RFC 6979: the same key signs the same payload the same way.
            signature_b64: b64(&pair.sign(&p)),
        }]
    );
    let verified = verify(
        &[pair.key("cosign.pub")],
        DIGEST,
        &fetched(&manifest, &layers),
    )
    .unwrap();
    assert_eq!(
        verified,
        VerifiedBy {
            key: "cosign.pub".into(),
            signature_digest: sha256_digest(&p),
        }
    );
}

#[test]
fn wrong_key_is_refused() {
    let signer = p256_pair("signer");
    let other = p256_pair("someone else");
    let p = payload(DIGEST);
    let layers = [cosign_layer(p.clone(), &signer.sign(&p))];
    let manifest = sig_manifest(&layers);
    let err = verify(
        &[other.key("other.pub")],
        DIGEST,
        &fetched(&manifest, &layers),
    )
    .unwrap_err();
    let reasons = reasons(err);
    assert_eq!(reasons.len(), 1);
    assert!(
        reasons[0].contains("signature not verified by any of 1 key(s)"),
        "{reasons:?}"
    );
}

#[test]
fn the_key_that_verifies_is_reported() {
    let signer = p256_pair("signer");
    let p = payload(DIGEST);
    let layers = [cosign_layer(p.clone(), &signer.sign(&p))];
    let manifest = sig_manifest(&layers);
    let keys = [
        p256_pair("a").key("a.pub"),
        signer.key("b.pub"),
        p256_pair("c").key("c.pub"),
    ];
    let verified = verify(&keys, DIGEST, &fetched(&manifest, &layers)).unwrap();
    assert_eq!(verified.key, "b.pub");
}

#[test]
fn payload_for_another_digest_is_refused() {
    // A genuine signature by the trusted key, but of another image, copied under this tag.
    let pair = p256_pair("signer");
    let p = payload(OTHER_DIGEST);
    let layers = [cosign_layer(p.clone(), &pair.sign(&p))];
    let manifest = sig_manifest(&layers);
    let err = verify(
        &[pair.key("cosign.pub")],
        DIGEST,
        &fetched(&manifest, &layers),
    )
    .unwrap_err();
    let reasons = reasons(err);
    assert!(
        reasons[0].contains(&format!("payload signs '{OTHER_DIGEST}', not '{DIGEST}'")),
        "{reasons:?}"
    );
    // The same layer verifies for the digest it names.
    assert!(
        verify(
            &[pair.key("cosign.pub")],
            OTHER_DIGEST,
            &fetched(&manifest, &layers)
        )
        .is_ok()
    );
}

#[test]
fn payload_of_another_type_is_refused() {
    let pair = p256_pair("signer");
    let p = String::from_utf8(payload(DIGEST))
        .unwrap()
        .replace(
            "cosign container image signature",
            "atomic container signature",
        )
        .into_bytes();
    let layers = [cosign_layer(p.clone(), &pair.sign(&p))];
    let manifest = sig_manifest(&layers);
    let err = verify(
        &[pair.key("cosign.pub")],
        DIGEST,
        &fetched(&manifest, &layers),
    )
    .unwrap_err();
    assert!(reasons(err)[0].contains("payload type 'atomic container signature'"));
}

#[test]
fn corrupted_signature_is_refused() {
    let pair = p256_pair("signer");
    let p = payload(DIGEST);
    let good = pair.sign(&p);
    let key = [pair.key("cosign.pub")];
    // Flip one bit in r, in s, and truncate the DER.
    let last = good.len() - 1;
    for (what, sig) in [
        ("r", {
            let mut s = good.clone();
            s[6] ^= 1;
            s
        }),
        ("s", {
            let mut s = good.clone();
            s[last] ^= 1;
            s
        }),
        ("truncated", good[..good.len() - 2].to_vec()),
    ] {
        let layers = [cosign_layer(p.clone(), &sig)];
        let manifest = sig_manifest(&layers);
        let err = verify(&key, DIGEST, &fetched(&manifest, &layers)).unwrap_err();
        assert!(reasons(err)[0].contains("not verified"), "{what}");
    }
    // Not base64 at all.
    let layers = [Layer {
        media_type: SIGNATURE_MEDIA_TYPE,
        payload: p.clone(),
        signature: Some("%%%".into()),
    }];
    let manifest = sig_manifest(&layers);
    let err = verify(&key, DIGEST, &fetched(&manifest, &layers)).unwrap_err();
    assert!(reasons(err)[0].contains("not valid base64"));
    // The untouched signature still verifies (the cases above failed for their corruption).
    let layers = [cosign_layer(p.clone(), &good)];
    let manifest = sig_manifest(&layers);
    assert!(verify(&key, DIGEST, &fetched(&manifest, &layers)).is_ok());
}

#[test]
fn tampered_payload_is_refused() {
    let pair = p256_pair("signer");
    let p = payload(DIGEST);
    let layers = [cosign_layer(p.clone(), &pair.sign(&p))];
    let manifest = sig_manifest(&layers);
    let mut pairs = fetched(&manifest, &layers);
    // A registry serving other bytes than the manifest names (same length).
    let flipped = pairs[0].1.iter().position(|&b| b == b'n').unwrap();
    pairs[0].1[flipped] = b'N';
    let err = verify(&[pair.key("k.pub")], DIGEST, &pairs).unwrap_err();
    assert!(reasons(err)[0].contains("payload digest mismatch"));
    pairs[0].1.push(b' ');
    let err = verify(&[pair.key("k.pub")], DIGEST, &pairs).unwrap_err();
    assert!(reasons(err)[0].contains("the manifest says"));
}

#[test]
fn non_cosign_layers_are_not_candidates() {
    let pair = p256_pair("signer");
    let p = payload(DIGEST);
    let sig = pair.sign(&p);
    let layers = [Layer {
        media_type: "application/vnd.oci.image.layer.v1.tar+gzip",
        payload: p.clone(),
        signature: Some(b64(&sig)),
    }];
    let manifest = sig_manifest(&layers);
    assert_eq!(signature_candidates(&manifest).unwrap(), []);
    let err = verify(&[pair.key("k.pub")], DIGEST, &fetched(&manifest, &layers)).unwrap_err();
    assert_eq!(reasons(err), ["no signatures found"]);
    // The same layer with cosign's media type is a candidate that verifies.
    let layers = [cosign_layer(p.clone(), &sig)];
    assert_eq!(
        signature_candidates(&sig_manifest(&layers)).unwrap().len(),
        1
    );
}

#[test]
fn layers_without_the_signature_annotation_are_not_candidates() {
    let pair = p256_pair("signer");
    let good = payload(DIGEST);
    let other = payload(OTHER_DIGEST);
    let layers = [
        Layer {
            media_type: SIGNATURE_MEDIA_TYPE,
            payload: other.clone(),
            signature: None,
        },
        cosign_layer(good.clone(), &pair.sign(&good)),
    ];
    let manifest = sig_manifest(&layers);
    let candidates = signature_candidates(&manifest).unwrap();
    assert_eq!(candidates.len(), 1);
    assert_eq!(candidates[0].payload_digest, sha256_digest(&good));
    // An empty annotation is no signature either.
    let manifest = String::from_utf8(manifest)
        .unwrap()
        .replace(&b64(&pair.sign(&good)), "");
    assert!(manifest.contains(&format!("\"{SIGNATURE_ANNOTATION}\":\"\"")));
    assert_eq!(signature_candidates(manifest.as_bytes()).unwrap(), []);
}

#[test]
fn a_later_layer_can_match_after_failing_ones() {
    let signer = p256_pair("signer");
    let stranger = p256_pair("stranger");
    let p = payload(DIGEST);
    let p_other = payload(OTHER_DIGEST);
    let layers = [
        cosign_layer(p.clone(), &stranger.sign(&p)),
        cosign_layer(p_other.clone(), &signer.sign(&p_other)),
        cosign_layer(p.clone(), &signer.sign(&p)),
    ];
    let manifest = sig_manifest(&layers);
    let pairs = fetched(&manifest, &layers);
    assert_eq!(pairs.len(), 3);
    let verified = verify(&[signer.key("cosign.pub")], DIGEST, &pairs).unwrap();
    assert_eq!(verified.signature_digest, sha256_digest(&p));
    // Without the last layer, one reason per layer.
    let err = verify(&[signer.key("cosign.pub")], DIGEST, &pairs[..2]).unwrap_err();
    assert_eq!(reasons(err).len(), 2);
}

#[test]
fn bounds_on_hostile_manifests() {
    let pair = p256_pair("signer");
    let p = payload(DIGEST);
    let sig = pair.sign(&p);
    let many: Vec<_> = (0..=MAX_SIGNATURE_LAYERS)
        .map(|_| cosign_layer(p.clone(), &sig))
        .collect();
    assert_eq!(
        signature_candidates(&sig_manifest(&many)).unwrap_err(),
        VerifyError::TooManySignatures {
            count: MAX_SIGNATURE_LAYERS + 1,
            max: MAX_SIGNATURE_LAYERS
        }
    );
    assert_eq!(
        signature_candidates(&sig_manifest(&many[1..]))
            .unwrap()
            .len(),
        MAX_SIGNATURE_LAYERS
    );
    // A payload declared larger than the bound is not fetched.
    let big = serde_json::to_vec(&serde_json::json!({"layers": [{
        "mediaType": SIGNATURE_MEDIA_TYPE, "size": MAX_PAYLOAD_BYTES + 1,
        "digest": DIGEST, "annotations": {SIGNATURE_ANNOTATION: b64(&sig)}
    }]}))
    .unwrap();
    assert_eq!(signature_candidates(&big).unwrap(), []);
    // A payload larger than the bound is refused even when the candidate claims it.
    let huge = vec![b' '; MAX_PAYLOAD_BYTES as usize + 1];
    let candidate = Candidate {
        payload_digest: sha256_digest(&huge),
        payload_size: huge.len() as u64,
        signature_b64: b64(&sig),
    };
    let err = verify(&[pair.key("k.pub")], DIGEST, &[(candidate, huge)]).unwrap_err();
    assert!(reasons(err)[0].contains("at most"));
    // Not JSON, oversized.
    assert!(matches!(
        signature_candidates(b"<html>"),
        Err(VerifyError::InvalidSignatureManifest(_))
    ));
    let oversized = vec![b' '; MAX_SIGNATURE_MANIFEST_BYTES + 1];
    assert!(matches!(
        signature_candidates(&oversized),
        Err(VerifyError::InvalidSignatureManifest(m)) if m.contains("at most")
    ));
}

#[test]
fn verify_checks_its_inputs() {
    let pair = p256_pair("signer");
    assert!(matches!(
        verify(&[pair.key("k.pub")], "latest", &[]),
        Err(VerifyError::InvalidDigest { .. })
    ));
    assert_eq!(
        verify(&[], DIGEST, &[]).unwrap_err(),
        VerifyError::NoPublicKeys
    );
}

#[test]
fn flux_message_and_error_text() {
    assert_eq!(
        flux_no_match_message("127.0.0.1:5000/apps/podinfo@sha256:abc"),
        "no matching signatures were found for '127.0.0.1:5000/apps/podinfo@sha256:abc'"
    );
    let err = VerifyError::NoMatchingSignatures {
        reasons: vec!["a".into(), "b".into()],
    };
    assert_eq!(err.to_string(), "no matching signatures were found: a; b");
}
