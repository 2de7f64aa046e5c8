//! The cosign verifier against signatures made by the REAL cosign CLI (v3, built by
//! `e2e/cosign/build.sh`) in a real registry (distribution v3, `e2e/registry/build.sh`): a key
//! pair from `cosign generate-key-pair`, an artifact pushed with raw HTTP, `cosign sign --key`
//! offline in both formats (the classic `sha256-<hex>.sig` tag and v3's Sigstore bundle
//! referrer), then our pure functions fed with what a plain HTTP client fetches. `cosign verify`
//! is the oracle: every case checks that we agree with it.
//!
//! Skipped, with the reason printed, when cosign or the registry binary is missing.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rflux_e2e::registry::{Registry, RegistryClient, RegistryMode, media_types};
use source_controller::ocirepository::verify;

/// Where `e2e/cosign/build.sh` puts cosign.
fn cosign_bin() -> PathBuf {
    let dir = std::env::var_os("RFLUX_OCI_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/gitops-e2e/oci-bin")
        });
    dir.join("cosign")
}

fn skip_reason() -> Option<String> {
    let cosign = cosign_bin();
    if !cosign.is_file() {
        return Some(format!(
            "cosign is not built ({}): run e2e/cosign/build.sh",
            cosign.display()
        ));
    }
    rflux_e2e::registry::skip_reason()
}

/// Runs cosign offline: no password on keys, no Docker config of the user, no TUF cache.
fn cosign(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(cosign_bin())
        .args(args)
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "")
        .env("HOME", dir)
        .env("DOCKER_CONFIG", dir.join(".docker"))
        .env("TUF_ROOT", dir.join(".sigstore"))
        .env_remove("COSIGN_EXPERIMENTAL")
        .output()
        .expect("running cosign")
}

fn cosign_ok(dir: &Path, args: &[&str]) {
    let out = cosign(dir, args);
    assert!(
        out.status.success(),
        "cosign {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `cosign verify --key <pub>` offline, in the given format: does cosign accept it?
fn cosign_verifies(dir: &Path, key: &str, reference: &str, bundle_format: bool) -> bool {
    let format = format!("--new-bundle-format={bundle_format}");
    cosign(
        dir,
        &[
            "verify",
            "--key",
            key,
            "--insecure-ignore-tlog=true",
            &format,
            reference,
        ],
    )
    .status
    .success()
}

fn key_pair(dir: &Path) -> Vec<verify::CosignKey> {
    std::fs::create_dir_all(dir).unwrap();
    cosign_ok(dir, &["generate-key-pair"]);
    let pem = std::fs::read(dir.join("cosign.pub")).unwrap();
    let secret = BTreeMap::from([("cosign.pub".to_string(), pem)]);
    verify::public_keys(&secret).unwrap()
}

/// What the controller would do for the classic format: the `.sig` manifest, its candidates,
/// each payload blob (bounded).
async fn classic_payloads(
    client: &RegistryClient,
    repo: &str,
    digest: &str,
) -> Vec<(verify::Candidate, Vec<u8>)> {
    let tag = verify::signature_tag(digest).unwrap();
    let manifest = client.get_manifest(repo, &tag).await.unwrap();
    let mut out = Vec::new();
    for candidate in verify::signature_candidates(&manifest.bytes).unwrap() {
        let blob = client
            .get_blob(
                repo,
                &candidate.payload_digest,
                verify::MAX_PAYLOAD_BYTES as usize,
            )
            .await
            .unwrap();
        out.push((candidate, blob.to_vec()));
    }
    out
}

/// The bundle format through the referrers fallback tag (distribution v3 has no referrers
/// API: `GET /v2/<repo>/referrers/<digest>` is 404 there).
async fn bundles(
    client: &RegistryClient,
    repo: &str,
    digest: &str,
) -> Vec<(verify::BundleLayer, Vec<u8>)> {
    let index = client
        .get_manifest(repo, &verify::referrers_tag(digest).unwrap())
        .await
        .unwrap();
    let mut out = Vec::new();
    for referrer in verify::referrer_manifests(&index.bytes).unwrap() {
        let manifest = client.get_manifest(repo, &referrer).await.unwrap();
        let Ok(layer) = verify::bundle_layer(&manifest.bytes) else {
            continue;
        };
        let blob = client
            .get_blob(repo, &layer.digest, verify::MAX_BUNDLE_BYTES as usize)
            .await
            .unwrap();
        out.push((layer, blob.to_vec()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_cosign_signatures_verify_with_the_right_key_only() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let signer_dir = tmp.path().join("signer");
    let other_dir = tmp.path().join("other");
    let keys = key_pair(&signer_dir);
    let other_keys = key_pair(&other_dir);
    let other_pub = other_dir.join("cosign.pub");
    let other_pub = other_pub.to_str().unwrap();

    let reg = tokio::task::spawn_blocking(|| Registry::start(RegistryMode::Http))
        .await
        .unwrap()
        .unwrap();
    let client = reg.client().unwrap();
    let repo = "apps/signed";
    let digest = client
        .push_raw_artifact(
            repo,
            "v1",
            b"signed content".to_vec().into(),
            media_types::FLUX_CONTENT,
            &[],
        )
        .await
        .unwrap();
    let unsigned = client
        .push_raw_artifact(
            repo,
            "v2",
            b"other content".to_vec().into(),
            media_types::FLUX_CONTENT,
            &[],
        )
        .await
        .unwrap();
    let reference = format!("{}/{repo}@{digest}", reg.host());
    let unsigned_ref = format!("{}/{repo}@{unsigned}", reg.host());

    // Classic format: `sha256-<hex>.sig`.
    cosign_ok(
        &signer_dir,
        &[
            "sign",
            "--key",
            "cosign.key",
            "--use-signing-config=false",
            "--tlog-upload=false",
            "--new-bundle-format=false",
            "--yes",
            &reference,
        ],
    );
    let payloads = classic_payloads(&client, repo, &digest).await;
    assert_eq!(payloads.len(), 1);
    assert!(cosign_verifies(
        &signer_dir,
        "cosign.pub",
        &reference,
        false
    ));
    let verified = verify::verify(&keys, &digest, &payloads).unwrap();
    assert_eq!(verified.key, "cosign.pub");
    assert_eq!(verified.signature_digest, payloads[0].0.payload_digest);

    assert!(!cosign_verifies(&signer_dir, other_pub, &reference, false));
    let err = verify::verify(&other_keys, &digest, &payloads).unwrap_err();
    assert!(
        matches!(err, verify::VerifyError::NoMatchingSignatures { .. }),
        "{err}"
    );

    // The same signatures presented for another digest: the payload names the signed one.
    let err = verify::verify(&keys, &unsigned, &payloads).unwrap_err();
    assert!(err.to_string().contains("payload signs"), "{err}");
    // ...and copied under the other artifact's signature tag, cosign verify refuses them too.
    let sig_manifest = client
        .get_manifest(repo, &verify::signature_tag(&digest).unwrap())
        .await
        .unwrap();
    client
        .push_raw_manifest(
            repo,
            &verify::signature_tag(&unsigned).unwrap(),
            &sig_manifest.media_type,
            sig_manifest.bytes.clone(),
        )
        .await
        .unwrap();
    assert!(!cosign_verifies(
        &signer_dir,
        "cosign.pub",
        &unsigned_ref,
        false
    ));
    let copied = classic_payloads(&client, repo, &unsigned).await;
    assert_eq!(copied.len(), 1);
    assert!(verify::verify(&keys, &unsigned, &copied).is_err());

    // cosign v3's default: a Sigstore bundle referrer (fallback tag `sha256-<hex>`).
    cosign_ok(
        &signer_dir,
        &[
            "sign",
            "--key",
            "cosign.key",
            "--use-signing-config=false",
            "--tlog-upload=false",
            "--yes",
            &reference,
        ],
    );
    let found = bundles(&client, repo, &digest).await;
    assert_eq!(found.len(), 1);
    assert!(cosign_verifies(&signer_dir, "cosign.pub", &reference, true));
    let verified = verify::verify_bundles(&keys, &digest, &found).unwrap();
    assert_eq!(verified.key, "cosign.pub");
    assert_eq!(verified.signature_digest, found[0].0.digest);

    assert!(!cosign_verifies(&signer_dir, other_pub, &reference, true));
    assert!(verify::verify_bundles(&other_keys, &digest, &found).is_err());
    let err = verify::verify_bundles(&keys, &unsigned, &found).unwrap_err();
    assert!(err.to_string().contains("subjects do not include"), "{err}");

    // Signed a second time, in both formats: both signatures are found and either verifies.
    cosign_ok(
        &other_dir,
        &[
            "sign",
            "--key",
            "cosign.key",
            "--use-signing-config=false",
            "--tlog-upload=false",
            "--yes",
            &reference,
        ],
    );
    let found = bundles(&client, repo, &digest).await;
    assert_eq!(found.len(), 2);
    assert!(verify::verify_bundles(&keys, &digest, &found).is_ok());
    assert!(verify::verify_bundles(&other_keys, &digest, &found).is_ok());
    let both: Vec<_> = keys.iter().chain(&other_keys).cloned().collect();
    assert!(verify::verify_bundles(&both, &digest, &found).is_ok());
}

/// Imports an OpenSSL-generated key into cosign (`import-key-pair` → `import-cosign.key`,
/// `import-cosign.pub`); `None` when openssl is missing.
fn imported_key_pair(dir: &Path, genpkey: &[&str]) -> Option<Vec<verify::CosignKey>> {
    std::fs::create_dir_all(dir).unwrap();
    let out = Command::new("openssl")
        .arg("genpkey")
        .args(genpkey)
        .args(["-out", "key.pem"])
        .current_dir(dir)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cosign_ok(
        dir,
        &[
            "import-key-pair",
            "--key",
            "key.pem",
            "--output-key-prefix",
            "import-cosign",
        ],
    );
    let pem = std::fs::read(dir.join("import-cosign.pub")).unwrap();
    let secret = BTreeMap::from([("cosign.pub".to_string(), pem)]);
    Some(verify::public_keys(&secret).unwrap())
}

/// RSA, P-384 and Ed25519 keys imported into cosign: we accept exactly what `cosign verify
/// --key` accepts. Flux loads the key with sigstore's `LoadVerifier(key, SHA256)`, as we do,
/// while cosign v3 signs with the key's default algorithm (`LoadDefaultSignerVerifier`: SHA-384
/// for P-384): RSA signatures verify; P-384 and Ed25519 ones do not, neither for `cosign verify`
/// (v3.1.3) nor for us (nor, by its code, for Flux).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_keys_agree_with_cosign_verify() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let reg = tokio::task::spawn_blocking(|| Registry::start(RegistryMode::Http))
        .await
        .unwrap()
        .unwrap();
    let client = reg.client().unwrap();
    let mut rsa_verified = 0;
    for (name, genpkey) in [
        (
            "rsa",
            &["-algorithm", "rsa", "-pkeyopt", "rsa_keygen_bits:2048"][..],
        ),
        (
            "p384",
            &["-algorithm", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"][..],
        ),
        ("ed25519", &["-algorithm", "ed25519"][..]),
    ] {
        let dir = tmp.path().join(name);
        let Some(keys) = imported_key_pair(&dir, genpkey) else {
            eprintln!("skipped: openssl is not installed");
            return;
        };
        let repo = format!("keys/{name}");
        let digest = client
            .push_raw_artifact(
                &repo,
                "v1",
                name.as_bytes().to_vec().into(),
                media_types::FLUX_CONTENT,
                &[],
            )
            .await
            .unwrap();
        let reference = format!("{}/{repo}@{digest}", reg.host());
        for bundle_format in [false, true] {
            let format = format!("--new-bundle-format={bundle_format}");
            cosign_ok(
                &dir,
                &[
                    "sign",
                    "--key",
                    "import-cosign.key",
                    "--use-signing-config=false",
                    "--tlog-upload=false",
                    &format,
                    "--yes",
                    &reference,
                ],
            );
            let cosign_says = cosign_verifies(&dir, "import-cosign.pub", &reference, bundle_format);
            let ours = if bundle_format {
                verify::verify_bundles(&keys, &digest, &bundles(&client, &repo, &digest).await)
            } else {
                verify::verify(
                    &keys,
                    &digest,
                    &classic_payloads(&client, &repo, &digest).await,
                )
            };
            assert_eq!(
                ours.is_ok(),
                cosign_says,
                "{name}, bundle format {bundle_format}: ours {ours:?}, cosign verify {cosign_says}"
            );
            if name == "rsa" && ours.is_ok() {
                rsa_verified += 1;
            }
        }
    }
    // Not vacuous: RSA verifies in both formats.
    assert_eq!(rsa_verified, 2);
}
